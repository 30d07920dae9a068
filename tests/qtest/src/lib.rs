// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Tests of the qhca QEMU device model from outside, through QEMU's qtest protocol: no guest OS,
//! the test itself pokes config space, registers, rings and doorbells (as QEMU's own
//! `tests/qtest/libqos` e1000e/igb tests and `fuzz-*-test.c` regressions do).
//!
//! - [`qtest`]: the QEMU process and the text protocol (timeouts, dead-QEMU detection);
//! - [`pci`]: config space over 0xcf8/0xcfc, BAR sizing and assignment, MSI-X;
//! - [`wire`]: command/event/attribute structures as bytes;
//! - [`hca`]: a test-side driver: rings in guest RAM, post a command, consume its event;
//! - [`kernel`]: the driver's own context: kernel PD, CQs, the physical key, its QPs;
//! - [`qmp`]: a minimal QMP client, for migration and the link;
//! - [`rng`]: the deterministic generator behind the fuzz-style test;
//! - [`verbs`]: PDs, MRs, CQs, QPs, WQEs and CQEs from the test side;
//! - [`mw`]: memory windows: ALLOC_MW/DEALLOC_MW, BIND_MW, LOCAL_INV and SEND_WITH_INV WQEs;
//! - [`ud`]: unreliable datagram: address handles, UD QPs and WQEs, the GRH;
//! - [`srq`]: shared receive queues, their ring and record, QPs created on one;
//! - [`port`]: QUERY_PORT, SET_GID, GIDs and address vectors;
//! - [`roce`]: RoCEv2 frames and ARP as the test builds and checks them (its own codec and
//!   ICRC), and [`roce::Peer`], the test as the far end of the port's netdev; [`roce6`]: the
//!   same packets over IPv6.
//!
//! The QEMU binary comes from `$QHCA_QEMU`; `scripts/test.sh` sets it after building QEMU.

pub mod hca;
pub mod kernel;
pub mod mw;
pub mod pci;
pub mod port;
pub mod qmp;
pub mod qtest;
pub mod rng;
pub mod roce;
pub mod roce6;
pub mod srq;
pub mod ud;
pub mod verbs;
pub mod wire;

pub use hca::Hca;
pub use qhca_uapi as abi;
pub use qtest::Qtest;
