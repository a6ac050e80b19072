/* The time slices of drains and loop turns. Included by internal.h only,
 * at its place in the layer order. */

/* With the default budget a drain or loop turn yields after a time slice
 * rather than a count: a round trip through the loop to post the next drain
 * costs about as much as thousands of small tasks, and a loop turn of a few
 * dozen tasks makes a backlog of small ones wait for many loop iterations.
 * No task starts once the slice has passed, so long tasks get one per turn.
 * Batches of slots still start small and double, which bounds how many
 * tasks a drain moves out of the queue that it may have to put back. */
#define UVS__SLICE_NS 1000000

/* A pool drain's hold (SPEC 0.5, hold_us): when a turn ends, the drain
 * takes the next ready worker's turn on the same thread rather than give
 * the thread back, until no worker is ready for it or it has held the
 * thread this long, by default. */
#define UVS__HOLD_NS 10000000

/* A slice ends by uv_hrtime(), the one clock uvsched reads: the check
 * before every task but the first is one read of it (a vDSO call, 20-50 ns
 * on the machines measured). */
typedef struct {
  uint64_t end_ns; /* 0: no slice, the budget counts tasks */
} uvs__slice_t;

static inline void uvs__slice_start(uvs__slice_t* sl) {
  sl->end_ns = uv_hrtime() + UVS__SLICE_NS;
}

/* Has the slice passed? */
static inline int uvs__slice_over(const uvs__slice_t* sl) {
  return uv_hrtime() >= sl->end_ns;
}
