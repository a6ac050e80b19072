/* Width-N workers and keyed lanes (0.2).
 *
 * A worker with width > 1 runs up to `width` drains at once, its lanes. Its
 * queued tasks pass from the inbox (and the FIFO that cancels flush it
 * into) to `kready`, the list that lanes take from in order. A task with no
 * key goes there as it is. A task with a key goes there only if no other
 * task of that key is running or in kready; otherwise it waits in the
 * queue of its key's entry, and joins the tail of kready when the task
 * before it is done. So tasks of one key never overlap and start and end in
 * schedule order, and each key gets one task per turn of kready: a hot key
 * can't starve the others.
 *
 * Entries live in a hash table by exact key. An entry exists only while its
 * key has a task queued in kready or running. The worker's one block holds
 * as many entries, and a power of two at least as many buckets, as can
 * exist at once (KEYS_ACTIVE), so taking tasks in never allocates. Growth
 * past that (chunks of entries, a larger bucket array) stays as a fallback
 * in case the bound is wrong; it is freed whenever no key is active, so
 * idle keys cost no memory. Everything here needs the scheduler's lock.
 */

#include "internal.h"

#include <string.h>

#define KCHUNK 64
/* Intake stops once kready holds this many tasks (uvs__keys_intake). */
#define INTAKE_AHEAD 48
/* The most entries that exist at once, for a worker of width n. An entry's
 * head is in kready or picked by a lane. Intake adds an entry only while
 * kready holds fewer than INTAKE_AHEAD tasks (nready), so at most that many
 * heads are in kready when it does.
 * Picked tasks: one in each lane, which takes one task at a time. */
#define KEYS_ACTIVE(n) ((size_t) INTAKE_AHEAD + (n))

struct uvs__kent_s {
  struct uvs__kent_s* next; /* hash chain, or free list */
  uint64_t key;
  uvs_task_t* head; /* in kready or running; NULL only with key_max */
  int taken;        /* head is in a lane (picked), not in kready */
  uvs__queue_t q;   /* the key's tasks behind head, through their node */
  /* 0.3, key_max_pending: the key's tasks queued and not started, and
   * whether a schedule found it full (key_space_cb owed at key_max / 2)
   * and whether that callback is owed now (on owed, through owed_node). */
  size_t queued;
  int full;
  int owed;
  uvs__queue_t owed_node;
};

typedef struct kchunk_s {
  struct kchunk_s* next;
  uvs__kent_t ent[KCHUNK];
} kchunk_t;

struct uvs__keys_s {
  uvs__kent_t** buckets;
  size_t nbuckets;
  unsigned shift;   /* 64 - log2(nbuckets): the hash's top bits index it */
  size_t count;     /* entries in the table */
  size_t nready;    /* tasks in kready */
  unsigned seeking; /* lanes posted that have not picked a task yet */
  /* 0.3, key_max_pending: entries owing key_space_cb, oldest first, and
   * what happened since the last uvs__keys_news(). */
  uvs__queue_t owed;
  unsigned news;
  uvs__kent_t* free;
  kchunk_t* extra; /* fallback chunks, freed when no key is active */
  /* In the same block, after the lanes: */
  uvs__kent_t* first;  /* nfirst entries, KEYS_ACTIVE(width) */
  uvs__kent_t** small; /* nsmall buckets, the table's size at rest */
  size_t nfirst;
  size_t nsmall;
  unsigned shift_small;
  uvs__lane_t lanes[];
};


/* Every entry of the worker's own block on the free list, in order. */
static void free_list_reset(uvs__keys_t* k) {
  size_t i;

  k->free = NULL;
  for (i = k->nfirst; i-- > 0;) {
    k->first[i].next = k->free;
    k->free = &k->first[i];
  }
}


