// SPDX-License-Identifier: GPL-2.0

//! State shared by a device's PCI binding and every user context on it.
//!
//! A user context can outlive the binding (unbind with a process still holding it), so what
//! contexts need lives in an `Arc<QhcaDevice>` whose hardware access is revocable: BAR0 through
//! `Devres`, and the doorbell pages through the RDMA core, which zaps a context's mappings when
//! the device disassociates it ([`Ctx`]) on unbind or failure.
//!
//! Lock order: `bound`, then the context's objects (a context's `objs`), then
//! the command queue's locks, then `files`, then a context's state. Nothing that touches user
//! memory (copies, pinning) runs under `bound` or any lock after it.

use crate::{
    cmdq::{AsyncEvent, Cmd, CmdOutput, CmdQueue, EqHost},
    context::Ctx,
    regs, shim, uapi,
};
use kernel::{
    device::{Bound, Device},
    dma::{Coherent, CoherentBox},
    io::Io,
    new_mutex, pci,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Atomic, Relaxed},
        Arc, Mutex, SetOnce,
    },
    time::{Instant, Monotonic},
    transmute::FromBytes,
    workqueue::{new_work, Work, WorkItem},
};

/// Open contexts, and why the device is gone once it is.
struct Files {
    open: KVec<Arc<Ctx>>,
    /// `ENODEV` once unbound, `EIO` once the device failed.
    gone: Option<Error>,
}

/// Lets through at most `BURST` messages every `INTERVAL_MS` (for messages user space can
/// trigger at will).
pub(crate) struct RateLimit {
    epoch: Instant<Monotonic>,
    window: Atomic<u64>,
    count: Atomic<u32>,
}

impl RateLimit {
    const INTERVAL_MS: u64 = 5000;
    const BURST: u32 = 10;

    fn new() -> Self {
        Self {
            epoch: Instant::now(),
            window: Atomic::new(0),
            count: Atomic::new(0),
        }
    }

    /// True if a message may go out now. Races only move the count by a message or two.
    pub(crate) fn allow(&self) -> bool {
        let now = self.epoch.elapsed().as_millis() as u64 / Self::INTERVAL_MS;
        if self.window.xchg(now, Relaxed) != now {
            self.count.store(0, Relaxed);
        }
        self.count.fetch_add(1, Relaxed) < Self::BURST
    }
}

/// One qhca device, as seen by its user contexts.
#[pin_data]
pub(crate) struct QhcaDevice {
    pdev: ARef<pci::Device>,
    /// Index of this device among qhca devices (`qhcaN`).
    pub(crate) instance: u32,
    pub(crate) regs: regs::SharedBar0,
    #[pin]
    pub(crate) cmdq: CmdQueue,
    /// Bus address of BAR2, the doorbell pages.
    uar_phys: u64,
    /// BAR2 as the driver rings its own doorbells (its kernel context's page): revoked at
    /// unbind.
    uar_bar: pci::DevresBar,
    /// What QUERY_DEVICE returned at probe, in CPU byte order.
    attr: SetOnce<uapi::qhca_device_attr>,
    /// The RDMA core's side of the device, for device-wide events (set once registered).
    ib_events: SetOnce<crate::rdma::Events>,
    #[pin]
    files: Mutex<Files>,
    /// The entries of the port's GID table that the RDMA core set (bit `i` for entry `i`); see
    /// [`QhcaDevice::core_add_gid`]. Held across the SET_GID command that changes one.
    #[pin]
    pub(crate) core_gids: Mutex<u16>,
    /// True while the driver is bound. Held by control paths that need the bound device (DMA
    /// mappings, commands); `shutdown` stops the device and clears it, waiting for them.
    #[pin]
    bound: Mutex<bool>,
    /// `EQ_OVERFLOWS` as last read.
    eq_overflows: Atomic<u32>,
    /// For warnings that user space can trigger.
    pub(crate) warn: RateLimit,
    /// For event-queue overflow warnings (kept apart so that user noise cannot hide them).
    eq_warn: RateLimit,
    /// Set once the device is stopped (reset, bus mastering off): it does no more DMA.
    stopped: Atomic<bool>,
    /// On-demand paging: regions by key, the device's work queue, counters.
    #[pin]
    pub(crate) odp: crate::odp::OdpDevice,
    /// What each user holds of the device's pools ([`crate::limits`]).
    #[pin]
    pub(crate) limits: crate::limits::Limits,
    /// The fault worker (runs [`crate::odp::work`] on `odp`'s queue).
    #[pin]
    odp_work: Work<QhcaDevice>,
}

