/* Two loops in one process, splitting libuv's one thread pool.
 *
 * libuv has one thread pool per process, shared by every loop, and a
 * scheduler's cap on pool drains (max_concurrency) is the whole pool's
 * size when left at 0. Two schedulers at the default could then post
 * twice as many drains as there are threads, and the drains of one loop
 * would wait in libuv's queue behind the other's.
 *
 * So main() sizes the pool before anything uses it, and each loop's
 * scheduler takes its share with max_concurrency: 2 + 2 of 5 threads,
 * which leaves one for the file system and DNS work of both loops. Each
 * loop runs on a thread of its own, which creates and closes its scheduler
 * there. The program checks that neither loop ever had more than its share
 * of tasks running at once.
 */

#include "example.h"

#define POOL_SIZE "5"
#define SHARE 2 /* pool threads per loop */
#define NLOOPS 2
#define NWORKERS 4 /* per loop: more than its share, so the cap matters */
#define PER_WORKER 10

typedef struct job_s job_t;
typedef struct server_s server_t;

struct job_s {
  uvs_task_t task; /* First member: a uvs_task_t* is also a job_t*. */
  server_t* server;
};

struct server_s {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t workers[NWORKERS];
  job_t jobs[NWORKERS][PER_WORKER];
  uv_thread_t thread;
  uv_mutex_t lock; /* running and peak: tasks of different workers */
  int running;
  int peak;
  int ndone;
};

static server_t servers[NLOOPS];


static void job_run(uvs_task_t* task) { /* on a pool thread */
  server_t* s = ((job_t*) task)->server;

  uv_mutex_lock(&s->lock);
  if (++s->running > s->peak)
    s->peak = s->running;
  uv_mutex_unlock(&s->lock);
  uv_sleep(5); /* blocking work that holds its pool thread */
  uv_mutex_lock(&s->lock);
  s->running--;
  uv_mutex_unlock(&s->lock);
}


static void job_done(uvs_task_t* task, int status) { /* on s's loop thread */
  server_t* s = ((job_t*) task)->server;

  EXPECT(status == 0);
  if (++s->ndone == NWORKERS * PER_WORKER)
    CHECK(uvs_sched_close(&s->sched, UVS_DRAIN, NULL));
}


static void serve(void* arg) { /* the loop thread of one server */
  server_t* s = arg;
  uvs_sched_options_t opts = {
      .max_concurrency = SHARE, /* this loop's share of the pool */
  };
  int w;
  int i;

  CHECK(uv_loop_init(&s->loop));
  CHECK(uvs_sched_init(&s->loop, &s->sched, &opts));
  for (w = 0; w < NWORKERS; w++) {
    CHECK(uvs_worker_init(&s->sched, &s->workers[w], UVS_POOL));
    for (i = 0; i < PER_WORKER; i++) {
      s->jobs[w][i].server = s;
      CHECK(uvs_task_init(&s->jobs[w][i].task, job_run, job_done));
      CHECK(uvs_schedule(&s->workers[w], &s->jobs[w][i].task));
    }
  }
  EXPECT(uv_run(&s->loop, UV_RUN_DEFAULT) == 0);
  CHECK(uv_loop_close(&s->loop));
}


int main(void) {
  int n;

  /* Before any loop uses the pool: libuv reads it once, when the pool
   * starts, and each uvs_sched_init() reads it too. */
  CHECK(uv_os_setenv("UV_THREADPOOL_SIZE", POOL_SIZE));

  for (n = 0; n < NLOOPS; n++) {
    CHECK(uv_mutex_init(&servers[n].lock));
    CHECK(uv_thread_create(&servers[n].thread, serve, &servers[n]));
  }
  for (n = 0; n < NLOOPS; n++) CHECK(uv_thread_join(&servers[n].thread));

  for (n = 0; n < NLOOPS; n++) {
    printf("loop %d: %d tasks, at most %d at once (share %d)\n", n,
           servers[n].ndone, servers[n].peak, SHARE);
    EXPECT(servers[n].ndone == NWORKERS * PER_WORKER);
    EXPECT(servers[n].peak >= 1 && servers[n].peak <= SHARE);
    uv_mutex_destroy(&servers[n].lock);
  }
  return 0;
}
