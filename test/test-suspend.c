/* Suspend and resume (SPEC.md, "0.4 additions"): uvs_worker_suspend raises
 * a worker's suspend count, uvs_worker_resume lowers it; any thread, O(1).
 *
 * - While the count is above 0 the worker starts no task: a run_cb already
 *   running finishes, and queued tasks keep their order. A suspend from
 *   another thread may let one task start per lane that was already taking
 *   it; one from inside a run_cb of the same worker lets no further task
 *   start.
 * - Everything else goes on: schedules, posts and barriers are accepted
 *   (bounds and on_full as usual), delayed tasks fall due onto the queue,
 *   cancel and re-arm work, and pending tasks keep uv_run from returning.
 * - When the count falls to 0 the worker is ready again.
 * - A close ends the suspension: UVS_DRAIN runs the queued tasks, UVS_CANCEL
 *   hands them back; the count stays and `suspended` keeps reading it.
 * - UV_ESHUTDOWN on a closing or closed worker whatever the count;
 *   otherwise resume at 0 is UV_EINVAL; NULL is UV_EINVAL.
 *
 * "Nothing starts" is checked after test_settle (helpers.h): loop turns with
 * pool threads given a moment, so a task that should not start would have
 * had the chance. */

#include "helpers.h"

#include <stdatomic.h>

#define MAXI 64

typedef struct {
  uvs_task_t task;
  int id;
  uvs_worker_t* worker;
  int suspend_in_run; /* nonzero: suspends its own worker from run_cb */
  atomic_int runs;
  int done_calls;
  int status;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uv_thread_t loop_thread;
static item_t items[MAXI];
static atomic_int run_order[MAXI];
static atomic_int nruns;
static atomic_int running;
static int done_order[MAXI];
static int ndone;
static int space_calls;
static int close_calls;


/* keep_alive: for schedules from other threads while the loop may be idle
 * (docs/guarantees.rst: a foreign schedule can't wake an idle loop). */
static void setup_opts(int manual_clock, int keep_alive) {
  uvs_sched_options_t o;

  memset(&o, 0, sizeof(o));
  o.manual_clock = manual_clock;
  o.keep_alive = keep_alive;
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
}


static void setup(void) {
  setup_opts(0, 0);
}


static void teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


static uint64_t suspended_of(uvs_worker_t* w) {
  uvs_worker_metrics_t m;

  memset(&m, 0xff, sizeof(m));
  ASSERT_OK(uvs_worker_metrics(w, &m));
  return m.suspended;
}


static uvs_worker_metrics_t metrics_of(uvs_worker_t* w) {
  uvs_worker_metrics_t m;

  memset(&m, 0xff, sizeof(m));
  ASSERT_OK(uvs_worker_metrics(w, &m));
  return m;
}


static void item_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  ASSERT_EQ(atomic_fetch_add(&it->runs, 1), 0);
  if (it->worker->where == UVS_LOOP)
    ASSERT(test_on_thread(loop_thread));
  atomic_fetch_add(&running, 1);
  run_order[atomic_fetch_add(&nruns, 1)] = it->id;
  if (it->suspend_in_run) {
    ASSERT_OK(uvs_worker_suspend(it->worker));
    ASSERT_UINT64_EQ(suspended_of(it->worker), 1);
  }
  atomic_fetch_sub(&running, 1);
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  done_order[ndone++] = it->id;
  if (status == 0)
    ASSERT_EQ(atomic_load(&it->runs), 1);
  else
    ASSERT_EQ(atomic_load(&it->runs), 0);
}


static void init_items(int n, uvs_worker_t* w) {
  int i;

  for (i = 0; i < n; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    items[i].id = i;
    items[i].worker = w;
    ASSERT_OK(uvs_task_init(&items[i].task, item_run, item_done));
  }
}


static void schedule_range(uvs_worker_t* w, int from, int to) {
  int i;

  for (i = from; i < to; i++) ASSERT_OK(uvs_schedule(w, &items[i].task));
}


/* The runs so far were items from..to-1 in that order. */
static void assert_ran_in_order(int from, int to) {
  int i;

  ASSERT_EQ(atomic_load(&nruns), to);
  for (i = from; i < to; i++) ASSERT_EQ(run_order[i], i);
}


static void gate_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  ndone++;
}


/* ---- errors ------------------------------------------------------------ */

