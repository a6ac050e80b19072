/* libFuzzer target: the input is a sequence of API operations on one loop,
 * advanced with uv_run(UV_RUN_NOWAIT), checked against a small model of
 * SPEC. Built with clang only (meson -Dfuzz=true, test/fuzz/meson.build).
 *
 * The model keeps, per task, whether the library has it (custody) and
 * why; per worker slot and for the scheduler, open, closing or closed.
 * From it each call's return code is predicted exactly, and every callback
 * is checked when it comes: a task runs only while in custody, never after
 * a cancel that returned 0 (loop workers), never early; one-shot tasks are
 * handed back once, with 0 after their run or UV_ECANCELED without one;
 * periodic ones once, with UV_ECANCELED; at most one run of a worker at a
 * time, on the right thread; tasks scheduled at once on a loop worker run
 * in schedule order; a worker's close callback comes after its last
 * hand-back, the scheduler's after all of them. At the end of an input the
 * scheduler is closed, the loop runs to completion, nothing is left in
 * custody, the stats agree with the callbacks, and uv_loop_close()
 * returns 0. Workers 0 and 1 are loop workers (deterministic); worker 2 is
 * a pool worker, where only what does not depend on timing is predicted.
 *
 * Worker 3 is a pool worker of width 2 (uvs_worker_init_ex). Schedules may
 * set the task's key first (uvs_task_set_key: no key, 1, 2, or 1 + 2^32,
 * which equals 1 in its low 32 bits); the code it answers is predicted (0,
 * or UV_EBUSY while the library has the task); the key stays with the
 * task for later schedules, and uvs_task_init clears it (docs/options.rst). On
 * worker 3 the model checks, besides what it checks on worker 2: never more
 * than 2 runs at once, never two of one key; per key, tasks scheduled at once
 * run, and their done_cb(..., 0) come, in schedule order. On the serial workers
 * a key changes nothing, and their checks stay as they were.
 *
 * 0.3: worker 3 is sometimes made with per-key bounds (key_max_pending 1 to
 * 3, UVS_FULL_DROP_OLDEST, so that schedules still answer 0): a task of it
 * that never ran may come back with UV_ENOBUFS, and key_space_cb comes on
 * the loop thread for a key a task had. uvs_task_reschedule is predicted
 * as far as timing allows: UV_EINVAL (never scheduled, delay above 2^40),
 * UV_EBUSY (queued, cancelled, handed back; a delayed task once it may have
 * fallen due), 0 for a task on a loop worker that can't have fallen due
 * yet, UV_ESHUTDOWN for one still queued on a closing worker (a task the
 * close already dropped may answer UV_EBUSY too); a re-armed task must not
 * run before its new time.
 *
 * 0.4: ops with an input byte of 0xc0 or more are the new calls.
 * uvs_worker_suspend and uvs_worker_resume (also on NULL, at a count of 0,
 * on closing and closed workers) are predicted exactly, and the count is
 * read back with uvs_worker_metrics. While the model's count is above 0
 * and no close has begun, nothing of the worker starts: on a loop worker
 * nothing at all (the calls come from the loop thread, between turns); on
 * a pool worker, whose lanes run on other threads, one task per lane at
 * most after each suspension began (the SPEC's slack for a suspend from
 * another thread). A close ends the suspension: the final close must
 * still leave nothing in custody. uvs_schedule_barrier goes to any worker:
 * on the serial ones it is an ordinary schedule (the order checks above
 * include it); on the wide one its run_cb starts with no other run_cb of
 * the worker running, every task scheduled at once before it either ran
 * already or never runs afterwards, no task (or periodic run) accepted
 * after it starts before it returned, and its done_cb(..., 0) comes after
 * those of the tasks that ran before it and before those of the tasks that
 * ran after it. When the last input byte is 0x80 or more the scheduler
 * has a hook that checks, per task, ACCEPTED -> STARTED -> ENDED ... ->
 * HANDED_BACK (ACCEPTED once per accepted call, before the call returns;
 * a one-shot task starts once per acceptance; HANDED_BACK on the loop
 * thread, after the last ENDED, right before the done_cb with the same
 * status; NULL for posts and for the ENDED of a done-less task) and, at the
 * end, that the counts of the events agree with the callbacks.
 *
 * 0.5: op bytes of 0xf0 or more are the calls of long tasks that cooperate.
 * A task not in the library's custody may be given a way to cooperate for
 * its next custodies: yield 1 to 3 times, check a few times and yield on
 * UV_EAGAIN, or interrupt itself, check, and yield. uvs_task_interrupt is
 * predicted as uvs_task_cancel on the loop workers (the test's calls come
 * between their runs) and as 0 or UV_EBUSY on the pool ones;
 * uvs_task_set_expiry exactly (UV_EINVAL above 2^40, UV_EBUSY in custody);
 * uvs_task_check and uvs_task_yield outside any run_cb, or about another
 * task, answer UV_EINVAL, and uvs_current_task() is the running task in a
 * run_cb (NULL in done_cb, in a post's fn, in the test, and, in an
 * ACCEPTED hook, the task itself when its own run_cb schedules it). Each
 * run checks: an answer of UV_ECANCELED has a cause (an interrupt was
 * called, or a close with UVS_CANCEL began), and once heard, never 0
 * again in that run; a run that starts after an interrupt returned 0
 * hears UV_ECANCELED; a yield returns 0 (UV_EINVAL for a periodic task or
 * a barrier, UV_EBUSY once the run scheduled its task again) and a second one
 * changes nothing; a task that yielded runs again, before the tasks queued
 * behind it (on the wide worker, of its key), and is handed back once: with 0
 * after as many runs as yields plus one, or with UV_ECANCELED (cancelled,
 * closed, or interrupted then yielded) after as many runs as yields; a barrier
 * never starts while a task accepted before it waits after a yield; hooks see
 * STARTED and ENDED per run and no new ACCEPTED; UV_ETIMEDOUT only for a task
 * with an expiry that never ran; and `ran` counts runs that did not yield. A
 * post dropped unrun is handed back with UV_ECANCELED (nothing here sheds a
 * post or bounds its worker's posts).
 */

#include "uvsched.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSLOT 4
#define WIDE 3  /* the slot of the wide pool worker */
#define WIDTH 2 /* its width */
#define NKEY 4  /* key indexes: 0 = no key, 1..3 */
#define NTASK 8
#define MAX_MS ((uint64_t) 1 << 40)
#define OP_NEW 0xc0 /* op bytes from here: suspend, resume, barrier */
#define OP_05 0xf0  /* and from here: the calls of 0.5 */

