// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Devices and contexts: the merged device list, open/close, the query verbs and
//! asynchronous events.

use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};
use core::ptr::{self, null_mut};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use qhca::{AsyncEvent, DeviceAttr, DeviceInfo};

use crate::events::AsyncEvents;
use crate::ffi::*;
use crate::misc::{debug, fail, fail_null, lock, set_errno};
use crate::real::forward;

/// `enum ibv_gid_type_sysfs` (rdma-core's driver.h), what `ibv_query_gid_type` reports: every
/// GID of a qhca port is RoCE v2, and an empty entry reads as `IB_ROCE_V1`, as libibverbs
/// answers for one.
const GID_TYPE_SYSFS_IB_ROCE_V1: c_uint = 0;
const GID_TYPE_SYSFS_ROCE_V2: c_uint = 1;
/// The default P_Key, full membership.
const DEFAULT_PKEY: u16 = 0xffff;
/// `IBV_QPF_GRH_REQUIRED` is not set: an address vector without a GRH keeps an RC QP on its
/// port's GID 0, both ends on this device (as `ibv_rc_pingpong` without `-g` uses it).
const PORT_FLAGS: u8 = 0;
/// `enum ibv_port_attr.phys_state` 5: LinkUp; 3: Disabled (an Ethernet link that is down).
const PHYS_STATE_LINK_UP: u8 = 5;
const PHYS_STATE_DISABLED: u8 = 3;
/// `ibv_port_attr.active_speed` 32: EDR.
const SPEED_EDR: u8 = 32;
/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context.abi_compat` of a context inside a `verbs_context`.
const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// A qhca device in the list. Never freed: a program may keep `struct ibv_device` pointers
/// for as long as it likes, and a device that goes away is only left out of later lists.
#[repr(C)]
pub(crate) struct Dev {
    ibv: ibv_device,
    pub(crate) info: DeviceInfo,
}

/// Every qhca device seen so far, in the order first seen.
static DEVS: Mutex<Vec<&'static Dev>> = Mutex::new(Vec::new());

/// The lists `ibv_get_device_list` returned: ours (address) → the real library's (address, or
/// 0 if it had none), for `ibv_free_device_list`.
static LISTS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

fn copy_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

impl Dev {
    fn new(info: DeviceInfo) -> Dev {
        // SAFETY: `ibv_device` is plain C data (integers, arrays, nullable fn pointers), for
        // which all-zero is a valid value.
        let mut ibv: ibv_device = unsafe { core::mem::zeroed() };
        ibv.node_type = IBV_NODE_CA;
        ibv.transport_type = IBV_TRANSPORT_IB;
        copy_cstr(&mut ibv.name, &info.name);
        copy_cstr(&mut ibv.dev_name, &info.name);
        let sysfs = format!("{}/{}", qhca::SYSFS_MISC_DIR, info.name);
        copy_cstr(&mut ibv.dev_path, &sysfs);
        copy_cstr(&mut ibv.ibdev_path, &sysfs);
        Dev { ibv, info }
    }

    fn ibv(&'static self) -> *mut ibv_device {
        ptr::from_ref(&self.ibv).cast_mut()
    }

    /// Ours: the device behind `p`, if it is one of ours.
    pub(crate) fn ours(p: *const ibv_device) -> Option<&'static Dev> {
        lock(&DEVS).iter().copied().find(|d| ptr::eq(&d.ibv, p))
    }
}

/// The qhca devices present now, each with the same `Dev` as in earlier lists.
fn scan() -> Vec<&'static Dev> {
    // The driver's own nodes (`/dev/qhcaN`): the layer goes with them (issue 26, step 5).
    let found = qhca::misc_devices().unwrap_or_default();
    let mut devs = lock(&DEVS);
    found
        .into_iter()
        .map(|info| {
            if let Some(d) = devs.iter().find(|d| d.info.name == info.name) {
                return *d;
            }
            let d: &'static Dev = Box::leak(Box::new(Dev::new(info)));
            devs.push(d);
            d
        })
        .collect()
}

/// True if the real library's device `d` is a qhca device of the RDMA core (its PCI IDs, read
/// from its sysfs directory, are qhca's).
///
/// # Safety
///
/// `d` is a valid device of the real library.
unsafe fn is_qhca_ib_device(d: *mut ibv_device) -> bool {
    // SAFETY: the caller's promise; `ibdev_path` is a NUL-terminated array inside it.
    let path = unsafe { core::ffi::CStr::from_ptr((*d).ibdev_path.as_ptr()) };
    let Ok(path) = path.to_str() else {
        return false;
    };
    let id = |f: &str| std::fs::read_to_string(format!("{path}/device/{f}")).ok();
    id("vendor").as_deref().map(str::trim)
        == Some(&format!("{:#06x}", qhca_uapi::QHCA_PCI_VENDOR_ID))
        && id("device").as_deref().map(str::trim)
            == Some(&format!("{:#06x}", qhca_uapi::QHCA_PCI_DEVICE_ID))
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    let mut n: c_int = 0;
    let real = forward!(
        ibv_get_device_list(&mut n) as fn(*mut c_int) -> *mut *mut ibv_device,
        null_mut()
    );
    let mut list: Vec<*mut ibv_device> = Vec::new();
    if !real.is_null() {
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the real library returned a NULL-terminated array of `n` devices.
            let d = unsafe { *real.add(i) };
            if d.is_null() {
                break;
            }
            // SAFETY: a device of the real library's list, valid until the list is freed.
            if unsafe { is_qhca_ib_device(d) } {
                // The same hardware as one of ours, through its own provider (the RDMA core's
                // device): listed once, as ours, while this layer is preloaded.
                continue;
            }
            list.push(d);
        }
    }
    list.extend(scan().into_iter().map(Dev::ibv));
    let count = list.len();
    list.push(null_mut());
    let ours = Box::into_raw(list.into_boxed_slice()).cast::<*mut ibv_device>();
    lock(&LISTS).push((ours as usize, real as usize));
    if !num_devices.is_null() {
        // SAFETY: the caller passes NULL or a pointer to an int.
        unsafe { *num_devices = c_int::try_from(count).unwrap_or(c_int::MAX) };
    }
    ours
}

#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    let entry = {
        let mut lists = lock(&LISTS);
        let i = lists.iter().position(|&(o, _)| o == list as usize);
        i.map(|i| lists.swap_remove(i))
    };
    let Some((_, real)) = entry else {
        forward!(
            ibv_free_device_list(list) as fn(*mut *mut ibv_device) -> (),
            ()
        );
        return;
    };
    let mut len = 0;
    // SAFETY: `list` is one of ours: a boxed slice of pointers ending with the only NULL.
    while !unsafe { *list.add(len) }.is_null() {
        len += 1;
    }
    // SAFETY: the slice `ibv_get_device_list` gave up, `len + 1` pointers long; not used again.
    drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(list, len + 1)) });
    if real != 0 {
        let real = real as *mut *mut ibv_device;
        forward!(
            ibv_free_device_list(real) as fn(*mut *mut ibv_device) -> (),
            ()
        );
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    match Dev::ours(device) {
        Some(d) => d.ibv.name.as_ptr(),
        None => forward!(
            ibv_get_device_name(device) as fn(*mut ibv_device) -> *const c_char,
            ptr::null()
        ),
    }
}

/// The node GUID, as `ibv_get_device_guid` returns it (network order), from a short-lived
/// context (the device has no sysfs attribute for it).
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> u64 {
    match Dev::ours(device) {
        Some(d) => match d.info.open() {
            Ok(ctx) => ctx.attr().node_guid.to_be(),
            Err(e) => {
                debug(format_args!("ibv_get_device_guid({}): {e}", d.info.name));
                set_errno(e.errno().map_or(libc::EIO, |e| e as c_int));
                0
            }
        },
        None => forward!(ibv_get_device_guid(device) as fn(*mut ibv_device) -> u64, 0),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut ibv_device) -> c_int {
    match Dev::ours(device) {
        // Above the kernel's RDMA device indices, so that they do not meet in one program.
        Some(d) => c_int::try_from(0x4000 + d.info.index).unwrap_or(-1),
        None => forward!(
            ibv_get_device_index(device) as fn(*mut ibv_device) -> c_int,
            -1
        ),
    }
}

/// An open context. The program sees `v.context`, the last field of the `verbs_context`.
#[repr(C)]
pub(crate) struct Ctx {
    v: UnsafeCell<verbs_context>,
    pub(crate) dev: &'static Dev,
    pub(crate) ctx: Arc<qhca::Context>,
    pub(crate) attr: DeviceAttr,
    /// Objects of this context not destroyed yet: closing a context that still has some
    /// leaks it, so that using them stays safe (libibverbs leaves that undefined).
    live: AtomicUsize,
    /// QPs and CQs by number, for asynchronous events: the address of the `ibv_qp` / `ibv_cq`.
    qps: Mutex<HashMap<u32, usize>>,
    cqs: Mutex<HashMap<u32, usize>>,
    /// Events handed out by `ibv_get_async_event` and not acknowledged yet, per object address.
    unacked: Mutex<HashMap<usize, u32>>,
    acked: std::sync::Condvar,
    /// `async_fd` and the events taken from the driver but not handed out yet.
    events: AsyncEvents,
}

impl Ctx {
    /// Ours: the context behind `p`, if its device is one of ours.
    ///
    /// # Safety
    ///
    /// `p` is null or points to a live `struct ibv_context` (ours or the real library's).
    pub(crate) unsafe fn ours<'a>(p: *mut ibv_context) -> Option<&'a Ctx> {
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` points to a live `ibv_context` (the caller's promise).
        Dev::ours(unsafe { (*p).device })?;
        let off = offset_of!(Ctx, v) + offset_of!(verbs_context, context);
        // SAFETY: a context of one of our devices was made by `open` as the `context` field of
        // a `Ctx`'s `verbs_context`, so the `Ctx` starts `off` bytes before it; it lives until
        // `ibv_close_device` (and for ever if objects remain).
        Some(unsafe { &*p.cast::<u8>().sub(off).cast::<Ctx>() })
    }

    /// The `struct ibv_context` the program holds.
    pub(crate) fn ibv(&self) -> *mut ibv_context {
        // SAFETY: a field projection of our own live value; no reference is made.
        unsafe { &raw mut (*self.v.get()).context }
    }

    /// An object of this context was made.
    pub(crate) fn hold(&self) {
        self.live.fetch_add(1, Ordering::Relaxed);
    }

    /// An object of this context was destroyed.
    pub(crate) fn release(&self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn register_qp(&self, qpn: u32, qp: *mut ibv_qp) {
        lock(&self.qps).insert(qpn, qp as usize);
    }

    pub(crate) fn register_cq(&self, cqn: u32, cq: *mut ibv_cq) {
        lock(&self.cqs).insert(cqn, cq as usize);
    }

    /// Forgets a QP or CQ for asynchronous events, then waits until every event handed out
    /// for it is acknowledged (as libibverbs's destroy verbs do). Under the `unacked` lock,
    /// which `ibv_get_async_event` holds from its lookup to its count: once this has taken the
    /// object out, no event names it any more.
    pub(crate) fn unregister(&self, qpn: Option<u32>, cqn: Option<u32>, obj: usize) {
        let mut unacked = lock(&self.unacked);
        if let Some(n) = qpn {
            lock(&self.qps).remove(&n);
        }
        if let Some(n) = cqn {
            lock(&self.cqs).remove(&n);
        }
        while unacked.get(&obj).is_some_and(|&n| n > 0) {
            unacked = self.acked.wait(unacked).unwrap_or_else(|e| e.into_inner());
        }
        unacked.remove(&obj);
    }

    fn unacked(&self) -> MutexGuard<'_, HashMap<usize, u32>> {
        lock(&self.unacked)
    }

    /// After the driver destroyed QP `qpn` or CQ `cqn` (so it queues no more events for it):
    /// drops its queued asynchronous events, as uverbs does at a destroy, so that `async_fd` is
    /// readable only for events `ibv_get_async_event` returns (see `crate::events`).
    pub(crate) fn purge_events(&self, qpn: Option<u32>, cqn: Option<u32>) {
        self.events
            .purge(&mut || self.ctx.get_async_event(), |ev| match *ev {
                AsyncEvent::QpFatal { qpn: n } => Some(n) == qpn,
                AsyncEvent::CqErr { cqn: n } => Some(n) == cqn,
                AsyncEvent::DeviceFatal | AsyncEvent::Unknown { .. } => false,
            });
    }
}

