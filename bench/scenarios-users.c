/* The users' view (scenario u): what a libuv program sees of uvsched when
 * tasks are of mixed lengths, rather than what one empty task costs.
 *
 * Every row is measured for three systems, interleaved in one process and
 * one run (the order of the systems alternates from one round to the
 * next):
 *   - uvsched, as the row says (serial workers, or one width-4 worker);
 *   - raw uv_queue_work, one request per task, in no order at all;
 *   - the naive ordered worker of baselines.c (a mutex-protected FIFO and
 *     one uv_queue_work drain at a time), one per worker or per key.
 * The target column is against naive, the plain way to keep order with
 * libuv alone; the rows against raw say what order costs at all.
 *
 * A task's length is CPU time of its own thread (busy-spin), not wall
 * time: a task preempted by another thread on the same core still costs
 * what it says, so that the load is what the row says on any machine.
 * Latencies are uv_hrtime() from just before the schedule call (or push,
 * or uv_queue_work) to the moment run_cb starts or returns.
 */

#include "users.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

void users_sys_init(usys_t* sys,
                    uv_loop_t* loop,
                    uvs_worker_t* workers,
                    bench_naive_t* naive) {
  int v;

  memset(sys, 0, 3 * sizeof(*sys));
  for (v = 0; v < 3; v++) {
    sys[v].kind = v;
    sys[v].loop = loop;
  }
  sys[U_UVS].workers = workers;
  sys[U_NAIVE].naive = naive;
}


uint64_t users_spin(uint64_t ns) {
  uint64_t start;
  uint64_t now;

  start = bench_thread_cpu();
  do now = bench_thread_cpu();
  while (now - start < ns);
  return now - start;
}


static void utask_exec(utask_t* t) {
  t->t_start = uv_hrtime();
  if (t->spin_ns != 0)
    t->cpu = users_spin(t->spin_ns);
  if (t->body != NULL)
    t->body(t);
  t->t_end = uv_hrtime();
  if (t->lane != NULL)
    bench_lane_hit(t->lane, t->seq);
  else
    bench_count_hit(t->count);
  if (t->then != NULL)
    t->then(t);
}


static void utask_uvs_run(uvs_task_t* task) {
  utask_exec((utask_t*) task);
}


static void utask_node_run(bench_node_t* node) {
  utask_exec((utask_t*) ((char*) node - offsetof(utask_t, node)));
}


static void utask_raw_run(uv_work_t* req) {
  utask_exec((utask_t*) ((char*) req - offsetof(utask_t, req)));
}


void users_submit(usys_t* s, utask_t* t) {
  int err;

  err = 0;
  t->t_start = 0;
  t->t_end = 0;
  t->cpu = 0;
  switch (s->kind) {
    case U_UVS:
      uvs_task_init(&t->task, utask_uvs_run, t->done);
      if (s->wide != NULL)
        uvs_task_set_key(&t->task, (uint64_t) t->idx + 1);
      t->t_call = uv_hrtime();
      err = uvs_schedule(s->wide != NULL ? s->wide : &s->workers[t->idx],
                         &t->task);
      break;
    case U_RAW:
      t->t_call = uv_hrtime();
      err = uv_queue_work(s->loop, &t->req, utask_raw_run, t->after);
      break;
    default:
      t->node.run = utask_node_run;
      t->t_call = uv_hrtime();
      bench_naive_push(&s->naive[t->idx], &t->node);
      break;
  }
  if (err != 0 && s->err == 0)
    s->err = err;
}


int users_resubmit(usys_t* s, utask_t* t) {
  /* A done-less task is the user's again once its run_cb is entered, and
   * may be scheduled again from there (guarantee 4): as it is, with the
   * run_cb and key it has. */
  t->t_call = uv_hrtime();
  if (s->kind == U_UVS)
    return uvs_schedule(s->wide != NULL ? s->wide : &s->workers[t->idx],
                        &t->task);
  if (s->kind == U_NAIVE) {
    bench_naive_push(&s->naive[t->idx], &t->node);
    return 0;
  }
  return UV_EINVAL;
}


unsigned users_pool_size(void) {
  const char* v;
  long n;

  v = getenv("UV_THREADPOOL_SIZE");
  n = v != NULL ? atol(v) : 4;
  if (n < 1)
    n = 1;
  if (n > 1024)
    n = 1024;
  return (unsigned) n;
}


uint64_t users_rusage(void) {
  struct rusage ru;

  if (getrusage(RUSAGE_SELF, &ru) != 0)
    abort();
  return ((uint64_t) ru.ru_utime.tv_sec + (uint64_t) ru.ru_stime.tv_sec) *
             1000000000u +
         ((uint64_t) ru.ru_utime.tv_usec + (uint64_t) ru.ru_stime.tv_usec) *
             1000u;
}


/* ---- p50 / p99 / max rows ------------------------------------------------ */

lat_stats_t users_lat_stats(double* v, size_t n) {
  lat_stats_t s;

  s.p50 = s.p99 = s.max = NAN;
  if (n == 0)
    return s;
  s.p50 = bench_percentile(v, n, 50.0);
  s.p99 = bench_percentile(v, n, 99.0);
  s.max = v[n - 1];
  return s;
}


void users_lat_rows_make(lat_rows_t* r,
                         const char* const* ids,
                         const char* const* titles,
                         const char* unit,
                         double p50_target,
                         double p99_target) {
  double target;
  int i;

  for (i = 0; i < 6; i++) {
    target = i == 0 ? p50_target : i == 1 ? p99_target : NAN;
    r->row[i] = bench_row(ids[i], titles[i], unit,
                          isnan(target) ? BENCH_INFO : BENCH_LE, target, 0);
  }
}


void users_lat_rows_add(lat_rows_t* r,
                        lat_stats_t u,
                        lat_stats_t raw,
                        lat_stats_t naive) {
  bench_row_add(r->row[0], u.p50, naive.p50);
  bench_row_add(r->row[1], u.p99, naive.p99);
  bench_row_add(r->row[2], u.max, naive.max);
  bench_row_add(r->row[3], u.p50, raw.p50);
  bench_row_add(r->row[4], u.p99, raw.p99);
  bench_row_add(r->row[5], u.max, raw.max);
}


void users_sched_open(const bench_cfg_t* cfg,
                      uv_loop_t* loop,
                      uvs_sched_t* sched) {
  uvs_sched_options_t o;

  bench_loop_init(loop);
  memset(&o, 0, sizeof(o));
  o.budget = cfg->users_budget;
#if UVS_VERSION_HEX >= 0x000500
  o.hold_us = cfg->users_hold_us;
#endif
  if (uvs_sched_init(loop, sched, &o) != 0)
    abort();
}


void users_naive_open(uv_loop_t* loop, bench_naive_t* q, size_t n) {
  size_t i;

  for (i = 0; i < n; i++)
    if (bench_naive_init(loop, &q[i]) != 0)
      abort();
}


void users_naive_close(bench_naive_t* q, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) bench_naive_close(&q[i]);
}


void users_sched_done(uv_loop_t* loop, uvs_sched_t* sched, const char* w) {
  uvs_stats_t st;

  uvs_sched_stats(sched, &st);
  if (st.pending != 0) {
    bench_fail("%s: the scheduler counts %llu pending at rest; not closed", w,
               (unsigned long long) st.pending);
    return;
  }
  bench_check_stats(sched, w);
  bench_sched_close(loop, sched, w);
  bench_loop_close(loop, w);
}


