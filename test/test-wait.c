/* A wait is never negative (SPEC.md, "0.2 additions", Metrics; and the
 * shedding of "0.3 additions"): the time from a task's ready to the start
 * of its run_cb, on one clock.
 *
 * The case that shows it: a thread that is not the loop's feeds a worker
 * one tiny task at a time, each scheduled the moment the previous one's
 * run_cb began, so that the drain or loop turn takes the new task a few us
 * after it was queued. Without linger_us each run_cb also waits (spinning,
 * with a deadline) until the next task is queued, so that its drain or
 * turn finds it there as soon as the run ends; with linger_us it does not,
 * so that the drain finds its queue empty and lingers, and the task comes
 * while it polls. A ready time stamped a little late (or on another clock
 * than the start) then lies after the start; the wait, taken in unsigned
 * us, wraps to about 2^32 us, a sample of 71 minutes in the `wait`
 * histogram, and with `max_wait_ms` a fresh task is shed.
 *
 * Each test feeds a number of tasks (a quarter under sanitizers, which
 * slow every step), enough that on the code before the fix every run
 * failed, or as many as it can in FEED_MAX_MS on a machine so loaded that
 * the count would take longer (a third of the meson timeout at most, with
 * the checks; issue 43), and checks what it can see from outside:
 * - with `metrics`: every wait counted, none above what the test measured
 *   from just before the task's schedule call to the start of its run_cb
 *   (the largest and the sum, a us of rounding per task), nothing in the
 *   top buckets, no quantile above that;
 * - with `max_wait_ms`: nothing shed (status 0 for every task, `expired`
 *   0), and above all no task handed back with UV_ETIMEDOUT sooner than
 *   max_wait_ms after its schedule call, which no machine, however slow,
 *   can excuse. */

#include "helpers.h"

#include <sched.h>
#include <stdatomic.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FEED_DIV 4
#else
#define FEED_DIV 1
#endif

/* Tasks are reused round a ring; one is scheduled again only once it has
 * been handed back. A loop worker's hand-backs wait for its turn to end,
 * and the turn for the producer (handoff): the ring holds far more tasks
 * than a turn of 1 ms or 64 tasks can run, however fast the machine. */
#define RING 65536

/* No task is fed after this: the one fed then is the last. */
#define FEED_MAX_MS 5000

typedef struct {
  uvs_task_t task;
  uint64_t t_sched; /* just before its schedule call (producer) */
  uint64_t t_run;   /* when its run_cb began */
  int idx;          /* which of the feed it is */
  atomic_int busy;  /* scheduled and not yet handed back */
} feed_item_t;

typedef struct {
  uvs_where_t where;
  int metrics;
  uint64_t max_wait_ms;
  unsigned budget;
  unsigned linger_us;
  int handoff; /* each run_cb waits until the next task is queued */
} feed_conf_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_thread_t loop_thread;
static feed_item_t* ring;
static feed_conf_t conf;
static atomic_int feed_n; /* lowered by the producer at FEED_MAX_MS */

/* Tasks whose run_cb began or that were handed back unrun: the producer
 * waits on it before it schedules the next. */
static atomic_int settled;
/* Schedule calls that returned: a run_cb waits on it until the next task
 * is queued, so that its drain or loop turn takes that one at once. */
static atomic_int scheduled;
/* Loop thread only. */
static int ndone;
static int nbad;       /* handed back with a status other than 0 */
static int nshed_soon; /* ... UV_ETIMEDOUT within max_wait_ms of the call */
static int first_bad_status;
static uint64_t first_shed_soon_ns;
static uvs_worker_metrics_t final_m;
/* Producer only, read after it is joined: what the test measured. */
static uint64_t true_max_ns;
static uint64_t true_sum_ns;
static int nran_seen;


static void spin_until(atomic_int* v, int want, int is_zero);

static void feed_run(uvs_task_t* task) {
  feed_item_t* it;

  it = TEST_CONTAINER_OF(task, feed_item_t, task);
  it->t_run = uv_hrtime();
  atomic_fetch_add_explicit(&settled, 1, memory_order_release);
  if (conf.handoff && it->idx + 1 < feed_n)
    spin_until(&scheduled, it->idx + 2, 0);
}


static void feed_done(uvs_task_t* task, int status) {
  feed_item_t* it;
  uint64_t now;

  ASSERT(test_on_thread(loop_thread));
  now = uv_hrtime();
  it = TEST_CONTAINER_OF(task, feed_item_t, task);
  if (status != 0) {
    if (nbad++ == 0)
      first_bad_status = status;
    if (status == UV_ETIMEDOUT &&
        now - it->t_sched <= conf.max_wait_ms * 1000000u) {
      if (nshed_soon++ == 0)
        first_shed_soon_ns = now - it->t_sched;
    }
    atomic_fetch_add_explicit(&settled, 1, memory_order_release);
  }
  atomic_store_explicit(&it->busy, 0, memory_order_release);
  if (++ndone == feed_n) {
    /* Every task is handed back: the histograms are complete. Read them
     * before the close, which frees them. */
    ASSERT_OK(uvs_worker_metrics(&worker, &final_m));
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
  }
}


