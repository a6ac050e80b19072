/* Bugs found in released versions, each pinned by a test that fails
 * without its fix (issue 40, against 0.4):
 *
 * - uvs_worker_init_ex with a group index the scheduler does not have is
 *   UV_EINVAL while its scheduler closes and after it closed: UV_EINVAL
 *   wins over UV_ESHUTDOWN (SPEC, errors; 0.4, groups).
 * - A post onto a wide worker is admitted (with key_max_pending) and swept
 *   by a close (without) without reading memory that nothing set:
 *   scripts/check-valgrind.sh runs these tests under valgrind, which
 *   reports such a read (a new chunk's node).
 * - A per-key bound holds while an ACCEPTED hook runs with the lock let go:
 *   with DROP_OLDEST, a task accepted while the key's other tasks are all
 *   in hooks evicts one of them, and the key never holds more than
 *   key_max_pending queued tasks, whatever the order the calls end in.
 * - uvs_group_stats counts a suspended pool worker as ready no more from
 *   the moment uvs_worker_suspend returns ("ready and waiting for a
 *   drain"), serial or wide, and counts it again once it is resumed. */

#include "helpers.h"

#include <stdatomic.h>

#define MAXN 64
#define KEY 0x7000000000000007ull

typedef struct {
  uvs_task_t task;
  int block; /* its ACCEPTED hook waits until release counts this far */
  int status;
  int done_calls;
  atomic_int runs;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static item_t items[MAXN];
static int ndone;
static int nenobufs;
static atomic_int nruns;
static atomic_int post_runs;
static atomic_int accepted;
/* The hook's blocked ACCEPTED calls: count in, and the release. */
static test_latch_t in_hook;
static test_latch_t release;


static void item_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  ASSERT_EQ(atomic_fetch_add(&it->runs, 1), 0);
  atomic_fetch_add(&nruns, 1);
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  ndone++;
  if (status == UV_ENOBUFS) {
    ASSERT_EQ(atomic_load(&it->runs), 0);
    nenobufs++;
  } else {
    ASSERT_OK(status);
    ASSERT_EQ(atomic_load(&it->runs), 1);
  }
}


static void init_items(int n) {
  int i;

  memset(items, 0, sizeof(items));
  for (i = 0; i < n; i++) {
    ASSERT_OK(uvs_task_init(&items[i].task, item_run, item_done));
    ASSERT_OK(uvs_task_set_key(&items[i].task, KEY));
  }
  ndone = 0;
  nenobufs = 0;
  atomic_store(&nruns, 0);
}


static void post_fn(void* arg) {
  (void) arg;
  atomic_fetch_add(&post_runs, 1);
}


static void hook(
    uvs_worker_t* w, uvs_task_t* task, uvs_event_t ev, int status, void* arg) {
  item_t* it;

  (void) w;
  (void) status;
  (void) arg;
  if (ev != UVS_EV_ACCEPTED)
    return;
  atomic_fetch_add(&accepted, 1);
  if (task == NULL)
    return;
  it = TEST_CONTAINER_OF(task, item_t, task);
  if (!it->block)
    return;
  /* Holds the window wide open: the task is counted in under its key and
   * not filed while this runs. A test may block here; a program's hook
   * must not. */
  test_latch_add(&in_hook, 1);
  ASSERT(test_latch_wait(&release, it->block, TEST_WAIT_MS));
}


static void sched_init_hooked(void) {
  uvs_sched_options_t o;

  memset(&o, 0, sizeof(o));
  o.hook = hook;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
}


static int worker_closed;

static void on_worker_closed(uvs_worker_t* w) {
  (void) w;
  worker_closed++;
}


/* ---- a group index out of range, while and after the scheduler closes -- */

static int sched_closed;

static void on_sched_closed(uvs_sched_t* s) {
  (void) s;
  sched_closed++;
}


