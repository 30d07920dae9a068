// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Queue pairs (RC and UD): the rings in the process's memory (`struct qhca_ib_create_qp`
//! names them to the driver), posted to with no system call through the shared post path
//! (`qhca_verbs_abi::post`) over the `qhca` crate's work queues. A QP created on an SRQ has a
//! send queue alone: its receives come from the SRQ (`ibv_post_recv` on it is `EINVAL`).
//!
//! `create_qp` (`ibv_create_qp`) and `create_qp_ex` (`ibv_create_qp_ex`) make the same QP, with
//! the same rings, driver data and kernel command (the core's `struct ibv_create_qp`); every QP
//! is libibverbs's `struct verbs_qp`. With `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` the second also
//! fills in the work-request API of `struct ibv_qp_ex` and marks the QP `VERBS_QP_EX`, so that
//! `ibv_qp_to_qp_ex` finds it ([`crate::qp_ex`]); `ibv_post_send` works on it too.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::fmt::Arguments;
use core::mem::size_of_val;
use core::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use qhca::{PageBuf, QpCaps, QpLayout, QpType, SendWr, UdDest, WorkQueues};
use qhca_uapi::qhca_ib_create_qp;
use qhca_verbs_abi::ffi::*;
use qhca_verbs_abi::post::{Objects, Posting, BATCH};

use crate::ah::Ah;
use crate::cmd::*;
use crate::context::Context;
use crate::cq::Cq;
use crate::qp_ex::{self, Limits, Ready, WrBatch};
use crate::VerbsQp;

/// A QP: libibverbs's `struct verbs_qp` first, then its queues.
///
/// Threads share it through libibverbs's pointer; what they change is behind the locks
/// (`posting`, `batch`) or libibverbs's own struct.
#[repr(C)]
pub(crate) struct Qp {
    /// libibverbs's, which it writes too (the state on a modify, the event counter under its
    /// mutex), and so does the program (`wr_id` and `wr_flags` of an extended QP): read field by
    /// field through the cell's pointer, never through a reference to the whole. The fields the
    /// provider reads (context, number, CQs, the ops) are set before the QP is handed out and
    /// not written after.
    ibv: UnsafeCell<VerbsQp>,
    /// Set once the kernel made the QP (its number names the queues).
    posting: Mutex<Option<Posting<WorkQueues>>>,
    /// The batch of the work-request API between `ibv_wr_start` and `ibv_wr_complete` (unused,
    /// and empty, on a QP that is not extended).
    batch: Mutex<WrBatch>,
    sig_all: bool,
    /// In RESET, as the last successful `modify_qp` left it (a QP starts there): posting to it
    /// is `EINVAL` (C10-97.2.1 for receives; rxe alike for sends). Written and read under the
    /// posting lock.
    reset: AtomicBool,
    /// The rings: freed after the kernel destroyed the QP, leaked if it could not.
    buf: PageBuf,
}

// The provider's QP is libibverbs's at offset 0, and `struct ibv_qp` starts `struct ibv_qp_ex`
// (`struct verbs_qp` is their union), so one pointer is all three.
const _: () = assert!(core::mem::offset_of!(Qp, ibv) == 0);

// `ibv_create_qp_ex`'s attributes start with `ibv_create_qp`'s (libibverbs casts one to the
// other); `create` reads and writes that prefix alone through either.
const _: () = {
    use core::mem::offset_of;
    type B = ibv_qp_init_attr;
    type E = ibv_qp_init_attr_ex;
    assert!(offset_of!(B, qp_context) == offset_of!(E, qp_context));
    assert!(offset_of!(B, send_cq) == offset_of!(E, send_cq));
    assert!(offset_of!(B, recv_cq) == offset_of!(E, recv_cq));
    assert!(offset_of!(B, srq) == offset_of!(E, srq));
    assert!(offset_of!(B, cap) == offset_of!(E, cap));
    assert!(offset_of!(B, qp_type) == offset_of!(E, qp_type));
    assert!(offset_of!(B, sq_sig_all) == offset_of!(E, sq_sig_all));
};

