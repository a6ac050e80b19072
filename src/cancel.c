/* Taking a task back from a worker, or moving it in time: uvs_task_cancel
 * and uvs_task_reschedule. Either finds the worker whose custody the task
 * is in without a lock (the task names it; a hazard slot keeps it alive
 * while we look, hazard.c), takes that scheduler's lock, and acts on what
 * the task's state says there: a delayed task leaves the wheel, a queued
 * one leaves the FIFO or has its batch slot tombstoned, a keyed one lets
 * go of its key's place (keys.c), and a running one is the run's to end.
 */

#include "internal.h"

#include <sched.h>


/* cancel_locked()'s answer when the task's producer has not linked it yet:
 * let the lock go and try again. Not an error code: it never leaves here. */
#define NOT_LINKED 1

/* Cancels a queued or delayed task (lock held): 0, UV_EBUSY if a drain
 * already took it, or NOT_LINKED. */
static int cancel_locked(uvs_sched_t* s, uvs_task_t* t) {
  if ((uvs__load_rlx(&t->state) & UVS__T_MASK) == UVS__T_DELAYED) {
    /* The timer may stay armed for it: it fires, finds nothing due and
     * re-arms, which is cheaper than re-arming on every cancel. */
    uvs__undelay(t->worker, t);
    uvs__drop(s, t, UV_ECANCELED);
    return 0;
  }

  /* Queued: after the flush it is in the FIFO, or in a drain's batch with
   * its slot tagged on it; it is unlinked while a producer that has
   * published the task is still pushing it, a few instructions away, or
   * one that pushed before it is. Waiting for it here would hold up every
   * drain. */
  uvs__inbox_flush(t->worker);
  if (uvs__task_unlinked(t))
    return NOT_LINKED;
  if (uvs__take_out(t->worker, t) != 0)
    return UV_EBUSY; /* the drain took it: running */
  uvs__drop(s, t, UV_ECANCELED);
  return 0;
}


/* Takes the lock of the scheduler whose worker holds t queued or delayed,
 * with that worker named in hz: 0 and *sp locked, *stp the state seen
 * under the lock, or UV_EBUSY if t is in no worker's custody (cancelled,
 * handed back). */
static int lock_custody(uvs_task_t* t,
                        uvs__hazard_t* hz,
                        uvs_sched_t** sp,
                        unsigned* stp) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  unsigned st;

  for (;;) {
    st = uvs__load_acq(&t->state);
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

    /* w may finish closing and be freed at any moment: name it in this
     * thread's hazard slot, which its close waits out, then check that the
     * task is still pending in it. If the close completed first, the check
     * sees the task handed back (src/hazard.c). */
    w = uvs__load_acq(&t->worker);
    uvs__hazard_protect(hz, w);
    st = uvs__load_acq(&t->state);
    if (((st & UVS__T_MASK) != UVS__T_QUEUED &&
         (st & UVS__T_MASK) != UVS__T_DELAYED) ||
        uvs__load_acq(&t->worker) != w)
      continue;
    s = w->sched;
    uv_mutex_lock(&s->lock);
    /* The worker first, then the state. Seeing w as the worker after a
     * claim that moved the task to w means seeing that claim: the state is
     * then CLAIMED or published to w. Seeing w before any such claim, a
     * queued state means the task is in w's custody, and a claim that takes
     * it out needs the lock held here. */
    if (uvs__load_acq(&t->worker) == w) {
      st = uvs__load_acq(&t->state);
      if ((st & UVS__T_MASK) == UVS__T_QUEUED ||
          (st & UVS__T_MASK) == UVS__T_DELAYED) {
        *sp = s;
        *stp = st;
        return 0;
      }
    }
    /* Moved, handed back or re-scheduled meanwhile: look again. */
    uv_mutex_unlock(&s->lock);
  }
}


/* Cancels t (lock_custody, cancel_locked); with interrupt (0.5) a running
 * one-shot task is marked instead, so that uvs_task_check() answers
 * UV_ECANCELED until its run_cb returns (coop.c), and a run that yields
 * after it is handed back (drain.c). */
