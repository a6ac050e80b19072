/* Short work beside long work: an interactive group and a bulk group.
 *
 * Four bulk workers flood the pool with long tasks (BULK_MS each: a report,
 * a compaction, a large copy); their group may hold every thread of the
 * pool but one. Meanwhile a timer brings a short request every ARRIVAL_MS
 * to one of two interactive workers, while the bulk group is saturated: it
 * runs POOL - 1 tasks and has workers waiting for more. Each request still
 * starts at once, on the thread the bulk group may not take. Without the
 * groups, a request that came while every thread ran a bulk task would
 * wait for one of them to end: up to BULK_MS.
 *
 * The program checks that every request started within BOUND_MS of its
 * schedule call (a generous bound: a third of a bulk task), that the bulk
 * group never ran more than POOL - 1 tasks at once, and that most requests
 * came while it was saturated. Then it prints each group's
 * uvs_group_stats, read once the workers' closes have completed, when the
 * figures are final.
 *
 * docs/groups.rst shows the parts between the "groups:" lines.
 */

#include "example.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

#define POOL 4       /* libuv's pool: main() sets UV_THREADPOOL_SIZE */
#define NBULK 4      /* bulk workers: more than the bulk group's threads */
#define BULK_TASKS 3 /* long tasks per bulk worker */
#define BULK_MS 450  /* one long task */
#define NSESSIONS 2  /* interactive workers */
#define NREQS 24     /* short requests, one every ARRIVAL_MS */
#define ARRIVAL_MS 25
#define BOUND_MS 150 /* the longest wait for a thread the check allows */
#define NTASKS (NBULK * BULK_TASKS + NREQS)

/* groups: options begins */
enum { INTERACTIVE, BULK, N_GROUPS };

static const uvs_group_options_t groups[N_GROUPS] = {
    /* Its cap is the scheduler's (0): with the bulk group idle, short work
     * may use every thread. */
    [INTERACTIVE] = {.shares = 100, .max_concurrency = 0},
    /* Never every thread: one is always left for the interactive group. */
    [BULK] = {.shares = 100, .max_concurrency = POOL - 1},
};
/* groups: options ends */

typedef struct request_s {
  uvs_task_t task;     /* First member: a uvs_task_t* is also a request_t*. */
  uint64_t queued_ns;  /* uv_hrtime() just before the schedule call */
  uint64_t started_ns; /* uv_hrtime() as run_cb began */
  uint32_t answer;
} request_t;

static uvs_sched_t sched;
static uvs_worker_t sessions[NSESSIONS]; /* group INTERACTIVE */
static uvs_worker_t jobs[NBULK];         /* group BULK */
static uvs_task_t bulk_tasks[NBULK][BULK_TASKS];
static request_t reqs[NREQS];
static uv_timer_t arrivals;
static int nsent;     /* requests scheduled */
static int saturated; /* ... of them while the bulk group was saturated */
static int ndone;
static int nclosed;
static uint64_t max_wait_ns; /* the longest schedule-to-start of a request */
static atomic_int bulk_now;  /* bulk run_cbs executing now */
static atomic_int bulk_peak; /* ... and the most at once */


static void bulk_run(uvs_task_t* task) { /* on a pool thread */
  int now = atomic_fetch_add(&bulk_now, 1) + 1;
  int peak = atomic_load(&bulk_peak);

  (void) task;
  while (now > peak && !atomic_compare_exchange_weak(&bulk_peak, &peak, now)) {
  }
  uv_sleep(BULK_MS); /* long work that holds its thread */
  atomic_fetch_sub(&bulk_now, 1);
}


static void request_run(uvs_task_t* task) { /* on a pool thread */
  request_t* req = (request_t*) task;
  uint32_t h = 2166136261u;
  int i;

  req->started_ns = uv_hrtime();
  for (i = 0; i < 1000; i++) /* short work: a lookup, a small answer */
    h = (h ^ (uint32_t) i) * 16777619u;
  req->answer = h;
}


static void print_group(const char* name, unsigned group) {
  uvs_group_stats_t st;

  CHECK(uvs_group_stats(&sched, group, &st));
  printf("%-11s ran %2" PRIu64 " run_cbs, %5" PRIu64
         " ms in all; running %" PRIu64 ", ready %" PRIu64 "\n",
         name, st.ran, st.run_ns / 1000000, st.running, st.ready);
  EXPECT(st.running == 0 && st.ready == 0); /* every worker has closed */
  if (group == BULK)
    EXPECT(st.ran == NBULK * BULK_TASKS &&
           st.run_ns >= (uint64_t) NBULK * BULK_TASKS * BULK_MS * 1000000);
  else
    EXPECT(st.ran == NREQS);
}


