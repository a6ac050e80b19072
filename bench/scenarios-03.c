/* The 0.3 additions (scenario r), each against what a libuv program does
 * without it, in the same process and run:
 *   r1  uvs_task_reschedule of one of 1M delayed tasks, on the loop thread,
 *       vs uv_timer_start on one of 1M active uv_timer_t;
 *   r2  the same re-arm from a foreign thread while the loop is blocked in
 *       uv_run, vs r1's uv_timer_start (which only the loop thread may
 *       call);
 *   r3  a server's idle timeouts, re-armed on every read: loop CPU;
 *   r4  lateness of delayed tasks on an otherwise idle loop (guarantee 6),
 *       loop and pool workers, vs one uv_timer_t per task;
 *   r5  per-key bounds that never trigger, vs none;
 *   r6  max_wait_ms that never sheds, vs none.
 * Costs of single calls are CPU time of the calling thread, so that a
 * thread preempted by other work on the machine is not charged for it.
 */

#include "bench.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ---- r1, r2: re-arming one of 1M pending ----------------------------------
 *
 * One scheduler with a UVS_LOOP worker holds n delayed tasks, and the same
 * loop n active uv_timer_t, all due in 1 to 60 s. A repetition re-arms
 * `calls` of them, drawn at random, each to a new random delay in 1 to
 * 60 s (--smoke: 1 ms to 60 s, so that some fall due): the same draws for
 * every variant of the repetition, so that neither structure gets an
 * order that suits it. r1 calls from the loop thread between two loop
 * iterations (as a callback would); r2 from a foreign thread while the
 * loop waits in uv_run for its next timer. A task or timer that falls due
 * meanwhile (only while the loop runs, in r2) re-arms itself from its
 * callback, as an idle timeout that fired and was renewed would, so that
 * both structures keep n entries.
 */

typedef struct rearm_s {
  uv_loop_t* loop;
  uvs_worker_t* worker;
  uvs_task_t* tasks;
  uv_timer_t* timers;
  size_t n;
  uint32_t* idx;   /* call i re-arms entry idx[i] ... */
  uint64_t* delay; /* ... to delay[i] ms */
  size_t calls;
  uint64_t min_ms;      /* delays are min_ms..60 s */
  uint64_t rng;         /* loop thread: delays of entries that fired */
  uint64_t fired_uvs;   /* loop thread */
  uint64_t fired_timer; /* loop thread */
  uint64_t cancelled;   /* loop thread: hand-backs at the close */
  uint64_t other;
  /* r2 */
  uv_async_t stop;
  uv_timer_t go;
  bench_thread_t th;
  uint64_t busy; /* calls that found the task fallen due */
  int err;
  uint64_t cpu_ns;  /* the foreign thread's CPU for its calls */
  uint64_t wall_ns; /* ... and the wall time */
} rearm_t;


#define REARM_MAX_MS 60000

static uint64_t rearm_draw(const rearm_t* r, uint64_t* rng) {
  return r->min_ms + bench_rand(rng) % (REARM_MAX_MS - r->min_ms + 1);
}


static void rearm_run(uvs_task_t* task) {
  rearm_t* r;
  int err;

  r = task->data;
  r->fired_uvs++;
  err = uvs_schedule_after(r->worker, task, rearm_draw(r, &r->rng));
  if (err != 0)
    bench_fail("r1/r2: re-arm of a task that fell due: %s", uv_strerror(err));
}


static void rearm_done(uvs_task_t* task, int status) {
  rearm_t* r;

  r = task->data;
  if (status == UV_ECANCELED)
    r->cancelled++;
  else
    r->other++;
}


static void rearm_closed(uvs_sched_t* sched) {
  *(int*) sched->data = 1;
}


static void rearm_timer_cb(uv_timer_t* handle) {
  rearm_t* r;

  r = handle->data;
  r->fired_timer++;
  uv_timer_start(handle, rearm_timer_cb, rearm_draw(r, &r->rng), 0);
}


/* The repetition's draws. */
static void rearm_draws(rearm_t* r, uint64_t seed) {
  uint64_t st;
  size_t i;

  st = seed | 1;
  for (i = 0; i < r->calls; i++) {
    r->idx[i] = (uint32_t) (bench_rand(&st) % r->n);
    r->delay[i] = rearm_draw(r, &st);
  }
}


/* r1, uvsched: ns of thread CPU per call, or NAN. */
static double rearm_uvs(rearm_t* r) {
  uint64_t cpu0;
  size_t i;
  int err;

  bench_arm("r1 uvsched");
  cpu0 = bench_thread_cpu();
  for (i = 0; i < r->calls; i++) {
    err = uvs_task_reschedule(&r->tasks[r->idx[i]], r->delay[i]);
    if (err != 0) {
      bench_fail("r1: uvs_task_reschedule: %s", uv_strerror(err));
      return NAN;
    }
  }
  return (double) (bench_thread_cpu() - cpu0) / (double) r->calls;
}


/* r1, uv_timer_t: ns of thread CPU per call. */
static double rearm_timer(rearm_t* r) {
  uint64_t cpu0;
  size_t i;

  bench_arm("r1 uv_timer");
  /* The loop would have updated its time at the start of the iteration. */
  uv_update_time(r->loop);
  cpu0 = bench_thread_cpu();
  for (i = 0; i < r->calls; i++)
    uv_timer_start(&r->timers[r->idx[i]], rearm_timer_cb, r->delay[i], 0);
  return (double) (bench_thread_cpu() - cpu0) / (double) r->calls;
}


