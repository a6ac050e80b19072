#!/bin/sh
# Builds examples/node-addon without meson or node-gyp: one cc call, the
# addon and uvsched's sources together, against node's headers, with
# uvsched's symbols hidden and no -luv (node's libuv is the one the addon
# calls). docs/embedding.rst shows this file; test "node-addon-cc" runs it.
#   examples/node-addon/build-cc.sh OUT.node
set -eu
out=$1
top=$(cd "$(dirname "$0")/../.." && pwd)
# node's headers: node_api.h and, for a node with libuv built in, its uv.h
# (a Debian node runs on libuv1, whose uv.h is in /usr/include already).
node_inc=$(node -p 'require("path").resolve(process.execPath, "../../include/node")')
${CC:-cc} -std=c11 -O2 -Wall -Wextra -fPIC -shared \
  -fvisibility=hidden -D_GNU_SOURCE -DUVS_VISIBILITY_HIDDEN \
  -I"$top/include" -isystem "$node_inc" \
  "$top/examples/node-addon/addon.c" "$top"/src/*.c \
  -pthread -o "$out"
