/* Closes (SPEC guarantee 8): racing with the work they cancel, worker
 * closes during a scheduler's close, and what a closed scheduler and its
 * workers still answer. */

#include "task.h"

#include <stdatomic.h>

/* ---- the close race (issue 9) -------------------------------------------
 *
 * A close with UVS_CANCEL hands back every task that has not started. A
 * drain that is running its batch of slots while the close sweeps them must
 * not overtake the sweep: the tasks that ran form a prefix of schedule
 * order ("111110000", never "11111.1"), each task is handed back exactly
 * once, and at most one task starts after the close returned (the one the
 * drain may have just taken). Thousands of short iterations, each with a
 * fresh worker of 64 tasks of slightly different lengths, closed once the
 * first task has started. */

#define CR_TASKS 64
#define CR_ITERS 10000
#define CR_MAX_NS (4000 * 1000000ull)

typedef struct {
  uvs_task_t task;
  int idx;
  atomic_int ran;
  int done_calls; /* loop thread */
  int status;
} cr_task_t;

enum { CR_WORKER, CR_WORKER_FOREIGN, CR_SCHED };

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t cr_worker;
static cr_task_t cr_tasks[CR_TASKS];
static atomic_int cr_started;
static atomic_int cr_order[CR_TASKS]; /* task index by start order */
static atomic_int cr_started_after_close;
static int cr_mode;
static int cr_iter;
static int cr_iters_done;
static int cr_closing;
static int cr_close_calls;
static int cr_done_calls;
static uint64_t cr_end;
static uv_check_t cr_check;
static uv_thread_t cr_loop_thread;
/* CR_WORKER_FOREIGN: the closing thread. */
static uv_thread_t cr_thread;
static uv_sem_t cr_go;
static atomic_int cr_quit;
static atomic_int cr_closer_done; /* it has read cr_started after its close */

static void cr_start_iteration(void);
static void cr_worker_close_cb(uvs_worker_t* w);


static void spin_ns(uint64_t ns) {
  uint64_t end;

  end = uv_hrtime() + ns;
  while (uv_hrtime() < end) {
  }
}


static void cr_run_cb(uvs_task_t* task) {
  cr_task_t* t;
  int n;

  t = TEST_CONTAINER_OF(task, cr_task_t, task);
  n = atomic_fetch_add(&cr_started, 1);
  atomic_store(&cr_order[n], t->idx);
  ASSERT_EQ(atomic_fetch_add(&t->ran, 1), 0);
  /* 0 to 2.4 us, different in every iteration. */
  spin_ns((uint64_t) ((t->idx * 7 + cr_iter * 3) % 13) * 200);
}


static void cr_done_cb(uvs_task_t* task, int status) {
  cr_task_t* t;

  ASSERT(test_on_thread(cr_loop_thread));
  t = TEST_CONTAINER_OF(task, cr_task_t, task);
  t->done_calls++;
  t->status = status;
  cr_done_calls++;
}


/* Every task handed back once, the runs a prefix in order, at most one
 * start after the close returned. */
static void cr_check_iteration(void) {
  char pattern[CR_TASKS + 1];
  int prefix;
  int ran;
  int bad;
  int i;

  ASSERT_EQ(cr_done_calls, CR_TASKS);
  ran = atomic_load(&cr_started);
  bad = 0;
  prefix = 1;
  for (i = 0; i < CR_TASKS; i++) {
    cr_task_t* t = &cr_tasks[i];
    int r = atomic_load(&t->ran);
    ASSERT_EQ(t->done_calls, 1);
    if (r) {
      ASSERT_OK(t->status);
      if (!prefix)
        bad = 1;
    } else {
      ASSERT_ERR(t->status, UV_ECANCELED);
      prefix = 0;
    }
    pattern[i] = r ? '1' : '.';
  }
  pattern[CR_TASKS] = '\0';
  if (bad)
    test_failed(__FILE__, __LINE__,
                "iteration %d: a task ran after one scheduled before it was "
                "cancelled: runs %s",
                cr_iter, pattern);
  for (i = 0; i < ran; i++) ASSERT_EQ(atomic_load(&cr_order[i]), i);
  ASSERT_LE(ran, atomic_load(&cr_started_after_close) + 1);
}


