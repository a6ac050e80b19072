/* Admission (0.2, 0.3): a task counted into a bounded worker at every
 * entrance (a schedule, a post, a delayed task falling due, a blocked
 * producer), against the worker's max_pending and its key's
 * key_max_pending, and the three policies for a full one (reject, block,
 * drop the oldest). The count itself and what room owes are space.c's;
 * the oldest queued task is taken out by the queue (worker.c).
 */

#include "keytab.h"


/* DROP_OLDEST on a full worker (lock held): the new task counts in, and
 * the oldest queued one goes back with UV_ENOBUFS. The new task counts in
 * first, so queued never dips below full on the way and no space_cb is
 * owed for an eviction. */
static void evict_for(uvs_worker_t* w) {
  uvs__add_sc(&w->q_in, 1);
  w->evict_owed++;
  uvs__evict_owed(w);
}


void uvs__evict_owed(uvs_worker_t* w) {
  uvs_task_t* t;

  /* Every task counted may be out of reach for now: behind a producer
   * that counted it and has not linked it into the inbox yet. Instead of
   * waiting for that producer under the lock, the eviction stays owed, and
   * the next drain to fill a batch settles it before it starts anything,
   * if the worker is still over its bound by then. */
  while (w->evict_owed != 0) {
    if (uvs__queued_now(w) <= w->max_pending) {
      w->evict_owed = 0;
      break;
    }
    t = uvs__take_oldest(w);
    if (t == NULL)
      break;
    w->evict_owed--;
    uvs__evicted(w, t);
  }
  if (w->key_max != 0)
    uvs__keys_space_check(w);
}


void uvs__evicted(uvs_worker_t* w, uvs_task_t* t) {
  /* A periodic task is only ever handed back cancelled (guarantee 3):
   * evicted, it skips this grid point instead. */
  if (uvs__load_rlx(&t->state) & UVS__T_PERIODIC) {
    uvs__skip_grid_point(w, t);
    return;
  }
  w->ndropped++;
  uvs__drop(w->sched, t, UV_ENOBUFS);
}


/* The worker was full: space_cb is owed once it falls to low_water. A
 * drain that made room just now may not have seen the mark: look again. */
static void mark_full(uvs_worker_t* w, int locked) {
  __atomic_store_n(&w->full, 1, __ATOMIC_SEQ_CST);
  if (uvs__queued_now(w) <= w->low_water)
    uvs__space_check(w, locked);
}


int uvs__admit(uvs_worker_t* w, int locked) {
  uint64_t in;
  uint64_t out;

  if (w->max_pending == 0) {
    /* Counted for metrics only. */
    in = uvs__add_sc(&w->q_in, 1) + 1;
    out = uvs__load_acq(&w->q_out_run) + uvs__load_acq(&w->q_out_lock);
    uvs__note_max(w, in > out ? in - out : 0);
    return 0;
  }
  in = uvs__load_acq(&w->q_in);
  for (;;) {
    out = uvs__load_acq(&w->q_out_run) + uvs__load_acq(&w->q_out_lock);
    if (in - out >= w->max_pending)
      break;
    if (__atomic_compare_exchange_n(&w->q_in, &in, in + 1, 1, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST)) {
      uvs__note_max(w, in + 1 - out);
      if (in + 1 - out >= w->max_pending)
        mark_full(w, locked);
      return 0;
    }
  }
  mark_full(w, locked);
  if (w->on_full != UVS_FULL_DROP_OLDEST)
    return UV_EAGAIN; /* the call that asked counts it, once */
  if (!locked)
    uv_mutex_lock(&w->sched->lock);
  evict_for(w);
  if (!locked)
    uv_mutex_unlock(&w->sched->lock);
  uvs__note_max(w, w->max_pending);
  return 0;
}


/* Is a task of key full on w: the worker at max_pending, or its key at
 * key_max_pending? Lock held. */
static int full_for(uvs_worker_t* w, uint64_t key) {
  return (w->max_pending != 0 && uvs__queued_now(w) >= w->max_pending) ||
         uvs__keys_key_full(w, key);
}


