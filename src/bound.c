/* Bounded workers and per-worker metrics (0.2): admission of a task onto a
 * worker with max_pending, the three policies for a full worker, the
 * space callback, blocked producers, and the counters and histograms of
 * uvs_worker_metrics().
 *
 * A worker counts its queued tasks only when it is bounded or keeps
 * metrics, so that the plain hot path pays nothing: producers add to q_in
 * (atomic), the drain adds to q_out_run (its own), and holders of the
 * scheduler's lock add to q_out_lock when they take a queued task out
 * (cancel, close, eviction). queued = q_in - q_out_run - q_out_lock.
 */

#include "internal.h"

#include <string.h>


static uint64_t queued_now(uvs_worker_t* w) {
  uint64_t in;
  uint64_t out;

  /* The outs first: they only grow, so a stale sum overstates queued, and a
   * bound decided on it errs on the side of "full". */
  out = uvs__load(&w->q_out_run) + uvs__load(&w->q_out_lock);
  in = uvs__load(&w->q_in);
  return in > out ? in - out : 0;
}


static void note_max(uvs_worker_t* w, uint64_t queued) {
  uint64_t max;

  max = uvs__load_relaxed(&w->queued_max);
  while (queued > max &&
         !__atomic_compare_exchange_n(&w->queued_max, &max, queued, 1,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}


/* Takes the oldest queued task out of w (lock held), or NULL. A drain's
 * batch holds the oldest: its first slot not yet taken. */
static uvs_task_t* take_oldest(uvs_worker_t* w) {
  uvs_task_t* t;
  unsigned i;

  for (i = 0; i < w->batch_len; i++) {
    t = __atomic_load_n(&w->batch[i], __ATOMIC_ACQUIRE);
    if (t == UVS__SLOT_TAKEN || t == UVS__SLOT_TOMB)
      continue;
    if (__atomic_compare_exchange_n(&w->batch[i], &t, UVS__SLOT_TOMB, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return t;
  }
  uvs__inbox_flush(w);
  return uvs__inbox_take(w, 1);
}


/* DROP_OLDEST on a full worker: hands the oldest queued task back with
 * UV_ENOBUFS and counts the new one in its place. Lock held. */
static void evict_for(uvs_worker_t* w) {
  uvs_task_t* t;

  t = take_oldest(w);
  if (t != NULL) {
    uvs__unqueued(w);
    w->ndropped++;
    uvs__drop(w->sched, t, UV_ENOBUFS);
  }
  uvs__add(&w->q_in, 1);
}


int uvs__admit(uvs_worker_t* w, int locked) {
  uint64_t in;
  uint64_t out;

  if (w->max_pending == 0) {
    /* Counted for metrics only. */
    in = uvs__add(&w->q_in, 1) + 1;
    out = uvs__load(&w->q_out_run) + uvs__load(&w->q_out_lock);
    note_max(w, in > out ? in - out : 0);
    return 0;
  }
  in = uvs__load(&w->q_in);
  for (;;) {
    out = uvs__load(&w->q_out_run) + uvs__load(&w->q_out_lock);
    if (in - out >= w->max_pending)
      break;
    if (__atomic_compare_exchange_n(&w->q_in, &in, in + 1, 1,
                                    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
      note_max(w, in + 1 - out);
      if (in + 1 - out >= w->max_pending)
        __atomic_store_n(&w->full, 1, __ATOMIC_SEQ_CST);
      return 0;
    }
  }
  /* Full. */
  __atomic_store_n(&w->full, 1, __ATOMIC_SEQ_CST);
  if (w->on_full != UVS_FULL_DROP_OLDEST) {
    uvs__add(&w->nrejected, 1);
    return UV_EAGAIN;
  }
  if (!locked)
    uv_mutex_lock(&w->sched->lock);
  evict_for(w);
  if (!locked)
    uv_mutex_unlock(&w->sched->lock);
  note_max(w, w->max_pending);
  return 0;
}


/* Wakes the oldest blocked producer, if any. Lock held. */
static void wake_one(uvs_worker_t* w) {
  uvs__queue_t* q;
  uvs__waiter_t* waiter;

  q = uvs__queue_shift(&w->waiters);
  if (q == NULL)
    return;
  waiter = uvs__container_of(q, uvs__waiter_t, node);
  __atomic_store_n(&w->nwaiters, w->nwaiters - 1, __ATOMIC_SEQ_CST);
  waiter->woken = 1;
  uv_cond_signal(&waiter->cond);
}


void uvs__wake_all(uvs_worker_t* w) {
  while (!uvs__queue_empty(&w->waiters))
    wake_one(w);
}


void uvs__space_check(uvs_worker_t* w, int locked) {
  uvs_sched_t* s;
  unsigned full;
  int owe;

  /* Pairs with the seq_cst store of nwaiters in uvs_schedule_wait(): a
   * producer that went to sleep saw the room we made, or we see it. */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  owe = 0;
  full = uvs__load_relaxed(&w->full);
  if (full && queued_now(w) <= w->low_water) {
    full = 1;
    owe = __atomic_compare_exchange_n(&w->full, &full, 0, 0, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED) &&
          w->space_cb != NULL;
  }
  if (!owe && uvs__load_relaxed(&w->nwaiters) == 0)
    return;
  s = w->sched;
  if (!locked)
    uv_mutex_lock(&s->lock);
  if (owe && !w->space_owed && !(w->flags & UVS__W_CLOSING)) {
    w->space_owed = 1;
    uvs__queue_push(&s->space, &w->space_node);
    uvs__kick(s);
  }
  if (w->nwaiters != 0 && queued_now(w) < w->max_pending)
    wake_one(w);
  if (!locked)
    uv_mutex_unlock(&s->lock);
}


void uvs__unqueued(uvs_worker_t* w) {
  if (!uvs__counting(w))
    return;
  uvs__store_relaxed(&w->q_out_lock, uvs__load_relaxed(&w->q_out_lock) + 1);
  if (w->max_pending != 0)
    uvs__space_check(w, 1);
}


void uvs__hist_add(uvs_hist_t* h, uint64_t ns) {
  uint64_t us;
  uint64_t max;
  unsigned k;

  us = ns / 1000;
  k = us == 0 ? 0 : 64 - (unsigned) __builtin_clzll(us);
  if (k > 23)
    k = 23;
  __atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->sum_ns, ns, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->bucket[k], 1, __ATOMIC_RELAXED);
  max = __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED);
  while (ns > max &&
         !__atomic_compare_exchange_n(&h->max_ns, &max, ns, 1,
                                      __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
}


int uvs_worker_init_ex(uvs_sched_t* s,
                       uvs_worker_t* w,
                       uvs_where_t where,
                       const uvs_worker_options_t* o) {
  if (o == NULL)
    return uvs_worker_init(s, w, where);
  if (s == NULL || w == NULL || (where != UVS_POOL && where != UVS_LOOP))
    return UV_EINVAL;
  if (o->width > 1 && where != UVS_POOL)
    return UV_EINVAL;
  if (o->on_full != UVS_FULL_REJECT && o->on_full != UVS_FULL_BLOCK &&
      o->on_full != UVS_FULL_DROP_OLDEST)
    return UV_EINVAL;
  if (o->max_pending != 0 && o->low_water >= o->max_pending)
    return UV_EINVAL;
  return uvs__worker_init(s, w, where, o);
}


static uint64_t load64(const uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}


static void hist_copy(uvs_hist_t* out, const uvs_hist_t* h) {
  unsigned k;

  out->count = load64(&h->count);
  out->sum_ns = load64(&h->sum_ns);
  out->max_ns = load64(&h->max_ns);
  for (k = 0; k < 24; k++)
    out->bucket[k] = load64(&h->bucket[k]);
}


int uvs_worker_metrics(const uvs_worker_t* worker, uvs_worker_metrics_t* out) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  uint64_t inbox;
  uint64_t pending;
  uint64_t other;
  int open;

  if (worker == NULL || out == NULL)
    return UV_EINVAL;
  w = (uvs_worker_t*) worker;
  memset(out, 0, sizeof(*out));
  /* A closed worker's scheduler may be gone: read what the worker holds,
   * which nobody writes any more. */
  open = uvs__worker_enter(w) == 0;
  s = open ? w->sched : NULL;
  if (s != NULL)
    uv_mutex_lock(&s->lock);
  inbox = open ? uvs__inbox_count(w) : 0;
  out->scheduled = w->nsched + inbox;
  out->ran = load64(&w->nran);
  out->dropped = w->ndropped;
  out->cancelled = w->ncancelled - w->ndropped;
  out->rejected = load64(&w->nrejected);
  out->delayed = w->ndelayed;
  out->running = __atomic_load_n(&w->running, __ATOMIC_RELAXED);
  if (uvs__counting(w)) {
    out->queued = queued_now(w);
  } else if (open) {
    /* Derived: what is pending and neither delayed nor running. */
    pending = uvs__worker_pending(w) + inbox;
    other = out->delayed + out->running;
    out->queued = pending > other ? pending - other : 0;
  }
  out->queued_max = load64(&w->queued_max);
  if (out->queued_max < out->queued)
    out->queued_max = out->queued;
  if (s != NULL) {
    uv_mutex_unlock(&s->lock);
    uvs__worker_leave(w);
  }
  hist_copy(&out->wait, &w->hist_wait);
  hist_copy(&out->run, &w->hist_run);
  return 0;
}


int uvs_schedule_wait(uvs_worker_t* w, uvs_task_t* t, uint64_t timeout_ms) {
  uvs__waiter_t waiter;
  uvs_sched_t* s;
  uint64_t deadline;
  uint64_t now;
  int pinned;
  int err;

  err = uvs_schedule(w, t);
  if (err != UV_EAGAIN || w->on_full != UVS_FULL_BLOCK)
    return err;
  /* Never block the thread that would make room: the loop's, or a pool
   * thread running this library's tasks. */
  if (uvs__is_thread(&w->thread) || uvs__tls.draining)
    return UV_EAGAIN;

  now = uv_hrtime();
  deadline = timeout_ms > (UINT64_MAX - now) / 1000000
                 ? UINT64_MAX
                 : now + timeout_ms * 1000000;
  if (uvs__worker_pin(w, &pinned) != 0)
    return UV_ESHUTDOWN;
  s = w->sched;
  if (uv_cond_init(&waiter.cond) != 0) {
    if (pinned)
      uvs__worker_leave(w);
    return UV_ENOMEM;
  }
  for (;;) {
    err = uvs_schedule(w, t);
    if (err != UV_EAGAIN)
      break;
    uv_mutex_lock(&s->lock);
    waiter.woken = 0;
    uvs__queue_push(&w->waiters, &waiter.node);
    __atomic_store_n(&w->nwaiters, w->nwaiters + 1, __ATOMIC_SEQ_CST);
    /* Room made before we were listed is seen here (see space_check). */
    while (!waiter.woken && !uvs__shut(s, w) &&
           queued_now(w) >= w->max_pending) {
      now = uv_hrtime();
      if (now >= deadline ||
          uv_cond_timedwait(&waiter.cond, &s->lock, deadline - now) != 0)
        break;
    }
    if (!waiter.woken) {
      uvs__queue_remove(&waiter.node);
      __atomic_store_n(&w->nwaiters, w->nwaiters - 1, __ATOMIC_SEQ_CST);
    }
    err = 0;
    if (uvs__shut(s, w))
      err = UV_ESHUTDOWN;
    else if (!waiter.woken && queued_now(w) >= w->max_pending &&
             uv_hrtime() >= deadline)
      err = UV_ETIMEDOUT;
    uv_mutex_unlock(&s->lock);
    if (err != 0)
      break;
  }
  uv_cond_destroy(&waiter.cond);
  if (pinned)
    uvs__worker_leave(w);
  return err;
}


int uvs_task_set_key(uvs_task_t* t, uint64_t key) {
  unsigned st;

  if (t == NULL)
    return UV_EINVAL;
  st = uvs__load(&t->state) & UVS__T_MASK;
  if (st != UVS__T_IDLE && st != UVS__T_FINISHED)
    return UV_EBUSY;
  t->key = key;
  return 0;
}
