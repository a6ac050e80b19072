#include "task.h"

#include <stdatomic.h>

#define NTASKS 1000

typedef struct {
  uvs_task_t task;
  int id;
  int producer;
  int status;
  int done_calls;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uvs_worker_t worker2;
static uv_thread_t loop_thread;
static item_t items[NTASKS];
static int next_id;
static atomic_int runs;
static int done_calls;
static int done_cancelled;
static int close_calls;
static int in_call;


static void item_run_cb(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  /* Plain read-modify-write: ordered by guarantee 2. */
  ASSERT_EQ(it->id, next_id);
  next_id++;
  atomic_fetch_add(&runs, 1);
}


static void item_done_cb(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT_EQ(in_call, 0);
  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  done_calls++;
  if (status == UV_ECANCELED)
    done_cancelled++;
  else
    ASSERT_OK(status);
}


static void close_cb(uvs_worker_t* w) {
  ASSERT_EQ(in_call, 0);
  ASSERT(test_on_thread(loop_thread));
  ASSERT(w == &worker || w == &worker2);
  close_calls++;
}


static void init_items(int n, uvs_run_cb run) {
  int i;

  for (i = 0; i < n; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    items[i].id = i;
    ASSERT_OK(uvs_task_init(&items[i].task, run, item_done_cb));
  }
}


static void setup(const uvs_sched_options_t* opts) {
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, opts));
}


TEST_IMPL(worker_init_errors) {
  setup(NULL);
  ASSERT_ERR(uvs_worker_init(NULL, &worker, UVS_POOL), UV_EINVAL);
  ASSERT_ERR(uvs_worker_init(&sched, NULL, UVS_POOL), UV_EINVAL);
  ASSERT_ERR(uvs_worker_init(&sched, &worker, (uvs_where_t) 2), UV_EINVAL);
  ASSERT_ERR(uvs_worker_init(&sched, &worker, (uvs_where_t) -1), UV_EINVAL);
  ASSERT_ERR(uvs_worker_close(NULL, UVS_CANCEL, NULL), UV_EINVAL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  ASSERT_ERR(uvs_worker_close(&worker, (uvs_close_how_t) 2, close_cb),
             UV_EINVAL);
  /* The rejected close changed nothing: the worker still works. */
  init_items(1, item_run_cb);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  ASSERT_EQ(close_calls, 0);
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, close_cb));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  ASSERT_EQ(close_calls, 1);
  return 0;
}


/* The struct's sizes (issue 20's ABI targets), and the layout that keeps
 * a schedule onto a plain worker within its first 64 bytes and a 64-byte
 * gap between what producers and drains write (include/uvsched/private.h,
 * docs/design.rst). A field moved past these is a cost every cold
 * schedule pays, so it fails here rather than in a benchmark. On 64-bit
 * targets only, where the figures were laid out. */
TEST_IMPL(worker_layout) {
  if (sizeof(void*) != 8)
    return 0;
  ASSERT_LE(sizeof(uvs_worker_t), 512);
  ASSERT_LE(sizeof(uvs_task_t), 96);
  ASSERT_LE(offsetof(uvs_worker_t, closed) + sizeof(unsigned), 64);
  ASSERT_LE(offsetof(uvs_worker_t, flags) + sizeof(unsigned), 64);
  ASSERT_LE(offsetof(uvs_worker_t, counting) + sizeof(int), 64);
  ASSERT_LE(offsetof(uvs_worker_t, thread) + sizeof(uv_thread_t), 64);
  ASSERT_LE(offsetof(uvs_worker_t, keys) + sizeof(void*), 64);
  ASSERT_LE(offsetof(uvs_worker_t, inbox_tail) + sizeof(void*), 64);
  ASSERT_LE(offsetof(uvs_worker_t, state) + sizeof(unsigned), 64);
  ASSERT_LE(offsetof(uvs_worker_t, max_wait_us) + sizeof(uint32_t), 64);
  ASSERT_GE(offsetof(uvs_worker_t, inbox_head),
            offsetof(uvs_worker_t, lanes_active) + sizeof(unsigned) + 64);
  return 0;
}


