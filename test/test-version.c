#include "task.h"


TEST_IMPL(version_string_agrees) {
  const char* s;
  unsigned major;
  unsigned minor;
  unsigned patch;
  unsigned v;
  int n;

  s = uvs_version_string();
  ASSERT_NOT_NULL(s);
  ASSERT(s[0] >= '0' && s[0] <= '9');

  n = -1;
  ASSERT_EQ(sscanf(s, "%u.%u.%u%n", &major, &minor, &patch, &n), 3);
  ASSERT_GT(n, 0);
  /* An optional suffix may follow, but not more digits of the patch. */
  ASSERT(s[n] == '\0' || !(s[n] >= '0' && s[n] <= '9'));

  v = uvs_version();
  ASSERT_EQ(major, (v >> 16) & 0xff);
  ASSERT_EQ(minor, (v >> 8) & 0xff);
  ASSERT_EQ(patch, v & 0xff);
  ASSERT_EQ(v >> 24, 0);
  return 0;
}


TEST_IMPL(version_matches_header) {
  unsigned v;

  v = uvs_version();
  ASSERT_EQ(v, ((unsigned) UVS_VERSION_MAJOR << 16) |
                   ((unsigned) UVS_VERSION_MINOR << 8) |
                   (unsigned) UVS_VERSION_PATCH);
  /* The string is stable across calls. */
  ASSERT_OK(strcmp(uvs_version_string(), uvs_version_string()));
  return 0;
}
