#!/bin/bash
# run.sh -- runs commands against a Ceph RADOS Gateway of their own: starts
# one on 127.0.0.1 (rgw-up.sh) in a fresh temporary directory, runs each
# command with the gateway's AWS_* variables and KEEL_TEST_BUCKET in its
# environment, and stops the gateway when they end, pass or fail, or when
# this script is interrupted (rgw-down.sh, from a trap).
#
#   bash test/objstore/run.sh CMD [CMD ...]     (each CMD one word: a test)
#
# Exits 0 when every command passed; 1 when one failed or the gateway did
# not start.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
D=$(mktemp -d "${TMPDIR:-/tmp}/keel-rgw.XXXXXX") || exit 1
trap 'bash "$HERE/rgw-down.sh" "$D"' EXIT
trap 'exit 1' INT TERM HUP

bash "$HERE/rgw-up.sh" "$D" || exit 1
# shellcheck disable=SC1091
. "$D/env"
status=0
for t in "$@"; do
    "$t" || { echo "FAILED: $t"; status=1; }
done
exit $status
