// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! libibverbs's C ABI as qhca's libibverbs provider (`qhca-verbs-provider`) uses it: the types of
//! rdma-core's `<infiniband/verbs.h>` ([`ffi`], generated), and the pure conversions between them
//! and the `qhca` crate's work requests, completions ([`wr`]) and access rights ([`access`]), and
//! the post path over them ([`post`]). It exports no C symbol: the provider decides what it
//! exports.

pub mod access;
pub mod ffi;
pub mod post;
pub mod wr;
