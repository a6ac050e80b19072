/* Pool workers: throughput from the loop thread (s1, s2), from a foreign
 * thread (s3), and the allocation-free intrusive path against uvs_post
 * (s8). Tasks are empty but for the order check; throughput is end to end,
 * from the first schedule call to the last run observed.
 */

#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static double per_second(size_t n, uint64_t t0, uint64_t t1) {
  if (t1 <= t0)
    return NAN;
  return (double) n * 1e9 / (double) (t1 - t0);
}


static void sched_open(uv_loop_t* loop,
                       uvs_sched_t* s,
                       uvs_worker_t* workers,
                       size_t n,
                       uvs_where_t where) {
  size_t i;

  if (uvs_sched_init(loop, s, NULL) != 0)
    abort();
  for (i = 0; i < n; i++)
    if (uvs_worker_init(s, &workers[i], where) != 0)
      abort();
}


typedef struct {
  uv_async_t async;
  void (*fn)(void*);
  void* arg;
} submit_t;


static void submit_cb(uv_async_t* handle) {
  submit_t* sub;

  sub = handle->data;
  sub->fn(sub->arg);
  uv_close((uv_handle_t*) handle, NULL);
}


void bench_submit(uv_loop_t* loop, int in_cb, void (*fn)(void*), void* arg) {
  submit_t sub;

  if (!in_cb) {
    fn(arg);
    uv_run(loop, UV_RUN_DEFAULT);
    return;
  }
  sub.fn = fn;
  sub.arg = arg;
  if (uv_async_init(loop, &sub.async, submit_cb) != 0)
    abort();
  sub.async.data = &sub;
  if (uv_async_send(&sub.async) != 0)
    abort();
  uv_run(loop, UV_RUN_DEFAULT);
}


static void rr_uvs_submit(void* arg) {
  bench_rr_t* rr;
  bench_utask_t* t;
  size_t r;
  size_t w;

  rr = arg;
  for (r = 0; r < rr->per; r++) {
    for (w = 0; w < rr->nworkers; w++) {
      t = &rr->tasks[r * rr->nworkers + w];
      uvs_task_init(&t->task, bench_utask_run, NULL);
      t->task.data = &rr->lanes[w];
      t->seq = r;
      rr->err = uvs_schedule(&rr->workers[w], &t->task);
      if (rr->err != 0)
        return;
    }
  }
  rr->t_sched = uv_hrtime();
}


double bench_rr_uvs(bench_rr_t* rr, const char* where) {
  size_t total;
  uint64_t cpu0;

  total = rr->nworkers * rr->per;
  bench_count_reset(&rr->count, total);
  bench_lanes_reset(rr->lanes, rr->nworkers, &rr->count);
  bench_arm(where);

  cpu0 = bench_process_cpu();
  rr->t0 = uv_hrtime();
  rr->err = 0;
  bench_submit(rr->loop, rr->in_cb, rr_uvs_submit, rr);
  rr->cpu = bench_process_cpu() - cpu0;
  rr->t_end = bench_count_end(&rr->count);
  if (rr->err != 0) {
    bench_fail("%s: uvs_schedule: %s", where, uv_strerror(rr->err));
    return NAN;
  }

  if (bench_count_ran(&rr->count) != total) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&rr->count), total);
    return NAN;
  }
  bench_lanes_check(rr->lanes, rr->nworkers, rr->per, where);
  return per_second(total, rr->t0, rr->t_end);
}


typedef struct {
  bench_rr_t* rr;
  bench_raw_ctx_t* ctx;
  bench_raw_t* raw;
  size_t total;
} raw_submit_t;


static void rr_raw_submit(void* arg) {
  raw_submit_t* rs;
  size_t i;

  rs = arg;
  for (i = 0; i < rs->total; i++) {
    rs->raw[i].idx = (uint32_t) i;
    bench_raw_submit(rs->rr->loop, rs->ctx, &rs->raw[i]);
  }
}


