/* The timer structure: an intrusive pairing heap of delayed tasks.
 *
 * Insert is O(1), removing the minimum or any node is O(log n) amortised, and
 * nothing is allocated: the node lives in the task. Tasks are ordered by due
 * time, then by seq, so delayed tasks due at the same ms keep schedule order.
 */

#include "internal.h"

typedef struct uvs__hnode_s hnode_t;

static int less(const hnode_t* a, const hnode_t* b) {
  const uvs_task_t* x;
  const uvs_task_t* y;

  x = uvs__container_of(a, uvs_task_t, hnode);
  y = uvs__container_of(b, uvs_task_t, hnode);
  if (x->due != y->due)
    return x->due < y->due;
  return x->seq < y->seq;
}


/* Links two roots; the larger becomes the first child of the smaller. */
static hnode_t* meld(hnode_t* a, hnode_t* b) {
  hnode_t* t;

  if (less(b, a)) {
    t = a;
    a = b;
    b = t;
  }
  b->prev = a;
  b->next = a->child;
  if (a->child != NULL)
    a->child->prev = b;
  a->child = b;
  return a;
}


/* The standard two-pass merge of a sibling list into one root, done
 * iteratively so that a long list can't grow the stack. */
static hnode_t* merge_pairs(hnode_t* first) {
  hnode_t* pairs;
  hnode_t* a;
  hnode_t* b;
  hnode_t* rest;

  pairs = NULL;
  while (first != NULL) {
    a = first;
    b = a->next;
    rest = b != NULL ? b->next : NULL;
    a->next = a->prev = NULL;
    if (b != NULL) {
      b->next = b->prev = NULL;
      a = meld(a, b);
    }
    /* Push onto the pair list through next (roots have no siblings). */
    a->next = pairs;
    pairs = a;
    first = rest;
  }

  if (pairs == NULL)
    return NULL;
  a = pairs;
  pairs = a->next;
  a->next = NULL;
  while (pairs != NULL) {
    b = pairs;
    pairs = b->next;
    b->next = NULL;
    a = meld(a, b);
  }
  return a;
}


void uvs__timers_insert(hnode_t** root, uvs_task_t* task) {
  hnode_t* n;

  n = &task->hnode;
  n->child = n->next = n->prev = NULL;
  *root = *root == NULL ? n : meld(*root, n);
}


void uvs__timers_remove(hnode_t** root, uvs_task_t* task) {
  hnode_t* n;
  hnode_t* sub;

  n = &task->hnode;
  sub = merge_pairs(n->child);
  if (n == *root) {
    *root = sub;
  } else {
    if (n->prev->child == n)
      n->prev->child = n->next;
    else
      n->prev->next = n->next;
    if (n->next != NULL)
      n->next->prev = n->prev;
    if (sub != NULL)
      *root = meld(*root, sub);
  }
  n->child = n->next = n->prev = NULL;
}


uvs_task_t* uvs__timers_min(hnode_t* const* root) {
  if (*root == NULL)
    return NULL;
  return uvs__container_of(*root, uvs_task_t, hnode);
}
