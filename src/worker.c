/* Workers: creation, close, and the pin that keeps a worker (and so its
 * scheduler) from completing its close while a caller on another thread is
 * inside the API. */

#include "internal.h"

#include <string.h>


int uvs__worker_enter(uvs_worker_t* w) {
  /* Pairs with finish_closes(): it stores closed, then waits for inflight to
   * drop to zero. Both sides are seq_cst, so either we see closed or the
   * closer sees our pin. */
  uvs__add_sc(&w->inflight, 1);
  if (__atomic_load_n(&w->closed, __ATOMIC_SEQ_CST)) {
    uvs__sub_sc(&w->inflight, 1);
    return UV_ESHUTDOWN;
  }
  return 0;
}


void uvs__worker_leave(uvs_worker_t* w) {
  uvs__sub_sc(&w->inflight, 1);
}


int uvs__worker_pin(uvs_worker_t* w, int* pinned) {
  int err;

  /* On the loop thread a close can't complete under the caller (that
   * happens on the loop thread too); elsewhere the thread's hazard slot
   * holds it off. Either way a closed worker answers before its
   * scheduler, which may be gone, is touched. shut_door() in close.c is
   * the other half. */
  if (uvs__is_thread(&w->thread)) {
    *pinned = UVS__PIN_NONE;
    return uvs__load_acq(&w->closed) ? UV_ESHUTDOWN : 0;
  }
  err = uvs__hazard_pin(w);
  if (err != 0)
    return err;
  *pinned = UVS__PIN_SLOT;
  if (__atomic_load_n(&w->closed, __ATOMIC_SEQ_CST)) {
    uvs__hazard_unpin();
    return UV_ESHUTDOWN;
  }
  return 0;
}


void uvs__worker_unpin(uvs_worker_t* w, int pinned) {
  (void) w;
  if (pinned == UVS__PIN_SLOT)
    uvs__hazard_unpin();
}


/* The sum of a counter of the worker and the same counter of each lane. */
static uint64_t lanes_sum(uvs_worker_t* w, size_t off) {
  uint64_t n;
  unsigned i;

  n = 0;
  for (i = 0; w->keys != NULL && i < w->width; i++)
    n += uvs__load_acq((uint64_t*) ((char*) uvs__keys_lane(w, i) + off));
  return n;
}


uint64_t uvs__worker_pending(uvs_worker_t* w) {
  /* A task is counted in nsched before a drain can take it, so this never
   * undercounts. Tasks still in the inbox are not included. */
  return w->nsched - uvs__load_acq(&w->nended_run) -
         lanes_sum(w, offsetof(uvs__lane_t, nended_run)) - w->nended;
}


uint64_t uvs__worker_ran(uvs_worker_t* w) {
  return uvs__load_acq(&w->nran) + lanes_sum(w, offsetof(uvs__lane_t, nran));
}


void uvs__worker_fold_counts(uvs_worker_t* w) {
  uvs__lane_t* lane;
  unsigned i;

  for (i = 0; w->keys != NULL && i < w->width; i++) {
    lane = uvs__keys_lane(w, i);
    uvs__store_rel(&w->nran, uvs__load_rlx(&w->nran) + lane->nran);
    uvs__store_rel(&w->nended_run,
                   uvs__load_rlx(&w->nended_run) + lane->nended_run);
    lane->nran = 0;
    lane->nended_run = 0;
  }
}


int uvs__worker_init(uvs_sched_t* s,
                     uvs_worker_t* w,
                     uvs_where_t where,
                     const uvs_worker_options_t* o) {
  uvs__keys_t* keys;
  uvs__hists_t* hists;
  int err;

  keys = NULL;
  hists = NULL;
  uvs__add_sc(&s->inflight, 1);
  err = UV_ESHUTDOWN;
  if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) != UVS__SS_OPEN)
    goto out;
  if (o != NULL && o->width > 1) {
    err = UV_ENOMEM;
    keys = uvs__keys_new(o->width);
    if (keys == NULL)
      goto out;
    err = UV_ESHUTDOWN;
  }
  if (o != NULL && o->metrics) {
    err = UV_ENOMEM;
    hists = uvs__calloc(1, sizeof(*hists));
    if (hists == NULL)
      goto out;
    err = UV_ESHUTDOWN;
  }
  uv_mutex_lock(&s->lock);
  if (uvs__load_rlx(&s->state) == UVS__SS_OPEN) {
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
      w->hists = hists;
      hists = NULL;
      w->counting = w->max_pending != 0 || w->hists != NULL;
      w->key_max = o->key_max_pending;
      w->key_space_cb = o->key_space_cb;
      if (o->max_wait_ms != 0)
        w->max_wait_us = o->max_wait_ms >= ((uint64_t) 1 << 31) / 1000
                             ? UINT32_MAX
                             : (uint32_t) (o->max_wait_ms * 1000);
    } else {
      w->width = 1;
    }
    uvs__inbox_init(w);
    uvs__queue_init(&w->delayed);
    uvs__queue_init(&w->ready_node);
    uvs__queue_init(&w->waiters);
    uvs__queue_init(&w->space_node);
    uvs__queue_init(&w->kready);
    if (keys != NULL) {
      uvs__keys_attach(w, keys);
      keys = NULL;
    }
    uvs__queue_push(&s->workers, &w->list_node);
    err = 0;
  }
  uv_mutex_unlock(&s->lock);