static void count_close(uvs_worker_t* w) {
  (void) w;
  close_calls++;
}


TEST_IMPL(suspend_errors) {
  uvs_worker_t w;
  uvs_worker_t wc;
  uvs_worker_t w0;
  uvs_worker_t ws;

  setup();
  ASSERT_ERR(uvs_worker_suspend(NULL), UV_EINVAL);
  ASSERT_ERR(uvs_worker_resume(NULL), UV_EINVAL);

  ASSERT_OK(uvs_worker_init(&sched, &w, UVS_POOL));
  ASSERT_UINT64_EQ(suspended_of(&w), 0);
  ASSERT_ERR(uvs_worker_resume(&w), UV_EINVAL);
  ASSERT_UINT64_EQ(suspended_of(&w), 0);
  ASSERT_OK(uvs_worker_suspend(&w));
  ASSERT_UINT64_EQ(suspended_of(&w), 1);
  ASSERT_OK(uvs_worker_resume(&w));
  ASSERT_UINT64_EQ(suspended_of(&w), 0);
  ASSERT_ERR(uvs_worker_resume(&w), UV_EINVAL);
  ASSERT_UINT64_EQ(suspended_of(&w), 0);

  /* Closing (a loop worker with a task queued and the loop not running):
   * UV_ESHUTDOWN whatever the count, and the count does not move. */
  ASSERT_OK(uvs_worker_init(&sched, &wc, UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &w0, UVS_LOOP));
  init_items(2, &wc);
  items[1].worker = &w0;
  ASSERT_OK(uvs_schedule(&wc, &items[0].task));
  ASSERT_OK(uvs_schedule(&w0, &items[1].task));
  ASSERT_OK(uvs_worker_suspend(&wc));
  ASSERT_OK(uvs_worker_close(&wc, UVS_DRAIN, count_close));
  ASSERT_OK(uvs_worker_close(&w0, UVS_DRAIN, count_close));
  ASSERT_ERR(uvs_worker_suspend(&wc), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_resume(&wc), UV_ESHUTDOWN);
  ASSERT_UINT64_EQ(suspended_of(&wc), 1);
  ASSERT_ERR(uvs_worker_suspend(&w0), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_resume(&w0), UV_ESHUTDOWN); /* not UV_EINVAL */
  ASSERT_UINT64_EQ(suspended_of(&w0), 0);
  /* Closed. */
  TEST_RUN_UNTIL(&loop, close_calls == 2);
  ASSERT_EQ(ndone, 2);
  ASSERT_ERR(uvs_worker_suspend(&wc), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_resume(&wc), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_suspend(&w0), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_resume(&w0), UV_ESHUTDOWN);

  /* A worker of a closing scheduler. */
  ASSERT_OK(uvs_worker_init(&sched, &ws, UVS_POOL));
  ASSERT_OK(uvs_worker_suspend(&ws));
  close_calls = 0;
  sched.data = &close_calls;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, test_close_cb_counter));
  ASSERT_ERR(uvs_worker_suspend(&ws), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_resume(&ws), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_suspend(&w), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_resume(&w), UV_ESHUTDOWN);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* ---- nothing starts while suspended; resume restarts in order ----------- */

static void stops_and_resumes(uvs_where_t where) {
  uvs_worker_t w;

  setup();
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  init_items(10, &w);
  ASSERT_OK(uvs_worker_suspend(&w));
  schedule_range(&w, 0, 10);
  ASSERT_UINT64_EQ(metrics_of(&w).queued, 10);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);
  ASSERT_EQ(ndone, 0);
  ASSERT_UINT64_EQ(suspended_of(&w), 1);
  ASSERT_UINT64_EQ(metrics_of(&w).queued, 10);

  ASSERT_OK(uvs_worker_resume(&w));
  ASSERT_UINT64_EQ(suspended_of(&w), 0);
  TEST_RUN_UNTIL(&loop, ndone == 10);
  assert_ran_in_order(0, 10);
  ASSERT_UINT64_EQ(metrics_of(&w).queued, 0);

  /* And again, with the worker idle-but-known: a second round. */
  init_items(4, &w);
  atomic_store(&nruns, 0);
  ndone = 0;
  ASSERT_OK(uvs_worker_suspend(&w));
  schedule_range(&w, 0, 4);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);
  ASSERT_OK(uvs_worker_resume(&w));
  TEST_RUN_UNTIL(&loop, ndone == 4);
  assert_ran_in_order(0, 4);
  teardown();
}


