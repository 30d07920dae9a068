// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Protection domains, memory regions and memory windows: the core's commands, with qhca's
//! driver data (`struct qhca_ib_alloc_pd_resp`, `struct qhca_ib_reg_mr`).

use core::ffi::{c_int, c_void};
use core::mem::size_of_val;

use qhca_uapi::{qhca_ib_alloc_pd_resp, qhca_ib_reg_mr};
use qhca_verbs_abi::ffi::*;

use crate::cmd::*;

/// A protection domain: libibverbs's `struct ibv_pd` first, then the device's PD number.
#[repr(C)]
pub(crate) struct Pd {
    ibv: ibv_pd,
    pdn: u32,
}

/// `alloc_pd`: the driver answers `struct qhca_ib_alloc_pd_resp`.
pub(crate) unsafe extern "C" fn alloc_pd(ibctx: *mut ibv_context) -> *mut ibv_pd {
    let pd = Box::into_raw(Box::new(Pd {
        ibv: ibv_pd::default(),
        pdn: 0,
    }));
    let mut cmd = Cmd::<16, NoData>::new(NoData);
    let mut resp = Resp::<4, qhca_ib_alloc_pd_resp>::new();
    // SAFETY: `pd` starts with the `struct ibv_pd` libibverbs fills in; the buffers are the
    // sizes given.
    let ret = unsafe {
        ibv_cmd_alloc_pd(
            ibctx,
            pd.cast(),
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        // SAFETY: ours, not handed out.
        return unsafe { discard(pd, ret) };
    }
    // SAFETY: ours.
    unsafe { (*pd).pdn = resp.drv.pdn };
    pd.cast()
}

/// `dealloc_pd`.
pub(crate) unsafe extern "C" fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: `pd` came from `alloc_pd`, a `Pd`; the program's last use.
    unsafe { free_if_destroyed(ibv_cmd_dealloc_pd(pd), pd.cast::<Pd>()) }
}

/// A memory region: rdma-core's `struct verbs_mr` (`struct ibv_mr`, its type, its access),
/// which `ibv_cmd_reg_mr` fills in.
#[repr(C)]
struct Mr {
    ibv: ibv_mr,
    mr_type: u32,
    access: c_int,
}

/// `reg_mr`: pinned, or on demand with `IBV_ACCESS_ON_DEMAND` (address 0 and `SIZE_MAX` is the
/// implicit region). The region's address is its iova (`ibv_reg_mr_iova` with another one:
/// `EOPNOTSUPP` from the driver).
pub(crate) unsafe extern "C" fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    hca_va: u64,
    access: c_int,
) -> *mut ibv_mr {
    let mr = Box::into_raw(Box::new(Mr {
        ibv: ibv_mr::default(),
        mr_type: 0,
        access: 0,
    }));
    let mut cmd = Cmd::<REG_MR_CMD, qhca_ib_reg_mr>::new(qhca_ib_reg_mr::default());
    let mut resp = Resp::<REG_MR_RESP, NoData>::new();
    // SAFETY: libibverbs's arguments, passed on; `mr` is a `struct verbs_mr`; the buffers are
    // the sizes given.
    let ret = unsafe {
        ibv_cmd_reg_mr(
            pd,
            addr,
            length,
            hca_va,
            access,
            mr.cast(),
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            REG_MR_RESP,
        )
    };
    if ret != 0 {
        // SAFETY: ours, not handed out.
        return unsafe { discard(mr, ret) };
    }
    mr.cast()
}

