/* uvs_worker_metrics (SPEC.md, "0.2 additions"): counters always, the wait
 * and run histograms only with `metrics`, any thread, and after the worker
 * closed. */

#include "task.h"

#include <sched.h>
#include <stdatomic.h>

#define MAXN 64

typedef struct {
  uvs_task_t task;
  int id;
  int status;
  int done_calls;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_thread_t loop_thread;
static item_t items[MAXN];
static atomic_int nruns;
static int ndone;
static int close_calls;


static void item_run(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&nruns, 1);
}


static void post_fn(void* arg) {
  (void) arg;
  atomic_fetch_add(&nruns, 1);
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


static void init_items(int n, uvs_run_cb run) {
  int i;

  for (i = 0; i < n; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    items[i].id = i;
    ASSERT_OK(uvs_task_init(&items[i].task, run, item_done));
  }
}


static void setup(void) {
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
}


static void init_worker(uvs_where_t where, size_t max_pending, int metrics) {
  uvs_worker_options_t o;

  memset(&o, 0, sizeof(o));
  o.max_pending = max_pending;
  o.on_full = UVS_FULL_REJECT;
  o.metrics = metrics;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, where, &o));
}


static void metrics(uvs_worker_metrics_t* m) {
  ASSERT_OK(uvs_worker_metrics(&worker, m));
}


static void hist_zero(const uvs_hist_t* h) {
  int k;

  ASSERT_UINT64_EQ(h->count, 0);
  ASSERT_UINT64_EQ(h->sum_ns, 0);
  ASSERT_UINT64_EQ(h->max_ns, 0);
  for (k = 0; k < 24; k++) ASSERT_UINT64_EQ(h->bucket[k], 0);
}


/* SPEC: bucket k counts values of < 2^k us (and >= 2^(k-1) us); the last
 * bucket also counts everything longer. */
static int bucket_of(uint64_t ns) {
  uint64_t us;
  int k;

  us = ns / 1000;
  k = 0;
  while (k < 23 && us >= ((uint64_t) 1 << k)) k++;
  return k;
}


static void hist_sane(const uvs_hist_t* h, uint64_t count) {
  uint64_t sum;
  int k;

  ASSERT_UINT64_EQ(h->count, count);
  sum = 0;
  for (k = 0; k < 24; k++) sum += h->bucket[k];
  ASSERT_UINT64_EQ(sum, count);
  ASSERT_UINT64_LE(h->max_ns, h->sum_ns);
  ASSERT_UINT64_LE(h->sum_ns, h->max_ns * count);
  /* The longest value is in its bucket. */
  ASSERT_UINT64_GE(h->bucket[bucket_of(h->max_ns)], 1);
}


