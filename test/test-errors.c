/* Bad input, table-driven: every public function with NULL, out-of-range
 * values, double close, use after close, re-scheduling a busy task,
 * cancelling a never-scheduled or done-less task, and calls made off the
 * loop thread. Each row must return SPEC's code and change nothing: the
 * bytes of every object of the fixture are compared before and after it,
 * and at the end every task of the fixture meets the fate it had before
 * the table ran. The table runs once on the loop thread and once on a
 * foreign thread. Re-initialising an object that is in use (a live
 * scheduler, worker or task) is undefined, as in libuv, and not tested;
 * initialising again after the close callback is (rows marked "again"). */

#include "task.h"

#include <stdatomic.h>

#define MAX_MS ((uint64_t) 1 << 40)

static uv_loop_t loop;
static uvs_sched_t s_open;    /* open */
static uvs_sched_t s_closing; /* uvs_sched_close called, loop not run since */
static uvs_sched_t s_closed;  /* its close_cb ran; memory kept */
static uvs_worker_t w_pool;   /* open, busy with t_running */
static uvs_worker_t w_loop;   /* open */
static uvs_worker_t w_closing;
static uvs_worker_t w_closed; /* close_cb ran */
static uvs_worker_t w_sc;     /* a worker of s_closing */
static uvs_worker_t w_spare;  /* for init rows; never initialised */
static uvs_task_t t_idle;     /* initialised, never scheduled */
static uvs_task_t t_raw;      /* zeroed, never initialised: run_cb NULL */
static uvs_task_t t_queued;
static uvs_task_t t_delayed;
static uvs_task_t t_periodic;
static uvs_task_t t_running;   /* a one-shot running on w_pool */
static uvs_task_t t_cancelled; /* cancelled, done_cb not yet called */
static uvs_task_t t_finished;  /* handed back */
static uvs_task_t t_nodone;    /* done == NULL, queued */
static uvs_task_t t_nodone_idle;

static uv_sem_t running_sem;
static uv_sem_t release_sem;
static int done_calls[16];
static int done_status[16];
static int run_calls[16];
static int closed_calls;

enum {
  I_QUEUED,
  I_DELAYED,
  I_PERIODIC,
  I_RUNNING,
  I_CANCELLED,
  I_FINISHED,
  I_IDLE,
  I_NODONE
};

static int index_of(uvs_task_t* t) {
  if (t == &t_queued)
    return I_QUEUED;
  if (t == &t_delayed)
    return I_DELAYED;
  if (t == &t_periodic)
    return I_PERIODIC;
  if (t == &t_running)
    return I_RUNNING;
  if (t == &t_cancelled)
    return I_CANCELLED;
  if (t == &t_finished)
    return I_FINISHED;
  if (t == &t_idle)
    return I_IDLE;
  return I_NODONE;
}


static void run_cb(uvs_task_t* t) {
  run_calls[index_of(t)]++;
  if (t == &t_running) {
    uv_sem_post(&running_sem);
    uv_sem_wait(&release_sem);
  }
}


static void done_cb(uvs_task_t* t, int status) {
  int i;

  i = index_of(t);
  done_calls[i]++;
  done_status[i] = status;
}


static void post_fn(void* arg) {
  (void) arg;
  ASSERT(0 && "no post is accepted by the table");
}


static void worker_closed_cb(uvs_worker_t* w) {
  (void) w;
  closed_calls++;
}


static void sched_closed_cb(uvs_sched_t* s) {
  (void) s;
  closed_calls++;
}


/* ---- the rows ----------------------------------------------------------- */

typedef struct {
  const char* what;
  int (*call)(void);
  int expect;
} row_t;


/* X(name, call, SPEC's code). "closing": close called, loop not run since;
 * "closed": its close callback ran. */
