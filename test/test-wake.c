/* Producers blocked in uvs_schedule_wait() (SPEC 0.2, "Bounded", with the
 * 0.4 sentence on waking in batches): a blocked call may go on waiting
 * while queued is above max_pending - max(1, max_pending / 8), so that
 * producers wake together; but every task gets in, in each producer's
 * order, no call is rejected while there is room by its deadline, and a
 * close still wakes everyone.
 *
 * How much batching saves is measured in bench/ (uvsched-producers), not
 * here. */

#include "helpers.h"

#include <stdatomic.h>

#define NPROD 4
#define PER_PROD 50000
#define MAXP 64

typedef struct {
  uvs_task_t task;
  int prod;
  int seq;
  atomic_int busy; /* scheduled, not yet handed back */
} witem_t;

typedef struct {
  uv_thread_t thread;
  witem_t* items; /* a ring, reused once handed back */
  int accepted;
  int failed;    /* a call that did not return 0 */
  int next_run;  /* the seq its next task must have (runs are serial) */
  int bad_order; /* a task that ran out of its producer's order */
  int bad_done;  /* a hand-back with a non-zero status */
} producer_t;

#define RING (MAXP * 4)

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static producer_t prods[NPROD];
static atomic_int producing;
static uv_async_t all_in;
static int per_prod;

static void witem_run(uvs_task_t* task) {
  witem_t* it;
  producer_t* p;

  it = TEST_CONTAINER_OF(task, witem_t, task);
  p = &prods[it->prod];
  if (it->seq != p->next_run)
    p->bad_order++;
  p->next_run = it->seq + 1;
}

static void witem_done(uvs_task_t* task, int status) {
  witem_t* it;

  it = TEST_CONTAINER_OF(task, witem_t, task);
  if (status != 0)
    prods[it->prod].bad_done++;
  atomic_store_explicit(&it->busy, 0, memory_order_release);
}

static void produce(void* arg) {
  producer_t* p;
  witem_t* it;
  uint64_t end;
  int seq;
  int err;

  p = arg;
  end = uv_hrtime() + (uint64_t) TEST_WAIT_MS * 4 * 1000000u;
  for (seq = 0; seq < per_prod; seq++) {
    it = &p->items[seq % RING];
    /* The slot was handed back long ago: the worker holds MAXP tasks. */
    while (atomic_load_explicit(&it->busy, memory_order_acquire)) {
      if (uv_hrtime() > end) {
        p->failed++;
        goto out;
      }
      uv_sleep(1);
    }
    it->seq = seq;
    atomic_store_explicit(&it->busy, 1, memory_order_relaxed);
    err = uvs_schedule_wait(&worker, &it->task, TEST_WAIT_MS);
    if (err != 0) {
      atomic_store_explicit(&it->busy, 0, memory_order_relaxed);
      fprintf(stderr, "producer %d, task %d: %s\n", (int) (p - prods), seq,
              uv_strerror(err));
      p->failed++;
      break;
    }
    p->accepted++;
  }
out:
  if (atomic_fetch_sub(&producing, 1) == 1)
    uv_async_send(&all_in);
}

static void all_in_cb(uv_async_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
}

/* NPROD threads each schedule per_prod tasks, one call at a time, onto a
 * worker bounded at MAXP that blocks: all get in and run in order. */
