#!/usr/bin/env bash
# Boots the guest kernel under our QEMU with virtme-ng and runs a command in it.
#
#   scripts/vm.sh [--uars N] [--iommu] [--append KERNEL_ARGS] [--] COMMAND...
#
# The guest sees the host's root filesystem (read-only) and this repository; /tmp/qhca-vm is
# shared read-write for results. Needs KDIR and QEMU in the environment (scripts/build-all.sh sets
# them) or builds them first. Uses TCG: nested KVM on our CI machines hangs the guest at
# "Decompressing Linux", so KVM is used only when QHCA_KVM=1. QHCA_QEMU_OPTS adds QEMU options (e.g. the
# -trace options of qemu-device/docs/qhca.rst, "Tracing one message").
source "$(dirname "$0")/lib.sh"

uars=24
append=()
iommu=""
while [ $# -gt 0 ]; do
	case "$1" in
	--uars) uars=$2; shift 2 ;;
	--append) append=(--append "$2"); shift 2 ;;
	--iommu) iommu=1; shift ;;
	--) shift; break ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || die "usage: scripts/vm.sh [--uars N] [--iommu] [--append KERNEL_ARGS] [--] COMMAND..."
if [ -z "${KDIR:-}" ] || [ -z "${QEMU:-}" ]; then
	KDIR=$("$QHCA_ROOT/scripts/build-kernel.sh" | tail -n1)
	QEMU=$("$QHCA_ROOT/scripts/build-qemu.sh" | tail -n1)
fi
command -v udevadm >/dev/null || die "udev is not installed: without it vng loses the guest's exit code (scripts/setup-host.sh)"

kvm=(--disable-kvm)
[ "${QHCA_KVM:-0}" = 1 ] && kvm=()
mkdir -p /tmp/qhca-vm
# vng hands --exec to the guest's /bin/sh: quote each argument for it. Keep arguments to plain
# words (paths, numbers); bash's $'...' quoting of control characters means nothing to dash.
cmd=$(printf '%q ' "$@")
# --iommu: the guest IOMMU in front of the device (seed 003's second stage): the driver's DMA
# addresses become IOVAs and every device access is translated and checked by QEMU's VT-d model.
dev="-device qhca,num-uars=$uars"
if [ -n "$iommu" ]; then
	dev="-device intel-iommu,intremap=off $dev"
	append=(--append "intel_iommu=on iommu=strict ${append[1]:-}")
fi
exec vng --run "$KDIR/arch/x86/boot/bzImage" "${kvm[@]}" --disable-microvm "${append[@]}" \
	--qemu "$QEMU" --cpus 2 --memory 2G --rwdir /tmp/qhca-vm \
	--qemu-opts="-L /usr/share/qemu -L /usr/share/seabios $dev ${QHCA_QEMU_OPTS:-}" \
	--exec "QHCA_EXPECT_NUM_UARS=$uars $cmd"
