// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! qhca's user-space provider.
//!
//! ```no_run
//! # fn main() -> qhca::Result<()> {
//! for dev in qhca::devices()? {
//!     let ctx = dev.open()?;
//!     let attr = ctx.query()?;
//!     println!("{} fw {} guid {}", dev.name, attr.fw_version_string(), attr.node_guid_string());
//!     let db = ctx.map_doorbell()?;
//!     # let _ = db;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The control path is ioctls on `/dev/qhcaN` ([`Context`]); the data path will be stores into
//! mapped rings and one doorbell store ([`Doorbell::ring`]), with no system call.
//!
//! `unsafe` lives in two places: the ioctl call in [`Context::query`] and the doorbell store in
//! [`Doorbell::ring`].

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod attr;
mod context;
mod device;
mod doorbell;
mod error;
mod sys;

pub use attr::{cap_names, fw_version_string, guid_string, DeviceAttr};
pub use context::Context;
pub use device::{
    devices, devices_in, is_pci_addr, parse_device_name, DeviceInfo, DEV_DIR, SYSFS_MISC_DIR,
};
pub use doorbell::Doorbell;
pub use error::{Errno, Error, Result};
pub use qhca_uapi::db::{DbType, DbWord};
pub use qhca_uapi::QHCA_ABI_VERSION;
