/* A worker's queue and its custody of tasks: the queue (a lock-free inbox
 * in front of an unlinkable FIFO, a wide worker's intake, filing under a
 * key, and its exits: the one way a queued task is taken out other than
 * by a drain, and the oldest-first take); the idle/busy hand-off that
 * makes a worker ready once, however many producers push; and the
 * hand-back that ends custody. (The ready lists the hand-off fills are
 * ready.c's; the pin that keeps a worker from completing its close under
 * a caller is hazard.c's.)
 *
 * The queue: the inbox is Vyukov's intrusive MPSC queue: a producer swaps
 * itself in as the tail (one atomic exchange) and then links its
 * predecessor to itself. Its consumer is whoever holds the scheduler's
 * lock: a drain taking a batch, a cancel, or a close. A cancel can't take
 * a task out of the middle of a singly-linked inbox, so it first flushes
 * the inbox into the FIFO, a doubly-linked list; each task is flushed at
 * most once, so that costs O(1) per task over its life. Nobody waits under
 * the lock for a producer between its two steps: a flush stops there, and
 * the caller looks again later (a cancel after letting the lock go, a
 * close at its next sweep).
 *
 * The hand-back: tasks with a done_cb go onto a lock-free stack that the
 * loop thread empties (uvs__deliver), calling done_cb oldest first; the
 * rest are released where they end.
 */

#include "internal.h"

#include <sched.h>


/* ---- the idle-to-busy hand-off ----------------------------------------- */
/* worker->state is IDLE or SCHEDULED. Whoever moves it from IDLE to
 * SCHEDULED makes the worker ready, once, however many producers push:
 * uvs__worker_ready() below is the one place that does, for a producer's
 * push, a task filed under its key, a turn that ended as work arrived, a
 * wide worker wanting lanes (loop.c) and a barrier lifted (keys.c). The
 * end of a turn (uvs__turn_ended(), or dispatch serving a wide worker in
 * loop.c) moves it back: it stores IDLE, then looks at the queue once
 * more. Each side writes, then reads what the other writes, with seq_cst
 * operations (the producer's exchange on the inbox's tail, then its load
 * and CAS of the state; the store of IDLE, then the load of the tail), so
 * at least one of them sees the other: no task is left in an idle worker,
 * and no worker is listed twice. */


