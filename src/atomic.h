/* Atomics on the plain fields of the public structs, with the memory
 * order in each name so that a reader sees it at the call site: _acq
 * (acquire load), _rel (release store), _rlx (relaxed), _sc (seq_cst
 * read-modify-write). GCC and Clang builtins, which TSan understands.
 * Calls that need another order spell out __atomic_* with it. */

#ifndef UVSCHED_ATOMIC_H
#define UVSCHED_ATOMIC_H

#define uvs__load_acq(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define uvs__load_rlx(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define uvs__store_rel(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define uvs__store_rlx(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define uvs__add_sc(p, v) __atomic_fetch_add((p), (v), __ATOMIC_SEQ_CST)
#define uvs__sub_sc(p, v) __atomic_fetch_sub((p), (v), __ATOMIC_SEQ_CST)
/* A counter with one writer at a time: no read-modify-write needed. */
#define uvs__bump(p) uvs__store_rlx((p), uvs__load_rlx(p) + 1)

#endif /* UVSCHED_ATOMIC_H */
