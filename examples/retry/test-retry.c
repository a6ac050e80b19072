/* test-retry: the retry helper (retry.c) against a scheduler with a manual
 * clock. Ten minutes of backoff run in a few milliseconds of real time, and
 * every attempt is checked to start at its exact virtual time: the clock is
 * moved to one ms before each expected attempt (nothing may run), then by
 * one ms (the attempt must run, seeing exactly that time). Nothing sleeps.
 *
 * With a manual clock, uvs_clock_advance() only moves delayed tasks that
 * fall due onto their workers' queues; uv_run() then runs them and the
 * done_cbs that schedule the next attempt. Delayed tasks do not keep the
 * loop alive under a manual clock, so uv_run(UV_RUN_DEFAULT) returns as
 * soon as nothing is queued or running: each step is "advance, then run".
 */

#include "retry.h"
#include "../example.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define MAX_ATTEMPTS 64
#define TEN_MINUTES_MS (10 * 60 * 1000)

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uint64_t t0; /* the virtual time each case starts at */

typedef struct attempt_log_s {
  uint64_t at[MAX_ATTEMPTS]; /* virtual ms since t0, written by the op */
  unsigned n;
  unsigned succeed_on; /* the attempt that succeeds; 0 = never */
  int ended;
  int status;
  uint64_t ended_at;
} attempt_log_t;


/* A pool thread; attempts of one retry never overlap and each
 * happens-before the next (one worker, guarantee 2). */
static int flaky_op(retry_t* r) {
  attempt_log_t* log = r->data;

  EXPECT(log->n < MAX_ATTEMPTS);
  log->at[log->n++] = uvs_now(&sched) - t0;
  if (log->succeed_on != 0 && log->n == log->succeed_on)
    return 0;
  return UV_ECONNREFUSED;
}


static void on_end(retry_t* r, int status) {
  attempt_log_t* log = r->data;

  EXPECT(!log->ended);
  log->ended = 1;
  log->status = status;
  log->ended_at = uvs_now(&sched) - t0;
}


static uint64_t vnow(void) {
  return uvs_now(&sched) - t0;
}


/* Moves virtual time to t0 + to and runs what fell due. */
static void advance_to(uint64_t to) {
  EXPECT(to >= vnow());
  CHECK(uvs_clock_advance(&sched, to - vnow()));
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT(vnow() == to);
}


static void start(retry_t* r, attempt_log_t* log, const retry_options_t* o) {
  memset(r, 0, sizeof(*r));
  r->data = log;
  t0 = uvs_now(&sched);
  CHECK(retry_start(r, &worker, o, flaky_op, on_end));
  uv_run(&loop, UV_RUN_DEFAULT); /* the first attempt, at once */
}


/* Steps through want[0..n): at each, one ms before must find nothing new,
 * the ms itself exactly one attempt at exactly that time. */
static void expect_attempts(attempt_log_t* log,
                            const uint64_t* want,
                            unsigned n) {
  unsigned i;

  EXPECT(log->n == 1 && log->at[0] == want[0]);
  for (i = 1; i < n; i++) {
    EXPECT(!log->ended);
    advance_to(want[i] - 1);
    EXPECT(log->n == i); /* never early */
    advance_to(want[i]);
    EXPECT(log->n == i + 1);
    EXPECT(log->at[i] == want[i]);
  }
}


/* Always failing, with a 10 minute deadline: 100 ms doubling to 51.2 s,
 * then 60 s apart; the attempt that would start at 642.3 s is past the
 * deadline, so the retry ends at the 19th attempt with UV_ETIMEDOUT. */
