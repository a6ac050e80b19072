/* The scheduler: drains, the loop-thread side, and hand-backs.
 *
 * The hot path takes no lock per task. A producer pushes onto its worker's
 * lock-free inbox (inbox.c) and, only when that moves the worker from idle
 * to scheduled, takes the scheduler's lock to list the worker as ready. A
 * drain takes the lock once per batch of up to UVS__BATCH tasks to move them
 * from the queue into slots, then runs them without it; each slot is
 * claimed with one exchange, so a cancel can swap a waiting task for a
 * tombstone instead. Finished tasks go onto a lock-free hand-back stack that
 * the loop thread empties. The lock (sched->lock) guards the rest: ready
 * lists, the timer wheel, the FIFO and batch bookkeeping of each worker,
 * closes. Only the loop thread acts on libuv (uv_queue_work, uv_timer_*,
 * uv_idle_*, uv_ref); other threads reach it with uvs__kick().
 */

#include "internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

enum {
  UVS__S_KICKED = 1,         /* the loop thread kicked since process() began */
  UVS__S_HANDLES_CLOSING = 2 /* uv_close() called on our handles */
};

/* What a call of process() does besides the common work. */
enum { FIRE_TIMERS = 1, LOOP_TURN = 2 };

/* With the default budget a drain or loop turn yields after a time slice
 * rather than a count: a round trip through the loop to post the next drain
 * costs about as much as thousands of small tasks, and a loop turn of a few
 * dozen tasks makes a backlog of small ones wait for many loop iterations.
 * No task starts once the slice has passed, so long tasks get one per turn.
 * Batches of slots still start small and double, which bounds how many
 * tasks a drain moves out of the queue that it may have to put back. */
#define UVS__SLICE_NS 1000000
#define UVS__FIRST_BATCH 8

/* The slice is checked before every task but the first, so the check has
 * to cost less than an empty task. uv_hrtime() costs 25-50 ns on the VMs
 * measured; the CPU's tick counter costs a third of that. The counter only
 * says when to look at the real clock: the slice ends by uv_hrtime(). Its
 * rate is learnt once per process, from two readings of both clocks at
 * least UVS__CALIBRATE_NS apart; until then, and where there is no such
 * counter, every check reads uv_hrtime(). */
#define UVS__CALIBRATE_NS 20000000

static inline uint64_t ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
  uint64_t v;

  __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
  return v;
#else
  return 0;
#endif
}

static struct {
  uint64_t hr0;   /* atomic: 0 until the first reading */
  uint64_t tick0; /* atomic: stored before hr0 is published */
  uint64_t per_ms; /* atomic: ticks per ms; 0 = not known */
} calib;


/* Learns the tick rate from the first reading and one taken later. Any
 * thread; two threads racing store the same kind of value. */
static void calibrate(uint64_t now_ns) {
  uint64_t hr0;
  uint64_t t0;
  uint64_t t;
  uint64_t rate;

#if !defined(__x86_64__) && !defined(__i386__) && !defined(__aarch64__)
  (void) now_ns;
  return;
#endif
  t = ticks();
  hr0 = uvs__load(&calib.hr0);
  if (hr0 == 0) {
    uint64_t zero = 0;
    /* The first to get here takes the first reading; a thread racing it
     * may pair its own tick with the winner's time, a few us off. */
    uvs__store_relaxed(&calib.tick0, t);
    __atomic_compare_exchange_n(&calib.hr0, &zero, now_ns, 0,
                                __ATOMIC_RELEASE, __ATOMIC_RELAXED);
    return;
  }
  t0 = uvs__load_relaxed(&calib.tick0);
  if (now_ns - hr0 < UVS__CALIBRATE_NS || t <= t0)
    return;
  rate = (t - t0) / ((now_ns - hr0) / 1000000);
  /* A counter slower than 10 MHz or faster than 100 GHz is not one to
   * trust; keep reading the real clock. */
  if (rate < 10000 || rate > 100000000)
    return;
  uvs__store_relaxed(&calib.per_ms, rate);
}


typedef struct {
  uint64_t end_ns;   /* 0: no slice, the budget counts tasks */
  uint64_t end_tick; /* look at the real clock from this tick on */
  uint64_t per_ms;
} slice_t;


static void slice_start(slice_t* sl) {
  uint64_t now;

  now = uv_hrtime();
  sl->end_ns = now + UVS__SLICE_NS;
  sl->per_ms = uvs__load_relaxed(&calib.per_ms);
  if (sl->per_ms == 0) {
    calibrate(now);
    sl->end_tick = 0;
  } else {
    sl->end_tick = ticks() + sl->per_ms;
  }
}


