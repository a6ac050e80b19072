/* uvsched-stress: random operations from several threads, checked as they
 * go against SPEC's invariants.
 *
 *   uvsched-stress [--seconds N] [--soak N] [--seed S] [--quiet]
 *
 * Three foreign threads and the loop thread each own a pool of tasks and,
 * at random, schedule, schedule_after, schedule_every, cancel, post, close
 * and re-create workers on two schedulers (one with the default options,
 * one with budget 7, max_concurrency 2 and linger_us 20), each with two
 * serial pool workers, two loop workers and one wide pool worker (width 4,
 * made with uvs_worker_init_ex, sometimes with metrics). Every task carries
 * a key set with uvs_task_set_key before it is scheduled: one of 8 keys
 * (64-bit values, two of them equal to others in their low 32 bits) or,
 * one time in five, none. On a serial worker keys change nothing, and the
 * serial checks below hold whatever the keys. Run callbacks sometimes take
 * long, re-schedule their own task (at once or delayed) or try to
 * re-schedule a periodic task (UV_EBUSY).
 * Checked as it runs:
 *
 *   - every accepted task is handed back exactly once, with 0 only after
 *     its run and UV_ECANCELED only without one (periodic: always
 *     UV_ECANCELED); a rejected schedule is never handed back;
 *   - per producer and serial worker, tasks and posts scheduled at once
 *     run in the order of their schedule calls, and their done_cb(..., 0)
 *     come in that order too;
 *   - per producer, wide worker and key, tasks scheduled at once run, and
 *     their done_cb(..., 0) come, in the order of their schedule calls
 *     (tasks without a key and posts on a wide worker: not checked for
 *     order);
 *   - a close with UVS_CANCEL (of the worker or of its scheduler) does not
 *     skip a task: once it has handed back an ordered task of a producer
 *     that nobody cancelled, no later task or post of that producer has run
 *     on that worker (checked in the close callback, when all have ended);
 *     on a wide worker the same per producer and key;
 *   - never two run callbacks of one serial worker at once, never more than
 *     4 of a wide one, never two of one key of a wide one, each on the
 *     right thread (pool or loop); the run callbacks of one key hand over
 *     to each other without a data race (TSan sees their plain writes);
 *   - nothing early: a delayed task not before t_call + delay, periodic
 *     run k not before grid point k;
 *   - cancel answers 0 or UV_EBUSY for a task in custody, UV_EBUSY for one
 *     handed back, UV_EINVAL for one never scheduled; a task whose cancel
 *     returned 0 is handed back with UV_ECANCELED and did not run;
 *   - every schedule, post or close made after a worker's close returned is
 *     answered UV_ESHUTDOWN (UV_EINVAL for the close);
 *   - uvs_now() never decreases and is never ahead of uv_hrtime();
 *   - 0.3: uvs_task_reschedule on any task of the producer answers 0 only
 *     for one in custody on an open worker, UV_EBUSY or UV_ESHUTDOWN for
 *     one in custody, UV_EBUSY for one handed back, UV_EINVAL for one never
 *     scheduled or a delay above 2^40; a task re-armed with 0 runs no
 *     earlier than that call's t_call + delay (a periodic one: its grid
 *     restarts, and is no longer checked point by point);
 *   - 0.3: the wide worker is sometimes made with key_max_pending (2 to 5)
 *     and one of the three on_full policies: a schedule of a keyed task
 *     onto it may answer UV_EAGAIN (REJECT, BLOCK, or a BLOCK wait on the
 *     loop thread) or UV_ETIMEDOUT (a foreign producer's 2 ms
 *     uvs_schedule_wait under BLOCK), and with DROP_OLDEST a task that
 *     never ran may come back with UV_ENOBUFS, as may, under any policy, a
 *     delayed one-shot task that fell due onto a full key; key_space_cb
 *     comes on the loop thread, for that worker and a key a task had; the
 *     per-key order and overlap checks hold as before;
 *   - 0.4: every producer suspends workers now and then (uvs_worker_suspend
 *     answers 0, or UV_ESHUTDOWN once a close began) and resumes each
 *     within 2 ms (0, or UV_ESHUTDOWN once a close began; never
 *     UV_EINVAL, as it holds a suspension), unless a close ended it first:
 *     the final closes end those still held. While a suspension that
 *     returned is held and no close began, the worker starts at most one
 *     task or post per lane (1, or the width), the SPEC's slack for a
 *     suspend from another thread, counted from the moment the count
 *     left 0;
 *   - 0.4: producers schedule barriers onto the wide workers (one of each
 *     producer's at a time there): a barrier starts with no other run
 *     callback of the worker running, and none starts until it returns;
 *     no task or post its producer scheduled at once before it starts
 *     after it, none scheduled after it starts before it returned; its
 *     done_cb(..., 0) comes after those of the tasks that ran before it
 *     and before those of the tasks that ran after it;
 *   - 0.4: scheduler 0 always, scheduler 1 for some seeds, has a hook that
 *     follows each task through ACCEPTED -> STARTED -> ENDED ... ->
 *     HANDED_BACK with atomics: ACCEPTED once per accepted call, before
 *     it returns (or from the task's own run_cb), a one-shot run per
 *     acceptance, STARTED and ENDED on the run callback's thread around
 *     it, HANDED_BACK on the loop thread after the last ENDED and right
 *     before done_cb, with its status; posts come with NULL, and their
 *     counts agree with the posts accepted, run and dropped;
 *   - 0.5 (issue 40): per-key bounds are promises while ACCEPTED hooks
 *     run with the scheduler's lock let go. Each scheduler has one more
 *     worker (width 2, key_max_pending 1 or 2, DROP_OLDEST) whose tasks
 *     all have one key, scheduled by every producer in bursts: the loop
 *     suspends it, the producers schedule (the hook spins a little on each
 *     ACCEPTED, so that calls overlap), the loop ends the burst once no
 *     call is in flight and measures the queue (uvs_worker_metrics: never
 *     more than key_max_pending queued), then resumes it: exactly
 *     min(accepted, key_max_pending) of the burst's tasks run, every other
 *     comes back with UV_ENOBUFS, unrun;
 *   - 0.5, long tasks that cooperate: some tasks yield once or twice, some
 *     check a few times and yield on UV_EAGAIN, some interrupt themselves,
 *     check and yield; producers interrupt their tasks now and then
 *     (uvs_task_interrupt answers as cancel for a task out of custody, 0
 *     or UV_EBUSY in it); a task of 32 has an expiry of 1 to 3 ms. In
 *     every run uvs_current_task() is the running task (NULL in done_cb,
 *     in a post's fn, and in an ACCEPTED hook outside a run_cb);
 *     uvs_task_check answers 0, UV_EAGAIN or UV_ECANCELED, UV_ECANCELED
 *     only with a cause (an interrupt called, or a close with UVS_CANCEL
 *     of the worker or its scheduler) and, once heard, in every later check
 *     of that run; a run that starts after a producer's interrupt returned
 *     0 hears UV_ECANCELED; UV_EINVAL about another task. A yield answers
 *     0 (UV_EINVAL for a periodic task or a barrier, UV_EBUSY after the
 *     run scheduled its task again); a task that
 *     yielded runs again before any other task or post of its worker (of
 *     its key on a wide worker; keyless tasks there are not checked)
 *     starts, or never runs again and comes back with a non-zero status;
 *     it is handed back once, with 0 after as many runs as yields plus
 *     one, otherwise after as many runs as yields; hooks see one STARTED
 *     per run; `ran` counts the runs that did not yield. An expired task
 *     never starts: now and then a producer suspends a worker, schedules
 *     two tasks with an expiry of 1 ms onto it and resumes it 4 ms later;
 *     each that was scheduled more than 2 ms before the resume (the
 *     worker open and unchanged, no close begun) must never start, and
 *     comes back with a non-zero status (UV_ETIMEDOUT unless a close,
 *     cancel or eviction took it first); UV_ETIMEDOUT only for a task
 *     with an expiry that never ran; a post's HANDED_BACK says
 *     UV_ECANCELED (a close dropped it: nothing here sheds posts);
 *   - at the end, after both schedulers closed: nothing left in custody,
 *     every post ran or was dropped by a close (from the stats), and the
 *     stats agree with what the callbacks saw.
 *
 * --seconds N runs for N seconds (default 3) and prints TAP. --soak N runs
 * for N seconds and prints a line every 10 s: runs per second and the
 * process's resident set size (RSS), which must stay flat.
 */

#include "task.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <unistd.h>

#define NSCHED 2
#define NSLOT 5 /* per scheduler: 0 and 1 pool, 2 and 3 loop, 4 wide */
#define NSLOTS (NSCHED * NSLOT)
#define WIDE_SLOT 4 /* a width-4 pool worker */
#define WIDTH 4
#define NKEY 9 /* key index 0: no key; 1..8: keys */
#define NFOREIGN 3
#define NPROD (NFOREIGN + 1) /* producer NFOREIGN is the loop thread */
#define LOOP_PROD NFOREIGN
#define NTASK 256
#define MAX_PERIODIC 6
#define POST_PENDING_MAX 20000
#define LOOP_OPS 24 /* per 1 ms timer tick */

/* The keys behind the key indexes: exact 64-bit values, so 1 and 2 each
 * have a twin that differs only above bit 31, and the extremes. */
static const uint64_t key_values[NKEY] = {
    0,
    1,
    2,
    ((uint64_t) 1 << 32) | 1,
    ((uint64_t) 1 << 32) | 2,
    0x9e3779b97f4a7c15ull,
    0x8000000000000001ull,
    UINT64_MAX - 1,
    UINT64_MAX,
};

/* slot phases */
enum { S_OPEN, S_CLAIMED, S_CLOSING, S_CLOSED, S_INIT, S_SCHED_CLOSED };
/* task custody, as the test sees it */
enum { T_FREE, T_SUBMIT, T_CUSTODY, T_RETURNED };
enum { K_NOW, K_AFTER, K_EVERY };
/* 0.5: how a task's run_cb cooperates */
enum { C_NONE, C_YIELD, C_CHECK, C_INTR };

struct stask_s;

typedef struct {
  uvs_worker_t worker;
  uv_rwlock_t lock; /* read: a call on worker; write: uvs_worker_init */
  atomic_int phase;
  atomic_int inflight; /* run callbacks executing */
  int sched;
  uvs_where_t where;
  int width;            /* 1: serial; WIDTH: wide, checked per key */
  long last_seq[NPROD]; /* by run callbacks, one at a time */
  long next_seq[NPROD]; /* by producer p only */
  /* ms, set before phase becomes S_CLOSED; atomic, since a producer that
   * saw S_CLOSED may read it as another incarnation closes. */
  _Atomic uint64_t closed_at;
  /* Loop thread: per producer, the lowest seq of an ordered task that a
   * close handed back in this incarnation of the worker; LONG_MAX if none. */
  long close_cut[NPROD];
  atomic_long closes;
  /* Loop thread: per producer and key index, the seq of the last ordered
   * task handed back with 0 (a serial worker uses key index 0 for all). */
  long done_seq[NPROD][NKEY];
  /* Wide only. Run callbacks executing per key index; per producer and
   * key, the last ordered seq run (plain: the runs of one key are one at a
   * time, each happens-before the next) and, as close_cut, the lowest
   * seq a close handed back. */
  atomic_int key_inflight[NKEY];
  long key_last_seq[NPROD][NKEY];
  long key_close_cut[NPROD][NKEY];
  atomic_int inflight_max;
  atomic_long keyed_runs;
  /* Wide only, 0.3: per-key bound of this incarnation (0: none) and its
   * policy; written with the slot's write lock, before init. */
  int key_max;
  uvs_full_t on_full;
  atomic_long key_space_calls;
  /* 0.4, suspend: the incarnation (written with the write lock); the
   * suspensions that returned and are held (a resume lowers it before its
   * call); the starts still allowed since it left 0. */
  int gen;
  atomic_int susp_held;
  atomic_int susp_slack;
  atomic_long suspends;
  /* 0.4, wide only: a barrier is running; per producer, the seq of its
   * barrier accepted and not yet returned (LONG_MAX: none) and of the last
   * that started; the start order of runs. */
  atomic_int barrier_running;
  atomic_long bar_open[NPROD];
  atomic_long bar_started[NPROD];
  atomic_long run_ctr;
  atomic_long barriers_run;
  /* Loop thread: run indexes of the last barrier handed back with 0 and
   * the highest of any task handed back with 0, in this incarnation. */
  long bar_done_run;
  long max_done_run;
  /* 0.5: the task that yielded and waits to run again, with its custody
   * (serial: of the worker; wide: per key index, keys only), written and
   * read by runs of the worker (or key), one at a time; a close with
   * UVS_CANCEL of this incarnation was called. */
  struct stask_s* yielded;
  long yielded_c;
  struct stask_s* key_yielded[NKEY];
  long key_yielded_c[NKEY];
  atomic_int cancel_closing;
} slot_t;

