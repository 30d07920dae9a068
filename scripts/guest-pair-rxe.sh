#!/usr/bin/env bash
# Runs INSIDE both guests of scripts/vm-pair.sh: Soft-RoCE (rdma_rxe) on each guest's NIC on the
# shared segment, and perftest across the two guests: ib_write_lat -n 1000, then ib_write_bw -s 65536,
# the server on node 1, the client on node 2 (to 10.7.0.1). Exits non-zero if a step fails.
#
#   scripts/vm-pair.sh -- bash scripts/guest-pair-rxe.sh
#
# Environment: what scripts/vm-pair.sh sets (QHCA_NODE, QHCA_SELF_IP, QHCA_PEER_IP), and optionally
# QHCA_NET_MTU (scripts/guest-net.sh; rxe's path MTU follows it: 1500 gives 1024, 4200 or more
# gives 4096), QHCA_LAT_N (default 1000), QHCA_BW_N (default 5000, perftest's own) iterations and
# QHCA_QP_TIMEOUT, perftest's -u (default 18: 4.096 us * 2^18 = 1.07 s). perftest's own default, 14
# (67 ms), is shorter than a round trip between two loaded TCG guests: rxe retransmits what was not
# lost, the duplicates load the link further, and after 7 retries ib_write_bw fails with status 9
# (IBV_WC_RETRY_EXC_ERR).
# perftest runs on CPU 1 and the NIC's interrupts go to CPU 0 (QHCA_PIN=0: neither): perftest
# spins, and rxe's receive path (the interrupt, NAPI, rxe's tasks) then does not queue behind it.
# The GID index (-x) is the one holding this guest's IPv4 address as a RoCEv2 GID (::ffff:a.b.c.d),
# looked up in sysfs: on rxe with IPv6 off it is 1 (0 is the link-local default GID fe80::..., from
# the MAC, which needs IPv6 to be resolved). The client retries while the server is not listening
# yet: perftest's client gives up at once on a refused connection. Node 2 ends with one line per result:
#   pair-rxe: write_lat 2 B t_typical USEC us (...)
#   pair-rxe: write_bw 65536 B BW_average MIB MiB/s = MB MB/s (...)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
node=${QHCA_NODE:?QHCA_NODE is not set: run under scripts/vm-pair.sh}
lat_n=${QHCA_LAT_N:-1000}
bw_n=${QHCA_BW_N:-5000}
qpt=${QHCA_QP_TIMEOUT:-18}
t0=$(date +%s)
log() { echo "--- [$(($(date +%s) - t0))s] node $node: $*"; }
fail() { echo "pair-rxe: FAILED on node $node: $*"; exit 1; }

# shellcheck source=guest-net.sh
. "$here/guest-net.sh" || fail "the network did not come up"

log "modprobe rdma_rxe; rdma link add rxe0 type rxe netdev $QHCA_NET_IF"
modprobe rdma_rxe || fail "modprobe rdma_rxe"
rdma link add rxe0 type rxe netdev "$QHCA_NET_IF" || fail "rdma link add"
# The GID of our IPv4 address: ::ffff:a.b.c.d, as sysfs prints it.
# shellcheck disable=SC2086 # the address's four numbers, split on purpose
gid_want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${QHCA_SELF_IP//./ })
gids=/sys/class/infiniband/rxe0/ports/1/gids
gidx=""
for _ in $(seq 100); do
	for f in "$gids"/*; do
		[ "$(cat "$f" 2>/dev/null)" = "$gid_want" ] && gidx=${f##*/} && break
	done
	[ -n "$gidx" ] && [ "$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)" = "4: ACTIVE" ] && break
	sleep 0.1
done
[ -n "$gidx" ] || fail "no GID $gid_want on rxe0: $(grep -v '^0000:0000:0000:0000:0000:0000:0000:0000$' "$gids"/* 2>/dev/null | tr '\n' ' ')"
type=$(cat "/sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$gidx" 2>/dev/null)
log "rxe0: GID index $gidx ($gid_want, $type); port $(cat /sys/class/infiniband/rxe0/ports/1/state)"
ibv_devinfo -d rxe0 | grep -E 'state|active_mtu|link_layer' | sed 's/^[[:space:]]*/    /'

pin=()
if [ "${QHCA_PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ]; then
	pin=(taskset -c 1)
	irqs=""
	for f in "/sys/class/net/$QHCA_NET_IF/device/../msi_irqs"/*; do
		[ -e "$f" ] || continue
		echo 1 >"/proc/irq/${f##*/}/smp_affinity" 2>/dev/null && irqs+=" ${f##*/}"
	done
	log "perftest on CPU 1; $QHCA_NET_IF's interrupts (${irqs# }) on CPU 0"
fi

# perftest NAME ARGS...: the server on node 1; the client on node 2, again while nobody listens.
out=/tmp/pair-rxe.$$
perftest() {
	local name=$1 i rc
	shift
	if [ "$node" = 1 ]; then
		log "server: $name $*"
		timeout 300 "${pin[@]}" "$name" "$@" >"$out" 2>&1
		rc=$?
		sed 's/^/    /' "$out"
		[ $rc = 0 ] || fail "$name (server) exited with $rc"
		return 0
	fi
	log "client: $name $* $QHCA_PEER_IP"
	for i in $(seq 60); do
		timeout 300 "${pin[@]}" "$name" "$@" "$QHCA_PEER_IP" >"$out" 2>&1
		rc=$?
		[ $rc = 0 ] && break
		grep -q "Couldn't connect to" "$out" || break
		sleep 1
	done
	[ "$i" = 1 ] || echo "    (connected at attempt $i)"
	sed 's/^/    /' "$out"
	[ $rc = 0 ] || fail "$name (client) exited with $rc"
}
# row FILE: perftest's first result row (it starts with the message size).
row() {
	awk '$1 ~ /^[0-9]+$/ && NF >= 4 { print; exit }' "$1"
}

perftest ib_write_lat -d rxe0 -x "$gidx" -u "$qpt" -n "$lat_n"
# #bytes #iterations t_min t_max t_typical ...
[ "$node" = 1 ] || lat=$(row "$out")
perftest ib_write_bw -d rxe0 -x "$gidx" -u "$qpt" -s 65536 -n "$bw_n"
if [ "$node" = 2 ]; then
	# #bytes #iterations BW_peak BW_average MsgRate, perftest's MB/sec being 2^20 B/s.
	bw=$(row "$out")
	# shellcheck disable=SC2086 # perftest's columns, split on purpose
	set -- $lat
	echo "pair-rxe: write_lat ${1:-?} B t_typical ${5:-?} us (rxe <-> rxe, ${2:-?} iterations, active_mtu $(ibv_devinfo -d rxe0 | awk '/active_mtu/ { print $2; exit }'))"
	# shellcheck disable=SC2086
	set -- $bw
	echo "pair-rxe: write_bw ${1:-?} B BW_average ${4:-?} MiB/s = $(awk -v a="${4:-0}" 'BEGIN { printf "%.2f", a * 1.048576 }') MB/s (${2:-?} iterations)"
fi
rm -f "$out"
rdma link delete rxe0 || fail "rdma link delete"
log "done"
