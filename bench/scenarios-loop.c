/* A loop worker fed by a foreign thread (s4): throughput against a
 * mutex-protected list bridged with uv_async_send, and one-way latency to
 * an idle loop. The latency probe is shared with s9's back-to-back case.
 */

#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct lat_s lat_t;

typedef struct lat_task_s {
  uvs_task_t task;   /* uvsched probe */
  bench_node_t node; /* bridge probe */
  uint64_t t0;       /* uv_hrtime() just before the schedule or push */
  double* out;       /* where its latency goes */
  lat_t* l;
} lat_task_t;

struct lat_s {
  uvs_worker_t* worker;
  bench_bridge_t* bridge;
  lat_task_t* tasks;
  size_t n; /* probes in all */
  unsigned gap_us;
  int first;
  double* out_uvs;
  double* out_bridge;
  uv_sem_t sem;
  uv_async_t finish;
  bench_count_t count;
  int err;
};


static void lat_arrive(lat_task_t* t) {
  lat_t* l;

  l = t->l;
  *t->out = (double) (uv_hrtime() - t->t0);
  uv_sem_post(&l->sem);
  bench_count_hit(&l->count);
}


static void lat_uvs_run(uvs_task_t* task) {
  lat_arrive(task->data);
}


static void lat_node_run(bench_node_t* node) {
  lat_arrive((lat_task_t*) ((char*) node - offsetof(lat_task_t, node)));
}


static void sleep_us(unsigned us) {
  struct timespec ts;

  ts.tv_sec = us / 1000000;
  ts.tv_nsec = (long) (us % 1000000) * 1000;
  while (nanosleep(&ts, &ts) != 0) {
  }
}


static void lat_producer(void* arg) {
  lat_t* l;
  lat_task_t* t;
  size_t k;
  int err;

  l = arg;
  for (k = 0; k < l->n; k++) {
    t = &l->tasks[k];
    t->l = l;
    if ((k + (size_t) l->first) % 2 == 0) {
      t->out = &l->out_uvs[k / 2];
      uvs_task_init(&t->task, lat_uvs_run, NULL);
      t->task.data = t;
      t->t0 = uv_hrtime();
      err = uvs_schedule(l->worker, &t->task);
      if (err != 0) {
        l->err = err;
        uv_async_send(&l->finish);
        return;
      }
    } else {
      t->out = &l->out_bridge[k / 2];
      t->node.run = lat_node_run;
      t->t0 = uv_hrtime();
      bench_bridge_push(l->bridge, &t->node);
    }
    uv_sem_wait(&l->sem);
    if (l->gap_us != 0)
      sleep_us(l->gap_us);
  }
}


static void lat_finish_cb(uv_async_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
}


int bench_loop_latency(uv_loop_t* loop,
                       uvs_worker_t* worker,
                       bench_bridge_t* bridge,
                       size_t samples,
                       unsigned gap_us,
                       int first,
                       double* out_uvs,
                       double* out_bridge,
                       const char* where) {
  lat_t l;
  bench_thread_t th;

  memset(&l, 0, sizeof(l));
  l.worker = worker;
  l.bridge = bridge;
  l.n = 2 * samples;
  l.gap_us = gap_us;
  l.first = first;
  l.out_uvs = out_uvs;
  l.out_bridge = out_bridge;
  l.tasks = bench_alloc(l.n, sizeof(*l.tasks));
  if (uv_sem_init(&l.sem, 0) != 0)
    abort();
  if (uv_async_init(loop, &l.finish, lat_finish_cb) != 0)
    abort();
  bench_count_reset(&l.count, l.n);
  l.count.notify = &l.finish;
  bench_arm(where);

  bench_thread_start(&th, lat_producer, &l);
  uv_run(loop, UV_RUN_DEFAULT);
  bench_thread_join(&th);

  uv_sem_destroy(&l.sem);
  bench_free(l.tasks);
  if (l.err != 0) {
    bench_fail("%s: uvs_schedule: %s", where, uv_strerror(l.err));
    return -1;
  }
  if (bench_count_ran(&l.count) != l.n) {
    bench_fail("%s: %llu of %zu probes ran", where,
               (unsigned long long) bench_count_ran(&l.count), l.n);
    return -1;
  }
  return 0;
}


/* ---- s4 ------------------------------------------------------------------ */

