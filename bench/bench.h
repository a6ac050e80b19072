/* uvsched-bench: declarations shared by the scenario files.
 *
 * Every scenario runs uvsched and its baselines in the same process, one
 * after the other within each repetition, in alternating order, and hands
 * one figure per variant and repetition to a row of the result table
 * (bench_row_add). main.c takes the medians, prints the table and writes
 * the JSON.
 */

#ifndef UVSCHED_BENCH_H
#define UVSCHED_BENCH_H

#include "uvsched.h"

#include <stddef.h>
#include <stdint.h>

#define BENCH_MAX_RUNS 64


/* ---- configuration ------------------------------------------------------ */

typedef struct bench_cfg_s {
  int smoke;           /* tiny sizes; correctness only */
  int runs;            /* repetitions of every scenario */
  int verbose;         /* print every repetition's figures */
  unsigned watchdog_s; /* one variant of one repetition may take this long */

  size_t pool_tasks;       /* s1, s3: tasks on one pool worker */
  size_t many_workers;     /* s2: pool workers */
  size_t many_per;         /* s2: tasks per worker */
  size_t loop_tasks;       /* s4: tasks fed to one loop worker */
  size_t lat_samples;      /* s4, s9: latency samples per repetition */
  unsigned lat_gap_us;     /* s4: pause that lets the loop go idle */
  size_t cancel_tasks;     /* s5: schedule + cancel pairs */
  unsigned cancel_max_ms;  /* s5, s7: delays are 1..this */
  size_t fire_tasks;       /* s6: delayed tasks that fire */
  unsigned fire_window_ms; /* s6: delays are 1..this */
  size_t scale_tasks;      /* s7: tasks per repetition */
  size_t scale_workers;    /* s7: the many-worker case */
  size_t scale_big;        /* s7: pending tasks, big case */
  size_t scale_small;      /* s7: pending tasks, small case */
  size_t scale_pairs;      /* s7: schedule + cancel pairs measured */
  size_t post_tasks;       /* s8 */
  size_t report_tasks;     /* s9: tasks per load */
  size_t report_hops;      /* s9: hand-offs per repetition */
  size_t keyed_keys;       /* s10: keys on the width-4 worker */
  size_t keyed_per;        /* s10: tasks per key */
  size_t clock_tasks;      /* s12: periodic tasks */
  uint64_t clock_steps;    /* s12: 1 s steps of the stepped case */
  unsigned users_rounds;   /* u1, u2: rounds per repetition */
  unsigned users_long_ms;  /* u1, u2: the long task */
  size_t users_short;      /* u1, u2: short tasks, one per worker or key */
  unsigned users_mix_ms;   /* u3: arrivals last this long per system */
  size_t users_cycles;     /* u4: burst + dependency cycles */
  size_t users_burst;      /* u4: tiny tasks per burst */
  unsigned users_wait_ms;  /* u4: deadline of one dependency wait */
  size_t users_keys;       /* u5: keys on the width-4 worker */
  size_t users_per;        /* u5: tasks per key */
  unsigned users_budget;   /* u1-u8: the scheduler's budget (0: slice) */
  unsigned users_hold_us;  /* u1-u8: its hold_us, 0.5 (0: the default) */
  size_t users_cold;       /* u6: events with the pool asleep */
  unsigned users_cold_ms;  /* u6: ... this far apart */
  size_t users_warm;       /* u6: events back to back */
  unsigned users_held_ms;  /* u7: the pool is held this long per system */
  size_t users_held_stats; /* u7: most fs_stat round trips per system */

  /* The 0.3 group (scenarios-03.c). */
  size_t v03_pending;          /* r1, r2: delayed tasks, and active timers */
  size_t v03_calls;            /* r1, r2: re-arms per repetition */
  unsigned v03_rearm_min_ms;   /* r1, r2: delays are this..60 s */
  size_t v03_conns;            /* r3: connections */
  size_t v03_late;             /* r4: delayed tasks per variant */
  unsigned v03_late_min_ms;    /* r4: delays are min..max */
  unsigned v03_late_max_ms;    /* r4 */
  unsigned v03_late_window_ms; /* r4: the schedule calls arrive over this */
  size_t v03_keys;             /* r5: keys on the width-4 worker */
  size_t v03_per;              /* r5: tasks per key */
  size_t v03_stream;           /* r6: tasks */

  /* Groups, 0.4 (scenarios-groups.c). */
  size_t groups_ticks;       /* g1: short tasks per variant, one per 1 ms */
  unsigned groups_bulk_ms;   /* g1: the bulk group's tasks */
  unsigned groups_warm_ms;   /* g2: before the window */
  unsigned groups_window_ms; /* g2: run_cb time is compared over this */

  /* Hooks, suspend and resume, barriers, 0.4 (scenarios-hooks.c). */
  size_t hooks_calls;     /* h2: schedules, or suspend + resume pairs */
  size_t hooks_queued;    /* h2: tasks queued on the suspended worker */
  size_t hooks_rounds;    /* h3: latency samples per variant */
  unsigned hooks_spin_us; /* h3: the busy tasks ahead of each sample */

  /* Long tasks that cooperate, 0.5 (scenarios-coop.c). */
  size_t coop_checks;      /* c1: calls of each kind in one run_cb */
  size_t coop_trials;      /* c2, c3: stops per system and repetition */
  unsigned coop_long_ms;   /* c4: the long tasks (CPU time) */
  unsigned coop_window_ms; /* c4: short tasks arrive this long ... */
  unsigned coop_gap_us;    /* c4: ... one every this often */
} bench_cfg_t;


