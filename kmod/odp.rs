// SPDX-License-Identifier: GPL-2.0

//! On-demand paging (`qhca-abi.h`, "On-demand paging"): memory regions that pin nothing.
//!
//! An ODP region ([`OdpMr`]) is registered in the device with no page list: every page starts
//! not present. It watches its process's page tables with an mmu interval notifier
//! ([`OdpNotifier`]) and keeps its own record (`chunks`, in [`region`]) of every page it
//! DMA-mapped and wrote into the device, so that it can unmap exactly those.
//!
//! - **Page faults.** The device posts `QHCA_EQE_PAGE_FAULT`; the event dispatcher (event-queue
//!   lock held, so it neither allocates nor sends commands) queues it in [`OdpDevice`], and the
//!   device's fault worker (an ordered workqueue) finds the region by key, resolves the pages
//!   with HMM ([`OdpNotifier::fault`], `mmget_not_zero` first: an exiting process gets an
//!   error), and under the region's lock, if no invalidation began since, DMA-maps them and sends
//!   `QHCA_CMD_MAP_ODP`, then `QHCA_CMD_RESUME` (OK, or ERROR if anything failed).
//! - **Invalidations.** The notifier's callback ([`OdpMr::invalidate`]) takes the region's lock,
//!   bumps the notifier's sequence (faults in flight retry), sends `QHCA_CMD_INVALIDATE_ODP` for
//!   the pages it mapped in the range and, once the device answered (it no longer touches them),
//!   unmaps them. A device that does not answer is stopped before anything is unmapped.
//! - **Teardown.** Deregistration sends `DEREG_MR` under the region's lock, unmaps everything,
//!   and only then removes the notifier (until then it still guards the pages the device has).
//!
//! Locking. Invalidations run inside the kernel's `invalidate_range_start` with `mmap_lock` (or
//! a file's `i_mmap_rwsem`) held, and may run from reclaim. So under a region's lock nothing
//! allocates memory that may reclaim, takes `mmap_lock`, the bound-device lock or a file's
//! objects, or reports a command-queue death (which zaps mappings): commands sent there use
//! [`QhcaDevice::exec_no_report`]. The order is: bound-device lock, a file's objects, a region's
//! lock, then the command queue.

mod region;

pub(crate) use region::OdpMr;

use crate::{
    cmdq::{AsyncEvent, Cmd},
    context::Ctx,
    device::QhcaDevice,
    shim::{self, FaultedPage, Invalidation, NotifierOwner, OdpNotifier, OwnedQueue},
    uapi,
};
use kernel::{
    dma::{Coherent, CoherentBox},
    ffi::c_void,
    fmt, new_mutex,
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex, SetOnce,
    },
};

const PAGE_SHIFT: u32 = uapi::QHCA_PAGE_SHIFT;
/// Pages in one chunk of a region's record, and the most one `MAP_ODP` (one fault, one prefetch
/// step) maps: 2 MiB.
const CHUNK: usize = uapi::QHCA_ODP_MAP_MAX as usize;
/// Faults and retries before a fault gives up (each retry means an invalidation raced with it).
const MAX_RETRIES: u32 = 64;
/// Prefetches queued (without `QHCA_ADVISE_FLAG_FLUSH`) and not yet run, per device.
const MAX_QUEUED_PREFETCHES: usize = 256;

/// Pages DMA-mapped for ODP regions of every device right now (debugfs `odp_mapped_pages`).
pub(crate) static MAPPED_PAGES: Atomic<i64> = Atomic::new(0);

/// What the driver counted (debugfs `qhcaN/odp`).
pub(crate) struct Stats {
    faults: Atomic<u64>,
    resumed_ok: Atomic<u64>,
    resumed_error: Atomic<u64>,
    resume_refused: Atomic<u64>,
    invalidations: Atomic<u64>,
    pages_mapped: Atomic<u64>,
    pages_unmapped: Atomic<u64>,
    prefetches: Atomic<u64>,
    dropped_faults: Atomic<u64>,
}

fn add(c: &Atomic<u64>, n: u64) {
    c.add(n, Relaxed);
}

impl Stats {
    const fn new() -> Self {
        Self {
            faults: Atomic::new(0),
            resumed_ok: Atomic::new(0),
            resumed_error: Atomic::new(0),
            resume_refused: Atomic::new(0),
            invalidations: Atomic::new(0),
            pages_mapped: Atomic::new(0),
            pages_unmapped: Atomic::new(0),
            prefetches: Atomic::new(0),
            dropped_faults: Atomic::new(0),
        }
    }

    pub(crate) fn show(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: [(&str, &Atomic<u64>); 9] = [
            ("faults", &self.faults),
            ("resumed_ok", &self.resumed_ok),
            ("resumed_error", &self.resumed_error),
            ("resume_refused", &self.resume_refused),
            ("invalidations", &self.invalidations),
            ("pages_mapped", &self.pages_mapped),
            ("pages_unmapped", &self.pages_unmapped),
            ("prefetches", &self.prefetches),
            ("dropped_faults", &self.dropped_faults),
        ];
        for (name, c) in lines {
            writeln!(f, "{}: {}", name, c.load(Relaxed))?;
        }
        Ok(())
    }
}

