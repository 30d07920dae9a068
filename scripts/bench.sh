#!/usr/bin/env bash
# The bench command: boots ONE VM and runs the same perftest binaries with the same arguments on qhca
# (Debian's perftest, unmodified, through Debian's libibverbs and qhca's installed provider) and on Linux
# Soft-RoCE (rdma_rxe on lo), side by side; prints both tables, the qhca/rxe ratios and the system
# calls per post of the perftest client on each side; qhca-perf's one-thread write_lat (what
# perftest cannot do); then memory windows (bind + write + invalidate as a loop: rxe-mw-bench,
# built here with gcc, on both sides, through the installed provider on qhca; qhca-mw-bench, the loop on
# the provider's API, beside it), reg_mr of 1 GiB on both sides (reg-mr-bench, built here too) and the
# qhca-only on-demand paging and registration cache benches.
# The full output goes to ~/.cache/qhca/logs/bench.log.
#
#   scripts/bench.sh [quick]      ("quick": a tenth of the iterations, to check the script)
#   scripts/bench.sh --pair       across TWO VMs of one vCPU each (scripts/vm-pair.sh --qhca-port, the same
#                                 bench kernel): perftest write_lat and write_bw at 64 B and 64 KiB,
#                                 qhca <-> qhca, qhca <-> rxe and rxe <-> rxe (scripts/guest-pair.sh
#                                 bench), then qhca <-> qhca on a stream netdev of its own
#                                 (vm-pair.sh --qhca-stream); log in ~/.cache/qhca/logs/bench-pair.log
#   scripts/bench.sh --kernels    is the bench kernel fair to rxe? rxe alone (scripts/guest-rxe.sh,
#                                 two rounds) on the bench kernel and on a plain distribution-like
#                                 one (virtme-ng's default configuration, scripts/build-plain-kernel.sh,
#                                 ~45 min to build once), one boot after the other; log in
#                                 ~/.cache/qhca/logs/bench-kernels.log
#
# It boots the bench kernel (scripts/build-kernel.sh bench: the test kernel less lockdep and the
# other debug options, which tax rxe's per-packet locking and not qhca's), with tsc=reliable so that
# the clocksource cannot change under a run, and a copy of the module built for that kernel.
source "$(dirname "$0")/lib.sh"
source "$QHCA_ROOT/scripts/build-all.sh"
log=$QHCA_CACHE/logs/bench.log
mkdir -p "$(dirname "$log")"

BKDIR=$("$QHCA_ROOT/scripts/build-kernel.sh" bench | tail -n1)

# --kernels boots no qhca: it needs neither the module nor the memory-window program below.
if [ "${1:-}" = --kernels ]; then
	log=$QHCA_CACHE/logs/bench-kernels.log
	PKDIR=$("$QHCA_ROOT/scripts/build-plain-kernel.sh" | tail -n1)
	t=$(date +%s)
	: >"$log"
	for k in bench plain; do
		kdir=$BKDIR
		[ $k = plain ] && kdir=$PKDIR
		step "bench: rxe alone on the $k kernel ($kdir); about two minutes"
		KDIR=$kdir "$QHCA_ROOT/scripts/vm.sh" --append "tsc=reliable" -- \
			bash "$QHCA_ROOT/scripts/guest-rxe.sh" 2 2>&1 | sed "s/^/[$k] /" | tee -a "$log"
	done
	echo
	echo "rxe alone, perftest over lo, TCG, 2 vCPUs, tsc=reliable; t_typical (us) or message rate (Mpps);"
	echo "bench = our kernel less its debug options, plain = virtme-ng's default configuration"
	printf '%-14s %-22s %-22s\n' workload "bench kernel" "plain kernel"
	for w in write_lat_8 send_lat_8 read_lat_8 write_bw_64; do
		b=$(awk -v w=$w '$1 == "[bench]" && $2 == "rxe-kernel:" && $4 == w { printf "%s ", $5 }' "$log")
		p=$(awk -v w=$w '$1 == "[plain]" && $2 == "rxe-kernel:" && $4 == w { printf "%s ", $5 }' "$log")
		printf '%-14s %-22s %-22s\n' "$w" "$b" "$p"
	done | tee -a "$log"
	echo "bench: wall time $(($(date +%s) - t)) s (VM boots included)" | tee -a "$log"
	exit 0
fi

