/* Fault injection through the internal allocator hook: every failing
 * allocation surfaces as UV_ENOMEM from the call that needed it, the call
 * changes nothing, and nothing leaks (ASan's leak checker runs at exit). */

#include "task.h"

#include <stdatomic.h>

static uv_loop_t loop;
static uvs_sched_t sched;
static uvs_worker_t workers[2];
static atomic_int fn_calls;
static int done_calls;


static void count_fn(void* arg) {
  ASSERT_PTR_NE(arg, &done_calls); /* the rejected post's arg */
  atomic_fetch_add(&fn_calls, 1);
}


TEST_IMPL(fault_post_enomem) {
  uvs_stats_t before;
  uvs_stats_t after;
  unsigned long count;
  int accepted;
  int r;
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &sched, NULL));
  ASSERT_OK(uvs_worker_init(&sched, &workers[0], UVS_LOOP));

  /* Post until a post needs memory; that allocation fails. */
  accepted = 0;
  uvs__alloc_fail_after(0);
  for (i = 0; i < 100000; i++) {
    uvs_sched_stats(&sched, &before);
    count = uvs__alloc_count();
    r = uvs_post(&workers[0], count_fn, &done_calls);
    if (uvs__alloc_count() != count)
      break;
    ASSERT_OK(r);
    accepted++;
  }
  uvs__alloc_fail_after(-1);
  ASSERT_LT(i, 100000);
  ASSERT_ERR(r, UV_ENOMEM);
  uvs_sched_stats(&sched, &after);
  ASSERT_OK(memcmp(&before, &after, sizeof(before)));
  ASSERT_UINT64_EQ(after.scheduled, (uint64_t) accepted);
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&fn_calls), accepted);

  /* Later posts work. */
  for (i = 0; i < 200; i++) ASSERT_OK(uvs_post(&workers[0], count_fn, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&fn_calls), accepted + 200);
  uvs_sched_stats(&sched, &after);
  ASSERT_UINT64_EQ(after.scheduled, (uint64_t) accepted + 200);
  ASSERT_UINT64_EQ(after.ran, (uint64_t) accepted + 200);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return 0;
}


TEST_IMPL(fault_sched_init_walk) {
  unsigned long start;
  long k;
  int r;

  for (k = 0; k < 1000; k++) {
    ASSERT_OK(uv_loop_init(&loop));
    start = uvs__alloc_count();
    uvs__alloc_fail_after(k);
    r = uvs_sched_init(&loop, &sched, NULL);
    uvs__alloc_fail_after(-1);
    if (r != 0) {
      ASSERT_ERR(r, UV_ENOMEM);
      ASSERT_GT(uvs__alloc_count() - start, (unsigned long) k);
      /* Nothing was left open on the loop. */
      ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
      ASSERT_OK(uv_loop_close(&loop));
      continue;
    }
    TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
    if (uvs__alloc_count() - start <= (unsigned long) k)
      break;
  }
  ASSERT_LT(k, 1000);
  return 0;
}


/* A whole scenario, with the k-th allocation failing, for every k until the
 * scenario makes fewer than k allocations. */
typedef struct {
  uvs_task_t task;
  int accepted;
  int ran;
  int done_calls;
} ftask_t;

#define NT 40

static ftask_t ftasks[NT];
static int enomem_seen;
static int other_err;


static void f_run_cb(uvs_task_t* task) {
  ftask_t* t;

  t = TEST_CONTAINER_OF(task, ftask_t, task);
  t->ran++;
}


static void f_done_cb(uvs_task_t* task, int status) {
  ftask_t* t;

  t = TEST_CONTAINER_OF(task, ftask_t, task);
  ASSERT(t->accepted);
  t->done_calls++;
  ASSERT_EQ(t->done_calls, 1);
  ASSERT(status == 0 || status == UV_ECANCELED);
  done_calls++;
}


static int check_rc(int r) {
  if (r == UV_ENOMEM)
    enomem_seen++;
  else if (r != 0)
    other_err = r;
  return r == 0;
}


static atomic_int foreign_posts_ok;
static atomic_int foreign_enomem;

static void foreign_thread(void* arg) {
  int i;
  int r;

  (void) arg;
  for (i = 0; i < 100; i++) {
    r = uvs_post(&workers[i & 1], count_fn, NULL);
    if (r == 0)
      atomic_fetch_add(&foreign_posts_ok, 1);
    else if (r == UV_ENOMEM)
      atomic_fetch_add(&foreign_enomem, 1);
    else
      ASSERT_OK(r);
  }
}


