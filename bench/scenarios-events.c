/* The users' view, continued (scenario u): single events, and a pool held
 * by endless work. The systems and their tasks are scenarios-users.c's.
 *
 * u6, one task per event. Each event is a loop callback that schedules one
 * 2 us task on the next of 16 serial pool workers in turn, as a server
 * schedules the work of one request. Cold: an uv_timer_t fires every few
 * ms, so that between events every pool thread sleeps. Warm: the events
 * are an uv_async_t's callbacks, each woken by the previous task on its
 * way out of run_cb, so they come back to back with the pool just busy.
 * The row is the start latency, schedule call to run_cb, against naive
 * (one queue per worker) and raw; each system runs a block of events, in
 * alternating order; the process CPU per event (getrusage over the block)
 * is reported beside it.
 *
 * u7, the pool held. One serial worker per pool thread runs a 5 us task
 * (CPU time) that schedules itself again from its run_cb until told to
 * stop, so that the scheduler's drains hold every thread; meanwhile the
 * loop makes uv_fs_stat round trips (call to callback) back to back: what
 * other users of libuv's pool wait while a scheduler is saturated, the
 * cost of its drains keeping their threads (a slice in 0.4, hold_us in
 * 0.5). The same with naive queues holding the pool, whose drains never
 * end while they have work (one round trip that waits out the window), and
 * with the pool idle. The window is bounded in time and in round trips.
 */

#include "users.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- u6: one task per event ---------------------------------------------- */

#define EV_WORKERS 16
#define EV_TASK_NS 2000

typedef struct ev_s {
  uv_loop_t* loop;
  usys_t* sys;
  utask_t* tasks;
  size_t n;
  size_t next;      /* loop thread: the next event's task */
  uv_timer_t timer; /* cold */
  uv_async_t kick;  /* warm */
  bench_lane_t lanes[EV_WORKERS];
  bench_count_t count;
} ev_t;


/* One event: one task, on the next worker. */
static void ev_fire(ev_t* e, uv_handle_t* handle) {
  users_submit(e->sys, &e->tasks[e->next++]);
  if (e->next == e->n)
    uv_close(handle, NULL);
}


static void ev_timer_cb(uv_timer_t* timer) {
  ev_fire(timer->data, (uv_handle_t*) timer);
}


static void ev_kick_cb(uv_async_t* kick) {
  ev_fire(kick->data, (uv_handle_t*) kick);
}


/* Warm: a task on its way out wakes the next event (not the last task:
 * the handle is closed by then). */
static void ev_then(utask_t* t) {
  ev_t* e;

  e = t->ctx;
  if (t->arg != 0)
    uv_async_send(&e->kick);
}


typedef struct ev_out_s {
  lat_stats_t start; /* us */
  double cpu;        /* process CPU per event, ns */
} ev_out_t;


/* One system's block of events; lat is scratch for n values. Returns 0, or
 * -1 after bench_fail(). */
