/* uvsched-bench: the driver. Parses the command line, prints the machine,
 * runs the scenarios, then prints the table and writes the JSON.
 *
 *   uvsched-bench [--smoke] [--runs N] [--only NAME[,NAME...]]
 *                 [--json PATH] [--verbose] [--list] [--users-budget N]
 *                 [--hold-us N]
 */

#include "bench.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifndef UVS_BENCH_BUILDTYPE
#define UVS_BENCH_BUILDTYPE "unknown"
#endif

#define MAX_ROWS 192
#define MAX_FIGURES 256

struct bench_row_s {
  const char* id;
  const char* title;
  const char* unit;
  bench_op_t op;
  double target;
  int on_value;
  bench_agg_t agg;
  int n;
  double uvs[BENCH_MAX_RUNS];
  double base[BENCH_MAX_RUNS];
};

typedef struct figure_s {
  char name[96];
  double value;
  const char* unit;
} figure_t;

typedef struct scenario_s {
  const char* id;
  const char* name;
  const char* what;
  void (*fn)(const bench_cfg_t* cfg);
} scenario_t;

static const scenario_t scenarios[] = {
    {"c1", "check-cost",
     "0.5: uvs_task_check vs uv_hrtime(), in a pool and a loop run_cb",
     bench_c1_check_cost},
    {"c2", "interrupt",
     "0.5: uvs_task_interrupt of a checking task to run_cb's return",
     bench_c2_interrupt},
    {"c3", "close-cancel",
     "0.5: close with UVS_CANCEL of a worker running a checking task",
     bench_c3_close_cancel},
    {"c4", "long-yield",
     "0.5: short tasks' start beside long tasks that yield, or don't",
     bench_c4_long_yield},
    {"h1", "hooks-cost", "0.4: s1's and s3's loads with an empty hook vs none",
     bench_h1_hook_cost},
    {"h2", "suspend", "0.4: suspend + resume vs uvs_schedule; 10k queued vs 0",
     bench_h2_suspend},
    {"h3", "barrier", "0.4: barrier behind 4 busy lanes vs serial hand-off",
     bench_h3_barrier},
    {"g1", "groups-lat",
     "0.4: interactive group's short tasks beside a busy bulk group",
     bench_g1_interactive},
    {"g2", "groups-shares", "0.4: run_cb time of groups 1:3 and 1:2:3:4",
     bench_g2_shares},
    {"g3", "groups-cost", "0.4: s1, s3 and round-robin on 4 groups vs none",
     bench_g3_cost},
    {"r", "v03", "0.3: re-arm, idle timeouts, lateness, key bounds, shedding",
     bench_v03},
    {"u", "users",
     "users' view: head-of-line, server mix, dependency, keys, one task per "
     "event, the pool held",
     bench_users},
    {"s1", "pool-one", "one pool worker, tasks scheduled from the loop",
     bench_s1_pool_one},
    {"s2", "pool-many", "10,000 pool workers x 100 tasks, round-robin",
     bench_s2_pool_many},
    {"s3", "pool-foreign", "one pool worker fed by a foreign thread",
     bench_s3_pool_foreign},
    {"s4", "loop-foreign", "one loop worker fed by a foreign thread",
     bench_s4_loop_foreign},
    {"s5", "cancel", "schedule_after + cancel vs uv_timer start + stop",
     bench_s5_cancel},
    {"s6", "fire", "delayed tasks firing on one loop worker", bench_s6_fire},
    {"s7", "scale", "many workers; many pending timers", bench_s7_scale},
    {"s8", "alloc", "allocations per schedule; uvs_post", bench_s8_alloc},
    {"s9", "report", "submissions, wake-ups, hand-off latency",
     bench_s9_report},
    {"s10", "keyed", "100k keys x 10 tasks on a width-4 worker vs serial",
     bench_s10_keyed},
    {"s11", "metrics", "s1's load with metrics, or bounded, vs plain",
     bench_s11_metrics},
    {"s12", "manual-clock", "10k periodic tasks under a manual clock",
     bench_s12_manual_clock},
};

#define NSCENARIOS (sizeof(scenarios) / sizeof(scenarios[0]))

static bench_row_t rows[MAX_ROWS];
static int nrows;
static figure_t figures[MAX_FIGURES];
static int nfigures;
static unsigned long failures; /* atomic */
static const char* volatile watchdog_what;
static unsigned watchdog_default = 300;


/* ---- machine ------------------------------------------------------------ */

typedef struct machine_s {
  long nproc;
  char cpu[128];
  char kernel[256];
  char compiler[96];
  char date[32];
  const char* libuv;
  const char* pool;
} machine_t;


