/* Private to uvsched: the fields below may change in any release. They are
 * public only so that users can embed the structs without an allocation.
 */

#ifndef UVSCHED_PRIVATE_H
#define UVSCHED_PRIVATE_H

/* Intrusive circular doubly-linked list node. */
struct uvs__queue_s {
  struct uvs__queue_s* next;
  struct uvs__queue_s* prev;
};

/* A task is in at most one place through `node`: its worker's inbox (next
 * only), FIFO or delayed list, a wide worker's kready, or the scheduler's
 * hand-back stack (next only). Three fields mean different things in
 * different states; src/ reads and writes them through the accessors of
 * src/internal.h ("the task's overlaid fields") and nowhere else:
 *
 *   field      state                          holds
 *   node.prev  queued, until the inbox links  NULL (uvs__task_set_unlinked)
 *              in a drain's batch             its slot, tagged with bit 0
 *                                             (uvs__task_set_slot)
 *              a free post node               the next chain (postpool.c)
 *   tnode      delayed                        its link in the wheel, or on
 *                                             the soon list (timer.c)
 *              fallen due, being admitted     its link on the due list
 *                                             (uvs__timers_due, bound.c)
 *              queued on a wide worker        prev: the worker's kready
 *                                             while it is in it; next: its
 *                                             key's entry, once it heads
 *                                             its key (uvs__task_*kready,
 *                                             uvs__task_*kent)
 *              a free post node               next: its chain's last node
 *   status     delayed, one-shot              the µs past its due ms
 *                                             (uvs__task_*due_frac)
 *              queued or due, with metrics    the µs of uv_hrtime() when it
 *              or max_wait_ms                 became ready
 *                                             (uvs__task_*ready_us)
 *              handed back, and after         the status for done_cb
 *                                             (uvs__task_*result) */
#define UVS_TASK_PRIVATE_FIELDS                      \
  struct uvs__queue_s node;                          \
  struct uvs__queue_s tnode;                         \
  uvs_worker_t* worker;                              \
  uint64_t due;    /* ms on the uv_hrtime() clock */ \
  uint64_t period; /* ms; 0 for one-shot */          \
  uint64_t key;    /* uvs_task_set_key; 0 = none */  \
  unsigned state;                                    \
  int status; /* the hand-back's; while queued, when it became ready (us) */

/* Three groups: what a schedule call reads and writes, what drains write,
 * and a 64-byte pad between them, so that a drain's writes and a
 * producer's never share a cache line wherever the struct starts. A
 * schedule onto a plain worker touches only the struct's first 64 bytes
 * (the public fields, then the private ones through max_wait_us): one
 * cache line, two where the struct does not start on one, which is what a
 * server with a worker per connection pays per schedule when its workers
 * are cold. */
#define UVS_WORKER_PRIVATE_FIELDS                                             \
  /* Read by every schedule call, written only by init and close. */          \
  unsigned closed;    /* atomic */                                            \
  unsigned flags;     /* atomic loads, stores under the lock */               \
  int counting;       /* max_pending or metrics: queued tasks are counted */  \
  uv_thread_t thread; /* its loop's thread, so callers need not read sched */ \
  struct uvs__keys_s* keys; /* width > 1: lanes and the key table */          \
  /* Written by producers per task. */                                        \
  struct uvs__queue_s* inbox_tail; /* atomic: MPSC inbox, producers swap */   \
  unsigned state;                  /* atomic: idle or scheduled */            \
  /* Options (0.2, uvs_worker_init_ex; 0.3), set at init, read by schedule    \
   * calls onto workers that use them. */                                     \
  uint32_t max_wait_us; /* max_wait_ms in us; 0 = off, UINT32_MAX = never */  \
  size_t key_max;       /* key_max_pending */                                 \
  struct uvs__hists_s* hists; /* with metrics: wait and run histograms */     \
  size_t max_pending;                                                         \
  unsigned width;                                                             \
  unsigned on_full;                                                           \
  /* Written by producers on the workers that use them. */                    \
  unsigned inflight;     /* atomic: callers pinned by count */                \
  unsigned lanes_active; /* atomic, stores under the lock: width > 1 */       \
  char pad_producer[64];                                                      \
  /* Consumer side: under the scheduler's lock. What a drain's visit          \
   * touches comes first, in as few cache lines as it fits: a runner that     \
   * serves thousands of workers finds each one cold. */                      \
  struct uvs__queue_s* inbox_head;                                            \
  struct uvs__queue_s inbox_stub;                                             \
  struct uvs__queue_s fifo; /* moved out of the inbox, unlinkable */          \
  struct uvs__queue_s ready_node;                                             \
  uvs_task_t** batch; /* the running drain's slots, or NULL */                \
  unsigned batch_len;                                                         \
  unsigned phase;  /* idle, ready or posted */                                \
  unsigned group;  /* its index in sched->groups (0.4) */                     \
  uint64_t nsched; /* accepted: delayed, or moved out of the inbox */         \
  uint64_t nended;                                                            \
  /* Written by the one drain running (relaxed atomics). */                   \
  uint64_t nran;                                                              \
  uint64_t nended_run;                                                        \
  /* Under the lock. */                                                       \
  uint64_t ncancelled;                                                        \
  struct uvs__queue_s delayed; /* its tasks in the timer wheel */             \
  struct uvs__queue_s list_node;                                              \
  uvs_worker_close_cb close_cb;                                               \
  size_t low_water;                                                           \
  uvs_worker_space_cb space_cb;                                               \
  /* Queued tasks, counted where a bound or metrics need it: in by            \
   * producers (atomic), out by the drain and by holders of the lock. */      \
  uint64_t q_in;                                                              \
  uint64_t q_out_run;                                                         \
  uint64_t q_out_lock;                                                        \
  uint64_t queued_max; /* atomic */                                           \
  uint64_t ndelayed;   /* under the lock */                                   \
  uint64_t nrejected;  /* atomic */                                           \
  uint64_t ndropped;   /* under the lock */                                   \
  uint64_t nexpired;   /* under the lock: shed by max_wait_ms */              \
  uint64_t nskipped;   /* under the lock: of those, periodic grid points */   \
  uvs_worker_key_space_cb key_space_cb;                                       \
  unsigned running;    /* atomic */                                           \
  unsigned full;       /* atomic: was full, space_cb owed at low_water */     \
  unsigned nwaiters;   /* stores under the lock */                            \
  unsigned space_owed; /* under the lock */                                   \
  unsigned evict_owed; /* under the lock: DROP_OLDEST evictions owed */       \
  unsigned nsuspend;   /* under the lock: its suspend count (0.4) */          \
  struct uvs__queue_s waiters;    /* uvs_schedule_wait callers, FIFO */       \
  struct uvs__queue_s space_node; /* on sched->space */                       \
  struct uvs__queue_s kready;     /* width > 1: tasks lanes may start */

