/* The hand-off of a wide worker (width > 1) to its lanes, as a Promela
 * model for spin. model/handoff.pml models the serial worker's.
 *
 * Checked by scripts/check-handoff.sh (CI runs it): never more lanes of
 * the worker active than its width, nor more drains than the cap; the
 * worker is never listed twice, and is listed only while SCHEDULED; when
 * everything has stopped, every task ran, nothing is queued, the worker is
 * idle, unlisted and has no lane; every task eventually runs (LTL, weak
 * fairness); and work conservation (guarantee 12): whenever nothing can
 * move but long tasks, no task waits queued while a lane is free and the
 * cap has room. The script also checks that the model is not vacuous:
 * with -DBROKEN_NO_LOOK (lane_ended() frees the lane without looking at
 * the queue), -DBROKEN_LANES_FIRST (a producer reads lanes_active before
 * its push) or -DBROKEN_NO_RELIST (serve_wide() does not list the worker
 * again after a push caught mid-way) spin must find a lost task even with
 * the work-conservation assertion left out (-DNO_CONSERVE), and with
 * -DBROKEN_ONE_LANE (serve_wide() takes one lane a call, whatever is
 * queued), which loses nothing, the work-conservation assertion must
 * fail.
 *
 * Suspend and resume (0.4), with NSUSP suspenders: a parked worker is
 * suspended and SCHEDULED at every lock release, and a suspended worker is
 * never listed there (a suspend parks a listed one at once); no lane is
 * posted for a suspended worker and no lane picks a task while it is
 * suspended; work conservation holds once every suspend has resumed.
 * Broken variants that
 * must fail: -DBROKEN_RESUME_NO_UNPARK (a resume to 0 leaves a parked
 * worker parked: a task never runs), -DBROKEN_PARK_IDLE (parking stores
 * IDLE: a producer lists the parked worker), both with the invariant of
 * parking left out (-DNO_PARK_INV) and -DNO_CONSERVE;
 * -DBROKEN_SUSPEND_NO_PARK (a suspend leaves a listed worker listed);
 * with it and the invariant of listing left out (-DNO_READY_INV),
 * -DBROKEN_SERVE_NO_PARK (serve_wide() posts lanes for a worker listed
 * before the suspend came); -DBROKEN_LANE_NO_CHECK (turn() lets a lane
 * pick while suspended).
 *
 * What it abstracts. The inbox is as in model/handoff.pml: `pushed` counts
 * exchanges on the tail, `lnk[i]` says item i is linked, `taken` counts
 * items taken in, and uvs__inbox_nonempty() is pushed != taken. Keys are
 * left out: every task is startable, so kready (the list lanes pick from)
 * is the count `kq`, and uvs__keys_lanes_wanted() is min(kq, WIDTH -
 * lanes_active + seeking) - seeking. Spin explores sequentially
 * consistent interleavings; the operations that decide the hand-off are
 * seq_cst in the C code (the exchange on the tail, the producer's loads
 * of lanes_active and state and its CAS; the store of IDLE, the look at
 * the tail and the CAS in serve_wide() and the hand-off; the store that
 * frees a lane and the look at the tail in lane_ended()). The link
 * is not: it is a release store, and C11 lets another thread see it after
 * the producer's seq_cst loads and CAS that follow it. So a producer here
 * links right after its exchange, or after its loads, or after its CAS
 * (at the latest: a producer that won the CAS then takes the lock, which
 * publishes the link). Without that, no run needs serve_wide() to list
 * the worker again after a push caught mid-way, and -DBROKEN_NO_RELIST
 * passes. post_lane() raises lanes_active with a release store: a
 * producer that misses it only lists the worker once more. What a holder
 * of the lock does that other threads see only under the lock (taking
 * the inbox in, picking a task, the seeking count, running the task) is
 * one step with what comes before or after it. Rings of the loop's
 * doorbell (uvs__ring() in src/bell.h) are not modelled: a listed
 * worker is served as soon as the cap leaves room. Other workers'
 * runners, which share the cap, are not modelled either: CAP counts this
 * worker's lanes only. A lane's look at the suspend flag, its pick and its
 * run are one step, so the slack a suspend from another thread allows
 * (model/handoff.pml checks it) does not arise here.
 * Closing and cancelling are left out.
 *
 * Work conservation needs a moment when a lane would be missed: a lane's
 * run of a task is short, or long, and a long one ends only when nothing
 * else in the model can move (Quiescent()). Then every lane that exists
 * is running a long task, and a task still queued has a lane coming for
 * it only if the worker is listed, which the loop serves unless the cap
 * is reached: so lanes_active == WIDTH or drains == CAP must hold.
 * -DNO_CONSERVE leaves that assertion out, to tell a broken variant that
 * loses a task from one that only leaves a lane unposted.
 *
 * Where each part of the model is in the C code. Name functions, never line
 * numbers: scripts/check-handoff.sh fails if a function named here with
 * "in src/FILE.c" (or .h) has no definition in that file, if any other
 * function named here with parentheses is neither an inline or proctype of
 * this model nor defined in a file of src/, or if this comment cites line
 * numbers.
 *
 *   model                          C code
 *   -----------------------------  -------------------------------------
 *   push(): exchange, link         push_node() in src/worker.c, called by
 *                                  uvs__inbox_push() in src/worker.c:
 *                                  exchange on inbox_tail (seq_cst), then
 *                                  release store of prev->next
 *   push(): lanes_active, state,   uvs__worker_push() in src/worker.c,
 *   CAS, make_ready()              calling the one hand-off,
 *                                  uvs__worker_ready() in src/worker.c,
 *                                  for a worker with keys: seq_cst loads of
 *                                  w->lanes_active (none wanted if it is
 *                                  at the width) and of w->state, CAS
 *                                  IDLE -> SCHEDULED, then under the lock
 *                                  uvs__ready_list() in src/ready.c:
 *                                  listed on wide_ready once, or, if
 *                                  suspended (uvs__suspended() in
 *                                  src/state.h), parked, still SCHEDULED
 *   Loop: serve a listed worker    dispatch() in src/loop.c, while
 *                                  uvs__room() has room, calling
 *                                  serve_wide() in src/loop.c: off the
 *                                  list, store IDLE, if suspended
 *                                  want_lanes() (which parks it) and no
 *                                  more, else take the inbox in,
 *                                  post_lane() for each lane wanted; at
 *                                  the cap, want_lanes() (CAS back to
 *                                  SCHEDULED and list again); after a push
 *                                  caught mid-way, want_lanes()
 *   intake(), then `busy`          uvs__worker_intake() in src/worker.c,
 *                                  filing each task with
 *                                  uvs__keys_take_in() in src/keys.c, and
 *                                  uvs__inbox_take() in src/worker.c:
 *                                  stops at an item not linked yet; then
 *                                  the look at the tail
 *                                  (uvs__inbox_nonempty() in
 *                                  src/worker.c) says UV_EAGAIN
 *   wanted()                       uvs__keys_lanes_wanted() in src/keys.c
 *   post_lane()                    post_lane() in src/loop.c: the first
 *                                  free lane, seeking
 *                                  (uvs__keys_seeking() in src/keys.c),
 *                                  lanes_active and drains up, and the
 *                                  lane owed a post; post_owed() in
 *                                  src/loop.c calls uv_queue_work for it
 *                                  once dispatch() is done and the lock
 *                                  is let go
 *   want_lanes()                   uvs__worker_ready() in src/worker.c,
 *                                  the one hand-off: below the width
 *                                  (always so where the model calls it),
 *                                  CAS IDLE -> SCHEDULED, and list on
 *                                  success
 *   proctype Lane (one per lane;   lane_work() in src/loop.c running
 *   each `go` is one               uvs__lane_turn() in src/drain.c, which
 *   uv_queue_work)                 is turn() in src/drain.c: under the
 *                                  lock, unless suspended (then the lane
 *                                  ends), fill() in src/drain.c stops
 *                                  seeking, takes the inbox in and picks
 *                                  one task (uvs__keys_pick() in
 *                                  src/keys.c); it runs it without the
 *                                  lock, and goes on until nothing is
 *                                  left to pick or BUDGET is spent
 *   Loop: lane_done()              lane_work_done() in src/loop.c, its
 *                                  after_work_cb on the loop thread,
 *                                  calling lane_ended() in src/loop.c:
 *                                  drains down, seeking off, seq_cst
 *                                  store of lanes_active - 1, then
 *                                  uvs__worker_nonempty() in
 *                                  src/worker.c (inbox tail, seq_cst,
 *                                  or kready) and want_lanes()
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
 *                                  lock held, or, with per-key bounds,
 *                                  uvs__worker_file() in src/worker.c,
 *                                  which files it under its key and makes
 *                                  the same look at lanes_active and CAS;
 *                                  a task its bounds reject never reaches
 *                                  the queue
 *   proctype Suspender             suspend() in src/close.c, from
 *                                  uvs_worker_suspend() and
 *                                  uvs_worker_resume() in src/close.c: the
 *                                  count under the lock, the flag set at 1
 *                                  (and a listed worker parked at once:
 *                                  uvs__ready_park() in src/ready.c) and
 *                                  cleared at 0, then unpark()
 *   unpark(), turn_ended()         uvs__unpark() in src/worker.c, calling
 *                                  uvs__turn_ended() in src/worker.c: idle
 *                                  (store IDLE, second look, CAS) or listed
 *                                  again
 *   Quiescent()                    none: the model's checks when nothing
 *                                  else can move
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
#define BUDGET 1 /* tasks per lane turn: small, so lanes end with work left */
#endif
#ifndef CAP
#define CAP 2    /* sched->cap: drains posted or running at once */
#endif
#ifndef NSUSP
#define NSUSP 0  /* suspenders: each suspends once, then resumes */
#endif
#define WIDTH 2  /* lanes of the worker; Quiescent() names each one */
#define TOTAL (NPROD * PUSHES + TIMERS)

