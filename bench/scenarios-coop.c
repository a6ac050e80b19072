/* Long tasks that cooperate (SPEC 0.5, issue 42): what checking costs, and
 * how soon a long task that checks lets go of its thread.
 *
 *   c1  uvs_task_check, 10^7 calls in a loop inside one run_cb, against as
 *       many uv_hrtime() calls in the same run_cb (the order alternates);
 *       thread CPU per call, nothing subtracted. From a pool run_cb and
 *       from a loop run_cb. The check reads the clock once, so the ratio
 *       is what it costs beyond that.
 *   c2  a 2 s task on a pool worker that spins 100 us (its thread's CPU
 *       time) between two checks and returns on UV_ECANCELED. A 1 ms
 *       timer on the loop thread, started when the task said it began
 *       (1-2 ms: libuv counts whole ms), then a random 0-99 us of spin
 *       there, and the loop calls uvs_task_interrupt: from that call to
 *       run_cb's return (stamped there), p50 and p99 over many trials. The
 *       interrupt lands at a random point of the task's check cycle, so
 *       the task is never run whole: each trial stops it within a few ms.
 *       Against the same task on raw uv_queue_work polling an atomic flag
 *       at the same points, set by the same timer: what a program writes
 *       without uvsched.
 *   c3  the same task and timer, but the stop is uvs_worker_close with
 *       UVS_CANCEL of its worker (a fresh one per trial): from that call
 *       to the worker's close callback. Against the flag, to the raw
 *       request's after_work_cb.
 *   c4  one long task per pool thread (4 by default; 50 ms of CPU time,
 *       spun 100 us at a time), each on a serial worker of its own and
 *       followed by another when it ends, while 32 serial workers get a
 *       5 us task each in turn, one every 250 us, from a producer thread
 *       that wakes the loop. The short tasks' start latency (schedule call
 *       to run_cb), p50 and p99, when the long tasks check between chunks
 *       and yield with uvs_task_yield on UV_EAGAIN, against the same long
 *       tasks without checks, and against naive queues (bench/baselines.c;
 *       long tasks without checks, the next one pushed from the loop).
 *
 * Everything runs in one process; the variants of a row alternate their
 * order from one repetition to the next, as elsewhere.
 */

#include "users.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define COOP_CHECK_NS 100000 /* the long tasks' spin between two checks */


static void sched_open(uv_loop_t* loop, uvs_sched_t* sched) {
  bench_loop_init(loop);
  if (uvs_sched_init(loop, sched, NULL) != 0)
    abort();
}


/* Spins for ns of wall time (on the loop thread, before a stop). */
static void spin_wall(uint64_t ns) {
  uint64_t end;

  end = uv_hrtime() + ns;
  while (uv_hrtime() < end) {
  }
}


/* ---- c1: what a check costs ---------------------------------------------- */

typedef struct c1_s {
  size_t n;
  int first; /* 0: the checks first; 1: the clock reads first */
  int status;
  double check_ns; /* thread CPU per call */
  double clock_ns;
  unsigned long bad; /* answers other than 0 and UV_EAGAIN */
  uint64_t sink;
} c1_t;


static void c1_run(uvs_task_t* task) {
  c1_t* c;
  uint64_t t0;
  uint64_t sum;
  unsigned long bad;
  size_t i;
  int k;
  int r;

  c = task->data;
  sum = 0;
  bad = 0;
  for (k = 0; k < 2; k++) {
    if ((k == 0) == (c->first == 0)) {
      t0 = bench_thread_cpu();
      for (i = 0; i < c->n; i++) {
        r = uvs_task_check(task);
        bad += r != 0 && r != UV_EAGAIN;
      }
      c->check_ns = (double) (bench_thread_cpu() - t0) / (double) c->n;
    } else {
      t0 = bench_thread_cpu();
      for (i = 0; i < c->n; i++) sum += uv_hrtime();
      c->clock_ns = (double) (bench_thread_cpu() - t0) / (double) c->n;
    }
  }
  c->bad = bad;
  c->sink = sum;
}


static void c1_done(uvs_task_t* task, int status) {
  ((c1_t*) task->data)->status = status;
}


