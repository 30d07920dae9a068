// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues (`ib_srq`) of user contexts and of kernel consumers (whose receives
//! come through `post_srq_recv`: [`super::kernel_verbs`]), and the way back from the device's
//! limit events to the core ([`SrqEvents`]).

use super::{data, errno, pd::pd_data, ucontext::udata_of, Driver};
use core::{ffi::c_int, mem::MaybeUninit, ptr::NonNull};
use kernel::{bindings, prelude::*};

/// An SRQ as the core allocates it: the `ib_srq` first, the driver's part behind.
#[repr(C)]
pub(super) struct IbSrq<S> {
    ib: bindings::ib_srq,
    data: MaybeUninit<S>,
}

impl<S> IbSrq<S> {
    /// The driver's part of the core's SRQ `srq`.
    ///
    /// # Safety
    ///
    /// `srq` is an SRQ of ours whose creation succeeded and which is not destroyed yet.
    pub(super) unsafe fn data<'a>(srq: *mut bindings::ib_srq) -> &'a S {
        // SAFETY: The caller's contract: an `IbSrq<S>` (the `ib_srq` first) whose `data` a
        // successful creation wrote.
        unsafe { (*srq.cast::<IbSrq<S>>()).data.assume_init_ref() }
    }
}

/// Delivers an SRQ's asynchronous events to the core (its event handler, which queues them for
/// `ibv_get_async_event`).
///
/// The driver makes one while creating the SRQ and must drop it (no call after) before its
/// `destroy_srq` returns success: the core frees the SRQ then.
pub(crate) struct SrqEvents(NonNull<bindings::ib_srq>);

// SAFETY: The core's SRQ event handler may be called from any thread; this only holds the
// pointer.
unsafe impl Send for SrqEvents {}
// SAFETY: As above.
unsafe impl Sync for SrqEvents {}

impl SrqEvents {
    /// Fewer WQEs than the armed limit are left (`IB_EVENT_SRQ_LIMIT_REACHED`); the limit is
    /// disarmed.
    pub(crate) fn limit_reached(&self) {
        let srq = self.0.as_ptr();
        let mut ev: bindings::ib_event = pin_init::zeroed();
        ev.event = bindings::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED;
        ev.element.srq = srq;
        // SAFETY: Valid until the driver's `destroy_srq` succeeds, which drops `self` first (the
        // type's contract); the handler and its context are the core's, set before creation.
        unsafe {
            ev.device = (*srq).device;
            if let Some(h) = (*srq).event_handler {
                h(&mut ev, (*srq).srq_context);
            }
        }
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a fresh SRQ of a registered device of ours (allocated with
/// `size_ib_srq` zeroed bytes; device, PD, type and handler set), `init` and `udata` the
/// command's (`udata` null for a kernel SRQ).
pub(super) unsafe extern "C" fn create_srq<T: Driver>(
    srq: *mut bindings::ib_srq,
    init: *mut bindings::ib_srq_init_attr,
    udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: The core's attributes, valid for the call.
    let init = unsafe { &mut *init };
    if init.srq_type != bindings::ib_srq_type_IB_SRQT_BASIC {
        // XRC and tag matching: not on this device yet.
        return EOPNOTSUPP.to_errno();
    }
    let Some(ptr) = NonNull::new(srq) else {
        return EINVAL.to_errno();
    };
    // SAFETY: Our device and a PD of ours (the core looked it up among the context's live
    // objects, or a kernel consumer holds it, for the call).
    let (dev, pd) = unsafe { (data::<T>((*srq).device), pd_data::<T::Pd>((*srq).pd)) };
    let made = if udata.is_null() {
        if !dev.kernel_verbs() {
            return EOPNOTSUPP.to_errno();
        }
        dev.create_kernel_srq(pd, SrqEvents(ptr), &mut init.attr)
    } else {
        // SAFETY: `udata` is the command's, valid for the call.
        let mut udata = unsafe { udata_of(udata) };
        dev.create_srq(pd, SrqEvents(ptr), &mut init.attr, &mut udata)
    };
    match made {
        Ok(s) => {
            // SAFETY: The core allocated an `IbSrq<T::Srq>`; `data` is written once, here.
            unsafe { (*srq.cast::<IbSrq<T::Srq>>()).data.write(s) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a created SRQ of ours.
pub(super) unsafe extern "C" fn modify_srq<T: Driver>(
    srq: *mut bindings::ib_srq,
    attr: *mut bindings::ib_srq_attr,
    mask: bindings::ib_srq_attr_mask,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: A created SRQ of ours; the core's attributes, valid for the call.
    let (dev, s, attr) = unsafe { (data::<T>((*srq).device), IbSrq::<T::Srq>::data(srq), &*attr) };
    errno(dev.modify_srq(s, attr, mask))
}

/// # Safety
///
/// Called by the RDMA core only, for a created SRQ of ours.
pub(super) unsafe extern "C" fn query_srq<T: Driver>(
    srq: *mut bindings::ib_srq,
    attr: *mut bindings::ib_srq_attr,
) -> c_int {
    // SAFETY: A created SRQ of ours; the core's (zeroed) output, ours to fill during the call.
    let (dev, s, attr) = unsafe {
        (
            data::<T>((*srq).device),
            IbSrq::<T::Srq>::data(srq),
            &mut *attr,
        )
    };
    errno(dev.query_srq(s, attr))
}

/// # Safety
///
/// Called by the RDMA core only, for an SRQ whose `create_srq` succeeded and that no QP uses
/// (the core counts them).
pub(super) unsafe extern "C" fn destroy_srq<T: Driver>(
    srq: *mut bindings::ib_srq,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: A created SRQ of ours: `data` is initialised.
    let (dev, s) = unsafe { (data::<T>((*srq).device), IbSrq::<T::Srq>::data(srq)) };
    let r = dev.destroy_srq(s);
    if r.is_ok() {
        // SAFETY: The core frees the SRQ after this and calls nothing more on it.
        unsafe { (*srq.cast::<IbSrq<T::Srq>>()).data.assume_init_drop() };
    }
    errno(r)
}
