/* Hooks, suspend and resume, barriers (SPEC 0.4, issue 33): what they
 * cost.
 *
 *   h1  s1's and s3's loads (one pool worker, from the loop thread, from an
 *       I/O callback, from a foreign thread) on a scheduler with an empty
 *       hook, against the same on one without a hook. Before the clocks, a
 *       counting hook on a third scheduler checks the events of both loads.
 *   h2  a uvs_worker_suspend + uvs_worker_resume pair, from the loop thread
 *       and from a foreign thread, against one uvs_schedule from the same
 *       thread; and the pair with 10k tasks queued on the (suspended)
 *       worker against the pair with none queued: O(1).
 *   h3  a barrier on a width-4 worker whose 4 lanes are busy (8 tasks of
 *       200 us spin on 8 keys ahead of it): from the last earlier task's
 *       return to the barrier's run_cb start, p50 and p99, against a serial
 *       pool worker's hand-off from one queued task's return to the next
 *       one's start. Timestamps are uv_hrtime() in the run_cbs. Also
 *       reported: the same barrier on a scheduler with a task budget
 *       instead of the time slice.
 *
 * Everything runs in one process; the variants of a row alternate their
 * order from one repetition to the next, as elsewhere.
 */

#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void sched_open_hook(uv_loop_t* loop,
                            uvs_sched_t* s,
                            uvs_hook_cb hook,
                            void* arg) {
  uvs_sched_options_t o;

  memset(&o, 0, sizeof(o));
  o.hook = hook;
  o.hook_arg = arg;
  if (uvs_sched_init(loop, s, &o) != 0)
    abort();
}


