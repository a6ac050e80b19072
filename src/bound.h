/* bound.c's, space.c's and metrics.c's declarations: admission, the
 * queued count and room, histograms and shedding. Included by internal.h
 * only. */

/* ---- bound.c: admission ----------------------------------------------- */
/* Does w count its queued tasks (a bound or metrics)? */
static inline int uvs__counting(const uvs_worker_t* w) {
  return w->counting;
}
/* A producer blocked in uvs_schedule_wait(), on w->waiters (lock). It
 * sleeps on the scheduler's one condition variable, room, so that waking
 * every waiter of a worker is one broadcast; a waiter of another worker
 * that was not woken goes back to sleep. */
typedef struct uvs__waiter_s {
  uvs__queue_t node;
  int woken;
} uvs__waiter_t;
/* Counts a task into a counting worker: 0, or UV_EAGAIN if it is full and
 * rejects (DROP_OLDEST evicts instead, taking the lock unless `locked`). */
int uvs__admit(uvs_worker_t* worker, int locked);
/* 0.3, key_max_pending (lock held). Counts t in against its key's bound:
 * 0, UV_EAGAIN if the key is full and on_full is not DROP_OLDEST (the key
 * is marked full), UV_ENOMEM; with DROP_OLDEST a full key's oldest queued
 * task is taken out into *evicted, for the caller to hand back. Tasks
 * without a key pass. */
int uvs__keys_admit(uvs_worker_t* w, uvs_task_t* t, uvs_task_t** evicted);
/* Undoes an admit of t that its caller could not complete. */
void uvs__keys_unadmit(uvs_worker_t* w, uvs_task_t* t);
/* t, admitted, goes to be filed with the lock let go meanwhile (the
 * ACCEPTED hook): a DROP_OLDEST that finds nothing of its key filed takes
 * it out instead. uvs__keys_filed() when the lock is back: 1 if that
 * happened (the caller hands t back as evicted), else 0 (it files t). */
void uvs__keys_filing(uvs_worker_t* w, uvs_task_t* t);
int uvs__keys_filed(uvs_worker_t* w, uvs_task_t* t);
/* Counts t in with no bound (a delayed task a draining close runs): 0 or
 * UV_ENOMEM. */
int uvs__keys_reserve(uvs_worker_t* w, uvs_task_t* t);
/* Has key as many queued tasks as the bound? */
int uvs__keys_key_full(uvs_worker_t* w, uint64_t key);
/* Tasks that fell due (uvs__timers_due), each admitted as a schedule
 * would be and queued, or, full, skipping its grid point (periodic) or
 * handed back with UV_ENOBUFS (lock held). */
void uvs__fall_due(uvs__queue_t* due);
/* Queues a delayed task that fell due (lock held); keyed: its key's count
 * (key_max_pending) has taken it already. */
void uvs__due(uvs_worker_t* worker, uvs_task_t* task, int keyed);
/* Blocks a producer (no lock held) until room for a task of key, a close
 * (UV_ESHUTDOWN) or the deadline (UV_ETIMEDOUT, on uv_hrtime()); 0: try
 * again. */
int uvs__wait_room(uvs_worker_t* worker,
                   uvs__waiter_t* waiter,
                   uint64_t key,
                   uint64_t deadline);
/* A task taken out for a new one (DROP_OLDEST) goes back: with UV_ENOBUFS,
 * or, periodic, to its next grid point. Lock held. */
void uvs__evicted(uvs_worker_t* worker, uvs_task_t* task);
/* Settles the DROP_OLDEST evictions a full worker owes (lock held): the
 * oldest queued tasks, while it is over max_pending. */
void uvs__evict_owed(uvs_worker_t* worker);

/* ---- space.c: the queued count and room -------------------------------- */
/* A queued task was taken out other than by the drain, on a counting
 * worker (lock held). */
void uvs__unqueued(uvs_worker_t* worker);
/* Room was made in a bounded worker: owe space_cb at low_water, wake the
 * blocked producers at the refill mark. */
