// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! ioctl numbers, computed as Linux's `_IOC` does (the asm-generic layout used by x86, arm64 and
//! riscv: `dir << 30 | size << 16 | type << 8 | nr`).
//!
//! The header spells `QHCA_IOCTL_*` out as literals so bindgen sees them; the `const` assertions
//! at the bottom recompute each from its struct, so a struct that grows without its number being
//! updated fails to compile in every crate that includes this file.

use super::bindings::{
    qhca_ah_attr, qhca_ctx_stats, qhca_ioc_create_ah, qhca_ioc_query_port, qhca_ioc_set_gid,
    QHCA_IOCTL_CREATE_AH, QHCA_IOCTL_CREATE_AH_V1, QHCA_IOCTL_DESTROY_AH, QHCA_IOCTL_QUERY_CTX_V1,
    QHCA_IOCTL_QUERY_PORT, QHCA_IOCTL_SET_GID, QHCA_IOC_NR_CREATE_AH, QHCA_IOC_NR_DESTROY_AH,
    QHCA_IOC_NR_QUERY_PORT, QHCA_IOC_NR_SET_GID,
};
use super::bindings::{
    qhca_ioc_advise_mr, qhca_ioc_alloc_mw, qhca_ioc_async_event, qhca_ioc_create_cq,
    qhca_ioc_create_qp, qhca_ioc_handle, qhca_ioc_qp_attr, qhca_ioc_query_ctx,
    qhca_ioc_query_device, qhca_ioc_reg_mr, QHCA_IOCTL_ADVISE_MR, QHCA_IOCTL_ALLOC_PD,
    QHCA_IOCTL_CREATE_CQ, QHCA_IOCTL_CREATE_QP, QHCA_IOCTL_DEALLOC_PD, QHCA_IOCTL_DEREG_MR,
    QHCA_IOCTL_DESTROY_CQ, QHCA_IOCTL_DESTROY_QP, QHCA_IOCTL_GET_ASYNC_EVENT, QHCA_IOCTL_MODIFY_QP,
    QHCA_IOCTL_QUERY_CTX, QHCA_IOCTL_QUERY_DEVICE, QHCA_IOCTL_QUERY_QP, QHCA_IOCTL_REG_MR,
    QHCA_IOC_MAGIC, QHCA_IOC_NR_ADVISE_MR, QHCA_IOC_NR_ALLOC_PD, QHCA_IOC_NR_CREATE_CQ,
    QHCA_IOC_NR_CREATE_QP, QHCA_IOC_NR_DEALLOC_PD, QHCA_IOC_NR_DEREG_MR, QHCA_IOC_NR_DESTROY_CQ,
    QHCA_IOC_NR_DESTROY_QP, QHCA_IOC_NR_GET_ASYNC_EVENT, QHCA_IOC_NR_MODIFY_QP,
    QHCA_IOC_NR_QUERY_CTX, QHCA_IOC_NR_QUERY_DEVICE, QHCA_IOC_NR_QUERY_QP, QHCA_IOC_NR_REG_MR,
};
use super::bindings::{
    QHCA_IOCTL_ALLOC_MW, QHCA_IOCTL_DEALLOC_MW, QHCA_IOC_NR_ALLOC_MW, QHCA_IOC_NR_DEALLOC_MW,
};

/// Bits of the command number.
pub const IOC_NRBITS: u32 = 8;
/// Bits of the type (magic).
pub const IOC_TYPEBITS: u32 = 8;
/// Bits of the argument size.
pub const IOC_SIZEBITS: u32 = 14;
/// Bits of the direction.
pub const IOC_DIRBITS: u32 = 2;

/// Shift of the command number.
pub const IOC_NRSHIFT: u32 = 0;
/// Shift of the type (magic).
pub const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
/// Shift of the argument size.
pub const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
/// Shift of the direction.
pub const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;

/// No data transfer.
pub const IOC_NONE: u32 = 0;
/// User space writes, the kernel reads (`_IOW`).
pub const IOC_WRITE: u32 = 1;
/// The kernel writes, user space reads (`_IOR`).
pub const IOC_READ: u32 = 2;

/// `_IOC(dir, type, nr, size)`. Panics (at compile time when used in a `const`) if a field does
/// not fit.
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> u32 {
    assert!(dir < (1 << IOC_DIRBITS), "ioctl dir does not fit");
    assert!(ty < (1 << IOC_TYPEBITS), "ioctl type does not fit");
    assert!(nr < (1 << IOC_NRBITS), "ioctl nr does not fit");
    assert!(size < (1 << IOC_SIZEBITS), "ioctl size does not fit");
    (dir << IOC_DIRSHIFT)
        | ((size as u32) << IOC_SIZESHIFT)
        | (ty << IOC_TYPESHIFT)
        | (nr << IOC_NRSHIFT)
}

/// `_IOWR(type, nr, size)`: the argument is copied in and back out.
pub const fn iowr(ty: u32, nr: u32, size: usize) -> u32 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, size)
}

/// `_IOC_DIR(cmd)`.
pub const fn ioc_dir(cmd: u32) -> u32 {
    (cmd >> IOC_DIRSHIFT) & ((1 << IOC_DIRBITS) - 1)
}

/// `_IOC_TYPE(cmd)`.
pub const fn ioc_type(cmd: u32) -> u32 {
    (cmd >> IOC_TYPESHIFT) & ((1 << IOC_TYPEBITS) - 1)
}

