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
//! `ibv_get_device_list` returns the real library's devices followed by the qhca ones (less the
//! real library's entry for the same qhca hardware, which the installed provider adds: each device
//! is listed once).
//! Replacing libibverbs.so.1 itself would not do: Debian's perftest also links libmlx5 and
//! libefa, which need libibverbs's private symbol versions.
//!
//! # The data path
//!
//! `struct ibv_context` and its `ops` are laid out as rdma-core's verbs.h lays them out, inside
//! a `struct verbs_context` (the extended ops: `query_port`, `query_device_ex`, `create_qp_ex`
//! and `advise_mr`; `create_cq_ex` is not one of them). So the inline `ibv_post_send`,
//! `ibv_post_recv`, `ibv_poll_cq` and `ibv_req_notify_cq` of the application jump straight into
//! this library, which converts the request and calls the provider's post, poll or arm: no
//! system call, no second implementation of the data path.
//!
//! # What a qhca device looks like to a verbs program
//!
//! One port, ACTIVE (DOWN while the link of the device's netdev is down), link layer Ethernet
//! (RoCE: LID 0, addressing by GID), active MTU 4096; one P_Key (0xffff). Its GID table is the
//! device's, read at each query (16 entries): index 0 is `fe80::/64` and the node GUID, the
//! link-local GID; the others are the IPv4 addresses an administrator gave the port
//! (`qhca-info addr add`), IPv4-mapped, or empty (the zero GID, `ENODATA` from
//! `ibv_query_gid_ex`, as libibverbs reports an empty entry); all are RoCE v2.
//! An address vector (`ibv_create_ah`, `ibv_modify_qp` with `IBV_QP_AV` on RC) carries its
//! `grh.sgid_index` and `grh.dgid` to the device, which refuses an entry that is not valid or a
//! destination of the other family; a destination the port cannot reach loses the packets (an
//! RC QP's requests then fail with `IBV_WC_RETRY_EXC_ERR`). An RC QP given no GRH talks to its
//! own port's GID 0: every QP of a device reaches every other QP of that device by number.
//! `ibv_init_ah_from_wc` answers a datagram from its GRH, or from the IPv4 header the device
//! writes in the GRH's place for a datagram between IPv4 GIDs (as RoCEv2 does).
//!
//! Supported on qhca devices: the device list and open/close; query_device(_ex), query_port,
//! query_gid(_ex, _table, _type), query_pkey, get_pkey_index; PDs; memory regions
//! (`ibv_reg_mr`, `_iova`, `_iova2` with iova equal to the address), on-demand (explicit and
//! implicit) regions and `ibv_advise_mr`; memory windows (`ibv_alloc_mw`, `ibv_bind_mw`,
//! `ibv_dealloc_mw`, BIND_MW, LOCAL_INV and SEND_WITH_INV work requests); completion channels,
//! CQs, `ibv_req_notify_cq` / `ibv_get_cq_event` / `ibv_ack_cq_events` (the channel's fd is
//! pollable); RC and UD QPs (create, modify, query, destroy, post send and receive), address
//! handles; asynchronous events (`async_fd` is pollable, and readable only while an event is
//! queued that `ibv_get_async_event` returns: a destroyed object's events go with it).
//! Everything else a verbs program may ask of a qhca object (SRQs, XRC, resize_cq, rereg_mr,
//! multicast, flows, device memory, ECE, ...) fails with `EOPNOTSUPP` (or `NULL` and `errno`
//! `EOPNOTSUPP`) and one line on stderr the first time.
//!
//! `QHCA_VERBS_DEBUG=1` prints on stderr why a call on a qhca object failed.

#![deny(unsafe_op_in_unsafe_fn)]
// The exported functions are libibverbs's: their safety contract is the one verbs.h and the
// ibv_* man pages give every C caller (live objects of this library, valid pointers).
#![allow(clippy::missing_safety_doc)]

pub use qhca_verbs_abi::ffi;
use qhca_verbs_abi::{access, post, wr};

mod ah;
mod cq;
mod device;
mod events;
mod misc;
mod mr;
mod obj;
mod qp;
mod real;

pub use misc::{unsupported_once, wc_status_str};
