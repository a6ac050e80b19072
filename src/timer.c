/* All of time, in one place: the timing wheel of delayed tasks and a
 * worker's delayed list beside it, due times and their rounding, the
 * loop's uv_timer armed for the wheel's next due time, the tasks that fall
 * due taken out for admission (bound.c queues them), periodic tasks
 * coalesced and put back on their grid, and the manual clock's steps. The
 * unit is the ms of the scheduler's clock (uvs__clock_ms) for the wheel
 * and the grid, and the us for a one-shot task's exact due time
 * (uvs__due_us). Everything here needs the scheduler's lock, except
 * uvs__publish_now.
 *
 * The wheel is hierarchical: seven levels of 64 slots; a slot of level L
 * spans 64^L ms, so the wheel covers 2^42 ms, beyond the 2^40 ms limit on
 * delays and periods. A task sits at the level of the highest 6-bit digit
 * in which its due time differs from `elapsed` (the time up to which
 * everything has expired), in the slot named by its due time's digit
 * there. When `elapsed` reaches the start of an occupied slot above level
 * 0, the slot's tasks cascade to lower levels; a level-0 slot holds tasks
 * due at one ms, which then expire. A bitmap per level finds the next
 * occupied slot, so catching up after the loop slept costs per occupied
 * slot, never per elapsed ms.
 *
 * Insert and remove are O(1) with intrusive links. Slots are FIFO lists and
 * cascading keeps their order, so tasks due at the same ms expire in the
 * order they were inserted. The position of a task is never stored: it
 * follows from `elapsed` and its due time (see slot_of), because `elapsed`
 * never enters an occupied slot's span without cascading it.
 */

#include "internal.h"

#define BITS 6
#define SLOTS 64
#define LEVELS 7

struct uvs__timers_s {
  uint64_t elapsed;
  uint64_t occupied[LEVELS];
  uvs__queue_t expired; /* inserted when already due */
  uvs__queue_t slot[LEVELS][SLOTS];
};


static int level_for(uint64_t elapsed, uint64_t due) {
  uint64_t masked;
  int level;

  /* Or-ing in the slot mask makes level 0 the floor. */
  masked = (elapsed ^ due) | (SLOTS - 1);
  level = (63 - __builtin_clzll(masked)) / BITS;
  return level < LEVELS ? level : LEVELS - 1;
}


static unsigned digit(uint64_t due, int level) {
  return (unsigned) (due >> (level * BITS)) & (SLOTS - 1);
}


/* The list holding a delayed task; *level is -1 for the expired list. */
static uvs__queue_t* slot_of(uvs__timers_t* w,
                             const uvs_task_t* t,
                             int* level) {
  if (t->due <= w->elapsed) {
    *level = -1;
    return &w->expired;
  }
  *level = level_for(w->elapsed, t->due);
  return &w->slot[*level][digit(t->due, *level)];
}


int uvs__timers_init(uvs__timers_t** out, uint64_t now) {
  uvs__timers_t* w;
  int l;
  int s;

  w = uvs__malloc(sizeof(*w));
  if (w == NULL)
    return UV_ENOMEM;
  w->elapsed = now;
  uvs__queue_init(&w->expired);
  for (l = 0; l < LEVELS; l++) {
    w->occupied[l] = 0;
    for (s = 0; s < SLOTS; s++) uvs__queue_init(&w->slot[l][s]);
  }
  *out = w;
  return 0;
}


void uvs__timers_free(uvs__timers_t* w) {
  uvs__free(w);
}


void uvs__timers_insert(uvs__timers_t* w, uvs_task_t* t) {
  uvs__queue_t* q;
  int level;

  q = slot_of(w, t, &level);
  uvs__queue_push(q, &t->tnode);
  if (level >= 0)
    w->occupied[level] |= (uint64_t) 1 << digit(t->due, level);
}


void uvs__timers_remove(uvs__timers_t* w, uvs_task_t* t) {
  uvs__queue_t* q;
  int level;

  q = slot_of(w, t, &level);
  uvs__queue_remove(&t->tnode);
  if (level >= 0 && uvs__queue_empty(q))
    w->occupied[level] &= ~((uint64_t) 1 << digit(t->due, level));
}


/* The start of the first occupied slot, lowest level first: every slot of a
 * level starts before any later slot of the level above. */
static uint64_t next_slot(const uvs__timers_t* w, int* level, unsigned* slot) {
  uint64_t bits;
  uint64_t span;
  int l;

  for (l = 0; l < LEVELS; l++) {
    /* Occupied slots lie at or after elapsed's digit in this level. */
    bits = w->occupied[l] & (~(uint64_t) 0 << digit(w->elapsed, l));
    if (bits == 0)
      continue;
    *level = l;
    *slot = (unsigned) __builtin_ctzll(bits);
    span = (uint64_t) 1 << (l * BITS);
    return (w->elapsed & ~(span * SLOTS - 1)) + *slot * span;
  }
  return UINT64_MAX;
}


