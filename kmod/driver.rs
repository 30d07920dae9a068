// SPDX-License-Identifier: GPL-2.0

//! PCI binding: probe brings the device up, unbind takes it away from every user context.

use crate::{cmdq::EqHost, device::QhcaDevice, ib::QhcaIb, netdev::Netdev, rdma, regs, uapi};
use kernel::{
    device::{Bound, Core},
    dma::{Device as _, DmaMask},
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

/// How many qhca devices one system may have (`qhca0` .. `qhca7` in the RDMA core).
const MAX_DEVICES: usize = 8;
const NAMES: [&CStr; MAX_DEVICES] = [
    c"qhca0", c"qhca1", c"qhca2", c"qhca3", c"qhca4", c"qhca5", c"qhca6", c"qhca7",
];

/// How long the device may take to become ready after ENABLE.
const ENABLE_TIMEOUT: Delta = Delta::from_millis(1000);

/// The ID table entry for the device: 1af4:10f0, any subsystem.
const QHCA_ID: pci::DeviceId =
    pci::DeviceId::from_id(pci::Vendor::REDHAT_QUMRANET, uapi::QHCA_PCI_DEVICE_ID);

const _: () = assert!(
    uapi::QHCA_PCI_VENDOR_ID == 0x1af4,
    "QHCA_PCI_VENDOR_ID is Red Hat's"
);

kernel::pci_device_table!(
    PCI_TABLE,
    <QhcaDriver as pci::Driver>::IdInfo,
    [(QHCA_ID, ())]
);

/// Numbers for `qhcaN`, one bit per device in use.
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
        QhcaDevice::service_events(&self.dev);
        IrqReturn::Handled
    }
}

/// The device, started: stops it (reset, bus mastering off) when dropped, so that nothing the
/// device was given is freed while it runs, on the probe error path as after unbind.
struct Running(Arc<QhcaDevice>);

impl Running {
    /// Starts the device; on failure stops it again before anything is freed.
    fn start(pdev: &pci::Device<Bound>, dev: &Arc<QhcaDevice>) -> Result<Self> {
        let running = Self(dev.clone());
        start_device(pdev, dev)?;
        Ok(running)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// What one bound device owns.
///
/// Fields are dropped in declaration order, which is the teardown order: first the RDMA core's
/// device goes (`ib`; `unbind` unregistered it already), then the device stops (`running`;
/// `unbind` stopped it already), then no interrupt (`irq`), then the vectors and BARs. `unbind`
/// already freed every DMA resource (the rings and every user context's objects), while the
/// driver was still bound; user contexts the core has not deallocated yet keep only plain memory
/// alive. On the probe error path the fields initialised so far are dropped, `running` among
/// them, so the device is stopped there too.
#[pin_data]
pub(crate) struct Qhca<'bound> {
    ib: rdma::Registration<'bound, QhcaIb>,
    running: Running,
    #[pin]
    irq: irq::ThreadedRegistration<'bound, EqIrq>,
    vectors: pci::IrqVectorRegistration<'bound>,
    dev: Arc<QhcaDevice>,
    #[pin]
    _debugfs: crate::debugfs::DeviceDir,
    _instance: Instance,
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
            // SAFETY: Nothing allocates or maps DMA memory for this device before this call.
            unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };

            let bar0 =
                pdev.iomap_region_sized::<{ regs::SIZE }>(uapi::QHCA_BAR_REGS, c"qhca/regs")?;
            let magic = bar0.read32(regs::MAGIC);
            let abi = bar0.read32(regs::ABI_VERSION);
            if magic != uapi::QHCA_MAGIC || abi != uapi::QHCA_ABI_VERSION {
                dev_err!(
                    pdev,
                    "refusing device: driver speaks qhca ABI {}, device has magic {:#x}, ABI {}\n",
                    uapi::QHCA_ABI_VERSION,
                    magic,
                    abi
                );
                return Err(ENODEV);
            }
            // Reset before bus mastering goes on: whatever a previous driver left running stops.
            bar0.write32(uapi::QHCA_CTRL_RESET, regs::CTRL);
            pdev.set_master();
            let uar_bar = pdev.iomap_region(uapi::QHCA_BAR_UAR, c"qhca/uar")?;
            let uar_phys = pdev.resource_start(uapi::QHCA_BAR_UAR)?;
            let instance = Instance::take()?;
            let dev = Arc::pin_init(
                QhcaDevice::new(
                    pdev,
                    instance.0,
                    bar0.into_devres()?,
                    uar_phys,
                    uar_bar.into_devres()?,
                )?,
                GFP_KERNEL,
            )?;
            let msix = pci::IrqTypes::default().with(pci::IrqType::MsiX);
            let name = NAMES[instance.0 as usize];
            let irq_dev = dev.clone();
            let eq_irq = try_pin_init!(EqIrq { dev: irq_dev }? Error);

