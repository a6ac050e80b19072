/* http-pipeline: an HTTP/1.1 server on libuv where each connection owns a
 * uvsched worker, hardened against hostile clients.
 *
 *   http-pipeline [--host ADDR] [--port N] [--mode pool|loop|inline]
 *                 [--threads T] [limits, see --help]
 *
 * GET /work?n=ROUNDS&id=TOKEN  hashes: d = SHA-256(TOKEN), then ROUNDS times
 *                              d = SHA-256(d); answers 200 with the body
 *                              "id=TOKEN n=ROUNDS sha256=HEX\n". The task
 *                              hashes in chunks and cooperates between
 *                              them: it gives its thread up when another
 *                              worker waits, keeping its place, and stops
 *                              when its connection closes (work_hash()).
 * GET /health                  answers 200 "ok\n" without any work.
 * GET /stats                   answers 200 with the server's counters (JSON).
 * HEAD of any of them          GET's answer, Content-Length included,
 *                              without the body.
 * Anything else: 404 for an unknown path, 405 for a method other than GET
 * and HEAD, 400 for a bad query (or n over --max-rounds), 400 for a request
 * that does not parse (a malformed chunked body included: conn_chunk()) or
 * an HTTP/1.1 request without Host, 414, 431 and 413 for a request target,
 * header block or body over its limit, 417 for an expectation other than
 * 100-continue, 505 for an HTTP version other than 1.0 and 1.1. After an
 * error that is not about the query, the path or the method the server
 * closes the connection.
 *
 * Each connection owns two workers: UVS_POOL in --mode pool, so that /work
 * runs on libuv's thread pool; UVS_LOOP in --mode loop, the baseline, where
 * the same work runs on the loop thread. --mode inline does the work right in
 * the parser callback, without uvsched, to show what the loop worker costs.
 * One worker is in the scheduler's "interactive" group, the other in its
 * "bulk" group, which may use every pool thread but one: a heavy /work (n at
 * least --heavy-rounds) runs in bulk, so that however many connections flood
 * heavy work, light requests keep a thread (conn_route()), and so does the
 * work of a connection past its light budget (--light-ms, measured run
 * time: conn_light_credit()), so that a flood just under --heavy-rounds
 * cannot take that thread either.
 *
 * Pipelining: a client may send many requests without waiting. They are
 * parsed on the loop thread in order. While the connection's workers hold
 * none of its tasks, an answer that needs no work (/health, an error) is
 * written at once; otherwise each request becomes a task on the worker that
 * holds them (a task that does nothing when the answer needs no work); only
 * one of the two does at a time. The worker runs them in order and uvsched
 * calls their done_cb in the order they ran (SPEC guarantee 3), so done_cb
 * appends each answer to the connection's output and answers leave in
 * request order without a reorder list. The done_cbs of one loop turn go
 * out together, with one uv_write.
 *
 * Limits (every one is an option; see usage()): a connection stops reading
 * while its worker is full (--max-inflight) or while its answers pass
 * --max-out-bytes (counted from the parse of their request, each by the
 * most it can take; parsing pauses at the request that passes it), and
 * starts again when they drain, and its workers are suspended, computing
 * no answer, while its backlog (the answers its client has not taken,
 * held by the server or libuv or unsent by the kernel) passes half of
 * --max-out-bytes (conn_output_pressure()); a request must arrive whole within
 * --header-timeout of its first byte, a kept-alive connection may idle for
 * --idle-timeout, and a client that owes acknowledgements for answer bytes
 * must take --min-send-rate bytes a second of them over each
 * --write-timeout; beyond --max-conns a connection gets a 503 and is
 * closed, beyond --max-conn-per-addr of one client address it is closed at
 * once; n is at most --max-rounds. With --max-wait, a task that
 * waited longer than that on its worker is shed (max_wait_ms): uvsched
 * hands it back with UV_ETIMEDOUT in its place among the runs, and its
 * /work is answered 503 with Retry-After there, in request order, without
 * closing the connection; the server serves fresh work instead of work its
 * client has likely given up on.
 *
 * Closing: on a read error (a reset: the client is gone), a timeout, a write
 * error or the server's stop, the connection interrupts the task it has
 * running (uvs_task_interrupt), which stops at its next check, and closes
 * its workers with UVS_CANCEL, so its queued work, a /work waiting for its
 * next turn after a yield included, is handed back with UV_ECANCELED and
 * never runs (again). Nothing of it is written. An EOF is a half-close: the
 * client may still read, so what was received is still computed and
 * answered, then the server closes. The connection's memory is freed
 * only after the worker's close callback and the TCP handle's close callback
 * have both run.
 *
 * The server checks uvsched as it goes (per connection: tasks run in schedule
 * order, never two at once, on the right thread, and complete in order; the
 * answers leave in request order) and, on SIGINT or SIGTERM, closes
 * everything, prints its counters to stderr and exits 0 only if every check
 * held, nothing leaked and uv_loop_close() succeeded.
 */

#include <uvsched.h>

#include <http_parser.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif
#ifdef __linux__
#include <linux/sockios.h> /* SIOCOUTQ, SIOCOUTQNSD */
#endif

#define READ_BUF_SIZE 65536
#define MAX_ID 64 /* the id= token */
#define NO_DEADLINE UINT64_MAX
#define BODY_MAX 4096     /* The largest answer body (/stats). */
#define HEAD_BOUND 256    /* More than any answer's status line and headers. */
#define MAX_CHUNK_EXT 256 /* Bytes of one chunk's extensions. */
#define MAX_TRAILERS 16   /* Trailer fields of a chunked body. */
/* conn_measure(): how soon the server looks at the kernel's queue again,
 * and how seldom at most, while nothing else would tell it (ms). */
#define POLL_MIN_MS 5
#define POLL_MAX_MS 200
/* The /work whose run time measures what a round takes: long enough that
 * the rounds, not the task around them, are what is timed. */
#define COST_ROUNDS 1000
/* Rounds of /work between two uvs_task_check() calls (work_hash()): about
 * 30 us here, so that a turn overruns its slice by that at most, and one
 * clock read in 256 digests costs nothing measurable. */
#define WORK_CHUNK 256
/* The most conn_pending() can reach: --max-out-bytes, and the request
 * that takes the connection over it (dispatch()) with its answer. */
#define OUT_BOUND(s) \
  ((s)->lim.max_out_bytes + HEAD_BOUND + BODY_MAX + sizeof(request_t))

typedef enum { MODE_POOL, MODE_LOOP, MODE_INLINE } run_mode_t;

typedef enum { HDR_NONE, HDR_CLOSE, HDR_KEEP_ALIVE } conn_header_t;

/* The scheduler's groups, and a connection's workers, one in each: light
 * requests run in the first, heavy ones (--heavy-rounds) in the second,
 * which leaves one pool thread to the first (conn_route()). */
typedef enum { GROUP_INTERACTIVE, GROUP_BULK, GROUP_COUNT } group_t;

/* What a request's answer is made of. */
typedef enum {
  ANS_WORK,     /* The digest, computed by the task. */
  ANS_STATUS,   /* A fixed status and body. */
  ANS_STATS,    /* /stats, formatted when the answer is due. */
  ANS_CONTINUE, /* The interim "100 Continue" of the request being read. */
  ANS_BAD_ROUNDS
} answer_kind_t;

typedef enum { HEADER_OTHER, HEADER_HOST, HEADER_EXPECT } header_name_t;

/* Where the server's own reader of a chunked body is (conn_chunk()). */
typedef enum {
  CHUNK_NONE, /* Not in a chunked body: the parser reads. */
  CHUNK_SIZE_START,
  CHUNK_SIZE,
  CHUNK_EXT_BWS, /* Blanks after the size: a ';' must follow. */
  CHUNK_EXT,
  CHUNK_SIZE_LF,
  CHUNK_DATA,
  CHUNK_DATA_CR,
  CHUNK_DATA_LF,
  CHUNK_TRAILER_START,
  CHUNK_TRAILER_NAME,
  CHUNK_TRAILER_VALUE,
  CHUNK_TRAILER_LF,
  CHUNK_END_LF,
  CHUNK_DONE /* Whole: the parser ends the message. */
} chunk_state_t;

typedef enum {
  DEADLINE_NONE,
  DEADLINE_HEADER,
  DEADLINE_IDLE,
  DEADLINE_WRITE,
  DEADLINE_LINGER,
  DEADLINE_POLL /* Not a timeout: look at the kernel's queue again. */
} deadline_kind_t;

typedef struct server_s server_t;
typedef struct conn_s conn_t;
typedef struct request_s request_t;

typedef struct limits_s {
  uint64_t max_conns;      /* Connections served at once. */
  uint64_t max_rejecting;  /* Connections being answered 503 at once. */
  uint64_t max_inflight;   /* Requests queued on one connection's worker. */
  uint64_t max_out_bytes;  /* Unwritten answer bytes of one connection. */
  uint64_t sndbuf;         /* SO_SNDBUF of a connection; 0 = the kernel's. */
  uint64_t header_timeout; /* ms, from a request's first byte to its end. */
  uint64_t idle_timeout;   /* ms, a kept-alive connection with nothing owed. */
  uint64_t write_timeout;  /* ms, a write that makes no progress. */
  uint64_t linger;         /* ms, waiting for EOF after our half-close. */
  uint64_t max_rounds;     /* n= of /work. */
  uint64_t max_wait;       /* ms a task may wait on its worker; 0 = off. */
  uint64_t max_url;        /* Bytes of a request target. */
  uint64_t max_head;       /* Bytes of a request target plus header fields. */
  uint64_t max_body;       /* Bytes of a body (read and ignored). */
  uint64_t max_per_addr;   /* Connections of one client address; 0 = off. */
  uint64_t min_send_rate;  /* Bytes/s a connection owing answers must take. */
  uint64_t concurrency;    /* uvs_sched_options_t.max_concurrency. */
  uint64_t budget;         /* uvs_sched_options_t.budget. */
  uint64_t heavy_rounds;   /* /work with n >= this is heavy; 0 = none is. */
  uint64_t light_ms;       /* Light work a connection may run a second. */
} limits_t;

struct request_s {
  uvs_task_t task; /* First member: a uvs_task_t* is also a request_t*. */
  conn_t* conn;
  uint64_t seq;  /* The connection's requests: 0, 1, 2, ... */
  uint64_t tseq; /* The connection's tasks: 0, 1, 2, ... */
  answer_kind_t kind;
  int status;
  int head;            /* A HEAD request: the answer's headers, not its body. */
  unsigned char heavy; /* Its work belongs in GROUP_BULK (request_heavy()). */
  unsigned char demoted; /* Light by its n, heavy by its connection's budget */
  unsigned char group;   /* The group_t of the worker it was scheduled on. */
  unsigned char hashing; /* Its hashing has begun (work_hash()). */
  size_t reserve;        /* Bytes held against --max-out-bytes until freed. */
  uint64_t cost_ns;      /* What its run should take (request_cost()) ... */
  uint64_t charge_ns;    /* ... and took from the light budget, if it did. */
  uint64_t run_ns;       /* What its runs took (work_run()). */
  /* Loop thread only: the connection's next task in flight (conn_t's
   * first_inflight). */
  request_t* next_inflight;
  /* How far its hashing has got (work_hash()), kept across the runs of a
   * task that yields: the digest so far, in digest below, and the rounds
   * made since the token's own digest (made when hashing became 1). */
  uint64_t done_rounds;
  const char* body;
  conn_header_t conn_header;
  uint64_t rounds;
  size_t id_len;
  char id[MAX_ID + 1];
  unsigned char digest[SHA256_DIGEST_LENGTH];
};

/* The connections of one client address (--max-conn-per-addr). */
typedef struct addr_count_s addr_count_t;
struct addr_count_s {
  addr_count_t* next; /* In its bucket of server_t.addrs. */
  unsigned count;
  unsigned char key[17]; /* The family, then an IPv4 address or a /64. */
};

typedef struct out_write_s {
  uv_write_t req;
  conn_t* conn;
  char* base;
  size_t len; /* Bytes of base: all held until the write is called back. */
  unsigned answers;
} out_write_t;

struct conn_s {
  uv_tcp_t tcp;
  /* One in each group, not used in --mode inline, nor when rejecting. At
   * most one of them holds tasks of the connection at a time: the active
   * one (conn_route()). */
  uvs_worker_t workers[GROUP_COUNT];
  uvs_task_t timer; /* On the server's loop worker: the next deadline. */
  uv_shutdown_t shutdown;
  http_parser parser;
  server_t* server;
  conn_t* prev;
  conn_t* next;
  conn_t* flush_next; /* The server's connections with answers to write. */
  addr_count_t* addr; /* Its client address's count; NULL if none kept. */

  /* Loop thread only. */
  unsigned refs; /* The TCP handle, the worker, the timer, the flush list. */
  unsigned live; /* request_t alive, for the leak check. */
  unsigned inflight; /* Tasks on the worker, not yet handed back. */
  group_t active;    /* The worker that holds them, while inflight. */
  /* Those tasks, oldest first (request_t.next_inflight), until the close,
   * which interrupts the oldest the library still holds (conn_close()). */
  request_t* first_inflight;
  request_t* last_inflight;
  unsigned owed;      /* Requests parsed whose final answer is not out yet. */
  unsigned writes;    /* uv_write requests not yet called back. */
  size_t write_bytes; /* ... and the bytes of their buffers. */
  request_t* stalled; /* Parsed, refused by the full worker, or heavy behind
                         light tasks (conn_route()): next to go. */
  request_t* held;    /* Fault injection only (HTTP_PIPELINE_FAULT). */
  int has_worker;
  int out_suspended;     /* Both workers suspended for unwritten answers: each
                            owes one uvs_worker_resume, or the close. */
  unsigned late_answers; /* Answers that came while suspended ... */
  size_t late_bytes;     /* ... and their bytes: computed past the mark. */
  int rejecting;         /* Over --max-conns: a 503, then close. */
  int reading;
  int write_blocked;
  int flush_queued;
  int closing;
  int done_parsing; /* After an error, a last request or EOF: parse no more. */
  int peer_eof;
  int lingering;
  int fresh;      /* No request started yet. */
  int in_request; /* Between a request's first byte and its end. */
  int head_req;   /* The request being read is a HEAD. */
  int timer_armed;
  int error_status;       /* Set by a parser callback that stops the parse. */
  uint64_t timer_due;     /* the deadline the timer task is armed for */
  uint64_t request_start; /* uv_now() of the request's first byte. */
  uint64_t last_active;   /* uv_now() of the last request end or write. */
  uint64_t queued_bytes;  /* Bytes ever handed to uv_write. */
  int write_episode;      /* The client owes us acks: the write deadline. */
  uint64_t window_start;  /* uv_now() when the current write window began */
  uint64_t window_acked;  /* ... conn->acked then ... */
  uint64_t window_target; /* ... and queued_bytes then. */
  /* What the client has not taken (conn_measure()): bytes it has
   * acknowledged, and bytes not sent yet (libuv's queue and the kernel's
   * unsent ones), as last measured, the latter plus what was handed to
   * libuv since. */
  uint64_t acked;
  uint64_t unsent;
  uint64_t poll_due; /* When to measure again while nothing else will. */
  uint64_t poll_ms;  /* ... and the interval, doubled while nothing moves. */
  uint64_t linger_start;
  uint64_t next_seq;
  uint64_t next_answer;
  uint64_t next_tseq;
  uint64_t next_done;

