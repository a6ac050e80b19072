/* Per-key bounds (SPEC.md, "0.3 additions"): on a worker with width > 1 and
 * key_max_pending = m, a schedule or post of a task whose key already has m
 * tasks queued and not started meets on_full for that key alone; tasks with
 * no key and posts meet only max_pending. key_space_cb(worker, key) runs
 * once, on the loop thread, when a key that a schedule found full falls to
 * m / 2 (rounded down), never once the worker is closing. UV_EINVAL for
 * key_max_pending on a serial worker. Idle keys cost no memory.
 *
 * Most tests hold every lane busy with gate tasks (helpers.h), so that what
 * is queued is exactly what the test scheduled, and fill the worker from
 * the loop thread while the loop is not running. */

#include "helpers.h"

#include <stdatomic.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#define MAXN 1024
#define NKEYS 9 /* key index 0: no key; 1..8 */

typedef struct {
  uvs_task_t task;
  int id; /* in schedule order within its key */
  int kidx;
  int status;
  int done_calls;
  atomic_int runs;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_thread_t loop_thread;
static item_t items[MAXN];
static int nitems;
static int ndone;
static int nenobufs;
static atomic_int post_runs;
/* Per key index: run_cbs executing, started (count and last id), last id
 * handed back after a run. */
static atomic_int key_inflight[NKEYS];
static atomic_int key_started[NKEYS];
static atomic_int key_last_started[NKEYS];
static int key_last_done[NKEYS];
/* key_space_cb calls: the key and how many of its tasks had started. */
static int ks_calls;
static uint64_t ks_key[64];
static int ks_started[64];
static int close_calls;


static uint64_t key_of(int kidx) {
  /* Far apart, and alike in their low 32 bits: the exact 64-bit key
   * counts. */
  return kidx == 0 ? 0 : ((uint64_t) kidx << 40) | 0xabcdu;
}


static int kidx_of(uint64_t key) {
  int k;

  for (k = 1; k < NKEYS; k++)
    if (key_of(k) == key)
      return k;
  ASSERT(0 && "key_space_cb for a key no task has");
  return 0;
}


static void item_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  atomic_fetch_add(&it->runs, 1);
  if (it->kidx != 0) {
    /* No overlap per key, start order per key. */
    ASSERT_EQ(atomic_fetch_add(&key_inflight[it->kidx], 1), 0);
    ASSERT_LT(atomic_load(&key_last_started[it->kidx]), it->id);
    atomic_store(&key_last_started[it->kidx], it->id);
    atomic_fetch_add(&key_started[it->kidx], 1);
    if (it->id % 5 == 0)
      test_spin_us(30);
    ASSERT_EQ(atomic_fetch_sub(&key_inflight[it->kidx], 1), 1);
  }
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  ndone++;
  if (status == UV_ENOBUFS) {
    nenobufs++;
    ASSERT_EQ(atomic_load(&it->runs), 0);
    return;
  }
  if (status == UV_ECANCELED) {
    ASSERT_EQ(atomic_load(&it->runs), 0);
    return;
  }
  ASSERT_OK(status);
  ASSERT_EQ(atomic_load(&it->runs), 1);
  if (it->kidx != 0) {
    ASSERT_LT(key_last_done[it->kidx], it->id);
    key_last_done[it->kidx] = it->id;
  }
}


static void key_space(uvs_worker_t* w, uint64_t key) {
  int k;

  ASSERT(test_on_thread(loop_thread));
  ASSERT_PTR_EQ(w, &worker);
  k = kidx_of(key);
  if (ks_calls < 64) {
    ks_key[ks_calls] = key;
    ks_started[ks_calls] = atomic_load(&key_started[k]);
  }
  ks_calls++;
}


static int ks_calls_for(int kidx) {
  int n;
  int i;

  n = 0;
  for (i = 0; i < ks_calls && i < 64; i++) n += ks_key[i] == key_of(kidx);
  return n;
}


static void post_fn(void* arg) {
  (void) arg;
  atomic_fetch_add(&post_runs, 1);
}


static void worker_closed(uvs_worker_t* w) {
  ASSERT(test_on_thread(loop_thread));
  ASSERT_PTR_EQ(w, &worker);
  close_calls++;
}


/* A new task of key index kidx (0: none), ids in creation order. */
static item_t* new_item(int kidx) {
  item_t* it;

  ASSERT_LT(nitems, MAXN);
  it = &items[nitems];
  memset(it, 0, sizeof(*it));
  it->id = nitems++;
  it->kidx = kidx;
  ASSERT_OK(uvs_task_init(&it->task, item_run, item_done));
  ASSERT_OK(uvs_task_set_key(&it->task, key_of(kidx)));
  return it;
}


static int sched_new(int kidx) {
  return uvs_schedule(&worker, &new_item(kidx)->task);
}


static int open_manual; /* the next open_loop() makes a manual clock */

static unsigned open_hold_us; /* the scheduler's hold_us, for the next open */

static void open_loop(int keep_alive) {
  uvs_sched_options_t so;
  int k;

  /* Enough pool threads for every lane; the pool starts with the loop's
   * first uv_queue_work, after this. */
  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "6", 1));
  loop_thread = uv_thread_self();
  for (k = 0; k < NKEYS; k++) {
    atomic_store(&key_last_started[k], -1);
    key_last_done[k] = -1;
  }
  ASSERT_OK(uv_loop_init(&loop));
  memset(&so, 0, sizeof(so));
  so.keep_alive = keep_alive;
  so.manual_clock = open_manual;
  so.hold_us = open_hold_us;
  ASSERT_OK(uvs_sched_init(&loop, &sched, &so));
}


static void open_worker(unsigned width,
                        size_t key_max,
                        uvs_full_t on_full,
                        size_t max_pending) {
  uvs_worker_options_t o;

  memset(&o, 0, sizeof(o));
  o.width = width;
  o.key_max_pending = key_max;
  o.on_full = on_full;
  o.max_pending = max_pending;
  o.key_space_cb = key_space;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o));
}


static void metrics(uvs_worker_metrics_t* m) {
  ASSERT_OK(uvs_worker_metrics(&worker, m));
}

static uvs_worker_metrics_t m_scratch;


/* Guarantee 10's identity, with nothing executing. */
static void stats_identity(void) {
  uvs_stats_t st;

  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, st.ran + st.cancelled + st.pending);
}


/* Gates: n keyless ones that hold n lanes until released. They have a
 * done_cb: a running done-less task is not pending, and the metrics of a
 * worker that does not count its tasks derive queued from pending (see
 * keybound_metrics_queued_doneless_running_*). */
#define MAXGATES 8
static test_latch_t g_started;
static test_latch_t g_release;
static test_gate_t gates[MAXGATES];
static int ngates;
static int gate_done_calls;

static void gate_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT(test_on_thread(loop_thread));
  ASSERT_OK(status);
  gate_done_calls++;
}

static void hold_lanes(int n) {
  int i;

  test_latch_init(&g_started);
  test_latch_init(&g_release);
  ngates = n;
  for (i = 0; i < n; i++) {
    test_gate_init(&gates[i], &g_started, &g_release, 1, gate_done);
    ASSERT_OK(uvs_schedule(&worker, &gates[i].task));
  }
  TEST_RUN_UNTIL(&loop, test_latch_count(&g_started) == n);
}


static void release_lanes(void) {
  test_latch_add(&g_release, 1);
}


