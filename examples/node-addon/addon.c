/* examples/node-addon: an ordered per-key queue for JavaScript, on Node's
 * own loop and Node's own libuv pool, as an N-API addon in C.
 *
 *   const { Queue, rawSpin } = require('./uvsched.node');
 *   const q = new Queue({ width: 4, maxConcurrency: 3 });
 *   const r = await q.spin(key, us);      // busy for us microseconds
 *   const h = await q.hash(key, rounds);  // r.value: a 64-bit hash, hex
 *   q.cancel(promise.id);                 // a job not started yet
 *   await q.close();                      // or q.close('cancel')
 *   q.hold(key); q.release();             // a job that waits for release()
 *   q.stats();                            // counters, maxRunning
 *   await rawSpin(us);                    // plain napi async work, to compare
 *
 * Jobs of one key run one at a time, in the order they were submitted, and
 * their promises settle in that order; jobs of different keys run in
 * parallel, at most `width` at once and at most `maxConcurrency` (0: the
 * pool's size) of Node's pool threads at once. That cap is what keeps a
 * flood of jobs from starving fs, dns and zlib work, which share the pool.
 *
 * One uvsched scheduler and one wide UVS_POOL worker per Queue; a job is a
 * uvs_task_t keyed by key + 1 (uvsched's key 0 means "no key"). run_cb does
 * the C work on a pool thread; done_cb settles the promise on the loop
 * thread.
 *
 * Host rules (docs/embedding.rst):
 * - uvsched is compiled into this addon against Node's uv.h and linked with
 *   no -luv: Node's libuv is the one in the process (node exports it), and
 *   a second one would have its own pool. UVS_VISIBILITY_HIDDEN keeps the
 *   uvs_ symbols inside the addon.
 * - An environment that ends (a worker thread's, or the main one at exit)
 *   closes its loop: in a worker thread Node aborts with "uv_loop_close()
 *   while having open handles" if the scheduler is still open. An async
 *   cleanup hook closes it, and Node runs the loop until the hook says it
 *   is done (queue_teardown).
 * - During that teardown no callback may call into JS: done_cb and the
 *   close callback only free memory then (queue_t.teardown).
 */

#ifndef NAPI_VERSION
#define NAPI_VERSION 8 /* napi_add_async_cleanup_hook */
#endif

#include <node_api.h>
#include <uvsched.h>

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { JOB_SPIN = 0, JOB_HASH = 1, JOB_HOLD = 2 } job_kind_t;

typedef struct queue_s queue_t;

typedef struct job_s {
  uvs_task_t task; /* First: a uvs_task_t* is a job_t*. */
  queue_t* q;
  /* The queue's jobs not yet handed back, for cancel() and teardown (loop
   * thread only). */
  struct job_s* prev;
  struct job_s* next;
  napi_deferred deferred; /* NULL: nobody waits (see queue_schedule) */
  uint64_t id;
  uint64_t key; /* JavaScript's; the task's key is key + 1 */
  job_kind_t kind;
  uint64_t arg; /* microseconds to spin, or hash rounds */
  /* Written by run_cb, read by done_cb (uvsched orders the two). */
  uint64_t start_ns, end_ns; /* since the queue was made */
  uint64_t value;
} job_t;

struct queue_s {
  uvs_sched_t sched; /* First: a uvs_sched_t* is a queue_t*. */
  uvs_worker_t worker;
  napi_env env;
  /* Strong while the scheduler is open, so that the wrapper (and this
   * struct) outlive it; also the resource of the callback scopes. */
  napi_ref self;
  napi_async_context actx;
  napi_async_cleanup_hook_handle hook; /* NULL once removed */
  napi_deferred close_deferred;
  job_t* jobs;
  uint64_t next_id;
  uint64_t t0;
  int open;     /* uvs_sched_init done, close callback not yet called */
  int closing;  /* uvs_sched_close called */
  int wrapped;  /* the JavaScript object is alive */
  int teardown; /* the environment is ending: never call into JS */
  atomic_uint running;
  atomic_uint max_running;
  /* hold(): jobs that wait for release() (tests use them to keep a key
   * busy without guessing at times). */
  uv_mutex_t gate_lock;
  uv_cond_t gate_cond;
  int gate_open;
};

