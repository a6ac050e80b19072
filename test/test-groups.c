/* Groups (SPEC.md, 0.4): a scheduler's pool workers divided into up to 16
 * groups, each with shares and a max_concurrency of its own.
 *
 * - Every worker is in one group (0 by default); groups govern pool drains
 *   only: a loop worker's group is checked and otherwise ignored. UV_EINVAL
 *   for ngroups above 16, NULL groups with ngroups above 0, or a group
 *   index the scheduler does not have.
 * - A drain or lane counts against the group of the worker it serves; a
 *   group's max_concurrency caps its running run_cbs as the scheduler's cap
 *   does, and the scheduler's still caps the sum (guarantee 12 per group).
 * - Shares: when a cap makes groups wait, each free drain goes to the
 *   waiting group with the least run_cb time per share; a group that was
 *   idle gets no credit for it.
 * - uvs_group_stats: running, ready, ran and run_ns of a group's pool
 *   workers; loop workers count nowhere.
 *
 * The cap tests hold drains busy with gate tasks (helpers.h) so that what
 * runs and what waits is exact; the shares tests keep every worker fed with
 * tasks that schedule themselves again, and measure run_ns, which is what
 * the scheduler itself weighs (preemption of a pool thread by a loaded
 * machine counts the same in both), over a window of wall time. Each test
 * runs in its own process and sets UV_THREADPOOL_SIZE before the loop's
 * first uv_queue_work. */

#include "helpers.h"

#include <stdatomic.h>

static uv_loop_t loop;
static uvs_sched_t sched;
static int ndone;


static void ok_done(uvs_task_t* task, int status) {
  (void) task;
  ASSERT_OK(status);
  ndone++;
}


static void sched_opts(uvs_sched_options_t* o,
                       unsigned cap,
                       unsigned ngroups,
                       const uvs_group_options_t* groups) {
  memset(o, 0, sizeof(*o));
  o->max_concurrency = cap;
  o->ngroups = ngroups;
  o->groups = groups;
}


static int worker_in(uvs_worker_t* w, uvs_where_t where, unsigned group) {
  uvs_worker_options_t o;

  memset(&o, 0, sizeof(o));
  o.group = group;
  return uvs_worker_init_ex(&sched, w, where, &o);
}


static uvs_group_stats_t stats_of(unsigned group) {
  uvs_group_stats_t st;

  memset(&st, 0xff, sizeof(st));
  ASSERT_OK(uvs_group_stats(&sched, group, &st));
  return st;
}


/* ---- run_cbs at once, per group ---------------------------------------- */

#define NG 3

static atomic_int cur[NG];  /* run_cbs of the group's tasks executing now */
static atomic_int peak[NG]; /* ... and the most at once */
static atomic_int cur_all;  /* the same over every group */
static atomic_int peak_all;

static void raise_peak(atomic_int* c, atomic_int* p) {
  int now;
  int prev;

  now = atomic_fetch_add(c, 1) + 1;
  prev = atomic_load(p);
  while (now > prev && !atomic_compare_exchange_weak(p, &prev, now)) {
  }
}


static void conc_enter(int g) {
  raise_peak(&cur[g], &peak[g]);
  raise_peak(&cur_all, &peak_all);
}


static void conc_leave(int g) {
  atomic_fetch_sub(&cur_all, 1);
  atomic_fetch_sub(&cur[g], 1);
}


/* A gate that counts itself among its group's run_cbs. */
typedef struct {
  test_gate_t gate;
  int group;
} ggate_t;

static void ggate_run(uvs_task_t* task) {
  ggate_t* t;

  t = TEST_CONTAINER_OF(task, ggate_t, gate.task);
  conc_enter(t->group);
  test_gate_run(task);
  conc_leave(t->group);
}


static void ggate_init(ggate_t* t,
                       int group,
                       test_latch_t* started,
                       test_latch_t* release) {
  test_gate_init(&t->gate, started, release, 1, ok_done);
  t->group = group;
  ASSERT_OK(uvs_task_init(&t->gate.task, ggate_run, ok_done));
}


/* A task that spins for `us` and counts itself among its group's run_cbs. */
typedef struct {
  uvs_task_t task;
  int group;
  uint64_t us;
} spin_t;

static atomic_int spin_runs[NG];

static void spin_run(uvs_task_t* task) {
  spin_t* t;

  t = TEST_CONTAINER_OF(task, spin_t, task);
  conc_enter(t->group);
  test_spin_us(t->us);
  conc_leave(t->group);
  atomic_fetch_add(&spin_runs[t->group], 1);
}


static void spin_init(spin_t* t, int group, uint64_t us) {
  t->group = group;
  t->us = us;
  ASSERT_OK(uvs_task_init(&t->task, spin_run, ok_done));
}


/* ---- errors ------------------------------------------------------------ */

static void never_hook(uvs_worker_t* worker,
                       uvs_task_t* task,
                       uvs_event_t event,
                       int status,
                       void* arg) {
  (void) worker;
  (void) task;
  (void) event;
  (void) status;
  (void) arg;
  ASSERT(0 && "a hook was called, but uvs_sched_init refused it");
}


