#include "task.h"

#include <stdatomic.h>

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t pool_w;
static uvs_worker_t loop_w;
static uv_thread_t loop_thread;
static atomic_int fn_calls;
static int seq[4096];
static atomic_int nseq;
static int done_calls;


static void setup(const uvs_sched_options_t* opts) {
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, opts));
  ASSERT_OK(uvs_worker_init(&sched, &pool_w, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &loop_w, UVS_LOOP));
}


static void record_fn(void* arg) {
  seq[atomic_fetch_add(&nseq, 1)] = (int) (intptr_t) arg;
  atomic_fetch_add(&fn_calls, 1);
}


static void pool_fn(void* arg) {
  ASSERT(!test_on_thread(loop_thread));
  ASSERT_PTR_EQ(arg, &pool_w);
  atomic_fetch_add(&fn_calls, 1);
}


static void loop_fn(void* arg) {
  ASSERT(test_on_thread(loop_thread));
  ASSERT_PTR_EQ(arg, &loop_w);
  atomic_fetch_add(&fn_calls, 1);
}


TEST_IMPL(post_runs_fn_with_arg) {
  int i;

  setup(NULL);
  for (i = 0; i < 10; i++) {
    ASSERT_OK(uvs_post(&pool_w, pool_fn, &pool_w));
    ASSERT_OK(uvs_post(&loop_w, loop_fn, &loop_w));
  }
  /* Not run inside the call. */
  ASSERT_EQ(atomic_load(&fn_calls), 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&fn_calls), 20);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Posts and tasks of one worker run in one FIFO. */
static void record_run_cb(uvs_task_t* task) {
  record_fn(task->data);
}


static void count_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  done_calls++;
}


static void order_with_tasks(uvs_worker_t* w) {
  uvs_task_t tasks[100];
  int i;

  for (i = 0; i < 200; i++) {
    if (i & 1) {
      ASSERT_OK(uvs_task_init(&tasks[i / 2], record_run_cb, count_done_cb));
      tasks[i / 2].data = (void*) (intptr_t) i;
      ASSERT_OK(uvs_schedule(w, &tasks[i / 2]));
    } else {
      ASSERT_OK(uvs_post(w, record_fn, (void*) (intptr_t) i));
    }
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nseq), 200);
  ASSERT_EQ(done_calls, 100);
  for (i = 0; i < 200; i++) ASSERT_EQ(seq[i], i);
}


TEST_IMPL(post_order_with_tasks_pool) {
  setup(NULL);
  order_with_tasks(&pool_w);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(post_order_with_tasks_loop) {
  setup(NULL);
  order_with_tasks(&loop_w);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Many posts from the loop thread before the loop runs: the pool grows and
 * every one runs once, in order. */
TEST_IMPL(post_many) {
  int i;

  setup(NULL);
  for (i = 0; i < 4096; i++)
    ASSERT_OK(uvs_post(i < 2048 ? &loop_w : &pool_w, record_fn,
                       (void*) (intptr_t) i));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&fn_calls), 4096);
  /* Then again, reusing the nodes. */
  for (i = 0; i < 2048; i++)
    ASSERT_OK(uvs_post(&loop_w, record_fn, (void*) (intptr_t) i));
  atomic_store(&nseq, 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&fn_calls), 4096 + 2048);
  for (i = 0; i < 2048; i++) ASSERT_EQ(seq[i], i);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Posts dropped by a close are never called and count as cancelled; with
 * UVS_DRAIN they run. */
static uv_sem_t go;
static uv_async_t gate_async;
static uvs_close_how_t drop_how;
static int worker_close_calls;

static void gate_run_cb(uvs_task_t* task) {
  (void) task;
  uv_async_send(&gate_async);
  uv_sem_wait(&go);
}


static void w_close_cb(uvs_worker_t* w) {
  (void) w;
  worker_close_calls++;
}


static void gate_open_cb(uv_async_t* handle) {
  ASSERT_OK(uvs_worker_close(&pool_w, drop_how, w_close_cb));
  uv_sem_post(&go);
  uv_close((uv_handle_t*) handle, NULL);
}


static void dropped_on_close(uvs_close_how_t how) {
  uvs_task_t gate;
  uvs_stats_t st;
  int i;

  drop_how = how;
  ASSERT_OK(uv_sem_init(&go, 0));
  setup(NULL);
  ASSERT_OK(uv_async_init(&loop, &gate_async, gate_open_cb));
  ASSERT_OK(uvs_task_init(&gate, gate_run_cb, count_done_cb));
  ASSERT_OK(uvs_schedule(&pool_w, &gate));
  for (i = 0; i < 100; i++)
    ASSERT_OK(uvs_post(&pool_w, record_fn, (void*) (intptr_t) i));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(worker_close_calls, 1);
  ASSERT_EQ(done_calls, 1);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 101);
  ASSERT_UINT64_EQ(st.pending, 0);
  if (how == UVS_CANCEL) {
    ASSERT_EQ(atomic_load(&fn_calls), 0);
    ASSERT_UINT64_EQ(st.cancelled, 100);
    ASSERT_UINT64_EQ(st.ran, 1);
  } else {
    ASSERT_EQ(atomic_load(&fn_calls), 100);
    ASSERT_UINT64_EQ(st.cancelled, 0);
    ASSERT_UINT64_EQ(st.ran, 101);
  }
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
}


TEST_IMPL(post_dropped_on_close_cancel) {
  dropped_on_close(UVS_CANCEL);
  return 0;
}