TEST_IMPL(suspend_stops_and_resumes_pool) {
  stops_and_resumes(UVS_POOL);
  return 0;
}


TEST_IMPL(suspend_stops_and_resumes_loop) {
  stops_and_resumes(UVS_LOOP);
  return 0;
}


/* Suspended from the loop thread (another thread than the pool thread
 * running a gate task) while tasks wait behind the gate: at most one of
 * them may still start; the rest wait, in order, until the resume. */
TEST_IMPL(suspend_while_running_pool) {
  test_latch_t started;
  test_latch_t release;
  test_gate_t gate;
  uvs_worker_t w;
  int early;
  int i;

  setup();
  test_latch_init(&started);
  test_latch_init(&release);
  ASSERT_OK(uvs_worker_init(&sched, &w, UVS_POOL));
  init_items(6, &w);
  test_gate_init(&gate, &started, &release, 1, gate_done);
  ASSERT_OK(uvs_schedule(&w, &gate.task));
  schedule_range(&w, 0, 6);
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  ASSERT_OK(uvs_worker_suspend(&w));
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone >= 1);
  test_settle(&loop);
  early = atomic_load(&nruns);
  ASSERT_LE(early, 1);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), early);

  ASSERT_OK(uvs_worker_resume(&w));
  TEST_RUN_UNTIL(&loop, ndone == 7);
  assert_ran_in_order(0, 6);
  for (i = 0; i < 6; i++) ASSERT_OK(items[i].status);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* Suspended from inside a run_cb of the same worker: no further task
 * starts, on a pool worker as on a loop worker. */
static void from_run_cb(uvs_where_t where) {
  uvs_worker_t w;

  setup();
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  init_items(8, &w);
  items[2].suspend_in_run = 1;
  schedule_range(&w, 0, 8);
  TEST_RUN_UNTIL(&loop, ndone == 3);
  test_settle(&loop);
  ASSERT_EQ(ndone, 3);
  assert_ran_in_order(0, 3);
  ASSERT_UINT64_EQ(suspended_of(&w), 1);
  ASSERT_UINT64_EQ(metrics_of(&w).queued, 5);

  ASSERT_OK(uvs_worker_resume(&w));
  TEST_RUN_UNTIL(&loop, ndone == 8);
  assert_ran_in_order(0, 8);
  ASSERT_UINT64_EQ(suspended_of(&w), 0);
  teardown();
}


TEST_IMPL(suspend_from_run_cb_pool) {
  from_run_cb(UVS_POOL);
  return 0;
}


TEST_IMPL(suspend_from_run_cb_loop) {
  from_run_cb(UVS_LOOP);
  return 0;
}


/* ---- nesting ----------------------------------------------------------- */

TEST_IMPL(suspend_nesting) {
  uvs_worker_t w;

  setup();
  ASSERT_OK(uvs_worker_init(&sched, &w, UVS_POOL));
  init_items(3, &w);
  ASSERT_OK(uvs_worker_suspend(&w));
  ASSERT_OK(uvs_worker_suspend(&w));
  ASSERT_UINT64_EQ(suspended_of(&w), 2);
  schedule_range(&w, 0, 3);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);

  ASSERT_OK(uvs_worker_resume(&w));
  ASSERT_UINT64_EQ(suspended_of(&w), 1);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);

  ASSERT_OK(uvs_worker_suspend(&w));
  ASSERT_UINT64_EQ(suspended_of(&w), 2);
  ASSERT_OK(uvs_worker_resume(&w));
  ASSERT_OK(uvs_worker_resume(&w));
  ASSERT_UINT64_EQ(suspended_of(&w), 0);
  TEST_RUN_UNTIL(&loop, ndone == 3);
  assert_ran_in_order(0, 3);
  ASSERT_ERR(uvs_worker_resume(&w), UV_EINVAL);
  ASSERT_UINT64_EQ(suspended_of(&w), 0);
  teardown();
  return 0;
}


/* ---- any thread -------------------------------------------------------- */

static uvs_worker_t* ft_worker;
static test_latch_t loop_up;
static atomic_int resumed;

static void ft_suspend(void* arg) {
  (void) arg;
  ASSERT_OK(uvs_worker_suspend(ft_worker));
}


