/* The scheduler: the loop-thread side of uvsched.
 *
 * One mutex per scheduler (sched->lock) guards every worker FIFO, the timer
 * heap, the ready lists, the hand-back list, the stats and the task, worker
 * and scheduler states. Any thread may change that state under the lock; only
 * the loop thread acts on libuv (uv_queue_work, uv_timer_*, uv_idle_*,
 * uv_ref). A thread whose change needs the loop's attention calls
 * uvs__kick(): on the loop thread that starts the idle handle, elsewhere it
 * sends the async handle (once until the loop has looked: libuv coalesces
 * sends anyway). The loop thread then runs process().
 */

#include "internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

enum {
  UVS__S_KICKED = 4,         /* the loop thread kicked since process() began */
  UVS__S_HANDLES_CLOSING = 8 /* uv_close() called on our handles */
};

/* What a call of process() does besides the common work. */
enum { FIRE_TIMERS = 1, LOOP_TURN = 2 };

static void process(uvs_sched_t* s, int what);


uint64_t uvs__now_ms(void) {
  return uv_hrtime() / 1000000;
}


int uvs__on_loop_thread(const uvs_sched_t* s) {
  uv_thread_t self;

  self = uv_thread_self();
  return uv_thread_equal(&self, &s->thread);
}


static void publish_now(uvs_sched_t* s) {
  uint64_t now;

  /* Only the loop thread stores, so a plain max keeps it monotonic. */
  now = uv_now(s->loop);
  if (now > uvs__load_relaxed(&s->now))
    uvs__store(&s->now, now);
}


static void idle_cb(uv_idle_t* handle) {
  process(uvs__container_of(handle, uvs_sched_t, idle), LOOP_TURN);
}


static void timer_cb(uv_timer_t* handle) {
  process(uvs__container_of(handle, uvs_sched_t, timer), FIRE_TIMERS);
}


static void async_cb(uv_async_t* handle) {
  uvs_sched_t* s;

  s = uvs__container_of(handle, uvs_sched_t, async);
  uv_mutex_lock(&s->lock);
  if (s->flags & UVS__S_ASYNC_SENT)
    s->stats.wakeups++;
  uv_mutex_unlock(&s->lock);
  process(s, 0);
}


void uvs__kick(uvs_sched_t* s) {
  if (uvs__on_loop_thread(s)) {
    s->flags |= UVS__S_KICKED;
    uv_idle_start(&s->idle, idle_cb);
    return;
  }
  /* Sent under the lock: the loop thread decides to close the async handle
   * under the lock too, once nothing is pending, so no send races uv_close. */
  if (!(s->flags & UVS__S_ASYNC_SENT)) {
    s->flags |= UVS__S_ASYNC_SENT;
    uv_async_send(&s->async);
  }
}


void uvs__worker_make_ready(uvs_worker_t* w) {
  uvs_sched_t* s;

  /* A worker that is ready already, or has a drain, will see the new work. */
  if (w->state != UVS__W_IDLE)
    return;
  s = w->sched;
  w->state = UVS__W_READY;
  uvs__queue_push(w->where == UVS_POOL ? &s->ready : &s->loop_ready,
                  &w->ready_node);
  uvs__kick(s);
}


/* A worker whose FIFO was emptied by a cancel or a close leaves its ready
 * list, so that no drain is posted for nothing. */
void uvs__worker_unready_if_empty(uvs_worker_t* w) {
  if (w->state == UVS__W_READY && uvs__queue_empty(&w->fifo)) {
    uvs__queue_remove(&w->ready_node);
    w->state = UVS__W_IDLE;
  }
}


/* Puts a task on the done list and stops counting it as pending. */
static void enqueue_done(uvs_sched_t* s, uvs_task_t* t) {
  t->worker->npending--;
  s->stats.pending--;
  if (t->status != 0)
    s->stats.cancelled++;
  uvs__queue_push(&s->done, &t->node);
  uvs__kick(s);
}