static void atomic_max(uint64_t* p, uint64_t v) {
  uint64_t cur;

  cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v > cur && !__atomic_compare_exchange_n(
                        p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}


/* Spins for ns of wall time. */
static void spin_wall(uint64_t ns) {
  uint64_t end;

  end = uv_hrtime() + ns;
  while (uv_hrtime() < end) {
  }
}


/* ---- h1: an empty hook
 * ------------------------------------------------------ */

static void empty_hook(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uvs_event_t event,
                       int status,
                       void* arg) {
  (void) worker;
  (void) task;
  (void) event;
  (void) status;
  (void) arg;
}


typedef struct hook_count_s {
  uint64_t ev[4];     /* atomic: events by kind */
  uint64_t with_task; /* atomic: ENDED events with a task (done-less: 0) */
  uint64_t bad_event; /* atomic: an event outside the enum */
} hook_count_t;


static void count_hook(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uvs_event_t event,
                       int status,
                       void* arg) {
  hook_count_t* c;

  (void) worker;
  (void) status;
  c = arg;
  if ((unsigned) event > UVS_EV_HANDED_BACK) {
    __atomic_add_fetch(&c->bad_event, 1, __ATOMIC_RELAXED);
    return;
  }
  __atomic_add_fetch(&c->ev[event], 1, __ATOMIC_RELAXED);
  if (event == UVS_EV_ENDED && task != NULL)
    __atomic_add_fetch(&c->with_task, 1, __ATOMIC_RELAXED);
}


/* n done-less tasks ran: each reported ACCEPTED, STARTED and ENDED (with a
 * NULL task) once, and none HANDED_BACK. */
static void hook_count_check(hook_count_t* c, uint64_t n, const char* where) {
  if (c->ev[UVS_EV_ACCEPTED] != n || c->ev[UVS_EV_STARTED] != n ||
      c->ev[UVS_EV_ENDED] != n || c->ev[UVS_EV_HANDED_BACK] != 0 ||
      c->with_task != 0 || c->bad_event != 0)
    bench_fail(
        "%s: hook saw %llu accepted, %llu started, %llu ended (%llu with a "
        "task), %llu handed back, %llu unknown, for %llu done-less tasks",
        where, (unsigned long long) c->ev[UVS_EV_ACCEPTED],
        (unsigned long long) c->ev[UVS_EV_STARTED],
        (unsigned long long) c->ev[UVS_EV_ENDED],
        (unsigned long long) c->with_task,
        (unsigned long long) c->ev[UVS_EV_HANDED_BACK],
        (unsigned long long) c->bad_event, (unsigned long long) n);
  memset(c, 0, sizeof(*c));
}


typedef struct h1_side_s {
  uvs_sched_t sched;
  uvs_worker_t one;
} h1_side_t;


static void h1_side_open(uv_loop_t* loop,
                         h1_side_t* side,
                         uvs_hook_cb hook,
                         void* arg) {
  sched_open_hook(loop, &side->sched, hook, arg);
  if (uvs_worker_init(&side->sched, &side->one, UVS_POOL) != 0)
    abort();
}


void bench_h1_hook_cost(const bench_cfg_t* cfg) {
  static const char* const where[2][3] = {
      {"h1 s1 no hook", "h1 s1-cb no hook", "h1 s3 no hook"},
      {"h1 s1 empty hook", "h1 s1-cb empty hook", "h1 s3 empty hook"}};
  uv_loop_t loop;
  h1_side_t side[2]; /* 0: no hook, 1: an empty hook */
  h1_side_t counted;
  hook_count_t hc;
  bench_row_t* rows[3];
  bench_rr_t rr;
  bench_feed_t f;
  bench_lane_t lane;
  bench_utask_t* utasks;
  double ns[2][3];
  uint64_t cpu;
  double rate;
  size_t n;
  int run;
  int style;
  int k;
  int v;

  rows[0] = bench_row("h1.s1",
                      "hooks: s1's load (1 pool worker, from the loop) with "
                      "an empty hook vs none",
                      "ns/task", BENCH_LE, 1.25, 0);
  rows[1] = bench_row("h1.s1-cb",
                      "hooks: s1's load from an I/O callback with an empty "
                      "hook vs none",
                      "ns/task", BENCH_LE, 1.25, 0);
  rows[2] = bench_row("h1.s3",
                      "hooks: s3's load (1 pool worker, foreign thread) with "
                      "an empty hook vs none",
                      "ns/task", BENCH_LE, 1.25, 0);

  n = cfg->pool_tasks;
  utasks = bench_alloc(n, sizeof(*utasks));
  bench_loop_init(&loop);
  memset(&hc, 0, sizeof(hc));
  h1_side_open(&loop, &side[0], NULL, NULL);
  h1_side_open(&loop, &side[1], empty_hook, NULL);
  h1_side_open(&loop, &counted, count_hook, &hc);
  memset(&rr, 0, sizeof(rr));
  rr.loop = &loop;
  rr.lanes = &lane;
  rr.tasks = utasks;
  rr.nworkers = 1;
  rr.per = n;
  memset(&f, 0, sizeof(f));
  f.n = n;
  f.utasks = utasks;

  /* Untimed: the events a hook sees under each load (and a warm-up). */
  rr.workers = &counted.one;
  rr.in_cb = 0;
  bench_rr_uvs(&rr, "h1 s1 counting hook");
  hook_count_check(&hc, n, "h1 s1 counting hook");
  rr.in_cb = 1;
  bench_rr_uvs(&rr, "h1 s1-cb counting hook");
  hook_count_check(&hc, n, "h1 s1-cb counting hook");
  f.worker = &counted.one;
  bench_feed_run(&loop, &f, bench_feed_uvs, &cpu, "h1 s3 counting hook");
  hook_count_check(&hc, n, "h1 s3 counting hook");

  for (run = 0; run < cfg->runs; run++) {
    for (style = 0; style < 3; style++) {
      for (k = 0; k < 2; k++) {
        v = bench_order(run, 2, k);
        ns[v][style] = NAN;
        if (style == 2) {
          f.worker = &side[v].one;
          rate =
              bench_feed_run(&loop, &f, bench_feed_uvs, &cpu, where[v][style]);
        } else {
          rr.in_cb = style == 1;
          rr.workers = &side[v].one;
          rate = bench_rr_uvs(&rr, where[v][style]);
        }
        if (!isnan(rate) && rate > 0)
          ns[v][style] = 1e9 / rate;
        bench_note(cfg, where[v][style], run, ns[v][style], "ns/task");
      }
      bench_row_add(rows[style], ns[1][style], ns[0][style]);
    }
  }

  bench_check_stats(&counted.sched, "h1 counting");
  bench_sched_close(&loop, &counted.sched, "h1 counting");
  for (v = 0; v < 2; v++) {
    bench_check_stats(&side[v].sched, v == 0 ? "h1 none" : "h1 empty");
    bench_sched_close(&loop, &side[v].sched, v == 0 ? "h1 none" : "h1 empty");
  }
  bench_loop_close(&loop, "h1");
  bench_free(utasks);
}


/* ---- h2: suspend and resume
 * ------------------------------------------------- */

enum { H2_SCHEDULE = 0, H2_PAIRS = 1 };

/* n calls of one kind onto one worker, timed where they are made. */
typedef struct h2_calls_s {
  uvs_worker_t* worker;
  bench_utask_t* tasks; /* H2_SCHEDULE: n tasks, initialised */
  size_t n;
  int what;
  int err;
  uint64_t ns; /* the n calls took this long */
} h2_calls_t;


static void h2_calls(void* arg) {
  h2_calls_t* c;
  uvs_worker_t* w;
  uint64_t t0;
  size_t i;
  int err;

  c = arg;
  w = c->worker;
  err = 0;
  t0 = uv_hrtime();
  if (c->what == H2_SCHEDULE) {
    for (i = 0; i < c->n && err == 0; i++)
      err = uvs_schedule(w, &c->tasks[i].task);
  } else {
    for (i = 0; i < c->n && err == 0; i++) {
      err = uvs_worker_suspend(w);
      if (err == 0)
        err = uvs_worker_resume(w);
    }
  }
  c->ns = uv_hrtime() - t0;
  c->err = err;
}


/* Runs c on the loop thread, or on a foreign thread while the loop is not
 * running. */
static void h2_call(h2_calls_t* c, int foreign) {
  bench_thread_t th;

  if (!foreign) {
    h2_calls(c);
    return;
  }
  bench_thread_start(&th, h2_calls, c);
  bench_thread_join(&th);
}


static void h2_tasks_init(bench_utask_t* tasks,
                          size_t n,
                          bench_lane_t* lane,
                          bench_count_t* count) {
  size_t i;

  bench_count_reset(count, n);
  bench_lanes_reset(lane, 1, count);
  for (i = 0; i < n; i++) {
    uvs_task_init(&tasks[i].task, bench_utask_run, NULL);
    tasks[i].task.data = lane;
    tasks[i].seq = i;
  }
}


static void h2_check_ran(const bench_count_t* count,
                         const bench_lane_t* lane,
                         size_t n,
                         const char* where) {
  if (bench_count_ran(count) != n) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(count), n);
    return;
  }
  bench_lanes_check(lane, 1, n, where);
}