static void ft_resume(void* arg) {
  (void) arg;
  ASSERT(test_latch_wait(&loop_up, 1, TEST_WAIT_MS));
  atomic_store(&resumed, 1);
  ASSERT_OK(uvs_worker_resume(ft_worker));
}


static void signal_loop_up(uv_timer_t* t) {
  test_latch_add(&loop_up, 1);
  uv_close((uv_handle_t*) t, NULL);
}


static void resume_in_timer(uv_timer_t* t) {
  ASSERT_EQ(atomic_load(&nruns), 0);
  atomic_store(&resumed, 1);
  ASSERT_OK(uvs_worker_resume(ft_worker));
  uv_close((uv_handle_t*) t, NULL);
}


static void done_requires_resumed(uvs_task_t* task, int status) {
  ASSERT_EQ(atomic_load(&resumed), 1);
  item_done(task, status);
}


/* Suspended by one foreign thread, resumed by another while the loop
 * thread is inside uv_run(UV_RUN_DEFAULT): the suspended worker's pending
 * tasks keep uv_run from returning (the only other handle is an unref'd
 * timer), and it returns once they have run. */
static void foreign_threads(uvs_where_t where) {
  uv_thread_t a;
  uv_thread_t b;
  uv_timer_t timer;
  uvs_worker_t w;
  int i;

  setup();
  test_latch_init(&loop_up);
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  ft_worker = &w;
  init_items(5, &w);
  for (i = 0; i < 5; i++)
    ASSERT_OK(uvs_task_init(&items[i].task, item_run, done_requires_resumed));
  ASSERT_OK(uv_thread_create(&a, ft_suspend, NULL));
  ASSERT_OK(uv_thread_join(&a));
  ASSERT_UINT64_EQ(suspended_of(&w), 1);
  schedule_range(&w, 0, 5);
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, signal_loop_up, 20, 0));
  uv_unref((uv_handle_t*) &timer);
  ASSERT_OK(uv_thread_create(&b, ft_resume, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&b));
  ASSERT_EQ(atomic_load(&resumed), 1);
  ASSERT_EQ(ndone, 5);
  assert_ran_in_order(0, 5);
  ASSERT_UINT64_EQ(suspended_of(&w), 0);
  teardown();
  test_latch_destroy(&loop_up);
}


TEST_IMPL(suspend_foreign_threads_pool) {
  foreign_threads(UVS_POOL);
  return 0;
}


TEST_IMPL(suspend_foreign_threads_loop) {
  foreign_threads(UVS_LOOP);
  return 0;
}


/* The same from a timer: pending tasks of a suspended worker keep uv_run
 * from returning until an unref'd timer resumes it. */
static void keeps_loop_alive(uvs_where_t where) {
  uv_timer_t timer;
  uvs_worker_t w;
  int i;

  setup();
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  ft_worker = &w;
  init_items(3, &w);
  for (i = 0; i < 3; i++)
    ASSERT_OK(uvs_task_init(&items[i].task, item_run, done_requires_resumed));
  ASSERT_OK(uvs_worker_suspend(&w));
  schedule_range(&w, 0, 3);
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, resume_in_timer, 30, 0));
  uv_unref((uv_handle_t*) &timer);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  /* Had uv_run returned while the tasks were pending, the unref'd timer
   * would not have fired. */
  ASSERT_EQ(atomic_load(&resumed), 1);
  ASSERT_EQ(ndone, 3);
  assert_ran_in_order(0, 3);
  teardown();
}


TEST_IMPL(suspend_keeps_loop_alive_pool) {
  keeps_loop_alive(UVS_POOL);
  return 0;
}


TEST_IMPL(suspend_keeps_loop_alive_loop) {
  keeps_loop_alive(UVS_LOOP);
  return 0;
}


/* ---- schedules go on: bounds, on_full, posts, barriers, cancel ---------- */

static atomic_int post_runs;

static void post_fn(void* arg) {
  (void) arg;
  atomic_fetch_add(&post_runs, 1);
}


static void space_cb(uvs_worker_t* w) {
  (void) w;
  ASSERT(test_on_thread(loop_thread));
  space_calls++;
}


static void never_fn(void* arg) {
  (void) arg;
  ASSERT(0 && "a rejected post ran");
}


