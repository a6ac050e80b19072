/* The scheduler's public calls: init, close, clock, stats. */

#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* The scheduler's lock is held for a few dozen instructions at a time, by
 * drains on several pool threads at once under load: where glibc has it,
 * an adaptive mutex spins a little before it sleeps in the kernel. */
static int lock_init(uv_mutex_t* lock) {
#if defined(__GLIBC__) && defined(PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP)
  pthread_mutexattr_t attr;
  int err;

  if (pthread_mutexattr_init(&attr) != 0)
    return UV_ENOMEM;
  err = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
  if (err == 0)
    err = pthread_mutex_init(lock, &attr);
  pthread_mutexattr_destroy(&attr);
  return err == 0 ? 0 : UV_ENOMEM;
#else
  return uv_mutex_init(lock);
#endif
}


/* The groups an init asks for (0.4): 0 or UV_EINVAL, nothing changed. */
static int groups_valid(const uvs_sched_options_t* o) {
  if (o == NULL)
    return 0;
  if (o->ngroups > UVS__GROUPS_MAX || (o->ngroups != 0 && o->groups == NULL))
    return UV_EINVAL;
  return 0;
}


/* The scheduler's groups, from the options: group 0 alone, with default
 * options, when none are asked for. Their caps are set once the
 * scheduler's is known (groups_cap). */
static int groups_init(uvs_sched_t* s, const uvs_sched_options_t* o) {
  const uvs_group_options_t* go;
  uvs__group_t* g;
  unsigned n;
  unsigned i;

  n = o != NULL && o->ngroups != 0 ? o->ngroups : 1;
  s->groups = uvs__calloc(n, sizeof(*s->groups));
  if (s->groups == NULL)
    return UV_ENOMEM;
  s->ngroups = n;
  for (i = 0; i < n; i++) {
    g = &s->groups[i];
    go = o != NULL && o->ngroups != 0 ? &o->groups[i] : NULL;
    uvs__queue_init(&g->ready);
    uvs__queue_init(&g->wide_ready);
    g->shares = go != NULL && go->shares != 0 ? go->shares : 100;
    g->cap = go != NULL ? go->max_concurrency : 0;
  }
  return 0;
}


/* A group's max_concurrency of 0, or above the scheduler's cap, is the
 * scheduler's cap. */
static void groups_cap(uvs_sched_t* s) {
  unsigned i;

  for (i = 0; i < s->ngroups; i++)
    if (s->groups[i].cap == 0 || s->groups[i].cap > s->cap)
      s->groups[i].cap = s->cap;
}


int uvs_sched_init(uv_loop_t* loop,
                   uvs_sched_t* s,
                   const uvs_sched_options_t* options) {
  int err;

  if (loop == NULL || s == NULL)
    return UV_EINVAL;
  err = groups_valid(options);
  if (err != 0)
    return err;

  /* Everything but the user's data field. */
  memset((char*) s + offsetof(uvs_sched_t, loop), 0,
         sizeof(*s) - offsetof(uvs_sched_t, loop));
  if (options != NULL && options->manual_clock) {
    s->manual_clock = 1;
    uvs__store_rel(&s->manual_now, uv_hrtime() / 1000000);
  }
  if (options != NULL) {
    s->budget = options->budget; /* 0: a time slice, see drain.c */
    s->max_concurrency = options->max_concurrency;
    s->keep_alive = options->keep_alive != 0;
    s->linger_us = options->linger_us;
    s->hold_ns = (uint64_t) options->hold_us * 1000;
    s->hook = options->hook;
    s->hook_arg = options->hook_arg;
  }
  if (s->hold_ns == 0)
    s->hold_ns = UVS__HOLD_NS;
  err = groups_init(s, options);
  if (err != 0)
    return err;
  err = uvs__timers_init(&s->timers, uvs__clock_ms(s));
  if (err != 0) {
    uvs__free(s->groups);
    return err;
  }
  err = uvs__post_init(s);
  if (err == 0) {
    err = lock_init(&s->lock);
    if (err == 0 && uv_cond_init(&s->room) != 0) {
      uv_mutex_destroy(&s->lock);
      err = UV_ENOMEM;
    }
    if (err == 0) {
      err = uvs__loop_init(loop, s);
      if (err != 0) {
        uv_cond_destroy(&s->room);
        uv_mutex_destroy(&s->lock);
      }
    }
    if (err != 0)
      uvs__post_free_all(s);
  }
  if (err != 0) {
    uvs__timers_free(s->timers);
    uvs__free(s->groups);
    return err;
  }
  groups_cap(s);

  s->loop = loop;
  s->thread = uv_thread_self();
  uvs__queue_init(&s->workers);
  uvs__queue_init(&s->closing);
  uvs__queue_init(&s->closed);
  uvs__queue_init(&s->loop_ready);
  uvs__queue_init(&s->space);
  uvs__queue_init(&s->soon);
  uvs__store_rel(&s->done_top, NULL);
  s->handles = 4;
  s->timer_due = UINT64_MAX;
  s->timer_asked = UINT64_MAX;
  uvs__store_rel(&s->state, UVS__SS_OPEN);
  uvs__store_rel(&s->now, uv_now(loop));

  uvs__loop_start(s);
  return 0;
}