static void rearm_foreign_main(void* arg) {
  rearm_t* r;
  uint64_t cpu0;
  uint64_t t0;
  size_t i;
  int err;

  r = arg;
  t0 = uv_hrtime();
  cpu0 = bench_thread_cpu();
  for (i = 0; i < r->calls; i++) {
    err = uvs_task_reschedule(&r->tasks[r->idx[i]], r->delay[i]);
    if (err == UV_EBUSY)
      r->busy++; /* fell due and is queued or running: it renews itself */
    else if (err != 0 && r->err == 0)
      r->err = err;
  }
  r->cpu_ns = bench_thread_cpu() - cpu0;
  r->wall_ns = uv_hrtime() - t0;
  uv_async_send(&r->stop);
}


/* In the loop's first timer phase: from here on it waits in uv_run. */
static void rearm_go(uv_timer_t* handle) {
  rearm_t* r;

  r = handle->data;
  bench_thread_start(&r->th, rearm_foreign_main, r);
}


static void rearm_stop(uv_async_t* handle) {
  uv_stop(handle->loop);
}


/* Runs the loop without waiting until the worker has nothing queued:
 * every task and timer that fell due has fired and renewed itself. */
static void rearm_settle(rearm_t* r) {
  uvs_worker_metrics_t m;
  uint64_t deadline;

  deadline = uv_hrtime() + 10 * (uint64_t) 1000000000;
  do {
    uv_run(r->loop, UV_RUN_NOWAIT);
    uvs_worker_metrics(r->worker, &m);
  } while ((m.queued != 0 || m.running != 0) && uv_hrtime() < deadline);
}


/* r2: ns of the foreign thread's CPU per call, or NAN; *loop_ns gets the
 * loop thread's CPU per call meanwhile, *wall_ns the caller's wall time. */
static double rearm_foreign(rearm_t* r, double* loop_ns, double* wall_ns) {
  uint64_t cpu0;

  bench_arm("r2 foreign");
  r->busy = 0;
  r->err = 0;
  /* What fell due while r1 kept the loop from running (about 17k of 1M a
   * second) fires first: the foreign thread then meets a loop that waits
   * in uv_run, woken only by what falls due meanwhile. */
  rearm_settle(r);
  cpu0 = bench_thread_cpu();
  uv_timer_start(&r->go, rearm_go, 0, 0);
  uv_run(r->loop, UV_RUN_DEFAULT);
  *loop_ns = (double) (bench_thread_cpu() - cpu0) / (double) r->calls;
  bench_thread_join(&r->th);
  *wall_ns = (double) r->wall_ns / (double) r->calls;
  /* Tasks that fell due and are still queued when uv_stop ended the run
   * must run (and renew themselves) before r1 re-arms them. */
  rearm_settle(r);
  if (r->err != 0) {
    bench_fail("r2: uvs_task_reschedule: %s", uv_strerror(r->err));
    return NAN;
  }
  return (double) r->cpu_ns / (double) r->calls;
}