TEST_IMPL(groups_init_errors) {
  uvs_group_options_t g[17];
  uvs_sched_options_t o;
  uvs_worker_t w;
  uvs_worker_t w2;

  memset(g, 0, sizeof(g));
  ASSERT_OK(uv_loop_init(&loop));

  sched_opts(&o, 0, 17, g);
  ASSERT_ERR(uvs_sched_init(&loop, &sched, &o), UV_EINVAL);
  sched_opts(&o, 0, UINT_MAX, g);
  ASSERT_ERR(uvs_sched_init(&loop, &sched, &o), UV_EINVAL);
  sched_opts(&o, 0, 1, NULL);
  ASSERT_ERR(uvs_sched_init(&loop, &sched, &o), UV_EINVAL);
  sched_opts(&o, 0, 3, NULL);
  ASSERT_ERR(uvs_sched_init(&loop, &sched, &o), UV_EINVAL);

  /* A hook changes nothing in how the groups are checked. */
  sched_opts(&o, 0, 17, g);
  o.hook = never_hook;
  ASSERT_ERR(uvs_sched_init(&loop, &sched, &o), UV_EINVAL);
  sched_opts(&o, 0, 2, NULL);
  o.hook = never_hook;
  ASSERT_ERR(uvs_sched_init(&loop, &sched, &o), UV_EINVAL);

  /* A failed init left nothing behind on the loop. */
  ASSERT_OK(uv_run(&loop, UV_RUN_NOWAIT));
  ASSERT_OK(uv_loop_close(&loop));

  /* 16 is allowed, and every one of them can be joined. */
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, 0, 16, g);
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  ASSERT_OK(worker_in(&w, UVS_POOL, 15));
  ASSERT_OK(uvs_worker_close(&w, UVS_CANCEL, NULL));
  ASSERT_ERR(worker_in(&w2, UVS_POOL, 16), UV_EINVAL);
  ASSERT_ERR(worker_in(&w2, UVS_LOOP, 16), UV_EINVAL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* A group index the scheduler does not have is UV_EINVAL for pool and loop
 * workers alike: only 0 with ngroups 0, 0..2 with ngroups 3. */
static void worker_group_range(unsigned ngroups) {
  uvs_group_options_t g[3];
  uvs_sched_options_t o;
  uvs_worker_t w[4];
  unsigned have;

  memset(g, 0, sizeof(g));
  have = ngroups != 0 ? ngroups : 1;
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, 0, ngroups, ngroups != 0 ? g : NULL);
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  ASSERT_ERR(worker_in(&w[0], UVS_POOL, have), UV_EINVAL);
  ASSERT_ERR(worker_in(&w[0], UVS_LOOP, have), UV_EINVAL);
  ASSERT_ERR(worker_in(&w[0], UVS_POOL, have + 1), UV_EINVAL);
  ASSERT_ERR(worker_in(&w[0], UVS_LOOP, UINT_MAX), UV_EINVAL);
  ASSERT_ERR(worker_in(&w[0], UVS_POOL, UINT_MAX), UV_EINVAL);
  /* The last group that exists is fine, for both. */
  ASSERT_OK(worker_in(&w[0], UVS_POOL, have - 1));
  ASSERT_OK(worker_in(&w[1], UVS_LOOP, have - 1));
  ASSERT_OK(worker_in(&w[2], UVS_POOL, 0));
  ASSERT_OK(worker_in(&w[3], UVS_LOOP, 0));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
}


TEST_IMPL(groups_worker_group_range_default) {
  worker_group_range(0);
  return 0;
}


TEST_IMPL(groups_worker_group_range_three) {
  worker_group_range(3);
  return 0;
}


