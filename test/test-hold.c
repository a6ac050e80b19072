/* Guarantee 7 as amended in SPEC.md's "0.5": a turn's end hands no thread
 * over. When a worker's turn ends with work left, it rejoins the tail of
 * the ready workers and the same drain, on the same thread, takes the next
 * ready worker that the caps allow (another worker's turn, or the same
 * worker's next when none other is ready). A drain gives its pool thread
 * back only when no ready worker is left for it (after linger_us, if set)
 * or at the end of the first turn that ends once it has held the thread
 * for hold_us (0 = 10 ms), so that other users of libuv's pool wait at
 * most about hold_us plus a turn. Lanes of a wide worker the same, key
 * after key. Groups' caps hold.
 *
 * And the start latency: a schedule on the loop thread, once the loop has
 * run the scheduler, may post its drain inside the call (nothing runs in
 * the call: guarantee 9), one thread wake per callback however many tasks
 * it schedules. Before uv_run first runs nothing starts.
 *
 * Counts of drains (uvs_stats_t.drains) and threads (uv_thread_self in
 * run_cb) show what the drains did; times are bounded generously and only
 * where a thread must come. */

#include "helpers.h"

#include <stdatomic.h>

#define NW 4
#define NT 64

typedef struct {
  uvs_task_t task;
  int w;  /* its worker */
  int id; /* its index on its worker */
  uv_thread_t thread;
  uint64_t t_start;
  int status;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t workers[NW];
static item_t items[NW][NT];
static uv_thread_t loop_thread;
static int ndone;
static unsigned spin_us;   /* each run_cb's length */
static int order[NW * NT]; /* w * 100 + id, in run order */
static atomic_int norder;
static atomic_int running[2]; /* run_cbs executing, per group */
static atomic_int running_max[2];
static void (*after_run)(item_t* it);


static void note_max(atomic_int* max, int n) {
  int m;

  m = atomic_load(max);
  while (n > m && !atomic_compare_exchange_weak(max, &m, n)) {
  }
}


static void item_run(uvs_task_t* task) {
  item_t* it;
  int g;
  int n;

  it = TEST_CONTAINER_OF(task, item_t, task);
  it->thread = uv_thread_self();
  it->t_start = test_hrtime();
  n = atomic_fetch_add(&norder, 1);
  ASSERT_LT(n, NW * NT);
  order[n] = it->w * 100 + it->id;
  g = it->w % 2;
  note_max(&running_max[g], atomic_fetch_add(&running[g], 1) + 1);
  if (spin_us != 0)
    test_spin_us(spin_us);
  atomic_fetch_sub(&running[g], 1);
  if (after_run != NULL)
    after_run(it);
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  ASSERT_OK(status);
  ndone++;
}


static void setup_ex(uvs_sched_options_t* o) {
  int w;
  int i;

  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, o));
  for (w = 0; w < NW; w++)
    for (i = 0; i < NT; i++) {
      memset(&items[w][i], 0, sizeof(items[w][i]));
      items[w][i].w = w;
      items[w][i].id = i;
      items[w][i].status = 1;
      ASSERT_OK(uvs_task_init(&items[w][i].task, item_run, item_done));
    }
  ndone = 0;
  atomic_store(&norder, 0);
}


static void setup(unsigned cap, unsigned budget, unsigned hold_us) {
  uvs_sched_options_t o;
  int w;

  memset(&o, 0, sizeof(o));
  o.max_concurrency = cap;
  o.budget = budget;
  o.hold_us = hold_us;
  setup_ex(&o);
  for (w = 0; w < NW; w++)
    ASSERT_OK(uvs_worker_init(&sched, &workers[w], UVS_POOL));
}


static void teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


static uint64_t drains(void) {
  uvs_stats_t st;

  uvs_sched_stats(&sched, &st);
  return st.drains;
}


/* Every run of the first n of worker w's tasks happened on thread th. */
static void assert_thread(int w, int n, uv_thread_t th) {
  int i;

  for (i = 0; i < n; i++) ASSERT(uv_thread_equal(&items[w][i].thread, &th));
}


