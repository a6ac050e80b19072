/* Declarations shared by uvsched's source files. Not installed. */

#ifndef UVSCHED_INTERNAL_H
#define UVSCHED_INTERNAL_H

#include "uvsched.h"

#include <stddef.h>
#include <stdint.h>

#define uvs__container_of(ptr, type, member) \
  ((type*) ((char*) (ptr) -offsetof(type, member)))

#include "atomic.h"

/* Thread-locals of the library, read once or more per task. The
 * initial-exec model makes each access one instruction instead of a call
 * into the dynamic linker; it takes a little of the static TLS space that
 * glibc reserves, so the library can still be loaded with dlopen(). */
#if defined(__GNUC__) && !defined(_WIN32)
#define UVS__TLS _Thread_local __attribute__((tls_model("initial-exec")))
#else
#define UVS__TLS _Thread_local
#endif

/* Is the calling thread `t`? On every hot path, so without libuv's two
 * out-of-line calls where uv_thread_t is a pthread_t. */
#ifndef _WIN32
#include <pthread.h>
static inline int uvs__is_thread(const uv_thread_t* t) {
  return pthread_equal(pthread_self(), *t);
}
#else
static inline int uvs__is_thread(const uv_thread_t* t) {
  uv_thread_t self;

  self = uv_thread_self();
  return uv_thread_equal(&self, t);
}
#endif

/* libuv's largest thread pool (UV_THREADPOOL_SIZE). */
#define UVS__POOL_MAX 1024u
/* The most groups a scheduler has (0.4). */
#define UVS__GROUPS_MAX 16u

/* Blocked producers are woken together once queued falls to this, rather
 * than one per started task (SPEC 0.4: a blocked call may go on waiting
 * while queued is above max - max(1, max / 8)); for a key, with
 * key_max_pending. */
static inline uint64_t uvs__refill_mark(uint64_t max) {
  return max - (max / 8 > 1 ? max / 8 : 1);
}

/* The largest delay, period or clock step, in ms. */
#define UVS__MAX_MS ((uint64_t) 1 << 40)

/* ---- alloc.c ----------------------------------------------------------- */
void* uvs__malloc(size_t size);
void* uvs__calloc(size_t count, size_t size);
void uvs__free(void* ptr);
/* Test hooks: make the n-th allocation from now fail (0 = the next one;
 * negative = never), make every one fail until turned off (memory that
 * stays short), and count allocations tried so far. */
void uvs__alloc_fail_after(long n);
void uvs__alloc_fail_all(int on);
unsigned long uvs__alloc_count(void);

#include "hook.h"
#include "slice.h"

/* ---- queue.h: intrusive circular list ---------------------------------- */
#include "queue.h"

/* ---- worker.c: groups (0.4) -------------------------------------------- */
typedef struct uvs__group_s uvs__group_t;
/* 0.4: a group of the scheduler's pool workers. Its lists, drains and
 * vtime are under the lock; the stats are atomics that anyone may read. */
struct uvs__group_s {
  uvs__queue_t ready;      /* serial pool workers waiting for a drain */
  uvs__queue_t wide_ready; /* wide workers wanting a lane */
  unsigned shares;
  unsigned cap;    /* max_concurrency, or the scheduler's cap */
  unsigned drains; /* runners and lanes serving its workers, posted or not */
  /* run_cb time per share so far: the group with the least is served
   * first when groups wait for drains (uvs__ready_take). */
  uint64_t vtime;
  uint64_t nready;  /* atomic: workers on ready, and wide on wide_ready */
  uint64_t running; /* atomic: drains of its workers running a batch */
  uint64_t ran;     /* atomic */
  uint64_t run_ns;  /* atomic */
};
static inline uvs__group_t* uvs__group_of(const uvs_worker_t* w) {
  return &w->sched->groups[w->group];
}

#include "timer.h"

/* ---- worker.c: the queue ---------------------------------------------- */
/* A worker's queued tasks live in three places, oldest first: a drain's
 * batch of slots, the FIFO, and the inbox. Producers push onto the inbox
 * without a lock; everything else needs the scheduler's lock. */