#define W_IDLE 0 /* worker->state */
#define W_SCHEDULED 1
#define P_IDLE 0 /* worker->phase */
#define P_READY 1 /* on sched->wide_ready */
#define P_PARKED 3 /* suspended, off the lists */

byte state = W_IDLE;
byte phase = P_IDLE;
byte pushed = 0;      /* exchanges on the inbox tail */
bool lnk[TOTAL];      /* item i is linked behind item i - 1 */
byte taken = 0;       /* items taken in */
byte kq = 0;          /* kready: tasks taken in, not picked */
byte ran = 0;         /* run_cbs */
bool lock = 0;        /* sched->lock */
byte lanes_active = 0; /* w->lanes_active */
byte drains = 0;      /* sched->drains: here, lanes posted or running */
byte seeking = 0;     /* keys->seeking: lanes posted that have not picked */
bool lactive[WIDTH];  /* lane->active: posted, running or returning */
bool seek[WIDTH];     /* lane->seeking */
bool go[WIDTH];       /* the lane is posted (uv_queue_work) */
bool fin[WIDTH];      /* the lane returned: its after_work_cb is due */
bool stalled[WIDTH];  /* the lane runs a long task */
byte fired = 0;       /* timer pushes done */
byte nsusp = 0;       /* worker->nsuspend (lock held) */
bool sflag = 0;       /* UVS__WF_SUSPENDED: stored under the lock */

