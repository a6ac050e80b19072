/* Tasks: init, keys, and the schedule calls, from the claim of a task's
 * state word to its acceptance into a worker's custody: queued now (the
 * inbox, or filed under its key with per-key bounds), or delayed (the
 * wheel, timer.c), past the worker's bound as bound.c decides. */

#include "internal.h"


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
  uvs__task_set_result(t, 0);
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

  own = uvs__tls.current == t && !uvs__tls.rescheduled && !uvs__tls.yielded;
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
  if (own) {
    uvs__tls.rescheduled = 1;
    /* The new custody's state has no mark of an interrupt that reached
     * this run; the run still hears it (coop.c). */
    if (o & UVS__T_INTERRUPTED)
      uvs__tls.interrupted = 1;
  }
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
  evicted = NULL;
  if (s->hook != NULL) {
    /* Accepted: the hook hears it without the lock, before a lane can
     * start the task. A close that begins meanwhile sweeps it up after
     * this call leaves (close.c), as it does a late arrival. Counted in
     * and not filed meanwhile, it is the one a DROP_OLDEST of its full
     * key evicts if none of the key's is filed (bound.c): the bound
     * holds while the lock is let go. */
    uvs__keys_filing(w, t);
    uv_mutex_unlock(&s->lock);
    uvs__hook(s, w, (flags & UVS__T_POST) ? NULL : t, UVS_EV_ACCEPTED, 0);
    uv_mutex_lock(&s->lock);
    if (uvs__keys_filed(w, t))
      evicted = t;
  }
  uvs__mark_ready(w, t);
  uvs__store_rel(&t->worker, w);
  uvs__task_set_period(t, 0);
  t->due = 0;
  publish(t, claimed, flags | UVS__T_QUEUED);
  w->nsched++;
  if (evicted != NULL)
    uvs__evicted(w, t); /* out of the counts already */
  else
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
  uvs__task_set_result(t, 0);
  /* A barrier belongs to no key from here on (uvs__task_key). */
  if (flags & UVS__T_BARRIER)
    __atomic_fetch_or(&t->state, UVS__T_BARRIER, __ATOMIC_RELAXED);
  /* keys before key_max: a plain worker's schedule reads only the first
   * 64 bytes of it (private.h). */
  if (w->keys != NULL && w->key_max != 0) {
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
  uvs__hook(w->sched, w, (flags & UVS__T_POST) ? NULL : t, UVS_EV_ACCEPTED, 0);
  uvs__mark_ready(w, t);
  /* The worker (release) after the claim, the state (release) last: a cancel
   * that sees this worker sees the claim, and one that sees the state sees
   * every field (cancel()). */
  uvs__store_rel(&t->worker, w);
  uvs__task_set_period(t, 0);
  t->due = 0;
  uvs__task_set_unlinked(t); /* on its way to the inbox */
  publish(t, claimed, flags | UVS__T_QUEUED);
  if (uvs__worker_push(w, t, 0) && w->where == UVS_POOL &&
      uvs__on_loop_thread(w->sched))
    uvs__post_first(w->sched);
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
    uv_mutex_unlock(&s->lock);
    unclaim(t, claimed, prev);
    return UV_ESHUTDOWN;
  }
  uvs__store_rel(&t->worker, w);
  uvs__task_set_period(t, period_ms);
  if (s->hook != NULL) {
    /* Accepted: the hook hears it without the lock, before the task can
     * fall due. A close that began meanwhile has cancelled the worker's
     * delayed tasks already: this one is handed back as they were. */
    uv_mutex_unlock(&s->lock);
    uvs__hook(s, w, t, UVS_EV_ACCEPTED, 0);
    uv_mutex_lock(&s->lock);
    if (uvs__shut(s, w)) {
      publish(t, claimed,
              (period_ms != 0 ? UVS__T_PERIODIC : 0) | UVS__T_DELAYED);
      w->nsched++;
      uvs__drop(s, t, UV_ECANCELED);
      uv_mutex_unlock(&s->lock);
      return 0;
    }
  }
  uvs__set_due(s, t, t_call, delay_ms);
  publish(t, claimed, (period_ms != 0 ? UVS__T_PERIODIC : 0) | UVS__T_DELAYED);
  uvs__delay(w, t);
  w->nsched++;
  uv_mutex_unlock(&s->lock);
  return 0;
}