static void cr_next(void) {
  cr_check_iteration();
  cr_iters_done++;
  cr_iter++;
  if (cr_iter < CR_ITERS && uv_hrtime() < cr_end) {
    cr_start_iteration();
    return;
  }
  uv_close((uv_handle_t*) &cr_check, NULL);
  if (cr_mode == CR_WORKER_FOREIGN) {
    atomic_store(&cr_quit, 1);
    uv_sem_post(&cr_go);
  }
  if (cr_mode != CR_SCHED)
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void cr_worker_close_cb(uvs_worker_t* w) {
  ASSERT_PTR_EQ(w, &cr_worker);
  ASSERT(test_on_thread(cr_loop_thread));
  cr_close_calls++;
  /* The closing thread reads the start count after its call returned; the
   * callback may come first. It is a few instructions away. */
  if (cr_mode == CR_WORKER_FOREIGN)
    while (!atomic_load(&cr_closer_done)) {
    }
  cr_next();
}


static void cr_sched_close_cb(uvs_sched_t* s) {
  ASSERT_PTR_EQ(s, &sched);
  cr_close_calls++;
  cr_next();
}


/* Close once the first task has started, or a few more: the drain's batch
 * is then further along. On the loop thread spin for at most 2 ms: a drain
 * may end and wait for the loop to post the next one. The closing thread
 * of a loop worker waits for as long as it takes: the loop runs them. */
static void cr_wait_for_starts(uint64_t max_ns) {
  static const int k[] = {1, 1, 2, 3, 5, 12, 20};
  uint64_t end;
  int want;

  want = k[cr_iter % (int) (sizeof(k) / sizeof(k[0]))];
  end = uv_hrtime() + max_ns;
  while (atomic_load(&cr_started) < want && uv_hrtime() < end) {
  }
}


static void cr_start_iteration(void) {
  int i;

  if (cr_mode == CR_SCHED)
    ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(
      &sched, &cr_worker, cr_mode == CR_WORKER_FOREIGN ? UVS_LOOP : UVS_POOL));
  atomic_store(&cr_started, 0);
  atomic_store(&cr_started_after_close, CR_TASKS);
  atomic_store(&cr_closer_done, 0);
  cr_done_calls = 0;
  for (i = 0; i < CR_TASKS; i++) {
    cr_task_t* t = &cr_tasks[i];
    t->idx = i;
    atomic_store(&t->ran, 0);
    t->done_calls = 0;
    t->status = 1;
    atomic_store(&cr_order[i], -1);
    ASSERT_OK(uvs_task_init(&t->task, cr_run_cb, cr_done_cb));
  }
  if (cr_mode == CR_WORKER_FOREIGN)
    uv_sem_post(&cr_go); /* it spins until the first task starts */
  for (i = 0; i < CR_TASKS; i++)
    ASSERT_OK(uvs_schedule(&cr_worker, &cr_tasks[i].task));
  cr_closing = 0;
}


/* The check phase follows the idle phase in which the scheduler posted the
 * drain: wait there for the first task to start, then close at once. */
static void cr_check_cb(uv_check_t* handle) {
  (void) handle;
  if (cr_mode == CR_WORKER_FOREIGN || cr_closing)
    return;
  cr_wait_for_starts(2000000);
  cr_closing = 1;
  if (cr_mode == CR_SCHED)
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, cr_sched_close_cb));
  else
    ASSERT_OK(uvs_worker_close(&cr_worker, UVS_CANCEL, cr_worker_close_cb));
  atomic_store(&cr_started_after_close, atomic_load(&cr_started));
}


static void cr_closer(void* arg) {
  (void) arg;
  for (;;) {
    uv_sem_wait(&cr_go);
    if (atomic_load(&cr_quit))
      return;
    cr_wait_for_starts(UINT64_MAX / 2);
    ASSERT_OK(uvs_worker_close(&cr_worker, UVS_CANCEL, cr_worker_close_cb));
    atomic_store(&cr_started_after_close, atomic_load(&cr_started));
    atomic_store(&cr_closer_done, 1);
  }
}


