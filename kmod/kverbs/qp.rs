// SPDX-License-Identifier: GPL-2.0

//! A kernel consumer's queue pair: its send and receive rings in the driver's memory, the WQEs
//! the core's work requests become (the ABI header's formats: a control segment, the remote
//! address or datagram segment, the atomic operands, then scatter entries or inline data), and
//! the doorbells that hand them to the device.
//!
//! Each queue has its lock (the core may post from interrupt context) and its producer index;
//! a slot is free again once a completion names it or a later WQE of the queue
//! ([`KQp::send_done`], [`KQp::recv_done`], from the CQ's poll). A request that does not fit
//! (queue full, too many scatter entries, inline data too long, an opcode qhca has not) is
//! refused with nothing written, and the ones before it are rung.

use super::{mr::KFastMr, ring::KRing};
use crate::{
    device::QhcaDevice,
    rdma::{SendWr, WrKind},
    uapi,
};
use kernel::{
    bindings, new_spinlock_irq,
    prelude::*,
    sync::{Arc, SpinLockIrq},
    transmute::AsBytes,
};

/// What a datagram's address handle gives the WQE: the address vector it carries.
pub(crate) trait KernelAh {
    /// The address vector of a kernel AH (`None`: a user's AH, which a kernel QP cannot use).
    fn kernel_av(&self) -> Option<uapi::qhca_ah_attr>;
}

/// What a fast registration's region gives the WQE: its page list.
pub(crate) trait KernelMr {
    /// The page list of a kernel fast-registration region (`None`: any other region).
    fn fast_mr(&self) -> Option<&KFastMr>;
}

/// The shape of a kernel QP's rings, as CREATE_QP names it.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) sq_log: u8,
    pub(crate) sq_stride_log: u8,
    pub(crate) rq_log: u8,
    pub(crate) rq_stride_log: u8,
    pub(crate) max_sge: u16,
    pub(crate) max_inline: u16,
}

impl Shape {
    /// The smallest rings for `cap` on a QP that is a datagram QP or not: each slot holds the
    /// headers and the scatter entries or inline data asked for.
    pub(crate) fn for_cap(cap: &bindings::ib_qp_cap, datagram: bool, max_wr: u32) -> Result<Self> {
        let log_of = |n: u32| -> Result<u8> {
            let n = n.max(2);
            if n > max_wr {
                return Err(EINVAL);
            }
            // `max_wr` is the device's word: no overflow whatever it says.
            let n = n.checked_next_power_of_two().ok_or(EINVAL)?;
            Ok(n.trailing_zeros() as u8)
        };
        let max_sge = cap.max_send_sge.max(cap.max_recv_sge).max(1);
        let head = if datagram {
            uapi::QHCA_WQE_AV_DATA_OFFSET
        } else {
            uapi::QHCA_WQE_DATA_OFFSET
        };
        // The consumer's sizes, saturated: one too large for any slot is refused below.
        let sges = max_sge.saturating_mul(16);
        let send = head.saturating_add(sges.max(cap.max_inline_data));
        let recv = sges.saturating_add(16);
        let stride = |bytes: u32, min: u32, max: u32| -> Result<u8> {
            let bytes = bytes.checked_next_power_of_two().ok_or(EINVAL)?;
            let log = bytes.trailing_zeros().max(min);
            if log > max {
                return Err(EINVAL);
            }
            Ok(log as u8)
        };
        Ok(Self {
            sq_log: log_of(cap.max_send_wr)?,
            sq_stride_log: stride(
                send,
                uapi::QHCA_SQ_MIN_STRIDE_LOG,
                uapi::QHCA_SQ_MAX_STRIDE_LOG,
            )?,
            rq_log: log_of(cap.max_recv_wr)?,
            rq_stride_log: stride(
                recv,
                uapi::QHCA_RQ_MIN_STRIDE_LOG,
                uapi::QHCA_RQ_MAX_STRIDE_LOG,
            )?,
            max_sge: u16::try_from(max_sge).map_err(|_| EINVAL)?,
            max_inline: u16::try_from(cap.max_inline_data).map_err(|_| EINVAL)?,
        })
    }

    /// Where the receive queue starts: the send queue, page aligned.
    pub(crate) fn rq_offset(&self) -> usize {
        let sq = 1usize << (self.sq_log + self.sq_stride_log);
        sq.next_multiple_of(uapi::QHCA_PAGE_SIZE as usize)
    }

