#!/usr/bin/env bash
# The README's demo command: installs and builds whatever is missing, boots a VM with
# `-device qhca`, loads the driver and runs qhca-info inside it.
source "$(dirname "$0")/lib.sh"
source "$QHCA_ROOT/scripts/build-all.sh"
step "demo: booting the VM (TCG, about 15 s)"
"$QHCA_ROOT/scripts/vm.sh" --uars 32 -- bash "$QHCA_ROOT/scripts/guest-demo.sh" "$KO" "$BIN/qhca-info"