static void close_race(int mode) {
  cr_mode = mode;
  cr_loop_thread = uv_thread_self();
  cr_end = uv_hrtime() + CR_MAX_NS;
  ASSERT_OK(uv_loop_init(&loop));
  if (mode != CR_SCHED)
    ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uv_check_init(&loop, &cr_check));
  ASSERT_OK(uv_check_start(&cr_check, cr_check_cb));
  if (mode == CR_WORKER_FOREIGN) {
    ASSERT_OK(uv_sem_init(&cr_go, 0));
    ASSERT_OK(uv_thread_create(&cr_thread, cr_closer, NULL));
  }
  cr_start_iteration();
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  if (mode == CR_WORKER_FOREIGN) {
    ASSERT_OK(uv_thread_join(&cr_thread));
    uv_sem_destroy(&cr_go);
  }
  ASSERT_EQ(cr_close_calls, cr_iters_done);
  ASSERT_GE(cr_iters_done, 1);
  printf("# %d iterations\n", cr_iters_done);
  ASSERT_OK(uv_loop_close(&loop));
}


TEST_IMPL(close_race_cancel_prefix_pool) {
  close_race(CR_WORKER);
  return 0;
}


TEST_IMPL(close_race_cancel_prefix_loop_foreign) {
  close_race(CR_WORKER_FOREIGN);
  return 0;
}


TEST_IMPL(close_race_sched_cancel_prefix) {
  close_race(CR_SCHED);
  return 0;
}


/* ---- worker closes during a scheduler's close ----------------------------
 *
 * uvs_worker_close on a worker that only its scheduler's close is closing
 * returns 0 and its callback is called the same way: once, on the loop
 * thread, before the scheduler's close_cb. A second uvs_worker_close on it
 * returns UV_EINVAL, and so does one after the scheduler's close_cb. A
 * worker the user closed before the scheduler's close still gets its
 * callback first too.
 *
 * Worker 0 (pool) runs a gate task that blocks until the test opens the
 * gate, with tasks queued behind it; worker 2 (loop) is idle. The gate
 * task tells the loop it has started through an async handle, whose
 * callback schedules tasks onto worker 1 (loop), closes worker 1 with
 * UVS_DRAIN, then closes the scheduler with UVS_CANCEL; then, depending
 * on the case, closes workers 0 and 2 and opens the gate, or has that
 * done from a done callback, after a while, or from another thread. */

enum { EV_WORKER0 = 1, EV_WORKER1, EV_WORKER2, EV_SCHED };

static uvs_worker_t wc_workers[3];
static uvs_task_t wc_gate_task;
static uvs_task_t wc_tasks[2][4];
static uv_sem_t wc_gate;
static uv_async_t wc_started;
static uv_timer_t wc_timer;
static uv_thread_t wc_loop_thread;
static uv_thread_t wc_thread;
static int wc_events[16];
static int wc_nevents;
static int wc_cancelled;  /* worker 0 */
static int wc_handed1;    /* worker 1: ran or cancelled */
static atomic_int wc_ran; /* worker 1 */
static int wc_case;
static int wc_closes_in_done;

static void wc_worker_close_cb(uvs_worker_t* w);


static void wc_event(int ev) {
  ASSERT(test_on_thread(wc_loop_thread));
  ASSERT_LT(wc_nevents, 16);
  wc_events[wc_nevents++] = ev;
}


static int wc_count(int ev) {
  int n;
  int i;

  n = 0;
  for (i = 0; i < wc_nevents; i++)
    if (wc_events[i] == ev)
      n++;
  return n;
}


/* Each worker's callback, when expected, exactly once and before the
 * scheduler's, which comes last. */
static void wc_check_events(int w0, int w1, int w2) {
  ASSERT_EQ(wc_count(EV_WORKER0), w0);
  ASSERT_EQ(wc_count(EV_WORKER1), w1);
  ASSERT_EQ(wc_count(EV_WORKER2), w2);
  ASSERT_EQ(wc_count(EV_SCHED), 1);
  ASSERT_EQ(wc_events[wc_nevents - 1], EV_SCHED);
}


static void wc_gate_run_cb(uvs_task_t* task) {
  (void) task;
  ASSERT_OK(uv_async_send(&wc_started));
  uv_sem_wait(&wc_gate);
}


static void wc_run_cb(uvs_task_t* task) {
  ASSERT(task >= &wc_tasks[1][0]); /* worker 0's never start */
  atomic_fetch_add(&wc_ran, 1);
}