uint64_t uvs__timers_next(const uvs__timers_t* w) {
  int level;
  unsigned slot;

  if (!uvs__queue_empty(&w->expired))
    return w->elapsed;
  return next_slot(w, &level, &slot);
}


void uvs__timers_expire(uvs__timers_t* w,
                        uint64_t now,
                        void (*fire)(void* ctx, uvs_task_t* task),
                        void* ctx) {
  uvs__queue_t batch;
  uvs__queue_t* q;
  uvs_task_t* t;
  uint64_t start;
  unsigned slot;
  int level;

  level = 0;
  slot = 0;
  uvs__queue_init(&batch);
  uvs__queue_move(&w->expired, &batch);
  while ((q = uvs__queue_shift(&batch)) != NULL)
    fire(ctx, uvs__container_of(q, uvs_task_t, tnode));

  while ((start = next_slot(w, &level, &slot)) <= now) {
    uvs__queue_move(&w->slot[level][slot], &batch);
    w->occupied[level] &= ~((uint64_t) 1 << slot);
    w->elapsed = start;
    while ((q = uvs__queue_shift(&batch)) != NULL) {
      t = uvs__container_of(q, uvs_task_t, tnode);
      if (t->due <= start)
        fire(ctx, t);
      else
        uvs__timers_insert(w, t); /* cascade to a lower level */
    }
  }
  if (now > w->elapsed)
    w->elapsed = now;
}


/* ---- a delayed task in and out of the wheel and its worker's list ---- */

/* The loop re-arms its uv_timer when a task is due before what it is
 * armed for (or already asked to look at). */
static void timer_needed(uvs_sched_t* s, uint64_t due) {
  if (due < s->timer_due && due < s->timer_asked) {
    s->timer_asked = due;
    uvs__ring(s, UVS__BELL_TIMER);
  }
}


void uvs__delay(uvs_worker_t* w, uvs_task_t* t) {
  if (uvs__task_period(t) != 0)
    uvs__task_set_due_frac(t, 0); /* its grid is on whole ms */
  uvs__timers_insert(w->sched->timers, t);
  uvs__queue_push(&w->delayed, &t->node);
  w->ndelayed++;
  timer_needed(w->sched, t->due);
}


void uvs__undelay(uvs_worker_t* w, uvs_task_t* t) {
  /* The wheel has let go of a task that fell due already: its link is
   * unlinked, and removing it again changes nothing. */
  uvs__timers_remove(w->sched->timers, t);
  uvs__queue_remove(&t->node);
  w->ndelayed--;
  /* The worker's last delayed task gone, the loop looks at the timer: if
   * no other worker has one, it stops, so that it keeps no loop alive for
   * nothing. With others left, a timer armed for this one finds nothing
   * due when it fires and is armed anew then: cheaper than a ring per
   * cancel or re-arm. */
  if (w->ndelayed == 0 && w->sched->timer_due != UINT64_MAX)
    uvs__ring(w->sched, UVS__BELL_TIMER);
}


void uvs__skip_grid_point(uvs_worker_t* w, uvs_task_t* t) {
  t->due = uvs__grid_latest(t, uvs__clock_ms(w->sched)) + uvs__task_period(t);
  uvs__task_update(t, UVS__T_MASK, UVS__T_DELAYED);
  uvs__delay(w, t);
}


/* ---- due times, the uv_timer, falling due, periodic tasks ------------- */

/* Sets the due time of a delay from t_call on s's clock (uvs__due_us()):
 * rounded up, so that it is never before t_call + delay (guarantee 6); to
 * the us for a one-shot task, to the ms for a periodic one, whose grid
 * stays on whole ms; a manual clock stands still between advances, so its
 * now is exact. period must be set. */
void uvs__set_due(uvs_sched_t* s,
                  uvs_task_t* t,
                  uint64_t t_call,
                  uint64_t delay) {
  uint64_t us;

  uvs__task_set_due_frac(t, 0);
  if (s->manual_clock) {
    t->due = uvs__clock_ms(s) + delay;
  } else if (uvs__task_period(t) != 0) {
    t->due = (t_call + 999999) / 1000000 + delay;
  } else {
    us = (t_call + 999) / 1000 + delay * 1000;
    t->due = us / 1000;
    uvs__task_set_due_frac(t, (uint32_t) (us % 1000));
  }
}


void uvs__publish_now(uvs_sched_t* s) {
  uint64_t now;

  /* Only the loop thread stores, so a plain max keeps it monotonic. */
  now = uv_now(s->loop);
  if (now > uvs__load_rlx(&s->now))
    uvs__store_rel(&s->now, now);
}


/* What fire() hands the due tasks to: now, in us, and the caller's list,
 * which takes them through tnode. */
typedef struct {
  uint64_t now;
  uvs__queue_t* due;
} fire_ctx_t;


/* A delayed task fell due: out of the wheel and its worker's delayed list,
 * onto the caller's list. The wheel hands over a ms at a time; one due
 * later in this ms than now waits on sched->soon, still delayed, for the
 * next timer phase. */