void uvs__inbox_init(uvs_worker_t* worker);
/* Any thread, no lock. The caller has marked the task unlinked
 * (uvs__task_set_unlinked) before its state said QUEUED: that says "in
 * the inbox, or on its way there" to a cancel. */
void uvs__inbox_push(uvs_worker_t* worker, uvs_task_t* task);
/* Lock held: is anything queued (inbox or FIFO)? Orders like a seq_cst load
 * of the inbox's tail. */
int uvs__inbox_nonempty(uvs_worker_t* worker);
/* Polls w's inbox for up to us microseconds for a push past tail (no lock
 * held): 1 if one came, 0 if the time ran out or w or its scheduler began
 * closing. */
int uvs__inbox_await(uvs_worker_t* w, uvs__queue_t* tail, unsigned us);
/* Lock held: moves what producers have linked to the FIFO's tail, without
 * waiting: it stops at a producer that has swapped itself in as the tail
 * but not linked yet (it and those behind it stay in the inbox). */
void uvs__inbox_flush(uvs_worker_t* worker);
/* Lock held: the oldest queued task, or NULL. With last = 0 it leaves the
 * inbox's newest task where it is: taking it means swapping the tail that
 * producers are swapping too, which a drain that has other tasks to run can
 * leave for later. */
uvs_task_t* uvs__inbox_take(uvs_worker_t* worker, int last);
/* Lock held: the FIFO's oldest task, left where it is, or NULL; after a
 * flush, the oldest in the FIFO and the inbox. */
uvs_task_t* uvs__inbox_oldest(uvs_worker_t* worker);
/* Lock held: tasks in the inbox (O(n); for stats). Tasks leaving the inbox
 * are counted in worker->nsched, so producers pay no counter. */
uint64_t uvs__inbox_count(uvs_worker_t* worker);

/* A batch slot holds a task until the drain takes it (TAKEN) or a cancel
 * swaps it for a tombstone (TOMB), each with one atomic operation. */
#define UVS__SLOT_TAKEN ((uvs_task_t*) (uintptr_t) 1)
#define UVS__SLOT_TOMB ((uvs_task_t*) (uintptr_t) 2)
#define UVS__BATCH 64

/* The task in a batch slot that its drain has not taken yet, or NULL. A
 * drain may take it at any moment: uvs__take_out() settles who has it. */
static inline uvs_task_t* uvs__slot_task(uvs_task_t** slot) {
  uvs_task_t* t;

  t = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (t == UVS__SLOT_TAKEN || t == UVS__SLOT_TOMB)
    return NULL;
  return t;
}

/* ---- task states ------------------------------------------------------- */
/* task->state: written with CAS or release stores; read without the lock by
 * the schedule calls and uvs_task_cancel. */
enum {
  UVS__T_IDLE = 0,     /* initialised, never scheduled */
  UVS__T_QUEUED = 1,   /* in its worker's inbox, FIFO or a batch, or running */
  UVS__T_DELAYED = 2,  /* in the timer wheel and its worker's delayed list */
  UVS__T_CLAIMED = 3,  /* a schedule call is filling it in */
  UVS__T_HANDBACK = 4, /* on the hand-back stack, done_cb not yet called */
  UVS__T_FINISHED = 5, /* handed back; the user's again */
  UVS__T_MASK = 0xf,
  UVS__T_PERIODIC = 0x10,  /* scheduled with uvs_schedule_every */
  UVS__T_CANCELLED = 0x20, /* a periodic task was cancelled while running */
  UVS__T_POST = 0x40,      /* library-owned node of uvs_post */
  UVS__T_DEFERRED = 0x80,  /* handed back while a run_cb of it executes */
  UVS__T_BARRIER = 0x100,  /* a barrier on a wide worker (keys.c) */
  UVS__T_UNCOUNTED = 0x200 /* queued past its key's count (uvs__due) */
};
/* The high half counts run_cbs of the task still executing after the task
 * was scheduled again from inside one of them (a one-shot may do that, and
 * its next run can start elsewhere at once). A hand-back waits for zero;
 * sharing the word makes "defer" and "last run ended" one atomic decision. */
#define UVS__T_RUN_ONE 0x10000u
#define UVS__T_RUNS 0xffff0000u