static void wc_worker_close_cb(uvs_worker_t* w) {
  ASSERT(w >= &wc_workers[0] && w <= &wc_workers[2]);
  wc_event(EV_WORKER0 + (int) (w - wc_workers));
}


static void wc_close_twice(uvs_worker_t* w) {
  ASSERT_OK(uvs_worker_close(w, UVS_CANCEL, wc_worker_close_cb));
  ASSERT_ERR(uvs_worker_close(w, UVS_CANCEL, wc_worker_close_cb), UV_EINVAL);
  ASSERT_ERR(uvs_worker_close(w, UVS_DRAIN, NULL), UV_EINVAL);
}


static void wc_done_cb(uvs_task_t* task, int status) {
  uvs_worker_t* w;

  ASSERT(test_on_thread(wc_loop_thread));
  if (task == &wc_gate_task) {
    ASSERT_OK(status);
    return;
  }
  if (task >= &wc_tasks[1][0]) {
    /* Worker 1 was draining when the scheduler's close began: run, or
     * cancelled, once either way. */
    if (status != 0)
      ASSERT_ERR(status, UV_ECANCELED);
    wc_handed1++;
    return;
  }
  ASSERT_ERR(status, UV_ECANCELED);
  wc_cancelled++;
  /* From a done callback during the scheduler's close, of a worker that
   * has a task running. */
  w = &wc_workers[0];
  if (wc_case == 1 && wc_closes_in_done++ == 0) {
    wc_close_twice(w);
    uv_sem_post(&wc_gate);
  }
}


static void wc_gate_done_cb(uvs_task_t* task, int status) {
  ASSERT(test_on_thread(wc_loop_thread));
  ASSERT_PTR_EQ(task, &wc_gate_task);
  ASSERT_OK(status);
  /* From another worker's done callback, after worker 2, idle, has long
   * finished the close its scheduler's close began. */
  if (wc_case == 2)
    wc_close_twice(&wc_workers[2]);
}


static void wc_sched_close_cb(uvs_sched_t* s) {
  int i;

  ASSERT_PTR_EQ(s, &sched);
  wc_event(EV_SCHED);
  for (i = 0; i < 3; i++)
    ASSERT_ERR(uvs_worker_close(&wc_workers[i], UVS_CANCEL, NULL), UV_EINVAL);
}


static void wc_timer_cb(uv_timer_t* handle) {
  (void) handle;
  uv_sem_post(&wc_gate);
}


static void wc_foreign(void* arg) {
  (void) arg;
  wc_close_twice(&wc_workers[0]);
  wc_close_twice(&wc_workers[2]);
  uv_sem_post(&wc_gate);
}


static void wc_started_cb(uv_async_t* handle) {
  int i;

  uv_close((uv_handle_t*) handle, NULL);
  for (i = 0; i < 4; i++)
    ASSERT_OK(uvs_schedule(&wc_workers[1], &wc_tasks[1][i]));
  ASSERT_OK(uvs_worker_close(&wc_workers[1], UVS_DRAIN, wc_worker_close_cb));
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, wc_sched_close_cb));
  /* The user's close of worker 1 stands. */
  ASSERT_ERR(uvs_worker_close(&wc_workers[1], UVS_CANCEL, NULL), UV_EINVAL);
  switch (wc_case) {
    case 0: /* right after the scheduler's close, work still running */
      wc_close_twice(&wc_workers[0]);
      wc_close_twice(&wc_workers[2]);
      uv_sem_post(&wc_gate);
      break;
    case 1: /* from a done callback: wc_done_cb */
      break;
    case 2: /* once worker 2 has closed: wc_gate_done_cb */
      ASSERT_OK(uv_timer_init(&loop, &wc_timer));
      ASSERT_OK(uv_timer_start(&wc_timer, wc_timer_cb, 10, 0));
      break;
    case 3: /* from a foreign thread */
      ASSERT_OK(uv_thread_create(&wc_thread, wc_foreign, NULL));
      break;
  }
}