static void v03_rearm(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t worker;
  rearm_t* r;
  bench_row_t* loop_row;
  bench_row_t* foreign_row;
  double busy[BENCH_MAX_RUNS];
  double loop_cpu[BENCH_MAX_RUNS];
  double wall[BENCH_MAX_RUNS];
  double u;
  double t;
  double f;
  uvs_stats_t st;
  uint64_t fill;
  size_t i;
  int closed;
  int run;
  int k;
  int err;

  loop_row = bench_row("r1.rearm",
                       "uvs_task_reschedule, 1M delayed tasks pending "
                       "(1-60 s), loop thread, vs uv_timer_start with 1M "
                       "active timers",
                       "ns/call", BENCH_LE, 0.5, 0);
  foreign_row = bench_row("r2.rearm-foreign",
                          "uvs_task_reschedule as r1 from a foreign thread, "
                          "loop blocked in uv_run, vs r1's uv_timer_start",
                          "ns/call", BENCH_LE, 1.0, 0);

  r = bench_alloc(1, sizeof(*r));
  r->loop = &loop;
  r->worker = &worker;
  r->n = cfg->v03_pending;
  r->calls = cfg->v03_calls;
  r->min_ms = cfg->v03_rearm_min_ms;
  r->tasks = bench_alloc(r->n, sizeof(*r->tasks));
  r->timers = bench_alloc(r->n, sizeof(*r->timers));
  r->idx = bench_alloc(r->calls, sizeof(*r->idx));
  r->delay = bench_alloc(r->calls, sizeof(*r->delay));
  r->rng = 0x7e4a11;
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0 ||
      uvs_worker_init(&sched, &worker, UVS_LOOP) != 0)
    abort();
  if (uv_async_init(&loop, &r->stop, rearm_stop) != 0 ||
      uv_timer_init(&loop, &r->go) != 0)
    abort();
  r->go.data = r;

  bench_arm("r1 fill");
  fill = uv_hrtime();
  for (i = 0; i < r->n; i++) {
    uvs_task_init(&r->tasks[i], rearm_run, rearm_done);
    r->tasks[i].data = r;
    err = uvs_schedule_after(&worker, &r->tasks[i], rearm_draw(r, &r->rng));
    if (err != 0) {
      bench_fail("r1: fill: uvs_schedule_after: %s", uv_strerror(err));
      abort();
    }
    uv_timer_init(&loop, &r->timers[i]);
    r->timers[i].data = r;
    uv_timer_start(&r->timers[i], rearm_timer_cb, rearm_draw(r, &r->rng), 0);
  }
  bench_figure("r1.fill", (double) (uv_hrtime() - fill) / 1e6, "ms");

  for (run = 0; run < cfg->runs; run++) {
    rearm_draws(r, 0x2e5c4ed + (uint64_t) run);
    u = t = f = NAN;
    busy[run] = loop_cpu[run] = wall[run] = NAN;
    for (k = 0; k < 3; k++) {
      switch (bench_order(run, 3, k)) {
        case 0:
          u = rearm_uvs(r);
          bench_note(cfg, "r1.uvsched", run, u, "ns/call");
          break;
        case 1:
          t = rearm_timer(r);
          bench_note(cfg, "r1.timer", run, t, "ns/call");
          break;
        default:
          f = rearm_foreign(r, &loop_cpu[run], &wall[run]);
          busy[run] = (double) r->busy;
          bench_note(cfg, "r2.foreign", run, f, "ns/call");
          break;
      }
    }
    bench_row_add(loop_row, u, t);
    bench_row_add(foreign_row, f, t);
  }
  bench_figure("r2.wall", bench_median(wall, cfg->runs), "ns/call");
  bench_figure("r2.loop-cpu", bench_median(loop_cpu, cfg->runs), "ns/call");
  bench_figure("r2.busy", bench_median(busy, cfg->runs), "calls");
  bench_figure("r1.fired.uvsched", (double) r->fired_uvs, "tasks");
  bench_figure("r1.fired.timer", (double) r->fired_timer, "timers");

  uvs_sched_stats(&sched, &st);
  if (st.pending != r->n || st.scheduled != st.ran + st.cancelled + st.pending)
    bench_fail(
        "r1: stats: scheduled %llu ran %llu cancelled %llu pending "
        "%llu, %zu delayed",
        (unsigned long long) st.scheduled, (unsigned long long) st.ran,
        (unsigned long long) st.cancelled, (unsigned long long) st.pending,
        r->n);

  /* The timers first: active, they would keep the close's run going.
   * UVS_CANCEL, not bench_sched_close's UVS_DRAIN: a task that fell due
   * meanwhile would run and re-arm itself onto a closing worker. */
  bench_arm("r1 close");
  for (i = 0; i < r->n; i++) uv_close((uv_handle_t*) &r->timers[i], NULL);
  uv_close((uv_handle_t*) &r->go, NULL);
  uv_close((uv_handle_t*) &r->stop, NULL);
  closed = 0;
  sched.data = &closed;
  if (uvs_sched_close(&sched, UVS_CANCEL, rearm_closed) != 0)
    bench_fail("r1: uvs_sched_close failed");
  uv_run(&loop, UV_RUN_DEFAULT);
  if (!closed)
    bench_fail("r1: scheduler close callback not called");
  if (r->cancelled != r->n || r->other != 0)
    bench_fail(
        "r1: at the close %llu of %zu tasks handed back cancelled, "
        "%llu otherwise",
        (unsigned long long) r->cancelled, r->n, (unsigned long long) r->other);
  bench_loop_close(&loop, "r1");
  bench_free(r->delay);
  bench_free(r->idx);
  bench_free(r->timers);
  bench_free(r->tasks);
  bench_free(r);
}


/* ---- r3: idle timeouts re-armed on every read -----------------------------
 *
 * n connections, each with a 30 s idle timeout, each reading 10 times a
 * simulated second for 10 simulated seconds; every read re-arms its
 * connection's timeout. Simulated time is compressed: an idle callback
 * plays the reads of one loop iteration (a batch, as one epoll_wait would
 * return), in a random order of the connections that changes from one
 * simulated 100 ms to the next, as fast as the loop goes. The figure is
 * the loop thread's CPU time per simulated second, from the first batch
 * to the last (arming and tearing down the timeouts excluded): uvsched
 * with one delayed task per connection on a UVS_LOOP worker and
 * uvs_task_reschedule per read, against one uv_timer_t per connection and
 * uv_timer_start per read. No timeout may fire.
 */

#define IDLE_TIMEOUT_MS 30000
#define IDLE_READS_PER_S 10
#define IDLE_SECONDS 10
#define IDLE_BATCH 1024 /* reads per loop iteration */
#define IDLE_PERMS 8    /* orders of the connections, used in turn */

typedef struct idle_s {
  uv_loop_t* loop;
  uvs_worker_t* worker; /* NULL: the uv_timer_t variant */
  uvs_task_t* tasks;
  uv_timer_t* timers;
  uint32_t* perm; /* IDLE_PERMS permutations of 0..n */
  size_t n;
  uint64_t reads;  /* to play */
  uint64_t played; /* so far */
  size_t tick;     /* the simulated 100 ms being played */
  size_t j;        /* the next connection in its order */
  uv_idle_t reader;
  uint64_t cpu0;
  uint64_t cpu1;
  uint64_t t0;
  uint64_t t1;
  uint64_t fired;     /* loop thread */
  uint64_t cancelled; /* loop thread */
  uint64_t other;
  int err;
} idle_t;


static void idle_fired(uvs_task_t* task) {
  ((idle_t*) task->data)->fired++;
}


static void idle_done(uvs_task_t* task, int status) {
  idle_t* d;

  d = task->data;
  if (status == UV_ECANCELED)
    d->cancelled++;
  else
    d->other++;
}


static void idle_timer_cb(uv_timer_t* handle) {
  ((idle_t*) handle->data)->fired++;
}


