/* Tracing tasks with a hook: every task's life as a Chrome trace, with an
 * arrow from each task to the tasks it scheduled.
 *
 * A scheduler with a hook (uvs_sched_options_t's hook and hook_arg) runs a
 * small but realistic mix on libuv's pool of POOL threads and on the loop:
 *
 * - "ingest", a serial pool worker: a timer brings an arrival every
 *   ARRIVAL_MS, and with it a parse task (3 ms), which schedules follow-up
 *   work onto other workers from its own run_cb: after 1 ms of parsing,
 *   PER_ARRIVAL keyed requests onto "keyed", and at its end a reply onto
 *   "loop"; and a few posts;
 * - "keyed", a width-4 pool worker ordered per key: the parses' requests,
 *   each taking 2 to 5 ms;
 * - "batch", a serial pool worker with delayed flushes, one of them
 *   cancelled before it falls due;
 * - "loop", a loop worker: a periodic tick that cancels itself after TICKS
 *   runs, the replies, and a few posts.
 *
 * The hook only appends a record (the event, its worker and task, the
 * time, and for UVS_EV_ACCEPTED the task whose run_cb made the call, from
 * uvs_current_task) to a buffer of the thread that calls it: no lock, no
 * allocation, no I/O. Each thread takes one of MAX_THREADS preallocated
 * buffers of `cap` records the first time it calls the hook; an event that
 * finds its buffer full (or no buffer left) is not recorded but counted as
 * dropped. Once uv_run has returned, the loop thread pairs the records into
 * spans and writes them as Chrome trace-event JSON, which Perfetto
 * (ui.perfetto.dev) and chrome://tracing open:
 *
 * - "run" (cat "run"): STARTED to ENDED, an "X" event on the track of the
 *   thread that ran run_cb;
 * - "queued" (cat "queued"): ACCEPTED to STARTED, or to HANDED_BACK for a
 *   task handed back unrun, on a track of its worker (a worker has as many
 *   queue tracks as it had tasks waiting at once, so that the spans of a
 *   track never overlap);
 * - a flow (cat "flow", name "schedule"): from the parent's run, where it
 *   scheduled the task, to the task's next run: an "s" event inside the
 *   one and an "f" event inside the other, with the same id;
 * - "accepted" and "handed back": instant events on the thread where they
 *   happened, the latter with the status; an ACCEPTED made inside a run_cb
 *   is the flow's "s" instead, or, if its flow cannot be drawn, only the
 *   start of its queued span.
 *
 * Usage: example-trace [FILE [RECORDS_PER_THREAD]]: FILE defaults to
 * trace.json. The program prints the counts it expects (from its own
 * counters, not the hook's) and what it wrote; test_trace.py checks one
 * against the other. docs/tracing.rst shows the parts between the
 * "trace:" lines.
 */

#include "../example.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

#define POOL 4        /* libuv's pool: main() sets UV_THREADPOOL_SIZE */
#define ARRIVALS 8    /* timer ticks that bring work */
#define ARRIVAL_MS 4  /* ... one every ARRIVAL_MS */
#define PER_ARRIVAL 2 /* keyed requests per arrival */
#define NKEYS 3       /* keys of the keyed requests */
#define NFLUSH 4      /* delayed flushes on "batch" */
#define TICKS 6       /* runs of the periodic tick */
#define TICK_MS 8     /* its period */
#define NPOSTS 3      /* posts onto "ingest" and onto "loop", each */
#define NREQS (ARRIVALS * PER_ARRIVAL)
#define NJOBS (NREQS + 2 * ARRIVALS + NFLUSH + 1) /* with a done_cb */
#define NCHILDREN (NREQS + ARRIVALS) /* scheduled from a run_cb: flows */

/* trace: buffers begins */
#define MAX_THREADS 16   /* the loop thread and libuv's pool */
#define DEFAULT_CAP 4096 /* records per thread */

