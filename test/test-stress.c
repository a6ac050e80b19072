/* Bounded stress, after ck's regressions/ck_fifo/validate: threads x size,
 * checking order and exactly-once. Never timed. */

#include "task.h"

#include <stdatomic.h>

#define NPROD 4
#define NWORK 4

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t workers[NWORK];


/* 1. FIFO per producer per worker, one at a time per worker. */
#define FIFO_PER 4000

typedef struct {
  uvs_task_t task;
  int producer;
  int seq;
  int worker;
  atomic_int ran;
  int done_calls;
} stask_t;

typedef struct {
  atomic_int inflight;
  int last[NPROD];
  long count;
} wstate_t;

static stask_t (*stasks)[NWORK][FIFO_PER];
static wstate_t wstate[NWORK];
static int done_total;
static int expect_total;


static void s_run_cb(uvs_task_t* task) {
  stask_t* t;
  wstate_t* ws;

  t = TEST_CONTAINER_OF(task, stask_t, task);
  ws = &wstate[t->worker];
  ASSERT_EQ(atomic_fetch_add(&ws->inflight, 1), 0);
  ASSERT_EQ(t->seq, ws->last[t->producer] + 1);
  ws->last[t->producer] = t->seq;
  ws->count++;
  ASSERT_EQ(atomic_fetch_add(&t->ran, 1), 0);
  ASSERT_EQ(atomic_fetch_sub(&ws->inflight, 1), 1);
}


