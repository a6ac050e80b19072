/* Width and keys (SPEC.md, "0.2 additions"): uvs_task_set_key, keys on a
 * serial worker (no effect), and workers of width N > 1: up to N run_cbs at
 * once in FIFO start order, tasks of one non-zero key never overlap and
 * start and complete in schedule order, idle keys cost nothing.
 *
 * Tests of width set UV_THREADPOOL_SIZE before the loop's first
 * uv_queue_work (each test runs in its own process), so that the pool has
 * at least N threads. */

#include "task.h"

#include <stdatomic.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define MAXN 1024
#define NKEYS 8

typedef struct {
  uvs_task_t task;
  int id;
  int key; /* index into the per-key arrays; 0 = no key */
  int status;
  int done_calls;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_thread_t loop_thread;
static item_t items[MAXN];
static int nitems;
static atomic_int inflight;
static atomic_int inflight_max;
static atomic_int started_n;
static atomic_int finished_n;
static int run_order[MAXN];
static int done_order[MAXN];
static int ndone;
/* Per key: run_cbs executing, and the id of the last task started and
 * handed back. */
static atomic_int key_inflight[NKEYS];
static atomic_int key_last_started[NKEYS];
static int key_last_done[NKEYS];
static unsigned width;
/* Ids are in schedule order (one producer): check the FIFO start window. */
static int check_window = 1;


static void note_max_of(atomic_int* max, int n) {
  int m;

  m = atomic_load(max);
  while (n > m && !atomic_compare_exchange_weak(max, &m, n)) {
  }
}


static void note_max(int n) {
  note_max_of(&inflight_max, n);
}


/* Spins until *max reaches want or 2 s after the first caller began: one
 * deadline for all (*end, 0 until then), so that a worker that runs them
 * one by one fails in 2 s rather than N * 2 s. */
static void wait_for_max(atomic_int* max, int want, atomic_uint_fast64_t* end) {
  uint_fast64_t deadline;
  uint_fast64_t zero;

  zero = 0;
  deadline = test_hrtime_ms() + 2000;
  if (!atomic_compare_exchange_strong(end, &zero, deadline))
    deadline = zero;
  while (atomic_load(max) < want && test_hrtime_ms() < deadline)
    test_spin_us(100);
}


static void enter(item_t* it) {
  int n;

  n = atomic_fetch_add(&inflight, 1) + 1;
  note_max(n);
  if (width > 0)
    ASSERT_LE(n, (int) width);
  /* FIFO start order with at most `width` at once: before task j starts,
   * tasks 0..j-1 started and all but width - 1 of them finished. */
  if (check_window)
    ASSERT_GE(atomic_load(&finished_n), it->id - (int) (width ? width : 1) + 1);
  if (it->key != 0) {
    ASSERT_EQ(atomic_fetch_add(&key_inflight[it->key], 1), 0);
    ASSERT_LT(atomic_load(&key_last_started[it->key]), it->id);
    atomic_store(&key_last_started[it->key], it->id);
  }
  run_order[atomic_fetch_add(&started_n, 1)] = it->id;
}


static void leave(item_t* it) {
  if (it->key != 0)
    ASSERT_EQ(atomic_fetch_sub(&key_inflight[it->key], 1), 1);
  atomic_fetch_sub(&inflight, 1);
  atomic_fetch_add(&finished_n, 1);
}


static void item_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  enter(it);
  if (it->id % 3 == 0)
    test_spin_us(50); /* room for overlap */
  leave(it);
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  ASSERT_OK(status);
  if (it->key != 0) {
    ASSERT_LT(key_last_done[it->key], it->id);
    key_last_done[it->key] = it->id;
  }
  done_order[ndone++] = it->id;
}


static void setup_width(uvs_where_t where, unsigned w) {
  uvs_worker_options_t o;
  int i;

  /* Enough pool threads for N at once, the loop's pool not yet started. */
  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "6", 1));
  loop_thread = uv_thread_self();
  width = w;
  for (i = 0; i < NKEYS; i++) {
    atomic_store(&key_last_started[i], -1);
    key_last_done[i] = -1;
  }
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  memset(&o, 0, sizeof(o));
  o.width = w;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, where, &o));
}


