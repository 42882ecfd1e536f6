#!/bin/sh
# run.sh -- the benchmark: keel against hnswlib and FAISS HNSW, in one run,
# on one machine and the same data (make bench; make bench-smoke).
#
# Steps:
#   1. builds libkeel.a (make) and the drivers in bench/out/bin: keel_bench
#      (C, linked with libkeel.a), hnsw_bench (C++, hnswlib 0.6.2 headers
#      from libhnswlib-dev), evict (page-cache eviction and launch);
#      faiss_bench.py runs on Debian's /usr/bin/python3 with python3-faiss;
#   2. prepares the data with tools/glove.sh, tools/fashion_mnist.sh and
#      tools/gen_clusters.sh (smoke: 2,000 vectors and 100 queries of
#      test/data, ground truth from tools/groundtruth.c);
#   3. per data set and metric, builds every engine variant one after the
#      other with the same M, ef_construction and threads;
#   4. sweeps ef, one search thread, ROUNDS rounds; each round runs every
#      variant once in a fresh process, the order rotated by one each round
#      (keel, hnswlib, faiss, keel f16, ...), so slow spells of a shared
#      machine fall on all engines;
#   4b. every core (MT=1): keel_search_batch on THREADS search threads
#      against hnswlib's knn_query style ParallelFor on as many, MT_EFS,
#      ROUNDS rounds alternating, fresh processes (mt.jsonl);
#   5. cold starts, COLD_ROUNDS rounds alternating engines: the index file
#      evicted from the page cache (and checked out of it with mincore),
#      then a fresh process;
#   5c. bench/hnswlib_api.py: one program on hnswlib's Python API, run on
#      the real hnswlib and on keel.hnswlib (GloVe 10k; its table is
#      appended to DOC);
#   6. bench/report.py: medians, ranges, equal-recall ratios, the markdown
#      table (DOC) and the recall/QPS plot (PNG, gnuplot).
# JSON lines accumulate in OUT (build.jsonl, sweep.jsonl, mt.jsonl,
# cold.jsonl, meta.jsonl); each run starts them afresh.
#
# Settings (environment):
#   SMOKE=1        the tiny run for CI: about half a minute, no downloads
#   ROUNDS=3       sweep rounds          COLD_ROUNDS=5  cold-start rounds
#   THREADS=n      build threads, and the search threads of the every-core
#                  runs (default: every core)
#   EFS=16,...     the ef values of every set (default: EFS_GLOVE, up to
#                  4096, EFS_FMNIST, up to 512, and EFS_GEN, up to 2048)
#   MT=1           the every-core runs (0: none); MT_EFS=... their ef values
#                  (default: EFS if set, else a few per set, MT_EFS_GLOVE,
#                  MT_EFS_FMNIST, MT_EFS_GEN)
#   MIN_TIME=0.5   seconds of queries per ef point at least
#   SETS="glove-l2 glove-cos fmnist-l2 gen1m-l2"   which data set / metric
#                  groups (gen1m-l2: the generated Gaussian clusters)
#   GEN_N=1000000  base vectors of the generated set (tools/gen_clusters.sh;
#                  the group keeps its name at any size)
#   GEN_FAISS=0    FAISS on the generated set too (its f32 build of the
#                  million alone took more than 16 minutes here, against
#                  hnswlib's 9 and keel's 6, and SQfp16 builds slower)
#   F16=1          also keel f16 and FAISS IndexHNSWSQ fp16 (0: f32 only)
#   I8=1           also keel i8: keel f32 with int8 traversal codes
#                  (keel_options.codes = KEEL_CODES_I8; 0: without it),
#                  and with F16=1 keel f16 i8 (f16 storage with the codes:
#                  fewer bytes per vector than hnswlib's) on every group,
#                  and keel f16 i4 (4-bit codes, KEEL_CODES_I4) on
#                  Fashion-MNIST, whose long vectors they are for
#   REUSE=1        keep indexes already built in an earlier run into OUT
#   GLOVE_DIR, FMNIST_DIR, GEN_DIR   data directories (default data/...)
#   OUT=bench/out/full (smoke: bench/out/smoke)
#   BUILD=build    keel's build directory (as in the Makefile)
#   DOC=doc/benchmarks.md (smoke: OUT/benchmarks.md); PNG beside it
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
start=$(date +%s)

