/* chat-rooms: a line-based TCP chat server ordered per room on ONE uvsched
 * worker of width 4.
 *
 *   chat-rooms [--host ADDR] [--port N] [--rooms N] [--max-conns N]
 *              [--max-line BYTES] [--idle-ms MS] [--max-inflight N]
 *              [--room-queue N] [--max-outq BYTES] [--sndbuf BYTES]
 *              [--work-us US] [--config FILE]
 *
 * Protocol, one line at a time (LF or CRLF):
 *   client  JOIN <room> <nick>   first line; room 1..--rooms, nick 1..16 of
 *                                [A-Za-z0-9_-]; answered "JOINED <room>"
 *   client  PING                 answered "PONG" (keeps an idle client in)
 *   client  anything else        a message to the room
 *   server  MSG <room> <seq> <hash> <nick> <text>
 *                                to every member of the room, the sender too;
 *                                seq counts the room's messages from 1, hash
 *                                is the room's running FNV-1a 64 digest (16
 *                                hex digits) over the texts so far
 *   server  CONFIG <gen>         to every member of every room once a
 *                                reloaded configuration is in force: every
 *                                MSG before it was filtered with the
 *                                previous one, every MSG after it with this
 *                                one (generation gen, counted from 1)
 *   server  ERR <why>            then the server closes the connection: full
 *                                (connection cap), line too long, idle (no
 *                                input for --idle-ms), expected JOIN...
 *
 * Every message is a task on one UVS_POOL worker made with width = 4 and
 * keyed by its room (uvs_task_set_key): the tasks of one room never overlap
 * and start and complete in the order they were scheduled, so run_cb can
 * number the room's messages and chain its digest without a lock, and
 * done_cb (on the loop thread, in schedule order per room) writes them to
 * the members in that order. Different rooms run on up to four pool threads
 * at once. No room costs anything in the worker while it has no message
 * queued: the worker keeps no entry for an idle key.
 *
 * Limits, as any server on the Internet needs them: a connection cap
 * (answered "ERR full"), a line length cap (the read buffer is one line
 * long), an idle timeout (not counted while the server itself holds the
 * connection's reading back), at most --max-inflight messages of a
 * connection scheduled and not yet handed back (beyond that the server stops
 * reading it, uv_read_stop, until one is done), at most --room-queue
 * messages of a room queued and not started, and at most --max-outq bytes
 * waiting to be written to a connection (a member that does not read is
 * dropped, so that it can't hold the room's memory).
 *
 * The room bound is the worker's per-key bound (key_max_pending): a
 * schedule onto a full room answers UV_EAGAIN, and the sender keeps that
 * message and stops reading, alone; other rooms, and the room's members
 * that do not send, go on. When the room's queue falls to half,
 * key_space_cb(worker, room) schedules the kept messages, in the order
 * their senders stopped, and those read again. So a room's memory is
 * bounded however many clients flood it, and nothing is dropped. The
 * worker as a whole is bounded too (max_pending = max-conns x max-inflight,
 * and one for a reload barrier, never reached by construction: a UV_EAGAIN
 * is a full room).
 *
 * The configuration (--config FILE: words to mask with '*', one a line) is
 * read by the message tasks of every room, on up to four pool threads at
 * once. SIGHUP reloads it: the loop thread reads the file, and a barrier on
 * the worker (uvs_schedule_barrier) swaps the pointer and frees the old
 * configuration. The barrier runs alone, after every message accepted
 * before it has returned and before any accepted after it starts, so no
 * message is filtered half with the old words and half with the new, and
 * none reads the freed configuration. Its done_cb comes after the done_cb
 * of every earlier message and before that of every later one, so the
 * CONFIG line it sends to the members sits exactly between the two.
 *
 * On SIGINT or SIGTERM it closes everything, prints its counters and the
 * worker's metrics to stderr, and exits 0 only if every check held (no two
 * tasks of a room at once, every room's messages handed back in order, no
 * message run beside a barrier or handed back under another configuration
 * than the one it ran with), nothing leaked and uv_loop_close() succeeded.
 */

#include <uvsched.h>

#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WIDTH 4
#define MAX_NICK 16
#define LINGER_MS 2000 /* how long an ERR line may take to leave */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
#define MAX_WORDS 32 /* in a configuration */
#define MAX_WORD 32

typedef struct server_s server_t;
typedef struct conn_s conn_t;
typedef struct room_s room_t;

/* What every message task reads: the server's configuration. Replaced
 * whole on a reload, never changed in place. */
typedef struct config_s {
  uint64_t gen; /* 1 for the first, then one more per reload */
  unsigned nwords;
  size_t len[MAX_WORDS];
  char word[MAX_WORDS][MAX_WORD + 1];
} config_t;

struct room_s {
  uint64_t id;
  conn_t* members;    /* loop thread */
  conn_t* waiting;    /* loop thread: senders stopped by the full room, */
  conn_t* wait_tail;  /* in the order they stopped */
  uint64_t delivered; /* loop thread: the last seq written out */
  /* Only this room's tasks touch these, and they never overlap. */
  uint64_t seq;
  uint64_t hash;
  atomic_int busy; /* the overlap check */
};

/* A buffer written to several members: freed by its last write. */
typedef struct wbuf_s {
  unsigned refs;
  size_t len;
  char data[];
} wbuf_t;

typedef struct write_req_s {
  uv_write_t req;
  wbuf_t* buf;
  conn_t* conn;
  int close_after; /* an ERR line: close once it is written */
} write_req_t;

