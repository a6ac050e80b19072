#!/bin/sh
# Test node-addon-cc: build-cc.sh, the recipe docs/embedding.rst shows,
# builds an addon that exports no uvs_ symbol, needs no libuv of its own,
# and runs a job on node's pool.
#   cc-recipe.sh PYTHON3 OUTDIR
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
top=$(cd "$here/../.." && pwd)
mkdir -p "$2"
"$here/build-cc.sh" "$2/uvsched.node"
"$1" "$top/test/visibility/check_symbols.py" "$top/include/uvsched.h" \
  --hidden "$2/uvsched.node" --no-libuv "$2/uvsched.node"
node -e '
const { Queue, versions } = require(process.argv[1]);
if (versions.uv !== process.versions.uv) throw new Error("not node libuv");
const q = new Queue({ maxConcurrency: 1 });
q.hash(1, 1000).then((r) => { console.log("ran:", r.value); return q.close(); });
' "$2/uvsched.node"
