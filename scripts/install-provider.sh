#!/usr/bin/env bash
# Installs the libibverbs provider built from verbs-provider/ where the distribution's libibverbs
# looks for it: /usr/lib/<triplet>/libibverbs/libqhca-rdmav34.so and /etc/libibverbs.d/qhca.driver
# ("driver qhca"). Only what differs is written. The guests mount the host's root, so they see the
# same files.
#
#   install-provider.sh BIN      # BIN: the cargo release directory holding libqhca_rdmav34.so
source "$(dirname "$0")/lib.sh"

bin=${1:?usage: install-provider.sh BIN}
so=$bin/libqhca_rdmav34.so
[ -f "$so" ] || die "missing $so (cargo build --release -p qhca-verbs-provider)"
dir=/usr/lib/$(gcc -print-multiarch)/libibverbs
[ -d "$dir" ] || die "$dir is missing: is libibverbs1 installed?"
if ! cmp -s "$so" "$dir/libqhca-rdmav34.so"; then
	step "provider: installing $dir/libqhca-rdmav34.so"
	as_root install -m 0644 "$so" "$dir/libqhca-rdmav34.so"
fi
driver=/etc/libibverbs.d/qhca.driver
if [ "$(cat "$driver" 2>/dev/null)" != "driver qhca" ]; then
	step "provider: installing $driver"
	echo "driver qhca" | as_root tee "$driver" >/dev/null
fi