/* One run_cb's two loops on worker w. Returns 0, or -1 after bench_fail(). */
static int c1_once(uv_loop_t* loop, uvs_worker_t* w, c1_t* c, const char* wh) {
  uvs_task_t task;
  int err;

  c->status = 1;
  c->check_ns = c->clock_ns = NAN;
  uvs_task_init(&task, c1_run, c1_done);
  task.data = c;
  bench_arm(wh);
  err = uvs_schedule(w, &task);
  if (err != 0) {
    bench_fail("%s: schedule: %s", wh, uv_strerror(err));
    return -1;
  }
  uv_run(loop, UV_RUN_DEFAULT);
  if (c->status != 0) {
    bench_fail("%s: the task came back with %d", wh, c->status);
    return -1;
  }
  if (c->bad != 0) {
    bench_fail("%s: %lu checks answered neither 0 nor UV_EAGAIN", wh, c->bad);
    return -1;
  }
  return 0;
}


void bench_c1_check_cost(const bench_cfg_t* cfg) {
  static const char* const where[2] = {"c1 pool run_cb", "c1 loop run_cb"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t w[2];
  bench_row_t* rows[2];
  c1_t c;
  int run;
  int k;
  int v;

  rows[0] = bench_row("c1.pool",
                      "uvs_task_check per call in a pool run_cb (10^7 calls), "
                      "vs one uv_hrtime() per call",
                      "ns", BENCH_LE, 1.5, 0);
  rows[1] =
      bench_row("c1.loop", "the same in a loop run_cb", "ns", BENCH_LE, 1.5, 0);
  printf("# c1: %zu calls of each, thread CPU time, in one run_cb\n",
         cfg->coop_checks);
  fflush(stdout);
  sched_open(&loop, &sched);
  if (uvs_worker_init(&sched, &w[0], UVS_POOL) != 0 ||
      uvs_worker_init(&sched, &w[1], UVS_LOOP) != 0)
    abort();
  memset(&c, 0, sizeof(c));
  c.n = cfg->coop_checks;
  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 2; k++) {
      v = bench_order(run, 2, k);
      c.first = run % 2;
      if (c1_once(&loop, &w[v], &c, where[v]) != 0)
        c.check_ns = c.clock_ns = NAN;
      bench_note(cfg, where[v], run, c.check_ns, "ns per check");
      bench_row_add(rows[v], c.check_ns, c.clock_ns);
    }
  }
  bench_check_stats(&sched, "c1");
  bench_sched_close(&loop, &sched, "c1");
  bench_loop_close(&loop, "c1");
}


/* ---- c2, c3: stopping a running task ------------------------------------- */

#define TRIAL_TASK_NS 2000000000u /* 2 s, never run whole */

typedef struct trial_s {
  uv_loop_t* loop;
  uvs_sched_t* sched;
  uvs_worker_t worker;
  uvs_task_t task;
  uv_work_t req;
  uv_async_t started; /* the task's run began */
  uv_timer_t timer;   /* the stop */
  int close;          /* c3: the stop is a close with UVS_CANCEL */
  int raw;            /* this block: the baseline */
  int worker_open;    /* c2: the worker is set up for the block */
  unsigned flag;      /* atomic: the baseline's stop */
  int answer;         /* atomic: the run's last check, or the flag */
  uint64_t t_stop;    /* loop: just before the stop call */
  uint64_t t_end;     /* atomic: the run is about to return */
  int status;         /* uvsched: done_cb's status; 1 before */
  unsigned spin_us;   /* loop: this trial's random part */
  uint64_t rng;
  size_t n;
  size_t i;
  double* lat; /* us, n */
  int failed;
  int dead; /* c3: a close failed; the worker can't be set up again */
  const char* where;
} trial_t;


static void trial_next(trial_t* tr);


/* The task's body, on both systems: 100 us of spin, then a check (task
 * non-NULL) or a look at the flag, until told to stop. */
static void trial_body(trial_t* tr, uvs_task_t* task) {
  uint64_t spent;
  int r;

  uv_async_send(&tr->started);
  r = 0;
  for (spent = 0; spent < TRIAL_TASK_NS;) {
    spent += users_spin(COOP_CHECK_NS);
    if (task != NULL) {
      r = uvs_task_check(task);
      if (r != 0 && r != UV_EAGAIN)
        break;
    } else if (__atomic_load_n(&tr->flag, __ATOMIC_ACQUIRE)) {
      r = UV_ECANCELED;
      break;
    }
  }
  __atomic_store_n(&tr->answer, r, __ATOMIC_RELAXED);
  __atomic_store_n(&tr->t_end, uv_hrtime(), __ATOMIC_RELEASE);
}


