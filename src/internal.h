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

/* ---- alloc.c ----------------------------------------------------------- */
void* uvs__malloc(size_t size);
void* uvs__calloc(size_t count, size_t size);
void uvs__free(void* ptr);
/* Test hooks: make the n-th allocation from now fail (0 = the next one;
 * negative = never), and count allocations made so far. */
void uvs__alloc_fail_after(long n);
unsigned long uvs__alloc_count(void);

/* ---- queue.h: intrusive circular list (see queue.h) ------------------- */
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

/* ---- task states ------------------------------------------------------- */
/* task->state: the low bits hold one of these, read without the lock by
 * uvs_task_cancel's first check and by schedule's EBUSY check; written with
 * the owning scheduler's lock held. */
enum {
  UVS__T_IDLE = 0,     /* initialised, never scheduled */
  UVS__T_QUEUED = 1,   /* in its worker's FIFO */
  UVS__T_DELAYED = 2,  /* in the timer wheel and its worker's delayed list */
  UVS__T_RUNNING = 3,  /* run_cb executing */
  UVS__T_HANDBACK = 4, /* in the scheduler's done list, done_cb not yet called */
  UVS__T_FINISHED = 5, /* handed back; the user's again */
  UVS__T_MASK = 0xf,
  UVS__T_PERIODIC = 0x10,  /* scheduled with uvs_schedule_every */
  UVS__T_CANCELLED = 0x20, /* a periodic task was cancelled while running */
  UVS__T_POST = 0x40,      /* library-owned node of uvs_post */
  UVS__T_DEFERRED = 0x80   /* handed back while a run_cb of it executes */
};
/* The high half counts the run_cbs of the task executing now: more than
 * one only after a run_cb scheduled its own task again. The hand-back waits
 * for zero; sharing the word makes "defer" and "last run ended" one atomic
 * decision. */
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

/* worker->state (under the lock) */
enum {
  UVS__W_IDLE = 0,   /* no queued work, no drain */
  UVS__W_READY = 1,  /* queued work, waiting in sched->ready or loop_ready */
  UVS__W_POSTED = 2  /* a pool drain is posted or running */
};

/* worker->flags (under the lock) */
enum {
  UVS__W_CLOSING = 1,
  UVS__W_DRAIN = 2 /* closing with UVS_DRAIN */
};

/* sched->state (atomic) */
enum { UVS__S_OPEN = 0, UVS__S_CLOSING = 1, UVS__S_CLOSED = 2 };

/* sched->flags (under the lock) */
enum {
  UVS__S_ASYNC_SENT = 1, /* an uv_async_send is outstanding */
  UVS__S_FIRST_TURN = 2  /* loop not yet seen an iteration since init */
};

/* ---- sched.c ----------------------------------------------------------- */
int uvs__on_loop_thread(const uvs_sched_t* sched);
/* Asks the loop thread to process the scheduler soon. Lock held. */
void uvs__kick(uvs_sched_t* sched);
/* Makes a worker with newly queued work ready. Lock held. */
void uvs__worker_make_ready(uvs_worker_t* worker);
/* A ready worker whose FIFO became empty leaves its ready list. Lock held. */
void uvs__worker_unready_if_empty(uvs_worker_t* worker);
/* Ends the library's custody of a task linked nowhere: the done list for a
 * task with done_cb, released otherwise. Lock held. */
void uvs__handback(uvs_sched_t* sched, uvs_task_t* task, int status);
/* Takes a task out of whatever structure holds it (FIFO or timers) and hands
 * it back with UV_ECANCELED. Lock held. */
void uvs__cancel_locked(uvs_sched_t* sched, uvs_task_t* task);
/* Runs up to budget tasks of worker; called without the lock. */
void uvs__run_tasks(uvs_worker_t* worker);
uint64_t uvs__now_ms(void);

/* ---- worker.c ---------------------------------------------------------- */
/* Pins a worker against its close completing while a caller is inside the
 * API; returns 0 or UV_ESHUTDOWN if the worker is closed. */
int uvs__worker_enter(uvs_worker_t* worker);
void uvs__worker_leave(uvs_worker_t* worker);
void uvs__worker_close_locked(uvs_worker_t* worker,
                              uvs_close_how_t how,
                              uvs_worker_close_cb cb);

/* ---- task.c ------------------------------------------------------------ */
int uvs__schedule(uvs_worker_t* worker,
                  uvs_task_t* task,
                  int delayed,
                  uint64_t delay_ms,
                  uint64_t period_ms,
                  unsigned extra_flags);
/* For post.c: schedules a library-owned node; lock held. */
int uvs__schedule_node(uvs_worker_t* worker, uvs_task_t* task);
/* The task now running on this thread, and whether its run_cb scheduled it
 * again (then the run hands nothing back). */
struct uvs__tls_s {
  uvs_task_t* current;
  int rescheduled;
};
extern _Thread_local struct uvs__tls_s uvs__tls;

/* ---- post.c ------------------------------------------------------------ */
void uvs__post_release(uvs_sched_t* sched, uvs_task_t* task); /* lock held */
void uvs__post_free_all(uvs_sched_t* sched);

#endif /* UVSCHED_INTERNAL_H */
