/* A wide worker's keys (width > 1): its key table's entries (their
 * memory is keytab.c's), its keyed queue, and barriers (0.4).
 *
 * The keyed queue: queued tasks pass from the inbox (and the FIFO that
 * cancels flush it into) to kready, the list that lanes take from in
 * order. A task with no key goes there as it is. A task with a key goes
 * there only if no other task of its key is running or in kready;
 * otherwise it waits in the queue of its key's entry, and joins the tail
 * of kready when the task before it is done. So tasks of one key never
 * overlap and start and end in schedule order, and each key gets one task
 * per turn of kready: a hot key can't starve the others. An entry exists
 * only while its key has a task in kready or running, or, with per-key
 * bounds (0.3, key_max_pending), queued or owed a key_space_cb: such tasks
 * are filed under their keys as they are accepted (bound.c counts them in)
 * and counted there. Intake moves tasks from the inbox only as far as
 * lanes need.
 *
 * Barriers: a barrier joins kready's tail and stays its last (tasks that
 * join kready later go ahead of it: they came before it); intake stops
 * behind it, and tasks filed behind it (per-key bounds) wait on held. A
 * lane picks it once it heads kready and no lane holds a batch, so it
 * runs alone after everything before it; when its batch ends, what
 * waited goes on.
 *
 * Everything here needs the scheduler's lock, except uvs__keys_started.
 */

#include "keytab.h"


/* ---- the key table ----------------------------------------------------- */


uvs__lane_t* uvs__keys_lane(uvs_worker_t* w, unsigned i) {
  return &w->keys->lanes[i];
}


uvs__kent_t* uvs__kt_lookup(uvs__keys_t* k, uint64_t key) {
  uvs__kent_t* e;

  for (e = k->buckets[uvs__kt_bucket(k, key)]; e != NULL; e = e->next)
    if (e->key == key)
      return e;
  return NULL;
}


uvs__kent_t* uvs__kt_new(uvs__keys_t* k, uint64_t key) {
  uvs__kent_t* e;

  if (k->free == NULL && uvs__kt_more(k) != 0)
    return NULL;
  e = k->free;
  k->free = e->next;
  e->key = key;
  e->head = NULL;
  e->taken = 0;
  e->queued = 0;
  e->full = 0;
  e->owed = 0;
  e->filing = 0;
  e->doomed = 0;
  uvs__queue_init(&e->q);
  e->next = k->buckets[uvs__kt_bucket(k, key)];
  k->buckets[uvs__kt_bucket(k, key)] = e;
  /* More entries than buckets: double them, so that a lookup walks
   * about one entry (without memory, chains just grow longer). */
  if (++k->count > k->nbuckets)
    uvs__kt_grow(k);
  return e;
}


static void ent_del(uvs__keys_t* k, uvs__kent_t* e) {
  uvs__kent_t** p;

  for (p = &k->buckets[uvs__kt_bucket(k, e->key)]; *p != e; p = &(*p)->next)
    ;
  *p = e->next;
  e->next = k->free;
  k->free = e;
  /* No key active: what grew past the worker's block goes. */
  if (--k->count == 0 && (k->extra != NULL || k->buckets != k->small))
    uvs__kt_shrink(k);
}


void uvs__kt_maybe_del(uvs__keys_t* k, uvs__kent_t* e) {
  if (e->head == NULL && uvs__queue_empty(&e->q) &&
      __atomic_load_n(&e->queued, __ATOMIC_RELAXED) == 0 && !e->owed &&
      e->filing == 0)
    ent_del(k, e);
}


/* ---- the keyed queue --------------------------------------------------- */


/* With key_max_pending (lock held): e's count fell. Room for the blocked
 * producers once it is at the key's refill mark, and key_space_cb owed
 * once a full key falls to half its bound. e->queued and e->full are atomics: a
 * lane counts out the tasks of a key's run as they start, without the lock
 * (uvs__keys_started). */
void uvs__keys_counted_out(uvs_worker_t* w, uvs__kent_t* e) {
  uvs__keys_t* k;
  size_t queued;

  k = w->keys;
  queued = __atomic_load_n(&e->queued, __ATOMIC_SEQ_CST);
  if (queued <= uvs__refill_mark(w->key_max))
    k->news |= UVS__KEYS_ROOM;
  if (__atomic_load_n(&e->full, __ATOMIC_SEQ_CST) && queued <= w->key_max / 2) {
    __atomic_store_n(&e->full, 0, __ATOMIC_SEQ_CST);
    if (w->key_space_cb != NULL && !e->owed && !(w->flags & UVS__WF_CLOSING)) {
      e->owed = 1;
      uvs__queue_push(&k->owed, &e->owed_node);
      k->news |= UVS__KEYS_OWED;
    }
  }
}


