// SPDX-License-Identifier: GPL-2.0

//! The data path of kernel consumers' objects: posting work requests, polling and arming CQs.
//!
//! The core may call each of these with interrupts off and from any context: they never sleep.
//! A work request chain is read here, one request at a time, into a [`SendWr`] or [`RecvWr`]
//! (the container struct of a send request, `ib_rdma_wr`, `ib_atomic_wr`, `ib_reg_wr` or
//! `ib_ud_wr`, follows
//! from its QP's type and opcode, as in every driver), and the driver posts them in order.

use super::{ah::ah_data, cq::IbCq, data, mr::mr_data, qp::qp_data, srq::IbSrq, Driver};
use core::{ffi::c_int, mem::MaybeUninit};
use kernel::{bindings, prelude::*};

pub(super) fn fill<T: Driver>(ops: &mut bindings::ib_device_ops) {
    ops.poll_cq = Some(poll_cq::<T>);
    ops.req_notify_cq = Some(req_notify_cq::<T>);
    ops.post_send = Some(post_send::<T>);
    ops.post_recv = Some(post_recv::<T>);
    ops.post_srq_recv = Some(post_srq_recv::<T>);
}

/// What a send request does beyond its opcode's plain form.
pub(crate) enum WrKind<'a, A, M> {
    /// SEND, SEND_WITH_IMM, SEND_WITH_INV, LOCAL_INV.
    Plain,
    /// RDMA WRITE (with immediate) and READ: the remote buffer.
    Rdma { remote_addr: u64, rkey: u32 },
    /// Compare-and-swap and fetch-and-add: the remote word and the operands.
    Atomic {
        remote_addr: u64,
        rkey: u32,
        compare_add: u64,
        swap: u64,
    },
    /// A fast registration (`IB_WR_REG_MR`): region `mr` of this device as the core's `ib_mr`
    /// says after `map_mr_sg` (`iova`, `length`), with a new key and `IB_ACCESS_*` rights.
    RegMr {
        mr: &'a M,
        iova: u64,
        length: u64,
        key: u32,
        access: u32,
    },
    /// A datagram (UD and GSI QPs): where it goes.
    Ud {
        ah: &'a A,
        remote_qpn: u32,
        remote_qkey: u32,
    },
}

/// One send request of a kernel consumer.
pub(crate) struct SendWr<'a, A, M> {
    pub(crate) wr_id: u64,
    /// `IB_WR_*`.
    pub(crate) opcode: bindings::ib_wr_opcode,
    /// `IB_SEND_*`.
    pub(crate) flags: u32,
    pub(crate) sges: &'a [bindings::ib_sge],
    /// The immediate data as the consumer gave it (big-endian), or the key to invalidate.
    pub(crate) imm: u32,
    pub(crate) kind: WrKind<'a, A, M>,
}

/// One receive request of a kernel consumer.
pub(crate) struct RecvWr<'a> {
    pub(crate) wr_id: u64,
    pub(crate) sges: &'a [bindings::ib_sge],
}

/// The scatter list of a request, or `EINVAL` for a negative count.
///
/// # Safety
///
/// `list` holds `n` entries (if `n` is positive) that stay valid and unchanged for `'a`.
unsafe fn sges<'a>(list: *const bindings::ib_sge, n: c_int) -> Result<&'a [bindings::ib_sge]> {
    let n = usize::try_from(n).map_err(|_| EINVAL)?;
    if n == 0 {
        return Ok(&[]);
    }
    if list.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: The function's contract.
    Ok(unsafe { core::slice::from_raw_parts(list, n) })
}