/* Sets the low state and flag bits of a task, keeping its run count, which
 * a thread outside the scheduler's lock may change at the same time. */
static inline unsigned uvs__task_update(uvs_task_t* t,
                                        unsigned clear,
                                        unsigned set) {
  unsigned o;
  unsigned n;

  o = __atomic_load_n(&t->state, __ATOMIC_RELAXED);
  do n = (o & ~clear) | set;
  while (!__atomic_compare_exchange_n(&t->state, &o, n, 1, __ATOMIC_ACQ_REL,
                                      __ATOMIC_RELAXED));
  return n;
}

/* worker->state (atomic): only the producer that moves it from IDLE to
 * SCHEDULED makes the worker ready; only the loop moves it back. */
enum { UVS__WS_IDLE = 0, UVS__WS_SCHEDULED = 1 };

/* worker->phase (under the lock) */
enum {
  UVS__P_IDLE = 0,   /* not on a ready list, no drain */
  UVS__P_READY = 1,  /* on sched->ready or sched->loop_ready */
  UVS__P_POSTED = 2, /* a pool drain is posted or running, or a loop turn */
  UVS__P_PARKED = 3  /* suspended with work: listed when resumed */
};

/* worker->flags (stores under the lock, loads anywhere) */
enum {
  UVS__WF_CLOSING = 1,
  UVS__WF_DRAIN = 2,     /* closing with UVS_DRAIN */
  UVS__WF_BY_SCHED = 4,  /* only its scheduler's close is closing it */
  UVS__WF_CB_OWED = 8,   /* asked for after it closed: call close_cb */
  UVS__WF_SUSPENDED = 16 /* its suspend count is above 0 (close.c) */
};

/* worker->closed (atomic): schedules answer UV_ESHUTDOWN from OPEN on. */
enum {
  UVS__C_OPEN = 0,
  UVS__C_CLOSED = 1, /* its close completed */
  UVS__C_FINAL = 2   /* and its scheduler's close completed too */
};

/* sched->flags (loop thread only) */
enum {
  UVS__SF_SETTLING = 1,        /* settle() runs (loop.c) */
  UVS__SF_HANDLES_CLOSING = 2, /* uv_close() called on our handles */
  UVS__SF_TURNED = 4, /* a loop turn ran in this loop iteration (check_cb) */
  UVS__SF_CLOSES = 8  /* closes are under way: every settle looks at them */
};

/* sched->state (atomic) */
enum { UVS__SS_OPEN = 0, UVS__SS_CLOSING = 1, UVS__SS_CLOSED = 2 };

/* The latest point of a periodic task's grid at or before now, or its due
 * time if now is before it. */
static inline uint64_t uvs__grid_latest(const uvs_task_t* t, uint64_t now) {
  if (now <= t->due)
    return t->due;
  return t->due + (now - t->due) / t->period * t->period;
}

/* Schedules and posts onto w answer UV_ESHUTDOWN: it or its scheduler is
 * closing. Any thread, no lock needed. */
static inline int uvs__shut(uvs_sched_t* s, uvs_worker_t* w) {
  return (uvs__load_acq(&w->flags) & UVS__WF_CLOSING) ||
         uvs__load_acq(&s->state) != UVS__SS_OPEN;
}

#include "keys.h"

#include "hazard.h"

/* ---- the task's overlaid fields ---------------------------------------- */
/* The only readers and writers of node.prev, tnode (while queued) and
 * status: the table beside their definition (include/uvsched/private.h)
 * says what each holds in which state. */
