/* Groups (SPEC 0.4, issue 32): what they are for, how well shares hold,
 * and what they cost.
 *
 *   g1  an "interactive" group beside a "bulk" group whose max_concurrency
 *       is the pool size minus one and which keeps that many 50 ms tasks
 *       running: the interactive group's 2 us tasks' start latency, against
 *       the same tasks on the same scheduler while the pool is idle.
 *   g2  shares: groups 1:3, then 1:2:3:4, every group always with ready
 *       workers waiting (more workers than the cap, each with a task that
 *       schedules itself again); each group's share of the run_cb time
 *       (uvs_group_stats' run_ns) over a window against its share of the
 *       weights.
 *   g3  s1's and s3's loads (and four workers round-robin) on a scheduler
 *       with four groups, against the same on one without groups.
 *
 * Everything runs in one process; the variants of a row alternate their
 * order from one repetition to the next, as elsewhere.
 */

#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* libuv's pool size, read as libuv reads it: the scheduler's cap when it
 * sets none of its own. */
static unsigned pool_size(void) {
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


/* Spins for ns of the calling thread's CPU time (a task that costs what it
 * says whoever else wants the core, as the users' rows do). */
static void spin_cpu(uint64_t ns) {
  uint64_t end;

  end = bench_thread_cpu() + ns;
  while (bench_thread_cpu() < end) {
  }
}


/* Spins for ns of wall time: run_cb lasts what it says, preempted or not,
 * which is what run_ns and the shares weigh. */
static void spin_wall(uint64_t ns) {
  uint64_t end;

  end = uv_hrtime() + ns;
  while (uv_hrtime() < end) {
  }
}


static void sleep_ns(uint64_t ns) {
  struct timespec ts;

  ts.tv_sec = (time_t) (ns / 1000000000u);
  ts.tv_nsec = (long) (ns % 1000000000u);
  while (nanosleep(&ts, &ts) != 0) {
  }
}


static void sched_open_groups(uv_loop_t* loop,
                              uvs_sched_t* s,
                              unsigned ngroups,
                              const uvs_group_options_t* groups) {
  uvs_sched_options_t o;

  memset(&o, 0, sizeof(o));
  o.ngroups = ngroups;
  o.groups = groups;
  if (uvs_sched_init(loop, s, &o) != 0)
    abort();
}


static void worker_in(uvs_sched_t* s, uvs_worker_t* w, unsigned group) {
  uvs_worker_options_t o;

  memset(&o, 0, sizeof(o));
  o.group = group;
  if (uvs_worker_init_ex(s, w, UVS_POOL, &o) != 0)
    abort();
}


static void atomic_max(uint64_t* p, uint64_t v) {
  uint64_t cur;

  cur = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (v > cur && !__atomic_compare_exchange_n(
                        p, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}


enum {
  FEED_CPU = 0,  /* spins for its length in CPU time */
  FEED_WALL = 1, /* spins for its length in wall time */
  FEED_SLEEP = 2 /* holds its pool thread asleep for its length */
};

/* A task that schedules itself again onto its worker from its run_cb
 * until *stop is set: its worker is always ready. Handed back (done) once,
 * after the run that found *stop set. */
typedef struct feed_s {
  uvs_task_t task;
  uvs_worker_t* worker;
  int* stop;       /* atomic */
  int* out;        /* loop thread: feeds not handed back */
  int* err;        /* atomic: the first failed re-schedule */
  uint64_t* ran;   /* atomic: runs of the feed's group */
  uint64_t* cur;   /* atomic: run_cbs of the group executing now */
  uint64_t* peak;  /* atomic: the most at once */
  uint64_t min_ns; /* a run lasts min_ns .. max_ns */
  uint64_t max_ns;
  int how; /* FEED_CPU, FEED_WALL or FEED_SLEEP */
  uint64_t rng;
} feed_t;


static void feed_run(uvs_task_t* task) {
  feed_t* f;
  uint64_t ns;
  int err;

  f = (feed_t*) task;
  if (f->cur != NULL)
    atomic_max(f->peak, __atomic_add_fetch(f->cur, 1, __ATOMIC_RELAXED));
  ns = f->min_ns;
  if (f->max_ns > f->min_ns)
    ns += bench_rand(&f->rng) % (f->max_ns - f->min_ns + 1);
  if (f->how == FEED_WALL)
    spin_wall(ns);
  else if (f->how == FEED_SLEEP)
    sleep_ns(ns);
  else
    spin_cpu(ns);
  if (f->cur != NULL)
    __atomic_sub_fetch(f->cur, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(f->ran, 1, __ATOMIC_RELAXED);
  if (__atomic_load_n(f->stop, __ATOMIC_ACQUIRE))
    return;
  err = uvs_schedule(f->worker, task);
  if (err != 0) {
    /* Not accepted: this run's hand-back still comes. */
    __atomic_store_n(f->err, err, __ATOMIC_RELAXED);
  }
}


static void feed_done(uvs_task_t* task, int status) {
  feed_t* f;

  f = (feed_t*) task;
  if (status != 0)
    __atomic_store_n(f->err, status, __ATOMIC_RELAXED);
  (*f->out)--;
}


/* Starts n feeds (task init and first schedule), on the loop thread. */
static int feeds_start(feed_t* feeds, size_t n) {
  size_t i;
  int err;

  __atomic_store_n(feeds[0].stop, 0, __ATOMIC_RELEASE);
  for (i = 0; i < n; i++) {
    uvs_task_init(&feeds[i].task, feed_run, feed_done);
    err = uvs_schedule(feeds[i].worker, &feeds[i].task);
    if (err != 0)
      return err;
    (*feeds[i].out)++;
  }
  return 0;
}


/* ---- g1: an interactive group beside a busy bulk group -------------------
 *
 * The bulk group (max_concurrency = the pool size - 1) has twice as many
 * serial workers as its cap, each with a feed of 50 ms (CPU time) tasks:
 * its cap is always full and it always has workers waiting. The
 * interactive group has 32 serial workers. Every 1 ms (a loop timer) a 2 us
 * task is scheduled on the next of them, in turn; its start latency is
 * uv_hrtime() from just before the schedule call to run_cb's start. The
 * baseline is the same ticks with the bulk feeds stopped: the pool idle.
 * The busy ticks begin once the bulk group runs its cap.
 *
 * Reported beside it, not targeted:
 *   - the same workers and load on a second scheduler without groups,
 *     where the bulk workers may take the whole pool and the short tasks'
 *     workers wait in line behind theirs;
 *   - the two groups again, with bulk tasks that hold their pool threads
 *     asleep for 50 ms rather than spin: the scheduler's part alone, where
 *     the pool has more threads than the machine has cores and spinning
 *     bulk tasks leave the short ones waiting for a core.
 */

#define G1_SHORT_NS 2000
#define G1_SETTLE_MS 5000 /* the bulk workers must fill their cap by then */

typedef struct g1_short_s {
  uvs_task_t task;
  bench_count_t* count;
  uint64_t t_call;
  uint64_t t_start; /* atomic */
} g1_short_t;

/* One scheduler and its workers. */
typedef struct g1_side_s {
  uvs_sched_t sched;
  uvs_worker_t* inter; /* ninter, in group inter_group */
  size_t ninter;
  unsigned inter_group;
  uvs_worker_t* bulk_w; /* nbulk, in group bulk_group */
  feed_t* bulk;         /* nbulk */
  size_t nbulk;
  unsigned bulk_group;
  unsigned bulk_cap; /* what the bulk workers can run at once */
  int stop;          /* atomic: the bulk feeds' */
  int out;           /* loop thread: bulk feeds not handed back */
  int err;           /* atomic */
  uint64_t bulk_ran; /* atomic */
  uint64_t bulk_cur; /* atomic */
  uint64_t bulk_peak;
} g1_side_t;

typedef struct g1_s {
  uv_loop_t* loop;
  g1_side_t* side;    /* the variant's */
  g1_short_t* shorts; /* n */
  size_t n;
  size_t next;
  bench_count_t count;
  uv_timer_t timer;
  int busy;
  int started;
  uint64_t t_phase;
  uint64_t ticks;      /* busy: ticks measured */
  uint64_t ticks_full; /* ... at which the bulk workers ran their cap */
  int failed;
} g1_t;


static void g1_side_open(uv_loop_t* loop,
                         g1_side_t* side,
                         int grouped,
                         unsigned pool,
                         const bench_cfg_t* cfg) {
  uvs_group_options_t go[2];
  size_t i;

  memset(side, 0, sizeof(*side));
  memset(go, 0, sizeof(go));
  side->inter_group = 0;
  side->bulk_group = grouped ? 1 : 0;
  side->bulk_cap = grouped ? pool - 1 : pool;
  go[1].max_concurrency = pool - 1;
  sched_open_groups(loop, &side->sched, grouped ? 2 : 0, grouped ? go : NULL);
  side->ninter = cfg->users_short;
  side->inter = bench_alloc(side->ninter, sizeof(*side->inter));
  for (i = 0; i < side->ninter; i++)
    worker_in(&side->sched, &side->inter[i], side->inter_group);
  side->nbulk = 2 * (size_t) (pool - 1);
  side->bulk_w = bench_alloc(side->nbulk, sizeof(*side->bulk_w));
  side->bulk = bench_alloc(side->nbulk, sizeof(*side->bulk));
  for (i = 0; i < side->nbulk; i++) {
    worker_in(&side->sched, &side->bulk_w[i], side->bulk_group);
    side->bulk[i].worker = &side->bulk_w[i];
    side->bulk[i].stop = &side->stop;
    side->bulk[i].out = &side->out;
    side->bulk[i].err = &side->err;
    side->bulk[i].ran = &side->bulk_ran;
    side->bulk[i].cur = &side->bulk_cur;
    side->bulk[i].peak = &side->bulk_peak;
    side->bulk[i].min_ns = side->bulk[i].max_ns =
        (uint64_t) cfg->groups_bulk_ms * 1000000;
    side->bulk[i].how = FEED_CPU;
  }
}


/* Checks what the bulk workers did, and closes the scheduler. */
static void g1_side_close(uv_loop_t* loop, g1_side_t* side, const char* w) {
  uvs_group_stats_t st;

  if (side->bulk_peak > side->bulk_cap)
    bench_fail("%s: the bulk workers ran %llu tasks at once, cap %u", w,
               (unsigned long long) side->bulk_peak, side->bulk_cap);
  if (side->bulk_group != side->inter_group) {
    uvs_group_stats(&side->sched, side->bulk_group, &st);
    if (st.ran != side->bulk_ran)
      bench_fail("%s: uvs_group_stats counts %llu bulk runs, the tasks %llu", w,
                 (unsigned long long) st.ran,
                 (unsigned long long) side->bulk_ran);
  }
  bench_check_stats(&side->sched, w);
  bench_sched_close(loop, &side->sched, w);
  bench_free(side->bulk);
  bench_free(side->bulk_w);
  bench_free(side->inter);
}


static void g1_short_run(uvs_task_t* task) {
  g1_short_t* t;

  t = (g1_short_t*) task;
  __atomic_store_n(&t->t_start, uv_hrtime(), __ATOMIC_RELAXED);
  spin_cpu(G1_SHORT_NS);
  bench_count_hit(t->count);
}


static void g1_finish(g1_t* g) {
  uv_timer_stop(&g->timer);
  uv_close((uv_handle_t*) &g->timer, NULL);
  __atomic_store_n(&g->side->stop, 1, __ATOMIC_RELEASE);
}


static void g1_tick(uv_timer_t* timer) {
  g1_t* g;
  g1_side_t* side;
  g1_short_t* t;
  uvs_group_stats_t st;
  int err;

  g = timer->data;
  side = g->side;
  if (g->busy) {
    uvs_group_stats(&side->sched, side->bulk_group, &st);
    if (!g->started) {
      if (st.running < side->bulk_cap) {
        if (uv_hrtime() - g->t_phase > (uint64_t) G1_SETTLE_MS * 1000000) {
          bench_fail("g1: the bulk workers ran %llu of their cap of %u",
                     (unsigned long long) st.running, side->bulk_cap);
          g->failed = 1;
          g1_finish(g);
        }
        return;
      }
      g->started = 1;
    }
    if (g->next < g->n) {
      g->ticks++;
      if (st.running >= side->bulk_cap)
        g->ticks_full++;
    }
  }
  if (g->next < g->n) {
    t = &g->shorts[g->next];
    uvs_task_init(&t->task, g1_short_run, NULL);
    t->count = &g->count;
    t->t_start = 0;
    t->t_call = uv_hrtime();
    err = uvs_schedule(&side->inter[g->next % side->ninter], &t->task);
    g->next++;
    if (err != 0) {
      bench_fail("g1: uvs_schedule: %s", uv_strerror(err));
      g->failed = 1;
      g1_finish(g);
    }
    return;
  }
  if (bench_count_ran(&g->count) == g->n)
    g1_finish(g);
}


/* One variant of one repetition, on side, with its bulk feeds running or
 * not: lat[0..n) gets the start latencies in us, *full the share of ticks
 * at which the bulk workers ran their cap. Returns 0, or -1 after
 * bench_fail(). */
static int g1_variant(g1_t* g,
                      g1_side_t* side,
                      int busy,
                      double* lat,
                      double* full,
                      const char* where) {
  size_t i;
  int err;

  bench_arm(where);
  bench_count_reset(&g->count, g->n);
  g->side = side;
  g->busy = busy;
  g->started = 0;
  g->next = 0;
  g->failed = 0;
  g->ticks = g->ticks_full = 0;
  g->t_phase = uv_hrtime();
  __atomic_store_n(&side->err, 0, __ATOMIC_RELAXED);
  if (busy) {
    err = feeds_start(side->bulk, side->nbulk);
    if (err != 0) {
      bench_fail("%s: uvs_schedule (bulk): %s", where, uv_strerror(err));
      g->failed = 1;
      __atomic_store_n(&side->stop, 1, __ATOMIC_RELEASE);
    }
  }
  if (uv_timer_init(g->loop, &g->timer) != 0)
    abort();
  g->timer.data = g;
  if (!g->failed)
    uv_timer_start(&g->timer, g1_tick, 1, 1);
  else
    uv_close((uv_handle_t*) &g->timer, NULL);
  uv_run(g->loop, UV_RUN_DEFAULT);

  err = __atomic_load_n(&side->err, __ATOMIC_RELAXED);
  if (err != 0) {
    bench_fail("%s: bulk feed: %s", where, uv_strerror(err));
    return -1;
  }
  if (side->out != 0) {
    bench_fail("%s: %d bulk feeds not handed back", where, side->out);
    return -1;
  }
  if (g->failed)
    return -1;
  if (bench_count_ran(&g->count) != g->n) {
    bench_fail("%s: %llu of %zu short tasks ran", where,
               (unsigned long long) bench_count_ran(&g->count), g->n);
    return -1;
  }
  for (i = 0; i < g->n; i++)
    lat[i] = (double) (g->shorts[i].t_start - g->shorts[i].t_call) / 1e3;
  *full = g->ticks != 0 ? (double) g->ticks_full / (double) g->ticks : NAN;
  return 0;
}


/* Bulk busy beside, idle, busy without groups, asleep beside. */
#define G1_VARIANTS 4

void bench_g1_interactive(const bench_cfg_t* cfg) {
  static const char* const where[G1_VARIANTS] = {
      "g1 bulk group busy", "g1 idle pool", "g1 no groups, bulk busy",
      "g1 bulk group asleep"};
  static const char* const note[G1_VARIANTS] = {"g1.busy", "g1.idle",
                                                "g1.no-groups", "g1.asleep"};
  uv_loop_t loop;
  g1_side_t side[2]; /* 0: two groups, 1: none */
  g1_t g;
  bench_row_t* p50_row;
  bench_row_t* p99_row;
  bench_row_t* max_row;
  bench_row_t* one_row;
  bench_row_t* asleep_row;
  size_t i;
  double* lat[G1_VARIANTS];
  double p50[G1_VARIANTS];
  double p99[G1_VARIANTS];
  double mx[G1_VARIANTS];
  double full[G1_VARIANTS][BENCH_MAX_RUNS];
  unsigned pool;
  int run;
  int k;
  int v;

  pool = pool_size();
  if (pool < 2) {
    printf("# g1 needs a pool of 2 threads or more (UV_THREADPOOL_SIZE)\n");
    return;
  }
  p50_row = bench_row("g1.p50",
                      "groups: 2 us tasks of an interactive group while a "
                      "bulk group runs pool-1 x 50 ms tasks, start p50 vs "
                      "idle pool",
                      "us", BENCH_INFO, NAN, 0);
  p99_row = bench_row("g1.p99",
                      "groups: 2 us tasks of an interactive group while a "
                      "bulk group runs pool-1 x 50 ms tasks, start p99 vs "
                      "idle pool",
                      "us", BENCH_LE, 1.5, 0);
  max_row = bench_row("g1.max",
                      "groups: 2 us tasks of an interactive group while a "
                      "bulk group runs pool-1 x 50 ms tasks, start max vs "
                      "idle pool",
                      "us", BENCH_INFO, NAN, 0);
  one_row = bench_row("g1.p99-no-groups",
                      "the same load on a scheduler without groups, start "
                      "p99 vs idle pool",
                      "us", BENCH_INFO, NAN, 0);
  asleep_row = bench_row("g1.p99-bulk-asleep",
                         "the same, bulk tasks asleep on their threads (no "
                         "core taken), start p99 vs idle pool",
                         "us", BENCH_INFO, NAN, 0);

  bench_loop_init(&loop);
  g1_side_open(&loop, &side[0], 1, pool, cfg);
  g1_side_open(&loop, &side[1], 0, pool, cfg);
  memset(&g, 0, sizeof(g));
  g.loop = &loop;
  g.n = cfg->groups_ticks;
  g.shorts = bench_alloc(g.n, sizeof(*g.shorts));
  for (v = 0; v < G1_VARIANTS; v++) lat[v] = bench_alloc(g.n, sizeof(double));

  for (run = 0; run < cfg->runs; run++) {
    for (k = 0; k < G1_VARIANTS; k++) {
      v = bench_order(run, G1_VARIANTS, k);
      p50[v] = p99[v] = mx[v] = full[v][run] = NAN;
      for (i = 0; i < side[0].nbulk; i++)
        side[0].bulk[i].how = v == 3 ? FEED_SLEEP : FEED_CPU;
      if (g1_variant(&g, &side[v == 2], v != 1, lat[v], &full[v][run],
                     where[v]) != 0)
        continue;
      p50[v] = bench_percentile(lat[v], g.n, 50.0);
      p99[v] = bench_percentile(lat[v], g.n, 99.0);
      mx[v] = lat[v][g.n - 1];
      bench_note(cfg, note[v], run, p99[v], "us start p99");
    }
    bench_row_add(p50_row, p50[0], p50[1]);
    bench_row_add(p99_row, p99[0], p99[1]);
    bench_row_add(max_row, mx[0], mx[1]);
    bench_row_add(one_row, p99[2], p99[1]);
    bench_row_add(asleep_row, p99[3], p99[1]);
  }
  /* The share of the busy ticks at which the bulk workers had their cap
   * running: the load was what the rows say. */
  bench_figure("g1.bulk-at-cap", bench_median(full[0], (size_t) cfg->runs),
               "of ticks");
  bench_figure("g1.no-groups.bulk-at-cap",
               bench_median(full[2], (size_t) cfg->runs), "of ticks");
  bench_figure("g1.asleep.bulk-at-cap",
               bench_median(full[3], (size_t) cfg->runs), "of ticks");

  g1_side_close(&loop, &side[0], "g1 two groups");
  g1_side_close(&loop, &side[1], "g1 no groups");
  bench_loop_close(&loop, "g1");
  for (v = 0; v < G1_VARIANTS; v++) bench_free(lat[v]);
  bench_free(g.shorts);
}


/* ---- g2: shares ------------------------------------------------------------
 *
 * A scheduler with the given shares (its cap: the pool size); each group
 * has cap + 2 serial workers, each with a feed of 0.1..1 ms tasks (wall
 * time, random per run): every group always has ready workers waiting.
 * After a warm-up, each group's run_ns over the window, as a share of all
 * the groups', against shares[g] / sum(shares). The row is the largest
 * relative error of any group, in percent. (A group that ran nothing in a
 * window is 100% off, not a failure: in a smoke's short window one run_cb
 * that a loaded machine stretched can hold its group back that long, as
 * the shares say it should.)
 */

#define G2_MAXG 4
#define G2_TICK_MS 10
#define G2_MIN_NS 100000
#define G2_MAX_NS 1000000

typedef struct g2_s {
  uv_loop_t* loop;
  uvs_sched_t* sched;
  unsigned ngroups;
  const unsigned* shares;
  feed_t* feeds; /* nfeeds */
  size_t nfeeds;
  uint64_t ran[G2_MAXG];
  int stop;
  int out;
  int err;
  uv_timer_t timer;
  uint64_t t0;
  uint64_t warm_ns;
  uint64_t window_ns;
  int phase; /* 0 warm-up, 1 window */
  uint64_t run_ns0[G2_MAXG];
  uint64_t run_ns1[G2_MAXG];
  uint64_t ticks;
  uint64_t ticks_waiting; /* every group had a ready worker waiting */
} g2_t;


static void g2_snap(g2_t* g, uint64_t* out) {
  uvs_group_stats_t st;
  unsigned i;

  for (i = 0; i < g->ngroups; i++) {
    uvs_group_stats(g->sched, i, &st);
    out[i] = st.run_ns;
  }
}


static void g2_tick(uv_timer_t* timer) {
  g2_t* g;
  uvs_group_stats_t st;
  uint64_t now;
  unsigned i;
  int all;

  g = timer->data;
  now = uv_hrtime();
  if (g->phase == 0) {
    if (now - g->t0 < g->warm_ns)
      return;
    g2_snap(g, g->run_ns0);
    g->phase = 1;
    g->t0 = now;
    return;
  }
  all = 1;
  for (i = 0; i < g->ngroups; i++) {
    uvs_group_stats(g->sched, i, &st);
    if (st.ready == 0)
      all = 0;
  }
  g->ticks++;
  g->ticks_waiting += (uint64_t) all;
  if (now - g->t0 < g->window_ns)
    return;
  g2_snap(g, g->run_ns1);
  __atomic_store_n(&g->stop, 1, __ATOMIC_RELEASE);
  uv_close((uv_handle_t*) timer, NULL);
}


/* One window; *err_pct gets the largest relative error, share[] each
 * group's share. Returns 0, or -1 after bench_fail(). */
static int g2_window(g2_t* g,
                     uint64_t seed,
                     double* err_pct,
                     double* share,
                     double* waiting,
                     const char* where) {
  uint64_t d[G2_MAXG];
  uint64_t sum;
  unsigned wsum;
  double want;
  double e;
  size_t i;
  unsigned k;
  int err;

  bench_watchdog(where,
                 (unsigned) ((g->warm_ns + g->window_ns) / 1000000000u) + 60);
  for (i = 0; i < g->nfeeds; i++) g->feeds[i].rng = (seed + i) * 2 + 1;
  g->phase = 0;
  g->ticks = g->ticks_waiting = 0;
  __atomic_store_n(&g->err, 0, __ATOMIC_RELAXED);
  err = feeds_start(g->feeds, g->nfeeds);
  if (err != 0) {
    bench_fail("%s: uvs_schedule: %s", where, uv_strerror(err));
    __atomic_store_n(&g->stop, 1, __ATOMIC_RELEASE);
    uv_run(g->loop, UV_RUN_DEFAULT);
    return -1;
  }
  if (uv_timer_init(g->loop, &g->timer) != 0)
    abort();
  g->timer.data = g;
  g->t0 = uv_hrtime();
  uv_timer_start(&g->timer, g2_tick, G2_TICK_MS, G2_TICK_MS);
  uv_run(g->loop, UV_RUN_DEFAULT);

  err = __atomic_load_n(&g->err, __ATOMIC_RELAXED);
  if (err != 0) {
    bench_fail("%s: feed: %s", where, uv_strerror(err));
    return -1;
  }
  if (g->out != 0) {
    bench_fail("%s: %d feeds not handed back", where, g->out);
    return -1;
  }
  sum = 0;
  wsum = 0;
  for (k = 0; k < g->ngroups; k++) {
    d[k] = g->run_ns1[k] - g->run_ns0[k];
    sum += d[k];
    wsum += g->shares[k];
  }
  if (sum == 0) {
    bench_fail("%s: no group ran in the window", where);
    return -1;
  }
  *err_pct = 0;
  for (k = 0; k < g->ngroups; k++) {
    share[k] = (double) d[k] / (double) sum;
    want = (double) g->shares[k] / (double) wsum;
    e = fabs(share[k] - want) / want * 100.0;
    if (e > *err_pct)
      *err_pct = e;
  }
  *waiting =
      g->ticks != 0 ? (double) g->ticks_waiting / (double) g->ticks : NAN;
  return 0;
}


static void g2_case(const bench_cfg_t* cfg,
                    const char* id,
                    const char* title,
                    const char* name,
                    unsigned ngroups,
                    const unsigned* shares) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_group_options_t go[G2_MAXG];
  uvs_group_stats_t st;
  uvs_worker_t* workers;
  bench_row_t* row;
  g2_t g;
  double e;
  double share[G2_MAXG];
  double shares_run[G2_MAXG][BENCH_MAX_RUNS];
  double waiting[BENCH_MAX_RUNS];
  char fig[96];
  char where[64];
  unsigned cap;
  size_t per;
  size_t i;
  unsigned k;
  int run;

  row = bench_row(id, title, "% max error", BENCH_LE, 10.0, 1);
  cap = pool_size();
  per = cap + 2;
  memset(go, 0, sizeof(go));
  for (k = 0; k < ngroups; k++) go[k].shares = shares[k];
  bench_loop_init(&loop);
  sched_open_groups(&loop, &sched, ngroups, go);
  memset(&g, 0, sizeof(g));
  g.loop = &loop;
  g.sched = &sched;
  g.ngroups = ngroups;
  g.shares = shares;
  g.warm_ns = (uint64_t) cfg->groups_warm_ms * 1000000;
  g.window_ns = (uint64_t) cfg->groups_window_ms * 1000000;
  g.nfeeds = ngroups * per;
  workers = bench_alloc(g.nfeeds, sizeof(*workers));
  g.feeds = bench_alloc(g.nfeeds, sizeof(*g.feeds));
  for (i = 0; i < g.nfeeds; i++) {
    k = (unsigned) (i / per);
    worker_in(&sched, &workers[i], k);
    g.feeds[i].worker = &workers[i];
    g.feeds[i].stop = &g.stop;
    g.feeds[i].out = &g.out;
    g.feeds[i].err = &g.err;
    g.feeds[i].ran = &g.ran[k];
    g.feeds[i].min_ns = G2_MIN_NS;
    g.feeds[i].max_ns = G2_MAX_NS;
    g.feeds[i].how = FEED_WALL;
  }

  snprintf(where, sizeof(where), "%s %s", id, name);
  for (run = 0; run < cfg->runs; run++) {
    waiting[run] = NAN;
    for (k = 0; k < ngroups; k++) shares_run[k][run] = NAN;
    if (g2_window(&g, (uint64_t) run * 7919 + 1, &e, share, &waiting[run],
                  where) != 0) {
      bench_row_add(row, NAN, NAN);
      continue;
    }
    for (k = 0; k < ngroups; k++) shares_run[k][run] = share[k];
    bench_row_add(row, e, NAN);
    bench_note(cfg, id, run, e, "% max error");
  }
  for (k = 0; k < ngroups; k++) {
    snprintf(fig, sizeof(fig), "%s.share%u", id, k);
    bench_figure(fig, bench_median(shares_run[k], (size_t) cfg->runs),
                 "of run_ns");
  }
  snprintf(fig, sizeof(fig), "%s.all-waiting", id);
  bench_figure(fig, bench_median(waiting, (size_t) cfg->runs), "of ticks");

  for (k = 0; k < ngroups; k++) {
    uvs_group_stats(&sched, k, &st);
    if (st.ran != g.ran[k])
      bench_fail(
          "%s: uvs_group_stats counts %llu runs of group %u, the "
          "tasks %llu",
          id, (unsigned long long) st.ran, k, (unsigned long long) g.ran[k]);
  }
  bench_check_stats(&sched, id);
  bench_sched_close(&loop, &sched, id);
  bench_loop_close(&loop, id);
  bench_free(g.feeds);
  bench_free(workers);
}


void bench_g2_shares(const bench_cfg_t* cfg) {
  static const unsigned s13[2] = {1, 3};
  static const unsigned s1234[4] = {1, 2, 3, 4};

  g2_case(cfg, "g2.1-3",
          "groups: run_cb time of 2 groups, shares 1:3, all always "
          "waiting, 10 s, 0.1-1 ms tasks, vs shares",
          "1:3", 2, s13);
  g2_case(cfg, "g2.1-2-3-4",
          "groups: run_cb time of 4 groups, shares 1:2:3:4, all always "
          "waiting, 10 s, 0.1-1 ms tasks, vs shares",
          "1:2:3:4", 4, s1234);
}


/* ---- g3: what groups cost
 * ----------------------------------------------------
 *
 * Two schedulers on one loop: one without groups, one with four (shares
 * 1:2:3:4). Each has one pool worker (in the last group) for s1's and s3's
 * loads, and four (one per group) for a round-robin load. Each row is
 * ns per task with four groups against the same without.
 */

#define G3_NG 4

typedef struct g3_side_s {
  uvs_sched_t sched;
  uvs_worker_t one;
  uvs_worker_t four[G3_NG];
} g3_side_t;


static void g3_side_open(uv_loop_t* loop, g3_side_t* side, int grouped) {
  uvs_group_options_t go[G3_NG];
  unsigned k;

  memset(go, 0, sizeof(go));
  for (k = 0; k < G3_NG; k++) go[k].shares = k + 1;
  sched_open_groups(loop, &side->sched, grouped ? G3_NG : 0,
                    grouped ? go : NULL);
  worker_in(&side->sched, &side->one, grouped ? G3_NG - 1 : 0);
  for (k = 0; k < G3_NG; k++)
    worker_in(&side->sched, &side->four[k], grouped ? k : 0);
}


void bench_g3_cost(const bench_cfg_t* cfg) {
  static const char* const where[2][4] = {
      {"g3 s1 one group", "g3 s1-cb one group", "g3 s3 one group",
       "g3 rr4 one group"},
      {"g3 s1 four groups", "g3 s1-cb four groups", "g3 s3 four groups",
       "g3 rr4 four groups"}};
  uv_loop_t loop;
  g3_side_t side[2]; /* 0: one group, 1: four */
  bench_row_t* rows[4];
  bench_rr_t rr;
  bench_feed_t f;
  bench_lane_t lanes[G3_NG];
  bench_utask_t* utasks;
  double ns[2][4];
  uint64_t cpu;
  double rate;
  size_t n;
  int run;
  int style;
  int k;
  int v;

  rows[0] = bench_row("g3.s1",
                      "groups: s1's load (1 pool worker, from the loop) on "
                      "4 groups vs none",
                      "ns/task", BENCH_LE, 1.1, 0);
  rows[1] = bench_row("g3.s1-cb",
                      "groups: s1's load from an I/O callback on 4 groups "
                      "vs none",
                      "ns/task", BENCH_LE, 1.1, 0);
  rows[2] = bench_row("g3.s3",
                      "groups: s3's load (1 pool worker, foreign thread) on "
                      "4 groups vs none",
                      "ns/task", BENCH_LE, 1.1, 0);
  rows[3] = bench_row("g3.rr4",
                      "groups: 4 pool workers round-robin from the loop, "
                      "one per group, vs all in one",
                      "ns/task", BENCH_LE, 1.1, 0);

  n = cfg->pool_tasks;
  utasks = bench_alloc(n, sizeof(*utasks));
  bench_loop_init(&loop);
  g3_side_open(&loop, &side[0], 0);
  g3_side_open(&loop, &side[1], 1);
  memset(&rr, 0, sizeof(rr));
  rr.loop = &loop;
  rr.lanes = lanes;
  rr.tasks = utasks;
  memset(&f, 0, sizeof(f));
  f.n = n;
  f.utasks = utasks;

  for (run = 0; run < cfg->runs; run++) {
    for (style = 0; style < 4; style++) {
      for (k = 0; k < 2; k++) {
        v = bench_order(run, 2, k);
        ns[v][style] = NAN;
        if (style == 2) {
          f.worker = &side[v].one;
          rate =
              bench_feed_run(&loop, &f, bench_feed_uvs, &cpu, where[v][style]);
        } else {
          rr.in_cb = style == 1;
          rr.workers = style == 3 ? side[v].four : &side[v].one;
          rr.nworkers = style == 3 ? G3_NG : 1;
          rr.per = n / rr.nworkers;
          rate = bench_rr_uvs(&rr, where[v][style]);
        }
        if (!isnan(rate) && rate > 0)
          ns[v][style] = 1e9 / rate;
        bench_note(cfg, where[v][style], run, ns[v][style], "ns/task");
      }
      bench_row_add(rows[style], ns[1][style], ns[0][style]);
    }
  }

  for (v = 0; v < 2; v++) {
    bench_check_stats(&side[v].sched, v == 0 ? "g3 one" : "g3 four");
    bench_sched_close(&loop, &side[v].sched, v == 0 ? "g3 one" : "g3 four");
  }
  bench_loop_close(&loop, "g3");
  bench_free(utasks);
}
