/* uvs_post: fire-and-forget tasks in library-owned nodes (postpool.c). */

#include "internal.h"


int uvs_post(uvs_worker_t* w, void (*fn)(void* arg), void* arg) {
  uvs_sched_t* s;
  uvs_task_t* node;
  int pinned;
  int err;

  if (w == NULL || fn == NULL)
    return UV_EINVAL;
  err = uvs__worker_pin(w, &pinned);
  if (err != 0)
    return err;
  s = w->sched;
  /* As for uvs_schedule: a close that starts after this check sweeps the
   * node up like any task that arrived late. */
  err = UV_ESHUTDOWN;
  if (!uvs__shut(s, w)) {
    err = UV_ENOMEM;
    node = uvs__post_node(s, pinned, fn, arg);
    if (node != NULL) {
      err = uvs__schedule_node(w, node);
      if (err != 0) {
        /* A bounded worker was full: the node goes back unused. */
        uv_mutex_lock(&s->lock);
        uvs__post_release(s, node);
        uv_mutex_unlock(&s->lock);
      }
    }
  }
  uvs__worker_unpin(w, pinned);
  return err;
}
