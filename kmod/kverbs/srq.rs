// SPDX-License-Identifier: GPL-2.0

//! A kernel consumer's shared receive queue (nvmet-rdma's with `use_srq`): `2^log` receive
//! WQEs of `2^stride_log` bytes in the driver's ring, then the doorbell record
//! (`struct qhca_srq_dbrec`) the device writes. The driver writes WQEs into free slots and
//! rings `QHCA_DB_SRQ` with the new producer index; a slot is free again once the record's
//! consumer index (the WQEs the device took, free-running, the low 16 bits counting) has passed
//! it, which the driver reads only when the ring looks full and does not trust: an index that
//! does not lie between what it saw last and what it posted is ignored. A taken WQE completes
//! on the CQ of the QP that took it, with its `wr_id`; that completion frees nothing here.

use super::ring::KRing;
use crate::{device::QhcaDevice, rdma::RecvWr, uapi};
use core::{
    mem::offset_of,
    sync::atomic::{fence, Ordering},
};
use kernel::{
    new_spinlock_irq,
    prelude::*,
    sync::{Arc, SpinLockIrq},
};

/// The indices: what was posted (`pi`) and what the record last said the device took (`ci`),
/// both free-running.
struct Indices {
    pi: u32,
    ci: u32,
}

/// See the module documentation.
#[pin_data]
pub(crate) struct KSrq {
    dev: Arc<QhcaDevice>,
    ring: Arc<KRing>,
    uar: u32,
    srqn: u32,
    log: u8,
    stride_log: u8,
    max_sge: u16,
    #[pin]
    idx: SpinLockIrq<Indices>,
}

impl KSrq {
    /// Bytes of the ring of `2^log` slots of `2^stride_log` bytes and the record.
    pub(crate) fn ring_bytes(log: u8, stride_log: u8) -> u64 {
        (1u64 << (u32::from(log) + u32::from(stride_log)))
            + core::mem::size_of::<uapi::qhca_srq_dbrec>() as u64
    }

    /// The SRQ `srqn` of the device, rung through doorbell page `uar`, whose slots and record
    /// are in `ring` (at least [`KSrq::ring_bytes`]).
    pub(crate) fn new(
        dev: Arc<QhcaDevice>,
        ring: Arc<KRing>,
        uar: u32,
        srqn: u32,
        log: u8,
        stride_log: u8,
        max_sge: u16,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                dev,
                ring,
                uar,
                srqn,
                log,
                stride_log,
                max_sge,
                idx <- new_spinlock_irq!(Indices { pi: 0, ci: 0 }),
            }),
            GFP_KERNEL,
        )
    }

    /// Where the record's consumer index is.
    fn record_ci(&self) -> usize {
        (1usize << (u32::from(self.log) + u32::from(self.stride_log)))
            + offset_of!(uapi::qhca_srq_dbrec, ci)
    }

    /// Takes the record's index into account (`idx` locked): the slots it freed.
    fn refresh(&self, idx: &mut Indices) -> u32 {
        let ci = self.ring.read32(self.record_ci()) as u16;
        // The slots the device copied before it wrote the index are rewritten only after the
        // index was read: `dma_rmb`, as an acquire fence.
        fence(Ordering::Acquire);
        let posted = idx.pi.wrapping_sub(idx.ci);
        let k = u32::from(ci.wrapping_sub(idx.ci as u16));
        if k > posted {
            // Not between what was seen and what was posted: a broken device; nothing freed.
            return 0;
        }
        idx.ci = idx.ci.wrapping_add(k);
        k
    }

    /// `post_srq_recv`: posts the requests in order, ringing once; see
    /// [`crate::rdma::Driver::post_srq_recv`]. Never sleeps.
    pub(crate) fn post_recv(
        &self,
        wrs: &mut dyn Iterator<Item = Result<RecvWr<'_>>>,
    ) -> core::result::Result<(), (Error, usize)> {
        let depth = 1u32 << self.log;
        let mut idx = self.idx.lock();
        let start = idx.pi;
        let res = self
            .ring
            .write_recv_wqes(wrs, self.max_sge, self.stride_log.into(), || {
                if idx.pi.wrapping_sub(idx.ci) >= depth && self.refresh(&mut idx) == 0 {
                    return None;
                }
                let off = ((idx.pi & (depth - 1)) as usize) << self.stride_log;
                idx.pi = idx.pi.wrapping_add(1);
                Some(off)
            });
        if idx.pi != start {
            self.dev
                .ring_queue(self.uar, self.srqn, uapi::QHCA_DB_SRQ, idx.pi & 0xffff);
        }
        res
    }
}
