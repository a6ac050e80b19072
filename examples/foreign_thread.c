/* Scheduling from foreign threads onto the loop thread.
 *
 * Two threads that libuv knows nothing about schedule tasks onto a loop
 * worker; every run_cb and done_cb then runs on the loop thread, and each
 * thread's tasks run in the order that thread scheduled them.
 *
 * keep_alive = 1 keeps uv_run() from returning while the scheduler is idle,
 * for instance before the threads have scheduled anything: a call made off
 * the loop thread can wake a running loop but cannot revive one whose uv_run()
 * has already returned. The last done_cb closes the scheduler, and with it
 * the reason for the loop to stay alive.
 */

#include "example.h"

#define NTHREADS 2
#define PER_THREAD 100

typedef struct msg_s {
  uvs_task_t task; /* First member: a uvs_task_t* is also a msg_t*. */
  int thread;
  int seq;
} msg_t;

static uvs_sched_t sched;
static uvs_worker_t worker;
static msg_t msgs[NTHREADS][PER_THREAD];
static uv_thread_t loop_thread;
static int next_seq[NTHREADS];
static int nran, ndone, off_loop, out_of_order;


static void msg_run(uvs_task_t* task) {
  msg_t* m = (msg_t*) task;
  uv_thread_t self = uv_thread_self();
  if (!uv_thread_equal(&self, &loop_thread))
    off_loop++;
  if (m->seq != next_seq[m->thread]++)
    out_of_order++;
  nran++;
}


static void msg_done(uvs_task_t* task, int status) {
  (void) task;
  EXPECT(status == 0);
  if (++ndone == NTHREADS * PER_THREAD)
    CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


static void producer(void* arg) {
  int t = (int) (intptr_t) arg;
  int i;
  for (i = 0; i < PER_THREAD; i++) {
    msgs[t][i].thread = t;
    msgs[t][i].seq = i;
    CHECK(uvs_task_init(&msgs[t][i].task, msg_run, msg_done));
    CHECK(uvs_schedule(&worker, &msgs[t][i].task));
  }
}


int main(void) {
  uv_loop_t* loop = uv_default_loop();
  uvs_sched_options_t opts = {.keep_alive = 1};
  uv_thread_t threads[NTHREADS];
  int t;

  loop_thread = uv_thread_self();
  CHECK(uvs_sched_init(loop, &sched, &opts));
  CHECK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  for (t = 0; t < NTHREADS; t++)
    CHECK(uv_thread_create(&threads[t], producer, (void*) (intptr_t) t));

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  for (t = 0; t < NTHREADS; t++) CHECK(uv_thread_join(&threads[t]));
  printf(
      "ran %d tasks from %d threads: %d off the loop thread, %d out of order\n",
      nran, NTHREADS, off_loop, out_of_order);
  EXPECT(nran == NTHREADS * PER_THREAD && off_loop == 0 && out_of_order == 0);
  CHECK(uv_loop_close(loop));
  return 0;
}
