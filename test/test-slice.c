/* The default budget's time slice (SPEC guarantee 7): with the default
 * budget (a ~1 ms time slice) a drain or loop turn starts no task once its
 * slice has passed, so long tasks get one per turn, never a batch of them.
 * Every task here takes 100 ms, far past any slice: the checks do not
 * depend on how fast the machine is. */

#include "task.h"

#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#define SL_TASK_MS 100

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uvs_task_t tasks[6];
static atomic_int sl_started; /* run callbacks entered */
static int sl_done_calls;
static uv_thread_t sl_loop_thread;


static void sl_done_cb(uvs_task_t* task, int status) {
  ASSERT(test_on_thread(sl_loop_thread));
  ASSERT_PTR_EQ(task, &tasks[sl_done_calls]);
  ASSERT_OK(status);
  sl_done_calls++;
}


static void sl_setup(uvs_where_t where) {
  sl_loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, where));
}


/* ---- pool: one long task per drain --------------------------------------
 *
 * A drain is one uv_queue_work item, and the next one is posted only after
 * the loop saw the last one end. Each run reads stats.drains: a run in the
 * same drain as the one before it would see the same count. */
static uint64_t pool_drain_of[6];
static uv_thread_t pool_thread_of[6];

static void pool_long_run_cb(uvs_task_t* task) {
  uvs_stats_t st;
  int n;

  (void) task;
  n = atomic_fetch_add(&sl_started, 1);
  ASSERT_LT(n, 6);
  uvs_sched_stats(&sched, &st);
  pool_drain_of[n] = st.drains;
  pool_thread_of[n] = uv_thread_self();
  ASSERT(!test_on_thread(sl_loop_thread));
  test_spin_ms(SL_TASK_MS);
}


TEST_IMPL(slice_pool_one_long_task_per_drain) {
  uvs_stats_t st;
  int i;

  sl_setup(UVS_POOL);
  for (i = 0; i < 6; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i], pool_long_run_cb, sl_done_cb));
    ASSERT_OK(uvs_schedule(&worker, &tasks[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&sl_started), 6);
  ASSERT_EQ(sl_done_calls, 6);
  for (i = 1; i < 6; i++) {
    if (pool_drain_of[i] <= pool_drain_of[i - 1])
      test_failed(__FILE__, __LINE__,
                  "tasks %d and %d of 100 ms ran in one drain (drain %" PRIu64
                  ", on the %s thread)",
                  i - 1, i, pool_drain_of[i],
                  uv_thread_equal(&pool_thread_of[i], &pool_thread_of[i - 1])
                      ? "same"
                      : "another");
  }
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_GE(st.drains, 6);
  ASSERT_UINT64_EQ(st.ran, 6);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* ---- loop: one long task per loop turn ----------------------------------
 *
 * A check callback runs once per loop iteration; each run records how many
 * have run. */
static uv_check_t sl_check;
static int sl_iterations;
static int sl_iteration_of[4];
static int sl_events_at[4];  /* I/O callbacks seen when each run started */
static int sl_events;        /* timer or read callbacks so far */
static int sl_event_started; /* sl_started when the first one ran */

static void sl_check_cb(uv_check_t* handle) {
  (void) handle;
  sl_iterations++;
}


static void loop_long_run_cb(uvs_task_t* task) {
  int n;

  (void) task;
  ASSERT(test_on_thread(sl_loop_thread));
  n = atomic_fetch_add(&sl_started, 1);
  ASSERT_LT(n, 4);
  sl_iteration_of[n] = sl_iterations;
  sl_events_at[n] = sl_events;
  test_spin_ms(SL_TASK_MS);
}


static void sl_loop_run(uvs_run_cb run) {
  int i;

  ASSERT_OK(uv_check_init(&loop, &sl_check));
  ASSERT_OK(uv_check_start(&sl_check, sl_check_cb));
  uv_unref((uv_handle_t*) &sl_check);
  for (i = 0; i < 4; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i], run, sl_done_cb));
    ASSERT_OK(uvs_schedule(&worker, &tasks[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&sl_started), 4);
  ASSERT_EQ(sl_done_calls, 4);
  uv_close((uv_handle_t*) &sl_check, NULL);
}


