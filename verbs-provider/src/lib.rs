// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `libqhca-rdmav34.so`: the libibverbs provider for qhca's `ib_device`, loaded by the
//! distribution's libibverbs (rdma-core 44, private ABI `IBVERBS_PRIVATE_34`) from
//! `/etc/libibverbs.d/qhca.driver`, matched by PCI ID.
//!
//! The control path is the core's commands (`ibv_cmd_*`, [`cmd`]) with qhca's driver data
//! (`struct qhca_ib_*` in `qhca-abi.h`); the data path is the process's own rings and the
//! context's doorbell page, with no system call: posting goes through the post path of
//! `qhca_verbs_abi::post` into the `qhca` crate's work queues, polling through its CQ consumer.
//!
//! - [`context`]: the device, contexts, `ibv_query_device(_ex)`, `ibv_query_port`;
//! - [`mem`]: protection domains, memory regions (pinned and on-demand, `ibv_advise_mr`,
//!   `ibv_rereg_mr`), memory windows;
//! - [`cq`]: completion queues, basic and extended (`ibv_create_cq_ex`, with the polling API of
//!   `struct ibv_cq_ex`); poll, arm; completion channels are libibverbs's;
//! - [`qp`]: RC and UD queue pairs (create, basic and extended: `ibv_create_qp_ex`; modify,
//!   query, destroy, post, `ibv_bind_mw`), with a receive queue of their own or on an SRQ;
//! - [`qp_ex`]: the work-request API of extended QPs (`ibv_wr_start`, `ibv_wr_*`,
//!   `ibv_wr_complete`), built into `ibv_send_wr`s and posted through the same post path;
//! - [`srq`]: shared receive queues (create, modify the limit, query, destroy, post);
//! - [`ah`]: address handles.
//!
//! Not yet: watched regions (`QHCA_IB_REG_MR_WATCHED` has no verbs call; the `qhca` crate will
//! ask for them), XRC and tag-matching SRQs, resizing an SRQ (a basic `ibv_create_srq_ex` is
//! libibverbs's `ibv_create_srq`), of extended QPs the create flags, TSO, RSS, XRC and the
//! `ATOMIC_WRITE` and `FLUSH` ops (see [`qp_ex`]), and of extended CQs, the completion timestamps
//! and the fields of features qhca lacks (see [`cq`]).
//!
//! Debian does not ship libibverbs's private header (`driver.h`): the few types this needs are
//! declared here from rdma-core 44's, with their sizes checked at compile time (the layouts are
//! the same from rdma-core 34 to 56: `docs/design-ib-device.md` §1.4).

use core::ffi::{c_char, c_void};
use core::mem::size_of;
use core::ptr;

use qhca_uapi::{QHCA_IB_UVERBS_ABI_VERSION, QHCA_PCI_DEVICE_ID, QHCA_PCI_VENDOR_ID};

mod ah;
mod cmd;
mod context;
mod cq;
mod mem;
mod qp;
mod qp_ex;
mod srq;

// ---- driver.h, declared (rdma-core 44) ------------------------------------------------------

/// `struct verbs_match_ent`.
#[repr(C)]
struct MatchEnt {
    driver_data: *const c_void,
    u: u64,
    vendor: u16,
    device: u16,
    kind: u8,
}
const _: () = assert!(size_of::<MatchEnt>() == 24);

/// `VERBS_MATCH_SENTINEL`, `VERBS_MATCH_PCI`.
const MATCH_SENTINEL: u8 = 0;
const MATCH_PCI: u8 = 1;

