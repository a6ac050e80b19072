/* Bounded workers (SPEC.md, "0.2 additions"): uvs_worker_init_ex, the three
 * policies for a full worker (REJECT, DROP_OLDEST, BLOCK) and space_cb.
 *
 * Most tests hold a pool worker busy with a "blocker" task that waits on a
 * semaphore: a running task is not queued, so what is queued behind it is
 * exactly what the test scheduled. The blocker tells the loop it started
 * through a one-shot uv_async_t, whose callback fills the worker from the
 * loop thread. */

#include "task.h"

#include "internal.h"

#include <stdatomic.h>

#define MAXN 64

typedef struct {
  uvs_task_t task;
  int id;
  int status;
  int done_calls;
  atomic_int runs;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker; /* the bounded one */
static uvs_worker_t other;  /* an unbounded pool worker that produces */
static uv_thread_t loop_thread;
static item_t items[MAXN];
static item_t blocker;
static int run_order[MAXN];
static atomic_int nruns;
static int done_order[MAXN];
static int ndone;
static int in_call;
static uv_sem_t started;
static uv_sem_t release;
static uv_async_t started_async;
static void (*on_started)(void);
static atomic_int post_runs;
static int space_calls;
static int close_calls;
/* Keeps uv_run from returning until `alive_until` tasks were handed back:
 * a producer blocked in uvs_schedule_wait is not pending work, and the task
 * it gets in must find the loop running. */
static uv_async_t alive;
static int alive_until;


static void item_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  atomic_fetch_add(&it->runs, 1);
  run_order[atomic_fetch_add(&nruns, 1)] = it->id;
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT_EQ(in_call, 0);
  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  ASSERT_LT(ndone, MAXN);
  done_order[ndone++] = it->id;
  if (alive_until != 0 && ndone == alive_until)
    uv_close((uv_handle_t*) &alive, NULL);
}


static void alive_cb(uv_async_t* handle) {
  (void) handle;
}


static void keep_alive_until(int n) {
  alive_until = n;
  ASSERT_OK(uv_async_init(&loop, &alive, alive_cb));
}


/* Runs first on the bounded worker and holds it until `release`. */
static void blocker_run(uvs_task_t* task) {
  item_run(task);
  uv_sem_post(&started);
  if (on_started != NULL)
    uv_async_send(&started_async);
  uv_sem_wait(&release);
}


static void started_async_cb(uv_async_t* handle) {
  ASSERT(test_on_thread(loop_thread));
  on_started();
  uv_close((uv_handle_t*) handle, NULL);
}


static void post_fn(void* arg) {
  (void) arg;
  atomic_fetch_add(&post_runs, 1);
}


static void worker_close_cb(uvs_worker_t* w) {
  ASSERT(test_on_thread(loop_thread));
  ASSERT_PTR_EQ(w, &worker);
  close_calls++;
}


static void init_item(item_t* it, int id, uvs_run_cb run) {
  memset(it, 0, sizeof(*it));
  it->id = id;
  ASSERT_OK(uvs_task_init(&it->task, run, item_done));
}


static void init_items(int n) {
  int i;

  for (i = 0; i < n; i++) init_item(&items[i], i, item_run);
}


/* The blocker has id 100. `cb` (may be NULL) runs on the loop thread once it
 * started. */
static void setup(void (*cb)(void)) {
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_sem_init(&started, 0));
  ASSERT_OK(uv_sem_init(&release, 0));
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  on_started = cb;
  if (cb != NULL)
    ASSERT_OK(uv_async_init(&loop, &started_async, started_async_cb));
  init_item(&blocker, 100, blocker_run);
}


static void teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&started);
  uv_sem_destroy(&release);
}


static void bounded(uvs_where_t where,
                    size_t max_pending,
                    uvs_full_t on_full,
                    size_t low_water,
                    uvs_worker_space_cb space_cb) {
  uvs_worker_options_t o;

  memset(&o, 0, sizeof(o));
  o.max_pending = max_pending;
  o.on_full = on_full;
  o.low_water = low_water;
  o.space_cb = space_cb;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, where, &o));
}


static void get_metrics(uvs_worker_metrics_t* m) {
  ASSERT_OK(uvs_worker_metrics(&worker, m));
}


/* ---- uvs_worker_init_ex ------------------------------------------------ */

/* NULL options: a plain worker, unbounded and FIFO. */
TEST_IMPL(bound_init_ex_null_options) {
  uvs_worker_metrics_t m;
  int i;

  setup(NULL);
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, NULL));
  init_items(MAXN);
  for (i = 0; i < MAXN; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uvs_post(&worker, post_fn, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nruns), MAXN);
  for (i = 0; i < MAXN; i++) {
    ASSERT_EQ(run_order[i], i);
    ASSERT_OK(items[i].status);
  }
  ASSERT_EQ(atomic_load(&post_runs), 1);
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 0);
  ASSERT_UINT64_EQ(m.dropped, 0);
  ASSERT_UINT64_EQ(m.run.count, 0);
  ASSERT_UINT64_EQ(m.wait.count, 0);
  teardown();
  return 0;
}


/* Bad inputs answer UV_EINVAL and leave the worker's memory untouched. */
TEST_IMPL(bound_init_ex_errors) {
  static uvs_worker_t copy;
  uvs_worker_options_t o;
  uvs_stats_t st;

  setup(NULL);
  memset(&o, 0, sizeof(o));
  o.max_pending = 4;
  o.low_water = 1;
  memset(&worker, 0xab, sizeof(worker));
  memcpy(&copy, &worker, sizeof(worker));

  ASSERT_ERR(uvs_worker_init_ex(NULL, &worker, UVS_POOL, &o), UV_EINVAL);
  ASSERT_ERR(uvs_worker_init_ex(&sched, NULL, UVS_POOL, &o), UV_EINVAL);
  ASSERT_ERR(uvs_worker_init_ex(NULL, &worker, UVS_POOL, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, (uvs_where_t) 2, &o),
             UV_EINVAL);
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, (uvs_where_t) -1, NULL),
             UV_EINVAL);
  o.on_full = (uvs_full_t) 3;
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o), UV_EINVAL);
  o.on_full = (uvs_full_t) -1;
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o), UV_EINVAL);
  o.on_full = UVS_FULL_BLOCK;
  o.width = 2;
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &o), UV_EINVAL);
  o.width = 0;
  o.low_water = 4; /* == max_pending */
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o), UV_EINVAL);
  o.low_water = 5; /* > max_pending */
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &o), UV_EINVAL);
  ASSERT_EQ(memcmp(&worker, &copy, sizeof(worker)), 0);

  /* Nothing was added to the scheduler either. */
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 0);

  /* The same options made valid are accepted: width > 1 on the pool, and
   * any low_water when max_pending is 0 (no bound). */
  o.low_water = 3;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &o));
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, NULL));
  o.width = 2;
  o.max_pending = 0;
  o.low_water = 10;
  ASSERT_OK(uvs_worker_init_ex(&sched, &other, UVS_POOL, &o));
  ASSERT_OK(uvs_worker_close(&other, UVS_CANCEL, NULL));
  teardown();
  return 0;
}


