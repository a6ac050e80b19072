/* Barriers (SPEC.md, "0.4 additions"): uvs_schedule_barrier(w, task)
 * accepts task as a barrier and queues it like a task.
 *
 * - Its run_cb starts only after every task queued on w or running when it
 *   was accepted has returned from run_cb (or been handed back unrun); it
 *   runs while no other run_cb of w runs; no task that joins w's queue
 *   after it (accepted later, or a delayed task falling due later) starts
 *   before it returns. Delayed tasks not yet due are not waited for.
 * - On a serial worker it is an ordinary schedule. It belongs to no key,
 *   counts as one queued task against max_pending with the worker's
 *   on_full (UVS_FULL_BLOCK: UV_EAGAIN), and can be cancelled and evicted.
 * - done_cb(barrier, 0) comes after the done_cb of every task that ran
 *   before it and before that of any task that runs after it.
 * - Errors as uvs_schedule.
 *
 * Each test lays out a plan: tasks and barriers in schedule order. A task's
 * phase is the number of (live) barriers before it in the plan, a barrier's
 * index the number before it. Every run_cb checks the plan as it starts and
 * ends: a task of phase p finds exactly p barriers started and returned and
 * no barrier running; barrier k finds itself the only run_cb of the worker,
 * every task of phases 0..k returned, and k barriers returned. Afterwards
 * the done_cb positions are checked the same way. */

#include "helpers.h"

#include <stdatomic.h>

#define MAXI 256
#define MAXP 16

typedef struct {
  uvs_task_t task;
  int id;
  int is_barrier;
  int gone;  /* a barrier cancelled or evicted: not counted in phases */
  int index; /* a task: its phase; a barrier: its index */
  uint64_t key;
  uint64_t spin_us;
  test_latch_t* hold_started; /* non-NULL: hold run_cb until released */
  test_latch_t* hold_release;
  atomic_int runs;
  int done_calls;
  int status;
  int done_pos;
} item_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uv_thread_t loop_thread;
static uvs_worker_t worker;
static item_t items[MAXI];
static int nitems;
static int phase_total[MAXP];
static atomic_int phase_ended[MAXP];
static atomic_int running_all;
static atomic_int peak_running;
static atomic_int barrier_running;
static atomic_int barriers_started;
static atomic_int barriers_returned;
static atomic_int run_order[MAXI];
static atomic_int nruns;
static int ndone;
static int close_calls;


/* keep_alive: for schedules from other threads while the loop may be idle
 * (docs/guarantees.rst: a foreign schedule can't wake an idle loop). */
static void setup_opts(int manual_clock, int keep_alive) {
  uvs_sched_options_t o;

  memset(&o, 0, sizeof(o));
  o.manual_clock = manual_clock;
  o.keep_alive = keep_alive;
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
}


static void teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


/* A width-N pool worker (N > 1), optionally bounded. */
static void wide_init(unsigned width, size_t max_pending, uvs_full_t on_full) {
  uvs_worker_options_t o;

  memset(&o, 0, sizeof(o));
  o.width = width;
  o.max_pending = max_pending;
  o.on_full = on_full;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o));
}


static void raise_peak(int now) {
  int prev;

  prev = atomic_load(&peak_running);
  while (now > prev &&
         !atomic_compare_exchange_weak(&peak_running, &prev, now)) {
  }
}


static void hold(item_t* it) {
  if (it->hold_started == NULL)
    return;
  test_latch_add(it->hold_started, 1);
  ASSERT(test_latch_wait(it->hold_release, 1, TEST_WAIT_MS));
}


static void task_run(item_t* it) {
  int now;

  now = atomic_fetch_add(&running_all, 1) + 1;
  raise_peak(now);
  ASSERT_EQ(atomic_load(&barrier_running), 0);
  ASSERT_EQ(atomic_load(&barriers_returned), it->index);
  ASSERT_EQ(atomic_load(&barriers_started), it->index);
  run_order[atomic_fetch_add(&nruns, 1)] = it->id;
  hold(it);
  if (it->spin_us != 0)
    test_spin_us(it->spin_us);
  ASSERT_EQ(atomic_load(&barrier_running), 0);
  atomic_fetch_add(&phase_ended[it->index], 1);
  atomic_fetch_sub(&running_all, 1);
}


