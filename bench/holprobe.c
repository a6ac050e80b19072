/* uvsched-holprobe: where the start latency of bench row u1 goes.
 *
 * u1's scene: one pool worker runs a 50 ms task; 1 ms later a timer
 * callback gives 32 other serial pool workers a 2 us task each. This
 * program replays it, with uvsched and with a raw uv_queue_work per task,
 * and splits each short task's start latency (schedule call to run_cb)
 * into the parts a reader can act on:
 *
 *   call->cb end   the rest of the callback that scheduled it;
 *   first start    the callback's end to the first short task's start:
 *                  the loop posting work and a pool thread waking;
 *   cycle          start to start of consecutive tasks on one pool thread:
 *                  a 2 us task and the bookkeeping around it;
 *   start p50/p99  schedule call to run_cb, as bench row u1 reports;
 *   event p50      the callback's first schedule call to run_cb, as the
 *                  u1 event row reports.
 *
 * Medians over rounds (the first 3 are warm-up). Usage:
 *   uvsched-holprobe [--rounds N] [--cap N]
 * where --cap sets the scheduler's max_concurrency (0: the pool's size).
 */

#include <uvsched.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSHORT 32
#define SHORT_NS 2000
#define LONG_NS 50000000
#define WARMUP 3

typedef struct {
  uvs_task_t task;
  uv_work_t work;
  uint64_t call;
  uint64_t start;
  pthread_t thread;
} item_t;

typedef struct {
  double* end;   /* call -> callback end, per task */
  double* first; /* callback end -> first start, per round */
  double* cycle; /* start -> next start on the same thread */
  double* start; /* call -> start, per task */
  double* event; /* the callback's first call -> start, per task */
  size_t nend, nfirst, ncycle, nstart, nevent;
} samples_t;

static item_t items[NSHORT + 1];
static uvs_worker_t workers[NSHORT + 1];
static uvs_sched_t sched;
static uv_loop_t loop;
static uv_timer_t timer;
static uint64_t cb_end;
static int raw;


static void spin(uint64_t ns) {
  uint64_t t0;

  t0 = uv_hrtime();
  while (uv_hrtime() - t0 < ns) {
  }
}


static void run(item_t* it) {
  it->start = uv_hrtime();
  it->thread = pthread_self();
  spin(it == &items[0] ? LONG_NS : SHORT_NS);
}


static void run_cb(uvs_task_t* task) {
  run((item_t*) task);
}


static void done_cb(uvs_task_t* task, int status) {
  (void) task;
  if (status != 0)
    abort();
}


static void work_cb(uv_work_t* req) {
  run(req->data);
}


static void after_cb(uv_work_t* req, int status) {
  (void) req;
  if (status != 0)
    abort();
}


static void submit(int i) {
  items[i].call = uv_hrtime();
  if (raw) {
    items[i].work.data = &items[i];
    if (uv_queue_work(&loop, &items[i].work, work_cb, after_cb) != 0)
      abort();
    return;
  }
  if (uvs_task_init(&items[i].task, run_cb, done_cb) != 0 ||
      uvs_schedule(&workers[i], &items[i].task) != 0)
    abort();
}


static void timer_cb(uv_timer_t* handle) {
  int i;

  /* 1 ms after the long task's schedule, by the real clock. */
  while (uv_hrtime() < items[0].call + 1000000) {
  }
  for (i = 1; i <= NSHORT; i++) submit(i);
  cb_end = uv_hrtime();
  uv_close((uv_handle_t*) handle, NULL);
}


static double us(uint64_t later, uint64_t earlier) {
  return (double) (int64_t) (later - earlier) / 1e3;
}


static void collect(samples_t* s) {
  uint64_t first;
  uint64_t next;
  int i;
  int j;

  first = UINT64_MAX;
  for (i = 1; i <= NSHORT; i++) {
    s->end[s->nend++] = us(cb_end, items[i].call);
    s->start[s->nstart++] = us(items[i].start, items[i].call);
    s->event[s->nevent++] = us(items[i].start, items[1].call);
    if (items[i].start < first)
      first = items[i].start;
    /* The next start on the same thread. */
    next = UINT64_MAX;
    for (j = 1; j <= NSHORT; j++)
      if (j != i && pthread_equal(items[j].thread, items[i].thread) &&
          items[j].start > items[i].start && items[j].start < next)
        next = items[j].start;
    if (next != UINT64_MAX)
      s->cycle[s->ncycle++] = us(next, items[i].start);
  }
  s->first[s->nfirst++] = us(first, cb_end);
}


static int cmp(const void* a, const void* b) {
  double x;
  double y;

  x = *(const double*) a;
  y = *(const double*) b;
  return (x > y) - (x < y);
}


static double quantile(double* v, size_t n, double q) {
  if (n == 0)
    return 0;
  qsort(v, n, sizeof(*v), cmp);
  return v[(size_t) (q * (double) (n - 1))];
}


static void variant(const char* name, int rounds, unsigned cap) {
  uvs_sched_options_t o;
  samples_t s;
  size_t per;
  int r;
  int i;

  per = (size_t) rounds * NSHORT;
  memset(&s, 0, sizeof(s));
  s.end = calloc(per, sizeof(double));
  s.first = calloc((size_t) rounds, sizeof(double));
  s.cycle = calloc(per, sizeof(double));
  s.start = calloc(per, sizeof(double));
  s.event = calloc(per, sizeof(double));
  if (s.end == NULL || s.first == NULL || s.cycle == NULL || s.start == NULL ||
      s.event == NULL)
    abort();
  if (uv_loop_init(&loop) != 0)
    abort();
  memset(&o, 0, sizeof(o));
  o.max_concurrency = cap;
  if (uvs_sched_init(&loop, &sched, &o) != 0)
    abort();
  for (i = 0; i <= NSHORT; i++)
    if (uvs_worker_init(&sched, &workers[i], UVS_POOL) != 0)
      abort();
  for (r = 0; r < WARMUP + rounds; r++) {
    submit(0);
    uv_update_time(&loop);
    if (uv_timer_init(&loop, &timer) != 0)
      abort();
    uv_timer_start(&timer, timer_cb, 1, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    if (r >= WARMUP)
      collect(&s);
  }
  if (uvs_sched_close(&sched, UVS_DRAIN, NULL) != 0)
    abort();
  uv_run(&loop, UV_RUN_DEFAULT);
  if (uv_loop_close(&loop) != 0)
    abort();
  printf(
      "%-8s call->cb end p50 %6.1f us | first start p50 %6.1f us | "
      "cycle p50 %5.2f us | start p50 %6.1f us, p99 %6.1f us | "
      "event p50 %6.1f us\n",
      name, quantile(s.end, s.nend, 0.5), quantile(s.first, s.nfirst, 0.5),
      quantile(s.cycle, s.ncycle, 0.5), quantile(s.start, s.nstart, 0.5),
      quantile(s.start, s.nstart, 0.99), quantile(s.event, s.nevent, 0.5));
  free(s.end);
  free(s.first);
  free(s.cycle);
  free(s.start);
  free(s.event);
}


int main(int argc, char** argv) {
  unsigned cap;
  int rounds;
  int i;

  rounds = 40;
  cap = 0;
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--cap") == 0 && i + 1 < argc)
      cap = (unsigned) atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--rounds N] [--cap N]\n", argv[0]);
      return 2;
    }
  }
  if (rounds < 1)
    rounds = 1;
  raw = 0;
  variant("uvsched", rounds, cap);
  raw = 1;
  variant("raw", rounds, cap);
  return 0;
}
