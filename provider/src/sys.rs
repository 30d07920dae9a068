// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The raw ioctls, declared once from the header's numbers. Only [`crate::context`] calls them.

use qhca_uapi::{qhca_ioc_query_device, QHCA_IOCTL_QUERY_DEVICE};

// `QHCA_IOCTL_QUERY_DEVICE`: qhca_uapi checks at compile time that the header's literal is
// `_IOWR(QHCA_IOC_MAGIC, QHCA_IOC_NR_QUERY_DEVICE, struct qhca_ioc_query_device)`.
nix::ioctl_readwrite_bad!(
    /// `ioctl(fd, QHCA_IOCTL_QUERY_DEVICE, data)`.
    ///
    /// # Safety
    ///
    /// `data` must be valid for reads and writes of one `qhca_ioc_query_device` for the duration
    /// of the call.
    query_device,
    QHCA_IOCTL_QUERY_DEVICE,
    qhca_ioc_query_device
);

use qhca_uapi::{
    qhca_ioc_advise_mr, qhca_ioc_async_event, qhca_ioc_create_cq, qhca_ioc_create_qp,
    qhca_ioc_handle, qhca_ioc_qp_attr, qhca_ioc_query_ctx, qhca_ioc_reg_mr, QHCA_IOCTL_ADVISE_MR,
    QHCA_IOCTL_ALLOC_PD, QHCA_IOCTL_CREATE_CQ, QHCA_IOCTL_CREATE_QP, QHCA_IOCTL_DEALLOC_PD,
    QHCA_IOCTL_DEREG_MR, QHCA_IOCTL_DESTROY_CQ, QHCA_IOCTL_DESTROY_QP, QHCA_IOCTL_GET_ASYNC_EVENT,
    QHCA_IOCTL_MODIFY_QP, QHCA_IOCTL_QUERY_CTX, QHCA_IOCTL_QUERY_QP, QHCA_IOCTL_REG_MR,
};
use qhca_uapi::{qhca_ioc_alloc_mw, QHCA_IOCTL_ALLOC_MW, QHCA_IOCTL_DEALLOC_MW};
use qhca_uapi::{
    qhca_ioc_create_ah, QHCA_IOCTL_CREATE_AH, QHCA_IOCTL_DESTROY_AH, QHCA_IOCTL_QUERY_CTX_V1,
};
use qhca_uapi::{
    qhca_ioc_query_port, qhca_ioc_set_gid, QHCA_IOCTL_CREATE_AH_V1, QHCA_IOCTL_QUERY_PORT,
    QHCA_IOCTL_SET_GID,
};

// The verbs ioctls. Each `# Safety` is the same: `data` must be valid for reads and writes of
// one value of the named struct for the duration of the call (the driver copies exactly
// `_IOC_SIZE` bytes each way, which qhca_uapi checks equals the struct's size).
macro_rules! verbs_ioctl {
    ($name:ident, $nr:expr, $ty:ty, $doc:literal) => {
        nix::ioctl_readwrite_bad!(
            #[doc = $doc]
            ///
            /// # Safety
            ///
            /// `data` must be valid for reads and writes of one
            #[doc = concat!("`", stringify!($ty), "`")]
            /// for the duration of the call.
            $name,
            $nr,
            $ty
        );
    };
}

verbs_ioctl!(
    alloc_pd,
    QHCA_IOCTL_ALLOC_PD,
    qhca_ioc_handle,
    "`QHCA_IOCTL_ALLOC_PD`."
);
verbs_ioctl!(
    dealloc_pd,
    QHCA_IOCTL_DEALLOC_PD,
    qhca_ioc_handle,
    "`QHCA_IOCTL_DEALLOC_PD`."
);
verbs_ioctl!(
    reg_mr,
    QHCA_IOCTL_REG_MR,
    qhca_ioc_reg_mr,
    "`QHCA_IOCTL_REG_MR`."
);
verbs_ioctl!(
    dereg_mr,
    QHCA_IOCTL_DEREG_MR,
    qhca_ioc_handle,
    "`QHCA_IOCTL_DEREG_MR`."
);
verbs_ioctl!(
    alloc_mw,
    QHCA_IOCTL_ALLOC_MW,
    qhca_ioc_alloc_mw,
    "`QHCA_IOCTL_ALLOC_MW`."
);
verbs_ioctl!(
    dealloc_mw,
    QHCA_IOCTL_DEALLOC_MW,
    qhca_ioc_handle,
    "`QHCA_IOCTL_DEALLOC_MW`."
);
verbs_ioctl!(
    create_cq,
    QHCA_IOCTL_CREATE_CQ,
    qhca_ioc_create_cq,
    "`QHCA_IOCTL_CREATE_CQ`."
);
verbs_ioctl!(
    destroy_cq,
    QHCA_IOCTL_DESTROY_CQ,
    qhca_ioc_handle,
    "`QHCA_IOCTL_DESTROY_CQ`."
);
verbs_ioctl!(
    create_qp,
    QHCA_IOCTL_CREATE_QP,
    qhca_ioc_create_qp,
    "`QHCA_IOCTL_CREATE_QP`."
);
verbs_ioctl!(
    modify_qp,
    QHCA_IOCTL_MODIFY_QP,
    qhca_ioc_qp_attr,
    "`QHCA_IOCTL_MODIFY_QP`."
);
verbs_ioctl!(
    query_qp,
    QHCA_IOCTL_QUERY_QP,
    qhca_ioc_qp_attr,
    "`QHCA_IOCTL_QUERY_QP`."
);
verbs_ioctl!(
    destroy_qp,
    QHCA_IOCTL_DESTROY_QP,
    qhca_ioc_handle,
    "`QHCA_IOCTL_DESTROY_QP`."
);
verbs_ioctl!(
    query_ctx,
    QHCA_IOCTL_QUERY_CTX,
    qhca_ioc_query_ctx,
    "`QHCA_IOCTL_QUERY_CTX`."
);