double bench_rr_raw(bench_rr_t* rr,
                    bench_raw_t* raw,
                    unsigned char* hits,
                    const char* where) {
  bench_raw_ctx_t ctx;
  raw_submit_t rs;
  size_t total;
  size_t i;
  uint64_t cpu0;

  total = rr->nworkers * rr->per;
  bench_count_reset(&rr->count, total);
  memset(hits, 0, total);
  ctx.count = &rr->count;
  ctx.hits = hits;
  rs.rr = rr;
  rs.ctx = &ctx;
  rs.raw = raw;
  rs.total = total;
  bench_arm(where);

  cpu0 = bench_process_cpu();
  rr->t0 = uv_hrtime();
  bench_submit(rr->loop, rr->in_cb, rr_raw_submit, &rs);
  rr->cpu = bench_process_cpu() - cpu0;
  rr->t_end = bench_count_end(&rr->count);

  for (i = 0; i < total; i++) {
    if (hits[i] != 1) {
      bench_fail("%s: task %zu ran %u times", where, i, hits[i]);
      return NAN;
    }
  }
  return per_second(total, rr->t0, rr->t_end);
}


typedef struct {
  bench_naive_t* q;
  bench_ntask_t* tasks;
  bench_lane_t* lane;
  size_t n;
} naive_submit_t;


static void naive_submit(void* arg) {
  naive_submit_t* ns;
  size_t i;

  ns = arg;
  for (i = 0; i < ns->n; i++) {
    ns->tasks[i].node.run = bench_ntask_run;
    ns->tasks[i].lane = ns->lane;
    ns->tasks[i].seq = i;
    bench_naive_push(ns->q, &ns->tasks[i].node);
  }
}


/* The naive ordered worker fed from the loop thread (in_cb as in
 * bench_submit). */
static double naive_one(uv_loop_t* loop,
                        bench_naive_t* q,
                        bench_ntask_t* tasks,
                        size_t n,
                        int in_cb,
                        uint64_t* cpu,
                        const char* where) {
  bench_count_t count;
  bench_lane_t lane;
  naive_submit_t ns;
  uint64_t t0;
  uint64_t cpu0;

  bench_count_reset(&count, n);
  bench_lanes_reset(&lane, 1, &count);
  ns.q = q;
  ns.tasks = tasks;
  ns.lane = &lane;
  ns.n = n;
  bench_arm(where);

  cpu0 = bench_process_cpu();
  t0 = uv_hrtime();
  bench_submit(loop, in_cb, naive_submit, &ns);
  *cpu = bench_process_cpu() - cpu0;

  if (bench_count_ran(&count) != n) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&count), n);
    return NAN;
  }
  bench_lanes_check(&lane, 1, n, where);
  return per_second(n, t0, bench_count_end(&count));
}


/* ---- s1: one pool worker, from the loop thread ----------------------------
 * Twice: scheduled before uv_run() (where libuv starts the baselines'
 * uv_queue_work at once and uvsched's drain waits for the loop to run),
 * then from an I/O callback inside uv_run(), where servers schedule.
 */

static const char* const s1_names[2][6] = {
    {"s1.raw", "1 pool worker, from loop, vs raw uv_queue_work", "s1.naive",
     "1 pool worker, from loop, vs naive ordered", "s1", "s1.cpu"},
    {"s1.cb.raw", "1 pool worker, from an I/O callback, vs raw uv_queue_work",
     "s1.cb.naive", "1 pool worker, from an I/O callback, vs naive ordered",
     "s1.cb", "s1.cb.cpu"},
};


