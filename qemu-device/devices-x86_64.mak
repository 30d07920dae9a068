# The only devices QEMU is built with for qhca (scripts/build-qemu.sh configures it with
# --without-default-devices --with-devices-x86_64=qhca, this file linked in as
# configs/devices/x86_64-softmmu/qhca.mak): what our VMs and qtest start, and what
# those select. A device missing here makes QEMU say "'-device X' is not a valid device model
# name" at once.

# The machine (it selects the PC platform: APIC, PIT, RTC, i8042, ICH9 LPC and AHCI, ACPI, the
# ISA serial port that carries virtme-ng's console).
CONFIG_Q35=y
# i440FX ("pc"): qtest's device on a conventional PCI bus.
CONFIG_I440FX=y
# intel-iommu: the VM suite behind a guest IOMMU (vm.sh --iommu).
CONFIG_VTD=y
# pcie-root-port: qtest's device behind a root port.
CONFIG_PCIE_PORT=y
# virtio: the NIC that rxe runs on (vm.sh --nic), and virtme-ng's root filesystem, shared
# directories, console and script I/O.
CONFIG_VIRTIO_PCI=y
CONFIG_VIRTIO_NET=y
CONFIG_VIRTIO_SERIAL=y
CONFIG_VIRTIO_9P=y
# virtme-ng's watchdog.
CONFIG_WDT_IB6300ESB=y
# Ours.
CONFIG_QHCA=y