/* clang-format off */
#define ROWS(X)                                                              \
  /* uvs_sched_init */                                                       \
  X(sched_init_null_loop, uvs_sched_init(NULL, &s_open, NULL), UV_EINVAL)    \
  X(sched_init_null_sched, uvs_sched_init(&loop, NULL, NULL), UV_EINVAL)     \
  /* uvs_sched_close: bad how, double close, use after close */              \
  X(sched_close_null, uvs_sched_close(NULL, UVS_CANCEL, NULL), UV_EINVAL)    \
  X(sched_close_bad_how, uvs_sched_close(&s_open, (uvs_close_how_t) 2, NULL), \
    UV_EINVAL)                                                               \
  X(sched_close_neg_how,                                                     \
    uvs_sched_close(&s_open, (uvs_close_how_t) -1, NULL), UV_EINVAL)         \
  X(sched_close_closing, uvs_sched_close(&s_closing, UVS_CANCEL, NULL),      \
    UV_EINVAL)                                                               \
  X(sched_close_closed, uvs_sched_close(&s_closed, UVS_DRAIN, NULL),         \
    UV_EINVAL)                                                               \
  /* uvs_worker_init */                                                      \
  X(worker_init_null_sched, uvs_worker_init(NULL, &w_spare, UVS_POOL),       \
    UV_EINVAL)                                                               \
  X(worker_init_null_worker, uvs_worker_init(&s_open, NULL, UVS_POOL),       \
    UV_EINVAL)                                                               \
  X(worker_init_bad_where,                                                   \
    uvs_worker_init(&s_open, &w_spare, (uvs_where_t) 2), UV_EINVAL)          \
  X(worker_init_neg_where,                                                   \
    uvs_worker_init(&s_open, &w_spare, (uvs_where_t) -1), UV_EINVAL)         \
  X(worker_init_closing_sched, uvs_worker_init(&s_closing, &w_spare, UVS_LOOP), \
    UV_ESHUTDOWN)                                                            \
  X(worker_init_closed_sched, uvs_worker_init(&s_closed, &w_spare, UVS_POOL), \
    UV_ESHUTDOWN)                                                            \
  X(worker_init_closed_bad_where,                                            \
    uvs_worker_init(&s_closed, &w_spare, (uvs_where_t) 9), UV_EINVAL)        \
  /* uvs_worker_close */                                                     \
  X(worker_close_null, uvs_worker_close(NULL, UVS_CANCEL, NULL), UV_EINVAL)  \
  X(worker_close_bad_how, uvs_worker_close(&w_loop, (uvs_close_how_t) 7, NULL), \
    UV_EINVAL)                                                               \
  X(worker_close_closing, uvs_worker_close(&w_closing, UVS_CANCEL, NULL),    \
    UV_EINVAL)                                                               \
  X(worker_close_closed, uvs_worker_close(&w_closed, UVS_DRAIN, NULL),       \
    UV_EINVAL)                                                               \
  /* uvs_worker_close on a worker only its scheduler's close is closing   \
   * returns 0 (test-close.c): not an error row. */                        \
  /* uvs_task_init */                                                        \
  X(task_init_null_task, uvs_task_init(NULL, run_cb, done_cb), UV_EINVAL)    \
  X(task_init_null_run, uvs_task_init(&t_idle, NULL, done_cb), UV_EINVAL)    \
  X(task_init_null_run_busy, uvs_task_init(&t_queued, NULL, NULL), UV_EINVAL) \
  /* uvs_schedule */                                                         \
  X(schedule_null_worker, uvs_schedule(NULL, &t_idle), UV_EINVAL)            \
  X(schedule_null_task, uvs_schedule(&w_pool, NULL), UV_EINVAL)              \
  X(schedule_no_run, uvs_schedule(&w_pool, &t_raw), UV_EINVAL)               \
  X(schedule_no_run_closed, uvs_schedule(&w_closed, &t_raw), UV_EINVAL)      \
  X(schedule_closing_worker, uvs_schedule(&w_closing, &t_idle), UV_ESHUTDOWN) \
  X(schedule_closed_worker, uvs_schedule(&w_closed, &t_idle), UV_ESHUTDOWN)  \
  X(schedule_closing_sched, uvs_schedule(&w_sc, &t_idle), UV_ESHUTDOWN)      \
  X(schedule_queued, uvs_schedule(&w_loop, &t_queued), UV_EBUSY)             \
  X(schedule_delayed, uvs_schedule(&w_loop, &t_delayed), UV_EBUSY)           \
  X(schedule_periodic, uvs_schedule(&w_pool, &t_periodic), UV_EBUSY)        \
  X(schedule_running, uvs_schedule(&w_loop, &t_running), UV_EBUSY)          \
  X(schedule_cancelled, uvs_schedule(&w_loop, &t_cancelled), UV_EBUSY)      \
  X(schedule_nodone_queued, uvs_schedule(&w_pool, &t_nodone), UV_EBUSY)     \
  X(schedule_busy_closed, uvs_schedule(&w_closed, &t_queued), UV_ESHUTDOWN)  \
  X(schedule_busy_null, uvs_schedule(NULL, &t_running), UV_EINVAL)           \
  /* uvs_schedule_after */                                                   \
  X(after_null_worker, uvs_schedule_after(NULL, &t_idle, 1), UV_EINVAL)      \
  X(after_null_task, uvs_schedule_after(&w_loop, NULL, 1), UV_EINVAL)        \
  X(after_no_run, uvs_schedule_after(&w_loop, &t_raw, 1), UV_EINVAL)         \
  X(after_delay_over, uvs_schedule_after(&w_loop, &t_idle, MAX_MS + 1),      \
    UV_EINVAL)                                                               \
  X(after_delay_max, uvs_schedule_after(&w_loop, &t_idle, UINT64_MAX),       \
    UV_EINVAL)                                                               \
  X(after_delay_over_closed,                                                 \
    uvs_schedule_after(&w_closed, &t_idle, MAX_MS + 1), UV_EINVAL)           \
  X(after_closing_worker, uvs_schedule_after(&w_closing, &t_idle, 0),        \
    UV_ESHUTDOWN)                                                            \
  X(after_closed_worker, uvs_schedule_after(&w_closed, &t_idle, 5),          \
    UV_ESHUTDOWN)                                                            \
  X(after_closing_sched, uvs_schedule_after(&w_sc, &t_idle, 5), UV_ESHUTDOWN) \
  X(after_queued, uvs_schedule_after(&w_pool, &t_queued, 1), UV_EBUSY)       \
  X(after_delayed, uvs_schedule_after(&w_loop, &t_delayed, 0), UV_EBUSY)     \
  X(after_running, uvs_schedule_after(&w_pool, &t_running, 0), UV_EBUSY)     \
  X(after_busy_closing, uvs_schedule_after(&w_closing, &t_delayed, 1),       \
    UV_ESHUTDOWN)                                                            \
  /* uvs_schedule_every */                                                   \
  X(every_null_worker, uvs_schedule_every(NULL, &t_idle, 0, 1), UV_EINVAL)   \
  X(every_null_task, uvs_schedule_every(&w_loop, NULL, 0, 1), UV_EINVAL)     \
  X(every_no_run, uvs_schedule_every(&w_loop, &t_raw, 0, 1), UV_EINVAL)      \
  X(every_period_zero, uvs_schedule_every(&w_loop, &t_idle, 0, 0), UV_EINVAL) \
  X(every_period_over, uvs_schedule_every(&w_loop, &t_idle, 0, MAX_MS + 1),  \
    UV_EINVAL)                                                               \
  X(every_delay_over, uvs_schedule_every(&w_loop, &t_idle, MAX_MS + 1, 1),   \
    UV_EINVAL)                                                               \
  X(every_no_done, uvs_schedule_every(&w_loop, &t_nodone_idle, 0, 1),        \
    UV_EINVAL)                                                               \
  X(every_no_done_closed, uvs_schedule_every(&w_closed, &t_nodone_idle, 0, 1), \
    UV_EINVAL)                                                               \
  X(every_period_zero_closed, uvs_schedule_every(&w_closed, &t_idle, 0, 0),  \
    UV_EINVAL)                                                               \
  X(every_closing_worker, uvs_schedule_every(&w_closing, &t_idle, 0, 1),     \
    UV_ESHUTDOWN)                                                            \
  X(every_closed_worker, uvs_schedule_every(&w_closed, &t_idle, 0, 1),       \
    UV_ESHUTDOWN)                                                            \
  X(every_closing_sched, uvs_schedule_every(&w_sc, &t_idle, 1, 1),           \
    UV_ESHUTDOWN)                                                            \
  X(every_periodic, uvs_schedule_every(&w_loop, &t_periodic, 0, 1), UV_EBUSY) \
  X(every_queued, uvs_schedule_every(&w_loop, &t_queued, 0, 1), UV_EBUSY)    \
  X(every_running, uvs_schedule_every(&w_pool, &t_running, 0, 1), UV_EBUSY)  \
  /* uvs_task_cancel */                                                      \
  X(cancel_null, uvs_task_cancel(NULL), UV_EINVAL)                           \
  X(cancel_never_scheduled, uvs_task_cancel(&t_idle), UV_EINVAL)             \
  X(cancel_no_done_queued, uvs_task_cancel(&t_nodone), UV_EINVAL)            \
  X(cancel_no_done_idle, uvs_task_cancel(&t_nodone_idle), UV_EINVAL)         \
  X(cancel_running, uvs_task_cancel(&t_running), UV_EBUSY)                   \
  X(cancel_cancelled, uvs_task_cancel(&t_cancelled), UV_EBUSY)               \
  X(cancel_finished, uvs_task_cancel(&t_finished), UV_EBUSY)                 \
  /* uvs_post */                                                             \
  X(post_null_worker, uvs_post(NULL, post_fn, NULL), UV_EINVAL)              \
  X(post_null_fn, uvs_post(&w_pool, NULL, NULL), UV_EINVAL)                  \
  X(post_null_fn_closed, uvs_post(&w_closed, NULL, NULL), UV_EINVAL)         \
  X(post_closing_worker, uvs_post(&w_closing, post_fn, NULL), UV_ESHUTDOWN)  \
  X(post_closed_worker, uvs_post(&w_closed, post_fn, NULL), UV_ESHUTDOWN)    \
  X(post_closing_sched, uvs_post(&w_sc, post_fn, NULL), UV_ESHUTDOWN)
