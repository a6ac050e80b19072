/* Declarations shared by uvsched's source files, file by file, leaves
 * first. Not installed. Declarations only: the inline functions live in
 * headers of their own, named below where they are included, each of
 * which says what it calls (scripts/check-layers.py counts their calls
 * as calls of the files that use them). */

#ifndef UVSCHED_INTERNAL_H
#define UVSCHED_INTERNAL_H

#include "uvsched.h"

#include <stddef.h>
#include <stdint.h>

#define uvs__container_of(ptr, type, member) \
  ((type*) ((char*) (ptr) -offsetof(type, member)))

/* Thread-locals of the library, read once or more per task. The
 * initial-exec model makes each access one instruction instead of a call
 * into the dynamic linker; it takes a little of the static TLS space that
 * glibc reserves, so the library can still be loaded with dlopen(). */
#if defined(__GNUC__) && !defined(_WIN32)
#define UVS__TLS _Thread_local __attribute__((tls_model("initial-exec")))
#else
#define UVS__TLS _Thread_local
#endif

/* libuv's largest thread pool (UV_THREADPOOL_SIZE). */
#define UVS__POOL_MAX 1024u
/* The most groups a scheduler has (0.4). */
#define UVS__GROUPS_MAX 16u
/* The largest delay, period or clock step, in ms. */
#define UVS__MAX_MS ((uint64_t) 1 << 40)

/* sched->flags (loop thread only) */
enum {
  UVS__SF_SETTLING = 1,        /* settle() runs (loop.c) */
  UVS__SF_HANDLES_CLOSING = 2, /* uv_close() called on our handles */
  UVS__SF_TURNED = 4,  /* a loop turn ran in this loop iteration (check_cb) */
  UVS__SF_CLOSES = 8,  /* closes are under way: every settle looks at them */
  UVS__SF_POSTED = 16, /* a schedule call posted a drain since the last
                        * settle (uvs__post_first) */
  UVS__SF_RAN = 32     /* the loop has run the scheduler: settle() ran */
};

/* sched->state (atomic) */
enum { UVS__SS_OPEN = 0, UVS__SS_CLOSING = 1, UVS__SS_CLOSED = 2 };

/* The inline helpers, each calling nothing of the library: */
#include "atomic.h" /* atomics, named by their memory order */
#include "queue.h"  /* the intrusive circular list */

/* 0.4: a group of the scheduler's pool workers (ready.c). Its lists,
 * drains and vtime are under the lock; the stats are atomics that anyone
 * may read. */
typedef struct uvs__group_s {
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
} uvs__group_t;

#include "state.h" /* the state words of tasks and workers */
#include "bell.h"  /* the doorbell: uvs__ring(), which calls only libuv */
#include "hook.h"  /* the one branch that reports to a hook */
#include "slice.h" /* time slices */

/* The files are layered: each calls only files on lines below its own,
 * with no exception: a file that needs the loop rings its doorbell
 * (uvs__ring(), bell.h), which calls only libuv. scripts/check-layers.py
 * checks that no call goes round in a circle.
 *   sched.c              uvs_sched_init, uvs_worker_init, uvs_now,
 *                        uvs_clock_advance, stats
 *   post.c               uvs_post
 *   task.c cancel.c      the schedule calls; cancel and re-arm
 *   loop.c               the loop thread's side: handles, settle() (what
 *                        is owed), dispatch of runners and lanes
 *   close.c drain.c      closes and the one sweep; running turns
 *   metrics.c            histograms, metrics, a worker's counts, shedding
 *   bound.c              admission at every entrance (schedule, post,
 *                        falling due, wait): bounds and policies, the
 *                        worker's and the key's
 *   timer.c              all of time: the wheel, delayed lists, due times,
 *                        the uv_timer, periodic tasks, manual clock steps
 *   worker.c             a worker's queue (inbox, FIFO, intake, its exits)
 *                        and the idle-to-busy hand-off; the hand-back
 *   space.c              the queued count and room: space callbacks,
 *                        blocked producers woken
 *   keys.c               a wide worker's keyed queue and key table
 *   ready.c              the ready order: groups, which worker goes next
 *   keytab.c postpool.c  the key table's memory; uvs_post's nodes
 *   hazard.c alloc.c version.c    leaves
 */

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

/* ---- hazard.c ---------------------------------------------------------- */
#include "hazard.h"

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

/* ---- ready.c: the ready order ------------------------------------------ */
/* All need the scheduler's lock. */
/* Lists w as ready at the tail of its list (its group's ready or
 * wide_ready, or the loop's), or, suspended, parks it. With ring set it
 * rings for a loop turn, or for a drain or lanes if the caps leave room
 * for one. Only the hand-off and the end of a turn call it (worker.c). */
