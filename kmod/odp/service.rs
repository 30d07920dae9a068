// SPDX-License-Identifier: GPL-2.0

//! The page-fault service: each context serves its own faults and prefetches, one at a time, on
//! the driver's unbound fault workqueue, so that no process can delay another's faults.
//!
//! - **Per context.** A context ([`Ctx`]) owns a [`FaultService`]: the faults the device raised
//!   for its QPs and the prefetches it asked for, and one work item that serves them. Work items
//!   of different contexts run at the same time on [the fault workqueue](FaultQueue), so a fault
//!   that takes long (a FUSE mapping whose daemon never answers, a `madvise` loop that keeps
//!   invalidating the page) holds back only the context that made it.
//! - **Nothing is dropped.** The device has at most one fault outstanding per QP and side
//!   (requester, responder): a newer one for the same QP and side means the device forgot the
//!   older (the QP was reset), which is then replaced in place. So a context's queue never holds
//!   more than two faults per QP, and room for them is reserved when the QP is created
//!   ([`FaultService::reserve`]): the event dispatcher, which must not allocate, always finds
//!   room. A QP's faults go when the QP does.
//! - **Progress.** A fault that keeps racing invalidations gives up its turn after a few tries
//!   and is resumed with `QHCA_RESUME_OK`: the QP retries the access and faults again if it must,
//!   behind the context's other faults. Only a page that cannot be had fails the access.
//! - **Read-ahead** (debugfs `odp_read_ahead`, off by default). A fault that continues a
//!   sequential stream in its region queues the pages after it (one stream per context, the
//!   window doubling up to 4 MiB), mapped a few pages at a time after the context's faults: the
//!   QP runs again meanwhile, and its next packets may find their pages in.
//! - **Prefetches** (`ADVISE_MR` without `QHCA_ADVISE_FLAG_FLUSH`) are served one step (one
//!   `MAP_ODP`) at a time between faults and read-ahead steps, round-robin among the context's
//!   own; a context has at most [`MAX_QUEUED_PREFETCHES`] waiting.
//! - **Unbind** does not wait for the fault workers (a stuck one would stall it): it stops the
//!   device, after which a worker's commands fail at once, and marks the service closed; the
//!   workers then empty their queues and stop. Module unload waits for them (it destroys the
//!   workqueue).
//!
//! Locking: a service's queues are pushed under the event queue's lock and the device's
//! `files` (the dispatcher), so nothing allocates under their lock, and the worker holds it only
//! to take one item.

use super::{add, OdpMr, PageFault, Phase, Prefetch};
use crate::{cmdq::Cmd, context::Ctx, device::QhcaDevice, shim::OwnedQueue, uapi};
use kernel::{
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
};

/// Prefetches queued (without `QHCA_ADVISE_FLAG_FLUSH`) and not yet run, per context.
pub(crate) const MAX_QUEUED_PREFETCHES: usize = 64;

kernel::sync::global_lock! {
    // SAFETY: `FaultQueue::new` initialises it, once, at module load, before the driver is
    // registered (so before any context exists).
    unsafe(uninit) static QUEUE: Mutex<Option<OwnedQueue>> = None;
}

/// The driver's fault workqueue (unbound: the work items of different contexts run at once),
/// for as long as the module is loaded. Dropping it (module unload, after every device is
/// unbound and every file closed) waits for the work items still running.
pub(crate) struct FaultQueue(());

impl FaultQueue {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: Called once, from module init, before the driver is registered.
        unsafe { QUEUE.init() };
        *QUEUE.lock() = Some(OwnedQueue::new_unbound(c"qhca_fault")?);
        Ok(Self(()))
    }
}

impl Drop for FaultQueue {
    fn drop(&mut self) {
        // Taken out first, destroyed outside the lock: a worker that finishes meanwhile and
        // queues more finds no queue.
        let q = QUEUE.lock().take();
        drop(q);
    }
}

/// Runs `ctx`'s work item soon (unless it is queued already: it will find what is new).
pub(crate) fn kick(ctx: &Arc<Ctx>) {
    if ctx.dev.odp.is_closed() {
        return;
    }
    if let Some(q) = QUEUE.lock().as_ref() {
        let _ = q.queue().enqueue(ctx.clone());
    }
}

struct Queues {
    /// Faults waiting, oldest first; at most one per QP and side.
    faults: KVec<PageFault>,
    /// The read-ahead of the last sequential fault stream, if it has more to map: served a
    /// step at a time after the faults, before the prefetches.
    ahead: Option<Prefetch>,
    /// Prefetches waiting; the one served last goes to the back.
    prefetches: KVec<Prefetch>,
}