typedef struct stask_s {
  uvs_task_t task;
  int owner;
  atomic_int state;
  int slot;
  int kidx;  /* key index, set with the key before each schedule */
  int kind;  /* may change in run_cb (a re-schedule) */
  int pkind; /* the kind its owner scheduled: the owner's alone */
  long seq;  /* -1: not ordered */
  uint64_t t_call;
  uint64_t delay;
  uint64_t period;
  /* 0.3: what a run must respect, set by whoever sets the due time (a
   * schedule, a re-arm that answered 0, a self re-schedule), under blk;
   * after a re-arm a periodic task's grid is no longer checked. */
  uv_mutex_t blk;
  uint64_t after_bound; /* ns */
  int regrid;
  int runs; /* in the current schedule (periodic: all its runs) */
  int status;
  int cancel_ok;
  atomic_int cancel_tried; /* uvs_task_cancel was called in this custody */
  int ever_accepted;
  int depth; /* self re-schedules in this custody */
  long accepts;
  atomic_long dones;
  /* 0.4 */
  int barrier;  /* this custody is a barrier's */
  long run_idx; /* wide: start order of its last run */
  /* Hook: in custody (ACCEPTED to HANDED_BACK); runs between STARTED and
   * ENDED (more than one when a run scheduled it again and it started
   * elsewhere before that run returned); one-shot runs owed. */
  atomic_int h_held;
  atomic_int h_running;
  atomic_int h_credit;
  atomic_long h_accepts;
  /* 0.5, in this custody (custody counts them, written before each
   * schedule): how its runs cooperate, yields that returned 0, an
   * interrupt called (set before the call) or, by its owner, answered 0;
   * it interrupted itself and yielded. The custody in which another task
   * started while it waited after a yield (it must not run again), and in
   * which it waited past its expiry for sure (it must not start). */
  long custody;
  int coop;
  int yields;
  int yields_max;
  uint64_t expiry;
  int gen; /* its slot's incarnation when it was scheduled */
  atomic_int intr_req;
  atomic_int intr_done;
  int intr_ok;
  int intr_self;
  atomic_long overtaken_c;
  atomic_long doomed_c;
  uint64_t t_return; /* ns: its schedule call returned */
} stask_t;

typedef struct {
  uint64_t rng;
  stask_t tasks[NTASK];
  unsigned cursor;
  int periodic_live;
  long ops;
  long post_accepts;
  long task_accepts;
  long cancels_ok;
  long shutdowns;
  long rearms_ok;
  long rearms_busy;
  long full_answers; /* UV_EAGAIN and UV_ETIMEDOUT from bounded keys */
  uint64_t last_now;
  /* 0.4: per slot, the incarnation of a suspension held (-1: none) and
   * when to resume it; per wide slot, its barrier in flight. */
  int held_gen[NSLOTS];
  uint64_t held_until[NSLOTS];
  int nheld;
  stask_t* bar_task[NSLOTS];
  long suspends_ok;
  long resumes_ok;
  long barriers_ok;
  long post_accepts_s[NSCHED];
  /* 0.5: a schedule's forced slot (-1: none) and expiry; per slot, the
   * expiry probes of the suspension held, with their custodies. */
  int force_slot;
  uint64_t force_expiry;
  stask_t* probe[NSLOTS][2];
  long probe_c[NSLOTS][2];
  long interrupts_ok;
  long probes;
  long probes_doomed;
} producer_t;

static uv_loop_t loop;
static uvs_sched_t scheds[NSCHED];
static slot_t slots[NSLOTS];
static producer_t prods[NPROD];
static uv_thread_t threads[NFOREIGN];
static uv_thread_t loop_thread;
static uv_timer_t tick;
static atomic_int stop;
static atomic_int scheds_closing; /* set after both uvs_sched_close returned */
static int stopped;

static atomic_long task_runs;
static long dones_enobufs; /* loop thread */
static atomic_long post_runs;
static atomic_long self_accepts;
static long dones_ok;        /* loop thread */
static long dones_cancelled; /* loop thread */
/* 0.5: runs that yielded; answers heard; schedulers closing with
 * UVS_CANCEL; loop thread: hand-backs with UV_ETIMEDOUT, and of probes
 * that were doomed. */
static atomic_long yields_total;
static atomic_long checks_eagain;
static atomic_long checks_ecanceled;
static atomic_int sched_cancel[NSCHED];
static long dones_expired;
static long doomed_shed;
static uvs_stats_t final_stats[NSCHED];
static int scheds_closed;
/* 0.4: the schedulers' closes are about to begin (suspensions end). */
static atomic_int closes_begin;
/* 0.4, hooks: which schedulers have one; per scheduler, the events of
 * posts (relaxed counters: no ordering between runs is implied); loop
 * thread: the task whose HANDED_BACK came, for its done_cb. */
static int hooked[NSCHED];
static atomic_long h_post_acc[NSCHED];
static atomic_long h_post_started[NSCHED];
static atomic_long h_post_ended[NSCHED];
static atomic_long h_post_dropped[NSCHED];
static atomic_long post_runs_s[NSCHED];
static stask_t* h_expect;
static int h_expect_status;
/* Per thread: the task whose STARTED came and whose run_cb has not been
 * entered yet; whose run_cb runs; whose run_cb returned, ENDED not come. */
static _Thread_local stask_t* tl_started;
static _Thread_local stask_t* tl_running;
static _Thread_local stask_t* tl_ended;

/* 0.5: per scheduler, a worker whose key is filled in bursts (see the top
 * of the file). Loop thread: the state machine and what done_cb counts;
 * producers: inflight around each call, the burst's accepts, the tasks
 * they own (busy: in a call or in custody, until done_cb). */
#define RACE_KEY 0x5eed0000000000a5ull
#define RACE_TASKS 8 /* per producer and scheduler */
#define RACE_BURST_MS 3
enum { R_BURST, R_DRAIN, R_OFF };
typedef struct {
  uvs_task_t task;
  int sched;
  atomic_int busy;
} rtask_t;
typedef struct {
  uvs_worker_t worker;
  int key_max;
  atomic_int phase;
  atomic_int inflight;  /* producers between their phase look and return */
  atomic_long accepted; /* in this burst */
  atomic_long runs;     /* in this burst */
  uint64_t burst_end;   /* ms */
  long acc;             /* accepted in the burst that drains */
  long dones, enobufs, others; /* this burst's, loop thread */
  long bursts, total_dones, total_nonzero;
  atomic_long all_acc; /* every task accepted, and every run */
  atomic_long all_runs;
} race_t;
static race_t races[NSCHED];
static rtask_t rtasks[NPROD][NSCHED][RACE_TASKS];

static uint64_t start_ms;
static uint64_t end_ms;
static int soak;
static int quiet;
static uint64_t next_report;
static long last_report_runs;
static uint64_t last_report_ms;
static unsigned long seed = 1;

/* Defined in runner.c for the test suite; this program is its own. */
const char* test_skip_reason;

void test_failed(const char* file, int line, const char* fmt, ...) {
  va_list ap;

  fflush(stdout);
  fprintf(stderr, "Assertion failed in %s on line %d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (seed %lu)\n", seed);
  fflush(stderr);
  printf("not ok 1 - stress_random\n");
  fflush(stdout);
  abort();
}


static unsigned rnd(producer_t* p) {
  /* xorshift64* */
  p->rng ^= p->rng >> 12;
  p->rng ^= p->rng << 25;
  p->rng ^= p->rng >> 27;
  return (unsigned) ((p->rng * 2685821657736338717ull) >> 33);
}


static int on_loop_thread(void) {
  return test_on_thread(loop_thread);
}


static long rss_kb(void) {
  FILE* f;
  long pages;
  long rss;

  f = fopen("/proc/self/statm", "r");
  if (f == NULL)
    return -1;
  if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
    rss = -1;
  fclose(f);
  return rss < 0 ? -1 : rss * (sysconf(_SC_PAGESIZE) / 1024);
}


/* ---- callbacks ---------------------------------------------------------- */

static void enter_run(slot_t* sl, int kidx) {
  int n;
  int m;

  if (sl->width == 1) {
    ASSERT_EQ(atomic_fetch_add(&sl->inflight, 1), 0);
  } else {
    n = atomic_fetch_add(&sl->inflight, 1) + 1;
    ASSERT_LE(n, sl->width);
    m = atomic_load(&sl->inflight_max);
    while (n > m && !atomic_compare_exchange_weak(&sl->inflight_max, &m, n)) {
    }
    if (kidx != 0) {
      ASSERT_EQ(atomic_fetch_add(&sl->key_inflight[kidx], 1), 0);
      atomic_fetch_add(&sl->keyed_runs, 1);
    }
  }
  ASSERT_EQ(on_loop_thread(), sl->where == UVS_LOOP);
}


#define RLX memory_order_relaxed

/* 0.4: a run of sl starts. Relaxed atomics only, here and below on the run
 * path: they order nothing, so TSan still sees what the library orders. A
 * value stored before a call that lets this run start is read, as that
 * store happens before the run. */
static void check_may_start(slot_t* sl) {
  int ph;

  if (atomic_load_explicit(&sl->susp_held, RLX) == 0 ||
      atomic_load_explicit(&closes_begin, RLX))
    return;
  ph = atomic_load_explicit(&sl->phase, RLX);
  if (ph != S_OPEN)
    return; /* a close began: it ends the suspension */
  if (atomic_fetch_sub_explicit(&sl->susp_slack, 1, RLX) <= 0)
    test_failed(__FILE__, __LINE__,
                "slot %d: a run started while suspended (held %d)",
                (int) (sl - slots), atomic_load(&sl->susp_held));
}


/* 0.4, wide workers: a run of owner's seq (-1: not ordered) starts; sets
 * *run_idx. */
static void barrier_enter(
    slot_t* sl, int owner, long seq, int barrier, long* run_idx) {
  if (sl->width == 1)
    return;
  *run_idx = atomic_fetch_add_explicit(&sl->run_ctr, 1, RLX);
  if (barrier) {
    /* Alone: nothing else of the worker runs, nothing starts until it
     * returns. */
    ASSERT_EQ(atomic_load(&sl->inflight), 1);
    ASSERT_EQ(atomic_load_explicit(&sl->barrier_running, RLX), 0);
    atomic_store_explicit(&sl->barrier_running, 1, RLX);
    atomic_store_explicit(&sl->bar_started[owner], seq, RLX);
    atomic_fetch_add_explicit(&sl->barriers_run, 1, RLX);
    return;
  }
  ASSERT_EQ(atomic_load_explicit(&sl->barrier_running, RLX), 0);
  if (seq < 0)
    return;
  /* Not before its producer's earlier barrier returned; not after its
   * producer's later barrier started. */
  ASSERT_LT(seq, atomic_load_explicit(&sl->bar_open[owner], RLX));
  ASSERT_GT(seq, atomic_load_explicit(&sl->bar_started[owner], RLX));
}