static void teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  if (ngates != 0) {
    test_latch_destroy(&g_started);
    test_latch_destroy(&g_release);
  }
}


/* ---- init ---------------------------------------------------------------- */

TEST_IMPL(keybound_init_serial_einval) {
  static uvs_worker_t copy;
  uvs_worker_options_t o;

  open_loop(0);
  memset(&o, 0, sizeof(o));
  o.key_max_pending = 4;
  memset(&worker, 0xab, sizeof(worker));
  memcpy(&copy, &worker, sizeof(worker));
  o.width = 0;
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o), UV_EINVAL);
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &o), UV_EINVAL);
  o.width = 1;
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o), UV_EINVAL);
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &o), UV_EINVAL);
  o.key_space_cb = key_space;
  o.max_pending = 10;
  o.on_full = UVS_FULL_BLOCK;
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o), UV_EINVAL);
  o.width = 2; /* wide, but on the loop: UV_EINVAL as ever */
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &o), UV_EINVAL);
  ASSERT_EQ(memcmp(&worker, &copy, sizeof(worker)), 0);
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o));
  /* A key_space_cb without a bound is no error: it is never called. */
  o.key_max_pending = 0;
  o.width = 1;
  ASSERT_OK(uvs_worker_init_ex(&sched, &copy, UVS_POOL, &o));
  teardown();
  return 0;
}


/* ---- REJECT -------------------------------------------------------------- */

/* The (m+1)-th queued task of one key gets UV_EAGAIN, each call counted
 * once in rejected; other keys, keyless tasks and posts are unaffected;
 * key_space_cb for the key found full only, once; the key's accepted tasks
 * run in order. */
TEST_IMPL(keybound_reject) {
  uvs_worker_metrics_t m;
  item_t* extra;
  int i;

  open_loop(0);
  open_worker(2, 3, UVS_FULL_REJECT, 0);
  hold_lanes(2);
  for (i = 0; i < 3; i++) ASSERT_OK(sched_new(1));
  extra = new_item(1);
  ASSERT_ERR(uvs_schedule(&worker, &extra->task), UV_EAGAIN);
  metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 1);
  /* Key 2 fills to its bound but is never found full. */
  for (i = 0; i < 3; i++) ASSERT_OK(sched_new(2));
  for (i = 0; i < 10; i++) ASSERT_OK(sched_new(0));
  for (i = 0; i < 5; i++) ASSERT_OK(uvs_post(&worker, post_fn, NULL));
  ASSERT_OK(sched_new(3));
  ASSERT_ERR(uvs_schedule(&worker, &extra->task), UV_EAGAIN);
  metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 2);
  ASSERT_UINT64_EQ(m.queued, 3 + 3 + 10 + 5 + 1);
  ASSERT_UINT64_EQ(m.dropped, 0);
  test_settle(&loop);
  ASSERT_EQ(ndone, 0);
  ASSERT_EQ(ks_calls, 0);
  release_lanes();
  TEST_RUN_UNTIL(&loop, ndone == 17 && atomic_load(&post_runs) == 5);
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 1);
  ASSERT_EQ(ks_calls_for(1), 1);
  ASSERT_EQ(atomic_load(&key_started[1]), 3);
  ASSERT_EQ(atomic_load(&key_started[2]), 3);
  ASSERT_EQ(extra->done_calls, 0);
  ASSERT_EQ(atomic_load(&extra->runs), 0);
  metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 2);
  ASSERT_UINT64_EQ(m.queued, 0);
  /* Never accepted, so free to schedule now that the key has room. */
  ASSERT_OK(uvs_schedule(&worker, &extra->task));
  TEST_RUN_UNTIL(&loop, ndone == 18);
  ASSERT_OK(extra->status);
  stats_identity();
  teardown();
  return 0;
}


/* ---- key_space_cb ----------------------------------------------------------
 */

/* A key found full gets key_space_cb when its queued count falls to m / 2
 * (rounded down), not before, and once. Tasks of the key are gates that
 * hold it step by step: gate j starts when gate j - 1 is released, and
 * while gate j runs, m - j tasks of the key are queued. */
static void space_at_half(size_t m) {
  static test_latch_t started;
  static test_latch_t release;
  static test_gate_t kg[16];
  item_t* extra;
  int ng;
  int j;

  open_loop(0);
  open_worker(2, m, UVS_FULL_REJECT, 0);
  test_latch_init(&started);
  test_latch_init(&release);
  /* Gate 0 runs; gates 1 .. m - m/2 and plain tasks fill the key to m. */
  ng = (int) (m - m / 2) + 1;
  for (j = 0; j < ng; j++) {
    test_gate_init(&kg[j], &started, &release, j + 1, gate_done);
    ASSERT_OK(uvs_task_set_key(&kg[j].task, key_of(1)));
    ASSERT_OK(uvs_schedule(&worker, &kg[j].task));
    if (j == 0)
      TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  }
  for (j = ng - 1; j < (int) m; j++) ASSERT_OK(sched_new(1));
  extra = new_item(1);
  ASSERT_ERR(uvs_schedule(&worker, &extra->task), UV_EAGAIN);
  for (j = 1; j < ng; j++) {
    /* m - j + 1 queued > m / 2 */
    test_settle(&loop);
    ASSERT_EQ(ks_calls, 0);
    test_latch_add(&release, 1);
    TEST_RUN_UNTIL(&loop, test_latch_count(&started) == j + 1);
  }
  /* Gate ng - 1 runs: m / 2 queued. */
  TEST_RUN_UNTIL(&loop, ks_calls == 1);
  ASSERT_UINT64_EQ(ks_key[0], key_of(1));
  ASSERT_EQ(test_latch_count(&started), ng);
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == (int) m - (ng - 1));
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 1);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
}


TEST_IMPL(keybound_space_cb_at_half_even) {
  space_at_half(4);
  return 0;
}


TEST_IMPL(keybound_space_cb_at_half_odd) {
  space_at_half(3); /* falls to 1 */
  return 0;
}


TEST_IMPL(keybound_space_cb_at_half_one) {
  space_at_half(1); /* falls to 0 */
  return 0;
}


/* Cancels take tasks out of the queue too. Each episode: a key found full
 * gets one callback at m / 2; refilled to m without being found full, none;
 * found full again, another. */
