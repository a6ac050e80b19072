/* ACCEPTED before STARTED (SPEC 0.4, hooks): UVS_EV_ACCEPTED is reported
 * on the thread whose call accepted the task, before that call returns and
 * before run_cb can start. A call that published the task to its worker
 * first and reported it after would let a drain or loop turn start it in
 * between: STARTED before ACCEPTED. Issue 43.
 *
 * The window is made wide: the ACCEPTED hook of a watched task waits, up
 * to AO_WINDOW_MS, for that task's STARTED, and only then counts as
 * reported. Each watched task is scheduled from a foreign thread onto a
 * worker that would start it at once if it could: an idle one (the
 * schedule makes it ready), or one whose drain or loop turn is running a
 * gate task that the ACCEPTED hook opens, so that the same turn goes on to
 * the watched task the moment it can see it. The STARTED hook checks the
 * order every time.
 *
 * SPEC asks hooks not to block; this one waits on purpose, on the foreign
 * thread that makes the schedule call, which delays that call alone. */

#include "helpers.h"

#include <stdatomic.h>

#define AO_WINDOW_MS 100
#define AO_ROUNDS 2

typedef struct {
  uvs_task_t task;
  const char* what;
  atomic_int accepted; /* its ACCEPTED hook has returned */
  test_latch_t started;
  test_latch_t done;
  test_latch_t* open; /* a gate the ACCEPTED hook opens, or NULL */
} watched_t;

static uv_loop_t loop;
static uvs_sched_t sched;
static uv_async_t finished;
static test_latch_t gates_back;


static void ao_hook(uvs_worker_t* worker,
                    uvs_task_t* task,
                    uvs_event_t event,
                    int status,
                    void* arg) {
  watched_t* t;

  (void) worker;
  (void) status;
  (void) arg;
  if (task == NULL || task->data == NULL)
    return; /* posts, gates */
  t = task->data;
  if (event == UVS_EV_ACCEPTED) {
    if (t->open != NULL)
      test_latch_add(t->open, 1); /* the running turn may go on now */
    /* Were the task already in its worker's queue, it would start now. */
    (void) test_latch_wait(&t->started, 1, AO_WINDOW_MS);
    atomic_store(&t->accepted, 1);
  } else if (event == UVS_EV_STARTED) {
    if (!atomic_load(&t->accepted))
      test_failed(__FILE__, __LINE__,
                  "%s: STARTED before its ACCEPTED hook returned: ACCEPTED "
                  "was reported after the task was published to its worker",
                  t->what);
    test_latch_add(&t->started, 1);
  }
}


static void watched_run(uvs_task_t* task) {
  watched_t* t;

  t = task->data;
  ASSERT_EQ(atomic_load(&t->accepted), 1);
}


static void watched_done(uvs_task_t* task, int status) {
  watched_t* t;

  ASSERT_OK(status);
  t = task->data;
  test_latch_add(&t->done, 1);
}


static void gate_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  test_latch_add(&gates_back, 1);
}


static void finished_cb(uv_async_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
}


/* From a foreign thread: schedules a watched task onto w, AO_ROUNDS
 * times, and waits for each to be handed back; with busy set, a gate runs
 * on w when the watched task comes, and the ACCEPTED hook opens it. */
static void watch_rounds(uvs_worker_t* w, const char* what, int busy) {
  test_latch_t gate_started;
  test_latch_t gate_open;
  test_gate_t gate;
  watched_t t;
  int gates;
  int r;

  gates = 0;
  for (r = 0; r < AO_ROUNDS; r++) {
    memset(&t, 0, sizeof(t));
    t.what = what;
    test_latch_init(&t.started);
    test_latch_init(&t.done);
    ASSERT_OK(uvs_task_init(&t.task, watched_run, watched_done));
    t.task.data = &t;
    if (busy) {
      test_latch_init(&gate_started);
      test_latch_init(&gate_open);
      test_gate_init(&gate, &gate_started, &gate_open, 1, gate_done);
      gates = test_latch_count(&gates_back);
      ASSERT_OK(uvs_schedule(w, &gate.task));
      ASSERT(test_latch_wait(&gate_started, 1, TEST_WAIT_MS));
      t.open = &gate_open;
    }
    ASSERT_OK(uvs_schedule(w, &t.task));
    ASSERT_EQ(atomic_load(&t.accepted), 1);
    ASSERT(test_latch_wait(&t.done, 1, TEST_WAIT_MS));
    if (busy) {
      ASSERT(test_latch_wait(&gates_back, gates + 1, TEST_WAIT_MS));
      test_latch_destroy(&gate_started);
      test_latch_destroy(&gate_open);
    }
    test_latch_destroy(&t.started);
    test_latch_destroy(&t.done);
  }
}