/// The verbs that take a context only, in the `verbs_context` the program's inline functions
/// look into.
fn context_ops(v: &mut verbs_context) {
    v.query_port = Some(query_port_op);
    v.query_device_ex = Some(query_device_ex_op);
    v.advise_mr = Some(crate::mr::advise_mr_op);
    v.create_qp_ex = Some(crate::qp::create_qp_ex_op);
    v.sz = size_of::<verbs_context>();
    let ops = &mut v.context.ops;
    ops._compat_query_device = Some(ibv_query_device);
    ops.poll_cq = Some(crate::cq::poll_cq_op);
    ops.req_notify_cq = Some(crate::cq::req_notify_cq_op);
    ops.post_send = Some(crate::qp::post_send_op);
    ops.post_recv = Some(crate::qp::post_recv_op);
    ops.post_srq_recv = Some(crate::misc::post_srq_recv_op);
    ops.alloc_mw = Some(crate::mr::alloc_mw_op);
    ops.bind_mw = Some(crate::qp::bind_mw_op);
    ops.dealloc_mw = Some(crate::mr::dealloc_mw_op);
}

fn open(dev: &'static Dev) -> qhca::Result<*mut ibv_context> {
    let ctx = Arc::new(dev.info.open()?);
    // The doorbell page now, so that the first post makes no system call.
    ctx.doorbell()?;
    let attr = *ctx.attr();
    // SAFETY: plain C data (integers, pointers, nullable fn pointers, a pthread mutex whose
    // all-zero value is PTHREAD_MUTEX_INITIALIZER on Linux): all-zero is valid.
    let mut v: verbs_context = unsafe { core::mem::zeroed() };
    context_ops(&mut v);
    v.context.device = dev.ibv();
    // `async_fd` is pollable: `POLLIN` while an asynchronous event is queued (`crate::events`).
    let events = AsyncEvents::new(ctx.as_fd())?;
    v.context.cmd_fd = ctx.as_raw_fd();
    v.context.async_fd = events.fd();
    v.context.num_comp_vectors = 1;
    v.context.abi_compat = VERBS_ABI_IS_EXTENDED;
    let c = Box::new(Ctx {
        v: UnsafeCell::new(v),
        dev,
        ctx,
        attr,
        live: AtomicUsize::new(0),
        qps: Mutex::new(HashMap::new()),
        cqs: Mutex::new(HashMap::new()),
        unacked: Mutex::new(HashMap::new()),
        acked: std::sync::Condvar::new(),
        events,
    });
    Ok(Box::leak(c).ibv())
}