/// `rereg_mr`: the core's command, with no driver data. The driver changes the PD or the
/// rights alone in place (keys kept), or registers a new region in the old one's place (a new
/// translation, or rights its pinned pages cannot take: new keys, which `ibv_cmd_rereg_mr`
/// takes from the response); it refuses while windows are bound to the region (`EBUSY`: the
/// old region stays as it was). The
/// region's address is its iova, as for [`reg_mr`]. 0, or the errno (also in `errno`), which
/// libibverbs's `ibv_rereg_mr` turns into `IBV_REREG_MR_ERR_CMD`, as for other providers.
pub(crate) unsafe extern "C" fn rereg_mr(
    vmr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    if flags as u32 & IBV_REREG_MR_CHANGE_PD != 0 && pd.is_null() {
        set_errno(libc::EINVAL);
        return libc::EINVAL;
    }
    let mut cmd = Cmd::<REREG_MR_CMD, NoData>::new(NoData);
    let mut resp = Resp::<REREG_MR_RESP, NoData>::new();
    // SAFETY: libibverbs's arguments, passed on: `vmr` came from `reg_mr`, a `struct
    // verbs_mr`, and `pd` is read only with `IBV_REREG_MR_CHANGE_PD` (then not NULL); the
    // buffers are the sizes given.
    let ret = unsafe {
        ibv_cmd_rereg_mr(
            vmr.cast(),
            flags as u32,
            addr,
            length,
            addr as u64,
            access,
            pd,
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        set_errno(ret);
        return ret;
    }
    // SAFETY: `vmr` is an `Mr` (above), which libibverbs lets only this op change now.
    unsafe { (*vmr.cast::<Mr>()).reregistered(flags, access) };
    0
}

impl Mr {
    /// What a successful rereg with `flags` (`IBV_REREG_MR_*`) leaves of the region's stored
    /// access (which libibverbs reads: `ibv_dereg_mr` leaves an on-demand region's range to
    /// `fork`): `access` if the rereg changed it.
    fn reregistered(&mut self, flags: c_int, access: c_int) {
        if flags as u32 & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            self.access = access;
        }
    }
}

/// `dereg_mr`.
pub(crate) unsafe extern "C" fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: `mr` came from `reg_mr`, an `Mr` (a `struct verbs_mr`); the program's last use.
    unsafe { free_if_destroyed(ibv_cmd_dereg_mr(mr.cast()), mr.cast::<Mr>()) }
}

/// `alloc_mw`: type 1 or 2 (qhca's 2B); the core's response carries its key.
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut ibv_pd, kind: ibv_mw_type) -> *mut ibv_mw {
    let mw = Box::into_raw(Box::new(ibv_mw::default()));
    let mut cmd = Cmd::<ALLOC_MW_CMD, NoData>::new(NoData);
    let mut resp = Resp::<8, NoData>::new();
    // SAFETY: libibverbs's arguments, passed on; the buffers are the sizes given.
    let ret = unsafe {
        ibv_cmd_alloc_mw(
            pd,
            kind,
            mw,
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        // SAFETY: ours, not handed out.
        return unsafe { discard(mw, ret) };
    }
    mw
}

/// `dealloc_mw`.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: `mw` came from `alloc_mw`; the program's last use.
    unsafe { free_if_destroyed(ibv_cmd_dealloc_mw(mw), mw) }
}

/// `advise_mr`: prefetch ranges of on-demand regions (`IBV_ADVISE_MR_FLAG_FLUSH`: now, else in
/// the background).
pub(crate) unsafe extern "C" fn advise_mr(
    pd: *mut ibv_pd,
    advice: ib_uverbs_advise_mr_advice,
    flags: u32,
    sg_list: *mut ibv_sge,
    num_sge: u32,
) -> c_int {
    // SAFETY: libibverbs's arguments, passed on.
    unsafe { ibv_cmd_advise_mr(pd, advice, flags, sg_list, num_sge) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The region `ibv_cmd_reg_mr` leaves with `access`.
    fn registered(access: c_int) -> Mr {
        Mr {
            ibv: ibv_mr::default(),
            mr_type: 0,
            access,
        }
    }

    #[test]
    fn rereg_keeps_access_unless_it_changes() {
        let old = (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) as c_int;
        let new = IBV_ACCESS_LOCAL_WRITE as c_int;
        for flags in [
            IBV_REREG_MR_CHANGE_TRANSLATION,
            IBV_REREG_MR_CHANGE_PD,
            IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD,
        ] {
            let mut mr = registered(old);
            mr.reregistered(flags as c_int, 0);
            assert_eq!(mr.access, old, "flags {flags:#x}");
        }
        let mut mr = registered(old);
        mr.reregistered(IBV_REREG_MR_CHANGE_ACCESS as c_int, new);
        assert_eq!(mr.access, new);
        let mut mr = registered(old);
        mr.reregistered(IBV_REREG_MR_FLAGS_SUPPORTED as c_int, new);
        assert_eq!(mr.access, new);
    }

    /// `struct verbs_mr` of rdma-core 44 and 56: `struct ibv_mr`, its type, its access.
    #[test]
    fn mr_is_verbs_mr() {
        assert_eq!(core::mem::size_of::<ibv_mr>(), 48);
        assert_eq!(core::mem::offset_of!(Mr, access), 52);
        assert_eq!(core::mem::size_of::<Mr>(), 56);
    }
}
