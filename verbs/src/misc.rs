// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! errno and messages, the string helpers, the verbs a qhca object does not have, and the
//! functions that take no object (handed to libibverbs).

use core::ffi::{c_char, c_int, c_void, CStr};
use core::ptr::null_mut;
use std::collections::HashSet;
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::device::Ctx;
use crate::ffi::*;
use crate::real::forward;

/// Locks, ignoring poisoning: every guarded value here stays consistent across a panic
/// (there is none on these paths, and a verb must not start failing because one happened).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() = e };
}

fn debugging() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("QHCA_VERBS_DEBUG").is_some_and(|v| v != "0"))
}

/// One line on stderr, ignoring errors (`eprintln!` panics on a write error, and a panic in
/// an `extern "C"` function aborts the program).
fn say(msg: core::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "qhca-verbs: {msg}");
}

/// One line on stderr when `QHCA_VERBS_DEBUG` is set.
pub(crate) fn debug(msg: core::fmt::Arguments<'_>) {
    if debugging() {
        say(msg);
    }
}

/// The errno of a provider error (`EIO` if it has none).
pub(crate) fn errno(e: &qhca::Error) -> c_int {
    e.errno().map_or(libc::EIO, |e| e as c_int)
}

/// A verb returning an errno failed: says why (debug) and returns `ret`, with `errno` set.
pub(crate) fn fail<T>(verb: &str, e: &qhca::Error, ret: T) -> T {
    debug(format_args!("{verb}: {e}"));
    set_errno(errno(e));
    ret
}

/// A verb returning a pointer failed: NULL, with `errno` set.
pub(crate) fn fail_null<T>(verb: &str, e: &qhca::Error) -> *mut T {
    fail(verb, e, null_mut())
}

/// The errno of a failed verb that returns it.
pub(crate) fn fail_errno(verb: &str, e: &qhca::Error) -> c_int {
    fail(verb, e, 0);
    errno(e)
}

/// Says once per verb, on stderr, that qhca does not do it; returns `EOPNOTSUPP` (and sets
/// `errno` to it).
pub fn unsupported_once(verb: &str) -> c_int {
    static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    let first = lock(&SAID)
        .get_or_insert_with(HashSet::new)
        .insert(verb.to_owned());
    if first {
        say(format_args!(
            "{verb} is not supported on qhca devices (EOPNOTSUPP)"
        ));
    }
    set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

pub(crate) fn unsupported(verb: &str) -> c_int {
    unsupported_once(verb)
}

pub(crate) fn unsupported_null<T>(verb: &str) -> *mut T {
    unsupported_once(verb);
    null_mut()
}

macro_rules! cstrs {
    ($t:ty; $($v:ident => $s:literal),* $(,)?) => {
        |v: $t| -> &'static CStr {
            match v {
                $($v => $s,)*
                _ => c"unknown",
            }
        }
    };
}

/// `ibv_wc_status_str`'s text for `status` (rdma-core's words).
pub fn wc_status_str(status: u32) -> &'static CStr {
    let f = cstrs! {
        u32;
        IBV_WC_SUCCESS => c"success",
        IBV_WC_LOC_LEN_ERR => c"local length error",
        IBV_WC_LOC_QP_OP_ERR => c"local QP operation error",
        IBV_WC_LOC_EEC_OP_ERR => c"local EE context operation error",
        IBV_WC_LOC_PROT_ERR => c"local protection error",
        IBV_WC_WR_FLUSH_ERR => c"Work Request Flushed Error",
        IBV_WC_MW_BIND_ERR => c"memory management operation error",
        IBV_WC_BAD_RESP_ERR => c"bad response error",
        IBV_WC_LOC_ACCESS_ERR => c"local access error",
        IBV_WC_REM_INV_REQ_ERR => c"remote invalid request error",
        IBV_WC_REM_ACCESS_ERR => c"remote access error",
        IBV_WC_REM_OP_ERR => c"remote operation error",
        IBV_WC_RETRY_EXC_ERR => c"transport retry counter exceeded",
        IBV_WC_RNR_RETRY_EXC_ERR => c"RNR retry counter exceeded",
        IBV_WC_LOC_RDD_VIOL_ERR => c"local RDD violation error",
        IBV_WC_REM_INV_RD_REQ_ERR => c"remote invalid RD request",
        IBV_WC_REM_ABORT_ERR => c"aborted error",
        IBV_WC_INV_EECN_ERR => c"invalid EE context number",
        IBV_WC_INV_EEC_STATE_ERR => c"invalid EE context state",
        IBV_WC_FATAL_ERR => c"fatal error",
        IBV_WC_RESP_TIMEOUT_ERR => c"response timeout error",
        IBV_WC_GENERAL_ERR => c"general error",
        IBV_WC_TM_ERR => c"TM error",
        IBV_WC_TM_RNDV_INCOMPLETE => c"TM software rendezvous",
    };
    f(status)
}

