#!/usr/bin/env bash
# Installs what is missing and builds everything that changed: kernel, QEMU, module, provider and tools.
# Sourced by demo.sh and test.sh; sets KDIR, QEMU, KO and BIN (the cargo release directory).
#
# The guest kernel, QEMU and the Rust workspace do not depend on each other, so QEMU (whose source
# download, unpacking and configure are mostly waiting) and the workspace build beside the kernel;
# the module, which needs the kernel, comes after. Each build's progress lines come as they happen;
# a build that fails says why (its log's tail) and stops the others.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$QHCA_ROOT/scripts/setup-host.sh"
mkdir -p "$QHCA_CACHE/logs"

# bg_build NAME CMD...: CMD in the background, its stdout (the last line: a path, bg_path) in
# $QHCA_CACHE/logs/NAME.out; its pid in BG[NAME].
declare -A BG
bg_build() {
	local name=$1
	shift
	"$@" >"$QHCA_CACHE/logs/$name.out" &
	BG[$name]=$!
}
# kill_tree PID: PID and everything it started.
kill_tree() {
	local c
	for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do kill_tree "$c"; done
	kill "$1" 2>/dev/null || true
}
# bg_stop: stops every background build (another one failed).
bg_stop() {
	local name
	for name in "${!BG[@]}"; do kill_tree "${BG[$name]}"; done
}
# bg_wait NAME: waits for it and prints its path, or stops everything with the reason. Runs in
# this shell, never in a command substitution: a subshell cannot wait for this shell's children.
bg_wait() {
	if ! wait "${BG[$1]}"; then
		bg_stop
		die "the $1 build failed (its messages are above)"
	fi
}
bg_path() {
	tail -n1 "$QHCA_CACHE/logs/$1.out"
}

cargo_build() {
	step "cargo: building the provider, tools and guest test binaries"
	(cd "$QHCA_ROOT" && cargo build -q --release --workspace --lib --bins --examples) ||
		die "cargo build failed"
	step "cargo: done"
	echo "$QHCA_ROOT/target/release"
}

bg_build qemu "$QHCA_ROOT/scripts/build-qemu.sh"
bg_build cargo cargo_build
KDIR=$("$QHCA_ROOT/scripts/build-kernel.sh" | tail -n1) || {
	bg_stop
	die "the kernel build failed (its messages are above)"
}
bg_wait qemu
QEMU=$(bg_path qemu)
bg_wait cargo
BIN=$(bg_path cargo)
KO=$("$QHCA_ROOT/scripts/build-kmod.sh" "$KDIR" | tail -n1)
"$QHCA_ROOT/scripts/install-provider.sh" "$BIN"
step "gcc: qhca-verbs-check (tests/verbs-c/*.c, an unmodified libibverbs program)"
gcc -O2 -Wall -Wextra -Werror -o "$BIN/qhca-verbs-check" \
	"$QHCA_ROOT"/tests/verbs-c/*.c -libverbs ||
	die "building qhca-verbs-check failed (gcc, see above)"
step "mpicc: qhca-mpi-check (tests/mpi/mpi_check.c, Open MPI over UCX)"
mpicc -O2 -Wall -Wextra -Werror -o "$BIN/qhca-mpi-check" "$QHCA_ROOT/tests/mpi/mpi_check.c" ||
	die "building qhca-mpi-check failed (mpicc, see above)"
export KDIR QEMU KO BIN