static void trial_run(uvs_task_t* task) {
  trial_body(task->data, task);
}


static void trial_work(uv_work_t* req) {
  trial_body(req->data, NULL);
}


/* The run ended: was it told to stop, and by this trial's stop? */
static int trial_check_end(trial_t* tr) {
  int answer;

  answer = __atomic_load_n(&tr->answer, __ATOMIC_RELAXED);
  if (answer == UV_ECANCELED && tr->t_stop != 0)
    return 0;
  bench_fail("%s: trial %zu: the run ended with %s (%d) %s", tr->where, tr->i,
             answer == 0 ? "no stop" : uv_strerror(answer), answer,
             tr->t_stop == 0 ? "before the stop" : "after the stop");
  tr->failed = 1;
  return -1;
}


static void trial_record(trial_t* tr, uint64_t t_end) {
  if (trial_check_end(tr) == 0)
    tr->lat[tr->i++] = (double) (t_end - tr->t_stop) / 1e3;
  trial_next(tr);
}


/* c2's end on uvsched: the interrupted task is handed back with 0. */
static void trial_done(uvs_task_t* task, int status) {
  trial_t* tr;

  tr = task->data;
  tr->status = status;
  if (tr->close)
    return; /* c3 ends at the close callback */
  if (status != 0) {
    bench_fail("%s: trial %zu: the task came back with %s", tr->where, tr->i,
               uv_strerror(status));
    tr->failed = 1;
    trial_next(tr);
    return;
  }
  trial_record(tr, __atomic_load_n(&tr->t_end, __ATOMIC_ACQUIRE));
}


/* c3's end on uvsched. */
static void trial_closed(uvs_worker_t* worker) {
  trial_t* tr;
  uint64_t now;

  now = uv_hrtime();
  tr = worker->data;
  if (tr->status != 0) {
    bench_fail("%s: trial %zu: done_cb %s before the close callback", tr->where,
               tr->i, tr->status == 1 ? "not called" : uv_strerror(tr->status));
    tr->failed = 1;
    trial_next(tr);
    return;
  }
  trial_record(tr, now);
}


/* The baseline's end: c2 counts to the run's return, c3 to here. */
static void trial_after(uv_work_t* req, int status) {
  trial_t* tr;
  uint64_t now;

  now = uv_hrtime();
  tr = req->data;
  if (status != 0) {
    bench_fail("%s: after_work_cb status %s", tr->where, uv_strerror(status));
    tr->failed = 1;
    trial_next(tr);
    return;
  }
  trial_record(tr,
               tr->close ? now : __atomic_load_n(&tr->t_end, __ATOMIC_ACQUIRE));
}


static void trial_stop_cb(uv_timer_t* timer) {
  trial_t* tr;
  int err;

  tr = timer->data;
  spin_wall((uint64_t) tr->spin_us * 1000);
  tr->t_stop = uv_hrtime();
  if (tr->raw) {
    __atomic_store_n(&tr->flag, 1, __ATOMIC_RELEASE);
    return;
  }
  if (tr->close) {
    tr->worker.data = tr;
    err = uvs_worker_close(&tr->worker, UVS_CANCEL, trial_closed);
  } else {
    err = uvs_task_interrupt(&tr->task);
  }
  if (err != 0) {
    bench_fail("%s: trial %zu: %s: %s", tr->where, tr->i,
               tr->close ? "uvs_worker_close" : "uvs_task_interrupt",
               uv_strerror(err));
    tr->failed = 1;
    tr->dead = tr->close;
    /* The task runs out its 2 s; its end moves on. */
  }
}


/* The run said it began: the stop comes on a 1 ms timer (1-2 ms, as the
 * loop counts whole ms), plus a random 0-99 us. */
static void trial_started_cb(uv_async_t* handle) {
  trial_t* tr;

  tr = handle->data;
  tr->spin_us = (unsigned) (bench_rand(&tr->rng) % 100);
  uv_timer_start(&tr->timer, trial_stop_cb, 1, 0);
}


