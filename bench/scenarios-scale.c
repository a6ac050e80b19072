/* s7: costs that must not grow with scale. (a) Per-task cost of the same
 * load spread over 100,000 pool workers against one worker, and against
 * raw uv_queue_work (one request per task, unordered). (b) Schedule +
 * cancel of delayed tasks with 10,000,000 others pending against 1,000.
 * But for the raw row, both sides of each row are uvsched; the small case
 * is the baseline.
 */

#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


static void never_run(uvs_task_t* task) {
  (void) task;
  bench_fail("s7: a preloaded task ran");
}


typedef struct pairs_ctx_s {
  uint64_t cancelled; /* loop thread */
  uint64_t other;
} pairs_ctx_t;


static void pair_run(uvs_task_t* task) {
  ((pairs_ctx_t*) task->data)->other++;
}


static void pair_done(uvs_task_t* task, int status) {
  pairs_ctx_t* ctx;

  ctx = task->data;
  if (status == UV_ECANCELED)
    ctx->cancelled++;
  else
    ctx->other++;
}


static void pend_closed(uvs_sched_t* sched) {
  (*(int*) sched->data)++;
}


typedef struct pend_s {
  uvs_sched_t sched;
  uvs_worker_t worker;
  uvs_task_t* preload;
  size_t npreload;
} pend_t;


/* Fills a scheduler with n delayed tasks due in 1 to 60 minutes, so that
 * none falls due during the scenario. Returns ns per schedule. */
static double pend_fill(uv_loop_t* loop, pend_t* p, size_t n, uint64_t seed) {
  uint64_t st;
  uint64_t t0;
  size_t i;
  int err;

  if (uvs_sched_init(loop, &p->sched, NULL) != 0 ||
      uvs_worker_init(&p->sched, &p->worker, UVS_LOOP) != 0)
    abort();
  p->npreload = n;
  p->preload = bench_alloc(n, sizeof(*p->preload));
  st = seed;
  t0 = uv_hrtime();
  for (i = 0; i < n; i++) {
    uvs_task_init(&p->preload[i], never_run, NULL);
    err = uvs_schedule_after(&p->worker, &p->preload[i],
                             60000 + bench_rand(&st) % 3540000);
    if (err != 0) {
      bench_fail("s7: preload: uvs_schedule_after: %s", uv_strerror(err));
      break;
    }
  }
  return (double) (uv_hrtime() - t0) / (double) (n ? n : 1);
}


/* m schedule_after + cancel pairs on a loaded scheduler; returns ns of
 * thread CPU per pair, or NAN. The hand-backs are delivered after the
 * clock stops, with non-blocking loop turns (the preloaded tasks keep the
 * scheduler's timer armed, so UV_RUN_DEFAULT would wait for them). */
static double pend_pairs(uv_loop_t* loop,
                         pend_t* p,
                         uvs_task_t* pairs,
                         const uint64_t* delays,
                         size_t m,
                         pairs_ctx_t* ctx,
                         const char* where) {
  uint64_t cpu0;
  uint64_t cpu1;
  uint64_t deadline;
  size_t i;
  int err;

  memset(ctx, 0, sizeof(*ctx));
  bench_arm(where);
  cpu0 = bench_thread_cpu();
  for (i = 0; i < m; i++) {
    err = uvs_schedule_after(&p->worker, &pairs[i], delays[i]);
    if (err != 0) {
      bench_fail("%s: uvs_schedule_after: %s", where, uv_strerror(err));
      break;
    }
  }
  m = i;
  for (i = 0; i < m; i++) {
    err = uvs_task_cancel(&pairs[i]);
    if (err != 0)
      bench_fail("%s: uvs_task_cancel: %s", where, uv_strerror(err));
  }
  cpu1 = bench_thread_cpu();

  deadline = uv_hrtime() + 10 * (uint64_t) 1000000000;
  while (ctx->cancelled + ctx->other < m && uv_hrtime() < deadline)
    uv_run(loop, UV_RUN_NOWAIT);
  if (ctx->cancelled != m || ctx->other != 0) {
    bench_fail(
        "%s: %zu cancelled tasks: %llu handed back cancelled, %llu "
        "ran or otherwise",
        where, m, (unsigned long long) ctx->cancelled,
        (unsigned long long) ctx->other);
    return NAN;
  }
  return (double) (cpu1 - cpu0) / (double) m;
}