static inline void uvs__task_set_unlinked(uvs_task_t* t) {
  t->node.prev = NULL;
}
static inline int uvs__task_unlinked(const uvs_task_t* t) {
  return t->node.prev == NULL;
}
static inline void uvs__task_set_slot(uvs_task_t* t, uvs_task_t** slot) {
  t->node.prev = (uvs__queue_t*) ((uintptr_t) slot | 1);
}
/* Its slot in a drain's batch, or NULL if it is not in one. */
static inline uvs_task_t** uvs__task_slot(const uvs_task_t* t) {
  uintptr_t p;

  p = (uintptr_t) t->node.prev;
  return (p & 1) ? (uvs_task_t**) (p & ~(uintptr_t) 1) : NULL;
}
static inline void uvs__task_set_kready(uvs_task_t* t, uvs__queue_t* kready) {
  t->tnode.prev = kready; /* NULL: out of it */
}
static inline int uvs__task_in_kready(const uvs_task_t* t,
                                      const uvs__queue_t* kready) {
  return t->tnode.prev == kready;
}
static inline void uvs__task_set_kent(uvs_task_t* t, void* entry) {
  t->tnode.next = (uvs__queue_t*) entry;
}
static inline void* uvs__task_kent(const uvs_task_t* t) {
  return t->tnode.next;
}
static inline void uvs__task_set_due_frac(uvs_task_t* t, uint32_t us) {
  t->status = (int) us;
}
static inline uint32_t uvs__task_due_frac(const uvs_task_t* t) {
  return (uint32_t) t->status;
}
static inline void uvs__task_set_ready_us(uvs_task_t* t, uint32_t us) {
  t->status = (int) us;
}
static inline uint32_t uvs__task_ready_us(const uvs_task_t* t) {
  return (uint32_t) t->status;
}
static inline void uvs__task_set_result(uvs_task_t* t, int status) {
  t->status = status;
}
static inline int uvs__task_result(const uvs_task_t* t) {
  return t->status;
}

/* ---- postpool.c: uvs_post's nodes -------------------------------------- */
/* A node that runs fn(arg) with no done_cb, or NULL (out of memory). The
 * caller pinned a worker of sched as `pinned` says (uvs__worker_pin): on
 * the loop thread (UVS__PIN_NONE) the node comes from the loop's own list,
 * on another thread whose hazard slot is among the first UVS__POST_CACHES
 * from that slot's list, each without the lock but once per
 * UVS__POST_CHUNK nodes; otherwise from the shared list under the lock. */
uvs_task_t* uvs__post_node(uvs_sched_t* sched,
                           int pinned,
                           void (*fn)(void* arg),
                           void* arg);
/* Lock held: one node back, or all of a queue of them (a drain's batch). */
void uvs__post_release(uvs_sched_t* sched, uvs_task_t* task);
void uvs__post_release_all(uvs_sched_t* sched, uvs__queue_t* posts);
void uvs__post_free_all(uvs_sched_t* sched);
/* Allocates the per-thread caches of free post nodes (UV_ENOMEM). */
int uvs__post_init(uvs_sched_t* sched);

/* The files are layered: each calls only files on lines below its own,
 * with no exception: a file that needs the loop rings its doorbell
 * (uvs__ring(), inline above), which calls only libuv.
 * scripts/check-layers.py checks that no call goes round in a circle.
 *   sched.c              uvs_sched_init, uvs_worker_init, uvs_now,
 *                        uvs_clock_advance, stats
 *   loop.c               the loop thread's side: handles, settle() (what
 *                        is owed), dispatch of runners and lanes
 *                        (guarantee 12: which ready worker goes next)
 *   post.c               uvs_post
 *   task.c cancel.c      the schedule calls; cancel and re-arm
 *   close.c drain.c      closes and the one sweep; running turns
 *   metrics.c            histograms, metrics, a worker's counts, shedding
 *   bound.c              admission at every entrance (schedule, post,
 *                        falling due, wait): bounds and policies, the
 *                        worker's and the key's; space callbacks; blocked
 *                        producers; the queued count; uvs__take_out
 *   timer.c              all of time: the wheel, delayed lists, due times,
 *                        the uv_timer, periodic tasks, manual clock steps
 *   keys.c               a wide worker's keyed queue, key table and lanes
 *   worker.c             the pin; the queue (inbox and FIFO); the
 *                        idle/busy hand-off; the hand-back
 *   postpool.c           uvs_post's nodes
 *   hazard.c alloc.c version.c    leaves
 */

/* The scheduler's clock in ms: uv_hrtime(), or the manual clock. */
static inline uint64_t uvs__clock_ms(const uvs_sched_t* s) {
  if (s->manual_clock)
    return __atomic_load_n(&s->manual_now, __ATOMIC_ACQUIRE);
  return uv_hrtime() / 1000000;
}