TEST_IMPL(groups_stats_errors) {
  uvs_group_options_t g[2];
  uvs_sched_options_t o;
  uvs_group_stats_t st;

  memset(g, 0, sizeof(g));
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, 0, 2, g);
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  ASSERT_ERR(uvs_group_stats(NULL, 0, &st), UV_EINVAL);
  ASSERT_ERR(uvs_group_stats(&sched, 0, NULL), UV_EINVAL);
  ASSERT_ERR(uvs_group_stats(&sched, 2, &st), UV_EINVAL);
  ASSERT_ERR(uvs_group_stats(&sched, 16, &st), UV_EINVAL);
  ASSERT_ERR(uvs_group_stats(&sched, UINT_MAX, &st), UV_EINVAL);
  ASSERT_OK(uvs_group_stats(&sched, 0, &st));
  ASSERT_OK(uvs_group_stats(&sched, 1, &st));
  ASSERT_UINT64_EQ(st.running, 0);
  ASSERT_UINT64_EQ(st.ready, 0);
  ASSERT_UINT64_EQ(st.ran, 0);
  ASSERT_UINT64_EQ(st.run_ns, 0);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);

  /* ngroups 0: group 0 alone. */
  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_group_stats(&sched, 0, &st));
  ASSERT_ERR(uvs_group_stats(&sched, 1, &st), UV_EINVAL);
  ASSERT_ERR(uvs_group_stats(&sched, 0, NULL), UV_EINVAL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* ---- stats values ------------------------------------------------------ */

/* ran counts the run_cbs (posts included, as uvs_sched_stats counts them)
 * of the group's pool workers, run_ns is at least their spins and at most
 * the wall time for a group with one serial worker; a loop worker in a
 * group counts nowhere; nothing runs or waits at the end. */
#define SV_A 5 /* group 0: 2 ms each */
#define SV_B 3 /* group 1: 3 ms each */
#define SV_P 4 /* group 1, posts: 1 ms each */
#define SV_L 6 /* group 1, loop worker: 2 ms each */

static atomic_int sv_posts;

static void sv_post_fn(void* arg) {
  (void) arg;
  test_spin_ms(1);
  atomic_fetch_add(&sv_posts, 1);
}


TEST_IMPL(groups_stats_values) {
  uvs_group_options_t g[2];
  uvs_sched_options_t o;
  uvs_group_stats_t s0;
  uvs_group_stats_t s1;
  uvs_worker_t pa;
  uvs_worker_t pb;
  uvs_worker_t lw;
  spin_t ta[SV_A];
  spin_t tb[SV_B];
  spin_t tl[SV_L];
  uint64_t t0;
  uint64_t wall;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  memset(g, 0, sizeof(g));
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, 0, 2, g);
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  ASSERT_OK(worker_in(&pa, UVS_POOL, 0));
  ASSERT_OK(worker_in(&pb, UVS_POOL, 1));
  ASSERT_OK(worker_in(&lw, UVS_LOOP, 1));
  t0 = test_hrtime();
  for (i = 0; i < SV_A; i++) {
    spin_init(&ta[i], 0, 2000);
    ASSERT_OK(uvs_schedule(&pa, &ta[i].task));
  }
  for (i = 0; i < SV_B; i++) {
    spin_init(&tb[i], 1, 3000);
    ASSERT_OK(uvs_schedule(&pb, &tb[i].task));
  }
  for (i = 0; i < SV_P; i++) ASSERT_OK(uvs_post(&pb, sv_post_fn, NULL));
  for (i = 0; i < SV_L; i++) {
    spin_init(&tl[i], 2, 2000);
    ASSERT_OK(uvs_schedule(&lw, &tl[i].task));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  wall = test_hrtime() - t0;
  ASSERT_EQ(ndone, SV_A + SV_B + SV_L);
  ASSERT_EQ(atomic_load(&sv_posts), SV_P);
  ASSERT_EQ(atomic_load(&spin_runs[2]), SV_L);

  s0 = stats_of(0);
  s1 = stats_of(1);
  ASSERT_UINT64_EQ(s0.ran, SV_A);
  ASSERT_UINT64_EQ(s1.ran, SV_B + SV_P); /* the loop worker's: nowhere */
  ASSERT_UINT64_GE(s0.run_ns, SV_A * 2000000u);
  ASSERT_UINT64_GE(s1.run_ns, SV_B * 3000000u + SV_P * 1000000u);
  /* One serial worker each: their run_cbs never overlap. */
  ASSERT_UINT64_LE(s0.run_ns, wall);
  ASSERT_UINT64_LE(s1.run_ns, wall);
  ASSERT_UINT64_EQ(s0.running, 0);
  ASSERT_UINT64_EQ(s0.ready, 0);
  ASSERT_UINT64_EQ(s1.running, 0);
  ASSERT_UINT64_EQ(s1.ready, 0);

  /* The loop worker again, alone: group 1's stats stand still. */
  for (i = 0; i < SV_L; i++) ASSERT_OK(uvs_schedule(&lw, &tl[i].task));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&spin_runs[2]), 2 * SV_L);
  ASSERT_UINT64_EQ(stats_of(1).ran, s1.ran);
  ASSERT_UINT64_EQ(stats_of(1).run_ns, s1.run_ns);
  ASSERT_UINT64_EQ(stats_of(0).ran, s0.ran);
  ASSERT_UINT64_EQ(stats_of(0).run_ns, s0.run_ns);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


/* No groups asked for (NULL options, or ngroups 0): group 0 holds every
 * pool worker, with default options (a groups pointer with ngroups 0 is
 * not read: its cap of 1 does not apply, two gates start at once), and its
 * stats count them, posts included, loop workers not. */
static void default_group(int with_options) {
  uvs_group_options_t g[1];
  uvs_sched_options_t o;
  uvs_group_stats_t st;
  test_latch_t started;
  test_latch_t release;
  ggate_t gates[2];
  uvs_worker_t w1;
  uvs_worker_t w2;
  uvs_worker_t lw;
  spin_t t[8];
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  ASSERT_OK(uv_loop_init(&loop));
  memset(g, 0, sizeof(g));
  g[0].max_concurrency = 1;
  sched_opts(&o, 0, 0, g);
  ASSERT_OK(uvs_sched_init(&loop, &sched, with_options ? &o : NULL));
  ASSERT_OK(uvs_worker_init(&sched, &w1, UVS_POOL));
  ASSERT_OK(worker_in(&w2, UVS_POOL, 0));
  ASSERT_OK(uvs_worker_init(&sched, &lw, UVS_LOOP));
  ggate_init(&gates[0], 0, &started, &release);
  ggate_init(&gates[1], 0, &started, &release);
  ASSERT_OK(uvs_schedule(&w1, &gates[0].gate.task));
  ASSERT_OK(uvs_schedule(&w2, &gates[1].gate.task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) == 2);
  st = stats_of(0);
  ASSERT_UINT64_EQ(st.running, 2);
  ASSERT_UINT64_EQ(st.ready, 0);
  test_latch_add(&release, 1);
  for (i = 0; i < 3; i++) {
    spin_init(&t[i], 0, 500);
    ASSERT_OK(uvs_schedule(&w1, &t[i].task));
  }
  for (i = 3; i < 5; i++) {
    spin_init(&t[i], 0, 500);
    ASSERT_OK(uvs_schedule(&w2, &t[i].task));
  }
  ASSERT_OK(uvs_post(&w2, sv_post_fn, NULL));
  for (i = 5; i < 8; i++) {
    spin_init(&t[i], 1, 500);
    ASSERT_OK(uvs_schedule(&lw, &t[i].task));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 10);
  ASSERT_EQ(atomic_load(&sv_posts), 1);
  st = stats_of(0);
  ASSERT_UINT64_EQ(st.ran, 2 + 5 + 1);
  ASSERT_UINT64_GE(st.run_ns, 5 * 500000u + 1000000u);
  ASSERT_UINT64_EQ(st.running, 0);
  ASSERT_UINT64_EQ(st.ready, 0);
  ASSERT_ERR(uvs_group_stats(&sched, 1, &st), UV_EINVAL);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&started);
  test_latch_destroy(&release);
}