/* ---- u1, u2: head-of-line blocking ----------------------------------------
 *
 * A 50 ms task runs on one worker (or key); 1 ms after its schedule call,
 * 32 other workers (or keys) get a 2 us task each. Their start latency is
 * what a server's other connections wait because one is busy. The
 * baselines are the same for both rows (one request per task; one naive
 * queue per worker or key, which is the same thing), so they are measured
 * once per round and compared with both uvsched variants.
 *
 * Each task's latency runs from its own schedule call, so a system whose
 * calls are slow (a uv_queue_work that wakes a pool thread, which may
 * then take the loop thread's core) starts its later tasks' clocks late.
 * The event rows measure from the callback's first schedule call instead,
 * as a server sees it: the request arrived, and its work starts; the
 * callback's length is how long the loop thread was kept from polling.
 */

#define HOL_SHORT_NS 2000
#define HOL_VARIANTS 4 /* uvsched serial, uvsched width 4, raw, naive */

typedef struct hol_s {
  uv_loop_t* loop;
  usys_t* sys;
  utask_t* tasks; /* the long one, then nshort */
  size_t nshort;
  uint64_t long_ns;
  bench_count_t count;
  uv_timer_t timer;
  uint64_t t_event;  /* the callback's first schedule call */
  uint64_t t_cb_end; /* the callback's last one returned */
  uint64_t cpu_wait; /* the callback's wait for 1 ms, loop thread CPU */
  uint64_t cpu_all;  /* the round's process CPU (getrusage) */
  uint64_t cpu_own;  /* ... of which the tasks' spins and cpu_wait */
} hol_t;


static void hol_timer_cb(uv_timer_t* timer) {
  hol_t* h;
  uint64_t c0;
  size_t i;

  h = timer->data;
  /* 1 ms by the real clock: the loop's timer goes by its cached ms. */
  c0 = bench_thread_cpu();
  while (uv_hrtime() < h->tasks[0].t_call + 1000000) {
  }
  h->cpu_wait = bench_thread_cpu() - c0;
  h->t_event = uv_hrtime();
  for (i = 1; i <= h->nshort; i++) users_submit(h->sys, &h->tasks[i]);
  h->t_cb_end = uv_hrtime();
  uv_close((uv_handle_t*) timer, NULL);
}


/* One round; lat[0..nshort) gets the short tasks' start latencies in us,
 * ev[0..nshort) the same from the callback's first schedule call, and
 * *cb the callback's length in us; h->cpu_all and h->cpu_own the round's
 * CPU. Returns 0, or -1 after bench_fail(). */
static int hol_round(hol_t* h,
                     usys_t* sys,
                     double* lat,
                     double* ev,
                     double* cb,
                     const char* where) {
  utask_t* t;
  uint64_t c0;
  size_t i;

  bench_count_reset(&h->count, h->nshort + 1);
  for (i = 0; i <= h->nshort; i++) {
    t = &h->tasks[i];
    memset(t, 0, sizeof(*t));
    t->idx = (uint32_t) i;
    t->spin_ns = i == 0 ? h->long_ns : HOL_SHORT_NS;
    t->count = &h->count;
  }
  h->sys = sys;
  sys->err = 0;
  bench_arm(where);
  if (uv_timer_init(h->loop, &h->timer) != 0)
    abort();
  h->timer.data = h;
  h->cpu_wait = 0;
  c0 = users_rusage();
  users_submit(sys, &h->tasks[0]);
  uv_update_time(h->loop);
  uv_timer_start(&h->timer, hol_timer_cb, 1, 0);
  uv_run(h->loop, UV_RUN_DEFAULT);
  h->cpu_all = users_rusage() - c0;
  h->cpu_own = h->cpu_wait;
  for (i = 0; i <= h->nshort; i++) h->cpu_own += h->tasks[i].cpu;

  if (sys->err != 0) {
    bench_fail("%s: schedule: %s", where, uv_strerror(sys->err));
    return -1;
  }
  if (bench_count_ran(&h->count) != h->nshort + 1) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&h->count), h->nshort + 1);
    return -1;
  }
  for (i = 1; i <= h->nshort; i++) {
    lat[i - 1] = (double) (h->tasks[i].t_start - h->tasks[i].t_call) / 1e3;
    ev[i - 1] = (double) (h->tasks[i].t_start - h->t_event) / 1e3;
  }
  *cb = (double) (h->t_cb_end - h->t_event) / 1e3;
  return 0;
}