/* Ends a variant: the clock stops, every timeout is torn down. */
static void idle_end(idle_t* d) {
  size_t i;
  int err;

  d->cpu1 = bench_thread_cpu();
  d->t1 = uv_hrtime();
  uv_idle_stop(&d->reader);
  for (i = 0; i < d->n; i++) {
    if (d->worker == NULL) {
      uv_timer_stop(&d->timers[i]);
    } else {
      err = uvs_task_cancel(&d->tasks[i]);
      if (err != 0 && d->err == 0)
        d->err = err;
    }
  }
}


static void idle_read_batch(uv_idle_t* handle) {
  idle_t* d;
  const uint32_t* order;
  uint64_t end;
  size_t j;
  size_t c;
  int err;

  d = handle->data;
  end = d->played + IDLE_BATCH;
  if (end > d->reads)
    end = d->reads;
  order = &d->perm[(d->tick % IDLE_PERMS) * d->n];
  j = d->j;
  if (d->worker != NULL) {
    for (; d->played < end; d->played++) {
      c = order[j];
      err = uvs_task_reschedule(&d->tasks[c], IDLE_TIMEOUT_MS);
      if (err != 0 && d->err == 0)
        d->err = err;
      if (++j == d->n) {
        j = 0;
        d->tick++;
        order = &d->perm[(d->tick % IDLE_PERMS) * d->n];
      }
    }
  } else {
    for (; d->played < end; d->played++) {
      c = order[j];
      uv_timer_start(&d->timers[c], idle_timer_cb, IDLE_TIMEOUT_MS, 0);
      if (++j == d->n) {
        j = 0;
        d->tick++;
        order = &d->perm[(d->tick % IDLE_PERMS) * d->n];
      }
    }
  }
  d->j = j;
  if (d->played == d->reads || d->err != 0)
    idle_end(d);
}


/* One variant; returns ms of loop CPU per simulated second, or NAN. */
static double idle_run(idle_t* d, uvs_worker_t* worker, const char* where) {
  size_t i;
  int err;

  d->worker = worker;
  d->played = 0;
  d->tick = 0;
  d->j = 0;
  d->fired = d->cancelled = d->other = 0;
  d->err = 0;
  bench_arm(where);
  /* The connections are open: each has its timeout armed. */
  uv_update_time(d->loop);
  for (i = 0; i < d->n; i++) {
    if (worker == NULL) {
      uv_timer_start(&d->timers[i], idle_timer_cb, IDLE_TIMEOUT_MS, 0);
    } else {
      uvs_task_init(&d->tasks[i], idle_fired, idle_done);
      d->tasks[i].data = d;
      err = uvs_schedule_after(worker, &d->tasks[i], IDLE_TIMEOUT_MS);
      if (err != 0) {
        bench_fail("%s: uvs_schedule_after: %s", where, uv_strerror(err));
        abort();
      }
    }
  }
  d->t0 = uv_hrtime();
  d->cpu0 = bench_thread_cpu();
  uv_idle_start(&d->reader, idle_read_batch);
  uv_run(d->loop, UV_RUN_DEFAULT);

  if (d->err != 0) {
    bench_fail("%s: %s", where, uv_strerror(d->err));
    return NAN;
  }
  if (d->fired != 0 && d->t1 - d->t0 < (uint64_t) IDLE_TIMEOUT_MS * 1000000)
    bench_fail("%s: %llu idle timeouts fired after %.1f s of a 30 s timeout",
               where, (unsigned long long) d->fired,
               (double) (d->t1 - d->t0) / 1e9);
  if (worker != NULL && (d->cancelled != d->n || d->other != 0))
    bench_fail(
        "%s: %llu of %zu timeouts handed back cancelled, %llu "
        "otherwise",
        where, (unsigned long long) d->cancelled, d->n,
        (unsigned long long) d->other);
  return (double) (d->cpu1 - d->cpu0) / 1e6 / IDLE_SECONDS;
}


