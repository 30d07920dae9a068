// SPDX-License-Identifier: GPL-2.0

//! The part of a context (an open file) that the device reaches: its doorbell mapping, the
//! routes of its completion and error events, its queue of asynchronous events, and whether it is
//! disassociated.
//!
//! A context is disassociated once, when the device is unbound or fails ("disassociate" in the
//! RDMA core): it gets `QHCA_ASYNC_DEVICE_FATAL`, every CQ eventfd is signalled so that waiters
//! wake, the doorbell page is replaced by a harmless page of its own, and every ioctl but
//! `GET_ASYNC_EVENT` fails with the reason (`ENODEV` after unbind, `EIO` after a device failure).
//!
//! A context serves its own page faults and prefetches ([`Ctx::faults`], run by its work item on
//! the driver's fault workqueue: see [`crate::odp::service`]).
//!
//! The context also holds the verbs objects its file created ([`Ctx::objs`]), so that unbind,
//! which reaches every open context through the device, can release what they hold of the device
//! (DMA mappings, pinned pages, ODP regions) while the driver is still bound
//! ([`Ctx::release_objects`]); a file closed after that frees only plain memory.

use crate::{
    device::QhcaDevice,
    limits::Quota,
    odp::FaultService,
    rdma::{CqEvents, QpEvents},
    shim::{EventFd, InodeMapping, Umap},
    uapi,
    verbs::Objects,
    watch::InvalPage,
};
use kernel::{
    fs::File,
    new_mutex, new_poll_condvar,
    prelude::*,
    seq_file::{seq_print, SeqFile},
    sync::{
        atomic::{Atomic, Relaxed},
        poll::{PollCondVar, PollTable},
        Arc, Mutex,
    },
    workqueue::{new_work, Work, WorkItem},
};

/// Asynchronous events a context queues before it loses some; the driver allocates the queue at
/// open so that queueing never allocates.
const MAX_EVENTS: usize = 64;

/// `poll(2)` bits (`uapi/linux/eventpoll.h`).
const EPOLLIN: u32 = 0x0001;
const EPOLLERR: u32 = 0x0008;
const EPOLLRDNORM: u32 = 0x0040;

/// `QHCA_ASYNC_DEVICE_FATAL`'s progress: queued once, then taken once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fatal {
    No,
    Queued,
    Taken,
}

struct State {
    /// The context's doorbell page, once allocated (on first use, not at open).
    uar: Option<u32>,
    /// Why the context is disassociated, once it is.
    gone: Option<Error>,
    fatal: Fatal,
    /// `(type, element)`, oldest first; at most `MAX_EVENTS`.
    events: KVec<(u32, u32)>,
    /// Events dropped because the queue was full.
    lost: u32,
    /// CQs of this context and where their events go.
    cqs: KVec<(u32, CqRoute)>,
    /// QPs of this context, and for the RDMA core's, where their events go.
    qps: KVec<(u32, Option<QpEvents>)>,
}

/// Where a CQ's completion events go: a `/dev/qhcaN` CQ's eventfd (if it has one), or the RDMA
/// core's CQ (its completion handler; its error event to its event handler).
pub(crate) enum CqRoute {
    None,
    EventFd(Arc<EventFd>),
    Core(CqEvents),
}

impl CqRoute {
    fn signal(&self) {
        match self {
            CqRoute::None => {}
            CqRoute::EventFd(efd) => efd.signal(),
            CqRoute::Core(cq) => cq.completion(),
        }
    }
}