/* Throws the last N-API error unless an exception is already pending. */
static void throw_last(napi_env env) {
  const napi_extended_error_info* info = NULL;
  bool pending = false;

  if (napi_is_exception_pending(env, &pending) == napi_ok && pending)
    return;
  if (napi_get_last_error_info(env, &info) != napi_ok || info == NULL ||
      info->error_message == NULL)
    napi_throw_error(env, NULL, "N-API call failed");
  else
    napi_throw_error(env, NULL, info->error_message);
}

#define CHECK_NAPI(env, call) \
  do {                        \
    if ((call) != napi_ok) {  \
      throw_last(env);        \
      return NULL;            \
    }                         \
  } while (0)

static napi_value throw_uv(napi_env env, const char* what, int rc) {
  char msg[160];

  snprintf(msg, sizeof(msg), "%s: %s", what, uv_strerror(rc));
  napi_throw_error(env, uv_err_name(rc), msg);
  return NULL;
}

/* A whole number in [0, max] from a JavaScript number. */
static int get_count(
    napi_env env, napi_value v, uint64_t max, const char* what, uint64_t* out) {
  napi_valuetype type;
  double d;
  char msg[128];

  if (napi_typeof(env, v, &type) == napi_ok && type == napi_number &&
      napi_get_value_double(env, v, &d) == napi_ok && d >= 0 &&
      d <= (double) max && (double) (uint64_t) d == d) {
    *out = (uint64_t) d;
    return 0;
  }
  snprintf(msg, sizeof(msg), "%s must be a whole number from 0 to %llu", what,
           (unsigned long long) max);
  napi_throw_range_error(env, "ERR_OUT_OF_RANGE", msg);
  return -1;
}

/* An optional whole-number property of an options object. */
static int get_option(napi_env env,
                      napi_value opts,
                      const char* name,
                      uint64_t max,
                      uint64_t* out) {
  bool has = false;
  napi_value v;
  napi_valuetype type;

  if (napi_has_named_property(env, opts, name, &has) != napi_ok) {
    throw_last(env);
    return -1;
  }
  if (!has)
    return 0;
  if (napi_get_named_property(env, opts, name, &v) != napi_ok ||
      napi_typeof(env, v, &type) != napi_ok) {
    throw_last(env);
    return -1;
  }
  if (type == napi_undefined)
    return 0;
  return get_count(env, v, max, name, out);
}

