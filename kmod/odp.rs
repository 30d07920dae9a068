// SPDX-License-Identifier: GPL-2.0

//! On-demand paging (`qhca-abi.h`, "On-demand paging"): memory regions that pin nothing.
//!
//! An ODP region ([`OdpMr`]) is registered in the device with no page list: every page starts
//! not present. It watches its process's page tables with an mmu interval notifier
//! ([`OdpNotifier`]) and keeps its own record (`chunks`, in [`region`]) of every page it
//! DMA-mapped and wrote into the device, so that it can unmap exactly those.
//!
//! - **Page faults.** The device posts `QHCA_EQE_PAGE_FAULT`; the event dispatcher (event-queue
//!   lock held, so it neither allocates nor sends commands) queues it with the context that owns
//!   the QP, whose own work item ([`service`]: one per context, on an unbound workqueue, so that
//!   no process's faults wait for another's) finds the region by key, resolves the pages with
//!   HMM ([`OdpNotifier::fault`], `mmget_not_zero` first: an exiting process gets an error), and
//!   under the region's lock, if no invalidation began since, DMA-maps them and sends
//!   `QHCA_CMD_MAP_ODP` with `QHCA_CMD_FLAG_RESUME`, which resumes the QP in the same command
//!   (a fault whose pages cannot be had gets `QHCA_CMD_RESUME` with ERROR instead). With
//!   debugfs `odp_read_ahead`, a fault that continues a sequential stream in its region then
//!   has the pages after it mapped ahead, a step at a time between the context's faults
//!   ([`OdpMr::read_ahead`]), as mlx5 prefetches behind a responder's fault.
//! - **Invalidations.** The notifier's callback ([`OdpMr::invalidate`]) takes the region's lock,
//!   bumps the notifier's sequence (faults in flight retry), sends `QHCA_CMD_INVALIDATE_ODP` for
//!   the pages it mapped in the range and, once the device answered (it no longer touches them),
//!   unmaps them. A device that does not answer is stopped before anything is unmapped.
//! - **Teardown.** Deregistration sends `DEREG_MR` under the region's lock, unmaps everything,
//!   and only then removes the notifier (until then it still guards the pages the device has).
//!
//! Locking. Invalidations run inside the kernel's `invalidate_range_start` with `mmap_lock` (or a
//! file's `i_mmap_rwsem`) held, and may run from reclaim. So under a region's lock nothing
//! allocates memory that may reclaim, takes `mmap_lock`, the bound-device lock or a context's
//! objects, or reports a command-queue death (which zaps mappings): commands sent there use
//! [`QhcaDevice::exec_no_report`]. The order is: bound-device lock, a context's objects, a region's
//! lock, then the command queue.

mod region;
pub(crate) mod service;

pub(crate) use region::OdpMr;
pub(crate) use service::FaultService;

use crate::{
    cmdq::{AsyncEvent, Cmd},
    context::Ctx,
    device::QhcaDevice,
    limits::Pool,
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
    time::{Instant, Monotonic},
};

const PAGE_SHIFT: u32 = uapi::QHCA_PAGE_SHIFT;
/// Pages in one chunk of a region's record, and the most one `MAP_ODP` (one fault, one prefetch
/// step) maps: 2 MiB.
const CHUNK: usize = uapi::QHCA_ODP_MAP_MAX as usize;
/// Pages one step of a read-ahead maps (then the context's faults go first again): a fault that
/// comes meanwhile waits for at most this much mapping.
const AHEAD_STEP: u64 = 32;
/// The most a sequential fault stream maps ahead of its last fault (mlx5's `MAX_PREFETCH_LEN`).
const AHEAD_MAX: u64 = 4 << 20;
/// Tries of one mapping step before it gives up its turn (each retry means an invalidation
/// raced with it): a fault is then resumed to be raised again, a prefetch step tried later.
const MAX_RETRIES: u32 = 8;

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
    readahead_pages: Atomic<u64>,
    dropped_faults: Atomic<u64>,
    fault_retries: Atomic<u64>,
    /// Where fault service spends its time: nanoseconds summed over every fault, per
    /// [`Phase`].
    phase_ns: [Atomic<u64>; Phase::COUNT],
    /// The same, one count per fault and phase in the bucket of its duration: bucket 0 under
    /// 1 us, bucket `b` from 2^(b-1) us to under 2^b us, the last one anything longer.
    phase_hist: [[Atomic<u32>; HIST_BUCKETS]; Phase::COUNT],
}

