// SPDX-License-Identifier: GPL-2.0

//! Address handles (`QHCA_IOCTL_CREATE_AH`; DESTROY_AH goes through [`Verbs::destroy`]): where
//! the datagrams of UD QPs go. The device holds the route; the driver keeps the number and the
//! PD, so that the PD stays busy (the device refuses DEALLOC_PD while AHs name it) and the handle
//! is destroyed at close, after the QPs that could send through it and before its PD.

use super::{position, read_arg, write_arg, Verbs};
use crate::{cmdq::Cmd, uapi};
use kernel::prelude::*;

/// An address handle, by the number the device gave it.
pub(super) struct Ah {
    pub(super) ah: u32,
    pub(super) pdn: u32,
}

/// The flow label is 20 bits, the service level 4.
const FLOW_LABEL_LIMIT: u32 = 1 << 20;
const SL_LIMIT: u8 = 16;

impl Verbs<'_> {
    /// `QHCA_IOCTL_CREATE_AH`: an address handle in one of this file's PDs. The attributes are
    /// checked here cheaply (the device checks them again).
    ///
    /// # Errors
    ///
    /// `EINVAL` for a nonzero `ah`, a port other than 1, a flow label over 20 bits or a service
    /// level over 15; `EOPNOTSUPP` without UD; `ENOENT` for a PD this file did not create; what
    /// the device answers (`ENOSPC` when it has no room).
    pub(super) fn create_ah(&self, arg: usize) -> Result<isize> {
        let (mut a, out) = read_arg::<uapi::qhca_ioc_create_ah>(arg)?;
        let attr = a.attr;
        if a.ah != 0
            || attr.port_num != 1
            || attr.flow_label >= FLOW_LABEL_LIMIT
            || attr.sl >= SL_LIMIT
        {
            return Err(EINVAL);
        }
        if self.dev.attr()?.max_ah == 0 {
            return Err(EOPNOTSUPP);
        }
        a.ah = self.locked(|_, objs| {
            position(&objs.pds, |&p| p == a.pdn)?;
            objs.ahs.reserve(1, GFP_KERNEL)?;
            let args = uapi::qhca_cmd_create_ah {
                uar: self.uar.to_le(),
                pdn: a.pdn.to_le(),
                attr: uapi::qhca_ah_attr {
                    flow_label: attr.flow_label.to_le(),
                    ..attr
                },
                rsvd: 0,
            };
            let cmd = Cmd::new(uapi::QHCA_CMD_CREATE_AH).input_struct(&args);
            let ah = self.create(cmd, "ah")?;
            // Cannot fail: room was reserved above.
            objs.ahs.push(Ah { ah, pdn: a.pdn }, GFP_KERNEL)?;
            Ok(ah)
        })?;
        write_arg(out, &a)
    }
}
