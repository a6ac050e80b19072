/* http-pipeline: an HTTP/1.1 server on libuv where each connection owns a
 * uvsched worker.
 *
 *   http-pipeline [--host ADDR] [--port N] [--mode pool|loop|inline]
 *                 [--threads T]
 *
 * GET /work?n=ROUNDS&id=TOKEN  hashes: d = SHA-256(TOKEN), then ROUNDS times
 *                              d = SHA-256(d); answers 200 with the body
 *                              "id=TOKEN n=ROUNDS sha256=HEX\n".
 * GET /health                  answers 200 "ok\n" without any work.
 * GET /stats                   answers 200 with the server's counters (JSON).
 * Anything else: 404 for an unknown path, 405 for a method other than GET,
 * 400 for a request that does not parse or a bad query, 413 for a request
 * line, header block or body over its limit. After a 400 or a 413 the server
 * closes the connection.
 *
 * Each connection owns one worker: UVS_POOL in --mode pool, so that /work runs
 * on libuv's thread pool; UVS_LOOP in --mode loop, the baseline, where the
 * same work runs on the loop thread. --mode inline does the work right in the
 * parser callback, without uvsched, to show what the loop worker costs.
 *
 * Pipelining: a client may send many requests without waiting. They are
 * parsed on the loop thread in order, each /work request becomes a task on
 * the connection's worker (which runs them one at a time, in order), and
 * every request gets a slot in the connection's list of owed responses. A
 * response is written, from done_cb on the loop thread, only when every
 * response before it has been written, so answers always leave in request
 * order, while different connections run in parallel on the pool.
 *
 * Closing: when the client goes away (EOF or an error) the connection closes
 * its worker with UVS_CANCEL, so its queued work is handed back with
 * UV_ECANCELED and never runs, and a task already running finishes without
 * its answer being written. The connection's memory is freed only after the
 * worker's close callback and the TCP handle's close callback have both run.
 *
 * The server checks uvsched as it goes (per connection: tasks run in schedule
 * order, never two at once, on the right thread) and, on SIGINT or SIGTERM,
 * closes everything, prints its counters to stderr and exits 0 only if every
 * check held, nothing leaked and uv_loop_close() succeeded.
 */

#include <uvsched.h>

#include <http_parser.h>

#include "sha256.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READ_BUF_SIZE 65536
#define MAX_URL 2048        /* request target */
#define MAX_HEAD 8192       /* request target plus header fields and values */
#define MAX_BODY 8192       /* a GET may carry a body; it is read and ignored */
#define MAX_ID 64           /* the id= token */
#define MAX_ROUNDS 10000000 /* n= */
#define MAX_OWED 1024  /* responses owed before a connection stops reading */
#define MAX_BATCH 64   /* responses per uv_write */
#define LINGER_MS 2000 /* how long a closing connection waits for EOF */
#define RESPONSE_MAX 1024

typedef enum { MODE_POOL, MODE_LOOP, MODE_INLINE } run_mode_t;

typedef enum { HDR_NONE, HDR_CLOSE, HDR_KEEP_ALIVE } conn_header_t;

typedef struct server_s server_t;
typedef struct conn_s conn_t;
typedef struct request_s request_t;

struct request_s {
  uvs_task_t task; /* First member: a uvs_task_t* is also a request_t*. */
  conn_t* conn;
  request_t* next; /* The connection's owed responses, in request order. */
  uint64_t seq;    /* The connection's /work requests: 0, 1, 2, ... */
  uint64_t rounds;
  int ready; /* out[] holds the response. */
  conn_header_t conn_header;
  size_t id_len;
  char id[MAX_ID + 1];
  unsigned char digest[SHA256_DIGEST_SIZE];
  size_t len;
  char out[RESPONSE_MAX];
};

typedef struct write_batch_s {
  uv_write_t req;
  conn_t* conn;
  request_t* first; /* Linked by next. */
  unsigned count;
  uv_buf_t bufs[MAX_BATCH];
} write_batch_t;

struct conn_s {
  uv_tcp_t tcp;
  uvs_worker_t worker; /* Not used in --mode inline. */
  uvs_task_t linger;   /* On the server's loop worker, while lingering. */
  uv_shutdown_t shutdown;
  http_parser parser;
  server_t* server;
  conn_t* prev;
  conn_t* next;
  conn_t* flush_next; /* The server's connections with answers to write. */

