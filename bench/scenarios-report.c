/* s9: figures that are reported, not targeted. Pool submissions and loop
 * wake-ups per 1,000 tasks are counted under the loads of s1, s3 and s4
 * (rows s9.drains-*, s9.wakeups-*). Here: back-to-back hand-off latency,
 * from the schedule call to the start of the run, (a) along a chain of
 * tasks alternating between two pool workers, each task scheduling the
 * next from its run_cb, and (b) from a foreign thread to a loop worker,
 * each task scheduled as soon as the previous one ran; and (c) the chain
 * of (a) on a scheduler with linger_us = BENCH_LINGER_US, against (a): its
 * latency and the process CPU it costs per hop.
 */

#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Long enough to cover a hop (a few us), short enough to show the cost of
 * a drain that waits in vain. */
#define BENCH_LINGER_US 100

typedef struct chain_s chain_t;

typedef struct hop_s {
  uvs_task_t task;   /* uvsched variant */
  bench_node_t node; /* naive variant */
  uint64_t t0;       /* uv_hrtime() just before the schedule or push */
  size_t idx;
  chain_t* c;
} hop_t;

struct chain_s {
  hop_t* hops;
  size_t n;
  double* out;
  uvs_worker_t* workers[2]; /* uvsched variant, or */
  bench_naive_t* naive[2];  /* the naive one */
  bench_count_t count;
  int err; /* atomic */
};


static void hop_arrive(hop_t* h) {
  chain_t* c;
  hop_t* next;
  uint64_t now;
  int err;

  now = uv_hrtime();
  c = h->c;
  c->out[h->idx] = (double) (now - h->t0);
  if (h->idx + 1 < c->n) {
    next = &c->hops[h->idx + 1];
    next->t0 = uv_hrtime();
    if (c->workers[0] != NULL) {
      err = uvs_schedule(c->workers[(h->idx + 1) & 1], &next->task);
      if (err != 0) {
        __atomic_store_n(&c->err, err, __ATOMIC_RELAXED);
        uv_async_send(c->count.notify); /* nothing else will come */
      }
    } else {
      bench_naive_push(c->naive[(h->idx + 1) & 1], &next->node);
    }
  }
  bench_count_hit(&c->count);
}


static void hop_uvs_run(uvs_task_t* task) {
  hop_arrive(task->data);
}


static void hop_node_run(bench_node_t* node) {
  hop_arrive((hop_t*) ((char*) node - offsetof(hop_t, node)));
}


/* Runs one chain of c->n hops; returns 0 or -1. */
static int chain_run(uv_loop_t* loop, chain_t* c, const char* where) {
  uv_async_t finish;
  size_t i;
  int err;

  for (i = 0; i < c->n; i++) {
    c->hops[i].idx = i;
    c->hops[i].c = c;
    uvs_task_init(&c->hops[i].task, hop_uvs_run, NULL);
    c->hops[i].task.data = &c->hops[i];
    c->hops[i].node.run = hop_node_run;
  }
  bench_count_reset(&c->count, c->n);
  bench_finish_init(loop, &finish);
  c->count.notify = &finish;
  c->err = 0;
  bench_arm(where);

  /* The first hop starts from the loop thread. */
  c->hops[0].t0 = uv_hrtime();
  if (c->workers[0] != NULL) {
    err = uvs_schedule(c->workers[0], &c->hops[0].task);
    if (err != 0) {
      bench_fail("%s: uvs_schedule: %s", where, uv_strerror(err));
      uv_close((uv_handle_t*) &finish, NULL);
      uv_run(loop, UV_RUN_DEFAULT);
      return -1;
    }
  } else {
    bench_naive_push(c->naive[0], &c->hops[0].node);
  }
  uv_run(loop, UV_RUN_DEFAULT);

  err = __atomic_load_n(&c->err, __ATOMIC_RELAXED);
  if (err != 0) {
    bench_fail("%s: uvs_schedule from run_cb: %s", where, uv_strerror(err));
    return -1;
  }
  if (bench_count_ran(&c->count) != c->n) {
    bench_fail("%s: %llu of %zu hops ran", where,
               (unsigned long long) bench_count_ran(&c->count), c->n);
    return -1;
  }
  return 0;
}


