#!/usr/bin/env bash
# Fails if a tracked C file differs from what clang-format 14 makes of it
# (.clang-format at the top). Run it before committing; .ci/run does.
# Installs clang-format from Debian when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup.sh
. scripts/setup.sh
command -v clang-format >/dev/null 2>&1 || uvs_install_pkgs clang-format
bad=0
while IFS= read -r f; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not clang-format clean: $f (clang-format -i $f)"
    bad=1
  fi
done < <(git ls-files '*.c' '*.h' | grep -v '^subprojects/')
[ "$bad" -eq 0 ] && echo "every C file is clang-format clean"
exit "$bad"
