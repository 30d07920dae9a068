#!/usr/bin/env bash
# Runs INSIDE a guest that scripts/vm.sh booted with --nic --qhca-port: rdma-core's own test suite
# (run_tests.py, built by scripts/build-rdma-core.sh) on qhca and then on rxe, in this one boot,
# through the installed qhca provider and nothing preloaded. rxe sits on the guest's virtio NIC
# (10.7.0.1/24), qhca's port netdev gets 10.7.0.2/24; both run on the GID of their IPv4 address
# (RoCEv2).
#
#   guest-rdma-core.sh QHCA_KO RDMA_CORE_BUILD KNOWN_FILE [--no-rxe]
#
# Prints each device's counts side by side ("rdma-core: DEV: N tests, P passed, S skipped, F
# failed, E errors"), a "test ... FAILED" line for each failure that counts, and the closing line
# "vm-suite: N passed, M failed" (N: qhca's passed tests and the script's own checks). On qhca every test must pass or skip, except those that
# KNOWN_FILE lists ("test_name (module.Class)  reason"): those must still fail or error, so that the
# list never outlives the defect. rxe's results are printed, not judged: they are the yardstick.
set -u
ko=$1 build=$2 known=$3 rxe=1
[ "${4:-}" != --no-rxe ] || rxe=0

out=/tmp/qhca-vm # shared with the host: the logs stay for reading
mkdir -p "$out"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "test $1 ... ok"; }
bad() { fail=$((fail + 1)); echo "test $1 ... FAILED: $2"; }

# shellcheck source=guest-load.sh
. "$(dirname "$0")/guest-load.sh"
# shellcheck source=guest-net.sh
. "$(dirname "$0")/guest-net.sh"
if qhca_insmod "$ko"; then ok module_loads; else bad module_loads "insmod $ko failed"; fi

