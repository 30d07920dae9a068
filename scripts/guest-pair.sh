#!/usr/bin/env bash
# Runs INSIDE both guests of scripts/vm-pair.sh --qhca-port: qhca and Linux's rxe on each guest,
# one Ethernet segment between the guests, and RDMA across it.
#
#   scripts/vm-pair.sh --qhca-port -- bash scripts/guest-pair.sh tests QHCA_KO BIN
#   scripts/vm-pair.sh --qhca-port -- bash scripts/guest-pair.sh bench QHCA_KO BIN
#
# Each guest brings its NIC up (scripts/guest-net.sh, MTU 9000, so that rxe's path MTU is 4096 as
# qhca's), loads the driver, gives its HCA's port the address 10.7.0.1N/24 (N = its node) on the
# port's netdev (noprefixroute: the netdev carries no IP traffic yet, so the subnet's route stays
# the NIC's), and runs rxe0 on its NIC (10.7.0.N). Then, step by step, node 1 runs the server and node 2 the client
# (again while the server does not listen yet), and the two meet before the next step
# (qhca_net_barrier):
#   tests  every RC opcode byte for byte both ways (qhca-verbs-check wire) qhca <-> qhca,
#          rxe <-> qhca and qhca <-> rxe; ibv_rc_pingpong -c, qhca-pingpong, qhca-perf read_lat
#          and perftest's write latency and bandwidth qhca <-> qhca; ibv_rc_pingpong -c rxe <-> qhca
#          and perftest's write, read and send latency and write bandwidth between rxe and qhca,
#          each both ways (READs with -o 16: rxe offers 128 outstanding READs, qhca 16; see README);
#          rdma_cm across the guests (rping qhca <-> qhca, qhca's client to rxe's server and rxe's
#          client to qhca's server,
#          ucmatose, rdma_server/rdma_client and perftest -R qhca <-> qhca: the CM's MADs on
#          each port's QP1 over the wire);
#          NVMe over RDMA, node 1's nvmet-rdma target and node 2's nvme-rdma host on qhca
#          (fio writes and verifies; fast registration and remote invalidation on the wire);
#          the split network driver (qhca-splitnet) with its halves on the two guests, ping and
#          socat through it. Each guest prints "test pair_NAME ... ok|FAILED" for its side of
#          each step, checks its kernel log, and ends with "pair-suite: N passed, M failed".
#   bench  perftest ib_write_lat and ib_write_bw at 64 B and 64 KiB between qhca <-> qhca,
#          qhca <-> rxe (qhca's client, rxe's server) and rxe <-> rxe on the same two guests, the
#          same through rdma_cm (-R: write_lat 64 B, write_bw 64 KiB) qhca <-> qhca and rxe <-> rxe,
#          one iperf3 TCP stream over the qhca netdevs and over the virtio NICs, and
#          NVMe over RDMA 4 KiB random reads (fio, one job, queue depth 1 and 32) qhca <-> qhca
#          and rxe <-> rxe with their ratio (with QHCA_PORT_LINK=stream, from vm-pair.sh
#          --qhca-stream: the qhca <-> qhca rows alone); node 2 ends with one line per result,
#          "pair-bench: PAIR TEST SIZE VALUE UNIT".
# Both sides run the Debian programs as they are: libibverbs loads qhca's installed provider for
# the RDMA core's qhca device (named as udev named it, rocep0sN), as it loads rxe's for rxe0; our
# tools open that device by default. QHCA_QP_TIMEOUT is perftest's -u (default 18: 1.07 s; a round trip
# between two loaded TCG guests can take longer than perftest's default 67 ms), QHCA_PIN=0 keeps
# perftest off CPU 1 (by default it runs there and the NIC's interrupts go to CPU 0).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:?usage: guest-pair.sh tests|bench QHCA_KO BIN}
ko=${2:?usage: guest-pair.sh tests|bench QHCA_KO BIN}
bin=${3:?usage: guest-pair.sh tests|bench QHCA_KO BIN}
node=${QHCA_NODE:?QHCA_NODE is not set: run under scripts/vm-pair.sh}
peer_nic=$QHCA_PEER_IP
qpt=${QHCA_QP_TIMEOUT:-18}
t0=$(date +%s)
log() { echo "--- [$(($(date +%s) - t0))s] node $node: $*"; }
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "test $1 ... ok"; }
bad() { fail=$((fail + 1)); echo "test $1 ... FAILED: $2"; }
fatal() {
	bad "${2:-pair_setup}" "$1"
	echo "pair-suite: $pass passed, $fail failed"
	exit 1
}
case "$mode" in tests | bench) ;; *) fatal "unknown mode $mode" ;; esac

export QHCA_NET_MTU=9000
# shellcheck source=guest-net.sh
. "$here/guest-net.sh" || fatal "the network did not come up"
# shellcheck source=guest-splat.sh
. "$here/guest-splat.sh"

