#!/bin/sh
# compare.sh -- keel against hnswlib alone, for tuning the search: the same
# drivers, data and rules as run.sh (M 16, ef_construction 200, one search
# thread), without FAISS, the cold starts or the report; prints the QPS ratio
# keel / hnswlib at equal recall@10, median [min-max] over rounds, and the
# build times.
#
#   sh bench/compare.sh                  every set, 3 rounds
#   SETS=fmnist-l2 ROUNDS=5 sh bench/compare.sh
#   REUSE=1 ...   keep the indexes OUT already holds (search changes only)
#   KEEL_ONLY_BUILD=1 ...  rebuild keel's index, keep hnswlib's
#   BASE=DIR ...  also sweep with the keel library DIR/build/libkeel.a (an
#                 older tree, such as `git archive REV | tar -x -C DIR` and
#                 make there) on the same index, as engine keel-base: the
#                 change measured on one graph (a rebuild's graph differs
#                 with thread timing)
#
# Settings: SETS, ROUNDS (3), EFS_GLOVE, EFS_FMNIST, MIN_TIME (0.3),
# THREADS (every core), GLOVE_DIR (data/glove-100), FMNIST_DIR,
# OUT (bench/out/compare), BUILD (build). BENCH_CLOCK=cpu (the default
# here) times the sweeps in CPU time (bench_common.h): on a shared machine
# wall-clock QPS moves with the other tenants' load. CODES (i8: keel's
# traversal codes; i4: 4-bit ones; none) and PRECISION (f32; f16: half the bytes of stored
# vector) for keel's builds; hnswlib always stores f32. REUSE keeps an
# index whatever precision it was built with (its .build.json says).
# BENCH_HUGE=1: keel opens its
# index with KEEL_HUGE_PAGES, its file taken out of the page cache before
# each sweep so that warm brings the vectors and code rows back in 2 MiB
# pieces (default 0: neither).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
SETS=${SETS:-glove-l2 glove-cos fmnist-l2}
ROUNDS=${ROUNDS:-3}
MIN_TIME=${MIN_TIME:-0.3}
export BENCH_CLOCK=${BENCH_CLOCK:-cpu}
export BENCH_HUGE=${BENCH_HUGE:-0}
CODES=${CODES:-i8}
PRECISION=${PRECISION:-f32}
THREADS=${THREADS:-$(getconf _NPROCESSORS_ONLN)}
EFS_GLOVE=${EFS_GLOVE:-64,96,128,192,256,384,512,768,1024,1536,2048,3072}
EFS_FMNIST=${EFS_FMNIST:-10,12,16,24,32,48,64}
GLOVE_DIR=${GLOVE_DIR:-$root/data/glove-100}
FMNIST_DIR=${FMNIST_DIR:-$root/data/fashion-mnist-784}
OUT=${OUT:-$root/bench/out/compare}
BUILD=${BUILD:-build}
REUSE=${REUSE:-0}
bin=$OUT/bin
mkdir -p "$bin" "$OUT"
make -s -C "$root" -j"$THREADS" BUILD="$BUILD" "$BUILD/libkeel.a" >&2
cc -std=c11 -O2 -g -pthread -D_GNU_SOURCE -I"$root/include" \
    -DKEEL_BENCH_INTERNALS -I"$root/src" -o "$bin/keel_bench" \
    "$root/bench/keel_bench.c" "$root/$BUILD/libkeel.a" \
    -lxxhash -lcurl -lpthread -lm
cc -std=c11 -O2 -o "$bin/evict" "$root/bench/evict.c"
if [ -n "${BASE:-}" ]; then
    cc -std=c11 -O2 -g -pthread -D_GNU_SOURCE -I"$BASE/include" \
        -o "$bin/keel-base_bench" "$root/bench/keel_bench.c" \
        "$BASE/build/libkeel.a" -lxxhash -lcurl -lpthread -lm
fi
[ -x "$bin/hnsw_bench" ] && [ "$bin/hnsw_bench" -nt "$root/bench/hnsw_bench.cpp" ] ||
    c++ -std=c++11 -O2 -g -march=native -pthread -I"$root/bench" \
        -o "$bin/hnsw_bench" "$root/bench/hnsw_bench.cpp"
