/* uvs_post: fire-and-forget calls, then a draining close.
 *
 * uvs_post() needs no task of the caller's: the library takes a node from its
 * own pool, runs fn(arg) on the worker like any task, and gives nothing back.
 * To learn when they have all run, close the worker with UVS_DRAIN: the
 * queued posts run first, then the close callback is called on the loop
 * thread. Once the close has begun, posts are refused with UV_ESHUTDOWN.
 */

#include "example.h"

#define NPOSTS 1000

static uvs_sched_t sched;
static uvs_worker_t worker;
static unsigned long counter; /* No lock: a worker runs one call at a time. */
static int closed;


static void add(void* arg) {
  counter += (unsigned long) (uintptr_t) arg;
}


static void worker_closed(uvs_worker_t* w) {
  EXPECT(w == &worker);
  printf("worker closed after %lu increments\n", counter);
  closed = 1;
  CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


int main(void) {
  uv_loop_t* loop = uv_default_loop();
  int i;

  CHECK(uvs_sched_init(loop, &sched, NULL));
  CHECK(uvs_worker_init(&sched, &worker, UVS_POOL));
  for (i = 0; i < NPOSTS; i++)
    CHECK(uvs_post(&worker, add, (void*) (uintptr_t) 1));
  CHECK(uvs_worker_close(&worker, UVS_DRAIN, worker_closed));
  EXPECT(uvs_post(&worker, add, (void*) (uintptr_t) 1) == UV_ESHUTDOWN);

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  EXPECT(closed && counter == NPOSTS);
  CHECK(uv_loop_close(loop));
  printf("post: %d posts ran before the close callback\n", NPOSTS);
  return 0;
}