/* UVS_FULL_REJECT while suspended: schedules, a barrier and posts fill the
 * worker; the next are refused (UV_EAGAIN, counted in rejected); a cancel
 * hands a queued task back; after the resume the rest run in order and
 * space_cb is owed as usual. */
TEST_IMPL(suspend_bounded_reject) {
  uvs_worker_options_t o;
  uvs_worker_metrics_t m;
  uvs_worker_t w;

  setup();
  memset(&o, 0, sizeof(o));
  o.max_pending = 4;
  o.on_full = UVS_FULL_REJECT;
  o.low_water = 1;
  o.space_cb = space_cb;
  ASSERT_OK(uvs_worker_init_ex(&sched, &w, UVS_POOL, &o));
  init_items(6, &w);
  ASSERT_OK(uvs_worker_suspend(&w));
  ASSERT_OK(uvs_schedule(&w, &items[0].task));
  ASSERT_OK(uvs_schedule(&w, &items[1].task));
  ASSERT_OK(uvs_schedule_barrier(&w, &items[2].task));
  ASSERT_OK(uvs_post(&w, post_fn, NULL));
  m = metrics_of(&w);
  ASSERT_UINT64_EQ(m.queued, 4);
  ASSERT_ERR(uvs_schedule(&w, &items[3].task), UV_EAGAIN);
  ASSERT_ERR(uvs_schedule_barrier(&w, &items[3].task), UV_EAGAIN);
  ASSERT_ERR(uvs_post(&w, never_fn, NULL), UV_EAGAIN);
  m = metrics_of(&w);
  ASSERT_UINT64_EQ(m.rejected, 3);
  ASSERT_UINT64_EQ(m.queued, 4);

  /* Cancel works while suspended: handed back within a loop iteration. */
  ASSERT_OK(uvs_task_cancel(&items[1].task));
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_ERR(items[1].status, UV_ECANCELED);
  ASSERT_OK(uvs_schedule(&w, &items[3].task)); /* room again */
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);
  ASSERT_EQ(atomic_load(&post_runs), 0);
  ASSERT_EQ(space_calls, 0);

  ASSERT_OK(uvs_worker_resume(&w));
  TEST_RUN_UNTIL(&loop, ndone == 4 && atomic_load(&post_runs) == 1);
  ASSERT_EQ(atomic_load(&nruns), 3);
  ASSERT_EQ(run_order[0], 0);
  ASSERT_EQ(run_order[1], 2);
  ASSERT_EQ(run_order[2], 3);
  TEST_RUN_UNTIL(&loop, space_calls == 1);
  test_settle(&loop);
  ASSERT_EQ(space_calls, 1);
  teardown();
  return 0;
}


/* UVS_FULL_DROP_OLDEST while suspended: the oldest queued task is handed
 * back with UV_ENOBUFS at once, not at the resume. */
TEST_IMPL(suspend_bounded_drop_oldest) {
  uvs_worker_options_t o;
  uvs_worker_t w;

  setup();
  memset(&o, 0, sizeof(o));
  o.max_pending = 2;
  o.on_full = UVS_FULL_DROP_OLDEST;
  ASSERT_OK(uvs_worker_init_ex(&sched, &w, UVS_POOL, &o));
  init_items(4, &w);
  ASSERT_OK(uvs_worker_suspend(&w));
  schedule_range(&w, 0, 3); /* 2 evicts 0 */
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_ERR(items[0].status, UV_ENOBUFS);
  ASSERT_OK(uvs_post(&w, post_fn, NULL)); /* evicts 1 */
  TEST_RUN_UNTIL(&loop, ndone == 2);
  ASSERT_ERR(items[1].status, UV_ENOBUFS);
  ASSERT_UINT64_EQ(metrics_of(&w).dropped, 2);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);

  ASSERT_OK(uvs_worker_resume(&w));
  TEST_RUN_UNTIL(&loop, ndone == 3 && atomic_load(&post_runs) == 1);
  ASSERT_OK(items[2].status);
  ASSERT_EQ(atomic_load(&nruns), 1);
  teardown();
  return 0;
}


/* UVS_FULL_BLOCK while suspended: uvs_schedule answers UV_EAGAIN, and a
 * foreign thread's uvs_schedule_wait waits (here: times out, then waits
 * until the resume makes room). */
static uvs_worker_t* bw;
static atomic_int wait_rc;
static atomic_int wait_returned;

