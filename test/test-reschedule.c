/* uvs_task_reschedule (SPEC.md, "0.3 additions", Re-arm): a delayed task
 * that has not fallen due moves to t_call + delay_ms of this call, earlier
 * or later; a periodic task's grid restarts there with its period. It
 * answers 0, UV_EBUSY for a task that is not delayed right now (queued,
 * running, fallen due, cancelled, handed back), UV_ESHUTDOWN for a task
 * still held by a closing worker or scheduler, UV_EINVAL for NULL, a task
 * never scheduled or a delay above 2^40, in that order of precedence. Any
 * thread, no allocation, never early, and for the same-ms order the task
 * counts as scheduled at the reschedule call.
 *
 * Exact times use the manual clock; the real clock is checked only for
 * "never early" and for the re-armed timer firing well before the old due
 * time (bounds of hundreds of ms). */

#include "helpers.h"

#include <stdatomic.h>

#define MAXN 256
#define MAX_DELAY ((uint64_t) 1 << 40)

typedef struct {
  uvs_task_t task;
  int id;
  /* The bound the first run must respect: t_call (ns, taken right before
   * the last call that set the due time) + delay (ms). Written before that
   * call, which publishes the task to whatever thread runs it. */
  uint64_t t_call;
  uint64_t delay;
  uint64_t not_after; /* ns; 0 = no check: the run starts before this */
  uint64_t t_run;
  uint64_t now_at_run[16];
  atomic_int runs;
  int done_calls;
  int status;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_thread_t loop_thread;
static item_t items[MAXN];
static int order[MAXN];
static atomic_int norder;
static int ndone;
static uint64_t t0;      /* uvs_now() at setup */
static int manual_clock; /* the real-clock checks of item_run are off */


static void item_run(uvs_task_t* task) {
  item_t* it;
  uint64_t now;
  int n;

  now = uv_hrtime();
  it = TEST_CONTAINER_OF(task, item_t, task);
  n = atomic_load(&it->runs);
  if (n == 0) {
    it->t_run = now;
    /* Guarantee 6 for the new due time: never before t_call + delay. */
    if (!manual_clock)
      ASSERT_UINT64_GE(now, it->t_call + it->delay * 1000000u);
    if (it->not_after != 0)
      ASSERT_UINT64_LT(now, it->not_after);
  }
  if (n < 16)
    it->now_at_run[n] = uvs_now(&sched);
  atomic_store(&it->runs, n + 1);
  n = atomic_fetch_add(&norder, 1);
  ASSERT_LT(n, MAXN);
  order[n] = it->id;
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


static void init_item(item_t* it, int id, uvs_run_cb run, uvs_done_cb done) {
  memset(it, 0, sizeof(*it));
  it->id = id;
  ASSERT_OK(uvs_task_init(&it->task, run, done));
}


static void init_items(int n) {
  int i;

  for (i = 0; i < n; i++) init_item(&items[i], i, item_run, item_done);
}


static void setup(int manual, uvs_where_t where) {
  uvs_sched_options_t o;

  loop_thread = uv_thread_self();
  manual_clock = manual;
  memset(&o, 0, sizeof(o));
  o.manual_clock = manual;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  ASSERT_OK(uvs_worker_init(&sched, &worker, where));
  t0 = uvs_now(&sched);
}


static void teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


static void advance(uint64_t ms) {
  ASSERT_OK(uvs_clock_advance(&sched, ms));
}


/* Schedules it after delay (ms), noting the bound its run must respect. */
static void after(item_t* it, uint64_t delay) {
  it->delay = delay;
  it->t_call = uv_hrtime();
  ASSERT_OK(uvs_schedule_after(&worker, &it->task, delay));
}


/* Re-arms it, noting the new bound first (the call must succeed). */
static void rearm(item_t* it, uint64_t delay) {
  it->delay = delay;
  it->t_call = uv_hrtime();
  ASSERT_OK(uvs_task_reschedule(&it->task, delay));
}


static uint64_t delayed_now(void) {
  uvs_worker_metrics_t m;

  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  return m.delayed;
}


/* ---- errors ------------------------------------------------------------ */

/* NULL, a task never scheduled and a delay above 2^40 answer UV_EINVAL and
 * change nothing; 2^40 itself is a valid delay. */
TEST_IMPL(reschedule_einval) {
  setup(1, UVS_LOOP);
  init_items(3);
  ASSERT_ERR(uvs_task_reschedule(NULL, 0), UV_EINVAL);
  ASSERT_ERR(uvs_task_reschedule(NULL, MAX_DELAY + 1), UV_EINVAL);
  /* items[2] is initialised and never scheduled. */
  ASSERT_ERR(uvs_task_reschedule(&items[2].task, 5), UV_EINVAL);
  ASSERT_ERR(uvs_task_reschedule(&items[2].task, 0), UV_EINVAL);
  ASSERT_ERR(uvs_task_reschedule(&items[2].task, MAX_DELAY + 1), UV_EINVAL);

  after(&items[0], 10);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, MAX_DELAY + 1), UV_EINVAL);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, UINT64_MAX), UV_EINVAL);
  after(&items[1], 10);
  ASSERT_OK(uvs_task_reschedule(&items[1].task, MAX_DELAY));

  /* The rejected calls left items[0] due at 10; items[1] moved away. */
  advance(9);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  advance(1);
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(items[0].status);
  ASSERT_UINT64_EQ(items[0].now_at_run[0], t0 + 10);
  ASSERT_EQ(atomic_load(&items[1].runs), 0);
  /* Still never scheduled. */
  ASSERT_ERR(uvs_task_reschedule(&items[2].task, 5), UV_EINVAL);
  teardown();
  ASSERT_ERR(items[1].status, UV_ECANCELED);
  ASSERT_EQ(items[1].done_calls, 1);
  ASSERT_EQ(items[2].done_calls, 0);
  return 0;
}