static void barrier_run(item_t* it) {
  int k;
  int p;

  k = it->index;
  /* Alone: no other run_cb of the worker. */
  ASSERT_EQ(atomic_fetch_add(&running_all, 1), 0);
  atomic_store(&barrier_running, 1);
  ASSERT_EQ(atomic_load(&barriers_returned), k);
  ASSERT_EQ(atomic_fetch_add(&barriers_started, 1), k);
  /* Every task before it has returned. */
  for (p = 0; p <= k; p++)
    ASSERT_EQ(atomic_load(&phase_ended[p]), phase_total[p]);
  run_order[atomic_fetch_add(&nruns, 1)] = it->id;
  hold(it);
  /* Long enough for a task that should wait to be caught running. */
  test_spin_us(it->spin_us != 0 ? it->spin_us : 2000);
  ASSERT_EQ(atomic_load(&running_all), 1);
  /* No later task started meanwhile. */
  for (p = k + 1; p < MAXP; p++) ASSERT_EQ(atomic_load(&phase_ended[p]), 0);
  atomic_store(&barrier_running, 0);
  atomic_fetch_add(&barriers_returned, 1);
  atomic_fetch_sub(&running_all, 1);
}


static void item_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  ASSERT_EQ(atomic_fetch_add(&it->runs, 1), 0);
  ASSERT(!it->gone);
  if (worker.where == UVS_LOOP)
    ASSERT(test_on_thread(loop_thread));
  if (it->is_barrier)
    barrier_run(it);
  else
    task_run(it);
}


static void item_done(uvs_task_t* task, int status) {
  item_t* it;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  it->done_pos = ndone++;
  if (status == 0)
    ASSERT_EQ(atomic_load(&it->runs), 1);
  else
    ASSERT_EQ(atomic_load(&it->runs), 0);
}


/* Phases and indexes from the plan, skipping barriers that are gone. */
static void plan_recompute(void) {
  int b;
  int i;

  b = 0;
  memset(phase_total, 0, sizeof(phase_total));
  for (i = 0; i < nitems; i++) {
    if (items[i].is_barrier) {
      if (items[i].gone)
        continue;
      items[i].index = b++;
    } else {
      items[i].index = b;
      if (!items[i].gone)
        phase_total[b]++;
    }
  }
  ASSERT_LT(b, MAXP);
}


static item_t* plan_add(int is_barrier, uint64_t key, uint64_t spin_us) {
  item_t* it;

  ASSERT_LT(nitems, MAXI);
  it = &items[nitems];
  memset(it, 0, sizeof(*it));
  it->id = nitems++;
  it->is_barrier = is_barrier;
  it->key = key;
  it->spin_us = spin_us;
  it->done_pos = -1;
  ASSERT_OK(uvs_task_init(&it->task, item_run, item_done));
  /* A barrier's key is ignored: give some of them one. */
  ASSERT_OK(uvs_task_set_key(&it->task, key));
  plan_recompute();
  return it;
}


/* n tasks of keys cycling over 0..nkeys-1 (0: no key), some longer. */
static void plan_tasks(int n, int nkeys) {
  int i;

  for (i = 0; i < n; i++)
    plan_add(0, (uint64_t) (nitems % nkeys), (nitems % 5 == 0) ? 800 : 100);
}


static int submit(item_t* it) {
  if (it->is_barrier)
    return uvs_schedule_barrier(&worker, &it->task);
  return uvs_schedule(&worker, &it->task);
}


static void submit_range(int from, int to) {
  int i;

  for (i = from; i < to; i++) ASSERT_OK(submit(&items[i]));
}


/* After everything was handed back: each item that is not gone ran once
 * with status 0; barriers' done_cbs sit between their phases'. */
static void check_after(void) {
  int i;
  int j;

  for (i = 0; i < nitems; i++) {
    if (items[i].gone)
      continue;
    ASSERT_EQ(items[i].done_calls, 1);
    ASSERT_OK(items[i].status);
    ASSERT_EQ(atomic_load(&items[i].runs), 1);
  }
  for (i = 0; i < nitems; i++) {
    item_t* b = &items[i];
    if (!b->is_barrier || b->gone)
      continue;
    for (j = 0; j < nitems; j++) {
      item_t* t = &items[j];
      if (t == b || t->gone)
        continue;
      if (t->is_barrier) {
        if (t->index < b->index)
          ASSERT_LT(t->done_pos, b->done_pos);
        else
          ASSERT_GT(t->done_pos, b->done_pos);
      } else if (t->index <= b->index) {
        ASSERT_LT(t->done_pos, b->done_pos);
      } else {
        ASSERT_GT(t->done_pos, b->done_pos);
      }
    }
  }
  ASSERT_EQ(atomic_load(&barrier_running), 0);
  ASSERT_EQ(atomic_load(&running_all), 0);
  ASSERT_LE(atomic_load(&peak_running), 4);
}


