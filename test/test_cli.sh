#!/bin/sh
# test_cli.sh -- end-to-end tests of the keel command-line tool.
#
# usage: sh test/test_cli.sh path/to/keel
#
# Runs the real binary on the 10k GloVe slice (glove-100-10k.*), found in
# $KEEL_TEST_DATA or else in the data/ directory beside this script. Each
# check prints what it checked; the first failure prints what went wrong,
# with keel's stderr, and exits 1. Scratch files go in a fresh directory
# under $TMPDIR, removed at the end unless KEEL_TEST_KEEP is set.

set -u

if [ $# -ne 1 ]; then
    echo "usage: sh test/test_cli.sh path/to/keel" >&2
    exit 2
fi
KEEL=$1
case $KEEL in
/*) ;;
*) KEEL=$(pwd)/$KEEL ;;
esac
if [ ! -x "$KEEL" ]; then
    echo "FAIL: $KEEL is not an executable (build it with make)" >&2
    exit 1
fi

DATA=${KEEL_TEST_DATA:-$(dirname "$0")/data}
BASE=$DATA/glove-100-10k.base.fvecs
QUERY=$DATA/glove-100-10k.query.fvecs
TRUTH=$DATA/glove-100-10k.gt.l2.ivecs
for f in "$BASE" "$QUERY" "$TRUTH"; do
    if [ ! -f "$f" ]; then
        echo "FAIL: test data $f is missing" >&2
        echo "help: put the glove-100-10k files in test/data or set" \
            "KEEL_TEST_DATA to their directory" >&2
        exit 1
    fi
done

T=$(mktemp -d "${TMPDIR:-/tmp}/keel-cli.XXXXXX") || exit 1
if [ -z "${KEEL_TEST_KEEP:-}" ]; then
    trap 'rm -rf "$T"' EXIT
    trap 'exit 1' INT TERM HUP
else
    echo "scratch directory: $T"
fi

IDX=$T/glove.keel
st=0

fail() {
    echo "FAIL: $*" >&2
    if [ -s "$T/err" ]; then
        echo "--- stderr of the last keel run:" >&2
        sed 's/^/    /' "$T/err" >&2
    fi
    if [ -s "$T/out" ]; then
        echo "--- stdout of the last keel run (first lines):" >&2
        sed -n '1,10s/^/    /p' "$T/out" >&2
    fi
    exit 1
}

ok() {
    echo "ok: $*"
}

# Runs keel with the arguments; stdout in $T/out, stderr in $T/err, exit
# status in $st.
run() {
    st=0
    "$KEEL" "$@" >"$T/out" 2>"$T/err" || st=$?
}

# expect STATUS DESCRIPTION ARGS...: runs keel ARGS and insists on STATUS.
expect() {
    want=$1
    what=$2
    shift 2
    run "$@"
    [ "$st" -eq "$want" ] ||
        fail "$what: 'keel $*' exited $st, expected $want"
    if [ "$want" -ne 0 ]; then
        grep -q '^help: ' "$T/err" ||
            fail "$what: 'keel $*' printed no 'help: ' line on stderr"
    fi
}

# Prints the value of "key: value" in $T/out.
field() {
    sed -n "s/^$1: *//p" "$T/out"
}

# A float compare: at_least VALUE MIN
at_least() {
    awk -v v="$1" -v m="$2" 'BEGIN { exit !(v != "" && v + 0 >= m + 0) }'
}

# --- help and version ------------------------------------------------------

expect 0 "help" --help
grep -q '^usage: keel' "$T/out" || fail "keel --help printed no usage line"
expect 0 "help search" help search
grep -q -- '--truth' "$T/out" || fail "keel help search does not list --truth"
expect 0 "search --help" search --help
expect 0 "version" --version
grep -q '^keel [0-9]' "$T/out" || fail "keel --version printed no version"
ok "--help, help CMD, CMD --help and --version exit 0"

# --- build and search ------------------------------------------------------

expect 0 "build" build "$IDX" "$BASE"
grep -q '^10,000 vectors in .* s (.* vectors/s), file .*B (.*B on disk)$' "$T/out" ||
    fail "build summary line has the wrong form"
ok "build of 10,000 vectors: $(cat "$T/out")"
expect 0 "info after build" info "$IDX"
len=$(wc -c <"$IDX" | tr -d ' ')
[ "$(field 'file bytes' | cut -d' ' -f1 | tr -d ,)" = "$len" ] ||
    fail "info says file bytes $(field 'file bytes'), ls -l says $len"
ok "info's file bytes are the length ls -l shows ($len)"

expect 0 "search with --truth" search "$IDX" "$QUERY" -k 10 \
    --truth "$TRUTH" --out "$T/results.tsv"
recall=$(field 'recall@10')
at_least "$recall" 0.95 || fail "recall@10 is '$recall', expected >= 0.95"
for key in queries 'first query' 'first QPS' QPS mean p50 p99; do
    [ -n "$(field "$key")" ] || fail "search summary has no '$key:' line"
done
grep -q '^first pass' "$T/out" && grep -q '^second pass.*steady state' "$T/out" ||
    fail "search summary does not say which pass each number is from"
[ "$(field queries)" = 100 ] || fail "search counted $(field queries) queries"
ok "search recall@10 = $recall on glove-100-10k"

lines=$(wc -l <"$T/results.tsv")
[ "$lines" -eq 1000 ] || fail "--out has $lines lines, expected 100*10"
awk -F '\t' '
    NF != 4 || $1 !~ /^[0-9]+$/ || $2 !~ /^[0-9]+$/ || $3 !~ /^[0-9]+$/ ||
    $4 !~ /^[-+0-9.eE]+$/ || $1 > 99 || $2 > 9 { bad = 1; print; exit }
    $1 != int((NR - 1) / 10) || $2 != (NR - 1) % 10 { bad = 1; print; exit }
    $2 > 0 && $4 + 0 < prev + 0 { bad = 1; print; exit }
    { prev = $4 }
    END { exit bad }' "$T/results.tsv" >"$T/badline" ||
    fail "--out line has the wrong form or order: $(cat "$T/badline")"
ok "--out writes 1000 lines of query, rank, id, distance"

expect 0 "search --json --reader --threads 4" search --reader --threads=4 \
    -k10 --ef 80 --json --truth="$TRUTH" "$IDX" "$QUERY"
for key in queries k ef first_query_ms first_pass_qps first_pass_seconds \
    qps mean_ms p50_ms p99_ms recall seconds; do
    grep -q "\"$key\": " "$T/out" || fail "search --json has no \"$key\""
done
grep -q '^{.*}$' "$T/out" || fail "search --json is not one object"
grep -q '"ef": 80' "$T/out" || fail "search --json does not report --ef 80"
recall=$(sed -n 's/.*"recall": \([0-9.]*\).*/\1/p' "$T/out")
at_least "$recall" 0.95 ||
    fail "recall on 4 reader threads is '$recall', expected >= 0.95"
ok "search --reader --threads 4 --json: recall $recall"

# --once runs the queries once; an empty index says so.
expect 0 "search --once" search "$IDX" "$QUERY" -k 5 --once --out "$T/once.tsv"
grep -q '^one pass (--once)' "$T/out" || fail "search --once does not say it ran one pass"
grep -q '^first QPS' "$T/out" && fail "search --once printed first-pass lines"
[ "$(wc -l <"$T/once.tsv")" -eq 500 ] || fail "search --once --out wrote $(wc -l <"$T/once.tsv") lines, not 500"
dd if="$BASE" of="$T/e1.fvecs" bs=404 count=1 2>/dev/null
expect 0 "build of one vector" build "$T/empty.keel" "$T/e1.fvecs"
expect 0 "delete of it" delete "$T/empty.keel" 0
expect 0 "search of an empty index" search "$T/empty.keel" "$QUERY" -k 5 --once
grep -q '^empty: .*no live vectors' "$T/out" || fail "a search of an empty index does not say it is empty"
expect 0 "search --json of an empty index" search "$T/empty.keel" "$QUERY" -k 5 --once --json
grep -q '"live_vectors": 0' "$T/out" || fail "search --json of an empty index: $(cat "$T/out")"
ok "search --once runs once; a search of an empty index says it is empty"

# The neighbours of one id, or of a vector on the command line.
expect 0 "search --id" search "$IDX" --id 17 -k 3
[ "$(wc -l <"$T/out")" -eq 3 ] || fail "search --id printed $(wc -l <"$T/out") lines, not 3"
[ "$(sed -n '1p' "$T/out" | cut -f3,4)" = "$(printf '17\t0')" ] ||
    fail "search --id 17 does not find 17 first at distance 0: $(sed -n 1p "$T/out")"
cp "$T/out" "$T/by-id"
expect 0 "get 17" get "$IDX" 17
vec=$(cat "$T/out")
expect 0 "search --vector" search "$IDX" --vector "[$vec]" -k 3
cmp -s "$T/out" "$T/by-id" || fail "search --vector of id 17's vector differs from --id 17"
expect 0 "search --id --json" search "$IDX" --id 17 -k 2 --json
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["results"][0] == {"id": 17, "distance": 0}' \
    "$T/out" || fail "search --id --json: $(cat "$T/out")"