  /* Loop thread only. */
  request_t* head; /* Owed responses, oldest first. */
  request_t* tail;
  unsigned owed; /* Requests parsed whose response is not yet written. */
  unsigned refs; /* The TCP handle, the worker, the linger task. */
  unsigned live; /* request_t alive, for the leak check. */
  int reading;
  int flush_queued;
  int closing;
  int done_parsing; /* After an error or a last request: parse no more. */
  int lingering;
  int linger_armed;
  int error_status; /* Set by a parser callback that stops the parse. */
  size_t head_bytes;
  size_t body_bytes;
  size_t url_len;
  char url[MAX_URL];
  uint64_t next_seq;
  uint64_t next_done;

  /* The worker's tasks only, one at a time: no lock (SPEC guarantee 2). */
  uint64_t next_run;
  /* A flag, not a lock: finding it set on entry means two runs overlap. */
  atomic_int busy;
};

struct server_s {
  uv_loop_t* loop;
  uv_thread_t loop_thread;
  run_mode_t mode;
  uv_tcp_t listener;
  uv_signal_t sigint;
  uv_signal_t sigterm;
  uvs_sched_t sched;
  uvs_worker_t timers; /* UVS_LOOP: lingering-close timeouts. */
  uv_idle_t flusher;   /* Writes what the done_cbs of a loop turn made. */
  conn_t* flush_list;
  conn_t* conns;
  int stopping;
  char read_buf[READ_BUF_SIZE];

  /* Loop thread only. */
  uint64_t accepted;
  uint64_t open;
  uint64_t requests;
  uint64_t responses;
  uint64_t work_done;
  uint64_t cancelled;
  uint64_t dropped; /* Ran, but the connection was gone: not written. */
  uint64_t errors;  /* 4xx answers. */
  uint64_t done_reordered;
  uint64_t leaks;

  /* Written on pool threads. */
  atomic_uint_fast64_t order_violations;
  atomic_uint_fast64_t overlaps;
  atomic_uint_fast64_t wrong_thread;
};

static server_t server;


static void fail(const char* what, int rc) {
  fprintf(stderr, "http-pipeline: %s: %s\n", what, uv_strerror(rc));
  exit(1);
}


static const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Content Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}


/* Formats a whole response into req->out. */
static void respond(request_t* req, int status, const char* body) {
  static const char* const conn_headers[] = {"", "Connection: close\r\n",
                                             "Connection: keep-alive\r\n"};
  size_t body_len = strlen(body);
  int n;

  n = snprintf(req->out, sizeof(req->out),
               "HTTP/1.1 %d %s\r\n"
               "Content-Type: %s\r\n"
               "Content-Length: %zu\r\n"
               "%s%s"
               "\r\n"
               "%s",
               status, reason(status),
               body[0] == '{' ? "application/json" : "text/plain", body_len,
               status == 405 ? "Allow: GET\r\n" : "",
               conn_headers[req->conn_header], body);
  if (n < 0 || (size_t) n >= sizeof(req->out))
    abort(); /* Every body here is small: a bug, not a request's fault. */
  req->len = (size_t) n;
  req->ready = 1;
  if (status >= 400)
    req->conn->server->errors++;
}


static request_t* request_new(conn_t* conn, conn_header_t conn_header) {
  request_t* req = calloc(1, sizeof(*req));
  if (req == NULL)
    fail("calloc", UV_ENOMEM);
  req->conn = conn;
  req->conn_header = conn_header;
  conn->live++;
  conn->owed++;
  if (conn->tail != NULL)
    conn->tail->next = req;
  else
    conn->head = req;
  conn->tail = req;
  conn->server->requests++;
  return req;
}


static void request_free(request_t* req) {
  req->conn->live--;
  free(req);
}


static void conn_close(conn_t* conn);
static void conn_maybe_finish(conn_t* conn);
static void conn_read_start(conn_t* conn);
static void conn_flush_soon(conn_t* conn);


static void conn_unref(conn_t* conn) {
  server_t* s = conn->server;
  if (--conn->refs > 0)
    return;
  if (conn->live != 0)
    s->leaks += conn->live;
  free(conn);
}


static void on_tcp_closed(uv_handle_t* handle) {
  conn_unref((conn_t*) handle->data);
}


