#!/bin/bash
# rgw-down.sh -- stops the gateway rgw-up.sh started in DIR: signals each
# daemon by the pid in its pid file (radosgw, the OSD, the monitor), waits up
# to 10 s for each to exit, kills what is left, then removes DIR.
#
#   bash test/objstore/rgw-down.sh DIR [--keep]    (--keep: leave DIR)
set -u
D=${1:?usage: rgw-down.sh DIR [--keep]}
[ -d "$D" ] || exit 0
t0=$(date +%s.%N)
ours=""
for n in client.rgw.a osd.0 mon.a; do
    f="$D/run/$n.pid"
    [ -f "$f" ] || continue
    p=$(cat "$f")
    # only a ceph daemon of ours: its command line names our ceph.conf
    grep -qa "$D/ceph.conf" "/proc/$p/cmdline" 2>/dev/null || continue
    kill "$p" 2>/dev/null && ours="$ours $p"
done
# the state is in memory and thrown away: no order to keep while they exit
for p in $ours; do
    for _ in $(seq 1 100); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$p" 2>/dev/null || true
done
t1=$(date +%s.%N)
echo "rgw-down: stopped in $(awk "BEGIN{printf \"%.1f\", $t1-$t0}") s"
[ "${2:-}" = --keep ] || rm -rf "$D"