/* The same in us. */
static inline uint64_t uvs__clock_us(const uvs_sched_t* s) {
  if (s->manual_clock)
    return __atomic_load_n(&s->manual_now, __ATOMIC_ACQUIRE) * 1000;
  return uv_hrtime() / 1000;
}

/* A delayed task's due time in us. The wheel files it by the ms (due);
 * while it is delayed its status holds the us past that ms of a one-shot
 * task's exact due time, t_call + delay rounded up to the us, so that it
 * fires at the first timer phase at or after that time rather than after
 * the next whole ms (guarantee 6 allows rounding up; the lateness halves
 * without it). A periodic task's grid stays on whole ms (0 here). */
static inline uint64_t uvs__due_us(const uvs_task_t* t) {
  return t->due * 1000 + uvs__task_due_frac(t);
}


static inline int uvs__on_loop_thread(const uvs_sched_t* s) {
  return uvs__is_thread(&s->thread);
}

/* ---- the doorbell: what the loop owes, and the one way to wake it ------ */
/* Whoever needs the loop thread sets why in sched->owed and rings; the
 * loop's callbacks (loop.c, settle()) take the bits and do what they say,
 * and nothing else: as libuv's threadpool.c puts a finished request on a
 * list and calls uv_async_send(), and uv__work_done drains that list. */
enum {
  UVS__BELL_DISPATCH = 1, /* a pool or wide worker is ready: drains, lanes */
  UVS__BELL_TURN = 2,     /* a loop worker is ready: a loop turn */
  UVS__BELL_DELIVER = 4,  /* hand-backs wait on done_top */
  UVS__BELL_TIMER = 8,    /* the wheel changed: arm the uv_timer anew */
  UVS__BELL_SPACE = 16,   /* space callbacks are owed, on sched->space */
  UVS__BELL_CLOSE = 32,   /* a close may move on */
  UVS__BELL_PARKED = 64,  /* sched->parked changed: hold the loop or not */
  /* Not a reason: the loop is settling and will look at owed again before
   * it stops, so a ring from another thread need not wake it. */
  UVS__BELL_SETTLING = 1 << 30
};

/* Any thread, any lock. From another thread the first bit rung since the
 * loop last took them sends the async; on the loop thread, outside its own
 * callbacks (a user's callback, or before uv_run), the idle handle makes
 * the loop look before it next polls. Nothing is done here but that. */
static inline void uvs__ring(uvs_sched_t* s, unsigned why) {
  unsigned prev;

  prev = __atomic_fetch_or(&s->owed, why, __ATOMIC_ACQ_REL);
  if (uvs__on_loop_thread(s)) {
    if (!(s->flags & UVS__SF_SETTLING))
      uv_idle_start(&s->idle, s->on_idle);
    return;
  }
  /* Whoever rings holds something that keeps the async handle open: a pin
   * on a worker that can't finish closing, or a drain in flight. */
  if (prev == 0)
    uv_async_send(&s->async);
}

/* ---- loop.c ------------------------------------------------------------ */
typedef struct uvs__runner_s uvs__runner_t;
/* uvs_sched_init's handles: init, and the first loop iteration owed. */
int uvs__loop_init(uv_loop_t* loop, uvs_sched_t* sched);
void uvs__loop_start(uvs_sched_t* sched);

/* ---- loop.c: dispatch --------------------------------------------------- */
/* Can the scheduler run one more drain (its cap, guarantee 12)? */
static inline int uvs__room(const uvs_sched_t* s) {
  return s->drains < s->cap;
}
/* Does a serial pool worker of any group wait for a drain? Lock held. */
static inline int uvs__pool_waiting(const uvs_sched_t* s) {
  unsigned i;

  for (i = 0; i < s->ngroups; i++)
    if (!uvs__queue_empty(&s->groups[i].ready))
      return 1;
  return 0;
}
/* Can it run one more for a worker of g: its cap, and g's? */
static inline int uvs__group_room(const uvs_sched_t* s, const uvs__group_t* g) {
  return s->drains < s->cap && g->drains < g->cap;
}
/* ---- close.c ----------------------------------------------------------- */
/* Completes the closes that can complete (loop thread, no lock held).
 * Returns UVS__CLOSES_DONE once the scheduler has begun closing its
 * handles (then the caller must not touch them), UVS__CLOSES_PENDING while
 * a close waits for something (a drain, a hand-back), else 0. */
