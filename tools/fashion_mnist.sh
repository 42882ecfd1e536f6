#!/bin/sh
# fashion_mnist.sh -- prepares the Fashion-MNIST benchmark data for keel.
#
# Owns data/fashion-mnist-784 (or the directory given as the only argument):
#   fashion-mnist-784.base.fvecs         the 60,000 training images
#   fashion-mnist-784.query.fvecs        the first 1,000 of the 10,000 test
#                                        images
#   fashion-mnist-784.gt.l2.ivecs        exact top-100 base rows per query,
#                                        Euclidean
#   fashion-mnist-784.gt.l2.dist.fvecs   their distances (not squared)
# Each image is 28 x 28 = 784 pixels, uint8 0..255, stored as float32 of the
# same values, row by row in the idx files' order.
#
# The images come from Debian's dataset-fashion-mnist package (Zalando SE,
# MIT), installed here when missing. Distances between such vectors are
# square roots of integers, so exact ties are common: the ground truth
# breaks them toward the lower id, like keel.
#
# Idempotent: each step is skipped when its outputs exist (ground truth: and
# are newer than the base vectors), and every output is written under a
# temporary name and renamed when whole. Needs cc and /usr/bin/python3 with
# numpy (Debian: python3-numpy).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-./data/fashion-mnist-784}
src=/usr/share/datasets/fashion-mnist
py=/usr/bin/python3
gt_bin=$root/build/tools/groundtruth
start=$(date +%s)

prog=fashion_mnist.sh
. "$root/tools/lib.sh"

mkdir -p "$out" || die "cannot create $out"
out=$(cd "$out" && pwd)
p=$out/fashion-mnist-784

# 1. The images, from the Debian package.
if [ -s "$p.base.fvecs" ] && [ -s "$p.query.fvecs" ]; then
    say "vectors: already in $out"
else
    if [ ! -s "$src/train-images-idx3-ubyte.gz" ] ||
        [ ! -s "$src/t10k-images-idx3-ubyte.gz" ]; then
        [ "$(id -u)" = 0 ] ||
            die "$src is missing; run as root, or install the" \
                "Debian package dataset-fashion-mnist"
        say "installing the Debian package dataset-fashion-mnist"
        apt-get install -y dataset-fashion-mnist >/dev/null ||
            { apt-get update >/dev/null &&
                apt-get install -y dataset-fashion-mnist >/dev/null; } ||
            die "apt-get install dataset-fashion-mnist failed"
        [ -s "$src/train-images-idx3-ubyte.gz" ] ||
            die "dataset-fashion-mnist put no images in $src;" \
                "see where they are with dpkg -L dataset-fashion-mnist"
    fi
    "$py" -c 'import numpy' 2>/dev/null ||
        die "$py has no numpy (Debian: apt-get install python3-numpy)"
    say "converting to .fvecs"
    "$py" - "$src" "$p" <<'EOF'
# idx3: big-endian int32 magic 0x00000803, then int32 count, rows, columns,
# then count * rows * columns uint8 pixels.
import gzip
import os
import sys

import numpy as np

src, prefix = sys.argv[1], sys.argv[2]


def images(name, want):
    with gzip.open(os.path.join(src, name), "rb") as f:
        raw = f.read()
    magic, n, rows, cols = np.frombuffer(raw[:16], dtype=">i4")
    if magic != 0x803 or n != want or rows * cols != 784 or \
            len(raw) != 16 + n * rows * cols:
        sys.exit("fashion_mnist.sh: %s: unexpected idx header "
                 "(magic %#x, %d images of %d x %d, %d bytes)"
                 % (name, magic, n, rows, cols, len(raw)))
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 784)


def save(path, x):
    fv = np.empty((len(x), 785), dtype="<i4")
    fv[:, 0] = 784
    fv[:, 1:] = x.astype("<f4").view("<i4")
    fv.tofile(path + ".tmp")
    os.replace(path + ".tmp", path)


base = images("train-images-idx3-ubyte.gz", 60000)
query = images("t10k-images-idx3-ubyte.gz", 10000)[:1000]
save(prefix + ".query.fvecs", query)
save(prefix + ".base.fvecs", base)  # last: its presence marks the step done
print("fashion_mnist.sh: %d base and %d query vectors of 784 dims"
      % (len(base), len(query)), file=sys.stderr)
EOF
fi

# 2. The ground-truth program, rebuilt when its sources change.
build_groundtruth

# 3. Exact top-100 by Euclidean distance.
top100 "$p" l2 l2 "ground truth (l2)" "groundtruth failed"

report_done "$p" "$out" "$start" base.fvecs query.fvecs gt.l2.ivecs \
    gt.l2.dist.fvecs
