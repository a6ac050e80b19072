/* The pool of uvs_post's library-owned nodes.
 *
 * Nodes come from a per-scheduler free list that grows a chunk at a time
 * and is recycled after each run, so the steady state allocates nothing.
 * Chunks are freed when the scheduler closes. The free list is under the
 * scheduler's lock; the loop thread keeps a list of its own, and so does
 * each other thread that posts (by its hazard slot, up to
 * UVS__POST_CACHES of them), refilled a chunk's worth at a time: a post
 * takes the lock once per chunk.
 */

#include "internal.h"

#include <string.h>

#define UVS__POST_CHUNK 64
/* Threads other than the loop's with a node list of their own: those whose
 * hazard slot is among the first UVS__POST_CACHES. Others take the lock
 * per post (correct, slower); a program rarely has more threads than this
 * posting at once. */
#define UVS__POST_CACHES 128

typedef struct post_node_s post_node_t;
typedef struct post_chunk_s post_chunk_t;

struct post_node_s {
  uvs_task_t task;
  void (*fn)(void* arg);
  void* arg;
};

/* While a node is free its task's links, unused then, hold the free list:
 * node.next the next free node, and in the first node of a chain on the
 * shared list node.prev the next chain, tnode.next the chain's last node
 * and due its length. A node is 112 bytes, not two cache lines and a
 * quarter. */
static inline post_node_t* to_node(uvs__queue_t* q) {
  return q == NULL ? NULL : uvs__container_of(q, post_node_t, task.node);
}

static inline uvs__queue_t* to_link(post_node_t* n) {
  return n == NULL ? NULL : &n->task.node;
}

#define NEXT_FREE(n) to_node((n)->task.node.next)
#define SET_NEXT_FREE(n, v) ((n)->task.node.next = to_link(v))
#define NEXT_CHAIN(n) to_node((n)->task.node.prev)
#define SET_NEXT_CHAIN(n, v) ((n)->task.node.prev = to_link(v))
#define CHAIN_TAIL(n) to_node((n)->task.tnode.next)
#define SET_CHAIN_TAIL(n, v) ((n)->task.tnode.next = to_link(v))
#define CHAIN_LEN(n) ((n)->task.due)

struct post_chunk_s {
  post_chunk_t* next;
  post_node_t nodes[UVS__POST_CHUNK];
};


static void post_run(uvs_task_t* task) {
  post_node_t* node;

  node = uvs__container_of(task, post_node_t, task);
  node->fn(node->arg);
}


/* The shared free list is a FIFO of chains: what one drain's batch
 * released, or a new chunk. A thread's own list takes a whole chain at a
 * time without walking it, so the lock is held for a few stores. Chains
 * keep the order their nodes ran in and are taken in the order they were
 * released, so a burst of posts reuses the nodes of the last burst in the
 * order it used them: the memory is walked forwards, as for tasks in an
 * array, and the CPU's prefetcher keeps up. Lock held for all three
 * below. */
static void chain_push(uvs_sched_t* s,
                       post_node_t* head,
                       post_node_t* tail,
                       unsigned len) {
  SET_NEXT_CHAIN(head, NULL);
  SET_CHAIN_TAIL(head, tail);
  CHAIN_LEN(head) = len;
  if (s->post_free == NULL)
    s->post_free = head;
  else
    SET_NEXT_CHAIN((post_node_t*) s->post_free_last, head);
  s->post_free_last = head;
}


static int grow(uvs_sched_t* s) {
  post_chunk_t* chunk;
  unsigned i;

  chunk = uvs__malloc(sizeof(*chunk));
  if (chunk == NULL)
    return UV_ENOMEM;
  chunk->next = s->post_chunks;
  s->post_chunks = chunk;
  for (i = 0; i + 1 < UVS__POST_CHUNK; i++)
    SET_NEXT_FREE(&chunk->nodes[i], &chunk->nodes[i + 1]);
  SET_NEXT_FREE(&chunk->nodes[UVS__POST_CHUNK - 1], NULL);
  chain_push(s, &chunk->nodes[0], &chunk->nodes[UVS__POST_CHUNK - 1],
             UVS__POST_CHUNK);
  return 0;
}


/* Whole chains, joined through their links (NULL-terminated), until they hold
 * a chunk's worth: a drain that keeps up with its producer releases short
 * chains, and a producer that took one at a time would take the lock every
 * few posts. Grows the pool only if nothing is free; NULL without memory. */
static post_node_t* chains_pop(uvs_sched_t* s) {
  post_node_t* first;
  post_node_t* head;
  post_node_t* tail;
  unsigned n;

  if (s->post_free == NULL && grow(s) != 0)
    return NULL;
  first = s->post_free;
  tail = CHAIN_TAIL(first);
  n = (unsigned) CHAIN_LEN(first);
  s->post_free = NEXT_CHAIN(first);
  while (n < UVS__POST_CHUNK && (head = s->post_free) != NULL) {
    s->post_free = NEXT_CHAIN(head);
    SET_NEXT_FREE(tail, head);
    tail = CHAIN_TAIL(head);
    n += (unsigned) CHAIN_LEN(head);
  }
  SET_NEXT_FREE(tail, NULL);
  return first;
}


