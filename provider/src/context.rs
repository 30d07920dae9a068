// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A context: one open of a qhca device's uverbs node (`/dev/infiniband/uverbsN`, a user context
//! of the RDMA core), which owns one doorbell page of the device, and its asynchronous events.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use qhca_uapi::{
    qhca_ctx_stats, qhca_ioc_async_event, qhca_ioc_query_ctx, QHCA_ASYNC_CQ_ERR,
    QHCA_ASYNC_DEVICE_FATAL, QHCA_ASYNC_QP_FATAL,
};

use crate::attr::DeviceAttr;
use crate::doorbell::Doorbell;
use crate::error::{errno_of, Errno, Error, Result};
use crate::inval::InvalPage;
use crate::request::Request;
use crate::uverbs::{
    self, Uverbs, ASYNC_CORE_BASE, IB_EVENT_QP_LAST_WQE_REACHED, IB_EVENT_SRQ_LIMIT_REACHED,
};

/// What the device counted for one context (the driver's `QUERY_CTX` method).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtxStats {
    /// Doorbells rung on this context's page that named one of its queues.
    pub db_accepted: u64,
    /// Doorbells rung on this context's page that named another context's queue (dropped).
    pub db_violations: u64,
    /// Packets for this context's QPs that were dropped because they did not come from the
    /// QP's connected peer.
    pub pkt_foreign: u64,
    /// RNR NAKs this context's requesters waited out and retried.
    pub rnr_retries: u64,
    /// Page faults its QPs raised as requesters (gathering or scattering local ODP memory).
    pub odp_req_faults: u64,
    /// Page faults its QPs raised as responders (a peer's access to its ODP memory).
    pub odp_resp_faults: u64,
    /// RNR NAKs its responders sent because of a page fault.
    pub odp_fault_rnr_naks: u64,
    /// `INVALIDATE_ODP` commands on its regions.
    pub odp_invalidations: u64,
    /// Datagrams its UD QPs dropped because their Q_Key was not the QP's.
    pub ud_drop_qkey: u64,
    /// Datagrams its UD QPs dropped because no receive request was posted.
    pub ud_drop_no_recv: u64,
    /// Datagrams its UD QPs dropped because the GRH and the message did not fit the receive
    /// request's buffers.
    pub ud_drop_too_long: u64,
    /// Datagrams its UD QPs dropped because the receive buffer was on-demand memory not
    /// present.
    pub ud_drop_fault: u64,
}

impl CtxStats {
    /// From the ABI struct.
    pub fn from_raw(s: &qhca_ctx_stats) -> CtxStats {
        CtxStats {
            db_accepted: s.db_accepted,
            db_violations: s.db_violations,
            pkt_foreign: s.pkt_foreign,
            rnr_retries: s.rnr_retries,
            odp_req_faults: s.odp_req_faults,
            odp_resp_faults: s.odp_resp_faults,
            odp_fault_rnr_naks: s.odp_fault_rnr_naks,
            odp_invalidations: s.odp_invalidations,
            ud_drop_qkey: s.ud_drop_qkey,
            ud_drop_no_recv: s.ud_drop_no_recv,
            ud_drop_too_long: s.ud_drop_too_long,
            ud_drop_fault: s.ud_drop_fault,
        }
    }

    /// Datagrams dropped at this context's UD QPs, for any reason.
    pub fn ud_drops(&self) -> u64 {
        self.ud_drop_qkey + self.ud_drop_no_recv + self.ud_drop_too_long + self.ud_drop_fault
    }
}

