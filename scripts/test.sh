#!/usr/bin/env bash
# The README's test command: installs and builds whatever is missing, then runs
#   1. host tests (cargo test: ABI layout and drift, provider logic),
#   2. the device model from outside (qtest protocol against our QEMU),
#   3. the VM suite (our kernel + QEMU + driver + provider, under virtme-ng), twice: as it is
#      and behind the guest IOMMU,
#   4. the RoCEv2 wire in one more VM (qhca-vmtest --wire): Linux's rxe on a virtio-net NIC and
#      three qhca ports on one Ethernet segment, the second losing, duplicating and reordering 1 %
#      of its frames each, the third (rxe's lossy peer: tests/vm/src/wire.rs says why) losing and
#      duplicating only; the first port's netdev carrying IP, and its link pulled out and put
#      back from the host (vm.sh --link-control); then the capture of its frames, checked from outside
#      with tshark and an ICRC of our own (scripts/check-capture.py),
#   5. rdma-core's own test suite (run_tests.py, built by scripts/build-rdma-core.sh) on qhca and
#      on rxe in one guest, both counts printed; on qhca every test passes or skips but those
#      tests/rdma-core/known-failures.txt lists with their reason; then on qhca behind the IOMMU,
#   6. two guests on one segment (scripts/vm-pair.sh --qhca-port, scripts/guest-pair.sh tests):
#      every RC opcode both ways qhca <-> qhca, rxe <-> qhca and qhca <-> rxe across the guests,
#      ibv_rc_pingpong and perftest qhca <-> qhca.
# It always ends with a summary, each stage's counts and time, and the closing line
# "total: N passed, M failed", and exits non-zero on any failure. A stage that crashes, hangs
# (every guest runs under a time limit) or prints no result counts as a failure; a guest that
# fails prints the tail of its kernel console (kept in ~/.cache/qhca/logs/STAGE.console). Each
# failed stage's failures, the end of its log and of its console are printed again right above
# the summary, where a CI that keeps only the tail of the output still shows them.
source "$(dirname "$0")/lib.sh"

logs=$QHCA_CACHE/logs
mkdir -p "$logs"
declare -A P F T
stages=()
summary_done=0

# The closing summary: printed once, at the end or when anything stops the script early.
summary() {
	[ "$summary_done" = 0 ] || return 0
	summary_done=1
	local tp=0 tf=0 s
	echo
	# What failed, again, right above the counts: CI keeps only the tail of the output.
	for s in "${stages[@]}"; do
		[ "${F[$s]:-1}" != 0 ] && [ -f "$logs/$s.log" ] || continue
		echo "--- $s failed; its failures (log: $logs/$s.log):"
		tr -d '\r' <"$logs/$s.log" | grep -aE 'FAILED|panicked|^qhca: ' | tail -n 20 | sed 's/^/  /'
		echo "--- the last 10 lines of $s's log:"
		tr -d '\r' <"$logs/$s.log" | tail -n 10 | sed 's/^/  /'
		[ -f "$logs/$s.console" ] || continue
		echo "--- the last 30 lines of $s's kernel console ($logs/$s.console):"
		tail -n 30 "$logs/$s.console" | sed 's/^/  | /'
	done
	for s in "${stages[@]}"; do
		printf '%-9s %4d passed, %d failed  (%dm%02ds)\n' "$s:" "${P[$s]:-0}" "${F[$s]:-1}" \
			$((${T[$s]:-0} / 60)) $((${T[$s]:-0} % 60))
		tp=$((tp + ${P[$s]:-0}))
		tf=$((tf + ${F[$s]:-1}))
	done
	local el=$(($(date +%s) - QHCA_T0))
	step "done in $((el / 60))m$((el % 60))s"
	echo "total: $tp passed, $tf failed"
}
trap 'rc=$?; summary; [ "$rc" != 0 ] || rc=$((${tf_final:-0} != 0)); exit $rc' EXIT
trap 'exit 130' INT TERM

# stage NAME CMD...: runs CMD with its output in the log and on the terminal, and times it. The
# counts are the caller's to fill in (P, F); until then the stage counts as one failure.
stage() {
	local name=$1 t0 rc=0
	shift
	stages+=("$name")
	P[$name]=0 F[$name]=1
	step "$name: $*"
	t0=$(date +%s)
	"$@" 2>&1 | tee "$logs/$name.log"
	rc=${PIPESTATUS[0]}
	T[$name]=$(($(date +%s) - t0))
	[ "$rc" = 0 ] || echo "qhca: stage $name exited with $rc" >&2
	return "$rc"
}

# counts NAME P F: the stage's counts; a stage that exited non-zero with no failure counted gets
# one.
counts() {
	P[$1]=$2 F[$1]=$3
}

# cargo_counts NAME RC: sums cargo's "test result:" lines; a failed run (RC) with nothing failed
# in them (a build error, a crash) is one failure.
cargo_counts() {
	local p f
	p=$(grep -aE '^test result:' "$logs/$1.log" | awk '{s += $4} END {print s + 0}')
	f=$(grep -aE '^test result:' "$logs/$1.log" | awk '{s += $6} END {print s + 0}')
	[ "$2" = 0 ] || [ "$f" != 0 ] || f=1
	counts "$1" "$p" "$f"
}

# --- build -----------------------------------------------------------------------------------
stages+=(build)
P[build]=0 F[build]=1
t0=$(date +%s)
source "$QHCA_ROOT/scripts/build-all.sh"
RDMA_CORE=$("$QHCA_ROOT/scripts/build-rdma-core.sh" | tail -n1)
T[build]=$(($(date +%s) - t0))
counts build 1 0
set +e
set -o pipefail
cd "$QHCA_ROOT"