static void many_producers(uvs_where_t where) {
  uvs_worker_options_t wo;
  uvs_worker_metrics_t m;
  int i;
  int j;

  per_prod = PER_PROD;
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  per_prod = PER_PROD / 5; /* still hundreds of rounds of waking */
#endif
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  memset(&wo, 0, sizeof(wo));
  wo.max_pending = MAXP;
  wo.on_full = UVS_FULL_BLOCK;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, where, &wo));
  ASSERT_OK(uv_async_init(&loop, &all_in, all_in_cb));
  atomic_store(&producing, NPROD);
  for (i = 0; i < NPROD; i++) {
    memset(&prods[i], 0, sizeof(prods[i]));
    prods[i].items = calloc(RING, sizeof(witem_t));
    ASSERT_NOT_NULL(prods[i].items);
    for (j = 0; j < RING; j++) {
      ASSERT_OK(uvs_task_init(&prods[i].items[j].task, witem_run, witem_done));
      prods[i].items[j].prod = i;
    }
  }
  for (i = 0; i < NPROD; i++)
    ASSERT_OK(uv_thread_create(&prods[i].thread, produce, &prods[i]));
  /* all_in keeps the loop alive until the last producer is through. */
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < NPROD; i++) ASSERT_OK(uv_thread_join(&prods[i].thread));
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_DRAIN);
  for (i = 0; i < NPROD; i++) {
    ASSERT_EQ(prods[i].failed, 0);
    ASSERT_EQ(prods[i].accepted, per_prod);
    ASSERT_EQ(prods[i].next_run, per_prod);
    ASSERT_EQ(prods[i].bad_order, 0);
    ASSERT_EQ(prods[i].bad_done, 0);
    free(prods[i].items);
  }
  ASSERT_UINT64_EQ(m.rejected, 0);
  ASSERT_UINT64_EQ(m.scheduled, (uint64_t) NPROD * per_prod);
  ASSERT_UINT64_LE(m.queued_max, MAXP);
}

TEST_IMPL(wake_many_producers_loop) {
  many_producers(UVS_LOOP);
  return 0;
}

TEST_IMPL(wake_many_producers_pool) {
  many_producers(UVS_POOL);
  return 0;
}


/* One producer blocked on a full loop worker whose loop stands still, so
 * that only what the test does makes room. */
typedef struct {
  uvs_task_t task;
  uint64_t timeout_ms;
  int err;
  uint64_t t_call;
  uint64_t t_ret;
} blocked_t;

static witem_t filler[MAXP];
static blocked_t blocked;

static void noop_run(uvs_task_t* task) {
  (void) task;
}

static void count_done(uvs_task_t* task, int status) {
  (void) task;
  (void) status;
}

static void block_one(void* arg) {
  blocked_t* b;

  b = arg;
  b->t_call = uv_hrtime();
  b->err = uvs_schedule_wait(&worker, &b->task, b->timeout_ms);
  b->t_ret = uv_hrtime();
}

/* Fills a loop worker bounded at MAXP and starts a producer that blocks
 * on it; returns once the producer is listed as waiting. */
static void fill_and_block(uv_thread_t* thread, uint64_t timeout_ms) {
  uvs_worker_options_t wo;
  uint64_t end;
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  memset(&wo, 0, sizeof(wo));
  wo.max_pending = MAXP;
  wo.on_full = UVS_FULL_BLOCK;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &wo));
  for (i = 0; i < MAXP; i++) {
    ASSERT_OK(uvs_task_init(&filler[i].task, noop_run, count_done));
    ASSERT_OK(uvs_schedule(&worker, &filler[i].task));
  }
  memset(&blocked, 0, sizeof(blocked));
  ASSERT_OK(uvs_task_init(&blocked.task, noop_run, count_done));
  blocked.timeout_ms = timeout_ms;
  blocked.err = 1;
  ASSERT_OK(uv_thread_create(thread, block_one, &blocked));
  /* The worker's count of blocked producers (private, read here only to
   * know when the producer is asleep rather than to sleep a guess). */
  end = uv_hrtime() + (uint64_t) TEST_WAIT_MS * 1000000u;
  while (__atomic_load_n(&worker.nwaiters, __ATOMIC_SEQ_CST) == 0) {
    ASSERT(uv_hrtime() < end);
    uv_sleep(1);
  }
}

/* Makes room for `room` tasks under the blocked producer (cancels of
 * queued ones) and checks that its call gets in, well before the test's
 * own deadline. */
