// SPDX-License-Identifier: GPL-2.0

//! The operations the core requires of every device (`ib_device_check_mandatory`) that only
//! kernel consumers use: polling and arming CQs, posting work requests, the DMA region. qhca has
//! no kernel verbs yet (the RoCE NIC issue brings them): each refuses with `EOPNOTSUPP`, as the
//! create operations do for kernel objects (a PD, CQ, QP or AH without a user context), and the
//! port does not claim the MAD and CM capabilities, so that the core's MAD and CM clients leave
//! it alone.

use core::ffi::c_int;
use kernel::{bindings, prelude::*};

pub(super) fn fill(ops: &mut bindings::ib_device_ops) {
    ops.poll_cq = Some(poll_cq);
    ops.req_notify_cq = Some(req_notify_cq);
    ops.post_send = Some(post_send);
    ops.post_recv = Some(post_recv);
    ops.get_dma_mr = Some(get_dma_mr);
}

fn unsupported() -> c_int {
    EOPNOTSUPP.to_errno()
}

extern "C" fn poll_cq(_cq: *mut bindings::ib_cq, _n: c_int, _wc: *mut bindings::ib_wc) -> c_int {
    unsupported()
}

extern "C" fn req_notify_cq(
    _cq: *mut bindings::ib_cq,
    _flags: bindings::ib_cq_notify_flags,
) -> c_int {
    unsupported()
}

/// # Safety
///
/// Called by the RDMA core only, with `bad` valid for a write.
unsafe extern "C" fn post_send(
    _qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_send_wr,
    bad: *mut *const bindings::ib_send_wr,
) -> c_int {
    // SAFETY: The core passes a valid place for the first request not posted.
    unsafe { bad.write(wr) };
    unsupported()
}

/// # Safety
///
/// Called by the RDMA core only, with `bad` valid for a write.
unsafe extern "C" fn post_recv(
    _qp: *mut bindings::ib_qp,
    wr: *const bindings::ib_recv_wr,
    bad: *mut *const bindings::ib_recv_wr,
) -> c_int {
    // SAFETY: As for `post_send`.
    unsafe { bad.write(wr) };
    unsupported()
}

extern "C" fn get_dma_mr(_pd: *mut bindings::ib_pd, _access: c_int) -> *mut bindings::ib_mr {
    EOPNOTSUPP.to_ptr()
}