static void fifo_order(uvs_where_t where) {
  int i;

  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, where));
  init_items(NTASKS, item_run_cb);
  for (i = 0; i < NTASKS; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(next_id, NTASKS);
  ASSERT_EQ(done_calls, NTASKS);
  ASSERT_EQ(done_cancelled, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(worker_fifo_order_pool) {
  fifo_order(UVS_POOL);
  return 0;
}


TEST_IMPL(worker_fifo_order_loop) {
  fifo_order(UVS_LOOP);
  return 0;
}


/* Several producers: each producer's tasks run in its order. */
#define NPROD 4
#define PER_PROD 250

static int last_seq[NPROD];

static void prod_run_cb(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  ASSERT_EQ(it->id, last_seq[it->producer] + 1);
  last_seq[it->producer] = it->id;
  atomic_fetch_add(&runs, 1);
}


static void prod_done_cb(uvs_task_t* task, int status) {
  item_done_cb(task, status);
  if (done_calls == NPROD * PER_PROD)
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void producer_thread(void* arg) {
  int p;
  int i;
  item_t* it;

  p = (int) (intptr_t) arg;
  for (i = 0; i < PER_PROD; i++) {
    it = &items[p * PER_PROD + i];
    it->producer = p;
    it->id = i;
    ASSERT_OK(uvs_schedule(&worker, &it->task));
  }
}


static void fifo_producers(uvs_where_t where) {
  uvs_sched_options_t opts;
  uv_thread_t threads[NPROD];
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  setup(&opts);
  ASSERT_OK(uvs_worker_init(&sched, &worker, where));
  for (i = 0; i < NPROD; i++) last_seq[i] = -1;
  for (i = 0; i < NPROD * PER_PROD; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    ASSERT_OK(uvs_task_init(&items[i].task, prod_run_cb, prod_done_cb));
  }
  for (i = 0; i < NPROD; i++)
    ASSERT_OK(
        uv_thread_create(&threads[i], producer_thread, (void*) (intptr_t) i));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < NPROD; i++) ASSERT_OK(uv_thread_join(&threads[i]));
  ASSERT_EQ(done_calls, NPROD * PER_PROD);
  ASSERT_EQ(done_cancelled, 0);
  for (i = 0; i < NPROD; i++) ASSERT_EQ(last_seq[i], PER_PROD - 1);
  ASSERT_OK(uv_loop_close(&loop));
}


TEST_IMPL(worker_fifo_order_producers_pool) {
  fifo_producers(UVS_POOL);
  return 0;
}


TEST_IMPL(worker_fifo_order_producers_loop) {
  fifo_producers(UVS_LOOP);
  return 0;
}


/* Guarantee 2: never two run_cbs of one worker at once, and each task sees
 * everything the previous one did (the plain counters below would be a data
 * race for TSan otherwise). Budget 1 makes every task its own drain, so
 * consecutive tasks tend to run on different pool threads. */
#define NW 3
#define OAAT_PER 300

typedef struct {
  uvs_worker_t w;
  atomic_int inflight;
  long plain_counter;
  long plain_sum;
} oaat_worker_t;

typedef struct {
  uvs_task_t task;
  oaat_worker_t* ow;
  int n;
} oaat_item_t;

static oaat_worker_t oaat[NW];
static oaat_item_t oaat_items[NPROD][NW][OAAT_PER];
static int oaat_done;

static void oaat_run_cb(uvs_task_t* task) {
  oaat_item_t* it;
  oaat_worker_t* ow;

  it = TEST_CONTAINER_OF(task, oaat_item_t, task);
  ow = it->ow;
  ASSERT_EQ(atomic_fetch_add(&ow->inflight, 1), 0);
  ow->plain_counter++;
  ow->plain_sum += it->n;
  if ((it->n & 7) == 0)
    test_spin_us(20);
  ASSERT_EQ(atomic_fetch_sub(&ow->inflight, 1), 1);
}


static void oaat_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  if (++oaat_done == NPROD * NW * OAAT_PER)
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void oaat_producer(void* arg) {
  int p;
  int i;
  int w;

  p = (int) (intptr_t) arg;
  for (i = 0; i < OAAT_PER; i++)
    for (w = 0; w < NW; w++)
      ASSERT_OK(uvs_schedule(&oaat[w].w, &oaat_items[p][w][i].task));
}


TEST_IMPL(worker_one_at_a_time) {
  uvs_sched_options_t opts;
  uv_thread_t threads[NPROD];
  int p;
  int w;
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  opts.budget = 1;
  setup(&opts);
  for (w = 0; w < NW; w++) {
    ASSERT_OK(uvs_worker_init(&sched, &oaat[w].w, UVS_POOL));
    for (p = 0; p < NPROD; p++) {
      for (i = 0; i < OAAT_PER; i++) {
        oaat_items[p][w][i].ow = &oaat[w];
        oaat_items[p][w][i].n = i;
        ASSERT_OK(uvs_task_init(&oaat_items[p][w][i].task, oaat_run_cb,
                                oaat_done_cb));
      }
    }
  }
  for (p = 0; p < NPROD; p++)
    ASSERT_OK(
        uv_thread_create(&threads[p], oaat_producer, (void*) (intptr_t) p));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (p = 0; p < NPROD; p++) ASSERT_OK(uv_thread_join(&threads[p]));
  ASSERT_EQ(oaat_done, NPROD * NW * OAAT_PER);
  for (w = 0; w < NW; w++) {
    ASSERT_EQ(oaat[w].plain_counter, NPROD * OAAT_PER);
    ASSERT_EQ(oaat[w].plain_sum, NPROD * (OAAT_PER * (OAAT_PER - 1) / 2));
  }
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


static void pool_thread_run_cb(uvs_task_t* task) {
  (void) task;
  ASSERT(!test_on_thread(loop_thread));
  atomic_fetch_add(&runs, 1);
}


static void loop_thread_run_cb(uvs_task_t* task) {
  (void) task;
  ASSERT(test_on_thread(loop_thread));
  atomic_fetch_add(&runs, 1);
}


TEST_IMPL(worker_run_threads) {
  int i;

  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &worker2, UVS_LOOP));
  for (i = 0; i < 20; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    ASSERT_OK(uvs_task_init(&items[i].task,
                            i & 1 ? loop_thread_run_cb : pool_thread_run_cb,
                            item_done_cb));
    if (i & 1)
      ASSERT_OK(uvs_schedule_after(&worker2, &items[i].task, i % 3));
    else
      ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&runs), 20);
  ASSERT_EQ(done_calls, 20);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A pool worker busy with a long task: a close with UVS_CANCEL hands back
 * the queued tasks while the long one still runs. The long task waits for a
 * semaphore that the last cancelled done_cb posts: if the hand-back waited
 * for the long task, this test would hang. */
static uv_sem_t go;
static uv_async_t started_async;
static item_t long_item;

static void long_run_cb(uvs_task_t* task) {
  (void) task;
  uv_async_send(&started_async);
  uv_sem_wait(&go);
}


static void long_done_cb(uvs_task_t* task, int status) {
  ASSERT_OK(status);
  /* After every queued task was handed back. */
  ASSERT_EQ(done_cancelled, 5);
  ASSERT_EQ(close_calls, 0);
  item_done_cb(task, status);
}


static void cancel_done_cb(uvs_task_t* task, int status) {
  ASSERT_ERR(status, UV_ECANCELED);
  ASSERT_EQ(long_item.done_calls, 0);
  item_done_cb(task, status);
  if (done_cancelled == 5)
    uv_sem_post(&go);
}


static void started_close_cb(uv_async_t* handle) {
  (void) handle;
  in_call = 1;
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, close_cb));
  in_call = 0;
  uv_close((uv_handle_t*) &started_async, NULL);
}