  /* Output not yet handed to uv_write: whole answers, in request order. */
  char* out;
  size_t out_len;
  size_t out_cap;
  unsigned out_answers;
  size_t reserved; /* request_t.reserve of the requests not yet answered. */

  /* Input read but not parsed while the connection was stalled. */
  char* saved;
  size_t saved_off;
  size_t saved_len;

  /* Header tracking for Host and Expect. */
  size_t head_bytes;
  size_t body_bytes;
  header_name_t header;
  int in_value;
  int hosts;
  int expect;
  size_t name_len;
  char name[8];
  size_t expect_len;
  char expect_value[16];

  /* A chunked body, read by the server itself (conn_chunk()). */
  chunk_state_t chunk_state;
  uint64_t chunk_left; /* Bytes of the chunk's data still to come. */
  unsigned chunk_digits;
  size_t chunk_ext; /* Bytes of the current chunk's extensions. */
  unsigned trailers;

  /* The light budget (--light-ms, conn_light_credit()), in ns of run time,
   * below 0 when overdrawn, and the uv_now() it was last topped up. */
  int64_t light_credit;
  uint64_t light_time;

  /* The worker's tasks only, one at a time: no lock (SPEC guarantee 2). */
  uint64_t next_run;
  /* A flag, not a lock: finding it set on entry means two runs overlap. */
  atomic_int busy;

  size_t url_len;
  char url[]; /* --max-url bytes. */
};

struct server_s {
  uv_loop_t* loop;
  uv_thread_t loop_thread;
  run_mode_t mode;
  limits_t lim;
  int fault_reorder;
  uv_tcp_t listener;
  uv_signal_t sigint;
  uv_signal_t sigterm;
  uvs_sched_t sched;
  uvs_worker_t timers; /* UVS_LOOP: every connection's deadline. */
  uint64_t threads;    /* libuv's pool size (--threads). */
  uint64_t bulk_max;   /* GROUP_BULK's max_concurrency. */
  uv_idle_t flusher;   /* Writes what the done_cbs of a loop turn made. */
  EVP_MD* sha256;      /* libcrypto's, fetched once: shared by the threads. */
  conn_t* flush_list;
  conn_t* conns;
  addr_count_t** addrs; /* --max-conn-per-addr: a hash table of counts. */
  size_t addr_buckets;  /* A power of two; 0 when the cap is off. */
  int stopping;
  uv_timer_t trimmer; /* Gives freed memory back (server_trim_soon). */
  uint64_t last_accept_log;
  char read_buf[READ_BUF_SIZE];

  /* Loop thread only. */
  uint64_t accepted;
  uint64_t open;
  uint64_t rejecting;
  uint64_t rejected;      /* Answered 503 for --max-conns. */
  uint64_t unanswered;    /* Closed at once: too many being rejected. */
  uint64_t accept_errors; /* EMFILE and the like. */
  uint64_t requests;
  uint64_t tasks;           /* Request tasks accepted by a worker. */
  uint64_t tasks_ran;       /* ... handed back with 0. */
  uint64_t tasks_cancelled; /* ... handed back with UV_ECANCELED. */
  uint64_t tasks_shed;      /* ... handed back with UV_ETIMEDOUT. */
  uint64_t tasks_inflight;
  uint64_t responses;
  uint64_t answer_bytes; /* Of the final answers, headers included. */
  uint64_t work_done;
  uint64_t stopped; /* /work interrupted part way: the connection closed. */
  uint64_t cancelled;
  uint64_t shed;         /* /work answered 503: waited over --max-wait. */
  uint64_t dropped;      /* Ran, but the connection was gone: not written. */
  uint64_t errors;       /* 4xx and 5xx answers. */
  uint64_t stalls;       /* A full worker stopped a connection's reading. */
  uint64_t switch_waits; /* A heavy request waited for light ones before it. */
  uint64_t demoted;      /* Light by n, run in bulk for the light budget. */
  uint64_t ns_per_round; /* What a round of /work takes, as measured. */
  uint64_t write_blocks; /* Unwritten answers stopped a connection's reading. */
  /* Unwritten answers suspended a connection's workers (out_suspends);
   * their draining resumed them (out_resumes), or the close ended the
   * suspension (out_suspend_closes); connections suspended now; closes
   * where the library's count (uvs_worker_metrics) was not ours. */
  uint64_t out_suspends;
  uint64_t out_resumes;
  uint64_t out_suspend_closes;
  uint64_t out_suspended;
  uint64_t suspend_mismatch;
  uint64_t half_closes;
  uint64_t addr_refused; /* Closed at once: over --max-conn-per-addr. */
  uint64_t bad_chunked;  /* Chunked bodies refused by conn_chunk(). */
  uint64_t out_peak;     /* Most answer bytes one connection held (pending). */
  uint64_t backlog_peak; /* Most answer bytes one client had not taken. */
  uint64_t polls;        /* conn_measure() by the deadline task alone. */
  /* Most answers, and bytes, one suspension let in after its mark. */
  uint64_t late_answers_peak;
  uint64_t late_bytes_peak;
  uint64_t mem_peak; /* Most bytes one connection held (conn_mem()). */
  uint64_t timeouts[DEADLINE_LINGER + 1];
  uint64_t answers_out_of_order;
  uint64_t done_out_of_order;
  uint64_t leaks;

  /* Written on pool threads. */
  atomic_uint_fast64_t order_violations;
  atomic_uint_fast64_t overlaps;
  atomic_uint_fast64_t wrong_thread;
  atomic_uint_fast64_t misrouted; /* Heavy work run outside GROUP_BULK. */
  atomic_uint_fast64_t started;   /* /work whose hashing began ... */
  atomic_uint_fast64_t yields;    /* ... and its runs that yielded. */
};

static server_t server;


static void fail(const char* what, int rc) {
  fprintf(stderr, "http-pipeline: %s: %s\n", what, uv_strerror(rc));
  exit(1);
}


static void* xmalloc(size_t size) {
  void* p = malloc(size);
  if (p == NULL)
    fail("malloc", UV_ENOMEM);
  return p;
}


static void sha256_ok(int ok) {
  if (!ok) {
    fprintf(stderr, "http-pipeline: libcrypto's SHA-256 failed\n");
    abort();
  }
}


/* A digest context of its own for the calling thread, set to the SHA-256
 * fetched once at start, so that no call looks the algorithm up again (the
 * threads share nothing else). */
static EVP_MD_CTX* sha256_ctx(void) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  sha256_ok(ctx != NULL && EVP_DigestInit_ex2(ctx, server.sha256, NULL) == 1);
  return ctx;
}


/* out = SHA-256(data); out may be data. */
static void sha256_once(EVP_MD_CTX* ctx,
                        const void* data,
                        size_t len,
                        unsigned char out[SHA256_DIGEST_LENGTH]) {
  unsigned int n = 0;

  sha256_ok(EVP_DigestInit_ex2(ctx, NULL, NULL) == 1 &&
            EVP_DigestUpdate(ctx, data, len) == 1 &&
            EVP_DigestFinal_ex(ctx, out, &n) == 1 && n == SHA256_DIGEST_LENGTH);
}


/* out = SHA-256(data), then `rounds` times out = SHA-256(out), in one go:
 * --mode inline's /work, and round_cost(). A task's /work goes in chunks
 * (work_hash()). */
static void sha256_iterate(const void* data,
                           size_t len,
                           uint64_t rounds,
                           unsigned char out[SHA256_DIGEST_LENGTH]) {
  EVP_MD_CTX* ctx = sha256_ctx();

  sha256_once(ctx, data, len, out);
  while (rounds-- > 0) sha256_once(ctx, out, SHA256_DIGEST_LENGTH, out);
  EVP_MD_CTX_free(ctx);
}


