/* Hooks (SPEC.md, "0.4 additions"): with `hook` set in the scheduler's
 * options, it is called with `hook_arg` for each task of the scheduler's
 * workers at four points:
 *
 * - UVS_EV_ACCEPTED on the thread whose call accepted the task, before that
 *   call returns and before run_cb can start;
 * - UVS_EV_STARTED on the thread that runs run_cb, right before it;
 * - UVS_EV_ENDED on that thread, right after run_cb returns;
 * - UVS_EV_HANDED_BACK on the loop thread, right before done_cb, with the
 *   hand-back status (status is 0 for the other events).
 *
 * A periodic task: ACCEPTED per schedule call, STARTED and ENDED per run,
 * HANDED_BACK once. A one-shot task scheduled again from its own run_cb:
 * ACCEPTED between its STARTED and ENDED, one HANDED_BACK at the end.
 * uvs_task_reschedule reports nothing; calls that return an error report
 * nothing. task is NULL for posts (every event) and for the ENDED of a
 * done-less task; a done-less task or post that ran reports no
 * HANDED_BACK, one dropped unrun reports HANDED_BACK with its status.
 * Each STARTED is followed by exactly one ENDED, and HANDED_BACK comes
 * after the task's last ENDED.
 *
 * The hook appends every event to a log under a mutex; the tests read the
 * log as a string of letters per task (A, S, E, H) and check threads and
 * statuses record by record. */

#include "helpers.h"

#include <stdatomic.h>

typedef struct {
  uvs_worker_t* worker;
  uvs_task_t* task;
  uvs_event_t event;
  int status;
  uv_thread_t thread;
} ev_t;

#define MAXEV 40000

static uv_loop_t loop;
static uvs_sched_t sched;
static uv_thread_t loop_thread;
static uv_mutex_t ev_mu;
static ev_t evs[MAXEV];
static int nev;
static int hook_arg_marker;


static void hook(uvs_worker_t* worker,
                 uvs_task_t* task,
                 uvs_event_t event,
                 int status,
                 void* arg) {
  ASSERT_PTR_EQ(arg, &hook_arg_marker);
  ASSERT_NOT_NULL(worker);
  if (event != UVS_EV_HANDED_BACK)
    ASSERT_OK(status);
  uv_mutex_lock(&ev_mu);
  ASSERT_LT(nev, MAXEV);
  evs[nev].worker = worker;
  evs[nev].task = task;
  evs[nev].event = event;
  evs[nev].status = status;
  evs[nev].thread = uv_thread_self();
  nev++;
  uv_mutex_unlock(&ev_mu);
}


static void setup(int manual_clock) {
  uvs_sched_options_t o;

  memset(&o, 0, sizeof(o));
  o.hook = hook;
  o.hook_arg = &hook_arg_marker;
  o.manual_clock = manual_clock;
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_mutex_init(&ev_mu));
  nev = 0;
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
}