SMOKE=${SMOKE:-0}
if [ "$SMOKE" = 1 ]; then
    ROUNDS=${ROUNDS:-1}
    COLD_ROUNDS=${COLD_ROUNDS:-1}
    EFS=${EFS:-16,64}
    MIN_TIME=${MIN_TIME:-0}
    SETS=${SETS:-smoke-l2 smoke-cos}
    OUT=${OUT:-$root/bench/out/smoke}
    DOC=${DOC:-$OUT/benchmarks.md}
else
    ROUNDS=${ROUNDS:-3}
    COLD_ROUNDS=${COLD_ROUNDS:-5}
    # GloVe-100 with M = 16 needs ef near 3,000 for recall 0.99.
    efs_low=16,24,32,48,64,96,128,192,256,384,512
    EFS_GLOVE=${EFS_GLOVE:-$efs_low,768,1024,1536,2048,3072,4096}
    EFS_FMNIST=${EFS_FMNIST:-10,12,$efs_low} # ef < k = 10 is ef = 10
    # A million vectors: fewer points, each pass of the queries costs more;
    # recall@10 is about 0.50 at ef 16, 0.96 at 256 and 0.986 at 1024.
    EFS_GEN=${EFS_GEN:-16,32,64,128,256,512,1024,2048}
    MT_EFS_GLOVE=${MT_EFS_GLOVE:-64,128,256,512,1024,2048,4096}
    MT_EFS_FMNIST=${MT_EFS_FMNIST:-10,16,32,64,128}
    MT_EFS_GEN=${MT_EFS_GEN:-64,128,256,512,1024,2048}
    MIN_TIME=${MIN_TIME:-0.5}
    SETS=${SETS:-glove-l2 glove-cos fmnist-l2 gen1m-l2}
    OUT=${OUT:-$root/bench/out/full}
    DOC=${DOC:-$root/doc/benchmarks.md}
fi
THREADS=${THREADS:-$(getconf _NPROCESSORS_ONLN)}
F16=${F16:-1}
I8=${I8:-1}
MT=${MT:-1}
GEN_N=${GEN_N:-1000000}
GEN_FAISS=${GEN_FAISS:-0}
REUSE=${REUSE:-0}
GLOVE_DIR=${GLOVE_DIR:-$root/data/glove-100}
FMNIST_DIR=${FMNIST_DIR:-$root/data/fashion-mnist-784}
GEN_DIR=${GEN_DIR:-$root/data/gen-clusters}
PNG=${DOC%.md}.png
M=16
EFC=200
COLD_EF=64

say() {
    printf 'bench: %s\n' "$*" >&2
}

die() {
    printf 'bench: %s\n' "$*" >&2
    exit 1
}

loadavg() {
    cut -d' ' -f1 /proc/loadavg
}

# --- 1. prerequisites and programs -------------------------------------------

[ -x "$py" ] || die "$py is missing (Debian: apt-get install python3)"
"$py" -c 'import numpy, faiss' 2>/dev/null ||
    die "$py cannot import numpy and faiss" \
        "(Debian: apt-get install python3-numpy python3-faiss)"
[ -r /usr/include/hnswlib/hnswlib.h ] ||
    die "hnswlib's headers are missing" \
        "(Debian: apt-get install libhnswlib-dev)"