/* At least one loop iteration passed between any two runs. */
static void sl_check_turns(void) {
  int i;

  for (i = 1; i < 4; i++) {
    if (sl_iteration_of[i] <= sl_iteration_of[i - 1])
      test_failed(__FILE__, __LINE__,
                  "tasks %d and %d of 100 ms ran in one loop turn "
                  "(iteration %d)",
                  i - 1, i, sl_iteration_of[i]);
  }
}


TEST_IMPL(slice_loop_one_long_task_per_turn) {
  sl_setup(UVS_LOOP);
  sl_loop_run(loop_long_run_cb);
  sl_check_turns();
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A timer due after 50 ms, started before the tasks of 100 ms are
 * scheduled, fires before the second of them starts. */
static uv_timer_t sl_timer;

static void sl_timer_cb(uv_timer_t* handle) {
  (void) handle;
  if (sl_events++ == 0)
    sl_event_started = atomic_load(&sl_started);
}


TEST_IMPL(slice_loop_timer_between_long_tasks) {
  sl_setup(UVS_LOOP);
  ASSERT_OK(uv_timer_init(&loop, &sl_timer));
  ASSERT_OK(uv_timer_start(&sl_timer, sl_timer_cb, SL_TASK_MS / 2, 0));
  sl_loop_run(loop_long_run_cb);
  ASSERT_EQ(sl_events, 1);
  ASSERT_LE(sl_event_started, 1);
  ASSERT_EQ(sl_events_at[1], 1);
  sl_check_turns();
  uv_close((uv_handle_t*) &sl_timer, NULL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* The first task makes a socket readable and runs on for 100 ms; the read
 * callback runs before the second task starts. */
static uv_pipe_t sl_pipe;
static int sl_fds[2];

static void sl_alloc_cb(uv_handle_t* handle, size_t size, uv_buf_t* buf) {
  static char storage[64];

  (void) handle;
  (void) size;
  *buf = uv_buf_init(storage, sizeof(storage));
}


static void sl_read_cb(uv_stream_t* stream,
                       ssize_t nread,
                       const uv_buf_t* buf) {
  (void) buf;
  if (nread == 0)
    return;
  ASSERT_EQ(nread, 1);
  if (sl_events++ == 0)
    sl_event_started = atomic_load(&sl_started);
  uv_close((uv_handle_t*) stream, NULL);
}


static void writer_run_cb(uvs_task_t* task) {
  if (task == &tasks[0])
    ASSERT_EQ(write(sl_fds[1], "x", 1), 1);
  loop_long_run_cb(task);
}


TEST_IMPL(slice_loop_read_between_long_tasks) {
  sl_setup(UVS_LOOP);
  ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sl_fds));
  ASSERT_OK(uv_pipe_init(&loop, &sl_pipe, 0));
  ASSERT_OK(uv_pipe_open(&sl_pipe, sl_fds[0]));
  ASSERT_OK(uv_read_start((uv_stream_t*) &sl_pipe, sl_alloc_cb, sl_read_cb));
  sl_loop_run(writer_run_cb);
  ASSERT_EQ(sl_events, 1);
  ASSERT_EQ(sl_event_started, 1);
  ASSERT_EQ(sl_events_at[1], 1);
  sl_check_turns();
  ASSERT_OK(close(sl_fds[1]));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Several loop workers share one slice per loop turn: four workers with a
 * task of 100 ms each, ready together, run one per loop iteration, so the
 * loop polls for I/O between them (not four slices' worth of work first). */
TEST_IMPL(slice_loop_workers_share_turn) {
  uvs_worker_t workers[4];
  int i;

  sl_setup(UVS_LOOP);
  ASSERT_OK(uv_check_init(&loop, &sl_check));
  ASSERT_OK(uv_check_start(&sl_check, sl_check_cb));
  uv_unref((uv_handle_t*) &sl_check);
  for (i = 0; i < 4; i++) {
    ASSERT_OK(uvs_worker_init(&sched, &workers[i], UVS_LOOP));
    ASSERT_OK(uvs_task_init(&tasks[i], loop_long_run_cb, sl_done_cb));
    ASSERT_OK(uvs_schedule(&workers[i], &tasks[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&sl_started), 4);
  ASSERT_EQ(sl_done_calls, 4);
  uv_close((uv_handle_t*) &sl_check, NULL);
  sl_check_turns();
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
