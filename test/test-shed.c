/* Stale-work shedding (SPEC.md, "0.3 additions"): with max_wait_ms = t, a
 * task that became ready (accepted onto the queue, or moved onto it by the
 * timer when due) more than t ms before a drain or loop turn would start it
 * is handed back with UV_ETIMEDOUT instead of run; a periodic task skips
 * that grid point; a post is dropped without its fn being called. Each
 * counts once in the worker's `expired` and in the scheduler's `cancelled`
 * (guarantee 10's identity holds). Done-less tasks of the user are never
 * shed. max_wait_ms = 0 sheds nothing.
 *
 * A gate holds the worker for more than twice t while tasks wait behind
 * it (a slow run, on purpose: the waiting is what is tested); tasks that
 * arrive just before it lets go wait far less than t and must run. t is
 * 200 ms, so a slow machine has that much slack for them. */

#include "helpers.h"

#include <stdatomic.h>

#define MAXN 64
#define T_MS 200
#define HOLD_MS 450 /* > 2 t */

typedef struct {
  uvs_task_t task;
  int id;
  int status;
  int done_calls;
  atomic_int runs;
  uint64_t now_at_run;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_thread_t loop_thread;
static item_t stale[MAXN];
static item_t fresh[MAXN];
static int nstale;
static int nfresh;
static int ndone;
static atomic_int stale_post_runs;
static atomic_int fresh_post_runs;
static atomic_int doneless_runs;
static int fresh_posts;
static int fresh_keys; /* give the fresh tasks keys 1..4 */
static uint64_t t0;


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
  ASSERT_EQ(it->done_calls, 1);
  if (status == UV_ETIMEDOUT)
    ASSERT_EQ(atomic_load(&it->runs), 0);
  ndone++;
}


static void doneless_run(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&doneless_runs, 1);
}


static void stale_post_fn(void* arg) {
  (void) arg;
  atomic_fetch_add(&stale_post_runs, 1);
}


static void fresh_post_fn(void* arg) {
  (void) arg;
  atomic_fetch_add(&fresh_post_runs, 1);
}


static void init_item(item_t* it, int id) {
  memset(it, 0, sizeof(*it));
  it->id = id;
  ASSERT_OK(uvs_task_init(&it->task, item_run, item_done));
}


static void setup(uvs_where_t where,
                  unsigned width,
                  uint64_t max_wait_ms,
                  int manual) {
  uvs_sched_options_t so;
  uvs_worker_options_t o;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "6", 1));
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  memset(&so, 0, sizeof(so));
  so.manual_clock = manual;
  ASSERT_OK(uvs_sched_init(&loop, &sched, &so));
  memset(&o, 0, sizeof(o));
  o.width = width;
  o.max_wait_ms = max_wait_ms;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, where, &o));
  t0 = uvs_now(&sched);
}


static void metrics(uvs_worker_metrics_t* m) {
  ASSERT_OK(uvs_worker_metrics(&worker, m));
}


static uint64_t expired_now(void) {
  uvs_worker_metrics_t m;

  metrics(&m);
  return m.expired;
}


/* Schedules the fresh tasks and posts: called just before a gate lets go,
 * from its run_cb or from the test. */
static void schedule_fresh(void* arg) {
  int i;

  (void) arg;
  for (i = 0; i < nfresh; i++) {
    if (fresh_keys)
      ASSERT_OK(uvs_task_set_key(&fresh[i].task, (uint64_t) (i % 4) + 1));
    ASSERT_OK(uvs_schedule(&worker, &fresh[i].task));
  }
  for (i = 0; i < fresh_posts; i++)
    ASSERT_OK(uvs_post(&worker, fresh_post_fn, NULL));
}


/* A gate that holds its worker for HOLD_MS, then schedules the fresh
 * work. */
static int slow_gate_done_calls;

static void slow_gate_run(uvs_task_t* task) {
  (void) task;
  uv_sleep(HOLD_MS);
  schedule_fresh(NULL);
}


static void slow_gate_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  slow_gate_done_calls++;
}


/* ---- one-shot tasks and posts ------------------------------------------ */

/* Behind a gate that holds the worker for more than 2 t: 5 tasks and 3
 * posts go stale and are shed; a done-less task of the user runs anyway;
 * the 4 tasks and 2 posts that arrive as the gate lets go run. */
