/* retry: see retry.h. The attempt runs in run_cb; the decision to retry is
 * made in done_cb, on the loop thread, where the task is the user's again
 * and may be scheduled anew. The backoff is counted from that hand-back. */

#include "retry.h"


static void attempt_run(uvs_task_t* task) {
  retry_t* r = task->data;

  r->last_err = r->op(r);
  r->attempts++;
}


static void finish(retry_t* r, int status) {
  r->active = 0; /* before done_cb, which may start r again */
  r->done(r, status);
}


static void attempt_done(uvs_task_t* task, int status) {
  retry_t* r = task->data;
  uint64_t now;
  uint64_t delay;
  int err;

  if (status != 0 || r->cancelled) {
    finish(r, UV_ECANCELED);
    return;
  }
  if (r->last_err == 0) {
    finish(r, 0);
    return;
  }
  if (r->opt.max_attempts != 0 && r->attempts >= r->opt.max_attempts) {
    finish(r, r->last_err);
    return;
  }
  now = uvs_now(r->worker->sched);
  delay = r->backoff_ms;
  if (r->opt.deadline_ms != 0 &&
      now + delay > r->start_ms + r->opt.deadline_ms) {
    finish(r, UV_ETIMEDOUT);
    return;
  }
  r->backoff_ms = delay * 2 < r->opt.max_ms ? delay * 2 : r->opt.max_ms;
  err = uvs_schedule_after(r->worker, task, delay);
  if (err != 0)
    finish(r, err); /* the worker is closing, say */
}


int retry_start(retry_t* r,
                uvs_worker_t* worker,
                const retry_options_t* options,
                retry_op_cb op,
                retry_done_cb done) {
  static const retry_options_t defaults = {0, 0, 0, 0};
  int err;

  if (r == NULL || worker == NULL || op == NULL || done == NULL)
    return UV_EINVAL;
  r->opt = options != NULL ? *options : defaults;
  if (r->opt.first_ms == 0)
    r->opt.first_ms = 100;
  if (r->opt.max_ms == 0)
    r->opt.max_ms = 60000;
  r->attempts = 0;
  r->last_err = 0;
  r->worker = worker;
  r->op = op;
  r->done = done;
  r->start_ms = uvs_now(worker->sched);
  r->backoff_ms =
      r->opt.first_ms < r->opt.max_ms ? r->opt.first_ms : r->opt.max_ms;
  r->cancelled = 0;
  r->active = 1;
  uvs_task_init(&r->task, attempt_run, attempt_done);
  r->task.data = r;
  err = uvs_schedule(worker, &r->task);
  if (err != 0)
    r->active = 0;
  return err;
}


int retry_cancel(retry_t* r) {
  int err;

  if (r == NULL)
    return UV_EINVAL;
  if (!r->active || r->cancelled)
    return UV_EBUSY;
  err = uvs_task_cancel(&r->task);
  if (err == UV_EBUSY) {
    /* An attempt is running: it ends in attempt_done(), which sees this. */
    r->cancelled = 1;
    return 0;
  }
  return err;
}