uint64_t uvs_now(const uvs_sched_t* sched) {
  uvs_sched_t* s;

  if (sched == NULL)
    return 0;
  s = (uvs_sched_t*) sched;
  if (s->manual_clock)
    return uvs__clock_ms(s);
  if (uvs__load_acq(&s->state) != UVS__SS_CLOSED && uvs__on_loop_thread(s))
    uvs__publish_now(s);
  return uvs__load_acq(&s->now);
}


int uvs_clock_advance(uvs_sched_t* s, uint64_t ms) {
  uvs__queue_t due;
  uint64_t target;

  if (s == NULL || !s->manual_clock || ms > UVS__MAX_MS)
    return UV_EINVAL;
  if (uvs__load_acq(&s->state) == UVS__SS_CLOSED || !uvs__on_loop_thread(s))
    return UV_EINVAL;
  uv_mutex_lock(&s->lock);
  target = uvs__load_rlx(&s->manual_now) + ms;
  uvs__queue_init(&due);
  while (uvs__clock_step(s, target, &due)) uvs__fall_due(&due);
  uvs__ring(s, UVS__BELL_TIMER);
  uv_mutex_unlock(&s->lock);
  return 0;
}


static void add_worker_stats(uvs__queue_t* list, uvs_stats_t* out) {
  uvs__queue_t* q;
  uvs_worker_t* w;
  uint64_t inbox;

  for (q = list->next; q != list; q = q->next) {
    w = uvs__container_of(q, uvs_worker_t, list_node);
    inbox = uvs__inbox_count(w);
    out->scheduled += w->nsched + inbox;
    out->ran += uvs__worker_ran(w);
    out->cancelled += w->ncancelled;
    out->pending += uvs__worker_pending(w) + inbox;
  }
}


void uvs_sched_stats(const uvs_sched_t* sched, uvs_stats_t* out) {
  uvs_sched_t* s;

  if (sched == NULL || out == NULL)
    return;
  s = (uvs_sched_t*) sched;
  /* Pinned, so that a close completing meanwhile keeps the lock alive. */
  uvs__add_sc(&s->inflight, 1);
  if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) == UVS__SS_CLOSED) {
    *out = s->stats;
  } else {
    uv_mutex_lock(&s->lock);
    *out = s->stats;
    out->pending = 0;
    add_worker_stats(&s->workers, out);
    add_worker_stats(&s->closing, out);
    uv_mutex_unlock(&s->lock);
  }
  uvs__sub_sc(&s->inflight, 1);
}


/* ---- workers ---------------------------------------------------------- */