/// `struct verbs_qp`: the union of `struct ibv_qp` and `struct ibv_qp_ex` (which starts with
/// it), then libibverbs's mask, which says whether `ibv_qp_to_qp_ex` finds the `struct
/// ibv_qp_ex` ([`VERBS_QP_EX`]), then the XRC domain. Where the mask lies depends on the
/// libibverbs that loaded the provider: rdma-core 44's `struct ibv_qp_ex` ends at
/// `wr_atomic_write` (352 bytes, the mask at 352), later ones add `wr_flush` (the mask at 360),
/// and the rdma-core suite runs the provider in 56.1's. So the struct holds room for the larger
/// layout and the mask is written where [`verbs_qp_mask_offset`] found libibverbs reads it;
/// `ibv_cmd_create_qp_ex` writes the mask (and the XRC domain, which qhca refuses) within it.
#[repr(C)]
#[derive(Default)]
pub(crate) struct VerbsQp {
    pub(crate) qp_ex: qhca_verbs_abi::ffi::ibv_qp_ex,
    /// 44's mask, padding and XRC domain, or a later release's `wr_flush` (left NULL: qhca has
    /// no FLUSH), then its mask, padding and XRC domain.
    tail: [u32; 6],
}
const _: () = {
    use core::mem::offset_of;
    use qhca_verbs_abi::ffi::{ibv_qp, ibv_qp_ex};
    assert!(size_of::<ibv_qp>() == 160 && size_of::<ibv_qp_ex>() == 352);
    assert!(offset_of!(ibv_qp_ex, qp_base) == 0);
    assert!(offset_of!(VerbsQp, tail) == 352 && size_of::<VerbsQp>() == 376);
};

impl VerbsQp {
    /// The offsets libibverbs's mask may have: rdma-core 44's, then later releases'.
    const MASK_OFFSETS: [usize; 2] = [352, 360];

    /// Marks the QP extended where the loaded libibverbs looks ([`verbs_qp_mask_offset`]);
    /// false (nothing written) if that is not known.
    pub(crate) fn mark_ex(&mut self) -> bool {
        match verbs_qp_mask_offset() {
            Some(off) => {
                self.set_mask(off, self.mask(off) | VERBS_QP_EX);
                true
            }
            None => false,
        }
    }

    /// Whether the QP is marked extended where libibverbs looks.
    #[cfg(test)]
    pub(crate) fn is_ex(&self) -> bool {
        verbs_qp_mask_offset().is_some_and(|off| self.mask(off) & VERBS_QP_EX != 0)
    }

    /// The 32-bit word at byte `off` (one of [`Self::MASK_OFFSETS`]) of the struct.
    fn mask(&self, off: usize) -> u32 {
        self.tail[(off - 352) / 4]
    }

    fn set_mask(&mut self, off: usize, v: u32) {
        self.tail[(off - 352) / 4] = v;
    }
}

/// Where the libibverbs this process runs reads `struct verbs_qp`'s mask: found once by asking
/// its own `ibv_qp_to_qp_ex` about a struct marked at each candidate offset in turn; `None` if
/// neither answers (an unknown libibverbs: `create_qp_ex` then refuses extended QPs).
pub(crate) fn verbs_qp_mask_offset() -> Option<usize> {
    use std::sync::OnceLock;
    static OFFSET: OnceLock<Option<usize>> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        VerbsQp::MASK_OFFSETS.into_iter().find(|&off| {
            let mut probe = Box::new(VerbsQp::default());
            probe.set_mask(off, VERBS_QP_EX);
            let p: *mut VerbsQp = &mut *probe;
            // SAFETY: `ibv_qp_to_qp_ex` reads the mask word of a `struct verbs_qp` and returns
            // a pointer into it or NULL; `probe` is one, zeroed but for the word tried, with
            // room for the larger layout, live for the call. Nothing is dereferenced here.
            let got = unsafe { cmd::ibv_qp_to_qp_ex(p.cast()) };
            got == p.cast()
        })
    })
}

/// `VERBS_QP_EX` of `enum verbs_qp_mask`: the QP is an extended one.
pub(crate) const VERBS_QP_EX: u32 = 1 << 1;