TEST_IMPL(metrics_null_einval) {
  uvs_worker_metrics_t m;

  setup();
  init_worker(UVS_POOL, 0, 1);
  ASSERT_ERR(uvs_worker_metrics(NULL, &m), UV_EINVAL);
  ASSERT_ERR(uvs_worker_metrics(&worker, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_worker_metrics(NULL, NULL), UV_EINVAL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Every counter, step by step, on a bounded loop worker (nothing runs until
 * the loop does). */
TEST_IMPL(metrics_counters) {
  uvs_worker_metrics_t m;
  int i;

  setup();
  init_worker(UVS_LOOP, 3, 0);
  init_items(6, item_run);
  metrics(&m);
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.queued_max, 0);
  ASSERT_UINT64_EQ(m.delayed, 0);
  ASSERT_UINT64_EQ(m.running, 0);
  ASSERT_UINT64_EQ(m.scheduled, 0);
  ASSERT_UINT64_EQ(m.ran, 0);
  ASSERT_UINT64_EQ(m.cancelled, 0);
  ASSERT_UINT64_EQ(m.rejected, 0);
  ASSERT_UINT64_EQ(m.dropped, 0);

  for (i = 0; i < 3; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_ERR(uvs_schedule(&worker, &items[3].task), UV_EAGAIN);
  ASSERT_OK(uvs_schedule_after(&worker, &items[4].task, 60000));
  ASSERT_OK(uvs_schedule_every(&worker, &items[5].task, 60000, 1000));
  metrics(&m);
  ASSERT_UINT64_EQ(m.queued, 3);
  ASSERT_UINT64_EQ(m.queued_max, 3);
  ASSERT_UINT64_EQ(m.delayed, 2);
  ASSERT_UINT64_EQ(m.scheduled, 5);
  ASSERT_UINT64_EQ(m.rejected, 1);
  ASSERT_UINT64_EQ(m.ran, 0);

  ASSERT_OK(uvs_task_cancel(&items[1].task));
  metrics(&m);
  ASSERT_UINT64_EQ(m.queued, 2);
  ASSERT_UINT64_EQ(m.queued_max, 3);

  /* The delayed tasks keep the loop alive: turn it until the rest is done. */
  for (i = 0; i < 1000 && ndone < 3; i++) uv_run(&loop, UV_RUN_NOWAIT);
  ASSERT_EQ(atomic_load(&nruns), 2);
  ASSERT_EQ(ndone, 3);
  metrics(&m);
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.queued_max, 3);
  ASSERT_UINT64_EQ(m.running, 0);
  ASSERT_UINT64_EQ(m.ran, 2);
  ASSERT_UINT64_EQ(m.cancelled, 1);
  ASSERT_UINT64_EQ(m.delayed, 2);

  ASSERT_OK(uvs_task_cancel(&items[4].task));
  ASSERT_OK(uvs_task_cancel(&items[5].task));
  ASSERT_OK(uvs_post(&worker, post_fn, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 5);
  metrics(&m);
  ASSERT_UINT64_EQ(m.delayed, 0);
  ASSERT_UINT64_EQ(m.cancelled, 3);
  ASSERT_UINT64_EQ(m.scheduled, 6);
  ASSERT_UINT64_EQ(m.ran, 3);
  ASSERT_UINT64_EQ(m.rejected, 1);
  ASSERT_UINT64_EQ(m.dropped, 0);
  ASSERT_UINT64_EQ(m.queued, 0);
  /* The counters don't need `metrics`; the histograms do. */
  hist_zero(&m.wait);
  hist_zero(&m.run);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A worker made with uvs_worker_init keeps the counters too. */
TEST_IMPL(metrics_plain_worker_counters) {
  uvs_worker_metrics_t m;
  int i;

  setup();
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  init_items(10, item_run);
  for (i = 0; i < 8; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uvs_schedule_after(&worker, &items[8].task, 60000));
  metrics(&m);
  ASSERT_UINT64_EQ(m.queued, 8);
  ASSERT_UINT64_EQ(m.delayed, 1);
  ASSERT_UINT64_EQ(m.scheduled, 9);
  ASSERT_OK(uvs_task_cancel(&items[0].task));
  ASSERT_OK(uvs_task_cancel(&items[8].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  metrics(&m);
  ASSERT_UINT64_EQ(m.ran, 7);
  ASSERT_UINT64_EQ(m.cancelled, 2);
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.delayed, 0);
  ASSERT_UINT64_EQ(m.running, 0);
  hist_zero(&m.wait);
  hist_zero(&m.run);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Tasks a worker close drops count as cancelled. */
TEST_IMPL(metrics_close_counts_cancelled) {
  uvs_worker_metrics_t m;
  int i;

  setup();
  init_worker(UVS_LOOP, 0, 1);
  init_items(5, item_run);
  for (i = 0; i < 5; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 5);
  metrics(&m);
  ASSERT_UINT64_EQ(m.cancelled, 5);
  ASSERT_UINT64_EQ(m.ran, 0);
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.queued_max, 5);
  hist_zero(&m.run);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* running is 1 inside a run_cb of a serial worker, 0 after. */
static atomic_int seen_running;

static void running_run(uvs_task_t* task) {
  uvs_worker_metrics_t m;

  (void) task;
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.running, 1);
  atomic_fetch_add(&seen_running, 1);
}


static void running_in_run_cb(uvs_where_t where, int with_metrics) {
  uvs_worker_metrics_t m;
  int i;

  setup();
  init_worker(where, 0, with_metrics);
  init_items(4, running_run);
  for (i = 0; i < 4; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&seen_running), 4);
  metrics(&m);
  ASSERT_UINT64_EQ(m.running, 0);
  ASSERT_UINT64_EQ(m.ran, 4);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(metrics_running_pool) {
  running_in_run_cb(UVS_POOL, 0);
  return 0;
}


TEST_IMPL(metrics_running_loop) {
  running_in_run_cb(UVS_LOOP, 1);
  return 0;
}


/* With metrics: one run of ~20 ms spinning and two short ones queued behind
 * it. The histograms count every run, the long run lands in the bucket of
 * < 2^15 us and >= 2^14 us (unless the machine stretched it past 32.8 ms),
 * and the tasks behind it waited about as long. */
#define SPIN_MS 20

static void spin_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  if (it->id == 0)
    test_spin_ms(SPIN_MS);
  atomic_fetch_add(&nruns, 1);
}


static void histograms(uvs_where_t where) {
  uvs_worker_metrics_t m;
  int i;

  setup();
  init_worker(where, 0, 1);
  init_items(3, spin_run);
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nruns), 3);
  metrics(&m);
  ASSERT_UINT64_EQ(m.ran, 3);
  hist_sane(&m.run, 3);
  hist_sane(&m.wait, 3);
  ASSERT_UINT64_GE(m.run.max_ns, SPIN_MS * 1000000ull);
  ASSERT_UINT64_GE(m.run.sum_ns, SPIN_MS * 1000000ull);
  /* Plausible: nothing near a second here. */
  ASSERT_UINT64_LT(m.run.sum_ns, 3 * 1000000000ull);
  ASSERT_GE(bucket_of(m.run.max_ns), 15);
  if (m.run.max_ns < (1ull << 15) * 1000)
    ASSERT_UINT64_EQ(m.run.bucket[15], 1);
  /* The two behind the long one waited for it (a us of rounding). */
  ASSERT_UINT64_GE(m.wait.max_ns, (SPIN_MS - 1) * 1000000ull);
  ASSERT_UINT64_LT(m.wait.max_ns, 3 * 1000000000ull);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(metrics_histograms_pool) {
  histograms(UVS_POOL);
  return 0;
}


TEST_IMPL(metrics_histograms_loop) {
  histograms(UVS_LOOP);
  return 0;
}


TEST_IMPL(metrics_histograms_off_zero) {
  uvs_worker_metrics_t m;
  int i;

  setup();
  init_worker(UVS_POOL, 0, 0);
  init_items(3, spin_run);
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  metrics(&m);
  ASSERT_UINT64_EQ(m.ran, 3);
  hist_zero(&m.wait);
  hist_zero(&m.run);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A foreign thread reads the metrics while a pool worker runs (for TSan):
 * each field only grows where SPEC says it counts, running stays 0 or 1. */
#define READER_TASKS 2000

static item_t many[READER_TASKS];
static atomic_int reader_stop;

static void reader(void* arg) {
  uvs_worker_metrics_t m;
  uint64_t last_ran;
  uint64_t last_sched;
  uint64_t end;

  (void) arg;
  last_ran = 0;
  last_sched = 0;
  end = test_hrtime_ms() + 5000;
  while (!atomic_load(&reader_stop) && test_hrtime_ms() < end) {
    ASSERT_OK(uvs_worker_metrics(&worker, &m));
    ASSERT_UINT64_GE(m.ran, last_ran);
    ASSERT_UINT64_GE(m.scheduled, last_sched);
    ASSERT_UINT64_LE(m.ran, READER_TASKS);
    ASSERT_UINT64_LE(m.running, 1);
    ASSERT_UINT64_LE(m.run.count, READER_TASKS);
    last_ran = m.ran;
    last_sched = m.scheduled;
    sched_yield(); /* two cores: leave the drain and the loop room */
  }
}


static void many_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  ndone++;
}


TEST_IMPL(metrics_any_thread) {
  uvs_worker_metrics_t m;
  uv_thread_t thread;
  int i;

  setup();
  init_worker(UVS_POOL, 0, 1);
  ASSERT_OK(uv_thread_create(&thread, reader, NULL));
  for (i = 0; i < READER_TASKS; i++) {
    ASSERT_OK(uvs_task_init(&many[i].task, item_run, many_done));
    ASSERT_OK(uvs_schedule(&worker, &many[i].task));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  atomic_store(&reader_stop, 1);
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(ndone, READER_TASKS);
  metrics(&m);
  ASSERT_UINT64_EQ(m.ran, READER_TASKS);
  ASSERT_UINT64_EQ(m.scheduled, READER_TASKS);
  ASSERT_UINT64_EQ(m.queued, 0);
  hist_sane(&m.run, READER_TASKS);
  hist_sane(&m.wait, READER_TASKS);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* After the worker closed (in its close callback, and after its scheduler
 * closed and the loop was closed) the counters are still there; the
 * histograms until the close callback returns, with the memory they used. */
static void check_final(int with_hists) {
  uvs_worker_metrics_t m;

  metrics(&m);
  ASSERT_UINT64_EQ(m.scheduled, 10);
  ASSERT_UINT64_EQ(m.ran, 10);
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.running, 0);
  ASSERT_UINT64_EQ(m.delayed, 0);
  ASSERT_UINT64_EQ(m.cancelled, 0);
  if (with_hists) {
    hist_sane(&m.run, 10);
  } else {
    hist_zero(&m.wait);
    hist_zero(&m.run);
  }
}


static void final_close_cb(uvs_worker_t* w) {
  ASSERT_PTR_EQ(w, &worker);
  close_calls++;
  check_final(1);
}


TEST_IMPL(metrics_after_close) {
  int i;

  setup();
  init_worker(UVS_POOL, 4, 1);
  init_items(10, item_run);
  for (i = 0; i < 4; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 4; i < 8; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 8; i < 10; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, final_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  check_final(0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  check_final(0);
  return 0;
}


/* A worker that only its scheduler's close closed, read after the loop is
 * gone. */
TEST_IMPL(metrics_after_sched_close) {
  int i;

  setup();
  init_worker(UVS_LOOP, 0, 1);
  init_items(10, item_run);
  for (i = 0; i < 10; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_loop_close(&loop));
  ASSERT_EQ(ndone, 10);
  check_final(0);
  return 0;
}


/* A worker with metrics in memory that its close callback frees, as a
 * server frees a connection: the callback still reads the histograms, and
 * the close touches neither the worker nor them after it returns (ASan
 * sees a use after free otherwise; MALLOC_PERTURB_ makes it crash). */
static int freeing_cb_calls;

static void freeing_close_cb(uvs_worker_t* w) {
  uvs_worker_metrics_t m;

  ASSERT_OK(uvs_worker_metrics(w, &m));
  ASSERT_UINT64_EQ(m.ran, 3);
  hist_sane(&m.run, 3);
  memset(w, 0x86, sizeof(*w));
  free(w);
  freeing_cb_calls++;
}


TEST_IMPL(metrics_worker_freed_in_close_cb) {
  uvs_worker_options_t o;
  uvs_worker_t* w;
  int i;

  setup();
  w = malloc(sizeof(*w));
  ASSERT(w != NULL);
  memset(&o, 0, sizeof(o));
  o.metrics = 1;
  ASSERT_OK(uvs_worker_init_ex(&sched, w, UVS_POOL, &o));
  init_items(3, item_run);
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_schedule(w, &items[i].task));
  ASSERT_OK(uvs_worker_close(w, UVS_DRAIN, freeing_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(freeing_cb_calls, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