static void stale_shed(uvs_where_t where, uint64_t max_wait_ms) {
  uvs_worker_metrics_t m;
  uvs_stats_t st;
  uvs_task_t gate;
  uvs_task_t doneless;
  int shed;
  int i;

  setup(where, 0, max_wait_ms, 0);
  nstale = 5;
  nfresh = 4;
  fresh_posts = 2;
  for (i = 0; i < nstale; i++) init_item(&stale[i], i);
  for (i = 0; i < nfresh; i++) init_item(&fresh[i], 100 + i);
  ASSERT_OK(uvs_task_init(&gate, slow_gate_run, slow_gate_done));
  ASSERT_OK(uvs_task_init(&doneless, doneless_run, NULL));
  ASSERT_OK(uvs_schedule(&worker, &gate));
  for (i = 0; i < nstale; i++) ASSERT_OK(uvs_schedule(&worker, &stale[i].task));
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_post(&worker, stale_post_fn, NULL));
  ASSERT_OK(uvs_schedule(&worker, &doneless));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));

  ASSERT_EQ(slow_gate_done_calls, 1);
  ASSERT_EQ(ndone, nstale + nfresh);
  ASSERT_EQ(atomic_load(&doneless_runs), 1);
  for (i = 0; i < nfresh; i++) {
    ASSERT_OK(fresh[i].status);
    ASSERT_EQ(atomic_load(&fresh[i].runs), 1);
  }
  ASSERT_EQ(atomic_load(&fresh_post_runs), fresh_posts);
  shed = max_wait_ms != 0 ? nstale + 3 : 0;
  for (i = 0; i < nstale; i++) {
    if (max_wait_ms != 0) {
      ASSERT_ERR(stale[i].status, UV_ETIMEDOUT);
      ASSERT_EQ(atomic_load(&stale[i].runs), 0);
    } else {
      ASSERT_OK(stale[i].status);
      ASSERT_EQ(atomic_load(&stale[i].runs), 1);
    }
  }
  ASSERT_EQ(atomic_load(&stale_post_runs), max_wait_ms != 0 ? 0 : 3);
  metrics(&m);
  ASSERT_UINT64_EQ(m.expired, shed);
  ASSERT_UINT64_EQ(m.dropped, 0);
  ASSERT_UINT64_EQ(m.ran, 1 + 1 + nfresh + fresh_posts + (nstale + 3 - shed));
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.cancelled, shed);
  ASSERT_UINT64_EQ(st.pending, 0);
  ASSERT_UINT64_EQ(st.scheduled, st.ran + st.cancelled + st.pending);
  ASSERT_UINT64_EQ(st.scheduled, 1 + nstale + 3 + 1 + nfresh + fresh_posts);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(shed_stale_loop) {
  stale_shed(UVS_LOOP, T_MS);
  return 0;
}


TEST_IMPL(shed_stale_pool) {
  stale_shed(UVS_POOL, T_MS);
  return 0;
}


TEST_IMPL(shed_zero_never_loop) {
  stale_shed(UVS_LOOP, 0);
  return 0;
}


TEST_IMPL(shed_zero_never_pool) {
  stale_shed(UVS_POOL, 0);
  return 0;
}


/* ---- a width-4 worker ---------------------------------------------------- */

/* Four gates hold every lane for more than 2 t; behind them, two stale
 * tasks of each of 4 keys, 4 keyless ones and 3 posts are shed; a shed task
 * lets its key's next one go (shed in its turn), and the fresh tasks of
 * the same keys, scheduled as the gates let go, run. */
#define W 4