/* The log's mutex stays: the log is read after the close. */
static void teardown(void) {
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


static int ev_count(void) {
  int n;

  uv_mutex_lock(&ev_mu);
  n = nev;
  uv_mutex_unlock(&ev_mu);
  return n;
}


static char ev_letter(uvs_event_t e) {
  switch (e) {
    case UVS_EV_ACCEPTED:
      return 'A';
    case UVS_EV_STARTED:
      return 'S';
    case UVS_EV_ENDED:
      return 'E';
    case UVS_EV_HANDED_BACK:
      return 'H';
  }
  ASSERT(0 && "an event outside uvs_event_t");
  return '?';
}


/* The events of `task` (not NULL) so far, as letters, into buf; the index
 * in the log of its last one in *last (-1 if none). */
static void task_seq(uvs_task_t* task, char* buf, size_t size, int* last) {
  size_t n;
  int i;

  n = 0;
  *last = -1;
  uv_mutex_lock(&ev_mu);
  for (i = 0; i < nev; i++) {
    if (evs[i].task != task)
      continue;
    ASSERT_LT(n + 1, size);
    buf[n++] = ev_letter(evs[i].event);
    *last = i;
  }
  uv_mutex_unlock(&ev_mu);
  buf[n] = '\0';
}


#define ASSERT_SEQ(task, want)                                             \
  do {                                                                     \
    char seq_[256];                                                        \
    int last_;                                                             \
    task_seq((task), seq_, sizeof(seq_), &last_);                          \
    if (strcmp(seq_, (want)) != 0)                                         \
      test_failed(__FILE__, __LINE__, "events of %s: \"%s\", want \"%s\"", \
                  #task, seq_, (want));                                    \
  } while (0)


/* A copy of the log record at index i. */
static ev_t ev_at(int i) {
  ev_t e;

  uv_mutex_lock(&ev_mu);
  ASSERT_GE(i, 0);
  ASSERT_LT(i, nev);
  e = evs[i];
  uv_mutex_unlock(&ev_mu);
  return e;
}


/* The last record of `task` (must exist). */
static ev_t last_of(uvs_task_t* task) {
  char seq[256];
  int last;

  task_seq(task, seq, sizeof(seq), &last);
  ASSERT_GE(last, 0);
  return ev_at(last);
}


/* The k-th (from 0) record of `task` with `event`; -1 if there is none. */
static int nth_of(uvs_task_t* task, uvs_event_t event, int k) {
  int i;
  int r;

  r = -1;
  uv_mutex_lock(&ev_mu);
  for (i = 0; i < nev; i++) {
    if (evs[i].task == task && evs[i].event == event && k-- == 0) {
      r = i;
      break;
    }
  }
  uv_mutex_unlock(&ev_mu);
  return r;
}


/* How many records of `worker` have `event` and `task` (NULL included). */
static int count_of(uvs_worker_t* worker, uvs_task_t* task, uvs_event_t event) {
  int i;
  int n;

  n = 0;
  uv_mutex_lock(&ev_mu);
  for (i = 0; i < nev; i++)
    n +=
        evs[i].worker == worker && evs[i].task == task && evs[i].event == event;
  uv_mutex_unlock(&ev_mu);
  return n;
}


/* How many records of `worker` have `event`, whatever their task. */
static int count_ev(uvs_worker_t* worker, uvs_event_t event) {
  int i;
  int n;

  n = 0;
  uv_mutex_lock(&ev_mu);
  for (i = 0; i < nev; i++)
    n += evs[i].worker == worker && evs[i].event == event;
  uv_mutex_unlock(&ev_mu);
  return n;
}


static int same_thread(uv_thread_t a, uv_thread_t b) {
  return uv_thread_equal(&a, &b);
}


/* ---- one-shot tasks ---------------------------------------------------- */

#define NI 8

typedef struct {
  uvs_task_t task;
  uvs_worker_t* worker;
  uv_thread_t run_thread;
  atomic_int runs;
  int done_calls;
  int status;
  int resched; /* reschedule_self: how many times to schedule itself again */
} item_t;

static item_t items[NI];
static int ndone;


/* run_cb of a plain one-shot task: the hook saw ACCEPTED, then STARTED on
 * this thread right before. */
static void plain_run(uvs_task_t* task) {
  item_t* it;
  ev_t e;

  it = TEST_CONTAINER_OF(task, item_t, task);
  it->run_thread = uv_thread_self();
  ASSERT_EQ(atomic_fetch_add(&it->runs, 1), 0);
  ASSERT_SEQ(task, "AS");
  e = last_of(task);
  ASSERT_EQ(e.event, UVS_EV_STARTED);
  ASSERT(same_thread(e.thread, it->run_thread));
  ASSERT_PTR_EQ(e.worker, it->worker);
  if (it->worker->where == UVS_LOOP)
    ASSERT(test_on_thread(loop_thread));
  else
    ASSERT(!test_on_thread(loop_thread));
}


/* done_cb of a one-shot task that ran: A, S, E, H in that order; S and E on
 * the run thread, H on the loop thread with done's status, and no other
 * event on the loop thread between H and this call. */
static void plain_done(uvs_task_t* task, int status) {
  item_t* it;
  ev_t s;
  ev_t e;
  ev_t h;
  int hi;
  int i;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ASSERT_EQ(it->done_calls, 1);
  ndone++;
  ASSERT_OK(status);
  ASSERT_SEQ(task, "ASEH");
  s = ev_at(nth_of(task, UVS_EV_STARTED, 0));
  e = ev_at(nth_of(task, UVS_EV_ENDED, 0));
  hi = nth_of(task, UVS_EV_HANDED_BACK, 0);
  h = ev_at(hi);
  ASSERT(same_thread(s.thread, it->run_thread));
  ASSERT(same_thread(e.thread, it->run_thread));
  ASSERT(same_thread(h.thread, loop_thread));
  ASSERT_OK(h.status);
  ASSERT_PTR_EQ(h.worker, it->worker);
  ASSERT_PTR_EQ(e.worker, it->worker);
  ASSERT_OK(s.status);
  ASSERT_OK(e.status);
  /* Right before done_cb: the loop thread reported nothing since. */
  for (i = hi + 1; i < ev_count(); i++)
    ASSERT(!same_thread(ev_at(i).thread, loop_thread));
}


static void item_init(item_t* it,
                      uvs_worker_t* w,
                      uvs_run_cb run,
                      uvs_done_cb done) {
  memset(it, 0, sizeof(*it));
  it->worker = w;
  ASSERT_OK(uvs_task_init(&it->task, run, done));
}


/* After a schedule call of `task` returned 0 on this thread: its last event
 * is an ACCEPTED reported on this thread, with status 0, for worker w. */
static void check_accepted_here(uvs_task_t* task, uvs_worker_t* w) {
  ev_t a;

  a = ev_at(nth_of(task, UVS_EV_ACCEPTED, 0));
  ASSERT(test_on_thread(a.thread));
  ASSERT_OK(a.status);
  ASSERT_PTR_EQ(a.worker, w);
}


static void foreign_schedule(void* arg) {
  item_t* it;

  it = (item_t*) arg;
  ASSERT_OK(uvs_schedule(it->worker, &it->task));
  /* Reported before the call returned, on this thread; the task may have
   * run by now. */
  check_accepted_here(&it->task, it->worker);
}


static void oneshot(uvs_where_t where) {
  uvs_worker_t w;
  uv_thread_t thread;
  int prev;
  int i;

  setup(0);
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  for (i = 0; i < NI; i++) item_init(&items[i], &w, plain_run, plain_done);
  for (i = 0; i < NI - 1; i++) {
    prev = ev_count();
    ASSERT_OK(uvs_schedule(&w, &items[i].task));
    check_accepted_here(&items[i].task, &w);
    if (where == UVS_LOOP) {
      /* Nothing else could have happened: the loop is not running. */
      ASSERT_EQ(ev_count(), prev + 1);
      ASSERT_SEQ(&items[i].task, "A");
    }
  }
  ASSERT_OK(uv_thread_create(&thread, foreign_schedule, &items[NI - 1]));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, NI);
  for (i = 0; i < NI; i++) {
    ASSERT_EQ(atomic_load(&items[i].runs), 1);
    ASSERT_SEQ(&items[i].task, "ASEH");
  }
  ASSERT_EQ(count_ev(&w, UVS_EV_ACCEPTED), NI);
  ASSERT_EQ(count_ev(&w, UVS_EV_STARTED), NI);
  ASSERT_EQ(count_ev(&w, UVS_EV_ENDED), NI);
  ASSERT_EQ(count_ev(&w, UVS_EV_HANDED_BACK), NI);
  if (where == UVS_LOOP) {
    /* One thread runs them all: each STARTED is followed by its ENDED
     * before the next STARTED. */
    for (i = 0; i < NI - 1; i++)
      ASSERT_LT(nth_of(&items[i].task, UVS_EV_ENDED, 0),
                nth_of(&items[i + 1].task, UVS_EV_STARTED, 0));
  }
  teardown();
}


TEST_IMPL(hooks_oneshot_pool) {
  oneshot(UVS_POOL);
  return 0;
}


TEST_IMPL(hooks_oneshot_loop) {
  oneshot(UVS_LOOP);
  return 0;
}


/* ---- periodic tasks (manual clock) ------------------------------------- */

static void periodic_run(uvs_task_t* task) {
  item_t* it;
  ev_t e;

  it = TEST_CONTAINER_OF(task, item_t, task);
  e = last_of(task);
  ASSERT_EQ(e.event, UVS_EV_STARTED);
  ASSERT(test_on_thread(e.thread));
  atomic_fetch_add(&it->runs, 1);
}


static void counting_done(uvs_task_t* task, int status) {
  item_t* it;
  ev_t h;

  ASSERT(test_on_thread(loop_thread));
  it = TEST_CONTAINER_OF(task, item_t, task);
  it->status = status;
  it->done_calls++;
  ndone++;
  h = last_of(task);
  ASSERT_EQ(h.event, UVS_EV_HANDED_BACK);
  ASSERT_EQ(h.status, status);
  ASSERT(same_thread(h.thread, loop_thread));
}


static void periodic(uvs_where_t where) {
  uvs_worker_t w;
  item_t* p;
  int k;

  setup(1);
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  p = &items[0];
  item_init(p, &w, periodic_run, counting_done);
  ASSERT_OK(uvs_schedule_every(&w, &p->task, 10, 10));
  ASSERT_SEQ(&p->task, "A");
  check_accepted_here(&p->task, &w);
  for (k = 1; k <= 3; k++) {
    ASSERT_OK(uvs_clock_advance(&sched, 10));
    TEST_RUN_UNTIL(&loop, count_of(&w, &p->task, UVS_EV_ENDED) == k);
  }
  ASSERT_EQ(atomic_load(&p->runs), 3);
  ASSERT_SEQ(&p->task, "ASESESE"); /* three runs */
  ASSERT_OK(uvs_task_cancel(&p->task));
  TEST_RUN_UNTIL(&loop, p->done_calls == 1);
  ASSERT_ERR(p->status, UV_ECANCELED);
  ASSERT_SEQ(&p->task, "ASESESEH");

  /* Scheduled again: a second ACCEPTED, and one more HANDED_BACK at the
   * end of that custody (here, the scheduler's close). */
  ASSERT_OK(uvs_schedule_every(&w, &p->task, 10, 10));
  ASSERT_SEQ(&p->task, "ASESESEHA");
  ASSERT_OK(uvs_clock_advance(&sched, 10));
  TEST_RUN_UNTIL(&loop, count_of(&w, &p->task, UVS_EV_ENDED) == 4);
  test_settle(&loop);
  ASSERT_SEQ(&p->task, "ASESESEHASE");
  ASSERT_EQ(p->done_calls, 1);
  teardown();
  ASSERT_EQ(p->done_calls, 2);
  ASSERT_ERR(p->status, UV_ECANCELED);
  ASSERT_SEQ(&p->task, "ASESESEHASEH");
  /* The first ACCEPTED and every STARTED/ENDED: status 0. */
  ASSERT_OK(ev_at(nth_of(&p->task, UVS_EV_ACCEPTED, 1)).status);
  ASSERT_ERR(ev_at(nth_of(&p->task, UVS_EV_HANDED_BACK, 0)).status,
             UV_ECANCELED);
  ASSERT_ERR(ev_at(nth_of(&p->task, UVS_EV_HANDED_BACK, 1)).status,
             UV_ECANCELED);
}


TEST_IMPL(hooks_periodic_pool) {
  periodic(UVS_POOL);
  return 0;
}


TEST_IMPL(hooks_periodic_loop) {
  periodic(UVS_LOOP);
  return 0;
}


/* ---- done-less tasks --------------------------------------------------- */

static atomic_int dl_runs;
static uvs_worker_t* dl_worker;

static void doneless_run(uvs_task_t* task) {
  ev_t e;

  e = last_of(task);
  ASSERT_EQ(e.event, UVS_EV_STARTED);
  ASSERT(test_on_thread(e.thread));
  ASSERT_PTR_EQ(e.worker, dl_worker);
  atomic_fetch_add(&dl_runs, 1);
}


static int dl_close_calls;
static uvs_task_t dl_dropped[2];

/* By the close callback, the dropped done-less tasks were reported handed
 * back (before they were released), on the loop thread. */
static void dl_close_cb(uvs_worker_t* w) {
  int i;
  ev_t h;

  ASSERT(test_on_thread(loop_thread));
  dl_close_calls++;
  for (i = 0; i < 2; i++) {
    ASSERT_SEQ(&dl_dropped[i], "AH");
    h = last_of(&dl_dropped[i]);
    ASSERT_ERR(h.status, UV_ECANCELED);
    ASSERT(same_thread(h.thread, loop_thread));
    ASSERT_PTR_EQ(h.worker, w);
  }
}


static void doneless(uvs_where_t where) {
  uvs_task_t t[3];
  uvs_worker_t w;
  uvs_worker_t w2;
  test_latch_t started;
  test_latch_t release;
  test_gate_t gate;
  int i;
  int e;

  setup(0);
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  ASSERT_OK(uvs_worker_init(&sched, &w2, where));
  dl_worker = &w;

  /* Ran: A and S with the task, E with NULL, no H. */
  for (i = 0; i < 3; i++) {
    ASSERT_OK(uvs_task_init(&t[i], doneless_run, NULL));
    ASSERT_OK(uvs_schedule(&w, &t[i]));
    check_accepted_here(&t[i], &w);
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&dl_runs), 3);
  for (i = 0; i < 3; i++) ASSERT_SEQ(&t[i], "AS");
  ASSERT_EQ(count_ev(&w, UVS_EV_ACCEPTED), 3);
  ASSERT_EQ(count_ev(&w, UVS_EV_STARTED), 3);
  ASSERT_EQ(count_of(&w, NULL, UVS_EV_ENDED), 3);
  ASSERT_EQ(count_ev(&w, UVS_EV_ENDED), 3);
  ASSERT_EQ(count_ev(&w, UVS_EV_HANDED_BACK), 0);
  /* Each ENDED on the thread of a STARTED, after it. */
  for (i = 0; i < 3; i++) {
    int s = nth_of(&t[i], UVS_EV_STARTED, 0);
    int k;
    int found = 0;
    for (k = s + 1; k < ev_count() && !found; k++) {
      ev_t r = ev_at(k);
      found = r.worker == &w && r.event == UVS_EV_ENDED &&
              same_thread(r.thread, ev_at(s).thread);
    }
    ASSERT(found);
  }

  /* Dropped unrun by a close with UVS_CANCEL: H with UV_ECANCELED, before
   * the close callback; no S, no E. */
  test_latch_init(&started);
  test_latch_init(&release);
  if (where == UVS_POOL) {
    test_gate_init(&gate, &started, &release, 1, NULL);
    ASSERT_OK(uvs_schedule(&w2, &gate.task));
    TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
  }
  for (i = 0; i < 2; i++) {
    ASSERT_OK(uvs_task_init(&dl_dropped[i], doneless_run, NULL));
    ASSERT_OK(uvs_schedule(&w2, &dl_dropped[i]));
  }
  e = ev_count();
  ASSERT_OK(uvs_worker_close(&w2, UVS_CANCEL, dl_close_cb));
  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(dl_close_calls, 1);
  ASSERT_EQ(count_ev(&w2, UVS_EV_HANDED_BACK), 2);
  for (i = 0; i < 2; i++) ASSERT_SEQ(&dl_dropped[i], "AH");
  if (where == UVS_POOL) {
    /* The gate was running: it finishes, done-less, so no H. */
    ASSERT_SEQ(&gate.task, "AS");
    ASSERT_EQ(count_of(&w2, NULL, UVS_EV_ENDED), 1);
  }
  ASSERT_GE(ev_count(), e + 2);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
}


