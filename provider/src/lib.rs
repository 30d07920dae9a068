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
//! The control path is the RDMA core's commands on the device's uverbs node
//! (`/dev/infiniband/uverbsN`, which [`devices`] finds: [`Context`], [`Pd`], [`Mr`], [`Cq`],
//! [`Qp`], [`Srq`]); the data
//! path is stores into rings in our own memory and one doorbell store ([`Doorbell::ring`]) per
//! post, and loads from the CQ ring to poll, with no system call.
//!
//! ```no_run
//! # fn main() -> qhca::Result<()> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use qhca::{Access, Cq, Pd, Qp, QpCaps, ConnOpts, SendWr, WrOp, Wc};
//! let ctx = Arc::new(qhca::devices()?[0].open()?);
//! let pd = Pd::new(&ctx)?;
//! let mut mr = pd.reg_mr_buf(4096, Access::ALL)?;
//! let mut cq = Cq::new(&ctx, 64, None)?;
//! let mut qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
//! let me = qp.conn_info(0);
//! qp.connect(&me, &me, &ConnOpts::default())?; // loopback to itself
//! mr.write_at(0, b"hello");
//! let write = WrOp::Write { raddr: mr.addr() + 2048, rkey: mr.rkey() };
//! qp.post_send(&[SendWr::new(1, write, &[mr.sge(0, 5)])])?;
//! let mut wc = [Wc::default(); 1];
//! if cq.poll_wait(&mut wc, Some(Duration::from_secs(5)))? == 0 {
//!     panic!("no completion");
//! }
//! assert_eq!(mr.to_vec(2048, 5), b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! Programs that send from whatever buffers they are handed (MPI, UCX-style layers) use a
//! registration cache, [`RegCache`]: a lookup that hits costs no system call, and the cache is
//! kept exact by the driver, which revokes a cached ([`WatchedMr`]) region before its memory
//! changes and publishes that on the context's invalidation page ([`InvalPage`]), so there are
//! no `malloc`/`munmap` hooks. [`CacheMode::OnDemand`] caches on-demand-paged regions instead.
//!
//! Memory windows ([`Mw`], types 1, 2A and 2B) are remote keys for byte ranges of a region
//! with [`Access::MW_BIND`], bound ([`Mw::bind`]) and invalidated ([`Mw::invalidate`],
//! [`WrOp::SendInv`] from the peer) by work requests: no system call after
//! [`Pd::alloc_mw`].
//!
//! Unreliable datagram QPs ([`Qp::new_ud`], [`QpType::Ud`]) send to an address handle
//! ([`Pd::create_ah`], [`Ah`]) named in each request ([`SendWr::to_ud`]); a receive starts
//! with a global route header ([`Grh`], [`GRH_SIZE`] bytes) naming the sender's port ([`Gid`]).
//!
//! A shared receive queue ([`Srq`], `QHCA_CAP_SRQ`) is one receive queue that RC and UD QPs
//! created on it ([`Qp::with_srq`]) take their receives from, posted to without a system call
//! ([`Srq::post_recv`]); each request completes on the receive CQ of the QP that took it. Its
//! limit ([`Srq::arm_limit`]) and its QPs' last WQE are [`AsyncEvent`]s.
//!
//! The device's port ([`Context::query_port`], [`PortAttr`]) has a GID table: entry 0, the
//! link-local GID, and the IPv4 addresses of the port's netdev (`ip addr add`). An
//! address vector ([`AhAttr`]: a handle's, or an RC QP's, [`QpAttr::av`]) sends from one
//! entry (`sgid_index`) to a destination GID; an RC QP without one talks to its own port's
//! GID 0, as before the table existed.
//!
//! `provider/examples/rc_write_imm.rs` is a complete two-process program: an RC connection
//! over [`conn`]'s TCP exchange, a WRITE_WITH_IMM, then a READ back.
//!
//! Lifetimes: [`Pd`], [`Mr`], [`Cq`], [`Srq`] and [`Qp`] hold an `Arc` of their [`Context`]; a
//! [`Qp`] holds its PD, CQs and SRQ, a [`Mr`], [`Mw`], [`Srq`] or [`Ah`] its PD, so nothing is
//! destroyed under a user. Registered memory is owned by the region ([`MrBuf`]: [`Pd::reg_mr_buf`],
//! [`Pd::reg_mr_box`]) and freed only after a successful deregistration, or borrowed through
//! the `unsafe` [`Pd::reg_mr`], whose caller promises the same. Ring memory is freed only after
//! the device object is destroyed, and leaked if the destroy fails. Everything safe here stays
//! sound under `mem::forget` (which only leaks).
//!
//! What the types cannot enforce, and how it is handled:
//!
//! - An SGE is plain numbers ([`Sge`]): nothing ties it to a live [`Mr`]. That is safe because
//!   the device checks every SGE against a registered region (key, PD, rights, bounds) and a
//!   region cannot be freed while registered: a stale SGE fails its request
//!   (`LOC_PROT_ERR`), it never reaches freed memory; and keys are never reused. So posting
//!   is a safe call.
//! - The device (or a peer's WRITE) may change a region at any moment: [`Mr`] gives copies
//!   ([`Mr::read_at`], [`Mr::read_u64`]), made with volatile loads, never references or
//!   ordinary loads; read what a completion announced.
//!   Writes through [`Mr::write_at`] take `&mut`, so threads never race on a region.
//! - Dropping a region while requests using it are outstanding is allowed: they then fail
//!   with a protection error.
//! - A UD destination ([`UdDest`]) is plain numbers too: the device checks, when it runs the
//!   send, that the address handle it names exists and is of the QP's context and PD (a stale
//!   one fails the request), and handle numbers carry a generation.
//! - A completion names its WQE by index, which is checked against what is outstanding; a QP
//!   that is reset or destroyed first removes its unpolled CQEs from its CQs, and QP numbers
//!   carry a generation: no completion is ever credited to the wrong requests. (A receive
//!   completion of a QP of an SRQ frees nothing: the SRQ's slots come back when its doorbell
//!   record says the device took their requests, and that index is checked the same way.)
//! - The device may go away under a context (see [`Context`]): posts and waits then fail with
//!   [`PostReason::Disassociated`] / [`Error::Disassociated`] instead of hanging or faulting.
//! - The doorbell page and rings are per process: after `fork` the child has no doorbell
//!   mapping (the driver marks it `VM_DONTCOPY`) and copy-on-write copies of the rings, so
//!   verbs objects must be used only in the process that created them.
//!
//! - A watched or on-demand region, and so a cached one, is revoked or loses its pages before
//!   its memory goes back to the system, so none borrows its memory; what stays `unsafe`
//!   ([`Pd::reg_watched_mr_raw`], [`Pd::reg_odp_mr_raw`], [`RegCache::get_raw`]) is letting the
//!   device *write* memory the caller names.
//!
//! `unsafe` lives in the ioctl calls ([`Context`]), the doorbell store ([`Doorbell::ring`]), the
//! ring accesses ([`Cq`], [`Qp`], [`Srq`]), the volatile copies in and out of regions ([`Mr`],
//! [`OdpMr`]) and the invalidation page's loads ([`InvalPage`]), each behind a safe API, and in
//! the registrations that let the device write memory the caller names.
//!
//! # Internals stay inside
//!
//! The slot trackers, WQE builders, the CQ ring and raw object destruction are not part of the
//! API (they were public once; these must not compile):
//!
//! ```compile_fail,E0603
//! let t = qhca::wq::SendTracker::new(4);
//! ```
//!
//! ```compile_fail,E0603
//! let mut slot = [0u8; 64];
//! qhca::wqe::set_ctrl_seg(&mut slot, 0, 0, 0, 0, 0, 0);
//! ```
//!
//! ```compile_fail,E0603
//! let _ = qhca::cq::CqRing::owner_for(0, 1);
//! ```
//!
//! ```compile_fail,E0599
//! # fn f(ctx: &qhca::Context) {
//! let _ = ctx.raw_fd();
//! # }
//! ```
//!
//! ```compile_fail
//! # fn f(ctx: &qhca::Context) {
//! let _ = ctx.destroy_raw(qhca::ObjKind::Qp, 1);
//! # }
//! ```
//!
//! ```compile_fail,E0599
//! # fn f(db: &qhca::Doorbell) {
//! let _ = db.as_ptr();
//! # }
//! ```
//!
//! A region is written only through `&mut`, so sharing it between threads cannot race:
//!
//! ```compile_fail,E0596
//! # fn f(mr: &qhca::MrBuf) {
//! std::thread::scope(|s| {
//!     s.spawn(|| mr.write_at(0, b"a"));
//!     s.spawn(|| mr.write_at(0, b"b"));
//! });
//! # }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod ah;
mod attr;
pub mod conn;
mod context;
mod control;
mod cq;
mod device;
mod doorbell;
mod error;
mod inval;
mod layout;
mod mem;
mod mw;
pub mod odp;
mod pd;
mod port;
mod qp;
pub mod rcache;
mod request;
mod srq;
mod uverbs;
mod watched;
mod wq;
mod wqe;

