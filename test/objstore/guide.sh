#!/bin/bash
# guide.sh -- runs doc/objstore-guide.md as written: its ```sh blocks
# verbatim and its ```python blocks with /usr/bin/python3, in order, as one
# bash script from the repository root (set -e: the first failing command
# fails the test). The guide starts its own gateway (rgw-up.sh) and stops
# it at its end; if a block fails first, the trap here stops it. Run by
# `make test-objstore` (under run.sh, whose variables the guide's own
# replace); ```text blocks are output, not run.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GUIDE=$ROOT/doc/objstore-guide.md
S=$(mktemp "${TMPDIR:-/tmp}/keel-guide.XXXXXX.sh") || exit 1
trap 'rm -f "$S"' EXIT

{
    echo 'set -eu'
    echo "trap '[ -n \"\${GW:-}\" ] && [ -e \"\$GW/env\" ] && bash \"$HERE/rgw-down.sh\" \"\$GW\" >/dev/null 2>&1; true' EXIT"
    awk '
        /^```sh$/     { mode = "sh"; next }
        /^```python$/ { mode = "py"; n++; print "/usr/bin/python3 - <<'"'"'GUIDE_PY_" n "'"'"'"; next }
        /^```/ && mode == "py" { print "GUIDE_PY_" n; mode = ""; next }
        /^```/        { mode = (mode == "" && $0 != "```") ? "skip" : ""; next }
        mode == "sh" || mode == "py" { print }
    ' "$GUIDE"
    echo 'echo "ok   guide.sh: every command of doc/objstore-guide.md ran"'
} >"$S"

n_sh=$(grep -c '^```sh$' "$GUIDE")
n_py=$(grep -c '^```python$' "$GUIDE")
[ "$n_sh" -ge 8 ] && [ "$n_py" -ge 2 ] ||
    { echo "FAIL guide.sh: the guide has $n_sh sh and $n_py python blocks"; exit 1; }
cd "$ROOT" && bash "$S" || { echo "FAIL guide.sh: a command of doc/objstore-guide.md failed (above)"; exit 1; }