typedef struct msg_s {
  uvs_task_t task; /* first: a uvs_task_t* is a msg_t* */
  conn_t* from;
  room_t* room;
  wbuf_t* out; /* made by run_cb */
  uint64_t seq;
  uint64_t gen; /* the configuration run_cb filtered it with */
  size_t len;
  char nick[MAX_NICK + 1];
  char text[];
} msg_t;

struct conn_s {
  uv_tcp_t tcp;
  uv_timer_t idle;
  server_t* server;
  conn_t* next; /* all connections */
  conn_t* prev;
  room_t* room;  /* NULL until JOIN */
  conn_t* rnext; /* the room's members */
  conn_t* rprev;
  msg_t* kept;   /* refused by the full room: the next to schedule */
  conn_t* wnext; /* the room's waiting senders, while kept != NULL */
  conn_t* wprev;
  char nick[MAX_NICK + 1];
  unsigned refs; /* handles open, messages in flight */
  unsigned inflight;
  int reading;
  int failing; /* an ERR is on its way; nothing more is read */
  int closing;
  int discard; /* lingering after an ERR: input is read and dropped */
  int counted; /* in server->open (not a refused one) */
  size_t rlen;
  char* rbuf; /* --max-line bytes: at most one line waits here */
};

struct server_s {
  uv_loop_t loop;
  uv_tcp_t listener;
  uv_signal_t sigint;
  uv_signal_t sigterm;
  uv_signal_t sighup; /* with --config: reload */
  uvs_sched_t sched;
  uvs_worker_t worker;
  room_t* rooms;
  conn_t* conns;
  int stopping;
  /* Read by message tasks on pool threads; replaced only by a reload
   * barrier's run_cb, which runs alone (reload_run). */
  config_t* config;
  /* reloads, loop thread */
  const char* config_path;
  uint64_t next_gen;      /* the next configuration's */
  uint64_t announced_gen; /* the one the last CONFIG line announced */
  int reloading;          /* a reload barrier is in flight */
  int reload_again;       /* SIGHUP meanwhile: read the file once more */
  /* options */
  unsigned nrooms;
  unsigned max_conns;
  size_t max_line;
  uint64_t idle_ms;
  unsigned max_inflight;
  size_t room_queue;
  size_t max_outq;
  int sndbuf;
  unsigned work_us;
  /* counters, loop thread */
  uint64_t open;
  uint64_t accepted;
  uint64_t refused;
  uint64_t messages;
  uint64_t delivered;
  uint64_t lines_out;
  uint64_t cancelled;
  uint64_t errors;
  uint64_t slow_dropped;
  uint64_t read_stops;
  uint64_t room_stalls; /* a sender stopped by its full room */
  uint64_t room_wakes;  /* key_space_cb calls */
  uint64_t live_conns;
  uint64_t live_msgs;
  uint64_t order_violations;
  uint64_t reloads;      /* configurations put in force */
  uint64_t reload_fails; /* a file that could not be read or parsed */
  uint64_t stale_config; /* a message handed back under another generation */
  /* counters, pool threads */
  atomic_uint_fast64_t overlaps;
  atomic_uint_fast64_t barrier_overlaps; /* a reload ran beside a message */
  atomic_uint running;
  atomic_uint max_running;
};

static server_t server;


static void fail(const char* what, int rc) {
  fprintf(stderr, "chat-rooms: %s: %s\n", what, uv_strerror(rc));
  exit(1);
}


static void* xmalloc(size_t n) {
  void* p = malloc(n);

  if (p == NULL)
    fail("malloc", UV_ENOMEM);
  return p;
}


static wbuf_t* wbuf_new(size_t len) {
  wbuf_t* b = xmalloc(sizeof(*b) + len);

  b->refs = 1;
  b->len = len;
  return b;
}


static void wbuf_unref(wbuf_t* b) {
  if (--b->refs == 0)
    free(b);
}


/* ---- connections ---------------------------------------------------------
 */

static void conn_parse(conn_t* c);
static void conn_close(conn_t* c);
static void conn_drop_kept(conn_t* c);
static void on_linger(uv_timer_t* t);
static void on_alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf);
static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
static void reload_start(server_t* s);


static void conn_unref(conn_t* c) {
  if (--c->refs != 0)
    return;
  c->server->live_conns--;
  free(c->rbuf);
  free(c);
}


static void on_handle_closed(uv_handle_t* h) {
  conn_unref(h->data);
}


static void on_shutdown(uv_shutdown_t* req, int status) {
  conn_t* c = req->data;

  free(req);
  if (status != 0)
    conn_close(c);
  conn_unref(c);
}


/* The ERR line is written: send FIN, then read and discard until the
 * client closes too (or the linger timer ends it). Closing at once with
 * unread input would make the kernel send RST, and a client could lose the
 * ERR line before it reads it. */
static void conn_linger(conn_t* c) {
  uv_shutdown_t* req;

  if (c->closing)
    return;
  req = xmalloc(sizeof(*req));
  req->data = c;
  if (uv_shutdown(req, (uv_stream_t*) &c->tcp, on_shutdown) != 0) {
    free(req);
    conn_close(c);
    return;
  }
  c->refs++;
  c->discard = 1;
  c->rlen = 0;
  if (!c->reading &&
      uv_read_start((uv_stream_t*) &c->tcp, on_alloc, on_read) == 0)
    c->reading = 1;
}