    /// The same send queue with no receive queue (a QP that receives from an SRQ: CREATE_QP
    /// names its receive queue with logs of 0).
    pub(crate) fn without_rq(self) -> Self {
        Self {
            rq_log: 0,
            rq_stride_log: 0,
            ..self
        }
    }

    fn has_rq(&self) -> bool {
        self.rq_stride_log != 0
    }

    /// Bytes of both rings (of the send queue alone, page aligned, without a receive queue).
    pub(crate) fn bytes(&self) -> u64 {
        if !self.has_rq() {
            return self.rq_offset() as u64;
        }
        (self.rq_offset() + (1usize << (self.rq_log + self.rq_stride_log))) as u64
    }

    /// What the QP can take, for the core's `ib_qp_cap`.
    pub(crate) fn write_cap(&self, cap: &mut bindings::ib_qp_cap) {
        let rq = self.has_rq();
        cap.max_send_wr = 1 << self.sq_log;
        cap.max_recv_wr = if rq { 1 << self.rq_log } else { 0 };
        cap.max_send_sge = u32::from(self.max_sge);
        cap.max_recv_sge = if rq { u32::from(self.max_sge) } else { 0 };
        cap.max_inline_data = u32::from(self.max_inline);
    }
}

/// One work queue's indices (free-running, 16 bits on the wire).
struct Wq {
    pi: u32,
    ci: u32,
}

impl Wq {
    fn free(&self, log: u8) -> u32 {
        (1u32 << log) - self.pi.wrapping_sub(self.ci)
    }

    /// The device is done with every slot up to `index` (a 16-bit WQE index).
    fn done(&mut self, index: u16) {
        let ahead = self.pi.wrapping_sub(u32::from(index).wrapping_add(1)) & 0xffff;
        let ci = self.pi.wrapping_sub(ahead);
        // Only forward, and never past what was posted (a device naming a slot never posted).
        if ci.wrapping_sub(self.ci) <= self.pi.wrapping_sub(self.ci) {
            self.ci = ci;
        }
    }
}

/// See the module documentation.
#[pin_data]
pub(crate) struct KQp {
    dev: Arc<QhcaDevice>,
    ring: Arc<KRing>,
    uar: u32,
    qpn: u32,
    datagram: bool,
    /// The port's Ethernet QP: SENDs of one frame each, checksum offload.
    eth: bool,
    signal_all: bool,
    /// Receives from an SRQ: no receive queue of its own, and its receive completions name
    /// slots of the SRQ (which frees them itself).
    on_srq: bool,
    shape: Shape,
    /// The core's QP, for the completions the CQ reports (`ib_wc.qp`).
    core_qp: *mut bindings::ib_qp,
    #[pin]
    sq: SpinLockIrq<Wq>,
    #[pin]
    rq: SpinLockIrq<Wq>,
}

// SAFETY: `core_qp` is only handed back to the core in completions, which it reads while the QP
// exists (a kernel consumer destroys its QP only once its completions are drained, and the CQ
// stops reporting a destroyed QP's: `KCq::detach`); everything else is locked or immutable.
unsafe impl Send for KQp {}
// SAFETY: As above.
unsafe impl Sync for KQp {}

/// Byte offsets of a send WQE's fields (`struct qhca_wqe_ctrl` and what follows it), from the
/// ABI's structs.
mod wqe {
    use crate::uapi::{qhca_wqe_ctrl, qhca_wqe_raddr, qhca_wqe_reg_mr};
    use core::mem::{offset_of, size_of};