/// An asynchronous event of a context (`enum qhca_async_event_type`), as
/// `ibv_get_async_event()` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// The QP entered ERR on its own (a remote or local error, not a MODIFY_QP): its
    /// outstanding requests complete with `WR_FLUSH_ERR`.
    QpFatal {
        /// The QP.
        qpn: u32,
    },
    /// The CQ overran or the device could not write it: it gets no more completions.
    CqErr {
        /// The CQ.
        cqn: u32,
    },
    /// The device was unbound, removed or failed: the context is disassociated
    /// ([`Error::Disassociated`] from now on). Clean up and exit, or reopen.
    DeviceFatal,
    /// Taking a WQE left fewer WQEs in the shared receive queue than its armed limit
    /// ([`crate::Srq::arm_limit`]); the limit is disarmed, arm it again after posting more.
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`.)
    SrqLimitReached {
        /// The SRQ.
        srqn: u32,
    },
    /// A QP of a shared receive queue, in ERR, has flushed the receive WQE it held, if any:
    /// no more receive completions of it will come, and the SRQ keeps its other WQEs. The
    /// verbs' order is ERR, this event, then RESET or destroy (a QP reset or destroyed while it
    /// holds a WQE loses it). (`IBV_EVENT_QP_LAST_WQE_REACHED`.)
    QpLastWqeReached {
        /// The QP.
        qpn: u32,
    },
    /// A type this ABI version does not define.
    Unknown {
        /// The raw type.
        kind: u32,
        /// The raw element.
        element: u32,
    },
}

impl AsyncEvent {
    /// The raw type of [`AsyncEvent::SrqLimitReached`]: not one of `enum
    /// qhca_async_event_type`, but the core's `IB_EVENT_SRQ_LIMIT_REACHED` + 0x100, as
    /// `qhca-abi.h` gives every other event of the core; its element is the SRQ's number.
    pub const SRQ_LIMIT_REACHED: u32 = ASYNC_CORE_BASE + IB_EVENT_SRQ_LIMIT_REACHED;
    /// The raw type of [`AsyncEvent::QpLastWqeReached`]: the core's
    /// `IB_EVENT_QP_LAST_WQE_REACHED` + 0x100; its element is the QP's number.
    pub const QP_LAST_WQE_REACHED: u32 = ASYNC_CORE_BASE + IB_EVENT_QP_LAST_WQE_REACHED;

    /// Decodes the ioctl's answer.
    pub fn from_raw(kind: u32, element: u32) -> AsyncEvent {
        match kind {
            QHCA_ASYNC_QP_FATAL => AsyncEvent::QpFatal { qpn: element },
            QHCA_ASYNC_CQ_ERR => AsyncEvent::CqErr { cqn: element },
            QHCA_ASYNC_DEVICE_FATAL => AsyncEvent::DeviceFatal,
            Self::SRQ_LIMIT_REACHED => AsyncEvent::SrqLimitReached { srqn: element },
            Self::QP_LAST_WQE_REACHED => AsyncEvent::QpLastWqeReached { qpn: element },
            _ => AsyncEvent::Unknown { kind, element },
        }
    }
}

/// An open device. The driver allocates the context's doorbell page when the core creates the
/// user context (at open) and frees it when the core deallocates it (the last reference to the
/// file gone: this fd and any [`Doorbell`] mapping, which keeps the file open on its own).
///
/// A context is *disassociated* when its device goes away under it (unbind, surprise removal,
/// a device that stopped answering): the core queues [`AsyncEvent::DeviceFatal`] on the
/// context's async event file and then reports `EPOLLERR` there, replaces the doorbell page by a
/// harmless one (doorbell stores are dropped, nothing faults), wakes every completion channel,
/// and fails every command with `EIO` (which the provider reports as `ENODEV`, `EIO` after a
/// device failure). The provider notices it without a system call on the data path: from then on posts fail with [`crate::PostReason::Disassociated`], and
/// [`crate::Cq::wait`], [`crate::Cq::poll_wait`], [`Context::check`] and
/// [`Context::wait_async_event`] return [`Error::Disassociated`], so no wait lasts for ever.
#[derive(Debug)]
pub struct Context {
    // Dropped first: the mappings hold their own reference to the file anyway.
    db: OnceLock<Arc<Doorbell>>,
    inval: OnceLock<Arc<InvalPage>>,
    fd: OwnedFd,
    path: PathBuf,
    attr: DeviceAttr,
    dead: AtomicBool,
    /// The control path: the RDMA core's commands on the uverbs node. `None` only for a context
    /// opened without a device ([`Context::open_unchecked`], host tests).
    pub(crate) uverbs: Option<Box<Uverbs>>,
}

