/* Drains: a pool drain (one uv_queue_work item) or a loop turn runs the
 * ready tasks of one worker, or of one lane of a wide worker, a batch of
 * slots at a time, within its budget or time slice.
 *
 * A drain takes the scheduler's lock once per batch to move tasks from the
 * queue into slots of its thread, then runs them without it; each slot is
 * claimed with one exchange, so a cancel or close can swap a waiting task
 * for a tombstone instead. Hand-backs of a batch go to the hand-back stack
 * (worker.c) in one push, in run order.
 */

#include "internal.h"


/* Batches of slots start small and double, which bounds how many tasks a
 * drain moves out of the queue that it may have to put back. */
#define UVS__FIRST_BATCH 8


/* A drain's batch lives in its thread, so no worker pays for one. */
static UVS__TLS uvs_task_t* batch_slots[UVS__BATCH];


/* Where a drain counts its runs: the worker's fields for a serial worker,
 * whose drains run one at a time, or its own lane's for a wide one. Each
 * field has one writer at a time, so a store will do; readers add the
 * lanes' counts to the worker's (uvs__worker_ran). */
typedef struct {
  uint64_t* ran;
  uint64_t* ended;
} counts_t;


/* Runs one task a drain took from its batch. No lock held. Returns 1 if
 * its run_cb yielded (0.5, coop.c): then it is neither counted as run
 * nor handed back, and the caller queues it again (uvs__worker_requeue). */
static inline __attribute__((always_inline)) int run_one(uvs_sched_t* s,
                                                         uvs_worker_t* w,
                                                         counts_t c,
                                                         uvs_task_t* t,
                                                         uvs__queue_t* posts,
                                                         uvs__chain_t* done) {
  unsigned st;
  int rescheduled;

  st = uvs__load_acq(&t->state);
  uvs__tls.rescheduled = 0;
  uvs__tls.interrupted = 0;
  uvs__tls.yielded = 0;
  uvs__tls.flags = st;
  if (t->done_cb == NULL) {
    /* Custody ends as run_cb is entered: never touch the task again (a
     * post node is ours: it is recycled after the run), unless it yields,
     * which takes it back (coop.c). It is counted as ended once the run
     * is over, so that while it runs it is pending and running, as a task
     * with a done_cb is, and the worker's derived queued count
     * (uvs_worker_metrics) doesn't take it off twice. */
    uvs__bump(c.ran);
    /* Reported while the task is still the library's. */
    uvs__hook(s, w, (st & UVS__T_POST) ? NULL : t, UVS_EV_STARTED, 0);
    if (!(st & UVS__T_POST))
      uvs__store_rel(&t->state, UVS__T_FINISHED);
    uvs__tls.current = (st & UVS__T_POST) ? NULL : t;
    t->run_cb(t);
    uvs__tls.current = NULL;
    uvs__hook(s, w, NULL, UVS_EV_ENDED, 0); /* run_cb may have freed it */
    if (uvs__tls.yielded) {
      uvs__store_rlx(c.ran, uvs__load_rlx(c.ran) - 1); /* it runs on */
      return 1;
    }
    uvs__bump(c.ended);
    if (st & UVS__T_POST)
      uvs__queue_push(posts, &t->node);
    return 0;
  }

  if (st & UVS__T_PERIODIC)
    uvs__coalesce(t);
  uvs__hook(s, w, t, UVS_EV_STARTED, 0);
  uvs__tls.current = t;
  t->run_cb(t);
  rescheduled = uvs__tls.rescheduled;
  uvs__tls.current = NULL;
  /* Before the run ends (uvs__end_run): a hand-back the run defers comes
   * after this. */
  uvs__hook(s, w, t, UVS_EV_ENDED, 0);
  if (uvs__tls.yielded)
    return 1;
  uvs__bump(c.ran);

  if (rescheduled) {
    /* The task is in a new custody already; this one ends unhanded. */
    uvs__bump(c.ended);
    uvs__end_run(t);
  } else if (st & UVS__T_PERIODIC) {
    uv_mutex_lock(&s->lock);
    uvs__finish_periodic(s, w, t);
    uv_mutex_unlock(&s->lock);
  } else if (uvs__to_handback(t, 0)) {
    uvs__bump(c.ended);
    uvs__chain_add(done, t);
  }
  return 0;
}


