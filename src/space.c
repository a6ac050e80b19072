/* Room in a bounded worker (0.2): the queued count that bounds and
 * metrics read, and what room made there owes: space callbacks at
 * low_water, blocked producers woken at the refill mark, key_space_cb for
 * a per-key bound (0.3). Admission, which fills the room, is bound.c's;
 * the queue's exits (worker.c) and the drains (drain.c) make it.
 *
 * A worker counts its queued tasks only when it is bounded or keeps
 * metrics, so that the plain hot path pays nothing: producers add to q_in
 * (atomic), the drain adds to q_out_run (its own), and holders of the
 * scheduler's lock add to q_out_lock when they take a queued task out
 * (cancel, close, eviction). queued = q_in - q_out_run - q_out_lock.
 */

#include "internal.h"


uint64_t uvs__queued_now(uvs_worker_t* w) {
  uint64_t in;
  uint64_t out;

  /* The outs first: they only grow, so a stale sum overstates queued, and a
   * bound decided on it errs on the side of "full". */
  out = __atomic_load_n(&w->q_out_run, __ATOMIC_SEQ_CST) +
        __atomic_load_n(&w->q_out_lock, __ATOMIC_SEQ_CST);
  in = __atomic_load_n(&w->q_in, __ATOMIC_SEQ_CST);
  return in > out ? in - out : 0;
}


void uvs__note_max(uvs_worker_t* w, uint64_t queued) {
  uint64_t max;

  max = uvs__load_rlx(&w->queued_max);
  while (queued > max &&
         !__atomic_compare_exchange_n(&w->queued_max, &max, queued, 1,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}


/* Lists w on its scheduler's space list, owing the callbacks in what
 * (lock held); the loop calls them (call_space_cbs() in loop.c). */
static void owe_cb(uvs_worker_t* w, unsigned what) {
  uvs_sched_t* s;

  s = w->sched;
  if (w->space_owed == 0)
    uvs__queue_push(&s->space, &w->space_node);
  w->space_owed |= what;
  uvs__ring(s, UVS__BELL_SPACE);
}


void uvs__keys_space_check(uvs_worker_t* w) {
  unsigned news;

  news = uvs__keys_news(w);
  if ((news & UVS__KEYS_OWED) && !(w->space_owed & UVS__OWE_KEYS) &&
      !(w->flags & UVS__WF_CLOSING))
    owe_cb(w, UVS__OWE_KEYS);
  /* Waiters may wait for any key: each looks again at its own. */
  if ((news & UVS__KEYS_ROOM) && w->nwaiters != 0)
    uvs__wake_all(w);
}


/* Takes up to n of w's blocked producers off its list, oldest first,
 * woken (lock held); returns whether it took any, owed a broadcast of
 * room. */
static int take_waiters(uvs_worker_t* w, uint64_t n) {
  uvs__queue_t* q;
  uvs__waiter_t* waiter;
  unsigned taken;

  taken = 0;
  while (taken < n && (q = uvs__queue_shift(&w->waiters)) != NULL) {
    waiter = uvs__container_of(q, uvs__waiter_t, node);
    waiter->woken = 1;
    taken++;
  }
  if (taken == 0)
    return 0;
  __atomic_store_n(&w->nwaiters, w->nwaiters - taken, __ATOMIC_SEQ_CST);
  return 1;
}


void uvs__wake_all(uvs_worker_t* w) {
  if (take_waiters(w, UINT64_MAX))
    uv_cond_broadcast(&w->sched->room);
}


void uvs__space_check(uvs_worker_t* w, int locked) {
  uvs_sched_t* s;
  uint64_t queued;
  unsigned full;
  int owe;
  int wake;

  /* The out counts were raised with seq_cst (run_counted(), or under the
   * lock), and full and nwaiters are stored seq_cst: either we see a
   * producer's "full" and its wait, or it sees the room we made (admit()
   * looks again after it marks the worker full). A waiter stays listed
   * until it is woken, so the task whose start takes queued down to the
   * refill mark finds it. */
  full = __atomic_load_n(&w->full, __ATOMIC_SEQ_CST);
  wake = __atomic_load_n(&w->nwaiters, __ATOMIC_SEQ_CST) != 0;
  if (!full && !wake)
    return; /* the common case, per started task: nothing to count */
  owe = 0;
  queued = uvs__queued_now(w);
  if (full && queued <= w->low_water) {
    full = 1;
    owe = __atomic_compare_exchange_n(&w->full, &full, 0, 0, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED) &&
          w->space_cb != NULL;
  }
  wake = wake && queued <= uvs__refill_mark(w->max_pending);
  if (!owe && !wake)
    return;
  s = w->sched;
  if (!locked)
    uv_mutex_lock(&s->lock);
  if (owe && !(w->space_owed & UVS__OWE_SPACE) && !(w->flags & UVS__WF_CLOSING))
    owe_cb(w, UVS__OWE_SPACE);
  /* As many as there is room for, in the order they began to wait: the
   * rest sleep on, first in line for the next round. */
  queued = uvs__queued_now(w);
  wake = wake && queued < w->max_pending &&
         take_waiters(w, w->max_pending - queued);
  if (!locked)
    uv_mutex_unlock(&s->lock);
  /* After the unlock, so that the woken do not wake only to wait for the
   * lock: room outlives every waiter, and one that saw woken first has
   * nothing left to be told. */
  if (wake)
    uv_cond_broadcast(&s->room);
}


void uvs__unqueued(uvs_worker_t* w) {
  __atomic_store_n(&w->q_out_lock, uvs__load_rlx(&w->q_out_lock) + 1,
                   __ATOMIC_SEQ_CST);
  if (w->max_pending != 0)
    uvs__space_check(w, 1);
}