static int ev_run(ev_t* e,
                  usys_t* sys,
                  int warm,
                  unsigned gap_ms,
                  double* lat,
                  ev_out_t* out,
                  const char* where) {
  utask_t* t;
  uint64_t c0;
  uint64_t cpu;
  size_t i;

  bench_count_reset(&e->count, e->n);
  bench_lanes_reset(e->lanes, EV_WORKERS, &e->count);
  for (i = 0; i < e->n; i++) {
    t = &e->tasks[i];
    memset(t, 0, sizeof(*t));
    t->idx = (uint32_t) (i % EV_WORKERS);
    t->seq = i / EV_WORKERS;
    t->spin_ns = EV_TASK_NS;
    t->ctx = e;
    t->count = &e->count;
    t->lane = sys->kind == U_RAW ? NULL : &e->lanes[t->idx];
    t->then = warm ? ev_then : NULL;
    t->arg = i + 1 < e->n;
  }
  e->sys = sys;
  e->next = 0;
  sys->err = 0;
  bench_arm(where);
  c0 = users_rusage();
  if (warm) {
    if (uv_async_init(e->loop, &e->kick, ev_kick_cb) != 0)
      abort();
    e->kick.data = e;
    uv_async_send(&e->kick);
  } else {
    if (uv_timer_init(e->loop, &e->timer) != 0)
      abort();
    e->timer.data = e;
    uv_update_time(e->loop);
    uv_timer_start(&e->timer, ev_timer_cb, gap_ms, gap_ms);
  }
  uv_run(e->loop, UV_RUN_DEFAULT);
  cpu = users_rusage() - c0;

  if (sys->err != 0) {
    bench_fail("%s: schedule: %s", where, uv_strerror(sys->err));
    return -1;
  }
  if (bench_count_ran(&e->count) != e->n) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&e->count), e->n);
    return -1;
  }
  if (sys->kind != U_RAW)
    for (i = 0; i < EV_WORKERS; i++)
      if (e->lanes[i].bad != 0) {
        bench_fail("%s: worker %zu ran %llu tasks out of order", where, i,
                   (unsigned long long) e->lanes[i].bad);
        return -1;
      }
  for (i = 0; i < e->n; i++)
    lat[i] = (double) (e->tasks[i].t_start - e->tasks[i].t_call) / 1e3;
  out->start = users_lat_stats(lat, e->n);
  out->cpu = (double) cpu / (double) e->n;
  return 0;
}


void bench_users_events(const bench_cfg_t* cfg) {
  static const char* const where[2][3] = {
      {"u6 cold uvsched", "u6 cold raw", "u6 cold naive"},
      {"u6 warm uvsched", "u6 warm raw", "u6 warm naive"}};
  static const char* const ids[2][3] = {
      {"u6.cold.p50", "u6.cold.p99", "u6.cold.cpu"},
      {"u6.warm.p50", "u6.warm.p99", "u6.warm.cpu"}};
  static const char* const titles[2][3] = {
      {"one 2 us task per timer event, pool asleep: start p50 vs naive",
       "one 2 us task per timer event, pool asleep: start p99 vs naive",
       "one task per timer event: process CPU (getrusage) per event, vs "
       "naive"},
      {"one 2 us task per event, back to back: start p50 vs naive",
       "one 2 us task per event, back to back: start p99 vs naive",
       "one task per event, back to back: process CPU per event, vs naive"}};
  static const char* const raw_names[2][2] = {
      {"u6.cold.p50.raw", "u6.cold.p99.raw"},
      {"u6.warm.p50.raw", "u6.warm.p99.raw"}};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t workers[EV_WORKERS];
  bench_naive_t naive[EV_WORKERS];
  usys_t sys[3];
  ev_t e;
  ev_out_t out[3];
  bench_row_t* rows[2][3];
  double raw[2][2][BENCH_MAX_RUNS];
  double* lat;
  size_t i;
  int warm;
  int run;
  int k;
  int v;

  for (warm = 0; warm < 2; warm++) {
    rows[warm][0] =
        bench_row(ids[warm][0], titles[warm][0], "us", BENCH_LE, 1.05, 0);
    rows[warm][1] =
        bench_row(ids[warm][1], titles[warm][1], "us", BENCH_LE, 1.25, 0);
    rows[warm][2] =
        bench_row(ids[warm][2], titles[warm][2], "ns", BENCH_INFO, NAN, 0);
  }
  printf(
      "# u6: cold: %zu timer events %u ms apart; warm: %zu events back to "
      "back; %d workers in turn\n",
      cfg->users_cold, cfg->users_cold_ms, cfg->users_warm, EV_WORKERS);
  fflush(stdout);

  memset(&e, 0, sizeof(e));
  e.loop = &loop;
  i = cfg->users_cold > cfg->users_warm ? cfg->users_cold : cfg->users_warm;
  e.tasks = bench_alloc(i, sizeof(*e.tasks));
  lat = bench_alloc(i, sizeof(*lat));
  users_sched_open(cfg, &loop, &sched);
  for (i = 0; i < EV_WORKERS; i++)
    if (uvs_worker_init(&sched, &workers[i], UVS_POOL) != 0)
      abort();
  users_naive_open(&loop, naive, EV_WORKERS);
  users_sys_init(sys, &loop, workers, naive);

  for (run = 0; run < cfg->runs; run++) {
    for (warm = 0; warm < 2; warm++) {
      e.n = warm ? cfg->users_warm : cfg->users_cold;
      for (k = 0; k < 3; k++) {
        v = bench_order(run, 3, k);
        if (ev_run(&e, &sys[v], warm, cfg->users_cold_ms, lat, &out[v],
                   where[warm][v]) != 0) {
          out[v].start = users_lat_stats(NULL, 0);
          out[v].cpu = NAN;
        }
        bench_note(cfg, where[warm][v], run, out[v].start.p50, "us start p50");
      }
      bench_row_add(rows[warm][0], out[U_UVS].start.p50,
                    out[U_NAIVE].start.p50);
      bench_row_add(rows[warm][1], out[U_UVS].start.p99,
                    out[U_NAIVE].start.p99);
      bench_row_add(rows[warm][2], out[U_UVS].cpu, out[U_NAIVE].cpu);
      raw[warm][0][run] = out[U_RAW].start.p50;
      raw[warm][1][run] = out[U_RAW].start.p99;
    }
  }
  for (warm = 0; warm < 2; warm++)
    for (k = 0; k < 2; k++)
      bench_figure(raw_names[warm][k], bench_median(raw[warm][k], cfg->runs),
                   "us");

  users_naive_close(naive, EV_WORKERS);
  users_sched_done(&loop, &sched, "u6");
  bench_free(lat);
  bench_free(e.tasks);
}


