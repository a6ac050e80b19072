#include "task.h"

#include <stdatomic.h>

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t workers[3];
static int sched_close_calls;
static int worker_close_calls;
static int order[8];
static int norder;
static atomic_int run_calls;
static int done_calls;
static int done_cancelled;
static int in_call;


static void sched_close_cb(uvs_sched_t* s) {
  ASSERT_PTR_EQ(s, &sched);
  ASSERT_EQ(in_call, 0);
  sched_close_calls++;
  order[norder++] = 100;
}


static void worker_close_cb(uvs_worker_t* w) {
  ASSERT_EQ(in_call, 0);
  worker_close_calls++;
  order[norder++] = (int) (w - workers);
}


static void count_run_cb(uvs_task_t* task) {
  (void) task;
  run_calls++; /* loop workers only, or read after a done_cb */
}


static void count_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_EQ(in_call, 0);
  done_calls++;
  if (status == UV_ECANCELED)
    done_cancelled++;
  else
    ASSERT_OK(status);
}


TEST_IMPL(sched_init_null_args) {
  uvs_sched_options_t opts;

  memset(&opts, 0, sizeof(opts));
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_ERR(uvs_sched_init(NULL, &sched, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_sched_init(&loop, NULL, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_sched_init(NULL, &sched, &opts), UV_EINVAL);
  ASSERT_ERR(uvs_sched_close(NULL, UVS_CANCEL, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_sched_close(NULL, UVS_DRAIN, sched_close_cb), UV_EINVAL);
  /* Nothing was opened on the loop. */
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(sched_init_close_defaults) {
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_PTR_EQ(sched.loop, &loop);
  in_call = 1;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
  in_call = 0;
  /* The close callback never runs inside uvs_sched_close. */
  ASSERT_EQ(sched_close_calls, 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(sched_close_null_cb) {
  uvs_task_t task;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_task_init(&task, count_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule_after(&workers[0], &task, 100000));
  ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_cancelled, 1);
  ASSERT_EQ(run_calls, 0);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(sched_data_untouched) {
  uvs_task_t task;
  int a;
  int b;
  int c;

  ASSERT_OK(uv_loop_init(&loop));
  sched.data = &a;
  workers[0].data = &b;
  task.data = &c;
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_LOOP));
  ASSERT_OK(uvs_task_init(&task, count_run_cb, count_done_cb));
  ASSERT_PTR_EQ(sched.data, &a);
  ASSERT_PTR_EQ(workers[0].data, &b);
  ASSERT_PTR_EQ(task.data, &c);
  ASSERT_PTR_EQ(workers[0].sched, &sched);
  ASSERT_EQ(workers[0].where, UVS_LOOP);
  ASSERT(task.run_cb == count_run_cb);
  ASSERT(task.done_cb == count_done_cb);

  ASSERT_OK(uvs_schedule(&workers[0], &task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(run_calls, 1);
  ASSERT_EQ(done_calls, 1);
  ASSERT_PTR_EQ(task.data, &c);
  ASSERT_PTR_EQ(workers[0].data, &b);
  ASSERT_OK(uvs_worker_close(&workers[0], UVS_CANCEL, worker_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_PTR_EQ(workers[0].data, &b);
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_PTR_EQ(sched.data, &a);
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(sched_close_twice) {
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
  ASSERT_ERR(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb), UV_EINVAL);
  ASSERT_ERR(uvs_sched_close(&sched, UVS_DRAIN, NULL), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  /* Closed, memory not reused: still refused, and nothing is called. */
  ASSERT_ERR(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(sched_close_bad_how) {
  uvs_task_t task;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_LOOP));
  ASSERT_ERR(uvs_sched_close(&sched, (uvs_close_how_t) 2, sched_close_cb),
             UV_EINVAL);
  ASSERT_ERR(uvs_sched_close(&sched, (uvs_close_how_t) -1, NULL), UV_EINVAL);
  /* Rejected: the scheduler is still open and usable. */
  ASSERT_OK(uvs_task_init(&task, count_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(run_calls, 1);
  ASSERT_EQ(sched_close_calls, 0);
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


static atomic_int foreign_close_result = 1;

static void foreign_close_thread(void* arg) {
  (void) arg;
  atomic_store(&foreign_close_result,
               uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
}


TEST_IMPL(sched_close_off_loop_thread) {
  uv_thread_t thread;
  uvs_task_t task;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_LOOP));
  ASSERT_OK(uv_thread_create(&thread, foreign_close_thread, NULL));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_ERR(atomic_load(&foreign_close_result), UV_EINVAL);

  /* Nothing changed: still open. */
  ASSERT_OK(uvs_task_init(&task, count_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(run_calls, 1);
  ASSERT_EQ(sched_close_calls, 0);

  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(sched_idle_run_returns) {
  uvs_sched_options_t opts;

  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 0;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[1], UVS_LOOP));
  /* Open, idle, not keep_alive: uv_run returns without a close. */
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_DRAIN);
  return 0;
}


static uv_timer_t close_timer;
static int close_timer_calls;

static void close_timer_cb(uv_timer_t* handle) {
  close_timer_calls++;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(sched_keep_alive_holds_run) {
  uvs_sched_options_t opts;
  uint64_t start;

  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uv_timer_init(&loop, &close_timer));
  /* The timer counts from the loop's cached time: refresh it, so that the
   * 30 ms start now rather than at uv_loop_init(). */
  start = uv_hrtime();
  uv_update_time(&loop);
  /* The timer itself must not be what keeps the loop running. */
  ASSERT_OK(uv_timer_start(&close_timer, close_timer_cb, 30, 0));
  uv_unref((uv_handle_t*) &close_timer);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_timer_calls, 1);
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_UINT64_GE(uv_hrtime() - start, 25 * 1000000u);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


static void pool_spin_run_cb(uvs_task_t* task) {
  (void) task;
  test_spin_ms(20);
}


TEST_IMPL(sched_pending_keeps_alive) {
  uvs_task_t delayed;
  uvs_task_t slow;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &workers[1], UVS_POOL));
  ASSERT_OK(uvs_task_init(&delayed, count_run_cb, count_done_cb));
  ASSERT_OK(uvs_task_init(&slow, pool_spin_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule_after(&workers[0], &delayed, 40));
  ASSERT_OK(uvs_schedule(&workers[1], &slow));
  /* One uv_run: returns only once both are handed back. */
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 2);
  ASSERT_EQ(done_cancelled, 0);
  ASSERT_EQ(run_calls, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_DRAIN);
  return 0;
}


TEST_IMPL(sched_close_keeps_alive_until_done) {
  uvs_task_t slow[3];
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  for (i = 0; i < 3; i++) {
    ASSERT_OK(uvs_task_init(&slow[i], pool_spin_run_cb, count_done_cb));
    ASSERT_OK(uvs_schedule(&workers[0], &slow[i]));
  }
  ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, sched_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 3);
  ASSERT_EQ(done_cancelled, 0);
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(sched_closing_worker_init_shutdown) {
  uvs_worker_t late;
  uvs_task_t task;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_task_init(&task, pool_spin_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &task));
  ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, sched_close_cb));
  ASSERT_ERR(uvs_worker_init(&sched, &late, UVS_POOL), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_init(&sched, &late, UVS_LOOP), UV_ESHUTDOWN);
  /* EINVAL wins over ESHUTDOWN. */
  ASSERT_ERR(uvs_worker_init(&sched, &late, (uvs_where_t) 7), UV_EINVAL);
  ASSERT_ERR(uvs_worker_init(&sched, NULL, UVS_POOL), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_EQ(done_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


static void noop_fn(void* arg) {
  (void) arg;
}


TEST_IMPL(sched_closing_schedule_shutdown) {
  uvs_task_t queued;
  uvs_task_t t[4];
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[1], UVS_LOOP));
  ASSERT_OK(uvs_task_init(&queued, pool_spin_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &queued));
  ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, sched_close_cb));
  for (i = 0; i < 4; i++)
    ASSERT_OK(uvs_task_init(&t[i], count_run_cb, count_done_cb));
  for (i = 0; i < 2; i++) {
    ASSERT_ERR(uvs_schedule(&workers[i], &t[0]), UV_ESHUTDOWN);
    ASSERT_ERR(uvs_schedule_after(&workers[i], &t[1], 1), UV_ESHUTDOWN);
    ASSERT_ERR(uvs_schedule_every(&workers[i], &t[2], 1, 1), UV_ESHUTDOWN);
    ASSERT_ERR(uvs_post(&workers[i], noop_fn, NULL), UV_ESHUTDOWN);
  }
  /* ESHUTDOWN wins over EBUSY (the task is queued), EINVAL over both. */
  ASSERT_ERR(uvs_schedule(&workers[1], &queued), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_schedule_every(&workers[1], &t[3], 1, 0), UV_EINVAL);
  ASSERT_ERR(uvs_post(&workers[1], NULL, NULL), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_EQ(done_calls, 1);
  ASSERT_EQ(run_calls, 0);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* Every kind of task on a pool and a loop worker, then a close. */
static uvs_task_t mix[2][4];
static int mix_status[2][4];

static void mix_done_cb(uvs_task_t* task, int status) {
  *(int*) task->data = status;
  count_done_cb(task, status);
}

static void schedule_mix(void) {
  int i;
  int j;

  for (i = 0; i < 2; i++) {
    for (j = 0; j < 4; j++) {
      ASSERT_OK(uvs_task_init(&mix[i][j], count_run_cb, mix_done_cb));
      mix_status[i][j] = 1;
      mix[i][j].data = &mix_status[i][j];
    }
    ASSERT_OK(uvs_worker_init(&sched, &workers[i], i ? UVS_LOOP : UVS_POOL));
    ASSERT_OK(uvs_schedule(&workers[i], &mix[i][0]));
    ASSERT_OK(uvs_schedule(&workers[i], &mix[i][1]));
    ASSERT_OK(uvs_schedule_after(&workers[i], &mix[i][2], 60000));
    ASSERT_OK(uvs_schedule_every(&workers[i], &mix[i][3], 60000, 1000));
  }
}


static atomic_int pool_runs;


TEST_IMPL(sched_close_cancel_all) {
  int i;
  int j;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  schedule_mix();
  in_call = 1;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
  in_call = 0;
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_EQ(done_calls, 8);
  /* Delayed and periodic tasks never ran; the loop worker's queued tasks did
   * not run either since the close came before the loop ran. The pool
   * worker may have started its queued tasks already: those finish. */
  ASSERT_EQ(run_calls, done_calls - done_cancelled);
  for (i = 0; i < 2; i++) {
    for (j = 0; j < 4; j++) {
      if (i == 1 || j >= 2)
        ASSERT_ERR(mix_status[i][j], UV_ECANCELED);
      else
        ASSERT(mix_status[i][j] == 0 || mix_status[i][j] == UV_ECANCELED);
      ASSERT_ERR(uvs_task_cancel(&mix[i][j]), UV_EBUSY);
    }
  }
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(sched_close_drain_runs_queued) {
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  schedule_mix();
  ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, sched_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_EQ(done_calls, 8);
  /* Queued tasks ran (2 per worker; run_calls counts all of them since the
   * pool worker's runs happen-before their done_cbs); the delayed and
   * periodic ones, not yet due, were cancelled. */
  ASSERT_EQ(done_cancelled, 4);
  ASSERT_EQ(run_calls, 4);
  for (i = 0; i < 2; i++) {
    ASSERT_OK(mix_status[i][0]);
    ASSERT_OK(mix_status[i][1]);
    ASSERT_ERR(mix_status[i][2], UV_ECANCELED);
    ASSERT_ERR(mix_status[i][3], UV_ECANCELED);
  }
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


static uv_sem_t gate;
static uv_async_t started_async;

static void gate_run_cb(uvs_task_t* task) {
  (void) task;
  uv_async_send(&started_async);
  uv_sem_wait(&gate);
}


static void gate_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  order[norder++] = 50;
}


/* The gate task is running on worker 0. Worker 0 closes (draining) under
 * it, worker 1 asks for a callback too, worker 2 does not; then the
 * scheduler closes. */
static void started_cb(uv_async_t* handle) {
  ASSERT_OK(uvs_worker_close(&workers[0], UVS_DRAIN, worker_close_cb));
  ASSERT_OK(uvs_worker_close(&workers[1], UVS_CANCEL, worker_close_cb));
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
  uv_sem_post(&gate);
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(sched_close_worker_cb_order) {
  uvs_task_t blocker;

  ASSERT_OK(uv_sem_init(&gate, 0));
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uv_async_init(&loop, &started_async, started_cb));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[1], UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &workers[2], UVS_POOL));
  ASSERT_OK(uvs_task_init(&blocker, gate_run_cb, gate_done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &blocker));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(worker_close_calls, 2);
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_EQ(norder, 4);
  /* Sched last; worker 0's callback after its running task's done_cb. */
  ASSERT_EQ(order[3], 100);
  ASSERT((order[0] == 50 && order[1] == 0 && order[2] == 1) ||
         (order[0] == 50 && order[1] == 1 && order[2] == 0) ||
         (order[0] == 1 && order[1] == 50 && order[2] == 0));
  ASSERT_OK(uv_loop_close(&loop));
  uv_sem_destroy(&gate);
  return 0;
}


/* uvs_sched_close from inside a done_cb and a run_cb of a loop worker. */
static uvs_task_t chain[6];
static int close_from_run;

static void closing_done_cb(uvs_task_t* task, int status) {
  count_done_cb(task, status);
  if (task == &chain[0] && !close_from_run) {
    ASSERT_OK(status);
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
    ASSERT_ERR(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb), UV_EINVAL);
    ASSERT_EQ(sched_close_calls, 0);
  }
}


static void closing_run_cb(uvs_task_t* task) {
  run_calls++;
  if (close_from_run && task == &chain[0]) {
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
    ASSERT_EQ(sched_close_calls, 0);
    ASSERT_EQ(done_calls, 0);
  }
}


static void run_close_from_callback(void) {
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &workers[1], UVS_POOL));
  ASSERT_OK(uvs_task_init(&chain[0], closing_run_cb, closing_done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &chain[0]));
  for (i = 1; i < 6; i++) {
    ASSERT_OK(uvs_task_init(&chain[i], closing_run_cb, closing_done_cb));
    if (i < 3)
      ASSERT_OK(uvs_schedule(&workers[0], &chain[i]));
    else
      ASSERT_OK(uvs_schedule_after(&workers[i & 1], &chain[i], 60000));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_EQ(done_calls, 6);
  ASSERT_OK(uv_loop_close(&loop));
}


TEST_IMPL(sched_close_in_done_cb) {
  run_close_from_callback();
  /* The first task ran; its two queued followers may or may not have run
   * before its done_cb; the delayed ones were cancelled. */
  ASSERT_GE(done_cancelled, 3);
  ASSERT_GE(run_calls, 1);
  ASSERT_EQ(run_calls + done_cancelled, 6);
  return 0;
}


TEST_IMPL(sched_close_in_run_cb) {
  close_from_run = 1;
  run_close_from_callback();
  /* The running task finishes and is handed back with 0; the rest never
   * ran. */
  ASSERT_EQ(run_calls, 1);
  ASSERT_EQ(done_cancelled, 5);
  return 0;
}


/* init; a foreign thread schedules; join; uv_run. */
static void foreign_schedule_thread(void* arg) {
  uvs_task_t* tasks;
  int i;

  tasks = arg;
  for (i = 0; i < 10; i++) ASSERT_OK(uvs_schedule(&workers[i & 1], &tasks[i]));
  ASSERT_OK(uvs_post(&workers[0], noop_fn, NULL));
}


static void foreign_run_cb(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&pool_runs, 1);
}


TEST_IMPL(sched_foreign_schedule_before_run) {
  uvs_task_t tasks[10];
  uv_thread_t thread;
  uvs_stats_t st;
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[1], UVS_LOOP));
  for (i = 0; i < 10; i++)
    ASSERT_OK(uvs_task_init(&tasks[i], foreign_run_cb, count_done_cb));
  ASSERT_OK(uv_thread_create(&thread, foreign_schedule_thread, tasks));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&pool_runs), 10);
  ASSERT_EQ(done_calls, 10);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 11);
  ASSERT_UINT64_EQ(st.ran, 11);
  ASSERT_UINT64_EQ(st.pending, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(sched_two_on_one_loop) {
  uvs_sched_t other;
  uvs_worker_t ow;
  uvs_task_t a;
  uvs_task_t b;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_sched_init(&loop, &other, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&other, &ow, UVS_POOL));
  ASSERT_OK(uvs_task_init(&a, count_run_cb, count_done_cb));
  ASSERT_OK(uvs_task_init(&b, count_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &a));
  ASSERT_OK(uvs_schedule_after(&ow, &b, 60000));
  /* Closing one scheduler leaves the other alone. */
  ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, sched_close_cb));
  (void) uv_run(&loop, UV_RUN_NOWAIT);
  ASSERT_OK(uvs_task_cancel(&b));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_EQ(done_calls, 2);
  ASSERT_EQ(done_cancelled, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &other, UVS_CANCEL);
  return 0;
}