static void on_written(uv_write_t* req, int status) {
  write_req_t* w = (write_req_t*) req;

  if (w->close_after) {
    if (status == 0)
      conn_linger(w->conn);
    else
      conn_close(w->conn);
  }
  wbuf_unref(w->buf);
  free(w);
}


/* Queues b for c (loop thread); a member whose queue is over --max-outq is
 * dropped instead: it does not read, and the room must not wait for it. */
static void conn_write(conn_t* c, wbuf_t* b, int close_after) {
  server_t* s = c->server;
  write_req_t* w;
  uv_buf_t buf;
  int rc;

  if (c->closing)
    return;
  if (!close_after &&
      uv_stream_get_write_queue_size((uv_stream_t*) &c->tcp) + b->len >
          s->max_outq) {
    s->slow_dropped++;
    conn_close(c);
    return;
  }
  w = xmalloc(sizeof(*w));
  w->buf = b;
  w->conn = c;
  w->close_after = close_after;
  b->refs++;
  buf = uv_buf_init(b->data, (unsigned) b->len);
  rc = uv_write(&w->req, (uv_stream_t*) &c->tcp, &buf, 1, on_written);
  if (rc != 0) {
    wbuf_unref(b);
    free(w);
    conn_close(c);
  }
}


static void conn_say(conn_t* c, const char* line, int close_after) {
  wbuf_t* b;
  size_t n = strlen(line);

  b = wbuf_new(n);
  memcpy(b->data, line, n);
  conn_write(c, b, close_after);
  wbuf_unref(b);
}


/* Says why and closes once that is written; reads nothing more. */
static void conn_fail(conn_t* c, const char* why) {
  char line[80];

  if (c->failing || c->closing)
    return;
  c->failing = 1;
  c->server->errors++;
  conn_drop_kept(c);
  if (c->reading) {
    uv_read_stop((uv_stream_t*) &c->tcp);
    c->reading = 0;
  }
  /* A client that does not read can't hold the connection open. */
  uv_timer_start(&c->idle, on_linger, LINGER_MS, 0);
  snprintf(line, sizeof(line), "ERR %s\n", why);
  conn_say(c, line, 1);
}


static void room_leave(conn_t* c) {
  if (c->room == NULL)
    return;
  if (c->rprev != NULL)
    c->rprev->rnext = c->rnext;
  else
    c->room->members = c->rnext;
  if (c->rnext != NULL)
    c->rnext->rprev = c->rprev;
  c->room = NULL;
}


/* Its messages in flight still run and are broadcast: they were accepted.
 * The memory goes when both handles are closed and the last is done. */
static void conn_close(conn_t* c) {
  server_t* s = c->server;

  if (c->closing)
    return;
  c->closing = 1;
  conn_drop_kept(c);
  room_leave(c);
  if (c->prev != NULL)
    c->prev->next = c->next;
  else
    s->conns = c->next;
  if (c->next != NULL)
    c->next->prev = c->prev;
  if (c->counted)
    s->open--;
  uv_close((uv_handle_t*) &c->idle, on_handle_closed);
  uv_close((uv_handle_t*) &c->tcp, on_handle_closed);
}


static void on_idle(uv_timer_t* t) {
  conn_fail(t->data, "idle");
}


static void on_linger(uv_timer_t* t) {
  conn_close(t->data); /* the ERR line was not taken in time */
}


static void on_alloc(uv_handle_t* h, size_t suggested, uv_buf_t* buf) {
  conn_t* c = h->data;

  (void) suggested;
  /* The rest of one line: a longer one can't fit, so it is refused. */
  *buf = uv_buf_init(c->rbuf + c->rlen,
                     (unsigned) (c->server->max_line - c->rlen));
}


static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  conn_t* c = stream->data;

  (void) buf;
  if (nread < 0) {
    conn_close(c); /* EOF or an error: the client is gone */
    return;
  }
  if (nread == 0 || c->discard)
    return; /* rlen stays 0: the next read reuses the buffer */
  c->rlen += (size_t) nread;
  uv_timer_start(&c->idle, on_idle, c->server->idle_ms, 0);
  conn_parse(c);
}


/* Backpressure: reads or not. While the server holds a connection's
 * reading back, the client is not idle: its idle time starts again when
 * reading does. */
static void set_reading(conn_t* c, int on) {
  if (on == c->reading)
    return;
  if (on && uv_read_start((uv_stream_t*) &c->tcp, on_alloc, on_read) != 0) {
    conn_close(c);
    return;
  }
  if (on) {
    uv_timer_start(&c->idle, on_idle, c->server->idle_ms, 0);
  } else {
    uv_read_stop((uv_stream_t*) &c->tcp);
    uv_timer_stop(&c->idle);
    c->server->read_stops++;
  }
  c->reading = on;
}


/* The room refused m, the connection's next message (UV_EAGAIN: the room
 * has key_max_pending messages queued). Keep it and stop reading: the
 * lines read after it wait in the buffer, and the room's key_space_cb
 * schedules it. */
static void room_park(conn_t* c, msg_t* m) {
  room_t* r = m->room;

  c->kept = m;
  c->wnext = NULL;
  c->wprev = r->wait_tail;
  if (r->wait_tail != NULL)
    r->wait_tail->wnext = c;
  else
    r->waiting = c;
  r->wait_tail = c;
  c->server->room_stalls++;
  set_reading(c, 0);
}