TEST_IMPL(bound_init_ex_closing_shutdown) {
  uvs_worker_options_t o;

  setup(NULL);
  memset(&o, 0, sizeof(o));
  o.max_pending = 4;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, NULL), UV_ESHUTDOWN);
  /* UV_EINVAL wins over UV_ESHUTDOWN. */
  o.low_water = 4;
  ASSERT_ERR(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_loop_close(&loop));
  uv_sem_destroy(&started);
  uv_sem_destroy(&release);
  return 0;
}


/* ---- UVS_FULL_REJECT --------------------------------------------------- */

/* From the loop thread, before the loop runs: nothing drains, so the worker
 * stays full. The rejected task stays the user's (never scheduled). */
TEST_IMPL(bound_reject_loop_thread) {
  uvs_worker_metrics_t m;

  setup(NULL);
  bounded(UVS_LOOP, 3, UVS_FULL_REJECT, 0, NULL);
  init_items(5);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uvs_schedule(&worker, &items[2].task));
  ASSERT_ERR(uvs_schedule(&worker, &items[3].task), UV_EAGAIN);
  ASSERT_ERR(uvs_post(&worker, post_fn, NULL), UV_EAGAIN);
  ASSERT_ERR(uvs_task_cancel(&items[3].task), UV_EINVAL);
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.queued, 3);
  ASSERT_UINT64_EQ(m.rejected, 2);
  ASSERT_UINT64_EQ(m.scheduled, 3);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nruns), 3);
  ASSERT_EQ(run_order[0], 0);
  ASSERT_EQ(run_order[1], 1);
  ASSERT_EQ(run_order[2], 2);
  ASSERT_EQ(items[3].done_calls, 0);
  ASSERT_EQ(atomic_load(&items[3].runs), 0);
  ASSERT_EQ(atomic_load(&post_runs), 0);
  /* Room again: the same task is accepted now. */
  ASSERT_OK(uvs_schedule(&worker, &items[3].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(items[3].done_calls, 1);
  ASSERT_OK(items[3].status);
  teardown();
  return 0;
}


/* A running task is not queued: with max_pending 1 and the blocker queued
 * the worker is full; once it runs there is room for one. */
static void running_not_counted_started(void) {
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_ERR(uvs_schedule(&worker, &items[1].task), UV_EAGAIN);
  ASSERT_ERR(uvs_post(&worker, post_fn, NULL), UV_EAGAIN);
  uv_sem_post(&release);
}


TEST_IMPL(bound_reject_running_not_counted) {
  setup(running_not_counted_started);
  bounded(UVS_POOL, 1, UVS_FULL_REJECT, 0, NULL);
  init_items(2);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_ERR(uvs_schedule(&worker, &items[0].task), UV_EAGAIN);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nruns), 2);
  ASSERT_EQ(run_order[0], 100);
  ASSERT_EQ(run_order[1], 0);
  ASSERT_EQ(items[1].done_calls, 0);
  ASSERT_EQ(atomic_load(&post_runs), 0);
  teardown();
  return 0;
}


/* From the run_cb of a task of another pool worker. */
static atomic_int producer_ok;

static void pool_producer_run(uvs_task_t* task) {
  (void) task;
  uv_sem_wait(&started); /* the blocker runs: items[0] is queued */
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_ERR(uvs_schedule(&worker, &items[2].task), UV_EAGAIN);
  ASSERT_ERR(uvs_post(&worker, post_fn, NULL), UV_EAGAIN);
  atomic_store(&producer_ok, 1);
  uv_sem_post(&release);
}


static void producer_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
}


TEST_IMPL(bound_reject_from_pool_task) {
  uvs_task_t producer;
  uvs_worker_metrics_t m;

  setup(NULL);
  bounded(UVS_POOL, 2, UVS_FULL_REJECT, 0, NULL);
  ASSERT_OK(uvs_worker_init(&sched, &other, UVS_POOL));
  init_items(3);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_task_init(&producer, pool_producer_run, producer_done));
  ASSERT_OK(uvs_schedule(&other, &producer));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&producer_ok), 1);
  ASSERT_EQ(atomic_load(&nruns), 3);
  ASSERT_EQ(run_order[0], 100);
  ASSERT_EQ(run_order[1], 0);
  ASSERT_EQ(run_order[2], 1);
  ASSERT_EQ(items[2].done_calls, 0);
  ASSERT_EQ(atomic_load(&post_runs), 0);
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.rejected, 2);
  teardown();
  return 0;
}


static void foreign_producer(void* arg) {
  (void) arg;
  uv_sem_wait(&started);
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_ERR(uvs_schedule(&worker, &items[2].task), UV_EAGAIN);
  ASSERT_ERR(uvs_post(&worker, post_fn, NULL), UV_EAGAIN);
  atomic_store(&producer_ok, 1);
  uv_sem_post(&release);
}


TEST_IMPL(bound_reject_foreign_thread) {
  uv_thread_t thread;

  setup(NULL);
  bounded(UVS_POOL, 2, UVS_FULL_REJECT, 0, NULL);
  init_items(3);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uv_thread_create(&thread, foreign_producer, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(atomic_load(&producer_ok), 1);
  ASSERT_EQ(atomic_load(&nruns), 3);
  ASSERT_EQ(run_order[0], 100);
  ASSERT_EQ(run_order[1], 0);
  ASSERT_EQ(run_order[2], 1);
  ASSERT_EQ(items[2].done_calls, 0);
  ASSERT_EQ(atomic_load(&post_runs), 0);
  teardown();
  return 0;
}


/* Delayed tasks are not queued: they don't count toward max_pending. */
TEST_IMPL(bound_reject_delayed_not_counted) {
  uvs_worker_metrics_t m;
  int i;

  setup(NULL);
  bounded(UVS_LOOP, 2, UVS_FULL_REJECT, 0, NULL);
  init_items(8);
  for (i = 0; i < 5; i++)
    ASSERT_OK(uvs_schedule_after(&worker, &items[i].task, 60000));
  ASSERT_OK(uvs_schedule(&worker, &items[5].task));
  ASSERT_OK(uvs_schedule(&worker, &items[6].task));
  ASSERT_ERR(uvs_schedule(&worker, &items[7].task), UV_EAGAIN);
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.delayed, 5);
  ASSERT_UINT64_EQ(m.queued, 2);
  for (i = 0; i < 5; i++) ASSERT_OK(uvs_task_cancel(&items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nruns), 2);
  for (i = 0; i < 5; i++) ASSERT_ERR(items[i].status, UV_ECANCELED);
  ASSERT_OK(items[5].status);
  ASSERT_OK(items[6].status);
  ASSERT_EQ(items[7].done_calls, 0);
  teardown();
  return 0;
}


