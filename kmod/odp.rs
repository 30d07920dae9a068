// SPDX-License-Identifier: GPL-2.0

//! On-demand paging (`qhca-abi.h`, "On-demand paging"): memory regions that pin nothing.
//!
//! An ODP region ([`OdpMr`]) is registered in the device with no page list: every page starts
//! not present. It watches its process's page tables with an mmu interval notifier
//! ([`OdpNotifier`]) and keeps its own record ([`State::chunks`]) of every page it DMA-mapped and
//! wrote into the device, so that it can unmap exactly those.
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

/// One page of a region's record.
#[derive(Clone, Copy, Default)]
struct Entry {
    dma: u64,
    /// `pfn << 2 | writable << 1 | mapped`.
    bits: u64,
}

impl Entry {
    fn mapped(self) -> bool {
        self.bits & 1 != 0
    }

    fn writable(self) -> bool {
        self.bits & 2 != 0
    }

    fn pfn(self) -> u64 {
        self.bits >> 2
    }
}

/// `CHUNK` consecutive pages of a region's record.
struct Chunk {
    pages: KVec<Entry>,
    mapped: usize,
}

impl Chunk {
    fn new() -> Result<Self> {
        Ok(Self {
            pages: KVec::from_elem(Entry::default(), CHUNK, GFP_KERNEL)?,
            mapped: 0,
        })
    }
}

struct State {
    /// Set once the device no longer has the region (deregistered, or the device stopped
    /// before): nothing is mapped or sent any more.
    dead: bool,
    /// The pages DMA-mapped and written into the device, by chunk (`vpn / CHUNK`). A page is
    /// recorded before the `MAP_ODP` that names it is sent, and unmapped only after the device
    /// invalidated it, destroyed the region, or was stopped.
    chunks: RBTree<u64, Chunk>,
}

/// An on-demand-paged memory region (see the module documentation).
///
/// # Invariants
///
/// Once `notifier` is set, the notifier's owner is this region, at its address in its `Arc`;
/// the notifier is removed ([`OdpMr::close`], or dropping it) before that memory is freed.
#[pin_data]
pub(crate) struct OdpMr {
    /// Declared first: dropped (removed) before the rest.
    notifier: SetOnce<OdpNotifier>,
    /// Set once by [`OdpMr::register`], before the region can be found or anything mapped.
    key: Atomic<u32>,
    pdn: u32,
    uar: u32,
    access: u32,
    implicit: bool,
    /// The virtual range the region covers, `[start, end)`: what faults and invalidations are
    /// clipped to (the implicit region: the whole user address space).
    start: u64,
    end: u64,
    ctx: Arc<Ctx>,
    dev: Arc<QhcaDevice>,
    #[pin]
    state: Mutex<State>,
}

impl OdpMr {
    /// Starts watching `[start, end)` of the calling process for a new region, not yet in the
    /// device ([`OdpMr::register`] puts it there). `implicit`: the device's region will be the
    /// implicit one (iova 0, `QHCA_ODP_IMPLICIT_LENGTH`), and `[start, end)` the whole user
    /// range. Called with no lock held: inserting the notifier may take the process's
    /// `mmap_lock`, under which `mmap` takes the bound-device lock.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the notifier's errors (`EINVAL` for a range outside the address space).
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn new(
        dev: &Arc<QhcaDevice>,
        ctx: &Arc<Ctx>,
        uar: u32,
        pdn: u32,
        access: u32,
        start: u64,
        end: u64,
        implicit: bool,
    ) -> Result<Arc<Self>> {
        let mr = Arc::pin_init(
            try_pin_init!(Self {
                notifier: SetOnce::new(),
                key: Atomic::new(0),
                pdn,
                uar,
                access,
                start,
                end,
                implicit,
                ctx: ctx.clone(),
                dev: dev.clone(),
                state <- new_mutex!(State {
                    dead: false,
                    chunks: RBTree::new(),
                }),
            }? Error),
            GFP_KERNEL,
        )?;
        let len = if implicit { 0 } else { end - start };
        // SAFETY: The owner is `mr`, at its final address inside the `Arc`; the notifier lives in
        // `mr.notifier` and is removed before `mr` is freed (type invariant of `OdpMr`: `close`,
        // or the field dropped first).
        let n = unsafe {
            OdpNotifier::new(
                start,
                len,
                Arc::as_ptr(&mr).cast::<c_void>(),
                NotifierOwner::Odp,
            )
        }?;
        // INVARIANT: the owner just registered is `mr`.
        mr.notifier.populate(n);
        Ok(mr)
    }