static void barrier_leave(slot_t* sl, int owner, int barrier) {
  if (!barrier)
    return;
  ASSERT_EQ(atomic_load(&sl->inflight), 1);
  atomic_store_explicit(&sl->bar_open[owner], LONG_MAX, RLX);
  atomic_store_explicit(&sl->barrier_running, 0, RLX);
}


static void leave_run(slot_t* sl, int kidx) {
  if (sl->width == 1) {
    ASSERT_EQ(atomic_fetch_sub(&sl->inflight, 1), 1);
    return;
  }
  if (kidx != 0)
    ASSERT_EQ(atomic_fetch_sub(&sl->key_inflight[kidx], 1), 1);
  ASSERT_GE(atomic_fetch_sub(&sl->inflight, 1), 1);
}


/* rerun: a run after a yield, which comes before anything queued behind
 * it: its producer's last ordered run on the worker (key) was its own. */
static void check_order(slot_t* sl, int owner, long seq, int kidx, int rerun) {
  if (seq < 0)
    return;
  if (sl->width == 1) {
    if (rerun)
      ASSERT_EQ(seq, sl->last_seq[owner]);
    else
      ASSERT_GT(seq, sl->last_seq[owner]);
    sl->last_seq[owner] = seq;
  } else if (kidx != 0) {
    /* Wide: per key; tasks without a key have no order to check here. */
    if (rerun)
      ASSERT_EQ(seq, sl->key_last_seq[owner][kidx]);
    else
      ASSERT_GT(seq, sl->key_last_seq[owner][kidx]);
    sl->key_last_seq[owner][kidx] = seq;
  }
}


/* 0.5: a run of t (NULL: a post) starts on sl, under key index kidx. A
 * task that yielded and waits keeps its worker's (key's) place: if
 * another starts first, the one waiting must never run again (it was
 * handed back: a cancel, an interrupt, a close or an eviction took it).
 * The fields are the worker's (key's) runs', one at a time. Keyless tasks
 * of a wide worker are not ordered here. */
static void check_yielded(slot_t* sl, stask_t* t, int kidx) {
  struct stask_s** y;
  long* yc;

  if (sl->width == 1) {
    y = &sl->yielded;
    yc = &sl->yielded_c;
  } else if (kidx != 0) {
    y = &sl->key_yielded[kidx];
    yc = &sl->key_yielded_c[kidx];
  } else {
    return;
  }
  if (*y != NULL && *y != t)
    atomic_store_explicit(&(*y)->overtaken_c, *yc, RLX);
  *y = NULL;
}


static void note_yielded(slot_t* sl, stask_t* t) {
  if (sl->width == 1) {
    sl->yielded = t;
    sl->yielded_c = t->custody;
  } else if (t->kidx != 0) {
    sl->key_yielded[t->kidx] = t;
    sl->key_yielded_c[t->kidx] = t->custody;
  }
}


/* 0.5: an answer of uvs_task_check in a run of t; *seen: UV_ECANCELED was
 * heard in this run already. */
static void check_answer(stask_t* t, slot_t* sl, int rc, int* seen) {
  if (rc == UV_EAGAIN) {
    atomic_fetch_add_explicit(&checks_eagain, 1, RLX);
  } else if (rc != 0) {
    ASSERT_ERR(rc, UV_ECANCELED);
    atomic_fetch_add_explicit(&checks_ecanceled, 1, RLX);
  }
  if (*seen)
    ASSERT_ERR(rc, UV_ECANCELED); /* never 0 again in this run */
  if (rc == UV_ECANCELED && !*seen) {
    *seen = 1;
    if (!atomic_load(&t->intr_req) && !atomic_load(&sl->cancel_closing) &&
        !atomic_load(&sched_cancel[sl->sched]))
      test_failed(__FILE__, __LINE__,
                  "UV_ECANCELED with no interrupt and no cancelling close "
                  "(slot %d)",
                  (int) (sl - slots));
  }
}


/* 0.5: a yield in a run of t, with the answer SPEC gives; a second one
 * changes nothing. Returns whether it yielded. */
static int coop_yield(stask_t* t, int cannot) {
  int err;

  err = uvs_task_yield(&t->task);
  ASSERT_ERR(err, cannot ? UV_EINVAL : 0);
  if (err != 0)
    return 0;
  ASSERT_OK(uvs_task_yield(&t->task));
  t->yields++;
  atomic_fetch_add(&yields_total, 1);
  /* Its next STARTED is owed to the yield. */
  atomic_fetch_add(&t->h_credit, 1);
  return 1;
}


/* 0.5: what a run of t does to cooperate. intr0: its owner's interrupt
 * had returned 0 when the run began. Returns whether it yielded. */
static int coop_run(stask_t* t, slot_t* sl, int barrier, int intr0) {
  stask_t* other;
  int cannot;
  int seen;
  int rc;
  int i;

  other = &prods[t->owner].tasks[(t - prods[t->owner].tasks + 1) % NTASK];
  ASSERT_ERR(uvs_task_check(&other->task), UV_EINVAL);
  seen = 0;
  rc = uvs_task_check(&t->task);
  check_answer(t, sl, rc, &seen);
  /* It began after an interrupt returned 0: the interrupt reached it
   * running, or it must not run. */
  if (intr0 && t->depth == 0)
    ASSERT_ERR(rc, UV_ECANCELED);
  cannot = t->kind == K_EVERY || barrier;
  switch (t->coop) {
    case C_YIELD:
      if (t->yields < t->yields_max || cannot)
        return coop_yield(t, cannot);
      return 0;
    case C_CHECK:
      for (i = 0; i < 4; i++) {
        rc = uvs_task_check(&t->task);
        check_answer(t, sl, rc, &seen);
        if (rc == UV_ECANCELED)
          return 0;
        if (rc == UV_EAGAIN && t->yields < 8)
          return coop_yield(t, cannot);
        test_spin_us(10);
      }
      return 0;
    case C_INTR:
      atomic_store(&t->intr_req, 1);
      atomic_store(&t->cancel_tried, 1);
      rc = uvs_task_interrupt(&t->task);
      /* Its owner's cancel or interrupt may have come first. */
      if (rc != 0)
        ASSERT_ERR(rc, UV_EBUSY);
      ASSERT_ERR(uvs_task_interrupt(&t->task), UV_EBUSY);
      rc = uvs_task_check(&t->task);
      if (t->kind != K_EVERY)
        ASSERT_ERR(rc, UV_ECANCELED); /* one-shot: interrupted, one way */
      check_answer(t, sl, rc, &seen);
      if (t->kind == K_EVERY || !coop_yield(t, cannot))
        return 0;
      t->intr_self = 1; /* handed back with UV_ECANCELED, not run again */
      return 1;
    default:
      return 0;
  }
}


static void run_cb(uvs_task_t* task) {
  stask_t* t;
  slot_t* sl;
  uint64_t bound;
  uint64_t now;
  uint64_t r;
  int regrid;
  int barrier;
  int rerun;
  int yielded;
  int intr0;
  int saved_runs;
  int saved_yields;
  int err;

  t = TEST_CONTAINER_OF(task, stask_t, task);
  ASSERT_PTR_EQ(uvs_current_task(), task);
  intr0 = atomic_load(&t->intr_done);
  sl = &slots[t->slot];
  barrier = t->barrier;
  rerun = t->kind != K_EVERY && t->yields > 0;
  if (hooked[sl->sched]) {
    /* STARTED came right before, on this thread. */
    ASSERT_PTR_EQ(tl_started, t);
    tl_started = NULL;
    tl_running = t;
  }
  enter_run(sl, t->kidx);
  check_may_start(sl);
  barrier_enter(sl, t->owner, t->seq, barrier, &t->run_idx);
  check_order(sl, t->owner, t->seq, t->kidx, rerun);
  check_yielded(sl, t, t->kidx);
  /* 0.5: not after another task of its worker (key) overtook it waiting,
   * not after it surely waited past its expiry, not after it interrupted
   * itself and yielded. */
  if (atomic_load_explicit(&t->overtaken_c, RLX) == t->custody)
    test_failed(__FILE__, __LINE__,
                "slot %d: a task that yielded ran again after another task "
                "of its %s started",
                t->slot, sl->width == 1 ? "worker" : "key");
  if (atomic_load(&t->doomed_c) == t->custody)
    test_failed(__FILE__, __LINE__,
                "slot %d: a task that waited past its expiry started", t->slot);
  ASSERT(!t->intr_self);
  now = uv_hrtime();
  uv_mutex_lock(&t->blk);
  bound = t->after_bound;
  regrid = t->regrid;
  uv_mutex_unlock(&t->blk);
  if (t->kind == K_AFTER)
    ASSERT_UINT64_GE(now, bound);
  else if (t->kind == K_EVERY && !regrid)
    ASSERT_UINT64_GE(
        now,
        t->t_call + (t->delay + (uint64_t) t->runs * t->period) * 1000000u);
  t->runs++;
  if (t->kind != K_EVERY)
    ASSERT_EQ(t->runs, t->yields + 1);

  r = (now >> 4) * 2654435761u;
  if ((r >> 8) % 64 == 0)
    test_spin_us(50 + (r >> 16) % 200); /* a long task: work piles up */

  yielded = t->coop != C_NONE && coop_run(t, sl, barrier, intr0);
  if (yielded) {
    /* It can't be scheduled again in this run. */
    if ((r >> 20) % 12 == 0) {
      err = uvs_schedule(&sl->worker, task);
      if (err != UV_ESHUTDOWN) /* a closing worker answers that first */
        ASSERT_ERR(err, UV_EBUSY);
    }
  } else if (t->kind == K_EVERY) {
    if ((r >> 20) % 16 == 0) {
      err = uvs_schedule(&sl->worker, task);
      if (err != UV_ESHUTDOWN)
        ASSERT_ERR(err, UV_EBUSY);
    }
  } else if ((r >> 20) % 12 == 0 && t->depth < 8 && !barrier) {
    /* Again from its own run_cb: this run hands nothing back. The new
     * custody's fields are set before the call: on a wide worker a keyless
     * task may start on another lane before it returns. */
    saved_runs = t->runs;
    saved_yields = t->yields;
    t->depth++;
    t->seq = -1;
    t->runs = 0;
    t->custody++;
    t->yields = 0;
    t->coop = C_NONE; /* none planned in it */
    t->intr_self = 0;
    t->kind = (r >> 24) & 1 ? K_AFTER : K_NOW;
    t->delay = (r >> 25) % 3;
    t->t_call = uv_hrtime();
    uv_mutex_lock(&t->blk);
    t->after_bound = t->t_call + t->delay * 1000000u;
    uv_mutex_unlock(&t->blk);
    if (t->kind == K_AFTER)
      err = uvs_schedule_after(&sl->worker, task, t->delay);
    else
      err = uvs_schedule(&sl->worker, task);
    if (err == 0) {
      atomic_fetch_add(&self_accepts, 1);
      ASSERT_ERR(uvs_task_yield(task), UV_EBUSY); /* 0.5: in a new custody */
    } else {
      /* A bounded key may be full (K_NOW onto REJECT or BLOCK). */
      if (err != UV_EAGAIN || t->kind != K_NOW || t->kidx == 0 ||
          sl->key_max == 0 || sl->on_full == UVS_FULL_DROP_OLDEST)
        ASSERT_ERR(err, UV_ESHUTDOWN);
      /* Not accepted: this run hands the task back with 0, after the
       * runs of its custody (0.5: its yields') and this one. */
      t->runs = saved_runs;
      t->yields = saved_yields;
      t->custody--;
      t->kind = K_NOW;
    }
  }
  atomic_fetch_add(&task_runs, 1);
  if (yielded)
    note_yielded(sl, t);
  ASSERT_PTR_EQ(uvs_current_task(), task);
  barrier_leave(sl, t->owner, barrier);
  leave_run(sl, t->kidx);
  if (hooked[sl->sched]) {
    tl_running = NULL;
    tl_ended = t; /* ENDED comes right after, on this thread */
  }
}


