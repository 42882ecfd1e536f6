#!/bin/bash
# publish_incremental.sh -- the bytes of an incremental publish: publishes a
# copy of INDEX, adds 1% more vectors (the first rows of VECTORS again, under
# new ids) with `keel build --append`, and publishes again; `keel publish`
# prints what each one sent. Needs a gateway's environment:
#
#   bash test/objstore/run.sh "$PWD/bench/publish_incremental.sh"
#
# INDEX (default bench/out/full/idx/glove-l2-f32.keel, from make bench) and
# VECTORS (default data/glove-100/glove-100.base.fvecs) from the environment.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
K=$root/build/keel
INDEX=${INDEX:-$root/bench/out/full/idx/glove-l2-f32.keel}
VECTORS=${VECTORS:-$root/data/glove-100/glove-100.base.fvecs}
[ -n "${KEEL_TEST_BUCKET:-}" ] || {
    echo "publish_incremental.sh: no gateway" >&2
    echo "help: run it under bash test/objstore/run.sh" >&2
    exit 2
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$INDEX" "$tmp/x.keel"
n=$("$K" info "$tmp/x.keel" --json | /usr/bin/python3 -c \
    'import json,sys; print(json.load(sys.stdin)["count"])')
dim=$("$K" info "$tmp/x.keel" --json | /usr/bin/python3 -c \
    'import json,sys; print(json.load(sys.stdin)["dimensions"])')
add=$(( (n + 99) / 100 ))
head -c $(( add * (4 + 4 * dim) )) "$VECTORS" >"$tmp/more.fvecs"
url=s3://$KEEL_TEST_BUCKET/incremental-$$
echo "file: $(stat -c %s "$tmp/x.keel") bytes, $n vectors; adding $add"
"$K" publish "$tmp/x.keel" "$url"
"$K" build "$tmp/x.keel" "$tmp/more.fvecs" --append
"$K" publish "$tmp/x.keel" "$url"
