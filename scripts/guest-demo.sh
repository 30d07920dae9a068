#!/usr/bin/env bash
# Runs INSIDE the demo VM: loads the driver and shows the device. Usage: guest-demo.sh QHCA_KO QHCA_INFO
set -eu
ko=$1 info=$2
# shellcheck source=guest-load.sh
. "$(dirname "$0")/guest-load.sh"
qhca_insmod "$ko"
echo "--- dmesg | grep qhca"
dmesg | grep -E '^\[[ 0-9.]+\] qhca'
echo "--- ls -l /dev/qhca*"
ls -l /dev/qhca*
echo "--- the RDMA core's view: rdma dev; rdma link; /sys/class/infiniband/qhca0"
rdma dev show qhca0 || true
rdma link show qhca0/1 || true
grep -H . /sys/class/infiniband/qhca0/{node_type,node_guid,fw_ver,node_desc} \
	/sys/class/infiniband/qhca0/ports/1/{state,phys_state,link_layer,rate} 2>/dev/null || true
echo "--- qhca-info -v"
"$info" -v