/* clang-format on */

#define DEFINE_ROW(name, expr, code) \
  static int row_##name(void) {      \
    return (expr);                   \
  }
ROWS(DEFINE_ROW)
#undef DEFINE_ROW

#define ENTRY_ROW(name, expr, code) {#name ": " #expr, row_##name, code},
static const row_t rows[] = {ROWS(ENTRY_ROW)};
#undef ENTRY_ROW

/* Void functions with NULL do nothing; checked here, not in the table. */
static int void_calls(void) {
  uvs_stats_t st;

  memset(&st, 0x5a, sizeof(st));
  uvs_sched_stats(NULL, &st);
  uvs_sched_stats(&s_open, NULL);
  ASSERT_UINT64_EQ(uvs_now(NULL), 0);
  ASSERT_EQ(((unsigned char*) &st)[0], 0x5a);
  return 0;
}


/* ---- the fixture -------------------------------------------------------- */

typedef struct {
  void* p;
  size_t size;
  unsigned char* copy;
} snap_t;

static snap_t snaps[] = {
    {&s_open, sizeof(s_open), NULL},
    {&s_closing, sizeof(s_closing), NULL},
    {&s_closed, sizeof(s_closed), NULL},
    {&w_pool, sizeof(w_pool), NULL},
    {&w_loop, sizeof(w_loop), NULL},
    {&w_closing, sizeof(w_closing), NULL},
    {&w_closed, sizeof(w_closed), NULL},
    {&w_sc, sizeof(w_sc), NULL},
    {&w_spare, sizeof(w_spare), NULL},
    {&t_idle, sizeof(t_idle), NULL},
    {&t_raw, sizeof(t_raw), NULL},
    {&t_queued, sizeof(t_queued), NULL},
    {&t_delayed, sizeof(t_delayed), NULL},
    {&t_periodic, sizeof(t_periodic), NULL},
    {&t_running, sizeof(t_running), NULL},
    {&t_cancelled, sizeof(t_cancelled), NULL},
    {&t_finished, sizeof(t_finished), NULL},
    {&t_nodone, sizeof(t_nodone), NULL},
    {&t_nodone_idle, sizeof(t_nodone_idle), NULL},
};
#define NSNAPS (sizeof(snaps) / sizeof(snaps[0]))

