// SPDX-License-Identifier: GPL-2.0

//! Kernel verbs: the objects of the kernel's own RDMA consumers (the MAD layer and the CM on
//! the port's QP1, NVMe over RDMA, ...).
//!
//! They live in one context of the driver's own, opened at registration when the device has
//! `QHCA_CAP_KERNEL` (a doorbell page allocated with `QHCA_UAR_KERNEL`): its objects are made
//! by the same commands as a user context's ([`crate::verbs::Verbs`]), with rings in
//! DMA-coherent memory the driver owns ([`ring`]) and doorbells the driver rings itself. A
//! kernel PD's local DMA key is a physical region (`QHCA_ACCESS_PHYSICAL`); a kernel AH is
//! the driver's alone, and its address vector travels in each datagram WQE (`QHCA_WQE_AV`),
//! since the core creates AHs where no command can wait. The data path: [`qp`] writes WQEs
//! and rings, [`cq`] reads CQEs into `ib_wc`s, [`mr`] holds the page lists of fast
//! registration, [`srq`] writes the receive WQEs of shared receive queues.

pub(crate) mod cq;
pub(crate) mod mr;
pub(crate) mod qp;
pub(crate) mod ring;
pub(crate) mod srq;