/* n tasks, task i with key keyof(i) (an index below NKEYS, 0 = none). */
static void add_items(int n, int (*keyof)(int), uvs_run_cb run) {
  int i;

  for (i = 0; i < n; i++) {
    item_t* it;

    it = &items[nitems];
    /* Garbage where the task goes: uvs_task_init must leave no key. */
    memset(it, 0xab, sizeof(*it));
    it->id = nitems;
    it->key = keyof(i);
    it->status = 0;
    it->done_calls = 0;
    ASSERT_OK(uvs_task_init(&it->task, run, item_done));
    /* Keys far apart in value, so a table that truncates them would
     * merge nothing here by accident and SPEC's "exact 64-bit key"
     * matters. */
    if (it->key != 0)
      ASSERT_OK(
          uvs_task_set_key(&it->task, ((uint64_t) it->key << 40) | 0xabcdu));
    nitems++;
  }
}


static void schedule_all(void) {
  int i;

  for (i = 0; i < nitems; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
}


static int key_mod(int i) {
  return i % NKEYS; /* 0 (no key) every NKEYS tasks */
}


static int key_none(int i) {
  (void) i;
  return 0;
}


static int key_one(int i) {
  (void) i;
  return 1;
}


/* ---- uvs_task_set_key -------------------------------------------------- */

static void noop_run(uvs_task_t* task) {
  (void) task;
}


static void count_done(uvs_task_t* task, int status) {
  (void) task;
  (void) status;
  ndone++;
}


TEST_IMPL(keys_set_key_null) {
  ASSERT_ERR(uvs_task_set_key(NULL, 1), UV_EINVAL);
  ASSERT_ERR(uvs_task_set_key(NULL, 0), UV_EINVAL);
  return 0;
}


TEST_IMPL(keys_set_key_busy) {
  uvs_task_t queued;
  uvs_task_t delayed;
  uvs_task_t periodic;

  setup_width(UVS_LOOP, 1);
  ASSERT_OK(uvs_task_init(&queued, noop_run, count_done));
  ASSERT_OK(uvs_task_init(&delayed, noop_run, count_done));
  ASSERT_OK(uvs_task_init(&periodic, noop_run, count_done));
  /* Before scheduling: fine, and may change its mind. */
  ASSERT_OK(uvs_task_set_key(&queued, 7));
  ASSERT_OK(uvs_task_set_key(&queued, 0));
  ASSERT_OK(uvs_task_set_key(&queued, UINT64_MAX));
  ASSERT_OK(uvs_schedule(&worker, &queued));
  ASSERT_OK(uvs_schedule_after(&worker, &delayed, 60000));
  ASSERT_OK(uvs_schedule_every(&worker, &periodic, 60000, 1000));
  ASSERT_ERR(uvs_task_set_key(&queued, 1), UV_EBUSY);
  ASSERT_ERR(uvs_task_set_key(&delayed, 1), UV_EBUSY);
  ASSERT_ERR(uvs_task_set_key(&periodic, 1), UV_EBUSY);
  ASSERT_OK(uvs_task_cancel(&delayed));
  ASSERT_OK(uvs_task_cancel(&periodic));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 3);
  /* Handed back: the user's again. */
  ASSERT_OK(uvs_task_set_key(&queued, 2));
  ASSERT_OK(uvs_task_set_key(&delayed, 2));
  ASSERT_OK(uvs_task_set_key(&periodic, 2));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* ---- keys on a serial worker ------------------------------------------- */

/* FIFO run order and done order across keys, one at a time. */
static void serial_keys(uvs_where_t where, unsigned w) {
  int i;

  setup_width(where, w);
  width = 1;
  add_items(500, key_mod, item_run);
  schedule_all();
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 500);
  ASSERT_EQ(atomic_load(&inflight_max), 1);
  for (i = 0; i < 500; i++) {
    ASSERT_EQ(run_order[i], i);
    ASSERT_EQ(done_order[i], i);
  }
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(keys_serial_fifo_pool) {
  serial_keys(UVS_POOL, 0);
  return 0;
}


TEST_IMPL(keys_serial_fifo_pool_width1) {
  serial_keys(UVS_POOL, 1);
  return 0;
}


TEST_IMPL(keys_serial_fifo_loop) {
  serial_keys(UVS_LOOP, 0);
  return 0;
}


/* ---- width > 1 --------------------------------------------------------- */

/* N tasks without keys (or with distinct keys) run all at once: each waits,
 * up to 2 s after the first started, for the others to be running too. */
#define WIDTH 4

static atomic_uint_fast64_t at_once_end; /* set by the first to start */

static void wait_for_all_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  enter(it);
  wait_for_max(&inflight_max, WIDTH, &at_once_end);
  leave(it);
}


