/* Delayed tasks against one uv_timer_t per task: the cost of schedule +
 * cancel (s5), and loop CPU and lateness of tasks that fire (s6).
 */

#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


/* ---- s5: schedule_after + cancel ---------------------------------------- */

typedef struct cancel_ctx_s {
  uint64_t cancelled; /* loop thread */
  uint64_t other;     /* hand-backs with another status */
  uint64_t ran;       /* runs of tasks that were cancelled at once */
} cancel_ctx_t;


static void cancel_run(uvs_task_t* task) {
  ((cancel_ctx_t*) task->data)->ran++;
}


static void cancel_done(uvs_task_t* task, int status) {
  cancel_ctx_t* ctx;

  ctx = task->data;
  if (status == UV_ECANCELED)
    ctx->cancelled++;
  else
    ctx->other++;
}


static void timer_never(uv_timer_t* handle) {
  (*(uint64_t*) handle->data)++;
}


/* Schedules n delayed tasks, then cancels them all, on the calling (loop)
 * thread; returns ns of thread CPU per pair, or NAN. *deliver gets the
 * wall time the loop then takes to hand them back. */
static double uvs_pairs(uv_loop_t* loop,
                        uvs_worker_t* w,
                        uvs_task_t* tasks,
                        const uint64_t* delays,
                        size_t n,
                        cancel_ctx_t* ctx,
                        double* deliver,
                        const char* where) {
  uint64_t cpu0;
  uint64_t cpu1;
  uint64_t t0;
  size_t i;
  int err;

  memset(ctx, 0, sizeof(*ctx));
  bench_arm(where);
  cpu0 = bench_thread_cpu();
  for (i = 0; i < n; i++) {
    err = uvs_schedule_after(w, &tasks[i], delays[i]);
    if (err != 0) {
      bench_fail("%s: uvs_schedule_after: %s", where, uv_strerror(err));
      break;
    }
  }
  n = i;
  for (i = 0; i < n; i++) {
    err = uvs_task_cancel(&tasks[i]);
    if (err != 0)
      bench_fail("%s: uvs_task_cancel: %s", where, uv_strerror(err));
  }
  cpu1 = bench_thread_cpu();

  t0 = uv_hrtime();
  uv_run(loop, UV_RUN_DEFAULT);
  *deliver = (double) (uv_hrtime() - t0) / (double) (n ? n : 1);
  if (ctx->cancelled != n || ctx->other != 0 || ctx->ran != 0) {
    bench_fail(
        "%s: %zu cancelled tasks: %llu handed back cancelled, %llu "
        "otherwise, %llu ran",
        where, n, (unsigned long long) ctx->cancelled,
        (unsigned long long) ctx->other, (unsigned long long) ctx->ran);
    return NAN;
  }
  return (double) (cpu1 - cpu0) / (double) n;
}


void bench_s5_cancel(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t worker;
  uvs_task_t* tasks;
  uv_timer_t* timers;
  uint64_t* delays;
  cancel_ctx_t ctx;
  bench_row_t* row;
  bench_row_t* size_row;
  double deliver[BENCH_MAX_RUNS];
  double u;
  double t;
  uint64_t cpu0;
  uint64_t fired;
  size_t n;
  size_t i;
  int run;
  int k;

  n = cfg->cancel_tasks;
  row = bench_row("s5.timers",
                  "1M schedule_after + cancel, vs uv_timer_t "
                  "start + stop",
                  "ns/pair", BENCH_LE, 0.25, 0);
  size_row = bench_row("s5.size", "sizeof(uvs_task_t), vs sizeof(uv_timer_t)",
                       "B", BENCH_LE, 64, 1);

  tasks = bench_alloc(n, sizeof(*tasks));
  timers = bench_alloc(n, sizeof(*timers));
  delays = bench_alloc(n, sizeof(*delays));
  bench_delays(delays, n, 1, cfg->cancel_max_ms, 0x5eed5);
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0 ||
      uvs_worker_init(&sched, &worker, UVS_LOOP) != 0)
    abort();
  fired = 0;
  for (i = 0; i < n; i++) {
    uvs_task_init(&tasks[i], cancel_run, cancel_done);
    tasks[i].data = &ctx;
    uv_timer_init(&loop, &timers[i]);
    timers[i].data = &fired;
  }

  for (run = 0; run < cfg->runs; run++) {
    u = t = NAN;
    for (k = 0; k < 2; k++) {
      if (bench_order(run, 2, k) == 0) {
        u = uvs_pairs(&loop, &worker, tasks, delays, n, &ctx, &deliver[run],
                      "s5 uvsched");
        bench_note(cfg, "s5.uvsched", run, u, "ns/pair");
      } else {
        bench_arm("s5 uv_timer");
        cpu0 = bench_thread_cpu();
        for (i = 0; i < n; i++)
          uv_timer_start(&timers[i], timer_never, delays[i], 0);
        for (i = 0; i < n; i++) uv_timer_stop(&timers[i]);
        t = (double) (bench_thread_cpu() - cpu0) / (double) n;
        bench_note(cfg, "s5.timer", run, t, "ns/pair");
      }
    }
    bench_row_add(row, u, t);
    bench_row_add(size_row, (double) sizeof(uvs_task_t),
                  (double) sizeof(uv_timer_t));
  }
  bench_figure("s5.handback.uvsched", bench_median(deliver, cfg->runs),
               "ns/task");
  if (fired != 0)
    bench_fail("s5: %llu stopped uv_timer_t fired", (unsigned long long) fired);

  bench_check_stats(&sched, "s5");
  bench_sched_close(&loop, &sched, "s5");
  for (i = 0; i < n; i++) uv_close((uv_handle_t*) &timers[i], NULL);
  bench_loop_close(&loop, "s5");
  bench_free(delays);
  bench_free(timers);
  bench_free(tasks);
}