/* linger_us: a pool drain that found its queue empty polls the inbox's tail
 * for up to linger_us before it gives its thread back, so that a task
 * scheduled meanwhile starts without a round trip through the loop and a
 * thread wake. Lock held on entry and exit, not while polling. Returns 1 if
 * work arrived, 0 if the time ran out or the worker or its scheduler began
 * closing. Producers see the worker SCHEDULED all along and just push. */
static int linger(uvs_sched_t* s, uvs_worker_t* w) {
  uvs__queue_t* tail;
  int arrived;

  /* A push caught between its two steps shows as an empty batch with the
   * tail moved: it will link in a moment, no need to wait for another. */
  if (uvs__inbox_nonempty(w))
    return 1;
  tail = uvs__load_rlx(&w->inbox_tail);
  uv_mutex_unlock(&s->lock);
  arrived = uvs__inbox_await(w, tail, s->linger_us);
  uv_mutex_lock(&s->lock);
  return arrived;
}


/* run_one() for a worker that counts its queued tasks (bounded, or with
 * metrics): one out of the queue, room for a producer, and with metrics
 * the wait since it became ready and the run's length. */
static int run_counted(uvs_sched_t* s,
                       uvs_worker_t* w,
                       counts_t c,
                       uvs_task_t* t,
                       uvs__queue_t* posts,
                       uvs__chain_t* done) {
  uint64_t start;
  int yielded;

  /* seq_cst, against a producer that marks the worker full (bound.c). */
  if (w->keys == NULL)
    __atomic_store_n(&w->q_out_run, uvs__load_rlx(&w->q_out_run) + 1,
                     __ATOMIC_SEQ_CST);
  else
    uvs__add_sc(&w->q_out_run, 1);
  if (w->max_pending != 0)
    uvs__space_check(w, 0);
  __atomic_fetch_add(&w->running, 1, __ATOMIC_RELAXED);
  if (w->hists == NULL) {
    yielded = run_one(s, w, c, t, posts, done);
  } else {
    start = uv_hrtime();
    uvs__hist_add(&w->hists->wait, (uint64_t) uvs__waited_us(t, start) * 1000);
    yielded = run_one(s, w, c, t, posts, done);
    uvs__hist_add(&w->hists->run, uv_hrtime() - start);
  }
  __atomic_fetch_sub(&w->running, 1, __ATOMIC_RELAXED);
  return yielded;
}


/* A drain that stops before the end of its batch (its slice passed) puts
 * the tasks it did not start back at the head of the queue, in order. Lock
 * held: a cancel can't be swapping one of these slots meanwhile. */
static void put_back(uvs_worker_t* w,
                     uvs_task_t** slots,
                     unsigned from,
                     unsigned n) {
  uvs_task_t* t;

  while (n-- > from) {
    t = __atomic_exchange_n(&slots[n], UVS__SLOT_TAKEN, __ATOMIC_ACQUIRE);
    if (t == UVS__SLOT_TOMB)
      continue;
    if (w->keys != NULL)
      uvs__keys_unpick(w, t);
    else
      uvs__queue_unshift(&w->fifo, &t->node);
  }
}


/* Puts t in slot i of a batch, its link tagged with the slot (lock
 * held): a cancel can then swap it for a tombstone. */
static inline void put_slot(uvs_task_t** slots, unsigned i, uvs_task_t* t) {
  __atomic_store_n(&slots[i], t, __ATOMIC_RELAXED);
  uvs__task_set_slot(t, &slots[i]);
}


/* Fills a batch of slots (lock held): from the queue of a serial worker,
 * or, for a lane of a wide one, one task its keys let start and, behind a
 * keyed one, the next tasks of its key. */