inline acquire() {
  atomic { lock == 0 -> lock = 1 }
}

/* Every lock hold ends with a parked worker suspended and SCHEDULED, and
 * with no suspended worker listed. */
inline release() {
#ifndef NO_PARK_INV
  assert(phase != P_PARKED || (sflag && state == W_SCHEDULED));
#endif
#ifndef NO_READY_INV
  assert(phase != P_READY || !sflag);
#endif
  lock = 0
}

/* Lock held. Listing (or parking) a worker that is already listed or
 * parked would link its ready_node twice; only a CAS to SCHEDULED lists
 * it. A suspended worker is parked instead, and stays SCHEDULED. */
inline make_ready() {
  assert(phase == P_IDLE && state == W_SCHEDULED);
  if
  :: sflag ->
     phase = P_PARKED;
#ifdef BROKEN_PARK_IDLE
     state = W_IDLE
#endif
  :: else -> phase = P_READY
  fi
}

/* CAS IDLE -> SCHEDULED; won says whether it did. Each caller makes it
 * one step (atomic) with what it does under the lock around it. */
inline cas_idle(won) {
  if
  :: state == W_IDLE -> state = W_SCHEDULED; won = 1
  :: else -> won = 0
  fi
}

/* Lock held. */
inline want_lanes(won) {
  cas_idle(won);
  if
  :: won -> make_ready()
  :: else -> skip /* listed, or a producer that won lists it */
  fi
}

/* Lock held: anything in the inbox (the tail, seq_cst) or kready. */
inline nonempty(r) {
  r = (pushed != taken || kq > 0)
}

/* Lock held. Takes linked items into kready, up to the first one not
 * linked yet. No other thread reads what it changes without the lock, and
 * links only appear, so its reads stand for reads at the last one's
 * instant: one step. */
inline intake() {
  do
  :: taken < pushed && lnk[taken] -> taken++; kq++
  :: else -> break
  od
}

/* uvs__keys_lanes_wanted(), with every task startable. */
inline wanted(want) {
  want = WIDTH - lanes_active + seeking;
  if
  :: kq < want -> want = kq
  :: else -> skip
  fi;
  if
  :: want > seeking -> want = want - seeking
  :: else -> want = 0
  fi
}

