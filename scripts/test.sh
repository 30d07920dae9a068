#!/usr/bin/env bash
# The README's test command: installs and builds whatever is missing, then runs
#   1. host tests (cargo test: ABI layout and drift, provider logic),
#   2. the device model from outside (qtest protocol against our QEMU),
#   3. the VM suite (our kernel + QEMU + driver + provider, under virtme-ng), twice: as it is
#      and behind the guest IOMMU.
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
vm_suite() { # STAGE [vm.sh options]
	local name=$1 line
	shift
	run_stage "$name" "$QHCA_ROOT/scripts/vm.sh" --uars 24 "$@" -- \
		bash "$QHCA_ROOT/scripts/guest-tests.sh" "$KO" "$BIN/qhca-vmtest"
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