impl Qp {
    /// The provider's QP of libibverbs's `qp`.
    ///
    /// # Safety
    ///
    /// `qp` is a QP this provider made, not destroyed.
    pub(crate) unsafe fn of<'a>(qp: *mut ibv_qp) -> &'a Qp {
        // SAFETY: the caller's promise: the `ibv_qp` that starts a `Qp`.
        unsafe { &*qp.cast::<Qp>() }
    }

    /// A QP over `buf` and its posting limits, at its final address (the kernel's events name
    /// it by it), that no kernel knows yet. `ex`: the ops of `struct ibv_qp_ex` are set.
    fn alloc(buf: PageBuf, sig_all: bool, limits: Limits, ex: bool) -> *mut Qp {
        let mut vqp = VerbsQp::default();
        if ex {
            qp_ex::set_ops(&mut vqp.qp_ex, limits.ud);
        }
        Box::into_raw(Box::new(Qp {
            ibv: UnsafeCell::new(vqp),
            posting: Mutex::new(None),
            batch: Mutex::new(WrBatch::new(limits)),
            sig_all,
            reset: AtomicBool::new(true),
            buf,
        }))
    }

    /// libibverbs's `struct ibv_qp`, as a pointer (the provider's reads go field by field).
    fn base(&self) -> *const ibv_qp {
        self.ibv.get().cast()
    }

    /// The QP's number.
    pub(crate) fn qp_num(&self) -> u32 {
        // SAFETY: inside our live struct; set by the create command before the QP was handed
        // out, not written after (the type's comment).
        unsafe { (&raw const (*self.base()).qp_num).read() }
    }

    /// The QP's context.
    pub(crate) fn context(&self) -> *mut ibv_context {
        // SAFETY: as `qp_num`.
        unsafe { (&raw const (*self.base()).context).read() }
    }

    fn posting(&self) -> MutexGuard<'_, Option<Posting<WorkQueues>>> {
        self.posting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the QP is in RESET; the caller holds the posting lock.
    fn in_reset(&self) -> bool {
        self.reset.load(Ordering::Relaxed)
    }

    /// The batch of the work-request API.
    pub(crate) fn batch(&self) -> MutexGuard<'_, WrBatch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The CQs its completions land in (one, or two distinct ones).
    fn cqs(&self) -> impl Iterator<Item = &Cq> {
        // SAFETY: as `qp_num`.
        let (s, r) = unsafe {
            (
                (&raw const (*self.base()).send_cq).read(),
                (&raw const (*self.base()).recv_cq).read(),
            )
        };
        // SAFETY: a QP's CQs are live, ours, and outlive it (libibverbs and the kernel refuse to
        // destroy a CQ a QP uses).
        [Some(s), (r != s).then_some(r)]
            .into_iter()
            .flatten()
            .map(|c| unsafe { Cq::of(c) })
    }

    /// Drops the QP's unpolled CQEs from its CQs (the device writes none for it any more: the
    /// QP is in RESET or destroyed), so that none is polled or credited to new requests later.
    fn clean_cqs(&self) {
        for cq in self.cqs() {
            cq.with_consumer(|c| c.clean(self.qp_num()));
        }
    }