/// A context's faults and prefetches (see the module documentation).
#[pin_data]
pub(crate) struct FaultService {
    #[pin]
    queues: Mutex<Queues>,
}

impl FaultService {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            queues <- new_mutex!(Queues {
                faults: KVec::new(),
                ahead: None,
                prefetches: KVec::new(),
            }),
        })
    }

    /// Makes room for the faults of `nqps` QPs (two each), so that [`FaultService::push`]
    /// cannot run out. Allocates with the queues unlocked.
    pub(crate) fn reserve(&self, nqps: usize) -> Result {
        let want = 2 * nqps;
        loop {
            let have = self.queues.lock().faults.capacity();
            if have >= want {
                return Ok(());
            }
            let mut bigger = KVec::with_capacity(want.max(2 * have), GFP_KERNEL)?;
            let mut q = self.queues.lock();
            if q.faults.capacity() >= want {
                return Ok(());
            }
            if q.faults.len() > bigger.capacity() {
                continue;
            }
            for f in q.faults.drain_all() {
                // Room: `bigger` holds at least as many as `q.faults` did.
                if bigger.push_within_capacity(f).is_err() {
                    return Err(ENOMEM);
                }
            }
            q.faults = bigger;
            return Ok(());
        }
    }

    /// Queues a fault of one of the context's QPs (the dispatcher: never allocates). A fault of
    /// the same QP and side that still waits is replaced: the device forgot it. Returns false
    /// only if there is no room, which [`FaultService::reserve`] rules out.
    pub(crate) fn push(&self, pf: PageFault) -> bool {
        let mut q = self.queues.lock();
        if let Some(old) = q.faults.iter_mut().find(|f| f.same_waiter(&pf)) {
            *old = pf;
            return true;
        }
        q.faults.push_within_capacity(pf).is_ok()
    }

    /// Forgets the faults of QP `qpn` (destroyed: the device would refuse their RESUME).
    pub(crate) fn forget_qp(&self, qpn: u32) {
        self.queues.lock().faults.retain(|f| f.qpn != qpn);
    }

    /// Queues a prefetch.
    ///
    /// # Errors
    ///
    /// `EAGAIN` if the context has [`MAX_QUEUED_PREFETCHES`] waiting, `ENOMEM`.
    pub(crate) fn push_prefetch(&self, job: Prefetch) -> Result {
        crate::context::reserve_unlocked(&self.queues, |q| &mut q.prefetches)?;
        let mut q = self.queues.lock();
        if q.prefetches.len() >= MAX_QUEUED_PREFETCHES {
            return Err(EAGAIN);
        }
        // Another prefetch took the room meanwhile: the caller may try again.
        q.prefetches.push_within_capacity(job).map_err(|_| EAGAIN)
    }

    fn pop_fault(&self) -> Option<PageFault> {
        let mut q = self.queues.lock();
        if q.faults.is_empty() {
            return None;
        }
        q.faults.remove(0).ok()
    }

    /// Reads `[addr, addr + len)` of `mr` ahead: continues the read-ahead queued if it ends
    /// there, else replaces it (one stream at a time per context). The region it drops, if
    /// any, is returned, to be dropped outside the lock.
    fn push_ahead(&self, mr: &Arc<OdpMr>, addr: u64, len: u64, write: bool) -> Option<Prefetch> {
        let mut q = self.queues.lock();
        if let Some(a) = q.ahead.as_mut() {
            if Arc::ptr_eq(&a.mr, mr) && a.addr + a.len == addr && a.write == write {
                a.len += len;
                return None;
            }
        }
        q.ahead.replace(Prefetch {
            mr: mr.clone(),
            addr,
            len,
            write,
        })
    }

    fn pop_ahead(&self) -> Option<Prefetch> {
        self.queues.lock().ahead.take()
    }

    /// Puts what is left of a read-ahead back, unless a newer one took its place.
    fn requeue_ahead(&self, job: Prefetch) -> Option<Prefetch> {
        let mut q = self.queues.lock();
        if q.ahead.is_some() {
            return Some(job);
        }
        q.ahead = Some(job);
        None
    }

    fn pop_prefetch(&self) -> Option<Prefetch> {
        let mut q = self.queues.lock();
        if q.prefetches.is_empty() {
            return None;
        }
        q.prefetches.remove(0).ok()
    }

    /// Puts a prefetch that has more to do back, behind the context's others.
    fn requeue_prefetch(&self, job: Prefetch) {
        // Room: it was just taken out, and only `push_prefetch` adds, within the capacity.
        let _ = self.queues.lock().prefetches.push_within_capacity(job);
    }

    /// Empties both queues (the device is gone). The prefetches' regions are dropped outside
    /// the lock.
    fn clear(&self) {
        let stale = {
            let mut q = self.queues.lock();
            q.faults.clear();
            (q.ahead.take(), core::mem::take(&mut q.prefetches))
        };
        drop(stale);
    }
}

