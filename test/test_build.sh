#!/bin/sh
# test_build.sh -- the build as a new user meets it:
#
#   1. make on a machine without xxhash.h stops before compiling anything,
#      names the package and says to run make deps (the compiler is wrapped
#      so it finds no xxhash.h);
#   2. a program linked against the build tree's shared library
#      (-Lbuild -lkeel -Wl,-rpath,$PWD/build) starts and works, and the build
#      tree holds libkeel.so.0.1.0 with the links libkeel.so.0 and libkeel.so.
#
# usage: BUILD=build CC=cc sh test/test_build.sh   (run by make test)
set -u

BUILD=${BUILD:-build}
CC=${CC:-cc}
MAKE=${MAKE:-make}
root=$(cd "$(dirname "$0")/.." && pwd)
case $BUILD in
/*) build=$BUILD ;;
*) build=$root/$BUILD ;;
esac
T=$(mktemp -d "${TMPDIR:-/tmp}/keel-build.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
st=0

fail() {
    echo "FAIL: $*" >&2
    for f in "$T/out" "$T/err"; do
        [ -s "$f" ] && sed 's/^/    /' "$f" >&2
    done
    st=1
}

# 1. A compiler that cannot see xxhash.h.
cat >"$T/cc" <<CC
#!/bin/sh
for a in "\$@"; do
    case \$a in *.c) grep -q 'xxhash.h' "\$a" && {
        echo "\$a:1:10: fatal error: xxhash.h: No such file or directory" >&2
        exit 1; } ;;
    esac
done
exec $CC "\$@"
CC
chmod +x "$T/cc"
# A make of its own: not a part of the make that runs this test.
if (cd "$root" && unset MAKEFLAGS MFLAGS MAKELEVEL &&
    $MAKE -s --no-print-directory BUILD="$T/b" CC="$T/cc" all) \
    >"$T/out" 2>"$T/err"; then
    fail "make with xxhash.h missing exited 0"
elif ! grep -q 'libxxhash-dev' "$T/err" || ! grep -q 'make deps' "$T/err"; then
    fail "make with xxhash.h missing did not name libxxhash-dev and make deps"
elif [ -d "$T/b/src" ] || [ -d "$T/b/cli" ]; then
    fail "make with xxhash.h missing compiled something before it stopped"
else
    echo "ok: make without xxhash.h stops first: $(grep -m 1 '^keel:' "$T/err")"
fi

# 2. The build tree's shared library, as a user links it.
for f in libkeel.so.0.1.0 libkeel.so.0 libkeel.so; do
    [ -e "$build/$f" ] || fail "$BUILD/$f is missing"
done
[ -L "$build/libkeel.so.0" ] && [ -L "$build/libkeel.so" ] ||
    fail "$BUILD/libkeel.so.0 and $BUILD/libkeel.so are not links"
: >"$T/out"
# SANFLAGS: the sanitizers the library was built with (its runtime must
# come first in the program).
# shellcheck disable=SC2086
if ! $CC ${SANFLAGS:-} -std=c11 -Wall -Wextra -Werror -I"$root/include" \
    "$root/test/linked.c" -o "$T/linked" -L"$build" -lkeel \
    -Wl,-rpath,"$build" 2>"$T/err"; then
    fail "cannot link test/linked.c against $BUILD/libkeel.so"
elif ! "$T/linked" "$T/linked.keel" >"$T/out" 2>"$T/err"; then
    fail "a program linked with -L$BUILD -lkeel -Wl,-rpath does not run"
else
    echo "ok: a program linked against $BUILD/libkeel.so runs (loads" \
        "$(readelf -d "$T/linked" 2>/dev/null | sed -n 's/.*NEEDED.*\[\(libkeel[^]]*\)\].*/\1/p')" \
        "from $BUILD)"
fi
exit $st