static const char* reason(int status) {
  switch (status) {
    case 100:
      return "Continue";
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
    case 414:
      return "URI Too Long";
    case 417:
      return "Expectation Failed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}


static void out_printf(conn_t* conn, const char* fmt, ...) {
  va_list ap;
  size_t room, cap;
  int n;

  for (;;) {
    room = conn->out_cap - conn->out_len;
    va_start(ap, fmt);
    n = vsnprintf(conn->out + conn->out_len, room, fmt, ap);
    va_end(ap);
    if (n < 0)
      abort();
    if ((size_t) n < room) {
      conn->out_len += (size_t) n;
      return;
    }
    /* Doubles, but never past the room OUT_BOUND leaves beside the
     * buffers of the writes and the requests not yet answered (what it
     * lacks for this answer is that answer's own reserve, given back as
     * soon as it is written); conn_flush() gives back the rest. */
    room = OUT_BOUND(conn->server) > conn->write_bytes + conn->reserved
               ? OUT_BOUND(conn->server) - conn->write_bytes - conn->reserved
               : 0;
    cap = conn->out_cap * 2 < room ? conn->out_cap * 2 : room;
    if (cap < conn->out_len + (size_t) n + 1)
      cap = conn->out_len + (size_t) n + 1;
    conn->out_cap = cap;
    conn->out = realloc(conn->out, conn->out_cap);
    if (conn->out == NULL)
      fail("realloc", UV_ENOMEM);
  }
}


/* Appends a whole response to the connection's output; to a HEAD request,
 * the same headers (Content-Length included) without the body. */
static void respond(conn_t* conn,
                    conn_header_t conn_header,
                    int status,
                    const char* body,
                    int head) {
  static const char* const conn_headers[] = {"", "Connection: close\r\n",
                                             "Connection: keep-alive\r\n"};
  if (conn->out == NULL) {
    conn->out_cap = 1024;
    conn->out = xmalloc(conn->out_cap);
  }
  out_printf(conn,
             "HTTP/1.1 %d %s\r\n"
             "Content-Type: %s\r\n"
             "Content-Length: %zu\r\n"
             "%s%s"
             "\r\n"
             "%s",
             status, reason(status),
             body[0] == '{' ? "application/json" : "text/plain", strlen(body),
             status == 405   ? "Allow: GET, HEAD\r\n"
             : status == 503 ? "Retry-After: 1\r\n"
                             : "",
             conn_headers[conn_header], head ? "" : body);
  if (status >= 400)
    conn->server->errors++;
}


static request_t* request_new(conn_t* conn, conn_header_t conn_header) {
  request_t* req = calloc(1, sizeof(*req));
  if (req == NULL)
    fail("calloc", UV_ENOMEM);
  req->conn = conn;
  req->conn_header = conn_header;
  req->seq = conn->next_seq++;
  conn->live++;
  conn->owed++;
  conn->server->requests++;
  return req;
}


static void request_free(request_t* req) {
  req->conn->reserved -= req->reserve;
  req->conn->live--;
  free(req);
}


/* The most bytes req's answer can take: what it holds against
 * --max-out-bytes from the moment it is parsed until it is answered. */
static size_t answer_bound(const request_t* req) {
  switch (req->kind) {
    case ANS_CONTINUE:
      return HEAD_BOUND;
    case ANS_STATUS:
      return HEAD_BOUND + (req->head ? 0 : strlen(req->body));
    case ANS_WORK: /* "id=TOKEN n=ROUNDS sha256=HEX\n", or a shed 503. */
      return HEAD_BOUND + (req->head ? 0 : MAX_ID + 128);
    case ANS_BAD_ROUNDS:
      return HEAD_BOUND + (req->head ? 0 : 64);
    case ANS_STATS:
    default:
      return HEAD_BOUND + (req->head ? 0 : BODY_MAX);
  }
}


/* Bytes of memory the connection holds: itself, its request target
 * buffer, the bytes of a read kept while stalled, its requests, the output
 * and the buffers of its writes. */
static size_t conn_mem(const conn_t* conn) {
  return sizeof(*conn) + conn->server->lim.max_url +
         (conn->saved != NULL ? conn->saved_off + conn->saved_len : 0) +
         conn->live * sizeof(request_t) + conn->out_cap + conn->write_bytes;
}


/* The most conn_mem() can be, as docs/backpressure.rst counts it: the
 * connection, the rest of one read, and OUT_BOUND of requests and
 * answers. */
static size_t conn_mem_bound(const server_t* s) {
  return sizeof(conn_t) + s->lim.max_url + READ_BUF_SIZE + OUT_BOUND(s);
}


/* The answers computed that the client has not taken, or that the
 * connection still holds: the output not yet handed to libuv, and the
 * larger of two figures, the buffers of its writes until libuv calls them
 * back (a write partly taken by the kernel still holds all of its buffer)
 * and the bytes not sent yet, in libuv's queue or the kernel's
 * (conn_measure()). Without the kernel's, a client that never reads would
 * have megabytes of answers computed for it before a write stalled: the
 * kernel autotunes its send buffer up to tcp_wmem's maximum, and takes
 * them all. Bytes sent and not yet acknowledged do not count: the window
 * the client advertises bounds them, the write deadline watches them, and
 * counting them would cap a connection's rate at the budget per round
 * trip. */
static size_t conn_backlog(conn_t* conn) {
  server_t* s = conn->server;
  uint64_t held =
      conn->write_bytes > conn->unsent ? conn->write_bytes : conn->unsent;
  size_t backlog = conn->out_len + (size_t) held;

  if (backlog > s->backlog_peak)
    s->backlog_peak = backlog;
  return backlog;
}


/* What the connection holds against --max-out-bytes: its backlog
 * (conn_backlog()) and the requests parsed and not yet answered, each the
 * size of its record and the most its answer can take. */
static size_t conn_pending(conn_t* conn) {
  server_t* s = conn->server;
  size_t pending = conn_backlog(conn) + conn->reserved;
  size_t mem = conn_mem(conn);

  if (pending > s->out_peak)
    s->out_peak = pending;
  if (mem > s->mem_peak)
    s->mem_peak = mem;
  return pending;
}


static void request_set(request_t* req, int status, const char* body) {
  req->kind = ANS_STATUS;
  req->status = status;
  req->body = body;
}


static void conn_close(conn_t* conn);
static void conn_update(conn_t* conn);
static void conn_resume(conn_t* conn);
static void conn_uncount_addr(conn_t* conn);
static void stats_format(server_t* s, char* body, size_t size);


static void work_format(request_t* req, char* body, size_t size) {
  static const char hex[] = "0123456789abcdef";
  char digest[2 * SHA256_DIGEST_LENGTH + 1];
  int i;

  for (i = 0; i < SHA256_DIGEST_LENGTH; i++) {
    digest[2 * i] = hex[req->digest[i] >> 4];
    digest[2 * i + 1] = hex[req->digest[i] & 15];
  }
  digest[2 * SHA256_DIGEST_LENGTH] = '\0';
  snprintf(body, size, "id=%s n=%" PRIu64 " sha256=%s\n", req->id, req->rounds,
           digest);
}


/* Writes req's answer to the output and frees req. The one place answers
 * enter the output, so the one place their order is checked. */
static void answer(conn_t* conn, request_t* req) {
  server_t* s = conn->server;
  size_t out_len = conn->out_len;
  char body[BODY_MAX];

  if (req->seq != conn->next_answer)
    s->answers_out_of_order++;
  switch (req->kind) {
    case ANS_CONTINUE:
      /* Interim: the final answer of the same request follows. */
      if (conn->out == NULL) {
        conn->out_cap = 1024;
        conn->out = xmalloc(conn->out_cap);
      }
      out_printf(conn, "HTTP/1.1 100 Continue\r\n\r\n");
      request_free(req);
      return;
    case ANS_WORK:
      work_format(req, body, sizeof(body));
      respond(conn, req->conn_header, 200, body, req->head);
      break;
    case ANS_STATS:
      stats_format(s, body, sizeof(body));
      respond(conn, req->conn_header, 200, body, req->head);
      break;
    case ANS_BAD_ROUNDS:
      snprintf(body, sizeof(body), "n is over the limit of %" PRIu64 "\n",
               s->lim.max_rounds);
      respond(conn, req->conn_header, 400, body, req->head);
      break;
    case ANS_STATUS:
      respond(conn, req->conn_header, req->status, req->body, req->head);
      break;
  }
  conn->next_answer = req->seq + 1;
  conn->out_answers++;
  conn->owed--;
  s->answer_bytes += conn->out_len - out_len;
  request_free(req);
}


static void on_trim(uv_timer_t* timer) {
  (void) timer;
#ifdef __GLIBC__
  /* Measured: 45 us median, 1 ms at most, 50 connections' worth freed. */
  malloc_trim(0);
#endif
}


/* A connection's memory is back with malloc, which keeps it for the next
 * one, and gives back to the system only the top of its heap: one
 * connection still open above many closed ones keeps all their pages.
 * Once a second at most, after connections have closed, whole free pages
 * go back (glibc's malloc_trim), so that the server shrinks after an
 * attack instead of staying at its peak. */
static void server_trim_soon(server_t* s) {
  if (!s->stopping && !uv_is_active((uv_handle_t*) &s->trimmer))
    uv_timer_start(&s->trimmer, on_trim, 1000, 0);
}


static void conn_unref(conn_t* conn) {
  server_t* s = conn->server;
  if (--conn->refs > 0)
    return;
  if (conn->live != 0)
    s->leaks += conn->live;
  free(conn->out);
  free(conn->saved);
  free(conn);
  server_trim_soon(s);
}


static void on_tcp_closed(uv_handle_t* handle) {
  conn_unref((conn_t*) handle->data);
}


static void on_worker_closed(uvs_worker_t* worker) {
  conn_unref((conn_t*) worker->data);
}


/* suspend: output begins */
/* Backpressure on the output side: a client that does not read must not
 * have answers computed for it. Its backlog (conn_backlog()) is what it
 * has not taken: the output not yet handed to libuv, the buffers of its
 * writes until libuv calls them back, and the bytes the kernel has not
 * sent. Past half of --max-out-bytes the connection suspends both its
 * workers: they start no task, and its queued requests keep their order
 * and their place. Once the backlog is down to a quarter (seen by a write
 * callback, or by conn_measure() when the kernel held it), it resumes
 * them. Both calls are O(1), one lock round each. Both workers, not only
 * the active one, so that a switch (conn_route()) cannot escape it.
 *
 * Balance: only the loop thread calls them, only here, and out_suspended
 * says which came last, so each suspend has exactly one resume, or the
 * close. A close ends the suspension by itself (conn_close() owes no
 * resume; after it, resume would be UV_ESHUTDOWN), and a resume is never
 * made on a count of 0 (UV_EINVAL). On open workers neither call fails.
 *
 * With the read side (conn_update()): reading and parsing stop once the
 * backlog and the requests parsed and not yet answered together pass
 * --max-out-bytes, and start again at half of it. So for a client that
 * stops reading, the computing stops first, at half the budget of
 * backlog, while the parser goes on queueing requests into the other
 * half; then the reading stops. Memory stays within OUT_BOUND either way,
 * and so do the answers computed and not taken, however far the workers
 * ran past the mark before the done_cb that saw it. When the client reads
 * again, its backlog shrinks, the workers resume at a quarter, the queued
 * requests are answered in order, and parsing and reading follow at
 * half. */
static void conn_output_pressure(conn_t* conn) {
  server_t* s = conn->server;
  size_t backlog = conn_backlog(conn);
  unsigned g;
  int rc;

  if (conn->closing || !conn->has_worker)
    return;
  if (!conn->out_suspended && backlog > s->lim.max_out_bytes / 2) {
    for (g = 0; g < GROUP_COUNT; g++) {
      rc = uvs_worker_suspend(&conn->workers[g]);
      if (rc != 0)
        fail("uvs_worker_suspend", rc);
    }
    conn->out_suspended = 1;
    conn->late_answers = 0;
    conn->late_bytes = 0;
    s->out_suspends++;
    s->out_suspended++;
  } else if (conn->out_suspended && backlog <= s->lim.max_out_bytes / 4) {
    for (g = 0; g < GROUP_COUNT; g++) {
      rc = uvs_worker_resume(&conn->workers[g]);
      if (rc != 0)
        fail("uvs_worker_resume", rc);
    }
    conn->out_suspended = 0;
    s->out_resumes++;
    s->out_suspended--;
  }
}
/* suspend: output ends */


static void on_write(uv_write_t* wreq, int status) {
  out_write_t* w = (out_write_t*) wreq;
  conn_t* conn = w->conn;

  conn->writes--;
  conn->write_bytes -= w->len;
  if (status == 0)
    conn->server->responses += w->answers;
  free(w->base);
  free(w);
  if (conn->closing)
    return;
  if (status < 0) {
    conn_close(conn);
    return;
  }
  conn->last_active = uv_now(conn->server->loop);
  conn_update(conn); /* Resumes the workers once drained enough. */
}


/* What the kernel holds of the connection's answers (Linux): *unacked,
 * the bytes the client has not acknowledged (SIOCOUTQ), and *unsent, those
 * not even sent (SIOCOUTQNSD). Elsewhere, or if a call fails, 0: only what
 * libuv holds is seen, and --sndbuf is what bounds the kernel's part. */
static void conn_kernel_queue(conn_t* conn,
                              uint64_t* unacked,
                              uint64_t* unsent) {
  *unacked = 0;
  *unsent = 0;
#if defined(SIOCOUTQ) && defined(SIOCOUTQNSD)
  uv_os_fd_t fd;
  int n;

  if (uv_fileno((uv_handle_t*) &conn->tcp, &fd) != 0)
    return;
  if (ioctl(fd, SIOCOUTQ, &n) == 0 && n > 0)
    *unacked = (uint64_t) n;
  if (ioctl(fd, SIOCOUTQNSD, &n) == 0 && n > 0)
    *unsent = (uint64_t) n;
#endif
}


/* Measures what the client has taken: conn->acked, the answer bytes it has
 * acknowledged, ever (handed to libuv, less what libuv still holds and
 * what the kernel holds unsent or unacked), and conn->unsent, the bytes
 * not sent yet (libuv's queue and the kernel's unsent bytes). Bytes taken,
 * not writes completed: a write completes once the kernel has it, which,
 * with the kernel's autotuned send buffer, is at once for megabytes of
 * answers that a client never reads.
 *
 * Nothing tells the server when the kernel's bytes leave. While something
 * waits for that (conn_deadline(): the suspended workers, the stopped
 * reading, the idle deadline) and libuv holds no write whose callback
 * would come, the deadline task comes back to measure again
 * (DEADLINE_POLL): POLL_MIN_MS after the client last took something or was
 * handed something, then at twice the interval each time, up to
 * POLL_MAX_MS. Two ioctls, and none while the client has taken
 * everything. */
static void conn_measure(conn_t* conn) {
  uint64_t now = uv_now(conn->server->loop);
  uint64_t queued = conn->tcp.write_queue_size;
  uint64_t unacked, unsent, acked;

  if (conn->acked == conn->queued_bytes && conn->unsent == 0)
    return;
  conn_kernel_queue(conn, &unacked, &unsent);
  unacked += queued;
  /* After our shutdown the kernel counts the FIN as a byte too. */
  acked = unacked < conn->queued_bytes ? conn->queued_bytes - unacked : 0;
  if (acked != conn->acked) {
    conn->poll_ms = POLL_MIN_MS;
    conn->poll_due = now + conn->poll_ms;
  } else if (now >= conn->poll_due) {
    conn->poll_ms = conn->poll_ms < POLL_MIN_MS   ? POLL_MIN_MS
                    : conn->poll_ms < POLL_MAX_MS ? conn->poll_ms * 2
                                                  : POLL_MAX_MS;
    conn->poll_due = now + conn->poll_ms;
  }
  conn->acked = acked;
  conn->unsent = queued + unsent;
  if (acked == conn->queued_bytes)
    conn->write_episode = 0; /* The client has taken everything. */
}


/* The write deadline has come while the client owed us acks. It passes if
 * the client has taken everything (the deadline stops until the next
 * write), everything that was owed when the window began, or at least
 * --min-send-rate bytes a second since then; then a new window begins and
 * this returns 1. Otherwise the client reads too slowly, or not at all:
 * 0. Bytes taken, not writes completed, count: a client that reads a byte
 * now and then lets a small write complete now and then, and must not keep
 * the connection, its answers and its slot forever. */
static int conn_write_window(conn_t* conn) {
  const limits_t* lim = &conn->server->lim;
  uint64_t need = lim->min_send_rate * lim->write_timeout / 1000;
  uint64_t acked;

  conn_measure(conn);
  acked = conn->acked;
  if (acked == conn->queued_bytes) {
    conn->write_episode = 0;
    return 1;
  }
  if (acked - conn->window_acked < (need > 0 ? need : 1) &&
      acked < conn->window_target)
    return 0;
  conn->window_start = uv_now(conn->server->loop);
  conn->window_acked = acked;
  conn->window_target = conn->queued_bytes;
  return 1;
}


/* Hands the output to libuv, with one uv_write. */
static void conn_flush(conn_t* conn) {
  out_write_t* w;
  char* base;
  uv_buf_t buf;
  int rc;

  if (conn->closing || conn->out_len == 0)
    return;
  w = xmalloc(sizeof(*w));
  w->conn = conn;
  /* The buffer is held until the write is called back, which may be long
   * for a client that does not read: give back what it does not use. */
  if (conn->out_cap > conn->out_len) {
    base = realloc(conn->out, conn->out_len);
    if (base != NULL)
      conn->out = base;
  }
  w->base = conn->out;
  w->len = conn->out_len;
  w->answers = conn->out_answers;
  buf = uv_buf_init(conn->out, (unsigned) conn->out_len);
  conn->out = NULL;
  conn->out_len = conn->out_cap = 0;
  conn->out_answers = 0;
  conn->writes++;
  conn->write_bytes += w->len;
  conn->queued_bytes += buf.len;
  conn->unsent += buf.len; /* Until conn_measure() says otherwise. */
  /* A client that reads takes them soon: look soon. */
  conn->poll_ms = POLL_MIN_MS;
  conn->poll_due = uv_now(conn->server->loop) + POLL_MIN_MS;
  if (!conn->write_episode) {
    /* The client had taken everything: the write deadline's first window
     * begins. */
    conn->write_episode = 1;
    conn->window_start = uv_now(conn->server->loop);
    conn->window_acked = conn->queued_bytes - buf.len;
    conn->window_target = conn->queued_bytes;
  }
  rc = uv_write(&w->req, (uv_stream_t*) &conn->tcp, &buf, 1, on_write);
  if (rc != 0)
    on_write(&w->req, rc); /* The handle is unusable: frees w, closes. */
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
    if (!conn->closing) {
      conn_flush(conn);
      if (!conn->closing)
        conn_update(conn);
    }
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


/* work: cooperation begins */
/* The hashing of a /work, in chunks of WORK_CHUNK rounds, asking uvsched
 * between two chunks what it would like (uvs_task_check()):
 *
 * - 0: go on;
 * - UV_EAGAIN: the turn's slice is spent and another worker waits for a
 *   thread (on a loop worker: the slice is spent, and the loop waits).
 *   uvs_task_yield() keeps the task's place at the head of its worker's
 *   queue, and the run returns; at the worker's next turn work_run() is
 *   called again, before any later request of the connection, whose
 *   answers still wait behind this one;
 * - UV_ECANCELED: stop. Its connection has closed (conn_close()
 *   interrupts it, and closes its workers with UVS_CANCEL): nobody is left
 *   to read the answer.
 *
 * Where it has got to lives in req, not on this stack: the digest so far
 * and the rounds made. Each run takes up where the last one left off, and
 * every chunk ends with req whole, so a yield (after which the task may be
 * cancelled instead of run again) leaves nothing half done. Returns 0 once
 * the digest is whole, UV_EAGAIN after a yield, UV_ECANCELED when told to
 * stop. */
static int work_hash(request_t* req) {
  EVP_MD_CTX* ctx = sha256_ctx();
  uint64_t i, n;
  int rc;

  if (!req->hashing) {
    sha256_once(ctx, req->id, req->id_len, req->digest);
    req->hashing = 1;
  }
  for (;;) {
    n = req->rounds - req->done_rounds;
    if (n > WORK_CHUNK)
      n = WORK_CHUNK;
    for (i = 0; i < n; i++)
      sha256_once(ctx, req->digest, SHA256_DIGEST_LENGTH, req->digest);
    req->done_rounds += n;
    if (req->done_rounds == req->rounds) {
      rc = 0;
      break;
    }
    rc = uvs_task_check(&req->task);
    if (rc == UV_EAGAIN) {
      /* A one-shot task, in its own run_cb, not scheduled again: 0. */
      if (uvs_task_yield(&req->task) != 0)
        abort();
      break;
    }
    if (rc == UV_ECANCELED)
      break;
    if (rc != 0)
      abort(); /* UV_EINVAL: not in its own run_cb, which it is. */
  }
  EVP_MD_CTX_free(ctx);
  return rc;
}
/* work: cooperation ends */


/* Its digest is whole: the hashing ran to its end (not stopped). */
static int work_finished(const request_t* req) {
  return req->hashing && req->done_rounds == req->rounds;
}


/* On a pool thread (--mode pool) or the loop thread (--mode loop). Called
 * again for each turn of a /work that yields (work_hash()). */
static void work_run(uvs_task_t* task) {
  request_t* req = (request_t*) task;
  conn_t* conn = req->conn;
  server_t* s = conn->server;
  uv_thread_t self = uv_thread_self();
  int on_loop = uv_thread_equal(&self, &s->loop_thread);
  uint64_t start;

  if (atomic_exchange(&conn->busy, 1))
    atomic_fetch_add(&s->overlaps, 1);
  if (req->hashing) {
    /* Again after a yield: the task kept its place, so nothing of its
     * connection has run since its last run. */
    if (req->tseq + 1 != conn->next_run) {
      atomic_fetch_add(&s->order_violations, 1);
      fprintf(stderr,
              "http-pipeline: order: request %" PRIu64
              " ran again after a yield, but the connection's next run was "
              "%" PRIu64 "\n",
              req->tseq, conn->next_run);
    }
  } else {
    /* With --max-wait, the tasks shed before this one never ran: the runs
     * only go forward (work_done() checks that none is lost). */
    if (req->tseq < conn->next_run ||
        (req->tseq != conn->next_run && s->lim.max_wait == 0)) {
      atomic_fetch_add(&s->order_violations, 1);
      fprintf(stderr,
              "http-pipeline: order: request %" PRIu64
              " started where the connection's next run was %" PRIu64 "\n",
              req->tseq, conn->next_run);
    }
    conn->next_run = req->tseq + 1;
  }
  if (on_loop != (conn->workers[req->group].where == UVS_LOOP))
    atomic_fetch_add(&s->wrong_thread, 1);
  /* Heavy work must never take the thread kept for light work. */
  if (req->heavy && req->group != GROUP_BULK)
    atomic_fetch_add(&s->misrouted, 1);

  /* HEAD: the body is not sent, and its length does not depend on the
   * digest. */
  start = uv_hrtime();
  if (req->kind == ANS_WORK && !req->head) {
    if (!req->hashing)
      atomic_fetch_add(&s->started, 1);
    if (work_hash(req) == UV_EAGAIN)
      atomic_fetch_add(&s->yields, 1);
  }
  req->run_ns += uv_hrtime() - start; /* Read by work_done(), after. */

  atomic_store(&conn->busy, 0);
}


/* A task handed back: what it took from its connection's light budget
 * becomes what its run measured (one that did not run gives its charge
 * back), and what a round of /work takes learns from it. */
static void conn_light_settle(conn_t* conn, request_t* req, int status) {
  server_t* s = conn->server;
  int64_t sample;

  conn->light_credit += (int64_t) req->charge_ns;
  if (status != 0)
    return;
  if (req->group == GROUP_INTERACTIVE && s->lim.light_ms != 0)
    conn->light_credit -= (int64_t) req->run_ns;
  if (work_finished(req) && req->rounds >= COST_ROUNDS) {
    sample = (int64_t) (req->run_ns / (req->rounds + 1));
    sample =
        (int64_t) s->ns_per_round + (sample - (int64_t) s->ns_per_round) / 16;
    s->ns_per_round = sample > 0 ? (uint64_t) sample : 1;
  }
}


/* Takes req out of its connection's tasks in flight. It is the oldest
 * (SPEC guarantee 3: they come back in order) unless the connection is
 * closing, and then the list is gone already (conn_close()). */
static void conn_untrack(conn_t* conn, request_t* req) {
  request_t** p = &conn->first_inflight;
  request_t* prev = NULL;

  while (*p != NULL && *p != req) {
    prev = *p;
    p = &prev->next_inflight;
  }
  if (*p == NULL)
    return;
  *p = req->next_inflight;
  if (conn->last_inflight == req)
    conn->last_inflight = prev;
  req->next_inflight = NULL;
}


/* On the loop thread, once the task is handed back: once per task, after
 * its last run (a run that yields is not handed back). */
static void work_done(uvs_task_t* task, int status) {
  request_t* req = (request_t*) task;
  conn_t* conn = req->conn;
  server_t* s = conn->server;
  size_t late = SIZE_MAX;
  /* It ran, but stopped part way: told UV_ECANCELED (work_hash()). */
  int stopped =
      status == 0 && req->kind == ANS_WORK && !req->head && !work_finished(req);

  conn_untrack(conn, req);
  conn->inflight--;
  s->tasks_inflight--;
  conn_light_settle(conn, req, status);
  if (status == 0)
    s->tasks_ran++;
  else if (status == UV_ETIMEDOUT)
    s->tasks_shed++;
  else
    s->tasks_cancelled++;
  if (req->kind == ANS_WORK) {
    if (stopped)
      s->stopped++;
    else if (status == 0)
      s->work_done++;
    else if (status == UV_ETIMEDOUT)
      s->shed++;
    else
      s->cancelled++;
  }
  /* SPEC guarantee 3: done_cb(task, 0) calls of one worker come in run
   * order, and a task shed by max_wait_ms (UV_ETIMEDOUT) comes back in its
   * place among them. Only a close hands tasks back with UV_ECANCELED, and
   * those are not ordered against the others. */
  if (status == 0 || status == UV_ETIMEDOUT) {
    if (req->tseq < conn->next_done ||
        (req->tseq != conn->next_done && !conn->closing))
      s->done_out_of_order++;
    conn->next_done = req->tseq + 1;
  }

  if (conn->closing) {
    /* The connection is gone: never write. */
    if (status == 0 && req->kind == ANS_WORK && !stopped)
      s->dropped++;
    request_free(req);
    return;
  }
  if (status == UV_ETIMEDOUT) {
    /* Shed: it waited on the worker longer than --max-wait, and its client
     * has likely given up. A 503 in its place keeps the connection and the
     * order of the answers. An answer that needs no work is still right:
     * its task only kept its place. */
    if (req->kind == ANS_WORK)
      request_set(req, 503, "overloaded: the work waited too long\n");
  } else if (status != 0) {
    /* Only a close cancels: the connection must be closing. */
    request_free(req);
    conn_close(conn);
    return;
  } else if (stopped) {
    /* Only a close stops it, too. Should anything else, the client gets
     * a 503 in its place, never a digest that is not whole. */
    request_set(req, 503, "the work was stopped\n");
  }
  if (conn->out_suspended && status == 0) {
    /* Run after the backlog had passed the mark: the worker went on
     * until the done_cb that saw it reached the loop thread. */
    late = conn->out_len;
    conn->late_answers++;
  }
  if (s->fault_reorder && conn->held == NULL && req->tseq % 5 == 2) {
    conn->held = req; /* Broken on purpose: the order check must see it. */
  } else {
    answer(conn, req);
    if (conn->held != NULL) {
      req = conn->held;
      conn->held = NULL;
      answer(conn, req);
    }
    conn_flush_soon(conn);
  }
  if (late != SIZE_MAX) {
    conn->late_bytes += conn->out_len - late;
    if (conn->late_answers > s->late_answers_peak)
      s->late_answers_peak = conn->late_answers;
    if (conn->late_bytes > s->late_bytes_peak)
      s->late_bytes_peak = conn->late_bytes;
  }
  /* Unwritten answers past their bound: no further task starts. */
  conn_output_pressure(conn);
  /* The last light task has been handed back: a heavy request waiting for
   * it (conn_route()) can go to the bulk worker now. */
  if (conn->inflight == 0 && conn->stalled != NULL)
    conn_resume(conn);
}


/* Backpressure: the worker is bounded (uvs_worker_init_ex, max_pending =
 * --max-inflight, UVS_FULL_REJECT), so this returns UV_EAGAIN when it is
 * full, and on_space() runs on the loop thread once it has drained to half.
 * Returns 0 if the task was accepted, or another error. */
static int conn_schedule(conn_t* conn, request_t* req) {
  int rc;

  req->tseq = conn->next_tseq++; /* The task may run before schedule returns */
  req->group = conn->active;
  rc = uvs_task_init(&req->task, work_run, work_done);
  if (rc == 0)
    rc = uvs_schedule(&conn->workers[conn->active], &req->task);
  if (rc != 0) {
    conn->next_tseq--;
    return rc;
  }
  conn->inflight++;
  if (conn->last_inflight != NULL)
    conn->last_inflight->next_inflight = req;
  else
    conn->first_inflight = req;
  conn->last_inflight = req;
  conn->server->tasks++;
  conn->server->tasks_inflight++;
  /* Light work runs on the budget (conn_light_credit()). */
  if (req->group == GROUP_INTERACTIVE && conn->server->lim.light_ms != 0) {
    req->charge_ns = req->cost_ns;
    conn->light_credit -= (int64_t) req->cost_ns;
  }
  return 0;
}


/* Groups, and why a connection has two workers. A heavy /work (n at least
 * --heavy-rounds) runs on the connection's worker in GROUP_BULK, whose
 * max_concurrency is the pool's size less one; everything else on its
 * worker in GROUP_INTERACTIVE, which may use the whole pool. However many
 * connections flood heavy work, one pool thread is left to light work, and
 * a light request on another connection waits for no heavy task.
 *
 * The answers of a connection must still leave in request order, and one
 * task of it run at a time, with no list of answers to reorder: so at most
 * one of its two workers holds its tasks at any moment, the active one.
 * uvsched hands a worker's tasks back in the order they ran (SPEC guarantee
 * 3), and a switch happens only when the connection has no task left on
 * either worker, after the last done_cb, so the order of the runs and the
 * done_cbs goes on unbroken across it. Routing req:
 *
 * - nothing of the connection on a worker: the worker of req's own group
 *   becomes the active one;
 * - light behind tasks on the bulk worker: joins them there. Its answer
 *   must wait for theirs anyway, and it is short;
 * - heavy behind tasks on the interactive worker: it must not run there,
 *   so it waits (UV_EBUSY), kept as conn->stalled with the parser paused
 *   behind it and reading stopped, as for a full worker, until work_done()
 *   hands back the last light task and conn_resume() schedules it on the
 *   bulk worker. Its answer would come after theirs anyway; what the
 *   client loses is only that its requests after it are parsed later.
 *
 * Returns 0, UV_EBUSY for a heavy request that must wait, UV_EAGAIN for a
 * full worker, or another error. */
static int conn_route(conn_t* conn, request_t* req) {
  if (conn->inflight == 0)
    conn->active = req->heavy ? GROUP_BULK : GROUP_INTERACTIVE;
  else if (req->heavy && conn->active != GROUP_BULK)
    return UV_EBUSY;
  return conn_schedule(conn, req);
}


/* Schedules the request that waited (a full worker, or a heavy request
 * behind light ones), then parses on and reads again. */
static void conn_resume(conn_t* conn) {
  request_t* req;
  int rc;

  if (conn->closing || conn->stalled == NULL)
    return;
  req = conn->stalled;
  conn->stalled = NULL;
  rc = conn_route(conn, req);
  if (rc == UV_EAGAIN || rc == UV_EBUSY) {
    conn->stalled = req;
    return;
  }
  if (rc != 0) {
    request_free(req);
    conn_close(conn);
    return;
  }
  conn_update(conn); /* Parses what was kept, reads again. */
}


/* A worker has room again (space_cb, on the loop thread): schedule the
 * request it refused. The worker's memory is the connection's, which lives
 * until the worker's close callback, and no space_cb runs once the worker
 * is closing. */
static void on_space(uvs_worker_t* worker) {
  conn_resume(worker->data);
}


/* Heavy: a /work whose hashing takes a pool thread for long (n at least
 * --heavy-rounds). A HEAD /work does not hash, whatever its n. */
static int request_heavy(const server_t* s, const request_t* req) {
  return s->lim.heavy_rounds != 0 && req->kind == ANS_WORK && !req->head &&
         req->rounds >= s->lim.heavy_rounds;
}


/* What req's run should take: a round's measured time (conn_light_settle())
 * for each of the ROUNDS + 1 digests of a /work; nothing for an answer
 * that needs no work, HEAD /work included. */
static uint64_t request_cost(const server_t* s, const request_t* req) {
  if (req->kind != ANS_WORK || req->head)
    return 0;
  return (req->rounds + 1) * s->ns_per_round;
}


/* The light budget, --light-ms L: run time a connection may spend in the
 * interactive group, topped up at L ms a second up to L ms. Each light
 * task takes what it should cost when it is scheduled there
 * (conn_schedule()), and its measured run time once it is handed back
 * (conn_light_settle()). A /work that the credit does not cover runs in
 * the bulk group, as a heavy one does, whatever its n: a client that
 * floods requests just under --heavy-rounds gets a few of them a second
 * among the light work, not a thread. With --heavy-rounds 0 (no groups)
 * nothing is moved. Returns the credit now, in ns; below 0 when
 * overdrawn. */
static int64_t conn_light_credit(conn_t* conn) {
  const server_t* s = conn->server;
  int64_t cap = (int64_t) s->lim.light_ms * 1000000;
  uint64_t now = uv_now(s->loop);
  /* L ms a second is L us a ms. */
  int64_t gain = (int64_t) ((now - conn->light_time) * s->lim.light_ms * 1000);

  conn->light_time = now;
  conn->light_credit =
      conn->light_credit > cap - gain ? cap : conn->light_credit + gain;
  return conn->light_credit;
}


/* Answers req now if nothing of this connection is on its workers, so that
 * its answer cannot overtake an earlier one; otherwise queues it behind them
 * (conn_route()). Returns UV_EAGAIN, keeping req as conn->stalled, if it
 * must wait: the worker is full, or req is heavy behind light tasks. */
static int conn_submit(conn_t* conn, request_t* req) {
  server_t* s = conn->server;
  int rc;

  /* From now until it is answered, req holds its own size and the most its
   * answer can take against --max-out-bytes (conn_pending()): the library
   * bounds only the tasks queued, not those started and not yet handed
   * back, which pile up while the loop thread parses a long read and the
   * pool runs them. */
  req->reserve = sizeof(*req) + answer_bound(req);
  conn->reserved += req->reserve;
  req->heavy = request_heavy(s, req);
  req->cost_ns = request_cost(s, req);
  if (!req->heavy && req->cost_ns > 0 && s->lim.heavy_rounds != 0 &&
      s->lim.light_ms != 0 &&
      (int64_t) req->cost_ns > conn_light_credit(conn)) {
    req->heavy = 1; /* Over its connection's light budget. */
    req->demoted = 1;
    s->demoted++;
  }
  if (s->mode == MODE_INLINE || !conn->has_worker) {
    if (req->kind == ANS_WORK) {
      if (!req->head)
        sha256_iterate(req->id, req->id_len, req->rounds, req->digest);
      s->work_done++;
    }
    answer(conn, req);
    return 0;
  }
  if (req->kind != ANS_WORK && conn->inflight == 0 && conn->stalled == NULL) {
    answer(conn, req);
    return 0;
  }
  rc = conn_route(conn, req);
  if (rc == 0)
    return 0;
  if ((rc == UV_EAGAIN || rc == UV_EBUSY) && req->kind != ANS_CONTINUE) {
    /* The parser is paused behind it and the connection stops reading
     * (conn_update) until conn_resume(). */
    if (conn->stalled != NULL)
      abort(); /* One at a time: the parser is paused behind it. */
    conn->stalled = req;
    if (rc == UV_EBUSY)
      s->switch_waits++;
    else
      s->stalls++;
    return UV_EAGAIN;
  }
  /* An interim answer is optional: a client waits for it only so long. */
  if (req->kind == ANS_CONTINUE) {
    request_free(req);
    return 0;
  }
  request_free(req);
  conn_close(conn);
  return rc;
}


static void stats_format(server_t* s, char* body, size_t size) {
  static const char* const names[GROUP_COUNT] = {"interactive", "bulk"};
  uvs_group_stats_t gs;
  uvs_stats_t st;
  size_t len;
  int n;
  unsigned g;

  uvs_sched_stats(&s->sched, &st);
  n = snprintf(
      body, size,
      "{\"mode\":\"%s\",\"accepted\":%" PRIu64 ",\"open\":%" PRIu64
      ",\"rejected\":%" PRIu64 ",\"unanswered\":%" PRIu64
      ",\"accept_errors\":%" PRIu64 ",\"requests\":%" PRIu64
      ",\"tasks\":%" PRIu64 ",\"tasks_ran\":%" PRIu64
      ",\"tasks_cancelled\":%" PRIu64 ",\"tasks_shed\":%" PRIu64
      ",\"tasks_inflight\":%" PRIu64 ",\"responses\":%" PRIu64
      ",\"work_done\":%" PRIu64 ",\"cancelled\":%" PRIu64 ",\"shed\":%" PRIu64
      ",\"dropped\":%" PRIu64 ",\"errors\":%" PRIu64 ",\"stalls\":%" PRIu64
      ",\"write_blocks\":%" PRIu64 ",\"half_closes\":%" PRIu64
      ",\"addr_refused\":%" PRIu64 ",\"bad_chunked\":%" PRIu64
      ",\"out_peak\":%" PRIu64 ",\"mem_peak\":%" PRIu64
      ",\"mem_bound\":%zu"
      ",\"header_timeouts\":%" PRIu64 ",\"idle_timeouts\":%" PRIu64
      ",\"write_timeouts\":%" PRIu64 ",\"linger_timeouts\":%" PRIu64
      ",\"order_violations\":%" PRIu64 ",\"answers_out_of_order\":%" PRIu64
      ",\"done_out_of_order\":%" PRIu64 ",\"overlaps\":%" PRIu64
      ",\"wrong_thread\":%" PRIu64 ",\"uvs_scheduled\":%" PRIu64
      ",\"uvs_ran\":%" PRIu64 ",\"uvs_cancelled\":%" PRIu64
      ",\"uvs_pending\":%" PRIu64 ",\"misrouted\":%" PRIu64
      ",\"switch_waits\":%" PRIu64 ",\"threads\":%" PRIu64
      ",\"heavy_rounds\":%" PRIu64 ",\"bulk_max\":%" PRIu64
      ",\"out_suspends\":%" PRIu64 ",\"out_resumes\":%" PRIu64
      ",\"out_suspend_closes\":%" PRIu64 ",\"out_suspended\":%" PRIu64
      ",\"suspend_mismatch\":%" PRIu64 ",\"backlog_peak\":%" PRIu64
      ",\"polls\":%" PRIu64 ",\"late_answers_peak\":%" PRIu64
      ",\"late_bytes_peak\":%" PRIu64 ",\"light_ms\":%" PRIu64
      ",\"demoted\":%" PRIu64 ",\"ns_per_round\":%" PRIu64
      ",\"answer_bytes\":%" PRIu64 ",\"started\":%" PRIu64
      ",\"yields\":%" PRIu64 ",\"stopped\":%" PRIu64,
      s->mode == MODE_POOL   ? "pool"
      : s->mode == MODE_LOOP ? "loop"
                             : "inline",
      s->accepted, s->open, s->rejected, s->unanswered, s->accept_errors,
      s->requests, s->tasks, s->tasks_ran, s->tasks_cancelled, s->tasks_shed,
      s->tasks_inflight, s->responses, s->work_done, s->cancelled, s->shed,
      s->dropped, s->errors, s->stalls, s->write_blocks, s->half_closes,
      s->addr_refused, s->bad_chunked, s->out_peak, s->mem_peak,
      conn_mem_bound(s), s->timeouts[DEADLINE_HEADER],
      s->timeouts[DEADLINE_IDLE], s->timeouts[DEADLINE_WRITE],
      s->timeouts[DEADLINE_LINGER],
      (uint64_t) atomic_load(&s->order_violations), s->answers_out_of_order,
      s->done_out_of_order, (uint64_t) atomic_load(&s->overlaps),
      (uint64_t) atomic_load(&s->wrong_thread), st.scheduled, st.ran,
      st.cancelled, st.pending, (uint64_t) atomic_load(&s->misrouted),
      s->switch_waits, s->threads, s->lim.heavy_rounds, s->bulk_max,
      s->out_suspends, s->out_resumes, s->out_suspend_closes, s->out_suspended,
      s->suspend_mismatch, s->backlog_peak, s->polls, s->late_answers_peak,
      s->late_bytes_peak, s->lim.light_ms, s->demoted, s->ns_per_round,
      s->answer_bytes, (uint64_t) atomic_load(&s->started),
      (uint64_t) atomic_load(&s->yields), s->stopped);
  /* uvs_group_stats: each field atomic, read now, not one snapshot. */
  len = n > 0 && (size_t) n < size ? (size_t) n : size - 1;
  for (g = 0; g < GROUP_COUNT; g++) {
    if (uvs_group_stats(&s->sched, g, &gs) != 0)
      memset(&gs, 0, sizeof(gs));
    n = snprintf(body + len, size - len,
                 ",\"%s\":{\"running\":%" PRIu64 ",\"ready\":%" PRIu64
                 ",\"ran\":%" PRIu64 ",\"run_ns\":%" PRIu64 "}",
                 names[g], gs.running, gs.ready, gs.ran, gs.run_ns);
    len += n > 0 && (size_t) n < size - len ? (size_t) n : size - 1 - len;
  }
  snprintf(body + len, size - len, "}\n");
}


/* Parses "n=ROUNDS&id=TOKEN" (any order, other keys ignored). Returns 0,
 * -1 for a bad query, or -2 for n over --max-rounds. */
static int parse_query(const char* q,
                       size_t len,
                       request_t* req,
                       uint64_t max_rounds) {
  const char* end = q + len;
  const char* amp;
  const char* eq;
  const char* v;
  size_t klen, vlen, i;
  int have_n = 0, have_id = 0, over = 0;
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
        if (have_n || vlen == 0)
          return -1;
        n = 0;
        for (i = 0; i < vlen; i++) {
          if (v[i] < '0' || v[i] > '9')
            return -1;
          if (n <= max_rounds) /* Stops growing: no overflow. */
            n = n * 10 + (uint64_t) (v[i] - '0');
        }
        over = n > max_rounds;
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
  if (!have_n || !have_id)
    return -1;
  return over ? -2 : 0;
}


/* A whole request has been parsed: answer it or queue its work. */
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
  req->head = p->method == HTTP_HEAD;

  http_parser_url_init(&u);
  if (p->method != HTTP_GET && p->method != HTTP_HEAD) {
    request_set(req, 405, "method not allowed\n");
  } else if (http_parser_parse_url(conn->url, conn->url_len, 0, &u) != 0 ||
             !(u.field_set & (1 << UF_PATH))) {
    request_set(req, 400, "bad request target\n");
  } else {
    path = conn->url + u.field_data[UF_PATH].off;
    path_len = u.field_data[UF_PATH].len;
    if (path_len == 7 && memcmp(path, "/health", 7) == 0) {
      request_set(req, 200, "ok\n");
    } else if (path_len == 6 && memcmp(path, "/stats", 6) == 0) {
      req->kind = ANS_STATS;
    } else if (path_len == 5 && memcmp(path, "/work", 5) == 0) {
      rc = -1;
      if (u.field_set & (1 << UF_QUERY))
        rc = parse_query(conn->url + u.field_data[UF_QUERY].off,
                         u.field_data[UF_QUERY].len, req, s->lim.max_rounds);
      if (rc == 0)
        req->kind = ANS_WORK;
      else if (rc == -2)
        req->kind = ANS_BAD_ROUNDS;
      else
        request_set(req, 400, "expected /work?n=ROUNDS&id=TOKEN\n");
    } else {
      request_set(req, 404, "not found\n");
    }
  }
  if (conn_submit(conn, req) == UV_EAGAIN) {
    http_parser_pause(p, 1); /* Parse on in on_space(). */
    return;
  }
  /* Every answer counts, /stats and errors as much as /work: once the
   * connection holds --max-out-bytes of them, it parses no further and
   * reads no more until its client has taken half of them (conn_update()).
   * One read of pipelined requests cannot make more answers than that. */
  if (!conn->closing && !conn->write_blocked &&
      conn_pending(conn) > s->lim.max_out_bytes) {
    conn->write_blocked = 1;
    s->write_blocks++;
    http_parser_pause(p, 1);
  }
}


static http_parser_settings settings;


static int on_message_begin(http_parser* p) {
  conn_t* conn = p->data;
  conn->url_len = 0;
  conn->head_bytes = 0;
  conn->body_bytes = 0;
  conn->in_value = 1; /* So that the first field name starts a name. */
  conn->header = HEADER_OTHER;
  conn->hosts = 0;
  conn->expect = 0;
  conn->fresh = 0;
  conn->in_request = 1;
  conn->head_req = 0;
  conn->chunk_state = CHUNK_NONE;
  conn->trailers = 0;
  conn->request_start = uv_now(conn->server->loop);
  return 0;
}


static int on_url(http_parser* p, const char* at, size_t len) {
  conn_t* conn = p->data;
  conn->head_req = p->method == HTTP_HEAD; /* Known once the target starts */
  conn->head_bytes += len;
  if (conn->url_len + len > conn->server->lim.max_url) {
    conn->error_status = 414;
    return -1;
  }
  memcpy(conn->url + conn->url_len, at, len);
  conn->url_len += len;
  return 0;
}


static int head_bytes(conn_t* conn, size_t len) {
  conn->head_bytes += len;
  if (conn->head_bytes > conn->server->lim.max_head) {
    conn->error_status = 431;
    return -1;
  }
  return 0;
}


/* A field name may come in pieces, split across reads. Only Host and
 * Expect matter, so only 7 characters are kept. */
static int on_header_field(http_parser* p, const char* at, size_t len) {
  conn_t* conn = p->data;
  size_t i;

  if (head_bytes(conn, len) != 0)
    return -1;
  if (conn->in_value) {
    conn->in_value = 0;
    conn->name_len = 0;
  }
  for (i = 0; i < len; i++, conn->name_len++)
    if (conn->name_len < sizeof(conn->name))
      conn->name[conn->name_len] = at[i];
  return 0;
}


static int on_header_value(http_parser* p, const char* at, size_t len) {
  conn_t* conn = p->data;
  size_t i;

  if (head_bytes(conn, len) != 0)
    return -1;
  if (!conn->in_value) {
    conn->in_value = 1;
    conn->header = HEADER_OTHER;
    if (conn->name_len == 4 && strncasecmp(conn->name, "host", 4) == 0) {
      conn->header = HEADER_HOST;
      conn->hosts++;
    } else if (conn->name_len == 6 &&
               strncasecmp(conn->name, "expect", 6) == 0) {
      conn->header = HEADER_EXPECT;
      conn->expect = 1;
      conn->expect_len = 0;
    }
  }
  if (conn->header == HEADER_EXPECT)
    for (i = 0; i < len; i++, conn->expect_len++)
      if (conn->expect_len < sizeof(conn->expect_value))
        conn->expect_value[conn->expect_len] = at[i];
  return 0;
}


static void send_continue(conn_t* conn) {
  request_t* req;

  /* Optional, and the final answer still has to fit: without room under
   * --max-out-bytes for both, the client waits a while and sends its body
   * anyway. */
  if (conn_pending(conn) + sizeof(*req) + HEAD_BOUND >
      conn->server->lim.max_out_bytes)
    return;
  req = calloc(1, sizeof(*req));
  if (req == NULL)
    fail("calloc", UV_ENOMEM);
  /* Not a request of its own: it goes out just before the final answer of
   * the request being read, whose seq it takes. */
  req->conn = conn;
  req->kind = ANS_CONTINUE;
  req->seq = conn->next_seq;
  conn->live++;
  conn_submit(conn, req);
}


static int on_headers_complete(http_parser* p) {
  conn_t* conn = p->data;
  const limits_t* lim = &conn->server->lim;

  if (p->http_major != 1 || p->http_minor > 1) {
    conn->error_status = 505;
    return -1;
  }
  /* RFC 9112, 3.2: a 1.1 request without Host, or with two, is a 400. */
  if ((p->http_minor == 1 && conn->hosts == 0) || conn->hosts > 1) {
    conn->error_status = 400;
    return -1;
  }
  /* content_length is ULLONG_MAX when the request has none. */
  if (p->content_length != UINT64_MAX && p->content_length > lim->max_body) {
    conn->error_status = 413;
    return -1;
  }
  if (conn->expect) {
    if (conn->expect_len != 12 ||
        strncasecmp(conn->expect_value, "100-continue", 12) != 0) {
      conn->error_status = 417;
      return -1;
    }
    /* RFC 9110, 10.1.1: only a 1.1 client waits for it, and only for a
     * body. */
    if (p->http_minor == 1 &&
        ((p->flags & F_CHUNKED) ||
         (p->content_length != UINT64_MAX && p->content_length > 0)))
      send_continue(conn);
  }
  if (p->flags & F_CHUNKED) {
    /* The server reads a chunked body itself, strictly (conn_chunk()): the
     * parser skips it (1) and stops here, on the head's last byte. */
    conn->chunk_state = CHUNK_SIZE_START;
    http_parser_pause(p, 1);
    return 1;
  }
  return 0;
}


static int on_body(http_parser* p, const char* at, size_t len) {
  conn_t* conn = p->data;
  (void) at;
  conn->body_bytes += len;
  if (conn->body_bytes > conn->server->lim.max_body) {
    conn->error_status = 413;
    return -1;
  }
  return 0;
}


static int on_message_complete(http_parser* p) {
  conn_t* conn = p->data;
  conn->in_request = 0;
  conn->last_active = uv_now(conn->server->loop);
  dispatch(conn);
  /* After a last request, stop: whatever follows is not read. */
  if (conn->done_parsing || conn->closing)
    http_parser_pause(p, 1);
  return 0;
}


/* A request that does not parse: its error answer, then the connection
 * closes. */
static void parse_failed(conn_t* conn, int status) {
  request_t* req;

  conn->done_parsing = 1;
  conn->in_request = 0;
  conn->chunk_state = CHUNK_NONE;
  req = request_new(conn, HDR_CLOSE);
  req->head = conn->head_req;
  request_set(req, status,
              status == 505   ? "HTTP/1.0 and HTTP/1.1 only\n"
              : status == 417 ? "only 100-continue is expected\n"
              : status == 413 || status == 414 || status == 431
                  ? "request too large\n"
                  : "bad request\n");
  conn_submit(conn, req); /* A full worker: on_space() sends it. */
}


static int is_hex(unsigned char c, unsigned* v) {
  if (c >= '0' && c <= '9')
    *v = c - '0';
  else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
    *v = (c | 0x20) - 'a' + 10;
  else
    return 0;
  return 1;
}


/* RFC 9110, 5.6.2: the characters of a token (a field name). */
static int is_tchar(unsigned char c) {
  return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
         (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}


/* Reads a chunked body (RFC 9112, 7.1) strictly, where Debian's
 * http-parser is lenient: it takes any two bytes for the CRLF after a
 * chunk's data, any byte for the LF of a size line, and extensions of any
 * length and content. Here a chunk size is 1 to 16 hex digits; extensions
 * are ';' and visible characters, at most MAX_CHUNK_EXT bytes a chunk;
 * every line ends with CRLF; trailer fields are "name:value" lines, at most
 * MAX_TRAILERS, and with the extensions count against --max-head; the data
 * counts against --max-body. Returns 0 with *used the bytes read (all of
 * them, unless the body ended: CHUNK_DONE), or the status to answer. */
static int conn_chunk(conn_t* conn,
                      const unsigned char* data,
                      size_t len,
                      size_t* used) {
  const limits_t* lim = &conn->server->lim;
  chunk_state_t was;
  size_t i = 0, n;
  unsigned char c;
  unsigned v;

  while (i < len) {
    c = data[i];
    was = conn->chunk_state;
    switch (was) {
      case CHUNK_DATA:
        n = len - i;
        if (n > conn->chunk_left)
          n = (size_t) conn->chunk_left;
        conn->chunk_left -= n;
        conn->body_bytes += n;
        i += n;
        if (conn->chunk_left == 0)
          conn->chunk_state = CHUNK_DATA_CR;
        continue;
      case CHUNK_SIZE_START:
        if (!is_hex(c, &v))
          return 400;
        conn->chunk_left = v;
        conn->chunk_digits = 1;
        conn->chunk_ext = 0;
        conn->chunk_state = CHUNK_SIZE;
        break;
      case CHUNK_SIZE:
        if (is_hex(c, &v)) {
          if (++conn->chunk_digits > 16)
            return 400; /* Would overflow 64 bits, or pads it with zeros. */
          conn->chunk_left = conn->chunk_left * 16 + v;
        } else if (c == '\r') {
          conn->chunk_state = CHUNK_SIZE_LF;
        } else if (c == ';') {
          conn->chunk_state = CHUNK_EXT;
        } else if (c == ' ' || c == '\t') {
          conn->chunk_state = CHUNK_EXT_BWS;
        } else {
          return 400;
        }
        break;
      case CHUNK_EXT_BWS:
        if (c == ';')
          conn->chunk_state = CHUNK_EXT;
        else if (c != ' ' && c != '\t')
          return 400;
        break;
      case CHUNK_EXT:
        if (c == '\r')
          conn->chunk_state = CHUNK_SIZE_LF;
        else if (c != '\t' && (c < ' ' || c > '~'))
          return 400;
        break;
      case CHUNK_SIZE_LF:
        if (c != '\n')
          return 400;
        if (conn->chunk_left == 0) {
          conn->chunk_state = CHUNK_TRAILER_START;
        } else if (conn->chunk_left > lim->max_body - conn->body_bytes) {
          return 413;
        } else {
          conn->chunk_state = CHUNK_DATA;
        }
        break;
      case CHUNK_DATA_CR:
        if (c != '\r')
          return 400;
        conn->chunk_state = CHUNK_DATA_LF;
        break;
      case CHUNK_DATA_LF:
        if (c != '\n')
          return 400;
        conn->chunk_state = CHUNK_SIZE_START;
        break;
      case CHUNK_TRAILER_START:
        if (c == '\r') {
          conn->chunk_state = CHUNK_END_LF;
          break;
        }
        if (!is_tchar(c))
          return 400; /* Also a folded line (obs-fold). */
        if (++conn->trailers > MAX_TRAILERS)
          return 431;
        conn->chunk_state = CHUNK_TRAILER_NAME;
        break;
      case CHUNK_TRAILER_NAME:
        if (c == ':')
          conn->chunk_state = CHUNK_TRAILER_VALUE;
        else if (!is_tchar(c))
          return 400;
        break;
      case CHUNK_TRAILER_VALUE:
        if (c == '\r')
          conn->chunk_state = CHUNK_TRAILER_LF;
        else if (c != '\t' && (c < ' ' || c == 127))
          return 400;
        break;
      case CHUNK_TRAILER_LF:
        if (c != '\n')
          return 400;
        conn->chunk_state = CHUNK_TRAILER_START;
        break;
      case CHUNK_END_LF:
        if (c != '\n')
          return 400;
        conn->chunk_state = CHUNK_DONE;
        *used = i + 1;
        return 0;
      case CHUNK_NONE:
      case CHUNK_DONE:
        abort();
    }
    /* Extensions and trailers: bounded per chunk and, with the head, per
     * request. */
    if ((was == CHUNK_EXT_BWS || was == CHUNK_EXT) &&
        ++conn->chunk_ext > MAX_CHUNK_EXT)
      return 400;
    if ((was == CHUNK_EXT_BWS || was == CHUNK_EXT ||
         was >= CHUNK_TRAILER_START) &&
        ++conn->head_bytes > lim->max_head)
      return 431;
    i++;
  }
  *used = len;
  return 0;
}


/* Parses data; returns how much of it was used. Less than len only when
 * parsing paused behind a request (the worker is full, conn->stalled, or the
 * connection holds --max-out-bytes of answers, conn->write_blocked): the
 * rest must be parsed later. A chunked body is read by conn_chunk(), the
 * rest by the parser. */
static size_t conn_parse(conn_t* conn, const char* data, size_t len) {
  enum http_errno err;
  size_t used = 0, n;
  int status;

  for (;;) {
    if (conn->chunk_state == CHUNK_DONE) {
      /* The parser was told to skip the body, and stopped on the byte that
       * ended the head: that byte, now, ends the message. */
      conn->chunk_state = CHUNK_NONE;
      http_parser_pause(&conn->parser, 0);
      http_parser_execute(&conn->parser, &settings, "\n", 1);
    } else if (used == len) {
      return len;
    } else if (conn->chunk_state != CHUNK_NONE) {
      status =
          conn_chunk(conn, (const unsigned char*) data + used, len - used, &n);
      if (status != 0) {
        conn->server->bad_chunked++;
        parse_failed(conn, status);
        return len;
      }
      used += n;
      continue;
    } else {
      http_parser_pause(&conn->parser, 0);
      used += http_parser_execute(&conn->parser, &settings, data + used,
                                  len - used);
    }
    err = HTTP_PARSER_ERRNO(&conn->parser);
    if (conn->closing)
      return len;
    if (err == HPE_PAUSED && conn->chunk_state == CHUNK_SIZE_START) {
      used++; /* The head's last byte: conn_chunk() reads what follows. */
      continue;
    }
    if (err == HPE_PAUSED)
      return conn->done_parsing ? len : used;
    if (err != HPE_OK) {
      parse_failed(conn, conn->error_status != 0      ? conn->error_status
                         : err == HPE_HEADER_OVERFLOW ? 431
                                                      : 400);
      return len;
    }
    if (conn->parser.upgrade) {
      conn->done_parsing = 1; /* No protocol upgrades here. */
      return len;
    }
  }
}


static void on_alloc(uv_handle_t* handle, size_t size, uv_buf_t* buf) {
  /* One buffer for every connection: a read is parsed whole, and what a
   * stalled connection could not parse is copied, before the next read. */
  (void) handle;
  (void) size;
  *buf = uv_buf_init(server.read_buf, sizeof(server.read_buf));
}


static void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  conn_t* conn = stream->data;
  size_t used;

  if (nread < 0) {
    if (nread != UV_EOF || conn->lingering) {
      conn_close(conn); /* An error, or the EOF we lingered for. */
      return;
    }
    /* A half-close: answer what came before it, then close. A request cut
     * short by the EOF gets no answer. */
    conn->peer_eof = 1;
    conn->done_parsing = 1;
    conn->in_request = 0;
    conn->server->half_closes++;
    conn_update(conn);
    return;
  }
  if (nread == 0 || conn->done_parsing)
    return; /* Nothing, or bytes after the last request: dropped. */

  used = conn_parse(conn, buf->base, (size_t) nread);
  if (conn->closing)
    return;
  if (used < (size_t) nread && !conn->done_parsing) {
    /* The worker is full: keep the rest for when it has room. */
    conn->saved_len = (size_t) nread - used;
    conn->saved_off = 0;
    conn->saved = xmalloc(conn->saved_len);
    memcpy(conn->saved, buf->base + used, conn->saved_len);
  }
  conn_flush(conn);
  if (!conn->closing)
    conn_update(conn);
}


/* Parses what a stall kept, while nothing stops it. */
static void conn_parse_saved(conn_t* conn) {
  size_t used;

  while (conn->saved_len > 0 && !conn->closing && !conn->done_parsing &&
         conn->stalled == NULL && !conn->write_blocked) {
    used = conn_parse(conn, conn->saved + conn->saved_off, conn->saved_len);
    conn->saved_off += used;
    conn->saved_len -= used;
  }
  if (conn->closing)
    return;
  if (conn->saved_len == 0 || conn->done_parsing) {
    free(conn->saved);
    conn->saved = NULL;
    conn->saved_len = conn->saved_off = 0;
  }
}


static void on_shutdown(uv_shutdown_t* sreq, int status) {
  conn_t* conn = sreq->data;
  if (conn->closing)
    return;
  if (status < 0 || conn->peer_eof) {
    conn_close(conn); /* Both sides are done. */
    return;
  }
  /* Our side is done. Read and drop until the client closes too, so that
   * unread bytes in the kernel do not turn our close into a reset that
   * could destroy the last answer before the client read it. */
  conn->linger_start = uv_now(conn->server->loop);
  conn->lingering = 1;
  conn_update(conn);
}


/* After the last answer has been handed to libuv, half-close the
 * connection (uv_shutdown waits for the writes). */
static void conn_maybe_finish(conn_t* conn) {
  if (conn->closing || conn->shutdown.data != NULL || !conn->done_parsing ||
      conn->owed != 0 || conn->inflight != 0 || conn->out_len != 0)
    return;
  conn->shutdown.data = conn;
  if (uv_shutdown(&conn->shutdown, (uv_stream_t*) &conn->tcp, on_shutdown) != 0)
    conn_close(conn);
}


/* When the connection must next be looked at, and why. */
static uint64_t conn_deadline(const conn_t* conn, deadline_kind_t* kind) {
  const limits_t* lim = &conn->server->lim;
  uint64_t d = NO_DEADLINE;
  int wait;

  *kind = DEADLINE_NONE;
  if (conn->closing)
    return d;
  if (conn->lingering) {
    *kind = DEADLINE_LINGER;
    return conn->linger_start + lim->linger;
  }
  if (conn->write_episode) {
    *kind = DEADLINE_WRITE;
    d = conn->window_start + lim->write_timeout;
  }
  /* The suspended workers and the stopped reading may wait for the client
   * to take what the kernel holds. */
  wait = conn->out_suspended || conn->write_blocked;
  /* Not reading: waiting for us, or for the writes, not the client's
   * fault. */
  if (conn->reading && !conn->done_parsing) {
    if (conn->in_request || conn->fresh) {
      if (conn->request_start + lim->header_timeout < d) {
        *kind = DEADLINE_HEADER;
        d = conn->request_start + lim->header_timeout;
      }
    } else if (conn->owed == 0 && conn->writes == 0) {
      if (conn->acked == conn->queued_bytes) {
        *kind = DEADLINE_IDLE;
        d = conn->last_active + lim->idle_timeout;
      } else if (conn->last_active + lim->idle_timeout < d) {
        /* Answers the client has not taken are not idleness: the write
         * deadline holds until it has taken them all, and the idle
         * deadline, if it comes first, from then. */
        wait = 1;
      }
    }
  }
  /* Then no write callback will come to say the client took them. */
  if (wait && conn->writes == 0 && conn->acked != conn->queued_bytes &&
      conn->poll_due < d) {
    *kind = DEADLINE_POLL;
    d = conn->poll_due;
  }
  return d;
}


static void on_timer_run(uvs_task_t* task) {
  (void) task;
}


static void conn_arm(conn_t* conn);


static void on_timer_done(uvs_task_t* task, int status) {
  conn_t* conn = task->data;
  server_t* s = conn->server;
  deadline_kind_t kind;
  uint64_t d;

  (void) status;
  conn->timer_armed = 0;
  if (!conn->closing) {
    d = conn_deadline(conn, &kind);
    if (d == NO_DEADLINE || uv_now(s->loop) < d) {
      conn_arm(conn);
    } else if (kind == DEADLINE_POLL ||
               (kind == DEADLINE_WRITE && conn_write_window(conn))) {
      /* What the client took may resume the workers or the reading: the
       * measure is acted on, and the deadline armed again. */
      if (kind == DEADLINE_POLL)
        s->polls++;
      conn_update(conn);
    } else {
      s->timeouts[kind]++;
      conn_close(conn);
    }
  }
  conn_unref(conn);
}


/* Keeps one delayed task per connection due at its deadline. Every read,
 * write and request end moves the deadline, and the task is re-armed in
 * place with uvs_task_reschedule() (O(1), no allocation): the idle timeout
 * of a server. If the task has just fallen due (UV_EBUSY), on_timer_done()
 * looks at the deadline and arms it again. */
static void conn_arm(conn_t* conn) {
  server_t* s = conn->server;
  deadline_kind_t kind;
  uint64_t d = conn_deadline(conn, &kind);
  uint64_t now = uv_now(s->loop);
  uint64_t delay = d > now ? d - now : 0;

  if (d == NO_DEADLINE)
    return;
  if (conn->timer_armed) {
    if (conn->timer_due != d && uvs_task_reschedule(&conn->timer, delay) == 0)
      conn->timer_due = d;
    return;
  }
  uvs_task_init(&conn->timer, on_timer_run, on_timer_done);
  conn->timer.data = conn;
  if (uvs_schedule_after(&s->timers, &conn->timer, delay) != 0) {
    conn_close(conn);
    return;
  }
  conn->timer_armed = 1;
  conn->timer_due = d;
  conn->refs++;
}


static void conn_read_start(conn_t* conn) {
  if (uv_read_start((uv_stream_t*) &conn->tcp, on_alloc, on_read) != 0) {
    conn_close(conn);
    return;
  }
  conn->reading = 1;
  /* A request cut by a stall gets its whole deadline again: the wait was
   * ours. */
  if (conn->in_request)
    conn->request_start = uv_now(conn->server->loop);
}


/* After anything that changes a connection's state: decides whether it
 * reads, parses what a stall kept, half-closes when done, and keeps its
 * deadline. */
static void conn_update(conn_t* conn) {
  const limits_t* lim = &conn->server->lim;
  size_t pending;
  int want;

  if (conn->closing)
    return;
  conn_measure(conn);
  pending = conn_pending(conn);
  if (!conn->write_blocked && pending > lim->max_out_bytes) {
    conn->write_blocked = 1;
    conn->server->write_blocks++;
  } else if (conn->write_blocked && pending <= lim->max_out_bytes / 2) {
    conn->write_blocked = 0;
  }
  conn_parse_saved(conn);
  if (conn->closing)
    return;
  conn_flush(conn);
  if (conn->closing)
    return;
  /* The output side: suspends or resumes the workers. */
  conn_output_pressure(conn);
  /* Once done parsing, read and drop until EOF: it is how a reset or the
   * client's close is seen. */
  want = !conn->peer_eof &&
         (conn->done_parsing || (conn->stalled == NULL &&
                                 !conn->write_blocked && conn->saved == NULL));
  if (want && !conn->reading) {
    conn_read_start(conn);
    if (conn->closing)
      return;
  } else if (!want && conn->reading) {
    uv_read_stop((uv_stream_t*) &conn->tcp);
    conn->reading = 0;
  }
  conn_maybe_finish(conn);
  if (!conn->closing)
    conn_arm(conn);
}


static void conn_close(conn_t* conn) {
  server_t* s = conn->server;
  uvs_worker_metrics_t m;
  request_t* req;
  unsigned g;
  int rc;

  if (conn->closing)
    return;
  conn->closing = 1;
  if (conn->rejecting)
    s->rejecting--;
  else
    s->open--;
  if (conn->prev != NULL)
    conn->prev->next = conn->next;
  else
    s->conns = conn->next;
  if (conn->next != NULL)
    conn->next->prev = conn->prev;
  conn_uncount_addr(conn);

  /* Answers that are ready but unsent die with conn->out. The others belong
   * to the library until work_done() hands them back, and it frees them. */
  if (conn->stalled != NULL) {
    request_free(conn->stalled);
    conn->stalled = NULL;
  }
  if (conn->held != NULL) {
    request_free(conn->held);
    conn->held = NULL;
  }
  if (conn->timer_armed)
    uvs_task_cancel(&conn->timer); /* on_timer_done() follows. */
  /* suspend: close begins */
  /* A close ends a suspension: the workers hand back their queued tasks
   * (UVS_CANCEL) as if their count were 0, so no resume is owed. The
   * library's count must be ours: one suspend each, not resumed. */
  for (g = 0; conn->has_worker && g < GROUP_COUNT; g++)
    if (uvs_worker_metrics(&conn->workers[g], &m) != 0 ||
        m.suspended != (uint64_t) conn->out_suspended)
      s->suspend_mismatch++;
  if (conn->out_suspended) {
    conn->out_suspended = 0;
    s->out_suspended--;
    s->out_suspend_closes++;
  }
  /* suspend: close ends */
  /* Nobody is left to read what its tasks compute. The oldest task the
   * library still holds is the one running, if one is: interrupted, a
   * /work stops at its next uvs_task_check() (work_hash()) and comes back
   * with status 0, unfinished. If none runs, it is the first queued one,
   * a /work waiting for its next turn after a yield perhaps: interrupted,
   * it is cancelled. Older ones are on their way back (UV_EBUSY). The
   * workers' close hands back the rest with UV_ECANCELED, unrun; it would
   * reach the running task too (a close with UVS_CANCEL interrupts it),
   * but the connection says which task it stops. */
  for (req = conn->first_inflight; req != NULL; req = req->next_inflight)
    if (uvs_task_interrupt(&req->task) != UV_EBUSY)
      break;
  conn->first_inflight = conn->last_inflight = NULL;
  for (g = 0; conn->has_worker && g < GROUP_COUNT; g++) {
    rc = uvs_worker_close(&conn->workers[g], UVS_CANCEL, on_worker_closed);
    if (rc != 0)
      fail("uvs_worker_close", rc);
  }
  uv_close((uv_handle_t*) &conn->tcp, on_tcp_closed);
}


static void on_shed_closed(uv_handle_t* handle) {
  free(handle);
}


/* Over every cap: accept and close at once, so that the connection leaves
 * the kernel's backlog instead of being retried there forever. */
static void shed(server_t* s, uv_stream_t* listener) {
  uv_tcp_t* tcp = xmalloc(sizeof(*tcp));
  if (uv_tcp_init(s->loop, tcp) != 0) {
    free(tcp);
    return;
  }
  uv_accept(listener, (uv_stream_t*) tcp);
  s->unanswered++;
  uv_close((uv_handle_t*) tcp, on_shed_closed);
}


/* The key of a client address for --max-conn-per-addr: an IPv4 address
 * whole (also when mapped into IPv6), an IPv6 address by its /64, which one
 * host commonly holds whole. */
static int addr_key(const struct sockaddr_storage* sa, unsigned char* key) {
  static const unsigned char v4_mapped[12] = {0, 0, 0, 0, 0,    0,
                                              0, 0, 0, 0, 0xff, 0xff};
  const unsigned char* a6;

  memset(key, 0, sizeof(((addr_count_t*) 0)->key));
  if (sa->ss_family == AF_INET) {
    key[0] = 4;
    memcpy(key + 1, &((const struct sockaddr_in*) sa)->sin_addr, 4);
    return 0;
  }
  if (sa->ss_family != AF_INET6)
    return UV_EAFNOSUPPORT;
  a6 = ((const struct sockaddr_in6*) sa)->sin6_addr.s6_addr;
  if (memcmp(a6, v4_mapped, sizeof(v4_mapped)) == 0) {
    key[0] = 4;
    memcpy(key + 1, a6 + 12, 4);
  } else {
    key[0] = 6;
    memcpy(key + 1, a6, 8);
  }
  return 0;
}


/* Where key's count is in the table, or where it would go. */
static addr_count_t** addr_slot(server_t* s, const unsigned char* key) {
  const size_t size = sizeof(((addr_count_t*) 0)->key);
  uint32_t h = 2166136261u; /* FNV-1a */
  addr_count_t** slot;
  size_t i;

  for (i = 0; i < size; i++) h = (h ^ key[i]) * 16777619u;
  slot = &s->addrs[h & (s->addr_buckets - 1)];
  while (*slot != NULL && memcmp((*slot)->key, key, size) != 0)
    slot = &(*slot)->next;
  return slot;
}


/* Counts an accepted connection against its client address. Returns 0,
 * UV_EBUSY if the address already holds --max-conn-per-addr connections,
 * or the error of naming the peer (gone already). */
static int conn_count_addr(conn_t* conn) {
  server_t* s = conn->server;
  struct sockaddr_storage peer;
  unsigned char key[sizeof(((addr_count_t*) 0)->key)];
  int len = sizeof(peer);
  addr_count_t** slot;
  int rc;

  rc = uv_tcp_getpeername(&conn->tcp, (struct sockaddr*) &peer, &len);
  if (rc == 0)
    rc = addr_key(&peer, key);
  if (rc != 0)
    return rc;
  slot = addr_slot(s, key);
  if (*slot == NULL) {
    *slot = calloc(1, sizeof(**slot));
    if (*slot == NULL)
      fail("calloc", UV_ENOMEM);
    memcpy((*slot)->key, key, sizeof(key));
  } else if ((*slot)->count >= s->lim.max_per_addr) {
    return UV_EBUSY;
  }
  (*slot)->count++;
  conn->addr = *slot;
  return 0;
}


static void conn_uncount_addr(conn_t* conn) {
  addr_count_t** slot;
  addr_count_t* entry = conn->addr;

  if (entry == NULL)
    return;
  conn->addr = NULL;
  if (--entry->count > 0)
    return;
  slot = addr_slot(conn->server, entry->key);
  *slot = entry->next;
  free(entry);
}


static void on_connection(uv_stream_t* listener, int status) {
  server_t* s = listener->data;
  const limits_t* lim = &s->lim;
  uvs_worker_options_t wopts;
  request_t* req;
  conn_t* conn;
  unsigned g;
  int reject;
  int sndbuf;
  int rc;

  if (status < 0) {
    /* EMFILE and the like. libuv has already accepted and closed what was
     * waiting, with the descriptor it keeps in reserve (uv__emfile_trick),
     * so the listener does not spin. Log at most once a second. */
    s->accept_errors++;
    if (uv_now(s->loop) - s->last_accept_log >= 1000) {
      s->last_accept_log = uv_now(s->loop);
      fprintf(stderr, "http-pipeline: accept: %s (%" PRIu64 " so far)\n",
              uv_strerror(status), s->accept_errors);
    }
    return;
  }
  reject = s->open >= lim->max_conns;
  if (reject && s->rejecting >= lim->max_rejecting) {
    shed(s, listener);
    return;
  }
  conn = calloc(1, sizeof(*conn) + lim->max_url);
  if (conn == NULL)
    fail("calloc", UV_ENOMEM);
  conn->server = s;
  conn->tcp.data = conn;
  for (g = 0; g < GROUP_COUNT; g++) conn->workers[g].data = conn;
  conn->parser.data = conn;
  atomic_init(&conn->busy, 0);
  rc = uv_tcp_init(s->loop, &conn->tcp);
  if (rc != 0) {
    free(conn);
    shed(s, listener);
    return;
  }
  conn->refs = 1;
  rc = uv_accept(listener, (uv_stream_t*) &conn->tcp);
  if (rc == 0 && s->addr_buckets != 0) {
    /* Over its address's cap: closed at once, unanswered, so that one
     * client cannot hold every slot of --max-conns. */
    rc = conn_count_addr(conn);
    if (rc == UV_EBUSY)
      s->addr_refused++;
  }
  if (rc == 0 && !reject && s->mode != MODE_INLINE) {
    memset(&wopts, 0, sizeof(wopts));
    wopts.max_pending = lim->max_inflight;
    wopts.on_full = UVS_FULL_REJECT;
    wopts.low_water = lim->max_inflight / 2;
    wopts.space_cb = on_space;
    wopts.max_wait_ms = lim->max_wait;
    /* Both workers, or neither: conn_close() closes them together. */
    for (g = 0; rc == 0 && g < GROUP_COUNT; g++) {
      wopts.group = g;
      rc = uvs_worker_init_ex(&s->sched, &conn->workers[g],
                              s->mode == MODE_POOL ? UVS_POOL : UVS_LOOP,
                              &wopts);
    }
    if (rc == 0) {
      conn->has_worker = 1;
      conn->refs += GROUP_COUNT;
    } else if (g > 1) {
      /* The first is open; it holds the connection until it has closed. */
      conn->refs++;
      uvs_worker_close(&conn->workers[GROUP_INTERACTIVE], UVS_CANCEL,
                       on_worker_closed);
    }
  }
  if (rc != 0) {
    conn_uncount_addr(conn);
    uv_close((uv_handle_t*) &conn->tcp, on_tcp_closed);
    return;
  }
  s->accepted++;
  conn->next = s->conns;
  if (s->conns != NULL)
    s->conns->prev = conn;
  s->conns = conn;
  uv_tcp_nodelay(&conn->tcp, 1);
  if (lim->sndbuf != 0) {
    /* Fixed, not autotuned: a client that does not read can make the
     * kernel hold this much of our answers, not megabytes. */
    sndbuf = (int) lim->sndbuf;
    uv_send_buffer_size((uv_handle_t*) &conn->tcp, &sndbuf);
  }
  http_parser_init(&conn->parser, HTTP_REQUEST);
  conn->parser.data = conn;
  conn->fresh = 1;
  conn->request_start = conn->last_active = uv_now(s->loop);
  conn->light_credit = (int64_t) lim->light_ms * 1000000;
  conn->light_time = conn->last_active;
  if (reject) {
    /* Answered before anything is read: the request does not matter. */
    conn->rejecting = 1;
    s->rejecting++;
    s->rejected++;
    conn->done_parsing = 1;
    req = request_new(conn, HDR_CLOSE);
    request_set(req, 503, "too many connections\n");
    conn_submit(conn, req);
  } else {
    s->open++;
  }
  conn_update(conn);
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
  uv_close((uv_handle_t*) &s->trimmer, NULL);
  rc = uvs_sched_close(&s->sched, UVS_CANCEL, NULL);
  if (rc != 0)
    fail("uvs_sched_close", rc);
}


static void on_signal(uv_signal_t* handle, int signum) {
  (void) signum;
  server_stop(handle->data);
}


static void usage(FILE* f, const limits_t* d) {
  fprintf(
      f,
      "usage: http-pipeline [--host ADDR] [--port N] "
      "[--mode pool|loop|inline] [--threads T] [LIMITS]\n"
      "  --host ADDR           address to bind (default 127.0.0.1)\n"
      "  --port N              port to bind; 0 picks a free one (default "
      "8080)\n"
      "  --mode M              pool: /work runs on libuv's pool, one worker "
      "per\n"
      "                        connection (default); loop: on the loop "
      "thread, one\n"
      "                        loop worker per connection; inline: in the "
      "parser,\n"
      "                        without uvsched\n"
      "  --threads T           libuv's pool size (default: the number of "
      "CPUs)\n"
      "Limits (0 is not allowed unless stated):\n"
      "  --max-conns N         connections served at once; more get 503 and "
      "are\n"
      "                        closed (default %" PRIu64
      ", lowered to fit RLIMIT_NOFILE)\n"
      "  --max-rejecting N     connections being answered 503 at once; more "
      "are\n"
      "                        closed unanswered (default %" PRIu64
      ")\n"
      "  --max-conn-per-addr N connections of one client address (IPv6: "
      "its /64);\n"
      "                        more are closed at once, unanswered; 0 = "
      "no cap\n"
      "                        (default %" PRIu64
      ")\n"
      "  --max-inflight N      requests queued on one connection's worker "
      "before it\n"
      "                        stops reading (default %" PRIu64
      "; reads again at N/2)\n"
      "  --max-out-bytes N     answer bytes one connection may hold or its "
      "client\n"
      "                        has not taken, and the most its parsed "
      "requests'\n"
      "                        answers can take, before it stops parsing and "
      "reading\n"
      "                        (default %" PRIu64
      "; reads again at N/2); past N/2 of\n"
      "                        answers not taken, its workers are "
      "suspended, and\n"
      "                        resumed at N/4\n"
      "  --sndbuf N            SO_SNDBUF of each connection, which bounds "
      "the answers\n"
      "                        the kernel holds for a client; 0 = the "
      "kernel's\n"
      "                        autotuning, up to tcp_wmem's maximum "
      "(default %" PRIu64
      ")\n"
      "  --header-timeout MS   a request, head and body, must arrive within "
      "MS of\n"
      "                        its first byte (default %" PRIu64
      ")\n"
      "  --idle-timeout MS     a kept-alive connection with nothing owed is "
      "closed\n"
      "                        after MS (default %" PRIu64
      ")\n"
      "  --write-timeout MS    a connection with answers waiting to be "
      "written must\n"
      "                        send --min-send-rate bytes a second of them "
      "in every\n"
      "                        MS, or it is closed (default %" PRIu64
      ")\n"
      "  --min-send-rate B     see --write-timeout; 0 = at least one byte "
      "(default\n"
      "                        %" PRIu64
      ")\n"
      "  --linger MS           after the last answer, wait at most MS for "
      "the client's\n"
      "                        EOF (default %" PRIu64
      ")\n"
      "  --max-rounds N        most n= of /work; more is a 400 (default "
      "%" PRIu64
      ")\n"
      "  --max-wait MS         a task that waited more than MS on its "
      "connection's\n"
      "                        worker is shed: /work gets a 503 with "
      "Retry-After, in\n"
      "                        its place, and the connection goes on. 0 = "
      "off, the\n"
      "                        default: the wait includes the "
      "connection's own\n"
      "                        earlier requests, so a client pipelining "
      "a few\n"
      "                        max-cost /work would be shed even on an "
      "idle server.\n"
      "                        Set it to about the clients' timeout "
      "(default %" PRIu64
      ")\n"
      "  --max-url N           bytes of a request target; more is a 414 "
      "(default %" PRIu64
      ")\n"
      "  --max-head N          bytes of a request head, with a chunked "
      "body's\n"
      "                        extensions and trailers; more is a 431 "
      "(default %" PRIu64
      ")\n"
      "  --max-body N          bytes of a body; more is a 413 (default "
      "%" PRIu64
      ")\n"
      "  --concurrency K       most pool threads running /work at once "
      "(scheduler's\n"
      "                        max_concurrency; default: --threads)\n"
      "  --budget N            most tasks a drain runs before the next "
      "connection's\n"
      "                        turn; 0 = uvsched's time slice (default "
      "%" PRIu64
      ")\n"
      "  --heavy-rounds N      /work with n >= N is heavy: it runs in a group "
      "that\n"
      "                        leaves one pool thread to the rest; 0 = "
      "nothing is\n"
      "                        heavy (default %" PRIu64 ")\n",
      d->max_conns, d->max_rejecting, d->max_per_addr, d->max_inflight,
      d->max_out_bytes, d->sndbuf, d->header_timeout, d->idle_timeout,
      d->write_timeout, d->min_send_rate, d->linger, d->max_rounds, d->max_wait,
      d->max_url, d->max_head, d->max_body, d->budget, d->heavy_rounds);
  fprintf(f,
          "  --light-ms MS         run time of light work one connection may "
          "spend a\n"
          "                        second, measured; past it, its /work "
          "runs in the\n"
          "                        bulk group until the budget has "
          "refilled; 0 = no\n"
          "                        budget (default %" PRIu64
          ")\n"
          "Prints \"listening on http://ADDR:PORT\" once bound; stops on\n"
          "SIGINT or SIGTERM and exits 0 only if every check held.\n",
          d->light_ms);
}


static const limits_t default_limits = {
    .max_conns = 1024,
    .max_rejecting = 64,
    .max_inflight = 64,
    .max_out_bytes = 65536,
    .header_timeout = 10000,
    .idle_timeout = 30000,
    .write_timeout = 10000,
    .linger = 2000,
    .max_rounds = 1000000,
    .max_wait = 0, /* Off: see usage(). */
    .max_url = 2048,
    .max_head = 8192,
    .max_body = 8192,
    .max_per_addr = 256,
    .min_send_rate = 1024,
    .concurrency = 0, /* --threads */
    .budget = 0,
    .heavy_rounds = 10000, /* ~3 ms here: three time slices. */
    .light_ms = 10,        /* 1 % of a thread a connection. */
};


/* What a round of /work takes here, to start with: the best of three
 * runs of COST_ROUNDS rounds. The /work that run later refine it
 * (conn_light_settle()). */
static uint64_t round_cost(void) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  uint64_t best = UINT64_MAX, t;
  int i;

  for (i = 0; i < 3; i++) {
    t = uv_hrtime();
    sha256_iterate("cost", 4, COST_ROUNDS, digest);
    t = uv_hrtime() - t;
    if (t < best)
      best = t;
  }
  best /= COST_ROUNDS + 1;
  return best > 0 ? best : 1;
}


static uint64_t parse_number(const char* s,
                             uint64_t lo,
                             uint64_t hi,
                             const char* what) {
  char* end;
  unsigned long long v;
  errno = 0;
  v = strtoull(s, &end, 10);
  if (errno != 0 || *s == '\0' || *s == '-' || *end != '\0' || v < lo ||
      v > hi) {
    fprintf(stderr, "http-pipeline: bad %s: %s (%" PRIu64 " to %" PRIu64 ")\n",
            what, s, lo, hi);
    usage(stderr, &default_limits);
    exit(2);
  }
  return (uint64_t) v;
}


/* Raises the soft descriptor limit as far as the caps need, or lowers
 * --max-conns to what the limit allows: the server must hit its own cap,
 * which it answers, before EMFILE, which it cannot. */
static void fit_fd_limit(limits_t* lim, int conns_given) {
  const uint64_t spare = 64; /* Loop, signals, pool, stdio, logs. */
  struct rlimit rl;
  uint64_t need = lim->max_conns + lim->max_rejecting + spare;
  uint64_t avail;

  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need
                      ? need
                      : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
    /* Keep a quarter of what is left for the 503s. */
    avail = rl.rlim_cur > spare + 2 ? rl.rlim_cur - spare : 2;
    if (lim->max_rejecting > avail / 4)
      lim->max_rejecting = avail / 4 > 0 ? avail / 4 : 1;
    lim->max_conns = avail - lim->max_rejecting;
    if (conns_given)
      fprintf(stderr,
              "http-pipeline: RLIMIT_NOFILE is %" PRIu64
              ": --max-conns lowered to %" PRIu64 "\n",
              (uint64_t) rl.rlim_cur, lim->max_conns);
  }
}