static int key_distinct(int i) {
  return 1 + i % (NKEYS - 1);
}


static void width_at_once(int (*keyof)(int)) {
  setup_width(UVS_POOL, WIDTH);
  /* Not the FIFO-window check of enter(): all N are meant to overlap. */
  width = WIDTH;
  add_items(WIDTH, keyof, wait_for_all_run);
  schedule_all();
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, WIDTH);
  ASSERT_EQ(atomic_load(&inflight_max), WIDTH);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(keys_width_runs_n_at_once) {
  width_at_once(key_none);
  return 0;
}


TEST_IMPL(keys_width_distinct_keys_at_once) {
  width_at_once(key_distinct);
  return 0;
}


/* Never more than N at once, and FIFO start order: when task j starts, all
 * but N - 1 of the tasks before it have finished (checked in enter()). */
TEST_IMPL(keys_width_at_most_n_fifo_start) {
  int i;

  setup_width(UVS_POOL, 2);
  add_items(300, key_none, item_run);
  schedule_all();
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 300);
  ASSERT_LE(atomic_load(&inflight_max), 2);
  for (i = 0; i < 300; i++) ASSERT_OK(items[i].status);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Tasks of one key never overlap and start and complete in schedule order
 * (enter(), leave() and item_done() check it), among tasks of other keys
 * and without a key. */
TEST_IMPL(keys_width_same_key_ordered) {
  setup_width(UVS_POOL, WIDTH);
  /* A task whose key is busy waits while later tasks of other keys start:
   * FIFO start order holds among tasks free to start, not across keys. */
  check_window = 0;
  add_items(800, key_mod, item_run);
  schedule_all();
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 800);
  ASSERT_LE(atomic_load(&inflight_max), WIDTH);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* All tasks of one key on a wide worker: one at a time, in order, as on a
 * serial worker. */
TEST_IMPL(keys_width_one_key_serial) {
  int i;

  setup_width(UVS_POOL, WIDTH);
  add_items(300, key_one, item_run);
  schedule_all();
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 300);
  ASSERT_EQ(atomic_load(&inflight_max), 1);
  for (i = 0; i < 300; i++) {
    ASSERT_EQ(run_order[i], i);
    ASSERT_EQ(done_order[i], i);
  }
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Same-key order holds with producers on foreign threads too: each
 * producer owns keys of its own and schedules them in order. */
#define KPROD 3
#define KPER 200

static void keyed_producer(void* arg) {
  int p;
  int i;

  p = (int) (intptr_t) arg;
  for (i = p; i < KPROD * KPER; i += KPROD)
    ASSERT_OK(uvs_schedule(&worker, &items[i].task));
}


static int key_by_producer(int i) {
  return 1 + i % KPROD; /* task i is scheduled by producer i % KPROD */
}


