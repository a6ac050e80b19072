/* Hazard slots: what keeps a worker's memory alive under a cancel, and
 * holds its close off while a caller on another thread is inside the API.
 *
 * uvs_task_cancel() reads a task's worker without holding anything that
 * keeps that worker alive: the task may be handed back, its worker's close
 * completed and the worker freed by its close callback between the load
 * and the cancel's use of it. So each thread that cancels owns a slot and
 * publishes in it the worker it is about to use; then it checks that the
 * task still belongs to that worker. A close, before its callback, waits
 * until no slot names its worker. Either the close's scan sees the slot,
 * or the cancel's check sees the task handed back: both sides touch the
 * slot with sequentially consistent read-modify-writes (not fences, which
 * TSan does not model), so whichever comes second sees what the first
 * did. A cancel on another worker never holds a close up.
 *
 * The same slot pins a worker for a schedule or post from a thread other
 * than the worker's loop's (uvs__worker_pin): the caller names the worker
 * in the slot's pin word, then loads the worker's closed flag; the close
 * stores the flag, then waits until no pin word names the worker. One
 * exchange on a line no other thread writes.
 *
 * Every thread gets a slot, however many there are: slots come in chunks
 * of UVS__HAZARD_CHUNK, the first one static, the others allocated when
 * every slot before them is taken and kept for the life of the process. A
 * thread takes a free slot at its first cancel or pin and gives it back
 * when it exits (a pthread key's destructor), so the chunks grow only to
 * the most threads that were ever inside the API at once. A close scans
 * as far as slots were ever taken. A thread that needs a new chunk and
 * can't allocate it gets UV_ENOMEM from the call, which then changes
 * nothing.
 */

#include "internal.h"

#include <sched.h>
#include <stdlib.h>

/* One cache line each: a cancel writes its own slot only. */
struct uvs__hazard_s {
  uintptr_t worker; /* atomic: the worker a cancel uses, or 0 */
  uintptr_t pin;    /* atomic: the worker pinned, or 0 */
  unsigned depth;   /* pins of it held (its thread only) */
  unsigned used;    /* atomic: a thread owns this slot */
  unsigned index;   /* its place among all slots, from 0 */
  char pad[64 - 2 * sizeof(uintptr_t) - 3 * sizeof(unsigned)];
};

typedef struct chunk_s {
  uvs__hazard_t slots[UVS__HAZARD_CHUNK];
  struct chunk_s* next; /* atomic: set once, never cleared */
  void* block;          /* what uvs__calloc gave, for the leak checker */
  unsigned base;        /* the index of its first slot */
} chunk_t;

static chunk_t first __attribute__((aligned(64)));
static unsigned slots_seen; /* atomic: slots ever taken, a prefix */
static UVS__TLS uvs__hazard_t* own;

#ifndef _WIN32
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t key;
static int key_ok;

static void give_back(void* p) {
  uvs__hazard_t* h;

  h = p;
  __atomic_store_n(&h->worker, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&h->pin, 0, __ATOMIC_RELEASE);
  h->depth = 0;
  __atomic_store_n(&h->used, 0u, __ATOMIC_RELEASE);
}

static void make_key(void) {
  key_ok = pthread_key_create(&key, give_back) == 0;
}
#endif


/* The chunk after c, allocated if there is none yet; NULL without memory. */
static chunk_t* next_chunk(chunk_t* c) {
  chunk_t* next;
  chunk_t* fresh;
  void* block;

  next = uvs__load_acq(&c->next);
  if (next != NULL)
    return next;
  block = uvs__calloc(1, sizeof(chunk_t) + 63);
  if (block == NULL)
    return NULL;
  fresh = (chunk_t*) (((uintptr_t) block + 63) & ~(uintptr_t) 63);
  fresh->block = block;
  fresh->base = c->base + UVS__HAZARD_CHUNK;
  if (__atomic_compare_exchange_n(&c->next, &next, fresh, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE))
    return fresh;
  uvs__free(block); /* another thread linked one first: next is it */
  return next;
}


/* The calling thread's slot, taken at its first cancel or pin; NULL if a
 * new chunk was needed and could not be allocated. */