static int scenario(long k) {
  uv_thread_t thread;
  unsigned long start;
  uvs_stats_t st;
  int workers_ok[2];
  int posts_ok;
  int expected_fn;
  int accepted;
  int w;
  int i;

  memset(ftasks, 0, sizeof(ftasks));
  enomem_seen = 0;
  other_err = 0;
  done_calls = 0;
  atomic_store(&fn_calls, 0);
  atomic_store(&foreign_posts_ok, 0);
  atomic_store(&foreign_enomem, 0);
  posts_ok = 0;
  accepted = 0;

  ASSERT_OK(uv_loop_init(&loop));
  start = uvs__alloc_count();
  uvs__alloc_fail_after(k);
  if (!check_rc(uvs_sched_init(&loop, &sched, NULL))) {
    uvs__alloc_fail_after(-1);
    ASSERT_OK(other_err);
    ASSERT_OK(uv_loop_close(&loop));
    return 1;
  }
  for (w = 0; w < 2; w++)
    workers_ok[w] =
        check_rc(uvs_worker_init(&sched, &workers[w], w ? UVS_LOOP : UVS_POOL));
  for (i = 0; i < 300; i++)
    if (workers_ok[i & 1])
      posts_ok += check_rc(uvs_post(&workers[i & 1], count_fn, NULL));
  for (i = 0; i < NT; i++) {
    w = i & 1;
    if (!workers_ok[w])
      continue;
    ASSERT_OK(uvs_task_init(&ftasks[i].task, f_run_cb, f_done_cb));
    if (i % 4 == 0)
      ftasks[i].accepted = check_rc(uvs_schedule(&workers[w], &ftasks[i].task));
    else if (i % 4 == 1)
      ftasks[i].accepted =
          check_rc(uvs_schedule_after(&workers[w], &ftasks[i].task, i % 3));
    else if (i % 4 == 2)
      ftasks[i].accepted = check_rc(
          uvs_schedule_every(&workers[w], &ftasks[i].task, 60000, 1000));
    else
      ftasks[i].accepted =
          check_rc(uvs_schedule_after(&workers[w], &ftasks[i].task, 60000));
    accepted += ftasks[i].accepted;
  }
  if (workers_ok[0] && workers_ok[1]) {
    ASSERT_OK(uv_thread_create(&thread, foreign_thread, NULL));
    ASSERT_OK(uv_thread_join(&thread));
  }
  uvs__alloc_fail_after(-1);
  ASSERT_OK(other_err);
  enomem_seen += atomic_load(&foreign_enomem);
  /* The failing allocation, if it happened, was reported exactly once. */
  if (uvs__alloc_count() - start > (unsigned long) k)
    ASSERT_EQ(enomem_seen, 1);
  else
    ASSERT_EQ(enomem_seen, 0);

  /* Cancel what would otherwise never end. */
  for (i = 0; i < NT; i++)
    if (ftasks[i].accepted && (i % 4 == 2 || i % 4 == 3))
      ASSERT_OK(uvs_task_cancel(&ftasks[i].task));
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.scheduled, (uint64_t) (posts_ok + accepted +
                                             atomic_load(&foreign_posts_ok)));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));

  expected_fn = posts_ok + atomic_load(&foreign_posts_ok);
  ASSERT_EQ(atomic_load(&fn_calls), expected_fn);
  ASSERT_EQ(done_calls, accepted);
  for (i = 0; i < NT; i++) {
    ASSERT_EQ(ftasks[i].done_calls, ftasks[i].accepted);
    ASSERT_EQ(ftasks[i].ran, ftasks[i].accepted && i % 4 < 2);
  }
  uvs_sched_stats(&sched, &st);
  ASSERT_UINT64_EQ(st.pending, 0);
  ASSERT_UINT64_EQ(st.scheduled, st.ran + st.cancelled);
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &sched, UVS_CANCEL);
  return uvs__alloc_count() - start > (unsigned long) k;
}


TEST_IMPL(fault_walk_scenario) {
  long k;

  for (k = 0; k < 2000; k++)
    if (!scenario(k))
      break;
  ASSERT_LT(k, 2000);
  return 0;
}


/* Which calls allocate: every public call of a scenario that uses them all
 * is counted; only uvs_sched_init (the timer wheel and the runners) and
 * uvs_post (a chunk of post nodes, each 64 posts) may allocate. */