/* Has the slice passed? */
static int slice_over(slice_t* sl) {
  uint64_t now;

  if (sl->per_ms != 0 && ticks() < sl->end_tick)
    return 0;
  now = uv_hrtime();
  if (now >= sl->end_ns)
    return 1;
  if (sl->per_ms != 0)
    sl->end_tick = ticks() + (sl->end_ns - now) * sl->per_ms / 1000000;
  return 0;
}


/* A drain's batch lives in its thread, so no worker pays for one. */
static UVS__TLS uvs_task_t* batch_slots[UVS__BATCH];

static void process(uvs_sched_t* s, int what);


int uvs__on_loop_thread(const uvs_sched_t* s) {
  return uvs__is_thread(&s->thread);
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
  if (__atomic_exchange_n(&s->async_sent, 0, __ATOMIC_ACQ_REL)) {
    uv_mutex_lock(&s->lock);
    s->stats.wakeups++;
    uv_mutex_unlock(&s->lock);
  }
  process(s, 0);
}


void uvs__kick(uvs_sched_t* s) {
  if (uvs__on_loop_thread(s)) {
    s->flags |= UVS__S_KICKED;
    uv_idle_start(&s->idle, idle_cb);
    return;
  }
  /* Whoever kicks holds something that keeps the async handle open: a pin
   * on a worker that can't finish closing, or a drain in flight. */
  if (!__atomic_exchange_n(&s->async_sent, 1, __ATOMIC_ACQ_REL))
    uv_async_send(&s->async);
}


static uvs__queue_t* ready_list(uvs_worker_t* w) {
  return w->where == UVS_POOL ? &w->sched->ready : &w->sched->loop_ready;
}


void uvs__worker_make_ready(uvs_worker_t* w) {
  w->phase = UVS__P_READY;
  uvs__queue_push(ready_list(w), &w->ready_node);
  uvs__kick(w->sched);
}


