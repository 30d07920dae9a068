// SPDX-License-Identifier: GPL-2.0

//! Address handles (`QHCA_IOCTL_CREATE_AH`; DESTROY_AH goes through [`Verbs::destroy`]): where
//! the datagrams of UD QPs go. The device holds the route; the driver keeps the number and the
//! PD, so that the PD stays busy (the device refuses DEALLOC_PD while AHs name it) and the handle
//! is destroyed at close, after the QPs that could send through it and before its PD.

use super::{position, Verbs};
use crate::{cmdq::Cmd, limits::Pool, uapi};
use kernel::{
    prelude::*,
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice},
};

/// An address handle, by the number the device gave it.
pub(super) struct Ah {
    pub(super) ah: u32,
    pub(super) pdn: u32,
}

/// The flow label is 20 bits, the service level 4.
const FLOW_LABEL_LIMIT: u32 = 1 << 20;
const SL_LIMIT: u8 = 16;

/// The argument of `QHCA_IOCTL_CREATE_AH_V1`: `qhca_ioc_create_ah` as it was before the address
/// vector had `sgid_index` (its `attr` 8 bytes shorter), by the size its ioctl number carries.
const CREATE_AH_V1_SIZE: usize = kernel::ioctl::_IOC_SIZE(uapi::QHCA_IOCTL_CREATE_AH_V1);

const _: () = {
    use core::mem::{offset_of, size_of};
    // What V1 leaves out is the end of the address vector: `sgid_index` and `rsvd`, read as 0.
    assert!(CREATE_AH_V1_SIZE == offset_of!(uapi::qhca_ioc_create_ah, attr) + 24);
    assert!(offset_of!(uapi::qhca_ah_attr, sgid_index) == 24);
    assert!(CREATE_AH_V1_SIZE + 8 == size_of::<uapi::qhca_ioc_create_ah>());
    // The same ioctl but for the size.
    use kernel::ioctl::{_IOC_DIR, _IOC_NR, _IOC_TYPE};
    let (v1, now) = (uapi::QHCA_IOCTL_CREATE_AH_V1, uapi::QHCA_IOCTL_CREATE_AH);
    assert!(_IOC_DIR(v1) == _IOC_DIR(now) && _IOC_TYPE(v1) == _IOC_TYPE(now));
    assert!(_IOC_NR(v1) == _IOC_NR(now));
};

/// Checks an address vector from user space (handles and RC QPs' `QHCA_QP_ATTR_AV`) cheaply;
/// the device checks it again, and alone knows which GID table entries are valid.
///
/// # Errors
///
/// `EINVAL` for a port other than 1, a flow label over 20 bits, a service level over 15, a GID
/// index beyond the table or nonzero reserved bytes.
pub(super) fn check_av(attr: &uapi::qhca_ah_attr) -> Result {
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
pub(super) fn av_to_le(attr: &uapi::qhca_ah_attr) -> uapi::qhca_ah_attr {
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
    /// `QHCA_IOCTL_CREATE_AH`: an address handle in one of this file's PDs. The attributes are
    /// checked here cheaply ([`check_av`]; the device checks them again). `ioctl` is the number
    /// it came by: `QHCA_IOCTL_CREATE_AH_V1`, of programs built before the address vector had
    /// `sgid_index`, reads and writes the first [`CREATE_AH_V1_SIZE`] bytes of the argument (its
    /// size field says so), and sends from GID index 0.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a bad header, a nonzero `ah` or what [`check_av`] refuses; `EOPNOTSUPP`
    /// without UD; `ENOENT` for a PD this file did not create; what the device answers
    /// (`ENOSPC` when it has no room, `EINVAL` for an invalid source GID entry or a destination
    /// of the other family).
    pub(super) fn create_ah(&self, arg: usize, ioctl: u32) -> Result<isize> {
        const FULL: usize = core::mem::size_of::<uapi::qhca_ioc_create_ah>();
        let len = if ioctl == uapi::QHCA_IOCTL_CREATE_AH_V1 {
            CREATE_AH_V1_SIZE
        } else {
            FULL
        };
        let (mut reader, mut writer) = UserSlice::new(UserPtr::from_addr(arg), len).reader_writer();
        let mut raw = [0u8; FULL];
        reader.read_slice(&mut raw[..len])?;
        let mut a = uapi::qhca_ioc_create_ah::from_bytes_copy(&raw).ok_or(EINVAL)?;
        if a.size as usize != len || a.comp_mask != 0 || a.ah != 0 {
            return Err(EINVAL);
        }
        a.ah = self.create_ah_with(a.pdn, &a.attr)?;
        writer.write_slice(&a.as_bytes()[..len])?;
        Ok(0)
    }

    /// An address handle in PD `pdn` for `attr` (CPU byte order): its number.
    ///
    /// # Errors
    ///
    /// As [`Verbs::create_ah`], less the argument's header.
    pub(crate) fn create_ah_with(&self, pdn: u32, attr: &uapi::qhca_ah_attr) -> Result<u32> {
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