/* One node from the shared list. */
static post_node_t* node_get(uvs_sched_t* s) {
  post_node_t* head;
  post_node_t* rest;

  if (s->post_free == NULL && grow(s) != 0)
    return NULL;
  head = s->post_free;
  if (CHAIN_LEN(head) > 1) {
    rest = NEXT_FREE(head);
    SET_NEXT_CHAIN(rest, NEXT_CHAIN(head));
    SET_CHAIN_TAIL(rest, CHAIN_TAIL(head));
    CHAIN_LEN(rest) = CHAIN_LEN(head) - 1;
    s->post_free = rest;
    if (s->post_free_last == head)
      s->post_free_last = rest;
  } else {
    s->post_free = NEXT_CHAIN(head);
  }
  return head;
}


/* No lock held: a node from a list of the caller's own (*list), which
 * takes chains from the shared one when it runs dry, so that the caller
 * takes the lock about once per UVS__POST_CHUNK posts. */
static post_node_t* node_get_own(uvs_sched_t* s, void** list) {
  post_node_t* first;

  first = *list;
  if (first == NULL) {
    uv_mutex_lock(&s->lock);
    first = chains_pop(s);
    uv_mutex_unlock(&s->lock);
    if (first == NULL)
      return NULL;
  }
  *list = NEXT_FREE(first);
  return first;
}


void uvs__post_release(uvs_sched_t* s, uvs_task_t* task) {
  post_node_t* node;

  node = uvs__container_of(task, post_node_t, task);
  SET_NEXT_FREE(node, NULL);
  chain_push(s, node, node, 1);
}


void uvs__post_release_all(uvs_sched_t* s, uvs__queue_t* posts) {
  post_node_t* head;
  post_node_t* tail;
  post_node_t* node;
  uvs__queue_t* q;
  unsigned len;

  head = NULL;
  tail = NULL;
  len = 0;
  while ((q = uvs__queue_shift(posts)) != NULL) {
    node = uvs__container_of(q, post_node_t, task.node);
    if (head == NULL)
      head = node;
    else
      SET_NEXT_FREE(tail, node);
    tail = node;
    len++;
  }
  if (head != NULL) {
    SET_NEXT_FREE(tail, NULL);
    chain_push(s, head, tail, len);
  }
}


void uvs__post_free_all(uvs_sched_t* s) {
  post_chunk_t* chunk;

  while ((chunk = s->post_chunks) != NULL) {
    s->post_chunks = chunk->next;
    uvs__free(chunk);
  }
  s->post_free = NULL;
  s->post_free_last = NULL;
  s->post_local = NULL;
  uvs__free(s->post_cache);
  s->post_cache = NULL;
}


int uvs__post_init(uvs_sched_t* s) {
  s->post_cache = uvs__calloc(UVS__POST_CACHES, sizeof(*s->post_cache));
  return s->post_cache == NULL ? UV_ENOMEM : 0;
}


uvs_task_t* uvs__post_node(uvs_sched_t* s,
                           int pinned,
                           void (*fn)(void* arg),
                           void* arg) {
  post_node_t* node;
  int slot;

  slot = pinned == UVS__PIN_SLOT ? uvs__hazard_index() : -1;
  if (pinned == UVS__PIN_NONE) {
    node = node_get_own(s, &s->post_local);
  } else if (slot >= 0 && slot < UVS__POST_CACHES) {
    /* The slot is this thread's while it lives, and the worker it pins
     * keeps the scheduler, and so its nodes, alive. */
    node = node_get_own(s, &s->post_cache[slot]);
  } else {
    uv_mutex_lock(&s->lock);
    node = node_get(s);
    uv_mutex_unlock(&s->lock);
  }
  if (node == NULL)
    return NULL;
  node->fn = fn;
  node->arg = arg;
  /* Everything accept_now() doesn't set, as uvs_task_init() would: a new
   * chunk's memory is malloc's. A post has no key (on a wide worker it is
   * ordered by its start only) and no expiry of its own (the top of its
   * period, which accept_now() keeps: shedding reads it); its state says
   * claimed, as a task's does on its way in, since admission reads it
   * (uvs__task_key); and it is in no keyed queue, which a close's sweep
   * asks (keys.c). */
  node->task.run_cb = post_run;
  node->task.done_cb = NULL;
  node->task.key = 0;
  node->task.period = 0;
  __atomic_store_n(&node->task.state, UVS__T_CLAIMED, __ATOMIC_RELAXED);
  uvs__task_set_kready(&node->task, NULL);
  uvs__task_set_kent(&node->task, NULL);
  return &node->task;
}