static int live_count(void) {
  int i;
  int n;

  n = 0;
  for (i = 0; i < nitems; i++) n += !items[i].gone;
  return n;
}


/* ---- errors ------------------------------------------------------------ */

static void count_close(uvs_worker_t* w) {
  (void) w;
  close_calls++;
}


TEST_IMPL(barrier_errors) {
  uvs_worker_t wc;
  uvs_worker_t wl;
  item_t* a;
  item_t* b;
  item_t* c;

  setup_opts(0, 0);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  a = plan_add(0, 0, 0);
  b = plan_add(1, 0, 0);
  c = plan_add(0, 0, 0); /* never accepted */
  c->gone = 1;
  plan_recompute();
  ASSERT_ERR(uvs_schedule_barrier(NULL, &a->task), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_barrier(&worker, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_barrier(NULL, NULL), UV_EINVAL);

  /* A task that is queued (as a task or as a barrier): UV_EBUSY, and the
   * call changed nothing. */
  ASSERT_OK(uvs_schedule(&worker, &a->task));
  ASSERT_ERR(uvs_schedule_barrier(&worker, &a->task), UV_EBUSY);
  ASSERT_OK(uvs_schedule_barrier(&worker, &b->task));
  ASSERT_ERR(uvs_schedule_barrier(&worker, &b->task), UV_EBUSY);
  ASSERT_ERR(uvs_schedule(&worker, &b->task), UV_EBUSY);

  /* A closing worker, then closed: UV_ESHUTDOWN, also over UV_EBUSY (a is
   * queued on the other worker). */
  ASSERT_OK(uvs_worker_init(&sched, &wc, UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &wl, UVS_LOOP));
  ASSERT_OK(uvs_worker_close(&wc, UVS_CANCEL, count_close));
  ASSERT_ERR(uvs_schedule_barrier(&wc, &c->task), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_schedule_barrier(&wc, &a->task), UV_ESHUTDOWN);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_ERR(uvs_schedule_barrier(&wc, &c->task), UV_ESHUTDOWN);
  ASSERT_EQ(ndone, 2);
  ASSERT_EQ(c->done_calls, 0);
  check_after();

  /* A worker of a closing scheduler. */
  close_calls = 0;
  sched.data = &close_calls;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, test_close_cb_counter));
  ASSERT_ERR(uvs_schedule_barrier(&wl, &c->task), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_schedule_barrier(&worker, &c->task), UV_ESHUTDOWN);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(c->done_calls, 0);
  ASSERT_EQ(atomic_load(&c->runs), 0);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* ---- serial workers: an ordinary schedule ------------------------------ */

static void serial(uvs_where_t where) {
  int i;

  setup_opts(0, 0);
  ASSERT_OK(uvs_worker_init(&sched, &worker, where));
  plan_add(0, 0, 0);
  plan_add(0, 1, 0);
  plan_add(1, 0, 0);
  plan_add(0, 2, 0);
  plan_add(0, 0, 0);
  plan_add(1, 5, 0);
  plan_add(0, 0, 0);
  submit_range(0, nitems);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, nitems);
  ASSERT_EQ(atomic_load(&nruns), nitems);
  for (i = 0; i < nitems; i++) {
    ASSERT_EQ(run_order[i], i);
    ASSERT_EQ(items[i].done_pos, i);
  }
  check_after();
  teardown();
}


TEST_IMPL(barrier_serial_pool) {
  serial(UVS_POOL);
  return 0;
}


TEST_IMPL(barrier_serial_loop) {
  serial(UVS_LOOP);
  return 0;
}


/* ---- wide workers ------------------------------------------------------ */

/* Width 4, tasks of nine keys (and none) before and after: all scheduled
 * before the loop runs. */
TEST_IMPL(barrier_wide) {
  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  setup_opts(0, 0);
  wide_init(4, 0, UVS_FULL_REJECT);
  plan_tasks(40, 10);
  plan_add(1, 3, 0);
  plan_tasks(40, 10);
  submit_range(0, nitems);
  TEST_RUN_UNTIL(&loop, ndone == nitems);
  check_after();
  ASSERT_EQ(atomic_load(&barriers_returned), 1);
  teardown();
  return 0;
}


