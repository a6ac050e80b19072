/* uvsched-producers: producer threads blocked on a full loop worker.
 *
 * P threads (default 4) call uvs_schedule_wait() on one loop worker
 * bounded at max_pending (default 1000) with UVS_FULL_BLOCK, as fast as
 * they can, for a number of seconds; the loop runs the tasks (empty, or
 * busy for --task-us each). It
 * prints the tasks accepted per second and checks that each producer's
 * tasks ran in its order and that none was rejected. How often the
 * producers are woken is what to measure around it, e.g.
 *
 *   strace -c -f -e trace=futex build/bench/uvsched-producers --seconds 3
 *
 * and divide the futex calls by the tasks accepted (NEWS.md, "0.4.0",
 * has the figures).
 */

#include <uvsched.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 4096 /* tasks per producer, reused once handed back */

typedef struct producer_s producer_t;

typedef struct {
  uvs_task_t task;
  producer_t* owner;
  uint64_t seq;
  atomic_int busy; /* scheduled and not yet handed back */
} item_t;

struct producer_s {
  uv_thread_t thread;
  item_t* items;
  uint64_t next_run; /* loop thread: the seq its next task must have */
  uint64_t accepted;
  uint64_t errors;
  uint64_t out_of_order;
};

static uvs_worker_t worker;
static uvs_sched_t sched;
static uvs_worker_metrics_t metrics;
static atomic_int stop;
static atomic_uint left; /* producers still producing */
static uint64_t task_ns; /* how long each task keeps the loop busy */

static void run_cb(uvs_task_t* task) {
  item_t* it;
  uint64_t end;

  it = task->data;
  if (task_ns != 0) {
    end = uv_hrtime() + task_ns;
    while (uv_hrtime() < end) {
    }
  }
  if (it->seq != it->owner->next_run)
    it->owner->out_of_order++;
  it->owner->next_run = it->seq + 1;
}

static void done_cb(uvs_task_t* task, int status) {
  item_t* it;

  it = task->data;
  if (status != 0)
    it->owner->errors++;
  atomic_store_explicit(&it->busy, 0, memory_order_release);
}

static void produce(void* arg) {
  producer_t* p;
  item_t* it;
  uint64_t seq;
  int err;

  p = arg;
  it = NULL;
  for (seq = 0; !atomic_load_explicit(&stop, memory_order_relaxed); seq++) {
    it = &p->items[seq % RING];
    /* A slot comes back long before the producer wraps round to it: the
     * worker holds at most max_pending of them. */
    while (atomic_load_explicit(&it->busy, memory_order_acquire))
      if (atomic_load_explicit(&stop, memory_order_relaxed))
        goto out;
    it->seq = seq;
    atomic_store_explicit(&it->busy, 1, memory_order_relaxed);
    err = uvs_schedule_wait(&worker, &it->task, 10000);
    if (err != 0) {
      atomic_store_explicit(&it->busy, 0, memory_order_relaxed);
      fprintf(stderr, "uvs_schedule_wait: %s\n", uv_strerror(err));
      p->errors++;
      break;
    }
    p->accepted++;
  }
out:
  atomic_fetch_sub(&left, 1);
}

/* Time is up: the producers stop after their current call, which the
 * loop lets through by running tasks; once all have left, the counters are
 * read and the scheduler closes. */
static void stop_cb(uv_timer_t* timer) {
  atomic_store(&stop, 1);
  if (atomic_load(&left) != 0) {
    uv_timer_start(timer, stop_cb, 1, 0);
    return;
  }
  uvs_worker_metrics(&worker, &metrics);
  uvs_sched_close(&sched, UVS_DRAIN, NULL);
  uv_close((uv_handle_t*) timer, NULL);
}

int main(int argc, char** argv) {
  uvs_worker_options_t wo;
  uvs_sched_options_t so;
  producer_t* ps;
  uv_timer_t timer;
  uv_loop_t loop;
  uint64_t accepted;
  uint64_t bad;
  uint64_t t0;
  double secs;
  unsigned nprod;
  unsigned i;
  unsigned j;

  secs = 3;
  nprod = 4;
  memset(&wo, 0, sizeof(wo));
  wo.max_pending = 1000;
  wo.on_full = UVS_FULL_BLOCK;
  for (i = 1; i < (unsigned) argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < (unsigned) argc)
      secs = atof(argv[++i]);
    else if (strcmp(argv[i], "--producers") == 0 && i + 1 < (unsigned) argc)
      nprod = (unsigned) atoi(argv[++i]);
    else if (strcmp(argv[i], "--task-us") == 0 && i + 1 < (unsigned) argc)
      task_ns = (uint64_t) (atof(argv[++i]) * 1000);
    else if (strcmp(argv[i], "--max-pending") == 0 && i + 1 < (unsigned) argc)
      wo.max_pending = (size_t) atol(argv[++i]);
    else {
      fprintf(stderr,
              "usage: %s [--seconds S] [--producers P] [--max-pending N] "
              "[--task-us US]\n",
              argv[0]);
      return 2;
    }
  }
  if (secs <= 0 || nprod == 0 || nprod > 64 || wo.max_pending == 0) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }

  memset(&so, 0, sizeof(so));
  so.keep_alive = 1; /* the tasks come from other threads */
  if (uv_loop_init(&loop) != 0 || uvs_sched_init(&loop, &sched, &so) != 0 ||
      uvs_worker_init_ex(&sched, &worker, UVS_LOOP, &wo) != 0)
    return 1;
  ps = calloc(nprod, sizeof(*ps));
  if (ps == NULL)
    return 1;
  for (i = 0; i < nprod; i++) {
    ps[i].items = calloc(RING, sizeof(item_t));
    if (ps[i].items == NULL)
      return 1;
    for (j = 0; j < RING; j++) {
      uvs_task_init(&ps[i].items[j].task, run_cb, done_cb);
      ps[i].items[j].task.data = &ps[i].items[j];
      ps[i].items[j].owner = &ps[i];
    }
  }
  uv_timer_init(&loop, &timer);
  uv_timer_start(&timer, stop_cb, (uint64_t) (secs * 1000), 0);
  t0 = uv_hrtime();
  atomic_store(&left, nprod);
  for (i = 0; i < nprod; i++)
    if (uv_thread_create(&ps[i].thread, produce, &ps[i]) != 0)
      return 1;
  uv_run(&loop, UV_RUN_DEFAULT);
  secs = (double) (uv_hrtime() - t0) / 1e9;
  for (i = 0; i < nprod; i++) uv_thread_join(&ps[i].thread);
  if (uv_loop_close(&loop) != 0)
    return 1;

  accepted = 0;
  bad = 0;
  for (i = 0; i < nprod; i++) {
    accepted += ps[i].accepted;
    bad += ps[i].errors + ps[i].out_of_order;
    free(ps[i].items);
  }
  free(ps);
  printf("producers\t%u\n", nprod);
  printf("max_pending\t%zu\n", wo.max_pending);
  printf("accepted\t%llu\ttasks\n", (unsigned long long) accepted);
  printf("rate\t%.0f\ttasks/s\n", (double) accepted / secs);
  printf("rejected\t%llu\tcalls\n", (unsigned long long) metrics.rejected);
  printf("errors\t%llu\t(out of order or failed)\n", (unsigned long long) bad);
  return bad == 0 && metrics.rejected == 0 ? 0 : 1;
}
