/* The idle/busy hand-off of a worker, as a Promela model for spin.
 *
 * Checked by scripts/check-handoff.sh (CI runs it): no task is lost, no two
 * drains of the worker run at once, the worker is never listed (nor
 * parked) twice, and when everything has stopped, every suspend resumed,
 * the worker is idle with nothing queued. Suspend and resume (0.4): a
 * parked worker is suspended and SCHEDULED at every lock release, so no
 * producer lists it, and a suspended worker is never listed ready there
 * (a suspend parks a listed one at once, so that uvs_group_stats() counts
 * it ready no more); once a suspend has returned no task starts until the
 * count is back at 0, but for the slack the guarantee allows: one task, in
 * a drain that was running as the suspend returned and had looked at the
 * flag (or filled its batch) before. The script also checks that the model
 * is not vacuous: with
 * -DBROKEN_NO_RECHECK (uvs__turn_ended() skips its second look at the
 * inbox) or
 * -DBROKEN_LOOK_FIRST (a producer reads the state before its push) spin must
 * find the lost task; with -DBROKEN_RESUME_NO_UNPARK (a resume to 0 leaves
 * a parked worker parked) the lost task, or the invariant of parking; with
 * -DBROKEN_PARK_IDLE (parking stores IDLE) a producer that lists the parked
 * worker; with -DBROKEN_SUSPEND_NO_PARK (a suspend leaves a listed worker
 * listed) a suspended worker listed ready; with -DBROKEN_TURN_NO_CHECK
 * (turn() fills a batch of a suspended
 * worker) or -DBROKEN_BATCH_NO_CHECK (run_batch() does not look at the flag
 * before each task after the first) a task started while suspended; and
 * with -DNO_SLACK (no task at all may start once a suspend returned) the
 * one the slack allows, which shows that the slack is reached.
 *
 * What it abstracts. The inbox (src/worker.c) is two counters and a flag per
 * item: `pushed` is the number of exchanges on the tail, `lnk[i]` says that
 * item i has been linked behind its predecessor, and `taken` is how many
 * items the consumer took. Between a producer's exchange and its link the
 * consumer sees "empty for now" (pop() sets *busy), while
 * uvs__inbox_nonempty() already sees the item through its seq_cst load of
 * the tail, so it is modelled as pushed != taken. The FIFO in front of the
 * inbox is consumer-only (under the lock) and folded into `taken`. Spin
 * explores sequentially consistent interleavings; the operations that
 * decide the hand-off are seq_cst in the C code (the exchange on the tail
 * and the load and CAS of worker->state in the producer; the store and CAS
 * of worker->state and the load of the tail in uvs__turn_ended()), which is
 * what makes that faithful. The release store of the link and the acquire
 * load in pop() carry the task's contents, not the decision, and are one
 * step each here. Rings of the loop's doorbell (uvs__ring() in
 * src/bell.h) are not modelled: a worker listed as ready is assumed to
 * be dispatched eventually. A drain that stops early (its budget or time
 * slice is spent) and leaves tasks queued is modelled by BUDGET; a batch
 * (BATCH tasks at most) is moved out under the lock and run without it,
 * and what it did not start goes back to the head of the FIFO under the
 * lock (`taken` falls back). The suspend count and its flag are stored
 * under the lock (seq_cst) and the flag is loaded anywhere. The model's
 * suspends come from other threads: one from inside a run_cb, which
 * allows no slack, is not modelled, nor are closes, which end a
 * suspension through uvs__unpark() too.
 *
 * Where each part of the model is in the C code. Name functions, never line
 * numbers: scripts/check-handoff.sh fails if a function named here with
 * "in src/FILE.c" has no definition in that file, if any other function
 * named here with parentheses is neither an inline or proctype of this
 * model nor defined in a file of src/, or if this comment cites line
 * numbers.
 *
 *   model                          C code
 *   -----------------------------  -------------------------------------
 *   push_exchange / push_link      push_node() in src/worker.c, called by
 *                                  uvs__inbox_push() in src/worker.c:
 *                                  exchange on inbox_tail (seq_cst), then
 *                                  release store of prev->next
 *   push(): state load, CAS, make  uvs__worker_push() in src/worker.c,
 *                                  calling the one hand-off,
 *                                  uvs__worker_ready() in src/worker.c:
 *                                  load of the state, CAS IDLE ->
 *                                  SCHEDULED (both seq_cst), then
 *   make_ready()                   uvs__ready_list() in src/ready.c:
 *                                  phase = READY, listed once; if
 *                                  suspended (uvs__suspended() in
 *                                  src/state.h) phase = PARKED instead,
 *                                  state left SCHEDULED, sched->parked++
 *   proctype Drain (one per `go`)  turn() in src/drain.c: stops if
 *                                  suspended, else batches under the lock
 *                                  via fill() in src/drain.c,
 *                                  uvs__inbox_take() in src/worker.c (and
 *                                  pop() in src/worker.c), runs them
 *                                  without it in run_batch() in
 *                                  src/drain.c, which stops before a task
 *                                  after the first if suspended, puts back
 *                                  what it did not start (put_back() in
 *                                  src/drain.c), stops on empty-for-now,
 *                                  budget or suspension
 *   start()                        a run_cb starting: run_one() in
 *                                  src/drain.c; the ghosts sus_ret, late
 *                                  and late_ok check the suspend's slack
 *   proctype Suspender: suspend(), suspend() in src/close.c, from
 *   resume()                       uvs_worker_suspend() and
 *                                  uvs_worker_resume() in src/close.c: the
 *                                  count under the lock, the flag set at 1
 *                                  (and a listed worker parked at once:
 *                                  uvs__ready_park() in src/ready.c) and
 *                                  cleared at 0, then uvs__unpark()
 *   unpark()                       uvs__unpark() in src/worker.c: a parked
 *                                  worker's turn ends again (sched->parked--
 *                                  not modelled); close_locked() in
 *                                  src/close.c calls it too
 *   Loop: dispatch                 dispatch() in src/loop.c, whose
 *                                  runners post_owed() in src/loop.c
 *                                  posts with uv_queue_work once the lock
 *                                  is let go (and a runner taking the
 *                                  next ready worker, uvs__run_ready() in
 *                                  src/drain.c), and uvs__loop_turn() in
 *                                  src/drain.c: phase = POSTED, one drain
 *                                  at a time
 *   Loop: after_drain,             uvs__turn_ended() in src/worker.c,
 *   turn_ended()                   called under the lock by the runner
 *                                  (uvs__run_ready()) or the loop turn
 *                                  (uvs__loop_turn()) when a worker's turn
 *                                  ends; which thread does it does not
 *                                  matter to the hand-off, only the lock
 *                                  and the seq_cst store and second look
 *   nonempty()                     uvs__inbox_nonempty() in src/worker.c,
 *                                  through uvs__worker_nonempty() in
 *                                  src/worker.c (a serial worker has
 *                                  no kready)
 *   Loop: timer push               uvs__timers_due() in src/timer.c, its
 *                                  fire() in src/timer.c taking what is
 *                                  due out of the wheel, then
 *                                  uvs__fall_due() in src/bound.c, both
 *                                  under the lock in settle_once() in
 *                                  src/loop.c (a manual clock:
 *                                  uvs__clock_step() in src/timer.c from
 *                                  uvs_clock_advance() in src/sched.c);
 *                                  fall_due() in src/bound.c admits the
 *                                  task and calls uvs__due() in
 *                                  src/bound.c, which calls
 *                                  uvs__worker_push(requeue = 1) with the
 *                                  lock held (also close_locked() in
 *                                  src/close.c, UVS_DRAIN); a task its
 *                                  bounds reject never reaches the inbox
 */