# The driver and the port's address.
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
# shellcheck source=guest-load.sh
. "$here/guest-load.sh"
qhca_insmod "$ko" || fatal "insmod $ko"
qhca_ip=10.7.0.1$node
# The RDMA core's qhca device and its port's netdev.
qpci=$(ls -d /sys/bus/pci/drivers/qhca/0000:* 2>/dev/null | head -n1)
# qhca_port_up: the port's netdev up with its address, and the route to the peer's port (again
# after the driver was bound anew: its netdev comes back without them).
qhca_port_up() {
	qdev=$(ls "$qpci/infiniband" 2>/dev/null | head -n1)
	qnet=$(ls "$qpci/net" 2>/dev/null | head -n1)
	[ -n "$qdev" ] && [ -n "$qnet" ] || { echo "no RDMA device or netdev for qhca ($qpci)"; return 1; }
	ip link set "$qnet" up && ip addr add "$qhca_ip/24" dev "$qnet" noprefixroute ||
		{ echo "ip addr add $qhca_ip/24 dev $qnet failed"; return 1; }
	# The peer's port is reached through this one: rdma_cm's passive side accepts a connection
	# only from an address routed through the netdev of the GID it came to.
	ip route add "10.7.0.1$((3 - node))/32" dev "$qnet" src "$qhca_ip" ||
		{ echo "ip route add 10.7.0.1$((3 - node))/32 dev $qnet failed"; return 1; }
}
qhca_port_up || fatal "the port of qhca ($qpci) did not come up"
# gid_index DEV IP: the index of IP's RoCEv2 GID in DEV's table, as sysfs shows it.
gid_index() {
	local dev=$1 ip=$2 want f
	# shellcheck disable=SC2086 # the address's four numbers, split on purpose
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${ip//./ })
	for f in "/sys/class/infiniband/$dev/ports/1/gids"/*; do
		[ "$(cat "$f" 2>/dev/null)" = "$want" ] && echo "${f##*/}" && return 0
	done
	return 1
}
# active_gid_index DEV IP: gid_index once DEV's port is active (10 s at most).
active_gid_index() {
	local i
	for _ in $(seq 100); do
		i=$(gid_index "$1" "$2") &&
			[ "$(cat "/sys/class/infiniband/$1/ports/1/state" 2>/dev/null)" = "4: ACTIVE" ] &&
			echo "$i" && return 0
		sleep 0.1
	done
	return 1
}
qhca_gidx=$(active_gid_index "$qdev" "$qhca_ip") || fatal "no active GID for $qhca_ip on $qdev"

modprobe rdma_rxe || fatal "modprobe rdma_rxe"
rdma link add rxe0 type rxe netdev "$QHCA_NET_IF" || fatal "rdma link add rxe0"
rxe_gidx=$(active_gid_index rxe0 "$QHCA_SELF_IP") ||
	fatal "rxe0 has no active port with the GID of $QHCA_SELF_IP"
log "$qdev on $qnet $qhca_ip (GID index $qhca_gidx), rxe0 on $QHCA_NET_IF $QHCA_SELF_IP (GID index $rxe_gidx)"

pin=()
if [ "${QHCA_PIN:-1}" = 1 ] && [ "$(nproc)" -ge 2 ]; then
	pin=(taskset -c 1)
	for f in "/sys/class/net/$QHCA_NET_IF/device/../msi_irqs"/*; do
		[ -e "$f" ] && echo 1 >"/proc/irq/${f##*/}/smp_affinity" 2>/dev/null
	done
fi

# side DEV: the GID index of one end.
side() {
	if [ "$1" = rxe0 ]; then
		echo "$rxe_gidx"
	else
		echo "$qhca_gidx"
	fi
}
out=/tmp/pair.$$
barrier=7710
# step NAME SERVER_DEV CLIENT_DEV PROG ARGS...: node 1 runs PROG -d SERVER_DEV, node 2 runs it
# with -d CLIENT_DEV against node 1's NIC address; "@GIDX" and "@DEV" in ARGS are the end's own
# GID index and device.
# Returns PROG's exit code on this node; its output is in $out.
step() {
	local name=$1 sdev=$2 cdev=$3 prog=$4 dev gidx args=() a rc i
	shift 4
	if [ "$node" = 1 ]; then dev=$sdev; else dev=$cdev; fi
	gidx=$(side "$dev")
	for a in "$@"; do
		a=${a//@GIDX/$gidx}
		args+=("${a//@DEV/$dev}")
	done
	if [ "$node" = 1 ]; then
		log "$name: server: $prog on $dev ${args[*]}"
		timeout 400 "${pin[@]}" "$prog" "${args[@]}" >"$out" 2>&1
		rc=$?
	else
		log "$name: client: $prog on $dev ${args[*]} $peer_nic"
		for i in $(seq 60); do
			timeout 400 "${pin[@]}" "$prog" "${args[@]}" "$peer_nic" >"$out" 2>&1
			rc=$?
			[ $rc = 0 ] && break
			# perftest's words, and ours (qhca-pingpong, qhca-perf) for a server not listening yet.
			# (ucx_perftest: "connect() failed: Connection refused").
			grep -Eq "Couldn't connect to|ECONNREFUSED|connect\(\) failed" "$out" || break
			sleep 1
		done
	fi
	sed 's/^/    /' "$out"
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet after $name)"
	return $rc
}
# check NAME PATTERN STEP-ARGS...: a step that must exit 0 and print PATTERN ("client:PATTERN":
# only the client must print it).
check() {
	local name=$1 pat=$2
	shift 2
	if [ "$node" = 1 ] && [ "${pat#client:}" != "$pat" ]; then pat=""; fi
	pat=${pat#client:}
	if step "$name" "$@" && { [ -z "$pat" ] || grep -Eq -e "$pat" "$out"; }; then
		ok "$name"
	else
		bad "$name" "$(tail -n 3 "$out" | tr '\n' ' ')"
	fi
}

# cm NAME PATTERN PROG "SERVER ARGS" "CLIENT ARGS" [CLIENT_PROG]: a program that connects with
# rdma_cm, node 1 its server, node 2 its client (CLIENT_PROG if given; again while node 1 does
# not listen yet: the peer's CM rejects, or does not answer); both must exit 0, and the client
# print PATTERN. The client reaches the server's qhca address through the route to it, the
# qhca netdev's (or names its source address, which binds it to that address's device).
cm() {
	local name=$1 pat=$2 prog=$3 rc i
	if [ "$node" = 1 ]; then
		log "$name: server: $prog $4"
		# shellcheck disable=SC2086 # the arguments' words, split on purpose
		timeout 120 "${pin[@]}" "$prog" $4 >"$out" 2>&1
		rc=$?
	else
		prog=${6:-$prog}
		log "$name: client: $prog $5"
		for i in $(seq 30); do
			# shellcheck disable=SC2086
			timeout 60 "${pin[@]}" "$prog" $5 >"$out" 2>&1
			rc=$?
			[ $rc = 0 ] && break
			grep -Eq "REJECTED|UNREACHABLE|connect error|rdma_connect|failed to connect|Unable to perform rdma_client" "$out" || break
			sleep 1
		done
	fi
	sed 's/^/    /' "$out" | head -n 40
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet after $name)"
	if [ $rc = 0 ] && { [ "$node" = 1 ] || grep -Eq -e "$pat" "$out"; }; then
		ok "$name"
	else
		bad "$name" "exit $rc: $(tail -n 3 "$out" | tr '\n' ' ')"
	fi
}

