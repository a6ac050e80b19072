/* uvs_schedule_every: a periodic task on a fixed grid, cancelled by itself.
 *
 * The task first runs 20 ms after the call, then every 10 ms. Run k never
 * starts before grid point k (t_call + 20 + 10 * k ms), and a late run does
 * not push the later ones back. After its fifth run it cancels itself from
 * inside run_cb; cancel returns 0, the current run finishes, and done_cb is
 * called once, with UV_ECANCELED, as it always is for a periodic task.
 */

#include "example.h"

#define DELAY_MS 20
#define PERIOD_MS 10
#define RUNS 5

static uvs_sched_t sched;
static uvs_worker_t worker;
static uvs_task_t tick;
static uint64_t t_call;
static uint64_t started[RUNS]; /* No lock: one run at a time. */
static int nruns;
static int cancel_rc = 1;
static int ndone;


static void tick_run(uvs_task_t* task) {
  if (nruns < RUNS)
    started[nruns] = uv_hrtime();
  if (++nruns == RUNS)
    cancel_rc = uvs_task_cancel(task);
}


static void tick_done(uvs_task_t* task, int status) {
  (void) task;
  EXPECT(status == UV_ECANCELED);
  ndone++;
  CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


int main(void) {
  uv_loop_t* loop = uv_default_loop();
  int k;

  CHECK(uvs_sched_init(loop, &sched, NULL));
  CHECK(uvs_worker_init(&sched, &worker, UVS_POOL));
  CHECK(uvs_task_init(&tick, tick_run, tick_done));
  t_call = uv_hrtime();
  CHECK(uvs_schedule_every(&worker, &tick, DELAY_MS, PERIOD_MS));

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  EXPECT(ndone == 1 && nruns == RUNS && cancel_rc == 0);
  for (k = 0; k < RUNS; k++) {
    uint64_t grid_ms = DELAY_MS + (uint64_t) k * PERIOD_MS;
    printf("run %d: grid point %3d ms, started at %6.2f ms\n", k, (int) grid_ms,
           (double) (started[k] - t_call) / 1e6);
    EXPECT(started[k] - t_call >= grid_ms * 1000000);
  }
  CHECK(uv_loop_close(loop));
  printf("schedule_every: %d runs, none before its grid point\n", RUNS);
  return 0;
}
