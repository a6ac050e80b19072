/* uvs_task_yield (SPEC.md, "0.5"): called by a one-shot task's run_cb
 * about its own task, it keeps the task's place. When run_cb returns the
 * task is not handed back but stays at the head of its worker's queue (on
 * a wide worker, of its key's), the worker's turn ends there, and at the
 * worker's next turn run_cb is called again, before any task queued
 * behind it. Only the run that does not yield is followed by done_cb and
 * counts in `ran` (guarantee 10 holds); hooks report STARTED and ENDED per
 * run and no new ACCEPTED. While it waits the task is queued: cancel,
 * interrupt, a close with UVS_CANCEL, suspension and eviction treat it as
 * queued; a close with UVS_DRAIN runs it on until it returns without
 * yielding; max_wait_ms and expiry never shed it. A run that yields after
 * an interrupt reached it (or after a UVS_CANCEL close began) is handed
 * back with UV_ECANCELED and does not run again. UV_EINVAL for a periodic
 * task or a barrier (and where uvs_task_check would: test-coop.c);
 * UV_EBUSY if the run already scheduled the task again, and a schedule of
 * a task that yielded in this run is UV_EBUSY; a second yield in one run
 * changes nothing. A done-less task may yield too.
 *
 * The state a yielded task waits in is reached deterministically with one
 * drain (max_concurrency 1) and two workers: the task yields, its worker
 * rejoins the tail, and the drain takes the other worker's gate, which
 * holds the drain while the test acts. */

#include "helpers.h"

#include <stdatomic.h>

#define NITEM 16
#define NRC 8
#define NORDER 128

typedef struct item_s item_t;

struct item_s {
  uvs_task_t task;
  int id;
  int nyield; /* runs 1..nyield yield */
  void (*body)(item_t* it);
  atomic_int runs;
  int status;
  int done_calls;
  int rc[NRC];
  int nrc;
  char ev[64]; /* the hook's letters for it: A S E H */
  uint64_t t_start;
  uint64_t t_end;
};

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t workers[3];
static uv_thread_t loop_thread;
static item_t items[NITEM];
static int ndone;
static int order[NORDER]; /* ids in run order */
static atomic_int norder;
static int done_order[NITEM];
static test_latch_t started;
static test_latch_t release;
static uv_mutex_t ev_mu;
static int hook_marker;


static void rec(item_t* it, int rc) {
  ASSERT_LT(it->nrc, NRC);
  it->rc[it->nrc++] = rc;
}


static void item_run(uvs_task_t* task) {
  item_t* it;
  int runs;
  int n;

  it = TEST_CONTAINER_OF(task, item_t, task);
  ASSERT_PTR_EQ(uvs_current_task(), task);
  runs = atomic_fetch_add(&it->runs, 1) + 1;
  n = atomic_fetch_add(&norder, 1);
  ASSERT_LT(n, NORDER);
  order[n] = it->id;
  if (it->body != NULL)
    it->body(it);
  if (runs <= it->nyield)
    ASSERT_OK(uvs_task_yield(task));
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  done_order[ndone++] = it->id;
}


static void hook(
    uvs_worker_t* w, uvs_task_t* task, uvs_event_t ev, int status, void* arg) {
  static const char letters[] = "ASEH";
  item_t* it;
  size_t n;

  (void) w;
  (void) status;
  ASSERT_PTR_EQ(arg, &hook_marker);
  if (task == NULL)
    return;
  it = TEST_CONTAINER_OF(task, item_t, task);
  ASSERT(it >= items && it < items + NITEM);
  uv_mutex_lock(&ev_mu);
  n = strlen(it->ev);
  ASSERT_LT(n + 1, sizeof(it->ev));
  it->ev[n] = letters[ev];
  uv_mutex_unlock(&ev_mu);
}


static void init_items(void) {
  int i;

  for (i = 0; i < NITEM; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    items[i].id = i;
    items[i].status = 1;
    ASSERT_OK(uvs_task_init(&items[i].task, item_run, item_done));
  }
}


