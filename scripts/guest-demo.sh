#!/usr/bin/env bash
# Runs INSIDE the demo VM: loads the driver and shows the device. Usage: guest-demo.sh QHCA_KO QHCA_INFO
set -eu
ko=$1 info=$2
insmod "$ko"
for _ in $(seq 50); do [ -c /dev/qhca0 ] && break; sleep 0.1; done
echo "--- dmesg | grep qhca"
dmesg | grep -E '^\[[ 0-9.]+\] qhca'
echo "--- ls -l /dev/qhca*"
ls -l /dev/qhca*
echo "--- qhca-info -v"
"$info" -v