/* ---- u7: uv_fs_stat while the pool is held ------------------------------- */

#define HELD_TASK_NS 5000
#define HELD_SETTLE_MS 5 /* the endless tasks take the pool first */
#define HELD_WORKERS_MAX 64

enum { HELD_UVS = 0, HELD_NAIVE = 1, HELD_IDLE = 2 };

typedef struct held_s {
  uv_loop_t* loop;
  usys_t* sys; /* NULL: the pool idle */
  utask_t tasks[HELD_WORKERS_MAX];
  bench_lane_t lanes[HELD_WORKERS_MAX];
  bench_count_t count;
  size_t nworkers;
  unsigned stop; /* atomic: the endless tasks end */
  int err;       /* atomic: a schedule from a run_cb failed */
  int ending;    /* loop thread: no more round trips */
  unsigned window_ms;
  uv_timer_t timer; /* the settle, then the window */
  uv_fs_t req;
  uint64_t t_call;
  double* lat; /* round trips, us */
  size_t nlat;
  size_t maxlat;
} held_t;


/* An endless task: schedules itself again until stop. */
static void held_then(utask_t* t) {
  held_t* h;
  int err;

  h = t->ctx;
  if (__atomic_load_n(&h->stop, __ATOMIC_ACQUIRE))
    return;
  t->seq++;
  err = users_resubmit(h->sys, t);
  if (err != 0)
    __atomic_store_n(&h->err, err, __ATOMIC_RELAXED);
}


static void held_end(held_t* h) {
  h->ending = 1;
  __atomic_store_n(&h->stop, 1, __ATOMIC_RELEASE);
  if (!uv_is_closing((uv_handle_t*) &h->timer))
    uv_close((uv_handle_t*) &h->timer, NULL);
}


static void held_stat(held_t* h);


static void held_stat_cb(uv_fs_t* req) {
  held_t* h;
  uint64_t now;

  now = uv_hrtime();
  h = req->data;
  if (req->result != 0)
    bench_fail("u7: uv_fs_stat: %s", uv_strerror((int) req->result));
  uv_fs_req_cleanup(req);
  h->lat[h->nlat++] = (double) (now - h->t_call) / 1e3;
  if (h->ending)
    return;
  if (h->nlat == h->maxlat) {
    held_end(h);
    return;
  }
  held_stat(h);
}


