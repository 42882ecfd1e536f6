#!/bin/sh
# run.sh -- runs test binaries one after another; fails if any fails.
status=0
for t in "$@"; do
    "$t" || { echo "FAILED: $t"; status=1; }
done
exit $status
