// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Protection domains, memory regions (pinned and on-demand), memory windows.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint, c_void};
use core::ptr::null_mut;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use qhca::{Access, Advice, MwType, OdpMr};

use crate::access::access_from_ibv;
use crate::device::Ctx;
use crate::ffi::*;
use crate::misc::{debug, fail_errno, fail_null, lock, set_errno, unsupported};
use crate::obj::{impl_obj, Obj};
use crate::real::forward;

/// A protection domain. `users` counts the regions, windows, QPs and address handles made on
/// it: `ibv_dealloc_pd` is `EBUSY` while there are any, as the kernel's is.
#[repr(C)]
pub(crate) struct Pd {
    ibv: UnsafeCell<ibv_pd>,
    pub(crate) pd: qhca::Pd,
    users: AtomicUsize,
    /// On-demand regions by L_Key, for `ibv_advise_mr` (the address of the `Mr`).
    odp: Mutex<HashMap<u32, usize>>,
}
impl_obj!(Pd, ibv_pd);

impl Pd {
    pub(crate) fn hold(&self) {
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn release(&self) {
        self.users.fetch_sub(1, Ordering::Relaxed);
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            ibv_alloc_pd(context) as fn(*mut ibv_context) -> *mut ibv_pd,
            null_mut()
        );
    };
    let pd = match qhca::Pd::new(&ctx.ctx) {
        Ok(pd) => pd,
        Err(e) => return fail_null("ibv_alloc_pd", &e),
    };
    let ibv = ibv_pd {
        context: ctx.ibv(),
        handle: pd.pdn(),
    };
    ctx.hold();
    Box::new(Pd {
        ibv: UnsafeCell::new(ibv),
        pd,
        users: AtomicUsize::new(0),
        odp: Mutex::new(HashMap::new()),
    })
    .into_ibv()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: the program passes a live PD.
    let Some((p, ctx)) = (unsafe { Pd::ours(pd) }) else {
        return forward!(ibv_dealloc_pd(pd) as fn(*mut ibv_pd) -> c_int, libc::ENOSYS);
    };
    let users = p.users.load(Ordering::Relaxed);
    if users > 0 {
        debug(format_args!(
            "ibv_dealloc_pd: {users} objects still use the PD"
        ));
        return libc::EBUSY;
    }
    ctx.release();
    // SAFETY: made by `ibv_alloc_pd`, unused by any object, and the program's last use.
    drop(unsafe { Pd::from_ibv(pd) });
    0
}