/* Queued: UV_EBUSY, and it runs as before. */
static void ebusy_queued(uvs_where_t where) {
  setup(0, where);
  init_items(2);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 0), UV_EBUSY);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 100), UV_EBUSY);
  /* The usual precedence: UV_EINVAL wins. */
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, MAX_DELAY + 1), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_EQ(ndone, 1);
  ASSERT_OK(items[0].status);
  teardown();
}


TEST_IMPL(reschedule_ebusy_queued_loop) {
  ebusy_queued(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_ebusy_queued_pool) {
  ebusy_queued(UVS_POOL);
  return 0;
}


/* Running, one-shot and periodic: UV_EBUSY from its own run_cb. */
static atomic_int own_err;
static atomic_int own_err_periodic;

static void resched_self_run(uvs_task_t* task) {
  item_run(task);
  atomic_store(&own_err, uvs_task_reschedule(task, 0));
}


static void resched_self_periodic_run(uvs_task_t* task) {
  item_run(task);
  atomic_store(&own_err_periodic, uvs_task_reschedule(task, 1));
  ASSERT_OK(uvs_task_cancel(task));
}


static void ebusy_running(uvs_where_t where) {
  setup(0, where);
  init_item(&items[0], 0, resched_self_run, item_done);
  init_item(&items[1], 1, resched_self_periodic_run, item_done);
  atomic_store(&own_err, 1);
  atomic_store(&own_err_periodic, 1);
  after(&items[0], 1);
  ASSERT_OK(uvs_schedule_every(&worker, &items[1].task, 1, 1));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(atomic_load(&own_err), UV_EBUSY);
  ASSERT_ERR(atomic_load(&own_err_periodic), UV_EBUSY);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(items[0].status);
  /* The periodic task ran once and came back cancelled, not re-armed. */
  ASSERT_EQ(atomic_load(&items[1].runs), 1);
  ASSERT_ERR(items[1].status, UV_ECANCELED);
  ASSERT_EQ(ndone, 2);
  teardown();
}


TEST_IMPL(reschedule_ebusy_running_loop) {
  ebusy_running(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_ebusy_running_pool) {
  ebusy_running(UVS_POOL);
  return 0;
}


/* Fallen due: the timer moved it onto its worker's queue (the worker is
 * held busy by a gate, and its metrics say nothing is delayed any more):
 * UV_EBUSY, and it runs as before. */
TEST_IMPL(reschedule_ebusy_fallen_due) {
  test_latch_t started;
  test_latch_t release;
  test_gate_t gate;

  test_latch_init(&started);
  test_latch_init(&release);
  setup(0, UVS_POOL);
  init_items(1);
  test_gate_init(&gate, &started, &release, 1, NULL);
  ASSERT_OK(uvs_schedule(&worker, &gate.task));
  after(&items[0], 1);
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1 && delayed_now() == 0);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 50), UV_EBUSY);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 0), UV_EBUSY);
  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(items[0].status);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* Cancelled (done_cb not called yet, and after), handed back (in its
 * done_cb and after): UV_EBUSY. A task scheduled again afterwards is
 * delayed again, and re-arms. */