impl Context {
    /// Opens `path`, the RDMA core's uverbs node of a qhca device (`/dev/infiniband/uverbsN`,
    /// [`crate::devices`] lists them), read-write, close-on-exec: the core creates a user
    /// context (`GET_CONTEXT`), whose answer says what the device is; the provider checks that
    /// the driver speaks its ABI version ([`qhca_uapi::QHCA_ABI_VERSION`]). [`Context::attr`]
    /// keeps the answer.
    ///
    /// Each open context takes one of the device's doorbell pages until it is closed and its
    /// doorbell mapping gone. The device has `num-uars` pages, a QEMU property: 64 unless the VM
    /// was started with another value ([`DeviceAttr::num_uars`] says how many). So at most that
    /// many contexts can be open on one device at a time, over every process; the next open
    /// fails with `ENOSPC`.
    ///
    /// Fails with [`Error::Open`] (`ENOENT`: no such node, `EACCES`, `ENODEV`: the device is
    /// going away; `ENODEV` also for a path that is not a uverbs node), with what the core's
    /// `GET_CONTEXT` fails with (`ENOSPC`: every doorbell page is taken), with
    /// [`Error::Invalid`] for a uverbs node of another driver, or with [`Error::AbiMismatch`].
    pub fn open(path: impl AsRef<Path>) -> Result<Context> {
        let path = path.as_ref();
        if !uverbs::is_uverbs_path(path) {
            return Err(Error::Open {
                path: path.to_owned(),
                source: Errno::ENODEV,
            });
        }
        let ctx = Self::open_file(path)?;
        let (u, req) = Uverbs::open(path, ctx.fd.as_fd())?;
        let attr = DeviceAttr::from_ioctl(&req)?;
        Ok(Context {
            attr,
            uverbs: Some(Box::new(u)),
            ..ctx
        })
    }

    /// Opens without asking the driver anything: for host tests on ordinary files, whose
    /// shared mapping stands in for the doorbell page. Only with the `test-util` feature (and
    /// in this crate's own tests); programs use [`Context::open`].
    #[cfg(any(test, feature = "test-util"))]
    pub fn open_unchecked(path: &Path) -> Result<Context> {
        Self::open_file(path)
    }