static uint64_t mix64(uint64_t x) { /* a splitmix64 step */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static void spin_us(uint64_t us) {
  uint64_t end = uv_hrtime() + us * 1000;

  while (uv_hrtime() < end) {
  }
}

static void gate_wait(queue_t* q) {
  uv_mutex_lock(&q->gate_lock);
  while (!q->gate_open) uv_cond_wait(&q->gate_cond, &q->gate_lock);
  uv_mutex_unlock(&q->gate_lock);
}

static void gate_release(queue_t* q) {
  uv_mutex_lock(&q->gate_lock);
  q->gate_open = 1;
  uv_cond_broadcast(&q->gate_cond);
  uv_mutex_unlock(&q->gate_lock);
}

/* A pool thread: the C work. */
static void job_run(uvs_task_t* task) {
  job_t* job = (job_t*) task;
  queue_t* q = job->q;
  unsigned now = atomic_fetch_add(&q->running, 1) + 1;
  unsigned max = atomic_load(&q->max_running);
  uint64_t x;
  uint64_t i;

  while (now > max && !atomic_compare_exchange_weak(&q->max_running, &max, now))
    ;
  job->start_ns = uv_hrtime() - q->t0;
  switch (job->kind) {
    case JOB_SPIN:
      spin_us(job->arg);
      break;
    case JOB_HASH:
      x = job->key;
      for (i = 0; i < job->arg; i++) x = mix64(x);
      job->value = x;
      break;
    case JOB_HOLD:
      gate_wait(q);
      break;
  }
  job->end_ns = uv_hrtime() - q->t0;
  atomic_fetch_sub(&q->running, 1);
}

static napi_status set_number(napi_env env,
                              napi_value obj,
                              const char* name,
                              double v) {
  napi_value n;
  napi_status st = napi_create_double(env, v, &n);

  return st == napi_ok ? napi_set_named_property(env, obj, name, n) : st;
}

/* The value a job's promise resolves to. */
static napi_status job_result(napi_env env, job_t* job, napi_value* out) {
  napi_value obj;
  napi_value s;
  char hex[17];
  napi_status st;

  st = napi_create_object(env, &obj);
  if (st == napi_ok)
    st = set_number(env, obj, "id", (double) job->id);
  if (st == napi_ok)
    st = set_number(env, obj, "key", (double) job->key);
  if (st == napi_ok)
    st = set_number(env, obj, "startNs", (double) job->start_ns);
  if (st == napi_ok)
    st = set_number(env, obj, "endNs", (double) job->end_ns);
  if (st == napi_ok && job->kind == JOB_HASH) {
    snprintf(hex, sizeof(hex), "%016llx", (unsigned long long) job->value);
    st = napi_create_string_utf8(env, hex, NAPI_AUTO_LENGTH, &s);
    if (st == napi_ok)
      st = napi_set_named_property(env, obj, "value", s);
  }
  *out = obj;
  return st;
}

static napi_status uv_error(napi_env env, int status, napi_value* out) {
  napi_value code;
  napi_value msg;
  napi_status st;

  st = napi_create_string_utf8(env, uv_err_name(status), NAPI_AUTO_LENGTH,
                               &code);
  if (st == napi_ok)
    st = napi_create_string_utf8(env, uv_strerror(status), NAPI_AUTO_LENGTH,
                                 &msg);
  if (st == napi_ok)
    st = napi_create_error(env, code, msg, out);
  return st;
}

/* Resolves (status 0) or rejects `deferred` from a libuv callback: inside a
 * handle scope and a callback scope, so that the promise's reactions (and
 * process.nextTick callbacks) run before control goes back to libuv. A
 * failure means JavaScript cannot run any more: the queue stops calling
 * into it. */
static void settle(queue_t* q, napi_deferred deferred, int status, job_t* job) {
  napi_env env = q->env;
  napi_handle_scope hs;
  napi_callback_scope cs;
  napi_value resource;
  napi_value v;
  napi_value exc;
  napi_status st;
  bool pending = false;

  if (napi_open_handle_scope(env, &hs) != napi_ok) {
    q->teardown = 1;
    return;
  }
  st = napi_get_reference_value(env, q->self, &resource);
  if (st == napi_ok && resource == NULL)
    st = napi_generic_failure;
  if (st == napi_ok)
    st = napi_open_callback_scope(env, resource, q->actx, &cs);
  if (st != napi_ok) {
    q->teardown = 1;
    napi_close_handle_scope(env, hs);
    return;
  }
  if (status == 0 && job != NULL)
    st = job_result(env, job, &v);
  else if (status == 0)
    st = napi_get_undefined(env, &v);
  else
    st = uv_error(env, status, &v);
  if (st == napi_ok)
    st = status == 0 ? napi_resolve_deferred(env, deferred, v)
                     : napi_reject_deferred(env, deferred, v);
  if (st != napi_ok)
    q->teardown = 1;
  /* Runs the reactions; one that throws is Node's uncaught exception. */
  if (napi_close_callback_scope(env, cs) != napi_ok)
    q->teardown = 1;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending &&
      napi_get_and_clear_last_exception(env, &exc) == napi_ok)
    napi_fatal_exception(env, exc);
  napi_close_handle_scope(env, hs);
}

