/* The memory of a wide worker's key table (width > 1): the block that
 * holds its lanes, first entries and buckets, made and freed here, and
 * what grows past it. Lookups and entries come and go in keys.c; they
 * call here only past the block.
 *
 * The table: an entry per active key, found by exact key in a hash table.
 * Entries come from one free list. Its first entries are in the worker's
 * own block, as many as a worker without per-key bounds can have active
 * at once (KEYS_ACTIVE): on such a worker, taking tasks in never
 * allocates. With per-key bounds every key with a task queued has an
 * entry, as many as there are such keys, so the list grows by chunks past
 * the block, and the bucket array doubles; both are freed whenever no key
 * is active, so idle keys cost no memory.
 *
 * Everything here needs the scheduler's lock.
 */

#include "keytab.h"

#include <string.h>

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
  uvs__queue_init(&k->held);
  free_list_reset(k);
  return k;
}


void uvs__keys_attach(uvs_worker_t* w, uvs__keys_t* k) {
  unsigned i;

  for (i = 0; i < w->width; i++) k->lanes[i].w = w;
  w->keys = k;
}


void uvs__kt_shrink(uvs__keys_t* k) {
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
  uvs__kt_shrink(w->keys);
  uvs__free(w->keys);
  w->keys = NULL;
}


void uvs__kt_grow(uvs__keys_t* k) {
  uvs__kent_t** old;
  uvs__kent_t** nb;
  uvs__kent_t* e;
  size_t oldn;
  size_t i;

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
      e->next = k->buckets[uvs__kt_bucket(k, e->key)];
      k->buckets[uvs__kt_bucket(k, e->key)] = e;
    }
  }
  if (old != k->small)
    uvs__free(old);
  else
    memset(k->small, 0, oldn * sizeof(k->small[0]));
}


int uvs__kt_more(uvs__keys_t* k) {
  kchunk_t* c;
  unsigned i;

  c = uvs__malloc(sizeof(*c));
  if (c == NULL)
    return UV_ENOMEM;
  c->next = k->extra;
  k->extra = c;
  for (i = 0; i < KCHUNK; i++) {
    c->ent[i].next = k->free;
    k->free = &c->ent[i];
  }
  return 0;
}
