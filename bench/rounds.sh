#!/bin/bash
# rounds.sh -- round trips one after another of cold queries by URL, per
# walk setting: a short diagnostic beside make bench-remote
# (doc/batch_reads.md, "The beam of a cold walk").
#
#   bash bench/rounds.sh INDEX QUERIES.fvecs [ROUNDS]
#
# Without AWS_ENDPOINT_URL and KEEL_TEST_BUCKET it builds what it needs and
# runs itself again under test/objstore/run.sh (a private gateway). Then:
# starts bench/s3_proxy with DELAY_MS (20) per request, publishes a copy of
# INDEX, and for ROUNDS (2) rounds runs keel_bench cold (built with
# -DKEEL_BENCH_INTERNALS) once per setting of SETTINGS, the order rotated
# each round, a fresh process with an empty disk cache each time, NQ (100)
# queries at ef EF (64). A setting is bN:aM: KEEL_BATCH_READS_BEAM=N and
# KEEL_BATCH_READS_AHEAD=M (default "b1:a8 b8:a8 b1:a0 b8:a0"). Prints per
# setting the median page-cache rounds (fetches that sent GETs, one after
# another) at the open and at the 1st, 10th and 100th result, GETs, and ms
# from the start of the process. JSON lines go to $OUT (default
# build/rounds.jsonl, started afresh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in
/*) bdir=$BUILD ;;
*) bdir=$root/$BUILD ;;
esac
OUT=${OUT:-$bdir/rounds.jsonl}
export BUILD OUT

if [ -z "${AWS_ENDPOINT_URL:-}" ] || [ -z "${KEEL_TEST_BUCKET:-}" ]; then
    [ $# -ge 2 ] || { echo "usage: bash bench/rounds.sh INDEX QUERIES.fvecs [ROUNDS]" >&2; exit 2; }
    make -s -C "$root" -j2 BUILD="$BUILD" "$BUILD/libkeel.a" "$BUILD/keel" \
        "$BUILD/s3_proxy" >&2
    ${CC:-cc} -std=c11 -O2 -pthread -D_GNU_SOURCE -DKEEL_BENCH_INTERNALS \
        -I"$root/include" -I"$root/src" -o "$bdir/keel_bench_rounds" \
        "$root/bench/keel_bench.c" "$bdir/libkeel.a" -lxxhash -lcurl \
        -lpthread -lm
    : >"$OUT"
    ROUNDS_INDEX=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
    ROUNDS_QUERIES=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
    ROUNDS_N=${3:-2}
    export ROUNDS_INDEX ROUNDS_QUERIES ROUNDS_N
    exec bash "$root/test/objstore/run.sh" "$root/bench/rounds.sh"
fi

ix=$ROUNDS_INDEX
q=$ROUNDS_QUERIES
rounds=$ROUNDS_N
tmp=$(mktemp -d)
proxy_pid=
cleanup() {
    [ -n "$proxy_pid" ] && kill "$proxy_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
"$bdir/s3_proxy" --upstream "$AWS_ENDPOINT_URL" --delay-ms "${DELAY_MS:-20}" \
    --port-file "$tmp/port" >/dev/null 2>"$tmp/proxy.log" &
proxy_pid=$!
for _ in $(seq 1 100); do
    [ -s "$tmp/port" ] && break
    sleep 0.05
done
proxy=http://127.0.0.1:$(cat "$tmp/port")
cp "$ix" "$tmp/published.keel"
"$bdir/keel" publish "$tmp/published.keel" "s3://$KEEL_TEST_BUCKET/rounds" \
    >"$tmp/publish.log" 2>&1 || { cat "$tmp/publish.log" >&2; exit 1; }
read -r -a sets <<<"${SETTINGS:-b1:a8 b8:a8 b1:a0 b8:a0}"
n=${#sets[@]}
for r in $(seq 0 $((rounds - 1))); do
    for i in $(seq 0 $((n - 1))); do
        s=${sets[$(((i + r) % n))]}
        b=${s%%:*}
        a=${s##*:}
        cache=$(mktemp -d "$tmp/cache.XXXXXX")
        AWS_ENDPOINT_URL=$proxy KEEL_CACHE_DIR=$cache \
            KEEL_BATCH_READS_BEAM=${b#b} KEEL_BATCH_READS_AHEAD=${a#a} \
            "$bdir/keel_bench_rounds" cold "s3://$KEEL_TEST_BUCKET/rounds" "$q" \
            --ef "${EF:-64}" --queries "${NQ:-100}" --label "$s" \
            2>>"$tmp/err.log" | grep '^{' >>"$OUT" || tail -3 "$tmp/err.log" >&2
        rm -rf "$cache"
    done
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"rounds_at"' in l]
for lab in dict.fromkeys(r["label"] for r in rows):
    rs = [r for r in rows if r["label"] == lab]
    m = lambda f: st.median(f(r) for r in rs)
    print("%-8s %d runs  rounds open %g, 1st %g, 10th %g, 100th %g  GETs 1st %g"
          "  ms 1st %.0f, 100th %.0f" % (
              lab, len(rs), m(lambda r: r["rounds_at"][0]),
              m(lambda r: r["rounds_at"][1]), m(lambda r: r["rounds_at"][2]),
              m(lambda r: r["rounds_at"][3]), m(lambda r: r["gets_at"][1]),
              m(lambda r: r["q1_ms"]), m(lambda r: r["q100_ms"])))
PY