#ifndef NPROD
#define NPROD 2  /* producers on other threads */
#endif
#ifndef PUSHES
#define PUSHES 2 /* schedules per producer */
#endif
#ifndef TIMERS
#define TIMERS 1 /* delayed tasks the loop pushes when they fall due */
#endif
#ifndef BUDGET
#define BUDGET 1 /* tasks per drain: small, so drains end with work left */
#endif
#ifndef BATCH
#define BATCH 2  /* tasks a drain moves out per lock hold (fill()) */
#endif
#ifndef NSUSP
#define NSUSP 1  /* suspenders: each suspends once, then resumes */
#endif
#define TOTAL (NPROD * PUSHES + TIMERS)

#define W_IDLE 0 /* worker->state */
#define W_SCHEDULED 1
#define P_IDLE 0 /* worker->phase */
#define P_READY 1
#define P_POSTED 2
#define P_PARKED 3

byte state = W_IDLE;
byte phase = P_IDLE;
byte pushed = 0;   /* exchanges on the inbox tail */
bool lnk[TOTAL];   /* item i is linked behind item i - 1 */
byte taken = 0;    /* items the drains took and have not put back */
byte ran = 0;      /* run_cbs started */
bool lock = 0;     /* sched->lock */
byte drains = 0;   /* drains executing now */
bool go = 0;       /* a drain is posted (uv_queue_work) */
bool finished = 0; /* a drain returned: its after_work_cb is due */
byte fired = 0;    /* timer pushes done */
byte nsusp = 0;    /* worker->nsuspend (lock held) */
bool sflag = 0;    /* UVS__WF_SUSPENDED: stored under the lock, read anywhere */
/* Ghosts for the suspend property: a suspend that raised the count to 1
 * has returned (its lock is let go) and no resume has brought it back to 0
 * since; `late` tasks started since then, which is allowed only to a drain
 * that was running as the suspend returned (`late_ok`), once. */
