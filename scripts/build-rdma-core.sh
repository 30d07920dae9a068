#!/usr/bin/env bash
# Builds rdma-core's own test suite (tests/ and pyverbs) with the libibverbs and providers of the
# same release, from Debian's source package (trixie's rdma-core; its upstream tarball, checked
# against the archive's SHA256), so that the VM suite can run `run_tests.py` on qhca and on rxe.
#
# Why not bookworm's 44 that the host runs: the archive no longer serves its upstream tarball
# (rdma-core_44.0.orig.tar.gz answers 404), and trixie's python3-pyverbs needs trixie's libc. The
# tests of 56.1 need pyverbs 56.1, and pyverbs 56.1 needs libibverbs 56.1, so all three are built
# here, in place (cmake -DIN_PLACE=1: the build's libibverbs reads its own etc/libibverbs.d and
# nothing is installed). Its private provider ABI is IBVERBS_PRIVATE_34, as bookworm's, so the
# installed qhca provider loads into it unchanged: etc/libibverbs.d/qhca.driver names it by path.
#
# Prints the build directory on stdout (last line); run the suite as BUILD/bin/run_tests.py.
source "$(dirname "$0")/lib.sh"

suite=trixie
uris=$(apt-get source --only-source --print-uris "rdma-core/$suite" 2>/dev/null || true)
ver=$(sed -n "s/^Selected version '\([^']*\)'.*/\1/p" <<<"$uris")
if [ -z "$ver" ]; then
	step "rdma-core: apt-get update (no deb-src entry served rdma-core/$suite yet)"
	as_root apt-get update -q >/dev/null || true
	uris=$(apt-get source --only-source --print-uris "rdma-core/$suite" 2>/dev/null || true)
	ver=$(sed -n "s/^Selected version '\([^']*\)'.*/\1/p" <<<"$uris")
fi
[ -n "$ver" ] || die "source package rdma-core/$suite is not served: is deb-src for $suite configured? (scripts/setup-host.sh)"
upstream=${ver#*:}
upstream=${upstream%-*}
# 'URI' NAME SIZE SHA256:HEX for the upstream tarball.
read -r uri name _ sum < <(grep -E "rdma-core_${upstream//./\\.}\.orig\.tar\.gz" <<<"$uris") ||
	die "apt-get source --print-uris rdma-core/$suite lists no upstream tarball"
uri=${uri//\'/}
sum=${sum#SHA256:}

key=$(cat "$0" | hash_of /dev/stdin)
build=$QHCA_CACHE/rdma-core-$upstream-$key
if [ ! -f "$build/.built" ]; then
	src=$QHCA_CACHE/src/rdma-core-$upstream
	if [ ! -f "$src/CMakeLists.txt" ]; then
		step "rdma-core: fetching $name ($suite's rdma-core $ver)"
		tmp=$src.tmp
		rm -rf "$tmp" && mkdir -p "$tmp"
		curl -fsSL -o "$tmp/$name" "$uri" || die "could not download $uri"
		echo "$sum  $tmp/$name" | sha256sum -c --quiet - ||
			die "$name does not match the archive's SHA256 $sum"
		tar -xzf "$tmp/$name" -C "$tmp"
		[ -f "$tmp/rdma-core-$upstream/CMakeLists.txt" ] || die "$name holds no rdma-core-$upstream/"
		rm -rf "$src"
		mv "$tmp/rdma-core-$upstream" "$src"
		rm -rf "$tmp"
	fi
	step "rdma-core: building $upstream in place (libibverbs, providers, pyverbs, tests; about 2 minutes)"
	# IN_PLACE bakes the build directory into run paths and scripts: build where it stays; the
	# stamp keeps a half-built tree from counting as built.
	rm -rf "$build" && mkdir -p "$build"
	(
		cd "$build"
		cmake -GNinja -DIN_PLACE=1 -DCMAKE_BUILD_TYPE=Release -DNO_MAN_PAGES=1 \
			-DPYTHON_EXECUTABLE=/usr/bin/python3 "$src" >cmake.log 2>&1 &&
			ninja -j"${QHCA_JOBS:-2}" >ninja.log 2>&1
	) || {
		tail -n 30 "$build/cmake.log" "$build/ninja.log" >&2 2>/dev/null
		die "rdma-core $upstream did not build (logs in $build)"
	}
	touch "$build/.built"
fi
# The installed qhca provider (scripts/install-provider.sh), by absolute path.
prov=/usr/lib/$(gcc -print-multiarch)/libibverbs/libqhca
echo "driver $prov" >"$build/etc/libibverbs.d/qhca.driver"
echo "$build"