/* ns per uvs_schedule: n tasks onto the idle worker w, from the loop
 * thread before uv_run() (the drain waits for the loop) or from a foreign
 * thread while the loop is not running; then the loop runs them all. A
 * finish handle keeps the loop alive until the last run: a foreign
 * thread's schedules cannot ref the loop's handles. */
static double h2_schedule(uv_loop_t* loop,
                          uvs_worker_t* w,
                          bench_utask_t* tasks,
                          size_t n,
                          int foreign,
                          const char* where) {
  bench_count_t count;
  bench_lane_t lane;
  uv_async_t finish;
  h2_calls_t c;

  h2_tasks_init(tasks, n, &lane, &count);
  bench_finish_init(loop, &finish);
  count.notify = &finish;
  memset(&c, 0, sizeof(c));
  c.worker = w;
  c.tasks = tasks;
  c.n = n;
  c.what = H2_SCHEDULE;
  bench_arm(where);
  h2_call(&c, foreign);
  uv_run(loop, UV_RUN_DEFAULT);
  if (c.err != 0) {
    bench_fail("%s: uvs_schedule: %s", where, uv_strerror(c.err));
    return NAN;
  }
  h2_check_ran(&count, &lane, n, where);
  return (double) c.ns / (double) n;
}


/* ns per suspend + resume pair: n pairs on w. With base set, w is
 * suspended once first, and `queued` tasks (from tasks) wait on it during
 * the pairs, which then take its count from 1 to 2 and back; the last
 * resume lets them run. Without, the pairs take it from 0 to 1 and back,
 * with nothing queued. */
