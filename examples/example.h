/* Helpers shared by the small examples: each stops at the first call that
 * fails or the first check that does not hold, and says which. The examples
 * run as tests (meson test --suite examples), so a non-zero exit is a failure.
 */

#ifndef UVSCHED_EXAMPLE_H
#define UVSCHED_EXAMPLE_H

#include <uvsched.h>

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                 \
  do {                                                              \
    int check_rc_ = (call);                                         \
    if (check_rc_ != 0) {                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
              uv_strerror(check_rc_));                              \
      exit(1);                                                      \
    }                                                               \
  } while (0)

#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

#endif /* UVSCHED_EXAMPLE_H */
