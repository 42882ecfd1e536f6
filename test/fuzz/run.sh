#!/bin/sh
# run.sh -- the long fuzz run (`make fuzz`): builds keel's libFuzzer targets
# with clang, ASan and UBSan into build/fuzz/, fuzzes each for FUZZ_SECONDS,
# one target at a time, and merges what found new coverage into the corpora:
#   build/fuzz/corpus/<target>/  the working corpus, every input that added
#                                a feature; kept between runs, not committed;
#   test/fuzz/corpus/<target>/   the committed corpus that `make test`
#                                replays: only inputs that reach new code
#                                edges (-merge=1 -use_counters=0), so it
#                                stays at tens of small files.
#
# What it hunts: whatever the targets hunt (see the banner of each
# test/fuzz/fuzz_*.c). Crashes land in build/fuzz/artifacts/; the run fails
# if there are any. Minimize one with
#   build/fuzz/<target> -minimize_crash=1 -runs=10000 <crash file>
# and keep it as test/fuzz/crashes/<target>-<short-name>.
#
# Environment:
#   FUZZ_SECONDS   seconds per target (default 60; 0: no fuzzing)
#   FUZZ_TARGETS   targets to run (default: every test/fuzz/fuzz_*.c)
#   FUZZ_JOBS      parallel fuzzing processes per target (default 1)
#   FUZZ_BUILD_ONLY=1   build, do not fuzz
#   FUZZ_COVERAGE=1     at the end, replay the committed corpora through
#                  binaries built for source coverage and print llvm-cov's
#                  report for the library and the vector file readers
#   CLANG          the compiler (default clang)
#   TMPDIR         where the targets put their scratch files (default
#                  /dev/shm when it is writable: flushes sync, tmpfs is fast)
set -eu

cd "$(dirname "$0")/../.."
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
FUZZ_JOBS=${FUZZ_JOBS:-1}
CLANG=${CLANG:-clang}
OUT=build/fuzz
if [ -z "${FUZZ_TARGETS:-}" ]; then
    FUZZ_TARGETS=$(for f in test/fuzz/fuzz_*.c; do basename "$f" .c; done)
fi
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    TMPDIR=/dev/shm
fi
export TMPDIR=${TMPDIR:-/tmp}

SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS="-std=c11 -D_GNU_SOURCE -g -O1 -pthread -Iinclude -Isrc $SAN"
LIBS="-lxxhash -lcurl -lpthread -lm"

# --- the library, instrumented for coverage and the sanitizers ----------
ISA_SRC=
case $(uname -m) in
x86_64) ISA_SRC="src/hnsw/dist_avx2.c src/hnsw/dist_avx512.c" ;;
aarch64) ISA_SRC="src/hnsw/dist_neon.c" ;;
esac
# The library's sources for this machine, and the flags of its kernels.
LIB_SRC=
for src in src/*/*.c; do
    case $src in
    src/hnsw/dist_avx2.c | src/hnsw/dist_avx512.c | src/hnsw/dist_neon.c)
        case " $ISA_SRC " in *" $src "*) ;; *) continue ;; esac ;;
    esac
    LIB_SRC="$LIB_SRC $src"
done
isa_flags() {
    case $1 in
    src/hnsw/dist_avx2.c) echo "-mavx2 -mfma -mf16c" ;;
    src/hnsw/dist_avx512.c) echo "-mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c" ;;
    esac
}
mkdir -p "$OUT/obj" "$OUT/artifacts"
newest_header=$(ls -t include/*.h src/*/*.h | head -n 1)
OBJS=
for src in $LIB_SRC; do
    obj="$OUT/obj/$(basename "$src" .c).o"
    OBJS="$OBJS $obj"
    if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] || [ "$newest_header" -nt "$obj" ]; then
        echo "CC $src"
        # shellcheck disable=SC2046,SC2086
        $CLANG $CFLAGS -fsanitize=fuzzer-no-link $(isa_flags "$src") -c "$src" -o "$obj"
    fi
done

# --- the targets ---------------------------------------------------------
for t in $FUZZ_TARGETS; do
    echo "CC test/fuzz/$t.c"
    # shellcheck disable=SC2086
    $CLANG $CFLAGS -fsanitize=fuzzer -Itest/fuzz "test/fuzz/$t.c" $OBJS \
        -o "$OUT/$t" $LIBS
done
# shellcheck disable=SC2086
$CLANG $CFLAGS test/fuzz/make_seeds.c $OBJS -o "$OUT/make_seeds" $LIBS

# Seeds, if a corpus is missing (a fresh checkout has them committed).
for t in $FUZZ_TARGETS; do
    if [ -z "$(ls -A "test/fuzz/corpus/$t" 2>/dev/null)" ]; then
        "$OUT/make_seeds" test/fuzz/corpus
        break
    fi
