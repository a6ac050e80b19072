/* Per-worker metrics (0.2) and shedding (0.3): the histograms a worker
 * with `metrics` keeps (drains add to them as tasks start and end),
 * uvs_worker_metrics(), uvs_hist_quantile(), and what happens to a task
 * that waited longer than max_wait_ms. The counts it reports are kept
 * where they change: the bound's in bound.c, the runs' by the drains, the
 * rest under the lock by whoever hands a task back.
 */

#include "internal.h"

#include <string.h>


void uvs__hist_add(uvs_hist_t* h, uint64_t ns) {
  uint64_t us;
  uint64_t max;
  unsigned k;

  us = ns / 1000;
  k = us == 0 ? 0 : 64 - (unsigned) __builtin_clzll(us);
  if (k > 23)
    k = 23;
  __atomic_fetch_add(&h->count, 1, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->sum_ns, ns, __ATOMIC_RELAXED);
  __atomic_fetch_add(&h->bucket[k], 1, __ATOMIC_RELAXED);
  max = __atomic_load_n(&h->max_ns, __ATOMIC_RELAXED);
  while (ns > max &&
         !__atomic_compare_exchange_n(&h->max_ns, &max, ns, 1, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED))
    ;
}


uint64_t uvs_hist_quantile(const uvs_hist_t* h, double q) {
  uint64_t n;
  uint64_t want;
  uint64_t seen;
  uint64_t bound;
  double x;
  unsigned k;

  if (h == NULL || !(q >= 0.0 && q <= 1.0)) /* NaN fails both */
    return 0;
  n = 0;
  for (k = 0; k < 24; k++) n += h->bucket[k];
  if (n == 0)
    return 0;
  /* max(1, ceil(q * n)), computed so that q * n never rounds past n, and
   * q = 1 exactly (a double holds counts to 2^53 only). */
  x = q * (double) n;
  want = (uint64_t) x;
  if ((double) want < x)
    want++;
  if (q == 1.0)
    want = n;
  if (want < 1)
    want = 1;
  if (want > n)
    want = n;
  seen = 0;
  for (k = 0; k < 23; k++) {
    seen += h->bucket[k];
    if (seen >= want) {
      bound = ((uint64_t) 1 << k) * 1000;
      return bound < h->max_ns ? bound : h->max_ns;
    }
  }
  return h->max_ns; /* the last bucket holds everything longer */
}


static uint64_t load64(const uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}


static void hist_copy(uvs_hist_t* out, const uvs_hist_t* h) {
  unsigned k;

  out->count = load64(&h->count);
  out->sum_ns = load64(&h->sum_ns);
  out->max_ns = load64(&h->max_ns);
  for (k = 0; k < 24; k++) out->bucket[k] = load64(&h->bucket[k]);
}


/* A worker that doesn't count its tasks (no bound, no metrics) keeps no
 * running count either: its drains are running while they hold a batch,
 * which is so all through a run_cb. Lock held. */
static uint64_t batches_running(uvs_worker_t* w) {
  uint64_t n;
  unsigned i;

  if (w->keys == NULL)
    return w->batch != NULL;
  n = 0;
  for (i = 0; i < w->width; i++) n += uvs__keys_lane(w, i)->batch != NULL;
  return n;
}