static void worker_close_in_sched_close(int which) {
  int i;

  wc_case = which;
  wc_loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uv_sem_init(&wc_gate, 0));
  ASSERT_OK(uv_async_init(&loop, &wc_started, wc_started_cb));
  ASSERT_OK(uvs_worker_init(&sched, &wc_workers[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &wc_workers[1], UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &wc_workers[2], UVS_LOOP));
  ASSERT_OK(uvs_task_init(&wc_gate_task, wc_gate_run_cb, wc_gate_done_cb));
  ASSERT_OK(uvs_schedule(&wc_workers[0], &wc_gate_task));
  for (i = 0; i < 4; i++) {
    ASSERT_OK(uvs_task_init(&wc_tasks[0][i], wc_run_cb, wc_done_cb));
    ASSERT_OK(uvs_schedule(&wc_workers[0], &wc_tasks[0][i]));
  }
  for (i = 0; i < 4; i++)
    ASSERT_OK(uvs_task_init(&wc_tasks[1][i], wc_run_cb, wc_done_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  if (which == 3)
    ASSERT_OK(uv_thread_join(&wc_thread));
  /* Worker 0's 4 queued tasks were cancelled; worker 1's 4 handed back. */
  ASSERT_EQ(wc_cancelled, 4);
  ASSERT_EQ(wc_handed1, 4);
  ASSERT_LE(atomic_load(&wc_ran), 4);
  if (which == 1)
    ASSERT_EQ(wc_closes_in_done, 4);
  /* Case 1 closes worker 0 only; case 2 worker 2 only. */
  wc_check_events(which == 2 ? 0 : 1, 1, which == 1 ? 0 : 1);
  for (i = 0; i < 3; i++)
    ASSERT_ERR(uvs_worker_close(&wc_workers[i], UVS_CANCEL, NULL), UV_EINVAL);
  if (which == 2)
    uv_close((uv_handle_t*) &wc_timer, NULL);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  uv_sem_destroy(&wc_gate);
  ASSERT_OK(uv_loop_close(&loop));
}


TEST_IMPL(close_worker_in_sched_close_busy) {
  worker_close_in_sched_close(0);
  return 0;
}


TEST_IMPL(close_worker_in_sched_close_from_done) {
  worker_close_in_sched_close(1);
  return 0;
}


TEST_IMPL(close_worker_in_sched_close_after_closed) {
  worker_close_in_sched_close(2);
  return 0;
}


TEST_IMPL(close_worker_in_sched_close_foreign) {
  worker_close_in_sched_close(3);
  return 0;
}


/* ---- a closed scheduler's stats and workers ------------------------------
 *
 * In its close callback and after it, uvs_sched_stats returns the final
 * totals: scheduled == ran + cancelled, nothing pending. Schedules and
 * posts onto one of its workers after that, from the loop or a foreign
 * thread, answer UV_ESHUTDOWN (its memory is not reused here) and never
 * call back. Worker 1 (loop) runs 2 posts and 5 tasks; then worker 0
 * (pool) runs a gate task with 3 tasks and 2 posts queued behind it while
 * the scheduler closes with UVS_CANCEL. */

static uvs_task_t cs_gate_task;
static uvs_task_t cs_tasks[8];
static uvs_task_t cs_late_task;
static atomic_int cs_runs;
static int cs_dones;
static int cs_close_calls;
static int cs_late_err[3];
static uvs_stats_t cs_stats_in_cb;
static uvs_stats_t cs_stats_foreign;


static void cs_run_cb(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&cs_runs, 1);
}


static void cs_post_fn(void* arg) {
  (void) arg;
  atomic_fetch_add(&cs_runs, 1);
}


static void cs_schedule_worker0(void);

static void cs_done_cb(uvs_task_t* task, int status) {
  ASSERT_PTR_NE(task, &cs_late_task);
  cs_dones++;
  if (task >= &cs_tasks[5] && task < &cs_tasks[8]) {
    ASSERT_ERR(status, UV_ECANCELED);
    return;
  }
  ASSERT_OK(status);
  /* Worker 1's work has all run: now the gate. */
  if (task == &cs_tasks[4])
    cs_schedule_worker0();
}


static void cs_check_final(const uvs_stats_t* st) {
  /* gate + 3 + 2 on worker 0, 5 + 2 on worker 1 */
  ASSERT_UINT64_EQ(st->scheduled, 13);
  ASSERT_UINT64_EQ(st->ran, 8);
  ASSERT_UINT64_EQ(st->cancelled, 5);
  ASSERT_UINT64_EQ(st->pending, 0);
  ASSERT_UINT64_EQ(st->scheduled, st->ran + st->cancelled);
}


static void cs_sched_close_cb(uvs_sched_t* s) {
  ASSERT_PTR_EQ(s, &sched);
  cs_close_calls++;
  uvs_sched_stats(&sched, &cs_stats_in_cb);
  cs_check_final(&cs_stats_in_cb);
}


static void cs_started_cb(uv_async_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, cs_sched_close_cb));
  uv_sem_post(&wc_gate);
}


