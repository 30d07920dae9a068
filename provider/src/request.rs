// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The request structs the control path takes ([`crate::control`]), built as this ABI version
//! sends them.

use qhca_uapi::{
    qhca_ioc_advise_mr, qhca_ioc_alloc_mw, qhca_ioc_async_event, qhca_ioc_create_ah,
    qhca_ioc_create_cq, qhca_ioc_create_qp, qhca_ioc_create_srq, qhca_ioc_handle, qhca_ioc_qp_attr,
    qhca_ioc_query_ctx, qhca_ioc_query_port, qhca_ioc_reg_mr,
};

/// A request struct as this ABI version sends it: `size` set, everything else zero.
pub(crate) trait Request: Default {
    fn request() -> Self;
}

macro_rules! request {
    ($($ty:ty),*) => {$(
        impl Request for $ty {
            fn request() -> Self {
                Self { size: core::mem::size_of::<$ty>() as u32, ..Default::default() }
            }
        }
    )*};
}
request!(
    qhca_ioc_handle,
    qhca_ioc_reg_mr,
    qhca_ioc_create_cq,
    qhca_ioc_create_qp,
    qhca_ioc_create_srq,
    qhca_ioc_qp_attr,
    qhca_ioc_query_ctx,
    qhca_ioc_async_event,
    qhca_ioc_advise_mr,
    qhca_ioc_alloc_mw,
    qhca_ioc_create_ah,
    qhca_ioc_query_port
);
