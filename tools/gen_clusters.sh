#!/bin/sh
# gen_clusters.sh -- prepares the generated benchmark set (Gaussian
# clusters, tools/gen_clusters.c says how they are drawn).
#
#   sh tools/gen_clusters.sh [DIR] [N]
#
# Owns DIR (default ./data/gen-clusters), for N base vectors (default
# 1,000,000; bench/run.sh passes GEN_N):
#   clusters-N.base.fvecs         N vectors, 128 dims, float32
#   clusters-N.query.fvecs        1,000 query vectors from the same mixture
#   clusters-N.gt.l2.ivecs        exact top-100 base rows per query, Euclidean
#   clusters-N.gt.l2.dist.fvecs   their distances (Euclidean, not squared)
# 500 clusters, seed 1: the same bytes on every machine. The queries do not
# depend on N, and the base of a smaller N is the first N rows of a larger
# one. sha256 of the files for N = 1,000,000:
#   2d3d972985a6544a11875269c375640b4321d14ce033eecdd73eec4e32b4d0da  base
#   4fb2619ffb8c525fb17b5c95c5953a8059d717c0d366199e54878e90f244ef58  query
#   0da8f423b4eac537bca64172c91a5b35238220c72f2127ee0863999363b67164  gt.l2
#   95d161357a5b56c8e222023e73b93aef34a0fd990992112ef46f20bcaa188a9a  gt.l2.dist
#
# Idempotent: each step is skipped when its outputs exist and are newer than
# the program that made them; outputs are written under temporary names and
# renamed when whole. Needs cc. About 2 s to generate a million vectors and
# 40 s for their ground truth on 2 cores.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-./data/gen-clusters}
n=${2:-1000000}
gen_bin=$root/build/tools/gen_clusters
gt_bin=$root/build/tools/groundtruth
start=$(date +%s)

prog=gen_clusters.sh
. "$root/tools/lib.sh"

case $n in
'' | *[!0-9]*) die "N '$n' is not a number" ;;
esac
mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)
p=$out/clusters-$n

# 1. The programs, rebuilt when their sources change. -ffp-contract=off:
# no fused multiply-adds, so every operation rounds as written.
if [ ! -x "$gen_bin" ] || newer "$root/tools/gen_clusters.c" "$gen_bin"; then
    say "building $gen_bin"
    mkdir -p "$(dirname "$gen_bin")"
    ${CC:-cc} -std=c11 -O2 -ffp-contract=off -o "$gen_bin" \
        "$root/tools/gen_clusters.c" || die "cannot build tools/gen_clusters.c"
fi
build_groundtruth

# 2. The vectors.
if [ -s "$p.base.fvecs" ] && [ -s "$p.query.fvecs" ] &&
    ! newer "$gen_bin" "$p.base.fvecs"; then
    say "vectors: already there"
else
    say "generating $n base and 1,000 query vectors"
    t=$(date +%s)
    "$gen_bin" "$p" "$n" 1000 128 500 1 || die "gen_clusters failed"
    say "generated in $(($(date +%s) - t)) s"
fi

# 3. Exact top-100 by L2.
top100 "$p" l2 l2 "ground truth" "groundtruth failed"

report_done "$p" "$out" "$start" base.fvecs query.fvecs gt.l2.ivecs \
    gt.l2.dist.fvecs