verbs_ioctl!(
    query_ctx_v1,
    QHCA_IOCTL_QUERY_CTX_V1,
    QueryCtxV1,
    "`QHCA_IOCTL_QUERY_CTX_V1`: QUERY_CTX as drivers before UD know it."
);
verbs_ioctl!(
    create_ah,
    QHCA_IOCTL_CREATE_AH,
    qhca_ioc_create_ah,
    "`QHCA_IOCTL_CREATE_AH`."
);
verbs_ioctl!(
    destroy_ah,
    QHCA_IOCTL_DESTROY_AH,
    qhca_ioc_handle,
    "`QHCA_IOCTL_DESTROY_AH`."
);

/// `struct qhca_ioc_query_ctx` as it was before UD ([`QHCA_IOCTL_QUERY_CTX_V1`]): the same
/// header, and the first eight counters of `struct qhca_ctx_stats` (the ones before
/// `ud_drop_qkey`). The header keeps only the number; this is the struct behind it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct QueryCtxV1 {
    pub(crate) size: u32,
    pub(crate) comp_mask: u32,
    pub(crate) rsvd: u64,
    pub(crate) stats: [u64; 8],
}

const _: () = {
    use core::mem::{offset_of, size_of};
    use qhca_uapi::{qhca_ctx_stats, qhca_ioc_query_ctx};
    assert!(size_of::<QueryCtxV1>() == qhca_uapi::ioctl::QUERY_CTX_V1_SIZE);
    assert!(offset_of!(QueryCtxV1, stats) == offset_of!(qhca_ioc_query_ctx, stats));
    // The eight counters V1 has are the first eight of today's, in the same order.
    assert!(offset_of!(qhca_ctx_stats, ud_drop_qkey) == size_of::<[u64; 8]>());
};

verbs_ioctl!(
    create_ah_v1,
    QHCA_IOCTL_CREATE_AH_V1,
    CreateAhV1,
    "`QHCA_IOCTL_CREATE_AH_V1`: CREATE_AH as drivers before the GID table know it."
);

/// `struct qhca_ah_attr` as it was before the GID table ([`QHCA_IOCTL_CREATE_AH_V1`]): today's
/// without `sgid_index` and the reserved bytes after it (the source is GID index 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AhAttrV1 {
    pub(crate) dgid: [u8; 16],
    pub(crate) flow_label: u32,
    pub(crate) traffic_class: u8,
    pub(crate) hop_limit: u8,
    pub(crate) sl: u8,
    pub(crate) port_num: u8,
}

impl From<&qhca_uapi::qhca_ah_attr> for AhAttrV1 {
    fn from(a: &qhca_uapi::qhca_ah_attr) -> AhAttrV1 {
        AhAttrV1 {
            dgid: a.dgid,
            flow_label: a.flow_label,
            traffic_class: a.traffic_class,
            hop_limit: a.hop_limit,
            sl: a.sl,
            port_num: a.port_num,
        }
    }
}

/// `struct qhca_ioc_create_ah` as it was before the GID table ([`QHCA_IOCTL_CREATE_AH_V1`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CreateAhV1 {
    pub(crate) size: u32,
    pub(crate) comp_mask: u32,
    pub(crate) pdn: u32,
    pub(crate) ah: u32,
    pub(crate) attr: AhAttrV1,
}

const _: () = {
    use core::mem::{offset_of, size_of};
    use qhca_uapi::qhca_ah_attr;
    assert!(size_of::<CreateAhV1>() == qhca_uapi::ioctl::CREATE_AH_V1_SIZE);
    assert!(offset_of!(CreateAhV1, attr) == offset_of!(qhca_ioc_create_ah, attr));
    // V1's fields are the first of today's, at the same offsets.
    assert!(offset_of!(AhAttrV1, flow_label) == offset_of!(qhca_ah_attr, flow_label));
    assert!(offset_of!(AhAttrV1, port_num) == offset_of!(qhca_ah_attr, port_num));
    assert!(size_of::<AhAttrV1>() == offset_of!(qhca_ah_attr, sgid_index));
};