TEST_IMPL(hooks_doneless_pool) {
  doneless(UVS_POOL);
  return 0;
}


TEST_IMPL(hooks_doneless_loop) {
  doneless(UVS_LOOP);
  return 0;
}


/* A done-less task evicted by a DROP_OLDEST worker: H with UV_ENOBUFS. */
TEST_IMPL(hooks_doneless_evicted) {
  uvs_worker_options_t o;
  uvs_worker_t w;
  uvs_task_t d;
  item_t* it;

  setup(0);
  memset(&o, 0, sizeof(o));
  o.max_pending = 1;
  o.on_full = UVS_FULL_DROP_OLDEST;
  ASSERT_OK(uvs_worker_init_ex(&sched, &w, UVS_LOOP, &o));
  dl_worker = &w;
  it = &items[0];
  item_init(it, &w, plain_run, plain_done);
  ASSERT_OK(uvs_task_init(&d, doneless_run, NULL));
  ASSERT_OK(uvs_schedule(&w, &d));
  ASSERT_OK(uvs_schedule(&w, &it->task)); /* evicts d */
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&dl_runs), 0);
  ASSERT_SEQ(&d, "AH");
  ASSERT_ERR(last_of(&d).status, UV_ENOBUFS);
  ASSERT(same_thread(last_of(&d).thread, loop_thread));
  ASSERT_EQ(ndone, 1);
  ASSERT_SEQ(&it->task, "ASEH");
  teardown();
  return 0;
}