/* ---- results (main.c) --------------------------------------------------- */

typedef enum {
  BENCH_GE,  /* met when the ratio (or value) is at least the target */
  BENCH_LE,  /* met when it is at most the target */
  BENCH_INFO /* reported, not targeted */
} bench_op_t;

typedef enum {
  BENCH_MEDIAN, /* the row's value is the median of its repetitions */
  BENCH_MAX     /* the worst repetition (for "zero" targets) */
} bench_agg_t;

typedef struct bench_row_s bench_row_t;

/* A row of the table. The target applies to uvsched / baseline, or with
 * on_value to uvsched's figure itself. Titles and units must outlive the
 * program (string literals). */
bench_row_t* bench_row(const char* id,
                       const char* title,
                       const char* unit,
                       bench_op_t op,
                       double target,
                       int on_value);
void bench_row_agg(bench_row_t* row, bench_agg_t agg);
/* One repetition's figures; NAN for "none" (a baseline that doesn't exist). */
void bench_row_add(bench_row_t* row, double uvsched, double baseline);
/* A figure outside the table: printed as name<TAB>value<TAB>unit and kept
 * in the JSON. */
void bench_figure(const char* name, double value, const char* unit);
/* The median of n values (sorts a copy). */
double bench_median(const double* v, size_t n);
/* The p-th percentile (0..100) of n values; sorts v in place. */
double bench_percentile(double* v, size_t n, double p);