/* Spins until *v reaches want: the producer must react within a few us,
 * which a sleep on a condition variable would not. It yields now and then,
 * for the threads it waits on may share its core; TEST_WAIT_MS deadline. */
static void spin_until(atomic_int* v, int want, int is_zero) {
  uint64_t end;
  unsigned spins;
  int x;

  end = 0;
  for (spins = 1;; spins++) {
    x = atomic_load_explicit(v, memory_order_acquire);
    if (is_zero ? x == 0 : x >= want)
      return;
    if (spins % 256 == 0) {
      if (end == 0)
        end = test_hrtime_ms() + TEST_WAIT_MS;
      else if (test_hrtime_ms() >= end)
        test_failed(__FILE__, __LINE__,
                    "producer: no progress in %d ms (%d of %d settled)",
                    TEST_WAIT_MS, atomic_load(&settled), feed_n);
      sched_yield();
    }
  }
}


static void producer(void* arg) {
  feed_item_t* it;
  uint64_t end;
  uint64_t d;
  int i;

  (void) arg;
  end = uv_hrtime() + FEED_MAX_MS * (uint64_t) 1000000;
  for (i = 0; i < feed_n; i++) {
    /* Out of time: this task is the last, and its run_cb, which reads
     * feed_n after this store, waits for no next one. */
    if (i + 1 < feed_n && uv_hrtime() >= end)
      atomic_store(&feed_n, i + 1);
    it = &ring[i % RING];
    /* Handed back already, but wait for it if not. */
    spin_until(&it->busy, 0, 1);
    ASSERT_OK(uvs_task_init(&it->task, feed_run, feed_done));
    atomic_store_explicit(&it->busy, 1, memory_order_relaxed);
    it->t_run = 0;
    it->idx = i;
    it->t_sched = uv_hrtime();
    ASSERT_OK(uvs_schedule(&worker, &it->task));
    atomic_fetch_add_explicit(&scheduled, 1, memory_order_release);
    spin_until(&settled, i + 1, 0);
    if (it->t_run != 0) {
      d = it->t_run - it->t_sched;
      true_sum_ns += d;
      if (d > true_max_ns)
        true_max_ns = d;
      nran_seen++;
    }
  }
}


