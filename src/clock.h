/* clock.c's declarations: the CPU's tick counter and what it is trusted
 * to tell, and the time slices of drains and loop turns that it times.
 * Included by internal.h only, at its place in the layer order. */

/* ---- clock.c: the CPU's tick counter ---------------------------------- */
/* The counter: cheap, at a rate learnt at run time; 0 where there is none. */
static inline uint64_t uvs__ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
  uint64_t v;

  __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return 0;
#endif
}
/* Ticks per ms, rounded down; 0 until learnt. A hint of when to read the
 * real clock, never a time. */
extern uint64_t uvs__clock_per_ms;
/* Takes a reading of both clocks towards the rate (any thread). */
void uvs__clock_learn(void);
/* A time on the uv_hrtime() clock that is not earlier than the real time
 * at the call, and at most a few us later: from the counter where it is
 * trusted, else uv_hrtime() (any thread). */
uint64_t uvs__hrtime_late(void);

/* With the default budget a drain or loop turn yields after a time slice
 * rather than a count: a round trip through the loop to post the next drain
 * costs about as much as thousands of small tasks, and a loop turn of a few
 * dozen tasks makes a backlog of small ones wait for many loop iterations.
 * No task starts once the slice has passed, so long tasks get one per turn.
 * Batches of slots still start small and double, which bounds how many
 * tasks a drain moves out of the queue that it may have to put back. */
#define UVS__SLICE_NS 1000000

/* The slice is checked before every task but the first, so the check has
 * to cost less than an empty task: the CPU's tick counter (clock.c) says
 * when to look at the real clock, and the slice ends by uv_hrtime(). Until
 * the counter's rate is known, and where there is no counter, every check
 * reads uv_hrtime(). */
typedef struct {
  uint64_t end_ns;   /* 0: no slice, the budget counts tasks */
  uint64_t end_tick; /* look at the real clock from this tick on */
  uint64_t per_ms;
} uvs__slice_t;

static inline void uvs__slice_start(uvs__slice_t* sl) {
  uint64_t now;

  now = uv_hrtime();
  sl->end_ns = now + UVS__SLICE_NS;
  sl->per_ms = uvs__load_rlx(&uvs__clock_per_ms);
  if (sl->per_ms == 0) {
    uvs__clock_learn();
    sl->end_tick = 0;
  } else {
    sl->end_tick = uvs__ticks() + sl->per_ms;
  }
}

/* Has the slice passed? */
static inline int uvs__slice_over(uvs__slice_t* sl) {
  uint64_t now;

  if (sl->per_ms != 0 && uvs__ticks() < sl->end_tick)
    return 0;
  now = uv_hrtime();
  if (now >= sl->end_ns)
    return 1;
  if (sl->per_ms != 0)
    sl->end_tick = uvs__ticks() + (sl->end_ns - now) * sl->per_ms / 1000000;
  return 0;
}