    fn open_file(path: &Path) -> Result<Context> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::Open {
                path: path.to_owned(),
                source: errno_of(&e),
            })?;
        Ok(Context {
            db: OnceLock::new(),
            inval: OnceLock::new(),
            fd: file.into(),
            path: path.to_owned(),
            attr: DeviceAttr::default(),
            dead: AtomicBool::new(false),
            uverbs: None,
        })
    }

    /// The node this context was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What `QUERY_DEVICE` said when the context was opened.
    pub fn attr(&self) -> &DeviceAttr {
        &self.attr
    }

    /// The GID of the device's port ([`DeviceAttr::port_gid`]): what a peer's address handle
    /// ([`crate::AhAttr::dgid`]) names to send datagrams here.
    pub fn gid(&self) -> crate::Gid {
        self.attr.port_gid()
    }

    /// What the device is and which doorbell page this context owns: what `GET_CONTEXT`
    /// answered when the context was opened ([`Context::attr`]; the core has no command that
    /// asks again). Never fails; kept for programs written against earlier versions.
    pub fn query(&self) -> Result<DeviceAttr> {
        Ok(self.attr)
    }

    /// Maps this context's doorbell page (the core's mmap entry that `GET_CONTEXT` named, one
    /// `QHCA_UAR_PAGE_SIZE` page, shared, read-write; offset 0 of a file opened without a
    /// device).
    ///
    /// Fails with [`Error::Mmap`] (`ENODEV` once the device is unbound).
    pub fn map_doorbell(&self) -> Result<Doorbell> {
        if let Some(u) = &self.uverbs {
            return Doorbell::map_at(self.fd.as_fd(), u.db_mmap_offset());
        }
        Doorbell::map(self.fd.as_fd())
    }

    /// The doorbell page shared by every queue of this context, mapped on first use.
    ///
    /// Fails with [`Error::Mmap`].
    pub fn doorbell(&self) -> Result<Arc<Doorbell>> {
        if let Some(db) = self.db.get() {
            return Ok(db.clone());
        }
        let db = Arc::new(self.map_doorbell()?);
        // Two threads racing here map twice; the loser's mapping is dropped.
        Ok(self.db.get_or_init(|| db).clone())
    }

    /// Maps this context's invalidation page (the core's mmap entry that `GET_CONTEXT` named,
    /// one page, shared, read-only):
    /// where the driver publishes the watched regions it revoked ([`crate::Pd::reg_watched_mr`]).
    ///
    /// Fails with [`Error::Mmap`] (`EINVAL` from a driver without the page, `ENODEV` once the
    /// device is unbound).
    pub fn map_inval_page(&self) -> Result<InvalPage> {
        if let Some(u) = &self.uverbs {
            return InvalPage::map_at(self.fd.as_fd(), u.inval_mmap_offset());
        }
        InvalPage::map(self.fd.as_fd())
    }

    /// The invalidation page shared by every registration cache of this context, mapped on
    /// first use.
    ///
    /// Fails with [`Error::Mmap`].
    pub fn inval_page(&self) -> Result<Arc<InvalPage>> {
        if let Some(p) = self.inval.get() {
            return Ok(p.clone());
        }
        let p = Arc::new(self.map_inval_page()?);
        // Two threads racing here map twice; the loser's mapping is dropped.
        Ok(self.inval.get_or_init(|| p).clone())
    }

    /// True once the provider knows the context is disassociated. One relaxed atomic load: no
    /// system call. It learns it from an ioctl failing with `ENODEV` or `EIO`, from
    /// [`AsyncEvent::DeviceFatal`], and from the `EPOLLERR` that [`Context::check`],
    /// [`crate::Cq::wait`] and [`crate::Cq::poll_wait`] look for.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Relaxed)
    }

    fn mark_dead(&self) {
        self.dead.store(true, Ordering::Relaxed);
    }

    /// Records what an ioctl's errno says about the context.
    pub(crate) fn note_errno(&self, e: Errno) {
        if e == Errno::ENODEV || e == Errno::EIO {
            self.mark_dead();
        }
    }

    /// Asks the driver, with one `poll(2)` of timeout 0 on the file, whether the context is
    /// disassociated (`EPOLLERR`). For spin loops that poll a CQ without system calls: call it
    /// every few milliseconds of finding nothing, as [`crate::Cq::poll_wait`] does.
    ///
    /// Fails with [`Error::Disassociated`], or [`Error::Sys`] if `poll(2)` itself fails.
    pub fn check(&self) -> Result<()> {
        if self.is_dead() {
            return Err(Error::Disassociated { op: "check" });
        }
        if let Some(u) = &self.uverbs {
            // The core queues DEVICE_FATAL on the async file before it closes it: look at what
            // is queued (kept for get_async_event).
            if u.peek_events()? {
                self.mark_dead();
                return Err(Error::Disassociated { op: "check" });
            }
        }
        let revents = self.poll_fd(0, Some(Duration::ZERO))?;
        self.dead_if_err(revents, "check")
    }

    /// The file whose `POLLERR` says the context is disassociated, and whose `POLLIN` says an
    /// async event is queued: the core's async event file (the context's own file when it was
    /// opened without a device).
    pub(crate) fn event_fd(&self) -> RawFd {
        match &self.uverbs {
            Some(u) => u.async_fd(),
            None => self.fd.as_raw_fd(),
        }
    }

    /// Marks the context dead and fails if `revents` has `POLLERR`, `POLLHUP` or `POLLNVAL`.
    pub(crate) fn dead_if_err(&self, revents: i16, op: &'static str) -> Result<()> {
        if revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
            self.mark_dead();
            return Err(Error::Disassociated { op });
        }
        Ok(())
    }

    /// `poll(2)` on the file for `events` (errors are always reported); returns `revents`, 0 on
    /// timeout.
    fn poll_fd(&self, events: i16, timeout: Option<Duration>) -> Result<i16> {
        let mut pfd = [libc::pollfd {
            fd: self.event_fd(),
            events,
            revents: 0,
        }];
        poll_fds(&mut pfd, timeout, "poll context")?;
        Ok(pfd[0].revents)
    }

    /// `GET_ASYNC_EVENT`: takes the oldest queued asynchronous event, `None` if there is
    /// none. Never blocks; [`Context::wait_async_event`] waits for one, and the file is
    /// pollable (`POLLIN` while an event is queued) for an event loop.
    ///
    /// [`AsyncEvent::DeviceFatal`] marks the context disassociated. Fails with
    /// [`Error::Ioctl`].
    pub fn get_async_event(&self) -> Result<Option<AsyncEvent>> {
        let mut req = qhca_ioc_async_event::request();
        match self.cmd_get_async_event(&mut req) {
            Ok(()) => {}
            Err(Error::Ioctl {
                source: Errno::EAGAIN,
                ..
            }) => return Ok(None),
            Err(e) => return Err(e),
        }
        let ev = AsyncEvent::from_raw(req.type_, req.element);
        if ev == AsyncEvent::DeviceFatal {
            self.mark_dead();
        }
        Ok(Some(ev))
    }

    /// Waits up to `timeout` (`None`: for ever) for an asynchronous event and takes it;
    /// `Ok(None)` when the time is up.
    ///
    /// On a disassociated context it returns the queued [`AsyncEvent::DeviceFatal`] first,
    /// then fails with [`Error::Disassociated`] at once: it never waits for ever on a dead
    /// device.
    pub fn wait_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        let end = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(ev) = self.get_async_event()? {
                return Ok(Some(ev));
            }
            if self.is_dead() {
                return Err(Error::Disassociated {
                    op: "wait for an asynchronous event",
                });
            }
            let left = end.map(|e| e.saturating_duration_since(Instant::now()));
            let revents = self.poll_fd(libc::POLLIN, left)?;
            if revents & libc::POLLIN != 0 {
                continue;
            }
            if revents != 0 {
                // An error and no event left to read: disassociated.
                if let Some(ev) = self.get_async_event()? {
                    return Ok(Some(ev));
                }
                self.dead_if_err(revents, "wait for an asynchronous event")?;
            }
            if left.is_some_and(|l| l.is_zero()) {
                return Ok(None);
            }
        }
    }

    /// `QUERY_CTX` (a method of the driver): the device's counters for this context
    /// (doorbells, packets, RNR, on-demand paging, datagrams dropped).
    pub fn query_ctx(&self) -> Result<CtxStats> {
        let mut req = qhca_ioc_query_ctx::request();
        self.cmd_query_ctx(&mut req)?;
        Ok(CtxStats::from_raw(&req.stats))
    }
}