void uvs__ready_list(uvs_worker_t* worker, int ring);
/* Which ready serial pool worker a drain serves next, taken off its
 * group's ready list and marked posted, or NULL. Groups with a worker
 * waiting and room compete by the least run_cb time per share; within
 * one, workers take turns in FIFO order. A new drain (going_on 0) takes a
 * place in the chosen group's count, returned in *group; a drain going on
 * to its next turn (its group in *group) stays in its group or moves its
 * place to one with room. dispatch() (loop.c) and a drain (drain.c) both
 * ask here. */
uvs_worker_t* uvs__ready_take(uvs_sched_t* sched,
                              int going_on,
                              unsigned* group);
/* Its suspension began: a worker listed ready leaves its list and parks,
 * so that its group no longer counts it ready. */
void uvs__ready_park(uvs_worker_t* worker);
/* A drain that took its next worker saw more waiting than drains: while
 * the caps leave room, it rings for one more (whose first take does the
 * same: a chain, not a burst). */
void uvs__ready_chain(uvs_sched_t* sched);
/* The groups with wide workers wanting lanes, least run_cb time per share
 * first, into order (UVS__GROUPS_MAX entries); returns how many. */
unsigned uvs__wide_order(uvs_sched_t* sched, unsigned* order);
/* A batch of n run_cbs of a pool worker took ns: the group's stats, and
 * its share of the time when groups compete. */
void uvs__group_ran(uvs_worker_t* worker, unsigned n, uint64_t ns);
/* Can the scheduler run one more drain (its cap, guarantee 12)? One more
 * for a worker of g (its cap, and g's)? Does a serial pool worker of any
 * group wait for a drain? */
int uvs__room(const uvs_sched_t* sched);
int uvs__group_room(const uvs_sched_t* sched, const uvs__group_t* g);
int uvs__pool_waiting(const uvs_sched_t* sched);

/* ---- keys.c and keytab.c ----------------------------------------------- */
#include "keys.h"

/* ---- space.c, bound.c and metrics.c ------------------------------------ */
#include "bound.h"

/* ---- worker.c: the queue ----------------------------------------------- */
/* A worker's queued tasks live in three places, oldest first: a drain's
 * batch of slots, the FIFO, and the inbox (and, on a wide worker, kready
 * and the queues behind its keys, keys.c). Producers push onto the inbox
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
/* Lock held: is anything queued, in the inbox, the FIFO or kready? */
int uvs__worker_nonempty(uvs_worker_t* worker);
/* The one way a queued task leaves its worker other than by a drain
 * (cancel, close, eviction, a key's eviction), lock held: out of its
 * batch slot (a tombstone in its place) or its list (the FIFO, kready or
 * its key's queue), its key let go, counted out. Returns 0, or UV_EBUSY if
 * its drain took it first. The caller hands it back. */
int uvs__take_out(uvs_worker_t* worker, uvs_task_t* task);
/* Takes the oldest queued task out of w (lock held), or NULL: a drain's
 * batch holds the oldest, its first slot not yet taken. */
uvs_task_t* uvs__take_oldest(uvs_worker_t* worker);
/* A run that yielded (0.5, coop.c; lock held, after the rest of its batch
 * went back): the task keeps its place at the head of the queue, or of
 * its key's on a wide worker, for the worker's next turn, counted as
 * queued again and never shed (it has started); or, if
 * uvs_task_interrupt reached it or a close with UVS_CANCEL began, it is
 * handed back with UV_ECANCELED. */
void uvs__worker_requeue(uvs_worker_t* worker, uvs_task_t* task);
/* A wide worker's intake (lock held): moves queued tasks to kready or
 * behind their key, until kready holds enough for the lanes. UV_EAGAIN if
 * it stopped at a push in progress, UV_ENOMEM if a key's entry can't be
 * had (the rest stays queued for a later try). */
int uvs__worker_intake(uvs_worker_t* worker);

/* ---- worker.c: the idle-to-busy hand-off ------------------------------- */
/* The one place a worker becomes ready: if it is idle (and, wide, has a
 * lane free), one CAS moves it to SCHEDULED and it is listed as ready
 * (uvs__ready_list). Returns 1 if this call made it ready. The caller
 * holds the lock iff locked. */
int uvs__worker_ready(uvs_worker_t* worker, int locked);
/* Pushes a task onto a worker's inbox and makes the worker ready if it was
 * idle; returns 1 if it did. A new schedule passes requeue = 0 and holds
 * no lock; a delayed task that fell due passes 1, and the caller holds the
 * lock. */
int uvs__worker_push(uvs_worker_t* worker, uvs_task_t* task, int requeue);
/* A task counted in under its key (per-key bounds) joins kready or the
 * queue behind its key, and the worker wants a lane if one is free. Lock
 * held (bound.c). */
void uvs__worker_file(uvs_worker_t* worker, uvs_task_t* task);
/* A turn of the worker ended (lock held, any thread): idle, or ready
 * again at the tail of its list, ringing for a drain or turn with ring
 * set (a drain that takes its next worker at once passes 0). */