typedef struct rec_s {
  uint64_t seq;         /* global order of the events */
  uint64_t ns;          /* uv_hrtime() in the hook */
  uvs_worker_t* worker; /* never NULL */
  uvs_task_t* task;     /* NULL for posts, and the ENDED of a done-less task */
  uvs_task_t* parent;   /* ACCEPTED: the task whose run_cb scheduled it */
  uvs_event_t event;
  int status;
} rec_t;

/* One thread's records: only that thread writes them; the loop thread reads
 * them once the work is over. */
typedef struct tbuf_s {
  rec_t* recs;
  size_t cap;
  atomic_size_t n;           /* records written (release) */
  atomic_uint_fast64_t lost; /* events that found the buffer full */
} tbuf_t;

typedef struct trace_s {
  tbuf_t bufs[MAX_THREADS]; /* bufs[0]: the loop thread */
  atomic_int nbufs;         /* buffers taken, may pass MAX_THREADS */
  tbuf_t none;              /* cap 0: the threads that found none left */
  atomic_uint_fast64_t seq;
} trace_t;

static trace_t trace;
static _Thread_local tbuf_t* my_buf; /* this thread's, once it has one */


/* The first event of a thread takes it a buffer: an atomic add, no lock. */
static tbuf_t* take_buf(trace_t* tr) {
  int k = atomic_fetch_add(&tr->nbufs, 1);

  return k < MAX_THREADS ? &tr->bufs[k] : &tr->none;
}
/* trace: buffers ends */


/* trace: hook begins */
/* The hook: on the thread of the event, so it must not block. One atomic
 * add (the sequence number), a copy, and a release store of the buffer's
 * count, which only this thread writes. The one uvs_ function it calls,
 * uvs_current_task, reads a thread-local: an ACCEPTED inside a run_cb
 * gets the running task, the parent; one made anywhere else (a timer
 * callback, main, a post's fn) gets NULL. */
static void trace_hook(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uvs_event_t event,
                       int status,
                       void* arg) {
  trace_t* tr = arg;
  tbuf_t* b = my_buf;
  size_t i;

  if (b == NULL)
    b = my_buf = take_buf(tr);
  i = atomic_load_explicit(&b->n, memory_order_relaxed);
  if (i == b->cap) {
    atomic_fetch_add_explicit(&b->lost, 1, memory_order_relaxed);
    return;
  }
  b->recs[i].seq = atomic_fetch_add_explicit(&tr->seq, 1, memory_order_relaxed);
  b->recs[i].ns = uv_hrtime();
  b->recs[i].worker = worker;
  b->recs[i].task = task;
  b->recs[i].event = event;
  b->recs[i].status = status;
  b->recs[i].parent = event == UVS_EV_ACCEPTED ? uvs_current_task() : NULL;
  atomic_store_explicit(&b->n, i + 1, memory_order_release);
}
/* trace: hook ends */


/* ---- the workload ---- */

typedef struct wk_s {
  uvs_worker_t worker; /* First member: a uvs_worker_t* is also a wk_t*. */
  const char* name;
  /* The writer's state: the ACCEPTED records of posts not started yet, in
   * order (a post's hook events have no task; its worker is serial and its
   * posts come from one thread, so they start in the order accepted). */
  size_t* posts;
  size_t post_head, post_tail;
  size_t lanes; /* queue tracks */
} wk_t;

typedef struct job_s {
  uvs_task_t task; /* First member: a uvs_task_t* is also a job_t*. */
  char name[24];   /* "req 3", "parse 1"...: the trace shows it */
  uint64_t key;
  uint64_t delay_ms; /* of its schedule call: its queued span includes it */
  int run_ms;
  /* The writer's: the index of its ACCEPTED record not yet paired, or -1. */
  long accepted;
} job_t;

enum { KEYED, INGEST, BATCH, LOOP, NWORKERS };
static wk_t wks[NWORKERS] = {
    [KEYED] = {.name = "keyed"},
    [INGEST] = {.name = "ingest"},
    [BATCH] = {.name = "batch"},
    [LOOP] = {.name = "loop"},
};

