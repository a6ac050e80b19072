/* 0.2 features: keyed lanes on a wide worker against a serial worker
 * (s10), metrics and bounds against a plain worker (s11), and the manual
 * clock (s12). Costs are process CPU per task, so that a wide worker on a
 * machine with fewer cores than lanes is judged by what it spends, not by
 * the cores it could not get.
 */

#include "bench.h"

#include <malloc.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* Live heap of the bench and the library (linked statically into it):
 * the bench links with --wrap for malloc, calloc, realloc and free, so
 * every call from these objects comes through here (libuv's and libc's own
 * do not). mallinfo2() would not do: a chunk freed on a pool thread stays
 * in that thread's cache and counts as in use. */
static int64_t live_blocks; /* atomic */
static int64_t live_bytes;  /* atomic */

void* __real_malloc(size_t size);
void* __real_calloc(size_t n, size_t size);
void* __real_realloc(void* p, size_t size);
void __real_free(void* p);
void* __wrap_malloc(size_t size);
void* __wrap_calloc(size_t n, size_t size);
void* __wrap_realloc(void* p, size_t size);
void __wrap_free(void* p);

static void live_add(void* p, int64_t blocks) {
  if (p == NULL)
    return;
  __atomic_add_fetch(&live_blocks, blocks, __ATOMIC_RELAXED);
  __atomic_add_fetch(&live_bytes, blocks * (int64_t) malloc_usable_size(p),
                     __ATOMIC_RELAXED);
}

void* __wrap_malloc(size_t size) {
  void* p = __real_malloc(size);

  live_add(p, 1);
  return p;
}

void* __wrap_calloc(size_t n, size_t size) {
  void* p = __real_calloc(n, size);

  live_add(p, 1);
  return p;
}

void* __wrap_realloc(void* p, size_t size) {
  void* q;

  live_add(p, -1);
  q = __real_realloc(p, size);
  live_add(q != NULL ? q : p, 1);
  return q;
}

void __wrap_free(void* p) {
  live_add(p, -1);
  __real_free(p);
}


/* ---- s10: keyed lanes on a width-4 worker vs a serial worker ------------
 */

/* Task r of every key, then task r + 1 of every key: per tasks for each of
 * keys keys. Each key's runs must come in order (its lane). */
int bench_keyed_run(bench_keyed_t* k, const char* where) {
  size_t total;
  size_t r;
  size_t i;
  size_t n;
  uint64_t cpu0;
  uint64_t t0;
  int err;

  total = k->keys * k->per;
  bench_count_reset(&k->count, total);
  bench_lanes_reset(k->lanes, k->keys, &k->count);
  bench_arm(where);
  cpu0 = bench_process_cpu();
  t0 = uv_hrtime();
  for (r = 0, n = 0; r < k->per; r++) {
    for (i = 0; i < k->keys; i++, n++) {
      uvs_task_init(&k->tasks[n].task, bench_utask_run, NULL);
      uvs_task_set_key(&k->tasks[n].task, i + 1);
      k->tasks[n].task.data = &k->lanes[i];
      k->tasks[n].seq = r;
      err = uvs_schedule(k->worker, &k->tasks[n].task);
      if (err != 0) {
        bench_fail("%s: uvs_schedule: %s", where, uv_strerror(err));
        uv_run(k->loop, UV_RUN_DEFAULT);
        return -1;
      }
    }
  }
  uv_run(k->loop, UV_RUN_DEFAULT);
  k->cpu = bench_process_cpu() - cpu0;
  if (bench_count_ran(&k->count) != total) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&k->count), total);
    return -1;
  }
  bench_lanes_check(k->lanes, k->keys, k->per, where);
  k->rate = (double) total * 1e9 / (double) (bench_count_end(&k->count) - t0);
  return 0;
}


