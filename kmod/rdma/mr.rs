// SPDX-License-Identifier: GPL-2.0

//! Memory regions (`ib_mr`, which the driver allocates) of user contexts (registered, and
//! registered again: `rereg_user_mr`) and kernel consumers (their fast registration:
//! `alloc_mr`, `map_mr_sg`), and memory windows (`ib_mw`, which the
//! core allocates) of user contexts.

use super::{data, errno, pd::pd_data, ucontext::udata_of, Driver};
use core::{ffi::c_int, mem::MaybeUninit};
use kernel::{bindings, prelude::*};

/// A region as the driver allocates it for the core: the `ib_mr` first (the core fills in its
/// device, PD and object), the driver's part behind.
#[repr(C)]
struct IbMr<M> {
    ib: bindings::ib_mr,
    data: MaybeUninit<M>,
}

impl<M> IbMr<M> {
    /// A region for the core from what `make` returns (the driver's part and its key), with
    /// `iova` and `length` (the core fills in the rest). Allocated first: once the device
    /// holds the region, nothing may fail.
    fn new_raw(
        iova: u64,
        length: u64,
        make: impl FnOnce() -> Result<(M, u32)>,
    ) -> *mut bindings::ib_mr {
        Self::new_or_null(iova, length, || make().map(Some))
    }

    /// As [`IbMr::new_raw`], or NULL if `make` made nothing (a rereg that changed the region
    /// in place).
    fn new_or_null(
        iova: u64,
        length: u64,
        make: impl FnOnce() -> Result<Option<(M, u32)>>,
    ) -> *mut bindings::ib_mr {
        let b = KBox::new(
            IbMr {
                ib: pin_init::zeroed::<bindings::ib_mr>(),
                data: MaybeUninit::<M>::uninit(),
            },
            GFP_KERNEL,
        );
        let mut b = match b {
            Ok(b) => b,
            Err(e) => return Error::from(e).to_ptr(),
        };
        match make() {
            Ok(Some((m, key))) => {
                b.data.write(m);
                b.ib.lkey = key;
                b.ib.rkey = key;
                b.ib.iova = iova;
                b.ib.length = length;
                KBox::into_raw(b).cast::<bindings::ib_mr>()
            }
            Ok(None) => core::ptr::null_mut(),
            Err(e) => e.to_ptr(),
        }
    }
}

/// The driver's part of region `mr`.
///
/// # Safety
///
/// `mr` is a region of ours (made by [`IbMr::new_raw`] with `M` the driver's region type) that
/// is not deregistered during `'a`.
pub(super) unsafe fn mr_data<'a, M>(mr: *mut bindings::ib_mr) -> &'a M {
    // SAFETY: The function's contract: an `IbMr<M>` whose `data` was written.
    unsafe { (*mr.cast::<IbMr<M>>()).data.assume_init_ref() }
}

/// What a user asked to register.
#[derive(Clone, Copy)]
pub(crate) struct MrAttr {
    pub(crate) start: u64,
    pub(crate) length: u64,
    /// The address the region is known by on the wire and in SGEs.
    pub(crate) iova: u64,
    /// `IB_ACCESS_*`.
    pub(crate) access: u32,
}

/// # Safety
///
/// Called by the RDMA core only, for a user PD of a registered device of ours whose `alloc_pd`
/// succeeded, with the command's `udata`.
pub(super) unsafe extern "C" fn reg_user_mr<T: Driver>(
    pd: *mut bindings::ib_pd,
    start: u64,
    length: u64,
    iova: u64,
    access: c_int,
    _dmah: *mut bindings::ib_dmah,
    udata: *mut bindings::ib_udata,
) -> *mut bindings::ib_mr {
    if udata.is_null() {
        return EINVAL.to_ptr();
    }
    // SAFETY: The core's PD (ours, allocated) and udata, valid for the call.
    let (dev, p, mut udata) = unsafe {
        (
            data::<T>((*pd).device),
            pd_data::<T::Pd>(pd),
            udata_of(udata),
        )
    };
    let attr = MrAttr {
        start,
        length,
        iova,
        access: access as u32,
    };
    IbMr::new_raw(iova, length, || dev.reg_user_mr(p, &attr, &mut udata))
}

/// What a user's rereg changes of a region (`IB_MR_REREG_*`); what it leaves is the region's.
pub(crate) struct MrRereg {
    /// `IB_MR_REREG_TRANS`: the new range, else `None` (the region's).
    pub(crate) range: Option<MrRange>,
    /// `IB_MR_REREG_ACCESS`: the new `IB_ACCESS_*` (which the core checked), else `None`.
    pub(crate) access: Option<u32>,
}

/// A user region's range.
#[derive(Clone, Copy)]
pub(crate) struct MrRange {
    pub(crate) start: u64,
    pub(crate) length: u64,
    /// The address the region is known by on the wire and in SGEs.
    pub(crate) iova: u64,
}