/* ---- posts ------------------------------------------------------------- */

static atomic_int post_runs;

/* The last event this thread reported for the worker, other than an
 * ACCEPTED (posts from this thread), is a STARTED with NULL task. */
static void post_fn(void* arg) {
  uvs_worker_t* w;
  int i;
  int found;

  w = (uvs_worker_t*) arg;
  found = 0;
  uv_mutex_lock(&ev_mu);
  for (i = nev - 1; i >= 0; i--) {
    if (evs[i].worker != w || evs[i].event == UVS_EV_ACCEPTED ||
        !test_on_thread(evs[i].thread))
      continue;
    ASSERT_EQ(evs[i].event, UVS_EV_STARTED);
    ASSERT_NULL(evs[i].task);
    found = 1;
    break;
  }
  uv_mutex_unlock(&ev_mu);
  ASSERT(found);
  atomic_fetch_add(&post_runs, 1);
}


static uvs_worker_t post_w[2];

static void foreign_posts(void* arg) {
  int i;
  int k;

  (void) arg;
  int prev;

  for (k = 0; k < 2; k++) {
    for (i = 0; i < 2; i++) {
      prev = count_of(&post_w[k], NULL, UVS_EV_ACCEPTED);
      ASSERT_OK(uvs_post(&post_w[k], post_fn, &post_w[k]));
      /* Reported before the call returned (only this thread posts now). */
      ASSERT_EQ(count_of(&post_w[k], NULL, UVS_EV_ACCEPTED), prev + 1);
    }
  }
}


static int post_close_calls;

static void post_close_cb(uvs_worker_t* w) {
  post_close_calls++;
  ASSERT_EQ(count_of(w, NULL, UVS_EV_HANDED_BACK), 2);
}