static atomic_int in_done_err;

static void resched_in_done(uvs_task_t* task, int status) {
  item_done(task, status);
  atomic_store(&in_done_err, uvs_task_reschedule(task, 3));
}


TEST_IMPL(reschedule_ebusy_cancelled_handed_back) {
  setup(1, UVS_LOOP);
  init_items(2);
  init_item(&items[2], 2, item_run, resched_in_done);
  init_item(&items[3], 3, item_run, NULL); /* done-less */

  after(&items[0], 100);
  ASSERT_OK(uvs_task_cancel(&items[0].task));
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 5), UV_EBUSY);
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 5), UV_EBUSY);

  /* Handed back after a run: in its done_cb, and after it. */
  atomic_store(&in_done_err, 1);
  after(&items[2], 5);
  advance(5);
  TEST_RUN_UNTIL(&loop, ndone == 2);
  ASSERT_OK(items[2].status);
  ASSERT_ERR(atomic_load(&in_done_err), UV_EBUSY);
  ASSERT_ERR(uvs_task_reschedule(&items[2].task, 5), UV_EBUSY);

  /* A done-less delayed task re-arms; once it ran the library knows
   * nothing of it. */
  after(&items[3], 5);
  rearm(&items[3], 20);
  advance(19);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[3].runs), 0);
  advance(1);
  TEST_RUN_UNTIL(&loop, atomic_load(&items[3].runs) == 1);
  ASSERT_UINT64_EQ(items[3].now_at_run[0], t0 + 25);
  ASSERT_ERR(uvs_task_reschedule(&items[3].task, 5), UV_EBUSY);

  /* Scheduled again, each is delayed again and re-arms. */
  items[0].done_calls = 0;
  after(&items[0], 50);
  rearm(&items[0], 7);
  advance(6);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  advance(1);
  TEST_RUN_UNTIL(&loop, ndone == 3);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(items[0].status);
  teardown();
  ASSERT_EQ(items[1].done_calls, 0);
  return 0;
}


/* A queued task of a worker closing with UVS_DRAIN is still held by it:
 * UV_ESHUTDOWN (over UV_EBUSY), UV_EINVAL over both; it runs as the close
 * decides, and once handed back the answer is UV_EBUSY. */
static int close_calls;

static void worker_closed(uvs_worker_t* w) {
  ASSERT_PTR_EQ(w, &worker);
  close_calls++;
}


TEST_IMPL(reschedule_eshutdown_queued_drain_close) {
  test_latch_t started;
  test_latch_t release;
  test_gate_t gate;

  test_latch_init(&started);
  test_latch_init(&release);
  setup(0, UVS_POOL);
  init_items(1);
  test_gate_init(&gate, &started, &release, 1, NULL);
  ASSERT_OK(uvs_schedule(&worker, &gate.task));
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 5), UV_EBUSY);
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, worker_closed));
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 5), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, MAX_DELAY + 1), UV_EINVAL);
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, close_calls == 1);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(items[0].status);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 5), UV_EBUSY);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* A delayed task whose worker (or scheduler) begins to close is cancelled
 * by the close, but held until its done_cb: a re-arm meanwhile answers
 * UV_ESHUTDOWN (it and UV_EBUSY both apply; UV_ESHUTDOWN wins), and in its
 * done_cb, once handed back, UV_EBUSY. */
static atomic_int closing_done_err;

static void closing_done(uvs_task_t* task, int status) {
  item_done(task, status);
  atomic_store(&closing_done_err, uvs_task_reschedule(task, 3));
}


TEST_IMPL(reschedule_eshutdown_delayed_worker_closing) {
  setup(1, UVS_LOOP);
  init_item(&items[0], 0, item_run, closing_done);
  init_item(&items[1], 1, item_run, closing_done);
  atomic_store(&closing_done_err, 1);
  after(&items[0], 100);
  ASSERT_OK(uvs_schedule_every(&worker, &items[1].task, 10, 10));
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, worker_closed));
  ASSERT_EQ(ndone, 0);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 5), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_task_reschedule(&items[1].task, 5), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, MAX_DELAY + 1), UV_EINVAL);
  TEST_RUN_UNTIL(&loop, close_calls == 1);
  ASSERT_EQ(ndone, 2);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  ASSERT_ERR(items[1].status, UV_ECANCELED);
  ASSERT_ERR(atomic_load(&closing_done_err), UV_EBUSY);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 5), UV_EBUSY);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  teardown();
  return 0;
}


