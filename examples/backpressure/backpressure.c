/* A line server with backpressure at every step.
 *
 *   backpressure [--keyed] PORT SECONDS [IDLE_MS]
 *
 * Each line a client sends is upper-cased on libuv's pool and sent back,
 * in order. A connection whose queue is full stops reading until it has
 * drained. With --keyed, every connection's lines go to one wide worker,
 * keyed by connection, bounded per key; without it, each connection has a
 * bounded worker of its own. Beside the server, a producer thread feeds a
 * log through uvs_schedule_wait (UVS_FULL_BLOCK), and a sampler keeps only
 * the newest samples (UVS_FULL_DROP_OLDEST). It stops after SECONDS.
 *
 * Limits, for clients that misbehave: at most MAX_CONNS connections (more
 * are closed as they come); a connection that sends nothing for IDLE_MS
 * (default 10 s) while the server waits for it is closed; one that does
 * not read its answers is closed once WRITE_MAX bytes of them wait in its
 * socket's queue; a line longer than LINE_MAX_LEN is cut there. */

#include <ctype.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uvsched.h>

#define QUEUE_MAX 8 /* lines queued per connection (or per key) */
#define LINE_MAX_LEN 256
#define MAX_CONNS 256
#define WRITE_MAX (64 * 1024)

typedef struct conn_s conn_t;

typedef struct {
  uvs_task_t task;
  conn_t* conn;
  uv_write_t write;
  size_t len;
  char line[LINE_MAX_LEN];
} req_t;

struct conn_s {
  uv_tcp_t tcp;
  uv_timer_t idle;     /* closes it after idle_ms without a byte */
  int handles;         /* of tcp and idle, not closed yet */
  uvs_worker_t worker; /* without --keyed: this connection's own */
  uint64_t key;        /* with --keyed: this connection's key */
  conn_t* next;        /* every open connection */
  req_t* kept;         /* a line its full queue refused */
  char* rest;          /* bytes read after the kept line, not parsed yet */
  size_t rest_len;
  req_t* line;    /* the line being read */
  unsigned tasks; /* its lines in the library's custody */
  int closing;
};

static int keyed;
static uv_loop_t* loop;
static uvs_sched_t sched;
static uvs_worker_t wide; /* with --keyed */
static uv_tcp_t server;
static conn_t* conns;
static uint64_t next_key = 1; /* 0 means "no key" */
static unsigned nconns;
static uint64_t idle_ms = 10000;

static void conn_close(conn_t* c);
static int conn_feed(conn_t* c, const char* p, size_t n);
static void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t* buf);

/* ---- the work, on a pool thread ---- */

static void upcase(uvs_task_t* task) {
  req_t* r = (req_t*) task;
  for (size_t i = 0; i < r->len; i++)
    r->line[i] = (char) toupper((unsigned char) r->line[i]);
}

/* ---- answers, on the loop thread, in order ---- */

static void write_done(uv_write_t* w, int status) {
  (void) status;
  free(w->data);
}

static void line_done(uvs_task_t* task, int status) {
  req_t* r = (req_t*) task;
  conn_t* c = r->conn;

  c->tasks--;
  if (status == 0 && !c->closing) {
    uv_buf_t buf = uv_buf_init(r->line, (unsigned) r->len);
    r->write.data = r;
    if (uv_write(&r->write, (uv_stream_t*) &c->tcp, &buf, 1, write_done) == 0)
      r = NULL; /* write_done frees it */
  }
  free(r); /* cancelled (UV_ECANCELED), or not written */
  if (!c->closing && c->tcp.write_queue_size > WRITE_MAX)
    conn_close(c); /* it does not read what it asked for */
  /* --keyed: the connection's handle closes after its last line. */
  if (keyed && c->closing && c->tasks == 0)
    conn_close(c);
}

/* ---- reading, with read-stop / read-start ---- */

static uvs_worker_t* worker_of(conn_t* c) {
  return keyed ? &wide : &c->worker;
}