    /// REG_MR with no page list, then the region can be found by its key. The caller holds the
    /// bound-device lock and the file's objects (`exec` is the plain one: no region lock is
    /// held). Until this succeeded, nothing is mapped and no invalidation sends a command.
    ///
    /// # Errors
    ///
    /// What REG_MR returns, `ENOMEM` (then the region is deregistered again).
    pub(crate) fn register(self: &Arc<Self>, dev: &QhcaDevice) -> Result<u32> {
        let (iova, length) = if self.implicit {
            (0, uapi::QHCA_ODP_IMPLICIT_LENGTH)
        } else {
            (self.start, self.end - self.start)
        };
        dev.odp.mrs.lock().reserve(1, GFP_KERNEL)?;
        let args = uapi::qhca_cmd_reg_mr {
            uar: self.uar.to_le(),
            pdn: self.pdn.to_le(),
            iova: iova.to_le(),
            length: length.to_le(),
            access: self.access.to_le(),
            npages: 0,
            pages_addr: 0,
        };
        let raw = dev
            .exec(Cmd::new(uapi::QHCA_CMD_REG_MR).input_struct(&args))?
            .data[0];
        let key = u32::try_from(raw).map_err(|_| {
            dev_err!(dev.dev(), "device returned bad key {:#x}\n", raw);
            dev.declare_dead();
            EIO
        })?;
        self.key.store(key, Relaxed);
        dev.odp.add(self.clone()).inspect_err(|_| {
            let cmd = Cmd::new(uapi::QHCA_CMD_DEREG_MR)
                .input(0, self.uar.into())
                .input(1, key.into());
            // Nothing was mapped: a device that refuses to forget the region can do nothing
            // with it, but it is broken.
            if dev.exec(cmd).is_err() && !dev.cmdq.is_dead() {
                dev.declare_dead();
            }
        })?;
        Ok(key)
    }

    /// The region's key (0 until registered in the device).
    pub(crate) fn key(&self) -> u32 {
        self.key.load(Relaxed)
    }