void uvs__worker_push(uvs_worker_t* w, uvs_task_t* t, int requeue) {
  unsigned idle;

  /* A delayed task that fell due was counted when it was accepted; it is
   * counted again when it leaves the inbox, and the stats count the inbox
   * meanwhile. */
  if (requeue) {
    w->nsched--;
    t->node.prev = NULL; /* see uvs__inbox_push */
  }
  uvs__inbox_push(w, t);
  /* The other half is after_drain(): it stores IDLE, then looks at the
   * inbox. Either it sees this task or this load sees IDLE. */
  if (__atomic_load_n(&w->state, __ATOMIC_SEQ_CST) != UVS__W_IDLE)
    return;
  idle = UVS__W_IDLE;
  if (!__atomic_compare_exchange_n(&w->state, &idle, UVS__W_SCHEDULED, 0,
                                   __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
    return;
  if (!requeue)
    uv_mutex_lock(&w->sched->lock);
  uvs__worker_make_ready(w);
  if (!requeue)
    uv_mutex_unlock(&w->sched->lock);
}


/* Hand-backs on their way to the stack, newest first: a drain gathers
 * those of a batch and pushes them with one CAS. */
typedef struct {
  uvs__queue_t* newest;
  uvs__queue_t* oldest;
} chain_t;


static void chain_add(chain_t* c, uvs_task_t* t) {
  t->node.next = c->newest;
  c->newest = &t->node;
  if (c->oldest == NULL)
    c->oldest = &t->node;
}


static void push_chain(uvs_sched_t* s, chain_t* c) {
  uvs__queue_t* top;

  if (c->newest == NULL)
    return;
  top = uvs__load_relaxed(&s->done_top);
  do
    c->oldest->next = top;
  while (!__atomic_compare_exchange_n(&s->done_top, &top, c->newest, 1,
                                      __ATOMIC_RELEASE, __ATOMIC_RELAXED));
  c->newest = NULL;
  c->oldest = NULL;
  /* The stack was empty: nobody asked the loop to look yet. */
  if (top == NULL)
    uvs__kick(s);
}


static void push_done(uvs_sched_t* s, uvs_task_t* t) {
  chain_t c = {NULL, NULL};

  chain_add(&c, t);
  push_chain(s, &c);
}


/* Moves a task with done_cb to HANDBACK; returns 0 if a run_cb of it still
 * executes, and then the last run to end makes the hand-back (end_run). */
static int to_handback(uvs_task_t* t, int status) {
  unsigned o;
  unsigned n;

  t->status = status;
  o = uvs__load_relaxed(&t->state);
  do {
    n = (o & ~UVS__T_MASK) | UVS__T_HANDBACK;
    if (o & UVS__T_RUNS)
      n |= UVS__T_DEFERRED;
  } while (!__atomic_compare_exchange_n(
      &t->state, &o, n, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
  return !(n & UVS__T_DEFERRED);
}


void uvs__drop(uvs_sched_t* s, uvs_task_t* t, int status) {
  uvs_worker_t* w;
  unsigned st;

  w = t->worker;
  st = uvs__load_relaxed(&t->state);
  if ((st & UVS__T_POST) || t->done_cb == NULL) {
    w->nended++;
    if (status != 0)
      w->ncancelled++;
    if (st & UVS__T_POST)
      uvs__post_release(s, t);
    else
      uvs__store(&t->state, UVS__T_FINISHED); /* released */
    return;
  }
  if (!to_handback(t, status))
    return;
  w->nended++;
  if (status != 0)
    w->ncancelled++;
  push_done(s, t);
}


/* A run_cb that scheduled its own task again has returned (no lock held).
 * If a hand-back was waiting for this run, make it. */
static void end_run(uvs_task_t* t) {
  uvs_worker_t* w;
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
  if (!take)
    return;
  /* Its worker can't finish closing while the task is pending in it, so
   * the worker and its scheduler are alive. */
  w = t->worker;
  s = w->sched;
  uv_mutex_lock(&s->lock);
  w->nended++;
  if (t->status != 0)
    w->ncancelled++;
  push_done(s, t);
  uv_mutex_unlock(&s->lock);
}


static uvs_task_t** slot_of(const uvs_task_t* t) {
  uintptr_t p;

  p = (uintptr_t) t->node.prev;
  return (p & 1) ? (uvs_task_t**) (p & ~(uintptr_t) 1) : NULL;
}


int uvs__cancel_locked(uvs_sched_t* s, uvs_task_t* t) {
  uvs_task_t** slot;
  uvs_task_t* expected;

  if ((uvs__load_relaxed(&t->state) & UVS__T_MASK) == UVS__T_DELAYED) {
    /* The timer may stay armed for it: it fires, finds nothing due and
     * re-arms, which is cheaper than re-arming on every cancel. */
    uvs__timers_remove(s->timers, t);
    uvs__queue_remove(&t->node);
    t->worker->ndelayed--;
    uvs__drop(s, t, UV_ECANCELED);
    return 0;
  }

  /* Queued: after the flush it is in the FIFO, or in a drain's batch with
   * its slot tagged in node.prev; prev is NULL while a producer that has
   * published the task is still pushing it, a few instructions away. */
  for (;;) {
    uvs__inbox_flush(t->worker);
    if (t->node.prev != NULL)
      break;
    sched_yield();
  }
  slot = slot_of(t);
  if (slot == NULL) {
    uvs__queue_remove(&t->node);
  } else {
    expected = t;
    if (!__atomic_compare_exchange_n(slot, &expected, UVS__SLOT_TOMB, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return UV_EBUSY; /* the drain took it: running */
  }
  uvs__unqueued(t->worker);
  uvs__drop(s, t, UV_ECANCELED);
  return 0;
}


/* A periodic run stands for every grid point passed by the time it starts,
 * however long it waited in the queue or the loop was blocked. */
static void coalesce(uvs_task_t* t) {
  uint64_t now;

  now = uvs__clock_ms(t->worker->sched);
  if (now >= t->due + t->period)
    t->due += (now - t->due) / t->period * t->period;
}


/* After a periodic run (lock held): back on its grid, or handed back. */
static void finish_periodic(uvs_sched_t* s, uvs_worker_t* w, uvs_task_t* t) {
  uint64_t now;
  uint64_t next;

  if ((uvs__load_relaxed(&t->state) & UVS__T_CANCELLED) ||
      (w->flags & UVS__W_CLOSING)) {
    uvs__drop(s, t, UV_ECANCELED);
    return;
  }
  /* Fixed rate: the next grid point, or, if the run overran it, the latest
   * grid point passed, which stands for all those missed meanwhile. */
  now = uvs__clock_ms(s);
  next = t->due + t->period;
  if (next <= now)
    next = t->due + (now - t->due) / t->period * t->period;
  t->due = next;
  uvs__task_update(t, UVS__T_MASK, UVS__T_DELAYED);
  uvs__timers_insert(s->timers, t);
  uvs__queue_push(&w->delayed, &t->node);
  w->ndelayed++;
  uvs__timer_needed(s, next);
}


/* Runs one task a drain took from its batch. No lock held. */
static void run_one(uvs_sched_t* s,
                    uvs_worker_t* w,
                    uvs_task_t* t,
                    uvs__queue_t* posts,
                    chain_t* done) {
  unsigned st;
  int rescheduled;

  st = uvs__load(&t->state);
  if (t->done_cb == NULL) {
    /* Custody ends as run_cb is entered: count it now and never touch the
     * task again (a post node is ours: it is recycled after the run). */
    uvs__bump(&w->nran);
    uvs__bump(&w->nended_run);
    if (!(st & UVS__T_POST))
      uvs__store(&t->state, UVS__T_FINISHED);
    uvs__tls.current = t;
    uvs__tls.rescheduled = 0;
    uvs__store_relaxed(&w->running, 1);
    t->run_cb(t);
    uvs__store_relaxed(&w->running, 0);
    uvs__tls.current = NULL;
    if (st & UVS__T_POST)
      uvs__queue_push(posts, &t->node);
    return;
  }

  if (st & UVS__T_PERIODIC)
    coalesce(t);
  uvs__tls.current = t;
  uvs__tls.rescheduled = 0;
  uvs__store_relaxed(&w->running, 1);
  t->run_cb(t);
  uvs__store_relaxed(&w->running, 0);
  rescheduled = uvs__tls.rescheduled;
  uvs__tls.current = NULL;
  uvs__bump(&w->nran);

  if (rescheduled) {
    /* The task is in a new custody already; this one ends unhanded. */
    uvs__bump(&w->nended_run);
    end_run(t);
  } else if (st & UVS__T_PERIODIC) {
    uv_mutex_lock(&s->lock);
    finish_periodic(s, w, t);
    uv_mutex_unlock(&s->lock);
  } else if (to_handback(t, 0)) {
    uvs__bump(&w->nended_run);
    chain_add(done, t);
  }
}


static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}


/* linger_us: a pool drain that found its queue empty polls the inbox's tail
 * for up to linger_us before it gives its thread back, so that a task
 * scheduled meanwhile starts without a round trip through the loop and a
 * thread wake. Lock held on entry and exit, not while polling. Returns 1 if
 * work arrived, 0 if the time ran out or the worker or its scheduler began
 * closing. Producers see the worker SCHEDULED all along and just push. */
static int linger(uvs_sched_t* s, uvs_worker_t* w) {
  uvs__queue_t* tail;
  uint64_t end;
  unsigned polls;
  int arrived;

  /* A push caught between its two steps shows as an empty batch with the
   * tail moved: it will link in a moment, no need to wait for another. */
  if (uvs__inbox_nonempty(w))
    return 1;
  tail = uvs__load_relaxed(&w->inbox_tail);
  uv_mutex_unlock(&s->lock);
  end = uv_hrtime() + (uint64_t) s->linger_us * 1000;
  arrived = 0;
  for (polls = 1;; polls++) {
    if (__atomic_load_n(&w->inbox_tail, __ATOMIC_ACQUIRE) != tail) {
      arrived = 1;
      break;
    }
    if ((uvs__load(&w->flags) & UVS__W_CLOSING) ||
        uvs__load(&s->state) != UVS__S_OPEN)
      break;
    /* The clock costs more than a poll: look at it every 64 polls, and
     * let a thread that waits for this core (the loop's, say) run. */
    if (polls % 64 == 0) {
      if (uv_hrtime() >= end)
        break;
      sched_yield();
    }
    cpu_relax();
  }
  uv_mutex_lock(&s->lock);
  return arrived;
}


/* run_one() for a worker that counts its queued tasks (bounded, or with
 * metrics): one out of the queue, room for a producer, and with metrics
 * the wait since it became ready and the run's length. */
static void run_counted(uvs_sched_t* s,
                        uvs_worker_t* w,
                        uvs_task_t* t,
                        uvs__queue_t* posts,
                        chain_t* done) {
  uint64_t start;
  uint32_t ready;

  uvs__store(&w->q_out_run, uvs__load_relaxed(&w->q_out_run) + 1);
  if (w->max_pending != 0)
    uvs__space_check(w, 0);
  if (!w->metrics) {
    run_one(s, w, t, posts, done);
    return;
  }
  start = uv_hrtime();
  ready = (uint32_t) t->status;
  uvs__hist_add(&w->hist_wait,
                (uint64_t) (uint32_t) ((uint32_t) (start / 1000) - ready) *
                    1000);
  run_one(s, w, t, posts, done);
  uvs__hist_add(&w->hist_run, uv_hrtime() - start);
}


/* A drain that stops before the end of its batch (its slice passed) puts
 * the tasks it did not start back at the head of the FIFO, in order. Lock
 * held: a cancel can't be swapping one of these slots meanwhile. */
static void put_back(uvs_worker_t* w,
                     uvs_task_t** slots,
                     unsigned from,
                     unsigned n) {
  uvs_task_t* t;

  while (n-- > from) {
    t = __atomic_exchange_n(&slots[n], UVS__SLOT_TAKEN, __ATOMIC_ACQUIRE);
    if (t != UVS__SLOT_TOMB)
      uvs__queue_unshift(&w->fifo, &t->node);
  }
}


/* Is w closing with UVS_CANCEL? A drain asks after it took a task from its
 * slot and before it runs it. The close stores the flag before it sweeps
 * the slots, and a drain that found a tombstone the sweep left has seen
 * that store, so the tasks that run are a prefix of the batch: a close
 * never leaves a hole that a later task runs behind. */
static int cancelling(uvs_worker_t* w) {
  return (uvs__load(&w->flags) & (UVS__W_CLOSING | UVS__W_DRAIN)) ==
         UVS__W_CLOSING;
}


/* Runs up to budget tasks of a worker, a batch at a time. No lock held on
 * entry or exit. */
static void drain(uvs_worker_t* w) {
  uvs_sched_t* s;
  uvs_task_t** slots;
  uvs_task_t* t;
  uvs__queue_t posts;
  uvs__queue_t* q;
  chain_t done;
  slice_t sl;
  unsigned batch_max;
  unsigned budget;
  unsigned ran;
  unsigned max;
  unsigned n;
  unsigned i;
  int started;
  int over;

  s = w->sched;
  slots = batch_slots;
  budget = s->budget;
  sl.end_ns = 0;
  sl.end_tick = 0;
  sl.per_ms = 0;
  batch_max = UVS__BATCH;
  if (budget == 0) {
    budget = UINT32_MAX;
    slice_start(&sl);
    batch_max = UVS__FIRST_BATCH;
  }
  ran = 0;
  started = 0;
  over = 0;
  uvs__tls.draining = 1;
  done.newest = NULL;
  done.oldest = NULL;
  uvs__queue_init(&posts);
  uv_mutex_lock(&s->lock);
  for (;;) {
    while ((q = uvs__queue_shift(&posts)) != NULL)
      uvs__post_release(s, uvs__container_of(q, uvs_task_t, node));
    if (ran >= budget || over)
      break;
    if ((w->flags & UVS__W_CLOSING) && !(w->flags & UVS__W_DRAIN)) {
      uvs__worker_close_sweep(w); /* late arrivals don't run */
      break;
    }

    max = budget - ran < batch_max ? budget - ran : batch_max;
    for (n = 0; n < max; n++) {
      t = uvs__inbox_take(w, n == 0);
      if (t == NULL)
        break;
      __atomic_store_n(&slots[n], t, __ATOMIC_RELAXED);
      t->node.prev = (uvs__queue_t*) ((uintptr_t) &slots[n] | 1);
    }
    if (n == 0) {
      if (s->linger_us != 0 && w->where == UVS_POOL && linger(s, w))
        continue;
      break;
    }
    w->batch = slots;
    w->batch_len = n;
    uv_mutex_unlock(&s->lock);

    for (i = 0; i < n; i++) {
      /* No task starts once the slice has passed. */
      if (started && sl.end_ns != 0 && slice_over(&sl)) {
        over = 1;
        break;
      }
      t = __atomic_exchange_n(&slots[i], UVS__SLOT_TAKEN, __ATOMIC_ACQ_REL);
      if (t == UVS__SLOT_TOMB)
        continue;
      if (cancelling(w)) {
        uv_mutex_lock(&s->lock);
        uvs__unqueued(w);
        uvs__drop(s, t, UV_ECANCELED);
        uv_mutex_unlock(&s->lock);
        continue;
      }
      if (uvs__counting(w))
        run_counted(s, w, t, &posts, &done);
      else
        run_one(s, w, t, &posts, &done);
      started = 1;
    }
    /* The batch's hand-backs in one go, in the order the tasks ran. */
    push_chain(s, &done);
    ran += i;
    /* The real clock once a batch as well: the tick counter of another
     * core may run behind this one's. */
    if (sl.end_ns != 0 && !over) {
      if (uv_hrtime() >= sl.end_ns)
        over = 1;
      else if (batch_max < UVS__BATCH)
        batch_max *= 2;
    }

    uv_mutex_lock(&s->lock);
    if (i < n)
      put_back(w, slots, i, n);
    w->batch = NULL;
    w->batch_len = 0;
  }
  uv_mutex_unlock(&s->lock);
  uvs__tls.draining = 0;
}


/* A drain or loop turn ended (loop thread, lock held): idle, or ready again
 * at the tail of its list so that ready workers take turns. */
static void after_drain(uvs_worker_t* w) {
  unsigned idle;

  if ((w->flags & UVS__W_CLOSING) && !(w->flags & UVS__W_DRAIN))
    uvs__worker_close_sweep(w);
  w->phase = UVS__P_IDLE;
  if (!uvs__inbox_nonempty(w)) {
    /* The other half of uvs__worker_push()'s hand-off. */
    __atomic_store_n(&w->state, UVS__W_IDLE, __ATOMIC_SEQ_CST);
    if (!uvs__inbox_nonempty(w))
      return;
    idle = UVS__W_IDLE;
    if (!__atomic_compare_exchange_n(&w->state, &idle, UVS__W_SCHEDULED, 0,
                                     __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return; /* a producer took it and makes it ready */
  }
  uvs__worker_make_ready(w);
}


/* A delayed task fell due: it joins the tail of its worker's queue. */
static void fire(void* ctx, uvs_task_t* t) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  uint64_t now;

  (void) ctx;
  w = t->worker;
  s = w->sched;
  uvs__queue_remove(&t->node);
  w->ndelayed--;
  if (uvs__counting(w) && uvs__admit(w, 1) != 0) {
    /* Full, and the worker rejects: a periodic task skips this grid
     * point, a one-shot is handed back. */
    if (uvs__load_relaxed(&t->state) & UVS__T_PERIODIC) {
      now = uvs__clock_ms(s);
      t->due += (now >= t->due ? (now - t->due) / t->period + 1 : 1) *
                t->period;
      uvs__timers_insert(s->timers, t);
      uvs__queue_push(&w->delayed, &t->node);
      w->ndelayed++;
    } else {
      w->ndropped++;
      uvs__drop(s, t, UV_ENOBUFS);
    }
    return;
  }
  uvs__task_update(t, UVS__T_MASK, UVS__T_QUEUED);
  uvs__mark_ready(w, t);
  uvs__worker_push(w, t, 1);
}


/* Moves due delayed tasks to their workers' queues. Lock held. */
static void fire_timers(uvs_sched_t* s) {
  /* uv_timer may fire up to a ms early, and the loop's cached time lags:
   * compare with the real clock. */
  if (!s->manual_clock)
    uvs__timers_expire(s->timers, uvs__clock_ms(s), fire, NULL);
}


void uvs__timer_needed(uvs_sched_t* s, uint64_t due) {
  if (due < s->timer_due && due < s->timer_asked) {
    s->timer_asked = due;
    uvs__kick(s);
  }
}


static void rearm_timer(uvs_sched_t* s) {
  uint64_t due;
  uint64_t loop_now;
  uint64_t timeout;

  s->timer_asked = UINT64_MAX;
  /* A manual clock moves only with uvs_clock_advance(). */
  due = s->manual_clock ? UINT64_MAX : uvs__timers_next(s->timers);
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
  if (due <= uvs__clock_ms(s))
    timeout = 0;
  else if (due > loop_now)
    timeout = due - loop_now;
  else
    timeout = 1;
  s->timer_due = due;
  uv_timer_start(&s->timer, timer_cb, timeout, 0);
}


static void drain_work(uv_work_t* req) {
  drain(uvs__container_of(req, uvs_worker_t, work));
}


static void drain_after(uv_work_t* req, int status) {
  uvs_worker_t* w;
  uvs_sched_t* s;

  (void) status; /* never cancelled with uv_cancel */
  w = uvs__container_of(req, uvs_worker_t, work);
  s = w->sched;
  uv_mutex_lock(&s->lock);
  s->drains--;
  after_drain(w);
  uv_mutex_unlock(&s->lock);
  process(s, 0);
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
    w->phase = UVS__P_POSTED;
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
    w->phase = UVS__P_POSTED;
    uv_mutex_unlock(&s->lock);
    drain(w);
    uv_mutex_lock(&s->lock);
    after_drain(w);
  }
  uv_mutex_unlock(&s->lock);
}


/* Calls done_cb for everything handed back so far, oldest first. */
static void deliver(uvs_sched_t* s) {
  uvs__queue_t* q;
  uvs__queue_t* next;
  uvs__queue_t* fifo;
  uvs_task_t* t;
  uvs_done_cb done;
  int status;

  q = __atomic_exchange_n(&s->done_top, NULL, __ATOMIC_ACQUIRE);
  for (fifo = NULL; q != NULL; q = next) {
    next = q->next;
    q->next = fifo;
    fifo = q;
  }
  for (q = fifo; q != NULL; q = next) {
    next = q->next;
    t = uvs__container_of(q, uvs_task_t, node);
    done = t->done_cb;
    status = t->status;
    /* From here the task is the user's: done_cb may free or reschedule it. */
    uvs__store(&t->state, UVS__T_FINISHED);
    done(t, status);
  }
}


static void wait_for_callers(unsigned* inflight) {
  /* A caller that pinned the object before it was marked closed is between
   * two atomics and a short critical section; let it get out. */
  while (__atomic_load_n(inflight, __ATOMIC_SEQ_CST) != 0)
    sched_yield();
}


/* Calls a worker's close callback, if any, once. Lock held on entry and
 * exit, not during the call. */
static void call_close_cb(uvs_sched_t* s, uvs_worker_t* w) {
  uvs_worker_close_cb cb;

  cb = w->close_cb;
  w->close_cb = NULL;
  __atomic_store_n(&w->flags, w->flags & ~UVS__W_CB_OWED, __ATOMIC_RELAXED);
  if (cb == NULL)
    return;
  uv_mutex_unlock(&s->lock);
  cb(w);
  uv_mutex_lock(&s->lock);
}


static void handle_closed(uv_handle_t* handle) {
  uvs_sched_t* s;
  uvs_sched_close_cb cb;
  uvs__queue_t* q;
  uvs_worker_t* w;

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
  /* The last callbacks a closed worker may be asked for: mark each FINAL,
   * then wait out a uvs_worker_close() that got in before. */
  while ((q = uvs__queue_shift(&s->closed)) != NULL) {
    w = uvs__container_of(q, uvs_worker_t, list_node);
    __atomic_store_n(&w->closed, UVS__C_FINAL, __ATOMIC_SEQ_CST);
    wait_for_callers(&w->inflight);
    uv_mutex_lock(&s->lock);
    call_close_cb(s, w);
    uv_mutex_unlock(&s->lock);
  }
  uv_mutex_destroy(&s->lock);
  if (cb != NULL)
    cb(s);
}


static int closable(uvs_worker_t* w) {
  return w->phase == UVS__P_IDLE && !uvs__inbox_nonempty(w) &&
         uvs__worker_pending(w) == 0;
}


/* Completes the closes that can complete. Returns 1 when the scheduler has
 * begun closing its handles: then the caller must not touch them. Lock not
 * held on entry or exit. */
static int finish_closes(uvs_sched_t* s) {
  uvs__queue_t* q;
  uvs_worker_t* w;

  uv_mutex_lock(&s->lock);
  for (;;) {
    /* A worker closes after the done_cb of its last task: deliver first. */
    if (uvs__load(&s->done_top) != NULL) {
      uv_mutex_unlock(&s->lock);
      return 0;
    }
    w = NULL;
    for (q = s->closing.next; q != &s->closing; q = q->next) {
      w = uvs__container_of(q, uvs_worker_t, list_node);
      if (closable(w))
        break;
      w = NULL;
    }
    if (w == NULL)
      break;

    if (!uvs__load_relaxed(&w->closed)) {
      /* Callers on other threads that got in before the close may still
       * push: shut the door, wait for them, then look again. */
      __atomic_store_n(&w->closed, UVS__C_CLOSED, __ATOMIC_SEQ_CST);
      uv_mutex_unlock(&s->lock);
      wait_for_callers(&w->inflight);
      /* And for cancels that may have read this worker from a task. */
      while (__atomic_fetch_or(&uvs__cancels, 0, __ATOMIC_SEQ_CST) != 0)
        sched_yield();
      uv_mutex_lock(&s->lock);
      if (!(w->flags & UVS__W_DRAIN))
        uvs__worker_close_sweep(w);
      continue;
    }

    uvs__queue_remove(&w->list_node);
    /* While the scheduler closes, a closed worker that has no callback may
     * still be asked for one (uvs_worker_close): keep it in reach until
     * the end. One whose callback is called is the user's from then on. */
    if (uvs__load_relaxed(&s->state) != UVS__S_OPEN && w->close_cb == NULL)
      uvs__queue_push(&s->closed, &w->list_node);
    s->stats.scheduled += w->nsched;
    s->stats.ran += uvs__load(&w->nran);
    s->stats.cancelled += w->ncancelled;
    call_close_cb(s, w);
  }
  /* Callbacks asked for after their worker closed. */
  for (q = s->closed.next; q != &s->closed; q = q->next) {
    w = uvs__container_of(q, uvs_worker_t, list_node);
    if (w->flags & UVS__W_CB_OWED) {
      uvs__queue_remove(&w->list_node);
      call_close_cb(s, w);
      q = &s->closed; /* the list may have changed meanwhile */
    }
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


/* Bounded workers that were full and fell to low_water: space_cb. */
static void call_space_cbs(uvs_sched_t* s) {
  uvs__queue_t* q;
  uvs_worker_t* w;

  if (uvs__queue_empty(&s->space))
    return; /* a loop-thread-only peek; kicks bring us back */
  uv_mutex_lock(&s->lock);
  while ((q = uvs__queue_shift(&s->space)) != NULL) {
    w = uvs__container_of(q, uvs_worker_t, space_node);
    w->space_owed = 0;
    uv_mutex_unlock(&s->lock);
    w->space_cb(w);
    uv_mutex_lock(&s->lock);
  }
  uv_mutex_unlock(&s->lock);
}


static void process(uvs_sched_t* s, int what) {
  int more;

  publish_now(s);
  s->flags &= ~UVS__S_KICKED;
  uv_mutex_lock(&s->lock);
  if (what & FIRE_TIMERS)
    fire_timers(s);
  dispatch(s);
  uv_mutex_unlock(&s->lock);

  if (what & LOOP_TURN)
    run_loop_workers(s);
  deliver(s);
  call_space_cbs(s);
  if (finish_closes(s))
    return;

  uv_mutex_lock(&s->lock);
  dispatch(s); /* for work that done callbacks just scheduled */
  rearm_timer(s);
  more = (s->flags & UVS__S_KICKED) || !uvs__queue_empty(&s->loop_ready) ||
         uvs__load(&s->done_top) != NULL ||
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
  if (options != NULL && options->manual_clock) {
    s->manual_clock = 1;
    uvs__store(&s->manual_now, uv_hrtime() / 1000000);
  }
  err = uvs__timers_init(&s->timers, uvs__clock_ms(s));
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
  if (options != NULL) {
    s->budget = options->budget; /* 0: the defaults, see drain() */
    s->max_concurrency = options->max_concurrency;
    s->keep_alive = options->keep_alive != 0;
    s->linger_us = options->linger_us;
  }
  uvs__queue_init(&s->workers);
  uvs__queue_init(&s->closing);
  uvs__queue_init(&s->closed);
  uvs__queue_init(&s->ready);
  uvs__queue_init(&s->loop_ready);
  uvs__queue_init(&s->space);
  uvs__store(&s->done_top, NULL);
  s->handles = 3;
  s->timer_due = UINT64_MAX;
  s->timer_asked = UINT64_MAX;
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
  uvs_worker_t* w;

  if (s == NULL || (how != UVS_CANCEL && how != UVS_DRAIN))
    return UV_EINVAL;
  if (uvs__load(&s->state) != UVS__S_OPEN || !uvs__on_loop_thread(s))
    return UV_EINVAL;

  uv_mutex_lock(&s->lock);
  __atomic_store_n(&s->state, UVS__S_CLOSING, __ATOMIC_SEQ_CST);
  s->close_cb = close_cb;
  for (q = s->workers.next; q != &s->workers; q = next) {
    next = q->next;
    w = uvs__container_of(q, uvs_worker_t, list_node);
    uvs__worker_close_locked(w, how, NULL);
    __atomic_store_n(&w->flags, w->flags | UVS__W_BY_SCHED, __ATOMIC_SEQ_CST);
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
  if (s->manual_clock)
    return uvs__clock_ms(s);
  if (uvs__load(&s->state) != UVS__S_CLOSED && uvs__on_loop_thread(s))
    publish_now(s);
  return uvs__load(&s->now);
}


int uvs_clock_advance(uvs_sched_t* s, uint64_t ms) {
  uint64_t target;
  uint64_t next;

  if (s == NULL || !s->manual_clock || ms > UVS__MAX_MS)
    return UV_EINVAL;
  if (uvs__load(&s->state) == UVS__S_CLOSED || !uvs__on_loop_thread(s))
    return UV_EINVAL;
  uv_mutex_lock(&s->lock);
  target = uvs__load_relaxed(&s->manual_now) + ms;
  /* Step to each time something is due (or the wheel must cascade), so
   * that tasks fire in due order and periodic ones see the clock of their
   * own grid point, as if the time had passed. */
  while ((next = uvs__timers_next(s->timers)) <= target) {
    if (next > uvs__load_relaxed(&s->manual_now))
      uvs__store(&s->manual_now, next);
    uvs__timers_expire(s->timers, uvs__load_relaxed(&s->manual_now), fire,
                       NULL);
  }
  uvs__store(&s->manual_now, target);
  uvs__kick(s);
  uv_mutex_unlock(&s->lock);
  return 0;
}


static void add_worker_stats(uvs__queue_t* list, uvs_stats_t* out) {
  uvs__queue_t* q;
  uvs_worker_t* w;
  uint64_t inbox;

  for (q = list->next; q != list; q = q->next) {
    w = uvs__container_of(q, uvs_worker_t, list_node);
    inbox = uvs__inbox_count(w);
    out->scheduled += w->nsched + inbox;
    out->ran += uvs__load(&w->nran);
    out->cancelled += w->ncancelled;
    out->pending += uvs__worker_pending(w) + inbox;
  }
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
    out->pending = 0;
    add_worker_stats(&s->workers, out);
    add_worker_stats(&s->closing, out);
    uv_mutex_unlock(&s->lock);
  }
  uvs__sub(&s->inflight, 1);
}