verbs_ioctl!(
    query_port,
    QHCA_IOCTL_QUERY_PORT,
    qhca_ioc_query_port,
    "`QHCA_IOCTL_QUERY_PORT`."
);
verbs_ioctl!(
    set_gid,
    QHCA_IOCTL_SET_GID,
    qhca_ioc_set_gid,
    "`QHCA_IOCTL_SET_GID`."
);

verbs_ioctl!(
    get_async_event,
    QHCA_IOCTL_GET_ASYNC_EVENT,
    qhca_ioc_async_event,
    "`QHCA_IOCTL_GET_ASYNC_EVENT`."
);

verbs_ioctl!(
    advise_mr,
    QHCA_IOCTL_ADVISE_MR,
    qhca_ioc_advise_mr,
    "`QHCA_IOCTL_ADVISE_MR`."
);

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
    qhca_ioc_qp_attr,
    qhca_ioc_query_ctx,
    qhca_ioc_async_event,
    qhca_ioc_advise_mr,
    qhca_ioc_alloc_mw,
    qhca_ioc_create_ah,
    qhca_ioc_query_port,
    qhca_ioc_set_gid,
    QueryCtxV1,
    CreateAhV1
);

// qhca_uapi checks QUERY_DEVICE's number against its struct; the verbs numbers are checked here
// the same way, so a struct that grows without its number being updated does not compile.
macro_rules! check_nr {
    ($($nr:ident, $num:ident, $ty:ty;)*) => {$(
        const _: () = assert!(
            $nr == qhca_uapi::ioctl::iowr(
                qhca_uapi::QHCA_IOC_MAGIC,
                qhca_uapi::$num,
                core::mem::size_of::<$ty>()
            )
        );
    )*};
}
check_nr! {
    QHCA_IOCTL_ALLOC_PD, QHCA_IOC_NR_ALLOC_PD, qhca_ioc_handle;
    QHCA_IOCTL_DEALLOC_PD, QHCA_IOC_NR_DEALLOC_PD, qhca_ioc_handle;
    QHCA_IOCTL_REG_MR, QHCA_IOC_NR_REG_MR, qhca_ioc_reg_mr;
    QHCA_IOCTL_DEREG_MR, QHCA_IOC_NR_DEREG_MR, qhca_ioc_handle;
    QHCA_IOCTL_ALLOC_MW, QHCA_IOC_NR_ALLOC_MW, qhca_ioc_alloc_mw;
    QHCA_IOCTL_DEALLOC_MW, QHCA_IOC_NR_DEALLOC_MW, qhca_ioc_handle;
    QHCA_IOCTL_CREATE_CQ, QHCA_IOC_NR_CREATE_CQ, qhca_ioc_create_cq;
    QHCA_IOCTL_DESTROY_CQ, QHCA_IOC_NR_DESTROY_CQ, qhca_ioc_handle;
    QHCA_IOCTL_CREATE_QP, QHCA_IOC_NR_CREATE_QP, qhca_ioc_create_qp;
    QHCA_IOCTL_MODIFY_QP, QHCA_IOC_NR_MODIFY_QP, qhca_ioc_qp_attr;
    QHCA_IOCTL_QUERY_QP, QHCA_IOC_NR_QUERY_QP, qhca_ioc_qp_attr;
    QHCA_IOCTL_DESTROY_QP, QHCA_IOC_NR_DESTROY_QP, qhca_ioc_handle;
    QHCA_IOCTL_QUERY_CTX, QHCA_IOC_NR_QUERY_CTX, qhca_ioc_query_ctx;
    QHCA_IOCTL_GET_ASYNC_EVENT, QHCA_IOC_NR_GET_ASYNC_EVENT, qhca_ioc_async_event;
    QHCA_IOCTL_ADVISE_MR, QHCA_IOC_NR_ADVISE_MR, qhca_ioc_advise_mr;
    QHCA_IOCTL_CREATE_AH, QHCA_IOC_NR_CREATE_AH, qhca_ioc_create_ah;
    QHCA_IOCTL_DESTROY_AH, QHCA_IOC_NR_DESTROY_AH, qhca_ioc_handle;
    QHCA_IOCTL_QUERY_CTX_V1, QHCA_IOC_NR_QUERY_CTX, QueryCtxV1;
    QHCA_IOCTL_CREATE_AH_V1, QHCA_IOC_NR_CREATE_AH, CreateAhV1;
    QHCA_IOCTL_QUERY_PORT, QHCA_IOC_NR_QUERY_PORT, qhca_ioc_query_port;
    QHCA_IOCTL_SET_GID, QHCA_IOC_NR_SET_GID, qhca_ioc_set_gid;
}