static void cs_gate_run_cb(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&cs_runs, 1);
  ASSERT_OK(uv_async_send(&wc_started));
  uv_sem_wait(&wc_gate);
}


static void cs_late(uvs_worker_t* w, int* err) {
  err[0] = uvs_schedule(w, &cs_late_task);
  err[1] = uvs_schedule_after(w, &cs_late_task, 1);
  err[2] = uvs_post(w, cs_post_fn, NULL);
}


static void cs_foreign(void* arg) {
  cs_late((uvs_worker_t*) arg, cs_late_err);
  uvs_sched_stats(&sched, &cs_stats_foreign);
}


static void cs_schedule_worker0(void) {
  int i;

  ASSERT_OK(uvs_schedule(&wc_workers[0], &cs_gate_task));
  for (i = 5; i < 8; i++) ASSERT_OK(uvs_schedule(&wc_workers[0], &cs_tasks[i]));
  ASSERT_OK(uvs_post(&wc_workers[0], cs_post_fn, NULL));
  ASSERT_OK(uvs_post(&wc_workers[0], cs_post_fn, NULL));
}


static void cs_setup(void) {
  int i;

  wc_loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uv_sem_init(&wc_gate, 0));
  ASSERT_OK(uv_async_init(&loop, &wc_started, cs_started_cb));
  ASSERT_OK(uvs_worker_init(&sched, &wc_workers[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &wc_workers[1], UVS_LOOP));
  ASSERT_OK(uvs_task_init(&cs_late_task, cs_run_cb, cs_done_cb));
  for (i = 0; i < 8; i++)
    ASSERT_OK(uvs_task_init(&cs_tasks[i], cs_run_cb, cs_done_cb));
  ASSERT_OK(uvs_task_init(&cs_gate_task, cs_gate_run_cb, cs_done_cb));
  ASSERT_OK(uvs_post(&wc_workers[1], cs_post_fn, NULL));
  ASSERT_OK(uvs_post(&wc_workers[1], cs_post_fn, NULL));
  for (i = 0; i < 5; i++) ASSERT_OK(uvs_schedule(&wc_workers[1], &cs_tasks[i]));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(cs_close_calls, 1);
  ASSERT_EQ(atomic_load(&cs_runs), 8);
  ASSERT_EQ(cs_dones, 9); /* tasks; posts have no done_cb */
}


TEST_IMPL(close_sched_stats_final) {
  uvs_stats_t st;
  uv_thread_t thread;

  cs_setup();
  uvs_sched_stats(&sched, &st);
  cs_check_final(&st);
  ASSERT_OK(uv_thread_create(&thread, cs_foreign, &wc_workers[1]));
  ASSERT_OK(uv_thread_join(&thread));
  cs_check_final(&cs_stats_foreign);
  uv_sem_destroy(&wc_gate);
  ASSERT_OK(uv_loop_close(&loop));
  uvs_sched_stats(&sched, &st);
  cs_check_final(&st);
  return 0;
}


TEST_IMPL(close_sched_closed_schedule_shutdown) {
  uv_thread_t thread;
  int err[3];
  int w;
  int i;

  cs_setup();
  for (w = 0; w < 2; w++) {
    ASSERT_OK(uv_thread_create(&thread, cs_foreign, &wc_workers[w]));
    ASSERT_OK(uv_thread_join(&thread));
    cs_late(&wc_workers[w], err);
    for (i = 0; i < 3; i++) {
      ASSERT_ERR(cs_late_err[i], UV_ESHUTDOWN);
      ASSERT_ERR(err[i], UV_ESHUTDOWN);
    }
  }
  /* Nothing was accepted: nothing to run or hand back. */
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&cs_runs), 8);
  ASSERT_EQ(cs_dones, 9);
  ASSERT_ERR(uvs_task_cancel(&cs_late_task), UV_EINVAL);
  uv_sem_destroy(&wc_gate);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}
