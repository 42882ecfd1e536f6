#!/bin/bash
# containers.sh -- the URL suites where stateless search processes run, run
# by `make test-objstore` with the gateway's environment:
#   1. under a seccomp filter that refuses userfaultfd with EPERM, as the
#      default profiles of Docker, containerd and Kubernetes do
#      (no_userfaultfd), with KEEL_CACHE_POISON=1, so a read of any page
#      that was not brought in fails its call (src/cache/cache.h);
#   2. as an unprivileged user: keeltest (created here when this runs as
#      root, privileges dropped with setpriv), else the user running it.
#
#   bash test/objstore/run.sh test/objstore/containers.sh
#
# NO_USERFAULTFD (default $BUILD/test/no_userfaultfd, BUILD default build)
# and KEEL_URL_TESTS (default the three URL suites of $BUILD) say what to
# run.
#
# Exits 0 when every run passed.
set -u
B=${BUILD:-build}
NO_USERFAULTFD=${NO_USERFAULTFD:-$B/test/no_userfaultfd}
KEEL_URL_TESTS=${KEEL_URL_TESTS:-"$B/test/test_remote $B/test/test_remote_faults $B/test/test_remote_cancel"}
status=0
for t in $KEEL_URL_TESTS; do
    echo "== $t, userfaultfd refused (seccomp), KEEL_CACHE_POISON=1"
    KEEL_CACHE_POISON=1 "$NO_USERFAULTFD" "$t" ||
        { echo "FAILED without userfaultfd: $t"; status=1; }
done
as_user=()
if [ "$(id -u)" = 0 ]; then
    if ! id keeltest >/dev/null 2>&1; then
        useradd --system --no-create-home --shell /usr/sbin/nologin keeltest ||
            { echo "FAILED: cannot create the user keeltest"; exit 1; }
    fi
    as_user=(setpriv --reuid=keeltest --regid=keeltest --init-groups --)
fi
scratch=$(mktemp -d "${TMPDIR:-/tmp}/keel-user.XXXXXX") || exit 1
chmod 1777 "$scratch"
for t in $KEEL_URL_TESTS; do
    echo "== $t, as $( [ ${#as_user[@]} -gt 0 ] && echo keeltest || id -un)"
    HOME="$scratch" TMPDIR="$scratch" "${as_user[@]}" "$t" ||
        { echo "FAILED as an unprivileged user: $t"; status=1; }
done
rm -rf "$scratch"
exit $status