/// One `QHCA_EQE_PAGE_FAULT`, decoded.
#[derive(Clone, Copy)]
pub(crate) struct PageFault {
    token: u32,
    flags: u8,
    va: u64,
    key: u32,
    qpn: u32,
    length: u32,
}

impl PageFault {
    /// Decodes `struct qhca_eqe_page_fault` from the generic event (already CPU byte order).
    pub(crate) fn from_event(ev: &AsyncEvent) -> Self {
        Self {
            token: ev.token,
            flags: ev.status,
            va: ev.data[0],
            key: ev.data[1] as u32,
            qpn: (ev.data[1] >> 32) as u32,
            length: u32::from_le_bytes([ev.tail[0], ev.tail[1], ev.tail[2], ev.tail[3]]),
        }
    }
}

/// A prefetch queued by `ADVISE_MR` without `QHCA_ADVISE_FLAG_FLUSH`.
struct Prefetch {
    mr: Arc<OdpMr>,
    addr: u64,
    len: u64,
    write: bool,
}

/// A device's ODP state: its regions by key, the faults and prefetches waiting for the worker,
/// and the counters.
#[pin_data]
pub(crate) struct OdpDevice {
    /// Every live ODP region of every context, found by key.
    #[pin]
    mrs: Mutex<KVec<Arc<OdpMr>>>,
    /// Faults posted by the device and not yet handled, oldest first. Pushed under the
    /// event-queue lock: capacity is reserved up front for two outstanding faults per QP (a
    /// requester's and a responder's), the most a working device raises.
    #[pin]
    faults: Mutex<KVec<PageFault>>,
    #[pin]
    prefetches: Mutex<KVec<Prefetch>>,
    /// The fault worker's queue; `None` once the device is shut down.
    #[pin]
    wq: Mutex<Option<OwnedQueue>>,
    /// Set when an invalidation stopped the device (its INVALIDATE_ODP failed): the worker
    /// tells the contexts, which an invalidation cannot do (telling them zaps mappings).
    death_pending: Atomic<bool>,
    pub(crate) stats: Stats,
}

impl OdpDevice {
    pub(crate) fn new(instance: u32) -> Result<impl PinInit<Self, Error>> {
        let wq = OwnedQueue::new(instance)?;
        Ok(try_pin_init!(Self {
            mrs <- new_mutex!(KVec::new()),
            faults <- new_mutex!(KVec::new()),
            prefetches <- new_mutex!(KVec::new()),
            wq <- new_mutex!(Some(wq)),
            death_pending: Atomic::new(false),
            stats: Stats::new(),
        }? Error))
    }

    /// Reserves room for the faults of `max_qp` QPs (at probe, once the device said how many).
    pub(crate) fn reserve(&self, max_qp: u32) -> Result {
        let n = 2 * max_qp as usize + 64;
        let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut faults = self.faults.lock();
        while let Some(f) = faults.pop() {
            v.push(f, GFP_ATOMIC)?;
        }
        *faults = v;
        Ok(())
    }

    /// Queues a page fault (event-queue lock held: never allocates). The caller then kicks the
    /// worker ([`OdpDevice::kick`]).
    pub(crate) fn queue_fault(&self, dev: &QhcaDevice, pf: PageFault) {
        if self.faults.lock().push_within_capacity(pf).is_ok() {
            return;
        }
        add(&self.stats.dropped_faults, 1);
        if dev.warn.allow() {
            dev_warn!(
                dev.dev(),
                "page fault of QP {:#x} dropped: more outstanding than the device has QPs\n",
                pf.qpn
            );
        }
    }

    /// Runs the worker if something waits for it.
    pub(crate) fn kick(&self, dev: &Arc<QhcaDevice>) {
        if self.faults.lock().is_empty()
            && self.prefetches.lock().is_empty()
            && !self.death_pending.load(Relaxed)
        {
            return;
        }
        if let Some(wq) = self.wq.lock().as_ref() {
            // Already queued (`Err`): it will find the new work.
            let _ = wq.queue().enqueue(dev.clone());
        }
    }

    /// Runs `f` with the worker's queue, unless the device is shut down (`None`).
    pub(crate) fn with_queue<R>(
        &self,
        f: impl FnOnce(&kernel::workqueue::Queue) -> R,
    ) -> Option<R> {
        self.wq.lock().as_ref().map(|wq| f(wq.queue()))
    }

    /// From an invalidation that stopped the device: the worker reports the death.
    pub(crate) fn report_death_later(&self, dev: &Arc<QhcaDevice>) {
        self.death_pending.store(true, Relaxed);
        if let Some(wq) = self.wq.lock().as_ref() {
            let _ = wq.queue().enqueue(dev.clone());
        }
    }

