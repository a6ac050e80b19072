/* The timer structure: a hierarchical timing wheel of delayed tasks.
 *
 * Seven levels of 64 slots; a slot of level L spans 64^L ms, so the wheel
 * covers 2^42 ms, beyond the 2^40 ms limit on delays and periods. A task
 * sits at the level of the highest 6-bit digit in which its due time differs
 * from `elapsed` (the time up to which everything has expired), in the slot
 * named by its due time's digit there. When `elapsed` reaches the start of
 * an occupied slot above level 0, the slot's tasks cascade to lower levels;
 * a level-0 slot holds tasks due at one ms, which then expire. A bitmap per
 * level finds the next occupied slot, so catching up after the loop slept
 * costs per occupied slot, never per elapsed ms.
 *
 * Insert and remove are O(1) with intrusive links. Slots are FIFO lists and
 * cascading keeps their order, so tasks due at the same ms expire in the
 * order they were inserted. The position of a task is never stored: it
 * follows from `elapsed` and its due time (see slot_of), because `elapsed`
 * never enters an occupied slot's span without cascading it.
 */

#include "internal.h"

#define BITS 6
#define SLOTS 64
#define LEVELS 7

struct uvs__timers_s {
  uint64_t elapsed;
  uint64_t occupied[LEVELS];
  uvs__queue_t expired; /* inserted when already due */
  uvs__queue_t slot[LEVELS][SLOTS];
};


static int level_for(uint64_t elapsed, uint64_t due) {
  uint64_t masked;
  int level;

  /* Or-ing in the slot mask makes level 0 the floor. */
  masked = (elapsed ^ due) | (SLOTS - 1);
  level = (63 - __builtin_clzll(masked)) / BITS;
  return level < LEVELS ? level : LEVELS - 1;
}


static unsigned digit(uint64_t due, int level) {
  return (unsigned) (due >> (level * BITS)) & (SLOTS - 1);
}


/* The list holding a delayed task; *level is -1 for the expired list. */
static uvs__queue_t* slot_of(uvs__timers_t* w,
                             const uvs_task_t* t,
                             int* level) {
  if (t->due <= w->elapsed) {
    *level = -1;
    return &w->expired;
  }
  *level = level_for(w->elapsed, t->due);
  return &w->slot[*level][digit(t->due, *level)];
}


int uvs__timers_init(uvs__timers_t** out, uint64_t now) {
  uvs__timers_t* w;
  int l;
  int s;

  w = uvs__malloc(sizeof(*w));
  if (w == NULL)
    return UV_ENOMEM;
  w->elapsed = now;
  uvs__queue_init(&w->expired);
  for (l = 0; l < LEVELS; l++) {
    w->occupied[l] = 0;
    for (s = 0; s < SLOTS; s++) uvs__queue_init(&w->slot[l][s]);
  }
  *out = w;
  return 0;
}


void uvs__timers_free(uvs__timers_t* w) {
  uvs__free(w);
}


void uvs__timers_insert(uvs__timers_t* w, uvs_task_t* t) {
  uvs__queue_t* q;
  int level;

  q = slot_of(w, t, &level);
  uvs__queue_push(q, &t->tnode);
  if (level >= 0)
    w->occupied[level] |= (uint64_t) 1 << digit(t->due, level);
}


void uvs__timers_remove(uvs__timers_t* w, uvs_task_t* t) {
  uvs__queue_t* q;
  int level;

  q = slot_of(w, t, &level);
  uvs__queue_remove(&t->tnode);
  if (level >= 0 && uvs__queue_empty(q))
    w->occupied[level] &= ~((uint64_t) 1 << digit(t->due, level));
}


/* The start of the first occupied slot, lowest level first: every slot of a
 * level starts before any later slot of the level above. */
static uint64_t next_slot(const uvs__timers_t* w, int* level, unsigned* slot) {
  uint64_t bits;
  uint64_t span;
  int l;

  for (l = 0; l < LEVELS; l++) {
    /* Occupied slots lie at or after elapsed's digit in this level. */
    bits = w->occupied[l] & (~(uint64_t) 0 << digit(w->elapsed, l));
    if (bits == 0)
      continue;
    *level = l;
    *slot = (unsigned) __builtin_ctzll(bits);
    span = (uint64_t) 1 << (l * BITS);
    return (w->elapsed & ~(span * SLOTS - 1)) + *slot * span;
  }
  return UINT64_MAX;
}


uint64_t uvs__timers_next(const uvs__timers_t* w) {
  int level;
  unsigned slot;

  if (!uvs__queue_empty(&w->expired))
    return w->elapsed;
  return next_slot(w, &level, &slot);
}


void uvs__timers_expire(uvs__timers_t* w,
                        uint64_t now,
                        void (*fire)(void* ctx, uvs_task_t* task),
                        void* ctx) {
  uvs__queue_t batch;
  uvs__queue_t* q;
  uvs_task_t* t;
  uint64_t start;
  unsigned slot;
  int level;

  level = 0;
  slot = 0;
  uvs__queue_init(&batch);
  uvs__queue_move(&w->expired, &batch);
  while ((q = uvs__queue_shift(&batch)) != NULL)
    fire(ctx, uvs__container_of(q, uvs_task_t, tnode));

  while ((start = next_slot(w, &level, &slot)) <= now) {
    uvs__queue_move(&w->slot[level][slot], &batch);
    w->occupied[level] &= ~((uint64_t) 1 << slot);
    w->elapsed = start;
    while ((q = uvs__queue_shift(&batch)) != NULL) {
      t = uvs__container_of(q, uvs_task_t, tnode);
      if (t->due <= start)
        fire(ctx, t);
      else
        uvs__timers_insert(w, t); /* cascade to a lower level */
    }
  }
  if (now > w->elapsed)
    w->elapsed = now;
}