static unsigned fill(uvs_worker_t* w,
                     uvs__lane_t* lane,
                     uvs_task_t** slots,
                     unsigned max) {
  uvs_task_t* t;
  unsigned n;

  if (w->evict_owed != 0)
    uvs__evict_owed(w); /* before any of them starts */
  /* A lane takes one startable task at a time: tasks start in FIFO order
   * across lanes, and none waits in one lane's batch that another lane
   * could start (guarantee 12). Behind a keyed task it takes that key's
   * next tasks, which no other lane could start, so that a busy key costs
   * one lock round per batch. With per-key bounds the picked task counts
   * out of its key's bound now, the rest of the run as each starts
   * (run_batch), so that what waits in the batch still counts. */
  if (lane != NULL) {
    if (lane->seeking) {
      lane->seeking = 0;
      uvs__keys_seeking(w, -1);
    }
    uvs__worker_intake(w);
    t = uvs__keys_pick(w, lane);
    if (t == NULL)
      return 0;
    put_slot(slots, 0, t);
    n = 1;
    if (w->key_max != 0)
      uvs__keys_space_check(w); /* its key has one task fewer queued */
    if (lane->kent != NULL)
      for (; n < max && (t = uvs__keys_next_of(lane->kent)) != NULL; n++)
        put_slot(slots, n, t);
    return n;
  }
  for (n = 0; n < max; n++) {
    t = uvs__inbox_take(w, n == 0);
    if (t == NULL)
      break;
    put_slot(slots, n, t);
  }
  return n;
}


/* What a turn carries from one batch to the next. */
typedef struct {
  uvs_sched_t* s;
  uvs_worker_t* w;
  uvs__lane_t* lane;   /* NULL for a serial worker */
  uvs_task_t*** batch; /* where the running batch is published, for a */
  unsigned* batch_len; /* cancel or close that tombstones its slots */
  counts_t c;
  uvs__slice_t* sl; /* a runner's, shared by the workers it serves, or own */
  uvs__slice_t own;
  uvs__queue_t posts; /* post nodes that ran, recycled under the lock */
  uvs__chain_t done;  /* the batch's hand-backs, in run order */
  unsigned budget;
  unsigned batch_max;
  unsigned ran;
  uint64_t ran0;       /* runs counted before the batch (a pool worker's) */
  uint64_t ns;         /* the batch's length (a pool worker's) */
  int check;           /* a task ran: the slice is looked at from now on */
  int over;            /* the slice has passed */
  int lazy;            /* its own slice starts with its first batch */
  uint64_t now;        /* the clock as its last batch ended, or 0 */
  uvs_task_t* yielded; /* 0.5: a task whose run yielded, to queue again */
} turn_t;


static void turn_init(turn_t* tn,
                      uvs_worker_t* w,
                      uvs__lane_t* lane,
                      uvs__slice_t* rs,
                      unsigned budget) {
  tn->s = w->sched;
  tn->w = w;
  tn->lane = lane;
  tn->batch = lane != NULL ? &lane->batch : &w->batch;
  tn->batch_len = lane != NULL ? &lane->batch_len : &w->batch_len;
  tn->c.ran = lane != NULL ? &lane->nran : &w->nran;
  tn->c.ended = lane != NULL ? &lane->nended_run : &w->nended_run;
  tn->own.end_ns = 0;
  tn->sl = &tn->own;
  tn->budget = budget;
  tn->batch_max = UVS__BATCH;
  tn->lazy = 0;
  tn->now = 0;
  if (budget == 0) {
    tn->budget = UINT32_MAX;
    /* A pool worker's turn reads the clock as its first batch starts
     * (timed_batch): its slice starts then, without a read of its own. */
    if (rs != NULL)
      tn->sl = rs;
    else if (w->where == UVS_POOL)
      tn->lazy = 1;
    else
      uvs__slice_start(&tn->own);
    /* A lane's batch is one key's run, which no other lane could start:
     * putting some back costs it nothing, so it takes the run whole. */
    tn->batch_max = lane != NULL ? UVS__BATCH : UVS__FIRST_BATCH;
  }
  tn->ran = 0;
  tn->check = 0;
  tn->over = 0;
  tn->yielded = NULL;
  tn->done.newest = NULL;
  tn->done.oldest = NULL;
  uvs__queue_init(&tn->posts);
}


