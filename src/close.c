/* Suspends, resumes and closes: of a worker (and of a scheduler), from
 * the call that starts a close to the callbacks that end it.
 *
 * A close starts under the lock (uvs_worker_close, uvs_sched_close): the
 * worker is marked closing, so that schedules answer UV_ESHUTDOWN, blocked
 * producers are woken, its delayed tasks are handed back (or, with
 * UVS_DRAIN, those due already queued), and with UVS_CANCEL everything
 * queued is handed back by the one sweep below. Drains of a cancelling
 * worker start nothing more (uvs__cancelling) and end their turn; the
 * loop thread does the rest in uvs__finish_closes(): it sweeps what
 * arrived meanwhile, shuts the door on callers still inside the API,
 * completes the close once nothing of the worker is pending (its totals to
 * the scheduler's, its memory freed, its callback called), and, once every
 * worker is closed, closes the scheduler's handles; the last handle's
 * callback ends the scheduler.
 */

#include "internal.h"

#include <sched.h>


/* Hands back the tasks of a batch that its drain has not taken yet,
 * tombstoning their slots. */
static void sweep_batch(uvs_worker_t* w, uvs_task_t** batch, unsigned len) {
  uvs_task_t* t;
  unsigned i;

  for (i = 0; i < len; i++) {
    t = uvs__slot_task(&batch[i]);
    if (t != NULL && uvs__take_out(w, t) == 0)
      uvs__drop(w->sched, t, UV_ECANCELED);
  }
}


/* The one sweep: hands back everything w holds queued, oldest first, and
 * tombstones the slots its drains have not taken (lock held). A close with
 * UVS_CANCEL sweeps as it starts, the loop again for tasks that arrived
 * from callers that got in before the close (uvs__finish_closes). A task
 * whose producer has not linked it yet is one of those: the flush leaves
 * it, and a later sweep, at the latest the one after shut_door() has waited
 * for the callers, takes it. */
static void sweep(uvs_worker_t* w) {
  uvs_task_t* t;
  unsigned i;

  uvs__inbox_flush(w);
  if (w->keys == NULL) {
    /* Tasks of a running drain's batch that it has not taken yet. */
    sweep_batch(w, w->batch, w->batch_len);
  } else {
    /* A wide worker's, oldest first, so that each key's come back in
     * schedule order: what lanes picked and have not started, then kready
     * and the tasks behind their keys, then the inbox, which lanes take in
     * from the head. Taking the inbox in first would need memory for its
     * keys' entries, which a close must not. */
    for (i = 0; i < w->width; i++)
      sweep_batch(w, uvs__keys_lane(w, i)->batch,
                  uvs__keys_lane(w, i)->batch_len);
    while ((t = uvs__keys_oldest(w)) != NULL) {
      uvs__take_out(w, t);
      uvs__drop(w->sched, t, UV_ECANCELED);
    }
  }
  while ((t = uvs__inbox_oldest(w)) != NULL) {
    uvs__take_out(w, t);
    uvs__drop(w->sched, t, UV_ECANCELED);
  }
}