static void done_cb(uvs_task_t* task, int status) {
  stask_t* t;
  slot_t* sl;
  int st;

  ASSERT(on_loop_thread());
  t = TEST_CONTAINER_OF(task, stask_t, task);
  sl = &slots[t->slot];
  ASSERT_NULL(uvs_current_task());
  ASSERT_ERR(uvs_task_check(task), UV_EINVAL);
  if (hooked[sl->sched]) {
    /* Its HANDED_BACK came right before, with this status. */
    ASSERT_PTR_EQ(h_expect, t);
    ASSERT_ERR(status, h_expect_status);
    h_expect = NULL;
  }
  if (sl->width > 1 && status == 0) {
    /* Barriers: done_cb(..., 0) in run order around them. */
    if (t->barrier) {
      ASSERT_LT(sl->max_done_run, t->run_idx);
      sl->bar_done_run = t->run_idx;
    } else {
      ASSERT_GT(t->run_idx, sl->bar_done_run);
    }
    if (t->run_idx > sl->max_done_run)
      sl->max_done_run = t->run_idx;
  }
  if (t->barrier && status != 0) {
    /* Dropped by a close: none of its producer's later ones runs now. */
    long seq = t->seq;
    atomic_compare_exchange_strong(&sl->bar_open[t->owner], &seq, LONG_MAX);
  }
  /* An ordered task that never ran and that nobody cancelled: a close
   * handed it back, so nothing its producer scheduled after it may run on
   * this worker (see check_close_prefix); on a wide worker, nothing of
   * its key. */
  if (status == UV_ECANCELED && t->kind == K_NOW && t->seq >= 0 &&
      !atomic_load(&t->cancel_tried)) {
    if (sl->width == 1) {
      if (t->seq < sl->close_cut[t->owner])
        sl->close_cut[t->owner] = t->seq;
    } else if (t->kidx != 0) {
      if (t->seq < sl->key_close_cut[t->owner][t->kidx])
        sl->key_close_cut[t->owner][t->kidx] = t->seq;
    }
  }
  /* done_cb(..., 0) in run order: per producer on a serial worker, per
   * producer and key on a wide one. */
  if (status == 0 && t->kind == K_NOW && t->seq >= 0 &&
      (sl->width == 1 || t->kidx != 0)) {
    int k = sl->width == 1 ? 0 : t->kidx;
    ASSERT_GT(t->seq, sl->done_seq[t->owner][k]);
    sl->done_seq[t->owner][k] = t->seq;
  }
  if (status == UV_ENOBUFS) {
    /* Evicted for a full key (DROP_OLDEST), or a delayed one-shot task
     * that fell due onto a full key (REJECT, BLOCK); never after a run.
     * (A periodic task so evicted breaks guarantee 3; test-keybound.c pins
     * that, and it is let through here.) */
    ASSERT(sl->key_max != 0);
    ASSERT(sl->on_full == UVS_FULL_DROP_OLDEST || t->kind == K_AFTER);
    /* 0.5: waiting after a yield, it is queued, and may be evicted. */
    ASSERT(t->kind == K_EVERY || t->runs == t->yields);
    dones_enobufs++;
  } else if (t->kind == K_EVERY) {
    ASSERT_ERR(status, UV_ECANCELED);
  } else if (status == 0) {
    /* 0.5: a run per yield, and the one that returned for good. */
    ASSERT_EQ(t->runs, t->yields + 1);
    ASSERT(!t->intr_self);
    ASSERT(atomic_load(&t->overtaken_c) != t->custody);
  } else if (status == UV_ETIMEDOUT) {
    /* 0.5: shed by its expiry (no worker here has max_wait_ms); never once
     * it started. */
    ASSERT_NE(t->expiry, 0);
    ASSERT_EQ(t->runs, 0);
    dones_expired++;
  } else {
    ASSERT_ERR(status, UV_ECANCELED);
    ASSERT_EQ(t->runs, t->yields);
  }
  if (atomic_load(&t->doomed_c) == t->custody) {
    ASSERT_NE(status, 0);
    if (status == UV_ETIMEDOUT)
      doomed_shed++;
  }
  if (status == 0)
    dones_ok++;
  else
    dones_cancelled++;
  t->status = status;
  atomic_fetch_add(&t->dones, 1);
  /* Handed back once: only a submitted or accepted task can come back. The
   * producer may move SUBMIT to CUSTODY just now (its schedule call has
   * returned, the task already ran): try again on the value it wrote. */
  st = atomic_load(&t->state);
  do ASSERT(st == T_SUBMIT || st == T_CUSTODY);
  while (!atomic_compare_exchange_strong(&t->state, &st, T_RETURNED));
}


static void key_space_cb(uvs_worker_t* w, uint64_t key) {
  slot_t* sl;
  int k;

  ASSERT(on_loop_thread());
  sl = TEST_CONTAINER_OF(w, slot_t, worker);
  ASSERT(sl >= slots && sl < slots + NSLOTS);
  ASSERT_GT(sl->width, 1);
  ASSERT_NE(sl->key_max, 0);
  for (k = 1; k < NKEY && key_values[k] != key; k++) {
  }
  ASSERT_LT(k, NKEY);
  atomic_fetch_add(&sl->key_space_calls, 1);
}


static void post_fn(void* arg) {
  uintptr_t v;
  slot_t* sl;
  int owner;
  long seq;
  long run_idx;

  v = (uintptr_t) arg;
  owner = (int) (v & 0xff);
  sl = &slots[(v >> 8) & 0xff];
  seq = (long) (v >> 16);
  ASSERT_NULL(uvs_current_task());
  enter_run(sl, 0);
  check_may_start(sl);
  barrier_enter(sl, owner, seq, 0, &run_idx);
  check_order(sl, owner, seq, 0, 0);
  check_yielded(sl, NULL, 0);
  atomic_fetch_add(&post_runs, 1);
  atomic_fetch_add_explicit(&post_runs_s[sl->sched], 1, RLX);
  leave_run(sl, 0);
}


/* 0.5: the race worker's callbacks. Its tasks run only while a burst
 * drains (the worker is suspended while it fills), or once the closes
 * began. */
static race_t* race_of(uvs_worker_t* w) {
  int i;

  for (i = 0; i < NSCHED; i++)
    if (w == &races[i].worker)
      return &races[i];
  return NULL;
}


static void race_run(uvs_task_t* task) {
  rtask_t* t;
  race_t* r;

  t = TEST_CONTAINER_OF(task, rtask_t, task);
  r = &races[t->sched];
  if (!atomic_load_explicit(&closes_begin, RLX))
    ASSERT_EQ(atomic_load_explicit(&r->phase, RLX), R_DRAIN);
  atomic_fetch_add_explicit(&r->runs, 1, RLX);
  atomic_fetch_add_explicit(&r->all_runs, 1, RLX);
}


static void race_done(uvs_task_t* task, int status) {
  rtask_t* t;
  race_t* r;

  ASSERT(on_loop_thread());
  t = TEST_CONTAINER_OF(task, rtask_t, task);
  r = &races[t->sched];
  ASSERT_EQ(atomic_load(&t->busy), 1);
  r->dones++;
  r->total_dones++;
  if (status == UV_ENOBUFS) {
    r->enobufs++;
  } else if (status != 0) {
    ASSERT_ERR(status, UV_ECANCELED); /* a close */
    ASSERT(atomic_load(&closes_begin));
    r->others++;
  }
  if (status != 0)
    r->total_nonzero++;
  atomic_store(&t->busy, 0);
}


/* The hook on a race worker: ACCEPTED spins a little, with the task
 * counted in under its key and not filed yet. */
static void race_hook(uvs_event_t ev) {
  if (ev == UVS_EV_ACCEPTED)
    test_spin_us(20);
}


/* A producer schedules 1 to 3 tasks onto a scheduler's race worker while
 * a burst fills it. */
static void op_race(producer_t* p, int pi) {
  rtask_t* t;
  race_t* r;
  unsigned n;
  unsigned i;
  unsigned v;
  int err;

  v = rnd(p);
  r = &races[v % NSCHED];
  n = 1 + (v >> 8) % 3;
  atomic_fetch_add(&r->inflight, 1);
  for (i = 0; i < RACE_TASKS && n > 0; i++) {
    if (atomic_load(&r->phase) != R_BURST)
      break;
    t = &rtasks[pi][v % NSCHED][i];
    if (atomic_load(&t->busy))
      continue;
    atomic_store(&t->busy, 1);
    err = uvs_schedule(&r->worker, &t->task);
    if (err == 0) {
      atomic_fetch_add(&r->accepted, 1);
      atomic_fetch_add(&r->all_acc, 1);
    } else {
      /* DROP_OLDEST takes every task until a close. */
      ASSERT(atomic_load(&closes_begin));
      ASSERT_ERR(err, UV_ESHUTDOWN);
      atomic_store(&t->busy, 0);
    }
    n--;
  }
  atomic_fetch_sub(&r->inflight, 1);
}


/* Loop thread, each tick: a burst that has filled long enough ends once
 * no call is in flight, and its queue is measured; a burst whose tasks all
 * came back is checked, and the next begins. */
static void race_tick(race_t* r, uint64_t now) {
  uvs_worker_metrics_t m;
  long runs;

  if (atomic_load(&r->phase) == R_BURST) {
    if (now < r->burst_end)
      return;
    atomic_store(&r->phase, R_DRAIN);
    while (atomic_load(&r->inflight) != 0) uv_sleep(0);
    r->acc = atomic_load(&r->accepted);
    ASSERT_OK(uvs_worker_metrics(&r->worker, &m));
    /* Nothing started, no call in flight: queued is the key's queue. */
    if (m.queued > (uint64_t) r->key_max)
      test_failed(__FILE__, __LINE__,
                  "race worker: %" PRIu64
                  " tasks of one key queued, "
                  "key_max_pending %d (burst %ld, %ld accepted)",
                  m.queued, r->key_max, r->bursts, r->acc);
    ASSERT_UINT64_EQ(m.queued,
                     (uint64_t) (r->acc < r->key_max ? r->acc : r->key_max));
    ASSERT_OK(uvs_worker_resume(&r->worker));
    return;
  }
  if (atomic_load(&r->phase) != R_DRAIN || r->dones != r->acc)
    return;
  runs = atomic_load(&r->runs);
  ASSERT_EQ(runs, r->acc < r->key_max ? r->acc : r->key_max);
  ASSERT_EQ(r->enobufs, r->acc - runs);
  ASSERT_EQ(r->others, 0);
  r->bursts++;
  r->dones = r->enobufs = r->others = 0;
  atomic_store(&r->accepted, 0);
  atomic_store(&r->runs, 0);
  ASSERT_OK(uvs_worker_suspend(&r->worker));
  r->burst_end = now + RACE_BURST_MS;
  atomic_store(&r->phase, R_BURST);
}