/* Runs, sheds or hands back the tasks of a filled batch, without the
 * lock, until the slice passes. Returns how many slots it took: the rest
 * go back to the queue. */
static unsigned run_batch(turn_t* tn, uvs_task_t** slots, unsigned n) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  uvs_task_t* t;
  unsigned i;
  int cancel;

  w = tn->w;
  s = tn->s;
  uvs__tls.end_ns = tn->sl->end_ns; /* what uvs_task_check() asks (coop.c) */
  for (i = 0; i < n; i++) {
    /* No task starts once the slice has passed (a lane looked before it
     * picked its first). */
    if ((tn->lane == NULL || i > 0) && tn->check && uvs__slice_over(tn->sl)) {
      tn->over = 1;
      break;
    }
    /* A suspension starts no further task (the first was taken under the
     * lock, after turn() looked). */
    if (i > 0 && uvs__suspended(w)) {
      tn->over = 1;
      break;
    }
    t = __atomic_exchange_n(&slots[i], UVS__SLOT_TAKEN, __ATOMIC_ACQ_REL);
    if (t == UVS__SLOT_TOMB)
      continue; /* a lane still releases its key at the batch's end */
    /* A task of the key's run: out of its key's count as it starts. */
    if (i > 0 && tn->lane != NULL && w->key_max != 0 &&
        uvs__keys_started(w, tn->lane->kent)) {
      uv_mutex_lock(&s->lock);
      uvs__keys_counted_out(w, tn->lane->kent);
      uvs__keys_space_check(w);
      uv_mutex_unlock(&s->lock);
    }
    cancel = uvs__cancelling(w);
    if (cancel || uvs__stale(w, t, tn->sl->end_ns)) {
      uv_mutex_lock(&s->lock);
      if (w->counting)
        uvs__unqueued(w);
      if (cancel)
        uvs__drop(s, t, UV_ECANCELED);
      else
        uvs__shed(s, w, t, &tn->done);
      uv_mutex_unlock(&s->lock);
      continue;
    }
    if (tn->sl->end_ns == 0) /* with a budget: the turn's last task? */
      uvs__tls.spent = tn->ran + i + 1 >= tn->budget;
    if (w->counting ? run_counted(s, w, tn->c, t, &tn->posts, &tn->done)
                    : run_one(s, w, tn->c, t, &tn->posts, &tn->done)) {
      /* It keeps its place, and the turn ends there (0.5). */
      tn->yielded = t;
      tn->over = 1;
      i++;
      break;
    }
    tn->check = tn->sl->end_ns != 0;
  }
  /* The batch's hand-backs in one go, in the order the tasks ran, before
   * the keys let the next task of each start. */
  uvs__chain_push(s, &tn->done);
  tn->ran += i;
  return i;
}


/* After a batch, now being the clock as it ended: a slice that passed
 * during the batch's last task ends the turn before another batch is
 * moved out, and one that did not lets batches grow. */
static void batch_ended(turn_t* tn, uint64_t now) {
  if (now >= tn->sl->end_ns)
    tn->over = 1;
  else if (tn->batch_max < UVS__BATCH)
    tn->batch_max *= 2;
}


/* run_batch(), and for a pool worker what its group counts (0.4): a
 * drain running a batch counts as one run_cb running, and the batch's
 * length as its run_cb time. No lock held. */
