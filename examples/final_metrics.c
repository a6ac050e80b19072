/* A worker's final metrics, read in its own close callback.
 *
 * A worker made with the metrics option keeps its wait and run histograms
 * until its close completes: the last place to read them is the worker's
 * own close callback. So the last done_cb closes the worker with a
 * callback, which reads the final figures and then closes the scheduler.
 * A program that closes only the scheduler gets no callback per worker,
 * and reads zeros in the histograms afterwards (the counters stay): main()
 * checks that too.
 *
 * uvs_hist_quantile() answers the upper bound of a bucket (a power of two
 * in us), capped at max_ns: "p50<=2048 us" says half the runs took less
 * than 2.048 ms. The runs here take a little over 1 ms, in the bucket of
 * 1.024 to 2.048 ms. When the slowest run is in that bucket too, p50, p99
 * and max all read the max: the runs are alike, not each as long as the
 * slowest.
 */

#include "example.h"

#include <inttypes.h>

#define NJOBS 100

typedef struct job_s {
  uvs_task_t task; /* First member: a uvs_task_t* is also a job_t*. */
  int id;
} job_t;

static uvs_sched_t sched;
static uvs_worker_t worker;
static job_t jobs[NJOBS];
static int ndone;
static int nclosed;
static uvs_worker_metrics_t final; /* as read in worker_closed() */


static void job_run(uvs_task_t* task) { /* on a pool thread */
  (void) task;
  uv_sleep(1); /* at least 1 ms: a narrow run distribution */
}


static void print_hist(const char* name, const uvs_hist_t* h) {
  if (h->count == 0) {
    printf("%s: nothing recorded\n", name);
    return;
  }
  /* Each quantile is a bucket's upper bound, at most max_ns. */
  printf("%s: n=%" PRIu64 " mean=%" PRIu64 " us p50<=%" PRIu64
         " us p99<=%" PRIu64 " us max=%" PRIu64 " us\n",
         name, h->count, h->sum_ns / h->count / 1000,
         uvs_hist_quantile(h, 0.50) / 1000, uvs_hist_quantile(h, 0.99) / 1000,
         h->max_ns / 1000);
}


static void worker_closed(uvs_worker_t* w) { /* on the loop thread */
  /* The histograms are still there, for the last time. */
  CHECK(uvs_worker_metrics(w, &final));
  printf("ran %" PRIu64 " jobs\n", final.ran);
  print_hist("wait", &final.wait);
  print_hist("run", &final.run);
  nclosed++;
  CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


static void job_done(uvs_task_t* task, int status) { /* on the loop thread */
  (void) task;
  EXPECT(status == 0);
  /* Close the worker, not only the scheduler: its callback reads the
   * histograms before they are freed. */
  if (++ndone == NJOBS)
    CHECK(uvs_worker_close(&worker, UVS_DRAIN, worker_closed));
}


int main(void) {
  uv_loop_t* loop = uv_default_loop();
  uvs_worker_options_t wo = {.metrics = 1};
  uvs_worker_metrics_t after;
  const uvs_hist_t* run = &final.run;
  int i;

  CHECK(uvs_sched_init(loop, &sched, NULL));
  CHECK(uvs_worker_init_ex(&sched, &worker, UVS_POOL, &wo));
  for (i = 0; i < NJOBS; i++) {
    jobs[i].id = i;
    CHECK(uvs_task_init(&jobs[i].task, job_run, job_done));
    CHECK(uvs_schedule(&worker, &jobs[i].task));
  }

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  EXPECT(nclosed == 1 && final.ran == NJOBS);
  EXPECT(final.wait.count == NJOBS && final.run.count == NJOBS);
  EXPECT(run->max_ns >= 1000000); /* uv_sleep(1): at least 1 ms */
  EXPECT(uvs_hist_quantile(run, 0.50) <= uvs_hist_quantile(run, 0.99));
  EXPECT(uvs_hist_quantile(run, 0.99) <= run->max_ns);
  EXPECT(uvs_hist_quantile(run, 1.0) == run->max_ns);

  /* After the close callback: the counters are kept, the histograms are
   * gone. */
  CHECK(uvs_worker_metrics(&worker, &after));
  EXPECT(after.ran == NJOBS && after.run.count == 0 && after.wait.count == 0);

  CHECK(uv_loop_close(loop));
  return 0;
}
