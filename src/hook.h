/* Hooks (0.4): the one call that reports a point of a task's life to the
 * scheduler's hook, if it has one. Callers hold no lock: a hook may call
 * uvs_worker_metrics, which takes the scheduler's. */

#ifndef UVSCHED_HOOK_H
#define UVSCHED_HOOK_H

static inline void uvs__hook(uvs_sched_t* s,
                             uvs_worker_t* w,
                             uvs_task_t* t,
                             uvs_event_t ev,
                             int status) {
  if (__builtin_expect(s->hook != NULL, 0))
    s->hook(w, t, ev, status, s->hook_arg);
}

#endif /* UVSCHED_HOOK_H */
