/* The loop thread's side of a scheduler: its libuv handles, process()
 * (timers, drains posted, loop turns, hand-backs delivered, closes), and
 * the one way other threads reach it, uvs__kick().
 *
 * Only the loop thread acts on libuv (uv_queue_work, uv_timer_*, uv_idle_*,
 * uv_ref, uv_close). The lock (sched->lock) guards the ready lists, the
 * timer wheel, each worker's FIFO and batch bookkeeping, and closes.
 */

#include "internal.h"

#include <sched.h>
#include <stdlib.h>

/* One of a scheduler's runners: a uv_queue_work item that serves ready
 * pool workers in turn. */
struct uvs__runner_s {
  uv_work_t work;
  uvs_sched_t* s;
  uvs_worker_t* first;
  struct uvs__runner_s* next; /* on sched->runner_free */
};

/* What a call of process() does besides the common work. */
enum { FIRE_TIMERS = 1, LOOP_TURN = 2 };


static void process(uvs_sched_t* s, int what);


static void idle_cb(uv_idle_t* handle) {
  process(uvs__container_of(handle, uvs_sched_t, idle), LOOP_TURN);
}


static void timer_cb(uv_timer_t* handle) {
  process(uvs__container_of(handle, uvs_sched_t, timer), FIRE_TIMERS);
}


static void async_cb(uv_async_t* handle) {
  uvs_sched_t* s;

  s = uvs__container_of(handle, uvs_sched_t, async);
  if (__atomic_exchange_n(&s->async_sent, 0, __ATOMIC_ACQ_REL)) {
    uv_mutex_lock(&s->lock);
    s->stats.wakeups++;
    uv_mutex_unlock(&s->lock);
  }
  /* Work handed over from another thread runs now, in this callback, as a
   * mutex-and-uv_async bridge would run it: not one loop iteration later
   * in the idle phase, unless the idle phase of this iteration had a turn
   * already (process()). */
  process(s, LOOP_TURN);
}


/* The prepare and check phases bracket the poll phase, where I/O
 * callbacks run: inside uv_run(), so that a pool worker made ready there
 * may have its drain posted at once (uvs__kick_ready). Outside uv_run()
 * nothing starts until it runs. */
static void prepare_cb(uv_prepare_t* handle) {
  uvs_sched_t* s;

  s = uvs__container_of(handle, uvs_sched_t, prepare);
  s->flags |= UVS__SF_POLLING;
}


/* The check phase ends the poll phase and the loop iteration: the next
 * turn may run in the next iteration, after its timers. */
static void check_cb(uv_check_t* handle) {
  uvs_sched_t* s;

  s = uvs__container_of(handle, uvs_sched_t, check);
  s->flags &= ~(UVS__SF_TURNED | UVS__SF_POLLING);
}


void uvs__kick(uvs_sched_t* s) {
  if (uvs__on_loop_thread(s)) {
    s->flags |= UVS__SF_KICKED;
    uv_idle_start(&s->idle, idle_cb);
    return;
  }
  /* Whoever kicks holds something that keeps the async handle open: a pin
   * on a worker that can't finish closing, or a drain in flight. */
  if (!__atomic_exchange_n(&s->async_sent, 1, __ATOMIC_ACQ_REL))
    uv_async_send(&s->async);
}


static void dispatch(uvs_sched_t* s);


void uvs__kick_ready(uvs_sched_t* s) {
  if (uvs__on_loop_thread(s) &&
      (s->flags & (UVS__SF_POLLING | UVS__SF_DISPATCHING)) == UVS__SF_POLLING)
    dispatch(s);
  else
    uvs__kick(s);
}


static void runner_work(uv_work_t* req) {
  uvs__runner_t* r;

  r = uvs__container_of(req, uvs__runner_t, work);
  uvs__tls.pool = 1;
  uvs__run_ready(r->s, r->first);
}


static void runner_done(uv_work_t* req, int status) {
  uvs__runner_t* r;
  uvs_sched_t* s;

  (void) status; /* never cancelled with uv_cancel */
  r = uvs__container_of(req, uvs__runner_t, work);
  s = r->s;
  uv_mutex_lock(&s->lock);
  s->drains--;
  r->next = s->runner_free;
  s->runner_free = r;
  uv_mutex_unlock(&s->lock);
  process(s, 0);
}


/* A lane of a wide worker ended (loop thread). */
static void lane_work_done(uv_work_t* req, int status) {
  uvs__lane_t* lane;
  uvs_sched_t* s;

  (void) status; /* never cancelled with uv_cancel */
  lane = uvs__container_of(req, uvs__lane_t, work);
  s = lane->w->sched;
  uv_mutex_lock(&s->lock);
  uvs__lane_ended(lane);
  uv_mutex_unlock(&s->lock);
  process(s, 0);
}