static void users_hol(const bench_cfg_t* cfg) {
  static const char* const ids1[6] = {
      "u1.hol-serial.p50",     "u1.hol-serial.p99",
      "u1.hol-serial.max",     "u1.hol-serial.p50-raw",
      "u1.hol-serial.p99-raw", "u1.hol-serial.max-raw"};
  static const char* const titles1[6] = {
      "HOL: 32 serial workers' 2 us tasks while one runs 50 ms, start "
      "p50 vs naive",
      "HOL: 32 serial workers' 2 us tasks while one runs 50 ms, start "
      "p99 vs naive",
      "HOL: 32 serial workers' 2 us tasks while one runs 50 ms, start "
      "max vs naive",
      "HOL: 32 serial workers' 2 us tasks while one runs 50 ms, start "
      "p50 vs raw",
      "HOL: 32 serial workers' 2 us tasks while one runs 50 ms, start "
      "p99 vs raw",
      "HOL: 32 serial workers' 2 us tasks while one runs 50 ms, start "
      "max vs raw"};
  static const char* const ids2[6] = {
      "u2.hol-keyed.p50",     "u2.hol-keyed.p99",     "u2.hol-keyed.max",
      "u2.hol-keyed.p50-raw", "u2.hol-keyed.p99-raw", "u2.hol-keyed.max-raw"};
  static const char* const titles2[6] = {
      "HOL: width-4 worker, 32 keys' 2 us tasks while key 1 runs 50 ms, "
      "start p50 vs naive",
      "HOL: width-4 worker, 32 keys' 2 us tasks while key 1 runs 50 ms, "
      "start p99 vs naive",
      "HOL: width-4 worker, 32 keys' 2 us tasks while key 1 runs 50 ms, "
      "start max vs naive",
      "HOL: width-4 worker, 32 keys' 2 us tasks while key 1 runs 50 ms, "
      "start p50 vs raw",
      "HOL: width-4 worker, 32 keys' 2 us tasks while key 1 runs 50 ms, "
      "start p99 vs raw",
      "HOL: width-4 worker, 32 keys' 2 us tasks while key 1 runs 50 ms, "
      "start max vs raw"};
  static const char* const where[HOL_VARIANTS] = {
      "u1 uvsched serial", "u2 uvsched width 4", "u1/u2 raw", "u1/u2 naive"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t* workers;
  uvs_worker_t wide;
  uvs_worker_options_t o;
  bench_naive_t* naive;
  usys_t sys[HOL_VARIANTS];
  hol_t h;
  lat_rows_t r1;
  lat_rows_t r2;
  bench_row_t* ev1;
  bench_row_t* ev2;
  bench_row_t* ev1_99;
  bench_row_t* ev2_99;
  bench_row_t* cpu;
  bench_row_t* cpu_over;
  double all[HOL_VARIANTS];
  double over[HOL_VARIANTS];
  double over_runs[2][BENCH_MAX_RUNS];
  lat_stats_t st[HOL_VARIANTS];
  lat_stats_t es[HOL_VARIANTS];
  double* lat[HOL_VARIANTS];
  double* ev[HOL_VARIANTS];
  double* cb[HOL_VARIANTS];
  int ok[HOL_VARIANTS];
  size_t n;
  size_t per;
  size_t i;
  unsigned round;
  int run;
  int v;
  int k;

  users_lat_rows_make(&r1, ids1, titles1, "us", 1.25, 1.5);
  users_lat_rows_make(&r2, ids2, titles2, "us", 1.25, 1.5);
  ev1 = bench_row("u1.hol-serial.event-p50",
                  "HOL: 32 serial workers' 2 us tasks, start p50 from the "
                  "callback's first schedule call, vs naive",
                  "us", BENCH_LE, 0.6, 0);
  ev1_99 = bench_row("u1.hol-serial.event-p99",
                     "HOL: 32 serial workers' 2 us tasks, start p99 from the "
                     "callback's first schedule call, vs naive",
                     "us", BENCH_LE, 0.6, 0);
  ev2 = bench_row("u2.hol-keyed.event-p50",
                  "HOL: width-4 worker's 32 keys, start p50 from the "
                  "callback's first schedule call, vs naive",
                  "us", BENCH_LE, 0.6, 0);
  ev2_99 = bench_row("u2.hol-keyed.event-p99",
                     "HOL: width-4 worker's 32 keys, start p99 from the "
                     "callback's first schedule call, vs naive",
                     "us", BENCH_LE, 0.6, 0);
  cpu = bench_row("u1.cpu",
                  "HOL: 32 serial workers, process CPU (getrusage) per task, "
                  "the 50 ms one included, vs naive",
                  "ns", BENCH_LE, 1.1, 0);
  cpu_over = bench_row("u1.cpu-overhead",
                       "HOL: 32 serial workers, process CPU per task beyond "
                       "the tasks' own and the callback's wait, vs naive",
                       "ns", BENCH_INFO, NAN, 0);
  n = cfg->users_short;
  per = (size_t) cfg->users_rounds * n;
  for (v = 0; v < HOL_VARIANTS; v++) {
    lat[v] = bench_alloc(per, sizeof(double));
    ev[v] = bench_alloc(per, sizeof(double));
    cb[v] = bench_alloc((size_t) cfg->runs * cfg->users_rounds, sizeof(double));
  }
  workers = bench_alloc(n + 1, sizeof(*workers));
  naive = bench_alloc(n + 1, sizeof(*naive));
  memset(&h, 0, sizeof(h));
  h.loop = &loop;
  h.tasks = bench_alloc(n + 1, sizeof(*h.tasks));
  h.nshort = n;
  h.long_ns = (uint64_t) cfg->users_long_ms * 1000000;

  users_sched_open(cfg, &loop, &sched);
  for (i = 0; i <= n; i++)
    if (uvs_worker_init(&sched, &workers[i], UVS_POOL) != 0)
      abort();
  memset(&o, 0, sizeof(o));
  o.width = 4;
  if (uvs_worker_init_ex(&sched, &wide, UVS_POOL, &o) != 0)
    abort();
  users_naive_open(&loop, naive, n + 1);
  memset(sys, 0, sizeof(sys));
  for (v = 0; v < HOL_VARIANTS; v++) sys[v].loop = &loop;
  sys[0].kind = U_UVS;
  sys[0].workers = workers;
  sys[1].kind = U_UVS;
  sys[1].wide = &wide;
  sys[2].kind = U_RAW;
  sys[3].kind = U_NAIVE;
  sys[3].naive = naive;

  for (run = 0; run < cfg->runs; run++) {
    for (v = 0; v < HOL_VARIANTS; v++) {
      ok[v] = 1;
      all[v] = 0;
      over[v] = 0;
    }
    for (round = 0; round < cfg->users_rounds; round++) {
      for (k = 0; k < HOL_VARIANTS; k++) {
        v = bench_order(run * (int) cfg->users_rounds + (int) round,
                        HOL_VARIANTS, k);
        if (hol_round(&h, &sys[v], &lat[v][round * n], &ev[v][round * n],
                      &cb[v][(size_t) run * cfg->users_rounds + round],
                      where[v]) != 0)
          ok[v] = 0;
        all[v] += (double) h.cpu_all;
        over[v] += (double) h.cpu_all - (double) h.cpu_own;
      }
    }
    for (v = 0; v < HOL_VARIANTS; v++) {
      st[v] = users_lat_stats(lat[v], ok[v] ? per : 0);
      es[v] = users_lat_stats(ev[v], ok[v] ? per : 0);
      /* Per task: the rounds' CPU over their tasks, the long ones too. */
      all[v] = ok[v] ? all[v] / (double) (cfg->users_rounds * (n + 1)) : NAN;
      over[v] = ok[v] ? over[v] / (double) (cfg->users_rounds * (n + 1)) : NAN;
      bench_note(cfg, where[v], run, st[v].p99, "us start p99");
      bench_note(cfg, where[v], run, over[v], "ns CPU overhead per task");
    }
    users_lat_rows_add(&r1, st[0], st[2], st[3]);
    users_lat_rows_add(&r2, st[1], st[2], st[3]);
    bench_row_add(ev1, es[0].p50, es[3].p50);
    bench_row_add(ev1_99, es[0].p99, es[3].p99);
    bench_row_add(ev2, es[1].p50, es[3].p50);
    bench_row_add(ev2_99, es[1].p99, es[3].p99);
    bench_row_add(cpu, all[0], all[3]);
    bench_row_add(cpu_over, over[0], over[3]);
    over_runs[0][run] = over[1];
    over_runs[1][run] = over[2];
  }
  bench_figure("u2.cpu-overhead.uvsched", bench_median(over_runs[0], cfg->runs),
               "ns");
  bench_figure("u1.cpu-overhead.raw", bench_median(over_runs[1], cfg->runs),
               "ns");
  /* How long the scheduling callback kept the loop thread. */
  bench_figure("u1.callback.p50.uvsched",
               bench_median(cb[0], (size_t) cfg->runs * cfg->users_rounds),
               "us");
  bench_figure("u1.callback.p50.raw",
               bench_median(cb[2], (size_t) cfg->runs * cfg->users_rounds),
               "us");
  bench_figure("u1.callback.p50.naive",
               bench_median(cb[3], (size_t) cfg->runs * cfg->users_rounds),
               "us");

  users_naive_close(naive, n + 1);
  users_sched_done(&loop, &sched, "u1/u2");
  bench_free(h.tasks);
  bench_free(naive);
  bench_free(workers);
  for (v = 0; v < HOL_VARIANTS; v++) {
    bench_free(lat[v]);
    bench_free(ev[v]);
    bench_free(cb[v]);
  }
}


/* ---- u3: a server's mix at 60% utilisation --------------------------------
 *
 * 64 serial workers; a producer thread wakes the loop at each arrival
 * time (Poisson arrivals), as a socket's readiness would, and the loop
 * schedules every arrival that is due, as a read callback would. 90% of
 * the tasks spin 5 us, 10% spin 2 ms, each on a worker drawn at random.
 * The rate makes the pool's load 60% of min(CPUs, pool threads). The
 * figure is a short task's sojourn from the schedule call to the end of
 * its run_cb: done_cb would not compare, as the naive worker has no
 * per-task callback on the loop. "Backlog gone" is the time from the last
 * arrival's schedule call to the last run's end. All three systems get
 * the same arrivals (times, workers, lengths) in a repetition.
 */

#define MIX_WORKERS 64
#define MIX_SHORT_NS 5000
#define MIX_LONG_NS 2000000
#define MIX_LONG_PER_10 1
#define MIX_UTIL 0.6

typedef struct mix_s {
  uv_loop_t* loop;
  usys_t* sys;
  utask_t* tasks;
  uint64_t* off; /* arrival i is due at t0 + off[i] ns */
  size_t n;
  size_t next; /* loop thread: the next arrival to schedule */
  uint64_t t0;
  int64_t mono_skew; /* CLOCK_MONOTONIC minus uv_hrtime() */
  bench_lane_t lanes[MIX_WORKERS];
  bench_count_t count;
  uv_async_t poke;
  bench_thread_t producer;
} mix_t;


/* Sleeps until each arrival's time and wakes the loop for it. */
static void mix_producer(void* arg) {
  struct timespec ts;
  mix_t* m;
  uint64_t at;
  size_t i;

  m = arg;
  for (i = 0; i < m->n; i++) {
    at = (uint64_t) ((int64_t) (m->t0 + m->off[i]) + m->mono_skew);
    ts.tv_sec = (time_t) (at / 1000000000);
    ts.tv_nsec = (long) (at % 1000000000);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR) {
    }
    uv_async_send(&m->poke);
  }
}