void bench_s1_pool_one(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t worker;
  bench_lane_t lane;
  bench_naive_t naive;
  bench_rr_t rr;
  bench_utask_t* utasks;
  bench_ntask_t* ntasks;
  bench_raw_t* raw;
  unsigned char* hits;
  bench_row_t* vs_raw;
  bench_row_t* vs_naive;
  bench_row_t* drains_row;
  uvs_stats_t st0;
  uvs_stats_t st1;
  const char* const* nm;
  double u[BENCH_MAX_RUNS];
  double cpu_u[BENCH_MAX_RUNS];
  double cpu_r[BENCH_MAX_RUNS];
  double cpu_n[BENCH_MAX_RUNS];
  double drains[BENCH_MAX_RUNS];
  double posts[BENCH_MAX_RUNS];
  double r_rate;
  double n_rate;
  char what[64];
  uint64_t cpu;
  uint64_t posts0;
  size_t n;
  int cb;
  int run;
  int i;

  n = cfg->pool_tasks;
  utasks = bench_alloc(n, sizeof(*utasks));
  ntasks = bench_alloc(n, sizeof(*ntasks));
  raw = bench_alloc(n, sizeof(*raw));
  hits = bench_alloc(n, 1);
  bench_loop_init(&loop);
  sched_open(&loop, &sched, &worker, 1, UVS_POOL);
  if (bench_naive_init(&loop, &naive) != 0)
    abort();
  memset(&rr, 0, sizeof(rr));
  rr.loop = &loop;
  rr.workers = &worker;
  rr.lanes = &lane;
  rr.nworkers = 1;
  rr.per = n;
  rr.tasks = utasks;

  for (cb = 0; cb < 2; cb++) {
    nm = s1_names[cb];
    rr.in_cb = cb;
    vs_raw = bench_row(nm[0], nm[1], "tasks/s", BENCH_GE, 5.0, 0);
    vs_naive = bench_row(nm[2], nm[3], "tasks/s", BENCH_GE, 2.5, 0);
    /* Issue item 9, measured under this load. */
    drains_row = cb != 0 ? NULL
                         : bench_row("s9.drains-loop",
                                     "pool submissions, loop -> 1 pool "
                                     "worker, vs naive",
                                     "per 1000 tasks", BENCH_INFO, NAN, 0);
    for (run = 0; run < cfg->runs; run++) {
      u[run] = r_rate = n_rate = NAN;
      drains[run] = posts[run] = NAN;
      for (i = 0; i < 3; i++) {
        switch (bench_order(run, 3, i)) {
          case 0:
            uvs_sched_stats(&sched, &st0);
            u[run] = bench_rr_uvs(&rr, "s1 uvsched");
            uvs_sched_stats(&sched, &st1);
            cpu_u[run] = (double) rr.cpu / (double) n;
            drains[run] = (double) (st1.drains - st0.drains) * 1000.0 / n;
            snprintf(what, sizeof(what), "%s.uvsched", nm[4]);
            bench_note(cfg, what, run, u[run], "tasks/s");
            break;
          case 1:
            r_rate = bench_rr_raw(&rr, raw, hits, "s1 raw uv_queue_work");
            cpu_r[run] = (double) rr.cpu / (double) n;
            snprintf(what, sizeof(what), "%s.raw", nm[4]);
            bench_note(cfg, what, run, r_rate, "tasks/s");
            break;
          default:
            posts0 = naive.posts;
            n_rate = naive_one(&loop, &naive, ntasks, n, cb, &cpu, "s1 naive");
            cpu_n[run] = (double) cpu / (double) n;
            posts[run] = (double) (naive.posts - posts0) * 1000.0 / n;
            snprintf(what, sizeof(what), "%s.naive", nm[4]);
            bench_note(cfg, what, run, n_rate, "tasks/s");
            break;
        }
      }
      bench_row_add(vs_raw, u[run], r_rate);
      bench_row_add(vs_naive, u[run], n_rate);
      if (drains_row != NULL)
        bench_row_add(drains_row, drains[run], posts[run]);
    }
    snprintf(what, sizeof(what), "%s.uvsched", nm[5]);
    bench_figure(what, bench_median(cpu_u, cfg->runs), "ns/task");
    snprintf(what, sizeof(what), "%s.raw", nm[5]);
    bench_figure(what, bench_median(cpu_r, cfg->runs), "ns/task");
    snprintf(what, sizeof(what), "%s.naive", nm[5]);
    bench_figure(what, bench_median(cpu_n, cfg->runs), "ns/task");
  }

  bench_check_stats(&sched, "s1");
  bench_naive_close(&naive);
  bench_sched_close(&loop, &sched, "s1");
  bench_loop_close(&loop, "s1");
  bench_free(hits);
  bench_free(raw);
  bench_free(ntasks);
  bench_free(utasks);
}


/* ---- s2: many pool workers, round-robin from the loop ---------------------
 */

