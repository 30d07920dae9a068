// SPDX-License-Identifier: GPL-2.0

//! Memory windows (ALLOC_MW; DEALLOC_MW goes through [`Verbs::destroy`]). Binding
//! and invalidating them is the process's business, on its QPs: the driver keeps only the key
//! and the PD, so that the PD stays busy and the window is freed at close.

use super::{position, Verbs};
use crate::{cmdq::Cmd, limits::Pool, uapi};
use kernel::prelude::*;

/// A memory window: the key as allocated (binds change its tag, not its index).
pub(super) struct Mw {
    pub(super) key: u32,
    pub(super) pdn: u32,
}

impl Mw {
    /// Whether `key` names this window, whatever its tag.
    pub(super) fn named_by(&self, key: u32) -> bool {
        (self.key ^ key) >> uapi::QHCA_KEY_TAG_BITS == 0
    }
}

impl Verbs<'_> {
    /// An unbound window of type `kind` (`QHCA_MW_TYPE_*`) in PD `pdn`: its key.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a bad type; `EOPNOTSUPP` without windows; `ENOENT` for a PD this context
    /// did not create; what the device answers.
    pub(crate) fn alloc_mw(&self, pdn: u32, kind: u32) -> Result<u32> {
        if !(uapi::QHCA_MW_TYPE_1..=uapi::QHCA_MW_TYPE_2B).contains(&kind) {
            return Err(EINVAL);
        }
        if self.dev.attr()?.max_mw == 0 {
            return Err(EOPNOTSUPP);
        }
        self.locked(|_, objs| {
            position(&objs.pds, |&p| p == pdn)?;
            objs.mws.reserve(1, GFP_KERNEL)?;
            let cmd = Cmd::new(uapi::QHCA_CMD_ALLOC_MW)
                .input(0, self.uar.into())
                .input(1, pdn.into())
                .input(2, kind.into());
            let key = self.charged(Pool::Mws, || self.create(cmd, "key"))?;
            if key & uapi::QHCA_MW_KEY_FLAG == 0 {
                // Not a window's key: a region's could be dereferenced through it.
                dev_err!(self.dev.dev(), "device returned window key {:#x}\n", key);
                self.dev.declare_dead();
                return Err(EIO);
            }
            // Cannot fail: room was reserved above.
            objs.mws.push(Mw { key, pdn }, GFP_KERNEL)?;
            Ok(key)
        })
    }
}