TEST_IMPL(worker_close_cancel_while_busy) {
  int i;

  ASSERT_OK(uv_sem_init(&go, 0));
  setup(NULL);
  ASSERT_OK(uv_async_init(&loop, &started_async, started_close_cb));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uvs_task_init(&long_item.task, long_run_cb, long_done_cb));
  ASSERT_OK(uvs_schedule(&worker, &long_item.task));
  for (i = 0; i < 5; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    ASSERT_OK(uvs_task_init(&items[i].task, item_run_cb, cancel_done_cb));
    ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, 6);
  ASSERT_EQ(done_cancelled, 5);
  ASSERT_EQ(atomic_load(&runs), 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  return 0;
}


static void close_after_all_done_cb(uvs_worker_t* w) {
  close_cb(w);
  ASSERT_EQ(done_calls, NTASKS);
}


TEST_IMPL(worker_close_drain_runs_queued) {
  int i;

  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  init_items(NTASKS, item_run_cb);
  for (i = 0; i < NTASKS; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  in_call = 1;
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, close_after_all_done_cb));
  in_call = 0;
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, NTASKS);
  ASSERT_EQ(done_cancelled, 0);
  ASSERT_EQ(next_id, NTASKS);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(worker_close_drain_cancels_not_due) {
  int i;

  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  init_items(5, item_run_cb);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uvs_schedule_after(&worker, &items[2].task, 60000));
  ASSERT_OK(uvs_schedule_every(&worker, &items[3].task, 60000, 5));
  ASSERT_OK(uvs_schedule_every(&worker, &items[4].task, 30000, 60000));
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, 5);
  ASSERT_EQ(next_id, 2);
  for (i = 0; i < 5; i++) ASSERT_ERR(items[i].status, i < 2 ? 0 : UV_ECANCELED);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Tasks that fell due while their pool worker was busy run once more on a
 * drain close; the periodic one is then handed back with UV_ECANCELED. */