static void mix_poke(uv_async_t* handle) {
  mix_t* m;
  uint64_t now;

  m = handle->data;
  if (m->next == m->n)
    return;
  now = uv_hrtime();
  while (m->next < m->n && m->t0 + m->off[m->next] <= now)
    users_submit(m->sys, &m->tasks[m->next++]);
  if (m->next == m->n) {
    /* The producer has only pokes for arrivals already due left: wait for
     * it, so that no send can come after the close. */
    bench_thread_join(&m->producer);
    uv_close((uv_handle_t*) handle, NULL);
  }
}


/* Draws a repetition's arrivals over window_ns at rate (per ns); sets each
 * task's worker, length and place in its worker's order. */
static void mix_arrivals(
    mix_t* m, size_t cap, double rate, uint64_t window_ns, uint64_t seed) {
  uint64_t per[MIX_WORKERS];
  uint64_t st;
  double t;
  double u;
  utask_t* task;

  memset(per, 0, sizeof(per));
  st = seed | 1;
  t = 0;
  for (m->n = 0; m->n < cap; m->n++) {
    u = (double) ((bench_rand(&st) >> 11) + 1) / 9007199254740992.0;
    t += -log(u) / rate;
    if (t >= (double) window_ns)
      break;
    m->off[m->n] = (uint64_t) t;
    task = &m->tasks[m->n];
    memset(task, 0, sizeof(*task));
    task->idx = (uint32_t) (bench_rand(&st) % MIX_WORKERS);
    task->kind = bench_rand(&st) % 10 < MIX_LONG_PER_10;
    task->spin_ns = task->kind ? MIX_LONG_NS : MIX_SHORT_NS;
    task->seq = per[task->idx]++;
  }
}


typedef struct mix_out_s {
  /* Short tasks, us: schedule call to run_cb's end and to its start, and
   * the same from the tick (the arrival's due time). */
  lat_stats_t sojourn;
  lat_stats_t sojourn_tick;
  lat_stats_t start;
  lat_stats_t start_tick;
  double backlog_ms;
  double cpu;      /* process CPU per task (getrusage), ns */
  double cpu_over; /* ... beyond the tasks' own spins */
} mix_out_t;


enum { MIX_SOJOURN, MIX_SOJOURN_TICK, MIX_START, MIX_START_TICK };

/* One latency of the short tasks, in us. */
static lat_stats_t mix_lat(const mix_t* m, int which, double* v) {
  const utask_t* t;
  uint64_t from;
  uint64_t to;
  size_t i;
  size_t k;

  for (i = 0, k = 0; i < m->n; i++) {
    t = &m->tasks[i];
    if (t->kind)
      continue;
    from = which == MIX_SOJOURN || which == MIX_START ? t->t_call
                                                      : m->t0 + m->off[i];
    to = which == MIX_SOJOURN || which == MIX_SOJOURN_TICK ? t->t_end
                                                           : t->t_start;
    v[k++] = (double) (to - from) / 1e3;
  }
  return users_lat_stats(v, k);
}


/* One system's run of the arrivals; scratch holds n values. Returns 0, or
 * -1 after bench_fail(). */
static int mix_run(
    mix_t* m, usys_t* sys, double* scratch, mix_out_t* out, const char* where) {
  struct timespec ts;
  utask_t* t;
  uint64_t last;
  uint64_t c0;
  uint64_t cpu;
  uint64_t own;
  size_t i;

  if (m->n == 0) {
    bench_fail("%s: no arrivals in the window", where);
    return -1;
  }
  bench_count_reset(&m->count, m->n);
  bench_lanes_reset(m->lanes, MIX_WORKERS, &m->count);
  for (i = 0; i < m->n; i++) {
    t = &m->tasks[i];
    t->lane = sys->kind == U_RAW ? NULL : &m->lanes[t->idx];
    t->count = &m->count;
  }
  m->sys = sys;
  m->next = 0;
  sys->err = 0;
  if (uv_async_init(m->loop, &m->poke, mix_poke) != 0)
    abort();
  m->poke.data = m;
  bench_arm(where);
  clock_gettime(CLOCK_MONOTONIC, &ts);
  m->t0 = uv_hrtime();
  m->mono_skew =
      ((int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec) - (int64_t) m->t0;
  m->t0 += 1000000; /* the first arrival after the loop is running */
  c0 = users_rusage();
  bench_thread_start(&m->producer, mix_producer, m);
  uv_run(m->loop, UV_RUN_DEFAULT);
  cpu = users_rusage() - c0;

  if (sys->err != 0) {
    bench_fail("%s: schedule: %s", where, uv_strerror(sys->err));
    return -1;
  }
  if (bench_count_ran(&m->count) != m->n) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&m->count), m->n);
    return -1;
  }
  for (i = 0; sys->kind != U_RAW && i < MIX_WORKERS; i++) {
    if (m->lanes[i].bad != 0) {
      bench_fail("%s: worker %zu ran %llu tasks out of order", where, i,
                 (unsigned long long) m->lanes[i].bad);
      return -1;
    }
  }
  last = 0;
  own = 0;
  for (i = 0; i < m->n; i++) {
    t = &m->tasks[i];
    if (t->t_end > last)
      last = t->t_end;
    own += t->cpu;
  }
  out->sojourn = mix_lat(m, MIX_SOJOURN, scratch);
  out->sojourn_tick = mix_lat(m, MIX_SOJOURN_TICK, scratch);
  out->start = mix_lat(m, MIX_START, scratch);
  out->start_tick = mix_lat(m, MIX_START_TICK, scratch);
  out->backlog_ms = (double) (last - m->tasks[m->n - 1].t_call) / 1e6;
  out->cpu = (double) cpu / (double) m->n;
  out->cpu_over = ((double) cpu - (double) own) / (double) m->n;
  return 0;
}