/* A delayed task falling due onto a full REJECT worker is handed back with
 * UV_ENOBUFS and never runs. Its done_cb releases the blocker. */
static int due_done_calls;

static void due_done_release(uvs_task_t* task, int status) {
  item_done(task, status);
  due_done_calls++;
  uv_sem_post(&release);
}


static void due_full_started(void) {
  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full */
  ASSERT_OK(uvs_schedule_after(&worker, &items[1].task, 1));
}


static void delayed_due_onto_full(uvs_full_t policy) {
  setup(due_full_started);
  bounded(UVS_POOL, 1, policy, 0, NULL);
  init_items(2);
  ASSERT_OK(uvs_task_init(&items[1].task, item_run, due_done_release));
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(due_done_calls, 1);
  ASSERT_ERR(items[1].status, UV_ENOBUFS);
  ASSERT_EQ(atomic_load(&items[1].runs), 0);
  ASSERT_EQ(atomic_load(&nruns), 2);
  ASSERT_EQ(run_order[0], 100);
  ASSERT_EQ(run_order[1], 0);
  ASSERT_OK(items[0].status);
  ASSERT_OK(blocker.status);
  teardown();
}


TEST_IMPL(bound_reject_delayed_due_enobufs) {
  delayed_due_onto_full(UVS_FULL_REJECT);
  return 0;
}


TEST_IMPL(bound_block_delayed_due_enobufs) {
  delayed_due_onto_full(UVS_FULL_BLOCK);
  return 0;
}


/* A periodic task due onto a full worker skips that grid point: it is not
 * handed back and runs later. The blocker holds the worker full for about
 * eight periods; a uv_timer releases it. */
static uv_timer_t release_timer;
static atomic_int periodic_runs;
static item_t periodic;

static void periodic_run(uvs_task_t* task) {
  if (atomic_fetch_add(&periodic_runs, 1) + 1 == 3)
    ASSERT_OK(uvs_task_cancel(task));
}


static void release_timer_cb(uv_timer_t* handle) {
  ASSERT_EQ(periodic.done_calls, 0);
  ASSERT_EQ(atomic_load(&periodic_runs), 0);
  uv_sem_post(&release);
  uv_close((uv_handle_t*) handle, NULL);
}


static void periodic_full_started(void) {
  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full */
  ASSERT_OK(uvs_schedule_every(&worker, &periodic.task, 5, 5));
  ASSERT_OK(uv_timer_init(&loop, &release_timer));
  ASSERT_OK(uv_timer_start(&release_timer, release_timer_cb, 40, 0));
}


static void periodic_skips(uvs_full_t policy) {
  uvs_worker_metrics_t m;

  setup(periodic_full_started);
  bounded(UVS_POOL, 1, policy, 0, NULL);
  init_items(1);
  init_item(&periodic, 7, periodic_run);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&periodic_runs), 3);
  ASSERT_EQ(periodic.done_calls, 1);
  ASSERT_ERR(periodic.status, UV_ECANCELED);
  ASSERT_OK(items[0].status);
  ASSERT_EQ(atomic_load(&items[0].runs), 1);
  get_metrics(&m);
  ASSERT_UINT64_LE(m.queued_max, 1);
  teardown();
}


TEST_IMPL(bound_reject_periodic_skips) {
  periodic_skips(UVS_FULL_REJECT);
  return 0;
}


/* ---- UVS_FULL_DROP_OLDEST ---------------------------------------------- */

TEST_IMPL(bound_drop_oldest_loop_thread) {
  uvs_worker_metrics_t m;
  int i;

  setup(NULL);
  bounded(UVS_LOOP, 3, UVS_FULL_DROP_OLDEST, 0, NULL);
  init_items(5);
  for (i = 0; i < 5; i++) {
    in_call = 1;
    ASSERT_OK(uvs_schedule(&worker, &items[i].task));
    in_call = 0;
  }
  in_call = 1;
  ASSERT_OK(uvs_post(&worker, post_fn, NULL)); /* drops items[2] */
  in_call = 0;
  ASSERT_EQ(ndone, 0); /* no hand-back inside the call */
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.queued, 3);
  ASSERT_UINT64_EQ(m.dropped, 3);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < 3; i++) {
    ASSERT_ERR(items[i].status, UV_ENOBUFS);
    ASSERT_EQ(atomic_load(&items[i].runs), 0);
  }
  /* The oldest first. */
  ASSERT_EQ(done_order[0], 0);
  ASSERT_EQ(done_order[1], 1);
  ASSERT_EQ(done_order[2], 2);
  ASSERT_EQ(atomic_load(&nruns), 2);
  ASSERT_EQ(run_order[0], 3);
  ASSERT_EQ(run_order[1], 4);
  ASSERT_OK(items[3].status);
  ASSERT_OK(items[4].status);
  ASSERT_EQ(atomic_load(&post_runs), 1);
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.dropped, 3);
  ASSERT_UINT64_EQ(m.ran, 3);
  ASSERT_UINT64_EQ(m.rejected, 0);
  teardown();
  return 0;
}


/* A producer swaps its node into the inbox and is preempted before it
 * links it: the tasks queued behind it are counted but out of reach. A
 * full worker's eviction then stays owed instead of waiting for that
 * producer under the scheduler's lock (which, on the loop thread, would
 * wait forever here), and the next turn settles it before it starts
 * anything: the oldest goes back with UV_ENOBUFS, the rest run. */
