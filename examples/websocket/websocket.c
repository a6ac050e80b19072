/* websocket: a WebSocket processing server on libwebsockets (lws 4.1) and a
 * libuv loop the program owns, with one uvsched pool worker per connection.
 *
 *   websocket [--host ADDR] [--port N] [--mode pool|inline] [--work-us US]
 *             [--max-conns N] [--max-msg BYTES] [--max-queue N]
 *             [--max-outq BYTES] [--idle-s S] [--max-concurrency N]
 *
 * Every text or binary message a client sends is answered with one message
 * of the same kind: 16 lower-case hex digits of the FNV-1a 64 digest of the
 * payload, a space, and the payload. Before answering, the server works on
 * the message for --work-us microseconds of CPU (a spin: the stand-in for
 * parsing, hashing or compressing).
 *
 * --mode pool (the default): each connection owns a UVS_POOL worker. A
 * message becomes a task on it; run_cb hashes and works on a pool thread,
 * one message of the connection at a time and in the order they came, while
 * other connections' messages run beside it on other pool threads. done_cb,
 * on the loop thread and in the order the tasks ran, queues the answer and
 * asks lws for a WRITEABLE callback (lws_callback_on_writable), which
 * writes it. Answers come in order with no reorder list.
 *
 * --mode inline: the baseline. The same work is done in the RECEIVE
 * callback on the loop thread, so one message of any connection stalls
 * them all.
 *
 * Every queue is bounded, against clients that send faster than the server
 * works or never read:
 *   - a connection's worker holds at most --max-queue messages queued and
 *     not started (max_pending, UVS_FULL_REJECT). A message the full worker
 *     refuses is kept (at most one or two per connection: see conn_submit),
 *     and the connection stops reading (lws_rx_flow_control) until the
 *     worker's space_cb says its queue fell to half;
 *   - a connection's answers waiting to be written are bounded by
 *     --max-outq bytes: beyond that it stops reading until they fall to
 *     half (a client that does not read stops itself);
 *   - a message longer than --max-msg bytes closes the connection (1009);
 *   - a connection over --max-conns is closed at once (1013, "full");
 *   - a connection with no traffic either way for --idle-s seconds is
 *     closed (lws_set_timeout), and so is a WebSocket handshake that takes
 *     longer than that.
 *
 * A disconnect closes the connection's worker with UVS_CANCEL: its queued
 * messages are handed back with UV_ECANCELED and never run; the one
 * running finishes, and its answer is dropped.
 *
 * Each connection's end is printed on stdout when its memory is freed:
 *   closed conn=ID received=N answered=N cancelled=N
 * (tests wait for these lines). On SIGINT or SIGTERM the server closes
 * everything, prints its counters on stderr and exits 0 only if every check
 * held (no two tasks of one connection at once, every connection's answers
 * in order, no connection or message left in memory) and uv_loop_close()
 * returned 0.
 *
 * Rules of the host, learned the hard way (each is repeated where it
 * bites):
 *   1. Debian's lws loads its libuv support as a plugin
 *      (libwebsockets-evlib-uv). The program owns the loop and hands it to
 *      lws (foreign_loops with LWS_SERVER_OPTION_LIBUV), so that lws and
 *      uvsched share one loop the program can close.
 *   2. lws frees a connection's per-session data when the CLOSED callback
 *      returns, but the worker lives on until its running task is over.
 *      So the connection (and its worker) is memory the program owns, and
 *      it is freed in the worker's close callback.
 *   3. With a foreign loop, lws_context_destroy() only starts the teardown:
 *      called from a callback, it closes the connections and starts closing
 *      lws's handles on our loop, which uv_run() then finishes. lws frees
 *      its context only on a second call, after uv_run() returns and
 *      before uv_loop_close(). (Issue 22 saw uv_loop_close() fail with
 *      UV_EBUSY without that call; with lws 4.1.6 and libuv 1.44.2 here it
 *      returns 0 either way, but the context stays allocated, reachable
 *      from the program, so LeakSanitizer is silent about it. The program
 *      has lws write NULL over its context pointer when the teardown is
 *      complete, info.pcontext, and checks that it did.)
 */

#include <uvsched.h>

#include <libwebsockets.h>

#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIGEST_LEN 17 /* 16 hex digits and a space before the payload */
#define WRITES_PER_CALLBACK 16
#define IDLE_REARM_MS 500 /* re-arm the idle timeout at most this often */
#define CLOSE_FULL 1013   /* "try again later": no name in lws 4.1 */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

