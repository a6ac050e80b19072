/* The key table of a wide worker, shared by keys.c (entries by exact key;
 * the keyed queue: kready and the tasks behind each key), keytab.c (the
 * table's memory: the worker's block, growing past it) and bound.c
 * (per-key bounds, which count tasks into an entry). Private to those
 * three files. Everything here needs the scheduler's lock. */

#ifndef UVS_KEYTAB_H
#define UVS_KEYTAB_H

#include "internal.h"

#define KCHUNK 64
/* Intake stops once kready holds this many tasks (uvs__keys_intake). */
#define INTAKE_AHEAD 48
/* The most entries that exist at once, for a worker of width n. An entry's
 * head is in kready or picked by a lane. Intake adds an entry only while
 * kready holds fewer than INTAKE_AHEAD tasks (nready), so at most that many
 * heads are in kready when it does.
 * Picked heads: one in each lane, which holds one key at a time. */
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
  size_t queued; /* atomic: lanes count a run's tasks out as they start */
  int full;      /* atomic */
  int owed;
  uvs__queue_t owed_node;
  /* Admitted tasks of the key on their way to be filed (bound.c,
   * uvs__keys_filing), and how many of them a DROP_OLDEST took out. */
  unsigned filing;
  unsigned doomed;
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
  /* 0.4: the oldest barrier taken in, or NULL: at kready's tail until a
   * lane may pick it, then in that lane's batch (fence_lane). Intake
   * stops behind it, and tasks filed behind it wait on held. */
  uvs_task_t* barrier;
  uvs__lane_t* fence_lane;
  uvs__queue_t held;
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

static inline size_t uvs__kt_bucket(const uvs__keys_t* k, uint64_t key) {
  /* Fibonacci hashing: the top bits of the product. (Bits from the middle
   * put keys that count up into a few buckets each: 7 entries walked per
   * lookup for 100k sequential keys, against 1.3.) */
  return (size_t) ((key * 0x9e3779b97f4a7c15u) >> k->shift);
}

/* The entry of key, or NULL. */
uvs__kent_t* uvs__kt_lookup(uvs__keys_t* k, uint64_t key);
/* A new entry for key, empty; NULL without memory. */
uvs__kent_t* uvs__kt_new(uvs__keys_t* k, uint64_t key);
/* keytab.c, the worker's block and what grows past it: doubles the
 * buckets; frees the chunks and buckets that grew past the block (no key
 * active); adds a chunk of entries to the free list (UV_ENOMEM). */
void uvs__kt_grow(uvs__keys_t* k);
void uvs__kt_shrink(uvs__keys_t* k);
int uvs__kt_more(uvs__keys_t* k);
/* Deletes an entry that holds nothing and owes nothing: idle keys cost
 * no memory. */
void uvs__kt_maybe_del(uvs__keys_t* k, uvs__kent_t* e);
/* The key's oldest queued task, left where it is, or NULL. */
uvs_task_t* uvs__keys_oldest_of(uvs_worker_t* w, uvs__kent_t* e);

#endif /* UVS_KEYTAB_H */