TEST_IMPL(bound_drop_oldest_behind_unlinked_push) {
  uvs_worker_metrics_t m;
  uvs__queue_t fake;
  uvs__queue_t* prev;
  int i;

  setup(NULL);
  bounded(UVS_LOOP, 2, UVS_FULL_DROP_OLDEST, 0, NULL);
  init_items(3);
  fake.next = NULL;
  prev = __atomic_exchange_n(&worker.inbox_tail, &fake, __ATOMIC_SEQ_CST);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uvs_schedule(&worker, &items[2].task)); /* full: evicts 0 */
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.queued, 3); /* owed: nothing was in reach */
  ASSERT_UINT64_EQ(m.dropped, 0);

  /* The producer links: here, past its own node, to the first task. */
  __atomic_store_n(&prev->next, &items[0].task.node, __ATOMIC_RELEASE);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(items[0].status, UV_ENOBUFS);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  for (i = 1; i < 3; i++) {
    ASSERT_OK(items[i].status);
    ASSERT_EQ(atomic_load(&items[i].runs), 1);
  }
  ASSERT_EQ(atomic_load(&nruns), 2);
  ASSERT_EQ(run_order[0], 1);
  ASSERT_EQ(run_order[1], 2);
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.queued, 0);
  ASSERT_UINT64_EQ(m.dropped, 1);
  ASSERT_UINT64_EQ(m.ran, 2);
  teardown();
  return 0;
}


/* The blocker runs; 1 and 2 were queued with it (in the drain's batch), 3
 * fits; 4 and 5 evict 1 and 2, never the running blocker. */
static void drop_started(void) {
  ASSERT_OK(uvs_schedule(&worker, &items[3].task)); /* fills */
  ASSERT_EQ(ndone, 0);
  ASSERT_OK(uvs_schedule(&worker, &items[4].task)); /* drops 1 */
  ASSERT_OK(uvs_schedule(&worker, &items[5].task)); /* drops 2 */
  uv_sem_post(&release);
}


TEST_IMPL(bound_drop_oldest_never_running) {
  uvs_worker_metrics_t m;

  setup(drop_started);
  bounded(UVS_POOL, 3, UVS_FULL_DROP_OLDEST, 0, NULL);
  init_items(6);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uvs_schedule(&worker, &items[2].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(blocker.status);
  ASSERT_ERR(items[1].status, UV_ENOBUFS);
  ASSERT_ERR(items[2].status, UV_ENOBUFS);
  ASSERT_EQ(done_order[0], 1);
  ASSERT_EQ(done_order[1], 2);
  ASSERT_EQ(atomic_load(&nruns), 4);
  ASSERT_EQ(run_order[0], 100);
  ASSERT_EQ(run_order[1], 3);
  ASSERT_EQ(run_order[2], 4);
  ASSERT_EQ(run_order[3], 5);
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.dropped, 2);
  teardown();
  return 0;
}


/* A delayed task due onto a full DROP_OLDEST worker evicts the oldest queued
 * task and runs in its place. The evicted task's done_cb releases the
 * blocker. */
static void evicted_done_release(uvs_task_t* task, int status) {
  item_done(task, status);
  ASSERT_ERR(status, UV_ENOBUFS);
  uv_sem_post(&release);
}


TEST_IMPL(bound_drop_oldest_delayed_evicts) {
  uvs_worker_metrics_t m;

  setup(due_full_started);
  bounded(UVS_POOL, 1, UVS_FULL_DROP_OLDEST, 0, NULL);
  init_items(2);
  ASSERT_OK(uvs_task_init(&items[0].task, item_run, evicted_done_release));
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(items[0].status, UV_ENOBUFS);
  ASSERT_EQ(atomic_load(&items[0].runs), 0);
  ASSERT_OK(items[1].status);
  ASSERT_EQ(atomic_load(&nruns), 2);
  ASSERT_EQ(run_order[0], 100);
  ASSERT_EQ(run_order[1], 1);
  get_metrics(&m);
  ASSERT_UINT64_EQ(m.dropped, 1);
  teardown();
  return 0;
}


/* ---- UVS_FULL_BLOCK ---------------------------------------------------- */

/* On the loop thread: uvs_schedule and uvs_schedule_wait answer UV_EAGAIN
 * at once; with room, uvs_schedule_wait accepts at once. */
TEST_IMPL(bound_block_loop_thread_eagain) {
  uint64_t t0;
  uint64_t ms;

  setup(NULL);
  bounded(UVS_LOOP, 2, UVS_FULL_BLOCK, 0, NULL);
  init_items(4);
  ASSERT_OK(uvs_schedule_wait(&worker, &items[0].task, 5000));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_ERR(uvs_schedule(&worker, &items[2].task), UV_EAGAIN);
  ASSERT_ERR(uvs_post(&worker, post_fn, NULL), UV_EAGAIN);
  t0 = test_hrtime_ms();
  ASSERT_ERR(uvs_schedule_wait(&worker, &items[2].task, 3000), UV_EAGAIN);
  ms = test_hrtime_ms() - t0;
  ASSERT_UINT64_LT(ms, 1000);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nruns), 2);
  ASSERT_EQ(items[2].done_calls, 0);
  ASSERT_EQ(atomic_load(&post_runs), 0);
  teardown();
  return 0;
}


/* From a run_cb on a pool thread: UV_EAGAIN at once, never a deadlock (the
 * pool thread might be the one that would make room). */
static atomic_uint_fast64_t wait_ms;
static atomic_int wait_err;

static void pool_waiter_run(uvs_task_t* task) {
  uint64_t t0;

  (void) task;
  t0 = test_hrtime_ms();
  atomic_store(&wait_err, uvs_schedule_wait(&worker, &items[1].task, 3000));
  atomic_store(&wait_ms, test_hrtime_ms() - t0);
  uv_sem_post(&release);
}


static uvs_task_t pool_waiter;

static void pool_waiter_started(void) {
  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full */
  ASSERT_OK(uvs_schedule(&other, &pool_waiter));
}


TEST_IMPL(bound_block_pool_thread_eagain) {
  setup(pool_waiter_started);
  bounded(UVS_POOL, 1, UVS_FULL_BLOCK, 0, NULL);
  ASSERT_OK(uvs_worker_init(&sched, &other, UVS_POOL));
  init_items(2);
  ASSERT_OK(uvs_task_init(&pool_waiter, pool_waiter_run, producer_done));
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(atomic_load(&wait_err), UV_EAGAIN);
  ASSERT_UINT64_LT(atomic_load(&wait_ms), 1000);
  ASSERT_EQ(items[1].done_calls, 0);
  ASSERT_EQ(atomic_load(&nruns), 2);
  teardown();
  return 0;
}


/* A plain uv_queue_work callback on a pool thread that has run a uvsched
 * drain before: uvs_schedule_wait answers UV_EAGAIN at once. With one pool
 * thread, that callback holds it, so the full worker can't make room: a
 * wait there would last until its timeout. */
static uv_work_t plain_req;

static void plain_work(uv_work_t* req) {
  uint64_t t0;

  (void) req;
  t0 = uv_hrtime();
  atomic_store(&wait_err, uvs_schedule_wait(&worker, &items[1].task, 5000));
  atomic_store(&wait_ms, (uv_hrtime() - t0) / 1000000);
}