/* With key_max_pending, one of e's queued tasks left the queue (lock
 * held). */
static void count_out(uvs_worker_t* w, uvs__kent_t* e) {
  if (w->key_max == 0)
    return;
  __atomic_fetch_sub(&e->queued, 1, __ATOMIC_SEQ_CST);
  uvs__keys_counted_out(w, e);
}


int uvs__keys_started(uvs_worker_t* w, uvs__kent_t* e) {
  /* seq_cst, against a producer that marks the key full and then looks at
   * the count again, and one that waits for room (bound.c): either it sees
   * this task out, or this sees its mark. */
  size_t queued;

  queued = __atomic_sub_fetch(&e->queued, 1, __ATOMIC_SEQ_CST);
  return __atomic_load_n(&e->full, __ATOMIC_SEQ_CST) ||
         (__atomic_load_n(&w->nwaiters, __ATOMIC_SEQ_CST) != 0 &&
          queued <= uvs__refill_mark(w->key_max));
}


/* kready, counted: a task in it is marked so (uvs__task_set_kready), so
 * that a cancel that unlinks it knows to count it out, and intake's window
 * never shrinks under tasks cancelled from it. */
static void ready_push(uvs_worker_t* w, uvs_task_t* t) {
  uvs_task_t* b;

  /* A barrier waiting in kready stays its last: what joins now (the next
   * task of a key, which came before it) goes ahead of it. */
  b = w->keys->barrier;
  if (b != NULL && w->keys->fence_lane == NULL && b != t)
    uvs__queue_push(&b->node, &t->node);
  else
    uvs__queue_push(&w->kready, &t->node);
  uvs__task_set_kready(t, &w->kready);
  w->keys->nready++;
}


static void ready_unshift(uvs_worker_t* w, uvs_task_t* t) {
  uvs__queue_unshift(&w->kready, &t->node);
  uvs__task_set_kready(t, &w->kready);
  w->keys->nready++;
}


/* t left kready (lock held): counted out. */
static void ready_taken(uvs_worker_t* w, uvs_task_t* t) {
  uvs__task_set_kready(t, NULL);
  w->keys->nready--;
}


/* The task its key runs next. The head keeps its entry
 * (uvs__task_set_kent), so that a lane finds it without a lookup. */
static void set_head(uvs__kent_t* e, uvs_task_t* t) {
  e->head = t;
  e->taken = 0;
  uvs__task_set_kent(t, e);
}


int uvs__keys_want(uvs_worker_t* w) {
  /* With many keys in the queue, the table stays about INTAKE_AHEAD
   * entries and in cache, instead of one entry per key queued, each a
   * cache miss to find. What comes after a barrier waits in the inbox. */
  return w->keys->nready < INTAKE_AHEAD && w->keys->barrier == NULL;
}


int uvs__keys_take_in(uvs_worker_t* w, uvs_task_t* t) {
  uvs__keys_t* k;
  uvs__kent_t* e;

  k = w->keys;
  if (uvs__task_key(t) == 0) {
    if (__atomic_load_n(&t->state, __ATOMIC_RELAXED) & UVS__T_BARRIER)
      k->barrier = t;
    ready_push(w, t);
    return uvs__keys_want(w);
  }
  e = uvs__kt_lookup(k, t->key);
  if (e == NULL && (e = uvs__kt_new(k, t->key)) == NULL)
    return UV_ENOMEM;
  /* Per-key bounds: a task queued past its key's count counts in now that
   * it is filed under its key, so that it counts out once. */
  if (__atomic_load_n(&t->state, __ATOMIC_RELAXED) & UVS__T_UNCOUNTED) {
    uvs__task_update(t, UVS__T_UNCOUNTED, 0);
    __atomic_fetch_add(&e->queued, 1, __ATOMIC_SEQ_CST);
  }
  if (e->head != NULL) {
    uvs__queue_push(&e->q, &t->node);
    return 1;
  }
  set_head(e, t);
  ready_push(w, t);
  return uvs__keys_want(w);
}


/* Has every task that came before w's barrier returned or gone? It is
 * kready's last, so once it is its head nothing earlier waits there or
 * behind a key (a key's waiting tasks sit behind a head in kready or in a
 * batch); none runs once no lane holds a batch. Lock held. */
