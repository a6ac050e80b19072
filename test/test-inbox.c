/* The worker's inbox (src/worker.c) on its own, as urcu and ck test their
 * queues: the stub node's path when the inbox holds one task, the newest
 * task left behind by take(last = 0), and many producers against one
 * consumer, checking that every task comes out once and in each producer's
 * order. The consumer is single, as the scheduler's lock makes it. */

#include "task.h"

#include "internal.h"

#include <stdatomic.h>

static uvs_worker_t worker;

typedef struct {
  uvs_task_t task;
  int producer;
  int seq;
  int taken;
} item_t;


static void push(item_t* it) {
  it->task.node.prev = NULL; /* as a schedule does before publishing */
  uvs__inbox_push(&worker, &it->task);
}


static item_t* take(int last) {
  uvs_task_t* t;

  t = uvs__inbox_take(&worker, last);
  return t == NULL ? NULL : TEST_CONTAINER_OF(t, item_t, task);
}


TEST_IMPL(inbox_stub_one_task) {
  item_t a;
  item_t b;

  memset(&worker, 0, sizeof(worker));
  uvs__inbox_init(&worker);
  ASSERT(!uvs__inbox_nonempty(&worker));
  ASSERT_NULL(take(1));

  /* One task: take(last = 0) leaves the newest where it is; take(1) puts
   * the stub behind it and returns it. */
  push(&a);
  ASSERT(uvs__inbox_nonempty(&worker));
  ASSERT_EQ(uvs__inbox_count(&worker), 1);
  ASSERT_NULL(take(0));
  ASSERT_PTR_EQ(take(1), &a);
  ASSERT(!uvs__inbox_nonempty(&worker));
  ASSERT_NULL(take(1));

  /* After the stub went round once, the same again, twice over. */
  push(&a);
  push(&b);
  ASSERT_EQ(uvs__inbox_count(&worker), 2);
  ASSERT_PTR_EQ(take(0), &a);
  ASSERT_NULL(take(0));
  ASSERT_PTR_EQ(take(1), &b);
  ASSERT_NULL(take(1));
  push(&b);
  ASSERT_PTR_EQ(take(1), &b);
  ASSERT(!uvs__inbox_nonempty(&worker));
  return 0;
}


TEST_IMPL(inbox_flush_to_fifo) {
  item_t it[5];
  int i;

  memset(&worker, 0, sizeof(worker));
  uvs__inbox_init(&worker);
  for (i = 0; i < 5; i++) push(&it[i]);
  /* A cancel flushes the inbox into the FIFO, where tasks can be
   * unlinked from the middle; takes see the FIFO first, in order. */
  uvs__inbox_flush(&worker);
  ASSERT_EQ(uvs__inbox_count(&worker), 0);
  ASSERT(uvs__inbox_nonempty(&worker));
  uvs__queue_remove(&it[2].task.node);
  ASSERT_PTR_EQ(take(0), &it[0]);
  ASSERT_PTR_EQ(take(0), &it[1]);
  ASSERT_PTR_EQ(take(0), &it[3]);
  ASSERT_PTR_EQ(take(0), &it[4]);
  ASSERT_NULL(take(1));
  ASSERT(!uvs__inbox_nonempty(&worker));
  return 0;
}


/* A flush stops at a producer that has swapped itself in as the tail but
 * not linked yet, and leaves it and what is behind it for later:
 * it does not wait for it (a cancel or close holding the lock would hold up
 * every drain behind a preempted producer). */
TEST_IMPL(inbox_flush_stops_at_unlinked_push) {
  item_t it[4];
  uvs__queue_t* prev;

  memset(&worker, 0, sizeof(worker));
  uvs__inbox_init(&worker);
  push(&it[0]);
  push(&it[1]);
  /* it[2]'s producer: the exchange, and not the link. */
  it[2].task.node.prev = NULL;
  it[2].task.node.next = NULL;
  prev = __atomic_exchange_n(&worker.inbox_tail, &it[2].task.node,
                             __ATOMIC_SEQ_CST);
  push(&it[3]);
  /* it[1] stays too: a node leaves the inbox once the next is linked to
   * it, or by swapping the stub in at the tail, which it is not. */
  uvs__inbox_flush(&worker);
  ASSERT_PTR_EQ(take(1), &it[0]);
  ASSERT_NULL(take(1));
  ASSERT_NULL(it[1].task.node.prev);
  ASSERT_NULL(it[3].task.node.prev);
  ASSERT(uvs__inbox_nonempty(&worker));

  __atomic_store_n(&prev->next, &it[2].task.node, __ATOMIC_RELEASE);
  uvs__inbox_flush(&worker);
  ASSERT_PTR_EQ(take(1), &it[1]);
  ASSERT_PTR_EQ(take(1), &it[2]);
  ASSERT_PTR_EQ(take(1), &it[3]);
  ASSERT_NULL(take(1));
  ASSERT(!uvs__inbox_nonempty(&worker));
  return 0;
}


#define PRODUCERS 3
#define PER_PRODUCER 20000

static item_t items[PRODUCERS][PER_PRODUCER];
static atomic_int producers_done;


static void producer(void* arg) {
  int p;
  int i;

  p = (int) (intptr_t) arg;
  for (i = 0; i < PER_PRODUCER; i++) {
    items[p][i].producer = p;
    items[p][i].seq = i;
    push(&items[p][i]);
  }
  atomic_fetch_add(&producers_done, 1);
}


TEST_IMPL(inbox_producers_one_consumer) {
  uv_thread_t threads[PRODUCERS];
  int next[PRODUCERS];
  item_t* it;
  int total;
  int done;
  int i;

  memset(&worker, 0, sizeof(worker));
  memset(items, 0, sizeof(items));
  uvs__inbox_init(&worker);
  for (i = 0; i < PRODUCERS; i++) {
    next[i] = 0;
    ASSERT_OK(uv_thread_create(&threads[i], producer, (void*) (intptr_t) i));
  }
  /* Take as they come, mixing the two kinds of take and the occasional
   * flush, until every producer is done and the inbox is empty. */
  total = 0;
  for (;;) {
    done = atomic_load(&producers_done) == PRODUCERS;
    if (total % 97 == 13)
      uvs__inbox_flush(&worker);
    it = take(done || total % 3 == 0);
    if (it == NULL) {
      if (done && !uvs__inbox_nonempty(&worker))
        break;
      continue;
    }
    ASSERT_EQ(it->taken, 0);
    it->taken = 1;
    ASSERT_EQ(it->seq, next[it->producer]);
    next[it->producer]++;
    total++;
  }
  for (i = 0; i < PRODUCERS; i++) {
    ASSERT_OK(uv_thread_join(&threads[i]));
    ASSERT_EQ(next[i], PER_PRODUCER);
  }
  ASSERT_EQ(total, PRODUCERS * PER_PRODUCER);
  return 0;
}