bool sus_ret = 0;
bool late_ok = 0;
byte late = 0;

inline acquire() {
  atomic { lock == 0 -> lock = 1 }
}

/* Every lock hold ends with a parked worker suspended and SCHEDULED (so
 * that no producer's CAS lists it) and nothing else parked, and with no
 * suspended worker listed ready. */
inline release() {
  atomic {
#ifndef NO_PARK_INV
    assert(phase != P_PARKED || (sflag && state == W_SCHEDULED));
#endif
#ifndef NO_READY_INV
    assert(phase != P_READY || !sflag);
#endif
    lock = 0
  }
}

/* Lock held. Listing a worker that is already listed, being drained or
 * parked would link its ready_node twice (or count it parked twice). A
 * suspended worker is parked instead: off the lists, still SCHEDULED. */
inline make_ready() {
  assert(phase == P_IDLE);
  if
  :: sflag ->
     phase = P_PARKED;
#ifdef BROKEN_PARK_IDLE
     state = W_IDLE
#endif
  :: else -> phase = P_READY
  fi
}

/* Lock held: the FIFO and head are the consumer's, the tail one load. */
inline nonempty(r) {
  r = (pushed != taken)
}

/* CAS IDLE -> SCHEDULED; won says whether it did. */
inline cas_idle(won) {
  atomic {
    if
    :: state == W_IDLE -> state = W_SCHEDULED; won = 1
    :: else -> won = 0
    fi
  }
}

/* uvs__worker_push(): exchange, link, then look at the state. */
inline push(my, won, locked) {
#ifdef BROKEN_LOOK_FIRST
  won = (state == W_IDLE);
#endif
  atomic { my = pushed; pushed++ };  /* push_exchange */
  lnk[my] = 1;                       /* push_link */
#ifdef BROKEN_LOOK_FIRST
  if
  :: won -> cas_idle(won)
  :: else -> skip
  fi;
#else
  if
  :: state == W_IDLE -> cas_idle(won)
  :: else -> won = 0
  fi;
#endif
  if
  :: won ->
     if
     :: !locked -> acquire()
     :: else -> skip
     fi;
     make_ready();
     if
     :: !locked -> release()
     :: else -> skip
     fi
  :: else -> skip
  fi;
  my = 0;
  won = 0
}

proctype Producer() {
  byte i = 0;
  byte my;
  bool won;

  do
  :: i < PUSHES -> push(my, won, 0); i++
  :: else -> break
  od
}

/* Lock held: a turn of the worker ended. Idle, or listed (or parked) again
 * if its inbox has something. */
inline turn_ended(ne, won) {
  phase = P_IDLE;
  nonempty(ne);
  if
  :: ne -> make_ready()
  :: else ->
     state = W_IDLE;
#ifndef BROKEN_NO_RECHECK
     nonempty(ne);
     if
     :: ne ->
        cas_idle(won);
        if
        :: won -> make_ready()
        :: else -> skip /* a producer won: it lists the worker */
        fi
     :: else -> skip
     fi
#endif
  fi;
  ne = 0;
  won = 0
}

/* Lock held: a parked worker is listed again, or idle. */
inline unpark(ne, won) {
  if
  :: phase == P_PARKED -> turn_ended(ne, won)
  :: else -> skip
  fi
}

/* Lock held, then let go: the count up by one; at 1 the flag is set and a
 * listed worker parked (uvs__ready_park()). The suspend has returned once its
 * lock is let go. */
inline suspend() {
  acquire();
  nsusp++;
  if
  :: nsusp == 1 ->
     sflag = 1;
#ifndef BROKEN_SUSPEND_NO_PARK
     if
     :: phase == P_READY -> phase = P_PARKED
     :: else -> skip
     fi
#else
     skip
#endif
  :: else -> skip
  fi;
  atomic {
    release();
    if
    :: sflag && !sus_ret -> sus_ret = 1; late = 0; late_ok = (drains > 0)
    :: else -> skip
    fi
  }
}