#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
    wc_status_str(status).as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: ibv_event_type) -> *const c_char {
    let f = cstrs! {
        ibv_event_type;
        IBV_EVENT_CQ_ERR => c"CQ error",
        IBV_EVENT_QP_FATAL => c"local work queue catastrophic error",
        IBV_EVENT_QP_REQ_ERR => c"invalid request local work queue error",
        IBV_EVENT_QP_ACCESS_ERR => c"local access violation work queue error",
        IBV_EVENT_COMM_EST => c"communication established",
        IBV_EVENT_SQ_DRAINED => c"send queue drained",
        IBV_EVENT_PATH_MIG => c"path migrated",
        IBV_EVENT_PATH_MIG_ERR => c"path migration request error",
        IBV_EVENT_DEVICE_FATAL => c"local catastrophic error",
        IBV_EVENT_PORT_ACTIVE => c"port active",
        IBV_EVENT_PORT_ERR => c"port error",
        IBV_EVENT_LID_CHANGE => c"LID change",
        IBV_EVENT_PKEY_CHANGE => c"P_Key change",
        IBV_EVENT_SM_CHANGE => c"SM change",
        IBV_EVENT_SRQ_ERR => c"SRQ catastrophic error",
        IBV_EVENT_SRQ_LIMIT_REACHED => c"SRQ limit reached",
        IBV_EVENT_QP_LAST_WQE_REACHED => c"last WQE reached",
        IBV_EVENT_CLIENT_REREGISTER => c"client reregistration",
        IBV_EVENT_GID_CHANGE => c"GID table change",
        IBV_EVENT_WQ_FATAL => c"WQ fatal",
    };
    f(event).as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char {
    let f = cstrs! {
        ibv_node_type;
        IBV_NODE_CA => c"InfiniBand channel adapter",
        IBV_NODE_SWITCH => c"InfiniBand switch",
        IBV_NODE_ROUTER => c"InfiniBand router",
        IBV_NODE_RNIC => c"iWARP NIC",
        IBV_NODE_USNIC => c"usNIC",
        IBV_NODE_USNIC_UDP => c"usNIC UDP",
        IBV_NODE_UNSPECIFIED => c"unspecified",
    };
    f(node_type).as_ptr()
}

#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char {
    let f = cstrs! {
        ibv_port_state;
        IBV_PORT_NOP => c"no state change (NOP)",
        IBV_PORT_DOWN => c"down",
        IBV_PORT_INIT => c"init",
        IBV_PORT_ARMED => c"armed",
        IBV_PORT_ACTIVE => c"active",
        IBV_PORT_ACTIVE_DEFER => c"active defer",
    };
    f(port_state).as_ptr()
}

/// Functions that take no verbs object: libibverbs's own, passed through so that a program
/// finds every public `ibv_*` symbol in this library.
macro_rules! passthrough {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $fail:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            forward!($name($($arg),*) as fn($($ty),*) -> $ret, $fail)
        }
    )*};
}

passthrough! {
    fn ibv_fork_init() -> c_int = libc::ENOSYS;
    fn ibv_is_fork_initialized() -> ibv_fork_status = IBV_FORK_DISABLED;
    fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int = libc::ENOSYS;
    fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int = libc::ENOSYS;
    fn ibv_rate_to_mult(rate: ibv_rate) -> c_int = 0;
    fn mult_to_ibv_rate(mult: c_int) -> ibv_rate = IBV_RATE_MAX;
    fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int = 0;
    fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate = IBV_RATE_MAX;
    fn ibv_get_sysfs_path() -> *const c_char = core::ptr::null();
    fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> c_int = -1;
}

/// The verbs on objects a qhca context never has (SRQs, XRC domains, ...) and the ones it does
/// not do: `EOPNOTSUPP` for ours, libibverbs for the rest.
macro_rules! not_on_qhca {
    ($(fn $name:ident($obj:ident: *mut $ibv:ty $(, $arg:ident: $ty:ty)*) -> $ret:ty = $ours:expr, $fail:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($obj: *mut $ibv $(, $arg: $ty)*) -> $ret {
            if !$obj.is_null() {
                // SAFETY: the program passes a live object, whose first field is its context.
                let ctx = unsafe { *$obj.cast::<*mut ibv_context>() };
                // SAFETY: the context of a live object is live.
                if unsafe { Ctx::ours(ctx) }.is_some() {
                    return $ours(stringify!($name));
                }
            }
            forward!($name($obj $(, $arg)*) as fn(*mut $ibv $(, $ty)*) -> $ret, $fail)
        }
    )*};
}

