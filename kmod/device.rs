// SPDX-License-Identifier: GPL-2.0

//! State shared by a device's PCI binding and every file open on it.
//!
//! An open file can outlive the binding (unbind with the file still open), so what files need
//! lives in an `Arc<QhcaDevice>` whose hardware access is revocable: BAR0 through `Devres` and the
//! doorbell pages through the `unbound` flag, which is set under the same lock that guards the
//! list of open files before their mappings are zapped.

use crate::{
    cmdq::{AsyncEvent, Cmd, CmdOutput, CmdQueue},
    regs,
    shim::{self, EventFd, FilePtr},
    uapi,
};
use kernel::{
    device::{Bound, Device},
    dma::{Coherent, CoherentBox},
    io::Io,
    transmute::FromBytes,
    new_mutex, pci,
    prelude::*,
    sync::{aref::ARef, Arc, Mutex, SetOnce},
};

/// Open files and whether the device is still bound, under one lock.
struct Files {
    open: KVec<FilePtr>,
    unbound: bool,
}

/// One qhca device, as seen by its open files.
#[pin_data]
pub(crate) struct QhcaDevice {
    pdev: ARef<pci::Device>,
    /// Index of this device among qhca devices (`/dev/qhcaN`).
    pub(crate) instance: u32,
    pub(crate) regs: regs::SharedBar0,
    #[pin]
    pub(crate) cmdq: CmdQueue,
    /// Bus address of BAR2, the doorbell pages.
    uar_phys: u64,
    /// What QUERY_DEVICE returned at probe, in CPU byte order.
    attr: SetOnce<uapi::qhca_device_attr>,
    #[pin]
    files: Mutex<Files>,
    /// True while the driver is bound. Held by control paths that need the bound device (DMA
    /// allocations, pinning); `unbind` clears it first, waiting for them.
    #[pin]
    bound: Mutex<bool>,
    /// Eventfds of CQs that asked for completion events, by CQ number.
    #[pin]
    cq_events: Mutex<KVec<(u32, Arc<EventFd>)>>,
}

impl QhcaDevice {
    pub(crate) fn new(
        pdev: &pci::Device<Bound>,
        instance: u32,
        regs: regs::SharedBar0,
        uar_phys: u64,
    ) -> Result<impl PinInit<Self, Error>> {
        let cmdq = CmdQueue::new(pdev.as_ref())?;
        let pdev: ARef<pci::Device> = pdev.into();
        Ok(try_pin_init!(Self {
            pdev,
            instance,
            regs,
            cmdq <- cmdq,
            uar_phys,
            attr: SetOnce::new(),
            files <- new_mutex!(Files { open: KVec::new(), unbound: false }),
            bound <- new_mutex!(true),
            cq_events <- new_mutex!(KVec::new()),
        }? Error))
    }

    pub(crate) fn dev(&self) -> &Device {
        self.pdev.as_ref()
    }

    /// Posts a command and waits for its completion.
    pub(crate) fn exec(&self, cmd: Cmd) -> Result<CmdOutput> {
        self.cmdq.exec(self.dev(), &self.regs, &|e| self.on_event(e), cmd)
    }

    /// The threaded half of the event-queue interrupt.
    pub(crate) fn service_events(&self) {
        self.cmdq.service(self.dev(), &self.regs, &|e| self.on_event(e));
    }

    /// Dispatches an asynchronous event from the event queue.
    fn on_event(&self, ev: AsyncEvent) {
        match ev.kind {
            uapi::QHCA_EQE_CQ_COMP | uapi::QHCA_EQE_CQ_ERR => {
                let cqn = ev.data[0] as u32;
                if let Some((_, efd)) = self.cq_events.lock().iter().find(|(n, _)| *n == cqn) {
                    efd.signal();
                }
                if ev.kind == uapi::QHCA_EQE_CQ_ERR {
                    dev_warn!(self.dev(), "CQ {} (context {}) overran\n", cqn, ev.data[1]);
                }
            }
            uapi::QHCA_EQE_QP_ERR => {
                dev_dbg!(self.dev(), "QP {} (context {}) entered ERR\n", ev.data[0], ev.data[1]);
            }
            kind => dev_warn!(self.dev(), "unknown event type {}\n", kind),
        }
    }

