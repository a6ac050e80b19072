/* A worker's state, phase and flags, and the questions every file asks of
 * them. Included by internal.h only. Calls nothing. */

/* worker->state (atomic): only the call that moves it from IDLE to
 * SCHEDULED makes the worker ready (uvs__worker_ready() in worker.c);
 * only the end of a turn moves it back. */
enum { UVS__WS_IDLE = 0, UVS__WS_SCHEDULED = 1 };

/* worker->phase (under the lock) */
enum {
  UVS__P_IDLE = 0,   /* not on a ready list, no drain */
  UVS__P_READY = 1,  /* on its group's ready list, or sched->loop_ready */
  UVS__P_POSTED = 2, /* a pool drain is posted or running, or a loop turn */
  UVS__P_PARKED = 3  /* suspended with work: listed when resumed */
};

/* worker->flags (stores under the lock, loads anywhere) */
enum {
  UVS__WF_CLOSING = 1,
  UVS__WF_DRAIN = 2,     /* closing with UVS_DRAIN */
  UVS__WF_BY_SCHED = 4,  /* only its scheduler's close is closing it */
  UVS__WF_CB_OWED = 8,   /* asked for after it closed: call close_cb */
  UVS__WF_SUSPENDED = 16 /* its suspend count is above 0 (close.c) */
};

/* worker->closed (atomic): schedules answer UV_ESHUTDOWN from OPEN on. */
enum {
  UVS__C_OPEN = 0,
  UVS__C_CLOSED = 1, /* its close completed */
  UVS__C_FINAL = 2   /* and its scheduler's close completed too */
};

static inline uvs__group_t* uvs__group_of(const uvs_worker_t* w) {
  return &w->sched->groups[w->group];
}

/* Schedules and posts onto w answer UV_ESHUTDOWN: it or its scheduler is
 * closing. Any thread, no lock needed. */
static inline int uvs__shut(uvs_sched_t* s, uvs_worker_t* w) {
  return (uvs__load_acq(&w->flags) & UVS__WF_CLOSING) ||
         uvs__load_acq(&s->state) != UVS__SS_OPEN;
}

/* Is w closing with UVS_CANCEL? A drain asks after it took a task from its
 * slot and before it runs it. The close stores the flag before it sweeps
 * the slots, and a drain that found a tombstone the sweep left has seen
 * that store, so the tasks that run are a prefix of the batch: a close
 * never leaves a hole that a later task runs behind. */
static inline int uvs__cancelling(uvs_worker_t* w) {
  return (uvs__load_acq(&w->flags) & (UVS__WF_CLOSING | UVS__WF_DRAIN)) ==
         UVS__WF_CLOSING;
}

/* Does a suspension keep w's tasks from starting? Not once it closes. */
static inline int uvs__suspended(uvs_worker_t* w) {
  return __builtin_expect(
      (uvs__load_acq(&w->flags) & (UVS__WF_SUSPENDED | UVS__WF_CLOSING)) ==
          UVS__WF_SUSPENDED,
      0);
}
