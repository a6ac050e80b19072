/* The baselines uvsched is measured against, built the plain way a libuv
 * program would without it: raw uv_queue_work, a naive ordered worker, and
 * a mutex-protected list bridged to the loop with uv_async_send. Timers are
 * libuv's own uv_timer_t and need nothing here.
 */

#include "bench.h"

#include <stdlib.h>


void bench_ntask_run(bench_node_t* node) {
  bench_ntask_t* t;

  t = (bench_ntask_t*) node;
  bench_lane_hit(t->lane, t->seq);
}


/* ---- raw uv_queue_work -------------------------------------------------- */

static void raw_work(uv_work_t* req) {
  bench_raw_ctx_t* ctx;
  bench_raw_t* r;

  ctx = req->data;
  r = (bench_raw_t*) req;
  /* Distinct tasks touch distinct bytes: no race between pool threads. */
  ctx->hits[r->idx]++;
  bench_count_hit(ctx->count);
}


void bench_raw_submit(uv_loop_t* loop, bench_raw_ctx_t* ctx, bench_raw_t* r) {
  r->req.data = ctx;
  /* No after_work_cb: the lightest use of the API there is. */
  if (uv_queue_work(loop, &r->req, raw_work, NULL) != 0)
    abort();
}


/* ---- the naive ordered worker ------------------------------------------- */

static void naive_post(bench_naive_t* q);


static void naive_drain(uv_work_t* req) {
  bench_naive_t* q;
  bench_node_t* n;

  q = (bench_naive_t*) ((char*) req - offsetof(bench_naive_t, work));
  for (;;) {
    uv_mutex_lock(&q->lock);
    n = q->head;
    if (n != NULL) {
      q->head = n->next;
      if (q->head == NULL)
        q->tail = &q->head;
    }
    uv_mutex_unlock(&q->lock);
    if (n == NULL)
      break;
    n->run(n);
  }
}


static void naive_after(uv_work_t* req, int status) {
  bench_naive_t* q;
  int again;

  (void) status;
  q = (bench_naive_t*) ((char*) req - offsetof(bench_naive_t, work));
  /* The drain stays "in progress" until here, because its uv_work_t can't
   * be posted again before this callback: work that arrived after the
   * drain saw an empty FIFO is picked up now. */
  uv_mutex_lock(&q->lock);
  again = q->head != NULL;
  if (!again)
    q->busy = 0;
  uv_mutex_unlock(&q->lock);
  if (again)
    naive_post(q);
}


static void naive_post(bench_naive_t* q) {
  q->posts++;
  if (uv_queue_work(q->loop, &q->work, naive_drain, naive_after) != 0)
    abort();
}


static void naive_async(uv_async_t* handle) {
  bench_naive_t* q;
  unsigned pending;

  q = handle->data;
  uv_mutex_lock(&q->lock);
  pending = q->post_pending;
  q->post_pending = 0;
  uv_mutex_unlock(&q->lock);
  if (pending != 0) {
    q->wakeups++;
    naive_post(q);
  }
}


int bench_naive_init(uv_loop_t* loop, bench_naive_t* q) {
  int err;

  q->head = NULL;
  q->tail = &q->head;
  q->busy = 0;
  q->post_pending = 0;
  q->loop = loop;
  q->loop_thread = uv_thread_self();
  q->posts = 0;
  q->wakeups = 0;
  err = uv_mutex_init(&q->lock);
  if (err != 0)
    return err;
  err = uv_async_init(loop, &q->async, naive_async);
  if (err != 0) {
    uv_mutex_destroy(&q->lock);
    return err;
  }
  q->async.data = q;
  /* Work in flight keeps the loop alive through its uv_work_t. */
  uv_unref((uv_handle_t*) &q->async);
  return 0;
}


void bench_naive_push(bench_naive_t* q, bench_node_t* node) {
  uv_thread_t self;
  int on_loop;
  int post;

  self = uv_thread_self();
  on_loop = uv_thread_equal(&self, &q->loop_thread);
  node->next = NULL;
  uv_mutex_lock(&q->lock);
  *q->tail = node;
  q->tail = &node->next;
  post = !q->busy;
  q->busy = 1;
  if (post && !on_loop)
    q->post_pending = 1;
  uv_mutex_unlock(&q->lock);
  if (!post)
    return;
  /* uv_queue_work is for the loop thread only; other threads go through
   * the async handle, whose callback posts the drain. */
  if (on_loop)
    naive_post(q);
  else
    uv_async_send(&q->async);
}


void bench_naive_close(bench_naive_t* q) {
  /* Called once no producer is left, so no send can race the close. */
  uv_close((uv_handle_t*) &q->async, NULL);
  uv_mutex_destroy(&q->lock);
}


/* ---- the mutex + uv_async_send bridge ----------------------------------- */

static void bridge_async(uv_async_t* handle) {
  bench_bridge_t* b;
  bench_node_t* n;
  bench_node_t* next;

  b = handle->data;
  uv_mutex_lock(&b->lock);
  n = b->head;
  b->head = NULL;
  b->tail = &b->head;
  uv_mutex_unlock(&b->lock);
  if (n != NULL)
    b->wakeups++;
  for (; n != NULL; n = next) {
    next = n->next;
    n->run(n);
  }
}


int bench_bridge_init(uv_loop_t* loop, bench_bridge_t* b) {
  int err;

  b->head = NULL;
  b->tail = &b->head;
  b->wakeups = 0;
  err = uv_mutex_init(&b->lock);
  if (err != 0)
    return err;
  err = uv_async_init(loop, &b->async, bridge_async);
  if (err != 0) {
    uv_mutex_destroy(&b->lock);
    return err;
  }
  b->async.data = b;
  uv_unref((uv_handle_t*) &b->async);
  return 0;
}


void bench_bridge_push(bench_bridge_t* b, bench_node_t* node) {
  node->next = NULL;
  uv_mutex_lock(&b->lock);
  *b->tail = node;
  b->tail = &node->next;
  uv_mutex_unlock(&b->lock);
  uv_async_send(&b->async);
}


void bench_bridge_close(bench_bridge_t* b) {
  uv_close((uv_handle_t*) &b->async, NULL);
  uv_mutex_destroy(&b->lock);
}