static void feed(const feed_conf_t* c, int n) {
  uvs_sched_options_t so;
  uvs_worker_options_t o;
  uv_thread_t thread;
  uint64_t t0;

  conf = *c;
  feed_n = n / FEED_DIV;
  ring = calloc(RING, sizeof(*ring));
  ASSERT_NOT_NULL(ring);
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  memset(&so, 0, sizeof(so));
  so.keep_alive = 1; /* the producer's tasks keep coming */
  so.budget = c->budget;
  so.linger_us = c->linger_us;
  ASSERT_OK(uvs_sched_init(&loop, &sched, &so));
  memset(&o, 0, sizeof(o));
  o.metrics = c->metrics;
  o.max_wait_ms = c->max_wait_ms;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, c->where, &o));

  t0 = uv_hrtime();
  ASSERT_OK(uv_thread_create(&thread, producer, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(uv_loop_close(&loop));
  printf("# %d tasks in %" PRIu64 " ms; measured waits: max %" PRIu64
         " ns, mean %" PRIu64 " ns\n",
         feed_n, (uv_hrtime() - t0) / 1000000, true_max_ns,
         nran_seen != 0 ? true_sum_ns / (uint64_t) nran_seen : 0);
  free(ring);
  ring = NULL;
  ASSERT_EQ(ndone, feed_n);
}


/* No task handed back with UV_ETIMEDOUT within max_wait_ms of its schedule
 * call: it was not ready before that call. This holds on any machine. */
static void check_none_shed_soon(void) {
  if (nshed_soon != 0)
    test_failed(__FILE__, __LINE__,
                "%d of %d tasks shed with UV_ETIMEDOUT within max_wait_ms "
                "(%" PRIu64 " ms) of their schedule call (the first %" PRIu64
                " ns after it)",
                nshed_soon, feed_n, conf.max_wait_ms, first_shed_soon_ns);
}


/* No task shed at all: no wait here comes near max_wait_ms. */
static void check_nothing_shed(void) {
  check_none_shed_soon();
  if (nbad != 0)
    test_failed(__FILE__, __LINE__,
                "%d of %d tasks handed back with a status, the first %d (%s)",
                nbad, feed_n, first_bad_status,
                test_err_name(first_bad_status));
  ASSERT_UINT64_EQ(final_m.expired, 0);
  ASSERT_UINT64_EQ(final_m.ran, (uint64_t) feed_n);
  ASSERT_EQ(nran_seen, feed_n);
}


/* With metrics: no wait above what the test saw from outside. A wait
 * counts from ready, which is not before the schedule call, to the start
 * of run_cb, which is not after the test's stamp in it; the histogram
 * keeps us, so allow one per task for rounding. */
static void check_waits(void) {
  const uvs_hist_t* h;
  uint64_t q;
  unsigned k;

  h = &final_m.wait;
  printf("# wait histogram: count %" PRIu64 ", max %" PRIu64
         " ns, mean %" PRIu64 " ns, p50 %" PRIu64 " ns, p99 %" PRIu64
         " ns, top bucket %" PRIu64 "\n",
         h->count, h->max_ns, h->count != 0 ? h->sum_ns / h->count : 0,
         uvs_hist_quantile(h, 0.5), uvs_hist_quantile(h, 0.99), h->bucket[23]);
  ASSERT_UINT64_EQ(h->count, (uint64_t) feed_n);
  /* The top bucket (4.2 s and more) is where a wrapped wait lands; a
   * real one of seconds, on a machine that starves the loop thread, is
   * bounded by what the test saw, below. */
  ASSERT_UINT64_EQ(h->bucket[23], 0);
  ASSERT_UINT64_LE(h->max_ns, true_max_ns + 1000);
  ASSERT_UINT64_LE(h->sum_ns, true_sum_ns + (uint64_t) feed_n * 1000);
  for (k = 0; k <= 100; k++) {
    q = uvs_hist_quantile(h, k / 100.0);
    ASSERT_UINT64_LE(q, h->max_ns);
  }
}


static void feed_metrics(uvs_where_t where, unsigned linger_us, int n) {
  feed_conf_t c;

  memset(&c, 0, sizeof(c));
  c.where = where;
  c.metrics = 1;
  c.linger_us = linger_us;
  c.handoff = linger_us == 0;
  feed(&c, n);
  check_waits();
  ASSERT_UINT64_EQ(final_m.expired, 0);
  ASSERT_EQ(nbad, 0);
}


/* max_wait_ms with an explicit budget (a count: every start reads the
 * clock) or with linger_us. */
static void feed_max_wait(uvs_where_t where,
                          uint64_t max_wait_ms,
                          unsigned budget,
                          unsigned linger_us,
                          int n) {
  feed_conf_t c;

  memset(&c, 0, sizeof(c));
  c.where = where;
  c.max_wait_ms = max_wait_ms;
  c.budget = budget;
  c.linger_us = linger_us;
  c.handoff = linger_us == 0;
  feed(&c, n);
  check_nothing_shed();
}


TEST_IMPL(wait_fed_one_at_a_time_metrics_pool) {
  feed_metrics(UVS_POOL, 0, 40000);
  return 0;
}


TEST_IMPL(wait_fed_one_at_a_time_metrics_loop) {
  feed_metrics(UVS_LOOP, 0, 100000);
  return 0;
}


TEST_IMPL(wait_fed_one_at_a_time_metrics_linger_pool) {
  feed_metrics(UVS_POOL, 200, 100000);
  return 0;
}


TEST_IMPL(wait_fed_one_at_a_time_budget_pool) {
  feed_max_wait(UVS_POOL, 1000, 64, 0, 40000);
  return 0;
}


TEST_IMPL(wait_fed_one_at_a_time_budget_loop) {
  feed_max_wait(UVS_LOOP, 1000, 64, 0, 100000);
  return 0;
}


TEST_IMPL(wait_fed_one_at_a_time_linger_pool) {
  feed_max_wait(UVS_POOL, 1000, 0, 200, 300000);
  return 0;
}


/* max_wait_ms of 2 ms: a task may really wait that long on a busy machine
 * and be shed, but none may come back with UV_ETIMEDOUT within 2 ms of its
 * schedule call, for it was not ready before that call. */
TEST_IMPL(wait_shed_never_before_max_wait) {
  feed_conf_t c;

  memset(&c, 0, sizeof(c));
  c.where = UVS_POOL;
  c.max_wait_ms = 2;
  c.budget = 64;
  c.handoff = 1;
  feed(&c, 40000);
  check_none_shed_soon();
  ASSERT_UINT64_EQ(final_m.expired, (uint64_t) nbad);
  ASSERT_UINT64_EQ(final_m.ran + final_m.expired, (uint64_t) feed_n);
  if (nbad != 0)
    ASSERT_ERR(first_bad_status, UV_ETIMEDOUT);
  return 0;
}
