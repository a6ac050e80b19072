#include "task.h"

#include "helpers.h"
#include "internal.h"

#include <stdatomic.h>

typedef struct {
  uvs_task_t task;
  int id;
  atomic_int ran;
  int status;
  int done_calls;
  int cancel_rc;
} ctask_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_thread_t loop_thread;
static ctask_t tasks[64];
static int done_calls;
static int done_cancelled;
static int in_call;
static uv_sem_t go;


static void run_cb(uvs_task_t* task) {
  ctask_t* t;

  t = TEST_CONTAINER_OF(task, ctask_t, task);
  atomic_fetch_add(&t->ran, 1);
}


static void done_cb(uvs_task_t* task, int status) {
  ctask_t* t;

  ASSERT_EQ(in_call, 0);
  ASSERT(test_on_thread(loop_thread));
  t = TEST_CONTAINER_OF(task, ctask_t, task);
  t->status = status;
  t->done_calls++;
  ASSERT_EQ(t->done_calls, 1);
  done_calls++;
  if (status == UV_ECANCELED) {
    ASSERT_EQ(atomic_load(&t->ran), 0);
    done_cancelled++;
  } else {
    ASSERT_OK(status);
    ASSERT_EQ(atomic_load(&t->ran), 1);
  }
}


static void setup(uvs_where_t where) {
  int i;

  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, where));
  for (i = 0; i < 64; i++) {
    tasks[i].id = i;
    ASSERT_OK(uvs_task_init(&tasks[i].task, run_cb, done_cb));
  }
}