expect 2 "search --vector of 3 numbers" search "$IDX" --vector "1, 2, 3" -k 3
grep -q -- "--vector has 3 numbers but the index has 100 dimensions" "$T/err" ||
    fail "a short --vector is not named"
expect 2 "search --vector with a word" search "$IDX" --vector "1, x" -k 3
# 1e-50 is a number (it rounds to 0, as --radius 1e-400 does); 1e39 is
# beyond a float: both were called "not a number".
expect 2 "search --vector with 1e-50" search "$IDX" --vector "1e-50, 2, 3" -k 3
grep -q -- "--vector has 3 numbers but the index has 100 dimensions" "$T/err" ||
    fail "--vector 1e-50 was not read as a number"
expect 2 "search --vector with 1e39" search "$IDX" --vector "1, 1e39, 3" -k 3
grep -q -- "--vector has '1e39', which is beyond a float's range" "$T/err" ||
    fail "--vector 1e39 was not named as beyond a float's range"
expect 2 "search --id and --vector" search "$IDX" --id 1 --vector 1 -k 3
expect 1 "search --id of a missing id" search "$IDX" --id 123456789 -k 3
expect 2 "search without QUERIES" search "$IDX" -k 3
ok "search --id and --vector print the neighbours of one query"

expect 0 "search --json without truth" search "$IDX" "$QUERY" -k 5 --json
grep -q '"recall": null' "$T/out" || fail "recall is not null without --truth"
ok "search --json has recall null without --truth"

# --truth with --allowed: the unfiltered truth file is refused; --truth exact
# measures against the exact filtered answer, which equals the truth file's
# when every id is allowed.
seq 0 9999 >"$T/all-ids.txt"
seq 0 7 9999 >"$T/some-ids.txt"
expect 2 "--truth FILE with --allowed" search "$IDX" "$QUERY" -k 10 \
    --allowed "$T/some-ids.txt" --truth "$TRUTH"
grep -q -- '--truth exact' "$T/err" || fail "the refusal does not offer --truth exact"
expect 2 "--truth exact without --allowed" search "$IDX" "$QUERY" -k 10 \
    --truth exact
expect 0 "search with --truth" search "$IDX" "$QUERY" -k 10 --truth "$TRUTH"
unfiltered=$(field 'recall@10')
expect 0 "--truth exact, every id allowed" search "$IDX" "$QUERY" -k 10 \
    --allowed "$T/all-ids.txt" --truth exact
[ "$(field 'recall@10')" = "$unfiltered" ] ||
    fail "exact recall with every id allowed is $(field 'recall@10'), the truth file gives $unfiltered"
expect 0 "--truth exact, one id in 7 allowed" search "$IDX" "$QUERY" -k 10 \
    --allowed "$T/some-ids.txt" --truth exact
recall=$(field 'recall@10')
at_least "$recall" 0.95 || fail "filtered recall@10 is '$recall'"
ok "--truth exact with --allowed: recall@10 $recall (all allowed: $unfiltered)"

# --- info and check --------------------------------------------------------

expect 0 "info" info "$IDX"
[ "$(field dimensions)" = 100 ] || fail "info dimensions is not 100"
[ "$(field 'live vectors')" = 10,000 ] || fail "info live vectors is not 10,000"
[ "$(field metric)" = l2 ] || fail "info metric is not l2"
[ "$(field codes)" = none ] || fail "info codes is '$(field codes)', not none"
ok "info prints dimensions 100, 10000 live vectors, metric l2, codes none"

expect 0 "info --json" info --json "$IDX"
grep -q '^{.*}$' "$T/out" || fail "info --json is not one object"
grep -q '"dim"' "$T/out" && fail "info --json says dim, Python's stats() says dimensions"
for pair in '"dimensions": 100' '"count": 10000' '"metric": "l2"' \
    '"precision": "f32"' '"codes": "none"' '"deleted": 0' '"next_id": 10000'; do
    grep -q "$pair" "$T/out" || fail "info --json lacks $pair"
done
for key in max_connections slots max_level segments heap_chunks \
    file_bytes allocated_bytes snapshot; do
    grep -q "\"$key\": [0-9]" "$T/out" || fail "info --json lacks \"$key\""
done
ok "info --json has every key"

expect 0 "check" check "$IDX"
grep -q '^ok: ' "$T/out" || fail "check printed no 'ok: ' line"
ok "check passes a good index"

cp "$IDX" "$T/bad.keel"
for off in 100 65636; do
    printf 'CORRUPTCORRUPTCORRUPTCORRUPT' |
        dd of="$T/bad.keel" bs=1 seek=$off conv=notrunc 2>/dev/null ||
        fail "cannot corrupt the copy"
done
expect 4 "check of a corrupt copy" check "$T/bad.keel"
expect 4 "search of a corrupt copy" search "$T/bad.keel" "$QUERY" -k 1
ok "check and search exit 4 (corrupt) with a help line on an index with both headers damaged"

# --- radius search and :memory: -------------------------------------------

expect 0 "search --radius" search "$IDX" "$QUERY" --radius 5 --max 50 \
    --out "$T/radius.tsv"
[ "$(field radius)" = 5 ] || fail "search --radius printed no radius"
[ "$(field max)" = 50 ] || fail "search --radius printed no max"
field found | grep -q 'per query' || fail "search --radius printed no found"
awk -F '\t' '$4 > 5 || $2 >= 50 { bad = 1 } END { exit bad }' \
    "$T/radius.tsv" || fail "search --radius wrote a result past 5 or 50"
[ -s "$T/radius.tsv" ] || fail "search --radius --out wrote nothing"
expect 0 "search --radius --json" search "$IDX" "$QUERY" --radius 5 --json
grep -q '"radius": 5, "max": 1000, "mean_found": ' "$T/out" ||
    fail "search --radius --json lacks radius, max and mean_found"
expect 2 "search --radius with -k" search "$IDX" "$QUERY" --radius 5 -k 3
grep -q -- '--max' "$T/err" || fail "--radius with -k does not point at --max"
expect 2 "search --radius nan" search "$IDX" "$QUERY" --radius nan
expect 2 "search --radius with --truth" search "$IDX" "$QUERY" --radius 5 \
    --truth "$TRUTH"
expect 2 "search --max without --radius" search "$IDX" "$QUERY" -k 3 --max 9
expect 2 "search --radius --max 0" search "$IDX" "$QUERY" --radius 5 --max 0
expect 1 "search --radius -1 (l2)" search "$IDX" "$QUERY" --radius -1
grep -q 'never negative' "$T/err" || fail "--radius -1 was not explained"
ok "search --radius: within the radius, capped by --max, refusals"

expect 1 "info :memory:" info :memory:
grep -q 'in memory' "$T/err" || fail "info :memory: does not say why"
expect 1 "build :memory:" build :memory: "$BASE"
[ ! -e ":memory:" ] && [ ! -e "$T/:memory:" ] ||
    fail "build :memory: left a file"
ok ":memory: is refused by every command, with a reason"

# --- get and delete --------------------------------------------------------

expect 0 "get" get "$IDX" 5
words=$(awk '{ print NF }' "$T/out")
[ "$words" = 100 ] || fail "get printed $words numbers, expected 100"
[ "$(wc -l <"$T/out")" -eq 1 ] || fail "get printed more than one line"
awk '{ for (i = 1; i <= NF; i++)
          if ($i !~ /^-?[0-9.]+(e[-+][0-9]+)?$/) exit 1 }' "$T/out" ||
    fail "get printed something that is not a number"
cp "$T/out" "$T/vec5"
ok "get prints 100 numbers on one line"

expect 0 "delete" delete "$IDX" 5
expect 1 "get of a deleted id" get "$IDX" 5
expect 1 "delete of a deleted id" delete "$IDX" 5
ok "get and delete of a deleted id exit 1"

expect 1 "delete with one unknown id" delete "$IDX" 6 99999999
expect 0 "get after a failed delete" get "$IDX" 6
ok "a failed delete deletes nothing"

expect 0 "info after delete" info --json "$IDX"
grep -q '"count": 9999' "$T/out" || fail "count is not 9999 after a delete"
ok "info counts 9999 live vectors after one delete"

# --- many ids, ids, backup -------------------------------------------------

expect 0 "get of several ids" get "$IDX" 7 8 7
[ "$(wc -l <"$T/out")" -eq 3 ] || fail "get of 3 ids printed not 3 lines"
[ "$(sed -n 1p "$T/out")" = "$(sed -n 3p "$T/out")" ] ||
    fail "get 7 8 7 printed different vectors for id 7"
expect 1 "get with a deleted id among others" get "$IDX" 7 5
[ -s "$T/out" ] && fail "a failed get printed vectors"
grep -q 'id 5' "$T/err" || fail "a failed get does not name id 5"
ok "get prints one line per id, all or nothing"

expect 2 "delete of a repeated id" delete "$IDX" 9 9 10
grep -q 'id 9 is given twice' "$T/err" || fail "delete 9 9 10 does not say id 9 repeats"
grep -q 'deleted already' "$T/err" && fail "delete 9 9 10 says deleted already"
expect 0 "get after a refused delete" get "$IDX" 9 10
ok "delete refuses a repeated id and deletes nothing"