kernel::impl_has_work! {
    impl HasWork<Self> for QhcaDevice { self.odp_work }
}

impl WorkItem for QhcaDevice {
    type Pointer = Arc<QhcaDevice>;

    fn run(this: Arc<QhcaDevice>) {
        crate::odp::work(&this);
    }
}

impl QhcaDevice {
    pub(crate) fn new(
        pdev: &pci::Device<Bound>,
        instance: u32,
        regs: regs::SharedBar0,
        uar_phys: u64,
        uar_bar: pci::DevresBar,
    ) -> Result<impl PinInit<Self, Error>> {
        let cmdq = CmdQueue::new(pdev.as_ref())?;
        let odp = crate::odp::OdpDevice::new(instance)?;
        let pdev: ARef<pci::Device> = pdev.into();
        Ok(try_pin_init!(Self {
            pdev,
            instance,
            regs,
            cmdq <- cmdq,
            uar_phys,
            uar_bar,
            attr: SetOnce::new(),
            ib_events: SetOnce::new(),
            files <- new_mutex!(Files { open: KVec::new(), gone: None }),
            core_gids <- new_mutex!(0),
            bound <- new_mutex!(true),
            eq_overflows: Atomic::new(0),
            warn: RateLimit::new(),
            eq_warn: RateLimit::new(),
            stopped: Atomic::new(false),
            odp <- odp,
            limits <- crate::limits::Limits::new(),
            odp_work <- new_work!("qhca-odp"),
        }? Error))
    }

    pub(crate) fn dev(&self) -> &Device {
        self.pdev.as_ref()
    }

    /// Posts a command and waits for its completion. If the command queue dies on the way, the
    /// device has been stopped before this returns, and every context is disassociated.
    pub(crate) fn exec(&self, cmd: Cmd) -> Result<CmdOutput> {
        let res = self.cmdq.exec(self, cmd);
        self.check_death();
        res
    }

    /// [`QhcaDevice::exec`] for callers that hold an ODP region's lock (or run inside an
    /// invalidation): if the queue dies, the device is stopped before this returns, but the
    /// contexts are told later, by the caller's [`QhcaDevice::check_death`] once it let go of
    /// the lock (telling them zaps mappings, which runs invalidations).
    pub(crate) fn exec_no_report(&self, cmd: Cmd) -> Result<CmdOutput> {
        self.cmdq.exec(self, cmd)
    }

    /// Stops the device (as a dead command queue does) from under an ODP region's lock: the
    /// contexts are told by the next [`QhcaDevice::check_death`].
    pub(crate) fn stop_no_report(&self) {
        self.cmdq.fail(self);
    }

