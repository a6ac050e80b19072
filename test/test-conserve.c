/* Work conservation (SPEC.md, guarantees 7 and 12; issue 19): ready work
 * never waits for a guess. A pool worker that becomes ready gets a drain at
 * once while the cap and the pool leave room, whatever the tasks before it
 * were like; a wide worker gets a lane for a task another lane could start;
 * a loop worker gets one turn per loop iteration, whichever callback runs
 * it; and the metrics count a blocked producer that got in as accepted.
 *
 * The dependency tests make a task wait, with a deadline, for another task
 * that only a drain posted at once can run: without it they fail at the
 * deadline instead of hanging. Each test runs in its own process, so those
 * that need a bigger pool set UV_THREADPOOL_SIZE before the loop's first
 * uv_queue_work. */

#include "task.h"

#include <stdatomic.h>

static uv_loop_t loop;
static uvs_sched_t sched;
static int ndone;


/* A count that threads wait on, each wait with a deadline. */
typedef struct {
  uv_mutex_t mutex;
  uv_cond_t cond;
  int n;
} event_t;


static void ev_init(event_t* e) {
  ASSERT_OK(uv_mutex_init(&e->mutex));
  ASSERT_OK(uv_cond_init(&e->cond));
  e->n = 0;
}


static void ev_destroy(event_t* e) {
  uv_cond_destroy(&e->cond);
  uv_mutex_destroy(&e->mutex);
}


static int ev_add(event_t* e) {
  int n;

  uv_mutex_lock(&e->mutex);
  n = ++e->n;
  uv_cond_broadcast(&e->cond);
  uv_mutex_unlock(&e->mutex);
  return n;
}


static int ev_get(event_t* e) {
  int n;

  uv_mutex_lock(&e->mutex);
  n = e->n;
  uv_mutex_unlock(&e->mutex);
  return n;
}


/* Waits until the count reaches want or ms pass; returns the count. */
static int ev_wait(event_t* e, int want, uint64_t ms) {
  uint64_t end;
  uint64_t now;
  int n;

  end = uv_hrtime() + ms * 1000000;
  uv_mutex_lock(&e->mutex);
  while (e->n < want) {
    now = uv_hrtime();
    if (now >= end)
      break;
    (void) uv_cond_timedwait(&e->cond, &e->mutex, end - now);
  }
  n = e->n;
  uv_mutex_unlock(&e->mutex);
  return n;
}


static void noop_run(uvs_task_t* task) {
  (void) task;
}


static void ok_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  ndone++;
}


static void setup(const uvs_sched_options_t* opts) {
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, opts));
}


/* Bursts of tiny tasks on w, each run to the end (uv_run returns once the
 * last drain is back), for at least 50 ms: the drains have found their
 * tasks short for a while, long enough for a scheduler that learns from
 * timing (today's learns its clock's rate in 20 ms) to have learnt. */
#define WARM 1000
#define WARM_MS 50

static uvs_task_t warm[WARM];

static void warm_up(uvs_worker_t* w) {
  uint64_t end;
  int bursts;
  int i;

  end = test_hrtime_ms() + WARM_MS;
  for (bursts = 0; bursts < 1000 && (bursts == 0 || test_hrtime_ms() < end);
       bursts++) {
    ndone = 0;
    for (i = 0; i < WARM; i++) {
      ASSERT_OK(uvs_task_init(&warm[i], noop_run, ok_done));
      ASSERT_OK(uvs_schedule(w, &warm[i]));
    }
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(ndone, WARM);
  }
}


/* ---- conserve_serial_dependency ---------------------------------------- */
/* Serial pool workers A and B. After a burst of tiny tasks on A, A's task
 * TA starts and tells the loop, which schedules TB on B and, at the same
 * moment, TL on a loop worker; TA and TL both wait for TB. Guarantee 12:
 * B is ready and the cap (the pool's 4) leaves room, so its drain is posted
 * at once, before the loop turn that runs TL blocks the loop thread (no
 * timer can post it then). A few cycles. */
#define SD_CYCLES 3

static uvs_worker_t sd_a;
static uvs_worker_t sd_b;
static uvs_worker_t sd_l;
static uvs_task_t sd_ta;
static uvs_task_t sd_tb;
static uvs_task_t sd_tl;
static uv_async_t sd_started;
static event_t sd_tb_ran;
static int sd_cycle; /* set before TA is scheduled, read by its run_cb */