TEST_IMPL(groups_default_one_group) {
  default_group(0);
  return 0;
}


TEST_IMPL(groups_default_one_group_options) {
  default_group(1);
  return 0;
}


/* ---- caps -------------------------------------------------------------- */

/* Group 0 capped at 2 on a scheduler whose cap is 4: of four workers of
 * group 0 each with a gate, exactly two start and two wait (ready 2,
 * running 2); a worker of group 1 still gets a drain at once while they
 * wait. Then many short tasks: group 0 never has more than 2 run_cbs at
 * once. */
#define MC_W 4

TEST_IMPL(groups_max_concurrency) {
  uvs_group_options_t g[2];
  uvs_sched_options_t o;
  uvs_group_stats_t st;
  test_latch_t started;
  test_latch_t release;
  test_latch_t probe_started;
  ggate_t gates[MC_W];
  ggate_t probe;
  uvs_worker_t w0[MC_W];
  uvs_worker_t w1[2];
  spin_t s0[MC_W][10];
  spin_t s1[2][10];
  int i;
  int j;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  test_latch_init(&probe_started);
  memset(g, 0, sizeof(g));
  g[0].max_concurrency = 2;
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, 0, 2, g); /* the scheduler's cap: the pool's 4 */
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  for (i = 0; i < MC_W; i++) ASSERT_OK(worker_in(&w0[i], UVS_POOL, 0));
  for (i = 0; i < 2; i++) ASSERT_OK(worker_in(&w1[i], UVS_POOL, 1));

  for (i = 0; i < MC_W; i++) {
    ggate_init(&gates[i], 0, &started, &release);
    ASSERT_OK(uvs_schedule(&w0[i], &gates[i].gate.task));
  }
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) >= 2);
  test_settle(&loop);
  ASSERT_EQ(test_latch_count(&started), 2);
  ASSERT_EQ(atomic_load(&cur[0]), 2);
  st = stats_of(0);
  ASSERT_UINT64_EQ(st.running, 2);
  ASSERT_UINT64_EQ(st.ready, 2);
  ASSERT_UINT64_EQ(st.ran, 0);
  st = stats_of(1);
  ASSERT_UINT64_EQ(st.running, 0);
  ASSERT_UINT64_EQ(st.ready, 0);

  /* Group 1 has room, and so has the scheduler: a drain at once, while
   * group 0 stays saturated and its two other workers wait. */
  ggate_init(&probe, 1, &probe_started, &release);
  ASSERT_OK(uvs_schedule(&w1[0], &probe.gate.task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&probe_started) == 1);
  ASSERT_EQ(test_latch_count(&started), 2);
  ASSERT_UINT64_EQ(stats_of(1).running, 1);
  ASSERT_UINT64_EQ(stats_of(0).running, 2);
  ASSERT_UINT64_EQ(stats_of(0).ready, 2);

  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, MC_W + 1);
  ASSERT_EQ(test_latch_count(&started), MC_W);
  ASSERT_EQ(atomic_load(&peak[0]), 2);
  ASSERT_UINT64_EQ(stats_of(0).ran, MC_W);
  ASSERT_UINT64_EQ(stats_of(1).ran, 1);

  /* Many short tasks on every worker: still at most 2 of group 0's. */
  for (j = 0; j < 10; j++) {
    for (i = 0; i < MC_W; i++) {
      spin_init(&s0[i][j], 0, 1000);
      ASSERT_OK(uvs_schedule(&w0[i], &s0[i][j].task));
    }
    for (i = 0; i < 2; i++) {
      spin_init(&s1[i][j], 1, 1000);
      ASSERT_OK(uvs_schedule(&w1[i], &s1[i][j].task));
    }
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, MC_W + 1 + 10 * (MC_W + 2));
  ASSERT_EQ(atomic_load(&spin_runs[0]), 10 * MC_W);
  ASSERT_EQ(atomic_load(&spin_runs[1]), 20);
  ASSERT_LE(atomic_load(&peak[0]), 2);
  ASSERT_UINT64_EQ(stats_of(0).ran, MC_W + 10 * MC_W);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  test_latch_destroy(&probe_started);
  return 0;
}


/* A drain that finishes one worker's turn goes on to another ready worker
 * only if that worker's group has room: group 0 capped at 1 has one gate
 * running and a worker waiting; a drain of group 1 that ends its worker's
 * turn early (one tiny task, its slice far from over) must not take the
 * waiting worker of group 0. */
