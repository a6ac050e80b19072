/* Tasks: init, the schedule calls, and cancel. */

#include "internal.h"

#include <string.h>

#define UVS__MAX_MS ((uint64_t) 1 << 40)

_Thread_local struct uvs__tls_s uvs__tls;


int uvs_task_init(uvs_task_t* t, uvs_run_cb run, uvs_done_cb done) {
  if (t == NULL || run == NULL)
    return UV_EINVAL;
  t->run_cb = run;
  t->done_cb = done;
  uvs__queue_init(&t->node);
  uvs__queue_init(&t->tnode);
  uvs__store(&t->worker, NULL);
  t->due = 0;
  t->period = 0;
  t->status = 0;
  uvs__store(&t->state, UVS__T_IDLE);
  return 0;
}


/* Accepts a validated task onto an open worker. Lock held; t_call is
 * uv_hrtime() at the start of the public call. */
static int schedule_locked(uvs_sched_t* s,
                           uvs_worker_t* w,
                           uvs_task_t* t,
                           uint64_t t_call,
                           int delayed,
                           uint64_t delay_ms,
                           uint64_t period_ms,
                           unsigned flags) {
  unsigned st;
  int own;

  if ((w->flags & UVS__W_CLOSING) ||
      uvs__load_relaxed(&s->state) != UVS__S_OPEN)
    return UV_ESHUTDOWN;

  st = uvs__load(&t->state);
  own = uvs__tls.current == t;
  switch (st & UVS__T_MASK) {
    case UVS__T_IDLE:
    case UVS__T_FINISHED:
      break;
    case UVS__T_RUNNING:
      /* Only a one-shot task, from its own run_cb, and only once: after
       * that it may already be running elsewhere. */
      if (own && !(st & UVS__T_PERIODIC) && !uvs__tls.rescheduled)
        break;
      return UV_EBUSY;
    default:
      return UV_EBUSY;
  }
  if (own)
    uvs__tls.rescheduled = 1;

  /* Fields first, state last (release): uvs_task_cancel() reads the state,
   * then the worker, and must see this worker once it sees the new state. */
  uvs__store(&t->worker, w);
  t->period = period_ms;
  t->status = 0;
  if (period_ms != 0)
    flags |= UVS__T_PERIODIC;
  if (delayed) {
    /* Due times round up to the ms, so that due * 1e6 >= t_call + delay. */
    t->due = (t_call + 999999) / 1000000 + delay_ms;
    uvs__task_update(t, ~UVS__T_RUNS, flags | UVS__T_DELAYED);
    uvs__timers_insert(s->timers, t);
    uvs__queue_push(&w->delayed, &t->node);
    if (t->due < s->timer_due)
      uvs__kick(s); /* the timer needs re-arming */
  } else {
    t->due = 0;
    uvs__task_update(t, ~UVS__T_RUNS, flags | UVS__T_QUEUED);
    uvs__queue_push(&w->fifo, &t->node);
    uvs__worker_make_ready(w);
  }
  w->npending++;
  s->stats.scheduled++;
  s->stats.pending++;
  return 0;
}


int uvs__schedule(uvs_worker_t* w,
                  uvs_task_t* t,
                  int delayed,
                  uint64_t delay_ms,
                  uint64_t period_ms,
                  unsigned flags) {
  uvs_sched_t* s;
  uint64_t t_call;
  int err;

  t_call = uv_hrtime();
  if (w == NULL || t == NULL || t->run_cb == NULL)
    return UV_EINVAL;
  if (delayed && delay_ms > UVS__MAX_MS)
    return UV_EINVAL;
  err = uvs__worker_enter(w);
  if (err != 0)
    return err;
  s = w->sched;
  uv_mutex_lock(&s->lock);
  err = schedule_locked(s, w, t, t_call, delayed, delay_ms, period_ms, flags);
  uv_mutex_unlock(&s->lock);
  uvs__worker_leave(w);
  return err;
}


int uvs__schedule_node(uvs_worker_t* w, uvs_task_t* t) {
  /* For post.c, which holds the lock and has checked the worker. */
  return schedule_locked(w->sched, w, t, 0, 0, 0, 0, UVS__T_POST);
}


int uvs_schedule(uvs_worker_t* worker, uvs_task_t* task) {
  return uvs__schedule(worker, task, 0, 0, 0, 0);
}


int uvs_schedule_after(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uint64_t delay_ms) {
  return uvs__schedule(worker, task, 1, delay_ms, 0, 0);
}


int uvs_schedule_every(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uint64_t delay_ms,
                       uint64_t period_ms) {
  if (period_ms == 0 || period_ms > UVS__MAX_MS)
    return UV_EINVAL;
  if (task != NULL && task->done_cb == NULL)
    return UV_EINVAL;
  return uvs__schedule(worker, task, 1, delay_ms, period_ms, 0);
}


int uvs_task_cancel(uvs_task_t* t) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  unsigned st;
  int err;

  if (t == NULL)
    return UV_EINVAL;
  st = uvs__load(&t->state);
  if ((st & UVS__T_MASK) == UVS__T_IDLE || t->done_cb == NULL)
    return UV_EINVAL;

  for (;;) {
    st = uvs__load(&t->state);
    switch (st & UVS__T_MASK) {
      case UVS__T_QUEUED:
      case UVS__T_DELAYED:
        break;
      case UVS__T_RUNNING:
        if (st & UVS__T_PERIODIC)
          break;
        return UV_EBUSY;
      default:
        return UV_EBUSY; /* cancelled, or handed back */
    }

    w = uvs__load(&t->worker);
    if (uvs__worker_enter(w) != 0)
      return UV_EBUSY; /* handed back meanwhile, and its worker closed */
    s = w->sched;
    uv_mutex_lock(&s->lock);
    if (uvs__load(&t->worker) == w)
      break;
    /* Re-scheduled onto another worker meanwhile: look again. */
    uv_mutex_unlock(&s->lock);
    uvs__worker_leave(w);
  }

  /* Under the lock of the task's scheduler now: the state is stable. */
  st = uvs__load_relaxed(&t->state);
  switch (st & UVS__T_MASK) {
    case UVS__T_QUEUED:
    case UVS__T_DELAYED:
      uvs__cancel_locked(s, t);
      err = 0;
      break;
    case UVS__T_RUNNING:
      if ((st & UVS__T_PERIODIC) && !(st & UVS__T_CANCELLED)) {
        /* The run finishing hands it back instead of re-arming it. */
        uvs__task_update(t, 0, UVS__T_CANCELLED);
        err = 0;
      } else {
        err = UV_EBUSY;
      }
      break;
    default:
      err = UV_EBUSY;
  }
  uv_mutex_unlock(&s->lock);
  uvs__worker_leave(w);
  return err;
}