uvs__keys_t* uvs__keys_new(unsigned width) {
  uvs__keys_t* k;
  size_t nfirst;
  size_t nsmall;
  size_t size;
  size_t per;
  unsigned shift;

  nfirst = KEYS_ACTIVE(width);
  nsmall = 64;
  shift = 64 - 6;
  while (nsmall < nfirst) {
    nsmall *= 2;
    shift--;
  }
  /* Entries and buckets go after the lanes; all three hold pointers, so
   * each part stays aligned. Only a 32-bit size_t can overflow here. */
  per = sizeof(k->lanes[0]) + 3 * sizeof(uvs__kent_t);
  size = (size_t) width * per;
  if (size / per != width || size > SIZE_MAX / 2)
    return NULL;
  size = sizeof(*k) + width * sizeof(k->lanes[0]) +
         nfirst * sizeof(uvs__kent_t) + nsmall * sizeof(uvs__kent_t*);
  k = uvs__malloc(size);
  if (k == NULL)
    return NULL;
  memset(k, 0, size);
  k->first = (uvs__kent_t*) (void*) &k->lanes[width];
  k->small = (uvs__kent_t**) (void*) &k->first[nfirst];
  k->nfirst = nfirst;
  k->nsmall = nsmall;
  k->shift_small = shift;
  k->buckets = k->small;
  k->nbuckets = nsmall;
  k->shift = shift;
  uvs__queue_init(&k->owed);
  free_list_reset(k);
  return k;
}


void uvs__keys_attach(uvs_worker_t* w, uvs__keys_t* k) {
  unsigned i;

  for (i = 0; i < w->width; i++) k->lanes[i].w = w;
  w->keys = k;
}


static void free_extra(uvs__keys_t* k) {
  kchunk_t* c;

  if (k->buckets != k->small) {
    uvs__free(k->buckets);
    k->buckets = k->small;
    k->nbuckets = k->nsmall;
    k->shift = k->shift_small;
    memset(k->small, 0, k->nsmall * sizeof(k->small[0]));
  }
  if (k->extra == NULL)
    return;
  while ((c = k->extra) != NULL) {
    k->extra = c->next;
    uvs__free(c);
  }
  free_list_reset(k);
}


void uvs__keys_free(uvs_worker_t* w) {
  if (w->keys == NULL)
    return;
  free_extra(w->keys);
  uvs__free(w->keys);
  w->keys = NULL;
}


uvs__lane_t* uvs__keys_lane(uvs_worker_t* w, unsigned i) {
  return &w->keys->lanes[i];
}


static size_t bucket_of(const uvs__keys_t* k, uint64_t key) {
  /* Fibonacci hashing: the top bits of the product. (Bits from the middle
   * put keys that count up into a few buckets each: 7 entries walked per
   * lookup for 100k sequential keys, against 1.3.) */
  return (size_t) ((key * 0x9e3779b97f4a7c15u) >> k->shift);
}


static uvs__kent_t* lookup(uvs__keys_t* k, uint64_t key) {
  uvs__kent_t* e;

  for (e = k->buckets[bucket_of(k, key)]; e != NULL; e = e->next)
    if (e->key == key)
      return e;
  return NULL;
}


/* Doubles the table when it holds more entries than buckets, so that a
 * lookup walks about one entry; without memory, chains just grow longer. */
static void maybe_grow(uvs__keys_t* k) {
  uvs__kent_t** old;
  uvs__kent_t** nb;
  uvs__kent_t* e;
  size_t oldn;
  size_t i;

  if (k->count <= k->nbuckets)
    return;
  nb = uvs__calloc(k->nbuckets * 2, sizeof(*nb));
  if (nb == NULL)
    return;
  old = k->buckets;
  oldn = k->nbuckets;
  k->buckets = nb;
  k->nbuckets = oldn * 2;
  k->shift--;
  for (i = 0; i < oldn; i++) {
    while ((e = old[i]) != NULL) {
      old[i] = e->next;
      e->next = k->buckets[bucket_of(k, e->key)];
      k->buckets[bucket_of(k, e->key)] = e;
    }
  }
  if (old != k->small)
    uvs__free(old);
  else
    memset(k->small, 0, oldn * sizeof(k->small[0]));
}