    /// True once the device is stopped: it does no more DMA.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Relaxed)
    }

    /// Declares the device broken (it answered what no working device would): it is stopped
    /// (reset, bus mastering off) and every context is disassociated, so that memory it was
    /// given may be freed.
    pub(crate) fn declare_dead(&self) {
        self.cmdq.fail(self);
        self.check_death();
    }

    /// The threaded half of the event-queue interrupt.
    pub(crate) fn service_events(this: &Arc<Self>) {
        this.service_events_inner();
    }

    fn service_events_inner(&self) {
        let stall = crate::debugfs::STALL_EVENTS_MS.xchg(0, Relaxed).min(10_000);
        if stall != 0 {
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(i64::from(stall)));
        }
        self.cmdq.service(self);
        let lost = regs::with(&self.regs, |b| b.read32(regs::EQ_OVERFLOWS)).unwrap_or(0);
        let before = self.eq_overflows.xchg(lost, Relaxed);
        if lost != before {
            // Completion events may be among the lost ones: wake every CQ waiter, which polls its
            // CQ and finds what is there.
            if self.eq_warn.allow() {
                dev_warn!(
                    self.dev(),
                    "qhca{}: event queue overflowed, {} events lost in all\n",
                    self.instance,
                    lost
                );
            }
            for ctx in self.files.lock().open.iter() {
                ctx.signal_all_cqs();
            }
        }
        self.check_death();
    }

    /// Fault injection (debugfs `inject_event`): dispatches `ev` as if the device had posted it.
    pub(crate) fn inject_event(this: &Arc<Self>, ev: AsyncEvent) {
        this.on_event(ev);
    }

    /// For debugfs `state`.
    pub(crate) fn show_state(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        let (n, gone, kernel) = {
            let files = self.files.lock();
            let kernel = files.open.iter().find(|c| c.kernel).cloned();
            (files.open.len(), files.gone, kernel)
        };
        writeln!(f, "contexts: {}", n)?;
        if let Some(k) = kernel {
            // The kernel consumers' share of what the device holds (the count below includes
            // it): their context's page and objects, as the driver knows them.
            let [pd, mr, cq, qp, ah] = k.objs.lock().counts();
            writeln!(
                f,
                "kernel context: uar {} pd {} mr {} cq {} qp {} ah {}",
                k.uar().map_or(-1, i64::from),
                pd,
                mr,
                cq,
                qp,
                ah
            )?;
        }
        writeln!(
            f,
            "command queue: {}",
            if self.cmdq.is_dead() { "dead" } else { "alive" }
        )?;
        writeln!(f, "gone: {:?}", gone)?;
        writeln!(f, "event interrupts: {}", self.cmdq.irq_count())?;
        writeln!(
            f,
            "events lost (EQ_OVERFLOWS): {}",
            self.eq_overflows.load(Relaxed)
        )?;
        // What the device holds, of every context, and the datagrams it delivered to no QP.
        let counts = regs::with(&self.regs, |b| {
            [
                b.read32(regs::NUM_CTX),
                b.read32(regs::NUM_PD),
                b.read32(regs::NUM_MR),
                b.read32(regs::NUM_CQ),
                b.read32(regs::NUM_QP),
                b.read32(regs::NUM_MW),
                b.read32(regs::NUM_AH),
                b.read32(regs::UD_NO_QP),
            ]
        });
        if let Ok([ctx, pd, mr, cq, qp, mw, ah, no_qp]) = counts {
            writeln!(
                f,
                "device objects: ctx {} pd {} mr {} cq {} qp {} mw {} ah {}",
                ctx, pd, mr, cq, qp, mw, ah
            )?;
            writeln!(f, "datagrams to no QP (UD_NO_QP): {}", no_qp)?;
        }
        Ok(())
    }

    /// Tells every context once the command queue has died.
    pub(crate) fn check_death(&self) {
        if self.cmdq.take_death() {
            let n = self.files.lock().open.len();
            dev_err!(
                self.dev(),
                "qhca{}: command queue dead: device reset and bus mastering off; {} context(s) disassociated\n",
                self.instance,
                n
            );
            self.disassociate_all(EIO);
            if let Some(ev) = self.ib_events.as_ref() {
                ev.device_fatal();
            }
        }
    }

    /// Where device-wide events go in the RDMA core (set once, at probe).
    pub(crate) fn set_ib_events(&self, ev: crate::rdma::Events) {
        self.ib_events.populate(ev);
    }

    /// Marks the device gone for `reason` (the first reason stays) and disassociates every
    /// context.
    ///
    /// Disassociating zaps the contexts' doorbell mappings, which runs the mmu notifiers of
    /// their processes (ODP regions, whose commands drain the event queue, which takes `files`):
    /// so it runs with `files` released. No context opens once `gone` is set.
    fn disassociate_all(&self, reason: Error) {
        let n = {
            let mut files = self.files.lock();
            if files.gone.is_none() {
                files.gone = Some(reason);
            }
            files.open.len()
        };
        let mut ctxs = KVec::with_capacity(n, GFP_KERNEL).ok();
        let reason = {
            let files = self.files.lock();
            if let Some(v) = ctxs.as_mut() {
                for ctx in files.open.iter() {
                    if v.push_within_capacity(ctx.clone()).is_err() {
                        break;
                    }
                }
            }
            files.gone.unwrap_or(reason)
        };
        match ctxs {
            Some(v) if v.len() == n => {
                for ctx in v.iter() {
                    ctx.disassociate(reason);
                }
            }
            // No memory for the list (or it grew, which `gone` forbids): under the lock then.
            _ => {
                for ctx in self.files.lock().open.iter() {
                    ctx.disassociate(reason);
                }
            }
        }
    }

    /// Routes an asynchronous event to the context the device names, if it owns the object.
    fn route(&self, ev: &AsyncEvent) -> bool {
        let (Ok(obj), Ok(uar)) = (u32::try_from(ev.data[0]), u32::try_from(ev.data[1])) else {
            return false;
        };
        let files = self.files.lock();
        let Some(ctx) = files.open.iter().find(|c| c.uar() == Some(uar)) else {
            return false;
        };
        match ev.kind {
            uapi::QHCA_EQE_CQ_COMP => ctx.cq_event(obj, false),
            uapi::QHCA_EQE_CQ_ERR => ctx.cq_event(obj, true),
            uapi::QHCA_EQE_SRQ_LIMIT => ctx.srq_event(obj),
            uapi::QHCA_EQE_QP_LAST_WQE => ctx.qp_event(obj, true),
            _ => ctx.qp_event(obj, false),
        }
    }

    /// Runs QUERY_DEVICE and keeps the answer for `attr()`.
    pub(crate) fn query(&self, dev: &Device<Bound>) -> Result<&uapi::qhca_device_attr> {
        const SIZE: usize = core::mem::size_of::<uapi::qhca_device_attr>();
        let buf: Coherent<[u8]> = CoherentBox::<[u8]>::zeroed_slice(dev, SIZE, GFP_KERNEL)?.into();
        self.exec(Cmd::new(uapi::QHCA_CMD_QUERY_DEVICE).output(buf.dma_address(), SIZE as u32))?;
        let mut bytes = [0u8; SIZE];
        (&buf).copy_to_slice(&mut bytes);
        let le = uapi::qhca_device_attr::from_bytes_copy(&bytes).ok_or(EIO)?;
        let mut attr = attr_from_le(&le);
        if attr.abi_version != uapi::QHCA_ABI_VERSION {
            dev_err!(
                dev,
                "device speaks ABI {}, driver {}\n",
                attr.abi_version,
                uapi::QHCA_ABI_VERSION
            );
            return Err(ENODEV);
        }
        let fake = crate::debugfs::FAKE_NUM_UARS.load(Relaxed);
        if fake != 0 {
            attr.num_uars = fake;
        }
        if attr.caps & u64::from(uapi::QHCA_CAP_CMD_FLAGS) != 0 {
            self.cmdq.use_flags();
        } else {
            // The fault path resumes a fault in its MAP_ODP (`QHCA_CMD_FLAG_RESUME`).
            attr.caps &= !u64::from(uapi::QHCA_CAP_ODP);
        }
        if attr.caps & u64::from(uapi::QHCA_CAP_ODP) == 0 {
            attr.odp_general_caps = 0;
            attr.odp_rc_caps = 0;
            attr.odp_ud_caps = 0;
        }
        if attr.caps & u64::from(uapi::QHCA_CAP_MW) == 0 {
            attr.max_mw = 0;
        }
        if attr.caps & u64::from(uapi::QHCA_CAP_UD) == 0 {
            attr.max_ah = 0;
            attr.odp_ud_caps = 0;
        }
        if attr.caps & u64::from(uapi::QHCA_CAP_SRQ) == 0 {
            attr.max_srq = 0;
            attr.max_srq_wr = 0;
        }
        self.attr.populate(attr);
        self.attr.as_ref().ok_or(EIO)
    }

    /// The device's attributes, as queried at probe.
    pub(crate) fn attr(&self) -> Result<&uapi::qhca_device_attr> {
        self.attr.as_ref().ok_or(ENODEV)
    }

    /// Adds a context (at open). Nothing is asked of the device: its doorbell page comes with
    /// its first use ([`QhcaDevice::alloc_uar`]).
    ///
    /// # Errors
    ///
    /// `ENODEV` after unbind, `EIO` after the device failed.
    pub(crate) fn open_context(&self, ctx: Arc<Ctx>) -> Result {
        // Room first, with `files` unlocked: the event dispatcher takes it under the event
        // queue, which ODP invalidations (possibly from reclaim) wait for.
        crate::context::reserve_unlocked(&self.files, |f| &mut f.open)?;
        let mut files = self.files.lock();
        if let Some(e) = files.gone {
            return Err(e);
        }
        // Fails only if another open took the room meanwhile; that allocation may then wait
        // (rare, and only for an open).
        if let Err(kernel::alloc::kvec::PushError(ctx)) = files.open.push_within_capacity(ctx) {
            drop(files);
            crate::context::reserve_unlocked(&self.files, |f| &mut f.open)?;
            let mut files = self.files.lock();
            if let Some(e) = files.gone {
                return Err(e);
            }
            return files.open.push_within_capacity(ctx).map_err(|_| EAGAIN);
        }
        Ok(())
    }

    /// Allocates a doorbell page.
    ///
    /// # Errors
    ///
    /// `ENOSPC` when every page is taken, `EIO` if the device is dead or names a page that does
    /// not exist.
    pub(crate) fn alloc_uar(&self) -> Result<u32> {
        self.alloc_uar_with(0)
    }

    /// Allocates a doorbell page with `QHCA_UAR_*` `flags`, as [`QhcaDevice::alloc_uar`].
    pub(crate) fn alloc_uar_with(&self, flags: u32) -> Result<u32> {
        let out = self.exec(Cmd::new(uapi::QHCA_CMD_ALLOC_UAR).input(0, flags.into()))?;
        let num_uars = self.attr()?.num_uars;
        match u32::try_from(out.data[0]) {
            Ok(uar) if uar < num_uars => Ok(uar),
            _ => {
                dev_err!(
                    self.dev(),
                    "device returned bad doorbell page {}\n",
                    out.data[0]
                );
                Err(EIO)
            }
        }
    }

    /// Rings a doorbell of the driver's own: stores `word` at `QHCA_DB_OFFSET` of doorbell
    /// page `uar`. Never sleeps. After unbind it does nothing (nothing is left to ring for).
    pub(crate) fn ring_doorbell(&self, uar: u32, word: u64) {
        let off = (uar as usize) << uapi::QHCA_UAR_PAGE_SHIFT | uapi::QHCA_DB_OFFSET as usize;
        if let Some(bar) = self.uar_bar.try_access() {
            // `uar` is below `num_uars`, which probe checked against BAR2's length; a failure
            // (an offset past the BAR) leaves the queue unrung, which its owner sees as a stall.
            let _ = bar.try_write64(word, off);
        }
    }

    /// Rings doorbell `kind` (`QHCA_DB_*`) of queue `queue` (a QP, CQ or SRQ number) with
    /// `index` on doorbell page `uar`: the word the ABI lays out.
    pub(crate) fn ring_queue(&self, uar: u32, queue: u32, kind: u32, index: u32) {
        let word = u64::from(queue)
            | u64::from(kind) << uapi::QHCA_DB_TYPE_SHIFT
            | u64::from(index) << uapi::QHCA_DB_INDEX_SHIFT;
        self.ring_doorbell(uar, word);
    }

    /// Bus address of doorbell page `uar` (checked against BAR2 at probe).
    pub(crate) fn uar_phys(&self, uar: u32) -> u64 {
        self.uar_phys + (u64::from(uar) << uapi::QHCA_UAR_PAGE_SHIFT)
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
        // SAFETY: `shutdown` clears `bound` under this lock before the driver lets go of the
        // device, so while we hold the lock with `bound` set the device stays bound; the
        // reference does not escape `f`.
        f(unsafe { self.dev().as_bound() })
    }

    /// Undoes `open_context` and everything the context created: destroys its objects, frees
    /// its doorbell page and forgets `ctx`. While the device is alive, that is done by commands;
    /// once it is stopped (unbound or failed) it forgot everything, and only host resources are
    /// freed (none DMA-related once unbind released them, see [`QhcaDevice::shutdown`]).
    pub(crate) fn close_context(&self, ctx: &Arc<Ctx>, uar: Option<u32>) {
        {
            let bound = self.bound.lock();
            let alive = *bound && !self.cmdq.is_dead();
            ctx.objs.lock().destroy_all(self, ctx, uar, alive);
            if let Some(uar) = uar.filter(|_| alive) {
                if let Err(e) = self.exec(Cmd::new(uapi::QHCA_CMD_FREE_UAR).input(0, uar.into())) {
                    dev_warn!(self.dev(), "FREE_UAR {} failed: {:?}\n", uar, e);
                }
            }
            ctx.quota.uncharge(crate::limits::Pool::Contexts, 1);
        }
        // Forgotten only now that its objects are gone: until then an unbind finds the context
        // and waits (on its objects' lock) for the DMA resources to be freed.
        let mut files = self.files.lock();
        if let Some(pos) = files.open.iter().position(|c| Arc::ptr_eq(c, ctx)) {
            let _ = files.open.remove(pos);
        }
    }

    /// Unbind: stops the device, disassociates every context, then frees every DMA resource
    /// while the driver is still bound (after it returns, the device's DMA ops may be gone: with
    /// an IOMMU a later free or unmap would go through dma-direct with an IOVA). Waits for
    /// control paths that use the bound device, and lets no new one start.
    ///
    /// What is freed here: every open context's objects ([`Ctx::release_objects`]: DMA mappings
    /// and pins of their memory, ODP regions with their mappings and notifiers), then the
    /// command and event rings. What can still run afterwards finds them gone: commands fail
    /// (`ENODEV`, the bound-device check), new objects cannot be created (they need the bound
    /// device), the fault worker is stopped, ODP invalidations find no region, a command fails
    /// with `ENODEV` and the event ring reads as empty; a context's deallocation then frees only
    /// plain memory.
    pub(crate) fn shutdown(&self) {
        {
            let mut bound = self.bound.lock();
            self.stop();
            // Commands in flight (ODP invalidations, the fault worker's) fail now rather than
            // time out: the device answers none any more.
            self.cmdq.halt();
            *bound = false;
        }
        let n = self.files.lock().open.len();
        if n != 0 {
            dev_info!(self.dev(), "unbound with {} open context(s)\n", n);
        }
        self.disassociate_all(ENODEV);
        // The fault service stops (its workers are not waited for); the device's work queue
        // finishes what is queued (every command fails now), then goes.
        self.odp.shutdown();
        // One context at a time, with `files` released (the objects' lock comes before it). A
        // context closing meanwhile stays listed until its own release destroyed its objects
        // (`close_context`), so each one is either found here or already clean; none opens
        // now that the device is gone.
        loop {
            let next = self
                .files
                .lock()
                .open
                .iter()
                .find(|c| !c.objects_released())
                .cloned();
            let Some(ctx) = next else {
                break;
            };
            ctx.release_objects(self);
        }
        // The device is stopped and nothing else holds DMA memory of it: the rings go last.
        self.cmdq.release();
    }
}

