#!/usr/bin/env bash
# Runs INSIDE the test VM (scripts/vm.sh boots it): loads the module, runs the guest test binary,
# and fails if the kernel log shows a splat. Usage: guest-tests.sh QHCA_KO VMTEST_BINARY [FILTER...]
# Prints a closing line "vm-suite: N passed, M failed".
set -u
ko=$1 vmtest=$2
shift 2

pass=0 fail=0
ok() { pass=$((pass + 1)); echo "test $1 ... ok"; }
bad() { fail=$((fail + 1)); echo "test $1 ... FAILED: $2"; }

echo "guest: kernel $(uname -r), $(nproc) CPUs"
# The driver's pinned-page count lives in debugfs.
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
# shellcheck source=guest-load.sh
. "$(dirname "$0")/guest-load.sh"
if qhca_insmod "$ko"; then
	ok module_loads
else
	bad module_loads "insmod $ko failed"
fi

# The guest kernel has no hung-task detector: if the suite still runs after QHCA_STALL_DUMP_S
# seconds (default 600, well below the guests' time limit), the stacks of the tasks in
# uninterruptible sleep are printed, so that a hang shows where it is before the limit ends it.
stall_dump() {
	local p
	sleep "${QHCA_STALL_DUMP_S:-600}"
	echo "guest: the suite still runs after ${QHCA_STALL_DUMP_S:-600} s; tasks in D state:"
	for p in /proc/[0-9]*; do
		[ "$(awk '/^State/ {print $2}' "$p/status" 2>/dev/null)" = D ] || continue
		echo "--- ${p#/proc/} $(cat "$p/comm" 2>/dev/null)"
		cat "$p/stack" 2>/dev/null
	done
}
stall_dump &
stall=$!

out=$(mktemp)
QHCA_KO=$ko "$vmtest" "$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
kill "$stall" 2>/dev/null
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n1)
if [ -n "$line" ]; then
	pass=$((pass + $(echo "$line" | awk '{print $1}')))
	fail=$((fail + $(echo "$line" | awk '{print $3}')))
	[ "$rc" = 0 ] || [ "$(echo "$line" | awk '{print $3}')" != 0 ] || bad vmtest_exit "exit code $rc"
else
	bad vmtest_ran "qhca-vmtest printed no closing line (exit code $rc)"
fi

# The tools, end to end on the device (the module is loaded again by the reload case); not in
# the wire section's VM (qhca-vmtest --wire), which runs only that section.
bin=$(dirname "$vmtest")
tool() { # NAME PATTERN COMMAND...: passes if COMMAND exits 0 and prints a line matching PATTERN
	local name=$1 pat=$2 out
	shift 2
	if out=$("$@" 2>&1) && grep -Eq -e "$pat" <<<"$out"; then
		ok "$name"
	else
		bad "$name" "$*: $(tail -n 5 <<<"$out")"
	fi
	sed 's/^/    /' <<<"$out"
}
if [ "${1:-}" != --wire ]; then
	# By default the tools open the RDMA core's device (its uverbs node), whose port's netdev
	# must be up.
	qhca_links_up || bad tool_links_up "a qhca netdev has no link-local address"
	tool tool_qhca_info '^[[:space:]]+device:[[:space:]]+/dev/infiniband/uverbs' "$bin/qhca-info"
	tool tool_pingpong '^200 iters in .* usec/iter' "$bin/qhca-pingpong" --loopback -s 4096 -n 200
	tool tool_perf_write_lat '^ +8 +200 ' "$bin/qhca-perf" write_lat --loopback -s 8 -n 200
	tool tool_perf_write_bw '^ +65536 +200 ' "$bin/qhca-perf" write_bw --loopback -s 65536 -n 200
	tool tool_perf_write_lat_one_thread '^ +8 +200 ' "$bin/qhca-perf" write_lat --loopback --one-thread -s 8 -n 200
fi

# Leave the driver as the tests found it, then check that unloading is clean.
if lsmod | grep -q '^qhca '; then
	if rmmod qhca; then ok module_unloads; else bad module_unloads "rmmod qhca failed"; fi
fi

# shellcheck source=guest-splat.sh
. "$(dirname "$0")/guest-splat.sh"
qhca_kernel_log_case kernel_log_clean
echo "guest: qhca kernel messages:"
dmesg | grep -E '^\[[ 0-9.]+\] qhca' | sed 's/^/  /'
echo "vm-suite: $pass passed, $fail failed"
[ "$fail" = 0 ]