int main(int argc, char** argv) {
  static const struct {
    const char* name;
    size_t offset;
    uint64_t lo, hi;
  } limit_options[] = {
      {"--max-conns", offsetof(limits_t, max_conns), 1, 1000000},
      {"--max-rejecting", offsetof(limits_t, max_rejecting), 1, 100000},
      {"--max-inflight", offsetof(limits_t, max_inflight), 1, 1000000},
      {"--max-out-bytes", offsetof(limits_t, max_out_bytes), 1024, 1 << 30},
      {"--sndbuf", offsetof(limits_t, sndbuf), 0, 1 << 30},
      {"--header-timeout", offsetof(limits_t, header_timeout), 1, 86400000},
      {"--idle-timeout", offsetof(limits_t, idle_timeout), 1, 86400000},
      {"--write-timeout", offsetof(limits_t, write_timeout), 1, 86400000},
      {"--linger", offsetof(limits_t, linger), 1, 86400000},
      {"--max-rounds", offsetof(limits_t, max_rounds), 0, 100000000},
      {"--max-wait", offsetof(limits_t, max_wait), 0, 1000000},
      {"--max-url", offsetof(limits_t, max_url), 16, 1 << 20},
      {"--max-head", offsetof(limits_t, max_head), 64, 1 << 20},
      {"--max-body", offsetof(limits_t, max_body), 0, 1 << 30},
      {"--max-conn-per-addr", offsetof(limits_t, max_per_addr), 0, 1000000},
      {"--min-send-rate", offsetof(limits_t, min_send_rate), 0, 1 << 30},
      {"--concurrency", offsetof(limits_t, concurrency), 1, 1024},
      {"--budget", offsetof(limits_t, budget), 0, 1000000},
      {"--heavy-rounds", offsetof(limits_t, heavy_rounds), 0, 100000000},
      {"--light-ms", offsetof(limits_t, light_ms), 0, 1000},
  };
  server_t* s = &server;
  const char* host = "127.0.0.1";
  uint64_t port = 8080;
  uint64_t threads = uv_available_parallelism();
  uvs_sched_options_t sopts;
  uvs_group_options_t groups[GROUP_COUNT];
  uint64_t cap;
  char threads_env[32];
  struct sockaddr_storage addr;
  int addr_len = sizeof(addr);
  char bound[64];
  uint64_t violations;
  const char* fault;
  size_t k;
  int i, rc, ok, suspend_ok, conns_given = 0;

  s->mode = MODE_POOL;
  s->lim = default_limits;
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout, &default_limits);
      return 0;
    }
    if (i + 1 >= argc) {
      usage(stderr, &default_limits);
      return 2;
    }
    for (k = 0; k < sizeof(limit_options) / sizeof(limit_options[0]); k++)
      if (strcmp(argv[i], limit_options[k].name) == 0)
        break;
    if (k < sizeof(limit_options) / sizeof(limit_options[0])) {
      *(uint64_t*) ((char*) &s->lim + limit_options[k].offset) = parse_number(
          argv[i + 1], limit_options[k].lo, limit_options[k].hi, argv[i] + 2);
      conns_given |= strcmp(argv[i], "--max-conns") == 0;
      i++;
    } else if (strcmp(argv[i], "--host") == 0) {
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
        usage(stderr, &default_limits);
        return 2;
      }
    } else {
      usage(stderr, &default_limits);
      return 2;
    }
  }
  if (s->lim.concurrency == 0)
    s->lim.concurrency = threads;
  fit_fd_limit(&s->lim, conns_given);
  if (s->lim.max_per_addr != 0) {
    /* About one bucket per connection the server can hold. */
    s->addr_buckets = 64;
    while (s->addr_buckets < s->lim.max_conns + s->lim.max_rejecting)
      s->addr_buckets *= 2;
    s->addrs = calloc(s->addr_buckets, sizeof(*s->addrs));
    if (s->addrs == NULL)
      fail("calloc", UV_ENOMEM);
  }
  /* Fault injection for the tests of the order check itself. */
  fault = getenv("HTTP_PIPELINE_FAULT");
  s->fault_reorder = fault != NULL && strcmp(fault, "reorder") == 0;

  /* libuv sizes its pool from this variable when the pool first starts,
   * which is at the first uv_queue_work(), after this line. */
  snprintf(threads_env, sizeof(threads_env), "%" PRIu64, threads);
  setenv("UV_THREADPOOL_SIZE", threads_env, 1);
  signal(SIGPIPE, SIG_IGN);

  settings.on_message_begin = on_message_begin;
  settings.on_url = on_url;
  settings.on_header_field = on_header_field;
  settings.on_header_value = on_header_value;
  settings.on_headers_complete = on_headers_complete;
  settings.on_body = on_body;
  settings.on_message_complete = on_message_complete;

  /* Fetched once, before any thread hashes: looking the algorithm up for
   * every hash would take libcrypto's locks on every round. */
  s->sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
  if (s->sha256 == NULL) {
    fprintf(stderr, "http-pipeline: libcrypto has no SHA-256\n");
    return 1;
  }
  s->ns_per_round = round_cost();
  s->loop = uv_default_loop();
  s->loop_thread = uv_thread_self();
  atomic_init(&s->order_violations, 0);
  atomic_init(&s->overlaps, 0);
  atomic_init(&s->wrong_thread, 0);
  atomic_init(&s->misrouted, 0);
  atomic_init(&s->started, 0);
  atomic_init(&s->yields, 0);

  /* Fairness: connections take turns on the pool a task (--budget) at a
   * time, in the scheduler's FIFO of ready workers, on at most
   * --concurrency threads. Heavy work (conn_route()) is in a group of its
   * own that may take every thread the scheduler may use but one: libuv's
   * pool has --threads of them (the server sets UV_THREADPOOL_SIZE to it
   * above), and --concurrency may allow fewer. With one thread, the bulk
   * group keeps it: light work then waits for at most one heavy task. The
   * interactive group may use them all, and when both groups wait for a
   * thread the scheduler shares them out by run time, equal shares. */
  s->threads = threads;
  cap = s->lim.concurrency < threads ? s->lim.concurrency : threads;
  s->bulk_max = cap > 1 ? cap - 1 : 1;
  memset(groups, 0, sizeof(groups));
  groups[GROUP_BULK].max_concurrency = (unsigned) s->bulk_max;
  memset(&sopts, 0, sizeof(sopts));
  sopts.max_concurrency = (unsigned) s->lim.concurrency;
  sopts.budget = (unsigned) s->lim.budget;
  sopts.ngroups = GROUP_COUNT;
  sopts.groups = groups;
  rc = uvs_sched_init(s->loop, &s->sched, &sopts);
  if (rc != 0)
    fail("uvs_sched_init", rc);
  rc = uvs_worker_init(&s->sched, &s->timers, UVS_LOOP);
  if (rc != 0)
    fail("uvs_worker_init", rc);
  s->flusher.data = s;
  rc = uv_idle_init(s->loop, &s->flusher);
  if (rc != 0)
    fail("uv_idle_init", rc);
  rc = uv_timer_init(s->loop, &s->trimmer);
  if (rc != 0)
    fail("uv_timer_init", rc);

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
  printf("http-pipeline: listening on http://%s:%" PRIu64
         " mode=%s threads=%" PRIu64 " max_conns=%" PRIu64 "\n",
         bound, port,
         s->mode == MODE_POOL   ? "pool"
         : s->mode == MODE_LOOP ? "loop"
                                : "inline",
         threads, s->lim.max_conns);
  fflush(stdout);

  uv_run(s->loop, UV_RUN_DEFAULT);
  rc = uv_loop_close(s->loop);
  EVP_MD_free(s->sha256);
  /* Every connection has closed: every address count must be gone. */
  for (k = 0; k < s->addr_buckets; k++)
    if (s->addrs[k] != NULL)
      s->leaks++;
  free(s->addrs);

  violations = atomic_load(&s->order_violations) + atomic_load(&s->overlaps) +
               atomic_load(&s->wrong_thread) + atomic_load(&s->misrouted) +
               s->answers_out_of_order + s->done_out_of_order;
  /* Every suspend had its resume or its close, and the library agreed. */
  suspend_ok = s->out_suspended == 0 && s->suspend_mismatch == 0 &&
               s->out_suspends == s->out_resumes + s->out_suspend_closes;
  ok = rc == 0 && violations == 0 && s->leaks == 0 && s->open == 0 &&
       s->rejecting == 0 && suspend_ok;
  fprintf(stderr,
          "http-pipeline: out_suspends=%" PRIu64 " out_resumes=%" PRIu64
          " out_suspend_closes=%" PRIu64 " suspend_mismatch=%" PRIu64 ": %s\n",
          s->out_suspends, s->out_resumes, s->out_suspend_closes,
          s->suspend_mismatch, suspend_ok ? "balanced" : "UNBALANCED");
  fprintf(stderr,
          "http-pipeline: accepted=%" PRIu64 " rejected=%" PRIu64
          " requests=%" PRIu64 " responses=%" PRIu64 " work_done=%" PRIu64
          " stopped=%" PRIu64 " yields=%" PRIu64 " cancelled=%" PRIu64
          " shed=%" PRIu64 " dropped=%" PRIu64 " errors=%" PRIu64
          " stalls=%" PRIu64 " timeouts=%" PRIu64 "/%" PRIu64 "/%" PRIu64
          "\nhttp-pipeline: order_violations=%" PRIu64
          " answers_out_of_order=%" PRIu64 " done_out_of_order=%" PRIu64
          " overlaps=%" PRIu64 " wrong_thread=%" PRIu64 " misrouted=%" PRIu64
          " leaks=%" PRIu64 " loop_close=%s: %s\n",
          s->accepted, s->rejected, s->requests, s->responses, s->work_done,
          s->stopped, (uint64_t) atomic_load(&s->yields), s->cancelled, s->shed,
          s->dropped, s->errors, s->stalls, s->timeouts[DEADLINE_HEADER],
          s->timeouts[DEADLINE_IDLE], s->timeouts[DEADLINE_WRITE],
          (uint64_t) atomic_load(&s->order_violations), s->answers_out_of_order,
          s->done_out_of_order, (uint64_t) atomic_load(&s->overlaps),
          (uint64_t) atomic_load(&s->wrong_thread),
          (uint64_t) atomic_load(&s->misrouted), s->leaks,
          rc == 0 ? "ok" : uv_err_name(rc), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