    pub(super) const WR_ID: usize = offset_of!(qhca_wqe_ctrl, wr_id);
    pub(super) const OPCODE: usize = offset_of!(qhca_wqe_ctrl, opcode);
    pub(super) const FLAGS: usize = offset_of!(qhca_wqe_ctrl, flags);
    pub(super) const NUM_SGE: usize = offset_of!(qhca_wqe_ctrl, num_sge);
    pub(super) const IMM: usize = offset_of!(qhca_wqe_ctrl, imm_data);
    pub(super) const INLINE_LEN: usize = offset_of!(qhca_wqe_ctrl, inline_len);
    /// `struct qhca_wqe_raddr` or `struct qhca_wqe_ud`.
    pub(super) const SEG: usize = size_of::<qhca_wqe_ctrl>();
    /// `struct qhca_wqe_atomic`.
    pub(super) const ATOMIC: usize = SEG + size_of::<qhca_wqe_raddr>();
    /// `struct qhca_wqe_reg_mr`, in place of the remote address and atomic segments.
    pub(super) const REG_IOVA: usize = SEG + offset_of!(qhca_wqe_reg_mr, iova);
    pub(super) const REG_LENGTH: usize = SEG + offset_of!(qhca_wqe_reg_mr, length);
    pub(super) const REG_PAGES: usize = SEG + offset_of!(qhca_wqe_reg_mr, pages_addr);
    pub(super) const REG_KEY: usize = SEG + offset_of!(qhca_wqe_reg_mr, key);
    pub(super) const REG_ACCESS: usize = SEG + offset_of!(qhca_wqe_reg_mr, access);
}