    /// True if `[addr, addr + len)` is inside the region.
    pub(crate) fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.start && addr.checked_add(len).is_some_and(|e| e <= self.end)
    }

    /// Bytes from `addr` that one step (one `MAP_ODP`) covers, at most `len`.
    fn step_len(&self, addr: u64, len: u64) -> u64 {
        let page_end = ((addr >> PAGE_SHIFT) + CHUNK as u64) << PAGE_SHIFT;
        len.min(page_end - addr)
    }

    /// Handles a fault: the pages of `[va, va + length)` clipped to the region, at most
    /// `CHUNK` of them.
    fn fault(&self, dev: &QhcaDevice, pf: &PageFault, write: bool) -> Result {
        if pf.va < self.start || pf.va >= self.end {
            return Err(EFAULT);
        }
        let len = u64::from(pf.length.max(1)).min(self.end - pf.va);
        self.map(dev, pf.va, self.step_len(pf.va, len), write)
    }

    /// `ADVISE_MR` with `QHCA_ADVISE_FLAG_FLUSH`: maps `[addr, addr + len)` (inside the region)
    /// now, step by step.
    ///
    /// # Errors
    ///
    /// `EFAULT` if a page cannot be faulted in, `EINTR` if the caller is killed, `ENOENT` if the
    /// region is deregistered meanwhile, `EIO`/`ENODEV` if the device is gone.
    pub(crate) fn prefetch(
        &self,
        dev: &QhcaDevice,
        mut addr: u64,
        mut len: u64,
        write: bool,
    ) -> Result {
        add(&dev.odp.stats.prefetches, 1);
        while len != 0 {
            if shim::fatal_signal_pending() {
                return Err(EINTR);
            }
            let step = self.step_len(addr, len);
            self.map(dev, addr, step, write).map_err(|e| {
                if e == EPERM || e == ESRCH || e == EBUSY {
                    EFAULT
                } else {
                    e
                }
            })?;
            addr += step;
            len -= step;
        }
        Ok(())
    }

    /// `ADVISE_MR` without the flag: queues the prefetch for the worker.
    ///
    /// # Errors
    ///
    /// `EAGAIN` if too many are queued, `ENODEV` once the device is shut down.
    pub(crate) fn prefetch_async(
        self: &Arc<Self>,
        dev: &Arc<QhcaDevice>,
        addr: u64,
        len: u64,
        write: bool,
    ) -> Result {
        add(&dev.odp.stats.prefetches, 1);
        {
            // Room first, unlocked: `kick` takes the queue from invalidations.
            crate::context::reserve_unlocked(&dev.odp.prefetches, |p| p)?;
            let mut p = dev.odp.prefetches.lock();
            if p.len() >= MAX_QUEUED_PREFETCHES {
                return Err(EAGAIN);
            }
            if dev.odp.wq.lock().is_none() {
                return Err(ENODEV);
            }
            let job = Prefetch {
                mr: self.clone(),
                addr,
                len,
                write,
            };
            // Another prefetch took the room meanwhile: the caller may try again.
            p.push_within_capacity(job).map_err(|_| EAGAIN)?;
        }
        dev.odp.kick(dev);
        Ok(())
    }

    /// Maps the pages of `[addr, addr + len)` (inside the region, at most `CHUNK` pages) into the
    /// device: resolve, then under the lock check that no invalidation began, DMA-map, record,
    /// `MAP_ODP`. Retries when an invalidation raced.
    fn map(&self, dev: &QhcaDevice, addr: u64, len: u64, write: bool) -> Result {
        let first = addr >> PAGE_SHIFT;
        let last = (addr + len.max(1) - 1) >> PAGE_SHIFT;
        let n = (last - first + 1) as usize;
        if n > CHUNK || !self.contains(addr, len.max(1)) {
            return Err(EINVAL);
        }
        if write && self.access & uapi::QHCA_ACCESS_LOCAL_WRITE == 0 {
            return Err(EPERM);
        }
        let notifier = self.notifier.as_ref().ok_or(ENOENT)?;
        let mut pages = KVec::from_elem(FaultedPage::default(), n, GFP_KERNEL)?;
        for _ in 0..MAX_RETRIES {
            if self.state.lock().dead {
                return Err(ENOENT);
            }
            let seq = notifier.fault(first << PAGE_SHIFT, &mut pages, write)?;
            // The chunks the range needs, allocated here: nothing allocates under the lock.
            let mut spare: [Option<(u64, RBTreeNode<u64, Chunk>)>; 2] = [None, None];
            for (i, c) in [first / CHUNK as u64, last / CHUNK as u64]
                .into_iter()
                .enumerate()
            {
                if (i == 0 || c != first / CHUNK as u64)
                    && self.state.lock().chunks.get(&c).is_none()
                {
                    spare[i] = Some((c, RBTreeNode::new(c, Chunk::new()?, GFP_KERNEL)?));
                }
            }
            let done = dev.with_bound(|bound| {
                let mut mailbox = CoherentBox::<[u64]>::zeroed_slice(bound, n, GFP_KERNEL)?;
                let mut st = self.state.lock();
                if st.dead {
                    return Err(ENOENT);
                }
                if notifier.retry(seq) {
                    return Ok(false);
                }
                for (k, node) in spare.iter_mut().filter_map(Option::take) {
                    if st.chunks.get(&k).is_none() {
                        st.chunks.insert(node);
                    }
                }
                let writable_mr = self.access & uapi::QHCA_ACCESS_LOCAL_WRITE != 0;
                let mut added = 0u64;
                let mut res = Ok(());
                for (i, page) in pages.iter().enumerate() {
                    let vpn = first + i as u64;
                    let chunk = st.chunks.get_mut(&(vpn / CHUNK as u64)).ok_or(ENOMEM)?;
                    let e = &mut chunk.pages[(vpn % CHUNK as u64) as usize];
                    let writable = writable_mr && page.writable();
                    if e.mapped() {
                        if e.pfn() != page.pfn() {
                            // An invalidation clears a page before its mapping changes, and
                            // none began since the fault: this cannot be.
                            dev_err!(
                                dev.dev(),
                                "ODP key {:#x}: page {:#x} changed without an invalidation\n",
                                self.key(),
                                vpn
                            );
                            res = Err(EIO);
                            break;
                        }
                        e.bits |= u64::from(writable) << 1;
                    } else {
                        // SAFETY: `page` came from `notifier.fault` with sequence `seq`, which
                        // `retry` just found current under `state`, the lock this region's
                        // invalidations take; we still hold it, and the record below makes the
                        // next invalidation of the page unmap it first.
                        match unsafe { notifier.dma_map(bound, *page) } {
                            Ok(dma) => {
                                *e = Entry {
                                    dma,
                                    bits: page.pfn() << 2 | u64::from(writable) << 1 | 1,
                                };
                                chunk.mapped += 1;
                                added += 1;
                            }
                            Err(err) => {
                                res = Err(err);
                                break;
                            }
                        }
                    }
                    let flags = u64::from(uapi::QHCA_ODP_PRESENT)
                        | if e.writable() {
                            u64::from(uapi::QHCA_ODP_WRITABLE)
                        } else {
                            0
                        };
                    mailbox[i] = (e.dma | flags).to_le();
                }
                add(&dev.odp.stats.pages_mapped, added);
                MAPPED_PAGES.add(added as i64, Relaxed);
                res?;
                let mailbox: Coherent<[u64]> = mailbox.into();
                let cmd = Cmd::new(uapi::QHCA_CMD_MAP_ODP)
                    .input(0, self.uar.into())
                    .input(1, self.key().into())
                    .input(2, first)
                    .input(3, n as u64)
                    .input(4, mailbox.dma_address());
                dev.exec_no_report(cmd)?;
                Ok(true)
            });
            dev.check_death();
            if done? {
                return Ok(());
            }
        }
        Err(EBUSY)
    }

    /// The notifier's callback: see the module documentation. Returns false only when it may
    /// not sleep (the kernel then retries in a context that may).
    fn invalidate(&self, inv: &Invalidation, blockable: bool) -> bool {
        if !blockable {
            return false;
        }
        let mut st = self.state.lock();
        inv.set_seq();
        let start = inv.start.max(self.start);
        let end = inv.end.min(self.end);
        if start < end {
            let tell = !st.dead && !self.dev.is_stopped();
            self.unmap_locked(&mut st, start >> PAGE_SHIFT, (end - 1) >> PAGE_SHIFT, tell);
            drop(st);
            if tell && self.dev.is_stopped() {
                self.dev.odp.report_death_later(&self.dev);
            }
        }
        true
    }

    /// Unmaps every recorded page in `[first, last]` (page numbers): first `INVALIDATE_ODP` for
    /// them (if `tell`), and if the device does not confirm, it is stopped before anything is
    /// unmapped. Called under the region's lock (`st`).
    fn unmap_locked(&self, st: &mut State, first: u64, last: u64, tell: bool) {
        let dev = &*self.dev;
        let mut cursor = st.chunks.cursor_lower_bound_mut(&(first / CHUNK as u64));
        while let Some(mut cur) = cursor {
            let (&c, chunk) = cur.current_mut();
            let base = c * CHUNK as u64;
            if base > last {
                break;
            }
            let lo = first.max(base) - base;
            let hi = last.min(base + CHUNK as u64 - 1) - base;
            let range = &mut chunk.pages[lo as usize..=hi as usize];
            let lo_m = range.iter().position(|e| e.mapped());
            let hi_m = range.iter().rposition(|e| e.mapped());
            if let (Some(a), Some(b)) = (lo_m, hi_m) {
                if tell && !dev.is_stopped() {
                    let cmd = Cmd::new(uapi::QHCA_CMD_INVALIDATE_ODP)
                        .input(0, self.uar.into())
                        .input(1, self.key().into())
                        .input(2, base + lo + a as u64)
                        .input(3, (b - a + 1) as u64);
                    match dev.exec_no_report(cmd) {
                        Ok(_) => add(&dev.odp.stats.invalidations, 1),
                        Err(e) => {
                            // The device may still use the pages: stop it before they go.
                            dev_err!(
                                dev.dev(),
                                "INVALIDATE_ODP of key {:#x} failed ({:?}); stopping the device\n",
                                self.key(),
                                e
                            );
                            dev.stop_no_report();
                        }
                    }
                }
                let mut gone = 0u64;
                for e in range[a..=b].iter_mut().filter(|e| e.mapped()) {
                    // SAFETY: `e` records a live mapping of `e.pfn()` for this device, made by
                    // `map` and unmapped only here, where it is cleared; the device no longer
                    // uses it (INVALIDATE_ODP completed, the region is gone from the device, or
                    // the device is stopped); and the page is still the process's: this runs in
                    // its invalidation, or before the notifier is removed.
                    unsafe { shim::odp_dma_unmap(dev.dev(), e.dma, e.pfn(), e.writable()) };
                    *e = Entry::default();
                    gone += 1;
                }
                chunk.mapped -= gone as usize;
                add(&dev.odp.stats.pages_unmapped, gone);
                MAPPED_PAGES.fetch_sub(gone as i64, Relaxed);
            }
            cursor = if chunk.mapped == 0 {
                let (next, node) = cur.remove_current();
                drop(node);
                next
            } else {
                cur.move_next()
            };
        }
    }

    /// Deregisters the region: `DEREG_MR` (unless `alive` is false: the device is stopped and
    /// forgot it), then everything is unmapped, then the notifier removed. The caller holds the
    /// bound-device lock and the file's objects, not this region's lock.
    ///
    /// # Errors
    ///
    /// What `DEREG_MR` returned while the device stays alive: the region is then left as it was
    /// (registered, watched, its pages mapped).
    pub(crate) fn close(&self, dev: &QhcaDevice, alive: bool) -> Result {
        let res = {
            let mut st = self.state.lock();
            let res = if st.dead || !alive || dev.is_stopped() {
                Ok(())
            } else {
                dereg_locked(dev, self.uar, self.key())
            };
            if res.is_ok() {
                st.dead = true;
                self.unmap_locked(&mut st, 0, u64::MAX >> PAGE_SHIFT, false);
            }
            res
        };
        dev.check_death();
        res?;
        dev.odp.forget(self.key());
        if let Some(n) = self.notifier.as_ref() {
            n.remove();
        }
        Ok(())
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

/// The notifier's callback (`qhca_shim.c`, `qhca_odp_invalidate`).
///
/// # Safety
///
/// `owner` is the owner given to [`OdpNotifier::new`] (an `OdpMr`, alive while the notifier is
/// inserted), `o` the notifier the callback runs for, and `cur_seq` its sequence.
#[no_mangle]
unsafe extern "C" fn qhca_rust_odp_invalidate(
    owner: *const kernel::ffi::c_void,
    o: *mut shim::QhcaOdp,
    start: u64,
    end: u64,
    cur_seq: kernel::ffi::c_ulong,
    blockable: bool,
) -> bool {
    // SAFETY: By the type invariant of `OdpMr`, the owner of an inserted notifier is a live
    // `OdpMr` (the notifier is removed before it is freed), and the callback runs only while
    // the notifier is inserted.
    let mr = unsafe { &*owner.cast::<OdpMr>() };
    // SAFETY: `o` and `cur_seq` are the callback's own (caller's promise); `inv` does not
    // outlive this call.
    let inv = unsafe { Invalidation::new(o, start, end, cur_seq) };
    mr.invalidate(&inv, blockable)
}
