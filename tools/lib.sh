# lib.sh -- the pieces that the data scripts of tools/ share (glove.sh,
# fashion_mnist.sh, gen_clusters.sh). Sourced, not run: the script sets
#   prog     its name, which starts every message
#   root     the top of the source tree
#   gt_bin   where the ground-truth program is built
# before `. "$root/tools/lib.sh"`.

say() {
    printf '%s: %s\n' "$prog" "$*" >&2
}

die() {
    printf '%s: %s\n' "$prog" "$*" >&2
    exit 1
}

# True if file $1 was modified after file $2 (test -nt is not POSIX).
newer() {
    [ -n "$(find "$1" -prune -newer "$2" 2>/dev/null)" ]
}

# Builds $gt_bin from tools/groundtruth.c when missing or older than its
# sources. -ffp-contract=off: no fused multiply-adds, so every operation
# rounds as written.
build_groundtruth() {
    if [ ! -x "$gt_bin" ] || newer "$root/tools/groundtruth.c" "$gt_bin" ||
        newer "$root/cli/vecfile.c" "$gt_bin" ||
        newer "$root/cli/npy.c" "$gt_bin" ||
        newer "$root/cli/vecfile.h" "$gt_bin"; then
        say "building $gt_bin"
        mkdir -p "$(dirname "$gt_bin")"
        ${CC:-cc} -std=c11 -O3 -march=native -pthread -ffp-contract=off \
            -o "$gt_bin" "$root/tools/groundtruth.c" -lm ||
            die "cannot build tools/groundtruth.c"
    fi
}

# top100 P M METRIC LABEL FAILED: the exact top-100 rows of P.base.fvecs for
# each row of P.query.fvecs by METRIC (l2 or cosine), into P.gt.M.ivecs and
# P.gt.M.dist.fvecs. Skipped, saying "LABEL: already there", when both exist
# and are newer than the base; dies with FAILED when the program fails.
top100() {
    if [ -s "$1.gt.$2.ivecs" ] && [ -s "$1.gt.$2.dist.fvecs" ] &&
        ! newer "$1.base.fvecs" "$1.gt.$2.ivecs"; then
        say "$4: already there"
        return 0
    fi
    say "computing exact top-100 by $3"
    "$gt_bin" "$1.base.fvecs" "$1.query.fvecs" 100 "$3" \
        "$1.gt.$2.ivecs" "$1.gt.$2.dist.fvecs" ||
        die "$5"
}

# report_done P OUT START SUFFIX...: says how long since START (date +%s)
# and lists the size of each P.SUFFIX, by its name in OUT.
report_done() {
    _p=$1 _out=$2 _start=$3
    shift 3
    say "done in $(($(date +%s) - _start)) s; $_out holds:"
    for _f in "$@"; do
        printf '  %12s  %s\n' "$(wc -c <"$_p.$_f" | tr -d ' ')" \
            "${_p##*/}.$_f"
    done
}
