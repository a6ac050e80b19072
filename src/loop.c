/* The loop thread's side of a scheduler: its libuv handles, and settle(),
 * which does what the doorbell (uvs__ring(), internal.h) says is owed:
 * timers, drains posted, loop turns, hand-backs delivered, space
 * callbacks, closes.
 *
 * Only the loop thread acts on libuv (uv_queue_work, uv_timer_*, uv_idle_*,
 * uv_ref, uv_close). The lock (sched->lock) guards the ready lists, the
 * timer wheel, each worker's FIFO and batch bookkeeping, and closes.
 */

#include "internal.h"

#include <limits.h>
#include <stdlib.h>

/* One of a scheduler's runners: a uv_queue_work item that serves ready
 * pool workers in turn. */
struct uvs__runner_s {
  uv_work_t work;
  uvs_sched_t* s;
  uvs_worker_t* first;
  unsigned group;             /* whose count it is in: its worker's (0.4) */
  struct uvs__runner_s* next; /* on sched->runner_free */
};

/* What a timer callback owes besides what was rung: due tasks to fire.
 * Above every UVS__BELL_ bit but the settling mark. */
#define FIRE_TIMERS (1u << 16)

/* How many times one settle() takes the bits rung meanwhile before it
 * leaves the rest to the idle handle: work that other threads hand back
 * without pause must not keep the loop from polling. */
#define SETTLE_ROUNDS 4


static void settle(uvs_sched_t* s, unsigned why);


static void idle_cb(uv_idle_t* handle) {
  settle(uvs__container_of(handle, uvs_sched_t, idle), 0);
}


static void timer_cb(uv_timer_t* handle) {
  settle(uvs__container_of(handle, uvs_sched_t, timer),
         FIRE_TIMERS | UVS__BELL_TIMER);
}


static void async_cb(uv_async_t* handle) {
  uvs_sched_t* s;

  s = uvs__container_of(handle, uvs_sched_t, async);
  if (uvs__load_acq(&s->owed) == 0)
    return;
  uv_mutex_lock(&s->lock);
  s->stats.wakeups++;
  uv_mutex_unlock(&s->lock);
  /* Work handed over from another thread runs now, in this callback, as a
   * mutex-and-uv_async bridge would run it: not one loop iteration later
   * in the idle phase, unless the idle phase of this iteration had a turn
   * already. */
  settle(s, 0);
}


/* The check phase ends the poll phase and the loop iteration. What I/O
 * callbacks rang on the loop thread is done here, before the loop goes
 * round again: a pool worker they made ready gets its drain at the end of
 * the poll phase that made it ready. The next loop turn may run in the
 * next iteration, after its timers. */
static void check_cb(uv_check_t* handle) {
  uvs_sched_t* s;

  s = uvs__container_of(handle, uvs_sched_t, check);
  if (uvs__load_acq(&s->owed) != 0)
    settle(s, 0);
  s->flags &= ~UVS__SF_TURNED;
}


static void runner_work(uv_work_t* req) {
  uvs__runner_t* r;

  r = uvs__container_of(req, uvs__runner_t, work);
  uvs__tls.pool = 1;
  uvs__run_ready(r->s, r->first, &r->group);
}


static void runner_done(uv_work_t* req, int status) {
  uvs__runner_t* r;
  uvs_sched_t* s;

  (void) status; /* never cancelled with uv_cancel */
  r = uvs__container_of(req, uvs__runner_t, work);
  s = r->s;
  uv_mutex_lock(&s->lock);
  s->drains--;
  s->groups[r->group].drains--;
  r->next = s->runner_free;
  s->runner_free = r;
  uv_mutex_unlock(&s->lock);
  /* Its place is free for a worker still waiting on the ready list. */
  settle(s, UVS__BELL_DISPATCH);
}


/* ---- the lanes of a wide worker (width > 1) ----------------------------
 * How many run, and when one is posted. A lane is one uv_queue_work item
 * of the worker's (keys.c holds them with the key table); its turn is
 * drain.c's, with one task at a time from kready. dispatch() serves each
 * listed wide worker here: a lane for every task that could start, as far
 * as the width and the scheduler's cap leave room (guarantee 12). A lane
 * that ends frees its place and, if anything is left, lists the worker
 * again. Lock held throughout, on the loop thread. */

