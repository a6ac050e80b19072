/* Hand-backs: the end of the library's custody of a task. Tasks with a
 * done_cb go onto a lock-free stack that the loop thread empties (deliver),
 * calling done_cb oldest first; the rest are released where they end.
 */

#include "internal.h"


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
  if ((st & UVS__T_POST) || t->done_cb == NULL) {
    ended(w, status);
    if (st & UVS__T_POST)
      uvs__post_release(s, t);
    else
      uvs__store_rel(&t->state, UVS__T_FINISHED); /* released */
    return;
  }
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
    /* From here the task is the user's: done_cb may free or reschedule it. */
    uvs__store_rel(&t->state, UVS__T_FINISHED);
    done(t, status);
  }
}