TEST_IMPL(hooks_posts) {
  uv_thread_t thread;
  uvs_worker_t w3;
  int prev;
  int i;
  int k;
  int on_loop;

  setup(0);
  ASSERT_OK(uvs_worker_init(&sched, &post_w[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &post_w[1], UVS_LOOP));
  for (k = 0; k < 2; k++) {
    for (i = 0; i < 5; i++) {
      prev = count_of(&post_w[k], NULL, UVS_EV_ACCEPTED);
      ASSERT_OK(uvs_post(&post_w[k], post_fn, &post_w[k]));
      ASSERT_EQ(count_of(&post_w[k], NULL, UVS_EV_ACCEPTED), prev + 1);
    }
  }
  ASSERT_OK(uv_thread_create(&thread, foreign_posts, NULL));
  ASSERT_OK(uv_thread_join(&thread));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&post_runs), 14);
  for (k = 0; k < 2; k++) {
    /* Every event of a post has NULL task; a post that ran: no H. */
    ASSERT_EQ(count_of(&post_w[k], NULL, UVS_EV_ACCEPTED), 7);
    ASSERT_EQ(count_of(&post_w[k], NULL, UVS_EV_STARTED), 7);
    ASSERT_EQ(count_of(&post_w[k], NULL, UVS_EV_ENDED), 7);
    ASSERT_EQ(count_ev(&post_w[k], UVS_EV_HANDED_BACK), 0);
    ASSERT_EQ(count_ev(&post_w[k], UVS_EV_ACCEPTED), 7);
    ASSERT_EQ(count_ev(&post_w[k], UVS_EV_STARTED), 7);
    ASSERT_EQ(count_ev(&post_w[k], UVS_EV_ENDED), 7);
  }
  /* Threads: 5 ACCEPTED per worker on this thread, 2 elsewhere; S and E
   * on the loop thread exactly for the loop worker. */
  for (k = 0; k < 2; k++) {
    on_loop = 0;
    for (i = 0; i < ev_count(); i++) {
      ev_t e = ev_at(i);
      if (e.worker != &post_w[k])
        continue;
      if (e.event == UVS_EV_ACCEPTED) {
        on_loop += same_thread(e.thread, loop_thread);
      } else {
        ASSERT_EQ(same_thread(e.thread, loop_thread), k == 1);
      }
    }
    ASSERT_EQ(on_loop, 5);
  }

  /* Dropped unrun by a close: H with NULL task and UV_ECANCELED. */
  ASSERT_OK(uvs_worker_init(&sched, &w3, UVS_LOOP));
  ASSERT_OK(uvs_post(&w3, post_fn, &w3));
  ASSERT_OK(uvs_post(&w3, post_fn, &w3));
  ASSERT_OK(uvs_worker_close(&w3, UVS_CANCEL, post_close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(post_close_calls, 1);
  ASSERT_EQ(atomic_load(&post_runs), 14);
  ASSERT_EQ(count_of(&w3, NULL, UVS_EV_ACCEPTED), 2);
  ASSERT_EQ(count_ev(&w3, UVS_EV_STARTED), 0);
  ASSERT_EQ(count_ev(&w3, UVS_EV_ENDED), 0);
  ASSERT_EQ(count_of(&w3, NULL, UVS_EV_HANDED_BACK), 2);
  for (i = 0; i < ev_count(); i++) {
    ev_t e = ev_at(i);
    if (e.worker == &w3 && e.event == UVS_EV_HANDED_BACK) {
      ASSERT_ERR(e.status, UV_ECANCELED);
      ASSERT(same_thread(e.thread, loop_thread));
    }
  }
  teardown();
  return 0;
}


/* ---- a one-shot task scheduled again from its own run_cb ---------------- */

static void resched_run(uvs_task_t* task) {
  item_t* it;
  int runs;
  ev_t a;

  it = TEST_CONTAINER_OF(task, item_t, task);
  runs = atomic_fetch_add(&it->runs, 1) + 1;
  ASSERT_EQ(last_of(task).event, UVS_EV_STARTED);
  if (runs > it->resched)
    return;
  if (runs % 2 == 1)
    ASSERT_OK(uvs_schedule(it->worker, task));
  else
    ASSERT_OK(uvs_schedule_after(it->worker, task, 1));
  /* ACCEPTED inside this run_cb, on this thread, before its ENDED. */
  a = last_of(task);
  ASSERT_EQ(a.event, UVS_EV_ACCEPTED);
  ASSERT(test_on_thread(a.thread));
  ASSERT_PTR_EQ(a.worker, it->worker);
}


static void resched_self(uvs_where_t where) {
  uvs_worker_t w;
  item_t* it;
  char want[64];
  int r;

  setup(0);
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  it = &items[0];
  item_init(it, &w, resched_run, counting_done);
  it->resched = 3;
  ASSERT_OK(uvs_schedule(&w, &it->task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&it->runs), 4);
  ASSERT_EQ(it->done_calls, 1);
  ASSERT_OK(it->status);
  strcpy(want, "AS");
  for (r = 0; r < 3; r++) strcat(want, "AES");
  strcat(want, "EH");
  ASSERT_SEQ(&it->task, want); /* ASAESAESAESEH */
  ASSERT_OK(last_of(&it->task).status);
  teardown();
}


TEST_IMPL(hooks_reschedule_self_pool) {
  resched_self(UVS_POOL);
  return 0;
}


TEST_IMPL(hooks_reschedule_self_loop) {
  resched_self(UVS_LOOP);
  return 0;
}


/* ---- what reports nothing ---------------------------------------------- */

static void never_fn(void* arg) {
  (void) arg;
  ASSERT(0 && "a rejected post ran");
}


static void never_done(uvs_task_t* task, int status) {
  (void) task;
  (void) status;
  ASSERT(0 && "a task no call accepted was handed back");
}


static int closed_calls;

static void count_closed(uvs_worker_t* w) {
  (void) w;
  closed_calls++;
}


/* uvs_task_reschedule keeps the task accepted: no event. Calls that return
 * an error report nothing, on any kind of worker. */
TEST_IMPL(hooks_silent_calls) {
  uvs_worker_options_t o;
  uvs_worker_t w;
  uvs_worker_t wp;
  uvs_worker_t wb;
  uvs_worker_t wc;
  uvs_task_t never;
  uvs_task_t never_dl;
  item_t* a;
  item_t* c;
  int n;

  setup(1);
  ASSERT_OK(uvs_worker_init(&sched, &w, UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &wp, UVS_POOL));
  memset(&o, 0, sizeof(o));
  o.max_pending = 1;
  o.on_full = UVS_FULL_REJECT;
  ASSERT_OK(uvs_worker_init_ex(&sched, &wb, UVS_LOOP, &o));
  ASSERT_OK(uvs_worker_init(&sched, &wc, UVS_POOL));
  a = &items[0];
  c = &items[1];
  item_init(a, &w, plain_run, counting_done);
  item_init(c, &wb, plain_run, plain_done);
  ASSERT_OK(uvs_task_init(&never, plain_run, never_done));
  ASSERT_OK(uvs_task_init(&never_dl, plain_run, NULL));

  ASSERT_OK(uvs_schedule_after(&w, &a->task, 100));
  ASSERT_SEQ(&a->task, "A");
  n = ev_count();
  ASSERT_EQ(n, 1);

  /* Re-arm: the task stays accepted. */
  ASSERT_OK(uvs_task_reschedule(&a->task, 50));
  ASSERT_OK(uvs_task_reschedule(&a->task, 200));
  ASSERT_EQ(ev_count(), n);

  /* Errors. */
  ASSERT_ERR(uvs_schedule(&w, &a->task), UV_EBUSY);
  ASSERT_ERR(uvs_schedule(&wp, &a->task), UV_EBUSY);
  ASSERT_ERR(uvs_schedule_after(&wp, &a->task, 5), UV_EBUSY);
  ASSERT_ERR(uvs_schedule(NULL, &never), UV_EINVAL);
  ASSERT_ERR(uvs_schedule(&w, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(&wp, &never, 1, 0), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_every(&wp, &never_dl, 1, 1), UV_EINVAL);
  ASSERT_ERR(uvs_schedule_after(&wp, &never, (1ull << 40) + 1), UV_EINVAL);
  ASSERT_ERR(uvs_task_cancel(&never), UV_EINVAL);
  ASSERT_ERR(uvs_task_reschedule(&never, 1), UV_EINVAL);
  ASSERT_ERR(uvs_post(&wp, NULL, NULL), UV_EINVAL);
  ASSERT_OK(uvs_schedule(&wb, &c->task));
  ASSERT_SEQ(&c->task, "A");
  n = ev_count();
  ASSERT_ERR(uvs_schedule(&wb, &never), UV_EAGAIN);
  ASSERT_ERR(uvs_post(&wb, never_fn, NULL), UV_EAGAIN);
  ASSERT_ERR(uvs_task_reschedule(&c->task, 5), UV_EBUSY); /* queued */
  ASSERT_EQ(ev_count(), n);

  ASSERT_OK(uvs_worker_close(&wc, UVS_CANCEL, count_closed));
  ASSERT_ERR(uvs_schedule(&wc, &never), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_post(&wc, never_fn, NULL), UV_ESHUTDOWN);
  TEST_RUN_UNTIL(&loop, closed_calls == 1 && c->done_calls == 1);
  ASSERT_ERR(uvs_schedule(&wc, &never), UV_ESHUTDOWN);
  ASSERT_ERR(uvs_post(&wc, never_fn, NULL), UV_ESHUTDOWN);
  ASSERT_SEQ(&c->task, "ASEH");
  ASSERT_SEQ(&never, "");
  ASSERT_SEQ(&never_dl, "");

  /* A cancel that works reports H; one that does not reports nothing. */
  n = ev_count();
  ASSERT_OK(uvs_task_cancel(&a->task));
  ASSERT_ERR(uvs_task_cancel(&a->task), UV_EBUSY);
  ASSERT_ERR(uvs_task_reschedule(&a->task, 5), UV_EBUSY);
  TEST_RUN_UNTIL(&loop, a->done_calls == 1);
  ASSERT_ERR(a->status, UV_ECANCELED);
  ASSERT_SEQ(&a->task, "AH");
  ASSERT_ERR(uvs_task_cancel(&a->task), UV_EBUSY);
  ASSERT_EQ(ev_count(), n + 1);
  /* Only the tasks above: a, c and nothing of the rejected calls. */
  ASSERT_EQ(count_ev(&wp, UVS_EV_ACCEPTED), 0);
  ASSERT_EQ(count_ev(&wc, UVS_EV_ACCEPTED), 0);
  ASSERT_EQ(count_ev(&wb, UVS_EV_ACCEPTED), 1);
  ASSERT_EQ(count_of(&wb, NULL, UVS_EV_ACCEPTED), 0);
  teardown();
  return 0;
}


/* ---- cancel ------------------------------------------------------------ */

/* A periodic task that cancels itself in its third run: H (UV_ECANCELED)
 * after that run's ENDED. */
static void cancel_own_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  if (atomic_fetch_add(&it->runs, 1) + 1 == 3)
    ASSERT_OK(uvs_task_cancel(task));
}


/* A one-shot task that tries to cancel itself: UV_EBUSY, no event. */
static void cancel_running_run(uvs_task_t* task) {
  item_t* it;

  it = TEST_CONTAINER_OF(task, item_t, task);
  atomic_fetch_add(&it->runs, 1);
  ASSERT_ERR(uvs_task_cancel(task), UV_EBUSY);
  ASSERT_SEQ(task, "AS");
}


static void gate_done(uvs_task_t* task, int status) {
  ev_t h;

  ASSERT(test_on_thread(loop_thread));
  ASSERT_OK(status);
  h = last_of(task);
  ASSERT_EQ(h.event, UVS_EV_HANDED_BACK);
  ASSERT_OK(h.status);
  ndone++;
}


static void cancel_events(uvs_where_t where) {
  uvs_worker_t w;
  test_latch_t started;
  test_latch_t release;
  test_gate_t gate;
  item_t* q;
  item_t* d;
  item_t* p;
  item_t* r;

  setup(0);
  test_latch_init(&started);
  test_latch_init(&release);
  ASSERT_OK(uvs_worker_init(&sched, &w, where));
  q = &items[0];
  d = &items[1];
  p = &items[2];
  r = &items[3];
  item_init(q, &w, plain_run, counting_done);
  item_init(d, &w, plain_run, counting_done);
  item_init(p, &w, cancel_own_run, counting_done);
  item_init(r, &w, cancel_running_run, counting_done);

  /* A queued task (behind a running gate on a pool worker; the loop not
   * running on a loop worker): A then H with UV_ECANCELED, while the
   * worker is busy. */
  if (where == UVS_POOL) {
    test_gate_init(&gate, &started, &release, 1, gate_done);
    ASSERT_OK(uvs_schedule(&w, &gate.task));
    TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 1);
    /* A running one-shot task can't be cancelled: nothing reported. */
    ASSERT_ERR(uvs_task_cancel(&gate.task), UV_EBUSY);
    ASSERT_SEQ(&gate.task, "AS");
  }
  ASSERT_OK(uvs_schedule(&w, &q->task));
  ASSERT_OK(uvs_task_cancel(&q->task));
  TEST_RUN_UNTIL(&loop, q->done_calls == 1);
  ASSERT_ERR(q->status, UV_ECANCELED);
  ASSERT_SEQ(&q->task, "AH");
  ASSERT(same_thread(last_of(&q->task).thread, loop_thread));
  if (where == UVS_POOL) {
    test_latch_add(&release, 1);
    TEST_RUN_UNTIL(&loop, ndone == 2);
    ASSERT_SEQ(&gate.task, "ASEH");
    ASSERT_OK(last_of(&gate.task).status);
  }

  /* A delayed task: A then H with UV_ECANCELED. */
  ASSERT_OK(uvs_schedule_after(&w, &d->task, 100000));
  ASSERT_OK(uvs_task_cancel(&d->task));
  TEST_RUN_UNTIL(&loop, d->done_calls == 1);
  ASSERT_ERR(d->status, UV_ECANCELED);
  ASSERT_SEQ(&d->task, "AH");
  ASSERT_ERR(last_of(&d->task).status, UV_ECANCELED);

  /* A periodic task cancelled in its own run: H after that run's E. */
  ASSERT_OK(uvs_schedule_every(&w, &p->task, 1, 1));
  TEST_RUN_UNTIL(&loop, p->done_calls == 1);
  ASSERT_EQ(atomic_load(&p->runs), 3);
  ASSERT_ERR(p->status, UV_ECANCELED);
  ASSERT_SEQ(&p->task, "ASESESEH");
  ASSERT_ERR(last_of(&p->task).status, UV_ECANCELED);

  /* A one-shot task whose cancel of itself fails: A S E H(0). */
  ASSERT_OK(uvs_schedule(&w, &r->task));
  TEST_RUN_UNTIL(&loop, r->done_calls == 1);
  ASSERT_OK(r->status);
  ASSERT_SEQ(&r->task, "ASEH");
  ASSERT_OK(last_of(&r->task).status);
  teardown();
  test_latch_destroy(&started);
  test_latch_destroy(&release);
}