static double h2_pairs(uv_loop_t* loop,
                       uvs_worker_t* w,
                       bench_utask_t* tasks,
                       size_t queued,
                       size_t n,
                       int base,
                       int foreign,
                       const char* where) {
  bench_count_t count;
  bench_lane_t lane;
  uvs_worker_metrics_t m;
  h2_calls_t c;
  size_t i;
  int err;

  bench_arm(where);
  h2_tasks_init(tasks, queued, &lane, &count);
  if (base && uvs_worker_suspend(w) != 0) {
    bench_fail("%s: uvs_worker_suspend failed", where);
    return NAN;
  }
  for (i = 0; i < queued; i++) {
    err = uvs_schedule(w, &tasks[i].task);
    if (err != 0) {
      bench_fail("%s: uvs_schedule: %s", where, uv_strerror(err));
      break;
    }
  }
  /* Let the loop see the suspended worker with its queue, without
   * waiting: its pending tasks keep a full run from returning. */
  uv_run(loop, UV_RUN_NOWAIT);

  memset(&c, 0, sizeof(c));
  c.worker = w;
  c.n = n;
  c.what = H2_PAIRS;
  h2_call(&c, foreign);

  if (bench_count_ran(&count) != 0)
    bench_fail("%s: %llu tasks ran on a suspended worker", where,
               (unsigned long long) bench_count_ran(&count));
  if (uvs_worker_metrics(w, &m) != 0 || m.suspended != (base ? 1u : 0u) ||
      m.queued != queued)
    bench_fail("%s: suspend count %llu, %llu queued, after the pairs", where,
               (unsigned long long) m.suspended, (unsigned long long) m.queued);
  if (base && uvs_worker_resume(w) != 0)
    bench_fail("%s: uvs_worker_resume failed", where);
  uv_run(loop, UV_RUN_DEFAULT);
  if (c.err != 0) {
    bench_fail("%s: suspend or resume: %s", where, uv_strerror(c.err));
    return NAN;
  }
  h2_check_ran(&count, &lane, queued, where);
  return (double) c.ns / (double) n;
}


