/* The doorbell: what the loop owes, and the one way to wake it. Included
 * by internal.h only. Calls only libuv.
 *
 * Whoever needs the loop thread sets why in sched->owed and rings; the
 * loop's callbacks (loop.c, settle()) take the bits and do what they say,
 * and nothing else: as libuv's threadpool.c puts a finished request on a
 * list and calls uv_async_send(), and uv__work_done drains that list. */

/* Is the calling thread `t`? On every hot path, so without libuv's two
 * out-of-line calls where uv_thread_t is a pthread_t. */
#ifndef _WIN32
#include <pthread.h>
static inline int uvs__is_thread(const uv_thread_t* t) {
  return pthread_equal(pthread_self(), *t);
}
#else
static inline int uvs__is_thread(const uv_thread_t* t) {
  uv_thread_t self;

  self = uv_thread_self();
  return uv_thread_equal(&self, t);
}
#endif

static inline int uvs__on_loop_thread(const uvs_sched_t* s) {
  return uvs__is_thread(&s->thread);
}

enum {
  UVS__BELL_DISPATCH = 1, /* a pool or wide worker is ready: drains, lanes */
  UVS__BELL_TURN = 2,     /* a loop worker is ready: a loop turn */
  UVS__BELL_DELIVER = 4,  /* hand-backs wait on done_top */
  UVS__BELL_TIMER = 8,    /* the wheel changed: arm the uv_timer anew */
  UVS__BELL_SPACE = 16,   /* space callbacks are owed, on sched->space */
  UVS__BELL_CLOSE = 32,   /* a close may move on */
  UVS__BELL_PARKED = 64,  /* sched->parked changed: hold the loop or not */
  /* Not a reason: the loop is settling and will look at owed again before
   * it stops, so a ring from another thread need not wake it. */
  UVS__BELL_SETTLING = 1 << 30
};

/* Any thread, any lock. From another thread the first bit rung since the
 * loop last took them sends the async; on the loop thread, outside its own
 * callbacks (a user's callback, or before uv_run), the idle handle makes
 * the loop look before it next polls. Nothing is done here but that. */
static inline void uvs__ring(uvs_sched_t* s, unsigned why) {
  unsigned prev;

  prev = __atomic_fetch_or(&s->owed, why, __ATOMIC_ACQ_REL);
  if (uvs__on_loop_thread(s)) {
    if (!(s->flags & UVS__SF_SETTLING))
      uv_idle_start(&s->idle, s->on_idle);
    return;
  }
  /* Whoever rings holds something that keeps the async handle open: a pin
   * on a worker that can't finish closing, or a drain in flight. */
  if (prev == 0)
    uv_async_send(&s->async);
}