static void retry_deadline(void) {
  static const uint64_t want[] = {0,      100,    300,    700,    1500,
                                  3100,   6300,   12700,  25500,  51100,
                                  102300, 162300, 222300, 282300, 342300,
                                  402300, 462300, 522300, 582300};
  retry_options_t o = {100, 60000, 0, TEN_MINUTES_MS};
  attempt_log_t log;
  retry_t r;
  uint64_t real0;

  memset(&log, 0, sizeof(log));
  real0 = uv_hrtime();
  start(&r, &log, &o);
  expect_attempts(&log, want, sizeof(want) / sizeof(want[0]));
  EXPECT(log.ended && log.status == UV_ETIMEDOUT);
  EXPECT(log.ended_at == 582300);
  /* The rest of the ten minutes and beyond: nothing more runs. */
  advance_to(TEN_MINUTES_MS);
  advance_to(2 * TEN_MINUTES_MS);
  EXPECT(log.n == 19 && r.attempts == 19);
  EXPECT(r.last_err == UV_ECONNREFUSED);
  printf("retry_deadline: 19 attempts over %" PRIu64
         " ms of virtual time in %.3f ms of real time\n",
         (uint64_t) 2 * TEN_MINUTES_MS, (double) (uv_hrtime() - real0) / 1e6);
}


/* Success on the fifth attempt ends the retry there, with 0. */
static void retry_success(void) {
  static const uint64_t want[] = {0, 100, 300, 700, 1500};
  attempt_log_t log;
  retry_t r;

  memset(&log, 0, sizeof(log));
  log.succeed_on = 5;
  start(&r, &log, NULL);
  expect_attempts(&log, want, 5);
  EXPECT(log.ended && log.status == 0 && log.ended_at == 1500);
  advance_to(TEN_MINUTES_MS);
  EXPECT(log.n == 5);
}


/* max_attempts spent: the last attempt's error. A custom first backoff and
 * cap: 250, 500, 750, 750. */
static void retry_max_attempts(void) {
  static const uint64_t want[] = {0, 250, 750, 1500, 2250};
  retry_options_t o = {250, 750, 5, 0};
  attempt_log_t log;
  retry_t r;

  memset(&log, 0, sizeof(log));
  start(&r, &log, &o);
  expect_attempts(&log, want, 5);
  EXPECT(log.ended && log.status == UV_ECONNREFUSED && log.ended_at == 2250);
  advance_to(TEN_MINUTES_MS);
  EXPECT(log.n == 5);
}


/* A cancel during a backoff hands the delayed attempt back at once. */
static void retry_cancel_in_backoff(void) {
  attempt_log_t log;
  retry_t r;

  memset(&log, 0, sizeof(log));
  start(&r, &log, NULL);
  advance_to(100); /* the second attempt */
  advance_to(250);
  EXPECT(log.n == 2 && !log.ended);
  CHECK(retry_cancel(&r));
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT(log.ended && log.status == UV_ECANCELED && log.ended_at == 250);
  EXPECT(retry_cancel(&r) == UV_EBUSY);
  advance_to(TEN_MINUTES_MS);
  EXPECT(log.n == 2);
}


/* One advance over the whole ten minutes runs one attempt, not nineteen:
 * uvs_clock_advance() fires what is delayed when it is called, and the next
 * attempt is scheduled only by the done_cb of the one before, which runs in
 * uv_run() afterwards, at the new time. Step the clock to test a chain. */
static void retry_one_big_advance(void) {
  attempt_log_t log;
  retry_t r;

  memset(&log, 0, sizeof(log));
  start(&r, &log, NULL);
  advance_to(TEN_MINUTES_MS);
  EXPECT(log.n == 2 && log.at[1] == TEN_MINUTES_MS);
  EXPECT(!log.ended);
  CHECK(retry_cancel(&r));
  uv_run(&loop, UV_RUN_DEFAULT);
  EXPECT(log.ended && log.status == UV_ECANCELED);
}


int main(void) {
  uvs_sched_options_t so;

  memset(&so, 0, sizeof(so));
  so.manual_clock = 1;
  CHECK(uv_loop_init(&loop));
  CHECK(uvs_sched_init(&loop, &sched, &so));
  CHECK(uvs_worker_init(&sched, &worker, UVS_POOL));

  retry_deadline();
  retry_success();
  retry_max_attempts();
  retry_cancel_in_backoff();
  retry_one_big_advance();

  CHECK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
  uv_run(&loop, UV_RUN_DEFAULT);
  CHECK(uv_loop_close(&loop));
  printf("test-retry: ok\n");
  return 0;
}