#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    let Some(dev) = Dev::ours(device) else {
        return forward!(
            ibv_open_device(device) as fn(*mut ibv_device) -> *mut ibv_context,
            null_mut()
        );
    };
    match open(dev) {
        Ok(c) => c,
        Err(e) => fail_null("ibv_open_device", &e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            ibv_close_device(context) as fn(*mut ibv_context) -> c_int,
            -1
        );
    };
    let live = ctx.live.load(Ordering::Relaxed);
    if live > 0 {
        debug(format_args!(
            "ibv_close_device({}): {live} objects not destroyed; the context stays allocated",
            ctx.dev.info.name
        ));
        return 0;
    }
    let p = ptr::from_ref(ctx).cast_mut();
    // SAFETY: `p` is the `Ctx` that `open` leaked, with no object left that refers to it;
    // the program does not use the context after closing it.
    drop(unsafe { Box::from_raw(p) });
    0
}

fn fw_ver(attr: &DeviceAttr, out: &mut [c_char]) {
    copy_cstr(out, &attr.fw_version_string());
}

fn clamp(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

/// `struct ibv_device_attr` of a device with attributes `a`.
pub(crate) fn device_attr(a: &DeviceAttr) -> ibv_device_attr {
    // SAFETY: plain C data; all-zero is valid.
    let mut d: ibv_device_attr = unsafe { core::mem::zeroed() };
    fw_ver(a, &mut d.fw_ver);
    d.node_guid = a.node_guid.to_be();
    d.sys_image_guid = a.node_guid.to_be();
    d.max_mr_size = a.max_mr_size;
    d.page_size_cap = a.page_size_cap;
    d.vendor_id = a.vendor_id;
    d.vendor_part_id = a.vendor_part_id;
    d.hw_ver = a.hw_ver;
    d.max_qp = clamp(a.max_qp);
    d.max_qp_wr = clamp(a.max_qp_wr);
    let mut caps = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_N_NOTIFY_CQ;
    if a.has_cap(qhca_uapi::CAP_MW) {
        caps |= IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
    }
    d.device_cap_flags = caps;
    d.max_sge = clamp(a.max_sge);
    d.max_sge_rd = clamp(a.max_sge);
    d.max_cq = clamp(a.max_cq);
    d.max_cqe = clamp(a.max_cqe);
    d.max_mr = clamp(a.max_mr);
    d.max_pd = clamp(a.max_pd);
    d.max_qp_rd_atom = c_int::from(a.max_qp_rd_atom);
    d.max_qp_init_rd_atom = c_int::from(a.max_qp_init_rd_atom);
    d.max_res_rd_atom = clamp(u32::from(a.max_qp_rd_atom).saturating_mul(a.max_qp));
    d.atomic_cap = IBV_ATOMIC_HCA;
    d.max_mw = clamp(a.max_mw);
    d.max_ah = clamp(a.max_ah);
    d.max_pkeys = 1;
    d.local_ca_ack_delay = 15;
    d.phys_port_cnt = 1;
    d
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    out: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            ibv_query_device(context, out) as fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
            libc::ENOSYS
        );
    };
    if out.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the program passes room for a `struct ibv_device_attr`.
    unsafe { out.write(device_attr(&ctx.attr)) };
    0
}