void bench_h2_suspend(const bench_cfg_t* cfg) {
  static const char* const where[8] = {
      "h2 schedule from the loop",
      "h2 suspend + resume from the loop",
      "h2 schedule from a foreign thread",
      "h2 suspend + resume from a foreign thread",
      "h2 pairs from the loop, none queued",
      "h2 pairs from the loop, 10k queued",
      "h2 pairs from a foreign thread, none queued",
      "h2 pairs from a foreign thread, 10k queued"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t worker;
  bench_row_t* rows[4];
  bench_utask_t* tasks;
  double ns[8];
  double pair[2][BENCH_MAX_RUNS];
  size_t n;
  size_t q;
  int run;
  int k;
  int v;

  /* Per call: half a pair that takes the count from 0 to 1 and back, the
   * way a connection's backpressure uses them. */
  rows[0] = bench_row("h2.loop",
                      "suspend or resume, per call (0-1-0 pairs), from the "
                      "loop thread vs one uvs_schedule from it",
                      "ns/call", BENCH_LE, 2.0, 0);
  rows[1] = bench_row("h2.foreign",
                      "suspend or resume, per call (0-1-0 pairs), from a "
                      "foreign thread vs one uvs_schedule from it",
                      "ns/call", BENCH_LE, 2.0, 0);
  rows[2] = bench_row("h2.o1-loop",
                      "suspend + resume pair from the loop, 10k tasks queued "
                      "on the worker vs none",
                      "ns/pair", BENCH_INFO, NAN, 0);
  rows[3] = bench_row("h2.o1-foreign",
                      "suspend + resume pair from a foreign thread, 10k "
                      "tasks queued on the worker vs none",
                      "ns/pair", BENCH_INFO, NAN, 0);

  n = cfg->hooks_calls;
  q = cfg->hooks_queued;
  tasks = bench_alloc(n > q ? n : q, sizeof(*tasks));
  bench_loop_init(&loop);
  sched_open_hook(&loop, &sched, NULL, NULL);
  if (uvs_worker_init(&sched, &worker, UVS_POOL) != 0)
    abort();

  /* Untimed warm-up of both paths. */
  h2_schedule(&loop, &worker, tasks, n, 0, "h2 warm-up schedule");
  h2_pairs(&loop, &worker, tasks, q, n, 1, 0, "h2 warm-up pairs");

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 8; k++) {
      v = bench_order(run, 8, k);
      switch (v) {
        case 0:
        case 2:
          ns[v] = h2_schedule(&loop, &worker, tasks, n, v == 2, where[v]);
          break;
        case 1:
        case 3:
          ns[v] = h2_pairs(&loop, &worker, tasks, 0, n, 0, v == 3, where[v]);
          break;
        default:
          /* 4, 5: from the loop; 6, 7: foreign; odd: 10k queued. */
          ns[v] = h2_pairs(&loop, &worker, tasks, (v & 1) ? q : 0, n, 1, v >= 6,
                           where[v]);
          break;
      }
      bench_note(cfg, where[v], run, ns[v],
                 v == 0 || v == 2 ? "ns/call" : "ns/pair");
    }
    bench_row_add(rows[0], ns[1] / 2, ns[0]);
    bench_row_add(rows[1], ns[3] / 2, ns[2]);
    pair[0][run] = ns[1];
    pair[1][run] = ns[3];
    bench_row_add(rows[2], ns[5], ns[4]);
    bench_row_add(rows[3], ns[7], ns[6]);
  }

  bench_figure("h2.pair.loop", bench_median(pair[0], cfg->runs), "ns/pair");
  bench_figure("h2.pair.foreign", bench_median(pair[1], cfg->runs), "ns/pair");

  bench_check_stats(&sched, "h2");
  bench_sched_close(&loop, &sched, "h2");
  bench_loop_close(&loop, "h2");
  bench_free(tasks);
}


/* ---- h3: a barrier behind 4 busy lanes
 * -------------------------------------- */

#define H3_KEYED 8  /* busy tasks ahead of each barrier, one per key */
#define H3_SERIAL 2 /* tasks per serial round: a busy one, then the next */

typedef struct h3_s h3_t;

typedef struct h3_task_s {
  uvs_task_t task;
  h3_t* h;
} h3_task_t;

struct h3_s {
  uvs_worker_t* worker;
  int keyed; /* 1: busy tasks on keys, then a barrier; 0: serial */
  size_t rounds;
  size_t round; /* loop thread */
  uint64_t spin_ns;
  h3_task_t busy[H3_KEYED];
  h3_task_t last;    /* the barrier, or the serial round's next task */
  uint64_t last_end; /* atomic: the latest return of a busy task */
  uint64_t ended;    /* atomic: busy tasks returned this round */
  uint64_t running;  /* atomic: busy run_cbs executing now */
  double* lat;       /* rounds samples, ns */
  uint64_t bad;      /* the measured task started too early, or beside one */
  int err;
};


