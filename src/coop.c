/* Long tasks that cooperate (0.5): from inside its own run_cb a task asks
 * what the scheduler would like (uvs_task_check), gives its thread up
 * while keeping its place (uvs_task_yield), and code anywhere learns which
 * task's run_cb it is in (uvs_current_task).
 *
 * Everything a check needs is at hand on the running thread: the drain
 * (drain.c) puts the task, its worker, the state it began with and its
 * turn's slice in the thread's uvs__tls before each run_cb. A check reads
 * those, the task's state word (for uvs_task_interrupt's mark, cancel.c),
 * the worker's flags (a close with UVS_CANCEL), the clock once, and, if
 * the turn is spent, whether any group has a worker waiting: loads only,
 * no lock and no read-modify-write. A yield only marks the run; when
 * run_cb returns, the drain puts the task back at the head of its queue
 * (drain.c, requeue).
 */

#include "internal.h"


uvs_task_t* uvs_current_task(void) {
  return uvs__tls.current;
}


/* Is the task's turn spent: its slice passed, or, with a budget, the turn
 * starts no more tasks? */
static int turn_spent(void) {
  if (uvs__tls.end_ns != 0)
    return uv_hrtime() >= uvs__tls.end_ns;
  return uvs__tls.spent;
}


/* Does a pool worker of the scheduler wait for a drain (the ready lists'
 * counts, which anyone may read)? */
static int others_wait(const uvs_sched_t* s) {
  unsigned i;

  for (i = 0; i < s->ngroups; i++)
    if (uvs__load_rlx(&s->groups[i].nready) != 0)
      return 1;
  return 0;
}


int uvs_task_check(uvs_task_t* task) {
  uvs_worker_t* w;

  if (task == NULL || task != uvs__tls.current)
    return UV_EINVAL;
  w = uvs__tls.worker;
  if ((uvs__load_acq(&task->state) & UVS__T_INTERRUPTED) ||
      uvs__tls.interrupted || uvs__cancelling(w))
    return UV_ECANCELED;
  if (!turn_spent())
    return 0;
  /* A loop worker's turn holds up the loop itself: yield once it is
   * spent. A pool drain gives way only to work that waits for it. */
  if (w->where == UVS_LOOP || others_wait(w->sched))
    return UV_EAGAIN;
  return 0;
}


int uvs_task_yield(uvs_task_t* task) {
  unsigned o;

  if (task == NULL || task != uvs__tls.current ||
      (uvs__tls.flags & (UVS__T_PERIODIC | UVS__T_BARRIER)))
    return UV_EINVAL;
  if (uvs__tls.rescheduled)
    return UV_EBUSY; /* it is in a new custody already */
  if (uvs__tls.yielded)
    return 0;
  /* A done-less task left the library's custody as its run began: it comes
   * back now, unless something scheduled it meanwhile. A task with a
   * done_cb is queued (running) all along. */
  if (task->done_cb == NULL) {
    o = UVS__T_FINISHED;
    if (!__atomic_compare_exchange_n(&task->state, &o, UVS__T_QUEUED, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
      return UV_EBUSY;
  }
  uvs__tls.yielded = 1;
  return 0;
}
