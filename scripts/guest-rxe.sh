#!/usr/bin/env bash
# Guest side of `scripts/bench.sh --kernels`: Soft-RoCE alone (rdma_rxe on lo, Debian's perftest,
# server and client in this guest over 127.0.0.1, -x 1), the bench's rxe workloads, ROUNDS times
# (default 2). One line per result: "rxe-kernel: ROUND WORKLOAD VALUE UNIT", t_typical for latency,
# the message rate for bandwidth. Runs on any kernel with rxe built in or as a module.
#
#   guest-rxe.sh [ROUNDS]
set -u
rounds=${1:-2}
lockdep=absent
[ -e /proc/lockdep ] && lockdep=PRESENT
echo "guest: kernel $(uname -r) ($(uname -v)); lockdep $lockdep;" \
	"clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
ip link set lo up
modprobe rdma_rxe 2>/dev/null # built in on the plain kernel
rdma link add rxe0 type rxe netdev lo || { echo "rxe-kernel: rdma link add failed"; exit 1; }
for _ in $(seq 50); do ibv_devices 2>/dev/null | grep -q rxe0 && break; sleep 0.1; done

port=18900
# run TOOL ARGS...: server in the background, then the client; prints the client's result line.
run() {
	local tool=$1
	shift
	timeout 300 "$tool" -d rxe0 -x 1 -p "$port" "$@" >/dev/null 2>&1 &
	for _ in $(seq 100); do
		ss -ltn 2>/dev/null | grep -q ":$port " && break
		sleep 0.1
	done
	timeout 300 "$tool" -d rxe0 -x 1 -p "$port" "$@" 127.0.0.1 2>&1 | grep -A1 '#bytes' | tail -n1
	wait
	port=$((port + 1))
}

for r in $(seq "$rounds"); do
	for m in write_lat send_lat read_lat; do
		# perftest's latency line: bytes iters t_min t_max t_typical ...
		echo "rxe-kernel: $r ${m}_8 $(run "ib_$m" -s 8 -n 5000 | awk '{ print $5 }') us"
	done
	# The bandwidth line: bytes iters BW_peak BW_average MsgRate.
	echo "rxe-kernel: $r write_bw_64 $(run ib_write_bw -s 64 -n 200000 -t 128 | awk '{ print $5 }') Mpps"
done