/* The loop thread, once per job: in submission order within a key. */
static void job_done(uvs_task_t* task, int status) {
  job_t* job = (job_t*) task;
  queue_t* q = job->q;

  if (job->prev != NULL)
    job->prev->next = job->next;
  else
    q->jobs = job->next;
  if (job->next != NULL)
    job->next->prev = job->prev;
  /* In teardown the promise is left as it is: the environment that would
   * run its reactions is going away, and calling into it may crash. */
  if (job->deferred != NULL && !q->teardown)
    settle(q, job->deferred, status, job);
  free(job);
}

static void queue_free(queue_t* q) {
  uv_cond_destroy(&q->gate_cond);
  uv_mutex_destroy(&q->gate_lock);
  free(q);
}

/* The scheduler's close callback: every job has been handed back. */
static void queue_closed(uvs_sched_t* sched) {
  queue_t* q = (queue_t*) sched;
  napi_async_cleanup_hook_handle hook = q->hook;
  napi_deferred deferred = q->close_deferred;

  q->open = 0;
  q->close_deferred = NULL;
  if (!q->teardown) {
    if (deferred != NULL)
      settle(q, deferred, 0, NULL);
    if (!q->teardown) {
      /* Both may call into JS (async_hooks): not in teardown, where the
       * environment frees them itself. */
      if (napi_async_destroy(q->env, q->actx) != napi_ok ||
          napi_delete_reference(q->env, q->self) != napi_ok)
        fprintf(stderr, "uvsched addon: freeing a queue's handles failed\n");
    }
  }
  /* Tells Node that this queue's teardown is over (it runs the loop until
   * then), or, after a close() from JavaScript, that none is needed. */
  q->hook = NULL;
  if (hook != NULL && napi_remove_async_cleanup_hook(hook) != napi_ok)
    fprintf(stderr, "uvsched addon: napi_remove_async_cleanup_hook failed\n");
  if (!q->wrapped)
    queue_free(q);
}

static int queue_close(queue_t* q, uvs_close_how_t how) {
  int rc;

  if (q->closing)
    return 0;
  gate_release(q); /* a held job that runs would hold the close forever */
  rc = uvs_sched_close(&q->sched, how, queue_closed);
  if (rc == 0)
    q->closing = 1;
  return rc;
}

/* Node's async cleanup hook: the environment (a worker thread's, or the
 * main one at exit) is ending and will close its loop. Close the scheduler
 * with its jobs cancelled, calling no JavaScript from here on; Node runs
 * the loop until queue_closed() removes the hook. Without this, a worker
 * thread that ends with a Queue open aborts the process ("uv_loop_close()
 * while having open handles"). */
static void queue_teardown(napi_async_cleanup_hook_handle handle, void* arg) {
  queue_t* q = arg;
  job_t* job;
  int rc;

  q->teardown = 1;
  /* A close('drain') under way would run every queued job first: cancel
   * them (those already running finish). UV_EBUSY: running or handed
   * back. */
  for (job = q->jobs; job != NULL; job = job->next) {
    rc = uvs_task_cancel(&job->task);
    if (rc != 0 && rc != UV_EBUSY)
      fprintf(stderr, "uvsched addon: cancel: %s\n", uv_strerror(rc));
  }
  rc = queue_close(q, UVS_CANCEL);
  if (rc != 0) {
    fprintf(stderr, "uvsched addon: close in teardown: %s\n", uv_strerror(rc));
    q->hook = NULL;
    if (napi_remove_async_cleanup_hook(handle) != napi_ok)
      fprintf(stderr, "uvsched addon: napi_remove_async_cleanup_hook failed\n");
  }
}

/* The wrapper was collected, or the environment is being freed. While the
 * scheduler is open `self` keeps the wrapper alive, and the cleanup hook
 * (which holds the environment) closes it first, so an open scheduler here
 * means the hook is missing (UVSCHED_ADDON_NO_HOOK). Closing it from here
 * would not help: Node does not run the loop after finalizers unless it has
 * requests of its own, so the close may never finish, and the worker's
 * uv_loop_close() aborts (it did in one run of three here, and every time
 * without the close). */
static void queue_finalize(napi_env env, void* data, void* hint) {
  queue_t* q = data;

  (void) env;
  (void) hint;
  q->wrapped = 0;
  if (!q->open)
    queue_free(q);
  else
    q->teardown = 1; /* queue_closed() frees it, if it is ever closed */
}

