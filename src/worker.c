/* Workers: creation, close, and the pin that keeps a worker (and so its
 * scheduler) from completing its close while a caller on another thread is
 * inside the API. */

#include "internal.h"

#include <string.h>


int uvs__worker_enter(uvs_worker_t* w) {
  /* Pairs with finish_closes(): it stores closed, then waits for inflight to
   * drop to zero. Both sides are seq_cst, so either we see closed or the
   * closer sees our pin. */
  uvs__add(&w->inflight, 1);
  if (__atomic_load_n(&w->closed, __ATOMIC_SEQ_CST)) {
    uvs__sub(&w->inflight, 1);
    return UV_ESHUTDOWN;
  }
  return 0;
}


void uvs__worker_leave(uvs_worker_t* w) {
  uvs__sub(&w->inflight, 1);
}


int uvs__worker_pin(uvs_worker_t* w, int* pinned) {
  /* On the loop thread a close can't complete under the caller (that
   * happens on the loop thread too); elsewhere the pin holds it off. Either
   * way a closed worker answers before its scheduler, which may be gone, is
   * touched. */
  *pinned = !uvs__is_thread(&w->thread);
  if (*pinned)
    return uvs__worker_enter(w);
  return uvs__load(&w->closed) ? UV_ESHUTDOWN : 0;
}


uint64_t uvs__worker_pending(uvs_worker_t* w) {
  /* A task is counted in nsched before a drain can take it, so this never
   * undercounts. Tasks still in the inbox are not included. */
  return w->nsched - uvs__load(&w->nended_run) - w->nended;
}


int uvs__worker_init(uvs_sched_t* s,
                     uvs_worker_t* w,
                     uvs_where_t where,
                     const uvs_worker_options_t* o) {
  int err;

  uvs__add(&s->inflight, 1);
  err = UV_ESHUTDOWN;
  if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) != UVS__S_OPEN)
    goto out;
  uv_mutex_lock(&s->lock);
  if (uvs__load_relaxed(&s->state) == UVS__S_OPEN) {
    memset((char*) w + offsetof(uvs_worker_t, sched), 0,
           sizeof(*w) - offsetof(uvs_worker_t, sched));
    w->sched = s;
    w->where = where;
    w->thread = s->thread;
    if (o != NULL) {
      w->width = o->width > 1 ? o->width : 1;
      w->max_pending = o->max_pending;
      w->on_full = o->on_full;
      w->low_water = o->low_water;
      w->space_cb = o->space_cb;
      w->metrics = o->metrics != 0;
    } else {
      w->width = 1;
    }
    uvs__inbox_init(w);
    uvs__queue_init(&w->delayed);
    uvs__queue_init(&w->ready_node);
    uvs__queue_init(&w->waiters);
    uvs__queue_init(&w->space_node);
    uvs__queue_push(&s->workers, &w->list_node);
    err = 0;
  }
  uv_mutex_unlock(&s->lock);
out:
  uvs__sub(&s->inflight, 1);
  return err;
}


int uvs_worker_init(uvs_sched_t* s, uvs_worker_t* w, uvs_where_t where) {
  if (s == NULL || w == NULL || (where != UVS_POOL && where != UVS_LOOP))
    return UV_EINVAL;
  return uvs__worker_init(s, w, where, NULL);
}


