#!/usr/bin/env bash
# Sourced INSIDE a guest (guest-tests.sh, guest-pair.sh, guest-demo.sh, guest-bench.sh): defines
# qhca_insmod KO, which loads the RDMA core the driver registers its devices with and the core's
# user-verbs module (modules, as a distribution has them: insmod does not resolve dependencies)
# and then the driver, and waits for /dev/qhca0 and for udev to have named its devices. Returns
# nonzero if either does not load.
qhca_insmod() {
	modprobe ib_core && modprobe ib_uverbs || { echo "guest: modprobe ib_core ib_uverbs failed" >&2; return 1; }
	insmod "$1" || return 1
	for _ in $(seq 50); do [ -c /dev/qhca0 ] && break; sleep 0.1; done
	# udev renames the RDMA core's device and the port's netdev (rocep0s10, enp0s10): the names
	# are final once it is done.
	if command -v udevadm >/dev/null; then udevadm settle -t 10 || true; fi
}
