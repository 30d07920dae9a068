// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Queue pairs: create, modify, query, destroy, and the posting ops the program's inline
//! `ibv_post_send` / `ibv_post_recv` call (the provider's post: ring memory and one doorbell
//! store per batch, no system call).

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint};
use core::ptr::{self, null_mut};
use std::sync::Mutex;

use qhca::{QpAttr, QpCaps, QpState, QpType};

use crate::access::{access_from_ibv, access_to_ibv};
use crate::ah::Ah;
use crate::cq::Cq;
use crate::device::Ctx;
use crate::ffi::*;
use crate::misc::{debug, fail_errno, fail_null, lock, set_errno, unsupported, unsupported_null};
use crate::mr::{Mr, Mw, Pd};
use crate::obj::{impl_obj, Obj};
use crate::post::{Objects, Posting};
use crate::real::forward;

/// A queue pair.
#[repr(C)]
pub(crate) struct Qp {
    ibv: UnsafeCell<ibv_qp>,
    posting: Mutex<Posting<qhca::Qp>>,
    sig_all: bool,
    cap: ibv_qp_cap,
}
impl_obj!(Qp, ibv_qp);

fn ibv_state(s: QpState) -> ibv_qp_state {
    match s {
        QpState::Reset => IBV_QPS_RESET,
        QpState::Init => IBV_QPS_INIT,
        QpState::Rtr => IBV_QPS_RTR,
        QpState::Rts => IBV_QPS_RTS,
        QpState::Err | QpState::Unknown(_) => IBV_QPS_ERR,
    }
}

fn qhca_state(s: ibv_qp_state) -> Option<QpState> {
    Some(match s {
        IBV_QPS_RESET => QpState::Reset,
        IBV_QPS_INIT => QpState::Init,
        IBV_QPS_RTR => QpState::Rtr,
        IBV_QPS_RTS => QpState::Rts,
        IBV_QPS_ERR => QpState::Err,
        _ => return None,
    })
}

/// The caps a QP gets for `want` (at least as much of everything), or why not.
fn caps(want: &ibv_qp_cap, attr: &qhca::DeviceAttr) -> Result<QpCaps, &'static str> {
    let max_sge = want.max_send_sge.max(want.max_recv_sge).max(1);
    if want.max_send_wr > attr.max_qp_wr || want.max_recv_wr > attr.max_qp_wr {
        return Err("more work requests than the device's max_qp_wr");
    }
    if max_sge > attr.max_sge {
        return Err("more scatter/gather entries than the device's max_sge");
    }
    if want.max_inline_data > attr.max_inline {
        return Err("more inline data than the device's max_inline");
    }
    Ok(QpCaps {
        max_send_wr: want.max_send_wr.max(1),
        max_recv_wr: want.max_recv_wr.max(1),
        max_sge,
        max_inline: want.max_inline_data,
    })
}