impl EqHost for QhcaDevice {
    fn dev(&self) -> &Device {
        self.pdev.as_ref()
    }

    fn bar(&self) -> &regs::SharedBar0 {
        &self.regs
    }

    fn on_event(&self, ev: AsyncEvent) {
        match ev.kind {
            uapi::QHCA_EQE_CQ_COMP => {
                self.route(&ev);
            }
            uapi::QHCA_EQE_QP_ERR => {
                let routed = self.route(&ev);
                dev_dbg!(
                    self.dev(),
                    "QP {:#x} of context {} entered ERR (routed: {})\n",
                    ev.data[0],
                    ev.data[1],
                    routed
                );
            }
            uapi::QHCA_EQE_SRQ_LIMIT | uapi::QHCA_EQE_QP_LAST_WQE => {
                let routed = self.route(&ev);
                dev_dbg!(
                    self.dev(),
                    "event {} for {:#x} of context {} (routed: {})\n",
                    ev.kind,
                    ev.data[0],
                    ev.data[1],
                    routed
                );
            }
            uapi::QHCA_EQE_CQ_ERR => {
                // User space can overrun its CQs at will: rate-limited.
                let routed = self.route(&ev);
                if self.warn.allow() {
                    dev_warn!(
                        self.dev(),
                        "CQ {:#x} of context {} overran or failed{}\n",
                        ev.data[0],
                        ev.data[1],
                        if routed { "" } else { " (no such CQ)" }
                    );
                }
            }
            uapi::QHCA_EQE_PAGE_FAULT => {
                let pf = crate::odp::PageFault::from_event(&ev);
                let files = self.files.lock();
                let owner = files.open.iter().find(|c| c.owns_qp(pf.qpn()));
                self.odp.queue_fault(self, owner, pf);
            }
            uapi::QHCA_EQE_PORT_CHANGE => {
                // The device is not trusted: port 1 and a state we know, or nothing happens.
                let (port, state) = (ev.data[0], ev.data[1]);
                let active = match u32::try_from(state) {
                    Ok(uapi::QHCA_PORT_ACTIVE) if port == 1 => true,
                    Ok(uapi::QHCA_PORT_DOWN) if port == 1 => false,
                    _ => {
                        if self.warn.allow() {
                            dev_warn!(self.dev(), "port {} changed to state {}?\n", port, state);
                        }
                        return;
                    }
                };
                dev_info!(
                    self.dev(),
                    "port 1 link {}\n",
                    if active { "up" } else { "down" }
                );
                if let Some(ib) = self.ib_events.as_ref() {
                    ib.link_changed();
                }
            }
            kind => {
                if self.warn.allow() {
                    dev_warn!(self.dev(), "unknown event type {}\n", kind);
                }
            }
        }
    }

    /// Resets the device and turns bus mastering off: no more DMA, whatever state it was in.
    fn stop(&self) {
        let _ = regs::with(&self.regs, |b| b.write32(uapi::QHCA_CTRL_RESET, regs::CTRL));
        shim::clear_master(&*self.pdev);
        self.stopped.store(true, Relaxed);
    }

    fn inject(&self) -> bool {
        crate::debugfs::take(&crate::debugfs::FAIL_CMDS)
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
        max_mw: u32::from_le(le.max_mw),
        max_qp_rd_atom: u16::from_le(le.max_qp_rd_atom),
        max_qp_init_rd_atom: u16::from_le(le.max_qp_init_rd_atom),
        max_mr_size: u64::from_le(le.max_mr_size),
        page_size_cap: u64::from_le(le.page_size_cap),
        odp_general_caps: u64::from_le(le.odp_general_caps),
        odp_rc_caps: u32::from_le(le.odp_rc_caps),
        odp_ud_caps: u32::from_le(le.odp_ud_caps),
        max_ah: u32::from_le(le.max_ah),
        max_srq: u32::from_le(le.max_srq),
        max_srq_wr: u32::from_le(le.max_srq_wr),
    }
}
