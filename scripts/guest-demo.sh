#!/usr/bin/env bash
# Runs INSIDE the demo VM: loads the driver and shows the device. Usage: guest-demo.sh QHCA_KO QHCA_INFO
set -eu
ko=$1 info=$2
# shellcheck source=guest-load.sh
. "$(dirname "$0")/guest-load.sh"
qhca_insmod "$ko"
qhca_links_up
dev=$(ls /sys/bus/pci/drivers/qhca/*/infiniband | head -n1)
echo "--- dmesg | grep qhca"
dmesg | grep -E '^\[[ 0-9.]+\] qhca'
echo "--- ls -l /dev/infiniband"
ls -l /dev/infiniband
echo "--- the RDMA core's view: rdma dev; rdma link; /sys/class/infiniband/$dev"
rdma dev show "$dev" || true
rdma link show "$dev/1" || true
grep -H . "/sys/class/infiniband/$dev"/{node_type,node_guid,fw_ver,node_desc} \
	"/sys/class/infiniband/$dev"/ports/1/{state,phys_state,link_layer,rate} 2>/dev/null || true
echo "--- ibv_devinfo -d $dev (Debian's libibverbs, qhca's installed provider)"
ibv_devinfo -d "$dev" || true
echo "--- qhca-info -v"
"$info" -v
