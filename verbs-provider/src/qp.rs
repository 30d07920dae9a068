// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Queue pairs (RC and UD): the rings in the process's memory (`struct qhca_ib_create_qp`
//! names them to the driver), posted to with no system call through the shared post path
//! (`qhca_verbs_abi::post`) over the `qhca` crate's work queues. A QP created on an SRQ has a
//! send queue alone: its receives come from the SRQ (`ibv_post_recv` on it is `EINVAL`).

use core::ffi::c_int;
use core::fmt::Arguments;
use core::mem::size_of_val;
use core::ptr;
use std::sync::{Mutex, MutexGuard};

use qhca::{PageBuf, QpCaps, QpLayout, QpType, UdDest, WorkQueues};
use qhca_uapi::qhca_ib_create_qp;
use qhca_verbs_abi::ffi::*;
use qhca_verbs_abi::post::{Objects, Posting};

use crate::ah::Ah;
use crate::cmd::*;
use crate::context::Context;
use crate::cq::Cq;

/// A QP: libibverbs's `struct ibv_qp` first, then its queues.
#[repr(C)]
struct Qp {
    ibv: ibv_qp,
    /// Set once the kernel made the QP (its number names the queues).
    posting: Mutex<Option<Posting<WorkQueues>>>,
    sig_all: bool,
    /// The rings: freed after the kernel destroyed the QP, leaked if it could not.
    buf: PageBuf,
}

impl Qp {
    /// The provider's QP of libibverbs's `qp`.
    ///
    /// # Safety
    ///
    /// `qp` is a QP this provider made, not destroyed.
    unsafe fn of<'a>(qp: *mut ibv_qp) -> &'a Qp {
        // SAFETY: the caller's promise: the `ibv_qp` that starts a `Qp`.
        unsafe { &*qp.cast::<Qp>() }
    }

    fn posting(&self) -> MutexGuard<'_, Option<Posting<WorkQueues>>> {
        self.posting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The CQs its completions land in (one, or two distinct ones).
    fn cqs(&self) -> impl Iterator<Item = &Cq> {
        let (s, r) = (self.ibv.send_cq, self.ibv.recv_cq);
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
            cq.with_consumer(|c| c.clean(self.ibv.qp_num));
        }
    }
}

/// How the provider finds what a request names: objects of the QP's own context only.
struct Ours(*mut ibv_context);

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
    let fail = |e: c_int| {
        set_errno(e);
        ptr::null_mut()
    };
    // SAFETY: the program's attributes.
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
    // The kernel is asked for what the rings hold (no receive queue on an SRQ).
    let asked = a.cap;
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
    // At its final address: the kernel's events name the QP by it.
    let qp = Box::into_raw(Box::new(Qp {
        ibv: ibv_qp::default(),
        posting: Mutex::new(None),
        sig_all: a.sq_sig_all != 0,
        buf,
    }));
    // SAFETY: libibverbs's arguments, passed on; `qp` starts with the `struct ibv_qp` it fills
    // in; the buffers are the sizes given.
    let ret = unsafe {
        ibv_cmd_create_qp(
            pd,
            qp.cast(),
            init,
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            CREATE_QP_RESP,
        )
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
    // SAFETY: ours; `pd` is a PD of a context of ours.
    let (q, db) = unsafe { (&*qp, Context::of((*pd).context).doorbell()) };
    // SAFETY: `base` is the QP's `buf`: `layout.buf_len` fresh, zeroed, page-aligned bytes,
    // freed only after the queues are gone (or leaked).
    let queues = unsafe { WorkQueues::new(base, layout, q.ibv.qp_num, qp_type, db) };
    let shared = queues.shared().clone();
    *q.posting() = Some(Posting::new(queues));
    for cq in q.cqs() {
        cq.with_consumer(|c| c.attach(q.ibv.qp_num, shared.clone()));
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
    // SAFETY: the program's attributes.
    if ret == 0 && mask & IBV_QP_STATE as c_int != 0 && unsafe { (*attr).qp_state } == IBV_QPS_RESET
    {
        // SAFETY: a QP of ours.
        let q = unsafe { Qp::of(qp) };
        q.clean_cqs();
        if let Some(p) = q.posting().as_ref() {
            p.queues.shared().reset();
        }
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
            c.detach(q.ibv.qp_num);
            c.clean(q.ibv.qp_num);
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
    let ours = Ours(q.ibv.context);
    match q.posting().as_mut() {
        // SAFETY: the program's list of live requests (ibv_post_send(3)).
        Some(p) => unsafe { p.post_send(&ours, q.sig_all, wr, bad, debug) },
        None => libc::EINVAL,
    }
}

/// `post_recv`: what the inline `ibv_post_recv` calls; no system call.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the program's QP, of a context of ours.
    let q = unsafe { Qp::of(qp) };
    match q.posting().as_mut() {
        // SAFETY: the program's list of live requests (ibv_post_recv(3)).
        Some(p) => unsafe { p.post_recv(wr, bad, debug) },
        None => libc::EINVAL,
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
    let ours = Ours(q.ibv.context);
    match q.posting().as_mut() {
        // SAFETY: the program's window and request, and the region it names, live.
        Some(p) => unsafe { p.bind_mw(&ours, q.sig_all, mw, bind, debug) },
        None => libc::EINVAL,
    }
}
