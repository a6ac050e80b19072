/* Per-task expiry (SPEC.md, "0.5"): uvs_task_set_expiry(task, t) gives one
 * task the stale-work bound that max_wait_ms gives a whole worker. A run
 * of the task that became ready more than t ms before it would start is
 * shed as 0.3's shedding sheds: UV_ETIMEDOUT, a periodic run skips its
 * grid point, counted in `expired` (and in the stats' `cancelled`). The
 * smaller of the task's and the worker's bound applies; 0 removes it (the
 * default). It stays set for the task's later schedules until changed.
 * UV_EBUSY while the task is queued, delayed or running; UV_EINVAL for
 * NULL or t above 2^40. Done-less tasks are never shed.
 *
 * Waits are made long on purpose: a gate holds the worker for HOLD_MS,
 * three times the bound T_MS, while tasks wait behind it (on a loop
 * worker, the gate's run holds the loop). Tasks that must not be shed wait
 * as long, under a bound well above the wait. */

#include "helpers.h"

#include <stdatomic.h>

#define T_MS 100
#define HOLD_MS 300
#define LONG_MS 60000
#define NITEM 16

typedef struct {
  uvs_task_t task;
  int id;
  atomic_int runs;
  int status;
  int done_calls;
  uint64_t now_at_run;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_thread_t loop_thread;
static item_t items[NITEM];
static int ndone;
static uint64_t t0;
static void (*on_done)(item_t* it);


static void item_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  it->now_at_run = uvs_now(&sched);
  atomic_fetch_add(&it->runs, 1);
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  if (status == UV_ETIMEDOUT)
    ASSERT_EQ(atomic_load(&it->runs), 0);
  ndone++;
  if (on_done != NULL)
    on_done(it);
}


/* The gate: holds its worker (or the loop) for HOLD_MS. */
static int gate_done_calls;

static void gate_run(uvs_task_t* task) {
  (void) task;
  uv_sleep(HOLD_MS);
}


static void gate_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  gate_done_calls++;
}


static uvs_task_t gate;

static unsigned width;

static void setup(uvs_where_t where, uint64_t max_wait_ms, int manual) {
  uvs_sched_options_t so;
  uvs_worker_options_t wo;
  int i;

  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  memset(&so, 0, sizeof(so));
  so.manual_clock = manual;
  ASSERT_OK(uvs_sched_init(&loop, &sched, &so));
  memset(&wo, 0, sizeof(wo));
  wo.max_wait_ms = max_wait_ms;
  wo.width = width;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, where, &wo));
  for (i = 0; i < NITEM; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    items[i].id = i;
    items[i].status = 1;
    ASSERT_OK(uvs_task_init(&items[i].task, item_run, item_done));
  }
  ASSERT_OK(uvs_task_init(&gate, gate_run, gate_done));
  ndone = 0;
  gate_done_calls = 0;
  on_done = NULL;
  t0 = uvs_now(&sched);
}


static void teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


static uint64_t expired_now(void) {
  uvs_worker_metrics_t m;

  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  return m.expired;
}


/* ---- errors ------------------------------------------------------------ */

static int run_rc[2];

static void set_in_run(uvs_task_t* task) {
  item_run(task);
  run_rc[0] = uvs_task_set_expiry(task, T_MS);
  run_rc[1] = uvs_task_set_expiry(task, 0);
}


static int done_rc;

static void set_in_done(item_t* it) {
  done_rc = uvs_task_set_expiry(&it->task, T_MS);
}