void bench_s4_loop_foreign(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t worker;
  bench_bridge_t bridge;
  bench_feed_t fu;
  bench_feed_t fb;
  bench_row_t* rate_row;
  bench_row_t* lat_row;
  bench_row_t* wakes_row;
  uvs_stats_t st0;
  uvs_stats_t st1;
  double* samples_u;
  double* samples_b;
  double rate_u;
  double rate_b;
  double p50_u;
  double p50_b;
  double p99_u[BENCH_MAX_RUNS];
  double p99_b[BENCH_MAX_RUNS];
  double cpu_u[BENCH_MAX_RUNS];
  double cpu_b[BENCH_MAX_RUNS];
  double prod_u[BENCH_MAX_RUNS];
  double prod_b[BENCH_MAX_RUNS];
  double cons_u[BENCH_MAX_RUNS];
  double cons_b[BENCH_MAX_RUNS];
  double wakes_u;
  double wakes_b;
  uint64_t cpu;
  uint64_t w0;
  int run;
  int i;

  rate_row = bench_row("s4.bridge",
                       "1 loop worker fed by a foreign thread, "
                       "vs mutex list + uv_async_send",
                       "tasks/s", BENCH_GE, 1.5, 0);
  lat_row = bench_row("s4.latency",
                      "one-way latency to an idle loop, p50, vs "
                      "the bridge",
                      "us", BENCH_LE, 1.1, 0);
  wakes_row = bench_row("s9.wakeups-foreign-loop",
                        "loop wake-ups, foreign "
                        "thread -> 1 loop worker, vs the bridge",
                        "per 1000 tasks", BENCH_INFO, NAN, 0);

  memset(&fu, 0, sizeof(fu));
  memset(&fb, 0, sizeof(fb));
  fu.n = fb.n = cfg->loop_tasks;
  fu.utasks = bench_alloc(fu.n, sizeof(*fu.utasks));
  fb.ntasks = bench_alloc(fb.n, sizeof(*fb.ntasks));
  samples_u = bench_alloc(cfg->lat_samples, sizeof(*samples_u));
  samples_b = bench_alloc(cfg->lat_samples, sizeof(*samples_b));
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0 ||
      uvs_worker_init(&sched, &worker, UVS_LOOP) != 0 ||
      bench_bridge_init(&loop, &bridge) != 0)
    abort();
  fu.worker = &worker;
  fb.push = bench_push_bridge;
  fb.q = &bridge;

  for (run = 0; run < cfg->runs; run++) {
    rate_u = rate_b = p50_u = p50_b = wakes_u = wakes_b = NAN;
    p99_u[run] = p99_b[run] = NAN;
    for (i = 0; i < 2; i++) {
      if (bench_order(run, 2, i) == 0) {
        uvs_sched_stats(&sched, &st0);
        rate_u = bench_feed_run(&loop, &fu, bench_feed_uvs, &cpu, "s4 uvsched");
        uvs_sched_stats(&sched, &st1);
        cpu_u[run] = (double) cpu / (double) fu.n;
        wakes_u = (double) (st1.wakeups - st0.wakeups) * 1000.0 / fu.n;
        bench_note(cfg, "s4.uvsched", run, rate_u, "tasks/s");
      } else {
        w0 = bridge.wakeups;
        rate_b =
            bench_feed_run(&loop, &fb, bench_feed_nodes, &cpu, "s4 bridge");
        cpu_b[run] = (double) cpu / (double) fb.n;
        wakes_b = (double) (bridge.wakeups - w0) * 1000.0 / fb.n;
        bench_note(cfg, "s4.bridge", run, rate_b, "tasks/s");
      }
    }
    if (bench_loop_latency(&loop, &worker, &bridge, cfg->lat_samples,
                           cfg->lat_gap_us, run % 2, samples_u, samples_b,
                           "s4 latency") == 0) {
      p50_u = bench_percentile(samples_u, cfg->lat_samples, 50) / 1e3;
      p99_u[run] = bench_percentile(samples_u, cfg->lat_samples, 99) / 1e3;
      p50_b = bench_percentile(samples_b, cfg->lat_samples, 50) / 1e3;
      p99_b[run] = bench_percentile(samples_b, cfg->lat_samples, 99) / 1e3;
    }
    bench_note(cfg, "s4.latency.p50.uvsched", run, p50_u, "us");
    bench_note(cfg, "s4.latency.p50.bridge", run, p50_b, "us");
    bench_row_add(rate_row, rate_u, rate_b);
    bench_row_add(lat_row, p50_u, p50_b);
    bench_row_add(wakes_row, wakes_u, wakes_b);
  }
  /* Each side alone, to tell whose cost limits the rate row: in a pass of
   * their own, after the rows' repetitions, which they would perturb. */
  for (run = 0; run < cfg->runs; run++) {
    prod_u[run] = cons_u[run] = prod_b[run] = cons_b[run] = NAN;
    for (i = 0; i < 2; i++) {
      if (bench_order(run, 2, i) == 0)
        bench_feed_split(&loop, &fu, bench_feed_uvs, &prod_u[run], &cons_u[run],
                         "s4 uvsched alone");
      else
        bench_feed_split(&loop, &fb, bench_feed_nodes, &prod_b[run],
                         &cons_b[run], "s4 bridge alone");
    }
  }
  bench_figure("s4.latency.p99.uvsched", bench_median(p99_u, cfg->runs), "us");
  bench_figure("s4.latency.p99.bridge", bench_median(p99_b, cfg->runs), "us");
  bench_figure("s4.cpu.uvsched", bench_median(cpu_u, cfg->runs), "ns/task");
  bench_figure("s4.cpu.bridge", bench_median(cpu_b, cfg->runs), "ns/task");
  bench_figure("s4.alone.producer.uvsched", bench_median(prod_u, cfg->runs),
               "ns/task");
  bench_figure("s4.alone.producer.bridge", bench_median(prod_b, cfg->runs),
               "ns/task");
  bench_figure("s4.alone.loop.uvsched", bench_median(cons_u, cfg->runs),
               "ns/task");
  bench_figure("s4.alone.loop.bridge", bench_median(cons_b, cfg->runs),
               "ns/task");

  bench_check_stats(&sched, "s4");
  bench_bridge_close(&bridge);
  bench_sched_close(&loop, &sched, "s4");
  bench_loop_close(&loop, "s4");
  bench_free(samples_b);
  bench_free(samples_u);
  bench_free(fb.ntasks);
  bench_free(fu.utasks);
}