/* The same, scheduled by a foreign thread while the loop runs, so that
 * earlier tasks are running when the barrier is accepted; several
 * barriers, two of them back to back, one last. */
static void foreign_submit(void* arg) {
  (void) arg;
  submit_range(0, nitems);
}


TEST_IMPL(barrier_wide_foreign_several) {
  uv_thread_t thread;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  setup_opts(0, 1);
  wide_init(4, 0, UVS_FULL_REJECT);
  plan_tasks(30, 9);
  plan_add(1, 0, 0);
  plan_add(1, 7, 0);
  plan_tasks(30, 9);
  plan_add(1, 0, 500);
  plan_tasks(30, 9);
  plan_add(1, 2, 0);
  ASSERT_OK(uv_thread_create(&thread, foreign_submit, NULL));
  TEST_RUN_UNTIL(&loop, ndone == nitems);
  ASSERT_OK(uv_thread_join(&thread));
  check_after();
  ASSERT_EQ(atomic_load(&barriers_returned), 4);
  teardown();
  return 0;
}


/* Four tasks hold all four lanes; tasks wait behind them, then the
 * barrier, then more tasks. While the four hold, nothing else starts; once
 * they let go the barrier waits for the queued ones too. */
TEST_IMPL(barrier_wide_waits_running) {
  test_latch_t started;
  test_latch_t release;
  item_t* b;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  setup_opts(0, 0);
  wide_init(4, 0, UVS_FULL_REJECT);
  for (i = 0; i < 4; i++) {
    item_t* h = plan_add(0, (uint64_t) (i + 1), 0);
    h->hold_started = &started;
    h->hold_release = &release;
  }
  submit_range(0, 4);
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 4);
  plan_tasks(8, 8);
  b = plan_add(1, 0, 0);
  plan_tasks(8, 8);
  submit_range(4, nitems);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&nruns), 4);
  ASSERT_EQ(atomic_load(&barriers_started), 0);
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == nitems);
  check_after();
  /* Started after the 12 earlier tasks, before the 8 later ones. */
  ASSERT_EQ(run_order[12], b->id);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* The barrier holds its run_cb while the manual clock makes a delayed task
 * due: that task joined the queue after the barrier, so it waits for it,
 * as do the tasks accepted after the barrier. A delayed task not yet due
 * when the barrier was accepted is not waited for. */
TEST_IMPL(barrier_wide_delayed) {
  test_latch_t started;
  test_latch_t release;
  item_t* d;
  item_t* b;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  setup_opts(1, 0);
  wide_init(4, 0, UVS_FULL_REJECT);
  plan_tasks(8, 5);
  b = plan_add(1, 0, 0);
  b->hold_started = &started;
  b->hold_release = &release;
  plan_tasks(8, 5);
  d = plan_add(0, 9, 0); /* due after the barrier: phase 1 */
  ASSERT_OK(uvs_schedule_after(&worker, &d->task, 10));
  submit_range(0, nitems - 1);
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  ASSERT_EQ(atomic_load(&d->runs), 0);
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&d->runs), 0);
  ASSERT_EQ(atomic_load(&nruns), 9); /* 8 tasks and the barrier */
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == nitems);
  check_after();
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* ---- cancel ------------------------------------------------------------ */

/* A barrier cancelled while queued: UV_ECANCELED within a loop iteration
 * though every lane is busy; then the later tasks run as if it had never
 * been. */
TEST_IMPL(barrier_cancel_wide) {
  test_latch_t started;
  test_latch_t release;
  item_t* b;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  setup_opts(0, 0);
  wide_init(4, 0, UVS_FULL_REJECT);
  for (i = 0; i < 4; i++) {
    item_t* h = plan_add(0, (uint64_t) (i + 1), 0);
    h->hold_started = &started;
    h->hold_release = &release;
  }
  submit_range(0, 4);
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 4);
  plan_tasks(6, 7);
  b = plan_add(1, 0, 0);
  plan_tasks(6, 7);
  submit_range(4, nitems);
  ASSERT_OK(uvs_task_cancel(&b->task));
  ASSERT_ERR(uvs_task_cancel(&b->task), UV_EBUSY);
  b->gone = 1;
  plan_recompute();
  TEST_RUN_UNTIL(&loop, b->done_calls == 1);
  ASSERT_ERR(b->status, UV_ECANCELED);
  ASSERT_EQ(ndone, 1);
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == nitems);
  ASSERT_EQ(atomic_load(&b->runs), 0);
  ASSERT_EQ(atomic_load(&nruns), nitems - 1);
  check_after();
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