/* ---- one drain, turn after turn, on one thread ------------------------ */

/* Three workers with 6 tasks each, budget 2, one drain allowed, a hold
 * longer than it all: their turns alternate (A A B B C C A A ...), on one
 * drain and one thread. */
TEST_IMPL(hold_turns_same_thread) {
  uv_thread_t th;
  int w;
  int i;

  setup(1, 2, 10000000);
  for (i = 0; i < 6; i++)
    for (w = 0; w < 3; w++)
      ASSERT_OK(uvs_schedule(&workers[w], &items[w][i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 18);
  for (i = 0; i < 18; i++)
    ASSERT_EQ(order[i], (i / 2) % 3 * 100 + (i / 6) * 2 + i % 2);
  th = items[0][0].thread;
  for (w = 0; w < 3; w++) assert_thread(w, 6, th);
  ASSERT_UINT64_EQ(drains(), 1);
  teardown();
  return 0;
}


/* Nothing else ready: the same worker's next turn, on the same drain and
 * thread. With a budget of 2 (20 turns), and with the default ~1 ms slice
 * and tasks of 300 us (several turns); no cap. */
static void same_worker(unsigned budget, unsigned us) {
  setup(0, budget, 10000000);
  spin_us = us;
  for (int i = 0; i < 40; i++)
    ASSERT_OK(uvs_schedule(&workers[0], &items[0][i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 40);
  for (int i = 0; i < 40; i++) ASSERT_EQ(order[i], i);
  assert_thread(0, 40, items[0][0].thread);
  ASSERT_UINT64_EQ(drains(), 1);
  teardown();
}


TEST_IMPL(hold_same_worker_budget) {
  same_worker(2, 0);
  return 0;
}


TEST_IMPL(hold_same_worker_slice) {
  same_worker(0, 300);
  return 0;
}


/* The hold ends a drain: with hold_us 1000 and tasks of 300 us (40 of
 * them, 12 ms), a drain gives its thread back at the end of the first
 * turn that ends once it has held it 1 ms, and another is posted: several
 * drains, never more than turns. */
TEST_IMPL(hold_gives_thread_back) {
  uint64_t n;

  setup(0, 0, 1000);
  spin_us = 300;
  for (int i = 0; i < 40; i++)
    ASSERT_OK(uvs_schedule(&workers[0], &items[0][i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 40);
  for (int i = 0; i < 40; i++) ASSERT_EQ(order[i], i);
  n = drains();
  ASSERT_UINT64_GE(n, 4);
  ASSERT_UINT64_LE(n, 40);
  teardown();
  return 0;
}


/* ---- other users of the pool ------------------------------------------ */

/* A task that schedules itself again from its run_cb, 100 us a run, until
 * told to stop (or 5 s pass): work that never runs out. */
static atomic_int endless_stop;
static atomic_long endless_runs;
static uint64_t endless_end;

static void endless_run(uvs_task_t* task) {
  test_spin_us(100);
  atomic_fetch_add(&endless_runs, 1);
  if (!atomic_load(&endless_stop) && test_hrtime_ms() < endless_end)
    ASSERT_OK(uvs_schedule(task->data, task));
}


static void endless_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  ndone++;
}


/* A pool held by drains that always have work: a plain uv_queue_work
 * queued 20 ms in starts within about hold_us plus a turn (bound: 100 ms,
 * where without the hold it would wait 5 s). */
static uv_work_t plain;
static uint64_t plain_queued;
static uint64_t plain_started;
static int plain_after;

static void plain_work(uv_work_t* req) {
  (void) req;
  plain_started = test_hrtime();
}


static void plain_after_work(uv_work_t* req, int status) {
  (void) req;
  ASSERT_OK(status);
  plain_after++;
  atomic_store(&endless_stop, 1);
}


static void queue_plain(uv_timer_t* timer) {
  plain_queued = test_hrtime();
  ASSERT_OK(uv_queue_work(&loop, &plain, plain_work, plain_after_work));
  uv_close((uv_handle_t*) timer, NULL);
}


/* nendless tasks on as many workers, on a pool of pool threads. */
static void other_users(const char* pool,
                        unsigned cap,
                        unsigned hold_us,
                        int nendless) {
  uvs_task_t endless[NW];
  uv_timer_t timer;
  uint64_t n;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", pool, 1));
  setup(cap, 0, hold_us);
  endless_end = test_hrtime_ms() + 5000;
  for (i = 0; i < nendless; i++) {
    ASSERT_OK(uvs_task_init(&endless[i], endless_run, endless_done));
    endless[i].data = &workers[i];
    ASSERT_OK(uvs_schedule(&workers[i], &endless[i]));
  }
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, queue_plain, 20, 0));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(plain_after, 1);
  ASSERT_EQ(ndone, nendless);
  ASSERT_UINT64_GE(plain_started, plain_queued);
  ASSERT_UINT64_LT(plain_started - plain_queued, 100000000u);
  /* The drains ran turn after turn meanwhile. */
  n = drains();
  ASSERT_UINT64_GE(n, 1);
  ASSERT_UINT64_LT(n, (uint64_t) atomic_load(&endless_runs));
  teardown();
}


TEST_IMPL(hold_other_users_wait_hold) {
  other_users("1", 0, 2000, 1);
  return 0;
}


TEST_IMPL(hold_other_users_default_hold) {
  other_users("2", 0, 0, 2);
  return 0;
}


/* max_concurrency below the pool size: a thread stays free for them, even
 * with a hold longer than the test. */
TEST_IMPL(hold_other_users_cap_below_pool) {
  other_users("2", 1, 10000000, 2);
  return 0;
}


/* The default hold is 10 ms, neither none nor endless: with 2 ms tasks for
 * 100 ms, a drain runs a few (not one, not all) before it gives the thread
 * back: about 10 drains, where no hold would take 50 and an endless one 1
 * (bounds: 3 to 40). */
TEST_IMPL(hold_default_10ms) {
  uint64_t n;
  int i;

  setup(0, 0, 0);
  spin_us = 2000;
  for (i = 0; i < 50; i++)
    ASSERT_OK(uvs_schedule(&workers[0], &items[0][i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 50);
  n = drains();
  ASSERT_UINT64_GE(n, 3);
  ASSERT_UINT64_LE(n, 40);
  teardown();
  return 0;
}


/* ---- lanes, groups, linger --------------------------------------------- */

/* A wide worker's lane, alone (max_concurrency 1), budget 2: key after
 * key on one drain and one thread, each key's tasks in order, no key more
 * than a turn (2) at a time while others wait. */
TEST_IMPL(hold_lane_key_after_key) {
  uvs_sched_options_t o;
  uvs_worker_options_t wo;
  uvs_worker_t wide;
  int last[3];
  int run;
  int k;
  int i;

  memset(&o, 0, sizeof(o));
  o.max_concurrency = 1;
  o.budget = 2;
  o.hold_us = 10000000;
  setup_ex(&o);
  memset(&wo, 0, sizeof(wo));
  wo.width = 2;
  ASSERT_OK(uvs_worker_init_ex(&sched, &wide, UVS_POOL, &wo));
  for (i = 0; i < 8; i++)
    for (k = 0; k < 3; k++) {
      ASSERT_OK(uvs_task_set_key(&items[k][i].task, (uint64_t) k + 1));
      ASSERT_OK(uvs_schedule(&wide, &items[k][i].task));
    }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 24);
  for (k = 0; k < 3; k++) {
    last[k] = -1;
    assert_thread(k, 8, items[0][0].thread);
  }
  run = 1;
  for (i = 0; i < 24; i++) {
    k = order[i] / 100;
    ASSERT_EQ(order[i] % 100, last[k] + 1);
    last[k]++;
    if (i > 0 && order[i - 1] / 100 == k)
      run++;
    else
      run = 1;
    if (last[0] < 7 || last[1] < 7 || last[2] < 7)
      ASSERT_LE(run, 2);
  }
  ASSERT_UINT64_EQ(drains(), 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Groups' caps hold while drains go on from worker to worker: groups 0
 * and 1 capped at 1 and 2, under a scheduler cap of 3 on a pool of 4;
 * workers 0 and 2 in group 0, 1 and 3 in group 1; budget 1, so that every
 * task ends a turn and the drains keep moving. */
TEST_IMPL(hold_group_caps) {
  uvs_sched_options_t o;
  uvs_group_options_t g[2];
  uvs_worker_options_t wo;
  int w;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  memset(&o, 0, sizeof(o));
  memset(g, 0, sizeof(g));
  g[0].max_concurrency = 1;
  g[1].max_concurrency = 2;
  o.ngroups = 2;
  o.groups = g;
  o.max_concurrency = 3;
  o.budget = 1;
  setup_ex(&o);
  spin_us = 100;
  for (w = 0; w < NW; w++) {
    memset(&wo, 0, sizeof(wo));
    wo.group = (unsigned) (w % 2);
    ASSERT_OK(uvs_worker_init_ex(&sched, &workers[w], UVS_POOL, &wo));
  }
  for (i = 0; i < 40; i++)
    for (w = 0; w < NW; w++)
      ASSERT_OK(uvs_schedule(&workers[w], &items[w][i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 160);
  ASSERT_LE(atomic_load(&running_max[0]), 1);
  ASSERT_LE(atomic_load(&running_max[1]), 2);
  teardown();
  return 0;
}


/* linger_us still applies when nothing is ready: the drain that ran the
 * first task waits for more, and runs the second, scheduled from the
 * first's done_cb, on the same thread: one drain. */
static void linger_next(uvs_task_t* task, int status) {
  item_done(task, status);
  if (ndone == 1)
    ASSERT_OK(uvs_schedule(&workers[0], &items[0][1].task));
  else
    ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


TEST_IMPL(hold_linger_when_idle) {
  uvs_sched_options_t o;

  memset(&o, 0, sizeof(o));
  o.linger_us = 2000000;
  o.keep_alive = 1;
  setup_ex(&o);
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_task_init(&items[0][0].task, item_run, linger_next));
  ASSERT_OK(uvs_task_init(&items[0][1].task, item_run, linger_next));
  ASSERT_OK(uvs_schedule(&workers[0], &items[0][0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 2);
  ASSERT(uv_thread_equal(&items[0][0].thread, &items[0][1].thread));
  ASSERT_UINT64_EQ(drains(), 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* ---- start latency ------------------------------------------------------ */

/* Inside a callback on the loop thread, once the loop has run: a schedule
 * onto a pool worker lets a pool thread start the task before the callback
 * returns (the callback waits for it: with the drain posted after the
 * callback, it would wait in vain). Nothing ran inside the call, on the
 * calling thread. A callback that schedules many tasks wakes one thread:
 * while it goes on (20 ms here) no second drain is posted; the rest start
 * once it has returned. */
static test_latch_t started;

static void signal_start(item_t* it) {
  (void) it;
  test_latch_add(&started, 1);
}


static void schedule_and_wait(int nw) {
  uvs_task_t* current;
  uint64_t d0;
  int base;
  int w;

  ASSERT(test_on_thread(loop_thread));
  current = uvs_current_task();
  d0 = drains();
  base = test_latch_count(&started);
  for (w = 0; w < nw; w++) {
    ASSERT_OK(uvs_schedule(&workers[w % NW], &items[w % NW][w / NW].task));
    ASSERT_PTR_EQ(uvs_current_task(), current);
  }
  ASSERT(test_latch_wait(&started, base + 1, TEST_WAIT_MS));
  uv_sleep(20);
  ASSERT_UINT64_EQ(drains(), d0 + 1);
}


static void from_timer(uv_timer_t* timer) {
  schedule_and_wait((int) (intptr_t) timer->data);
  uv_close((uv_handle_t*) timer, NULL);
}


static void start_in_timer(int n) {
  uv_timer_t timer;
  int i;

  test_latch_init(&started);
  setup(0, 0, 0);
  after_run = signal_start;
  ASSERT_OK(uv_timer_init(&loop, &timer));
  timer.data = (void*) (intptr_t) n;
  ASSERT_OK(uv_timer_start(&timer, from_timer, 10, 0));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, n);
  ASSERT_EQ(test_latch_count(&started), n);
  for (i = 0; i < n; i++) ASSERT(!test_on_thread(items[i % NW][i / NW].thread));
  /* The first one scheduled started first, in the callback. */
  ASSERT_EQ(order[0], 0);
  teardown();
  test_latch_destroy(&started);
}


TEST_IMPL(start_inside_callback) {
  start_in_timer(1);
  return 0;
}


/* 32 tasks on 4 workers from one callback. */
TEST_IMPL(start_one_wake_per_callback) {
  start_in_timer(32);
  return 0;
}


/* From a done_cb and from a loop worker's run_cb: callbacks on the loop
 * thread too. */
static int waits_done;

static void wait_in_done(uvs_task_t* task, int status) {
  item_done(task, status);
  if (ndone == 1) {
    schedule_and_wait(1);
    waits_done++;
  }
}


static void wait_in_loop_run(uvs_task_t* task) {
  (void) task;
  schedule_and_wait(1);
  waits_done++;
}


TEST_IMPL(start_inside_done_and_loop_task) {
  uvs_worker_t lw;
  uvs_task_t lt;
  item_t first;

  test_latch_init(&started);
  setup(0, 0, 0);
  after_run = signal_start;
  ASSERT_OK(uvs_worker_init(&sched, &lw, UVS_LOOP));
  /* A loop task's done_cb schedules and waits. */
  memset(&first, 0, sizeof(first));
  first.w = 3;
  first.id = 99;
  ASSERT_OK(uvs_task_init(&first.task, item_run, wait_in_done));
  ASSERT_OK(uvs_schedule(&lw, &first.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(waits_done, 1);
  ASSERT_EQ(ndone, 2);
  /* A loop task's run_cb schedules and waits. */
  ASSERT_OK(uvs_task_init(&lt, wait_in_loop_run, endless_done));
  ASSERT_OK(uvs_schedule(&lw, &lt));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(waits_done, 2);
  ASSERT_EQ(ndone, 4);
  teardown();
  test_latch_destroy(&started);
  return 0;
}


/* Before uv_run first runs, nothing starts: tasks scheduled on the loop
 * thread wait (no drain posted) until the loop runs. */
TEST_IMPL(start_not_before_uv_run) {
  int w;

  setup(0, 0, 0);
  for (w = 0; w < NW; w++)
    ASSERT_OK(uvs_schedule(&workers[w], &items[w][0].task));
  uv_sleep(20);
  ASSERT_EQ(atomic_load(&norder), 0);
  ASSERT_UINT64_EQ(drains(), 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, NW);
  teardown();
  return 0;
}


/* Guarantee 9 from a callback: a loop worker's task scheduled there has
 * not run when the call returns; it runs later, on the loop thread. */
static int loop_ran;

static void loop_task_run(uvs_task_t* task) {
  (void) task;
  ASSERT(test_on_thread(loop_thread));
  loop_ran++;
}


static uvs_worker_t lworker;
static uvs_task_t ltask;

static void schedule_loop_task(uv_timer_t* timer) {
  ASSERT_OK(uvs_schedule(&lworker, &ltask));
  ASSERT_EQ(loop_ran, 0);
  ASSERT_OK(uvs_schedule(&workers[0], &items[0][0].task));
  ASSERT_EQ(loop_ran, 0);
  uv_close((uv_handle_t*) timer, NULL);
}


TEST_IMPL(start_nothing_runs_in_call) {
  uv_timer_t timer;

  setup(0, 0, 0);
  ASSERT_OK(uvs_worker_init(&sched, &lworker, UVS_LOOP));
  ASSERT_OK(uvs_task_init(&ltask, loop_task_run, endless_done));
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, schedule_loop_task, 10, 0));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(loop_ran, 1);
  ASSERT_EQ(ndone, 2);
  ASSERT(!test_on_thread(items[0][0].thread));
  teardown();
  return 0;
}
