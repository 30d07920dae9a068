#!/usr/bin/env bash
# Fuzzes the device with QEMU's generic fuzzer (docs/devel/testing/fuzzing.rst in QEMU's tree): random
# MMIO to its BARs and random data for every DMA it makes, under libFuzzer with ASan and UBSan.
#
#   scripts/fuzz.sh [SECONDS]        # default 600; the corpus stays in ~/.cache/qhca/fuzz/corpus
#
# Our entry (qemu-device/fuzz/generic-fuzz-qhca.h) is added to QEMU's
# tests/qtest/fuzz/generic_fuzz_configs.h, so that the target is generic-fuzz-qhca. The fuzzer is a
# build of its own (clang-19, --enable-fuzzing --enable-asan --enable-ubsan) in
# ~/.cache/qhca/qemu-fuzz-<key>, next to the normal one; the first build takes about as long as
# QEMU's. Exits non-zero, with the crashing input kept in ~/.cache/qhca/fuzz/, if the fuzzer found
# a crash, a sanitizer report or a hang (a single input running over 25 s). To replay an input:
#   QEMU_FUZZ_TIMEOUT=0 QTEST_LOG=1 ~/.cache/qhca/qemu-fuzz-*/qemu-fuzz-x86_64 \
#       --fuzz-target=generic-fuzz-qhca ~/.cache/qhca/fuzz/crash-...
source "$(dirname "$0")/lib.sh"

secs=${1:-600}
[[ $secs =~ ^[0-9]+$ ]] || die "usage: scripts/fuzz.sh [SECONDS]"

# The source tree, hooked up (and the normal build, which is cached).
"$QHCA_ROOT/scripts/build-qemu.sh" >/dev/null
src=$(ls -d "$QHCA_CACHE"/src/qemu-10.0.* | head -n1)
[ -f "$src/configure" ] || die "no QEMU source tree in $QHCA_CACHE/src"

if ! [ -f /usr/lib/llvm-19/lib/clang/19/lib/linux/libclang_rt.fuzzer-x86_64.a ]; then
	step "fuzz: apt: installing clang-19's libFuzzer and sanitizer runtimes (libclang-rt-19-dev)"
	as_root apt-get install -y -q libclang-rt-19-dev >/dev/null || die "apt-get install libclang-rt-19-dev failed"
fi

# The fuzzing build's devices: the machine and ours.
ln -sfn "$QHCA_ROOT/qemu-device/fuzz/devices-x86_64.mak" "$src/configs/devices/x86_64-softmmu/qhca-fuzz.mak"

# The entry, inserted between the last predefined config and the array's end of the file as QEMU
# ships it (kept as .orig), rewritten only when the entry changed (a rewrite rebuilds the target).
configs=$src/tests/qtest/fuzz/generic_fuzz_configs.h
[ -f "$configs.orig" ] || cp "$configs" "$configs.orig"
python3 - "$configs" "$QHCA_ROOT/qemu-device/fuzz/generic-fuzz-qhca.h" <<'PY'
import sys
path, entry = sys.argv[1], open(sys.argv[2]).read()
s = open(path + ".orig").read()
end = s.rindex("\n};")
head = s[:end].rstrip()
if not head.endswith("}"):
    sys.exit("generic_fuzz_configs.h: unexpected layout")
new = head + ",\n" + entry + s[end + 1:]
if open(path).read() != new:
    open(path, "w").write(new)
PY

flags=(--target-list=x86_64-softmmu --without-default-features --without-default-devices
	--with-devices-x86_64=qhca-fuzz --enable-tcg --enable-fuzzing
	--enable-asan --enable-ubsan --disable-werror --disable-docs --disable-install-blobs
	--python="$(python3 -c 'import sys; print(sys.executable)')")
# Keyed by what configures the build: the flags and the device set (the entry is a source file,
# which ninja follows).
key=$( (printf '%s\n' "${flags[@]}"; cat "$QHCA_ROOT/qemu-device/fuzz/devices-x86_64.mak") |
	sha256sum | cut -c1-12)
out=$QHCA_CACHE/qemu-fuzz-$key
if [ ! -f "$out/build.ninja" ]; then
	rm -rf "$out" && mkdir -p "$out"
	step "fuzz: configuring QEMU for libFuzzer (clang-19, ASan, UBSan) in $out"
	(cd "$out" && CC=clang-19 CXX=clang++-19 "$src/configure" "${flags[@]}") >"$out/configure.log" 2>&1 || {
		tail -30 "$out/configure.log" >&2
		die "fuzz build configure failed (log above)"
	}
fi
step "fuzz: building qemu-fuzz-x86_64 (a whole QEMU the first time; the device after a change)"
ninja -C "$out" -j"${QHCA_QEMU_JOBS:-2}" qemu-fuzz-x86_64 >"$out/build.log" 2>&1 || {
	grep -E "error|FAILED" "$out/build.log" | head -30 >&2
	die "fuzz build failed; log in $out/build.log"
}

work=$QHCA_CACHE/fuzz
mkdir -p "$work/corpus"
step "fuzz: generic-fuzz-qhca for $secs s (corpus $work/corpus)"
cd "$work"
set +e
ASAN_OPTIONS=detect_leaks=0 "$out/qemu-fuzz-x86_64" --fuzz-target=generic-fuzz-qhca \
	-max_total_time="$secs" -timeout=25 -print_final_stats=1 corpus/ 2>&1 |
	tee "$work/fuzz.log" | grep -E '^#[0-9]+ +(INITED|DONE|pulse)|ERROR|SUMMARY|crash-|timeout-|oom-|stat::'
rc=${PIPESTATUS[0]}
set -e
found=$(ls "$work"/crash-* "$work"/timeout-* "$work"/oom-* 2>/dev/null | head -n5 || true)
if [ "$rc" != 0 ] || [ -n "$found" ]; then
	echo "qhca: the fuzzer found a problem (exit $rc): $found; log $work/fuzz.log" >&2
	exit 1
fi
step "fuzz: no crash, sanitizer report or hang in $secs s"