static int init_in(uvs_worker_t* w, uvs_where_t where, unsigned group) {
  uvs_worker_options_t o;

  memset(&o, 0, sizeof(o));
  o.group = group;
  return uvs_worker_init_ex(&sched, w, where, &o);
}


static void bad_group_closing(unsigned ngroups) {
  uvs_group_options_t g[2];
  uvs_sched_options_t o;
  uvs_worker_t w;
  unsigned have;

  memset(g, 0, sizeof(g));
  memset(&o, 0, sizeof(o));
  o.ngroups = ngroups;
  o.groups = ngroups != 0 ? g : NULL;
  have = ngroups != 0 ? ngroups : 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  sched_closed = 0;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, on_sched_closed));

  /* Closing: an index it does not have is UV_EINVAL, pool or loop; one it
   * has is UV_ESHUTDOWN. */
  ASSERT_ERR(init_in(&w, UVS_POOL, have), UV_EINVAL);
  ASSERT_ERR(init_in(&w, UVS_LOOP, have), UV_EINVAL);
  ASSERT_ERR(init_in(&w, UVS_POOL, UINT_MAX), UV_EINVAL);
  ASSERT_ERR(init_in(&w, UVS_POOL, have - 1), UV_ESHUTDOWN);
  ASSERT_ERR(init_in(&w, UVS_LOOP, 0), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_init(&sched, &w, UVS_POOL), UV_ESHUTDOWN);

  /* Closed, its groups freed: the same answers. */
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sched_closed, 1);
  ASSERT_ERR(init_in(&w, UVS_POOL, have), UV_EINVAL);
  ASSERT_ERR(init_in(&w, UVS_LOOP, UINT_MAX), UV_EINVAL);
  ASSERT_ERR(init_in(&w, UVS_POOL, have - 1), UV_ESHUTDOWN);
  ASSERT_ERR(init_in(&w, UVS_LOOP, 0), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_init(&sched, &w, UVS_LOOP), UV_ESHUTDOWN);
  ASSERT_OK(uv_loop_close(&loop));
}


TEST_IMPL(regress_bad_group_closing_default) {
  bad_group_closing(0);
  return 0;
}


TEST_IMPL(regress_bad_group_closing_two) {
  bad_group_closing(2);
  return 0;
}


/* ---- posts onto a wide worker with per-key bounds ---------------------- */

/* Posts from the loop thread and from another thread (its own node
 * cache), each from new chunks of nodes, with and without a hook; valgrind
 * (scripts/check-valgrind.sh) is what sees a read of what nothing set. */
#define POSTS 150

static void post_from_thread(void* arg) {
  int i;

  (void) arg;
  for (i = 0; i < POSTS; i++) ASSERT_OK(uvs_post(&worker, post_fn, NULL));
}


static void posts_keyed(int hooked) {
  uvs_worker_options_t wo;
  uvs_worker_metrics_t m;
  uv_thread_t th;

  if (hooked) {
    sched_init_hooked();
  } else {
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  }
  memset(&wo, 0, sizeof(wo));
  wo.width = 3;
  wo.key_max_pending = 2;
  wo.on_full = UVS_FULL_DROP_OLDEST;
  wo.metrics = 1;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &wo));
  atomic_store(&post_runs, 0);
  atomic_store(&accepted, 0);
  init_items(4);
  /* A keyed task between them: posts never count against its key. */
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  post_from_thread(NULL);
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uv_thread_create(&th, post_from_thread, NULL));
  ASSERT_OK(uv_thread_join(&th));
  TEST_RUN_UNTIL(&loop, atomic_load(&post_runs) == 2 * POSTS && ndone == 2);
  ASSERT_EQ(nenobufs, 0);
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.ran, 2 * POSTS + 2);
  ASSERT_UINT64_EQ(m.dropped, 0);
  if (hooked)
    ASSERT_EQ(atomic_load(&accepted), 2 * POSTS + 2);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(regress_posts_keyed_wide) {
  posts_keyed(0);
  return 0;
}