static void producers_done(uvs_task_t* task, int status) {
  item_done(task, status);
  if (ndone == KPROD * KPER)
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


TEST_IMPL(keys_width_foreign_producers) {
  uvs_sched_options_t so;
  uvs_worker_options_t o;
  uv_thread_t threads[KPROD];
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "6", 1));
  loop_thread = uv_thread_self();
  width = WIDTH;
  check_window = 0; /* producers interleave: ids are not schedule order */
  for (i = 0; i < NKEYS; i++) {
    atomic_store(&key_last_started[i], -1);
    key_last_done[i] = -1;
  }
  ASSERT_OK(uv_loop_init(&loop));
  memset(&so, 0, sizeof(so));
  so.keep_alive = 1;
  ASSERT_OK(uvs_sched_init(&loop, &sched, &so));
  memset(&o, 0, sizeof(o));
  o.width = WIDTH;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o));
  add_items(KPROD * KPER, key_by_producer, item_run);
  for (i = 0; i < nitems; i++)
    ASSERT_OK(uvs_task_init(&items[i].task, item_run, producers_done));
  for (i = 0; i < nitems; i++)
    ASSERT_OK(uvs_task_set_key(&items[i].task, (uint64_t) items[i].key));
  for (i = 0; i < KPROD; i++)
    ASSERT_OK(
        uv_thread_create(&threads[i], keyed_producer, (void*) (intptr_t) i));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < KPROD; i++) ASSERT_OK(uv_thread_join(&threads[i]));
  ASSERT_EQ(ndone, KPROD * KPER);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* Idle keys cost nothing: 4096 distinct keys, two tasks each, on a wide
 * worker; afterwards the worker's counters are back to idle, and (under
 * ASan) nothing leaks when it closes. */
#define MANY_KEYS 4096

static uvs_task_t key_tasks[2 * MANY_KEYS];

TEST_IMPL(keys_width_idle_keys_cost_nothing) {
  uvs_worker_metrics_t m;
  int i;

  setup_width(UVS_POOL, WIDTH);
  for (i = 0; i < 2 * MANY_KEYS; i++) {
    ASSERT_OK(uvs_task_init(&key_tasks[i], noop_run, count_done));
    ASSERT_OK(uvs_task_set_key(&key_tasks[i],
                               0x9e3779b97f4a7c15ull * (uint64_t) (i / 2 + 1)));
    ASSERT_OK(uvs_schedule(&worker, &key_tasks[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 2 * MANY_KEYS);
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.running, 0);
  ASSERT_UINT64_EQ(m.delayed, 0);
  ASSERT_UINT64_EQ(m.scheduled, 2 * MANY_KEYS);
  ASSERT_UINT64_EQ(m.ran, 2 * MANY_KEYS);
  /* Again with the same keys: reuses nothing that was left behind. */
  ndone = 0;
  for (i = 0; i < 2 * MANY_KEYS; i++)
    ASSERT_OK(uvs_schedule(&worker, &key_tasks[i]));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 2 * MANY_KEYS);
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.running, 0);
  ASSERT_UINT64_EQ(m.ran, 4 * MANY_KEYS);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A wide worker takes its tasks in, key entries and all, without
 * allocating: its block from init holds as many entries and buckets as can
 * be in use at once. Here 20 lanes each hold a task with a key of its own
 * while others take in 48 more keys (68 entries at once; before, a table past
 * 64 asked for a chunk of entries, and while memory stayed short, lanes retried
 * through the pool). With every allocation failing, 20 + 1024 x 2 keyed tasks
 * run, each key's in order, and nothing even tries to allocate. */
#define NOMEM_WIDTH 20
#define NOMEM_KEYS 1024

static uvs_task_t nomem_blockers[NOMEM_WIDTH];
static atomic_int nomem_started;
static atomic_uint_fast64_t nomem_end;
static int nomem_seq[2 * NOMEM_KEYS];

static void nomem_block_run(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&nomem_started, 1);
  wait_for_max(&nomem_started, NOMEM_WIDTH, &nomem_end);
}


static void nomem_done(uvs_task_t* task, int status) {
  ASSERT_OK(status);
  ndone++;
  if (task >= key_tasks && task < key_tasks + 2 * NOMEM_KEYS)
    nomem_seq[task - key_tasks] = ndone;
}