static void v03_idle(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t worker;
  idle_t* d;
  bench_row_t* row;
  double per_read[2][BENCH_MAX_RUNS];
  double wall[2][BENCH_MAX_RUNS];
  double v[2];
  uint64_t st;
  uint32_t* p;
  uint32_t x;
  size_t i;
  size_t j;
  int run;
  int k;
  int s;

  row = bench_row("r3.idle-timeouts",
                  "100k conns' 30 s idle timeouts re-armed on each read, "
                  "10 reads/s for 10 s: loop CPU per simulated s, vs a "
                  "uv_timer_t per conn",
                  "ms/s", BENCH_LE, 0.5, 0);

  d = bench_alloc(1, sizeof(*d));
  d->loop = &loop;
  d->n = cfg->v03_conns;
  d->reads = (uint64_t) d->n * IDLE_READS_PER_S * IDLE_SECONDS;
  d->tasks = bench_alloc(d->n, sizeof(*d->tasks));
  d->timers = bench_alloc(d->n, sizeof(*d->timers));
  d->perm = bench_alloc(d->n * IDLE_PERMS, sizeof(*d->perm));
  st = 0x1d1e;
  for (k = 0; k < IDLE_PERMS; k++) {
    p = &d->perm[(size_t) k * d->n];
    for (i = 0; i < d->n; i++) p[i] = (uint32_t) i;
    for (i = d->n; i > 1; i--) {
      j = bench_rand(&st) % i;
      x = p[i - 1];
      p[i - 1] = p[j];
      p[j] = x;
    }
  }
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0 ||
      uvs_worker_init(&sched, &worker, UVS_LOOP) != 0)
    abort();
  uv_idle_init(&loop, &d->reader);
  d->reader.data = d;
  for (i = 0; i < d->n; i++) {
    uv_timer_init(&loop, &d->timers[i]);
    d->timers[i].data = d;
  }

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 2; k++) {
      s = bench_order(run, 2, k);
      v[s] = idle_run(d, s == 0 ? &worker : NULL,
                      s == 0 ? "r3 uvsched" : "r3 uv_timer");
      per_read[s][run] = (double) (d->cpu1 - d->cpu0) / (double) d->reads;
      wall[s][run] = (double) (d->t1 - d->t0) / 1e6;
      bench_note(cfg, s == 0 ? "r3.uvsched" : "r3.timer", run, v[s], "ms/s");
    }
    bench_row_add(row, v[0], v[1]);
  }
  bench_figure("r3.per-read.uvsched", bench_median(per_read[0], cfg->runs),
               "ns/re-arm");
  bench_figure("r3.per-read.timer", bench_median(per_read[1], cfg->runs),
               "ns/re-arm");
  bench_figure("r3.wall.uvsched", bench_median(wall[0], cfg->runs), "ms");
  bench_figure("r3.wall.timer", bench_median(wall[1], cfg->runs), "ms");

  bench_check_stats(&sched, "r3");
  bench_sched_close(&loop, &sched, "r3");
  uv_close((uv_handle_t*) &d->reader, NULL);
  for (i = 0; i < d->n; i++) uv_close((uv_handle_t*) &d->timers[i], NULL);
  bench_loop_close(&loop, "r3");
  bench_free(d->perm);
  bench_free(d->timers);
  bench_free(d->tasks);
  bench_free(d);
}


/* ---- r4: lateness on an idle loop ------------------------------------------
 *
 * n delayed tasks, delays drawn in lo..hi ms. A producer thread wakes the
 * loop at Poisson instants over a short window, as a socket's readiness
 * would, and the loop schedules a batch of LATE_BATCH tasks each time, as
 * a read callback would: so schedule calls fall at random points of the
 * ms, and between the wake-ups and the firings the loop waits in
 * epoll_wait. Lateness is run_cb's start (uv_hrtime()) minus t_call +
 * delay, t_call read just before the schedule call. Three variants with
 * the same arrivals and delays: a UVS_LOOP worker, a UVS_POOL worker, and
 * one uv_timer_t per task (which goes by libuv's cached ms and may fire
 * early).
 */

#define LATE_BATCH 25

/* CLOCK_MONOTONIC minus uv_hrtime(), for sleeps until a uv_hrtime(). */
static int64_t mono_skew(void) {
  struct timespec ts;
  uint64_t t;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  t = uv_hrtime();
  return ((int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec) - (int64_t) t;
}


static void sleep_until(uint64_t hr, int64_t skew) {
  struct timespec ts;
  uint64_t at;

  at = (uint64_t) ((int64_t) hr + skew);
  ts.tv_sec = (time_t) (at / 1000000000);
  ts.tv_nsec = (long) (at % 1000000000);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}


typedef struct late_s late_t;

typedef struct ltask_s {
  uvs_task_t task;
  uv_timer_t timer;
  uint64_t delay_ms;
  uint64_t due_ns;   /* t_call + delay */
  uint64_t start_ns; /* run_cb starts */
  late_t* l;
} ltask_t;

struct late_s {
  uv_loop_t* loop;
  ltask_t* tasks;
  uint64_t* off; /* batch b is due at t0 + off[b] ns */
  size_t n;
  size_t nbatches;
  size_t next;          /* loop thread: the next batch to schedule */
  uvs_worker_t* worker; /* NULL: uv_timer_t */
  uint64_t t0;
  int64_t skew;
  uv_async_t poke;
  bench_thread_t producer;
  bench_count_t count;
  int err;
};


static void late_started(ltask_t* t) {
  t->start_ns = uv_hrtime();
  bench_count_hit(&t->l->count);
}


static void late_run(uvs_task_t* task) {
  late_started((ltask_t*) task);
}


static void late_timer_cb(uv_timer_t* handle) {
  late_started(handle->data);
}


static void late_producer(void* arg) {
  late_t* l;
  size_t b;

  l = arg;
  for (b = 0; b < l->nbatches; b++) {
    sleep_until(l->t0 + l->off[b], l->skew);
    uv_async_send(&l->poke);
  }
}


static void late_poke(uv_async_t* handle) {
  late_t* l;
  ltask_t* t;
  uint64_t now;
  uint64_t t_call;
  size_t i;
  size_t end;
  int err;

  l = handle->data;
  if (l->next == l->nbatches)
    return;
  now = uv_hrtime();
  while (l->next < l->nbatches && l->t0 + l->off[l->next] <= now) {
    i = l->next * LATE_BATCH;
    end = i + LATE_BATCH < l->n ? i + LATE_BATCH : l->n;
    for (; i < end; i++) {
      t = &l->tasks[i];
      if (l->worker != NULL) {
        t_call = uv_hrtime();
        err = uvs_schedule_after(l->worker, &t->task, t->delay_ms);
        if (err != 0 && l->err == 0)
          l->err = err;
      } else {
        t_call = uv_hrtime();
        uv_timer_start(&t->timer, late_timer_cb, t->delay_ms, 0);
      }
      t->due_ns = t_call + t->delay_ms * 1000000;
    }
    l->next++;
  }
  if (l->next == l->nbatches) {
    /* The producer has only pokes for batches already scheduled left:
     * wait for it, so that no send comes after the close. */
    bench_thread_join(&l->producer);
    uv_close((uv_handle_t*) handle, NULL);
  }
}


typedef struct late_out_s {
  double p50; /* ms */
  double p99;
  double max;
  double early; /* runs before t_call + delay */
} late_out_t;


/* One variant; returns 0, or -1 after bench_fail(). lat is scratch. */
static int late_run_one(late_t* l,
                        uvs_worker_t* worker,
                        double* lat,
                        late_out_t* out,
                        const char* where) {
  ltask_t* t;
  size_t i;
  uint64_t early;

  l->worker = worker;
  l->next = 0;
  l->err = 0;
  bench_count_reset(&l->count, l->n);
  for (i = 0; i < l->n; i++) {
    t = &l->tasks[i];
    t->start_ns = 0;
    uvs_task_init(&t->task, late_run, NULL);
  }
  if (uv_async_init(l->loop, &l->poke, late_poke) != 0)
    abort();
  l->poke.data = l;
  bench_arm(where);
  l->skew = mono_skew();
  l->t0 = uv_hrtime() + 1000000; /* the first wake-up after uv_run began */
  bench_thread_start(&l->producer, late_producer, l);
  uv_run(l->loop, UV_RUN_DEFAULT);

  if (l->err != 0) {
    bench_fail("%s: uvs_schedule_after: %s", where, uv_strerror(l->err));
    return -1;
  }
  if (bench_count_ran(&l->count) != l->n) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&l->count), l->n);
    return -1;
  }
  early = 0;
  for (i = 0; i < l->n; i++) {
    t = &l->tasks[i];
    if (t->start_ns < t->due_ns)
      early++;
    lat[i] = ((double) t->start_ns - (double) t->due_ns) / 1e6;
  }
  if (worker != NULL && early != 0)
    bench_fail("%s: %llu of %zu tasks ran before t_call + delay (guarantee 6)",
               where, (unsigned long long) early, l->n);
  out->p50 = bench_percentile(lat, l->n, 50.0);
  out->p99 = bench_percentile(lat, l->n, 99.0);
  out->max = lat[l->n - 1];
  out->early = (double) early;
  return 0;
}