static int fence_clear(uvs_worker_t* w) {
  unsigned i;

  if (w->kready.next != &w->keys->barrier->node)
    return 0;
  for (i = 0; i < w->width; i++)
    if (w->keys->lanes[i].batch != NULL)
      return 0;
  return 1;
}


uvs_task_t* uvs__keys_pick(uvs_worker_t* w, uvs__lane_t* lane) {
  uvs__kent_t* e;
  uvs_task_t* t;

  lane->kent = NULL;
  if (uvs__queue_empty(&w->kready))
    return NULL;
  t = uvs__container_of(w->kready.next, uvs_task_t, node);
  if (t == w->keys->barrier) {
    if (!fence_clear(w))
      return NULL; /* the lane that ends the last earlier batch picks it */
    w->keys->fence_lane = lane;
  }
  uvs__queue_remove(&t->node);
  ready_taken(w, t);
  if (uvs__task_key(t) != 0) {
    e = uvs__task_kent(t);
    e->taken = 1;
    count_out(w, e);
    lane->kent = e;
  }
  return t;
}


void uvs__keys_unpick(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (uvs__task_key(t) != 0) {
    e = uvs__kt_lookup(w->keys, t->key);
    if (e->head != t) {
      uvs__queue_unshift(&e->q, &t->node); /* from a key's run */
      return;
    }
    e->taken = 0;
    if (w->key_max != 0) /* back in the queue: counted again */
      __atomic_fetch_add(&e->queued, 1, __ATOMIC_SEQ_CST);
  }
  ready_unshift(w, t);
}


void uvs__keys_requeue(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (uvs__task_key(t) == 0) {
    ready_unshift(w, t); /* it keeps its place in the worker's order */
    return;
  }
  /* Its key is its lane's, held until the batch ends: then release()
   * makes it the key's next, at kready's tail. Queued: counted again. */
  e = uvs__kt_lookup(w->keys, t->key);
  if (w->key_max != 0)
    __atomic_fetch_add(&e->queued, 1, __ATOMIC_SEQ_CST);
  uvs__queue_unshift(&e->q, &t->node);
}


uvs_task_t* uvs__keys_next_of(uvs__kent_t* e) {
  uvs__queue_t* q;

  q = uvs__queue_shift(&e->q);
  return q != NULL ? uvs__container_of(q, uvs_task_t, node) : NULL;
}


static void release(uvs_worker_t* w, uvs__kent_t* e) {
  uvs__queue_t* q;

  q = uvs__queue_shift(&e->q);
  if (q == NULL) {
    e->head = NULL;
    e->taken = 0;
    uvs__kt_maybe_del(w->keys, e);
    return;
  }
  set_head(e, uvs__container_of(q, uvs_task_t, node));
  ready_push(w, e->head);
}


/* w's barrier ran, or left unrun: what waited behind it goes on. Tasks
 * filed meanwhile (per-key bounds) are filed now, in order, as far as the
 * next barrier; intake takes the inbox in again. The caller asks for
 * lanes for what may start now (worker.c, the hand-off), as a
 * producer's push would. Lock held. */
static void fence_done(uvs_worker_t* w) {
  uvs__queue_t held;
  uvs__queue_t* q;

  w->keys->barrier = NULL;
  w->keys->fence_lane = NULL;
  uvs__queue_init(&held);
  uvs__queue_move(&w->keys->held, &held);
  while ((q = uvs__queue_shift(&held)) != NULL)
    uvs__keys_file(w, uvs__container_of(q, uvs_task_t, node));
}


int uvs__keys_batch_done(uvs_worker_t* w, uvs__lane_t* lane) {
  if (lane->kent != NULL) {
    release(w, lane->kent);
  } else if (w->keys->fence_lane == lane) {
    fence_done(w);
    return 1;
  }
  return 0;
}