static void plain_done(uv_work_t* req, int status) {
  (void) req;
  ASSERT_OK(status);
  ASSERT_OK(uvs_worker_resume(&worker)); /* the blocker may run now */
}


TEST_IMPL(bound_block_plain_pool_work_eagain) {
  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "1", 1));
  setup(NULL);
  init_items(2);
  /* The one pool thread runs a uvsched drain first. */
  ASSERT_OK(uvs_worker_init(&sched, &other, UVS_POOL));
  ASSERT_OK(uvs_schedule(&other, &items[0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nruns), 1);
  /* Full: the blocker is queued, its worker suspended so that no drain
   * takes it before plain_work has run (a schedule on the loop thread
   * posts its drain at once, SPEC 0.5); plain_done resumes it. */
  bounded(UVS_POOL, 1, UVS_FULL_BLOCK, 0, NULL);
  init_item(&blocker, 100, item_run);
  ASSERT_OK(uvs_worker_suspend(&worker));
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_queue_work(&loop, &plain_req, plain_work, plain_done));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(atomic_load(&wait_err), UV_EAGAIN);
  ASSERT_UINT64_LT(atomic_load(&wait_ms), 1000);
  ASSERT_EQ(items[1].done_calls, 0);
  ASSERT_EQ(atomic_load(&nruns), 2);
  teardown();
  return 0;
}


/* A foreign thread blocks while the worker is full and is let in when a
 * drain takes a task. The loop checks, when it releases the blocker 50 ms
 * after the producer began waiting, that the wait has not returned: the
 * worker was full all along. */
static atomic_int waiter_returned;
static uv_sem_t waiting;
static uv_thread_t waiter_thread;
static uv_timer_t check_timer;

static void room_waiter(void* arg) {
  (void) arg;
  uv_sem_post(&waiting);
  atomic_store(&wait_err, uvs_schedule_wait(&worker, &items[1].task, 10000));
  atomic_store(&waiter_returned, 1);
}


static void room_check_cb(uv_timer_t* handle) {
  ASSERT_EQ(atomic_load(&waiter_returned), 0);
  uv_sem_post(&release);
  uv_close((uv_handle_t*) handle, NULL);
}


static void room_started(void) {
  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full */
  ASSERT_OK(uv_thread_create(&waiter_thread, room_waiter, NULL));
  uv_sem_wait(&waiting); /* it is about to call uvs_schedule_wait */
  ASSERT_OK(uv_timer_init(&loop, &check_timer));
  ASSERT_OK(uv_timer_start(&check_timer, room_check_cb, 50, 0));
}


TEST_IMPL(bound_block_wait_until_room) {
  ASSERT_OK(uv_sem_init(&waiting, 0));
  setup(room_started);
  bounded(UVS_POOL, 1, UVS_FULL_BLOCK, 0, NULL);
  init_items(2);
  keep_alive_until(3);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&waiter_thread));
  ASSERT_OK(atomic_load(&wait_err));
  ASSERT_EQ(atomic_load(&nruns), 3);
  ASSERT_EQ(run_order[0], 100);
  ASSERT_EQ(run_order[1], 0);
  ASSERT_EQ(run_order[2], 1);
  ASSERT_OK(items[1].status);
  teardown();
  uv_sem_destroy(&waiting);
  return 0;
}


/* Nothing makes room: UV_ETIMEDOUT after about timeout_ms, nothing
 * accepted. The producer releases the blocker when it gives up. */
#define WAIT_TIMEOUT_MS 200

static void timeout_waiter(void* arg) {
  uint64_t t0;

  (void) arg;
  t0 = test_hrtime_ms();
  atomic_store(&wait_err,
               uvs_schedule_wait(&worker, &items[1].task, WAIT_TIMEOUT_MS));
  atomic_store(&wait_ms, test_hrtime_ms() - t0);
  uv_sem_post(&release);
}


static void timeout_started(void) {
  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full */
  ASSERT_OK(uv_thread_create(&waiter_thread, timeout_waiter, NULL));
}


TEST_IMPL(bound_block_wait_timeout) {
  setup(timeout_started);
  bounded(UVS_POOL, 1, UVS_FULL_BLOCK, 0, NULL);
  init_items(2);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&waiter_thread));
  ASSERT_ERR(atomic_load(&wait_err), UV_ETIMEDOUT);
  ASSERT_UINT64_GE(atomic_load(&wait_ms), WAIT_TIMEOUT_MS - 1);
  ASSERT_UINT64_LE(atomic_load(&wait_ms), WAIT_TIMEOUT_MS + 2000);
  ASSERT_EQ(items[1].done_calls, 0);
  ASSERT_EQ(atomic_load(&items[1].runs), 0);
  ASSERT_ERR(uvs_task_cancel(&items[1].task), UV_EINVAL); /* never taken */
  ASSERT_EQ(atomic_load(&nruns), 2);
  teardown();
  return 0;
}


/* A worker close wakes every blocked producer with UV_ESHUTDOWN, long before
 * their timeout. */
#define NWAITERS 3

static uv_thread_t waiters[NWAITERS];
static atomic_int waiter_err[NWAITERS];
static atomic_uint_fast64_t waiter_ms[NWAITERS];
static uv_timer_t close_timer;

static void shutdown_waiter(void* arg) {
  uint64_t t0;
  int i;

  i = (int) (intptr_t) arg;
  uv_sem_post(&waiting);
  t0 = test_hrtime_ms();
  atomic_store(&waiter_err[i],
               uvs_schedule_wait(&worker, &items[1 + i].task, 10000));
  atomic_store(&waiter_ms[i], test_hrtime_ms() - t0);
}


static void close_timer_cb(uv_timer_t* handle) {
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, worker_close_cb));
  uv_sem_post(&release);
  uv_close((uv_handle_t*) handle, NULL);
}


static void shutdown_started(void) {
  int i;

  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full */
  for (i = 0; i < NWAITERS; i++)
    ASSERT_OK(
        uv_thread_create(&waiters[i], shutdown_waiter, (void*) (intptr_t) i));
  for (i = 0; i < NWAITERS; i++) uv_sem_wait(&waiting);
  /* Give them time to block (a producer that has not yet blocked when the
   * close comes answers UV_ESHUTDOWN too). */
  ASSERT_OK(uv_timer_init(&loop, &close_timer));
  ASSERT_OK(uv_timer_start(&close_timer, close_timer_cb, 50, 0));
}