/* uvs_sched_close from a pool thread (inside a run_cb) is off the loop
 * thread: UV_EINVAL, and nothing changes. */
static atomic_int pool_close_rc = 1;

static void pool_close_run_cb(uvs_task_t* task) {
  (void) task;
  atomic_store(&pool_close_rc,
               uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
}


TEST_IMPL(sched_close_from_pool_task_einval) {
  uvs_task_t t;
  uvs_task_t later;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_task_init(&t, pool_close_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &t));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(atomic_load(&pool_close_rc), UV_EINVAL);
  ASSERT_EQ(sched_close_calls, 0);
  ASSERT_EQ(done_calls, 1);
  ASSERT_OK(uvs_task_init(&later, count_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &later));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 2);
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, sched_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* After the close callback the scheduler's and workers' memory is the
 * user's: free it right there (ASan catches any later touch), with work of
 * every kind in flight. */
static void free_sched_close_cb(uvs_sched_t* s) {
  sched_close_calls++;
  memset(s, 0xab, sizeof(*s));
  free(s);
}


static void free_worker_close_cb(uvs_worker_t* w) {
  worker_close_calls++;
  memset(w, 0xcd, sizeof(*w));
  free(w);
}


static void free_in_close(uvs_close_how_t how) {
  uvs_sched_t* s;
  uvs_worker_t* w[3];
  uvs_task_t t[12];
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  s = malloc(sizeof(*s));
  ASSERT_NOT_NULL(s);
  ASSERT_OK(uvs_sched_init(&loop, s, NULL));
  for (i = 0; i < 3; i++) {
    w[i] = malloc(sizeof(*w[i]));
    ASSERT_NOT_NULL(w[i]);
    ASSERT_OK(uvs_worker_init(s, w[i], i == 1 ? UVS_LOOP : UVS_POOL));
  }
  for (i = 0; i < 12; i++) {
    ASSERT_OK(uvs_task_init(&t[i], pool_spin_run_cb, count_done_cb));
    if (i % 4 == 0)
      ASSERT_OK(uvs_schedule(w[i % 3], &t[i]));
    else if (i % 4 == 1)
      ASSERT_OK(uvs_schedule_after(w[i % 3], &t[i], 1));
    else if (i % 4 == 2)
      ASSERT_OK(uvs_schedule_every(w[i % 3], &t[i], 0, 1));
    else
      ASSERT_OK(uvs_schedule_after(w[i % 3], &t[i], 60000));
    ASSERT_OK(uvs_post(w[i % 3], noop_fn, NULL));
  }
  (void) uv_run(&loop, UV_RUN_NOWAIT);
  /* Worker 0 closes first and is freed in its callback; the others are
   * closed by the scheduler. */
  ASSERT_OK(uvs_worker_close(w[0], how, free_worker_close_cb));
  ASSERT_OK(uvs_sched_close(s, how, free_sched_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(worker_close_calls, 1);
  ASSERT_EQ(sched_close_calls, 1);
  ASSERT_EQ(done_calls, 12);
  free(w[1]);
  free(w[2]);
  ASSERT_OK(uv_loop_close(&loop));
}


TEST_IMPL(sched_free_in_close_cb_cancel) {
  free_in_close(UVS_CANCEL);
  return 0;
}


TEST_IMPL(sched_free_in_close_cb_drain) {
  free_in_close(UVS_DRAIN);
  return 0;
}