static void read_cpu_model(char* out, size_t size) {
  FILE* f;
  char line[256];
  char* colon;
  size_t len;

  snprintf(out, size, "unknown");
  f = fopen("/proc/cpuinfo", "r");
  if (f == NULL)
    return;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "model name", 10) != 0)
      continue;
    colon = strchr(line, ':');
    if (colon == NULL)
      break;
    colon++;
    while (*colon == ' ' || *colon == '\t') colon++;
    len = strcspn(colon, "\n");
    snprintf(out, size, "%.*s", (int) len, colon);
    break;
  }
  fclose(f);
}


static void machine_read(machine_t* m) {
  struct utsname u;
  time_t now;
  struct tm tm;

  m->nproc = sysconf(_SC_NPROCESSORS_ONLN);
  read_cpu_model(m->cpu, sizeof(m->cpu));
  if (uname(&u) == 0)
    snprintf(m->kernel, sizeof(m->kernel), "%s %s %s", u.sysname, u.release,
             u.machine);
  else
    snprintf(m->kernel, sizeof(m->kernel), "unknown");
#if defined(__clang__)
  snprintf(m->compiler, sizeof(m->compiler), "clang %s", __clang_version__);
#elif defined(__GNUC__)
  snprintf(m->compiler, sizeof(m->compiler), "gcc %s", __VERSION__);
#else
  snprintf(m->compiler, sizeof(m->compiler), "unknown");
#endif
  now = time(NULL);
  gmtime_r(&now, &tm);
  strftime(m->date, sizeof(m->date), "%Y-%m-%dT%H:%M:%SZ", &tm);
  m->libuv = uv_version_string();
  m->pool = getenv("UV_THREADPOOL_SIZE");
  if (m->pool == NULL)
    m->pool = "4 (default)";
}


/* ---- rows and figures --------------------------------------------------- */

bench_row_t* bench_row(const char* id,
                       const char* title,
                       const char* unit,
                       bench_op_t op,
                       double target,
                       int on_value) {
  bench_row_t* r;

  if (nrows == MAX_ROWS)
    abort();
  r = &rows[nrows++];
  memset(r, 0, sizeof(*r));
  r->id = id;
  r->title = title;
  r->unit = unit;
  r->op = op;
  r->target = target;
  r->on_value = on_value;
  r->agg = BENCH_MEDIAN;
  return r;
}


void bench_row_agg(bench_row_t* row, bench_agg_t agg) {
  row->agg = agg;
}


void bench_row_add(bench_row_t* row, double uvsched, double baseline) {
  if (row->n == BENCH_MAX_RUNS)
    return;
  row->uvs[row->n] = uvsched;
  row->base[row->n] = baseline;
  row->n++;
}


void bench_figure(const char* name, double value, const char* unit) {
  figure_t* f;

  printf("%s\t%.6g\t%s\n", name, value, unit);
  fflush(stdout);
  if (nfigures == MAX_FIGURES)
    return;
  f = &figures[nfigures++];
  snprintf(f->name, sizeof(f->name), "%s", name);
  f->value = value;
  f->unit = unit;
}


void bench_note(const bench_cfg_t* cfg,
                const char* name,
                int run,
                double value,
                const char* unit) {
  if (cfg->verbose)
    printf("# run %d\t%s\t%.6g\t%s\n", run, name, value, unit);
}


static int cmp_double(const void* a, const void* b) {
  double x;
  double y;

  x = *(const double*) a;
  y = *(const double*) b;
  return (x > y) - (x < y);
}


double bench_percentile(double* v, size_t n, double p) {
  double rank;
  size_t lo;
  double frac;

  if (n == 0)
    return NAN;
  qsort(v, n, sizeof(*v), cmp_double);
  /* Linear interpolation between closest ranks. */
  rank = p / 100.0 * (double) (n - 1);
  lo = (size_t) rank;
  if (lo + 1 >= n)
    return v[n - 1];
  frac = rank - (double) lo;
  return v[lo] + (v[lo + 1] - v[lo]) * frac;
}


double bench_median(const double* v, size_t n) {
  double tmp[BENCH_MAX_RUNS];
  size_t i;
  size_t m;

  m = 0;
  for (i = 0; i < n && m < BENCH_MAX_RUNS; i++)
    if (!isnan(v[i]))
      tmp[m++] = v[i];
  return bench_percentile(tmp, m, 50.0);
}


static double row_agg(const bench_row_t* r, const double* v) {
  double worst;
  int i;

  if (r->agg == BENCH_MEDIAN)
    return bench_median(v, (size_t) r->n);
  worst = NAN;
  for (i = 0; i < r->n; i++)
    if (!isnan(v[i]) && (isnan(worst) || v[i] > worst))
      worst = v[i];
  return worst;
}


typedef struct summary_s {
  double uvs;
  double base;
  double ratio;
  int met; /* 1, 0, or -1 when not targeted or not measurable */
} summary_t;