wire() { # NAME SERVER_DEV CLIENT_DEV PORT
	check "$1" '^wire: ok: 2 rounds' "$2" "$3" "$bin/qhca-verbs-check" wire "$(
		[ "$node" = 1 ] && echo "$2" || echo "$3")" @GIDX "$4" -r 2 -u 18
}
# perftest PREFIX SERVER_DEV CLIENT_DEV PROG SIZE PORT ARGS...
perftest() {
	local name=$1 sdev=$2 cdev=$3 prog=$4 size=$5 port=$6 dev
	shift 6
	if [ "$node" = 1 ]; then dev=$sdev; else dev=$cdev; fi
	step "$name" "$sdev" "$cdev" "$prog" -d "$dev" -x @GIDX -u "$qpt" -s "$size" -p "$port" "$@"
}
# row: perftest's first result row (it starts with the message size).
row() { awk '$1 ~ /^[0-9]+$/ && NF >= 4 { print; exit }' "$out"; }

# The split network driver across the guests: node 1 runs its I/O-unit half (the LAN side,
# 10.79.0.2), node 2 its host half (10.79.0.1), over qhca's RoCEv2 port; node 2 pings and sends
# a file by socat (the same bytes on both guests, so node 1 checks its sha256), node 1 pings back.
splitnet_pair() {
	local name=pair_splitnet_ping_tcp src=/tmp/pp-pair.src dst=/tmp/pp-pair.dst log=/tmp/pp-pair.log
	local pid ok=1 i
	seq 1 700000 >"$src"
	rm -f "$dst"
	if [ "$node" = 1 ]; then
		"$bin/qhca-splitnet" iounit --listen 18830 --tun ppio0 --addr 10.79.0.2/24 -x "$qhca_gidx" \
			2>"$log" &
		pid=$!
		for i in $(seq 100); do grep -q "interface ppio0 up" "$log" && break; sleep 0.1; done
		timeout 180 socat -u TCP-LISTEN:7630,bind=10.79.0.2,reuseaddr "OPEN:$dst,creat,trunc" || ok=0
		[ "$(sha256sum <"$src")" = "$(sha256sum <"$dst" 2>/dev/null)" ] || ok=0
		ping -c 3 -W 10 10.79.0.1 >"$out" 2>&1 || ok=0
	else
		"$bin/qhca-splitnet" host --connect "$peer_nic:18830" --tun pphost0 --addr 10.79.0.1/24 \
			-x "$qhca_gidx" 2>"$log" &
		pid=$!
		for i in $(seq 600); do grep -q "connected to the I/O unit" "$log" && break; sleep 0.1; done
		ping -c 5 -W 10 10.79.0.2 >"$out" 2>&1 || ok=0
		timeout 180 socat -u "OPEN:$src" TCP:10.79.0.2:7630,retry=100,interval=0.2 || ok=0
	fi
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet after $name)"
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	sed 's/^/    /' "$log" "$out"
	if [ "$ok" = 1 ]; then ok "$name"; else bad "$name" "$(tail -n 2 "$log" | tr '\n' ' ')"; fi
	rm -f "$src" "$dst" "$log"
}

