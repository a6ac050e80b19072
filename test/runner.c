/* Test runner: `uvsched-tests NAME` runs one test in this process and prints
 * TAP; `uvsched-tests --list` prints the names of all tests;
 * `uvsched-tests --check-list NAME...` checks that the names given (the list
 * in test/meson.build) are exactly the tests compiled in.
 */

#include "task.h"

#include <stdarg.h>

#include "test-list.h"

const char* test_skip_reason;
static const char* current_test = "?";


void test_failed(const char* file, int line, const char* fmt, ...) {
  va_list ap;

  fflush(stdout);
  fprintf(stderr, "Assertion failed in %s on line %d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n");
  fflush(stderr);
  printf("not ok 1 - %s\n", current_test);
  fflush(stdout);
  abort();
}


static const test_entry_t* find_test(const char* name) {
  const test_entry_t* t;

  for (t = TESTS; t->name != NULL; t++)
    if (strcmp(t->name, name) == 0)
      return t;
  return NULL;
}


static int check_list(int argc, char** argv) {
  const test_entry_t* t;
  int bad;
  int found;
  int i;
  int j;

  bad = 0;
  printf("1..1\n");
  for (i = 0; i < argc; i++) {
    if (find_test(argv[i]) == NULL) {
      printf("# listed in meson.build but not compiled in: %s\n", argv[i]);
      bad = 1;
    }
    for (j = 0; j < i; j++) {
      if (strcmp(argv[i], argv[j]) == 0) {
        printf("# listed twice in meson.build: %s\n", argv[i]);
        bad = 1;
      }
    }
  }
  for (t = TESTS; t->name != NULL; t++) {
    found = 0;
    for (i = 0; i < argc; i++)
      if (strcmp(t->name, argv[i]) == 0)
        found = 1;
    if (!found) {
      printf("# compiled in but not listed in meson.build: %s\n", t->name);
      bad = 1;
    }
  }
  printf("%s 1 - harness_list_matches\n", bad ? "not ok" : "ok");
  return bad;
}


int main(int argc, char** argv) {
  const test_entry_t* t;
  int r;

  if (argc == 2 && strcmp(argv[1], "--list") == 0) {
    for (t = TESTS; t->name != NULL; t++) printf("%s\n", t->name);
    return 0;
  }

  if (argc >= 2 && strcmp(argv[1], "--check-list") == 0)
    return check_list(argc - 2, argv + 2);

  if (argc != 2 || argv[1][0] == '-') {
    fprintf(stderr, "usage: %s NAME | --list | --check-list NAME...\n",
            argv[0]);
    return 2;
  }

  current_test = argv[1];
  printf("1..1\n");
  fflush(stdout);

  t = find_test(argv[1]);
  if (t == NULL) {
    printf("not ok 1 - %s # unknown test\n", argv[1]);
    return 1;
  }

  r = t->fn();
  fflush(stderr);
  if (r == TEST_SKIP) {
    printf("ok 1 - %s # SKIP %s\n", t->name,
           test_skip_reason != NULL ? test_skip_reason : "");
    return 0;
  }
  if (r != TEST_OK) {
    printf("not ok 1 - %s # returned %d\n", t->name, r);
    return 1;
  }
  printf("ok 1 - %s\n", t->name);
  return 0;
}