for g in $SETS; do
    case $g in
    glove-*) d=$GLOVE_DIR/glove-100; efs=$EFS_GLOVE ;;
    fmnist-*) d=$FMNIST_DIR/fashion-mnist-784; efs=$EFS_FMNIST ;;
    esac
    case $g in
    *-cos) metric=cosine; m=cos ;;
    *) metric=l2; m=l2 ;;
    esac
    rm -f "$OUT/$g.sweep.jsonl"
    for e in keel hnsw; do
        ix=$OUT/$g.$e
        if [ "$REUSE" = 1 ] && [ -s "$ix" ]; then
            [ "$e" = keel ] && [ "${KEEL_ONLY_BUILD:-0}" = 1 ] || continue
        fi
        rm -f "$ix"
        codes= prec=f32
        [ "$e" = keel ] && codes="--codes $CODES" prec=$PRECISION
        "$bin/${e}_bench" build "$ix" "$d.base.fvecs" --metric $metric \
            --precision $prec $codes -M 16 --efc 200 --threads "$THREADS" \
            --label "$g/$prec" >"$ix.build.json"
    done
    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        order="keel hnsw"
        [ -n "${BASE:-}" ] && order="keel hnsw keel-base"
        [ $((r % 2)) = 1 ] && order=$(printf '%s\n' $order | tac | tr '\n' ' ')
        for e in $order; do
            ix=$OUT/$g.$e
            [ "$e" = keel-base ] && ix=$OUT/$g.keel
            [ "$e" != hnsw ] && [ "$BENCH_HUGE" = 1 ] &&
                "$bin/evict" "$ix" 2>/dev/null
            "$bin/${e}_bench" sweep "$ix" "$d.query.fvecs" \
                "$d.gt.$m.ivecs" --metric $metric --ef "$efs" \
                --min-time "$MIN_TIME" --label "$g/f32" |
                sed "s/\"engine\":\"keel\"/\"engine\":\"$e\"/" \
                    >>"$OUT/$g.sweep.jsonl"
        done
        r=$((r + 1))
    done
    /usr/bin/python3 - "$OUT" "$g" "$root/bench" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[3])
import report as R
out, g = sys.argv[1], sys.argv[2]
cs = {}
for line in open("%s/%s.sweep.jsonl" % (out, g)):
    rec = json.loads(line)
    cs.setdefault(rec["engine"], R.Curve()).add(rec)
k, h = cs["keel"], cs["hnswlib"]
def row(a, b):
    cells = []
    for t in (0.90, 0.95, 0.99, 0.995):
        rs = R.ratios_at(a, b, t)
        cells.append("%.3g: %s" % (t, R.fmt_ratio(rs) if rs else "-"))
    return cells
cells = row(k, h)
if "keel-base" in cs:
    print("%s  keel-base/hnswlib  %s" % (g, "  ".join(row(cs["keel-base"], h))))
    print("%s  keel/keel-base     %s" % (g, "  ".join(row(k, cs["keel-base"]))))
b = {}
for e in ("keel", "hnsw"):
    b[e] = json.load(open("%s/%s.%s.build.json" % (out, g, e)))
bk, bh = b["keel"], b["hnsw"]
print("%s  keel/hnswlib       %s  build %.1f/%.1f s = %.2fx, CPU %.1f/%.1f s"
      " = %.2fx" % (g, "  ".join(cells), bk["build_s"], bh["build_s"],
                    bk["build_s"] / bh["build_s"], bk["cpu_s"], bh["cpu_s"],
                    bk["cpu_s"] / bh["cpu_s"]))
for ef in k.efs():
    print("   keel ef %4d recall %.4f qps %s ndist %s" % (
        ef, R.med(k.recall[ef]), R.fmt_range(k.qps[ef]), R.med(k.ndist[ef])))
for ef in h.efs():
    print("   hnsw ef %4d recall %.4f qps %s ndist %s" % (
        ef, R.med(h.recall[ef]), R.fmt_range(h.qps[ef]), R.med(h.ndist[ef])))
PY
done