/* ---- s6: delayed tasks that fire ----------------------------------------- */

typedef struct fire_s fire_t;

typedef struct ftask_s {
  uvs_task_t task;
  uv_timer_t timer;
  uint64_t due_ns; /* uv_hrtime() before the call + the delay */
  size_t idx;
  fire_t* f;
} ftask_t;

struct fire_s {
  ftask_t* tasks;
  const uint64_t* delays;
  size_t n;
  size_t next;          /* next task the feeder schedules */
  size_t batch;         /* tasks scheduled per loop iteration */
  uvs_worker_t* worker; /* NULL: the uv_timer_t variant */
  uv_idle_t feeder;
  double* late; /* ns, signed */
  unsigned char* fired;
  uint64_t early;
  bench_count_t count;
  int err;
};


static void fired(ftask_t* t) {
  fire_t* f;
  uint64_t now;

  now = uv_hrtime();
  f = t->f;
  f->late[t->idx] = (double) (int64_t) (now - t->due_ns);
  if (now < t->due_ns)
    f->early++;
  f->fired[t->idx]++;
  bench_count_hit(&f->count);
}


static void fire_uvs_run(uvs_task_t* task) {
  fired(task->data);
}


static void fire_timer_cb(uv_timer_t* handle) {
  fired(handle->data);
}


/* Schedules a batch per loop iteration, the way a server would spread
 * them; libuv's cached time is then never more than a batch stale. */
static void feed_cb(uv_idle_t* handle) {
  fire_t* f;
  ftask_t* t;
  size_t end;
  size_t i;
  int err;

  f = handle->data;
  end = f->next + f->batch;
  if (end > f->n)
    end = f->n;
  for (i = f->next; i < end; i++) {
    t = &f->tasks[i];
    t->due_ns = uv_hrtime() + f->delays[i] * 1000000u;
    if (f->worker != NULL) {
      err = uvs_schedule_after(f->worker, &t->task, f->delays[i]);
      if (err != 0 && f->err == 0)
        f->err = err;
    } else {
      uv_timer_start(&t->timer, fire_timer_cb, f->delays[i], 0);
    }
  }
  f->next = end;
  if (end == f->n || f->err != 0)
    uv_idle_stop(handle);
}


/* Runs one variant; returns loop-thread CPU ns per fired task, or NAN, and
 * leaves the lateness of every task in f->late. */
static double fire_run(uv_loop_t* loop, fire_t* f, const char* where) {
  uint64_t cpu0;
  size_t i;

  for (i = 0; i < f->n; i++) {
    f->tasks[i].idx = i;
    f->tasks[i].f = f;
    uvs_task_init(&f->tasks[i].task, fire_uvs_run, NULL);
    f->tasks[i].task.data = &f->tasks[i];
    f->fired[i] = 0;
  }
  f->next = 0;
  f->early = 0;
  f->err = 0;
  bench_count_reset(&f->count, f->n);
  f->count.want_cpu = 1;
  bench_arm(where);

  cpu0 = bench_thread_cpu();
  uv_idle_start(&f->feeder, feed_cb);
  uv_run(loop, UV_RUN_DEFAULT);

  if (f->err != 0) {
    bench_fail("%s: uvs_schedule_after: %s", where, uv_strerror(f->err));
    return NAN;
  }
  for (i = 0; i < f->n; i++) {
    if (f->fired[i] != 1) {
      bench_fail("%s: task %zu fired %u times", where, i, f->fired[i]);
      return NAN;
    }
  }
  if (f->worker != NULL && f->early != 0)
    bench_fail("%s: %llu tasks ran before their delay", where,
               (unsigned long long) f->early);
  return (double) (__atomic_load_n(&f->count.cpu_end, __ATOMIC_ACQUIRE) -
                   cpu0) /
         (double) f->n;
}


