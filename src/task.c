/* Tasks: init, the schedule calls, and cancel. */

#include "internal.h"

#include <sched.h>

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


/* Takes a task into custody: IDLE or FINISHED -> CLAIMED, with one CAS, so
 * that two schedule calls racing for one task can't both win. A one-shot
 * task may also be claimed once from inside its own run_cb; that run then
 * counts as still executing until it returns (see end_run). */
static int claim(uvs_task_t* t, unsigned* claimed) {
  unsigned o;
  unsigned n;
  int own;

  own = uvs__tls.current == t && !uvs__tls.rescheduled;
  o = uvs__load(&t->state);
  for (;;) {
    switch (o & UVS__T_MASK) {
      case UVS__T_IDLE:
      case UVS__T_FINISHED:
        break;
      case UVS__T_QUEUED:
        /* Running: its own run_cb may schedule a one-shot task again. */
        if (own && !(o & UVS__T_PERIODIC))
          break;
        return UV_EBUSY;
      default:
        return UV_EBUSY;
    }
    n = (o & UVS__T_RUNS) | UVS__T_CLAIMED;
    if (own && t->done_cb != NULL)
      n += UVS__T_RUN_ONE;
    if (__atomic_compare_exchange_n(&t->state, &o, n, 1, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      break;
  }
  if (own)
    uvs__tls.rescheduled = 1;
  *claimed = n;
  return 0;
}


/* Ends a claim with the task's new state. Only a claim from the task's own
 * run_cb leaves a run count that another thread may change meanwhile; any
 * other claimed task is ours alone, and a release store will do. */
static void publish(uvs_task_t* t, unsigned claimed, unsigned state) {
  if (claimed & UVS__T_RUNS)
    uvs__task_update(t, ~UVS__T_RUNS, state);
  else
    uvs__store(&t->state, state);
}


static int shut(uvs_sched_t* s, uvs_worker_t* w) {
  return (uvs__load(&w->flags) & UVS__W_CLOSING) ||
         uvs__load(&s->state) != UVS__S_OPEN;
}


/* Schedules onto an open worker, on the lock-free path; flags are extra
 * state flags (UVS__T_POST). */
static int accept_now(uvs_worker_t* w, uvs_task_t* t, unsigned flags) {
  unsigned claimed;
  int err;

  err = claim(t, &claimed);
  if (err != 0)
    return err;
  /* Fields first, state last (release): uvs_task_cancel() reads the state,
   * then the worker, and must see this worker once it sees the state. */
  uvs__store_relaxed(&t->worker, w);
  t->period = 0;
  t->due = 0;
  t->status = 0;
  t->node.prev = NULL; /* on its way to the inbox */
  publish(t, claimed, flags | UVS__T_QUEUED);
  uvs__worker_push(w, t, 0);
  return 0;
}


/* Schedules a delayed or periodic task: the timer wheel needs the lock. */
static int accept_later(uvs_worker_t* w,
                        uvs_task_t* t,
                        uint64_t t_call,
                        uint64_t delay_ms,
                        uint64_t period_ms) {
  uvs_sched_t* s;
  int err;

  unsigned claimed;

  s = w->sched;
  uv_mutex_lock(&s->lock);
  /* Checked again under the lock: a close holds it while it cancels the
   * worker's delayed tasks, so none can slip in behind it. */
  err = shut(s, w) ? UV_ESHUTDOWN : claim(t, &claimed);
  if (err == 0) {
    uvs__store_relaxed(&t->worker, w);
    t->period = period_ms;
    t->status = 0;
    /* Due times round up to the ms, so that due * 1e6 >= t_call + delay. */
    t->due = (t_call + 999999) / 1000000 + delay_ms;
    publish(t, claimed,
            (period_ms != 0 ? UVS__T_PERIODIC : 0) | UVS__T_DELAYED);
    uvs__timers_insert(s->timers, t);
    uvs__queue_push(&w->delayed, &t->node);
    w->nsched++;
    uvs__timer_needed(s, t->due);
  }
  uv_mutex_unlock(&s->lock);
  return err;
}


int uvs__schedule(uvs_worker_t* w,
                  uvs_task_t* t,
                  int delayed,
                  uint64_t delay_ms,
                  uint64_t period_ms,
                  unsigned flags) {
  uvs_sched_t* s;
  uint64_t t_call;
  int foreign;
  int err;

  t_call = delayed ? uv_hrtime() : 0;
  if (w == NULL || t == NULL || t->run_cb == NULL)
    return UV_EINVAL;
  if (delayed && delay_ms > UVS__MAX_MS)
    return UV_EINVAL;

  if (uvs__worker_pin(w, &foreign) != 0)
    return UV_ESHUTDOWN;
  s = w->sched;
  if (shut(s, w))
    err = UV_ESHUTDOWN;
  else if (delayed)
    err = accept_later(w, t, t_call, delay_ms, period_ms);
  else
    err = accept_now(w, t, flags);
  if (foreign)
    uvs__worker_leave(w);
  return err;
}


int uvs__schedule_node(uvs_worker_t* w, uvs_task_t* t) {
  /* post.c checked the worker; a close that starts meanwhile sweeps the
   * node up like any task that arrived late. */
  return accept_now(w, t, UVS__T_POST);
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
  int foreign;
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
      case UVS__T_CLAIMED:
        sched_yield(); /* a schedule call is filling it in */
        continue;
      default:
        return UV_EBUSY; /* cancelled, or handed back */
    }

    w = uvs__load(&t->worker);
    if (uvs__worker_pin(w, &foreign) != 0)
      return UV_EBUSY; /* handed back meanwhile, and its worker closed */
    s = w->sched;
    uv_mutex_lock(&s->lock);
    st = uvs__load(&t->state);
    if (uvs__load(&t->worker) == w &&
        ((st & UVS__T_MASK) == UVS__T_QUEUED ||
         (st & UVS__T_MASK) == UVS__T_DELAYED))
      break;
    /* Moved, handed back or re-scheduled meanwhile: look again. */
    uv_mutex_unlock(&s->lock);
    if (foreign)
      uvs__worker_leave(w);
  }

  /* Under the lock of the task's scheduler now. */
  err = uvs__cancel_locked(s, t);
  if (err == UV_EBUSY && (st & UVS__T_PERIODIC)) {
    /* Running: the run finishing hands it back instead of re-arming it. */
    if (!(st & UVS__T_CANCELLED)) {
      uvs__task_update(t, 0, UVS__T_CANCELLED);
      err = 0;
    }
  }
  uv_mutex_unlock(&s->lock);
  if (foreign)
    uvs__worker_leave(w);
  return err;
}