static void trial_next(trial_t* tr) {
  int err;

  if (tr->i == tr->n || tr->failed) {
    uv_close((uv_handle_t*) &tr->started, NULL);
    uv_close((uv_handle_t*) &tr->timer, NULL);
    return;
  }
  tr->flag = 0;
  tr->answer = 0;
  tr->t_stop = 0;
  tr->t_end = 0;
  tr->status = 1;
  if (tr->raw) {
    tr->req.data = tr;
    err = uv_queue_work(tr->loop, &tr->req, trial_work, trial_after);
  } else {
    if (tr->close || !tr->worker_open) {
      err = uvs_worker_init(tr->sched, &tr->worker, UVS_POOL);
      if (err != 0)
        abort();
      tr->worker_open = !tr->close;
    }
    uvs_task_init(&tr->task, trial_run, trial_done);
    tr->task.data = tr;
    err = uvs_schedule(&tr->worker, &tr->task);
  }
  if (err != 0) {
    bench_fail("%s: schedule: %s", tr->where, uv_strerror(err));
    tr->failed = 1;
    trial_next(tr);
  }
}


/* One system's block of trials: lat gets tr->n latencies. Returns 0, or -1
 * after bench_fail(). */
static int trial_block(trial_t* tr, int raw, uint64_t seed, const char* wh) {
  if (tr->dead)
    return -1;
  tr->raw = raw;
  tr->where = wh;
  tr->i = 0;
  tr->failed = 0;
  tr->rng = seed | 1;
  if (uv_async_init(tr->loop, &tr->started, trial_started_cb) != 0 ||
      uv_timer_init(tr->loop, &tr->timer) != 0)
    abort();
  tr->started.data = tr;
  tr->timer.data = tr;
  bench_arm(wh);
  trial_next(tr);
  uv_run(tr->loop, UV_RUN_DEFAULT);
  return tr->failed ? -1 : 0;
}


/* c2 (close 0) and c3 (close 1). */
static void coop_stop(const bench_cfg_t* cfg, int close) {
  static const char* const where[2][2] = {
      {"c2 uvs_task_interrupt", "c2 flag (raw)"},
      {"c3 close UVS_CANCEL", "c3 flag (raw)"}};
  static const char* const fig_max[2][2] = {{"c2.max.uvsched", "c2.max.flag"},
                                            {"c3.max.uvsched", "c3.max.flag"}};
  uv_loop_t loop;
  uvs_sched_t sched;
  trial_t* tr;
  bench_row_t* p50;
  bench_row_t* p99;
  lat_stats_t s[2];
  double max[2][BENCH_MAX_RUNS];
  int run;
  int k;
  int v;

  if (!close) {
    p99 = bench_row("c2.p99",
                    "a 2 s task checking every 100 us: uvs_task_interrupt "
                    "from a loop timer to run_cb's return, p99, vs a flag it "
                    "polls (raw)",
                    "us", BENCH_LE, 1000, 1);
    p50 = bench_row("c2.p50", "the same, p50", "us", BENCH_INFO, NAN, 0);
  } else {
    p99 = bench_row("c3.p99",
                    "a close with UVS_CANCEL of the worker running such a "
                    "task: uvs_worker_close to its close callback, p99, vs the "
                    "flag to after_work_cb",
                    "us", BENCH_LE, 2000, 1);
    p50 = bench_row("c3.p50", "the same, p50", "us", BENCH_INFO, NAN, 0);
  }
  printf(
      "# %s: %zu trials per system, the stop 1-2 ms + 0-99 us after the "
      "task began\n",
      close ? "c3" : "c2", cfg->coop_trials);
  fflush(stdout);

  tr = bench_alloc(1, sizeof(*tr));
  tr->loop = &loop;
  tr->sched = &sched;
  tr->close = close;
  tr->n = cfg->coop_trials;
  tr->lat = bench_alloc(tr->n, sizeof(*tr->lat));
  sched_open(&loop, &sched);
  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 2; k++) {
      v = bench_order(run, 2, k);
      /* Both systems draw the same stops. */
      if (trial_block(tr, v, 0x5eed0042u + (uint64_t) run, where[close][v]) ==
          0)
        s[v] = users_lat_stats(tr->lat, tr->n);
      else
        s[v] = users_lat_stats(NULL, 0);
      bench_note(cfg, where[close][v], run, s[v].p99, "us p99");
      max[v][run] = s[v].max;
    }
    bench_row_add(p99, s[0].p99, s[1].p99);
    bench_row_add(p50, s[0].p50, s[1].p50);
  }
  for (v = 0; v < 2; v++)
    bench_figure(fig_max[close][v], bench_median(max[v], cfg->runs), "us");
  bench_check_stats(&sched, where[close][0]);
  bench_sched_close(&loop, &sched, where[close][0]);
  bench_loop_close(&loop, where[close][0]);
  bench_free(tr->lat);
  bench_free(tr);
}


