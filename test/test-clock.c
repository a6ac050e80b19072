/* The manual clock (SPEC.md, "0.2 additions"): with manual_clock the
 * scheduler's time stands still until uvs_clock_advance() moves it, which
 * fires every delayed and periodic task due on the way, in due order.
 *
 * SPEC does not say whether pending delayed tasks keep uv_run() from
 * returning while a manual clock stands still, so these tests never wait in
 * UV_RUN_DEFAULT with delayed tasks pending: they turn the loop with
 * UV_RUN_NOWAIT until what they expect happened (bounded in time). */

#include "task.h"

#include <stdatomic.h>

#define MAXN 16

typedef struct {
  uvs_task_t task;
  int id;
  int status;
  int done_calls;
  atomic_int runs;
  uint64_t now_at_run[64]; /* uvs_now() at each run */
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_thread_t loop_thread;
static item_t items[MAXN];
static int run_order[256];
static atomic_int nruns;
static int ndone;
static uint64_t t0;


static void item_run(uvs_task_t* task) {
  item_t* it;
  int n;

  it = TEST_CONTAINER_OF(task, item_t, task);
  n = atomic_load(&it->runs);
  if (n < 64)
    it->now_at_run[n] = uvs_now(&sched);
  atomic_store(&it->runs, n + 1); /* one at a time: guarantee 2 */
  n = atomic_fetch_add(&nruns, 1);
  if (n < 256)
    run_order[n] = it->id;
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  ndone++;
}


static void init_items(int n) {
  int i;

  for (i = 0; i < n; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    items[i].id = i;
    ASSERT_OK(uvs_task_init(&items[i].task, item_run, item_done));
  }
}


static void setup(int manual, uvs_where_t where) {
  uvs_sched_options_t o;

  loop_thread = uv_thread_self();
  memset(&o, 0, sizeof(o));
  o.manual_clock = manual;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  ASSERT_OK(uvs_worker_init(&sched, &worker, where));
  t0 = uvs_now(&sched);
}


/* Turns the loop until `cond` holds, for at most 5 s of real time; then a
 * few more turns, so that anything extra that was going to run has run. */
#define RUN_UNTIL(cond)                                                      \
  do {                                                                       \
    uint64_t end_ = test_hrtime_ms() + 5000;                                 \
    int extra_;                                                              \
    while (!(cond) && test_hrtime_ms() < end_) uv_run(&loop, UV_RUN_NOWAIT); \
    ASSERT(cond);                                                            \
    for (extra_ = 0; extra_ < 5; extra_++) uv_run(&loop, UV_RUN_NOWAIT);     \
  } while (0)

/* A few turns of the loop, with pool threads given a moment: what was not
 * due must still not have run after them. */
static void settle(void) {
  int i;

  for (i = 0; i < 20; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_sleep(1);
  }
}


static void advance(uint64_t ms) {
  ASSERT_OK(uvs_clock_advance(&sched, ms));
}


static void now_reader(void* arg) {
  uint64_t* out;

  out = arg;
  *out = uvs_now(&sched);
}


TEST_IMPL(clock_stands_still) {
  uv_thread_t thread;
  uint64_t foreign_now;

  setup(1, UVS_LOOP);
  ASSERT_UINT64_LE(t0, test_hrtime_ms());
  uv_sleep(30);
  settle();
  ASSERT_UINT64_EQ(uvs_now(&sched), t0);
  ASSERT_OK(uv_thread_create(&thread, now_reader, &foreign_now));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_UINT64_EQ(foreign_now, t0);
  advance(7);
  ASSERT_UINT64_EQ(uvs_now(&sched), t0 + 7);
  advance(0);
  ASSERT_UINT64_EQ(uvs_now(&sched), t0 + 7);
  uv_sleep(20);
  settle();
  ASSERT_UINT64_EQ(uvs_now(&sched), t0 + 7);
  ASSERT_OK(uv_thread_create(&thread, now_reader, &foreign_now));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_UINT64_EQ(foreign_now, t0 + 7);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A task delayed by 50 ms runs only once advances total 50 ms, never
 * before, even after sleeping 80 ms of real time. */
static void delay_needs_advance(uvs_where_t where) {
  setup(1, where);
  init_items(1);
  ASSERT_OK(uvs_schedule_after(&worker, &items[0].task, 50));
  uv_sleep(80);
  settle();
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  advance(30);
  settle();
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  advance(19);
  settle();
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  ASSERT_EQ(ndone, 0);
  advance(1);
  RUN_UNTIL(ndone == 1);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(items[0].status);
  ASSERT_UINT64_GE(items[0].now_at_run[0], t0 + 50);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(clock_delay_needs_advance_loop) {
  delay_needs_advance(UVS_LOOP);
  return 0;
}


TEST_IMPL(clock_delay_needs_advance_pool) {
  delay_needs_advance(UVS_POOL);
  return 0;
}


/* One advance fires everything due on the way, in due order (same ms:
 * schedule order), periodic tasks included. */
TEST_IMPL(clock_advance_due_order) {
  setup(1, UVS_LOOP);
  init_items(5);
  ASSERT_OK(uvs_schedule_after(&worker, &items[4].task, 30));
  ASSERT_OK(uvs_schedule_after(&worker, &items[1].task, 10));
  ASSERT_OK(uvs_schedule_after(&worker, &items[3].task, 20));
  ASSERT_OK(uvs_schedule_after(&worker, &items[2].task, 10));
  ASSERT_OK(uvs_schedule_every(&worker, &items[0].task, 5, 7));
  advance(31);
  RUN_UNTIL(atomic_load(&nruns) == 5);
  ASSERT_EQ(run_order[0], 0);
  ASSERT_EQ(run_order[1], 1);
  ASSERT_EQ(run_order[2], 2);
  ASSERT_EQ(run_order[3], 3);
  ASSERT_EQ(run_order[4], 4);
  /* The periodic task coalesced the grid points 5..26 into one run and is
   * next due at 33 (its grid: 5 + 7k). */
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  advance(1);
  settle();
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  advance(1);
  RUN_UNTIL(atomic_load(&items[0].runs) == 2);
  ASSERT_EQ(atomic_load(&nruns), 6);
  ASSERT_UINT64_EQ(items[0].now_at_run[1], t0 + 33);
  ASSERT_EQ(ndone, 4);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  return 0;
}


/* Advancing in steps of the period: one run per step, on the grid. */
#define STEPS 20

static void periodic_steps(uvs_where_t where) {
  int k;

  setup(1, where);
  init_items(1);
  ASSERT_OK(uvs_schedule_every(&worker, &items[0].task, 10, 10));
  for (k = 0; k < STEPS; k++) {
    advance(10);
    RUN_UNTIL(atomic_load(&items[0].runs) == k + 1);
    ASSERT_EQ(atomic_load(&items[0].runs), k + 1);
    ASSERT_UINT64_EQ(items[0].now_at_run[k], t0 + 10 + 10 * (uint64_t) k);
  }
  ASSERT_EQ(ndone, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
}


TEST_IMPL(clock_periodic_steps_loop) {
  periodic_steps(UVS_LOOP);
  return 0;
}


TEST_IMPL(clock_periodic_steps_pool) {
  periodic_steps(UVS_POOL);
  return 0;
}


/* A pool run that is still going when an advance reaches the task's next
 * grid point re-arms the task at a time that is already due: it runs at
 * once, with no further advance, as it would on a real clock. */
static uv_sem_t hold_sem;
static atomic_int held_runs;

static void held_run(uvs_task_t* task) {
  item_run(task);
  if (atomic_fetch_add(&held_runs, 1) == 0)
    uv_sem_wait(&hold_sem);
}


TEST_IMPL(clock_periodic_rearmed_after_advance_pool) {
  setup(1, UVS_POOL);
  init_items(1);
  ASSERT_OK(uv_sem_init(&hold_sem, 0));
  ASSERT_OK(uvs_task_init(&items[0].task, held_run, item_done));
  ASSERT_OK(uvs_schedule_every(&worker, &items[0].task, 10, 10));
  advance(10);
  RUN_UNTIL(atomic_load(&items[0].runs) == 1);
  /* The first run holds its pool thread while the clock passes 20. */
  advance(10);
  settle();
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  uv_sem_post(&hold_sem);
  RUN_UNTIL(atomic_load(&items[0].runs) == 2);
  ASSERT_UINT64_EQ(items[0].now_at_run[1], t0 + 20);
  /* Then on its grid again: nothing until 30. */
  settle();
  ASSERT_EQ(atomic_load(&items[0].runs), 2);
  advance(10);
  RUN_UNTIL(atomic_load(&items[0].runs) == 3);
  ASSERT_UINT64_EQ(items[0].now_at_run[2], t0 + 30);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&hold_sem);
  return 0;
}


/* One huge advance: the periodic task runs once for all the grid points
 * passed, then stays on its grid. */
TEST_IMPL(clock_huge_advance_coalesces) {
  setup(1, UVS_LOOP);
  init_items(1);
  ASSERT_OK(uvs_schedule_every(&worker, &items[0].task, 10, 10));
  advance(1000000);
  RUN_UNTIL(atomic_load(&items[0].runs) == 1);
  settle();
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_UINT64_EQ(items[0].now_at_run[0], t0 + 1000000);
  advance(9);
  settle();
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  advance(1);
  RUN_UNTIL(atomic_load(&items[0].runs) == 2);
  ASSERT_UINT64_EQ(items[0].now_at_run[1], t0 + 1000010);
  advance(10);
  RUN_UNTIL(atomic_load(&items[0].runs) == 3);
  ASSERT_UINT64_EQ(items[0].now_at_run[2], t0 + 1000020);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Turns the loop until nothing keeps it alive, for at most 5 s of real
 * time. SPEC: delayed and periodic tasks of a manual clock don't keep
 * uv_run() from returning; queued and running tasks (a pool drain in
 * flight) do, so once it returns 0 every task that fell due has run and
 * been handed back. */
static void run_idle(void) {
  uint64_t end;

  end = test_hrtime_ms() + 5000;
  while (uv_run(&loop, UV_RUN_NOWAIT) != 0)
    ASSERT_UINT64_LT(test_hrtime_ms(), end);
}


/* An advance fires what is due at its target and nothing due 1 ms later:
 * A due at 10, B at 11, and a periodic task whose first grid point is 11.
 * After advance(10) only A ran; after advance(1) B and the periodic task
 * ran, each seeing the clock at t0 + 11; the periodic task's next grid
 * point, 61, takes the clock to reach 61 exactly. Issue 24. */
static void advance_exact(uvs_where_t where) {
  setup(1, where);
  init_items(3);
  ASSERT_OK(uvs_schedule_after(&worker, &items[0].task, 10));
  ASSERT_OK(uvs_schedule_after(&worker, &items[1].task, 11));
  ASSERT_OK(uvs_schedule_every(&worker, &items[2].task, 11, 50));
  run_idle();
  ASSERT_EQ(atomic_load(&nruns), 0);

  advance(10);
  run_idle();
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_UINT64_EQ(items[0].now_at_run[0], t0 + 10);
  ASSERT_EQ(atomic_load(&items[1].runs), 0);
  ASSERT_EQ(atomic_load(&items[2].runs), 0);
  ASSERT_EQ(ndone, 1);
  ASSERT_OK(items[0].status);

  advance(1);
  run_idle();
  ASSERT_EQ(atomic_load(&items[1].runs), 1);
  ASSERT_EQ(atomic_load(&items[2].runs), 1);
  ASSERT_UINT64_EQ(items[1].now_at_run[0], t0 + 11);
  ASSERT_UINT64_EQ(items[2].now_at_run[0], t0 + 11);
  ASSERT_EQ(atomic_load(&nruns), 3);
  ASSERT_EQ(ndone, 2);
  ASSERT_OK(items[1].status);

  advance(49);
  run_idle();
  ASSERT_EQ(atomic_load(&items[2].runs), 1);
  advance(1);
  run_idle();
  ASSERT_EQ(atomic_load(&items[2].runs), 2);
  ASSERT_UINT64_EQ(items[2].now_at_run[1], t0 + 61);
  ASSERT_EQ(atomic_load(&nruns), 4);
  ASSERT_EQ(ndone, 2);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ASSERT_ERR(items[2].status, UV_ECANCELED);
}


TEST_IMPL(clock_advance_exact_loop) {
  advance_exact(UVS_LOOP);
  return 0;
}


TEST_IMPL(clock_advance_exact_pool) {
  advance_exact(UVS_POOL);
  return 0;
}


/* UV_EINVAL without manual_clock, for NULL, and off the loop thread (a
 * foreign thread, a pool task). */
static atomic_int off_loop_err;

static void advance_off_loop(void* arg) {
  (void) arg;
  atomic_store(&off_loop_err, uvs_clock_advance(&sched, 5));
}


static void advance_in_pool_run(uvs_task_t* task) {
  (void) task;
  atomic_store(&off_loop_err, uvs_clock_advance(&sched, 5));
}


TEST_IMPL(clock_advance_errors) {
  uvs_worker_t pool;
  uvs_task_t task;
  uv_thread_t thread;

  setup(0, UVS_LOOP);
  ASSERT_ERR(uvs_clock_advance(&sched, 5), UV_EINVAL);
  ASSERT_ERR(uvs_clock_advance(NULL, 5), UV_EINVAL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);

  setup(1, UVS_LOOP);
  ASSERT_ERR(uvs_clock_advance(NULL, 5), UV_EINVAL);
  atomic_store(&off_loop_err, 1);
  ASSERT_OK(uv_thread_create(&thread, advance_off_loop, NULL));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_ERR(atomic_load(&off_loop_err), UV_EINVAL);
  ASSERT_OK(uvs_worker_init(&sched, &pool, UVS_POOL));
  ASSERT_OK(uvs_task_init(&task, advance_in_pool_run, NULL));
  atomic_store(&off_loop_err, 1);
  ASSERT_OK(uvs_schedule(&pool, &task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(atomic_load(&off_loop_err), UV_EINVAL);
  /* None of them moved the clock. */
  ASSERT_UINT64_EQ(uvs_now(&sched), t0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* 10k periodic tasks of period 1 s: advance 24 h in one call (each runs
 * once), then 1 s at a time (each runs once per step, on its grid).
 * Correctness only; the time it takes is a bench figure. */
#define NPER 10000
#define PER_STEPS 10

typedef struct {
  uvs_task_t task;
  int runs;
  int done_calls;
} per_t;

static per_t per[NPER];
static long per_runs;
static int per_off_grid;

static void per_run(uvs_task_t* task) {
  per_t* p;
  uint64_t now;

  p = TEST_CONTAINER_OF(task, per_t, task);
  p->runs++;
  per_runs++;
  now = uvs_now(&sched);
  if (now < t0 + 1000 || (now - t0) % 1000 != 0)
    per_off_grid++;
}


static void per_done(uvs_task_t* task, int status) {
  per_t* p;

  p = TEST_CONTAINER_OF(task, per_t, task);
  ASSERT_ERR(status, UV_ECANCELED);
  p->done_calls++;
}


TEST_IMPL(clock_advance_day_10k_periodic) {
  int step;
  int i;

  setup(1, UVS_LOOP);
  for (i = 0; i < NPER; i++) {
    ASSERT_OK(uvs_task_init(&per[i].task, per_run, per_done));
    ASSERT_OK(uvs_schedule_every(&worker, &per[i].task, 1000, 1000));
  }
  advance(24ull * 3600 * 1000);
  RUN_UNTIL(per_runs == NPER);
  ASSERT_EQ(per_runs, NPER);
  for (i = 0; i < NPER; i++) ASSERT_EQ(per[i].runs, 1);
  for (step = 1; step <= PER_STEPS; step++) {
    advance(1000);
    RUN_UNTIL(per_runs == (long) NPER * (step + 1));
    ASSERT_EQ(per_runs, (long) NPER * (step + 1));
  }
  for (i = 0; i < NPER; i++) {
    ASSERT_EQ(per[i].runs, PER_STEPS + 1);
    ASSERT_EQ(per[i].done_calls, 0);
  }
  ASSERT_EQ(per_off_grid, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  for (i = 0; i < NPER; i++) ASSERT_EQ(per[i].done_calls, 1);
  return 0;
}