/* ns per schedule call of the last bench_rr_uvs() of rr. */
static double per_task(const bench_rr_t* rr) {
  return (double) (rr->t_sched - rr->t0) / (double) (rr->nworkers * rr->per);
}


void bench_s7_scale(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t s_one;
  uvs_sched_t s_many;
  uvs_worker_t one;
  uvs_worker_t* many;
  bench_lane_t* lanes;
  bench_utask_t* utasks;
  bench_rr_t rr_one;
  bench_rr_t rr_many;
  pend_t big;
  pend_t small;
  uvs_task_t* pairs;
  uint64_t* delays;
  pairs_ctx_t ctx;
  bench_row_t* workers_row;
  bench_row_t* raw_row;
  bench_row_t* pending_row;
  bench_raw_t* raw;
  unsigned char* hits;
  double c;
  double sched_many[BENCH_MAX_RUNS];
  double sched_one[BENCH_MAX_RUNS];
  uvs_stats_t st;
  uint64_t t0;
  int closed;
  double a;
  double b;
  double fill;
  size_t per;
  size_t i;
  int run;
  int k;

  workers_row = bench_row("s7.workers",
                          "per-task cost, 1M tasks over 100k "
                          "pool workers, vs 1 worker",
                          "ns/task", BENCH_LE, 1.5, 0);
  raw_row = bench_row("s7.raw",
                      "per-task cost, 1M tasks over 100k pool workers, "
                      "vs raw uv_queue_work (1M requests)",
                      "ns/task", BENCH_LE, 0.75, 0);
  pending_row = bench_row("s7.pending",
                          "schedule_after + cancel with 10M "
                          "pending, vs 1k pending",
                          "ns/pair", BENCH_LE, 1.5, 0);

  /* (a) many workers */
  per = cfg->scale_tasks / cfg->scale_workers;
  if (per == 0)
    per = 1;
  many = bench_alloc(cfg->scale_workers, sizeof(*many));
  lanes = bench_alloc(cfg->scale_workers, sizeof(*lanes));
  utasks = bench_alloc(cfg->scale_workers * per, sizeof(*utasks));
  raw = bench_alloc(cfg->scale_workers * per, sizeof(*raw));
  hits = bench_alloc(cfg->scale_workers * per, 1);
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &s_one, NULL) != 0 ||
      uvs_worker_init(&s_one, &one, UVS_POOL) != 0 ||
      uvs_sched_init(&loop, &s_many, NULL) != 0)
    abort();
  for (i = 0; i < cfg->scale_workers; i++)
    if (uvs_worker_init(&s_many, &many[i], UVS_POOL) != 0)
      abort();
  memset(&rr_one, 0, sizeof(rr_one));
  rr_one.loop = &loop;
  rr_one.workers = &one;
  rr_one.lanes = lanes;
  rr_one.nworkers = 1;
  rr_one.per = cfg->scale_workers * per;
  rr_one.tasks = utasks;
  rr_many = rr_one;
  rr_many.workers = many;
  rr_many.nworkers = cfg->scale_workers;
  rr_many.per = per;

  for (run = 0; run < cfg->runs; run++) {
    a = b = c = NAN;
    for (k = 0; k < 3; k++) {
      switch (bench_order(run, 3, k)) {
        case 0:
          a = 1e9 / bench_rr_uvs(&rr_many, "s7 100k workers");
          sched_many[run] = per_task(&rr_many);
          bench_note(cfg, "s7.workers.many", run, a, "ns/task");
          break;
        case 1:
          b = 1e9 / bench_rr_uvs(&rr_one, "s7 1 worker");
          sched_one[run] = per_task(&rr_one);
          bench_note(cfg, "s7.workers.one", run, b, "ns/task");
          break;
        default:
          c = 1e9 / bench_rr_raw(&rr_many, raw, hits, "s7 raw uv_queue_work");
          bench_note(cfg, "s7.raw", run, c, "ns/task");
          break;
      }
    }
    bench_row_add(workers_row, a, b);
    bench_row_add(raw_row, a, c);
  }
  /* The schedule calls alone, made before uv_run() with no drain running:
   * what a schedule costs when its worker is cold. */
  bench_figure("s7.schedule.many", bench_median(sched_many, cfg->runs),
               "ns/task");
  bench_figure("s7.schedule.one", bench_median(sched_one, cfg->runs),
               "ns/task");
  bench_check_stats(&s_one, "s7 1 worker");
  bench_check_stats(&s_many, "s7 100k workers");
  bench_sched_close(&loop, &s_one, "s7 1 worker");
  bench_sched_close(&loop, &s_many, "s7 100k workers");
  bench_free(hits);
  bench_free(raw);
  bench_free(utasks);
  bench_free(lanes);
  bench_free(many);

  /* (b) many pending */
  bench_arm("s7 preload");
  fill = pend_fill(&loop, &big, cfg->scale_big, 0xb16);
  bench_figure("s7.preload.big", fill, "ns/schedule");
  fill = pend_fill(&loop, &small, cfg->scale_small, 0x5a11);
  bench_figure("s7.preload.small", fill, "ns/schedule");
  pairs = bench_alloc(cfg->scale_pairs, sizeof(*pairs));
  delays = bench_alloc(cfg->scale_pairs, sizeof(*delays));
  bench_delays(delays, cfg->scale_pairs, 1, cfg->cancel_max_ms, 0xca11);
  for (i = 0; i < cfg->scale_pairs; i++) {
    uvs_task_init(&pairs[i], pair_run, pair_done);
    pairs[i].data = &ctx;
  }

  for (run = 0; run < cfg->runs; run++) {
    a = b = NAN;
    for (k = 0; k < 2; k++) {
      if (bench_order(run, 2, k) == 0) {
        a = pend_pairs(&loop, &big, pairs, delays, cfg->scale_pairs, &ctx,
                       "s7 10M pending");
        bench_note(cfg, "s7.pending.big", run, a, "ns/pair");
      } else {
        b = pend_pairs(&loop, &small, pairs, delays, cfg->scale_pairs, &ctx,
                       "s7 1k pending");
        bench_note(cfg, "s7.pending.small", run, b, "ns/pair");
      }
    }
    bench_row_add(pending_row, a, b);
  }

  uvs_sched_stats(&big.sched, &st);
  if (st.pending != big.npreload)
    bench_fail("s7: %llu tasks pending, %zu preloaded",
               (unsigned long long) st.pending, big.npreload);
  /* Both closes first: a scheduler still open would keep the loop waiting
   * for its preloaded tasks. */
  bench_arm("s7 close");
  closed = 0;
  big.sched.data = &closed;
  small.sched.data = &closed;
  t0 = uv_hrtime();
  if (uvs_sched_close(&big.sched, UVS_CANCEL, pend_closed) != 0 ||
      uvs_sched_close(&small.sched, UVS_CANCEL, pend_closed) != 0)
    bench_fail("s7: uvs_sched_close failed");
  uv_run(&loop, UV_RUN_DEFAULT);
  bench_figure(
      "s7.close",
      (double) (uv_hrtime() - t0) / (double) (big.npreload + small.npreload),
      "ns/task");
  if (closed != 2)
    bench_fail("s7: %d of 2 scheduler close callbacks ran", closed);
  bench_loop_close(&loop, "s7");
  bench_free(delays);
  bench_free(pairs);
  bench_free(small.preload);
  bench_free(big.preload);
}