static uvs__kent_t* ent_new(uvs__keys_t* k, uint64_t key) {
  kchunk_t* c;
  uvs__kent_t* e;
  unsigned i;

  if (k->free == NULL) {
    c = uvs__malloc(sizeof(*c));
    if (c == NULL)
      return NULL;
    c->next = k->extra;
    k->extra = c;
    for (i = 0; i < KCHUNK; i++) {
      c->ent[i].next = k->free;
      k->free = &c->ent[i];
    }
  }
  e = k->free;
  k->free = e->next;
  e->key = key;
  e->head = NULL;
  e->taken = 0;
  e->queued = 0;
  e->full = 0;
  e->owed = 0;
  uvs__queue_init(&e->q);
  e->next = k->buckets[bucket_of(k, key)];
  k->buckets[bucket_of(k, key)] = e;
  k->count++;
  maybe_grow(k);
  return e;
}


static void ent_del(uvs__keys_t* k, uvs__kent_t* e) {
  uvs__kent_t** p;

  for (p = &k->buckets[bucket_of(k, e->key)]; *p != e; p = &(*p)->next)
    ;
  *p = e->next;
  e->next = k->free;
  k->free = e;
  if (--k->count == 0)
    free_extra(k);
}


/* Deletes an entry that holds nothing and owes nothing: idle keys cost
 * no memory. */
static void maybe_del(uvs__keys_t* k, uvs__kent_t* e) {
  if (e->head == NULL && uvs__queue_empty(&e->q) && e->queued == 0 && !e->owed)
    ent_del(k, e);
}


/* With key_max_pending, one of e's queued tasks left the queue: room for
 * a blocked producer, and key_space_cb owed once a full key falls to half
 * its bound. */
static void count_out(uvs_worker_t* w, uvs__kent_t* e) {
  uvs__keys_t* k;

  if (w->key_max == 0)
    return;
  k = w->keys;
  e->queued--;
  k->news |= UVS__KEYS_ROOM;
  if (e->full && e->queued <= w->key_max / 2) {
    e->full = 0;
    if (w->key_space_cb != NULL && !e->owed && !(w->flags & UVS__WF_CLOSING)) {
      e->owed = 1;
      uvs__queue_push(&k->owed, &e->owed_node);
      k->news |= UVS__KEYS_OWED;
    }
  }
}


/* kready, counted: a task in it has tnode.prev pointing at it (tnode is
 * the timer wheel's link, free while a task is queued; tnode.next holds a
 * head's key entry), so a cancel that unlinks it knows to count it out,
 * and intake's window never shrinks under tasks cancelled from it. */
static void ready_push(uvs_worker_t* w, uvs_task_t* t) {
  uvs__queue_push(&w->kready, &t->node);
  t->tnode.prev = &w->kready;
  w->keys->nready++;
}


static void ready_unshift(uvs_worker_t* w, uvs_task_t* t) {
  uvs__queue_unshift(&w->kready, &t->node);
  t->tnode.prev = &w->kready;
  w->keys->nready++;
}


/* t left kready (lock held): counted out. */
static void ready_taken(uvs_worker_t* w, uvs_task_t* t) {
  t->tnode.prev = NULL;
  w->keys->nready--;
}


/* The task its key runs next. While queued a task's tnode is free (it is
 * used only in the timer wheel): the head keeps its entry there, so that
 * a lane finds it without a lookup. */
static void set_head(uvs__kent_t* e, uvs_task_t* t) {
  e->head = t;
  e->taken = 0;
  t->tnode.next = (uvs__queue_t*) e;
}


