#!/usr/bin/env bash
# Builds qemu-system-x86_64 from Debian's QEMU 10.0 source package (trixie, Debian patches applied) with the
# qhca device (qemu-device/) built in. The source lives in ~/.cache/qhca/src/qemu-<version>; the build in
# ~/.cache/qhca/qemu-<version>-<key>, keyed by the configure flags and this script. Re-running after a change
# to qemu-device/ rebuilds only the qhca objects and relinks. Prints the binary's path on stdout (last line);
# everything else goes to stderr.
#
# Run the result with Debian's firmware: -L /usr/share/qemu -L /usr/share/seabios
# QHCA_QEMU_JOBS sets ninja's parallelism (default 2).
source "$(dirname "$0")/lib.sh"

jobs=${QHCA_QEMU_JOBS:-2}

# --- 1. the source package --------------------------------------------------------------------------------
# The version trixie serves (with its epoch, e.g. 1:10.0.13+ds-0+deb13u1); nothing is downloaded yet.
src_version() {
	apt-get source --only-source --print-uris "qemu/$QHCA_QEMU_SUITE" 2>&1 |
		sed -n "s/^Selected version '\([^']*\)'.*/\1/p"
}
ver=$(src_version || true)
if [ -z "$ver" ]; then
	step "qemu: apt-get update (no deb-src entry served qemu/$QHCA_QEMU_SUITE yet)"
	as_root apt-get update -q >/dev/null || true
	ver=$(src_version || true)
fi
[ -n "$ver" ] || die "source package qemu/$QHCA_QEMU_SUITE (QEMU 10.0.x) is not served: is deb-src for $QHCA_QEMU_SUITE configured? (scripts/setup-host.sh)"
case ${ver#*:} in
10.0.*) ;;
*) die "source package qemu/$QHCA_QEMU_SUITE is version $ver, but qhca is written against QEMU 10.0.x" ;;
esac

src=$QHCA_CACHE/src/qemu-${ver#*:}
if [ ! -f "$src/configure" ]; then
	step "qemu: fetching source package qemu $ver ($QHCA_QEMU_SUITE) into $src"
	tmp=$src.tmp
	rm -rf "$tmp" && mkdir -p "$tmp"
	(cd "$tmp" && apt-get source -q --only-source "qemu=$ver" >"$tmp/apt-source.log" 2>&1) || {
		tail -20 "$tmp/apt-source.log" >&2
		die "apt-get source qemu=$ver failed (log above)"
	}
	dir=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d -name 'qemu-*' | head -1)
	[ -n "$dir" ] && [ -f "$dir/configure" ] || die "apt-get source qemu=$ver did not unpack a source tree in $tmp"
	mv "$dir" "$src"
	rm -rf "$tmp"
fi

# --- 2. hook the device into the tree (idempotent) ---------------------------------------------------------
# The links are recreated every run: CI builds from a fresh clone at another path.
# The device's sources are symlinked in. When the link moves to another checkout (a second git
# worktree), ninja compares the new files' mtimes with outputs built from the old ones and may
# keep stale objects and generated trace code: touch the device's files so that they are rebuilt.
if [ "$(readlink "$src/hw/misc/qhca" 2>/dev/null)" != "$QHCA_ROOT/qemu-device" ] ||
	[ "$(readlink "$src/hw/misc/qhca-uapi" 2>/dev/null)" != "$QHCA_ROOT/uapi/include" ]; then
	touch "$QHCA_ROOT"/qemu-device/* "$QHCA_ROOT"/uapi/include/*
fi
ln -sfn "$QHCA_ROOT/qemu-device" "$src/hw/misc/qhca"
ln -sfn "$QHCA_ROOT/uapi/include" "$src/hw/misc/qhca-uapi"
# The devices our VMs, qtest and the fuzzer use, and nothing else (--with-devices-x86_64=qhca).
ln -sfn "$QHCA_ROOT/qemu-device/devices-x86_64.mak" "$src/configs/devices/x86_64-softmmu/qhca.mak"
# append_once FILE LINE: append LINE to FILE unless it is already there.
append_once() {
	grep -qxF "$2" "$1" || printf '%s\n' "$2" >>"$1"
}
append_once "$src/hw/misc/meson.build" "subdir('qhca')"
append_once "$src/hw/misc/Kconfig" "source qhca/Kconfig"
# trace-events files are found through the top-level trace_events_subdirs list, next to hw/misc's own.
if ! grep -qF "'hw/misc/qhca'," "$src/meson.build"; then
	sed -i "s|^\( *\)'hw/misc/macio',\$|&\n\1'hw/misc/qhca',|" "$src/meson.build"
	grep -qF "'hw/misc/qhca'," "$src/meson.build" || die "could not add hw/misc/qhca to trace_events_subdirs in $src/meson.build"
fi

# --- 3. configure (once per key) ---------------------------------------------------------------------------
# A real interpreter path, not a pyenv shim: configure builds its venv from it (with system site-packages,
# where meson 1.5.0 is pip-installed: the +ds source ships no python/wheels).
python=$(python3 -c 'import sys; print(sys.executable)')
CONFIGURE_FLAGS=(
	--target-list=x86_64-softmmu
	--without-default-features
	--without-default-devices --with-devices-x86_64=qhca
	--enable-kvm --enable-tcg
	--enable-virtfs --enable-attr --enable-cap-ng
	--enable-slirp --enable-fdt=system
	--disable-install-blobs --disable-docs --disable-werror
	--python="$python"
)
key=$( (printf '%s\n' "${CONFIGURE_FLAGS[@]}"; cat "$0") | sha256sum | cut -c1-12)
out=$QHCA_CACHE/qemu-${ver#*:}-$key

if [ ! -f "$out/build.ninja" ]; then
	rm -rf "$out" && mkdir -p "$out"
	step "qemu: configuring $ver in $out"
	(cd "$out" && "$src/configure" "${CONFIGURE_FLAGS[@]}") >"$out/configure.log" 2>&1 || {
		tail -30 "$out/configure.log" >&2
		mv "$out" "$out.failed.$$"
		die "QEMU configure failed (log above; kept in $out.failed.$$/configure.log)"
	}
fi

# --- 4. build ----------------------------------------------------------------------------------------------
step "qemu: building qemu-system-x86_64 with $jobs jobs (about 1350 steps from scratch, seconds after a device change)"
if ! ninja -C "$out" -j"$jobs" qemu-system-x86_64 >"$out/build.log" 2>&1; then
	grep -E "error|Error|FAILED" "$out/build.log" | head -40 >&2
	die "QEMU build failed; full log in $out/build.log"
fi
step "qemu: done ($(grep -c '^\[' "$out/build.log" || true) build steps)"
echo "$out/qemu-system-x86_64"