enum { MODE_POOL, MODE_INLINE };

/* Why a connection is not reading: while any bit is set, it does not. */
enum { PAUSE_QUEUE = 1, PAUSE_OUT = 2 };

typedef struct server_s server_t;
typedef struct conn_s conn_t;
typedef struct msg_s msg_t;

/* A message, and later its answer, in one allocation:
 * [LWS_PRE headroom][16 hex digits][' '][payload]. */
struct msg_s {
  uvs_task_t task; /* first: a uvs_task_t* is a msg_t* */
  conn_t* conn;
  msg_t* next; /* the held list, then the output queue */
  uint64_t seq;
  size_t len;
  int binary;
  unsigned char buf[];
};

/* Rule 2: lws's per-session data only points here. */
typedef struct pss_s {
  conn_t* conn;
} pss_t;

struct conn_s {
  uvs_worker_t worker;
  server_t* server;
  struct lws* wsi; /* NULL once lws has closed the connection */
  unsigned id;
  unsigned paused; /* PAUSE_* bits */
  uint64_t idle_armed_ms;
  /* A message in fragments: its bytes so far. */
  unsigned char* asm_buf;
  size_t asm_len;
  size_t asm_cap;
  int asm_binary;
  /* Messages the full worker refused, in order: scheduled by space_cb. */
  msg_t* held;
  msg_t* held_tail;
  unsigned nheld;
  /* Answers waiting for WRITEABLE, in order. */
  msg_t* out;
  msg_t* out_tail;
  size_t out_bytes;
  /* Loop thread. */
  uint64_t received;
  uint64_t answered;
  uint64_t cancelled;
  uint64_t delivered; /* the seq of the last answer handed back */
  /* Only this connection's tasks touch these, one at a time. */
  uint64_t ran;
  atomic_int busy; /* the overlap check */
};

struct server_s {
  uv_loop_t loop;
  uv_signal_t sigint;
  uv_signal_t sigterm;
  uvs_sched_t sched;
  struct lws_context* lws;
  int stopping;
  /* options */
  int mode;
  unsigned work_us;
  unsigned max_conns;
  size_t max_msg;
  size_t max_queue;
  size_t max_outq;
  unsigned idle_s;
  unsigned max_concurrency;
  /* counters, loop thread */
  unsigned next_id;
  uint64_t open;
  uint64_t accepted;
  uint64_t refused;
  uint64_t messages;
  uint64_t answered;
  uint64_t cancelled;
  uint64_t dropped; /* answers of connections already closed */
  uint64_t too_big;
  uint64_t pauses;
  uint64_t held_max;
  uint64_t out_bytes_max;
  uint64_t live_conns;
  uint64_t live_msgs;
  uint64_t order_violations;
  uvs_stats_t stats; /* the scheduler's, when the stop began */
  /* pool threads */
  atomic_uint_fast64_t overlaps;
};

static server_t server;


static void fail(const char* what, int rc) {
  fprintf(stderr, "websocket: %s: %s\n", what, uv_strerror(rc));
  exit(1);
}


/* ---- the work ------------------------------------------------------------
 */

static uint64_t fnv1a(const unsigned char* p, size_t n) {
  uint64_t h = FNV_OFFSET;

  while (n-- > 0) {
    h ^= *p++;
    h *= FNV_PRIME;
  }
  return h;
}


static void spin_us(unsigned us) {
  uint64_t end = uv_hrtime() + (uint64_t) us * 1000;

  while (uv_hrtime() < end)
    ;
}


/* Writes the answer's digest in front of the payload. */
static void msg_work(server_t* s, msg_t* m) {
  static const char hex[] = "0123456789abcdef";
  unsigned char* d = m->buf + LWS_PRE;
  uint64_t h = fnv1a(d + DIGEST_LEN, m->len);
  int i;

  if (s->work_us != 0)
    spin_us(s->work_us);
  for (i = 15; i >= 0; i--) {
    d[i] = (unsigned char) hex[h & 15];
    h >>= 4;
  }
  d[16] = ' ';
}