TEST_IMPL(reschedule_eshutdown_delayed_sched_closing) {
  int sched_closed;

  setup(1, UVS_LOOP);
  init_item(&items[0], 0, item_run, closing_done);
  atomic_store(&closing_done_err, 1);
  after(&items[0], 100);
  sched_closed = 0;
  sched.data = &sched_closed;
  ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, test_close_cb_counter));
  ASSERT_EQ(ndone, 0);
  ASSERT_ERR(uvs_task_reschedule(&items[0].task, 5), UV_ESHUTDOWN);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_closed, 1);
  ASSERT_EQ(ndone, 1);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  ASSERT_ERR(atomic_load(&closing_done_err), UV_EBUSY);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* ---- due times on the manual clock -------------------------------------- */

/* Later: not run at the old due time nor before the new one; runs at it. */
static void later_manual(uvs_where_t where) {
  setup(1, where);
  init_items(1);
  after(&items[0], 100);
  advance(50);
  rearm(&items[0], 100); /* due at t0 + 150 */
  advance(50);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  advance(49);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  advance(1);
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_UINT64_EQ(items[0].now_at_run[0], t0 + 150);
  ASSERT_OK(items[0].status);
  teardown();
}


TEST_IMPL(reschedule_later_manual_loop) {
  later_manual(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_later_manual_pool) {
  later_manual(UVS_POOL);
  return 0;
}


/* Earlier: runs at the new due time, once (the old one is gone); a re-arm
 * to 0 makes it due at once, with no advance. */
static void earlier_manual(uvs_where_t where) {
  setup(1, where);
  init_items(2);
  after(&items[0], 100);
  after(&items[1], 100);
  advance(10);
  rearm(&items[0], 5); /* due at t0 + 15 */
  advance(4);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  advance(1);
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_UINT64_EQ(items[0].now_at_run[0], t0 + 15);
  rearm(&items[1], 0); /* due now, at t0 + 15 */
  TEST_RUN_UNTIL(&loop, ndone == 2);
  ASSERT_UINT64_EQ(items[1].now_at_run[0], t0 + 15);
  advance(200);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_EQ(atomic_load(&items[1].runs), 1);
  ASSERT_EQ(ndone, 2);
  ASSERT_OK(items[0].status);
  ASSERT_OK(items[1].status);
  teardown();
}


TEST_IMPL(reschedule_earlier_manual_loop) {
  earlier_manual(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_earlier_manual_pool) {
  earlier_manual(UVS_POOL);
  return 0;
}


/* A periodic task's grid restarts at t_call + delay with its period. */
static void periodic_manual(uvs_where_t where) {
  setup(1, where);
  init_items(1);
  ASSERT_OK(uvs_schedule_every(&worker, &items[0].task, 10, 10));
  advance(10);
  /* On a pool worker the run ends and the task goes back into the wheel
   * on the pool thread: wait for both. */
  TEST_RUN_UNTIL(&loop, atomic_load(&items[0].runs) == 1 && delayed_now() == 1);
  ASSERT_UINT64_EQ(items[0].now_at_run[0], t0 + 10);
  advance(3);
  /* Between runs it is delayed: the grid restarts at t0 + 18. */
  ASSERT_OK(uvs_task_reschedule(&items[0].task, 5));
  advance(4);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  advance(1);
  TEST_RUN_UNTIL(&loop, atomic_load(&items[0].runs) == 2);
  ASSERT_UINT64_EQ(items[0].now_at_run[1], t0 + 18);
  /* Not at the old grid point t0 + 20, nor before t0 + 28. */
  advance(9);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 2);
  advance(1);
  TEST_RUN_UNTIL(&loop, atomic_load(&items[0].runs) == 3 && delayed_now() == 1);
  ASSERT_UINT64_EQ(items[0].now_at_run[2], t0 + 28);
  /* Re-armed twice before its next run: the last call counts. */
  advance(2); /* t0 + 30 */
  ASSERT_OK(uvs_task_reschedule(&items[0].task, 100));
  ASSERT_OK(uvs_task_reschedule(&items[0].task, 1)); /* grid t0 + 31 + 10k */
  advance(1);
  TEST_RUN_UNTIL(&loop, atomic_load(&items[0].runs) == 4);
  ASSERT_UINT64_EQ(items[0].now_at_run[3], t0 + 31);
  advance(9);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 4);
  advance(1);
  TEST_RUN_UNTIL(&loop, atomic_load(&items[0].runs) == 5);
  ASSERT_UINT64_EQ(items[0].now_at_run[4], t0 + 41);
  ASSERT_EQ(ndone, 0);
  teardown();
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  ASSERT_EQ(items[0].done_calls, 1);
}