enum { UVS__CLOSES_PENDING = 1, UVS__CLOSES_DONE = 2 };
int uvs__finish_closes(uvs_sched_t* sched);

/* ---- drain.c ----------------------------------------------------------- */
/* A turn of one lane of a wide worker, with a slice of its own. Pool
 * thread, no lock held. */
void uvs__lane_turn(uvs__lane_t* lane);
/* A runner (one uv_queue_work item): runs a turn of first, then of each
 * pool worker that is ready, as uvs__ready_take() orders them, until none
 * is or its time slice has passed; *group is the group whose count it is
 * in, which moves with it. Pool thread, no lock held. */
void uvs__run_ready(uvs_sched_t* sched, uvs_worker_t* first, unsigned* group);
/* A loop turn: one turn of each loop worker ready now, within one time
 * slice for all (default budget) or budget tasks each; those the slice
 * leaves out owe the next turn. Returns 0 if none was ready. Loop
 * thread. */
int uvs__loop_turn(uvs_sched_t* sched);

/* Is w closing with UVS_CANCEL? A drain asks after it took a task from its
 * slot and before it runs it. The close stores the flag before it sweeps
 * the slots, and a drain that found a tombstone the sweep left has seen
 * that store, so the tasks that run are a prefix of the batch: a close
 * never leaves a hole that a later task runs behind. */
static inline int uvs__cancelling(uvs_worker_t* w) {
  return (uvs__load_acq(&w->flags) & (UVS__WF_CLOSING | UVS__WF_DRAIN)) ==
         UVS__WF_CLOSING;
}

/* Does a suspension keep w's tasks from starting? Not once it closes. */
static inline int uvs__suspended(uvs_worker_t* w) {
  return __builtin_expect(
      (uvs__load_acq(&w->flags) & (UVS__WF_SUSPENDED | UVS__WF_CLOSING)) ==
          UVS__WF_SUSPENDED,
      0);
}

/* ---- worker.c ---------------------------------------------------------- */
/* A batch of n run_cbs of a pool worker took ns (lock held): the group's
 * stats, and its share of the time when groups compete. */
void uvs__group_ran(uvs_worker_t* worker, unsigned n, uint64_t ns);
/* Init with options (NULL = defaults), after the caller checked them
 * (sched.c). */
int uvs__worker_init(uvs_sched_t* sched,
                     uvs_worker_t* worker,
                     uvs_where_t where,
                     const uvs_worker_options_t* options);
/* The ready order: which ready serial pool worker a free drain serves
 * next (lock held), taken off its group's ready list and marked posted, or
 * NULL. Groups with a worker waiting and room compete by the least run_cb
 * time per share; within one, workers take turns in FIFO order. A new
 * drain (epoch 0) takes a place in the chosen group's count, returned in
 * *group; a runner going on (its epoch, its group in *group) stays in its
 * group or moves its place to one with room, and gets NULL when the next
 * worker is one it served already. dispatch() (loop.c) and a runner
 * (drain.c) both ask here. */
/* The groups with wide workers wanting lanes, least run_cb time per share
 * first, into order (UVS__GROUPS_MAX entries); returns how many. */
unsigned uvs__wide_order(uvs_sched_t* sched, unsigned* order);
uvs_worker_t* uvs__ready_take(uvs_sched_t* sched,
                              uint64_t epoch,
                              unsigned* group);
/* A producer moved the worker from idle to scheduled: list it as ready.
 * Lock held. */
void uvs__worker_make_ready(uvs_worker_t* worker);
/* Pushes a task onto a worker's inbox and makes the worker ready if it was
 * idle. A new schedule passes requeue = 0 and holds no lock; a delayed task
 * that fell due passes 1, and the caller holds the lock. */
void uvs__worker_push(uvs_worker_t* worker, uvs_task_t* task, int requeue);
/* A task counted in under its key (per-key bounds) joins kready or the
 * queue behind its key, and the worker wants a lane if one is free. Lock
 * held (bound.c). */
void uvs__worker_file(uvs_worker_t* worker, uvs_task_t* task);
/* A turn of the worker ended (lock held, any thread): idle, or ready
 * again at the tail of its list. */