static void tiny_run(uvs_task_t* task) {
  (void) task;
}


TEST_IMPL(groups_drain_moves_on_only_with_room) {
  uvs_group_options_t g[2];
  uvs_sched_options_t o;
  test_latch_t started;
  test_latch_t release;
  ggate_t gates[2];
  uvs_worker_t w0[2];
  uvs_worker_t w1;
  uvs_task_t tiny[8];
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  memset(g, 0, sizeof(g));
  g[0].max_concurrency = 1;
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, 0, 2, g);
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  for (i = 0; i < 2; i++) {
    ASSERT_OK(worker_in(&w0[i], UVS_POOL, 0));
    ggate_init(&gates[i], 0, &started, &release);
    ASSERT_OK(uvs_schedule(&w0[i], &gates[i].gate.task));
  }
  ASSERT_OK(worker_in(&w1, UVS_POOL, 1));
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) >= 1);
  test_settle(&loop);
  ASSERT_EQ(test_latch_count(&started), 1);
  ASSERT_UINT64_EQ(stats_of(0).ready, 1);
  /* Several times over: each a drain of its own for group 1. */
  for (i = 0; i < 8; i++) {
    ASSERT_OK(uvs_task_init(&tiny[i], tiny_run, ok_done));
    ASSERT_OK(uvs_schedule(&w1, &tiny[i]));
    TEST_RUN_UNTIL(&loop, ndone == i + 1);
    test_settle(&loop);
    ASSERT_EQ(test_latch_count(&started), 1);
    ASSERT_UINT64_EQ(stats_of(0).ready, 1);
  }
  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 8 + 2);
  ASSERT_EQ(atomic_load(&peak[0]), 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* The scheduler's cap caps the sum: cap 2, two groups whose own caps are
 * 0 (the scheduler's) and 8 (above it): of six gated workers, three in
 * each group, exactly two start. */
TEST_IMPL(groups_sched_cap_caps_sum) {
  uvs_group_options_t g[2];
  uvs_sched_options_t o;
  test_latch_t started;
  test_latch_t release;
  ggate_t gates[6];
  uvs_worker_t w[6];
  uvs_group_stats_t s0;
  uvs_group_stats_t s1;
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "6", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  memset(g, 0, sizeof(g));
  g[1].max_concurrency = 8;
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, 2, 2, g);
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  for (i = 0; i < 6; i++) {
    ASSERT_OK(worker_in(&w[i], UVS_POOL, (unsigned) i % 2));
    ggate_init(&gates[i], i % 2, &started, &release);
    ASSERT_OK(uvs_schedule(&w[i], &gates[i].gate.task));
  }
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) >= 2);
  test_settle(&loop);
  ASSERT_EQ(test_latch_count(&started), 2);
  s0 = stats_of(0);
  s1 = stats_of(1);
  ASSERT_UINT64_EQ(s0.running + s1.running, 2);
  ASSERT_UINT64_EQ(s0.ready + s1.ready, 4);
  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 6);
  ASSERT_EQ(atomic_load(&peak_all), 2);
  ASSERT_UINT64_EQ(stats_of(0).ran, 3);
  ASSERT_UINT64_EQ(stats_of(1).ran, 3);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* uvs_sched_init copies the groups: the caller's array changed after it
 * changes nothing (group 0 stays capped at 1). */
TEST_IMPL(groups_options_copied) {
  uvs_group_options_t g[2];
  uvs_sched_options_t o;
  test_latch_t started;
  test_latch_t release;
  ggate_t gates[3];
  uvs_worker_t w[3];
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  memset(g, 0, sizeof(g));
  g[0].max_concurrency = 1;
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, 0, 2, g);
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  g[0].max_concurrency = 0;
  memset(g, 0xff, sizeof(g));
  for (i = 0; i < 3; i++) {
    ASSERT_OK(worker_in(&w[i], UVS_POOL, 0));
    ggate_init(&gates[i], 0, &started, &release);
    ASSERT_OK(uvs_schedule(&w[i], &gates[i].gate.task));
  }
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) >= 1);
  test_settle(&loop);
  ASSERT_EQ(test_latch_count(&started), 1);
  ASSERT_UINT64_EQ(stats_of(0).ready, 2);
  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 3);
  ASSERT_EQ(atomic_load(&peak[0]), 1);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  return 0;
}


/* A wide worker's lanes count against its group: width 4 in a group capped
 * at 2 on a scheduler whose cap is 6. Four gates: two lanes start, the
 * worker waits for another (ready once), a serial worker of the same group
 * waits too, and a worker of group 1 still gets a drain. Then many short
 * tasks: never more than 2 of group 0's run_cbs at once. */