/// `verbs_context.query_device_ex`: what the inline `ibv_query_device_ex` calls. Fills the
/// first `attr_size` bytes (a program built against an older verbs.h passes fewer).
unsafe extern "C" fn query_device_ex_op(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: the inline function passes the context it found this op in: ours.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return libc::EINVAL;
    };
    // SAFETY: `input` is NULL or the program's input struct.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return libc::EINVAL;
    }
    if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
        return libc::EINVAL;
    }
    // SAFETY: plain C data; all-zero is valid.
    let mut ex: ibv_device_attr_ex = unsafe { core::mem::zeroed() };
    ex.orig_attr = device_attr(&ctx.attr);
    let odp = ctx.attr.odp_caps;
    ex.odp_caps.general_caps = odp.general_caps;
    ex.odp_caps.per_transport_caps.rc_odp_caps = odp.rc_odp_caps;
    ex.odp_caps.per_transport_caps.ud_odp_caps = odp.ud_odp_caps;
    ex.phys_port_cnt_ex = 1;
    ex.device_cap_flags_ex = u64::from(ex.orig_attr.device_cap_flags);
    let n = attr_size.min(size_of::<ibv_device_attr_ex>());
    // SAFETY: the program passes `attr_size` writable bytes at `attr`; we copy at most that
    // many from our value, and zero what it has beyond ours.
    unsafe {
        ptr::copy_nonoverlapping(ptr::from_ref(&ex).cast::<u8>(), attr.cast::<u8>(), n);
        ptr::write_bytes(attr.cast::<u8>().add(n), 0, attr_size - n);
    }
    0
}

