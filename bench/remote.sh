#!/bin/bash
# remote.sh -- the object-storage benchmark (make bench-remote;
# doc/object_storage_bench.md): keel reading GloVe-340k by URL from a Ceph
# RADOS Gateway with DELAY_MS injected per request, cold and cached, beside
# what a user does today (download the hnswlib index file, load, search).
#
#   bash bench/remote.sh            (or: make bench-remote)
#
# Without AWS_ENDPOINT_URL and KEEL_TEST_BUCKET in the environment it builds
# what it needs, then runs itself again under test/objstore/run.sh, which
# starts a gateway on 127.0.0.1 and stops it at the end; with them, it uses
# that store (the bucket must exist).
#
# Steps:
#   1. builds libkeel.a, the CLI and the drivers into $OUT/bin: keel_bench
#      (with -DKEEL_BENCH_INTERNALS: the page cache's GET and byte counts),
#      hnsw_bench, evict (sets KEEL_BENCH_T0 just before exec), s3_object
#      (PUT, and the parallel ranged download), s3_proxy (the delay);
#      builds the indexes if missing: keel (keel_bench build) and hnswlib
#      (hnsw_bench build), both M 16, ef_construction 200, L2;
#   2. starts s3_proxy in front of the store: every request through it
#      waits DELAY_MS before it is forwarded, concurrent ones concurrently;
#   3. publishes a copy of the keel index (keel publish opens its index as
#      the writer) to s3://BUCKET/glove and uploads the hnswlib file as one
#      object, s3://BUCKET/hnswlib/glove.hnsw, both straight to the store
#      (no delay);
#   4. cold: ROUNDS rounds; each runs every setting once, the order rotated
#      by one each round, each in a fresh process through the proxy:
#        keel rows    keel_bench cold s3://BUCKET/glove, an empty disk cache
#                     (KEEL_CACHE_DIR: a new directory per process), the
#                     memory cache's default bound, for each overlap
#                     setting (SETTINGS: "policy" is the library's default,
#                     aheadN runs it with KEEL_BATCH_READS_AHEAD=N, beamN
#                     with KEEL_BATCH_READS_BEAM=N (beam1: one expansion
#                     per step, the walk before the beam),
#                     a number n runs with KEEL_BATCH_READS_MAX_RUNS=n, so 1
#                     is serial fetches), without and with --warm;
#        download     s3_object get (ranged GETs of DL_RANGE_MIB MiB,
#                     DL_INFLIGHT at once) into a new local file, then
#                     exec hnsw_bench cold on it (loadIndex, then search);
#      ef EF, k 10, one query per call, at most NQ queries and none started
#      after MAX_S seconds from exec (a capped process says so);
#   5. cached: QPS_ROUNDS rounds of keel_bench sweep at ef EF (one search
#      thread, QPS_MIN_TIME s), alternating the URL (warm, waited for: the
#      whole index in the page cache) and the same index as a local file
#      (warm, in the page cache);
#   6. bench/remote_report.py: medians [min-max], the tables and the
#      issue's target checks, on standard output and in $OUT/report.md.
#
# Settings (environment):
#   ROUNDS=5  NQ=300  MAX_S=120  EF=64  DELAY_MS=20
#   SETTINGS="policy 1 4 16"   WARM="0 1"   DOWNLOAD=1
#   DL_RANGE_MIB=8  DL_INFLIGHT=16   QPS_ROUNDS=3  QPS_MIN_TIME=3
#   INDEX=$OUT/glove.keel   HNSW=$OUT/glove.hnsw   (built when missing)
#   GLOVE_DIR=data/glove-100 (tools/glove.sh fetches it when missing)
#   OUT=bench/out/remote   BUILD=build
# JSON lines go to $OUT/cold.jsonl, download.jsonl and cached.jsonl (started
# afresh), stderr of every process to $OUT/log.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
NQ=${NQ:-300}
MAX_S=${MAX_S:-120}
EF=${EF:-64}
DELAY_MS=${DELAY_MS:-20}
SETTINGS=${SETTINGS:-policy 1 4 16}
WARM=${WARM:-0 1}
DOWNLOAD=${DOWNLOAD:-1}
DL_RANGE_MIB=${DL_RANGE_MIB:-8}
DL_INFLIGHT=${DL_INFLIGHT:-16}
QPS_ROUNDS=${QPS_ROUNDS:-3}
QPS_MIN_TIME=${QPS_MIN_TIME:-3}
OUT=${OUT:-$root/bench/out/remote}
BUILD=${BUILD:-build}
GLOVE_DIR=${GLOVE_DIR:-$root/data/glove-100}
INDEX=${INDEX:-$OUT/glove.keel}
HNSW=${HNSW:-$OUT/glove.hnsw}
export ROUNDS NQ MAX_S EF DELAY_MS SETTINGS WARM DOWNLOAD DL_RANGE_MIB \
    DL_INFLIGHT QPS_ROUNDS QPS_MIN_TIME OUT BUILD GLOVE_DIR INDEX HNSW