    /// Routes completion events of CQ `cqn` to `efd`.
    pub(crate) fn add_cq_events(&self, cqn: u32, efd: Arc<EventFd>) -> Result {
        self.cq_events.lock().push((cqn, efd), GFP_KERNEL)?;
        Ok(())
    }

    /// Stops routing completion events of CQ `cqn`.
    pub(crate) fn remove_cq_events(&self, cqn: u32) {
        let mut v = self.cq_events.lock();
        if let Some(pos) = v.iter().position(|(n, _)| *n == cqn) {
            let _ = v.remove(pos);
        }
    }

    /// Runs QUERY_DEVICE and keeps the answer for `attr()`.
    pub(crate) fn query(&self, dev: &Device<Bound>) -> Result<&uapi::qhca_device_attr> {
        const SIZE: usize = core::mem::size_of::<uapi::qhca_device_attr>();
        let buf: Coherent<[u8]> = CoherentBox::<[u8]>::zeroed_slice(dev, SIZE, GFP_KERNEL)?.into();
        self.exec(
            Cmd::new(uapi::QHCA_CMD_QUERY_DEVICE).output(buf.dma_address(), SIZE as u32),
        )?;
        let mut bytes = [0u8; SIZE];
        (&buf).copy_to_slice(&mut bytes);
        let le = uapi::qhca_device_attr::from_bytes_copy(&bytes).ok_or(EIO)?;
        let attr = attr_from_le(&le);
        if attr.abi_version != uapi::QHCA_ABI_VERSION {
            dev_err!(
                dev,
                "device speaks ABI {}, driver {}\n",
                attr.abi_version,
                uapi::QHCA_ABI_VERSION
            );
            return Err(ENODEV);
        }
        self.attr.populate(attr);
        self.attr.as_ref().ok_or(EIO)
    }

    /// The device's attributes, as queried at probe.
    pub(crate) fn attr(&self) -> Result<&uapi::qhca_device_attr> {
        self.attr.as_ref().ok_or(ENODEV)
    }

    /// Gives `file` a doorbell page of its own.
    ///
    /// # Errors
    ///
    /// `ENODEV` after unbind, `ENOSPC` when every doorbell page is taken, `EIO` if the device is
    /// dead.
    pub(crate) fn open_context(&self, file: FilePtr) -> Result<u32> {
        let mut files = self.files.lock();
        if files.unbound {
            return Err(ENODEV);
        }
        files.open.reserve(1, GFP_KERNEL)?;
        let out = self.exec(Cmd::new(uapi::QHCA_CMD_ALLOC_UAR))?;
        let num_uars = self.attr()?.num_uars;
        let uar = match u32::try_from(out.data[0]) {
            Ok(uar) if uar < num_uars => uar,
            _ => {
                dev_err!(self.dev(), "device returned bad doorbell page {}\n", out.data[0]);
                return Err(EIO);
            }
        };
        // Cannot fail: capacity was reserved above.
        files.open.push(file, GFP_KERNEL)?;
        Ok(uar)
    }

    /// Runs `f` with the device known to be bound for its whole duration.
    ///
    /// # Errors
    ///
    /// `ENODEV` once the device is unbound, or what `f` returns.
    pub(crate) fn with_bound<R>(&self, f: impl FnOnce(&Device<Bound>) -> Result<R>) -> Result<R> {
        let bound = self.bound.lock();
        if !*bound {
            return Err(ENODEV);
        }
        // SAFETY: `unbind` clears `bound` under this lock before the driver lets go of the device,
        // so while we hold the lock with `bound` set the device stays bound; the reference does
        // not escape `f`.
        f(unsafe { self.dev().as_bound() })
    }