TEST_IMPL(barrier_cancel_loop) {
  item_t* b;

  setup_opts(0, 0);
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  plan_add(0, 0, 0);
  b = plan_add(1, 0, 0);
  plan_add(0, 0, 0);
  submit_range(0, nitems);
  ASSERT_OK(uvs_task_cancel(&b->task));
  b->gone = 1;
  plan_recompute();
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(b->status, UV_ECANCELED);
  ASSERT_EQ(atomic_load(&nruns), 2);
  check_after();
  teardown();
  return 0;
}


/* ---- max_pending and on_full ------------------------------------------- */

static uvs_worker_metrics_t metrics(void) {
  uvs_worker_metrics_t m;

  memset(&m, 0xff, sizeof(m));
  ASSERT_OK(uvs_worker_metrics(&worker, &m));
  return m;
}


/* A loop worker with max_pending 3 (the loop not running: what is
 * scheduled stays queued): a barrier counts as one queued task; on a full
 * worker UVS_FULL_REJECT and UVS_FULL_BLOCK both answer UV_EAGAIN. */
static void bounded_eagain(uvs_full_t on_full) {
  uvs_worker_options_t o;
  item_t* late;
  item_t* lateb;

  setup_opts(0, 0);
  memset(&o, 0, sizeof(o));
  o.max_pending = 3;
  o.on_full = on_full;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &o));
  plan_add(0, 0, 0);
  plan_add(1, 0, 0);
  ASSERT_EQ(nitems, 2);
  submit_range(0, 2);
  ASSERT_UINT64_EQ(metrics().queued, 2);
  plan_add(0, 0, 0);
  submit_range(2, 3);
  ASSERT_UINT64_EQ(metrics().queued, 3);
  late = plan_add(0, 0, 0);
  lateb = plan_add(1, 0, 0);
  ASSERT_ERR(uvs_schedule(&worker, &late->task), UV_EAGAIN);
  ASSERT_ERR(uvs_schedule_barrier(&worker, &lateb->task), UV_EAGAIN);
  ASSERT_UINT64_EQ(metrics().rejected, 2);
  ASSERT_UINT64_EQ(metrics().queued, 3);
  ASSERT_EQ(ndone, 0);
  /* Neither was accepted: they are free to go again once there is room. */
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 3);
  ASSERT_EQ(late->done_calls, 0);
  ASSERT_EQ(lateb->done_calls, 0);
  ASSERT_OK(uvs_schedule(&worker, &late->task));
  ASSERT_OK(uvs_schedule_barrier(&worker, &lateb->task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 5);
  ASSERT_EQ(run_order[3], late->id);
  ASSERT_EQ(run_order[4], lateb->id);
  check_after();
  teardown();
}


TEST_IMPL(barrier_bounded_reject) {
  bounded_eagain(UVS_FULL_REJECT);
  return 0;
}


TEST_IMPL(barrier_bounded_block) {
  bounded_eagain(UVS_FULL_BLOCK);
  return 0;
}


/* UVS_FULL_DROP_OLDEST: a barrier onto a full worker is accepted and
 * evicts the oldest queued task; a queued barrier is evicted like a task
 * (UV_ENOBUFS). */
TEST_IMPL(barrier_bounded_drop_oldest) {
  uvs_worker_options_t o;
  item_t* b0;
  item_t* t1;
  item_t* t2;
  item_t* b3;

  setup_opts(0, 0);
  memset(&o, 0, sizeof(o));
  o.max_pending = 2;
  o.on_full = UVS_FULL_DROP_OLDEST;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &o));
  b0 = plan_add(1, 0, 0);
  t1 = plan_add(0, 0, 0);
  t2 = plan_add(0, 0, 0);
  b3 = plan_add(1, 0, 0);
  ASSERT_OK(submit(b0));
  ASSERT_OK(submit(t1));
  ASSERT_OK(submit(t2)); /* evicts b0 */
  b0->gone = 1;
  ASSERT_OK(submit(b3)); /* evicts t1 */
  t1->gone = 1;
  plan_recompute();
  ASSERT_UINT64_EQ(metrics().queued, 2);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_ERR(b0->status, UV_ENOBUFS);
  ASSERT_ERR(t1->status, UV_ENOBUFS);
  ASSERT_EQ(atomic_load(&b0->runs), 0);
  ASSERT_EQ(atomic_load(&t1->runs), 0);
  ASSERT_EQ(ndone, 4);
  ASSERT_EQ(atomic_load(&nruns), 2);
  ASSERT_EQ(run_order[0], t2->id);
  ASSERT_EQ(run_order[1], b3->id);
  ASSERT_UINT64_EQ(metrics().dropped, 2);
  check_after();
  teardown();
  return 0;
}


