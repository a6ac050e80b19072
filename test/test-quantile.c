/* uvs_hist_quantile (SPEC.md, "0.3 additions", Quantiles): in ns, the upper
 * bound (2^k us) of the lowest bucket k whose cumulative count reaches
 * max(1, ceil(q * n)), n the sum of the buckets, capped at max_ns; the last
 * bucket (23) answers max_ns; 0 when n is 0 or q is outside [0, 1] (NaN
 * included). A pure function of the struct, any thread.
 *
 * The q values below are exact in binary or far from an integer q * n, so
 * that the answer does not hang on how q * n rounds in double. */

#include "helpers.h"

#include <math.h>

#define US 1000u /* ns */

static uvs_hist_t h;


static void hist_reset(uint64_t max_ns) {
  memset(&h, 0, sizeof(h));
  h.max_ns = max_ns;
}


/* bucket k counts n more values (count and sum kept plausible). */
static void put(unsigned k, uint64_t n) {
  h.bucket[k] += n;
  h.count += n;
  h.sum_ns += n * (k == 0 ? 0 : ((uint64_t) 1 << (k - 1)) * US);
}


/* The bound of bucket k: 2^k us, in ns. */
static uint64_t bound(unsigned k) {
  return ((uint64_t) 1 << k) * US;
}


/* The call neither writes the struct nor depends on anything else. */
static uint64_t quantile(double q) {
  uvs_hist_t copy;
  uint64_t r;

  memcpy(&copy, &h, sizeof(h));
  r = uvs_hist_quantile(&h, q);
  ASSERT_EQ(memcmp(&copy, &h, sizeof(h)), 0);
  ASSERT_UINT64_EQ(uvs_hist_quantile(&copy, q), r);
  return r;
}


TEST_IMPL(quantile_empty) {
  hist_reset(0);
  ASSERT_UINT64_EQ(quantile(0.0), 0);
  ASSERT_UINT64_EQ(quantile(0.5), 0);
  ASSERT_UINT64_EQ(quantile(1.0), 0);
  /* n is the sum of the buckets, not count: empty buckets answer 0
   * whatever the other fields say. */
  h.count = 10;
  h.sum_ns = 12345;
  h.max_ns = 999999;
  ASSERT_UINT64_EQ(quantile(0.0), 0);
  ASSERT_UINT64_EQ(quantile(0.5), 0);
  ASSERT_UINT64_EQ(quantile(1.0), 0);
  return 0;
}


TEST_IMPL(quantile_q_outside) {
  hist_reset(UINT64_MAX);
  put(3, 2);
  put(7, 5);
  ASSERT_UINT64_EQ(quantile(-0.25), 0);
  ASSERT_UINT64_EQ(quantile(-1e-300), 0);
  ASSERT_UINT64_EQ(quantile(-1.0), 0);
  ASSERT_UINT64_EQ(quantile(1.0000001), 0);
  ASSERT_UINT64_EQ(quantile(nextafter(1.0, 2.0)), 0);
  ASSERT_UINT64_EQ(quantile(2.0), 0);
  ASSERT_UINT64_EQ(quantile(NAN), 0);
  ASSERT_UINT64_EQ(quantile(-NAN), 0);
  ASSERT_UINT64_EQ(quantile(INFINITY), 0);
  ASSERT_UINT64_EQ(quantile(-INFINITY), 0);
  /* The ends themselves are inside, -0.0 as well (it equals 0). */
  ASSERT_UINT64_EQ(quantile(0.0), bound(3));
  ASSERT_UINT64_EQ(quantile(-0.0), bound(3));
  ASSERT_UINT64_EQ(quantile(1.0), bound(7));
  return 0;
}


/* q = 0 asks for max(1, ceil(0)) = 1 value: the lowest non-empty bucket,
 * as does any q with q * n <= 1. */
