#!/usr/bin/env bash
# Sourced INSIDE a test guest (scripts/guest-tests.sh, scripts/guest-pair.sh): defines
# qhca_kernel_splats, which prints the kernel log around every splat and returns 0 if there is one
# (1 if the log is clean), and qhca_kernel_log_case NAME, the suites' case of that name through
# the caller's ok and bad. Any splat fails a suite, wherever it came from.

qhca_kernel_splats() {
	local splat injected
	splat='-+\[ cut here \]-+|WARNING:|BUG:|Oops|general protection fault|Kernel panic|'
	splat+='possible (recursive|circular|irq) lock|inconsistent lock state|lockdep is turned off|'
	splat+='UBSAN|KASAN|kfence|hung_task|INFO: task .* blocked|Call Trace:|RIP: |'
	# Behind the guest IOMMU: a device access the driver did not map (or had unmapped) is a bug,
	# except at the address the fault injection bad_dma_pages hands the device on purpose.
	splat+='DMAR: \[DMA (Read|Write)'
	injected='fault addr 0xdead00000000'
	dmesg | grep -v -e "$injected" | grep -Eq -e "$splat" || return 1
	dmesg | grep -v -e "$injected" | grep -E -B5 -A25 -e "$splat" | head -120
	return 0
}

# qhca_kernel_log_case NAME: case NAME (ok NAME, or bad NAME and the splats) through the
# caller's ok and bad functions.
qhca_kernel_log_case() {
	local splats
	if splats=$(qhca_kernel_splats); then
		bad "$1" "the guest kernel log has a splat:"
		echo "$splats"
	else
		ok "$1"
	fi
}