static uvs_sched_t sched;
static job_t reqs[NREQS];
static job_t parses[ARRIVALS];
static job_t replies[ARRIVALS];
static job_t flushes[NFLUSH];
static job_t tick;
static uv_timer_t arrivals;
static int narrivals;
static int nticks; /* loop thread only */
static int ndone;
static int ncancelled;
static atomic_int nruns;     /* run_cb and post calls */
static atomic_int naccepted; /* schedule and post calls that returned 0 */
static atomic_int nchildren; /* ... of them made from inside a run_cb */


static void accepted(int rc) {
  CHECK(rc);
  atomic_fetch_add(&naccepted, 1);
}


static void child(int rc) { /* a schedule call made by a task's run_cb */
  accepted(rc);
  atomic_fetch_add(&nchildren, 1);
}


static void job_done(uvs_task_t* task, int status) { /* loop thread */
  (void) task;
  if (status != 0)
    ncancelled++;
  if (++ndone == NJOBS)
    CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


static void job_init(job_t* job, uvs_run_cb run, const char* what, int id) {
  CHECK(uvs_task_init(&job->task, run, job_done));
  snprintf(job->name, sizeof(job->name), "%s %d", what, id);
  job->accepted = -1;
}


static void work(int ms) { /* on a pool thread: work that holds it */
  atomic_fetch_add(&nruns, 1);
  uv_sleep(ms);
}


static void req_run(uvs_task_t* task) {
  work(((job_t*) task)->run_ms);
}


static void reply_run(uvs_task_t* task) { /* loop thread: short */
  (void) task;
  atomic_fetch_add(&nruns, 1);
}


/* A parse schedules its follow-ups onto other workers from its own run_cb:
 * the hook's ACCEPTED of each runs on this pool thread, inside this run,
 * where uvs_current_task() is this task. */
static void parse_run(uvs_task_t* task) {
  job_t* job = (job_t*) task;
  int id = (int) (job - parses);
  int i;

  EXPECT(uvs_current_task() == task);
  atomic_fetch_add(&nruns, 1);
  uv_sleep(1);
  for (i = 0; i < PER_ARRIVAL; i++) {
    job_t* req = &reqs[id * PER_ARRIVAL + i];

    CHECK(uvs_task_set_key(&req->task, req->key));
    child(uvs_schedule(&wks[KEYED].worker, &req->task));
  }
  uv_sleep(job->run_ms - 1);
  child(uvs_schedule(&wks[LOOP].worker, &replies[id].task));
}


static void flush_run(uvs_task_t* task) {
  work(((job_t*) task)->run_ms);
}


static void post_run(void* arg) {
  (void) arg;
  EXPECT(uvs_current_task() == NULL); /* a post's fn is no task's run_cb */
  atomic_fetch_add(&nruns, 1);
}


static void tick_run(uvs_task_t* task) { /* loop thread, every TICK_MS */
  atomic_fetch_add(&nruns, 1);
  nticks++;
  if (nticks == 3) /* the last flush, not due yet: handed back unrun */
    CHECK(uvs_task_cancel(&flushes[NFLUSH - 1].task));
  if (nticks == TICKS)
    CHECK(uvs_task_cancel(task));
}


/* Work arrives (loop thread): a parse, which schedules the rest. A timer
 * callback runs no task: this ACCEPTED has no parent. */
static void arrive(uv_timer_t* timer) {
  EXPECT(uvs_current_task() == NULL);
  accepted(uvs_schedule(&wks[INGEST].worker, &parses[narrivals].task));
  if (++narrivals == ARRIVALS)
    uv_close((uv_handle_t*) timer, NULL);
}


static void start_work(uv_loop_t* loop) {
  int i;

  for (i = 0; i < NREQS; i++) {
    job_init(&reqs[i], req_run, "req", i);
    reqs[i].key = 1 + (uint64_t) i % NKEYS;
    reqs[i].run_ms = 2 + i % 4;
  }
  for (i = 0; i < ARRIVALS; i++) {
    job_init(&parses[i], parse_run, "parse", i);
    parses[i].run_ms = 3;
    job_init(&replies[i], reply_run, "reply", i);
  }
  for (i = 0; i < NFLUSH; i++) {
    job_init(&flushes[i], flush_run, "flush", i);
    flushes[i].run_ms = 4;
    /* The last is due long after the third tick cancels it: a loop that
     * sanitizers or a busy machine slow down must not let it start
     * first (UV_EBUSY). */
    flushes[i].delay_ms = i == NFLUSH - 1 ? 1000 : 10 + 12 * (uint64_t) i;
    accepted(uvs_schedule_after(&wks[BATCH].worker, &flushes[i].task,
                                flushes[i].delay_ms));
  }
  job_init(&tick, tick_run, "tick", 0);
  tick.delay_ms = TICK_MS;
  accepted(uvs_schedule_every(&wks[LOOP].worker, &tick.task, TICK_MS, TICK_MS));
  for (i = 0; i < NPOSTS; i++) {
    accepted(uvs_post(&wks[INGEST].worker, post_run, NULL));
    accepted(uvs_post(&wks[LOOP].worker, post_run, NULL));
  }
  CHECK(uv_timer_init(loop, &arrivals));
  CHECK(uv_timer_start(&arrivals, arrive, 1, ARRIVAL_MS));
}


/* ---- writing the trace (loop thread, after uv_run) ---- */

typedef struct ev_s {
  rec_t r;
  int tid;      /* the buffer's index: the thread's track */
  long run;     /* ACCEPTED: the STARTED of its parent's run, or -1 */
  uint64_t end; /* STARTED: its ENDED's time once the run is written, or 0 */
} ev_t;

/* A task scheduled from inside a run_cb, and the run it led to. */
typedef struct flow_s {
  long acc; /* its ACCEPTED, whose run is the parent's */
  long run; /* its STARTED */
} flow_t;

typedef struct span_s {
  uint64_t start, end;
  wk_t* wk;
  const job_t* job; /* NULL for a post */
  int outcome;      /* 0: started; else the status it was handed back with */
} span_t;

/* Queue tracks: QUEUE_TID + MAX_LANES * worker + lane. */
enum { QUEUE_TID = 100, MAX_LANES = 32 };

static uint64_t t0;


static int by_seq(const void* a, const void* b) {
  uint64_t x = ((const ev_t*) a)->r.seq;
  uint64_t y = ((const ev_t*) b)->r.seq;

  return x < y ? -1 : x > y;
}


static int by_start(const void* a, const void* b) {
  uint64_t x = ((const span_t*) a)->start;
  uint64_t y = ((const span_t*) b)->start;

  return x < y ? -1 : x > y;
}


static double us(uint64_t ns) {
  return (double) (ns - t0) / 1e3;
}


static const char* task_name(const rec_t* r) {
  return r->task != NULL ? ((job_t*) r->task)->name : "post";
}


static void put_sep(FILE* f, int* first) {
  fputs(*first ? "\n" : ",\n", f);
  *first = 0;
}


static void put_meta(FILE* f,
                     int* first,
                     int tid,
                     const char* what,
                     const char* name,
                     int sort) {
  put_sep(f, first);
  fprintf(f,
          "{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"%s\","
          "\"args\":{\"name\":\"%s\"}}",
          tid, what, name);
  put_sep(f, first);
  fprintf(f,
          "{\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"name\":\"thread_sort_index\","
          "\"args\":{\"sort_index\":%d}}",
          tid, sort);
}


static void put_instant(FILE* f, int* first, const ev_t* e, const char* name) {
  put_sep(f, first);
  fprintf(f,
          "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"%s\",\"name\":\"%s\","
          "\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"args\":{\"task\":\"%s\","
          "\"worker\":\"%s\",\"status\":\"%s\"}}",
          name, name, e->tid, us(e->r.ns), task_name(&e->r),
          ((wk_t*) e->r.worker)->name,
          e->r.status != 0 ? uv_err_name(e->r.status) : "0");
}


/* Greedy lanes: each queued span goes on the first track of its worker
 * whose last span has ended, so that no two spans of a track overlap. */
static void put_queued(FILE* f, int* first, span_t* spans, size_t n) {
  uint64_t lane_end[NWORKERS][MAX_LANES];
  size_t i;
  size_t lane;

  memset(lane_end, 0, sizeof(lane_end));
  qsort(spans, n, sizeof(*spans), by_start);
  for (i = 0; i < n; i++) {
    span_t* s = &spans[i];
    const char* name = s->job != NULL ? s->job->name : "post";
    int w = (int) (s->wk - wks);

    /* The last lane takes the rest: test_trace.py would see the overlap. */
    for (lane = 0; lane < MAX_LANES - 1 && lane_end[w][lane] > s->start;
         lane++) {
    }
    lane_end[w][lane] = s->end;
    if (lane + 1 > s->wk->lanes)
      s->wk->lanes = lane + 1;
    put_sep(f, first);
    fprintf(f,
            "{\"ph\":\"X\",\"cat\":\"queued\",\"name\":\"%s\",\"pid\":1,"
            "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"task\":\"%s\","
            "\"worker\":\"%s\",\"delay_ms\":%" PRIu64 ",\"outcome\":\"%s\"}}",
            name, QUEUE_TID + MAX_LANES * w + (int) lane, us(s->start),
            us(s->end) - us(s->start), name, s->wk->name,
            s->job != NULL ? s->job->delay_ms : 0,
            s->outcome != 0 ? uv_err_name(s->outcome) : "started");
  }
}


/* trace: flows begins */
/* A flow per task scheduled from inside a run_cb, if both runs are in the
 * trace: "s" on the parent's thread at the task's ACCEPTED, inside the
 * parent's run, and "f" with "bp":"e" (bind to the enclosing slice) 1 ns
 * into the task's run, so that every viewer sorts it after the run's
 * start. The flow's "s" stands for the ACCEPTED, which gets no
 * "accepted" instant: for Perfetto, an instant inside the run would be the
 * slice that the run's next flow starts from. An ACCEPTED made inside a
 * run whose flow is not drawn (the task never ran, or a run was lost) has
 * neither, for the same reason: its queued span still starts at it. */
static void put_flows(
    FILE* f, int* first, const ev_t* evs, const flow_t* flows, size_t nflows) {
  size_t i;

  for (i = 0; i < nflows; i++) {
    const ev_t* a = &evs[flows[i].acc];
    const ev_t* parent = &evs[a->run];
    const ev_t* child = &evs[flows[i].run];
    uint64_t in;

    if (parent->end == 0 || child->end == 0)
      continue;
    in = child->r.ns + (child->end - child->r.ns >= 2);
    put_sep(f, first);
    fprintf(
        f,
        "{\"ph\":\"s\",\"cat\":\"flow\",\"name\":\"schedule\",\"id\":%" PRIu64
        ",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"args\":{\"task\":\"%s\","
        "\"worker\":\"%s\",\"parent\":\"%s\"}}",
        a->r.seq, a->tid, us(a->r.ns), task_name(&a->r),
        ((wk_t*) a->r.worker)->name, task_name(&parent->r));
    put_sep(f, first);
    fprintf(f,
            "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"flow\",\"name\":\"schedule\","
            "\"id\":%" PRIu64 ",\"pid\":1,\"tid\":%d,\"ts\":%.3f}",
            a->r.seq, child->tid, us(in));
  }
}
/* trace: flows ends */


/* trace: write begins */
/* Pairs the records in the order they happened: ACCEPTED with the task's
 * next STARTED (or its HANDED_BACK if it never ran) into a queued span,
 * and, if a run_cb made the ACCEPTED, into a flow from that run; STARTED
 * with the next ENDED of the same thread into a run span. Returns the
 * number of events lost to full buffers. */
static uint64_t write_trace(const char* path, trace_t* tr) {
  int nthreads = atomic_load(&tr->nbufs);
  size_t nev = 0, nspans = 0, nflows = 0, i;
  uint64_t lost = atomic_load(&tr->none.lost);
  long open_run[MAX_THREADS]; /* each thread's STARTED not yet ended */
  ev_t* evs;
  span_t* spans;
  flow_t* flows;
  FILE* f;
  int first = 1;
  int k;

  if (nthreads > MAX_THREADS)
    nthreads = MAX_THREADS;
  for (k = 0; k < nthreads; k++)
    nev += atomic_load_explicit(&tr->bufs[k].n, memory_order_acquire);
  evs = malloc((nev + 1) * sizeof(*evs));
  spans = malloc((nev + 1) * sizeof(*spans));
  flows = malloc((nev + 1) * sizeof(*flows));
  EXPECT(evs != NULL && spans != NULL && flows != NULL);
  nev = 0;
  for (k = 0; k < nthreads; k++) {
    size_t n = atomic_load_explicit(&tr->bufs[k].n, memory_order_acquire);

    for (i = 0; i < n; i++) {
      evs[nev].r = tr->bufs[k].recs[i];
      evs[nev].tid = k;
      evs[nev].run = -1;
      evs[nev++].end = 0;
    }
    lost += atomic_load(&tr->bufs[k].lost);
    open_run[k] = -1;
  }
  qsort(evs, nev, sizeof(*evs), by_seq);
  t0 = nev > 0 ? evs[0].r.ns : 0;
  for (k = 0; k < NWORKERS; k++) {
    wks[k].posts = malloc((nev + 1) * sizeof(size_t));
    EXPECT(wks[k].posts != NULL);
  }

  f = fopen(path, "w");
  EXPECT(f != NULL);
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
  put_sep(f, &first);
  fputs(
      "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\","
      "\"args\":{\"name\":\"uvsched trace example\"}}",
      f);
  for (i = 0; i < nev; i++) {
    ev_t* e = &evs[i];
    wk_t* wk = (wk_t*) e->r.worker;
    job_t* job = (job_t*) e->r.task; /* NULL for a post */
    long acc = -1;
    long run = open_run[e->tid];

    switch (e->r.event) {
      case UVS_EV_ACCEPTED:
        /* Made by a run_cb: inside that task's run, on this thread. */
        if (e->r.parent != NULL && run >= 0 && evs[run].r.task == e->r.parent)
          e->run = run; /* no instant: put_flows */
        else
          put_instant(f, &first, e, "accepted");
        if (job != NULL)
          job->accepted = (long) i;
        else
          wk->posts[wk->post_tail++] = i;
        break;
      case UVS_EV_STARTED:
        open_run[e->tid] = (long) i;
        if (job != NULL) {
          acc = job->accepted;
          job->accepted = -1;
        } else if (wk->post_head < wk->post_tail) {
          acc = (long) wk->posts[wk->post_head++];
        }
        if (acc >= 0) /* a periodic task's later runs have none */
          spans[nspans++] = (span_t){evs[acc].r.ns, e->r.ns, wk, job, 0};
        if (acc >= 0 && evs[acc].run >= 0)
          flows[nflows++] = (flow_t){acc, (long) i};
        break;
      case UVS_EV_ENDED:
        if (run >= 0) { /* its STARTED was not lost */
          ev_t* s = &evs[run];

          s->end = e->r.ns;
          put_sep(f, &first);
          fprintf(f,
                  "{\"ph\":\"X\",\"cat\":\"run\",\"name\":\"%s\",\"pid\":1,"
                  "\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{"
                  "\"task\":\"%s\",\"worker\":\"%s\"}}",
                  task_name(&s->r), e->tid, us(s->r.ns),
                  us(e->r.ns) - us(s->r.ns), task_name(&s->r), wk->name);
        }
        open_run[e->tid] = -1;
        break;
      case UVS_EV_HANDED_BACK:
        put_instant(f, &first, e, "handed back");
        if (job != NULL && job->accepted >= 0) { /* never started */
          spans[nspans++] =
              (span_t){evs[job->accepted].r.ns, e->r.ns, wk, job, e->r.status};
          job->accepted = -1;
        }
        break;
    }
  }
  put_queued(f, &first, spans, nspans);
  put_flows(f, &first, evs, flows, nflows);

  /* Track names, threads first, then each worker's queue tracks. */
  for (k = 0; k < nthreads; k++) {
    char name[32];

    if (k == 0)
      snprintf(name, sizeof(name), "loop thread");
    else
      snprintf(name, sizeof(name), "pool thread %d", k);
    put_meta(f, &first, k, "thread_name", name, k);
  }
  for (k = 0; k < NWORKERS; k++) {
    size_t lane;

    for (lane = 0; lane < wks[k].lanes; lane++) {
      char name[48];
      int tid = QUEUE_TID + MAX_LANES * k + (int) lane;

      snprintf(name, sizeof(name), "queue of %s #%zu", wks[k].name, lane);
      put_meta(f, &first, tid, "thread_name", name, tid);
    }
    free(wks[k].posts);
  }
  fprintf(f, "\n],\"otherData\":{\"lost_events\":%" PRIu64 "}}\n", lost);
  EXPECT(fclose(f) == 0);
  free(flows);
  free(spans);
  free(evs);
  return lost;
}
/* trace: write ends */


/* libuv sizes its pool at its first uv_queue_work: this comes before. */
static void set_pool_size(int n) {
  char size[16];

  snprintf(size, sizeof(size), "%d", n);
  EXPECT(setenv("UV_THREADPOOL_SIZE", size, 1) == 0);
}


int main(int argc, char** argv) {
  uv_loop_t* loop = uv_default_loop();
  const char* path = argc > 1 ? argv[1] : "trace.json";
  size_t cap = argc > 2 ? (size_t) strtoul(argv[2], NULL, 10) : DEFAULT_CAP;
  uvs_worker_options_t keyed = {.width = 4};
  uvs_sched_options_t so;
  uint64_t lost;
  int k;

  set_pool_size(POOL);
  /* trace: init begins */
  /* Every buffer before the first event; bufs[0] is the loop thread's. */
  for (k = 0; k < MAX_THREADS; k++) {
    trace.bufs[k].recs = malloc(cap * sizeof(rec_t) + 1);
    trace.bufs[k].cap = cap;
    EXPECT(trace.bufs[k].recs != NULL);
  }
  my_buf = take_buf(&trace);

  memset(&so, 0, sizeof(so));
  so.max_concurrency = POOL;
  so.hook = trace_hook;
  so.hook_arg = &trace;
  CHECK(uvs_sched_init(loop, &sched, &so));
  CHECK(uvs_worker_init_ex(&sched, &wks[KEYED].worker, UVS_POOL, &keyed));
  CHECK(uvs_worker_init(&sched, &wks[INGEST].worker, UVS_POOL));
  CHECK(uvs_worker_init(&sched, &wks[BATCH].worker, UVS_POOL));
  CHECK(uvs_worker_init(&sched, &wks[LOOP].worker, UVS_LOOP));
  /* trace: init ends */

  start_work(loop);
  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);
  /* The scheduler's close has completed: every hook call is over. */
  lost = write_trace(path, &trace);

  printf(
      "expected: accepted=%d runs=%d handed_back=%d cancelled=%d "
      "flows=%d\n",
      atomic_load(&naccepted), atomic_load(&nruns), ndone, ncancelled,
      atomic_load(&nchildren));
  printf("wrote %s: %d threads, %" PRIu64 " events lost\n", path,
         atomic_load(&trace.nbufs) < MAX_THREADS ? atomic_load(&trace.nbufs)
                                                 : MAX_THREADS,
         lost);
  EXPECT(ndone == NJOBS && ncancelled == 2 && nticks == TICKS);
  EXPECT(atomic_load(&nchildren) == NCHILDREN);
  EXPECT(atomic_load(&nruns) ==
         NREQS + 2 * ARRIVALS + NFLUSH - 1 + TICKS + 2 * NPOSTS);
  for (k = 0; k < MAX_THREADS; k++) free(trace.bufs[k].recs);
  CHECK(uv_loop_close(loop));
  return 0;
}