static const char* const snap_names[NSNAPS] = {
    "s_open",      "s_closing",  "s_closed",  "w_pool",       "w_loop",
    "w_closing",   "w_closed",   "w_sc",      "w_spare",      "t_idle",
    "t_raw",       "t_queued",   "t_delayed", "t_periodic",   "t_running",
    "t_cancelled", "t_finished", "t_nodone",  "t_nodone_idle"};


static void snapshot(void) {
  size_t i;

  for (i = 0; i < NSNAPS; i++) memcpy(snaps[i].copy, snaps[i].p, snaps[i].size);
}


static void unchanged(const char* what) {
  size_t i;

  for (i = 0; i < NSNAPS; i++) {
    if (memcmp(snaps[i].copy, snaps[i].p, snaps[i].size) != 0)
      test_failed(__FILE__, __LINE__, "row \"%s\" changed %s", what,
                  snap_names[i]);
  }
}


static int table_failures;

static void run_table(void* arg) {
  size_t i;
  int r;

  (void) arg;
  for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    snapshot();
    r = rows[i].call();
    if (r != rows[i].expect) {
      fprintf(stderr, "row \"%s\": %d %s, expected %d %s\n", rows[i].what, r,
              test_err_name(r), rows[i].expect, test_err_name(rows[i].expect));
      table_failures++;
    }
    unchanged(rows[i].what);
  }
  snapshot();
  void_calls();
  unchanged("void calls");
}