void bench_s2_pool_many(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t* workers;
  bench_lane_t* lanes;
  bench_rr_t rr;
  bench_utask_t* utasks;
  bench_raw_t* raw;
  unsigned char* hits;
  bench_row_t* row;
  double u;
  double r;
  double cpu_u[BENCH_MAX_RUNS];
  double cpu_r[BENCH_MAX_RUNS];
  size_t total;
  int run;
  int i;

  total = cfg->many_workers * cfg->many_per;
  row = bench_row("s2.raw", "10k pool workers x 100, round-robin, vs raw",
                  "tasks/s", BENCH_GE, 3.0, 0);

  workers = bench_alloc(cfg->many_workers, sizeof(*workers));
  lanes = bench_alloc(cfg->many_workers, sizeof(*lanes));
  utasks = bench_alloc(total, sizeof(*utasks));
  raw = bench_alloc(total, sizeof(*raw));
  hits = bench_alloc(total, 1);
  bench_loop_init(&loop);
  sched_open(&loop, &sched, workers, cfg->many_workers, UVS_POOL);
  memset(&rr, 0, sizeof(rr));
  rr.loop = &loop;
  rr.workers = workers;
  rr.lanes = lanes;
  rr.nworkers = cfg->many_workers;
  rr.per = cfg->many_per;
  rr.tasks = utasks;

  for (run = 0; run < cfg->runs; run++) {
    u = r = NAN;
    for (i = 0; i < 2; i++) {
      if (bench_order(run, 2, i) == 0) {
        u = bench_rr_uvs(&rr, "s2 uvsched");
        cpu_u[run] = (double) rr.cpu / (double) total;
        bench_note(cfg, "s2.uvsched", run, u, "tasks/s");
      } else {
        r = bench_rr_raw(&rr, raw, hits, "s2 raw uv_queue_work");
        cpu_r[run] = (double) rr.cpu / (double) total;
        bench_note(cfg, "s2.raw", run, r, "tasks/s");
      }
    }
    bench_row_add(row, u, r);
  }
  bench_figure("s2.cpu.uvsched", bench_median(cpu_u, cfg->runs), "ns/task");
  bench_figure("s2.cpu.raw", bench_median(cpu_r, cfg->runs), "ns/task");

  bench_check_stats(&sched, "s2");
  bench_sched_close(&loop, &sched, "s2");
  bench_loop_close(&loop, "s2");
  bench_free(hits);
  bench_free(raw);
  bench_free(utasks);
  bench_free(lanes);
  bench_free(workers);
}


/* ---- s3: one pool worker fed by a foreign thread ---------------------------
 */

void bench_feed_uvs(void* arg) {
  bench_feed_t* f;
  bench_utask_t* t;
  size_t i;
  int err;

  f = arg;
  for (i = 0; i < f->n; i++) {
    t = &f->utasks[i];
    uvs_task_init(&t->task, bench_utask_run, NULL);
    t->task.data = f->lane;
    t->seq = i;
    err = uvs_schedule(f->worker, &t->task);
    if (err != 0) {
      f->err = err;
      return;
    }
  }
}


/* uvs_post from the foreign thread: each post's argument is one of the
 * feed's task structs, used only for its lane and sequence number. */
static void feed_post_fn(void* arg) {
  bench_utask_run(&((bench_utask_t*) arg)->task);
}


static void feed_posts(void* arg) {
  bench_feed_t* f;
  bench_utask_t* t;
  size_t i;
  int err;

  f = arg;
  for (i = 0; i < f->n; i++) {
    t = &f->utasks[i];
    t->task.data = f->lane;
    t->seq = i;
    err = uvs_post(f->worker, feed_post_fn, t);
    if (err != 0) {
      f->err = err;
      return;
    }
  }
}


void bench_feed_nodes(void* arg) {
  bench_feed_t* f;
  bench_ntask_t* t;
  size_t i;

  f = arg;
  for (i = 0; i < f->n; i++) {
    t = &f->ntasks[i];
    t->node.run = bench_ntask_run;
    t->lane = f->lane;
    t->seq = i;
    f->push(f->q, &t->node);
  }
}


void bench_push_naive(void* q, bench_node_t* node) {
  bench_naive_push(q, node);
}


void bench_push_bridge(void* q, bench_node_t* node) {
  bench_bridge_push(q, node);
}


/* What one feed measured (feed()). */
typedef struct {
  uint64_t t_start; /* the producer's first schedule */
  uint64_t t_loop;  /* the loop started */
  uint64_t t_end;   /* the last run */
  uint64_t cpu;     /* process CPU time, producer start to join */
} feed_times_t;


/* Starts a producer running fn(feed), and runs the loop until the last
 * run: at the same time, or with apart set once the producer is done.
 * Checks order and count; returns 0, or -1 after bench_fail(). */