/* 0: scheduled; UV_EAGAIN: kept, reading stopped; else an error. */
static int conn_schedule(conn_t* c, req_t* r) {
  int rc;

  rc = uvs_task_init(&r->task, upcase, line_done);
  if (rc == 0 && keyed)
    rc = uvs_task_set_key(&r->task, c->key);
  if (rc == 0)
    rc = uvs_schedule(worker_of(c), &r->task);
  if (rc == 0) {
    c->tasks++;
  } else if (rc == UV_EAGAIN) {
    c->kept = r; /* full: keep it, and read no more for now */
    uv_read_stop((uv_stream_t*) &c->tcp);
    uv_timer_stop(&c->idle); /* we keep it waiting, not the other way */
  }
  return rc;
}

/* Splits p into lines and schedules each; on a full queue keeps the line
 * and copies what is left aside. */
static int conn_feed(conn_t* c, const char* p, size_t n) {
  int rc;

  for (size_t i = 0; i < n; i++) {
    if (c->line == NULL && (c->line = calloc(1, sizeof(*c->line))) == NULL)
      return UV_ENOMEM;
    c->line->conn = c;
    if (c->line->len < LINE_MAX_LEN)
      c->line->line[c->line->len++] = p[i];
    if (p[i] != '\n')
      continue;
    rc = conn_schedule(c, c->line);
    c->line = NULL;
    if (rc == UV_EAGAIN) {
      c->rest_len = n - i - 1;
      c->rest = malloc(c->rest_len + 1);
      if (c->rest == NULL)
        return UV_ENOMEM;
      memcpy(c->rest, p + i + 1, c->rest_len);
      return 0;
    }
    if (rc != 0)
      return rc;
  }
  return 0;
}

static void on_alloc(uv_handle_t* h, size_t size, uv_buf_t* buf) {
  static char slab[65536]; /* shared: conn_feed copies what it keeps */
  (void) h;
  (void) size;
  *buf = uv_buf_init(slab, sizeof(slab));
}

static void on_idle(uv_timer_t* t) {
  conn_close(t->data);
}

static void read_again(conn_t* c) {
  uv_read_start((uv_stream_t*) &c->tcp, on_alloc, on_read);
  uv_timer_start(&c->idle, on_idle, idle_ms, 0);
}

static void on_read(uv_stream_t* s, ssize_t n, const uv_buf_t* buf) {
  conn_t* c = s->data;

  if (n < 0 || (n > 0 && conn_feed(c, buf->base, (size_t) n) != 0)) {
    conn_close(c);
    return;
  }
  if (n > 0 && c->kept == NULL)
    uv_timer_start(&c->idle, on_idle, idle_ms, 0);
}

/* The queue has room again: schedule the kept line, parse what was copied
 * aside, and read again unless the queue fills once more on the way. */
static void conn_resume(conn_t* c) {
  req_t* r = c->kept;
  char* rest = c->rest;
  int rc;

  c->kept = NULL;
  c->rest = NULL;
  rc = conn_schedule(c, r);
  if (rc == UV_EAGAIN) { /* full again: keep waiting, rest and all */
    c->rest = rest;
    return;
  }
  if (rc == 0)
    rc = conn_feed(c, rest, c->rest_len);
  free(rest);
  if (rc != 0)
    conn_close(c);
  else if (c->kept == NULL)
    read_again(c);
}

/* Without --keyed: the connection's worker has room (low_water). */
static void on_space(uvs_worker_t* w) {
  conn_t* c = w->data;
  if (c->kept != NULL && !c->closing)
    conn_resume(c);
}

/* With --keyed: key `key` has room (key_max_pending / 2). */
static void on_key_space(uvs_worker_t* w, uint64_t key) {
  (void) w;
  for (conn_t* c = conns; c != NULL; c = c->next)
    if (c->key == key && c->kept != NULL && !c->closing)
      conn_resume(c);
}

/* ---- freeing a connection: its worker's close, then its handles' ---- */

static void handle_closed(uv_handle_t* h) {
  conn_t* c = h->data;
  conn_t** p;

  if (--c->handles != 0)
    return;
  for (p = &conns; *p != c; p = &(*p)->next)
    ;
  *p = c->next;
  nconns--;
  free(c->kept);
  free(c->rest);
  free(c->line);
  free(c); /* the last callback: nothing of the library or libuv holds it */
}

