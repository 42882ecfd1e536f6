#!/bin/bash
# rgw-up.sh -- starts a single-node Ceph RADOS Gateway on 127.0.0.1 for the
# object-store tests: one monitor, one memstore OSD (RAM only) and radosgw,
# with every daemon's state, logs and sockets under DIR.
#
#   bash test/objstore/rgw-up.sh DIR
#
# On success DIR/env holds the AWS_* variables of the gateway (source it) and
# the bucket KEEL_TEST_BUCKET exists. On failure every daemon started so far is
# stopped again, the tail of the failing daemon's log is printed and the exit
# status is 1. Stop a started gateway with rgw-down.sh DIR.
#
# Nothing listens on anything but 127.0.0.1: the monitor and the OSD bind to
# public/cluster addr 127.0.0.1, radosgw's beast endpoint is 127.0.0.1:PORT,
# and the script checks the listening sockets of its daemons before it returns.
# Ports are chosen free at start, so several gateways can run side by side.
set -euo pipefail

die() {
    echo "rgw-up: $1" >&2
    echo "help: $2" >&2
    exit 1
}

[ $# -eq 1 ] || die "usage: rgw-up.sh DIR" "DIR is an empty scratch directory (mktemp -d)"
D=$(cd "$1" && pwd) || die "no directory $1" "create it first (mktemp -d)"
HERE=$(cd "$(dirname "$0")" && pwd)

for b in monmaptool ceph-mon ceph-osd ceph radosgw radosgw-admin curl; do
    command -v "$b" >/dev/null 2>&1 ||
        die "$b is not installed" "run 'sh tools/deps.sh' (Debian: radosgw ceph-mon ceph-osd curl)"
done

# A port on 127.0.0.1 that nothing accepts on now.
free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 30000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return
        fi
    done
    die "found no free port on 127.0.0.1" "free some ports in 20000-50000"
}

# On any failure before the end: stop what was started, show why.
started=0
on_exit() {
    local rc=$?
    [ $rc -eq 0 ] && return
    echo "rgw-up: the gateway did not start (see $D/log)" >&2
    for l in "$D"/log/*.log; do
        [ -s "$l" ] || continue
        echo "--- tail of $l" >&2
        tail -n 5 "$l" >&2
    done
    [ $started -eq 1 ] && bash "$HERE/rgw-down.sh" "$D" --keep || true
}
trap on_exit EXIT

t0=$(date +%s.%N)
MON_V2=$(free_port)
MON_V1=$(free_port)
RGW=$(free_port)
FSID=$(cat /proc/sys/kernel/random/uuid)
mkdir -p "$D"/{mon.a,osd.0,run,log}

cat > "$D/ceph.conf" <<CONF
[global]
fsid = $FSID
mon host = [v2:127.0.0.1:$MON_V2,v1:127.0.0.1:$MON_V1]
mon initial members = a
# every daemon binds 127.0.0.1 only (without cluster addr the OSD binds 0.0.0.0)
public addr = 127.0.0.1
cluster addr = 127.0.0.1
auth cluster required = none
auth service required = none
auth client required = none
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon max pg per osd = 1000
mon warn on pool no redundancy = false
# a fairly full disk must not stop the monitor (the default stops it below 5%)
mon data avail crit = 0
osd crush chooseleaf type = 0
osd objectstore = memstore
memstore device bytes = 1073741824
run dir = $D/run
admin socket = $D/run/\$name.asok
log file = $D/log/\$name.log
pid file = $D/run/\$name.pid
mon data = $D/\$name
osd data = $D/\$name
[client.rgw.a]
# radosgw asks for secure mode with cephx by default; with auth none it then
# retries for 300 s
ms mon client mode = crc
# without tcp_nodelay a small GET on a kept-alive connection waits ~40 ms
rgw frontends = beast endpoint=127.0.0.1:$RGW tcp_nodelay=1
CONF

C=(-c "$D/ceph.conf")
started=1
monmaptool --create --addv a "[v2:127.0.0.1:$MON_V2,v1:127.0.0.1:$MON_V1]" \
    --fsid "$FSID" --enable-all-features --set-min-mon-release pacific \
    "$D/monmap" >/dev/null
ceph-mon "${C[@]}" --mkfs -i a --monmap "$D/monmap"
ceph-mon "${C[@]}" -i a
OSD_UUID=$(cat /proc/sys/kernel/random/uuid)
timeout 60 ceph "${C[@]}" osd new "$OSD_UUID" >/dev/null
ceph-osd "${C[@]}" -i 0 --mkfs --osd-uuid "$OSD_UUID" 2>>"$D/log/mkfs.log"
ceph-osd "${C[@]}" -i 0 2>>"$D/log/start.log"
radosgw "${C[@]}" -n client.rgw.a 2>>"$D/log/start.log"

EP="http://127.0.0.1:$RGW"
up=0
for _ in $(seq 1 120); do
    if curl -s -o /dev/null "$EP/"; then up=1; break; fi
    sleep 0.25
done
[ $up -eq 1 ] || die "radosgw did not answer on $EP within 30 s" "read $D/log/client.rgw.a.log"

timeout 60 radosgw-admin "${C[@]}" user create --uid=keel-test --display-name=keel-test \
    --access-key=keeltestkey --secret-key=keeltestsecret >/dev/null

cat > "$D/env" <<ENV
export AWS_ENDPOINT_URL=$EP
export AWS_ACCESS_KEY_ID=keeltestkey
export AWS_SECRET_ACCESS_KEY=keeltestsecret
export AWS_REGION=us-east-1
unset AWS_SESSION_TOKEN
export KEEL_TEST_BUCKET=keel-test
ENV

# The test bucket (the first write also creates RGW's data pools: ~2 s).
code=$(curl -sS -o "$D/log/mkbucket.out" -w '%{http_code}' -X PUT \
    -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' --aws-sigv4 aws:amz:us-east-1:s3 \
    --user keeltestkey:keeltestsecret "$EP/keel-test")
[ "$code" = 200 ] || die "creating bucket keel-test answered $code" "read $D/log/mkbucket.out"

# Every socket our daemons listen on must be on 127.0.0.1.
pids=$(cat "$D"/run/*.pid | tr '\n' '|' | sed 's/|$//')
command -v ss >/dev/null 2>&1 ||
    die "ss is missing: the listening addresses cannot be checked" "sh tools/deps.sh installs it (iproute2)"
wide=$(ss -ltnpH 2>/dev/null | grep -E "pid=($pids)," | awk '{print $4}' | grep -v '^127\.0\.0\.1:' || true)
[ -z "$wide" ] || die "a daemon listens beyond 127.0.0.1: $wide" "check ceph.conf's public/cluster addr"

t1=$(date +%s.%N)
echo "rgw-up: $EP ready in $(awk "BEGIN{printf \"%.1f\", $t1-$t0}") s (state in $D)"
