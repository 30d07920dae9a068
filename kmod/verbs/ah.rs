// SPDX-License-Identifier: GPL-2.0

//! Address handles (CREATE_AH; DESTROY_AH goes through [`Verbs::destroy`]): where the
//! datagrams of UD QPs go. The device holds the route; the driver keeps the number and the
//! PD, so that the PD stays busy (the device refuses DEALLOC_PD while AHs name it) and the handle
//! is destroyed at close, after the QPs that could send through it and before its PD.

use super::{position, Verbs};
use crate::{cmdq::Cmd, limits::Pool, uapi};
use kernel::prelude::*;

/// An address handle, by the number the device gave it.
pub(super) struct Ah {
    pub(super) ah: u32,
    pub(super) pdn: u32,
}

/// The flow label is 20 bits, the service level 4.
const FLOW_LABEL_LIMIT: u32 = 1 << 20;
const SL_LIMIT: u8 = 16;

/// Checks an address vector from user space (handles and RC QPs' `QHCA_QP_ATTR_AV`) cheaply;
/// the device checks it again, and alone knows which GID table entries are valid.
///
/// # Errors
///
/// `EINVAL` for a port other than 1, a flow label over 20 bits, a service level over 15, a GID
/// index beyond the table or nonzero reserved bytes.
pub(crate) fn check_av(attr: &uapi::qhca_ah_attr) -> Result {
    if attr.port_num != 1
        || attr.flow_label >= FLOW_LABEL_LIMIT
        || attr.sl >= SL_LIMIT
        || u32::from(attr.sgid_index) >= uapi::QHCA_GID_TABLE_LEN
        || attr.rsvd.iter().any(|&b| b != 0)
    {
        return Err(EINVAL);
    }
    Ok(())
}

/// An address vector as the device reads it (its one wider field little-endian).
pub(crate) fn av_to_le(attr: &uapi::qhca_ah_attr) -> uapi::qhca_ah_attr {
    uapi::qhca_ah_attr {
        flow_label: attr.flow_label.to_le(),
        ..*attr
    }
}

/// An address vector the device wrote, in CPU byte order.
pub(super) fn av_from_le(attr: &uapi::qhca_ah_attr) -> uapi::qhca_ah_attr {
    uapi::qhca_ah_attr {
        flow_label: u32::from_le(attr.flow_label),
        ..*attr
    }
}

impl Verbs<'_> {
    /// An address handle in PD `pdn` for `attr` (CPU byte order): its number.
    ///
    /// # Errors
    ///
    /// `EINVAL` for what [`check_av`] refuses (checked here cheaply; the device checks the
    /// address vector again); `EOPNOTSUPP` without UD; `ENOENT` for a PD this context did not
    /// create; what the device answers (`ENOSPC` when it has no room, `EINVAL` for an invalid
    /// source GID entry or a destination of the other family).
    pub(crate) fn create_ah(&self, pdn: u32, attr: &uapi::qhca_ah_attr) -> Result<u32> {
        check_av(attr)?;
        if self.dev.attr()?.max_ah == 0 {
            return Err(EOPNOTSUPP);
        }
        self.locked(|_, objs| {
            position(&objs.pds, |&p| p == pdn)?;
            objs.ahs.reserve(1, GFP_KERNEL)?;
            let args = uapi::qhca_cmd_create_ah {
                uar: self.uar.to_le(),
                pdn: pdn.to_le(),
                attr: av_to_le(attr),
            };
            let cmd = Cmd::new(uapi::QHCA_CMD_CREATE_AH).input_struct(&args);
            let ah = self.charged(Pool::Ahs, || self.create(cmd, "ah"))?;
            // Cannot fail: room was reserved above.
            objs.ahs.push(Ah { ah, pdn }, GFP_KERNEL)?;
            Ok(ah)
        })
    }
}