TEST_IMPL(expiry_errors) {
  setup(UVS_LOOP, 0, 1);
  ASSERT_ERR(uvs_task_set_expiry(NULL, T_MS), UV_EINVAL);
  ASSERT_ERR(uvs_task_set_expiry(NULL, 0), UV_EINVAL);
  ASSERT_ERR(uvs_task_set_expiry(&items[0].task, ((uint64_t) 1 << 40) + 1),
             UV_EINVAL);
  ASSERT_ERR(uvs_task_set_expiry(&items[0].task, UINT64_MAX), UV_EINVAL);
  ASSERT_OK(uvs_task_set_expiry(&items[0].task, (uint64_t) 1 << 40));
  ASSERT_OK(uvs_task_set_expiry(&items[0].task, 0));
  ASSERT_OK(uvs_task_set_expiry(&items[0].task, T_MS));
  /* Queued (the loop has not run), delayed, periodic: UV_EBUSY. */
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uvs_schedule_after(&worker, &items[2].task, 10));
  ASSERT_OK(uvs_schedule_every(&worker, &items[3].task, 10, 10));
  ASSERT_ERR(uvs_task_set_expiry(&items[1].task, T_MS), UV_EBUSY);
  ASSERT_ERR(uvs_task_set_expiry(&items[2].task, T_MS), UV_EBUSY);
  ASSERT_ERR(uvs_task_set_expiry(&items[3].task, T_MS), UV_EBUSY);
  /* UV_EINVAL wins. */
  ASSERT_ERR(uvs_task_set_expiry(&items[1].task, UINT64_MAX), UV_EINVAL);
  /* Running, from its own run_cb: UV_EBUSY; from its done_cb: the user's
   * again, 0. */
  ASSERT_OK(uvs_task_init(&items[4].task, set_in_run, item_done));
  ASSERT_OK(uvs_schedule(&worker, &items[4].task));
  on_done = set_in_done;
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  ASSERT_OK(uvs_task_cancel(&items[3].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 4);
  ASSERT_ERR(run_rc[0], UV_EBUSY);
  ASSERT_ERR(run_rc[1], UV_EBUSY);
  ASSERT_OK(done_rc);
  /* Handed back: the user's. */
  ASSERT_OK(uvs_task_set_expiry(&items[1].task, T_MS));
  ASSERT_OK(uvs_task_set_expiry(&items[3].task, 0));
  teardown();
  return 0;
}


/* ---- shedding ---------------------------------------------------------- */

/* Behind the gate: item 0 with an expiry of T_MS is shed (UV_ETIMEDOUT,
 * never run, counted once in `expired` and `cancelled`); item 1 with none,
 * item 2 with a bound far above the wait, and item 3, done-less with
 * T_MS, run; item 4 with T_MS, scheduled as the gate lets go, runs. The
 * worker has no max_wait_ms: the task's own bound is the only one. */
static void sched_fresh(uvs_task_t* task) {
  gate_run(task);
  ASSERT_OK(uvs_schedule(&worker, &items[4].task));
}


static void sheds(uvs_where_t where) {
  uvs_stats_t st;

  setup(where, 0, 0);
  ASSERT_OK(uvs_task_init(&gate, sched_fresh, gate_done));
  ASSERT_OK(uvs_task_set_expiry(&items[0].task, T_MS));
  ASSERT_OK(uvs_task_set_expiry(&items[2].task, LONG_MS));
  ASSERT_OK(uvs_task_init(&items[3].task, item_run, NULL));
  ASSERT_OK(uvs_task_set_expiry(&items[3].task, T_MS));
  ASSERT_OK(uvs_task_set_expiry(&items[4].task, T_MS));
  ASSERT_OK(uvs_schedule(&worker, &gate));
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uvs_schedule(&worker, &items[2].task));
  ASSERT_OK(uvs_schedule(&worker, &items[3].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(gate_done_calls, 1);
  ASSERT_EQ(ndone, 4);
  ASSERT_ERR(items[0].status, UV_ETIMEDOUT);
  ASSERT_EQ(items[0].done_calls, 1);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  ASSERT_OK(items[1].status);
  ASSERT_OK(items[2].status);
  ASSERT_EQ(atomic_load(&items[3].runs), 1);
  ASSERT_OK(items[4].status);
  ASSERT_EQ(atomic_load(&items[4].runs), 1);
  ASSERT_UINT64_EQ(expired_now(), 1);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.cancelled, 1);
  ASSERT_UINT64_EQ(st.scheduled, 6);
  ASSERT_UINT64_EQ(st.scheduled, st.ran + st.cancelled + st.pending);
  teardown();
}


TEST_IMPL(expiry_sheds_pool) {
  sheds(UVS_POOL);
  return 0;
}


TEST_IMPL(expiry_sheds_loop) {
  sheds(UVS_LOOP);
  return 0;
}


