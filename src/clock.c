/* The CPU's tick counter, as a hint of when to read the real clock.
 *
 * A drain checks its time slice before every task (clock.h), which must
 * cost less than an empty task: the counter says when to look at
 * uv_hrtime(), and the slice ends by uv_hrtime(), so a wrong rate only
 * makes a drain look at the real clock sooner or later. No time the
 * contract depends on (a call's time, a due time, a wait) comes from the
 * counter: those read uv_hrtime().
 *
 * The rate is learnt once per process from two readings of both clocks at
 * least UVS__LEARN_NS apart; until then, and where there is no counter,
 * every slice check reads uv_hrtime(). */

#include "internal.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define UVS__LEARN_NS 20000000

/* The first reading; `state` is 0 before, 1 while one thread takes it, and
 * 2 once hr0 and tick0 are set. */
static struct {
  unsigned state; /* atomic */
  uint64_t hr0;
  uint64_t tick0;
} first;

uint64_t uvs__clock_per_ms; /* atomic: ticks per ms, rounded down */


/* The rate from the first reading and a later one: a uv_hrtime() reading
 * ns that came after the tick a. */
static void learn_rate(uint64_t a, uint64_t ns) {
  double per_ms;

  if (ns - first.hr0 < UVS__LEARN_NS || a <= first.tick0)
    return;
  per_ms = (double) (a - first.tick0) * 1e6 / (double) (ns - first.hr0);
  /* A counter slower than 10 MHz or faster than 100 GHz is not one to
   * trust; keep reading the real clock. */
  if (per_ms < 1e4 || per_ms > 1e8)
    return;
  uvs__store_rlx(&uvs__clock_per_ms, (uint64_t) per_ms);
}


/* Takes a reading towards the rate from a, ns and b, a uv_hrtime() reading
 * between two ticks. */
static void learn(uint64_t a, uint64_t ns, uint64_t b) {
  unsigned st;

  if (uvs__load_rlx(&uvs__clock_per_ms) != 0 || b == 0)
    return;
  st = uvs__load_acq(&first.state);
  if (st == 2) {
    learn_rate(a, ns);
    return;
  }
  if (st != 0 ||
      !__atomic_compare_exchange_n(&first.state, &st, 1, 0, __ATOMIC_ACQUIRE,
                                   __ATOMIC_RELAXED))
    return; /* another thread takes the first reading */
  first.hr0 = ns;
  first.tick0 = b;
  uvs__store_rel(&first.state, 2);
}


/* A reading towards the rate; returns its uv_hrtime(). */
static uint64_t learn_now(void) {
  uint64_t a;
  uint64_t ns;
  uint64_t b;

  a = uvs__ticks();
  ns = uv_hrtime();
  b = uvs__ticks();
  learn(a, ns, b);
  return ns;
}


void uvs__clock_learn(void) {
  (void) learn_now();
}
