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
//! The control path is ioctls on `/dev/qhcaN` ([`Context`], [`Pd`], [`Mr`], [`Cq`], [`Qp`]);
//! the data path is stores into rings in our own memory and one doorbell store
//! ([`Doorbell::ring`]) per post, and loads from the CQ ring to poll, with no system call.
//!
//! ```no_run
//! # fn main() -> qhca::Result<()> {
//! use std::sync::Arc;
//! use qhca::{Access, Cq, Pd, Qp, QpCaps, ConnOpts, SendWr, WrOp, Wc};
//! let ctx = Arc::new(qhca::devices()?[0].open()?);
//! let pd = Pd::new(&ctx)?;
//! let mr = pd.reg_mr_buf(4096, Access::ALL)?;
//! let mut cq = Cq::new(&ctx, 64, None)?;
//! let mut qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
//! qp.connect(0, qp.qpn(), 0, &ConnOpts::default())?; // loopback to itself
//! mr.write_at(0, b"hello");
//! let write = WrOp::Write { raddr: mr.addr() + 2048, rkey: mr.rkey() };
//! qp.post_send(&[SendWr::new(1, write, &[mr.sge(0, 5)])])?;
//! let mut wc = [Wc::default(); 1];
//! while cq.poll(&mut wc) == 0 {}
//! assert_eq!(mr.to_vec(2048, 5), b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! Lifetimes: [`Pd`], [`Mr`], [`Cq`] and [`Qp`] hold an `Arc` of their [`Context`]; a [`Qp`]
//! holds its PD and CQs, a [`Mr`] its PD, so nothing is destroyed under a user. A [`Mr`] borrows
//! its buffer (or, as [`MrBuf`], owns it), so registered memory cannot be freed while the device
//! may reach it. Ring memory is freed only after the device object is destroyed, and leaked if
//! the destroy fails.
//!
//! What the types cannot enforce, and how it is handled:
//!
//! - An SGE is plain numbers ([`Sge`]): nothing ties it to a live [`Mr`]. That is safe because
//!   the device checks every SGE against a registered region (key, PD, rights, bounds) and a
//!   region cannot be freed while registered: a stale SGE fails its request
//!   (`LOC_PROT_ERR`), it never reaches freed memory. So posting is a safe call.
//! - The device (or a peer's WRITE) may change a region at any moment: [`Mr`] gives copies
//!   ([`Mr::read_at`], [`Mr::read_u64`]), never references; read what a completion announced.
//! - Dropping a region while requests using it are outstanding is allowed: they then fail
//!   with a protection error.
//! - A failed destroy (the driver refusing it) leaks the ring memory ([`PageBuf::leak`]) rather
//!   than letting the addresses be reused; a failed deregistration of a borrowed [`Mr`] cannot
//!   hold the borrow, which is why only an unbound device (`ENODEV`, where the driver has torn
//!   everything down itself) may fail it.
//! - The doorbell page and rings are per process: after `fork` the child has no doorbell
//!   mapping (the driver marks it `VM_DONTCOPY`) and copy-on-write copies of the rings, so
//!   verbs objects must be used only in the process that created them.
//!
//! `unsafe` lives in the ioctl calls ([`Context`]), the doorbell store ([`Doorbell::ring`]), the
//! ring accesses ([`cq`], [`Qp`]) and region copies ([`Mr`]), each behind a safe API.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod attr;
pub mod conn;
mod context;
pub mod cq;
mod device;
mod doorbell;
mod error;
pub mod layout;
mod mem;
mod pd;
mod qp;
mod sys;
pub mod wq;
pub mod wqe;

pub use attr::{cap_names, fw_version_string, guid_string, DeviceAttr};
pub use conn::ConnInfo;
pub use context::{Context, CtxStats, ObjKind};
pub use cq::{eventfd, Cq, Wc, WcOpcode, WcStatus};
pub use device::{
    devices, devices_in, is_pci_addr, parse_device_name, DeviceInfo, DEV_DIR, SYSFS_MISC_DIR,
};
pub use doorbell::Doorbell;
pub use error::{Errno, Error, PostError, PostReason, Result};
pub use layout::{QpCaps, QpLayout};
pub use mem::{PageBuf, PAGE_SIZE};
pub use pd::{Access, Mr, MrBuf, Pd};
pub use qhca_uapi::db::{DbType, DbWord};
pub use qhca_uapi::QHCA_ABI_VERSION;
pub use qp::{ConnOpts, Qp, QpAttr, QpInfo, QpState};
pub use wqe::{RecvWr, SendFlags, SendWr, Sge, WrOp};