/// `struct verbs_device_ops`.
#[repr(C)]
struct DeviceOps {
    name: *const c_char,
    match_min_abi_version: u32,
    match_max_abi_version: u32,
    match_table: *const MatchEnt,
    static_providers: *const *const DeviceOps,
    match_device: Option<unsafe extern "C" fn(*mut c_void) -> bool>,
    alloc_context:
        Option<unsafe extern "C" fn(*mut c_void, core::ffi::c_int, *mut c_void) -> *mut c_void>,
    import_context: Option<unsafe extern "C" fn(*mut c_void, core::ffi::c_int) -> *mut c_void>,
    alloc_device: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    uninit_device: Option<unsafe extern "C" fn(*mut c_void)>,
}
const _: () = assert!(size_of::<DeviceOps>() == 72);

/// `struct verbs_context_ops`: 76 function pointers, positional, in `driver.h`'s order (sorted
/// by name); these are the ones qhca sets.
const N_CONTEXT_OPS: usize = 76;
const OP_ADVISE_MR: usize = 0;
const OP_ALLOC_MW: usize = 2;
const OP_ALLOC_PD: usize = 5;
const OP_BIND_MW: usize = 10;
const OP_CREATE_AH: usize = 13;
const OP_CREATE_CQ: usize = 15;
const OP_CREATE_CQ_EX: usize = 16;
const OP_CREATE_QP: usize = 19;
const OP_CREATE_QP_EX: usize = 20;
const OP_CREATE_SRQ: usize = 22;
const OP_DEALLOC_MW: usize = 25;
const OP_DEALLOC_PD: usize = 26;
const OP_DEREG_MR: usize = 28;
const OP_DESTROY_AH: usize = 29;
const OP_DESTROY_CQ: usize = 31;
const OP_DESTROY_QP: usize = 34;
const OP_DESTROY_SRQ: usize = 36;
const OP_FREE_CONTEXT: usize = 39;
const OP_MODIFY_QP: usize = 47;
const OP_MODIFY_SRQ: usize = 49;
const OP_POLL_CQ: usize = 53;
const OP_POST_RECV: usize = 54;
const OP_POST_SEND: usize = 55;
const OP_POST_SRQ_RECV: usize = 57;
const OP_QUERY_DEVICE_EX: usize = 58;
const OP_QUERY_PORT: usize = 60;
const OP_QUERY_QP: usize = 61;
const OP_QUERY_SRQ: usize = 64;
const OP_REG_MR: usize = 68;
const OP_REQ_NOTIFY_CQ: usize = 69;
const OP_REREG_MR: usize = 70;
const OP_RESIZE_CQ: usize = 71;

/// `struct verbs_context_ops`, positional.
#[repr(C)]
struct ContextOps([*const c_void; N_CONTEXT_OPS]);

/// Statics that hold pointers: read-only, shared with libibverbs.
#[repr(transparent)]
struct Shared<T>(T);
// SAFETY: The wrapped tables are never written after the program starts; libibverbs only reads
// them.
unsafe impl<T> Sync for Shared<T> {}

// ---- registration ------------------------------------------------------------------------------

