#include "task.h"

#include <stdatomic.h>

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t lw[2];
static uvs_worker_t pw;
static uvs_task_t tasks[200];
static int done_calls;
static int done_cancelled;
static atomic_int runs;
static int post_runs;
static int checks;


static void run_cb(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&runs, 1);
}


static void done_cb(uvs_task_t* task, int status) {
  (void) task;
  done_calls++;
  if (status == UV_ECANCELED)
    done_cancelled++;
  else
    ASSERT_OK(status);
}


static void post_fn(void* arg) {
  (void) arg;
  post_runs++;
}


static void check_identity(void) {
  uvs_stats_t st;

  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, st.ran + st.cancelled + st.pending);
  checks++;
}


static void setup(const uvs_sched_options_t* opts) {
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, opts));
  ASSERT_OK(uvs_worker_init(&sched, &lw[0], UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &lw[1], UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &pw, UVS_POOL));
}


TEST_IMPL(stats_fresh_zero) {
  uvs_stats_t st;

  setup(NULL);
  memset(&st, 0xff, sizeof(st));
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 0);
  ASSERT_UINT64_EQ(st.ran, 0);
  ASSERT_UINT64_EQ(st.cancelled, 0);
  ASSERT_UINT64_EQ(st.pending, 0);
  ASSERT_UINT64_EQ(st.drains, 0);
  ASSERT_UINT64_EQ(st.wakeups, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* scheduled == ran + cancelled + pending at every point where no callback
 * runs: checked from a uv_check handle on the loop thread while only loop
 * workers have work. */
static void check_cb(uv_check_t* handle) {
  (void) handle;
  check_identity();
}


TEST_IMPL(stats_identity_loop_turns) {
  uv_check_t check;
  uvs_stats_t st;
  int i;

  setup(NULL);
  ASSERT_OK(uv_check_init(&loop, &check));
  ASSERT_OK(uv_check_start(&check, check_cb));
  uv_unref((uv_handle_t*) &check);
  for (i = 0; i < 150; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i], run_cb, i % 10 == 9 ? NULL : done_cb));
    if (i % 3 == 0)
      ASSERT_OK(uvs_schedule_after(&lw[i & 1], &tasks[i], (uint64_t) i % 7));
    else
      ASSERT_OK(uvs_schedule(&lw[i & 1], &tasks[i]));
    if (i % 10 == 4 || i % 10 == 6)
      ASSERT_OK(uvs_task_cancel(&tasks[i]));
    if (i % 5 == 0)
      ASSERT_OK(uvs_post(&lw[i & 1], post_fn, NULL));
  }
  check_identity();
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 180);
  ASSERT_UINT64_EQ(st.ran, 0);
  ASSERT_UINT64_EQ(st.cancelled + st.pending, 180);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  check_identity();
  ASSERT_GE(checks, 3);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 180);
  ASSERT_UINT64_EQ(st.ran, 150);
  ASSERT_UINT64_EQ(st.cancelled, 30);
  ASSERT_UINT64_EQ(st.pending, 0);
  ASSERT_EQ(atomic_load(&runs), 120);
  ASSERT_EQ(post_runs, 30);
  ASSERT_EQ(done_calls, 135);
  ASSERT_EQ(done_cancelled, 30);
  uv_close((uv_handle_t*) &check, NULL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(stats_identity_pool) {
  uvs_stats_t st;
  int i;

  setup(NULL);
  for (i = 0; i < 100; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i], run_cb, done_cb));
    if (i % 4 == 0) {
      ASSERT_OK(uvs_schedule_after(&pw, &tasks[i], 60000));
      ASSERT_OK(uvs_task_cancel(&tasks[i]));
    } else {
      ASSERT_OK(uvs_schedule(&pw, &tasks[i]));
    }
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 100);
  ASSERT_UINT64_EQ(st.ran, 75);
  ASSERT_UINT64_EQ(st.cancelled, 25);
  ASSERT_UINT64_EQ(st.pending, 0);
  ASSERT_UINT64_GE(st.drains, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(stats_posts_counted) {
  uvs_stats_t st;
  int i;

  setup(NULL);
  for (i = 0; i < 10; i++) ASSERT_OK(uvs_post(&lw[0], post_fn, NULL));
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 10);
  ASSERT_UINT64_EQ(st.pending, 10);
  ASSERT_UINT64_EQ(st.ran, 0);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  uvs_sched_stats(&sched, &st);
  ASSERT_EQ(post_runs, 10);
  ASSERT_UINT64_EQ(st.scheduled, 10);
  ASSERT_UINT64_EQ(st.ran, 10);
  ASSERT_UINT64_EQ(st.pending, 0);
  ASSERT_UINT64_EQ(st.cancelled, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


static void stats_close_cb(uvs_worker_t* w) {
  uvs_stats_t st;

  (void) w;
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.cancelled, 15);
  ASSERT_UINT64_EQ(st.pending, 0);
  ASSERT_UINT64_EQ(st.ran, 0);
  checks++;
}


TEST_IMPL(stats_close_counts_cancelled) {
  int i;

  setup(NULL);
  for (i = 0; i < 10; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i], run_cb, i & 1 ? done_cb : NULL));
    if (i < 7)
      ASSERT_OK(uvs_schedule(&lw[0], &tasks[i]));
    else
      ASSERT_OK(uvs_schedule_after(&lw[0], &tasks[i], 60000));
    if (i < 5)
      ASSERT_OK(uvs_post(&lw[0], post_fn, NULL));
  }
  ASSERT_OK(uvs_worker_close(&lw[0], UVS_CANCEL, stats_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(checks, 1);
  ASSERT_EQ(post_runs, 0);
  ASSERT_EQ(atomic_load(&runs), 0);
  ASSERT_EQ(done_cancelled, 5);
  check_identity();
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A task stops being pending before its done_cb is called. */
static void pending_done_cb(uvs_task_t* task, int status) {
  uvs_stats_t st;

  done_cb(task, status);
  uvs_sched_stats(&sched, &st);
  /* This task no longer counts; others may have stopped counting too. */
  ASSERT_UINT64_LE(st.pending, (uint64_t) (4 - done_calls));
  ASSERT_UINT64_EQ(st.scheduled, st.ran + st.cancelled + st.pending);
}


TEST_IMPL(stats_not_pending_in_done) {
  setup(NULL);
  ASSERT_OK(uvs_task_init(&tasks[0], run_cb, pending_done_cb));
  ASSERT_OK(uvs_task_init(&tasks[1], run_cb, pending_done_cb));
  ASSERT_OK(uvs_task_init(&tasks[2], run_cb, pending_done_cb));
  ASSERT_OK(uvs_task_init(&tasks[3], run_cb, pending_done_cb));
  ASSERT_OK(uvs_schedule(&pw, &tasks[0]));
  ASSERT_OK(uvs_schedule_after(&lw[0], &tasks[1], 3));
  ASSERT_OK(uvs_schedule_after(&lw[1], &tasks[2], 60000));
  ASSERT_OK(uvs_task_cancel(&tasks[2]));
  ASSERT_OK(uvs_schedule_after(&pw, &tasks[3], 6));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 4);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A periodic task counts every run and is cancelled once. */
static void periodic_run_cb(uvs_task_t* task) {
  if (atomic_fetch_add(&runs, 1) + 1 == 4)
    ASSERT_OK(uvs_task_cancel(task));
}


TEST_IMPL(stats_periodic_counts_runs) {
  uvs_stats_t st;

  setup(NULL);
  ASSERT_OK(uvs_task_init(&tasks[0], periodic_run_cb, done_cb));
  ASSERT_OK(uvs_schedule_every(&lw[0], &tasks[0], 0, 2));
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 1);
  ASSERT_UINT64_EQ(st.pending, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, 1);
  ASSERT_UINT64_EQ(st.ran, 4);
  ASSERT_UINT64_EQ(st.cancelled, 1);
  ASSERT_UINT64_EQ(st.pending, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(stats_drains_only_pool) {
  uvs_stats_t st;
  int i;

  setup(NULL);
  for (i = 0; i < 20; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i], run_cb, done_cb));
    ASSERT_OK(uvs_schedule(&lw[i & 1], &tasks[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.drains, 0);
  ASSERT_OK(uvs_post(&pw, post_fn, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_GE(st.drains, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Rejected calls change nothing. */
TEST_IMPL(stats_rejected_unchanged) {
  uvs_stats_t before;
  uvs_stats_t after;
  uvs_task_t fresh;
  uvs_task_t no_done;

  setup(NULL);
  ASSERT_OK(uvs_task_init(&tasks[0], run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&fresh, run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&no_done, run_cb, NULL));
  ASSERT_OK(uvs_schedule(&lw[0], &tasks[0]));
  ASSERT_OK(uvs_worker_close(&lw[1], UVS_CANCEL, NULL));
  uvs_sched_stats(&sched, &before);
  ASSERT_ERR(uvs_schedule(&lw[0], &tasks[0]), UV_EBUSY);
  ASSERT_ERR(uvs_schedule(&lw[1], &fresh), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_post(&lw[1], post_fn, NULL), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_schedule_every(&lw[0], &no_done, 1, 1), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_after(&lw[0], &fresh, ((uint64_t) 1 << 40) + 1),
             UV_EINVAL);
  ASSERT_ERR(uvs_task_cancel(&fresh), UV_EINVAL);
  ASSERT_ERR(uvs_worker_close(&lw[1], UVS_CANCEL, NULL), UV_EINVAL);
  uvs_sched_stats(&sched, &after);
  ASSERT_OK(memcmp(&before, &after, sizeof(before)));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 1);
  ASSERT_EQ(atomic_load(&runs), 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* Work from a foreign thread reaches the loop through uv_async: wakeups
 * counts the async callbacks that found work. Each schedule waits for the
 * previous task's done_cb, so the loop is idle in between. */
static uv_sem_t done_sem;
static uvs_stats_t last_stats;

static void wake_done_cb(uvs_task_t* task, int status) {
  done_cb(task, status);
  uv_sem_post(&done_sem);
  if (done_calls == 20) {
    uvs_sched_stats(&sched, &last_stats);
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
  }
}


static void waker_thread(void* arg) {
  int i;

  (void) arg;
  for (i = 0; i < 20; i++) {
    ASSERT_OK(uvs_schedule(&lw[i & 1], &tasks[i]));
    uv_sem_wait(&done_sem);
  }
}


TEST_IMPL(stats_wakeups_foreign) {
  uvs_sched_options_t opts;
  uv_thread_t thread;
  int i;

  ASSERT_OK(uv_sem_init(&done_sem, 0));
  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  setup(&opts);
  for (i = 0; i < 20; i++)
    ASSERT_OK(uvs_task_init(&tasks[i], run_cb, wake_done_cb));
  ASSERT_OK(uv_thread_create(&thread, waker_thread, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(done_calls, 20);
  ASSERT_UINT64_GE(last_stats.wakeups, 1);
  ASSERT_UINT64_LE(last_stats.wakeups, 20);
  ASSERT_UINT64_EQ(last_stats.ran, 20);
  ASSERT_OK(uv_loop_close(&loop));
  uv_sem_destroy(&done_sem);
  return 0;
}


/* uvs_sched_stats from foreign threads while work runs: counters never go
 * back, and ran + cancelled never passes scheduled. */
static atomic_int reader_stop;

static void stats_reader(void* arg) {
  uvs_stats_t prev;
  uvs_stats_t st;
  long reads;

  (void) arg;
  memset(&prev, 0, sizeof(prev));
  reads = 0;
  while (!atomic_load(&reader_stop) || reads < 100) {
    uvs_sched_stats(&sched, &st);
    ASSERT_UINT64_GE(st.scheduled, prev.scheduled);
    ASSERT_UINT64_GE(st.ran, prev.ran);
    ASSERT_UINT64_GE(st.cancelled, prev.cancelled);
    ASSERT_UINT64_GE(st.drains, prev.drains);
    ASSERT_UINT64_GE(st.wakeups, prev.wakeups);
    ASSERT_UINT64_LE(st.ran + st.cancelled, st.scheduled);
    prev = st;
    reads++;
  }
}


static void reader_done_cb(uvs_task_t* task, int status) {
  done_cb(task, status);
  if (done_calls == 200)
    atomic_store(&reader_stop, 1);
}


TEST_IMPL(stats_foreign_reader) {
  uv_thread_t threads[2];
  int i;

  setup(NULL);
  for (i = 0; i < 2; i++)
    ASSERT_OK(uv_thread_create(&threads[i], stats_reader, NULL));
  for (i = 0; i < 200; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i], run_cb, reader_done_cb));
    if (i % 4 == 3) {
      ASSERT_OK(uvs_schedule_after(&pw, &tasks[i], 60000));
      ASSERT_OK(uvs_task_cancel(&tasks[i]));
    } else {
      ASSERT_OK(uvs_schedule_after(i & 1 ? &pw : &lw[0], &tasks[i],
                                   (uint64_t) i % 5));
    }
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < 2; i++) ASSERT_OK(uv_thread_join(&threads[i]));
  ASSERT_EQ(done_calls, 200);
  ASSERT_EQ(done_cancelled, 50);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
