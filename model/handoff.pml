/* The idle/busy hand-off of a worker, as a Promela model for spin.
 *
 * Checked by scripts/check-handoff.sh (CI runs it): no task is lost, no two
 * drains of the worker run at once, the worker is never listed as ready
 * twice, and when everything has stopped the worker is idle with nothing
 * queued. The script also checks that the model is not vacuous: with
 * -DBROKEN_NO_RECHECK (uvs__turn_ended() skips its second look at the
 * inbox) or
 * -DBROKEN_LOOK_FIRST (a producer reads the state before its push) spin must
 * find the lost task.
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
 * src/internal.h) are not modelled: a worker listed as ready is assumed to
 * be dispatched eventually. A drain that stops early (its budget or time
 * slice is spent) and leaves tasks queued is modelled by BUDGET: tasks a
 * drain moved into its batch and puts back unstarted at the head of the
 * FIFO, under the lock, are tasks it did not take.
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
 *   push(): state load, CAS, make  uvs__worker_push() in src/worker.c
 *   make_ready()                   uvs__worker_make_ready() in
 *                                  src/worker.c: phase = READY, listed once
 *   proctype Drain (one per `go`)  turn() in src/drain.c: batches
 *                                  under the lock via fill() in
 *                                  src/drain.c, uvs__inbox_take() in
 *                                  src/worker.c (and pop() in
 *                                  src/worker.c), runs them without it,
 *                                  stops on empty-for-now or budget
 *   Loop: dispatch                 dispatch() in src/loop.c, whose
 *                                  runners post_owed() in src/loop.c
 *                                  posts with uv_queue_work once the lock
 *                                  is let go (and a runner taking the
 *                                  next ready worker, uvs__run_ready() in
 *                                  src/drain.c), and uvs__loop_turn() in
 *                                  src/drain.c: phase = POSTED, one drain
 *                                  at a time
 *   Loop: after_drain              uvs__turn_ended() in src/worker.c,
 *                                  called under the lock by the runner
 *                                  (uvs__run_ready()) or the loop turn
 *                                  (uvs__loop_turn()) when a worker's turn
 *                                  ends; which thread does it does not
 *                                  matter to the hand-off, only the lock
 *                                  and the seq_cst store and second look
 *   nonempty()                     uvs__inbox_nonempty() in src/worker.c,
 *                                  through uvs__worker_nonempty() in
 *                                  src/internal.h (a serial worker has
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
#define TOTAL (NPROD * PUSHES + TIMERS)

#define W_IDLE 0 /* worker->state */
#define W_SCHEDULED 1
#define P_IDLE 0 /* worker->phase */
#define P_READY 1
#define P_POSTED 2

byte state = W_IDLE;
byte phase = P_IDLE;
byte pushed = 0;   /* exchanges on the inbox tail */
bool lnk[TOTAL];   /* item i is linked behind item i - 1 */
byte taken = 0;    /* items the drains took */
byte ran = 0;      /* run_cbs */
bool lock = 0;     /* sched->lock */
byte drains = 0;   /* drains executing now */
bool go = 0;       /* a drain is posted (uv_queue_work) */
bool finished = 0; /* a drain returned: its after_work_cb is due */
byte fired = 0;    /* timer pushes done */

inline acquire() {
  atomic { lock == 0 -> lock = 1 }
}

inline release() {
  lock = 0
}

/* Lock held. Listing a worker that is already listed or being drained
 * would link its ready_node twice. */
inline make_ready() {
  assert(phase == P_IDLE);
  phase = P_READY
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
  fi
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

/* drain(): batches of at most BUDGET tasks in all, taken under the lock,
 * run without it; it stops when the inbox looks empty (an item exchanged
 * but not linked yet looks empty) or the budget is spent. One process
 * stands for every drain of the worker: each `go` is one uv_queue_work. */
active proctype Drain() {
  byte n;

end:
  do
  :: go ->
     go = 0;
     drains++;
     assert(drains == 1); /* never two drains of one worker at once */
     n = 0;
     do
     :: acquire();
        if
        :: n < BUDGET && taken < pushed && lnk[taken] ->
           taken++;
           n++;
           release();
           ran++
        :: else -> release(); break
        fi
     od;
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
     /* uvs__turn_ended() */
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
    od
  }
}

/* When nothing can move any more, every task ran and the worker is idle:
 * no task was left in an idle worker. */
active proctype Quiescent() {
  timeout ->
    assert(taken == TOTAL && ran == TOTAL && phase == P_IDLE &&
           state == W_IDLE && drains == 0 && !go && !finished)
}

/* With weak fairness, every task is eventually run. */
ltl all_run { <> (ran == TOTAL) }