enum Region {
    Pinned(qhca::Mr<'static>),
    OnDemand(OdpMr),
}

/// A memory region.
#[repr(C)]
pub(crate) struct Mr {
    ibv: UnsafeCell<ibv_mr>,
    /// `None` after a failed deregistration (the object is kept for the program's pointer).
    region: Option<Region>,
}
impl_obj!(Mr, ibv_mr);

fn reg(pd: &Pd, ctx: &Ctx, addr: *mut c_void, length: usize, access: c_uint) -> *mut ibv_mr {
    let rights = match access_from_ibv(access) {
        Ok(a) => a,
        Err(bits) => {
            debug(format_args!(
                "ibv_reg_mr: access bits {bits:#x} are not qhca's"
            ));
            set_errno(libc::EINVAL);
            return null_mut();
        }
    };
    let region = if rights.contains(Access::ON_DEMAND) {
        let rights = Access(rights.0 & !Access::ON_DEMAND.0);
        // SAFETY: C semantics: the program lets the device write the range (its rights say
        // so) and accesses it only as memory a device may change at any time; an on-demand
        // region needs no promise about the memory's lifetime.
        let r = unsafe {
            if addr.is_null() && length == usize::MAX {
                pd.pd.reg_odp_implicit_raw(rights)
            } else {
                pd.pd.reg_odp_mr_raw(addr.cast(), length, rights)
            }
        };
        r.map(Region::OnDemand)
    } else {
        // SAFETY: C semantics (ibv_reg_mr(3)): the memory stays mapped and is not reused for
        // anything else until `ibv_dereg_mr` succeeds, and the program accesses it knowing
        // that the device may read and write it meanwhile. What `reg_mr_raw` asks beyond that
        // (no access but the region's own copies) protects those copies, which this layer
        // never makes: the program's accesses meet no Rust access to the memory.
        unsafe { pd.pd.reg_mr_raw(addr.cast(), length, rights) }.map(Region::Pinned)
    };
    let region = match region {
        Ok(r) => r,
        Err(e) => return fail_null("ibv_reg_mr", &e),
    };
    let (lkey, rkey) = match &region {
        Region::Pinned(m) => (m.lkey(), m.rkey()),
        Region::OnDemand(m) => (m.lkey(), m.rkey()),
    };
    let ibv = ibv_mr {
        context: ctx.ibv(),
        pd: pd.ibv(),
        addr,
        length,
        handle: lkey,
        lkey,
        rkey,
    };
    let on_demand = matches!(region, Region::OnDemand(_));
    let mr = Box::new(Mr {
        ibv: UnsafeCell::new(ibv),
        region: Some(region),
    });
    pd.hold();
    ctx.hold();
    let addr = mr.into_ibv();
    if on_demand {
        lock(&pd.odp).insert(lkey, addr as usize);
    }
    addr
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the program passes a live PD.
    let Some((p, ctx)) = (unsafe { Pd::ours(pd) }) else {
        return forward!(
            ibv_reg_mr(pd, addr, length, access)
                as fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
            null_mut()
        );
    };
    reg(p, ctx, addr, length, access as c_uint)
}

/// The I/O virtual address of a qhca region is its address: another one is not supported.
fn check_iova(addr: *mut c_void, iova: u64) -> bool {
    if addr as u64 == iova {
        return true;
    }
    unsupported("ibv_reg_mr_iova with an iova other than the address");
    false
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the program passes a live PD.
    let Some((p, ctx)) = (unsafe { Pd::ours(pd) }) else {
        return forward!(
            ibv_reg_mr_iova(pd, addr, length, iova, access)
                as fn(*mut ibv_pd, *mut c_void, usize, usize, c_int) -> *mut ibv_mr,
            null_mut()
        );
    };
    if !check_iova(addr, iova as u64) {
        return null_mut();
    }
    reg(p, ctx, addr, length, access as c_uint)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: the program passes a live PD.
    let Some((p, ctx)) = (unsafe { Pd::ours(pd) }) else {
        return forward!(
            ibv_reg_mr_iova2(pd, addr, length, iova, access)
                as fn(*mut ibv_pd, *mut c_void, usize, u64, c_uint) -> *mut ibv_mr,
            null_mut()
        );
    };
    if !check_iova(addr, iova) {
        return null_mut();
    }
    reg(p, ctx, addr, length, access)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: the program passes a live region.
    let Some((_, ctx)) = (unsafe { Mr::ours(mr) }) else {
        return forward!(ibv_dereg_mr(mr) as fn(*mut ibv_mr) -> c_int, libc::ENOSYS);
    };
    // SAFETY: a live region of ours has a live PD of ours (it holds it).
    let Some((pd, _)) = (unsafe { Pd::ours((*mr).pd) }) else {
        return libc::EINVAL;
    };
    // SAFETY: our own live region's program-visible struct.
    let lkey = unsafe { (*mr).lkey };
    // Out of `ibv_advise_mr`'s reach before the object can go away.
    lock(&pd.odp).remove(&lkey);
    // SAFETY: made by `reg`; the program does not use it after a successful deregistration,
    // and after a failed one the same allocation is given back (`Box::leak` below), so the
    // program's pointer stays valid.
    let mut m = unsafe { Mr::from_ibv(mr) };
    let res = match m.region.take() {
        Some(Region::Pinned(r)) => r.dereg(),
        Some(Region::OnDemand(r)) => r.dereg(),
        // A deregistration failed before: the registration's fate is the device's now.
        None => {
            let _ = Box::leak(m);
            return libc::EINVAL;
        }
    };
    match res {
        Ok(()) => {
            pd.release();
            ctx.release();
            drop(m);
            0
        }
        Err(e) => {
            // The registration may still be live (the provider leaks what it cannot release),
            // and the memory must not be reused (ibv_dereg_mr(3)); the program's pointer stays
            // valid, with no region behind it.
            let _ = Box::leak(m);
            fail_errno("ibv_dereg_mr", &e)
        }
    }
}

/// `verbs_context.advise_mr`: what the inline `ibv_advise_mr` calls.
pub(crate) unsafe extern "C" fn advise_mr_op(
    pd: *mut ibv_pd,
    advice: ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    // SAFETY: the inline function passes the program's PD, whose context has this op: ours.
    let Some((p, _)) = (unsafe { Pd::ours(pd) }) else {
        return libc::EINVAL;
    };
    let advice = match advice {
        IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH => Advice::Prefetch,
        IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE => Advice::PrefetchWrite,
        _ => return unsupported("ibv_advise_mr with IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT"),
    };
    if flags & !IB_UVERBS_ADVISE_MR_FLAG_FLUSH != 0 || sg_list.is_null() || num_sge == 0 {
        return libc::EINVAL;
    }
    let flush = flags & IB_UVERBS_ADVISE_MR_FLAG_FLUSH != 0;
    for i in 0..num_sge as usize {
        // SAFETY: the program passes `num_sge` entries.
        let sge = unsafe { *sg_list.add(i) };
        // The map's lock is held across the advice: `ibv_dereg_mr` takes the region out of the
        // map under it before freeing anything.
        let odp = lock(&p.odp);
        let Some(&m) = odp.get(&sge.lkey) else {
            debug(format_args!(
                "ibv_advise_mr: L_Key {:#x} is no on-demand region of the PD",
                sge.lkey
            ));
            return libc::EINVAL;
        };
        // SAFETY: in the map only while the region is registered, and it stays so while we
        // hold the lock (above).
        let m = unsafe { &*(m as *const Mr) };
        let Some(Region::OnDemand(r)) = &m.region else {
            return libc::EINVAL;
        };
        if let Err(e) = r.advise(advice, sge.addr, u64::from(sge.length), flush) {
            return fail_errno("ibv_advise_mr", &e);
        }
    }
    0
}

/// A memory window.
#[repr(C)]
pub(crate) struct Mw {
    ibv: UnsafeCell<ibv_mw>,
    pub(crate) mw: Mutex<qhca::Mw>,
}
impl_obj!(Mw, ibv_mw);

impl Mw {
    /// Sets the key the program sees (`mw->rkey`) after a bind was posted.
    pub(crate) fn set_rkey(&self, rkey: u32) {
        // SAFETY: a single aligned field store into our own object; the program reads it
        // only after the verb that changes it returns.
        unsafe { (*self.ibv()).rkey = rkey };
    }
}

/// `ops.alloc_mw`: what the inline `ibv_alloc_mw` calls.
pub(crate) unsafe extern "C" fn alloc_mw_op(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw {
    // SAFETY: the inline function passes the program's PD, whose context has this op: ours.
    let Some((p, ctx)) = (unsafe { Pd::ours(pd) }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    let ty = match type_ {
        IBV_MW_TYPE_1 => MwType::Type1,
        IBV_MW_TYPE_2 => MwType::Type2B,
        _ => {
            set_errno(libc::EINVAL);
            return null_mut();
        }
    };
    let mw = match p.pd.alloc_mw(ty) {
        Ok(mw) => mw,
        Err(e) => return fail_null("ibv_alloc_mw", &e),
    };
    let ibv = ibv_mw {
        context: ctx.ibv(),
        pd,
        rkey: mw.rkey(),
        handle: mw.rkey(),
        type_,
    };
    p.hold();
    ctx.hold();
    Box::new(Mw {
        ibv: UnsafeCell::new(ibv),
        mw: Mutex::new(mw),
    })
    .into_ibv()
}

/// `ops.dealloc_mw`.
pub(crate) unsafe extern "C" fn dealloc_mw_op(mw: *mut ibv_mw) -> c_int {
    // SAFETY: the inline function passes the program's window, whose context has this op.
    let Some((_, ctx)) = (unsafe { Mw::ours(mw) }) else {
        return libc::EINVAL;
    };
    // SAFETY: a live window of ours has a live PD of ours.
    if let Some((pd, _)) = unsafe { Pd::ours((*mw).pd) } {
        pd.release();
    }
    ctx.release();
    // SAFETY: made by `alloc_mw_op`, and the program's last use; dropping the provider's
    // window deallocates it in the device.
    drop(unsafe { Mw::from_ibv(mw) });
    0
}
