/* Declarations shared by uvsched's source files. Not installed. */

#ifndef UVSCHED_INTERNAL_H
#define UVSCHED_INTERNAL_H

#include "uvsched.h"

#include <stddef.h>
#include <stdint.h>

#define uvs__container_of(ptr, type, member) \
  ((type*) ((char*) (ptr) - offsetof(type, member)))

/* Atomics: the fields they touch are plain in the public header, so use the
 * compiler builtins (GCC and Clang; TSan understands them). */
#define uvs__load(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define uvs__load_relaxed(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define uvs__store(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define uvs__store_relaxed(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define uvs__add(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
#define uvs__sub(p, v) __atomic_fetch_sub((p), (v), __ATOMIC_SEQ_CST)
/* A counter with one writer at a time: no read-modify-write needed. */
#define uvs__bump(p) uvs__store_relaxed((p), uvs__load_relaxed(p) + 1)

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

/* The largest delay, period or clock step, in ms. */
#define UVS__MAX_MS ((uint64_t) 1 << 40)

/* ---- alloc.c ----------------------------------------------------------- */
void* uvs__malloc(size_t size);
void* uvs__calloc(size_t count, size_t size);
void uvs__free(void* ptr);
/* Test hooks: make the n-th allocation from now fail (0 = the next one;
 * negative = never), and count allocations made so far. */
void uvs__alloc_fail_after(long n);
unsigned long uvs__alloc_count(void);

/* ---- queue.h: intrusive circular list ---------------------------------- */
#include "queue.h"

/* ---- wheel.c: the timer structure ------------------------------------- */
/* Delayed tasks by due time (ms on the uv_hrtime() clock); tasks due at the
 * same ms expire in insertion order. All calls need the scheduler's lock. */
typedef struct uvs__timers_s uvs__timers_t;
int uvs__timers_init(uvs__timers_t** out, uint64_t now);
void uvs__timers_free(uvs__timers_t* timers);
void uvs__timers_insert(uvs__timers_t* timers, uvs_task_t* task);
void uvs__timers_remove(uvs__timers_t* timers, uvs_task_t* task);
/* The earliest time the structure needs expire(); UINT64_MAX if empty. */
uint64_t uvs__timers_next(const uvs__timers_t* timers);
/* Calls fire, in due order, for every task due at or before now, taking
 * each out of the structure first. */
void uvs__timers_expire(uvs__timers_t* timers,
                        uint64_t now,
                        void (*fire)(void* ctx, uvs_task_t* task),
                        void* ctx);

/* ---- inbox.c: the per-worker queue ------------------------------------- */
/* A worker's queued tasks live in three places, oldest first: a drain's
 * batch of slots, the FIFO, and the inbox. Producers push onto the inbox
 * without a lock; everything else needs the scheduler's lock. */
void uvs__inbox_init(uvs_worker_t* worker);
/* Any thread, no lock. The caller has set task->node.prev to NULL before
 * the task's state said QUEUED: that marks "in the inbox, or on its way
 * there" for a cancel. */
void uvs__inbox_push(uvs_worker_t* worker, uvs_task_t* task);
/* Lock held: is anything queued (inbox or FIFO)? Orders like a seq_cst load
 * of the inbox's tail. */
int uvs__inbox_nonempty(uvs_worker_t* worker);
/* Lock held: moves everything pushed so far to the FIFO's tail. */
void uvs__inbox_flush(uvs_worker_t* worker);
/* Lock held: the oldest queued task, or NULL. With last = 0 it leaves the
 * inbox's newest task where it is: taking it means swapping the tail that
 * producers are swapping too, which a drain that has other tasks to run can
 * leave for later. */
uvs_task_t* uvs__inbox_take(uvs_worker_t* worker, int last);
/* Lock held: tasks in the inbox (O(n); for stats). Tasks leaving the inbox
 * are counted in worker->nsched, so producers pay no counter. */
uint64_t uvs__inbox_count(uvs_worker_t* worker);