/* 0.4: the hook of a scheduler (arg), checking each task's events in
 * order with atomics (per task: its own events are ordered by the library;
 * posts: relaxed counters). */
static void hook(
    uvs_worker_t* w, uvs_task_t* task, uvs_event_t ev, int status, void* arg) {
  slot_t* sl;
  stask_t* t;
  int si;
  int st;

  si = (int) ((uvs_sched_t*) arg - scheds);
  ASSERT(si >= 0 && si < NSCHED && hooked[si]);
  if (race_of(w) != NULL) {
    race_hook(ev);
    return;
  }
  sl = TEST_CONTAINER_OF(w, slot_t, worker);
  ASSERT(sl >= slots && sl < slots + NSLOTS);
  ASSERT_EQ(sl->sched, si);
  if (ev != UVS_EV_HANDED_BACK)
    ASSERT_OK(status);
  if (task == NULL && ev == UVS_EV_ACCEPTED)
    ASSERT_NULL(uvs_current_task()); /* posts come from producers only */
  if (task == NULL) {
    switch (ev) {
      case UVS_EV_ACCEPTED:
        atomic_fetch_add_explicit(&h_post_acc[si], 1, RLX);
        break;
      case UVS_EV_STARTED:
        atomic_fetch_add_explicit(&h_post_started[si], 1, RLX);
        break;
      case UVS_EV_ENDED:
        atomic_fetch_add_explicit(&h_post_ended[si], 1, RLX);
        break;
      default:
        ASSERT_EQ(ev, UVS_EV_HANDED_BACK);
        ASSERT(on_loop_thread());
        /* Dropped by a close: no worker here sheds (none has max_wait_ms,
         * and a post has no expiry of its own), none bounds its posts. */
        ASSERT_ERR(status, UV_ECANCELED);
        ASSERT_NULL(h_expect);
        atomic_fetch_add_explicit(&h_post_dropped[si], 1, RLX);
        break;
    }
    return;
  }
  t = TEST_CONTAINER_OF(task, stask_t, task);
  ASSERT(t->owner >= 0 && t->owner < NPROD);
  ASSERT(t >= prods[t->owner].tasks && t < prods[t->owner].tasks + NTASK);
  /* 0.5: a task schedules only itself from its run_cb; the producers
   * schedule from no run_cb. */
  if (ev == UVS_EV_ACCEPTED && uvs_current_task() != NULL)
    ASSERT_PTR_EQ(uvs_current_task(), task);
  ASSERT_PTR_EQ(&slots[t->slot], sl);
  switch (ev) {
    case UVS_EV_ACCEPTED:
      if (tl_running == t) {
        /* Again from its own run_cb: still in custody. */
        ASSERT_EQ(atomic_load(&t->h_held), 1);
      } else {
        st = 0;
        if (!atomic_compare_exchange_strong(&t->h_held, &st, 1))
          test_failed(__FILE__, __LINE__, "ACCEPTED while in custody");
        ASSERT_EQ(atomic_load(&t->h_running), 0);
      }
      atomic_fetch_add(&t->h_credit, 1);
      atomic_fetch_add(&t->h_accepts, 1);
      break;
    case UVS_EV_STARTED:
      ASSERT_EQ(atomic_load(&t->h_held), 1);
      if (t->kind != K_EVERY) {
        /* One run per acceptance. */
        ASSERT_GE(atomic_fetch_sub(&t->h_credit, 1), 1);
      } else if (atomic_load(&t->h_running) != 0) {
        test_failed(__FILE__, __LINE__,
                    "STARTED of a periodic task while it runs (slot %d)",
                    t->slot);
      }
      atomic_fetch_add(&t->h_running, 1);
      ASSERT_NULL(tl_started);
      tl_started = t;
      break;
    case UVS_EV_ENDED:
      /* Right after its run_cb returned, on that thread. */
      ASSERT_PTR_EQ(tl_ended, t);
      tl_ended = NULL;
      ASSERT_GE(atomic_fetch_sub(&t->h_running, 1), 1);
      break;
    default:
      ASSERT_EQ(ev, UVS_EV_HANDED_BACK);
      ASSERT(on_loop_thread());
      /* After its last ENDED. */
      if (atomic_load(&t->h_running) != 0)
        test_failed(__FILE__, __LINE__,
                    "HANDED_BACK before the last ENDED (slot %d, key index "
                    "%d, depth %d)",
                    t->slot, t->kidx, t->depth);
      st = 1;
      if (!atomic_compare_exchange_strong(&t->h_held, &st, 0))
        test_failed(__FILE__, __LINE__, "HANDED_BACK out of custody");
      ASSERT_NULL(h_expect);
      h_expect = t;
      h_expect_status = status;
      atomic_store(&t->h_credit, 0);
      break;
  }
}


/* Every task of the worker has been handed back and no run callback of it
 * executes: the runs of each producer's ordered tasks and posts stop before
 * the first ordered task that the close handed back. */
static void check_close_prefix(slot_t* sl) {
  int i;
  int k;

  for (i = 0; i < NPROD; i++) {
    for (k = 1; k < NKEY; k++) {
      if (sl->key_close_cut[i][k] != LONG_MAX &&
          sl->key_last_seq[i][k] > sl->key_close_cut[i][k])
        test_failed(__FILE__, __LINE__,
                    "slot %d, producer %d, key %d: seq %ld ran after a close "
                    "handed back seq %ld",
                    (int) (sl - slots), i, k, sl->key_last_seq[i][k],
                    sl->key_close_cut[i][k]);
      sl->key_close_cut[i][k] = LONG_MAX;
    }
    if (sl->close_cut[i] != LONG_MAX && sl->last_seq[i] > sl->close_cut[i])
      test_failed(__FILE__, __LINE__,
                  "slot %d, producer %d: seq %ld ran after a close handed "
                  "back seq %ld",
                  (int) (sl - slots), i, sl->last_seq[i], sl->close_cut[i]);
    sl->close_cut[i] = LONG_MAX;
  }
}


static void worker_close_cb(uvs_worker_t* w) {
  slot_t* sl;
  int ph;

  ASSERT(on_loop_thread());
  sl = TEST_CONTAINER_OF(w, slot_t, worker);
  ASSERT_EQ(atomic_load(&sl->inflight), 0);
  check_close_prefix(sl);
  ph = atomic_load(&sl->phase);
  ASSERT(ph == S_CLAIMED || ph == S_CLOSING);
  atomic_store(&sl->closed_at, test_hrtime_ms());
  sl->bar_done_run = sl->max_done_run = -1; /* a new incarnation next */
  atomic_fetch_add(&sl->closes, 1);
  atomic_store(&sl->phase, S_CLOSED);
}


static void sched_close_cb(uvs_sched_t* s) {
  int i;
  int j;

  i = (int) (s - scheds);
  uvs_sched_stats(s, &final_stats[i]);
  for (j = 0; j < NSLOTS; j++)
    if (slots[j].sched == i)
      check_close_prefix(&slots[j]);
  if (++scheds_closed < NSCHED)
    return;
  /* The foreign producers kept calling through both closes (every call
   * after them answered UV_ESHUTDOWN, UV_EINVAL or UV_EBUSY as SPEC says);
   * they never wait for the loop, so they stop promptly. */
  atomic_store(&stop, 1);
  for (i = 0; i < NFOREIGN; i++) ASSERT_OK(uv_thread_join(&threads[i]));
}


/* ---- producers ---------------------------------------------------------- */

/* A task of p that is not in custody, checked and made free; or NULL. */
static stask_t* get_task(producer_t* p) {
  stask_t* t;
  unsigned i;
  int st;

  for (i = 0; i < 16; i++) {
    t = &p->tasks[p->cursor++ % NTASK];
    st = atomic_load(&t->state);
    if (st == T_RETURNED) {
      ASSERT_EQ(atomic_load(&t->dones), t->accepts);
      if (t->cancel_ok && t->kind != K_EVERY)
        ASSERT_ERR(t->status, UV_ECANCELED);
      if (t->pkind == K_EVERY)
        p->periodic_live--;
      atomic_store(&t->state, T_FREE);
      st = T_FREE;
    }
    if (st == T_FREE)
      return t;
  }
  return NULL;
}


static void check_shutdown(producer_t* p, int phase, int err) {
  /* A close that returned before this call: UV_ESHUTDOWN, always. */
  if (phase == S_CLOSING || phase == S_CLOSED || phase == S_SCHED_CLOSED)
    ASSERT_ERR(err, UV_ESHUTDOWN);
  else if (err != 0)
    ASSERT_ERR(err, UV_ESHUTDOWN);
  if (err == UV_ESHUTDOWN)
    p->shutdowns++;
}


/* barrier: uvs_schedule_barrier onto a wide worker (kind K_NOW). Returns
 * the task if it was accepted. */
static stask_t* op_schedule(producer_t* p, int pi, int kind, int barrier) {
  stask_t* t;
  slot_t* sl;
  unsigned r;
  unsigned c;
  long h0;
  int phase;
  int err;
  int st;

  if (kind == K_EVERY && p->periodic_live >= MAX_PERIODIC)
    kind = K_AFTER;
  r = rnd(p);
  if (barrier) {
    stask_t* b;

    r = (r - r % NSLOTS) + (r % NSCHED) * NSLOT + WIDE_SLOT;
    /* One barrier of a producer on a worker at a time. */
    b = p->bar_task[r % NSLOTS];
    if (b != NULL && b->barrier && atomic_load(&b->state) != T_RETURNED &&
        atomic_load(&b->state) != T_FREE)
      return NULL;
  }
  t = get_task(p);
  if (t == NULL)
    return NULL;
  if (p->force_slot >= 0)
    r = r - r % NSLOTS + (unsigned) p->force_slot;
  t->slot = (int) (r % NSLOTS);
  sl = &slots[t->slot];
  /* A key on every worker: on a serial one it changes nothing, and a
   * barrier has none whatever its task's key. */
  t->kidx = (int) (rnd(p) % 10);
  t->kidx = t->kidx < NKEY - 1 ? t->kidx + 1 : 0;
  ASSERT_OK(uvs_task_set_key(&t->task, key_values[t->kidx]));
  if (barrier)
    t->kidx = 0;
  t->barrier = barrier;
  /* 0.5: its expiry (it stays set: every schedule sets its own), how its
   * runs cooperate, and a new custody. */
  c = rnd(p);
  t->expiry = p->force_slot >= 0 ? p->force_expiry
              : c % 32 == 0      ? 1 + (c >> 5) % 3
                                 : 0;
  if (barrier)
    t->expiry = 0; /* shed, it would let later tasks go before its done_cb
                    * told the test */
  ASSERT_OK(uvs_task_set_expiry(&t->task, t->expiry));
  c = (c >> 8) % 24;
  t->coop = c < 2 ? C_YIELD : c < 4 ? C_CHECK : c == 4 ? C_INTR : C_NONE;
  t->yields_max = 1 + (int) (c & 1);
  t->yields = 0;
  t->intr_ok = 0;
  t->intr_self = 0;
  atomic_store(&t->intr_req, 0);
  atomic_store(&t->intr_done, 0);
  t->custody++;
  h0 = atomic_load(&t->h_accepts);
  uv_rwlock_rdlock(&sl->lock);
  t->gen = sl->gen;
  phase =
      atomic_load(&scheds_closing) ? S_SCHED_CLOSED : atomic_load(&sl->phase);
  t->kind = kind;
  t->pkind = kind;
  t->seq = kind == K_NOW ? sl->next_seq[pi]++ : -1;
  t->delay = (r >> 8) % (kind == K_EVERY ? 8 : 20);
  t->period = 1 + (r >> 16) % 8;
  t->runs = 0;
  t->cancel_ok = 0;
  atomic_store(&t->cancel_tried, 0);
  t->depth = 0;
  t->status = 1;
  atomic_store(&t->state, T_SUBMIT);
  t->t_call = uv_hrtime();
  uv_mutex_lock(&t->blk);
  t->after_bound = t->t_call + t->delay * 1000000u;
  t->regrid = 0;
  uv_mutex_unlock(&t->blk);
  if (barrier) {
    /* Its producer's later tasks wait for it from now. */
    atomic_store_explicit(&sl->bar_open[pi], t->seq, RLX);
    p->bar_task[t->slot] = t;
    err = uvs_schedule_barrier(&sl->worker, &t->task);
    if (err != 0)
      atomic_store_explicit(&sl->bar_open[pi], LONG_MAX, RLX);
    else
      p->barriers_ok++;
  } else if (kind == K_NOW && sl->key_max != 0 &&
             sl->on_full == UVS_FULL_BLOCK && (r >> 28) & 1)
    err = uvs_schedule_wait(&sl->worker, &t->task, 2);
  else if (kind == K_NOW)
    err = uvs_schedule(&sl->worker, &t->task);
  else if (kind == K_AFTER)
    err = uvs_schedule_after(&sl->worker, &t->task, t->delay);
  else
    err = uvs_schedule_every(&sl->worker, &t->task, t->delay, t->period);
  t->t_return = uv_hrtime();
  if ((err == UV_EAGAIN || err == UV_ETIMEDOUT) && kind == K_NOW &&
      t->kidx != 0 && sl->key_max != 0 && sl->on_full != UVS_FULL_DROP_OLDEST) {
    /* The task's key is full: nothing accepted. UV_ETIMEDOUT only from a
     * wait, which blocks foreign threads only. */
    if (err == UV_ETIMEDOUT)
      ASSERT(sl->on_full == UVS_FULL_BLOCK && !on_loop_thread());
    p->full_answers++;
  } else {
    check_shutdown(p, phase, err);
  }
  if (hooked[sl->sched]) {
    /* One ACCEPTED before the call returned (more if it ran and scheduled
     * itself again already), none for a call that failed. */
    if (err == 0)
      ASSERT_GT(atomic_load(&t->h_accepts), h0);
    else
      ASSERT_EQ(atomic_load(&t->h_accepts), h0);
  }
  if (err == 0) {
    t->accepts++;
    t->ever_accepted = 1;
    p->task_accepts++;
    if (kind == K_EVERY)
      p->periodic_live++;
    st = T_SUBMIT;
    /* It may be handed back already (T_RETURNED). */
    atomic_compare_exchange_strong(&t->state, &st, T_CUSTODY);
  } else {
    /* Rejected: never handed back. */
    ASSERT_EQ(atomic_load(&t->state), T_SUBMIT);
    atomic_store(&t->state, T_FREE);
  }
  uv_rwlock_rdunlock(&sl->lock);
  return err == 0 ? t : NULL;
}


