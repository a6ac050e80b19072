#include "task.h"

#include <stdatomic.h>

static uvs_sched_t sched;
static uvs_worker_t worker;
static uv_timer_t timer;
static uint64_t first_now;
static uint64_t last_now;
static int ticks;
static atomic_int runs;
static atomic_int stop;


static void run_cb(uvs_task_t* task) {
  (void) task;
  runs++;
}


static void check_now(void) {
  uint64_t now;
  uint64_t hr;

  now = uvs_now(&sched);
  hr = uv_hrtime() / 1000000u;
  ASSERT_UINT64_GE(now, last_now);
  ASSERT_UINT64_LE(now, hr);
  last_now = now;
}


static void tick_cb(uv_timer_t* handle) {
  static uvs_task_t tasks[64];

  check_now();
  ASSERT_LT(ticks, 64);
  ASSERT_OK(uvs_task_init(&tasks[ticks], run_cb, NULL));
  ASSERT_OK(uvs_schedule(&worker, &tasks[ticks]));
  if (++ticks == 30)
    uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(now_monotonic_loop_thread) {
  uv_loop_t loop;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  first_now = uvs_now(&sched);
  ASSERT_UINT64_LE(first_now, uv_hrtime() / 1000000u);
  last_now = first_now;

  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, tick_cb, 1, 1));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ticks, 30);
  ASSERT_EQ(runs, 30);
  check_now();
  /* 30 timer ticks of at least 1 ms each: the published time moved. */
  ASSERT_UINT64_GT(last_now, first_now);

  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


static void reader_thread(void* arg) {
  uint64_t prev;
  uint64_t now;
  uint64_t hr;
  long reads;

  (void) arg;
  prev = 0;
  reads = 0;
  while (!atomic_load(&stop) || reads < 1000) {
    now = uvs_now(&sched);
    hr = uv_hrtime() / 1000000u;
    ASSERT_UINT64_GE(now, prev);
    ASSERT_UINT64_LE(now, hr);
    prev = now;
    reads++;
  }
}


static void tick2_cb(uv_timer_t* handle) {
  static uvs_task_t tasks[64];

  check_now();
  ASSERT_OK(uvs_task_init(&tasks[ticks], run_cb, NULL));
  ASSERT_OK(uvs_schedule(&worker, &tasks[ticks]));
  if (++ticks == 40) {
    atomic_store(&stop, 1);
    uv_close((uv_handle_t*) handle, NULL);
  }
}


TEST_IMPL(now_foreign_thread) {
  uv_loop_t loop;
  uv_thread_t threads[2];
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  for (i = 0; i < 2; i++)
    ASSERT_OK(uv_thread_create(&threads[i], reader_thread, NULL));

  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, tick2_cb, 1, 1));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < 2; i++) ASSERT_OK(uv_thread_join(&threads[i]));
  ASSERT_EQ(ticks, 40);
  ASSERT_EQ(runs, 40);

  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