/* A batch slot holds a task until the drain takes it (TAKEN) or a cancel
 * swaps it for a tombstone (TOMB), each with one atomic operation. */
#define UVS__SLOT_TAKEN ((uvs_task_t*) (uintptr_t) 1)
#define UVS__SLOT_TOMB ((uvs_task_t*) (uintptr_t) 2)
#define UVS__BATCH 64

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
  UVS__T_DEFERRED = 0x80   /* handed back while a run_cb of it executes */
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
  do
    n = (o & ~clear) | set;
  while (!__atomic_compare_exchange_n(
      &t->state, &o, n, 1, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
  return n;
}

/* worker->state (atomic): only the producer that moves it from IDLE to
 * SCHEDULED makes the worker ready; only the loop moves it back. */
enum { UVS__W_IDLE = 0, UVS__W_SCHEDULED = 1 };

/* worker->phase (under the lock) */
enum {
  UVS__P_IDLE = 0,  /* not on a ready list, no drain */
  UVS__P_READY = 1, /* on sched->ready or sched->loop_ready */
  UVS__P_POSTED = 2 /* a pool drain is posted or running, or a loop turn */
};

/* worker->flags (stores under the lock, loads anywhere) */
enum {
  UVS__W_CLOSING = 1,
  UVS__W_DRAIN = 2,    /* closing with UVS_DRAIN */
  UVS__W_BY_SCHED = 4, /* only its scheduler's close is closing it */
  UVS__W_CB_OWED = 8   /* asked for after it closed: call close_cb */
};

/* worker->closed (atomic): schedules answer UV_ESHUTDOWN from OPEN on. */
enum {
  UVS__C_OPEN = 0,
  UVS__C_CLOSED = 1, /* its close completed */
  UVS__C_FINAL = 2   /* and its scheduler's close completed too */
};

/* sched->state (atomic) */
enum { UVS__S_OPEN = 0, UVS__S_CLOSING = 1, UVS__S_CLOSED = 2 };

/* Schedules and posts onto w answer UV_ESHUTDOWN: it or its scheduler is
 * closing. Any thread, no lock needed. */
static inline int uvs__shut(uvs_sched_t* s, uvs_worker_t* w) {
  return (uvs__load(&w->flags) & UVS__W_CLOSING) ||
         uvs__load(&s->state) != UVS__S_OPEN;
}

/* ---- sched.c ----------------------------------------------------------- */
int uvs__on_loop_thread(const uvs_sched_t* sched);
/* Asks the loop thread to process the scheduler soon. Any thread, no lock
 * needed. */
void uvs__kick(uvs_sched_t* sched);
/* A producer moved the worker from idle to scheduled: list it as ready.
 * Lock held. */
void uvs__worker_make_ready(uvs_worker_t* worker);
/* Pushes a task onto a worker's inbox and makes the worker ready if it was
 * idle. A new schedule passes requeue = 0 and holds no lock; a delayed task
 * that fell due passes 1, and the caller holds the lock. */
void uvs__worker_push(uvs_worker_t* worker, uvs_task_t* task, int requeue);
/* Ends the library's custody of a task that is linked nowhere: the
 * hand-back stack for a task with done_cb, released otherwise. Lock held. */
void uvs__drop(uvs_sched_t* sched, uvs_task_t* task, int status);
/* Cancels a queued or delayed task of worker (lock held): 0, or UV_EBUSY if
 * a drain already took it. */
int uvs__cancel_locked(uvs_sched_t* sched, uvs_task_t* task);
/* A task due at `due` entered the wheel (lock held): asks the loop to re-arm
 * the timer if it would fire too late, once until it has. */
void uvs__timer_needed(uvs_sched_t* sched, uint64_t due);

/* ---- worker.c ---------------------------------------------------------- */
/* Pins a worker against its close completing while a caller on another
 * thread is inside the API; returns 0 or UV_ESHUTDOWN if it is closed. */
int uvs__worker_enter(uvs_worker_t* worker);
void uvs__worker_leave(uvs_worker_t* worker);
/* Pins the worker if the caller is not on its loop's thread (*pinned says
 * so; unpin with uvs__worker_leave). Returns UV_ESHUTDOWN if it is
 * closed. Never reads the scheduler. */
int uvs__worker_pin(uvs_worker_t* worker, int* pinned);
void uvs__worker_close_locked(uvs_worker_t* worker,
                              uvs_close_how_t how,
                              uvs_worker_close_cb cb);
/* Hands back what a closing worker must not run (lock held). */
void uvs__worker_close_sweep(uvs_worker_t* worker);
/* Tasks accepted and not yet handed back (lock held). */
uint64_t uvs__worker_pending(uvs_worker_t* worker);

/* ---- task.c ------------------------------------------------------------ */
int uvs__schedule(uvs_worker_t* worker,
                  uvs_task_t* task,
                  int delayed,
                  uint64_t delay_ms,
                  uint64_t period_ms,
                  unsigned flags);
/* For uvs_post: schedules a library-owned node onto an open worker. */
int uvs__schedule_node(uvs_worker_t* worker, uvs_task_t* task);
/* The task now running on this thread, and whether its run_cb scheduled it
 * again (then the run hands nothing back). */
struct uvs__tls_s {
  uvs_task_t* current;
  int rescheduled;
  int draining; /* this thread runs a drain or a loop turn */
};
extern UVS__TLS struct uvs__tls_s uvs__tls;
/* Cancels in progress, process-wide (see uvs_task_cancel). */
extern unsigned long uvs__cancels;

/* ---- bound.c: bounded workers and metrics ----------------------------- */
/* Does w count its queued tasks (a bound or metrics)? */
static inline int uvs__counting(const uvs_worker_t* w) {
  return w->max_pending != 0 || w->metrics;
}
/* A producer blocked in uvs_schedule_wait(), on w->waiters (lock). */
typedef struct uvs__waiter_s {
  uvs__queue_t node;
  uv_cond_t cond;
  int woken;
} uvs__waiter_t;
/* Counts a task into a counting worker: 0, or UV_EAGAIN if it is full and
 * rejects (DROP_OLDEST evicts instead, taking the lock unless `locked`). */
int uvs__admit(uvs_worker_t* worker, int locked);
/* A queued task was taken out other than by the drain (lock held). */
void uvs__unqueued(uvs_worker_t* worker);
/* Room was made in a bounded worker: owe space_cb at low_water, wake a
 * blocked producer. */
void uvs__space_check(uvs_worker_t* worker, int locked);
/* Wakes every blocked producer of a closing worker (lock held). */
void uvs__wake_all(uvs_worker_t* worker);
void uvs__hist_add(uvs_hist_t* h, uint64_t ns);
/* worker.c: init with options (NULL = defaults). */
int uvs__worker_init(uvs_sched_t* sched,
                     uvs_worker_t* worker,
                     uvs_where_t where,
                     const uvs_worker_options_t* options);

/* A task of w became ready (queued or due): with metrics, when, in us,
 * kept in its status until it starts. */
static inline void uvs__mark_ready(const uvs_worker_t* w, uvs_task_t* t) {
  if (w->metrics)
    t->status = (int) (uint32_t) (uv_hrtime() / 1000);
}

/* The scheduler's clock in ms: uv_hrtime(), or the manual clock. */
static inline uint64_t uvs__clock_ms(const uvs_sched_t* s) {
  if (s->manual_clock)
    return __atomic_load_n(&s->manual_now, __ATOMIC_ACQUIRE);
  return uv_hrtime() / 1000000;
}

/* ---- post.c ------------------------------------------------------------ */
/* Lock held. */
void uvs__post_release(uvs_sched_t* sched, uvs_task_t* task);
void uvs__post_free_all(uvs_sched_t* sched);

#endif /* UVSCHED_INTERNAL_H */