/* The smaller bound applies: a worker's max_wait_ms of T_MS sheds a task
 * whose own bound is long (item 0), a task's T_MS sheds on a worker with a
 * long max_wait_ms (item 1); 0 removes a task's bound (item 2, set to T_MS
 * then 0, on the long-bound worker, runs); a task with no bound of its own
 * meets the worker's (item 3). */
static void smaller_bound(uint64_t worker_ms,
                          int shed_with_own,
                          int shed_none) {
  setup(UVS_POOL, worker_ms, 0);
  ASSERT_OK(uvs_task_set_expiry(&items[0].task, LONG_MS));
  ASSERT_OK(uvs_task_set_expiry(&items[1].task, T_MS));
  ASSERT_OK(uvs_task_set_expiry(&items[2].task, T_MS));
  ASSERT_OK(uvs_task_set_expiry(&items[2].task, 0));
  ASSERT_OK(uvs_schedule(&worker, &gate));
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uvs_schedule(&worker, &items[2].task));
  ASSERT_OK(uvs_schedule(&worker, &items[3].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 4);
  ASSERT_ERR(items[0].status, shed_with_own ? UV_ETIMEDOUT : 0);
  ASSERT_ERR(items[1].status, UV_ETIMEDOUT);
  ASSERT_ERR(items[2].status, shed_none ? UV_ETIMEDOUT : 0);
  ASSERT_ERR(items[3].status, shed_none ? UV_ETIMEDOUT : 0);
  ASSERT_UINT64_EQ(expired_now(),
                   (uint64_t) (1 + shed_with_own + 2 * shed_none));
  teardown();
}


TEST_IMPL(expiry_worker_bound_smaller) {
  smaller_bound(T_MS, 1, 1);
  return 0;
}


TEST_IMPL(expiry_task_bound_smaller) {
  smaller_bound(LONG_MS, 0, 0);
  return 0;
}


/* It stays set for later schedules: a task with T_MS runs at once on an
 * idle worker (0), is shed behind the gate, and, scheduled again after
 * that, is shed again behind the next gate; a rejected set (UV_EBUSY while
 * queued) changes nothing; uvs_task_init clears it. */
static int round_no;
static int earlier_runs;

static void next_round(item_t* it) {
  if (it->id != 0)
    return;
  round_no++;
  earlier_runs += atomic_exchange(&it->runs, 0);
  if (round_no == 1 || round_no == 2) {
    ASSERT_OK(uvs_schedule(&worker, &gate));
    ASSERT_OK(uvs_schedule(&worker, &it->task));
    /* Queued: not changed (it would not shed with 0). */
    ASSERT_ERR(uvs_task_set_expiry(&it->task, 0), UV_EBUSY);
  } else if (round_no == 3) {
    /* Cleared by init: waits behind the gate and runs. */
    ASSERT_OK(uvs_task_init(&it->task, item_run, item_done));
    ASSERT_OK(uvs_schedule(&worker, &gate));
    ASSERT_OK(uvs_schedule(&worker, &it->task));
  }
}


TEST_IMPL(expiry_stays_set) {
  setup(UVS_POOL, 0, 0);
  on_done = next_round;
  round_no = 0;
  ASSERT_OK(uvs_task_set_expiry(&items[0].task, T_MS));
  ASSERT_OK(uvs_task_set_key(&items[0].task, 5)); /* keys are another field */
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(round_no, 4);
  ASSERT_EQ(gate_done_calls, 3);
  ASSERT_EQ(earlier_runs, 2); /* rounds 1 and 4 */
  ASSERT_OK(items[0].status);
  ASSERT_UINT64_EQ(expired_now(), 2);
  teardown();
  return 0;
}


/* A periodic task with an expiry: the run that falls due behind the gate
 * and goes stale skips that grid point (not run, not handed back, counted
 * in expired); the task runs at its next grid point and stays on its grid.
 * Its period is untouched by the expiry (it shares the task's room), and
 * the expiry by the period. The manual clock makes the grid exact; the
 * wait is real. */