impl KQp {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        dev: Arc<QhcaDevice>,
        ring: Arc<KRing>,
        uar: u32,
        qpn: u32,
        datagram: bool,
        eth: bool,
        signal_all: bool,
        on_srq: bool,
        shape: Shape,
        core_qp: *mut bindings::ib_qp,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                dev,
                ring,
                uar,
                qpn,
                datagram,
                eth,
                signal_all,
                on_srq,
                shape,
                core_qp,
                sq <- new_spinlock_irq!(Wq { pi: 0, ci: 0 }),
                rq <- new_spinlock_irq!(Wq { pi: 0, ci: 0 }),
            }),
            GFP_KERNEL,
        )
    }

    pub(crate) fn qpn(&self) -> u32 {
        self.qpn
    }

    pub(crate) fn core_qp(&self) -> *mut bindings::ib_qp {
        self.core_qp
    }

    pub(crate) fn send_done(&self, index: u16) {
        self.sq.lock().done(index);
    }

    pub(crate) fn recv_done(&self, index: u16) {
        if !self.on_srq {
            self.rq.lock().done(index);
        }
    }

    /// Rings `kind`'s doorbell with producer index `pi`.
    fn ring_doorbell(&self, kind: u32, pi: u32) {
        self.dev.ring_queue(self.uar, self.qpn, kind, pi & 0xffff);
    }

    /// `post_send`: see [`crate::rdma::Driver::post_send`].
    pub(crate) fn post_send<A: KernelAh, M: KernelMr>(
        &self,
        wrs: &mut dyn Iterator<Item = Result<SendWr<'_, A, M>>>,
    ) -> core::result::Result<(), (Error, usize)> {
        let mut sq = self.sq.lock();
        let start = sq.pi;
        let mut res = Ok(());
        for (n, wr) in wrs.enumerate() {
            if let Err(e) = wr.and_then(|wr| self.write_send(&mut sq, &wr)) {
                res = Err((e, n));
                break;
            }
        }
        if sq.pi != start {
            self.ring_doorbell(uapi::QHCA_DB_SQ, sq.pi);
        }
        res
    }

    /// Writes one send WQE at the producer index and moves it on, or refuses the request.
    fn write_send<A: KernelAh, M: KernelMr>(&self, sq: &mut Wq, wr: &SendWr<'_, A, M>) -> Result {
        let s = &self.shape;
        if sq.free(s.sq_log) == 0 {
            return Err(ENOMEM);
        }
        let opcode = match wr.opcode {
            bindings::ib_wr_opcode_IB_WR_SEND => uapi::QHCA_WR_SEND,
            _ if self.eth => return Err(EINVAL),
            bindings::ib_wr_opcode_IB_WR_SEND_WITH_IMM => uapi::QHCA_WR_SEND_WITH_IMM,
            _ if self.datagram => return Err(EINVAL),
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE => uapi::QHCA_WR_RDMA_WRITE,
            bindings::ib_wr_opcode_IB_WR_RDMA_WRITE_WITH_IMM => uapi::QHCA_WR_RDMA_WRITE_WITH_IMM,
            bindings::ib_wr_opcode_IB_WR_RDMA_READ => uapi::QHCA_WR_RDMA_READ,
            bindings::ib_wr_opcode_IB_WR_ATOMIC_CMP_AND_SWP => uapi::QHCA_WR_ATOMIC_CMP_AND_SWP,
            bindings::ib_wr_opcode_IB_WR_ATOMIC_FETCH_AND_ADD => uapi::QHCA_WR_ATOMIC_FETCH_AND_ADD,
            bindings::ib_wr_opcode_IB_WR_SEND_WITH_INV => uapi::QHCA_WR_SEND_WITH_INV,
            bindings::ib_wr_opcode_IB_WR_LOCAL_INV => uapi::QHCA_WR_LOCAL_INV,
            bindings::ib_wr_opcode_IB_WR_REG_MR => uapi::QHCA_WR_REG_MR,
            // Masked atomics, LSO, signature handover and the rest: not on this device.
            _ => return Err(EINVAL),
        };
        let inline = wr.flags & bindings::ib_send_flags_IB_SEND_INLINE as u32 != 0;
        let data_off = if self.datagram {
            uapi::QHCA_WQE_AV_DATA_OFFSET
        } else {
            uapi::QHCA_WQE_DATA_OFFSET
        } as usize;
        let stride = 1usize << s.sq_stride_log;
        let total: u64 = wr.sges.iter().map(|g| u64::from(g.length)).sum();
        let local = opcode == uapi::QHCA_WR_LOCAL_INV || opcode == uapi::QHCA_WR_REG_MR;
        if local && (!wr.sges.is_empty() || inline) {
            return Err(EINVAL);
        }
        if matches!(wr.kind, WrKind::RegMr { .. }) != (opcode == uapi::QHCA_WR_REG_MR) {
            return Err(EINVAL);
        }
        if inline {
            if total > u64::from(s.max_inline) || data_off + total as usize > stride {
                return Err(EINVAL);
            }
        } else if wr.sges.len() > usize::from(s.max_sge) || data_off + 16 * wr.sges.len() > stride {
            return Err(EINVAL);
        }
        let mut flags = 0u32;
        if self.signal_all || wr.flags & bindings::ib_send_flags_IB_SEND_SIGNALED as u32 != 0 {
            flags |= uapi::QHCA_WQE_SIGNALED;
        }
        if wr.flags & bindings::ib_send_flags_IB_SEND_SOLICITED as u32 != 0 {
            flags |= uapi::QHCA_WQE_SOLICITED;
        }
        if wr.flags & bindings::ib_send_flags_IB_SEND_FENCE as u32 != 0 {
            flags |= uapi::QHCA_WQE_FENCE;
        }
        if inline {
            flags |= uapi::QHCA_WQE_INLINE;
        }
        // An Ethernet frame's checksum: `imm` says where (`qhca_eth.c`).
        let csum = self.eth && wr.flags & bindings::ib_send_flags_IB_SEND_IP_CSUM as u32 != 0;
        if csum {
            flags |= uapi::QHCA_WQE_CSUM;
        }
        if matches!(wr.kind, WrKind::Ud { .. }) != self.datagram {
            return Err(EINVAL);
        }
        let base = ((sq.pi & ((1 << s.sq_log) - 1)) as usize) << s.sq_stride_log;
        let r = &self.ring;
        r.zero(base, data_off);
        match &wr.kind {
            WrKind::Ud {
                ah,
                remote_qpn,
                remote_qkey,
            } => {
                let av = ah.kernel_av().ok_or(EINVAL)?;
                flags |= uapi::QHCA_WQE_AV;
                r.write32(0, base + wqe::SEG);
                r.write32(*remote_qpn, base + wqe::SEG + 4);
                r.write32(*remote_qkey, base + wqe::SEG + 8);
                let le = crate::verbs::av_to_le(&av);
                r.write_bytes(le.as_bytes(), base + uapi::QHCA_WQE_DATA_OFFSET as usize);
            }
            WrKind::Rdma { remote_addr, rkey } => {
                r.write64(*remote_addr, base + wqe::SEG);
                r.write32(*rkey, base + wqe::SEG + 8);
            }
            WrKind::Atomic {
                remote_addr,
                rkey,
                compare_add,
                swap,
            } => {
                r.write64(*remote_addr, base + wqe::SEG);
                r.write32(*rkey, base + wqe::SEG + 8);
                if opcode == uapi::QHCA_WR_ATOMIC_CMP_AND_SWP {
                    r.write64(*swap, base + wqe::ATOMIC);
                    r.write64(*compare_add, base + wqe::ATOMIC + 8);
                } else {
                    r.write64(*compare_add, base + wqe::ATOMIC);
                }
            }
            WrKind::RegMr {
                mr,
                iova,
                length,
                key,
                access,
            } => self.write_reg_mr(base, *mr, *iova, *length, *key, *access)?,
            WrKind::Plain => {}
        }
        if inline {
            let mut off = base + data_off;
            for g in wr.sges {
                if g.length == 0 {
                    continue;
                }
                // SAFETY: An inline request's scatter entries are kernel virtual addresses of
                // `length` readable bytes, valid for the call (the verbs' contract for
                // `IB_SEND_INLINE`); they are only read.
                let src = unsafe {
                    core::slice::from_raw_parts(g.addr as usize as *const u8, g.length as usize)
                };
                r.write_bytes(src, off);
                off += src.len();
            }
            r.write32(total as u32, base + wqe::INLINE_LEN);
        } else {
            self.ring.write_sges(wr.sges, base + data_off);
            r.write8(wr.sges.len() as u8, base + wqe::NUM_SGE);
        }
        r.write64(wr.wr_id, base + wqe::WR_ID);
        let imm = if self.eth && !csum { 0 } else { wr.imm };
        r.write32(imm, base + wqe::IMM);
        r.write8(flags as u8, base + wqe::FLAGS);
        r.write8(opcode as u8, base + wqe::OPCODE);
        sq.pi = sq.pi.wrapping_add(1);
        Ok(())
    }

    /// The registration segment of a REG_MR WQE at `base`: region `mr` (a fast-registration
    /// region, mapped over at least the pages `[iova, iova + length)` spans) as
    /// `[iova, iova + length)` with `key` and `access` (`IB_ACCESS_*`: the local and remote
    /// rights are qhca's, hints are ignored).
    fn write_reg_mr<M: KernelMr>(
        &self,
        base: usize,
        mr: &M,
        iova: u64,
        length: u64,
        key: u32,
        access: u32,
    ) -> Result {
        let f = mr.fast_mr().ok_or(EINVAL)?;
        let (list, mapped) = f.pages();
        let rights = access & uapi::QHCA_ACCESS_ALL;
        if access & !(rights | bindings::ib_access_flags_IB_ACCESS_OPTIONAL) != 0 {
            return Err(EINVAL);
        }
        let page = u64::from(uapi::QHCA_PAGE_SIZE);
        let span = (iova % page)
            .checked_add(length)
            .ok_or(EINVAL)?
            .div_ceil(page);
        // Only pages this mapping wrote: past them the list holds an earlier mapping's.
        if length == 0 || span > u64::from(mapped) {
            return Err(EINVAL);
        }
        let r = &self.ring;
        r.write64(iova, base + wqe::REG_IOVA);
        r.write64(length, base + wqe::REG_LENGTH);
        r.write64(list, base + wqe::REG_PAGES);
        r.write32(key, base + wqe::REG_KEY);
        r.write32(rights, base + wqe::REG_ACCESS);
        Ok(())
    }

    /// `post_recv`: see [`crate::rdma::Driver::post_recv`].
    pub(crate) fn post_recv(
        &self,
        wrs: &mut dyn Iterator<Item = Result<crate::rdma::RecvWr<'_>>>,
    ) -> core::result::Result<(), (Error, usize)> {
        let s = &self.shape;
        if self.on_srq {
            // Its receives are the SRQ's (`ib_post_srq_recv`).
            return Err((EINVAL, 0));
        }
        let mut rq = self.rq.lock();
        let start = rq.pi;
        let res = self
            .ring
            .write_recv_wqes(wrs, s.max_sge, s.rq_stride_log.into(), || {
                if rq.free(s.rq_log) == 0 {
                    return None;
                }
                let off =
                    s.rq_offset() + (((rq.pi & ((1 << s.rq_log) - 1)) as usize) << s.rq_stride_log);
                rq.pi = rq.pi.wrapping_add(1);
                Some(off)
            });
        if rq.pi != start {
            self.ring_doorbell(uapi::QHCA_DB_RQ, rq.pi);
        }
        res
    }
}