static queue_t* this_queue(napi_env env,
                           napi_callback_info info,
                           size_t* argc,
                           napi_value* argv) {
  napi_value self;
  void* data = NULL;

  if (napi_get_cb_info(env, info, argc, argv, &self, NULL) != napi_ok ||
      napi_unwrap(env, self, &data) != napi_ok || data == NULL) {
    throw_last(env);
    return NULL;
  }
  return data;
}

/* new Queue({ width, maxConcurrency }) */
static napi_value queue_new(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_value self;
  napi_value name;
  napi_valuetype type = napi_undefined;
  uvs_sched_options_t so;
  uvs_worker_options_t wo;
  uint64_t width = 4;
  uint64_t cap = 0;
  uv_loop_t* loop;
  queue_t* q;
  napi_status st;
  int rc;

  CHECK_NAPI(env, napi_get_cb_info(env, info, &argc, argv, &self, NULL));
  if (argc >= 1)
    CHECK_NAPI(env, napi_typeof(env, argv[0], &type));
  if (type == napi_object) {
    if (get_option(env, argv[0], "width", 1024, &width) != 0 ||
        get_option(env, argv[0], "maxConcurrency", 1024, &cap) != 0)
      return NULL;
  } else if (type != napi_undefined) {
    napi_throw_type_error(env, NULL, "options must be an object");
    return NULL;
  }
  /* The loop of this environment: the main thread's or a worker's. */
  CHECK_NAPI(env, napi_get_uv_event_loop(env, &loop));

  q = calloc(1, sizeof(*q));
  if (q == NULL)
    return throw_uv(env, "new Queue", UV_ENOMEM);
  q->env = env;
  q->t0 = uv_hrtime();
  atomic_init(&q->running, 0);
  atomic_init(&q->max_running, 0);
  if (uv_mutex_init(&q->gate_lock) != 0) {
    free(q);
    return throw_uv(env, "uv_mutex_init", UV_ENOMEM);
  }
  rc = uv_cond_init(&q->gate_cond);
  if (rc != 0) {
    uv_mutex_destroy(&q->gate_lock);
    free(q);
    return throw_uv(env, "uv_cond_init", rc);
  }

  memset(&so, 0, sizeof(so));
  so.max_concurrency = (unsigned) cap;
  rc = uvs_sched_init(loop, &q->sched, &so);
  if (rc != 0) {
    queue_free(q);
    return throw_uv(env, "uvs_sched_init", rc);
  }
  q->open = 1;
  memset(&wo, 0, sizeof(wo));
  wo.width = (unsigned) width;
  rc = uvs_worker_init_ex(&q->sched, &q->worker, UVS_POOL, &wo);
  if (rc != 0) {
    q->teardown = 1; /* no promise to settle: queue_closed() frees it */
    if (queue_close(q, UVS_CANCEL) != 0)
      abort(); /* an open scheduler with no worker always closes */
    return throw_uv(env, "uvs_worker_init_ex", rc);
  }

  /* From here on a failure closes the scheduler as teardown would. */
  if (napi_wrap(env, self, q, queue_finalize, NULL, NULL) != napi_ok) {
    throw_last(env);
    q->teardown = 1;
    if (queue_close(q, UVS_CANCEL) != 0)
      abort();
    return NULL;
  }
  q->wrapped = 1; /* queue_finalize() frees it once the wrapper is gone */
  st = napi_create_reference(env, self, 1, &q->self);
  if (st == napi_ok)
    st = napi_create_string_utf8(env, "uvsched.Queue", NAPI_AUTO_LENGTH, &name);
  if (st == napi_ok)
    st = napi_async_init(env, self, name, &q->actx);
  /* UVSCHED_ADDON_NO_HOOK=1 leaves the hook out, to show what it is for
   * (test "without the cleanup hook, a worker that ends aborts"). */
  if (st == napi_ok && getenv("UVSCHED_ADDON_NO_HOOK") == NULL)
    st = napi_add_async_cleanup_hook(env, queue_teardown, q, &q->hook);
  if (st != napi_ok) {
    throw_last(env);
    if (q->actx != NULL && napi_async_destroy(env, q->actx) != napi_ok)
      fprintf(stderr, "uvsched addon: napi_async_destroy failed\n");
    if (q->self != NULL && napi_delete_reference(env, q->self) != napi_ok)
      fprintf(stderr, "uvsched addon: napi_delete_reference failed\n");
    q->actx = NULL;
    q->self = NULL;
    q->teardown = 1; /* nothing to settle; the wrapper's finalizer frees q */
    if (queue_close(q, UVS_CANCEL) != 0)
      abort();
    return NULL;
  }
  return self;
}

