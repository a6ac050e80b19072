/* All of time: due times from a call's time and a delay, the loop's
 * uv_timer armed for the wheel's next due time, tasks that fall due moved
 * to their workers' queues, periodic runs coalesced and put back on their
 * grid, and the manual clock's advance. The unit is the ms of the
 * scheduler's clock (uvs__clock_ms) for the wheel and the grid, and the us
 * for a one-shot task's exact due time (uvs__due_us).
 *
 * Below it: the wheel (wheel.c) and the delayed lists it shares with
 * bounds (delay.c). Everything here needs the scheduler's lock, except
 * uvs__publish_now and uvs__advance, which take it themselves.
 */

#include "internal.h"


/* Sets the due time of a delay from t_call on s's clock (uvs__due_us()):
 * rounded up, so that it is never before t_call + delay (guarantee 6); to
 * the us for a one-shot task, to the ms for a periodic one, whose grid
 * stays on whole ms; a manual clock stands still between advances, so its
 * now is exact. period must be set. */
void uvs__set_due(uvs_sched_t* s,
                  uvs_task_t* t,
                  uint64_t t_call,
                  uint64_t delay) {
  uint64_t us;

  uvs__task_set_due_frac(t, 0);
  if (s->manual_clock) {
    t->due = uvs__clock_ms(s) + delay;
  } else if (t->period != 0) {
    t->due = (t_call + 999999) / 1000000 + delay;
  } else {
    us = (t_call + 999) / 1000 + delay * 1000;
    t->due = us / 1000;
    uvs__task_set_due_frac(t, (uint32_t) (us % 1000));
  }
}


void uvs__publish_now(uvs_sched_t* s) {
  uint64_t now;

  /* Only the loop thread stores, so a plain max keeps it monotonic. */
  now = uv_now(s->loop);
  if (now > uvs__load_rlx(&s->now))
    uvs__store_rel(&s->now, now);
}


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


/* A delayed task fell due: it joins the tail of its worker's queue. The
 * wheel hands over a ms at a time; one due later in this ms than *ctx (now,
 * in us) waits on sched->soon, still delayed, for the next timer phase. */
static void fire(void* ctx, uvs_task_t* t) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  int keyed;

  w = t->worker;
  s = w->sched;
  if (uvs__due_us(t) > *(const uint64_t*) ctx) {
    uvs__queue_push(&s->soon, &t->tnode);
    return;
  }
  uvs__undelay(w, t);
  if (admit_due(w, t, &keyed) != 0) {
    /* Full, and the worker or the key rejects: a periodic task skips this
     * grid point, a one-shot is handed back. */
    if (uvs__load_rlx(&t->state) & UVS__T_PERIODIC) {
      uvs__skip_grid_point(w, t);
    } else {
      w->ndropped++;
      uvs__drop(s, t, UV_ENOBUFS);
    }
    return;
  }
  uvs__due(w, t, keyed);
}


/* Moves due delayed tasks to their workers' queues. Lock held. */
void uvs__fire_timers(uvs_sched_t* s) {
  uvs__queue_t batch;
  uvs__queue_t* q;
  uint64_t now;

  /* uv_timer may fire up to a ms early, and the loop's cached time lags:
   * compare with the real clock. A manual clock fires here only what is
   * due at its time already: a periodic task that a pool run re-armed
   * after the uvs_clock_advance() that reached its next grid point. What
   * waited for later in its ms goes first, in due order. */
  now = uvs__clock_us(s);
  uvs__queue_init(&batch);
  uvs__queue_move(&s->soon, &batch);
  while ((q = uvs__queue_shift(&batch)) != NULL)
    fire(&now, uvs__container_of(q, uvs_task_t, tnode));
  uvs__timers_expire(s->timers, now / 1000, fire, &now);
}


void uvs__rearm_timer(uvs_sched_t* s, uv_timer_cb timer_cb) {
  uint64_t due;
  uint64_t now;
  uint64_t timeout;

  s->timer_asked = UINT64_MAX;
  /* A manual clock moves only with uvs_clock_advance(): the timer is for
   * what is due at its time already. */
  due = uvs__timers_next(s->timers);
  now = uvs__clock_us(s);
  if (s->manual_clock && due > now / 1000)
    due = UINT64_MAX;
  /* Tasks due later in a ms that has begun: the next ms. */
  if (!uvs__queue_empty(&s->soon) && due > now / 1000 + 1)
    due = now / 1000 + 1;
  if (due == UINT64_MAX) {
    uv_timer_stop(&s->timer);
    s->timer_due = UINT64_MAX;
    return;
  }
  if (uv_is_active((uv_handle_t*) &s->timer) && s->timer_due == due)
    return;
  /* The poll wakes a whole number of ms after it begins, whatever the
   * phase of the real clock: the timeout is counted from the real clock
   * now (libuv's cached time, brought up to date first so that the timer
   * is due by it), rounded up, so that the wake is at or after the start
   * of due's ms, where the wheel hands its tasks over. What is due
   * already fires at the next timer phase. A task waiting on soon is due
   * within the ms after now: the wake a ms from now is late for it by
   * less than a ms, never early. */
  if (!s->manual_clock)
    uv_update_time(s->loop);
  if (due * 1000 <= now)
    timeout = 0;
  else
    timeout = (due * 1000 - now + 999) / 1000;
  s->timer_due = due;
  uv_timer_start(&s->timer, timer_cb, timeout, 0);
}


void uvs__advance(uvs_sched_t* s, uint64_t ms) {
  uint64_t target;
  uint64_t next;
  uint64_t now;

  uv_mutex_lock(&s->lock);
  target = uvs__load_rlx(&s->manual_now) + ms;
  /* Step to each time something is due (or the wheel must cascade), so
   * that tasks fire in due order and periodic ones see the clock of their
   * own grid point, as if the time had passed. */
  while ((next = uvs__timers_next(s->timers)) <= target) {
    if (next > uvs__load_rlx(&s->manual_now))
      uvs__store_rel(&s->manual_now, next);
    now = uvs__load_rlx(&s->manual_now) * 1000;
    uvs__timers_expire(s->timers, now / 1000, fire, &now);
  }
  uvs__store_rel(&s->manual_now, target);
  uvs__ring(s, UVS__BELL_TIMER);
  uv_mutex_unlock(&s->lock);
}


void uvs__due(uvs_worker_t* w, uvs_task_t* t, int keyed) {
  uvs__task_update(t, UVS__T_MASK, UVS__T_QUEUED);
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


/* A periodic run stands for every grid point passed by the time it starts,
 * however long it waited in the queue or the loop was blocked. */
void uvs__coalesce(uvs_task_t* t) {
  uint64_t now;

  now = uvs__clock_ms(t->worker->sched);
  t->due = uvs__grid_latest(t, now);
}


/* After a periodic run (lock held): back on its grid, or handed back. */
void uvs__finish_periodic(uvs_sched_t* s, uvs_worker_t* w, uvs_task_t* t) {
  uint64_t now;
  uint64_t next;

  if ((uvs__load_rlx(&t->state) & UVS__T_CANCELLED) ||
      (w->flags & UVS__WF_CLOSING)) {
    uvs__drop(s, t, UV_ECANCELED);
    return;
  }
  /* Fixed rate: the next grid point, or, if the run overran it, the latest
   * grid point passed, which stands for all those missed meanwhile. */
  now = uvs__clock_ms(s);
  next = t->due + t->period;
  if (next <= now)
    next = uvs__grid_latest(t, now);
  t->due = next;
  uvs__task_update(t, UVS__T_MASK, UVS__T_DELAYED);
  uvs__delay(w, t);
}
