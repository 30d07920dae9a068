#!/usr/bin/env bash
# The README's demo command: installs and builds whatever is missing, boots a VM with
# `-device qhca`, loads the driver and runs qhca-info inside it.
source "$(dirname "$0")/lib.sh"
source "$QHCA_ROOT/scripts/build-all.sh"
step "setup done: everything is built (the time in brackets counts from the start)"
step "demo: booting the VM (TCG, about 30 s)"
"$QHCA_ROOT/scripts/vm.sh" --timeout 600 --console "$QHCA_CACHE/logs/demo.console" --uars 32 -- \
	bash "$QHCA_ROOT/scripts/guest-demo.sh" "$KO" "$BIN/qhca-info"
step "demo: done"
