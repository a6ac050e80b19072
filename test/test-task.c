#include "task.h"

#include <stdatomic.h>

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t pool_w;
static uvs_worker_t loop_w;
static uv_thread_t loop_thread;
static atomic_int runs;
static int done_calls;
static int done_cancelled;
static int last_status = 1;
static int in_call;


static void run_cb(uvs_task_t* task) {
  (void) task;
  ASSERT_EQ(in_call, 0);
  atomic_fetch_add(&runs, 1);
}


static void done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_EQ(in_call, 0);
  ASSERT(test_on_thread(loop_thread));
  done_calls++;
  last_status = status;
  if (status == UV_ECANCELED)
    done_cancelled++;
  else
    ASSERT_OK(status);
}


static void setup(void) {
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &pool_w, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &loop_w, UVS_LOOP));
}


TEST_IMPL(task_init_errors) {
  uvs_task_t task;

  ASSERT_ERR(uvs_task_init(NULL, run_cb, done_cb), UV_EINVAL);
  ASSERT_ERR(uvs_task_init(&task, NULL, done_cb), UV_EINVAL);
  ASSERT_ERR(uvs_task_init(&task, NULL, NULL), UV_EINVAL);
  ASSERT_OK(uvs_task_init(&task, run_cb, NULL));
  ASSERT(task.run_cb == run_cb);
  ASSERT(task.done_cb == NULL);
  ASSERT_OK(uvs_task_init(&task, run_cb, done_cb));
  ASSERT(task.done_cb == done_cb);
  return 0;
}