TEST_IMPL(bound_block_close_wakes_all) {
  int i;

  ASSERT_OK(uv_sem_init(&waiting, 0));
  setup(shutdown_started);
  bounded(UVS_POOL, 1, UVS_FULL_BLOCK, 0, NULL);
  init_items(1 + NWAITERS);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < NWAITERS; i++) {
    ASSERT_OK(uv_thread_join(&waiters[i]));
    ASSERT_ERR(atomic_load(&waiter_err[i]), UV_ESHUTDOWN);
    ASSERT_UINT64_LT(atomic_load(&waiter_ms[i]), 5000);
    ASSERT_EQ(items[1 + i].done_calls, 0);
    ASSERT_EQ(atomic_load(&items[1 + i].runs), 0);
  }
  ASSERT_EQ(close_calls, 1);
  ASSERT_OK(blocker.status);
  ASSERT_ERR(items[0].status, UV_ECANCELED);
  teardown();
  uv_sem_destroy(&waiting);
  return 0;
}


/* The close races producers that are blocking or about to: none stays
 * blocked, and each task is accepted and handed back once, or rejected
 * and never heard of again, whatever the interleaving (for TSan). A loop
 * worker filled before the loop runs stays full until the close. Nearly
 * every producer answers UV_ESHUTDOWN; one whose call got past the closing
 * check before the close began, and finds the room the close's sweep of
 * the filler makes, is accepted like any schedule the close overlaps (its
 * task is then handed back with UV_ECANCELED, or runs under UVS_DRAIN). */
#define RACE_ROUNDS 40
#define RACE_PRODUCERS 4

static uvs_task_t race_tasks[RACE_PRODUCERS];
static atomic_int race_err[RACE_PRODUCERS];
static int race_back[RACE_PRODUCERS];
static uv_barrier_t race_barrier;

static void race_run(uvs_task_t* task) {
  (void) task;
}


static void race_done(uvs_task_t* task, int status) {
  (void) task;
  (void) status;
}


/* A producer's task that was accepted comes back once, after its run or
 * cancelled by the close (checked against the answer after the close). */
static void race_task_done(uvs_task_t* task, int status) {
  ASSERT(status == 0 || status == UV_ECANCELED);
  race_back[task - race_tasks]++;
}


static void race_waiter(void* arg) {
  int i;

  i = (int) (intptr_t) arg;
  uv_barrier_wait(&race_barrier);
  atomic_store(&race_err[i], uvs_schedule_wait(&worker, &race_tasks[i], 5000));
}


TEST_IMPL(bound_block_close_race) {
  uv_thread_t threads[RACE_PRODUCERS];
  uvs_task_t filler;
  uint64_t t0;
  int round;
  int i;

  setup(NULL);
  t0 = test_hrtime_ms();
  for (round = 0; round < RACE_ROUNDS; round++) {
    close_calls = 0;
    bounded(UVS_LOOP, 1, UVS_FULL_BLOCK, 0, NULL);
    ASSERT_OK(uvs_task_init(&filler, race_run, race_done));
    ASSERT_OK(uvs_schedule(&worker, &filler)); /* full */
    ASSERT_OK(uv_barrier_init(&race_barrier, RACE_PRODUCERS + 1));
    for (i = 0; i < RACE_PRODUCERS; i++) {
      ASSERT_OK(uvs_task_init(&race_tasks[i], race_run, race_task_done));
      atomic_store(&race_err[i], 1);
      race_back[i] = 0;
      ASSERT_OK(
          uv_thread_create(&threads[i], race_waiter, (void*) (intptr_t) i));
    }
    uv_barrier_wait(&race_barrier);
    /* Vary how far the producers got. */
    test_spin_us((uint64_t) (round % 8) * 50);
    ASSERT_OK(uvs_worker_close(&worker, round % 2 ? UVS_DRAIN : UVS_CANCEL,
                               worker_close_cb));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(close_calls, 1);
    for (i = 0; i < RACE_PRODUCERS; i++) {
      ASSERT_OK(uv_thread_join(&threads[i]));
      /* The close callback came after every hand-back of the worker. */
      if (atomic_load(&race_err[i]) == 0) {
        ASSERT_EQ(race_back[i], 1);
      } else {
        ASSERT_ERR(atomic_load(&race_err[i]), UV_ESHUTDOWN);
        ASSERT_EQ(race_back[i], 0);
      }
    }
    uv_barrier_destroy(&race_barrier);
    /* Bounded in time as well as count. */
    if (test_hrtime_ms() - t0 > 3000)
      break;
  }
  teardown();
  return 0;
}


/* Blocked producers wake in FIFO order: the order their tasks are
 * accepted. Each producer starts 100 ms after the one before, so that it
 * blocks behind it (as far as a test can observe: the library exposes no
 * count of waiters). */
#define NFIFO 3

static uv_timer_t fifo_timer;
static int fifo_started;

static void fifo_waiter(void* arg) {
  int i;

  i = (int) (intptr_t) arg;
  atomic_store(&waiter_err[i],
               uvs_schedule_wait(&worker, &items[1 + i].task, 10000));
}


static void fifo_timer_cb(uv_timer_t* handle) {
  if (fifo_started == NFIFO) {
    uv_sem_post(&release);
    uv_close((uv_handle_t*) handle, NULL);
    return;
  }
  ASSERT_OK(uv_thread_create(&waiters[fifo_started], fifo_waiter,
                             (void*) (intptr_t) fifo_started));
  fifo_started++;
}


static void fifo_started_cb(void) {
  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full */
  ASSERT_OK(uv_timer_init(&loop, &fifo_timer));
  ASSERT_OK(uv_timer_start(&fifo_timer, fifo_timer_cb, 1, 100));
}


TEST_IMPL(bound_block_fifo_wake) {
  int i;

  setup(fifo_started_cb);
  bounded(UVS_POOL, 1, UVS_FULL_BLOCK, 0, NULL);
  init_items(1 + NFIFO);
  keep_alive_until(2 + NFIFO);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < NFIFO; i++) ASSERT_OK(uv_thread_join(&waiters[i]));
  for (i = 0; i < NFIFO; i++) ASSERT_OK(atomic_load(&waiter_err[i]));
  ASSERT_EQ(atomic_load(&nruns), 2 + NFIFO);
  ASSERT_EQ(run_order[0], 100);
  ASSERT_EQ(run_order[1], 0);
  for (i = 0; i < NFIFO; i++) ASSERT_EQ(run_order[2 + i], 1 + i);
  teardown();
  return 0;
}


/* ---- space_cb ---------------------------------------------------------- */

static atomic_int tasks_started_at_space;