bin=$root/bench/out/bin
idx=$OUT/idx
mkdir -p "$bin" "$idx" "$OUT"
if [ "$REUSE" != 1 ]; then
    rm -f "$idx"/*
fi
rm -f "$OUT/build.jsonl" "$OUT/sweep.jsonl" "$OUT/cold.jsonl" "$OUT/hot.jsonl" \
    "$OUT/meta.jsonl" "$OUT/evict.log" "$OUT/mt.jsonl"

say "building libkeel.a and the drivers"
BUILD=${BUILD:-build}
case $BUILD in
/*) lib=$BUILD/libkeel.a ;;
*) lib=$root/$BUILD/libkeel.a ;;
esac
${MAKE:-make} -C "$root" -j"$THREADS" BUILD="$BUILD" "$BUILD/libkeel.a" >&2 ||
    die "make $BUILD/libkeel.a failed"
CC=${CC:-cc}
CXX=${CXX:-c++}
# keel's library flags (Makefile: -std=c11 -O2 -g -pthread); its distance
# kernels pick AVX2 / AVX-512 at run time.
kflags="-std=c11 -O2 -g -pthread -D_GNU_SOURCE -I$root/include"
# shellcheck disable=SC2086 # $kflags and $CC are word lists
if ! $CC $kflags -DKEEL_BENCH_INTERNALS -I"$root/src" \
    -o "$bin/keel_bench" "$root/bench/keel_bench.c" "$lib" \
    -lxxhash -lcurl -lpthread -lm 2>"$OUT/cc.log"; then
    say "keel_bench without distance counts (internals changed?" \
        "see $OUT/cc.log)"
    $CC $kflags -o "$bin/keel_bench" "$root/bench/keel_bench.c" "$lib" \
        -lxxhash -lcurl -lpthread -lm ||
        die "cannot build bench/keel_bench.c"
fi
# hnswlib chooses its SIMD at compile time: -march=native turns on the
# AVX-512 / AVX2 code that keel's run-time dispatch gets anyway.
$CXX -std=c++11 -O2 -g -march=native -pthread -I"$root/bench" \
    -o "$bin/hnsw_bench" "$root/bench/hnsw_bench.cpp" ||
    die "cannot build bench/hnsw_bench.cpp"
$CC -std=c11 -O2 -g -o "$bin/evict" "$root/bench/evict.c" ||
    die "cannot build bench/evict.c"
# Which keel is measured: a checksum of its sources as just built.
digest=$(cat "$root"/include/keel.h "$root"/src/*/*.[ch] | cksum | cut -d' ' -f1)

# --- 2. data ----------------------------------------------------------------

# Sets base, query, gt for group $1 (data set and metric).
data_of() {
    case $1 in
    smoke-l2 | smoke-cos)
        base=$OUT/data/smoke.base.fvecs
        query=$OUT/data/smoke.query.fvecs
        gt=$OUT/data/smoke.gt.${1#smoke-}.ivecs ;;
    glove-l2 | glove-cos)
        base=$GLOVE_DIR/glove-100.base.fvecs
        query=$GLOVE_DIR/glove-100.query.fvecs
        gt=$GLOVE_DIR/glove-100.gt.${1#glove-}.ivecs ;;
    fmnist-l2)
        base=$FMNIST_DIR/fashion-mnist-784.base.fvecs
        query=$FMNIST_DIR/fashion-mnist-784.query.fvecs
        gt=$FMNIST_DIR/fashion-mnist-784.gt.l2.ivecs ;;
    gen1m-l2)
        base=$GEN_DIR/clusters-$GEN_N.base.fvecs
        query=$GEN_DIR/clusters-$GEN_N.query.fvecs
        gt=$GEN_DIR/clusters-$GEN_N.gt.l2.ivecs ;;
    *)
        die "unknown group $1 (glove-l2, glove-cos, fmnist-l2, gen1m-l2," \
            "smoke-l2, smoke-cos)" ;;
    esac
}

case " $SETS " in
*" smoke-"*)
    say "smoke data: 2,000 base vectors and 100 queries of test/data"
    mkdir -p "$OUT/data"
    src=$root/test/data/glove-100-10k
    dd if="$src.base.fvecs" of="$OUT/data/smoke.base.fvecs" bs=404 \
        count=2000 2>/dev/null
    cp "$src.query.fvecs" "$OUT/data/smoke.query.fvecs"
    $CC -std=c11 -O3 -march=native -pthread -ffp-contract=off \
        -o "$bin/groundtruth" "$root/tools/groundtruth.c" -lm ||
        die "cannot build tools/groundtruth.c"
    for m in l2 cos; do
        if [ $m = cos ]; then metric=cosine; else metric=l2; fi
        "$bin/groundtruth" "$OUT/data/smoke.base.fvecs" \
            "$OUT/data/smoke.query.fvecs" 100 $metric \
            "$OUT/data/smoke.gt.$m.ivecs" \
            "$OUT/data/smoke.gt.$m.dist.fvecs" >/dev/null ||
            die "groundtruth failed"
    done ;;
