/* A loop kept busy handing tasks back still does everything it is told
 * meanwhile, from its own callbacks and from other threads. Issue 43.
 *
 * The loop is kept busy by a chain of cancels: each done_cb of a delayed
 * task that was cancelled schedules that task again (never due) and
 * cancels the next one, whose hand-back (guarantee 5: within one loop
 * iteration) calls the next done_cb, and so on. However many times the
 * loop's callbacks look again for what was handed to them while they
 * worked, there is always more, so each of them runs out of looks with
 * something still owed; that must be left for the next look, not
 * dropped.
 *
 * busy_loop_cancels_handed_back checks the chain itself: each cancel is
 * handed back within BZ_TICKS loop iterations (counted by a prepare
 * handle; one is what SPEC says, the rest is slack). A timer looks every
 * BZ_WATCH_MS, so that a hand-back that never comes fails the test within
 * a few iterations instead of leaving the loop asleep in its poll.
 * busy_loop_foreign_work_runs adds a foreign thread that, while the chain
 * runs, schedules one task at a time onto a loop worker and a pool worker
 * and waits for each to run and come back within BZ_WITHIN_MS. */

#include "helpers.h"

#include <stdatomic.h>

#define BZ_CHAIN 16
#define BZ_NEVER_MS 600000 /* the chain's delayed tasks never fall due */
#define BZ_LINKS 4000      /* hand-backs busy_loop_cancels_handed_back runs */
#define BZ_TICKS 2
#define BZ_WATCH_MS 20
#define BZ_TRIPS 1000 /* the foreign thread's tasks, at most */
#define BZ_TRIPS_MS 1000
#define BZ_WITHIN_MS 5000

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t holder; /* holds the chain's delayed tasks */
static uvs_task_t chain[BZ_CHAIN];
static uint64_t cancel_tick[BZ_CHAIN]; /* the loop iteration of its cancel */
static int owed;  /* the chain's task whose cancel is out */
static int links; /* the chain's hand-backs so far */
static int stopping;
static uv_prepare_t ticker;
static uint64_t ticks; /* loop iterations */
static uv_timer_t watch;


static void ticker_cb(uv_prepare_t* handle) {
  (void) handle;
  ticks++;
}


static void chain_cancel(int i) {
  owed = i;
  cancel_tick[i] = ticks;
  ASSERT_OK(uvs_task_cancel(&chain[i]));
}


static void chain_late(int i, const char* where) {
  test_failed(__FILE__, __LINE__,
              "%s: the cancel of delayed task %d, made from a done_cb while "
              "the loop was busy handing back, is not handed back %" PRIu64
              " loop iterations later (%d hand-backs so far; guarantee 5: "
              "within one): what was owed when the loop ran out of looks was "
              "dropped",
              where, i, ticks - cancel_tick[i], links);
}


static void chain_done(uvs_task_t* task, int status) {
  int i;

  ASSERT_ERR(status, UV_ECANCELED);
  i = (int) (task - chain);
  links++;
  if (stopping)
    return; /* the close hands back the rest */
  ASSERT_EQ(i, owed);
  if (ticks - cancel_tick[i] > BZ_TICKS)
    chain_late(i, "done_cb");
  ASSERT_OK(uvs_schedule_after(&holder, task, BZ_NEVER_MS));
  chain_cancel((i + 1) % BZ_CHAIN);
}


static void chain_stop(void) {
  stopping = 1;
  uv_close((uv_handle_t*) &ticker, NULL);
  uv_close((uv_handle_t*) &watch, NULL);
}


static void watch_cb(uv_timer_t* handle) {
  (void) handle;
  if (!stopping && ticks - cancel_tick[owed] > BZ_TICKS)
    chain_late(owed, "watch");
}


/* The chain's tasks are scheduled, and the first cancel made before the
 * loop runs; stop_at stops the chain at that many hand-backs (0: never,
 * the test stops it). */
static int stop_at;