/* Lock held, loop thread: lanes_active < WIDTH and room in the cap. */
inline post_lane(i) {
  assert(lanes_active < WIDTH && drains < CAP);
  assert(sflag == 0); /* a suspended worker holds no pool thread */
  i = 0;
  do
  :: lactive[i] -> i++
  :: else -> break
  od;
  lactive[i] = 1;
  seek[i] = 1;
  seeking++;
  lanes_active++;
  drains++;
  go[i] = 1;
  i = 0
}

/* uvs__worker_push() by a producer: exchange, link, load lanes_active,
 * load state, CAS, list under the lock. Each load and the CAS is a step:
 * a producer that saw SCHEDULED must not list the worker when it is IDLE
 * again by the time a CAS would run. The link comes right after the
 * exchange, or after the loads, or after the CAS (see the header). */
inline push(my, won, late, look) {
#ifdef BROKEN_LANES_FIRST
  look = (lanes_active < WIDTH);
#endif
  atomic { my = pushed; pushed++ };
  if
  :: lnk[my] = 1
  :: late = 1
  :: late = 2
  fi;
#ifndef BROKEN_LANES_FIRST
  look = (lanes_active < WIDTH);
#endif
  if
  :: look -> look = (state == W_IDLE)
  :: else -> skip /* every lane busy: lane_done() looks at the queue */
  fi;
  if
  :: late == 1 -> lnk[my] = 1; late = 0
  :: else -> skip
  fi;
  if
  :: look -> atomic { cas_idle(won); look = 0 }
  :: else -> skip
  fi;
  if
  :: late == 2 -> lnk[my] = 1; late = 0
  :: else -> skip
  fi;
  if
  :: won -> atomic { lock == 0 -> make_ready(); won = 0 }
  :: else -> skip
  fi;
  my = 0
}

proctype Producer() {
  byte i = 0;
  byte my;
  bool won;
  byte late;
  bool look;

  do
  :: i < PUSHES -> push(my, won, late, look); i++
  :: else -> break
  od
}

/* fill() in a lane's turn, lock held: stops seeking, takes the inbox in
 * and picks one task, if any. The task's run, short or long, is folded
 * into the same step: nothing another thread reads happens between. */
inline fill(me, n, got) {
#ifndef BROKEN_LANE_NO_CHECK
  if
  :: sflag -> got = 0 /* turn() stops: lane_ended() parks the worker */
  :: else ->
#endif
  if
  :: seek[me] -> seek[me] = 0; seeking--
  :: else -> skip
  fi;
  intake();
  if
  :: kq > 0 ->
     assert(!sflag); /* no task starts while suspended */
     kq--;
     got = 1;
     n++;
     ran++;
     if
     :: skip
     :: stalled[me] = 1 /* a long run_cb */
     fi
  :: else -> got = 0
  fi
#ifndef BROKEN_LANE_NO_CHECK
  fi
#endif
}

/* One lane: each `go` is one uv_queue_work of it, a turn of one task at a
 * time, at most BUDGET of them, picked under the lock and run without
 * it. A long run ends only when nothing else can move (Quiescent()). */
proctype Lane(byte me) {
  byte n;
  bool got;

end:
  do
  :: atomic { go[me] && lock == 0 -> go[me] = 0; fill(me, n, got) };
     do
     :: atomic {
          !stalled[me] && got && n < BUDGET && lock == 0 -> fill(me, n, got)
        }
     :: atomic {
          !stalled[me] && (!got || n >= BUDGET) ->
          fin[me] = 1; n = 0; got = 0; break
        }
     od
  od
}

/* lane_work_done(), on the loop thread: frees the lane with a seq_cst
 * store, then looks at the queue. */
inline lane_done(i, ne, won) {
  atomic {
    fin[i] && lock == 0 ->
    lock = 1;
    fin[i] = 0;
    drains--;
    lactive[i] = 0;
    if
    :: seek[i] -> seek[i] = 0; seeking--
    :: else -> skip
    fi;
    lanes_active--
  };
  atomic {
#ifndef BROKEN_NO_LOOK
    nonempty(ne);
    if
    :: ne -> want_lanes(won)
    :: else -> skip
    fi;
    ne = 0;
    won = 0;
#endif
    release()
  }
}

/* The loop thread: serves the listed worker while the cap leaves room,
 * runs a lane's after_work_cb, and pushes delayed tasks that fall due. */