TEST_IMPL(hooks_cancel_pool) {
  cancel_events(UVS_POOL);
  return 0;
}


TEST_IMPL(hooks_cancel_loop) {
  cancel_events(UVS_LOOP);
  return 0;
}


/* A close with UVS_DRAIN runs what is queued (A S E H(0)); the scheduler's
 * close with UVS_CANCEL hands back what is queued (A H(UV_ECANCELED)). */
TEST_IMPL(hooks_close_drain_and_cancel) {
  uvs_worker_t w1;
  uvs_worker_t w2;
  int i;

  setup(0);
  ASSERT_OK(uvs_worker_init(&sched, &w1, UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &w2, UVS_LOOP));
  for (i = 0; i < 4; i++)
    item_init(&items[i], i < 2 ? &w1 : &w2, plain_run, counting_done);
  for (i = 0; i < 2; i++) ASSERT_OK(uvs_schedule(&w1, &items[i].task));
  ASSERT_OK(uvs_worker_close(&w1, UVS_DRAIN, count_closed));
  TEST_RUN_UNTIL(&loop, closed_calls == 1);
  ASSERT_EQ(ndone, 2);
  for (i = 2; i < 4; i++) ASSERT_OK(uvs_schedule(&w2, &items[i].task));
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(closed_calls, 1);
  ASSERT_EQ(ndone, 4);
  for (i = 0; i < 2; i++) {
    ASSERT_OK(items[i].status);
    ASSERT_SEQ(&items[i].task, "ASEH");
  }
  for (i = 2; i < 4; i++) {
    ASSERT_ERR(items[i].status, UV_ECANCELED);
    ASSERT_SEQ(&items[i].task, "AH");
    ASSERT_ERR(last_of(&items[i].task).status, UV_ECANCELED);
  }
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* ---- races ------------------------------------------------------------- */

/* Three foreign threads schedule onto a serial pool worker, a width-4
 * keyed pool worker and a loop worker, and cancel their own tasks a few
 * places back while tasks run; one of them closes the wide worker midway
 * (UVS_CANCEL), and the loop thread closes the scheduler (UVS_CANCEL) as
 * soon as they are done, with tasks still queued and running. Then, per
 * task: nothing if its schedule failed; otherwise A S E H(0) or A H with a
 * non-zero status, the status done_cb got, S and E on one run thread (the
 * loop thread exactly for the loop worker), H on the loop thread. */
#define RP 3
#define RN 600
#define RW 3

typedef struct {
  uvs_task_t task;
  int id;
  int w;
  int rc;
  int done_calls;
  int status;
  atomic_int runs;
} rtask_t;

static rtask_t rt[RP][RN];
static uvs_worker_t rw[RW];
static uv_thread_t rthreads[RP];
static uv_async_t finished_async;
static atomic_int finished;
static int race_done;
static int race_close_calls;


static void r_run(uvs_task_t* task) {
  rtask_t* t;

  t = TEST_CONTAINER_OF(task, rtask_t, task);
  ASSERT_EQ(atomic_fetch_add(&t->runs, 1), 0);
  if ((t->id & 7) == 0)
    test_spin_us(50);
}


static void r_done(uvs_task_t* task, int status) {
  rtask_t* t;

  ASSERT(test_on_thread(loop_thread));
  t = TEST_CONTAINER_OF(task, rtask_t, task);
  t->status = status;
  t->done_calls++;
  race_done++;
  ASSERT_EQ(last_of(task).event, UVS_EV_HANDED_BACK);
  ASSERT_EQ(last_of(task).status, status);
}


static void r_producer(void* arg) {
  int p;
  int i;
  int r;

  p = (int) (intptr_t) arg;
  for (i = 0; i < RN; i++) {
    rtask_t* t = &rt[p][i];
    r = uvs_schedule(&rw[t->w], &t->task);
    ASSERT(r == 0 || r == UV_ESHUTDOWN);
    t->rc = r;
    if (i >= 3 && i % 3 == 0 && rt[p][i - 3].rc == 0) {
      r = uvs_task_cancel(&rt[p][i - 3].task);
      ASSERT(r == 0 || r == UV_EBUSY);
    }
    if (p == 0 && i == RN / 2)
      ASSERT_OK(uvs_worker_close(&rw[1], UVS_CANCEL, NULL));
  }
  atomic_fetch_add(&finished, 1);
  uv_async_send(&finished_async);
}


static void r_sched_closed(uvs_sched_t* s) {
  (void) s;
  race_close_calls++;
}


static void r_finished(uv_async_t* h) {
  int p;

  if (atomic_load(&finished) < RP)
    return;
  for (p = 0; p < RP; p++) ASSERT_OK(uv_thread_join(&rthreads[p]));
  uv_close((uv_handle_t*) h, NULL);
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, r_sched_closed));
}