static void block_waiter(void* arg) {
  item_t* it;
  int r;

  it = (item_t*) arg;
  r = uvs_schedule_wait(bw, &it->task, 30);
  ASSERT_ERR(r, UV_ETIMEDOUT);
  r = uvs_schedule_wait(bw, &it->task, TEST_WAIT_MS);
  /* Room came only from the resume. */
  ASSERT_EQ(atomic_load(&resumed), 1);
  atomic_store(&wait_rc, r);
  atomic_store(&wait_returned, 1);
}


TEST_IMPL(suspend_bounded_block) {
  uvs_worker_options_t o;
  uvs_worker_t w;
  uv_thread_t thread;

  /* The waiter's task is accepted from its thread, maybe once the worker
   * is idle again. */
  setup_opts(0, 1);
  memset(&o, 0, sizeof(o));
  o.max_pending = 2;
  o.on_full = UVS_FULL_BLOCK;
  ASSERT_OK(uvs_worker_init_ex(&sched, &w, UVS_POOL, &o));
  bw = &w;
  init_items(3, &w);
  ASSERT_OK(uvs_worker_suspend(&w));
  schedule_range(&w, 0, 2);
  ASSERT_ERR(uvs_schedule(&w, &items[2].task), UV_EAGAIN);
  ASSERT_OK(uv_thread_create(&thread, block_waiter, &items[2]));
  test_settle(&loop);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);
  ASSERT_EQ(atomic_load(&wait_returned), 0);
  /* Let the first wait time out (30 ms) before making room. */
  TEST_RUN_UNTIL(&loop, metrics_of(&w).rejected >= 2);
  atomic_store(&resumed, 1);
  ASSERT_OK(uvs_worker_resume(&w));
  TEST_RUN_UNTIL(&loop, ndone == 3);
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(atomic_load(&wait_rc));
  assert_ran_in_order(0, 3);
  teardown();
  return 0;
}


/* ---- delayed tasks fall due while suspended (manual clock) -------------- */

static void delayed(uvs_where_t where) {
  uvs_worker_metrics_t m;
  uvs_worker_t w;

  setup_opts(1, 0);
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  init_items(4, &w);
  ASSERT_OK(uvs_worker_suspend(&w));
  ASSERT_OK(uvs_schedule(&w, &items[0].task));
  ASSERT_OK(uvs_schedule_after(&w, &items[1].task, 10));
  ASSERT_OK(uvs_schedule_after(&w, &items[2].task, 10));
  ASSERT_OK(uvs_schedule_after(&w, &items[3].task, 100));
  /* Re-arm works while suspended. */
  ASSERT_OK(uvs_task_reschedule(&items[3].task, 20));
  m = metrics_of(&w);
  ASSERT_UINT64_EQ(m.queued, 1);
  ASSERT_UINT64_EQ(m.delayed, 3);

  ASSERT_OK(uvs_clock_advance(&sched, 10));
  test_settle(&loop);
  m = metrics_of(&w);
  ASSERT_UINT64_EQ(m.queued, 3); /* fell due onto the queue */
  ASSERT_UINT64_EQ(m.delayed, 1);
  ASSERT_EQ(atomic_load(&nruns), 0);

  ASSERT_OK(uvs_worker_resume(&w));
  TEST_RUN_UNTIL(&loop, ndone == 3);
  assert_ran_in_order(0, 3);
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  TEST_RUN_UNTIL(&loop, ndone == 4);
  assert_ran_in_order(0, 4);
  teardown();
}


TEST_IMPL(suspend_delayed_fall_due_pool) {
  delayed(UVS_POOL);
  return 0;
}


TEST_IMPL(suspend_delayed_fall_due_loop) {
  delayed(UVS_LOOP);
  return 0;
}


/* ---- a close ends the suspension --------------------------------------- */

static uint64_t suspended_in_close_cb;

static void close_reads_count(uvs_worker_t* w) {
  close_calls++;
  suspended_in_close_cb = suspended_of(w);
}


static void sched_closed(uvs_sched_t* s) {
  (void) s;
  close_calls++;
}