static void close_handles(conn_t* c) {
  uv_close((uv_handle_t*) &c->idle, handle_closed);
  uv_close((uv_handle_t*) &c->tcp, handle_closed);
}

static void worker_closed(uvs_worker_t* w) {
  conn_t* c = w->data;
  /* Every line is handed back: no done_cb will touch c any more. */
  close_handles(c);
}

static void conn_close(conn_t* c) {
  if (uv_is_closing((uv_handle_t*) &c->tcp))
    return;
  if (!c->closing) {
    c->closing = 1;
    uv_read_stop((uv_stream_t*) &c->tcp);
    uv_timer_stop(&c->idle);
    if (!keyed) {
      /* Queued lines come back with UV_ECANCELED; then worker_closed. */
      if (uvs_worker_close(&c->worker, UVS_CANCEL, worker_closed) != 0)
        close_handles(c); /* the scheduler's close has it */
      return;
    }
  }
  /* --keyed: the worker is shared; close once the last line is back. */
  if (keyed && c->tasks == 0)
    close_handles(c);
}

static void on_connection(uv_stream_t* s, int status) {
  uvs_worker_options_t wo = {
      .max_pending = QUEUE_MAX,
      .on_full = UVS_FULL_REJECT,
      .low_water = QUEUE_MAX / 2,
      .space_cb = on_space,
  };
  conn_t* c;

  if (status != 0 || (c = calloc(1, sizeof(*c))) == NULL)
    return;
  uv_tcp_init(loop, &c->tcp);
  uv_timer_init(loop, &c->idle);
  c->tcp.data = c;
  c->idle.data = c;
  c->handles = 2;
  c->key = next_key++;
  c->next = conns;
  conns = c;
  nconns++;
  /* Past MAX_CONNS a newcomer is accepted and closed at once. */
  if (uv_accept(s, (uv_stream_t*) &c->tcp) != 0 || nconns > MAX_CONNS ||
      (!keyed && uvs_worker_init_ex(&sched, &c->worker, UVS_POOL, &wo) != 0)) {
    c->closing = 1;
    close_handles(c);
    return;
  }
  c->worker.data = c;
  read_again(c);
}

/* ---- a producer thread that blocks while the log is full ---- */

typedef struct {
  uvs_task_t task;
  int n;
} record_t;

static uvs_worker_t log_worker; /* UVS_LOOP, UVS_FULL_BLOCK */
static uv_thread_t producer;
static int logged;

static void log_run(uvs_task_t* t) { /* the loop thread */
  logged = ((record_t*) t)->n;
}

static void log_done(uvs_task_t* t, int status) {
  (void) status;
  free(t);
}

static void produce(void* arg) {
  (void) arg;
  for (int n = 1;; n++) {
    record_t* r = malloc(sizeof(*r));
    int rc = r == NULL ? UV_ENOMEM : uvs_task_init(&r->task, log_run, log_done);
    if (rc == 0) {
      r->n = n;
      /* Waits while the log holds 16 records; at most 1 s at a time. */
      rc = uvs_schedule_wait(&log_worker, &r->task, 1000);
    }
    if (rc == UV_ETIMEDOUT) {
      free(r);
      continue;
    }
    if (rc != 0) { /* UV_ESHUTDOWN: the scheduler is closing */
      free(r);
      return;
    }
    if (n % 64 == 0)
      uv_sleep(100); /* bursts of 64: the log holds 16, the rest wait */
  }
}

/* ---- a sampler that keeps only the newest samples ---- */

typedef struct {
  uvs_task_t task;
  uint64_t taken;
} sample_t;

static uvs_worker_t sampler; /* UVS_POOL, UVS_FULL_DROP_OLDEST */
static uv_timer_t sample_timer;
static int samples_run, samples_dropped;

static void sample_run(uvs_task_t* t) { /* slower than samples come */
  (void) t;
  uv_sleep(20);
}

