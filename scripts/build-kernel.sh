#!/usr/bin/env bash
# Builds the guest kernel from Debian's linux-source-7.3 with scripts/kconfig/qhca-guest.config merged over
# allnoconfig, with scripts/kernel-patches/*.patch applied to the source (the RDMA core's headers in the Rust
# bindings). The build lives in ~/.cache/qhca/kernel-<key>, keyed by the source package version, the patches, the
# config fragments, this script and rustc; a finished build is reused. Prints the build directory on stdout.
#
#   build-kernel.sh [test|bench]
#
# test (the default): the kernel of the test suite, with lockdep (PROVE_LOCKING) and the other checks
# whose splats fail the suite. bench: the same kernel less those debug options
# (scripts/kconfig/qhca-bench.config merged last), for scripts/bench.sh.
source "$(dirname "$0")/lib.sh"

flavour=${1:-test}
frags=("$QHCA_ROOT/scripts/kconfig/qhca-guest.config")
case "$flavour" in
test) must_have=(CONFIG_PROVE_LOCKING) ;;
bench)
	frags+=("$QHCA_ROOT/scripts/kconfig/qhca-bench.config")
	must_have=()
	;;
*) die "usage: build-kernel.sh [test|bench]" ;;
esac
tarball=/usr/src/linux-source-$QHCA_KVER.tar.xz
[ -f "$tarball" ] || die "missing $tarball: run scripts/setup-host.sh (package linux-source-$QHCA_KVER from trixie-backports)"
pkgver=$(dpkg-query -W -f='${Version}' "linux-source-$QHCA_KVER")
export RUST_LIB_SRC
RUST_LIB_SRC=$(rust_lib_src)
[ -d "$RUST_LIB_SRC" ] || die "missing $RUST_LIB_SRC: rust-src $(rustc_version) is not installed"

patches=("$QHCA_ROOT"/scripts/kernel-patches/*.patch)
pkey=$(cat "${patches[@]}" | sha256sum | cut -c1-8)
key=$( (echo "$pkgver"; rustc --version; bindgen --version; cat "${patches[@]}" "${frags[@]}" "$0") | sha256sum | cut -c1-12)
src=$QHCA_CACHE/src/linux-$pkgver-$pkey
out=$QHCA_CACHE/kernel-$QHCA_KVER-$key
[ "$flavour" = test ] || out=$QHCA_CACHE/kernel-$QHCA_KVER-$flavour-$key
KMAKE=(make -C "$src" O="$out" LLVM=-19 -j"$(nproc)")

if [ -f "$out/.qhca-done" ]; then
	echo "$out"
	exit 0
fi

if [ ! -f "$src/Makefile" ]; then
	step "kernel: unpacking linux-source $pkgver"
	rm -rf "$src.tmp" && mkdir -p "$src.tmp"
	tar -C "$src.tmp" --strip-components=1 -xf "$tarball"
	for p in "${patches[@]}"; do
		patch -s -d "$src.tmp" -p1 <"$p" || die "kernel: $p does not apply to linux-source $pkgver"
	done
	mv "$src.tmp" "$src"
fi

mkdir -p "$out"
step "kernel ($flavour): configuring (allnoconfig + ${frags[*]##*/}) in $out"
"${KMAKE[@]}" -s allnoconfig >/dev/null
"$src/scripts/kconfig/merge_config.sh" -m -O "$out" "$out/.config" "${frags[@]}" >/dev/null
"${KMAKE[@]}" -s olddefconfig >/dev/null
# Fail loudly if Kconfig silently dropped something we rely on (an unmet dependency, a missing toolchain).
for opt in CONFIG_RUST CONFIG_PCI_MSI CONFIG_INTEL_IOMMU CONFIG_9P_FS CONFIG_MODULES CONFIG_VIRTIO_PCI \
	CONFIG_RDMA_RXE CONFIG_DEBUG_FS CONFIG_TUN CONFIG_NET_NS CONFIG_FUSE_FS CONFIG_IPV6 \
	CONFIG_INFINIBAND_ADDR_TRANS CONFIG_NVME_RDMA CONFIG_NVME_TARGET_RDMA "${must_have[@]}"; do
	grep -Eq "^$opt=(y|m)" "$out/.config" || {
		"${KMAKE[@]}" rustavailable || true
		die "kernel config lost $opt (unmet dependency or toolchain missing)"
	}
done

[ "$flavour" = test ] || ! grep -Eq '^CONFIG_(PROVE_LOCKING|LOCKDEP|DEBUG_ATOMIC_SLEEP)=y' "$out/.config" ||
	die "the $flavour kernel config still has a debug option that slows only one side of a comparison"

step "kernel ($flavour): building bzImage and modules with $(nproc) jobs (about 17 min from scratch on 2 idle cores)"
if ! "${KMAKE[@]}" bzImage modules >"$out/build.log" 2>&1; then
	grep -E "error|Error" "$out/build.log" | head -30 >&2
	die "kernel build failed; full log in $out/build.log"
fi
"${KMAKE[@]}" -s modules_install INSTALL_MOD_PATH="$out/modroot" INSTALL_MOD_STRIP=1 >/dev/null
touch "$out/.qhca-done"
step "kernel ($flavour): done ($out)"
echo "$out"
