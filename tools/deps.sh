#!/bin/sh
# deps.sh -- installs the Debian packages keel's build, tests and benchmarks
# need, if any is missing. Runs apt-get as root (directly, or through sudo).
#
#   sh tools/deps.sh            build and test packages (with a single-node
#                               Ceph: the S3 gateway the object-store tests run)
#   sh tools/deps.sh bench      also the benchmark peers and plotting
set -eu

pkgs="build-essential libxxhash-dev liburing-dev libcurl4-openssl-dev libhdf5-dev
      python3 python3-dev python3-numpy python3-pytest python3-setuptools
      python3-pip python3-wheel python3-build python3-hnswlib python3-venv clang
      libclang-rt-14-dev llvm xxd curl pkg-config iproute2 procps
      libsqlite3-dev sqlite3 util-linux passwd coreutils tar
      radosgw ceph-mon ceph-osd"
if [ "${1:-}" = bench ]; then
    pkgs="$pkgs python3-faiss libhnswlib-dev gnuplot-nox
          linux-perf dataset-fashion-mnist"
fi

missing=""
# GloVe comes from the npm registry: Debian's npm only if there is none.
command -v npm >/dev/null 2>&1 || missing=" npm"
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing="$missing $p"
    fi
done
[ -z "$missing" ] && exit 0

echo "deps: installing$missing"
if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
else
    echo "deps: missing packages:$missing" >&2
    echo "help: run this as root, or install them with apt-get" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || true
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
