// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! libibverbs for qhca: `libqhca_verbs.so`, a C ABI that unmodified verbs programs (perftest,
//! `ibv_rc_pingpong`, `ibv_devinfo`, your own) load to see qhca devices beside the system's
//! own RDMA devices.
//!
//! ```text
//! LD_PRELOAD=target/release/libqhca_verbs.so ib_write_lat -d qhca0
//! ```
//!
//! # How it is loaded
//!
//! The library defines the public `ibv_*` functions of libibverbs.so.1 and is *preloaded*
//! (`LD_PRELOAD`), so the dynamic linker binds a program's `ibv_*` calls to it first. Each
//! function looks at the object it is handed: a qhca object (one this library made) is served
//! here, over the qhca provider (`qhca`); anything else goes on to the real libibverbs
//! (`dlsym(RTLD_NEXT)`), so rxe, mlx5 or any other device keeps working in the same program.
//! `ibv_get_device_list` returns the real library's devices followed by the qhca ones.
//! Replacing libibverbs.so.1 itself would not do: Debian's perftest also links libmlx5 and
//! libefa, which need libibverbs's private symbol versions.
//!
//! # The data path
//!
//! `struct ibv_context` and its `ops` are laid out as rdma-core's verbs.h lays them out, inside
//! a `struct verbs_context` (the extended ops: `query_port`, `query_device_ex`,
//! `create_cq_ex` is not one of them). So the inline `ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq` and `ibv_req_notify_cq` of the application jump straight into this library,
//! which converts the request and calls the provider's post, poll or arm: no system call, no
//! second implementation of the data path.
//!
//! # What a qhca device looks like to a verbs program
//!
//! One port, ACTIVE, link layer Ethernet (RoCE-like: LID 0, addressing by GID), active MTU
//! 4096, a GID table of one entry (index 0: `fe80::/64` and the node GUID, the port's GID);
//! one P_Key (0xffff). Its wire is the device's own loopback: every QP of a device reaches
//! every other QP of that device, so a connection's address is only its QP number (an address
//! vector naming another GID is refused).
//!
//! Supported on qhca devices: the device list and open/close; query_device(_ex), query_port,
//! query_gid(_ex, _table, _type), query_pkey, get_pkey_index; PDs; memory regions
//! (`ibv_reg_mr`, `_iova`, `_iova2` with iova equal to the address), on-demand (explicit and
//! implicit) regions and `ibv_advise_mr`; memory windows (`ibv_alloc_mw`, `ibv_bind_mw`,
//! `ibv_dealloc_mw`, BIND_MW, LOCAL_INV and SEND_WITH_INV work requests); completion channels,
//! CQs, `ibv_req_notify_cq` / `ibv_get_cq_event` / `ibv_ack_cq_events` (the channel's fd is
//! pollable); RC and UD QPs (create, modify, query, destroy, post send and receive), address
//! handles; asynchronous events. Everything else a verbs program may ask of a qhca object
//! (SRQs, XRC, resize_cq, rereg_mr, multicast, flows, device memory, ECE, ...) fails with
//! `EOPNOTSUPP` (or `NULL` and `errno` `EOPNOTSUPP`) and one line on stderr the first time.
//!
//! `QHCA_VERBS_DEBUG=1` prints on stderr why a call on a qhca object failed.

#![deny(unsafe_op_in_unsafe_fn)]
// The exported functions are libibverbs's: their safety contract is the one verbs.h and the
// ibv_* man pages give every C caller (live objects of this library, valid pointers).
#![allow(clippy::missing_safety_doc)]

pub mod ffi;

mod ah;
mod cq;
mod device;
mod misc;
mod mr;
mod obj;
mod qp;
mod real;
mod wr;

pub use misc::{unsupported_once, wc_status_str};