static void op_post(producer_t* p, int pi) {
  slot_t* sl;
  unsigned r;
  long seq;
  int si;
  int phase;
  int err;

  r = rnd(p);
  si = (int) (r % NSLOTS);
  sl = &slots[si];
  if ((p->ops & 255) == 0) {
    uvs_stats_t st;
    uvs_sched_stats(&scheds[sl->sched], &st);
    if (st.pending > POST_PENDING_MAX)
      return;
  }
  uv_rwlock_rdlock(&sl->lock);
  phase =
      atomic_load(&scheds_closing) ? S_SCHED_CLOSED : atomic_load(&sl->phase);
  seq = sl->next_seq[pi]++;
  err = uvs_post(&sl->worker, post_fn,
                 (void*) (uintptr_t) (((uintptr_t) seq << 16) |
                                      ((uintptr_t) si << 8) | (uintptr_t) pi));
  check_shutdown(p, phase, err);
  if (err == 0) {
    p->post_accepts++;
    p->post_accepts_s[sl->sched]++;
  }
  uv_rwlock_rdunlock(&sl->lock);
}


static void op_cancel(producer_t* p, stask_t* t) {
  slot_t* sl;
  int st;
  int err;

  /* Barriers are not cancelled here: a cancel that answered 0 would let
   * later tasks start before the test could know it. */
  if (t->barrier)
    return;
  /* Holding the slot's read lock keeps the worker from being re-created
   * while the cancel may still look at it (see docs/reliability.md). */
  sl = &slots[t->slot];
  uv_rwlock_rdlock(&sl->lock);
  st = atomic_load(&t->state);
  atomic_store(&t->cancel_tried, 1);
  err = uvs_task_cancel(&t->task);
  if (st == T_FREE) {
    ASSERT_ERR(err, t->ever_accepted ? UV_EBUSY : UV_EINVAL);
  } else if (st == T_RETURNED) {
    ASSERT_ERR(err, UV_EBUSY);
  } else if (err == 0) {
    t->cancel_ok = 1;
    p->cancels_ok++;
  } else {
    ASSERT_ERR(err, UV_EBUSY);
  }
  uv_rwlock_rdunlock(&sl->lock);
}


/* 0.5: uvs_task_interrupt, as cancel for a task out of custody; 0 or
 * UV_EBUSY in it (0: cancelled, or it reached the running run). */
static void op_interrupt(producer_t* p, stask_t* t) {
  slot_t* sl;
  int st;
  int err;

  if (t->barrier)
    return; /* as op_cancel */
  sl = &slots[t->slot];
  uv_rwlock_rdlock(&sl->lock);
  st = atomic_load(&t->state);
  atomic_store(&t->cancel_tried, 1);
  atomic_store(&t->intr_req, 1);
  err = uvs_task_interrupt(&t->task);
  if (st == T_FREE) {
    ASSERT_ERR(err, t->ever_accepted ? UV_EBUSY : UV_EINVAL);
  } else if (st == T_RETURNED) {
    ASSERT_ERR(err, UV_EBUSY);
  } else if (err == 0) {
    t->intr_ok = 1;
    atomic_store(&t->intr_done, 1);
    p->interrupts_ok++;
  } else {
    ASSERT_ERR(err, UV_EBUSY);
  }
  uv_rwlock_rdunlock(&sl->lock);
}


static void op_cancel_periodic(producer_t* p) {
  unsigned i;
  stask_t* t;

  for (i = 0; i < NTASK; i++) {
    t = &p->tasks[(p->cursor + i) % NTASK];
    if (t->pkind == K_EVERY && atomic_load(&t->state) == T_CUSTODY) {
      op_cancel(p, t);
      return;
    }
  }
}


/* 0.3: re-arms any task of the producer's, in custody or not. */
static void op_reschedule(producer_t* p) {
  stask_t* t;
  slot_t* sl;
  uint64_t t_call;
  uint64_t delay;
  unsigned r;
  int phase;
  int st;
  int err;

  r = rnd(p);
  t = &p->tasks[r % NTASK];
  delay = (r >> 8) % 64 == 0 ? ((uint64_t) 1 << 40) + 1 : (r >> 14) % 12;
  /* The slot's read lock keeps its worker from being re-created while the
   * call may still look at it (as for cancel). */
  sl = &slots[t->slot];
  uv_rwlock_rdlock(&sl->lock);
  st = atomic_load(&t->state);
  phase =
      atomic_load(&scheds_closing) ? S_SCHED_CLOSED : atomic_load(&sl->phase);
  /* The bound is set under blk with the call, so that a run reads it
   * before the call or after its answer is known. */
  uv_mutex_lock(&t->blk);
  t_call = uv_hrtime();
  err = uvs_task_reschedule(&t->task, delay);
  if (err == 0) {
    t->after_bound = t_call + delay * 1000000u;
    t->regrid = 1;
  }
  uv_mutex_unlock(&t->blk);
  if (delay > ((uint64_t) 1 << 40) || (st == T_FREE && !t->ever_accepted)) {
    ASSERT_ERR(err, UV_EINVAL);
  } else if (st == T_FREE || st == T_RETURNED) {
    ASSERT_ERR(err, UV_EBUSY);
  } else if (err == 0) {
    /* Only a task in custody on an open worker. */
    ASSERT_EQ(st, T_CUSTODY);
    ASSERT(phase == S_OPEN || phase == S_CLAIMED);
    p->rearms_ok++;
  } else {
    if (err != UV_ESHUTDOWN)
      ASSERT_ERR(err, UV_EBUSY);
    p->rearms_busy++;
  }
  uv_rwlock_rdunlock(&sl->lock);
}


static void op_close(producer_t* p) {
  slot_t* sl;
  unsigned r;
  int phase;
  int err;

  r = rnd(p);
  sl = &slots[r % NSLOTS];
  uv_rwlock_rdlock(&sl->lock);
  phase = S_OPEN;
  if (atomic_compare_exchange_strong(&sl->phase, &phase, S_CLAIMED)) {
    if (!((r >> 8) & 1))
      atomic_store(&sl->cancel_closing, 1); /* 0.5: runs may hear it */
    err = uvs_worker_close(&sl->worker, (r >> 8) & 1 ? UVS_DRAIN : UVS_CANCEL,
                           worker_close_cb);
    if (err != 0) {
      /* Only a scheduler close can have closed it meanwhile. */
      uint64_t until = test_hrtime_ms() + 1000;
      ASSERT_ERR(err, UV_EINVAL);
      while (!atomic_load(&scheds_closing) && test_hrtime_ms() < until)
        uv_sleep(1); /* the loop sets the flag right after its calls */
      ASSERT(atomic_load(&scheds_closing));
      atomic_store(&sl->phase, S_OPEN);
    } else {
      phase = S_CLAIMED;
      atomic_compare_exchange_strong(&sl->phase, &phase, S_CLOSING);
    }
  } else if (phase == S_CLOSING || phase == S_CLOSED) {
    /* Closing or closed already. */
    ASSERT_ERR(uvs_worker_close(&sl->worker, UVS_CANCEL, NULL), UV_EINVAL);
  }
  uv_rwlock_rdunlock(&sl->lock);
}


/* A serial worker with uvs_worker_init; a wide one with
 * uvs_worker_init_ex, with or without metrics (another path through the
 * lanes). */
static int init_worker(slot_t* sl, int metrics, unsigned bounds) {
  uvs_worker_options_t o;

  if (sl->width == 1)
    return uvs_worker_init(&scheds[sl->sched], &sl->worker, sl->where);
  /* 0.3: half the time a per-key bound of 2 to 5, with any policy. */
  sl->key_max = bounds & 1 ? 2 + (int) ((bounds >> 1) % 4) : 0;
  sl->on_full = (uvs_full_t) ((bounds >> 3) % 3);
  memset(&o, 0, sizeof(o));
  o.width = (unsigned) sl->width;
  o.metrics = metrics;
  o.key_max_pending = (size_t) sl->key_max;
  o.on_full = sl->on_full;
  o.key_space_cb = key_space_cb;
  return uvs_worker_init_ex(&scheds[sl->sched], &sl->worker, sl->where, &o);
}