/* Workers 0 and 1 are pool workers (worker 0 made with wo, if given),
 * worker 2 a loop worker. */
static void setup_ex(unsigned cap, const uvs_worker_options_t* wo) {
  uvs_sched_options_t o;

  memset(&o, 0, sizeof(o));
  o.max_concurrency = cap;
  o.hook = hook;
  o.hook_arg = &hook_marker;
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_mutex_init(&ev_mu));
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  ASSERT_OK(uvs_worker_init_ex(&sched, &workers[0], UVS_POOL, wo));
  ASSERT_OK(uvs_worker_init(&sched, &workers[1], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[2], UVS_LOOP));
  test_latch_init(&started);
  test_latch_init(&release);
  ndone = 0;
  atomic_store(&norder, 0);
  init_items();
}


static void setup(unsigned cap) {
  setup_ex(cap, NULL);
}


static void teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  uv_mutex_destroy(&ev_mu);
}


static void assert_order(const int* want, int n) {
  int i;

  ASSERT_EQ(atomic_load(&norder), n);
  for (i = 0; i < n; i++) ASSERT_EQ(order[i], want[i]);
}


static void assert_stats(uint64_t scheduled, uint64_t ran, uint64_t cancelled) {
  uvs_stats_t st;

  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, scheduled);
  ASSERT_UINT64_EQ(st.ran, ran);
  ASSERT_UINT64_EQ(st.cancelled, cancelled);
  ASSERT_UINT64_EQ(st.pending, scheduled - ran - cancelled);
}


/* ---- its place --------------------------------------------------------- */

/* A task that yields three times, five queued behind it on one worker: it
 * runs four times before any of them, one done_cb (0) before theirs, one
 * `ran`; its hook letters are ACCEPTED, then STARTED and ENDED per run,
 * then HANDED_BACK. */