static void space_cb(uvs_worker_t* w) {
  ASSERT(test_on_thread(loop_thread));
  ASSERT_PTR_EQ(w, &worker);
  space_calls++;
  atomic_store(&tasks_started_at_space, atomic_load(&nruns));
}


/* Full, then drained: space_cb once, on the loop thread, after queued fell
 * to low_water (so at least max_pending - low_water tasks started). */
static void space_after_full(uvs_where_t where) {
  int i;

  setup(NULL);
  bounded(where, 4, UVS_FULL_REJECT, 1, space_cb);
  init_items(4);
  for (i = 0; i < 4; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_EQ(space_calls, 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nruns), 4);
  ASSERT_EQ(space_calls, 1);
  ASSERT_GE(atomic_load(&tasks_started_at_space), 3);
  teardown();
}


TEST_IMPL(space_cb_after_full_loop) {
  space_after_full(UVS_LOOP);
  return 0;
}


TEST_IMPL(space_cb_after_full_pool) {
  space_after_full(UVS_POOL);
  return 0;
}


TEST_IMPL(space_cb_not_if_never_full) {
  int i;

  setup(NULL);
  bounded(UVS_POOL, 4, UVS_FULL_REJECT, 1, space_cb);
  init_items(8);
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 3; i < 6; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&nruns), 6);
  ASSERT_EQ(space_calls, 0);
  teardown();
  return 0;
}


