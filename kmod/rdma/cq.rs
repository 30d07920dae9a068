// SPDX-License-Identifier: GPL-2.0

//! Completion queues (`ib_cq`) of user contexts and kernel consumers, and the way back from the
//! device's events to the core's handlers ([`CqEvents`]).

use super::{
    data, errno,
    ucontext::{ucontext_data, udata_of, Udata},
    Driver,
};
use core::{ffi::c_int, mem::MaybeUninit, ptr::NonNull};
use kernel::{bindings, prelude::*};

/// A CQ as the core allocates it: the `ib_cq` first, the driver's part behind.
#[repr(C)]
pub(super) struct IbCq<C> {
    ib: bindings::ib_cq,
    data: MaybeUninit<C>,
}

impl<C> IbCq<C> {
    /// The driver's part of the core's CQ `cq`.
    ///
    /// # Safety
    ///
    /// `cq` is a CQ of ours whose creation succeeded and which is not destroyed yet.
    pub(super) unsafe fn data<'a>(cq: *mut bindings::ib_cq) -> &'a C {
        // SAFETY: The caller's contract: an `IbCq<C>` (the `ib_cq` first) whose `data` a
        // successful creation wrote.
        unsafe { (*cq.cast::<IbCq<C>>()).data.assume_init_ref() }
    }
}

/// What a user asked of a new CQ.
pub(crate) struct CqAttr {
    /// At least this many entries.
    pub(crate) cqe: u32,
    pub(crate) comp_vector: u32,
    /// `IB_UVERBS_CQ_FLAGS_*`.
    pub(crate) flags: u32,
}

/// Delivers a CQ's events to the core: completions to its completion handler (the completion
/// channel of `ibv_get_cq_event`), errors to its event handler (`IBV_EVENT_CQ_ERR`).
///
/// The driver makes one while creating the CQ and must drop it (no call after) before its
/// `destroy_cq` returns success: the core frees the CQ then.
pub(crate) struct CqEvents(NonNull<bindings::ib_cq>);

// SAFETY: The core's handlers may be called from any thread (drivers call them from interrupts
// and work items); this only holds the pointer.
unsafe impl Send for CqEvents {}
// SAFETY: As above.
unsafe impl Sync for CqEvents {}

impl CqEvents {
    /// A completion event: the CQ was armed and has a new entry.
    pub(crate) fn completion(&self) {
        let cq = self.0.as_ptr();
        // SAFETY: Valid until the driver's `destroy_cq` succeeds, which drops `self` first (the
        // type's contract); the handler and its context are the core's, set before creation.
        unsafe {
            if let Some(h) = (*cq).comp_handler {
                h(cq, (*cq).cq_context);
            }
        }
    }