static unsigned timed_batch(turn_t* tn, uvs_task_t** slots, unsigned n) {
  uvs__group_t* g;
  unsigned i;
  uint64_t t0;

  if (tn->w->where != UVS_POOL) {
    i = run_batch(tn, slots, n);
    if (tn->sl->end_ns != 0 && !tn->over)
      batch_ended(tn, uv_hrtime());
    return i;
  }
  g = uvs__group_of(tn->w);
  tn->ran0 = uvs__load_rlx(tn->c.ran);
  __atomic_fetch_add(&g->running, 1, __ATOMIC_RELAXED);
  /* One clock read before the batch and one after serve the group's
   * account, the turn's slice (which starts with its first batch), the
   * check after the batch, and the drain's hold (uvs__run_ready). */
  t0 = uv_hrtime();
  if (tn->lazy) {
    tn->lazy = 0;
    tn->own.end_ns = t0 + UVS__SLICE_NS;
  }
  i = run_batch(tn, slots, n);
  tn->now = uv_hrtime();
  tn->ns = tn->now - t0;
  __atomic_fetch_sub(&g->running, 1, __ATOMIC_RELAXED);
  if (tn->sl->end_ns != 0 && !tn->over)
    batch_ended(tn, tn->now);
  return i;
}


/* Runs one turn of a worker: up to budget tasks, a batch at a time, or,
 * with budget 0, until the time slice passes (rs: a runner's slice, shared
 * by the workers it serves; NULL: a slice of its own). lane is NULL for a
 * serial worker. Returns the tasks it took. The scheduler's lock is held
 * on entry and exit if held is set (a runner, which goes on to its next
 * worker under the same hold), and on neither otherwise. */
static unsigned turn(uvs_worker_t* w,
                     uvs__lane_t* lane,
                     uvs__slice_t* rs,
                     unsigned budget,
                     int held,
                     uint64_t* now) {
  uvs_task_t** slots;
  uvs_sched_t* s;
  turn_t tn;
  unsigned max;
  unsigned n;
  unsigned i;

  turn_init(&tn, w, lane, rs, budget);
  s = tn.s;
  slots = batch_slots;
  uvs__tls.draining = 1;
  uvs__tls.worker = w;
  if (!held)
    uv_mutex_lock(&s->lock);
  for (;;) {
    if (!uvs__queue_empty(&tn.posts))
      uvs__post_release_all(s, &tn.posts); /* the nodes of posts that ran */
    if (tn.ran >= tn.budget || tn.over)
      break;
    if ((w->flags & UVS__WF_CLOSING) && !(w->flags & UVS__WF_DRAIN))
      break; /* late arrivals don't run: the loop sweeps them (close.c) */
    if (uvs__suspended(w))
      break; /* turn_ended parks it */
    max = tn.budget - tn.ran < tn.batch_max ? tn.budget - tn.ran : tn.batch_max;
    n = fill(w, lane, slots, max);
    if (n == 0) {
      /* A runner with other workers waiting doesn't linger on this one. */
      if (lane == NULL && s->linger_us != 0 && w->where == UVS_POOL &&
          !uvs__pool_waiting(s) && linger(s, w))
        continue;
      break;
    }
    *tn.batch = slots;
    *tn.batch_len = n;
    uv_mutex_unlock(&s->lock);
    i = timed_batch(&tn, slots, n);
    uv_mutex_lock(&s->lock);
    if (w->where == UVS_POOL)
      uvs__group_ran(w, (unsigned) (uvs__load_rlx(tn.c.ran) - tn.ran0), tn.ns);
    if (i < n)
      put_back(w, slots, i, n);
    if (tn.yielded != NULL)
      uvs__worker_requeue(w, tn.yielded);
    /* The key's next task joins the tail of kready, unless the batch's
     * head went back unstarted. */
    if (lane != NULL && i > 0 && uvs__keys_batch_done(w, lane) &&
        uvs__worker_nonempty(w))
      uvs__worker_ready(w, 1); /* a barrier lifted: lanes for what follows */
    *tn.batch = NULL;
    *tn.batch_len = 0;
    if (lane != NULL)
      break; /* a key's turn is one batch: its key's run, or what the
              * slice let start of it */
  }
  uvs__tls.draining = 0;
  if (!held)
    uv_mutex_unlock(&s->lock);
  if (now != NULL)
    *now = tn.now != 0 ? tn.now : uv_hrtime();
  return tn.ran;
}