static void users_mix(const bench_cfg_t* cfg) {
  static const char* const ids[6] = {"u3.mix.p50",     "u3.mix.p99",
                                     "u3.mix.max",     "u3.mix.p50-raw",
                                     "u3.mix.p99-raw", "u3.mix.max-raw"};
  static const char* const titles[6] = {
      "mix 60%, 64 serial workers: 5 us tasks' schedule to run end, p50 "
      "vs naive",
      "mix 60%, 64 serial workers: 5 us tasks' schedule to run end, p99 "
      "vs naive",
      "mix 60%, 64 serial workers: 5 us tasks' schedule to run end, max "
      "vs naive",
      "mix 60%, 64 serial workers: 5 us tasks' schedule to run end, p50 "
      "vs raw",
      "mix 60%, 64 serial workers: 5 us tasks' schedule to run end, p99 "
      "vs raw",
      "mix 60%, 64 serial workers: 5 us tasks' schedule to run end, max "
      "vs raw"};
  static const char* const where[3] = {"u3 uvsched", "u3 raw", "u3 naive"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t workers[MIX_WORKERS];
  bench_naive_t naive[MIX_WORKERS];
  usys_t sys[3];
  mix_t* m;
  mix_out_t out[3];
  lat_rows_t rows;
  bench_row_t* backlog;
  bench_row_t* backlog_raw;
  bench_row_t* tick[2];
  bench_row_t* start[2];
  bench_row_t* start_tick[2];
  bench_row_t* cpu;
  bench_row_t* cpu_over;
  double* scratch;
  double over_raw[BENCH_MAX_RUNS];
  double arrivals[BENCH_MAX_RUNS];
  double naive_backlog[BENCH_MAX_RUNS];
  double rate;
  uint64_t window;
  long ncpu;
  unsigned cap;
  size_t max_n;
  size_t i;
  int run;
  int k;
  int v;

  users_lat_rows_make(&rows, ids, titles, "us", 1.0, 1.1);
  tick[0] = bench_row("u3.mix.tick-p50",
                      "mix 60%: 5 us tasks' arrival due to run end, p50 vs "
                      "naive",
                      "us", BENCH_LE, 1.0, 0);
  tick[1] = bench_row("u3.mix.tick-p99",
                      "mix 60%: 5 us tasks' arrival due to run end, p99 vs "
                      "naive",
                      "us", BENCH_LE, 1.1, 0);
  start[0] = bench_row("u3.mix.start-p50",
                       "mix 60%: 5 us tasks' schedule call to run_cb, p50 vs "
                       "naive",
                       "us", BENCH_LE, 1.1, 0);
  start[1] = bench_row("u3.mix.start-p99",
                       "mix 60%: 5 us tasks' schedule call to run_cb, p99 vs "
                       "naive",
                       "us", BENCH_INFO, NAN, 0);
  start_tick[0] = bench_row("u3.mix.start-tick-p50",
                            "mix 60%: 5 us tasks' arrival due to run_cb, p50 "
                            "vs naive",
                            "us", BENCH_INFO, NAN, 0);
  start_tick[1] = bench_row("u3.mix.start-tick-p99",
                            "mix 60%: 5 us tasks' arrival due to run_cb, p99 "
                            "vs naive",
                            "us", BENCH_INFO, NAN, 0);
  cpu =
      bench_row("u3.cpu", "mix 60%: process CPU (getrusage) per task, vs naive",
                "ns", BENCH_LE, 1.1, 0);
  cpu_over = bench_row("u3.cpu-overhead",
                       "mix 60%: process CPU per task beyond the tasks' own, "
                       "vs naive",
                       "ns", BENCH_INFO, NAN, 0);
  backlog = bench_row("u3.mix.backlog",
                      "mix 60%: backlog gone, last arrival to last run end, "
                      "vs naive",
                      "ms", BENCH_INFO, NAN, 0);
  backlog_raw = bench_row("u3.mix.backlog-raw",
                          "mix 60%: backlog gone, last arrival to last run "
                          "end, vs raw",
                          "ms", BENCH_INFO, NAN, 0);

  /* The pool's capacity: its threads, but no more than the CPUs. */
  ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  cap = users_pool_size();
  if (ncpu > 0 && (unsigned long) ncpu < cap)
    cap = (unsigned) ncpu;
  rate = MIX_UTIL * cap /
         (0.1 * MIX_LONG_PER_10 * MIX_LONG_NS +
          (1.0 - 0.1 * MIX_LONG_PER_10) * MIX_SHORT_NS);
  window = (uint64_t) cfg->users_mix_ms * 1000000;
  max_n = (size_t) (2.0 * rate * (double) window) + 64;
  printf(
      "# u3: capacity %u = min(cpus, pool threads), %.0f arrivals/s for "
      "%u ms per system; sojourn = schedule call to run_cb's end\n",
      cap, rate * 1e9, cfg->users_mix_ms);
  fflush(stdout);

  m = bench_alloc(1, sizeof(*m));
  m->loop = &loop;
  m->tasks = bench_alloc(max_n, sizeof(*m->tasks));
  m->off = bench_alloc(max_n, sizeof(*m->off));
  scratch = bench_alloc(max_n, sizeof(*scratch));
  users_sched_open(cfg, &loop, &sched);
  for (i = 0; i < MIX_WORKERS; i++)
    if (uvs_worker_init(&sched, &workers[i], UVS_POOL) != 0)
      abort();
  users_naive_open(&loop, naive, MIX_WORKERS);
  users_sys_init(sys, &loop, workers, naive);

  for (run = 0; run < cfg->runs; run++) {
    mix_arrivals(m, max_n, rate, window, 0x75e25 + (uint64_t) run);
    arrivals[run] = (double) m->n;
    for (k = 0; k < 3; k++) {
      v = bench_order(run, 3, k);
      if (mix_run(m, &sys[v], scratch, &out[v], where[v]) != 0) {
        out[v].sojourn = users_lat_stats(NULL, 0);
        out[v].sojourn_tick = out[v].start = out[v].start_tick = out[v].sojourn;
        out[v].backlog_ms = out[v].cpu = out[v].cpu_over = NAN;
      }
      bench_note(cfg, where[v], run, out[v].sojourn.p99, "us sojourn p99");
      bench_note(cfg, where[v], run, out[v].cpu_over,
                 "ns CPU overhead per task");
    }
    users_lat_rows_add(&rows, out[U_UVS].sojourn, out[U_RAW].sojourn,
                       out[U_NAIVE].sojourn);
    bench_row_add(tick[0], out[U_UVS].sojourn_tick.p50,
                  out[U_NAIVE].sojourn_tick.p50);
    bench_row_add(tick[1], out[U_UVS].sojourn_tick.p99,
                  out[U_NAIVE].sojourn_tick.p99);
    bench_row_add(start[0], out[U_UVS].start.p50, out[U_NAIVE].start.p50);
    bench_row_add(start[1], out[U_UVS].start.p99, out[U_NAIVE].start.p99);
    bench_row_add(start_tick[0], out[U_UVS].start_tick.p50,
                  out[U_NAIVE].start_tick.p50);
    bench_row_add(start_tick[1], out[U_UVS].start_tick.p99,
                  out[U_NAIVE].start_tick.p99);
    bench_row_add(cpu, out[U_UVS].cpu, out[U_NAIVE].cpu);
    bench_row_add(cpu_over, out[U_UVS].cpu_over, out[U_NAIVE].cpu_over);
    over_raw[run] = out[U_RAW].cpu_over;
    bench_row_add(backlog, out[U_UVS].backlog_ms, out[U_NAIVE].backlog_ms);
    bench_row_add(backlog_raw, out[U_UVS].backlog_ms, out[U_RAW].backlog_ms);
    naive_backlog[run] = out[U_NAIVE].backlog_ms;
  }
  bench_figure("u3.arrivals", bench_median(arrivals, cfg->runs),
               "tasks/system");
  bench_figure("u3.cpu-overhead.raw", bench_median(over_raw, cfg->runs), "ns");
  /* At 60% a backlog clears within a few long tasks. One that takes ten
   * times longer even for naive means the machine did not give the pool
   * the CPUs the rate assumes (other work on them): the rows then
   * compare queues of an overloaded pool, not a server at 60%. */
  if (bench_median(naive_backlog, cfg->runs) > 10.0 * MIX_LONG_NS / 1e6)
    printf(
        "# u3: naive's backlog took %.0f ms to clear: the pool did not get "
        "%u CPUs, and the u3 rows are of an overloaded pool\n",
        bench_median(naive_backlog, cfg->runs), cap);

  users_naive_close(naive, MIX_WORKERS);
  users_sched_done(&loop, &sched, "u3");
  bench_free(scratch);
  bench_free(m->off);
  bench_free(m->tasks);
  bench_free(m);
}


/* ---- u4: a burst, then a task that waits for another worker's ----------
 *
 * Worker A gets 1,000 tiny tasks and then W; worker B then gets S. W waits
 * (a condition variable, with a deadline) until S has run: a request
 * handler that needs another connection's answer. The next cycle starts
 * when W and S are handed back (uvsched: done_cb; raw: after_work_cb of
 * every request; naive: W and S ran, told through an async handle), and
 * the row is the time for all the cycles. A wait that reaches its
 * deadline gives up and counts; a system that gives up too often is
 * stopped, so that the row can't hang, and its time is projected from the
 * cycles it did to all of them.
 *
 * u8 is the same with W spinning on a flag that S sets (still with the
 * deadline), and reports S's start latency (its schedule call, made after
 * the burst's, to its run_cb) beside the time for all the cycles: how
 * long work for worker B waits behind work filed just before it for A.
 */

#define DEP_MAX_TIMEOUTS 4

typedef struct dep_s {
  uv_loop_t* loop;
  usys_t* sys;
  utask_t* tasks; /* burst tiny tasks, then W, then S */
  size_t burst;
  size_t cycles;
  size_t cycle;   /* loop thread: the cycle running */
  size_t handed;  /* loop thread: its hand-backs so far */
  size_t want;    /* ... and how many end it */
  unsigned ended; /* atomic: naive: W and S of this cycle ran */
  uint64_t wait_ns;
  uv_mutex_t lock;
  uv_cond_t cond;
  uint64_t gen;      /* under lock: the last cycle whose S ran, + 1 */
  int spin;          /* u8: W spins on flag instead of waiting on cond */
  uint64_t flag;     /* atomic: u8's gen */
  double* ylat;      /* per cycle: S's start latency, us */
  unsigned timeouts; /* atomic */
  int stopped;
  uv_async_t next; /* naive: W and S ran */
  bench_lane_t lanes[2];
  bench_count_t count;
  uint64_t t0;
  uint64_t t_end;
} dep_t;


/* W: waits for this cycle's S, or the deadline. */
static void dep_wait(utask_t* t) {
  dep_t* d;
  uint64_t deadline;
  uint64_t now;

  d = t->ctx;
  deadline = uv_hrtime() + d->wait_ns;
  if (d->spin) {
    while (__atomic_load_n(&d->flag, __ATOMIC_ACQUIRE) < t->arg) {
      if (uv_hrtime() >= deadline) {
        __atomic_add_fetch(&d->timeouts, 1, __ATOMIC_RELAXED);
        break;
      }
    }
    return;
  }
  uv_mutex_lock(&d->lock);
  while (d->gen < t->arg) {
    now = uv_hrtime();
    if (now >= deadline) {
      __atomic_add_fetch(&d->timeouts, 1, __ATOMIC_RELAXED);
      break;
    }
    uv_cond_timedwait(&d->cond, &d->lock, deadline - now);
  }
  uv_mutex_unlock(&d->lock);
}


/* S: lets this cycle's W go on. */
static void dep_signal(utask_t* t) {
  dep_t* d;

  d = t->ctx;
  if (d->spin) {
    __atomic_store_n(&d->flag, t->arg, __ATOMIC_RELEASE);
    return;
  }
  uv_mutex_lock(&d->lock);
  if (d->gen < t->arg)
    d->gen = t->arg;
  uv_cond_signal(&d->cond);
  uv_mutex_unlock(&d->lock);
}


static void dep_start(dep_t* d);


/* Loop thread: one more hand-back of this cycle. */
static void dep_handed(dep_t* d) {
  utask_t* s;

  if (++d->handed < d->want)
    return;
  s = &d->tasks[d->burst + 1];
  d->ylat[d->cycle] = (double) (s->t_start - s->t_call) / 1e3;
  d->handed = 0;
  d->cycle++;
  if (__atomic_load_n(&d->timeouts, __ATOMIC_RELAXED) > DEP_MAX_TIMEOUTS)
    d->stopped = 1;
  if (d->cycle == d->cycles || d->stopped) {
    d->t_end = uv_hrtime();
    uv_close((uv_handle_t*) &d->next, NULL);
    return;
  }
  dep_start(d);
}


static void dep_uvs_done(uvs_task_t* task, int status) {
  if (status != 0)
    bench_fail("u4: a task handed back with %s", uv_strerror(status));
  dep_handed(((utask_t*) task)->ctx);
}


static void dep_raw_after(uv_work_t* req, int status) {
  if (status != 0)
    bench_fail("u4: a request completed with %s", uv_strerror(status));
  dep_handed(((utask_t*) ((char*) req - offsetof(utask_t, req)))->ctx);
}


/* Naive: W and S each end here, after their run is counted. */
static void dep_naive_then(utask_t* t) {
  dep_t* d;

  d = t->ctx;
  if (__atomic_add_fetch(&d->ended, 1, __ATOMIC_ACQ_REL) == 2)
    uv_async_send(&d->next);
}


static void dep_next_cb(uv_async_t* handle) {
  dep_t* d;

  /* Acquire what both runs wrote before their ends were counted: the
   * wake-up alone is no such edge (TSan can't see one inside libuv, and
   * coalesced sends write nothing), and dep_start() reuses the tasks. */
  d = handle->data;
  if (__atomic_load_n(&d->ended, __ATOMIC_ACQUIRE) != 2)
    bench_fail("u4: woken with %u of 2 runs ended",
               __atomic_load_n(&d->ended, __ATOMIC_RELAXED));
  dep_handed(d);
}


static void dep_start(dep_t* d) {
  utask_t* t;
  size_t k;
  size_t j;
  int ordered;

  k = d->cycle;
  ordered = d->sys->kind != U_RAW;
  __atomic_store_n(&d->ended, 0, __ATOMIC_RELAXED);
  for (j = 0; j < d->burst + 2; j++) {
    t = &d->tasks[j];
    t->idx = j <= d->burst ? 0 : 1;
    t->lane = ordered ? &d->lanes[t->idx] : NULL;
    t->seq = j <= d->burst ? k * (d->burst + 1) + j : k;
    t->arg = k + 1;
    users_submit(d->sys, t);
  }
}


/* One system's cycles; returns the time in ms (projected if it was
 * stopped), its waits that reached the deadline and S's start latency over
 * the cycles done, or NAN after bench_fail(). */
static double dep_run(dep_t* d,
                      usys_t* sys,
                      double* timeouts,
                      lat_stats_t* y,
                      const char* where) {
  utask_t* t;
  size_t j;
  size_t want_a;

  *y = users_lat_stats(NULL, 0);
  d->sys = sys;
  sys->err = 0;
  d->cycle = 0;
  d->handed = 0;
  d->stopped = 0;
  d->timeouts = 0;
  d->gen = 0;
  d->flag = 0;
  d->want = sys->kind == U_UVS ? 2 : sys->kind == U_RAW ? d->burst + 2 : 1;
  bench_count_reset(&d->count, d->cycles * (d->burst + 2));
  bench_lanes_reset(d->lanes, 2, &d->count);
  for (j = 0; j < d->burst + 2; j++) {
    t = &d->tasks[j];
    memset(t, 0, sizeof(*t));
    t->ctx = d;
    t->count = &d->count;
    if (j == d->burst)
      t->body = dep_wait;
    else if (j == d->burst + 1)
      t->body = dep_signal;
    /* Tiny tasks go back to the user as they start (no done_cb), as
     * naive's do; W and S say when the cycle is over. */
    if (sys->kind == U_UVS && j >= d->burst)
      t->done = dep_uvs_done;
    if (sys->kind == U_RAW)
      t->after = dep_raw_after;
    if (sys->kind == U_NAIVE && j >= d->burst)
      t->then = dep_naive_then;
  }
  if (uv_async_init(d->loop, &d->next, dep_next_cb) != 0)
    abort();
  d->next.data = d;
  bench_arm(where);
  d->t0 = uv_hrtime();
  dep_start(d);
  uv_run(d->loop, UV_RUN_DEFAULT);

  *timeouts = (double) d->timeouts;
  if (sys->err != 0) {
    bench_fail("%s: schedule: %s", where, uv_strerror(sys->err));
    return NAN;
  }
  *y = users_lat_stats(d->ylat, d->cycle);
  if (d->stopped) {
    /* Not a figure to trust, but a finite one that says how far off it
     * is: the median of the runs must stay a number. */
    printf(
        "# %s: stopped after %zu of %zu cycles, %u waits reached the %llu "
        "ms deadline; time projected to all cycles\n",
        where, d->cycle, d->cycles, d->timeouts,
        (unsigned long long) (d->wait_ns / 1000000));
    return (double) (d->t_end - d->t0) / 1e6 * (double) d->cycles /
           (double) d->cycle;
  }
  if (bench_count_ran(&d->count) != d->cycles * (d->burst + 2)) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&d->count),
               d->cycles * (d->burst + 2));
    return NAN;
  }
  want_a = d->cycles * (d->burst + 1);
  if (sys->kind != U_RAW &&
      (d->lanes[0].bad != 0 || d->lanes[0].next != want_a ||
       d->lanes[1].bad != 0 || d->lanes[1].next != d->cycles)) {
    bench_fail("%s: out of order: A %llu of %zu (%llu bad), B %llu (%llu bad)",
               where, (unsigned long long) d->lanes[0].next, want_a,
               (unsigned long long) d->lanes[0].bad,
               (unsigned long long) d->lanes[1].next,
               (unsigned long long) d->lanes[1].bad);
    return NAN;
  }
  return (double) (d->t_end - d->t0) / 1e6;
}