static void on_worker_closed(uvs_worker_t* worker) {
  conn_unref((conn_t*) worker->data);
}


static void on_write(uv_write_t* wreq, int status) {
  write_batch_t* batch = (write_batch_t*) wreq;
  conn_t* conn = batch->conn;
  request_t* req;
  request_t* next;

  for (req = batch->first; req != NULL; req = next) {
    next = req->next;
    request_free(req);
  }
  conn->owed -= batch->count;
  if (status == 0)
    conn->server->responses += batch->count;
  free(batch);
  if (conn->closing)
    return;
  if (status < 0) {
    conn_close(conn);
    return;
  }
  if (!conn->reading && !conn->done_parsing && conn->owed < MAX_OWED / 2)
    conn_read_start(conn); /* Backpressure off. */
  conn_maybe_finish(conn);
}


/* Writes the ready responses at the head of the list, in order, up to the
 * first one that is still being computed. */
static void conn_flush(conn_t* conn) {
  write_batch_t* batch;
  request_t* req;
  int rc;

  while (conn->head != NULL && conn->head->ready) {
    batch = calloc(1, sizeof(*batch));
    if (batch == NULL)
      fail("calloc", UV_ENOMEM);
    batch->conn = conn;
    batch->first = conn->head;
    req = NULL;
    while (conn->head != NULL && conn->head->ready &&
           batch->count < MAX_BATCH) {
      req = conn->head;
      batch->bufs[batch->count++] = uv_buf_init(req->out, (unsigned) req->len);
      conn->head = req->next;
    }
    req->next = NULL;
    if (conn->head == NULL)
      conn->tail = NULL;
    rc = uv_write(&batch->req, (uv_stream_t*) &conn->tcp, batch->bufs,
                  batch->count, on_write);
    if (rc != 0) {
      /* The handle is unusable: free the batch here, and close. */
      on_write(&batch->req, rc);
      return;
    }
  }
}


/* The done_cbs of one loop turn often complete several answers of a
 * connection: write them together, at the start of the next turn, with one
 * uv_write instead of one each. The reference keeps the connection's memory
 * until then, even if it closes in between. */
static void on_flush(uv_idle_t* idle) {
  server_t* s = idle->data;
  conn_t* conn;

  while (s->flush_list != NULL) {
    conn = s->flush_list;
    s->flush_list = conn->flush_next;
    conn->flush_queued = 0;
    if (!conn->closing)
      conn_flush(conn);
    conn_unref(conn);
  }
  uv_idle_stop(idle);
}


static void conn_flush_soon(conn_t* conn) {
  server_t* s = conn->server;
  if (conn->flush_queued)
    return;
  conn->flush_queued = 1;
  conn->refs++;
  conn->flush_next = s->flush_list;
  s->flush_list = conn;
  uv_idle_start(&s->flusher, on_flush);
}


/* On a pool thread (--mode pool) or the loop thread (--mode loop). */
static void work_run(uvs_task_t* task) {
  request_t* req = (request_t*) task;
  conn_t* conn = req->conn;
  server_t* s = conn->server;
  uv_thread_t self = uv_thread_self();
  int on_loop = uv_thread_equal(&self, &s->loop_thread);

  if (atomic_exchange(&conn->busy, 1))
    atomic_fetch_add(&s->overlaps, 1);
  if (req->seq != conn->next_run)
    atomic_fetch_add(&s->order_violations, 1);
  conn->next_run = req->seq + 1;
  if (on_loop != (conn->worker.where == UVS_LOOP))
    atomic_fetch_add(&s->wrong_thread, 1);

  sha256_iterate(req->id, req->id_len, req->rounds, req->digest);

  atomic_store(&conn->busy, 0);
}


static void work_respond(request_t* req) {
  static const char hex[] = "0123456789abcdef";
  char body[MAX_ID + 128];
  char digest[2 * SHA256_DIGEST_SIZE + 1];
  int i;

  for (i = 0; i < SHA256_DIGEST_SIZE; i++) {
    digest[2 * i] = hex[req->digest[i] >> 4];
    digest[2 * i + 1] = hex[req->digest[i] & 15];
  }
  digest[2 * SHA256_DIGEST_SIZE] = '\0';
  snprintf(body, sizeof(body), "id=%s n=%" PRIu64 " sha256=%s\n", req->id,
           req->rounds, digest);
  respond(req, 200, body);
}