void bench_s10_keyed(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t wide;
  uvs_worker_t serial;
  uvs_worker_options_t o;
  bench_keyed_t k;
  bench_row_t* cost;
  bench_row_t* mem;
  double cw[BENCH_MAX_RUNS];
  double cs[BENCH_MAX_RUNS];
  double rw[BENCH_MAX_RUNS];
  double rs[BENCH_MAX_RUNS];
  double allocs[BENCH_MAX_RUNS];
  double blocks[BENCH_MAX_RUNS];
  int64_t blocks0;
  uvs_stats_t st;
  double before;
  double after;
  unsigned long a0;
  size_t total;
  int run;
  int i;

  total = cfg->keyed_keys * cfg->keyed_per;
  cost = bench_row("s10.keyed",
                   "100k keys x 10 on 1 width-4 pool worker, vs serial",
                   "ns/task", BENCH_LE, 1.5, 0);
  mem = bench_row("s10.keyed-mem",
                  "live heap after all keys drained minus before", "bytes",
                  BENCH_LE, 0.0, 1);
  bench_row_agg(mem, BENCH_MAX);

  memset(&k, 0, sizeof(k));
  k.loop = &loop;
  k.keys = cfg->keyed_keys;
  k.per = cfg->keyed_per;
  k.tasks = bench_alloc(total, sizeof(*k.tasks));
  k.lanes = bench_alloc(k.keys, sizeof(*k.lanes));
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0)
    abort();
  memset(&o, 0, sizeof(o));
  o.width = 4;
  if (uvs_worker_init_ex(&sched, &wide, UVS_POOL, &o) != 0 ||
      uvs_worker_init(&sched, &serial, UVS_POOL) != 0)
    abort();

  for (run = 0; run < cfg->runs; run++) {
    cw[run] = cs[run] = rw[run] = rs[run] = NAN;
    allocs[run] = blocks[run] = NAN;
    for (i = 0; i < 2; i++) {
      if (bench_order(run, 2, i) == 0) {
        k.worker = &wide;
        before = (double) __atomic_load_n(&live_bytes, __ATOMIC_RELAXED);
        blocks0 = __atomic_load_n(&live_blocks, __ATOMIC_RELAXED);
        a0 = uvs__alloc_count();
        if (bench_keyed_run(&k, "s10 keyed width 4") == 0) {
          after = (double) __atomic_load_n(&live_bytes, __ATOMIC_RELAXED);
          blocks[run] =
              (double) (__atomic_load_n(&live_blocks, __ATOMIC_RELAXED) -
                        blocks0);
          cw[run] = (double) k.cpu / (double) total;
          rw[run] = k.rate;
          allocs[run] = (double) (uvs__alloc_count() - a0);
          bench_row_add(mem, after - before, NAN);
          bench_note(cfg, "s10.keyed", run, cw[run], "ns/task");
        }
      } else {
        k.worker = &serial;
        if (bench_keyed_run(&k, "s10 keyed serial") == 0) {
          cs[run] = (double) k.cpu / (double) total;
          rs[run] = k.rate;
          bench_note(cfg, "s10.serial", run, cs[run], "ns/task");
        }
      }
    }
    bench_row_add(cost, cw[run], cs[run]);
  }
  bench_figure("s10.rate.keyed", bench_median(rw, cfg->runs), "tasks/s");
  bench_figure("s10.rate.serial", bench_median(rs, cfg->runs), "tasks/s");
  bench_figure("s10.allocs.keyed", bench_median(allocs, cfg->runs),
               "allocs/run");
  bench_figure("s10.blocks-left.keyed", bench_median(blocks, cfg->runs),
               "blocks");

  /* Every task ran and was counted by its lane. A scheduler that still
   * counts some pending would never finish closing: say so, and leave it
   * (and its tasks) be rather than hang. */
  uvs_sched_stats(&sched, &st);
  if (st.pending != 0) {
    bench_fail(
        "s10: every task ran, yet the scheduler counts %llu pending "
        "(ran %llu of %llu): a close would never complete; not closed",
        (unsigned long long) st.pending, (unsigned long long) st.ran,
        (unsigned long long) st.scheduled);
    return;
  }
  bench_check_stats(&sched, "s10");
  bench_sched_close(&loop, &sched, "s10");
  bench_loop_close(&loop, "s10");
  bench_free(k.lanes);
  bench_free(k.tasks);
}


