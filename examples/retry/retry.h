/* retry: run an operation on a uvsched worker and, while it fails, run it
 * again after an exponential backoff (100 ms, 200 ms, 400 ms, ... capped at
 * 60 s by default), until it succeeds, a number of attempts is spent or a
 * deadline would pass.
 *
 * One retry_t is one uvs_task_t re-scheduled with uvs_schedule_after() from
 * its own done_cb, so it allocates nothing and is cancelled like any task.
 * Times are the scheduler's (uvs_now), so a scheduler made with
 * manual_clock runs minutes of backoff in microseconds: see test-retry.c.
 */

#ifndef UVSCHED_EXAMPLE_RETRY_H
#define UVSCHED_EXAMPLE_RETRY_H

#include <uvsched.h>

typedef struct retry_s retry_t;

/* One attempt, on the worker's thread (a pool thread for UVS_POOL): 0 is
 * success, anything else a failure worth another attempt. */
typedef int (*retry_op_cb)(retry_t* r);
/* The end, on the loop thread: 0, the last attempt's error when the
 * attempts are spent, UV_ETIMEDOUT when the next attempt would start after
 * the deadline, UV_ECANCELED after retry_cancel() or a close of the worker. */
typedef void (*retry_done_cb)(retry_t* r, int status);

typedef struct retry_options_s {
  uint64_t first_ms;     /* the first backoff; 0 = 100 */
  uint64_t max_ms;       /* the cap on a backoff; 0 = 60000 */
  unsigned max_attempts; /* 0 = no limit */
  uint64_t deadline_ms;  /* no attempt starts later than this after
                            retry_start(); 0 = none */
} retry_options_t;

struct retry_s {
  void* data;
  /* read-only */
  unsigned attempts; /* attempts made so far */
  int last_err;      /* the last attempt's result */
  /* private */
  uvs_task_t task;
  uvs_worker_t* worker;
  retry_op_cb op;
  retry_done_cb done;
  retry_options_t opt;
  uint64_t start_ms;
  uint64_t backoff_ms;
  int cancelled; /* loop thread */
  int active;    /* loop thread: started and not yet ended */
};

/* The loop thread (the first attempt is queued at once); r must stay valid
 * until done_cb. */
int retry_start(retry_t* r,
                uvs_worker_t* worker,
                const retry_options_t* options,
                retry_op_cb op,
                retry_done_cb done);
/* Loop thread. 0: done_cb follows with UV_ECANCELED (right after the
 * attempt that is running, if one is). UV_EBUSY if it already ended. */
int retry_cancel(retry_t* r);

#endif /* UVSCHED_EXAMPLE_RETRY_H */