void bench_s6_fire(const bench_cfg_t* cfg) {
  uv_loop_t loop;
  uvs_sched_t sched;
  uvs_worker_t worker;
  fire_t f;
  uint64_t* delays;
  bench_row_t* cpu_row;
  bench_row_t* late_row;
  double cu;
  double ct;
  double l99u;
  double l99t;
  double l50u[BENCH_MAX_RUNS];
  double l50t[BENCH_MAX_RUNS];
  double early_t[BENCH_MAX_RUNS];
  size_t n;
  size_t i;
  int run;
  int k;

  n = cfg->fire_tasks;
  cpu_row = bench_row("s6.cpu",
                      "100k delayed tasks due within 100 ms, 1 loop "
                      "worker: loop CPU per fired task, vs uv_timer_t",
                      "ns/task", BENCH_LE, 0.5, 0);
  late_row = bench_row("s6.late", "lateness p99, vs uv_timer_t", "us", BENCH_LE,
                       1.0, 0);

  memset(&f, 0, sizeof(f));
  f.n = n;
  f.batch = n / 100 ? n / 100 : 1;
  f.tasks = bench_alloc(n, sizeof(*f.tasks));
  f.late = bench_alloc(n, sizeof(*f.late));
  f.fired = bench_alloc(n, 1);
  delays = bench_alloc(n, sizeof(*delays));
  bench_delays(delays, n, 1, cfg->fire_window_ms, 0xf17e);
  f.delays = delays;
  bench_loop_init(&loop);
  if (uvs_sched_init(&loop, &sched, NULL) != 0 ||
      uvs_worker_init(&sched, &worker, UVS_LOOP) != 0)
    abort();
  uv_idle_init(&loop, &f.feeder);
  f.feeder.data = &f;
  for (i = 0; i < n; i++) {
    uv_timer_init(&loop, &f.tasks[i].timer);
    f.tasks[i].timer.data = &f.tasks[i];
  }

  for (run = 0; run < cfg->runs; run++) {
    cu = ct = l99u = l99t = NAN;
    l50u[run] = l50t[run] = early_t[run] = NAN;
    for (k = 0; k < 2; k++) {
      if (bench_order(run, 2, k) == 0) {
        f.worker = &worker;
        cu = fire_run(&loop, &f, "s6 uvsched");
        if (!isnan(cu)) {
          l99u = bench_percentile(f.late, n, 99) / 1e3;
          l50u[run] = bench_percentile(f.late, n, 50) / 1e3;
        }
        bench_note(cfg, "s6.cpu.uvsched", run, cu, "ns/task");
      } else {
        f.worker = NULL;
        ct = fire_run(&loop, &f, "s6 uv_timer");
        if (!isnan(ct)) {
          early_t[run] = (double) f.early / (double) n;
          l99t = bench_percentile(f.late, n, 99) / 1e3;
          l50t[run] = bench_percentile(f.late, n, 50) / 1e3;
        }
        bench_note(cfg, "s6.cpu.timer", run, ct, "ns/task");
      }
    }
    bench_row_add(cpu_row, cu, ct);
    bench_row_add(late_row, l99u, l99t);
  }
  bench_figure("s6.late.p50.uvsched", bench_median(l50u, cfg->runs), "us");
  bench_figure("s6.late.p50.timer", bench_median(l50t, cfg->runs), "us");
  /* uv_timer_t fires by libuv's cached ms clock, so a share of them fire
   * before the delay has passed; uvsched never does (guarantee 6). */
  bench_figure("s6.early.timer", bench_median(early_t, cfg->runs), "fraction");

  bench_check_stats(&sched, "s6");
  bench_sched_close(&loop, &sched, "s6");
  uv_close((uv_handle_t*) &f.feeder, NULL);
  for (i = 0; i < n; i++) uv_close((uv_handle_t*) &f.tasks[i].timer, NULL);
  bench_loop_close(&loop, "s6");
  bench_free(delays);
  bench_free(f.fired);
  bench_free(f.late);
  bench_free(f.tasks);
}