/// Entries in the port's GID table: the device's ([`qhca::GID_TABLE_LEN`]), or GID 0 alone on
/// a device without a port (no `QHCA_CAP_PORT`).
fn gid_tbl_len(attr: &DeviceAttr) -> usize {
    if attr.has_port() {
        qhca::GID_TABLE_LEN
    } else {
        1
    }
}

/// The port's attributes: one Ethernet-like port, MTU 4096, the device's GID table
/// ([`gid_tbl_len`]), one P_Key; ACTIVE unless the device says its link is down (`down`).
pub(crate) fn port_attr(attr: &DeviceAttr, down: bool) -> ibv_port_attr {
    // SAFETY: plain C data; all-zero is valid.
    let mut p: ibv_port_attr = unsafe { core::mem::zeroed() };
    p.state = if down { IBV_PORT_DOWN } else { IBV_PORT_ACTIVE };
    p.max_mtu = IBV_MTU_4096;
    p.active_mtu = IBV_MTU_4096;
    p.gid_tbl_len = gid_tbl_len(attr) as c_int;
    p.max_msg_sz = 1 << 31;
    p.pkey_tbl_len = 1;
    p.max_vl_num = 1;
    p.active_width = 2; // 4X
    p.active_speed = SPEED_EDR;
    p.phys_state = if down {
        PHYS_STATE_DISABLED
    } else {
        PHYS_STATE_LINK_UP
    };
    p.link_layer = IBV_LINK_LAYER_ETHERNET as u8;
    p.flags = PORT_FLAGS;
    p
}

fn check_port(port_num: u8) -> Result<(), c_int> {
    if port_num == qhca::PORT_NUM {
        Ok(())
    } else {
        debug(format_args!(
            "port {port_num}: a qhca device has port 1 only"
        ));
        Err(libc::EINVAL)
    }
}

