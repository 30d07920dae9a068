#!/usr/bin/env bash
# Builds kmod/qhca.ko against the cached guest kernel. Usage: build-kmod.sh KERNEL_BUILD_DIR
# Prints the path of qhca.ko on stdout. Kbuild rebuilds only what changed.
source "$(dirname "$0")/lib.sh"

kdir=${1:?usage: build-kmod.sh KERNEL_BUILD_DIR}
export RUST_LIB_SRC
RUST_LIB_SRC=$(rust_lib_src)
step "kmod: building qhca.ko (through clippy, CLIPPY=1, as the kernel runs it)"
if ! make -C "$QHCA_ROOT/kmod" KDIR="$kdir" LLVM=-19 CLIPPY=1 >"$QHCA_CACHE/kmod-build.log" 2>&1; then
	grep -E -A12 "^(error|warning)|Error " "$QHCA_CACHE/kmod-build.log" | head -80 >&2
	die "module build failed; full log in $QHCA_CACHE/kmod-build.log"
fi
if grep -E "^warning|: warning:" "$QHCA_CACHE/kmod-build.log" >&2; then
	die "module build has warnings (see above); fix them"
fi
if ! make -s -C "$QHCA_ROOT/kmod" KDIR="$kdir" rustfmtcheck >"$QHCA_CACHE/kmod-rustfmt.log" 2>&1; then
	head -60 "$QHCA_CACHE/kmod-rustfmt.log" >&2
	die "kmod is not rustfmt-clean (the kernel's .rustfmt.toml); run: make -C kmod KDIR=$kdir rustfmtcheck"
fi
echo "$QHCA_ROOT/kmod/qhca.ko"