esac
case " $SETS " in
*" glove-"*)
    say "GloVe-100: tools/glove.sh $GLOVE_DIR"
    sh "$root/tools/glove.sh" "$GLOVE_DIR" || die "tools/glove.sh failed" ;;
esac
case " $SETS " in
*" fmnist-"*)
    say "Fashion-MNIST: tools/fashion_mnist.sh $FMNIST_DIR"
    sh "$root/tools/fashion_mnist.sh" "$FMNIST_DIR" ||
        die "tools/fashion_mnist.sh failed" ;;
esac
case " $SETS " in
*" gen1m-"*)
    say "generated clusters: tools/gen_clusters.sh $GEN_DIR $GEN_N"
    sh "$root/tools/gen_clusters.sh" "$GEN_DIR" "$GEN_N" ||
        die "tools/gen_clusters.sh failed"
    printf '{"kind":"gen","n":%s}\n' "$GEN_N" >>"$OUT/meta.jsonl" ;;
esac

{
    printf '{"kind":"meta","smoke":%s,"rounds":%s,"cold_rounds":%s,' \
        "$SMOKE" "$ROUNDS" "$COLD_ROUNDS"
    printf '"threads":%s,"M":%s,"efc":%s,"min_time":%s,' \
        "$THREADS" "$M" "$EFC" "$MIN_TIME"
    printf '"cold_ef":%s,"start":%s,"load_start":%s,"keel_src_cksum":"%s",' \
        "$COLD_EF" "$start" "$(loadavg)" "$digest"
    printf '"mt":%s,"i8":%s,"gen_faiss":%s}\n' "$MT" "$I8" "$GEN_FAISS"
} >>"$OUT/meta.jsonl"

# --- 3-5. per group ----------------------------------------------------------

# The variants of a group: engine:precision (keel:i8 is keel f32 with int8
# traversal codes, keel:f16i8 keel f16 with them, keel:f16i4 keel f16 with
# 4-bit codes, on the long vectors only). FAISS sits out the
# generated set unless GEN_FAISS=1.
variants_of() {
    faiss=1
    case $1 in
    gen1m-*) [ "$GEN_FAISS" = 1 ] || faiss=0 ;;
    esac
    v="keel:f32 hnswlib:f32"
    [ $faiss = 1 ] && v="$v faiss:f32"
    case $1 in
    *-l2)
        if [ "$F16" = 1 ]; then
            v="$v keel:f16"
            [ $faiss = 1 ] && v="$v faiss:f16"
        fi ;;
    esac
    if [ "$I8" = 1 ]; then v="$v keel:i8"; fi
    if [ "$I8" = 1 ] && [ "$F16" = 1 ]; then v="$v keel:f16i8"; fi
    case $1 in
    fmnist-*)
        if [ "$I8" = 1 ] && [ "$F16" = 1 ]; then v="$v keel:f16i4"; fi ;;
    esac
    printf '%s\n' "$v"
}

# The build options of a variant's precision: i8 is f32 storage with int8
# codes, f16i8 f16 storage with them, f16i4 f16 storage with 4-bit codes.
precision_args() {
    case $1 in
    i8) printf -- '--precision f32 --codes i8\n' ;;
    f16i8) printf -- '--precision f16 --codes i8\n' ;;
    f16i4) printf -- '--precision f16 --codes i4\n' ;;
    *) printf -- '--precision %s\n' "$1" ;;
    esac
}

metric_of() {
    case $1 in
    *-cos) printf 'cosine\n' ;;
    *) printf 'l2\n' ;;
    esac
}

# run ENGINE CMD ARGS...: the driver for the engine.
run() {
    e=$1
    shift
    case $e in
    keel) "$bin/keel_bench" "$@" ;;
    hnswlib) "$bin/hnsw_bench" "$@" ;;
    faiss) "$py" "$root/bench/faiss_bench.py" "$@" ;;
    esac
}

