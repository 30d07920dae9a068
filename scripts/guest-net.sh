#!/usr/bin/env bash
# Runs INSIDE a guest that scripts/vm.sh booted with --link (scripts/vm-pair.sh boots two): brings up
# the guest's NIC on the shared segment, waits until the peer answers ping, then meets the peer
# (qhca_net_barrier: each side connects to the other's TCP port 7701), so that neither guest goes on,
# or ends and takes its QEMU away, before the other has seen it. Source it (it then exports
# QHCA_NET_IF, the interface's name, and defines qhca_net_barrier for later meeting points) or run it
# (it prints QHCA_NET_IF=NAME).
#
#   . scripts/guest-net.sh        or        bash scripts/guest-net.sh
#
# Reads from the environment (scripts/vm.sh and scripts/vm-pair.sh set them):
#   QHCA_NET_MAC   the NIC's MAC (default: 52:54:00:12:34:NN, NN = QHCA_NODE in two hex digits)
#   QHCA_NODE      this guest's number on the segment (default 1)
#   QHCA_SELF_IP   this guest's address (default 10.7.0.QHCA_NODE), a /24
#   QHCA_PEER_IP   the address to ping (none: no wait)
#   QHCA_NET_MTU   the interface's MTU (default 1500; rxe's path MTU is the largest IB MTU that fits:
#                  1500 gives 1024, 4200 or more gives 4096)
#   QHCA_NET_WAIT  seconds to wait for the peer, each step (default 180: the peer may still be booting)
# The NIC is found by MAC: udev names it (enp0s10, ...) and virtme-ng configures nothing on it.

qhca_net_up() {
	local node=${QHCA_NODE:-1} mac want ifc="" f t0 ping
	mac=${QHCA_NET_MAC:-$(printf '52:54:00:12:34:%02x' "$node")}
	want=${QHCA_SELF_IP:-10.7.0.$node}
	# udev may still be renaming the interface: look again for a few seconds.
	for _ in $(seq 50); do
		for f in /sys/class/net/*/address; do
			[ "$(cat "$f" 2>/dev/null)" = "${mac,,}" ] && ifc=$(basename "$(dirname "$f")")
		done
		[ -n "$ifc" ] && break
		sleep 0.1
	done
	if [ -z "$ifc" ]; then
		echo "guest-net: no interface with MAC $mac (booted without scripts/vm.sh --link?)" >&2
		ip -br link >&2
		return 1
	fi
	# The NIC and qhca's port are two interfaces of this guest on one segment: each answers ARP
	# only for its own addresses and asks from them, as a host with two NICs on one LAN must.
	echo 1 >/proc/sys/net/ipv4/conf/all/arp_ignore && echo 2 >/proc/sys/net/ipv4/conf/all/arp_announce ||
		return 1
	ip link set dev "$ifc" mtu "${QHCA_NET_MTU:-1500}" || return 1
	ip addr flush dev "$ifc"
	ip addr add "$want/24" dev "$ifc" || return 1
	ip link set dev "$ifc" up || return 1
	export QHCA_NET_IF=$ifc
	echo "guest-net: $ifc ($mac) is $want/24, mtu $(cat "/sys/class/net/$ifc/mtu")"
	[ -n "${QHCA_PEER_IP:-}" ] || return 0
	if command -v ping >/dev/null; then ping=(ping); else ping=(busybox ping); fi
	t0=$(date +%s)
	until "${ping[@]}" -c 1 -W 1 "$QHCA_PEER_IP" >/dev/null 2>&1; do
		if [ $(($(date +%s) - t0)) -ge "${QHCA_NET_WAIT:-180}" ]; then
			echo "guest-net: $QHCA_PEER_IP did not answer ping within ${QHCA_NET_WAIT:-180} s" >&2
			ip neigh show dev "$ifc" >&2
			return 1
		fi
	done
	echo "guest-net: $QHCA_PEER_IP answers ping (waited $(($(date +%s) - t0)) s)"
	qhca_net_barrier 7701
}

# qhca_net_barrier PORT: returns once the peer has called it with the same PORT too (or fails after
# QHCA_NET_WAIT seconds). Listens on PORT for the peer's one connection while connecting to the
# peer's PORT, again until the peer listens.
qhca_net_barrier() {
	local port=$1 wait=${QHCA_NET_WAIT:-180} t0 lpid
	timeout "$wait" busybox nc -l -p "$port" </dev/null >/dev/null &
	lpid=$!
	t0=$(date +%s)
	until (echo ready >"/dev/tcp/$QHCA_PEER_IP/$port") 2>/dev/null; do
		if [ $(($(date +%s) - t0)) -ge "$wait" ]; then
			kill "$lpid" 2>/dev/null
			echo "guest-net: $QHCA_PEER_IP:$port did not accept a connection within $wait s" >&2
			return 1
		fi
		sleep 0.2
	done
	if ! wait "$lpid"; then
		echo "guest-net: $QHCA_PEER_IP did not connect to port $port within $wait s" >&2
		return 1
	fi
	echo "guest-net: met $QHCA_PEER_IP (port $port) after $(($(date +%s) - t0)) s"
}

if (return 0 2>/dev/null); then
	qhca_net_up
else
	set -euo pipefail
	qhca_net_up
	echo "QHCA_NET_IF=$QHCA_NET_IF"
fi