/* ---- s11: metrics and bounds vs a plain worker (s1's load) ---------------
 */

void bench_s11_metrics(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t workers[3]; /* plain, metrics, bounded */
  uvs_worker_options_t o;
  bench_lane_t lane;
  bench_rr_t rr;
  bench_utask_t* utasks;
  bench_row_t* metrics_row;
  bench_row_t* bounded_row;
  static const char* const where[3] = {"s11 plain", "s11 metrics",
                                       "s11 bounded"};
  double cpu[3][BENCH_MAX_RUNS];
  double rate[3][BENCH_MAX_RUNS];
  uvs_worker_metrics_t m;
  size_t n;
  int run;
  int i;
  int v;

  n = cfg->pool_tasks;
  metrics_row =
      bench_row("s11.metrics", "s1's load, worker with metrics = 1, vs plain",
                "ns/task", BENCH_INFO, NAN, 0);
  bounded_row = bench_row("s11.bounded",
                          "s1's load, max_pending huge (never full), vs plain",
                          "ns/task", BENCH_INFO, NAN, 0);

  utasks = bench_alloc(n, sizeof(*utasks));
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0)
    abort();
  if (uvs_worker_init(&sched, &workers[0], UVS_POOL) != 0)
    abort();
  memset(&o, 0, sizeof(o));
  o.metrics = 1;
  if (uvs_worker_init_ex(&sched, &workers[1], UVS_POOL, &o) != 0)
    abort();
  memset(&o, 0, sizeof(o));
  o.max_pending = SIZE_MAX / 2;
  o.on_full = UVS_FULL_REJECT;
  if (uvs_worker_init_ex(&sched, &workers[2], UVS_POOL, &o) != 0)
    abort();
  memset(&rr, 0, sizeof(rr));
  rr.loop = &loop;
  rr.lanes = &lane;
  rr.nworkers = 1;
  rr.per = n;
  rr.tasks = utasks;

  for (run = 0; run < cfg->runs; run++) {
    for (i = 0; i < 3; i++) {
      v = bench_order(run, 3, i);
      rr.workers = &workers[v];
      rate[v][run] = bench_rr_uvs(&rr, where[v]);
      cpu[v][run] = (double) rr.cpu / (double) n;
      bench_note(cfg, where[v], run, cpu[v][run], "ns/task");
    }
    bench_row_add(metrics_row, cpu[1][run], cpu[0][run]);
    bench_row_add(bounded_row, cpu[2][run], cpu[0][run]);
  }
  bench_figure("s11.rate.plain", bench_median(rate[0], cfg->runs), "tasks/s");
  bench_figure("s11.rate.metrics", bench_median(rate[1], cfg->runs), "tasks/s");
  bench_figure("s11.rate.bounded", bench_median(rate[2], cfg->runs), "tasks/s");
  if (uvs_worker_metrics(&workers[1], &m) == 0) {
    if (m.ran != (uint64_t) n * (uint64_t) cfg->runs || m.run.count != m.ran ||
        m.wait.count != m.ran)
      bench_fail("s11: metrics ran %llu, run.count %llu, wait.count %llu",
                 (unsigned long long) m.ran, (unsigned long long) m.run.count,
                 (unsigned long long) m.wait.count);
    bench_figure("s11.run.mean", (double) m.run.sum_ns / (double) m.run.count,
                 "ns");
    bench_figure("s11.wait.mean",
                 (double) m.wait.sum_ns / (double) m.wait.count, "ns");
  }

  bench_check_stats(&sched, "s11");
  bench_sched_close(&loop, &sched, "s11");
  bench_loop_close(&loop, "s11");
  bench_free(utasks);
}


