/* uvs_post: fire-and-forget tasks in library-owned nodes.
 *
 * Nodes come from a per-scheduler free list that grows a chunk at a time
 * and is recycled after each run, so the steady state allocates nothing.
 * Chunks are freed when the scheduler closes. All of it is under the
 * scheduler's lock.
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
  uv_mutex_lock(&s->lock);
  if ((w->flags & UVS__W_CLOSING) ||
      uvs__load_relaxed(&s->state) != UVS__S_OPEN)
    err = UV_ESHUTDOWN;
  else if ((node = node_get(s)) == NULL)
    err = UV_ENOMEM;
  else
    err = 0;
  uv_mutex_unlock(&s->lock);
  if (err == 0) {
    node->fn = fn;
    node->arg = arg;
    uvs_task_init(&node->task, post_run, NULL);
    err = uvs__schedule_node(w, &node->task);
  }
  if (foreign)
    uvs__worker_leave(w);
  return err;
}