/// `rereg_user_mr`: `mr` changed in place, same keys (NULL: the core then moves it to the
/// new PD), or a new region in its place, with new keys, which the core installs (it
/// destroys `mr` with [`dereg_mr`]); the driver says which. `pd` is the new PD with
/// `IB_MR_REREG_PD`, else the region's.
///
/// # Safety
///
/// Called by the RDMA core only (`ib_uverbs_rereg_mr`, which holds the region's object for
/// writing), for a region of ours, a user PD of the same device and the command's `udata`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe extern "C" fn rereg_user_mr<T: Driver>(
    mr: *mut bindings::ib_mr,
    flags: c_int,
    start: u64,
    length: u64,
    iova: u64,
    access: c_int,
    pd: *mut bindings::ib_pd,
    udata: *mut bindings::ib_udata,
) -> *mut bindings::ib_mr {
    let flags = flags as u32;
    if udata.is_null() || pd.is_null() || flags == 0 {
        return EINVAL.to_ptr();
    }
    if flags & !bindings::ib_mr_rereg_flags_IB_MR_REREG_SUPPORTED != 0 {
        return EOPNOTSUPP.to_ptr();
    }
    let trans = flags & bindings::ib_mr_rereg_flags_IB_MR_REREG_TRANS != 0;
    let change = MrRereg {
        range: trans.then_some(MrRange {
            start,
            length,
            iova,
        }),
        access: (flags & bindings::ib_mr_rereg_flags_IB_MR_REREG_ACCESS != 0)
            .then_some(access as u32),
    };
    // SAFETY: The core's region (ours, registered: `data` written) and PD (ours, allocated)
    // and udata, valid for the call; the core keeps `iova` and `length` of a region current.
    let (dev, old, p, mut udata, old_iova, old_length) = unsafe {
        (
            data::<T>((*mr).device),
            mr_data::<T::Mr>(mr),
            pd_data::<T::Pd>(pd),
            udata_of(udata),
            (*mr).iova,
            (*mr).length,
        )
    };
    let (iova, length) = match &change.range {
        Some(r) => (r.iova, r.length),
        None => (old_iova, old_length),
    };
    IbMr::new_or_null(iova, length, || {
        dev.rereg_user_mr(old, p, &change, &mut udata)
    })
}

/// # Safety
///
/// Called by the RDMA core only, for a kernel PD of a registered device of ours whose
/// `alloc_pd` succeeded.
pub(super) unsafe extern "C" fn get_dma_mr<T: Driver>(
    pd: *mut bindings::ib_pd,
    access: c_int,
) -> *mut bindings::ib_mr {
    // SAFETY: The core's PD (ours, allocated), valid for the call.
    let (dev, p) = unsafe { (data::<T>((*pd).device), pd_data::<T::Pd>(pd)) };
    if !dev.kernel_verbs() {
        return EOPNOTSUPP.to_ptr();
    }
    IbMr::new_raw(0, u64::MAX, || dev.get_dma_mr(p, access as u32))
}

/// # Safety
///
/// Called by the RDMA core only, for a kernel PD of a registered device of ours whose
/// `alloc_pd` succeeded.
pub(super) unsafe extern "C" fn alloc_mr<T: Driver>(
    pd: *mut bindings::ib_pd,
    mr_type: bindings::ib_mr_type,
    max_num_sg: u32,
) -> *mut bindings::ib_mr {
    // SAFETY: The core's PD (ours, allocated), valid for the call.
    let (dev, p) = unsafe { (data::<T>((*pd).device), pd_data::<T::Pd>(pd)) };
    if !dev.kernel_verbs() {
        return EOPNOTSUPP.to_ptr();
    }
    if mr_type != bindings::ib_mr_type_IB_MR_TYPE_MEM_REG {
        // SG_GAPS and integrity regions: not on this device.
        return EINVAL.to_ptr();
    }
    IbMr::new_raw(0, 0, || dev.alloc_mr(p, max_num_sg))
}

/// # Safety
///
/// Called by the RDMA core only (`ib_map_mr_sg`, with `page_size` set), for a region of ours
/// that `alloc_mr` returned, with the consumer's DMA-mapped list of `sg_nents` entries.
pub(super) unsafe extern "C" fn map_mr_sg<T: Driver>(
    mr: *mut bindings::ib_mr,
    sg: *mut bindings::scatterlist,
    sg_nents: c_int,
    sg_offset: *mut core::ffi::c_uint,
) -> c_int {
    // SAFETY: A region of ours, alive for the call.
    let (dev, m, page_size) = unsafe {
        (
            data::<T>((*mr).device),
            mr_data::<T::Mr>(mr),
            (*mr).page_size,
        )
    };
    if let Err(e) = dev.map_mr_start(m, page_size) {
        return e.to_errno();
    }
    // SAFETY: The core's region and list (the function's contract); `set_page` is called with
    // this region only, during this call.
    unsafe { bindings::ib_sg_to_pages(mr, sg, sg_nents, sg_offset, Some(set_page::<T>)) }
}