TEST_IMPL(keybound_space_cb_by_cancel_episodes) {
  item_t* a[5];
  int i;

  open_loop(0);
  open_worker(2, 4, UVS_FULL_REJECT, 0);
  hold_lanes(2);
  for (i = 0; i < 5; i++) a[i] = new_item(1);
  for (i = 0; i < 4; i++) ASSERT_OK(uvs_schedule(&worker, &a[i]->task));
  ASSERT_ERR(uvs_schedule(&worker, &a[4]->task), UV_EAGAIN);
  ASSERT_OK(uvs_task_cancel(&a[3]->task)); /* 3 queued */
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 0);
  ASSERT_OK(uvs_task_cancel(&a[2]->task)); /* 2 queued */
  TEST_RUN_UNTIL(&loop, ks_calls == 1);
  ASSERT_UINT64_EQ(ks_key[0], key_of(1));
  ASSERT_OK(uvs_task_cancel(&a[1]->task)); /* 1 queued */
  TEST_RUN_UNTIL(&loop, ndone == 3);
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 1);

  /* Refilled to 4, never found full: falling to 2 owes nothing. */
  for (i = 1; i < 4; i++) {
    a[i]->done_calls = 0;
    ASSERT_OK(uvs_schedule(&worker, &a[i]->task));
  }
  ASSERT_OK(uvs_task_cancel(&a[3]->task));
  ASSERT_OK(uvs_task_cancel(&a[2]->task));
  TEST_RUN_UNTIL(&loop, ndone == 5);
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 1);

  /* Found full again: one more. */
  for (i = 2; i < 4; i++) {
    a[i]->done_calls = 0;
    ASSERT_OK(uvs_schedule(&worker, &a[i]->task));
  }
  ASSERT_ERR(uvs_schedule(&worker, &a[4]->task), UV_EAGAIN);
  ASSERT_OK(uvs_task_cancel(&a[3]->task));
  ASSERT_OK(uvs_task_cancel(&a[2]->task));
  TEST_RUN_UNTIL(&loop, ks_calls == 2);
  ASSERT_UINT64_EQ(ks_key[1], key_of(1));
  release_lanes();
  TEST_RUN_UNTIL(&loop, ndone == 9);
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 2);
  ASSERT_EQ(a[4]->done_calls, 0);
  teardown();
  return 0;
}


/* Never once the worker is closing: a callback owed but not yet made when
 * the close begins, and keys that fall as a close runs or sweeps them. */
static void space_not_when_closing(int how) {
  item_t* a[6];
  int i;

  open_loop(0);
  open_worker(2, 4, UVS_FULL_REJECT, 0);
  hold_lanes(2);
  for (i = 0; i < 6; i++) a[i] = new_item(i < 5 ? 1 : 2);
  for (i = 0; i < 4; i++) ASSERT_OK(uvs_schedule(&worker, &a[i]->task));
  ASSERT_ERR(uvs_schedule(&worker, &a[4]->task), UV_EAGAIN);
  if (how == -1) {
    /* Owed now (2 queued), not called yet: the loop has not run. */
    ASSERT_OK(uvs_task_cancel(&a[3]->task));
    ASSERT_OK(uvs_task_cancel(&a[2]->task));
    ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, worker_closed));
  } else {
    ASSERT_OK(uvs_worker_close(&worker, (uvs_close_how_t) how, worker_closed));
  }
  release_lanes();
  TEST_RUN_UNTIL(&loop, close_calls == 1);
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 0);
  ASSERT_EQ(ndone, 4);
  if (how == UVS_DRAIN)
    ASSERT_EQ(atomic_load(&key_started[1]), 4);
  else
    ASSERT_EQ(atomic_load(&key_started[1]), 0);
  teardown();
}


TEST_IMPL(keybound_space_cb_not_when_closing_owed) {
  space_not_when_closing(-1);
  return 0;
}


TEST_IMPL(keybound_space_cb_not_when_closing_drain) {
  space_not_when_closing(UVS_DRAIN);
  return 0;
}


TEST_IMPL(keybound_space_cb_not_when_closing_cancel) {
  space_not_when_closing(UVS_CANCEL);
  return 0;
}


/* A task a lane takes up and puts back unstarted (its time slice passed)
 * is still queued and not started: its key did not fall, and no
 * key_space_cb is owed for it. Here the key's first task is a gate that
 * runs longer than a slice, and the lane's hold (1 us) is spent with it,
 * so the lane gives its thread back after that key's turn; both pool
 * threads are then held (a keyless gate on the other lane, and a plain
 * uv_work queued in libuv's FIFO ahead of any lane posted later), so that
 * what the key has started by then is all it will start until the test
 * lets go. */
static test_latch_t pb_started;
static test_latch_t pb_release;
static uv_work_t pb_work;
static int pb_after_calls;

static void pb_work_cb(uv_work_t* req) {
  (void) req;
  test_latch_add(&pb_started, 1);
  ASSERT(test_latch_wait(&pb_release, 1, TEST_WAIT_MS));
}


static void pb_after_cb(uv_work_t* req, int status) {
  (void) req;
  ASSERT_OK(status);
  pb_after_calls++;
}


TEST_IMPL(keybound_space_cb_not_on_put_back) {
  static test_latch_t ks;
  static test_latch_t kr;
  static test_gate_t kgate;
  item_t* extra;

  open_hold_us = 1;
  open_loop(0);
  open_hold_us = 0;
  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "2", 1));
  open_worker(2, 2, UVS_FULL_REJECT, 0);
  test_latch_init(&pb_started);
  test_latch_init(&pb_release);
  test_latch_init(&ks);
  test_latch_init(&kr);
  hold_lanes(1);
  test_gate_init(&kgate, &ks, &kr, 1, gate_done);
  ASSERT_OK(uvs_task_set_key(&kgate.task, key_of(1)));
  ASSERT_OK(uvs_schedule(&worker, &kgate.task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&ks) == 1);
  ASSERT_OK(sched_new(1));
  ASSERT_OK(sched_new(1));
  extra = new_item(1);
  ASSERT_ERR(uvs_schedule(&worker, &extra->task), UV_EAGAIN); /* found full */
  ASSERT_OK(uv_queue_work(&loop, &pb_work, pb_work_cb, pb_after_cb));
  test_spin_ms(3); /* the gate's run outlasts a time slice */
  test_latch_add(&kr, 1);
  TEST_RUN_UNTIL(&loop, test_latch_count(&pb_started) == 1);
  test_settle(&loop);
  /* Both pool threads are held now. */
  if (atomic_load(&key_started[1]) == 0) {
    /* The key still has its two tasks queued, none started. */
    ASSERT_EQ(ks_calls, 0);
  } else {
    ASSERT_EQ(atomic_load(&key_started[1]), 1);
    ASSERT_LE(ks_calls, 1);
  }
  test_latch_add(&pb_release, 1);
  release_lanes();
  TEST_RUN_UNTIL(&loop, ndone == 2 && pb_after_calls == 1);
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 1);
  ASSERT_EQ(extra->done_calls, 0);
  teardown();
  test_latch_destroy(&pb_started);
  test_latch_destroy(&pb_release);
  test_latch_destroy(&ks);
  test_latch_destroy(&kr);
  return 0;
}


/* ---- DROP_OLDEST --------------------------------------------------------- */

/* A full key's oldest queued task is handed back with UV_ENOBUFS, and only
 * that key's; keyless tasks and other keys are untouched; dropped counts
 * each, rejected none; the key's survivors run in order; key_space_cb is
 * owed (the key was found full) and made once. */
