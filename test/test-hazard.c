/* Hazard slots (src/hazard.c): a worker's close waits for a cancel that
 * may be using that worker, and for no other. A cancel holds its slot for
 * a few instructions only, so these tests hold one open through the
 * internal calls that uvs_task_cancel() makes. */

#include "task.h"

#include <stdatomic.h>

typedef struct uvs__hazard_s uvs__hazard_t;
uvs__hazard_t* uvs__hazard_enter(void);
void uvs__hazard_protect(uvs__hazard_t* hazard, uvs_worker_t* w);
void uvs__hazard_leave(uvs__hazard_t* hazard);

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uvs_worker_t other; /* stands for a worker of another scheduler */
static atomic_int held;    /* the helper's slot names worker */
static atomic_int released;
static int released_at_close;
static int close_calls;


static void close_cb(uvs_worker_t* w) {
  ASSERT_PTR_EQ(w, &worker);
  released_at_close = atomic_load(&released);
  close_calls++;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


/* Names `worker` in this thread's slot, then lets it go after a while: the
 * close must not call back before that. */
static void holder(void* arg) {
  uvs__hazard_t* h;

  (void) arg;
  h = uvs__hazard_enter();
  ASSERT_PTR_NE(h, NULL);
  uvs__hazard_protect(h, &worker);
  atomic_store(&held, 1);
  uv_sleep(100);
  atomic_store(&released, 1);
  uvs__hazard_leave(h);
}


TEST_IMPL(hazard_close_waits_for_its_cancel) {
  uv_thread_t t;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uv_thread_create(&t, holder, NULL));
  while (!atomic_load(&held)) uv_sleep(1);
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  /* The close called back only once the slot no longer named worker. */
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(released_at_close, 1);
  ASSERT_OK(uv_thread_join(&t));
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


TEST_IMPL(hazard_close_ignores_other_cancels) {
  uvs__hazard_t* h;

  /* This thread's slot names another worker for the whole test, as a
   * cancel on another scheduler stuck mid-way would. A close that waited
   * for every cancel in the process would never return here. */
  h = uvs__hazard_enter();
  ASSERT_PTR_NE(h, NULL);
  uvs__hazard_protect(h, &other);
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  atomic_store(&released, 1);
  ASSERT_OK(uvs_worker_close(&worker, UVS_DRAIN, close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(close_calls, 1);
  uvs__hazard_leave(h);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* A thread's slot is its own: a second cancel on the same thread reuses
 * it, and a thread that exits gives it back for the next one. */
static uvs__hazard_t* seen_slot;

static void take_slot(void* arg) {
  uvs__hazard_t* h;

  h = uvs__hazard_enter();
  ASSERT_PTR_NE(h, NULL);
  uvs__hazard_leave(h);
  *(uvs__hazard_t**) arg = h;
}


TEST_IMPL(hazard_slot_per_thread_reused) {
  uvs__hazard_t* a;
  uvs__hazard_t* b;
  uv_thread_t t;
  int i;

  a = uvs__hazard_enter();
  uvs__hazard_leave(a);
  b = uvs__hazard_enter();
  uvs__hazard_leave(b);
  ASSERT_PTR_EQ(a, b);
  /* Threads one after another: each exits before the next takes a slot,
   * so they all get the same one, never this thread's. */
  for (i = 0; i < 300; i++) {
    b = NULL;
    ASSERT_OK(uv_thread_create(&t, take_slot, &b));
    ASSERT_OK(uv_thread_join(&t));
    ASSERT_PTR_NE(b, NULL);
    ASSERT_PTR_NE(b, a);
    if (i == 0)
      seen_slot = b;
    ASSERT_PTR_EQ(b, seen_slot);
  }
  return 0;
}