/* u4 (W waits on a condition variable) or, with spin, u8 (W spins). */
static void users_dep(const bench_cfg_t* cfg, int spin) {
  static const char* const where[2][3] = {{"u4 uvsched", "u4 raw", "u4 naive"},
                                          {"u8 uvsched", "u8 raw", "u8 naive"}};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t workers[2];
  bench_naive_t naive[2];
  usys_t sys[3];
  dep_t* d;
  bench_row_t* total;
  bench_row_t* total_raw;
  bench_row_t* hits;
  bench_row_t* y50;
  bench_row_t* y99;
  lat_stats_t y[3];
  double ms[3];
  double to[3];
  double to_raw[BENCH_MAX_RUNS];
  double to_naive[BENCH_MAX_RUNS];
  double y_uvs[BENCH_MAX_RUNS];
  double y_naive[BENCH_MAX_RUNS];
  int run;
  int k;
  int v;

  y50 = y99 = NULL;
  if (!spin) {
    total = bench_row("u4.dep.total",
                      "200 x (1,000 tiny tasks, then a wait for another "
                      "worker's task), vs naive",
                      "ms", BENCH_LE, 0.9, 0);
    total_raw = bench_row("u4.dep.total-raw",
                          "200 x (1,000 tiny tasks, then a wait for another "
                          "worker's task), vs raw",
                          "ms", BENCH_INFO, NAN, 0);
    hits = bench_row("u4.dep.deadline-hits",
                     "u4's waits that reached their deadline, worst run",
                     "waits", BENCH_LE, 0.0, 1);
  } else {
    y50 = bench_row("u8.flag.y-start-p50",
                    "1,000 tiny tasks on X, then X spins until Y's task "
                    "runs: Y's start p50, vs naive",
                    "us", BENCH_LE, 2.0, 0);
    y99 = bench_row("u8.flag.y-start-p99", "the same, Y's start p99, vs naive",
                    "us", BENCH_INFO, NAN, 0);
    total = bench_row("u8.flag.total",
                      "200 x (1,000 tiny tasks on X, then X spins until Y's "
                      "task runs), vs naive",
                      "ms", BENCH_INFO, NAN, 0);
    total_raw = bench_row("u8.flag.total-raw",
                          "200 x (1,000 tiny tasks on X, then X spins until "
                          "Y's task runs), vs raw",
                          "ms", BENCH_INFO, NAN, 0);
    hits = bench_row("u8.flag.deadline-hits",
                     "u8's spins that reached their deadline, worst run",
                     "waits", BENCH_LE, 0.0, 1);
  }
  bench_row_agg(hits, BENCH_MAX);

  d = bench_alloc(1, sizeof(*d));
  d->loop = &loop;
  d->spin = spin;
  d->burst = cfg->users_burst;
  d->cycles = cfg->users_cycles;
  d->wait_ns = (uint64_t) cfg->users_wait_ms * 1000000;
  d->tasks = bench_alloc(d->burst + 2, sizeof(*d->tasks));
  d->ylat = bench_alloc(d->cycles, sizeof(*d->ylat));
  if (uv_mutex_init(&d->lock) != 0 || uv_cond_init(&d->cond) != 0)
    abort();
  users_sched_open(cfg, &loop, &sched);
  if (uvs_worker_init(&sched, &workers[0], UVS_POOL) != 0 ||
      uvs_worker_init(&sched, &workers[1], UVS_POOL) != 0)
    abort();
  users_naive_open(&loop, naive, 2);
  users_sys_init(sys, &loop, workers, naive);

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < 3; k++) {
      v = bench_order(run, 3, k);
      ms[v] = dep_run(d, &sys[v], &to[v], &y[v], where[spin][v]);
      bench_note(cfg, where[spin][v], run, ms[v], "ms");
      bench_note(cfg, where[spin][v], run, y[v].p50, "us Y start p50");
    }
    bench_row_add(total, ms[U_UVS], ms[U_NAIVE]);
    bench_row_add(total_raw, ms[U_UVS], ms[U_RAW]);
    bench_row_add(hits, to[U_UVS], NAN);
    if (spin) {
      bench_row_add(y50, y[U_UVS].p50, y[U_NAIVE].p50);
      bench_row_add(y99, y[U_UVS].p99, y[U_NAIVE].p99);
    }
    to_raw[run] = to[U_RAW];
    to_naive[run] = to[U_NAIVE];
    y_uvs[run] = y[U_UVS].p50;
    y_naive[run] = y[U_NAIVE].p50;
  }
  bench_figure(spin ? "u8.flag.deadline-hits.raw" : "u4.dep.deadline-hits.raw",
               bench_median(to_raw, cfg->runs), "waits");
  bench_figure(
      spin ? "u8.flag.deadline-hits.naive" : "u4.dep.deadline-hits.naive",
      bench_median(to_naive, cfg->runs), "waits");
  if (!spin) {
    /* S's start behind the burst, as u8 reports it. */
    bench_figure("u4.dep.y-start-p50.uvsched", bench_median(y_uvs, cfg->runs),
                 "us");
    bench_figure("u4.dep.y-start-p50.naive", bench_median(y_naive, cfg->runs),
                 "us");
  }

  users_naive_close(naive, 2);
  users_sched_done(&loop, &sched, spin ? "u8" : "u4");
  uv_cond_destroy(&d->cond);
  uv_mutex_destroy(&d->lock);
  bench_free(d->ylat);
  bench_free(d->tasks);
  bench_free(d);
}