void uvs__lane_turn(uvs__lane_t* lane) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  uint64_t end;
  uint64_t now;

  /* Key after key on the same thread, each one batch (its key's turn),
   * until nothing may start or the hold is spent: a lane looks at its hold
   * before it picks, not after, since a picked task has left its key's
   * count (keys.c), and one put back would count in again after a
   * producer may have filled the room it seemed to make. */
  w = lane->w;
  s = w->sched;
  end = uv_hrtime() + s->hold_ns; /* the hold (SPEC 0.5) */
  uv_mutex_lock(&s->lock);
  while (turn(w, lane, NULL, s->budget, 1, &now) != 0 && now < end)
    ;
  uv_mutex_unlock(&s->lock);
}


void uvs__run_ready(uvs_sched_t* s, uvs_worker_t* w, unsigned* group) {
  uint64_t end;
  uint64_t now;

  /* When a worker's turn ends (budget tasks, or its ~1 ms slice) with work
   * left, it rejoins the tail of its group's ready list, and this drain
   * takes the next ready worker itself, on the same thread: another
   * worker's turn, or the same worker's next when none other is ready. It
   * gives its thread back to libuv when nothing is ready for it, or at the
   * end of the first turn that ends once it has held the thread for
   * hold_us, so that the pool's other users get it (SPEC 0.5, guarantee
   * 7). The loop posts a drain for every ready worker the cap leaves room
   * for (loop.c, dispatch), so one this drain takes had none coming. The
   * lock stays held from the end of one turn to the first batch of the
   * next: one acquisition per turn, not three. */
  end = uv_hrtime() + s->hold_ns; /* the hold (SPEC 0.5) */
  uv_mutex_lock(&s->lock);
  for (;;) {
    turn(w, NULL, NULL, s->budget, 1, &now);
    uvs__turn_ended(w, 0); /* no ring: this drain looks at once */
    if (now >= end)
      break;
    w = uvs__ready_take(s, 1, group);
    if (w == NULL)
      break;
    uvs__ready_chain(s);
  }
  uv_mutex_unlock(&s->lock);
}


int uvs__loop_turn(uvs_sched_t* s) {
  uvs__queue_t turns;
  uvs__queue_t* q;
  uvs_worker_t* w;
  uvs__slice_t sl;

  /* Each loop worker ready now gets one turn: of at most budget tasks,
   * or with the default budget a share of one slice for the whole loop
   * turn, so that the loop polls for I/O a slice after it began however
   * many loop workers are ready. Workers the slice leaves out go first
   * next time; work that arrives meanwhile waits for the next iteration. */
  uvs__queue_init(&turns);
  uv_mutex_lock(&s->lock);
  if (uvs__queue_empty(&s->loop_ready)) {
    uv_mutex_unlock(&s->lock);
    return 0; /* most calls from the async callback: only pool work */
  }
  sl.end_ns = 0;
  if (s->budget == 0)
    uvs__slice_start(&sl);
  uvs__queue_move(&s->loop_ready, &turns);
  while ((q = uvs__queue_shift(&turns)) != NULL) {
    w = uvs__container_of(q, uvs_worker_t, ready_node);
    w->phase = UVS__P_POSTED;
    turn(w, NULL, s->budget == 0 ? &sl : NULL, s->budget, 1, NULL);
    uvs__turn_ended(w, 1);
    if (s->budget == 0 && uvs__slice_over(&sl)) {
      /* The ones left out, ahead of any that became ready since. */
      uvs__queue_move(&s->loop_ready, &turns);
      uvs__queue_move(&turns, &s->loop_ready);
      uvs__ring(s, UVS__BELL_TURN);
      break;
    }
  }
  uv_mutex_unlock(&s->lock);
  return 1;
}