TEST_IMPL(keybound_drop_oldest) {
  uvs_worker_metrics_t m;
  item_t* a[4];
  int i;

  open_loop(0);
  open_worker(2, 2, UVS_FULL_DROP_OLDEST, 0);
  hold_lanes(2);
  a[0] = new_item(1);
  a[1] = new_item(1);
  ASSERT_OK(uvs_schedule(&worker, &a[0]->task));
  ASSERT_OK(uvs_schedule(&worker, &a[1]->task));
  ASSERT_OK(sched_new(2));
  ASSERT_OK(sched_new(2));
  for (i = 0; i < 5; i++) ASSERT_OK(sched_new(0));
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_post(&worker, post_fn, NULL));
  a[2] = new_item(1);
  ASSERT_OK(uvs_schedule(&worker, &a[2]->task));
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_ERR(a[0]->status, UV_ENOBUFS);
  metrics(&m);
  ASSERT_UINT64_EQ(m.dropped, 1);
  ASSERT_UINT64_EQ(m.rejected, 0);
  ASSERT_UINT64_EQ(m.queued, 2 + 2 + 5 + 3);
  a[3] = new_item(1);
  ASSERT_OK(uvs_schedule(&worker, &a[3]->task));
  TEST_RUN_UNTIL(&loop, ndone == 2);
  ASSERT_ERR(a[1]->status, UV_ENOBUFS);
  test_settle(&loop);
  ASSERT_EQ(ndone, 2);
  ASSERT_EQ(nenobufs, 2);
  release_lanes();
  TEST_RUN_UNTIL(&loop, ndone == 2 + 2 + 2 + 5 && atomic_load(&post_runs) == 3);
  test_settle(&loop);
  ASSERT_OK(a[2]->status);
  ASSERT_OK(a[3]->status);
  ASSERT_EQ(atomic_load(&key_started[1]), 2);
  ASSERT_EQ(atomic_load(&key_started[2]), 2);
  ASSERT_EQ(nenobufs, 2);
  ASSERT_EQ(ks_calls, 1);
  ASSERT_EQ(ks_calls_for(1), 1);
  metrics(&m);
  ASSERT_UINT64_EQ(m.dropped, 2);
  stats_identity();
  teardown();
  return 0;
}


/* The oldest queued, never the running one: the key's first task is a
 * gate that runs while the key is full. */
TEST_IMPL(keybound_drop_oldest_never_running) {
  static test_latch_t started;
  static test_latch_t release;
  static test_gate_t kgate;
  item_t* a[3];
  int i;

  open_loop(0);
  open_worker(2, 2, UVS_FULL_DROP_OLDEST, 0);
  test_latch_init(&started);
  test_latch_init(&release);
  test_gate_init(&kgate, &started, &release, 1, gate_done);
  ASSERT_OK(uvs_task_set_key(&kgate.task, key_of(1)));
  ASSERT_OK(uvs_schedule(&worker, &kgate.task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  for (i = 0; i < 3; i++) {
    a[i] = new_item(1);
    ASSERT_OK(uvs_schedule(&worker, &a[i]->task));
  }
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_ERR(a[0]->status, UV_ENOBUFS);
  test_settle(&loop);
  ASSERT_EQ(ndone, 1);
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == 3);
  ASSERT_OK(a[1]->status);
  ASSERT_OK(a[2]->status);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* A periodic task is handed back once, always with UV_ECANCELED, when
 * cancelled or closed (guarantee 3): one that fell due and waits queued
 * under a full key (or on a full worker, 0.2) is not handed back with
 * UV_ENOBUFS when DROP_OLDEST makes room for a new task. */
static int per_done_calls;
static int per_status;

static void per_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT(test_on_thread(loop_thread));
  per_done_calls++;
  per_status = status;
}


static void drop_oldest_periodic(int per_key) {
  uvs_worker_options_t o;
  uvs_task_t per;
  item_t* a;

  open_manual = 1;
  open_loop(0);
  memset(&o, 0, sizeof(o));
  o.on_full = UVS_FULL_DROP_OLDEST;
  if (per_key) {
    o.width = 2;
    o.key_max_pending = 1;
  } else {
    o.max_pending = 1;
  }
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o));
  hold_lanes(per_key ? 2 : 1);
  ASSERT_OK(uvs_task_init(&per, item_run, per_done));
  ASSERT_OK(uvs_task_set_key(&per, key_of(1)));
  ASSERT_OK(uvs_schedule_every(&worker, &per, 10, 10));
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  TEST_RUN_UNTIL(&loop, (metrics(&m_scratch), m_scratch.delayed == 0));
  /* Due, queued behind the gates: the key (the worker) is full. */
  a = new_item(1);
  ASSERT_OK(uvs_schedule(&worker, &a->task));
  test_settle(&loop);
  if (per_done_calls != 0)
    ASSERT_ERR(per_status, UV_ECANCELED);
  ASSERT_EQ(per_done_calls, 0);
  release_lanes();
  TEST_RUN_UNTIL(&loop, ndone == 1);
  ASSERT_OK(a->status);
  test_settle(&loop);
  ASSERT_EQ(per_done_calls, 0);
  teardown();
  ASSERT_EQ(per_done_calls, 1);
  ASSERT_ERR(per_status, UV_ECANCELED);
}


TEST_IMPL(keybound_drop_oldest_periodic_key) {
  drop_oldest_periodic(1);
  return 0;
}


TEST_IMPL(keybound_drop_oldest_periodic_worker) {
  drop_oldest_periodic(0);
  return 0;
}


/* A delayed task that falls due onto a full key meets on_full as one falling
 * due onto a full worker (0.2): one-shot, handed back with UV_ENOBUFS
 * (REJECT, BLOCK), or queued with the key's oldest queued task handed back
 * instead (DROP_OLDEST); periodic, it skips that grid point and stays on
 * its grid. Other keys are not affected. */
static void due_onto_full_key(uvs_full_t on_full, int periodic) {
  uvs_worker_metrics_t m;
  item_t* queued;
  item_t* other;
  item_t* late;

  open_manual = 1;
  open_loop(0);
  open_worker(2, 1, on_full, 0);
  hold_lanes(2);
  queued = new_item(1);
  ASSERT_OK(uvs_schedule(&worker, &queued->task)); /* key 1 is full */
  late = new_item(1);
  other = new_item(2);
  if (periodic) {
    /* Its hand-back follows a run: per_done, not item_done. */
    ASSERT_OK(uvs_task_init(&late->task, item_run, per_done));
    ASSERT_OK(uvs_task_set_key(&late->task, key_of(1)));
    ASSERT_OK(uvs_schedule_every(&worker, &late->task, 10, 10));
  } else {
    ASSERT_OK(uvs_schedule_after(&worker, &late->task, 10));
  }
  ASSERT_OK(uvs_schedule_after(&worker, &other->task, 10));
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  if (periodic || on_full != UVS_FULL_DROP_OLDEST) {
    /* The periodic task is back in the wheel for its next grid point;
     * the one-shot comes back. Then nothing else comes back. */
    TEST_RUN_UNTIL(
        &loop, (metrics(&m_scratch), m_scratch.delayed == (uint64_t) periodic &&
                                         m_scratch.queued == 2 &&
                                         ndone == (periodic ? 0 : 1)));
    test_settle(&loop);
    ASSERT_EQ(ndone, periodic ? 0 : 1);
    ASSERT_EQ(late->done_calls, periodic ? 0 : 1);
    if (!periodic)
      ASSERT_ERR(late->status, UV_ENOBUFS);
  } else {
    TEST_RUN_UNTIL(&loop, ndone == 1);
    ASSERT_EQ(queued->done_calls, 1);
    ASSERT_ERR(queued->status, UV_ENOBUFS);
    ASSERT_EQ(late->done_calls, 0);
  }
  metrics(&m);
  ASSERT_UINT64_EQ(m.dropped, periodic ? 0 : 1);
  ASSERT_UINT64_EQ(m.rejected, 0); /* no call was refused */
  ASSERT_EQ(other->done_calls, 0);
  release_lanes();
  TEST_RUN_UNTIL(&loop, ndone == (periodic ? 2 : 3));
  ASSERT_OK(other->status);
  ASSERT_EQ(atomic_load(&other->runs), 1);
  if (on_full == UVS_FULL_DROP_OLDEST && !periodic) {
    ASSERT_OK(late->status);
    ASSERT_EQ(atomic_load(&late->runs), 1);
  } else {
    ASSERT_OK(queued->status);
    ASSERT_EQ(atomic_load(&queued->runs), 1);
  }
  if (periodic) {
    /* Its next grid point: it runs, the key having room now. */
    ASSERT_EQ(atomic_load(&late->runs), 0);
    ASSERT_OK(uvs_clock_advance(&sched, 10));
    TEST_RUN_UNTIL(&loop, atomic_load(&late->runs) == 1);
    ASSERT_OK(uvs_task_cancel(&late->task));
    TEST_RUN_UNTIL(&loop, per_done_calls == 1);
    ASSERT_ERR(per_status, UV_ECANCELED);
  }
  /* The key was found full: key_space_cb once it has room. */
  ASSERT_EQ(ks_calls_for(1), 1);
  ASSERT_EQ(ks_calls_for(2), 0);
  if (!periodic)
    stats_identity(); /* for one-shot tasks (guarantee 10) */
  teardown();
}


