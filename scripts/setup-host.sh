#!/usr/bin/env bash
# Installs every host tool qhca needs, from the registries this project may use:
# Debian (bookworm + trixie/trixie-backports/sid at a low pin), PyPI and crates.io.
# Idempotent: each step checks first and does nothing when already done.
source "$(dirname "$0")/lib.sh"

APT_PACKAGES=(
	# Kernel build
	build-essential bc bison flex libelf-dev libssl-dev cpio kmod pahole
	"linux-source-$QHCA_KVER"
	libclang-19-dev clang-19 lld-19 llvm-19
	# QEMU build
	ninja-build pkg-config libfdt-dev libglib2.0-dev libcap-ng-dev libattr1-dev libslirp-dev
	dpkg-dev
	# QEMU firmware
	seabios qemu-system-data ipxe-qemu
	# VM runner: vng needs udev to carry the guest's exit code back; busybox for the guest's tools
	udev busybox-static strace
	# The peer benchmarks compare against: Soft-RoCE (rxe) through rdma-core, with perftest;
	# libibverbs-dev builds rxe-mw-bench (provider/tools/c), the memory-window loop on verbs
	rdma-core ibverbs-utils ibverbs-providers perftest iproute2 libibverbs-dev
	# Connection management through the kernel's rdma_cm (rping, ucmatose, udaddy, rdma_server)
	rdmacm-utils
	# NVMe over RDMA on qhca: nvme-cli connects the host side, fio writes and verifies the namespace
	nvme-cli fio
	# The frameworks on qhca's verbs (issue 28): UCX (ucx_info, ucx_perftest) and Open MPI over
	# UCX; libopenmpi-dev's mpicc builds tests/mpi
	ucx-utils openmpi-bin libopenmpi-dev
	# rdma-core's own test suite, built from its source package with its pyverbs and libibverbs
	# (scripts/build-rdma-core.sh)
	cmake cython3 python3-dev libnl-3-dev libnl-route-3-dev libudev-dev
	# The wire's capture (scripts/check-capture.py): Wireshark's dissectors, without the GUI
	tshark
	# The split-model network driver's tests and bench (issue 10): Linux tools through its interface
	iputils-ping socat iperf3
)

setup_apt_sources() {
	local list=/etc/apt/sources.list.d/qhca-trixie.sources
	local pin=/etc/apt/preferences.d/qhca-low-pin
	if [ -f "$list" ] && [ -f "$pin" ]; then
		return 0
	fi
	step "apt: adding trixie, trixie-backports and sid at a low pin (deb-src for trixie)"
	as_root tee "$list" >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie trixie-backports sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
	# The low pin keeps bookworm's packages unless a package only exists in a newer suite
	# or is asked for by version. Never install with -t bookworm: it breaks pcre2.
	as_root tee "$pin" >/dev/null <<'PIN'
Package: *
Pin: release n=trixie
Pin-Priority: 100

Package: *
Pin: release n=trixie-backports
Pin-Priority: 100

Package: *
Pin: release n=sid
Pin-Priority: 50
PIN
	rm -f "$QHCA_CACHE/apt-updated"
}

apt_missing() {
	local p missing=()
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	echo "${missing[@]:-}"
}

install_apt() {
	local missing rs
	# rust-src must match the image's rustc exactly: RUST_LIB_SRC points at it.
	rs="rust-src"
	missing=$(apt_missing "${APT_PACKAGES[@]}")
	if [ -n "$missing" ] || [ ! -d "$(rust_lib_src)" ]; then
		if [ ! -f "$QHCA_CACHE/apt-updated" ]; then
			step "apt: update"
			as_root apt-get update -q >/dev/null
			touch "$QHCA_CACHE/apt-updated"
		fi
	fi
	if [ -n "$missing" ]; then
		step "apt: installing $missing"
		# shellcheck disable=SC2086
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing \
			>"$QHCA_CACHE/apt-install.log" 2>&1 ||
			{ tail -30 "$QHCA_CACHE/apt-install.log"; die "apt-get install failed (see above): $missing"; }
	fi
	if [ ! -d "$(rust_lib_src)" ]; then
		local want
		want=$(rustc_version)
		step "apt: rust-src $want (to match rustc)"
		local ver
		ver=$(apt-cache madison "$rs" | awk -v w="$want" '$3 ~ "^"w"\\+" {print $3; exit}')
		[ -n "$ver" ] || die "no Debian rust-src package matches rustc $want (apt-cache madison rust-src)"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$rs=$ver" \
			>>"$QHCA_CACHE/apt-install.log" 2>&1 || die "apt-get install rust-src=$ver failed"
		[ -d "$(rust_lib_src)" ] || die "rust-src $ver did not install $(rust_lib_src)"
	fi
}

# virtme-ng is pinned: scripts/vm.sh relies on its options (--verbose for the boot console, ...).
VNG_VERSION=1.42
install_pip() {
	if python3 -c 'import mesonbuild, pycotap, sys; from mesonbuild import coredata as c; sys.exit(c.version != "1.5.0")' 2>/dev/null &&
		command -v vng >/dev/null && [ "$(vng --version 2>/dev/null | awk '{print $2}')" = "$VNG_VERSION" ]; then
		return 0
	fi
	step "pip: meson==1.5.0 pycotap virtme-ng==$VNG_VERSION"
	python3 -m pip install -q --disable-pip-version-check "meson==1.5.0" pycotap "virtme-ng==$VNG_VERSION" ||
		die "pip install of meson==1.5.0, pycotap or virtme-ng==$VNG_VERSION failed"
}

install_cargo_tools() {
	if command -v bindgen >/dev/null && bindgen --version | grep -q "0.72.1"; then
		return 0
	fi
	step "cargo: bindgen-cli 0.72.1 (takes ~1 min)"
	cargo install -q --locked bindgen-cli --version 0.72.1 || die "cargo install bindgen-cli 0.72.1 failed"
}

# bindgen-cli compiles for about a minute and needs nothing from apt: beside the apt steps.
install_cargo_tools &
bindgen_job=$!
setup_apt_sources
install_apt
install_pip
wait "$bindgen_job" || die "installing bindgen-cli failed (see above)"
step "host tools ready"