static msg_t* msg_new(conn_t* c, const void* data, size_t len, int binary) {
  msg_t* m = malloc(sizeof(*m) + LWS_PRE + DIGEST_LEN + len);

  if (m == NULL)
    return NULL;
  memset(m, 0, sizeof(*m));
  m->conn = c;
  m->len = len;
  m->binary = binary;
  if (len != 0)
    memcpy(m->buf + LWS_PRE + DIGEST_LEN, data, len);
  c->server->live_msgs++;
  return m;
}


static void msg_free(msg_t* m) {
  m->conn->server->live_msgs--;
  free(m);
}


/* ---- flow control --------------------------------------------------------
 */

/* Reads while no reason to stop holds. lws applies a change made inside
 * this connection's own callback when the callback returns, and one made
 * elsewhere (done_cb, space_cb) at once. */
static void conn_pause(conn_t* c, unsigned why, int on) {
  unsigned before = c->paused;

  if (on)
    c->paused |= why;
  else
    c->paused &= ~why;
  if (c->wsi == NULL || (before == 0) == (c->paused == 0))
    return;
  if (c->paused != 0)
    c->server->pauses++;
  lws_rx_flow_control(c->wsi, c->paused == 0);
}


static void conn_idle_rearm(conn_t* c) {
  uint64_t now = uv_now(&c->server->loop);

  if (c->wsi == NULL || now - c->idle_armed_ms < IDLE_REARM_MS)
    return;
  c->idle_armed_ms = now;
  lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, (int) c->server->idle_s);
}


/* Queues m's answer for the WRITEABLE callback. */
static void conn_answer(conn_t* c, msg_t* m) {
  server_t* s = c->server;

  m->next = NULL;
  if (c->out_tail != NULL)
    c->out_tail->next = m;
  else
    c->out = m;
  c->out_tail = m;
  c->out_bytes += DIGEST_LEN + m->len;
  if (c->out_bytes > s->out_bytes_max)
    s->out_bytes_max = c->out_bytes;
  c->answered++;
  s->answered++;
  if (c->out_bytes > s->max_outq)
    conn_pause(c, PAUSE_OUT, 1);
  lws_callback_on_writable(c->wsi);
}


/* ---- pool mode: one worker per connection --------------------------------
 */

/* A pool thread, one task of the connection at a time: seq and ran need no
 * lock, and the busy flag catches an overlap if there ever were one. */
static void msg_run(uvs_task_t* task) {
  msg_t* m = (msg_t*) task;
  conn_t* c = m->conn;

  if (atomic_exchange(&c->busy, 1) != 0)
    atomic_fetch_add(&server.overlaps, 1);
  msg_work(&server, m);
  m->seq = ++c->ran;
  atomic_store(&c->busy, 0);
}


/* The loop thread; the status-0 calls come in the order the tasks ran. */
static void msg_done(uvs_task_t* task, int status) {
  msg_t* m = (msg_t*) task;
  conn_t* c = m->conn;
  server_t* s = c->server;

  if (status != 0) {
    c->cancelled++;
    s->cancelled++;
    msg_free(m);
    return;
  }
  if (m->seq != c->delivered + 1)
    s->order_violations++;
  c->delivered = m->seq;
  /* Rule 2: the connection may be gone from lws already (its wsi and
   * per-session data freed); its memory is still ours until the worker's
   * close callback. */
  if (c->wsi == NULL) {
    s->dropped++;
    msg_free(m);
    return;
  }
  conn_answer(c, m);
}


static void held_push(conn_t* c, msg_t* m) {
  m->next = NULL;
  if (c->held_tail != NULL)
    c->held_tail->next = m;
  else
    c->held = m;
  c->held_tail = m;
  c->nheld++;
  if (c->nheld > c->server->held_max)
    c->server->held_max = c->nheld;
}


static msg_t* held_pop(conn_t* c) {
  msg_t* m = c->held;

  if (m == NULL)
    return NULL;
  c->held = m->next;
  if (c->held == NULL)
    c->held_tail = NULL;
  c->nheld--;
  m->next = NULL;
  return m;
}


/* Schedules m behind the connection's held messages. A full worker refuses
 * it (UV_EAGAIN): it is held, and the connection stops reading. lws stops
 * delivering messages once the RECEIVE callback that stopped reading
 * returns, so at most the message being delivered is held beyond the
 * first; a connection that somehow passes --max-queue held messages is
 * closed. Returns 0, or -1 to close the connection. */