static summary_t row_summary(const bench_row_t* r) {
  summary_t s;
  double ratios[BENCH_MAX_RUNS];
  double x;
  int i;

  s.uvs = row_agg(r, r->uvs);
  s.base = row_agg(r, r->base);
  s.ratio = NAN;
  if (r->agg == BENCH_MEDIAN) {
    /* The median of each repetition's own ratio: both sides of a
     * repetition ran back to back, so this cancels slow drifts of the
     * machine that the ratio of the two medians would keep. */
    for (i = 0; i < r->n; i++)
      ratios[i] = (isnan(r->uvs[i]) || isnan(r->base[i]) || r->base[i] == 0)
                      ? NAN
                      : r->uvs[i] / r->base[i];
    s.ratio = bench_median(ratios, (size_t) r->n);
  } else if (!isnan(s.uvs) && !isnan(s.base) && s.base != 0) {
    s.ratio = s.uvs / s.base;
  }
  s.met = -1;
  x = r->on_value ? s.uvs : s.ratio;
  if (r->op != BENCH_INFO && !isnan(x)) {
    if (r->op == BENCH_GE)
      s.met = x >= r->target;
    else
      s.met = x <= r->target;
  }
  return s;
}


/* The table lists rows by scenario number, then in the order they were
 * made (s1 and s3 also make rows of s9, measured under their load). The
 * newest groups come first: the 0.5 rows (c1, c2, ...), the 0.4 groups
 * rows (g1, g2, g3), the 0.3 rows (r1, r2, ...), then the users' rows (u1,
 * u2, ...). */
static int row_scenario(const bench_row_t* r) {
  if (r->id[0] == 'c')
    return -4;
  if (r->id[0] == 'g')
    return -3;
  if (r->id[0] == 'r')
    return -2;
  if (r->id[0] == 'u')
    return -1;
  return r->id[0] == 's' ? atoi(r->id + 1) : 0;
}


static void rows_sorted(int* order) {
  int i;
  int j;
  int x;

  for (i = 0; i < nrows; i++) order[i] = i;
  for (i = 1; i < nrows; i++) {
    x = order[i];
    for (j = i;
         j > 0 && row_scenario(&rows[order[j - 1]]) > row_scenario(&rows[x]);
         j--)
      order[j] = order[j - 1];
    order[j] = x;
  }
}


/* ---- formatting --------------------------------------------------------- */

static void fmt_value(char* out, size_t size, double v, const char* unit) {
  double a;

  if (isnan(v)) {
    snprintf(out, size, "-");
    return;
  }
  a = fabs(v);
  if (a >= 1e9)
    snprintf(out, size, "%.3g G %s", v / 1e9, unit);
  else if (a >= 1e6)
    snprintf(out, size, "%.3g M %s", v / 1e6, unit);
  else if (a >= 1e4)
    snprintf(out, size, "%.0f %s", v, unit);
  else
    snprintf(out, size, "%.3g %s", v, unit);
}


static void fmt_target(char* out, size_t size, const bench_row_t* r) {
  const char* op;

  if (r->op == BENCH_INFO) {
    snprintf(out, size, "reported");
    return;
  }
  op = r->op == BENCH_GE ? ">=" : "<=";
  if (r->on_value)
    snprintf(out, size, "%s %g %s", op, r->target, r->unit);
  else
    snprintf(out, size, "%s %gx", op, r->target);
}


static void print_row_figures(const bench_row_t* r) {
  summary_t s;
  char name[96];

  s = row_summary(r);
  snprintf(name, sizeof(name), "%s.uvsched", r->id);
  printf("%s\t%.6g\t%s\n", name, s.uvs, r->unit);
  if (!isnan(s.base)) {
    printf("%s.baseline\t%.6g\t%s\n", r->id, s.base, r->unit);
    printf("%s.ratio\t%.6g\tx\n", r->id, s.ratio);
  }
  fflush(stdout);
}


static void print_table(FILE* out) {
  char u[64];
  char b[64];
  char ratio[32];
  char target[48];
  const char* met;
  const bench_row_t* r;
  summary_t s;
  int order[MAX_ROWS];
  int i;

  rows_sorted(order);
  fprintf(out, "| scenario | uvsched | baseline | ratio | target | met |\n");
  fprintf(out, "| --- | ---: | ---: | ---: | --- | --- |\n");
  for (i = 0; i < nrows; i++) {
    r = &rows[order[i]];
    s = row_summary(r);
    fmt_value(u, sizeof(u), s.uvs, r->unit);
    fmt_value(b, sizeof(b), s.base, r->unit);
    if (isnan(s.ratio))
      snprintf(ratio, sizeof(ratio), "-");
    else
      snprintf(ratio, sizeof(ratio), "%.3gx", s.ratio);
    fmt_target(target, sizeof(target), r);
    met = s.met < 0 ? "-" : s.met ? "yes" : "**no**";
    fprintf(out, "| %s %s | %s | %s | %s | %s | %s |\n", r->id, r->title, u, b,
            ratio, target, met);
  }
}


