// SPDX-License-Identifier: GPL-2.0

//! The rest of the operations the core requires of every device (`ib_device_check_mandatory`):
//! CQs, QPs and MRs. Through the core they do not exist yet, for kernel consumers or user
//! contexts (which still make them on `/dev/qhcaN`): each create refuses with `EOPNOTSUPP` (a
//! kernel PD, one without a user context, is refused by [`super::pd`]), and the port does not claim
//! the MAD and CM capabilities, so that the core's MAD and CM clients leave it alone. The destroy
//! operations are never reached: the core destroys only what a create made.

use core::ffi::c_int;
use kernel::{bindings, prelude::*};

pub(super) fn fill(ops: &mut bindings::ib_device_ops) {
    ops.create_cq = Some(create_cq);
    ops.destroy_cq = Some(destroy_cq);
    ops.poll_cq = Some(poll_cq);
    ops.req_notify_cq = Some(req_notify_cq);
    ops.create_qp = Some(create_qp);
    ops.modify_qp = Some(modify_qp);
    ops.destroy_qp = Some(destroy_qp);
    ops.post_send = Some(post_send);
    ops.post_recv = Some(post_recv);
    ops.get_dma_mr = Some(get_dma_mr);
    ops.reg_user_mr = Some(reg_user_mr);
    ops.dereg_mr = Some(dereg_mr);
    // The core allocates these objects itself, this many bytes each, before calling the
    // create operation (which then refuses).
    ops.size_ib_cq = core::mem::size_of::<bindings::ib_cq>();
    ops.size_ib_qp = core::mem::size_of::<bindings::ib_qp>();
}

fn unsupported() -> c_int {
    EOPNOTSUPP.to_errno()
}

extern "C" fn create_cq(
    _cq: *mut bindings::ib_cq,
    _attr: *const bindings::ib_cq_init_attr,
    _attrs: *mut bindings::uverbs_attr_bundle,
) -> c_int {
    unsupported()
}

extern "C" fn destroy_cq(_cq: *mut bindings::ib_cq, _u: *mut bindings::ib_udata) -> c_int {
    0
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

extern "C" fn create_qp(
    _qp: *mut bindings::ib_qp,
    _attr: *mut bindings::ib_qp_init_attr,
    _u: *mut bindings::ib_udata,
) -> c_int {
    unsupported()
}

extern "C" fn modify_qp(
    _qp: *mut bindings::ib_qp,
    _attr: *mut bindings::ib_qp_attr,
    _mask: c_int,
    _u: *mut bindings::ib_udata,
) -> c_int {
    unsupported()
}

extern "C" fn destroy_qp(_qp: *mut bindings::ib_qp, _u: *mut bindings::ib_udata) -> c_int {
    0
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

extern "C" fn reg_user_mr(
    _pd: *mut bindings::ib_pd,
    _start: u64,
    _length: u64,
    _iova: u64,
    _access: c_int,
    _dmah: *mut bindings::ib_dmah,
    _u: *mut bindings::ib_udata,
) -> *mut bindings::ib_mr {
    EOPNOTSUPP.to_ptr()
}

extern "C" fn dereg_mr(_mr: *mut bindings::ib_mr, _u: *mut bindings::ib_udata) -> c_int {
    0
}