    /// Posts the requests of an extended QP's batch all, or none: if the send queue has no
    /// room for all of them, `ENOMEM` and nothing is posted. A refusal of the post path after
    /// some were posted (one the batch's checks did not foresee) stops there, as
    /// `ibv_post_send` does, and its errno is returned. The windows of the posted BIND_MWs get
    /// their new keys.
    ///
    /// # Safety
    ///
    /// The windows of the batch's BIND_MWs are live.
    pub(crate) unsafe fn post_batch(&self, ready: &Ready<'_>) -> c_int {
        let mut guard = self.posting();
        let Some(p) = guard.as_mut().filter(|_| !self.in_reset()) else {
            return libc::EINVAL;
        };
        let n = ready.len();
        // Completions only free slots meanwhile, and posts wait for the lock this holds: room
        // for the whole batch now is room for each of its chunks below.
        if n > BATCH {
            let (outstanding, _) = p.queues.outstanding();
            let free = p.queues.layout().sq_depth().saturating_sub(outstanding);
            if n > free as usize {
                debug(format_args!(
                    "ibv_wr_complete: {n} requests, room for {free} in the send queue"
                ));
                return libc::ENOMEM;
            }
        }
        let mut posted = 0;
        let mut ret = 0;
        while posted < n && ret == 0 {
            let k = (n - posted).min(BATCH);
            // One request (most batches) is posted without filling the chunk's array.
            let sent = if k == 1 {
                p.queues.post_send_all(&[ready.wr(posted)])
            } else {
                let wrs: [SendWr<'_>; BATCH] =
                    core::array::from_fn(|j| ready.wr(posted + j.min(k - 1)));
                p.queues.post_send_all(&wrs[..k])
            };
            match sent {
                Ok(()) => posted += k,
                Err(e) => {
                    debug(format_args!("ibv_wr_complete: {e}"));
                    posted += e.index;
                    ret = e.errno() as c_int;
                }
            }
        }
        let ours = Ours(self.context());
        for (mw, key) in ready.binds(posted) {
            // SAFETY: the caller's promise: a live window (of this context: the op checked).
            unsafe { ours.bound(mw, key) };
        }
        ret
    }
}

#[cfg(test)]
impl Qp {
    /// An extended QP of `qp_type` over fresh rings of `caps`, as `create_qp_ex` makes it but
    /// known to no kernel (number 1, no context, no CQs): its doorbells go to `db`. The test
    /// frees it with `Box::from_raw`.
    pub(crate) fn fake_ex(
        caps: &QpCaps,
        qp_type: QpType,
        db: std::sync::Arc<qhca::Doorbell>,
    ) -> *mut Qp {
        let layout = QpLayout::new(caps).expect("layout");
        let buf = PageBuf::new(layout.buf_len).expect("rings");
        let base = buf.as_ptr();
        let limits = Limits::of(&layout, qp_type, false);
        let qp = Qp::alloc(buf, false, limits, true);
        // SAFETY: ours, not shared; `base` is its fresh rings of `layout`, which it owns.
        unsafe {
            let v = &mut *(*qp).ibv.get();
            assert!(v.mark_ex(), "libibverbs has no known struct verbs_qp");
            v.qp_ex.qp_base.qp_num = 1;
            let queues = WorkQueues::new(base, layout, 1, qp_type, db);
            *(*qp).posting() = Some(Posting::new(queues));
            // Ready to post, as after a modify to RTS.
            (*qp).reset.store(false, Ordering::Relaxed);
        }
        qp
    }

    /// Send requests posted and not completed.
    pub(crate) fn sq_outstanding(&self) -> u32 {
        self.posting()
            .as_ref()
            .map_or(0, |p| p.queues.outstanding().0)
    }
}

/// How the provider finds what a request names: objects of the QP's own context only.
pub(crate) struct Ours(pub(crate) *mut ibv_context);

impl Objects for Ours {
    unsafe fn ud_dest(&self, ah: *mut ibv_ah, qpn: u32, qkey: u32) -> Option<UdDest> {
        // SAFETY: the caller's promise: NULL or a live handle; one of this context is ours.
        let ours = !ah.is_null() && unsafe { (*ah).context } == self.0;
        // SAFETY: as above: an `Ah`.
        ours.then(|| UdDest {
            ah: unsafe { (*ah.cast::<Ah>()).ah },
            remote_qpn: qpn,
            remote_qkey: qkey,
        })
    }

    unsafe fn window_key(&self, mw: *mut ibv_mw) -> Option<u32> {
        // SAFETY: the caller's promise: NULL or a live window.
        (!mw.is_null() && unsafe { (*mw).context } == self.0).then(|| unsafe { (*mw).rkey })
    }

    unsafe fn region_lkey(&self, mr: *mut ibv_mr) -> Option<u32> {
        // SAFETY: the caller's promise: NULL or a live region.
        (!mr.is_null() && unsafe { (*mr).context } == self.0).then(|| unsafe { (*mr).lkey })
    }

    unsafe fn bound(&self, mw: *mut ibv_mw, key: u32) {
        // SAFETY: the caller's promise: a live window of this context.
        unsafe { (*mw).rkey = key };
    }
}

/// Why a post failed, on stderr with `QHCA_VERBS_DEBUG=1`.
pub(crate) fn debug(msg: Arguments<'_>) {
    if std::env::var_os("QHCA_VERBS_DEBUG").is_some_and(|v| v == "1") {
        eprintln!("libqhca: {msg}");
    }
}

/// `create_qp`: RC or UD, with a receive queue of its own or on an SRQ of this context (then
/// the QP's buffer is the send queue alone, and the receive capabilities are 0).
pub(crate) unsafe extern "C" fn create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: libibverbs's arguments: the program's PD and attributes.
    unsafe { create(pd, init, ptr::null_mut(), false) }
}