TEST_IMPL(reschedule_periodic_grid_manual_loop) {
  periodic_manual(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_periodic_grid_manual_pool) {
  periodic_manual(UVS_POOL);
  return 0;
}


/* Same ms: a re-armed task counts as scheduled at the reschedule call, so
 * it runs after the tasks of its ms scheduled before that call. */
static void same_ms_manual(uvs_where_t where) {
  static const int want[] = {2, 0, 1, 3, 4};
  int i;

  setup(1, where);
  init_items(5);
  after(&items[0], 10);
  after(&items[1], 10);
  after(&items[2], 10);
  rearm(&items[0], 10); /* 1 2 0 */
  rearm(&items[1], 10); /* 2 0 1 */
  after(&items[3], 10); /* 2 0 1 3 */
  after(&items[4], 100);
  rearm(&items[4], 10); /* 2 0 1 3 4, from another level of a wheel */
  advance(9);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&norder), 0);
  advance(1);
  TEST_RUN_UNTIL(&loop, ndone == 5);
  for (i = 0; i < 5; i++) {
    ASSERT_EQ(order[i], want[i]);
    ASSERT_UINT64_EQ(items[i].now_at_run[0], t0 + 10);
  }
  teardown();
}


TEST_IMPL(reschedule_same_ms_order_manual_loop) {
  same_ms_manual(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_same_ms_order_manual_pool) {
  same_ms_manual(UVS_POOL);
  return 0;
}


/* From a foreign thread on the manual clock: t_call is the clock's time. */
static void manual_rearmer(void* arg) {
  atomic_store((atomic_int*) arg, uvs_task_reschedule(&items[0].task, 10));
}


TEST_IMPL(reschedule_manual_foreign_thread) {
  uv_thread_t thread;
  atomic_int err;

  setup(1, UVS_POOL);
  init_items(1);
  after(&items[0], 100);
  advance(30);
  atomic_store(&err, 1);
  ASSERT_OK(uv_thread_create(&thread, manual_rearmer, &err));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(atomic_load(&err)); /* due at t0 + 40 */
  advance(9);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  advance(1);
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_UINT64_EQ(items[0].now_at_run[0], t0 + 40);
  teardown();
  return 0;
}


/* A task is delayed from the moment uvs_schedule_after returned 0, also
 * when its own run_cb made that call: re-armed right after, from the same
 * run_cb, it runs at the new time and hands back once. */
static atomic_int own_after_err;
static atomic_int own_rearm_err;

static void after_then_rearm_run(uvs_task_t* task) {
  item_run(task);
  if (atomic_load(&items[0].runs) == 1) {
    atomic_store(&own_after_err, uvs_schedule_after(&worker, task, 100));
    atomic_store(&own_rearm_err, uvs_task_reschedule(task, 5));
  }
}


static void own_run_after_then_rearm(uvs_where_t where) {
  setup(1, where);
  init_item(&items[0], 0, after_then_rearm_run, item_done);
  atomic_store(&own_after_err, 1);
  atomic_store(&own_rearm_err, 1);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  TEST_RUN_UNTIL(&loop, atomic_load(&items[0].runs) == 1);
  test_settle(&loop);
  ASSERT_OK(atomic_load(&own_after_err));
  ASSERT_OK(atomic_load(&own_rearm_err));
  ASSERT_EQ(ndone, 0); /* the first run handed nothing back */
  advance(4);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  advance(1);
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_EQ(atomic_load(&items[0].runs), 2);
  ASSERT_UINT64_EQ(items[0].now_at_run[1], t0 + 5);
  ASSERT_OK(items[0].status);
  advance(100);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 2);
  teardown();
  ASSERT_EQ(items[0].done_calls, 1);
}