/* A wide bounded worker: lanes held, two tasks and a barrier fill it
 * (running tasks do not count), the next task or barrier is refused. */
TEST_IMPL(barrier_bounded_wide_reject) {
  test_latch_t started;
  test_latch_t release;
  item_t* extra;
  item_t* extrab;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  setup_opts(0, 0);
  wide_init(4, 3, UVS_FULL_REJECT);
  /* One at a time: four at once would not fit. */
  for (i = 0; i < 4; i++) {
    item_t* h = plan_add(0, (uint64_t) (i + 1), 0);
    h->hold_started = &started;
    h->hold_release = &release;
    submit_range(i, i + 1);
    TEST_RUN_UNTIL(&loop, test_latch_count(&started) == i + 1);
  }
  plan_add(0, 6, 0);
  plan_add(0, 7, 0);
  plan_add(1, 8, 0);
  submit_range(4, 7);
  ASSERT_UINT64_EQ(metrics().queued, 3);
  extra = plan_add(0, 9, 0);
  extrab = plan_add(1, 0, 0);
  ASSERT_ERR(uvs_schedule(&worker, &extra->task), UV_EAGAIN);
  ASSERT_ERR(uvs_schedule_barrier(&worker, &extrab->task), UV_EAGAIN);
  extra->gone = 1;
  extrab->gone = 1;
  plan_recompute();
  ASSERT_UINT64_EQ(metrics().rejected, 2);
  test_latch_add(&release, 1);
  TEST_RUN_UNTIL(&loop, ndone == live_count());
  check_after();
  ASSERT_EQ(extra->done_calls, 0);
  ASSERT_EQ(extrab->done_calls, 0);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* Per-key bounds file tasks as they are accepted: a barrier's followers
 * wait on its held list, and a key's oldest there is what DROP_OLDEST
 * evicts. Several barriers among tasks of ten keys keep their order. */
TEST_IMPL(barrier_wide_key_bounds) {
  uvs_worker_options_t o;
  item_t* t1;
  item_t* t2;
  item_t* t3;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  setup_opts(0, 0);
  memset(&o, 0, sizeof(o));
  o.width = 4;
  o.key_max_pending = 64;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o));
  plan_tasks(30, 10);
  plan_add(1, 3, 0);
  plan_tasks(30, 10);
  plan_add(1, 0, 0);
  plan_add(1, 5, 0);
  plan_tasks(30, 10);
  submit_range(0, nitems);
  TEST_RUN_UNTIL(&loop, ndone == nitems);
  check_after();
  ASSERT_EQ(atomic_load(&barriers_returned), 3);
  teardown();

  /* Key 7 bounded at 2: the third task of key 7 behind the barrier
   * evicts the first, which waits on the held list. */
  memset(items, 0, sizeof(items));
  nitems = 0;
  ndone = 0;
  atomic_store(&nruns, 0);
  atomic_store(&barriers_started, 0);
  atomic_store(&barriers_returned, 0);
  atomic_store(&peak_running, 0);
  for (i = 0; i < MAXP; i++) atomic_store(&phase_ended[i], 0);
  setup_opts(0, 0);
  o.key_max_pending = 2;
  o.on_full = UVS_FULL_DROP_OLDEST;
  ASSERT_OK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &o));
  plan_add(0, 1, 100);
  plan_add(1, 7, 0);
  t1 = plan_add(0, 7, 100);
  t2 = plan_add(0, 7, 100);
  t3 = plan_add(0, 7, 100);
  submit_range(0, nitems);
  t1->gone = 1;
  plan_recompute();
  TEST_RUN_UNTIL(&loop, ndone == nitems);
  ASSERT_ERR(t1->status, UV_ENOBUFS);
  ASSERT_EQ(atomic_load(&t1->runs), 0);
  ASSERT_EQ(run_order[2], t2->id);
  ASSERT_EQ(run_order[3], t3->id);
  check_after();
  teardown();
  return 0;
}