void uvs__worker_close_sweep(uvs_worker_t* w) {
  uvs_sched_t* s;
  uvs_task_t* t;
  unsigned i;

  s = w->sched;
  uvs__inbox_flush(w);
  while ((t = uvs__inbox_take(w, 1)) != NULL) {
    uvs__unqueued(w);
    uvs__drop(s, t, UV_ECANCELED);
  }
  /* Tasks of a running drain's batch that it has not taken yet. */
  for (i = 0; i < w->batch_len; i++) {
    t = __atomic_load_n(&w->batch[i], __ATOMIC_ACQUIRE);
    if (t == UVS__SLOT_TAKEN || t == UVS__SLOT_TOMB)
      continue;
    if (__atomic_compare_exchange_n(&w->batch[i], &t, UVS__SLOT_TOMB, 0,
                                    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      uvs__unqueued(w);
      uvs__drop(s, t, UV_ECANCELED);
    }
  }
}


void uvs__worker_close_locked(uvs_worker_t* w,
                              uvs_close_how_t how,
                              uvs_worker_close_cb cb) {
  uvs_sched_t* s;
  uvs__queue_t* q;
  uvs_task_t* t;
  uint64_t now;

  s = w->sched;
  /* Producers on other threads read the flags without the lock. */
  __atomic_store_n(&w->flags,
                   w->flags | UVS__W_CLOSING | (how == UVS_DRAIN ? UVS__W_DRAIN : 0),
                   __ATOMIC_SEQ_CST);
  w->close_cb = cb;
  uvs__queue_remove(&w->list_node);
  uvs__queue_push(&s->closing, &w->list_node);
  /* Blocked producers answer UV_ESHUTDOWN; no space_cb once closing. */
  uvs__wake_all(w);
  uvs__queue_remove(&w->space_node);
  w->space_owed = 0;

  /* Delayed tasks: draining runs those already due; the rest never run. */
  now = uvs__clock_ms(s);
  while ((q = uvs__queue_shift(&w->delayed)) != NULL) {
    t = uvs__container_of(q, uvs_task_t, node);
    uvs__timers_remove(s->timers, t);
    w->ndelayed--;
    if (how == UVS_DRAIN && t->due <= now) {
      uvs__task_update(t, UVS__T_MASK, UVS__T_QUEUED);
      if (uvs__counting(w))
        uvs__add(&w->q_in, 1); /* a close may overfill: it runs them all */
      uvs__mark_ready(w, t);
      uvs__worker_push(w, t, 1);
    } else {
      uvs__drop(s, t, UV_ECANCELED);
    }
  }
  if (how == UVS_CANCEL)
    uvs__worker_close_sweep(w);

  /* The loop completes the close (and re-arms the timer) when it looks. */
  uvs__kick(s);
}


int uvs_worker_close(uvs_worker_t* w,
                     uvs_close_how_t how,
                     uvs_worker_close_cb close_cb) {
  uvs_sched_t* s;
  unsigned closed;
  unsigned flags;
  int err;

  if (w == NULL || (how != UVS_CANCEL && how != UVS_DRAIN))
    return UV_EINVAL;
  /* Pinned as in uvs__worker_enter(), but a worker that closed may still
   * take a callback: one that only its scheduler's close closed, while that
   * close goes on. Such a worker stays on the scheduler's closed list until
   * the scheduler's last step, which marks it FINAL and then waits out this
   * pin, so the scheduler is alive while we hold it. */
  uvs__add(&w->inflight, 1);
  closed = __atomic_load_n(&w->closed, __ATOMIC_SEQ_CST);
  flags = uvs__load(&w->flags);
  err = UV_EINVAL;
  if (closed == UVS__C_FINAL ||
      (closed == UVS__C_CLOSED && !(flags & UVS__W_BY_SCHED)))
    goto out;

  s = w->sched;
  uv_mutex_lock(&s->lock);
  flags = w->flags;
  if (!(flags & UVS__W_CLOSING)) {
    uvs__worker_close_locked(w, how, close_cb);
    err = 0;
  } else if (flags & UVS__W_BY_SCHED) {
    /* Its scheduler's close goes on the way it began. */
    flags &= ~UVS__W_BY_SCHED;
    if (uvs__load_relaxed(&w->closed) == UVS__C_CLOSED && close_cb != NULL) {
      flags |= UVS__W_CB_OWED;
      uvs__kick(s);
    }
    w->close_cb = close_cb;
    __atomic_store_n(&w->flags, flags, __ATOMIC_SEQ_CST);
    err = 0;
  }
  uv_mutex_unlock(&s->lock);
out:
  uvs__worker_leave(w);
  return err;
}
