#!/usr/bin/env bash
# Builds the "plain" guest kernel: not ours but virtme-ng's default configuration (what `vng
# --kconfig` builds: x86_64 defconfig plus virtme-ng's options, `virtme-configkernel --defconfig`)
# with Soft-RoCE built in (scripts/kconfig/qhca-plain.config), from the same linux-source package
# as our kernels. It runs rxe only (no Rust, no qhca module): `scripts/bench.sh --kernels` boots it
# beside the bench kernel, so that rxe's figures on the bench kernel can be checked against a
# distribution-like kernel on the same host in the same hour. About 45 minutes on 2 cores; cached
# in ~/.cache/qhca/kernel-<version>-plain-<key>. Prints the build directory on stdout.
source "$(dirname "$0")/lib.sh"

frag=$QHCA_ROOT/scripts/kconfig/qhca-plain.config
tarball=/usr/src/linux-source-$QHCA_KVER.tar.xz
[ -f "$tarball" ] || die "missing $tarball: run scripts/setup-host.sh (package linux-source-$QHCA_KVER from trixie-backports)"
command -v virtme-configkernel >/dev/null || die "virtme-configkernel (virtme-ng) is missing: run scripts/setup-host.sh"
pkgver=$(dpkg-query -W -f='${Version}' "linux-source-$QHCA_KVER")
key=$( (echo "$pkgver"; vng --version 2>&1 | head -n1; clang-19 --version | head -n1; cat "$frag" "$0") |
	sha256sum | cut -c1-12)
src=$QHCA_CACHE/src/linux-$pkgver
out=$QHCA_CACHE/kernel-$QHCA_KVER-plain-$key

if [ -f "$out/.qhca-done" ]; then
	echo "$out"
	exit 0
fi
if [ ! -f "$src/Makefile" ]; then
	step "kernel: unpacking linux-source $pkgver"
	rm -rf "$src.tmp" && mkdir -p "$src.tmp"
	tar -C "$src.tmp" --strip-components=1 -xf "$tarball"
	mv "$src.tmp" "$src"
fi

mkdir -p "$out"
step "kernel (plain): configuring (virtme-ng's defconfig + ${frag##*/}) in $out"
(cd "$src" && virtme-configkernel --defconfig --custom "$frag" LLVM=-19 O="$out") >/dev/null
for opt in CONFIG_RDMA_RXE CONFIG_INFINIBAND_USER_ACCESS CONFIG_9P_FS CONFIG_VIRTIO_PCI; do
	grep -q "^$opt=y" "$out/.config" || die "plain kernel config lost $opt"
done
! grep -Eq '^CONFIG_(PROVE_LOCKING|LOCKDEP|DEBUG_ATOMIC_SLEEP|KASAN)=y' "$out/.config" ||
	die "the plain kernel config has a debug option that slows rxe"

step "kernel (plain): building bzImage with $(nproc) jobs (about 45 min from scratch on 2 idle cores)"
if ! make -C "$src" O="$out" LLVM=-19 -j"$(nproc)" bzImage >"$out/build.log" 2>&1; then
	grep -E "error|Error" "$out/build.log" | head -30 >&2
	die "kernel build failed; full log in $out/build.log"
fi
touch "$out/.qhca-done"
step "kernel (plain): done ($out)"
echo "$out"