static int conn_submit(conn_t* c, msg_t* m) {
  server_t* s = c->server;
  int rc;

  c->received++;
  s->messages++;
  if (s->mode == MODE_INLINE) {
    msg_work(s, m);
    m->seq = ++c->ran;
    c->delivered = m->seq;
    conn_answer(c, m);
    return 0;
  }
  if (c->held == NULL) {
    rc = uvs_task_init(&m->task, msg_run, msg_done);
    if (rc == 0)
      rc = uvs_schedule(&c->worker, &m->task);
    if (rc == 0)
      return 0;
    if (rc != UV_EAGAIN) {
      msg_free(m);
      return -1;
    }
  }
  held_push(c, m);
  conn_pause(c, PAUSE_QUEUE, 1);
  return c->nheld > s->max_queue ? -1 : 0;
}


/* space_cb, on the loop thread: the worker was full and its queue fell to
 * --max-queue / 2. Schedules the held messages in order; reads again once
 * none is left. One that finds the worker full again waits for the next
 * call (the refusal owes another). */
static void on_space(uvs_worker_t* worker) {
  conn_t* c = worker->data;
  msg_t* m;
  int rc;

  while ((m = c->held) != NULL) {
    rc = uvs_task_init(&m->task, msg_run, msg_done);
    if (rc == 0)
      rc = uvs_schedule(&c->worker, &m->task);
    if (rc == UV_EAGAIN)
      return;
    held_pop(c);
    if (rc != 0) {
      msg_free(m);
      if (c->wsi != NULL)
        lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
      return;
    }
  }
  conn_pause(c, PAUSE_QUEUE, 0);
}


/* ---- connections ---------------------------------------------------------
 */

static void conn_free(conn_t* c) {
  server_t* s = c->server;

  printf("closed conn=%u received=%" PRIu64 " answered=%" PRIu64
         " cancelled=%" PRIu64 "\n",
         c->id, c->received, c->answered, c->cancelled);
  fflush(stdout);
  s->live_conns--;
  free(c);
}


/* Rule 2: the worker's close callback, after the last of its tasks was
 * handed back: only now is the connection's memory free to go. */
static void on_worker_closed(uvs_worker_t* worker) {
  conn_free(worker->data);
}


static conn_t* conn_open(server_t* s, struct lws* wsi) {
  uvs_worker_options_t wo;
  conn_t* c = calloc(1, sizeof(*c));
  int rc;

  if (c == NULL)
    return NULL;
  c->server = s;
  c->wsi = wsi;
  c->id = ++s->next_id;
  atomic_init(&c->busy, 0);
  if (s->mode == MODE_POOL) {
    memset(&wo, 0, sizeof(wo));
    wo.max_pending = s->max_queue;
    wo.on_full = UVS_FULL_REJECT;
    wo.low_water = s->max_queue / 2;
    wo.space_cb = on_space;
    rc = uvs_worker_init_ex(&s->sched, &c->worker, UVS_POOL, &wo);
    if (rc != 0) {
      fprintf(stderr, "websocket: uvs_worker_init_ex: %s\n", uv_strerror(rc));
      free(c);
      return NULL;
    }
    c->worker.data = c;
  }
  s->live_conns++;
  s->open++;
  s->accepted++;
  c->idle_armed_ms = uv_now(&s->loop);
  lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, (int) s->idle_s);
  return c;
}


/* lws has closed the connection (CLOSED): forget the wsi, drop what waits
 * to be read or written, and cancel the messages not yet run. */
static void conn_closed(conn_t* c) {
  server_t* s = c->server;
  msg_t* m;
  int rc;

  c->wsi = NULL;
  s->open--;
  free(c->asm_buf);
  c->asm_buf = NULL;
  while ((m = held_pop(c)) != NULL) msg_free(m);
  while ((m = c->out) != NULL) {
    c->out = m->next;
    msg_free(m);
  }
  c->out_tail = NULL;
  if (s->mode == MODE_INLINE) {
    conn_free(c);
    return;
  }
  /* Rule 2: lws frees the per-session data when this callback returns; the
   * worker, in the connection, lives on until on_worker_closed. */
  rc = uvs_worker_close(&c->worker, UVS_CANCEL, on_worker_closed);
  if (rc != 0)
    fail("uvs_worker_close", rc);
}


/* Closes the connection from inside its own callback: returns -1 for the
 * callback to return. */
static int conn_reject(struct lws* wsi, int code, const char* why) {
  lws_close_reason(wsi, (enum lws_close_status) code, (unsigned char*) why,
                   strlen(why));
  return -1;
}


