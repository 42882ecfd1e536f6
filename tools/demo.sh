#!/bin/sh
# demo.sh -- keel's main job on real data: fetch GloVe 6B 100-d (340,479
# vectors, 1,000 held-out queries, exact ground truth), build an index with
# the CLI on every core, search it with one thread, print recall@10 and
# queries per second, then for a few query words the words keel returns next
# to the exact nearest words. Run by `make demo`; idempotent (the data is
# kept in data/glove-100, the index is rebuilt).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
data=${KEEL_DATA:-data/glove-100}
index=${KEEL_INDEX:-data/glove-100.keel}
results=$data/keel-ef64.tsv

sh tools/glove.sh "$data"
rm -f "$index"
echo "== keel build (every core, M 16, ef_construction 200)"
build/keel build "$index" "$data/glove-100.base.fvecs"
build/keel info "$index"
for ef in 32 64 128; do
    echo "== keel search -k 10 --ef $ef (one thread, 1,000 queries)"
    out=
    if [ "$ef" = 64 ]; then out=--out=$results; fi
    # shellcheck disable=SC2086
    build/keel search "$index" "$data/glove-100.query.fvecs" -k 10 --ef "$ef" \
        --truth "$data/glove-100.gt.l2.ivecs" $out
done

echo "== what it finds: keel's 8 nearest words at ef 64, and the exact 8"
echo "   ([brackets]: a word keel returned that is not in the exact 10)"
/usr/bin/python3 - "$data/glove-100" "$results" <<'PY'
import sys

import numpy as np

prefix, results = sys.argv[1], sys.argv[2]
show = ["workers", "birthday", "pipeline", "tongue", "taxpayers", "crashes",
        "tailor", "eccentric"]
with open(prefix + ".base.words.txt", encoding="utf-8") as f:
    words = f.read().split("\n")
with open(prefix + ".query.words.txt", encoding="utf-8") as f:
    queries = f.read().split("\n")
gt = np.fromfile(prefix + ".gt.l2.ivecs", dtype="<i4")
gt = gt.reshape(-1, gt[0] + 1)[:, 1:]
found = {}
with open(results, encoding="utf-8") as f:
    for line in f:
        q, _, ident, _ = line.split("\t")
        found.setdefault(int(q), []).append(int(ident))
for w in show:
    q = queries.index(w)
    exact = [words[i] for i in gt[q, :10]]
    got = [words[i] if words[i] in exact else "[%s]" % words[i]
           for i in found.get(q, [])]
    print("%-10s keel:  %s" % (w, ", ".join(got[:8])))
    print("%-10s exact: %s" % ("", ", ".join(exact[:8])))
PY
