/* uvs_task_cancel: take back a queued task and a delayed one.
 *
 * A slow task keeps a pool worker busy for 200 ms. Behind it wait a queued
 * task and a task delayed by 10 s. Both are cancelled at once: cancel returns
 * 0, each is handed back with UV_ECANCELED without waiting for the slow task,
 * and neither ever runs. Cancelling twice returns UV_EBUSY.
 */

#include "example.h"

enum { SLOW, QUEUED, DELAYED, NTASKS };
static const char* names[NTASKS] = {"slow", "queued", "delayed"};

static uvs_sched_t sched;
static uvs_worker_t worker;
static uvs_task_t tasks[NTASKS];
static int ran[NTASKS];
static int status_of[NTASKS];
static int handed_back[NTASKS]; /* position in the order of done_cb calls */
static int ndone;


static void task_run(uvs_task_t* task) {
  int i = (int) (task - tasks);
  ran[i] = 1;
  if (i == SLOW)
    uv_sleep(200);
}


static void task_done(uvs_task_t* task, int status) {
  int i = (int) (task - tasks);
  printf("%-7s handed back: %s\n", names[i],
         status ? uv_err_name(status) : "ok");
  status_of[i] = status;
  handed_back[i] = ndone;
  if (++ndone == NTASKS)
    CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


int main(void) {
  uv_loop_t* loop = uv_default_loop();
  int i;

  CHECK(uvs_sched_init(loop, &sched, NULL));
  CHECK(uvs_worker_init(&sched, &worker, UVS_POOL));
  for (i = 0; i < NTASKS; i++)
    CHECK(uvs_task_init(&tasks[i], task_run, task_done));
  CHECK(uvs_schedule(&worker, &tasks[SLOW]));
  CHECK(uvs_schedule(&worker, &tasks[QUEUED]));
  CHECK(uvs_schedule_after(&worker, &tasks[DELAYED], 10000));

  CHECK(uvs_task_cancel(&tasks[QUEUED]));
  CHECK(uvs_task_cancel(&tasks[DELAYED]));
  EXPECT(uvs_task_cancel(&tasks[QUEUED]) == UV_EBUSY);

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  EXPECT(ndone == NTASKS);
  EXPECT(ran[SLOW] && !ran[QUEUED] && !ran[DELAYED]);
  EXPECT(status_of[SLOW] == 0);
  EXPECT(status_of[QUEUED] == UV_ECANCELED);
  EXPECT(status_of[DELAYED] == UV_ECANCELED);
  EXPECT(handed_back[SLOW] == NTASKS - 1); /* the cancelled ones came first */
  CHECK(uv_loop_close(loop));
  printf("cancel: 2 tasks taken back while the worker was busy\n");
  return 0;
}