TEST_IMPL(keys_width_intake_no_memory) {
  unsigned long tried;
  int i;

  setup_width(UVS_POOL, NOMEM_WIDTH);
  /* The pool starts at the first uv_queue_work: room for every lane. */
  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "24", 1));
  for (i = 0; i < NOMEM_WIDTH; i++) {
    ASSERT_OK(uvs_task_init(&nomem_blockers[i], nomem_block_run, nomem_done));
    ASSERT_OK(uvs_task_set_key(&nomem_blockers[i], 100000 + (uint64_t) i));
  }
  for (i = 0; i < 2 * NOMEM_KEYS; i++) {
    ASSERT_OK(uvs_task_init(&key_tasks[i], noop_run, nomem_done));
    ASSERT_OK(uvs_task_set_key(&key_tasks[i], (uint64_t) (i % NOMEM_KEYS) + 1));
  }
  tried = uvs__alloc_count();
  uvs__alloc_fail_all(1);
  for (i = 0; i < NOMEM_WIDTH; i++)
    ASSERT_OK(uvs_schedule(&worker, &nomem_blockers[i]));
  for (i = 0; i < 2 * NOMEM_KEYS; i++)
    ASSERT_OK(uvs_schedule(&worker, &key_tasks[i]));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  uvs__alloc_fail_all(0);
  ASSERT_EQ(atomic_load(&nomem_started), NOMEM_WIDTH);
  ASSERT_EQ(ndone, NOMEM_WIDTH + 2 * NOMEM_KEYS);
  ASSERT_UINT64_EQ((uint64_t) (uvs__alloc_count() - tried), 0);
  for (i = 0; i < NOMEM_KEYS; i++)
    ASSERT_LT(nomem_seq[i], nomem_seq[i + NOMEM_KEYS]);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* The lanes of a wide worker count their runs apart: the worker's and the
 * scheduler's figures add them up while the worker is open, and keep them
 * once its close frees the lanes. */
static uvs_worker_metrics_t closed_m;
static int closed_calls;

static void counts_closed(uvs_worker_t* w) {
  ASSERT_OK(uvs_worker_metrics(w, &closed_m));
  closed_calls++;
}


TEST_IMPL(keys_width_runs_counted_across_close) {
  uvs_worker_metrics_t m;
  uvs_stats_t st;
  int i;

  setup_width(UVS_POOL, WIDTH);
  for (i = 0; i < 2 * MANY_KEYS; i++) {
    ASSERT_OK(
        uvs_task_init(&key_tasks[i], noop_run, i % 3 == 0 ? NULL : count_done));
    ASSERT_OK(uvs_task_set_key(&key_tasks[i], (uint64_t) (i % 64)));
    ASSERT_OK(uvs_schedule(&worker, &key_tasks[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.ran, 2 * MANY_KEYS);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.ran, 2 * MANY_KEYS);
  ASSERT_UINT64_EQ(st.pending, 0);
  ASSERT_UINT64_EQ(st.scheduled, st.ran + st.cancelled + st.pending);

  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, counts_closed));
  ASSERT_OK(uv_run(&loop, UV_RUN_NOWAIT));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(closed_calls, 1);
  ASSERT_UINT64_EQ(closed_m.ran, 2 * MANY_KEYS);
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.ran, 2 * MANY_KEYS);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.ran, 2 * MANY_KEYS);
  ASSERT_UINT64_EQ(st.pending, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A close hands back each key's queued tasks in schedule order, wherever
 * they wait: behind their key, or still in the inbox (lanes take in only
 * what they are about to start). Two lanes block in tasks of keys 1 and 2;
 * key 1 has two tasks behind its entry, then come 60 other keys, then two
 * more tasks of key 1, which the lanes have no reason to take in. */
#define SWEEP_OTHERS 60

static uvs_task_t sweep_blockers[2];
static uvs_task_t sweep_key1[4];
static uvs_task_t sweep_others[SWEEP_OTHERS];
static uv_sem_t sweep_release;
static uv_async_t sweep_started;
static atomic_int sweep_nstarted;
static int sweep_key1_done[4];
static int sweep_nkey1;
static int sweep_blockers_ok;

/* Initialises n tasks with key first_key + i * step. */
static void init_keyed(uvs_task_t* tasks,
                       int n,
                       uvs_run_cb run,
                       uvs_done_cb done,
                       uint64_t first_key,
                       uint64_t step) {
  int i;

  for (i = 0; i < n; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i], run, done));
    ASSERT_OK(uvs_task_set_key(&tasks[i], first_key + (uint64_t) i * step));
  }
}


