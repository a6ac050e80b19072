/* Every allocation of the library goes through here, so that tests can make
 * the n-th one fail and count them. */

#include "internal.h"

#include <errno.h>
#include <stdlib.h>

static long fail_after = -1;      /* atomic */
static int fail_all;              /* atomic */
static unsigned long alloc_count; /* atomic */


static int should_fail(void) {
  long n;

  __atomic_add_fetch(&alloc_count, 1, __ATOMIC_RELAXED);
  if (__atomic_load_n(&fail_all, __ATOMIC_RELAXED))
    return 1;
  n = __atomic_load_n(&fail_after, __ATOMIC_RELAXED);
  while (n >= 0) {
    if (__atomic_compare_exchange_n(&fail_after, &n, n - 1, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      return n == 0;
  }
  return 0;
}


void* uvs__malloc(size_t size) {
  if (size == 0 || should_fail())
    return NULL;
  return malloc(size);
}


void* uvs__calloc(size_t count, size_t size) {
  if (count == 0 || size == 0 || should_fail())
    return NULL;
  return calloc(count, size);
}


void uvs__free(void* ptr) {
  int saved_errno;

  /* Like libuv's uv__free: callers may rely on errno surviving a free. */
  saved_errno = errno;
  free(ptr);
  errno = saved_errno;
}


void uvs__alloc_fail_after(long n) {
  __atomic_store_n(&fail_after, n < 0 ? -1 : n, __ATOMIC_RELAXED);
}


void uvs__alloc_fail_all(int on) {
  __atomic_store_n(&fail_all, on != 0, __ATOMIC_RELAXED);
}


unsigned long uvs__alloc_count(void) {
  return __atomic_load_n(&alloc_count, __ATOMIC_RELAXED);
}