int uvs__keys_intake(uvs_worker_t* w) {
  uvs__keys_t* k;
  uvs__kent_t* e;
  uvs_task_t* t;

  k = w->keys;
  for (;;) {
    /* Only as far as lanes need to start tasks: the inbox keeps the rest,
     * whose keys then get no entry yet. With many keys in the queue, the
     * table stays about INTAKE_AHEAD entries and in cache, instead of one
     * entry per key queued, each a cache miss to find. */
    if (k->nready >= INTAKE_AHEAD)
      return 0;
    t = uvs__inbox_take(w, 1);
    if (t == NULL)
      return uvs__inbox_nonempty(w) ? UV_EAGAIN : 0;
    if (t->key == 0) {
      ready_push(w, t);
      continue;
    }
    e = lookup(k, t->key);
    if (e != NULL && e->head != NULL) {
      uvs__queue_push(&e->q, &t->node);
      continue;
    }
    if (e == NULL)
      e = ent_new(k, t->key);
    if (e == NULL) {
      /* Out of memory: back to the head of the FIFO, for a later try. */
      uvs__queue_unshift(&w->fifo, &t->node);
      return UV_ENOMEM;
    }
    set_head(e, t);
    ready_push(w, t);
  }
}


uvs_task_t* uvs__keys_pick(uvs_worker_t* w, uvs__kent_t** ent) {
  uvs__queue_t* q;
  uvs_task_t* t;

  q = uvs__queue_shift(&w->kready);
  if (q == NULL)
    return NULL;
  t = uvs__container_of(q, uvs_task_t, node);
  ready_taken(w, t);
  *ent = NULL;
  if (t->key != 0) {
    *ent = (uvs__kent_t*) t->tnode.next;
    (*ent)->taken = 1;
    count_out(w, *ent);
  }
  return t;
}


void uvs__keys_unpick(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (t->key != 0) {
    e = lookup(w->keys, t->key);
    if (e->head != t) {
      uvs__queue_unshift(&e->q, &t->node); /* from a key's run */
      return;
    }
    e->taken = 0;
    if (w->key_max != 0)
      e->queued++; /* back in the queue: counted again, bound or not */
  }
  ready_unshift(w, t);
}


uvs_task_t* uvs__keys_next_of(uvs__kent_t* e) {
  uvs__queue_t* q;

  q = uvs__queue_shift(&e->q);
  return q != NULL ? uvs__container_of(q, uvs_task_t, node) : NULL;
}


void uvs__keys_release(uvs_worker_t* w, uvs__kent_t* e) {
  uvs__queue_t* q;

  q = uvs__queue_shift(&e->q);
  if (q == NULL) {
    e->head = NULL;
    e->taken = 0;
    maybe_del(w->keys, e);
    return;
  }
  set_head(e, uvs__container_of(q, uvs_task_t, node));
  ready_push(w, e->head);
}


void uvs__keys_unlinked(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (t->tnode.prev == &w->kready)
    ready_taken(w, t); /* a cancel unlinked it from kready */
  if (t->key == 0)
    return;
  /* The key's next task leaves kready. A head a lane took (and the rest
   * of its key's run) is the lane's to release when its batch ends, even
   * when a cancel tombstoned it (its link tagged with the slot) or the
   * same task, scheduled again from its run_cb or done_cb, is what leaves
   * now from behind it. */
  e = lookup(w->keys, t->key);
  if (e == NULL)
    return;
  /* A picked task was counted out when it was picked. */
  if (!((uintptr_t) t->node.prev & 1) && !(e->head == t && e->taken))
    count_out(w, e);
  if (e->head == t && !e->taken)
    uvs__keys_release(w, e);
  else
    maybe_del(w->keys, e);
}


uvs_task_t* uvs__keys_take(uvs_worker_t* w) {
  uvs__queue_t* q;
  uvs_task_t* t;
  size_t i;
  uvs__kent_t* e;

  q = uvs__queue_shift(&w->kready);
  if (q != NULL) {
    t = uvs__container_of(q, uvs_task_t, node);
    ready_taken(w, t);
    uvs__keys_unlinked(w, t);
    return t;
  }
  /* Tasks waiting behind a running one of their key. */
  for (i = 0; i < w->keys->nbuckets; i++)
    for (e = w->keys->buckets[i]; e != NULL; e = e->next)
      if ((q = uvs__queue_shift(&e->q)) != NULL) {
        count_out(w, e);
        return uvs__container_of(q, uvs_task_t, node);
      }
  return NULL;
}


int uvs__keys_nonempty(uvs_worker_t* w) {
  return w->keys != NULL && !uvs__queue_empty(&w->kready);
}


