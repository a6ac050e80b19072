/* The CPU's tick counter, and what it is trusted to tell.
 *
 * uv_hrtime() costs 25-50 ns on the VMs measured; the tick counter a third
 * of that. Time slices use the counter as a hint of when to look at the
 * real clock (clock.h). uvs_schedule_after() and uvs_task_reschedule() use
 * it for their call time, which guarantee 6 needs to be never early, and
 * a task's ready time (max_wait_ms, the wait histogram) comes from it too:
 * a time estimated from a tick must not lie before the real one.
 *
 * The rate is learnt once per process from two readings of both clocks at
 * least UVS__LEARN_NS apart. Each reading brackets uv_hrtime() between two
 * ticks, so that the ticks between the first reading's later tick and the
 * second's earlier one are a lower bound on the ticks that passed between
 * the two real times. A rate taken below that bound by 1/256 (3900 ppm,
 * several times the 500 ppm by which NTP may slew the real clock) gives an
 * upper bound on the ns per tick.
 *
 * Each thread then estimates from a base of its own: a tick read before a
 * uv_hrtime() reading, so that the reading is not earlier than the tick's
 * real time. An estimate is the base plus the ticks since, at the upper
 * bound of ns per tick, plus UVS__SKEW_NS for counters of two cores that
 * differ by a little. A thread takes a new base once its base is a ms old,
 * so an estimate is at most a few us late; each new base checks the old
 * one's estimate against the real clock, and one found early stops all
 * estimating for the process.
 *
 * Only counters known to run at one rate on every core are trusted with
 * estimates: on x86, where the kernel keeps time by the TSC (it checks the
 * TSC for that), and the generic timer of aarch64. Elsewhere every call
 * time is uv_hrtime(). */

#include "internal.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define UVS__LEARN_NS 20000000
#define UVS__SKEW_NS 1000

/* The first reading; `state` is 0 before, 1 while one thread takes it, and
 * 2 once hr0 and tick0 are set. */
static struct {
  unsigned state; /* atomic */
  uint64_t hr0;
  uint64_t tick0;
  unsigned distrusted; /* atomic: an estimate was found early */
} first;

uint64_t uvs__clock_per_ms; /* atomic: ticks per ms, rounded down */
static uint64_t clock_mult; /* atomic: 2^32 x ns per tick, rounded up */
static uint64_t clock_span; /* atomic: ticks in under a ms */

/* A thread's base for estimates; span 0: take a new base at the next call. */
static UVS__TLS struct {
  uint64_t tick;
  uint64_t ns;
  uint64_t mult;
  uint64_t span;
} base;


/* May estimates rest on the counter? */
static int counter_trusted(void) {
#if defined(__x86_64__) || defined(__i386__)
  char buf[16];
  ssize_t n;
  int fd;

  fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
            O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  return n == 4 && memcmp(buf, "tsc\n", 4) == 0;
#elif defined(__aarch64__)
  return 1;
#else
  return 0;
#endif
}


/* The rate from the first reading and a later one: a uv_hrtime() reading
 * ns that came after the tick a. */
static void learn_rate(uint64_t a, uint64_t ns) {
  double per_ms;
  double low;

  if (ns - first.hr0 < UVS__LEARN_NS || a <= first.tick0)
    return;
  per_ms = (double) (a - first.tick0) * 1e6 / (double) (ns - first.hr0);
  /* A counter slower than 10 MHz or faster than 100 GHz is not one to
   * trust; keep reading the real clock. */
  if (per_ms < 1e4 || per_ms > 1e8)
    return;
  if (counter_trusted() && !uvs__load_acq(&first.distrusted)) {
    low = per_ms * (1.0 - 1.0 / 256);
    uvs__store_rlx(&clock_span, (uint64_t) low);
    __atomic_store_n(&clock_mult, (uint64_t) (4294967296.0 * 1e6 / low) + 1,
                     __ATOMIC_SEQ_CST);
    /* A thread that found an estimate early (with a rate another thread
     * learnt a moment before) stores the flag, then clears mult. If that
     * clear came before this store, this load sees the flag: either way
     * mult ends 0. */
    if (__atomic_load_n(&first.distrusted, __ATOMIC_SEQ_CST))
      __atomic_store_n(&clock_mult, 0, __ATOMIC_SEQ_CST);
  }
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


static uint64_t estimate(uint64_t ticks) {
  return base.ns + (((ticks - base.tick) * base.mult) >> 32) + UVS__SKEW_NS;
}


static uint64_t rebase(void) {
  uint64_t a;
  uint64_t ns;
  uint64_t b;
  uint64_t mult;

  mult = uvs__load_acq(&clock_mult);
  if (mult == 0) {
    base.span = 0;
    /* Once the rate is learnt, no mult means a counter not trusted with
     * estimates: the real clock, at its own cost and no more. */
    if (uvs__load_rlx(&uvs__clock_per_ms) != 0)
      return uv_hrtime();
    return learn_now();
  }
  a = uvs__ticks();
  ns = uv_hrtime();
  b = uvs__ticks();
  /* b's real time is not before ns: an estimate of it below ns would have
   * been early. A base over 64 ms old is too old to check. */
  if (base.span != 0 && b - base.tick < 64 * base.span && b >= base.tick &&
      estimate(b) < ns) {
    __atomic_store_n(&first.distrusted, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&clock_mult, 0, __ATOMIC_SEQ_CST);
    base.span = 0;
    return ns;
  }
  base.tick = a;
  base.ns = ns;
  base.mult = mult;
  base.span = uvs__load_rlx(&clock_span);
  return ns;
}


uint64_t uvs__hrtime_late(void) {
  uint64_t t;

  if (base.span != 0) {
    t = uvs__ticks();
    /* A tick below the base (another core's counter, a little behind)
     * wraps to a large difference: a new base. */
    if (t - base.tick < base.span)
      return estimate(t);
  }
  return rebase();
}