const fn context_ops() -> ContextOps {
    let mut t = [ptr::null::<c_void>(); N_CONTEXT_OPS];
    t[OP_ADVISE_MR] = mem::advise_mr as *const c_void;
    t[OP_ALLOC_MW] = mem::alloc_mw as *const c_void;
    t[OP_ALLOC_PD] = mem::alloc_pd as *const c_void;
    t[OP_BIND_MW] = qp::bind_mw as *const c_void;
    t[OP_CREATE_AH] = ah::create_ah as *const c_void;
    t[OP_CREATE_CQ] = cq::create_cq as *const c_void;
    t[OP_CREATE_CQ_EX] = cq::create_cq_ex as *const c_void;
    t[OP_CREATE_QP] = qp::create_qp as *const c_void;
    t[OP_CREATE_QP_EX] = qp::create_qp_ex as *const c_void;
    t[OP_CREATE_SRQ] = srq::create_srq as *const c_void;
    t[OP_DEALLOC_MW] = mem::dealloc_mw as *const c_void;
    t[OP_DEALLOC_PD] = mem::dealloc_pd as *const c_void;
    t[OP_DEREG_MR] = mem::dereg_mr as *const c_void;
    t[OP_DESTROY_AH] = ah::destroy_ah as *const c_void;
    t[OP_DESTROY_CQ] = cq::destroy_cq as *const c_void;
    t[OP_DESTROY_QP] = qp::destroy_qp as *const c_void;
    t[OP_DESTROY_SRQ] = srq::destroy_srq as *const c_void;
    t[OP_FREE_CONTEXT] = context::free_context as *const c_void;
    t[OP_MODIFY_QP] = qp::modify_qp as *const c_void;
    t[OP_MODIFY_SRQ] = srq::modify_srq as *const c_void;
    t[OP_POLL_CQ] = cq::poll_cq as *const c_void;
    t[OP_POST_RECV] = qp::post_recv as *const c_void;
    t[OP_POST_SEND] = qp::post_send as *const c_void;
    t[OP_POST_SRQ_RECV] = srq::post_srq_recv as *const c_void;
    t[OP_QUERY_DEVICE_EX] = context::query_device_ex as *const c_void;
    t[OP_QUERY_PORT] = context::query_port as *const c_void;
    t[OP_QUERY_QP] = qp::query_qp as *const c_void;
    t[OP_QUERY_SRQ] = srq::query_srq as *const c_void;
    t[OP_REG_MR] = mem::reg_mr as *const c_void;
    t[OP_REQ_NOTIFY_CQ] = cq::req_notify_cq as *const c_void;
    t[OP_REREG_MR] = mem::rereg_mr as *const c_void;
    t[OP_RESIZE_CQ] = cq::resize_cq as *const c_void;
    ContextOps(t)
}

static CONTEXT_OPS: Shared<ContextOps> = Shared(context_ops());

static MATCH_TABLE: Shared<[MatchEnt; 2]> = Shared([
    MatchEnt {
        driver_data: ptr::null(),
        u: 0,
        vendor: QHCA_PCI_VENDOR_ID as u16,
        device: QHCA_PCI_DEVICE_ID as u16,
        kind: MATCH_PCI,
    },
    MatchEnt {
        driver_data: ptr::null(),
        u: 0,
        vendor: 0,
        device: 0,
        kind: MATCH_SENTINEL,
    },
]);

static DEVICE_OPS: Shared<DeviceOps> = Shared(DeviceOps {
    name: c"qhca".as_ptr(),
    match_min_abi_version: QHCA_IB_UVERBS_ABI_VERSION,
    match_max_abi_version: QHCA_IB_UVERBS_ABI_VERSION,
    match_table: &MATCH_TABLE.0 as *const MatchEnt,
    static_providers: ptr::null(),
    match_device: None,
    alloc_context: Some(context::alloc_context),
    import_context: None,
    alloc_device: Some(context::alloc_device),
    uninit_device: Some(context::uninit_device),
});

/// `PROVIDER_DRIVER(qhca, qhca_dev_ops)`: registers with libibverbs when it loads this library.
extern "C" fn register() {
    // SAFETY: the table is static and complete; libibverbs keeps the pointer.
    unsafe { cmd::verbs_register_driver_34(ptr::from_ref(&DEVICE_OPS.0).cast()) };
}

#[used]
#[link_section = ".init_array"]
static REGISTER: extern "C" fn() = register;

#[cfg(test)]
mod tests {
    use super::*;