TEST_IMPL(cancel_never_scheduled) {
  setup(UVS_LOOP);
  ASSERT_ERR(uvs_task_cancel(&tasks[0].task), UV_EINVAL);
  ASSERT_ERR(uvs_task_cancel(&tasks[0].task), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(cancel_queued_loop) {
  setup(UVS_LOOP);
  ASSERT_OK(uvs_schedule(&worker, &tasks[0].task));
  ASSERT_OK(uvs_schedule(&worker, &tasks[1].task));
  ASSERT_OK(uvs_schedule(&worker, &tasks[2].task));
  in_call = 1;
  ASSERT_OK(uvs_task_cancel(&tasks[1].task));
  in_call = 0;
  ASSERT_EQ(done_calls, 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 3);
  ASSERT_EQ(done_cancelled, 1);
  ASSERT_ERR(tasks[1].status, UV_ECANCELED);
  ASSERT_OK(tasks[0].status);
  ASSERT_OK(tasks[2].status);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(cancel_twice_busy) {
  setup(UVS_POOL);
  ASSERT_OK(uvs_schedule_after(&worker, &tasks[0].task, 60000));
  ASSERT_OK(uvs_task_cancel(&tasks[0].task));
  /* Already cancelled, not handed back yet. */
  ASSERT_ERR(uvs_task_cancel(&tasks[0].task), UV_EBUSY);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  /* Handed back. */
  ASSERT_ERR(uvs_task_cancel(&tasks[0].task), UV_EBUSY);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(cancel_after_done_busy) {
  setup(UVS_POOL);
  ASSERT_OK(uvs_schedule(&worker, &tasks[0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  ASSERT_OK(tasks[0].status);
  ASSERT_ERR(uvs_task_cancel(&tasks[0].task), UV_EBUSY);
  /* It can be scheduled again, and cancelled again. */
  ASSERT_OK(uvs_schedule_after(&worker, &tasks[0].task, 60000));
  ASSERT_OK(uvs_task_cancel(&tasks[0].task));
  tasks[0].done_calls = 0;
  atomic_store(&tasks[0].ran, 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 2);
  ASSERT_ERR(tasks[0].status, UV_ECANCELED);
  /* Initialised again: never scheduled since. */
  ASSERT_OK(uvs_task_init(&tasks[0].task, run_cb, done_cb));
  ASSERT_ERR(uvs_task_cancel(&tasks[0].task), UV_EINVAL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A delayed task's hand-back follows within one loop iteration. */
TEST_IMPL(cancel_delayed_prompt) {
  uint64_t start;

  setup(UVS_LOOP);
  ASSERT_OK(uvs_schedule_after(&worker, &tasks[0].task, 60000));
  ASSERT_OK(uvs_schedule_after(&worker, &tasks[1].task, 30000));
  (void) uv_run(&loop, UV_RUN_NOWAIT);
  ASSERT_EQ(done_calls, 0);
  ASSERT_OK(uvs_task_cancel(&tasks[0].task));
  (void) uv_run(&loop, UV_RUN_NOWAIT);
  ASSERT_EQ(done_calls, 1);
  ASSERT_ERR(tasks[0].status, UV_ECANCELED);
  start = uv_hrtime();
  ASSERT_OK(uvs_task_cancel(&tasks[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 2);
  /* Well before the 30 s it was due. */
  ASSERT_UINT64_LT(uv_hrtime() - start, 10000 * (uint64_t) 1000000);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A pool worker busy with a long task: a queued task's cancel hands it back
 * while the long task still runs (the long task waits for the semaphore that
 * the cancelled task's done_cb posts). */
static uv_async_t started_async;

static void long_run_cb(uvs_task_t* task) {
  run_cb(task);
  uv_async_send(&started_async);
  uv_sem_wait(&go);
}


static void cancel_some_cb(uv_async_t* handle) {
  int i;

  for (i = 1; i < 6; i += 2) {
    in_call = 1;
    ASSERT_OK(uvs_task_cancel(&tasks[i].task));
    in_call = 0;
  }
  uv_close((uv_handle_t*) handle, NULL);
}


static void cancelled_done_post_cb(uvs_task_t* task, int status) {
  done_cb(task, status);
  if (status == UV_ECANCELED) {
    /* The long task is still running. */
    ASSERT_EQ(tasks[0].done_calls, 0);
    if (done_cancelled == 3)
      uv_sem_post(&go);
  }
}


TEST_IMPL(cancel_queued_while_busy) {
  int i;

  ASSERT_OK(uv_sem_init(&go, 0));
  setup(UVS_POOL);
  ASSERT_OK(uv_async_init(&loop, &started_async, cancel_some_cb));
  ASSERT_OK(uvs_task_init(&tasks[0].task, long_run_cb, done_cb));
  for (i = 0; i < 7; i++) {
    if (i > 0)
      ASSERT_OK(uvs_task_init(&tasks[i].task, run_cb, cancelled_done_post_cb));
    ASSERT_OK(uvs_schedule(&worker, &tasks[i].task));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 7);
  ASSERT_EQ(done_cancelled, 3);
  for (i = 0; i < 7; i++) ASSERT_ERR(tasks[i].status, i & 1 ? UV_ECANCELED : 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  return 0;
}


/* The same with the cancels made on a foreign thread while the long task
 * runs. */
static void foreign_cancel_thread(void* arg) {
  int i;

  (void) arg;
  for (i = 1; i < 7; i += 2) ASSERT_OK(uvs_task_cancel(&tasks[i].task));
}


static uv_sem_t started;

static void long_run2_cb(uvs_task_t* task) {
  run_cb(task);
  uv_sem_post(&started);
  uv_sem_wait(&go);
}


static void starter_thread(void* arg) {
  uv_thread_t t;

  (void) arg;
  uv_sem_wait(&started);
  ASSERT_OK(uv_thread_create(&t, foreign_cancel_thread, NULL));
  ASSERT_OK(uv_thread_join(&t));
}


TEST_IMPL(cancel_foreign_thread_while_busy) {
  uv_thread_t thread;
  int i;

  ASSERT_OK(uv_sem_init(&go, 0));
  ASSERT_OK(uv_sem_init(&started, 0));
  setup(UVS_POOL);
  ASSERT_OK(uvs_task_init(&tasks[0].task, long_run2_cb, done_cb));
  for (i = 0; i < 7; i++) {
    if (i > 0)
      ASSERT_OK(uvs_task_init(&tasks[i].task, run_cb, cancelled_done_post_cb));
    if (i & 1)
      ASSERT_OK(
          uvs_schedule_after(&worker, &tasks[i].task, i == 5 ? 60000 : 0));
    else
      ASSERT_OK(uvs_schedule(&worker, &tasks[i].task));
  }
  ASSERT_OK(uv_thread_create(&thread, starter_thread, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(done_calls, 7);
  ASSERT_EQ(done_cancelled, 3);
  for (i = 0; i < 7; i++) ASSERT_ERR(tasks[i].status, i & 1 ? UV_ECANCELED : 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  uv_sem_destroy(&started);
  return 0;
}


/* A one-shot task can't cancel itself while it runs. */
static void self_cancel_run_cb(uvs_task_t* task) {
  run_cb(task);
  ASSERT_ERR(uvs_task_cancel(task), UV_EBUSY);
}


TEST_IMPL(cancel_running_oneshot_busy) {
  setup(UVS_POOL);
  ASSERT_OK(uvs_task_init(&tasks[0].task, self_cancel_run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&worker, &tasks[0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  ASSERT_OK(tasks[0].status);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A periodic task cancelled from inside its run_cb: 0, then EBUSY; handed
 * back with UV_ECANCELED after that run returned, and never runs again. */
static atomic_int periodic_in_run;
static atomic_int periodic_runs;

static void periodic_cancel_run_cb(uvs_task_t* task) {
  atomic_store(&periodic_in_run, 1);
  if (atomic_fetch_add(&periodic_runs, 1) + 1 == 3) {
    ASSERT_OK(uvs_task_cancel(task));
    ASSERT_ERR(uvs_task_cancel(task), UV_EBUSY);
    ASSERT_ERR(uvs_schedule(&worker, task), UV_EBUSY);
    /* Make a done_cb that came too early visible. */
    test_spin_ms(5);
  }
  atomic_store(&periodic_in_run, 0);
}


static void periodic_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_EQ(atomic_load(&periodic_in_run), 0);
  ASSERT_ERR(status, UV_ECANCELED);
  ASSERT_EQ(atomic_load(&periodic_runs), 3);
  done_calls++;
}


static void periodic_cancel_in_run(uvs_where_t where) {
  setup(where);
  ASSERT_OK(
      uvs_task_init(&tasks[0].task, periodic_cancel_run_cb, periodic_done_cb));
  ASSERT_OK(uvs_schedule_every(&worker, &tasks[0].task, 1, 2));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  ASSERT_EQ(atomic_load(&periodic_runs), 3);
  ASSERT_ERR(uvs_task_cancel(&tasks[0].task), UV_EBUSY);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(cancel_periodic_in_run_pool) {
  periodic_cancel_in_run(UVS_POOL);
  return 0;
}


TEST_IMPL(cancel_periodic_in_run_loop) {
  periodic_cancel_in_run(UVS_LOOP);
  return 0;
}


/* Cancelled from the loop thread between runs. */
static int outside_runs;

static void outside_run_cb(uvs_task_t* task) {
  (void) task;
  outside_runs++;
}


static void outside_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_ERR(status, UV_ECANCELED);
  done_calls++;
}


static void outside_timer_cb(uv_timer_t* handle) {
  if (outside_runs >= 3) {
    ASSERT_OK(uvs_task_cancel(&tasks[0].task));
    ASSERT_ERR(uvs_task_cancel(&tasks[0].task), UV_EBUSY);
    tasks[0].cancel_rc = outside_runs;
    uv_close((uv_handle_t*) handle, NULL);
  }
}


TEST_IMPL(cancel_periodic_between_runs) {
  uv_timer_t timer;

  setup(UVS_LOOP);
  ASSERT_OK(uvs_task_init(&tasks[0].task, outside_run_cb, outside_done_cb));
  ASSERT_OK(uvs_schedule_every(&worker, &tasks[0].task, 0, 3));
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, outside_timer_cb, 1, 1));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  /* No run after the cancel. */
  ASSERT_EQ(outside_runs, tasks[0].cancel_rc);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* done_cb(UV_ECANCELED) may schedule the task again. */
static void resched_done_cb(uvs_task_t* task, int status) {
  ctask_t* t;

  t = TEST_CONTAINER_OF(task, ctask_t, task);
  done_calls++;
  if (status == UV_ECANCELED) {
    ASSERT_EQ(atomic_load(&t->ran), 0);
    ASSERT_OK(uvs_schedule(&worker, task));
  } else {
    ASSERT_OK(status);
    ASSERT_EQ(atomic_load(&t->ran), 1);
  }
}


TEST_IMPL(cancel_then_reschedule_in_done) {
  setup(UVS_POOL);
  ASSERT_OK(uvs_task_init(&tasks[0].task, run_cb, resched_done_cb));
  ASSERT_OK(uvs_schedule_after(&worker, &tasks[0].task, 60000));
  ASSERT_OK(uvs_task_cancel(&tasks[0].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 2);
  ASSERT_EQ(atomic_load(&tasks[0].ran), 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Race: a foreign thread cancels tasks while a pool worker runs them. For
 * every task, cancel returned 0 exactly when it never ran, and it was handed
 * back exactly once. */
#define RACE_N 2000

static ctask_t race_tasks[RACE_N];
static atomic_int race_rc[RACE_N];
static atomic_int race_go;

static void race_done_cb(uvs_task_t* task, int status) {
  done_cb(task, status);
  if (done_calls == RACE_N)
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void race_cancel_thread(void* arg) {
  int i;
  int from;

  from = (int) (intptr_t) arg;
  while (!atomic_load(&race_go)) {
  }
  for (i = from; i < RACE_N; i += 2)
    atomic_store(&race_rc[i], uvs_task_cancel(&race_tasks[i].task));
}


static void race_run_cb(uvs_task_t* task) {
  run_cb(task);
  atomic_store(&race_go, 1);
}


TEST_IMPL(cancel_vs_run_race) {
  uvs_sched_options_t opts;
  uv_thread_t threads[2];
  int i;
  int rc;
  int cancelled;

  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  opts.budget = 8;
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  for (i = 0; i < RACE_N; i++) {
    atomic_store(&race_rc[i], 1);
    ASSERT_OK(uvs_task_init(&race_tasks[i].task, race_run_cb, race_done_cb));
    if (i % 5 == 4)
      ASSERT_OK(uvs_schedule_after(&worker, &race_tasks[i].task, i % 3));
    else
      ASSERT_OK(uvs_schedule(&worker, &race_tasks[i].task));
  }
  for (i = 0; i < 2; i++)
    ASSERT_OK(uv_thread_create(&threads[i], race_cancel_thread,
                               (void*) (intptr_t) i));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < 2; i++) ASSERT_OK(uv_thread_join(&threads[i]));
  ASSERT_EQ(done_calls, RACE_N);
  cancelled = 0;
  for (i = 0; i < RACE_N; i++) {
    rc = atomic_load(&race_rc[i]);
    ASSERT_EQ(race_tasks[i].done_calls, 1);
    if (rc == 0) {
      ASSERT_ERR(race_tasks[i].status, UV_ECANCELED);
      ASSERT_EQ(atomic_load(&race_tasks[i].ran), 0);
      cancelled++;
    } else {
      ASSERT_ERR(rc, UV_EBUSY);
      ASSERT_OK(race_tasks[i].status);
      ASSERT_EQ(atomic_load(&race_tasks[i].ran), 1);
    }
  }
  ASSERT_EQ(cancelled, done_cancelled);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* A task scheduled from a foreign thread is in flight through the bridge
 * while the loop thread is busy; cancelling it there returns 0, it never
 * runs, and it is handed back once. Until then it is still in custody: a
 * schedule is refused. */
static uv_sem_t loop_blocked;
static atomic_int bridge_sched_rc = 1;
static atomic_int bridge_cancel_rc = 1;
static atomic_int bridge_resched_rc = 1;
static atomic_int bridge_recancel_rc = 1;

static void bridge_thread(void* arg) {
  uvs_worker_t* w;

  w = arg;
  uv_sem_wait(&loop_blocked);
  atomic_store(&bridge_sched_rc, uvs_schedule(w, &tasks[0].task));
  atomic_store(&bridge_cancel_rc, uvs_task_cancel(&tasks[0].task));
  atomic_store(&bridge_recancel_rc, uvs_task_cancel(&tasks[0].task));
  atomic_store(&bridge_resched_rc, uvs_schedule(w, &tasks[0].task));
  uv_sem_post(&go);
}


static void block_loop_cb(uv_timer_t* handle) {
  /* Hold the loop thread until the foreign thread is done. */
  uv_sem_post(&loop_blocked);
  uv_sem_wait(&go);
  uv_close((uv_handle_t*) handle, NULL);
}


static void cancel_in_flight(uvs_where_t where) {
  uvs_sched_options_t opts;
  uv_thread_t thread;
  uv_timer_t timer;

  ASSERT_OK(uv_sem_init(&go, 0));
  ASSERT_OK(uv_sem_init(&loop_blocked, 0));
  memset(&opts, 0, sizeof(opts));
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &worker, where));
  ASSERT_OK(uvs_task_init(&tasks[0].task, run_cb, done_cb));
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, block_loop_cb, 1, 0));
  ASSERT_OK(uv_thread_create(&thread, bridge_thread, &worker));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(atomic_load(&bridge_sched_rc));
  ASSERT_OK(atomic_load(&bridge_cancel_rc));
  ASSERT_ERR(atomic_load(&bridge_recancel_rc), UV_EBUSY);
  ASSERT_ERR(atomic_load(&bridge_resched_rc), UV_EBUSY);
  ASSERT_EQ(done_calls, 1);
  ASSERT_EQ(done_cancelled, 1);
  ASSERT_EQ(atomic_load(&tasks[0].ran), 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  uv_sem_destroy(&loop_blocked);
}


TEST_IMPL(cancel_in_flight_pool) {
  cancel_in_flight(UVS_POOL);
  return 0;
}


TEST_IMPL(cancel_in_flight_loop) {
  cancel_in_flight(UVS_LOOP);
  return 0;
}


/* A periodic task cancelled from another thread while its run_cb executes:
 * cancel returns 0 and the hand-back comes after that run returns. */
static atomic_int prun_active;
static atomic_int prun_count;
static atomic_int prun_cancel_rc = 1;

static void prun_run_cb(uvs_task_t* task) {
  (void) task;
  atomic_store(&prun_active, 1);
  if (atomic_fetch_add(&prun_count, 1) == 0) {
    uv_sem_post(&started);
    uv_sem_wait(&go);
    test_spin_ms(2);
  }
  atomic_store(&prun_active, 0);
}


static void prun_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_EQ(atomic_load(&prun_active), 0);
  ASSERT_ERR(status, UV_ECANCELED);
  done_calls++;
}


static void prun_canceller(void* arg) {
  (void) arg;
  uv_sem_wait(&started);
  atomic_store(&prun_cancel_rc, uvs_task_cancel(&tasks[0].task));
  ASSERT_ERR(uvs_task_cancel(&tasks[0].task), UV_EBUSY);
  uv_sem_post(&go);
}


TEST_IMPL(cancel_periodic_running_foreign) {
  uv_thread_t thread;

  ASSERT_OK(uv_sem_init(&go, 0));
  ASSERT_OK(uv_sem_init(&started, 0));
  setup(UVS_POOL);
  ASSERT_OK(uvs_task_init(&tasks[0].task, prun_run_cb, prun_done_cb));
  ASSERT_OK(uvs_schedule_every(&worker, &tasks[0].task, 0, 1));
  ASSERT_OK(uv_thread_create(&thread, prun_canceller, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(atomic_load(&prun_cancel_rc));
  ASSERT_EQ(done_calls, 1);
  ASSERT_EQ(atomic_load(&prun_count), 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  uv_sem_destroy(&started);
  return 0;
}


/* A task whose run_cb returned is not cancellable any more, whether its
 * done_cb was called yet or not: the next task of the same worker gets
 * UV_EBUSY. On a loop worker (one thread, no race) a schedule made before
 * the done_cb is refused too: the task is still in custody.
 *
 * On a pool worker task 0 may run alone in the drain's first batch, and its
 * done_cb, which resets its `ran` for a second acceptance, may come before
 * the peer runs: the peer checks that task 0's run_cb returned with a count
 * that nothing resets (guarantee 2 makes it visible), not with `ran`. */
static atomic_int peer_cancel_rc = 1;
static int peer_sched_rc = 1;
static int peer_saw_done;
static atomic_int first_returned;

static void first_run_cb(uvs_task_t* task) {
  run_cb(task);
  atomic_fetch_add(&first_returned, 1);
}


static void peer_run_cb(uvs_task_t* task) {
  run_cb(task);
  ASSERT_EQ(atomic_load(&first_returned), 1);
  atomic_store(&peer_cancel_rc, uvs_task_cancel(&tasks[0].task));
  if (worker.where == UVS_LOOP) {
    peer_saw_done = tasks[0].done_calls;
    peer_sched_rc = uvs_schedule(&worker, &tasks[0].task);
  }
}


static void again_done_cb(uvs_task_t* task, int status) {
  ctask_t* t;

  t = TEST_CONTAINER_OF(task, ctask_t, task);
  ASSERT_OK(status);
  done_cb(task, status);
  /* Ready for a second acceptance after this hand-back. */
  t->done_calls = 0;
  atomic_store(&t->ran, 0);
}


static void finished_awaiting_done(uvs_where_t where) {
  setup(where);
  ASSERT_OK(uvs_task_init(&tasks[1].task, peer_run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&tasks[0].task, first_run_cb, again_done_cb));
  ASSERT_OK(uvs_schedule(&worker, &tasks[0].task));
  ASSERT_OK(uvs_schedule(&worker, &tasks[1].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_cancelled, 0);
  ASSERT_ERR(atomic_load(&peer_cancel_rc), UV_EBUSY);
  if (where == UVS_LOOP) {
    if (peer_saw_done) {
      ASSERT_OK(peer_sched_rc);
      ASSERT_EQ(done_calls, 3);
    } else {
      ASSERT_ERR(peer_sched_rc, UV_EBUSY);
      ASSERT_EQ(done_calls, 2);
    }
  } else {
    ASSERT_EQ(done_calls, 2);
  }
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(cancel_finished_busy_pool) {
  finished_awaiting_done(UVS_POOL);
  return 0;
}


TEST_IMPL(cancel_finished_busy_loop) {
  finished_awaiting_done(UVS_LOOP);
  return 0;
}


/* A cancel of a task behind a producer that has swapped itself in as the
 * inbox's tail but not linked yet waits for that producer without the
 * scheduler's lock: another worker's drain, which needs the lock for each
 * batch, goes on meanwhile. The preempted producer is played by hand: one
 * exchange of the tail with a node of our own, then, to resume it, the
 * link that skips that node. Holding the lock while waiting, as the cancel
 * once did, stops the chain below and the test fails at its deadline (or
 * hangs in uv_run until meson's timeout). */
#define CHAIN 50

static uvs_worker_t chain_worker;
static uvs_task_t chain[CHAIN];
static atomic_int chain_ran;
static atomic_int unlinked_cancel_rc;
static atomic_int unlinked_cancel_returned;
static atomic_int unlinked_done_calls;
static uv_sem_t unlinked_cancelling;
static uvs_task_t unlinked;
static int unlinked_status;


static void chain_run(uvs_task_t* task) {
  int i;

  i = (int) (task - chain);
  uv_sleep(1); /* work long enough that the cancel is waiting by now */
  atomic_fetch_add(&chain_ran, 1);
  if (i + 1 < CHAIN)
    ASSERT_OK(uvs_schedule(&chain_worker, &chain[i + 1]));
}


static void unlinked_run(uvs_task_t* task) {
  (void) task;
  ASSERT(0 && "a cancelled task ran");
}


static void unlinked_done(uvs_task_t* task, int status) {
  (void) task;
  unlinked_status = status;
  atomic_fetch_add(&unlinked_done_calls, 1);
}


static void unlinked_canceller(void* arg) {
  (void) arg;
  uv_sem_post(&unlinked_cancelling);
  atomic_store(&unlinked_cancel_rc, uvs_task_cancel(&unlinked));
  atomic_store(&unlinked_cancel_returned, 1);
}


TEST_IMPL(cancel_waits_for_producer_without_lock) {
  uvs__queue_t fake;
  uvs__queue_t* prev;
  uv_thread_t thread;
  int i;

  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &chain_worker, UVS_POOL));
  ASSERT_OK(uv_sem_init(&unlinked_cancelling, 0));
  for (i = 0; i < CHAIN; i++)
    ASSERT_OK(uvs_task_init(&chain[i], chain_run, NULL));
  ASSERT_OK(uvs_task_init(&unlinked, unlinked_run, unlinked_done));

  /* A producer swaps in its node and is preempted before linking it; the
   * task scheduled next links itself behind that node. */
  fake.next = NULL;
  prev = __atomic_exchange_n(&worker.inbox_tail, &fake, __ATOMIC_SEQ_CST);
  ASSERT_OK(uvs_schedule(&worker, &unlinked));
  ASSERT_PTR_EQ(fake.next, &unlinked.node);

  ASSERT_OK(uv_thread_create(&thread, unlinked_canceller, NULL));
  uv_sem_wait(&unlinked_cancelling);
  ASSERT_OK(uvs_schedule(&chain_worker, &chain[0]));
  TEST_RUN_UNTIL(&loop, atomic_load(&chain_ran) == CHAIN);
  /* All that time the cancel waited for the link. */
  ASSERT_EQ(atomic_load(&unlinked_cancel_returned), 0);

  /* The producer runs again and links its node: here, past ours. */
  __atomic_store_n(&prev->next, &unlinked.node, __ATOMIC_RELEASE);
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(atomic_load(&unlinked_cancel_rc));
  TEST_RUN_UNTIL(&loop, atomic_load(&unlinked_done_calls) == 1);
  ASSERT_ERR(unlinked_status, UV_ECANCELED);
  test_settle(&loop);
  ASSERT_EQ(atomic_load(&unlinked_done_calls), 1);
  uv_sem_destroy(&unlinked_cancelling);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
