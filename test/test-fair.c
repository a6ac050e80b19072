#include "task.h"

#include <stdatomic.h>

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t workers[6];
static uvs_task_t tasks[6][64];
static int done_calls;


static void done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  done_calls++;
}


/* A loop worker runs at most `budget` tasks per loop turn: count tasks
 * between two prepare callbacks (prepare runs once per iteration). */
static uv_prepare_t prepare;
static int turn_runs;
static int max_turn_runs;
static int turns_with_runs;
static int loop_runs;

static void prepare_cb(uv_prepare_t* handle) {
  (void) handle;
  if (turn_runs > max_turn_runs)
    max_turn_runs = turn_runs;
  if (turn_runs > 0)
    turns_with_runs++;
  turn_runs = 0;
}


static void turn_run_cb(uvs_task_t* task) {
  (void) task;
  turn_runs++;
  loop_runs++;
}


static void budget_per_turn(unsigned budget, int n, int expect_max) {
  uvs_sched_options_t opts;
  uvs_task_t* t;
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.budget = budget;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, budget ? &opts : NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_LOOP));
  ASSERT_OK(uv_prepare_init(&loop, &prepare));
  ASSERT_OK(uv_prepare_start(&prepare, prepare_cb));
  uv_unref((uv_handle_t*) &prepare);
  t = calloc((size_t) n, sizeof(*t));
  ASSERT_NOT_NULL(t);
  for (i = 0; i < n; i++) {
    ASSERT_OK(uvs_task_init(&t[i], turn_run_cb, done_cb));
    ASSERT_OK(uvs_schedule(&workers[0], &t[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  prepare_cb(&prepare);
  ASSERT_EQ(loop_runs, n);
  ASSERT_EQ(done_calls, n);
  ASSERT_LE(max_turn_runs, expect_max);
  /* Nothing else competes: full turns are used. */
  ASSERT_EQ(max_turn_runs, expect_max);
  ASSERT_GE(turns_with_runs, (n + expect_max - 1) / expect_max);
  uv_close((uv_handle_t*) &prepare, NULL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  free(t);
}


TEST_IMPL(budget_loop_per_turn) {
  budget_per_turn(4, 40, 4);
  return 0;
}


/* With the default budget a loop turn yields after a time slice of about
 * 1 ms and starts no task once it has passed: tasks that each take 200 us
 * end a turn after at most 6 (5 fill the slice, one may start just before
 * its end). */
static void spin_run_cb(uvs_task_t* task) {
  (void) task;
  test_spin_us(200);
  turn_runs++;
  loop_runs++;
}


TEST_IMPL(budget_loop_default) {
  uvs_task_t t[40];
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_LOOP));
  ASSERT_OK(uv_prepare_init(&loop, &prepare));
  ASSERT_OK(uv_prepare_start(&prepare, prepare_cb));
  uv_unref((uv_handle_t*) &prepare);
  for (i = 0; i < 40; i++) {
    ASSERT_OK(uvs_task_init(&t[i], spin_run_cb, done_cb));
    ASSERT_OK(uvs_schedule(&workers[0], &t[i]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  prepare_cb(&prepare);
  ASSERT_EQ(loop_runs, 40);
  ASSERT_EQ(done_calls, 40);
  ASSERT_LE(max_turn_runs, 6);
  ASSERT_GE(max_turn_runs, 1);
  ASSERT_GE(turns_with_runs, 7);
  uv_close((uv_handle_t*) &prepare, NULL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* With several loop workers, each runs at most `budget` tasks per turn. */
TEST_IMPL(budget_loop_per_worker) {
  uvs_sched_options_t opts;
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.budget = 2;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  for (i = 0; i < 3; i++) {
    ASSERT_OK(uvs_worker_init(&sched, &workers[i], UVS_LOOP));
  }
  ASSERT_OK(uv_prepare_init(&loop, &prepare));
  ASSERT_OK(uv_prepare_start(&prepare, prepare_cb));
  uv_unref((uv_handle_t*) &prepare);
  for (i = 0; i < 3 * 60; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i % 3][i / 3], turn_run_cb, done_cb));
    ASSERT_OK(uvs_schedule(&workers[i % 3], &tasks[i % 3][i / 3]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  prepare_cb(&prepare);
  ASSERT_EQ(loop_runs, 180);
  /* At most budget per worker per turn. */
  ASSERT_LE(max_turn_runs, 6);
  ASSERT_GE(turns_with_runs, 30);
  uv_close((uv_handle_t*) &prepare, NULL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A loop worker whose task re-schedules itself forever does not starve
 * timers and I/O: a repeating timer keeps firing. */
static uv_timer_t tick_timer;
static int ticks;
static atomic_int stop_chain;
static int chain_runs;

static void endless_run_cb(uvs_task_t* task) {
  chain_runs++;
  if (!atomic_load(&stop_chain))
    ASSERT_OK(uvs_schedule(&workers[0], task));
}


static void tick_cb(uv_timer_t* handle) {
  if (++ticks == 5) {
    atomic_store(&stop_chain, 1);
    uv_close((uv_handle_t*) handle, NULL);
  }
}


TEST_IMPL(budget_loop_chain_yields) {
  uvs_task_t t;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_LOOP));
  ASSERT_OK(uvs_task_init(&t, endless_run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &t));
  ASSERT_OK(uv_timer_init(&loop, &tick_timer));
  ASSERT_OK(uv_timer_start(&tick_timer, tick_cb, 1, 1));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ticks, 5);
  ASSERT_EQ(done_calls, 1);
  ASSERT_GT(chain_runs, 5);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A pool drain gives its thread back after `budget` tasks: the drain count
 * shows it. */
static atomic_int pool_runs;

static void pool_run_cb(uvs_task_t* task) {
  (void) task;
  test_spin_us(20); /* a turn of 5 outlasts the hold below */
  atomic_fetch_add(&pool_runs, 1);
}


/* SPEC 0.5, guarantee 7: a turn is budget tasks of one worker; when it
 * ends with work left the worker rejoins the tail, and the same drain
 * takes the next ready worker's turn. Two workers with 25 tasks each and
 * one drain allowed: their tasks run in blocks of the budget, turn about,
 * all on one drain (a hold of 10 s outlasts them all). */
static atomic_int turn_n;
static int turn_order[50];

static void turn_order_cb(uvs_task_t* task) {
  turn_order[atomic_fetch_add(&turn_n, 1)] = (int) (intptr_t) task->data;
}


TEST_IMPL(budget_pool_turns) {
  uvs_sched_options_t opts;
  uvs_stats_t st;
  int w;
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.budget = 5;
  opts.max_concurrency = 1;
  opts.hold_us = 10000000;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  for (w = 0; w < 2; w++) {
    ASSERT_OK(uvs_worker_init(&sched, &workers[w], UVS_POOL));
    for (i = 0; i < 25; i++) {
      ASSERT_OK(uvs_task_init(&tasks[w][i], turn_order_cb, done_cb));
      tasks[w][i].data = (void*) (intptr_t) w;
      ASSERT_OK(uvs_schedule(&workers[w], &tasks[w][i]));
    }
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&turn_n), 50);
  ASSERT_EQ(done_calls, 50);
  /* w0 x5, w1 x5, w0 x5, ... */
  for (i = 0; i < 50; i++) ASSERT_EQ(turn_order[i], (i / 5) % 2);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.drains, 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* The hold: a drain gives its thread back at the end of the first turn
 * that ends once it has held it for hold_us. With a hold of 1 us and
 * tasks of 20 us, that is every turn: 50 tasks in turns of 5 take 10
 * drains at least. */
TEST_IMPL(budget_pool_drains) {
  uvs_sched_options_t opts;
  uvs_stats_t st;
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.budget = 5;
  opts.hold_us = 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  for (i = 0; i < 50; i++) {
    ASSERT_OK(uvs_task_init(&tasks[i / 10][i % 10], pool_run_cb, done_cb));
    ASSERT_OK(uvs_schedule(&workers[0], &tasks[i / 10][i % 10]));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&pool_runs), 50);
  ASSERT_EQ(done_calls, 50);
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_GE(st.drains, 10);
  ASSERT_UINT64_LE(st.drains, 50);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* max_concurrency = k caps the run_cbs of this scheduler's pool workers that
 * run at once. Each task spins ~2 ms so that drains overlap if allowed. */
static atomic_int concurrent;
static atomic_int max_concurrent;

static void capped_run_cb(uvs_task_t* task) {
  int now;
  int prev;

  (void) task;
  now = atomic_fetch_add(&concurrent, 1) + 1;
  prev = atomic_load(&max_concurrent);
  while (now > prev &&
         !atomic_compare_exchange_weak(&max_concurrent, &prev, now)) {
  }
  test_spin_ms(2);
  atomic_fetch_sub(&concurrent, 1);
  atomic_fetch_add(&pool_runs, 1);
}


static void capped(unsigned k, unsigned budget) {
  uvs_sched_options_t opts;
  int w;
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.max_concurrency = k;
  opts.budget = budget;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  for (w = 0; w < 6; w++) {
    ASSERT_OK(uvs_worker_init(&sched, &workers[w], UVS_POOL));
    for (i = 0; i < 8; i++)
      ASSERT_OK(uvs_task_init(&tasks[w][i], capped_run_cb, done_cb));
  }
  for (i = 0; i < 8; i++)
    for (w = 0; w < 6; w++) ASSERT_OK(uvs_schedule(&workers[w], &tasks[w][i]));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&pool_runs), 48);
  ASSERT_EQ(done_calls, 48);
  ASSERT_LE(atomic_load(&max_concurrent), (int) k);
  ASSERT_GE(atomic_load(&max_concurrent), 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(max_concurrency_two) {
  capped(2, 2);
  return 0;
}


TEST_IMPL(max_concurrency_one) {
  capped(1, 3);
  return 0;
}


/* With max_concurrency = 1 and budget = 1, ready workers take turns in FIFO
 * order and a worker with work left rejoins the tail. A gate task on
 * another worker holds the only slot while the others are filled. */
static uv_sem_t go;
static int rr_order[16];
static atomic_int rr_n;

static void gate_run_cb(uvs_task_t* task) {
  (void) task;
  uv_sem_wait(&go);
}


static void rr_run_cb(uvs_task_t* task) {
  rr_order[atomic_fetch_add(&rr_n, 1)] = (int) (intptr_t) task->data;
}


static void open_gate_cb(uv_timer_t* handle) {
  uv_sem_post(&go);
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(max_concurrency_round_robin) {
  uvs_sched_options_t opts;
  uvs_task_t gate;
  uv_timer_t timer;
  int w;
  int i;

  ASSERT_OK(uv_sem_init(&go, 0));
  memset(&opts, 0, sizeof(opts));
  opts.max_concurrency = 1;
  opts.budget = 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  for (w = 0; w < 4; w++)
    ASSERT_OK(uvs_worker_init(&sched, &workers[w], UVS_POOL));
  ASSERT_OK(uvs_task_init(&gate, gate_run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&workers[3], &gate));
  for (w = 0; w < 3; w++) {
    for (i = 0; i < 3; i++) {
      ASSERT_OK(uvs_task_init(&tasks[w][i], rr_run_cb, done_cb));
      tasks[w][i].data = (void*) (intptr_t) (w * 10 + i);
      ASSERT_OK(uvs_schedule(&workers[w], &tasks[w][i]));
    }
  }
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, open_gate_cb, 10, 0));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 10);
  ASSERT_EQ(atomic_load(&rr_n), 9);
  /* A0 B0 C0 A1 B1 C1 A2 B2 C2 */
  for (i = 0; i < 9; i++) ASSERT_EQ(rr_order[i], (i % 3) * 10 + i / 3);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  return 0;
}


/* linger_us: a drain that empties its queue may wait for more work; tasks
 * still run, in order, and the scheduler closes promptly. */
static int linger_next;

static void linger_run_cb(uvs_task_t* task) {
  ASSERT_EQ((int) (intptr_t) task->data, linger_next);
  linger_next++;
}


static void linger_thread(void* arg) {
  int i;

  (void) arg;
  for (i = 0; i < 64; i++) {
    tasks[0][i].data = (void*) (intptr_t) i;
    ASSERT_OK(uvs_schedule(&workers[0], &tasks[0][i]));
    if (i % 8 == 0)
      test_spin_us(300);
  }
}


static void linger_done_cb(uvs_task_t* task, int status) {
  done_cb(task, status);
  if (done_calls == 64)
    ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


TEST_IMPL(linger_runs_in_order) {
  uvs_sched_options_t opts;
  uv_thread_t thread;
  int i;

  memset(&opts, 0, sizeof(opts));
  opts.linger_us = 2000;
  opts.keep_alive = 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  for (i = 0; i < 64; i++)
    ASSERT_OK(uvs_task_init(&tasks[0][i], linger_run_cb, linger_done_cb));
  ASSERT_OK(uv_thread_create(&thread, linger_thread, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_EQ(linger_next, 64);
  ASSERT_EQ(done_calls, 64);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* The cap is on pool drains: with max_concurrency = 1 taken by a pool task
 * that waits for a loop worker's task, the loop worker still runs. */
static void unblock_run_cb(uvs_task_t* task) {
  (void) task;
  uv_sem_post(&go);
}


TEST_IMPL(max_concurrency_loop_not_capped) {
  uvs_sched_options_t opts;
  uvs_task_t gate;
  uvs_task_t unblock;

  ASSERT_OK(uv_sem_init(&go, 0));
  memset(&opts, 0, sizeof(opts));
  opts.max_concurrency = 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[1], UVS_LOOP));
  ASSERT_OK(uvs_task_init(&gate, gate_run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&unblock, unblock_run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&workers[0], &gate));
  ASSERT_OK(uvs_schedule_after(&workers[1], &unblock, 5));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done_calls, 2);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  uv_sem_destroy(&go);
  return 0;
}


/* Runners join in only where they pay: after short tasks one runner serves
 * the ready workers alone. But a runner held up by a long task must not
 * leave the workers behind it waiting: within a few ms another runner
 * takes them. Worker 0's task waits for worker 1's, which is scheduled
 * behind it while the runners know only short tasks; without that help it
 * would wait until worker 0's task gave up (and the test fails). */
static atomic_int helped;

static void short_run_cb(uvs_task_t* task) {
  (void) task;
}


static void waits_for_help_cb(uvs_task_t* task) {
  uint64_t end;

  (void) task;
  end = test_hrtime_ms() + 10000;
  while (!atomic_load(&helped) && test_hrtime_ms() < end) test_spin_us(100);
  ASSERT(atomic_load(&helped));
}


static void helper_cb(uvs_task_t* task) {
  (void) task;
  atomic_store(&helped, 1);
}


static void calibrated_cb(uv_timer_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
}


TEST_IMPL(runner_held_up_gets_help) {
  uv_timer_t timer;
  int round;
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  for (i = 0; i < 6; i++)
    ASSERT_OK(uvs_worker_init(&sched, &workers[i], UVS_POOL));
  /* Drains learn the CPU's tick rate from two readings 20 ms apart
   * (drain.c); until then they time nothing and every runner joins in.
   * Round 0 takes the first reading, then real time passes. */
  for (round = 0; round < 4; round++) {
    if (round == 1) {
      ASSERT_OK(uv_timer_init(&loop, &timer));
      ASSERT_OK(uv_timer_start(&timer, calibrated_cb, 30, 0));
      ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    }
    /* Short tasks on four workers: the runners learn they are short. */
    for (i = 0; i < 64; i++) {
      ASSERT_OK(uvs_task_init(&tasks[2 + i % 4][i], short_run_cb, done_cb));
      ASSERT_OK(uvs_schedule(&workers[2 + i % 4], &tasks[2 + i % 4][i]));
    }
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    atomic_store(&helped, 0);
    ASSERT_OK(uvs_task_init(&tasks[0][round], waits_for_help_cb, done_cb));
    ASSERT_OK(uvs_task_init(&tasks[1][round], helper_cb, done_cb));
    ASSERT_OK(uvs_schedule(&workers[0], &tasks[0][round]));
    ASSERT_OK(uvs_schedule(&workers[1], &tasks[1][round]));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT(atomic_load(&helped));
  }
  ASSERT_EQ(done_calls, 4 * (64 + 2));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}
