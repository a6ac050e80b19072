/* uvsched-demo: many connections, each with its own ordered pool worker.
 *
 * This stands in for a server until a real HTTP example exists. Each
 * simulated connection owns a UVS_POOL worker, the way a server keeps the
 * requests of one HTTP/1.1 connection in order while all connections together
 * use every core. Three producers schedule "requests" onto every connection:
 * the loop thread (through a loop-worker task that re-schedules itself once
 * per round) and two foreign threads that libuv knows nothing about. A
 * request hashes a buffer with FNV-1a on a pool thread, then posts its result
 * to a UVS_LOOP "collector" worker, which gathers results on the loop thread.
 *
 * What is checked, and printed at the end:
 *   - order: each producer's requests to a connection run, and their results
 *     arrive at the collector, in the order that producer scheduled them;
 *   - one at a time: no two requests of a connection ever run at once;
 *   - exactly once: every request runs once and is handed back once, and the
 *     XOR of all result hashes equals a serial recomputation;
 *   - threads: requests run off the loop thread, the collector on it;
 *   - cancel: every connection arms an idle timeout (a delayed task) and
 *     cancels it when its last result is in; none fires;
 *   - close: connection workers close with UVS_DRAIN, then the scheduler.
 * A periodic task on the collector prints progress. The exit status is 0
 * only if every check holds.
 *
 * The scheduler is created with keep_alive = 1: the foreign threads schedule
 * while the loop runs, and a call made off the loop thread cannot revive a
 * loop whose uv_run() has already returned. The loop thread closes the
 * scheduler at the end, which lets uv_run() return.
 *
 * Usage: uvsched-demo [connections [rounds]]
 * Each producer sends `rounds` requests to every connection.
 */

#include <uvsched.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPRODUCERS 3 /* the loop thread, then two foreign threads */
#define PAYLOAD_BYTES 2048
#define IDLE_TIMEOUT_MS 300000
#define PROGRESS_MS 50
#define WATCHDOG_MS 120000

typedef struct conn_s conn_t;

typedef struct request_s {
  uvs_task_t task; /* First member: a uvs_task_t* is also a request_t*. */
  conn_t* conn;
  unsigned producer;
  unsigned seq; /* per connection and producer: 0, 1, 2, ... */
  unsigned runs;
  uint64_t hash;
} request_t;

struct conn_s {
  uvs_worker_t worker;
  uvs_task_t idle_timeout;
  unsigned id;
  /* Touched by this connection's requests only, one at a time, no lock. */
  unsigned next_seq[NPRODUCERS];
  /* A flag, not a lock: finding it set on entry means two runs overlap. */
  atomic_int busy;
  /* Touched on the loop thread only. */
  unsigned next_result[NPRODUCERS];
  unsigned results;
};

static struct {
  unsigned nconn;
  unsigned rounds;
  unsigned total; /* requests: nconn * NPRODUCERS * rounds */
  conn_t* conns;
  request_t* reqs;
  unsigned char payload[PAYLOAD_BYTES];

  uv_loop_t* loop;
  uv_thread_t loop_thread;
  uvs_sched_t sched;
  uvs_worker_t collector; /* UVS_LOOP: results and progress */
  uvs_worker_t feeder;    /* UVS_LOOP: the loop thread's producer */
  uvs_task_t feed;
  unsigned feed_round;
  uvs_task_t ticker;
  uv_timer_t watchdog;
  uint64_t t_start;
  uint64_t t_end;

  /* Written on pool threads. */
  atomic_uint run_order_violations;
  atomic_uint overlaps;
  atomic_uint runs_on_loop;
  atomic_uint timeouts_fired;

  /* Written on the loop thread only. */
  unsigned completed;
  unsigned run_twice;
  unsigned collected;
  unsigned result_order_violations;
  unsigned collector_off_loop;
  uint64_t digest;
  unsigned timeouts_cancelled;
  unsigned timeouts_back;
  unsigned ticks;
  unsigned quarter_shown;
  int ticker_back;
  int finishing;
  unsigned workers_closed;
  int sched_closed;
  uvs_stats_t stats;
} demo;


static void fail(const char* what, int rc) {
  fprintf(stderr, "uvsched-demo: %s: %s\n", what, uv_strerror(rc));
  exit(1);
}


static int on_loop_thread(void) {
  uv_thread_t self = uv_thread_self();
  return uv_thread_equal(&self, &demo.loop_thread);
}


static uint64_t fnv1a(const void* buf, size_t len, uint64_t h) {
  const unsigned char* p = buf;
  while (len-- > 0) {
    h ^= *p++;
    h *= UINT64_C(1099511628211);
  }
  return h;
}


/* The work of one request, a function of its identity alone, so that the
 * loop thread can recompute every result at the end. */
