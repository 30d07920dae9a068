#!/usr/bin/env bash
# Sourced INSIDE a guest (guest-tests.sh, guest-pair.sh, guest-demo.sh, guest-bench.sh): defines
# qhca_insmod KO, which loads the RDMA core the driver registers its devices with, the core's
# user-verbs module and its connection manager with its user interface (rdma_ucm: rdma_cm, ib_cm)
# (modules, as a distribution has them: insmod does not resolve dependencies)
# and then the driver, and waits for the RDMA core's uverbs node of its first device and for udev
# to have named its devices. Returns
# nonzero if either does not load. qhca_links_up brings the ports' netdevs up.
qhca_insmod() {
	modprobe ib_core && modprobe ib_uverbs && modprobe rdma_ucm ||
		{ echo "guest: modprobe ib_core ib_uverbs rdma_ucm failed" >&2; return 1; }
	insmod "$1" || return 1
	for _ in $(seq 50); do
		compgen -G '/sys/bus/pci/drivers/qhca/0000:*/infiniband_verbs/uverbs*' >/dev/null && break
		sleep 0.1
	done
	# udev renames the RDMA core's device and the port's netdev (rocep0s10, enp0s10): the names
	# are final once it is done.
	if command -v udevadm >/dev/null; then udevadm settle -t 10 || true; fi
}

# qhca_links_up: brings up the netdev of every qhca port, as a system's network set-up does, and
# waits (10 s at most) until each has its IPv6 link-local address, not tentative: the RDMA core's
# GID 0 of the port, which address vectors on the core's device need (the tools open that device
# by default). Returns nonzero if one does not come.
qhca_links_up() {
	local d n nets=()
	for d in /sys/bus/pci/drivers/qhca/0000:*; do
		for n in "$d"/net/*; do
			[ -e "$n" ] || continue
			nets+=("${n##*/}")
			ip link set "${n##*/}" up || return 1
		done
	done
	for n in "${nets[@]}"; do
		for _ in $(seq 100); do
			ip -6 addr show dev "$n" scope link | grep -q inet6 &&
				! ip -6 addr show dev "$n" scope link | grep -q tentative && break
			sleep 0.1
		done
		ip -6 addr show dev "$n" scope link | grep -q inet6 || return 1
	done
}