/// `create_qp_ex`: the QP of `create_qp` (same rings, driver data and command), from
/// `ibv_create_qp_ex`'s attributes: `IBV_QP_INIT_ATTR_PD` (required) and
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, with which the QP is an extended one (see
/// [`qp_ex::check_attr`] for what is refused).
pub(crate) unsafe extern "C" fn create_qp_ex(
    ibctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let fail = |e: c_int| {
        set_errno(e);
        ptr::null_mut()
    };
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the program's attributes (ibv_create_qp_ex(3)); copied out, the reference ends.
    let (pd, ex, checked) = unsafe {
        let a = &*attr;
        let ex = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
        (a.pd, ex, qp_ex::check_attr(a))
    };
    if let Err(e) = checked {
        return fail(e);
    }
    if ex && crate::verbs_qp_mask_offset().is_none() {
        // A libibverbs whose `struct verbs_qp` this provider does not know: the work-request
        // API could not be found by the program.
        return fail(libc::EOPNOTSUPP);
    }
    // SAFETY: NULL or the program's PD, live (ibv_create_qp_ex(3)).
    if pd.is_null() || unsafe { (*pd).context } != ibctx {
        return fail(libc::EINVAL);
    }
    // libibverbs's command takes no create flags' bit (`check_attr` let it through with no
    // flag set): the command gets a copy without it, and the program the capabilities back.
    // SAFETY: the program's attributes, copied out (plain data).
    let mut local = unsafe { *attr };
    local.comp_mask &= !IBV_QP_INIT_ATTR_CREATE_FLAGS;
    let lp: *mut ibv_qp_init_attr_ex = &mut local;
    // SAFETY: the program's PD, of this context; `local` is live for the call and its prefix is
    // `struct ibv_qp_init_attr` (checked at compile time above).
    let qp = unsafe { create(pd, lp.cast(), lp, ex) };
    // SAFETY: the program's attributes: what the QP has (or, on failure, what it asked).
    unsafe { (*attr).cap = local.cap };
    qp
}

/// What the two create ops share. `init` is the program's attributes, read and written as
/// `struct ibv_qp_init_attr` (the prefix of the extended ones); `attr_ex` is NULL (`create_qp`,
/// the core's `ibv_cmd_create_qp`), or the extended attributes at the same address
/// (`create_qp_ex`, `ibv_cmd_create_qp_ex`, with the same command). `ex`: an extended QP.
///
/// # Safety
///
/// `pd` is a live PD of a context of ours; `init` (and `attr_ex` if not NULL) the program's
/// attributes, whose CQs and SRQ are live.
unsafe fn create(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
    attr_ex: *mut ibv_qp_init_attr_ex,
    ex: bool,
) -> *mut ibv_qp {
    let fail = |e: c_int| {
        set_errno(e);
        ptr::null_mut()
    };
    // SAFETY: the program's attributes; the reference ends before they are written below.
    let a = unsafe { &*init };
    let qp_type = match a.qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UD => QpType::Ud,
        _ => return fail(libc::EOPNOTSUPP),
    };
    if a.send_cq.is_null() || a.recv_cq.is_null() {
        return fail(libc::EINVAL);
    }
    let on_srq = !a.srq.is_null();
    // SAFETY: the program's PD and SRQ, live (ibv_create_qp(3)).
    if on_srq && unsafe { (*a.srq).context != (*pd).context } {
        return fail(libc::EINVAL);
    }
    let recv_sge = if on_srq { 0 } else { a.cap.max_recv_sge };
    let caps = QpCaps {
        max_send_wr: a.cap.max_send_wr.max(1),
        max_recv_wr: a.cap.max_recv_wr.max(1),
        max_sge: a.cap.max_send_sge.max(recv_sge).max(1),
        max_inline: a.cap.max_inline_data,
    };
    let sig_all = a.sq_sig_all != 0;
    // The kernel is asked for what the rings hold (no receive queue on an SRQ).
    let asked = a.cap;
    let layout = if on_srq {
        QpLayout::on_srq(&caps)
    } else {
        QpLayout::new(&caps)
    };
    let Ok(layout) = layout else {
        return fail(libc::EINVAL);
    };
    let buf = match PageBuf::new(layout.buf_len) {
        Ok(b) => b,
        Err(_) => return fail(libc::ENOMEM),
    };
    let mut cmd = Cmd::<CREATE_QP_CMD, qhca_ib_create_qp>::new(qhca_ib_create_qp {
        buf_addr: buf.addr(),
        buf_len: buf.len() as u64,
        sq_log: layout.sq_log as u8,
        sq_stride_log: layout.sq_stride_log as u8,
        rq_log: layout.rq_log as u8,
        rq_stride_log: layout.rq_stride_log as u8,
        comp_mask: 0,
    });
    let mut resp = Resp::<CREATE_QP_RESP, NoData>::new();
    // SAFETY: the program's attributes; nothing else reads them during the call.
    unsafe {
        let c = &mut (*init).cap;
        c.max_send_wr = layout.sq_depth();
        c.max_recv_wr = layout.rq_depth();
        c.max_send_sge = layout.max_sge;
        c.max_recv_sge = if on_srq { 0 } else { layout.max_sge };
        c.max_inline_data = layout.max_inline;
    }
    let base = buf.as_ptr();
    let limits = Limits::of(&layout, qp_type, sig_all);
    let qp = Qp::alloc(buf, sig_all, limits, ex);
    // SAFETY: libibverbs's arguments, passed on; `qp` starts with the `struct verbs_qp` (and so
    // the `struct ibv_qp`) the command fills in; the buffers are the sizes given.
    let ret = unsafe {
        if attr_ex.is_null() {
            ibv_cmd_create_qp(
                pd,
                qp.cast(),
                init,
                cmd.as_mut_ptr(),
                size_of_val(&cmd),
                resp.as_mut_ptr(),
                CREATE_QP_RESP,
            )
        } else {
            ibv_cmd_create_qp_ex(
                (*pd).context,
                qp.cast(),
                attr_ex,
                cmd.as_mut_ptr(),
                size_of_val(&cmd),
                resp.as_mut_ptr(),
                CREATE_QP_RESP,
            )
        }
    };
    if ret != 0 {
        // SAFETY: ours, not handed out (the kernel never had the rings); the program's
        // attributes given back as they were.
        unsafe {
            drop(Box::from_raw(qp));
            (*init).cap = asked;
        }
        return fail(ret);
    }
    if ex {
        // SAFETY: ours, not handed out yet; the command set the mask to 0 (no XRC domain): now
        // `ibv_qp_to_qp_ex` finds the ops set by `alloc` (`create_qp_ex` checked that the mask's
        // place is known).
        unsafe { (*(*qp).ibv.get()).mark_ex() };
    }
    // SAFETY: ours; `pd` is a PD of a context of ours.
    let (q, db) = unsafe { (&*qp, Context::of((*pd).context).doorbell()) };
    // SAFETY: `base` is the QP's `buf`: `layout.buf_len` fresh, zeroed, page-aligned bytes,
    // freed only after the queues are gone (or leaked).
    let queues = unsafe { WorkQueues::new(base, layout, q.qp_num(), qp_type, db) };
    let shared = queues.shared().clone();
    *q.posting() = Some(Posting::new(queues));
    for cq in q.cqs() {
        cq.with_consumer(|c| c.attach(q.qp_num(), shared.clone()));
    }
    qp.cast()
}

