/* A worker's queue and its custody of tasks: the queue (a lock-free inbox
 * in front of an unlinkable FIFO); the idle/busy hand-off that makes a
 * worker ready once, however many producers push; the ready order; and
 * the hand-back that ends custody. (The pin that keeps a worker from
 * completing its close under a caller is hazard.c's.)
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


/* ---- the ready order --------------------------------------------------- */


static uvs__queue_t* ready_list(uvs_worker_t* w) {
  uvs__group_t* g;

  if (w->where == UVS_LOOP)
    return &w->sched->loop_ready;
  g = uvs__group_of(w);
  return w->keys == NULL ? &g->ready : &g->wide_ready;
}


/* Does g wait for drains: a worker of it ready, or one of its drains out? */
static int active(const uvs__group_t* g) {
  return g->drains != 0 || !uvs__queue_empty(&g->ready) ||
         !uvs__queue_empty(&g->wide_ready);
}


/* g had nothing ready nor running: it gets no credit for the time it was
 * idle, and starts level with the least served of the groups that wait
 * (SPEC 0.4, shares). */
static void level(uvs_sched_t* s, uvs__group_t* g) {
  uint64_t least;
  unsigned i;

  least = UINT64_MAX;
  for (i = 0; i < s->ngroups; i++)
    if (&s->groups[i] != g && active(&s->groups[i]) &&
        s->groups[i].vtime < least)
      least = s->groups[i].vtime;
  if (least != UINT64_MAX && g->vtime < least)
    g->vtime = least;
}


/* The group a drain serves next: of those with a serial worker ready and
 * room (or, for held, the place the asking runner has in it already), the
 * one with the least run_cb time per share. */
static uvs__group_t* next_group(uvs_sched_t* s, uvs__group_t* held) {
  uvs__group_t* best;
  uvs__group_t* g;
  unsigned i;

  if (s->ngroups == 1) {
    g = s->groups;
    return uvs__queue_empty(&g->ready) ? NULL : g;
  }
  best = NULL;
  for (i = 0; i < s->ngroups; i++) {
    g = &s->groups[i];
    if (uvs__queue_empty(&g->ready) || (g != held && g->drains >= g->cap))
      continue;
    if (best == NULL || g->vtime < best->vtime)
      best = g;
  }
  return best;
}


unsigned uvs__wide_order(uvs_sched_t* s, unsigned* order) {
  unsigned n;
  unsigned i;
  unsigned j;

  for (n = 0, i = 0; i < s->ngroups; i++) {
    if (uvs__queue_empty(&s->groups[i].wide_ready))
      continue;
    for (j = n++; j > 0 && s->groups[order[j - 1]].vtime > s->groups[i].vtime;
         j--)
      order[j] = order[j - 1];
    order[j] = i;
  }
  return n;
}


uvs_worker_t* uvs__ready_take(uvs_sched_t* s, uint64_t epoch, unsigned* group) {
  uvs__group_t* held;
  uvs__group_t* g;
  uvs_worker_t* w;

  held = epoch != 0 ? &s->groups[*group] : NULL;
  g = next_group(s, held);
  if (g == NULL || (held == NULL && g->drains >= g->cap))
    return NULL;
  w = uvs__container_of(g->ready.next, uvs_worker_t, ready_node);
  if (epoch != 0 && w->runner_epoch == epoch)
    return NULL; /* it had its turn of this runner: the next runner's */
  uvs__queue_remove(&w->ready_node);
  uvs__store_rel(&g->nready, g->nready - 1);
  w->phase = UVS__P_POSTED;
  if (g != held) {
    if (held != NULL)
      held->drains--;
    g->drains++;
    *group = w->group;
  }
  return w;
}


void uvs__worker_make_ready(uvs_worker_t* w) {
  uvs__group_t* g;

  /* A suspended worker waits off the lists, SCHEDULED, so that producers
   * leave it be; its resume or close lists it (close.c). */
  if (uvs__suspended(w)) {
    w->phase = UVS__P_PARKED;
    /* Its pending tasks hold uv_run as ready ones do (loop.c). */
    uvs__store_rel(&w->sched->parked, w->sched->parked + 1);
    uvs__ring(w->sched, UVS__BELL_PARKED);
    return;
  }
  w->phase = UVS__P_READY;
  if (w->where == UVS_POOL) {
    g = uvs__group_of(w);
    if (w->sched->ngroups > 1 && !active(g))
      level(w->sched, g);
    uvs__store_rel(&g->nready, g->nready + 1);
  }
  uvs__queue_push(ready_list(w), &w->ready_node);
  uvs__ring(w->sched,
            w->where == UVS_POOL ? UVS__BELL_DISPATCH : UVS__BELL_TURN);
}