pub use ah::{
    Ah, AhAttr, Gid, Grh, UdDest, GID_TABLE_LEN, GRH_SIZE, PORT_NUM, QKEY_CONTROLLED, UD_MAX_MSG,
};
pub use attr::{cap_names, fw_version_string, guid_string, DeviceAttr, OdpCaps};
pub use conn::ConnInfo;
pub use context::{AsyncEvent, Context, CtxStats};
pub use cq::{eventfd, Cq, CqConsumer, Wc, WcOpcode, WcStatus, LIVENESS_INTERVAL};
pub use device::{
    devices, devices_in, find_in, is_pci_addr, netdev_in, node_of, parse_device_name, uverbs_node,
    uverbs_node_in, DeviceInfo, SYSFS_PCI_DIR, SYSFS_UVERBS_DIR, UVERBS_DEV_DIR,
};
pub use doorbell::Doorbell;
pub use error::{Errno, Error, PostError, PostReason, Result};
pub use inval::{InvalPage, InvalPoll, Revocation};
pub use layout::{CqLayout, QpCaps, QpLayout, SrqLayout};
pub use mem::{PageBuf, PAGE_SIZE};
pub use mw::{inc_rkey, Mw, MwType};
pub use odp::{Advice, OdpMr};
pub use pd::{Access, Mr, MrBuf, Pd};
pub use port::{GidEntry, PortAttr, PortCounters, PortState, Wire};
pub use qhca_uapi::db::{DbType, DbWord};
pub use qhca_uapi::QHCA_ABI_VERSION;
pub use qp::{ConnOpts, Qp, QpAttr, QpInfo, QpState, QpType};
pub use rcache::{CacheConfig, CacheMode, CacheStats, CachedMr, RegCache};
pub use srq::{Srq, SrqAttr, SrqQueue};
pub use watched::WatchedMr;
pub use wq::{WorkQueues, WqShared};
pub use wqe::{MwBind, RecvWr, SendFlags, SendWr, Sge, WrOp};