#define UVS_SCHED_PRIVATE_FIELDS                                              \
  uv_async_t async;                                                           \
  uv_timer_t timer;                                                           \
  uv_idle_t idle;                                                             \
  uv_check_t check; /* the poll phase, and the loop iteration, end */         \
  uv_mutex_t lock;                                                            \
  uv_cond_t room; /* with lock: uvs_schedule_wait callers, woken together */  \
  uv_thread_t thread;                                                         \
  uvs_sched_close_cb close_cb;                                                \
  struct uvs__queue_s workers;    /* open workers */                          \
  struct uvs__queue_s closing;    /* workers being closed */                  \
  struct uvs__queue_s closed;     /* closed while the scheduler closes */     \
  struct uvs__queue_s loop_ready; /* loop workers with work */                \
  struct uvs__queue_s space;      /* workers owed a space_cb */               \
  /* 0.4: ngroups (at least 1) groups, each with its pool workers waiting     \
   * for a drain and its wide workers wanting a lane. */                      \
  struct uvs__group_s* groups;                                                \
  unsigned ngroups;                                                           \
  struct uvs__queue_s soon;      /* out of the wheel, due later in this ms */ \
  struct uvs__queue_s* done_top; /* atomic: stack of handed-back tasks */     \
  struct uvs__timers_s* timers;                                               \
  void* post_free;      /* FIFO of chains of free post nodes */               \
  void* post_free_last; /* its last chain, if post_free is not NULL */        \
  void* post_chunks;                                                          \
  void* post_local; /* loop thread only: its own free nodes */                \
  /* Free post nodes of each thread that posts from outside the loop, by      \
   * its hazard slot: only that thread touches its entry. */                  \
  void** post_cache;                                                          \
  uint64_t timer_due;   /* what the uv_timer is armed for */                  \
  uint64_t timer_asked; /* earliest due asked for since it was armed */       \
  uint64_t now;         /* atomic */                                          \
  uvs_stats_t stats;    /* closed workers' totals, drains, wakeups */         \
  unsigned max_concurrency;                                                   \
  unsigned budget;                                                            \
  unsigned linger_us;                                                         \
  unsigned drains;                                                            \
  unsigned state;   /* atomic */                                              \
  uvs_hook_cb hook; /* 0.4: set at init; NULL = none */                       \
  void* hook_arg;                                                             \
  unsigned flags;    /* loop thread only */                                   \
  unsigned owed;     /* atomic: what the loop owes, UVS__BELL_* */            \
  unsigned inflight; /* atomic: callers inside the API on this scheduler */   \
  unsigned handles;  /* libuv handles still open */                           \
  unsigned parked;   /* atomic, stores under the lock: suspended with work */ \
  int keep_alive;                                                             \
  struct uvs__runner_s* runners;     /* cap of them, or 1024 at most */       \
  struct uvs__runner_s* runner_free; /* those not posted */                   \
  /* Loop thread: runners and lanes taken under the lock, to be posted        \
   * with uv_queue_work once it is let go (newest first). */                  \
  struct uvs__runner_s* runner_owed;                                          \
  struct uvs__lane_s* lane_owed;                                              \
  uint64_t hold_ns;   /* hold_us in ns (0.5) */                               \
  uv_idle_cb on_idle; /* loop.c's idle callback, for uvs__ring() */           \
  unsigned cap;       /* most drains at once: max_concurrency or the pool */  \
  int manual_clock;                                                           \
  uint64_t manual_now; /* atomic: ms, with manual_clock */

#endif /* UVSCHED_PRIVATE_H */