/// `modify_qp`. A move to RESET also empties the provider's view of both queues: the device
/// forgets every posted request and starts its indices again at 0, and so do we, and the QP's
/// unpolled CQEs leave its CQs (as rdma-core's mlx5 does).
///
/// The CQs are cleaned before the QP's posting lock is taken, never under it: a thread in a poll
/// batch holds its CQ's lock while it posts (CQ, then posting), so the reverse order here could
/// deadlock with it. Apart, the two steps are still right: once the kernel moved the QP to RESET
/// the device writes no CQE of it, so none arrives between them.
pub(crate) unsafe extern "C" fn modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    let mut cmd = Cmd::<MODIFY_QP_CMD, NoData>::new(NoData);
    // SAFETY: libibverbs's arguments, passed on; `cmd` is the size given.
    let ret = unsafe { ibv_cmd_modify_qp(qp, attr, mask, cmd.as_mut_ptr(), size_of_val(&cmd)) };
    if ret != 0 || mask & IBV_QP_STATE as c_int == 0 {
        return ret;
    }
    // SAFETY: the program's attributes; a QP of ours.
    let (state, q) = unsafe { ((*attr).qp_state, Qp::of(qp)) };
    if state == IBV_QPS_RESET {
        q.clean_cqs();
    }
    let guard = q.posting();
    q.reset.store(state == IBV_QPS_RESET, Ordering::Relaxed);
    if let Some(p) = guard.as_ref().filter(|_| state == IBV_QPS_RESET) {
        p.queues.shared().reset();
    }
    ret
}