TEST_IMPL(keybound_due_onto_full_key_reject) {
  due_onto_full_key(UVS_FULL_REJECT, 0);
  return 0;
}


TEST_IMPL(keybound_due_onto_full_key_block) {
  due_onto_full_key(UVS_FULL_BLOCK, 0);
  return 0;
}


TEST_IMPL(keybound_due_onto_full_key_drop_oldest) {
  due_onto_full_key(UVS_FULL_DROP_OLDEST, 0);
  return 0;
}


TEST_IMPL(keybound_due_onto_full_key_periodic) {
  due_onto_full_key(UVS_FULL_REJECT, 1);
  return 0;
}


/* ---- BLOCK --------------------------------------------------------------- */

/* uvs_schedule answers UV_EAGAIN, as does uvs_schedule_wait on the loop
 * thread; uvs_schedule_wait from a foreign thread blocks until the key has
 * room, not when another key's tasks leave, and its task then runs in its
 * key's order. */
static atomic_int waiter_err;
static atomic_int waiter_back;
static item_t* waited;

static void key_waiter(void* arg) {
  (void) arg;
  atomic_store(&waiter_err, uvs_schedule_wait(&worker, &waited->task, 10000));
  atomic_store(&waiter_back, 1);
}


TEST_IMPL(keybound_block_waits_for_its_key) {
  static test_latch_t started;
  static test_latch_t release;
  static test_gate_t kgate;
  uvs_worker_metrics_t m;
  uv_thread_t thread;
  int i;

  /* keep_alive: the waiter's task, scheduled from its thread, arrives by
   * the async handle, which only a kept-alive scheduler keeps referenced;
   * the loop may have nothing else alive by then, and uv_run would return
   * at once without reading it (1 run in 20 under load, before). */
  open_loop(1);
  open_worker(2, 2, UVS_FULL_BLOCK, 0);
  test_latch_init(&started);
  test_latch_init(&release);
  test_gate_init(&kgate, &started, &release, 1, gate_done);
  ASSERT_OK(uvs_task_set_key(&kgate.task, key_of(1)));
  ASSERT_OK(uvs_schedule(&worker, &kgate.task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  ASSERT_OK(sched_new(1));
  ASSERT_OK(sched_new(1));
  waited = new_item(1);
  ASSERT_ERR(uvs_schedule(&worker, &waited->task), UV_EAGAIN);
  ASSERT_ERR(uvs_schedule_wait(&worker, &waited->task, 1000), UV_EAGAIN);
  metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 2);

  atomic_store(&waiter_err, 1);
  ASSERT_OK(uv_thread_create(&thread, key_waiter, NULL));
  /* Other keys' tasks come and go on the other lane. */
  for (i = 2; i < 8; i++) ASSERT_OK(sched_new(i));
  for (i = 0; i < 3; i++) ASSERT_OK(sched_new(0));
  ASSERT_OK(uvs_post(&worker, post_fn, NULL));
  TEST_RUN_UNTIL(&loop, ndone == 9 && atomic_load(&post_runs) == 1);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&waiter_back), 0);
  ASSERT_EQ(atomic_load(&key_started[1]), 0);

  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, atomic_load(&waiter_back) == 1);
  ASSERT_OK(atomic_load(&waiter_err));
  /* Room came when a key-1 task was picked, which is before its run_cb
   * counts its start: that it was held until then is the check above. */
  TEST_RUN_UNTIL(&loop, atomic_load(&key_started[1]) >= 1);
  ASSERT_OK(uv_thread_join(&thread));
  TEST_RUN_UNTIL(&loop, ndone == 12);
  ASSERT_OK(waited->status);
  ASSERT_EQ(atomic_load(&key_started[1]), 3);
  metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 2); /* the call that waited and got in: none */
  /* Found full: owed at 1 queued. */
  TEST_RUN_UNTIL(&loop, ks_calls >= 1);
  ASSERT_UINT64_EQ(ks_key[0], key_of(1));
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 1);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* Without room for the key in time: UV_ETIMEDOUT after the timeout,
 * counted once in rejected; nothing accepted. */
static uint64_t waited_ns;

static void timeout_waiter(void* arg) {
  uint64_t start;

  (void) arg;
  start = uv_hrtime();
  atomic_store(&waiter_err, uvs_schedule_wait(&worker, &waited->task, 300));
  waited_ns = uv_hrtime() - start;
}


TEST_IMPL(keybound_block_timeout) {
  uvs_worker_metrics_t m;
  uv_thread_t thread;

  open_loop(0);
  open_worker(2, 1, UVS_FULL_BLOCK, 0);
  hold_lanes(2);
  ASSERT_OK(sched_new(1));
  waited = new_item(1);
  atomic_store(&waiter_err, 1);
  ASSERT_OK(uv_thread_create(&thread, timeout_waiter, NULL));
  /* Meanwhile other keys have room. */
  ASSERT_OK(sched_new(2));
  ASSERT_OK(sched_new(0));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_ERR(atomic_load(&waiter_err), UV_ETIMEDOUT);
  ASSERT_UINT64_GE(waited_ns, 300 * 1000000u);
  metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 1);
  ASSERT_UINT64_EQ(m.queued, 3);
  release_lanes();
  TEST_RUN_UNTIL(&loop, ndone == 3);
  test_settle(&loop);
  ASSERT_EQ(waited->done_calls, 0);
  ASSERT_EQ(atomic_load(&waited->runs), 0);
  metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 1);
  teardown();
  return 0;
}


/* ---- with max_pending ------------------------------------------------------
 */

/* Both bounds: a key at its bound rejects its own tasks; a worker at
 * max_pending rejects everything, keyless tasks and posts included, and
 * that is no key found full. */