/// `ctx`'s work item: its faults first, then one step of its read-ahead, then one step of a
/// prefetch, until all are done.
pub(crate) fn run(ctx: &Arc<Ctx>) {
    let dev = &*ctx.dev;
    loop {
        if dev.odp.is_closed() {
            ctx.faults.clear();
            return;
        }
        if let Some(pf) = ctx.faults.pop_fault() {
            handle_fault(dev, ctx, pf);
            continue;
        }
        if let Some(mut job) = ctx.faults.pop_ahead() {
            // One step, then the faults again; a step that fails ends the read-ahead (the
            // region went, or the stream ran past what the process mapped).
            if let Ok(step) = job.mr.read_ahead_step(dev, job.addr, job.len, job.write) {
                job.addr += step;
                job.len -= step;
                if job.len != 0 {
                    drop(ctx.faults.requeue_ahead(job));
                }
            }
            continue;
        }
        let Some(mut job) = ctx.faults.pop_prefetch() else {
            return;
        };
        // One step (at most one MAP_ODP), then the faults again; the rest goes to the back.
        let step = job.mr.step_len(job.addr, job.len);
        if job.mr.map(dev, job.addr, step, job.write, None).is_ok() {
            job.addr += step;
            job.len -= step;
            if job.len != 0 {
                ctx.faults.requeue_prefetch(job);
            }
        }
    }
}

/// The region behind a fault's key, if it is `ctx`'s.
fn region_of(dev: &QhcaDevice, ctx: &Arc<Ctx>, key: u32) -> Option<Arc<OdpMr>> {
    dev.odp.find(key).filter(|mr| Arc::ptr_eq(&mr.ctx, ctx))
}

/// Resolves one page fault of `ctx`'s QP and resumes the QP.
fn handle_fault(dev: &QhcaDevice, ctx: &Arc<Ctx>, pf: PageFault) {
    add(&dev.odp.stats.faults, 1);
    let mut clock = dev.odp.stats.phase(Phase::Wait, pf.raised);
    let Some(uar) = ctx.uar() else { return };
    let write = u32::from(pf.flags) & uapi::QHCA_PF_WRITE != 0;
    let mr = region_of(dev, ctx, pf.key);
    let res = match &mr {
        Some(mr) => ctx
            .check()
            .and_then(|()| mr.fault(dev, &pf, write, &mut clock)),
        // Deregistered meanwhile, another context's, or never a region: the access fails.
        None => Err(ENOENT),
    };
    let status = match (res, mr) {
        (Ok((resumed, mapped)), Some(mr)) => {
            // The MAP_ODP resumed it: BAD_RESOURCE (or anything else a broken device says)
            // means the QP was reset or destroyed meanwhile; harmless.
            if resumed == u64::from(uapi::QHCA_CMD_OK) {
                add(&dev.odp.stats.resumed_ok, 1);
            } else {
                add(&dev.odp.stats.resume_refused, 1);
            }
            // With the QP going again, map ahead of a sequential stream (after the context's
            // other faults).
            let needed = pf.va.saturating_add(pf.length.into());
            let ahead = crate::debugfs::ODP_READ_AHEAD.load(kernel::sync::atomic::Relaxed) != 0;
            if let Some((from, len)) = mr.read_ahead(pf.va, mapped, needed).filter(|_| ahead) {
                drop(ctx.faults.push_ahead(&mr, from, len, write));
            }
            return;
        }
        (Ok(_), None) => return,
        (Err(e), _) if e == EBUSY => {
            // Invalidations kept racing with it: the QP tries again (and faults again if it
            // must), behind the context's other faults.
            add(&dev.odp.stats.fault_retries, 1);
            uapi::QHCA_RESUME_OK
        }
        (Err(_), _) => {
            add(&dev.odp.stats.resumed_error, 1);
            uapi::QHCA_RESUME_ERROR
        }
    };
    let cmd = Cmd::new(uapi::QHCA_CMD_RESUME)
        .input(0, uar.into())
        .input(1, pf.token.into())
        .input(2, status.into());
    let res = dev.exec(cmd);
    dev.odp.stats.phase(Phase::ResumeCmd, clock);
    match res {
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