int uvs__worker_ready(uvs_worker_t* w, int locked) {
  unsigned idle;

  /* A wide worker whose lanes all run wants none more: the other half is
   * lane_ended() in loop.c, which frees a lane, then looks at the queue.
   * Either it sees this task or this load sees the lane free. */
  if (w->keys != NULL &&
      __atomic_load_n(&w->lanes_active, __ATOMIC_SEQ_CST) >= w->width)
    return 0;
  if (__atomic_load_n(&w->state, __ATOMIC_SEQ_CST) != UVS__WS_IDLE)
    return 0;
  idle = UVS__WS_IDLE;
  if (!__atomic_compare_exchange_n(&w->state, &idle, UVS__WS_SCHEDULED, 0,
                                   __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
    return 0; /* another producer won, and makes it ready */
  if (!locked)
    uv_mutex_lock(&w->sched->lock);
  uvs__ready_list(w, 1);
  if (!locked)
    uv_mutex_unlock(&w->sched->lock);
  return 1;
}


int uvs__worker_push(uvs_worker_t* w, uvs_task_t* t, int requeue) {
  /* A delayed task that fell due was counted when it was accepted; it is
   * counted again when it leaves the inbox, and the stats count the inbox
   * meanwhile. */
  if (requeue) {
    w->nsched--;
    uvs__task_set_unlinked(t); /* see uvs__inbox_push */
  }
  uvs__inbox_push(w, t);
  return uvs__worker_ready(w, requeue);
}


void uvs__worker_file(uvs_worker_t* w, uvs_task_t* t) {
  uvs__keys_file(w, t);
  uvs__worker_ready(w, 1);
}


void uvs__turn_ended(uvs_worker_t* w, int ring) {
  if (w->flags & UVS__WF_CLOSING)
    uvs__ring(w->sched, UVS__BELL_CLOSE); /* the loop sweeps and completes
                                           * closes (close.c) */
  w->phase = UVS__P_IDLE;
  if (uvs__worker_nonempty(w)) {
    uvs__ready_list(w, ring); /* still SCHEDULED: at the tail of its list */
    return;
  }
  /* The other half of uvs__worker_ready(). */
  __atomic_store_n(&w->state, UVS__WS_IDLE, __ATOMIC_SEQ_CST);
  if (uvs__worker_nonempty(w))
    uvs__worker_ready(w, 1);
}


void uvs__unpark(uvs_worker_t* w) {
  if (w->phase != UVS__P_PARKED)
    return;
  /* Listed (and rung for) before it stops holding uv_run: a loop that
   * sees the count fall sees the ring with it (settle, loop.c). */
  uvs__turn_ended(w, 1); /* listed again, or idle */
  uvs__store_rel(&w->sched->parked, w->sched->parked - 1);
  uvs__ring(w->sched, UVS__BELL_PARKED);
}


/* ---- the queue -------------------------------------------------------- */


void uvs__inbox_init(uvs_worker_t* w) {
  w->inbox_stub.next = NULL;
  w->inbox_head = &w->inbox_stub;
  uvs__store_rel(&w->inbox_tail, &w->inbox_stub);
  uvs__queue_init(&w->fifo);
}


static void push_node(uvs_worker_t* w, uvs__queue_t* n) {
  uvs__queue_t* prev;

  uvs__store_rlx(&n->next, NULL);
  /* seq_cst: this exchange and the producer's load of worker->state, and
   * the loop's store of the state and its load of the tail, are the two
   * halves of the hand-off that decides who makes the worker ready. */
  prev = __atomic_exchange_n(&w->inbox_tail, n, __ATOMIC_SEQ_CST);
  uvs__store_rel(&prev->next, n);
}


void uvs__inbox_push(uvs_worker_t* w, uvs_task_t* t) {
  push_node(w, &t->node);
}


int uvs__inbox_nonempty(uvs_worker_t* w) {
  if (!uvs__queue_empty(&w->fifo) || w->inbox_head != &w->inbox_stub)
    return 1;
  return __atomic_load_n(&w->inbox_tail, __ATOMIC_SEQ_CST) != &w->inbox_stub;
}


/* Pops the oldest inbox node. Returns NULL when empty, and also, for a
 * moment, when a producer has swapped the tail but not linked yet; then
 * *busy is set. */
static uvs__queue_t* pop(uvs_worker_t* w, int* busy, int last) {
  uvs__queue_t* head;
  uvs__queue_t* next;

  *busy = 0;
  head = w->inbox_head;
  next = uvs__load_acq(&head->next);
  if (head == &w->inbox_stub) {
    if (next == NULL) {
      *busy = uvs__load_acq(&w->inbox_tail) != head;
      return NULL;
    }
    w->inbox_head = next;
    head = next;
    next = uvs__load_acq(&next->next);
  }
  if (next != NULL) {
    w->inbox_head = next;
    return head;
  }
  if (!last)
    return NULL;
  if (uvs__load_acq(&w->inbox_tail) != head) {
    *busy = 1;
    return NULL;
  }
  /* head is the last node: put the stub behind it so that it can go. */
  push_node(w, &w->inbox_stub);
  next = uvs__load_acq(&head->next);
  if (next != NULL) {
    w->inbox_head = next;
    return head;
  }
  *busy = 1;
  return NULL;
}


void uvs__inbox_flush(uvs_worker_t* w) {
  uvs__queue_t* n;
  int busy;

  while ((n = pop(w, &busy, 1)) != NULL) {
    w->nsched++;
    uvs__queue_push(&w->fifo, n);
  }
}


uvs_task_t* uvs__inbox_take(uvs_worker_t* w, int last) {
  uvs__queue_t* n;
  int busy;

  n = uvs__queue_shift(&w->fifo);
  if (n == NULL) {
    n = pop(w, &busy, last); /* a push in progress is picked up next time */
    if (n == NULL)
      return NULL;
    w->nsched++;
  }
  return uvs__container_of(n, uvs_task_t, node);
}


uvs_task_t* uvs__inbox_oldest(uvs_worker_t* w) {
  if (uvs__queue_empty(&w->fifo))
    return NULL;
  return uvs__container_of(w->fifo.next, uvs_task_t, node);
}


uint64_t uvs__inbox_count(uvs_worker_t* w) {
  uvs__queue_t* n;
  uint64_t count;

  /* As the consumer would see them, stopping at a link in progress. */
  count = 0;
  for (n = w->inbox_head; n != NULL; n = uvs__load_acq(&n->next))
    if (n != &w->inbox_stub)
      count++;
  return count;
}


static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}


int uvs__inbox_await(uvs_worker_t* w, uvs__queue_t* tail, unsigned us) {
  uint64_t end;
  unsigned polls;

  end = uv_hrtime() + (uint64_t) us * 1000;
  for (polls = 1;; polls++) {
    if (__atomic_load_n(&w->inbox_tail, __ATOMIC_ACQUIRE) != tail)
      return 1;
    if (uvs__shut(w->sched, w))
      return 0;
    /* The clock costs more than a poll: look at it every 64 polls, and
     * let a thread that waits for this core (the loop's, say) run. */
    if (polls % 64 == 0) {
      if (uv_hrtime() >= end)
        return 0;
      sched_yield();
    }
    cpu_relax();
  }
}


/* ---- the queue's exits ------------------------------------------------- */


int uvs__worker_nonempty(uvs_worker_t* w) {
  return uvs__inbox_nonempty(w) ||
         (w->keys != NULL && !uvs__queue_empty(&w->kready));
}


int uvs__take_out(uvs_worker_t* w, uvs_task_t* t) {
  uvs_task_t** slot;
  uvs_task_t* expected;

  slot = uvs__task_slot(t);
  if (slot == NULL) {
    uvs__queue_remove(&t->node); /* the FIFO, kready or its key's queue */
  } else {
    expected = t;
    if (!__atomic_compare_exchange_n(slot, &expected, UVS__SLOT_TOMB, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return UV_EBUSY; /* its drain took it: running */
  }
  if (w->keys != NULL) {
    /* A barrier taken out lets what waited behind it go on. */
    if (uvs__keys_unlinked(w, t, slot != NULL) && uvs__worker_nonempty(w))
      uvs__worker_ready(w, 1);
    if (w->key_max != 0)
      uvs__keys_space_check(w);
  }
  if (w->counting)
    uvs__unqueued(w);
  /* A suspended worker left with nothing queued holds uv_run no more. */
  if (w->phase == UVS__P_PARKED && !uvs__worker_nonempty(w))
    uvs__unpark(w);
  return 0;
}


uvs_task_t* uvs__take_oldest(uvs_worker_t* w) {
  uvs_task_t* t;
  unsigned i;

  uvs__inbox_flush(w);
  if (w->keys != NULL) {
    /* What lanes took in is older than the inbox. No intake: it may need
     * memory, and without it the eviction would find nothing. */
    t = uvs__keys_oldest(w);
    if (t != NULL && uvs__take_out(w, t) == 0)
      return t;
  } else {
    for (i = 0; i < w->batch_len; i++) {
      t = uvs__slot_task(&w->batch[i]);
      if (t != NULL && uvs__take_out(w, t) == 0)
        return t;
    }
  }
  t = uvs__inbox_oldest(w);
  if (t != NULL && uvs__take_out(w, t) == 0)
    return t;
  return NULL;
}


int uvs__worker_intake(uvs_worker_t* w) {
  uvs_task_t* t;
  int more;

  /* Only as far as lanes need to start tasks (uvs__keys_want): the inbox
   * keeps the rest, whose keys then get no entry yet. */
  more = uvs__keys_want(w);
  while (more > 0) {
    t = uvs__inbox_take(w, 1);
    if (t == NULL)
      return uvs__inbox_nonempty(w) ? UV_EAGAIN : 0;
    more = uvs__keys_take_in(w, t);
    if (more == UV_ENOMEM) {
      /* Out of memory: back to the head of the FIFO, for a later try. */
      uvs__queue_unshift(&w->fifo, &t->node);
      return UV_ENOMEM;
    }
  }
  return 0;
}


void uvs__worker_requeue(uvs_worker_t* w, uvs_task_t* t) {
  if ((uvs__load_rlx(&t->state) & UVS__T_INTERRUPTED) || uvs__cancelling(w)) {
    uvs__drop(w->sched, t, UV_ECANCELED);
    return;
  }
  uvs__task_update(t, 0, UVS__T_YIELDED);
  if (w->counting)
    uvs__add_sc(&w->q_in, 1);
  uvs__mark_ready(w, t);
  if (w->keys == NULL)
    uvs__queue_unshift(&w->fifo, &t->node);
  else
    uvs__keys_requeue(w, t);
}


/* ---- the hand-back ---------------------------------------------------- */


void uvs__chain_add(uvs__chain_t* c, uvs_task_t* t) {
  t->node.next = c->newest;
  c->newest = &t->node;
  if (c->oldest == NULL)
    c->oldest = &t->node;
}


void uvs__chain_push(uvs_sched_t* s, uvs__chain_t* c) {
  uvs__queue_t* top;

  if (c->newest == NULL)
    return;
  top = uvs__load_rlx(&s->done_top);
  do c->oldest->next = top;
  while (!__atomic_compare_exchange_n(&s->done_top, &top, c->newest, 1,
                                      __ATOMIC_RELEASE, __ATOMIC_RELAXED));
  c->newest = NULL;
  c->oldest = NULL;
  /* The stack was empty: nobody asked the loop to look yet. */
  if (top == NULL)
    uvs__ring(s, UVS__BELL_DELIVER);
}


static void push_done(uvs_sched_t* s, uvs_task_t* t) {
  uvs__chain_t c = {NULL, NULL};

  uvs__chain_add(&c, t);
  uvs__chain_push(s, &c);
}


/* Moves a task with done_cb to HANDBACK; returns 0 if a run_cb of it still
 * executes, and then the last run to end makes the hand-back (uvs__end_run). */
int uvs__to_handback(uvs_task_t* t, int status) {
  unsigned o;
  unsigned n;

  uvs__task_set_result(t, status);
  o = uvs__load_rlx(&t->state);
  do {
    n = (o & ~UVS__T_MASK) | UVS__T_HANDBACK;
    if (o & UVS__T_RUNS)
      n |= UVS__T_DEFERRED;
  } while (!__atomic_compare_exchange_n(&t->state, &o, n, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED));
  return !(n & UVS__T_DEFERRED);
}


/* The end of a task's custody, counted (lock held): a drain counts the
 * tasks it ran in nended_run instead, without the lock. */
static void ended(uvs_worker_t* w, int status) {
  w->nended++;
  if (status != 0)
    w->ncancelled++;
}


void uvs__drop_to(uvs_sched_t* s,
                  uvs_task_t* t,
                  int status,
                  uvs__chain_t* chain) {
  uvs_worker_t* w;
  unsigned st;

  w = t->worker;
  st = uvs__load_rlx(&t->state);
  if (((st & UVS__T_POST) || t->done_cb == NULL) && s->hook == NULL) {
    ended(w, status);
    if (st & UVS__T_POST)
      uvs__post_release(s, t);
    else
      uvs__store_rel(&t->state, UVS__T_FINISHED); /* released */
    return;
  }
  /* With a hook, a post or done-less task dropped unrun comes back too,
   * for its HANDED_BACK, and is released then (uvs__deliver). */
  if (!uvs__to_handback(t, status))
    return;
  ended(w, status);
  if (chain != NULL)
    uvs__chain_add(chain, t);
  else
    push_done(s, t);
}


void uvs__drop(uvs_sched_t* s, uvs_task_t* t, int status) {
  uvs__drop_to(s, t, status, NULL);
}


/* A run_cb that scheduled its own task again has returned (no lock held).
 * If a hand-back was waiting for this run, make it. */
void uvs__end_run(uvs_task_t* t) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  unsigned o;
  unsigned n;
  int take;

  o = uvs__load_rlx(&t->state);
  do {
    n = o - UVS__T_RUN_ONE;
    take = (n & UVS__T_DEFERRED) && !(n & UVS__T_RUNS);
    if (take)
      n &= ~UVS__T_DEFERRED;
  } while (!__atomic_compare_exchange_n(&t->state, &o, n, 1, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED));
  if (!take)
    return;
  /* Its worker can't finish closing while the task is pending in it, so
   * the worker and its scheduler are alive. */
  w = t->worker;
  s = w->sched;
  uv_mutex_lock(&s->lock);
  ended(w, uvs__task_result(t));
  push_done(s, t);
  uv_mutex_unlock(&s->lock);
}


/* With a hook: reports a task's hand-back, and releases it if it has no
 * done_cb (a post or a done-less task dropped unrun, which comes back
 * only for this report: uvs__drop_to). Returns 1 if it was released. */
static int hand_back_hooked(uvs_sched_t* s, uvs_task_t* t, int status) {
  int post;

  post = (uvs__load_rlx(&t->state) & UVS__T_POST) != 0;
  uvs__hook(s, t->worker, post ? NULL : t, UVS_EV_HANDED_BACK, status);
  if (post) {
    uv_mutex_lock(&s->lock);
    uvs__post_release(s, t);
    uv_mutex_unlock(&s->lock);
    return 1;
  }
  if (t->done_cb != NULL)
    return 0;
  uvs__store_rel(&t->state, UVS__T_FINISHED); /* the user's again */
  return 1;
}


/* Calls done_cb for everything handed back so far, oldest first. */
void uvs__deliver(uvs_sched_t* s) {
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
    status = uvs__task_result(t);
    if (s->hook != NULL && hand_back_hooked(s, t, status))
      continue; /* released: it had no done_cb */
    /* From here the task is the user's: done_cb may free or reschedule it. */
    uvs__store_rel(&t->state, UVS__T_FINISHED);
    done(t, status);
  }
}