void uvs__turn_ended(uvs_worker_t* worker);
/* Its suspension began (lock held): a worker listed ready leaves its list
 * and parks, so that its group no longer counts it ready. */
void uvs__park(uvs_worker_t* worker);
/* Its suspension ended (lock held): a parked worker is listed again. */
void uvs__unpark(uvs_worker_t* worker);
/* The sum of a counter of a wide worker's lanes, at offset off in each
 * (metrics.c, as are the next two). */
uint64_t uvs__lanes_sum(uvs_worker_t* worker, size_t off);
/* Tasks accepted and not yet handed back (lock held). A task is counted in
 * nsched before a drain can take it, so this never undercounts. Tasks
 * still in the inbox are not included. */
static inline uint64_t uvs__worker_pending(uvs_worker_t* w) {
  uint64_t n;

  n = w->nsched - uvs__load_acq(&w->nended_run) - w->nended;
  if (w->keys != NULL)
    n -= uvs__lanes_sum(w, offsetof(uvs__lane_t, nended_run));
  return n;
}
/* run_cb calls so far, its lanes' included. Lock held, or the worker
 * pinned; once its close completed, the worker's own field has them all. */
uint64_t uvs__worker_ran(uvs_worker_t* worker);
/* A closing worker's lanes are done: their counts move to the worker's
 * fields before the lanes are freed (lock held). */
void uvs__worker_fold_counts(uvs_worker_t* worker);
/* Lock held: is anything queued, in the inbox, the FIFO or kready? */
static inline int uvs__worker_nonempty(uvs_worker_t* w) {
  return uvs__inbox_nonempty(w) ||
         (w->keys != NULL && !uvs__queue_empty(&w->kready));
}

/* ---- task.c ------------------------------------------------------------ */
/* For uvs_post: schedules a library-owned node onto an open worker. */
int uvs__schedule_node(uvs_worker_t* worker, uvs_task_t* task);
/* The task now running on this thread, and whether its run_cb scheduled it
 * again (then the run hands nothing back). */
struct uvs__tls_s {
  uvs_task_t* current;
  int rescheduled;
  int draining; /* this thread runs a drain or a loop turn */
  int pool;     /* this thread ran a runner or lane: a libuv pool thread */
  /* The worker whose close callback runs on this thread, and the
   * histograms its close took out of it, freed when the callback returns
   * (close.c, metrics.c). */
  const uvs_worker_t* closed;
  struct uvs__hists_s* closed_hists;
};
extern UVS__TLS struct uvs__tls_s uvs__tls;

#include "bound.h"

/* ---- worker.c: the hand-back ------------------------------------------ */
/* Ends the library's custody of a task that is linked nowhere: the
 * hand-back stack for a task with done_cb, released otherwise. Lock held. */
void uvs__drop(uvs_sched_t* sched, uvs_task_t* task, int status);
/* uvs__drop(), but a hand-back joins chain (pushed later, in order with
 * the runs of a drain's batch) instead of the stack at once. */
typedef struct uvs__chain_s uvs__chain_t;
void uvs__drop_to(uvs_sched_t* sched,
                  uvs_task_t* task,
                  int status,
                  uvs__chain_t* chain);
/* Moves a task with done_cb to HANDBACK; returns 0 if a run_cb of it still
 * executes, and then the last run to end makes the hand-back. */
int uvs__to_handback(uvs_task_t* task, int status);
/* A run_cb that scheduled its own task again has returned (no lock held). */
void uvs__end_run(uvs_task_t* task);
/* Hand-backs on their way to the stack, newest first: a drain gathers
 * those of a batch and pushes them with one CAS, in run order. */
struct uvs__chain_s {
  uvs__queue_t* newest;
  uvs__queue_t* oldest;
};
void uvs__chain_add(uvs__chain_t* chain, uvs_task_t* task);
void uvs__chain_push(uvs_sched_t* sched, uvs__chain_t* chain);
/* Calls done_cb for everything handed back so far, oldest first. Loop
 * thread. */
void uvs__deliver(uvs_sched_t* sched);

#endif /* UVSCHED_INTERNAL_H */
