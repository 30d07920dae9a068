#!/usr/bin/env bash
# The bench command: boots ONE VM and runs the same workloads on qhca (qhca-perf --loopback) and on
# Linux Soft-RoCE (rdma_rxe on lo, perftest), side by side; prints both tables, the qhca/rxe ratios
# and the system calls per post on each side. The full output goes to ~/.cache/qhca/logs/bench.log.
#
#   scripts/bench.sh [quick]      ("quick": a tenth of the iterations, to check the script)
source "$(dirname "$0")/lib.sh"
source "$QHCA_ROOT/scripts/build-all.sh"
log=$QHCA_CACHE/logs/bench.log
mkdir -p "$(dirname "$log")"
step "bench: booting the VM (TCG, 2 vCPUs); qhca then rxe; about ten minutes; log: $log"
t=$(date +%s)
set +e
"$QHCA_ROOT/scripts/vm.sh" -- bash "$QHCA_ROOT/scripts/guest-bench.sh" "$KO" "$BIN" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
echo "bench: wall time $(($(date +%s) - t)) s (VM boot included), exit code $rc" | tee -a "$log"
exit "$rc"