static atomic_int due_runs[2];

static void due_run_cb(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  atomic_fetch_add(&due_runs[it->id], 1);
}


static void gate_run_cb(uvs_task_t* task) {
  (void) task;
  uv_sem_wait(&go);
}


static void drain_close_timer_cb(uv_timer_t* handle) {
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, close_cb));
  uv_sem_post(&go);
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(worker_close_drain_runs_due) {
  uv_timer_t timer;

  ASSERT_OK(uv_sem_init(&go, 0));
  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  init_items(3, due_run_cb);
  ASSERT_OK(uvs_task_init(&items[2].task, gate_run_cb, item_done_cb));
  ASSERT_OK(uvs_schedule(&worker, &items[2].task));
  ASSERT_OK(uvs_schedule_after(&worker, &items[0].task, 1));
  ASSERT_OK(uvs_schedule_every(&worker, &items[1].task, 1, 10));
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, drain_close_timer_cb, 30, 0));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, 3);
  ASSERT_EQ(atomic_load(&due_runs[0]), 1);
  ASSERT_EQ(atomic_load(&due_runs[1]), 1);
  ASSERT_OK(items[0].status);
  ASSERT_ERR(items[1].status, UV_ECANCELED);
  ASSERT_OK(items[2].status);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  return 0;
}


/* Same on a loop worker, with the close made right after the due time
 * passed by uv_hrtime() but before any loop iteration saw it. */
TEST_IMPL(worker_close_drain_runs_due_unseen) {
  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  init_items(2, due_run_cb);
  ASSERT_OK(uvs_schedule_after(&worker, &items[0].task, 1));
  ASSERT_OK(uvs_schedule_every(&worker, &items[1].task, 1, 100000));
  test_spin_ms(10);
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, 2);
  ASSERT_EQ(atomic_load(&due_runs[0]), 1);
  ASSERT_EQ(atomic_load(&due_runs[1]), 1);
  ASSERT_OK(items[0].status);
  ASSERT_ERR(items[1].status, UV_ECANCELED);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(worker_close_twice) {
  int i;

  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  init_items(3, item_run_cb);
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, close_cb));
  /* Closing. */
  ASSERT_ERR(uvs_worker_close(&worker, UVS_DRAIN, close_cb), UV_EINVAL);
  ASSERT_ERR(uvs_worker_close(&worker, UVS_CANCEL, NULL), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, 3);
  /* Closed. */
  ASSERT_ERR(uvs_worker_close(&worker, UVS_CANCEL, close_cb), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


static void noop_fn(void* arg) {
  (void) arg;
}


static void check_shutdown(uvs_worker_t* w) {
  uvs_task_t t;
  uvs_stats_t before;
  uvs_stats_t after;

  uvs_sched_stats(&sched, &before);
  ASSERT_OK(uvs_task_init(&t, item_run_cb, item_done_cb));
  ASSERT_ERR(uvs_schedule(w, &t), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_schedule_after(w, &t, 0), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_schedule_after(w, &t, 10), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_schedule_every(w, &t, 0, 10), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_post(w, noop_fn, NULL), UV_ESHUTDOWN);
  /* EINVAL wins over ESHUTDOWN. */
  ASSERT_ERR(uvs_schedule(w, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(w, &t, 0, 0), UV_EINVAL);
  ASSERT_ERR(uvs_post(w, NULL, NULL), UV_EINVAL);
  /* Never accepted: cancel says so. */
  ASSERT_ERR(uvs_task_cancel(&t), UV_EINVAL);
  uvs_sched_stats(&sched, &after);
  ASSERT_UINT64_EQ(after.scheduled, before.scheduled);
}


TEST_IMPL(worker_closed_schedule_shutdown) {
  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &worker2, UVS_LOOP));
  init_items(1, pool_thread_run_cb);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, close_cb));
  ASSERT_OK(uvs_worker_close(&worker2, UVS_DRAIN, close_cb));
  check_shutdown(&worker);
  check_shutdown(&worker2);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 2);
  ASSERT_EQ(done_calls, 1);
  /* Closed, memory not reused: still ESHUTDOWN. */
  check_shutdown(&worker);
  check_shutdown(&worker2);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(worker_close_cb_not_sync) {
  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  in_call = 1;
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, close_cb));
  in_call = 0;
  ASSERT_EQ(close_calls, 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(worker_reinit_after_close) {
  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  init_items(2, item_run_cb);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  /* The memory is the user's again: reuse it as a loop worker. */
  memset(&worker, 0xa5, sizeof(worker));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 2);
  ASSERT_EQ(next_id, 2);
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 2);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A worker closed from inside its own task. */
static uvs_close_how_t self_close_how;