/// Reads send request `wr` of a QP of type `qp_type` on device `dev`.
///
/// # Safety
///
/// `wr` is a valid request of the core's `post_send` chain (of the container type its QP type
/// and opcode imply, a UD request's AH a created AH of ours of type `A`, a REG_MR request's
/// region one of `dev`'s of type `M` if it names `dev`), valid for `'a`.
unsafe fn send_wr<'a, A, M>(
    wr: *const bindings::ib_send_wr,
    qp_type: bindings::ib_qp_type,
    dev: *mut bindings::ib_device,
) -> Result<SendWr<'a, A, M>> {
    // SAFETY: The function's contract.
    let w = unsafe { &*wr };
    let kind = if qp_type == bindings::ib_qp_type_IB_QPT_UD
        || qp_type == bindings::ib_qp_type_IB_QPT_GSI
    {
        // SAFETY: Every request to a datagram QP is an `ib_ud_wr`, whose `wr` comes first.
        let ud = unsafe { &*wr.cast::<bindings::ib_ud_wr>() };
        if ud.ah.is_null() {
            return Err(EINVAL);
        }
        WrKind::Ud {
            // SAFETY: The consumer's AH, created on this device and alive while it sends
            // through it (the function's contract).
            ah: unsafe { ah_data::<A>(ud.ah) },
            remote_qpn: ud.remote_qpn,
            remote_qkey: ud.remote_qkey,
        }
    } else {
        match w.opcode {
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE
            | bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM
            | bindings::ib_wr_opcode_IB_WR_RDMA_READ => {
                // SAFETY: These opcodes come in an `ib_rdma_wr`.
                let r = unsafe { &*wr.cast::<bindings::ib_rdma_wr>() };
                WrKind::Rdma {
                    remote_addr: r.remote_addr,
                    rkey: r.rkey,
                }
            }
            bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP
            | bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD => {
                // SAFETY: These opcodes come in an `ib_atomic_wr`.
                let a = unsafe { &*wr.cast::<bindings::ib_atomic_wr>() };
                WrKind::Atomic {
                    remote_addr: a.remote_addr,
                    rkey: a.rkey,
                    compare_add: a.compare_add,
                    swap: a.swap,
                }
            }
            bindings::ib_wr_opcode_IB_WR_REG_MR => {
                // SAFETY: This opcode comes in an `ib_reg_wr`.
                let r = unsafe { &*wr.cast::<bindings::ib_reg_wr>() };
                // SAFETY: The consumer's region, valid for the call; only its device is read
                // before it is known to be ours.
                if r.mr.is_null() || unsafe { (*r.mr).device } != dev {
                    return Err(EINVAL);
                }
                // SAFETY: A region of this device (checked above), allocated by the driver as
                // every `ib_mr` of ours is, alive while a request names it.
                let (mr, iova, length) =
                    unsafe { (mr_data::<M>(r.mr), (*r.mr).iova, (*r.mr).length) };
                WrKind::RegMr {
                    mr,
                    iova,
                    length,
                    key: r.key,
                    access: r.access as u32,
                }
            }
            _ => WrKind::Plain,
        }
    };
    Ok(SendWr {
        // SAFETY: `wr_id` and `wr_cqe` share their bits; either is the consumer's cookie.
        wr_id: unsafe { w.__bindgen_anon_1.wr_id },
        opcode: w.opcode,
        flags: w.send_flags as u32,
        // SAFETY: The request's list, valid as the request is.
        sges: unsafe { sges(w.sg_list, w.num_sge) }?,
        // SAFETY: Both members are 32-bit words.
        imm: unsafe { w.ex.imm_data },
        kind,
    })
}

/// A work request of a chain.
trait Linked {
    /// The request after `this` (null at the end).
    ///
    /// # Safety
    ///
    /// `this` is a valid request.
    unsafe fn next(this: *const Self) -> *const Self;
}

impl Linked for bindings::ib_send_wr {
    unsafe fn next(this: *const Self) -> *const Self {
        // SAFETY: The function's contract.
        unsafe { (*this).next }
    }
}

impl Linked for bindings::ib_recv_wr {
    unsafe fn next(this: *const Self) -> *const Self {
        // SAFETY: The function's contract.
        unsafe { (*this).next }
    }
}

/// Writes the `n`-th request of the chain at `first` (the first not posted) to `bad`.
///
/// # Safety
///
/// The chain holds more than `n` valid requests; `bad` is valid for a write.
unsafe fn report_bad<W: Linked>(first: *const W, n: usize, bad: *mut *const W) {
    let mut wr = first;
    for _ in 0..n {
        // SAFETY: One of the first `n` requests (the function's contract).
        wr = unsafe { W::next(wr) };
    }
    // SAFETY: The function's contract.
    unsafe { bad.write(wr) };
}