/* ---- JSON --------------------------------------------------------------- */

static void json_str(FILE* f, const char* s) {
  fputc('"', f);
  for (; *s != '\0'; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char) *s < 0x20)
      fprintf(f, "\\u%04x", (unsigned char) *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}


static void json_num(FILE* f, double v) {
  if (isnan(v) || isinf(v))
    fprintf(f, "null");
  else
    fprintf(f, "%.9g", v);
}


static int write_json(const char* path,
                      const machine_t* m,
                      const bench_cfg_t* cfg,
                      const char* command) {
  FILE* f;
  summary_t s;
  char target[48];
  int order[MAX_ROWS];
  int i;
  int j;
  int k;

  f = fopen(path, "w");
  if (f == NULL) {
    fprintf(stderr, "uvsched-bench: %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f, "{\n  \"program\": \"uvsched-bench\",\n  \"uvsched\": ");
  json_str(f, uvs_version_string());
  fprintf(f, ",\n  \"mode\": \"%s\",\n  \"runs\": %d,\n  \"command\": ",
          cfg->smoke ? "smoke" : "full", cfg->runs);
  json_str(f, command);
  fprintf(f, ",\n  \"machine\": {\"nproc\": %ld, \"cpu\": ", m->nproc);
  json_str(f, m->cpu);
  fprintf(f, ", \"kernel\": ");
  json_str(f, m->kernel);
  fprintf(f, ", \"libuv\": ");
  json_str(f, m->libuv);
  fprintf(f, ", \"threadpool\": ");
  json_str(f, m->pool);
  fprintf(f, ", \"compiler\": ");
  json_str(f, m->compiler);
  fprintf(f, ", \"buildtype\": ");
  json_str(f, UVS_BENCH_BUILDTYPE);
  fprintf(f, ", \"date\": ");
  json_str(f, m->date);
  fprintf(f, "},\n  \"scenarios\": [");
  rows_sorted(order);
  for (j = 0; j < nrows; j++) {
    i = order[j];
    s = row_summary(&rows[i]);
    fmt_target(target, sizeof(target), &rows[i]);
    fprintf(f, "%s\n    {\"name\": ", j == 0 ? "" : ",");
    json_str(f, rows[i].id);
    fprintf(f, ", \"title\": ");
    json_str(f, rows[i].title);
    fprintf(f, ", \"unit\": ");
    json_str(f, rows[i].unit);
    fprintf(f, ", \"uvsched\": ");
    json_num(f, s.uvs);
    fprintf(f, ", \"baseline\": ");
    json_num(f, s.base);
    fprintf(f, ", \"ratio\": ");
    json_num(f, s.ratio);
    fprintf(f, ", \"target\": ");
    json_str(f, target);
    fprintf(f, ", \"target_op\": \"%s\", \"target_value\": ",
            rows[i].op == BENCH_GE   ? ">="
            : rows[i].op == BENCH_LE ? "<="
                                     : "");
    if (rows[i].op == BENCH_INFO)
      fprintf(f, "null");
    else
      json_num(f, rows[i].target);
    fprintf(f, ", \"target_on\": \"%s\", \"aggregate\": \"%s\", \"met\": %s",
            rows[i].on_value ? "uvsched" : "ratio",
            rows[i].agg == BENCH_MEDIAN ? "median" : "max",
            s.met < 0 ? "null"
            : s.met   ? "true"
                      : "false");
    fprintf(f, ",\n     \"runs\": [");
    for (k = 0; k < rows[i].n; k++) {
      fprintf(f, "%s{\"uvsched\": ", k == 0 ? "" : ", ");
      json_num(f, rows[i].uvs[k]);
      fprintf(f, ", \"baseline\": ");
      json_num(f, rows[i].base[k]);
      fprintf(f, "}");
    }
    fprintf(f, "]}");
  }
  fprintf(f, "\n  ],\n  \"figures\": [");
  for (i = 0; i < nfigures; i++) {
    fprintf(f, "%s\n    {\"name\": ", i == 0 ? "" : ",");
    json_str(f, figures[i].name);
    fprintf(f, ", \"value\": ");
    json_num(f, figures[i].value);
    fprintf(f, ", \"unit\": ");
    json_str(f, figures[i].unit);
    fprintf(f, "}");
  }
  fprintf(f, "\n  ],\n  \"failures\": %lu\n}\n", bench_failures());
  if (fclose(f) != 0) {
    fprintf(stderr, "uvsched-bench: %s: %s\n", path, strerror(errno));
    return -1;
  }
  return 0;
}


/* ---- failures and the watchdog ------------------------------------------ */

void bench_fail(const char* fmt, ...) {
  va_list ap;
  unsigned long n;

  n = __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
  if (n > 50)
    return; /* one broken scenario should not drown the table */
  fprintf(stderr, "FAIL: ");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
}


unsigned long bench_failures(void) {
  return __atomic_load_n(&failures, __ATOMIC_RELAXED);
}


static void on_alarm(int sig) {
  static const char pre[] = "\nFAIL: watchdog: still in ";
  static const char post[] = " (hang?)\n";
  const char* what;

  (void) sig;
  what = watchdog_what;
  if (what == NULL)
    what = "?";
  /* Only async-signal-safe calls here. */
  if (write(2, pre, sizeof(pre) - 1) < 0 || write(2, what, strlen(what)) < 0 ||
      write(2, post, sizeof(post) - 1) < 0)
    _exit(2);
  _exit(2);
}


void bench_watchdog(const char* what, unsigned seconds) {
  watchdog_what = what;
  alarm(seconds);
}


void bench_arm(const char* what) {
  bench_watchdog(what, watchdog_default);
}


/* ---- clocks, memory, randomness ----------------------------------------- */

static uint64_t clock_ns(clockid_t id) {
  struct timespec ts;

  if (clock_gettime(id, &ts) != 0)
    abort();
  return (uint64_t) ts.tv_sec * 1000000000u + (uint64_t) ts.tv_nsec;
}


uint64_t bench_thread_cpu(void) {
  return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}


uint64_t bench_process_cpu(void) {
  return clock_ns(CLOCK_PROCESS_CPUTIME_ID);
}


void* bench_alloc(size_t n, size_t size) {
  void* p;

  if (n != 0 && size > SIZE_MAX / n)
    abort();
  p = malloc(n * size == 0 ? 1 : n * size);
  if (p == NULL) {
    fprintf(stderr, "uvsched-bench: out of memory (%zu x %zu bytes)\n", n,
            size);
    exit(2);
  }
  memset(p, 0, n * size);
  return p;
}


void bench_free(void* p) {
  free(p);
}


uint64_t bench_rand(uint64_t* state) {
  uint64_t x;

  x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1DULL;
}


void bench_delays(
    uint64_t* out, size_t n, uint64_t lo, uint64_t hi, uint64_t seed) {
  uint64_t st;
  size_t i;

  st = seed | 1;
  for (i = 0; i < n; i++) out[i] = lo + bench_rand(&st) % (hi - lo + 1);
}


/* ---- loops, schedulers, counters, threads -------------------------------- */

void bench_loop_init(uv_loop_t* loop) {
  if (uv_loop_init(loop) != 0)
    abort();
}


static void close_any(uv_handle_t* h, void* arg) {
  (void) arg;
  if (!uv_is_closing(h))
    uv_close(h, NULL);
}


void bench_loop_close(uv_loop_t* loop, const char* where) {
  uv_run(loop, UV_RUN_DEFAULT);
  if (uv_loop_close(loop) == 0)
    return;
  bench_fail("%s: uv_loop_close() failed: handles left open", where);
  uv_walk(loop, close_any, NULL);
  uv_run(loop, UV_RUN_DEFAULT);
  uv_loop_close(loop);
}


static void sched_closed(uvs_sched_t* s) {
  *(int*) s->data = 1;
}


void bench_sched_close(uv_loop_t* loop, uvs_sched_t* s, const char* where) {
  int closed;
  int err;

  closed = 0;
  s->data = &closed;
  err = uvs_sched_close(s, UVS_DRAIN, sched_closed);
  if (err != 0) {
    bench_fail("%s: uvs_sched_close: %s", where, uv_strerror(err));
    return;
  }
  uv_run(loop, UV_RUN_DEFAULT);
  if (!closed)
    bench_fail("%s: scheduler close callback not called", where);
}


void bench_check_stats(const uvs_sched_t* s, const char* where) {
  uvs_stats_t st;

  uvs_sched_stats(s, &st);
  if (st.pending != 0 || st.scheduled != st.ran + st.cancelled)
    bench_fail(
        "%s: stats at rest: scheduled %llu ran %llu cancelled %llu "
        "pending %llu",
        where, (unsigned long long) st.scheduled, (unsigned long long) st.ran,
        (unsigned long long) st.cancelled, (unsigned long long) st.pending);
}


void bench_count_reset(bench_count_t* c, uint64_t target) {
  memset(c, 0, sizeof(*c));
  c->target = target;
}


void bench_count_done(bench_count_t* c) {
  if (c->want_cpu)
    __atomic_store_n(&c->cpu_end, bench_thread_cpu(), __ATOMIC_RELEASE);
  __atomic_store_n(&c->t_end, uv_hrtime(), __ATOMIC_RELEASE);
  if (c->notify != NULL)
    uv_async_send(c->notify);
}


void bench_lanes_check(const bench_lane_t* lanes,
                       size_t n,
                       uint64_t want,
                       const char* where) {
  size_t i;

  for (i = 0; i < n; i++) {
    if (lanes[i].bad != 0 || lanes[i].next != want) {
      bench_fail("%s: worker %zu ran %llu of %llu tasks, %llu out of order",
                 where, i, (unsigned long long) lanes[i].next,
                 (unsigned long long) want, (unsigned long long) lanes[i].bad);
      return;
    }
  }
}


void bench_utask_run(uvs_task_t* task) {
  bench_lane_hit((bench_lane_t*) task->data, ((bench_utask_t*) task)->seq);
}


static void thread_main(void* arg) {
  bench_thread_t* th;

  th = arg;
  th->t_start = uv_hrtime();
  th->fn(th->arg);
}


void bench_thread_start(bench_thread_t* th, void (*fn)(void*), void* arg) {
  th->fn = fn;
  th->arg = arg;
  th->t_start = 0;
  if (uv_thread_create(&th->tid, thread_main, th) != 0)
    abort();
}


void bench_thread_join(bench_thread_t* th) {
  uv_thread_join(&th->tid);
}


static void finish_cb(uv_async_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
}


void bench_finish_init(uv_loop_t* loop, uv_async_t* handle) {
  if (uv_async_init(loop, handle, finish_cb) != 0)
    abort();
}


/* ---- main --------------------------------------------------------------- */

static void cfg_full(bench_cfg_t* c) {
  c->runs = 7;
  c->watchdog_s = 120;
  c->pool_tasks = 1000000;
  c->many_workers = 10000;
  c->many_per = 100;
  c->loop_tasks = 1000000;
  c->lat_samples = 2000;
  c->lat_gap_us = 200;
  c->cancel_tasks = 1000000;
  c->cancel_max_ms = 60000;
  c->fire_tasks = 100000;
  c->fire_window_ms = 100;
  c->scale_tasks = 1000000;
  c->scale_workers = 100000;
  c->scale_big = 10000000;
  c->scale_small = 1000;
  c->scale_pairs = 100000;
  c->post_tasks = 1000000;
  c->report_tasks = 200000;
  c->report_hops = 5000;
  c->keyed_keys = 100000;
  c->keyed_per = 10;
  c->clock_tasks = 10000;
  c->clock_steps = 60;
  c->users_rounds = 8;
  c->users_long_ms = 50;
  c->users_short = 32;
  c->users_mix_ms = 1000;
  c->users_cycles = 200;
  c->users_burst = 1000;
  c->users_wait_ms = 250;
  c->users_keys = 100;
  c->users_per = 200;
  c->users_cold = 200;
  c->users_cold_ms = 3;
  c->users_warm = 2000;
  c->users_held_ms = 1000;
  c->users_held_stats = 2000;
  c->v03_pending = 1000000;
  c->v03_calls = 1000000;
  c->v03_rearm_min_ms = 1000;
  c->v03_conns = 100000;
  c->v03_late = 10000;
  c->v03_late_min_ms = 10;
  c->v03_late_max_ms = 100;
  c->v03_late_window_ms = 100;
  c->v03_keys = 100000;
  c->v03_per = 10;
  c->v03_stream = 1000000;
  c->groups_ticks = 1000;
  c->groups_bulk_ms = 50;
  c->groups_warm_ms = 500;
  c->groups_window_ms = 10000;
  c->hooks_calls = 1000000;
  c->hooks_queued = 10000;
  c->hooks_rounds = 1000;
  c->hooks_spin_us = 200;
  c->coop_checks = 10000000;
  c->coop_trials = 1000;
  c->coop_long_ms = 50;
  c->coop_window_ms = 500;
  c->coop_gap_us = 250;
}


static void cfg_smoke(bench_cfg_t* c) {
  c->runs = 2;
  c->watchdog_s = 100;
  c->pool_tasks = 20000;
  c->many_workers = 200;
  c->many_per = 20;
  c->loop_tasks = 20000;
  c->lat_samples = 20;
  c->lat_gap_us = 200;
  c->cancel_tasks = 20000;
  c->cancel_max_ms = 60000;
  c->fire_tasks = 2000;
  c->fire_window_ms = 20;
  c->scale_tasks = 20000;
  c->scale_workers = 2000;
  c->scale_big = 20000;
  c->scale_small = 100;
  c->scale_pairs = 2000;
  c->post_tasks = 20000;
  c->report_tasks = 5000;
  c->report_hops = 100;
  c->keyed_keys = 2000;
  c->keyed_per = 10;
  c->clock_tasks = 1000;
  c->clock_steps = 5;
  c->users_rounds = 1;
  c->users_long_ms = 5;
  c->users_short = 32;
  c->users_mix_ms = 50;
  c->users_cycles = 10;
  c->users_burst = 100;
  c->users_wait_ms = 250;
  c->users_keys = 10;
  c->users_per = 20;
  c->users_cold = 5;
  c->users_cold_ms = 3;
  c->users_warm = 20;
  c->users_held_ms = 30;
  c->users_held_stats = 20;
  c->v03_pending = 20000;
  c->v03_calls = 20000;
  c->v03_rearm_min_ms = 1;
  c->v03_conns = 1000;
  c->v03_late = 500;
  c->v03_late_min_ms = 2;
  c->v03_late_max_ms = 20;
  c->v03_late_window_ms = 10;
  c->v03_keys = 2000;
  c->v03_per = 10;
  c->v03_stream = 20000;
  c->groups_ticks = 20;
  c->groups_bulk_ms = 5;
  c->groups_warm_ms = 20;
  c->groups_window_ms = 100;
  c->hooks_calls = 20000;
  c->hooks_queued = 10000;
  c->hooks_rounds = 20;
  c->hooks_spin_us = 200;
  c->coop_checks = 100000;
  c->coop_trials = 20;
  c->coop_long_ms = 5;
  c->coop_window_ms = 40;
  c->coop_gap_us = 250;
}


static void usage(FILE* f) {
  size_t i;

  fprintf(f,
          "usage: uvsched-bench [--smoke] [--runs N] [--only NAME[,NAME...]]\n"
          "                     [--json PATH] [--verbose] [--list]\n"
          "                     [--users-budget N] [--hold-us N]\n"
          "  --smoke    tiny sizes; checks every task ran exactly once and in\n"
          "             order; exit status 1 on a correctness failure only\n"
          "  --runs N   repetitions per scenario (default 7, smoke 2)\n"
          "  --only     scenarios to run, by id or name (repeatable)\n"
          "  --json     where to write the results (default\n"
          "             uvsched-bench.json; smoke writes none unless asked)\n"
          "  --users-budget N  the u rows' scheduler runs N tasks per drain\n"
          "             instead of a time slice (default 0: the slice)\n"
          "  --hold-us N  the u rows' scheduler's hold_us (uvsched 0.5 and\n"
          "             later; default 0: the library's default)\n"
          "scenarios:\n");
  for (i = 0; i < NSCENARIOS; i++)
    fprintf(f, "  %-3s %-13s %s\n", scenarios[i].id, scenarios[i].name,
            scenarios[i].what);
}


static int only_match(const char* list, const scenario_t* sc) {
  const char* p;
  size_t len;

  for (p = list; *p != '\0'; p += len + (p[len] == ',')) {
    len = strcspn(p, ",");
    if ((strlen(sc->id) == len && strncmp(p, sc->id, len) == 0) ||
        (strlen(sc->name) == len && strncmp(p, sc->name, len) == 0))
      return 1;
  }
  return 0;
}


static int only_valid(const char* list) {
  const char* p;
  size_t len;
  size_t i;
  int ok;

  for (p = list; *p != '\0'; p += len + (p[len] == ',')) {
    len = strcspn(p, ",");
    ok = 0;
    for (i = 0; i < NSCENARIOS; i++)
      if ((strlen(scenarios[i].id) == len &&
           strncmp(p, scenarios[i].id, len) == 0) ||
          (strlen(scenarios[i].name) == len &&
           strncmp(p, scenarios[i].name, len) == 0))
        ok = 1;
    if (!ok) {
      fprintf(stderr, "uvsched-bench: unknown scenario '%.*s'\n", (int) len, p);
      return 0;
    }
  }
  return 1;
}


static void warm_work(uv_work_t* req) {
  (void) req;
}


/* libuv starts its pool threads on the first uv_queue_work; do that before
 * any clock runs. */
static void warm_pool(void) {
  uv_loop_t loop;
  uv_work_t reqs[8];
  int i;

  bench_loop_init(&loop);
  for (i = 0; i < 8; i++) uv_queue_work(&loop, &reqs[i], warm_work, NULL);
  bench_loop_close(&loop, "warm-up");
}


int main(int argc, char** argv) {
  bench_cfg_t cfg;
  machine_t m;
  char only[512];
  char command[1024];
  const char* json;
  int runs;
  long users_budget;
  long hold_us;
  int smoke;
  int verbose;
  int i;
  size_t k;
  uint64_t t0;
  uint64_t scenario_start;
  int first_row;
  struct sigaction sa;

  smoke = 0;
  verbose = 0;
  runs = 0;
  users_budget = 0;
  hold_us = 0;
  json = NULL;
  only[0] = '\0';
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--smoke") == 0) {
      smoke = 1;
    } else if (strcmp(argv[i], "--verbose") == 0 ||
               strcmp(argv[i], "-v") == 0) {
      verbose = 1;
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
      if (runs < 1 || runs > BENCH_MAX_RUNS) {
        fprintf(stderr, "uvsched-bench: --runs takes 1..%d\n", BENCH_MAX_RUNS);
        return 2;
      }
    } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      i++;
      if (!only_valid(argv[i]))
        return 2;
      if (strlen(only) + strlen(argv[i]) + 2 > sizeof(only))
        return 2;
      if (only[0] != '\0')
        strcat(only, ",");
      strcat(only, argv[i]);
    } else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else if (strcmp(argv[i], "--users-budget") == 0 && i + 1 < argc) {
      users_budget = atol(argv[++i]);
      if (users_budget < 0 || users_budget > 1000000000) {
        fprintf(stderr, "uvsched-bench: --users-budget takes 0..1e9\n");
        return 2;
      }
    } else if (strcmp(argv[i], "--hold-us") == 0 && i + 1 < argc) {
      hold_us = atol(argv[++i]);
#if UVS_VERSION_HEX >= 0x000500
      if (hold_us < 0 || hold_us > 1000000000) {
        fprintf(stderr, "uvsched-bench: --hold-us takes 0..1e9\n");
        return 2;
      }
#else
      fprintf(stderr,
              "uvsched-bench: --hold-us needs uvsched 0.5 or later (built "
              "against %s)\n",
              uvs_version_string());
      return 2;
#endif
    } else if (strcmp(argv[i], "--list") == 0 ||
               strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      return 2;
    }
  }

  memset(&cfg, 0, sizeof(cfg));
  if (smoke)
    cfg_smoke(&cfg);
  else
    cfg_full(&cfg);
  cfg.smoke = smoke;
  cfg.verbose = verbose;
  if (runs != 0)
    cfg.runs = runs;
  cfg.users_budget = (unsigned) users_budget;
  cfg.users_hold_us = (unsigned) hold_us;
  if (json == NULL && !smoke)
    json = "uvsched-bench.json";
  watchdog_default = cfg.watchdog_s;

  command[0] = '\0';
  for (i = 0; i < argc; i++) {
    if (strlen(command) + strlen(argv[i]) + 2 > sizeof(command))
      break;
    if (i > 0)
      strcat(command, " ");
    strcat(command, argv[i]);
  }

  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);

  machine_read(&m);
  printf("# uvsched-bench, uvsched %s, %s mode, %d runs per scenario\n",
         uvs_version_string(), smoke ? "smoke" : "full", cfg.runs);
  printf("# command: %s\n", command);
  if (smoke)
    printf(
        "# smoke: tiny sizes (the titles name the full ones); the figures "
        "mean nothing, only correctness counts\n");
  printf("# machine: %ld cpus, %s\n", m.nproc, m.cpu);
  printf("# kernel: %s\n", m.kernel);
  printf("# libuv: %s, thread pool: %s\n", m.libuv, m.pool);
  printf("# compiler: %s, buildtype: %s\n", m.compiler, UVS_BENCH_BUILDTYPE);
  printf("# date: %s\n", m.date);
  printf(
      "# sizeof(uvs_task_t) %zu, uvs_worker_t %zu, uvs_sched_t %zu, "
      "uv_work_t %zu, uv_timer_t %zu\n",
      sizeof(uvs_task_t), sizeof(uvs_worker_t), sizeof(uvs_sched_t),
      sizeof(uv_work_t), sizeof(uv_timer_t));
  fflush(stdout);

  warm_pool();
  t0 = uv_hrtime();
  for (k = 0; k < NSCENARIOS; k++) {
    if (only[0] != '\0' && !only_match(only, &scenarios[k]))
      continue;
    printf("# %s %s: %s\n", scenarios[k].id, scenarios[k].name,
           scenarios[k].what);
    fflush(stdout);
    scenario_start = uv_hrtime();
    first_row = nrows;
    scenarios[k].fn(&cfg);
    bench_watchdog(NULL, 0);
    for (i = first_row; i < nrows; i++) print_row_figures(&rows[i]);
    printf("# %s took %.1f s\n", scenarios[k].id,
           (double) (uv_hrtime() - scenario_start) / 1e9);
  }

  printf("\n");
  print_table(stdout);
  printf("\n# total %.1f s, %lu correctness failure(s)\n",
         (double) (uv_hrtime() - t0) / 1e9, bench_failures());
  fflush(stdout);
  if (json != NULL && write_json(json, &m, &cfg, command) == 0)
    printf("# wrote %s\n", json);
  uv_library_shutdown();
  return bench_failures() == 0 ? 0 : 1;
}