# The Ethernet function: the qhca netdevs of the two guests carry IP as any NICs do (the route
# to the peer's qhca address is theirs): ping at MTU 1500, then at MTU 9000 a ping of 8972 bytes
# that must not be fragmented, and a TCP stream (socat; the receiver compares its sha256 with
# the file's, the same on both guests); the interface's own counters (ip -s link) count it.
eth_pair() {
	local name=pair_eth_ping_tcp peer=10.7.0.1$((3 - node)) src=/tmp/eth-pair.src
	local dst=/tmp/eth-pair.dst ok=1 rx0 rx1
	seq 1 2000000 >"$src"
	rm -f "$dst"
	rx0=$(cat "/sys/class/net/$qnet/statistics/rx_bytes")
	{
		ping -c 3 -W 5 -I "$qnet" "$peer" || ok=0
		ip link set "$qnet" mtu 9000 || ok=0
		barrier=$((barrier + 1))
		qhca_net_barrier "$barrier" >/dev/null || echo "(the peer did not meet after the MTU)"
		ping -c 2 -W 5 -M do -s 8972 -I "$qnet" "$peer" || ok=0
		if [ "$node" = 1 ]; then
			timeout 180 socat -u TCP-LISTEN:7640,bind="$qhca_ip",reuseaddr \
				"OPEN:$dst,creat,trunc" || ok=0
			[ "$(sha256sum <"$src")" = "$(sha256sum <"$dst" 2>/dev/null)" ] ||
				{ echo "the stream's bytes differ"; ok=0; }
		else
			timeout 180 socat -u "OPEN:$src" \
				"TCP:$peer:7640,bind=$qhca_ip,retry=100,interval=0.2" || ok=0
		fi
		rx1=$(cat "/sys/class/net/$qnet/statistics/rx_bytes")
		# Node 1 received the stream, node 2 its acknowledgements (and both the pings).
		if [ "$node" = 1 ] && [ $((rx1 - rx0)) -lt "$(stat -c %s "$src")" ]; then
			echo "$qnet received $((rx1 - rx0)) bytes, less than the stream"
			ok=0
		elif [ $((rx1 - rx0)) -lt 20000 ]; then
			echo "$qnet received $((rx1 - rx0)) bytes"
			ok=0
		fi
		ip -s link show "$qnet"
	} >"$out" 2>&1
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet after $name)"
	sed 's/^/    /' "$out"
	if [ "$ok" = 1 ]; then ok "$name"; else bad "$name" "$(tail -n 3 "$out" | tr '\n' ' ')"; fi
	rm -f "$src" "$dst"
}

# Open MPI over UCX across the guests, qhca to qhca: node 1's mpirun starts one rank there and
# one on node 2, whose Open MPI daemon it launches through node 2's socat listener (the guests
# have no ssh: this is mpirun's rsh agent), the UCX PML forced and UCX allowed qhca's RC transport
# alone between the ranks; qhca-mpi-check checks every word both ways (tests/mpi/mpi_check.c).
# (UCX_UD_ETH_DGID_CHECK: see the tests below.)
mpi_pair() {
	local name=pair_ompi_ucx_qhca_qhca run=/tmp/qhca-rsh-run agent=/tmp/qhca-rsh pid="" ok=1
	local rsh_port=18860
	# The guests boot with one hostname: Open MPI tells its nodes apart by theirs.
	hostname "qhca-node$node"
	: >"$out"
	if [ "$node" = 2 ]; then
		printf '#!/bin/sh\n%s\n%s\n' 'read -r cmd' 'exec sh -c "$cmd"' >"$run"
		chmod +x "$run"
		socat "TCP-LISTEN:$rsh_port,reuseaddr,fork" "EXEC:$run" 2>>"$out" &
		pid=$!
	fi
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet before $name)"
	# AGENT HOST COMMAND...: COMMAND on HOST, until it ends (ignoreeof: the command's line
	# sent, the connection stays until the remote end closes it). On both nodes: mpirun hands
	# the agent's path to node 2's daemon too, which checks that it exists.
	printf '#!/bin/sh\nhost=$1\nshift\nprintf "%%s\\n" "$*" |\n\texec socat STDIN,ignoreeof "TCP:$host:%s"\n' \
		"$rsh_port" >"$agent"
	chmod +x "$agent"
	if [ "$node" = 1 ]; then
		log "$name: mpirun -np 2 --host $QHCA_SELF_IP,$peer_nic $bin/qhca-mpi-check on $qdev"
		OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 300 mpirun \
			--allow-run-as-root -np 2 --host "$QHCA_SELF_IP,$peer_nic" \
			--mca plm_rsh_agent "$agent" --mca oob_tcp_if_include "$QHCA_NET_IF" \
			--mca pml ucx -x UCX_NET_DEVICES="$qdev:1" -x UCX_TLS=rc_v,self \
			-x UCX_IB_GID_INDEX="$qhca_gidx" -x UCX_UD_ETH_DGID_CHECK=n -x UCX_WARN_UNUSED_ENV_VARS=n \
			"$bin/qhca-mpi-check" >>"$out" 2>&1 || ok=0
		# Each rank where it belongs: rank 1 on node 2.
		grep -q '^mpi-check: rank 0 of 2: ok (qhca-node1)' "$out" &&
			grep -q '^mpi-check: rank 1 of 2: ok (qhca-node2)' "$out" || ok=0
	fi
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet after $name)"
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	sed 's/^/    /' "$out" | head -n 60
	if [ "$node" = 2 ]; then
		log "$name: node 1's mpirun ran a rank here (its result is node 1's)"
	elif [ "$ok" = 1 ]; then
		ok "$name"
	else
		bad "$name" "$(tail -n 3 "$out" | tr '\n' ' ')"
	fi
}