static int feed(uv_loop_t* loop,
                bench_feed_t* f,
                void (*fn)(void*),
                int apart,
                feed_times_t* out,
                const char* where) {
  bench_count_t count;
  bench_lane_t lane;
  bench_thread_t th;
  uv_async_t finish;
  uint64_t cpu0;

  bench_count_reset(&count, f->n);
  bench_lanes_reset(&lane, 1, &count);
  bench_finish_init(loop, &finish);
  count.notify = &finish;
  f->lane = &lane;
  f->err = 0;
  bench_arm(where);

  cpu0 = bench_process_cpu();
  bench_thread_start(&th, fn, f);
  if (apart)
    bench_thread_join(&th);
  out->t_loop = uv_hrtime();
  uv_run(loop, UV_RUN_DEFAULT);
  if (!apart)
    bench_thread_join(&th);
  out->cpu = bench_process_cpu() - cpu0;
  out->t_start = th.t_start;
  out->t_end = bench_count_end(&count);

  if (f->err != 0) {
    bench_fail("%s: uvs_schedule: %s", where, uv_strerror(f->err));
    return -1;
  }
  if (bench_count_ran(&count) != f->n) {
    bench_fail("%s: %llu of %zu tasks ran", where,
               (unsigned long long) bench_count_ran(&count), f->n);
    return -1;
  }
  bench_lanes_check(&lane, 1, f->n, where);
  return 0;
}


double bench_feed_run(uv_loop_t* loop,
                      bench_feed_t* f,
                      void (*fn)(void*),
                      uint64_t* cpu,
                      const char* where) {
  feed_times_t t;
  int err;

  err = feed(loop, f, fn, 0, &t, where);
  *cpu = t.cpu;
  if (err != 0)
    return NAN;
  return per_second(f->n, t.t_start, t.t_end);
}


/* bench_feed_run() with the two sides apart: the producer schedules every
 * task while the loop is not running, then the loop runs them all. Gives
 * each side's own cost per task, without the other on the next core. */
int bench_feed_split(uv_loop_t* loop,
                     bench_feed_t* f,
                     void (*fn)(void*),
                     double* producer_ns,
                     double* consumer_ns,
                     const char* where) {
  feed_times_t t;

  if (feed(loop, f, fn, 1, &t, where) != 0)
    return -1;
  *producer_ns = (double) (t.t_loop - t.t_start) / (double) f->n;
  *consumer_ns = (double) (t.t_end - t.t_loop) / (double) f->n;
  return 0;
}