static uvs_sched_t scheds2[2];
static uvs_worker_t wks2[2][2];
static uvs_task_t tasks2[8];
static int done2;

static void p_run_cb(uvs_task_t* task) {
  (void) task;
}


static void p_done_cb(uvs_task_t* task, int status) {
  (void) task;
  ASSERT(status == 0 || status == UV_ECANCELED);
  done2++;
}


#define NO_ALLOC(expr)                          \
  do {                                          \
    unsigned long before_ = uvs__alloc_count(); \
    (void) (expr);                              \
    ASSERT_EQ(uvs__alloc_count() - before_, 0); \
  } while (0)

TEST_IMPL(fault_alloc_points) {
  unsigned long before;
  uvs_stats_t st;
  int i;

  ASSERT_OK(uv_loop_init(&loop));
  before = uvs__alloc_count();
  ASSERT_OK(uvs_sched_init(&loop, &scheds2[0], NULL));
  /* Its groups, its wheel, its post caches and its runners. */
  ASSERT_EQ(uvs__alloc_count() - before, 4);
  NO_ALLOC(uvs_worker_init(&scheds2[0], &wks2[0][0], UVS_POOL));
  NO_ALLOC(uvs_worker_init(&scheds2[0], &wks2[0][1], UVS_LOOP));
  for (i = 0; i < 8; i++)
    NO_ALLOC(uvs_task_init(&tasks2[i], p_run_cb, p_done_cb));
  NO_ALLOC(uvs_schedule(&wks2[0][0], &tasks2[0]));
  NO_ALLOC(uvs_schedule(&wks2[0][1], &tasks2[1]));
  NO_ALLOC(uvs_schedule_after(&wks2[0][0], &tasks2[2], 5));
  NO_ALLOC(uvs_schedule_after(&wks2[0][1], &tasks2[3], 60000));
  NO_ALLOC(uvs_schedule_every(&wks2[0][1], &tasks2[4], 0, 1));
  NO_ALLOC(uvs_task_cancel(&tasks2[3]));
  NO_ALLOC(uvs_now(&scheds2[0]));
  NO_ALLOC(uvs_sched_stats(&scheds2[0], &st));
  /* Posts: one chunk per 64 nodes in use at once. */
  for (i = 0; i < 200; i++) {
    before = uvs__alloc_count();
    ASSERT_OK(uvs_post(&wks2[0][i & 1], count_fn, NULL));
    ASSERT_EQ(uvs__alloc_count() - before, i % 64 == 0);
  }
  NO_ALLOC(uv_run(&loop, UV_RUN_NOWAIT));
  NO_ALLOC(uvs_task_cancel(&tasks2[4]));
  NO_ALLOC(uvs_worker_close(&wks2[0][0], UVS_DRAIN, NULL));
  NO_ALLOC(uv_run(&loop, UV_RUN_DEFAULT));
  /* The nodes are recycled: no allocation for as many posts again. */
  for (i = 0; i < 200; i++) NO_ALLOC(uvs_post(&wks2[0][1], count_fn, NULL));
  NO_ALLOC(uvs_sched_close(&scheds2[0], UVS_CANCEL, NULL));
  NO_ALLOC(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(done2, 5);
  ASSERT_OK(uv_loop_close(&loop));
  return 0;
}


/* The k-th allocation fails, for every k of a scenario on two schedulers
 * whose posts grow each post pool by several chunks: the one call that
 * needed it returns UV_ENOMEM and changes nothing (every byte of the
 * scheduler and its workers, and the stats, are the same after it); every
 * other call succeeds; everything accepted runs; and the leak checker
 * finds nothing at exit. */
static int walk_calls(long k) {
  unsigned char before[sizeof(uvs_sched_t) + 2 * sizeof(uvs_worker_t)];
  unsigned long start;
  uvs_stats_t st0;
  uvs_stats_t st1;
  int inited[2];
  int posts;
  int enomem;
  int r;
  int s;
  int i;

  atomic_store(&fn_calls, 0);
  done2 = 0;
  posts = 0;
  enomem = 0;
  ASSERT_OK(uv_loop_init(&loop));
  start = uvs__alloc_count();
  uvs__alloc_fail_after(k);
  for (s = 0; s < 2; s++) {
    scheds2[s].data = &inited[s];
    r = uvs_sched_init(&loop, &scheds2[s], NULL);
    inited[s] = r == 0;
    if (r != 0) {
      ASSERT_ERR(r, UV_ENOMEM);
      ASSERT_PTR_EQ(scheds2[s].data, &inited[s]); /* data untouched */
      enomem++;
      continue;
    }
    ASSERT_OK(uvs_worker_init(&scheds2[s], &wks2[s][0], UVS_POOL));
    ASSERT_OK(uvs_worker_init(&scheds2[s], &wks2[s][1], UVS_LOOP));
  }
  for (i = 0; i < 300; i++) {
    s = i % 2;
    if (!inited[s])
      continue;
    uvs_sched_stats(&scheds2[s], &st0);
    memcpy(before, &scheds2[s], sizeof(uvs_sched_t));
    memcpy(before + sizeof(uvs_sched_t), wks2[s], 2 * sizeof(uvs_worker_t));
    r = uvs_post(&wks2[s][(i / 2) & 1], count_fn, NULL);
    if (r == 0) {
      posts++;
      continue;
    }
    ASSERT_ERR(r, UV_ENOMEM);
    enomem++;
    uvs_sched_stats(&scheds2[s], &st1);
    ASSERT_OK(memcmp(&st0, &st1, sizeof(st0)));
    ASSERT_OK(memcmp(before, &scheds2[s], sizeof(uvs_sched_t)));
    ASSERT_OK(memcmp(before + sizeof(uvs_sched_t), wks2[s],
                     2 * sizeof(uvs_worker_t)));
  }
  uvs__alloc_fail_after(-1);
  /* Exactly the k-th allocation failed, if there was one. */
  ASSERT_EQ(enomem, uvs__alloc_count() - start > (unsigned long) k);
  for (s = 0; s < 2; s++)
    if (inited[s])
      ASSERT_OK(uvs_sched_close(&scheds2[s], UVS_DRAIN, NULL));
  ASSERT_OK(uv_run(&loop, UV_RUN_DEFAULT));
  ASSERT_EQ(atomic_load(&fn_calls), posts);
  ASSERT_OK(uv_loop_close(&loop));
  return enomem;
}


TEST_IMPL(fault_walk_calls) {
  long k;

  for (k = 0; k < 1000; k++)
    if (!walk_calls(k))
      break;
  /* Per scheduler its groups, its wheel, its post caches, its runners and
   * 3 post chunks (150 posts, none run). */
  ASSERT_EQ(k, 14);
  return 0;
}


/* A worker with metrics keeps its histograms in one allocation of its own:
 * when it fails, the init answers UV_ENOMEM and leaves the worker and the
 * scheduler as they were; a worker without metrics allocates nothing. */
TEST_IMPL(fault_metrics_worker_init) {
  unsigned char before[sizeof(uvs_worker_t)];
  uvs_worker_options_t o;
  unsigned long start;
  uvs_stats_t st0;
  uvs_stats_t st1;

  ASSERT_OK(uv_loop_init(&loop));
  ASSERT_OK(uvs_sched_init(&loop, &scheds2[0], NULL));
  memset(&o, 0, sizeof(o));
  o.metrics = 1;
  memset(&wks2[0][0], 0xa5, sizeof(uvs_worker_t));
  memcpy(before, &wks2[0][0], sizeof(before));
  uvs_sched_stats(&scheds2[0], &st0);
  uvs__alloc_fail_after(0);
  ASSERT_ERR(uvs_worker_init_ex(&scheds2[0], &wks2[0][0], UVS_POOL, &o),
             UV_ENOMEM);
  uvs__alloc_fail_after(-1);
  ASSERT_OK(memcmp(before, &wks2[0][0], sizeof(before)));
  uvs_sched_stats(&scheds2[0], &st1);
  ASSERT_OK(memcmp(&st0, &st1, sizeof(st0)));

  start = uvs__alloc_count();
  ASSERT_OK(uvs_worker_init_ex(&scheds2[0], &wks2[0][0], UVS_POOL, &o));
  ASSERT_EQ(uvs__alloc_count() - start, 1);
  o.metrics = 0;
  o.max_pending = 4;
  NO_ALLOC(uvs_worker_init_ex(&scheds2[0], &wks2[0][1], UVS_POOL, &o));
  TEST_CLOSE_SCHED_AND_LOOP(&loop, &scheds2[0], UVS_CANCEL);
  return 0;
}