static void close_suspended(uvs_where_t where,
                            uvs_close_how_t how,
                            int whole_sched) {
  uvs_worker_t w;
  int i;

  setup();
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  init_items(4, &w);
  ASSERT_OK(uvs_worker_suspend(&w));
  ASSERT_OK(uvs_worker_suspend(&w));
  schedule_range(&w, 0, 4);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);

  if (whole_sched)
    ASSERT_OK(uvs_sched_close(&sched, how, sched_closed));
  else
    ASSERT_OK(uvs_worker_close(&w, how, close_reads_count));
  /* Closing: the count stays and is read; the calls are refused. */
  ASSERT_UINT64_EQ(suspended_of(&w), 2);
  ASSERT_ERR(uvs_worker_resume(&w), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_suspend(&w), UV_ESHUTDOWN);
  ASSERT_UINT64_EQ(suspended_of(&w), 2);
  if (whole_sched) {
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(close_calls, 1);
  } else {
    TEST_RUN_UNTIL(&loop, close_calls == 1);
    ASSERT_UINT64_EQ(suspended_in_close_cb, 2);
  }
  ASSERT_EQ(ndone, 4);
  if (how == UVS_DRAIN) {
    assert_ran_in_order(0, 4);
    for (i = 0; i < 4; i++) ASSERT_OK(items[i].status);
    for (i = 0; i < 4; i++) ASSERT_EQ(done_order[i], i);
  } else {
    ASSERT_EQ(atomic_load(&nruns), 0);
    for (i = 0; i < 4; i++) ASSERT_ERR(items[i].status, UV_ECANCELED);
  }
  if (whole_sched) {
    ASSERT_OK(uv_loop_close(&loop));
  } else {
    ASSERT_ERR(uvs_worker_resume(&w), UV_ESHUTDOWN);
    teardown();
  }
}


TEST_IMPL(suspend_close_drain_pool) {
  close_suspended(UVS_POOL, UVS_DRAIN, 0);
  return 0;
}


TEST_IMPL(suspend_close_drain_loop) {
  close_suspended(UVS_LOOP, UVS_DRAIN, 0);
  return 0;
}


TEST_IMPL(suspend_close_cancel_pool) {
  close_suspended(UVS_POOL, UVS_CANCEL, 0);
  return 0;
}


TEST_IMPL(suspend_close_cancel_loop) {
  close_suspended(UVS_LOOP, UVS_CANCEL, 0);
  return 0;
}


TEST_IMPL(suspend_sched_close_drain) {
  close_suspended(UVS_POOL, UVS_DRAIN, 1);
  return 0;
}


TEST_IMPL(suspend_sched_close_cancel) {
  close_suspended(UVS_LOOP, UVS_CANCEL, 1);
  return 0;
}


/* ---- wide workers ------------------------------------------------------ */

#define NKEYS 8

static atomic_int key_last[NKEYS + 1];

static void keyed_run(uvs_task_t* task) {
  item_t* it;
  int k;

  it = TEST_CONTAINER_OF(task, item_t, task);
  k = it->id % NKEYS + 1;
  /* Per key, schedule order. */
  ASSERT_LT(atomic_load(&key_last[k]), it->id + 1);
  atomic_store(&key_last[k], it->id + 1);
  item_run(task);
}


static void wide_worker(uvs_worker_t* w) {
  uvs_worker_options_t o;

  memset(&o, 0, sizeof(o));
  o.width = 4;
  ASSERT_OK(uvs_worker_init_ex(&sched, w, UVS_POOL, &o));
}


/* A suspended width-4 worker with tasks of many keys runs none of them;
 * after the resume all run, each key in order. */
TEST_IMPL(suspend_wide_runs_nothing) {
  uvs_worker_t w;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  setup();
  wide_worker(&w);
  init_items(32, &w);
  for (i = 0; i < 32; i++) {
    ASSERT_OK(uvs_task_init(&items[i].task, keyed_run, item_done));
    ASSERT_OK(uvs_task_set_key(&items[i].task, (uint64_t) (i % NKEYS + 1)));
  }
  ASSERT_OK(uvs_worker_suspend(&w));
  schedule_range(&w, 0, 32);
  test_settle(&loop);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);
  ASSERT_UINT64_EQ(metrics_of(&w).running, 0);
  ASSERT_UINT64_EQ(metrics_of(&w).queued, 32);

  ASSERT_OK(uvs_worker_resume(&w));
  TEST_RUN_UNTIL(&loop, ndone == 32);
  ASSERT_EQ(atomic_load(&nruns), 32);
  for (i = 0; i < 32; i++) ASSERT_OK(items[i].status);
  teardown();
  return 0;
}