expect 0 "ids" ids "$IDX"
[ "$(wc -l <"$T/out")" -eq 9999 ] || fail "ids printed $(wc -l <"$T/out") lines, not 9999"
[ "$(sed -n 1p "$T/out")" = 0 ] || fail "ids does not start at 0"
grep -qx 5 "$T/out" && fail "ids lists the deleted id 5"
sort -n "$T/out" | cmp -s - "$T/out" || fail "ids are not in increasing order"
expect 0 "ids --json" ids "$IDX" --json
grep -q '"count": 9999' "$T/out" || fail "ids --json does not count 9999"
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["ids"]) == 9999' "$T/out" 2>/dev/null ||
    fail "ids --json is not JSON with 9999 ids"
ok "ids lists the 9999 live ids in order, as text and JSON"

expect 0 "backup" backup "$IDX" "$T/copy.keel"
grep -q '9,999 live vectors' "$T/out" || fail "backup does not say 9,999 live vectors"
expect 0 "check of the backup" check "$T/copy.keel"
expect 0 "ids of the backup" ids "$T/copy.keel"
mv "$T/out" "$T/ids.copy"
run ids "$IDX"
cmp -s "$T/out" "$T/ids.copy" || fail "the backup lists other ids"
expect 0 "search the backup" search "$T/copy.keel" "$QUERY" -k 10 --out "$T/copy.tsv"
expect 0 "search the index" search "$IDX" "$QUERY" -k 10 --out "$T/orig.tsv"
cmp -s "$T/copy.tsv" "$T/orig.tsv" || fail "the backup answers queries differently"
expect 0 "backup --json over the old copy" backup "$IDX" "$T/copy.keel" --json
grep -q '"count": 9999' "$T/out" || fail "backup --json does not count 9999"
ls "$T" | grep -q 'keel-tmp' && fail "backup left a temporary file"
expect 1 "backup onto the index" backup "$IDX" "$IDX"
expect 1 "backup into a missing directory" backup "$IDX" "$T/no/such/copy.keel"
expect 2 "backup without DEST" backup "$IDX"
ok "backup writes a copy that checks, lists and searches like the index"

# --- import-hnswlib --------------------------------------------------------

# An hnswlib index file as hnswalg.h's saveIndex writes it: 3 vectors of 2
# dimensions (labels 7, 8, 9; 8 marked deleted), maxM0 2, maxM 1, label 9 on
# level 1.
/usr/bin/python3 - "$T/h.bin" <<'PY'
import struct, sys
dim, mm0, mm = 2, 2, 1
off = 4 + 4 * mm0
lab = off + 4 * dim
per = lab + 8
out = struct.pack("<QQQQQQiIQQQdQ", 0, 10, 3, per, lab, off, 1, 2, mm, mm0,
                  1, 1.0, 40)
for i, (label, gone) in enumerate(((7, 0), (8, 1), (9, 0))):
    out += struct.pack("<HBB", 2, gone, 0) + struct.pack("<II", (i + 1) % 3,
                                                         (i + 2) % 3)
    out += struct.pack("<ff", i, 2 * i) + struct.pack("<Q", label)
out += struct.pack("<I", 0) * 2 + struct.pack("<III", 8, 1, 0)
open(sys.argv[1], "wb").write(out)
PY
expect 0 "import-hnswlib" import-hnswlib "$T/h.bin" "$T/h.keel" --json
grep -q '"vectors": 2, "skipped_deleted": 1, "dimensions": 2' "$T/out" ||
    fail "import-hnswlib printed $(cat "$T/out")"
expect 0 "get of the imported labels" get "$T/h.keel" 7 9
[ "$(cat "$T/out")" = "$(printf '0 0\n2 4')" ] ||
    fail "the imported vectors are $(cat "$T/out")"
expect 1 "import of a deleted label" get "$T/h.keel" 8
expect 1 "import-hnswlib into an existing file" import-hnswlib "$T/h.bin" "$T/h.keel"
head -c 190 "$T/h.bin" >"$T/hcut.bin"
expect 1 "import-hnswlib of a cut file" import-hnswlib "$T/hcut.bin" "$T/hcut.keel"
grep -q 'hnswlib' "$T/err" || fail "the refusal of a cut file does not say what it expected"
[ ! -e "$T/hcut.keel" ] || fail "a failed import left an index"
expect 1 "import-hnswlib of a keel file" import-hnswlib "$T/h.keel" "$T/hk.keel"
# A device would be read until memory runs out (bounded here, to be safe;
# not under a sanitizer, whose shadow memory needs more address space).
([ -n "${KEEL_SAN:-}" ] || ulimit -v 1000000 2>/dev/null; expect 1 "import-hnswlib of /dev/zero" \
    import-hnswlib /dev/zero "$T/hz.keel"
 grep -q 'not a regular file' "$T/err" ||
    fail "import-hnswlib of /dev/zero said $(cat "$T/err")") || exit 1
expect 2 "import-hnswlib without KEEL_FILE" import-hnswlib "$T/h.bin"
expect 2 "import-hnswlib --metric hamming" import-hnswlib "$T/h.bin" "$T/hm.keel" --metric hamming
ok "import-hnswlib: labels and vectors of an hnswlib file, deleted ones left out, bad files refused"

# --- usage errors ----------------------------------------------------------

expect 2 "no command"
expect 2 "unknown command" frobnicate "$IDX"
expect 2 "unknown option" info "$IDX" --frobnicate
expect 2 "missing INDEX" info
expect 2 "missing QUERIES" search "$IDX" -k 10
expect 2 "missing -k" search "$IDX" "$QUERY"
expect 2 "-k 0" search "$IDX" "$QUERY" -k 0
expect 2 "-k abc" search "$IDX" "$QUERY" -k abc
expect 2 "-k without a value" search "$IDX" "$QUERY" -k
expect 2 "--ef=12x" search "$IDX" "$QUERY" -k 10 --ef=12x
expect 2 "--json=1" info "$IDX" --json=1
expect 2 "extra argument" check "$IDX" "$IDX"
expect 2 "id 12x" get "$IDX" 12x
expect 2 "id -1" get "$IDX" -1
expect 2 "id too large" get "$IDX" 18446744073709551616
expect 2 "id UINT64_MAX" delete "$IDX" 18446744073709551615
expect 2 "bad metric" build "$T/new.keel" "$BASE" --metric hamming
expect 2 "-M 1" build "$T/new.keel" "$BASE" -M 1
[ ! -e "$T/new.keel" ] || fail "a build with a usage error created the index"
ok "usage errors exit 2 with a help line"

run search "$IDX" "$QUERY" -k abc
grep -q "abc" "$T/err" || fail "the -k abc message does not name the value"
ok "usage messages name the bad value"

# --- files that are not indexes -------------------------------------------

printf 'these are my notes\nnot an index\n' >"$T/notes.txt"
cp "$T/notes.txt" "$T/notes.orig"
expect 1 "search of a text file" search "$T/notes.txt" "$QUERY" -k 10
expect 1 "info of a text file" info "$T/notes.txt"
expect 1 "delete in a text file" delete "$T/notes.txt" 1
expect 1 "build into a text file" build "$T/notes.txt" "$BASE"
cmp -s "$T/notes.txt" "$T/notes.orig" || fail "keel changed a text file"
ok "a text file as INDEX exits 1 with a help line and is left unchanged"

# A FIFO's open waits for a writer forever unless keel avoids it: each run
# is bounded, so a hang fails the test instead of stopping it.
mkfifo "$T/pipe.keel" || fail "cannot make a FIFO"
for cmd in "info" "check" "get @ 1" "delete @ 1" "compact" \
    "search @ $QUERY -k 1" "search --reader @ $QUERY -k 1" "build @ $BASE"; do
    # shellcheck disable=SC2086
    set -- $cmd
    args=
    for a in "$@"; do
        [ "$a" = @ ] && a=$T/pipe.keel
        args="$args $a"
    done
    [ "$cmd" = "${cmd#*@}" ] && args="$args $T/pipe.keel"
    st=0
    # shellcheck disable=SC2086
    timeout 20 "$KEEL" $args >"$T/out" 2>"$T/err" || st=$?
    [ "$st" -eq 1 ] || fail "keel$args on a FIFO exited $st, expected 1"
    grep -q 'pipe.keel is a FIFO' "$T/err" ||
        fail "keel$args does not say the path is a FIFO"
    grep -q '^help: ' "$T/err" || fail "keel$args printed no help line"
done
ok "a FIFO as INDEX exits 1 at once, naming it a FIFO"

for dev in /dev/null /dev/zero; do
    st=0
    timeout 20 "$KEEL" build "$dev" "$QUERY" >"$T/out" 2>"$T/err" ||
        st=$?
    [ "$st" -eq 1 ] || fail "build into $dev exited $st, expected 1"
    grep -q "$dev is a character device" "$T/err" ||
        fail "build into $dev does not say it is a character device"
done
ok "/dev/null and /dev/zero as INDEX are named character devices"

expect 3 "search of a missing index" search "$T/missing.keel" "$QUERY" -k 1
[ ! -e "$T/missing.keel" ] || fail "search created a missing index"
expect 3 "info of a missing index" info "$T/missing.keel"
grep -q 'keel build creates an index' "$T/err" ||
    fail "a missing index's help does not point at keel build"