/* On the loop thread, once the task is handed back. */
static void work_done(uvs_task_t* task, int status) {
  request_t* req = (request_t*) task;
  conn_t* conn = req->conn;
  server_t* s = conn->server;

  if (status == 0)
    s->work_done++;
  else
    s->cancelled++;
  /* Not a guarantee of uvsched's: the response list orders answers anyway. */
  if (req->seq != conn->next_done)
    s->done_reordered++;
  conn->next_done = req->seq + 1;

  if (conn->closing) {
    /* The connection is gone: never write. */
    if (status == 0)
      s->dropped++;
    request_free(req);
    return;
  }
  if (status != 0)
    respond(req, 503, "cancelled\n");
  else
    work_respond(req);
  conn_flush_soon(conn);
}


/* Parses "n=ROUNDS&id=TOKEN" (any order, other keys ignored). */
static int parse_query(const char* q, size_t len, request_t* req) {
  const char* end = q + len;
  const char* amp;
  const char* eq;
  const char* v;
  size_t klen, vlen, i;
  int have_n = 0, have_id = 0;
  uint64_t n;

  while (q < end) {
    amp = memchr(q, '&', (size_t) (end - q));
    if (amp == NULL)
      amp = end;
    eq = memchr(q, '=', (size_t) (amp - q));
    if (eq != NULL) {
      klen = (size_t) (eq - q);
      v = eq + 1;
      vlen = (size_t) (amp - v);
      if (klen == 1 && q[0] == 'n') {
        if (have_n || vlen == 0 || vlen > 8)
          return -1;
        n = 0;
        for (i = 0; i < vlen; i++) {
          if (v[i] < '0' || v[i] > '9')
            return -1;
          n = n * 10 + (uint64_t) (v[i] - '0');
        }
        if (n > MAX_ROUNDS)
          return -1;
        req->rounds = n;
        have_n = 1;
      } else if (klen == 2 && q[0] == 'i' && q[1] == 'd') {
        if (have_id || vlen == 0 || vlen > MAX_ID)
          return -1;
        /* RFC 3986 unreserved characters: no decoding needed. */
        for (i = 0; i < vlen; i++)
          if (strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                     "0123456789-._~",
                     v[i]) == NULL ||
              v[i] == '\0')
            return -1;
        memcpy(req->id, v, vlen);
        req->id[vlen] = '\0';
        req->id_len = vlen;
        have_id = 1;
      }
    }
    q = amp + 1;
  }
  return have_n && have_id ? 0 : -1;
}


static void stats_respond(request_t* req) {
  server_t* s = req->conn->server;
  uvs_stats_t st;
  char body[RESPONSE_MAX - 160];

  uvs_sched_stats(&s->sched, &st);
  snprintf(body, sizeof(body),
           "{\"mode\":\"%s\",\"accepted\":%" PRIu64 ",\"open\":%" PRIu64
           ",\"requests\":%" PRIu64 ",\"responses\":%" PRIu64
           ",\"work_done\":%" PRIu64 ",\"cancelled\":%" PRIu64
           ",\"dropped\":%" PRIu64 ",\"order_violations\":%" PRIu64
           ",\"overlaps\":%" PRIu64 ",\"wrong_thread\":%" PRIu64
           ",\"uvs_scheduled\":%" PRIu64 ",\"uvs_ran\":%" PRIu64
           ",\"uvs_cancelled\":%" PRIu64 ",\"uvs_pending\":%" PRIu64 "}\n",
           s->mode == MODE_POOL   ? "pool"
           : s->mode == MODE_LOOP ? "loop"
                                  : "inline",
           s->accepted, s->open, s->requests, s->responses, s->work_done,
           s->cancelled, s->dropped,
           (uint64_t) atomic_load(&s->order_violations),
           (uint64_t) atomic_load(&s->overlaps),
           (uint64_t) atomic_load(&s->wrong_thread), st.scheduled, st.ran,
           st.cancelled, st.pending);
  respond(req, 200, body);
}


/* A whole request has been parsed: give it its slot in the response list
 * and either answer it now or schedule its work. */
