/* hazard.c's declarations: the slots that keep a worker alive
 * under a cancel or a pin. Included by internal.h only, at its place in
 * the layer order. */

/* ---- hazard.c: what keeps a worker alive under a cancel or a pin ----- */
typedef struct uvs__hazard_s uvs__hazard_t;
/* Slots per chunk: the first chunk is static, later ones are allocated
 * as threads need them (hazard.c). */
#define UVS__HAZARD_CHUNK 64
/* The calling thread's hazard slot, for one cancel; NULL if it needed
 * memory that could not be had (the caller answers UV_ENOMEM). No lock
 * needed. */
uvs__hazard_t* uvs__hazard_enter(void);
/* Names w as in use; then the caller checks that w is still the task's. */
void uvs__hazard_protect(uvs__hazard_t* hazard, uvs_worker_t* w);
void uvs__hazard_leave(uvs__hazard_t* hazard);
/* Waits until no cancel names w. Every task of w is handed back; no lock
 * held. */
void uvs__hazard_wait_cancels(uvs_worker_t* w);
/* Pins w in the calling thread's slot: 0, or UV_ENOMEM if the thread has
 * no slot and none could be allocated. The caller then loads w->closed
 * (seq_cst). Pins of one worker nest; no call pins two. */
int uvs__hazard_pin(uvs_worker_t* w);
void uvs__hazard_unpin(void);
/* The calling thread's slot's index, from 0, or -1 if it has none. */
int uvs__hazard_index(void);
/* Waits until no slot pins w; w->closed is stored (seq_cst). No lock
 * held. */
void uvs__hazard_wait_pins(uvs_worker_t* w);
/* Pins a worker against its close completing while a caller on another
 * thread is inside the API; returns 0 or UV_ESHUTDOWN if it is closed. */
int uvs__worker_enter(uvs_worker_t* worker);
void uvs__worker_leave(uvs_worker_t* worker);
/* Pins the worker in the caller's hazard slot if the caller is not on its
 * loop's thread (*pinned says whether; unpin with uvs__worker_unpin).
 * Returns UV_ESHUTDOWN if it is closed, UV_ENOMEM if the thread needed a
 * slot and none could be allocated. Never reads the scheduler. On the
 * loop thread a close can't complete under the caller (that happens on
 * the loop thread too): that case, every schedule of a server's I/O
 * callback, costs no call. */
enum { UVS__PIN_NONE = 0, UVS__PIN_SLOT = 1 };
int uvs__worker_pin_slot(uvs_worker_t* worker, int* pinned);
static inline int uvs__worker_pin(uvs_worker_t* w, int* pinned) {
  if (uvs__is_thread(&w->thread)) {
    *pinned = UVS__PIN_NONE;
    return uvs__load_acq(&w->closed) ? UV_ESHUTDOWN : 0;
  }
  return uvs__worker_pin_slot(w, pinned);
}
static inline void uvs__worker_unpin(uvs_worker_t* w, int pinned) {
  (void) w;
  if (pinned == UVS__PIN_SLOT)
    uvs__hazard_unpin();
}