/* Validates, pins and answers for a closing worker, then accepts the task
 * now (queued; count as for accept_now()) or later (delayed, or periodic
 * with period_ms). */
static int schedule(uvs_worker_t* w,
                    uvs_task_t* t,
                    int delayed,
                    uint64_t delay_ms,
                    uint64_t period_ms,
                    int count,
                    int barrier) {
  uvs_sched_t* s;
  uint64_t t_call;
  int foreign;
  int err;

  t_call = delayed ? uv_hrtime() : 0;
  if (w == NULL || t == NULL || t->run_cb == NULL)
    return UV_EINVAL;
  if (delayed && delay_ms > UVS__MAX_MS)
    return UV_EINVAL;

  err = uvs__worker_pin(w, &foreign);
  if (err != 0)
    return err;
  s = w->sched;
  if (uvs__shut(s, w))
    err = UV_ESHUTDOWN;
  else if (delayed)
    err = accept_later(w, t, t_call, delay_ms, period_ms);
  else
    err = accept_now(w, t, barrier ? UVS__T_BARRIER : 0, count);
  uvs__worker_unpin(w, foreign);
  return err;
}


int uvs__schedule_node(uvs_worker_t* w, uvs_task_t* t) {
  /* post.c checked the worker; a close that starts meanwhile sweeps the
   * node up like any task that arrived late. */
  return accept_now(w, t, UVS__T_POST, 1);
}


int uvs_schedule(uvs_worker_t* worker, uvs_task_t* task) {
  return schedule(worker, task, 0, 0, 0, 1, 0);
}


/* A barrier on a serial worker is an ordinary task: its worker runs one
 * task at a time already. On a wide one, keys.c holds back what follows. */
int uvs_schedule_barrier(uvs_worker_t* worker, uvs_task_t* task) {
  return schedule(worker, task, 0, 0, 0, 1, 1);
}


int uvs_schedule_after(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uint64_t delay_ms) {
  return schedule(worker, task, 1, delay_ms, 0, 1, 0);
}


int uvs_schedule_every(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uint64_t delay_ms,
                       uint64_t period_ms) {
  if (period_ms == 0 || period_ms > UVS__MAX_MS)
    return UV_EINVAL;
  if (task != NULL && task->done_cb == NULL)
    return UV_EINVAL;
  return schedule(worker, task, 1, delay_ms, period_ms, 1, 0);
}


int uvs_schedule_wait(uvs_worker_t* w, uvs_task_t* t, uint64_t timeout_ms) {
  uvs__waiter_t waiter;
  uint64_t deadline;
  uint64_t now;
  int pinned;
  int err;

  now = uv_hrtime();
  err = schedule(w, t, 0, 0, 0, 0, 0);
  if (err != UV_EAGAIN)
    return err;
  /* Pinned until it returns: a close wakes it, then waits for it to
   * leave, and the one count of a rejected call goes to a live worker. */
  if (uvs__worker_pin(w, &pinned) != 0)
    return UV_ESHUTDOWN; /* the schedule above pinned it: only a close */
  /* Never block the thread that would make room: the loop's, or a pool
   * thread. libuv can't say which threads are its pool's: one that ever
   * ran a drain of this library is known to be one. */
  if (w->on_full == UVS_FULL_BLOCK && !uvs__is_thread(&w->thread) &&
      !uvs__tls.draining && !uvs__tls.pool) {
    deadline = timeout_ms > (UINT64_MAX - now) / 1000000
                   ? UINT64_MAX
                   : now + timeout_ms * 1000000;
    while (err == UV_EAGAIN) {
      err = uvs__wait_room(w, &waiter, t->key, deadline);
      if (err == 0)
        err = schedule(w, t, 0, 0, 0, 0, 0);
    }
  }
  if (err == UV_EAGAIN || err == UV_ETIMEDOUT)
    uvs__add_sc(&w->nrejected, 1);
  uvs__worker_unpin(w, pinned);
  return err;
}


int uvs_task_set_expiry(uvs_task_t* t, uint64_t max_wait_ms) {
  unsigned st;

  if (t == NULL || max_wait_ms > UVS__MAX_MS)
    return UV_EINVAL;
  st = uvs__load_acq(&t->state) & UVS__T_MASK;
  if (st != UVS__T_IDLE && st != UVS__T_FINISHED)
    return UV_EBUSY;
  uvs__task_set_expiry_ms(t, max_wait_ms);
  return 0;
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