TEST_IMPL(quantile_q0_lowest_bucket) {
  hist_reset(UINT64_MAX);
  put(3, 2);
  put(7, 5);
  put(12, 1);
  ASSERT_UINT64_EQ(quantile(0.0), bound(3));
  ASSERT_UINT64_EQ(quantile(1e-300), bound(3));
  ASSERT_UINT64_EQ(quantile(0.125), bound(3));    /* ceil(1) = 1 */
  ASSERT_UINT64_EQ(quantile(0.25), bound(3));     /* ceil(2) = 2 */
  ASSERT_UINT64_EQ(quantile(0.375), bound(7));    /* ceil(3) = 3 */
  ASSERT_UINT64_EQ(quantile(0.875), bound(7));    /* ceil(7) = 7 */
  ASSERT_UINT64_EQ(quantile(0.90625), bound(12)); /* ceil(7.25) = 8 */
  ASSERT_UINT64_EQ(quantile(1.0), bound(12));
  /* Only bucket 0 (values under 1 us): its bound is 1 us. */
  hist_reset(UINT64_MAX);
  put(0, 4);
  ASSERT_UINT64_EQ(quantile(0.0), 1000);
  ASSERT_UINT64_EQ(quantile(1.0), 1000);
  return 0;
}


/* Bucket k answers 2^k us in ns, for every k below the last; the last
 * answers max_ns. */
TEST_IMPL(quantile_bucket_bounds) {
  unsigned k;

  for (k = 0; k < 23; k++) {
    hist_reset(UINT64_MAX);
    put(k, 1);
    ASSERT_UINT64_EQ(quantile(0.0), bound(k));
    ASSERT_UINT64_EQ(quantile(0.5), bound(k));
    ASSERT_UINT64_EQ(quantile(1.0), bound(k));
  }
  ASSERT_UINT64_EQ(bound(22), 4194304000ull);
  hist_reset(37000000000ull); /* 37 s */
  put(23, 1);
  ASSERT_UINT64_EQ(quantile(0.0), 37000000000ull);
  ASSERT_UINT64_EQ(quantile(1.0), 37000000000ull);
  return 0;
}


/* Capped at max_ns: the longest value, which lies below the bound of its
 * own bucket. */
TEST_IMPL(quantile_capped_at_max) {
  hist_reset(5 * US); /* 5 us, in bucket 3 ([4, 8) us) */
  put(2, 3);
  put(3, 1);
  ASSERT_UINT64_EQ(quantile(0.5), bound(2)); /* 4 us < 5 us */
  ASSERT_UINT64_EQ(quantile(0.75), bound(2));
  ASSERT_UINT64_EQ(quantile(1.0), 5 * US);
  hist_reset(4 * US);
  put(2, 1);
  ASSERT_UINT64_EQ(quantile(1.0), 4 * US); /* equal: the cap changes nothing */
  hist_reset(4 * US - 1);
  put(2, 1);
  ASSERT_UINT64_EQ(quantile(1.0), 4 * US - 1);
  /* The cap applies to any bucket, hand-built or not. */
  hist_reset(0);
  put(5, 2);
  ASSERT_UINT64_EQ(quantile(0.5), 0);
  return 0;
}


/* The last bucket also holds everything longer: it answers max_ns, even
 * when max_ns is below its nominal range. */
TEST_IMPL(quantile_last_bucket) {
  hist_reset(30000000000ull); /* 30 s */
  put(0, 9);
  put(23, 1);
  ASSERT_UINT64_EQ(quantile(0.5), 1000);
  ASSERT_UINT64_EQ(quantile(0.875), 1000);            /* ceil(8.75) = 9 */
  ASSERT_UINT64_EQ(quantile(0.9375), 30000000000ull); /* ceil(9.375) = 10 */
  ASSERT_UINT64_EQ(quantile(1.0), 30000000000ull);
  hist_reset(1234);
  put(23, 3);
  ASSERT_UINT64_EQ(quantile(0.5), 1234);
  return 0;
}


