/* Helpers shared by the tests of the 0.3 additions (test-reschedule.c,
 * test-keybound.c, test-shed.c, test-quantile.c): a latch to wait on with a
 * deadline, a gate task that holds a worker (or one lane) busy until
 * released, and loop turns until a condition holds, with a deadline.
 *
 * Every wait here has a deadline and fails the test when it passes. */

#ifndef UVSCHED_TEST_HELPERS_H_
#define UVSCHED_TEST_HELPERS_H_

#include "task.h"

/* How long any wait for something that must happen may take before the
 * test fails: long, so that a slow sanitizer build never trips it. */
#define TEST_WAIT_MS 10000

/* A counter that threads add to and wait on. */
typedef struct {
  uv_mutex_t mu;
  uv_cond_t cv;
  int n;
} test_latch_t;

static inline void test_latch_init(test_latch_t* l) {
  ASSERT_OK(uv_mutex_init(&l->mu));
  ASSERT_OK(uv_cond_init(&l->cv));
  l->n = 0;
}

static inline void test_latch_destroy(test_latch_t* l) {
  uv_cond_destroy(&l->cv);
  uv_mutex_destroy(&l->mu);
}

static inline void test_latch_add(test_latch_t* l, int k) {
  uv_mutex_lock(&l->mu);
  l->n += k;
  uv_cond_broadcast(&l->cv);
  uv_mutex_unlock(&l->mu);
}

static inline int test_latch_count(test_latch_t* l) {
  int n;

  uv_mutex_lock(&l->mu);
  n = l->n;
  uv_mutex_unlock(&l->mu);
  return n;
}

/* Waits until the count reaches want or timeout_ms passes; returns whether
 * it reached want. */
static inline int test_latch_wait(test_latch_t* l,
                                  int want,
                                  uint64_t timeout_ms) {
  uint64_t end;
  uint64_t now;
  int ok;

  end = uv_hrtime() + timeout_ms * 1000000u;
  uv_mutex_lock(&l->mu);
  while (l->n < want) {
    now = uv_hrtime();
    if (now >= end)
      break;
    (void) uv_cond_timedwait(&l->cv, &l->mu, end - now);
  }
  ok = l->n >= want;
  uv_mutex_unlock(&l->mu);
  return ok;
}

/* A gate: a task whose run_cb counts itself in `started` and then holds its
 * thread until `release` reaches its `need` (at most TEST_WAIT_MS: a gate
 * nobody opens fails the test). Gates of one group share both latches. */
typedef struct {
  uvs_task_t task;
  test_latch_t* started;
  test_latch_t* release;
  int need;
  uint64_t t_start;              /* uv_hrtime() when its run_cb began */
  uint64_t t_end;                /* ... and when it let go */
  void (*before_end)(void* arg); /* called just before it lets go */
  void* arg;
} test_gate_t;

static inline void test_gate_run(uvs_task_t* task) {
  test_gate_t* g;

  g = TEST_CONTAINER_OF(task, test_gate_t, task);
  g->t_start = uv_hrtime();
  test_latch_add(g->started, 1);
  ASSERT(test_latch_wait(g->release, g->need, TEST_WAIT_MS));
  if (g->before_end != NULL)
    g->before_end(g->arg);
  g->t_end = uv_hrtime();
}

static inline void test_gate_init(test_gate_t* g,
                                  test_latch_t* started,
                                  test_latch_t* release,
                                  int need,
                                  uvs_done_cb done) {
  memset(g, 0, sizeof(*g));
  g->started = started;
  g->release = release;
  g->need = need;
  ASSERT_OK(uvs_task_init(&g->task, test_gate_run, done));
}

/* Turns the loop (without blocking in it) until cond holds, for at most
 * TEST_WAIT_MS; pool threads get a moment between turns. */
#define TEST_RUN_UNTIL(loop, cond)                   \
  do {                                               \
    uint64_t end_ = test_hrtime_ms() + TEST_WAIT_MS; \
    while (!(cond) && test_hrtime_ms() < end_) {     \
      uv_run((loop), UV_RUN_NOWAIT);                 \
      if (!(cond))                                   \
        uv_sleep(1);                                 \
    }                                                \
    ASSERT(cond);                                    \
  } while (0)

/* A few turns of the loop with pool threads given a moment: for checks
 * that something did NOT happen (it would have had the chance). */
static inline void test_settle(uv_loop_t* loop) {
  int i;

  for (i = 0; i < 20; i++) {
    uv_run(loop, UV_RUN_NOWAIT);
    uv_sleep(1);
  }
}

#endif /* UVSCHED_TEST_HELPERS_H_ */