static void dispatch(conn_t* conn) {
  http_parser* p = &conn->parser;
  server_t* s = conn->server;
  struct http_parser_url u;
  conn_header_t hdr = HDR_NONE;
  request_t* req;
  const char* path;
  size_t path_len;
  int rc;

  if (!http_should_keep_alive(p)) {
    hdr = HDR_CLOSE;
    conn->done_parsing = 1;
  } else if (p->http_major == 1 && p->http_minor == 0) {
    hdr = HDR_KEEP_ALIVE;
  }
  req = request_new(conn, hdr);

  if (p->method != HTTP_GET) {
    respond(req, 405, "method not allowed\n");
    return;
  }
  http_parser_url_init(&u);
  if (http_parser_parse_url(conn->url, conn->url_len, 0, &u) != 0 ||
      !(u.field_set & (1 << UF_PATH))) {
    respond(req, 400, "bad request target\n");
    return;
  }
  path = conn->url + u.field_data[UF_PATH].off;
  path_len = u.field_data[UF_PATH].len;

  if (path_len == 7 && memcmp(path, "/health", 7) == 0) {
    respond(req, 200, "ok\n");
  } else if (path_len == 6 && memcmp(path, "/stats", 6) == 0) {
    stats_respond(req);
  } else if (path_len == 5 && memcmp(path, "/work", 5) == 0) {
    if (!(u.field_set & (1 << UF_QUERY)) ||
        parse_query(conn->url + u.field_data[UF_QUERY].off,
                    u.field_data[UF_QUERY].len, req) != 0) {
      respond(req, 400, "expected /work?n=ROUNDS&id=TOKEN\n");
      return;
    }
    req->seq = conn->next_seq++;
    if (s->mode == MODE_INLINE) {
      sha256_iterate(req->id, req->id_len, req->rounds, req->digest);
      conn->next_done = req->seq + 1;
      s->work_done++;
      work_respond(req);
      return;
    }
    rc = uvs_task_init(&req->task, work_run, work_done);
    if (rc == 0)
      rc = uvs_schedule(&conn->worker, &req->task);
    if (rc != 0)
      respond(req, 503, "cannot schedule\n");
  } else {
    respond(req, 404, "not found\n");
  }
}


static http_parser_settings settings;


static int on_message_begin(http_parser* p) {
  conn_t* conn = p->data;
  conn->url_len = 0;
  conn->head_bytes = 0;
  conn->body_bytes = 0;
  return 0;
}


static int on_url(http_parser* p, const char* at, size_t len) {
  conn_t* conn = p->data;
  conn->head_bytes += len;
  if (conn->url_len + len > sizeof(conn->url)) {
    conn->error_status = 413;
    return -1;
  }
  memcpy(conn->url + conn->url_len, at, len);
  conn->url_len += len;
  return 0;
}


static int on_header_bytes(http_parser* p, const char* at, size_t len) {
  conn_t* conn = p->data;
  (void) at;
  conn->head_bytes += len;
  if (conn->head_bytes > MAX_HEAD) {
    conn->error_status = 413;
    return -1;
  }
  return 0;
}


static int on_headers_complete(http_parser* p) {
  conn_t* conn = p->data;
  /* content_length is ULLONG_MAX when the request has none. */
  if (p->content_length != UINT64_MAX && p->content_length > MAX_BODY) {
    conn->error_status = 413;
    return -1;
  }
  return 0;
}


static int on_body(http_parser* p, const char* at, size_t len) {
  conn_t* conn = p->data;
  (void) at;
  conn->body_bytes += len;
  if (conn->body_bytes > MAX_BODY) {
    conn->error_status = 413;
    return -1;
  }
  return 0;
}


static int on_message_complete(http_parser* p) {
  conn_t* conn = p->data;
  dispatch(conn);
  /* After a last request, stop: whatever follows is not read. */
  if (conn->done_parsing)
    http_parser_pause(p, 1);
  return 0;
}


static void on_alloc(uv_handle_t* handle, size_t size, uv_buf_t* buf) {
  /* One buffer for every connection: a read is parsed whole, and everything
   * kept is copied, before the next read can happen. */
  (void) handle;
  (void) size;
  *buf = uv_buf_init(server.read_buf, sizeof(server.read_buf));
}