/// `ib_sg_to_pages`' callback: the next page of `mr`'s mapping.
///
/// # Safety
///
/// Called by `ib_sg_to_pages` only, from [`map_mr_sg`], for its region.
unsafe extern "C" fn set_page<T: Driver>(mr: *mut bindings::ib_mr, addr: u64) -> c_int {
    // SAFETY: A region of ours, alive for the call.
    let (dev, m) = unsafe { (data::<T>((*mr).device), mr_data::<T::Mr>(mr)) };
    errno(dev.map_mr_page(m, addr))
}

/// # Safety
///
/// Called by the RDMA core only, for a region `reg_user_mr`, `rereg_user_mr`, `get_dma_mr` or
/// `alloc_mr` returned.
pub(super) unsafe extern "C" fn dereg_mr<T: Driver>(
    mr: *mut bindings::ib_mr,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    let p = mr.cast::<IbMr<T::Mr>>();
    // SAFETY: Every region of ours is an `IbMr<T::Mr>` from `KBox::into_raw`, its `data`
    // written before.
    let (dev, m) = unsafe { (data::<T>((*mr).device), (*p).data.assume_init_ref()) };
    let r = dev.dereg_mr(m);
    if r.is_ok() {
        // SAFETY: The core forgets the region after this: it is dropped and freed once, here.
        unsafe {
            (*p).data.assume_init_drop();
            drop(KBox::from_raw(p));
        }
    }
    errno(r)
}

/// A window as the core allocates it: the `ib_mw` first, the driver's part behind.
#[repr(C)]
pub(super) struct IbMw<W> {
    ib: bindings::ib_mw,
    data: MaybeUninit<W>,
}

/// # Safety
///
/// Called by the RDMA core only, for a fresh window of a registered device of ours (allocated
/// with `size_ib_mw` zeroed bytes, `device`, `pd` and `type_` set).
pub(super) unsafe extern "C" fn alloc_mw<T: Driver>(
    mw: *mut bindings::ib_mw,
    udata: *mut bindings::ib_udata,
) -> c_int {
    if udata.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: The core's window, its PD (ours, allocated) and udata, valid for the call.
    let (dev, p, kind, mut udata) = unsafe {
        (
            data::<T>((*mw).device),
            pd_data::<T::Pd>((*mw).pd),
            (*mw).type_,
            udata_of(udata),
        )
    };
    match dev.alloc_mw(p, kind, &mut udata) {
        Ok((w, rkey)) => {
            // SAFETY: The core allocated an `IbMw<T::Mw>`; `data` is written once, here.
            unsafe {
                (*mw.cast::<IbMw<T::Mw>>()).data.write(w);
                (*mw).rkey = rkey;
            }
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a window whose `alloc_mw` succeeded.
pub(super) unsafe extern "C" fn dealloc_mw<T: Driver>(mw: *mut bindings::ib_mw) -> c_int {
    let p = mw.cast::<IbMw<T::Mw>>();
    // SAFETY: An allocated window of ours: `data` is initialised.
    let (dev, w) = unsafe { (data::<T>((*mw).device), (*p).data.assume_init_ref()) };
    let r = dev.dealloc_mw(w);
    if r.is_ok() {
        // SAFETY: The core frees the window after this and calls nothing more on it.
        unsafe { (*p).data.assume_init_drop() };
    }
    errno(r)
}

/// # Safety
///
/// Called by the RDMA core only (`ibv_advise_mr`), for a user PD of ours, with `num_sge`
/// entries at `sg_list`.
pub(super) unsafe extern "C" fn advise_mr<T: Driver>(
    pd: *mut bindings::ib_pd,
    advice: bindings::ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut bindings::ib_sge,
    num_sge: u32,
    _attrs: *mut bindings::uverbs_attr_bundle,
) -> c_int {
    let write = match advice {
        bindings::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH => false,
        bindings::ib_uverbs_advise_mr_advice_IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE => true,
        // Prefetching only what is present: not on qhca.
        _ => return EOPNOTSUPP.to_errno(),
    };
    let flush = bindings::ib_uverbs_advise_mr_flag_IB_UVERBS_ADVISE_MR_FLAG_FLUSH;
    if flags & !flush != 0 || (num_sge != 0 && sg_list.is_null()) {
        return EINVAL.to_errno();
    }
    let ranges = if num_sge == 0 {
        &[][..]
    } else {
        // SAFETY: the core's list of `num_sge` entries, valid for the call.
        unsafe { core::slice::from_raw_parts(sg_list, num_sge as usize) }
    };
    // SAFETY: our device and PD (allocated, a user PD: the command is a user's).
    let (dev, p) = unsafe { (data::<T>((*pd).device), pd_data::<T::Pd>(pd)) };
    errno(dev.advise_mr(p, write, flags & flush != 0, ranges))
}