TEST_IMPL(keybound_with_max_pending) {
  uvs_worker_metrics_t m;
  item_t* b1;
  item_t* a2;

  open_loop(0);
  open_worker(2, 2, UVS_FULL_REJECT, 5);
  hold_lanes(2);
  ASSERT_OK(sched_new(1));
  ASSERT_OK(sched_new(1));
  a2 = new_item(1);
  ASSERT_ERR(uvs_schedule(&worker, &a2->task), UV_EAGAIN); /* key */
  ASSERT_OK(sched_new(2));
  b1 = new_item(2);
  ASSERT_OK(uvs_schedule(&worker, &b1->task));
  ASSERT_OK(sched_new(3)); /* 5 queued: the worker is full */
  ASSERT_ERR(sched_new(4), UV_EAGAIN);
  ASSERT_ERR(sched_new(0), UV_EAGAIN);
  ASSERT_ERR(uvs_post(&worker, post_fn, NULL), UV_EAGAIN);
  metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 4);
  ASSERT_UINT64_EQ(m.queued, 5);
  ASSERT_OK(uvs_task_cancel(&b1->task));
  TEST_RUN_UNTIL(&loop, ndone == 1);
  /* Room in the worker, none for key 1. */
  ASSERT_ERR(uvs_schedule(&worker, &a2->task), UV_EAGAIN);
  ASSERT_OK(sched_new(0));
  metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 5);
  ASSERT_UINT64_LE(m.queued_max, 5);
  release_lanes();
  TEST_RUN_UNTIL(&loop, ndone == 1 + 5);
  test_settle(&loop);
  ASSERT_EQ(ks_calls, 1);
  ASSERT_EQ(ks_calls_for(1), 1);
  ASSERT_EQ(atomic_load(&post_runs), 0);
  ASSERT_EQ(a2->done_calls, 0);
  stats_identity();
  teardown();
  return 0;
}


/* ---- order and overlap under bounds, foreign producers ------------------- */

/* Four foreign producers, each with two keys of its own and keyless tasks,
 * on a width-4 worker with key_max_pending 3: per key no overlap, start and
 * completion in schedule order; every accepted task handed back once (run,
 * or with DROP_OLDEST evicted); with BLOCK every call gets in. */
#define KP_PROD 4
#define KP_PER 150

static int kp_total;
static atomic_int kp_accepted;
static atomic_int kp_rejected;
static atomic_int kp_bad;
static uvs_full_t kp_policy;
static uv_async_t kp_async;
static int kp_closed;

/* Everything accepted was handed back, and every call was answered. */
static void kp_maybe_finish(void) {
  if (kp_closed || ndone != atomic_load(&kp_accepted) ||
      ndone + atomic_load(&kp_rejected) + atomic_load(&kp_bad) != kp_total)
    return;
  kp_closed = 1;
  uv_close((uv_handle_t*) &kp_async, NULL);
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void kp_done(uvs_task_t* task, int status) {
  item_done(task, status);
  kp_maybe_finish();
}


static void kp_async_cb(uv_async_t* handle) {
  (void) handle;
  kp_maybe_finish();
}


static void kp_producer(void* arg) {
  item_t* it;
  int p;
  int i;
  int err;

  p = (int) (intptr_t) arg;
  for (i = 0; i < KP_PER; i++) {
    it = &items[p * KP_PER + i];
    if (kp_policy == UVS_FULL_BLOCK)
      err = uvs_schedule_wait(&worker, &it->task, 10000);
    else
      err = uvs_schedule(&worker, &it->task);
    if (err == 0)
      atomic_fetch_add(&kp_accepted, 1);
    else if (err == UV_EAGAIN && kp_policy == UVS_FULL_REJECT)
      atomic_fetch_add(&kp_rejected, 1);
    else
      atomic_fetch_add(&kp_bad, 1);
    if (i % 20 == 0)
      test_spin_us(200);
  }
  uv_async_send(&kp_async);
}


static void keyed_producers(uvs_full_t policy) {
  uv_thread_t threads[KP_PROD];
  uvs_worker_metrics_t m;
  item_t* it;
  int p;
  int i;

  kp_policy = policy;
  open_loop(1);
  open_worker(4, 3, policy, 0);
  ASSERT_OK(uv_async_init(&loop, &kp_async, kp_async_cb));
  kp_total = KP_PROD * KP_PER;
  for (p = 0; p < KP_PROD; p++) {
    for (i = 0; i < KP_PER; i++) {
      it = new_item(i % 5 == 4 ? 0 : 1 + 2 * p + (i % 2));
      ASSERT_OK(uvs_task_init(&it->task, item_run, kp_done));
      ASSERT_OK(uvs_task_set_key(&it->task, key_of(it->kidx)));
    }
  }
  for (p = 0; p < KP_PROD; p++)
    ASSERT_OK(uv_thread_create(&threads[p], kp_producer, (void*) (intptr_t) p));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (p = 0; p < KP_PROD; p++) ASSERT_OK(uv_thread_join(&threads[p]));
  ASSERT_EQ(atomic_load(&kp_bad), 0);
  ASSERT_EQ(ndone, atomic_load(&kp_accepted));
  ASSERT_EQ(ndone + atomic_load(&kp_rejected), kp_total);
  printf("# %d handed back (%d ENOBUFS), %d rejected, %d key_space_cb\n", ndone,
         nenobufs, atomic_load(&kp_rejected), ks_calls);
  for (i = 0; i < kp_total; i++) ASSERT_LE(items[i].done_calls, 1);
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.dropped, nenobufs);
  ASSERT_UINT64_EQ(m.rejected, atomic_load(&kp_rejected));
  if (policy == UVS_FULL_BLOCK)
    ASSERT_EQ(ndone, kp_total);
  if (policy != UVS_FULL_DROP_OLDEST)
    ASSERT_EQ(nenobufs, 0);
  ASSERT_OK(uv_loop_close(&loop));
}


TEST_IMPL(keybound_producers_block) {
  keyed_producers(UVS_FULL_BLOCK);
  return 0;
}


TEST_IMPL(keybound_producers_reject) {
  keyed_producers(UVS_FULL_REJECT);
  return 0;
}


TEST_IMPL(keybound_producers_drop_oldest) {
  keyed_producers(UVS_FULL_DROP_OLDEST);
  return 0;
}


/* ---- idle keys -------------------------------------------------------------
 */

/* Idle keys cost no memory: 4000 keys queued at once behind busy lanes
 * (with a bound, each is filed under its key as it is accepted), then run.
 * Afterwards the worker is idle, the heap is back where it was (glibc,
 * without sanitizers, which keep their own books), and under ASan nothing
 * leaks at close. */
#define IK_KEYS 4000

static uvs_task_t ik_tasks[IK_KEYS];
static int ik_done;

static void ik_noop(uvs_task_t* task) {
  (void) task;
}


static void ik_count(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  ik_done++;
}


static size_t heap_in_use(void) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  return mallinfo2().uordblks;
#else
  return 0;
#endif
}


static void ik_round(int nkeys) {
  uvs_worker_metrics_t m;
  int gates_before;
  int i;

  ik_done = 0;
  gates_before = gate_done_calls;
  hold_lanes(2);
  for (i = 0; i < nkeys; i++) {
    ASSERT_OK(uvs_task_set_key(&ik_tasks[i],
                               0x9e3779b97f4a7c15ull * (uint64_t) (i + 1)));
    ASSERT_OK(uvs_schedule(&worker, &ik_tasks[i]));
  }
  metrics(&m);
  ASSERT_UINT64_EQ(m.queued, (uint64_t) nkeys);
  release_lanes();
  TEST_RUN_UNTIL(&loop, ik_done == nkeys);
  /* The gates are handed back too before the next round inits them again:
   * a task still in custody is the library's. */
  TEST_RUN_UNTIL(&loop, gate_done_calls == gates_before + 2);
  TEST_RUN_UNTIL(&loop, (metrics(&m), m.running == 0));
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.delayed, 0);
  test_latch_destroy(&g_started);
  test_latch_destroy(&g_release);
}


