#include "task.h"

#include <stdatomic.h>

typedef struct {
  uvs_task_t task;
  int id;
  uint64_t delay;
  uint64_t t_call;
  uint64_t t_run;
  int status;
} ttask_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t pool_w;
static uvs_worker_t loop_w;
static ttask_t tasks[256];
static int order[256];
static atomic_int norder;
static atomic_int runs;
static int done_calls;
static int in_call;
static int close_at;


static void setup(const uvs_sched_options_t* opts) {
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, opts));
  ASSERT_OK(uvs_worker_init(&sched, &pool_w, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &loop_w, UVS_LOOP));
}


static void timed_run_cb(uvs_task_t* task) {
  ttask_t* t;

  ASSERT_EQ(in_call, 0);
  t = TEST_CONTAINER_OF(task, ttask_t, task);
  t->t_run = uv_hrtime();
  /* Guarantee 6: never before t_call + delay. */
  ASSERT_UINT64_GE(t->t_run, t->t_call + t->delay * 1000000u);
  order[atomic_fetch_add(&norder, 1)] = t->id;
  atomic_fetch_add(&runs, 1);
}


static void timed_done_cb(uvs_task_t* task, int status) {
  ttask_t* t;

  t = TEST_CONTAINER_OF(task, ttask_t, task);
  t->status = status;
  ASSERT_OK(status);
  done_calls++;
  if (close_at != 0 && done_calls == close_at)
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void schedule_timed(uvs_worker_t* w, ttask_t* t, int id, uint64_t d) {
  t->id = id;
  t->delay = d;
  ASSERT_OK(uvs_task_init(&t->task, timed_run_cb, timed_done_cb));
  t->t_call = uv_hrtime();
  ASSERT_OK(uvs_schedule_after(w, &t->task, d));
}


static void not_early(uvs_worker_t* w) {
  static const uint64_t delays[] = {0, 1, 2, 3, 5, 7, 10, 16, 25, 33};
  int i;
  int n;

  n = (int) (sizeof(delays) / sizeof(delays[0]));
  setup(NULL);
  for (i = 0; i < 3 * n; i++) {
    schedule_timed(w, &tasks[i], i, delays[i % n]);
    /* Spread the calls over sub-ms phases of the clock. */
    test_spin_us(137);
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&runs), 3 * n);
  ASSERT_EQ(done_calls, 3 * n);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(time_after_not_early_loop) {
  not_early(&loop_w);
  return 0;
}


TEST_IMPL(time_after_not_early_pool) {
  not_early(&pool_w);
  return 0;
}


/* ...also when scheduled from foreign threads while the loop runs. */
static void foreign_timed_thread(void* arg) {
  int base;
  int i;

  base = (int) (intptr_t) arg;
  for (i = 0; i < 40; i++) {
    schedule_timed(i & 1 ? &pool_w : &loop_w, &tasks[base + i], base + i,
                   (uint64_t) (i % 7));
    test_spin_us(50);
  }
}


TEST_IMPL(time_after_not_early_foreign) {
  uvs_sched_options_t opts;
  uv_thread_t threads[3];
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  setup(&opts);
  close_at = 120;
  for (i = 0; i < 3; i++)
    ASSERT_OK(uv_thread_create(&threads[i], foreign_timed_thread,
                               (void*) (intptr_t) (i * 40)));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < 3; i++) ASSERT_OK(uv_thread_join(&threads[i]));
  ASSERT_EQ(atomic_load(&runs), 120);
  ASSERT_EQ(done_calls, 120);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(time_after_zero_not_inline) {
  setup(NULL);
  in_call = 1;
  schedule_timed(&loop_w, &tasks[0], 0, 0);
  schedule_timed(&pool_w, &tasks[1], 1, 0);
  in_call = 0;
  ASSERT_EQ(atomic_load(&runs), 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&runs), 2);
  ASSERT_EQ(done_calls, 2);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Delayed tasks of one worker with the same delay run in schedule order,
 * also with calls within one ms. */
static void same_delay_order(uvs_worker_t* w) {
  int i;

  for (i = 0; i < 200; i++) schedule_timed(w, &tasks[i], i, 4);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(norder, 200);
  for (i = 0; i < 200; i++) ASSERT_EQ(order[i], i);
}


TEST_IMPL(time_after_same_delay_order_loop) {
  setup(NULL);
  same_delay_order(&loop_w);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(time_after_same_delay_order_pool) {
  setup(NULL);
  same_delay_order(&pool_w);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(time_after_due_order) {
  int i;

  setup(NULL);
  /* Scheduled longest first: run shortest first. */
  for (i = 0; i < 6; i++)
    schedule_timed(&pool_w, &tasks[i], i, (uint64_t) (6 - i) * 6);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(norder, 6);
  for (i = 0; i < 6; i++) ASSERT_EQ(order[i], 5 - i);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A delayed task that falls due joins the tail of its worker's FIFO: it
 * runs after the tasks queued before it fell due. The worker is held busy
 * by a gate task until both delayed tasks have fallen due (the worker's
 * metrics say none is delayed any more), however slow the machine. */
static uv_sem_t go;

static void gate_run_cb(uvs_task_t* task) {
  (void) task;
  uv_sem_wait(&go);
}


static void gate_timer_cb(uv_timer_t* handle) {
  uvs_worker_metrics_t m;
  int i;

  ASSERT_OK(uvs_worker_metrics(&pool_w, &m));
  if (m.delayed != 0)
    return; /* look again at the next tick */
  /* The delayed tasks are in the FIFO by now; these go behind them. */
  for (i = 2; i < 5; i++) {
    tasks[i].id = i;
    tasks[i].t_call = uv_hrtime();
    ASSERT_OK(uvs_task_init(&tasks[i].task, timed_run_cb, timed_done_cb));
    ASSERT_OK(uvs_schedule(&pool_w, &tasks[i].task));
  }
  uv_sem_post(&go);
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(time_after_joins_fifo_tail) {
  uv_timer_t timer;
  uvs_task_t gate;
  int i;

  ASSERT_OK(uv_sem_init(&go, 0));
  setup(NULL);
  ASSERT_OK(uvs_task_init(&gate, gate_run_cb, NULL));
  ASSERT_OK(uvs_schedule(&pool_w, &gate));
  schedule_timed(&pool_w, &tasks[1], 1, 5);
  schedule_timed(&pool_w, &tasks[0], 0, 0);
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, gate_timer_cb, 1, 1));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(norder, 5);
  for (i = 0; i < 5; i++) ASSERT_EQ(order[i], i);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  return 0;
}


/* Periodic tasks. */
#define MAXRUNS 256

typedef struct {
  uvs_task_t task;
  uint64_t t0; /* ns, taken right before the schedule call */
  uint64_t delay;
  uint64_t period;
  int n;
  int stop_after;
  uint64_t spin_ms[MAXRUNS];
  uint64_t start[MAXRUNS];
  uint64_t end[MAXRUNS];
  uint64_t stop_at; /* ns; cancel the first run starting at or after */
  int done_calls;
  int status;
} ptask_t;

static ptask_t pt;


static uint64_t grid(const ptask_t* p, int k) {
  return p->t0 + (p->delay + (uint64_t) k * p->period) * 1000000u;
}


static void periodic_run_cb(uvs_task_t* task) {
  ptask_t* p;
  uint64_t now;

  p = TEST_CONTAINER_OF(task, ptask_t, task);
  now = uv_hrtime();
  ASSERT_LT(p->n, MAXRUNS);
  /* Run k never starts before grid point k. */
  ASSERT_UINT64_GE(now, grid(p, p->n));
  p->start[p->n] = now;
  if (p->spin_ms[p->n] > 0)
    test_spin_ms(p->spin_ms[p->n]);
  p->end[p->n] = uv_hrtime();
  p->n++;
  if (p->n == p->stop_after || (p->stop_at != 0 && now >= p->stop_at))
    ASSERT_OK(uvs_task_cancel(task));
}


static void periodic_done_cb(uvs_task_t* task, int status) {
  ptask_t* p;

  p = TEST_CONTAINER_OF(task, ptask_t, task);
  p->done_calls++;
  p->status = status;
}


static void run_periodic(uvs_worker_t* w, uint64_t delay, uint64_t period) {
  pt.delay = delay;
  pt.period = period;
  ASSERT_OK(uvs_task_init(&pt.task, periodic_run_cb, periodic_done_cb));
  pt.t0 = uv_hrtime();
  ASSERT_OK(uvs_schedule_every(w, &pt.task, delay, period));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(pt.done_calls, 1);
  ASSERT_ERR(pt.status, UV_ECANCELED);
}


TEST_IMPL(periodic_not_before_grid_loop) {
  setup(NULL);
  pt.stop_after = 15;
  run_periodic(&loop_w, 3, 7);
  ASSERT_EQ(pt.n, 15);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(periodic_not_before_grid_pool) {
  setup(NULL);
  pt.stop_after = 15;
  run_periodic(&pool_w, 0, 4);
  ASSERT_EQ(pt.n, 15);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Grid points that pass during a slow run are coalesced into at most one
 * run: after the first run (busy 35 ms with period 10 ms), at most one run
 * starts before grid point 4, and the runs never bunch up. */
static void coalesce_slow_run(uvs_worker_t* w) {
  uint64_t window_end;
  int i;
  int early;

  setup(NULL);
  pt.spin_ms[0] = 35;
  pt.stop_after = 12;
  run_periodic(w, 0, 10);
  ASSERT_EQ(pt.n, 12);
  ASSERT_UINT64_GE(pt.end[0], grid(&pt, 3));
  early = 0;
  for (i = 1; i < pt.n; i++)
    if (pt.start[i] < grid(&pt, 4))
      early++;
  ASSERT_LE(early, 1);
  /* Over any window from the start, at most window/period + 2 runs. */
  for (i = 1; i < pt.n; i++) {
    window_end = pt.start[i];
    ASSERT_LE(i + 1, (int64_t) ((window_end - pt.t0) / 10000000u) + 2);
  }
  /* Back on the grid after the catch-up run: no two runs within one grid
   * interval. */
  for (i = 2; i < pt.n; i++) ASSERT_UINT64_GE(pt.start[i], grid(&pt, i + 2));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(periodic_coalesce_slow_run_pool) {
  coalesce_slow_run(&pool_w);
  return 0;
}


TEST_IMPL(periodic_coalesce_slow_run_loop) {
  coalesce_slow_run(&loop_w);
  return 0;
}


/* The loop itself is blocked for 45 ms while a 5 ms periodic task waits:
 * the missed grid points do not each get a run. Right after the block there
 * is the late run and at most one catch-up run (a grid point may pass
 * between the task falling due and its run starting), then the grid. */
static uint64_t blocked_until;

static void block_loop_cb(uv_timer_t* handle) {
  test_spin_ms(45);
  blocked_until = uv_hrtime();
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(periodic_coalesce_blocked_loop) {
  uv_timer_t timer;
  uint64_t block_end;
  uint64_t next_grid;
  int i;
  int in_gap;

  setup(NULL);
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, block_loop_cb, 12, 0));
  pt.stop_after = 20;
  run_periodic(&loop_w, 0, 5);
  ASSERT_EQ(pt.n, 20);
  /* The first run after the block. */
  ASSERT_UINT64_NE(blocked_until, 0);
  block_end = 0;
  for (i = 0; i < pt.n && block_end == 0; i++)
    if (pt.start[i] >= blocked_until)
      block_end = pt.start[i];
  ASSERT_UINT64_NE(block_end, 0);
  /* Runs from block_end up to the second grid point after it. */
  next_grid = block_end + 5000000u - (block_end - pt.t0) % 5000000u;
  in_gap = 0;
  for (i = 0; i < pt.n; i++)
    if (pt.start[i] >= block_end && pt.start[i] < next_grid + 5000000u)
      in_gap++;
  ASSERT_LE(in_gap, 3);
  in_gap = 0;
  for (i = 0; i < pt.n; i++)
    if (pt.start[i] >= block_end && pt.start[i] < next_grid)
      in_gap++;
  ASSERT_LE(in_gap, 2);
  /* Over any window from the start, at most window/period + 2 runs. */
  for (i = 0; i < pt.n; i++)
    ASSERT_LE(i + 1, (int64_t) ((pt.start[i] - pt.t0) / 5000000u) + 2);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Grid points that pass while the task waits in its worker's FIFO behind a
 * long task are folded into its one late run: the run after it waits for the
 * next grid point (SPEC 6, "passes while the task is queued"). The blocker
 * ends half a period before a grid point, so that no point passes during
 * the late run itself (which would rightly earn one more run). */
static void spin_250ms_cb(uvs_task_t* task) {
  (void) task;
  test_spin_ms(250);
}


TEST_IMPL(periodic_coalesce_queued_behind_busy) {
  uvs_task_t blocker;

  setup(NULL);
  ASSERT_OK(uvs_task_init(&blocker, spin_250ms_cb, NULL));
  ASSERT_OK(uvs_schedule(&pool_w, &blocker));
  pt.stop_after = 3;
  run_periodic(&pool_w, 0, 100);
  ASSERT_EQ(pt.n, 3);
  /* The first run waited for the blocker, past grid points 1 and 2. */
  ASSERT_UINT64_GE(pt.start[0], grid(&pt, 2));
  /* One run stood for all of them: the next starts at a later point. */
  ASSERT_UINT64_GE(
      pt.start[1],
      pt.t0 + ((pt.start[0] - pt.t0) / 100000000u + 1) * 100000000u);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* No drift: each run is busy for most of the period, so an implementation
 * that re-arms "period after the run" would fall far behind the grid. Over
 * 2 s with a 40 ms period the grid has 50 points; a drifting one would
 * start about 29 runs. Lateness only costs a run when it exceeds a whole
 * period, so this holds on a slow machine. */
TEST_IMPL(periodic_no_drift) {
  int i;
  int started;

  setup(NULL);
  for (i = 0; i < MAXRUNS; i++) pt.spin_ms[i] = 30;
  pt.stop_after = 0;
  pt.stop_at = 0;
  pt.delay = 0;
  pt.period = 40;
  ASSERT_OK(uvs_task_init(&pt.task, periodic_run_cb, periodic_done_cb));
  pt.t0 = uv_hrtime();
  pt.stop_at = pt.t0 + 2000 * (uint64_t) 1000000;
  ASSERT_OK(uvs_schedule_every(&pool_w, &pt.task, 0, 40));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(pt.done_calls, 1);
  started = 0;
  for (i = 0; i < pt.n; i++)
    if (pt.start[i] < pt.stop_at)
      started++;
  ASSERT_LE(started, 51);
  /* A drifting implementation starts about 29; a loaded machine can cost
   * a correct one several late (coalesced) grid points. */
  ASSERT_GE(started, 37);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(periodic_first_run_after_delay) {
  setup(NULL);
  pt.stop_after = 2;
  run_periodic(&pool_w, 25, 100);
  ASSERT_EQ(pt.n, 2);
  ASSERT_UINT64_GE(pt.start[0], pt.t0 + 25 * 1000000u);
  ASSERT_UINT64_GE(pt.start[1], pt.t0 + 125 * 1000000u);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A callback that held the loop up leaves libuv's cached time behind.
 * A timer armed from that time would wake the poll as much later than due
 * as the callback took; the scheduler brings the time up to date first. */
static ttask_t after_block;

static void block_then_schedule(uv_timer_t* handle) {
  (void) handle;
  test_spin_us(200000);
  schedule_timed(&loop_w, &after_block, 0, 50);
}


TEST_IMPL(time_after_blocked_callback_not_late) {
  uv_timer_t blocker;
  uint64_t due;

  setup(NULL);
  ASSERT_OK(uv_timer_init(&loop, &blocker));
  ASSERT_OK(uv_timer_start(&blocker, block_then_schedule, 0, 0));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  due = after_block.t_call + 50 * 1000000u;
  ASSERT_UINT64_GE(after_block.t_run, due);
  /* About 1 ms late; armed from the stale time, 160 ms in one run. */
  fprintf(stderr, "# late by %.3f ms\n",
          (double) (after_block.t_run - due) / 1e6);
  ASSERT_UINT64_LT(after_block.t_run - due, 50 * 1000000u);
  uv_close((uv_handle_t*) &blocker, NULL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