static int on_receive(conn_t* c, struct lws* wsi, const void* in, size_t len) {
  server_t* s = c->server;
  int first = lws_is_first_fragment(wsi);
  int final = lws_is_final_fragment(wsi);
  size_t cap;
  msg_t* m;

  conn_idle_rearm(c);
  if (first && final) { /* the whole message in one piece: no copy */
    if (len > s->max_msg) {
      s->too_big++;
      return conn_reject(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, "too big");
    }
    m = msg_new(c, in, len, lws_frame_is_binary(wsi));
    return m != NULL ? conn_submit(c, m) : -1;
  }
  if (first) {
    c->asm_len = 0;
    c->asm_binary = lws_frame_is_binary(wsi);
  }
  if (len > s->max_msg - c->asm_len) {
    s->too_big++;
    return conn_reject(wsi, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, "too big");
  }
  if (c->asm_len + len > c->asm_cap) {
    unsigned char* p;
    cap = c->asm_cap != 0 ? c->asm_cap : 4096;
    while (cap < c->asm_len + len) cap *= 2;
    if (cap > s->max_msg)
      cap = s->max_msg;
    p = realloc(c->asm_buf, cap);
    if (p == NULL)
      return -1;
    c->asm_buf = p;
    c->asm_cap = cap;
  }
  if (len != 0)
    memcpy(c->asm_buf + c->asm_len, in, len);
  c->asm_len += len;
  if (!final)
    return 0;
  m = msg_new(c, c->asm_buf, c->asm_len, c->asm_binary);
  c->asm_len = 0;
  return m != NULL ? conn_submit(c, m) : -1;
}


/* Writes the answers lws can take now, in order; asks for another
 * WRITEABLE callback while some wait. */
static int on_writeable(conn_t* c, struct lws* wsi) {
  server_t* s = c->server;
  msg_t* m;
  size_t n;
  int k;

  for (k = 0; k < WRITES_PER_CALLBACK && c->out != NULL; k++) {
    if (k != 0 && lws_send_pipe_choked(wsi))
      break;
    m = c->out;
    n = DIGEST_LEN + m->len;
    if (lws_write(wsi, m->buf + LWS_PRE, n,
                  m->binary ? LWS_WRITE_BINARY : LWS_WRITE_TEXT) < (int) n)
      return -1;
    c->out = m->next;
    if (c->out == NULL)
      c->out_tail = NULL;
    c->out_bytes -= n;
    msg_free(m);
  }
  if (k != 0)
    conn_idle_rearm(c);
  if (c->out_bytes <= s->max_outq / 2)
    conn_pause(c, PAUSE_OUT, 0);
  if (c->out != NULL)
    lws_callback_on_writable(wsi);
  return 0;
}


static int on_lws(struct lws* wsi,
                  enum lws_callback_reasons reason,
                  void* user,
                  void* in,
                  size_t len) {
  server_t* s = &server;
  pss_t* pss = user;

  switch (reason) {
    case LWS_CALLBACK_ESTABLISHED:
      pss->conn = NULL;
      if (s->stopping)
        return -1;
      if (s->open >= s->max_conns) {
        s->refused++;
        return conn_reject(wsi, CLOSE_FULL, "full");
      }
      pss->conn = conn_open(s, wsi);
      return pss->conn != NULL ? 0 : -1;
    case LWS_CALLBACK_RECEIVE:
      if (pss == NULL || pss->conn == NULL)
        return -1;
      return on_receive(pss->conn, wsi, in, len);
    case LWS_CALLBACK_SERVER_WRITEABLE:
      if (pss == NULL || pss->conn == NULL)
        return 0;
      return on_writeable(pss->conn, wsi);
    case LWS_CALLBACK_CLOSED:
      if (pss != NULL && pss->conn != NULL) {
        conn_closed(pss->conn);
        pss->conn = NULL;
      }
      return 0;
    default:
      /* HTTP that is not an upgrade, and lws's own housekeeping. */
      return lws_callback_http_dummy(wsi, reason, user, in, len);
  }
}


/* ---- the server ----------------------------------------------------------
 */

