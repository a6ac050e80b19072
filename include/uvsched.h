/* uvsched: ordered task queues on libuv's thread pool and loop thread.
 *
 * Nothing here is thread-safe unless docs/threads.rst says so; the contract
 * is docs/guarantees.rst, the reference is the rest of docs/.
 */

#ifndef UVSCHED_H
#define UVSCHED_H

#ifdef __cplusplus
extern "C" {
#endif

#include <stdint.h>
#include <uv.h>

/* UVS_VISIBILITY_HIDDEN: uvsched is compiled into a program, addon or plugin
 * that must export none of its symbols (meson -Dvisibility=hidden with
 * -Ddefault_library=static defines it; docs/embedding.rst). Define it for
 * the uvsched sources; the objects that call them may define it too. */
#if defined(UVS_VISIBILITY_HIDDEN) && !defined(_WIN32) && __GNUC__ >= 4
#define UVS_EXTERN __attribute__((visibility("hidden")))
#elif defined(UVS_VISIBILITY_HIDDEN)
#define UVS_EXTERN
#elif defined(_WIN32) && defined(BUILDING_UVSCHED_SHARED)
#define UVS_EXTERN __declspec(dllexport)
#elif defined(_WIN32) && defined(USING_UVSCHED_SHARED)
#define UVS_EXTERN __declspec(dllimport)
#elif __GNUC__ >= 4
#define UVS_EXTERN __attribute__((visibility("default")))
#else
#define UVS_EXTERN
#endif

/* The version of this header. UVS_VERSION_HEX packs it as uvs_version()
 * does, so that code can test for an API at compile time:
 * #if UVS_VERSION_HEX >= 0x000400 for 0.4's (older headers lack the macro,
 * which #if reads as 0). meson.build checks that these agree with the
 * project's version. */
#define UVS_VERSION_MAJOR 0
#define UVS_VERSION_MINOR 5
#define UVS_VERSION_PATCH 0
#define UVS_VERSION_HEX \
  ((UVS_VERSION_MAJOR << 16) | (UVS_VERSION_MINOR << 8) | (UVS_VERSION_PATCH))

typedef struct uvs_sched_s uvs_sched_t;
typedef struct uvs_worker_s uvs_worker_t;
typedef struct uvs_task_s uvs_task_t;

typedef void (*uvs_run_cb)(uvs_task_t* task);
typedef void (*uvs_done_cb)(uvs_task_t* task, int status);
typedef void (*uvs_sched_close_cb)(uvs_sched_t* sched);
typedef void (*uvs_worker_close_cb)(uvs_worker_t* worker);

typedef enum { UVS_POOL = 0, UVS_LOOP = 1 } uvs_where_t;
typedef enum { UVS_CANCEL = 0, UVS_DRAIN = 1 } uvs_close_how_t;

/* 0.4: a group of a scheduler's workers (uvs_sched_options_t's groups). */
typedef struct uvs_group_options_s {
  /* Weight when groups compete for drains; 0 = 100. */
  unsigned shares;
  /* Most run_cbs of the group's pool workers at once; 0 = the scheduler's
   * cap. */
  unsigned max_concurrency;
} uvs_group_options_t;

typedef struct uvs_group_stats_s {
  uint64_t running; /* run_cbs of the group's pool workers executing now */
  uint64_t ready;   /* the group's pool workers ready and waiting for a
                       drain now */
  uint64_t ran;     /* run_cb calls of the group's pool workers */
  uint64_t run_ns;  /* their run_cb time (start to return), summed */
} uvs_group_stats_t;

/* 0.4: the points of a task's life that a hook sees. */
typedef enum {
  UVS_EV_ACCEPTED = 0,   /* a call accepted the task */
  UVS_EV_STARTED = 1,    /* run_cb is about to be called */
  UVS_EV_ENDED = 2,      /* run_cb has returned */
  UVS_EV_HANDED_BACK = 3 /* the task is being handed back, with status */
} uvs_event_t;
typedef void (*uvs_hook_cb)(uvs_worker_t* worker,
                            uvs_task_t* task,
                            uvs_event_t event,
                            int status,
                            void* arg);

typedef struct uvs_sched_options_s {
  /* Most pool drains of this scheduler at once; 0 = no cap of its own. */
  unsigned max_concurrency;
  /* Most tasks one drain (or one loop turn) runs before yielding; 0 = a
   * time slice of about 1 ms instead of a count: no task starts once the
   * slice has passed. */
  unsigned budget;
  /* Nonzero: keep the loop alive until closed, even when idle. */
  int keep_alive;
  /* A drain that empties its queue may wait this long for more work before
   * giving its pool thread back; 0 = never (default). */
  unsigned linger_us;
  /* Nonzero: the scheduler's time stands still until uvs_clock_advance()
   * moves it (for tests of programs that use delays). Since 0.2. */
  int manual_clock;
  /* 0.4: the scheduler's groups; 0 = one group, default options; at most
   * 16. groups: ngroups entries, copied by uvs_sched_init. */
  unsigned ngroups;
  const uvs_group_options_t* groups;
  /* 0.4: NULL = none. */
  uvs_hook_cb hook;
  void* hook_arg;
  /* 0.5: the most time one pool drain keeps its thread while other ready
   * workers take turns on it, in us; 0 = 10000 (10 ms). A drain gives its
   * thread back to libuv when no worker is ready for it, or at the end of
   * the first turn that ends once it has held the thread this long. */
  unsigned hold_us;
} uvs_sched_options_t;

typedef struct uvs_stats_s {
  uint64_t scheduled; /* schedules accepted */
  uint64_t ran;       /* run_cb calls */
  uint64_t cancelled; /* handed back unrun: every non-zero status */
  uint64_t pending;   /* accepted and not yet handed back */
  uint64_t drains;    /* drains posted with uv_queue_work */
  uint64_t wakeups;   /* uv_async callbacks that found work */
} uvs_stats_t;

/* 0.2: bounded workers, width, metrics. */
typedef enum {
  UVS_FULL_REJECT = 0,     /* a schedule onto a full worker: UV_EAGAIN */
  UVS_FULL_BLOCK = 1,      /* uvs_schedule_wait blocks foreign threads */
  UVS_FULL_DROP_OLDEST = 2 /* the oldest queued task: done_cb UV_ENOBUFS */
} uvs_full_t;

typedef void (*uvs_worker_space_cb)(uvs_worker_t* worker);
/* 0.3: a key that was full has room again (per-key bounds). */
typedef void (*uvs_worker_key_space_cb)(uvs_worker_t* worker, uint64_t key);

typedef struct uvs_worker_options_s {
  /* Most run_cbs of this worker at once; 0 or 1 = serial; > 1 only for
   * UVS_POOL. */
  unsigned width;
  /* Most tasks queued and not started (delayed not counted); 0 = no
   * bound. */
  size_t max_pending;
  /* What a schedule onto a full worker does. */
  uvs_full_t on_full;
  /* space_cb runs when queued falls to this after the worker was full. */
  size_t low_water;
  /* Loop thread; may be NULL. */
  uvs_worker_space_cb space_cb;
  /* Nonzero: keep the wait and run histograms of uvs_worker_metrics_t,
   * freed when the worker's close completes: read the final ones in its
   * close callback (uvs_worker_close), which closing only the scheduler
   * does not give. */
  int metrics;
  /* 0.3. width > 1 only: most queued, not started tasks of one key; 0 = no
   * cap. A schedule onto a full key meets on_full for that key alone. */
  size_t key_max_pending;
  /* Loop thread; may be NULL: a key that was found full fell to
   * key_max_pending / 2. */
  uvs_worker_key_space_cb key_space_cb;
  /* A task ready longer than this when it would start is shed (done_cb
   * with UV_ETIMEDOUT); 0 = never. */
  uint64_t max_wait_ms;
  /* 0.4: index into the scheduler's groups (pool workers only; a loop
   * worker's is checked and ignored). */
  unsigned group;
} uvs_worker_options_t;

/* A log2 histogram: bucket k counts values of less than 2^k us (and at
 * least 2^(k-1) us); the last bucket also counts everything longer. */
typedef struct uvs_hist_s {
  uint64_t count, sum_ns, max_ns;
  uint64_t bucket[24];
} uvs_hist_t;

typedef struct uvs_worker_metrics_s {
  uint64_t queued, queued_max, delayed, running; /* now, and high-water mark */
  uint64_t scheduled, ran, cancelled, rejected, dropped;
  uvs_hist_t wait;    /* ready (queued or due) -> run_cb starts; with metrics */
  uvs_hist_t run;     /* run_cb duration; with metrics */
  uint64_t expired;   /* 0.3: tasks shed by max_wait_ms */
  uint64_t suspended; /* 0.4: the worker's suspend count now */
} uvs_worker_metrics_t;

/* The private tails of the structs below. */
#include "uvsched/private.h"

struct uvs_task_s {
  void* data;
  /* read-only */
  uvs_run_cb run_cb;
  uvs_done_cb done_cb;
  /* private */
  UVS_TASK_PRIVATE_FIELDS
};

struct uvs_worker_s {
  void* data;
  /* read-only */
  uvs_sched_t* sched;
  uvs_where_t where;
  /* private */
  UVS_WORKER_PRIVATE_FIELDS
};

struct uvs_sched_s {
  void* data;
  /* read-only */
  uv_loop_t* loop;
  /* private */
  UVS_SCHED_PRIVATE_FIELDS
};

UVS_EXTERN unsigned uvs_version(void);
UVS_EXTERN const char* uvs_version_string(void);

/* Scheduler: init and close on the loop thread only; uvs_now and
 * uvs_sched_stats on any thread. */
UVS_EXTERN int uvs_sched_init(uv_loop_t* loop,
                              uvs_sched_t* sched,
                              const uvs_sched_options_t* options);
UVS_EXTERN int uvs_sched_close(uvs_sched_t* sched,
                               uvs_close_how_t how,
                               uvs_sched_close_cb close_cb);
UVS_EXTERN uint64_t uvs_now(const uvs_sched_t* sched);
UVS_EXTERN void uvs_sched_stats(const uvs_sched_t* sched, uvs_stats_t* out);
/* 0.4, any thread: each field atomic, not a consistent snapshot. */
UVS_EXTERN int uvs_group_stats(const uvs_sched_t* sched,
                               unsigned group,
                               uvs_group_stats_t* out);

/* Workers: any thread. */
UVS_EXTERN int uvs_worker_init(uvs_sched_t* sched,
                               uvs_worker_t* worker,
                               uvs_where_t where);
UVS_EXTERN int uvs_worker_close(uvs_worker_t* worker,
                                uvs_close_how_t how,
                                uvs_worker_close_cb close_cb);

/* Tasks: any thread. */
UVS_EXTERN int uvs_task_init(uvs_task_t* task,
                             uvs_run_cb run,
                             uvs_done_cb done);
UVS_EXTERN int uvs_schedule(uvs_worker_t* worker, uvs_task_t* task);
UVS_EXTERN int uvs_schedule_after(uvs_worker_t* worker,
                                  uvs_task_t* task,
                                  uint64_t delay_ms);
UVS_EXTERN int uvs_schedule_every(uvs_worker_t* worker,
                                  uvs_task_t* task,
                                  uint64_t delay_ms,
                                  uint64_t period_ms);
UVS_EXTERN int uvs_task_cancel(uvs_task_t* task);

/* Fire-and-forget, library-allocated from a per-scheduler pool. */
UVS_EXTERN int uvs_post(uvs_worker_t* worker, void (*fn)(void* arg), void* arg);

/* 0.2: bounded workers, width and keys, metrics, manual clock. */
UVS_EXTERN int uvs_worker_init_ex(uvs_sched_t* sched,
                                  uvs_worker_t* worker,
                                  uvs_where_t where,
                                  const uvs_worker_options_t* options);
/* Any thread. */
UVS_EXTERN int uvs_worker_metrics(const uvs_worker_t* worker,
                                  uvs_worker_metrics_t* out);
/* Any thread; blocks only a thread that is neither the loop's nor a pool
 * thread that ever ran a drain of any uvsched scheduler, for at least
 * timeout_ms unless room comes or a close begins. What it accepts runs only
 * when the loop next polls: without keep_alive, a loop that nothing else
 * keeps alive is not polled by uv_run() in any mode, UV_RUN_NOWAIT
 * included, and the task waits there (docs/options.rst). */
UVS_EXTERN int uvs_schedule_wait(uvs_worker_t* worker,
                                 uvs_task_t* task,
                                 uint64_t timeout_ms);
/* Before scheduling; 0 = no key. */
UVS_EXTERN int uvs_task_set_key(uvs_task_t* task, uint64_t key);
/* Loop thread; only with manual_clock. */
UVS_EXTERN int uvs_clock_advance(uvs_sched_t* sched, uint64_t ms);

/* 0.3: re-arm a delayed task that has not fallen due (any thread, O(1)). */
UVS_EXTERN int uvs_task_reschedule(uvs_task_t* task, uint64_t delay_ms);
/* 0.4: suspend and resume a worker (any thread); a barrier on its queue. */
UVS_EXTERN int uvs_worker_suspend(uvs_worker_t* worker);
UVS_EXTERN int uvs_worker_resume(uvs_worker_t* worker);
UVS_EXTERN int uvs_schedule_barrier(uvs_worker_t* worker, uvs_task_t* task);
/* 0.3: the upper bound, in ns, of the bucket where the q-quantile falls,
 * capped at max_ns; 0 for an empty histogram or q outside [0, 1]. A bound,
 * not a value: quantiles that fall in the bucket of the max all answer
 * max_ns, so p50 = p99 = max is normal for a narrow distribution (runs of
 * 1.1 to 1.3 ms: all three 1.3 ms). The mean is sum_ns / count. */
UVS_EXTERN uint64_t uvs_hist_quantile(const uvs_hist_t* hist, double q);

/* 0.5: long tasks that cooperate.
 * From inside task's own run_cb: what the scheduler would like, in O(1),
 * with no lock and no system call but one clock read. 0: go on;
 * UV_EAGAIN: the turn is spent and other work waits (yield); UV_ECANCELED:
 * stop (interrupted, or a close with UVS_CANCEL); UV_EINVAL: not called
 * from inside that task's own running run_cb. */
UVS_EXTERN int uvs_task_check(uvs_task_t* task);
/* From inside a one-shot task's own run_cb: when run_cb returns, the task
 * keeps its place at the head of its worker's queue (of its key's, on a
 * wide worker) and runs again at the worker's next turn; no done_cb
 * until a run that does not yield. */
UVS_EXTERN int uvs_task_yield(uvs_task_t* task);
/* Any thread: uvs_task_cancel that also reaches a running task, whose
 * uvs_task_check then answers UV_ECANCELED until its run_cb returns. */
UVS_EXTERN int uvs_task_interrupt(uvs_task_t* task);
/* Any thread: the task whose run_cb runs on the calling thread, or NULL
 * (none, or a post's fn). */
UVS_EXTERN uvs_task_t* uvs_current_task(void);
/* Any thread, while the task is not in the library's custody: a run of it
 * that became ready more than max_wait_ms before it would start is shed
 * with UV_ETIMEDOUT (as a worker's max_wait_ms sheds); 0 removes it. Kept
 * for its later schedules. */
UVS_EXTERN int uvs_task_set_expiry(uvs_task_t* task, uint64_t max_wait_ms);

#ifdef __cplusplus
}
#endif

#endif /* UVSCHED_H */