static void sweep_block_run(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&sweep_nstarted, 1);
  ASSERT_OK(uv_async_send(&sweep_started));
  uv_sem_wait(&sweep_release);
}


static void sweep_started_cb(uv_async_t* handle) {
  (void) handle; /* it only wakes the loop */
}


static void sweep_blocker_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  sweep_blockers_ok++;
}


static void sweep_key1_done_cb(uvs_task_t* task, int status) {
  ASSERT_EQ(status, UV_ECANCELED);
  sweep_key1_done[sweep_nkey1++] = (int) (task - sweep_key1);
}


static void sweep_other_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT(status == 0 || status == UV_ECANCELED);
}


TEST_IMPL(keys_width_close_hands_back_key_order) {
  uint64_t end;
  int i;

  setup_width(UVS_POOL, 2);
  ASSERT_OK(uv_sem_init(&sweep_release, 0));
  ASSERT_OK(uv_async_init(&loop, &sweep_started, sweep_started_cb));
  init_keyed(sweep_blockers, 2, sweep_block_run, sweep_blocker_done, 1, 1);
  init_keyed(sweep_key1, 4, noop_run, sweep_key1_done_cb, 1, 0);
  init_keyed(sweep_others, SWEEP_OTHERS, noop_run, sweep_other_done, 3, 1);
  ASSERT_OK(uvs_schedule(&worker, &sweep_blockers[0]));
  ASSERT_OK(uvs_schedule(&worker, &sweep_blockers[1]));
  ASSERT_OK(uvs_schedule(&worker, &sweep_key1[0]));
  ASSERT_OK(uvs_schedule(&worker, &sweep_key1[1]));
  for (i = 0; i < SWEEP_OTHERS; i++)
    ASSERT_OK(uvs_schedule(&worker, &sweep_others[i]));
  ASSERT_OK(uvs_schedule(&worker, &sweep_key1[2]));
  ASSERT_OK(uvs_schedule(&worker, &sweep_key1[3]));

  /* Both blockers running: each counts, then wakes the loop. */
  end = test_hrtime_ms() + 10000;
  while (atomic_load(&sweep_nstarted) < 2 && test_hrtime_ms() < end)
    ASSERT_GE(uv_run(&loop, UV_RUN_ONCE), 0);
  ASSERT_EQ(atomic_load(&sweep_nstarted), 2);

  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, NULL));
  uv_sem_post(&sweep_release);
  uv_sem_post(&sweep_release);
  uv_close((uv_handle_t*) &sweep_started, NULL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sweep_blockers_ok, 2);
  ASSERT_EQ(sweep_nkey1, 4);
  for (i = 0; i < 4; i++) ASSERT_EQ(sweep_key1_done[i], i);
  uv_sem_destroy(&sweep_release);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* The same when memory runs out in the close. A close that took the inbox
 * into the key table first would need entries for its 200 other keys, more
 * than a width-2 worker's block holds (114), and with none to be had
 * handed key 1's second task back ahead of its first. The sweep takes
 * nothing in: a key's tasks come back in schedule order, and each once. */
#define OOM_OTHERS 200

static uvs_task_t oom_others[OOM_OTHERS];
static int oom_others_back;

static void oom_other_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_EQ(status, UV_ECANCELED);
  oom_others_back++;
}


