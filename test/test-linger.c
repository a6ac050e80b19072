/* linger_us: a pool drain that empties its queue waits up to linger_us for
 * more work before it gives its thread back. These tests check what it
 * changes (one drain serves work that arrives while it waits; the thread is
 * held about that long, then given back) and what it must not (a close ends
 * the wait at once; loop workers never wait).
 */

#include "task.h"

#include <stdatomic.h>

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uvs_task_t tasks[2];
static uv_sem_t ran_sem;
static atomic_int runs;
static int done_calls;
static uint64_t t_done;
static _Atomic uint64_t t_ran;
static uint64_t t_closed;
static int worker_closed;


static void count_run_cb(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&runs, 1);
  atomic_store(&t_ran, uv_hrtime());
  uv_sem_post(&ran_sem);
}


static void options(uvs_sched_options_t* opts, unsigned linger_us) {
  memset(opts, 0, sizeof(*opts));
  opts->linger_us = linger_us;
  /* A count, not the default time slice, so that a slow machine can't end
   * the drain between the two tasks. */
  opts->budget = 1000;
}


/* Work that arrives while the drain waits runs in that drain. */
static void second_thread(void* arg) {
  (void) arg;
  ASSERT_OK(uvs_schedule(&worker, &tasks[0]));
  uv_sem_wait(&ran_sem);
  /* The drain has run the first task and is waiting for more. */
  ASSERT_OK(uvs_schedule(&worker, &tasks[1]));
  uv_sem_wait(&ran_sem);
}


static void second_done_cb(uvs_task_t* task, int status) {
  uvs_stats_t st;

  ASSERT_OK(status);
  done_calls++;
  if (task != &tasks[1])
    return;
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.drains, 1);
  ASSERT_UINT64_EQ(st.ran, 2);
  /* The drain is still waiting (30 s): the close must end the wait. */
  t_done = uv_hrtime();
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


TEST_IMPL(linger_one_drain_for_late_work) {
  uvs_sched_options_t opts;
  uv_thread_t thread;

  ASSERT_OK(uv_sem_init(&ran_sem, 0));
  options(&opts, 30000000);
  opts.keep_alive = 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uvs_task_init(&tasks[0], count_run_cb, second_done_cb));
  ASSERT_OK(uvs_task_init(&tasks[1], count_run_cb, second_done_cb));
  ASSERT_OK(uv_thread_create(&thread, second_thread, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(done_calls, 2);
  ASSERT_EQ(atomic_load(&runs), 2);
  /* Far less than the 30 s the drain would have waited. */
  ASSERT_UINT64_LT(uv_hrtime() - t_done, 10000000000u);
  ASSERT_OK(uv_loop_close(&loop));
  uv_sem_destroy(&ran_sem);
  return 0;
}


/* An empty queue holds the pool thread for about linger_us, then the drain
 * ends and the loop, with nothing else to do, returns. */
static void stamp_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  done_calls++;
  t_done = uv_hrtime();
}


TEST_IMPL(linger_gives_the_thread_back) {
  uvs_sched_options_t opts;
  uvs_stats_t st;
  uint64_t t_end;

  ASSERT_OK(uv_sem_init(&ran_sem, 0));
  options(&opts, 20000); /* 20 ms */
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uvs_task_init(&tasks[0], count_run_cb, stamp_done_cb));
  ASSERT_OK(uvs_schedule(&worker, &tasks[0]));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  t_end = uv_hrtime();
  ASSERT_EQ(done_calls, 1);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.drains, 1);
  ASSERT_UINT64_EQ(st.pending, 0);
  /* The drain began to wait after the run and waited 20 ms: a drain that
   * didn't wait would end microseconds after the run. */
  ASSERT_UINT64_GE(t_end - atomic_load(&t_ran), 20000000u);
  ASSERT_UINT64_GE(t_end, t_done);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&ran_sem);
  return 0;
}


/* A worker close ends its drain's wait. */
static void worker_close_cb(uvs_worker_t* w) {
  ASSERT_PTR_EQ(w, &worker);
  worker_closed++;
  t_closed = uv_hrtime();
}


static void close_worker_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  done_calls++;
  t_done = uv_hrtime();
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, worker_close_cb));
}


TEST_IMPL(linger_ends_on_worker_close) {
  uvs_sched_options_t opts;

  ASSERT_OK(uv_sem_init(&ran_sem, 0));
  options(&opts, 30000000); /* 30 s */
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uvs_task_init(&tasks[0], count_run_cb, close_worker_done_cb));
  ASSERT_OK(uvs_schedule(&worker, &tasks[0]));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  ASSERT_EQ(worker_closed, 1);
  ASSERT_UINT64_LT(t_closed - t_done, 10000000000u);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&ran_sem);
  return 0;
}


/* A loop worker's turn never waits: it would stall the loop. */
TEST_IMPL(linger_not_on_the_loop) {
  uvs_sched_options_t opts;
  uvs_stats_t st;
  uint64_t t0;

  ASSERT_OK(uv_sem_init(&ran_sem, 0));
  options(&opts, 30000000); /* 30 s */
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  ASSERT_OK(uvs_task_init(&tasks[0], count_run_cb, stamp_done_cb));
  t0 = uv_hrtime();
  ASSERT_OK(uvs_schedule(&worker, &tasks[0]));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  ASSERT_UINT64_LT(uv_hrtime() - t0, 10000000000u);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.drains, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&ran_sem);
  return 0;
}
