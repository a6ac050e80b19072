/* uvs_post: fire-and-forget tasks in library-owned nodes.
 *
 * Nodes come from a per-scheduler free list that grows a chunk at a time
 * and is recycled after each run, so the steady state allocates nothing.
 * Chunks are freed when the scheduler closes. The free list is under the
 * scheduler's lock; the loop thread keeps a list of its own, refilled a
 * chunk's worth at a time.
 */

#include "internal.h"

#define UVS__POST_CHUNK 64

typedef struct post_node_s post_node_t;
typedef struct post_chunk_s post_chunk_t;

struct post_node_s {
  uvs_task_t task;
  void (*fn)(void* arg);
  void* arg;
  post_node_t* next_free;
};

struct post_chunk_s {
  post_chunk_t* next;
  post_node_t nodes[UVS__POST_CHUNK];
};


static void post_run(uvs_task_t* task) {
  post_node_t* node;

  node = uvs__container_of(task, post_node_t, task);
  node->fn(node->arg);
}


/* Lock held: a node from the shared free list, growing it if empty. */
static post_node_t* node_get(uvs_sched_t* s) {
  post_chunk_t* chunk;
  post_node_t* node;
  unsigned i;

  if (s->post_free == NULL) {
    chunk = uvs__malloc(sizeof(*chunk));
    if (chunk == NULL)
      return NULL;
    chunk->next = s->post_chunks;
    s->post_chunks = chunk;
    for (i = 0; i < UVS__POST_CHUNK; i++) {
      chunk->nodes[i].next_free = s->post_free;
      s->post_free = &chunk->nodes[i];
    }
  }
  node = s->post_free;
  s->post_free = node->next_free;
  return node;
}


/* Loop thread, no lock held: a node from the loop thread's own list, which
 * takes up to a chunk's worth from the shared one at a time, so that posts
 * from the loop take the lock once per UVS__POST_CHUNK. */
static post_node_t* node_get_local(uvs_sched_t* s) {
  post_node_t* first;
  post_node_t* last;
  unsigned i;

  first = s->post_local;
  if (first != NULL) {
    s->post_local = first->next_free;
    return first;
  }
  uv_mutex_lock(&s->lock);
  first = node_get(s);
  if (first != NULL) {
    /* More of the shared list, up to a chunk, comes along. */
    last = first;
    for (i = 1; i < UVS__POST_CHUNK && s->post_free != NULL; i++) {
      last->next_free = s->post_free;
      last = last->next_free;
      s->post_free = last->next_free;
    }
    last->next_free = NULL;
    s->post_local = first->next_free;
  }
  uv_mutex_unlock(&s->lock);
  return first;
}


void uvs__post_release(uvs_sched_t* s, uvs_task_t* task) {
  post_node_t* node;

  node = uvs__container_of(task, post_node_t, task);
  node->next_free = s->post_free;
  s->post_free = node;
}


void uvs__post_free_all(uvs_sched_t* s) {
  post_chunk_t* chunk;

  while ((chunk = s->post_chunks) != NULL) {
    s->post_chunks = chunk->next;
    uvs__free(chunk);
  }
  s->post_free = NULL;
  s->post_local = NULL;
}


int uvs_post(uvs_worker_t* w, void (*fn)(void* arg), void* arg) {
  uvs_sched_t* s;
  post_node_t* node;
  int foreign;
  int err;

  if (w == NULL || fn == NULL)
    return UV_EINVAL;
  if (uvs__worker_pin(w, &foreign) != 0)
    return UV_ESHUTDOWN;
  s = w->sched;
  /* As for uvs_schedule: a close that starts after this check sweeps the
   * node up like any task that arrived late. */
  if (uvs__shut(s, w)) {
    err = UV_ESHUTDOWN;
  } else {
    if (foreign) {
      uv_mutex_lock(&s->lock);
      node = node_get(s);
      uv_mutex_unlock(&s->lock);
    } else {
      node = node_get_local(s);
    }
    err = UV_ENOMEM;
    if (node != NULL) {
      node->fn = fn;
      node->arg = arg;
      /* What accept_now() doesn't set; the links it sets itself. */
      node->task.run_cb = post_run;
      node->task.done_cb = NULL;
      err = uvs__schedule_node(w, &node->task);
      if (err != 0) {
        /* A bounded worker was full: the node goes back unused. */
        uv_mutex_lock(&s->lock);
        uvs__post_release(s, &node->task);
        uv_mutex_unlock(&s->lock);
      }
    }
  }
  if (foreign)
    uvs__worker_leave(w);
  return err;
}
