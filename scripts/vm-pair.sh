#!/usr/bin/env bash
# Boots two guests at once (scripts/vm.sh each), joined by one Ethernet segment, and runs the same
# command in both; the command tells the nodes apart by its environment.
#
#   scripts/vm-pair.sh [--timeout S] [--ports BASE] [vm.sh options...] -- COMMAND...
#
# Each QEMU has hub 0 with a virtio-net NIC (MAC 52:54:00:12:34:0N) and a dgram netdev on the host's
# loopback: node 1 receives on 127.0.0.1:BASE and sends to BASE+1, node 2 the other way round
# (scripts/vm.sh --link). BASE defaults to a free even port from 20000 + 2 * ($$ % 10000) on.
# The guests run COMMAND with
#   QHCA_NODE=1|2  QHCA_SELF_IP=10.7.0.1|10.7.0.2  QHCA_PEER_IP=10.7.0.2|10.7.0.1  QHCA_NET_MAC=...
# and nothing else configured: the command sources scripts/guest-net.sh first to bring its NIC up,
# wait for the peer and meet it (scripts/guest-pair.sh does). A guest whose command ends is gone
# from the segment: the commands must meet (guest-net.sh's qhca_net_barrier, or their own traffic)
# before either ends. The vm.sh options (--cpus, --uars, --append, --iommu, --qhca-port: the HCA's port on
# the segment too, MAC 52:54:00:12:35:0N) go to both guests. --qhca-stream (with --qhca-port) puts the
# two HCAs' ports on a cable of their own instead (vm.sh --qhca-stream: a stream netdev over a
# Unix socket in the pair's log directory, node 1 listening): the faster link for bursts.
#
#   scripts/vm-pair.sh -- bash scripts/guest-net.sh                # boot both, link up, meet, exit
#   scripts/vm-pair.sh --qhca-port -- bash scripts/guest-pair.sh tests "$KO" "$BIN"
#   scripts/vm-pair.sh --qhca-port -- bash scripts/guest-pair.sh bench "$KO" "$BIN"
#
# Each guest's command output goes to /tmp/qhca-vm/pair-PID/vmN.log and is printed live with a
# "[vmN] " prefix; its kernel console, from the first line of its boot, and the command's stderr
# go to vmN.console (a guest that fails prints the console's tail into its log, so that a boot
# that hangs can be read). Exits 0 only if both commands exit 0 (vng hands the guest command's
# exit code back; a guest that does not boot fails too); when one guest fails the other is killed;
# after --timeout S seconds (default 600) both are killed and the exit code is 124.
# Needs KDIR and QEMU like scripts/vm.sh; runs two TCG guests, 2 vCPUs each (--cpus): nothing else should
# run beside them on a small machine.
source "$(dirname "$0")/lib.sh"

usage="usage: scripts/vm-pair.sh [--timeout S] [--ports BASE] [--cpus N] [--uars N] [--append ARGS] [--iommu] [--qhca-port [--qhca-stream]] -- COMMAND..."
timeout=600
base=""
vmopts=()
qhca_stream=""
while [ $# -gt 0 ]; do
	case "$1" in
	--timeout) timeout=$2; shift 2 ;;
	--ports) base=$2; shift 2 ;;
	--link | --nic | --node | --mac) die "vm-pair.sh chooses $1 itself" ;;
	--cpus | --uars | --append) vmopts+=("$1" "$2"); shift 2 ;;
	--iommu | --qhca-port) vmopts+=("$1"); shift ;;
	--qhca-stream) qhca_stream=1; shift ;;
	--) shift; break ;;
	*) die "$usage" ;;
	esac