out:
  uvs__sub_sc(&s->inflight, 1);
  if (keys != NULL)
    uvs__free(keys);
  uvs__free(hists);
  return err;
}


int uvs_worker_init(uvs_sched_t* s, uvs_worker_t* w, uvs_where_t where) {
  if (s == NULL || w == NULL || (where != UVS_POOL && where != UVS_LOOP))
    return UV_EINVAL;
  return uvs__worker_init(s, w, where, NULL);
}


static uvs__queue_t* ready_list(uvs_worker_t* w) {
  if (w->where == UVS_LOOP)
    return &w->sched->loop_ready;
  return w->keys == NULL ? &w->sched->ready : &w->sched->wide_ready;
}


void uvs__worker_make_ready(uvs_worker_t* w) {
  w->phase = UVS__P_READY;
  uvs__queue_push(ready_list(w), &w->ready_node);
  uvs__ring(w->sched,
            w->where == UVS_POOL ? UVS__BELL_DISPATCH : UVS__BELL_TURN);
}


void uvs__worker_push(uvs_worker_t* w, uvs_task_t* t, int requeue) {
  unsigned idle;

  /* A delayed task that fell due was counted when it was accepted; it is
   * counted again when it leaves the inbox, and the stats count the inbox
   * meanwhile. */
  if (requeue) {
    w->nsched--;
    uvs__task_set_unlinked(t); /* see uvs__inbox_push */
  }
  uvs__inbox_push(w, t);
  /* A wide worker whose lanes all run wants none more: the other half is
   * lane_work_done() in loop.c, which frees a lane, then looks at the
   * inbox. Either it sees this task or this load sees the lane free. */
  if (w->keys != NULL &&
      __atomic_load_n(&w->lanes_active, __ATOMIC_SEQ_CST) >= w->width)
    return;
  /* The other half is turn_ended() (serve_wide() in loop.c for a wide
   * worker): it stores IDLE, then looks at the inbox. Either it sees this
   * task or this load sees IDLE. */
  if (__atomic_load_n(&w->state, __ATOMIC_SEQ_CST) != UVS__WS_IDLE)
    return;
  idle = UVS__WS_IDLE;
  if (!__atomic_compare_exchange_n(&w->state, &idle, UVS__WS_SCHEDULED, 0,
                                   __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
    return;
  if (!requeue)
    uv_mutex_lock(&w->sched->lock);
  uvs__worker_make_ready(w);
  if (!requeue)
    uv_mutex_unlock(&w->sched->lock);
}


/* A turn of w ended (lock held; any thread): idle, or ready again at the
 * tail of its list so that ready workers take turns. */
void uvs__turn_ended(uvs_worker_t* w) {
  unsigned idle;

  if (w->flags & UVS__WF_CLOSING)
    uvs__ring(w->sched, UVS__BELL_CLOSE); /* the loop sweeps and completes
                                           * closes (close.c) */
  w->phase = UVS__P_IDLE;
  if (!uvs__worker_nonempty(w)) {
    /* The other half of uvs__worker_push()'s hand-off. */
    __atomic_store_n(&w->state, UVS__WS_IDLE, __ATOMIC_SEQ_CST);
    if (!uvs__worker_nonempty(w))
      return;
    idle = UVS__WS_IDLE;
    if (!__atomic_compare_exchange_n(&w->state, &idle, UVS__WS_SCHEDULED, 0,
                                     __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return; /* a producer took it and makes it ready */
  }
  uvs__worker_make_ready(w);
}


void uvs__worker_file(uvs_worker_t* w, uvs_task_t* t) {
  unsigned idle;

  uvs__keys_file(w, t);
  /* Under the lock, as lane_work_done() and serve_wide() in loop.c are:
   * a lane is wanted if one is free and the worker is not listed. */
  if (w->lanes_active >= w->width)
    return;
  idle = UVS__WS_IDLE;
  if (__atomic_compare_exchange_n(&w->state, &idle, UVS__WS_SCHEDULED, 0,
                                  __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
    uvs__worker_make_ready(w);
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
  if (o->key_max_pending != 0 && o->width <= 1)
    return UV_EINVAL;
  if (o->on_full != UVS_FULL_REJECT && o->on_full != UVS_FULL_BLOCK &&
      o->on_full != UVS_FULL_DROP_OLDEST)
    return UV_EINVAL;
  if (o->max_pending != 0 && o->low_water >= o->max_pending)
    return UV_EINVAL;
  return uvs__worker_init(s, w, where, o);
}