/* ---- u5: keyed throughput ------------------------------------------------
 *
 * 100 keys x 200 tasks of 7 us on one width-4 worker, scheduled from the
 * loop as task r of every key, then task r + 1, ... The target is against
 * what a libuv program does for per-key order without a queue: one
 * uv_queue_work chain per key, each task queued from the after_work_cb of
 * the one before. Raw (no order) and naive (one queue per key) are
 * reported beside it. Tasks per second, first schedule to last run.
 */

#define KEYED_TASK_NS 7000
#define KEYED_SYSTEMS 4 /* uvsched, raw, naive, chained */

typedef struct keyrate_s {
  uv_loop_t* loop;
  usys_t* sys;
  utask_t* tasks; /* task r of key k at r * keys + k */
  bench_lane_t* lanes;
  size_t keys;
  size_t per;
  bench_count_t count;
} keyrate_t;


/* Chained: the key's next task, from the loop thread. */
static void keyrate_chain(uv_work_t* req, int status) {
  utask_t* t;
  keyrate_t* kr;

  if (status != 0)
    bench_fail("u5 chained: a request completed with %s", uv_strerror(status));
  t = (utask_t*) ((char*) req - offsetof(utask_t, req));
  kr = t->ctx;
  if (t->seq + 1 < kr->per)
    users_submit(kr->sys, &kr->tasks[(t->seq + 1) * kr->keys + t->idx]);
}