TEST_IMPL(keybound_idle_keys_no_memory) {
  size_t before;
  size_t after;
  int i;

  open_loop(0);
  open_worker(2, 2, UVS_FULL_REJECT, 0);
  for (i = 0; i < IK_KEYS; i++)
    ASSERT_OK(uvs_task_init(&ik_tasks[i], ik_noop, ik_count));
  /* A first round of a few keys warms up libuv's pool. */
  ik_round(4);
  before = heap_in_use();
  ik_round(IK_KEYS);
  after = heap_in_use();
  printf("# heap in use: %zu before, %zu after\n", before, after);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  /* An entry per key left behind would be hundreds of kB; the slack is for
   * what glibc's per-thread caches hold of small blocks freed on pool
   * threads (a few kB, whatever the number of keys). */
  ASSERT_UINT64_LE(after, before + 32768);
#endif
  ngates = 0;
  teardown();
  return 0;
}


/* ---- metrics.queued with done-less tasks running ------------------------- */

/* queued counts tasks queued and not started, whatever runs meanwhile: a
 * worker held by done-less tasks (released as their run_cb is entered)
 * with 5 tasks queued behind says queued 5 and running = its gates. */
static void doneless_running(unsigned width) {
  static test_latch_t started;
  static test_latch_t release;
  static test_gate_t dg[2];
  uvs_worker_options_t o;
  uvs_worker_metrics_t m;
  unsigned i;

  open_loop(0);
  memset(&o, 0, sizeof(o));
  o.width = width;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o));
  test_latch_init(&started);
  test_latch_init(&release);
  for (i = 0; i < width; i++) {
    test_gate_init(&dg[i], &started, &release, 1, NULL);
    ASSERT_OK(uvs_schedule(&worker, &dg[i].task));
  }
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == (int) width);
  for (i = 0; i < 5; i++) ASSERT_OK(sched_new(0));
  metrics(&m);
  ASSERT_UINT64_EQ(m.running, width);
  ASSERT_UINT64_EQ(m.queued, 5);
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == 5);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
}


TEST_IMPL(keybound_metrics_queued_doneless_running_serial) {
  doneless_running(1);
  return 0;
}


TEST_IMPL(keybound_metrics_queued_doneless_running_wide) {
  doneless_running(2);
  return 0;
}


/* ---- a key's run in a lane ------------------------------------------------
 *
 * A lane takes a key's next tasks with its head, bounds or not. The head
 * counts out of its key's bound as it is picked; the rest of the run
 * still counts while it waits in the lane's slots, and counts out as each
 * starts, or when a cancel or an eviction takes it from there. */

#define RK 5
static test_latch_t rk_started;
static test_latch_t rk_release;
static test_gate_t rk_gates[2];
static uvs_task_t rk_tasks[RK];
static atomic_int rk_runs[RK];
static int rk_status[RK];
static int rk_done;
static int rk_order[RK];

static void rk_run(uvs_task_t* task) {
  atomic_fetch_add(&rk_runs[(intptr_t) task->data], 1);
}


static void rk_done_cb(uvs_task_t* task, int status) {
  ASSERT(test_on_thread(loop_thread));
  rk_status[(intptr_t) task->data] = status;
  rk_order[rk_done++] = (int) (intptr_t) task->data;
}


static void rk_gate_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  gate_done_calls++;
}


/* Gate 0 (the key's head) and, behind it, gate 1 or task 0 are scheduled
 * on a width-2 worker with key_max_pending 2, and gate 0 is running: the
 * lane took the one behind it into its batch, where it still counts. */
static void rk_setup(uvs_full_t on_full, int gate_behind) {
  int i;

  open_loop(0);
  open_worker(2, 2, on_full, 0);
  test_latch_init(&rk_started);
  test_latch_init(&rk_release);
  for (i = 0; i < 2; i++) {
    test_gate_init(&rk_gates[i], &rk_started, &rk_release, i + 1, rk_gate_done);
    ASSERT_OK(uvs_task_set_key(&rk_gates[i].task, key_of(1)));
  }
  for (i = 0; i < RK; i++) {
    ASSERT_OK(uvs_task_init(&rk_tasks[i], rk_run, rk_done_cb));
    rk_tasks[i].data = (void*) (intptr_t) i;
    ASSERT_OK(uvs_task_set_key(&rk_tasks[i], key_of(1)));
  }
  ASSERT_OK(uvs_schedule(&worker, &rk_gates[0].task));
  ASSERT_OK(
      uvs_schedule(&worker, gate_behind ? &rk_gates[1].task : &rk_tasks[0]));
  TEST_RUN_UNTIL(&loop, test_latch_count(&rk_started) == 1);
}


static void rk_teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&rk_started);
  test_latch_destroy(&rk_release);
}


/* A short head, then gate 1 in the lane's run: both count until picked or
 * started, and once gate 1 has started (from the run, the head having
 * left its slice to spare) the key holds nothing. */
TEST_IMPL(keybound_run_counts_out_as_it_starts) {
  int i;

  open_loop(0);
  open_worker(2, 2, UVS_FULL_REJECT, 0);
  test_latch_init(&rk_started);
  test_latch_init(&rk_release);
  test_gate_init(&rk_gates[1], &rk_started, &rk_release, 1, rk_gate_done);
  ASSERT_OK(uvs_task_set_key(&rk_gates[1].task, key_of(1)));
  for (i = 0; i < RK; i++) {
    ASSERT_OK(uvs_task_init(&rk_tasks[i], rk_run, rk_done_cb));
    rk_tasks[i].data = (void*) (intptr_t) i;
    ASSERT_OK(uvs_task_set_key(&rk_tasks[i], key_of(1)));
  }
  ASSERT_OK(uvs_schedule(&worker, &rk_tasks[0]));
  ASSERT_OK(uvs_schedule(&worker, &rk_gates[1].task));
  ASSERT_ERR(uvs_schedule(&worker, &rk_tasks[1]), UV_EAGAIN);
  TEST_RUN_UNTIL(&loop, test_latch_count(&rk_started) == 1);
  ASSERT_OK(uvs_schedule(&worker, &rk_tasks[1]));
  ASSERT_OK(uvs_schedule(&worker, &rk_tasks[2]));
  ASSERT_ERR(uvs_schedule(&worker, &rk_tasks[3]), UV_EAGAIN);
  test_latch_add(&rk_release, 1);
  TEST_RUN_UNTIL(&loop, rk_done == 3 && gate_done_calls == 1);
  for (i = 0; i < 3; i++) {
    ASSERT_EQ(rk_order[i], i);
    ASSERT_OK(rk_status[i]);
  }
  ASSERT_EQ(atomic_load(&rk_runs[3]), 0);
  rk_teardown();
  return 0;
}


/* DROP_OLDEST evicts the key's oldest task not started: the one in the
 * lane's run, not the ones queued after it. */
