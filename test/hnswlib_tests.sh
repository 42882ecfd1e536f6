#!/bin/sh
# hnswlib_tests.sh -- hnswlib's own Python binding tests against keel.hnswlib.
#
#   1. fetches hnswlib 0.8's upstream source from Debian's source archive
#      (trixie's hnswlib source package; its .orig.tar.gz is hnswlib's
#      release as published), with apt-get on a private state directory
#      (build/hnswlib-src/apt: no root, no change to the machine's apt
#      setup) and checks it against the SHA-256 of the signed Sources index;
#   2. copies tests/python/bindings_test*.py and
#      python_bindings/tests/bindings_test*.py into build/hnswlib-tests,
#      changing only their "import hnswlib" line (sed) to
#      "import keel.hnswlib as hnswlib";
#   3. runs them with unittest against python/keel, in that directory (the
#      tests write their index files into the current directory).
#
# Fetches once: a second run reuses build/hnswlib-src. Without network it
# says so and exits 77 (skipped) unless KEEL_HNSWLIB_TESTS_REQUIRED=1.
#
# usage: sh test/hnswlib_tests.sh [TEST_FILE_PATTERN]   (make test-hnswlib)
#        PYTHON=/usr/bin/python3 BUILD=build
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) build=$BUILD ;; *) build=$root/$BUILD ;; esac
PYTHON=${PYTHON:-/usr/bin/python3}
MIRROR=${KEEL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${KEEL_HNSWLIB_SUITE:-trixie}
VERSION=0.8.0
pattern=${1:-bindings_test*.py}

src=$build/hnswlib-src
tree=$src/hnswlib-$VERSION
tests=$build/hnswlib-tests

skip() {
    echo "hnswlib_tests: $*" >&2
    [ "${KEEL_HNSWLIB_TESTS_REQUIRED:-0}" = 1 ] && exit 1
    exit 77
}

if [ ! -f "$tree/tests/python/bindings_test.py" ]; then
    apt=$src/apt
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" || exit 1
    echo "deb-src $MIRROR $SUITE main" >"$apt/sources.list"
    set -- -o "Dir::Etc::SourceList=$apt/sources.list" \
        -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$apt/lists" \
        -o "Dir::Cache=$apt/cache" -o Dir::State::Status=/dev/null
    [ "$(id -u)" -eq 0 ] && set -- "$@" -o APT::Sandbox::User=root
    apt-get "$@" -qq update >"$apt/update.log" 2>&1 ||
        skip "cannot read $SUITE's source index from $MIRROR" \
             "($(tail -1 "$apt/update.log"))"
    # The upstream tarball's URL and SHA-256, from the signed index.
    line=$(apt-get "$@" source --print-uris "hnswlib=$VERSION-1" 2>/dev/null |
           grep "orig.tar" | head -1)
    [ -n "$line" ] || skip "$SUITE has no hnswlib $VERSION source package"
    url=$(echo "$line" | cut -d"'" -f2)
    file=$(echo "$line" | cut -d' ' -f2)
    sum=$(echo "$line" | sed 's/.*SHA256://')
    curl -fsS -o "$src/$file" "$url" || skip "cannot fetch $url"
    echo "$sum  $src/$file" | sha256sum -c --quiet - || {
        echo "hnswlib_tests: $src/$file does not match the index's" \
             "SHA-256 $sum" >&2
        exit 1
    }
    tar -xzf "$src/$file" -C "$src" || exit 1
fi

rm -rf "$tests" && mkdir -p "$tests" || exit 1
n=0
for f in "$tree"/tests/python/$pattern "$tree"/python_bindings/tests/$pattern
do
    [ -f "$f" ] || continue
    sed -e 's/^import hnswlib$/import keel.hnswlib as hnswlib/' "$f" \
        >"$tests/$(basename "$f")"
    grep -q '^import keel.hnswlib as hnswlib$' "$tests/$(basename "$f")" || {
        echo "hnswlib_tests: $f has no 'import hnswlib' line" >&2
        exit 1
    }
    n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "hnswlib_tests: no test matches $pattern" >&2; exit 1; }
cd "$tests" || exit 1
echo "hnswlib_tests: $n files of hnswlib $VERSION's tests against keel.hnswlib"
PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH} \
    exec "$PYTHON" -m unittest discover -v -s . -p "$pattern"