static void op_recreate(producer_t* p) {
  slot_t* sl;
  int phase;

  sl = &slots[rnd(p) % NSLOTS];
  if (atomic_load(&sl->phase) != S_CLOSED ||
      test_hrtime_ms() < atomic_load(&sl->closed_at) + 2)
    return;
  uv_rwlock_wrlock(&sl->lock);
  phase = S_CLOSED;
  if (atomic_compare_exchange_strong(&sl->phase, &phase, S_INIT)) {
    int closing = atomic_load(&scheds_closing);
    int i;

    /* A new incarnation: no suspension, no barrier. Suspensions held of
     * the old one ended with its close; their holders drop them. */
    sl->gen++;
    /* 0.5: no close of this incarnation, no task waiting after a yield. */
    atomic_store(&sl->cancel_closing, 0);
    sl->yielded = NULL;
    for (i = 0; i < NKEY; i++) sl->key_yielded[i] = NULL;
    atomic_store(&sl->susp_held, 0);
    atomic_store(&sl->susp_slack, 0);
    atomic_store(&sl->barrier_running, 0);
    for (i = 0; i < NPROD; i++) {
      atomic_store(&sl->bar_open[i], LONG_MAX);
      atomic_store(&sl->bar_started[i], -1);
    }
    int err = init_worker(sl, (int) (rnd(p) & 1), rnd(p));
    if (closing)
      ASSERT_ERR(err, UV_ESHUTDOWN);
    else if (err != 0)
      ASSERT_ERR(err, UV_ESHUTDOWN); /* the scheduler is closing */
    atomic_store(&sl->phase, err == 0 ? S_OPEN : S_CLOSED);
  }
  uv_rwlock_wrunlock(&sl->lock);
}


static void check_now(producer_t* p) {
  uint64_t now;
  int s;

  s = (int) (rnd(p) % NSCHED);
  now = uvs_now(&scheds[s]);
  ASSERT_UINT64_LE(now, test_hrtime_ms());
  if (s == 0) {
    ASSERT_UINT64_GE(now, p->last_now);
    p->last_now = now;
  }
}


/* 0.4: a suspension of a random worker, held for up to 2 ms. */
static void op_suspend(producer_t* p) {
  slot_t* sl;
  unsigned r;
  int si;
  int phase;
  int err;

  r = rnd(p);
  si = (int) (r % NSLOTS);
  if (p->held_gen[si] >= 0)
    return; /* one of each producer's at a time per worker */
  sl = &slots[si];
  uv_rwlock_rdlock(&sl->lock);
  phase =
      atomic_load(&scheds_closing) ? S_SCHED_CLOSED : atomic_load(&sl->phase);
  err = uvs_worker_suspend(&sl->worker);
  check_shutdown(p, phase, err);
  if (err == 0) {
    /* Nothing starts from now, but one task per lane that was taking one
     * already when the count left 0. */
    if (atomic_load(&sl->susp_held) == 0)
      atomic_store(&sl->susp_slack, sl->width);
    atomic_fetch_add(&sl->susp_held, 1);
    atomic_fetch_add(&sl->suspends, 1);
    p->held_gen[si] = sl->gen;
    p->held_until[si] = uv_hrtime() + (uint64_t) ((r >> 8) % 2000) * 1000u;
    p->nheld++;
    p->suspends_ok++;
  }
  uv_rwlock_rdunlock(&sl->lock);
}


/* 0.5: an expiry probe. Suspends a worker, schedules two tasks with an
 * expiry of 1 ms onto it, and holds the suspension 4 ms: resume_due then
 * dooms those that surely waited past their expiry. */
static void op_probe(producer_t* p, int pi) {
  slot_t* sl;
  int phase;
  int si;
  int err;
  int k;

  si = (int) (rnd(p) % NSLOTS);
  if (p->held_gen[si] >= 0)
    return;
  sl = &slots[si];
  uv_rwlock_rdlock(&sl->lock);
  phase =
      atomic_load(&scheds_closing) ? S_SCHED_CLOSED : atomic_load(&sl->phase);
  err = uvs_worker_suspend(&sl->worker);
  check_shutdown(p, phase, err);
  if (err == 0) {
    if (atomic_load(&sl->susp_held) == 0)
      atomic_store(&sl->susp_slack, sl->width);
    atomic_fetch_add(&sl->susp_held, 1);
    atomic_fetch_add(&sl->suspends, 1);
    p->held_gen[si] = sl->gen;
    p->held_until[si] = uv_hrtime() + 4000000u;
    p->nheld++;
    p->suspends_ok++;
  }
  uv_rwlock_rdunlock(&sl->lock);
  if (err != 0)
    return;
  p->force_slot = si;
  p->force_expiry = 1;
  for (k = 0; k < 2; k++) {
    p->probe[si][k] = op_schedule(p, pi, K_NOW, 0);
    if (p->probe[si][k] != NULL) {
      p->probe_c[si][k] = p->probe[si][k]->custody;
      p->probes++;
    }
  }
  p->force_slot = -1;
}


/* 0.5: before p resumes its suspension of slot i: a probe scheduled onto
 * this incarnation more than its expiry plus 1 ms ago has waited that
 * long (the worker was suspended from before its schedule, by p, and no
 * close ended that): it must never start. */
static void doom_probes(producer_t* p, int i, slot_t* sl, int phase) {
  stask_t* t;
  int k;

  for (k = 0; k < 2; k++) {
    t = p->probe[i][k];
    p->probe[i][k] = NULL;
    if (t == NULL || t->custody != p->probe_c[i][k] || t->gen != sl->gen ||
        phase != S_OPEN || atomic_load(&closes_begin))
      continue;
    if (uv_hrtime() > t->t_return + (t->expiry + 1) * 1000000u) {
      atomic_store(&t->doomed_c, p->probe_c[i][k]);
      p->probes_doomed++;
    }
  }
}


/* 0.4: resumes the suspensions p holds that are due (all: force). */
static void resume_due(producer_t* p, int force) {
  slot_t* sl;
  uint64_t now;
  int phase;
  int err;
  int i;

  now = uv_hrtime();
  for (i = 0; i < NSLOTS && p->nheld > 0; i++) {
    if (p->held_gen[i] < 0 || (!force && now < p->held_until[i]))
      continue;
    sl = &slots[i];
    uv_rwlock_rdlock(&sl->lock);
    if (sl->gen == p->held_gen[i]) {
      phase = atomic_load(&scheds_closing) ? S_SCHED_CLOSED
                                           : atomic_load(&sl->phase);
      doom_probes(p, i, sl, phase);
      /* Runs may start from the moment the count falls. */
      atomic_fetch_sub(&sl->susp_held, 1);
      err = uvs_worker_resume(&sl->worker);
      /* It holds a suspension: never UV_EINVAL. */
      check_shutdown(p, phase, err);
      if (err == 0)
        p->resumes_ok++;
    } else {
      /* Closed and made anew, which ended it. */
      p->probe[i][0] = p->probe[i][1] = NULL;
    }
    uv_rwlock_rdunlock(&sl->lock);
    p->held_gen[i] = -1;
    p->nheld--;
  }
}


static void one_op(producer_t* p, int pi) {
  unsigned r;

  p->ops++;
  if (p->nheld > 0 && (p->ops & 7) == 0)
    resume_due(p, 0);
  r = rnd(p) % 10000;
  if (r < 3300)
    op_schedule(p, pi, K_NOW, 0);
  else if (r < 5300)
    op_post(p, pi);
  else if (r < 7000)
    op_schedule(p, pi, K_AFTER, 0);
  else if (r < 7200)
    op_schedule(p, pi, K_EVERY, 0);
  else if (r < 8600)
    op_cancel(p, &p->tasks[rnd(p) % NTASK]);
  else if (r < 9000)
    op_interrupt(p, &p->tasks[rnd(p) % NTASK]);
  else if (r < 9150)
    op_cancel_periodic(p);
  else if (r < 9153)
    op_close(p);
  else if (r < 9600)
    op_recreate(p);
  else if (r < 9850)
    op_reschedule(p);
  else if (r < 9865)
    op_suspend(p);
  else if (r < 9870)
    op_probe(p, pi);
  else if (r < 9900)
    op_schedule(p, pi, K_NOW, 1);
  else if (r < 9950)
    op_race(p, pi);
  else
    check_now(p);
}


static void foreign_producer(void* arg) {
  producer_t* p;
  int pi;

  pi = (int) (intptr_t) arg;
  p = &prods[pi];
  while (!atomic_load(&stop)) {
    one_op(p, pi);
    if ((p->ops & 1023) == 0)
      uv_sleep(1); /* let the loop catch up now and then */
  }
}


/* ---- the loop ----------------------------------------------------------- */

static void report(uint64_t now) {
  long runs;
  uvs_stats_t st[NSCHED];
  int i;

  runs = atomic_load(&task_runs) + atomic_load(&post_runs);
  for (i = 0; i < NSCHED; i++) uvs_sched_stats(&scheds[i], &st[i]);
  printf("# t=%5.0fs runs/s=%9.0f rss_kb=%7ld runs=%ld pending=%" PRIu64
         " done_ok=%ld cancelled=%ld\n",
         (double) (now - start_ms) / 1000.0,
         (double) (runs - last_report_runs) * 1000.0 /
             (double) (now - last_report_ms),
         rss_kb(), runs, st[0].pending + st[1].pending, dones_ok,
         dones_cancelled);
  fflush(stdout);
  last_report_runs = runs;
  last_report_ms = now;
}


static void finish(void) {
  stopped = 1;
  atomic_store(&closes_begin, 1); /* suspensions end with the closes */
  for (int i = 0; i < NSCHED; i++) atomic_store(&races[i].phase, R_OFF);
  uv_close((uv_handle_t*) &tick, NULL);
  /* 0.5: runs may hear UV_ECANCELED from these. */
  atomic_store(&sched_cancel[0], !(seed & 1));
  atomic_store(&sched_cancel[1], !(seed & 2));
  ASSERT_OK(uvs_sched_close(&scheds[0], seed & 1 ? UVS_DRAIN : UVS_CANCEL,
                            sched_close_cb));
  ASSERT_OK(uvs_sched_close(&scheds[1], seed & 2 ? UVS_DRAIN : UVS_CANCEL,
                            sched_close_cb));
  atomic_store(&scheds_closing, 1);
}


static void tick_cb(uv_timer_t* handle) {
  uint64_t now;
  int i;

  (void) handle;
  if (stopped)
    return;
  now = test_hrtime_ms();
  if (soak && now >= next_report) {
    report(now);
    next_report += 10000;
  }
  if (now >= end_ms) {
    finish();
    return;
  }
  for (i = 0; i < NSCHED; i++) race_tick(&races[i], now);
  for (i = 0; i < LOOP_OPS; i++) one_op(&prods[LOOP_PROD], LOOP_PROD);
}


