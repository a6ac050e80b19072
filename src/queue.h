/* Intrusive circular doubly-linked list. A head is a node whose next and
 * prev point at itself when empty. Every call is O(1). */

#ifndef UVSCHED_QUEUE_H
#define UVSCHED_QUEUE_H

typedef struct uvs__queue_s uvs__queue_t;

static inline void uvs__queue_init(uvs__queue_t* q) {
  q->next = q;
  q->prev = q;
}


static inline int uvs__queue_empty(const uvs__queue_t* q) {
  return q->next == q;
}


static inline void uvs__queue_push(uvs__queue_t* head, uvs__queue_t* n) {
  n->next = head;
  n->prev = head->prev;
  head->prev->next = n;
  head->prev = n;
}


/* Inserts n at the head, before every other node. */
static inline void uvs__queue_unshift(uvs__queue_t* head, uvs__queue_t* n) {
  n->next = head->next;
  n->prev = head;
  head->next->prev = n;
  head->next = n;
}


static inline void uvs__queue_remove(uvs__queue_t* n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  /* Self-linked: removing twice is harmless and "linked?" is answerable. */
  n->next = n;
  n->prev = n;
}


static inline uvs__queue_t* uvs__queue_shift(uvs__queue_t* head) {
  uvs__queue_t* n;

  if (uvs__queue_empty(head))
    return NULL;
  n = head->next;
  uvs__queue_remove(n);
  return n;
}


/* Moves every node of src to the tail of dst, leaving src empty. */
static inline void uvs__queue_move(uvs__queue_t* src, uvs__queue_t* dst) {
  if (uvs__queue_empty(src))
    return;
  src->next->prev = dst->prev;
  dst->prev->next = src->next;
  src->prev->next = dst;
  dst->prev = src->prev;
  uvs__queue_init(src);
}

#endif /* UVSCHED_QUEUE_H */