TEST_IMPL(groups_wide_lanes_capped) {
  uvs_group_options_t g[2];
  uvs_sched_options_t o;
  uvs_worker_options_t wo;
  uvs_group_stats_t st;
  test_latch_t started;
  test_latch_t release;
  test_latch_t probe_started;
  ggate_t gates[4];
  ggate_t serial_gate;
  ggate_t probe;
  uvs_worker_t wide;
  uvs_worker_t serial;
  uvs_worker_t other;
  spin_t s[32];
  int i;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "6", 1));
  test_latch_init(&started);
  test_latch_init(&release);
  test_latch_init(&probe_started);
  memset(g, 0, sizeof(g));
  g[0].max_concurrency = 2;
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, 0, 2, g);
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  memset(&wo, 0, sizeof(wo));
  wo.width = 4;
  wo.group = 0;
  ASSERT_OK(uvs_worker_init_ex(&sched, &wide, UVS_POOL, &wo));
  ASSERT_OK(worker_in(&serial, UVS_POOL, 0));
  ASSERT_OK(worker_in(&other, UVS_POOL, 1));

  for (i = 0; i < 4; i++) {
    ggate_init(&gates[i], 0, &started, &release);
    ASSERT_OK(uvs_schedule(&wide, &gates[i].gate.task));
  }
  TEST_RUN_UNTIL(&loop, test_latch_count(&started) >= 2);
  test_settle(&loop);
  ASSERT_EQ(test_latch_count(&started), 2);
  st = stats_of(0);
  ASSERT_UINT64_EQ(st.running, 2);
  ASSERT_UINT64_EQ(st.ready, 1); /* the wide worker, once */

  /* A serial worker of the same group: no room in the group. */
  ggate_init(&serial_gate, 0, &started, &release);
  ASSERT_OK(uvs_schedule(&serial, &serial_gate.gate.task));
  test_settle(&loop);
  ASSERT_EQ(test_latch_count(&started), 2);
  st = stats_of(0);
  ASSERT_UINT64_EQ(st.running, 2);
  ASSERT_UINT64_EQ(st.ready, 2);

  /* Group 1: room. */
  ggate_init(&probe, 1, &probe_started, &release);
  ASSERT_OK(uvs_schedule(&other, &probe.gate.task));
  TEST_RUN_UNTIL(&loop, test_latch_count(&probe_started) == 1);
  ASSERT_EQ(test_latch_count(&started), 2);
  ASSERT_EQ(atomic_load(&peak[0]), 2);

  test_latch_add(&release, 1);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(ndone, 6);
  ASSERT_EQ(atomic_load(&peak[0]), 2);
  ASSERT_UINT64_EQ(stats_of(0).ran, 5);
  ASSERT_UINT64_EQ(stats_of(0).running, 0);
  ASSERT_UINT64_EQ(stats_of(0).ready, 0);

  for (i = 0; i < 32; i++) {
    spin_init(&s[i], 0, 1000);
    ASSERT_OK(uvs_schedule(&wide, &s[i].task));
  }
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&spin_runs[0]), 32);
  ASSERT_LE(atomic_load(&peak[0]), 2);
  ASSERT_UINT64_EQ(stats_of(0).ran, 5 + 32);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  test_latch_destroy(&started);
  test_latch_destroy(&release);
  test_latch_destroy(&probe_started);
  return 0;
}


/* ---- shares ------------------------------------------------------------ */

/* Two groups, SH_W serial workers each, each worker with SH_T tasks of
 * SH_US that schedule themselves again from their run_cb until their group
 * is told to stop: both groups always have ready workers waiting. A timer
 * on the loop thread looks at the stats every SH_TICK_MS and ends the
 * phases of a test.
 *
 * The guarantee is for tasks shorter than a drain's turn (about 1 ms). A
 * loaded machine (sanitizers, tests in parallel on two cores) can stretch
 * one run_cb to tens or hundreds of ms by preempting its thread, and its
 * group is charged the whole of it at once; the scheduler evens that out
 * by the drains that follow, but a window that ends before then is off by
 * up to that much. So a window also lasts until the longest run_cb in it
 * is at most a tenth (a fifth, where the bounds are wider) of the run_cb
 * time in it, as long as SH_SOFT_MS allows; if the machine never let that
 * happen the test is skipped, with the numbers, rather than failed for the
 * machine's doing. A condition
 * that must come (a group drains out, both groups run) fails the test
 * after TEST_WAIT_MS. */
#define SH_W 3
#define SH_T 2
#define SH_US 300
#define SH_TICK_MS 10
#define SH_SOFT_MS 4000
#define MS(x) ((uint64_t) (x) *1000000u)

typedef struct {
  uvs_task_t task;
  uvs_worker_t* w;
  int group;
} feed_t;

static uvs_worker_t sh_w[2][SH_W];
static feed_t sh_t[2][SH_W][SH_T];
static atomic_int sh_stop[2];
static int sh_out[2]; /* scheduled and not handed back (loop thread) */
static uv_timer_t sh_timer;
static int sh_phase;
static uint64_t sh_phase_t0; /* when the current phase began, ns */
static uvs_group_stats_t sh_snap[4][2];
static uint64_t sh_snap_longest[4];
/* The longest run_cb since the loop thread last reset it, in ns. */
static _Atomic uint64_t sh_longest;
static int sh_stretched;  /* a window ended before it was clean */
static unsigned sh_width; /* above 1: wide workers, a key per task */

static void feed_run(uvs_task_t* task) {
  feed_t* t;
  uint64_t t0;
  uint64_t d;
  uint64_t prev;

  t = TEST_CONTAINER_OF(task, feed_t, task);
  t0 = test_hrtime();
  test_spin_us(SH_US);
  if (!atomic_load(&sh_stop[t->group]))
    ASSERT_OK(uvs_schedule(t->w, task));
  d = test_hrtime() - t0;
  prev = atomic_load(&sh_longest);
  while (d > prev && !atomic_compare_exchange_weak(&sh_longest, &prev, d)) {
  }
}


