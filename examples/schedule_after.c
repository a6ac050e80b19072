/* uvs_schedule_after: run tasks once their delays have passed.
 *
 * Three tasks go to one loop worker with delays of 30, 10 and 0 ms, in that
 * order. A delayed task joins the tail of its worker's queue when it falls
 * due, so they run shortest delay first, and none starts before its delay
 * has passed since its schedule call (delay 0 runs at the next timer phase).
 * The task's `data` field points at the user's record; the library never
 * touches it.
 */

#include "example.h"

typedef struct timed_s {
  uint64_t delay_ms;
  uint64_t called_ns; /* uv_hrtime() just before the schedule call */
  uint64_t ran_ns;
  int order;
} timed_t;

static uvs_sched_t sched;
static uvs_worker_t worker;
static uvs_task_t tasks[3];
static timed_t timed[3] = {{30, 0, 0, 0}, {10, 0, 0, 0}, {0, 0, 0, 0}};
static int nran;
static int ndone;


static void timed_run(uvs_task_t* task) {
  timed_t* t = task->data;
  t->ran_ns = uv_hrtime();
  t->order = nran++;
}


static void timed_done(uvs_task_t* task, int status) {
  timed_t* t = task->data;
  EXPECT(status == 0);
  printf("delay %2d ms: ran after %.2f ms, as number %d\n", (int) t->delay_ms,
         (double) (t->ran_ns - t->called_ns) / 1e6, t->order);
  if (++ndone == 3)
    CHECK(uvs_sched_close(&sched, UVS_DRAIN, NULL));
}


int main(void) {
  uv_loop_t* loop = uv_default_loop();
  int i;

  CHECK(uvs_sched_init(loop, &sched, NULL));
  CHECK(uvs_worker_init(&sched, &worker, UVS_LOOP));
  for (i = 0; i < 3; i++) {
    CHECK(uvs_task_init(&tasks[i], timed_run, timed_done));
    tasks[i].data = &timed[i];
    timed[i].called_ns = uv_hrtime();
    CHECK(uvs_schedule_after(&worker, &tasks[i], timed[i].delay_ms));
  }

  EXPECT(uv_run(loop, UV_RUN_DEFAULT) == 0);

  EXPECT(ndone == 3);
  for (i = 0; i < 3; i++) {
    EXPECT(timed[i].order == 2 - i);
    EXPECT(timed[i].ran_ns - timed[i].called_ns >= timed[i].delay_ms * 1000000);
  }
  CHECK(uv_loop_close(loop));
  printf("schedule_after: shortest delay first, none early\n");
  return 0;
}