for cmd in check delete get compact ids; do
    case $cmd in delete|get) extra=1 ;; *) extra= ;; esac
    # shellcheck disable=SC2086
    expect 3 "$cmd of a missing index" $cmd "$T/missing.keel" $extra
done
expect 3 "backup of a missing index" backup "$T/missing.keel" "$T/m.copy"
ok "a missing INDEX exits 3 and is not created"

# --- dimensions, ids, stdin ------------------------------------------------

# Three 50-dimensional zero vectors: an int32 50, then 200 zero bytes, each.
: >"$T/dim50.fvecs"
for _ in 1 2 3; do
    printf '\062\000\000\000' >>"$T/dim50.fvecs"
    dd if=/dev/zero bs=200 count=1 2>/dev/null >>"$T/dim50.fvecs"
done
expect 1 "build of 50-d vectors into a 100-d index" build --append "$IDX" \
    "$T/dim50.fvecs"
expect 1 "search with 50-d queries" search "$IDX" "$T/dim50.fvecs" -k 1
expect 0 "info after a refused build" info --json "$IDX"
grep -q '"count": 9999' "$T/out" || fail "a refused build changed the index"
ok "vectors of other dimensions exit 1 and leave the index unchanged"

# The first three vectors of the base file (4 + 400 bytes each).
dd if="$BASE" of="$T/three.fvecs" bs=404 count=3 2>/dev/null
printf '100\n200\n' >"$T/two-ids.txt"
expect 2 "--ids of the wrong length" build "$T/small.keel" \
    "$T/three.fvecs" --ids "$T/two-ids.txt"
[ ! -e "$T/small.keel" ] || fail "a build with too few ids created the index"
ok "--ids with fewer ids than vectors exits 2"

: >"$T/empty.keel"
expect 0 "build into an empty file" build "$T/empty.keel" "$T/three.fvecs"
expect 0 "check of the index built in an empty file" check "$T/empty.keel"
ok "build turns an empty file (a creation cut short) into an index"

printf '100\n200\n300\n' >"$T/three-ids.txt"
expect 0 "build with --ids from stdin" build "$T/small.keel" - \
    --ids "$T/three-ids.txt" --metric l2 -M 8 <"$T/three.fvecs"
expect 0 "get a caller id" get "$T/small.keel" 200
cp "$T/out" "$T/vec200"
expect 0 "get row 1 of the base" get "$IDX" 1
cmp -s "$T/out" "$T/vec200" || fail "get 200 differs from row 1 of the base"
ok "build from stdin with --ids stores row 1 under id 200"

printf '200\n' >"$T/allow.txt"
expect 0 "search --allowed" search "$T/small.keel" "$QUERY" -k 3 \
    --allowed "$T/allow.txt" --out "$T/allowed.tsv"
awk -F '\t' '$3 != 200 { exit 1 }' "$T/allowed.tsv" ||
    fail "search --allowed returned an id that is not allowed"
[ "$(wc -l <"$T/allowed.tsv")" -eq 100 ] ||
    fail "search --allowed did not return one result per query"
ok "search --allowed returns only allowed ids"

expect 1 "build with an id in use" build "$T/small.keel" "$T/three.fvecs" \
    --ids "$T/three-ids.txt" --append
expect 0 "info after a refused batch" info --json "$T/small.keel"
grep -q '"count": 3' "$T/out" || fail "a refused batch added vectors"
ok "a batch with ids in use adds nothing"

expect 1 "build into an existing index without --append" build \
    "$T/small.keel" "$T/three.fvecs"
grep -q -- '--append' "$T/err" || fail "the refusal does not name --append"
grep -q 'small.keel already holds an index of 3 vectors' "$T/err" ||
    fail "the refusal does not say how many vectors the index holds"
expect 0 "info after a build without --append" info --json "$T/small.keel"
grep -q '"count": 3' "$T/out" || fail "a build without --append added vectors"
expect 0 "build --append" build --append "$T/small.keel" "$T/three.fvecs"
grep -q 'small.keel held 3 vectors before, 6 after$' "$T/out" ||
    fail "build --append does not say the counts before and after"
ok "build refuses an existing index without --append; --append says 3 -> 6"

# A failed build of a new index leaves no file behind.
printf '\002\000\000\000\000\000\300\177\000\000\200\077' >"$T/nan.fvecs"
expect 1 "build of a NaN vector" build "$T/nan.keel" "$T/nan.fvecs"
[ ! -e "$T/nan.keel" ] || fail "a build that failed on NaN left its index"
printf '\002\000\000\000\000\000\000\000\000\000\000\000' >"$T/zero.fvecs"
expect 1 "build of a zero vector under cosine" build "$T/zero.keel" \
    "$T/zero.fvecs" --metric cosine
[ ! -e "$T/zero.keel" ] || fail "a cosine build of a zero vector left its index"
cat "$T/three.fvecs" "$T/nan.fvecs" >"$T/bad-tail.fvecs"
st=0
"$KEEL" build "$T/tail.keel" - <"$T/bad-tail.fvecs" >"$T/out" 2>"$T/err" ||
    st=$?
[ "$st" -eq 1 ] || fail "build from stdin with a bad last row exited $st"
grep -q 'row 3 (byte offset 1212) gives dimension 2, but row 0 gives 100' \
    "$T/err" || fail "build from stdin does not name the bad row"
[ ! -e "$T/tail.keel" ] || fail "a failed build from stdin left its index"
ok "a failed build of a new index removes the file it created"

