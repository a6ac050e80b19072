/* The lanes of a wide worker (width > 1): how many run, and when one is
 * posted. A lane is one uv_queue_work item of the worker's (keys.c holds
 * them with the key table); its turn is drain.c's, with one task at a
 * time from kready. dispatch() (loop.c) serves each listed wide worker
 * here: a lane for every task that could start, as far as the width and
 * the scheduler's cap leave room (guarantee 12). A lane that ends frees
 * its place and, if anything is left, lists the worker again. Lock held
 * throughout, on the loop thread.
 */

#include "internal.h"

#include <stdlib.h>


static void lane_work(uv_work_t* req) {
  uvs__lane_t* lane;

  lane = uvs__container_of(req, uvs__lane_t, work);
  uvs__tls.pool = 1;
  uvs__lane_turn(lane);
}


/* A wide worker wants a look from dispatch(): it is listed once, until
 * dispatch() takes it off the list. Lock held. */
static void want_lanes(uvs_worker_t* w) {
  unsigned idle;

  idle = UVS__WS_IDLE;
  if (__atomic_compare_exchange_n(&w->state, &idle, UVS__WS_SCHEDULED, 0,
                                  __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
    uvs__worker_make_ready(w);
}


/* Takes one more lane of a wide worker, to be posted once the lock is let
 * go; lanes_active < width says one of its lanes is free. */
static void post_lane(uvs_sched_t* s, uvs_worker_t* w) {
  uvs__lane_t* lane;
  unsigned i;

  for (i = 0; uvs__keys_lane(w, i)->active; i++)
    ;
  lane = uvs__keys_lane(w, i);
  lane->active = 1;
  lane->seeking = 1;
  uvs__keys_seeking(w, 1);
  uvs__store_rel(&w->lanes_active, w->lanes_active + 1);
  s->drains++;
  s->stats.drains++;
  /* Posted once the lock is let go (uvs__lane_post): the pool thread it
   * wakes would otherwise find the lock held and sleep on it again. */
  lane->owed_next = s->lane_owed;
  s->lane_owed = lane;
}


void uvs__lane_post(uvs__lane_t* lane, uv_after_work_cb lane_done) {
  if (uv_queue_work(lane->w->sched->loop, &lane->work, lane_work, lane_done) !=
      0)
    abort();
}


/* Takes a lane for each task of a listed wide worker that one could
 * start, as far as the width and the cap leave room. Returns 0 if the cap
 * left it wanting more: then it goes back to the head of list. Lock
 * held. */
int uvs__serve_wide(uvs_sched_t* s, uvs_worker_t* w, uvs__queue_t* list) {
  unsigned want;
  unsigned idle;
  int busy;

  uvs__queue_remove(&w->ready_node);
  w->phase = UVS__P_IDLE;
  /* From here a producer lists it again; what came before is taken in
   * below. */
  __atomic_store_n(&w->state, UVS__WS_IDLE, __ATOMIC_SEQ_CST);
  if (uvs__cancelling(w)) {
    uvs__ring(s, UVS__BELL_CLOSE); /* late arrivals don't run: the loop
                                    * sweeps them */
    return 1;
  }
  busy = uvs__keys_intake(w) == UV_EAGAIN;
  want = uvs__keys_lanes_wanted(w);
  while (want > 0 && uvs__room(s)) {
    post_lane(s, w);
    want--;
  }
  if (want > 0) {
    idle = UVS__WS_IDLE;
    if (__atomic_compare_exchange_n(&w->state, &idle, UVS__WS_SCHEDULED, 0,
                                    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
      w->phase = UVS__P_READY;
      uvs__queue_unshift(list, &w->ready_node);
    }
    return 0;
  }
  /* A push caught between its two steps, whose producer may have seen the
   * worker listed: look again once it has linked. */
  if (busy)
    want_lanes(w);
  return 1;
}


/* A lane ended: its place is free, and what it leaves behind asks for a
 * lane again. */
void uvs__lane_ended(uvs__lane_t* lane) {
  uvs_worker_t* w;

  w = lane->w;
  w->sched->drains--;
  lane->active = 0;
  if (lane->seeking) {
    lane->seeking = 0;
    uvs__keys_seeking(w, -1);
  }
  /* The other half of uvs__worker_push()'s hand-off for a wide worker:
   * a producer that found every lane busy wanted none; this end looks at
   * the queue after it frees a lane, so one of the two sees the other. */
  __atomic_store_n(&w->lanes_active, w->lanes_active - 1, __ATOMIC_SEQ_CST);
  if (w->flags & UVS__WF_CLOSING)
    uvs__ring(w->sched, UVS__BELL_CLOSE); /* the loop sweeps and completes
                                           * closes (close.c) */
  if (uvs__worker_nonempty(w))
    want_lanes(w);
}