static void server_stop(server_t* s) {
  int rc;

  if (s->stopping)
    return;
  s->stopping = 1;
  uvs_sched_stats(&s->sched, &s->stats); /* before the close: see SPEC */
  uv_close((uv_handle_t*) &s->sigint, NULL);
  uv_close((uv_handle_t*) &s->sigterm, NULL);
  /* Rule 3, first call: closes the listener and every connection (their
   * CLOSED callbacks close their workers) and starts closing lws's own
   * handles on our loop. */
  lws_context_destroy(s->lws);
  /* Messages not yet run are handed back with UV_ECANCELED. */
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
          "usage: websocket [--host ADDR] [--port N] [--mode pool|inline]\n"
          "                 [--work-us US] [--max-conns N] [--max-msg BYTES]\n"
          "                 [--max-queue N] [--max-outq BYTES] [--idle-s S]\n"
          "                 [--max-concurrency N]\n"
          "  --mode pool     each connection's messages on its own uvsched\n"
          "                  pool worker, in order (default)\n"
          "  --mode inline   the work in lws's RECEIVE callback (baseline)\n"
          "  --work-us US    CPU per message (default 0)\n"
          "  --max-queue N   messages of a connection queued and not "
          "started\n"
          "                  before it stops reading (default 64)\n"
          "  --max-concurrency N  pool threads the messages may use at once\n"
          "                  (default 0: libuv's pool size)\n");
}


static unsigned long num_arg(const char* what,
                             const char* v,
                             unsigned long lo,
                             unsigned long hi) {
  char* end;
  unsigned long n = strtoul(v, &end, 10);

  if (*v == '\0' || *end != '\0' || n < lo || n > hi) {
    fprintf(stderr, "websocket: bad %s: %s\n", what, v);
    exit(2);
  }
  return n;
}


static void log_lws(int level, const char* line) {
  (void) level;
  fprintf(stderr, "websocket: lws: %s", line);
}


