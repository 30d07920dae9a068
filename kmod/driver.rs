// SPDX-License-Identifier: GPL-2.0

//! PCI binding: probe brings the device up, unbind takes it away from every open file.

use crate::{device::QhcaDevice, file::MiscNode, regs, uapi};
use kernel::{
    bindings,
    device::{Bound, Core},
    dma::{DmaMask, Device as _},
    io::Io,
    irq::{self, IrqReturn},
    pci,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
    time::{Delta, Instant, Monotonic},
};

/// How many qhca devices one system may have (`/dev/qhca0` .. `/dev/qhca7`).
const MAX_DEVICES: usize = 8;
const NAMES: [&CStr; MAX_DEVICES] =
    [c"qhca0", c"qhca1", c"qhca2", c"qhca3", c"qhca4", c"qhca5", c"qhca6", c"qhca7"];

/// How long the device may take to become ready after ENABLE.
const ENABLE_TIMEOUT: Delta = Delta::from_millis(1000);

/// The ID table entry for the device.
///
/// `pci::Vendor` has no constant for QEMU's vendor ID 0x1234 and cannot be constructed outside
/// the kernel crate, so the entry is built from the C structure.
const QHCA_ID: pci::DeviceId = {
    let raw = bindings::pci_device_id {
        vendor: uapi::QHCA_PCI_VENDOR_ID,
        device: uapi::QHCA_PCI_DEVICE_ID,
        subvendor: !0,
        subdevice: !0,
        class: 0,
        class_mask: 0,
        driver_data: 0,
        override_only: 0,
    };
    // SAFETY: `pci::DeviceId` is `#[repr(transparent)]` over `bindings::pci_device_id`, and every
    // value of that plain C struct is a valid ID (here: match vendor and device, any subsystem).
    unsafe { core::mem::transmute::<bindings::pci_device_id, pci::DeviceId>(raw) }
};

kernel::pci_device_table!(
    PCI_TABLE,
    <QhcaDriver as pci::Driver>::IdInfo,
    [(QHCA_ID, ())]
);

/// Numbers for `/dev/qhcaN`, one bit per device in use.
static INSTANCES: Atomic<u32> = Atomic::new(0);

/// A device number taken from [`INSTANCES`], given back on drop.
struct Instance(u32);

impl Instance {
    fn take() -> Result<Self> {
        let mut cur = INSTANCES.load(Relaxed);
        loop {
            let free = (!cur).trailing_zeros();
            if free as usize >= MAX_DEVICES {
                return Err(ENOSPC);
            }
            match INSTANCES.cmpxchg(cur, cur | (1 << free), Relaxed) {
                Ok(_) => return Ok(Self(free)),
                Err(now) => cur = now,
            }
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let mut cur = INSTANCES.load(Relaxed);
        while let Err(now) = INSTANCES.cmpxchg(cur, cur & !(1 << self.0), Relaxed) {
            cur = now;
        }
    }
}

/// The event-queue interrupt: the hard half counts it, the thread drains the event queue.
#[pin_data]
struct EqIrq {
    dev: Arc<QhcaDevice>,
}

impl irq::ThreadedHandler for EqIrq {
    fn handle(&self) -> irq::ThreadedIrqReturn {
        self.dev.cmdq.count_irq();
        irq::ThreadedIrqReturn::WakeThread
    }

    fn handle_threaded(&self) -> IrqReturn {
        self.dev.service_events();
        IrqReturn::Handled
    }
}

/// What one bound device owns.
///
/// Fields are dropped in declaration order, which is the teardown order: first no new opens
/// (`misc`), then no interrupt (`irq`), then the vectors and BARs. The device itself was reset in
/// `unbind`, so it does no more DMA into `dev`'s rings, which live until the last file closes.
#[pin_data]
pub(crate) struct Qhca<'bound> {
    #[pin]
    misc: MiscNode,
    #[pin]
    irq: irq::ThreadedRegistration<'bound, EqIrq>,
    vectors: pci::IrqVectorRegistration<'bound>,
    /// Claims BAR2; the kernel never touches the doorbell pages, it only maps them to user space.
    _uar_bar: pci::Bar<'bound>,
    dev: Arc<QhcaDevice>,
    _instance: Instance,
    _debugfs: crate::shim::Debugfs,
}

pub(crate) struct QhcaDriver;