/* ---- s12: the manual clock -----------------------------------------------
 */

typedef struct tick_s {
  uvs_task_t task;
  uint64_t runs;
} tick_t;

static void tick_run(uvs_task_t* task) {
  ((tick_t*) task)->runs++;
}

static void tick_done(uvs_task_t* task, int status) {
  (void) task;
  (void) status;
}


/* Schedules n periodic tasks of period 1 s, first due 1..1000 ms. */
static void ticks_start(uvs_worker_t* w, tick_t* t, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    t[i].runs = 0;
    uvs_task_init(&t[i].task, tick_run, tick_done);
    if (uvs_schedule_every(w, &t[i].task, 1 + i % 1000, 1000) != 0)
      abort();
  }
}


static void ticks_stop(uv_loop_t* loop, tick_t* t, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) uvs_task_cancel(&t[i].task);
  uv_run(loop, UV_RUN_DEFAULT);
}


/* Each task ran want times? */
static void ticks_check(const tick_t* t,
                        size_t n,
                        uint64_t want,
                        const char* where) {
  size_t i;

  for (i = 0; i < n; i++) {
    if (t[i].runs != want) {
      bench_fail("%s: task %zu ran %llu times, not %llu", where, i,
                 (unsigned long long) t[i].runs, (unsigned long long) want);
      return;
    }
  }
}


void bench_s12_manual_clock(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_sched_options_t so;
  uvs_worker_t w;
  tick_t* t;
  bench_row_t* one;
  bench_row_t* stepped;
  uint64_t cpu0;
  uint64_t s;
  size_t n;
  int run;

  n = cfg->clock_tasks;
  one = bench_row("s12.advance-24h",
                  "manual clock: 10k periodic (1 s) tasks, one 24 h advance",
                  "ms CPU", BENCH_LE, 1000.0, 1);
  stepped =
      bench_row("s12.step", "manual clock: 10k periodic (1 s) tasks, 1 s steps",
                "ns/grid point", BENCH_INFO, NAN, 1);
  t = bench_alloc(n, sizeof(*t));
  bench_loop_init(&loop);
  memset(&so, 0, sizeof(so));
  so.manual_clock = 1;
  if (uvs_sched_init(&loop, &sched, &so) != 0)
    abort();
  if (uvs_worker_init(&sched, &w, UVS_LOOP) != 0)
    abort();

  for (run = 0; run < cfg->runs; run++) {
    bench_arm("s12 one advance");
    ticks_start(&w, t, n);
    cpu0 = bench_process_cpu();
    if (uvs_clock_advance(&sched, 24ull * 3600 * 1000) != 0)
      abort();
    uv_run(&loop, UV_RUN_DEFAULT);
    bench_row_add(one, (double) (bench_process_cpu() - cpu0) / 1e6, NAN);
    /* Every grid point passed while the task waited: one run for all. */
    ticks_check(t, n, 1, "s12 one advance");
    ticks_stop(&loop, t, n);

    bench_arm("s12 steps");
    ticks_start(&w, t, n);
    cpu0 = bench_process_cpu();
    for (s = 0; s < cfg->clock_steps; s++) {
      if (uvs_clock_advance(&sched, 1000) != 0)
        abort();
      uv_run(&loop, UV_RUN_DEFAULT);
    }
    bench_row_add(stepped,
                  (double) (bench_process_cpu() - cpu0) /
                      ((double) n * (double) cfg->clock_steps),
                  NAN);
    /* Each grid point exactly once. */
    ticks_check(t, n, cfg->clock_steps, "s12 steps");
    ticks_stop(&loop, t, n);
  }

  /* No bench_check_stats: a periodic task counts one schedule and many
   * runs. */
  bench_sched_close(&loop, &sched, "s12");
  bench_loop_close(&loop, "s12");
  bench_free(t);
}
