// SPDX-License-Identifier: GPL-2.0

//! The part of a context (a user context of the RDMA core: one open of the uverbs device) that
//! the device reaches: its doorbell page, the routes of its completion and error events to the
//! core's CQs and QPs, and whether it is disassociated.
//!
//! A context is disassociated once, when the device is unbound or fails ("disassociate" in the
//! RDMA core, which then zaps the context's mappings and sends it `IB_EVENT_DEVICE_FATAL`): every
//! CQ's completion handler runs so that waiters wake, its watched regions are revoked, and every
//! command fails with the reason (`ENODEV` after unbind, `EIO` after a device failure).
//!
//! A context serves its own page faults and prefetches ([`Ctx::faults`], run by its work item on
//! the driver's fault workqueue: see [`crate::odp::service`]).
//!
//! The context also holds the verbs objects it created ([`Ctx::objs`]), so that unbind, which
//! reaches every open context through the device, can release what they hold of the device (DMA
//! mappings, pinned pages, ODP regions) while the driver is still bound
//! ([`Ctx::release_objects`]); a context freed after that frees only plain memory.

use crate::{
    device::QhcaDevice,
    limits::Quota,
    odp::FaultService,
    rdma::{CqEvents, QpEvents, SrqEvents},
    verbs::Objects,
    watch::InvalPage,
};
use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        lock::{Backend, Lock},
        Arc, Mutex,
    },
    workqueue::{new_work, Work, WorkItem},
};

struct State {
    /// The context's doorbell page, once allocated.
    uar: Option<u32>,
    /// Why the context is disassociated, once it is.
    gone: Option<Error>,
    /// CQs of this context and the core's CQs their events go to.
    cqs: KVec<(u32, CqEvents)>,
    /// QPs of this context and the core's QPs their events go to.
    qps: KVec<(u32, QpEvents)>,
    /// SRQs of this context and the core's SRQs their events go to.
    srqs: KVec<(u32, SrqEvents)>,
}

/// Makes room for one more element in the vector `get` picks out of the state behind `lock`,
/// allocating with the lock released (for locks that must not be held across an allocation that
/// may reclaim, which can run mmu notifiers, and spinlocks). The vector keeps its order.
pub(crate) fn reserve_unlocked<S: Unpin, T, B: Backend>(
    lock: &Lock<S, B>,
    get: impl Fn(&mut S) -> &mut KVec<T>,
) -> Result {
    loop {
        let want = {
            let mut g = lock.lock();
            let v = get(&mut g);
            if v.len() < v.capacity() {
                return Ok(());
            }
            v.capacity() * 2 + 4
        };
        let mut bigger = KVec::with_capacity(want, GFP_KERNEL)?;
        let mut g = lock.lock();
        let v = get(&mut g);
        if v.len() < v.capacity() {
            return Ok(());
        }
        if v.len() >= bigger.capacity() {
            // It grew meanwhile: try again with the new size.
            continue;
        }
        for x in v.drain_all() {
            // Room: `bigger` holds more than `v` had.
            if bigger.push_within_capacity(x).is_err() {
                return Err(ENOMEM);
            }
        }
        *v = bigger;
        return Ok(());
    }
}

/// See the module documentation.
#[pin_data]
pub(crate) struct Ctx {
    /// The device the context was opened on (held across unbind).
    pub(crate) dev: Arc<QhcaDevice>,
    /// What the context holds of the device's shared pools, charged to the user who opened it.
    pub(crate) quota: Quota,
    /// The driver's own context, of the kernel's consumers ([`crate::kverbs`]), rather than a
    /// user context.
    pub(crate) kernel: bool,
    #[pin]
    state: Mutex<State>,
    /// The verbs objects this context created. Emptied when the core deallocates the context
    /// (which breaks the reference cycle of an ODP region, which holds its context) or, first,
    /// at unbind.
    #[pin]
    pub(crate) objs: Mutex<Objects>,
    /// Set once unbind released the objects ([`Ctx::release_objects`]).
    released: Atomic<bool>,
    /// Where revocations of watched regions are published (the context's invalidation page).
    #[pin]
    pub(crate) inval: InvalPage,
    /// The page faults of this context's QPs and its prefetches, waiting for `fault_work`.
    #[pin]
    pub(crate) faults: FaultService,
    #[pin]
    fault_work: Work<Ctx>,
}