index_of() {
    case $1 in
    keel) printf '%s/%s-%s.keel\n' "$idx" "$2" "$3" ;;
    hnswlib) printf '%s/%s-%s.hnsw\n' "$idx" "$2" "$3" ;;
    faiss) printf '%s/%s-%s.faiss\n' "$idx" "$2" "$3" ;;
    esac
}

# Rotates a word list left by $1.
rotate() {
    n=$1
    shift
    i=0
    while [ "$i" -lt "$n" ] && [ $# -gt 1 ]; do
        first=$1
        shift
        set -- "$@" "$first"
        i=$((i + 1))
    done
    printf '%s\n' "$*"
}

for g in $SETS; do
    data_of "$g"
    metric=$(metric_of "$g")
    variants=$(variants_of "$g")
    case $g in
    glove-*) efs=${EFS:-$EFS_GLOVE} mt_efs=${MT_EFS:-${EFS:-$MT_EFS_GLOVE}} ;;
    fmnist-*)
        efs=${EFS:-$EFS_FMNIST} mt_efs=${MT_EFS:-${EFS:-$MT_EFS_FMNIST}} ;;
    gen1m-*) efs=${EFS:-$EFS_GEN} mt_efs=${MT_EFS:-${EFS:-$MT_EFS_GEN}} ;;
    *) efs=$EFS mt_efs=${MT_EFS:-$EFS} ;;
    esac
    printf '{"kind":"efs","set":"%s","efs":"%s","mt_efs":"%s"}\n' "$g" \
        "$efs" "$mt_efs" >>"$OUT/meta.jsonl"
    for f in "$base" "$query" "$gt"; do
        [ -s "$f" ] || die "$f is missing"
    done

    for v in $variants; do
        e=${v%:*}
        p=${v#*:}
        ix=$(index_of "$e" "$g" "$p")
        label=$g/$p
        if [ "$REUSE" = 1 ] && [ -s "$ix" ] && [ -s "$ix.build.json" ]; then
            say "$label $e: reusing $ix"
        else
            say "$label $e: building ($THREADS threads, M $M," \
                "ef_construction $EFC; load $(loadavg))"
            # shellcheck disable=SC2046 # precision_args is a word list
            run "$e" build "$ix" "$base" --metric "$metric" \
                $(precision_args "$p") -M $M --efc $EFC --threads "$THREADS" --label "$label" \
                >"$ix.build.json" || die "$label $e: build failed"
        fi
        cat "$ix.build.json" >>"$OUT/build.jsonl"
    done

    r=0
    while [ "$r" -lt "$ROUNDS" ]; do
        n=$(printf '%s\n' "$variants" | wc -w)
        # shellcheck disable=SC2086 # $variants is a word list
        for v in $(rotate $((r % n)) $variants); do
            e=${v%:*}
            p=${v#*:}
            ix=$(index_of "$e" "$g" "$p")
            say "$g/$p $e: sweep round $((r + 1)) of $ROUNDS (load $(loadavg))"
            run "$e" sweep "$ix" "$query" "$gt" --metric "$metric" \
                --ef "$efs" --min-time "$MIN_TIME" --label "$g/$p" \
                >>"$OUT/sweep.jsonl" || die "$g/$p $e: sweep failed"
        done
        r=$((r + 1))
    done

    # Every core: keel_search_batch against hnswlib's knn_query, THREADS
    # search threads each, the same rounds, engines alternating.
    r=0
    while [ "$MT" = 1 ] && [ "$r" -lt "$ROUNDS" ]; do
        # shellcheck disable=SC2046 # rotate prints a word list
        for e in $(rotate $((r % 2)) keel hnswlib); do
            ix=$(index_of "$e" "$g" f32)
            say "$g/f32 $e: every core ($THREADS threads), round" \
                "$((r + 1)) of $ROUNDS (load $(loadavg))"
            run "$e" mt "$ix" "$query" "$gt" --metric "$metric" \
                --ef "$mt_efs" --threads "$THREADS" --min-time "$MIN_TIME" \
                --label "$g/f32" >>"$OUT/mt.jsonl" ||
                die "$g/f32 $e: every-core sweep failed"
        done
        r=$((r + 1))
    done

    case $g in
    *-cos) continue ;; # cold starts: the L2 groups say it
    esac
    r=0
    while [ "$r" -lt "$COLD_ROUNDS" ]; do
        for v in $variants; do
            e=${v%:*}
            p=${v#*:}
            [ "$e:$p" = faiss:f16 ] && continue
            ix=$(index_of "$e" "$g" "$p")
            modes=x
            [ "$e" = keel ] && modes="x --warm"
            # batch reads off (doc/batch_reads.md), with and without warm
            [ "$e:$p" = keel:f32 ] && modes="x --warm off off--warm"
            for mode in $modes; do
                [ "$mode" = x ] && mode=
                br=1
                case $mode in off*) br=0 mode=${mode#off} ;; esac
                say "$g/$p $e $mode (batch reads $br): cold start" \
                    "$((r + 1)) of $COLD_ROUNDS"
                set -- env KEEL_BATCH_READS=$br "$bin/evict" "$ix" --
                case $e in
                keel) set -- "$@" "$bin/keel_bench" ;;
                hnswlib) set -- "$@" "$bin/hnsw_bench" ;;
                faiss) set -- "$@" "$py" "$root/bench/faiss_bench.py" ;;
                esac
                set -- "$@" cold "$ix" "$query" --metric "$metric" \
                    --ef "$COLD_EF" --label "$g/$p"
                [ -n "$mode" ] && set -- "$@" --warm
                "$@" >>"$OUT/cold.jsonl" 2>>"$OUT/evict.log" ||
                    die "$g/$p $e: cold run failed (see $OUT/evict.log)"
            done
        done
        r=$((r + 1))
    done
    # A file already in memory: QPS at ef COLD_EF with batch reads on and
    # off, alternating, 3 rounds (the module must cost a hot file nothing).
    ix=$(index_of keel "$g" f32)
    for r in 1 2 3; do
        for br in 1 0; do
            say "$g/f32 keel: hot QPS, batch reads $br, round $r of 3"
            KEEL_BATCH_READS=$br "$bin/keel_bench" sweep "$ix" "$query" \
                "$gt" --ef "$COLD_EF" --min-time 2 --label "$g/f32" \
                >>"$OUT/hot.jsonl" || die "$g keel: hot sweep failed"
        done
    done
