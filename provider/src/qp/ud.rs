// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! What is UD's own in a QP: its state changes. A UD QP has the states of an RC one with
//! other attributes (the header's "Unreliable datagram"): RESET → INIT needs the Q_Key,
//! RTR → RTS the send PSN, every transition accepts the Q_Key and nothing else. It receives in
//! RTR and RTS and sends in RTS.

use super::{Qp, QpAttr, QpState, QpType};
use crate::error::{Error, Result};

/// The three MODIFY_QPs of [`Qp::ud_ready`]: RESET → INIT with the Q_Key, INIT → RTR, RTR →
/// RTS with the send PSN.
pub(super) fn ud_ready_attrs(qkey: u32, sq_psn: u32) -> [QpAttr; 3] {
    [
        QpAttr {
            state: Some(QpState::Init),
            qkey: Some(qkey),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rtr),
            ..QpAttr::default()
        },
        QpAttr {
            state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            ..QpAttr::default()
        },
    ]
}

impl Qp {
    fn check_ud(&self, what: &str) -> Result<()> {
        if self.qp_type != QpType::Ud {
            return Err(Error::Invalid {
                what: format!("{what} on RC QP {:#x}: for UD QPs", self.qpn),
            });
        }
        Ok(())
    }

    /// RESET → INIT of a UD QP, which then takes datagrams carrying Q_Key `qkey` (once in
    /// RTR). A `qkey` with [`crate::QKEY_CONTROLLED`] set needs `CAP_NET_RAW` (`EPERM`).
    pub fn to_init_ud(&self, qkey: u32) -> Result<()> {
        self.check_ud("to_init_ud")?;
        self.modify(&ud_ready_attrs(qkey, 0)[0])
    }

    /// INIT → RTR of a UD QP: it receives from now on.
    pub fn to_rtr_ud(&self) -> Result<()> {
        self.check_ud("to_rtr_ud")?;
        self.modify(&ud_ready_attrs(0, 0)[1])
    }

    /// RTR → RTS of a UD QP, its first datagram carrying PSN `sq_psn` (24 bits; nobody checks
    /// a UD PSN): it sends from now on.
    pub fn to_rts_ud(&self, sq_psn: u32) -> Result<()> {
        self.check_ud("to_rts_ud")?;
        if sq_psn > 0xff_ffff {
            return Err(Error::Invalid {
                what: format!("PSN {sq_psn:#x}: 24 bits"),
            });
        }
        self.modify(&ud_ready_attrs(0, sq_psn)[2])
    }

    /// RESET → INIT → RTR → RTS of a UD QP with Q_Key `qkey` and send PSN 0, as
    /// ibv_ud_pingpong does: it then sends and receives. Fails with [`Error::Invalid`] on an
    /// RC QP, and with the MODIFY_QP errors.
    pub fn ud_ready(&self, qkey: u32) -> Result<()> {
        self.check_ud("ud_ready")?;
        for attr in ud_ready_attrs(qkey, 0) {
            self.modify(&attr)?;
        }
        Ok(())
    }
}