void bench_c2_interrupt(const bench_cfg_t* cfg) {
  coop_stop(cfg, 0);
}


void bench_c3_close_cancel(const bench_cfg_t* cfg) {
  coop_stop(cfg, 1);
}


/* ---- c4: long tasks that yield, beside short ones ------------------------ */

#define C4_SHORT_WORKERS 32
#define C4_SHORT_NS 5000
#define C4_SETTLE_MS 5 /* the long tasks take the pool first */
#define C4_LONG_MAX 64

enum { C4_YIELD = 0, C4_PLAIN = 1, C4_NAIVE = 2 };

typedef struct c4_s c4_t;

typedef struct c4_long_s {
  uvs_task_t task;   /* C4_YIELD, C4_PLAIN */
  bench_node_t node; /* C4_NAIVE */
  c4_t* c;
  uint64_t left;     /* ns of spin left in the current long task */
  uint64_t yields;   /* runs that yielded */
  uint64_t ended;    /* long tasks spun to their end */
  uint64_t bad;      /* checks or yields that answered an error */
  unsigned finished; /* atomic, naive: a run ended, for the loop */
  unsigned idx;
} c4_long_t;

struct c4_s {
  uv_loop_t* loop;
  int variant;
  usys_t* sys;            /* the short tasks' */
  uvs_worker_t* lworkers; /* the long tasks' (uvsched) */
  bench_naive_t* lnaive;  /* ... (naive) */
  c4_long_t longs[C4_LONG_MAX];
  size_t nlong;
  size_t live; /* loop: long chains not yet over */
  uint64_t long_ns;
  utask_t* tasks; /* the short ones, n */
  size_t n;
  size_t next;  /* loop: the next arrival to submit */
  unsigned due; /* atomic: arrivals the producer released */
  uint64_t gap_ns;
  struct timespec t0; /* CLOCK_MONOTONIC: the first arrival */
  bench_lane_t lanes[C4_SHORT_WORKERS];
  bench_count_t count;
  uv_async_t poke;   /* the producer's */
  uv_async_t relong; /* naive: a long task ended */
  bench_thread_t producer;
  int stop; /* loop: the window is over; no more long tasks */
  int err;
};


/* Spins what is left of l's long task, 100 us at a time; with task, checks
 * between chunks and yields on UV_EAGAIN. Returns 1 if it yielded. */
static int c4_long_body(c4_long_t* l, uvs_task_t* task) {
  uint64_t used;
  int r;

  while (l->left > 0) {
    used = users_spin(l->left < COOP_CHECK_NS ? l->left : COOP_CHECK_NS);
    l->left -= used < l->left ? used : l->left;
    if (task == NULL || l->left == 0)
      continue;
    r = uvs_task_check(task);
    if (r == 0)
      continue;
    if (r == UV_EAGAIN) {
      if (uvs_task_yield(task) != 0) {
        l->bad++;
        continue;
      }
      l->yields++;
      return 1;
    }
    if (r == UV_ECANCELED)
      return 0; /* the window's end */
    l->bad++;
    return 0;
  }
  l->ended++;
  return 0;
}


static void c4_long_run(uvs_task_t* task) {
  c4_long_t* l;

  l = task->data;
  c4_long_body(l, l->c->variant == C4_YIELD ? task : NULL);
}