/* Posts left queued on a suspended wide worker (new chunks again), swept
 * by a close: the sweep asks each whether it is in the keyed queue. */
static void posts_swept(size_t key_max) {
  uvs_worker_options_t wo;
  uvs_worker_metrics_t m;
  uv_thread_t th;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  memset(&wo, 0, sizeof(wo));
  wo.width = 2;
  wo.key_max_pending = key_max;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &wo));
  ASSERT_OK(uvs_worker_suspend(&worker));
  atomic_store(&post_runs, 0);
  post_from_thread(NULL);
  ASSERT_OK(uv_thread_create(&th, post_from_thread, NULL));
  ASSERT_OK(uv_thread_join(&th));
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.scheduled, 2 * POSTS);
  worker_closed = 0;
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, on_worker_closed));
  TEST_RUN_UNTIL(&loop, worker_closed == 1);
  ASSERT_EQ(atomic_load(&post_runs), 0);
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.cancelled, 2 * POSTS);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(regress_posts_swept_wide) {
  posts_swept(0);
  return 0;
}


TEST_IMPL(regress_posts_swept_keyed_wide) {
  posts_swept(2);
  return 0;
}


TEST_IMPL(regress_posts_keyed_wide_hooked) {
  posts_keyed(1);
  return 0;
}


/* ---- a per-key bound while ACCEPTED hooks run -------------------------- */

/* `max` tasks of the key, each scheduled from a thread of its own whose
 * ACCEPTED hook blocks: the key's count is full and nothing of it is
 * filed. Then `more` tasks of the key from this thread, each with
 * DROP_OLDEST, the key's queue measured after every call (metrics:
 * nothing starts, the worker is suspended); then the hooks let go, one at a
 * time or all at once. The key holds max tasks at every step, and every
 * task beyond them comes back with UV_ENOBUFS, unrun. */
static void blocked_schedule(void* arg) {
  ASSERT_OK(uvs_schedule(&worker, arg));
}


static void bound_round(unsigned max, unsigned more, int one_by_one) {
  uvs_worker_options_t wo;
  uvs_worker_metrics_t m;
  uv_thread_t th[MAXN];
  unsigned i;

  ASSERT_LE(max + more, MAXN);
  memset(&wo, 0, sizeof(wo));
  wo.width = 2;
  wo.key_max_pending = max;
  wo.on_full = UVS_FULL_DROP_OLDEST;
  wo.metrics = 1; /* queued counted exactly */
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &wo));
  ASSERT_OK(uvs_worker_suspend(&worker));
  init_items((int) (max + more));
  test_latch_init(&in_hook);
  test_latch_init(&release);

  /* One by one, the hooks let go in turn (the first first); else all at
   * once, in any order. */
  for (i = 0; i < max; i++) {
    items[i].block = one_by_one ? (int) i + 1 : 1;
    ASSERT_OK(uv_thread_create(&th[i], blocked_schedule, &items[i].task));
  }
  ASSERT(test_latch_wait(&in_hook, (int) max, TEST_WAIT_MS));
  for (i = max; i < max + more; i++) {
    ASSERT_OK(uvs_schedule(&worker, &items[i].task));
    ASSERT_OK(uvs_worker_metrics(&worker, &m));
    ASSERT_UINT64_LE(m.queued, max);
    ASSERT_UINT64_LE(m.queued_max, max);
  }
  if (one_by_one) {
    for (i = 0; i < max; i++) {
      test_latch_add(&release, 1);
      ASSERT_OK(uv_thread_join(&th[i]));
      ASSERT_OK(uvs_worker_metrics(&worker, &m));
      ASSERT_UINT64_LE(m.queued, max);
    }
  } else {
    test_latch_add(&release, 1);
    for (i = 0; i < max; i++) ASSERT_OK(uv_thread_join(&th[i]));
  }
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.queued, max);
  ASSERT_UINT64_LE(m.queued_max, max);
  ASSERT_UINT64_EQ(m.dropped, more);

  /* What is left runs: max tasks; the rest came back unrun. */
  TEST_RUN_UNTIL(&loop, ndone == (int) more);
  ASSERT_EQ(nenobufs, (int) more);
  ASSERT_OK(uvs_worker_resume(&worker));
  TEST_RUN_UNTIL(&loop, ndone == (int) (max + more));
  ASSERT_EQ(atomic_load(&nruns), (int) max);
  ASSERT_EQ(nenobufs, (int) more);
  worker_closed = 0;
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, on_worker_closed));
  TEST_RUN_UNTIL(&loop, worker_closed == 1);
  test_latch_destroy(&release);
  test_latch_destroy(&in_hook);
}