static uint64_t request_hash(unsigned conn, unsigned producer, unsigned seq) {
  unsigned id[3] = {conn, producer, seq};
  uint64_t h = fnv1a(id, sizeof(id), UINT64_C(14695981039346656037));
  return fnv1a(demo.payload, sizeof(demo.payload), h);
}


static request_t* request_at(unsigned conn, unsigned producer, unsigned seq) {
  return &demo.reqs[((size_t) conn * NPRODUCERS + producer) * demo.rounds +
                    seq];
}


static void produce_round(unsigned producer, unsigned round) {
  unsigned c;
  int rc;
  for (c = 0; c < demo.nconn; c++) {
    rc = uvs_schedule(&demo.conns[c].worker,
                      &request_at(c, producer, round)->task);
    if (rc != 0)
      fail("uvs_schedule", rc);
  }
}


static void maybe_finish(void);


/* On the collector (loop thread): one result, posted by a request. */
static void collect(void* arg) {
  request_t* req = arg;
  conn_t* conn = req->conn;
  int rc;

  if (!on_loop_thread())
    demo.collector_off_loop++;
  if (req->seq != conn->next_result[req->producer])
    demo.result_order_violations++;
  conn->next_result[req->producer] = req->seq + 1;
  demo.digest ^= req->hash;
  demo.collected++;

  if (++conn->results == NPRODUCERS * demo.rounds) {
    rc = uvs_task_cancel(&conn->idle_timeout);
    if (rc != 0)
      fail("uvs_task_cancel(idle timeout)", rc);
  }
  maybe_finish();
}


/* On a pool thread: one request of one connection. */
static void request_run(uvs_task_t* task) {
  request_t* req = (request_t*) task;
  conn_t* conn = req->conn;
  int rc;

  if (atomic_exchange(&conn->busy, 1))
    atomic_fetch_add(&demo.overlaps, 1);
  if (on_loop_thread())
    atomic_fetch_add(&demo.runs_on_loop, 1);
  if (req->seq != conn->next_seq[req->producer])
    atomic_fetch_add(&demo.run_order_violations, 1);
  conn->next_seq[req->producer] = req->seq + 1;
  req->hash = request_hash(conn->id, req->producer, req->seq);
  req->runs++;
  atomic_store(&conn->busy, 0);

  rc = uvs_post(&demo.collector, collect, req);
  if (rc != 0)
    fail("uvs_post", rc);
}


static void request_done(uvs_task_t* task, int status) {
  request_t* req = (request_t*) task;
  if (status != 0)
    fail("request handed back", status);
  if (req->runs != 1)
    demo.run_twice++;
  demo.completed++;
  maybe_finish();
}


static void idle_timeout_run(uvs_task_t* task) {
  (void) task;
  atomic_fetch_add(&demo.timeouts_fired, 1);
}


static void idle_timeout_done(uvs_task_t* task, int status) {
  (void) task;
  if (status == UV_ECANCELED)
    demo.timeouts_cancelled++;
  demo.timeouts_back++;
  maybe_finish();
}


/* On the feeder (loop thread): the loop thread's producer sends one round,
 * then schedules itself again from its own run_cb, which keeps it in custody
 * until the last round. */
static void feed_run(uvs_task_t* task) {
  int rc;
  produce_round(0, demo.feed_round++);
  if (demo.feed_round < demo.rounds) {
    rc = uvs_schedule(&demo.feeder, task);
    if (rc != 0)
      fail("uvs_schedule(feed)", rc);
  }
}


static void feed_done(uvs_task_t* task, int status) {
  (void) task;
  if (status != 0)
    fail("feed handed back", status);
}


static void foreign_producer(void* arg) {
  unsigned producer = (unsigned) (uintptr_t) arg;
  unsigned r;
  for (r = 0; r < demo.rounds; r++) produce_round(producer, r);
}


/* On the collector (loop thread), every PROGRESS_MS: prints a line each
 * time another quarter of the results is in, so slow builds stay quiet. */
static void ticker_run(uvs_task_t* task) {
  unsigned quarter;
  (void) task;
  demo.ticks++;
  quarter = (unsigned) ((uint64_t) demo.collected * 4 / demo.total);
  if (quarter <= demo.quarter_shown)
    return;
  demo.quarter_shown = quarter;
  printf("  progress: %u of %u results in after %.0f ms\n", demo.collected,
         demo.total, (double) (uv_hrtime() - demo.t_start) / 1e6);
  fflush(stdout);
}


static void ticker_done(uvs_task_t* task, int status) {
  (void) task;
  if (status == UV_ECANCELED)
    demo.ticker_back = 1;
}


