#!/bin/sh
# demo.sh -- keel's main job on real data: fetch GloVe 6B 100-d (340,479
# vectors, 1,000 held-out queries, exact ground truth), build an index with
# the CLI on every core, search it with one thread, print recall@10 and
# queries per second. Run by `make demo`; idempotent (the data is kept in
# data/glove-100, the index is rebuilt).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
data=${KEEL_DATA:-data/glove-100}
index=${KEEL_INDEX:-data/glove-100.keel}

sh tools/glove.sh "$data"
rm -f "$index"
echo "== keel build (every core, M 16, ef_construction 200)"
build/keel build "$index" "$data/glove-100.base.fvecs"
build/keel info "$index"
for ef in 32 64 128; do
    echo "== keel search -k 10 --ef $ef (one thread, 1,000 queries)"
    build/keel search "$index" "$data/glove-100.query.fvecs" -k 10 --ef "$ef" \
        --truth "$data/glove-100.gt.l2.ivecs"
done
