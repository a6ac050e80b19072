/* The users' view: what its two files share. scenarios-users.c has the
 * rows of a loaded pool (u1-u5, u8) and the pieces below;
 * scenarios-events.c the rows of single events and of a pool held by
 * endless work (u6, u7). See scenarios-users.c's head for how a row
 * measures.
 */

#ifndef UVSCHED_BENCH_USERS_H
#define UVSCHED_BENCH_USERS_H

#include "bench.h"

enum { U_UVS = 0, U_RAW = 1, U_NAIVE = 2 };

typedef struct utask_s utask_t;

/* One task, whichever system carries it: each system runs the same body
 * (its run stamps, spins, calls body, stamps, counts, calls then). */
struct utask_s {
  uvs_task_t task;          /* uvsched */
  bench_node_t node;        /* naive */
  uv_work_t req;            /* raw */
  uint64_t spin_ns;         /* its length, in CPU time */
  uint64_t seq;             /* in its lane */
  bench_lane_t* lane;       /* ordered systems: order and count */
  bench_count_t* count;     /* raw: count only */
  void (*body)(utask_t* t); /* after the spin: u4's wait and signal */
  void (*then)(utask_t* t); /* after the count: hand-backs, next events */
  uvs_done_cb done;         /* uvsched: NULL releases the task at run_cb */
  uv_after_work_cb after;   /* raw: may be NULL */
  void* ctx;
  uint64_t arg;
  uint32_t idx; /* its worker, or key - 1 */
  uint32_t kind;
  uint64_t t_call;  /* uv_hrtime() just before the schedule call */
  uint64_t t_start; /* run_cb starts */
  uint64_t t_end;   /* run_cb returns (before the count) */
  uint64_t cpu;     /* its spin's CPU time as its thread's clock saw it */
};

/* How a system takes tasks. */
typedef struct usys_s {
  int kind;
  uv_loop_t* loop;
  uvs_worker_t* workers; /* U_UVS: worker idx, unless */
  uvs_worker_t* wide;    /* U_UVS: this one, with key idx + 1 */
  bench_naive_t* naive;  /* U_NAIVE: queue idx */
  int err;
} usys_t;

/* The three systems of a row (sys[3]): uvsched on workers, raw, naive. */
void users_sys_init(usys_t* sys,
                    uv_loop_t* loop,
                    uvs_worker_t* workers,
                    bench_naive_t* naive);
/* Spins for ns of the calling thread's CPU time; returns what it used. */
uint64_t users_spin(uint64_t ns);
/* Submits t to s from the loop thread, stamping t_call. */
void users_submit(usys_t* s, utask_t* t);
/* Submits t again from inside its own run (any thread), to the same worker
 * or queue; raw is not supported. Returns 0 or the schedule's error. */
int users_resubmit(usys_t* s, utask_t* t);
/* libuv's pool size, read as libuv reads it. */
unsigned users_pool_size(void);
/* ns of CPU used by the whole process so far: getrusage(RUSAGE_SELF),
 * user + system. */
uint64_t users_rusage(void);

/* p50, p99 and max of a latency; NAN for none. */
typedef struct lat_stats_s {
  double p50;
  double p99;
  double max;
} lat_stats_t;

/* Sorts v. */
lat_stats_t users_lat_stats(double* v, size_t n);

/* Six rows of one latency: p50, p99 and max against naive, then against
 * raw. ids and titles are string literals, in that order. */
typedef struct lat_rows_s {
  bench_row_t* row[6];
} lat_rows_t;

void users_lat_rows_make(lat_rows_t* r,
                         const char* const* ids,
                         const char* const* titles,
                         const char* unit,
                         double p50_target,
                         double p99_target);
void users_lat_rows_add(lat_rows_t* r,
                        lat_stats_t u,
                        lat_stats_t raw,
                        lat_stats_t naive);

/* A loop and a scheduler with the users' options (--users-budget,
 * --hold-us). */
void users_sched_open(const bench_cfg_t* cfg,
                      uv_loop_t* loop,
                      uvs_sched_t* sched);
void users_naive_open(uv_loop_t* loop, bench_naive_t* q, size_t n);
void users_naive_close(bench_naive_t* q, size_t n);
/* Closes what users_sched_open() opened, unless the scheduler still counts
 * work pending that will never run: then it says so and leaves it be,
 * rather than hang in the close. */
void users_sched_done(uv_loop_t* loop, uvs_sched_t* sched, const char* w);

void bench_users_events(const bench_cfg_t* cfg); /* u6 */
void bench_users_held(const bench_cfg_t* cfg);   /* u7 */

#endif /* UVSCHED_BENCH_USERS_H */