void bench_s3_pool_foreign(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t worker;
  bench_naive_t naive;
  bench_feed_t f;
  bench_row_t* row;
  bench_row_t* loop_row;
  bench_row_t* drains_row;
  bench_row_t* wakes_row;
  bench_row_t* post_row;
  bench_lane_t lane;
  bench_rr_t rr;
  uvs_stats_t st0;
  uvs_stats_t st1;
  double u;
  double r;
  double l;
  double p;
  double cpu_u[BENCH_MAX_RUNS];
  double cpu_n[BENCH_MAX_RUNS];
  double drains_u[BENCH_MAX_RUNS];
  double drains_n[BENCH_MAX_RUNS];
  double wakes_u[BENCH_MAX_RUNS];
  double wakes_n[BENCH_MAX_RUNS];
  uint64_t cpu;
  uint64_t posts0;
  uint64_t wakes0;
  int run;
  int i;

  row = bench_row("s3.naive", "1 pool worker fed by a foreign thread, vs naive",
                  "tasks/s", BENCH_GE, 2.0, 0);
  /* The same tasks onto the same worker from the loop thread, as s1 does,
   * in the same run: what a foreign producer costs more per task. */
  loop_row = bench_row("s3.vs-loop",
                       "1 pool worker, per task: fed by a foreign thread, "
                       "vs from the loop thread",
                       "ns/task", BENCH_LE, 1.5, 0);
  /* Issue item 9, measured under this load. */
  drains_row = bench_row("s9.drains-foreign",
                         "pool submissions, foreign "
                         "thread -> 1 pool worker, vs naive",
                         "per 1000 tasks", BENCH_INFO, NAN, 0);
  /* uvs_post's per-thread node lists, measured where they matter. */
  post_row = bench_row("s8.post-foreign",
                       "uvs_post vs intrusive uvs_schedule, both from a "
                       "foreign thread, 1 pool worker",
                       "ns/task", BENCH_INFO, NAN, 0);
  wakes_row = bench_row("s9.wakeups-foreign-pool",
                        "loop wake-ups, foreign "
                        "thread -> 1 pool worker, vs naive",
                        "per 1000 tasks", BENCH_INFO, NAN, 0);
  memset(&f, 0, sizeof(f));
  f.n = cfg->pool_tasks;
  f.utasks = bench_alloc(f.n, sizeof(*f.utasks));
  f.ntasks = bench_alloc(f.n, sizeof(*f.ntasks));
  bench_loop_init(&loop);
  sched_open(&loop, &sched, &worker, 1, UVS_POOL);
  if (bench_naive_init(&loop, &naive) != 0)
    abort();
  f.worker = &worker;
  f.push = bench_push_naive;
  f.q = &naive;
  memset(&rr, 0, sizeof(rr));
  rr.loop = &loop;
  rr.workers = &worker;
  rr.lanes = &lane;
  rr.nworkers = 1;
  rr.per = f.n;
  rr.tasks = f.utasks;

  for (run = 0; run < cfg->runs; run++) {
    u = r = l = p = NAN;
    for (i = 0; i < 4; i++) {
      if (bench_order(run, 4, i) == 3) {
        p = bench_feed_run(&loop, &f, feed_posts, &cpu, "s3 uvs_post");
        bench_note(cfg, "s3.post", run, p, "tasks/s");
      } else if (bench_order(run, 4, i) == 2) {
        l = bench_rr_uvs(&rr, "s3 uvsched from the loop");
        bench_note(cfg, "s3.loop", run, l, "tasks/s");
      } else if (bench_order(run, 4, i) == 0) {
        uvs_sched_stats(&sched, &st0);
        u = bench_feed_run(&loop, &f, bench_feed_uvs, &cpu, "s3 uvsched");
        uvs_sched_stats(&sched, &st1);
        cpu_u[run] = (double) cpu / (double) f.n;
        drains_u[run] = (double) (st1.drains - st0.drains) * 1000.0 / f.n;
        wakes_u[run] = (double) (st1.wakeups - st0.wakeups) * 1000.0 / f.n;
        bench_note(cfg, "s3.uvsched", run, u, "tasks/s");
      } else {
        posts0 = naive.posts;
        wakes0 = naive.wakeups;
        r = bench_feed_run(&loop, &f, bench_feed_nodes, &cpu, "s3 naive");
        cpu_n[run] = (double) cpu / (double) f.n;
        drains_n[run] = (double) (naive.posts - posts0) * 1000.0 / f.n;
        wakes_n[run] = (double) (naive.wakeups - wakes0) * 1000.0 / f.n;
        bench_note(cfg, "s3.naive", run, r, "tasks/s");
      }
    }
    bench_row_add(row, u, r);
    bench_row_add(loop_row, 1e9 / u, 1e9 / l);
    bench_row_add(post_row, 1e9 / p, 1e9 / u);
    bench_row_add(drains_row, drains_u[run], drains_n[run]);
    bench_row_add(wakes_row, wakes_u[run], wakes_n[run]);
  }
  bench_figure("s3.cpu.uvsched", bench_median(cpu_u, cfg->runs), "ns/task");
  bench_figure("s3.cpu.naive", bench_median(cpu_n, cfg->runs), "ns/task");

  bench_check_stats(&sched, "s3");
  bench_naive_close(&naive);
  bench_sched_close(&loop, &sched, "s3");
  bench_loop_close(&loop, "s3");
  bench_free(f.ntasks);
  bench_free(f.utasks);
}


/* ---- s8: allocations on the intrusive path; uvs_post ----------------------
 */

typedef struct post_item_s {
  bench_lane_t* lane;
  uint64_t seq;
} post_item_t;


static void post_fn(void* arg) {
  post_item_t* it;

  it = arg;
  bench_lane_hit(it->lane, it->seq);
}