/* Ends the library's custody of a task that is linked nowhere. Lock held. */
static void drop(uvs_sched_t* s, uvs_task_t* t, int status) {
  unsigned o;
  unsigned n;

  o = uvs__load_relaxed(&t->state);
  if ((o & UVS__T_POST) || t->done_cb == NULL) {
    t->worker->npending--;
    s->stats.pending--;
    if (status != 0)
      s->stats.cancelled++;
    if (o & UVS__T_POST)
      uvs__post_release(s, t);
    else
      uvs__task_update(t, ~UVS__T_RUNS, UVS__T_FINISHED); /* released */
    return;
  }

  t->status = status;
  do {
    n = (o & ~UVS__T_MASK) | UVS__T_HANDBACK;
    if (o & UVS__T_RUNS)
      n |= UVS__T_DEFERRED;
  } while (!__atomic_compare_exchange_n(
      &t->state, &o, n, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
  /* A deferred task stays pending in its worker; the last run to end puts
   * it on the done list (end_run). */
  if (!(n & UVS__T_DEFERRED))
    enqueue_done(s, t);
}


/* Ends one run_cb of a task with a done_cb, outside any lock. Returns 0 when
 * the caller may go on touching the task. After a run_cb that scheduled its
 * own task again the task is no longer the caller's: returns 1, and if a
 * hand-back was waiting for this run, makes it. */
static int end_run(uvs_task_t* t, int rescheduled) {
  uvs_sched_t* s;
  unsigned o;
  unsigned n;
  int take;

  o = uvs__load_relaxed(&t->state);
  do {
    n = o - UVS__T_RUN_ONE;
    take = (n & UVS__T_DEFERRED) && !(n & UVS__T_RUNS);
    if (take)
      n &= ~UVS__T_DEFERRED;
  } while (!__atomic_compare_exchange_n(
      &t->state, &o, n, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
  if (take) {
    /* Its worker can't finish closing while the task is pending in it, so
     * the worker and its scheduler are alive. */
    s = t->worker->sched;
    uv_mutex_lock(&s->lock);
    enqueue_done(s, t);
    uv_mutex_unlock(&s->lock);
  }
  return rescheduled;
}


void uvs__handback(uvs_sched_t* s, uvs_task_t* t, int status) {
  drop(s, t, status);
}


void uvs__cancel_locked(uvs_sched_t* s, uvs_task_t* t) {
  uvs_worker_t* w;

  w = t->worker;
  switch (uvs__load_relaxed(&t->state) & UVS__T_MASK) {
    case UVS__T_QUEUED:
      uvs__queue_remove(&t->node);
      uvs__worker_unready_if_empty(w);
      break;
    case UVS__T_DELAYED:
      uvs__timers_remove(s->timers, t);
      uvs__queue_remove(&t->node);
      /* The loop re-arms the timer to the new minimum when it looks. */
      uvs__kick(s);
      break;
    default:
      abort();
  }
  drop(s, t, UV_ECANCELED);
}


/* After a run_cb returned (lock held): hand the task back, or put a periodic
 * task back on its grid. */
static void finish_run(uvs_sched_t* s, uvs_task_t* t) {
  uvs_worker_t* w;
  unsigned st;
  uint64_t now;
  uint64_t next;

  w = t->worker;
  st = uvs__load_relaxed(&t->state);
  if (!(st & UVS__T_PERIODIC)) {
    drop(s, t, 0);
    return;
  }
  if ((st & UVS__T_CANCELLED) || (w->flags & UVS__W_CLOSING)) {
    drop(s, t, UV_ECANCELED);
    return;
  }

  /* Fixed rate: the next grid point, or, if the run overran it, the latest
   * grid point passed, which stands for all the missed ones. */
  now = uvs__now_ms();
  next = t->due + t->period;
  if (next <= now)
    next = t->due + (now - t->due) / t->period * t->period;
  t->due = next;
  uvs__task_update(t, UVS__T_MASK, UVS__T_DELAYED);
  uvs__timers_insert(s->timers, t);
  uvs__queue_push(&w->delayed, &t->node);
  if (next < s->timer_due)
    uvs__kick(s); /* the timer needs re-arming */
}


/* A periodic run stands for every grid point passed by the time it starts,
 * however long it waited in the FIFO or the loop was blocked. */
static void coalesce(uvs_task_t* t) {
  uint64_t now;

  now = uvs__now_ms();
  if (now >= t->due + t->period)
    t->due += (now - t->due) / t->period * t->period;
}


void uvs__run_tasks(uvs_worker_t* w) {
  uvs_sched_t* s;
  uvs__queue_t* q;
  uvs_task_t* t;
  unsigned st;
  unsigned n;
  int released;
  int rescheduled;

  s = w->sched;
  uv_mutex_lock(&s->lock);
  for (n = 0; n < s->budget; n++) {
    q = uvs__queue_shift(&w->fifo);
    if (q == NULL)
      break;
    t = uvs__container_of(q, uvs_task_t, node);
    st = uvs__load_relaxed(&t->state);
    released = t->done_cb == NULL;
    if (released) {
      /* Custody ends as run_cb is entered: count it now, touch it never
       * again (a post node is ours and is recycled after the run). */
      w->npending--;
      s->stats.pending--;
      s->stats.ran++;
      if (!(st & UVS__T_POST))
        uvs__task_update(t, ~UVS__T_RUNS, UVS__T_FINISHED);
    } else {
      if (st & UVS__T_PERIODIC)
        coalesce(t);
      /* One more run executing; the hand-back waits for it. */
      uvs__task_update(t, UVS__T_MASK, UVS__T_RUNNING);
      __atomic_fetch_add(&t->state, UVS__T_RUN_ONE, __ATOMIC_ACQ_REL);
    }
    uv_mutex_unlock(&s->lock);

    uvs__tls.current = t;
    uvs__tls.rescheduled = 0;
    t->run_cb(t);
    rescheduled = uvs__tls.rescheduled;
    uvs__tls.current = NULL;
    if (!released)
      rescheduled = end_run(t, rescheduled);

    uv_mutex_lock(&s->lock);
    if (st & UVS__T_POST) {
      uvs__post_release(s, t);
    } else if (released) {
      /* Not ours any more. */
    } else if (rescheduled) {
      /* run_cb scheduled its own task again: this custody ends without a
       * hand-back, and the task may already belong to another worker. */
      w->npending--;
      s->stats.pending--;
      s->stats.ran++;
    } else {
      s->stats.ran++;
      finish_run(s, t);
    }
  }
  uv_mutex_unlock(&s->lock);
}


/* A delayed task fell due: it joins the tail of its worker's FIFO. */
static void fire(void* ctx, uvs_task_t* t) {
  (void) ctx;
  uvs__queue_remove(&t->node);
  uvs__task_update(t, UVS__T_MASK, UVS__T_QUEUED);
  uvs__queue_push(&t->worker->fifo, &t->node);
  uvs__worker_make_ready(t->worker);
}


/* Moves due delayed tasks to their workers' FIFOs. Lock held. */
static void fire_timers(uvs_sched_t* s) {
  /* uv_timer may fire up to a ms early, and the loop's cached time lags:
   * compare with the real clock. */
  uvs__timers_expire(s->timers, uvs__now_ms(), fire, NULL);
}


static void rearm_timer(uvs_sched_t* s) {
  uint64_t due;
  uint64_t loop_now;
  uint64_t timeout;

  due = uvs__timers_next(s->timers);
  if (due == UINT64_MAX) {
    uv_timer_stop(&s->timer);
    s->timer_due = UINT64_MAX;
    return;
  }
  if (uv_is_active((uv_handle_t*) &s->timer) && s->timer_due == due)
    return;
  /* libuv measures the timeout from its cached time. What is due already
   * fires at the next timer phase; otherwise at least 1 ms, so that a clock
   * that lags the real one can't make us spin. */
  loop_now = uv_now(s->loop);
  if (due <= uvs__now_ms())
    timeout = 0;
  else if (due > loop_now)
    timeout = due - loop_now;
  else
    timeout = 1;
  s->timer_due = due;
  uv_timer_start(&s->timer, timer_cb, timeout, 0);
}


static void drain_after(uv_work_t* req, int status) {
  uvs_worker_t* w;
  uvs_sched_t* s;

  (void) status; /* never cancelled with uv_cancel */
  w = uvs__container_of(req, uvs_worker_t, work);
  s = w->sched;
  uv_mutex_lock(&s->lock);
  s->drains--;
  if (uvs__queue_empty(&w->fifo)) {
    w->state = UVS__W_IDLE;
  } else {
    /* Work left: rejoin the tail, so ready workers take turns. */
    w->state = UVS__W_READY;
    uvs__queue_push(&s->ready, &w->ready_node);
  }
  uv_mutex_unlock(&s->lock);
  process(s, 0);
}


static void drain_work(uv_work_t* req) {
  uvs__run_tasks(uvs__container_of(req, uvs_worker_t, work));
}


static int slot_free(const uvs_sched_t* s) {
  return s->max_concurrency == 0 || s->drains < s->max_concurrency;
}


/* Posts drains for ready pool workers, oldest first. Lock held. */
static void dispatch(uvs_sched_t* s) {
  uvs__queue_t* q;
  uvs_worker_t* w;

  while (slot_free(s) && (q = uvs__queue_shift(&s->ready)) != NULL) {
    w = uvs__container_of(q, uvs_worker_t, ready_node);
    w->state = UVS__W_POSTED;
    s->drains++;
    s->stats.drains++;
    if (uv_queue_work(s->loop, &w->work, drain_work, drain_after) != 0)
      abort(); /* only fails for a NULL work_cb */
  }
}


static void run_loop_workers(uvs_sched_t* s) {
  uvs__queue_t turn;
  uvs__queue_t* q;
  uvs_worker_t* w;

  /* Each worker ready now gets one turn of at most budget tasks; work that
   * arrives meanwhile waits for the next loop iteration, so I/O runs. */
  uvs__queue_init(&turn);
  uv_mutex_lock(&s->lock);
  uvs__queue_move(&s->loop_ready, &turn);
  while ((q = uvs__queue_shift(&turn)) != NULL) {
    w = uvs__container_of(q, uvs_worker_t, ready_node);
    w->state = UVS__W_POSTED;
    uv_mutex_unlock(&s->lock);
    uvs__run_tasks(w);
    uv_mutex_lock(&s->lock);
    if (uvs__queue_empty(&w->fifo)) {
      w->state = UVS__W_IDLE;
    } else {
      w->state = UVS__W_READY;
      uvs__queue_push(&s->loop_ready, &w->ready_node);
    }
  }
  uv_mutex_unlock(&s->lock);
}


/* Calls done_cb for everything handed back so far. */
static void deliver(uvs_sched_t* s) {
  uvs__queue_t batch;
  uvs__queue_t* q;
  uvs_task_t* t;
  uvs_done_cb done;
  int status;

  uvs__queue_init(&batch);
  uv_mutex_lock(&s->lock);
  uvs__queue_move(&s->done, &batch);
  uv_mutex_unlock(&s->lock);

  while ((q = uvs__queue_shift(&batch)) != NULL) {
    t = uvs__container_of(q, uvs_task_t, node);
    done = t->done_cb;
    status = t->status;
    /* From here the task is the user's: done_cb may free or reschedule it. */
    uvs__task_update(t, ~UVS__T_RUNS, UVS__T_FINISHED);
    done(t, status);
  }
}


static void wait_for_callers(unsigned* inflight) {
  /* A caller that pinned the object before it was marked closed is between
   * two atomics and a short critical section; let it get out. */
  while (__atomic_load_n(inflight, __ATOMIC_SEQ_CST) != 0)
    sched_yield();
}


static void handle_closed(uv_handle_t* handle) {
  uvs_sched_t* s;
  uvs_sched_close_cb cb;

  if (handle->type == UV_ASYNC)
    s = uvs__container_of(handle, uvs_sched_t, async);
  else if (handle->type == UV_TIMER)
    s = uvs__container_of(handle, uvs_sched_t, timer);
  else
    s = uvs__container_of(handle, uvs_sched_t, idle);
  if (--s->handles != 0)
    return;

  cb = s->close_cb;
  __atomic_store_n(&s->state, UVS__S_CLOSED, __ATOMIC_SEQ_CST);
  wait_for_callers(&s->inflight);
  uv_mutex_destroy(&s->lock);
  if (cb != NULL)
    cb(s);
}


/* Completes the closes that can complete. Returns 1 when the scheduler has
 * begun closing its handles: then the caller must not touch them. */
static int finish_closes(uvs_sched_t* s) {
  uvs__queue_t* q;
  uvs_worker_t* w;
  uvs_worker_close_cb cb;

  for (;;) {
    uv_mutex_lock(&s->lock);
    /* A worker closes after the done_cb of its last task: deliver first. */
    if (!uvs__queue_empty(&s->done)) {
      uv_mutex_unlock(&s->lock);
      return 0;
    }
    w = NULL;
    for (q = s->closing.next; q != &s->closing; q = q->next) {
      w = uvs__container_of(q, uvs_worker_t, list_node);
      if (w->npending == 0 && w->state != UVS__W_POSTED)
        break;
      w = NULL;
    }
    if (w == NULL)
      break;
    uvs__queue_remove(&w->list_node);
    if (w->state == UVS__W_READY)
      uvs__queue_remove(&w->ready_node);
    w->state = UVS__W_IDLE;
    cb = w->close_cb;
    w->close_cb = NULL;
    uv_mutex_unlock(&s->lock);

    __atomic_store_n(&w->closed, 1, __ATOMIC_SEQ_CST);
    wait_for_callers(&w->inflight);
    if (cb != NULL)
      cb(w);
  }

  if (uvs__load_relaxed(&s->state) != UVS__S_CLOSING ||
      (s->flags & UVS__S_HANDLES_CLOSING) || !uvs__queue_empty(&s->workers) ||
      !uvs__queue_empty(&s->closing) || s->drains != 0) {
    uv_mutex_unlock(&s->lock);
    return 0;
  }
  s->flags |= UVS__S_HANDLES_CLOSING;
  uv_mutex_unlock(&s->lock);

  uvs__post_free_all(s);
  uvs__timers_free(s->timers);
  s->timers = NULL;
  uv_close((uv_handle_t*) &s->async, handle_closed);
  uv_close((uv_handle_t*) &s->timer, handle_closed);
  uv_close((uv_handle_t*) &s->idle, handle_closed);
  return 1;
}


static void process(uvs_sched_t* s, int what) {
  int more;

  publish_now(s);
  uv_mutex_lock(&s->lock);
  s->flags &= ~(UVS__S_KICKED | UVS__S_ASYNC_SENT);
  if (what & FIRE_TIMERS)
    fire_timers(s);
  dispatch(s);
  uv_mutex_unlock(&s->lock);

  if (what & LOOP_TURN)
    run_loop_workers(s);
  deliver(s);
  if (finish_closes(s))
    return;

  uv_mutex_lock(&s->lock);
  dispatch(s); /* for work that done callbacks just scheduled */
  rearm_timer(s);
  more = (s->flags & UVS__S_KICKED) || !uvs__queue_empty(&s->loop_ready) ||
         !uvs__queue_empty(&s->done) ||
         (!uvs__queue_empty(&s->ready) && slot_free(s));
  uv_mutex_unlock(&s->lock);

  if (more)
    uv_idle_start(&s->idle, idle_cb);
  else
    uv_idle_stop(&s->idle);
  /* Pending work keeps the loop alive through its own handles and requests
   * (timer, idle, uv_work); the async handle only keeps it alive on request
   * or while closing. */
  if (s->keep_alive || uvs__load_relaxed(&s->state) == UVS__S_CLOSING)
    uv_ref((uv_handle_t*) &s->async);
  else
    uv_unref((uv_handle_t*) &s->async);
}


int uvs_sched_init(uv_loop_t* loop,
                   uvs_sched_t* s,
                   const uvs_sched_options_t* options) {
  int err;

  if (loop == NULL || s == NULL)
    return UV_EINVAL;

  /* Everything but the user's data field. */
  memset((char*) s + offsetof(uvs_sched_t, loop), 0,
         sizeof(*s) - offsetof(uvs_sched_t, loop));
  err = uvs__timers_init(&s->timers, uvs__now_ms());
  if (err != 0)
    return err;
  err = uv_mutex_init(&s->lock);
  if (err != 0) {
    uvs__timers_free(s->timers);
    return err;
  }
  /* The async handle is the only init that can fail; the others can't, so
   * nothing needs closing on the error path. */
  err = uv_async_init(loop, &s->async, async_cb);
  if (err != 0) {
    uv_mutex_destroy(&s->lock);
    uvs__timers_free(s->timers);
    return err;
  }
  uv_timer_init(loop, &s->timer);
  uv_idle_init(loop, &s->idle);

  s->loop = loop;
  s->thread = uv_thread_self();
  s->budget = UVS_DEFAULT_BUDGET;
  if (options != NULL) {
    if (options->budget != 0)
      s->budget = options->budget;
    s->max_concurrency = options->max_concurrency;
    s->keep_alive = options->keep_alive != 0;
    s->linger_us = options->linger_us;
  }
  uvs__queue_init(&s->workers);
  uvs__queue_init(&s->closing);
  uvs__queue_init(&s->ready);
  uvs__queue_init(&s->loop_ready);
  uvs__queue_init(&s->done);
  s->handles = 3;
  s->timer_due = UINT64_MAX;
  uvs__store(&s->state, UVS__S_OPEN);
  uvs__store(&s->now, uv_now(loop));

  /* One loop iteration is owed to the scheduler: it picks up work that
   * other threads scheduled before uv_run() started, which the async handle
   * alone (unreferenced while idle) would not keep the loop alive for. */
  if (!s->keep_alive)
    uv_unref((uv_handle_t*) &s->async);
  uv_idle_start(&s->idle, idle_cb);
  return 0;
}


int uvs_sched_close(uvs_sched_t* s,
                    uvs_close_how_t how,
                    uvs_sched_close_cb close_cb) {
  uvs__queue_t* q;
  uvs__queue_t* next;

  if (s == NULL || (how != UVS_CANCEL && how != UVS_DRAIN))
    return UV_EINVAL;
  if (uvs__load(&s->state) != UVS__S_OPEN || !uvs__on_loop_thread(s))
    return UV_EINVAL;

  uv_mutex_lock(&s->lock);
  __atomic_store_n(&s->state, UVS__S_CLOSING, __ATOMIC_SEQ_CST);
  s->close_cb = close_cb;
  for (q = s->workers.next; q != &s->workers; q = next) {
    next = q->next;
    uvs__worker_close_locked(uvs__container_of(q, uvs_worker_t, list_node),
                             how,
                             NULL);
  }
  uvs__kick(s);
  uv_mutex_unlock(&s->lock);
  uv_ref((uv_handle_t*) &s->async);
  return 0;
}


uint64_t uvs_now(const uvs_sched_t* sched) {
  uvs_sched_t* s;

  if (sched == NULL)
    return 0;
  s = (uvs_sched_t*) sched;
  if (uvs__load(&s->state) != UVS__S_CLOSED && uvs__on_loop_thread(s))
    publish_now(s);
  return uvs__load(&s->now);
}


void uvs_sched_stats(const uvs_sched_t* sched, uvs_stats_t* out) {
  uvs_sched_t* s;

  if (sched == NULL || out == NULL)
    return;
  s = (uvs_sched_t*) sched;
  /* Pinned, so that a close completing meanwhile keeps the lock alive. */
  uvs__add(&s->inflight, 1);
  if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) == UVS__S_CLOSED) {
    *out = s->stats;
  } else {
    uv_mutex_lock(&s->lock);
    *out = s->stats;
    uv_mutex_unlock(&s->lock);
  }
  uvs__sub(&s->inflight, 1);
}
