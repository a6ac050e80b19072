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

/* A task is in at most one list through `node` (its worker's FIFO, its
 * worker's delayed list, or the scheduler's hand-back list) and, while
 * delayed, in a slot of the timer wheel through `tnode`. */
#define UVS_TASK_PRIVATE_FIELDS                                                \
  struct uvs__queue_s node;                                                    \
  struct uvs__queue_s tnode;                                                   \
  uvs_worker_t* worker;                                                        \
  uint64_t due;    /* ms on the uv_hrtime() clock */                           \
  uint64_t period; /* ms; 0 for one-shot */                                    \
  unsigned state;                                                              \
  int status;

#define UVS_WORKER_PRIVATE_FIELDS                                              \
  uv_work_t work;                                                              \
  struct uvs__queue_s fifo;     /* queued tasks */                             \
  struct uvs__queue_s delayed;  /* tasks in the timer wheel */                 \
  struct uvs__queue_s ready_node;                                              \
  struct uvs__queue_s list_node;                                               \
  uvs_worker_close_cb close_cb;                                                \
  uint64_t npending; /* accepted, not yet handed back */                       \
  unsigned state;                                                              \
  unsigned flags;                                                              \
  unsigned closed;   /* atomic */                                              \
  unsigned inflight; /* atomic: callers inside the API on this worker */

#define UVS_SCHED_PRIVATE_FIELDS                                               \
  uv_async_t async;                                                            \
  uv_timer_t timer;                                                            \
  uv_idle_t idle;                                                              \
  uv_mutex_t lock;                                                             \
  uv_thread_t thread;                                                          \
  uvs_sched_close_cb close_cb;                                                 \
  struct uvs__queue_s workers;    /* open workers */                           \
  struct uvs__queue_s closing;    /* workers being closed */                   \
  struct uvs__queue_s ready;      /* pool workers waiting for a drain */       \
  struct uvs__queue_s loop_ready; /* loop workers with work */                 \
  struct uvs__queue_s done;       /* tasks waiting for done_cb */              \
  struct uvs__timers_s* timers;                                                \
  void* post_free;                                                             \
  void* post_chunks;                                                           \
  uint64_t timer_due;                                                          \
  uint64_t now; /* atomic */                                                   \
  uvs_stats_t stats;                                                           \
  unsigned max_concurrency;                                                    \
  unsigned budget;                                                             \
  unsigned linger_us;                                                          \
  unsigned drains;                                                             \
  unsigned state;    /* atomic */                                              \
  unsigned flags;                                                              \
  unsigned inflight; /* atomic: callers inside the API on this scheduler */   \
  unsigned handles;  /* libuv handles still open */                            \
  int keep_alive;

#endif /* UVSCHED_PRIVATE_H */