active proctype Loop() {
  bool busy;
  bool ne;
  bool won;
  byte want;
  byte i;

end:
  do
  :: atomic {
       phase == P_READY && drains < CAP && lock == 0 ->
       lock = 1;
       /* serve_wide(): off the list, then IDLE (seq_cst) */
       assert(state == W_SCHEDULED);
       phase = P_IDLE;
       state = W_IDLE
     };
     atomic {
#ifndef BROKEN_SERVE_NO_PARK
       if
       :: sflag ->
          want_lanes(won); /* parks it, as listed before the suspend */
          won = 0;
          release();
          goto end /* back to the loop's choices */
       :: else -> skip
       fi;
#endif
       intake()
     };
     busy = (pushed != taken); /* UV_EAGAIN: the tail shows more */
     atomic {
       wanted(want);
#ifdef BROKEN_ONE_LANE
       if
       :: want > 1 -> want = 1
       :: else -> skip
       fi;
#endif
       do
       :: want > 0 && drains < CAP -> post_lane(i); want--
       :: else -> break
       od;
       if
       :: want > 0 ->
          /* the cap stopped it: back on the list */
          cas_idle(won);
          if
          :: won -> make_ready()
          :: else -> skip
          fi
       :: else ->
#ifndef BROKEN_NO_RELIST
          if
          :: busy -> want_lanes(won)
          :: else -> skip
          fi
#else
          skip
#endif
       fi;
       busy = 0;
       want = 0;
       won = 0;
       release()
     }
  :: lane_done(0, ne, won)
  :: lane_done(1, ne, won)
  :: atomic {
       /* A timer push: fire() and uvs__due(), lock held, so no lane takes
        * the inbox in before the link, and only the CAS meets other
        * threads' steps: one step. */
       fired < TIMERS && lock == 0 ->
       lock = 1;
       lnk[pushed] = 1;
       pushed++;
       if
       :: lanes_active < WIDTH -> want_lanes(won)
       :: else -> skip
       fi;
       won = 0;
       fired++;
       release()
     }
  od
}

/* Lock held: uvs__turn_ended() of a parked worker. The store of IDLE and
 * the second look are steps of their own, as a producer may meet them. */
inline turn_ended(ne, won) {
  atomic {
    phase = P_IDLE;
    nonempty(ne);
    if
    :: ne -> make_ready()
    :: else -> state = W_IDLE
    fi
  };
  atomic {
    if
    :: !ne ->
       nonempty(ne);
       if
       :: ne -> want_lanes(won)
       :: else -> skip
       fi
    :: else -> skip
    fi;
    ne = 0;
    won = 0
  }
}

/* Lock held: a parked worker is listed again, or idle. */
inline unpark(ne, won) {
  if
  :: phase == P_PARKED -> turn_ended(ne, won)
  :: else -> skip
  fi
}

/* Any thread: suspends the worker once, and later resumes it, each under
 * the lock: the count, the flag set at 1 (and a listed worker parked) and
 * cleared at 0, then a parked worker listed again. */
proctype Suspender() {
  bool ne;
  bool won;

  atomic {
    lock == 0 ->
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
    release()
  };
  atomic {
    lock == 0 ->
    lock = 1;
    nsusp--;
    if
    :: nsusp == 0 -> sflag = 0
    :: else -> skip
    fi
  };
#ifndef BROKEN_RESUME_NO_UNPARK
  if
  :: nsusp == 0 -> unpark(ne, won)
  :: else -> skip
  fi;
#endif
  release()
}

init {
  byte i = 0;

  atomic {
    do
    :: i < NPROD -> run Producer(); i++
    :: else -> break
    od;
    run Lane(0);
    run Lane(1);
    i = 0;
    do
    :: i < NSUSP -> run Suspender(); i++
    :: else -> break
    od
  }
}

/* Runs when nothing else can move. Then every lane that exists runs a
 * long task: a task still queued while a lane is free and the cap has
 * room has no lane coming (guarantee 12). One long task ends, and the
 * model goes on; once none is left, everything ran and the worker is idle
 * and unlisted, with no lane. */
active proctype Quiescent() {
end:
  do
  :: timeout ->
#ifndef NO_CONSERVE
     assert(!((pushed != taken || kq > 0) &&
              lanes_active < WIDTH && drains < CAP));
#endif
     if
     :: stalled[0] -> stalled[0] = 0
     :: stalled[1] -> stalled[1] = 0
     :: else ->
        assert(pushed == TOTAL && taken == TOTAL && kq == 0 &&
               ran == TOTAL && state == W_IDLE && phase == P_IDLE &&
               lanes_active == 0 && drains == 0 && seeking == 0 &&
               nsusp == 0 && !sflag);
        break
     fi
  od
}

/* With weak fairness, every task is eventually run. */
ltl all_run { <> (ran == TOTAL) }
