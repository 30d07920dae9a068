// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Memory windows: remote keys for byte ranges of a region, with their own rights, bound and
//! invalidated by work requests on a send queue, with no system call (IBA 10.6.7; the
//! semantics of `ibv_alloc_mw`, `ibv_bind_mw`, `IBV_WR_BIND_MW`, `IBV_WR_LOCAL_INV` and
//! `IBV_WR_SEND_WITH_INV`). Only allocating and freeing a window is an ioctl.
//!
//! ```text
//! let mut mw = pd.alloc_mw(MwType::Type2B)?;
//! let bind = mw.bind(&mr, mr.addr() + 64, 128, Access::REMOTE_WRITE);
//! qp.post_send(&[SendWr::new(1, bind, &[])])?;      // then hand mw.rkey() to the peer
//! ...
//! qp.post_send(&[SendWr::new(2, mw.invalidate(), &[])])?;
//! ```
//!
//! A window gives a peer access to memory the region already exposes to the device, no more:
//! the device checks every bind (the region's PD and `MW_BIND` right, the range, the rights) and
//! every access through the window's key, and dropping the region unbinds its windows. So the
//! safe API stays sound whatever the requests say.

use std::sync::Arc;

use qhca_uapi::{
    qhca_ioc_alloc_mw, qhca_ioc_handle, QHCA_KEY_TAG_BITS, QHCA_MW_TYPE_1, QHCA_MW_TYPE_2A,
    QHCA_MW_TYPE_2B,
};

use crate::error::Result;
use crate::pd::{Access, Mr, Pd, PdInner};
use crate::request::Request;
use crate::wqe::{MwBind, WrOp};

/// The kind of a window (IBA 10.6.7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Type 1: usable through any QP of its PD; rebound at will; a zero-length bind unbinds it.
    /// Not invalidated by LOCAL_INV or SEND_WITH_INV.
    Type1,
    /// Type 2A: bound to the QP that posted the bind and usable through it alone (checked by
    /// QPN); unbound by LOCAL_INV or by a peer's SEND_WITH_INV before it is bound again.
    Type2A,
    /// Type 2B: as 2A, checked by QPN and PD. What `ibv_alloc_mw(IBV_MW_TYPE_2)` gives.
    Type2B,
}

impl MwType {
    fn raw(self) -> u32 {
        match self {
            MwType::Type1 => QHCA_MW_TYPE_1,
            MwType::Type2A => QHCA_MW_TYPE_2A,
            MwType::Type2B => QHCA_MW_TYPE_2B,
        }
    }
}

/// The next key of a window: same index, tag plus one (`ibv_inc_rkey`).
pub fn inc_rkey(key: u32) -> u32 {
    let tag_mask = (1u32 << QHCA_KEY_TAG_BITS) - 1;
    (key & !tag_mask) | (key.wrapping_add(1) & tag_mask)
}

/// A memory window of a PD ([`Pd::alloc_mw`]). Dropping it frees it in the device, which
/// unbinds it if it is bound.
#[derive(Debug)]
pub struct Mw {
    pd: Arc<PdInner>,
    ty: MwType,
    /// The key of the last bind this value built (or the allocated one). Any tag names the
    /// window to DEALLOC_MW.
    key: u32,
}

impl Pd {
    /// `ALLOC_MW`: an unbound window of type `ty` (`EOPNOTSUPP` on a device without windows).
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw> {
        let mut req = qhca_ioc_alloc_mw::request();
        req.pdn = self.pdn();
        req.type_ = ty.raw();
        self.context().cmd_alloc_mw(&mut req)?;
        Ok(Mw {
            pd: self.inner.clone(),
            ty,
            key: req.key,
        })
    }
}

impl Mw {
    /// Its type.
    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// The PD number it belongs to.
    pub fn pdn(&self) -> u32 {
        self.pd.pdn
    }

    /// The remote key of the last bind built by [`Mw::bind`] (the one to hand to the peer), or
    /// the key as allocated, which names no bound window.
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// The BIND_MW request that binds the window to `len` bytes at `addr` of `mr`, with the
    /// rights in `access` (among `REMOTE_READ`, `REMOTE_WRITE`, `REMOTE_ATOMIC`; the last two
    /// need `LOCAL_WRITE` on the region, and the region needs [`Access::MW_BIND`]). The window's
    /// key becomes the next one ([`inc_rkey`]): the key of an earlier bind stops working once
    /// the request runs. Post it on a QP of the window's PD: for a type 2 window the QP it will
    /// be usable through, and the window must be unbound. The device checks all of it; a bind
    /// it refuses completes with [`crate::WcStatus::MwBindErr`] and changes nothing (the QP goes
    /// to ERR, and [`Mw::rkey`] then names a bind that did not happen).
    pub fn bind(&mut self, mr: &Mr<'_>, addr: u64, len: u64, access: Access) -> WrOp {
        self.bind_raw(mr.lkey(), addr, len, access)
    }

    /// [`Mw::bind`] by the region's key: for regions this crate does not hold as an [`Mr`].
    pub fn bind_raw(&mut self, mr_key: u32, addr: u64, len: u64, access: Access) -> WrOp {
        let new_key = inc_rkey(self.key);
        let op = WrOp::BindMw(MwBind {
            mw_key: self.key,
            new_key,
            mr_key,
            addr,
            length: len,
            access: access.0,
        });
        self.key = new_key;
        op
    }

    /// The zero-length bind that unbinds a type 1 window (its key changes too).
    pub fn unbind(&mut self) -> WrOp {
        self.bind_raw(0, 0, 0, Access::NONE)
    }

    /// The LOCAL_INV request that unbinds a bound type 2 window (post it on a QP of its PD).
    pub fn invalidate(&self) -> WrOp {
        WrOp::LocalInv { rkey: self.key }
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        let mut req = qhca_ioc_handle::request();
        req.handle = self.key;
        // A failure (device gone) leaves nothing of ours reachable: a window exposes only
        // memory of regions, which unbind their windows when they go.
        let _ = self.pd.ctx.cmd_dealloc_mw(&mut req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_changes_only_the_tag() {
        assert_eq!(inc_rkey(0x8000_1203), 0x8000_1204);
        assert_eq!(inc_rkey(0x8000_12ff), 0x8000_1200);
        assert_eq!(inc_rkey(0xffff_ffff), 0xffff_ff00);
    }
}