static void chain_check(uvs_task_t* task, int status) {
  chain_done(task, status);
  if (!stopping && stop_at != 0 && links >= stop_at) {
    chain_stop();
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
  }
}


static void dummy_run(uvs_task_t* task) {
  (void) task;
  ASSERT(0 && "the chain's tasks never fall due");
}


static void chain_start(int stop) {
  uvs_sched_options_t o;
  int i;

  memset(&o, 0, sizeof(o));
  stop_at = stop;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  ASSERT_OK(uvs_worker_init(&sched, &holder, UVS_LOOP));
  ASSERT_OK(uv_prepare_init(&loop, &ticker));
  ASSERT_OK(uv_prepare_start(&ticker, ticker_cb));
  ASSERT_OK(uv_timer_init(&loop, &watch));
  ASSERT_OK(uv_timer_start(&watch, watch_cb, BZ_WATCH_MS, BZ_WATCH_MS));
  for (i = 0; i < BZ_CHAIN; i++) {
    ASSERT_OK(uvs_task_init(&chain[i], dummy_run, chain_check));
    ASSERT_OK(uvs_schedule_after(&holder, &chain[i], BZ_NEVER_MS));
  }
  chain_cancel(0);
}


TEST_IMPL(busy_loop_cancels_handed_back) {
  chain_start(BZ_LINKS);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_GE(links, BZ_LINKS);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* ---- a foreign thread's work while the chain runs ---------------------- */

typedef struct {
  uvs_task_t task;
  test_latch_t ran;
  test_latch_t back;
} trip_t;

static uvs_worker_t on_loop;
static uvs_worker_t on_pool;
static uv_async_t trips_over;
static int trips;


static void trip_run(uvs_task_t* task) {
  trip_t* t;

  t = TEST_CONTAINER_OF(task, trip_t, task);
  test_latch_add(&t->ran, 1);
}


static void trip_done(uvs_task_t* task, int status) {
  trip_t* t;

  ASSERT_OK(status);
  t = TEST_CONTAINER_OF(task, trip_t, task);
  test_latch_add(&t->back, 1);
}


static void trip_wait(test_latch_t* l, int n, const char* what, int i) {
  if (!test_latch_wait(l, n, BZ_WITHIN_MS))
    test_failed(__FILE__, __LINE__,
                "task %d, scheduled from another thread onto a %s worker "
                "while the loop was busy handing back, not %s within %d ms: "
                "what it rang for was dropped",
                i, i % 2 == 0 ? "loop" : "pool", what, BZ_WITHIN_MS);
}


static void foreign_trips(void* arg) {
  uint64_t end;
  trip_t t;
  int i;

  (void) arg;
  test_latch_init(&t.ran);
  test_latch_init(&t.back);
  ASSERT_OK(uvs_task_init(&t.task, trip_run, trip_done));
  end = test_hrtime_ms() + BZ_TRIPS_MS;
  for (i = 0; i < BZ_TRIPS && test_hrtime_ms() < end; i++) {
    ASSERT_OK(uvs_schedule(i % 2 == 0 ? &on_loop : &on_pool, &t.task));
    trip_wait(&t.ran, i + 1, "run", i);
    trip_wait(&t.back, i + 1, "handed back", i);
  }
  trips = i;
  test_latch_destroy(&t.ran);
  test_latch_destroy(&t.back);
  ASSERT_OK(uv_async_send(&trips_over));
}


static void trips_over_cb(uv_async_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
  chain_stop();
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


TEST_IMPL(busy_loop_foreign_work_runs) {
  uv_thread_t thread;

  chain_start(0);
  ASSERT_OK(uvs_worker_init(&sched, &on_loop, UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &on_pool, UVS_POOL));
  ASSERT_OK(uv_async_init(&loop, &trips_over, trips_over_cb));
  ASSERT_OK(uv_thread_create(&thread, foreign_trips, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_GT(trips, 0);
  ASSERT_GT(links, BZ_CHAIN);
  printf("# %d trips, %d hand-backs of the chain, %" PRIu64 " iterations\n",
         trips, links, ticks);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}