    /// Stops the worker, after it did what was queued (the device is stopped: every command
    /// fails at once). No work is queued after this.
    pub(crate) fn shutdown(&self) {
        let wq = self.wq.lock().take();
        drop(wq);
        // Queued prefetches hold their regions; nothing will run them now.
        let stale = core::mem::take(&mut *self.prefetches.lock());
        drop(stale);
    }

    fn find(&self, key: u32) -> Option<Arc<OdpMr>> {
        self.mrs.lock().iter().find(|m| m.key() == key).cloned()
    }

    fn add(&self, mr: Arc<OdpMr>) -> Result {
        self.mrs.lock().push(mr, GFP_KERNEL)?;
        Ok(())
    }

    fn forget(&self, key: u32) {
        self.mrs.lock().retain(|m| m.key() != key);
    }
}

/// The device's fault worker: faults first, then queued prefetches one step at a time.
pub(crate) fn work(dev: &Arc<QhcaDevice>) {
    if dev.odp.death_pending.xchg(false, Relaxed) {
        dev.check_death();
    }
    loop {
        loop {
            let pf = {
                let mut faults = dev.odp.faults.lock();
                if faults.is_empty() {
                    break;
                }
                faults.remove(0)
            };
            if let Ok(pf) = pf {
                handle_fault(dev, pf);
            }
        }
        let job = {
            let mut p = dev.odp.prefetches.lock();
            if p.is_empty() {
                return;
            }
            p.remove(0)
        };
        let Ok(mut job) = job else { return };
        // One step (at most one MAP_ODP), then the faults again; the rest goes back in front.
        let step = job.mr.step_len(job.addr, job.len);
        if job.mr.map(dev, job.addr, step, job.write).is_err() {
            continue;
        }
        job.addr += step;
        job.len -= step;
        if job.len != 0 {
            let mut p = dev.odp.prefetches.lock();
            // Room: the job was just taken out.
            if p.insert_within_capacity(0, job).is_err() {
                continue;
            }
        }
    }
}

/// Resolves one page fault and resumes the QP that waits.
fn handle_fault(dev: &QhcaDevice, pf: PageFault) {
    add(&dev.odp.stats.faults, 1);
    let write = u32::from(pf.flags) & uapi::QHCA_PF_WRITE != 0;
    let (uar, res) = match dev.odp.find(pf.key) {
        Some(mr) => {
            let res = if mr.ctx.owns_qp(pf.qpn) {
                mr.ctx.check().and_then(|()| mr.fault(dev, &pf, write))
            } else {
                // A region and a QP of different contexts: the device is confused.
                Err(EINVAL)
            };
            (mr.uar, res)
        }
        // An unknown key (deregistered meanwhile, or never ours): the QP still waits and is
        // told so, through its own context's doorbell page.
        None => match dev.uar_of_qp(pf.qpn) {
            Some(uar) => (uar, Err(ENOENT)),
            None => {
                if dev.warn.allow() {
                    dev_warn!(
                        dev.dev(),
                        "page fault for key {:#x} of unknown QP {:#x} dropped\n",
                        pf.key,
                        pf.qpn
                    );
                }
                return;
            }
        },
    };
    let status = if res.is_ok() {
        add(&dev.odp.stats.resumed_ok, 1);
        uapi::QHCA_RESUME_OK
    } else {
        add(&dev.odp.stats.resumed_error, 1);
        uapi::QHCA_RESUME_ERROR
    };
    let cmd = Cmd::new(uapi::QHCA_CMD_RESUME)
        .input(0, uar.into())
        .input(1, pf.token.into())
        .input(2, status.into());
    match dev.exec(cmd) {
        Ok(_) => {}
        // BAD_RESOURCE: the QP was reset or destroyed meanwhile; harmless.
        Err(e) if e == EINVAL => add(&dev.odp.stats.resume_refused, 1),
        Err(e) => {
            if dev.warn.allow() {
                dev_warn!(dev.dev(), "RESUME of QP {:#x} failed: {:?}\n", pf.qpn, e);
            }
        }
    }
}

/// `DEREG_MR` of a region from under its lock (an ODP or a watched region): refused without
/// asking the device if the debugfs knob `refuse_destroys` says so, else what the device
/// answers. A queue that died on the way stopped the device: as good as deregistered.
pub(crate) fn dereg_locked(dev: &QhcaDevice, uar: u32, key: u32) -> Result {
    let res = if crate::debugfs::take(&crate::debugfs::REFUSE_DESTROYS) {
        Err(EINVAL)
    } else {
        dev.exec_no_report(
            Cmd::new(uapi::QHCA_CMD_DEREG_MR)
                .input(0, uar.into())
                .input(1, key.into()),
        )
        .map(|_| ())
    };
    res.or_else(|e| if dev.is_stopped() { Ok(()) } else { Err(e) })
}