static void held_stat(held_t* h) {
  int err;

  h->req.data = h;
  h->t_call = uv_hrtime();
  err = uv_fs_stat(h->loop, &h->req, "/", held_stat_cb);
  if (err != 0) {
    bench_fail("u7: uv_fs_stat: %s", uv_strerror(err));
    held_end(h);
  }
}


/* The settle is over: the round trips begin, and the window's timer. */
static void held_timer_cb(uv_timer_t* timer) {
  held_t* h;

  h = timer->data;
  if (h->t_call == 0) {
    held_stat(h);
    uv_timer_start(timer, held_timer_cb, h->window_ms, 0);
    return;
  }
  held_end(h);
}


typedef struct held_out_s {
  lat_stats_t rt; /* us */
  double n;       /* round trips */
  double runs;    /* the endless tasks' runs per second */
} held_out_t;


/* One variant's window. Returns 0, or -1 after bench_fail(). */
static int held_run(held_t* h, usys_t* sys, held_out_t* out, const char* w) {
  utask_t* t;
  uint64_t t0;
  uint64_t runs;
  size_t i;
  int err;

  h->sys = sys;
  h->stop = 0;
  h->err = 0;
  h->ending = 0;
  h->nlat = 0;
  h->t_call = 0;
  bench_count_reset(&h->count, UINT64_MAX);
  bench_lanes_reset(h->lanes, h->nworkers, &h->count);
  bench_arm(w);
  if (uv_timer_init(h->loop, &h->timer) != 0)
    abort();
  h->timer.data = h;
  t0 = uv_hrtime();
  if (sys != NULL) {
    sys->err = 0;
    for (i = 0; i < h->nworkers; i++) {
      t = &h->tasks[i];
      memset(t, 0, sizeof(*t));
      t->idx = (uint32_t) i;
      t->spin_ns = HELD_TASK_NS;
      t->ctx = h;
      t->lane = &h->lanes[i];
      t->then = held_then;
      users_submit(sys, t);
    }
  }
  uv_update_time(h->loop);
  uv_timer_start(&h->timer, held_timer_cb, sys != NULL ? HELD_SETTLE_MS : 0, 0);
  uv_run(h->loop, UV_RUN_DEFAULT);

  err = sys != NULL && sys->err != 0 ? sys->err : h->err;
  if (err != 0) {
    bench_fail("%s: schedule: %s", w, uv_strerror(err));
    return -1;
  }
  runs = 0;
  for (i = 0; sys != NULL && i < h->nworkers; i++) {
    if (h->lanes[i].bad != 0) {
      bench_fail("%s: worker %zu ran %llu tasks out of order", w, i,
                 (unsigned long long) h->lanes[i].bad);
      return -1;
    }
    runs += h->lanes[i].next;
  }
  if (h->nlat == 0) {
    bench_fail("%s: no uv_fs_stat round trip", w);
    return -1;
  }
  out->n = (double) h->nlat;
  out->runs = (double) runs * 1e9 / (double) (uv_hrtime() - t0);
  out->rt = users_lat_stats(h->lat, h->nlat);
  return 0;
}