static void fire(void* arg, uvs_task_t* t) {
  fire_ctx_t* ctx;

  ctx = arg;
  if (uvs__due_us(t) > ctx->now) {
    uvs__queue_push(&t->worker->sched->soon, &t->tnode);
    return;
  }
  uvs__undelay(t->worker, t);
  uvs__queue_push(ctx->due, &t->tnode);
}


void uvs__timers_due(uvs_sched_t* s, uvs__queue_t* due) {
  fire_ctx_t ctx;
  uvs__queue_t batch;
  uvs__queue_t* q;

  /* uv_timer may fire up to a ms early, and the loop's cached time lags:
   * compare with the real clock. A manual clock fires here only what is
   * due at its time already: a periodic task that a pool run re-armed
   * after the uvs_clock_advance() that reached its next grid point. What
   * waited for later in its ms goes first, in due order. */
  ctx.now = uvs__clock_us(s);
  ctx.due = due;
  uvs__queue_init(&batch);
  uvs__queue_move(&s->soon, &batch);
  while ((q = uvs__queue_shift(&batch)) != NULL)
    fire(&ctx, uvs__container_of(q, uvs_task_t, tnode));
  uvs__timers_expire(s->timers, ctx.now / 1000, fire, &ctx);
}


int uvs__clock_step(uvs_sched_t* s, uint64_t target, uvs__queue_t* due) {
  fire_ctx_t ctx;
  uint64_t next;

  /* Each step goes to the next time something is due (or the wheel must
   * cascade), so that tasks fire in due order and periodic ones see the
   * clock of their own grid point, as if the time had passed. */
  next = uvs__timers_next(s->timers);
  if (next > target) {
    uvs__store_rel(&s->manual_now, target);
    return 0;
  }
  if (next > uvs__load_rlx(&s->manual_now))
    uvs__store_rel(&s->manual_now, next);
  ctx.now = uvs__load_rlx(&s->manual_now) * 1000;
  ctx.due = due;
  uvs__timers_expire(s->timers, ctx.now / 1000, fire, &ctx);
  return 1;
}


void uvs__rearm_timer(uvs_sched_t* s, uv_timer_cb timer_cb) {
  uint64_t due;
  uint64_t now;
  uint64_t timeout;

  s->timer_asked = UINT64_MAX;
  /* A manual clock moves only with uvs_clock_advance(): the timer is for
   * what is due at its time already. */
  due = uvs__timers_next(s->timers);
  now = uvs__clock_us(s);
  if (s->manual_clock && due > now / 1000)
    due = UINT64_MAX;
  /* Tasks due later in a ms that has begun: the next ms. */
  if (!uvs__queue_empty(&s->soon) && due > now / 1000 + 1)
    due = now / 1000 + 1;
  if (due == UINT64_MAX) {
    uv_timer_stop(&s->timer);
    s->timer_due = UINT64_MAX;
    return;
  }
  if (uv_is_active((uv_handle_t*) &s->timer) && s->timer_due == due)
    return;
  /* The poll wakes a whole number of ms after it begins, whatever the
   * phase of the real clock: the timeout is counted from the real clock
   * now (libuv's cached time, brought up to date first so that the timer
   * is due by it), rounded up, so that the wake is at or after the start
   * of due's ms, where the wheel hands its tasks over. What is due
   * already fires at the next timer phase. A task waiting on soon is due
   * within the ms after now: the wake a ms from now is late for it by
   * less than a ms, never early. */
  if (!s->manual_clock)
    uv_update_time(s->loop);
  if (due * 1000 <= now)
    timeout = 0;
  else
    timeout = (due * 1000 - now + 999) / 1000;
  s->timer_due = due;
  uv_timer_start(&s->timer, timer_cb, timeout, 0);
}


/* A periodic run stands for every grid point passed by the time it starts,
 * however long it waited in the queue or the loop was blocked. */
void uvs__coalesce(uvs_task_t* t) {
  uint64_t now;

  now = uvs__clock_ms(t->worker->sched);
  t->due = uvs__grid_latest(t, now);
}


/* After a periodic run (lock held): back on its grid, or handed back. */
void uvs__finish_periodic(uvs_sched_t* s, uvs_worker_t* w, uvs_task_t* t) {
  uint64_t now;
  uint64_t next;

  if ((uvs__load_rlx(&t->state) & UVS__T_CANCELLED) ||
      (w->flags & UVS__WF_CLOSING)) {
    uvs__drop(s, t, UV_ECANCELED);
    return;
  }
  /* Fixed rate: the next grid point, or, if the run overran it, the latest
   * grid point passed, which stands for all those missed meanwhile. */
  now = uvs__clock_ms(s);
  next = t->due + uvs__task_period(t);
  if (next <= now)
    next = uvs__grid_latest(t, now);
  t->due = next;
  uvs__task_update(t, UVS__T_MASK, UVS__T_DELAYED);
  uvs__delay(w, t);
}
