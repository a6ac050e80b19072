/* keys.c's declarations: a wide worker's lanes, its key table and its
 * keyed queue.
 * Included by internal.h only, at its place in the layer order. */

/* ---- keys.c: width > 1 and keys --------------------------------------- */
typedef struct uvs__keys_s uvs__keys_t;
typedef struct uvs__kent_s uvs__kent_t;
/* One of a wide worker's drains. */
typedef struct uvs__lane_s {
  uv_work_t work;
  uvs_worker_t* w;
  uvs_task_t** batch; /* its slots while it runs a batch */
  unsigned batch_len;
  int active;  /* posted or running */
  int seeking; /* posted, and has not picked a task yet */
  /* Its runs, counted here rather than in the worker's fields, which the
   * lanes would share (drain.c); written by the lane's drain only. */
  uint64_t nran;
  uint64_t nended_run;
  uvs__kent_t* kent;             /* the key entry of the task in its slot */
  struct uvs__lane_s* owed_next; /* on sched->lane_owed */
} uvs__lane_t;
/* With key_max_pending: a task of e's run, behind its picked head, starts
 * in the lane that holds e, and counts out of its key. No lock needed.
 * Returns 1 if a producer waits for room or the key was full: then the
 * caller takes the lock and calls uvs__keys_counted_out(), then
 * uvs__keys_space_check(). */
int uvs__keys_started(uvs_worker_t* w, uvs__kent_t* e);
/* Everything below needs the scheduler's lock. */
/* e's count fell (with key_max_pending): room for blocked producers, and
 * key_space_cb owed once a full key is down to half its bound. */
void uvs__keys_counted_out(uvs_worker_t* w, uvs__kent_t* e);
uvs__keys_t* uvs__keys_new(unsigned width);
void uvs__keys_attach(uvs_worker_t* w, uvs__keys_t* keys);
void uvs__keys_free(uvs_worker_t* w);
uvs__lane_t* uvs__keys_lane(uvs_worker_t* w, unsigned i);
/* Intake (uvs__worker_intake() in worker.c): do the lanes want more in
 * kready (it holds fewer than they need, and no barrier waits)? Then
 * take_in files one task from the queue onto kready or behind its key,
 * and answers the same question again: 1 or 0, or UV_ENOMEM if its key's
 * entry can't be had (the caller keeps it queued for a later try). */
int uvs__keys_want(uvs_worker_t* w);
int uvs__keys_take_in(uvs_worker_t* w, uvs_task_t* t);
/* The next task a lane may start, and its key's entry in lane->kent
 * (NULL: no key). A barrier is picked only once nothing else of w runs. */
uvs_task_t* uvs__keys_pick(uvs_worker_t* w, uvs__lane_t* lane);
/* A lane's batch is over (it started at least its first slot): its key's
 * next task joins kready, or, after a barrier, what waited behind it.
 * Returns 1 if a barrier was lifted: the caller asks for lanes for what
 * may start now. */
int uvs__keys_batch_done(uvs_worker_t* w, uvs__lane_t* lane);
/* A picked task that did not start goes back: a key's head to the head of
 * kready, the rest of its key's run to the head of the key's queue. */
void uvs__keys_unpick(uvs_worker_t* w, uvs_task_t* t);
/* A task of a lane's batch yielded (0.5): it goes back as its key's next,
 * ahead of the rest of its key's run, and joins kready's tail when the
 * batch ends (uvs__keys_batch_done); one with no key goes back to
 * kready's head now, ahead of the tasks queued behind it. */
void uvs__keys_requeue(uvs_worker_t* w, uvs_task_t* t);
/* The next task of a picked head's key, out of its queue, or NULL: no
 * other lane could start it (guarantee 12 lets a lane batch one key's
 * run). Only without per-key bounds, which count a task out as it is
 * picked. */
uvs_task_t* uvs__keys_next_of(uvs__kent_t* e);
/* A queued task was taken out (cancel, eviction), from a lane's batch if
 * from_slot: releases its key if it was its key's next. Call before the
 * task is handed back. Returns 1 if it was a waiting barrier, lifted: as
 * uvs__keys_batch_done(). */
int uvs__keys_unlinked(uvs_worker_t* w, uvs_task_t* t, int from_slot);
/* The oldest queued task that lanes took in, left where it is (kready,
 * then the tasks behind running keys), or NULL. */
uvs_task_t* uvs__keys_oldest(uvs_worker_t* w);
/* Lanes w wants posted now (guarantee 12): one for each task in kready
 * that no lane posted and not yet picking will take, as far as the width
 * leaves room. */
unsigned uvs__keys_lanes_wanted(uvs_worker_t* w);
/* A lane was posted to pick a task (+1), or picked or ended (-1). */
void uvs__keys_seeking(uvs_worker_t* w, int delta);
/* Files a counted-in task: onto kready, or behind its key. */
void uvs__keys_file(uvs_worker_t* w, uvs_task_t* t);
/* What happened since the last call: room made for some key, and entries
 * newly owing key_space_cb. */
#define UVS__KEYS_ROOM 1u
#define UVS__KEYS_OWED 2u
unsigned uvs__keys_news(uvs_worker_t* w);
/* Takes the oldest key owed a key_space_cb: 1 and *key, or 0. */
int uvs__keys_owed_take(uvs_worker_t* w, uint64_t* key);
