/* Hazard slots (src/hazard.c): a worker's close waits for a cancel that
 * may be using that worker, and for a caller on another thread that pinned
 * it, and for no other. A cancel or a schedule holds its slot for a few
 * instructions only, so these tests hold one open through the internal
 * calls that uvs_task_cancel() and uvs_schedule() make. */

#include "task.h"

#include <stdatomic.h>

typedef struct uvs__hazard_s uvs__hazard_t;
uvs__hazard_t* uvs__hazard_enter(void);
void uvs__hazard_protect(uvs__hazard_t* hazard, uvs_worker_t* w);
void uvs__hazard_leave(uvs__hazard_t* hazard);
int uvs__hazard_pin(uvs_worker_t* w);
void uvs__hazard_unpin(void);
int uvs__hazard_index(void);

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t worker;
static uvs_worker_t other; /* stands for a worker of another scheduler */
static uv_sem_t held;      /* the helper's slot names worker */
static int hold_pin;       /* the helper pins instead of cancelling */
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
  if (hold_pin) {
    ASSERT_OK(uvs__hazard_pin(&worker));
    uv_sem_post(&held);
    uv_sleep(100);
    atomic_store(&released, 1);
    uvs__hazard_unpin();
    return;
  }
  h = uvs__hazard_enter();
  ASSERT_PTR_NE(h, NULL);
  uvs__hazard_protect(h, &worker);
  uv_sem_post(&held);
  uv_sleep(100);
  atomic_store(&released, 1);
  uvs__hazard_leave(h);
}


static void close_waits_for_holder(void) {
  uv_thread_t t;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uv_sem_init(&held, 0));
  ASSERT_OK(uv_thread_create(&t, holder, NULL));
  uv_sem_wait(&held);
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, close_cb));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  /* The close called back only once the slot no longer named worker. */
  ASSERT_EQ(close_calls, 1);
  ASSERT_EQ(released_at_close, 1);
  ASSERT_OK(uv_thread_join(&t));
  uv_sem_destroy(&held);
  ASSERT_OK(uv_loop_close(&loop));
}


TEST_IMPL(hazard_close_waits_for_its_cancel) {
  close_waits_for_holder();
  return 0;
}


