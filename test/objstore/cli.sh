#!/bin/bash
# cli.sh -- the CLI on a published index: `keel publish INDEX s3://...`,
# then info, check and search with the URL in place of the file, whose
# results must equal the file's. Run by `make test-objstore` (run.sh gives
# the gateway's AWS_* variables and KEEL_TEST_BUCKET); KEEL is the binary.
set -eu
# The URL's results must equal the file's bit for bit: that holds for the
# walk of one expansion at a time (a cold walk's beam may answer otherwise,
# with recall not lower: doc/batch_reads.md).
export KEEL_BATCH_READS_BEAM=1
KEEL=${KEEL:-build/keel}
KEEL=$(cd "$(dirname "$KEEL")" && pwd)/$(basename "$KEEL")
T=$(mktemp -d "${TMPDIR:-/tmp}/keel-cli-s3.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL cli.sh: $*" >&2; exit 1; }
cd "$T"
python3 - <<'PY'
import random, struct
random.seed(7)
with open("v.fvecs", "wb") as f:
    for _ in range(2000):
        f.write(struct.pack("<i", 16) + struct.pack("<16f", *[random.random() for _ in range(16)]))
PY
URL="s3://$KEEL_TEST_BUCKET/test-cli/$$/idx"
"$KEEL" build i.keel v.fvecs >/dev/null || fail "build"
"$KEEL" publish i.keel "$URL" | grep -q "published i.keel to $URL" || fail "publish"
# The same flush again: no version, nothing sent (0 bytes), exit 0.
"$KEEL" publish i.keel "$URL" >same.txt || fail "an unchanged publish failed"
grep -qx "no change: version 1 already holds this index's last flush" same.txt ||
    fail "an unchanged publish said: $(cat same.txt)"
"$KEEL" publish i.keel "$URL" --json >same.json || fail "an unchanged publish --json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["unchanged"] is True and d["version"] == 1 and d["uploaded_bytes"] == 0, d' \
    same.json || fail "unchanged publish --json: $(cat same.json)"
"$KEEL" info "$URL" >info.txt || fail "info on the URL"
grep -q "live vectors: *2,000" info.txt || fail "info on the URL: $(cat info.txt)"
grep -q "as du shows" info.txt && fail "info on a URL speaks of du: $(cat info.txt)"
grep -q "pages fetched into memory" info.txt || fail "info on a URL: $(cat info.txt)"
grep -q "^version: *1 (the newest at the URL: 1)$" info.txt || fail "info on a URL names no version: $(cat info.txt)"
"$KEEL" info "$URL" --json >info.json || fail "info --json on the URL"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["version"] == 1 and d["newest_version"] == 1, d' \
    info.json || fail "info --json on the URL: $(cat info.json)"
"$KEEL" check "$URL" | grep -q "^ok: $URL" || fail "check on the URL"
"$KEEL" search i.keel v.fvecs -k 5 --out file.tsv >/dev/null 2>&1 || fail "search the file"
KEEL_CACHE_DIR="$T/cache" "$KEEL" search "$URL" v.fvecs -k 5 --out url.tsv >/dev/null 2>&1 ||
    fail "search the URL"
cmp -s file.tsv url.tsv || fail "the URL's results differ from the file's"
[ -n "$(ls "$T/cache")" ] || fail "no page in the disk cache"
"$KEEL" publish i.keel "s3://keel-no-such-bucket/x" 2>err.txt && fail "publish to a missing bucket"
grep -q "help:" err.txt || fail "no help line for a missing bucket"
# Three more versions, then prune to the newest one: it still searches
# like the file, and the JSON says what went.
for n in 1 2 3; do
    "$KEEL" delete i.keel $n >/dev/null || fail "delete $n"
    "$KEEL" publish i.keel "$URL" >pub.txt || fail "publish version $((n + 1))"
    grep -q "^published i.keel to $URL as version $((n + 1)) in" pub.txt ||
        fail "publish after a change said: $(cat pub.txt)"
done
# keel versions: one row a version, the newest and the hint marked.
"$KEEL" versions "$URL" >versions.txt || fail "versions"
[ "$(grep -cE '^ *[0-9]+  ' versions.txt)" -eq 4 ] || fail "versions of 4: $(cat versions.txt)"
grep -qE '^ *4  .*newest \(readers open it\), latest hint$' versions.txt ||
    fail "versions does not mark version 4: $(cat versions.txt)"
"$KEEL" versions "$URL" --json >versions.json || fail "versions --json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); v=d["versions"]; assert d["count"] == 4 and [x["version"] for x in v] == [1, 2, 3, 4] and d["newest"] == 4 and d["latest_hint"] == 4 and v[3]["newest"] and not v[0]["newest"] and all(x["manifest_bytes"] > 0 and x["last_modified"].endswith("Z") for x in v), d' \
    versions.json || fail "versions --json: $(cat versions.json)"
