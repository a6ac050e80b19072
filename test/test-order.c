/* Ordered completions (SPEC guarantee 3): for one worker, the
 * done_cb(task, 0) calls come in the order the tasks ran, so that a
 * pipelining server can write answers from done_cb without a reorder list.
 * Under load: four pool threads, many workers, tasks of different tiny
 * lengths, scheduled from the loop and from two foreign threads. */

#include "task.h"

#include <stdatomic.h>

#define OD_WORKERS 64
#define OD_PER 500
#define OD_FOREIGN 2

typedef struct {
  uvs_task_t task;
  int worker;
  int idx;
  int run_pos; /* its place in its worker's run order */
} od_task_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t od_workers[OD_WORKERS];
static od_task_t od_tasks[OD_WORKERS][OD_PER];
/* Written by run callbacks: one at a time per worker (guarantee 2). */
static int od_runs[OD_WORKERS];
static int od_dones[OD_WORKERS]; /* loop thread */
static int od_nworkers;
static int od_total_dones;
static uv_thread_t od_loop_thread;
static uv_thread_t od_threads[OD_FOREIGN];
static uv_async_t od_finished_async;
static atomic_int od_finished; /* foreign producers that are done */
static uv_idle_t od_idle;
static int od_loop_cursor;


static void od_spin_ns(uint64_t ns) {
  uint64_t end;

  end = uv_hrtime() + ns;
  while (uv_hrtime() < end) {
  }
}


static void od_run_cb(uvs_task_t* task) {
  od_task_t* t;
  unsigned r;

  t = TEST_CONTAINER_OF(task, od_task_t, task);
  t->run_pos = od_runs[t->worker]++;
  /* Mostly nothing; now and then up to 6 us. */
  r = (unsigned) (t->idx * 2654435761u + (unsigned) t->worker * 40503u);
  if ((r >> 7) % 3 == 0)
    od_spin_ns((r >> 12) % 6000);
}


static void od_done_cb(uvs_task_t* task, int status) {
  od_task_t* t;

  ASSERT(test_on_thread(od_loop_thread));
  t = TEST_CONTAINER_OF(task, od_task_t, task);
  ASSERT_OK(status);
  /* The n-th done_cb(…, 0) of a worker is for the n-th task it ran. */
  ASSERT_EQ(t->run_pos, od_dones[t->worker]);
  od_dones[t->worker]++;
  od_total_dones++;
}


/* Task i of worker w is scheduled by producer (i + w) % 3: 0 is the loop,
 * 1 and 2 the foreign threads. Each goes through the tasks index by index,
 * worker by worker, so that they interleave on every worker. */
static int od_producer_of(int w, int i) {
  return (i + w) % (OD_FOREIGN + 1);
}


static void od_foreign(void* arg) {
  int p;
  int w;
  int i;

  p = (int) (intptr_t) arg;
  for (i = 0; i < OD_PER; i++)
    for (w = 0; w < od_nworkers; w++)
      if (od_producer_of(w, i) == p)
        ASSERT_OK(uvs_schedule(&od_workers[w], &od_tasks[w][i].task));
  atomic_fetch_add(&od_finished, 1);
  ASSERT_OK(uv_async_send(&od_finished_async));
}


static void od_finished_cb(uv_async_t* handle) {
  if (atomic_load(&od_finished) == OD_FOREIGN)
    uv_close((uv_handle_t*) handle, NULL);
}


/* The loop's share, a few hundred schedules per loop iteration. */
static void od_idle_cb(uv_idle_t* handle) {
  int n;
  int w;
  int i;

  for (n = 0; n < 256 && od_loop_cursor < od_nworkers * OD_PER;
       od_loop_cursor++) {
    i = od_loop_cursor / od_nworkers;
    w = od_loop_cursor % od_nworkers;
    if (od_producer_of(w, i) == 0) {
      ASSERT_OK(uvs_schedule(&od_workers[w], &od_tasks[w][i].task));
      n++;
    }
  }
  if (od_loop_cursor == od_nworkers * OD_PER)
    uv_close((uv_handle_t*) handle, NULL);
}


static void done_order(uvs_where_t where, int nworkers) {
  int p;
  int w;
  int i;

  /* Before the first uv_queue_work of the process: libuv reads it once. */
  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  od_nworkers = nworkers;
  od_loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  for (w = 0; w < nworkers; w++) {
    ASSERT_OK(uvs_worker_init(&sched, &od_workers[w], where));
    for (i = 0; i < OD_PER; i++) {
      od_tasks[w][i].worker = w;
      od_tasks[w][i].idx = i;
      od_tasks[w][i].run_pos = -1;
      ASSERT_OK(uvs_task_init(&od_tasks[w][i].task, od_run_cb, od_done_cb));
    }
  }
  /* Keeps the loop running until both foreign producers are done. */
  ASSERT_OK(uv_async_init(&loop, &od_finished_async, od_finished_cb));
  ASSERT_OK(uv_idle_init(&loop, &od_idle));
  ASSERT_OK(uv_idle_start(&od_idle, od_idle_cb));
  for (p = 0; p < OD_FOREIGN; p++)
    ASSERT_OK(uv_thread_create(&od_threads[p], od_foreign,
                               (void*) (intptr_t) (p + 1)));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (p = 0; p < OD_FOREIGN; p++) ASSERT_OK(uv_thread_join(&od_threads[p]));
  ASSERT_EQ(od_total_dones, nworkers * OD_PER);
  for (w = 0; w < nworkers; w++) {
    ASSERT_EQ(od_runs[w], OD_PER);
    ASSERT_EQ(od_dones[w], OD_PER);
  }
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(order_done_as_run_pool) {
  done_order(UVS_POOL, OD_WORKERS);
  return 0;
}


TEST_IMPL(order_done_as_run_loop) {
  done_order(UVS_LOOP, 16);
  return 0;
}
