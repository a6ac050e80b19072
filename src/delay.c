/* Delayed tasks: a task goes into, and out of, the timer wheel and its
 * worker's delayed list together, and a periodic task skips a grid point
 * it can't run at. Everything here needs the scheduler's lock. */

#include "internal.h"


/* The loop re-arms its uv_timer when a task is due before what it is
 * armed for (or already asked to look at). */
static void timer_needed(uvs_sched_t* s, uint64_t due) {
  if (due < s->timer_due && due < s->timer_asked) {
    s->timer_asked = due;
    uvs__ring(s, UVS__BELL_TIMER);
  }
}


void uvs__delay(uvs_worker_t* w, uvs_task_t* t) {
  if (t->period != 0)
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
  t->due = uvs__grid_latest(t, uvs__clock_ms(w->sched)) + t->period;
  uvs__task_update(t, UVS__T_MASK, UVS__T_DELAYED);
  uvs__delay(w, t);
}
