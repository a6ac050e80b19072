/* The state words of tasks and workers, and the questions every file
 * asks of them: a task's state and overlaid fields, its key, a worker's
 * state, phase and flags, a bound's refill mark. Included by internal.h
 * only. Calls nothing. */

/* task->state: written with CAS or release stores; read without the lock by
 * the schedule calls and uvs_task_cancel. */
enum {
  UVS__T_IDLE = 0,     /* initialised, never scheduled */
  UVS__T_QUEUED = 1,   /* in its worker's inbox, FIFO or a batch, or running */
  UVS__T_DELAYED = 2,  /* in the timer wheel and its worker's delayed list */
  UVS__T_CLAIMED = 3,  /* a schedule call is filling it in */
  UVS__T_HANDBACK = 4, /* on the hand-back stack, done_cb not yet called */
  UVS__T_FINISHED = 5, /* handed back; the user's again */
  UVS__T_MASK = 0xf,
  UVS__T_PERIODIC = 0x10,   /* scheduled with uvs_schedule_every */
  UVS__T_CANCELLED = 0x20,  /* a periodic task was cancelled while running */
  UVS__T_POST = 0x40,       /* library-owned node of uvs_post */
  UVS__T_DEFERRED = 0x80,   /* handed back while a run_cb of it executes */
  UVS__T_BARRIER = 0x100,   /* a barrier (keys.c orders it on a wide worker) */
  UVS__T_UNCOUNTED = 0x200, /* queued past its key's count (uvs__due) */
  /* 0.5: uvs_task_interrupt reached its run_cb (cancel.c) */
  UVS__T_INTERRUPTED = 0x400,
  UVS__T_YIELDED = 0x800 /* 0.5: queued again by a run that yielded: it has
                          * started, and is never shed (drain.c) */
};
/* The high half counts run_cbs of the task still executing after the task
 * was scheduled again from inside one of them (a one-shot may do that, and
 * its next run can start elsewhere at once). A hand-back waits for zero;
 * sharing the word makes "defer" and "last run ended" one atomic decision. */
#define UVS__T_RUN_ONE 0x10000u
#define UVS__T_RUNS 0xffff0000u

/* Sets the low state and flag bits of a task, keeping its run count, which
 * a thread outside the scheduler's lock may change at the same time. */
static inline unsigned uvs__task_update(uvs_task_t* t,
                                        unsigned clear,
                                        unsigned set) {
  unsigned o;
  unsigned n;

  o = __atomic_load_n(&t->state, __ATOMIC_RELAXED);
  do n = (o & ~clear) | set;
  while (!__atomic_compare_exchange_n(&t->state, &o, n, 1, __ATOMIC_ACQ_REL,
                                      __ATOMIC_RELAXED));
  return n;
}

/* task->period holds two things: the period in ms, at most 2^40, in its
 * low 41 bits, and above them the task's own expiry (0.5,
 * uvs_task_set_expiry) in ms, which outlives its schedules: there is no
 * other room in a 96-byte task. Waits are measured in 32 bits of us
 * (uvs__waited_us), so an expiry of 2^31 us or more never sheds, as a
 * worker's max_wait_ms of that much never does; it is kept as "never". */
#define UVS__PERIOD_MASK ((UINT64_C(1) << 41) - 1)
#define UVS__EXPIRY_NEVER_MS UINT64_C(2147484) /* 2^31 us, rounded up */
static inline uint64_t uvs__task_period(const uvs_task_t* t) {
  return t->period & UVS__PERIOD_MASK;
}
static inline void uvs__task_set_period(uvs_task_t* t, uint64_t period) {
  t->period = (t->period & ~UVS__PERIOD_MASK) | period;
}
static inline void uvs__task_set_expiry_ms(uvs_task_t* t, uint64_t ms) {
  if (ms > UVS__EXPIRY_NEVER_MS)
    ms = UVS__EXPIRY_NEVER_MS;
  t->period = (ms << 41) | uvs__task_period(t);
}
/* The task's expiry in us, as a worker's max_wait_us: 0 for none,
 * UINT32_MAX for one that never sheds. */