TEST_IMPL(post_run_on_close_drain) {
  dropped_on_close(UVS_DRAIN);
  return 0;
}


/* Posts dropped by closing the scheduler: no leak (ASan), never called. */
TEST_IMPL(post_dropped_on_sched_close) {
  int i;

  setup(NULL);
  for (i = 0; i < 300; i++) ASSERT_OK(uvs_post(&loop_w, record_fn, NULL));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ASSERT_EQ(atomic_load(&fn_calls), 0);
  return 0;
}


/* Several producers post to one pool worker: per-producer order holds, and a
 * marker task per producer, scheduled after its posts, is done only after
 * all of them ran. */
#define NPROD 4
#define PER 1000

static int last[NPROD];
static int markers_done;
static uvs_task_t markers[NPROD];

static void prod_fn(void* arg) {
  int v;
  int p;

  v = (int) (intptr_t) arg;
  p = v / PER;
  ASSERT_EQ(v % PER, last[p] + 1);
  last[p] = v % PER;
}


static void marker_run_cb(uvs_task_t* task) {
  int p;

  p = (int) (task - markers);
  ASSERT_EQ(last[p], PER - 1);
}


static void marker_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  if (++markers_done == NPROD)
    ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


static void producer(void* arg) {
  int p;
  int i;

  p = (int) (intptr_t) arg;
  for (i = 0; i < PER; i++)
    ASSERT_OK(uvs_post(&pool_w, prod_fn, (void*) (intptr_t) (p * PER + i)));
  ASSERT_OK(uvs_schedule(&pool_w, &markers[p]));
}


TEST_IMPL(post_foreign_producers_order) {
  uvs_sched_options_t opts;
  uv_thread_t threads[NPROD];
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  setup(&opts);
  for (i = 0; i < NPROD; i++) {
    last[i] = -1;
    ASSERT_OK(uvs_task_init(&markers[i], marker_run_cb, marker_done_cb));
  }
  for (i = 0; i < NPROD; i++)
    ASSERT_OK(uv_thread_create(&threads[i], producer, (void*) (intptr_t) i));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < NPROD; i++) ASSERT_OK(uv_thread_join(&threads[i]));
  ASSERT_EQ(markers_done, NPROD);
  for (i = 0; i < NPROD; i++) ASSERT_EQ(last[i], PER - 1);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* uvs_post from inside a run_cb (pool and loop) and a done_cb: the posted
 * function runs after, on its worker's thread. */
static int cb_posts_done;

static void after_fn(void* arg) {
  uvs_worker_t* w;

  w = arg;
  if (w == &loop_w)
    ASSERT(test_on_thread(loop_thread));
  else
    ASSERT(!test_on_thread(loop_thread));
  atomic_fetch_add(&fn_calls, 1);
}


static void posting_run_cb(uvs_task_t* task) {
  uvs_worker_t* w;

  w = task->data;
  ASSERT_OK(uvs_post(w, after_fn, w));
  ASSERT_OK(uvs_post(w == &loop_w ? &pool_w : &loop_w, after_fn,
                     w == &loop_w ? &pool_w : &loop_w));
}


static void posting_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  ASSERT_OK(uvs_post(&pool_w, after_fn, &pool_w));
  cb_posts_done++;
}


TEST_IMPL(post_from_callbacks) {
  uvs_task_t a;
  uvs_task_t b;

  setup(NULL);
  ASSERT_OK(uvs_task_init(&a, posting_run_cb, posting_done_cb));
  ASSERT_OK(uvs_task_init(&b, posting_run_cb, posting_done_cb));
  a.data = &pool_w;
  b.data = &loop_w;
  ASSERT_OK(uvs_schedule(&pool_w, &a));
  ASSERT_OK(uvs_schedule(&loop_w, &b));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(cb_posts_done, 2);
  ASSERT_EQ(atomic_load(&fn_calls), 6);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A thread that posts from outside the loop keeps a list of free nodes of
 * the scheduler. The scheduler's close frees the nodes: the same thread
 * posting to a scheduler initialised anew in the same memory must not take
 * a node from its old list (ASan: a use after free; a list kept in the
 * thread rather than in the scheduler would), and its posts run. */
static uv_sem_t step;
static uv_sem_t stepped;
static atomic_int post_errs;

static void foreign_poster(void* arg) {
  int round;
  int i;

  (void) arg;
  for (round = 0; round < 2; round++) {
    uv_sem_wait(&step);
    for (i = 0; i < 100; i++)
      if (uvs_post(&pool_w, record_fn, (void*) (intptr_t) i) != 0)
        atomic_fetch_add(&post_errs, 1);
    uv_sem_post(&stepped);
  }
}


TEST_IMPL(post_foreign_cache_after_sched_close) {
  uv_thread_t thread;
  int round;

  ASSERT_OK(uv_sem_init(&step, 0));
  ASSERT_OK(uv_sem_init(&stepped, 0));
  ASSERT_OK(uv_thread_create(&thread, foreign_poster, NULL));
  for (round = 0; round < 2; round++) {
    setup(NULL);
    uv_sem_post(&step);
    uv_sem_wait(&stepped);
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(atomic_load(&fn_calls), 100 * (round + 1));
    /* Scrub the scheduler's memory between rounds, as a reuse would. */
    TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
    memset(&sched, 0xab, sizeof(sched));
  }
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(atomic_load(&post_errs), 0);
  uv_sem_destroy(&step);
  uv_sem_destroy(&stepped);
  return 0;
}