static void final_checks(void) {
  long task_accepts;
  long post_accepts;
  long dropped;
  long race_acc;
  long race_runs;
  long race_nonzero;
  uint64_t scheduled;
  uint64_t ran;
  uint64_t cancelled;
  int i;
  int j;
  int k;

  task_accepts = 0;
  post_accepts = 0;
  for (i = 0; i < NPROD; i++) {
    task_accepts += prods[i].task_accepts;
    post_accepts += prods[i].post_accepts;
    for (j = 0; j < NTASK; j++) {
      stask_t* t = &prods[i].tasks[j];
      int st = atomic_load(&t->state);
      /* Nothing is left in custody, and each custody ended once. */
      ASSERT(st == T_FREE || st == T_RETURNED);
      ASSERT_EQ(atomic_load(&t->dones), t->accepts);
      if (st == T_RETURNED && t->cancel_ok && t->kind != K_EVERY)
        ASSERT_ERR(t->status, UV_ECANCELED);
    }
  }
  for (i = 0; i < NSLOTS; i++) ASSERT_EQ(atomic_load(&slots[i].inflight), 0);
  /* 0.4: the hooks saw every custody end, and the posts as the stats. */
  ASSERT_NULL(h_expect);
  for (i = 0; i < NPROD; i++)
    for (j = 0; j < NTASK; j++) {
      ASSERT_EQ(atomic_load(&prods[i].tasks[j].h_held), 0);
      ASSERT_EQ(atomic_load(&prods[i].tasks[j].h_running), 0);
    }
  for (i = 0; i < NSCHED; i++) {
    long acc = 0;
    long runs = atomic_load(&post_runs_s[i]);

    if (!hooked[i])
      continue;
    for (j = 0; j < NPROD; j++) acc += prods[j].post_accepts_s[i];
    ASSERT_EQ(atomic_load(&h_post_acc[i]), acc);
    ASSERT_EQ(atomic_load(&h_post_started[i]), runs);
    ASSERT_EQ(atomic_load(&h_post_ended[i]), runs);
    ASSERT_EQ(atomic_load(&h_post_dropped[i]), acc - runs);
  }

  scheduled = ran = cancelled = 0;
  for (i = 0; i < NSCHED; i++) {
    ASSERT_UINT64_EQ(final_stats[i].pending, 0);
    scheduled += final_stats[i].scheduled;
    ran += final_stats[i].ran;
    cancelled += final_stats[i].cancelled;
  }
  /* 0.5: the race workers' tasks all came back. */
  race_acc = race_runs = race_nonzero = 0;
  for (i = 0; i < NSCHED; i++) {
    ASSERT_EQ(races[i].total_dones, atomic_load(&races[i].all_acc));
    race_acc += atomic_load(&races[i].all_acc);
    race_runs += atomic_load(&races[i].all_runs);
    race_nonzero += races[i].total_nonzero;
    for (j = 0; j < NPROD; j++)
      for (k = 0; k < RACE_TASKS; k++)
        ASSERT_EQ(atomic_load(&rtasks[j][i][k].busy), 0);
  }
  ASSERT_EQ(dones_ok + dones_cancelled, task_accepts);
  ASSERT_UINT64_EQ(scheduled,
                   (uint64_t) (task_accepts + post_accepts +
                               atomic_load(&self_accepts) + race_acc));
  /* 0.5: a run that yielded is not counted in `ran`. */
  ASSERT_UINT64_EQ(
      ran, (uint64_t) (atomic_load(&task_runs) - atomic_load(&yields_total) +
                       atomic_load(&post_runs) + race_runs));
  /* Posts have no done_cb: those not run were dropped by a close, and the
   * stats count them as cancelled. */
  dropped = (long) cancelled - dones_cancelled - race_nonzero;
  ASSERT_GE(dropped, 0);
  ASSERT_EQ(post_accepts, atomic_load(&post_runs) + dropped);

  if (!quiet || soak) {
    long closes = 0;
    long ops = 0;
    long cancels = 0;
    long shut = 0;
    long rearms_ok = 0;
    long rearms_busy = 0;
    long full = 0;
    long susp = 0;
    long resumed = 0;
    long bars = 0;
    for (i = 0; i < NSLOTS; i++) closes += atomic_load(&slots[i].closes);
    for (i = 0; i < NPROD; i++) {
      ops += prods[i].ops;
      cancels += prods[i].cancels_ok;
      shut += prods[i].shutdowns;
      rearms_ok += prods[i].rearms_ok;
      rearms_busy += prods[i].rearms_busy;
      full += prods[i].full_answers;
      susp += prods[i].suspends_ok;
      resumed += prods[i].resumes_ok;
      bars += prods[i].barriers_ok;
    }
    printf(
        "# 0.4: %ld suspends, %ld resumes (the rest ended by closes), %ld "
        "barriers accepted; hooks on scheduler 0%s\n",
        susp, resumed, bars, hooked[1] ? " and 1" : "");
    {
      long intr = 0;
      long probes = 0;
      long doomed = 0;
      for (i = 0; i < NPROD; i++) {
        intr += prods[i].interrupts_ok;
        probes += prods[i].probes;
        doomed += prods[i].probes_doomed;
      }
      printf(
          "# 0.5: %ld yields, %ld UV_EAGAIN and %ld UV_ECANCELED heard by "
          "checks, %ld interrupts answered 0, %ld shed by expiry; %ld expiry "
          "probes, %ld doomed, %ld of them shed\n",
          atomic_load(&yields_total), atomic_load(&checks_eagain),
          atomic_load(&checks_ecanceled), intr, dones_expired, probes, doomed,
          doomed_shed);
    }
    for (i = 0; i < NSCHED; i++)
      printf(
          "# race worker %d (key_max_pending %d): %ld bursts checked, %ld "
          "tasks accepted, %ld run\n",
          i, races[i].key_max, races[i].bursts, atomic_load(&races[i].all_acc),
          atomic_load(&races[i].all_runs));
    printf(
        "# re-arms: %ld answered 0, %ld UV_EBUSY or UV_ESHUTDOWN; full keys: "
        "%ld UV_EAGAIN or UV_ETIMEDOUT, %ld UV_ENOBUFS\n",
        rearms_ok, rearms_busy, full, dones_enobufs);
    printf(
        "# %.1f s, seed %lu: %ld ops, %ld task runs, %ld posts run, "
        "%ld tasks accepted (+%ld from run_cb), %ld posts accepted, "
        "%ld cancelled by cancel, %ld handed back 0, %ld handed back "
        "ECANCELED, %ld posts dropped by closes, %ld worker closes, %ld "
        "UV_ESHUTDOWN answers\n",
        (double) (test_hrtime_ms() - start_ms) / 1000.0, seed, ops,
        atomic_load(&task_runs), atomic_load(&post_runs), task_accepts,
        atomic_load(&self_accepts), post_accepts, cancels, dones_ok,
        dones_cancelled, dropped, closes, shut);
    /* How wide the wide workers ran: runs of keyed tasks, and the most
     * run callbacks seen at once (4 unless the pool was busy elsewhere;
     * scheduler 1's max_concurrency 2 caps its own). */
    for (i = 0; i < NSLOTS; i++) {
      if (slots[i].width == 1)
        continue;
      printf(
          "# wide slot %d (scheduler %d): %ld keyed runs, at most %d at "
          "once, %ld key_space_cb, %ld barriers run\n",
          i, slots[i].sched, atomic_load(&slots[i].keyed_runs),
          atomic_load(&slots[i].inflight_max),
          atomic_load(&slots[i].key_space_calls),
          atomic_load(&slots[i].barriers_run));
    }
  }
}


static void usage(const char* argv0) {
  fprintf(stderr, "usage: %s [--seconds N] [--soak N] [--seed S] [--quiet]\n",
          argv0);
  exit(2);
}


int main(int argc, char** argv) {
  uvs_sched_options_t opts[NSCHED];
  double seconds;
  int i;
  int j;
  int k;

  seconds = 3;
  seed = (unsigned long) uv_hrtime();
  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = atof(argv[++i]);
    } else if (strcmp(argv[i], "--soak") == 0 && i + 1 < argc) {
      seconds = atof(argv[++i]);
      soak = 1;
    } else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
      seed = strtoul(argv[++i], NULL, 0);
    } else if (strcmp(argv[i], "--quiet") == 0) {
      quiet = 1;
    } else {
      usage(argv[0]);
    }
  }
  printf("1..1\n# seed %lu, %.0f s%s\n", seed, seconds, soak ? ", soak" : "");
  fflush(stdout);

  /* Room in libuv's pool for a wide worker's 4 lanes besides the serial
   * pool workers' drains (unless the environment says otherwise). */
  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "8", 0));
  memset(opts, 0, sizeof(opts));
  opts[1].budget = 7;
  opts[1].max_concurrency = 2;
  opts[1].linger_us = 20;
  /* 0.4: a hook on scheduler 0, and on 1 for half the seeds. */
  hooked[0] = 1;
  hooked[1] = (int) ((seed >> 2) & 1);
  loop_thread = uv_thread_self();
  ASSERT_OK(uv_loop_init(&loop));
  for (i = 0; i < NSCHED; i++) {
    opts[i].keep_alive = 1;
    opts[i].hook = hooked[i] ? hook : NULL;
    opts[i].hook_arg = &scheds[i];
    ASSERT_OK(uvs_sched_init(&loop, &scheds[i], &opts[i]));
  }
  for (i = 0; i < NSLOTS; i++) {
    slot_t* sl = &slots[i];
    sl->sched = i / NSLOT;
    sl->where = i % NSLOT < 2 || i % NSLOT == WIDE_SLOT ? UVS_POOL : UVS_LOOP;
    sl->width = i % NSLOT == WIDE_SLOT ? WIDTH : 1;
    ASSERT_OK(uv_rwlock_init(&sl->lock));
    sl->bar_done_run = sl->max_done_run = -1;
    for (j = 0; j < NPROD; j++) {
      atomic_store(&sl->bar_open[j], LONG_MAX);
      atomic_store(&sl->bar_started[j], -1);
      sl->last_seq[j] = -1;
      sl->close_cut[j] = LONG_MAX;
      for (k = 0; k < NKEY; k++) {
        sl->done_seq[j][k] = -1;
        sl->key_last_seq[j][k] = -1;
        sl->key_close_cut[j][k] = LONG_MAX;
      }
    }
    ASSERT_OK(init_worker(sl, i & 1, (unsigned) (seed >> (i % 8))));
  }
  /* 0.5: the race workers, suspended for their first burst; a bound of 1
   * for two seeds in three, 2 for the rest. */
  for (i = 0; i < NSCHED; i++) {
    uvs_worker_options_t ro;
    race_t* r = &races[i];

    r->key_max = (seed >> (4 + 2 * i)) % 3 == 0 ? 2 : 1;
    memset(&ro, 0, sizeof(ro));
    ro.width = 2;
    ro.key_max_pending = (size_t) r->key_max;
    ro.on_full = UVS_FULL_DROP_OLDEST;
    ro.metrics = 1;
    ASSERT_OK(uvs_worker_init_ex(&scheds[i], &r->worker, UVS_POOL, &ro));
    ASSERT_OK(uvs_worker_suspend(&r->worker));
    atomic_store(&r->phase, R_BURST);
    for (j = 0; j < NPROD; j++)
      for (k = 0; k < RACE_TASKS; k++) {
        rtask_t* t = &rtasks[j][i][k];
        t->sched = i;
        ASSERT_OK(uvs_task_init(&t->task, race_run, race_done));
        ASSERT_OK(uvs_task_set_key(&t->task, RACE_KEY));
      }
  }
  for (i = 0; i < NPROD; i++) {
    prods[i].rng = seed * 0x9e3779b97f4a7c15ull + (uint64_t) i * 7919 + 1;
    for (j = 0; j < NSLOTS; j++) prods[i].held_gen[j] = -1;
    prods[i].force_slot = -1;
    for (j = 0; j < NTASK; j++) {
      prods[i].tasks[j].owner = i;
      ASSERT_OK(uv_mutex_init(&prods[i].tasks[j].blk));
      ASSERT_OK(uvs_task_init(&prods[i].tasks[j].task, run_cb, done_cb));
    }
  }

  start_ms = test_hrtime_ms();
  end_ms = start_ms + (uint64_t) (seconds * 1000);
  for (i = 0; i < NSCHED; i++) races[i].burst_end = start_ms + RACE_BURST_MS;
  next_report = start_ms + 10000;
  last_report_ms = start_ms;
  if (soak)
    report(start_ms);
  ASSERT_OK(uv_timer_init(&loop, &tick));
  ASSERT_OK(uv_timer_start(&tick, tick_cb, 1, 1));
  for (i = 0; i < NFOREIGN; i++)
    ASSERT_OK(
        uv_thread_create(&threads[i], foreign_producer, (void*) (intptr_t) i));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(scheds_closed, NSCHED);
  final_checks();
  for (i = 0; i < NSLOTS; i++) uv_rwlock_destroy(&slots[i].lock);
  for (i = 0; i < NPROD; i++)
    for (j = 0; j < NTASK; j++) uv_mutex_destroy(&prods[i].tasks[j].blk);
  ASSERT_OK(uv_loop_close(&loop));
  printf("ok 1 - stress_random\n");
  return 0;
}