void bench_users_held(const bench_cfg_t* cfg) {
  static const char* const where[3] = {
      "u7 uvsched holds the pool", "u7 naive holds the pool", "u7 pool idle"};
  static const char* const fig_n[3] = {"u7.held.round-trips.uvsched",
                                       "u7.held.round-trips.naive",
                                       "u7.held.round-trips.idle"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t workers[HELD_WORKERS_MAX];
  bench_naive_t naive[HELD_WORKERS_MAX];
  usys_t sys[3];
  held_t* h;
  held_out_t out[3];
  bench_row_t* p50;
  bench_row_t* p99;
  bench_row_t* max;
  bench_row_t* p99_naive;
  double n[3][BENCH_MAX_RUNS];
  double naive_p50[BENCH_MAX_RUNS];
  double naive_max[BENCH_MAX_RUNS];
  double runs[2][BENCH_MAX_RUNS];
  double hold_us;
  size_t i;
  int run;
  int k;
  int v;

  /* SPEC 0.5: others wait at most about hold_us plus one turn. */
  hold_us = 10000;
#if UVS_VERSION_HEX >= 0x000500
  if (cfg->users_hold_us != 0)
    hold_us = cfg->users_hold_us;
#endif
  p50 = bench_row("u7.held.p50",
                  "pool held by endless 5 us tasks, a worker per thread: "
                  "uv_fs_stat round trip p50, vs the pool idle",
                  "us", BENCH_INFO, NAN, 0);
  p99 = bench_row("u7.held.p99",
                  "the same, p99 vs the pool idle (target: hold_us + 2 ms)",
                  "us", BENCH_LE, hold_us + 2000, 1);
  max = bench_row("u7.held.max", "the same, max vs the pool idle", "us",
                  BENCH_INFO, NAN, 0);
  p99_naive = bench_row("u7.held.p99-naive",
                        "the same, p99 vs naive's drains holding the pool",
                        "us", BENCH_INFO, NAN, 0);

  h = bench_alloc(1, sizeof(*h));
  h->loop = &loop;
  h->nworkers = users_pool_size();
  if (h->nworkers > HELD_WORKERS_MAX)
    h->nworkers = HELD_WORKERS_MAX;
  h->window_ms = cfg->users_held_ms;
  h->maxlat = cfg->users_held_stats;
  h->lat = bench_alloc(h->maxlat, sizeof(*h->lat));
  printf(
      "# u7: %zu workers' endless %d us tasks, then uv_fs_stat back to back "
      "for %u ms or %zu round trips\n",
      h->nworkers, HELD_TASK_NS / 1000, h->window_ms, h->maxlat);
  fflush(stdout);
  users_sched_open(cfg, &loop, &sched);
  for (i = 0; i < h->nworkers; i++)
    if (uvs_worker_init(&sched, &workers[i], UVS_POOL) != 0)
      abort();
  users_naive_open(&loop, naive, h->nworkers);
  users_sys_init(sys, &loop, workers, naive);

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 3; k++) {
      v = bench_order(run, 3, k);
      if (held_run(h,
                   v == HELD_UVS     ? &sys[U_UVS]
                   : v == HELD_NAIVE ? &sys[U_NAIVE]
                                     : NULL,
                   &out[v], where[v]) != 0) {
        out[v].rt = users_lat_stats(NULL, 0);
        out[v].n = out[v].runs = NAN;
      }
      bench_note(cfg, where[v], run, out[v].rt.p99, "us round trip p99");
      n[v][run] = out[v].n;
    }
    bench_row_add(p50, out[HELD_UVS].rt.p50, out[HELD_IDLE].rt.p50);
    bench_row_add(p99, out[HELD_UVS].rt.p99, out[HELD_IDLE].rt.p99);
    bench_row_add(max, out[HELD_UVS].rt.max, out[HELD_IDLE].rt.max);
    bench_row_add(p99_naive, out[HELD_UVS].rt.p99, out[HELD_NAIVE].rt.p99);
    naive_p50[run] = out[HELD_NAIVE].rt.p50;
    naive_max[run] = out[HELD_NAIVE].rt.max;
    runs[0][run] = out[HELD_UVS].runs;
    runs[1][run] = out[HELD_NAIVE].runs;
  }
  for (v = 0; v < 3; v++)
    bench_figure(fig_n[v], bench_median(n[v], cfg->runs), "round trips");
  bench_figure("u7.held.p50.naive", bench_median(naive_p50, cfg->runs), "us");
  bench_figure("u7.held.max.naive", bench_median(naive_max, cfg->runs), "us");
  bench_figure("u7.held.task-rate.uvsched", bench_median(runs[0], cfg->runs),
               "runs/s");
  bench_figure("u7.held.task-rate.naive", bench_median(runs[1], cfg->runs),
               "runs/s");

  users_naive_close(naive, h->nworkers);
  users_sched_done(&loop, &sched, "u7");
  bench_free(h->lat);
  bench_free(h);
}