# The module for the bench kernel, built in a copy so that kmod/qhca.ko stays the test kernel's.
step "kmod: building qhca.ko for the bench kernel (a copy in $QHCA_CACHE/kmod-bench)"
kcopy=$QHCA_CACHE/kmod-bench
mkdir -p "$kcopy/kmod" "$kcopy/uapi/src" "$kcopy/uapi/include"
cp "$QHCA_ROOT"/kmod/{Kbuild,Makefile,*.rs,*.c,*.h} "$kcopy/kmod/"
# Its submodules' directories too (kmod/odp/region.rs, ...).
for d in "$QHCA_ROOT"/kmod/*/; do
	cp -r "$d" "$kcopy/kmod/"
done
cp "$QHCA_ROOT/uapi/src/bindings.rs" "$kcopy/uapi/src/"
# qhca_uverbs.c includes the ABI header itself.
cp "$QHCA_ROOT/uapi/include/qhca-abi.h" "$kcopy/uapi/include/"
export RUST_LIB_SRC
RUST_LIB_SRC=$(rust_lib_src)
make -C "$kcopy/kmod" KDIR="$BKDIR" LLVM=-19 >"$kcopy/build.log" 2>&1 ||
	{ tail -30 "$kcopy/build.log" >&2; die "module build for the bench kernel failed ($kcopy/build.log)"; }
BKO=$kcopy/kmod/qhca.ko

# The memory-window loop on libibverbs, for both sides (qhca through the installed provider), next to
# qhca-mw-bench, which runs the same loop on the provider's API.
step "gcc: rxe-mw-bench (provider/tools/c/rxe-mw-bench.c, against libibverbs)"
echo '#include <infiniband/verbs.h>' | gcc -E -x c - >/dev/null 2>&1 ||
	die "infiniband/verbs.h not found: libibverbs-dev is missing (scripts/setup-host.sh installs it)"
gcc -O2 -Wall -Wextra -o "$BIN/rxe-mw-bench" "$QHCA_ROOT/provider/tools/c/rxe-mw-bench.c" -libverbs ||
	die "building rxe-mw-bench failed (gcc, see above)"
# reg_mr of a large region on both sides, the same libibverbs program.
step "gcc: reg-mr-bench (provider/tools/c/reg-mr-bench.c, against libibverbs)"
gcc -O2 -Wall -Wextra -o "$BIN/reg-mr-bench" "$QHCA_ROOT/provider/tools/c/reg-mr-bench.c" -libverbs ||
	die "building reg-mr-bench failed (gcc, see above)"

if [ "${1:-}" = --pair ]; then
	log=$QHCA_CACHE/logs/bench-pair.log
	# One vCPU a guest: two guests of two vCPUs with busy-polling programs are four spinning threads
	# on a 2-core host, and every frame then waits for the host's scheduler to find its QEMU's
	# main loop a CPU (ib_write_lat 64 B about 320 us typical with two vCPUs, 53 with one).
	step "bench: booting two VMs (bench kernel, TCG, 1 vCPU each) on one segment; about ten minutes; log: $log"
	t=$(date +%s)
	set +e
	KDIR=$BKDIR "$QHCA_ROOT/scripts/vm-pair.sh" --timeout 1800 --cpus 1 --append "tsc=reliable" --qhca-port -- \
		bash "$QHCA_ROOT/scripts/guest-pair.sh" bench "$BKO" "$BIN" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	# The qhca rows again with the ports on a cable of their own (a stream netdev, no hub).
	step "bench: again, qhca<->qhca alone with the ports on a stream netdev of their own; about two minutes"
	KDIR=$BKDIR "$QHCA_ROOT/scripts/vm-pair.sh" --timeout 900 --cpus 1 --append "tsc=reliable" --qhca-port \
		--qhca-stream -- bash "$QHCA_ROOT/scripts/guest-pair.sh" bench "$BKO" "$BIN" 2>&1 | tee -a "$log"
	[ "${PIPESTATUS[0]}" = 0 ] || rc=1
	echo
	grep -a 'pair-bench: ' "$log" | sed 's/^\[vm2\] //'
	echo "bench: wall time $(($(date +%s) - t)) s (VM boots included), exit code $rc" | tee -a "$log"
	exit "$rc"
fi

step "bench: booting the VM (bench kernel, TCG, 2 vCPUs); qhca then rxe; about two minutes; log: $log"
t=$(date +%s)
set +e
# The device traces its page faults and RESUMEs (two events, only on the ODP runs) for the fault
# service time.
odp_trace=$QHCA_CACHE/logs/bench-odp-trace.log
rm -f "$odp_trace"
QHCA_QEMU_OPTS="${QHCA_QEMU_OPTS:-} -trace qhca_odp_fault -trace qhca_odp_resume -D $odp_trace" \
	KDIR=$BKDIR "$QHCA_ROOT/scripts/vm.sh" --append "tsc=reliable" -- \
	bash "$QHCA_ROOT/scripts/guest-bench.sh" "$BKO" "$BIN" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
{
	echo "page-fault service time, device trace (qhca_odp_fault to qhca_odp_resume, host clock):"
	python3 "$QHCA_ROOT/scripts/qhca-odp-faults.py" "$odp_trace" || echo "(no faults traced)"
} 2>&1 | tee -a "$log"
set -e
echo "bench: wall time $(($(date +%s) - t)) s (VM boot included), exit code $rc" | tee -a "$log"
exit "$rc"