static void sd_ta_run(uvs_task_t* task) {
  (void) task;
  ASSERT_OK(uv_async_send(&sd_started));
  ASSERT_GE(ev_wait(&sd_tb_ran, sd_cycle + 1, 5000), sd_cycle + 1);
}


static void sd_tb_run(uvs_task_t* task) {
  (void) task;
  ev_add(&sd_tb_ran);
}


/* On the loop thread, which it blocks until TB ran or 3 s passed. */
static void sd_tl_run(uvs_task_t* task) {
  (void) task;
  ASSERT_GE(ev_wait(&sd_tb_ran, sd_cycle + 1, 3000), sd_cycle + 1);
}


static void sd_started_cb(uv_async_t* handle) {
  (void) handle;
  ASSERT_OK(uvs_schedule(&sd_b, &sd_tb));
  ASSERT_OK(uvs_schedule(&sd_l, &sd_tl));
}


TEST_IMPL(conserve_serial_dependency) {
  setup(NULL);
  ev_init(&sd_tb_ran);
  ASSERT_OK(uv_async_init(&loop, &sd_started, sd_started_cb));
  uv_unref((uv_handle_t*) &sd_started);
  ASSERT_OK(uvs_worker_init(&sched, &sd_a, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &sd_b, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &sd_l, UVS_LOOP));
  ASSERT_OK(uvs_task_init(&sd_ta, sd_ta_run, ok_done));
  ASSERT_OK(uvs_task_init(&sd_tb, sd_tb_run, ok_done));
  ASSERT_OK(uvs_task_init(&sd_tl, sd_tl_run, ok_done));
  for (sd_cycle = 0; sd_cycle < SD_CYCLES; sd_cycle++) {
    warm_up(&sd_a);
    ndone = 0;
    ASSERT_OK(uvs_schedule(&sd_a, &sd_ta));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(ndone, 3);
    ASSERT_EQ(ev_get(&sd_tb_ran), sd_cycle + 1);
  }
  uv_close((uv_handle_t*) &sd_started, NULL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ev_destroy(&sd_tb_ran);
  return 0;
}


/* ---- conserve_keys_dependency ------------------------------------------ */
/* The same across keys of one worker of width 4: key 1's task waits for
 * key 2's, scheduled after it. Twice per cycle, each after a burst of tiny
 * tasks: scheduled back to back from the loop thread (a lane must not hold
 * key 2's task in its batch behind key 1's), and from key 1's run_cb while
 * it runs (a lane must be posted for it). Guarantee 12: fewer than 4 tasks
 * run and key 2's could start, so a lane for it is posted at once. */
#define KD_CYCLES 2

static uvs_worker_t kd_w;
static uvs_task_t kd_k1;
static uvs_task_t kd_k2;
static event_t kd_k2_ran;
static int kd_want; /* set before key 1's task is scheduled */
static int kd_from_run;

static void kd_k1_run(uvs_task_t* task) {
  (void) task;
  if (kd_from_run)
    ASSERT_OK(uvs_schedule(&kd_w, &kd_k2));
  ASSERT_GE(ev_wait(&kd_k2_ran, kd_want, 3000), kd_want);
}


static void kd_k2_run(uvs_task_t* task) {
  (void) task;
  ev_add(&kd_k2_ran);
}


TEST_IMPL(conserve_keys_dependency) {
  uvs_worker_options_t o;
  int c;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "6", 1));
  setup(NULL);
  ev_init(&kd_k2_ran);
  memset(&o, 0, sizeof(o));
  o.width = 4;
  ASSERT_OK(uvs_worker_init_ex(&sched, &kd_w, UVS_POOL, &o));
  ASSERT_OK(uvs_task_init(&kd_k1, kd_k1_run, ok_done));
  ASSERT_OK(uvs_task_init(&kd_k2, kd_k2_run, ok_done));
  ASSERT_OK(uvs_task_set_key(&kd_k1, 1));
  ASSERT_OK(uvs_task_set_key(&kd_k2, 2));
  for (c = 0; c < 2 * KD_CYCLES; c++) {
    warm_up(&kd_w);
    ndone = 0;
    kd_want = c + 1;
    kd_from_run = c % 2;
    ASSERT_OK(uvs_schedule(&kd_w, &kd_k1));
    if (!kd_from_run)
      ASSERT_OK(uvs_schedule(&kd_w, &kd_k2));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(ndone, 2);
    ASSERT_EQ(ev_get(&kd_k2_ran), c + 1);
  }
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ev_destroy(&kd_k2_ran);
  return 0;
}