/* Takes c off its room's waiting list; returns the message it kept. */
static msg_t* room_unpark(conn_t* c) {
  msg_t* m = c->kept;
  room_t* r;

  if (m == NULL)
    return NULL;
  r = m->room;
  if (c->wprev != NULL)
    c->wprev->wnext = c->wnext;
  else
    r->waiting = c->wnext;
  if (c->wnext != NULL)
    c->wnext->wprev = c->wprev;
  else
    r->wait_tail = c->wprev;
  c->kept = NULL;
  c->wnext = NULL;
  c->wprev = NULL;
  return m;
}


static void msg_free(msg_t* m) {
  m->from->server->live_msgs--;
  free(m);
}


/* A connection that fails or closes drops the message it kept: it was
 * never accepted, and no one will read the answer. */
static void conn_drop_kept(conn_t* c) {
  msg_t* m = room_unpark(c);

  if (m != NULL)
    msg_free(m);
}


/* ---- messages ------------------------------------------------------------
 */

static uint64_t fnv1a(uint64_t h, const char* p, size_t n) {
  while (n-- > 0) {
    h ^= (unsigned char) *p++;
    h *= FNV_PRIME;
  }
  return h;
}


/* Masks every word of cfg in text with '*'. */
static void config_filter(const config_t* cfg, char* text, size_t len) {
  unsigned k;
  size_t n;
  size_t i;

  for (k = 0; k < cfg->nwords; k++) {
    n = cfg->len[k];
    for (i = 0; i + n <= len; i++)
      if (memcmp(text + i, cfg->word[k], n) == 0) {
        memset(text + i, '*', n);
        i += n - 1;
      }
  }
}


static void spin_us(unsigned us) {
  uint64_t end = uv_hrtime() + (uint64_t) us * 1000;

  while (uv_hrtime() < end)
    ;
}


/* Hands m to the worker: UV_EAGAIN if its room is full. Once accepted, m
 * is in flight until msg_done(), and holds its sender's memory. */
static int msg_schedule(conn_t* c, msg_t* m) {
  server_t* s = c->server;
  int rc;

  rc = uvs_schedule(&s->worker, &m->task);
  if (rc != 0)
    return rc;
  s->messages++;
  c->inflight++;
  c->refs++;
  return 0;
}


/* A pool thread. The room's tasks never overlap and each happens-before
 * the next (same key), so seq and hash need no lock. The configuration
 * needs none either: only a barrier replaces it (reload_run). */
static void msg_run(uvs_task_t* task) {
  msg_t* m = (msg_t*) task;
  room_t* r = m->room;
  server_t* s = &server;
  const config_t* cfg = s->config;
  unsigned now;
  unsigned max;
  int n;

  if (atomic_exchange(&r->busy, 1) != 0)
    atomic_fetch_add(&s->overlaps, 1);
  now = atomic_fetch_add(&s->running, 1) + 1;
  max = atomic_load(&s->max_running);
  while (now > max && !atomic_compare_exchange_weak(&s->max_running, &max, now))
    ;
  if (s->work_us != 0)
    spin_us(s->work_us);
  config_filter(cfg, m->text, m->len);
  m->gen = cfg->gen;
  m->seq = ++r->seq;
  r->hash = fnv1a(r->hash, m->text, m->len);
  m->out = wbuf_new(m->len + MAX_NICK + 80);
  n = snprintf(m->out->data, m->out->len,
               "MSG %" PRIu64 " %" PRIu64 " %016" PRIx64 " %s %s\n", r->id,
               m->seq, r->hash, m->nick, m->text);
  m->out->len = (size_t) n;
  atomic_fetch_sub(&s->running, 1);
  atomic_store(&r->busy, 0);
}


/* The loop thread, in schedule order within a room. */
static void msg_done(uvs_task_t* task, int status) {
  msg_t* m = (msg_t*) task;
  server_t* s = m->from->server;
  room_t* r = m->room;
  conn_t* c = m->from;
  conn_t* member;
  conn_t* next;

  if (status == 0) {
    if (m->seq != r->delivered + 1)
      s->order_violations++;
    r->delivered = m->seq;
    /* Every message between two CONFIG lines ran with the same one. */
    if (m->gen != s->announced_gen)
      s->stale_config++;
    s->delivered++;
    for (member = r->members; member != NULL; member = next) {
      next = member->rnext; /* a slow member leaves the list */
      if (!member->failing) {
        conn_write(member, m->out, 0);
        s->lines_out++;
      }
    }
  } else {
    s->cancelled++;
  }
  if (m->out != NULL)
    wbuf_unref(m->out);
  free(m);
  s->live_msgs--;
  c->inflight--;
  if (!c->closing && !c->failing && !c->reading)
    conn_parse(c); /* room again: lines waiting in the buffer, then read */
  conn_unref(c);
}


static void send_msg(conn_t* c, const char* text, size_t len) {
  server_t* s = c->server;
  msg_t* m;
  int rc;

  m = xmalloc(sizeof(*m) + len + 1);
  memset(m, 0, sizeof(*m));
  uvs_task_init(&m->task, msg_run, msg_done);
  /* Room ids start at 1: key 0 would mean "no key". */
  uvs_task_set_key(&m->task, c->room->id);
  m->from = c;
  m->room = c->room;
  memcpy(m->nick, c->nick, sizeof(m->nick));
  m->len = len;
  memcpy(m->text, text, len);
  m->text[len] = '\0';
  s->live_msgs++;
  rc = msg_schedule(c, m);
  if (rc == UV_EAGAIN) {
    room_park(c, m); /* the room is full: on_room_space() goes on */
    return;
  }
  if (rc != 0) {
    msg_free(m);
    conn_fail(c, "shutting down");
  }
}