static void keeps_place(int wi) {
  static const int want[] = {0, 0, 0, 0, 1, 2, 3, 4, 5};
  uvs_worker_metrics_t m;
  int i;

  setup(0);
  items[0].nyield = 3;
  for (i = 0; i < 6; i++) ASSERT_OK(uvs_schedule(&workers[wi], &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  assert_order(want, 9);
  ASSERT_EQ(ndone, 6);
  for (i = 0; i < 6; i++) {
    ASSERT_EQ(done_order[i], i);
    ASSERT_OK(items[i].status);
    ASSERT_EQ(strcmp(items[i].ev, i == 0 ? "ASESESESEH" : "ASEH"), 0);
  }
  ASSERT_EQ(atomic_load(&items[0].runs), 4);
  assert_stats(6, 6, 0);
  ASSERT_OK(uvs_worker_metrics(&workers[wi], &m));
  ASSERT_UINT64_EQ(m.scheduled, 6);
  ASSERT_UINT64_EQ(m.ran, 6);
  ASSERT_UINT64_EQ(m.queued, 0);
  teardown();
}


TEST_IMPL(yield_keeps_place_pool) {
  keeps_place(0);
  return 0;
}


TEST_IMPL(yield_keeps_place_loop) {
  keeps_place(2);
  return 0;
}


/* The worker's turn ends at a yield: with one drain, worker 1's gate runs
 * between the yielded task's runs (worker 0 rejoined the tail). While it
 * waits the task is queued, pending and not run: the stats and the
 * worker's metrics say so, and guarantee 10's identity holds. */
static void gate_body(item_t* it) {
  it->t_start = test_hrtime();
  test_latch_add(&started, 1);
  ASSERT(test_latch_wait(&release, 1, TEST_WAIT_MS));
}


/* Worker 0: item 0 (yields nyield times), then items 1..behind; worker 1:
 * item 10, a gate. Runs the loop until the gate holds the only drain:
 * item 0 has run once and waits. */
static void yielded_and_waiting(int nyield, int behind) {
  int i;

  items[0].nyield = nyield;
  items[10].body = gate_body;
  ASSERT_OK(uvs_schedule(&workers[0], &items[0].task));
  for (i = 1; i <= behind; i++)
    ASSERT_OK(uvs_schedule(&workers[0], &items[i].task));
  ASSERT_OK(uvs_schedule(&workers[1], &items[10].task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_EQ(ndone, 0);
}


TEST_IMPL(yield_turn_ends) {
  static const int want[] = {0, 10, 0, 1};
  uvs_worker_metrics_t m;

  setup(1);
  yielded_and_waiting(1, 1);
  ASSERT_EQ(strcmp(items[0].ev, "ASE"), 0);
  assert_stats(3, 0, 0);
  ASSERT_OK(uvs_worker_metrics(&workers[0], &m));
  ASSERT_UINT64_EQ(m.queued, 2);
  ASSERT_UINT64_EQ(m.running, 0);
  ASSERT_UINT64_EQ(m.ran, 0);
  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  assert_order(want, 4);
  ASSERT_EQ(ndone, 3);
  ASSERT_EQ(done_order[0], 10);
  ASSERT_EQ(done_order[1], 0);
  ASSERT_EQ(done_order[2], 1);
  ASSERT_EQ(strcmp(items[0].ev, "ASESEH"), 0);
  assert_stats(3, 3, 0);
  teardown();
  return 0;
}


/* A loop worker's next turn is the next loop iteration: each run of a task
 * that yields comes in an iteration of its own. */
static uv_prepare_t prepare;
static int iterations;
static int run_iteration[8];

static void prepare_cb(uv_prepare_t* handle) {
  (void) handle;
  iterations++;
}


static void note_iteration(item_t* it) {
  run_iteration[atomic_load(&it->runs) - 1] = iterations;
}


TEST_IMPL(yield_loop_next_iteration) {
  int i;

  setup(0);
  ASSERT_OK(uv_prepare_init(&loop, &prepare));
  ASSERT_OK(uv_prepare_start(&prepare, prepare_cb));
  uv_unref((uv_handle_t*) &prepare);
  items[0].nyield = 4;
  items[0].body = note_iteration;
  ASSERT_OK(uvs_schedule(&workers[2], &items[0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&items[0].runs), 5);
  for (i = 1; i < 5; i++) ASSERT_GT(run_iteration[i], run_iteration[i - 1]);
  ASSERT_OK(items[0].status);
  uv_close((uv_handle_t*) &prepare, NULL);
  teardown();
  return 0;
}


/* A wide worker: a task of key 1 that yields twice keeps its place in its
 * key's order (before the tasks of key 1 queued behind it; its done_cb
 * before theirs); key 2 goes on meanwhile. */
TEST_IMPL(yield_wide_key_order) {
  uvs_worker_options_t wo;
  int key1[8];
  int n1;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  memset(&wo, 0, sizeof(wo));
  wo.width = 2;
  setup_ex(0, &wo);
  items[0].nyield = 2;
  for (i = 0; i < 6; i++) {
    ASSERT_OK(uvs_task_set_key(&items[i].task, i < 3 ? 1 : 2));
    ASSERT_OK(uvs_schedule(&workers[0], &items[i].task));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 6);
  for (n1 = 0, i = 0; i < atomic_load(&norder); i++)
    if (order[i] < 3)
      key1[n1++] = order[i];
  ASSERT_EQ(n1, 5);
  ASSERT_EQ(key1[0], 0);
  ASSERT_EQ(key1[1], 0);
  ASSERT_EQ(key1[2], 0);
  ASSERT_EQ(key1[3], 1);
  ASSERT_EQ(key1[4], 2);
  for (n1 = 0, i = 0; i < ndone; i++)
    if (done_order[i] < 3)
      ASSERT_EQ(done_order[i], n1++);
  for (i = 0; i < 6; i++) ASSERT_OK(items[i].status);
  assert_stats(6, 6, 0);
  teardown();
  return 0;
}


/* A task with no key on a wide worker keeps its place in the worker's
 * queue: with one lane (max_concurrency 1), it runs again before the
 * keyless tasks queued behind it ("before any task queued behind it";
 * 0.2: a wide worker starts tasks in FIFO order among those that can).
 *
 * Fails at e64e407: uvs__keys_requeue (src/keys.c) puts a keyless task
 * that yielded at the tail of kready, behind the tasks queued after it:
 * the order is 0 1 2 0. */
TEST_IMPL(yield_wide_no_key) {
  static const int want[] = {0, 0, 1, 2};
  uvs_worker_options_t wo;
  int i;

  memset(&wo, 0, sizeof(wo));
  wo.width = 2;
  setup_ex(1, &wo);
  items[0].nyield = 1;
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_schedule(&workers[0], &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  assert_order(want, 4);
  teardown();
  return 0;
}


/* A barrier accepted behind a yielding task waits for its last run. */
TEST_IMPL(yield_before_barrier) {
  static const int want[] = {0, 0, 0, 1};
  uvs_worker_options_t wo;

  memset(&wo, 0, sizeof(wo));
  wo.width = 2;
  setup_ex(0, &wo);
  items[0].nyield = 2;
  ASSERT_OK(uvs_task_set_key(&items[0].task, 1));
  ASSERT_OK(uvs_schedule(&workers[0], &items[0].task));
  ASSERT_OK(uvs_schedule_barrier(&workers[0], &items[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  assert_order(want, 4);
  ASSERT_EQ(done_order[0], 0);
  ASSERT_EQ(done_order[1], 1);
  teardown();
  return 0;
}


/* ---- while it waits, it is queued -------------------------------------- */

/* The gate lets go; the rest runs. */
static void release_and_run(void) {
  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
}


static void waiting_cancelled(int interrupt) {
  setup(1);
  yielded_and_waiting(3, 1);
  if (interrupt)
    ASSERT_OK(uvs_task_interrupt(&items[0].task));
  else
    ASSERT_OK(uvs_task_cancel(&items[0].task));
  ASSERT_ERR(uvs_task_cancel(&items[0].task), UV_EBUSY);
  ASSERT_ERR(uvs_task_interrupt(&items[0].task), UV_EBUSY);
  release_and_run();
  ASSERT_EQ(ndone, 3);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(items[1].status);
  ASSERT_EQ(strcmp(items[0].ev, "ASEH"), 0);
  assert_stats(3, 2, 1);
  teardown();
}


TEST_IMPL(yield_waiting_cancel) {
  waiting_cancelled(0);
  return 0;
}


TEST_IMPL(yield_waiting_interrupt) {
  waiting_cancelled(1);
  return 0;
}


static int closed_calls;

static void worker_closed(uvs_worker_t* w) {
  (void) w;
  closed_calls++;
}


/* A close with UVS_CANCEL hands it back with UV_ECANCELED, with the task
 * behind it; one with UVS_DRAIN runs it on until it returns without
 * yielding (three more runs), then the task behind it. */
static void waiting_closed(uvs_close_how_t how) {
  setup(1);
  yielded_and_waiting(3, 1);
  closed_calls = 0;
  ASSERT_OK(uvs_worker_close(&workers[0], how, worker_closed));
  release_and_run();
  ASSERT_EQ(closed_calls, 1);
  ASSERT_EQ(ndone, 3);
  if (how == UVS_CANCEL) {
    ASSERT_ERR(items[0].status, UV_ECANCELED);
    ASSERT_ERR(items[1].status, UV_ECANCELED);
    ASSERT_EQ(atomic_load(&items[0].runs), 1);
    ASSERT_EQ(atomic_load(&items[1].runs), 0);
    assert_stats(3, 1, 2);
  } else {
    ASSERT_OK(items[0].status);
    ASSERT_OK(items[1].status);
    ASSERT_EQ(atomic_load(&items[0].runs), 4);
    ASSERT_EQ(done_order[1], 0);
    ASSERT_EQ(done_order[2], 1);
    assert_stats(3, 3, 0);
  }
  teardown();
}


TEST_IMPL(yield_waiting_close_cancel) {
  waiting_closed(UVS_CANCEL);
  return 0;
}


TEST_IMPL(yield_waiting_close_drain) {
  waiting_closed(UVS_DRAIN);
  return 0;
}


/* The scheduler's close with UVS_CANCEL: the same. */
TEST_IMPL(yield_waiting_sched_close) {
  int calls;

  setup(1);
  yielded_and_waiting(3, 1);
  calls = 0;
  sched.data = &calls;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, test_close_cb_counter));
  release_and_run();
  ASSERT_EQ(calls, 1);
  ASSERT_EQ(ndone, 3);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  ASSERT_ERR(items[1].status, UV_ECANCELED);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(uv_loop_close(&loop));
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  uv_mutex_destroy(&ev_mu);
  return 0;
}


/* A suspension keeps it waiting, queued, in its place; the resume lets it
 * run on, and then the task behind it. */
TEST_IMPL(yield_waiting_suspend) {
  static const int want[] = {0, 10, 0, 0, 1};
  uvs_worker_metrics_t m;

  setup(1);
  yielded_and_waiting(2, 1);
  ASSERT_OK(uvs_worker_suspend(&workers[0]));
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == 1);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(uvs_worker_metrics(&workers[0], &m));
  ASSERT_UINT64_EQ(m.queued, 2);
  ASSERT_UINT64_EQ(m.suspended, 1);
  ASSERT_OK(uvs_worker_resume(&workers[0]));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  assert_order(want, 5);
  ASSERT_OK(items[0].status);
  ASSERT_OK(items[1].status);
  teardown();
  return 0;
}


/* A bounded worker that drops its oldest: a task that yielded is queued,
 * and the oldest: a schedule onto the full worker evicts it. */
TEST_IMPL(yield_waiting_evicted) {
  uvs_worker_options_t wo;

  memset(&wo, 0, sizeof(wo));
  wo.max_pending = 1;
  wo.on_full = UVS_FULL_DROP_OLDEST;
  setup_ex(1, &wo);
  yielded_and_waiting(3, 0);
  ASSERT_OK(uvs_schedule(&workers[0], &items[1].task));
  release_and_run();
  ASSERT_EQ(ndone, 3);
  ASSERT_ERR(items[0].status, UV_ENOBUFS);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(items[1].status);
  assert_stats(3, 2, 1);
  teardown();
  return 0;
}


/* It has started: neither its worker's max_wait_ms nor its own expiry
 * sheds it, while the task queued behind it (from before the wait) is
 * shed. The gate holds the drain for 300 ms, three times the bound: the
 * waiting is what is tested. */
TEST_IMPL(yield_never_shed) {
  uvs_worker_options_t wo;
  uvs_worker_metrics_t m;

  memset(&wo, 0, sizeof(wo));
  wo.max_wait_ms = 100;
  setup_ex(1, &wo);
  ASSERT_OK(uvs_task_set_expiry(&items[0].task, 100));
  yielded_and_waiting(1, 1);
  uv_sleep(300);
  release_and_run();
  ASSERT_EQ(ndone, 3);
  ASSERT_OK(items[0].status);
  ASSERT_EQ(atomic_load(&items[0].runs), 2);
  ASSERT_ERR(items[1].status, UV_ETIMEDOUT);
  ASSERT_EQ(atomic_load(&items[1].runs), 0);
  ASSERT_OK(uvs_worker_metrics(&workers[0], &m));
  ASSERT_UINT64_EQ(m.expired, 1);
  assert_stats(3, 2, 1);
  teardown();
  return 0;
}


/* ---- a yield after a request to stop ----------------------------------- */

/* It interrupts itself, then yields: handed back with UV_ECANCELED, not
 * run again; the task behind it runs. */
static void interrupt_then_yield(item_t* it) {
  rec(it, uvs_task_interrupt(&it->task));
  rec(it, uvs_task_yield(&it->task));
}


static atomic_int told;

/* In its first run: says it started, waits until the test has acted,
 * then yields (and item_run yields again, which changes nothing). */
static void wait_then_yield(item_t* it) {
  uint64_t end;

  if (atomic_load(&it->runs) != 1)
    return;
  test_latch_add(&started, 1);
  end = test_hrtime_ms() + TEST_WAIT_MS;
  while (!atomic_load(&told) && test_hrtime_ms() < end) uv_sleep(1);
  ASSERT(atomic_load(&told));
  rec(it, uvs_task_check(&it->task));
  rec(it, uvs_task_yield(&it->task));
}


TEST_IMPL(yield_after_interrupt_self) {
  setup(0);
  items[0].body = interrupt_then_yield;
  ASSERT_OK(uvs_schedule(&workers[0], &items[0].task));
  ASSERT_OK(uvs_schedule(&workers[0], &items[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 2);
  ASSERT_OK(items[0].rc[0]);
  ASSERT_OK(items[0].rc[1]);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  ASSERT_OK(items[1].status);
  ASSERT_EQ(strcmp(items[0].ev, "ASEH"), 0);
  assert_stats(2, 1, 1);
  teardown();
  return 0;
}


/* The request comes from the loop thread (interrupt, or a close of the
 * worker with UVS_CANCEL or UVS_DRAIN) while it runs; then it yields. */
static void yield_after(int what) {
  setup(0);
  items[0].body = wait_then_yield;
  items[0].nyield = 2;
  ASSERT_OK(uvs_schedule(&workers[0], &items[0].task));
  ASSERT_OK(uvs_schedule(&workers[0], &items[1].task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  closed_calls = 0;
  if (what == 0)
    ASSERT_OK(uvs_task_interrupt(&items[0].task));
  else
    ASSERT_OK(uvs_worker_close(&workers[0], what == 1 ? UVS_CANCEL : UVS_DRAIN,
                               worker_closed));
  atomic_store(&told, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 2);
  ASSERT_EQ(closed_calls, what != 0);
  if (what == 2) {
    /* A drain runs it on: it yields in its second run too, so three. */
    ASSERT_EQ(items[0].nrc, 2);
    ASSERT_OK(items[0].rc[0]);
    ASSERT_OK(items[0].status);
    ASSERT_EQ(atomic_load(&items[0].runs), 3);
    ASSERT_OK(items[1].status);
  } else {
    ASSERT_ERR(items[0].rc[0], UV_ECANCELED);
    ASSERT_OK(items[0].rc[1]);
    ASSERT_ERR(items[0].status, UV_ECANCELED);
    ASSERT_EQ(atomic_load(&items[0].runs), 1);
    ASSERT_ERR(items[1].status, what == 0 ? 0 : UV_ECANCELED);
  }
  teardown();
}


TEST_IMPL(yield_after_interrupt) {
  yield_after(0);
  return 0;
}


TEST_IMPL(yield_after_close_cancel) {
  yield_after(1);
  return 0;
}


TEST_IMPL(yield_after_close_drain) {
  yield_after(2);
  return 0;
}


/* ---- errors, and what a second call does ------------------------------- */

static void yield_rc(item_t* it) {
  if (atomic_load(&it->runs) == 1)
    rec(it, uvs_task_yield(&it->task));
}


/* Periodic tasks and barriers: UV_EINVAL, and nothing changes (the
 * periodic task runs on its grid, the barrier's run is its only one). */
TEST_IMPL(yield_einval_periodic_barrier) {
  uvs_worker_options_t wo;
  uvs_worker_t wide;
  int i;

  setup(0);
  memset(&wo, 0, sizeof(wo));
  wo.width = 2;
  ASSERT_OK(uvs_worker_init_ex(&sched, &wide, UVS_POOL, &wo));
  for (i = 0; i < 6; i++) items[i].body = yield_rc;
  ASSERT_OK(uvs_schedule_every(&workers[0], &items[0].task, 0, 1));
  ASSERT_OK(uvs_schedule_every(&workers[2], &items[1].task, 0, 1));
  ASSERT_OK(uvs_schedule_barrier(&wide, &items[2].task));
  ASSERT_OK(uvs_schedule(&wide, &items[3].task));
  /* A barrier on a serial worker (an ordinary schedule otherwise) and on
   * a loop worker. */
  ASSERT_OK(uvs_schedule_barrier(&workers[1], &items[4].task));
  ASSERT_OK(uvs_schedule_barrier(&workers[2], &items[5].task));
  TEST_RUN_UNTIL(&loop, atomic_load(&items[0].runs) >= 2 &&
                            atomic_load(&items[1].runs) >= 2 && ndone == 4);
  ASSERT_OK(uvs_task_cancel(&items[0].task));
  ASSERT_OK(uvs_task_cancel(&items[1].task));
  TEST_RUN_UNTIL(&loop, ndone == 6);
  for (i = 0; i < 6; i++) {
    if (i == 3)
      continue;
    ASSERT_ERR(items[i].rc[0], UV_EINVAL);
  }
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  ASSERT_ERR(items[1].status, UV_ECANCELED);
  for (i = 2; i < 6; i += 2) {
    ASSERT_OK(items[i].status);
    ASSERT_EQ(atomic_load(&items[i].runs), 1);
  }
  ASSERT_OK(items[5].status);
  ASSERT_EQ(atomic_load(&items[5].runs), 1);
  /* The task behind the barrier yielded (0) and ran again. */
  ASSERT_OK(items[3].rc[0]);
  ASSERT_EQ(atomic_load(&items[3].runs), 2);
  teardown();
  return 0;
}


/* A run that scheduled its task again can't yield (UV_EBUSY): the task is
 * in its new custody, runs once more and is handed back once. */
static int again_wi;

static void again_then_yield(item_t* it) {
  if (atomic_load(&it->runs) != 1)
    return;
  rec(it, uvs_schedule(&workers[again_wi], &it->task));
  rec(it, uvs_task_yield(&it->task));
}


/* A run that yielded can't schedule its task (UV_EBUSY), on any worker,
 * in any way; a second yield returns 0 and changes nothing. */
static void yield_then_again(item_t* it) {
  if (atomic_load(&it->runs) != 1)
    return;
  rec(it, uvs_task_yield(&it->task));
  rec(it, uvs_schedule(&workers[0], &it->task));
  rec(it, uvs_schedule(&workers[1], &it->task));
  rec(it, uvs_schedule_after(&workers[2], &it->task, 1));
  rec(it, uvs_schedule_barrier(&workers[0], &it->task));
  rec(it, uvs_task_yield(&it->task));
}


static void yield_ebusy(int wi) {
  static const int want[] = {0, UV_EBUSY, UV_EBUSY, UV_EBUSY, UV_EBUSY, 0};
  int i;

  setup(0);
  items[0].body = again_then_yield;
  items[1].body = yield_then_again;
  again_wi = wi;
  ASSERT_OK(uvs_schedule(&workers[wi], &items[0].task));
  ASSERT_OK(uvs_schedule(&workers[wi], &items[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 2);
  ASSERT_OK(items[0].rc[0]);
  ASSERT_ERR(items[0].rc[1], UV_EBUSY);
  ASSERT_EQ(atomic_load(&items[0].runs), 2);
  ASSERT_OK(items[0].status);
  ASSERT_EQ(items[1].nrc, 6);
  for (i = 0; i < 6; i++) ASSERT_ERR(items[1].rc[i], want[i]);
  ASSERT_EQ(atomic_load(&items[1].runs), 2);
  ASSERT_OK(items[1].status);
  assert_stats(3, 3, 0);
  teardown();
}


TEST_IMPL(yield_ebusy_pool) {
  yield_ebusy(0);
  return 0;
}


TEST_IMPL(yield_ebusy_loop) {
  yield_ebusy(2);
  return 0;
}


/* A done-less task may yield: it keeps its place, runs three times before
 * the task behind it, and counts once in `ran`. */

static void doneless_keeps_place(int wi) {
  static const int want[] = {0, 0, 0, 1};

  setup(0);
  items[0].nyield = 2;
  ASSERT_OK(uvs_task_init(&items[0].task, item_run, NULL));
  ASSERT_OK(uvs_schedule(&workers[wi], &items[0].task));
  ASSERT_OK(uvs_schedule(&workers[wi], &items[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  assert_order(want, 4);
  ASSERT_EQ(ndone, 1);
  ASSERT_OK(items[1].status);
  assert_stats(2, 2, 0);
  teardown();
}


TEST_IMPL(yield_doneless_pool) {
  doneless_keeps_place(0);
  return 0;
}


TEST_IMPL(yield_doneless_loop) {
  doneless_keeps_place(2);
  return 0;
}


/* A done-less task that scheduled itself again from its run (it was the
 * user's already) can't yield: UV_EBUSY. */
static void doneless_again(item_t* it) {
  if (atomic_load(&it->runs) != 1)
    return;
  rec(it, uvs_schedule(&workers[0], &it->task));
  rec(it, uvs_task_yield(&it->task));
}


TEST_IMPL(yield_doneless_rescheduled) {
  setup(0);
  items[0].body = doneless_again;
  ASSERT_OK(uvs_task_init(&items[0].task, item_run, NULL));
  ASSERT_OK(uvs_schedule(&workers[2], &items[0].task));
  TEST_RUN_UNTIL(&loop, atomic_load(&items[0].runs) == 2);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(items[0].rc[0]);
  ASSERT_ERR(items[0].rc[1], UV_EBUSY);
  ASSERT_EQ(atomic_load(&items[0].runs), 2);
  assert_stats(2, 2, 0);
  teardown();
  return 0;
}


/* ---- cooperation ------------------------------------------------------- */

/* A long task that works in 100 us chunks, 30 ms in all, and yields when
 * told UV_EAGAIN, beside a short task on another worker, with one drain:
 * the short one starts before the long one ends (without the yields it
 * would wait 30 ms), and the long one finishes its work over several runs
 * with one done_cb. */
static uint64_t long_work_us;

static void long_chunks(item_t* it) {
  int rc;

  if (it->t_start == 0)
    it->t_start = test_hrtime();
  while (long_work_us < 30000) {
    test_spin_us(100);
    long_work_us += 100;
    rc = uvs_task_check(&it->task);
    if (rc == UV_EAGAIN) {
      ASSERT_OK(uvs_task_yield(&it->task));
      return;
    }
    ASSERT_OK(rc);
  }
  it->t_end = test_hrtime();
}


static void short_start(item_t* it) {
  it->t_start = test_hrtime();
}


TEST_IMPL(yield_cooperates) {
  setup(1);
  items[0].body = long_chunks;
  items[1].body = short_start;
  ASSERT_OK(uvs_schedule(&workers[0], &items[0].task));
  ASSERT_OK(uvs_schedule(&workers[1], &items[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 2);
  ASSERT_OK(items[0].status);
  ASSERT_UINT64_EQ(long_work_us, 30000);
  ASSERT_GE(atomic_load(&items[0].runs), 2);
  ASSERT_UINT64_LT(items[1].t_start, items[0].t_end);
  ASSERT_EQ(done_order[0], 1);
  assert_stats(2, 2, 0);
  teardown();
  return 0;
}