TEST_IMPL(reschedule_own_run_after_then_rearm_loop) {
  own_run_after_then_rearm(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_own_run_after_then_rearm_pool) {
  own_run_after_then_rearm(UVS_POOL);
  return 0;
}


/* ---- the real clock ----------------------------------------------------- */

/* Never early: 30 tasks due in 1.5 s are re-armed, in reverse order, to
 * short delays spread over sub-ms phases of the clock, and half of them
 * again to longer ones. Each starts at or after t_call + delay of its last
 * call, well before the old due time (the timer was re-armed for an earlier
 * time), and the order follows the re-arm calls: a later call with the
 * same or a longer delay never runs first. */
#define NE_N 30

static void not_early(uvs_where_t where) {
  static const uint64_t delays[] = {0, 1, 2, 3, 5, 7, 10, 16, 25, 33};
  uint64_t start;
  int i;

  setup(0, where);
  init_items(NE_N);
  start = uv_hrtime();
  for (i = 0; i < NE_N; i++) {
    after(&items[i], 1500);
    items[i].not_after = start + 1500 * 1000000u;
  }
  for (i = NE_N - 1; i >= 0; i--) {
    rearm(&items[i], delays[i % 10]);
    test_spin_us(137);
  }
  for (i = 0; i < NE_N; i += 2) {
    rearm(&items[i], 40 + (uint64_t) i);
    test_spin_us(61);
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, NE_N);
  for (i = 0; i < NE_N; i++) {
    ASSERT_EQ(atomic_load(&items[i].runs), 1);
    ASSERT_OK(items[i].status);
  }
  /* Re-armed later with a delay at least as long: starts no earlier. */
  for (i = 0; i < NE_N; i++) {
    int j;

    for (j = 0; j < NE_N; j++) {
      if (items[j].t_call > items[i].t_call && items[j].delay >= items[i].delay)
        ASSERT_UINT64_LE(items[i].t_run, items[j].t_run);
    }
  }
  teardown();
}


TEST_IMPL(reschedule_not_early_loop) {
  not_early(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_not_early_pool) {
  not_early(UVS_POOL);
  return 0;
}


/* From a foreign thread while the loop sleeps towards the old due time (1.5
 * s away): the re-arms to short delays wake it, and each task runs on time
 * and never early. Done-less and periodic tasks too. */
#define FT_N 40
static uvs_worker_t loop_w;
static atomic_int foreign_errs;
static atomic_int periodic_runs;
static item_t periodic_item;

static void foreign_rearmer(void* arg) {
  int i;

  (void) arg;
  for (i = 0; i < FT_N; i++) {
    items[i].delay = (uint64_t) (i % 9);
    items[i].t_call = uv_hrtime();
    if (uvs_task_reschedule(&items[i].task, items[i].delay) != 0)
      atomic_fetch_add(&foreign_errs, 1);
    test_spin_us(50);
  }
  periodic_item.t_call = uv_hrtime();
  if (uvs_task_reschedule(&periodic_item.task, 2) != 0)
    atomic_fetch_add(&foreign_errs, 1);
}


static void foreign_periodic_run(uvs_task_t* task) {
  item_t* it;
  uint64_t now;
  int n;

  now = uv_hrtime();
  it = TEST_CONTAINER_OF(task, item_t, task);
  n = atomic_fetch_add(&periodic_runs, 1);
  /* Run k at or after grid point k of the restarted grid (t_call + 2 +
   * 3k ms). */
  ASSERT_UINT64_GE(now, it->t_call + (2 + 3 * (uint64_t) n) * 1000000u);
  ASSERT_UINT64_LT(now, it->not_after);
  if (n == 4)
    ASSERT_OK(uvs_task_cancel(task));
}


TEST_IMPL(reschedule_foreign_thread) {
  uv_thread_t thread;
  uint64_t start;
  int i;

  setup(0, UVS_POOL);
  ASSERT_OK(uvs_worker_init(&sched, &loop_w, UVS_LOOP));
  init_items(FT_N);
  start = uv_hrtime();
  for (i = 0; i < FT_N; i++) {
    if (i % 4 == 3)
      ASSERT_OK(uvs_task_init(&items[i].task, item_run, NULL));
    items[i].not_after = start + 1500 * 1000000u;
    ASSERT_OK(
        uvs_schedule_after(i % 2 ? &loop_w : &worker, &items[i].task, 1500));
  }
  init_item(&periodic_item, 99, foreign_periodic_run, item_done);
  periodic_item.not_after = start + 1500 * 1000000u;
  ASSERT_OK(uvs_schedule_every(&worker, &periodic_item.task, 1500, 3));
  ASSERT_OK(uv_thread_create(&thread, foreign_rearmer, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(atomic_load(&foreign_errs), 0);
  for (i = 0; i < FT_N; i++) ASSERT_EQ(atomic_load(&items[i].runs), 1);
  ASSERT_EQ(atomic_load(&periodic_runs), 5);
  ASSERT_ERR(periodic_item.status, UV_ECANCELED);
  ASSERT_EQ(ndone, FT_N - FT_N / 4 + 1);
  teardown();
  return 0;
}


/* The race with falling due: tasks with delays of 0 to 2 ms, re-armed from
 * one foreign thread and cancelled now and then from another while the
 * loop fires them. Every re-arm answers 0 or UV_EBUSY, every cancel 0 or
 * UV_EBUSY; every task is handed back exactly once: with 0 after one run
 * that started no earlier than the last re-arm that answered 0 (which
 * decides its due time) allowed, or with UV_ECANCELED, unrun, if and only
 * if a cancel answered 0. */
#define RACE_N 200
#define RACE_ROUNDS 40

static uvs_worker_t race_workers[2];
static atomic_uint_fast64_t race_bound[RACE_N]; /* ns, of the last 0 */
static atomic_int race_cancelled[RACE_N];
static atomic_int race_ok;
static atomic_int race_busy;
static atomic_int race_bad;

static void race_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  it->t_run = uv_hrtime();
  atomic_fetch_add(&it->runs, 1);
}


static void race_rearmer(void* arg) {
  uint64_t d;
  uint64_t t_call;
  int round;
  int err;
  int i;

  (void) arg;
  for (round = 0; round < RACE_ROUNDS; round++) {
    for (i = 0; i < RACE_N; i++) {
      d = (uint64_t) ((i + round) % 3);
      t_call = uv_hrtime();
      err = uvs_task_reschedule(&items[i].task, d);
      if (err == 0) {
        /* This call decides the due time, earlier or later than before. */
        atomic_fetch_add(&race_ok, 1);
        atomic_store(&race_bound[i], t_call + d * 1000000u);
      } else if (err == UV_EBUSY) {
        atomic_fetch_add(&race_busy, 1);
      } else {
        atomic_fetch_add(&race_bad, 1);
      }
    }
    test_spin_us(300);
  }
}


static void race_canceller(void* arg) {
  int round;
  int err;
  int i;

  (void) arg;
  for (round = 0; round < RACE_ROUNDS / 4; round++) {
    for (i = round % 7; i < RACE_N; i += 7) {
      err = uvs_task_cancel(&items[i].task);
      if (err == 0)
        atomic_fetch_add(&race_cancelled[i], 1);
      else if (err != UV_EBUSY)
        atomic_fetch_add(&race_bad, 1);
    }
    test_spin_us(700);
  }
}


TEST_IMPL(reschedule_race_falling_due) {
  uv_thread_t threads[2];
  int i;

  setup(0, UVS_POOL);
  ASSERT_OK(uvs_worker_init(&sched, &race_workers[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &race_workers[1], UVS_LOOP));
  for (i = 0; i < RACE_N; i++) {
    init_item(&items[i], i, race_run, item_done);
    atomic_store(&race_bound[i], uv_hrtime() + (uint64_t) (i % 3) * 1000000u);
    ASSERT_OK(uvs_schedule_after(&race_workers[i % 2], &items[i].task,
                                 (uint64_t) (i % 3)));
  }
  ASSERT_OK(uv_thread_create(&threads[0], race_rearmer, NULL));
  ASSERT_OK(uv_thread_create(&threads[1], race_canceller, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&threads[0]));
  ASSERT_OK(uv_thread_join(&threads[1]));
  ASSERT_EQ(atomic_load(&race_bad), 0);
  ASSERT_EQ(ndone, RACE_N);
  for (i = 0; i < RACE_N; i++) {
    ASSERT_EQ(items[i].done_calls, 1);
    ASSERT_LE(atomic_load(&race_cancelled[i]), 1);
    if (atomic_load(&race_cancelled[i]) != 0) {
      ASSERT_ERR(items[i].status, UV_ECANCELED);
      ASSERT_EQ(atomic_load(&items[i].runs), 0);
    } else {
      ASSERT_OK(items[i].status);
      ASSERT_EQ(atomic_load(&items[i].runs), 1);
      ASSERT_UINT64_GE(items[i].t_run, atomic_load(&race_bound[i]));
    }
  }
  printf("# re-arms: %d answered 0, %d UV_EBUSY\n", atomic_load(&race_ok),
         atomic_load(&race_busy));
  teardown();
  return 0;
}


/* The idle timeout of a server: every "read" re-arms the connection's
 * timeout task, which never runs while the reads go on, and runs exactly
 * its delay after the last one. Exact, on the manual clock. */
static void idle_timeout_manual(uvs_where_t where) {
  int i;

  setup(1, where);
  init_items(1);
  after(&items[0], 100);
  for (i = 0; i < 51; i++) {
    advance(10);
    rearm(&items[0], 100);
    uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_EQ(atomic_load(&items[0].runs), 0);
  }
  /* The last re-arm was at t0 + 510. */
  advance(99);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  advance(1);
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_UINT64_EQ(items[0].now_at_run[0], t0 + 610);
  ASSERT_OK(items[0].status);
  teardown();
}


TEST_IMPL(reschedule_idle_timeout_manual_loop) {
  idle_timeout_manual(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_idle_timeout_manual_pool) {
  idle_timeout_manual(UVS_POOL);
  return 0;
}


/* The same on the real clock: a uv_timer "reads" every 5 ms for 40 reads
 * and re-arms a 150 ms timeout each time. The timeout runs once, no earlier
 * than 150 ms after the last re-arm that answered 0. (Only a loop stalled
 * for longer than the timeout can let it fall due between two reads; then
 * the next re-arm answers UV_EBUSY and it runs as it was.) */
static uv_timer_t reads;
static int reads_left;
static int reads_ok;
static uint64_t last_ok_call;

static void read_cb(uv_timer_t* handle) {
  uint64_t t_call;
  int err;

  t_call = uv_hrtime();
  err = uvs_task_reschedule(&items[0].task, 150);
  if (err == 0) {
    reads_ok++;
    last_ok_call = t_call;
    ASSERT_EQ(atomic_load(&items[0].runs), 0);
  } else {
    ASSERT_ERR(err, UV_EBUSY);
  }
  if (--reads_left == 0)
    uv_close((uv_handle_t*) handle, NULL);
}


static void idle_timeout_real(uvs_where_t where) {
  setup(0, where);
  init_items(1);
  after(&items[0], 150);
  last_ok_call = items[0].t_call;
  reads_left = 40;
  ASSERT_OK(uv_timer_init(&loop, &reads));
  ASSERT_OK(uv_timer_start(&reads, read_cb, 5, 5));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(reads_left, 0);
  ASSERT_GT(reads_ok, 0);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_EQ(ndone, 1);
  ASSERT_OK(items[0].status);
  ASSERT_UINT64_GE(items[0].t_run, last_ok_call + 150 * 1000000u);
  teardown();
}


TEST_IMPL(reschedule_idle_timeout_real_loop) {
  idle_timeout_real(UVS_LOOP);
  return 0;
}


TEST_IMPL(reschedule_idle_timeout_real_pool) {
  idle_timeout_real(UVS_POOL);
  return 0;
}


/* No allocation: thousands of re-arms, across levels of any timer
 * structure (1 ms to 2^40 ms), on the loop thread and on a foreign one. */
#define NA_N 64
static unsigned long na_foreign;

static void na_rearms(void) {
  static const uint64_t delays[] = {
      1, 63, 64, 4095, 4096, 100000, (uint64_t) 1 << 30, MAX_DELAY, 0, 7};
  int i;
  int k;

  for (k = 0; k < 20; k++)
    for (i = 0; i < NA_N; i++)
      ASSERT_OK(uvs_task_reschedule(&items[i].task, delays[(i + k) % 10]));
}


static void na_foreign_thread(void* arg) {
  unsigned long before;

  (void) arg;
  before = uvs__alloc_count();
  na_rearms();
  na_foreign = uvs__alloc_count() - before;
}


TEST_IMPL(reschedule_no_alloc) {
  uv_thread_t thread;
  unsigned long before;
  int i;

  setup(1, UVS_POOL);
  init_items(NA_N);
  for (i = 0; i < NA_N; i++)
    ASSERT_OK(
        uvs_schedule_every(&worker, &items[i].task, 1000, 1 + (uint64_t) i));
  before = uvs__alloc_count();
  na_rearms();
  ASSERT_EQ(uvs__alloc_count() - before, 0);
  na_foreign = 1;
  ASSERT_OK(uv_thread_create(&thread, na_foreign_thread, NULL));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(na_foreign, 0);
  /* The loop did not run meanwhile: nothing ran. Re-armed once more, each
   * runs once it is due. */
  ASSERT_EQ(atomic_load(&norder), 0);
  for (i = 0; i < NA_N; i++) ASSERT_OK(uvs_task_reschedule(&items[i].task, 3));
  advance(3);
  TEST_RUN_UNTIL(&loop, atomic_load(&norder) == NA_N);
  teardown();
  for (i = 0; i < NA_N; i++) ASSERT_ERR(items[i].status, UV_ECANCELED);
  return 0;
}