static int valid_nick(const char* p, size_t n) {
  size_t i;

  if (n == 0 || n > MAX_NICK)
    return 0;
  for (i = 0; i < n; i++) {
    char ch = p[i];
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
          (ch >= '0' && ch <= '9') || ch == '_' || ch == '-'))
      return 0;
  }
  return 1;
}


/* key_space_cb, on the loop thread: room `key` was found full and its
 * queue has fallen to half. Its waiting senders schedule the messages they
 * kept, in the order they stopped, and only then read on, so that each of
 * them gets one in before any floods the room again. One that finds the
 * room full again waits for the next call (the refusal owes another). */
static void on_room_space(uvs_worker_t* worker, uint64_t key) {
  server_t* s = worker->data;
  room_t* r = &s->rooms[key - 1];
  conn_t* waiting = r->waiting;
  conn_t* resumed = NULL;
  conn_t** tail = &resumed;
  conn_t* c;
  msg_t* m;
  int rc;

  s->room_wakes++;
  r->waiting = NULL;
  r->wait_tail = NULL;
  for (c = waiting; c != NULL; c = waiting) {
    waiting = c->wnext;
    m = c->kept;
    c->kept = NULL;
    c->wnext = NULL;
    c->wprev = NULL;
    rc = msg_schedule(c, m);
    if (rc == UV_EAGAIN) {
      room_park(c, m);
    } else if (rc != 0) {
      msg_free(m);
      conn_fail(c, "shutting down");
    } else {
      *tail = c;
      tail = &c->wnext;
    }
  }
  for (c = resumed; c != NULL; c = resumed) {
    resumed = c->wnext;
    c->wnext = NULL;
    conn_parse(c); /* the lines behind the kept one, then reads */
  }
}


/* ---- configuration reloads -----------------------------------------------
 */

/* Reads path (one word a line; blank lines and '#' lines skipped) into a
 * new configuration of generation gen, or NULL. The loop thread: a file of
 * a few words, read in one go. */
static config_t* config_load(const char* path, uint64_t gen) {
  config_t* cfg;
  char line[256];
  size_t n;
  FILE* f;
  int ok = 1;

  f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "chat-rooms: %s: cannot open\n", path);
    return NULL;
  }
  cfg = xmalloc(sizeof(*cfg));
  memset(cfg, 0, sizeof(*cfg));
  cfg->gen = gen;
  while (ok && fgets(line, sizeof(line), f) != NULL) {
    n = strcspn(line, "\r\n");
    if (line[n] == '\0' && !feof(f))
      ok = 0; /* longer than the buffer */
    line[n] = '\0';
    if (n == 0 || line[0] == '#')
      continue;
    if (n > MAX_WORD || cfg->nwords == MAX_WORDS || strchr(line, ' ') != NULL)
      ok = 0;
    else {
      memcpy(cfg->word[cfg->nwords], line, n + 1);
      cfg->len[cfg->nwords++] = n;
    }
  }
  if (ferror(f))
    ok = 0;
  fclose(f);
  if (!ok) {
    fprintf(stderr,
            "chat-rooms: %s: expected at most %d words of at most %d "
            "bytes, one a line\n",
            path, MAX_WORDS, MAX_WORD);
    free(cfg);
    return NULL;
  }
  return cfg;
}


/* [reload-barrier] */
typedef struct reload_s {
  uvs_task_t task; /* first: a uvs_task_t* is a reload_t* */
  config_t* cfg;   /* the new configuration, until run_cb puts it in */
  uint64_t gen;
} reload_t;


/* A pool thread, alone: every message accepted before this barrier has
 * returned from msg_run, and none accepted after it has started, so no
 * task holds s->config. Swap it, and free the old one. */
static void reload_run(uvs_task_t* task) {
  reload_t* rl = (reload_t*) task;
  server_t* s = &server;
  config_t* old = s->config;

  if (atomic_load(&s->running) != 0)
    atomic_fetch_add(&s->barrier_overlaps, 1); /* never: it runs alone */
  s->config = rl->cfg;
  rl->cfg = NULL;
  free(old);
}


/* The loop thread, after the done_cb of every message that ran with the
 * old configuration and before that of any that runs with the new one:
 * the CONFIG line falls exactly between them at every member. */
static void reload_done(uvs_task_t* task, int status) {
  reload_t* rl = (reload_t*) task;
  server_t* s = &server;
  char line[64];
  conn_t* c;
  conn_t* next;

  if (status == 0) {
    s->reloads++;
    s->announced_gen = rl->gen;
    snprintf(line, sizeof(line), "CONFIG %" PRIu64 "\n", rl->gen);
    for (c = s->conns; c != NULL; c = next) {
      next = c->next; /* a slow member leaves the list */
      if (c->room != NULL && !c->failing)
        conn_say(c, line, 0);
    }
  } else {
    free(rl->cfg); /* cancelled by the close: never put in force */
  }
  free(rl);
  s->reloading = 0;
  if (s->reload_again && !s->stopping) {
    s->reload_again = 0;
    reload_start(s);
  }
}
/* [reload-barrier-end] */