done
[ "${FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0

# --- fuzzing -------------------------------------------------------------
max_len() {
    case $1 in
    fuzz_open) echo 65536 ;;      # sparse images of index files
    fuzz_corrupt) echo 1024 ;;    # a base selector and up to 64 edits
    fuzz_vecfile) echo 16384 ;;
    fuzz_ops) echo 4096 ;;        # up to 200 operations
    *) echo 4096 ;;
    esac
}

# Edit lists and operation sequences mean more at full length from the
# start; libFuzzer otherwise grows the length limit slowly.
len_control() {
    case $1 in
    fuzz_corrupt | fuzz_ops) echo 0 ;;
    *) echo 100 ;;
    esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# -jobs makes libFuzzer fork workers that log to fuzz-<n>.log: only ask
# for it when running more than one.
JOBARGS=
if [ "$FUZZ_JOBS" -gt 1 ]; then
    JOBARGS="-jobs=$FUZZ_JOBS -workers=$FUZZ_JOBS"
fi
status=0
[ "$FUZZ_SECONDS" = 0 ] && FUZZ_TARGETS_RUN= || FUZZ_TARGETS_RUN=$FUZZ_TARGETS
for t in $FUZZ_TARGETS_RUN; do
    corpus="test/fuzz/corpus/$t"
    work="$OUT/corpus/$t"
    mkdir -p "$work" "$corpus"
    echo "== $t: fuzzing for $FUZZ_SECONDS s (TMPDIR=$TMPDIR)"
    # New inputs go to $work (the first directory); the corpus is read.
    # shellcheck disable=SC2086
    if ! "$OUT/$t" -max_len="$(max_len "$t")" -len_control="$(len_control "$t")" \
        -timeout=25 -rss_limit_mb=4096 \
        -max_total_time="$FUZZ_SECONDS" -print_final_stats=1 $JOBARGS \
        -artifact_prefix="$OUT/artifacts/$t-" "$work" "$corpus" \
        2>&1 | tee "$OUT/$t.log" | grep -E '^#[0-9]+ *(INITED|DONE|REDUCE|NEW|pulse)|^stat::|SUMMARY|ERROR|FUZZ FAILURE|^Done' | tail -n 40; then
        :
    fi
    if grep -qE 'ERROR: libFuzzer|ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error|FUZZ FAILURE|SUMMARY: ' "$OUT/$t.log"; then
        echo "== $t: FOUND A CRASH: see $OUT/$t.log and $OUT/artifacts/"
        status=1
    fi
    # Commit the seeds plus a minimal set of inputs reaching every code
    # edge the corpora reach: counters off, so an input that only runs a
    # loop more often than another does not count as new.
    min="$OUT/min/$t"
    rm -rf "$min"
    mkdir -p "$min"
    cp "$corpus"/seed-* "$min"/ 2>/dev/null || true
    if "$OUT/$t" -merge=1 -use_counters=0 -max_len="$(max_len "$t")" \
        -timeout=25 "$min" "$corpus" "$work" >"$OUT/$t.merge.log" 2>&1; then
        rm -f "$corpus"/*
        cp "$min"/* "$corpus"/
    else
        echo "== $t: merge failed, see $OUT/$t.merge.log"
        status=1
    fi
    echo "== $t: corpus now $(ls "$corpus" | wc -l) inputs," \
        "$(cat "$corpus"/* | wc -c) bytes"
done

# --- source coverage of the committed corpora ----------------------------
if [ "${FUZZ_COVERAGE:-0}" = 1 ]; then
    COV="$OUT/cov"
    rm -rf "$COV"
    mkdir -p "$COV"
    CCOV="-std=c11 -D_GNU_SOURCE -g -O1 -pthread -Iinclude -Isrc -Itest/fuzz"
    CCOV="$CCOV -fprofile-instr-generate -fcoverage-mapping"
    for src in $LIB_SRC; do
        # shellcheck disable=SC2046,SC2086
        $CLANG $CCOV $(isa_flags "$src") -c "$src" -o "$COV/$(basename "$src" .c).o"
    done
    BINS=
    for t in $FUZZ_TARGETS; do
        # shellcheck disable=SC2086
        $CLANG $CCOV test/fuzz/replay.c "test/fuzz/$t.c" "$COV"/*.o \
            -o "$COV/$t" $LIBS
        LLVM_PROFILE_FILE="$COV/$t.profraw" "$COV/$t" "test/fuzz/corpus/$t" \
            >/dev/null
        if [ -z "$BINS" ]; then BINS="$COV/$t"; else BINS="$BINS -object=$COV/$t"; fi
    done
    llvm-profdata merge -sparse "$COV"/*.profraw -o "$COV/all.profdata"
    # shellcheck disable=SC2086
    llvm-cov report $BINS -instr-profile="$COV/all.profdata" \
        -ignore-filename-regex='test/|/usr/' | tee "$COV/report.txt"
fi
exit $status
