/* timer.c's declarations: the wheel, all of time, a delayed task in and
 * out of the wheel; and the scheduler's clock. Included by internal.h
 * only, at its place in the layer order. */

/* The scheduler's clock in ms: uv_hrtime(), or the manual clock. */
static inline uint64_t uvs__clock_ms(const uvs_sched_t* s) {
  if (s->manual_clock)
    return __atomic_load_n(&s->manual_now, __ATOMIC_ACQUIRE);
  return uv_hrtime() / 1000000;
}

/* The same in us. */
static inline uint64_t uvs__clock_us(const uvs_sched_t* s) {
  if (s->manual_clock)
    return __atomic_load_n(&s->manual_now, __ATOMIC_ACQUIRE) * 1000;
  return uv_hrtime() / 1000;
}

/* A delayed task's due time in us. The wheel files it by the ms (due);
 * while it is delayed its status holds the us past that ms of a one-shot
 * task's exact due time, t_call + delay rounded up to the us, so that it
 * fires at the first timer phase at or after that time rather than after
 * the next whole ms (guarantee 6 allows rounding up; the lateness halves
 * without it). A periodic task's grid stays on whole ms (0 here). */
static inline uint64_t uvs__due_us(const uvs_task_t* t) {
  return t->due * 1000 + uvs__task_due_frac(t);
}

/* ---- timer.c: the wheel ------------------------------------------------ */
/* Delayed tasks by due time (ms on the uv_hrtime() clock); tasks due at the
 * same ms expire in insertion order. All calls need the scheduler's lock. */
typedef struct uvs__timers_s uvs__timers_t;
int uvs__timers_init(uvs__timers_t** out, uint64_t now);
void uvs__timers_free(uvs__timers_t* timers);
void uvs__timers_insert(uvs__timers_t* timers, uvs_task_t* task);
void uvs__timers_remove(uvs__timers_t* timers, uvs_task_t* task);
/* The earliest time the structure needs expire(); UINT64_MAX if empty. */
uint64_t uvs__timers_next(const uvs__timers_t* timers);
/* Calls fire, in due order, for every task due at or before now, taking
 * each out of the structure first. */
void uvs__timers_expire(uvs__timers_t* timers,
                        uint64_t now,
                        void (*fire)(void* ctx, uvs_task_t* task),
                        void* ctx);

/* ---- timer.c: all of time --------------------------------------------- */
/* Sets a delayed task's due time from t_call (ns) plus delay (ms), never
 * early: to the us for a one-shot task, to the ms for a periodic one.
 * t->period must be set. */
void uvs__set_due(uvs_sched_t* sched,
                  uvs_task_t* task,
                  uint64_t t_call,
                  uint64_t delay);
/* Publishes uv_now() as the scheduler's uvs_now(). Loop thread. */
void uvs__publish_now(uvs_sched_t* sched);
/* Takes the delayed tasks due by now out of the wheel and their workers'
 * delayed lists onto due, through tnode, in due order, for
 * uvs__fall_due() (lock held). */
void uvs__timers_due(uvs_sched_t* sched, uvs__queue_t* due);
/* A manual clock's step towards target: to the next time something is
 * due, taking what is due then onto due as uvs__timers_due() does;
 * returns 0, with the clock at target, once nothing is due by then (lock
 * held, loop thread). */
int uvs__clock_step(uvs_sched_t* sched, uint64_t target, uvs__queue_t* due);
/* Arms the loop's uv_timer, with timer_cb, for the next due time, or stops
 * it (lock held, loop thread). */
void uvs__rearm_timer(uvs_sched_t* sched, uv_timer_cb timer_cb);
/* A periodic run stands for every grid point passed by the time it
 * starts. */
void uvs__coalesce(uvs_task_t* task);
/* After a periodic run (lock held): back on its grid, or handed back. */
void uvs__finish_periodic(uvs_sched_t* sched,
                          uvs_worker_t* worker,
                          uvs_task_t* task);

/* ---- timer.c: delayed tasks ------------------------------------------- */
/* A delayed task enters, or leaves, the wheel and its worker's delayed
 * list together (lock held). */
void uvs__delay(uvs_worker_t* worker, uvs_task_t* task);
void uvs__undelay(uvs_worker_t* worker, uvs_task_t* task);
/* A periodic task that can't run at this grid point (its worker full, or
 * the run shed) goes back to the wheel for the next grid point after now,
 * handed back to nobody (lock held). */
void uvs__skip_grid_point(uvs_worker_t* worker, uvs_task_t* task);