int uvs__wait_room(uvs_worker_t* w,
                   uvs__waiter_t* waiter,
                   uint64_t key,
                   uint64_t deadline) {
  uvs_sched_t* s;
  uint64_t now;
  int err;

  s = w->sched;
  uv_mutex_lock(&s->lock);
  waiter->woken = 0;
  uvs__queue_push(&w->waiters, &waiter->node);
  __atomic_store_n(&w->nwaiters, w->nwaiters + 1, __ATOMIC_SEQ_CST);
  /* Room made before we were listed is seen here (see space_check). Once
   * asleep, a waiter sleeps until it is woken, which is when queued (or
   * its key's count) is down to the refill mark and its turn has come, or
   * a close, or its deadline: then it takes whatever room there is. A
   * broadcast for other waiters finds it not woken: it sleeps on. */
  if (full_for(w, key)) {
    while (!waiter->woken && !uvs__shut(s, w)) {
      now = uv_hrtime();
      if (now >= deadline ||
          uv_cond_timedwait(&s->room, &s->lock, deadline - now) != 0)
        break;
    }
  }
  if (!waiter->woken) {
    uvs__queue_remove(&waiter->node);
    __atomic_store_n(&w->nwaiters, w->nwaiters - 1, __ATOMIC_SEQ_CST);
  }
  err = 0;
  if (uvs__shut(s, w))
    err = UV_ESHUTDOWN;
  else if (!waiter->woken && full_for(w, key) && uv_hrtime() >= deadline)
    err = UV_ETIMEDOUT;
  uv_mutex_unlock(&s->lock);
  return err;
}


/* ---- per-key bounds (key_max_pending) ------------------------------- */
/* With a bound, tasks are filed under their keys as they are accepted, not
 * taken in from the inbox later, so that every queued task of a key is
 * counted in its entry and its oldest is at hand for DROP_OLDEST (the
 * entry's count lives in keys.c, beside the entry). */


int uvs__keys_admit(uvs_worker_t* w, uvs_task_t* t, uvs_task_t** evicted) {
  uvs__keys_t* k;
  uvs__kent_t* e;
  int was_full;

  *evicted = NULL;
  if (uvs__task_key(t) == 0)
    return 0;
  k = w->keys;
  e = uvs__kt_lookup(k, t->key);
  if (e == NULL) {
    e = uvs__kt_new(k, t->key);
    if (e == NULL)
      return UV_ENOMEM;
  }
  if (__atomic_load_n(&e->queued, __ATOMIC_SEQ_CST) >= w->key_max) {
    was_full = __atomic_exchange_n(&e->full, 1, __ATOMIC_SEQ_CST);
    /* A lane that counted a task out just now may not have seen the
     * mark: look again (uvs__keys_started). With room after all, this
     * schedule found the key not full, and owes nobody a callback. */
    if (__atomic_load_n(&e->queued, __ATOMIC_SEQ_CST) < w->key_max) {
      if (!was_full)
        __atomic_store_n(&e->full, 0, __ATOMIC_SEQ_CST);
    } else {
      if (w->on_full != UVS_FULL_DROP_OLDEST)
        return UV_EAGAIN;
      *evicted = uvs__keys_oldest_of(w, e);
      if (*evicted == NULL && e->filing > e->doomed) {
        /* Nothing filed: the key's oldest are on their way in, counted
         * (uvs__keys_filing). One of them goes instead, out of the counts
         * now and handed back as it comes to be filed (uvs__keys_filed). */
        e->doomed++;
        uvs__unqueued(w);
        return 0;
      }
      /* The new task counts in first: the count never dips on the way,
       * so an eviction owes no key_space_cb. */
      __atomic_fetch_add(&e->queued, 1, __ATOMIC_SEQ_CST);
      if (*evicted != NULL && uvs__take_out(w, *evicted) != 0)
        *evicted = NULL;
      return 0;
    }
  }
  __atomic_fetch_add(&e->queued, 1, __ATOMIC_SEQ_CST);
  return 0;
}


void uvs__keys_unadmit(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (uvs__task_key(t) == 0)
    return;
  e = uvs__kt_lookup(w->keys, t->key);
  __atomic_fetch_sub(&e->queued, 1, __ATOMIC_SEQ_CST);
  uvs__kt_maybe_del(w->keys, e);
}


