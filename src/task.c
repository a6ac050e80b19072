/* Tasks: init, the schedule calls, and cancel. */

#include "internal.h"

#include <sched.h>


UVS__TLS struct uvs__tls_s uvs__tls;


int uvs_task_init(uvs_task_t* t, uvs_run_cb run, uvs_done_cb done) {
  if (t == NULL || run == NULL)
    return UV_EINVAL;
  t->run_cb = run;
  t->done_cb = done;
  uvs__queue_init(&t->node);
  uvs__queue_init(&t->tnode);
  uvs__store_rel(&t->worker, NULL);
  t->due = 0;
  t->period = 0;
  t->key = 0;
  t->status = 0;
  uvs__store_rel(&t->state, UVS__T_IDLE);
  return 0;
}


/* Takes a task into custody: IDLE or FINISHED -> CLAIMED, with one CAS, so
 * that two schedule calls racing for one task can't both win. A one-shot
 * task may also be claimed once from inside its own run_cb; that run then
 * counts as still executing until it returns (see end_run). *prev gets the
 * state before, for unclaim(). */
static int claim(uvs_task_t* t, unsigned* claimed, unsigned* prev) {
  uvs_sched_t* held;
  unsigned o;
  unsigned n;
  int own;
  int err;

  own = uvs__tls.current == t && !uvs__tls.rescheduled;
  /* A running task sits in its worker's batch, where a cancel holding that
   * worker's scheduler lock may be reading its links; the claim that
   * rewrites them takes the same lock. Only its own run_cb can claim a
   * running task, and no lock is held there. */
  held = NULL;
  if (own && t->done_cb != NULL) {
    held = t->worker->sched;
    uv_mutex_lock(&held->lock);
  }
  err = 0;
  o = uvs__load_acq(&t->state);
  for (;;) {
    switch (o & UVS__T_MASK) {
      case UVS__T_IDLE:
      case UVS__T_FINISHED:
        break;
      case UVS__T_QUEUED:
        /* Running: its own run_cb may schedule a one-shot task again. */
        if (own && !(o & UVS__T_PERIODIC))
          break;
        err = UV_EBUSY;
        break;
      default:
        err = UV_EBUSY;
    }
    if (err != 0)
      break;
    n = (o & UVS__T_RUNS) | UVS__T_CLAIMED;
    if (own && t->done_cb != NULL)
      n += UVS__T_RUN_ONE;
    if (__atomic_compare_exchange_n(&t->state, &o, n, 1, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      break;
  }
  if (held != NULL)
    uv_mutex_unlock(&held->lock);
  if (err != 0)
    return err;
  if (own)
    uvs__tls.rescheduled = 1;
  *claimed = n;
  *prev = o;
  return 0;
}


/* Gives a claimed task back as it was (a schedule failed after claiming). */
static void unclaim(uvs_task_t* t, unsigned claimed, unsigned prev) {
  unsigned o;
  unsigned n;

  o = uvs__load_rlx(&t->state);
  do {
    n = (o & UVS__T_RUNS) | (prev & ~UVS__T_RUNS);
    if ((claimed & UVS__T_RUNS) != (prev & UVS__T_RUNS))
      n -= UVS__T_RUN_ONE; /* the count an own claim added */
  } while (!__atomic_compare_exchange_n(&t->state, &o, n, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED));
  if ((claimed & UVS__T_RUNS) != (prev & UVS__T_RUNS))
    uvs__tls.rescheduled = 0;
}


/* Ends a claim with the task's new state. Only a claim from the task's own
 * run_cb leaves a run count that another thread may change meanwhile; any
 * other claimed task is ours alone, and a release store will do. */
static void publish(uvs_task_t* t, unsigned claimed, unsigned state) {
  if (claimed & UVS__T_RUNS)
    uvs__task_update(t, ~UVS__T_RUNS, state);
  else
    uvs__store_rel(&t->state, state);
}


/* accept_now() for a worker with per-key bounds: under the lock, counted
 * in against its key (which may evict that key's oldest task) and the
 * worker's bound, and filed under its key at once. */
static int accept_filed(uvs_worker_t* w,
                        uvs_task_t* t,
                        unsigned flags,
                        unsigned claimed,
                        unsigned prev) {
  uvs_sched_t* s;
  uvs_task_t* evicted;
  int err;

  s = w->sched;
  uv_mutex_lock(&s->lock);
  err = uvs__keys_admit(w, t, &evicted);
  /* Out of the worker's count before the new task counts in: DROP_OLDEST
   * evicts one task for one task. */
  if (evicted != NULL)
    uvs__evicted(w, evicted);
  if (err == 0 && w->counting) {
    err = uvs__admit(w, 1);
    if (err != 0)
      uvs__keys_unadmit(w, t);
  }
  if (err != 0) {
    uv_mutex_unlock(&s->lock);
    if (!(flags & UVS__T_POST))
      unclaim(t, claimed, prev);
    return err;
  }
  uvs__mark_ready(w, t);
  uvs__store_rel(&t->worker, w);
  t->period = 0;
  t->due = 0;
  publish(t, claimed, flags | UVS__T_QUEUED);
  w->nsched++;
  uvs__worker_file(w, t);
  uv_mutex_unlock(&s->lock);
  return 0;
}


/* Schedules onto an open worker, on the lock-free path; flags are extra
 * state flags (UVS__T_POST). A full worker's UV_EAGAIN counts as a
 * rejected call if count is set: a uvs_schedule_wait() that tries again
 * counts once, at its end. */
static int accept_now(uvs_worker_t* w,
                      uvs_task_t* t,
                      unsigned flags,
                      int count) {
  unsigned claimed;
  unsigned prev;
  int err;

  /* A post node is the library's own and nobody else can name it: nothing
   * to claim it from. */
  claimed = 0;
  prev = 0;
  if (!(flags & UVS__T_POST)) {
    err = claim(t, &claimed, &prev);
    if (err != 0)
      return err;
  }
  t->status = 0;
  if (w->key_max != 0) {
    err = accept_filed(w, t, flags, claimed, prev);
    if (err == UV_EAGAIN && count)
      uvs__add_sc(&w->nrejected, 1);
    return err;
  }
  if (w->counting) {
    err = uvs__admit(w, 0);
    if (err != 0) {
      if (!(flags & UVS__T_POST))
        unclaim(t, claimed, prev);
      if (count)
        uvs__add_sc(&w->nrejected, 1);
      return err;
    }
  }
  uvs__mark_ready(w, t);
  /* The worker (release) after the claim, the state (release) last: a cancel
   * that sees this worker sees the claim, and one that sees the state sees
   * every field (cancel()). */
  uvs__store_rel(&t->worker, w);
  t->period = 0;
  t->due = 0;
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
  unsigned prev;

  /* Claimed before the lock is taken, so that claim() may take the lock of
   * the task's current scheduler without a second lock held. */
  err = claim(t, &claimed, &prev);
  if (err != 0)
    return err;
  s = w->sched;
  uv_mutex_lock(&s->lock);
  /* Checked again under the lock: a close holds it while it cancels the
   * worker's delayed tasks, so none can slip in behind it. */
  if (uvs__shut(s, w)) {
    unclaim(t, claimed, prev);
    err = UV_ESHUTDOWN;
  } else {
    uvs__store_rel(&t->worker, w);
    t->period = period_ms;
    uvs__set_due(s, t, t_call, delay_ms);
    publish(t, claimed,
            (period_ms != 0 ? UVS__T_PERIODIC : 0) | UVS__T_DELAYED);
    uvs__delay(w, t);
    w->nsched++;
  }
  uv_mutex_unlock(&s->lock);
  return err;
}


/* Validates, pins and answers for a closing worker, then accepts the task
 * now (queued; count as for accept_now()) or later (delayed, or periodic
 * with period_ms). */
static int schedule(uvs_worker_t* w,
                    uvs_task_t* t,
                    int delayed,
                    uint64_t delay_ms,
                    uint64_t period_ms,
                    int count) {
  uvs_sched_t* s;
  uint64_t t_call;
  int foreign;
  int err;

  t_call = delayed ? uvs__hrtime_late() : 0;
  if (w == NULL || t == NULL || t->run_cb == NULL)
    return UV_EINVAL;
  if (delayed && delay_ms > UVS__MAX_MS)
    return UV_EINVAL;

  if (uvs__worker_pin(w, &foreign) != 0)
    return UV_ESHUTDOWN;
  s = w->sched;
  if (uvs__shut(s, w))
    err = UV_ESHUTDOWN;
  else if (delayed)
    err = accept_later(w, t, t_call, delay_ms, period_ms);
  else
    err = accept_now(w, t, 0, count);
  uvs__worker_unpin(w, foreign);
  return err;
}


int uvs__schedule_node(uvs_worker_t* w, uvs_task_t* t) {
  /* post.c checked the worker; a close that starts meanwhile sweeps the
   * node up like any task that arrived late. */
  return accept_now(w, t, UVS__T_POST, 1);
}


int uvs_schedule(uvs_worker_t* worker, uvs_task_t* task) {
  return schedule(worker, task, 0, 0, 0, 1);
}


int uvs_schedule_after(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uint64_t delay_ms) {
  return schedule(worker, task, 1, delay_ms, 0, 1);
}


int uvs_schedule_every(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uint64_t delay_ms,
                       uint64_t period_ms) {
  if (period_ms == 0 || period_ms > UVS__MAX_MS)
    return UV_EINVAL;
  if (task != NULL && task->done_cb == NULL)
    return UV_EINVAL;
  return schedule(worker, task, 1, delay_ms, period_ms, 1);
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


static int cancel(uvs_task_t* t, uvs__hazard_t* hz) {
  uvs_sched_t* s;
  unsigned st;
  int err;

  err = lock_custody(t, hz, &s, &st);
  if (err != 0)
    return err;
  err = uvs__cancel_locked(s, t);
  if (err == UV_EBUSY && (st & UVS__T_PERIODIC)) {
    /* Running: the run finishing hands it back instead of re-arming it. */
    if (!(st & UVS__T_CANCELLED)) {
      uvs__task_update(t, 0, UVS__T_CANCELLED);
      err = 0;
    }
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

  t_call = uvs__hrtime_late();
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


int uvs_task_cancel(uvs_task_t* t) {
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
  err = cancel(t, hz);
  uvs__hazard_leave(hz);
  return err;
}


int uvs_schedule_wait(uvs_worker_t* w, uvs_task_t* t, uint64_t timeout_ms) {
  uvs__waiter_t waiter;
  uint64_t deadline;
  uint64_t now;
  int pinned;
  int err;

  now = uv_hrtime();
  err = schedule(w, t, 0, 0, 0, 0);
  if (err != UV_EAGAIN)
    return err;
  /* Pinned until it returns: a close wakes it, then waits for it to
   * leave, and the one count of a rejected call goes to a live worker. */
  if (uvs__worker_pin(w, &pinned) != 0)
    return UV_ESHUTDOWN;
  /* Never block the thread that would make room: the loop's, or a pool
   * thread. libuv can't say which threads are its pool's: one that ever
   * ran a drain of this library is known to be one. */
  if (w->on_full == UVS_FULL_BLOCK && !uvs__is_thread(&w->thread) &&
      !uvs__tls.draining && !uvs__tls.pool) {
    deadline = timeout_ms > (UINT64_MAX - now) / 1000000
                   ? UINT64_MAX
                   : now + timeout_ms * 1000000;
    if (uv_cond_init(&waiter.cond) != 0) {
      uvs__worker_unpin(w, pinned);
      return UV_ENOMEM;
    }
    while (err == UV_EAGAIN) {
      err = uvs__wait_room(w, &waiter, t->key, deadline);
      if (err == 0)
        err = schedule(w, t, 0, 0, 0, 0);
    }
    uv_cond_destroy(&waiter.cond);
  }
  if (err == UV_EAGAIN || err == UV_ETIMEDOUT)
    uvs__add_sc(&w->nrejected, 1);
  uvs__worker_unpin(w, pinned);
  return err;
}


int uvs_task_set_key(uvs_task_t* t, uint64_t key) {
  unsigned st;

  if (t == NULL)
    return UV_EINVAL;
  st = uvs__load_acq(&t->state) & UVS__T_MASK;
  if (st != UVS__T_IDLE && st != UVS__T_FINISHED)
    return UV_EBUSY;
  t->key = key;
  return 0;
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
  err = reschedule(t, hz, delay_ms);
  uvs__hazard_leave(hz);
  return err;
}