static void self_close_run_cb(uvs_task_t* task) {
  item_t* it;
  uvs_task_t extra;

  it = TEST_CONTAINER_OF(task, item_t, task);
  item_run_cb(task);
  if (it->id == 0) {
    ASSERT_OK(uvs_worker_close(&worker, self_close_how, close_cb));
    ASSERT_ERR(uvs_worker_close(&worker, self_close_how, close_cb), UV_EINVAL);
    ASSERT_OK(uvs_task_init(&extra, item_run_cb, item_done_cb));
    ASSERT_ERR(uvs_schedule(&worker, &extra), UV_ESHUTDOWN);
    ASSERT_ERR(uvs_post(&worker, noop_fn, NULL), UV_ESHUTDOWN);
    /* The running task itself can't go back onto the closing worker. */
    ASSERT_ERR(uvs_schedule(&worker, task), UV_ESHUTDOWN);
  }
}


static void self_close_done_cb(uvs_task_t* task, int status) {
  ASSERT_EQ(close_calls, 0);
  item_done_cb(task, status);
}


static void close_in_own_task(uvs_where_t where, uvs_close_how_t how) {
  int i;

  self_close_how = how;
  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, where));
  for (i = 0; i < 5; i++) {
    memset(&items[i], 0, sizeof(items[i]));
    items[i].id = i;
    ASSERT_OK(
        uvs_task_init(&items[i].task, self_close_run_cb, self_close_done_cb));
    ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, 5);
  ASSERT_OK(items[0].status);
  for (i = 1; i < 5; i++)
    ASSERT_ERR(items[i].status, how == UVS_DRAIN ? 0 : UV_ECANCELED);
  ASSERT_EQ(next_id, how == UVS_DRAIN ? 5 : 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(worker_close_in_own_task_pool) {
  close_in_own_task(UVS_POOL, UVS_CANCEL);
  return 0;
}


TEST_IMPL(worker_close_in_own_task_loop) {
  close_in_own_task(UVS_LOOP, UVS_DRAIN);
  return 0;
}


/* Init, schedule and close from a foreign thread; callbacks arrive on the
 * loop thread. */
static void foreign_close_cb(uvs_worker_t* w) {
  close_cb(w);
  ASSERT_EQ(done_calls, 10);
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void foreign_worker_thread(void* arg) {
  int i;

  (void) arg;
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  for (i = 0; i < 10; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, foreign_close_cb));
}


TEST_IMPL(worker_close_foreign_thread) {
  uvs_sched_options_t opts;
  uv_thread_t thread;

  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  setup(&opts);
  init_items(10, pool_thread_run_cb);
  ASSERT_OK(uv_thread_create(&thread, foreign_worker_thread, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, 10);
  ASSERT_EQ(atomic_load(&runs), 10);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* uvs_worker_init and uvs_worker_close from inside a pool run_cb; the new
 * worker's task and close callback still arrive. */
static uvs_worker_t inner;
static item_t inner_item;

static void inner_close_cb(uvs_worker_t* w) {
  ASSERT_PTR_EQ(w, &inner);
  ASSERT(test_on_thread(loop_thread));
  ASSERT_EQ(inner_item.done_calls, 1);
  close_calls++;
}


static void making_run_cb(uvs_task_t* task) {
  (void) task;
  ASSERT_OK(uvs_worker_init(&sched, &inner, UVS_LOOP));
  ASSERT_OK(uvs_task_init(&inner_item.task, loop_thread_run_cb, item_done_cb));
  ASSERT_OK(uvs_schedule(&inner, &inner_item.task));
  ASSERT_OK(uvs_worker_close(&inner, UVS_DRAIN, inner_close_cb));
  atomic_fetch_add(&runs, 1);
}


TEST_IMPL(worker_init_in_run_cb) {
  setup(NULL);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  init_items(1, making_run_cb);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, 2);
  ASSERT_EQ(atomic_load(&runs), 2);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A periodic task running when its worker closes (either way) finishes its
 * run and is then handed back with UV_ECANCELED; it does not run again. */
static atomic_int periodic_runs;
static atomic_int periodic_active;
static uvs_close_how_t periodic_close_how;

static void periodic_blocking_run_cb(uvs_task_t* task) {
  (void) task;
  atomic_store(&periodic_active, 1);
  if (atomic_fetch_add(&periodic_runs, 1) == 0) {
    uv_async_send(&started_async);
    uv_sem_wait(&go);
  }
  atomic_store(&periodic_active, 0);
}


static void periodic_close_done_cb(uvs_task_t* task, int status) {
  ASSERT_EQ(atomic_load(&periodic_active), 0);
  item_done_cb(task, status);
}


static void periodic_started_cb(uv_async_t* handle) {
  ASSERT_OK(uvs_worker_close(&worker, periodic_close_how, close_cb));
  uv_sem_post(&go);
  uv_close((uv_handle_t*) handle, NULL);
}


static void close_with_running_periodic(uvs_close_how_t how) {
  periodic_close_how = how;
  ASSERT_OK(uv_sem_init(&go, 0));
  setup(NULL);
  ASSERT_OK(uv_async_init(&loop, &started_async, periodic_started_cb));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  memset(&items[0], 0, sizeof(items[0]));
  ASSERT_OK(uvs_task_init(&items[0].task, periodic_blocking_run_cb,
                          periodic_close_done_cb));
  ASSERT_OK(uvs_schedule_every(&worker, &items[0].task, 0, 1));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(done_calls, 1);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  ASSERT_EQ(atomic_load(&periodic_runs), 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
}


TEST_IMPL(worker_close_cancel_running_periodic) {
  close_with_running_periodic(UVS_CANCEL);
  return 0;
}


TEST_IMPL(worker_close_drain_running_periodic) {
  close_with_running_periodic(UVS_DRAIN);
  return 0;
}


/* After its close callback a worker's memory may outlive its scheduler's:
 * schedules and posts onto it answer UV_ESHUTDOWN without touching the
 * (freed) scheduler. ASan reports it if they do. */
static void free_sched_cb(uvs_sched_t* s) {
  free(s);
}


static void nop_fn(void* arg) {
  (void) arg;
}


TEST_IMPL(worker_closed_outlives_sched) {
  uvs_sched_t* s;
  uvs_task_t t;

  ASSERT_OK(uv_loop_init(&loop));
  s = malloc(sizeof(*s));
  ASSERT_NOT_NULL(s);
  ASSERT_OK(uvs_sched_init(&loop, s, NULL));
  ASSERT_OK(uvs_worker_init(s, &worker, UVS_POOL));
  ASSERT_OK(uvs_worker_init(s, &worker2, UVS_LOOP));
  ASSERT_OK(uvs_sched_close(s, UVS_CANCEL, free_sched_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uvs_task_init(&t, item_run_cb, item_done_cb));
  ASSERT_ERR(uvs_schedule(&worker, &t), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_schedule_after(&worker2, &t, 5), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_schedule_every(&worker, &t, 5, 5), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_post(&worker2, nop_fn, NULL), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_close(&worker, UVS_CANCEL, NULL), UV_EINVAL);
  ASSERT_EQ(done_calls, 0);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}
