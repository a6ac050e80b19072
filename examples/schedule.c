/* uvs_schedule: a few tasks, in order, on a pool worker.
 *
 * Each task's run_cb runs on a thread of libuv's pool, one task at a time and
 * in the order the tasks were scheduled. Each done_cb runs on the loop thread
 * after its run_cb has returned. The last done_cb closes the scheduler, which
 * lets uv_run() return.
 */

#include "example.h"

#define NJOBS 5

typedef struct job_s {
  uvs_task_t task; /* First member: a uvs_task_t* is also a job_t*. */
  int id;
} job_t;

static uvs_sched_t sched;
static uvs_worker_t worker;
static job_t jobs[NJOBS];
static int ran[NJOBS]; /* No lock: a worker runs one task at a time. */
static int nran;
static int ndone;


static void job_run(uvs_task_t* task) {
  job_t* job = (job_t*) task;
  ran[nran++] = job->id;
}


static void job_done(uvs_task_t* task, int status) {
  job_t* job = (job_t*) task;
  printf("job %d handed back: %s\n", job->id,
         status ? uv_err_name(status) : "ok");
  EXPECT(status == 0);
  if (++ndone == NJOBS)
    CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


int main(void) {
  uv_loop_t* loop = uv_default_loop();
  int i;

  CHECK(uvs_sched_init(loop, &sched, NULL));
  CHECK(uvs_worker_init(&sched, &worker, UVS_POOL));
  for (i = 0; i < NJOBS; i++) {
    jobs[i].id = i;
    CHECK(uvs_task_init(&jobs[i].task, job_run, job_done));
    CHECK(uvs_schedule(&worker, &jobs[i].task));
  }

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  EXPECT(ndone == NJOBS && nran == NJOBS);
  for (i = 0; i < NJOBS; i++) EXPECT(ran[i] == i);
  CHECK(uv_loop_close(loop));
  printf("schedule: %d jobs ran in order\n", NJOBS);
  return 0;
}
