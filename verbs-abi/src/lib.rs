// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! libibverbs's C ABI as qhca's two verbs libraries use it: the types of rdma-core's
//! `<infiniband/verbs.h>` ([`ffi`], generated), and the pure conversions between them and the
//! `qhca` crate's work requests, completions ([`wr`]) and access rights ([`access`]), and the
//! post path over them ([`post`]). It exports
//! no C symbol: the preload layer (`qhca-verbs`) and the provider (`qhca-verbs-provider`) each
//! decide what they export.

pub mod access;
pub mod ffi;
pub mod post;
pub mod wr;
