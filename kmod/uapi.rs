// SPDX-License-Identifier: GPL-2.0

//! The ABI shared with the device and user space, generated from `uapi/include/qhca-abi.h` (the
//! single source of truth) and quarantined here, plus the byte-level trait impls the kernel needs.

#[allow(
    dead_code,
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    unreachable_pub,
    clippy::all
)]
#[path = "../uapi/src/bindings.rs"]
mod bindings;

pub(crate) use bindings::*;

// SAFETY: These are `#[repr(C)]` structs of integers (and arrays of them) with explicit reserved
// fields and no padding (checked by uapi/tests/layout.rs and the `const` assertions below), so
// every bit pattern is valid and every byte is initialized.
unsafe impl kernel::transmute::FromBytes for qhca_cmd {}
// SAFETY: See above.
unsafe impl kernel::transmute::AsBytes for qhca_cmd {}
// SAFETY: See above.
unsafe impl kernel::transmute::FromBytes for qhca_eqe {}
// SAFETY: See above.
unsafe impl kernel::transmute::AsBytes for qhca_eqe {}
// SAFETY: See above.
unsafe impl kernel::transmute::FromBytes for qhca_device_attr {}
// SAFETY: See above.
unsafe impl kernel::transmute::AsBytes for qhca_device_attr {}

/// `FromBytes` + `AsBytes` for more of the ABI's plain structs (same argument as above).
macro_rules! plain_abi_structs {
    ($($t:ty),* $(,)?) => {$(
        // SAFETY: `#[repr(C)]` integers and arrays of them with explicit reserved fields and no
        // padding (uapi/tests/layout.rs and the C compile check), so every bit pattern is valid
        // and every byte is initialized.
        unsafe impl kernel::transmute::FromBytes for $t {}
        // SAFETY: See above.
        unsafe impl kernel::transmute::AsBytes for $t {}
    )*};
}

plain_abi_structs!(
    qhca_ioc_reg_mr,
    qhca_ioc_create_cq,
    qhca_ioc_create_qp,
    qhca_ioc_create_srq,
    qhca_ib_alloc_ucontext_resp,
    qhca_ib_alloc_pd_resp,
    qhca_ib_reg_mr,
    qhca_ib_create_cq,
    qhca_ib_create_cq_resp,
    qhca_ib_create_qp,
    qhca_ib_create_srq,
    qhca_ib_create_srq_resp,
    qhca_ib_create_ah_resp,
    qhca_qp_attr,
    qhca_ah_attr,
    qhca_ctx_stats,
    qhca_cmd_reg_mr,
    qhca_cmd_create_cq,
    qhca_cmd_create_qp,
    qhca_cmd_create_srq,
    qhca_cmd_create_ah,
    qhca_cmd_set_gid,
    qhca_port_attr,
);

const _: () = {
    assert!(core::mem::size_of::<qhca_cmd>() == 64);
    assert!(core::mem::size_of::<qhca_eqe>() == 32);
    assert!(core::mem::size_of::<qhca_device_attr>() == 128);
    assert!(core::mem::size_of::<qhca_ctx_stats>() == 96);
    assert!(core::mem::size_of::<qhca_ah_attr>() == 32);
    // It overlays `qhca_cmd.in[]`, which must hold all of it.
    assert!(core::mem::size_of::<qhca_cmd_create_ah>() == 40);
    assert!(core::mem::size_of::<qhca_cmd_create_srq>() == 40);
    assert!(
        core::mem::size_of::<qhca_cmd_create_ah>()
            <= core::mem::size_of::<qhca_cmd>() - core::mem::offset_of!(qhca_cmd, in_)
    );
};