# NVMe over RDMA across the guests: node 1 runs the kernel's target (nvmet-rdma) exporting a
# 64 MiB file on tmpfs, node 2 the kernel's host (nvme-rdma) through nvme-cli.
nvme_nqn=nqn.2026-11.io.qhca:pair
nvme_hostid=5ca1ab1e-0000-4000-8000-00000000b0b0
nvme_subsys=/sys/kernel/config/nvmet/subsystems/$nvme_nqn
nvme_port=/sys/kernel/config/nvmet/ports/1
# nvme_target_up ADDR: node 1 exports $nvme_nqn on ADDR:4420.
nvme_target_up() {
	modprobe nvmet && modprobe nvmet-rdma &&
		{ mountpoint -q /sys/kernel/config || mount -t configfs none /sys/kernel/config; } &&
		truncate -s 64M /dev/shm/qhca-nvmet-ns &&
		mkdir "$nvme_subsys" "$nvme_subsys/namespaces/1" "$nvme_port" &&
		echo 1 >"$nvme_subsys/attr_allow_any_host" &&
		echo -n /dev/shm/qhca-nvmet-ns >"$nvme_subsys/namespaces/1/device_path" &&
		echo 1 >"$nvme_subsys/namespaces/1/buffered_io" &&
		echo 1 >"$nvme_subsys/namespaces/1/enable" &&
		echo rdma >"$nvme_port/addr_trtype" && echo ipv4 >"$nvme_port/addr_adrfam" &&
		echo "$1" >"$nvme_port/addr_traddr" && echo 4420 >"$nvme_port/addr_trsvcid" &&
		ln -s "$nvme_subsys" "$nvme_port/subsystems/$nvme_nqn"
}
# nvme_target_down: the target taken apart, its modules unloaded. On the test kernel only once
# the device went (see nvme_pair).
nvme_target_down() {
	rm -f "$nvme_port/subsystems/$nvme_nqn" && echo 0 >"$nvme_subsys/namespaces/1/enable" &&
		rmdir "$nvme_port" "$nvme_subsys/namespaces/1" "$nvme_subsys" &&
		rm -f /dev/shm/qhca-nvmet-ns && modprobe -r nvmet-rdma && modprobe -r nvmet
}
# nvme_ctrl: the host's controller of $nvme_nqn, if any.
nvme_ctrl() {
	local c
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$nvme_nqn" ] && echo "${c##*/}" && return 0
	done
	return 1
}
# nvme_connect TARGET_ADDR HOST_ADDR: node 2 connects, and prints its namespace's block device.
nvme_connect() {
	local c i
	modprobe nvme-rdma &&
		timeout 120 nvme connect -t rdma -a "$1" -w "$2" -s 4420 -n "$nvme_nqn" -I "$nvme_hostid" \
			-q "nqn.2014-08.org.nvmexpress:uuid:$nvme_hostid" --ctrl-loss-tmo=5 \
			--reconnect-delay=1 >&2 || return 1
	for i in $(seq 100); do
		c=$(nvme_ctrl) && [ -b "/dev/${c}n1" ] && [ "$(cat "/sys/class/nvme/$c/transport")" = rdma ] &&
			echo "/dev/${c}n1" && return 0
		sleep 0.2
	done
	echo "no RDMA controller of $nvme_nqn with a namespace" >&2
	return 1
}
# nvme_host_down: node 2's NVMe modules unloaded.
nvme_host_down() {
	local m
	for m in nvme-rdma nvme-fabrics nvme-core; do
		modprobe -r "$m" || { echo "modprobe -r $m failed"; return 1; }
	done
}
nvme_barrier() {
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet in $1)"
}

