#include "internal.h"

#define UVS__STR(x) #x
#define UVS__XSTR(x) UVS__STR(x)


unsigned uvs_version(void) {
  return (UVS_VERSION_MAJOR << 16) | (UVS_VERSION_MINOR << 8) |
         UVS_VERSION_PATCH;
}


const char* uvs_version_string(void) {
  return UVS__XSTR(UVS_VERSION_MAJOR) "." UVS__XSTR(
      UVS_VERSION_MINOR) "." UVS__XSTR(UVS_VERSION_PATCH);
}