TEST_IMPL(keybound_drop_oldest_from_run) {
  rk_setup(UVS_FULL_DROP_OLDEST, 0);
  ASSERT_OK(uvs_schedule(&worker, &rk_tasks[1]));
  ASSERT_OK(uvs_schedule(&worker, &rk_tasks[2])); /* evicts task 0 */
  TEST_RUN_UNTIL(&loop, rk_done == 1);
  ASSERT_EQ(rk_order[0], 0);
  ASSERT_ERR(rk_status[0], UV_ENOBUFS);
  test_latch_add(&rk_release, 1);
  TEST_RUN_UNTIL(&loop, rk_done == 3 && gate_done_calls == 1);
  ASSERT_EQ(atomic_load(&rk_runs[0]), 0);
  ASSERT_EQ(rk_order[1], 1);
  ASSERT_EQ(rk_order[2], 2);
  ASSERT_OK(rk_status[1]);
  ASSERT_OK(rk_status[2]);
  rk_teardown();
  return 0;
}


/* A cancel of the task in the lane's run counts it out of its key. */
TEST_IMPL(keybound_cancel_from_run) {
  rk_setup(UVS_FULL_REJECT, 0);
  ASSERT_OK(uvs_task_cancel(&rk_tasks[0]));
  ASSERT_OK(uvs_schedule(&worker, &rk_tasks[1]));
  ASSERT_OK(uvs_schedule(&worker, &rk_tasks[2]));
  ASSERT_ERR(uvs_schedule(&worker, &rk_tasks[3]), UV_EAGAIN);
  test_latch_add(&rk_release, 1);
  TEST_RUN_UNTIL(&loop, rk_done == 3 && gate_done_calls == 1);
  ASSERT_ERR(rk_status[0], UV_ECANCELED);
  ASSERT_EQ(atomic_load(&rk_runs[0]), 0);
  ASSERT_EQ(rk_order[1], 1);
  ASSERT_EQ(rk_order[2], 2);
  rk_teardown();
  return 0;
}


/* ---- a task queued past its key's count --------------------------------- */

/* A delayed task that falls due when its key's entry can't be had (no
 * memory past the worker's block) is queued past its key's count. Its key
 * must not count it out later: neither when a cancel takes it out nor
 * when lanes take it in and run it. With the count drifting, the key would
 * take a third task at key_max_pending 2 (cancel), or answer UV_EAGAIN for
 * ever once empty (run). */
#define UC_FILL 50 /* KEYS_ACTIVE(2): every entry of the worker's block */

/* A task of key 8's, left out of item_run's per-key order checks (its
 * kidx is 0): the task queued past its count may start after later ones
 * of its key. */
static item_t* uc_item(void) {
  item_t* it;

  it = new_item(0);
  ASSERT_OK(uvs_task_set_key(&it->task, key_of(8)));
  return it;
}


static int uc_sched(void) {
  return uvs_schedule(&worker, &uc_item()->task);
}


static void uncounted(int cancel) {
  item_t* d;
  item_t* it;
  int i;

  open_manual = 1;
  open_loop(0);
  open_manual = 0;
  open_worker(2, 2, UVS_FULL_REJECT, 0);
  hold_lanes(2);
  for (i = 0; i < UC_FILL; i++) {
    it = new_item(0);
    ASSERT_OK(uvs_task_set_key(&it->task, 1000 + (uint64_t) i));
    ASSERT_OK(uvs_schedule(&worker, &it->task));
  }
  d = uc_item();
  ASSERT_OK(uvs_schedule_after(&worker, &d->task, 10));
  uvs__alloc_fail_all(1);
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  TEST_RUN_UNTIL(&loop, (metrics(&m_scratch), m_scratch.delayed == 0));
  uvs__alloc_fail_all(0);
  ASSERT_OK(uc_sched()); /* its key's entry now: counted 1 */
  if (cancel) {
    ASSERT_OK(uvs_task_cancel(&d->task));
    ASSERT_OK(uc_sched());
    ASSERT_ERR(uc_sched(), UV_EAGAIN); /* two queued: full */
  }
  release_lanes();
  /* Every task but the refused one comes back. */
  TEST_RUN_UNTIL(&loop, ndone == nitems - (cancel ? 1 : 0));
  ASSERT_EQ(d->done_calls, 1);
  if (cancel)
    ASSERT_ERR(d->status, UV_ECANCELED);
  else
    ASSERT_OK(d->status);
  /* The key is empty: it takes a task again (a count that went below 0
   * would read as full for ever). */
  ASSERT_OK(uc_sched());
  TEST_RUN_UNTIL(&loop, ndone == nitems - (cancel ? 1 : 0));
  teardown();
}


TEST_IMPL(keybound_uncounted_cancel) {
  uncounted(1);
  return 0;
}


TEST_IMPL(keybound_uncounted_run) {
  uncounted(0);
  return 0;
}


/* A keyed task that schedules itself again from its run_cb queues behind
 * itself, the head its lane picked (and counted out) and still holds. A
 * DROP_OLDEST that evicts that queued instance counts it out of its key:
 * the stress program found the key left one over its true count, so that
 * every later fill of the key kept one task fewer than key_max_pending. */
#define AG 5
static uvs_task_t ag_tasks[AG]; /* 0 schedules itself; 1, 2 then; 3, 4 after */
static atomic_int ag_runs[AG];
static int ag_status[AG];
static int ag_dones;

static void ag_run(uvs_task_t* task) {
  int i;

  i = (int) (intptr_t) task->data;
  if (atomic_fetch_add(&ag_runs[i], 1) != 0 || i != 0)
    return;
  ASSERT_OK(uvs_schedule(&worker, task));         /* behind itself */
  ASSERT_OK(uvs_schedule(&worker, &ag_tasks[1])); /* the key is full */
  ASSERT_OK(uvs_schedule(&worker, &ag_tasks[2])); /* evicts task 0 again */
}

static void ag_done(uvs_task_t* task, int status) {
  ASSERT(test_on_thread(loop_thread));
  ag_status[(intptr_t) task->data] = status;
  ag_dones++;
}

TEST_IMPL(keybound_drop_oldest_requeued_head) {
  int i;

  open_loop(0);
  open_worker(2, 2, UVS_FULL_DROP_OLDEST, 0);
  for (i = 0; i < AG; i++) {
    ASSERT_OK(uvs_task_init(&ag_tasks[i], ag_run, ag_done));
    ag_tasks[i].data = (void*) (intptr_t) i;
    ASSERT_OK(uvs_task_set_key(&ag_tasks[i], key_of(1)));
  }
  ASSERT_OK(uvs_schedule(&worker, &ag_tasks[0]));
  TEST_RUN_UNTIL(&loop, ag_dones == 3);
  ASSERT_ERR(ag_status[0], UV_ENOBUFS);
  ASSERT_EQ(atomic_load(&ag_runs[0]), 1);
  ASSERT_OK(ag_status[1]);
  ASSERT_OK(ag_status[2]);
  /* The key holds nothing now: two tasks fit in it again. */
  ASSERT_OK(uvs_worker_suspend(&worker));
  ASSERT_OK(uvs_schedule(&worker, &ag_tasks[3]));
  ASSERT_OK(uvs_schedule(&worker, &ag_tasks[4]));
  ASSERT_OK(uvs_worker_resume(&worker));
  TEST_RUN_UNTIL(&loop, ag_dones == 5);
  if (ag_status[3] == UV_ENOBUFS)
    test_failed(__FILE__, __LINE__,
                "a requeued head evicted from behind itself was left "
                "counted in its key: the key's next fill lost a task");
  ASSERT_OK(ag_status[3]);
  ASSERT_OK(ag_status[4]);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