static void feed_done(uvs_task_t* task, int status) {
  feed_t* t;

  ASSERT_OK(status);
  t = TEST_CONTAINER_OF(task, feed_t, task);
  sh_out[t->group]--;
}


static void feed_start(int group) {
  int i;
  int j;

  atomic_store(&sh_stop[group], 0);
  for (i = 0; i < SH_W; i++)
    for (j = 0; j < SH_T; j++) {
      sh_out[group]++;
      ASSERT_OK(uvs_schedule(&sh_w[group][i], &sh_t[group][i][j].task));
    }
}


static void feed_setup(unsigned cap,
                       unsigned shares_a,
                       unsigned shares_b,
                       uv_timer_cb tick) {
  uvs_group_options_t g[2];
  uvs_worker_options_t wo;
  uvs_sched_options_t o;
  int k;
  int i;
  int j;

  ASSERT_OK(setenv("UV_THREADPOOL_SIZE", "4", 1));
  memset(g, 0, sizeof(g));
  g[0].shares = shares_a;
  g[1].shares = shares_b;
  ASSERT_OK(uv_loop_init(&loop));
  sched_opts(&o, cap, 2, g);
  ASSERT_OK(uvs_sched_init(&loop, &sched, &o));
  for (k = 0; k < 2; k++)
    for (i = 0; i < SH_W; i++) {
      memset(&wo, 0, sizeof(wo));
      wo.group = (unsigned) k;
      wo.width = sh_width;
      ASSERT_OK(uvs_worker_init_ex(&sched, &sh_w[k][i], UVS_POOL, &wo));
      for (j = 0; j < SH_T; j++) {
        sh_t[k][i][j].w = &sh_w[k][i];
        sh_t[k][i][j].group = k;
        ASSERT_OK(uvs_task_init(&sh_t[k][i][j].task, feed_run, feed_done));
        ASSERT_OK(uvs_task_set_key(&sh_t[k][i][j].task, (uint64_t) j + 1));
      }
    }
  feed_start(0);
  feed_start(1);
  sh_phase_t0 = test_hrtime();
  ASSERT_OK(uv_timer_init(&loop, &sh_timer));
  ASSERT_OK(uv_timer_start(&sh_timer, tick, SH_TICK_MS, SH_TICK_MS));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(sh_out[0], 0);
  ASSERT_EQ(sh_out[1], 0);
}


static uint64_t phase_ns(void) {
  return test_hrtime() - sh_phase_t0;
}


/* Run time of a group since snapshot `from`, now. */
static uint64_t ran_since(int from, int group) {
  uvs_group_stats_t st;

  st = stats_of((unsigned) group);
  ASSERT_UINT64_GE(st.run_ns, sh_snap[from][group].run_ns);
  return st.run_ns - sh_snap[from][group].run_ns;
}


/* Is the window since snapshot `from` clean: no run_cb in it longer than
 * 1/div of the run_cb time in it? */
static int clean_since(int from, unsigned div) {
  return atomic_load(&sh_longest) * div <=
         ran_since(from, 0) + ran_since(from, 1);
}


/* Ends a phase: snapshot `at` of both groups (and the longest run_cb of
 * the phase), and the next phase begins. */
static void next_phase(int at) {
  sh_snap[at][0] = stats_of(0);
  sh_snap[at][1] = stats_of(1);
  sh_snap_longest[at] = atomic_exchange(&sh_longest, 0);
  sh_phase++;
  sh_phase_t0 = test_hrtime();
}


static uint64_t snap_ns(int from, int to, int group) {
  ASSERT_UINT64_GE(sh_snap[to][group].run_ns, sh_snap[from][group].run_ns);
  return sh_snap[to][group].run_ns - sh_snap[from][group].run_ns;
}


static void feed_stop_all(void) {
  atomic_store(&sh_stop[0], 1);
  atomic_store(&sh_stop[1], 1);
  uv_close((uv_handle_t*) &sh_timer, NULL);
}


/* 1:3. Both groups compete from the start; after a warm-up (100 ms, and
 * both have run), their run_cb time over a window of 1 s (and at least
 * 400 ms of run_cb time in all, and clean) is 1:3, within 25%. */
#define SH_WARM_MS 100
#define SH_WINDOW_MS 1000
#define SH_WINDOW_RUN_MS 400

static void ratio_tick(uv_timer_t* handle) {
  (void) handle;
  if (sh_phase == 0) {
    ASSERT_UINT64_LT(phase_ns(), MS(TEST_WAIT_MS));
    if (phase_ns() >= MS(SH_WARM_MS) && stats_of(0).run_ns > 0 &&
        stats_of(1).run_ns > 0)
      next_phase(0);
    return;
  }
  if (phase_ns() < MS(SH_WINDOW_MS))
    return;
  if (phase_ns() < MS(SH_SOFT_MS) &&
      (ran_since(0, 0) + ran_since(0, 1) < MS(SH_WINDOW_RUN_MS) ||
       !clean_since(0, 10)))
    return;
  sh_stretched = !clean_since(0, 10);
  next_phase(1);
  feed_stop_all();
}


/* One window can be disturbed by the machine: run_cb time is wall time,
 * and a thread of one group that the kernel takes off its core for a
 * while counts that while as its group's. Seen once under ASan with the
 * tests run in parallel on 2 cores (B/A 3.79, every other run 2.97 to
 * 3.02). A scheduler whose shares are off fails all three windows. */