TEST_IMPL(hooks_race_cancel_close) {
  uvs_worker_options_t o;
  uvs_sched_options_t so;
  int p;
  int i;
  int accepted;
  int ran;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  memset(&so, 0, sizeof(so));
  so.hook = hook;
  so.hook_arg = &hook_arg_marker;
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_mutex_init(&ev_mu));
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &so));
  ASSERT_OK(uv_async_init(&loop, &finished_async, r_finished));
  memset(&o, 0, sizeof(o));
  o.width = 4;
  ASSERT_OK(uvs_worker_init(&sched, &rw[0], UVS_POOL));
  ASSERT_OK(uvs_worker_init_ex(&sched, &rw[1], UVS_POOL, &o));
  ASSERT_OK(uvs_worker_init(&sched, &rw[2], UVS_LOOP));
  for (p = 0; p < RP; p++) {
    for (i = 0; i < RN; i++) {
      rt[p][i].id = i;
      rt[p][i].w = (i + p) % RW;
      rt[p][i].rc = 1;
      ASSERT_OK(uvs_task_init(&rt[p][i].task, r_run, r_done));
      ASSERT_OK(uvs_task_set_key(&rt[p][i].task, (uint64_t) (i % 7)));
    }
  }
  for (p = 0; p < RP; p++)
    ASSERT_OK(uv_thread_create(&rthreads[p], r_producer, (void*) (intptr_t) p));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(race_close_calls, 1);

  accepted = 0;
  ran = 0;
  for (p = 0; p < RP; p++) {
    for (i = 0; i < RN; i++) {
      rtask_t* t = &rt[p][i];
      char seq[16];
      int last;
      ev_t e;
      int s_i;
      int e_i;
      int h_i;

      task_seq(&t->task, seq, sizeof(seq), &last);
      if (t->rc != 0) {
        ASSERT_ERR(t->rc, UV_ESHUTDOWN);
        ASSERT_EQ(t->done_calls, 0);
        ASSERT_EQ(seq[0], '\0');
        continue;
      }
      accepted++;
      ASSERT_EQ(t->done_calls, 1);
      if (atomic_load(&t->runs) == 1) {
        ran++;
        ASSERT_OK(t->status);
        if (strcmp(seq, "ASEH") != 0)
          test_failed(__FILE__, __LINE__, "task %d/%d: \"%s\"", p, i, seq);
        s_i = nth_of(&t->task, UVS_EV_STARTED, 0);
        e_i = nth_of(&t->task, UVS_EV_ENDED, 0);
        ASSERT(same_thread(ev_at(s_i).thread, ev_at(e_i).thread));
        ASSERT_EQ(same_thread(ev_at(s_i).thread, loop_thread), t->w == 2);
      } else {
        ASSERT_EQ(atomic_load(&t->runs), 0);
        ASSERT_ERR(t->status, UV_ECANCELED);
        if (strcmp(seq, "AH") != 0)
          test_failed(__FILE__, __LINE__, "task %d/%d: \"%s\"", p, i, seq);
      }
      h_i = nth_of(&t->task, UVS_EV_HANDED_BACK, 0);
      e = ev_at(h_i);
      ASSERT(same_thread(e.thread, loop_thread));
      ASSERT_EQ(e.status, t->status);
      ASSERT_PTR_EQ(e.worker, &rw[t->w]);
      /* Accepted on its producer's thread. */
      e = ev_at(nth_of(&t->task, UVS_EV_ACCEPTED, 0));
      ASSERT(same_thread(e.thread, rthreads[p]));
      ASSERT_LT(nth_of(&t->task, UVS_EV_ACCEPTED, 0), h_i);
    }
  }
  ASSERT_EQ(race_done, accepted);
  ASSERT_GT(accepted, 0);
  ASSERT_GT(ran, 0);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}
