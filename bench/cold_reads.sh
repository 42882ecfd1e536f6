#!/bin/sh
# cold_reads.sh -- cold starts with batch reads off and on (doc/batch_reads.md).
#
#   sh bench/cold_reads.sh INDEX QUERIES.fvecs [ROUNDS] [EF]
#
# Each round evicts INDEX from the page cache (bench/evict, which checks
# that it is out) and starts a fresh keel_bench cold process for each
# setting of SETTINGS (default "0 1"), the order rotated by one each round
# so every setting sees the same machine: 0 runs with KEEL_BATCH_READS=0
# (plain page faults), 1 with KEEL_BATCH_READS=1, beamN with a cold walk's
# beam of N (KEEL_BATCH_READS_BEAM=N, doc/batch_reads.md). Prints the JSON
# lines to $OUT (default build/cold_reads.jsonl), then per setting the
# median [min-max] ms from exec to the 1st, 10th, 100th and 1,000th result
# (one query per call) and the brings of pages the 1st search waited for
# one after another (keel_bench built with -DKEEL_BENCH_INTERNALS).
# QUERIES needs 1,000 rows for the last column (a base file will do).
set -eu
ix=$1
q=$2
rounds=${3:-5}
ef=${4:-64}
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
OUT=${OUT:-$BUILD/cold_reads.jsonl}
CC=${CC:-cc}
make -s -C "$root" BUILD="$BUILD" "$BUILD/libkeel.a"
$CC -std=c11 -O2 -D_GNU_SOURCE -DKEEL_BENCH_INTERNALS -I"$root/include" \
    -I"$root/src" -o "$BUILD/keel_bench" "$root/bench/keel_bench.c" "$BUILD/libkeel.a" \
    -lxxhash -lcurl -lpthread -lm
$CC -std=c11 -O2 -o "$BUILD/evict" "$root/bench/evict.c"
: >"$OUT"
SETTINGS=${SETTINGS:-0 1}
n=$(echo $SETTINGS | wc -w)
for r in $(seq 1 "$rounds"); do
    for i in $(seq 0 $((n - 1))); do
        m=$(echo $SETTINGS | cut -d' ' -f$(( (i + r) % n + 1 )))
        case $m in
        beam*) set -- KEEL_BATCH_READS=1 KEEL_BATCH_READS_BEAM=${m#beam} ;;
        *) set -- KEEL_BATCH_READS=$m ;;
        esac
        env "$@" "$BUILD/evict" "$ix" -- "$BUILD/keel_bench" cold \
            "$ix" "$q" --ef "$ef" --label "batch_reads=$m" \
            >>"$OUT" 2>>"$OUT.log"
    done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rows = [r for r in lines if "q1_ms" in r]
waits = [r for r in lines if "q1_waits" in r]
for lab in sorted({r["label"] for r in rows}):
    rs = [r for r in rows if r["label"] == lab]
    ws = [r["q1_waits"] for r in waits if r["label"] == lab]
    cols = []
    for k in ("q1_ms", "q10_ms", "q100_ms", "q1000_ms"):
        v = [r[k] for r in rs]
        cols.append("%s %.0f [%.0f-%.0f]" % (k[:-3], statistics.median(v),
                                            min(v), max(v)))
    if ws:
        cols.append("waits %g" % statistics.median(ws))
    print("%-14s %d rounds  %s" % (lab, len(rs), "  ".join(cols)))
PY