static void lane_work(uv_work_t* req) {
  uvs__lane_t* lane;

  lane = uvs__container_of(req, uvs__lane_t, work);
  uvs__tls.pool = 1;
  uvs__lane_turn(lane);
}


/* Takes one more lane of a wide worker, to be posted once the lock is let
 * go; lanes_active < width says one of its lanes is free. */
static void post_lane(uvs_sched_t* s, uvs_worker_t* w) {
  uvs__lane_t* lane;
  unsigned i;

  for (i = 0; uvs__keys_lane(w, i)->active; i++)
    ;
  lane = uvs__keys_lane(w, i);
  lane->active = 1;
  lane->seeking = 1;
  uvs__keys_seeking(w, 1);
  uvs__store_rel(&w->lanes_active, w->lanes_active + 1);
  s->drains++;
  uvs__group_of(w)->drains++;
  s->stats.drains++;
  /* Posted once the lock is let go (post_owed): the pool thread it
   * wakes would otherwise find the lock held and sleep on it again. */
  lane->owed_next = s->lane_owed;
  s->lane_owed = lane;
}


/* Takes a lane for each task of a listed wide worker that one could
 * start, as far as the width, the caps (the scheduler's, its group's)
 * and *left leave room. Returns 0 if a cap left it wanting more: then it is
 * listed again (uvs__worker_ready() in worker.c), behind the others waiting.
 * Lock held. */
static int serve_wide(uvs_sched_t* s, uvs_worker_t* w, unsigned* left) {
  uvs__group_t* g;
  unsigned want;
  int busy;

  g = uvs__group_of(w);
  uvs__queue_remove(&w->ready_node);
  uvs__store_rel(&g->nready, g->nready - 1);
  w->phase = UVS__P_IDLE;
  /* From here a producer lists it again; what came before is taken in
   * below. */
  __atomic_store_n(&w->state, UVS__WS_IDLE, __ATOMIC_SEQ_CST);
  if (uvs__cancelling(w)) {
    uvs__ring(s, UVS__BELL_CLOSE); /* late arrivals don't run: the loop
                                    * sweeps them */
    return 1;
  }
  if (uvs__suspended(w)) {
    if (uvs__worker_nonempty(w))
      uvs__worker_ready(w, 1); /* parked, as if listed before the suspend */
    return 1;
  }
  busy = uvs__worker_intake(w) == UV_EAGAIN;
  want = uvs__keys_lanes_wanted(w);
  while (want > 0 && *left > 0 && uvs__group_room(s, g)) {
    post_lane(s, w);
    want--;
    --*left;
  }
  if (want > 0) {
    /* Listed again, behind the wide workers of its group that wait. */
    uvs__worker_ready(w, 1);
    return 0;
  }
  /* A push caught between its two steps, whose producer may have seen the
   * worker listed: look again once it has linked. */
  if (busy)
    uvs__worker_ready(w, 1);
  return 1;
}


/* A lane ended: its place is free, and what it leaves behind asks for a
 * lane again. */
static void lane_ended(uvs__lane_t* lane) {
  uvs_worker_t* w;

  w = lane->w;
  w->sched->drains--;
  uvs__group_of(w)->drains--;
  lane->active = 0;
  if (lane->seeking) {
    lane->seeking = 0;
    uvs__keys_seeking(w, -1);
  }
  /* The other half of uvs__worker_push()'s hand-off for a wide worker:
   * a producer that found every lane busy wanted none; this end looks at
   * the queue after it frees a lane, so one of the two sees the other. */
  __atomic_store_n(&w->lanes_active, w->lanes_active - 1, __ATOMIC_SEQ_CST);
  if (w->flags & UVS__WF_CLOSING)
    uvs__ring(w->sched, UVS__BELL_CLOSE); /* the loop sweeps and completes
                                           * closes (close.c) */
  if (uvs__worker_nonempty(w))
    uvs__worker_ready(w, 1);
}


/* A lane of a wide worker ended (loop thread). */
static void lane_work_done(uv_work_t* req, int status) {
  uvs__lane_t* lane;
  uvs_sched_t* s;

  (void) status; /* never cancelled with uv_cancel */
  lane = uvs__container_of(req, uvs__lane_t, work);
  s = lane->w->sched;
  uv_mutex_lock(&s->lock);
  lane_ended(lane);
  uv_mutex_unlock(&s->lock);
  settle(s, UVS__BELL_DISPATCH);
}