void uvs__space_check(uvs_worker_t* worker, int locked);
/* Raises queued_max to queued if it is below (atomic max). */
void uvs__note_max(uvs_worker_t* worker, uint64_t queued);
/* Tasks queued now in a counting worker. */
uint64_t uvs__queued_now(uvs_worker_t* worker);
/* After tasks left a per-key-bounded worker's queue: key_space_cb owed,
 * blocked producers woken to look again. Lock held. */
void uvs__keys_space_check(uvs_worker_t* worker);
/* worker->space_owed: what the loop owes a worker listed on sched->space. */
#define UVS__OWE_SPACE 1u /* space_cb */
#define UVS__OWE_KEYS 2u  /* key_space_cb, for the keys its entries list */
/* Wakes every blocked producer (lock held): room for them all to fill, or
 * a close. */
void uvs__wake_all(uvs_worker_t* worker);

/* ---- metrics.c ---------------------------------------------------------- */
/* A worker with metrics keeps its histograms here, allocated at init and
 * freed when its close completes, after its close callback returns. */
typedef struct uvs__hists_s {
  uvs_hist_t wait;
  uvs_hist_t run;
} uvs__hists_t;
void uvs__hist_add(uvs_hist_t* h, uint64_t ns);

/* A task of w became ready (queued or due): with metrics or max_wait_ms,
 * when, in us of uv_hrtime(), kept in its status until it starts. The
 * stamp is taken before the task is published to the queue, and its start
 * is read from the same clock after it is taken out, so a wait is never
 * negative (SPEC: "on one clock"). hists is read only on a worker that
 * counts (metrics implies counting), being off the first 64 bytes that a
 * plain worker's schedule reads (private.h). */
static inline void uvs__mark_ready(const uvs_worker_t* w, uvs_task_t* t) {
  if (w->max_wait_us != 0 || (w->counting && w->hists != NULL) ||
      uvs__task_expiry_us(t) != 0)
    uvs__task_set_ready_us(t, (uint32_t) (uv_hrtime() / 1000));
}

/* How long t has been ready at now_ns (uv_hrtime()), in us: 32 bits of us,
 * which wrap after 71 minutes. */
static inline uint32_t uvs__waited_us(const uvs_task_t* t, uint64_t now_ns) {
  return (uint32_t) (now_ns / 1000) - uvs__task_ready_us(t);
}

struct uvs__chain_s;
/* A task ready longer than max_wait_ms is shed instead of run (lock
 * held): handed back with UV_ETIMEDOUT in its place among done, the
 * batch's hand-backs. */
void uvs__shed(uvs_sched_t* sched,
               uvs_worker_t* worker,
               uvs_task_t* task,
               struct uvs__chain_s* done);
/* Has t been ready longer than w's max_wait_ms, or its own expiry (0.5),
 * whichever is less, at the time a drain would start it? Done-less tasks
 * of the user never are: nothing could tell their owner; nor is a task
 * that started already and yielded (0.5). Waits are measured in 32 bits
 * of us (uvs__waited_us), which is why a bound of 2^31 us or more never
 * sheds. end_ns is the end of the drain's time slice (0: none), which no
 * task starts after: a task that would not be stale even then needs no
 * clock read, so only tasks within a slice of their limit pay for one. */
static inline int uvs__stale(const uvs_worker_t* w,
                             const uvs_task_t* t,
                             uint64_t end_ns) {
  uint32_t limit;
  uint32_t own;

  limit = w->max_wait_us;
  own = uvs__task_expiry_us(t);
  if (own != 0 && (limit == 0 || own < limit))
    limit = own;
  if (limit == 0 || limit == UINT32_MAX ||
      (uvs__load_rlx(&t->state) & UVS__T_YIELDED) ||
      (t->done_cb == NULL && !(uvs__load_rlx(&t->state) & UVS__T_POST)))
    return 0;
  if (end_ns != 0 && uvs__waited_us(t, end_ns) <= limit)
    return 0;
  return uvs__waited_us(t, uv_hrtime()) > limit;
}