TEST_IMPL(task_schedule_null_args) {
  uvs_task_t task;

  setup();
  ASSERT_OK(uvs_task_init(&task, run_cb, done_cb));
  ASSERT_ERR(uvs_schedule(NULL, &task), UV_EINVAL);
  ASSERT_ERR(uvs_schedule(&pool_w, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_after(NULL, &task, 1), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_after(&pool_w, NULL, 1), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(NULL, &task, 1, 1), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(&pool_w, NULL, 1, 1), UV_EINVAL);
  ASSERT_ERR(uvs_task_cancel(NULL), UV_EINVAL);
  ASSERT_ERR(uvs_post(NULL, free, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_post(&pool_w, NULL, NULL), UV_EINVAL);
  /* None of these were accepted. */
  ASSERT_ERR(uvs_task_cancel(&task), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 0);
  ASSERT_EQ(atomic_load(&runs), 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(task_schedule_limits) {
  uvs_task_t t[6];
  uint64_t max;
  int i;

  max = (uint64_t) 1 << 40;
  setup();
  for (i = 0; i < 6; i++) ASSERT_OK(uvs_task_init(&t[i], run_cb, done_cb));
  ASSERT_ERR(uvs_schedule_after(&loop_w, &t[0], max + 1), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_after(&loop_w, &t[0], UINT64_MAX), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(&loop_w, &t[0], max + 1, 1), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(&loop_w, &t[0], 1, max + 1), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(&loop_w, &t[0], 0, 0), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(&loop_w, &t[0], 5, 0), UV_EINVAL);
  /* 2^40 itself is allowed. */
  ASSERT_OK(uvs_schedule_after(&loop_w, &t[1], max));
  ASSERT_OK(uvs_schedule_every(&pool_w, &t[2], max, 1));
  ASSERT_OK(uvs_schedule_every(&pool_w, &t[3], 50000, max));
  ASSERT_OK(uvs_task_cancel(&t[1]));
  ASSERT_OK(uvs_task_cancel(&t[2]));
  ASSERT_OK(uvs_task_cancel(&t[3]));
  ASSERT_ERR(uvs_task_cancel(&t[0]), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 3);
  ASSERT_EQ(done_cancelled, 3);
  ASSERT_EQ(atomic_load(&runs), 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(task_schedule_every_needs_done) {
  uvs_task_t t;

  setup();
  ASSERT_OK(uvs_task_init(&t, run_cb, NULL));
  ASSERT_ERR(uvs_schedule_every(&loop_w, &t, 1, 1), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(&pool_w, &t, 0, 10), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&runs), 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(task_schedule_twice_busy) {
  uvs_task_t queued;
  uvs_task_t delayed;
  uvs_task_t periodic;
  uvs_stats_t before;
  uvs_stats_t after;

  setup();
  ASSERT_OK(uvs_task_init(&queued, run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&delayed, run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&periodic, run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&loop_w, &queued));
  ASSERT_OK(uvs_schedule_after(&loop_w, &delayed, 5));
  ASSERT_OK(uvs_schedule_every(&loop_w, &periodic, 60000, 60000));
  uvs_sched_stats(&sched, &before);
  ASSERT_ERR(uvs_schedule(&loop_w, &queued), UV_EBUSY);
  ASSERT_ERR(uvs_schedule(&pool_w, &queued), UV_EBUSY);
  ASSERT_ERR(uvs_schedule_after(&loop_w, &queued, 1), UV_EBUSY);
  ASSERT_ERR(uvs_schedule(&loop_w, &delayed), UV_EBUSY);
  ASSERT_ERR(uvs_schedule_every(&pool_w, &delayed, 1, 1), UV_EBUSY);
  ASSERT_ERR(uvs_schedule(&loop_w, &periodic), UV_EBUSY);
  ASSERT_ERR(uvs_schedule_every(&loop_w, &periodic, 1, 1), UV_EBUSY);
  /* EINVAL wins over EBUSY. */
  ASSERT_ERR(uvs_schedule_every(&loop_w, &queued, 1, 0), UV_EINVAL);
  uvs_sched_stats(&sched, &after);
  ASSERT_OK(memcmp(&before, &after, sizeof(before)));
  ASSERT_OK(uvs_task_cancel(&periodic));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  /* Each ran exactly once despite the rejected schedules. */
  ASSERT_EQ(atomic_load(&runs), 2);
  ASSERT_EQ(done_calls, 3);
  ASSERT_EQ(done_cancelled, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A one-shot task running on a pool thread: schedule and cancel from another
 * thread both see it busy. */
static uv_sem_t started;
static uv_sem_t go;
static uvs_task_t running_task;
static uvs_task_t other_task;
static atomic_int foreign_sched_rc = 1;
static atomic_int foreign_cancel_rc = 1;

static void blocking_run_cb(uvs_task_t* task) {
  (void) task;
  uv_sem_post(&started);
  uv_sem_wait(&go);
  atomic_fetch_add(&runs, 1);
}


static void busy_thread(void* arg) {
  (void) arg;
  uv_sem_wait(&started);
  atomic_store(&foreign_sched_rc, uvs_schedule(&loop_w, &running_task));
  atomic_store(&foreign_cancel_rc, uvs_task_cancel(&running_task));
  uv_sem_post(&go);
}


TEST_IMPL(task_running_busy) {
  uv_thread_t thread;

  ASSERT_OK(uv_sem_init(&started, 0));
  ASSERT_OK(uv_sem_init(&go, 0));
  setup();
  ASSERT_OK(uvs_task_init(&running_task, blocking_run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&pool_w, &running_task));
  ASSERT_OK(uv_thread_create(&thread, busy_thread, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_ERR(atomic_load(&foreign_sched_rc), UV_EBUSY);
  ASSERT_ERR(atomic_load(&foreign_cancel_rc), UV_EBUSY);
  ASSERT_EQ(atomic_load(&runs), 1);
  ASSERT_EQ(done_calls, 1);
  ASSERT_OK(last_status);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&started);
  uv_sem_destroy(&go);
  return 0;
}


/* Another task on the same worker can't schedule a running task either. */
static void peer_run_cb(uvs_task_t* task) {
  (void) task;
  ASSERT_ERR(uvs_schedule(&pool_w, &other_task), UV_EBUSY);
  atomic_fetch_add(&runs, 1);
}


static void peer_target_run_cb(uvs_task_t* task) {
  ASSERT_PTR_EQ(task, &other_task);
  /* Runs first on the loop worker and schedules a peer on the pool worker
   * that then tries to take this one while it is still running. */
  ASSERT_OK(uvs_schedule(&pool_w, &running_task));
  uv_sem_wait(&go);
  atomic_fetch_add(&runs, 1);
}


static void peer_run_wrapper(uvs_task_t* task) {
  peer_run_cb(task);
  uv_sem_post(&go);
}


TEST_IMPL(task_running_busy_from_task) {
  ASSERT_OK(uv_sem_init(&go, 0));
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &pool_w, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &loop_w, UVS_POOL));
  ASSERT_OK(uvs_task_init(&other_task, peer_target_run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&running_task, peer_run_wrapper, done_cb));
  ASSERT_OK(uvs_schedule(&loop_w, &other_task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&runs), 2);
  ASSERT_EQ(done_calls, 2);
  ASSERT_EQ(done_cancelled, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  return 0;
}


/* done_cb may free the task. */
static void free_done_cb(uvs_task_t* task, int status) {
  done_cb(task, status);
  memset(task, 0xee, sizeof(*task));
  free(task);
}


TEST_IMPL(task_done_may_free) {
  uvs_task_t* t;
  int i;

  setup();
  for (i = 0; i < 40; i++) {
    t = malloc(sizeof(*t));
    ASSERT_NOT_NULL(t);
    ASSERT_OK(uvs_task_init(t, run_cb, free_done_cb));
    switch (i % 4) {
      case 0:
        ASSERT_OK(uvs_schedule(&pool_w, t));
        break;
      case 1:
        ASSERT_OK(uvs_schedule(&loop_w, t));
        break;
      case 2:
        ASSERT_OK(uvs_schedule_after(&pool_w, t, (uint64_t) i % 3));
        break;
      default:
        ASSERT_OK(uvs_schedule_after(&loop_w, t, 100000));
        ASSERT_OK(uvs_task_cancel(t));
        break;
    }
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 40);
  ASSERT_EQ(done_cancelled, 10);
  ASSERT_EQ(atomic_load(&runs), 30);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* done_cb may schedule the task again. */
static void again_done_cb(uvs_task_t* task, int status) {
  done_cb(task, status);
  if (done_calls < 100)
    ASSERT_OK(uvs_schedule(done_calls & 1 ? &pool_w : &loop_w, task));
  else
    ASSERT_ERR(uvs_task_cancel(task), UV_EBUSY);
}


TEST_IMPL(task_done_may_reschedule) {
  uvs_task_t t;

  setup();
  ASSERT_OK(uvs_task_init(&t, run_cb, again_done_cb));
  ASSERT_OK(uvs_schedule(&pool_w, &t));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 100);
  ASSERT_EQ(atomic_load(&runs), 100);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* done == NULL: the task is released when its run_cb is entered. */
static void free_run_cb(uvs_task_t* task) {
  run_cb(task);
  memset(task, 0xdd, sizeof(*task));
  free(task);
}


TEST_IMPL(task_no_done_freed_in_run) {
  uvs_task_t* t;
  int i;

  setup();
  for (i = 0; i < 300; i++) {
    t = malloc(sizeof(*t));
    ASSERT_NOT_NULL(t);
    ASSERT_OK(uvs_task_init(t, free_run_cb, NULL));
    if (i % 3 == 0)
      ASSERT_OK(uvs_schedule(&pool_w, t));
    else if (i % 3 == 1)
      ASSERT_OK(uvs_schedule(&loop_w, t));
    else
      ASSERT_OK(uvs_schedule_after(i & 1 ? &loop_w : &pool_w, t, i % 4));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&runs), 300);
  ASSERT_EQ(done_calls, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(task_no_done_cancel_einval) {
  uvs_task_t queued;
  uvs_task_t delayed;

  setup();
  ASSERT_OK(uvs_task_init(&queued, run_cb, NULL));
  ASSERT_OK(uvs_task_init(&delayed, run_cb, NULL));
  ASSERT_ERR(uvs_task_cancel(&queued), UV_EINVAL);
  ASSERT_OK(uvs_schedule(&loop_w, &queued));
  ASSERT_OK(uvs_schedule_after(&pool_w, &delayed, 2));
  ASSERT_ERR(uvs_task_cancel(&queued), UV_EINVAL);
  ASSERT_ERR(uvs_task_cancel(&delayed), UV_EINVAL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  /* Both still ran. */
  ASSERT_EQ(atomic_load(&runs), 2);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A close that drops done-less tasks releases them by the time the close
 * callback runs: freeing them there is safe (ASan checks). */
static uvs_task_t* dropped[20];
static int worker_close_calls;

static void free_dropped_close_cb(uvs_worker_t* w) {
  int i;

  (void) w;
  worker_close_calls++;
  for (i = 0; i < 20; i++) {
    memset(dropped[i], 0xcc, sizeof(*dropped[i]));
    free(dropped[i]);
  }
}


static uv_async_t gate_async;

static void gate_run_cb(uvs_task_t* task) {
  (void) task;
  uv_async_send(&gate_async);
  uv_sem_wait(&go);
}


/* The gate task is running: close the worker under it, then let it go. */
static void close_then_open_gate(uv_async_t* handle) {
  ASSERT_OK(uvs_worker_close(&pool_w, UVS_CANCEL, free_dropped_close_cb));
  uv_sem_post(&go);
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(task_no_done_close_releases) {
  uvs_task_t gate;
  int i;

  ASSERT_OK(uv_sem_init(&go, 0));
  setup();
  ASSERT_OK(uv_async_init(&loop, &gate_async, close_then_open_gate));
  ASSERT_OK(uvs_task_init(&gate, gate_run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&pool_w, &gate));
  for (i = 0; i < 20; i++) {
    dropped[i] = malloc(sizeof(uvs_task_t));
    ASSERT_NOT_NULL(dropped[i]);
    ASSERT_OK(uvs_task_init(dropped[i], run_cb, NULL));
    if (i < 10)
      ASSERT_OK(uvs_schedule(&pool_w, dropped[i]));
    else
      ASSERT_OK(uvs_schedule_after(&pool_w, dropped[i], 60000));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(worker_close_calls, 1);
  ASSERT_EQ(done_calls, 1);
  ASSERT_OK(last_status);
  ASSERT_EQ(atomic_load(&runs), 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  return 0;
}


/* A one-shot task re-schedules itself from its run_cb. */
typedef struct {
  uvs_task_t task;
  int n;
  int limit;
  int mode;
  uint64_t t_call;
  uint64_t delay;
  uvs_worker_t* targets[2];
} self_t;

static void self_run_cb(uvs_task_t* task) {
  self_t* s;
  uvs_worker_t* next;

  s = TEST_CONTAINER_OF(task, self_t, task);
  if (s->delay > 0)
    ASSERT_UINT64_GE(uv_hrtime(), s->t_call + s->delay * 1000000u);
  /* Thread matches the worker it was scheduled on. */
  if (s->targets[s->n & 1]->where == UVS_LOOP)
    ASSERT(test_on_thread(loop_thread));
  else
    ASSERT(!test_on_thread(loop_thread));
  s->n++;
  atomic_fetch_add(&runs, 1);
  if (s->n < s->limit) {
    next = s->targets[s->n & 1];
    s->t_call = uv_hrtime();
    if (s->delay > 0)
      ASSERT_OK(uvs_schedule_after(next, task, s->delay));
    else
      ASSERT_OK(uvs_schedule(next, task));
    /* Now queued or delayed: a second schedule is refused. */
    ASSERT_ERR(uvs_schedule(next, task), UV_EBUSY);
  }
}


static void self_done_cb(uvs_task_t* task, int status) {
  self_t* s;

  s = TEST_CONTAINER_OF(task, self_t, task);
  done_cb(task, status);
  /* Handed back once, after the last run. */
  ASSERT_EQ(s->n, s->limit);
}


static void reschedule_self(uvs_worker_t* a, uvs_worker_t* b, uint64_t delay) {
  self_t s;

  memset(&s, 0, sizeof(s));
  s.limit = delay > 0 ? 8 : 500;
  s.delay = delay;
  s.targets[0] = a;
  s.targets[1] = b;
  ASSERT_OK(uvs_task_init(&s.task, self_run_cb, self_done_cb));
  s.t_call = uv_hrtime();
  ASSERT_OK(uvs_schedule_after(a, &s.task, delay));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(s.n, s.limit);
  ASSERT_EQ(done_calls, 1);
  ASSERT_OK(last_status);
}


TEST_IMPL(task_reschedule_self_same_worker) {
  uvs_stats_t st;

  setup();
  reschedule_self(&pool_w, &pool_w, 0);
  done_calls = 0;
  reschedule_self(&loop_w, &loop_w, 0);
  uvs_sched_stats(&sched, &st);
  /* Counts as 500 schedules and 500 runs per chain, handed back once. */
  ASSERT_UINT64_EQ(st.ran, 1000);
  ASSERT_UINT64_EQ(st.scheduled, 1000);
  ASSERT_UINT64_EQ(st.pending, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(task_reschedule_self_other_worker) {
  setup();
  reschedule_self(&pool_w, &loop_w, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(task_reschedule_self_delay) {
  setup();
  reschedule_self(&loop_w, &pool_w, 3);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* ...onto a worker of another scheduler on the same loop. */
static uvs_sched_t sched2;
static uvs_worker_t other_w;

static void hop_run_cb(uvs_task_t* task) {
  static int n;

  atomic_fetch_add(&runs, 1);
  if (++n == 1)
    ASSERT_OK(uvs_schedule(&other_w, task));
}


TEST_IMPL(task_reschedule_self_other_sched) {
  uvs_task_t t;
  uvs_stats_t s1;
  uvs_stats_t s2;

  setup();
  ASSERT_OK(uvs_sched_init(&loop, &sched2, NULL));
  ASSERT_OK(uvs_worker_init(&sched2, &other_w, UVS_POOL));
  ASSERT_OK(uvs_task_init(&t, hop_run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&pool_w, &t));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&runs), 2);
  ASSERT_EQ(done_calls, 1);
  uvs_sched_stats(&sched, &s1);
  uvs_sched_stats(&sched2, &s2);
  ASSERT_UINT64_EQ(s1.pending, 0);
  ASSERT_UINT64_EQ(s2.pending, 0);
  ASSERT_UINT64_EQ(s1.ran + s2.ran, 2);
  ASSERT_UINT64_EQ(s1.scheduled, s1.ran + s1.cancelled + s1.pending);
  ASSERT_UINT64_EQ(s2.scheduled, s2.ran + s2.cancelled + s2.pending);
  ASSERT_OK(uvs_sched_close(&sched2, UVS_CANCEL, NULL));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A one-shot task that re-scheduled itself with a long delay is in custody
 * under the new schedule: it can be cancelled, and is handed back once. */
static void park_run_cb(uvs_task_t* task) {
  atomic_fetch_add(&runs, 1);
  ASSERT_OK(uvs_schedule_after(&loop_w, task, 60000));
  ASSERT_OK(uvs_task_cancel(task));
  ASSERT_ERR(uvs_task_cancel(task), UV_EBUSY);
}


TEST_IMPL(task_reschedule_self_then_cancel) {
  uvs_task_t t;

  setup();
  ASSERT_OK(uvs_task_init(&t, park_run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&pool_w, &t));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&runs), 1);
  ASSERT_EQ(done_calls, 1);
  ASSERT_ERR(last_status, UV_ECANCELED);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A periodic task may not re-schedule itself. */
static void periodic_self_run_cb(uvs_task_t* task) {
  atomic_fetch_add(&runs, 1);
  ASSERT_ERR(uvs_schedule(&loop_w, task), UV_EBUSY);
  ASSERT_ERR(uvs_schedule_after(&pool_w, task, 1), UV_EBUSY);
  ASSERT_ERR(uvs_schedule_every(&pool_w, task, 1, 1), UV_EBUSY);
  ASSERT_OK(uvs_task_cancel(task));
}


TEST_IMPL(task_reschedule_self_periodic_busy) {
  uvs_task_t t;

  setup();
  ASSERT_OK(uvs_task_init(&t, periodic_self_run_cb, done_cb));
  ASSERT_OK(uvs_schedule_every(&pool_w, &t, 0, 1));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&runs), 1);
  ASSERT_EQ(done_calls, 1);
  ASSERT_ERR(last_status, UV_ECANCELED);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Guarantee 9: no call runs a task inside the caller, and chains do not grow
 * the stack. */
TEST_IMPL(task_schedule_never_runs_inline) {
  uvs_task_t t[6];
  int i;

  setup();
  for (i = 0; i < 6; i++) ASSERT_OK(uvs_task_init(&t[i], run_cb, done_cb));
  in_call = 1;
  ASSERT_OK(uvs_schedule(&loop_w, &t[0]));
  ASSERT_OK(uvs_schedule_after(&loop_w, &t[1], 0));
  ASSERT_OK(uvs_schedule_every(&loop_w, &t[2], 0, 100000));
  ASSERT_OK(uvs_schedule(&pool_w, &t[3]));
  ASSERT_OK(uvs_schedule_after(&loop_w, &t[4], 60000));
  ASSERT_OK(uvs_task_cancel(&t[4]));
  ASSERT_OK(uvs_schedule_after(&pool_w, &t[5], 0));
  in_call = 0;
  ASSERT_EQ(done_calls, 0);
  (void) uv_run(&loop, UV_RUN_NOWAIT);
  ASSERT_OK(uvs_task_cancel(&t[2]));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 6);
  ASSERT_EQ(done_cancelled, 2);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


static uintptr_t stack_lo = UINTPTR_MAX;
static uintptr_t stack_hi;
static int chain_n;

static void note_stack(void) {
  volatile char here;
  uintptr_t p;

  p = (uintptr_t) &here;
  if (p < stack_lo)
    stack_lo = p;
  if (p > stack_hi)
    stack_hi = p;
}


static void chain_run_cb(uvs_task_t* task) {
  note_stack();
  if (++chain_n < 20000)
    ASSERT_OK(uvs_schedule(&loop_w, task));
}


static void chain_done_cb(uvs_task_t* task, int status) {
  note_stack();
  done_cb(task, status);
  if (done_calls < 20000)
    ASSERT_OK(uvs_schedule(&loop_w, task));
}


TEST_IMPL(task_chain_bounded_stack) {
  uvs_task_t t;

  setup();
  ASSERT_OK(uvs_task_init(&t, chain_run_cb, NULL));
  ASSERT_OK(uvs_schedule(&loop_w, &t));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(chain_n, 20000);
  /* 20000 nested calls would span far more than 64 KB. */
  ASSERT_UINT64_LT(stack_hi - stack_lo, 64 * 1024);

  stack_lo = UINTPTR_MAX;
  stack_hi = 0;
  ASSERT_OK(uvs_task_init(&t, run_cb, chain_done_cb));
  ASSERT_OK(uvs_schedule(&loop_w, &t));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 20000);
  ASSERT_UINT64_LT(stack_hi - stack_lo, 64 * 1024);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
