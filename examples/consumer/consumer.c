/* consumer: the smallest program built against an installed uvsched (with
 * pkg-config or CMake) or against uvsched as a meson subproject. It checks that
 * the header and the library agree on the version, then runs three tasks on a
 * pool worker and checks their order. Exit status 0 when all is well.
 */

#include <uvsched.h>

#include <stdio.h>

typedef struct {
  uvs_task_t task; /* First member: a uvs_task_t* is also a job_t*. */
  int id;
} job_t;

static uvs_sched_t sched;
static int order[3];
static int nran;
static int ndone;


static void job_run(uvs_task_t* task) {
  order[nran++] = ((job_t*) task)->id; /* One at a time: no lock needed. */
}


static void job_done(uvs_task_t* task, int status) {
  (void) task;
  if (status == 0 && ++ndone == 3)
    uvs_sched_close(&sched, UVS_DRAIN, NULL);
}


int main(void) {
  unsigned header = UVS_VERSION_HEX;
  uv_loop_t* loop = uv_default_loop();
  uvs_worker_t worker;
  job_t jobs[3];
  int i;

  if (header != ((UVS_VERSION_MAJOR << 16) | (UVS_VERSION_MINOR << 8) |
                 UVS_VERSION_PATCH)) {
    fprintf(stderr, "consumer: UVS_VERSION_HEX %x disagrees with the parts\n",
            header);
    return 1;
  }
  if (uvs_version() != header) {
    fprintf(stderr, "consumer: header %x, library %x\n", header, uvs_version());
    return 1;
  }
  if (uvs_sched_init(loop, &sched, NULL) != 0 ||
      uvs_worker_init(&sched, &worker, UVS_POOL) != 0)
    return 1;
  for (i = 0; i < 3; i++) {
    jobs[i].id = i;
    if (uvs_task_init(&jobs[i].task, job_run, job_done) != 0 ||
        uvs_schedule(&worker, &jobs[i].task) != 0)
      return 1;
  }
  uv_run(loop, UV_RUN_DEFAULT);
  if (uv_loop_close(loop) != 0 || ndone != 3 || order[0] != 0 ||
      order[1] != 1 || order[2] != 2) {
    fprintf(stderr, "consumer: the tasks did not run in order\n");
    return 1;
  }
  printf("consumer: uvsched %s, 3 tasks in order\n", uvs_version_string());
  return 0;
}