int uvs__worker_init(uvs_sched_t* s,
                     uvs_worker_t* w,
                     uvs_where_t where,
                     const uvs_worker_options_t* o) {
  uvs__keys_t* keys;
  uvs__hists_t* hists;
  int err;

  keys = NULL;
  hists = NULL;
  uvs__add_sc(&s->inflight, 1);
  /* UV_EINVAL wins: ngroups is the init's, kept through a close. */
  err = UV_EINVAL;
  if (o != NULL && o->group >= s->ngroups)
    goto out;
  err = UV_ESHUTDOWN;
  if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) != UVS__SS_OPEN)
    goto out;
  if (o != NULL && o->width > 1) {
    err = UV_ENOMEM;
    keys = uvs__keys_new(o->width);
    if (keys == NULL)
      goto out;
    err = UV_ESHUTDOWN;
  }
  if (o != NULL && o->metrics) {
    err = UV_ENOMEM;
    hists = uvs__calloc(1, sizeof(*hists));
    if (hists == NULL)
      goto out;
    err = UV_ESHUTDOWN;
  }
  uv_mutex_lock(&s->lock);
  if (uvs__load_rlx(&s->state) == UVS__SS_OPEN) {
    memset((char*) w + offsetof(uvs_worker_t, sched), 0,
           sizeof(*w) - offsetof(uvs_worker_t, sched));
    w->sched = s;
    w->where = where;
    w->thread = s->thread;
    if (o != NULL) {
      w->width = o->width > 1 ? o->width : 1;
      w->max_pending = o->max_pending;
      w->on_full = o->on_full;
      w->low_water = o->low_water;
      w->space_cb = o->space_cb;
      w->hists = hists;
      hists = NULL;
      w->counting = w->max_pending != 0 || w->hists != NULL;
      w->key_max = o->key_max_pending;
      w->key_space_cb = o->key_space_cb;
      /* Groups govern pool drains only (SPEC 0.4). */
      w->group = where == UVS_POOL ? o->group : 0;
      if (o->max_wait_ms != 0)
        w->max_wait_us = o->max_wait_ms >= ((uint64_t) 1 << 31) / 1000
                             ? UINT32_MAX
                             : (uint32_t) (o->max_wait_ms * 1000);
    } else {
      w->width = 1;
    }
    uvs__inbox_init(w);
    uvs__queue_init(&w->delayed);
    uvs__queue_init(&w->ready_node);
    uvs__queue_init(&w->waiters);
    uvs__queue_init(&w->space_node);
    uvs__queue_init(&w->kready);
    if (keys != NULL) {
      uvs__keys_attach(w, keys);
      keys = NULL;
    }
    uvs__queue_push(&s->workers, &w->list_node);
    err = 0;
  }
  uv_mutex_unlock(&s->lock);
out:
  uvs__sub_sc(&s->inflight, 1);
  if (keys != NULL)
    uvs__free(keys);
  uvs__free(hists);
  return err;
}

int uvs_worker_init(uvs_sched_t* s, uvs_worker_t* w, uvs_where_t where) {
  if (s == NULL || w == NULL || (where != UVS_POOL && where != UVS_LOOP))
    return UV_EINVAL;
  return uvs__worker_init(s, w, where, NULL);
}

int uvs_worker_init_ex(uvs_sched_t* s,
                       uvs_worker_t* w,
                       uvs_where_t where,
                       const uvs_worker_options_t* o) {
  if (o == NULL)
    return uvs_worker_init(s, w, where);
  if (s == NULL || w == NULL || (where != UVS_POOL && where != UVS_LOOP))
    return UV_EINVAL;
  if (o->width > 1 && where != UVS_POOL)
    return UV_EINVAL;
  if (o->key_max_pending != 0 && o->width <= 1)
    return UV_EINVAL;
  if (o->on_full != UVS_FULL_REJECT && o->on_full != UVS_FULL_BLOCK &&
      o->on_full != UVS_FULL_DROP_OLDEST)
    return UV_EINVAL;
  if (o->max_pending != 0 && o->low_water >= o->max_pending)
    return UV_EINVAL;
  return uvs__worker_init(s, w, where, o);
}


int uvs_group_stats(const uvs_sched_t* sched,
                    unsigned group,
                    uvs_group_stats_t* out) {
  const uvs__group_t* g;
  uvs_sched_t* s;
  int err;

  if (sched == NULL || out == NULL)
    return UV_EINVAL;
  s = (uvs_sched_t*) sched;
  /* Pinned, as uvs_sched_stats is: a scheduler that finishes closing
   * meanwhile frees its groups only once no caller is inside. */
  uvs__add_sc(&s->inflight, 1);
  err = UV_EINVAL;
  if (__atomic_load_n(&s->state, __ATOMIC_SEQ_CST) != UVS__SS_CLOSED &&
      group < s->ngroups) {
    g = &s->groups[group];
    out->running = uvs__load_acq(&g->running);
    out->ready = uvs__load_acq(&g->nready);
    out->ran = uvs__load_acq(&g->ran);
    out->run_ns = uvs__load_acq(&g->run_ns);
    err = 0;
  }
  uvs__sub_sc(&s->inflight, 1);
  return err;
}