/* Four rows of one uvsched variant: p50, p99, max, early. */
typedef struct late_rows_s {
  bench_row_t* row[4];
} late_rows_t;


static void late_rows_add(late_rows_t* r, late_out_t u, late_out_t t) {
  bench_row_add(r->row[0], u.p50, t.p50);
  bench_row_add(r->row[1], u.p99, t.p99);
  bench_row_add(r->row[2], u.max, t.max);
  bench_row_add(r->row[3], u.early, t.early);
}


static void v03_late(const bench_cfg_t* cfg) {
  static const char* const where[3] = {"r4 uvsched loop", "r4 uvsched pool",
                                       "r4 uv_timer"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t workers[2];
  late_t* l;
  late_rows_t rl;
  late_rows_t rp;
  late_out_t out[3];
  double* lat;
  double u;
  double gap;
  uint64_t st;
  uint64_t at;
  size_t i;
  int run;
  int k;
  int v;

  rl.row[0] = bench_row("r4.late-loop.p50",
                        "10k delays of 10-100 ms, idle loop, UVS_LOOP "
                        "worker: lateness p50, vs uv_timer_t",
                        "ms", BENCH_LE, 0.5, 1);
  rl.row[1] = bench_row("r4.late-loop.p99",
                        "10k delays of 10-100 ms, idle loop, UVS_LOOP "
                        "worker: lateness p99, vs uv_timer_t",
                        "ms", BENCH_LE, 1.2, 1);
  rl.row[2] = bench_row("r4.late-loop.max",
                        "10k delays of 10-100 ms, idle loop, UVS_LOOP "
                        "worker: lateness max, vs uv_timer_t",
                        "ms", BENCH_INFO, NAN, 1);
  rl.row[3] = bench_row("r4.late-loop.early",
                        "10k delays of 10-100 ms, UVS_LOOP worker: runs "
                        "before t_call + delay, worst run, vs uv_timer_t",
                        "runs", BENCH_LE, 0.0, 1);
  rp.row[0] = bench_row("r4.late-pool.p50",
                        "10k delays of 10-100 ms, idle loop, UVS_POOL "
                        "worker: lateness p50, vs uv_timer_t",
                        "ms", BENCH_LE, 0.5, 1);
  rp.row[1] = bench_row("r4.late-pool.p99",
                        "10k delays of 10-100 ms, idle loop, UVS_POOL "
                        "worker: lateness p99, vs uv_timer_t",
                        "ms", BENCH_LE, 1.2, 1);
  rp.row[2] = bench_row("r4.late-pool.max",
                        "10k delays of 10-100 ms, idle loop, UVS_POOL "
                        "worker: lateness max, vs uv_timer_t",
                        "ms", BENCH_INFO, NAN, 1);
  rp.row[3] = bench_row("r4.late-pool.early",
                        "10k delays of 10-100 ms, UVS_POOL worker: runs "
                        "before t_call + delay, worst run, vs uv_timer_t",
                        "runs", BENCH_LE, 0.0, 1);
  bench_row_agg(rl.row[3], BENCH_MAX);
  bench_row_agg(rp.row[3], BENCH_MAX);

  l = bench_alloc(1, sizeof(*l));
  l->loop = &loop;
  l->n = cfg->v03_late;
  l->nbatches = (l->n + LATE_BATCH - 1) / LATE_BATCH;
  l->tasks = bench_alloc(l->n, sizeof(*l->tasks));
  l->off = bench_alloc(l->nbatches, sizeof(*l->off));
  lat = bench_alloc(l->n, sizeof(*lat));
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0 ||
      uvs_worker_init(&sched, &workers[0], UVS_LOOP) != 0 ||
      uvs_worker_init(&sched, &workers[1], UVS_POOL) != 0)
    abort();
  for (i = 0; i < l->n; i++) {
    l->tasks[i].l = l;
    uv_timer_init(&loop, &l->tasks[i].timer);
    l->tasks[i].timer.data = &l->tasks[i];
  }
  /* Mean gap between wake-ups: the window over the batches. */
  gap = (double) cfg->v03_late_window_ms * 1e6 / (double) l->nbatches;
  printf(
      "# r4: %zu tasks in batches of %d at Poisson instants over %u ms, "
      "delays %u-%u ms\n",
      l->n, LATE_BATCH, cfg->v03_late_window_ms, cfg->v03_late_min_ms,
      cfg->v03_late_max_ms);
  fflush(stdout);

  for (run = 0; run < cfg->runs; run++) {
    st = (0x1a7e + (uint64_t) run) | 1;
    for (i = 0; i < l->n; i++)
      l->tasks[i].delay_ms =
          cfg->v03_late_min_ms +
          bench_rand(&st) % (cfg->v03_late_max_ms - cfg->v03_late_min_ms + 1);
    at = 0;
    for (i = 0; i < l->nbatches; i++) {
      u = (double) ((bench_rand(&st) >> 11) + 1) / 9007199254740992.0;
      at += (uint64_t) (-log(u) * gap);
      l->off[i] = at;
    }
    for (k = 0; k < 3; k++) {
      v = bench_order(run, 3, k);
      if (late_run_one(l, v < 2 ? &workers[v] : NULL, lat, &out[v], where[v]) !=
          0)
        out[v].p50 = out[v].p99 = out[v].max = out[v].early = NAN;
      bench_note(cfg, where[v], run, out[v].p99, "ms late p99");
    }
    late_rows_add(&rl, out[0], out[2]);
    late_rows_add(&rp, out[1], out[2]);
  }

  bench_check_stats(&sched, "r4");
  bench_sched_close(&loop, &sched, "r4");
  for (i = 0; i < l->n; i++) uv_close((uv_handle_t*) &l->tasks[i].timer, NULL);
  bench_loop_close(&loop, "r4");
  bench_free(lat);
  bench_free(l->off);
  bench_free(l->tasks);
  bench_free(l);
}


