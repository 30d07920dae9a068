#!/usr/bin/env bash
# Installs what is missing and builds everything that changed: kernel, QEMU, module, provider and tools.
# Sourced by demo.sh and test.sh; sets KDIR, QEMU, KO and BIN (the cargo release directory).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$QHCA_ROOT/scripts/setup-host.sh"
KDIR=$("$QHCA_ROOT/scripts/build-kernel.sh" | tail -n1)
QEMU=$("$QHCA_ROOT/scripts/build-qemu.sh" | tail -n1)
KO=$("$QHCA_ROOT/scripts/build-kmod.sh" "$KDIR" | tail -n1)
step "cargo: building the provider, tools and guest test binaries"
(cd "$QHCA_ROOT" && cargo build -q --release --workspace --lib --bins --examples) || die "cargo build failed"
step "gcc: qhca-verbs-check (tests/verbs-c/*.c, an unmodified libibverbs program)"
gcc -O2 -Wall -Wextra -Werror -o "$QHCA_ROOT/target/release/qhca-verbs-check" \
	"$QHCA_ROOT"/tests/verbs-c/*.c -libverbs ||
	die "building qhca-verbs-check failed (gcc, see above)"
BIN=$QHCA_ROOT/target/release
export KDIR QEMU KO BIN
