// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! What the provider calls in libibverbs: its private provider ABI (`IBVERBS_PRIVATE_34`,
//! rdma-core 44's `driver.h`, which Debian does not ship): the context set-up and the core's
//! commands (`ibv_cmd_*`), each of which sends one command to the kernel with the driver's data
//! (`struct qhca_ib_*` of `qhca-abi.h`) behind the core's.
//!
//! A command buffer is the core's request with its header (`struct ibv_<verb>`, from rdma-core's
//! `kern-abi.h`), then the driver's request; sizes are `struct ib_uverbs_cmd_hdr` (8 bytes) plus
//! `struct ib_uverbs_<verb>` from the kernel's `<rdma/ib_user_verbs.h>`.

use core::ffi::{c_int, c_void};

use qhca_verbs_abi::ffi::*;

/// `struct ibv_create_cq`: header, then `struct ib_uverbs_create_cq` (32 bytes).
pub(crate) const CREATE_CQ_CMD: usize = 8 + 32;
/// `struct ibv_create_cq_ex`: the extended header (`struct ex_hdr`: the header, then `struct
/// ib_uverbs_ex_cmd_hdr`, 16 bytes), then `struct ib_uverbs_ex_create_cq` (32 bytes).
pub(crate) const CREATE_CQ_EX_CMD: usize = 8 + 16 + 32;
/// `struct ibv_resize_cq`: header, then `struct ib_uverbs_resize_cq` (16 bytes).
pub(crate) const RESIZE_CQ_CMD: usize = 8 + 16;
/// `struct ibv_create_qp`: header, then `struct ib_uverbs_create_qp` (56 bytes).
pub(crate) const CREATE_QP_CMD: usize = 8 + 56;
/// `struct ibv_modify_qp`: header, then `struct ib_uverbs_modify_qp` (112 bytes).
pub(crate) const MODIFY_QP_CMD: usize = 8 + 112;
/// `struct ibv_query_qp`: header, then `struct ib_uverbs_query_qp` (16 bytes).
pub(crate) const QUERY_QP_CMD: usize = 8 + 16;
/// `struct ibv_reg_mr`: header, then `struct ib_uverbs_reg_mr` (40 bytes).
pub(crate) const REG_MR_CMD: usize = 8 + 40;
/// `struct ibv_rereg_mr`: header, then `struct ib_uverbs_rereg_mr` (48 bytes).
pub(crate) const REREG_MR_CMD: usize = 8 + 48;
/// `struct ibv_alloc_mw`: header, then `struct ib_uverbs_alloc_mw` (16 bytes).
pub(crate) const ALLOC_MW_CMD: usize = 8 + 16;
/// `struct ibv_create_srq`: header, then `struct ib_uverbs_create_srq` (32 bytes).
pub(crate) const CREATE_SRQ_CMD: usize = 8 + 32;
/// `struct ibv_modify_srq`: header, then `struct ib_uverbs_modify_srq` (16 bytes).
pub(crate) const MODIFY_SRQ_CMD: usize = 8 + 16;
/// `struct ibv_query_srq`: header, then `struct ib_uverbs_query_srq` (16 bytes).
pub(crate) const QUERY_SRQ_CMD: usize = 8 + 16;

/// `struct ib_uverbs_create_cq_resp`.
pub(crate) const CREATE_CQ_RESP: usize = 8;
/// `struct ib_uverbs_ex_create_cq_resp`: the core's response, then `comp_mask` and
/// `response_length`.
pub(crate) const CREATE_CQ_EX_RESP: usize = 8 + 4 + 4;
/// `struct ib_uverbs_resize_cq_resp`.
pub(crate) const RESIZE_CQ_RESP: usize = 8;
/// `struct ib_uverbs_create_qp_resp`.
pub(crate) const CREATE_QP_RESP: usize = 32;
/// `struct ib_uverbs_reg_mr_resp`.
pub(crate) const REG_MR_RESP: usize = 12;
/// `struct ib_uverbs_rereg_mr_resp`.
pub(crate) const REREG_MR_RESP: usize = 8;
/// `struct ib_uverbs_create_srq_resp`.
pub(crate) const CREATE_SRQ_RESP: usize = 16;

/// A command: the core's request (`CORE` bytes, header included), then the driver's `D`.
#[repr(C)]
pub(crate) struct Cmd<const CORE: usize, D> {
    core: [u8; CORE],
    pub(crate) drv: D,
}