# --- host and device-model tests ----------------------------------------------------------------
stage host cargo test --profile ci --no-fail-fast
cargo_counts host $?
QHCA_QEMU=$QEMU stage qtest cargo test --profile ci --no-fail-fast -p qhca-qtest
cargo_counts qtest $?

# --- the VM stages ---------------------------------------------------------------------------
# vm_counts NAME RC: the guest's "vm-suite: N passed, M failed" line; none (a boot that failed or
# hung, a crash) is one failure, as is a guest that exited non-zero with nothing failed.
vm_counts() {
	local line
	line=$(tr -d '\r' <"$logs/$1.log" | grep -aE '^vm-suite: [0-9]+ passed, [0-9]+ failed' | tail -n1)
	if [ -z "$line" ]; then
		echo "qhca: stage $1 printed no result (a guest that did not boot, hung or crashed); console: $logs/$1.console" >&2
		counts "$1" 0 1
		return
	fi
	counts "$1" "$(awk '{print $2}' <<<"$line")" "$(awk '{print $4}' <<<"$line")"
	[ "$2" = 0 ] || [ "${F[$1]}" != 0 ] || F[$1]=1
}

# vm_suite_with NAME TIMEOUT GUEST_SCRIPT [vm.sh options] [-- GUEST_SCRIPT arguments after KO]
vm_suite_with() {
	local name=$1 limit=$2 script=$3 opts=() args=()
	shift 3
	while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
	[ $# -gt 0 ] && shift && args=("$@")
	stage "$name" "$QHCA_ROOT/scripts/vm.sh" --timeout "$limit" --console "$logs/$name.console" \
		--uars 24 "${opts[@]}" -- bash "$script" "$KO" "${args[@]}"
	vm_counts "$name" $?
}

# vm_suite NAME TIMEOUT [vm.sh options] [-- qhca-vmtest arguments]: the VM suite.
vm_suite() {
	local name=$1 limit=$2 opts=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
	[ $# -gt 0 ] && shift
	vm_suite_with "$name" "$limit" "$QHCA_ROOT/scripts/guest-tests.sh" "${opts[@]}" -- \
		"$BIN/qhca-vmtest" "$@"
}

# The VM suite twice: as it is, then behind the guest IOMMU (intel-iommu; the driver's DMA
# addresses are IOVAs and QEMU's VT-d model checks every device access).
vm_suite vm 900
vm_suite vm-iommu 900 --iommu
# The wire: MACs as vm.sh gives them for node 1 (NIC 52:54:00:12:34:01, qhca0's port ...:35:01).
pcap=/tmp/qhca-vm/wire.pcap
vm_suite vm-wire 900 --nic --qhca-port --dump "$pcap" --link-control \
	--qhca2 x-loss-drop=10,x-loss-dup=10,x-loss-reorder=10,x-loss-seed=7 \
	--qhca3 x-loss-drop=10,x-loss-dup=10,x-loss-seed=7 -- --wire
stage capture python3 "$QHCA_ROOT/scripts/check-capture.py" "$pcap" 52:54:00:12:35:01 52:54:00:12:34:01
line=$(grep -aE '^capture: [0-9]+ passed, [0-9]+ failed' "$logs/capture.log" | tail -n1)
if [ -n "$line" ]; then
	counts capture "$(awk '{print $2}' <<<"$line")" "$(awk '{print $4}' <<<"$line")"
fi
rm -f "$pcap" "$pcap.2" "$pcap.3"

# rdma-core's suite on qhca and rxe (scripts/guest-rdma-core.sh). Its one Python process keeps
# every test that skipped, and with it the device contexts the test had opened, until the run
# ends: a few hundred contexts, each with a doorbell page of its own, so the device gets 512 pages
# (its most is 1024; 24 run out, as would the default 64).
vm_suite_with rdma-core 900 "$QHCA_ROOT/scripts/guest-rdma-core.sh" --nic --qhca-port --uars 512 -- \
	"$RDMA_CORE" "$QHCA_ROOT/tests/rdma-core/known-failures.txt"
vm_suite_with rdma-core-iommu 900 "$QHCA_ROOT/scripts/guest-rdma-core.sh" --iommu --nic --qhca-port \
	--uars 512 -- "$RDMA_CORE" "$QHCA_ROOT/tests/rdma-core/known-failures.txt" --no-rxe

# Two guests: each prints its own "pair-suite: N passed, M failed" ("[vmN] " in front).
stage vm-pair "$QHCA_ROOT/scripts/vm-pair.sh" --timeout 900 --uars 24 --qhca-port -- \
	bash "$QHCA_ROOT/scripts/guest-pair.sh" tests "$KO" "$BIN"
rc=$?
lines=$(tr -d '\r' <"$logs/vm-pair.log" | grep -aE '^\[vm[12]\] pair-suite: [0-9]+ passed, [0-9]+ failed')
counts vm-pair "$(echo "$lines" | awk '{s += $3} END {print s + 0}')" \
	"$(echo "$lines" | awk '{s += $5} END {print s + 0}')"
if [ "$(echo "$lines" | grep -c .)" != 2 ]; then
	echo "qhca: a guest of the pair printed no result (boot failure?); see $logs/vm-pair.log" >&2
	F[vm-pair]=$((${F[vm-pair]} + 1))
elif [ "$rc" != 0 ] && [ "${F[vm-pair]}" = 0 ]; then
	F[vm-pair]=1
fi

tf_final=0
for s in "${stages[@]}"; do tf_final=$((tf_final + ${F[$s]:-1})); done
summary
[ "$tf_final" = 0 ]