/* ---- r5: per-key bounds that never trigger --------------------------------
 *
 * s10's load (keys x per tasks, task r of every key then task r + 1, on a
 * width-4 pool worker, scheduled from the loop thread) on a worker with
 * key_max_pending 16, which 10 tasks per key never reach, against the
 * same worker without it. The figure is wall time per task from the first
 * schedule to the last run.
 */

static void v03_key_bounds(const bench_cfg_t* cfg) {
  static const char* const where[2] = {"r5 key_max_pending 16",
                                       "r5 key_max_pending 0"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t workers[2];
  uvs_worker_options_t o;
  uvs_worker_metrics_t m;
  bench_keyed_t kd;
  bench_row_t* row;
  double ns[2];
  double cpu[2][BENCH_MAX_RUNS];
  size_t total;
  int run;
  int k;
  int v;

  row = bench_row("r5.key-bounds",
                  "width-4 worker, 100k keys x 10 tasks, key_max_pending 16 "
                  "(never full), vs 0: schedule to last run",
                  "ns/task", BENCH_LE, 1.15, 0);

  memset(&kd, 0, sizeof(kd));
  kd.loop = &loop;
  kd.keys = cfg->v03_keys;
  kd.per = cfg->v03_per;
  total = kd.keys * kd.per;
  kd.tasks = bench_alloc(total, sizeof(*kd.tasks));
  kd.lanes = bench_alloc(kd.keys, sizeof(*kd.lanes));
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0)
    abort();
  memset(&o, 0, sizeof(o));
  o.width = 4;
  o.key_max_pending = 16;
  o.on_full = UVS_FULL_REJECT;
  if (uvs_worker_init_ex(&sched, &workers[0], UVS_POOL, &o) != 0)
    abort();
  o.key_max_pending = 0;
  if (uvs_worker_init_ex(&sched, &workers[1], UVS_POOL, &o) != 0)
    abort();

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 2; k++) {
      v = bench_order(run, 2, k);
      kd.worker = &workers[v];
      ns[v] = cpu[v][run] = NAN;
      if (bench_keyed_run(&kd, where[v]) == 0) {
        ns[v] = 1e9 / kd.rate;
        cpu[v][run] = (double) kd.cpu / (double) total;
      }
      bench_note(cfg, where[v], run, ns[v], "ns/task");
    }
    bench_row_add(row, ns[0], ns[1]);
  }
  bench_figure("r5.cpu.bounded", bench_median(cpu[0], cfg->runs), "ns/task");
  bench_figure("r5.cpu.unbounded", bench_median(cpu[1], cfg->runs), "ns/task");
  if (uvs_worker_metrics(&workers[0], &m) == 0 &&
      (m.rejected != 0 || m.dropped != 0))
    bench_fail("r5: the bounded worker rejected %llu, dropped %llu",
               (unsigned long long) m.rejected, (unsigned long long) m.dropped);

  bench_check_stats(&sched, "r5");
  bench_sched_close(&loop, &sched, "r5");
  bench_loop_close(&loop, "r5");
  bench_free(kd.lanes);
  bench_free(kd.tasks);
}


