#!/usr/bin/env bash
# The README's test command: installs and builds whatever is missing, then runs
#   1. host tests (cargo test: ABI layout and drift, provider logic),
#   2. the device model from outside (qtest protocol against our QEMU),
#   3. the VM suite (our kernel + QEMU + driver + provider, under virtme-ng).
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

run_stage vm "$QHCA_ROOT/scripts/vm.sh" --uars 24 -- \
	bash "$QHCA_ROOT/scripts/guest-tests.sh" "$KO" "$BIN/qhca-vmtest"
line=$(grep -aE '^vm-suite: [0-9]+ passed, [0-9]+ failed' "$logs/vm.log" | tail -n1 | tr -d '\r')
if [ -n "$line" ]; then
	P[vm]=$(echo "$line" | awk '{print $2}')
	F[vm]=$(echo "$line" | awk '{print $4}')
else
	echo "qhca: the VM suite printed no result (boot failure?); see $logs/vm.log" >&2
	P[vm]=0 F[vm]=1
fi

tp=0 tf=0
echo
for s in "${stages[@]}"; do
	printf '%-6s %4d passed, %d failed\n' "$s:" "${P[$s]}" "${F[$s]}"
	tp=$((tp + P[$s]))
	tf=$((tf + F[$s]))
done
[ "$BROKEN" = 0 ] || tf=$((tf + 1))
step "done"
echo "total: $tp passed, $tf failed"
[ "$tf" = 0 ]