static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  conn_t* conn = stream->data;
  enum http_errno err;
  request_t* req;
  int status;

  if (nread < 0) {
    /* EOF or an error: the client is gone, or done with us. */
    conn_close(conn);
    return;
  }
  if (nread == 0 || conn->done_parsing)
    return; /* Nothing, or bytes after the last request: dropped. */

  http_parser_execute(&conn->parser, &settings, buf->base, (size_t) nread);
  err = HTTP_PARSER_ERRNO(&conn->parser);
  if (err != HPE_OK && err != HPE_PAUSED) {
    status = conn->error_status != 0      ? conn->error_status
             : err == HPE_HEADER_OVERFLOW ? 413
                                          : 400;
    conn->done_parsing = 1;
    req = request_new(conn, HDR_CLOSE);
    respond(req, status,
            status == 413 ? "request too large\n" : "bad request\n");
  } else if (conn->parser.upgrade) {
    conn->done_parsing = 1; /* No protocol upgrades here. */
  }
  conn_flush(conn);
  if (conn->closing)
    return;
  if (conn->owed >= MAX_OWED && !conn->done_parsing) {
    /* Backpressure: parse no more until the answers have gone out. */
    uv_read_stop(stream);
    conn->reading = 0;
  }
  conn_maybe_finish(conn);
}


static void conn_read_start(conn_t* conn) {
  int rc = uv_read_start((uv_stream_t*) &conn->tcp, on_alloc, on_read);
  if (rc != 0) {
    conn_close(conn);
    return;
  }
  conn->reading = 1;
}


static void on_linger_run(uvs_task_t* task) {
  (void) task;
}


static void on_linger_done(uvs_task_t* task, int status) {
  conn_t* conn = task->data;
  conn->linger_armed = 0;
  if (status == 0)
    conn_close(conn); /* No EOF in time. */
  conn_unref(conn);
}


static void on_shutdown(uv_shutdown_t* sreq, int status) {
  conn_t* conn = sreq->data;
  if (conn->closing)
    return;
  if (status < 0) {
    conn_close(conn);
    return;
  }
  /* Our side is done. Read and drop until the client closes too, so that
   * unread bytes in the kernel do not turn our close into a reset that
   * could destroy the last answer before the client read it. */
  if (!conn->reading)
    conn_read_start(conn);
  if (conn->closing)
    return;
  uvs_task_init(&conn->linger, on_linger_run, on_linger_done);
  conn->linger.data = conn;
  if (uvs_schedule_after(&conn->server->timers, &conn->linger, LINGER_MS) ==
      0) {
    conn->linger_armed = 1;
    conn->refs++;
  } else {
    conn_close(conn);
  }
}


/* After the last response has been written, half-close the connection. */
static void conn_maybe_finish(conn_t* conn) {
  if (conn->closing || conn->lingering || !conn->done_parsing ||
      conn->owed != 0)
    return;
  conn->lingering = 1;
  conn->shutdown.data = conn;
  if (uv_shutdown(&conn->shutdown, (uv_stream_t*) &conn->tcp, on_shutdown) != 0)
    conn_close(conn);
}


static void conn_close(conn_t* conn) {
  server_t* s = conn->server;
  request_t* req;
  request_t* next;
  int rc;

  if (conn->closing)
    return;
  conn->closing = 1;
  s->open--;
  if (conn->prev != NULL)
    conn->prev->next = conn->next;
  else
    s->conns = conn->next;
  if (conn->next != NULL)
    conn->next->prev = conn->prev;

  /* Answers that are ready but unsent die here. The others belong to the
   * library until work_done() hands them back, and it frees them. */
  for (req = conn->head; req != NULL; req = next) {
    next = req->next;
    if (req->ready)
      request_free(req);
  }
  conn->head = conn->tail = NULL;

  if (conn->linger_armed)
    uvs_task_cancel(&conn->linger); /* on_linger_done() follows. */
  if (s->mode != MODE_INLINE) {
    rc = uvs_worker_close(&conn->worker, UVS_CANCEL, on_worker_closed);
    if (rc != 0)
      fail("uvs_worker_close", rc);
  }
  uv_close((uv_handle_t*) &conn->tcp, on_tcp_closed);
}