# The RDMA core's device the qhca driver registered (udev may have renamed it), and its netdev.
qdev=""
for d in /sys/class/infiniband/*; do
	[ "$(basename "$(readlink -f "$d/device/driver")")" = qhca ] && qdev=$(basename "$d") && break
done
qnet=$(cat "/sys/class/infiniband/$qdev/ports/1/gid_attrs/ndevs/0" 2>/dev/null)

# gid_of DEV IPV4: the index of IPV4's (IPv4-mapped) GID on DEV's port 1, once the port is active.
gid_of() {
	local want i g
	want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${2//./ })
	for _ in $(seq 100); do
		if [ "$(cat "/sys/class/infiniband/$1/ports/1/state")" = "4: ACTIVE" ]; then
			for g in "/sys/class/infiniband/$1/ports/1/gids/"*; do
				[ "$(cat "$g" 2>/dev/null)" = "$want" ] && i=$(basename "$g") && echo "$i" && return 0
			done
		fi
		sleep 0.1
	done
	return 1
}

set_up() {
	[ -n "$qdev" ] && [ -n "$qnet" ] || { echo "no qhca RDMA device with a netdev" >&2; return 1; }
	QHCA_SELF_IP=10.7.0.1 qhca_net_up >/dev/null || return 1
	ip link set "$qnet" up && ip addr add 10.7.0.2/24 dev "$qnet" || return 1
	[ "$rxe" = 1 ] || return 0
	modprobe rdma_rxe 2>/dev/null
	rdma link add rxe0 type rxe netdev "$QHCA_NET_IF" || return 1
}
if set_up; then ok rdma_core_set_up; else bad rdma_core_set_up "qhca device '$qdev' netdev '$qnet'"; fi

# run DEV IPV4: runs the suite on DEV; its unittest output goes to $out/rdma-core-DEV.log and the
# per-test results ("NAME MODULE.CLASS ok|skipped|FAIL|ERROR") to $out/rdma-core-DEV.res.
run() {
	local dev=$1 gid log=$out/rdma-core-$1.log t0
	gid=$(gid_of "$dev" "$2") || { echo "rdma-core: $dev: no GID for $2" >&2; return 1; }
	t0=$(date +%s)
	timeout 1200 "$build/bin/run_tests.py" --dev "$dev" --port 1 --gid "$gid" -v >"$log" 2>&1
	echo "rdma-core: $dev: ran in $(($(date +%s) - t0)) s (GID index $gid)"
	# unittest -v: "test_x (tests.test_y.Class.test_x)", maybe the docstring's first line, then
	# " ... VERDICT"; a test's own prints may come between " ... " and the verdict.
	python3 - "$log" >"$out/rdma-core-$dev.res" <<'PY'
import re, sys
verdicts = {"ok": "ok", "skipped": "skipped", "FAIL": "FAIL", "ERROR": "ERROR",
            "expected": "ok", "unexpected": "FAIL"}
cur, dots = None, False
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"^(test\w*) \(([\w.]+)\)", line)
    if m:
        cur, dots = (m[1], m[2].removesuffix("." + m[1])), False
    if cur is None:
        continue
    if " ... " in line:
        line, dots = line.rsplit(" ... ", 1)[1], True
    word = (line.split() or [""])[0]
    if dots and word in verdicts:
        print(f"{cur[0]} {cur[1]} {verdicts[word]}")
        cur = None
PY
	local n p s f e
	n=$(grep -c . "$out/rdma-core-$dev.res")
	p=$(grep -c ' ok$' "$out/rdma-core-$dev.res")
	s=$(grep -c ' skipped$' "$out/rdma-core-$dev.res")
	f=$(grep -c ' FAIL$' "$out/rdma-core-$dev.res")
	e=$(grep -c ' ERROR$' "$out/rdma-core-$dev.res")
	echo "rdma-core: $dev: $n tests, $p passed, $s skipped, $f failed, $e errors"
	grep -E 'Ran [0-9]+ tests|^(OK|FAILED)' "$log" | sed "s/^/rdma-core: $dev: unittest: /"
}

if [ -n "$qdev" ] && run "$qdev" 10.7.0.2; then
	res=$out/rdma-core-$qdev.res
	[ "$(grep -c . "$res")" -gt 100 ] && ok rdma_core_qhca_ran ||
		bad rdma_core_qhca_ran "only $(grep -c . "$res") results (log $out/rdma-core-$qdev.log)"
	# Every test that passed counts; each failure or error must be listed as known (then it is
	# printed with its reason and counts neither way), and each listed one must still fail.
	pass=$((pass + $(grep -c ' ok$' "$res")))
	while read -r name where verdict; do
		case $verdict in ok | skipped) continue ;; esac
		if why=$(grep -E "^$name $where( |\$)" "$known"); then
			echo "test rdma_core_$name ... known failure ($verdict): ${why#"$name $where "}"
		else
			bad "rdma_core_${name}" "$where: $verdict on $qdev"
			awk -v n="$name" -v w="$where" '
				/^(ERROR|FAIL): / { on = ($2 == n) && index($0, w) > 0 }
				on { print "    " $0 }' "$out/rdma-core-$qdev.log" | tail -n 25
		fi
	done <"$res"
	while read -r name where _; do
		case $name in test*) ;; *) continue ;; esac
		grep -qE "^$name $where (FAIL|ERROR)$" "$res" ||
			bad "rdma_core_known_$name" "listed in $known but did not fail on $qdev: $(grep -E "^$name $where " "$res")"
	done <"$known"
else
	bad rdma_core_qhca_ran "run_tests.py on '$qdev' did not run"
fi
if [ "$rxe" = 1 ]; then
	if run rxe0 10.7.0.1; then ok rdma_core_rxe_ran; else bad rdma_core_rxe_ran "run_tests.py on rxe0 did not run"; fi
	grep -hE ' (FAIL|ERROR)$' "$out/rdma-core-rxe0.res" 2>/dev/null | sed 's/^/rdma-core: rxe0: not passed: /'
	rdma link delete rxe0 2>/dev/null
fi

# shellcheck source=guest-splat.sh
. "$(dirname "$0")/guest-splat.sh"
qhca_kernel_log_case kernel_log_clean
echo "vm-suite: $pass passed, $fail failed"
[ "$fail" = 0 ]
