// SPDX-License-Identifier: GPL-2.0

//! Protection domains (`ib_pd`) of user contexts and of kernel consumers.

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
/// `size_ib_pd` zeroed bytes, `device` and `uobject` set; `uobject` null for a kernel PD, whose
/// `udata` is null too).
pub(super) unsafe extern "C" fn alloc_pd<T: Driver>(
    pd: *mut bindings::ib_pd,
    udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: Our device (see `query_device`).
    let dev = unsafe { data::<T>((*pd).device) };
    // SAFETY: The core's PD, valid for the call; a user PD's context is alive.
    let made = match unsafe { ucontext_of::<T>((*pd).uobject) } {
        None if dev.kernel_verbs() => dev.alloc_kernel_pd(),
        None => Err(EOPNOTSUPP),
        Some(_) if udata.is_null() => Err(EINVAL),
        Some(uctx) => {
            // SAFETY: `udata` is the command's, valid for the call.
            let mut udata = unsafe { udata_of(udata) };
            dev.alloc_pd(uctx, &mut udata)
        }
    };
    match made {
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
    // SAFETY: A PD of ours that `alloc_pd` allocated, so `data` was written.
    let (dev, p) = unsafe { (data::<T>((*pd).device), pd.cast::<IbPd<T::Pd>>()) };
    // SAFETY: `data` is initialised until dropped below, once, on success.
    match dev.dealloc_pd(unsafe { (*p).data.assume_init_ref() }) {
        Ok(()) => {
            // SAFETY: The core frees the PD after this and calls nothing more on it.
            unsafe { (*p).data.assume_init_drop() };
            0
        }
        Err(e) => e.to_errno(),
    }
}