    /// Undoes `open_context` and everything the context created: forgets `file`, destroys its
    /// objects (in the device too, unless the device is gone, in which case they went with it)
    /// and frees its doorbell page.
    ///
    /// Lock order, here and in every ioctl: `bound`, then the file's objects.
    pub(crate) fn close_context(
        &self,
        file: FilePtr,
        uar: u32,
        objs: Option<&Mutex<crate::verbs::Objects>>,
    ) {
        {
            let mut files = self.files.lock();
            if let Some(pos) = files.open.iter().position(|f| *f == file) {
                let _ = files.open.remove(pos);
            }
        }
        let bound = self.bound.lock();
        if let Some(objs) = objs {
            objs.lock().destroy_all(self, uar, *bound);
        }
        if !*bound {
            return;
        }
        if let Err(e) = self.exec(Cmd::new(uapi::QHCA_CMD_FREE_UAR).input(0, uar.into())) {
            dev_warn!(self.dev(), "FREE_UAR {} failed: {:?}\n", uar, e);
        }
    }

    /// Checks that the device is still bound; later steps of an ioctl or mmap rely on it.
    pub(crate) fn check_bound(&self) -> Result {
        if self.files.lock().unbound {
            Err(ENODEV)
        } else {
            Ok(())
        }
    }

    /// Maps doorbell page `uar` into `vma`, unless the device is unbound.
    pub(crate) fn map_uar(&self, vma: &kernel::mm::virt::VmaNew, uar: u32) -> Result {
        // Held across the mapping so `unbind` either sees this vma to zap or runs first and makes
        // this fail.
        let files = self.files.lock();
        if files.unbound {
            return Err(ENODEV);
        }
        let phys = self.uar_phys + (u64::from(uar) << uapi::QHCA_UAR_PAGE_SHIFT);
        shim::map_io_page(vma, phys)
    }

    /// Called when the device is being unbound: no file may use the device from now on, and no
    /// process keeps a mapping of its doorbell pages.
    pub(crate) fn revoke_files(&self) {
        // Wait for control paths that use the bound device, and let no new one start.
        *self.bound.lock() = false;
        let mut files = self.files.lock();
        files.unbound = true;
        for f in files.open.iter() {
            shim::zap_file_mappings(*f);
        }
        if !files.open.is_empty() {
            dev_info!(self.dev(), "unbound with {} open file(s)\n", files.open.len());
        }
    }

    /// Stops the device: it forgets every context and does no more DMA.
    pub(crate) fn reset(&self) {
        let _ = regs::with(&self.regs, |b| b.write32(uapi::QHCA_CTRL_RESET, regs::CTRL));
    }
}

/// Converts the device's little-endian attributes to CPU byte order.
fn attr_from_le(le: &uapi::qhca_device_attr) -> uapi::qhca_device_attr {
    uapi::qhca_device_attr {
        abi_version: u32::from_le(le.abi_version),
        num_uars: u32::from_le(le.num_uars),
        caps: u64::from_le(le.caps),
        node_guid: u64::from_le(le.node_guid),
        fw_version: u64::from_le(le.fw_version),
        vendor_id: u32::from_le(le.vendor_id),
        vendor_part_id: u32::from_le(le.vendor_part_id),
        hw_ver: u32::from_le(le.hw_ver),
        max_pd: u32::from_le(le.max_pd),
        max_cq: u32::from_le(le.max_cq),
        max_cqe: u32::from_le(le.max_cqe),
        max_qp: u32::from_le(le.max_qp),
        max_qp_wr: u32::from_le(le.max_qp_wr),
        max_sge: u32::from_le(le.max_sge),
        max_inline: u32::from_le(le.max_inline),
        max_mr: u32::from_le(le.max_mr),
        rsvd0: 0,
        max_mr_size: u64::from_le(le.max_mr_size),
        page_size_cap: u64::from_le(le.page_size_cap),
        rsvd1: [0; 4],
    }
}