void bench_s9_report(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t pw[2];
  uvs_worker_t lw;
  bench_naive_t naive[2];
  bench_bridge_t bridge;
  chain_t cu;
  chain_t cn;
  bench_row_t* pool50;
  bench_row_t* pool99;
  bench_row_t* loop50;
  bench_row_t* loop99;
  bench_row_t* linger50;
  bench_row_t* linger99;
  bench_row_t* linger_cpu;
  uvs_sched_t lsched;
  uvs_sched_options_t lopts;
  uvs_worker_t lpw[2];
  chain_t cl;
  uint64_t cpu0;
  double l50;
  double l99;
  double lcpu;
  double ucpu;
  double* samples;
  double* samples_b;
  double u50;
  double u99;
  double b50;
  double b99;
  size_t n;
  int run;
  int i;

  pool50 = bench_row("s9.handoff-pool-p50",
                     "back-to-back hand-off pool -> "
                     "pool worker, p50, vs naive",
                     "us", BENCH_INFO, NAN, 0);
  pool99 = bench_row("s9.handoff-pool-p99",
                     "back-to-back hand-off pool -> "
                     "pool worker, p99, vs naive",
                     "us", BENCH_INFO, NAN, 0);
  loop50 = bench_row("s9.handoff-loop-p50",
                     "back-to-back hand-off foreign "
                     "thread -> loop, p50, vs bridge",
                     "us", BENCH_INFO, NAN, 0);
  loop99 = bench_row("s9.handoff-loop-p99",
                     "back-to-back hand-off foreign "
                     "thread -> loop, p99, vs bridge",
                     "us", BENCH_INFO, NAN, 0);

  linger50 = bench_row("s9.linger-p50",
                       "pool -> pool hand-off, p50, linger_us = 100 vs 0", "us",
                       BENCH_INFO, NAN, 0);
  linger99 = bench_row("s9.linger-p99",
                       "pool -> pool hand-off, p99, linger_us = 100 vs 0", "us",
                       BENCH_INFO, NAN, 0);
  linger_cpu = bench_row("s9.linger-cpu",
                         "process CPU per pool -> pool hand-off, "
                         "linger_us = 100 vs 0",
                         "us", BENCH_INFO, NAN, 0);

  n = cfg->report_hops;
  samples = bench_alloc(n, sizeof(*samples));
  samples_b = bench_alloc(n, sizeof(*samples_b));
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0 ||
      uvs_worker_init(&sched, &pw[0], UVS_POOL) != 0 ||
      uvs_worker_init(&sched, &pw[1], UVS_POOL) != 0 ||
      uvs_worker_init(&sched, &lw, UVS_LOOP) != 0 ||
      bench_naive_init(&loop, &naive[0]) != 0 ||
      bench_naive_init(&loop, &naive[1]) != 0 ||
      bench_bridge_init(&loop, &bridge) != 0)
    abort();
  memset(&lopts, 0, sizeof(lopts));
  lopts.linger_us = BENCH_LINGER_US;
  if (uvs_sched_init(&loop, &lsched, &lopts) != 0 ||
      uvs_worker_init(&lsched, &lpw[0], UVS_POOL) != 0 ||
      uvs_worker_init(&lsched, &lpw[1], UVS_POOL) != 0)
    abort();
  memset(&cu, 0, sizeof(cu));
  memset(&cn, 0, sizeof(cn));
  cu.n = cn.n = n;
  cu.out = cn.out = samples;
  cl = cu;
  cl.hops = bench_alloc(n, sizeof(hop_t));
  cl.workers[0] = &lpw[0];
  cl.workers[1] = &lpw[1];
  cu.hops = bench_alloc(n, sizeof(hop_t));
  cn.hops = bench_alloc(n, sizeof(hop_t));
  cu.workers[0] = &pw[0];
  cu.workers[1] = &pw[1];
  cn.naive[0] = &naive[0];
  cn.naive[1] = &naive[1];

  for (run = 0; run < cfg->runs; run++) {
    u50 = u99 = b50 = b99 = NAN;
    for (i = 0; i < 2; i++) {
      /* The first hop comes from the loop thread: leave it out. */
      if (bench_order(run, 2, i) == 0) {
        if (chain_run(&loop, &cu, "s9 uvsched pool chain") == 0 && n > 1) {
          u50 = bench_percentile(samples + 1, n - 1, 50) / 1e3;
          u99 = bench_percentile(samples + 1, n - 1, 99) / 1e3;
        }
      } else {
        if (chain_run(&loop, &cn, "s9 naive pool chain") == 0 && n > 1) {
          b50 = bench_percentile(samples + 1, n - 1, 50) / 1e3;
          b99 = bench_percentile(samples + 1, n - 1, 99) / 1e3;
        }
      }
    }
    bench_row_add(pool50, u50, b50);
    bench_row_add(pool99, u99, b99);

    /* linger_us against none, both uvsched, the same chain. */
    u50 = u99 = l50 = l99 = lcpu = ucpu = NAN;
    for (i = 0; i < 2; i++) {
      cpu0 = bench_process_cpu();
      if (bench_order(run, 2, i) == 0) {
        if (chain_run(&loop, &cl, "s9 linger chain") == 0 && n > 1) {
          lcpu = (double) (bench_process_cpu() - cpu0) / 1e3 / n;
          l50 = bench_percentile(samples + 1, n - 1, 50) / 1e3;
          l99 = bench_percentile(samples + 1, n - 1, 99) / 1e3;
        }
      } else {
        if (chain_run(&loop, &cu, "s9 uvsched pool chain") == 0 && n > 1) {
          ucpu = (double) (bench_process_cpu() - cpu0) / 1e3 / n;
          u50 = bench_percentile(samples + 1, n - 1, 50) / 1e3;
          u99 = bench_percentile(samples + 1, n - 1, 99) / 1e3;
        }
      }
    }
    bench_row_add(linger50, l50, u50);
    bench_row_add(linger99, l99, u99);
    bench_row_add(linger_cpu, lcpu, ucpu);

    u50 = u99 = b50 = b99 = NAN;
    if (bench_loop_latency(&loop, &lw, &bridge, n, 0, run % 2, samples,
                           samples_b, "s9 loop hand-off") == 0) {
      u50 = bench_percentile(samples, n, 50) / 1e3;
      u99 = bench_percentile(samples, n, 99) / 1e3;
      b50 = bench_percentile(samples_b, n, 50) / 1e3;
      b99 = bench_percentile(samples_b, n, 99) / 1e3;
    }
    bench_row_add(loop50, u50, b50);
    bench_row_add(loop99, u99, b99);
  }

  bench_check_stats(&sched, "s9");
  bench_check_stats(&lsched, "s9 linger");
  bench_sched_close(&loop, &lsched, "s9 linger");
  bench_bridge_close(&bridge);
  bench_naive_close(&naive[0]);
  bench_naive_close(&naive[1]);
  bench_sched_close(&loop, &sched, "s9");
  bench_loop_close(&loop, "s9");
  bench_free(cl.hops);
  bench_free(cn.hops);
  bench_free(cu.hops);
  bench_free(samples_b);
  bench_free(samples);
}