const HIST_BUCKETS: usize = 20;

/// A phase of one fault's service, from the event's dispatch to its `RESUME` (debugfs
/// `service_ns_*`: nanoseconds summed over the faults, `faults` of them).
#[derive(Clone, Copy)]
pub(crate) enum Phase {
    /// The dispatcher queued it until its context's worker took it.
    Wait = 0,
    /// Resolving the pages (`hmm_range_fault`).
    Resolve,
    /// Allocations, the region's lock and the DMA mappings.
    Map,
    /// The `MAP_ODP` command.
    MapCmd,
    /// The `RESUME` command (only when `MAP_ODP` did not resume the fault).
    ResumeCmd,
    /// One step of a read-ahead (not a fault's phase).
    Ahead,
}

impl Phase {
    const COUNT: usize = 6;
    const NAMES: [&'static str; Phase::COUNT] =
        ["wait", "resolve", "map", "map_cmd", "resume_cmd", "ahead"];
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
            readahead_pages: Atomic::new(0),
            dropped_faults: Atomic::new(0),
            fault_retries: Atomic::new(0),
            phase_ns: [const { Atomic::new(0) }; Phase::COUNT],
            phase_hist: [const { [const { Atomic::new(0) }; HIST_BUCKETS] }; Phase::COUNT],
        }
    }

    /// Adds the time since `since` to `phase`, and returns now (the next phase's start).
    pub(crate) fn phase(&self, phase: Phase, since: Instant<Monotonic>) -> Instant<Monotonic> {
        let now = Instant::<Monotonic>::now();
        let ns = (now - since).as_nanos().max(0) as u64;
        add(&self.phase_ns[phase as usize], ns);
        let us = ns / 1000;
        let bucket = (u64::BITS - us.leading_zeros()) as usize;
        self.phase_hist[phase as usize][bucket.min(HIST_BUCKETS - 1)].add(1, Relaxed);
        now
    }

    pub(crate) fn show(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: [(&str, &Atomic<u64>); 11] = [
            ("faults", &self.faults),
            ("resumed_ok", &self.resumed_ok),
            ("resumed_error", &self.resumed_error),
            ("resume_refused", &self.resume_refused),
            ("invalidations", &self.invalidations),
            ("pages_mapped", &self.pages_mapped),
            ("pages_unmapped", &self.pages_unmapped),
            ("prefetches", &self.prefetches),
            ("readahead_pages", &self.readahead_pages),
            ("dropped_faults", &self.dropped_faults),
            ("fault_retries", &self.fault_retries),
        ];
        for (name, c) in lines {
            writeln!(f, "{}: {}", name, c.load(Relaxed))?;
        }
        for (name, c) in Phase::NAMES.iter().zip(self.phase_ns.iter()) {
            writeln!(f, "service_ns_{}: {}", name, c.load(Relaxed))?;
        }
        for (name, h) in Phase::NAMES.iter().zip(self.phase_hist.iter()) {
            write!(f, "service_us_log2_{}:", name)?;
            for c in h {
                write!(f, " {}", c.load(Relaxed))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// One `QHCA_EQE_PAGE_FAULT`, decoded.
#[derive(Clone, Copy)]
pub(crate) struct PageFault {
    /// When the dispatcher took it from the event queue.
    raised: Instant<Monotonic>,
    token: u32,
    flags: u8,
    va: u64,
    key: u32,
    qpn: u32,
    length: u32,
}

impl PageFault {
    /// True if `other` is raised by the same side (requester or responder) of the same QP: the
    /// device has one fault outstanding per QP and side, so the later one replaces this one.
    fn same_waiter(&self, other: &PageFault) -> bool {
        self.qpn == other.qpn && (self.flags ^ other.flags) & uapi::QHCA_PF_RESPONDER as u8 == 0
    }

    /// The QP that waits.
    pub(crate) fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Decodes `struct qhca_eqe_page_fault` from the generic event (already CPU byte order).
    pub(crate) fn from_event(ev: &AsyncEvent) -> Self {
        Self {
            raised: Instant::now(),
            token: ev.token,
            flags: ev.status,
            va: ev.data[0],
            key: ev.data[1] as u32,
            qpn: (ev.data[1] >> 32) as u32,
            length: u32::from_le_bytes([ev.tail[0], ev.tail[1], ev.tail[2], ev.tail[3]]),
        }
    }
}

/// A prefetch queued by `ADVISE_MR` without `QHCA_ADVISE_FLAG_FLUSH`, or the read-ahead of a
/// sequential fault stream.
pub(crate) struct Prefetch {
    mr: Arc<OdpMr>,
    addr: u64,
    len: u64,
    write: bool,
}

/// A device's ODP state: its regions by key, the device's own work queue, and the counters.
/// (Faults and prefetches are queued per context: [`service`].)
#[pin_data]
pub(crate) struct OdpDevice {
    /// Every live ODP region of every context, found by key.
    #[pin]
    mrs: Mutex<KVec<Arc<OdpMr>>>,
    /// The device's work queue (ordered): the unpinning after a watched region's revocation,
    /// and death reports. Drained at unbind (nothing on it waits for user memory); `None` from
    /// then on.
    #[pin]
    wq: Mutex<Option<OwnedQueue>>,
    /// Set at unbind: the fault service queues nothing more, and its workers stop.
    closed: Atomic<bool>,
    /// Set when an invalidation stopped the device (its INVALIDATE_ODP failed): the device's
    /// work tells the contexts, which an invalidation cannot do (telling them zaps mappings).
    death_pending: Atomic<bool>,
    pub(crate) stats: Stats,
}

impl OdpDevice {
    pub(crate) fn new(instance: u32) -> Result<impl PinInit<Self, Error>> {
        let wq = OwnedQueue::new(instance)?;
        Ok(try_pin_init!(Self {
            mrs <- new_mutex!(KVec::new()),
            wq <- new_mutex!(Some(wq)),
            closed: Atomic::new(false),
            death_pending: Atomic::new(false),
            stats: Stats::new(),
        }? Error))
    }

    /// A page fault, from the event dispatcher (event-queue lock held: never allocates): queued
    /// with the context that owns the QP, whose worker is kicked. A fault of no QP we know
    /// (destroyed meanwhile, or a confused device) has nobody waiting: dropped and counted.
    pub(crate) fn queue_fault(&self, dev: &QhcaDevice, owner: Option<&Arc<Ctx>>, pf: PageFault) {
        if let Some(ctx) = owner {
            if ctx.faults.push(pf) {
                service::kick(ctx);
                return;
            }
        }
        add(&self.stats.dropped_faults, 1);
        if dev.warn.allow() {
            dev_warn!(
                dev.dev(),
                "page fault of QP {:#x} (key {:#x}) dropped: {}\n",
                pf.qpn,
                pf.key,
                if owner.is_some() {
                    "no room"
                } else {
                    "no such QP"
                }
            );
        }
    }

    /// True once the device is unbound.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Relaxed)
    }

    /// Runs `f` with the device's work queue, unless the device is shut down (`None`).
    pub(crate) fn with_queue<R>(
        &self,
        f: impl FnOnce(&kernel::workqueue::Queue) -> R,
    ) -> Option<R> {
        self.wq.lock().as_ref().map(|wq| f(wq.queue()))
    }

    /// From an invalidation that stopped the device: the device's work reports the death.
    pub(crate) fn report_death_later(&self, dev: &Arc<QhcaDevice>) {
        self.death_pending.store(true, Relaxed);
        if let Some(wq) = self.wq.lock().as_ref() {
            let _ = wq.queue().enqueue(dev.clone());
        }
    }

    /// Unbind (the device is stopped: every command fails at once): the fault service stops
    /// taking work and its workers stop (not waited for: one may be stuck on a process's
    /// memory); the device's work queue finishes what is queued, then goes.
    pub(crate) fn shutdown(&self) {
        self.closed.store(true, Relaxed);
        let wq = self.wq.lock().take();
        drop(wq);
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

/// The device's work: a death that an invalidation could not report.
pub(crate) fn work(dev: &Arc<QhcaDevice>) {
    if dev.odp.death_pending.xchg(false, Relaxed) {
        dev.check_death();
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