void uvs__group_ran(uvs_worker_t* w, unsigned n, uint64_t ns) {
  uvs__group_t* g;

  g = uvs__group_of(w);
  uvs__store_rel(&g->ran, g->ran + n);
  uvs__store_rel(&g->run_ns, g->run_ns + ns);
  if (w->sched->ngroups > 1)
    g->vtime += ns * 128 / g->shares;
}


void uvs__worker_push(uvs_worker_t* w, uvs_task_t* t, int requeue) {
  unsigned idle;

  /* A delayed task that fell due was counted when it was accepted; it is
   * counted again when it leaves the inbox, and the stats count the inbox
   * meanwhile. */
  if (requeue) {
    w->nsched--;
    uvs__task_set_unlinked(t); /* see uvs__inbox_push */
  }
  uvs__inbox_push(w, t);
  /* A wide worker whose lanes all run wants none more: the other half is
   * lane_work_done() in loop.c, which frees a lane, then looks at the
   * inbox. Either it sees this task or this load sees the lane free. */
  if (w->keys != NULL &&
      __atomic_load_n(&w->lanes_active, __ATOMIC_SEQ_CST) >= w->width)
    return;
  /* The other half is turn_ended() (serve_wide() in loop.c for a wide
   * worker): it stores IDLE, then looks at the inbox. Either it sees this
   * task or this load sees IDLE. */
  if (__atomic_load_n(&w->state, __ATOMIC_SEQ_CST) != UVS__WS_IDLE)
    return;
  idle = UVS__WS_IDLE;
  if (!__atomic_compare_exchange_n(&w->state, &idle, UVS__WS_SCHEDULED, 0,
                                   __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
    return;
  if (!requeue)
    uv_mutex_lock(&w->sched->lock);
  uvs__worker_make_ready(w);
  if (!requeue)
    uv_mutex_unlock(&w->sched->lock);
}


/* A turn of w ended (lock held; any thread): idle, or ready again at the
 * tail of its list so that ready workers take turns. */
void uvs__turn_ended(uvs_worker_t* w) {
  unsigned idle;

  if (w->flags & UVS__WF_CLOSING)
    uvs__ring(w->sched, UVS__BELL_CLOSE); /* the loop sweeps and completes
                                           * closes (close.c) */
  w->phase = UVS__P_IDLE;
  if (!uvs__worker_nonempty(w)) {
    /* The other half of uvs__worker_push()'s hand-off. */
    __atomic_store_n(&w->state, UVS__WS_IDLE, __ATOMIC_SEQ_CST);
    if (!uvs__worker_nonempty(w))
      return;
    idle = UVS__WS_IDLE;
    if (!__atomic_compare_exchange_n(&w->state, &idle, UVS__WS_SCHEDULED, 0,
                                     __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return; /* a producer took it and makes it ready */
  }
  uvs__worker_make_ready(w);
}


void uvs__park(uvs_worker_t* w) {
  uvs__group_t* g;

  if (w->phase != UVS__P_READY)
    return;
  uvs__queue_remove(&w->ready_node); /* its list, or a loop turn's */
  if (w->where == UVS_POOL) {
    g = uvs__group_of(w);
    uvs__store_rel(&g->nready, g->nready - 1);
  }
  w->phase = UVS__P_PARKED;
  uvs__store_rel(&w->sched->parked, w->sched->parked + 1);
  uvs__ring(w->sched, UVS__BELL_PARKED);
}


void uvs__unpark(uvs_worker_t* w) {
  if (w->phase != UVS__P_PARKED)
    return;
  uvs__store_rel(&w->sched->parked, w->sched->parked - 1);
  uvs__ring(w->sched, UVS__BELL_PARKED);
  uvs__turn_ended(w); /* listed again, or idle */
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