/* ceil(q * n): n = 10 values, one in each of the buckets 1 to 10. */
TEST_IMPL(quantile_ceil) {
  unsigned k;

  hist_reset(UINT64_MAX);
  for (k = 1; k <= 10; k++) put(k, 1);
  ASSERT_UINT64_EQ(quantile(0.95), bound(10)); /* ceil(9.5): the 10th */
  ASSERT_UINT64_EQ(quantile(0.5), bound(5));   /* exactly 5: the 5th */
  ASSERT_UINT64_EQ(quantile(0.55), bound(6));  /* ceil(5.5) */
  ASSERT_UINT64_EQ(quantile(0.25), bound(3));  /* ceil(2.5) */
  ASSERT_UINT64_EQ(quantile(0.75), bound(8));  /* ceil(7.5) */
  ASSERT_UINT64_EQ(quantile(0.05), bound(1));  /* ceil(0.5) */
  ASSERT_UINT64_EQ(quantile(0.99), bound(10)); /* ceil(9.9) */
  ASSERT_UINT64_EQ(quantile(1.0), bound(10));
  /* n = 11: the median is the 6th value. */
  put(11, 1);
  ASSERT_UINT64_EQ(quantile(0.5), bound(6));
  ASSERT_UINT64_EQ(quantile(1.0), bound(11));
  /* Counts above 1 per bucket: cumulative. */
  hist_reset(UINT64_MAX);
  put(4, 50);
  put(9, 49);
  put(15, 1);
  ASSERT_UINT64_EQ(quantile(0.5), bound(4));    /* 50th */
  ASSERT_UINT64_EQ(quantile(0.505), bound(9));  /* ceil(50.5) = 51st */
  ASSERT_UINT64_EQ(quantile(0.99), bound(9));   /* ceil(99.0...) */
  ASSERT_UINT64_EQ(quantile(0.995), bound(15)); /* ceil(99.5) = 100th */
  return 0;
}


/* q = 1 is the n-th value, the longest, however large n is: here n = 2^53
 * + 1, which a double can't hold, and the one long value must still be
 * found. */
TEST_IMPL(quantile_q1_huge_counts) {
  hist_reset(UINT64_MAX);
  put(0, (uint64_t) 1 << 53);
  put(5, 1);
  ASSERT_UINT64_EQ(quantile(1.0), bound(5));
  ASSERT_UINT64_EQ(quantile(0.0), bound(0));
  ASSERT_UINT64_EQ(quantile(0.5), bound(0));
  hist_reset(UINT64_MAX);
  put(2, (uint64_t) 1 << 60);
  put(20, 3);
  ASSERT_UINT64_EQ(quantile(1.0), bound(20));
  return 0;
}


/* From a real worker's metrics: 20 runs of at least 2 ms each. The lowest
 * answer is at least 2 ms, q = 1 answers max_ns, the answers never
 * decrease with q and never pass max_ns; the same from another thread. */
#define RN 20

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uvs_task_t tasks[RN];
static uvs_worker_metrics_t wm;
static uint64_t foreign_answer[2];

static void slow_run(uvs_task_t* task) {
  (void) task;
  test_spin_ms(2);
}


static void foreign_quantiles(void* arg) {
  (void) arg;
  foreign_answer[0] = uvs_hist_quantile(&wm.run, 0.5);
  foreign_answer[1] = uvs_hist_quantile(&wm.wait, 0.5);
}


TEST_IMPL(quantile_from_worker_metrics) {
  uvs_worker_options_t o;
  uv_thread_t thread;
  uint64_t prev;
  uint64_t r;
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  memset(&o, 0, sizeof(o));
  o.metrics = 1;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o));
  for (i = 0; i < RN; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i], slow_run, NULL));
    ASSERT_OK(uvs_schedule(&worker, &tasks[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uvs_worker_metrics(&worker, &wm));
  ASSERT_UINT64_EQ(wm.run.count, RN);
  ASSERT_UINT64_EQ(wm.wait.count, RN);
  ASSERT_UINT64_GE(wm.run.max_ns, 2000000u);

  ASSERT_UINT64_GE(uvs_hist_quantile(&wm.run, 0.0), 2000000u);
  ASSERT_UINT64_EQ(uvs_hist_quantile(&wm.run, 1.0), wm.run.max_ns);
  ASSERT_UINT64_EQ(uvs_hist_quantile(&wm.wait, 1.0), wm.wait.max_ns);
  prev = 0;
  for (i = 0; i <= 100; i++) {
    r = uvs_hist_quantile(&wm.run, i / 100.0);
    ASSERT_UINT64_GE(r, prev);
    ASSERT_UINT64_LE(r, wm.run.max_ns);
    prev = r;
  }
  /* The tasks waited behind each other: the median wait is at least that
   * of the 10th task, about 9 runs of 2 ms; its bucket's bound or max_ns is
   * at least 8 ms. */
  ASSERT_UINT64_GE(uvs_hist_quantile(&wm.wait, 0.5), 8000000u);
  ASSERT_OK(uv_thread_create(&thread, foreign_quantiles, NULL));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_UINT64_EQ(foreign_answer[0], uvs_hist_quantile(&wm.run, 0.5));
  ASSERT_UINT64_EQ(foreign_answer[1], uvs_hist_quantile(&wm.wait, 0.5));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