static void on_connection(uv_stream_t* listener, int status) {
  server_t* s = listener->data;
  conn_t* conn;
  int rc;

  if (status < 0) {
    fprintf(stderr, "http-pipeline: accept: %s\n", uv_strerror(status));
    return;
  }
  conn = calloc(1, sizeof(*conn));
  if (conn == NULL)
    fail("calloc", UV_ENOMEM);
  conn->server = s;
  conn->tcp.data = conn;
  conn->worker.data = conn;
  conn->parser.data = conn;
  atomic_init(&conn->busy, 0);
  rc = uv_tcp_init(s->loop, &conn->tcp);
  if (rc != 0)
    fail("uv_tcp_init", rc);
  conn->refs = 1;
  rc = uv_accept(listener, (uv_stream_t*) &conn->tcp);
  if (rc == 0 && s->mode != MODE_INLINE) {
    rc = uvs_worker_init(&s->sched, &conn->worker,
                         s->mode == MODE_POOL ? UVS_POOL : UVS_LOOP);
    if (rc == 0)
      conn->refs++;
  }
  if (rc != 0) {
    uv_close((uv_handle_t*) &conn->tcp, on_tcp_closed);
    return;
  }
  s->accepted++;
  s->open++;
  conn->next = s->conns;
  if (s->conns != NULL)
    s->conns->prev = conn;
  s->conns = conn;
  uv_tcp_nodelay(&conn->tcp, 1);
  http_parser_init(&conn->parser, HTTP_REQUEST);
  conn->parser.data = conn;
  conn_read_start(conn);
}


static void server_stop(server_t* s) {
  int rc;
  if (s->stopping)
    return;
  s->stopping = 1;
  uv_close((uv_handle_t*) &s->listener, NULL);
  uv_close((uv_handle_t*) &s->sigint, NULL);
  uv_close((uv_handle_t*) &s->sigterm, NULL);
  while (s->conns != NULL) conn_close(s->conns);
  /* Answers still waiting for on_flush() are not written now; drop the
   * references they hold, then the handle. */
  on_flush(&s->flusher);
  uv_close((uv_handle_t*) &s->flusher, NULL);
  rc = uvs_sched_close(&s->sched, UVS_CANCEL, NULL);
  if (rc != 0)
    fail("uvs_sched_close", rc);
}


static void on_signal(uv_signal_t* handle, int signum) {
  (void) signum;
  server_stop(handle->data);
}


static void usage(FILE* f) {
  fprintf(f,
          "usage: http-pipeline [--host ADDR] [--port N] "
          "[--mode pool|loop|inline] [--threads T]\n"
          "  --host     address to bind (default 127.0.0.1)\n"
          "  --port     port to bind; 0 picks a free one (default 8080)\n"
          "  --mode     pool: /work runs on libuv's pool, one worker per\n"
          "             connection (default); loop: on the loop thread, one\n"
          "             loop worker per connection; inline: in the parser,\n"
          "             without uvsched\n"
          "  --threads  libuv's pool size (default: the number of CPUs)\n"
          "Prints \"listening on http://ADDR:PORT\" once bound; stops on\n"
          "SIGINT or SIGTERM and exits 0 only if every check held.\n");
}


static long parse_number(const char* s, long lo, long hi, const char* what) {
  char* end;
  long v;
  errno = 0;
  v = strtol(s, &end, 10);
  if (errno != 0 || *s == '\0' || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "http-pipeline: bad %s: %s\n", what, s);
    usage(stderr);
    exit(2);
  }
  return v;
}