/* Work conservation (guarantee 12): a drain for every ready pool worker,
 * as far as the cap allows, oldest first; a lane for every task a wide
 * worker could start. Never a guess of how long tasks take. At most max
 * drains and lanes in all. Lock held. */
static void dispatch(uvs_sched_t* s, unsigned max) {
  unsigned order[UVS__GROUPS_MAX];
  uvs__queue_t wide;
  uvs__runner_t* r;
  uvs__group_t* g;
  uvs_worker_t* w;
  unsigned group;
  unsigned n;
  unsigned i;

  /* Each listed wide worker once: one that lists itself again (it rings
   * for a dispatch) waits for the next call. Groups in the order their
   * shares say (uvs__wide_order). */
  n = uvs__wide_order(s, order);
  for (i = 0; i < n && max > 0 && uvs__room(s); i++) {
    g = &s->groups[order[i]];
    uvs__queue_init(&wide);
    uvs__queue_move(&g->wide_ready, &wide);
    while (max > 0 && uvs__group_room(s, g) && !uvs__queue_empty(&wide)) {
      w = uvs__container_of(wide.next, uvs_worker_t, ready_node);
      if (!serve_wide(s, w, &max))
        break;
    }
    uvs__queue_move(&g->wide_ready, &wide);
    uvs__queue_move(&wide, &g->wide_ready);
  }

  while (max > 0 && uvs__room(s) && s->runner_free != NULL &&
         (w = uvs__ready_take(s, 0, &group)) != NULL) {
    r = s->runner_free;
    s->runner_free = r->next;
    r->first = w;
    r->group = group;
    s->drains++;
    s->stats.drains++;
    r->next = s->runner_owed;
    s->runner_owed = r;
    max--;
  }
}


/* Posts what dispatch() took, oldest first (loop thread). Called once the
 * lock is let go: each uv_queue_work wakes a pool thread, whose drain
 * takes the lock first thing, and would sleep on it again if the loop
 * still held it. */
static void post_owed(uvs_sched_t* s) {
  uvs__runner_t* r;
  uvs__runner_t* rev;
  uvs__lane_t* lane;
  uvs__lane_t* lrev;

  for (lrev = NULL; (lane = s->lane_owed) != NULL; lrev = lane) {
    s->lane_owed = lane->owed_next;
    lane->owed_next = lrev;
  }
  while ((lane = lrev) != NULL) {
    lrev = lane->owed_next;
    if (uv_queue_work(s->loop, &lane->work, lane_work, lane_work_done) != 0)
      abort();
  }
  for (rev = NULL; (r = s->runner_owed) != NULL; rev = r) {
    s->runner_owed = r->next;
    r->next = rev;
  }
  while ((r = rev) != NULL) {
    rev = r->next;
    if (uv_queue_work(s->loop, &r->work, runner_work, runner_done) != 0)
      abort(); /* only fails for a NULL work_cb */
  }
}


void uvs__post_first(uvs_sched_t* s) {
  /* One such post between two settles at most (SPEC 0.5, start latency):
   * a callback's later ready workers wait for the settle() that follows it
   * (their rings started the idle handle), or for a drain posted already
   * to take them, so that a callback that schedules many tasks pays one
   * thread wake. A done_cb that settle() delivers, or a loop worker's
   * task, is such a callback too: settle() posts the rest once it is
   * done with them. Before the loop first ran the scheduler (uv_run's
   * first iteration) nothing starts: its idle handle posts then. */
  if ((s->flags & (UVS__SF_POSTED | UVS__SF_RAN)) != UVS__SF_RAN)
    return;
  uv_mutex_lock(&s->lock);
  dispatch(s, 1);
  uv_mutex_unlock(&s->lock);
  if (s->runner_owed != NULL || s->lane_owed != NULL) {
    s->flags |= UVS__SF_POSTED;
    post_owed(s);
  }
}


/* Bounded workers that were full and fell to low_water: space_cb; keys
 * that were full and fell to half their bound: key_space_cb. */