/* ---- conserve_cap_holds ------------------------------------------------ */
/* max_concurrency = 2 on a pool of 6 threads, 6 serial workers each with a
 * task that holds its thread until released, released one at a time in
 * the order they started: 2 run at once whenever 2 are left (each time
 * with a deadline), never 3 (each time watched for 50 ms, as no event says
 * that a third will not start). */
#define CAP 2
#define CAP_N 6

static uvs_worker_t cap_w[CAP_N];
static uvs_task_t cap_t[CAP_N];
static atomic_int cap_inflight;
static atomic_int cap_max;
static atomic_int cap_order;
static event_t cap_started;
static event_t cap_released;

static void cap_run(uvs_task_t* task) {
  int idx;
  int n;
  int m;

  (void) task;
  idx = atomic_fetch_add(&cap_order, 1);
  n = atomic_fetch_add(&cap_inflight, 1) + 1;
  m = atomic_load(&cap_max);
  while (n > m && !atomic_compare_exchange_weak(&cap_max, &m, n)) {
  }
  ev_add(&cap_started);
  ASSERT_GE(ev_wait(&cap_released, idx + 1, 5000), idx + 1);
  atomic_fetch_sub(&cap_inflight, 1);
}


static void cap_controller(void* arg) {
  int k;
  int want;

  (void) arg;
  for (k = 0; k < CAP_N; k++) {
    want = CAP_N - k < CAP ? CAP_N - k : CAP;
    /* k released so far; then `want` run at once. */
    ASSERT_GE(ev_wait(&cap_started, k + want, 5000), k + want);
    uv_sleep(50);
    ASSERT_LE(atomic_load(&cap_max), CAP);
    ASSERT_EQ(atomic_load(&cap_inflight), want);
    ASSERT_EQ(ev_get(&cap_started), k + want);
    ev_add(&cap_released);
  }
}


TEST_IMPL(conserve_cap_holds) {
  uvs_sched_options_t opts;
  uv_thread_t controller;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "6", 1));
  memset(&opts, 0, sizeof(opts));
  opts.max_concurrency = CAP;
  setup(&opts);
  ev_init(&cap_started);
  ev_init(&cap_released);
  for (i = 0; i < CAP_N; i++) {
    ASSERT_OK(uvs_worker_init(&sched, &cap_w[i], UVS_POOL));
    ASSERT_OK(uvs_task_init(&cap_t[i], cap_run, ok_done));
    ASSERT_OK(uvs_schedule(&cap_w[i], &cap_t[i]));
  }
  ASSERT_OK(uv_thread_create(&controller, cap_controller, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&controller));
  ASSERT_EQ(ndone, CAP_N);
  ASSERT_EQ(atomic_load(&cap_max), CAP);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ev_destroy(&cap_started);
  ev_destroy(&cap_released);
  return 0;
}


/* ---- conserve_wide_pool ------------------------------------------------ */
/* A pool of 24 threads and no cap of the scheduler's own: 20 serial
 * workers, each with one task that waits until all 20 run. Guarantee 12:
 * the cap is the pool's size, 24, so all 20 get a drain at once. */
#define WIDE_N 20

static uvs_worker_t wide_w[WIDE_N];
static uvs_task_t wide_t[WIDE_N];
static event_t wide_in;

static void wide_run(uvs_task_t* task) {
  (void) task;
  ev_add(&wide_in);
  ASSERT_EQ(ev_wait(&wide_in, WIDE_N, 5000), WIDE_N);
}