/* [reload-schedule] */
/* SIGHUP: read the file now, put it in force with a barrier. One barrier
 * at a time; a SIGHUP meanwhile reads the file again once it is done. */
static void reload_start(server_t* s) {
  reload_t* rl;
  config_t* cfg;
  int rc;

  if (s->reloading) {
    s->reload_again = 1;
    return;
  }
  cfg = config_load(s->config_path, s->next_gen);
  if (cfg == NULL) {
    s->reload_fails++; /* the old configuration stays */
    return;
  }
  rl = xmalloc(sizeof(*rl));
  uvs_task_init(&rl->task, reload_run, reload_done);
  rl->cfg = cfg;
  rl->gen = cfg->gen;
  rc = uvs_schedule_barrier(&s->worker, &rl->task);
  if (rc != 0) {
    fprintf(stderr, "chat-rooms: reload: %s\n", uv_strerror(rc));
    s->reload_fails++;
    free(cfg);
    free(rl);
    return;
  }
  s->next_gen++;
  s->reloading = 1;
}
/* [reload-schedule-end] */


static void on_sighup(uv_signal_t* handle, int signum) {
  (void) signum;
  reload_start(handle->data);
}


static void handle_join(conn_t* c, char* line) {
  server_t* s = c->server;
  char* end;
  unsigned long id;
  char* nick;
  char ok[64];

  id = strtoul(line + 5, &end, 10);
  if (end == line + 5 || *end != ' ' || id < 1 || id > s->nrooms) {
    conn_fail(c, "expected JOIN <room> <nick>");
    return;
  }
  nick = end + 1;
  if (!valid_nick(nick, strlen(nick))) {
    conn_fail(c, "expected JOIN <room> <nick>");
    return;
  }
  strcpy(c->nick, nick);
  c->room = &s->rooms[id - 1];
  c->rprev = NULL;
  c->rnext = c->room->members;
  if (c->rnext != NULL)
    c->rnext->rprev = c;
  c->room->members = c;
  snprintf(ok, sizeof(ok), "JOINED %lu\n", id);
  conn_say(c, ok, 0);
}


static void handle_line(conn_t* c, char* line, size_t len) {
  if (len > 0 && line[len - 1] == '\r')
    line[--len] = '\0';
  if (c->room == NULL) {
    if (strncmp(line, "JOIN ", 5) == 0)
      handle_join(c, line);
    else
      conn_fail(c, "expected JOIN <room> <nick>");
    return;
  }
  if (strcmp(line, "PING") == 0) {
    conn_say(c, "PONG\n", 0);
    return;
  }
  send_msg(c, line, len);
}


/* Takes whole lines out of the read buffer while the connection may have
 * more messages in flight and its room took the last one; reads only while
 * both hold. */
static void conn_parse(conn_t* c) {
  server_t* s = c->server;
  size_t pos = 0;
  char* nl;

  while (!c->closing && !c->failing && c->kept == NULL &&
         c->inflight < s->max_inflight) {
    nl = memchr(c->rbuf + pos, '\n', c->rlen - pos);
    if (nl == NULL)
      break;
    *nl = '\0';
    handle_line(c, c->rbuf + pos, (size_t) (nl - (c->rbuf + pos)));
    pos = (size_t) (nl - c->rbuf) + 1;
  }
  if (c->closing || c->failing)
    return;
  memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
  c->rlen -= pos;
  if (c->kept != NULL || c->inflight >= s->max_inflight) {
    set_reading(c, 0);
    return;
  }
  if (c->rlen == s->max_line) { /* no newline in a whole line's worth */
    conn_fail(c, "line too long");
    return;
  }
  set_reading(c, 1);
}