static void h3_busy_run(uvs_task_t* task) {
  h3_t* h;

  h = ((h3_task_t*) task)->h;
  __atomic_add_fetch(&h->running, 1, __ATOMIC_RELAXED);
  spin_wall(h->spin_ns);
  __atomic_sub_fetch(&h->running, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&h->ended, 1, __ATOMIC_RELAXED);
  atomic_max(&h->last_end, uv_hrtime()); /* the last thing before return */
}


static void h3_last_run(uvs_task_t* task) {
  uint64_t start;
  uint64_t end;
  h3_t* h;

  start = uv_hrtime(); /* the first thing */
  h = ((h3_task_t*) task)->h;
  end = __atomic_load_n(&h->last_end, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(&h->ended, __ATOMIC_ACQUIRE) !=
          (h->keyed ? H3_KEYED : H3_SERIAL - 1) ||
      __atomic_load_n(&h->running, __ATOMIC_ACQUIRE) != 0 || start < end) {
    h->bad++;
    h->lat[h->round] = NAN;
    return;
  }
  h->lat[h->round] = (double) (start - end);
}


static void h3_round(h3_t* h);


static void h3_last_done(uvs_task_t* task, int status) {
  h3_t* h;

  h = ((h3_task_t*) task)->h;
  if (status != 0 && h->err == 0)
    h->err = status;
  if (h->err != 0)
    return;
  if (++h->round < h->rounds)
    h3_round(h);
}


/* Loop thread: one round's tasks, the measured one last. */
static void h3_round(h3_t* h) {
  size_t nbusy;
  size_t i;
  int err;

  h->last_end = 0;
  h->ended = 0;
  nbusy = h->keyed ? H3_KEYED : H3_SERIAL - 1;
  err = 0;
  for (i = 0; i < nbusy && err == 0; i++) {
    uvs_task_init(&h->busy[i].task, h3_busy_run, NULL);
    h->busy[i].h = h;
    if (h->keyed)
      uvs_task_set_key(&h->busy[i].task, i + 1);
    err = uvs_schedule(h->worker, &h->busy[i].task);
  }
  if (err == 0) {
    uvs_task_init(&h->last.task, h3_last_run, h3_last_done);
    h->last.h = h;
    err = h->keyed ? uvs_schedule_barrier(h->worker, &h->last.task)
                   : uvs_schedule(h->worker, &h->last.task);
  }
  if (err != 0)
    h->err = err;
}


/* One variant's rounds; p50 and p99 of its samples, in us, and the share
 * of them above 10 us (a lane preempted, rather than a slow hand-off). */
static int h3_variant(uv_loop_t* loop,
                      h3_t* h,
                      double* p50,
                      double* p99,
                      double* slow,
                      const char* where) {
  size_t i;
  size_t m;

  h->round = 0;
  h->bad = 0;
  h->err = 0;
  for (i = 0; i < h->rounds; i++) h->lat[i] = NAN;
  bench_arm(where);
  h3_round(h);
  uv_run(loop, UV_RUN_DEFAULT);
  if (h->err != 0) {
    bench_fail("%s: %s", where, uv_strerror(h->err));
    return -1;
  }
  if (h->round != h->rounds) {
    bench_fail("%s: %zu of %zu rounds ran", where, h->round, h->rounds);
    return -1;
  }
  if (h->bad != 0) {
    bench_fail(
        "%s: %llu measured tasks started before the tasks ahead of "
        "them returned, or beside one",
        where, (unsigned long long) h->bad);
    return -1;
  }
  m = 0;
  *slow = 0;
  for (i = 0; i < h->rounds; i++) {
    if (isnan(h->lat[i]))
      continue;
    if (h->lat[i] > 10e3)
      *slow += 1;
    h->lat[m++] = h->lat[i];
  }
  *slow = m > 0 ? *slow / (double) m : NAN;
  *p99 = bench_percentile(h->lat, m, 99.0) / 1e3;
  *p50 = bench_percentile(h->lat, m, 50.0) / 1e3;
  return 0;
}


