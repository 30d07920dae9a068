#!/usr/bin/env bash
# The README's test command: installs and builds whatever is missing, then runs
#   1. host tests (cargo test: ABI layout and drift, provider logic),
#   2. the device model from outside (qtest protocol against our QEMU),
#   3. the VM suite (our kernel + QEMU + driver + provider, under virtme-ng), twice: as it is
#      and behind the guest IOMMU,
#   4. the RoCEv2 wire in one more VM (qhca-vmtest --wire): Linux's rxe on a virtio-net NIC and
#      two qhca ports on one Ethernet segment, the second losing, duplicating and reordering 1 %
#      of its frames each; then the capture of the first port's frames, checked from outside
#      with tshark and an ICRC of our own (scripts/check-capture.py),
#   5. two guests on one segment (scripts/vm-pair.sh --qhca-port, scripts/guest-pair.sh tests):
#      every RC opcode both ways qhca <-> qhca, rxe <-> qhca and qhca <-> rxe across the guests,
#      ibv_rc_pingpong and perftest qhca <-> qhca.
# Ends with "total: N passed, M failed" and exits non-zero on any failure.
source "$(dirname "$0")/lib.sh"
source "$QHCA_ROOT/scripts/build-all.sh"
set -o pipefail

logs=$QHCA_CACHE/logs
mkdir -p "$logs"
declare -A P F
stages=()

# cargo_counts NAME LOG: sums cargo's "test result:" lines.
cargo_counts() {
	P[$1]=$(grep -E '^test result:' "$2" | awk '{s += $4} END {print s + 0}')
	F[$1]=$(grep -E '^test result:' "$2" | awk '{s += $6} END {print s + 0}')
}

run_stage() {
	local name=$1
	shift
	stages+=("$name")
	step "$name: $*"
	if "$@" 2>&1 | tee "$logs/$name.log"; then :; else
		echo "qhca: stage $name exited non-zero" >&2
		BROKEN=1
	fi
}
BROKEN=0

cd "$QHCA_ROOT"
run_stage host cargo test --release
cargo_counts host "$logs/host.log"

QHCA_QEMU=$QEMU run_stage qtest cargo test --release -p qhca-qtest
cargo_counts qtest "$logs/qtest.log"

# The VM suite twice: as it is, then behind the guest IOMMU (intel-iommu; the driver's DMA
# addresses are IOVAs and QEMU's VT-d model checks every device access).
vm_suite() { # STAGE [vm.sh options] [-- qhca-vmtest arguments]
	local name=$1 line opts=() args=()
	shift
	while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
	[ $# -gt 0 ] && shift && args=("$@")
	run_stage "$name" "$QHCA_ROOT/scripts/vm.sh" --uars 24 "${opts[@]}" -- \
		bash "$QHCA_ROOT/scripts/guest-tests.sh" "$KO" "$BIN/qhca-vmtest" "${args[@]}"
	line=$(grep -aE '^vm-suite: [0-9]+ passed, [0-9]+ failed' "$logs/$name.log" | tail -n1 | tr -d '\r')
	if [ -n "$line" ]; then
		P[$name]=$(echo "$line" | awk '{print $2}')
		F[$name]=$(echo "$line" | awk '{print $4}')
	else
		echo "qhca: the VM suite printed no result (boot failure?); see $logs/$name.log" >&2
		P[$name]=0 F[$name]=1
	fi
}
vm_suite vm
vm_suite vm-iommu --iommu
# The wire: MACs as vm.sh gives them for node 1 (NIC 52:54:00:12:34:01, qhca0's port ...:35:01).
pcap=/tmp/qhca-vm/wire.pcap
vm_suite vm-wire --nic --qhca-port --dump "$pcap" \
	--qhca2 x-loss-drop=10,x-loss-dup=10,x-loss-reorder=10,x-loss-seed=7 -- --wire
run_stage capture python3 "$QHCA_ROOT/scripts/check-capture.py" "$pcap" 52:54:00:12:35:01 52:54:00:12:34:01
line=$(grep -aE '^capture: [0-9]+ passed, [0-9]+ failed' "$logs/capture.log" | tail -n1)
P[capture]=$(echo "$line" | awk '{print $2 + 0}')
F[capture]=$(echo "$line" | awk '{print ($4 == "" ? 1 : $4)}')
rm -f "$pcap"

# Two guests: each prints its own "pair-suite: N passed, M failed" ("[vmN] " in front).
run_stage vm-pair "$QHCA_ROOT/scripts/vm-pair.sh" --timeout 1200 --uars 24 --qhca-port -- \
	bash "$QHCA_ROOT/scripts/guest-pair.sh" tests "$KO" "$BIN"
lines=$(tr -d '\r' <"$logs/vm-pair.log" | grep -aE '^\[vm[12]\] pair-suite: [0-9]+ passed, [0-9]+ failed')
P[vm-pair]=$(echo "$lines" | awk '{s += $3} END {print s + 0}')
F[vm-pair]=$(echo "$lines" | awk '{s += $5} END {print s + 0}')
if [ "$(echo "$lines" | grep -c .)" != 2 ]; then
	echo "qhca: a guest of the pair printed no result (boot failure?); see $logs/vm-pair.log" >&2
	F[vm-pair]=$((${F[vm-pair]} + 1))
fi

tp=0 tf=0
echo
for s in "${stages[@]}"; do
	printf '%-9s %4d passed, %d failed\n' "$s:" "${P[$s]}" "${F[$s]}"
	tp=$((tp + P[$s]))
	tf=$((tf + F[$s]))
done
[ "$BROKEN" = 0 ] || tf=$((tf + 1))
step "done"
echo "total: $tp passed, $tf failed"
[ "$tf" = 0 ]