static void sample_done(uvs_task_t* t, int status) {
  if (status == 0)
    samples_run++;
  else if (status == UV_ENOBUFS) /* a newer sample took its place */
    samples_dropped++;
  free(t);
}

static void take_sample(uv_timer_t* timer) {
  sample_t* s = malloc(sizeof(*s));
  (void) timer;
  if (s == NULL || uvs_task_init(&s->task, sample_run, sample_done) != 0) {
    free(s);
    return;
  }
  s->taken = uv_now(loop);
  if (uvs_schedule(&sampler, &s->task) != 0) /* never UV_EAGAIN here */
    free(s);
}

/* ---- start and stop ---- */

static uv_timer_t stop_timer;

static void sched_closed(uvs_sched_t* s) {
  (void) s;
  uv_thread_join(&producer); /* its last call answered UV_ESHUTDOWN */
  printf("log: %d records; samples: %d run, %d dropped\n", logged, samples_run,
         samples_dropped);
}

static void stop(uv_timer_t* t) {
  (void) t;
  uv_close((uv_handle_t*) &server, NULL);
  uv_close((uv_handle_t*) &sample_timer, NULL);
  uv_close((uv_handle_t*) &stop_timer, NULL);
  for (conn_t* c = conns; c != NULL; c = c->next) conn_close(c);
  uvs_sched_close(&sched, UVS_DRAIN, sched_closed);
}

int main(int argc, char** argv) {
  uvs_worker_options_t wide_o = {
      .width = 4,
      .key_max_pending = QUEUE_MAX,
      .key_space_cb = on_key_space,
  };
  uvs_worker_options_t log_o = {.max_pending = 16, .on_full = UVS_FULL_BLOCK};
  uvs_worker_options_t sampler_o = {
      .max_pending = 4,
      .on_full = UVS_FULL_DROP_OLDEST,
  };
  struct sockaddr_in addr;
  int rc;

  keyed = argc > 1 && strcmp(argv[1], "--keyed") == 0;
  if (argc != 3 + keyed && argc != 4 + keyed) {
    fprintf(stderr, "usage: %s [--keyed] PORT SECONDS [IDLE_MS]\n", argv[0]);
    return 2;
  }
  if (argc == 4 + keyed)
    idle_ms = strtoull(argv[3 + keyed], NULL, 10);
  signal(SIGPIPE, SIG_IGN); /* a client gone: a write error, not a signal */
  loop = uv_default_loop();
  rc = uvs_sched_init(loop, &sched, NULL);
  if (rc == 0 && keyed)
    rc = uvs_worker_init_ex(&sched, &wide, UVS_POOL, &wide_o);
  if (rc == 0)
    rc = uvs_worker_init_ex(&sched, &log_worker, UVS_LOOP, &log_o);
  if (rc == 0)
    rc = uvs_worker_init_ex(&sched, &sampler, UVS_POOL, &sampler_o);
  if (rc == 0)
    rc = uv_ip4_addr("127.0.0.1", atoi(argv[1 + keyed]), &addr);
  if (rc == 0)
    rc = uv_tcp_init(loop, &server);
  if (rc == 0)
    rc = uv_tcp_bind(&server, (const struct sockaddr*) &addr, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t*) &server, 128, on_connection);
  if (rc == 0) { /* PORT 0: the system picks one; say which */
    int len = sizeof(addr);
    rc = uv_tcp_getsockname(&server, (struct sockaddr*) &addr, &len);
    printf("listening on port %d\n", ntohs(addr.sin_port));
    fflush(stdout);
  }
  if (rc == 0)
    rc = uv_thread_create(&producer, produce, NULL);
  if (rc != 0) {
    fprintf(stderr, "start: %s\n", uv_strerror(rc));
    return 1;
  }
  uv_timer_init(loop, &sample_timer);
  uv_timer_start(&sample_timer, take_sample, 5, 5);
  uv_timer_init(loop, &stop_timer);
  uv_timer_start(&stop_timer, stop, 1000 * (uint64_t) atoi(argv[2 + keyed]), 0);
  uv_run(loop, UV_RUN_DEFAULT);
  return uv_loop_close(loop) == 0 ? 0 : 1;
}