static void watchdog_fired(uv_timer_t* timer) {
  (void) timer;
  fprintf(stderr,
          "uvsched-demo: gave up after %d s: %u of %u requests handed back, "
          "%u results in\n",
          WATCHDOG_MS / 1000, demo.completed, demo.total, demo.collected);
  exit(2);
}


static void sched_closed(uvs_sched_t* sched) {
  (void) sched;
  demo.sched_closed = 1;
  uv_close((uv_handle_t*) &demo.watchdog, NULL);
}


static void conn_closed(uvs_worker_t* worker) {
  int rc;
  (void) worker;
  if (++demo.workers_closed == demo.nconn) {
    rc = uvs_sched_close(&demo.sched, UVS_DRAIN, sched_closed);
    if (rc != 0)
      fail("uvs_sched_close", rc);
  }
}


/* Everything is in once each request was handed back, each result collected
 * and each idle timeout handed back; then close, connections first. */
static void maybe_finish(void) {
  unsigned c;
  int rc;

  if (demo.finishing || demo.completed < demo.total ||
      demo.collected < demo.total || demo.timeouts_back < demo.nconn)
    return;
  demo.finishing = 1;
  demo.t_end = uv_hrtime();
  uvs_sched_stats(&demo.sched, &demo.stats);

  rc = uvs_task_cancel(&demo.ticker);
  if (rc != 0)
    fail("uvs_task_cancel(ticker)", rc);
  for (c = 0; c < demo.nconn; c++) {
    rc = uvs_worker_close(&demo.conns[c].worker, UVS_DRAIN, conn_closed);
    if (rc != 0)
      fail("uvs_worker_close", rc);
  }
}


static unsigned parse_arg(const char* s, unsigned dflt) {
  char* end;
  unsigned long v;
  if (s == NULL)
    return dflt;
  v = strtoul(s, &end, 10);
  if (*end != '\0' || v == 0 || v > 100000) {
    fprintf(stderr, "usage: uvsched-demo [connections [rounds]], 1..100000\n");
    exit(64);
  }
  return (unsigned) v;
}


#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
report(const char* what, int ok, const char* fmt, ...) {
  va_list ap;
  printf("  %-4s %-21s", ok ? "ok" : "FAIL", what);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  return ok;
}


