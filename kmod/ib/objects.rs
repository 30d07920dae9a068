// SPDX-License-Identifier: GPL-2.0

//! CQs, memory regions (registered, and registered again) and windows, and address handles of
//! user contexts (and the parts of kernel ones that are the same): the core's requests
//! translated to the context's commands ([`Verbs`]), which check them and run them on the
//! device. Each object keeps its context, and is destroyed through
//! [`Verbs::destroy_or_stop`]: the core's destroys do not fail.

use super::{verbs, QhcaPd, PORT};
use crate::{
    context::Ctx,
    kverbs::{
        cq::KCq,
        mr::KFastMr,
        qp::{KernelAh, KernelMr},
    },
    rdma, uapi,
};
use kernel::{
    bindings,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

/// `IB_ACCESS_*` bits, by name.
const LOCAL_WRITE: u32 = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE;
const REMOTE: u32 = bindings::ib_access_flags_IB_ACCESS_REMOTE_WRITE
    | bindings::ib_access_flags_IB_ACCESS_REMOTE_READ
    | bindings::ib_access_flags_IB_ACCESS_REMOTE_ATOMIC;
const MW_BIND: u32 = bindings::ib_access_flags_IB_ACCESS_MW_BIND;
const ON_DEMAND: u32 = bindings::ib_access_flags_IB_ACCESS_ON_DEMAND;
/// Hints a device may ignore (`IB_ACCESS_OPTIONAL`: relaxed ordering and the like).
const OPTIONAL: u32 = bindings::ib_access_flags_IB_ACCESS_OPTIONAL;

// The verbs' local and remote access bits are qhca's (the ABI header says so).
const _: () = {
    assert!(LOCAL_WRITE == uapi::QHCA_ACCESS_LOCAL_WRITE);
    assert!(REMOTE == uapi::QHCA_ACCESS_ALL & !uapi::QHCA_ACCESS_LOCAL_WRITE);
};

/// The size field of the request struct the core's requests are translated to.
pub(super) fn ioc_size<T>() -> u32 {
    core::mem::size_of::<T>() as u32
}

/// A completion queue.
pub(crate) struct QhcaCq {
    ctx: Arc<Ctx>,
    pub(super) cqn: u32,
    /// A kernel CQ's ring, which the driver polls.
    k: Option<Arc<KCq>>,
}

/// The driver input that names a user CQ's ring (at creation and at a resize): a ring of at
/// least `cqe` entries, or `EINVAL`.
fn read_ring(udata: &mut rdma::Udata<'_>, cqe: u32) -> Result<uapi::qhca_ib_create_cq> {
    let u: uapi::qhca_ib_create_cq = udata.read_in()?;
    if u.comp_mask != 0 || u.log_entries > uapi::QHCA_CQ_MAX_LOG || (1u32 << u.log_entries) < cqe {
        return Err(EINVAL);
    }
    Ok(u)
}

/// A user CQ: its ring is the process's memory, named by the driver input; its events go to
/// the core's CQ.
pub(super) fn create_cq(
    ctx: &Arc<Ctx>,
    ev: rdma::CqEvents,
    attr: &rdma::CqAttr,
    udata: &mut rdma::Udata<'_>,
) -> Result<(QhcaCq, u32)> {
    if attr.flags != 0 {
        return Err(EOPNOTSUPP);
    }
    if attr.comp_vector != 0 {
        return Err(EINVAL);
    }
    let u = read_ring(udata, attr.cqe)?;
    let a = uapi::qhca_ioc_create_cq {
        size: ioc_size::<uapi::qhca_ioc_create_cq>(),
        log_entries: u.log_entries,
        eventfd: -1,
        buf_addr: u.buf_addr,
        buf_len: u.buf_len,
        ..Default::default()
    };
    let v = verbs(ctx)?;
    let cqn = v.create_cq(&a, ev)?;
    let cq = QhcaCq {
        ctx: ctx.clone(),
        cqn,
        k: None,
    };
    if let Err(e) = udata.respond(&uapi::qhca_ib_create_cq_resp { cqn, rsvd: 0 }) {
        // The core never hears of this CQ: it goes now.
        cq.destroy()?;
        return Err(e);
    }
    Ok((cq, 1 << u.log_entries))
}

impl QhcaCq {
    /// A kernel CQ of `ctx` (the kernel context), whose ring `k` polls.
    pub(super) fn kernel(ctx: &Arc<Ctx>, cqn: u32, k: Arc<KCq>) -> Self {
        Self {
            ctx: ctx.clone(),
            cqn,
            k: Some(k),
        }
    }

    /// The ring of a kernel CQ (`None` for a user's).
    pub(super) fn kernel_cq(&self) -> Option<&Arc<KCq>> {
        self.k.as_ref()
    }

    /// A user CQ to a new ring, named by the driver input as at creation (`struct
    /// qhca_ib_create_cq`), of at least `cqe` entries; `moved` is told the ring's entries.
    /// Kernel CQs are not resized.
    pub(super) fn resize(
        &self,
        cqe: u32,
        udata: &mut rdma::Udata<'_>,
        moved: impl FnOnce(u32),
    ) -> Result {
        if self.k.is_some() {
            return Err(EOPNOTSUPP);
        }
        let u = read_ring(udata, cqe)?;
        verbs(&self.ctx)?.resize_cq(self.cqn, u.log_entries, u.buf_addr, u.buf_len, moved)
    }

    /// DESTROY_CQ; its event route goes with it.
    pub(super) fn destroy(&self) -> Result {
        verbs(&self.ctx)?.destroy_or_stop(uapi::QHCA_CMD_DESTROY_CQ, self.cqn, 0);
        Ok(())
    }
}

/// A memory region.
pub(crate) struct QhcaMr {
    ctx: Arc<Ctx>,
    /// Its key (a fast-registration region's first, by which commands name it).
    key: u32,
    /// A kernel fast-registration region's page list.
    fast: Option<Arc<KFastMr>>,
    /// A user region's registration, which a rereg keeps what it does not change of (`None`
    /// for a kernel region).
    user: Option<UserReg>,
    /// Set once a rereg replaced the region: the device and the context forgot it, and the
    /// core's `dereg_mr` that follows has nothing to do (its key may be another region's by
    /// then). Written and read under the core's lock of the region's object (the rereg holds
    /// it for writing, and destroys the region before it lets go).
    replaced: Atomic<bool>,
}

/// What a user region was registered with.
struct UserReg {
    attr: rdma::MrAttr,
    /// Pinned and watched (`QHCA_IB_REG_MR_WATCHED`).
    watched: bool,
    /// Its `IB_ACCESS_*` now: `attr.access` until a rereg changes it in place. Written under
    /// the core's lock of the region's object (a rereg holds it for writing).
    access: Atomic<u32>,
}

impl UserReg {
    fn new(attr: rdma::MrAttr, watched: bool) -> Self {
        Self {
            attr,
            watched,
            access: Atomic::new(attr.access),
        }
    }

    /// Whether rights `access` (`IB_ACCESS_*`) fit the region as registered, so that MODIFY_MR
    /// can give them to it: as on demand as it is (the device's kind of region), writable only
    /// if its pages were pinned writable, and windows only on plain pinned memory.
    fn fits(&self, access: u32) -> bool {
        let was = self.attr.access;
        (access ^ was) & ON_DEMAND == 0
            && (access & LOCAL_WRITE == 0 || was & LOCAL_WRITE != 0)
            && (access & MW_BIND == 0 || (!self.watched && was & ON_DEMAND == 0))
    }
}

/// A user region: pinned, on demand (`IB_ACCESS_ON_DEMAND`; address 0 and length `u64::MAX`
/// is the implicit region), or pinned and watched (`QHCA_IB_REG_MR_WATCHED`).
pub(super) fn reg_mr(
    pd: &QhcaPd,
    attr: &rdma::MrAttr,
    udata: &mut rdma::Udata<'_>,
) -> Result<(QhcaMr, u32)> {
    let flags = if udata.in_len() == 0 {
        0
    } else {
        let u: uapi::qhca_ib_reg_mr = udata.read_in()?;
        if u.comp_mask != 0 || u.flags & !uapi::QHCA_IB_REG_MR_WATCHED != 0 {
            return Err(EINVAL);
        }
        u.flags
    };
    reg_user(
        pd,
        UserReg::new(*attr, flags & uapi::QHCA_IB_REG_MR_WATCHED != 0),
    )
}

/// qhca's `QHCA_ACCESS_*` of the verbs' `IB_ACCESS_*` `access`, hints dropped.
///
/// # Errors
///
/// `EOPNOTSUPP` for rights this device does not have (huge-page hints, flushes, ...).
fn qhca_access(access: u32) -> Result<u32> {
    let access = access & !OPTIONAL;
    if access & !(LOCAL_WRITE | REMOTE | MW_BIND | ON_DEMAND) != 0 {
        return Err(EOPNOTSUPP);
    }
    let mut qaccess = access & (LOCAL_WRITE | REMOTE);
    if access & MW_BIND != 0 {
        qaccess |= uapi::QHCA_ACCESS_MW_BIND;
    }
    if access & ON_DEMAND != 0 {
        qaccess |= uapi::QHCA_ACCESS_ON_DEMAND;
    }
    Ok(qaccess)
}

/// REG_MR of user region `reg` in `pd`.
fn reg_user(pd: &QhcaPd, reg: UserReg) -> Result<(QhcaMr, u32)> {
    let attr = &reg.attr;
    if attr.iova != attr.start {
        // Zero-based regions: not on this device.
        return Err(EOPNOTSUPP);
    }
    let mut qaccess = qhca_access(attr.access)?;
    if reg.watched {
        qaccess |= uapi::QHCA_ACCESS_WATCHED;
    }
    let a = uapi::qhca_ioc_reg_mr {
        size: ioc_size::<uapi::qhca_ioc_reg_mr>(),
        pdn: pd.pdn,
        access: qaccess,
        addr: attr.start,
        length: attr.length,
        ..Default::default()
    };
    let key = verbs(&pd.ctx)?.reg_mr(&a)?;
    let mr = QhcaMr {
        ctx: pd.ctx.clone(),
        key,
        fast: None,
        user: Some(reg),
        replaced: Atomic::new(false),
    };
    Ok((mr, key))
}

/// A rereg of user region `old`. The PD and rights alone, that its memory allows
/// ([`UserReg::fits`]): `old` changes in place (MODIFY_MR), keys kept, `None`. Otherwise a new
/// region in `pd`, registered as [`reg_mr`] registers one, with what `change` names and
/// `old`'s registration otherwise (a watched region stays watched); then `old` leaves the
/// device and the context. If windows are bound to `old` the device keeps it as it was (IB's
/// rule: no rereg of a region with bound windows), and a new region goes: `EBUSY`. Either
/// way, no window loses its region.
///
/// # Errors
///
/// `EOPNOTSUPP` for a kernel region; `EINVAL` for driver input (this ABI has none), a PD of
/// another context, or a region replaced already; `EBUSY` with windows bound to `old`; what
/// registering the new region answers (`EDQUOT` at the user's share of regions: `old` counts
/// until it is gone); what deregistering `old` answers.
pub(super) fn rereg_mr(
    old: &QhcaMr,
    pd: &QhcaPd,
    change: &rdma::MrRereg,
    udata: &mut rdma::Udata<'_>,
) -> Result<Option<(QhcaMr, u32)>> {
    let was = old.user.as_ref().ok_or(EOPNOTSUPP)?;
    if !Arc::ptr_eq(&old.ctx, &pd.ctx) || old.replaced.load(Relaxed) {
        return Err(EINVAL);
    }
    udata.input_zero()?;
    let access = change.access.unwrap_or(was.access.load(Relaxed));
    if change.range.is_none() && was.fits(access) {
        // The PD and the rights alone, and the pages as they are pinned: in place, keys kept
        // (mlx5 and rxe keep them too). Windows bound: `EBUSY`, the region as it was.
        let qaccess = qhca_access(access)? & !uapi::QHCA_ACCESS_ON_DEMAND;
        verbs(&old.ctx)?.modify_mr(old.key, pd.pdn, qaccess)?;
        was.access.store(access, Relaxed);
        return Ok(None);
    }
    let range = change.range.unwrap_or(rdma::MrRange {
        start: was.attr.start,
        length: was.attr.length,
        iova: was.attr.iova,
    });
    let reg = UserReg::new(
        rdma::MrAttr {
            start: range.start,
            length: range.length,
            iova: range.iova,
            access,
        },
        was.watched,
    );
    let (new, key) = reg_user(pd, reg)?;
    match verbs(&old.ctx).and_then(|v| v.dereg_replaced(old.key)) {
        Ok(()) => {
            old.replaced.store(true, Relaxed);
            Ok(Some((new, key)))
        }
        Err(e) => {
            // The core never hears of the new region: it goes now.
            new.dereg()?;
            Err(e)
        }
    }
}

impl QhcaMr {
    /// Kernel region `key` of `ctx`.
    pub(super) fn new(ctx: &Arc<Ctx>, key: u32) -> Self {
        Self {
            ctx: ctx.clone(),
            key,
            fast: None,
            user: None,
            replaced: Atomic::new(false),
        }
    }

    /// Fast-registration region `key` of `ctx`, mapped through `fast`.
    pub(super) fn fast(ctx: &Arc<Ctx>, key: u32, fast: Arc<KFastMr>) -> Self {
        Self {
            ctx: ctx.clone(),
            key,
            fast: Some(fast),
            user: None,
            replaced: Atomic::new(false),
        }
    }

    /// DEREG_MR. Windows bound to the region are unbound (their keys stop working), as
    /// deregistering a region does on other devices. Nothing for a region a rereg replaced.
    pub(super) fn dereg(&self) -> Result {
        if self.replaced.load(Relaxed) {
            return Ok(());
        }
        verbs(&self.ctx)?.destroy_or_stop(
            uapi::QHCA_CMD_DEREG_MR,
            self.key,
            uapi::QHCA_DEREG_MR_UNBIND_MWS,
        );
        Ok(())
    }
}

impl KernelMr for QhcaMr {
    fn fast_mr(&self) -> Option<&KFastMr> {
        self.fast.as_deref()
    }
}

/// A memory window.
pub(crate) struct QhcaMw {
    ctx: Arc<Ctx>,
    key: u32,
}

/// An unbound window: type 1, or type 2 (qhca's 2B, bound to a QP by a work request).
pub(super) fn alloc_mw(
    pd: &QhcaPd,
    kind: bindings::ib_mw_type,
    udata: &mut rdma::Udata<'_>,
) -> Result<(QhcaMw, u32)> {
    udata.input_zero()?;
    let kind = match kind {
        bindings::ib_mw_type_IB_MW_TYPE_1 => uapi::QHCA_MW_TYPE_1,
        bindings::ib_mw_type_IB_MW_TYPE_2 => uapi::QHCA_MW_TYPE_2B,
        _ => return Err(EINVAL),
    };
    let key = verbs(&pd.ctx)?.alloc_mw(pd.pdn, kind)?;
    Ok((
        QhcaMw {
            ctx: pd.ctx.clone(),
            key,
        },
        key,
    ))
}

impl QhcaMw {
    /// DEALLOC_MW (which unbinds it).
    pub(super) fn dealloc(&self) -> Result {
        verbs(&self.ctx)?.destroy_or_stop(uapi::QHCA_CMD_DEALLOC_MW, self.key, 0);
        Ok(())
    }
}

/// An address handle: a user context's AH of the device, or a kernel AH, which is the driver's
/// alone (its address vector goes in each datagram WQE; see [`crate::kverbs`]).
pub(crate) enum QhcaAh {
    User { ctx: Arc<Ctx>, ah: u32 },
    Kernel(uapi::qhca_ah_attr),
}

impl KernelAh for QhcaAh {
    fn kernel_av(&self) -> Option<uapi::qhca_ah_attr> {
        match self {
            QhcaAh::Kernel(av) => Some(*av),
            QhcaAh::User { .. } => None,
        }
    }
}

/// A kernel AH in kernel PD `pd`: its address vector, checked as the device checks one (the
/// device checks it again, in every WQE). Never sleeps.
pub(super) fn create_kernel_ah(pd: &QhcaPd, av: &rdma::Av) -> Result<QhcaAh> {
    if !pd.ctx.kernel {
        return Err(EINVAL);
    }
    let av = qhca_av(av)?;
    crate::verbs::check_av(&av)?;
    Ok(QhcaAh::Kernel(av))
}

/// qhca's address vector of the core's.
pub(super) fn qhca_av(av: &rdma::Av) -> Result<uapi::qhca_ah_attr> {
    if av.port != PORT {
        return Err(EINVAL);
    }
    Ok(uapi::qhca_ah_attr {
        dgid: av.dgid,
        flow_label: av.flow_label,
        traffic_class: av.traffic_class,
        hop_limit: av.hop_limit,
        sl: av.sl,
        port_num: PORT as u8,
        sgid_index: av.sgid_index,
        rsvd: [0; 7],
    })
}

/// A user AH; its number, which UD work requests carry, goes back in the driver's response.
pub(super) fn create_ah(pd: &QhcaPd, av: &rdma::Av, udata: &mut rdma::Udata<'_>) -> Result<QhcaAh> {
    udata.input_zero()?;
    let v = verbs(&pd.ctx)?;
    let ah = v.create_ah(pd.pdn, &qhca_av(av)?)?;
    let a = QhcaAh::User {
        ctx: pd.ctx.clone(),
        ah,
    };
    if let Err(e) = udata.respond(&uapi::qhca_ib_create_ah_resp { ah, rsvd: 0 }) {
        a.destroy()?;
        return Err(e);
    }
    Ok(a)
}

impl QhcaAh {
    /// DESTROY_AH of a user's AH; nothing for a kernel AH (the device has none).
    pub(super) fn destroy(&self) -> Result {
        if let QhcaAh::User { ctx, ah } = self {
            verbs(ctx)?.destroy_or_stop(uapi::QHCA_CMD_DESTROY_AH, *ah, 0);
        }
        Ok(())
    }
}
