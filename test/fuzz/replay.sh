#!/bin/sh
# replay.sh -- replays each fuzz target's committed corpus
# (test/fuzz/corpus/<target>/) and the reproducers of the bugs fuzzing found
# (test/fuzz/crashes/<target>-*) through $BUILD/fuzz/replay_<target>.
# Fails if any input crashes, trips a sanitizer or breaks a target's check.
#   BUILD=build sh test/fuzz/replay.sh fuzz_open fuzz_ops ...
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
# Flushes sync: tmpfs keeps the replay fast where there is one.
if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi
status=0
for t in "$@"; do
    set -- "test/fuzz/corpus/$t"
    for c in test/fuzz/crashes/"$t"-*; do
        [ -e "$c" ] && set -- "$@" "$c"
    done
    "$BUILD/fuzz/replay_$t" "$@" || { echo "FAILED: replay of $t"; status=1; }
done
exit $status