static double post_run(uv_loop_t* loop,
                       uvs_worker_t* worker,
                       post_item_t* items,
                       size_t n,
                       unsigned long* allocs,
                       const char* where) {
  bench_count_t count;
  bench_lane_t lane;
  unsigned long a0;
  uint64_t t0;
  size_t i;
  int err;

  bench_count_reset(&count, n);
  bench_lanes_reset(&lane, 1, &count);
  bench_arm(where);
  *allocs = 0;

  a0 = uvs__alloc_count();
  t0 = uv_hrtime();
  for (i = 0; i < n; i++) {
    items[i].lane = &lane;
    items[i].seq = i;
    err = uvs_post(worker, post_fn, &items[i]);
    if (err != 0) {
      bench_fail("%s: uvs_post: %s", where, uv_strerror(err));
      uv_run(loop, UV_RUN_DEFAULT);
      return NAN;
    }
  }
  uv_run(loop, UV_RUN_DEFAULT);
  *allocs = uvs__alloc_count() - a0;

  if (bench_count_ran(&count) != n) {
    bench_fail("%s: %llu of %zu posts ran", where,
               (unsigned long long) bench_count_ran(&count), n);
    return NAN;
  }
  bench_lanes_check(&lane, 1, n, where);
  return (double) (bench_count_end(&count) - t0) / (double) n;
}


void bench_s8_alloc(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t worker;
  bench_lane_t lane;
  bench_rr_t rr;
  bench_utask_t* utasks;
  post_item_t* items;
  bench_row_t* allocs_row;
  bench_row_t* post_row;
  unsigned long a0;
  unsigned long allocs;
  double intrusive;
  double post;
  double intrusive_allocs;
  double post_allocs[BENCH_MAX_RUNS];
  size_t n;
  int run;
  int i;

  n = cfg->post_tasks;
  allocs_row =
      bench_row("s8.allocs", "allocations per uvs_schedule (intrusive)",
                "allocs/task", BENCH_LE, 0.0, 1);
  bench_row_agg(allocs_row, BENCH_MAX);
  post_row = bench_row("s8.post",
                       "uvs_post vs intrusive uvs_schedule, 1 pool "
                       "worker",
                       "ns/task", BENCH_LE, 1.3, 0);

  utasks = bench_alloc(n, sizeof(*utasks));
  items = bench_alloc(n, sizeof(*items));
  bench_loop_init(&loop);
  sched_open(&loop, &sched, &worker, 1, UVS_POOL);
  memset(&rr, 0, sizeof(rr));
  rr.loop = &loop;
  rr.workers = &worker;
  rr.lanes = &lane;
  rr.nworkers = 1;
  rr.per = n;
  rr.tasks = utasks;

  /* One untimed pass of each first, so that the rows are about the steady
   * state: the post pool grows here, and so would anything the library
   * sets up lazily. */
  a0 = uvs__alloc_count();
  bench_rr_uvs(&rr, "s8 warm-up intrusive");
  bench_figure("s8.allocs.cold",
               (double) (uvs__alloc_count() - a0) / (double) n, "allocs/task");
  post_run(&loop, &worker, items, n, &allocs, "s8 warm-up uvs_post");
  bench_figure("s8.post.allocs.cold", (double) allocs / (double) n,
               "allocs/post");

  for (run = 0; run < cfg->runs; run++) {
    intrusive = post = intrusive_allocs = NAN;
    for (i = 0; i < 2; i++) {
      if (bench_order(run, 2, i) == 0) {
        a0 = uvs__alloc_count();
        intrusive = bench_rr_uvs(&rr, "s8 intrusive");
        intrusive_allocs = (double) (uvs__alloc_count() - a0) / (double) n;
        if (!isnan(intrusive))
          intrusive = 1e9 / intrusive; /* tasks/s to ns/task */
        bench_note(cfg, "s8.intrusive", run, intrusive, "ns/task");
      } else {
        post = post_run(&loop, &worker, items, n, &allocs, "s8 uvs_post");
        post_allocs[run] = (double) allocs / (double) n;
        bench_note(cfg, "s8.post", run, post, "ns/task");
      }
    }
    bench_row_add(allocs_row, intrusive_allocs, NAN);
    bench_row_add(post_row, post, intrusive);
  }
  bench_figure("s8.post.allocs", bench_median(post_allocs, cfg->runs),
               "allocs/post");

  bench_check_stats(&sched, "s8");
  bench_sched_close(&loop, &sched, "s8");
  bench_loop_close(&loop, "s8");
  bench_free(items);
  bench_free(utasks);
}
