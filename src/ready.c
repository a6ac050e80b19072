/* The ready order: the lists of workers waiting for a drain, a lane or a
 * loop turn, grouped as 0.4's groups say, and the one function that says
 * which ready pool worker a free drain serves next (uvs__ready_take).
 * Workers join them only through the idle-to-busy hand-off and the end of
 * a turn (worker.c); dispatch() in loop.c and a drain going on to its next
 * worker (drain.c) take from them. Everything here needs the scheduler's
 * lock.
 */

#include "internal.h"


/* Does g wait for drains: a worker of it ready, or one of its drains out? */
static int active(const uvs__group_t* g) {
  return g->drains != 0 || !uvs__queue_empty(&g->ready) ||
         !uvs__queue_empty(&g->wide_ready);
}


/* g had nothing ready nor running: it gets no credit for the time it was
 * idle, and starts level with the least served of the groups that wait
 * (SPEC 0.4, shares). */
static void level(uvs_sched_t* s, uvs__group_t* g) {
  uint64_t least;
  unsigned i;

  least = UINT64_MAX;
  for (i = 0; i < s->ngroups; i++)
    if (&s->groups[i] != g && active(&s->groups[i]) &&
        s->groups[i].vtime < least)
      least = s->groups[i].vtime;
  if (least != UINT64_MAX && g->vtime < least)
    g->vtime = least;
}


/* The group a drain serves next: of those with a serial worker ready and
 * room (or, for held, the place the asking runner has in it already), the
 * one with the least run_cb time per share. */
static uvs__group_t* next_group(uvs_sched_t* s, uvs__group_t* held) {
  uvs__group_t* best;
  uvs__group_t* g;
  unsigned i;

  if (s->ngroups == 1) {
    g = s->groups;
    return uvs__queue_empty(&g->ready) ? NULL : g;
  }
  best = NULL;
  for (i = 0; i < s->ngroups; i++) {
    g = &s->groups[i];
    if (uvs__queue_empty(&g->ready) || (g != held && g->drains >= g->cap))
      continue;
    if (best == NULL || g->vtime < best->vtime)
      best = g;
  }
  return best;
}


int uvs__room(const uvs_sched_t* s) {
  return s->drains < s->cap;
}


int uvs__group_room(const uvs_sched_t* s, const uvs__group_t* g) {
  return s->drains < s->cap && g->drains < g->cap;
}


int uvs__pool_waiting(const uvs_sched_t* s) {
  unsigned i;

  for (i = 0; i < s->ngroups; i++)
    if (!uvs__queue_empty(&s->groups[i].ready))
      return 1;
  return 0;
}


unsigned uvs__wide_order(uvs_sched_t* s, unsigned* order) {
  unsigned n;
  unsigned i;
  unsigned j;

  for (n = 0, i = 0; i < s->ngroups; i++) {
    if (uvs__queue_empty(&s->groups[i].wide_ready))
      continue;
    for (j = n++; j > 0 && s->groups[order[j - 1]].vtime > s->groups[i].vtime;
         j--)
      order[j] = order[j - 1];
    order[j] = i;
  }
  return n;
}


uvs_worker_t* uvs__ready_take(uvs_sched_t* s, int going_on, unsigned* group) {
  uvs__group_t* held;
  uvs__group_t* g;
  uvs_worker_t* w;

  held = going_on ? &s->groups[*group] : NULL;
  g = next_group(s, held);
  if (g == NULL || (held == NULL && g->drains >= g->cap))
    return NULL;
  w = uvs__container_of(g->ready.next, uvs_worker_t, ready_node);
  uvs__queue_remove(&w->ready_node);
  uvs__store_rel(&g->nready, g->nready - 1);
  w->phase = UVS__P_POSTED;
  if (g != held) {
    if (held != NULL)
      held->drains--;
    g->drains++;
    *group = w->group;
  }
  return w;
}


void uvs__ready_chain(uvs_sched_t* s) {
  uvs__group_t* g;
  unsigned i;

  if (!uvs__room(s))
    return;
  for (i = 0; i < s->ngroups; i++) {
    g = &s->groups[i];
    if (g->drains < g->cap &&
        (!uvs__queue_empty(&g->ready) || !uvs__queue_empty(&g->wide_ready))) {
      uvs__ring(s, UVS__BELL_DISPATCH);
      return;
    }
  }
}


void uvs__ready_list(uvs_worker_t* w, int ring) {
  uvs__group_t* g;

  /* A suspended worker waits off the lists, SCHEDULED, so that producers
   * leave it be; its resume or close lists it (close.c). */
  if (uvs__suspended(w)) {
    w->phase = UVS__P_PARKED;
    /* Its pending tasks hold uv_run as ready ones do (loop.c). */
    uvs__store_rel(&w->sched->parked, w->sched->parked + 1);
    uvs__ring(w->sched, UVS__BELL_PARKED);
    return;
  }
  w->phase = UVS__P_READY;
  if (w->where == UVS_LOOP) {
    uvs__queue_push(&w->sched->loop_ready, &w->ready_node);
    if (ring)
      uvs__ring(w->sched, UVS__BELL_TURN);
    return;
  }
  g = uvs__group_of(w);
  if (w->sched->ngroups > 1 && !active(g))
    level(w->sched, g);
  uvs__queue_push(w->keys == NULL ? &g->ready : &g->wide_ready, &w->ready_node);
  uvs__store_rel(&g->nready, g->nready + 1);
  /* The loop posts a drain if the caps leave room for one; if they don't,
   * a drain of the scheduler ends or takes its next turn before long, and
   * looks (runner_done in loop.c, or the drain going on, drain.c). */
  if (ring && uvs__group_room(w->sched, g))
    uvs__ring(w->sched, UVS__BELL_DISPATCH);
}


void uvs__ready_park(uvs_worker_t* w) {
  uvs__group_t* g;

  if (w->phase != UVS__P_READY)
    return;
  uvs__queue_remove(&w->ready_node); /* its list, or a loop turn's */
  if (w->where == UVS_POOL) {
    g = uvs__group_of(w);
    uvs__store_rel(&g->nready, g->nready - 1);
  }
  w->phase = UVS__P_PARKED;
  uvs__store_rel(&w->sched->parked, w->sched->parked + 1);
  uvs__ring(w->sched, UVS__BELL_PARKED);
}


void uvs__group_ran(uvs_worker_t* w, unsigned n, uint64_t ns) {
  uvs__group_t* g;

  g = uvs__group_of(w);
  uvs__store_rel(&g->ran, g->ran + n);
  uvs__store_rel(&g->run_ns, g->run_ns + ns);
  if (w->sched->ngroups > 1)
    g->vtime += ns * 128 / g->shares;
}