static void room_gets_in(int room, uint64_t timeout_ms) {
  uv_thread_t thread;
  int i;

  fill_and_block(&thread, timeout_ms);
  for (i = 0; i < room; i++) ASSERT_OK(uvs_task_cancel(&filler[i].task));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(blocked.err, 0);
  ASSERT_UINT64_LT(blocked.t_ret - blocked.t_call,
                   (uint64_t) TEST_WAIT_MS * 1000000u);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}

/* Room for one, above the refill mark, and nothing more: the producer may
 * sleep on, but by its deadline (300 ms) it takes that room rather than
 * time out. */
TEST_IMPL(wake_room_above_mark_taken_by_deadline) {
  room_gets_in(1, 300);
  return 0;
}

/* Down to the refill mark: the producer is woken now, long before its
 * deadline of a minute. */
TEST_IMPL(wake_at_refill_mark) {
  room_gets_in(MAXP / 8, 60000);
  return 0;
}

/* No room at all: UV_ETIMEDOUT at the deadline, counted once. */
TEST_IMPL(wake_full_times_out_once) {
  uvs_worker_metrics_t m;
  uv_thread_t thread;

  fill_and_block(&thread, 100);
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_ERR(blocked.err, UV_ETIMEDOUT);
  ASSERT_UINT64_GE(blocked.t_ret - blocked.t_call, 100 * 1000000u);
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.rejected, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}

/* A close wakes a blocked producer at once with UV_ESHUTDOWN. */
TEST_IMPL(wake_close_shuts_out) {
  uv_thread_t thread;
  int close_calls;

  fill_and_block(&thread, 60000);
  close_calls = 0;
  sched.data = &close_calls;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, test_close_cb_counter));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_ERR(blocked.err, UV_ESHUTDOWN);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* ---- several producers, one room at a time ----------------------------
 * Issue 43. A worker bounded at SR_MAX (8), full, with SR_PROD producers
 * blocked in uvs_schedule_wait. At 8 the refill mark is 7: one task
 * leaving makes room for one, and a blocked call may not go on waiting
 * then. So each time one task leaves (a cancel, or a start), one more of
 * the producers must get in, within SR_WITHIN_MS, long before their own
 * deadline of a minute; none gets in while the worker is full. A worker
 * that woke one producer fewer than it has room for would leave them all
 * asleep here. */
#define SR_MAX 8
#define SR_PROD 4
#define SR_WITHIN_MS 5000

typedef struct {
  uvs_task_t task;
  uv_thread_t thread;
  int err;
} sr_prod_t;

static sr_prod_t sr_prods[SR_PROD];
static test_gate_t sr_gates[SR_MAX + 1];
static test_latch_t sr_calling;
static test_latch_t sr_returned;
static test_latch_t sr_started; /* gates that began to run */
static test_latch_t sr_release; /* gate k runs until it reaches k + 1 */
static uv_async_t sr_finished;

static void sr_produce(void* arg) {
  sr_prod_t* p;

  p = arg;
  test_latch_add(&sr_calling, 1);
  p->err = uvs_schedule_wait(&worker, &p->task, 60000);
  test_latch_add(&sr_returned, 1);
}

static void sr_init(uvs_where_t where) {
  uvs_worker_options_t wo;
  int i;

  test_latch_init(&sr_calling);
  test_latch_init(&sr_returned);
  test_latch_init(&sr_started);
  test_latch_init(&sr_release);
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  memset(&wo, 0, sizeof(wo));
  wo.max_pending = SR_MAX;
  wo.on_full = UVS_FULL_BLOCK;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, where, &wo));
  for (i = 0; i < SR_PROD; i++) {
    memset(&sr_prods[i], 0, sizeof(sr_prods[i]));
    sr_prods[i].err = 1;
    ASSERT_OK(uvs_task_init(&sr_prods[i].task, noop_run, count_done));
  }
}

/* The worker is full: starts the producers and gives them a moment to
 * fall asleep in their calls (there is no signal for that; one that is
 * late only finds the room itself). */
