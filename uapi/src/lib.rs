// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The qhca ABI in Rust.
//!
//! `uapi/include/qhca-abi.h` is the single source of truth. [`bindings`] is bindgen's output for
//! it, committed and checked for drift by `cargo test` (`uapi/regen.sh` is the only place the
//! bindgen command is written). Its items are re-exported here under their C names
//! (`QHCA_ABI_VERSION`, `qhca_ib_alloc_ucontext_resp`, `qhca_ioc_query_device`, ...).
//!
//! Around it sit small pure helpers that the provider, the tools and the kernel module all need:
//!
//! - [`db`]: the doorbell word (queue number, type, index), encode and decode;
//! - typed constants for the few macros whose bindgen type (`u32`) is not the type of the field
//!   they describe (capability bits, the doorbell page size as `usize`).
//!
//! The crate is `no_std` and has no dependencies. `bindings.rs` uses only `core::` paths, so the
//! kernel module can include it directly with `#[path]`; `db.rs` only reaches it through
//! `super::bindings`, so it can be included the same way next to it.

#![no_std]

// bindgen output keeps the C names; the lints are quarantined here, as io-uring does with `sys`.
#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    clippy::all,
    clippy::pedantic
)]
#[rustfmt::skip]
pub mod bindings;

pub use bindings::*;

pub mod db;

/// [`QHCA_UAR_PAGE_SIZE`] as a length: one doorbell page, the length of its mapping.
pub const UAR_PAGE_SIZE: usize = QHCA_UAR_PAGE_SIZE as usize;

/// [`QHCA_CAP_UAR_ISOLATION`] as a bit of the 64-bit `caps` field.
pub const CAP_UAR_ISOLATION: u64 = QHCA_CAP_UAR_ISOLATION as u64;
/// [`QHCA_CAP_RC`] as a bit of the 64-bit `caps` field.
pub const CAP_RC: u64 = QHCA_CAP_RC as u64;

/// [`QHCA_CAP_ODP`] as a bit of the 64-bit `caps` field.
pub const CAP_ODP: u64 = QHCA_CAP_ODP as u64;
/// [`QHCA_CAP_MW`] as a bit of the 64-bit `caps` field.
pub const CAP_MW: u64 = QHCA_CAP_MW as u64;
/// [`QHCA_CAP_UD`] as a bit of the 64-bit `caps` field.
pub const CAP_UD: u64 = QHCA_CAP_UD as u64;
/// [`QHCA_CAP_PORT`] as a bit of the 64-bit `caps` field.
pub const CAP_PORT: u64 = QHCA_CAP_PORT as u64;
/// [`QHCA_CAP_KERNEL`] as a bit of the 64-bit `caps` field.
pub const CAP_KERNEL: u64 = QHCA_CAP_KERNEL as u64;
/// [`QHCA_CAP_FAST_REG`] as a bit of the 64-bit `caps` field.
pub const CAP_FAST_REG: u64 = QHCA_CAP_FAST_REG as u64;
/// [`QHCA_CAP_ETH`] as a bit of the 64-bit `caps` field.
pub const CAP_ETH: u64 = QHCA_CAP_ETH as u64;
/// [`QHCA_CAP_SRQ`] as a bit of the 64-bit `caps` field.
pub const CAP_SRQ: u64 = QHCA_CAP_SRQ as u64;
/// [`QHCA_CAP_CMD_FLAGS`] as a bit of the 64-bit `caps` field.
pub const CAP_CMD_FLAGS: u64 = QHCA_CAP_CMD_FLAGS as u64;

/// Every capability bit this ABI version defines, with its name (the `QHCA_CAP_` suffix).
pub const CAP_NAMES: &[(u64, &str)] = &[
    (CAP_UAR_ISOLATION, "UAR_ISOLATION"),
    (CAP_RC, "RC"),
    (CAP_ODP, "ODP"),
    (CAP_MW, "MW"),
    (CAP_UD, "UD"),
    (CAP_PORT, "PORT"),
    (CAP_KERNEL, "KERNEL"),
    (CAP_FAST_REG, "FAST_REG"),
    (CAP_ETH, "ETH"),
    (CAP_SRQ, "SRQ"),
    (CAP_CMD_FLAGS, "CMD_FLAGS"),
];

/// The capability bits this ABI version knows about.
pub const CAP_KNOWN_MASK: u64 = {
    let mut mask = 0;
    let mut i = 0;
    while i < CAP_NAMES.len() {
        mask |= CAP_NAMES[i].0;
        i += 1;
    }
    mask
};

// The fixed sizes the header promises in its comments; uapi/tests/layout.rs checks every field.
const _: () = assert!(core::mem::size_of::<qhca_cmd>() == 64);
const _: () = assert!(core::mem::size_of::<qhca_eqe>() == 32);
const _: () = assert!(core::mem::size_of::<qhca_eqe_page_fault>() == 32);
const _: () = assert!(core::mem::size_of::<qhca_device_attr>() == 128);
const _: () = assert!(core::mem::size_of::<qhca_ioc_query_device>() == 160);
const _: () = assert!(core::mem::size_of::<qhca_ib_alloc_ucontext_resp>() == 160);