/// `ibv_query_qp_data_in_order`'s answer for a qhca QP: 0, no ordering promised (what
/// rdma-core answers for a provider without the op; the result is flags, not an errno).
fn not_in_order(_verb: &str) -> c_int {
    0
}

not_on_qhca! {
    fn ibv_create_srq(pd: *mut ibv_pd, attr: *mut ibv_srq_init_attr) -> *mut ibv_srq = unsupported_null, null_mut();
    fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int = unsupported, libc::ENOSYS;
    fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int = unsupported, libc::ENOSYS;
    fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int = unsupported, libc::ENOSYS;
    fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int = unsupported, libc::ENOSYS;
    fn ibv_attach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int = unsupported, libc::ENOSYS;
    fn ibv_detach_mcast(qp: *mut ibv_qp, gid: *const ibv_gid, lid: u16) -> c_int = unsupported, libc::ENOSYS;
    fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int = unsupported, libc::ENOSYS;
    fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int = unsupported, libc::ENOSYS;
    fn ibv_query_qp_data_in_order(qp: *mut ibv_qp, op: ibv_wr_opcode, flags: u32) -> c_int = not_in_order, 0;
    fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int = unsupported, libc::ENOSYS;
    fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr = unsupported_null, null_mut();
    fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr = unsupported_null, null_mut();
}

/// As `not_on_qhca`, for verbs whose object is the context itself.
macro_rules! not_on_qhca_context {
    ($(fn $name:ident(context: *mut ibv_context $(, $arg:ident: $ty:ty)*) -> $ret:ty = $ours:expr, $fail:expr;)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(context: *mut ibv_context $(, $arg: $ty)*) -> $ret {
            // SAFETY: the program passes a live context.
            if unsafe { Ctx::ours(context) }.is_some() {
                return $ours(stringify!($name));
            }
            forward!($name(context $(, $arg)*) as fn(*mut ibv_context $(, $ty)*) -> $ret, $fail)
        }
    )*};
}

not_on_qhca_context! {
    fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd = unsupported_null, null_mut();
    fn ibv_import_dm(context: *mut ibv_context, dm_handle: u32) -> *mut ibv_dm = unsupported_null, null_mut();
    fn ibv_resolve_eth_l2_from_gid(context: *mut ibv_context, attr: *mut ibv_ah_attr, eth_mac: *mut u8, vid: *mut u16) -> c_int = unsupported, libc::ENOSYS;
}

/// `ibv_unimport_*` return nothing: for ours, say so and leave the object alone.
macro_rules! unimport {
    ($($name:ident($ibv:ty);)*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(obj: *mut $ibv) {
            if !obj.is_null() {
                // SAFETY: the program passes a live object, whose first field is its context.
                let ctx = unsafe { *obj.cast::<*mut ibv_context>() };
                // SAFETY: the context of a live object is live.
                if unsafe { Ctx::ours(ctx) }.is_some() {
                    unsupported(stringify!($name));
                    return;
                }
            }
            forward!($name(obj) as fn(*mut $ibv) -> (), ())
        }
    )*};
}

unimport! {
    ibv_unimport_pd(ibv_pd);
    ibv_unimport_mr(ibv_mr);
    ibv_unimport_dm(ibv_dm);
}

/// `ops.post_srq_recv`: a qhca context has no SRQ to post to.
pub(crate) unsafe extern "C" fn post_srq_recv_op(
    _srq: *mut ibv_srq,
    _wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    if !bad.is_null() {
        // SAFETY: the program passes room for the failed request's address.
        unsafe { *bad = _wr };
    }
    unsupported("ibv_post_srq_recv")
}

const _: () = {
    // The first field of each struct the macros above read `context` from.
    assert!(core::mem::offset_of!(ibv_srq, context) == 0);
    assert!(core::mem::offset_of!(ibv_cq, context) == 0);
    assert!(core::mem::offset_of!(ibv_qp, context) == 0);
    assert!(core::mem::offset_of!(ibv_mr, context) == 0);
    assert!(core::mem::offset_of!(ibv_pd, context) == 0);
    assert!(core::mem::offset_of!(ibv_dm, context) == 0);
};
