/* A stand-in for a plugin or an addon: a shared object with uvsched linked
 * in whole. check_symbols.py reads which symbols it exports. */

#include <uvsched.h>

/* The one symbol this object means to export. */
__attribute__((visibility("default"))) unsigned probe_version(void) {
  return uvs_version();
}