done

end=$(date +%s)
printf '{"kind":"meta","end":%s,"load_end":%s,"seconds":%s}\n' \
    "$end" "$(loadavg)" "$((end - start))" >>"$OUT/meta.jsonl"

# --- 5c. hnswlib's Python API: hnswlib and keel.hnswlib --------------------

# One program written for hnswlib's API, run with `import hnswlib` and with
# `import keel.hnswlib as hnswlib` on the GloVe 10k slice: build time, QPS
# at equal recall, and the cost of keel.hnswlib's Python layer.
say "hnswlib's Python API on hnswlib and on keel.hnswlib (GloVe 10k)"
rm -f "$OUT/hnswlib_api.jsonl"
if [ "$SMOKE" = 1 ]; then
    set -- --efs 16,64 --rounds 1 --min-time 0
else
    set -- --rounds "$ROUNDS" --min-time "$MIN_TIME"
fi
"$py" "$root/bench/hnswlib_api.py" "$@" --jsonl "$OUT/hnswlib_api.jsonl" \
    --md "$OUT/hnswlib_api.md" >/dev/null ||
    die "bench/hnswlib_api.py failed"

# --- 6. report ---------------------------------------------------------------

say "writing $DOC and $PNG"
check=
[ "$SMOKE" = 1 ] && check=--check
"$py" "$root/bench/report.py" --out "$OUT" --doc "$DOC" --png "$PNG" $check ||
    die "bench/report.py failed"
cat "$OUT/hnswlib_api.md" >>"$DOC"
say "done in $(($(date +%s) - start)) s"