"$KEEL" prune "$URL" --keep 1 --json >prune.json || fail "prune"
grep -q '"kept": 1' prune.json || fail "prune --json: $(cat prune.json)"
grep -q '"removed": [1-9]' prune.json || fail "prune removed nothing: $(cat prune.json)"
"$KEEL" info "$URL" | grep -q "live vectors: *1,997" || fail "info after prune"
"$KEEL" versions "$URL" >versions.txt || fail "versions after prune"
[ "$(grep -cE '^ *[0-9]+  ' versions.txt)" -eq 1 ] || fail "versions after prune --keep 1: $(cat versions.txt)"
"$KEEL" info "$URL" | grep -q "^version: *4 (the newest at the URL: 4)$" || fail "info after prune names no version 4"
"$KEEL" search i.keel v.fvecs -k 5 --out file2.tsv >/dev/null 2>&1 || fail "search the file again"
"$KEEL" search "$URL" v.fvecs -k 5 --out url2.tsv >/dev/null 2>&1 || fail "search the URL after prune"
cmp -s file2.tsv url2.tsv || fail "after prune the URL's results differ from the file's"
# Nothing published: info and prune exit 3, in the CLI's words.
st=0; "$KEEL" info "s3://$KEEL_TEST_BUCKET/test-cli/$$/nothing" 2>err.txt || st=$?
[ $st -eq 3 ] || fail "info of a prefix with nothing published exited $st, not 3"
grep -q "keel publish INDEX URL" err.txt || fail "no 'keel publish' in: $(cat err.txt)"
grep -q "keel_" err.txt && fail "a C call in: $(cat err.txt)"
st=0; "$KEEL" prune "s3://$KEEL_TEST_BUCKET/test-cli/$$/nothing" 2>err.txt || st=$?
[ $st -eq 3 ] || fail "prune of a prefix with nothing published exited $st, not 3"
st=0; "$KEEL" versions "s3://$KEEL_TEST_BUCKET/test-cli/$$/nothing" 2>err.txt || st=$?
[ $st -eq 3 ] || fail "versions of a prefix with nothing published exited $st, not 3"
grep -q "^keel: no index is published at s3://$KEEL_TEST_BUCKET/test-cli/$$/nothing" err.txt &&
    grep -q "^help: .*keel publish INDEX URL" err.txt || fail "versions of nothing said: $(cat err.txt)"
grep -q "keel_" err.txt && fail "a C call in: $(cat err.txt)"
st=0; "$KEEL" versions "s3://keel-no-such-bucket/x" --json >err.json 2>err.txt || st=$?
[ $st -eq 3 ] && grep -q "keel-no-such-bucket" err.txt && grep -q "^help: " err.txt ||
    fail "versions of a missing bucket exited $st: $(cat err.txt)"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["exit_status"] == 3 and d["help"], d' err.json ||
    fail "versions --json of a missing bucket: $(cat err.json)"
st=0; "$KEEL" versions notaurl 2>err.txt || st=$?
[ $st -ne 0 ] && grep -q "'notaurl' is not an s3:// URL" err.txt && grep -q "^help: " err.txt ||
    fail "versions notaurl exited $st: $(cat err.txt)"
"$KEEL" publish i.keel "$URL" --json >pub.json || fail "publish --json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["url"] == sys.argv[2] and d["uploaded_bytes"] >= 0' \
    pub.json "$URL" || fail "publish --json: $(cat pub.json)"
"$KEEL" prune "$URL" --keep 0 2>err.txt && fail "prune --keep 0"
grep -q "help:" err.txt || fail "no help line for --keep 0"
# Another index over the URL: refused (exit 2, dimensions) with a help
# line naming --replace; with --replace it is the URL's index.
python3 - <<'PY'
import random, struct
random.seed(8)
with open("w.fvecs", "wb") as f:
    for _ in range(300):
        f.write(struct.pack("<i", 8) + struct.pack("<8f", *[random.random() for _ in range(8)]))
PY
"$KEEL" build j.keel w.fvecs >/dev/null || fail "build j.keel"
"$KEEL" publish j.keel "$URL" 2>err.txt && fail "publish of another index without --replace"
grep -q "another index" err.txt || fail "no word of another index: $(cat err.txt)"
grep -q "help:.*--replace" err.txt || fail "no help naming --replace: $(cat err.txt)"
"$KEEL" info "$URL" | grep -q "live vectors: *1,997" || fail "info after a refused publish"
"$KEEL" publish j.keel "$URL" --replace >/dev/null || fail "publish --replace"
"$KEEL" info "$URL" | grep -q "live vectors: *300" || fail "info after --replace"
echo "ok   cli.sh: publish (and an unchanged one), info, check, search, versions, prune and --replace on $URL"
