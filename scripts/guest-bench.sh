#!/usr/bin/env bash
# Runs INSIDE the bench VM (scripts/bench.sh boots it): the same perftest binaries with the same
# arguments on qhca (Debian's perftest, unmodified, through Debian's libibverbs and qhca's installed
# provider on the RDMA core's device: -d rocep0sN -x 0) and on Soft-RoCE (rdma_rxe bound to lo: -d rxe0 -x 1; each device's own GID index is the only
# argument that differs), server and client in this guest over 127.0.0.1, then the two tables, the
# qhca/rxe ratios and the system calls per post on each side (strace -c -f of the perftest client
# over a fixed number of posts). The workloads are RC (write, send, read) and, beside send_lat and
# send_bw, their shared-receive-queue twins srq_send_lat and srq_send_bw (--use-srq) and UD
# datagrams: ud_send_lat and ud_send_bw, which run perftest with -c UD (skipped on rxe,
# with the reason, if the message is larger than rxe0's active MTU, perftest's limit for UD); for
# send_bw and ud_send_bw the tables also give the server's line (the receiver's view; UD drops a
# datagram that finds no receive posted). qhca-perf stays for what perftest cannot do: write_lat
# with one thread driving both QPs (write_lat*, the device's own round trip). Then
# memory windows: a window bound, written through and invalidated as a loop, rxe-mw-bench (a
# libibverbs program, built by scripts/bench.sh) on qhca's device and on rxe0, and qhca-mw-bench
# (the same loop on the provider's API) on qhca beside them. Then UCX: ucx_perftest's tag latency
# and bandwidth over UCX's rc_verbs on each device.
#
#   guest-bench.sh QHCA_KO BIN [quick]
#
# "quick" divides the iteration counts by 10 (a smoke run of the script itself).
set -u
ko=$1 bin=$2 quick=${3:-}
perf=$bin/qhca-perf
out=/tmp/qhca-vm/bench
mkdir -p "$out"
rm -f "$out"/*

# Workloads: name  qhca-perf mode  perftest binary  bytes  iterations
# Iterations are sized so that t_typical is stable from run to run and the whole run fits in
# a few minutes under TCG on the bench kernel. The 64 B message rates run long (seconds on rxe):
# with 20,000 messages a run lasted 50 ms on qhca and measured warm-up (TCG translating the loop,
# first touches), 0.41 Mpps against 0.66 Mpps over 3,000,000.
workloads=(
	"write_lat write_lat ib_write_lat 8 5000"
	"write_lat write_lat ib_write_lat 64 5000"
	"send_lat send_lat ib_send_lat 8 5000"
	"srq_send_lat srq_send_lat ib_send_lat 8 5000"
	"ud_send_lat ud_send_lat ib_send_lat 8 5000"
	"read_lat read_lat ib_read_lat 8 5000"
	"write_bw write_bw ib_write_bw 64 500000"
	"write_bw write_bw ib_write_bw 65536 1000"
	"write_bw write_bw ib_write_bw 1048576 200"
	"send_bw send_bw ib_send_bw 65536 1000"
	"srq_send_bw srq_send_bw ib_send_bw 65536 1000"
	"ud_send_bw ud_send_bw ib_send_bw 64 200000"
	"ud_send_bw ud_send_bw ib_send_bw 1024 5000"
)
# (The first row must stay write_lat 8: the one-thread run and the reference figure use it. A
# name ending in _bw is a bandwidth row, any other a latency row; a name starting with ud_ is UD,
# one starting with srq_ receives through a shared receive queue: perftest's --use-srq.)
depth=128          # *_bw outstanding requests (-t), both sides
sc_mode=write_bw   # the system-call count: this mode, this size, sc_small and sc_big posts
sc_bytes=64
sc_small=1000
sc_big=3000
# Memory windows: operations per run (types 2 and 1), and the type 2 system-call count's two runs.
mw_n=20000
mw_sc_small=200
mw_sc_big=2000
mwx=$bin/rxe-mw-bench
# Registration: reg-mr-bench (libibverbs, built by scripts/bench.sh) on both sides, this size.
regx=$bin/reg-mr-bench
reg_size=1g
if [ "$quick" = quick ]; then
	for i in "${!workloads[@]}"; do
		set -- ${workloads[$i]}
		workloads[$i]="$1 $2 $3 $4 $(($5 / 10 > 10 ? $5 / 10 : 10))"
	done
	sc_small=200 sc_big=600
	mw_n=2000 mw_sc_small=50 mw_sc_big=500
	reg_size=128m
fi

t0=$(date +%s)
el() { echo "$(($(date +%s) - t0))s"; }
log() { echo "--- [$(el)] $*"; }

# Which kernel, and what could tax one side only: lockdep, and a clocksource the vDSO cannot read
# (every clock read a system call: perftest and qhca-perf both time with rdtsc, but the kernel's
# own timers and rxe's pacing still see it).
clocksource=$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)
lockdep=absent
[ -e /proc/lockdep ] && lockdep=PRESENT
echo "guest: kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {print $2 / 1024 " MiB"}' /proc/meminfo)"
# The kernel arguments that are ours, without virtme-ng's own (virtme_*, its mounts and init).
args=$(tr ' ' '\n' </proc/cmdline | grep -Ev '^(virtme|root|init=|raid=|nr_open=|console=|earlyprintk=|panic=|quiet|loglevel=|ro$)' | tr '\n' ' ')
echo "guest: lockdep $lockdep; clocksource $clocksource; kernel arguments: ${args:-(none)}"
case $(uname -r) in
*-qhca-bench) ;;
*) echo "guest: WARNING: not the bench kernel (scripts/build-kernel.sh bench): numbers are not fair to rxe" ;;
esac
ip link set lo up

# ---- qhca ----
# shellcheck source=guest-load.sh
. "$(dirname "$0")/guest-load.sh"
qhca_insmod "$ko" || { echo "bench: insmod $ko failed"; exit 1; }
compgen -G '/sys/bus/pci/drivers/qhca/0000:*/infiniband_verbs/uverbs*' >/dev/null ||
	{ echo "bench: no qhca device appeared in the RDMA core"; exit 1; }