int main(int argc, char** argv) {
  uvs_sched_options_t opts;
  uv_thread_t threads[NPRODUCERS - 1];
  uint64_t expected_digest;
  uint64_t seed;
  double secs;
  unsigned c, p, r, i;
  int ok, rc;

  demo.nconn = parse_arg(argc > 1 ? argv[1] : NULL, 200);
  demo.rounds = parse_arg(argc > 2 ? argv[2] : NULL, 100);
  demo.total = demo.nconn * NPRODUCERS * demo.rounds;
  demo.conns = calloc(demo.nconn, sizeof(*demo.conns));
  demo.reqs = calloc(demo.total, sizeof(*demo.reqs));
  if (demo.conns == NULL || demo.reqs == NULL)
    fail("calloc", UV_ENOMEM);
  seed = UINT64_C(0x9e3779b97f4a7c15);
  for (i = 0; i < PAYLOAD_BYTES; i++) {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    demo.payload[i] = (unsigned char) seed;
  }

  printf("uvsched-demo: uvsched %s, libuv %s\n", uvs_version_string(),
         uv_version_string());
  printf("  %u connections x %d producers x %u rounds = %u requests\n",
         demo.nconn, NPRODUCERS, demo.rounds, demo.total);

  demo.loop = uv_default_loop();
  demo.loop_thread = uv_thread_self();
  memset(&opts, 0, sizeof(opts));
  opts.keep_alive = 1;
  if ((rc = uvs_sched_init(demo.loop, &demo.sched, &opts)) != 0)
    fail("uvs_sched_init", rc);
  if ((rc = uvs_worker_init(&demo.sched, &demo.collector, UVS_LOOP)) != 0 ||
      (rc = uvs_worker_init(&demo.sched, &demo.feeder, UVS_LOOP)) != 0)
    fail("uvs_worker_init", rc);

  for (c = 0; c < demo.nconn; c++) {
    conn_t* conn = &demo.conns[c];
    conn->id = c;
    atomic_init(&conn->busy, 0);
    if ((rc = uvs_worker_init(&demo.sched, &conn->worker, UVS_POOL)) != 0)
      fail("uvs_worker_init", rc);
    for (p = 0; p < NPRODUCERS; p++) {
      for (r = 0; r < demo.rounds; r++) {
        request_t* req = request_at(c, p, r);
        req->conn = conn;
        req->producer = p;
        req->seq = r;
        if ((rc = uvs_task_init(&req->task, request_run, request_done)) != 0)
          fail("uvs_task_init", rc);
      }
    }
    if ((rc = uvs_task_init(&conn->idle_timeout, idle_timeout_run,
                            idle_timeout_done)) != 0)
      fail("uvs_task_init", rc);
    rc =
        uvs_schedule_after(&conn->worker, &conn->idle_timeout, IDLE_TIMEOUT_MS);
    if (rc != 0)
      fail("uvs_schedule_after", rc);
  }

  if ((rc = uvs_task_init(&demo.ticker, ticker_run, ticker_done)) != 0 ||
      (rc = uvs_schedule_every(&demo.collector, &demo.ticker, PROGRESS_MS,
                               PROGRESS_MS)) != 0)
    fail("uvs_schedule_every", rc);

  /* A plain libuv timer, so that it still fires if the scheduler hangs. */
  uv_timer_init(demo.loop, &demo.watchdog);
  uv_timer_start(&demo.watchdog, watchdog_fired, WATCHDOG_MS, 0);
  uv_unref((uv_handle_t*) &demo.watchdog);

  demo.t_start = uv_hrtime();
  for (p = 1; p < NPRODUCERS; p++) {
    rc = uv_thread_create(&threads[p - 1], foreign_producer,
                          (void*) (uintptr_t) p);
    if (rc != 0)
      fail("uv_thread_create", rc);
  }
  if ((rc = uvs_task_init(&demo.feed, feed_run, feed_done)) != 0 ||
      (rc = uvs_schedule(&demo.feeder, &demo.feed)) != 0)
    fail("uvs_schedule(feed)", rc);

  rc = uv_run(demo.loop, UV_RUN_DEFAULT);
  for (p = 1; p < NPRODUCERS; p++) uv_thread_join(&threads[p - 1]);
  if (rc != 0)
    fprintf(stderr, "uvsched-demo: uv_run returned %d\n", rc);

  expected_digest = 0;
  for (c = 0; c < demo.nconn; c++)
    for (p = 0; p < NPRODUCERS; p++)
      for (r = 0; r < demo.rounds; r++)
        expected_digest ^= request_hash(c, p, r);

  secs = (double) (demo.t_end - demo.t_start) / 1e9;
  ok = 1;
  ok &= report("requests handed back", demo.completed == demo.total, "%u of %u",
               demo.completed, demo.total);
  ok &= report("results collected", demo.collected == demo.total,
               "%u of %u, on the loop thread", demo.collected, demo.total);
  ok &= report(
      "order violations",
      demo.run_order_violations == 0 && demo.result_order_violations == 0,
      "%u in runs, %u in results", atomic_load(&demo.run_order_violations),
      demo.result_order_violations);
  ok &= report("overlaps", atomic_load(&demo.overlaps) == 0, "%u",
               atomic_load(&demo.overlaps));
  ok &= report(
      "ran exactly once", demo.run_twice == 0 && demo.digest == expected_digest,
      "%u not run exactly once; XOR of results %s serial recomputation",
      demo.run_twice,
      demo.digest == expected_digest ? "matches" : "DIFFERS FROM");
  ok &= report("wrong thread",
               demo.runs_on_loop == 0 && demo.collector_off_loop == 0,
               "%u requests on the loop, %u results off it",
               atomic_load(&demo.runs_on_loop), demo.collector_off_loop);
  ok &=
      report("cancelled",
             demo.timeouts_cancelled == demo.nconn && demo.timeouts_fired == 0,
             "%u of %u idle timeouts, %u fired", demo.timeouts_cancelled,
             demo.nconn, atomic_load(&demo.timeouts_fired));
  ok &= report("progress ticks", demo.ticker_back, "%u, then cancelled",
               demo.ticks);
  ok &= report("closed", demo.workers_closed == demo.nconn && demo.sched_closed,
               "%u connection workers, scheduler %s", demo.workers_closed,
               demo.sched_closed ? "closed" : "open");
  rc = uv_loop_close(demo.loop);
  ok &=
      report("uv_loop_close", rc == 0, "%s", rc == 0 ? "ok" : uv_err_name(rc));
  printf("  stats: scheduled %" PRIu64 ", ran %" PRIu64 ", cancelled %" PRIu64
         ", pending %" PRIu64 ", drains %" PRIu64 ", wakeups %" PRIu64 "\n",
         demo.stats.scheduled, demo.stats.ran, demo.stats.cancelled,
         demo.stats.pending, demo.stats.drains, demo.stats.wakeups);
  printf("  wall time: %.1f ms, %.0f req/s\n", secs * 1e3,
         secs > 0 ? demo.total / secs : 0.0);
  printf("uvsched-demo: %s\n", ok ? "all checks passed" : "CHECKS FAILED");

  free(demo.reqs);
  free(demo.conns);
  return ok ? 0 : 1;
}