fn create(pd: &Pd, ctx: &Ctx, init: &mut ibv_qp_init_attr) -> *mut ibv_qp {
    let qp_type = match init.qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UD => QpType::Ud,
        _ => return unsupported_null("ibv_create_qp of a type other than RC and UD"),
    };
    if !init.srq.is_null() {
        return unsupported_null("ibv_create_qp with an SRQ");
    }
    // SAFETY: the program passes live CQs (or NULL, refused next).
    let (scq, rcq) = unsafe { (Cq::ours(init.send_cq), Cq::ours(init.recv_cq)) };
    let (Some((scq, sctx)), Some((rcq, rctx))) = (scq, rcq) else {
        debug(format_args!("ibv_create_qp: the CQs must be qhca CQs"));
        set_errno(libc::EINVAL);
        return null_mut();
    };
    if !ptr::eq(sctx, ctx) || !ptr::eq(rctx, ctx) {
        debug(format_args!(
            "ibv_create_qp: the CQs are of another context"
        ));
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let want = match caps(&init.cap, &ctx.attr) {
        Ok(c) => c,
        Err(why) => {
            debug(format_args!("ibv_create_qp: {why}"));
            set_errno(libc::EINVAL);
            return null_mut();
        }
    };
    let qp = if ptr::eq(scq, rcq) {
        let s = lock(&scq.cq);
        qhca::Qp::with_type(&pd.pd, &s, &s, &want, qp_type)
    } else {
        // In address order, so that two threads creating QPs over the same two CQs the other
        // way round cannot deadlock.
        let (first, second) = if (scq as *const Cq) < (rcq as *const Cq) {
            (scq, rcq)
        } else {
            (rcq, scq)
        };
        let a = lock(&first.cq);
        let b = lock(&second.cq);
        let (s, r) = if ptr::eq(first, scq) {
            (&a, &b)
        } else {
            (&b, &a)
        };
        qhca::Qp::with_type(&pd.pd, s, r, &want, qp_type)
    };
    let qp = match qp {
        Ok(qp) => qp,
        Err(e) => return fail_null("ibv_create_qp", &e),
    };
    let l = *qp.layout();
    let cap = ibv_qp_cap {
        max_send_wr: 1 << l.sq_log,
        max_recv_wr: 1 << l.rq_log,
        max_send_sge: l.max_sge,
        max_recv_sge: l.max_sge,
        max_inline_data: l.max_inline,
    };
    init.cap = cap;
    // SAFETY: plain C data (pointers, integers, a pthread mutex and condition variable whose
    // all-zero values are their static initializers): all-zero is valid.
    let mut ibv: ibv_qp = unsafe { core::mem::zeroed() };
    ibv.context = ctx.ibv();
    ibv.qp_context = init.qp_context;
    ibv.pd = pd.ibv();
    ibv.send_cq = init.send_cq;
    ibv.recv_cq = init.recv_cq;
    ibv.handle = qp.qpn();
    ibv.qp_num = qp.qpn();
    ibv.state = IBV_QPS_RESET;
    ibv.qp_type = init.qp_type;
    let qpn = qp.qpn();
    let posting = Posting::new(qp);
    pd.hold();
    scq.hold();
    rcq.hold();
    ctx.hold();
    let p = Box::new(Qp {
        ibv: UnsafeCell::new(ibv),
        posting: Mutex::new(posting),
        sig_all: init.sq_sig_all != 0,
        cap,
    })
    .into_ibv();
    ctx.register_qp(qpn, p);
    p
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the program passes a live PD.
    let Some((p, ctx)) = (unsafe { Pd::ours(pd) }) else {
        return forward!(
            ibv_create_qp(pd, init) as fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
            null_mut()
        );
    };
    if init.is_null() {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    // SAFETY: the program's attributes, which we update with the caps it got (as libibverbs).
    create(p, ctx, unsafe { &mut *init })
}

/// `verbs_context.create_qp_ex`: what the inline `ibv_create_qp_ex` calls for anything beyond
/// a PD: the extended work-request API (`send_ops_flags`) and the rest are not qhca's.
pub(crate) unsafe extern "C" fn create_qp_ex_op(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: the inline function passes the program's context and attributes.
    let (Some(ctx), Some(a)) = (unsafe { Ctx::ours(context) }, unsafe { attr.as_mut() }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    if a.comp_mask & !IBV_QP_INIT_ATTR_PD != 0 || a.create_flags != 0 {
        return unsupported_null(
            "ibv_create_qp_ex beyond a PD (send_ops_flags, create_flags, ...)",
        );
    }
    // SAFETY: the program's PD.
    let Some((pd, pctx)) = (unsafe { Pd::ours(a.pd) }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    if !ptr::eq(pctx, ctx) {
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let mut init = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    let qp = create(pd, ctx, &mut init);
    a.cap = init.cap;
    qp
}

#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // SAFETY: the program passes a live QP.
    if unsafe { Qp::ours(qp) }.is_some() {
        // No extended work-request API: as libibverbs for a QP made without send_ops_flags.
        return null_mut();
    }
    forward!(
        ibv_qp_to_qp_ex(qp) as fn(*mut ibv_qp) -> *mut ibv_qp_ex,
        null_mut()
    )
}

/// The provider's attributes for `ibv_modify_qp(attr, mask)` of an RC (`rc`) or UD QP, or the
/// errno.
///
/// An address vector (`IBV_QP_AV`) with a GRH goes to the device as it is, on RC: its source
/// entry (`grh.sgid_index`) and destination (`grh.dgid`). The device refuses an entry that is
/// not valid, or a destination of the other family (`EINVAL`); one the port cannot reach loses
/// the packets and the QP's requests then fail with `IBV_WC_RETRY_EXC_ERR`, as on a real
/// fabric. Without a GRH (`is_global` 0: `ibv_rc_pingpong` without `-g`) the QP keeps the
/// device's default, its own port's GID 0: both ends on this device. A UD QP has no address
/// vector (each send names a handle), and ignores one.
fn modify_attr(a: &ibv_qp_attr, mask: c_int, ctx: &Ctx, rc: bool) -> Result<QpAttr, c_int> {
    let mask = mask as c_uint;
    let has = |bit: c_uint| mask & bit != 0;
    let supported = IBV_QP_STATE
        | IBV_QP_CUR_STATE
        | IBV_QP_ACCESS_FLAGS
        | IBV_QP_PKEY_INDEX
        | IBV_QP_PORT
        | IBV_QP_QKEY
        | IBV_QP_AV
        | IBV_QP_PATH_MTU
        | IBV_QP_TIMEOUT
        | IBV_QP_RETRY_CNT
        | IBV_QP_RNR_RETRY
        | IBV_QP_RQ_PSN
        | IBV_QP_MAX_QP_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER
        | IBV_QP_SQ_PSN
        | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_DEST_QPN;
    if mask & !supported != 0 {
        return Err(unsupported(
            "ibv_modify_qp of alternate paths, path migration, caps or rate limits",
        ));
    }
    let bad = |why: core::fmt::Arguments<'_>| {
        debug(format_args!("ibv_modify_qp: {why}"));
        libc::EINVAL
    };
    let mut q = QpAttr::default();
    if has(IBV_QP_STATE) {
        q.state =
            Some(qhca_state(a.qp_state).ok_or_else(|| bad(format_args!("state {}", a.qp_state)))?);
    }
    if has(IBV_QP_ACCESS_FLAGS) {
        // A QP's rights are the remote ones; the rest (LOCAL_WRITE, which perftest sets for
        // SEND, MW_BIND, ...) means nothing for a QP and is ignored, as by rdma-core's
        // providers and the kernel.
        let remote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        let acc = access_from_ibv(a.qp_access_flags & remote)
            .map_err(|b| bad(format_args!("access bits {b:#x}")))?;
        q.access = Some(acc);
    }
    if has(IBV_QP_PKEY_INDEX) && a.pkey_index != 0 {
        return Err(bad(format_args!(
            "P_Key index {}: the table has 0 only",
            a.pkey_index
        )));
    }
    if has(IBV_QP_PORT) && a.port_num != qhca::PORT_NUM {
        return Err(bad(format_args!("port {}: port 1 only", a.port_num)));
    }
    if has(IBV_QP_AV) {
        let av = &a.ah_attr;
        if av.port_num != 0 && av.port_num != qhca::PORT_NUM {
            return Err(bad(format_args!("address vector port {}", av.port_num)));
        }
        if rc && av.is_global != 0 {
            // Port 0 is taken as the port, as before address vectors reached the device.
            let av = ibv_ah_attr {
                port_num: qhca::PORT_NUM,
                ..*av
            };
            let v = crate::ah::ah_attr(&av, ctx.attr.port_gid())
                .map_err(|why| bad(format_args!("address vector: {why}")))?;
            q.av = Some(v);
        }
    }
    if has(IBV_QP_QKEY) {
        q.qkey = Some(a.qkey);
    }
    if has(IBV_QP_PATH_MTU) {
        if !(IBV_MTU_256..=IBV_MTU_4096).contains(&a.path_mtu) {
            return Err(bad(format_args!("path MTU {}", a.path_mtu)));
        }
        q.path_mtu = Some(a.path_mtu as u8 + 7);
    }
    if has(IBV_QP_TIMEOUT) {
        q.timeout = Some(a.timeout);
    }
    if has(IBV_QP_RETRY_CNT) {
        q.retry_cnt = Some(a.retry_cnt);
    }
    if has(IBV_QP_RNR_RETRY) {
        q.rnr_retry = Some(a.rnr_retry);
    }
    if has(IBV_QP_RQ_PSN) {
        q.rq_psn = Some(a.rq_psn);
    }
    if has(IBV_QP_SQ_PSN) {
        q.sq_psn = Some(a.sq_psn);
    }
    if has(IBV_QP_MIN_RNR_TIMER) {
        q.min_rnr_timer = Some(a.min_rnr_timer);
    }
    // 0 (no READs or atomics at all) is taken as 1, the device's least.
    if has(IBV_QP_MAX_QP_RD_ATOMIC) {
        q.max_rd_atomic = Some(a.max_rd_atomic.max(1));
    }
    if has(IBV_QP_MAX_DEST_RD_ATOMIC) {
        q.max_dest_rd_atomic = Some(a.max_dest_rd_atomic.max(1));
    }
    if has(IBV_QP_DEST_QPN) {
        q.dest_qpn = Some(a.dest_qp_num);
    }
    Ok(q)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: the program passes a live QP.
    let Some((q, ctx)) = (unsafe { Qp::ours(qp) }) else {
        return forward!(
            ibv_modify_qp(qp, attr, mask) as fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
            libc::ENOSYS
        );
    };
    // SAFETY: the program passes its attributes.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        return libc::EINVAL;
    };
    let rc = lock(&q.posting).queues.qp_type() == qhca::QpType::Rc;
    let qa = match modify_attr(a, mask, ctx, rc) {
        Ok(qa) => qa,
        Err(e) => return e,
    };
    let r = lock(&q.posting).queues.modify(&qa);
    match r {
        Ok(()) => {
            if let Some(s) = qa.state {
                // SAFETY: a single field store into our own object (as libibverbs does).
                unsafe { (*q.ibv()).state = ibv_state(s) };
            }
            0
        }
        Err(e) => fail_errno("ibv_modify_qp", &e),
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the program passes a live QP.
    let Some((q, ctx)) = (unsafe { Qp::ours(qp) }) else {
        return forward!(
            ibv_query_qp(qp, attr, mask, init)
                as fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int,
            libc::ENOSYS
        );
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    let info = match lock(&q.posting).queues.query() {
        Ok(i) => i,
        Err(e) => return fail_errno("ibv_query_qp", &e),
    };
    // SAFETY: plain C data; all-zero is valid.
    let mut a: ibv_qp_attr = unsafe { core::mem::zeroed() };
    a.qp_state = ibv_state(info.state);
    a.cur_qp_state = a.qp_state;
    // As libibverbs: the QP's own `state` follows what the device says (it may have gone to
    // ERR on its own).
    // SAFETY: a single field store into our own object.
    unsafe { (*q.ibv()).state = a.qp_state };
    a.path_mtu = if info.path_mtu >= 8 {
        c_uint::from(info.path_mtu) - 7
    } else {
        IBV_MTU_4096
    };
    a.qkey = info.qkey;
    a.rq_psn = info.rq_psn;
    a.sq_psn = info.sq_psn;
    a.dest_qp_num = info.dest_qpn;
    a.qp_access_flags = access_to_ibv(info.access);
    a.cap = q.cap;
    a.ah_attr.port_num = qhca::PORT_NUM;
    a.ah_attr.is_global = 1;
    if info.qp_type == Some(qhca::QpType::Rc) {
        // What the device holds: the address vector set at INIT -> RTR, or its default (this
        // port's GID 0 from GID 0, hop limit 64).
        let av = &info.av;
        a.ah_attr.grh.dgid.raw = av.dgid.raw;
        a.ah_attr.grh.sgid_index = av.sgid_index;
        a.ah_attr.grh.flow_label = av.flow_label;
        a.ah_attr.grh.traffic_class = av.traffic_class;
        a.ah_attr.grh.hop_limit = av.hop_limit;
        a.ah_attr.sl = av.sl;
    } else {
        a.ah_attr.grh.dgid.raw = ctx.attr.port_gid().raw;
        a.ah_attr.grh.hop_limit = 64;
    }
    a.max_rd_atomic = info.max_rd_atomic;
    a.max_dest_rd_atomic = info.max_dest_rd_atomic;
    a.min_rnr_timer = info.min_rnr_timer;
    a.port_num = qhca::PORT_NUM;
    a.timeout = info.timeout;
    a.retry_cnt = info.retry_cnt;
    a.rnr_retry = info.rnr_retry;
    // SAFETY: the program passes room for the attributes.
    unsafe { attr.write(a) };
    if !init.is_null() {
        // SAFETY: our own object's program-visible struct, read field by field.
        let v = unsafe { &*q.ibv() };
        let i = ibv_qp_init_attr {
            qp_context: v.qp_context,
            send_cq: v.send_cq,
            recv_cq: v.recv_cq,
            srq: null_mut(),
            cap: q.cap,
            qp_type: v.qp_type,
            sq_sig_all: c_int::from(q.sig_all),
        };
        // SAFETY: the program passes room for the init attributes.
        unsafe { init.write(i) };
    }
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: the program passes a live QP.
    let Some((q, ctx)) = (unsafe { Qp::ours(qp) }) else {
        return forward!(ibv_destroy_qp(qp) as fn(*mut ibv_qp) -> c_int, libc::ENOSYS);
    };
    let qpn = lock(&q.posting).queues.qpn();
    ctx.unregister(Some(qpn), None, qp as usize);
    // SAFETY: our own live object's program-visible struct: the PD and CQs it holds, which
    // are live (their destroy verbs are EBUSY while this QP is).
    unsafe {
        let v = &*q.ibv();
        for cq in [v.send_cq, v.recv_cq] {
            if let Some((c, _)) = Cq::ours(cq) {
                c.release();
            }
        }
        if let Some((p, _)) = Pd::ours(v.pd) {
            p.release();
        }
    }
    ctx.release();
    // SAFETY: made by `create`, the program's last use. Dropping the provider's QP destroys
    // it (its unpolled CQEs leave the CQs; its rings are leaked if the destroy fails).
    drop(unsafe { Qp::from_ibv(qp) });
    // Destroyed in the driver: its queued asynchronous events go, as uverbs drops them.
    ctx.purge_events(Some(qpn), None);
    0
}

/// `ops.bind_mw`: what the inline `ibv_bind_mw` calls, for type 1 windows: posts the bind on
/// `qp` and gives the window its next key.
pub(crate) unsafe extern "C" fn bind_mw_op(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    bind: *mut ibv_mw_bind,
) -> c_int {
    // SAFETY: the inline function passes the program's QP (ours or not: one that is not ours is
    // refused).
    let Some((q, _)) = (unsafe { Qp::ours(qp) }) else {
        return libc::EINVAL;
    };
    // SAFETY: the program's window and request, and the region it names, live.
    unsafe { lock(&q.posting).bind_mw(&Preloaded, q.sig_all, mw, bind, debug) }
}

/// How the preload finds its objects behind a request's pointers: its own only (a handle of
/// another device's is refused).
struct Preloaded;

impl Objects for Preloaded {
    unsafe fn ud_dest(&self, ah: *mut ibv_ah, qpn: u32, qkey: u32) -> Option<qhca::UdDest> {
        // SAFETY: the caller's promise: NULL or a live handle.
        let (ah, _) = unsafe { Ah::ours(ah) }?;
        Some(ah.ah.dest(qpn, qkey))
    }

    unsafe fn window_key(&self, mw: *mut ibv_mw) -> Option<u32> {
        // SAFETY: the caller's promise.
        let (mw, _) = unsafe { Mw::ours(mw) }?;
        // SAFETY: our own live window's program-visible struct.
        Some(unsafe { (*mw.ibv()).rkey })
    }

    unsafe fn region_lkey(&self, mr: *mut ibv_mr) -> Option<u32> {
        // SAFETY: the caller's promise.
        let (mr, _) = unsafe { Mr::ours(mr) }?;
        // SAFETY: our own live region's program-visible struct.
        Some(unsafe { (*mr.ibv()).lkey })
    }

    unsafe fn bound(&self, mw: *mut ibv_mw, key: u32) {
        // SAFETY: the caller's promise.
        if let Some((w, _)) = unsafe { Mw::ours(mw) } {
            w.set_rkey(key);
        }
    }
}

/// `ops.post_send`: what the inline `ibv_post_send` calls.
pub(crate) unsafe extern "C" fn post_send_op(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the inline function passes the program's QP, whose context has this op: ours,
    // made by `create` as a `Qp`.
    let q = unsafe { &*qp.cast::<Qp>() };
    // SAFETY: the program's list of live requests (ibv_post_send(3)).
    unsafe { lock(&q.posting).post_send(&Preloaded, q.sig_all, wr, bad, debug) }
}

/// `ops.post_recv`: what the inline `ibv_post_recv` calls.
pub(crate) unsafe extern "C" fn post_recv_op(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: as in `post_send_op`.
    let q = unsafe { &*qp.cast::<Qp>() };
    // SAFETY: the program's list of live requests (ibv_post_recv(3)).
    unsafe { lock(&q.posting).post_recv(wr, bad, debug) }
}