/// `_IOC_NR(cmd)`.
pub const fn ioc_nr(cmd: u32) -> u32 {
    (cmd >> IOC_NRSHIFT) & ((1 << IOC_NRBITS) - 1)
}

/// `_IOC_SIZE(cmd)`.
pub const fn ioc_size(cmd: u32) -> u32 {
    (cmd >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)
}

/// Asserts at compile time that each ioctl number is `_IOWR` of its argument struct.
macro_rules! check_iowr {
    ($($cmd:ident = $nr:ident, $ty:ty;)*) => {
        $(const _: () = assert!($cmd == iowr(QHCA_IOC_MAGIC, $nr, core::mem::size_of::<$ty>()));)*
    };
}

check_iowr! {
    QHCA_IOCTL_QUERY_DEVICE = QHCA_IOC_NR_QUERY_DEVICE, qhca_ioc_query_device;
    QHCA_IOCTL_ALLOC_PD = QHCA_IOC_NR_ALLOC_PD, qhca_ioc_handle;
    QHCA_IOCTL_DEALLOC_PD = QHCA_IOC_NR_DEALLOC_PD, qhca_ioc_handle;
    QHCA_IOCTL_REG_MR = QHCA_IOC_NR_REG_MR, qhca_ioc_reg_mr;
    QHCA_IOCTL_DEREG_MR = QHCA_IOC_NR_DEREG_MR, qhca_ioc_handle;
    QHCA_IOCTL_CREATE_CQ = QHCA_IOC_NR_CREATE_CQ, qhca_ioc_create_cq;
    QHCA_IOCTL_DESTROY_CQ = QHCA_IOC_NR_DESTROY_CQ, qhca_ioc_handle;
    QHCA_IOCTL_CREATE_QP = QHCA_IOC_NR_CREATE_QP, qhca_ioc_create_qp;
    QHCA_IOCTL_MODIFY_QP = QHCA_IOC_NR_MODIFY_QP, qhca_ioc_qp_attr;
    QHCA_IOCTL_QUERY_QP = QHCA_IOC_NR_QUERY_QP, qhca_ioc_qp_attr;
    QHCA_IOCTL_DESTROY_QP = QHCA_IOC_NR_DESTROY_QP, qhca_ioc_handle;
    QHCA_IOCTL_QUERY_CTX = QHCA_IOC_NR_QUERY_CTX, qhca_ioc_query_ctx;
    QHCA_IOCTL_GET_ASYNC_EVENT = QHCA_IOC_NR_GET_ASYNC_EVENT, qhca_ioc_async_event;
    QHCA_IOCTL_ADVISE_MR = QHCA_IOC_NR_ADVISE_MR, qhca_ioc_advise_mr;
    QHCA_IOCTL_ALLOC_MW = QHCA_IOC_NR_ALLOC_MW, qhca_ioc_alloc_mw;
    QHCA_IOCTL_DEALLOC_MW = QHCA_IOC_NR_DEALLOC_MW, qhca_ioc_handle;
    QHCA_IOCTL_CREATE_AH = QHCA_IOC_NR_CREATE_AH, qhca_ioc_create_ah;
    QHCA_IOCTL_DESTROY_AH = QHCA_IOC_NR_DESTROY_AH, qhca_ioc_handle;
    QHCA_IOCTL_QUERY_PORT = QHCA_IOC_NR_QUERY_PORT, qhca_ioc_query_port;
    QHCA_IOCTL_SET_GID = QHCA_IOC_NR_SET_GID, qhca_ioc_set_gid;
}

/// Size of the argument of [`QHCA_IOCTL_CREATE_AH_V1`]: `struct qhca_ioc_create_ah` as it was
/// before the address vector had `sgid_index` (its `attr` 8 bytes shorter).
pub const CREATE_AH_V1_SIZE: usize = core::mem::size_of::<qhca_ioc_create_ah>() - AH_ATTR_GREW_BY;

/// What `struct qhca_ah_attr` grew by since [`QHCA_IOCTL_CREATE_AH_V1`]: `sgid_index` and
/// reserved bytes, which the old struct's program leaves out (they read as 0).
const AH_ATTR_GREW_BY: usize = 8;

const _: () = assert!(
    QHCA_IOCTL_CREATE_AH_V1 == iowr(QHCA_IOC_MAGIC, QHCA_IOC_NR_CREATE_AH, CREATE_AH_V1_SIZE)
);
const _: () = assert!(core::mem::size_of::<qhca_ah_attr>() - AH_ATTR_GREW_BY == 24);

/// Size of the argument of [`QHCA_IOCTL_QUERY_CTX_V1`]: `struct qhca_ioc_query_ctx` as it was
/// before UD, whose stats were the first 64 bytes of today's `struct qhca_ctx_stats`.
pub const QUERY_CTX_V1_SIZE: usize = core::mem::size_of::<qhca_ioc_query_ctx>() - V1_STATS_GREW_BY;

/// What `struct qhca_ctx_stats` grew by since [`QHCA_IOCTL_QUERY_CTX_V1`]: four `ud_drop_*`
/// counters.
const V1_STATS_GREW_BY: usize = 4 * core::mem::size_of::<u64>();

// The old number stays `_IOWR` of the old size, with the same nr as today's QUERY_CTX.
const _: () = assert!(
    QHCA_IOCTL_QUERY_CTX_V1 == iowr(QHCA_IOC_MAGIC, QHCA_IOC_NR_QUERY_CTX, QUERY_CTX_V1_SIZE)
);
const _: () = assert!(core::mem::size_of::<qhca_ctx_stats>() - V1_STATS_GREW_BY == 64);