# The test: qhca to qhca (so the host's fast registrations, the target's RDMA READs and WRITEs
# through them and its SEND_WITH_INVs cross the wire); fio writes random blocks of 4 KiB to
# 256 KiB and verifies each, node 2 disconnects. Then node 2 connects again and node 1 unbinds
# its driver under the live controller: the unbind returns; node 1 takes the target apart (its
# port has no listener left: see tests/vm/src/nvme_rdma.rs for why the target is not unlinked
# first) and binds the driver again, its port's address and route with it, so that node 2's
# reconnections are refused at once and its controller goes (ctrl-loss-tmo 5 s); both unload
# their NVMe modules.
nvme_pair() {
	local name=pair_nvme_rdma_qhca_qhca ok=1 dev="" i bdf=${qpci##*/}
	: >"$out"
	if [ "$node" = 1 ]; then
		nvme_target_up "$q1" >>"$out" 2>&1 || ok=0
		log "$name: target: $nvme_nqn on $q1:4420 ($([ $ok = 1 ] && echo exported || echo failed))"
	fi
	nvme_barrier "$name"
	if [ "$node" = 2 ]; then
		log "$name: host: nvme connect -t rdma -a $q1 -w $q2, fio, disconnect"
		if dev=$(nvme_connect "$q1" "$q2" 2>>"$out"); then
			timeout 600 fio --name=qhca --filename="$dev" --direct=1 --ioengine=libaio \
				--iodepth=8 --rw=randwrite --bsrange=4k-256k --size=32M --verify=crc32c \
				--do_verify=1 --verify_fatal=1 --verify_state_save=0 >>"$out" 2>&1 || ok=0
			grep -Eq 'err= *0' "$out" || ok=0
			timeout 60 nvme disconnect -n "$nvme_nqn" >>"$out" 2>&1 || ok=0
		else
			ok=0
		fi
		log "$name: host: connect again, for the target's unbind"
		nvme_connect "$q1" "$q2" >/dev/null 2>>"$out" || ok=0
	fi
	nvme_barrier "$name"
	if [ "$node" = 1 ]; then
		log "$name: target: unbinding $bdf under the live controller"
		timeout 120 sh -c "echo $bdf >/sys/bus/pci/drivers/qhca/unbind" >>"$out" 2>&1 ||
			{ echo "the unbind of $bdf did not return" >>"$out"; ok=0; }
		{
			nvme_target_down && echo "$bdf" >/sys/bus/pci/drivers/qhca/bind && sleep 2 &&
				qhca_port_up
		} >>"$out" 2>&1 || ok=0
	fi
	nvme_barrier "$name"
	if [ "$node" = 2 ]; then
		for i in $(seq 600); do nvme_ctrl >/dev/null || break; sleep 0.2; done
		nvme_ctrl >/dev/null && { echo "the controller outlived the target's device" >>"$out"; ok=0; }
		nvme_host_down >>"$out" 2>&1 || ok=0
	fi
	nvme_barrier "$name"
	sed 's/^/    /' "$out" | tail -n 40
	if [ "$ok" = 1 ]; then ok "$name"; else bad "$name" "$(tail -n 3 "$out" | tr '\n' ' ')"; fi
}

# The bench (the bench kernel: no lockdep): LABEL TARGET_ADDR HOST_ADDR: node 2 fills the
# namespace, then reads 4 KiB blocks at random for 10 s, one at a time and 32 at a time; it
# adds "pair-bench: LABEL nvme randread 4k qdN IOPS X (lat mean Y us)" to results and keeps
# the IOPS in nvme_iops[LABEL qdN].
declare -A nvme_iops
nvme_bench() {
	local label=$1 dev qd f
	: >"$out"
	[ "$node" = 1 ] && { nvme_target_up "$2" >>"$out" 2>&1 || log "$label nvme: no target"; }
	nvme_barrier "$label nvme"
	if [ "$node" = 2 ] && dev=$(nvme_connect "$2" "$3" 2>>"$out"); then
		fio --name=fill --filename="$dev" --direct=1 --rw=write --bs=1M --size=64M >>"$out" 2>&1
		for qd in 1 32; do
			# Terse v3: field 8 the read IOPS, field 40 the mean total latency (us).
			IFS=';' read -ra f < <(fio --name=rr --filename="$dev" --direct=1 --ioengine=libaio \
				--rw=randread --bs=4k --iodepth=$qd --size=64M --runtime=10 --time_based \
				--output-format=terse 2>>"$out" | grep '^3;')
			nvme_iops["$label qd$qd"]=${f[7]:-0}
			results+=("pair-bench: $label nvme randread 4k qd$qd IOPS ${f[7]:-?} (lat mean ${f[39]:-?} us)")
		done
		timeout 60 nvme disconnect -n "$nvme_nqn" >>"$out" 2>&1
		nvme_host_down >>"$out" 2>&1
	elif [ "$node" = 2 ]; then
		log "$label nvme: no controller: $(tail -n 2 "$out" | tr '\n' ' ')"
	fi
	nvme_barrier "$label nvme"
	[ "$node" = 1 ] && { nvme_target_down >>"$out" 2>&1 || log "$label nvme: target not taken apart"; }
	nvme_barrier "$label nvme"
}

if [ "$mode" = tests ]; then
	wire pair_wire_qhca_qhca "$qdev" "$qdev" 18800
	wire pair_wire_rxe_qhca rxe0 "$qdev" 18801
	wire pair_wire_qhca_rxe "$qdev" rxe0 18802
	check pair_rc_pingpong_qhca_qhca '^200 iters in' "$qdev" "$qdev" ibv_rc_pingpong \
		-d @DEV -g @GIDX -c -s 4096 -n 200 -p 18803
	# Our own tools across the guests (-x as perftest's; the exchange on -p).
	check pair_qhca_pingpong '^200 iters in' "$qdev" "$qdev" "$bin/qhca-pingpong" \
		-x @GIDX -s 4096 -n 200 -p 18805
	check pair_qhca_perf_read_lat 'client:^ +8 +300 ' "$qdev" "$qdev" "$bin/qhca-perf" read_lat \
		-x @GIDX -s 8 -n 300 -p 18806
	for t in "ib_write_lat 8 -n 500" "ib_write_bw 65536 -n 200"; do
		# shellcheck disable=SC2086 # the test's words, split on purpose
		set -- $t
		if perftest "pair_$1_qhca_qhca" "$qdev" "$qdev" "$1" "$2" 18804 "${@:3}" && [ -n "$(row)" ]; then
			ok "pair_$1_qhca_qhca"
		else
			bad "pair_$1_qhca_qhca" "$(tail -n 3 "$out" | tr '\n' ' ')"
		fi
	done
	# rxe's programs on one guest, the same programs on qhca on the other.
	check pair_rc_pingpong_rxe_qhca '^200 iters in' rxe0 "$qdev" ibv_rc_pingpong \
		-d @DEV -g @GIDX -c -s 4096 -n 200 -p 18807
	port=18808
	for t in "ib_write_lat 8 -n 300" "ib_read_lat 8 -n 300 -o 16" "ib_send_lat 8 -n 300" \
		"ib_write_bw 65536 -n 100"; do
		# shellcheck disable=SC2086 # the test's words, split on purpose
		set -- $t
		for dir in "rxe0 $qdev rxe_qhca" "$qdev rxe0 qhca_rxe"; do
			# shellcheck disable=SC2086
			set -- $dir "$@"
			if perftest "pair_$4_$3" "$1" "$2" "$4" "$5" "$port" "${@:6}" &&
				{ [ "$node" = 1 ] || [ -n "$(row)" ]; }; then
				ok "pair_$4_$3"
			else
				bad "pair_$4_$3" "$(tail -n 3 "$out" | tr '\n' ' ')"
			fi
			shift 3
			port=$((port + 1))
		done
	done
	# rdma_cm across the guests: the CM's MADs on QP1 over the wire, qhca to qhca, and qhca's
	# client to rxe's server and rxe's client to qhca's server; rping validates every ping (-V)
	# and the client shows them (-v).
	q1=10.7.0.11 q2=10.7.0.12 rping_args="-C 10 -S 1000 -V"
	cm pair_rping_qhca_qhca '^ping data: rdma-ping-9: ' rping "-s -a $q1 -p 18840 $rping_args" \
		"-c -I $q2 -a $q1 -p 18840 $rping_args -v"
	cm pair_rping_rxe_qhca '^ping data: rdma-ping-9: ' rping "-s -a 10.7.0.1 -p 18841 $rping_args" \
		"-c -I $q2 -a 10.7.0.1 -p 18841 $rping_args -v"
	# rxe's client (node 2's NIC address) to qhca's server. rdma_cm's passive side takes a
	# request only from an address routed through the netdev of the GID it came to: node 1
	# routes node 2's NIC address through its qhca port's netdev for the test (the port's
	# Ethernet function carries the replies to that NIC, on the same segment), and node 2 routes
	# node 1's qhca address through its NIC, where rxe0 is, so that its rdma_cm picks rxe0.
	if [ "$node" = 1 ]; then
		ip route add 10.7.0.2/32 dev "$qnet" src "$qhca_ip"
	else
		ip route replace "$q1/32" dev "$QHCA_NET_IF" src "$QHCA_SELF_IP"
	fi
	cm pair_rping_qhca_rxe '^ping data: rdma-ping-9: ' rping "-s -a $q1 -p 18844 $rping_args" \
		"-c -I 10.7.0.2 -a $q1 -p 18844 $rping_args -v"
	if [ "$node" = 1 ]; then
		ip route del 10.7.0.2/32 dev "$qnet"
	else
		ip route replace "$q1/32" dev "$qnet" src "$qhca_ip"
	fi
	cm pair_ucmatose_qhca_qhca '^test complete' ucmatose "-b $q1 -c 2 -C 20 -S 1000" \
		"-s $q1 -b $q2 -c 2 -C 20 -S 1000"
	cm pair_rdma_server_client_qhca_qhca '^rdma_client: end 0' rdma_server "-s $q1 -p 18842" \
		"-s $q1 -p 18842" rdma_client
	cm pair_ib_write_lat_R_qhca_qhca '^ *64 +200 ' ib_write_lat \
		"-d $qdev -R -s 64 -n 200 -u $qpt -p 18843" "-d $qdev -R -s 64 -n 200 -u $qpt -p 18843 $q1"
	# UCX across the guests, qhca to qhca: ucx_perftest over UCX's rc_verbs (ud_verbs for the
	# wire-up alone: UCX's rc_v), then ud_verbs alone; and Open MPI over UCX. On the ports'
	# IPv4 GIDs, with UCX's check of a datagram's destination GID off: UCX before 1.19 takes a
	# datagram's address family from wc.sl, where only mlx5 puts it, and drops every IPv4
	# datagram on other devices, rxe as qhca (UCX's 7de57ad9f9; Debian's UCX is 1.13).
	port=18850
	for tls in rc_v ud_v; do
		for t in tag_lat tag_bw; do
			check "pair_ucx_${tls}_${t}_qhca_qhca" 'client:^Final: +1000 ' "$qdev" "$qdev" env \
				UCX_NET_DEVICES=@DEV:1 UCX_TLS=$tls UCX_IB_GID_INDEX=@GIDX UCX_UD_ETH_DGID_CHECK=n \
				UCX_WARN_UNUSED_ENV_VARS=n ucx_perftest -t $t -n 1000 -p $port
			port=$((port + 1))
		done
	done
	mpi_pair
	splitnet_pair
	nvme_pair
	eth_pair
	qhca_kernel_log_case pair_kernel_log_clean
	"$bin/qhca-info" | grep -E 'tx_frames|rx_frames|rx_bad_icrc|rx_malformed|rx_not_ours' | sed 's/^ */    /'
	echo "pair-suite: $pass passed, $fail failed"
	rm -f "$out"
	[ "$fail" = 0 ]
	exit
fi

# bench: node 2 reports. On a cable of their own (vm-pair.sh --qhca-stream: QHCA_PORT_LINK=stream)
# the qhca ports reach no rxe: the qhca<->qhca rows alone, labelled with the link.
results=()
pairs=("$qdev $qdev qhca<->qhca" "rxe0 $qdev qhca<->rxe" "rxe0 rxe0 rxe<->rxe")
stream=""
if [ "${QHCA_PORT_LINK:-}" = stream ]; then
	stream=1
	pairs=("$qdev $qdev qhca<->qhca(stream)")
fi
for pair in "${pairs[@]}"; do
	# shellcheck disable=SC2086
	set -- $pair
	sdev=$1 cdev=$2 label=$3
	for t in "ib_write_lat 64 -n 1000" "ib_write_lat 65536 -n 300" \
		"ib_write_bw 64 -n 5000" "ib_write_bw 65536 -n 1000"; do
		# shellcheck disable=SC2086
		set -- $t
		prog=$1 size=$2
		perftest "$label $prog $size" "$sdev" "$cdev" "$prog" "$size" 18820 "${@:3}" ||
			log "$label $prog $size B failed"
		[ "$node" = 2 ] || continue
		# lat: #bytes #iterations t_min t_max t_typical ...; bw: #bytes #iter BW_peak BW_average ...
		# shellcheck disable=SC2046
		set -- $(row) "" "" "" "" ""
		case "$prog" in
		ib_write_lat) results+=("pair-bench: $label $prog $size B t_typical ${5:-?} us (t_min ${3:-?} us)") ;;
		*) results+=("pair-bench: $label $prog $size B BW_average ${4:-?} MiB/s (msg rate ${5:-?} Mpps)") ;;
		esac
	done