kernel::impl_has_work! {
    impl HasWork<Self> for Ctx { self.fault_work }
}

impl WorkItem for Ctx {
    type Pointer = Arc<Ctx>;

    fn run(this: Arc<Ctx>) {
        crate::odp::service::run(&this);
    }
}

impl Ctx {
    /// A user context of the RDMA core's device (an open of its uverbs file), charged to
    /// `quota`'s user.
    pub(crate) fn new(dev: &Arc<QhcaDevice>, quota: Quota) -> Result<Arc<Self>> {
        Self::with_kind(dev, quota, false)
    }

    /// The kernel context ([`crate::kverbs`]), charged to `quota` (an unlimited one).
    pub(crate) fn new_kernel(dev: &Arc<QhcaDevice>, quota: Quota) -> Result<Arc<Self>> {
        Self::with_kind(dev, quota, true)
    }

    fn with_kind(dev: &Arc<QhcaDevice>, quota: Quota, kernel: bool) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                dev: dev.clone(),
                quota,
                kernel,
                state <- new_mutex!(State {
                    uar: None,
                    gone: None,
                    cqs: KVec::new(),
                    qps: KVec::new(),
                    srqs: KVec::new(),
                }),
                objs <- new_mutex!(Objects::default()),
                released: Atomic::new(false),
                inval <- InvalPage::new()?,
                faults <- FaultService::new(),
                fault_work <- new_work!("qhca-fault"),
            }? Error),
            GFP_KERNEL,
        )
    }

    /// Unbind, with the device stopped and the driver still bound: destroys every object of the
    /// context as a close does once the device is stopped, freeing only host resources (unmaps
    /// and unpins memory, tears down ODP regions with their DMA mappings and notifiers), so that
    /// nothing DMA-related is left for the context's deallocation. No object is created afterwards:
    /// creating one needs the bound device. Takes the objects' lock (the device's lock order:
    /// after `bound`, before the command queue and `files`).
    pub(crate) fn release_objects(&self, dev: &QhcaDevice) {
        self.released.store(true, Relaxed);
        let uar = self.uar();
        self.objs.lock().destroy_all(dev, self, uar, false);
    }

    /// True once [`Ctx::release_objects`] ran (or is running).
    pub(crate) fn objects_released(&self) -> bool {
        self.released.load(Relaxed)
    }

    /// `Ok` while the context is associated; else the reason it is not.
    pub(crate) fn check(&self) -> Result {
        self.state.lock().gone.map_or(Ok(()), Err)
    }

    pub(crate) fn uar(&self) -> Option<u32> {
        self.state.lock().uar
    }

    pub(crate) fn set_uar(&self, uar: u32) {
        self.state.lock().uar = Some(uar);
    }

    /// Routes CQ `cqn`'s events to the core's CQ `route`. Call with capacity reserved
    /// ([`Ctx::reserve`]) so that it cannot fail.
    pub(crate) fn add_cq(&self, cqn: u32, route: CqEvents) -> Result {
        self.state.lock().cqs.push((cqn, route), GFP_KERNEL)?;
        Ok(())
    }

    /// Adds QP `qpn`, whose events go to the core's QP `route`. Call with capacity reserved
    /// ([`Ctx::reserve`]).
    pub(crate) fn add_qp(&self, qpn: u32, route: QpEvents) -> Result {
        self.state.lock().qps.push((qpn, route), GFP_KERNEL)?;
        Ok(())
    }

    /// Routes SRQ `srqn`'s events to the core's SRQ `route`. Call with capacity reserved
    /// ([`Ctx::reserve`]).
    pub(crate) fn add_srq(&self, srqn: u32, route: SrqEvents) -> Result {
        self.state.lock().srqs.push((srqn, route), GFP_KERNEL)?;
        Ok(())
    }

    /// Makes room for one more CQ, QP and SRQ route, and for the page faults of one more QP, so
    /// that
    /// adding one after the device created the object cannot fail. Allocates with the state
    /// unlocked: the event dispatcher takes the state under the event queue, which ODP
    /// invalidations (possibly from reclaim) wait for. Callers serialise (the context's objects).
    pub(crate) fn reserve(&self) -> Result {
        reserve_unlocked(&self.state, |st| &mut st.cqs)?;
        reserve_unlocked(&self.state, |st| &mut st.qps)?;
        reserve_unlocked(&self.state, |st| &mut st.srqs)?;
        let nqps = self.state.lock().qps.len();
        self.faults.reserve(nqps + 1)
    }

    /// True if QP `qpn` is this context's.
    pub(crate) fn owns_qp(&self, qpn: u32) -> bool {
        self.state.lock().qps.iter().any(|(n, _)| *n == qpn)
    }

    pub(crate) fn remove_cq(&self, cqn: u32) {
        let mut st = self.state.lock();
        if let Some(pos) = st.cqs.iter().position(|(n, _)| *n == cqn) {
            let _ = st.cqs.remove(pos);
        }
    }

    pub(crate) fn remove_srq(&self, srqn: u32) {
        let mut st = self.state.lock();
        if let Some(pos) = st.srqs.iter().position(|(n, _)| *n == srqn) {
            let _ = st.srqs.remove(pos);
        }
    }

    /// Forgets QP `qpn` (destroyed), and its page faults.
    pub(crate) fn remove_qp(&self, qpn: u32) {
        {
            let mut st = self.state.lock();
            if let Some(pos) = st.qps.iter().position(|(n, _)| *n == qpn) {
                let _ = st.qps.remove(pos);
            }
        }
        self.faults.forget_qp(qpn);
    }

    /// A completion (`err` false) or error event of CQ `cqn`, which the device says belongs to
    /// this context. Returns false if the context has no such CQ (a stale event of a destroyed
    /// CQ, or a device that names the wrong owner).
    pub(crate) fn cq_event(&self, cqn: u32, err: bool) -> bool {
        let st = self.state.lock();
        let Some((_, route)) = st.cqs.iter().find(|(n, _)| *n == cqn) else {
            return false;
        };
        route.completion();
        if err {
            route.error();
        }
        true
    }

    /// QP `qpn` entered ERR on its own, or (`last_wqe`) holds no more WQEs of its SRQ. Returns
    /// false if the context has no such QP.
    pub(crate) fn qp_event(&self, qpn: u32, last_wqe: bool) -> bool {
        let st = self.state.lock();
        match st.qps.iter().find(|(n, _)| *n == qpn) {
            None => false,
            Some((_, qp)) => {
                if last_wqe {
                    qp.last_wqe_reached();
                } else {
                    qp.fatal();
                }
                true
            }
        }
    }

    /// SRQ `srqn` went below its limit. Returns false if the context has no such SRQ.
    pub(crate) fn srq_event(&self, srqn: u32) -> bool {
        let st = self.state.lock();
        match st.srqs.iter().find(|(n, _)| *n == srqn) {
            None => false,
            Some((_, srq)) => {
                srq.limit_reached();
                true
            }
        }
    }

    /// Wakes every CQ waiter (events may have been lost: they poll again and find out).
    pub(crate) fn signal_all_cqs(&self) {
        for (_, route) in self.state.lock().cqs.iter() {
            route.completion();
        }
    }

    /// Disassociates the context (once; the first reason stays): see the module documentation.
    /// Callers serialise (the device's `files` lock).
    pub(crate) fn disassociate(&self, reason: Error) {
        {
            let mut st = self.state.lock();
            if st.gone.is_some() {
                return;
            }
            st.gone = Some(reason);
        }
        // Every watched region is gone with the device.
        self.inval.flush();
        self.signal_all_cqs();
    }
}