/* Returns tasks per second, or NAN after bench_fail(). */
static double keyrate_run(keyrate_t* kr,
                          usys_t* sys,
                          int chained,
                          const char* where) {
  utask_t* t;
  size_t total;
  size_t i;
  uint64_t t0;

  total = kr->keys * kr->per;
  bench_count_reset(&kr->count, total);
  bench_lanes_reset(kr->lanes, kr->keys, &kr->count);
  for (i = 0; i < total; i++) {
    t = &kr->tasks[i];
    memset(t, 0, sizeof(*t));
    t->idx = (uint32_t) (i % kr->keys);
    t->seq = i / kr->keys;
    t->spin_ns = KEYED_TASK_NS;
    t->ctx = kr;
    t->count = &kr->count;
    if (sys->kind != U_RAW || chained)
      t->lane = &kr->lanes[t->idx];
    if (chained)
      t->after = keyrate_chain;
  }
  kr->sys = sys;
  sys->err = 0;
  bench_arm(where);
  t0 = uv_hrtime();
  for (i = 0; i < (chained ? kr->keys : total); i++)
    users_submit(sys, &kr->tasks[i]);
  uv_run(kr->loop, UV_RUN_DEFAULT);

  if (sys->err != 0) {
    bench_fail("%s: schedule: %s", where, uv_strerror(sys->err));
    return NAN;
  }
  if (bench_count_ran(&kr->count) != total) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&kr->count), total);
    return NAN;
  }
  if (sys->kind != U_RAW || chained)
    bench_lanes_check(kr->lanes, kr->keys, kr->per, where);
  return (double) total * 1e9 / (double) (bench_count_end(&kr->count) - t0);
}


static void users_keyed(const bench_cfg_t* cfg) {
  static const char* const where[KEYED_SYSTEMS] = {
      "u5 uvsched width 4", "u5 raw", "u5 naive per key", "u5 chained per key"};
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t wide;
  uvs_worker_options_t o;
  bench_naive_t* naive;
  usys_t sys[KEYED_SYSTEMS];
  keyrate_t kr;
  bench_row_t* vs_chained;
  bench_row_t* vs_raw;
  bench_row_t* vs_naive;
  double rate[KEYED_SYSTEMS];
  int run;
  int k;
  int v;

  vs_chained = bench_row("u5.keyed-rate",
                         "width-4 worker, 100 keys x 200 tasks of 7 us, vs "
                         "chained uv_queue_work per key",
                         "tasks/s", BENCH_GE, 0.9, 0);
  vs_raw = bench_row("u5.keyed-rate-raw",
                     "width-4 worker, 100 keys x 200 tasks of 7 us, vs raw",
                     "tasks/s", BENCH_INFO, NAN, 0);
  vs_naive = bench_row("u5.keyed-rate-naive",
                       "width-4 worker, 100 keys x 200 tasks of 7 us, vs "
                       "naive per key",
                       "tasks/s", BENCH_GE, 1.1, 0);

  memset(&kr, 0, sizeof(kr));
  kr.loop = &loop;
  kr.keys = cfg->users_keys;
  kr.per = cfg->users_per;
  kr.tasks = bench_alloc(kr.keys * kr.per, sizeof(*kr.tasks));
  kr.lanes = bench_alloc(kr.keys, sizeof(*kr.lanes));
  naive = bench_alloc(kr.keys, sizeof(*naive));
  users_sched_open(cfg, &loop, &sched);
  memset(&o, 0, sizeof(o));
  o.width = 4;
  if (uvs_worker_init_ex(&sched, &wide, UVS_POOL, &o) != 0)
    abort();
  users_naive_open(&loop, naive, kr.keys);
  memset(sys, 0, sizeof(sys));
  for (v = 0; v < KEYED_SYSTEMS; v++) sys[v].loop = &loop;
  sys[0].kind = U_UVS;
  sys[0].wide = &wide;
  sys[1].kind = U_RAW;
  sys[2].kind = U_NAIVE;
  sys[2].naive = naive;
  sys[3].kind = U_RAW;

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < KEYED_SYSTEMS; k++) {
      v = bench_order(run, KEYED_SYSTEMS, k);
      rate[v] = keyrate_run(&kr, &sys[v], v == 3, where[v]);
      bench_note(cfg, where[v], run, rate[v], "tasks/s");
    }
    bench_row_add(vs_chained, rate[0], rate[3]);
    bench_row_add(vs_raw, rate[0], rate[1]);
    bench_row_add(vs_naive, rate[0], rate[2]);
  }

  users_naive_close(naive, kr.keys);
  users_sched_done(&loop, &sched, "u5");
  bench_free(naive);
  bench_free(kr.lanes);
  bench_free(kr.tasks);
}


static int users_part(const char* part) {
  const char* v;

  v = getenv("UVSB_USERS");
  return v == NULL || *v == '\0' || strstr(v, part) != NULL;
}


void bench_users(const bench_cfg_t* cfg) {
  printf("# users: libuv pool of %u threads (UV_THREADPOOL_SIZE %s)\n",
         users_pool_size(),
         getenv("UV_THREADPOOL_SIZE") != NULL ? "as set" : "unset: default");
#if UVS_VERSION_HEX >= 0x000500
  printf("# users: budget %u, hold_us %u (0: the default)\n", cfg->users_budget,
         cfg->users_hold_us);
#else
  printf("# users: budget %u; this uvsched has no hold_us (before 0.5)\n",
         cfg->users_budget);
#endif
  fflush(stdout);
  /* UVSB_USERS=hol,mix,dep,keyed,event,held,flag runs only those parts
   * (all by default): for quick A/B comparisons of one row. */
  if (users_part("hol"))
    users_hol(cfg);
  if (users_part("mix"))
    users_mix(cfg);
  if (users_part("dep"))
    users_dep(cfg, 0);
  if (users_part("keyed"))
    users_keyed(cfg);
  if (users_part("event"))
    bench_users_events(cfg);
  if (users_part("held"))
    bench_users_held(cfg);
  if (users_part("flag"))
    users_dep(cfg, 1);
}
