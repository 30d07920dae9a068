# shellcheck shell=bash
# Shared helpers for qhca's scripts: progress lines, the build cache, and tool paths.
# Sourced, never executed.

set -euo pipefail

QHCA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
QHCA_CACHE=${QHCA_CACHE:-$HOME/.cache/qhca}
QHCA_T0=${QHCA_T0:-$(date +%s)}
export QHCA_ROOT QHCA_CACHE QHCA_T0
mkdir -p "$QHCA_CACHE"

# The kernel and QEMU versions we build. Changing either invalidates its cache.
QHCA_KVER=7.3
QHCA_QEMU_SUITE=trixie

export PATH="$HOME/.cargo/bin:$HOME/.local/bin:$PATH"

# step "message": one progress line with the time since the top-level command started.
step() {
	local now el
	now=$(date +%s)
	el=$((now - QHCA_T0))
	printf '\033[1m==> [%02d:%02d] %s\033[0m\n' $((el / 60)) $((el % 60)) "$*" >&2
}

die() {
	printf 'qhca: error: %s\n' "$*" >&2
	exit 1
}

# hash_of FILE... : a short, stable key for cache directories.
hash_of() {
	cat "$@" | sha256sum | cut -c1-16
}

# Root-or-sudo wrapper: CI and developer machines run as root; elsewhere use sudo.
as_root() {
	if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

rustc_version() {
	rustc --version | awk '{print $2}'
}

# Where Debian's rust-src package puts the standard library sources for this rustc.
rust_lib_src() {
	echo "/usr/src/rustc-$(rustc_version)/library"
}
