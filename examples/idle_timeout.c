/* Idle timeouts with uvs_task_reschedule, on a real connection.
 *
 * A server gives each connection a pool worker for its requests and one
 * delayed task on a loop worker shared by all connections, due when the
 * connection has been idle for IDLE_MS. Every read and every answer moves
 * it with uvs_task_reschedule(). When it falls due, its done_cb closes the
 * connection only if the connection owes no answer; while answers are
 * owed, the wait is the server's, and it arms the task again instead.
 *
 * A client on the same loop pipelines NREQS requests and then stays
 * silent. Each answer takes WORK_MS, longer than IDLE_MS, so the timeout
 * falls due while answers are owed: a server that closed then would lose
 * them all. The program checks that every answer arrives, and that the
 * server closes the connection only after it has been idle IDLE_MS.
 *
 * docs/guide.rst shows the part between the two "guide" lines.
 */

#include "example.h"

#include <string.h>

/* guide: idle timeout begins */
#define IDLE_MS 50 /* a server would take 30000 */

typedef struct conn_s {
  uv_tcp_t tcp;
  uvs_worker_t worker;  /* UVS_POOL: the connection's requests, in order */
  uvs_task_t timeout;   /* delayed on the server's UVS_LOOP worker */
  int armed;            /* timeout is the library's */
  int closing;          /* conn_close() has been called */
  int refs;             /* tcp, worker, and timeout while armed */
  unsigned owed;        /* requests read and not answered yet */
  uint64_t last_active; /* uv_now() of the last read or answer */
} conn_t;

static uvs_worker_t timers; /* UVS_LOOP */

static void conn_arm(conn_t* conn);
static void conn_close(conn_t* conn);
static void conn_unref(conn_t* conn);


static void timeout_run(uvs_task_t* task) {
  (void) task; /* the decision is made in done_cb */
}


static void timeout_done(uvs_task_t* task, int status) {
  conn_t* conn = task->data;
  uint64_t now = uv_now(conn->tcp.loop);

  conn->armed = 0;
  /* UV_ECANCELED: conn_close() took it back. */
  if (status == 0 && !conn->closing) {
    if (conn->owed == 0 && now >= conn->last_active + IDLE_MS)
      conn_close(conn); /* silent for IDLE_MS, and owes nothing */
    else
      conn_arm(conn); /* answers owed, or it moved just as it fell due */
  }
  conn_unref(conn); /* the connection's memory waits for this call */
}


/* After accept, after every read and after every answer. */
static void conn_arm(conn_t* conn) {
  uint64_t now = uv_now(conn->tcp.loop);
  uint64_t due = conn->last_active + IDLE_MS;
  uint64_t delay;
  int rc;

  if (conn->owed != 0)
    delay = IDLE_MS; /* the wait is the server's: look again later */
  else
    delay = due > now ? due - now : 0;
  if (conn->armed) {
    /* UV_EBUSY: it has just fallen due, and timeout_done() will look at
     * the connection again. */
    rc = uvs_task_reschedule(&conn->timeout, delay);
    if (rc != 0 && rc != UV_EBUSY)
      fprintf(stderr, "uvs_task_reschedule: %s\n", uv_strerror(rc));
    return;
  }
  rc = uvs_task_init(&conn->timeout, timeout_run, timeout_done);
  conn->timeout.data = conn;
  if (rc == 0)
    rc = uvs_schedule_after(&timers, &conn->timeout, delay);
  if (rc != 0) {
    fprintf(stderr, "conn_arm: %s\n", uv_strerror(rc));
    conn_close(conn);
    return;
  }
  conn->armed = 1;
  conn->refs++;
}
/* guide: idle timeout ends */


#define WORK_MS 150 /* each answer takes longer than IDLE_MS */
#define NREQS 3

typedef struct request_s {
  uvs_task_t task; /* First member: a uvs_task_t* is also a request_t*. */
  conn_t* conn;
} request_t;

static uv_loop_t* loop;
static uvs_sched_t sched;
static uv_tcp_t listener;
static uv_tcp_t client;
static uv_connect_t connect_req;
static uv_write_t client_write;
static char client_buf[64];
static int answers;         /* answer lines the client read */
static int closes;          /* connections the server closed */
static unsigned close_owed; /* answers owed by them when they closed */
static int freed;           /* connections whose memory was freed */
static uint64_t last_answer_ns;
static uint64_t eof_ns;


static void conn_unref(conn_t* conn) {
  if (--conn->refs == 0) {
    free(conn);
    freed++;
  }
}


static void tcp_closed(uv_handle_t* handle) {
  conn_unref(handle->data);
}


static void worker_closed(uvs_worker_t* worker) {
  conn_unref(worker->data);
}


static void conn_close(conn_t* conn) {
  if (conn->closing)
    return;
  conn->closing = 1;
  closes++;
  close_owed += conn->owed;
  /* UV_EBUSY: it has fallen due, and timeout_done() sees closing. */
  if (conn->armed)
    (void) uvs_task_cancel(&conn->timeout);
  /* Requests not started come back with UV_ECANCELED. */
  CHECK(uvs_worker_close(&conn->worker, UVS_CANCEL, worker_closed));
  uv_close((uv_handle_t*) &conn->tcp, tcp_closed);
}


