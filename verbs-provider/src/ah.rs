// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Address handles: the core's command; the driver answers the device's handle number
//! (`struct qhca_ib_create_ah_resp`), which UD sends carry.

use core::ffi::c_int;

use qhca_uapi::qhca_ib_create_ah_resp;
use qhca_verbs_abi::ffi::*;

use crate::cmd::*;

/// An address handle: libibverbs's `struct ibv_ah` first, then the device's number.
#[repr(C)]
pub(crate) struct Ah {
    ibv: ibv_ah,
    pub(crate) ah: u32,
}

/// `create_ah`.
pub(crate) unsafe extern "C" fn create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    let ah = Box::into_raw(Box::new(Ah {
        ibv: ibv_ah::default(),
        ah: 0,
    }));
    let mut resp = Resp::<4, qhca_ib_create_ah_resp>::new();
    // SAFETY: libibverbs's arguments, passed on; `ah` starts with the `struct ibv_ah`
    // libibverbs fills in; `resp` is the size given.
    let ret =
        unsafe { ibv_cmd_create_ah(pd, ah.cast(), attr, resp.as_mut_ptr(), size_of_val(&resp)) };
    if ret != 0 {
        // SAFETY: ours, not handed out.
        return unsafe { discard(ah, ret) };
    }
    // SAFETY: ours.
    unsafe { (*ah).ah = resp.drv.ah };
    ah.cast()
}

/// `destroy_ah`.
pub(crate) unsafe extern "C" fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: `ah` came from `create_ah`, an `Ah`; the program's last use.
    unsafe { free_if_destroyed(ibv_cmd_destroy_ah(ah), ah.cast::<Ah>()) }
}
