#!/bin/sh
# checkdeps.sh -- run by the Makefile once per build directory, before
# anything compiles: can $CC build and link a program against the packages
# keel needs? Names the package that is missing and what installs it, and
# exits 1, instead of a compiler error halfway through the build.
#
#   CC=cc CFLAGS=... LDFLAGS=... LDLIBS=... sh tools/checkdeps.sh
set -u

cc=${CC:-cc}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/keel-deps.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

missing() {
    echo "keel: cannot build: $1" >&2
    echo "help: run 'make deps' (or 'sh tools/deps.sh') to install the" \
        "packages keel needs, then run make again" >&2
    exit 1
}

# The first word of CC is the program (CC may carry flags).
# shellcheck disable=SC2086
set -- $cc
command -v "$1" >/dev/null 2>&1 ||
    missing "the C compiler '$1' is missing (Debian package build-essential)"

cat >"$tmp/t.c" <<'C'
#include <xxhash.h>
#include <curl/curl.h>
int main(void) { return (int)(XXH3_64bits("", 0) & 1) + (curl_version() == 0); }
C
# shellcheck disable=SC2086
if ! $cc ${CFLAGS:-} -c "$tmp/t.c" -o "$tmp/t.o" 2>"$tmp/err"; then
    if grep -q 'xxhash.h' "$tmp/err"; then
        missing "xxhash.h is missing (Debian package libxxhash-dev)"
    fi
    if grep -q 'curl/curl.h' "$tmp/err"; then
        missing "curl/curl.h is missing (Debian package libcurl4-openssl-dev)"
    fi
    sed 's/^/    /' "$tmp/err" >&2
    missing "'$cc' cannot compile a small program (output above)"
fi
# shellcheck disable=SC2086
if ! $cc ${LDFLAGS:-} -o "$tmp/t" "$tmp/t.o" ${LDLIBS:--lxxhash -lcurl} 2>"$tmp/err"; then
    if grep -q 'xxhash' "$tmp/err"; then
        missing "the xxhash library is missing (Debian package libxxhash-dev)"
    fi
    if grep -q 'lcurl' "$tmp/err"; then
        missing "the curl library is missing (Debian package libcurl4-openssl-dev)"
    fi
    sed 's/^/    /' "$tmp/err" >&2
    missing "'$cc' cannot link a small program (output above)"
fi

# libhdf5 for the CLI's ann-benchmarks reader (HDF5_CFLAGS, HDF5_LIBS).
printf '#include <hdf5.h>\nint main(void) { return H5open() < 0; }\n' >"$tmp/h.c"
# shellcheck disable=SC2086
if ! $cc ${HDF5_CFLAGS:-} -o "$tmp/h" "$tmp/h.c" ${HDF5_LIBS:--lhdf5} \
    2>"$tmp/err"; then
    missing "hdf5.h or the hdf5 library is missing (Debian package libhdf5-dev)"
fi

# SQLite's extension header for build/keel_sqlite.so (no SQLite is linked).
printf '#include <sqlite3ext.h>\nSQLITE_EXTENSION_INIT1\nint f(void);\nint f(void) { return SQLITE_OK; }\n' >"$tmp/s.c"
# shellcheck disable=SC2086
if ! $cc ${CFLAGS:-} -c "$tmp/s.c" -o "$tmp/s.o" 2>"$tmp/err"; then
    missing "sqlite3ext.h is missing (Debian package libsqlite3-dev)"
fi
exit 0
