#!/bin/bash
# check.sh -- what `make check` runs once everything is built: every test
# suite of the tree (plain, ASan+UBSan, TSan, Python, object store), as
# independent jobs, KEEL_CHECK_JOBS at a time (default: the number of
# cores), longest first. Each job's output goes to build/check/NAME.log;
# the screen shows one line a job as it ends (its time, and the last lines
# of its log when it failed) and, last, one summary line:
#
#   check: 97 passed, 0 failed in 1234 s
#
# usage: bash tools/check.sh [FILTER]   (FILTER: run only jobs whose name
#                                        contains it, e.g. "asan/")
# Exits 0 when every job passed, 1 otherwise.
#
# A job is one line of the table below: a name, then a command run by
# bash -c from the top of the tree. Jobs must not share files: each test
# makes its own temporary directory, and each object-store job starts a
# gateway of its own on free ports.
set -u
cd "$(dirname "$0")/.." || exit 1
filter=${1:-}
jobs_max=${KEEL_CHECK_JOBS:-$(nproc 2>/dev/null || echo 2)}
logs=build/check
rm -rf "$logs" && mkdir -p "$logs"
table=$logs/jobs
PY=${PYTHON:-/usr/bin/python3}

# The table, longest jobs first (as measured: the object store's two, the
# Python suites, TSan, then the ASan and plain runs), so that the last jobs
# to start are short ones.
{
    printf 'objstore\tmake -s --no-print-directory test-objstore-run\n'
    for s in $(ls test/objstore/suite-*.sh 2>/dev/null); do
        n=$(basename "$s" .sh); n=${n#suite-}
        printf 'objstore-%s\tbash %s\n' "$n" "$s"
    done
    printf 'python\t%s -X dev -W error -m pytest -q python/tests\n' "$PY"
    printf 'hnswlib\tPYTHON=%s KEEL_HNSWLIB_TESTS_REQUIRED=1 sh test/hnswlib_tests.sh\n' "$PY"
    for t in test/test_concurrent*.c; do
        n=$(basename "$t" .c)
        printf 'tsan/%s\tKEEL_TSAN=1 build/tsan/test/%s\n' "$n" "$n"
    done
    # publish and prune beside a URL reader's threads, under TSan, against
    # a gateway of its own
    printf 'tsan/test_remote_concurrent\tKEEL_TSAN=1 bash test/objstore/run.sh build/tsan/test/test_remote_concurrent\n'
    for b in build/asan build; do
        san=; [ "$b" = build/asan ] && san=address,undefined
        p=${b#build}; p=${p#/}; p=${p:+$p/}
        printf '%scli\tKEEL_MKHDF5=%s/test/mkhdf5 KEEL_SAN=%s sh test/test_cli.sh %s/keel\n' \
            "$p" "$b" "$san" "$b"
        printf '%sbuild\tCC=${CC:-cc} BUILD=%s SANFLAGS=%s sh test/test_build.sh\n' \
            "$p" "$b" "${san:+-fsanitize=$san}" 
        printf '%sfuzz-replay\tBUILD=%s sh test/fuzz/replay.sh %s\n' "$p" "$b" \
            "$(ls test/fuzz/fuzz_*.c | sed 's|test/fuzz/||; s|\.c$||' | tr '\n' ' ')"
        for t in test/test_*.c; do
            n=$(basename "$t" .c)
            printf '%s%s\t%s/test/%s\n' "$p" "$n" "$b" "$n"
        done
    done
    for s in $(ls test/suite-*.sh 2>/dev/null); do
        n=$(basename "$s" .sh); n=${n#suite-}
        printf '%s\tbash %s\n' "$n" "$s"
    done
} >"$table"

start=$(date +%s)
passed=0 failed=0
failed_names=""
declare -A names=() started=()

finish() { # pid status
    local pid=$1 st=$2 n=${names[$1]} t
    t=$(( $(date +%s) - ${started[$1]} ))
    if [ "$st" -eq 0 ]; then
        passed=$((passed + 1))
        printf 'ok    %-40s %4d s\n' "$n" "$t"
    else
        failed=$((failed + 1))
        failed_names="$failed_names $n"
        printf 'FAIL  %-40s %4d s  (exit %d; build/check/%s.log ends:)\n' "$n" "$t" "$st" "${n//\//_}"
        tail -n 30 "$logs/${n//\//_}.log" | sed 's/^/      | /'
    fi
    unset "names[$pid]" "started[$pid]"
}

reap() { # waits for one job to end
    local pid st
    wait -n -p pid; st=$?
    finish "$pid" "$st"
}

while IFS=$'\t' read -r name cmd; do
    [ -n "$filter" ] && case $name in *"$filter"*) ;; *) continue ;; esac
    while [ "${#names[@]}" -ge "$jobs_max" ]; do reap; done
    bash -c "$cmd" >"$logs/${name//\//_}.log" 2>&1 </dev/null &
    names[$!]=$name
    started[$!]=$(date +%s)
done <"$table"
while [ "${#names[@]}" -gt 0 ]; do reap; done

[ "$failed" -gt 0 ] && echo "failed:$failed_names"
echo "check: $passed passed, $failed failed in $(( $(date +%s) - start )) s"
[ "$failed" -eq 0 ]
