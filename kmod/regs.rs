// SPDX-License-Identifier: GPL-2.0

//! The register block in BAR0 (see `qemu-device/docs/specs/qhca.rst` and `qhca-abi.h`).
//!
//! All registers are 32 bits wide; the offsets are the ABI header's, checked against the BAR size
//! at compile time by `Bar<SIZE>`.

use crate::uapi;
use kernel::pci;

/// Size of BAR0.
pub(crate) const SIZE: usize = uapi::QHCA_REGS_SIZE as usize;

/// A mapped BAR0.
pub(crate) type Bar0<'a> = pci::Bar<'a, SIZE>;

/// The whole register map, with the spec's names; the driver does not use every register.
macro_rules! regs {
    ($($(#[$m:meta])* $name:ident = $off:expr;)*) => {
        $( $(#[$m])* #[allow(dead_code)] pub(crate) const $name: usize = $off as usize; )*
    };
}

regs! {
    MAGIC = uapi::QHCA_REG_MAGIC;
    ABI_VERSION = uapi::QHCA_REG_ABI_VERSION;
    CAPS_LO = uapi::QHCA_REG_CAPS_LO;
    CAPS_HI = uapi::QHCA_REG_CAPS_HI;
    NUM_UARS = uapi::QHCA_REG_NUM_UARS;
    CMDQ_MAX_LOG = uapi::QHCA_REG_CMDQ_MAX_LOG;
    CTRL = uapi::QHCA_REG_CTRL;
    STATUS = uapi::QHCA_REG_STATUS;
    CMDQ_BASE_LO = uapi::QHCA_REG_CMDQ_BASE_LO;
    CMDQ_BASE_HI = uapi::QHCA_REG_CMDQ_BASE_HI;
    CMDQ_LOG_SIZE = uapi::QHCA_REG_CMDQ_LOG_SIZE;
    CMDQ_PI = uapi::QHCA_REG_CMDQ_PI;
    CMDQ_CI = uapi::QHCA_REG_CMDQ_CI;
    EQ_BASE_LO = uapi::QHCA_REG_EQ_BASE_LO;
    EQ_BASE_HI = uapi::QHCA_REG_EQ_BASE_HI;
    EQ_LOG_SIZE = uapi::QHCA_REG_EQ_LOG_SIZE;
    EQ_CI = uapi::QHCA_REG_EQ_CI;
    EQ_PI = uapi::QHCA_REG_EQ_PI;
    INTR_CTRL = uapi::QHCA_REG_INTR_CTRL;
    GUEST_ERRORS = uapi::QHCA_REG_GUEST_ERRORS;
    DB_VIOLATIONS = uapi::QHCA_REG_DB_VIOLATIONS;
    EQ_OVERFLOWS = uapi::QHCA_REG_EQ_OVERFLOWS;
    FATAL_SYNDROME = uapi::QHCA_REG_FATAL_SYNDROME;
    NUM_CTX = uapi::QHCA_REG_NUM_CTX;
    NUM_PD = uapi::QHCA_REG_NUM_PD;
    NUM_MR = uapi::QHCA_REG_NUM_MR;
    NUM_CQ = uapi::QHCA_REG_NUM_CQ;
    NUM_QP = uapi::QHCA_REG_NUM_QP;
    NUM_MW = uapi::QHCA_REG_NUM_MW;
    NUM_AH = uapi::QHCA_REG_NUM_AH;
    UD_NO_QP = uapi::QHCA_REG_UD_NO_QP;
}

/// BAR0 as shared with user contexts: revoked when the device is unbound.
pub(crate) type SharedBar0 = pci::DevresBar<SIZE>;

/// Runs `f` on the registers if the device is still bound.
///
/// `f` runs under the RCU read lock that keeps the mapping alive, so it must not sleep.
///
/// # Errors
///
/// `ENODEV` once the device is unbound.
pub(crate) fn with<R>(
    bar: &SharedBar0,
    f: impl FnOnce(&Bar0<'_>) -> R,
) -> kernel::error::Result<R> {
    let guard = bar.try_access().ok_or(kernel::error::code::ENODEV)?;
    Ok(f(&guard))
}