static void call_space_cbs(uvs_sched_t* s) {
  uvs__queue_t* q;
  uvs_worker_t* w;
  uint64_t key;
  unsigned owed;

  uv_mutex_lock(&s->lock);
  while ((q = uvs__queue_shift(&s->space)) != NULL) {
    w = uvs__container_of(q, uvs_worker_t, space_node);
    owed = w->space_owed;
    w->space_owed = 0;
    if (owed & UVS__OWE_SPACE) {
      uv_mutex_unlock(&s->lock);
      w->space_cb(w);
      uv_mutex_lock(&s->lock);
    }
    /* A close from a callback takes the rest off the list. */
    while ((owed & UVS__OWE_KEYS) && uvs__keys_owed_take(w, &key)) {
      uv_mutex_unlock(&s->lock);
      w->key_space_cb(w, key);
      uv_mutex_lock(&s->lock);
    }
  }
  uv_mutex_unlock(&s->lock);
}


/* Does what owed says, in the order that lets each step's work reach the
 * next: due tasks make workers ready, drains are posted, the loop turn
 * runs, hand-backs are delivered (their done_cbs may schedule more, rung
 * for the next round), space callbacks, closes, and the timer is armed
 * for what is due next. Returns 0 if the scheduler's handles began to
 * close: nothing of it may be touched after. */
static int settle_once(uvs_sched_t* s, unsigned owed, unsigned* later) {
  uvs__queue_t due;
  int closes;

  if (owed & (FIRE_TIMERS | UVS__BELL_DISPATCH)) {
    uv_mutex_lock(&s->lock);
    if (owed & FIRE_TIMERS) {
      uvs__queue_init(&due);
      uvs__timers_due(s, &due);
      uvs__fall_due(&due);
    }
    dispatch(s, UINT_MAX);
    uv_mutex_unlock(&s->lock);
    post_owed(s);
  }
  /* One loop turn per loop iteration, whichever callback comes first (the
   * idle phase, the async callback in the poll phase, the check phase),
   * so that timers and I/O run between two turns (guarantee 7). */
  if (owed & UVS__BELL_TURN) {
    if (s->flags & UVS__SF_TURNED)
      *later |= UVS__BELL_TURN;
    else if (uvs__loop_turn(s))
      s->flags |= UVS__SF_TURNED;
  }
  if (owed & UVS__BELL_DELIVER)
    uvs__deliver(s);
  if (owed & UVS__BELL_SPACE)
    call_space_cbs(s);
  if ((owed & UVS__BELL_CLOSE) || (s->flags & UVS__SF_CLOSES)) {
    closes = uvs__finish_closes(s);
    if (closes == UVS__CLOSES_DONE)
      return 0;
    if (closes == UVS__CLOSES_PENDING)
      s->flags |= UVS__SF_CLOSES;
    else
      s->flags &= ~UVS__SF_CLOSES;
  }
  if (owed & UVS__BELL_TIMER) {
    uv_mutex_lock(&s->lock);
    uvs__rearm_timer(s, timer_cb);
    uv_mutex_unlock(&s->lock);
  }
  return 1;
}


/* The loop's one answer to the doorbell: takes the bits rung (plus why,
 * what the calling callback owes by its nature) and does what they say,
 * again while more are rung meanwhile, SETTLE_ROUNDS times at most. While
 * it runs, owed holds the settling mark, so that other threads' rings
 * send no async: this call looks again before it ends. */