# Ctrl-C (SIGINT) and SIGTERM are failures too: a real signal mid-link
# removes the file the build created, says so and exits 128 + the signal.
# 30,000 vectors on one thread link for seconds; the signal comes 0.3 s
# after the build opened the index (the input is read before that).
cat "$BASE" "$BASE" "$BASE" >"$T/b30.fvecs"
# interrupt SIG STATUS INDEX [build options]: builds INDEX from b30.fvecs on
# one thread, sends SIG once the build opened INDEX (a new file exists, an
# existing one has its undo log) and 0.3 s more, insists on STATUS and
# "interrupted" on stderr.
interrupt() {
    sig=$1 want=$2 at=$3
    shift 3
    "$KEEL" build "$at" "$T/b30.fvecs" --threads 1 "$@" >"$T/out" 2>"$T/err" &
    pid=$!
    i=0
    if [ -e "$at" ]; then
        # An existing index: linking has begun once the undo log exists
        # (its first entry saves a committed node's lists before a change).
        while [ ! -e "$at.undo" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
    else
        while [ ! -e "$at" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
    fi
    sleep 0.3
    kill "-$sig" $pid
    st=0
    wait $pid || st=$?
    [ "$st" -eq "$want" ] || fail "build interrupted by SIG$sig exited $st, not $want"
    grep -q '^keel build: interrupted' "$T/err" || fail "SIG$sig: no 'interrupted' message"
}
interrupt INT 130 "$T/int.keel"
grep -q "removed $T/int.keel, which this build created: nothing was kept" \
    "$T/err" || fail "SIGINT mid-link does not say it removed the file"
[ ! -e "$T/int.keel" ] || fail "SIGINT mid-link left the file it created"
interrupt TERM 143 "$T/term.keel"
[ ! -e "$T/term.keel" ] || fail "SIGTERM mid-link left the file it created"
expect 0 "build after an interrupted build of the same path" build \
    "$T/int.keel" "$T/three.fvecs"
ok "SIGINT and SIGTERM mid-link remove the new file, say so, exit 130 and 143"

# While standard input is awaited no callback runs: the handler ends the
# build itself, and still removes the file. The feed is one 8 MB chunk
# (20,971 rows), which the build links, then waits for more in a pipe read
# (the kernel's wait channel says so); a narrow build links it quickly.
mkfifo "$T/slow" || fail "cannot make a FIFO"
"$KEEL" build "$T/wait.keel" - --ef-construction 8 -M 4 <"$T/slow" \
    >"$T/out" 2>"$T/err" &
pid=$!
{ head -c $((20971 * 404)) "$T/b30.fvecs"; exec sleep 60; } >"$T/slow" &
feeder=$!
i=0
while [ $i -lt 600 ]; do
    [ -e "$T/wait.keel" ] && grep -q pipe "/proc/$pid/wchan" 2>/dev/null && break
    sleep 0.1
    i=$((i + 1))
done
kill -INT $pid
st=0
wait $pid || st=$?
kill $feeder 2>/dev/null
wait $feeder 2>/dev/null
[ "$st" -eq 130 ] || fail "build - interrupted while reading exited $st, not 130"
grep -q 'keel build: interrupted; removed' "$T/err" ||
    fail "build - interrupted while reading does not say it removed the file"
[ ! -e "$T/wait.keel" ] || fail "build - interrupted while reading left its file"
ok "SIGINT while build - waits for input removes the new file, exits 130"

# --append keeps the index's vectors, and says how much space the dropped
# vectors hold and how to get it back; the next --append reuses it.
cp "$IDX" "$T/app.keel"
expect 0 "info before an interrupted --append" info "$T/app.keel"
kept=$(field 'live vectors')
interrupt INT 130 "$T/app.keel" --append
grep -q "nothing was added: $T/app.keel holds its $kept vectors as before" \
    "$T/err" || fail "an interrupted --append does not say what was kept"
grep -q "^help: the file holds .* more than before.*keel compact" "$T/err" ||
    fail "an interrupted --append does not say what space it holds"
expect 0 "info after an interrupted --append" info "$T/app.keel"
[ "$(field 'live vectors')" = "$kept" ] || fail "an interrupted --append changed the count"
expect 0 "check after an interrupted --append" check "$T/app.keel"
ok "SIGINT during --append keeps the $kept vectors and says what space it holds"

# Standard input is checked as it arrives: 100 MB of zeros fail at row 0,
# in bounded memory, and leave no index.
st=0
# (A sanitizer build reserves terabytes of address space for its shadow
# memory, so the bound applies only to plain builds: KEEL_SAN names the
# sanitizers, as the Makefile passes it.)
vlimit=50000
[ -z "${KEEL_SAN:-}" ] || vlimit=unlimited
head -c 100000000 /dev/zero |
    (ulimit -v "$vlimit" && timeout 20 "$KEEL" build "$T/zeros.keel" -) \
    >"$T/out" 2>"$T/err" || st=$?
[ "$st" -eq 1 ] || fail "build from 100 MB of zeros exited $st, expected 1"
grep -q 'standard input: row 0 (byte offset 0) gives dimension 0' "$T/err" ||
    fail "build from zeros does not say row 0 gives dimension 0"
[ ! -e "$T/zeros.keel" ] || fail "build from zeros left an index"
ok "build - checks the first row before reading on: zeros fail at once"

# search - checks its queries as they arrive, as build - does: an endless
# stream that is not .fvecs fails at its first row, not when memory ends.
st=0
(yes | timeout 20 "$KEEL" search "$IDX" - -k 1) >"$T/out" 2>"$T/err" || st=$?
[ "$st" -eq 1 ] || fail "search from an endless non-.fvecs stream exited $st, expected 1"
grep -q 'standard input: row 0 (byte offset 0) gives dimension' "$T/err" ||
    fail "search - does not refuse its first row"
st=0
(yes | timeout 20 "$KEEL" search "$IDX" "$QUERY" -k 1 --allowed -) >"$T/out" 2>"$T/err" || st=$?
[ "$st" -eq 1 ] || fail "--allowed - from an endless stream of non-ids exited $st, expected 1"
grep -q "standard input: line 1: 'y' is not a decimal id" "$T/err" ||
    fail "--allowed - does not refuse its first line"
ok "search - and --allowed - check what they read before reading on"

# Standard input feeds one input: a second '-' is refused, not read empty.
expect 2 "search - --allowed -" search "$IDX" - -k 1 --allowed - <"$QUERY"
grep -q "QUERIES and --allowed are both '-'" "$T/err" || fail "search - --allowed - not refused by name"
expect 2 "search - --truth -" search "$IDX" - -k 1 --truth - <"$QUERY"
grep -q "QUERIES and --truth are both '-'" "$T/err" || fail "search - --truth - not refused by name"
expect 2 "build - --ids -" build "$T/two.keel" - --ids - <"$T/three.fvecs"
grep -q "VECTORS and --ids are both '-'" "$T/err" || fail "build - --ids - not refused by name"
[ ! -e "$T/two.keel" ] || fail "a refused build - --ids - left an index"
ok "at most one input reads standard input"

# A bad row in the second 8 MB chunk of a stream is named by its row in the
# whole input: 4096-d rows go 512 to a chunk, and row 600 is NaN.
printf '\000\020\000\000' >"$T/row4096"
dd if=/dev/zero bs=16384 count=1 2>/dev/null >>"$T/row4096"
printf '\000\020\000\000\000\000\300\177' >"$T/nan4096"
dd if=/dev/zero bs=16380 count=1 2>/dev/null >>"$T/nan4096"
cat "$T/row4096" "$T/row4096" "$T/row4096" "$T/row4096" "$T/row4096" >"$T/r5"
cat "$T/r5" "$T/r5" "$T/r5" "$T/r5" "$T/r5" >"$T/r25"
cat "$T/r25" "$T/r25" "$T/r25" "$T/r25" >"$T/r100"
cat "$T/r100" "$T/r100" "$T/r100" "$T/r100" "$T/r100" "$T/r100" \
    "$T/nan4096" "$T/r5" >"$T/nan600.fvecs"
expect 1 "build - with NaN at row 600" build "$T/nan600.keel" - -M 4 \
    --ef-construction 8 <"$T/nan600.fvecs"
grep -q 'vector 600 of standard input has NaN at component 0' "$T/err" ||
    fail "build - names the NaN row by its row in the chunk"
expect 1 "build FILE with NaN at row 600" build "$T/nan600.keel" "$T/nan600.fvecs"
grep -q 'vector 600 of .*nan600.fvecs has NaN at component 0' "$T/err" ||
    fail "build FILE does not name the NaN row 600"
rm -f "$T/r5" "$T/r25" "$T/r100" "$T/nan600.fvecs"
ok "a bad row of a stream is named by its row in the whole input"

# A NaN in a query is named with its row.
cat "$T/three.fvecs" >"$T/qnan.fvecs"
printf '\144\000\000\000\000\000\300\177' >>"$T/qnan.fvecs"
dd if=/dev/zero bs=396 count=1 2>/dev/null >>"$T/qnan.fvecs"
expect 1 "search with a NaN in query 3" search "$IDX" "$T/qnan.fvecs" -k 1
grep -q 'query 3 of .*qnan.fvecs has NaN at component 0' "$T/err" ||
    fail "a NaN query is not named by its row"

# --truth exact with an empty --allowed: nothing is allowed, recall is 1.
: >"$T/none.txt"
expect 0 "search --truth exact with an empty --allowed" search "$IDX" \
    "$QUERY" -k 5 --allowed "$T/none.txt" --truth exact
[ "$(field 'recall@5')" = 1.0000 ] || fail "empty --allowed: recall '$(field 'recall@5')'"

# What the library would refuse is refused while parsing, with the limits.
expect 2 "build --threads 4097" build "$T/t.keel" "$T/three.fvecs" --threads 4097
expect 2 "build --ef-construction 100001" build "$T/t.keel" "$T/three.fvecs" \
    --ef-construction 100001
expect 2 "search --threads 4097" search "$IDX" "$QUERY" -k 1 --threads 4097
[ ! -e "$T/t.keel" ] || fail "a refused build left an index"
expect 0 "search --radius 1e-400 (a number that rounds to 0)" search "$IDX" \
    "$QUERY" --radius 1e-400
expect 2 "search --radius 1e400" search "$IDX" "$QUERY" --radius 1e400
grep -q 'is not a finite float' "$T/err" || fail "--radius 1e400 not refused as too large"

# An empty query file still has a dimension, and it must be the index's.
/usr/bin/python3 - "$T" <<'PY' || fail "cannot write the .npy files"
import sys
def npy(path, header, after=b""):
    body = header.encode() + after
    pad = 64 - (10 + len(body) + 1) % 64
    open(path, "wb").write(b"\x93NUMPY\x01\x00" +
                           (len(body) + pad + 1).to_bytes(2, "little") +
                           body + b" " * pad + b"\n")
npy(sys.argv[1] + "/empty5.npy",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }")
npy(sys.argv[1] + "/junk.npy",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 100), }", b"junk")
PY
expect 1 "search with an empty 5-d .npy" search "$IDX" "$T/empty5.npy" -k 1
grep -q '5-dimensional queries but index' "$T/err" || fail "an empty query file of the wrong dimension was accepted"

# numpy refuses a header with anything but padding after its '}'.
expect 1 "search with junk after an .npy header" search "$IDX" "$T/junk.npy" -k 1
grep -q "after the closing '}'" "$T/err" || fail "junk after an .npy header was accepted"
ok "NaN queries named by row; empty --allowed with --truth exact; limits; --radius 1e-400; empty and junk .npy"

# A search opens a reader: it works while another process holds the writer.
# The writer is a build from a FIFO: it opens the index after its first 8 MB
# chunk (20,971 rows of 100 floats) and then waits for more input.
mkfifo "$T/feed" || fail "cannot make a FIFO"
"$KEEL" build "$T/held.keel" - <"$T/feed" >/dev/null 2>&1 &
held=$!
{ cat "$BASE" "$BASE" "$BASE"; exec sleep 60; } >"$T/feed" &
feeder=$!
i=0
while :; do
    run delete "$T/held.keel" 18446744073709551614
    if grep -q 'open for writing elsewhere' "$T/err"; then
        [ "$st" -eq 5 ] || fail "delete of a locked index exited $st, not 5"
        grep -q "open for writing elsewhere, by process $held" "$T/err" ||
            fail "the lock message does not name the writer's process $held"
        grep -q 'open a reader' "$T/err" &&
            fail "the CLI's lock message speaks of opening a reader"
        break
    fi
    i=$((i + 1))
    [ $i -lt 200 ] || { kill $held $feeder; fail "the writer never opened"; }
    sleep 0.1
done
run search "$T/held.keel" "$QUERY" -k 5
kill $held $feeder 2>/dev/null
wait $held $feeder 2>/dev/null
[ "$st" -eq 0 ] || fail "search while another process writes exited $st"
[ "$(field queries)" = 100 ] || fail "search while writing found no queries"
ok "search works while another process holds the writer; a second writer is told its process id"

# --- compact ---------------------------------------------------------------

expect 0 "compact" compact "$IDX"
grep -q -- '->' "$T/out" || fail "compact printed no before -> after sizes"
expect 0 "info after compact" info --json "$IDX"
grep -q '"deleted": 0' "$T/out" || fail "compact left deleted vectors"
grep -q '"count": 9999' "$T/out" || fail "compact lost live vectors"
expect 0 "check after compact" check "$IDX"
expect 0 "get after compact" get "$IDX" 6
expect 1 "get of the deleted id after compact" get "$IDX" 5
expect 0 "search after compact" search "$IDX" "$QUERY" -k 10 --truth "$TRUTH"
recall=$(field 'recall@10')
at_least "$recall" 0.94 || fail "recall@10 after compact is '$recall'"
ok "compact keeps ids and live vectors: recall@10 $recall"

# --- each surface speaks its own language (issue 14, item 12) -------------

# No library message reaches the CLI user in C terms.
no_c_terms() {
    grep -E 'keel_[a-z]+|max_connections|ef_search|ef_construction|backup\(\)|dimensions [0-9]+ \(or 0' \
        "$T/err" && fail "$1: the message speaks of the C API: $(cat "$T/err")"
    return 0
}
expect 1 "build --append of 50-d vectors" build --append "$IDX" "$T/dim50.fvecs"
no_c_terms "dimension mismatch"
grep -q "help: give vectors of the index's 100 dimensions" "$T/err" ||
    fail "the dimension mismatch does not say which dimensions to give"
expect 1 "build --append -M 12" build --append "$T/small.keel" "$T/three.fvecs" -M 12
no_c_terms "M mismatch"
grep -q 'give -M 8, or leave -M out' "$T/err" || fail "the M mismatch does not speak of -M"
expect 1 "build --append --metric cosine" build --append "$T/small.keel" "$T/three.fvecs" --metric cosine
no_c_terms "metric mismatch"
grep -q 'give --metric l2' "$T/err" || fail "the metric mismatch does not speak of --metric"
expect 4 "check of the corrupt copy" check "$T/bad.keel"
no_c_terms "corruption"
grep -qE '\.c:[0-9]+' "$T/err" && fail "a corruption message names a source line: $(cat "$T/err")"
# Inputs that are not files of vectors say what they are.
mkdir -p "$T/vecdir"
expect 1 "build from a directory" build "$T/d.keel" "$T/vecdir"
grep -q "vecdir is a directory, not a file of vectors" "$T/err" ||
    fail "a directory as VECTORS is not named as a directory"
expect 1 "build from an index" build "$T/d.keel" "$IDX"
grep -q "looks like a keel index, not a file of vectors" "$T/err" ||
    fail "an index as VECTORS is not named as an index"
printf 'x' >"$T/v.txt"
expect 1 "build from a .txt" build "$T/d.keel" "$T/v.txt"
grep -q "float64.*\.hdf5" "$T/err" ||
    fail "the unknown-type help does not list float64 and .hdf5"
[ ! -e "$T/d.keel" ] || fail "a refused input left an index"
printf '18446744073709551615\n' >"$T/reserved-id.txt"

dd if="$BASE" of="$T/one.fvecs" bs=404 count=1 2>/dev/null
expect 1 "build with the reserved id" build "$T/reserved.keel" "$T/one.fvecs" --ids "$T/reserved-id.txt"
no_c_terms "reserved id"
ok "library messages reach the CLI in its own terms (options and commands), with no source lines; a directory, an index or an unknown type as VECTORS is named"

expect 0 "build --metric angular" build "$T/angular.keel" "$T/three.fvecs" --metric angular
expect 0 "info of the angular index" info "$T/angular.keel"
[ "$(field metric)" = cosine ] || fail "--metric angular did not make a cosine index"
expect 0 "build --metric euclidean" build "$T/euclid.keel" "$T/three.fvecs" --metric euclidean
expect 0 "info of the euclidean index" info "$T/euclid.keel"
[ "$(field metric)" = l2 ] || fail "--metric euclidean did not make an l2 index"
ok "--metric angular and euclidean (ann-benchmarks' names) give cosine and l2"

# --- traversal codes -------------------------------------------------------

expect 0 "build --codes i8" build "$T/codes.keel" "$BASE" --codes i8
expect 0 "info of the i8 index" info "$T/codes.keel"
[ "$(field codes)" = i8 ] || fail "info codes is '$(field codes)', not i8"
expect 0 "info --json of the i8 index" info --json "$T/codes.keel"
grep -q '"codes": "i8"' "$T/out" || fail "info --json lacks \"codes\": \"i8\""
expect 0 "check of the i8 index" check "$T/codes.keel"
expect 0 "search the i8 index" search "$T/codes.keel" "$QUERY" -k 10 \
    --truth "$TRUTH" --out "$T/codes-i8.tsv"
recall=$(field 'recall@10')
at_least "$recall" 0.95 || fail "recall@10 with codes i8 is '$recall'"
[ "$(wc -l <"$T/codes-i8.tsv")" -eq 1000 ] || fail "the i8 search wrote not 1000 lines"
# Distances are measured on the stored vectors: a (query, id) pair that both
# indexes return has the same distance, to the last bit (%.9g).
expect 0 "search the index without codes" search "$IDX" "$QUERY" -k 10 \
    --out "$T/nocodes.tsv"
# same_distances KIND: the KIND index's results ($T/codes-KIND.tsv) carry the
# distances the index without codes gives the same (query, id) pairs.
same_distances() {
    awk -F '\t' 'NR == FNR { d[$1 " " $3] = $4; next }
        ($1 " " $3) in d { n++; if (d[$1 " " $3] != $4) { print; bad = 1 } }
        END { if (n < 900) { print "only " n " pairs in common"; bad = 1 }
              exit bad }' "$T/nocodes.tsv" "$T/codes-$1.tsv" >"$T/baddist" ||
        fail "the $1 index reports other distances: $(head -3 "$T/baddist")"
}
same_distances i8
ok "build --codes i8: info says i8, check passes, recall@10 $recall, exact distances"

expect 0 "build --codes i4" build "$T/codes4.keel" "$BASE" --codes i4
expect 0 "info of the i4 index" info "$T/codes4.keel"
[ "$(field codes)" = i4 ] || fail "info codes is '$(field codes)', not i4"
expect 0 "check of the i4 index" check "$T/codes4.keel"
expect 0 "search the i4 index" search "$T/codes4.keel" "$QUERY" -k 10 \
    --truth "$TRUTH" --out "$T/codes-i4.tsv"
recall=$(field 'recall@10')
at_least "$recall" 0.95 || fail "recall@10 with codes i4 is '$recall'"
same_distances i4
ok "build --codes i4: info says i4, check passes, recall@10 $recall, exact distances"

expect 2 "build --codes bogus" build "$T/bogus.keel" "$T/three.fvecs" --codes bogus
grep -q "'bogus'" "$T/err" || fail "--codes bogus does not name the value"
grep -q 'help: give --codes none, i8 or i4' "$T/err" ||
    fail "--codes bogus does not say which values there are"
[ ! -e "$T/bogus.keel" ] || fail "a build with --codes bogus created the index"
ok "--codes bogus exits 2, naming the value, with a help line"

printf '20000\n20001\n20002\n' >"$T/codes-ids.txt"
expect 1 "build --append --codes none to an i8 index" build --append \
    "$T/codes.keel" "$T/three.fvecs" --ids "$T/codes-ids.txt" --codes none
no_c_terms "codes mismatch"
grep -q 'created with traversal codes i8, not none' "$T/err" ||
    fail "the codes mismatch does not name both"
grep -q 'give --codes i8' "$T/err" || fail "the codes mismatch does not speak of --codes"
grep -q 'KEEL_FILE_OPTIONS' "$T/err" && fail "the codes mismatch speaks of the C API"
expect 0 "info after a refused append" info --json "$T/codes.keel"
grep -q '"count": 10000' "$T/out" || fail "a refused append changed the i8 index"
expect 1 "build --append --codes i8 to an index without codes" build \
    --append "$T/small.keel" "$T/three.fvecs" --codes i8
grep -q 'give --codes none' "$T/err" || fail "the codes mismatch does not say none"
expect 0 "build --append without --codes" build --append "$T/codes.keel" \
    "$T/three.fvecs" --ids "$T/codes-ids.txt"
expect 0 "build --append --codes i8" build --append "$T/codes.keel" \
    "$T/one.fvecs" --codes i8
expect 0 "delete in the i8 index" delete "$T/codes.keel" 20001
expect 0 "compact the i8 index" compact "$T/codes.keel"
expect 0 "info after append and compact" info --json "$T/codes.keel"
grep -q '"codes": "i8", .*"count": 10003' "$T/out" ||
    fail "append and compact did not keep codes i8 and 10003 vectors"
expect 0 "check after append and compact" check "$T/codes.keel"
ok "appending with other --codes is refused; without or with the same, the index keeps its codes"

expect 2 "search --efSearch" search "$IDX" "$QUERY" -k 10 --efSearch 80
grep -q 'did you mean --ef?' "$T/err" || fail "--efSearch does not suggest --ef"
expect 2 "build --metrc" build "$T/typo.keel" "$BASE" --metrc l2
grep -q 'did you mean --metric?' "$T/err" || fail "--metrc does not suggest --metric"
expect 2 "search --ef 100001" search "$IDX" "$QUERY" -k 10 --ef 100001
grep -q "100,000" "$T/err" || fail "--ef 100001 does not give the library's cap 100,000"
grep -q "'100001'" "$T/err" || fail "--ef 100001 does not quote the value as given"
expect 0 "search --ef 100000" search "$T/small.keel" "$QUERY" -k 1 --ef 100000
ok "unknown options get a suggestion; --ef takes 1..100,000 as the library does"

/usr/bin/python3 - "$T" "$T/three.fvecs" <<'PY' || fail "cannot write a float64 .npy"
import sys, numpy as np
raw = np.fromfile(sys.argv[2], dtype=np.float32).reshape(3, 101)[:, 1:]
np.save(sys.argv[1] + "/three64.npy", raw.astype(np.float64))
big = raw.astype(np.float64)
big[2, 5] = 1e300
np.save(sys.argv[1] + "/big64.npy", big)
PY
expect 0 "build from a float64 .npy" build "$T/f64.keel" "$T/three64.npy"
expect 0 "get from the float64 build" get "$T/f64.keel" 1
cp "$T/out" "$T/vec1.f64"
expect 0 "get row 1 of the base" get "$IDX" 1
cmp -s "$T/out" "$T/vec1.f64" || fail "a float64 .npy row differs from its float32 row"
# 1e300 was refused as "inf", which the file does not hold.
expect 1 "build from a float64 .npy holding 1e300" build "$T/big64.keel" "$T/big64.npy"
grep -q "vector 2 of .*big64.npy has 1.0000000000000001e+300 at component 5, beyond a float's range" "$T/err" ||
    fail "a float64 1e300 was not named by its value"
ok "build reads a float64 .npy, converting it to float32 as Python does; values past a float's range are named"

if [ "$(id -u)" = 0 ] && mkdir -p "$T/ro" && mount -t tmpfs tmpfs "$T/ro" 2>/dev/null; then
    "$KEEL" build "$T/ro/r.keel" "$T/three.fvecs" >/dev/null 2>&1
    mount -o remount,ro "$T/ro"
    expect 1 "delete on a read-only file system" delete "$T/ro/r.keel" 1
    grep -q 'read-only' "$T/err" && grep -q -- '--reader' "$T/err" ||
        { umount "$T/ro"; fail "a read-only file system does not point at --reader"; }
    no_c_terms "read-only file system" || true
    expect 0 "search on a read-only file system" search "$T/ro/r.keel" "$QUERY" -k 1
    umount "$T/ro"
    ok "a read-only file system's message names --reader; search works there"
else
    echo "skip: a read-only file system needs root and tmpfs"
fi

# --- scripting: --json everywhere, exit statuses (item 14) ----------------

json_ok() {
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert isinstance(d, dict)' "$T/out" ||
        fail "$1 --json did not print one JSON object: $(cat "$T/out")"
    grep -q '[0-9],[0-9][0-9][0-9]' "$T/out" && fail "$1 --json has a thousands separator"
    return 0
}
expect 0 "build --json" build "$T/j.keel" "$BASE" --json
json_ok build
grep -q '"added": 10000' "$T/out" || fail "build --json does not count 10000 added"
expect 0 "delete --json" delete "$T/j.keel" 3 4 --json
json_ok delete
grep -q '"deleted": 2, "count": 9998' "$T/out" || fail "delete --json counts wrong"
expect 0 "get --json" get "$T/j.keel" 7 8 --json
json_ok get
/usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert [v["id"] for v in d["vectors"]] == [7, 8] and len(d["vectors"][0]["vector"]) == 100' "$T/out" ||
    fail "get --json does not hold ids 7 and 8 with 100 numbers each"
expect 0 "check --json" check "$T/j.keel" --json
json_ok check
grep -q '"ok": true' "$T/out" || fail "check --json does not say ok"
expect 0 "compact --json" compact "$T/j.keel" --json
json_ok compact
grep -q '"removed": 2' "$T/out" || fail "compact --json does not count 2 removed"
for cmd in info ids; do
    expect 0 "$cmd --json" $cmd "$T/j.keel" --json
    json_ok $cmd
done
expect 0 "backup --json" backup "$T/j.keel" "$T/j.copy" --json
json_ok backup
expect 0 "search --json" search "$T/j.keel" "$QUERY" -k 10 --json
json_ok search
grep -q '"mean_ms": ' "$T/out" || fail "search --json has no mean latency"
expect 0 "help" --help
for code in 0 1 2 3 4 5; do
    grep -q "^  $code  " "$T/out" || fail "keel --help does not document exit status $code"
done
sed -n '/^\.SH EXIT STATUS/,/^\.SH EXAMPLES/p' "$(dirname "$0")/../doc/keel.1" >"$T/exit.man"
for code in 3 4 5; do
    grep -q "^\.B $code\$" "$T/exit.man" || fail "doc/keel.1 does not document exit status $code"
done
ok "--json on every command prints one JSON object; exit statuses documented"

# keel --help, keel help CMD and the man page agree: every command the help
# lists is in the man page's synopsis and COMMANDS, and the other way round;
# every command takes --json (its help and synopsis say so, the parser
# accepts it); an error under --json prints one JSON object on stdout.
MAN=$(dirname "$0")/../doc/keel.1
expect 0 "help" --help
sed -n '/^commands:/,/^$/s/^  \([a-z-]*\)  .*/\1/p' "$T/out" >"$T/cmds"
[ "$(wc -l <"$T/cmds")" -ge 10 ] || fail "keel --help lists $(wc -l <"$T/cmds") commands"
grep -q "man ./doc/keel.1" "$T/out" || fail "keel --help does not say how to read the man page before install"
sed -n '/^\.SH SYNOPSIS/,/^\.SH DESCRIPTION/p' "$MAN" >"$T/syn.man"
sed -n 's/^\.B keel \([a-z\\-]*\)$/\1/p' "$T/syn.man" | sed 's/\\-/-/g' |
    sort -u >"$T/man.cmds"
sort -u "$T/cmds" | cmp -s - "$T/man.cmds" ||
    fail "keel --help lists $(sort -u "$T/cmds" | tr '\n' ' ')but the man page's synopsis $(tr '\n' ' ' <"$T/man.cmds")"
while read -r c; do
    mc=$(printf '%s' "$c" | sed 's/-/\\-/g')   # the man page writes - as \-
    MC=$mc awk '/^\.B keel /{on = ($0 == ".B keel " ENVIRON["MC"])} on && /json/{f=1} END{exit !f}' \
        "$T/syn.man" || fail "the man page's synopsis of keel $c has no --json"
    grep -qF ".BI \"$mc " "$MAN" || fail "the man page's COMMANDS has no $c"
    run help "$c"
    grep -q -- "--json" "$T/out" || fail "keel help $c does not mention --json"
    run "$c" --json
    [ "$st" -ne 0 ] || fail "keel $c --json with no arguments succeeded"
    grep -q "unknown option" "$T/err" && fail "keel $c refuses --json"
    /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["exit_status"] == int(sys.argv[2]) and d["error"] and d["help"]' \
        "$T/out" "$st" || fail "keel $c --json printed no JSON error object: $(cat "$T/out")"
done <"$T/cmds"
run info "$T/no-such.keel" --json
[ "$st" -eq 3 ] || fail "info --json of no index exited $st"
grep -q '"exit_status": 3' "$T/out" || fail "info --json of no index: $(cat "$T/out")"
grep -q '^help: ' "$T/err" || fail "info --json of no index says nothing on stderr"
ok "keel --help, keel help and the man page list the same $(wc -l <"$T/cmds") commands; each takes --json; errors under --json are JSON"

# --- ann-benchmarks' HDF5 files (item 13) ---------------------------------

MKHDF5=${KEEL_MKHDF5:-$(dirname "$KEEL")/test/mkhdf5}
[ -x "$MKHDF5" ] || fail "the HDF5 test helper $MKHDF5 is missing (make $MKHDF5)"
"$MKHDF5" "$T/glove-euclidean.hdf5" euclidean "$BASE" "$QUERY" "$TRUTH" ||
    fail "cannot write an HDF5 file"
"$MKHDF5" "$T/glove-angular.hdf5" angular "$BASE" "$QUERY" "$TRUTH" ||
    fail "cannot write an HDF5 file"
expect 0 "build from an .hdf5" build "$T/h5.keel" "$T/glove-euclidean.hdf5"
grep -q '^10,000 vectors' "$T/out" || fail "build from .hdf5 did not add its 10,000 train vectors"
expect 0 "info of the .hdf5 build" info "$T/h5.keel"
[ "$(field metric)" = l2 ] || fail "distance euclidean did not give metric l2"
expect 0 "search with .hdf5 queries and truth" search "$T/h5.keel" \
    "$T/glove-euclidean.hdf5" -k 10 --truth "$T/glove-euclidean.hdf5"
[ "$(field queries)" = 100 ] || fail "search read $(field queries) queries from the .hdf5"
recall=$(field 'recall@10')
at_least "$recall" 0.95 || fail "recall@10 against the .hdf5 neighbors is '$recall'"
expect 0 "build from an angular .hdf5" build "$T/h5a.keel" "$T/glove-angular.hdf5"
expect 0 "info of the angular .hdf5 build" info "$T/h5a.keel"
[ "$(field metric)" = cosine ] || fail "distance angular did not give metric cosine"
expect 0 "build from an angular .hdf5 with --metric l2" build "$T/h5l.keel" \
    "$T/glove-angular.hdf5" --metric l2
expect 0 "info" info "$T/h5l.keel"
[ "$(field metric)" = l2 ] || fail "--metric did not win over the file's distance"
printf 'not hdf5\n' >"$T/fake.hdf5"
expect 1 "build from a file that is not HDF5" build "$T/fake.keel" "$T/fake.hdf5"
[ ! -e "$T/fake.keel" ] || fail "a failed .hdf5 build left an index"
ok "ann-benchmarks .hdf5: train builds, test and neighbors search (recall $recall), distance gives the metric"

# --- hostile .hdf5 files: each refused with its own message, nothing built -

# The distance attribute as h5py writes a Python str (variable-length
# UTF-8, the glove-angular fixture above), as other writers do (ASCII), as
# a fixed-length UTF-8 string; and a metric keel cannot serve.
"$MKHDF5" --ascii "$T/ascii-angular.hdf5" angular "$T/three.fvecs" "$QUERY" "$TRUTH" ||
    fail "cannot write an HDF5 file"
expect 0 "build from an ASCII angular .hdf5" build "$T/h5as.keel" "$T/ascii-angular.hdf5"
expect 0 "info" info "$T/h5as.keel"
[ "$(field metric)" = cosine ] || fail "ASCII distance angular did not give metric cosine"
"$MKHDF5" "$T/glove-jaccard.hdf5" jaccard "$T/three.fvecs" "$QUERY" "$TRUTH" ||
    fail "cannot write an HDF5 file"
expect 1 "build from a jaccard .hdf5" build "$T/h5j.keel" "$T/glove-jaccard.hdf5"
grep -q "says its distance is 'jaccard', which keel does not compute" "$T/err" ||
    fail "a UTF-8 distance 'jaccard' was not refused by name"
[ ! -e "$T/h5j.keel" ] || fail "a refused jaccard build left an index"
"$MKHDF5" --hostile distance-fixed-utf8 "$T/fixed-utf8.hdf5" || fail "mkhdf5 --hostile"
expect 0 "build from a fixed-length UTF-8 angular .hdf5" build "$T/h5f.keel" "$T/fixed-utf8.hdf5"
expect 0 "info" info "$T/h5f.keel"
[ "$(field metric)" = cosine ] || fail "fixed-length UTF-8 distance angular did not give metric cosine"
# --append takes the file's distance as it takes --metric: a file of
# angular (or jaccard) vectors is refused by an l2 index unless --metric l2.
expect 0 "build an l2 index to append to" build "$T/h5app.keel" "$T/three.fvecs"
expect 1 "append an angular .hdf5 to an l2 index" build "$T/h5app.keel" \
    "$T/ascii-angular.hdf5" --append
grep -q "says its distance is 'angular' (cosine), but .* was built with metric l2" "$T/err" ||
    fail "--append of an angular .hdf5 to an l2 index was not refused by name"
expect 1 "append a jaccard .hdf5" build "$T/h5app.keel" "$T/glove-jaccard.hdf5" --append
grep -q "'jaccard', which keel does not compute" "$T/err" ||
    fail "--append of a jaccard .hdf5 was not refused by name"
expect 0 "info" info "$T/h5app.keel"
[ "$(field 'live vectors')" = 3 ] || fail "a refused --append added vectors"
expect 0 "append an angular .hdf5 with --metric l2" build "$T/h5app.keel" \
    "$T/ascii-angular.hdf5" --append --metric l2

# hostile KIND STATUS PATTERN [keel arguments after the file]: writes the
# file, builds from it (or runs the arguments given), insists on STATUS and
# on PATTERN in stderr, and that a failed build left no index.
hostile() {
    kind=$1 want=$2 pattern=$3
    shift 3
    "$MKHDF5" --hostile "$kind" "$T/$kind.hdf5" || fail "mkhdf5 --hostile $kind"
    rm -f "$T/$kind.keel"
    if [ $# -eq 0 ]; then
        expect "$want" "hostile .hdf5 $kind" build "$T/$kind.keel" "$T/$kind.hdf5"
        [ "$want" -eq 0 ] || [ ! -e "$T/$kind.keel" ] ||
            fail "a refused build from $kind.hdf5 left an index"
    else
        expect "$want" "hostile .hdf5 $kind" "$@"
    fi
    grep -q -- "$pattern" "$T/err" || fail "hostile .hdf5 $kind: stderr lacks '$pattern'"
}
hostile distance-fixed-array 1 "the attribute 'distance' holds 64 strings"
hostile distance-vlen-array 1 "the attribute 'distance' holds 4000 strings"
hostile distance-vlen-pair 1 "the attribute 'distance' holds 2 strings"
hostile distance-number 1 "the attribute 'distance' is not a string"
hostile distance-escape 1 "its distance is '?\[31mred?\[0m'"
! grep -q "$(printf '\033')" "$T/err" || fail "a terminal escape from a file reached stderr"
# 10,000,000 x 32 declared in a 10 kB file: refused before any of it is
# allocated (the old reader took gigabytes); a cap on memory keeps a
# regression from taking the machine (not under ASan, which reserves more).
"$MKHDF5" --hostile train-unwritten "$T/unwritten.hdf5" || fail "mkhdf5 --hostile"
st=0
if [ -z "${KEEL_SAN:-}" ]; then
    (ulimit -v 400000; exec "$KEEL" build "$T/unwritten.keel" "$T/unwritten.hdf5") \
        >"$T/out" 2>"$T/err" || st=$?
else
    "$KEEL" build "$T/unwritten.keel" "$T/unwritten.hdf5" >"$T/out" 2>"$T/err" || st=$?
fi
[ "$st" -eq 1 ] || fail "a declared but unwritten train set: exit $st, expected 1"
grep -q "declared as 10000000 x 32 but none of it was written" "$T/err" ||
    fail "a declared but unwritten train set was not refused as such"
hostile train-chunk-missing 1 "only 4 of its 8 chunks were written"
hostile train-external 1 "'train' is a link to another file"
"$MKHDF5" --hostile neighbors-float "$T/h5small.hdf5" || fail "mkhdf5 --hostile"
expect 0 "build from a small .hdf5" build "$T/h5small.keel" "$T/h5small.hdf5"
hostile neighbors-float 1 "holds 0.5 at row 1, column 3, which is no row number" \
    search "$T/h5small.keel" "$T/h5small.hdf5" -k 5 --truth "$T/neighbors-float.hdf5"
hostile neighbors-int64 1 "holds 1099511627776 at row 2, column 1, which is no row number" \
    search "$T/h5small.keel" "$T/h5small.hdf5" -k 5 --truth "$T/neighbors-int64.hdf5"
# A filter this libhdf5 lacks is named (not "the file is damaged"); a
# compressed chunk larger than keel decodes is refused before libhdf5
# decodes it whole (3.8 GB for a 3.7 MB file); a 3-D set names its shape.
hostile train-filter-missing 1 "compressed with filter 32000 (lzf), which this libhdf5 cannot decode"
hostile train-chunk-huge 1 "compressed in chunks of 2200000 x 8 values (70400000 bytes)"
hostile train-rank3 1 "not a 2-D array .*(rank 3, shape 4 x 4 x 4)"
hostile train-f64-overflow 1 "vector 7 of .* has 1.0000000000000001e+300 at component 3, beyond a float's range"
# neighbors 4 x 67,108,864 in 1 MB of file: a search reads the -k columns
# it measures, not 1 GB of them (the old reader allocated 1.5 GB).
"$MKHDF5" --hostile neighbors-wide "$T/wide.hdf5" || fail "mkhdf5 --hostile"
st=0
if [ -z "${KEEL_SAN:-}" ]; then
    (ulimit -v 400000; exec "$KEEL" search "$T/h5small.keel" "$T/h5small.hdf5" \
        -k 5 --truth "$T/wide.hdf5") >"$T/out" 2>"$T/err" || st=$?
else
    "$KEEL" search "$T/h5small.keel" "$T/h5small.hdf5" -k 5 \
        --truth "$T/wide.hdf5" >"$T/out" 2>"$T/err" || st=$?
fi
[ "$st" -eq 0 ] || fail "a search against 67,108,864-wide neighbors: exit $st, expected 0"
grep -q '^recall@5: ' "$T/out" || fail "a search against wide neighbors gave no recall"
ok "hostile .hdf5: distance arrays, numbers and escapes, unwritten sets, missing chunks, missing filters, huge chunks, 3-D sets, non-integer neighbors refused; wide neighbors read k columns; UTF-8 and fixed-length distances read"

echo "all CLI tests passed"
exit 0