/* On a width-4 worker whose four lanes all run gate tasks, one gate
 * suspends the worker from inside its run_cb before any other gate lets
 * go: then no queued task starts, on any lane, until the resume. */
static uvs_worker_t* wide_w;
static test_latch_t suspended_latch;

static void suspend_before_end(void* arg) {
  (void) arg;
  ASSERT_OK(uvs_worker_suspend(wide_w));
  test_latch_add(&suspended_latch, 1);
}


TEST_IMPL(suspend_wide_from_run_cb) {
  test_latch_t started;
  test_latch_t rel_a;
  test_latch_t rel_b;
  test_gate_t gates[4];
  uvs_worker_t w;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  setup();
  test_latch_init(&started);
  test_latch_init(&rel_a);
  test_latch_init(&rel_b);
  test_latch_init(&suspended_latch);
  wide_worker(&w);
  wide_w = &w;
  for (i = 0; i < 4; i++) {
    test_gate_init(&gates[i], &started, i == 0 ? &rel_a : &rel_b, 1, gate_done);
    if (i == 0)
      gates[0].before_end = suspend_before_end;
    ASSERT_OK(uvs_task_set_key(&gates[i].task, (uint64_t) (100 + i)));
    ASSERT_OK(uvs_schedule(&w, &gates[i].task));
  }
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 4);
  init_items(8, &w);
  for (i = 0; i < 8; i++) {
    ASSERT_OK(uvs_task_init(&items[i].task, keyed_run, item_done));
    ASSERT_OK(uvs_task_set_key(&items[i].task, (uint64_t) (i % NKEYS + 1)));
  }
  schedule_range(&w, 0, 8);
  test_latch_add(&rel_a, 1);
  TEST_RUN_UNTIL(&loop, test_latch_count(&suspended_latch) == 1 && ndone == 1);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0); /* gate 0's lane took nothing */
  test_latch_add(&rel_b, 1);
  TEST_RUN_UNTIL(&loop, ndone == 4);
  test_settle(&loop);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);
  ASSERT_UINT64_EQ(suspended_of(&w), 1);
  ASSERT_UINT64_EQ(metrics_of(&w).queued, 8);

  ASSERT_OK(uvs_worker_resume(&w));
  TEST_RUN_UNTIL(&loop, ndone == 12);
  ASSERT_EQ(atomic_load(&nruns), 8);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&rel_a);
  test_latch_destroy(&rel_b);
  test_latch_destroy(&suspended_latch);
  return 0;
}


/* A suspended worker whose queued tasks are all cancelled holds nothing
 * pending: uv_run returns, as it would for an idle worker. An unref'd
 * timer fails the test if the loop is still held after 2 s. */
static void held_too_long(uv_timer_t* handle) {
  (void) handle;
  ASSERT(0 &&
         "uv_run did not return: a suspended worker with nothing "
         "queued held the loop");
}


static void cancelled_let_loop_end(unsigned width) {
  uvs_worker_options_t o;
  uv_timer_t timer;
  uvs_worker_t w;
  int i;

  setup();
  memset(&o, 0, sizeof(o));
  o.width = width;
  ASSERT_OK(uvs_worker_init_ex(&sched, &w, UVS_POOL, &o));
  init_items(3, &w);
  ASSERT_OK(uvs_worker_suspend(&w));
  schedule_range(&w, 0, 3);
  (void) uv_run(&loop, UV_RUN_NOWAIT); /* lanes or a drain come and park */
  ASSERT_EQ(atomic_load(&nruns), 0);
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_task_cancel(&items[i].task));
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, held_too_long, 2000, 0));
  uv_unref((uv_handle_t*) &timer);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 3);
  for (i = 0; i < 3; i++) ASSERT_ERR(items[i].status, UV_ECANCELED);
  ASSERT_EQ(atomic_load(&nruns), 0);
  ASSERT_OK(uv_timer_stop(&timer));
  uv_close((uv_handle_t*) &timer, NULL);
  ASSERT_OK(uvs_worker_resume(&w));
  teardown();
}


TEST_IMPL(suspend_cancelled_let_loop_end) {
  cancelled_let_loop_end(1);
  return 0;
}


TEST_IMPL(suspend_cancelled_let_loop_end_wide) {
  cancelled_let_loop_end(4);
  return 0;
}