/* spin/hash/hold(key, n): schedules a job and returns its promise, whose
 * `id` property is what cancel() takes. */
static napi_value queue_schedule(napi_env env,
                                 napi_callback_info info,
                                 job_kind_t kind) {
  size_t argc = 2;
  napi_value argv[2];
  napi_value promise;
  napi_value id;
  uint64_t key;
  uint64_t arg = 0;
  queue_t* q;
  job_t* job;
  int rc;

  q = this_queue(env, info, &argc, argv);
  if (q == NULL)
    return NULL;
  if (q->closing)
    return throw_uv(env, "schedule", UV_ESHUTDOWN);
  if (argc < (kind == JOB_HOLD ? 1u : 2u)) {
    napi_throw_type_error(env, NULL, "missing arguments");
    return NULL;
  }
  /* Keys up to 2^53 - 1: every one a double holds exactly. */
  if (get_count(env, argv[0], (1ull << 53) - 1, "key", &key) != 0)
    return NULL;
  if (kind == JOB_SPIN &&
      get_count(env, argv[1], 10 * 1000 * 1000, "microseconds", &arg) != 0)
    return NULL;
  if (kind == JOB_HASH &&
      get_count(env, argv[1], 1000 * 1000 * 1000, "rounds", &arg) != 0)
    return NULL;

  job = calloc(1, sizeof(*job));
  if (job == NULL)
    return throw_uv(env, "schedule", UV_ENOMEM);
  job->q = q;
  job->id = ++q->next_id;
  job->key = key;
  job->kind = kind;
  job->arg = arg;
  rc = uvs_task_init(&job->task, job_run, job_done);
  if (rc == 0)
    rc = uvs_task_set_key(&job->task, key + 1);
  if (rc == 0) {
    /* Linked first: run_cb may start before uvs_schedule() returns, and
     * done_cb (this thread, later) unlinks it. */
    job->next = q->jobs;
    if (q->jobs != NULL)
      q->jobs->prev = job;
    q->jobs = job;
    rc = uvs_schedule(&q->worker, &job->task);
    if (rc != 0) {
      q->jobs = job->next;
      if (job->next != NULL)
        job->next->prev = NULL;
    }
  }
  if (rc != 0) {
    free(job);
    return throw_uv(env, "uvs_schedule", rc);
  }
  /* The promise after the schedule, so that a failed schedule leaves no
   * promise behind; done_cb cannot run before this function returns. A
   * job without a promise (napi failed here) is still handed back. */
  CHECK_NAPI(env, napi_create_promise(env, &job->deferred, &promise));
  CHECK_NAPI(env, napi_create_double(env, (double) job->id, &id));
  CHECK_NAPI(env, napi_set_named_property(env, promise, "id", id));
  return promise;
}

static napi_value queue_spin(napi_env env, napi_callback_info info) {
  return queue_schedule(env, info, JOB_SPIN);
}

static napi_value queue_hash(napi_env env, napi_callback_info info) {
  return queue_schedule(env, info, JOB_HASH);
}

static napi_value queue_hold(napi_env env, napi_callback_info info) {
  return queue_schedule(env, info, JOB_HOLD);
}

/* release(): every held job, now and later, goes on. */
static napi_value queue_release(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  queue_t* q = this_queue(env, info, &argc, NULL);

  if (q == NULL)
    return NULL;
  gate_release(q);
  return NULL;
}