/// `query_qp`.
pub(crate) unsafe extern "C" fn query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    let mut cmd = Cmd::<QUERY_QP_CMD, NoData>::new(NoData);
    // SAFETY: libibverbs's arguments, passed on; `cmd` is the size given.
    unsafe { ibv_cmd_query_qp(qp, attr, mask, init, cmd.as_mut_ptr(), size_of_val(&cmd)) }
}

/// `destroy_qp`: its unpolled CQEs leave its CQs; its rings are freed (leaked if the kernel
/// could not destroy it).
pub(crate) unsafe extern "C" fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: `qp` came from `create_qp`.
    let ret = unsafe { ibv_cmd_destroy_qp(qp) };
    if ret != 0 {
        return ret;
    }
    // SAFETY: the kernel forgot it; the program's last use.
    let q = unsafe { Box::from_raw(qp.cast::<Qp>()) };
    for cq in q.cqs() {
        cq.with_consumer(|c| {
            c.detach(q.qp_num());
            c.clean(q.qp_num());
        });
    }
    0
}

/// `post_send`: what the inline `ibv_post_send` calls; no system call.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the program's QP, of a context of ours.
    let q = unsafe { Qp::of(qp) };
    let ours = Ours(q.context());
    match q.posting().as_mut().filter(|_| !q.in_reset()) {
        // SAFETY: the program's list of live requests (ibv_post_send(3)).
        Some(p) => unsafe { p.post_send(&ours, q.sig_all, wr, bad, debug) },
        // SAFETY: `bad` is the program's room for an address (ibv_post_send(3)): the first
        // request failed.
        None => unsafe { refuse(bad, wr) },
    }
}

/// Refuses a list of requests whole: `*bad` names the first, as when it fails (the list and
/// `bad` are the program's; a NULL `bad` is left alone).
unsafe fn refuse<W>(bad: *mut *mut W, first: *mut W) -> c_int {
    if !bad.is_null() {
        // SAFETY: the caller's promise: room for an address.
        unsafe { bad.write(first) };
    }
    libc::EINVAL
}

/// `post_recv`: what the inline `ibv_post_recv` calls; no system call.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the program's QP, of a context of ours.
    let q = unsafe { Qp::of(qp) };
    match q.posting().as_mut().filter(|_| !q.in_reset()) {
        // SAFETY: the program's list of live requests (ibv_post_recv(3)).
        Some(p) => unsafe { p.post_recv(wr, bad, debug) },
        // SAFETY: `bad` is the program's room for an address (ibv_post_recv(3)).
        None => unsafe { refuse(bad, wr) },
    }
}

/// `bind_mw`: what the inline `ibv_bind_mw` calls, for type 1 windows: posts the bind on `qp`
/// and gives the window its next key; no system call.
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    // SAFETY: the program's QP, of a context of ours.
    let q = unsafe { Qp::of(qp) };
    let ours = Ours(q.context());
    match q.posting().as_mut().filter(|_| !q.in_reset()) {
        // SAFETY: the program's window and request, and the region it names, live.
        Some(p) => unsafe { p.bind_mw(&ours, q.sig_all, mw, bind, debug) },
        None => libc::EINVAL,
    }
}