void uvs__turn_ended(uvs_worker_t* worker, int ring);
/* Its suspension ended (lock held): a parked worker is listed again. */
void uvs__unpark(uvs_worker_t* worker);

/* ---- worker.c: the hand-back ------------------------------------------- */
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

/* ---- timer.c ----------------------------------------------------------- */
#include "timer.h"

/* ---- metrics.c: a worker's counts -------------------------------------- */
/* The sum of a counter of a wide worker's lanes, at offset off in each. */
uint64_t uvs__lanes_sum(uvs_worker_t* worker, size_t off);
/* Tasks accepted and not yet handed back (lock held). A task is counted in
 * nsched before a drain can take it, so this never undercounts. Tasks
 * still in the inbox are not included. */
uint64_t uvs__worker_pending(uvs_worker_t* worker);
/* run_cb calls so far, its lanes' included. Lock held, or the worker
 * pinned; once its close completed, the worker's own field has them all. */
uint64_t uvs__worker_ran(uvs_worker_t* worker);
/* A closing worker's lanes are done: their counts move to the worker's
 * fields before the lanes are freed (lock held). */
void uvs__worker_fold_counts(uvs_worker_t* worker);

/* ---- drain.c ----------------------------------------------------------- */
/* A lane of a wide worker: a key's turn (one batch, with a slice of its
 * own), then the next startable key's, until none is or its hold has
 * passed. Pool thread, no lock held. */
void uvs__lane_turn(uvs__lane_t* lane);
/* A runner (one uv_queue_work item): runs a turn of first, then of each
 * pool worker that is ready, as uvs__ready_take() orders them, until none
 * is or its hold has passed; *group is the group whose count it is in,
 * which moves with it. Pool thread, no lock held. */
void uvs__run_ready(uvs_sched_t* sched, uvs_worker_t* first, unsigned* group);
/* A loop turn: one turn of each loop worker ready now, within one time
 * slice for all (default budget) or budget tasks each; those the slice
 * leaves out owe the next turn. Returns 0 if none was ready. Loop
 * thread. */
int uvs__loop_turn(uvs_sched_t* sched);

/* ---- close.c ----------------------------------------------------------- */
/* Completes the closes that can complete (loop thread, no lock held).
 * Returns UVS__CLOSES_DONE once the scheduler has begun closing its
 * handles (then the caller must not touch them), UVS__CLOSES_PENDING while
 * a close waits for something (a drain, a hand-back), else 0. */
enum { UVS__CLOSES_PENDING = 1, UVS__CLOSES_DONE = 2 };
int uvs__finish_closes(uvs_sched_t* sched);

/* ---- loop.c ------------------------------------------------------------ */
typedef struct uvs__runner_s uvs__runner_t;
/* uvs_sched_init's handles: init, and the first loop iteration owed. */
int uvs__loop_init(uv_loop_t* loop, uvs_sched_t* sched);
void uvs__loop_start(uvs_sched_t* sched);
/* A schedule call on the loop thread made a pool worker ready: post a
 * drain for the oldest ready worker now, inside the call, if the caps
 * leave room and no other was posted since the last settle (SPEC 0.5:
 * "posted at once" may be done inside the schedule call; posting runs no
 * task). Loop thread, no lock held. */
void uvs__post_first(uvs_sched_t* sched);

/* ---- task.c ------------------------------------------------------------ */
/* For uvs_post: schedules a library-owned node onto an open worker. */
int uvs__schedule_node(uvs_worker_t* worker, uvs_task_t* task);
/* The task now running on this thread (NULL for a post's fn), and
 * whether its run_cb scheduled it again (then the run hands nothing back)
 * or yielded (0.5: then it is queued again, coop.c and drain.c). What
 * uvs_task_check() asks (coop.c) is set by the drain around each run:
 * the worker, the state seen as the run began, the end of the turn's
 * slice (0 with a budget), and with a budget whether the turn starts no
 * more tasks. */
struct uvs__tls_s {
  uvs_task_t* current;
  int rescheduled;
  int interrupted; /* an interrupt reached this run before it rescheduled */
  int yielded;
  uvs_worker_t* worker;
  unsigned flags; /* the task's state as its run began */
  int spent;
  uint64_t end_ns;
  int draining; /* this thread runs a drain or a loop turn */
  int pool;     /* this thread ran a runner or lane: a libuv pool thread */
  /* The worker whose close callback runs on this thread, and the
   * histograms its close took out of it, freed when the callback returns
   * (close.c, metrics.c). */
  const uvs_worker_t* closed;
  struct uvs__hists_s* closed_hists;
};
extern UVS__TLS struct uvs__tls_s uvs__tls;

/* ---- sched.c ----------------------------------------------------------- */
/* Init with options (NULL = defaults), after the caller checked them. */
int uvs__worker_init(uvs_sched_t* sched,
                     uvs_worker_t* worker,
                     uvs_where_t where,
                     const uvs_worker_options_t* options);

#endif /* UVSCHED_INTERNAL_H */