static void periodic_skips(uvs_where_t where) {
  item_t* p;

  setup(where, 0, 1);
  p = &items[0];
  ASSERT_OK(uvs_task_set_expiry(&p->task, T_MS));
  ASSERT_OK(uvs_schedule_every(&worker, &p->task, 10, 10));
  ASSERT_OK(uvs_schedule(&worker, &gate));
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  TEST_RUN_UNTIL(&loop, expired_now() == 1);
  test_settle(&loop);
  ASSERT_EQ(gate_done_calls, 1);
  ASSERT_EQ(atomic_load(&p->runs), 0);
  ASSERT_EQ(p->done_calls, 0);
  ASSERT_OK(uvs_clock_advance(&sched, 9));
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&p->runs), 0);
  ASSERT_OK(uvs_clock_advance(&sched, 1));
  TEST_RUN_UNTIL(&loop, atomic_load(&p->runs) == 1);
  ASSERT_UINT64_EQ(p->now_at_run, t0 + 20);
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  TEST_RUN_UNTIL(&loop, atomic_load(&p->runs) == 2);
  ASSERT_UINT64_EQ(p->now_at_run, t0 + 30);
  ASSERT_EQ(p->done_calls, 0);
  ASSERT_UINT64_EQ(expired_now(), 1);
  ASSERT_OK(uvs_task_cancel(&p->task));
  TEST_RUN_UNTIL(&loop, p->done_calls == 1);
  ASSERT_ERR(p->status, UV_ECANCELED);
  /* Still set after its custody: scheduled as a one-shot behind a gate,
   * it is shed. */
  atomic_store(&p->runs, 0);
  ASSERT_OK(uvs_schedule(&worker, &gate));
  ASSERT_OK(uvs_schedule(&worker, &p->task));
  TEST_RUN_UNTIL(&loop, p->done_calls == 2);
  ASSERT_ERR(p->status, UV_ETIMEDOUT);
  ASSERT_UINT64_EQ(expired_now(), 2);
  teardown();
}


TEST_IMPL(expiry_periodic_skips_pool) {
  periodic_skips(UVS_POOL);
  return 0;
}


TEST_IMPL(expiry_periodic_skips_loop) {
  periodic_skips(UVS_LOOP);
  return 0;
}


/* A delayed one-shot task is ready from when it falls due: accepted long
 * before the gate lets go, it falls due just before and runs under its
 * expiry; the same task scheduled at once behind the gate is shed. */
TEST_IMPL(expiry_delayed_ready_when_due) {
  setup(UVS_POOL, 0, 1);
  ASSERT_OK(uvs_task_set_expiry(&items[0].task, T_MS));
  ASSERT_OK(uvs_task_set_expiry(&items[1].task, T_MS));
  ASSERT_OK(uvs_schedule_after(&worker, &items[0].task, 10));
  ASSERT_OK(uvs_schedule(&worker, &gate));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  TEST_RUN_UNTIL(&loop, atomic_load(&items[1].runs) == 0 && ndone == 1);
  ASSERT_ERR(items[1].status, UV_ETIMEDOUT);
  /* The gate has returned: fall due now. */
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  TEST_RUN_UNTIL(&loop, ndone == 2);
  ASSERT_OK(items[0].status);
  ASSERT_UINT64_EQ(items[0].now_at_run, t0 + 10);
  teardown();
  return 0;
}


/* Keys: on a wide worker a keyed task with an expiry is shed behind a
 * gate holding its key, and lets its key's next task go. */
TEST_IMPL(expiry_wide_key) {
  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  width = 2;
  setup(UVS_POOL, 0, 0);
  ASSERT_OK(uvs_task_set_key(&gate, 3));
  ASSERT_OK(uvs_task_set_key(&items[0].task, 3));
  ASSERT_OK(uvs_task_set_key(&items[1].task, 3));
  ASSERT_OK(uvs_task_set_expiry(&items[0].task, T_MS));
  ASSERT_OK(uvs_schedule(&worker, &gate));
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 2);
  ASSERT_ERR(items[0].status, UV_ETIMEDOUT);
  ASSERT_OK(items[1].status);
  ASSERT_UINT64_EQ(expired_now(), 1);
  teardown();
  return 0;
}