/* Work conservation (guarantee 12): a drain for every ready pool worker,
 * as far as the cap allows, oldest first; a lane for every task a wide
 * worker could start. Never a guess of how long tasks take. Lock held. */
static void dispatch(uvs_sched_t* s) {
  uvs__queue_t wide;
  uvs__queue_t* q;
  uvs__runner_t* r;
  uvs_worker_t* w;

  /* serve_wide() lists a worker again through uvs__kick_ready(): that
   * one waits for the next call. */
  s->flags |= UVS__SF_DISPATCHING;
  /* Each listed wide worker once: one that lists itself again waits for
   * the next call. */
  uvs__queue_init(&wide);
  uvs__queue_move(&s->wide_ready, &wide);
  while (uvs__room(s) && !uvs__queue_empty(&wide)) {
    w = uvs__container_of(wide.next, uvs_worker_t, ready_node);
    if (!uvs__serve_wide(s, w, &wide, lane_work_done))
      break;
  }
  uvs__queue_move(&s->wide_ready, &wide);
  uvs__queue_move(&wide, &s->wide_ready);

  while (uvs__room(s) && s->runner_free != NULL &&
         (q = uvs__queue_shift(&s->ready)) != NULL) {
    w = uvs__container_of(q, uvs_worker_t, ready_node);
    w->phase = UVS__P_POSTED;
    r = s->runner_free;
    s->runner_free = r->next;
    r->first = w;
    s->drains++;
    s->stats.drains++;
    if (uv_queue_work(s->loop, &r->work, runner_work, runner_done) != 0)
      abort(); /* only fails for a NULL work_cb */
  }
  s->flags &= ~UVS__SF_DISPATCHING;
}


/* Bounded workers that were full and fell to low_water: space_cb; keys
 * that were full and fell to half their bound: key_space_cb. */
static void call_space_cbs(uvs_sched_t* s) {
  uvs__queue_t* q;
  uvs_worker_t* w;
  uint64_t key;
  unsigned owed;

  /* Set under the lock by whoever lists a worker; a kick brings us back. */
  if (!__atomic_exchange_n(&s->space_any, 0u, __ATOMIC_ACQUIRE))
    return;
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


static void process(uvs_sched_t* s, int what) {
  int more;

  uvs__publish_now(s);
  s->flags &= ~UVS__SF_KICKED;
  uv_mutex_lock(&s->lock);
  if (what & FIRE_TIMERS)
    uvs__fire_timers(s);
  dispatch(s);
  uv_mutex_unlock(&s->lock);

  /* One loop turn per loop iteration, whichever callback comes first (the
   * idle phase, or the async callback in the poll phase), so that timers
   * and I/O run between two turns (guarantee 7). */
  if ((what & LOOP_TURN) && !(s->flags & UVS__SF_TURNED) && uvs__loop_turn(s))
    s->flags |= UVS__SF_TURNED;
  uvs__deliver(s);
  call_space_cbs(s);
  if (uvs__finish_closes(s))
    return;

  uv_mutex_lock(&s->lock);
  dispatch(s); /* for work that done callbacks just scheduled */
  uvs__rearm_timer(s, timer_cb);
  /* Ready pool workers left on their lists wait for a drain to end, which
   * comes back here: only loop work needs the idle handle. */
  more = (s->flags & UVS__SF_KICKED) || !uvs__queue_empty(&s->loop_ready) ||
         uvs__load_acq(&s->done_top) != NULL;
  uv_mutex_unlock(&s->lock);

  if (more)
    uv_idle_start(&s->idle, idle_cb);
  else
    uv_idle_stop(&s->idle);
  /* Pending work keeps the loop alive through its own handles and requests
   * (timer, idle, uv_work); the async handle only keeps it alive on request
   * or while closing. */
  if (s->keep_alive || uvs__load_rlx(&s->state) == UVS__SS_CLOSING)
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
  uv_prepare_init(loop, &s->prepare);
  uv_check_init(loop, &s->check);
  /* They mark phases; they never keep the loop alive. */
  uv_unref((uv_handle_t*) &s->prepare);
  uv_unref((uv_handle_t*) &s->check);
  s->async.data = s;
  s->timer.data = s;
  s->idle.data = s;
  s->prepare.data = s;
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
  uv_prepare_start(&s->prepare, prepare_cb);
  uv_check_start(&s->check, check_cb);
}
