#!/bin/sh
# demo.sh -- keel's main job on real data: fetch GloVe 6B 100-d (340,479
# vectors, 1,000 held-out queries, exact ground truth), build an index with
# the CLI on every core, search it with one thread, print recall@10 and
# queries per second, then for a few query words the words keel returns next
# to the exact nearest words, at the smallest ef (of 64, 256, 1024) that
# finds them. Run by `make demo`; idempotent (the data is
# kept in data/glove-100, the index is rebuilt).
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

echo "== what it finds: for 8 query words, keel's 8 nearest words and the exact 8"
echo "   at the smallest ef of 64, 256 and 1024 that finds the exact ones"
echo "   ([brackets]: a word keel returned that is not in the exact 10)"
echo "   ef is the search's candidate list: a larger ef finds more of the true"
echo "   nearest neighbours and answers fewer queries a second (above)."
show="workers birthday pipeline tongue taxpayers crashes tailor eccentric"
/usr/bin/python3 - "$data/glove-100" "$data/show.fvecs" $show <<'PY'
import sys

import numpy as np

prefix, out, show = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(prefix + ".query.words.txt", encoding="utf-8") as f:
    queries = f.read().split("\n")
q = np.fromfile(prefix + ".query.fvecs", dtype="<f4").reshape(-1, 101)
q[[queries.index(w) for w in show]].tofile(out)
PY
for ef in 64 256 1024; do
    build/keel search "$index" "$data/show.fvecs" -k 10 --ef "$ef" --once \
        --out "$data/show-ef$ef.tsv" >/dev/null
done
/usr/bin/python3 - "$data/glove-100" "$data" $show <<'PY'
import sys

import numpy as np

prefix, data, show = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(prefix + ".base.words.txt", encoding="utf-8") as f:
    words = f.read().split("\n")
with open(prefix + ".query.words.txt", encoding="utf-8") as f:
    queries = f.read().split("\n")
gt = np.fromfile(prefix + ".gt.l2.ivecs", dtype="<i4")
gt = gt.reshape(-1, gt[0] + 1)[:, 1:]
found = {}
for ef in (64, 256, 1024):
    with open("%s/show-ef%d.tsv" % (data, ef), encoding="utf-8") as f:
        for line in f:
            row, _, ident, _ = line.split("\t")
            found.setdefault(ef, {}).setdefault(int(row), []).append(int(ident))
for row, w in enumerate(show):
    exact = [words[i] for i in gt[queries.index(w), :10]]
    for ef in (64, 256, 1024):
        got = [words[i] for i in found[ef].get(row, [])][:8]
        if set(got) == set(exact[:8]):
            break
    got = [g if g in exact else "[%s]" % g for g in got]
    label = "keel (ef %d):" % ef
    print("%-10s %s %s" % (w, label, ", ".join(got)))
    print("%-10s %s %s" % ("", "exact:".ljust(len(label)), ", ".join(exact[:8])))
PY