/* ---- r6: max_wait_ms that never sheds -------------------------------------
 *
 * A stream of n empty tasks scheduled from the loop thread onto a serial
 * pool worker with max_wait_ms 60000 (never reached), against the same
 * worker without it. The tasks have a done_cb (the library never sheds a
 * done-less task, and skips the check for one); the figure is wall time
 * per task from the first schedule to the last done_cb.
 */

static void lanes_reset(bench_lane_t* lanes, size_t n, bench_count_t* c) {
  size_t i;

  for (i = 0; i < n; i++) {
    lanes[i].next = 0;
    lanes[i].bad = 0;
    lanes[i].count = c;
  }
}


typedef struct stream_s {
  bench_lane_t lane; /* first: task->data points here */
  bench_count_t count;
  uint64_t n;
  uint64_t done;  /* loop thread */
  uint64_t bad;   /* hand-backs with a status */
  uint64_t t_end; /* the last done_cb */
} stream_t;


static void stream_done(uvs_task_t* task, int status) {
  stream_t* s;

  s = task->data;
  if (status != 0)
    s->bad++;
  if (++s->done == s->n)
    s->t_end = uv_hrtime();
}


/* Returns ns per task, or NAN; *cpu gets process CPU per task. */
static double stream_run(uv_loop_t* loop,
                         uvs_worker_t* w,
                         stream_t* s,
                         bench_utask_t* tasks,
                         double* cpu,
                         const char* where) {
  uint64_t cpu0;
  uint64_t t0;
  size_t i;
  int err;

  bench_count_reset(&s->count, s->n);
  lanes_reset(&s->lane, 1, &s->count);
  s->done = s->bad = s->t_end = 0;
  bench_arm(where);
  cpu0 = bench_process_cpu();
  t0 = uv_hrtime();
  for (i = 0; i < s->n; i++) {
    uvs_task_init(&tasks[i].task, bench_utask_run, stream_done);
    tasks[i].task.data = s;
    tasks[i].seq = i;
    err = uvs_schedule(w, &tasks[i].task);
    if (err != 0) {
      bench_fail("%s: uvs_schedule: %s", where, uv_strerror(err));
      uv_run(loop, UV_RUN_DEFAULT);
      return NAN;
    }
  }
  uv_run(loop, UV_RUN_DEFAULT);
  *cpu = (double) (bench_process_cpu() - cpu0) / (double) s->n;
  if (s->done != s->n || s->bad != 0) {
    bench_fail("%s: %llu of %llu tasks handed back, %llu with an error", where,
               (unsigned long long) s->done, (unsigned long long) s->n,
               (unsigned long long) s->bad);
    return NAN;
  }
  bench_lanes_check(&s->lane, 1, s->n, where);
  return (double) (s->t_end - t0) / (double) s->n;
}


static void v03_max_wait(const bench_cfg_t* cfg) {
  static const char* const where[2] = {"r6 max_wait_ms 60000",
                                       "r6 max_wait_ms 0"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t workers[2];
  uvs_worker_options_t o;
  uvs_worker_metrics_t m;
  stream_t s;
  bench_utask_t* tasks;
  bench_row_t* row;
  double ns[2];
  double cpu[2][BENCH_MAX_RUNS];
  int run;
  int k;
  int v;

  row = bench_row("r6.max-wait",
                  "1M empty tasks with done_cb, serial pool worker, "
                  "max_wait_ms 60000 (never sheds), vs 0",
                  "ns/task", BENCH_LE, 1.1, 0);

  memset(&s, 0, sizeof(s));
  s.n = cfg->v03_stream;
  tasks = bench_alloc(s.n, sizeof(*tasks));
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0)
    abort();
  memset(&o, 0, sizeof(o));
  o.max_wait_ms = 60000;
  if (uvs_worker_init_ex(&sched, &workers[0], UVS_POOL, &o) != 0)
    abort();
  o.max_wait_ms = 0;
  if (uvs_worker_init_ex(&sched, &workers[1], UVS_POOL, &o) != 0)
    abort();

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 2; k++) {
      v = bench_order(run, 2, k);
      ns[v] = stream_run(&loop, &workers[v], &s, tasks, &cpu[v][run], where[v]);
      bench_note(cfg, where[v], run, ns[v], "ns/task");
    }
    bench_row_add(row, ns[0], ns[1]);
  }
  bench_figure("r6.cpu.max-wait", bench_median(cpu[0], cfg->runs), "ns/task");
  bench_figure("r6.cpu.plain", bench_median(cpu[1], cfg->runs), "ns/task");
  if (uvs_worker_metrics(&workers[0], &m) == 0 && m.expired != 0)
    bench_fail("r6: %llu tasks shed with max_wait_ms 60000",
               (unsigned long long) m.expired);

  bench_check_stats(&sched, "r6");
  bench_sched_close(&loop, &sched, "r6");
  bench_loop_close(&loop, "r6");
  bench_free(tasks);
}


void bench_v03(const bench_cfg_t* cfg) {
  v03_rearm(cfg);
  v03_idle(cfg);
  v03_late(cfg);
  v03_key_bounds(cfg);
  v03_max_wait(cfg);
}