static uvs__hazard_t* own_slot(void) {
  uvs__hazard_t* h;
  chunk_t* c;
  unsigned seen;
  unsigned zero;
  unsigned i;

  if (own != NULL)
    return own;
  for (c = &first;; c = next_chunk(c)) {
    if (c == NULL)
      return NULL;
    for (i = 0; i < UVS__HAZARD_CHUNK; i++) {
      zero = 0;
      if (uvs__load_rlx(&c->slots[i].used) == 0 &&
          __atomic_compare_exchange_n(&c->slots[i].used, &zero, 1u, 0,
                                      __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        h = &c->slots[i];
        h->index = c->base + i;
        goto taken;
      }
    }
  }
taken:
  /* A close scans this far: the slot counts before it can name a worker.
   * seq_cst, against the close's read of slots_seen. */
  seen = uvs__load_rlx(&slots_seen);
  while (seen < h->index + 1 &&
         !__atomic_compare_exchange_n(&slots_seen, &seen, h->index + 1, 1,
                                      __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
  }
#ifndef _WIN32
  pthread_once(&key_once, make_key);
  if (key_ok)
    pthread_setspecific(key, h);
#endif
  own = h;
  return own;
}


uvs__hazard_t* uvs__hazard_enter(void) {
  return own_slot();
}


void uvs__hazard_protect(uvs__hazard_t* h, uvs_worker_t* w) {
  /* Before the caller's check of the task; pairs with the read-modify-write
   * in uvs__hazard_wait_cancels(). */
  __atomic_exchange_n(&h->worker, (uintptr_t) w, __ATOMIC_SEQ_CST);
}


void uvs__hazard_leave(uvs__hazard_t* h) {
  /* Release: everything the cancel did with the worker happens-before a
   * close that sees the slot empty. */
  __atomic_store_n(&h->worker, 0, __ATOMIC_RELEASE);
}


/* Waits until no slot names w in its cancel word (pins = 0) or its pin
 * word (pins = 1). Each read is a read-modify-write that changes nothing:
 * a caller whose slot it finds empty, or naming another worker, publishes
 * later in the slot's order, and so sees what the closer did before (the
 * tasks handed back, or w->closed stored) when it checks. */
static void wait_unnamed(uvs_worker_t* w, int pins) {
  uintptr_t* word;
  chunk_t* c;
  unsigned n;
  unsigned i;

  n = __atomic_fetch_add(&slots_seen, 0, __ATOMIC_SEQ_CST);
  for (c = &first; c != NULL && n != 0; c = uvs__load_acq(&c->next)) {
    for (i = 0; i < UVS__HAZARD_CHUNK && n != 0; i++, n--) {
      word = pins ? &c->slots[i].pin : &c->slots[i].worker;
      while (__atomic_fetch_or(word, 0, __ATOMIC_SEQ_CST) == (uintptr_t) w)
        sched_yield();
    }
  }
}


void uvs__hazard_wait_cancels(uvs_worker_t* w) {
  /* Every task of w is handed back already. */
  wait_unnamed(w, 0);
}


int uvs__hazard_pin(uvs_worker_t* w) {
  uvs__hazard_t* h;

  h = own_slot();
  if (h == NULL)
    return UV_ENOMEM;
  if (h->depth != 0) {
    /* A call inside a call (uvs_schedule_wait's schedules) pins the same
     * worker again; no call pins two. */
    if (uvs__load_rlx(&h->pin) != (uintptr_t) w)
      abort();
    h->depth++;
    return 0;
  }
  /* Before the caller's load of w->closed; pairs with the read-modify-
   * write in uvs__hazard_wait_pins(). */
  __atomic_exchange_n(&h->pin, (uintptr_t) w, __ATOMIC_SEQ_CST);
  h->depth = 1;
  return 0;
}


void uvs__hazard_unpin(void) {
  uvs__hazard_t* h;

  h = own;
  if (--h->depth == 0)
    __atomic_store_n(&h->pin, 0, __ATOMIC_RELEASE);
}


void uvs__hazard_wait_pins(uvs_worker_t* w) {
  /* w->closed is stored already. */
  wait_unnamed(w, 1);
}


int uvs__hazard_index(void) {
  return own != NULL ? (int) own->index : -1;
}


/* ---- a worker's pin --------------------------------------------------- */


int uvs__worker_enter(uvs_worker_t* w) {
  /* Pairs with finish_closes(): it stores closed, then waits for inflight to
   * drop to zero. Both sides are seq_cst, so either we see closed or the
   * closer sees our pin. */
  uvs__add_sc(&w->inflight, 1);
  if (__atomic_load_n(&w->closed, __ATOMIC_SEQ_CST)) {
    uvs__sub_sc(&w->inflight, 1);
    return UV_ESHUTDOWN;
  }
  return 0;
}


void uvs__worker_leave(uvs_worker_t* w) {
  uvs__sub_sc(&w->inflight, 1);
}


int uvs__worker_pin_slot(uvs_worker_t* w, int* pinned) {
  int err;

  /* The thread's hazard slot holds the close off (uvs__worker_pin() in
   * hazard.h is the loop thread's way). A closed worker answers before
   * its scheduler, which may be gone, is touched. shut_door() in close.c
   * is the other half. */
  err = uvs__hazard_pin(w);
  if (err != 0)
    return err;
  *pinned = UVS__PIN_SLOT;
  if (__atomic_load_n(&w->closed, __ATOMIC_SEQ_CST)) {
    uvs__hazard_unpin();
    return UV_ESHUTDOWN;
  }
  return 0;
}