static void settle(uvs_sched_t* s, unsigned why) {
  unsigned owed;
  unsigned later;
  unsigned mark;
  unsigned parked;
  int round;

  uvs__publish_now(s);
  s->flags = (s->flags & ~UVS__SF_POSTED) | UVS__SF_SETTLING | UVS__SF_RAN;
  later = 0;
  owed = __atomic_exchange_n(&s->owed, UVS__BELL_SETTLING, __ATOMIC_ACQ_REL);
  owed = (owed & ~UVS__BELL_SETTLING) | why;
  for (round = 1;; round++) {
    if (!settle_once(s, owed, &later))
      return;
    mark = UVS__BELL_SETTLING;
    if (__atomic_compare_exchange_n(&s->owed, &mark, 0, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
      break; /* nothing rung meanwhile */
    if (round == SETTLE_ROUNDS) {
      later |= __atomic_exchange_n(&s->owed, 0, __ATOMIC_ACQ_REL) &
               ~UVS__BELL_SETTLING;
      break;
    }
    owed = __atomic_exchange_n(&s->owed, UVS__BELL_SETTLING, __ATOMIC_ACQ_REL) &
           ~UVS__BELL_SETTLING;
  }
  s->flags &= ~(UVS__SF_SETTLING | UVS__SF_POSTED);
  /* Suspended workers' count before owed, and again after. A resume
   * lists its worker, and rings for it, before the count falls
   * (uvs__unpark), so a count seen at 0 here comes with that ring seen
   * below, and the idle handle holds the loop until the worker's turn;
   * read only after owed, a resume in between let uv_run return with the
   * worker's tasks unrun (valgrind's timing found it:
   * suspend_foreign_threads_loop). A suspend counts its worker before it
   * rings (uvs__ready_list, uvs__ready_park): the second read sees a
   * count that rose after owed was read. */
  parked = uvs__load_acq(&s->parked);

  /* What is left (the next loop turn, or what the rounds did not reach)
   * goes to the idle handle, which keeps the loop from blocking in its
   * poll; with nothing owed the loop may block. A ring from another thread
   * after this point finds owed clear and sends the async. */
  if (later != 0)
    __atomic_fetch_or(&s->owed, later, __ATOMIC_ACQ_REL);
  if (uvs__load_acq(&s->owed) != 0)
    uv_idle_start(&s->idle, idle_cb);
  else
    uv_idle_stop(&s->idle);
  /* Pending work keeps the loop alive through its own handles and requests
   * (timer, idle, uv_work); the async handle only keeps it alive on
   * request, while closing, or while suspended workers hold work. */
  if (s->keep_alive || uvs__load_rlx(&s->state) == UVS__SS_CLOSING ||
      parked != 0 || uvs__load_acq(&s->parked) != 0)
    uv_ref((uv_handle_t*) &s->async);
  else
    uv_unref((uv_handle_t*) &s->async);
}


/* libuv's pool size, read as libuv 1.44 reads it, which has no call that
 * tells: UV_THREADPOOL_SIZE through atoi() into an unsigned, 0 taken as 1,
 * at most 1024; 4 without it. */
static unsigned pool_size(void) {
  const char* v;
  unsigned n;

  v = getenv("UV_THREADPOOL_SIZE");
  n = v != NULL ? (unsigned) atoi(v) : 4;
  if (n == 0)
    n = 1;
  return n > UVS__POOL_MAX ? UVS__POOL_MAX : n;
}


int uvs__loop_init(uv_loop_t* loop, uvs_sched_t* s) {
  unsigned n;
  unsigned i;
  int err;

  /* The cap on drains (guarantee 12). Runners beyond libuv's largest pool
   * could never run at once; lanes have their own requests. */
  s->cap = s->max_concurrency != 0 ? s->max_concurrency : pool_size();
  n = s->cap < UVS__POOL_MAX ? s->cap : UVS__POOL_MAX;
  s->runners = uvs__calloc(n, sizeof(*s->runners));
  if (s->runners == NULL)
    return UV_ENOMEM;
  s->runner_free = NULL;
  for (i = n; i-- > 0;) {
    s->runners[i].s = s;
    s->runners[i].next = s->runner_free;
    s->runner_free = &s->runners[i];
  }
  /* The async handle is the only init that can fail; the others can't, so
   * nothing needs closing on the error path. */
  err = uv_async_init(loop, &s->async, async_cb);
  if (err != 0) {
    uvs__free(s->runners);
    s->runners = NULL;
    return err;
  }
  uv_timer_init(loop, &s->timer);
  uv_idle_init(loop, &s->idle);
  uv_check_init(loop, &s->check);
  /* It marks a phase; it never keeps the loop alive. */
  uv_unref((uv_handle_t*) &s->check);
  /* Registered once, as libuv registers uv__work_done: a ring on the loop
   * thread starts the idle handle with it (uvs__ring()). */
  s->on_idle = idle_cb;
  s->async.data = s;
  s->timer.data = s;
  s->idle.data = s;
  s->check.data = s;
  return 0;
}


void uvs__loop_start(uvs_sched_t* s) {
  /* One loop iteration is owed to the scheduler: it picks up work that
   * other threads scheduled before uv_run() started, which the async handle
   * alone (unreferenced while idle) would not keep the loop alive for. */
  if (!s->keep_alive)
    uv_unref((uv_handle_t*) &s->async);
  uv_idle_start(&s->idle, idle_cb);
  uv_check_start(&s->check, check_cb);
}