unsigned uvs__keys_lanes_wanted(uvs_worker_t* w) {
  uvs__keys_t* k;
  uvs__queue_t* q;
  unsigned room;
  unsigned n;

  k = w->keys;
  room = w->width - w->lanes_active;
  n = 0;
  for (q = w->kready.next; q != &w->kready && n < room + k->seeking;
       q = q->next)
    n++;
  return n > k->seeking ? n - k->seeking : 0;
}


void uvs__keys_seeking(uvs_worker_t* w, int delta) {
  w->keys->seeking += (unsigned) delta;
}


/* ---- 0.3: per-key bounds (key_max_pending) ----------------------------- */
/* With a bound, tasks are filed under their keys as they are accepted, not
 * taken in from the inbox later, so that every queued task of a key is
 * counted in its entry and its oldest is at hand for DROP_OLDEST. An entry
 * lives while its key has a task queued or running, or owes key_space_cb. */

/* The key's oldest queued task, taken out and counted out, or NULL. */
static uvs_task_t* take_key_oldest(uvs_worker_t* w, uvs__kent_t* e) {
  uvs__queue_t* q;
  uvs_task_t* t;

  if (e->head != NULL && !e->taken) {
    t = e->head;
    uvs__queue_remove(&t->node);
    ready_taken(w, t);
    count_out(w, e);
    uvs__keys_release(w, e);
    return t;
  }
  q = uvs__queue_shift(&e->q);
  if (q == NULL)
    return NULL;
  count_out(w, e);
  return uvs__container_of(q, uvs_task_t, node);
}


int uvs__keys_admit(uvs_worker_t* w, uvs_task_t* t, uvs_task_t** evicted) {
  uvs__keys_t* k;
  uvs__kent_t* e;

  *evicted = NULL;
  if (t->key == 0)
    return 0;
  k = w->keys;
  e = lookup(k, t->key);
  if (e == NULL) {
    e = ent_new(k, t->key);
    if (e == NULL)
      return UV_ENOMEM;
  }
  if (e->queued >= w->key_max) {
    e->full = 1;
    if (w->on_full != UVS_FULL_DROP_OLDEST)
      return UV_EAGAIN;
    /* The new task counts in first: the count never dips on the way, so
     * an eviction owes no key_space_cb. */
    e->queued++;
    *evicted = take_key_oldest(w, e);
    return 0;
  }
  e->queued++;
  return 0;
}


void uvs__keys_unadmit(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (t->key == 0)
    return;
  e = lookup(w->keys, t->key);
  e->queued--;
  maybe_del(w->keys, e);
}


int uvs__keys_reserve(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (t->key == 0)
    return 0;
  e = lookup(w->keys, t->key);
  if (e == NULL) {
    e = ent_new(w->keys, t->key);
    if (e == NULL)
      return UV_ENOMEM;
  }
  e->queued++;
  return 0;
}


void uvs__keys_file(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (t->key != 0) {
    e = lookup(w->keys, t->key);
    if (e->head != NULL) {
      uvs__queue_push(&e->q, &t->node);
      return;
    }
    set_head(e, t);
  }
  ready_push(w, t);
}


int uvs__keys_key_full(uvs_worker_t* w, uint64_t key) {
  uvs__kent_t* e;

  if (w->key_max == 0 || key == 0)
    return 0;
  e = lookup(w->keys, key);
  return e != NULL && e->queued >= w->key_max;
}


unsigned uvs__keys_news(uvs_worker_t* w) {
  unsigned news;

  if (w->keys == NULL)
    return 0;
  news = w->keys->news;
  w->keys->news = 0;
  return news;
}


int uvs__keys_owed_take(uvs_worker_t* w, uint64_t* key) {
  uvs__queue_t* q;
  uvs__kent_t* e;

  if (w->keys == NULL || (q = uvs__queue_shift(&w->keys->owed)) == NULL)
    return 0;
  e = uvs__container_of(q, uvs__kent_t, owed_node);
  e->owed = 0;
  *key = e->key;
  maybe_del(w->keys, e);
  return 1;
}