/* cancel(id): true if the job will not run (its promise rejects with code
 * 'ECANCELED'); false if it is running, done, or unknown. A walk over the
 * jobs in flight: fine for an example. */
static napi_value queue_cancel(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_value result;
  uint64_t id;
  queue_t* q;
  job_t* job;
  int rc = UV_ENOENT;

  q = this_queue(env, info, &argc, argv);
  if (q == NULL)
    return NULL;
  if (argc < 1) {
    napi_throw_type_error(env, NULL, "cancel(id)");
    return NULL;
  }
  if (get_count(env, argv[0], (1ull << 53) - 1, "id", &id) != 0)
    return NULL;
  for (job = q->jobs; job != NULL; job = job->next) {
    if (job->id == id) {
      rc = uvs_task_cancel(&job->task);
      break;
    }
  }
  if (rc != 0 && rc != UV_EBUSY && rc != UV_ENOENT)
    return throw_uv(env, "uvs_task_cancel", rc);
  CHECK_NAPI(env, napi_get_boolean(env, rc == 0, &result));
  return result;
}

/* close('drain' | 'cancel'): a promise that resolves once every job has
 * been handed back and the scheduler's handles are closed. */
static napi_value queue_close_js(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_value promise;
  char how[16] = "drain";
  size_t len;
  napi_valuetype type = napi_undefined;
  queue_t* q;
  int rc;

  q = this_queue(env, info, &argc, argv);
  if (q == NULL)
    return NULL;
  if (argc >= 1)
    CHECK_NAPI(env, napi_typeof(env, argv[0], &type));
  if (type == napi_string)
    CHECK_NAPI(
        env, napi_get_value_string_utf8(env, argv[0], how, sizeof(how), &len));
  else if (type != napi_undefined) {
    napi_throw_type_error(env, NULL, "close('drain' | 'cancel')");
    return NULL;
  }
  if (strcmp(how, "drain") != 0 && strcmp(how, "cancel") != 0) {
    napi_throw_type_error(env, NULL, "close('drain' | 'cancel')");
    return NULL;
  }
  if (q->closing)
    return throw_uv(env, "close", UV_EALREADY);
  CHECK_NAPI(env, napi_create_promise(env, &q->close_deferred, &promise));
  rc = queue_close(q, how[0] == 'd' ? UVS_DRAIN : UVS_CANCEL);
  if (rc != 0) {
    /* The promise was never returned: resolve it so it is freed. */
    if (napi_resolve_deferred(env, q->close_deferred, promise) != napi_ok)
      throw_last(env);
    q->close_deferred = NULL;
    return throw_uv(env, "uvs_sched_close", rc);
  }
  return promise;
}

/* stats(): uvsched's counters and the most jobs seen running at once. */
static napi_value queue_stats(napi_env env, napi_callback_info info) {
  size_t argc = 0;
  napi_value obj;
  uvs_stats_t st;
  queue_t* q = this_queue(env, info, &argc, NULL);

  if (q == NULL)
    return NULL;
  memset(&st, 0, sizeof(st));
  if (q->open)
    uvs_sched_stats(&q->sched, &st);
  CHECK_NAPI(env, napi_create_object(env, &obj));
  CHECK_NAPI(env, set_number(env, obj, "scheduled", (double) st.scheduled));
  CHECK_NAPI(env, set_number(env, obj, "ran", (double) st.ran));
  CHECK_NAPI(env, set_number(env, obj, "cancelled", (double) st.cancelled));
  CHECK_NAPI(env, set_number(env, obj, "pending", (double) st.pending));
  CHECK_NAPI(env, set_number(env, obj, "maxRunning",
                             (double) atomic_load(&q->max_running)));
  return obj;
}

/* rawSpin(us): the same spin as plain napi async work, one uv_queue_work
 * per job with no cap: the baseline of the fs latency figures. */
typedef struct raw_job_s {
  napi_async_work work;
  napi_deferred deferred;
  uint64_t us;
} raw_job_t;

