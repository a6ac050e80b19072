/* Test harness for uvsched, after libuv's test/task.h.
 *
 * Every test runs in its own process (see runner.c). The ASSERT macros stay
 * on in release builds: a failed one prints file, line, the expression and
 * the values, reports "not ok" on stdout and calls abort().
 */

#ifndef UVSCHED_TEST_TASK_H_
#define UVSCHED_TEST_TASK_H_

#include "uvsched.h"

#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_OK 0
#define TEST_SKIP 77

#define TEST_IMPL(name)      \
  int run_test_##name(void); \
  int run_test_##name(void)

#if defined(__GNUC__)
#define TEST_NORETURN __attribute__((noreturn))
#define TEST_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TEST_NORETURN
#define TEST_PRINTF(a, b)
#endif

/* Defined in runner.c. */
extern const char* test_skip_reason;
TEST_NORETURN TEST_PRINTF(3, 4) void test_failed(const char* file,
                                                 int line,
                                                 const char* fmt,
                                                 ...);

#define RETURN_SKIP(reason)      \
  do {                           \
    test_skip_reason = (reason); \
    return TEST_SKIP;            \
  } while (0)

#define ASSERT(expr)                                \
  do {                                              \
    if (!(expr))                                    \
      test_failed(__FILE__, __LINE__, "%s", #expr); \
  } while (0)

/* The expressions are stringified here, before macro expansion, so that a
 * failure prints what the test wrote (atomic_load, not its expansion). */
#define ASSERT_BASE(a, op, b, type, fmt, sa, sb)                           \
  do {                                                                     \
    type eval_a_ = (type) (a);                                             \
    type eval_b_ = (type) (b);                                             \
    if (!(eval_a_ op eval_b_))                                             \
      test_failed(__FILE__, __LINE__, "%s %s %s (" fmt " %s " fmt ")", sa, \
                  #op, sb, eval_a_, #op, eval_b_);                         \
  } while (0)

#define ASSERT_INT_(a, op, b, sa, sb) \
  ASSERT_BASE(a, op, b, int64_t, "%" PRId64, sa, sb)
#define ASSERT_U64_(a, op, b, sa, sb) \
  ASSERT_BASE(a, op, b, uint64_t, "%" PRIu64, sa, sb)
#define ASSERT_PTR_(a, op, b, sa, sb) \
  ASSERT_BASE(a, op, b, const void*, "%p", sa, sb)

#define ASSERT_EQ(a, b) ASSERT_INT_(a, ==, b, #a, #b)
#define ASSERT_NE(a, b) ASSERT_INT_(a, !=, b, #a, #b)
#define ASSERT_GE(a, b) ASSERT_INT_(a, >=, b, #a, #b)
#define ASSERT_GT(a, b) ASSERT_INT_(a, >, b, #a, #b)
#define ASSERT_LE(a, b) ASSERT_INT_(a, <=, b, #a, #b)
#define ASSERT_LT(a, b) ASSERT_INT_(a, <, b, #a, #b)

#define ASSERT_UINT64_EQ(a, b) ASSERT_U64_(a, ==, b, #a, #b)
#define ASSERT_UINT64_NE(a, b) ASSERT_U64_(a, !=, b, #a, #b)
#define ASSERT_UINT64_GE(a, b) ASSERT_U64_(a, >=, b, #a, #b)
#define ASSERT_UINT64_GT(a, b) ASSERT_U64_(a, >, b, #a, #b)
#define ASSERT_UINT64_LE(a, b) ASSERT_U64_(a, <=, b, #a, #b)
#define ASSERT_UINT64_LT(a, b) ASSERT_U64_(a, <, b, #a, #b)

#define ASSERT_PTR_EQ(a, b) ASSERT_PTR_(a, ==, b, #a, #b)
#define ASSERT_PTR_NE(a, b) ASSERT_PTR_(a, !=, b, #a, #b)
#define ASSERT_NULL(a) ASSERT_PTR_(a, ==, NULL, #a, "NULL")
#define ASSERT_NOT_NULL(a) ASSERT_PTR_(a, !=, NULL, #a, "NULL")

/* For return codes: prints the libuv error name as well. */
#define ASSERT_ERR_(a, code, sa, scode)                                       \
  do {                                                                        \
    int eval_a_ = (a);                                                        \
    int eval_b_ = (code);                                                     \
    if (eval_a_ != eval_b_)                                                   \
      test_failed(__FILE__, __LINE__, "%s == %s (%d %s != %d %s)", sa, scode, \
                  eval_a_, test_err_name(eval_a_), eval_b_,                   \
                  test_err_name(eval_b_));                                    \
  } while (0)

#define ASSERT_ERR(a, code) ASSERT_ERR_(a, code, #a, #code)
#define ASSERT_OK(a) ASSERT_ERR_(a, 0, #a, "0")

#define TEST_CONTAINER_OF(ptr, type, member) \
  ((type*) ((char*) (ptr) -offsetof(type, member)))

static inline const char* test_err_name(int err) {
  if (err == 0)
    return "OK";
  if (err < 0)
    return uv_err_name(err);
  return "positive";
}

/* Wall-clock time in ns and ms, on the clock SPEC.md measures with. */
static inline uint64_t test_hrtime(void) {
  return uv_hrtime();
}

static inline uint64_t test_hrtime_ms(void) {
  return uv_hrtime() / 1000000u;
}

/* Busy work that takes `ms` of wall time. Used to make run_cbs overlap or to
 * make a run slow; never as a way to wait for another thread. */
static inline void test_spin_ms(uint64_t ms) {
  uint64_t end;

  end = uv_hrtime() + ms * 1000000u;
  while (uv_hrtime() < end) {
  }
}

static inline void test_spin_us(uint64_t us) {
  uint64_t end;

  end = uv_hrtime() + us * 1000u;
  while (uv_hrtime() < end) {
  }
}

static inline int test_on_thread(uv_thread_t thread) {
  uv_thread_t self;

  self = uv_thread_self();
  return uv_thread_equal(&self, &thread);
}

/* Closes the scheduler, runs the loop until everything is handed back and
 * checks that the loop closes. Used at the end of most tests. */
static inline void test_close_cb_counter(uvs_sched_t* sched) {
  int* counter;

  counter = (int*) sched->data;
  if (counter != NULL)
    (*counter)++;
}

#define TEST_CLOSE_SCHED_AND_LOOP(loop, sched, how)                    \
  do {                                                                 \
    int close_calls_ = 0;                                              \
    (sched)->data = &close_calls_;                                     \
    ASSERT_OK(uvs_sched_close((sched), (how), test_close_cb_counter)); \
    ASSERT_EQ(close_calls_, 0);                                        \
    ASSERT_OK(uv_run((loop), UV_RUN_DEFAULT));                         \
    ASSERT_EQ(close_calls_, 1);                                        \
    (sched)->data = NULL;                                              \
    ASSERT_OK(uv_loop_close(loop));                                    \
  } while (0)

/* The allocator's test hooks (src/alloc.c), which the shared library hides
 * and the static uvsched_internal exports; declared again here so that
 * tests depend on nothing else internal. */
void uvs__alloc_fail_after(long n);
void uvs__alloc_fail_all(int on);
unsigned long uvs__alloc_count(void);

#endif /* UVSCHED_TEST_TASK_H_ */
