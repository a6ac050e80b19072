/* uvs_task_set_expiry: a request queue where each request carries its
 * client's deadline.
 *
 * A server queues its requests on one pool worker, in arrival order. Each
 * client says how long it waits for an answer (an HTTP client's timeout, a
 * gRPC deadline): here an interactive client INTERACTIVE_MS, a batch client
 * BATCH_MS, and some clients give none. uvs_task_set_expiry() gives each
 * request its own client's bound, so a request whose client has given up
 * by the time the worker reaches it is handed back with UV_ETIMEDOUT
 * instead of run: the server answers it at once (a 504) rather than
 * compute an answer nobody will read, while the requests around it on the
 * same worker, with longer deadlines or none, run as usual. (A worker's
 * max_wait_ms gives all its tasks one bound; with both, the smaller one
 * applies.)
 *
 * Each request takes WORK_MS. The first round queues seven requests at
 * once. The interactive ones behind three batch requests have waited at
 * least 3 * WORK_MS, more than INTERACTIVE_MS, when the worker reaches
 * them: they are shed, and the others run. Request structs are reused,
 * and a task's expiry stays set until changed, so every request sets its
 * client's, 0 for none: the second round gives the struct of a shed
 * interactive request to a client without a deadline, queued behind three
 * batch requests again, and it runs.
 *
 * docs/long-tasks.rst shows the part between the two "guide" lines.
 */

#include "example.h"

#define WORK_MS 10
#define INTERACTIVE_MS 20 /* less than 3 * WORK_MS */
#define BATCH_MS 5000

/* guide: expiry begins */
typedef struct client_s {
  const char* name;
  uint64_t deadline_ms; /* how long it waits for an answer; 0: for ever */
} client_t;

typedef struct request_s {
  uvs_task_t task; /* first member: a uvs_task_t* is also a request_t* */
  const client_t* client;
  int id;
  uint64_t arrived_ns;
} request_t;

static uvs_worker_t queue; /* UVS_POOL: the server's requests, in order */

static void request_run(uvs_task_t* task);                /* the work */
static void request_answered(request_t* req, int status); /* what's next */

static void request_done(uvs_task_t* task, int status) { /* loop thread */
  request_t* req = (request_t*) task;
  double ms = (double) (uv_hrtime() - req->arrived_ns) / 1e6;
  const char* answer = "200";
  char deadline[24] = "none";

  if (status == UV_ETIMEDOUT)
    answer = "504"; /* its client has given up: nothing was computed */
  else if (status != 0)
    answer = "503"; /* UV_ECANCELED: the server is closing */
  if (req->client->deadline_ms != 0)
    snprintf(deadline, sizeof(deadline), "%u ms",
             (unsigned) req->client->deadline_ms);
  printf("req %2d, %-11s client (deadline %7s): %s, answered after %2.0f ms\n",
         req->id, req->client->name, deadline, answer, ms);
  request_answered(req, status); /* the struct is free from here */
}

/* On the loop thread, as a request is read. The struct may have served
 * another client before, and the expiry stays set on a task until changed:
 * set it every time, 0 for a client without a deadline. */
static void request_submit(request_t* req, const client_t* client, int id) {
  req->client = client;
  req->id = id;
  req->arrived_ns = uv_hrtime();
  CHECK(uvs_task_init(&req->task, request_run, request_done));
  CHECK(uvs_task_set_expiry(&req->task, client->deadline_ms));
  CHECK(uvs_schedule(&queue, &req->task));
}
/* guide: expiry ends */

enum { ROUND1 = 7, NREQS = ROUND1 + 4 };

static const client_t interactive = {"interactive", INTERACTIVE_MS};
static const client_t batch = {"batch", BATCH_MS};
static const client_t nodeadline = {"no-deadline", 0};

static uvs_sched_t sched;
static request_t reqs[ROUND1];
static int ran[NREQS];
static int status_of[NREQS];
static uint64_t waited_ns[NREQS]; /* from arrival to its run_cb */
static int ndone;


static void request_run(uvs_task_t* task) { /* on a pool thread */
  request_t* req = (request_t*) task;

  ran[req->id]++;
  waited_ns[req->id] = uv_hrtime() - req->arrived_ns;
  uv_sleep(WORK_MS);
}


static void request_answered(request_t* req, int status) {
  uvs_worker_metrics_t m;
  int i;

  status_of[req->id] = status;
  if (++ndone == ROUND1) {
    CHECK(uvs_worker_metrics(&queue, &m));
    EXPECT(m.expired == 2);
    /* The second round: three batch requests, then a client with no
     * deadline in the struct that carried INTERACTIVE_MS. */
    for (i = 0; i < 3; i++) request_submit(&reqs[i], &batch, ROUND1 + i);
    request_submit(&reqs[3], &nodeadline, ROUND1 + 3);
  } else if (ndone == NREQS) {
    CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
  }
}


int main(void) {
  uv_loop_t* loop = uv_default_loop();
  uvs_worker_metrics_t m;
  uvs_stats_t st;
  int i;

  CHECK(uvs_sched_init(loop, &sched, NULL));
  CHECK(uvs_worker_init(&sched, &queue, UVS_POOL));

  /* Seven requests at once (nothing starts before uv_run). */
  request_submit(&reqs[0], &batch, 0);
  request_submit(&reqs[1], &batch, 1);
  request_submit(&reqs[2], &batch, 2);
  request_submit(&reqs[3], &interactive, 3); /* waits >= 3 * WORK_MS */
  request_submit(&reqs[4], &nodeadline, 4);
  request_submit(&reqs[5], &interactive, 5); /* waits >= 4 * WORK_MS */
  request_submit(&reqs[6], &batch, 6);
  /* A task in the library's custody keeps its expiry: nothing changes. */
  EXPECT(uvs_task_set_expiry(&reqs[6].task, 1) == UV_EBUSY);

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  EXPECT(ndone == NREQS);
  for (i = 0; i < NREQS; i++) {
    if (i == 3 || i == 5) {
      EXPECT(status_of[i] == UV_ETIMEDOUT && ran[i] == 0); /* never ran */
    } else {
      EXPECT(status_of[i] == 0 && ran[i] == 1);
    }
  }
  /* The last one waited behind three runs, longer than the bound its
   * struct carried before. */
  EXPECT(waited_ns[NREQS - 1] >= (uint64_t) 3 * WORK_MS * 1000000);
  CHECK(uvs_worker_metrics(&queue, &m));
  EXPECT(m.expired == 2 && m.ran == NREQS - 2);
  uvs_sched_stats(&sched, &st);
  EXPECT(st.scheduled == NREQS && st.ran == NREQS - 2 && st.cancelled == 2);
  CHECK(uv_loop_close(loop));
  printf("expiry: 2 requests of %d shed, their clients gone\n", NREQS);
  return 0;
}