            Ok(try_pin_init!(Qhca {
                vectors: pdev.alloc_irq_vectors(1, 1, msix)?,
                // SAFETY: `vectors` is initialized before this expression runs
                // (fields are initialized in initializer order), lives at a pinned, stable address
                // inside `Qhca`, and is dropped after `irq` (declaration order), so the reference
                // outlives the registration that holds it. The registration is never leaked.
                irq <- unsafe {
                    irq::ThreadedRegistration::new(
                        (&*core::ptr::from_ref(vectors))
                            .index(uapi::QHCA_MSIX_VEC_EQ as usize)?
                            .into(),
                        irq::Flags::ONESHOT,
                        c"qhca-eq",
                        eq_irq,
                    )
                },
                running: Running::start(pdev, &dev)?,
                // Last: registering queries the running device.
                ib: register_ib(pdev.as_ref(), name, &dev)?,
                _debugfs <- crate::debugfs::DeviceDir::new(name, &dev),
                dev,
                _instance: instance,
            }))
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Qhca<'bound>>) {
        let (errors, violations, lost) = regs::with(&this.dev.regs, |b| {
            (
                b.read32(regs::GUEST_ERRORS),
                b.read32(regs::DB_VIOLATIONS),
                b.read32(regs::EQ_OVERFLOWS),
            )
        })
        .unwrap_or((0, 0, 0));
        // The RDMA core's users first, while the device still answers.
        this.ib.unregister();
        this.dev.shutdown();
        dev_info!(
            pdev,
            "qhca{}: unbound; {} event interrupts; the device saw {} guest errors and {} doorbell violations, and lost {} events\n",
            this.dev.instance,
            this.dev.cmdq.irq_count(),
            errors,
            violations,
            lost
        );
    }
}

/// Registers the device with the RDMA core, and tells the device where its device-wide events
/// go there.
fn register_ib<'bound>(
    pdev: &'bound kernel::device::Device<Bound>,
    name: &CStr,
    dev: &Arc<QhcaDevice>,
) -> Result<rdma::Registration<'bound, QhcaIb>> {
    let attr = dev.attr()?;
    // A port gets its netdev, which gives the RDMA core the port's addresses (its GIDs).
    let netdev = if attr.caps & u64::from(uapi::QHCA_CAP_PORT) != 0 {
        let eth = attr.caps & u64::from(uapi::QHCA_CAP_ETH) != 0;
        Some(Netdev::new(pdev, &dev.query_port()?.mac, eth)?)
    } else {
        None
    };
    let reg = rdma::Registration::new(
        pdev,
        &rdma::Info {
            name,
            node_guid: attr.node_guid,
            node_desc: c"qhca emulated RDMA NIC",
            methods: crate::shim::uapi_defs(),
        },
        QhcaIb::new(dev.clone())?,
        netdev,
    )?;
    dev.set_ib_events(reg.events());
    Ok(reg)
}

/// Resets the device, hands it the rings, enables it and checks what it says it can do.
fn start_device(pdev: &pci::Device<Bound>, dev: &QhcaDevice) -> Result {
    let fault = crate::debugfs::FAIL_PROBE.xchg(0, Relaxed);
    // Read before the BAR's guard (RCU) is taken: it locks the queue.
    let rings = dev.cmdq.ring_addresses()?;
    regs::with(&dev.regs, |b| {
        b.write32(uapi::QHCA_CTRL_RESET, regs::CTRL);
        crate::cmdq::program(b, rings);
        b.write32(uapi::QHCA_INTR_EQ_ENABLE, regs::INTR_CTRL);
        b.write32(uapi::QHCA_CTRL_ENABLE, regs::CTRL);
    })?;
    let start = Instant::<Monotonic>::now();
    loop {
        let status = regs::with(&dev.regs, |b| b.read32(regs::STATUS))?;
        if status & uapi::QHCA_STATUS_READY != 0 && fault != 1 {
            break;
        }
        if status & (uapi::QHCA_STATUS_CFG_ERROR | uapi::QHCA_STATUS_FATAL) != 0
            || start.elapsed() > ENABLE_TIMEOUT
            || fault == 1
        {
            dev_err!(pdev, "device did not become ready (status {:#x})\n", status);
            return Err(EIO);
        }
        kernel::time::delay::fsleep(Delta::from_micros(100));
    }

    if fault == 2 {
        crate::debugfs::FAIL_CMDS.store(1, Relaxed);
    }
    let attr = dev.query(pdev.as_ref())?;
    let bar2 = pdev.resource_len(uapi::QHCA_BAR_UAR)?;
    if attr.num_uars == 0 || u64::from(attr.num_uars) << uapi::QHCA_UAR_PAGE_SHIFT > bar2 {
        dev_err!(
            pdev,
            "device claims {} doorbell pages but BAR2 holds {} bytes\n",
            attr.num_uars,
            bar2
        );
        return Err(ENODEV);
    }
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
        "qhca{}: max_qp {} max_qp_wr {} max_sge {} max_inline {} max_cq {} max_cqe {} max_mr {} max_mw {} max_ah {} max_pd {}\n",
        dev.instance,
        attr.max_qp,
        attr.max_qp_wr,
        attr.max_sge,
        attr.max_inline,
        attr.max_cq,
        attr.max_cqe,
        attr.max_mr,
        attr.max_mw,
        attr.max_ah,
        attr.max_pd
    );
    Ok(())
}