/* Variant 2 is variant 1 on a scheduler whose drains and lanes take turns
 * of `budget` tasks instead of the default ~1 ms time slice: on a busy
 * machine a lane preempted for most of its slice finds it spent when its
 * task returns and gives up its pool thread, and the barrier then waits
 * for a lane that the loop thread posts (uv_queue_work). */
#define H3_BUDGET 64

void bench_h3_barrier(const bench_cfg_t* cfg) {
  static const char* const where[3] = {"h3 serial hand-off",
                                       "h3 barrier, width 4",
                                       "h3 barrier, width 4, budget 64"};
  static const char* const slow_name[3] = {
      "h3.over10us.serial", "h3.over10us.barrier", "h3.over10us.budget"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_sched_t budgeted;
  uvs_sched_options_t so;
  uvs_worker_t serial;
  uvs_worker_t wide;
  uvs_worker_t wide_budget;
  uvs_worker_options_t wo;
  h3_t h[3]; /* 0: serial, 1: barrier, 2: barrier with a budget */
  bench_row_t* p50_row;
  bench_row_t* p99_row;
  bench_row_t* budget_row;
  double p50[3];
  double p99[3];
  double slow[3][BENCH_MAX_RUNS];
  int run;
  int k;
  int v;

  p50_row = bench_row("h3.p50",
                      "barrier on a width-4 worker, 4 busy lanes: last "
                      "task's return to its start, p50, vs serial hand-off",
                      "us", BENCH_INFO, NAN, 0);
  p99_row = bench_row("h3.p99",
                      "barrier on a width-4 worker, 4 busy lanes: last "
                      "task's return to its start, p99, vs serial hand-off",
                      "us", BENCH_LE, 1.5, 0);
  budget_row = bench_row("h3.p99-budget",
                         "the same barrier p99 with budget 64 (no time "
                         "slice), vs the same serial hand-off",
                         "us", BENCH_INFO, NAN, 0);

  bench_loop_init(&loop);
  sched_open_hook(&loop, &sched, NULL, NULL);
  memset(&so, 0, sizeof(so));
  so.budget = H3_BUDGET;
  if (uvs_sched_init(&loop, &budgeted, &so) != 0)
    abort();
  if (uvs_worker_init(&sched, &serial, UVS_POOL) != 0)
    abort();
  memset(&wo, 0, sizeof(wo));
  wo.width = 4;
  if (uvs_worker_init_ex(&sched, &wide, UVS_POOL, &wo) != 0 ||
      uvs_worker_init_ex(&budgeted, &wide_budget, UVS_POOL, &wo) != 0)
    abort();
  for (v = 0; v < 3; v++) {
    memset(&h[v], 0, sizeof(h[v]));
    h[v].worker = v == 0 ? &serial : v == 1 ? &wide : &wide_budget;
    h[v].keyed = v != 0;
    h[v].rounds = cfg->hooks_rounds;
    h[v].spin_ns = (uint64_t) cfg->hooks_spin_us * 1000;
    h[v].lat = bench_alloc(h[v].rounds, sizeof(double));
  }

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 3; k++) {
      v = bench_order(run, 3, k);
      p50[v] = p99[v] = slow[v][run] = NAN;
      h3_variant(&loop, &h[v], &p50[v], &p99[v], &slow[v][run], where[v]);
      bench_note(cfg, where[v], run, p99[v], "us p99");
    }
    bench_row_add(p50_row, p50[1], p50[0]);
    bench_row_add(p99_row, p99[1], p99[0]);
    bench_row_add(budget_row, p99[2], p99[0]);
  }

  for (v = 0; v < 3; v++)
    bench_figure(slow_name[v], bench_median(slow[v], cfg->runs), "share");

  bench_check_stats(&sched, "h3");
  bench_check_stats(&budgeted, "h3 budget");
  bench_sched_close(&loop, &budgeted, "h3 budget");
  bench_sched_close(&loop, &sched, "h3");
  bench_loop_close(&loop, "h3");
  for (v = 0; v < 3; v++) bench_free(h[v].lat);
}