impl<const CORE: usize, D> Cmd<CORE, D> {
    pub(crate) fn new(drv: D) -> Self {
        Cmd {
            core: [0; CORE],
            drv,
        }
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut c_void {
        core::ptr::from_mut(self).cast()
    }
}

/// A response: the core's (`CORE` bytes), then the driver's `D`.
#[repr(C)]
pub(crate) struct Resp<const CORE: usize, D> {
    pub(crate) core: [u8; CORE],
    pub(crate) drv: D,
}

impl<const CORE: usize, D: Default> Resp<CORE, D> {
    pub(crate) fn new() -> Self {
        Resp {
            core: [0; CORE],
            drv: D::default(),
        }
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut c_void {
        core::ptr::from_mut(self).cast()
    }
}

/// No driver data.
#[repr(C)]
#[derive(Default)]
pub(crate) struct NoData;

extern "C" {
    pub(crate) fn verbs_register_driver_34(ops: *const c_void);
    pub(crate) fn _verbs_init_and_alloc_context(
        device: *mut c_void,
        cmd_fd: c_int,
        alloc_size: usize,
        context_offset: *mut c_void,
        driver_id: u32,
    ) -> *mut c_void;
    pub(crate) fn verbs_uninit_context(context: *mut c_void);
    pub(crate) fn verbs_set_ops(vctx: *mut c_void, ops: *const c_void);
    pub(crate) fn ibv_cmd_get_context(
        context: *mut c_void,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_query_device_any(
        context: *mut ibv_context,
        input: *const c_void,
        attr: *mut c_void,
        attr_size: usize,
        resp: *mut c_void,
        resp_size: *mut usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_query_port(
        context: *mut ibv_context,
        port_num: u8,
        port_attr: *mut c_void,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_alloc_pd(
        context: *mut ibv_context,
        pd: *mut ibv_pd,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_dealloc_pd(pd: *mut ibv_pd) -> c_int;
    pub(crate) fn ibv_cmd_reg_mr(
        pd: *mut ibv_pd,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        vmr: *mut c_void,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    /// `vmr` is a `struct verbs_mr *`; `pd` is read only with `IBV_REREG_MR_CHANGE_PD`.
    pub(crate) fn ibv_cmd_rereg_mr(
        vmr: *mut c_void,
        flags: u32,
        addr: *mut c_void,
        length: usize,
        hca_va: u64,
        access: c_int,
        pd: *mut ibv_pd,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_dereg_mr(vmr: *mut c_void) -> c_int;
    pub(crate) fn ibv_cmd_advise_mr(
        pd: *mut ibv_pd,
        advice: ib_uverbs_advise_mr_advice,
        flags: u32,
        sg_list: *mut ibv_sge,
        num_sge: u32,
    ) -> c_int;
    pub(crate) fn ibv_cmd_alloc_mw(
        pd: *mut ibv_pd,
        kind: ibv_mw_type,
        mw: *mut ibv_mw,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_dealloc_mw(mw: *mut ibv_mw) -> c_int;
    pub(crate) fn ibv_cmd_create_cq(
        context: *mut ibv_context,
        cqe: c_int,
        channel: *mut ibv_comp_channel,
        comp_vector: c_int,
        cq: *mut ibv_cq,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    /// `cq` is a `struct verbs_cq *` (the union of `struct ibv_cq` and `struct ibv_cq_ex`).
    pub(crate) fn ibv_cmd_create_cq_ex(
        context: *mut ibv_context,
        cq_attr: *const ibv_cq_init_attr_ex,
        cq: *mut ibv_cq_ex,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
        cmd_flags: u32,
    ) -> c_int;
    pub(crate) fn ibv_cmd_resize_cq(
        cq: *mut ibv_cq,
        cqe: c_int,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_destroy_cq(cq: *mut ibv_cq) -> c_int;
    pub(crate) fn ibv_cmd_create_qp(
        pd: *mut ibv_pd,
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_init_attr,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    /// libibverbs's public `ibv_qp_to_qp_ex` (`qp` is a `struct verbs_qp *`): asked once where
    /// it reads the mask (see [`crate::verbs_qp_mask_offset`]).
    pub(crate) fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex;
    /// `qp` is a `struct verbs_qp *`; `cmd` starts with `struct ibv_create_qp` (the command of
    /// `ibv_cmd_create_qp`), `resp` with `struct ib_uverbs_create_qp_resp`.
    pub(crate) fn ibv_cmd_create_qp_ex(
        context: *mut ibv_context,
        qp: *mut c_void,
        attr_ex: *mut ibv_qp_init_attr_ex,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_modify_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_query_qp(
        qp: *mut ibv_qp,
        attr: *mut ibv_qp_attr,
        attr_mask: c_int,
        init_attr: *mut ibv_qp_init_attr,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_destroy_qp(qp: *mut ibv_qp) -> c_int;
    pub(crate) fn ibv_cmd_create_srq(
        pd: *mut ibv_pd,
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_init_attr,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_modify_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        attr_mask: c_int,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_query_srq(
        srq: *mut ibv_srq,
        attr: *mut ibv_srq_attr,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_destroy_srq(srq: *mut ibv_srq) -> c_int;
    pub(crate) fn ibv_cmd_create_ah(
        pd: *mut ibv_pd,
        ah: *mut ibv_ah,
        attr: *mut ibv_ah_attr,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    pub(crate) fn ibv_cmd_destroy_ah(ah: *mut ibv_ah) -> c_int;
}

/// Sets `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// The end of a create command that failed with `ret`: the provider's object at `p` goes (the
/// kernel never made one), `errno` says why, and the op returns NULL.
///
/// # Safety
///
/// `p` is `Box::into_raw` of a `T` that nothing else holds.
pub(crate) unsafe fn discard<T, R>(p: *mut T, ret: c_int) -> *mut R {
    // SAFETY: the caller's promise.
    drop(unsafe { Box::from_raw(p) });
    set_errno(ret);
    core::ptr::null_mut()
}

/// The end of a destroy command that answered `ret`: on success the kernel forgot the object,
/// and the provider's object at `p` goes too; on failure both stay.
///
/// # Safety
///
/// `p` is `Box::into_raw` of a `T` (libibverbs's object first), which the program does not use
/// after a successful destroy.
pub(crate) unsafe fn free_if_destroyed<T>(ret: c_int, p: *mut T) -> c_int {
    if ret == 0 {
        // SAFETY: the caller's promise.
        drop(unsafe { Box::from_raw(p) });
    }
    ret
}