int main(int argc, char** argv) {
  server_t* s = &server;
  const char* host = "127.0.0.1";
  long port = 8080;
  long threads = (long) uv_available_parallelism();
  char threads_env[32];
  struct sockaddr_storage addr;
  int addr_len = sizeof(addr);
  char bound[64];
  uint64_t violations;
  int i, rc, ok;

  s->mode = MODE_POOL;
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    }
    if (i + 1 >= argc) {
      usage(stderr);
      return 2;
    }
    if (strcmp(argv[i], "--host") == 0) {
      host = argv[++i];
    } else if (strcmp(argv[i], "--port") == 0) {
      port = parse_number(argv[++i], 0, 65535, "port");
    } else if (strcmp(argv[i], "--threads") == 0) {
      threads = parse_number(argv[++i], 1, 1024, "thread count");
    } else if (strcmp(argv[i], "--mode") == 0) {
      i++;
      if (strcmp(argv[i], "pool") == 0) {
        s->mode = MODE_POOL;
      } else if (strcmp(argv[i], "loop") == 0) {
        s->mode = MODE_LOOP;
      } else if (strcmp(argv[i], "inline") == 0) {
        s->mode = MODE_INLINE;
      } else {
        usage(stderr);
        return 2;
      }
    } else {
      usage(stderr);
      return 2;
    }
  }

  /* libuv sizes its pool from this variable when the pool first starts,
   * which is at the first uv_queue_work(), after this line. */
  snprintf(threads_env, sizeof(threads_env), "%ld", threads);
  setenv("UV_THREADPOOL_SIZE", threads_env, 1);
  signal(SIGPIPE, SIG_IGN);

  settings.on_message_begin = on_message_begin;
  settings.on_url = on_url;
  settings.on_header_field = on_header_bytes;
  settings.on_header_value = on_header_bytes;
  settings.on_headers_complete = on_headers_complete;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;

  s->loop = uv_default_loop();
  s->loop_thread = uv_thread_self();
  atomic_init(&s->order_violations, 0);
  atomic_init(&s->overlaps, 0);
  atomic_init(&s->wrong_thread, 0);

  rc = uvs_sched_init(s->loop, &s->sched, NULL);
  if (rc != 0)
    fail("uvs_sched_init", rc);
  rc = uvs_worker_init(&s->sched, &s->timers, UVS_LOOP);
  if (rc != 0)
    fail("uvs_worker_init", rc);
  s->flusher.data = s;
  rc = uv_idle_init(s->loop, &s->flusher);
  if (rc != 0)
    fail("uv_idle_init", rc);

  if (uv_ip4_addr(host, (int) port, (struct sockaddr_in*) &addr) != 0) {
    rc = uv_ip6_addr(host, (int) port, (struct sockaddr_in6*) &addr);
    if (rc != 0)
      fail(host, rc);
  }
  s->listener.data = s;
  rc = uv_tcp_init(s->loop, &s->listener);
  if (rc == 0)
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr*) &addr, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t*) &s->listener, 1024, on_connection);
  if (rc == 0)
    rc = uv_tcp_getsockname(&s->listener, (struct sockaddr*) &addr, &addr_len);
  if (rc != 0)
    fail("listen", rc);

  s->sigint.data = s;
  s->sigterm.data = s;
  rc = uv_signal_init(s->loop, &s->sigint);
  if (rc == 0)
    rc = uv_signal_start(&s->sigint, on_signal, SIGINT);
  if (rc == 0)
    rc = uv_signal_init(s->loop, &s->sigterm);
  if (rc == 0)
    rc = uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  if (rc != 0)
    fail("uv_signal_start", rc);

  if (addr.ss_family == AF_INET6) {
    bound[0] = '[';
    uv_ip6_name((struct sockaddr_in6*) &addr, bound + 1, sizeof(bound) - 3);
    strcat(bound, "]");
    port = ntohs(((struct sockaddr_in6*) &addr)->sin6_port);
  } else {
    uv_ip4_name((struct sockaddr_in*) &addr, bound, sizeof(bound));
    port = ntohs(((struct sockaddr_in*) &addr)->sin_port);
  }
  printf("http-pipeline: listening on http://%s:%ld mode=%s threads=%ld\n",
         bound, port,
         s->mode == MODE_POOL   ? "pool"
         : s->mode == MODE_LOOP ? "loop"
                                : "inline",
         threads);
  fflush(stdout);

  uv_run(s->loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(s->loop);

  violations = atomic_load(&s->order_violations) + atomic_load(&s->overlaps) +
               atomic_load(&s->wrong_thread);
  ok = rc == 0 && violations == 0 && s->leaks == 0 && s->open == 0;
  fprintf(stderr,
          "http-pipeline: accepted=%" PRIu64 " requests=%" PRIu64
          " responses=%" PRIu64 " work_done=%" PRIu64 " cancelled=%" PRIu64
          " dropped=%" PRIu64 " errors=%" PRIu64 " done_reordered=%" PRIu64
          "\nhttp-pipeline: order_violations=%" PRIu64 " overlaps=%" PRIu64
          " wrong_thread=%" PRIu64 " leaks=%" PRIu64 " loop_close=%s: %s\n",
          s->accepted, s->requests, s->responses, s->work_done, s->cancelled,
          s->dropped, s->errors, s->done_reordered,
          (uint64_t) atomic_load(&s->order_violations),
          (uint64_t) atomic_load(&s->overlaps),
          (uint64_t) atomic_load(&s->wrong_thread), s->leaks,
          rc == 0 ? "ok" : uv_err_name(rc), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