static void s_done_cb(uvs_task_t* task, int status) {
  stask_t* t;

  t = TEST_CONTAINER_OF(task, stask_t, task);
  ASSERT_OK(status);
  ASSERT_EQ(++t->done_calls, 1);
  if (++done_total == expect_total)
    ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


static void s_producer(void* arg) {
  int p;
  int i;
  int w;

  p = (int) (intptr_t) arg;
  for (i = 0; i < FIFO_PER; i++) {
    for (w = 0; w < NWORK; w++) {
      stask_t* t = &stasks[p][w][i];
      t->producer = p;
      t->seq = i;
      t->worker = w;
      ASSERT_OK(uvs_schedule(&workers[w], &t->task));
    }
  }
}


TEST_IMPL(stress_fifo_producers_workers) {
  uvs_sched_options_t opts;
  uv_thread_t threads[NPROD];
  int p;
  int w;
  int i;

  stasks = calloc(NPROD, sizeof(*stasks));
  ASSERT_NOT_NULL(stasks);
  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  opts.budget = 16;
  opts.max_concurrency = 2;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  for (w = 0; w < NWORK; w++) {
    ASSERT_OK(
        uvs_worker_init(&sched, &workers[w], w & 1 ? UVS_LOOP : UVS_POOL));
    for (p = 0; p < NPROD; p++) wstate[w].last[p] = -1;
  }
  for (p = 0; p < NPROD; p++)
    for (w = 0; w < NWORK; w++)
      for (i = 0; i < FIFO_PER; i++)
        ASSERT_OK(uvs_task_init(&stasks[p][w][i].task, s_run_cb, s_done_cb));
  expect_total = NPROD * NWORK * FIFO_PER;
  for (p = 0; p < NPROD; p++)
    ASSERT_OK(uv_thread_create(&threads[p], s_producer, (void*) (intptr_t) p));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (p = 0; p < NPROD; p++) ASSERT_OK(uv_thread_join(&threads[p]));
  ASSERT_EQ(done_total, expect_total);
  for (w = 0; w < NWORK; w++) {
    ASSERT_EQ(wstate[w].count, NPROD * FIFO_PER);
    for (p = 0; p < NPROD; p++) ASSERT_EQ(wstate[w].last[p], FIFO_PER - 1);
  }
  ASSERT_OK(uv_loop_close(&loop));
  free(stasks);
  return 0;
}


/* 2. Posts from several threads to several workers. */
#define POST_PER 50000

static int post_last[NWORK][NPROD];
static atomic_int posts_ran;
static uvs_task_t post_markers[NPROD];
static int markers_done;

static void post_fn(void* arg) {
  uintptr_t v;
  int p;
  int w;
  int seq;

  v = (uintptr_t) arg;
  p = (int) (v & 0xff);
  w = (int) ((v >> 8) & 0xff);
  seq = (int) (v >> 16);
  ASSERT_EQ(seq, post_last[w][p] + 1);
  post_last[w][p] = seq;
  atomic_fetch_add(&posts_ran, 1);
}


static void marker_run_cb(uvs_task_t* task) {
  (void) task;
}


static void marker_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  if (++markers_done == NPROD)
    ASSERT_OK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


static void post_producer(void* arg) {
  int p;
  int i;
  int w;

  p = (int) (intptr_t) arg;
  for (i = 0; i < POST_PER; i++) {
    w = (i + p) % NWORK;
    ASSERT_OK(uvs_post(&workers[w], post_fn,
                       (void*) (uintptr_t) ((i / NWORK) << 16 | w << 8 | p)));
  }
  /* Drain closes run everything queued, so this marker is the last. */
  ASSERT_OK(uvs_schedule(&workers[p % NWORK], &post_markers[p]));
}


TEST_IMPL(stress_post_producers) {
  uvs_sched_options_t opts;
  uv_thread_t threads[NPROD];
  int p;
  int w;

  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  for (w = 0; w < NWORK; w++) {
    ASSERT_OK(
        uvs_worker_init(&sched, &workers[w], w & 1 ? UVS_LOOP : UVS_POOL));
    for (p = 0; p < NPROD; p++) post_last[w][p] = -1;
  }
  for (p = 0; p < NPROD; p++)
    ASSERT_OK(uvs_task_init(&post_markers[p], marker_run_cb, marker_done_cb));
  for (p = 0; p < NPROD; p++)
    ASSERT_OK(
        uv_thread_create(&threads[p], post_producer, (void*) (intptr_t) p));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (p = 0; p < NPROD; p++) ASSERT_OK(uv_thread_join(&threads[p]));
  ASSERT_EQ(atomic_load(&posts_ran), NPROD * POST_PER);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* 3. Many delayed tasks with random delays, a third cancelled from a
 * foreign thread at random moments. */
#define NTIMERS 20000

typedef struct {
  uvs_task_t task;
  uint64_t t_call;
  uint64_t delay;
  atomic_int ran;
  atomic_int cancel_rc;
  atomic_int scheduled;
  int done_calls;
  int status;
} ttask_t;

static ttask_t* timers;
static int timers_done;
static atomic_int timers_scheduled;

static void t_run_cb(uvs_task_t* task) {
  ttask_t* t;

  t = TEST_CONTAINER_OF(task, ttask_t, task);
  ASSERT_UINT64_GE(uv_hrtime(), t->t_call + t->delay * 1000000u);
  ASSERT_EQ(atomic_fetch_add(&t->ran, 1), 0);
}


static void t_done_cb(uvs_task_t* task, int status) {
  ttask_t* t;

  t = TEST_CONTAINER_OF(task, ttask_t, task);
  t->status = status;
  ASSERT_EQ(++t->done_calls, 1);
  if (++timers_done == NTIMERS)
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static unsigned rnd(unsigned* state) {
  *state = *state * 1103515245u + 12345u;
  return (*state >> 16) & 0x7fff;
}


static void timer_producer(void* arg) {
  unsigned seed;
  int i;
  int from;

  from = (int) (intptr_t) arg;
  seed = 17u + (unsigned) from;
  for (i = from; i < NTIMERS; i += 2) {
    ttask_t* t = &timers[i];
    t->delay = rnd(&seed) % 40;
    t->t_call = uv_hrtime();
    ASSERT_OK(uvs_schedule_after(&workers[i % NWORK], &t->task, t->delay));
    atomic_store(&t->scheduled, 1);
    atomic_fetch_add(&timers_scheduled, 1);
  }
}


static void timer_canceller(void* arg) {
  unsigned seed;
  int i;

  (void) arg;
  seed = 99;
  while (atomic_load(&timers_scheduled) < NTIMERS / 2) {
  }
  for (i = 0; i < NTIMERS; i += 3) {
    while (!atomic_load(&timers[i].scheduled)) {
    }
    if (rnd(&seed) % 4 == 0)
      test_spin_us(50);
    atomic_store(&timers[i].cancel_rc, uvs_task_cancel(&timers[i].task));
  }
}


TEST_IMPL(stress_timers_cancel) {
  uvs_sched_options_t opts;
  uv_thread_t threads[3];
  int i;
  int w;
  int rc;

  timers = calloc(NTIMERS, sizeof(*timers));
  ASSERT_NOT_NULL(timers);
  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
  for (w = 0; w < NWORK; w++)
    ASSERT_OK(
        uvs_worker_init(&sched, &workers[w], w & 1 ? UVS_LOOP : UVS_POOL));
  for (i = 0; i < NTIMERS; i++) {
    atomic_store(&timers[i].cancel_rc, 1);
    ASSERT_OK(uvs_task_init(&timers[i].task, t_run_cb, t_done_cb));
  }
  ASSERT_OK(uv_thread_create(&threads[0], timer_producer, (void*) 0));
  ASSERT_OK(uv_thread_create(&threads[1], timer_producer, (void*) 1));
  ASSERT_OK(uv_thread_create(&threads[2], timer_canceller, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  for (i = 0; i < 3; i++) ASSERT_OK(uv_thread_join(&threads[i]));
  ASSERT_EQ(timers_done, NTIMERS);
  for (i = 0; i < NTIMERS; i++) {
    ttask_t* t = &timers[i];
    rc = atomic_load(&t->cancel_rc);
    ASSERT_EQ(t->done_calls, 1);
    if (rc == 0) {
      ASSERT_ERR(t->status, UV_ECANCELED);
      ASSERT_EQ(atomic_load(&t->ran), 0);
    } else {
      if (rc != 1)
        ASSERT_ERR(rc, UV_EBUSY);
      ASSERT_OK(t->status);
      ASSERT_EQ(atomic_load(&t->ran), 1);
    }
  }
  ASSERT_OK(uv_loop_close(&loop));
  free(timers);
  return 0;
}


/* 4. Many scheduler lifetimes on one loop, each with some work and a close
 * while work is in flight: nothing leaks and the loop closes. */
static atomic_int cycle_runs;
static int cycle_done;

static void c_run_cb(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&cycle_runs, 1);
}


static void c_post_fn(void* arg) {
  (void) arg;
  atomic_fetch_add(&cycle_runs, 1);
}


static void c_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT(status == 0 || status == UV_ECANCELED);
  cycle_done++;
}


TEST_IMPL(stress_sched_cycles) {
  uvs_task_t tasks[32];
  int cycle;
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  for (cycle = 0; cycle < 300; cycle++) {
    ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
    ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_POOL));
    ASSERT_OK(uvs_worker_init(&sched, &workers[1], UVS_LOOP));
    for (i = 0; i < 32; i++) {
      ASSERT_OK(uvs_task_init(&tasks[i], c_run_cb, c_done_cb));
      if (i % 3 == 2)
        ASSERT_OK(uvs_schedule_every(&workers[i & 1], &tasks[i], 0, 1));
      else
        ASSERT_OK(uvs_schedule_after(&workers[i & 1], &tasks[i], i % 2));
      ASSERT_OK(uvs_post(&workers[i & 1], c_post_fn, NULL));
    }
    (void) uv_run(&loop, UV_RUN_NOWAIT);
    ASSERT_OK(
        uvs_sched_close(&sched, cycle & 1 ? UVS_DRAIN : UVS_CANCEL, NULL));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(cycle_done, 32 * (cycle + 1));
  }
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* 5. Worker close racing with producers, repeated with fresh loops. */
#define CR_PER 1000
#define CR_ITERS 30

typedef struct {
  uvs_task_t task;
  atomic_int rc;
  atomic_int ran;
  int done_calls;
} crtask_t;

static crtask_t (*crtasks)[CR_PER];
static uv_thread_t cr_threads[2];
static int cr_done;
static int cr_iter;
static int cr_closed;

static void cr_run_cb(uvs_task_t* task) {
  crtask_t* t;

  t = TEST_CONTAINER_OF(task, crtask_t, task);
  ASSERT_EQ(atomic_fetch_add(&t->ran, 1), 0);
}


static void cr_worker_closed(uvs_worker_t* w) {
  int i;

  (void) w;
  cr_closed++;
  for (i = 0; i < 2; i++) ASSERT_OK(uv_thread_join(&cr_threads[i]));
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void cr_done_cb(uvs_task_t* task, int status) {
  crtask_t* t;

  t = TEST_CONTAINER_OF(task, crtask_t, task);
  ASSERT(status == 0 || status == UV_ECANCELED);
  ASSERT_EQ(atomic_load(&t->ran), status == 0);
  ASSERT_EQ(++t->done_calls, 1);
  if (++cr_done == 50 + cr_iter * 20)
    ASSERT_OK(uvs_worker_close(
        &workers[0], cr_iter & 1 ? UVS_DRAIN : UVS_CANCEL, cr_worker_closed));
}


static void cr_producer(void* arg) {
  int p;
  int i;
  int r;

  p = (int) (intptr_t) arg;
  for (i = 0; i < CR_PER; i++) {
    r = uvs_schedule(&workers[0], &crtasks[p][i].task);
    atomic_store(&crtasks[p][i].rc, r);
    if (r != 0) {
      ASSERT_ERR(r, UV_ESHUTDOWN);
      break;
    }
  }
}


TEST_IMPL(stress_worker_close_race) {
  uvs_sched_options_t opts;
  int p;
  int i;
  int accepted;
  int rc;

  crtasks = calloc(2, sizeof(*crtasks));
  ASSERT_NOT_NULL(crtasks);
  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  for (cr_iter = 0; cr_iter < CR_ITERS; cr_iter++) {
    cr_done = 0;
    cr_closed = 0;
    ASSERT_OK(uv_loop_init(&loop));
    ASSERT_OK(uvs_sched_init(&loop, &sched, &opts));
    ASSERT_OK(uvs_worker_init(&sched, &workers[0],
                              cr_iter % 3 ? UVS_POOL : UVS_LOOP));
    for (p = 0; p < 2; p++) {
      for (i = 0; i < CR_PER; i++) {
        memset(&crtasks[p][i], 0, sizeof(crtasks[p][i]));
        atomic_store(&crtasks[p][i].rc, 1);
        ASSERT_OK(uvs_task_init(&crtasks[p][i].task, cr_run_cb, cr_done_cb));
      }
    }
    for (p = 0; p < 2; p++)
      ASSERT_OK(
          uv_thread_create(&cr_threads[p], cr_producer, (void*) (intptr_t) p));
    ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
    ASSERT_EQ(cr_closed, 1);
    accepted = 0;
    for (p = 0; p < 2; p++) {
      for (i = 0; i < CR_PER; i++) {
        rc = atomic_load(&crtasks[p][i].rc);
        if (rc == 0) {
          accepted++;
          ASSERT_EQ(crtasks[p][i].done_calls, 1);
        } else {
          ASSERT_EQ(crtasks[p][i].done_calls, 0);
          ASSERT_EQ(atomic_load(&crtasks[p][i].ran), 0);
        }
      }
    }
    ASSERT_EQ(cr_done, accepted);
    ASSERT_OK(uv_loop_close(&loop));
  }
  free(crtasks);
  return 0;
}
