// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (`ib_qp`) of user contexts and kernel consumers, and the way back from the
//! device's QP events to the core ([`QpEvents`]).

use super::{cq::IbCq, data, errno, pd::pd_data, srq::IbSrq, ucontext::udata_of, Driver};
use core::{ffi::c_int, mem::MaybeUninit, ptr::NonNull};
use kernel::{bindings, prelude::*};

/// A QP as the core allocates it: the `ib_qp` first, the driver's part behind.
#[repr(C)]
pub(super) struct IbQp<Q> {
    ib: bindings::ib_qp,
    data: MaybeUninit<Q>,
}

/// Delivers a QP's asynchronous events to the core (its event handler, which queues them for
/// `ibv_get_async_event`).
///
/// The driver makes one while creating the QP and must drop it (no call after) before its
/// `destroy_qp` returns success: the core frees the QP then.
pub(crate) struct QpEvents(NonNull<bindings::ib_qp>);

// SAFETY: The core's QP event handler may be called from any thread; this only holds the
// pointer.
unsafe impl Send for QpEvents {}
// SAFETY: As above.
unsafe impl Sync for QpEvents {}

impl QpEvents {
    /// The core's QP, for the completions of it that a kernel CQ reports (`ib_wc.qp`).
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_qp {
        self.0.as_ptr()
    }

    /// The QP entered ERR on its own (`IB_EVENT_QP_FATAL`).
    pub(crate) fn fatal(&self) {
        self.dispatch(bindings::ib_event_type_IB_EVENT_QP_FATAL);
    }

    /// The QP, in ERR, holds no WQE of its SRQ any more (`IB_EVENT_QP_LAST_WQE_REACHED`).
    pub(crate) fn last_wqe_reached(&self) {
        self.dispatch(bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED);
    }

    fn dispatch(&self, event: bindings::ib_event_type) {
        let qp = self.0.as_ptr();
        let mut ev: bindings::ib_event = pin_init::zeroed();
        ev.event = event;
        ev.element.qp = qp;
        // SAFETY: Valid until the driver's `destroy_qp` succeeds, which drops `self` first (the
        // type's contract); the handler and its context are the core's, set before creation.
        unsafe {
            ev.device = (*qp).device;
            if let Some(h) = (*qp).event_handler {
                h(&mut ev, (*qp).qp_context);
            }
        }
    }
}

/// The driver's part of QP `qp`.
///
/// # Safety
///
/// `qp` is a QP of ours whose `create_qp` succeeded and which is not destroyed yet.
pub(super) unsafe fn qp_data<'a, Q>(qp: *mut bindings::ib_qp) -> &'a Q {
    // SAFETY: The caller's contract.
    unsafe { (*qp.cast::<IbQp<Q>>()).data.assume_init_ref() }
}

/// # Safety
///
/// Called by the RDMA core only, for a fresh QP of a registered device of ours (allocated with
/// `size_ib_qp` zeroed bytes; device, PD, CQs and handlers set), `init` and `udata` the
/// command's (`udata` null for a kernel QP).
pub(super) unsafe extern "C" fn create_qp<T: Driver>(
    qp: *mut bindings::ib_qp,
    init: *mut bindings::ib_qp_init_attr,
    udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: The core's QP and attributes, valid for the call.
    let (init, scq, rcq) = unsafe { (&mut *init, (*qp).send_cq, (*qp).recv_cq) };
    if scq.is_null() || rcq.is_null() || !init.xrcd.is_null() {
        // Every RC and UD QP has both CQs; no XRC.
        return EOPNOTSUPP.to_errno();
    }
    // SAFETY: Null, or a created SRQ of ours that the core looked up among the context's live
    // objects, or a kernel consumer's (which holds it), and counts as used by the QP from now
    // on.
    let srq = (!init.srq.is_null()).then(|| unsafe { IbSrq::<T::Srq>::data(init.srq) });
    let Some(ptr) = NonNull::new(qp) else {
        return EINVAL.to_errno();
    };
    // SAFETY: Our device and PD (allocated); the CQs are created CQs of ours (the core looked
    // them up among the context's live objects, or a kernel consumer holds them, for the call).
    let (dev, pd, send_cq, recv_cq) = unsafe {
        (
            data::<T>((*qp).device),
            pd_data::<T::Pd>((*qp).pd),
            IbCq::<T::Cq>::data(scq),
            IbCq::<T::Cq>::data(rcq),
        )
    };
    let made = if udata.is_null() {
        if !dev.kernel_verbs() {
            return EOPNOTSUPP.to_errno();
        }
        dev.create_kernel_qp(pd, QpEvents(ptr), init, send_cq, recv_cq, srq)
    } else {
        // SAFETY: `udata` is the command's, valid for the call.
        let mut udata = unsafe { udata_of(udata) };
        dev.create_qp(pd, QpEvents(ptr), init, send_cq, recv_cq, srq, &mut udata)
    };
    match made {
        Ok((q, qpn)) => {
            // SAFETY: The core allocated an `IbQp<T::Qp>`; `data` is written once, here.
            unsafe {
                (*qp.cast::<IbQp<T::Qp>>()).data.write(q);
                (*qp).qp_num = qpn;
            }
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a created QP of ours.
pub(super) unsafe extern "C" fn modify_qp<T: Driver>(
    qp: *mut bindings::ib_qp,
    attr: *mut bindings::ib_qp_attr,
    mask: c_int,
    udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: A created QP of ours; the core's attributes and udata (a user's command's, or
    // null for a kernel QP), valid for the call.
    let (dev, q, attr, mut udata) = unsafe {
        (
            data::<T>((*qp).device),
            qp_data::<T::Qp>(qp),
            &*attr,
            (!udata.is_null()).then(|| udata_of(udata)),
        )
    };
    errno(dev.modify_qp(q, attr, mask as u32, udata.as_mut()))
}

/// # Safety
///
/// Called by the RDMA core only, for a created QP of ours.
pub(super) unsafe extern "C" fn query_qp<T: Driver>(
    qp: *mut bindings::ib_qp,
    attr: *mut bindings::ib_qp_attr,
    _mask: c_int,
    init: *mut bindings::ib_qp_init_attr,
) -> c_int {
    // SAFETY: A created QP of ours; the core's (zeroed) outputs, ours to fill during the call.
    let (dev, q, attr, init) = unsafe {
        (
            data::<T>((*qp).device),
            qp_data::<T::Qp>(qp),
            &mut *attr,
            &mut *init,
        )
    };
    errno(dev.query_qp(q, attr, init))
}

/// # Safety
///
/// Called by the RDMA core only, for a QP whose `create_qp` succeeded.
pub(super) unsafe extern "C" fn destroy_qp<T: Driver>(
    qp: *mut bindings::ib_qp,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    let p = qp.cast::<IbQp<T::Qp>>();
    // SAFETY: A created QP of ours: `data` is initialised.
    let (dev, q) = unsafe { (data::<T>((*qp).device), (*p).data.assume_init_ref()) };
    let r = dev.destroy_qp(q);
    if r.is_ok() {
        // SAFETY: The core frees the QP after this and calls nothing more on it.
        unsafe { (*p).data.assume_init_drop() };
    }
    errno(r)
}