/* uvsched: the next long task, from the loop thread. */
static void c4_long_done(uvs_task_t* task, int status) {
  c4_long_t* l;
  c4_t* c;
  int err;

  l = task->data;
  c = l->c;
  if (status != 0 && !(status == UV_ECANCELED && c->stop)) {
    bench_fail("c4: a long task came back with %s", uv_strerror(status));
    c->err = status;
  }
  if (c->stop || c->err != 0) {
    c->live--;
    return;
  }
  l->left = c->long_ns;
  err = uvs_schedule(&c->lworkers[l->idx], &l->task);
  if (err != 0) {
    bench_fail("c4: schedule a long task: %s", uv_strerror(err));
    c->err = err;
    c->live--;
  }
}


static void c4_long_node_run(bench_node_t* node) {
  c4_long_t* l;

  l = (c4_long_t*) ((char*) node - offsetof(c4_long_t, node));
  c4_long_body(l, NULL);
  __atomic_store_n(&l->finished, 1, __ATOMIC_RELEASE);
  uv_async_send(&l->c->relong);
}


/* naive: the long tasks that ended get their next, from the loop thread. */
static void c4_relong_cb(uv_async_t* handle) {
  c4_long_t* l;
  c4_t* c;
  size_t i;

  c = handle->data;
  for (i = 0; i < c->nlong; i++) {
    l = &c->longs[i];
    if (!__atomic_load_n(&l->finished, __ATOMIC_ACQUIRE))
      continue;
    l->finished = 0;
    if (c->stop) {
      c->live--;
      continue;
    }
    l->left = c->long_ns;
    bench_naive_push(&c->lnaive[l->idx], &l->node);
  }
  if (c->live == 0)
    uv_close((uv_handle_t*) handle, NULL);
}


/* Sleeps until each arrival's time and wakes the loop for it. */
static void c4_producer(void* arg) {
  struct timespec ts;
  uint64_t at;
  c4_t* c;
  size_t i;

  c = arg;
  for (i = 0; i < c->n; i++) {
    at = (uint64_t) c->t0.tv_sec * 1000000000u + (uint64_t) c->t0.tv_nsec +
         i * c->gap_ns;
    ts.tv_sec = (time_t) (at / 1000000000u);
    ts.tv_nsec = (long) (at % 1000000000u);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR) {
    }
    __atomic_store_n(&c->due, (unsigned) i + 1, __ATOMIC_RELEASE);
    uv_async_send(&c->poke);
  }
}


/* The window is over: no more long tasks; uvsched's checking ones are
 * interrupted (a yielded one waiting is cancelled), the others end. */
static void c4_stop(c4_t* c) {
  size_t i;
  int err;

  c->stop = 1;
  if (c->variant != C4_YIELD)
    return;
  for (i = 0; i < c->nlong; i++) {
    err = uvs_task_interrupt(&c->longs[i].task);
    if (err != 0 && err != UV_EBUSY) {
      bench_fail("c4: uvs_task_interrupt: %s", uv_strerror(err));
      c->err = err;
    }
  }
}


static void c4_poke_cb(uv_async_t* handle) {
  c4_t* c;
  unsigned due;

  c = handle->data;
  due = __atomic_load_n(&c->due, __ATOMIC_ACQUIRE);
  while (c->next < due) users_submit(c->sys, &c->tasks[c->next++]);
  if (c->next < c->n)
    return;
  /* The producer has sent its last: no send can come after the close. */
  bench_thread_join(&c->producer);
  uv_close((uv_handle_t*) handle, NULL);
  c4_stop(c);
}


typedef struct c4_out_s {
  lat_stats_t start; /* us */
  double yields;     /* per second of window, all long tasks */
  double ended;      /* long tasks spun to their end */
} c4_out_t;