/// # Safety
///
/// Called by the RDMA core only, for a created kernel QP of ours, with a valid chain and `bad`
/// valid for a write.
unsafe extern "C" fn post_send<T: Driver>(
    qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_send_wr,
    bad: *mut *const bindings::ib_send_wr,
) -> c_int {
    // SAFETY: A created QP of ours (the function's contract).
    let (dev, q, qp_type, dev_ptr) = unsafe {
        (
            data::<T>((*qp).device),
            qp_data::<T::Qp>(qp),
            (*qp).qp_type,
            (*qp).device,
        )
    };
    let mut cur = wr;
    let mut chain = core::iter::from_fn(|| {
        if cur.is_null() {
            return None;
        }
        // SAFETY: A request of the core's chain (the function's contract), valid for the call.
        let (w, next) = unsafe { (send_wr::<T::Ah, T::Mr>(cur, qp_type, dev_ptr), (*cur).next) };
        cur = next;
        Some(w)
    });
    match dev.post_send(q, &mut chain) {
        Ok(()) => 0,
        Err((e, n)) => {
            // SAFETY: The chain holds the request that failed, past the `n` posted ones.
            unsafe { report_bad(wr, n, bad) };
            e.to_errno()
        }
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a created kernel QP of ours, with a valid chain and `bad`
/// valid for a write.
unsafe extern "C" fn post_recv<T: Driver>(
    qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_recv_wr,
    bad: *mut *const bindings::ib_recv_wr,
) -> c_int {
    // SAFETY: A created QP of ours (the function's contract).
    let (dev, q) = unsafe { (data::<T>((*qp).device), qp_data::<T::Qp>(qp)) };
    // SAFETY: The core's valid chain (the function's contract), for the call.
    let mut chain = unsafe { recv_chain(wr) };
    match dev.post_recv(q, &mut chain) {
        Ok(()) => 0,
        Err((e, n)) => {
            // SAFETY: The chain holds the request that failed, past the `n` posted ones.
            unsafe { report_bad(wr, n, bad) };
            e.to_errno()
        }
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a created kernel SRQ of ours, with a valid chain and `bad`
/// valid for a write.
unsafe extern "C" fn post_srq_recv<T: Driver>(
    srq: *mut bindings::ib_srq,
    wr: *const bindings::ib_recv_wr,
    bad: *mut *const bindings::ib_recv_wr,
) -> c_int {
    // SAFETY: A created SRQ of ours (the function's contract).
    let (dev, s) = unsafe { (data::<T>((*srq).device), IbSrq::<T::Srq>::data(srq)) };
    // SAFETY: The core's valid chain (the function's contract), for the call.
    let mut chain = unsafe { recv_chain(wr) };
    match dev.post_srq_recv(s, &mut chain) {
        Ok(()) => 0,
        Err((e, n)) => {
            // SAFETY: The chain holds the request that failed, past the `n` posted ones.
            unsafe { report_bad(wr, n, bad) };
            e.to_errno()
        }
    }
}

/// The receive requests of the chain at `wr`, read one at a time.
///
/// # Safety
///
/// `wr` is null or the first of a valid chain of receive requests, each valid (with its
/// scatter list) and unchanged for `'a`.
unsafe fn recv_chain<'a>(
    wr: *const bindings::ib_recv_wr,
) -> impl Iterator<Item = Result<RecvWr<'a>>> {
    let mut cur = wr;
    core::iter::from_fn(move || {
        if cur.is_null() {
            return None;
        }
        // SAFETY: A request of the chain (the function's contract).
        let w = unsafe { &*cur };
        cur = w.next;
        Some(
            // SAFETY: The request's list, valid as the request is.
            unsafe { sges(w.sg_list, w.num_sge) }.map(|sges| RecvWr {
                // SAFETY: As for a send request.
                wr_id: unsafe { w.__bindgen_anon_1.wr_id },
                sges,
            }),
        )
    })
}

/// # Safety
///
/// Called by the RDMA core only, for a created kernel CQ of ours, with `wc` valid for `n`
/// writes.
unsafe extern "C" fn poll_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    n: c_int,
    wc: *mut bindings::ib_wc,
) -> c_int {
    let Ok(n) = usize::try_from(n) else {
        return EINVAL.to_errno();
    };
    if n == 0 || wc.is_null() {
        return 0;
    }
    // SAFETY: A created CQ of ours; the core's array of `n` entries, ours to write for the call
    // (as `MaybeUninit`: it may hold anything).
    let (dev, c, out) = unsafe {
        (
            data::<T>((*cq).device),
            IbCq::<T::Cq>::data(cq),
            core::slice::from_raw_parts_mut(wc.cast::<MaybeUninit<bindings::ib_wc>>(), n),
        )
    };
    match dev.poll_cq(c, out) {
        Ok(got) => got as c_int,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a created kernel CQ of ours.
unsafe extern "C" fn req_notify_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    flags: bindings::ib_cq_notify_flags,
) -> c_int {
    // SAFETY: A created CQ of ours.
    let (dev, c) = unsafe { (data::<T>((*cq).device), IbCq::<T::Cq>::data(cq)) };
    let solicited = flags & bindings::ib_cq_notify_flags_IB_CQ_SOLICITED_MASK
        == bindings::ib_cq_notify_flags_IB_CQ_SOLICITED;
    let report = flags & bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS != 0;
    match dev.req_notify_cq(c, solicited, report) {
        Ok(missed) => c_int::from(missed),
        Err(e) => e.to_errno(),
    }
}