done
# perftest through rdma_cm (-R): the kernel's CM makes the connection (QP1's MADs over the
# wire), then the same data path; qhca to qhca and rxe to rxe (the rxe ports' addresses are the
# NICs'). Node 1 starts the server and waits until its cm_id listens (the RDMA core's resource
# view) before the client starts: a request that finds no listener is rejected, and perftest's
# client does not always survive that path (a first version that retried the client on a reject
# saw it crash in librdmacm). LABEL DEV SERVER_ADDR PROG SIZE N PORT.
cm_perf() {
	local label=$1 dev=$2 addr=$3 prog=$4 size=$5 n=$6 port=$7 pid=""
	local args=(-d "$dev" -R -s "$size" -n "$n" -u "$qpt" -p "$port")
	: >"$out"
	if [ "$node" = 1 ]; then
		timeout 120 "${pin[@]}" "$prog" "${args[@]}" >"$out" 2>&1 &
		pid=$!
		for _ in $(seq 100); do
			rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN .*:$port " && break
			sleep 0.1
		done
	fi
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet before $label $prog -R)"
	if [ "$node" = 2 ]; then
		timeout 60 "${pin[@]}" "$prog" "${args[@]}" "$addr" >"$out" 2>&1 ||
			log "$label $prog -R $size B failed: $(tail -n 2 "$out" | tr '\n' ' ')"
	else
		wait "$pid" || log "$label $prog -R $size B: the server failed: $(tail -n 2 "$out" | tr '\n' ' ')"
	fi
	sed 's/^/    /' "$out" | head -n 40
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet after $label $prog -R)"
	[ "$node" = 2 ] || return 0
	# shellcheck disable=SC2046
	set -- $(row) "" "" "" "" ""
	case "$prog" in
	*_lat) results+=("pair-bench: $label $prog -R $size B t_typical ${5:-?} us (t_min ${3:-?} us)") ;;
	*) results+=("pair-bench: $label $prog -R $size B BW_average ${4:-?} MiB/s (msg rate ${5:-?} Mpps)") ;;
	esac
}
q1=10.7.0.11 q2=10.7.0.12
port=18870
for t in "ib_write_lat 64 1000" "ib_write_bw 65536 1000"; do
	# shellcheck disable=SC2086 # the test's words, split on purpose
	set -- $t
	cm_perf "qhca<->qhca${stream:+(stream)}" "$qdev" "$q1" "$1" "$2" "$3" $port
	[ -n "$stream" ] || cm_perf "rxe<->rxe" rxe0 10.7.0.1 "$1" "$2" "$3" $((port + 1))
	port=$((port + 2))