/* groups: stats begins */
/* The last worker's close callback (loop thread). A run_cb counts in its
 * group's ran and run_ns once its batch is over, which may be just after
 * its done_cb: once a worker's close has completed, its drains are over,
 * and the figures of its group are final. */
static void worker_closed(uvs_worker_t* worker) {
  (void) worker;
  if (++nclosed < NSESSIONS + NBULK)
    return;
  print_group("interactive", INTERACTIVE);
  print_group("bulk", BULK);
  CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}
/* groups: stats ends */


/* Every task's done_cb ends here (loop thread): the last one closes the
 * workers. */
static void one_done(int status) {
  int i;

  EXPECT(status == 0);
  if (++ndone < NTASKS)
    return;
  for (i = 0; i < NSESSIONS; i++)
    CHECK(uvs_worker_close(&sessions[i], UVS_DRAIN, worker_closed));
  for (i = 0; i < NBULK; i++)
    CHECK(uvs_worker_close(&jobs[i], UVS_DRAIN, worker_closed));
}


static void bulk_done(uvs_task_t* task, int status) {
  (void) task;
  one_done(status);
}


static void request_done(uvs_task_t* task, int status) {
  request_t* req = (request_t*) task;

  if (req->started_ns - req->queued_ns > max_wait_ns)
    max_wait_ns = req->started_ns - req->queued_ns;
  one_done(status);
}


/* groups: arrival begins */
/* A request arrives (loop thread): note whether the bulk group holds every
 * thread it may while more of its work waits, and schedule the request. */
static void arrive(uv_timer_t* timer) {
  request_t* req = &reqs[nsent];
  uvs_group_stats_t bulk;

  CHECK(uvs_group_stats(&sched, BULK, &bulk));
  if (bulk.running == POOL - 1 && bulk.ready > 0)
    saturated++;
  CHECK(uvs_task_init(&req->task, request_run, request_done));
  req->queued_ns = uv_hrtime();
  CHECK(uvs_schedule(&sessions[nsent % NSESSIONS], &req->task));
  if (++nsent == NREQS)
    uv_close((uv_handle_t*) timer, NULL);
}
/* groups: arrival ends */


/* libuv sizes its pool at its first uv_queue_work: this comes before. */
static void set_pool_size(int n) {
  char size[16];

  snprintf(size, sizeof(size), "%d", n);
  EXPECT(setenv("UV_THREADPOOL_SIZE", size, 1) == 0);
}


int main(void) {
  uv_loop_t* loop = uv_default_loop();
  /* groups: init begins */
  uvs_sched_options_t so = {
      .max_concurrency = POOL, /* the scheduler's cap: every thread */
      .ngroups = N_GROUPS,
      .groups = groups,
  };
  uvs_worker_options_t interactive = {.group = INTERACTIVE};
  uvs_worker_options_t bulk = {.group = BULK};
  int i;
  int j;

  set_pool_size(POOL);
  CHECK(uvs_sched_init(loop, &sched, &so));
  for (i = 0; i < NSESSIONS; i++)
    CHECK(uvs_worker_init_ex(&sched, &sessions[i], UVS_POOL, &interactive));
  for (i = 0; i < NBULK; i++)
    CHECK(uvs_worker_init_ex(&sched, &jobs[i], UVS_POOL, &bulk));
  /* groups: init ends */

  /* The flood: every bulk task at once. */
  for (i = 0; i < NBULK; i++)
    for (j = 0; j < BULK_TASKS; j++) {
      CHECK(uvs_task_init(&bulk_tasks[i][j], bulk_run, bulk_done));
      CHECK(uvs_schedule(&jobs[i], &bulk_tasks[i][j]));
    }
  /* The requests, from once the flood has taken its threads. */
  CHECK(uv_timer_init(loop, &arrivals));
  CHECK(uv_timer_start(&arrivals, arrive, 2 * ARRIVAL_MS, ARRIVAL_MS));

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  printf(
      "%d of %d requests came while the bulk group was saturated; the "
      "longest waited %.3f ms for a thread\n",
      saturated, NREQS, (double) max_wait_ns / 1e6);
  printf("the bulk group ran at most %d tasks at once\n",
         atomic_load(&bulk_peak));
  EXPECT(nsent == NREQS && ndone == NTASKS);
  EXPECT(atomic_load(&bulk_peak) == POOL - 1);
  EXPECT(saturated >= NREQS / 2);
  EXPECT(max_wait_ns < (uint64_t) BOUND_MS * 1000000);
  CHECK(uv_loop_close(loop));
  return 0;
}