void uvs__keys_filing(uvs_worker_t* w, uvs_task_t* t) {
  if (uvs__task_key(t) != 0)
    uvs__kt_lookup(w->keys, t->key)->filing++;
}


int uvs__keys_filed(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (uvs__task_key(t) == 0)
    return 0;
  e = uvs__kt_lookup(w->keys, t->key);
  e->filing--;
  if (e->doomed == 0)
    return 0;
  e->doomed--;
  uvs__kt_maybe_del(w->keys, e);
  return 1;
}


int uvs__keys_reserve(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (uvs__task_key(t) == 0)
    return 0;
  e = uvs__kt_lookup(w->keys, t->key);
  if (e == NULL) {
    e = uvs__kt_new(w->keys, t->key);
    if (e == NULL)
      return UV_ENOMEM;
  }
  __atomic_fetch_add(&e->queued, 1, __ATOMIC_SEQ_CST);
  return 0;
}


int uvs__keys_key_full(uvs_worker_t* w, uint64_t key) {
  uvs__kent_t* e;

  if (w->key_max == 0 || key == 0)
    return 0;
  e = uvs__kt_lookup(w->keys, key);
  return e != NULL &&
         __atomic_load_n(&e->queued, __ATOMIC_SEQ_CST) >= w->key_max;
}


/* ---- falling due: the entrance of delayed tasks ------------------------ */

/* Counts a task that fell due into its worker's bounds, as a schedule
 * would be counted: first its key's (key_max_pending), then the worker's
 * (max_pending), each of which may evict its oldest queued task with
 * UVS_FULL_DROP_OLDEST. Returns UV_EAGAIN if either is full and rejects,
 * having counted nothing; sets *keyed if the key's count took it. */
static int admit_due(uvs_worker_t* w, uvs_task_t* t, int* keyed) {
  uvs_task_t* evicted;
  int err;

  *keyed = 0;
  if (w->key_max != 0) {
    err = uvs__keys_admit(w, t, &evicted);
    if (evicted != NULL)
      uvs__evicted(w, evicted);
    if (err == UV_EAGAIN)
      return err;
    /* Without memory for its key's entry it goes the inbox's way, past
     * the key's bound, and lanes take it in later. */
    *keyed = err == 0;
  }
  if (w->counting && uvs__admit(w, 1) != 0) {
    if (*keyed)
      uvs__keys_unadmit(w, t);
    return UV_EAGAIN;
  }
  return 0;
}


/* A delayed task fell due (timer.c took it out of the wheel): it is
 * admitted as a schedule would be and joins the tail of its worker's
 * queue. Full, and the worker or the key rejects: a periodic task skips
 * this grid point, a one-shot is handed back with UV_ENOBUFS. */
static void fall_due(uvs_worker_t* w, uvs_task_t* t) {
  int keyed;

  if (admit_due(w, t, &keyed) != 0) {
    if (uvs__load_rlx(&t->state) & UVS__T_PERIODIC) {
      uvs__skip_grid_point(w, t);
    } else {
      w->ndropped++;
      uvs__drop(w->sched, t, UV_ENOBUFS);
    }
    return;
  }
  uvs__due(w, t, keyed);
}


void uvs__fall_due(uvs__queue_t* due) {
  uvs__queue_t* q;
  uvs_task_t* t;

  while ((q = uvs__queue_shift(due)) != NULL) {
    t = uvs__container_of(q, uvs_task_t, tnode);
    fall_due(t->worker, t);
  }
}


void uvs__due(uvs_worker_t* w, uvs_task_t* t, int keyed) {
  /* A keyed task its key's count did not take is marked, so that its key
   * counts it in when lanes take it in, not out before (keys.c). */
  uvs__task_update(
      t, UVS__T_MASK,
      UVS__T_QUEUED |
          (w->key_max != 0 && !keyed && uvs__task_key(t) != 0 ? UVS__T_UNCOUNTED
                                                              : 0));
  uvs__mark_ready(w, t);
  /* With per-key bounds every queued task is filed under its key once its
   * key's count has taken it (without memory for the key's entry it goes
   * the inbox's way, and lanes take it in later). */
  if (keyed) {
    uvs__worker_file(w, t);
    return;
  }
  uvs__worker_push(w, t, 1);
}