TEST_IMPL(regress_keybound_hook_window) {
  unsigned max;

  sched_init_hooked();
  for (max = 1; max <= 3; max++) {
    bound_round(max, 1, 0);
    bound_round(max, max + 2, 0);
    bound_round(max, 2, 1);
  }
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* ---- a suspended worker is not ready ----------------------------------- */

/* max_concurrency 1, its drain held by a gate: a worker with a task stays
 * ready, waiting. Its suspend takes it out of ready at once, its resume
 * puts it back; once the gate opens it runs. */
static void suspended_not_ready(int width) {
  uvs_sched_options_t so;
  uvs_worker_options_t wo;
  uvs_group_stats_t st;
  uvs_worker_t gate_w;
  test_latch_t started;
  test_gate_t gate;

  memset(&so, 0, sizeof(so));
  so.max_concurrency = 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &so));
  ASSERT_OK(uvs_worker_init(&sched, &gate_w, UVS_POOL));
  memset(&wo, 0, sizeof(wo));
  wo.width = (unsigned) width;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &wo));
  test_latch_init(&started);
  test_latch_init(&release);
  test_gate_init(&gate, &started, &release, 1, NULL);
  ASSERT_OK(uvs_schedule(&gate_w, &gate.task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);

  init_items(3);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  test_settle(&loop); /* dispatch looked: no room */
  ASSERT_OK(uvs_group_stats(&sched, 0, &st));
  ASSERT_UINT64_EQ(st.ready, 1);
  ASSERT_UINT64_EQ(st.running, 1);

  /* At once: no loop turn in between. */
  ASSERT_OK(uvs_worker_suspend(&worker));
  ASSERT_OK(uvs_group_stats(&sched, 0, &st));
  ASSERT_UINT64_EQ(st.ready, 0);
  /* A second suspend, and a schedule while suspended, change nothing. */
  ASSERT_OK(uvs_worker_suspend(&worker));
  ASSERT_OK(uvs_schedule(&worker, &items[2].task));
  test_settle(&loop);
  ASSERT_OK(uvs_group_stats(&sched, 0, &st));
  ASSERT_UINT64_EQ(st.ready, 0);
  ASSERT_OK(uvs_worker_resume(&worker));
  ASSERT_OK(uvs_group_stats(&sched, 0, &st));
  ASSERT_UINT64_EQ(st.ready, 0);
  /* Back at 0: ready again at once, and waiting for the drain. */
  ASSERT_OK(uvs_worker_resume(&worker));
  ASSERT_OK(uvs_group_stats(&sched, 0, &st));
  ASSERT_UINT64_EQ(st.ready, 1);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 0);

  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == 3);
  ASSERT_EQ(atomic_load(&nruns), 3);
  ASSERT_OK(uvs_group_stats(&sched, 0, &st));
  ASSERT_UINT64_EQ(st.ready, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&release);
  test_latch_destroy(&started);
}


TEST_IMPL(regress_suspended_not_ready_serial) {
  suspended_not_ready(1);
  return 0;
}


TEST_IMPL(regress_suspended_not_ready_wide) {
  suspended_not_ready(3);
  return 0;
}