static void sr_block(void) {
  uvs_worker_metrics_t m;
  int i;

  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.queued, SR_MAX);
  for (i = 0; i < SR_PROD; i++)
    ASSERT_OK(uv_thread_create(&sr_prods[i].thread, sr_produce, &sr_prods[i]));
  ASSERT(test_latch_wait(&sr_calling, SR_PROD, TEST_WAIT_MS));
  uv_sleep(50);
  ASSERT_EQ(test_latch_count(&sr_returned), 0);
}

/* Step s (from 1) made room for one more: the s-th producer gets in, and
 * the worker is full again. */
static void sr_check_step(int s, const char* how) {
  uvs_worker_metrics_t m;
  int got;

  if (!test_latch_wait(&sr_returned, s, SR_WITHIN_MS)) {
    got = test_latch_count(&sr_returned);
    test_failed(__FILE__, __LINE__,
                "%d of %d blocked producers got in within %d ms of the %s "
                "of task %d of a full worker bounded at %d: blocked "
                "producers were woken fewer than there was room for",
                got, s, SR_WITHIN_MS, how, s, SR_MAX);
  }
  ASSERT_EQ(test_latch_count(&sr_returned), s);
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.queued, SR_MAX);
  ASSERT_UINT64_LE(m.queued_max, SR_MAX);
}

static void sr_finish(void) {
  uvs_worker_metrics_t m;
  int i;

  for (i = 0; i < SR_PROD; i++) {
    ASSERT_OK(uv_thread_join(&sr_prods[i].thread));
    ASSERT_EQ(sr_prods[i].err, 0);
  }
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.rejected, 0);
}

static void sr_destroy(void) {
  test_latch_destroy(&sr_calling);
  test_latch_destroy(&sr_returned);
  test_latch_destroy(&sr_started);
  test_latch_destroy(&sr_release);
}

/* Room made by cancels, on a loop worker whose loop stands still: each
 * cancel takes one queued task out. */
TEST_IMPL(wake_each_room_cancel) {
  int s;
  int i;

  sr_init(UVS_LOOP);
  for (i = 0; i < SR_MAX; i++) {
    ASSERT_OK(uvs_task_init(&filler[i].task, noop_run, count_done));
    ASSERT_OK(uvs_schedule(&worker, &filler[i].task));
  }
  sr_block();
  for (s = 1; s <= SR_PROD; s++) {
    ASSERT_OK(uvs_task_cancel(&filler[s - 1].task));
    sr_check_step(s, "cancel");
  }
  sr_finish();
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  sr_destroy();
  return 0;
}

/* Room made by starts, on a pool worker: gate 0 runs, gates 1 to 8 fill
 * the queue; each step lets the running gate end, and the next one starts
 * and holds the worker, so that exactly one task has left the queue. */
static void sr_starts(void* arg) {
  int s;
  int i;

  (void) arg;
  for (i = 0; i <= SR_MAX; i++) {
    test_gate_init(&sr_gates[i], &sr_started, &sr_release, i + 1, count_done);
    ASSERT_OK(uvs_schedule(&worker, &sr_gates[i].task));
    if (i == 0)
      ASSERT(test_latch_wait(&sr_started, 1, TEST_WAIT_MS));
  }
  sr_block();
  for (s = 1; s <= SR_PROD; s++) {
    test_latch_add(&sr_release, 1);
    ASSERT(test_latch_wait(&sr_started, s + 1, TEST_WAIT_MS));
    sr_check_step(s, "start");
  }
  sr_finish();
  test_latch_add(&sr_release, SR_MAX + 1); /* every gate may end */
  ASSERT_OK(uv_async_send(&sr_finished));
}

static void sr_finished_cb(uv_async_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
}

TEST_IMPL(wake_each_room_start) {
  uv_thread_t thread;

  sr_init(UVS_POOL);
  ASSERT_OK(uv_async_init(&loop, &sr_finished, sr_finished_cb));
  ASSERT_OK(uv_thread_create(&thread, sr_starts, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_DRAIN);
  sr_destroy();
  return 0;
}