/// `verbs_context.query_port`: what the inline `ibv_query_port` calls. Fills the first
/// `port_attr_len` bytes.
unsafe extern "C" fn query_port_op(
    context: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
    port_attr_len: usize,
) -> c_int {
    // SAFETY: the inline function passes the context it found this op in: ours.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    if let Err(e) = check_port(port_num) {
        return e;
    }
    // The link's state is the device's (a netdev whose link is down); a port it cannot be
    // asked about is reported up, as before the port could be asked.
    let down = ctx.attr.has_port()
        && ctx
            .ctx
            .query_port()
            .is_ok_and(|p| p.state == qhca::PortState::Down);
    let p = port_attr(&ctx.attr, down);
    let n = port_attr_len.min(size_of::<ibv_port_attr>());
    // SAFETY: the program passes `port_attr_len` writable bytes at `attr`.
    unsafe {
        ptr::copy_nonoverlapping(ptr::from_ref(&p).cast::<u8>(), attr.cast::<u8>(), n);
        ptr::write_bytes(attr.cast::<u8>().add(n), 0, port_attr_len - n);
    }
    0
}

/// The exported `ibv_query_port`, which programs built against verbs.h of 2018 or older call
/// (newer ones call the op): its `struct _compat_ibv_port_attr` is the start of ours.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut _compat_ibv_port_attr,
) -> c_int {
    // SAFETY: the program passes a live context.
    if unsafe { Ctx::ours(context) }.is_none() {
        return forward!(
            ibv_query_port(context, port_num, port_attr)
                as fn(*mut ibv_context, u8, *mut _compat_ibv_port_attr) -> c_int,
            libc::ENOSYS
        );
    }
    // SAFETY: as the op, with the compat struct's size.
    unsafe {
        query_port_op(
            context,
            port_num,
            port_attr.cast(),
            size_of::<_compat_ibv_port_attr>(),
        )
    }
}

/// The port's GID table, by index: `None` for an empty entry. Read from the device at each
/// call (an administrator may change it at any time); GID 0 alone on a device without a port.
fn gid_table(ctx: &Ctx) -> Result<Vec<Option<qhca::Gid>>, c_int> {
    if !ctx.attr.has_port() {
        return Ok(vec![Some(ctx.attr.port_gid())]);
    }
    let port = ctx.ctx.query_port().map_err(|e| {
        debug(format_args!("GID table: {e}"));
        crate::misc::errno(&e)
    })?;
    let mut table = vec![None; gid_tbl_len(&ctx.attr)];
    for e in &port.gids {
        if let Some(slot) = table.get_mut(usize::from(e.index)) {
            *slot = Some(e.gid);
        }
    }
    Ok(table)
}

/// The GID at `index` of our port: `None` if that entry is empty, `EINVAL` beyond the table.
fn gid(ctx: &Ctx, port_num: u8, index: c_int) -> Result<Option<qhca::Gid>, c_int> {
    check_port(port_num)?;
    let table = gid_table(ctx)?;
    let slot = usize::try_from(index).ok().and_then(|i| table.get(i));
    match slot {
        Some(g) => Ok(*g),
        None => {
            debug(format_args!(
                "GID index {index}: the table has {} entries",
                table.len()
            ));
            Err(libc::EINVAL)
        }
    }
}

fn ibv_gid_of(g: qhca::Gid) -> ibv_gid {
    let mut out = ibv_gid::default();
    out.raw = g.raw;
    out
}

/// As libibverbs: an empty entry reads as the zero GID (and succeeds).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    out: *mut ibv_gid,
) -> c_int {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            ibv_query_gid(context, port_num, index, out)
                as fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
            -1
        );
    };
    match gid(ctx, port_num, index) {
        Ok(g) if !out.is_null() => {
            // SAFETY: the program passes room for a GID.
            unsafe { out.write(ibv_gid_of(g.unwrap_or_default())) };
            0
        }
        // ibv_query_gid returns -1 on error (rdma-core's own does).
        _ => -1,
    }
}

/// The table entry at `index`, RoCE v2 as every qhca GID is.
fn gid_entry(port_num: u32, index: u32, g: qhca::Gid) -> ibv_gid_entry {
    ibv_gid_entry {
        gid: ibv_gid_of(g),
        gid_index: index,
        port_num,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    }
}

/// What the inline `ibv_query_gid_ex` calls: `ENODATA` for an empty entry (as libibverbs).
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            _ibv_query_gid_ex(context, port_num, gid_index, entry, flags, entry_size)
                as fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int,
            libc::ENOSYS
        );
    };
    if flags != 0 || entry.is_null() || entry_size < size_of::<ibv_gid_entry>() {
        return libc::EINVAL;
    }
    let (Ok(port), Ok(index)) = (u8::try_from(port_num), c_int::try_from(gid_index)) else {
        return libc::EINVAL;
    };
    match gid(ctx, port, index) {
        Ok(Some(g)) => {
            // SAFETY: the program passes room for `entry_size` >= one entry.
            unsafe { entry.write(gid_entry(port_num, gid_index, g)) };
            0
        }
        Ok(None) => libc::ENODATA,
        Err(e) => e,
    }
}

