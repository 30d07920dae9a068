// SPDX-License-Identifier: GPL-2.0

//! Protection domains of user contexts (`ib_pd`).

use super::{
    data,
    ucontext::{ucontext_data, udata_of},
    Driver,
};
use core::{ffi::c_int, mem::MaybeUninit};
use kernel::{bindings, prelude::*};

/// A protection domain as the core allocates it: the `ib_pd` first, the driver's part behind.
#[repr(C)]
pub(super) struct IbPd<P> {
    ib: bindings::ib_pd,
    data: MaybeUninit<P>,
}

/// The driver's part of the user context that created `uobject`, or `None` for a kernel object.
///
/// # Safety
///
/// `uobject` is null or the uverbs object of an object of a registered device of ours, in one of
/// the core's operations on it (so its context, which outlives its objects, is alive).
pub(super) unsafe fn ucontext_of<'a, T: Driver>(
    uobject: *mut bindings::ib_uobject,
) -> Option<&'a T::UContext> {
    if uobject.is_null() {
        return None;
    }
    // SAFETY: The function's contract: the object's context is one of ours, set up by a
    // successful `alloc_ucontext` (a context makes objects only after that).
    unsafe { ucontext_data::<T>((*uobject).context) }
}

/// The driver's part of PD `pd`.
///
/// # Safety
///
/// `pd` is a PD of ours whose `alloc_pd` succeeded and which is not deallocated yet.
pub(super) unsafe fn pd_data<'a, P>(pd: *mut bindings::ib_pd) -> &'a P {
    // SAFETY: The caller's contract: an `IbPd<P>` whose `data` `alloc_pd` wrote.
    unsafe { (*pd.cast::<IbPd<P>>()).data.assume_init_ref() }
}

/// # Safety
///
/// Called by the RDMA core only, for a fresh PD of a registered device of ours (allocated with
/// `size_ib_pd` zeroed bytes, `device` and `uobject` set).
pub(super) unsafe extern "C" fn alloc_pd<T: Driver>(
    pd: *mut bindings::ib_pd,
    udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: The core's PD, valid for the call; a user PD's context is alive.
    let Some(uctx) = (unsafe { ucontext_of::<T>((*pd).uobject) }) else {
        // A kernel PD: kernel verbs are not there yet.
        return EOPNOTSUPP.to_errno();
    };
    if udata.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: `udata` is the command's, valid for the call.
    let mut udata = unsafe { udata_of(udata) };
    // SAFETY: Our device (see `query_device`).
    let dev = unsafe { data::<T>((*pd).device) };
    match dev.alloc_pd(uctx, &mut udata) {
        Ok(p) => {
            // SAFETY: The core allocated an `IbPd<T::Pd>`; `data` is written once, here.
            unsafe { (*pd.cast::<IbPd<T::Pd>>()).data.write(p) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a PD whose `alloc_pd` succeeded.
pub(super) unsafe extern "C" fn dealloc_pd<T: Driver>(
    pd: *mut bindings::ib_pd,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: A user PD of ours (only those are allocated: `alloc_pd` refuses the rest); its
    // context is alive while it is, and `data` was written by `alloc_pd`.
    let (dev, uctx, p) = unsafe {
        (
            data::<T>((*pd).device),
            ucontext_of::<T>((*pd).uobject),
            pd.cast::<IbPd<T::Pd>>(),
        )
    };
    let Some(uctx) = uctx else {
        return EINVAL.to_errno();
    };
    // SAFETY: `data` is initialised until dropped below, once, on success.
    match dev.dealloc_pd(uctx, unsafe { (*p).data.assume_init_ref() }) {
        Ok(()) => {
            // SAFETY: The core frees the PD after this and calls nothing more on it.
            unsafe { (*p).data.assume_init_drop() };
            0
        }
        Err(e) => e.to_errno(),
    }
}