/* Lock held, then let go: the count down by one; at 0 the flag is cleared
 * and a parked worker listed again. */
inline resume(ne, won) {
  acquire();
  nsusp--;
  if
  :: nsusp == 0 ->
     atomic { sflag = 0; sus_ret = 0; late_ok = 0; late = 0 };
#ifndef BROKEN_RESUME_NO_UNPARK
     unpark(ne, won)
#else
     skip
#endif
  :: else -> skip
  fi;
  release()
}

/* Any thread: suspends the worker once, and later resumes it. */
proctype Suspender() {
  bool ne;
  bool won;

  suspend();
  resume(ne, won)
}

/* A run_cb starts. While the worker is suspended and the suspend has
 * returned, one may still start, in a drain that was running then and was
 * taking it (its look at the flag came before); no second one. With
 * -DNO_SLACK none may: spin must find the one, or the check is vacuous. */
inline start() {
  atomic {
    ran++;
    if
    :: sus_ret ->
#ifdef NO_SLACK
       assert(false);
#endif
       assert(late_ok && late == 0);
       late++
    :: else -> skip
    fi
  }
}

/* turn(): batches of at most BATCH tasks, BUDGET in all, taken under the
 * lock (fill()) once the flag says the worker is not suspended, run without
 * it (run_batch(), which looks at the flag again before each task after
 * the first); what a batch did not start goes back to the head of the FIFO
 * under the lock. A turn stops when the inbox looks empty (an item
 * exchanged but not linked yet looks empty), the budget is spent or the
 * worker is suspended. One process stands for every drain of the worker:
 * each `go` is one uv_queue_work. */
active proctype Drain() {
  byte n; /* tasks the turn took */
  byte k; /* the batch */
  byte i; /* tasks of the batch started */

end:
  do
  :: go ->
     go = 0;
     drains++;
     assert(drains == 1); /* never two drains of one worker at once */
     acquire();
     do
     :: n >= BUDGET -> break
#ifndef BROKEN_TURN_NO_CHECK
     :: n < BUDGET && sflag -> break /* turn_ended parks it */
#endif
     :: else ->
        atomic { /* fill(): the lock keeps the consumer's side still */
          do
          :: k < BATCH && n + k < BUDGET && taken < pushed && lnk[taken] ->
             taken++;
             k++
          :: else -> break
          od
        };
        if
        :: k == 0 -> break
        :: else -> skip
        fi;
        release();
        do
        :: i < k ->
#ifndef BROKEN_BATCH_NO_CHECK
           if
           :: i > 0 && sflag -> break
           :: else -> skip
           fi;
#endif
           start();
           i++
        :: else -> break
        od;
        acquire();
        taken = taken - (k - i); /* put_back() */
        n = n + i;
        k = 0;
        i = 0
     od;
     n = 0;
     release();
     drains--;
     finished = 1 /* the runner takes the lock to end the worker's turn */
  od
}

/* The loop thread: dispatches a ready worker, runs uvs__turn_ended() when a
 * drain returned, and pushes delayed tasks that fall due (lock held). */
active proctype Loop() {
  bool ne;
  bool won;
  byte my;

end:
  do
  :: phase == P_READY ->
     acquire();
     if
     :: phase == P_READY ->
        /* One drain per worker: none posted, running or returning. */
        assert(!go && drains == 0 && !finished);
        phase = P_POSTED;
        go = 1
     :: else -> skip
     fi;
     release()
  :: finished ->
     finished = 0;
     acquire();
     turn_ended(ne, won);
     release()
  :: fired < TIMERS ->
     acquire();
     push(my, won, 1);
     fired++;
     release()
  od
}

init {
  byte i = 0;

  atomic {
    do
    :: i < NPROD -> run Producer(); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NSUSP -> run Suspender(); i++
    :: else -> break
    od
  }
}

/* When nothing can move any more, every suspend was resumed, every task
 * ran and the worker is idle: no task was left in an idle or parked
 * worker. */
active proctype Quiescent() {
  timeout ->
    assert(taken == TOTAL && ran == TOTAL && phase == P_IDLE &&
           state == W_IDLE && drains == 0 && !go && !finished &&
           nsusp == 0 && !sflag)
}

/* With weak fairness, every task is eventually run. */
ltl all_run { <> (ran == TOTAL) }