/// What the inline `ibv_query_gid_table` calls: the valid entries of our one port, in index
/// order, `entry_size` bytes apart; `EINVAL` if there are more than `max_entries`.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            _ibv_query_gid_table(context, entries, max_entries, flags, entry_size)
                as fn(*mut ibv_context, *mut ibv_gid_entry, usize, u32, usize) -> isize,
            -(libc::ENOSYS as isize)
        );
    };
    if flags != 0 || entry_size < size_of::<ibv_gid_entry>() || entries.is_null() {
        return -(libc::EINVAL as isize);
    }
    let table = match gid_table(ctx) {
        Ok(t) => t,
        Err(e) => return -(e as isize),
    };
    let valid: Vec<_> = (0u32..)
        .zip(table)
        .filter_map(|(i, g)| Some(gid_entry(u32::from(qhca::PORT_NUM), i, g?)))
        .collect();
    if valid.len() > max_entries {
        return -(libc::EINVAL as isize);
    }
    for (n, e) in valid.iter().enumerate() {
        // SAFETY: the program passes room for `max_entries` entries `entry_size` bytes apart
        // (the inline function's contract), and `n < max_entries`; unaligned in case a larger
        // entry size is not a multiple of the alignment.
        unsafe {
            entries
                .cast::<u8>()
                .add(n * entry_size)
                .cast::<ibv_gid_entry>()
                .write_unaligned(*e)
        };
    }
    valid.len() as isize
}

/// libibverbs's private `ibv_query_gid_type` (ibv_devinfo uses it): RoCE v2, or `IB_ROCE_V1`
/// for an empty entry (as libibverbs answers for one).
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port_num: u8,
    index: c_uint,
    type_: *mut c_uint,
) -> c_int {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            ibv_query_gid_type(context, port_num, index, type_)
                as fn(*mut ibv_context, u8, c_uint, *mut c_uint) -> c_int,
            -1
        );
    };
    let Ok(index) = c_int::try_from(index) else {
        return -1;
    };
    if type_.is_null() {
        return -1;
    }
    let t = match gid(ctx, port_num, index) {
        Ok(Some(_)) => GID_TYPE_SYSFS_ROCE_V2,
        Ok(None) => GID_TYPE_SYSFS_IB_ROCE_V1,
        Err(_) => return -1,
    };
    // SAFETY: the program passes room for the enum.
    unsafe { *type_ = t };
    0
}

/// The index of `g` in the port's GID table (`ibv_find_gid_index` of libibverbs).
pub(crate) fn find_gid_index(ctx: &Ctx, g: qhca::Gid) -> Result<u8, c_int> {
    let table = gid_table(ctx)?;
    table
        .iter()
        .position(|e| *e == Some(g))
        .map(|i| i as u8)
        .ok_or_else(|| {
            debug(format_args!("GID {g} is not in the port's table"));
            libc::EINVAL
        })
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: the program passes a live context.
    if unsafe { Ctx::ours(context) }.is_none() {
        return forward!(
            ibv_query_pkey(context, port_num, index, pkey)
                as fn(*mut ibv_context, u8, c_int, *mut u16) -> c_int,
            -1
        );
    }
    if check_port(port_num).is_err() || index != 0 || pkey.is_null() {
        return -1;
    }
    // SAFETY: the program passes room for a P_Key (network order, as libibverbs returns it).
    unsafe { *pkey = DEFAULT_PKEY.to_be() };
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port_num: u8,
    pkey: u16,
) -> c_int {
    // SAFETY: the program passes a live context.
    if unsafe { Ctx::ours(context) }.is_none() {
        return forward!(
            ibv_get_pkey_index(context, port_num, pkey) as fn(*mut ibv_context, u8, u16) -> c_int,
            -1
        );
    }
    if check_port(port_num).is_ok() && u16::from_be(pkey) == DEFAULT_PKEY {
        0
    } else {
        set_errno(libc::ENOENT);
        -1
    }
}