bin=$OUT/bin
base=$GLOVE_DIR/glove-100.base.fvecs
query=$GLOVE_DIR/glove-100.query.fvecs
gt=$GLOVE_DIR/glove-100.gt.l2.ivecs
py=/usr/bin/python3

say() {
    printf 'bench-remote: %s\n' "$*" >&2
}

die() {
    printf 'bench-remote: %s\n' "$*" >&2
    exit 1
}

# --- outside the gateway: build, then run again under test/objstore/run.sh ---

if [ -z "${AWS_ENDPOINT_URL:-}" ] || [ -z "${KEEL_TEST_BUCKET:-}" ]; then
    [ -x "$py" ] || die "$py is missing (Debian: apt-get install python3)"
    [ -r /usr/include/hnswlib/hnswlib.h ] ||
        die "hnswlib's headers are missing (Debian: apt-get install libhnswlib-dev)"
    mkdir -p "$bin"
    case $BUILD in
    /*) bdir=$BUILD ;;
    *) bdir=$root/$BUILD ;;
    esac
    say "building libkeel.a, the CLI, s3_proxy and the drivers"
    ${MAKE:-make} -s -C "$root" -j2 BUILD="$BUILD" "$BUILD/libkeel.a" \
        "$BUILD/keel" "$BUILD/s3_proxy" >&2 || die "make failed"
    cp "$bdir/keel" "$bdir/s3_proxy" "$bin/"
    CC=${CC:-cc}
    CXX=${CXX:-c++}
    kflags="-std=c11 -O2 -g -pthread -D_GNU_SOURCE -I$root/include -I$root/src"
    libs="$bdir/libkeel.a -lxxhash -lcurl -lpthread -lm"
    # shellcheck disable=SC2086 # word lists
    $CC $kflags -DKEEL_BENCH_INTERNALS -o "$bin/keel_bench" \
        "$root/bench/keel_bench.c" $libs || die "cannot build keel_bench"
    # shellcheck disable=SC2086
    $CC $kflags -o "$bin/s3_object" "$root/bench/s3_object.c" $libs ||
        die "cannot build s3_object"
    # hnswlib picks its SIMD at compile time (bench/run.sh does the same).
    $CXX -std=c++11 -O2 -g -march=native -pthread -I"$root/bench" \
        -o "$bin/hnsw_bench" "$root/bench/hnsw_bench.cpp" ||
        die "cannot build hnsw_bench"
    $CC -std=c11 -O2 -g -o "$bin/evict" "$root/bench/evict.c" ||
        die "cannot build evict"
    [ -r "$base" ] && [ -r "$query" ] && [ -r "$gt" ] ||
        sh "$root/tools/glove.sh" "$GLOVE_DIR" || die "tools/glove.sh failed"
    if [ ! -s "$INDEX" ]; then
        say "building the keel index $INDEX (M 16, ef_construction 200)"
        "$bin/keel_bench" build "$INDEX" "$base" --metric l2 -M 16 --efc 200 \
            >"$OUT/build.keel.json" || die "keel_bench build failed"
    fi
    if [ ! -s "$HNSW" ]; then
        say "building the hnswlib index $HNSW (M 16, ef_construction 200)"
        "$bin/hnsw_bench" build "$HNSW" "$base" --metric l2 -M 16 --efc 200 \
            >"$OUT/build.hnsw.json" || die "hnsw_bench build failed"
    fi
    say "starting a gateway (test/objstore/run.sh)"
    exec bash "$root/test/objstore/run.sh" "$root/bench/remote.sh"
fi

# --- inside: a store is there ------------------------------------------------

B=$KEEL_TEST_BUCKET
direct=$AWS_ENDPOINT_URL
log=$OUT/log
: >"$log"
mkdir -p "$OUT"
tmp=$(mktemp -d "$OUT/tmp.XXXXXX")
proxy_pid=
cleanup() {
    if [ -n "$proxy_pid" ]; then
        kill -TERM "$proxy_pid" 2>/dev/null || true
        wait "$proxy_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

say "s3_proxy in front of $direct, $DELAY_MS ms per request"
"$bin/s3_proxy" --upstream "$direct" --delay-ms "$DELAY_MS" \
    --port-file "$tmp/proxy.port" >"$OUT/proxy.json" 2>>"$log" &
proxy_pid=$!
for _ in $(seq 1 100); do
    [ -s "$tmp/proxy.port" ] && break
    sleep 0.05
done
[ -s "$tmp/proxy.port" ] || die "s3_proxy did not start (see $log)"
proxy=http://127.0.0.1:$(cat "$tmp/proxy.port")

# keel publish opens its index as the writer: it gets a copy, and the local
# file of the cached rows is that copy too.
ix=$OUT/published.keel
if [ "$INDEX" != "$ix" ]; then
    cp "$INDEX" "$ix.tmp" && mv "$ix.tmp" "$ix"
fi
say "publishing $INDEX (a copy) to s3://$B/glove, uploading $HNSW"
AWS_ENDPOINT_URL=$direct "$bin/keel" publish "$ix" "s3://$B/glove" \
    >>"$log" 2>&1 || die "keel publish failed (see $log)"
AWS_ENDPOINT_URL=$direct "$bin/s3_object" put "$HNSW" \
    "s3://$B/hnswlib/glove.hnsw" 2>>"$OUT/upload.jsonl" ||
    die "uploading the hnswlib index failed"
cat "$OUT/upload.jsonl" >&2

# Appends a process's JSON line with the round and its place in the round.
tag() {
    sed -e "s/}\$/,\"round\":$1,\"order\":$2}/" >>"$3"
}

# One keel cold process: setting $1 (policy or a max runs), warm $2.
keel_cold() {
    local cache lab env_cap=() warm=()
    cache=$(mktemp -d "$tmp/cache.XXXXXX")
    lab=$1
    case $1 in
    policy) ;;
    ahead*) env_cap=(KEEL_BATCH_READS_AHEAD="${1#ahead}") ;;
    beam*) env_cap=(KEEL_BATCH_READS_BEAM="${1#beam}") ;;
    *) env_cap=(KEEL_BATCH_READS_MAX_RUNS="$1") ;;
    esac
    if [ "$2" = 1 ]; then
        warm=(--warm)
        lab="$lab+warm"
    fi
    env AWS_ENDPOINT_URL="$proxy" KEEL_CACHE_DIR="$cache" "${env_cap[@]}" \
        "$bin/evict" -- "$bin/keel_bench" cold "s3://$B/glove" "$query" \
        --ef "$EF" --queries "$NQ" --max-s "$MAX_S" --label "$lab" \
        "${warm[@]}" 2>>"$log"
    rm -rf "$cache"
}

# The user's path today: download the file, load it into hnswlib, search.
download_cold() {
    local f=$tmp/dl/glove.hnsw
    mkdir -p "$tmp/dl"
    rm -f "$f"
    env AWS_ENDPOINT_URL="$proxy" "$bin/evict" -- "$bin/s3_object" get \
        "s3://$B/hnswlib/glove.hnsw" "$f" --range-mib "$DL_RANGE_MIB" \
        --inflight "$DL_INFLIGHT" -- "$bin/hnsw_bench" cold "$f" "$query" \
        --metric l2 --ef "$EF" --queries "$NQ" --max-s "$MAX_S" \
        --label download 2>"$tmp/dl.err"
    grep '^{"kind":"download"' "$tmp/dl.err" >&2 || true
    grep -v '^{"kind":"download"' "$tmp/dl.err" >>"$log" || true
    rm -f "$f"
}

rows=()
for s in $SETTINGS; do
    for w in $WARM; do
        rows+=("$s:$w")
    done
done
[ "$DOWNLOAD" = 1 ] && rows+=("download")
n=${#rows[@]}
: >"$OUT/cold.jsonl"
: >"$OUT/download.jsonl"
t_start=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
    for k in $(seq 0 $((n - 1))); do
        row=${rows[$(((k + r - 1) % n))]}
        say "round $r/$ROUNDS: $row ($(( $(date +%s) - t_start )) s so far, load $(cut -d' ' -f1 /proc/loadavg))"
        if [ "$row" = download ]; then
            download_cold | tag "$r" "$k" "$OUT/cold.jsonl" ||
                say "round $r: $row failed (see $log)"
            grep '^{"kind":"download"' "$tmp/dl.err" |
                tag "$r" "$k" "$OUT/download.jsonl" || true
        else
            keel_cold "${row%:*}" "${row#*:}" |
                tag "$r" "$k" "$OUT/cold.jsonl" ||
                say "round $r: $row failed (see $log)"
        fi
    done
done

: >"$OUT/cached.jsonl"
for r in $(seq 1 "$QPS_ROUNDS"); do
    for which in url local; do
        say "cached QPS round $r/$QPS_ROUNDS: $which"
        if [ "$which" = url ]; then
            src=s3://$B/glove
        else
            src=$ix
        fi
        env AWS_ENDPOINT_URL="$proxy" "$bin/keel_bench" sweep "$src" "$query" \
            "$gt" --ef "$EF" --rounds 1 --min-time "$QPS_MIN_TIME" \
            --label "$which" 2>>"$log" | tag "$r" 0 "$OUT/cached.jsonl" ||
            say "cached round $r: $which failed (see $log)"
    done
done

kill -TERM "$proxy_pid" 2>/dev/null || true
wait "$proxy_pid" 2>/dev/null || true
proxy_pid=
say "proxy: $(cat "$OUT/proxy.json" 2>/dev/null)"
{
    printf '{"kind":"meta","rounds":%s,"nq":%s,"max_s":%s,"ef":%s,' \
        "$ROUNDS" "$NQ" "$MAX_S" "$EF"
    printf '"delay_ms":%s,"dl_range_mib":%s,"dl_inflight":%s,' \
        "$DELAY_MS" "$DL_RANGE_MIB" "$DL_INFLIGHT"
    printf '"qps_rounds":%s,"qps_min_time":%s,"seconds":%s,' \
        "$QPS_ROUNDS" "$QPS_MIN_TIME" "$(( $(date +%s) - t_start ))"
    printf '"index_bytes":%s,"hnsw_bytes":%s,"nproc":%s,"kernel":"%s"}\n' \
        "$(stat -c %s "$INDEX")" "$(stat -c %s "$HNSW")" "$(nproc)" \
        "$(uname -r)"
} >"$OUT/meta.json"
"$py" "$root/bench/remote_report.py" "$OUT" | tee "$OUT/report.md"