done
# Ethernet: one TCP stream for 10 s (iperf3) over the qhca netdevs (the port's Ethernet function)
# and over the guests' virtio NICs (what rxe rides on). LABEL SERVER_ADDR CLIENT_ADDR PORT.
eth_perf() {
	local label=$1 sa=$2 ca=$3 port=$4 pid=""
	: >"$out"
	if [ "$node" = 1 ]; then
		timeout 60 iperf3 -s -1 -B "$sa" -p "$port" >"$out" 2>&1 &
		pid=$!
	fi
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet before $label iperf3)"
	if [ "$node" = 2 ]; then
		for _ in $(seq 20); do
			timeout 60 iperf3 -c "$sa" -B "$ca" -p "$port" -t 10 -f m >"$out" 2>&1 && break
			sleep 0.5
		done
		results+=("pair-bench: $label iperf3 TCP 10 s: $(awk '/sender|receiver/ { printf "%s %s %s  ", $NF, $7, $8 }' "$out")")
	else
		wait "$pid"
	fi
	barrier=$((barrier + 1))
	qhca_net_barrier "$barrier" >/dev/null || echo "    (the peer did not meet after $label iperf3)"
}
eth_perf "qhca netdev${stream:+(stream)}" "$q1" "$q2" 5301
if [ -n "$stream" ]; then
	printf '%s\n' "${results[@]}"
	rm -f "$out"
	exit 0
fi
eth_perf "virtio NIC" 10.7.0.1 10.7.0.2 5302
# NVMe over RDMA, qhca to qhca and rxe to rxe (the rxe ports' addresses are the NICs').
nvme_bench "qhca<->qhca" "$q1" "$q2"
nvme_bench "rxe<->rxe" 10.7.0.1 10.7.0.2
if [ "$node" = 2 ]; then
	for qd in qd1 qd32; do
		results+=("pair-bench: nvme randread 4k $qd IOPS qhca/rxe $(awk -v a="${nvme_iops["qhca<->qhca $qd"]:-0}" \
			-v b="${nvme_iops["rxe<->rxe $qd"]:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }')")
	done
fi
printf '%s\n' "${results[@]}"
rm -f "$out"