static int cancel(uvs_task_t* t, uvs__hazard_t* hz, int interrupt) {
  uvs_sched_t* s;
  unsigned st;
  int err;

  for (;;) {
    err = lock_custody(t, hz, &s, &st);
    if (err != 0)
      return err;
    err = cancel_locked(s, t);
    if (err != NOT_LINKED)
      break;
    uv_mutex_unlock(&s->lock);
    sched_yield(); /* let the producer link it */
  }
  if (err == UV_EBUSY && (st & UVS__T_PERIODIC)) {
    /* Running: the run finishing hands it back instead of re-arming it. */
    if (!(st & UVS__T_CANCELLED)) {
      uvs__task_update(t, 0,
                       UVS__T_CANCELLED | (interrupt ? UVS__T_INTERRUPTED : 0));
      err = 0;
    }
  } else if (err == UV_EBUSY && interrupt && !(st & UVS__T_INTERRUPTED)) {
    /* A one-shot task running: its run_cb is told, and it is handed back
     * with status 0 when it returns (it ran). */
    uvs__task_update(t, 0, UVS__T_INTERRUPTED);
    err = 0;
  }
  uv_mutex_unlock(&s->lock);
  return err;
}


/* Is t on its way back from a worker or scheduler that is closing: handed
 * back, its done_cb not called yet? The worker named in hz is alive while
 * the task has not been delivered (its close completes after that). */
static int closing_holds(uvs_task_t* t, uvs__hazard_t* hz) {
  uvs_worker_t* w;

  if ((uvs__load_acq(&t->state) & UVS__T_MASK) != UVS__T_HANDBACK)
    return 0;
  w = uvs__load_acq(&t->worker);
  uvs__hazard_protect(hz, w);
  if ((uvs__load_acq(&t->state) & UVS__T_MASK) != UVS__T_HANDBACK ||
      uvs__load_acq(&t->worker) != w)
    return 0;
  return uvs__shut(w->sched, w);
}


static int reschedule(uvs_task_t* t, uvs__hazard_t* hz, uint64_t delay) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  uint64_t t_call;
  unsigned st;
  int err;

  t_call = uv_hrtime();
  err = lock_custody(t, hz, &s, &st);
  if (err == UV_EBUSY && closing_holds(t, hz))
    return UV_ESHUTDOWN; /* it comes back as the close decides */
  if (err != 0)
    return err;
  w = t->worker;
  if (uvs__shut(s, w))
    err = UV_ESHUTDOWN; /* it comes back as the close decides */
  else if ((st & UVS__T_MASK) != UVS__T_DELAYED)
    err = UV_EBUSY; /* queued or running: it runs as before */
  else {
    /* Out of the wheel and back in at the tail of its new slot: for the
     * same-ms order it counts as scheduled now. */
    uvs__undelay(w, t);
    uvs__set_due(s, t, t_call, delay);
    uvs__delay(w, t);
  }
  uv_mutex_unlock(&s->lock);
  return err;
}


static int cancel_call(uvs_task_t* t, int interrupt) {
  uvs__hazard_t* hz;
  unsigned st;
  int err;

  if (t == NULL)
    return UV_EINVAL;
  st = uvs__load_acq(&t->state);
  if ((st & UVS__T_MASK) == UVS__T_IDLE || t->done_cb == NULL)
    return UV_EINVAL;
  /* A cancel may read a task's worker just as the task is handed back and
   * its worker closed and freed: the hazard slot keeps the worker it uses
   * alive, and no other. */
  hz = uvs__hazard_enter();
  if (hz == NULL)
    return UV_ENOMEM;
  err = cancel(t, hz, interrupt);
  uvs__hazard_leave(hz);
  return err;
}


int uvs_task_cancel(uvs_task_t* t) {
  return cancel_call(t, 0);
}


int uvs_task_interrupt(uvs_task_t* t) {
  return cancel_call(t, 1);
}


int uvs_task_reschedule(uvs_task_t* t, uint64_t delay_ms) {
  uvs__hazard_t* hz;
  unsigned st;
  int err;

  if (t == NULL || delay_ms > UVS__MAX_MS)
    return UV_EINVAL;
  st = uvs__load_acq(&t->state);
  if ((st & UVS__T_MASK) == UVS__T_IDLE)
    return UV_EINVAL; /* never scheduled */
  hz = uvs__hazard_enter();
  if (hz == NULL)
    return UV_ENOMEM;
  err = reschedule(t, hz, delay_ms);
  uvs__hazard_leave(hz);
  return err;
}