    /// The CQ overran or failed (`IB_EVENT_CQ_ERR`).
    pub(crate) fn error(&self) {
        let cq = self.0.as_ptr();
        let mut ev: bindings::ib_event = pin_init::zeroed();
        ev.event = bindings::ib_event_type_IB_EVENT_CQ_ERR;
        ev.element.cq = cq;
        // SAFETY: As in `completion`; `ev` lives across the call.
        unsafe {
            ev.device = (*cq).device;
            if let Some(h) = (*cq).event_handler {
                h(&mut ev, (*cq).cq_context);
            }
        }
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a fresh user CQ of a registered device of ours (allocated
/// with `size_ib_cq` zeroed bytes, `device`, handlers and context set), `attrs` the command's.
pub(super) unsafe extern "C" fn create_user_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    attr: *const bindings::ib_cq_init_attr,
    attrs: *mut bindings::uverbs_attr_bundle,
) -> c_int {
    // SAFETY: The core's bundle, valid for the call; its context is a user context of ours.
    let (hdr, a) = unsafe { (&(*attrs).__bindgen_anon_1.hdr, &*attr) };
    // SAFETY: As above: a live context, set up by `alloc_ucontext`.
    let Some(uctx) = (unsafe { ucontext_data::<T>(hdr.context) }) else {
        return EINVAL.to_errno();
    };
    // SAFETY: The bundle's driver data, valid for the call.
    let mut udata: Udata<'_> = unsafe { udata_of(&hdr.driver_udata) };
    let attr = CqAttr {
        cqe: a.cqe,
        comp_vector: a.comp_vector,
        flags: a.flags,
    };
    let Some(ptr) = NonNull::new(cq) else {
        return EINVAL.to_errno();
    };
    // SAFETY: Our device (see `query_device`).
    let dev = unsafe { data::<T>((*cq).device) };
    match dev.create_cq(uctx, CqEvents(ptr), &attr, &mut udata) {
        Ok((c, entries)) => {
            // SAFETY: The core allocated an `IbCq<T::Cq>`; `data` is written once, here; the
            // core reads `cqe` for its response.
            unsafe {
                (*cq.cast::<IbCq<T::Cq>>()).data.write(c);
                (*cq).cqe = entries as c_int;
            }
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a fresh kernel CQ of a registered device of ours
/// (allocated with `size_ib_cq` zeroed bytes; `device`, handlers and context set).
pub(super) unsafe extern "C" fn create_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    attr: *const bindings::ib_cq_init_attr,
    _attrs: *mut bindings::uverbs_attr_bundle,
) -> c_int {
    // SAFETY: The core's attributes, valid for the call; our device (see `query_device`).
    let (a, dev) = unsafe { (&*attr, data::<T>((*cq).device)) };
    if !dev.kernel_verbs() {
        return EOPNOTSUPP.to_errno();
    }
    let Some(ptr) = NonNull::new(cq) else {
        return EINVAL.to_errno();
    };
    let attr = CqAttr {
        cqe: a.cqe,
        comp_vector: a.comp_vector,
        flags: a.flags,
    };
    match dev.create_kernel_cq(CqEvents(ptr), &attr) {
        Ok((c, entries)) => {
            // SAFETY: As in `create_user_cq`.
            unsafe {
                (*cq.cast::<IbCq<T::Cq>>()).data.write(c);
                (*cq).cqe = entries as c_int;
            }
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only (`ibv_resize_cq`), for a CQ whose `create_user_cq` or
/// `create_cq` succeeded and which is not destroyed during the call, with the command's `udata`.
pub(super) unsafe extern "C" fn resize_user_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    cqe: core::ffi::c_uint,
    udata: *mut bindings::ib_udata,
) -> c_int {
    if udata.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: A CQ of ours, created, alive for the call; the core's udata, valid for the call.
    let (dev, c, mut udata) = unsafe {
        (
            data::<T>((*cq).device),
            IbCq::<T::Cq>::data(cq),
            udata_of(udata),
        )
    };
    let mut moved = |entries: u32| {
        // SAFETY: The core's CQ, alive for the call; the driver calls this while it holds
        // the CQ still, so that concurrent resizes leave the size of the ring the CQ has.
        unsafe { (*cq).cqe = entries as c_int };
    };
    errno(dev.resize_cq(c, cqe, &mut udata, &mut moved))
}

/// # Safety
///
/// Called by the RDMA core only, for a CQ whose `create_user_cq` or `create_cq` succeeded.
pub(super) unsafe extern "C" fn destroy_cq<T: Driver>(
    cq: *mut bindings::ib_cq,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: A CQ of ours, created, so `data` is initialised.
    let (dev, c) = unsafe { (data::<T>((*cq).device), IbCq::<T::Cq>::data(cq)) };
    let r = dev.destroy_cq(c);
    if r.is_ok() {
        // SAFETY: The core frees the CQ after this and calls nothing more on it.
        unsafe { (*cq.cast::<IbCq<T::Cq>>()).data.assume_init_drop() };
    }
    errno(r)
}