static void close_locked(uvs_worker_t* w,
                         uvs_close_how_t how,
                         uvs_worker_close_cb cb) {
  uvs_sched_t* s;
  uvs_task_t* t;
  uint64_t now;
  uint64_t key;

  s = w->sched;
  /* Producers on other threads read the flags without the lock. */
  __atomic_store_n(
      &w->flags,
      w->flags | UVS__WF_CLOSING | (how == UVS_DRAIN ? UVS__WF_DRAIN : 0),
      __ATOMIC_SEQ_CST);
  w->close_cb = cb;
  uvs__queue_remove(&w->list_node);
  uvs__queue_push(&s->closing, &w->list_node);
  /* Blocked producers answer UV_ESHUTDOWN; no space_cb, nor key_space_cb,
   * once closing. */
  if (w->nwaiters != 0)
    uvs__wake_all(w);
  uvs__queue_remove(&w->space_node);
  w->space_owed = 0;
  while (w->keys != NULL && uvs__keys_owed_take(w, &key))
    ;

  /* Delayed tasks: draining runs those already due; the rest never run. */
  now = uvs__clock_us(s);
  while (!uvs__queue_empty(&w->delayed)) {
    t = uvs__container_of(w->delayed.next, uvs_task_t, node);
    uvs__undelay(w, t);
    if (how == UVS_DRAIN && uvs__due_us(t) <= now) {
      /* A close may overfill the worker and the keys: it runs them all. */
      if (w->counting)
        uvs__add_sc(&w->q_in, 1);
      uvs__due(w, t, w->key_max != 0 && uvs__keys_reserve(w, t) == 0);
    } else {
      uvs__drop(s, t, UV_ECANCELED);
    }
  }
  if (how == UVS_CANCEL)
    sweep(w);
  uvs__unpark(w); /* a close ends a suspension */

  /* The loop completes the close when it looks (uvs__undelay rang for the
   * timer if the last delayed task went). */
  uvs__ring(s, UVS__BELL_CLOSE);
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
  uvs__add_sc(&w->inflight, 1);
  closed = __atomic_load_n(&w->closed, __ATOMIC_SEQ_CST);
  flags = uvs__load_acq(&w->flags);
  err = UV_EINVAL;
  if (closed == UVS__C_FINAL ||
      (closed == UVS__C_CLOSED && !(flags & UVS__WF_BY_SCHED)))
    goto out;

  s = w->sched;
  uv_mutex_lock(&s->lock);
  flags = w->flags;
  if (!(flags & UVS__WF_CLOSING)) {
    close_locked(w, how, close_cb);
    err = 0;
  } else if (flags & UVS__WF_BY_SCHED) {
    /* Its scheduler's close goes on the way it began. */
    flags &= ~UVS__WF_BY_SCHED;
    if (uvs__load_rlx(&w->closed) == UVS__C_CLOSED && close_cb != NULL) {
      flags |= UVS__WF_CB_OWED;
      uvs__ring(s, UVS__BELL_CLOSE);
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


/* Raises (by 1) or lowers (by -1) w's suspend count: at 1 the worker
 * starts no task (drain.c stops before the next, worker.c parks it
 * instead of listing it, and a worker listed ready parks at once);
 * back at 0 a parked worker is listed again. */
static int suspend(uvs_worker_t* w, int by) {
  uvs_sched_t* s;
  int pinned;
  int err;

  if (w == NULL)
    return UV_EINVAL;
  err = uvs__worker_pin(w, &pinned);
  if (err != 0)
    return err;
  s = w->sched;
  uv_mutex_lock(&s->lock);
  if (uvs__shut(s, w))
    err = UV_ESHUTDOWN;
  else if (by < 0 ? w->nsuspend == 0 : w->nsuspend == UINT32_MAX)
    err = UV_EINVAL;
  if (err == 0) {
    w->nsuspend += (unsigned) by;
    if (w->nsuspend == 1 && by > 0) {
      __atomic_store_n(&w->flags, w->flags | UVS__WF_SUSPENDED,
                       __ATOMIC_SEQ_CST);
      uvs__ready_park(w); /* ready no more (uvs_group_stats) */
    }
    if (w->nsuspend == 0) {
      __atomic_store_n(&w->flags, w->flags & ~UVS__WF_SUSPENDED,
                       __ATOMIC_SEQ_CST);
      uvs__unpark(w); /* guarantee 12 from now */
    }
  }
  uv_mutex_unlock(&s->lock);
  uvs__worker_unpin(w, pinned);
  return err;
}


int uvs_worker_suspend(uvs_worker_t* w) {
  return suspend(w, 1);
}


int uvs_worker_resume(uvs_worker_t* w) {
  return suspend(w, -1);
}


int uvs_sched_close(uvs_sched_t* s,
                    uvs_close_how_t how,
                    uvs_sched_close_cb close_cb) {
  uvs__queue_t* q;
  uvs__queue_t* next;
  uvs_worker_t* w;

  if (s == NULL || (how != UVS_CANCEL && how != UVS_DRAIN))
    return UV_EINVAL;
  if (uvs__load_acq(&s->state) != UVS__SS_OPEN || !uvs__on_loop_thread(s))
    return UV_EINVAL;

  uv_mutex_lock(&s->lock);
  __atomic_store_n(&s->state, UVS__SS_CLOSING, __ATOMIC_SEQ_CST);
  s->close_cb = close_cb;
  for (q = s->workers.next; q != &s->workers; q = next) {
    next = q->next;
    w = uvs__container_of(q, uvs_worker_t, list_node);
    close_locked(w, how, NULL);
    __atomic_store_n(&w->flags, w->flags | UVS__WF_BY_SCHED, __ATOMIC_SEQ_CST);
  }
  uvs__ring(s, UVS__BELL_CLOSE);
  uv_mutex_unlock(&s->lock);
  uv_ref((uv_handle_t*) &s->async);
  return 0;
}


static void wait_for_callers(unsigned* inflight) {
  /* A caller that pinned the object before it was marked closed is between
   * two atomics and a short critical section; let it get out. */
  while (__atomic_load_n(inflight, __ATOMIC_SEQ_CST) != 0) sched_yield();
}


/* Calls a worker's close callback, if any, once. Lock held on entry and
 * exit, not during the call. The callback may free the worker: nothing
 * touches it after the call. hists are its histograms, already taken out
 * of it, which uvs_worker_metrics() reads during the call (uvs__tls). */
static void call_close_cb(uvs_sched_t* s,
                          uvs_worker_t* w,
                          uvs__hists_t* hists) {
  uvs_worker_close_cb cb;

  cb = w->close_cb;
  w->close_cb = NULL;
  __atomic_store_n(&w->flags, w->flags & ~UVS__WF_CB_OWED, __ATOMIC_RELAXED);
  if (cb == NULL)
    return;
  uv_mutex_unlock(&s->lock);
  uvs__tls.closed = w;
  uvs__tls.closed_hists = hists;
  cb(w);
  uvs__tls.closed = NULL;
  uvs__tls.closed_hists = NULL;
  uv_mutex_lock(&s->lock);
}


static void handle_closed(uv_handle_t* handle) {
  uvs_sched_t* s;
  uvs_sched_close_cb cb;
  uvs__queue_t* q;
  uvs_worker_t* w;

  s = handle->data;
  if (--s->handles != 0)
    return;

  cb = s->close_cb;
  __atomic_store_n(&s->state, UVS__SS_CLOSED, __ATOMIC_SEQ_CST);
  wait_for_callers(&s->inflight);
  /* The last callbacks a closed worker may be asked for: mark each FINAL,
   * then wait out a uvs_worker_close() that got in before. */
  while ((q = uvs__queue_shift(&s->closed)) != NULL) {
    w = uvs__container_of(q, uvs_worker_t, list_node);
    __atomic_store_n(&w->closed, UVS__C_FINAL, __ATOMIC_SEQ_CST);
    wait_for_callers(&w->inflight);
    uv_mutex_lock(&s->lock);
    call_close_cb(s, w, NULL);
    uv_mutex_unlock(&s->lock);
  }
  uv_cond_destroy(&s->room);
  uv_mutex_destroy(&s->lock);
  /* ngroups stays: an init after the close still answers an index out of
   * range with UV_EINVAL (sched.c). */
  uvs__free(s->groups);
  s->groups = NULL;
  if (cb != NULL)
    cb(s);
}


static int closable(uvs_worker_t* w) {
  return w->phase == UVS__P_IDLE && w->lanes_active == 0 &&
         !uvs__worker_nonempty(w) && uvs__worker_pending(w) == 0;
}


/* A closing worker whose close can complete now, or NULL. What callers
 * that got in before a UVS_CANCEL close pushed since it began is swept on
 * the way: its drains only stop and ring. Lock held. */
static uvs_worker_t* next_closable(uvs_sched_t* s) {
  uvs__queue_t* q;
  uvs_worker_t* w;

  for (q = s->closing.next; q != &s->closing; q = q->next) {
    w = uvs__container_of(q, uvs_worker_t, list_node);
    if (!(w->flags & UVS__WF_DRAIN))
      sweep(w);
    if (closable(w))
      return w;
  }
  return NULL;
}


/* Callers on other threads that got in before the close may still push:
 * shut the door, wait for them, then sweep what they left. Lock held on
 * entry and exit, not while waiting. */
static void shut_door(uvs_sched_t* s, uvs_worker_t* w) {
  __atomic_store_n(&w->closed, UVS__C_CLOSED, __ATOMIC_SEQ_CST);
  uv_mutex_unlock(&s->lock);
  wait_for_callers(&w->inflight);
  uvs__hazard_wait_pins(w);
  uv_mutex_lock(&s->lock);
  if (!(w->flags & UVS__WF_DRAIN))
    sweep(w);
}


/* A worker's close completes: its totals go to the scheduler's, and its
 * callback, if any, is called. Lock held. */
static void complete_worker(uvs_sched_t* s, uvs_worker_t* w) {
  uvs__hists_t* hists;

  /* Every task of w is handed back: wait out a cancel that read w from a
   * task before that and may still use it (src/hazard.c). Not under the
   * lock, which such a cancel may be waiting for. */
  uv_mutex_unlock(&s->lock);
  uvs__hazard_wait_cancels(w);
  uv_mutex_lock(&s->lock);
  uvs__queue_remove(&w->list_node);
  /* While the scheduler closes, a closed worker that has no callback may
   * still be asked for one (uvs_worker_close): keep it in reach until the
   * end. One whose callback is called is the user's from then on. */
  if (uvs__load_rlx(&s->state) != UVS__SS_OPEN && w->close_cb == NULL)
    uvs__queue_push(&s->closed, &w->list_node);
  s->stats.scheduled += w->nsched;
  if (w->keys != NULL)
    uvs__worker_fold_counts(w);
  s->stats.ran += uvs__load_acq(&w->nran);
  s->stats.cancelled += w->ncancelled;
  if (w->keys != NULL)
    uvs__keys_free(w);
  hists = w->hists;
  w->hists = NULL;
  call_close_cb(s, w, hists);
  if (hists != NULL)
    uvs__free(hists);
}


/* Callbacks asked for after their worker closed. Lock held. */
static void call_owed_cbs(uvs_sched_t* s) {
  uvs__queue_t* q;
  uvs_worker_t* w;

  for (q = s->closed.next; q != &s->closed; q = q->next) {
    w = uvs__container_of(q, uvs_worker_t, list_node);
    if (w->flags & UVS__WF_CB_OWED) {
      uvs__queue_remove(&w->list_node);
      call_close_cb(s, w, NULL);
      q = &s->closed; /* the list may have changed meanwhile */
    }
  }
}


/* A closing scheduler with nothing left closes its handles; the last
 * handle's callback finishes (handle_closed). Returns what
 * uvs__finish_closes() returns. Lock held on entry, not on exit. */
static int close_handles(uvs_sched_t* s) {
  int pending;

  if (uvs__load_rlx(&s->state) != UVS__SS_CLOSING ||
      (s->flags & UVS__SF_HANDLES_CLOSING) || !uvs__queue_empty(&s->workers) ||
      !uvs__queue_empty(&s->closing) || s->drains != 0) {
    pending = !uvs__queue_empty(&s->closing) ||
              (uvs__load_rlx(&s->state) == UVS__SS_CLOSING &&
               !(s->flags & UVS__SF_HANDLES_CLOSING));
    uv_mutex_unlock(&s->lock);
    return pending ? UVS__CLOSES_PENDING : 0;
  }
  s->flags |= UVS__SF_HANDLES_CLOSING;
  uv_mutex_unlock(&s->lock);

  uvs__post_free_all(s);
  uvs__timers_free(s->timers);
  s->timers = NULL;
  uv_close((uv_handle_t*) &s->async, handle_closed);
  uv_close((uv_handle_t*) &s->timer, handle_closed);
  uv_close((uv_handle_t*) &s->idle, handle_closed);
  uv_close((uv_handle_t*) &s->check, handle_closed);
  uvs__free(s->runners);
  s->runners = NULL;
  s->runner_free = NULL;
  return UVS__CLOSES_DONE;
}


/* Completes the closes that can complete. Lock not held on entry or
 * exit. */
int uvs__finish_closes(uvs_sched_t* s) {
  uvs_worker_t* w;

  uv_mutex_lock(&s->lock);
  for (;;) {
    /* A worker closes after the done_cb of its last task: deliver first. */
    if (uvs__load_acq(&s->done_top) != NULL) {
      uv_mutex_unlock(&s->lock);
      return UVS__CLOSES_PENDING;
    }
    w = next_closable(s);
    if (w == NULL)
      break;
    if (!uvs__load_rlx(&w->closed))
      shut_door(s, w); /* then look again */
    else
      complete_worker(s, w);
  }
  call_owed_cbs(s);
  return close_handles(s);
}