int uvs_worker_metrics(const uvs_worker_t* worker, uvs_worker_metrics_t* out) {
  uvs_worker_t* w;
  uvs_sched_t* s;
  uint64_t inbox;
  uint64_t pending;
  uint64_t other;
  uvs__hists_t* hists;
  int open;

  if (worker == NULL || out == NULL)
    return UV_EINVAL;
  w = (uvs_worker_t*) worker;
  memset(out, 0, sizeof(*out));
  /* A closed worker's scheduler may be gone: read what the worker holds,
   * which nobody writes any more. */
  open = uvs__worker_enter(w) == 0;
  s = open ? w->sched : NULL;
  if (s != NULL)
    uv_mutex_lock(&s->lock);
  inbox = open ? uvs__inbox_count(w) : 0;
  out->scheduled = w->nsched + inbox;
  /* A closed worker's lanes may be freed: its own field counts them. */
  out->ran = open ? uvs__worker_ran(w) : load64(&w->nran);
  out->dropped = w->ndropped;
  out->expired = w->nexpired;
  /* Handed back for being full or stale count there, not here. */
  out->cancelled = w->ncancelled - w->ndropped - (w->nexpired - w->nskipped);
  out->rejected = load64(&w->nrejected);
  out->delayed = w->ndelayed;
  out->suspended = w->nsuspend; /* kept after a close, as the SPEC asks */
  if (w->counting)
    out->running = __atomic_load_n(&w->running, __ATOMIC_RELAXED);
  else if (open)
    out->running = batches_running(w);
  if (uvs__counting(w)) {
    out->queued = uvs__queued_now(w);
  } else if (open) {
    /* Derived: what is pending and neither delayed nor running. */
    pending = uvs__worker_pending(w) + inbox;
    other = out->delayed + out->running;
    out->queued = pending > other ? pending - other : 0;
  }
  if (open)
    uvs__note_max(w, out->queued);
  out->queued_max = load64(&w->queued_max);
  if (s != NULL)
    uv_mutex_unlock(&s->lock);
  /* The histograms go when the close completes, which a pin holds off;
   * during the close callback, the close holds them for us. */
  hists = open ? w->hists : NULL;
  if (uvs__tls.closed == w)
    hists = uvs__tls.closed_hists;
  if (hists != NULL) {
    hist_copy(&out->wait, &hists->wait);
    hist_copy(&out->run, &hists->run);
  }
  if (s != NULL)
    uvs__worker_leave(w);
  return 0;
}


/* ---- a worker's counts, its lanes' included ------------------------- */


/* The sum of a counter of the worker and the same counter of each lane. */
uint64_t uvs__lanes_sum(uvs_worker_t* w, size_t off) {
  uint64_t n;
  unsigned i;

  n = 0;
  for (i = 0; w->keys != NULL && i < w->width; i++)
    n += uvs__load_acq((uint64_t*) ((char*) uvs__keys_lane(w, i) + off));
  return n;
}

uint64_t uvs__worker_pending(uvs_worker_t* w) {
  uint64_t n;

  n = w->nsched - uvs__load_acq(&w->nended_run) - w->nended;
  if (w->keys != NULL)
    n -= uvs__lanes_sum(w, offsetof(uvs__lane_t, nended_run));
  return n;
}

uint64_t uvs__worker_ran(uvs_worker_t* w) {
  return uvs__load_acq(&w->nran) +
         uvs__lanes_sum(w, offsetof(uvs__lane_t, nran));
}

void uvs__worker_fold_counts(uvs_worker_t* w) {
  uvs__lane_t* lane;
  unsigned i;

  for (i = 0; w->keys != NULL && i < w->width; i++) {
    lane = uvs__keys_lane(w, i);
    uvs__store_rel(&w->nran, uvs__load_rlx(&w->nran) + lane->nran);
    uvs__store_rel(&w->nended_run,
                   uvs__load_rlx(&w->nended_run) + lane->nended_run);
    lane->nran = 0;
    lane->nended_run = 0;
  }
}


/* A task that was ready longer than max_wait_ms is shed instead of run
 * (lock held): handed back with UV_ETIMEDOUT in its place among the
 * batch's hand-backs (so done_cb order still follows the queue's), a post
 * dropped unrun, a periodic task on to its next grid point. */
void uvs__shed(uvs_sched_t* s,
               uvs_worker_t* w,
               uvs_task_t* t,
               uvs__chain_t* done) {
  w->nexpired++;
  if (!(uvs__load_rlx(&t->state) & UVS__T_PERIODIC)) {
    uvs__drop_to(s, t, UV_ETIMEDOUT, done);
    return;
  }
  w->nskipped++;
  if (w->flags & UVS__WF_CLOSING) {
    uvs__drop(s, t, UV_ECANCELED);
    return;
  }
  uvs__skip_grid_point(w, t);
}