static void answer_written(uv_write_t* req, int status) {
  (void) status; /* a write cut by the close: nothing to do */
  free(req);
}


static void request_run(uvs_task_t* task) { /* on a pool thread */
  (void) task;
  uv_sleep(WORK_MS);
}


static void request_done(uvs_task_t* task, int status) {
  request_t* req = (request_t*) task;
  conn_t* conn = req->conn;
  uv_buf_t buf = uv_buf_init("ok\n", 3);
  uv_write_t* w;

  free(req);
  conn->owed--;
  if (status != 0 || conn->closing)
    return;
  w = malloc(sizeof(*w));
  EXPECT(w != NULL);
  CHECK(uv_write(w, (uv_stream_t*) &conn->tcp, &buf, 1, answer_written));
  conn->last_active = uv_now(loop);
  conn_arm(conn);
}


static void on_alloc(uv_handle_t* handle, size_t size, uv_buf_t* buf) {
  (void) handle;
  buf->base = malloc(size);
  buf->len = buf->base != NULL ? size : 0;
}


static void on_server_read(uv_stream_t* stream,
                           ssize_t nread,
                           const uv_buf_t* buf) {
  conn_t* conn = stream->data;
  request_t* req;
  ssize_t i;

  if (nread < 0)
    conn_close(conn);
  for (i = 0; i < nread; i++) {
    if (buf->base[i] != '\n')
      continue;
    req = malloc(sizeof(*req));
    EXPECT(req != NULL);
    req->conn = conn;
    CHECK(uvs_task_init(&req->task, request_run, request_done));
    CHECK(uvs_schedule(&conn->worker, &req->task));
    conn->owed++;
  }
  if (nread > 0) {
    conn->last_active = uv_now(loop);
    conn_arm(conn);
  }
  free(buf->base);
}


static void on_connection(uv_stream_t* server, int status) {
  conn_t* conn;

  CHECK(status);
  conn = calloc(1, sizeof(*conn));
  EXPECT(conn != NULL);
  CHECK(uv_tcp_init(loop, &conn->tcp));
  conn->tcp.data = conn;
  conn->refs = 1; /* tcp */
  CHECK(uv_accept(server, (uv_stream_t*) &conn->tcp));
  CHECK(uvs_worker_init(&sched, &conn->worker, UVS_POOL));
  conn->worker.data = conn;
  conn->refs++; /* worker */
  conn->last_active = uv_now(loop);
  conn_arm(conn);
  CHECK(uv_read_start((uv_stream_t*) &conn->tcp, on_alloc, on_server_read));
}


static void on_client_read(uv_stream_t* stream,
                           ssize_t nread,
                           const uv_buf_t* buf) {
  ssize_t i;

  (void) stream;
  for (i = 0; i < nread; i++)
    if (buf->base[i] == '\n')
      answers++;
  if (nread > 0)
    last_answer_ns = uv_hrtime();
  free(buf->base);
  if (nread < 0) {
    EXPECT(nread == UV_EOF);
    eof_ns = uv_hrtime();
    uv_close((uv_handle_t*) &client, NULL);
    uv_close((uv_handle_t*) &listener, NULL);
    CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
  }
}


static void on_client_write(uv_write_t* req, int status) {
  (void) req;
  CHECK(status);
}


static void on_connect(uv_connect_t* req, int status) {
  uv_buf_t buf;
  int i;

  (void) req;
  CHECK(status);
  for (i = 0; i < NREQS; i++) strcat(client_buf, "req\n");
  buf = uv_buf_init(client_buf, (unsigned) strlen(client_buf));
  CHECK(uv_write(&client_write, (uv_stream_t*) &client, &buf, 1,
                 on_client_write));
  CHECK(uv_read_start((uv_stream_t*) &client, on_alloc, on_client_read));
}


int main(void) {
  struct sockaddr_storage name;
  struct sockaddr_in addr;
  int namelen = sizeof(name);

  loop = uv_default_loop();
  CHECK(uvs_sched_init(loop, &sched, NULL));
  CHECK(uvs_worker_init(&sched, &timers, UVS_LOOP));

  CHECK(uv_tcp_init(loop, &listener));
  CHECK(uv_ip4_addr("127.0.0.1", 0, &addr));
  CHECK(uv_tcp_bind(&listener, (const struct sockaddr*) &addr, 0));
  CHECK(uv_listen((uv_stream_t*) &listener, 16, on_connection));
  CHECK(uv_tcp_getsockname(&listener, (struct sockaddr*) &name, &namelen));

  CHECK(uv_tcp_init(loop, &client));
  CHECK(uv_tcp_connect(&connect_req, &client, (const struct sockaddr*) &name,
                       on_connect));

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  printf("%d answers of %d; closed %.0f ms after the last answer\n", answers,
         NREQS, (double) (eof_ns - last_answer_ns) / 1e6);
  EXPECT(answers == NREQS);
  EXPECT(closes == 1 && close_owed == 0 && freed == 1);
  /* Idle for IDLE_MS from the last answer, give or take a ms of uv_now(). */
  EXPECT(eof_ns - last_answer_ns >= (uint64_t) (IDLE_MS - 2) * 1000000);
  CHECK(uv_loop_close(loop));
  return 0;
}
