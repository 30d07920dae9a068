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

/// A window bind's `mw_access_flags` → the window's rights, which are remote ones only. Local
/// write is taken and dropped, as mlx5 takes it: a window is reached only through its R_Key, so a
/// local right means nothing for it (rdma-core's tests bind with `LOCAL_WRITE | REMOTE_WRITE`).
/// `Err` names bits qhca's windows do not have (the region's own rights, zero-based windows).
pub fn mw_access_from_ibv(flags: c_uint) -> Result<Access, c_uint> {
    let region_only = flags & (IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND);
    if region_only != 0 {
        return Err(region_only);
    }
    access_from_ibv(flags & !IBV_ACCESS_LOCAL_WRITE)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_rights_are_remote_ones() {
        let rw = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
        assert_eq!(
            mw_access_from_ibv(rw).map(|a| a.0),
            Ok(Access::REMOTE_WRITE.0)
        );
        assert_eq!(mw_access_from_ibv(0).map(|a| a.0), Ok(0));
        assert_eq!(
            mw_access_from_ibv(IBV_ACCESS_MW_BIND),
            Err(IBV_ACCESS_MW_BIND)
        );
        assert_eq!(
            mw_access_from_ibv(IBV_ACCESS_ON_DEMAND),
            Err(IBV_ACCESS_ON_DEMAND)
        );
        assert_eq!(
            mw_access_from_ibv(IBV_ACCESS_ZERO_BASED),
            Err(IBV_ACCESS_ZERO_BASED)
        );
    }
}