TEST_IMPL(conserve_wide_pool) {
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "24", 1));
  setup(NULL);
  ev_init(&wide_in);
  for (i = 0; i < WIDE_N; i++) {
    ASSERT_OK(uvs_worker_init(&sched, &wide_w[i], UVS_POOL));
    ASSERT_OK(uvs_task_init(&wide_t[i], wide_run, ok_done));
    ASSERT_OK(uvs_schedule(&wide_w[i], &wide_t[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, WIDE_N);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ev_destroy(&wide_in);
  return 0;
}


/* ---- conserve_pool_size_* ---------------------------------------------- */
/* Guarantee 12 at the pool's exact size: with no cap of the scheduler's
 * own, the cap is libuv's pool size, so P serial workers, each with one
 * task that waits until all P run, all get a drain at once, on a pool of
 * P threads (UV_THREADPOOL_SIZE set before the pool starts, or unset: 4).
 * conserve_wide_pool leaves 4 threads spare, which a cap of the pool's
 * size minus one would pass; here a cap one short leaves one task
 * waiting for a drain that the others hold, and they fail at the
 * deadline. */
#define PS_MAX 8

static uvs_worker_t ps_w[PS_MAX];
static uvs_task_t ps_t[PS_MAX];
static event_t ps_in;
static int ps_n;

static void ps_run(uvs_task_t* task) {
  int n;

  (void) task;
  ev_add(&ps_in);
  n = ev_wait(&ps_in, ps_n, 10000);
  if (n < ps_n)
    test_failed(__FILE__, __LINE__,
                "only %d of %d tasks started on a pool of %d threads in 10 s",
                n, ps_n, ps_n);
}


static void pool_size_all_start(const char* env, int p) {
  int i;

  if (env != NULL)
    ASSERT_OK(setenv("UV_THREADPOOL_SIZE", env, 1));
  else
    ASSERT_OK(unsetenv("UV_THREADPOOL_SIZE"));
  ASSERT_LE(p, PS_MAX);
  ps_n = p;
  setup(NULL);
  ev_init(&ps_in);
  for (i = 0; i < p; i++) {
    ASSERT_OK(uvs_worker_init(&sched, &ps_w[i], UVS_POOL));
    ASSERT_OK(uvs_task_init(&ps_t[i], ps_run, ok_done));
    ASSERT_OK(uvs_schedule(&ps_w[i], &ps_t[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, p);
  ASSERT_EQ(ev_get(&ps_in), p);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ev_destroy(&ps_in);
}


TEST_IMPL(conserve_pool_size_4) {
  pool_size_all_start("4", 4);
  return 0;
}


TEST_IMPL(conserve_pool_size_6) {
  pool_size_all_start("6", 6);
  return 0;
}


/* No UV_THREADPOOL_SIZE: libuv's pool has 4 threads, and so has the cap. */
TEST_IMPL(conserve_pool_size_default) {
  pool_size_all_start(NULL, 4);
  return 0;
}


/* ---- conserve_loop_timer_between_turns --------------------------------- */
/* A loop worker with two long tasks; the first starts a 5 ms uv_timer and
 * runs 100 ms. Guarantee 7: one turn per loop iteration, whichever callback
 * runs it, so the timer fires before the second task starts. Meanwhile
 * another thread wakes the scheduler's uv_async: a pool task that ends
 * while the first task runs, or the foreign thread that scheduled both
 * tasks before the loop ran. */
#define LT_MS 100

static uvs_worker_t lt_l;
static uvs_worker_t lt_p;
static uvs_task_t lt_t1;
static uvs_task_t lt_t2;
static uvs_task_t lt_pt;
static uv_timer_t lt_timer;
static int lt_fired;
static int lt_t2_runs;
static event_t lt_t1_started;

static void lt_timer_cb(uv_timer_t* handle) {
  (void) handle;
  lt_fired++;
}


static void lt_t1_run(uvs_task_t* task) {
  (void) task;
  ASSERT_OK(uv_timer_start(&lt_timer, lt_timer_cb, 5, 0));
  ev_add(&lt_t1_started);
  uv_sleep(LT_MS);
}


static void lt_t2_run(uvs_task_t* task) {
  (void) task;
  /* The timer, due 95 ms ago, had its loop iteration. */
  ASSERT_EQ(lt_fired, 1);
  lt_t2_runs++;
}


/* On a pool thread: ends (and hands back, which wakes the loop's async)
 * while the first loop task runs. */
static void lt_pt_run(uvs_task_t* task) {
  (void) task;
  ASSERT_GE(ev_wait(&lt_t1_started, 1, 5000), 1);
}


static void lt_setup(void) {
  setup(NULL);
  ev_init(&lt_t1_started);
  ASSERT_OK(uv_timer_init(&loop, &lt_timer));
  ASSERT_OK(uvs_worker_init(&sched, &lt_l, UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &lt_p, UVS_POOL));
  ASSERT_OK(uvs_task_init(&lt_t1, lt_t1_run, ok_done));
  ASSERT_OK(uvs_task_init(&lt_t2, lt_t2_run, ok_done));
  ASSERT_OK(uvs_task_init(&lt_pt, lt_pt_run, ok_done));
}


static void lt_check_and_close(int ntasks) {
  ASSERT_EQ(ndone, ntasks);
  ASSERT_EQ(lt_t2_runs, 1);
  ASSERT_EQ(lt_fired, 1);
  uv_close((uv_handle_t*) &lt_timer, NULL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ev_destroy(&lt_t1_started);
}


TEST_IMPL(conserve_loop_timer_between_turns) {
  lt_setup();
  ASSERT_OK(uvs_schedule(&lt_p, &lt_pt));
  ASSERT_OK(uvs_schedule(&lt_l, &lt_t1));
  ASSERT_OK(uvs_schedule(&lt_l, &lt_t2));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  lt_check_and_close(3);
  return 0;
}


static void lt_foreign(void* arg) {
  (void) arg;
  ASSERT_OK(uvs_schedule(&lt_l, &lt_t1));
  ASSERT_OK(uvs_schedule(&lt_l, &lt_t2));
}


TEST_IMPL(conserve_loop_timer_between_turns_foreign) {
  uv_thread_t thread;

  lt_setup();
  ASSERT_OK(uv_thread_create(&thread, lt_foreign, NULL));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  lt_check_and_close(2);
  return 0;
}


/* ---- conserve_rejected_after_wait -------------------------------------- */
/* A pool worker with max_pending 1 and UVS_FULL_BLOCK, kept full: a running
 * task that holds its thread and one queued behind it. A producer blocked
 * in uvs_schedule_wait that gets in when room is made was accepted, not
 * rejected (SPEC, Metrics: rejected counts calls that accepted nothing);
 * one that times out is one rejection, however long it waited. 50 ms after
 * the producer began its call, the controller checks that it has not
 * returned, so that it did wait (no event says it is blocked), then makes
 * room. */
static uvs_worker_t rj_w;
static uvs_task_t rj_t[4];
static int rj_idx[2] = {0, 1};
static event_t rj_started;  /* holders started */
static event_t rj_released; /* holders released */
static event_t rj_calling;  /* the producer is about to call */
static event_t rj_returned; /* and its call returned */
static atomic_int rj_err = 1;
static uv_async_t rj_alive;

static void rj_hold_run(uvs_task_t* task) {
  int idx;

  idx = *(int*) task->data;
  ev_add(&rj_started);
  ASSERT_GE(ev_wait(&rj_released, idx + 1, 5000), idx + 1);
}


static uint64_t rj_rejected(void) {
  uvs_worker_metrics_t m;

  ASSERT_OK(uvs_worker_metrics(&rj_w, &m));
  return m.rejected;
}


static void rj_producer(void* arg) {
  (void) arg;
  ev_add(&rj_calling);
  atomic_store(&rj_err, uvs_schedule_wait(&rj_w, &rj_t[2], 5000));
  ev_add(&rj_returned);
}


/* A pool worker made ready in the loop's poll phase (an async callback
 * here, a read callback in a server) gets its drain posted at once
 * (guarantee 12): before the loop goes round to poll again, with no timer
 * or idle phase in between. A prepare handle, which runs just before the
 * next poll, finds the drain posted; then the task runs. */
static event_t poll_ran;
static uvs_worker_t poll_w;
static uvs_task_t poll_task;
static uv_prepare_t poll_prepare;
static int poll_scheduled;
static int poll_posted_before_poll;

static void poll_run(uvs_task_t* task) {
  (void) task;
  ev_add(&poll_ran);
}


static void poll_async_cb(uv_async_t* handle) {
  ASSERT_OK(uvs_schedule(&poll_w, &poll_task));
  poll_scheduled = 1;
  uv_close((uv_handle_t*) handle, NULL);
}


static void poll_prepare_cb(uv_prepare_t* handle) {
  uvs_stats_t st;

  if (!poll_scheduled)
    return;
  uvs_sched_stats(&sched, &st);
  poll_posted_before_poll = st.drains == 1;
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(conserve_poll_phase_posts_at_once) {
  uv_async_t async;

  ev_init(&poll_ran);
  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &poll_w, UVS_POOL));
  ASSERT_OK(uvs_task_init(&poll_task, poll_run, ok_done));
  ASSERT_OK(uv_async_init(&loop, &async, poll_async_cb));
  ASSERT_OK(uv_prepare_init(&loop, &poll_prepare));
  ASSERT_OK(uv_prepare_start(&poll_prepare, poll_prepare_cb));
  ASSERT_OK(uv_async_send(&async));
  ndone = 0;
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(poll_posted_before_poll, 1);
  ASSERT_GE(ev_wait(&poll_ran, 1, 10000), 1);
  ASSERT_EQ(ndone, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ev_destroy(&poll_ran);
  return 0;
}


static void rj_controller(void* arg) {
  uv_thread_t producer;
  uint64_t t0;

  (void) arg;
  /* Full: the first holder runs, the second is queued. */
  ASSERT_GE(ev_wait(&rj_started, 1, 5000), 1);
  ASSERT_OK(uvs_schedule(&rj_w, &rj_t[1]));
  ASSERT_UINT64_EQ(rj_rejected(), 0);

  /* A wait that gets in. */
  ASSERT_OK(uv_thread_create(&producer, rj_producer, NULL));
  ASSERT_GE(ev_wait(&rj_calling, 1, 5000), 1);
  uv_sleep(50);
  ASSERT_EQ(ev_get(&rj_returned), 0);
  ev_add(&rj_released); /* the second holder starts: room */
  ASSERT_GE(ev_wait(&rj_returned, 1, 5000), 1);
  ASSERT_OK(uv_thread_join(&producer));
  ASSERT_OK(atomic_load(&rj_err));
  ASSERT_UINT64_EQ(rj_rejected(), 0);

  /* A wait that times out: the second holder runs, the producer's task is
   * queued, and nothing makes room. */
  ASSERT_GE(ev_wait(&rj_started, 2, 5000), 2);
  t0 = test_hrtime_ms();
  ASSERT_ERR(uvs_schedule_wait(&rj_w, &rj_t[3], 200), UV_ETIMEDOUT);
  ASSERT_UINT64_GE(test_hrtime_ms() - t0, 199);
  ASSERT_UINT64_EQ(rj_rejected(), 1);

  ev_add(&rj_released);
  ASSERT_OK(uv_async_send(&rj_alive));
}


static void rj_alive_cb(uv_async_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(conserve_rejected_after_wait) {
  uvs_worker_options_t o;
  uv_thread_t controller;
  int i;

  setup(NULL);
  ev_init(&rj_started);
  ev_init(&rj_released);
  ev_init(&rj_calling);
  ev_init(&rj_returned);
  /* Keeps uv_run from returning until the controller is done. */
  ASSERT_OK(uv_async_init(&loop, &rj_alive, rj_alive_cb));
  memset(&o, 0, sizeof(o));
  o.max_pending = 1;
  o.on_full = UVS_FULL_BLOCK;
  ASSERT_OK(uvs_worker_init_ex(&sched, &rj_w, UVS_POOL, &o));
  for (i = 0; i < 4; i++)
    ASSERT_OK(uvs_task_init(&rj_t[i], i < 2 ? rj_hold_run : noop_run, ok_done));
  rj_t[0].data = &rj_idx[0];
  rj_t[1].data = &rj_idx[1];
  ASSERT_OK(uvs_schedule(&rj_w, &rj_t[0]));
  ASSERT_OK(uv_thread_create(&controller, rj_controller, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&controller));
  ASSERT_EQ(ndone, 3);
  ASSERT_UINT64_EQ(rj_rejected(), 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ev_destroy(&rj_started);
  ev_destroy(&rj_released);
  ev_destroy(&rj_calling);
  ev_destroy(&rj_returned);
  return 0;
}