static void raw_execute(napi_env env, void* data) {
  (void) env;
  spin_us(((raw_job_t*) data)->us);
}

static void raw_complete(napi_env env, napi_status status, void* data) {
  raw_job_t* job = data;
  napi_value v;

  if (napi_get_undefined(env, &v) != napi_ok ||
      (status == napi_ok
           ? napi_resolve_deferred(env, job->deferred, v)
           : napi_reject_deferred(env, job->deferred, v)) != napi_ok)
    fprintf(stderr, "uvsched addon: settling rawSpin failed\n");
  if (napi_delete_async_work(env, job->work) != napi_ok)
    fprintf(stderr, "uvsched addon: napi_delete_async_work failed\n");
  free(job);
}

static napi_value raw_spin(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_value name;
  napi_value promise;
  raw_job_t* job;
  uint64_t us;

  CHECK_NAPI(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (argc < 1) {
    napi_throw_type_error(env, NULL, "rawSpin(us)");
    return NULL;
  }
  if (get_count(env, argv[0], 10 * 1000 * 1000, "microseconds", &us) != 0)
    return NULL;
  job = calloc(1, sizeof(*job));
  if (job == NULL)
    return throw_uv(env, "rawSpin", UV_ENOMEM);
  job->us = us;
  if (napi_create_string_utf8(env, "uvsched.rawSpin", NAPI_AUTO_LENGTH,
                              &name) != napi_ok ||
      napi_create_async_work(env, NULL, name, raw_execute, raw_complete, job,
                             &job->work) != napi_ok) {
    free(job);
    throw_last(env);
    return NULL;
  }
  if (napi_create_promise(env, &job->deferred, &promise) != napi_ok ||
      napi_queue_async_work(env, job->work) != napi_ok) {
    throw_last(env);
    /* Not queued: complete will not run. An unreturned promise may stay
     * pending; it holds nothing. */
    if (napi_delete_async_work(env, job->work) != napi_ok)
      fprintf(stderr, "uvsched addon: napi_delete_async_work failed\n");
    free(job);
    return NULL;
  }
  return promise;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor methods[] = {
      {"spin", NULL, queue_spin, NULL, NULL, NULL, napi_default, NULL},
      {"hash", NULL, queue_hash, NULL, NULL, NULL, napi_default, NULL},
      {"hold", NULL, queue_hold, NULL, NULL, NULL, napi_default, NULL},
      {"release", NULL, queue_release, NULL, NULL, NULL, napi_default, NULL},
      {"cancel", NULL, queue_cancel, NULL, NULL, NULL, napi_default, NULL},
      {"close", NULL, queue_close_js, NULL, NULL, NULL, napi_default, NULL},
      {"stats", NULL, queue_stats, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_value cls;
  napi_value fn;
  napi_value versions;
  napi_value s;

  CHECK_NAPI(env, napi_define_class(env, "Queue", NAPI_AUTO_LENGTH, queue_new,
                                    NULL, sizeof(methods) / sizeof(methods[0]),
                                    methods, &cls));
  CHECK_NAPI(env, napi_set_named_property(env, exports, "Queue", cls));
  CHECK_NAPI(env, napi_create_function(env, "rawSpin", NAPI_AUTO_LENGTH,
                                       raw_spin, NULL, &fn));
  CHECK_NAPI(env, napi_set_named_property(env, exports, "rawSpin", fn));
  /* versions.uv is the libuv this addon calls: Node's own. */
  CHECK_NAPI(env, napi_create_object(env, &versions));
  CHECK_NAPI(env, napi_create_string_utf8(env, uvs_version_string(),
                                          NAPI_AUTO_LENGTH, &s));
  CHECK_NAPI(env, napi_set_named_property(env, versions, "uvsched", s));
  CHECK_NAPI(env, napi_create_string_utf8(env, uv_version_string(),
                                          NAPI_AUTO_LENGTH, &s));
  CHECK_NAPI(env, napi_set_named_property(env, versions, "uv", s));
  CHECK_NAPI(env, napi_set_named_property(env, exports, "versions", versions));
  return exports;
}