/// Makes room for one more element in the vector `get` picks out of the state behind `lock`,
/// allocating with the lock released (for locks that must not be held across an allocation that
/// may reclaim, which can run mmu notifiers). The vector keeps its order.
pub(crate) fn reserve_unlocked<S: Unpin, T>(
    lock: &Mutex<S>,
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

/// How a `/dev/qhcaN` file maps its doorbell page.
pub(crate) struct FileMap {
    pub(crate) umap: Umap,
    mapping: InodeMapping,
}

/// See the module documentation.
#[pin_data]
pub(crate) struct Ctx {
    /// The device the context was opened on (held across unbind, as the file holds it).
    pub(crate) dev: Arc<QhcaDevice>,
    /// What the context holds of the device's shared pools, charged to the user who opened it.
    pub(crate) quota: Quota,
    /// The doorbell mapping of a `/dev/qhcaN` file; `None` for a user context of the RDMA core,
    /// whose mappings are the core's (its `mmap` entries, zapped when it disassociates them).
    pub(crate) file_map: Option<FileMap>,
    #[pin]
    state: Mutex<State>,
    #[pin]
    poll: PollCondVar,
    /// The verbs objects this context created. Emptied when the file is released (which breaks
    /// the reference cycle of an ODP region, which holds its context) or, first, at unbind.
    #[pin]
    pub(crate) objs: Mutex<Objects>,
    /// Set once unbind released the objects ([`Ctx::release_objects`]).
    released: Atomic<bool>,
    /// Where revocations of watched regions are published (mmap `QHCA_MMAP_INVAL`).
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
    /// A context of `file`, opened by the calling process on `dev`: charged to the file's
    /// effective UID, and limited unless the caller has `CAP_SYS_RESOURCE`.
    pub(crate) fn new(file: &File, dev: &Arc<QhcaDevice>) -> Result<Arc<Self>> {
        let quota = dev
            .limits
            .account(file.cred().euid(), !crate::shim::capable_sys_resource())?;
        let map = FileMap {
            umap: Umap::new()?,
            mapping: InodeMapping::new(file)?,
        };
        Self::build(dev, quota, Some(map))
    }

    /// A user context of the RDMA core's device (an open of its uverbs file), charged to
    /// `quota`'s user.
    pub(crate) fn new_core(dev: &Arc<QhcaDevice>, quota: Quota) -> Result<Arc<Self>> {
        Self::build(dev, quota, None)
    }

    fn build(dev: &Arc<QhcaDevice>, quota: Quota, file_map: Option<FileMap>) -> Result<Arc<Self>> {
        let events = KVec::with_capacity(MAX_EVENTS, GFP_KERNEL)?;
        Arc::pin_init(
            try_pin_init!(Self {
                dev: dev.clone(),
                quota,
                file_map,
                state <- new_mutex!(State {
                    uar: None,
                    gone: None,
                    fatal: Fatal::No,
                    events,
                    lost: 0,
                    cqs: KVec::new(),
                    qps: KVec::new(),
                }),
                poll <- new_poll_condvar!(),
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
    /// nothing DMA-related is left for the file's release. No object is created afterwards:
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

    /// Routes CQ `cqn`'s events to `route`. Call with capacity reserved ([`Ctx::reserve`]) so
    /// that it cannot fail.
    pub(crate) fn add_cq(&self, cqn: u32, route: CqRoute) -> Result {
        self.state.lock().cqs.push((cqn, route), GFP_KERNEL)?;
        Ok(())
    }

    /// Adds QP `qpn`, whose events go to `route` (the RDMA core's QP) or to the context's queue.
    /// Call with capacity reserved ([`Ctx::reserve`]).
    pub(crate) fn add_qp(&self, qpn: u32, route: Option<QpEvents>) -> Result {
        self.state.lock().qps.push((qpn, route), GFP_KERNEL)?;
        Ok(())
    }

    /// Makes room for one more CQ and QP route, and for the page faults of one more QP, so that
    /// adding one after the device created the object cannot fail. Allocates with the state
    /// unlocked: the event dispatcher takes the state under the event queue, which ODP
    /// invalidations (possibly from reclaim) wait for. Callers serialise (the file's objects).
    pub(crate) fn reserve(&self) -> Result {
        reserve_unlocked(&self.state, |st| &mut st.cqs)?;
        reserve_unlocked(&self.state, |st| &mut st.qps)?;
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

    /// Queues an event; drops it (and counts the loss) when the queue is full.
    fn push(&self, st: &mut State, kind: u32, element: u32) {
        if st.events.len() < MAX_EVENTS {
            // Cannot allocate: the capacity was reserved at open.
            let _ = st.events.push((kind, element), GFP_ATOMIC);
        } else {
            st.lost = st.lost.saturating_add(1);
        }
        self.poll.notify_all();
    }

    /// A completion (`err` false) or error event of CQ `cqn`, which the device says belongs to
    /// this context. Returns false if the context has no such CQ (a stale event of a destroyed
    /// CQ, or a device that names the wrong owner).
    pub(crate) fn cq_event(&self, cqn: u32, err: bool) -> bool {
        let mut st = self.state.lock();
        let Some((_, route)) = st.cqs.iter().find(|(n, _)| *n == cqn) else {
            return false;
        };
        route.signal();
        if err {
            if let CqRoute::Core(cq) = route {
                cq.error();
            } else {
                self.push(&mut st, uapi::QHCA_ASYNC_CQ_ERR, cqn);
            }
        }
        true
    }

    /// QP `qpn` entered ERR on its own. Returns false if the context has no such QP.
    pub(crate) fn qp_event(&self, qpn: u32) -> bool {
        let mut st = self.state.lock();
        match st.qps.iter().find(|(n, _)| *n == qpn) {
            None => false,
            Some((_, Some(qp))) => {
                qp.fatal();
                true
            }
            Some((_, None)) => {
                self.push(&mut st, uapi::QHCA_ASYNC_QP_FATAL, qpn);
                true
            }
        }
    }

    /// Wakes every CQ waiter (events may have been lost: they poll again and find out).
    pub(crate) fn signal_all_cqs(&self) {
        for (_, route) in self.state.lock().cqs.iter() {
            route.signal();
        }
    }

    /// Disassociates the context (once; the first reason stays): see the module documentation.
    ///
    /// Ioctls fail from the start; the fatal event, `EPOLLERR` and the eventfds come only once
    /// the doorbell page is replaced, so that a process that saw them can no longer reach the
    /// device. Callers serialise (the device's `files` lock).
    pub(crate) fn disassociate(&self, reason: Error) {
        {
            let mut st = self.state.lock();
            if st.gone.is_some() {
                return;
            }
            st.gone = Some(reason);
        }
        // Faults from now on map the harmless page; then the PTEs of the doorbell page go.
        if let Some(m) = &self.file_map {
            m.umap.revoke();
            m.mapping.zap();
        }
        // Every watched region is gone with the device.
        self.inval.flush();
        {
            let mut st = self.state.lock();
            st.fatal = Fatal::Queued;
        }
        self.signal_all_cqs();
        self.poll.notify_all();
    }

    /// `QHCA_IOCTL_GET_ASYNC_EVENT`: the oldest event, `DEVICE_FATAL` last.
    ///
    /// # Errors
    ///
    /// `EAGAIN` when there is none.
    pub(crate) fn next_event(&self) -> Result<(u32, u32)> {
        let mut st = self.state.lock();
        if !st.events.is_empty() {
            return Ok(st.events.remove(0)?);
        }
        if st.fatal == Fatal::Queued {
            st.fatal = Fatal::Taken;
            return Ok((uapi::QHCA_ASYNC_DEVICE_FATAL, 0));
        }
        Err(EAGAIN)
    }

    /// For `/proc/PID/fdinfo`: the doorbell page, events queued and lost, and the state.
    pub(crate) fn show(&self, m: &SeqFile) {
        let st = self.state.lock();
        match st.uar {
            Some(uar) => seq_print!(m, "qhca-uar:\t{}\n", uar),
            None => seq_print!(m, "qhca-uar:\tnone\n"),
        }
        seq_print!(
            m,
            "qhca-async-events:\t{} queued, {} lost\n",
            st.events.len(),
            st.lost
        );
        seq_print!(
            m,
            "qhca-state:\t{}\n",
            if st.gone.is_some() {
                "disassociated"
            } else {
                "live"
            }
        );
    }

    /// `poll(2)`: readable while an event is queued, in error once disassociated.
    pub(crate) fn poll(&self, file: &File, table: PollTable<'_>) -> u32 {
        table.register_wait(file, &self.poll);
        let st = self.state.lock();
        let mut mask = 0;
        if !st.events.is_empty() || st.fatal == Fatal::Queued {
            mask |= EPOLLIN | EPOLLRDNORM;
        }
        if st.fatal != Fatal::No {
            mask |= EPOLLERR;
        }
        mask
    }
}
