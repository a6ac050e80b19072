/* The timer wheel against a brute-force model: random inserts (due now, in
 * ms, in seconds, in years), removes and expiries, including long jumps as
 * after a blocked loop. Internal: it uses src/internal.h. */

#include "task.h"
#include "internal.h"

#define NTASKS 20000

static uvs_task_t wt[NTASKS];
static int in_wheel[NTASKS];
static uint64_t inserted_as[NTASKS];
static uint64_t now_ms;
static uint64_t prev_now_ms;
static uint64_t last_due;
static uint64_t last_seq;
static uint64_t nfired;


static uint64_t rnd(void) {
  static uint64_t x = 88172645463325252ull;

  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}


static void model_fire(void* ctx, uvs_task_t* t) {
  int i;

  (void) ctx;
  i = (int) (t - wt);
  ASSERT_EQ(in_wheel[i], 1);
  in_wheel[i] = 0;
  ASSERT_UINT64_LE(t->due, now_ms); /* never early */
  /* Tasks that fell due since the last expiry come in due order, ties in
   * insertion order. (Tasks inserted already overdue come first, in
   * insertion order.) */
  if (t->due > prev_now_ms) {
    ASSERT_UINT64_GE(t->due, last_due);
    if (t->due == last_due)
      ASSERT_UINT64_GT(inserted_as[i], last_seq);
    last_due = t->due;
    last_seq = inserted_as[i];
  }
  nfired++;
}


static uint64_t random_delay(void) {
  uint64_t r;

  r = rnd() % 100;
  if (r < 10)
    return 0;
  if (r < 55)
    return rnd() % 70;
  if (r < 80)
    return rnd() % 5000;
  if (r < 95)
    return rnd() % 400000;
  return rnd() % ((uint64_t) 1 << 40);
}


TEST_IMPL(wheel_model_random) {
  uvs__timers_t* w;
  uint64_t seq;
  uint64_t min_due;
  uint64_t next;
  int round;
  int i;
  int k;

  seq = 0;
  now_ms = 1000000 + rnd() % 100000;
  ASSERT_OK(uvs__timers_init(&w, now_ms));
  for (round = 0; round < 3000; round++) {
    for (i = 0; i < 20; i++) {
      k = (int) (rnd() % NTASKS);
      if (in_wheel[k])
        continue;
      /* Now and then one already overdue, as a late periodic re-insert. */
      wt[k].due = now_ms + random_delay();
      if (rnd() % 30 == 0)
        wt[k].due = now_ms - rnd() % 50;
      uvs__queue_init(&wt[k].tnode);
      uvs__timers_insert(w, &wt[k]);
      in_wheel[k] = 1;
      inserted_as[k] = ++seq;
    }
    for (i = 0; i < 5; i++) {
      k = (int) (rnd() % NTASKS);
      if (!in_wheel[k])
        continue;
      uvs__timers_remove(w, &wt[k]);
      in_wheel[k] = 0;
    }

    /* next() is never later than the earliest due time. */
    min_due = UINT64_MAX;
    for (i = 0; i < NTASKS; i++)
      if (in_wheel[i] && wt[i].due < min_due)
        min_due = wt[i].due;
    next = uvs__timers_next(w);
    if (min_due > now_ms)
      ASSERT_UINT64_LE(next, min_due);
    else
      ASSERT_UINT64_LE(next, now_ms);

    prev_now_ms = now_ms;
    now_ms += rnd() % 100 < 90 ? rnd() % 40 : rnd() % 200000;
    last_due = 0;
    last_seq = 0;
    uvs__timers_expire(w, now_ms, model_fire, NULL);
    /* Nothing due is left behind. */
    for (i = 0; i < NTASKS; i++)
      if (in_wheel[i])
        ASSERT_UINT64_GT(wt[i].due, now_ms);
  }
  ASSERT_UINT64_GT(nfired, 10000);
  uvs__timers_free(w);
  return 0;
}
