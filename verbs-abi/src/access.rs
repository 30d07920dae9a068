// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Access rights between libibverbs's `IBV_ACCESS_*` and qhca's [`Access`].

use core::ffi::c_uint;

use qhca::Access;

use crate::ffi::*;

/// verbs.h's `IBV_ACCESS_OPTIONAL_RANGE` (a macro bindgen cannot evaluate): bits 20..=29,
/// the access flags a device may ignore.
const ACCESS_OPTIONAL_RANGE: c_uint = 0x3ff0_0000;

/// `IBV_ACCESS_*` → qhca's rights. `Err` names bits qhca does not have.
pub fn access_from_ibv(flags: c_uint) -> Result<Access, c_uint> {
    const MAP: [(c_uint, Access); 6] = [
        (IBV_ACCESS_LOCAL_WRITE, Access::LOCAL_WRITE),
        (IBV_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
        (IBV_ACCESS_REMOTE_READ, Access::REMOTE_READ),
        (IBV_ACCESS_REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
        (IBV_ACCESS_MW_BIND, Access::MW_BIND),
        (IBV_ACCESS_ON_DEMAND, Access::ON_DEMAND),
    ];
    // Hints a device may ignore (verbs.h: the optional range, and huge pages).
    let ignored = ACCESS_OPTIONAL_RANGE | IBV_ACCESS_HUGETLB;
    let mut a = Access::NONE;
    let mut left = flags & !ignored;
    for (bit, right) in MAP {
        if flags & bit != 0 {
            a = a | right;
            left &= !bit;
        }
    }
    if left != 0 {
        return Err(left);
    }
    Ok(a)
}

/// qhca's rights → `IBV_ACCESS_*` (the rights only).
pub fn access_to_ibv(a: Access) -> c_uint {
    let mut f = 0;
    for (bit, right) in [
        (IBV_ACCESS_LOCAL_WRITE, Access::LOCAL_WRITE),
        (IBV_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
        (IBV_ACCESS_REMOTE_READ, Access::REMOTE_READ),
        (IBV_ACCESS_REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
    ] {
        if a.contains(right) {
            f |= bit;
        }
    }
    f
}