/* One variant's window. Returns 0, or -1 after bench_fail(). */
static int c4_run(
    c4_t* c, int variant, c4_out_t* out, double* lat, const char* wh) {
  c4_long_t* l;
  utask_t* t;
  uint64_t t0;
  uint64_t yields;
  uint64_t ended;
  uint64_t bad;
  size_t i;
  int err;

  c->variant = variant;
  c->sys->err = 0;
  c->err = 0;
  c->stop = 0;
  c->next = 0;
  c->due = 0;
  bench_count_reset(&c->count, c->n);
  bench_lanes_reset(c->lanes, C4_SHORT_WORKERS, &c->count);
  for (i = 0; i < c->n; i++) {
    t = &c->tasks[i];
    memset(t, 0, sizeof(*t));
    t->idx = (uint32_t) (i % C4_SHORT_WORKERS);
    t->seq = i / C4_SHORT_WORKERS;
    t->spin_ns = C4_SHORT_NS;
    t->lane = &c->lanes[t->idx];
    t->count = &c->count;
  }
  bench_arm(wh);
  if (uv_async_init(c->loop, &c->poke, c4_poke_cb) != 0)
    abort();
  c->poke.data = c;
  if (variant == C4_NAIVE) {
    if (uv_async_init(c->loop, &c->relong, c4_relong_cb) != 0)
      abort();
    c->relong.data = c;
  }
  c->live = c->nlong;
  t0 = uv_hrtime();
  for (i = 0; i < c->nlong; i++) {
    l = &c->longs[i];
    memset(l, 0, sizeof(*l));
    l->c = c;
    l->idx = (unsigned) i;
    l->left = c->long_ns;
    if (variant == C4_NAIVE) {
      l->node.run = c4_long_node_run;
      bench_naive_push(&c->lnaive[i], &l->node);
      continue;
    }
    uvs_task_init(&l->task, c4_long_run, c4_long_done);
    l->task.data = l;
    err = uvs_schedule(&c->lworkers[i], &l->task);
    if (err != 0) {
      bench_fail("%s: schedule a long task: %s", wh, uv_strerror(err));
      abort(); /* nothing sensible is left to close */
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &c->t0);
  c->t0.tv_nsec += C4_SETTLE_MS * 1000000;
  if (c->t0.tv_nsec >= 1000000000) {
    c->t0.tv_sec++;
    c->t0.tv_nsec -= 1000000000;
  }
  bench_thread_start(&c->producer, c4_producer, c);
  uv_run(c->loop, UV_RUN_DEFAULT);

  err = c->sys->err != 0 ? c->sys->err : c->err;
  if (err != 0) {
    bench_fail("%s: %s", wh, uv_strerror(err));
    return -1;
  }
  if (bench_count_ran(&c->count) != c->n) {
    bench_fail("%s: %llu of %zu short tasks ran", wh,
               (unsigned long long) bench_count_ran(&c->count), c->n);
    return -1;
  }
  bench_lanes_check(c->lanes, C4_SHORT_WORKERS, c->n / C4_SHORT_WORKERS, wh);
  yields = ended = bad = 0;
  for (i = 0; i < c->nlong; i++) {
    yields += c->longs[i].yields;
    ended += c->longs[i].ended;
    bad += c->longs[i].bad;
  }
  if (bad != 0) {
    bench_fail("%s: %llu checks or yields answered an error", wh,
               (unsigned long long) bad);
    return -1;
  }
  if (variant != C4_YIELD && yields != 0) {
    bench_fail("%s: %llu yields without checks", wh,
               (unsigned long long) yields);
    return -1;
  }
  for (i = 0; i < c->n; i++)
    lat[i] = (double) (c->tasks[i].t_start - c->tasks[i].t_call) / 1e3;
  out->start = users_lat_stats(lat, c->n);
  out->yields = (double) yields * 1e9 / (double) (uv_hrtime() - t0);
  out->ended = (double) ended;
  return 0;
}


void bench_c4_long_yield(const bench_cfg_t* cfg) {
  static const char* const where[3] = {
      "c4 long tasks yield", "c4 long tasks without checks", "c4 naive"};
  static const char* const fig_max[3] = {"c4.max.yield", "c4.max.plain",
                                         "c4.max.naive"};
  static const char* const fig_ended[3] = {
      "c4.long-ended.yield", "c4.long-ended.plain", "c4.long-ended.naive"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t shorts[C4_SHORT_WORKERS];
  uvs_worker_t longs[C4_LONG_MAX];
  bench_naive_t nshort[C4_SHORT_WORKERS];
  bench_naive_t nlong[C4_LONG_MAX];
  usys_t sys[3];
  c4_t* c;
  c4_out_t out[3];
  bench_row_t* p99;
  bench_row_t* p50;
  bench_row_t* p99_naive;
  double max[3][BENCH_MAX_RUNS];
  double ended[3][BENCH_MAX_RUNS];
  double yields[BENCH_MAX_RUNS];
  double naive_p50[BENCH_MAX_RUNS];
  double* lat;
  size_t i;
  int run;
  int k;
  int v;

  p99 = bench_row("c4.p99",
                  "4 long 50 ms tasks (pool of 4) checking every 100 us, "
                  "yielding on UV_EAGAIN; 32 workers' 5 us tasks, one per 250 "
                  "us: start p99, vs no checks",
                  "us", BENCH_LE, 3000, 1);
  p50 = bench_row("c4.p50", "the same, p50, vs no checks", "us", BENCH_INFO,
                  NAN, 0);
  p99_naive = bench_row("c4.p99-naive",
                        "the same p99, vs naive queues (long tasks without "
                        "checks)",
                        "us", BENCH_INFO, NAN, 0);

  c = bench_alloc(1, sizeof(*c));
  c->loop = &loop;
  c->nlong = users_pool_size();
  if (c->nlong > C4_LONG_MAX)
    c->nlong = C4_LONG_MAX;
  c->long_ns = (uint64_t) cfg->coop_long_ms * 1000000u;
  c->gap_ns = (uint64_t) cfg->coop_gap_us * 1000u;
  /* Whole rounds of the short workers, so that each runs as many. */
  c->n = (size_t) cfg->coop_window_ms * 1000u / cfg->coop_gap_us;
  c->n -= c->n % C4_SHORT_WORKERS;
  if (c->n == 0)
    c->n = C4_SHORT_WORKERS;
  c->tasks = bench_alloc(c->n, sizeof(*c->tasks));
  lat = bench_alloc(c->n, sizeof(*lat));
  printf(
      "# c4: %zu long %u ms tasks (one per pool thread), %zu short tasks "
      "over %u ms on %d workers\n",
      c->nlong, cfg->coop_long_ms, c->n, cfg->coop_window_ms, C4_SHORT_WORKERS);
  fflush(stdout);

  sched_open(&loop, &sched);
  for (i = 0; i < C4_SHORT_WORKERS; i++)
    if (uvs_worker_init(&sched, &shorts[i], UVS_POOL) != 0)
      abort();
  for (i = 0; i < c->nlong; i++)
    if (uvs_worker_init(&sched, &longs[i], UVS_POOL) != 0)
      abort();
  users_naive_open(&loop, nshort, C4_SHORT_WORKERS);
  users_naive_open(&loop, nlong, c->nlong);
  users_sys_init(sys, &loop, shorts, nshort);
  c->lworkers = longs;
  c->lnaive = nlong;

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 3; k++) {
      v = bench_order(run, 3, k);
      c->sys = &sys[v == C4_NAIVE ? U_NAIVE : U_UVS];
      if (c4_run(c, v, &out[v], lat, where[v]) != 0) {
        out[v].start = users_lat_stats(NULL, 0);
        out[v].yields = out[v].ended = NAN;
      }
      bench_note(cfg, where[v], run, out[v].start.p99, "us start p99");
      max[v][run] = out[v].start.max;
      ended[v][run] = out[v].ended;
    }
    bench_row_add(p99, out[C4_YIELD].start.p99, out[C4_PLAIN].start.p99);
    bench_row_add(p50, out[C4_YIELD].start.p50, out[C4_PLAIN].start.p50);
    bench_row_add(p99_naive, out[C4_YIELD].start.p99, out[C4_NAIVE].start.p99);
    naive_p50[run] = out[C4_NAIVE].start.p50;
    yields[run] = out[C4_YIELD].yields;
  }
  bench_figure("c4.p50.naive", bench_median(naive_p50, cfg->runs), "us");
  for (v = 0; v < 3; v++) {
    bench_figure(fig_max[v], bench_median(max[v], cfg->runs), "us");
    bench_figure(fig_ended[v], bench_median(ended[v], cfg->runs), "tasks");
  }
  bench_figure("c4.yields", bench_median(yields, cfg->runs), "yields/s");

  users_naive_close(nlong, c->nlong);
  users_naive_close(nshort, C4_SHORT_WORKERS);
  users_sched_done(&loop, &sched, "c4");
  bench_free(lat);
  bench_free(c->tasks);
  bench_free(c);
}