TEST_IMPL(hazard_close_waits_for_its_pin) {
  hold_pin = 1;
  close_waits_for_holder();
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


/* With 128 live threads holding slots, two chunks' worth, the next
 * thread still gets a slot of its own (a third chunk), and the contract
 * holds as before: races with a close included. */
#define NHOLDERS 128
#define NTASKS 2000

static uv_sem_t taken;
static uv_sem_t finish;
static uvs_task_t fb_tasks[NTASKS];
static atomic_int fb_runs;
static int fb_done;
static int fb_cancelled;
static atomic_int fb_accepted;
static int fb_slot = -1;

static void slot_holder(void* arg) {
  (void) arg;
  uvs__hazard_leave(uvs__hazard_enter());
  uv_sem_post(&taken);
  uv_sem_wait(&finish);
}


/* Takes every slot with a thread of its own, and gives them back. */
static void hold_all_slots(uv_thread_t* holders) {
  int i;

  ASSERT_OK(uv_sem_init(&taken, 0));
  ASSERT_OK(uv_sem_init(&finish, 0));
  for (i = 0; i < NHOLDERS; i++)
    ASSERT_OK(uv_thread_create(&holders[i], slot_holder, NULL));
  for (i = 0; i < NHOLDERS; i++) uv_sem_wait(&taken);
}


static void release_all_slots(uv_thread_t* holders) {
  int i;

  for (i = 0; i < NHOLDERS; i++) uv_sem_post(&finish);
  for (i = 0; i < NHOLDERS; i++) ASSERT_OK(uv_thread_join(&holders[i]));
  uv_sem_destroy(&taken);
  uv_sem_destroy(&finish);
}


/* Notes the index of the calling thread's slot, which the holders leave
 * past the first NHOLDERS. */
static void note_slot(void) {
  uvs__hazard_t* h;

  h = uvs__hazard_enter();
  ASSERT_PTR_NE(h, NULL);
  uvs__hazard_leave(h);
  fb_slot = uvs__hazard_index();
}


static void fb_run(uvs_task_t* t) {
  (void) t;
  atomic_fetch_add(&fb_runs, 1);
}


static void fb_done_cb(uvs_task_t* t, int status) {
  (void) t;
  fb_done++;
  fb_cancelled += status == UV_ECANCELED;
}


static void fb_producer(void* arg) {
  int i;
  int err;

  (void) arg;
  note_slot();
  for (i = 0; i < NTASKS; i++) {
    err = uvs_schedule(&worker, &fb_tasks[i]);
    if (err == UV_ESHUTDOWN)
      break;
    ASSERT_OK(err);
    atomic_fetch_add(&fb_accepted, 1);
    if (i % 3 == 0) {
      err = uvs_task_cancel(&fb_tasks[i]);
      ASSERT(err == 0 || err == UV_EBUSY);
    }
  }
}


static void fb_close_cb(uvs_worker_t* w) {
  (void) w;
  close_calls++;
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void fb_timer_cb(uv_timer_t* timer) {
  uv_close((uv_handle_t*) timer, NULL);
  ASSERT_OK(uvs_worker_close(&worker, UVS_CANCEL, fb_close_cb));
}


TEST_IMPL(hazard_slots_grow_with_threads) {
  uv_thread_t holders[NHOLDERS];
  uv_thread_t producer;
  uv_timer_t timer;
  int i;

  hold_all_slots(holders);
  for (i = 0; i < NTASKS; i++)
    ASSERT_OK(uvs_task_init(&fb_tasks[i], fb_run, fb_done_cb));
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  /* The close races the producer: it starts after a moment's work. */
  ASSERT_OK(uv_timer_init(&loop, &timer));
  ASSERT_OK(uv_timer_start(&timer, fb_timer_cb, 2, 0));
  ASSERT_OK(uv_thread_create(&producer, fb_producer, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&producer));
  ASSERT_GE(fb_slot, NHOLDERS);
  ASSERT_EQ(close_calls, 1);
  /* Exactly once: every accepted task handed back, run or cancelled. */
  ASSERT_EQ(fb_done, atomic_load(&fb_accepted));
  ASSERT_EQ(fb_done - fb_cancelled, atomic_load(&fb_runs));
  ASSERT_OK(uv_loop_close(&loop));
  release_all_slots(holders);
  return 0;
}


/* uvs_post from a thread whose slot is past the first 128 (the threads
 * with a node list of their own) takes the lock for each node, from
 * the shared free list, splitting chains as it goes. Its nodes must come
 * back there and be reused: a second round of as many posts allocates
 * nothing, and every post runs once, in order. A task the producer holds
 * the worker with keeps the round's posts queued, so the first round needs
 * a node for each; one scheduled after a round runs once the drain has
 * given the round's nodes back. */
#define NPOSTS 1000

static uv_sem_t round_done;
static uv_sem_t unblock;
static uv_sem_t settled;
static uv_async_t posts_over;
static uvs_task_t fbp_blocker;
static uvs_task_t fbp_sentinel;
static atomic_int fbp_next; /* the seq the next run must carry */
static atomic_int fbp_bad;
static unsigned long fbp_allocs[2];

static void fbp_fn(void* arg) {
  int seq;

  seq = (int) (intptr_t) arg;
  if (atomic_load(&fbp_next) != seq)
    atomic_fetch_add(&fbp_bad, 1);
  atomic_store(&fbp_next, seq + 1);
  if ((seq + 1) % NPOSTS == 0)
    uv_sem_post(&round_done);
}


static void fbp_block_run(uvs_task_t* t) {
  (void) t;
  uv_sem_wait(&unblock);
}


static void fbp_sentinel_run(uvs_task_t* t) {
  (void) t;
  uv_sem_post(&settled);
}


static void fbp_producer(void* arg) {
  unsigned long a0;
  int round;
  int i;

  (void) arg;
  note_slot();
  for (round = 0; round < 2; round++) {
    ASSERT_OK(uvs_schedule(&worker, &fbp_blocker));
    a0 = uvs__alloc_count();
    for (i = 0; i < NPOSTS; i++)
      ASSERT_OK(
          uvs_post(&worker, fbp_fn, (void*) (intptr_t) (round * NPOSTS + i)));
    fbp_allocs[round] = uvs__alloc_count() - a0;
    uv_sem_post(&unblock);
    uv_sem_wait(&round_done);
    ASSERT_OK(uvs_schedule(&worker, &fbp_sentinel));
    uv_sem_wait(&settled);
  }
  ASSERT_OK(uv_async_send(&posts_over));
}


static void fbp_over_cb(uv_async_t* handle) {
  uv_close((uv_handle_t*) handle, NULL);
  ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


TEST_IMPL(hazard_uncached_posts_recycle) {
  uv_thread_t holders[NHOLDERS];
  uv_thread_t producer;

  ASSERT_OK(uv_sem_init(&round_done, 0));
  ASSERT_OK(uv_sem_init(&unblock, 0));
  ASSERT_OK(uv_sem_init(&settled, 0));
  hold_all_slots(holders);
  ASSERT_OK(uvs_task_init(&fbp_blocker, fbp_block_run, NULL));
  ASSERT_OK(uvs_task_init(&fbp_sentinel, fbp_sentinel_run, NULL));
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uv_async_init(&loop, &posts_over, fbp_over_cb));
  ASSERT_OK(uv_thread_create(&producer, fbp_producer, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_OK(uv_thread_join(&producer));
  ASSERT_GE(fb_slot, NHOLDERS);
  ASSERT_EQ(atomic_load(&fbp_next), 2 * NPOSTS);
  ASSERT_EQ(atomic_load(&fbp_bad), 0);
  /* 64 nodes a chunk: the first round grows the pool, the second reuses. */
  ASSERT_GE(fbp_allocs[0], (NPOSTS + 63) / 64);
  ASSERT_EQ(fbp_allocs[1], 0);
  ASSERT_OK(uv_loop_close(&loop));
  release_all_slots(holders);
  uv_sem_destroy(&settled);
  uv_sem_destroy(&unblock);
  uv_sem_destroy(&round_done);
  return 0;
}


/* A thread that needs a slot when every chunk is taken, and gets no
 * memory for another, is answered UV_ENOMEM by each call, which changes
 * nothing; with memory back, the same calls from the same thread work. */
static uvs_task_t nm_task;
static uvs_task_t nm_delayed;
static int nm_rc[6];
static int nm_done;
static int nm_status[2];

static void nm_done_cb(uvs_task_t* t, int status) {
  nm_status[t == &nm_delayed] = status;
  if (++nm_done == 2)
    ASSERT_OK(uvs_sched_close(&sched, UVS_CANCEL, NULL));
}


static void nm_caller(void* arg) {
  (void) arg;
  nm_rc[0] = uvs_schedule(&worker, &nm_task);
  nm_rc[1] = uvs_post(&worker, fbp_fn, NULL);
  nm_rc[2] = uvs_task_cancel(&nm_delayed);
  nm_rc[3] = uvs_task_reschedule(&nm_delayed, 1);
  uvs__alloc_fail_all(0);
  nm_rc[4] = uvs_schedule(&worker, &nm_task);
  nm_rc[5] = uvs_task_cancel(&nm_delayed);
}


TEST_IMPL(hazard_no_memory_for_a_slot) {
  uv_thread_t holders[NHOLDERS];
  uv_thread_t caller;
  int i;

  hold_all_slots(holders);
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &worker, UVS_POOL));
  ASSERT_OK(uvs_task_init(&nm_task, fb_run, nm_done_cb));
  ASSERT_OK(uvs_task_init(&nm_delayed, fb_run, nm_done_cb));
  ASSERT_OK(uvs_schedule_after(&worker, &nm_delayed, 60000));
  uvs__alloc_fail_all(1);
  ASSERT_OK(uv_thread_create(&caller, nm_caller, NULL));
  ASSERT_OK(uv_thread_join(&caller));
  uvs__alloc_fail_all(0);
  for (i = 0; i < 4; i++) ASSERT_ERR(nm_rc[i], UV_ENOMEM);
  ASSERT_OK(nm_rc[4]);
  ASSERT_OK(nm_rc[5]);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  /* Accepted once, by the call that had its slot; the delayed task was
   * still there for the cancel that could name its worker. */
  ASSERT_EQ(atomic_load(&fb_runs), 1);
  ASSERT_EQ(nm_done, 2);
  ASSERT_OK(nm_status[0]);
  ASSERT_ERR(nm_status[1], UV_ECANCELED);
  ASSERT_EQ(atomic_load(&fbp_next), 0); /* the refused post never ran */
  ASSERT_OK(uv_loop_close(&loop));
  release_all_slots(holders);
  return 0;
}