static void on_connection(uv_stream_t* listener, int status) {
  server_t* s = listener->data;
  conn_t* c;

  if (status < 0) {
    fprintf(stderr, "chat-rooms: accept: %s\n", uv_strerror(status));
    return;
  }
  c = xmalloc(sizeof(*c));
  memset(c, 0, sizeof(*c));
  c->server = s;
  c->rbuf = xmalloc(s->max_line);
  c->tcp.data = c;
  c->idle.data = c;
  if (uv_tcp_init(&s->loop, &c->tcp) != 0 ||
      uv_timer_init(&s->loop, &c->idle) != 0)
    fail("uv_tcp_init", UV_ENOMEM);
  c->refs = 2;
  s->live_conns++;
  c->next = s->conns;
  if (s->conns != NULL)
    s->conns->prev = c;
  s->conns = c;
  if (uv_accept(listener, (uv_stream_t*) &c->tcp) != 0) {
    conn_close(c);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  if (s->sndbuf != 0)
    uv_send_buffer_size((uv_handle_t*) &c->tcp, &s->sndbuf);
  if (s->open >= s->max_conns) {
    /* Accepted so that the client hears why, then closed: the backlog
     * never fills and accept() never spins on EMFILE for long. */
    s->refused++;
    conn_fail(c, "full");
    return;
  }
  c->counted = 1;
  s->open++;
  s->accepted++;
  set_reading(c, 1); /* and the idle timer */
}


/* ---- the server ----------------------------------------------------------
 */

static void print_hist(const char* name, const uvs_hist_t* h) {
  unsigned k;

  fprintf(stderr, "chat-rooms: %s count=%" PRIu64 " mean_us=%.1f max_us=%.1f",
          name, h->count,
          h->count != 0 ? (double) h->sum_ns / (double) h->count / 1e3 : 0.0,
          (double) h->max_ns / 1e3);
  for (k = 0; k < 24; k++)
    if (h->bucket[k] != 0)
      fprintf(stderr, " <%uus:%" PRIu64, 1u << k, h->bucket[k]);
  fprintf(stderr, "\n");
}


static void server_stop(server_t* s) {
  uvs_worker_metrics_t m;
  int rc;

  if (s->stopping)
    return;
  s->stopping = 1;
  if (uvs_worker_metrics(&s->worker, &m) == 0) {
    fprintf(stderr,
            "chat-rooms: worker scheduled=%" PRIu64 " ran=%" PRIu64
            " cancelled=%" PRIu64 " rejected=%" PRIu64 " queued_max=%" PRIu64
            "\n",
            m.scheduled, m.ran, m.cancelled, m.rejected, m.queued_max);
    print_hist("wait", &m.wait);
    print_hist("run", &m.run);
  }
  uv_close((uv_handle_t*) &s->listener, NULL);
  uv_close((uv_handle_t*) &s->sigint, NULL);
  uv_close((uv_handle_t*) &s->sigterm, NULL);
  if (s->config_path != NULL)
    uv_close((uv_handle_t*) &s->sighup, NULL);
  while (s->conns != NULL) conn_close(s->conns);
  /* Messages not yet run, and a reload not yet run, are handed back with
   * UV_ECANCELED. */
  rc = uvs_sched_close(&s->sched, UVS_CANCEL, NULL);
  if (rc != 0)
    fail("uvs_sched_close", rc);
}


static void on_signal(uv_signal_t* handle, int signum) {
  (void) signum;
  server_stop(handle->data);
}


static void usage(FILE* f) {
  fprintf(
      f,
      "usage: chat-rooms [--host ADDR] [--port N] [--rooms N]\n"
      "                  [--max-conns N] [--max-line BYTES] [--idle-ms MS]\n"
      "                  [--max-inflight N] [--room-queue N]\n"
      "                  [--max-outq BYTES] [--sndbuf BYTES] [--work-us US]\n"
      "                  [--config FILE]\n"
      "  --max-inflight N  messages of one connection in flight before it "
      "stops\n"
      "                    reading (default 32)\n"
      "  --room-queue N    messages of one room queued and not started; a "
      "sender\n"
      "                    that meets a full room stops reading until it "
      "falls\n"
      "                    to N/2, other rooms go on (default 64)\n"
      "  --config FILE     words to mask with '*' in messages, one a line;\n"
      "                    SIGHUP reads it again\n");
}


static unsigned long num_arg(const char* what,
                             const char* v,
                             unsigned long lo,
                             unsigned long hi) {
  char* end;
  unsigned long n = strtoul(v, &end, 10);

  if (*v == '\0' || *end != '\0' || n < lo || n > hi) {
    fprintf(stderr, "chat-rooms: bad %s: %s\n", what, v);
    exit(2);
  }
  return n;
}


int main(int argc, char** argv) {
  server_t* s = &server;
  uvs_worker_options_t wo;
  struct sockaddr_storage addr;
  int addr_len = sizeof(addr);
  const char* host = "127.0.0.1";
  unsigned long port = 0;
  char bound[64];
  unsigned i;
  int ok;
  int rc;

  s->nrooms = 64;
  s->max_conns = 256;
  s->max_line = 1024;
  s->idle_ms = 60000;
  s->max_inflight = 32;
  s->room_queue = 64;
  s->max_outq = 1 << 20;
  for (i = 1; i < (unsigned) argc; i++) {
    const char* v = i + 1 < (unsigned) argc ? argv[i + 1] : NULL;
    if (v == NULL) {
      usage(stderr);
      return 2;
    }
    if (strcmp(argv[i], "--host") == 0)
      host = v;
    else if (strcmp(argv[i], "--port") == 0)
      port = num_arg("port", v, 0, 65535);
    else if (strcmp(argv[i], "--rooms") == 0)
      s->nrooms = (unsigned) num_arg("rooms", v, 1, 1u << 20);
    else if (strcmp(argv[i], "--max-conns") == 0)
      s->max_conns = (unsigned) num_arg("max-conns", v, 1, 100000);
    else if (strcmp(argv[i], "--max-line") == 0)
      s->max_line = num_arg("max-line", v, 16, 1 << 20);
    else if (strcmp(argv[i], "--idle-ms") == 0)
      s->idle_ms = num_arg("idle-ms", v, 1, 86400000);
    else if (strcmp(argv[i], "--max-inflight") == 0)
      s->max_inflight = (unsigned) num_arg("max-inflight", v, 1, 100000);
    else if (strcmp(argv[i], "--room-queue") == 0)
      s->room_queue = num_arg("room-queue", v, 1, 1000000);
    else if (strcmp(argv[i], "--max-outq") == 0)
      s->max_outq = num_arg("max-outq", v, 1024, 1ul << 30);
    else if (strcmp(argv[i], "--sndbuf") == 0)
      s->sndbuf = (int) num_arg("sndbuf", v, 0, 1 << 26);
    else if (strcmp(argv[i], "--work-us") == 0)
      s->work_us = (unsigned) num_arg("work-us", v, 0, 1000000);
    else if (strcmp(argv[i], "--config") == 0)
      s->config_path = v;
    else {
      usage(stderr);
      return 2;
    }
    i++;
  }
  signal(SIGPIPE, SIG_IGN);
  atomic_init(&s->overlaps, 0);
  atomic_init(&s->running, 0);
  atomic_init(&s->max_running, 0);
  atomic_init(&s->barrier_overlaps, 0);
  if (s->config_path != NULL) {
    s->config = config_load(s->config_path, 1);
    if (s->config == NULL)
      return 2;
  } else {
    s->config = xmalloc(sizeof(*s->config));
    memset(s->config, 0, sizeof(*s->config));
    s->config->gen = 1; /* no words */
  }
  s->announced_gen = 1;
  s->next_gen = 2;

  s->rooms = calloc(s->nrooms, sizeof(*s->rooms));
  if (s->rooms == NULL)
    fail("calloc", UV_ENOMEM);
  for (i = 0; i < s->nrooms; i++) {
    s->rooms[i].id = i + 1;
    s->rooms[i].hash = FNV_OFFSET;
    atomic_init(&s->rooms[i].busy, 0);
  }

  rc = uv_loop_init(&s->loop);
  if (rc != 0)
    fail("uv_loop_init", rc);
  rc = uvs_sched_init(&s->loop, &s->sched, NULL);
  if (rc != 0)
    fail("uvs_sched_init", rc);
  memset(&wo, 0, sizeof(wo));
  wo.width = WIDTH;
  /* And one reload barrier: a UV_EAGAIN is still only a full room. */
  wo.max_pending = (size_t) s->max_conns * s->max_inflight + 1;
  wo.on_full = UVS_FULL_REJECT;
  wo.metrics = 1;
  /* Backpressure per room: a full room refuses, alone (UV_EAGAIN). */
  wo.key_max_pending = s->room_queue;
  wo.key_space_cb = on_room_space;
  rc = uvs_worker_init_ex(&s->sched, &s->worker, UVS_POOL, &wo);
  if (rc != 0)
    fail("uvs_worker_init_ex", rc);
  s->worker.data = s;

  rc = uv_ip4_addr(host, (int) port, (struct sockaddr_in*) &addr);
  if (rc != 0)
    fail(host, rc);
  s->listener.data = s;
  rc = uv_tcp_init(&s->loop, &s->listener);
  if (rc == 0)
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr*) &addr, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t*) &s->listener, 511, on_connection);
  if (rc == 0)
    rc = uv_tcp_getsockname(&s->listener, (struct sockaddr*) &addr, &addr_len);
  if (rc != 0)
    fail("listen", rc);
  s->sigint.data = s;
  s->sigterm.data = s;
  rc = uv_signal_init(&s->loop, &s->sigint);
  if (rc == 0)
    rc = uv_signal_start(&s->sigint, on_signal, SIGINT);
  if (rc == 0)
    rc = uv_signal_init(&s->loop, &s->sigterm);
  if (rc == 0)
    rc = uv_signal_start(&s->sigterm, on_signal, SIGTERM);
  if (rc == 0 && s->config_path != NULL) {
    s->sighup.data = s;
    rc = uv_signal_init(&s->loop, &s->sighup);
    if (rc == 0)
      rc = uv_signal_start(&s->sighup, on_sighup, SIGHUP);
  }
  if (rc != 0)
    fail("uv_signal_start", rc);

  uv_ip4_name((struct sockaddr_in*) &addr, bound, sizeof(bound));
  printf("chat-rooms: listening on %s:%d rooms=%u width=%d\n", bound,
         ntohs(((struct sockaddr_in*) &addr)->sin_port), s->nrooms, WIDTH);
  fflush(stdout);

  uv_run(&s->loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(&s->loop);
  ok = rc == 0 && atomic_load(&s->overlaps) == 0 && s->order_violations == 0 &&
       atomic_load(&s->barrier_overlaps) == 0 && s->stale_config == 0 &&
       s->live_conns == 0 && s->live_msgs == 0;
  fprintf(stderr,
          "chat-rooms: accepted=%" PRIu64 " refused=%" PRIu64
          " messages=%" PRIu64 " delivered=%" PRIu64 " lines_out=%" PRIu64
          " cancelled=%" PRIu64 " errors=%" PRIu64 " slow_dropped=%" PRIu64
          " read_stops=%" PRIu64 " room_stalls=%" PRIu64 " room_wakes=%" PRIu64
          " max_parallel=%u\n"
          "chat-rooms: reloads=%" PRIu64 " reload_fails=%" PRIu64
          " config_gen=%" PRIu64 " barrier_overlaps=%" PRIu64
          " stale_config=%" PRIu64
          "\n"
          "chat-rooms: overlaps=%" PRIu64 " order_violations=%" PRIu64
          " live_conns=%" PRIu64 " live_msgs=%" PRIu64 " loop_close=%s: %s\n",
          s->accepted, s->refused, s->messages, s->delivered, s->lines_out,
          s->cancelled, s->errors, s->slow_dropped, s->read_stops,
          s->room_stalls, s->room_wakes, atomic_load(&s->max_running),
          s->reloads, s->reload_fails, s->config->gen,
          (uint64_t) atomic_load(&s->barrier_overlaps), s->stale_config,
          (uint64_t) atomic_load(&s->overlaps), s->order_violations,
          s->live_conns, s->live_msgs, rc == 0 ? "ok" : uv_err_name(rc),
          ok ? "ok" : "FAILED");
  free(s->config);
  free(s->rooms);
  return ok ? 0 : 1;
}