int main(int argc, char** argv) {
  static const struct lws_protocols protocols[] = {
      {"uvsched-echo", on_lws, sizeof(pss_t), 16384, 0, NULL, 0},
      {NULL, NULL, 0, 0, 0, NULL, 0},
  };
  server_t* s = &server;
  struct lws_context_creation_info info;
  uvs_sched_options_t so;
  void* loops[1];
  const char* host = "127.0.0.1";
  unsigned long port = 0;
  int listen_port;
  int ok;
  int rc;
  int i;

  s->mode = MODE_POOL;
  s->max_conns = 256;
  s->max_msg = 64 * 1024;
  s->max_queue = 64;
  s->max_outq = 1 << 20;
  s->idle_s = 60;
  for (i = 1; i < argc; i += 2) { /* --name value */
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) {
      usage(stderr);
      return 2;
    }
    if (strcmp(argv[i], "--host") == 0)
      host = v;
    else if (strcmp(argv[i], "--port") == 0)
      port = num_arg("port", v, 0, 65535);
    else if (strcmp(argv[i], "--mode") == 0 && strcmp(v, "pool") == 0)
      s->mode = MODE_POOL;
    else if (strcmp(argv[i], "--mode") == 0 && strcmp(v, "inline") == 0)
      s->mode = MODE_INLINE;
    else if (strcmp(argv[i], "--work-us") == 0)
      s->work_us = (unsigned) num_arg("work-us", v, 0, 1000000);
    else if (strcmp(argv[i], "--max-conns") == 0)
      s->max_conns = (unsigned) num_arg("max-conns", v, 1, 100000);
    else if (strcmp(argv[i], "--max-msg") == 0)
      s->max_msg = num_arg("max-msg", v, 16, 1ul << 26);
    else if (strcmp(argv[i], "--max-queue") == 0)
      s->max_queue = num_arg("max-queue", v, 2, 100000);
    else if (strcmp(argv[i], "--max-outq") == 0)
      s->max_outq = num_arg("max-outq", v, 1024, 1ul << 30);
    else if (strcmp(argv[i], "--idle-s") == 0)
      s->idle_s = (unsigned) num_arg("idle-s", v, 1, 86400);
    else if (strcmp(argv[i], "--max-concurrency") == 0)
      s->max_concurrency = (unsigned) num_arg("max-concurrency", v, 0, 1024);
    else {
      usage(stderr);
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  atomic_init(&s->overlaps, 0);
  lws_set_log_level(LLL_ERR, log_lws);

  /* Rule 1: the loop is ours; lws and uvsched both run on it. */
  rc = uv_loop_init(&s->loop);
  if (rc != 0)
    fail("uv_loop_init", rc);
  memset(&so, 0, sizeof(so));
  /* Most pool threads the messages may hold at once (0: libuv's pool
   * size). Fewer leave CPU to the loop thread, which does all of lws's
   * I/O, and to whatever else runs on the machine. */
  so.max_concurrency = s->max_concurrency;
  rc = uvs_sched_init(&s->loop, &s->sched, &so);
  if (rc != 0)
    fail("uvs_sched_init", rc);

  memset(&info, 0, sizeof(info));
  info.iface = host;
  info.port = (int) port;
  info.protocols = protocols;
  info.gid = -1;
  info.uid = -1;
  /* Rule 1: Debian builds lws with its event libraries as plugins
   * (LWS_WITH_EVLIB_PLUGINS): LWS_SERVER_OPTION_LIBUV makes it load
   * libwebsockets-evlib_uv.so, and foreign_loops hands it our loop instead
   * of one of its own, which we could neither share nor close. */
  info.options = LWS_SERVER_OPTION_LIBUV | LWS_SERVER_OPTION_DISABLE_IPV6;
  loops[0] = &s->loop;
  info.foreign_loops = loops;
  /* A client that holds its handshake (headers that never end) gets no
   * longer than an idle one: lws's own default is 10 s. */
  info.timeout_secs = s->idle_s;
  info.timeout_secs_ah_idle = s->idle_s;
  /* Rule 3: lws writes NULL here when its teardown is complete. */
  info.pcontext = &s->lws;
  s->lws = lws_create_context(&info);
  if (s->lws == NULL) {
    fprintf(stderr,
            "websocket: lws_create_context failed (is "
            "libwebsockets-evlib-uv installed?)\n");
    return 1;
  }
  listen_port =
      lws_get_vhost_listen_port(lws_get_vhost_by_name(s->lws, "default"));

  s->sigint.data = s;
  s->sigterm.data = s;
  rc = uv_signal_init(&s->loop, &s->sigint);
  if (rc == 0)
    rc = uv_signal_start(&s->sigint, on_signal, SIGINT);
  if (rc == 0)
    rc = uv_signal_init(&s->loop, &s->sigterm);
  if (rc == 0)
    rc = uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  if (rc != 0)
    fail("uv_signal_start", rc);

  printf(
      "websocket: listening on ws://%s:%d mode=%s work_us=%u "
      "max_concurrency=%u\n",
      host, listen_port, s->mode == MODE_POOL ? "pool" : "inline", s->work_us,
      s->max_concurrency);
  fflush(stdout);

  rc = uv_run(&s->loop, UV_RUN_DEFAULT);
  /* Rule 3, second call: lws's handles are closed now, and lws frees its
   * context (and writes NULL over s->lws: info.pcontext). */
  if (s->lws != NULL)
    lws_context_destroy(s->lws);
  rc = uv_loop_close(&s->loop);
  ok = rc == 0 && s->lws == NULL && atomic_load(&s->overlaps) == 0 &&
       s->order_violations == 0 && s->live_conns == 0 && s->live_msgs == 0;
  fprintf(stderr,
          "websocket: mode=%s accepted=%" PRIu64 " refused=%" PRIu64
          " messages=%" PRIu64 " answered=%" PRIu64 " cancelled=%" PRIu64
          " dropped=%" PRIu64 " too_big=%" PRIu64 " pauses=%" PRIu64
          " held_max=%" PRIu64 " out_bytes_max=%" PRIu64
          "\n"
          "websocket: at stop: scheduled=%" PRIu64 " ran=%" PRIu64
          " cancelled=%" PRIu64 " pending=%" PRIu64 " drains=%" PRIu64
          "\n"
          "websocket: overlaps=%" PRIu64 " order_violations=%" PRIu64
          " live_conns=%" PRIu64 " live_msgs=%" PRIu64
          " lws_destroyed=%s loop_close=%s: %s\n",
          s->mode == MODE_POOL ? "pool" : "inline", s->accepted, s->refused,
          s->messages, s->answered, s->cancelled, s->dropped, s->too_big,
          s->pauses, s->held_max, s->out_bytes_max, s->stats.scheduled,
          s->stats.ran, s->stats.cancelled, s->stats.pending, s->stats.drains,
          (uint64_t) atomic_load(&s->overlaps), s->order_violations,
          s->live_conns, s->live_msgs, s->lws == NULL ? "yes" : "no",
          rc == 0 ? "ok" : uv_err_name(rc), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