/// The fd's `O_NONBLOCK`, which the program may set with `fcntl` (as on libibverbs's fds).
pub(crate) fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no pointer; a bad fd only returns -1.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// Fills `event` from ours; `None` if it names an object the program no longer has.
fn async_event(ctx: &Ctx, ev: AsyncEvent, event: &mut ibv_async_event) -> Option<usize> {
    match ev {
        AsyncEvent::QpFatal { qpn } => {
            let qp = *lock(&ctx.qps).get(&qpn)?;
            event.element.qp = qp as *mut ibv_qp;
            event.event_type = IBV_EVENT_QP_FATAL;
            Some(qp)
        }
        AsyncEvent::CqErr { cqn } => {
            let cq = *lock(&ctx.cqs).get(&cqn)?;
            event.element.cq = cq as *mut ibv_cq;
            event.event_type = IBV_EVENT_CQ_ERR;
            Some(cq)
        }
        AsyncEvent::DeviceFatal => {
            event.element.port_num = 1;
            event.event_type = IBV_EVENT_DEVICE_FATAL;
            Some(0)
        }
        AsyncEvent::Unknown { kind, element } => {
            debug(format_args!(
                "async event {kind} ({element:#x}): unknown, dropped"
            ));
            None
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            ibv_get_async_event(context, event)
                as fn(*mut ibv_context, *mut ibv_async_event) -> c_int,
            -1
        );
    };
    if event.is_null() {
        set_errno(libc::EINVAL);
        return -1;
    }
    let nonblock = nonblocking(ctx.events.fd());
    let got = ctx.events.get(
        nonblock,
        &mut || ctx.ctx.get_async_event(),
        &|| ctx.ctx.check(),
        |ev| {
            // SAFETY: plain C data; all-zero is valid.
            let mut out: ibv_async_event = unsafe { core::mem::zeroed() };
            // The lookup and the count under one lock (see `Ctx::unregister`), so that the
            // object cannot be destroyed in between.
            let mut unacked = ctx.unacked();
            let obj = async_event(ctx, ev, &mut out)?;
            if obj != 0 {
                *unacked.entry(obj).or_insert(0) += 1;
            }
            Some(out)
        },
    );
    match got {
        Ok(Some(out)) => {
            // SAFETY: the program passes room for an event.
            unsafe { event.write(out) };
            0
        }
        Ok(None) => {
            set_errno(libc::EAGAIN);
            -1
        }
        Err(e) => fail("ibv_get_async_event", &e, -1),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    if event.is_null() {
        return;
    }
    // SAFETY: the program passes an event `ibv_get_async_event` filled.
    let ev = unsafe { event.read() };
    // SAFETY: only for a CQ or QP event, the union member its type names (an SRQ, WQ, port or
    // device event reads none); the program acknowledges an event before it destroys the
    // event's object (ibv_ack_async_event(3)), so a non-NULL CQ or QP is live and its
    // `context` readable.
    let (obj, ctx_of) = unsafe {
        match ev.event_type {
            IBV_EVENT_CQ_ERR => (
                ev.element.cq as usize,
                (!ev.element.cq.is_null()).then(|| (*ev.element.cq).context),
            ),
            IBV_EVENT_QP_FATAL
            | IBV_EVENT_QP_REQ_ERR
            | IBV_EVENT_QP_ACCESS_ERR
            | IBV_EVENT_COMM_EST
            | IBV_EVENT_SQ_DRAINED
            | IBV_EVENT_PATH_MIG
            | IBV_EVENT_PATH_MIG_ERR
            | IBV_EVENT_QP_LAST_WQE_REACHED => (
                ev.element.qp as usize,
                (!ev.element.qp.is_null()).then(|| (*ev.element.qp).context),
            ),
            _ => (0, None),
        }
    };
    // SAFETY: the object of a live event is live (its destroy waits for this ack).
    let ours = ctx_of.and_then(|c| unsafe { Ctx::ours(c) });
    let Some(ctx) = ours else {
        // The real library's (SRQ and WQ events, whose objects we do not look at, included);
        // for a port or device event of ours it does nothing.
        forward!(
            ibv_ack_async_event(event) as fn(*mut ibv_async_event) -> (),
            ()
        );
        return;
    };
    let mut unacked = ctx.unacked();
    if let Some(n) = unacked.get_mut(&obj) {
        *n = n.saturating_sub(1);
    }
    drop(unacked);
    ctx.acked.notify_all();
}

#[no_mangle]
pub unsafe extern "C" fn ibv_import_device(cmd_fd: c_int) -> *mut ibv_context {
    forward!(
        ibv_import_device(cmd_fd) as fn(c_int) -> *mut ibv_context,
        null_mut()
    )
}