static void shares_reset(void) {
  sh_phase = 0;
  sh_stretched = 0;
  atomic_store(&sh_longest, 0);
  memset(sh_snap, 0, sizeof(sh_snap));
  memset(sh_snap_longest, 0, sizeof(sh_snap_longest));
  sh_out[0] = 0;
  sh_out[1] = 0;
}


static int shares_ratio(unsigned cap) {
  uint64_t a;
  uint64_t b;
  double r;
  int attempt;

  for (attempt = 1;; attempt++) {
    shares_reset();
    feed_setup(cap, 1, 3, ratio_tick);
    ASSERT_EQ(sh_phase, 2);
    a = snap_ns(0, 1, 0);
    b = snap_ns(0, 1, 1);
    fprintf(stderr,
            "# cap %u: run_cb time in the window: A %" PRIu64
            " us (shares 1), B %" PRIu64
            " us (shares 3); longest run_cb %" PRIu64 " us\n",
            cap, a / 1000, b / 1000, sh_snap_longest[1] / 1000);
    TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
    if (sh_stretched)
      RETURN_SKIP("the machine stretched a run_cb past a tenth of the window");
    ASSERT_UINT64_GE(a + b, MS(100)); /* 80 turns or more */
    ASSERT_UINT64_GT(a, 0);
    r = (double) b / (double) a;
    fprintf(stderr, "# B/A = %.3f (want 3, within 25%%)\n", r);
    if (r >= 3.0 * 0.75 && r <= 3.0 * 1.25)
      return 0;
    ASSERT(attempt < 3 && "shares off by more than 25% in three windows");
  }
}


TEST_IMPL(groups_shares_one_to_three) {
  return shares_ratio(1);
}


TEST_IMPL(groups_shares_one_to_three_cap_two) {
  return shares_ratio(2);
}


/* The same with wide workers (width 2): their lanes are drains too, and
 * go to the group with the least run_cb time per share, whatever the
 * groups' order. */
TEST_IMPL(groups_shares_one_to_three_wide) {
  sh_width = 2;
  return shares_ratio(2);
}


/* No credit for idle time. Equal shares, cap 1. Both groups compete for
 * 100 ms (and until both ran 5 ms); then B stops for 300 ms (and until it
 * drained out and A ran 150 ms alone) while A runs on; then B comes back.
 * Had B kept credit for the time it was idle, it would get every drain
 * until its run time caught up with A's lead; starting level with A, it
 * gets about half. In the 200 ms after B comes back (and until the two
 * ran half of A's lead between them, and the window is clean, while they
 * ran less than 1.5 times the lead: up to there a B with credit would
 * still have had three quarters of it), each group gets at least a
 * quarter of the run_cb time. */
#define IC_BOTH_MS 100
#define IC_IDLE_MS 300
#define IC_ALONE_RUN_MS 150
#define IC_AFTER_MS 200

static void idle_tick(uv_timer_t* handle) {
  uint64_t lead;
  uint64_t run;

  (void) handle;
  switch (sh_phase) {
    case 0: /* both compete; once both have run, B stops */
      ASSERT_UINT64_LT(phase_ns(), MS(TEST_WAIT_MS));
      if (phase_ns() < MS(IC_BOTH_MS) || stats_of(0).run_ns < MS(5) ||
          stats_of(1).run_ns < MS(5))
        return;
      next_phase(0);
      atomic_store(&sh_stop[1], 1);
      break;
    case 1: /* A alone; once B drained out and A is well ahead, B is back */
      ASSERT_UINT64_LT(phase_ns(), MS(TEST_WAIT_MS));
      if (phase_ns() < MS(IC_IDLE_MS) || sh_out[1] != 0 ||
          ran_since(0, 0) < MS(IC_ALONE_RUN_MS))
        return;
      next_phase(1);
      feed_start(1);
      break;
    default:
      lead = snap_ns(0, 1, 0) - snap_ns(0, 1, 1);
      run = ran_since(1, 0) + ran_since(1, 1);
      if (phase_ns() < MS(IC_AFTER_MS))
        return;
      if (run < lead * 3 / 2 && phase_ns() < MS(SH_SOFT_MS) &&
          (run < lead / 2 || !clean_since(1, 5)))
        return;
      sh_stretched = !clean_since(1, 5);
      next_phase(2);
      feed_stop_all();
      break;
  }
}


TEST_IMPL(groups_no_idle_credit) {
  uint64_t a;
  uint64_t b;

  feed_setup(1, 0, 0, idle_tick);
  ASSERT_EQ(sh_phase, 3);
  fprintf(stderr, "# B idle: A %" PRIu64 " us, B %" PRIu64 " us\n",
          snap_ns(0, 1, 0) / 1000, snap_ns(0, 1, 1) / 1000);
  a = snap_ns(1, 2, 0);
  b = snap_ns(1, 2, 1);
  fprintf(stderr,
          "# after B came back: A %" PRIu64 " us, B %" PRIu64
          " us; longest run_cb %" PRIu64 " us\n",
          a / 1000, b / 1000, sh_snap_longest[2] / 1000);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  if (sh_stretched)
    RETURN_SKIP("the machine stretched a run_cb past a fifth of the window");
  ASSERT_UINT64_GE(a + b, MS(20));
  ASSERT_UINT64_GE(a * 4, a + b);
  ASSERT_UINT64_GE(b * 4, a + b);
  return 0;
}