static inline uint32_t uvs__task_expiry_us(const uvs_task_t* t) {
  uint64_t ms;

  ms = t->period >> 41;
  return ms >= UVS__EXPIRY_NEVER_MS ? UINT32_MAX : (uint32_t) (ms * 1000);
}

/* The latest point of a periodic task's grid at or before now, or its due
 * time if now is before it. */
static inline uint64_t uvs__grid_latest(const uvs_task_t* t, uint64_t now) {
  uint64_t period;

  if (now <= t->due)
    return t->due;
  period = uvs__task_period(t);
  return t->due + (now - t->due) / period * period;
}

/* A batch slot holds a task until the drain takes it (TAKEN) or a cancel
 * swaps it for a tombstone (TOMB), each with one atomic operation. */
#define UVS__SLOT_TAKEN ((uvs_task_t*) (uintptr_t) 1)
#define UVS__SLOT_TOMB ((uvs_task_t*) (uintptr_t) 2)
#define UVS__BATCH 64

/* The task in a batch slot that its drain has not taken yet, or NULL. A
 * drain may take it at any moment: uvs__take_out() settles who has it. */
static inline uvs_task_t* uvs__slot_task(uvs_task_t** slot) {
  uvs_task_t* t;

  t = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
  if (t == UVS__SLOT_TAKEN || t == UVS__SLOT_TOMB)
    return NULL;
  return t;
}

/* ---- the task's overlaid fields ---------------------------------------- */
/* The only readers and writers of node.prev, tnode (while queued) and
 * status: the table beside their definition (include/uvsched/private.h)
 * says what each holds in which state. */
static inline void uvs__task_set_unlinked(uvs_task_t* t) {
  t->node.prev = NULL;
}
static inline int uvs__task_unlinked(const uvs_task_t* t) {
  return t->node.prev == NULL;
}
static inline void uvs__task_set_slot(uvs_task_t* t, uvs_task_t** slot) {
  t->node.prev = (uvs__queue_t*) ((uintptr_t) slot | 1);
}
/* Its slot in a drain's batch, or NULL if it is not in one. */
static inline uvs_task_t** uvs__task_slot(const uvs_task_t* t) {
  uintptr_t p;

  p = (uintptr_t) t->node.prev;
  return (p & 1) ? (uvs_task_t**) (p & ~(uintptr_t) 1) : NULL;
}
static inline void uvs__task_set_kready(uvs_task_t* t, uvs__queue_t* kready) {
  t->tnode.prev = kready; /* NULL: out of it */
}
static inline int uvs__task_in_kready(const uvs_task_t* t,
                                      const uvs__queue_t* kready) {
  return t->tnode.prev == kready;
}
static inline void uvs__task_set_kent(uvs_task_t* t, void* entry) {
  t->tnode.next = (uvs__queue_t*) entry;
}
static inline void* uvs__task_kent(const uvs_task_t* t) {
  return t->tnode.next;
}
static inline void uvs__task_set_due_frac(uvs_task_t* t, uint32_t us) {
  t->status = (int) us;
}
static inline uint32_t uvs__task_due_frac(const uvs_task_t* t) {
  return (uint32_t) t->status;
}
static inline void uvs__task_set_ready_us(uvs_task_t* t, uint32_t us) {
  t->status = (int) us;
}
static inline uint32_t uvs__task_ready_us(const uvs_task_t* t) {
  return (uint32_t) t->status;
}
static inline void uvs__task_set_result(uvs_task_t* t, int status) {
  t->status = status;
}
static inline int uvs__task_result(const uvs_task_t* t) {
  return t->status;
}

/* The key a wide worker files t under: a barrier (0.4) belongs to none,
 * and its own key field stays as the user set it. */
static inline uint64_t uvs__task_key(const uvs_task_t* t) {
  return (__atomic_load_n(&t->state, __ATOMIC_RELAXED) & UVS__T_BARRIER)
             ? 0
             : t->key;
}

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

/* Blocked producers are woken together once queued falls to this, rather
 * than one per started task (SPEC 0.4: a blocked call may go on waiting
 * while queued is above max - max(1, max / 8)); for a key, with
 * key_max_pending. */
static inline uint64_t uvs__refill_mark(uint64_t max) {
  return max - (max / 8 > 1 ? max / 8 : 1);
}