/* A correctness failure: counted, printed, and the exit status is 1. */
void bench_fail(const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;
unsigned long bench_failures(void);

/* Arms the watchdog: if the program is still in the named step after
 * seconds, it says where it hung and exits with status 2. 0 disarms.
 * bench_arm uses the mode's default (--smoke or full). */
void bench_watchdog(const char* what, unsigned seconds);
void bench_arm(const char* what);

/* The i-th of n variants to run in repetition run: forward in even
 * repetitions, backward in odd ones. */
static inline int bench_order(int run, int n, int i) {
  return (run % 2 == 0) ? i : n - 1 - i;
}

/* Prints one repetition's figure when --verbose. */
void bench_note(const bench_cfg_t* cfg,
                const char* name,
                int run,
                double value,
                const char* unit);


/* ---- clocks, memory, randomness (main.c) -------------------------------- */

uint64_t bench_thread_cpu(void);  /* ns of CPU used by the calling thread */
uint64_t bench_process_cpu(void); /* ns of CPU used by the process */
/* Allocates and touches n * size bytes (aborts on failure), so that page
 * faults are paid before any clock starts. */
void* bench_alloc(size_t n, size_t size);
void bench_free(void* p);
/* xorshift64*: deterministic per seed, so variants get the same delays. */
uint64_t bench_rand(uint64_t* state);
/* Fills out[0..n) with delays uniform in lo..hi ms. */
void bench_delays(
    uint64_t* out, size_t n, uint64_t lo, uint64_t hi, uint64_t seed);

void bench_loop_init(uv_loop_t* loop);
/* Runs the loop until its handles are closed and checks uv_loop_close(). */
void bench_loop_close(uv_loop_t* loop, const char* where);
/* Closes a scheduler (UVS_DRAIN) and runs the loop until its close_cb ran. */
void bench_sched_close(uv_loop_t* loop, uvs_sched_t* sched, const char* where);
/* Checks a scheduler's stats at rest: nothing pending, and
 * scheduled == ran + cancelled. */
void bench_check_stats(const uvs_sched_t* sched, const char* where);


/* ---- counting runs ------------------------------------------------------ */

/* Counts runs of one variant; the run that reaches target stamps the time
 * (the end of "first schedule to last run") and, if asked, the calling
 * thread's CPU time, and wakes notify. */
typedef struct bench_count_s {
  uint64_t ran; /* atomic */
  uint64_t target;
  uint64_t t_end;   /* atomic: uv_hrtime() at the last run */
  uint64_t cpu_end; /* atomic: thread CPU at the last run, if want_cpu */
  int want_cpu;
  uv_async_t* notify;
} bench_count_t;

void bench_count_reset(bench_count_t* c, uint64_t target);
void bench_count_done(bench_count_t* c); /* the target-th run */

static inline void bench_count_hit(bench_count_t* c) {
  if (__atomic_add_fetch(&c->ran, 1, __ATOMIC_RELAXED) == c->target)
    bench_count_done(c);
}

static inline uint64_t bench_count_ran(const bench_count_t* c) {
  return __atomic_load_n(&c->ran, __ATOMIC_ACQUIRE);
}

static inline uint64_t bench_count_end(const bench_count_t* c) {
  return __atomic_load_n(&c->t_end, __ATOMIC_ACQUIRE);
}

/* An ordered stream: one per worker (uvsched's or a baseline's). Runs must
 * arrive with seq 0, 1, 2, ...; together with the final count that proves
 * every task ran exactly once and in order. Only one run of a lane
 * executes at a time (the guarantee under test), so its fields are plain. */
typedef struct bench_lane_s {
  uint64_t next;
  uint64_t bad; /* out-of-order runs seen */
  bench_count_t* count;
} bench_lane_t;

/* Starts n lanes over, all counting into c. */
static inline void bench_lanes_reset(bench_lane_t* lanes,
                                     size_t n,
                                     bench_count_t* c) {
  size_t i;

  for (i = 0; i < n; i++) {
    lanes[i].next = 0;
    lanes[i].bad = 0;
    lanes[i].count = c;
  }
}

static inline void bench_lane_hit(bench_lane_t* lane, uint64_t seq) {
  if (seq != lane->next)
    lane->bad++;
  lane->next++;
  bench_count_hit(lane->count);
}

/* Checks that each of n lanes saw exactly want runs, all in order. */
void bench_lanes_check(const bench_lane_t* lanes,
                       size_t n,
                       uint64_t want,
                       const char* where);

/* A uvsched task of an ordered stream: data points at its lane. */
typedef struct bench_utask_s {
  uvs_task_t task;
  uint64_t seq;
} bench_utask_t;

void bench_utask_run(uvs_task_t* task); /* bench_lane_hit(data, seq) */

/* A foreign producer thread: calls fn(arg), stamping t_start first. */
typedef struct bench_thread_s {
  uv_thread_t tid;
  void (*fn)(void* arg);
  void* arg;
  uint64_t t_start; /* uv_hrtime() just before fn */
} bench_thread_t;

void bench_thread_start(bench_thread_t* th, void (*fn)(void*), void* arg);
void bench_thread_join(bench_thread_t* th);

/* An async handle that closes itself on its first wake-up: the notify of a
 * bench_count_t whose runs happen off the loop thread keeps the loop alive
 * until the last run. */
void bench_finish_init(uv_loop_t* loop, uv_async_t* handle);


/* ---- baselines (baselines.c) -------------------------------------------- */

/* A node of the baselines' intrusive lists. */
typedef struct bench_node_s bench_node_t;
struct bench_node_s {
  bench_node_t* next;
  void (*run)(bench_node_t* node);
};

/* An item of an ordered stream carried by a baseline. */
typedef struct bench_ntask_s {
  bench_node_t node;
  bench_lane_t* lane;
  uint64_t seq;
} bench_ntask_t;

void bench_ntask_run(bench_node_t* node); /* bench_lane_hit */

/* Raw uv_queue_work: one uv_work_t per task, unordered, no after_work_cb.
 * req.data points at the counter; hits[idx] counts each task's runs. */
typedef struct bench_raw_s {
  uv_work_t req;
  uint32_t idx;
} bench_raw_t;

typedef struct bench_raw_ctx_s {
  bench_count_t* count;
  unsigned char* hits;
} bench_raw_ctx_t;

void bench_raw_submit(uv_loop_t* loop, bench_raw_ctx_t* ctx, bench_raw_t* r);

/* The naive ordered worker: a mutex-protected FIFO and a work-in-progress
 * flag, drained by one uv_queue_work at a time. A push that finds it idle
 * posts the drain: at once on the loop thread, through an uv_async_t from
 * any other. The drain pops one task per lock until the FIFO is empty; its
 * after_work_cb posts it again if work arrived meanwhile. */
typedef struct bench_naive_s {
  uv_mutex_t lock;
  bench_node_t* head;
  bench_node_t** tail;
  int busy;              /* under lock: a drain is posted or running */
  unsigned post_pending; /* under lock: the async must post a drain */
  uv_work_t work;
  uv_async_t async;
  uv_loop_t* loop;
  uv_thread_t loop_thread;
  uint64_t posts;   /* loop thread: uv_queue_work calls */
  uint64_t wakeups; /* loop thread: async callbacks that posted */
} bench_naive_t;

int bench_naive_init(uv_loop_t* loop, bench_naive_t* q);
void bench_naive_push(bench_naive_t* q, bench_node_t* node);
void bench_naive_close(bench_naive_t* q); /* loop thread, when idle */

/* The bridge: a mutex-protected list carried to the loop thread by
 * uv_async_send (one send per push; libuv coalesces them). The async
 * callback takes the whole list and runs it in order. */
typedef struct bench_bridge_s {
  uv_mutex_t lock;
  bench_node_t* head;
  bench_node_t** tail;
  uv_async_t async;
  uint64_t wakeups; /* loop thread: async callbacks that found items */
} bench_bridge_t;

int bench_bridge_init(uv_loop_t* loop, bench_bridge_t* b);
void bench_bridge_push(bench_bridge_t* b, bench_node_t* node);
void bench_bridge_close(bench_bridge_t* b); /* loop thread */


/* ---- shared scenario pieces (scenarios-pool.c) --------------------------- */

/* Calls fn(arg) on the loop thread, then runs the loop until it has
 * nothing left: before uv_run() if in_cb is 0, or, if it is 1, from an
 * uv_async_t's callback inside uv_run(), which is where a server
 * schedules (read and async callbacks run in the loop's poll phase). */
void bench_submit(uv_loop_t* loop, int in_cb, void (*fn)(void*), void* arg);

/* Round-robin load from the loop thread: per tasks for each of nworkers
 * pool workers, scheduled as task r of every worker, then task r + 1, ...
 * (nworkers == 1 is a plain stream). tasks holds nworkers * per entries.
 * Runs the loop until the last run and checks order and count. in_cb says
 * where the schedule calls are made (bench_submit). */
typedef struct bench_rr_s {
  uv_loop_t* loop;
  uvs_worker_t* workers;
  bench_lane_t* lanes;
  size_t nworkers;
  size_t per;
  bench_utask_t* tasks;
  bench_count_t count;
  int in_cb;
  /* out */
  int err;
  uint64_t t0;
  uint64_t t_sched; /* in_cb 0: uv_hrtime() once the last schedule returned */
  uint64_t t_end;
  uint64_t cpu; /* process CPU from the first schedule to uv_run's return */
} bench_rr_t;

/* Returns tasks per second, first schedule to last run; NAN on failure. */
double bench_rr_uvs(bench_rr_t* rr, const char* where);
/* The same load through raw uv_queue_work (one request per task). */
double bench_rr_raw(bench_rr_t* rr,
                    bench_raw_t* raw,
                    unsigned char* hits,
                    const char* where);


/* A producer thread feeding one worker: bench_feed_uvs schedules utasks
 * onto worker, bench_feed_nodes pushes ntasks through push(q, node). */
typedef struct bench_feed_s {
  size_t n;
  uvs_worker_t* worker;
  bench_utask_t* utasks;
  bench_ntask_t* ntasks;
  void (*push)(void* q, bench_node_t* node);
  void* q;
  bench_lane_t* lane; /* set by bench_feed_run */
  int err;
} bench_feed_t;

/* Producer first, then the loop alone: each side's ns per task. */
int bench_feed_split(uv_loop_t* loop,
                     bench_feed_t* feed,
                     void (*fn)(void*),
                     double* producer_ns,
                     double* consumer_ns,
                     const char* where);
void bench_feed_uvs(void* arg);
void bench_feed_nodes(void* arg);
/* Starts a producer running fn(feed), runs the loop until the last run and
 * checks order and count. Returns tasks per second from the producer's
 * first schedule to the last run; *cpu gets the process CPU time. */
double bench_feed_run(uv_loop_t* loop,
                      bench_feed_t* feed,
                      void (*fn)(void*),
                      uint64_t* cpu,
                      const char* where);

void bench_push_naive(void* q, bench_node_t* node);
void bench_push_bridge(void* q, bench_node_t* node);

/* One-way latency from a foreign thread to a run on the loop thread, for a
 * UVS_LOOP worker and for the bridge at once: 2 * samples probes, each
 * stamped, scheduled (or pushed) and waited for, then gap_us of pause
 * before the next (0: back to back). Probes alternate between the two,
 * uvsched first when first == 0, so that both see the same machine. Fills
 * out_uvs[0..samples) and out_bridge[0..samples) with ns; returns 0 or -1. */
int bench_loop_latency(uv_loop_t* loop,
                       uvs_worker_t* worker,
                       bench_bridge_t* bridge,
                       size_t samples,
                       unsigned gap_us,
                       int first,
                       double* out_uvs,
                       double* out_bridge,
                       const char* where);


/* ---- shared scenario pieces (scenarios-keys.c) --------------------------- */

/* s10's load: per tasks for each of keys keys (key i + 1), scheduled from
 * the loop thread as task r of every key, then task r + 1, ... onto
 * worker; runs the loop until the last run and checks each key's order
 * (its lane). Returns 0, or -1 after bench_fail(). */
typedef struct bench_keyed_s {
  uv_loop_t* loop;
  uvs_worker_t* worker;
  bench_utask_t* tasks; /* keys * per */
  bench_lane_t* lanes;  /* one per key */
  size_t keys;
  size_t per;
  bench_count_t count;
  /* out */
  uint64_t cpu; /* process CPU, first schedule to uv_run's return */
  double rate;  /* tasks per second, first schedule to last run */
} bench_keyed_t;

int bench_keyed_run(bench_keyed_t* k, const char* where);


/* ---- scenarios ---------------------------------------------------------- */

void bench_c1_check_cost(const bench_cfg_t* cfg);    /* scenarios-coop.c */
void bench_c2_interrupt(const bench_cfg_t* cfg);     /* scenarios-coop.c */
void bench_c3_close_cancel(const bench_cfg_t* cfg);  /* scenarios-coop.c */
void bench_c4_long_yield(const bench_cfg_t* cfg);    /* scenarios-coop.c */
void bench_h1_hook_cost(const bench_cfg_t* cfg);     /* scenarios-hooks.c */
void bench_h2_suspend(const bench_cfg_t* cfg);       /* scenarios-hooks.c */
void bench_h3_barrier(const bench_cfg_t* cfg);       /* scenarios-hooks.c */
void bench_g1_interactive(const bench_cfg_t* cfg);   /* scenarios-groups.c */
void bench_g2_shares(const bench_cfg_t* cfg);        /* scenarios-groups.c */
void bench_g3_cost(const bench_cfg_t* cfg);          /* scenarios-groups.c */
void bench_v03(const bench_cfg_t* cfg);              /* scenarios-03.c */
void bench_users(const bench_cfg_t* cfg);            /* scenarios-users.c */
void bench_s1_pool_one(const bench_cfg_t* cfg);      /* scenarios-pool.c */
void bench_s2_pool_many(const bench_cfg_t* cfg);     /* scenarios-pool.c */
void bench_s3_pool_foreign(const bench_cfg_t* cfg);  /* scenarios-pool.c */
void bench_s4_loop_foreign(const bench_cfg_t* cfg);  /* scenarios-loop.c */
void bench_s5_cancel(const bench_cfg_t* cfg);        /* scenarios-timer.c */
void bench_s6_fire(const bench_cfg_t* cfg);          /* scenarios-timer.c */
void bench_s7_scale(const bench_cfg_t* cfg);         /* scenarios-scale.c */
void bench_s8_alloc(const bench_cfg_t* cfg);         /* scenarios-pool.c */
void bench_s9_report(const bench_cfg_t* cfg);        /* scenarios-loop.c */
void bench_s10_keyed(const bench_cfg_t* cfg);        /* scenarios-keys.c */
void bench_s11_metrics(const bench_cfg_t* cfg);      /* scenarios-keys.c */
void bench_s12_manual_clock(const bench_cfg_t* cfg); /* scenarios-keys.c */

/* From src/internal.h, exported by uvsched_internal: allocations so far. */
unsigned long uvs__alloc_count(void);

#endif /* UVSCHED_BENCH_H */