typedef struct {
  uvs_worker_t* w;
  const char* what;
  int busy;
} scenario_t;

static scenario_t scenarios[2];
static int nscenarios;


static void driver(void* arg) {
  int i;

  (void) arg;
  for (i = 0; i < nscenarios; i++)
    watch_rounds(scenarios[i].w, scenarios[i].what, scenarios[i].busy);
  ASSERT_OK(uv_async_send(&finished));
}


/* Runs the scenarios from a foreign thread while the loop runs. */
static void run_scenarios(void) {
  uv_thread_t thread;

  ASSERT_OK(uv_async_init(&loop, &finished, finished_cb));
  ASSERT_OK(uv_thread_create(&thread, driver, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&thread));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&gates_back);
}


static void setup(void) {
  uvs_sched_options_t o;

  memset(&o, 0, sizeof(o));
  o.hook = ao_hook;
  test_latch_init(&gates_back);
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  nscenarios = 0;
}


static void add(uvs_worker_t* w, const char* what, int busy) {
  scenarios[nscenarios].w = w;
  scenarios[nscenarios].what = what;
  scenarios[nscenarios].busy = busy;
  nscenarios++;
}


/* A pool worker that is idle (the schedule makes it ready and the loop
 * posts its drain), and one whose drain runs a gate that the hook opens. */
TEST_IMPL(hooks_accepted_before_started_pool) {
  uvs_worker_t idle;
  uvs_worker_t busy;

  setup();
  ASSERT_OK(uvs_worker_init(&sched, &idle, UVS_POOL));
  ASSERT_OK(uvs_worker_init(&sched, &busy, UVS_POOL));
  add(&idle, "an idle pool worker", 0);
  add(&busy, "a pool worker whose drain runs", 1);
  run_scenarios();
  return 0;
}


/* The same on the loop: an idle loop worker, and one whose loop turn runs
 * a gate (the loop thread waits in it until the hook opens it). */
TEST_IMPL(hooks_accepted_before_started_loop) {
  uvs_worker_t idle;
  uvs_worker_t busy;

  setup();
  ASSERT_OK(uvs_worker_init(&sched, &idle, UVS_LOOP));
  ASSERT_OK(uvs_worker_init(&sched, &busy, UVS_LOOP));
  add(&idle, "an idle loop worker", 0);
  add(&busy, "a loop worker whose turn runs", 1);
  run_scenarios();
  return 0;
}


/* Wide workers: with per-key bounds (a task is filed under its key as it
 * is accepted) and without (it goes through the inbox); idle, so that a
 * lane is posted for the task at once. */
TEST_IMPL(hooks_accepted_before_started_wide) {
  uvs_worker_options_t wo;
  uvs_worker_t bounded;
  uvs_worker_t plain;

  setup();
  memset(&wo, 0, sizeof(wo));
  wo.width = 2;
  ASSERT_OK(uvs_worker_init_ex(&sched, &plain, UVS_POOL, &wo));
  wo.key_max_pending = 4;
  ASSERT_OK(uvs_worker_init_ex(&sched, &bounded, UVS_POOL, &wo));
  add(&plain, "a wide worker", 0);
  add(&bounded, "a wide worker with per-key bounds", 0);
  run_scenarios();
  return 0;
}