int uvs__keys_unlinked(uvs_worker_t* w, uvs_task_t* t, int from_slot) {
  uvs__kent_t* e;
  int lifted;

  if (uvs__task_in_kready(t, &w->kready))
    ready_taken(w, t); /* a cancel unlinked it from kready */
  /* A barrier taken out of kready; one a lane picked is the lane's to
   * end (uvs__keys_batch_done). */
  lifted = t == w->keys->barrier && w->keys->fence_lane == NULL;
  if (lifted)
    fence_done(w);
  if (uvs__task_key(t) == 0)
    return lifted;
  /* The key's next task leaves kready. A head a lane took (and the rest
   * of its key's run) is the lane's to release when its batch ends, even
   * when a cancel tombstoned it (its link tagged with the slot) or the
   * same task, scheduled again from its run_cb or done_cb, is what leaves
   * now from behind it. */
  e = uvs__kt_lookup(w->keys, t->key);
  if (e == NULL)
    return lifted;
  /* A picked head was counted out when it was picked; the rest of its
   * key's run, in the lane's slots, counts out as each starts or leaves.
   * One queued past its key's count and not taken in was never in it. The
   * picked head is the one that leaves a slot: the same task scheduled
   * again (from its run_cb, or after its done_cb before the lane's batch
   * ended) or yielded is also its key's head, and queued behind itself it
   * counts like any other queued task. */
  if (!(from_slot && e->head == t && e->taken) &&
      !(__atomic_load_n(&t->state, __ATOMIC_RELAXED) & UVS__T_UNCOUNTED))
    count_out(w, e);
  if (e->head == t && !e->taken)
    release(w, e);
  else
    uvs__kt_maybe_del(w->keys, e);
  return lifted;
}


uvs_task_t* uvs__keys_oldest(uvs_worker_t* w) {
  uvs__kent_t* e;
  size_t i;

  if (!uvs__queue_empty(&w->kready))
    return uvs__container_of(w->kready.next, uvs_task_t, node);
  /* Tasks waiting behind a running one of their key. */
  for (i = 0; i < w->keys->nbuckets; i++)
    for (e = w->keys->buckets[i]; e != NULL; e = e->next)
      if (!uvs__queue_empty(&e->q))
        return uvs__container_of(e->q.next, uvs_task_t, node);
  /* Tasks filed behind a barrier that a lane runs. */
  if (!uvs__queue_empty(&w->keys->held))
    return uvs__container_of(w->keys->held.next, uvs_task_t, node);
  return NULL;
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
    if (k->barrier == NULL || q != &k->barrier->node || fence_clear(w))
      n++; /* a barrier wants a lane once it may start */
  return n > k->seeking ? n - k->seeking : 0;
}


void uvs__keys_seeking(uvs_worker_t* w, int delta) {
  w->keys->seeking += (unsigned) delta;
}


/* The oldest task of the key's run that the lane holding it has not
 * started, or NULL. The head, picked, counts as started. */
static uvs_task_t* oldest_in_run(uvs_worker_t* w, uvs__kent_t* e) {
  uvs__lane_t* lane;
  uvs_task_t* t;
  unsigned i;
  unsigned j;

  for (i = 0; i < w->width; i++) {
    lane = uvs__keys_lane(w, i);
    if (!lane->active || lane->kent != e || lane->batch == NULL)
      continue;
    for (j = 1; j < lane->batch_len; j++)
      if ((t = uvs__slot_task(&lane->batch[j])) != NULL)
        return t;
    return NULL;
  }
  return NULL;
}


uvs_task_t* uvs__keys_oldest_of(uvs_worker_t* w, uvs__kent_t* e) {
  uvs__queue_t* q;
  uvs_task_t* t;

  if (e->taken && (t = oldest_in_run(w, e)) != NULL)
    return t;
  if (e->head != NULL && !e->taken)
    return e->head;
  if (!uvs__queue_empty(&e->q))
    return uvs__container_of(e->q.next, uvs_task_t, node);
  /* Filed behind a barrier, the key's tasks wait on held (the newest). */
  for (q = w->keys->held.next; q != &w->keys->held; q = q->next) {
    t = uvs__container_of(q, uvs_task_t, node);
    if (uvs__task_key(t) == e->key)
      return t;
  }
  return NULL;
}


void uvs__keys_file(uvs_worker_t* w, uvs_task_t* t) {
  uvs__kent_t* e;

  if (w->keys->barrier != NULL) {
    uvs__queue_push(&w->keys->held, &t->node); /* after the barrier */
    return;
  }
  if (__atomic_load_n(&t->state, __ATOMIC_RELAXED) & UVS__T_BARRIER)
    w->keys->barrier = t;
  if (uvs__task_key(t) != 0) {
    e = uvs__kt_lookup(w->keys, t->key);
    if (e->head != NULL) {
      uvs__queue_push(&e->q, &t->node);
      return;
    }
    set_head(e, t);
  }
  ready_push(w, t);
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
  uvs__kt_maybe_del(w->keys, e);
  return 1;
}