done
[ $# -gt 0 ] || die "$usage"
[[ $timeout =~ ^[0-9]+$ ]] || die "--timeout wants seconds, not '$timeout'"

# udp_busy PORT: some socket is bound to 127.0.0.1:PORT or to any address's PORT.
udp_busy() {
	ss -Huan "( sport = :$1 )" 2>/dev/null | grep -q .
}
if [ -n "$base" ]; then
	[[ $base =~ ^[0-9]+$ ]] || die "--ports wants a port number, not '$base'"
	if udp_busy "$base" || udp_busy $((base + 1)); then die "UDP port $base or $((base + 1)) is in use"; fi
else
	base=$((20000 + 2 * ($$ % 10000)))
	for _ in $(seq 100); do
		! udp_busy "$base" && ! udp_busy $((base + 1)) && break
		base=$((base + 2))
		[ "$base" -lt 40000 ] || base=20000
	done
	if udp_busy "$base" || udp_busy $((base + 1)); then die "found no two free UDP ports"; fi
fi

dir=/tmp/qhca-vm/pair-$$
mkdir -p "$dir"
[ -z "$qhca_stream" ] || vmopts+=(--qhca-stream "$dir/qhca-port.sock")
declare -A pid tail rc
ports=([1]="$base:$((base + 1))" [2]="$((base + 1)):$base")
step "vm-pair: booting two guests (UDP 127.0.0.1:$base <-> :$((base + 1))), logs in $dir"
for n in 1 2; do
	peer=$((3 - n))
	: >"$dir/vm$n.log"
	# setsid: each guest (vng, QEMU) in a process group of its own, killed as one.
	setsid "$QHCA_ROOT/scripts/vm.sh" "${vmopts[@]}" --console "$dir/vm$n.console" \
		--link "${ports[$n]}" --node "$n" -- \
		env QHCA_NODE="$n" QHCA_SELF_IP="10.7.0.$n" QHCA_PEER_IP="10.7.0.$peer" "$@" \
		</dev/null >"$dir/vm$n.log" 2>&1 &
	pid[$n]=$!
	# The live copy: tail ends by itself once the guest's process is gone.
	tail --pid="${pid[$n]}" -s 0.5 -n +1 -F "$dir/vm$n.log" 2>/dev/null | sed -u "s/^/[vm$n] /" &
	tail[$n]=$!
done

# kill_vm N: the guest's whole process group (vm.sh's vng and its QEMU).
kill_vm() {
	kill -TERM -- "-${pid[$1]}" 2>/dev/null || true
	sleep 2
	kill -KILL -- "-${pid[$1]}" 2>/dev/null || true
}
t0=$(date +%s)
status=0
while [ -z "${rc[1]:-}" ] || [ -z "${rc[2]:-}" ]; do
	for n in 1 2; do
		[ -z "${rc[$n]:-}" ] || continue
		kill -0 "${pid[$n]}" 2>/dev/null && continue
		wait "${pid[$n]}" && rc[$n]=0 || rc[$n]=$?
		if [ "${rc[$n]}" != 0 ]; then
			other=$((3 - n))
			if [ -z "${rc[$other]:-}" ]; then
				echo "vm-pair: vm$n exited with ${rc[$n]}: killing vm$other" >&2
				kill_vm "$other"
				wait "${pid[$other]}" 2>/dev/null && rc[$other]=0 || rc[$other]=$?
				rc[$other]="${rc[$other]} (killed)"
			fi
		fi
	done
	if [ -z "${rc[1]:-}" ] || [ -z "${rc[2]:-}" ]; then
		if [ $(($(date +%s) - t0)) -ge "$timeout" ]; then
			echo "vm-pair: timeout after $timeout s: killing both guests" >&2
			for n in 1 2; do
				[ -n "${rc[$n]:-}" ] && continue
				kill_vm "$n"
				wait "${pid[$n]}" 2>/dev/null || true
				rc[$n]="timeout"
			done
			status=124
		fi
		sleep 1
	fi
done
wait "${tail[1]}" "${tail[2]}" 2>/dev/null || true
el=$(($(date +%s) - t0))
step "vm-pair: vm1 exit ${rc[1]}, vm2 exit ${rc[2]} after $el s (logs: $dir/vm1.log, $dir/vm2.log)"
[ "$status" = 0 ] || exit "$status"
[ "${rc[1]}" = 0 ] && [ "${rc[2]}" = 0 ]
