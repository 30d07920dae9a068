// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Completion queues: the ring in the process's memory (`struct qhca_ib_create_cq` names it to
//! the driver), polled and armed with no system call, over the `qhca` crate's consumer.

use core::ffi::c_int;
use core::mem::size_of_val;
use core::ptr;
use std::sync::{Arc, Mutex, MutexGuard};

use qhca::{CqConsumer, CqLayout, DbType, DbWord, Doorbell, PageBuf};
use qhca_uapi::{qhca_ib_create_cq, qhca_ib_create_cq_resp};
use qhca_verbs_abi::ffi::*;
use qhca_verbs_abi::wr::poll_into;

use crate::cmd::*;
use crate::context::Context;

/// A CQ: libibverbs's `struct ibv_cq` first, then the ring and its consumer.
#[repr(C)]
pub(crate) struct Cq {
    ibv: ibv_cq,
    consumer: Mutex<CqConsumer>,
    db: Arc<Doorbell>,
    cqn: u32,
    /// The ring: freed after the kernel destroyed the CQ, leaked if it could not.
    buf: Option<PageBuf>,
}

impl Cq {
    /// The provider's CQ of libibverbs's `cq`.
    ///
    /// # Safety
    ///
    /// `cq` is a CQ this provider made, not destroyed.
    pub(crate) unsafe fn of<'a>(cq: *mut ibv_cq) -> &'a Cq {
        // SAFETY: the caller's promise: the `ibv_cq` that starts a `Cq`.
        unsafe { &*cq.cast::<Cq>() }
    }

    pub(crate) fn consumer(&self) -> MutexGuard<'_, CqConsumer> {
        self.consumer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `create_cq`: at least `cqe` entries.
pub(crate) unsafe extern "C" fn create_cq(
    ibctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let fail = |e: c_int| {
        set_errno(e);
        ptr::null_mut()
    };
    let Ok(entries) = u32::try_from(cqe) else {
        return fail(libc::EINVAL);
    };
    let Ok(layout) = CqLayout::new(entries.max(1)) else {
        return fail(libc::EINVAL);
    };
    let buf = match PageBuf::new(layout.buf_len) {
        Ok(b) => b,
        Err(_) => return fail(libc::ENOMEM),
    };
    // SAFETY: `ibctx` is a context of ours (libibverbs dispatched to its ops).
    let db = unsafe { Context::of(ibctx) }.doorbell();
    // SAFETY: `buf` is `layout.buf_len` fresh, zeroed, page-aligned bytes, which the CQ owns and
    // frees only after the consumer is gone (or leaks).
    let consumer = unsafe { CqConsumer::new(buf.as_ptr(), &layout) };
    let cq = Box::into_raw(Box::new(Cq {
        ibv: ibv_cq::default(),
        consumer: Mutex::new(consumer),
        db,
        cqn: 0,
        buf: Some(buf),
    }));
    let mut cmd = Cmd::<CREATE_CQ_CMD, qhca_ib_create_cq>::new(qhca_ib_create_cq {
        // SAFETY: `cq` is ours; the ring was just placed in it.
        buf_addr: unsafe { (*cq).buf.as_ref() }.map_or(0, PageBuf::addr),
        buf_len: layout.buf_len as u64,
        log_entries: layout.log,
        comp_mask: 0,
    });
    let mut resp = Resp::<8, qhca_ib_create_cq_resp>::new();
    // SAFETY: libibverbs's arguments, passed on; `cq` starts with the `struct ibv_cq` it fills
    // in; the buffers are the sizes given.
    let ret = unsafe {
        ibv_cmd_create_cq(
            ibctx,
            cqe,
            channel,
            comp_vector,
            cq.cast(),
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        // SAFETY: ours, not handed out; the kernel never had the ring.
        return unsafe { discard(cq, ret) };
    }
    // SAFETY: ours.
    unsafe { (*cq).cqn = resp.drv.cqn };
    cq.cast()
}

/// `destroy_cq`: libibverbs refuses it while QPs use the CQ (the kernel counts them).
pub(crate) unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: `cq` came from `create_cq`, a `Cq`; the program's last use (once destroyed, the
    // device writes the ring no more).
    unsafe { free_if_destroyed(ibv_cmd_destroy_cq(cq), cq.cast::<Cq>()) }
}

/// `poll_cq`: what the inline `ibv_poll_cq` calls; no system call.
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the program's CQ, of a context of ours.
    let c = unsafe { Cq::of(cq) };
    let mut consumer = c.consumer();
    // SAFETY: the program passes room for `num` completions at `wc`.
    unsafe { poll_into(num, wc, |out| consumer.poll(out)) }
}

/// `req_notify_cq`: what the inline `ibv_req_notify_cq` calls: a doorbell store naming the
/// consumer index, no system call. `solicited_only` arms for every completion, a superset of
/// the solicited ones (a wake-up is a hint to poll).
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    // SAFETY: the program's CQ, of a context of ours.
    let c = unsafe { Cq::of(cq) };
    let ci = c.consumer().ci();
    c.db.ring(DbWord::new(DbType::CqArm, c.cqn, ci).raw());
    0
}