static void off_thread_close(void* arg) {
  /* Off the loop thread: only uvs_sched_close refuses (UV_EINVAL). */
  (void) arg;
  snapshot();
  ASSERT_ERR(uvs_sched_close(&s_open, UVS_CANCEL, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_sched_close(&s_open, UVS_DRAIN, sched_closed_cb), UV_EINVAL);
  unchanged("uvs_sched_close off the loop thread");
}


static void errors_table(int foreign) {
  uv_thread_t thread;
  uvs_stats_t before;
  uvs_stats_t after;
  size_t i;

  for (i = 0; i < NSNAPS; i++) {
    snaps[i].copy = malloc(snaps[i].size);
    ASSERT_NOT_NULL(snaps[i].copy);
  }
  memset(&t_raw, 0, sizeof(t_raw));
  memset(&w_spare, 0x3c, sizeof(w_spare));
  ASSERT_OK(uv_sem_init(&running_sem, 0));
  ASSERT_OK(uv_sem_init(&release_sem, 0));
  ASSERT_OK(uv_loop_init(&loop));

  /* Objects that need the loop to reach their state. */
  ASSERT_OK(uvs_sched_init(&loop, &s_closed, NULL));
  ASSERT_OK(uvs_sched_close(&s_closed, UVS_CANCEL, sched_closed_cb));
  ASSERT_OK(uvs_sched_init(&loop, &s_open, NULL));
  ASSERT_OK(uvs_worker_init(&s_open, &w_pool, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&s_open, &w_loop, UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&s_open, &w_closed, UVS_POOL));
  ASSERT_OK(uvs_worker_close(&w_closed, UVS_CANCEL, worker_closed_cb));
  ASSERT_OK(uvs_task_init(&t_finished, run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&w_loop, &t_finished));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(closed_calls, 2);
  ASSERT_EQ(done_calls[I_FINISHED], 1);

  /* A task running on the pool, for as long as the table runs. */
  ASSERT_OK(uvs_task_init(&t_running, run_cb, done_cb));
  ASSERT_OK(uvs_schedule(&w_pool, &t_running));
  (void) uv_run(&loop, UV_RUN_NOWAIT); /* posts the drain */
  uv_sem_wait(&running_sem);

  /* The rest without running the loop, so that nothing moves. */
  ASSERT_OK(uvs_task_init(&t_idle, run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&t_queued, run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&t_delayed, run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&t_periodic, run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&t_cancelled, run_cb, done_cb));
  ASSERT_OK(uvs_task_init(&t_nodone, run_cb, NULL));
  ASSERT_OK(uvs_task_init(&t_nodone_idle, run_cb, NULL));
  ASSERT_OK(uvs_schedule(&w_pool, &t_queued));
  ASSERT_OK(uvs_schedule_after(&w_loop, &t_delayed, 60000));
  ASSERT_OK(uvs_schedule_every(&w_loop, &t_periodic, 60000, 1000));
  ASSERT_OK(uvs_schedule(&w_loop, &t_cancelled));
  ASSERT_OK(uvs_task_cancel(&t_cancelled));
  ASSERT_OK(uvs_schedule(&w_loop, &t_nodone));
  ASSERT_OK(uvs_worker_init(&s_open, &w_closing, UVS_LOOP));
  ASSERT_OK(uvs_worker_close(&w_closing, UVS_CANCEL, worker_closed_cb));
  ASSERT_OK(uvs_sched_init(&loop, &s_closing, NULL));
  ASSERT_OK(uvs_worker_init(&s_closing, &w_sc, UVS_POOL));
  ASSERT_OK(uvs_sched_close(&s_closing, UVS_CANCEL, sched_closed_cb));
  /* A cancel first moves the pool worker's inbox into its FIFO, invisibly;
   * do it once now so that the table sees a worker that holds still. */
  ASSERT_ERR(uvs_task_cancel(&t_running), UV_EBUSY);
  uvs_sched_stats(&s_open, &before);

  if (foreign) {
    ASSERT_OK(uv_thread_create(&thread, run_table, NULL));
    ASSERT_OK(uv_thread_join(&thread));
  } else {
    run_table(NULL);
    ASSERT_OK(uv_thread_create(&thread, off_thread_close, NULL));
    ASSERT_OK(uv_thread_join(&thread));
  }
  ASSERT_EQ(table_failures, 0);
  uvs_sched_stats(&s_open, &after);
  ASSERT_OK(memcmp(&before, &after, sizeof(before)));

  /* Every task meets the fate it had before the table. */
  ASSERT_OK(uvs_task_cancel(&t_delayed));
  ASSERT_OK(uvs_task_cancel(&t_periodic));
  uv_sem_post(&release_sem);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(closed_calls, 4); /* w_closing, s_closing */
  ASSERT_EQ(run_calls[I_RUNNING], 1);
  ASSERT_EQ(done_calls[I_RUNNING], 1);
  ASSERT_OK(done_status[I_RUNNING]);
  ASSERT_EQ(run_calls[I_QUEUED], 1);
  ASSERT_EQ(done_calls[I_QUEUED], 1);
  ASSERT_OK(done_status[I_QUEUED]);
  ASSERT_EQ(run_calls[I_NODONE], 1);
  ASSERT_EQ(run_calls[I_DELAYED] + run_calls[I_PERIODIC], 0);
  ASSERT_EQ(done_calls[I_DELAYED], 1);
  ASSERT_ERR(done_status[I_DELAYED], UV_ECANCELED);
  ASSERT_EQ(done_calls[I_PERIODIC], 1);
  ASSERT_ERR(done_status[I_PERIODIC], UV_ECANCELED);
  ASSERT_EQ(run_calls[I_CANCELLED], 0);
  ASSERT_EQ(done_calls[I_CANCELLED], 1);
  ASSERT_ERR(done_status[I_CANCELLED], UV_ECANCELED);
  ASSERT_EQ(done_calls[I_FINISHED], 1);
  ASSERT_EQ(run_calls[I_IDLE] + done_calls[I_IDLE], 0);
  uvs_sched_stats(&s_open, &after);
  ASSERT_UINT64_EQ(after.scheduled, 7);
  ASSERT_UINT64_EQ(after.pending, 0);

  /* Again after the close: the memory is the user's. */
  ASSERT_OK(uvs_worker_init(&s_open, &w_closed, UVS_LOOP));
  ASSERT_OK(uvs_schedule(&w_closed, &t_idle));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &s_open, UVS_DRAIN);
  ASSERT_EQ(run_calls[I_IDLE], 1);
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &s_closed, NULL));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &s_closed, UVS_CANCEL);

  uv_sem_destroy(&running_sem);
  uv_sem_destroy(&release_sem);
  for (i = 0; i < NSNAPS; i++) free(snaps[i].copy);
}


TEST_IMPL(errors_table_loop_thread) {
  errors_table(0);
  return 0;
}


TEST_IMPL(errors_table_foreign_thread) {
  errors_table(1);
  return 0;
}