/// `poll(2)` on `fds` for up to `timeout` (`None`: for ever), restarted on `EINTR` with the time
/// left; returns how many have events (0: timed out).
pub(crate) fn poll_fds(
    fds: &mut [libc::pollfd],
    timeout: Option<Duration>,
    op: &'static str,
) -> Result<usize> {
    let end = timeout.map(|t| Instant::now() + t);
    loop {
        let ms = end.map_or(-1, |e| {
            let left = e.saturating_duration_since(Instant::now());
            // Round up, so that a wait of 0.5 ms does not spin with timeout 0.
            left.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
        });
        // SAFETY: `fds` is an exclusively borrowed slice of valid `pollfd`s, and its length is
        // passed with it, so the kernel reads and writes only those entries.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = Errno::last();
        if e != Errno::EINTR {
            return Err(Error::Sys { op, source: e });
        }
    }
}

impl AsFd for Context {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Gives up the context as its file descriptor (closing that fd is then the caller's business,
/// e.g. to see what `close` returns).
impl From<Context> for OwnedFd {
    fn from(ctx: Context) -> OwnedFd {
        ctx.fd
    }
}

impl AsRawFd for Context {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Errno, Pd};

    #[test]
    fn open_missing_node_reports_path_and_enoent() {
        match Context::open("/dev/infiniband/uverbs-does-not-exist") {
            Err(Error::Open { path, source }) => {
                assert_eq!(path, Path::new("/dev/infiniband/uverbs-does-not-exist"));
                assert_eq!(source, Errno::ENOENT);
            }
            other => panic!("expected Open error, got {other:?}"),
        }
    }

    /// Only a uverbs node is a device: anything else (the driver's old `/dev/qhcaN`, a file)
    /// is refused before it is opened.
    #[test]
    fn open_refuses_what_is_not_a_uverbs_node() {
        for p in ["/dev/null", "/dev/qhca0"] {
            match Context::open(p) {
                Err(Error::Open { path, source }) => {
                    assert_eq!(path, Path::new(p));
                    assert_eq!(source, Errno::ENODEV);
                }
                other => panic!("{p}: expected ENODEV at open, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_context_without_a_device_has_no_control_path() {
        let ctx = Context::open_unchecked(Path::new("/dev/null")).unwrap();
        assert_eq!(ctx.path(), Path::new("/dev/null"));
        assert!(ctx.as_raw_fd() >= 0);
        assert_eq!(ctx.query().unwrap(), *ctx.attr());
        match Pd::new(&Arc::new(ctx)) {
            Err(Error::Ioctl {
                op: "ALLOC_PD",
                source,
            }) => assert_eq!(source, Errno::ENOTTY),
            other => panic!("expected ENOTTY, got {other:?}"),
        }
    }

    #[test]
    fn verbs_ioctls_on_a_non_qhca_file_are_typed_errors() {
        let ctx = Context::open_unchecked(Path::new("/dev/null")).unwrap();
        match ctx.query_ctx() {
            Err(Error::Ioctl {
                op: "QUERY_CTX",
                source,
            }) => assert_eq!(source, Errno::ENOTTY),
            other => panic!("expected ENOTTY, got {other:?}"),
        }
        match ctx.get_async_event() {
            Err(Error::Ioctl {
                op: "GET_ASYNC_EVENT",
                source,
            }) => assert_eq!(source, Errno::ENOTTY),
            other => panic!("expected ENOTTY, got {other:?}"),
        }
        assert!(ctx.doorbell().is_err());
        // /dev/null polls readable and without error: alive.
        ctx.check().unwrap();
    }

    #[test]
    fn enodev_or_eio_from_an_ioctl_marks_the_context_dead() {
        let ctx = Context::open_unchecked(Path::new("/dev/null")).unwrap();
        ctx.note_errno(Errno::ENOTTY);
        ctx.note_errno(Errno::EINVAL);
        assert!(!ctx.is_dead());
        ctx.note_errno(Errno::ENODEV);
        assert!(ctx.is_dead());
        assert!(matches!(ctx.check(), Err(Error::Disassociated { .. })));
        assert_eq!(
            ctx.wait_async_event(None).unwrap_err().errno(),
            Some(Errno::ENOTTY),
            "no control path without a device"
        );
        let ctx = Context::open_unchecked(Path::new("/dev/null")).unwrap();
        ctx.note_errno(Errno::EIO);
        assert!(ctx.is_dead());
    }

    #[test]
    fn pollerr_marks_the_context_dead() {
        let ctx = Context::open_unchecked(Path::new("/dev/null")).unwrap();
        ctx.dead_if_err(libc::POLLIN, "x").unwrap();
        assert!(!ctx.is_dead());
        assert!(matches!(
            ctx.dead_if_err(libc::POLLIN | libc::POLLERR, "x"),
            Err(Error::Disassociated { op: "x" })
        ));
        assert!(ctx.is_dead());
    }

    #[test]
    fn async_events_decode() {
        assert_eq!(
            AsyncEvent::from_raw(1, 0x401),
            AsyncEvent::QpFatal { qpn: 0x401 }
        );
        assert_eq!(AsyncEvent::from_raw(2, 3), AsyncEvent::CqErr { cqn: 3 });
        assert_eq!(AsyncEvent::from_raw(3, 0), AsyncEvent::DeviceFatal);
        // The core's IB_EVENT_SRQ_LIMIT_REACHED (15) and IB_EVENT_QP_LAST_WQE_REACHED (16).
        assert_eq!(
            AsyncEvent::from_raw(0x10f, 0x1401),
            AsyncEvent::SrqLimitReached { srqn: 0x1401 }
        );
        assert_eq!(
            AsyncEvent::from_raw(0x110, 0x42),
            AsyncEvent::QpLastWqeReached { qpn: 0x42 }
        );
        assert_eq!(
            AsyncEvent::from_raw(0x104, 1),
            AsyncEvent::Unknown {
                kind: 0x104,
                element: 1
            },
            "IB_EVENT_COMM_EST"
        );
        assert_eq!(
            AsyncEvent::from_raw(9, 7),
            AsyncEvent::Unknown {
                kind: 9,
                element: 7
            }
        );
    }

    #[test]
    fn map_doorbell_on_a_non_qhca_file_is_an_mmap_error() {
        // /dev/null cannot be mapped shared: ENODEV.
        let ctx = Context::open_unchecked(Path::new("/dev/null")).unwrap();
        match ctx.map_doorbell() {
            Err(Error::Mmap {
                what: "doorbell page",
                source,
            }) => assert_eq!(source, Errno::ENODEV),
            other => panic!("expected an Mmap error, got {other:?}"),
        }
    }
}