#define CHECK(expr)                                                            \
  do {                                                                         \
    if (!(expr)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr); \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#define CHECK_RC(got, want)                                               \
  do {                                                                    \
    int got_ = (got);                                                     \
    int want_ = (want);                                                   \
    if (got_ != want_) {                                                  \
      fprintf(stderr, "%s:%d: %s returned %d (%s), model says %d (%s)\n", \
              __FILE__, __LINE__, #got, got_, rc_name(got_), want_,       \
              rc_name(want_));                                            \
      abort();                                                            \
    }                                                                     \
  } while (0)

/* W_SCLOSING: closing with the scheduler's close, which a worker close may
 * still join with a callback of its own. W_QCLOSING: closed by the user
 * without a callback (from a run_cb). Either is done, without a callback,
 * when the scheduler's close is. */
enum { W_FREE, W_OPEN, W_CLOSING, W_SCLOSING, W_QCLOSING, W_CLOSED };
enum { S_OPEN, S_CLOSING, S_CLOSED };
enum { T_IDLE, T_QUEUED, T_DELAYED, T_PERIODIC, T_CANCELLED, T_FINISHED };
/* 0.5: what a task's run_cb does to cooperate */
enum { C_NONE, C_YIELD, C_CHECK, C_INTR };

typedef struct {
  uvs_worker_t w;
  int state;
  int ran_active; /* runs of this worker executing (at most 1 unless WIDE) */
  long last_seq;
  long next_seq;
  int close_cbs;
  /* WIDE: per key index, runs executing, the seq of the last ordered run
   * and of the last ordered done_cb(..., 0). */
  int key_active[NKEY];
  long key_last_seq[NKEY];
  long key_done_seq[NKEY];
  size_t key_max; /* WIDE: key_max_pending of this incarnation */
  /* 0.4 */
  int susp;       /* the suspend count, as the model has it */
  int slack;      /* pool: starts still allowed since the suspension began */
  int unsusp;     /* a close (of it or the scheduler) began: no suspension */
  long aseq_next; /* WIDE: accept order */
  long run_next;  /* WIDE: start order */
  long barrier_done_run; /* WIDE: run index of the last barrier done (0) */
  int barrier_running;
  int h_nul; /* hook: STARTED of posts and done-less tasks not yet ENDED */
  int cancel_close; /* 0.5: a close of it with UVS_CANCEL was called */
} slot_t;

typedef struct {
  uvs_task_t t;
  int state;
  int has_done;
  int slot;
  int kidx;            /* its key's index, as the library has it */
  long seq;            /* -1: not checked for order */
  uint64_t not_before; /* ns */
  uint64_t period;
  int runs;        /* in the current custody (one-shot: 0 or 1) */
  int behaviour;   /* what run_cb does besides checking */
  int cancel_busy; /* pool one-shot: a cancel found it taken */
  int close_hit;   /* pool: a cancelling close found it (cancel: EBUSY) */
  int uncertain;   /* a draining close may have run or dropped it */
  int limbo;       /* done-less on a closing or pool worker: released when? */
  int periodic_cancelled;
  /* 0.4 */
  int barrier;      /* this custody began with uvs_schedule_barrier */
  int immediate;    /* this custody began with a schedule without delay */
  long aseq;        /* WIDE: accept order */
  long run_idx;     /* WIDE: start order of its last run; -1: none */
  int run_returned; /* its run_cb returned in this custody */
  int overtaken;    /* a later barrier started before it ran: never runs */
  /* hook: H_IDLE, H_HELD, H_RUNNING; one-shot starts owed; ACCEPTEDs */
  int h_state;
  int h_credit;
  long h_accepts;
  /* 0.5: how it cooperates (set out of custody: stable in one), and in
   * this custody: yields that returned 0, an interrupt called (set before
   * the call) or returned 0 (the test's), it interrupted itself and
   * yielded; its expiry, which outlives custodies. */
  int coop;
  int coop_n;
  int yields;
  int intr_pend;
  int intr;
  int intr_self;
  uint64_t expiry;
} ftask_t;

enum { H_IDLE, H_HELD, H_RUNNING };

static uv_loop_t loop;
static uvs_sched_t sched;
static uv_mutex_t model_lock; /* pool run_cbs and the loop thread */
static uv_thread_t loop_thread;
static int sched_state;
static int sched_close_cbs;
static slot_t slots[NSLOT];
static ftask_t tasks[NTASK];
static long accepted; /* schedules accepted (stats.scheduled) */
static long
    custodies; /* custodies begun: a re-schedule from run_cb continues one */
static long handed_back;
static long handed_back_cancelled;
static long released_run;   /* done-less tasks released by their run */
static long released_close; /* done-less tasks dropped by a close */
static long runs_total;
static long posts_accepted;
static long posts_ran;
static uvs_stats_t final_stats;
/* 0.4: the hook, when installed, and what it saw (under hook_lock). */
static int hook_on;
static int hook_marker;
static uv_mutex_t hook_lock;
static ftask_t* h_expect_done;
static int h_expect_status;
static long h_posts_accepted;
static long h_posts_started;
static long h_posts_dropped;
static long h_nul_ended;
static long h_hb_done;
static long h_hb_doneless;
static int sched_unsusp; /* the scheduler's close began */
/* 0.5: the scheduler's close with UVS_CANCEL was called; runs that
 * yielded (not counted in `ran`). */
static int sched_cancel_close;
static long yields_total;

static const uint64_t key_values[NKEY] = {0, 1, 2, ((uint64_t) 1 << 32) | 1};

static const char* rc_name(int rc) {
  return rc == 0 ? "0" : uv_err_name(rc);
}


static int on_loop(void) {
  uv_thread_t self;

  self = uv_thread_self();
  return uv_thread_equal(&self, &loop_thread);
}


static int slot_of(uvs_worker_t* w) {
  return (int) ((slot_t*) w - slots);
}


/* Workers 2 and 3 run on the pool: only what does not depend on timing is
 * predicted for them. */
static int is_pool(int s) {
  return s >= 2;
}


static int in_custody(const ftask_t* t) {
  return t->state == T_QUEUED || t->state == T_DELAYED ||
         t->state == T_PERIODIC || t->state == T_CANCELLED;
}


static void model_close(int s, uvs_close_how_t how);


/* ---- 0.4 checks (under model_lock) -------------------------------------- */

/* A run of slot s starts: not while it is suspended, but for the slack of a
 * pool worker's lanes; a close ends the suspension. */
static void check_may_start(slot_t* sl) {
  if (sl->susp == 0 || sl->unsusp || sched_unsusp)
    return;
  if (sl->slack <= 0) {
    fprintf(stderr, "slot %d: a run started while suspended (count %d)\n",
            slot_of(&sl->w), sl->susp);
    CHECK(!"a run starts on a suspended worker");
  }
  sl->slack--;
}


/* A run of t starts on the wide worker. */
static void wide_start(ftask_t* t, slot_t* sl) {
  ftask_t* u;
  int i;

  CHECK(!t->overtaken);
  CHECK(!sl->barrier_running);
  for (i = 0; i < NTASK; i++) {
    u = &tasks[i];
    if (u == t || u->slot != WIDE || !in_custody(u) || !u->barrier)
      continue;
    /* A barrier accepted before it and still due to run: t waits. (One
     * that an interrupt answered 0 for may have been cancelled, one with
     * an expiry shed, before its done_cb tells the model.) */
    if (u->aseq < t->aseq && u->state == T_QUEUED && u->run_idx < 0 &&
        !u->intr && u->expiry == 0)
      CHECK(!"a task started before an earlier barrier ran");
  }
  if (t->barrier) {
    CHECK(sl->ran_active == 0);
    sl->barrier_running = 1;
    for (i = 0; i < NTASK; i++) {
      u = &tasks[i];
      if (u == t || u->slot != WIDE || u->state != T_QUEUED || !u->immediate)
        continue;
      /* Queued before the barrier and not yet run: it must never run now
       * (a cancel or an eviction is handing it back). */
      if (u->aseq < t->aseq && !u->run_returned)
        u->overtaken = 1;
    }
  }
  t->run_idx = sl->run_next++;
}


/* done_cb(t, 0) on the wide worker. */
static void wide_done(ftask_t* t) {
  slot_t* sl;
  ftask_t* u;
  int i;

  sl = &slots[WIDE];
  CHECK(t->run_idx >= 0);
  if (!t->barrier) {
    /* No barrier that ran after it was handed back before it. */
    CHECK(t->run_idx > sl->barrier_done_run);
    return;
  }
  for (i = 0; i < NTASK; i++) {
    u = &tasks[i];
    if (u == t || u->slot != WIDE || !in_custody(u) || !u->has_done ||
        u->period != 0)
      continue;
    /* Ran before the barrier: its done_cb came already. */
    CHECK(u->run_idx < 0 || u->run_idx > t->run_idx);
  }
  sl->barrier_done_run = t->run_idx;
}


/* ---- callbacks ---------------------------------------------------------- */

static void spin_us(unsigned us) {
  uint64_t until;

  until = uv_hrtime() + us * 1000u;
  while (uv_hrtime() < until) {
  }
}


/* 0.5: an answer of uvs_task_check in a run of t; *seen: UV_ECANCELED was
 * heard in this run already. */
static void check_answer(ftask_t* t, slot_t* sl, int rc, int* seen) {
  if (rc != 0 && rc != UV_EAGAIN)
    CHECK_RC(rc, UV_ECANCELED);
  if (*seen)
    CHECK_RC(rc, UV_ECANCELED); /* never 0 again in this run */
  if (rc == UV_ECANCELED && !*seen) {
    uv_mutex_lock(&model_lock);
    CHECK(t->intr_pend || sl->cancel_close || sched_cancel_close);
    uv_mutex_unlock(&model_lock);
    *seen = 1;
  }
}


/* 0.5: a yield in a run of t, with the answer SPEC gives; a second one
 * changes nothing. Returns whether it yielded. */
static int coop_yield(ftask_t* t, int cannot, int rescheduled) {
  int want;
  int err;

  want = cannot ? UV_EINVAL : rescheduled ? UV_EBUSY : 0;
  err = uvs_task_yield(&t->t);
  CHECK_RC(err, want);
  if (err != 0)
    return 0;
  CHECK_RC(uvs_task_yield(&t->t), 0);
  uv_mutex_lock(&model_lock);
  t->yields++;
  yields_total++;
  uv_mutex_unlock(&model_lock);
  if (hook_on) {
    /* Its next STARTED is owed to the yield. */
    uv_mutex_lock(&hook_lock);
    t->h_credit++;
    uv_mutex_unlock(&hook_lock);
  }
  return 1;
}


/* 0.5: what a run of t does to cooperate, after its other behaviour.
 * intr0: an interrupt of the test had returned 0 when the run began.
 * Returns whether it yielded. */
static int coop_run(ftask_t* t,
                    slot_t* sl,
                    int periodic,
                    int barrier,
                    int rescheduled,
                    int intr0) {
  ftask_t* other;
  int cannot;
  int seen;
  int mode;
  int n;
  int rc;
  int i;

  other = &tasks[(t - tasks + 1) % NTASK];
  CHECK_RC(uvs_task_check(&other->t), UV_EINVAL);
  CHECK_RC(uvs_task_yield(&other->t), UV_EINVAL);
  CHECK(uvs_current_task() == &t->t);
  uv_mutex_lock(&model_lock);
  mode = t->coop;
  n = t->coop_n;
  uv_mutex_unlock(&model_lock);
  seen = 0;
  rc = uvs_task_check(&t->t);
  check_answer(t, sl, rc, &seen);
  /* It began after an interrupt returned 0: the interrupt reached it
   * running, or it must not run. */
  if (intr0)
    CHECK_RC(rc, UV_ECANCELED);
  cannot = periodic || barrier;
  switch (mode) {
    case C_YIELD:
      if (t->yields < n || cannot || rescheduled)
        return coop_yield(t, cannot, rescheduled);
      return 0;
    case C_CHECK:
      for (i = 0; i < 6; i++) {
        rc = uvs_task_check(&t->t);
        check_answer(t, sl, rc, &seen);
        if (rc == UV_ECANCELED)
          return 0;
        if (rc == UV_EAGAIN && !cannot)
          return coop_yield(t, cannot, rescheduled);
        spin_us(20);
      }
      return 0;
    case C_INTR:
      if (rescheduled)
        return 0; /* the interrupt would meet its new custody */
      uv_mutex_lock(&model_lock);
      t->intr_pend = 1;
      uv_mutex_unlock(&model_lock);
      n = uvs_task_interrupt(&t->t);
      if (is_pool(t->slot))
        CHECK(n == 0 || n == UV_EBUSY); /* the test may have come first */
      else
        CHECK_RC(n, t->state == T_CANCELLED ? UV_EBUSY : 0);
      CHECK_RC(uvs_task_interrupt(&t->t), UV_EBUSY);
      rc = uvs_task_check(&t->t);
      if (n == 0)
        CHECK_RC(rc, UV_ECANCELED);
      check_answer(t, sl, rc, &seen);
      if (periodic) {
        if (n == 0) {
          /* It loses its later runs, as a cancel would. */
          uv_mutex_lock(&model_lock);
          t->state = T_CANCELLED;
          t->periodic_cancelled = 1;
          uv_mutex_unlock(&model_lock);
        }
        return 0;
      }
      if (n != 0 && !is_pool(t->slot))
        return 0;
      if (!coop_yield(t, cannot, 0))
        return 0;
      /* Handed back with UV_ECANCELED, not run again. */
      uv_mutex_lock(&model_lock);
      t->intr_self = 1;
      uv_mutex_unlock(&model_lock);
      return 0; /* it does not run again: not a yield that waits */
    default:
      return 0;
  }
}


static void run_cb(uvs_task_t* task) {
  ftask_t* t;
  slot_t* sl;
  uint64_t until;
  int kidx;
  int slow;
  int barrier;
  int has_done;
  int periodic;
  int rerun;
  int rescheduled;
  int yielded;
  int intr0;
  int err;

  t = (ftask_t*) task;
  CHECK(uvs_current_task() == task);
  uv_mutex_lock(&model_lock);
  sl = &slots[t->slot];
  /* A done-less task is the user's again once this run is entered: its
   * key may be set anew meanwhile, so it is read now. */
  kidx = t->barrier ? 0 : t->kidx; /* a barrier belongs to no key */
  barrier = t->barrier;
  has_done = t->has_done;
  periodic = t->period != 0;
  intr0 = t->intr;
  /* 0.5: a run after a yield, which comes before anything queued behind
   * it (of its key, on the wide worker). */
  rerun = !periodic && t->yields > 0;
  /* Behaviour 1 on the wide worker: a run of 100 us, so that runs meet. */
  slow = t->slot == WIDE && t->behaviour == 1;
  CHECK(sl->state == W_OPEN || sl->state == W_CLOSING ||
        sl->state == W_SCLOSING || sl->state == W_QCLOSING);
  CHECK(on_loop() == !is_pool(t->slot));
  if (t->slot == WIDE) {
    CHECK(sl->ran_active < WIDTH);
    if (kidx != 0) {
      CHECK(sl->key_active[kidx] == 0);
      sl->key_active[kidx] = 1;
    }
  } else {
    CHECK(!sl->ran_active);
  }
  check_may_start(sl);
  if (t->slot == WIDE)
    wide_start(t, sl);
  if (hook_on) {
    /* STARTED came right before, and ENDED has not. */
    uv_mutex_lock(&hook_lock);
    CHECK(t->h_state == (has_done ? H_RUNNING : H_IDLE));
    uv_mutex_unlock(&hook_lock);
  }
  sl->ran_active++;
  CHECK(t->state == T_QUEUED || t->state == T_DELAYED ||
        t->state == T_PERIODIC ||
        (is_pool(t->slot) && t->state == T_CANCELLED && t->periodic_cancelled));
  CHECK(!t->intr_self);
  CHECK(uv_hrtime() >= t->not_before);
  if (t->seq >= 0 && t->slot == WIDE) {
    CHECK(rerun ? t->seq == sl->key_last_seq[kidx]
                : t->seq > sl->key_last_seq[kidx]);
    sl->key_last_seq[kidx] = t->seq;
  } else if (t->seq >= 0) {
    CHECK(rerun ? t->seq == sl->last_seq : t->seq > sl->last_seq);
    sl->last_seq = t->seq;
  }
  if (t->period != 0) {
    t->runs++;
    t->not_before += t->period * 1000000u;
  } else {
    CHECK(t->runs == t->yields);
    t->runs++;
  }
  runs_total++;
  if (!t->has_done) {
    t->state = T_FINISHED; /* released as its run_cb is entered */
    released_run++;
  }
  uv_mutex_unlock(&model_lock);

  if (slow) {
    until = uv_hrtime() + 100000;
    while (uv_hrtime() < until) {
    }
  }
  rescheduled = 0;
  yielded = 0;
  if (!has_done) {
    /* The user's already: it may be scheduled anew at any moment. Only
     * what holds whatever it is doing. */
    CHECK_RC(uvs_task_interrupt(task), UV_EINVAL);
    goto out;
  }
  /* Loop workers only: these change the model, which must not race. */
  if (is_pool(t->slot))
    goto coop;
  if (t->behaviour == 1 && t->state == T_QUEUED) {
    /* Again from its own run_cb, once. */
    long h0 = 0;

    t->behaviour = 0;
    if (hook_on) {
      uv_mutex_lock(&hook_lock);
      h0 = t->h_accepts;
      uv_mutex_unlock(&hook_lock);
    }
    err = uvs_schedule(&sl->w, task);
    if (hook_on) {
      uv_mutex_lock(&hook_lock);
      CHECK(t->h_accepts == h0 + (err == 0));
      uv_mutex_unlock(&hook_lock);
    }
    if (sl->state != W_OPEN || sched_state != S_OPEN) {
      CHECK_RC(err, UV_ESHUTDOWN);
    } else {
      CHECK_RC(err, 0);
      t->barrier = 0; /* an ordinary schedule now */
      accepted++;
      t->runs = 0;
      t->seq = sl->next_seq++;
      t->not_before = 0;
      /* A new custody, as model_accept begins one. */
      t->yields = 0;
      t->intr_pend = t->intr = t->intr_self = 0;
      rescheduled = 1;
    }
  } else if (t->behaviour == 2) {
    /* Cancel from its own run_cb: busy for a one-shot, 0 for a periodic. */
    err = uvs_task_cancel(task);
    if (t->state == T_PERIODIC) {
      CHECK_RC(err, 0);
      t->state = T_CANCELLED;
      t->periodic_cancelled = 1;
    } else {
      CHECK_RC(err, UV_EBUSY);
    }
  } else if (t->behaviour == 3 && sl->state == W_OPEN) {
    /* No callback: it ends, silently, by the scheduler's close at the
     * latest. */
    uv_mutex_lock(&model_lock);
    sl->unsusp = 1;
    uv_mutex_unlock(&model_lock);
    CHECK_RC(uvs_worker_close(&sl->w, UVS_DRAIN, NULL), 0);
    sl->state = W_QCLOSING;
    model_close(t->slot, UVS_DRAIN);
  }
coop:
  yielded = coop_run(t, sl, periodic, barrier, rescheduled, intr0);
out:
  uv_mutex_lock(&model_lock);
  sl->ran_active--;
  if (sl == &slots[WIDE] && kidx != 0)
    sl->key_active[kidx]--;
  if (sl == &slots[WIDE] && barrier)
    sl->barrier_running = 0;
  /* A done-less task is the user's already: it may be in a new custody.
   * One that yielded has not returned for good: it runs again. */
  if (has_done && !yielded)
    t->run_returned = 1;
  uv_mutex_unlock(&model_lock);
}


static void done_cb(uvs_task_t* task, int status) {
  ftask_t* t;

  CHECK(on_loop());
  t = (ftask_t*) task;
  CHECK(t->has_done);
  CHECK(in_custody(t));
  CHECK(uvs_current_task() == NULL);
  CHECK_RC(uvs_task_check(task), UV_EINVAL);
  CHECK_RC(uvs_task_yield(task), UV_EINVAL);
  if (hook_on) {
    /* HANDED_BACK for this task came right before, with this status. */
    uv_mutex_lock(&hook_lock);
    CHECK(h_expect_done == t);
    CHECK_RC(status, h_expect_status);
    h_expect_done = NULL;
    uv_mutex_unlock(&hook_lock);
  }
  if (status == 0 && t->slot == WIDE && t->period == 0) {
    uv_mutex_lock(&model_lock);
    wide_done(t);
    uv_mutex_unlock(&model_lock);
  }
  if (t->period != 0) {
    /* Guarantee 3 says UV_ECANCELED, always; but DROP_OLDEST evicts a
     * queued periodic task of a full key with UV_ENOBUFS, which
     * test-keybound.c's keybound_drop_oldest_periodic_* pin as a bug.
     * Tolerated here so that the fuzzer can look further. */
    if (!(status == UV_ENOBUFS && t->slot == WIDE && slots[WIDE].key_max != 0))
      CHECK_RC(status, UV_ECANCELED);
  } else if (status == 0) {
    /* Its runs: one per yield, and the one that returned for good. */
    CHECK(t->runs == t->yields + 1);
    CHECK(!t->intr_self);
    CHECK(t->state == T_QUEUED || t->state == T_DELAYED);
    if (t->slot == WIDE && t->seq >= 0) {
      /* Per key, in schedule order. */
      CHECK(t->seq > slots[WIDE].key_done_seq[t->kidx]);
      slots[WIDE].key_done_seq[t->kidx] = t->seq;
    }
  } else if (status == UV_ENOBUFS) {
    /* Evicted by DROP_OLDEST for its key: only on a bounded wide worker. */
    CHECK(t->slot == WIDE && slots[WIDE].key_max != 0);
    CHECK(t->runs == t->yields); /* waiting after a yield is queued */
  } else if (status == UV_ETIMEDOUT) {
    /* 0.5: shed by its expiry (the workers here have no max_wait_ms);
     * never once it started. */
    CHECK(t->expiry != 0);
    CHECK(t->runs == 0);
  } else {
    CHECK_RC(status, UV_ECANCELED);
    CHECK(t->runs == t->yields);
    /* A cancel that found it running: it ran, unless it yielded after, or
     * an interrupt reached it. */
    CHECK(!t->cancel_busy || t->yields > 0 || t->intr);
  }
  handed_back++;
  if (status != 0)
    handed_back_cancelled++;
  t->state = T_FINISHED;
}


static void post_fn(void* arg) {
  slot_t* sl;

  sl = arg;
  CHECK(uvs_current_task() == NULL);
  uv_mutex_lock(&model_lock);
  CHECK(on_loop() == !is_pool(slot_of(&sl->w)));
  if (sl == &slots[WIDE])
    CHECK(sl->ran_active < WIDTH && !sl->barrier_running);
  else
    CHECK(!sl->ran_active);
  check_may_start(sl);
  posts_ran++;
  uv_mutex_unlock(&model_lock);
}


static void key_space_cb(uvs_worker_t* w, uint64_t key) {
  int k;

  CHECK(on_loop());
  CHECK(slot_of(w) == WIDE);
  CHECK(slots[WIDE].key_max != 0);
  /* Never once the worker (or its scheduler) is closing. */
  CHECK(slots[WIDE].state == W_OPEN && sched_state == S_OPEN);
  CHECK(key != 0);
  for (k = 1; k < NKEY && key_values[k] != key; k++) {
  }
  CHECK(k < NKEY);
}


/* 0.4: the scheduler's hook, checking each task's events in order. */
static void hook(
    uvs_worker_t* w, uvs_task_t* task, uvs_event_t ev, int status, void* arg) {
  slot_t* sl;
  ftask_t* t;
  int s;

  CHECK(arg == &hook_marker);
  s = slot_of(w);
  CHECK(s >= 0 && s < NSLOT);
  sl = &slots[s];
  if (ev != UVS_EV_HANDED_BACK)
    CHECK(status == 0);
  /* 0.5: a call from a run_cb is its own task's (behaviour 1); the test's
   * come from no run_cb. */
  if (ev == UVS_EV_ACCEPTED)
    CHECK(uvs_current_task() == NULL || uvs_current_task() == task);
  uv_mutex_lock(&hook_lock);
  if (task == NULL) {
    /* A post (every event), or the ENDED of a done-less task. */
    switch (ev) {
      case UVS_EV_ACCEPTED:
        h_posts_accepted++;
        break;
      case UVS_EV_STARTED:
        h_posts_started++;
        sl->h_nul++;
        break;
      case UVS_EV_ENDED:
        CHECK(sl->h_nul > 0);
        sl->h_nul--;
        h_nul_ended++;
        break;
      case UVS_EV_HANDED_BACK:
        CHECK(on_loop());
        /* Dropped by a close: no worker here sheds (none has max_wait_ms,
         * and a post has no expiry of its own) or bounds its posts. */
        CHECK_RC(status, UV_ECANCELED);
        CHECK(h_expect_done == NULL);
        h_posts_dropped++;
        break;
      default:
        CHECK(!"an unknown event");
    }
    uv_mutex_unlock(&hook_lock);
    return;
  }
  t = (ftask_t*) task;
  CHECK(t >= tasks && t < tasks + NTASK);
  CHECK(t->slot == s);
  switch (ev) {
    case UVS_EV_ACCEPTED:
      /* A new custody, or again from its own run_cb (between STARTED and
       * ENDED). */
      CHECK(t->h_state == H_IDLE || t->h_state == H_RUNNING);
      if (t->h_state == H_IDLE)
        t->h_state = H_HELD;
      t->h_credit++;
      t->h_accepts++;
      break;
    case UVS_EV_STARTED:
      CHECK(t->h_state == H_HELD);
      if (t->period == 0) {
        CHECK(t->h_credit > 0); /* one run per acceptance */
        t->h_credit--;
      }
      if (t->has_done) {
        t->h_state = H_RUNNING;
      } else {
        /* Released: its ENDED comes with NULL. */
        t->h_state = H_IDLE;
        t->h_credit = 0;
        sl->h_nul++;
      }
      break;
    case UVS_EV_ENDED:
      CHECK(t->has_done);
      CHECK(t->h_state == H_RUNNING);
      t->h_state = H_HELD;
      break;
    case UVS_EV_HANDED_BACK:
      CHECK(on_loop());
      CHECK(t->h_state == H_HELD); /* after its last ENDED */
      CHECK(h_expect_done == NULL);
      if (t->has_done) {
        h_expect_done = t;
        h_expect_status = status;
        h_hb_done++;
      } else {
        CHECK(status != 0); /* dropped unrun */
        h_hb_doneless++;
      }
      t->h_state = H_IDLE;
      t->h_credit = 0;
      break;
    default:
      CHECK(!"an unknown event");
  }
  uv_mutex_unlock(&hook_lock);
}


static void worker_close_cb(uvs_worker_t* w) {
  slot_t* sl;
  int i;

  CHECK(on_loop());
  sl = &slots[slot_of(w)];
  CHECK(sl->state == W_CLOSING);
  CHECK(sched_close_cbs == 0);
  CHECK(!sl->ran_active);
  /* Its last task was handed back, and done-less ones were released. */
  for (i = 0; i < NTASK; i++) {
    if (tasks[i].slot != slot_of(w) || !in_custody(&tasks[i]))
      continue;
    CHECK(!tasks[i].has_done);
    tasks[i].state = T_FINISHED;
    released_close++;
  }
  sl->close_cbs++;
  sl->state = W_CLOSED;
}


static void sched_close_cb(uvs_sched_t* s) {
  int i;

  CHECK(on_loop());
  CHECK(sched_state == S_CLOSING);
  for (i = 0; i < NSLOT; i++) {
    CHECK(slots[i].state != W_OPEN && slots[i].state != W_CLOSING);
    if (slots[i].state == W_SCLOSING || slots[i].state == W_QCLOSING)
      slots[i].state = W_CLOSED;
  }
  for (i = 0; i < NTASK; i++) {
    if (!in_custody(&tasks[i]))
      continue;
    CHECK(!tasks[i].has_done);
    tasks[i].state = T_FINISHED;
    released_close++;
  }
  sched_close_cbs++;
  sched_state = S_CLOSED;
  uvs_sched_stats(s, &final_stats);
}


/* What a close of slot s does to its tasks, as far as it is known now. */
static void model_close(int s, uvs_close_how_t how) {
  ftask_t* t;
  int i;

  uv_mutex_lock(&model_lock);
  for (i = 0; i < NTASK; i++) {
    t = &tasks[i];
    if (t->slot != s || !in_custody(t) || t->state == T_CANCELLED)
      continue;
    if (!t->has_done) {
      /* Released by its run or by the close, at the latest when the close
       * callback runs: not touched until then. */
      t->limbo = 1;
      continue;
    }
    if (how == UVS_CANCEL) {
      /* Everything not started is handed back; a pool task may be
       * running. */
      if (is_pool(s))
        t->close_hit = 1;
      else
        t->state = T_CANCELLED;
    } else if (t->state == T_DELAYED || t->state == T_PERIODIC) {
      /* Run once more if due, dropped if not. */
      t->uncertain = 1;
    }
  }
  uv_mutex_unlock(&model_lock);
}


/* ---- operations --------------------------------------------------------- */

typedef struct {
  const uint8_t* p;
  size_t n;
} input_t;

static unsigned take(input_t* in) {
  unsigned v;

  if (in->n == 0)
    return 0;
  v = *in->p++;
  in->n--;
  return v;
}


static uint64_t delay_of(unsigned b) {
  switch (b & 7) {
    case 5:
      return MAX_MS;
    case 6:
      return MAX_MS + 1;
    case 7:
      return UINT64_MAX;
    default:
      return b & 3; /* 0-3 ms */
  }
}


/* The code SPEC gives a schedule of t onto slot s; busy says whether the
 * task is the library's. */
static int expect_schedule(int s, ftask_t* t, int bad_args) {
  if (slots[s].state == W_FREE || (t->limbo && in_custody(t)))
    return 1; /* not an initialised worker, or custody unknown: not called */
  if (bad_args)
    return UV_EINVAL;
  if (slots[s].state != W_OPEN || sched_state != S_OPEN)
    return UV_ESHUTDOWN;
  if (in_custody(t))
    return UV_EBUSY;
  return 0;
}


static void model_accept(ftask_t* t,
                         int s,
                         int state,
                         uint64_t delay,
                         uint64_t period,
                         unsigned behaviour) {
  uv_mutex_lock(&model_lock);
  t->state = state;
  t->slot = s;
  t->runs = 0;
  t->cancel_busy = 0;
  t->close_hit = 0;
  t->uncertain = 0;
  /* A done-less task on the pool worker is released when its run_cb is
   * entered, on a pool thread, a moment before run_cb tells the model:
   * until then whether the library still has it is unknown here. */
  t->limbo = is_pool(s) && !t->has_done;
  t->periodic_cancelled = 0;
  t->period = period;
  t->behaviour = (int) behaviour;
  t->immediate = state == T_QUEUED;
  t->aseq = slots[s].aseq_next++;
  t->run_idx = -1;
  t->run_returned = 0;
  t->overtaken = 0;
  t->yields = 0;
  t->intr_pend = t->intr = t->intr_self = 0;
  /* Order is checked on the loop workers, and per key on the wide one (a
   * barrier has no key there). */
  t->seq = state == T_QUEUED &&
                   (!is_pool(s) || (s == WIDE && t->kidx != 0 && !t->barrier))
               ? slots[s].next_seq++
               : -1;
  if (state == T_QUEUED)
    t->not_before = 0;
  else
    t->not_before = uv_hrtime() + delay * 1000000u;
  uv_mutex_unlock(&model_lock);
  accepted++;
  custodies++;
}


/* uvs_task_set_key: 0 on a task the library does not hold, UV_EBUSY on
 * one it does (until its done_cb). Not on a done-less task whose custody
 * is unknown just now. */
static void op_set_key(ftask_t* t, int kidx) {
  int err;

  if (t->limbo && in_custody(t))
    return;
  err = uvs_task_set_key(&t->t, key_values[kidx]);
  if (in_custody(t)) {
    CHECK_RC(err, UV_EBUSY);
  } else {
    CHECK_RC(err, 0);
    t->kidx = kidx;
  }
}


/* The ACCEPTEDs the hook has seen for t (0 without a hook). */
static long hook_accepts(ftask_t* t) {
  long n;

  if (!hook_on)
    return 0;
  uv_mutex_lock(&hook_lock);
  n = t->h_accepts;
  uv_mutex_unlock(&hook_lock);
  return n;
}


/* A schedule call returned err: one ACCEPTED before it returned if it
 * accepted the task, none if not. */
static void hook_check_accepts(ftask_t* t, long h0, int err) {
  if (hook_on)
    CHECK(hook_accepts(t) == h0 + (err == 0));
}


static void op_schedule(input_t* in, int kind) {
  unsigned a;
  unsigned b;
  ftask_t* t;
  uint64_t delay;
  uint64_t period;
  uint64_t t_call;
  long h0;
  int s;
  int want;
  int err;

  a = take(in);
  b = take(in);
  s = (int) (a % NSLOT);
  t = &tasks[(a >> 2) % NTASK];
  if (a & 0x20)
    op_set_key(t, (int) (a >> 6));
  delay = kind == 0 ? 0 : delay_of(b);
  period = kind == 2 ? ((b >> 3) & 3) : 0;
  if (kind == 2 && period == 3)
    period = MAX_MS + 1;
  want = expect_schedule(
      s, t,
      delay > MAX_MS ||
          (kind == 2 && (period == 0 || period > MAX_MS || !t->has_done)));
  if (want == 1)
    return;
  h0 = hook_accepts(t);
  t_call = uv_hrtime();
  /* The model takes the task first: a drain already running on the pool
   * worker may take it from the inbox and run it before the call returns.
   * The return code is still checked against the prediction. */
  if (want == 0) {
    t->barrier = 0;
    model_accept(t, s,
                 kind == 0   ? T_QUEUED
                 : kind == 1 ? T_DELAYED
                             : T_PERIODIC,
                 delay, period, (b >> 5) & 3);
    if (kind != 0) {
      uv_mutex_lock(&model_lock);
      t->not_before = t_call + delay * 1000000u;
      uv_mutex_unlock(&model_lock);
    }
  }
  if (kind == 0)
    err = uvs_schedule(&slots[s].w, &t->t);
  else if (kind == 1)
    err = uvs_schedule_after(&slots[s].w, &t->t, delay);
  else
    err = uvs_schedule_every(&slots[s].w, &t->t, delay, period);
  CHECK_RC(err, want);
  hook_check_accepts(t, h0, err);
}


/* uvs_task_cancel, or (intr) uvs_task_interrupt: the same answers for a
 * task that is not running, which on the loop workers is every task the
 * test can reach; on the pool ones an interrupt may also reach a running
 * task (0). */
static void op_cancel(input_t* in, int intr) {
  ftask_t* t;
  int may_yield;
  int err;

  t = &tasks[take(in) % NTASK];
  if (intr) {
    /* Before the call: a run may hear UV_ECANCELED at once. */
    uv_mutex_lock(&model_lock);
    t->intr_pend = 1;
    uv_mutex_unlock(&model_lock);
  }
  err = intr ? uvs_task_interrupt(&t->t) : uvs_task_cancel(&t->t);
  uv_mutex_lock(&model_lock);
  /* A pool task found running may have yielded since, and wait queued. */
  may_yield = is_pool(t->slot) && (t->coop == C_YIELD || t->coop == C_CHECK);
  if (t->state == T_IDLE || !t->has_done) {
    CHECK_RC(err, UV_EINVAL);
  } else if (t->state == T_FINISHED || t->state == T_CANCELLED || t->intr ||
             t->intr_self) {
    CHECK_RC(err, UV_EBUSY);
  } else if (intr && is_pool(t->slot)) {
    /* Cancelled, or it reached a running run (one a cancel or a close
     * found running too); or it was handed back meanwhile. */
    if (err == 0)
      t->intr = 1;
    else
      CHECK_RC(err, UV_EBUSY);
  } else if (t->close_hit || (t->cancel_busy && !may_yield)) {
    CHECK_RC(err, UV_EBUSY);
  } else if (t->uncertain) {
    if (err == 0) {
      t->state = T_CANCELLED;
      t->periodic_cancelled = t->period != 0;
    } else {
      CHECK_RC(err, UV_EBUSY); /* dropped, or taken by a drain */
      t->close_hit = 1;
    }
  } else if (t->state == T_PERIODIC) {
    /* On the pool its own run may have interrupted it just now. */
    if (!(err == UV_EBUSY && is_pool(t->slot) && t->intr_pend))
      CHECK_RC(err, 0);
    t->state = T_CANCELLED;
    t->periodic_cancelled = 1;
  } else if (is_pool(t->slot) && err != 0) {
    /* A pool drain took it already (a delayed one fell due first). */
    CHECK_RC(err, UV_EBUSY);
    t->cancel_busy = 1;
  } else {
    CHECK_RC(err, 0);
    t->state = T_CANCELLED;
  }
  uv_mutex_unlock(&model_lock);
}


/* uvs_task_reschedule, predicted as far as timing allows. */
static void op_reschedule(input_t* in) {
  unsigned a;
  unsigned b;
  ftask_t* t;
  uint64_t delay;
  uint64_t t_call;
  uint64_t old_nb;
  uint64_t new_nb;
  int runs0;
  int pool;
  int err;

  a = take(in);
  b = take(in);
  t = &tasks[a % NTASK];
  delay = delay_of(b);
  if (t->limbo && in_custody(t))
    return; /* a done-less pool task: whether the library has it is unknown */
  if (t->state == T_IDLE || delay > MAX_MS) {
    CHECK_RC(uvs_task_reschedule(&t->t, delay), UV_EINVAL);
    return;
  }
  if (!in_custody(t)) {
    /* Handed back (or a done-less task released): the library knows
     * nothing of it. */
    CHECK_RC(uvs_task_reschedule(&t->t, delay), UV_EBUSY);
    return;
  }
  pool = is_pool(t->slot);
  if (slots[t->slot].state != W_OPEN || sched_state != S_OPEN) {
    err = uvs_task_reschedule(&t->t, delay);
    if (t->state == T_QUEUED && !pool && !t->uncertain && t->runs == 0)
      CHECK_RC(err, UV_ESHUTDOWN); /* still held by the closing worker */
    else
      CHECK(err == UV_ESHUTDOWN || err == UV_EBUSY);
    return;
  }
  if (t->state == T_QUEUED || t->state == T_CANCELLED || t->cancel_busy) {
    CHECK_RC(uvs_task_reschedule(&t->t, delay), UV_EBUSY);
    return;
  }
  /* Delayed or periodic, on an open worker. */
  uv_mutex_lock(&model_lock);
  t_call = uv_hrtime();
  new_nb = t_call + delay * 1000000u;
  old_nb = t->not_before;
  runs0 = t->runs;
  /* Until the answer is known, a run may be due to either time. */
  if (new_nb < t->not_before)
    t->not_before = new_nb;
  uv_mutex_unlock(&model_lock);
  err = uvs_task_reschedule(&t->t, delay);
  uv_mutex_lock(&model_lock);
  if (!pool && t->state == T_DELAYED && t->runs != 0) {
    CHECK_RC(err, UV_EBUSY); /* it ran: its done_cb is on its way */
  } else if (!pool && t_call < old_nb) {
    /* Not due yet on any clock: still in the timer structure. */
    CHECK_RC(err, 0);
  } else {
    CHECK(err == 0 || err == UV_EBUSY);
  }
  if (t->runs == runs0)
    t->not_before = err == 0 ? new_nb : old_nb;
  uv_mutex_unlock(&model_lock);
}


static void op_post(input_t* in) {
  unsigned a;
  int s;
  int want;
  int err;

  a = take(in);
  s = (int) (a % NSLOT);
  if (slots[s].state == W_FREE)
    return;
  want = (a & 4)                                               ? UV_EINVAL
         : (slots[s].state != W_OPEN || sched_state != S_OPEN) ? UV_ESHUTDOWN
                                                               : 0;
  err = uvs_post(&slots[s].w, (a & 4) ? NULL : post_fn, &slots[s]);
  CHECK_RC(err, want);
  if (err == 0)
    posts_accepted++;
  if (hook_on) {
    uv_mutex_lock(&hook_lock);
    CHECK(h_posts_accepted == posts_accepted);
    uv_mutex_unlock(&hook_lock);
  }
}


static void op_worker(input_t* in) {
  unsigned a;
  slot_t* sl;
  int err;

  a = take(in);
  sl = &slots[a % NSLOT];
  if (sl->state == W_FREE || sl->state == W_CLOSED) {
    /* The memory is ours: (re)initialise it. */
    if (sl == &slots[WIDE]) {
      uvs_worker_options_t o;

      memset(&o, 0, sizeof(o));
      o.width = WIDTH;
      /* Bits 4-5: key_max_pending 0 (none) to 3, dropping the oldest. */
      o.key_max_pending = (a >> 4) & 3;
      o.on_full = UVS_FULL_DROP_OLDEST;
      o.key_space_cb = key_space_cb;
      err = uvs_worker_init_ex(&sched, &sl->w, UVS_POOL, &o);
      if (err == 0)
        sl->key_max = o.key_max_pending;
    } else {
      err = uvs_worker_init(&sched, &sl->w,
                            is_pool(slot_of(&sl->w)) ? UVS_POOL : UVS_LOOP);
    }
    CHECK_RC(err, sched_state == S_OPEN ? 0 : UV_ESHUTDOWN);
    if (err == 0) {
      int k;

      sl->state = W_OPEN;
      sl->last_seq = -1;
      sl->cancel_close = 0;
      sl->susp = sl->slack = sl->unsusp = 0;
      sl->aseq_next = sl->run_next = 0;
      sl->barrier_done_run = -1;
      sl->barrier_running = 0;
      for (k = 0; k < NKEY; k++) {
        sl->key_last_seq[k] = -1;
        sl->key_done_seq[k] = -1;
      }
    }
    return;
  }
  if ((a & 12) && (sl->state == W_OPEN || sl->state == W_SCLOSING)) {
    /* It will close: from now its suspension has ended. */
    uv_mutex_lock(&model_lock);
    sl->unsusp = 1;
    uv_mutex_unlock(&model_lock);
  }
  if (!(a & 4) && (a & 8)) {
    /* 0.5: a run may hear UV_ECANCELED from now. */
    uv_mutex_lock(&model_lock);
    sl->cancel_close = 1;
    uv_mutex_unlock(&model_lock);
  }
  err = uvs_worker_close(&sl->w,
                         (a & 4)   ? UVS_DRAIN
                         : (a & 8) ? UVS_CANCEL
                                   : (uvs_close_how_t) 3,
                         worker_close_cb);
  if (!(a & 12))
    CHECK_RC(err, UV_EINVAL);
  else if (sl->state == W_SCLOSING) {
    /* Only its scheduler's close is closing it: the close goes on the
     * scheduler's way, and this callback comes before the scheduler's. */
    CHECK_RC(err, 0);
    sl->state = W_CLOSING;
  } else if (sl->state != W_OPEN)
    CHECK_RC(err, UV_EINVAL);
  else {
    CHECK_RC(err, 0);
    sl->state = W_CLOSING;
    model_close(slot_of(&sl->w), (a & 4) ? UVS_DRAIN : UVS_CANCEL);
  }
}


static void op_task_init(input_t* in) {
  unsigned a;
  ftask_t* t;

  a = take(in);
  t = &tasks[a % NTASK];
  if (in_custody(t))
    return; /* undefined: the library has it */
  CHECK_RC(
      uvs_task_init(&t->t, (a & 8) ? NULL : run_cb, (a & 16) ? NULL : done_cb),
      (a & 8) ? UV_EINVAL : 0);
  if (!(a & 8)) {
    t->state = T_IDLE;
    t->has_done = !(a & 16);
    t->kidx = 0;   /* init leaves no key */
    t->expiry = 0; /* nor an expiry */
  }
}


/* 0.4: the suspend count, read back. */
static void check_count(slot_t* sl) {
  uvs_worker_metrics_t m;

  memset(&m, 0xff, sizeof(m));
  CHECK_RC(uvs_worker_metrics(&sl->w, &m), 0);
  CHECK(m.suspended == (uint64_t) sl->susp);
}


/* uvs_worker_suspend (resume 0) or uvs_worker_resume (resume 1). */
static void op_suspend(input_t* in, int resume) {
  unsigned a;
  slot_t* sl;
  int want;
  int err;

  a = take(in);
  if ((a & 0x1c) == 0x1c) {
    CHECK_RC(resume ? uvs_worker_resume(NULL) : uvs_worker_suspend(NULL),
             UV_EINVAL);
    return;
  }
  sl = &slots[a % NSLOT];
  if (sl->state == W_FREE)
    return; /* not a worker */
  if (sl->state != W_OPEN || sched_state != S_OPEN)
    want = UV_ESHUTDOWN; /* closing or closed, whatever the count */
  else if (resume && sl->susp == 0)
    want = UV_EINVAL;
  else
    want = 0;
  if (resume && want == 0) {
    /* Runs may start from the moment the count falls. */
    uv_mutex_lock(&model_lock);
    sl->susp--;
    uv_mutex_unlock(&model_lock);
  }
  err = resume ? uvs_worker_resume(&sl->w) : uvs_worker_suspend(&sl->w);
  CHECK_RC(err, want);
  if (!resume && err == 0) {
    /* Nothing starts from now: on a pool worker, but for one task per lane
     * that was taking one already. */
    uv_mutex_lock(&model_lock);
    if (sl->susp++ == 0)
      sl->slack = !is_pool(slot_of(&sl->w)) ? 0
                  : sl == &slots[WIDE]      ? WIDTH
                                            : 1;
    uv_mutex_unlock(&model_lock);
  }
  if (sl->state != W_CLOSED)
    check_count(sl);
}


/* uvs_schedule_barrier onto any worker. */
static void op_barrier(input_t* in) {
  unsigned a;
  ftask_t* t;
  long h0;
  int s;
  int want;
  int err;

  a = take(in);
  s = (int) (a % NSLOT);
  t = &tasks[(a >> 2) % NTASK];
  if (a & 0x20)
    op_set_key(t, (int) ((a >> 6) & 1) + 1); /* ignored by a barrier */
  want = expect_schedule(s, t, 0);
  if (want == 1)
    return;
  h0 = hook_accepts(t);
  if (want == 0) {
    t->barrier = 1;
    /* Behaviour 1: slow on the wide worker, once more on a loop one. */
    model_accept(t, s, T_QUEUED, 0, 0, (a >> 7) & 1);
  }
  err = uvs_schedule_barrier(&slots[s].w, &t->t);
  CHECK_RC(err, want);
  hook_check_accepts(t, h0, err);
}


/* ---- 0.5 operations ---------------------------------------------------- */

/* How a task cooperates in its next custodies: not while it is in one. */
static void op_coop(input_t* in) {
  unsigned a;
  ftask_t* t;

  a = take(in);
  t = &tasks[a % NTASK];
  if (in_custody(t))
    return;
  uv_mutex_lock(&model_lock);
  t->coop = (int) ((a >> 3) & 3);
  t->coop_n = 1 + (int) ((a >> 5) % 3);
  uv_mutex_unlock(&model_lock);
}


/* uvs_task_set_expiry: UV_EINVAL (NULL, above 2^40) wins over UV_EBUSY (in
 * custody); 0 otherwise, and it stays. */
static void op_expiry(input_t* in) {
  static const uint64_t values[8] = {0,    1,      2,          5,
                                     1000, MAX_MS, MAX_MS + 1, UINT64_MAX};
  unsigned a;
  ftask_t* t;
  uint64_t v;
  int err;

  a = take(in);
  t = &tasks[a % NTASK];
  v = values[(a >> 3) & 7];
  if (a & 0x80) {
    CHECK_RC(uvs_task_set_expiry(NULL, v), UV_EINVAL);
    return;
  }
  if (t->limbo && in_custody(t))
    return; /* a done-less pool task: whether the library has it is unknown */
  err = uvs_task_set_expiry(&t->t, v);
  if (v > MAX_MS) {
    CHECK_RC(err, UV_EINVAL);
  } else if (in_custody(t)) {
    CHECK_RC(err, UV_EBUSY);
  } else {
    CHECK_RC(err, 0);
    t->expiry = v;
  }
}


/* From the test, outside any run_cb: UV_EINVAL, and no current task. */
static void op_outside(input_t* in) {
  ftask_t* t;

  t = &tasks[take(in) % NTASK];
  CHECK_RC(uvs_task_check(&t->t), UV_EINVAL);
  CHECK_RC(uvs_task_yield(&t->t), UV_EINVAL);
  CHECK_RC(uvs_task_check(NULL), UV_EINVAL);
  CHECK_RC(uvs_task_yield(NULL), UV_EINVAL);
  CHECK_RC(uvs_task_interrupt(NULL), UV_EINVAL);
  CHECK(uvs_current_task() == NULL);
}


static void close_sched(uvs_close_how_t how) {
  int err;
  int i;

  if (sched_state == S_OPEN) {
    uv_mutex_lock(&model_lock);
    sched_unsusp = 1; /* every suspension ends */
    if (how == UVS_CANCEL)
      sched_cancel_close = 1;
    uv_mutex_unlock(&model_lock);
  }
  err = uvs_sched_close(&sched, how, sched_close_cb);
  CHECK_RC(err, sched_state == S_OPEN ? 0 : UV_EINVAL);
  if (err == 0) {
    sched_state = S_CLOSING;
    /* Open workers close with it, without a callback of their own. */
    for (i = 0; i < NSLOT; i++) {
      if (slots[i].state == W_OPEN) {
        slots[i].state = W_SCLOSING;
        model_close(i, how);
      }
    }
  }
}


static void op_sched_close(input_t* in) {
  close_sched(take(in) & 1 ? UVS_DRAIN : UVS_CANCEL);
}


int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  input_t in;
  long custody;
  int waits;
  int i;

  if (size > 512)
    return 0;
  in.p = data;
  in.n = size;
  memset(slots, 0, sizeof(slots));
  memset(tasks, 0, sizeof(tasks));
  accepted = custodies = handed_back = handed_back_cancelled = 0;
  released_run = released_close = 0;
  runs_total = posts_accepted = posts_ran = 0;
  sched_close_cbs = 0;
  waits = 0;
  sched_unsusp = 0;
  sched_cancel_close = 0;
  yields_total = 0;
  h_expect_done = NULL;
  h_posts_accepted = h_posts_started = h_posts_dropped = h_nul_ended = 0;
  h_hb_done = h_hb_doneless = 0;
  /* The last byte, 0x80 or more: a hook on the scheduler. */
  hook_on = size > 0 && data[size - 1] >= 0x80;
  loop_thread = uv_thread_self();
  CHECK(uv_mutex_init(&model_lock) == 0);
  CHECK(uv_mutex_init(&hook_lock) == 0);
  CHECK(uv_loop_init(&loop) == 0);
  {
    uvs_sched_options_t o;

    memset(&o, 0, sizeof(o));
    o.hook = hook_on ? hook : NULL;
    o.hook_arg = &hook_marker;
    CHECK(uvs_sched_init(&loop, &sched, &o) == 0);
  }
  sched_state = S_OPEN;
  for (i = 0; i < NTASK; i++) {
    CHECK(uvs_task_init(&tasks[i].t, run_cb, i < 6 ? done_cb : NULL) == 0);
    tasks[i].has_done = i < 6;
  }

  while (in.n > 0) {
    unsigned op = take(&in);

    if (op >= OP_05) {
      switch ((op - OP_05) % 4) {
        case 0:
          op_coop(&in);
          break;
        case 1:
          op_cancel(&in, 1);
          break;
        case 2:
          op_expiry(&in);
          break;
        default:
          op_outside(&in);
          break;
      }
      continue;
    }
    if (op >= OP_NEW) {
      switch ((op - OP_NEW) % 4) {
        case 0:
          op_suspend(&in, 0);
          break;
        case 1:
          op_suspend(&in, 1);
          break;
        default:
          op_barrier(&in);
          break;
      }
      continue;
    }
    switch (op % 12) {
      case 0:
      case 1:
        op_schedule(&in, 0);
        break;
      case 2:
        op_schedule(&in, 1);
        break;
      case 3:
        op_schedule(&in, 2);
        break;
      case 4:
        op_cancel(&in, 0);
        break;
      case 5:
        op_post(&in);
        break;
      case 6:
        op_worker(&in);
        break;
      case 7:
        op_task_init(&in);
        break;
      case 8:
        op_sched_close(&in);
        break;
      case 11:
        op_reschedule(&in);
        break;
      case 9:
        if (waits++ < 4)
          uv_sleep(1 + take(&in) % 2);
        /* fall through */
      default:
        uv_run(&loop, UV_RUN_NOWAIT);
        break;
    }
  }

  if (sched_state == S_OPEN)
    close_sched(size & 1 ? UVS_DRAIN : UVS_CANCEL);
  CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0);
  CHECK(sched_state == S_CLOSED);
  CHECK(sched_close_cbs == 1);
  custody = 0;
  for (i = 0; i < NTASK; i++)
    custody += in_custody(&tasks[i]) && tasks[i].has_done;
  CHECK(custody == 0);
  /* Every custody ended once; posts not run were dropped by a close. */
  CHECK(custodies == handed_back + released_run + released_close);
  CHECK(final_stats.pending == 0);
  /* A run that yielded is not counted in `ran`. */
  CHECK((long) final_stats.ran == runs_total - yields_total + posts_ran);
  CHECK((long) final_stats.scheduled == accepted + posts_accepted);
  CHECK((long) final_stats.cancelled - handed_back_cancelled - released_close ==
        posts_accepted - posts_ran);
  if (hook_on) {
    /* Every custody ended, every STARTED ENDED; the counts agree. */
    CHECK(h_expect_done == NULL);
    for (i = 0; i < NTASK; i++) CHECK(tasks[i].h_state == H_IDLE);
    for (i = 0; i < NSLOT; i++) CHECK(slots[i].h_nul == 0);
    CHECK(h_posts_accepted == posts_accepted);
    CHECK(h_posts_started == posts_ran);
    CHECK(h_posts_dropped == posts_accepted - posts_ran);
    CHECK(h_nul_ended == posts_ran + released_run);
    CHECK(h_hb_done == handed_back);
    CHECK(h_hb_doneless == released_close);
  }
  CHECK(uv_loop_close(&loop) == 0);
  uv_mutex_destroy(&model_lock);
  uv_mutex_destroy(&hook_lock);
  return 0;
}