# The same device as the RDMA core's (as udev named it), reached through Debian's libibverbs and
# the installed provider, nothing preloaded; its netdev up so that GID 0 exists.
ibdev=$(ls /sys/bus/pci/drivers/qhca/*/infiniband/ 2>/dev/null | head -n1)
qhca_links_up || echo "bench: a qhca netdev has no link-local address (GID 0)"

# result_line FILE: the first numeric line after the "#bytes" header, with the header's column
# names made single words so that columns can be found by name.
# col FILE NAME: that column's value in the result line.
col() {
	awk -v want="$2" '
		/#bytes/ {
			h = $0
			gsub(/BW peak/, "BW_peak", h); gsub(/BW average/, "BW_average", h)
			gsub(/% percentile/, "%_percentile", h)
			n = split(h, names, " "); hdr = 1; next
		}
		hdr && $1 ~ /^[0-9]+$/ {
			for (i = 1; i <= n; i++) if (names[i] == want) { print $i; exit }
			exit
		}' "$1"
}

# Ports for perftest: a fresh one per run, so TIME_WAIT never gets in the way.
port=18600

# ptx MODE: perftest's options for a workload besides device, GID, size, count and port: the
# depth of the bandwidth tests (as qhca-perf's -t), -c UD for the UD ones, --use-srq for the
# SRQ ones.
ptx() {
	case $1 in *_bw) echo -n " -t $depth" ;; esac
	case $1 in ud_*) echo -n " -c UD" ;; esac
	case $1 in srq_*) echo -n " --use-srq" ;; esac
}

# The device and GID index of each side.
declare -A dev=([qhca]="-d $ibdev -x 0" [rxe]="-d rxe0 -x 1")

# perftest SIDE MODE BIN BYTES ITERS OUT [CLIENT-PREFIX...]: a server in the background, then the
# client (under CLIENT-PREFIX, e.g. strace) writing its output to OUT; both with MODE's options,
# on SIDE's device.
perftest() {
	local side=$1 m=$2 b=$3 s=$4 n=$5 f=$6
	shift 6
	local p=$port
	# shellcheck disable=SC2206 # the device's words, split on purpose
	local a=(${dev[$side]} -s "$s" -n "$n" -p "$p")
	# shellcheck disable=SC2207 # ptx's words, split on purpose
	a+=($(ptx "$m"))
	port=$((port + 1))
	timeout 300 "$b" "${a[@]}" >"$f.server" 2>&1 &
	local spid=$!
	# The client gives up at once if nobody is listening yet.
	for _ in $(seq 100); do
		ss -ltn 2>/dev/null | grep -q ":$p " && break
		sleep 0.1
	done
	timeout 300 "$@" "$b" "${a[@]}" 127.0.0.1 >"$f" 2>&1
	local rc=$?
	wait "$spid"
	return $rc
}

# perftest_all SIDE: every workload on SIDE, outputs in $out/SIDE.I.
perftest_all() {
	local side=$1 i=0 w
	for w in "${workloads[@]}"; do
		set -- $w
		f=$out/$side.$i
		log "$3 ${dev[$side]} -s $4 -n $5$(ptx "$2") (server &, then client to 127.0.0.1)"
		# A UD message larger than the port's MTU: perftest would refuse it; clamping it would no
		# longer be the workload qhca ran, so the row is left out on rxe, with the reason.
		case $side.$2 in rxe.ud_*)
			if [ -n "$rxe_mtu" ] && [ "$4" -gt "$rxe_mtu" ]; then
				skip[$side.$i]="rxe0's active_mtu is $rxe_mtu bytes, less than the $4-byte UD message"
				echo "skipped: ${skip[$side.$i]}" >"$f"
				echo "    skipped: ${skip[$side.$i]}"
				i=$((i + 1))
				continue
			fi
			;;
		esac
		perftest "$side" "$2" "$3" "$4" "$5" "$f"
		rc=$?
		grep -E '#bytes|^ *[0-9]+ +[0-9]+ ' "$f" | sed 's/^/    /'
		# ib_send_bw's server prints its own line: the receiver's view.
		case $2 in *send_bw) grep -E '^ *[0-9]+ +[0-9]+ ' "$f.server" | sed 's/^/    server: /' ;; esac
		[ $rc = 0 ] || { echo "    (exit code $rc)"; sed 's/^/    client: /' "$f" | tail -5; sed 's/^/    server: /' "$f.server" | tail -5; }
		i=$((i + 1))
	done
}

declare -A skip # SIDE.I: why workload I did not run on SIDE
log "qhca: perftest through Debian's libibverbs and the installed provider, on $ibdev"
# UCX (Debian's ucx_perftest, the same binary on both sides): tag-matching latency and bandwidth
# through UCP over UCX's rc_verbs on port 1 of SIDE's device (rc_v: ud_verbs for the wire-up
# alone), server and client in this guest. UCX_UD_ETH_DGID_CHECK=n on both: UCX before 1.19 drops
# every datagram between IPv4 GIDs on a device other than mlx5 (rxe0 on lo has them), so the
# wire-up would never end on rxe (tests/vm/src/frameworks.rs and scripts/guest-pair.sh say more).
# Results in $out/ucx.SIDE.TEST: ucx_perftest's "Final:" row.
ucx_tests=("tag_lat 8 20000" "tag_bw 65536 5000")
ucx_all() {
	local side=$1 d=$2 t port=18870 f
	for t in "${ucx_tests[@]}"; do
		# shellcheck disable=SC2086 # the test's words, split on purpose
		set -- $t
		local n=$3
		[ "$quick" = quick ] && n=$((n / 10))
		f=$out/ucx.$side.$1
		log "$side: ucx_perftest -t $1 -s $2 -n $n (UCX_TLS=rc_v UCX_NET_DEVICES=$d:1)"
		export UCX_NET_DEVICES=$d:1 UCX_TLS=rc_v UCX_UD_ETH_DGID_CHECK=n UCX_WARN_UNUSED_ENV_VARS=n
		timeout 300 ucx_perftest -t "$1" -s "$2" -n "$n" -p "$port" >"$f.server" 2>&1 &
		local srv=$!
		for _ in $(seq 100); do grep -q "Waiting for connection" "$f.server" && break; sleep 0.1; done
		timeout 300 ucx_perftest -t "$1" -s "$2" -n "$n" -p "$port" 127.0.0.1 >"$f.out" 2>&1 ||
			echo "    (ucx_perftest client failed: $(grep -m1 -E 'ERROR|Fatal' "$f.out"))"
		wait "$srv"
		unset UCX_NET_DEVICES UCX_TLS UCX_UD_ETH_DGID_CHECK UCX_WARN_UNUSED_ENV_VARS
		grep '^Final:' "$f.out" >"$f"
		sed 's/^/    /' "$f"
		port=$((port + 1))
	done
}

perftest_all qhca
ucx_all qhca "$ibdev"

# One thread driving both QPs in turn: the device's own round trip, with no handoff between two
# spinning threads (which on 2 vCPUs over a 2-core host costs most of a two-thread write_lat).
# rxe has no such mode; the table shows it beside the two-thread figure, labelled.
one=$out/qhca.one-thread
log "qhca-perf write_lat -s 8 -n ${workloads[0]##* } --loopback --one-thread"
timeout 300 "$perf" write_lat -s 8 -n "${workloads[0]##* }" --loopback --one-thread >"$one" 2>&1 ||
	echo "    (exit code $?)"
sed 's/^/    /' "$one"

# Memory windows: bind + 8-byte inline WRITE through the window (+ LOCAL_INV for type 2) as a
# loop, each completion polled; then its system calls (type 2) over a short and a longer run.
# The same binary as on rxe (rxe-mw-bench, a libibverbs program) through the installed provider,
# and qhca-mw-bench, the loop on the provider's own API, beside it.
for ty in 2 1; do
	log "rxe-mw-bench -d $ibdev -x 0 --type $ty -n $mw_n"
	timeout 300 "$mwx" -d "$ibdev" -x 0 --type "$ty" -n "$mw_n" >"$out/mw.qhca.$ty" 2>&1 ||
		echo "    (exit code $?)"
	sed 's/^/    /' "$out/mw.qhca.$ty"
	log "qhca-mw-bench --type $ty -n $mw_n"
	timeout 300 "$bin/qhca-mw-bench" --type "$ty" -n "$mw_n" >"$out/mw.provider.$ty" 2>&1 ||
		echo "    (exit code $?)"
	sed 's/^/    /' "$out/mw.provider.$ty"
done
for n in $mw_sc_small $mw_sc_big; do
	log "strace -c -f: rxe-mw-bench -d $ibdev -x 0 --type 2 -n $n"
	timeout 300 strace -c -f -o "$out/strace.mw.qhca.$n" "$mwx" -d "$ibdev" -x 0 --type 2 -n "$n" \
		>"$out/strace.mw.qhca.$n.out" 2>&1 || { echo "    failed:"; tail -5 "$out/strace.mw.qhca.$n.out"; }
done

# Registration of a large region, the same program as on rxe: reg_mr of fresh memory (the pin
# faults every page in) and of memory touched beforehand, two rounds each.
regmr() {
	log "reg-mr-bench -d $1 -s $reg_size -r 2"
	timeout 300 "$regx" -d "$1" -s "$reg_size" -r 2 >"$out/regmr.$2" 2>&1 || echo "    (exit code $?)"
	sed 's/^/    /' "$out/regmr.$2"
}
regmr "$ibdev" qhca

# ---- rxe ----
log "rxe: modprobe rdma_rxe; rdma link add rxe0 type rxe netdev lo"
modprobe rdma_rxe || echo "bench: modprobe rdma_rxe failed"
rdma link add rxe0 type rxe netdev lo || echo "bench: rdma link add failed"
for _ in $(seq 50); do ibv_devices 2>/dev/null | grep -q rxe0 && break; sleep 0.1; done
rdma link show
ibv_devinfo -d rxe0 | grep -E 'hca_id|state|active_mtu|transport' | sed 's/^/    /'
# The port's active MTU in bytes (empty if unknown): perftest refuses a UD message larger.
rxe_mtu=$(ibv_devinfo -d rxe0 2>/dev/null | awk '/active_mtu/ { print $2; exit }')

perftest_all rxe
ucx_all rxe rxe0

# The memory-window loop on rxe0: rxe-mw-bench, the same loop on libibverbs.
for ty in 2 1; do
	f=$out/mw.rxe.$ty
	log "rxe-mw-bench -d rxe0 -x 1 --type $ty -n $mw_n"
	rc=0
	if [ -x "$mwx" ]; then
		timeout 300 "$mwx" -d rxe0 -x 1 --type "$ty" -n "$mw_n" >"$f" 2>&1
		rc=$?
	else
		echo "$mwx is missing (scripts/bench.sh builds it)" >"$f"
	fi
	sed 's/^/    /' "$f"
	[ $rc = 0 ] || echo "    (exit code $rc)"
done
if [ -x "$mwx" ]; then
	for n in $mw_sc_small $mw_sc_big; do
		log "strace -c -f: rxe-mw-bench -d rxe0 -x 1 --type 2 -n $n"
		timeout 300 strace -c -f -o "$out/strace.mw.rxe.$n" "$mwx" -d rxe0 -x 1 --type 2 -n "$n" \
			>"$out/strace.mw.rxe.$n.out" 2>&1 || { echo "    failed:"; tail -5 "$out/strace.mw.rxe.$n.out"; }
	done
fi
regmr rxe0 rxe

# ---- system calls per post ----
# calls FILE: the total of an strace -c summary.
calls() { awk '$NF == "total" { print $4 }' "$1"; }
declare -A sc
for n in $sc_small $sc_big; do
	for side in qhca rxe; do
		log "strace -c -f: ib_$sc_mode ${dev[$side]} -s $sc_bytes -n $n -t $depth (client side)"
		perftest "$side" "$sc_mode" "ib_$sc_mode" "$sc_bytes" "$n" "$out/strace.$side.$n.out" strace -c -f -o "$out/strace.$side.$n" ||
			{ echo "    failed:"; tail -5 "$out/strace.$side.$n.out"; }
		sc[$side.$n]=$(calls "$out/strace.$side.$n")
		echo "    syscalls: ${sc[$side.$n]:-?}; top:"
		sed -n '3,7p' "$out/strace.$side.$n" | sed 's/^/      /'
	done
done

rdma link delete rxe0 2>/dev/null
# On-demand paging (qhca only), while the module is loaded; printed with the tables.
odp_n=256
[ "$quick" = quick ] && odp_n=32
log "qhca-odp-bench -s 64k -n $odp_n -r 1G"
odp_out=$("$bin/qhca-odp-bench" -s 64k -n "$odp_n" -r 1G 2>&1) || odp_out+=$'\nqhca-odp-bench failed'
# The registration cache (qhca only), likewise.
rc_n=1024
[ "$quick" = quick ] && rc_n=128
log "qhca-rcache-bench -s 64k -n $rc_n -b 64"
rc_out=$("$bin/qhca-rcache-bench" -s 64k -n "$rc_n" -b 64 2>&1) || rc_out+=$'\nqhca-rcache-bench failed'
# Push-push messaging (qhca only): the data channel against plain WRITEs on the same QPs.
pp_n=20000
[ "$quick" = quick ] && pp_n=2000
log "qhca-pp-perf -n $pp_n"
pp_out=$("$bin/qhca-pp-perf" -n "$pp_n" 2>&1) || pp_out+=$'\nqhca-pp-perf failed'
# The split network driver: ping and iperf3 through it (host half here, I/O-unit half's
# interface in a namespace of its own), and the same tools over lo, without it.
splitnet_bench() {
	local ns=qhca-ppb dir i
	dir=$(mktemp -d)
	ip netns del "$ns" 2>/dev/null
	ip netns add "$ns" || return 1
	"$bin/qhca-splitnet" iounit --listen 7481 --tun ppbio0 --addr 10.78.0.2/24 --netns "/run/netns/$ns" \
		2>"$dir/io.log" &
	local io=$!
	"$bin/qhca-splitnet" host --connect 127.0.0.1:7481 --tun ppbhost0 --addr 10.78.0.1/24 2>"$dir/host.log" &
	local host=$!
	for i in $(seq 300); do grep -q "connected to the I/O unit" "$dir/host.log" && break; sleep 0.1; done
	grep -q "connected to the I/O unit" "$dir/host.log" || { cat "$dir"/*.log; kill -9 $io $host; return 1; }
	local sec=5 cnt=200
	[ "$quick" = quick ] && sec=2 && cnt=50
	echo "ping -c $cnt -i 0.01 (56 B), rtt min/avg/max/mdev:"
	echo "  split driver: $(ping -c $cnt -i 0.01 -q 10.78.0.2 | awk -F' = ' '/^rtt/ {print $2}')"
	echo "  lo          : $(ping -c $cnt -i 0.01 -q 127.0.0.1 | awk -F' = ' '/^rtt/ {print $2}')"
	echo "iperf3 -t $sec (TCP, one stream), sender / receiver:"
	ip netns exec "$ns" iperf3 -s -1 -p 5301 >/dev/null 2>&1 &
	sleep 1
	echo "  split driver: $(iperf3 -c 10.78.0.2 -p 5301 -t $sec -f m 2>&1 | awk '/sender|receiver/ {printf "%s %s  ", $7, $8}')"
	iperf3 -s -1 -p 5302 >/dev/null 2>&1 &
	sleep 1
	echo "  lo          : $(iperf3 -c 127.0.0.1 -p 5302 -t $sec -f m 2>&1 | awk '/sender|receiver/ {printf "%s %s  ", $7, $8}')"
	kill $host $io 2>/dev/null
	wait $host $io 2>/dev/null
	ip netns del "$ns"
	rm -rf "$dir"
}
log "qhca-splitnet: ping and iperf3 through the split driver and over lo"
sn_out=$(splitnet_bench 2>&1) || sn_out+=$'\nsplit driver bench failed'
rmmod qhca 2>/dev/null

# ---- tables ----
num() { [ -n "$1" ] && [ "$1" != "?" ]; }
# div A B: A / B with two decimals, or "-".
div() { if num "$1" && num "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; else echo -; fi; }
div3() { if num "$1" && num "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; else echo -; fi; }
# perftest's MB/sec is 2^20 bytes per second; qhca-perf's MB/s is 10^6. Tables use 10^6.
mib2mb() { if num "$1"; then awk -v a="$1" 'BEGIN { printf "%.2f", a * 1.048576 }'; else echo "?"; fi; }
v() { local x; x=$(col "$1" "$2"); echo "${x:-?}"; }
fmt='%-12s %8s %6s %13s %13s %13s %12s %14s\n'


declare -A typ bw
# table SIDE: perftest's results on SIDE.
table() {
	local side=$1 i=0 w f
	printf "$fmt" workload bytes iters 't_min[us]' 't_typical[us]' 't_max[us]' 'BW[MB/s]' 'MsgRate[Mpps]'
	for w in "${workloads[@]}"; do
		set -- $w
		f=$out/$side.$i
		if [ -n "${skip[$side.$i]:-}" ]; then
			typ[$side.$i]=- bw[$side.$i]=-
			printf "$fmt" "$1" "$4" - - - - - -
		elif [[ $1 == *_bw ]]; then
			typ[$side.$i]=-
			bw[$side.$i]=$(mib2mb "$(v "$f" 'BW_average[MB/sec]')")
			printf "$fmt" "$1" "$4" "$(v "$f" '#iterations')" - - - "${bw[$side.$i]}" "$(v "$f" 'MsgRate[Mpps]')"
		else
			typ[$side.$i]=$(v "$f" 't_typical[usec]')
			bw[$side.$i]=-
			printf "$fmt" "$1" "$4" "$(v "$f" '#iterations')" "$(v "$f" 't_min[usec]')" "${typ[$side.$i]}" \
				"$(v "$f" 't_max[usec]')" - -
		fi
		i=$((i + 1))
	done
	i=0
	for w in "${workloads[@]}"; do
		set -- $w
		[ -n "${skip[$side.$i]:-}" ] && echo "($1 $4 B: not run on $side: ${skip[$side.$i]})"
		case $1 in *send_bw) echo "($1 $4 B, the server (receiver): $(grep -E '^ *[0-9]+ +[0-9]+ ' "$out/$side.$i.server" 2>/dev/null | head -n1 | tr -s ' '))" ;; esac
		i=$((i + 1))
	done
}
echo
echo "=================================================================================================="
echo "qhca: perftest on $ibdev through Debian's libibverbs and the installed provider (libqhca-rdmav34.so;"
echo "server and client processes in this guest, 127.0.0.1, -x 0)"
table qhca
echo
echo "rxe: perftest on rdma_rxe bound to lo (server and client processes in this guest, 127.0.0.1, -x 1)"
table rxe
echo "(BW is perftest's BW average converted from MiB/s to MB/s = 10^6 B/s; perftest's latency tests"
echo " print no bandwidth. The same binaries with the same arguments on both sides, but -d and -x.)"
echo
echo "qhca-perf write_lat --loopback --one-thread (what perftest cannot do: one thread drives both QPs in"
echo "turn, the device's round trip without the handoff between two spinning processes):"
printf "$fmt" workload bytes iters 't_min[us]' 't_typical[us]' 't_max[us]' 'BW[MB/s]' 'MsgRate[Mpps]'
printf "$fmt" "write_lat*" 8 "$(v "$one" '#iterations')" "$(v "$one" 't_min[usec]')" \
	"$(v "$one" 't_typical[usec]')" "$(v "$one" 't_max[usec]')" "$(v "$one" 'BW[MB/s]')" "$(v "$one" 'MsgRate[Mpps]')"
echo
echo "qhca / rxe   (latency: t_typical ratio, lower is better for qhca; bandwidth: BW ratio, higher is better;"
echo "              the same perftest binary on both)"
rfmt='%-12s %8s %12s %12s %10s\n'
printf "$rfmt" workload bytes qhca rxe qhca/rxe
i=0
for w in "${workloads[@]}"; do
	set -- $w
	if [[ $1 == *_bw ]]; then
		a=${bw[qhca.$i]} b=${bw[rxe.$i]} u=MB/s
	else
		a=${typ[qhca.$i]} b=${typ[rxe.$i]} u=us
	fi
	r="$b $u"
	[ -n "${skip[rxe.$i]:-}" ] && r="not run"
	printf "$rfmt" "$1" "$4" "$a $u" "$r" "$(div "$a" "$b")"
	i=$((i + 1))
done
a=$(v "$one" 't_typical[usec]')
printf "$rfmt" "write_lat*" 8 "$a us" "${typ[rxe.0]} us" "$(div "$a" "${typ[rxe.0]}")"
echo
# The figure the issue measured by hand on a kernel built from virtme-ng's default config (no
# lockdep): how far this boot's rxe is from a plain kernel's.
echo "rxe write_lat 8 B t_typical: ${typ[rxe.0]:-?} us on $(uname -r) (lockdep $lockdep, $clocksource);" \
	"reference on a plain distribution-like kernel: 23.4 us"
echo "clocksource at the end: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
echo
echo "system calls per post: ib_$sc_mode $sc_bytes B, -t $depth, strace -c -f of the perftest client on each side"
sfmt='%-6s %14s %14s %14s %14s %24s\n'
printf "$sfmt" side "calls@n=$sc_small" "calls@n=$sc_big" "total/$sc_small" "total/$sc_big" "marginal ($sc_big-$sc_small)"
for s in qhca rxe; do
	a=${sc[$s.$sc_small]:-?} b=${sc[$s.$sc_big]:-?}
	if num "$a" && num "$b"; then m=$(awk -v a="$a" -v b="$b" -v n=$((sc_big - sc_small)) 'BEGIN { printf "%.3f", (b - a) / n }'); else m=-; fi
	printf "$sfmt" "$s" "$a" "$b" "$(div3 "$a" "$sc_small")" "$(div3 "$b" "$sc_big")" "$m"
done
echo "(total/N counts setup too: open, mmap, verbs commands, the TCP exchange; marginal = the extra"
echo " calls per extra post, i.e. what the data path costs)"
echo "=================================================================================================="

# UCX's Final rows: "Final: iters lat50 lat_avg lat_overall bw_avg bw_overall rate_avg rate_overall".
echo
echo "UCX: ucx_perftest (UCP tag matching, UCX_TLS=rc_v: rc_verbs, ud_verbs for the wire-up), server and client in this guest"
ufmt='%-8s %8s %16s %16s %10s\n'
printf "$ufmt" test bytes qhca rxe qhca/rxe
for t in "${ucx_tests[@]}"; do
	# shellcheck disable=SC2086
	set -- $t
	# lat: the median latency (lower is better: rxe/qhca); bw: the overall MB/s (qhca/rxe).
	if [ "$1" = tag_lat ]; then
		a=$(awk '{ print $3 }' "$out/ucx.qhca.$1" 2>/dev/null) b=$(awk '{ print $3 }' "$out/ucx.rxe.$1" 2>/dev/null)
		printf "$ufmt" "$1" "$2" "${a:-?} us" "${b:-?} us" "$(div "$b" "$a")"
	else
		a=$(awk '{ print $7 }' "$out/ucx.qhca.$1" 2>/dev/null) b=$(awk '{ print $7 }' "$out/ucx.rxe.$1" 2>/dev/null)
		printf "$ufmt" "$1" "$2" "${a:-?} MB/s" "${b:-?} MB/s" "$(div "$a" "$b")"
	fi
done
echo "(tag_lat: the median one-way latency, ucx_perftest's 50.0%ile; tag_bw: its overall MB/s;"
echo " qhca/rxe > 1: qhca faster)"
echo "=================================================================================================="

# Memory windows, side by side: the "mw typeN ops N ops_per_sec X usec_per_op Y" lines of both
# programs; a side whose run failed is "n/a", with the reason (the run's last line) below.
# mwcol FILE NAME: the value after NAME on the "mw" line of FILE.
mwcol() { awk -v want="$2" '$1 == "mw" { for (i = 2; i < NF; i++) if ($i == want) { print $(i + 1); exit } }' "$1" 2>/dev/null; }
# mw_ops N: the operations a run of -n N makes (N / 10, at least 1, of warm-up first).
mw_ops() { echo $(($1 + ($1 / 10 > 0 ? $1 / 10 : 1))); }
echo
echo "memory windows: bind a window over an 8-byte word of the target, 8-byte inline RDMA WRITE through it,"
echo "LOCAL_INV it (type 2B); type 1: bind to the next key (ibv_bind_mw) + WRITE, no invalidation; -n $mw_n"
mfmt='%-24s %13s %12s %13s %12s %10s\n'
printf "$mfmt" window 'qhca[ops/s]' 'qhca[us/op]' 'rxe[ops/s]' 'rxe[us/op]' qhca/rxe
why=()
for ty in 2 1; do
	qo=$(mwcol "$out/mw.qhca.$ty" ops_per_sec) qu=$(mwcol "$out/mw.qhca.$ty" usec_per_op)
	ro=$(mwcol "$out/mw.rxe.$ty" ops_per_sec) ru=$(mwcol "$out/mw.rxe.$ty" usec_per_op)
	po=$(mwcol "$out/mw.provider.$ty" ops_per_sec) pu=$(mwcol "$out/mw.provider.$ty" usec_per_op)
	[ -n "$qo" ] || why+=("qhca type $ty: n/a: $(tail -n1 "$out/mw.qhca.$ty" 2>/dev/null)")
	[ -n "$ro" ] || why+=("rxe type $ty: n/a: $(tail -n1 "$out/mw.rxe.$ty" 2>/dev/null)")
	if [ "$ty" = 2 ]; then w="type 2B: bind+write+inv"; else w="type 1: bind+write"; fi
	printf "$mfmt" "$w" "${qo:-n/a}" "${qu:-n/a}" "${ro:-n/a}" "${ru:-n/a}" "$(div "$qo" "$ro")"
	printf "$mfmt" "  qhca-mw-bench" "${po:-n/a}" "${pu:-n/a}" "" "" ""
done
for l in "${why[@]}"; do echo "  $l"; done
mw_d=$(($(mw_ops "$mw_sc_big") - $(mw_ops "$mw_sc_small")))
mwsc=()
for s in qhca rxe; do
	lo=$(calls "$out/strace.mw.$s.$mw_sc_small" 2>/dev/null) hi=$(calls "$out/strace.mw.$s.$mw_sc_big" 2>/dev/null)
	if num "$lo" && num "$hi"; then
		mwsc+=("$s $(awk -v a="$lo" -v b="$hi" -v n="$mw_d" 'BEGIN { printf "%.3f", (b - a) / n }') (totals $lo, $hi)")
	else
		mwsc+=("$s n/a")
	fi
done
echo "system calls per type 2B operation (strace -c -f, marginal between -n $mw_sc_small and -n $mw_sc_big): ${mwsc[0]}; ${mwsc[1]}"
echo "(the same binary on both sides: rxe-mw-bench, on qhca's device through Debian's libibverbs and"
echo " libqhca-rdmav34.so (-x 0) and on rxe0 (-x 1); qhca-mw-bench is the same loop on the provider's own"
echo " API; both QPs and the window in one process on one"
echo " context (loopback), every request signaled and its completion polled before the next is posted;"
echo " ops/s and us/op are means over the run, after -n/10 warm-up operations; qhca/rxe > 1: qhca faster)"
echo "=================================================================================================="

# Registration, side by side: the mean reg_mr and dereg_mr times of each kind of round.
# regcol FILE KIND FIELD: the mean of FIELD over FILE's "regmr KIND" lines.
regcol() { awk -v k="$2" -v f="$3" '$1 == "regmr" && $2 == k { for (i = 3; i < NF; i++) if ($i == f) { s += $(i + 1); n++ } } END { if (n) printf "%.1f", s / n }' "$1" 2>/dev/null; }
echo
echo "registration: reg-mr-bench -s $reg_size -r 2 (ibv_reg_mr with LOCAL_WRITE | REMOTE_WRITE, then ibv_dereg_mr;"
echo " fresh = anonymous memory never touched, the pin faults it in; touched = every page written first)"
gfmt='%-22s %14s %14s %14s %14s %10s\n'
printf "$gfmt" memory 'qhca reg[ms]' 'qhca dereg' 'rxe reg[ms]' 'rxe dereg' qhca/rxe
for k in fresh touched; do
	qr=$(regcol "$out/regmr.qhca" $k reg_ms) qd=$(regcol "$out/regmr.qhca" $k dereg_ms)
	rr=$(regcol "$out/regmr.rxe" $k reg_ms) rd=$(regcol "$out/regmr.rxe" $k dereg_ms)
	# Time, not rate: > 1 means qhca takes longer.
	printf "$gfmt" "$k $reg_size" "${qr:-n/a}" "${qd:-n/a}" "${rr:-n/a}" "${rd:-n/a}" "$(div "$qr" "$rr")"
done
echo "(qhca/rxe here is a ratio of times: below 1, qhca registers faster)"
echo "=================================================================================================="

# On-demand paging: reg_mr of 1 GiB pinned against on demand, and a write_bw stream of 64 KiB
# messages into a pinned target, an untouched on-demand one and a prefetched one (the fault
# service time, event to RESUME, comes from the device's trace: scripts/bench.sh prints it).
echo
echo "on-demand paging: qhca-odp-bench -s 64k -n $odp_n -r 1G (run before rxe, while qhca was loaded)"
echo "$odp_out"
echo "=================================================================================================="

# The registration cache: a hit against a miss, and write_bw 64 KiB registering around every
# request, through the cache, and from regions registered beforehand.
echo
echo "registration cache: qhca-rcache-bench -s 64k -n $rc_n -b 64 (qhca only, while it was loaded)"
echo "$rc_out"
echo "=================================================================================================="

# Push-push: its data channel, and the split network driver on top of it.
echo
echo "push-push messaging: qhca-pp-perf -n $pp_n (both ends in one process on the first qhca device, one thread each; push ="
echo " copy into the staging ring + WRITE WITH IMMEDIATE into a free element of a 64-element pool, the"
echo " target releasing each delivery, replenishments batched 16 per update; write = plain WRITEs of the"
echo " same size on the same QP and window into one element, no protocol)"
echo "$pp_out"
echo
echo "split network driver (qhca-splitnet: host half's TUN here, I/O unit's TUN in a network namespace,"
echo " MTU 1500) against the same tools over lo (no driver; the kernel's loopback, 64 KiB MTU):"
echo "$sn_out"
echo "=================================================================================================="

# Any splat in the kernel log is worth knowing about.
if dmesg | grep -Eq 'WARNING:|BUG:|Oops|Call Trace:'; then
	echo "bench: the guest kernel log has a splat:"
	dmesg | grep -E -B5 -A20 'WARNING:|BUG:|Oops|Call Trace:' | head -80
fi
echo "guest-bench: done in $(el)"
