// SPDX-License-Identifier: GPL-2.0

//! A port's hardware counters as the core shows them (`rdma statistic show link DEV/1`,
//! `/sys/class/infiniband/DEV/ports/1/hw_counters/`): names fixed at build time, values read
//! from the device when asked (at most every `RDMA_HW_STATS_DEFAULT_LIFESPAN` ms).

use super::{data, Driver};
use core::ffi::c_int;
use kernel::{bindings, prelude::*};

/// The names of a port's counters, in the order [`Driver::port_counters`] fills them.
pub(crate) struct StatNames<const N: usize>([bindings::rdma_stat_desc; N]);

// SAFETY: Only read (by the core, which reads the names); the pointers are to static C strings.
unsafe impl<const N: usize> Sync for StatNames<N> {}

impl<const N: usize> StatNames<N> {
    #[expect(
        clippy::disallowed_methods,
        reason = "`CStrExt::as_char_ptr` is not a `const fn`; the cast gives the kernel's `c_char`"
    )]
    pub(crate) const fn new(names: [&'static CStr; N]) -> Self {
        let mut d = [bindings::rdma_stat_desc {
            name: core::ptr::null(),
            flags: 0,
            priv_: core::ptr::null(),
        }; N];
        let mut i = 0;
        while i < N {
            d[i].name = names[i].as_ptr().cast();
            i += 1;
        }
        Self(d)
    }

    pub(crate) fn descs(&'static self) -> &'static [bindings::rdma_stat_desc] {
        &self.0
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a registered device of ours.
pub(super) unsafe extern "C" fn alloc_hw_port_stats<T: Driver>(
    ib: *mut bindings::ib_device,
    _port: u32,
) -> *mut bindings::rdma_hw_stats {
    // SAFETY: Our device (see `query_device`).
    let descs = unsafe { data::<T>(ib) }.port_counter_names();
    // SAFETY: `descs` is static; the core frees the structure (not the names) when the device
    // goes.
    unsafe {
        bindings::rdma_alloc_hw_stats_struct(
            descs.as_ptr(),
            descs.len() as c_int,
            bindings::RDMA_HW_STATS_DEFAULT_LIFESPAN as usize,
        )
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a registered device of ours and a structure its
/// `alloc_hw_port_stats` made (with `num_counters` values), under the structure's lock.
pub(super) unsafe extern "C" fn get_hw_stats<T: Driver>(
    ib: *mut bindings::ib_device,
    stats: *mut bindings::rdma_hw_stats,
    port: u32,
    _index: c_int,
) -> c_int {
    // SAFETY: The core's structure, valid and locked for the call.
    let (n, values) = unsafe { ((*stats).num_counters, (*stats).value.as_mut_ptr()) };
    let Ok(len) = usize::try_from(n) else {
        return EINVAL.to_errno();
    };
    // SAFETY: The structure holds `num_counters` values after its header (as allocated).
    let out = unsafe { core::slice::from_raw_parts_mut(values, len) };
    // SAFETY: Our device (see `query_device`).
    match unsafe { data::<T>(ib) }.port_counters(port, out) {
        // Every counter updated.
        Ok(()) => n,
        Err(e) => e.to_errno(),
    }
}