TEST_IMPL(space_cb_each_episode) {
  int i;

  setup(NULL);
  bounded(UVS_LOOP, 2, UVS_FULL_REJECT, 0, space_cb);
  init_items(6);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(space_calls, 1);
  /* Not full this time. */
  ASSERT_OK(uvs_schedule(&worker, &items[2].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(space_calls, 1);
  /* Full again, even through a rejection. */
  ASSERT_OK(uvs_schedule(&worker, &items[3].task));
  ASSERT_OK(uvs_schedule(&worker, &items[4].task));
  ASSERT_ERR(uvs_schedule(&worker, &items[5].task), UV_EAGAIN);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(space_calls, 2);
  for (i = 0; i < 5; i++) ASSERT_OK(items[i].status);
  teardown();
  return 0;
}


/* Once the worker began closing, space_cb is not called, whether the close
 * runs the queue (DRAIN) or empties it (CANCEL). */
static void space_not_after_close(uvs_close_how_t how) {
  int i;

  setup(NULL);
  bounded(UVS_LOOP, 3, UVS_FULL_REJECT, 1, space_cb);
  init_items(3);
  for (i = 0; i < 3; i++) ASSERT_OK(uvs_schedule(&worker, &items[i].task));
  ASSERT_OK(uvs_worker_close(&worker, how, worker_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(ndone, 3);
  ASSERT_EQ(atomic_load(&nruns), how == UVS_DRAIN ? 3 : 0);
  ASSERT_EQ(space_calls, 0);
  teardown();
}


TEST_IMPL(space_cb_not_after_close_drain) {
  space_not_after_close(UVS_DRAIN);
  return 0;
}


TEST_IMPL(space_cb_not_after_close_cancel) {
  space_not_after_close(UVS_CANCEL);
  return 0;
}


/* A DROP_OLDEST eviction takes a task out and puts one in, as one step:
 * queued never falls, so it must not count as the worker draining to
 * low_water. Here low_water = max_pending - 1, the blocker holds the worker
 * full, and two evictions happen; space_cb must wait for the real drain. */
static uv_timer_t space_timer;

static void space_check_timer_cb(uv_timer_t* handle) {
  ASSERT_EQ(space_calls, 0);
  uv_sem_post(&release);
  uv_close((uv_handle_t*) handle, NULL);
}


static void evict_started(void) {
  ASSERT_OK(uvs_schedule(&worker, &items[0].task));
  ASSERT_OK(uvs_schedule(&worker, &items[1].task)); /* full */
  ASSERT_OK(uvs_schedule(&worker, &items[2].task)); /* evicts 0 */
  ASSERT_OK(uvs_schedule(&worker, &items[3].task)); /* evicts 1 */
  ASSERT_OK(uv_timer_init(&loop, &space_timer));
  ASSERT_OK(uv_timer_start(&space_timer, space_check_timer_cb, 50, 0));
}


TEST_IMPL(space_cb_not_on_eviction) {
  setup(evict_started);
  bounded(UVS_POOL, 2, UVS_FULL_DROP_OLDEST, 1, space_cb);
  init_items(4);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(items[0].status, UV_ENOBUFS);
  ASSERT_ERR(items[1].status, UV_ENOBUFS);
  ASSERT_OK(items[2].status);
  ASSERT_OK(items[3].status);
  ASSERT_EQ(space_calls, 1);
  teardown();
  return 0;
}


/* Foreign producers against a small bounded pool worker, for TSan: every
 * accepted task is handed back exactly once (run, or with DROP_OLDEST
 * evicted with UV_ENOBUFS), a rejected one never; what runs of each
 * producer runs in its order; the bound holds; the counters agree. */
#define BP_PRODUCERS 3
#define BP_PER 400

typedef struct {
  uvs_task_t task;
  int producer;
  int seq;
  int status;
  int done_calls;
  int accepted;
} bp_item_t;

static bp_item_t bp_items[BP_PRODUCERS][BP_PER];
static int bp_last_run[BP_PRODUCERS];
static int bp_done;
static int bp_enobufs;
static int bp_ran_done;
static atomic_int bp_accepted;
static atomic_int bp_rejected;
static atomic_int bp_producers_left;
static uv_async_t bp_async;

static void bp_maybe_finish(void) {
  if (atomic_load(&bp_producers_left) == 0 &&
      bp_done == atomic_load(&bp_accepted)) {
    uv_close((uv_handle_t*) &bp_async, NULL);
    ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, worker_close_cb));
  }
}


static void bp_run(uvs_task_t* task) {
  bp_item_t* it;

  it = TEST_CONTAINER_OF(task, bp_item_t, task);
  /* Plain: one at a time (guarantee 2). */
  ASSERT_LT(bp_last_run[it->producer], it->seq);
  bp_last_run[it->producer] = it->seq;
  if (it->seq % 16 == 0)
    test_spin_us(30);
}


static void bp_done_cb(uvs_task_t* task, int status) {
  bp_item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, bp_item_t, task);
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  it->status = status;
  if (status == UV_ENOBUFS)
    bp_enobufs++;
  else {
    ASSERT_OK(status);
    bp_ran_done++;
  }
  bp_done++;
  bp_maybe_finish();
}


static void bp_async_cb(uv_async_t* handle) {
  (void) handle;
  bp_maybe_finish();
}


static void bp_producer(void* arg) {
  bp_item_t* it;
  int p;
  int i;
  int err;

  p = (int) (intptr_t) arg;
  for (i = 0; i < BP_PER; i++) {
    it = &bp_items[p][i];
    err = uvs_schedule(&worker, &it->task);
    if (err == 0) {
      it->accepted = 1;
      atomic_fetch_add(&bp_accepted, 1);
    } else {
      ASSERT_ERR(err, UV_EAGAIN);
      atomic_fetch_add(&bp_rejected, 1);
    }
  }
  atomic_fetch_sub(&bp_producers_left, 1);
  uv_async_send(&bp_async);
}


static void bounded_producers(uvs_full_t policy) {
  uv_thread_t threads[BP_PRODUCERS];
  uvs_worker_metrics_t m;
  int p;
  int i;

  setup(NULL);
  bounded(UVS_POOL, 8, policy, 2, NULL);
  ASSERT_OK(uv_async_init(&loop, &bp_async, bp_async_cb));
  atomic_store(&bp_producers_left, BP_PRODUCERS);
  for (p = 0; p < BP_PRODUCERS; p++) {
    bp_last_run[p] = -1;
    for (i = 0; i < BP_PER; i++) {
      bp_items[p][i].producer = p;
      bp_items[p][i].seq = i;
      ASSERT_OK(uvs_task_init(&bp_items[p][i].task, bp_run, bp_done_cb));
    }
  }
  for (p = 0; p < BP_PRODUCERS; p++)
    ASSERT_OK(uv_thread_create(&threads[p], bp_producer, (void*) (intptr_t) p));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (p = 0; p < BP_PRODUCERS; p++) ASSERT_OK(uv_thread_join(&threads[p]));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(atomic_load(&bp_accepted) + atomic_load(&bp_rejected),
            BP_PRODUCERS * BP_PER);
  ASSERT_EQ(bp_done, atomic_load(&bp_accepted));
  for (p = 0; p < BP_PRODUCERS; p++)
    for (i = 0; i < BP_PER; i++)
      ASSERT_EQ(bp_items[p][i].done_calls, bp_items[p][i].accepted);
  get_metrics(&m);
  ASSERT_UINT64_LE(m.queued_max, 8);
  ASSERT_UINT64_EQ(m.ran, bp_ran_done);
  ASSERT_UINT64_EQ(m.rejected, atomic_load(&bp_rejected));
  ASSERT_UINT64_EQ(m.dropped, bp_enobufs);
  ASSERT_UINT64_EQ(m.scheduled, atomic_load(&bp_accepted));
  if (policy == UVS_FULL_DROP_OLDEST)
    ASSERT_EQ(atomic_load(&bp_rejected), 0);
  else
    ASSERT_EQ(bp_enobufs, 0);
  teardown();
}


TEST_IMPL(bound_reject_producers) {
  bounded_producers(UVS_FULL_REJECT);
  return 0;
}


TEST_IMPL(bound_drop_oldest_producers) {
  bounded_producers(UVS_FULL_DROP_OLDEST);
  return 0;
}


/* A scheduler close wakes the blocked producers of its workers too. */
static void sched_close_timer_cb(uv_timer_t* handle) {
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
  uv_sem_post(&release);
  uv_close((uv_handle_t*) handle, NULL);
}


static void sched_shutdown_started(void) {
  int i;

  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full */
  for (i = 0; i < NWAITERS; i++)
    ASSERT_OK(
        uv_thread_create(&waiters[i], shutdown_waiter, (void*) (intptr_t) i));
  for (i = 0; i < NWAITERS; i++) uv_sem_wait(&waiting);
  ASSERT_OK(uv_timer_init(&loop, &close_timer));
  ASSERT_OK(uv_timer_start(&close_timer, sched_close_timer_cb, 50, 0));
}


TEST_IMPL(bound_block_sched_close_wakes_all) {
  int i;

  ASSERT_OK(uv_sem_init(&waiting, 0));
  setup(sched_shutdown_started);
  bounded(UVS_POOL, 1, UVS_FULL_BLOCK, 0, NULL);
  init_items(1 + NWAITERS);
  ASSERT_OK(uvs_schedule(&worker, &blocker.task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < NWAITERS; i++) {
    ASSERT_OK(uv_thread_join(&waiters[i]));
    ASSERT_ERR(atomic_load(&waiter_err[i]), UV_ESHUTDOWN);
    ASSERT_UINT64_LT(atomic_load(&waiter_ms[i]), 5000);
    ASSERT_EQ(items[1 + i].done_calls, 0);
  }
  ASSERT_OK(uv_loop_close(&loop));
  uv_sem_destroy(&started);
  uv_sem_destroy(&release);
  uv_sem_destroy(&waiting);
  return 0;
}


/* timeout_ms 0 on a full BLOCK worker: UV_ETIMEDOUT at once, and on a full
 * REJECT worker uvs_schedule_wait does not block: UV_EAGAIN at once. */
static atomic_int zero_err;
static atomic_int reject_wait_err;

static void zero_waiter(void* arg) {
  (void) arg;
  atomic_store(&zero_err, uvs_schedule_wait(&worker, &items[1].task, 0));
}


TEST_IMPL(bound_block_wait_zero_timeout) {
  uv_thread_t thread;
  uint64_t t0;

  setup(NULL);
  bounded(UVS_LOOP, 1, UVS_FULL_BLOCK, 0, NULL);
  init_items(2);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full; loop not run */
  t0 = test_hrtime_ms();
  ASSERT_OK(uv_thread_create(&thread, zero_waiter, NULL));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_UINT64_LT(test_hrtime_ms() - t0, 1000);
  ASSERT_ERR(atomic_load(&zero_err), UV_ETIMEDOUT);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(items[1].done_calls, 0);
  teardown();
  return 0;
}


static void reject_waiter(void* arg) {
  (void) arg;
  atomic_store(&reject_wait_err,
               uvs_schedule_wait(&worker, &items[1].task, 10000));
}


TEST_IMPL(bound_reject_wait_eagain) {
  uv_thread_t thread;
  uint64_t t0;

  setup(NULL);
  bounded(UVS_LOOP, 1, UVS_FULL_REJECT, 0, NULL);
  init_items(2);
  ASSERT_OK(uvs_schedule(&worker, &items[0].task)); /* full; loop not run */
  t0 = test_hrtime_ms();
  ASSERT_OK(uv_thread_create(&thread, reject_waiter, NULL));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_UINT64_LT(test_hrtime_ms() - t0, 1000);
  ASSERT_ERR(atomic_load(&reject_wait_err), UV_EAGAIN);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(items[1].done_calls, 0);
  teardown();
  return 0;
}