    /// `struct verbs_context_ops` of rdma-core 44's `driver.h`, member by member.
    const DRIVER_H_OPS: [&str; N_CONTEXT_OPS] = [
        "advise_mr",
        "alloc_dm",
        "alloc_mw",
        "alloc_null_mr",
        "alloc_parent_domain",
        "alloc_pd",
        "alloc_td",
        "async_event",
        "attach_counters_point_flow",
        "attach_mcast",
        "bind_mw",
        "close_xrcd",
        "cq_event",
        "create_ah",
        "create_counters",
        "create_cq",
        "create_cq_ex",
        "create_flow",
        "create_flow_action_esp",
        "create_qp",
        "create_qp_ex",
        "create_rwq_ind_table",
        "create_srq",
        "create_srq_ex",
        "create_wq",
        "dealloc_mw",
        "dealloc_pd",
        "dealloc_td",
        "dereg_mr",
        "destroy_ah",
        "destroy_counters",
        "destroy_cq",
        "destroy_flow",
        "destroy_flow_action",
        "destroy_qp",
        "destroy_rwq_ind_table",
        "destroy_srq",
        "destroy_wq",
        "detach_mcast",
        "free_context",
        "free_dm",
        "get_srq_num",
        "import_dm",
        "import_mr",
        "import_pd",
        "modify_cq",
        "modify_flow_action_esp",
        "modify_qp",
        "modify_qp_rate_limit",
        "modify_srq",
        "modify_wq",
        "open_qp",
        "open_xrcd",
        "poll_cq",
        "post_recv",
        "post_send",
        "post_srq_ops",
        "post_srq_recv",
        "query_device_ex",
        "query_ece",
        "query_port",
        "query_qp",
        "query_qp_data_in_order",
        "query_rt_values",
        "query_srq",
        "read_counters",
        "reg_dm_mr",
        "reg_dmabuf_mr",
        "reg_mr",
        "req_notify_cq",
        "rereg_mr",
        "resize_cq",
        "set_ece",
        "unimport_dm",
        "unimport_mr",
        "unimport_pd",
    ];

    /// Each slot this file sets is the op of that name in `driver.h`.
    #[test]
    fn op_slots_are_driver_hs() {
        for (slot, name) in [
            (OP_ADVISE_MR, "advise_mr"),
            (OP_ALLOC_MW, "alloc_mw"),
            (OP_ALLOC_PD, "alloc_pd"),
            (OP_BIND_MW, "bind_mw"),
            (OP_CREATE_AH, "create_ah"),
            (OP_CREATE_CQ, "create_cq"),
            (OP_CREATE_CQ_EX, "create_cq_ex"),
            (OP_CREATE_QP, "create_qp"),
            (OP_CREATE_QP_EX, "create_qp_ex"),
            (OP_CREATE_SRQ, "create_srq"),
            (OP_DEALLOC_MW, "dealloc_mw"),
            (OP_DEALLOC_PD, "dealloc_pd"),
            (OP_DEREG_MR, "dereg_mr"),
            (OP_DESTROY_AH, "destroy_ah"),
            (OP_DESTROY_CQ, "destroy_cq"),
            (OP_DESTROY_QP, "destroy_qp"),
            (OP_DESTROY_SRQ, "destroy_srq"),
            (OP_FREE_CONTEXT, "free_context"),
            (OP_MODIFY_QP, "modify_qp"),
            (OP_MODIFY_SRQ, "modify_srq"),
            (OP_POLL_CQ, "poll_cq"),
            (OP_POST_RECV, "post_recv"),
            (OP_POST_SEND, "post_send"),
            (OP_POST_SRQ_RECV, "post_srq_recv"),
            (OP_QUERY_DEVICE_EX, "query_device_ex"),
            (OP_QUERY_PORT, "query_port"),
            (OP_QUERY_QP, "query_qp"),
            (OP_QUERY_SRQ, "query_srq"),
            (OP_REG_MR, "reg_mr"),
            (OP_REQ_NOTIFY_CQ, "req_notify_cq"),
            (OP_REREG_MR, "rereg_mr"),
            (OP_RESIZE_CQ, "resize_cq"),
        ] {
            assert_eq!(DRIVER_H_OPS[slot], name);
        }
    }
}