impl pci::Driver for QhcaDriver {
    type IdInfo = ();
    type Data<'bound> = Qhca<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        pin_init::pin_init_scope(move || {
            pdev.enable_device_mem()?;
            pdev.set_master();
            // SAFETY: Nothing allocates or maps DMA memory for this device before this call.
            unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };

            let bar0 = pdev.iomap_region_sized::<{ regs::SIZE }>(uapi::QHCA_BAR_REGS, c"qhca/regs")?;
            let magic = bar0.read32(regs::MAGIC);
            let abi = bar0.read32(regs::ABI_VERSION);
            if magic != uapi::QHCA_MAGIC || abi != uapi::QHCA_ABI_VERSION {
                dev_err!(pdev, "not a qhca ABI {} device (magic {:#x}, ABI {})\n",
                    uapi::QHCA_ABI_VERSION, magic, abi);
                return Err(ENODEV);
            }
            let uar_bar = pdev.iomap_region(uapi::QHCA_BAR_UAR, c"qhca/uar")?;
            let uar_phys = pdev.resource_start(uapi::QHCA_BAR_UAR)?;
            let instance = Instance::take()?;
            let dev = Arc::pin_init(
                QhcaDevice::new(pdev, instance.0, bar0.into_devres()?, uar_phys)?,
                GFP_KERNEL,
            )?;
            let msix = pci::IrqTypes::default().with(pci::IrqType::MsiX);
            let name = NAMES[instance.0 as usize];
            let irq_dev = dev.clone();
            let eq_irq = try_pin_init!(EqIrq { dev: irq_dev }? Error);

            Ok(try_pin_init!(Qhca {
                vectors: pdev.alloc_irq_vectors(1, 1, msix)?,
                // SAFETY (both blocks): `vectors` is initialized before this expression runs
                // (fields are initialized in initializer order), lives at a pinned, stable address
                // inside `Qhca`, and is dropped after `irq` (declaration order), so the reference
                // outlives the registration that holds it. The registration is never leaked.
                irq <- unsafe {
                    irq::ThreadedRegistration::new(
                        (&*core::ptr::from_ref(vectors)).index(uapi::QHCA_MSIX_VEC_EQ as usize)?.into(),
                        irq::Flags::ONESHOT,
                        c"qhca-eq",
                        eq_irq,
                    )
                },
                _: { start_device(pdev, &dev)?; },
                misc <- MiscNode::new(name, dev.clone()),
                _uar_bar: uar_bar,
                dev,
                _instance: instance,
                _debugfs: crate::shim::Debugfs::get(),
            }))
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Qhca<'bound>>) {
        this.dev.revoke_files();
        let (errors, violations) = regs::with(&this.dev.regs, |b| {
            (b.read32(regs::GUEST_ERRORS), b.read32(regs::DB_VIOLATIONS))
        })
        .unwrap_or((0, 0));
        this.dev.reset();
        dev_info!(
            pdev,
            "qhca{}: unbound; {} event interrupts, {} guest errors and {} doorbell violations seen by the device\n",
            this.dev.instance,
            this.dev.cmdq.irq_count(),
            errors,
            violations
        );
    }
}

/// Resets the device, hands it the rings, enables it and logs what it can do.
fn start_device(pdev: &pci::Device<Bound>, dev: &QhcaDevice) -> Result {
    regs::with(&dev.regs, |b| {
        b.write32(uapi::QHCA_CTRL_RESET, regs::CTRL);
        dev.cmdq.program(b);
        b.write32(uapi::QHCA_INTR_EQ_ENABLE, regs::INTR_CTRL);
        b.write32(uapi::QHCA_CTRL_ENABLE, regs::CTRL);
    })?;
    let start = Instant::<Monotonic>::now();
    loop {
        let status = regs::with(&dev.regs, |b| b.read32(regs::STATUS))?;
        if status & uapi::QHCA_STATUS_READY != 0 {
            break;
        }
        if status & (uapi::QHCA_STATUS_CFG_ERROR | uapi::QHCA_STATUS_FATAL) != 0
            || start.elapsed() > ENABLE_TIMEOUT
        {
            dev_err!(pdev, "device did not become ready (status {:#x})\n", status);
            return Err(EIO);
        }
        kernel::time::delay::fsleep(Delta::from_micros(100));
    }

    let attr = dev.query(pdev.as_ref())?;
    dev_info!(
        pdev,
        "qhca{}: ABI {}, fw {}.{}.{}, node GUID {:016x}, {} doorbell pages, caps {:#x}\n",
        dev.instance,
        attr.abi_version,
        attr.fw_version >> 32,
        (attr.fw_version >> 16) & 0xffff,
        attr.fw_version & 0xffff,
        attr.node_guid,
        attr.num_uars,
        attr.caps
    );
    dev_info!(
        pdev,
        "qhca{}: max_qp {} max_qp_wr {} max_sge {} max_inline {} max_cq {} max_cqe {} max_mr {} max_pd {}\n",
        dev.instance,
        attr.max_qp,
        attr.max_qp_wr,
        attr.max_sge,
        attr.max_inline,
        attr.max_cq,
        attr.max_cqe,
        attr.max_mr,
        attr.max_pd
    );
    Ok(())
}