TEST_IMPL(keys_width_close_no_memory_key_order) {
  int i;

  setup_width(UVS_POOL, 2);
  init_keyed(sweep_key1, 2, noop_run, sweep_key1_done_cb, 1, 0);
  init_keyed(oom_others, OOM_OTHERS, noop_run, oom_other_done, 3, 1);
  /* All in the inbox: no lane has run, the loop has not. */
  ASSERT_OK(uvs_schedule(&worker, &sweep_key1[0]));
  for (i = 0; i < OOM_OTHERS; i++)
    ASSERT_OK(uvs_schedule(&worker, &oom_others[i]));
  ASSERT_OK(uvs_schedule(&worker, &sweep_key1[1]));

  uvs__alloc_fail_after(0);
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  uvs__alloc_fail_after(-1);
  ASSERT_EQ(oom_others_back, OOM_OTHERS);
  ASSERT_EQ(sweep_nkey1, 2);
  for (i = 0; i < 2; i++) ASSERT_EQ(sweep_key1_done[i], i);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A keyed task that schedules itself again from its own run_cb and then
 * cancels that new custody (issue 13's stress run found it): the cancel
 * must let go only of what the queued instance holds. The running
 * instance still holds its key until its run ends; the queued one holds
 * nothing yet. Then the key still works: a later task of it runs, and the
 * worker ends with no key left (metrics, and ASan at the close). */
static int requeue_cancel_rc = 1;

static void requeue_cancel_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  enter(it);
  if (it->id == 0) {
    ASSERT_OK(uvs_schedule(&worker, task));
    /* Queued in a new custody: it will not run again. */
    requeue_cancel_rc = uvs_task_cancel(task);
  }
  leave(it);
}


static void requeue_cancel_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  ndone++;
}


/* uvs_task_init clears the key add_items() set: set it again. */
static void requeue_cancel_init(item_t* it) {
  ASSERT_OK(uvs_task_init(&it->task, requeue_cancel_run, requeue_cancel_done));
  ASSERT_OK(uvs_task_set_key(&it->task, ((uint64_t) it->key << 40) | 0xabcdu));
}


TEST_IMPL(keys_width_requeue_self_then_cancel) {
  uvs_worker_metrics_t m;

  setup_width(UVS_POOL, 2);
  check_window = 0;
  add_items(1, key_one, requeue_cancel_run);
  requeue_cancel_init(&items[0]);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(requeue_cancel_rc);
  ASSERT_EQ(ndone, 1);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  /* The key again, with a task behind it. */
  add_items(2, key_one, requeue_cancel_run);
  requeue_cancel_init(&items[1]);
  requeue_cancel_init(&items[2]);
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uvs_schedule(&worker, &items[2].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 3);
  ASSERT_OK(items[1].status);
  ASSERT_OK(items[2].status);
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.running, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* uvs_post onto a wide worker: posts have no key, so N of them run at
 * once. The nodes come from malloc'd chunks; M_PERTURB fills those with
 * garbage, so that a node whose key is left unset would carry one, and
 * every post would wait for the one before it. */
static atomic_int posts_at_once;
static atomic_int posts_max;
static atomic_int posts_done;
static atomic_uint_fast64_t posts_end;

static void post_wait_for_all(void* arg) {
  (void) arg;
  note_max_of(&posts_max, atomic_fetch_add(&posts_at_once, 1) + 1);
  wait_for_max(&posts_max, WIDTH, &posts_end);
  atomic_fetch_sub(&posts_at_once, 1);
  atomic_fetch_add(&posts_done, 1);
}


TEST_IMPL(keys_width_posts_have_no_key) {
  int i;

#ifdef M_PERTURB
  /* Not under ASan, whose malloc fills new memory with 0xbe anyway. */
  (void) mallopt(M_PERTURB, 0xab);
#endif
  setup_width(UVS_POOL, WIDTH);
  for (i = 0; i < WIDTH; i++)
    ASSERT_OK(uvs_post(&worker, post_wait_for_all, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&posts_done), WIDTH);
  ASSERT_EQ(atomic_load(&posts_max), WIDTH);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
