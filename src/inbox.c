/* The per-worker queue: a lock-free multi-producer inbox in front of an
 * unlinkable FIFO.
 *
 * The inbox is Vyukov's intrusive MPSC queue: a producer swaps itself in as
 * the tail (one atomic exchange) and then links its predecessor to itself.
 * Its consumer is whoever holds the scheduler's lock: a drain taking a
 * batch, a cancel, or a close. A cancel can't take a task out of the middle
 * of a singly-linked inbox, so it first flushes the inbox into the FIFO, a
 * doubly-linked list; each task is flushed at most once, so that costs O(1)
 * per task over its life. Nobody waits under the lock for a producer
 * between its two steps: a flush stops there, and the caller looks again
 * later (a cancel after letting the lock go, a close at its
 * next sweep).
 */

#include "internal.h"

#include <sched.h>


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