TEST_IMPL(shed_stale_width4) {
  static test_latch_t started;
  static test_latch_t release;
  static test_gate_t gates[W];
  uvs_worker_metrics_t m;
  uvs_stats_t st;
  int i;

  setup(UVS_POOL, W, T_MS, 0);
  test_latch_init(&started);
  test_latch_init(&release);
  nstale = 12;
  nfresh = 8;
  fresh_posts = 2;
  fresh_keys = 1;
  for (i = 0; i < W; i++) {
    test_gate_init(&gates[i], &started, &release, 1, slow_gate_done);
    ASSERT_OK(uvs_schedule(&worker, &gates[i].task));
  }
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == W);
  for (i = 0; i < nstale; i++) {
    init_item(&stale[i], i);
    if (i < 8)
      ASSERT_OK(uvs_task_set_key(&stale[i].task, (uint64_t) (i % 4) + 1));
    ASSERT_OK(uvs_schedule(&worker, &stale[i].task));
  }
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_post(&worker, stale_post_fn, NULL));
  for (i = 0; i < nfresh; i++) init_item(&fresh[i], 100 + i);
  uv_sleep(HOLD_MS);
  schedule_fresh(NULL);
  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));

  ASSERT_EQ(slow_gate_done_calls, W);
  ASSERT_EQ(ndone, nstale + nfresh);
  for (i = 0; i < nstale; i++) {
    ASSERT_ERR(stale[i].status, UV_ETIMEDOUT);
    ASSERT_EQ(atomic_load(&stale[i].runs), 0);
  }
  for (i = 0; i < nfresh; i++) {
    ASSERT_OK(fresh[i].status);
    ASSERT_EQ(atomic_load(&fresh[i].runs), 1);
  }
  ASSERT_EQ(atomic_load(&stale_post_runs), 0);
  ASSERT_EQ(atomic_load(&fresh_post_runs), fresh_posts);
  metrics(&m);
  ASSERT_UINT64_EQ(m.expired, nstale + 3);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.cancelled, nstale + 3);
  ASSERT_UINT64_EQ(st.scheduled, st.ran + st.cancelled + st.pending);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* ---- delayed and periodic tasks (manual clock) ------------------------- */

/* A delayed task is ready from the moment it falls due, not from its
 * schedule call: accepted long before, it falls due just before the gate
 * lets go and runs; a task queued behind the gate all along is shed. */
TEST_IMPL(shed_delayed_ready_when_due) {
  static test_latch_t started;
  static test_latch_t release;
  static test_gate_t gate;
  uvs_worker_metrics_t m;

  setup(UVS_POOL, 0, T_MS, 1);
  test_latch_init(&started);
  test_latch_init(&release);
  test_gate_init(&gate, &started, &release, 1, slow_gate_done);
  init_item(&stale[0], 0);
  init_item(&fresh[0], 100);
  ASSERT_OK(uvs_schedule_after(&worker, &fresh[0].task, 10));
  ASSERT_OK(uvs_schedule(&worker, &gate.task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  ASSERT_OK(uvs_schedule(&worker, &stale[0].task));
  uv_sleep(HOLD_MS);
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == 2);
  ASSERT_ERR(stale[0].status, UV_ETIMEDOUT);
  ASSERT_OK(fresh[0].status);
  ASSERT_EQ(atomic_load(&fresh[0].runs), 1);
  ASSERT_UINT64_EQ(fresh[0].now_at_run, t0 + 10);
  metrics(&m);
  ASSERT_UINT64_EQ(m.expired, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* A periodic task that falls due behind the gate and goes stale skips that
 * grid point: not run, not handed back, counted in expired; it runs at its
 * next grid point and stays on its grid. */
static void periodic_skips(uvs_where_t where) {
  uvs_task_t gate;
  item_t* p;

  setup(where, 0, T_MS, 1);
  p = &stale[0];
  init_item(p, 0);
  ASSERT_OK(uvs_task_init(&gate, slow_gate_run, slow_gate_done));
  ASSERT_OK(uvs_schedule_every(&worker, &p->task, 10, 10));
  ASSERT_OK(uvs_schedule(&worker, &gate));
  /* Due at t0 + 10, queued behind the gate, which holds the worker (and on
   * a loop worker the loop) for HOLD_MS once the loop runs. */
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  TEST_RUN_UNTIL(&loop, expired_now() == 1);
  test_settle(&loop);
  ASSERT_EQ(slow_gate_done_calls, 1);
  ASSERT_EQ(atomic_load(&p->runs), 0);
  ASSERT_EQ(p->done_calls, 0);
  ASSERT_EQ(ndone, 0);
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
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ASSERT_EQ(p->done_calls, 1);
  ASSERT_ERR(p->status, UV_ECANCELED);
}


TEST_IMPL(shed_periodic_skips_loop) {
  periodic_skips(UVS_LOOP);
  return 0;
}


TEST_IMPL(shed_periodic_skips_pool) {
  periodic_skips(UVS_POOL);
  return 0;
}
