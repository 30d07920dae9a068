// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Completion queues: the ring in our memory, polled without a system call.
//!
//! Who writes what (the CQ buffer, `2^log` CQEs of 32 bytes then the doorbell record):
//!
//! - the device writes CQEs, each one's owner byte last; the owner bit of entry i on pass p
//!   (p = index >> log) is `(p + 1) & 1`: the ring starts zeroed and the first pass writes 1;
//! - the consumer (us) writes only `dbrec.ci`, its free-running consumer index, with a release
//!   store once per poll batch; the device reads it before it would overwrite an entry;
//! - when a QP moves to RESET or is destroyed, the consumer also rewrites the bodies of the
//!   entries it has not consumed yet (between its index and the device's), to drop that QP's
//!   (as rdma-core's mlx5 `__mlx5_cq_clean`); the device does not touch those entries until
//!   the consumer index passes them.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::mem::offset_of;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use qhca_uapi::{
    qhca_cqe, qhca_ib_create_cq, qhca_ioc_create_cq, qhca_ioc_handle, QHCA_CQE_OWNER,
    QHCA_CQE_SIZE, QHCA_CQE_WITH_IMM, QHCA_WC_BAD_RESP_ERR, QHCA_WC_COMP_SWAP, QHCA_WC_FETCH_ADD,
    QHCA_WC_GENERAL_ERR, QHCA_WC_LOC_ACCESS_ERR, QHCA_WC_LOC_LEN_ERR, QHCA_WC_LOC_PROT_ERR,
    QHCA_WC_LOC_QP_OP_ERR, QHCA_WC_RDMA_READ, QHCA_WC_RDMA_WRITE, QHCA_WC_RECV,
    QHCA_WC_RECV_RDMA_WITH_IMM, QHCA_WC_REM_ACCESS_ERR, QHCA_WC_REM_INV_REQ_ERR,
    QHCA_WC_REM_OP_ERR, QHCA_WC_RETRY_EXC_ERR, QHCA_WC_RNR_RETRY_EXC_ERR, QHCA_WC_SEND,
    QHCA_WC_SUCCESS, QHCA_WC_WR_FLUSH_ERR,
};
use qhca_uapi::{
    QHCA_CQE_WITH_GRH, QHCA_CQE_WITH_INV, QHCA_WC_BIND_MW, QHCA_WC_LOCAL_INV, QHCA_WC_MW_BIND_ERR,
};

use crate::context::{poll_fds, Context};
use crate::doorbell::Doorbell;
use crate::error::{Errno, Error, Result};
use crate::layout::CqLayout;
use crate::mem::PageBuf;
use crate::request::Request;
use crate::wq::WqShared;
use crate::{DbType, DbWord};

const CQE_SIZE: usize = QHCA_CQE_SIZE as usize;
const _: () = assert!(core::mem::size_of::<qhca_cqe>() == CQE_SIZE);

// Where each field of `struct qhca_cqe` is, from the bindings.
const WR_ID: usize = offset_of!(qhca_cqe, wr_id);
const BYTE_LEN: usize = offset_of!(qhca_cqe, byte_len);
const IMM_DATA: usize = offset_of!(qhca_cqe, imm_data);
const QPN: usize = offset_of!(qhca_cqe, qpn);
const SRC_QP: usize = offset_of!(qhca_cqe, src_qp);
const OPCODE: usize = offset_of!(qhca_cqe, opcode);
const STATUS: usize = offset_of!(qhca_cqe, status);
const VENDOR_ERR: usize = offset_of!(qhca_cqe, vendor_err);
const FLAGS: usize = offset_of!(qhca_cqe, flags);
const WQE_INDEX: usize = offset_of!(qhca_cqe, wqe_index);
/// Offset of the owner byte, written last by the device.
const OWNER_OFFSET: usize = offset_of!(qhca_cqe, owner);
const _: () = assert!(OWNER_OFFSET == CQE_SIZE - 1);

/// Orders the load of a CQE's owner byte before the loads of its body: the body may be read
/// only after the owner bit said the device finished writing it. rdma-core calls this
/// `udma_from_device_barrier()`; an acquire fence is a compiler barrier on x86-64 and a
/// `dmb ishld` on arm64.
#[inline(always)]
fn udma_from_device_barrier() {
    fence(Ordering::Acquire);
}

/// Orders every load of CQEs in a batch before the store of the consumer index that lets the
/// device overwrite them (a release store to the doorbell record).
const CI_PUBLISH: Ordering = Ordering::Release;

/// How a work request ended (`enum qhca_wc_status`, as `ibv_wc_status`).
///
/// After any error other than [`WcStatus::WrFlushErr`] the QP is in ERR: every other
/// outstanding request of both its queues then completes with [`WcStatus::WrFlushErr`], and
/// the QP has to be moved to RESET (and connected again) or destroyed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// It completed: the data is where the request said.
    #[default]
    Success,
    /// Local length error: a received message was longer than the receive request's SGEs (on
    /// the receive side), or the request's own lengths are inconsistent.
    LocLenErr,
    /// Local QP operation error: the send WQE was malformed (opcode, flags, SGE count, inline
    /// length, an atomic's shape).
    LocQpOpErr,
    /// Local protection error: a local SGE names no region of the QP's PD, lies outside its
    /// region, or needs LOCAL_WRITE the region lacks.
    LocProtErr,
    /// Flushed: the QP was in ERR when the request came up; it was not executed.
    WrFlushErr,
    /// A BIND_MW the window, the region or the rights did not allow; nothing changed.
    MwBindErr,
    /// The peer answered with something that does not fit the request.
    BadRespErr,
    /// Local access error (the receive side could not write where its SGEs point).
    LocAccessErr,
    /// The peer refused the request as invalid (e.g. a SEND longer than its receive buffer, a
    /// misaligned atomic).
    RemInvReqErr,
    /// The peer refused access: bad R_Key, range outside its region, or a right the region or
    /// the peer QP does not grant.
    RemAccessErr,
    /// The peer could not carry out the operation.
    RemOpErr,
    /// No acknowledgement after `retry_cnt` retries (no peer, or a PSN mismatch).
    RetryExcErr,
    /// The peer had no receive posted (RNR) `rnr_retry` times in a row.
    RnrRetryExcErr,
    /// Anything else.
    GeneralErr,
    /// A value this ABI version does not define.
    Unknown(u8),
}

impl WcStatus {
    /// Decodes the CQE's status byte.
    pub fn from_raw(v: u8) -> Self {
        use WcStatus::*;
        match u32::from(v) {
            QHCA_WC_SUCCESS => Success,
            QHCA_WC_LOC_LEN_ERR => LocLenErr,
            QHCA_WC_LOC_QP_OP_ERR => LocQpOpErr,
            QHCA_WC_LOC_PROT_ERR => LocProtErr,
            QHCA_WC_WR_FLUSH_ERR => WrFlushErr,
            QHCA_WC_MW_BIND_ERR => MwBindErr,
            QHCA_WC_BAD_RESP_ERR => BadRespErr,
            QHCA_WC_LOC_ACCESS_ERR => LocAccessErr,
            QHCA_WC_REM_INV_REQ_ERR => RemInvReqErr,
            QHCA_WC_REM_ACCESS_ERR => RemAccessErr,
            QHCA_WC_REM_OP_ERR => RemOpErr,
            QHCA_WC_RETRY_EXC_ERR => RetryExcErr,
            QHCA_WC_RNR_RETRY_EXC_ERR => RnrRetryExcErr,
            QHCA_WC_GENERAL_ERR => GeneralErr,
            _ => Unknown(v),
        }
    }

    /// True for [`WcStatus::Success`].
    pub fn is_ok(self) -> bool {
        self == WcStatus::Success
    }
}

/// What completed (`enum qhca_wc_opcode`, as `ibv_wc_opcode`). Error and flush completions
/// carry the opcode too (so [`Wc::is_recv`] tells the queue), but only a successful
/// completion's other fields are meaningful.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// A SEND or SEND_WITH_IMM of ours (send side). `byte_len` 0.
    #[default]
    Send,
    /// An RDMA WRITE or WRITE_WITH_IMM of ours (send side). `byte_len` 0.
    RdmaWrite,
    /// An RDMA READ of ours: the remote bytes are in our SGEs. `byte_len` is the length read.
    RdmaRead,
    /// A compare-and-swap of ours: the old remote value is in our SGE. `byte_len` 8.
    CompSwap,
    /// A fetch-and-add of ours: the old remote value is in our SGE. `byte_len` 8.
    FetchAdd,
    /// A BIND_MW of ours: the window is bound with its new key.
    BindMw,
    /// A LOCAL_INV of ours: the window is unbound.
    LocalInv,
    /// A receive request consumed by the peer's SEND (or SEND_WITH_IMM, then `imm` is set):
    /// `byte_len` bytes landed in its SGEs; `src_qp` is the sending QP. On a UD QP the bytes
    /// are a [`crate::Grh`] then the message ([`Wc::with_grh`]).
    Recv,
    /// A receive request consumed by the peer's RDMA WRITE_WITH_IMM. The data went where the
    /// WRITE said (the R_Key's region), not into the receive's SGEs, so the receive may have
    /// zero SGEs (`RecvWr { sges: &[] }`) and nothing of it is written. `byte_len` is the
    /// length of the WRITE (0 for a zero-length WRITE_WITH_IMM), `imm` is `Some`, `src_qp`
    /// the sending QP.
    RecvRdmaWithImm,
    /// A value this ABI version does not define.
    Unknown(u8),
}

impl WcOpcode {
    /// Decodes the CQE's opcode byte.
    pub fn from_raw(v: u8) -> Self {
        use WcOpcode::*;
        match u32::from(v) {
            QHCA_WC_SEND => Send,
            QHCA_WC_RDMA_WRITE => RdmaWrite,
            QHCA_WC_RDMA_READ => RdmaRead,
            QHCA_WC_COMP_SWAP => CompSwap,
            QHCA_WC_FETCH_ADD => FetchAdd,
            QHCA_WC_BIND_MW => BindMw,
            QHCA_WC_LOCAL_INV => LocalInv,
            QHCA_WC_RECV => Recv,
            QHCA_WC_RECV_RDMA_WITH_IMM => RecvRdmaWithImm,
            _ => Unknown(v),
        }
    }

    /// True if the completion is of a receive request: receive opcodes have bit 7 set. The
    /// device sets the opcode on error and flush CQEs too; it is how a CQE is told to belong
    /// to the receive or the send queue of its QP.
    pub fn is_recv_raw(v: u8) -> bool {
        v & 0x80 != 0
    }
}

/// A work completion.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wc {
    /// The request's wr_id.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was.
    pub opcode: WcOpcode,
    /// Bytes received or read; see [`WcOpcode`] for each opcode.
    pub byte_len: u32,
    /// Immediate data, when the CQE carries it (SEND_WITH_IMM, WRITE_WITH_IMM).
    pub imm: Option<u32>,
    /// The window key a SEND_WITH_INV invalidated on arrival (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
    /// The local QP.
    pub qpn: u32,
    /// The remote QP (receive completions; 0 for send completions). On a UD QP the sending
    /// QP of the sending port, which the GRH's `sgid` names.
    pub src_qp: u32,
    /// A [`crate::Grh`] of [`crate::GRH_SIZE`] bytes starts the receive buffer, and `byte_len`
    /// counts it (receives of UD QPs; `IBV_WC_GRH`).
    pub with_grh: bool,
    /// Device-specific detail of an error.
    pub vendor_err: u8,
    /// True if this completion is of a receive request.
    pub is_recv: bool,
    /// The free-running 16-bit index of the completed WQE in its queue (SQ or RQ, or the SRQ
    /// of a QP created on one); for a send completion every earlier WQE of that SQ is complete
    /// too.
    pub wqe_index: u16,
}

impl Wc {
    /// Bytes of the message itself: `byte_len` without the GRH of a UD receive.
    pub fn msg_len(&self) -> u32 {
        if self.with_grh {
            self.byte_len.saturating_sub(crate::GRH_SIZE as u32)
        } else {
            self.byte_len
        }
    }

    /// Decodes a CQE (`struct qhca_cqe`, little-endian).
    pub fn decode(b: &[u8; CQE_SIZE]) -> Wc {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let flags = u32::from(b[FLAGS]);
        Wc {
            wr_id: u64::from_le_bytes(b[WR_ID..WR_ID + 8].try_into().expect("8 bytes")),
            byte_len: u32_at(BYTE_LEN),
            imm: (flags & QHCA_CQE_WITH_IMM != 0).then(|| u32_at(IMM_DATA)),
            invalidated_rkey: (flags & QHCA_CQE_WITH_INV != 0).then(|| u32_at(IMM_DATA)),
            qpn: u32_at(QPN),
            src_qp: u32_at(SRC_QP),
            with_grh: flags & QHCA_CQE_WITH_GRH != 0,
            opcode: WcOpcode::from_raw(b[OPCODE]),
            status: WcStatus::from_raw(b[STATUS]),
            vendor_err: b[VENDOR_ERR],
            is_recv: WcOpcode::is_recv_raw(b[OPCODE]),
            wqe_index: u16_at(WQE_INDEX),
        }
    }
}

/// The consumer side of a CQ ring: reads CQEs by owner bit and publishes the consumer index.
///
/// # Invariants
///
/// `base` points to `CQE_SIZE << log` bytes of CQEs followed by the 64-byte doorbell record, in
/// memory that stays mapped while `self` lives, 64-byte aligned; only the device writes the CQEs
/// (and this value, in [`CqRing::clean`], the bodies of entries between `ci` and the device's
/// producer index), and only this value writes the doorbell record.
#[derive(Debug)]
pub(crate) struct CqRing {
    base: *mut u8,
    log: u32,
    ci: u32,
}

// SAFETY: the ring is plain memory; the value holds only its address and its own index, and
// nothing about it is tied to the thread that made it.
unsafe impl Send for CqRing {}

impl CqRing {
    /// A consumer over the ring at `base` with layout `layout`, starting at index 0.
    ///
    /// # Safety
    ///
    /// `base` must point to at least `layout.dbrec_offset + 64` bytes, 64-byte aligned, zeroed
    /// or written only as the device writes CQEs, that stay mapped and are read and written by
    /// no one else (but the device) for the life of the returned value.
    pub(crate) unsafe fn new(base: *mut u8, layout: &CqLayout) -> CqRing {
        debug_assert_eq!(base as usize % 64, 0);
        // INVARIANT: the caller's promise.
        CqRing {
            base,
            log: layout.log,
            ci: 0,
        }
    }

    /// The free-running consumer index.
    pub(crate) fn ci(&self) -> u32 {
        self.ci
    }

    /// Goes on in the ring at `base` with layout `layout`, at the same consumer index: the
    /// device moved the CQ there (RESIZE_CQ), with every CQE not consumed yet.
    ///
    /// # Safety
    ///
    /// As [`CqRing::new`] for the new ring, which the device initialised as RESIZE_CQ does (the
    /// CQEs from this consumer index on, the owner bits, the record) before this call; the
    /// device writes the old ring no more, and this value touches it no more.
    pub(crate) unsafe fn move_to(&mut self, base: *mut u8, layout: &CqLayout) {
        debug_assert_eq!(base as usize % 64, 0);
        // INVARIANT: the caller's promise.
        self.base = base;
        self.log = layout.log;
    }

    /// The owner bit a valid entry at free-running index `index` carries.
    pub(crate) fn owner_for(index: u32, log: u32) -> u8 {
        (((index >> log) + 1) & 1) as u8
    }

    fn mask(&self) -> u32 {
        (1u32 << self.log) - 1
    }

    fn entry(&self, index: u32) -> *mut u8 {
        // SAFETY: `(index & mask) * 32 + 32 <= 32 << log`, inside the mapping by the type
        // invariant, so the offset stays in the same allocation.
        unsafe { self.base.add(((index & self.mask()) as usize) * CQE_SIZE) }
    }

    /// `ci` of the doorbell record: this ring stores it, the device reads it.
    fn dbrec_ci(&self) -> &AtomicU32 {
        // SAFETY: by the type invariant the doorbell record is at `CQE_SIZE << log`, inside the
        // mapping, which outlives `&self`, and 64-byte aligned (so 4-aligned). The device only
        // reads it (a 4-byte DMA read before it would overwrite an entry) and never writes it;
        // in this process nothing but this ring accesses it (the type invariant; the host tests
        // read it with a volatile load on the ring's thread, between its calls), and the ring
        // only through this atomic. So no non-atomic access races with the atomic one, and each
        // store is one aligned 4-byte store: the device reads the old index or the new, never
        // a torn one.
        unsafe { AtomicU32::from_ptr(self.base.add(CQE_SIZE << self.log).cast::<u32>()) }
    }

    /// True if the device has written the entry at free-running `index` on its current pass.
    fn owned(&self, index: u32) -> bool {
        // SAFETY: the owner byte is in bounds (`entry`) and a byte is always aligned; the device
        // writes it with a single store, so an atomic load sees either the old or new value.
        let owner = unsafe { AtomicU8::from_ptr(self.entry(index).add(OWNER_OFFSET)) }
            .load(Ordering::Relaxed);
        owner & QHCA_CQE_OWNER as u8 == Self::owner_for(index, self.log)
    }

    /// The 32 bytes of the entry at `index`, which [`CqRing::owned`] said is complete.
    fn read(&self, index: u32) -> [u8; CQE_SIZE] {
        // SAFETY: 32 bytes in bounds (`entry`); the device does not write this entry again
        // until we publish a consumer index past it, so the copy is stable; volatile because
        // the device, not Rust, wrote it.
        unsafe { std::ptr::read_volatile(self.entry(index).cast::<[u8; CQE_SIZE]>()) }
    }

    fn publish(&self) {
        // Everything read (or moved) above happens before the device may reuse the entries.
        self.dbrec_ci().store(self.ci, CI_PUBLISH);
    }

    /// Moves up to `out.len()` completions into `out`; returns how many. The consumer index is
    /// published once, after the batch.
    pub(crate) fn poll(&mut self, out: &mut [Wc]) -> usize {
        let mut n = 0;
        while n < out.len() {
            if !self.owned(self.ci) {
                break;
            }
            // Owner bit → barrier → body.
            udma_from_device_barrier();
            out[n] = Wc::decode(&self.read(self.ci));
            n += 1;
            self.ci = self.ci.wrapping_add(1);
        }
        if n > 0 {
            self.publish();
        }
        n
    }

    /// Drops every unconsumed CQE of `qpn`, keeping the others in order (rdma-core's
    /// `__mlx5_cq_clean`): from the newest complete entry back to the consumer index, each
    /// kept entry moves up by the number dropped so far (keeping its slot's owner bit), then
    /// the consumer index moves past the dropped ones. Returns how many were dropped.
    ///
    /// Call it only when the device writes no more CQEs for `qpn` (after the QP went to RESET
    /// or was destroyed); CQEs of other QPs may keep arriving meanwhile.
    pub(crate) fn clean(&mut self, qpn: u32) -> u32 {
        let entries = 1u32 << self.log;
        let mut pi = self.ci;
        while pi.wrapping_sub(self.ci) < entries && self.owned(pi) {
            pi = pi.wrapping_add(1);
        }
        udma_from_device_barrier();
        let qpn_of =
            |b: &[u8; CQE_SIZE]| u32::from_le_bytes(b[QPN..QPN + 4].try_into().expect("4"));
        let mut dropped = 0u32;
        let mut i = pi;
        while i != self.ci {
            i = i.wrapping_sub(1);
            let cqe = self.read(i);
            if qpn_of(&cqe) == qpn {
                dropped += 1;
            } else if dropped > 0 {
                let dest = self.entry(i.wrapping_add(dropped));
                // SAFETY: `dest` is the entry at `i + dropped`, in `[ci, pi)`: complete and not
                // yet consumed, so the device does not write it (it writes only at `pi` and
                // later, and only once the consumer index has passed an entry); its 31 body
                // bytes are in bounds (`entry`); no reference to the ring exists. Its owner byte
                // is left as it is: the slot's owner bit for this pass.
                unsafe { std::ptr::copy_nonoverlapping(cqe.as_ptr(), dest, OWNER_OFFSET) };
            }
        }
        if dropped > 0 {
            self.ci = self.ci.wrapping_add(dropped);
            self.publish();
        }
        dropped
    }
}

/// The hasher of [`CqConsumer`]'s QP map: one multiplication by an odd constant (a QP number
/// is a `u32` the device hands out, not a key an adversary picks; std's SipHash cost a poll more
/// than a hundred instructions).
#[derive(Default)]
struct QpnHasher(u64);

impl Hasher for QpnHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The consumer of a CQ's ring in the process's memory: polls without a system call, and
/// credits each completion to the work queues ([`crate::WorkQueues`]) of the QP it names, which
/// frees their slots. Shared by a CQ's handle (which polls) and its QPs (which clean it when
/// they are reset or destroyed).
#[derive(Debug)]
pub struct CqConsumer {
    ring: CqRing,
    /// The work queues of the QPs that complete here, by qpn.
    qps: HashMap<u32, Arc<WqShared>, BuildHasherDefault<QpnHasher>>,
    /// CQEs that named no outstanding WQE of a known QP.
    stray: u64,
}

impl CqConsumer {
    /// A consumer over the ring at `base` with layout `layout`, starting at index 0.
    ///
    /// # Safety
    ///
    /// `base` points to at least `layout.buf_len` bytes, page aligned, zeroed or written only as
    /// the device writes CQEs, that stay mapped for the life of the returned value and that no
    /// one but the device and this consumer reads or writes meanwhile.
    pub unsafe fn new(base: *mut u8, layout: &CqLayout) -> CqConsumer {
        CqConsumer {
            // SAFETY: the caller's promise (`buf_len` covers the CQEs and the doorbell record).
            ring: unsafe { CqRing::new(base, layout) },
            qps: HashMap::default(),
            stray: 0,
        }
    }

    /// Polls up to `wcs.len()` completions; send and receive completions also free their slots
    /// in the QP they belong to. Returns how many were polled.
    #[inline]
    pub fn poll(&mut self, wcs: &mut [Wc]) -> usize {
        let n = self.ring.poll(wcs);
        let mut stray = 0;
        for wc in &wcs[..n] {
            if !self.qps.get(&wc.qpn).is_some_and(|wq| wq.complete(wc)) {
                stray += 1;
            }
        }
        self.stray += stray;
        n
    }

    /// Starts crediting completions of `qpn` to `wq`.
    pub fn attach(&mut self, qpn: u32, wq: Arc<WqShared>) {
        self.qps.insert(qpn, wq);
    }

    /// Stops crediting completions of `qpn`.
    pub fn detach(&mut self, qpn: u32) {
        self.qps.remove(&qpn);
    }

    /// Drops the unpolled CQEs of `qpn` (its QP went to RESET or was destroyed: the device
    /// writes none for it any more); returns how many.
    pub fn clean(&mut self, qpn: u32) -> u32 {
        self.ring.clean(qpn)
    }

    /// The free-running consumer index published so far (what an arm doorbell names).
    pub fn ci(&self) -> u32 {
        self.ring.ci()
    }

    /// Goes on in the ring at `base` with layout `layout`, to which the device moved the CQ
    /// (RESIZE_CQ, driver command `resize_user_cq`), at the same consumer index.
    ///
    /// # Safety
    ///
    /// As [`CqConsumer::new`] for the new ring, which the device initialised as RESIZE_CQ does
    /// before this call (its command returned success); the old ring may be unmapped after it.
    pub unsafe fn move_to(&mut self, base: *mut u8, layout: &CqLayout) {
        // SAFETY: the caller's promise.
        unsafe { self.ring.move_to(base, layout) }
    }

    /// How many CQEs the ring holds.
    pub fn entries(&self) -> u32 {
        1 << self.ring.log
    }

    /// Completions polled so far that named no outstanding work request of a QP of this CQ.
    pub fn stray(&self) -> u64 {
        self.stray
    }
}

/// A CQ's consumer and, once [`Cq::resize`] moved the CQ, the ring it reads.
///
/// # Invariants
///
/// The consumer reads `moved` if it is `Some`, else the first ring ([`CqInner`]'s `first`).
#[derive(Debug)]
struct CqState {
    // Before `moved`: dropped before the ring it reads.
    consumer: CqConsumer,
    /// The ring the last resize moved the CQ to; `None` while the CQ is in its first ring.
    moved: Option<PageBuf>,
}

impl Deref for CqState {
    type Target = CqConsumer;

    fn deref(&self) -> &CqConsumer {
        &self.consumer
    }
}

impl DerefMut for CqState {
    fn deref_mut(&mut self) -> &mut CqConsumer {
        &mut self.consumer
    }
}

/// The part of a CQ that outlives its handle while QPs use it: the device object, its ring
/// memory and the QPs whose completions land in it.
///
/// The first ring, the one CREATE_CQ named, stays mapped as long as this value, even after a
/// resize moved the CQ to another ring: its address is the handle by which the RDMA core names
/// the CQ in its events (the `user_handle` of CREATE_CQ, which RESIZE_CQ cannot change; the
/// context finds the CQ of an error event by it), and a mapping kept is an address no later
/// CQ of the process can be given, so no two CQs ever share a handle. Only the rings of later
/// resizes are unmapped, each when the next resize replaces it (the device no longer touches
/// a ring once RESIZE_CQ returned).
#[derive(Debug)]
pub(crate) struct CqInner {
    pub(crate) ctx: Arc<Context>,
    pub(crate) cqn: u32,
    // Before `first`: the consumer in it may read the first ring.
    state: Mutex<CqState>,
    // The ring CREATE_CQ named. Dropped after the destroy in `Drop` (and leaked if it failed),
    // never before: see above.
    first: Option<PageBuf>,
    eventfd: Option<OwnedFd>,
}

impl CqInner {
    fn state(&self) -> MutexGuard<'_, CqState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts crediting completions of `qpn` to `wq`.
    pub(crate) fn attach(&self, qpn: u32, wq: Arc<WqShared>) {
        self.state().attach(qpn, wq);
    }

    /// Stops crediting completions of `qpn`.
    pub(crate) fn detach(&self, qpn: u32) {
        self.state().detach(qpn);
    }

    /// Drops the unpolled CQEs of `qpn` (its QP went to RESET or was destroyed).
    pub(crate) fn clean(&self, qpn: u32) -> u32 {
        self.state().clean(qpn)
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let mut req = qhca_ioc_handle::request();
        req.handle = self.cqn;
        if self.ctx.cmd_destroy_cq(&mut req).is_err() {
            // The device may still write the ring (and the core still names the CQ by the first
            // ring's address): never let their addresses be reused.
            if let Some(b) = self.first.take() {
                b.leak();
            }
            let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
            if let Some(b) = state.moved.take() {
                b.leak();
            }
        }
    }
}

/// A completion queue.
///
/// The device object is destroyed when the handle and every [`crate::Qp`] using it are gone
/// (QPs hold a reference), so a CQ can never be destroyed under a QP through this API.
///
/// Polling ([`Cq::poll`]) makes no system call. A QP that moves to RESET or is destroyed first
/// removes its unpolled CQEs from its CQs, so a completion never names a QP that is not there,
/// and never frees slots of a QP that was reset.
#[derive(Debug)]
pub struct Cq {
    db: Arc<Doorbell>,
    // Last: the ring memory lives in here.
    inner: Arc<CqInner>,
}

/// Makes an eventfd (close-on-exec, non-blocking) for [`Cq::new`].
pub fn eventfd() -> Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; on success it returns a new fd that nothing else owns.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(Error::Sys {
            op: "eventfd",
            source: Errno::last(),
        });
    }
    // SAFETY: a fresh fd returned to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// How often [`Cq::poll_wait`] asks the driver whether the context is still associated.
pub const LIVENESS_INTERVAL: Duration = Duration::from_millis(2);

impl Cq {
    /// Creates a CQ of at least `entries` CQEs; `eventfd` (see [`eventfd`]) is signalled on each
    /// completion event of the armed CQ (see [`Cq::arm`]).
    ///
    /// On a context opened on the RDMA core's node, the core signals a completion channel of
    /// its own instead (one per CQ): `eventfd` only says whether the CQ has one, and
    /// [`Cq::event_fd`] is the channel (readable while an event is queued; [`Cq::wait`] reads
    /// it).
    pub fn new(ctx: &Arc<Context>, entries: u32, eventfd: Option<OwnedFd>) -> Result<Cq> {
        let eventfd = match (&ctx.uverbs, eventfd) {
            (Some(u), Some(_)) => Some(u.create_comp_channel()?),
            (_, fd) => fd,
        };
        let layout = CqLayout::new(entries)?;
        let db = ctx.doorbell()?;
        let buf = PageBuf::new(layout.buf_len)?;
        let mut req = qhca_ioc_create_cq::request();
        req.log_entries = layout.log;
        req.eventfd = eventfd.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        req.buf_addr = buf.addr();
        req.buf_len = buf.len() as u64;
        ctx.cmd_create_cq(&mut req)?;
        Ok(Self::with_buf(ctx, db, req.cqn, &layout, buf, eventfd))
    }

    fn with_buf(
        ctx: &Arc<Context>,
        db: Arc<Doorbell>,
        cqn: u32,
        layout: &CqLayout,
        buf: PageBuf,
        eventfd: Option<OwnedFd>,
    ) -> Cq {
        // SAFETY: `buf` is a fresh zeroed page-aligned mapping of `layout.buf_len` bytes, owned
        // by the `CqInner` built here next to the consumer (as `first`, which it drops only
        // after the consumer and never replaces), and written by no one but the device and
        // this consumer.
        let consumer = unsafe { CqConsumer::new(buf.as_ptr(), layout) };
        Cq {
            db,
            inner: Arc::new(CqInner {
                ctx: ctx.clone(),
                cqn,
                // INVARIANT: the consumer reads the first ring.
                state: Mutex::new(CqState {
                    consumer,
                    moved: None,
                }),
                first: Some(buf),
                eventfd,
            }),
        }
    }

    /// A CQ over fresh memory that no device knows, for host tests of the data path: the
    /// test writes CQEs into [`Cq::ring_ptr`] as the device would.
    #[cfg(test)]
    pub(crate) fn fake(ctx: &Arc<Context>, cqn: u32, entries: u32) -> Result<Cq> {
        let layout = CqLayout::new(entries)?;
        let buf = PageBuf::new(layout.buf_len)?;
        Ok(Self::with_buf(
            ctx,
            ctx.doorbell()?,
            cqn,
            &layout,
            buf,
            None,
        ))
    }

    /// The first ring's memory, where the CQ is until a resize (tests).
    #[cfg(test)]
    pub(crate) fn ring_ptr(&self) -> &PageBuf {
        self.inner.first.as_ref().expect("present")
    }

    /// The device's CQ number.
    pub fn cqn(&self) -> u32 {
        self.inner.cqn
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.inner.ctx
    }

    pub(crate) fn inner(&self) -> &Arc<CqInner> {
        &self.inner
    }

    /// Polls up to `wcs.len()` completions straight from the ring; no system call (the lock
    /// it takes is uncontended unless a QP of this CQ is being reset on another thread). Send
    /// and receive completions also free their slots in the QP they belong to.
    ///
    /// It does not notice a disassociated context (that would take a system call): a spin loop
    /// calls [`Cq::poll_wait`], or [`crate::Context::check`] every few milliseconds of finding
    /// nothing.
    pub fn poll(&mut self, wcs: &mut [Wc]) -> usize {
        self.inner.state().poll(wcs)
    }

    /// Spins on [`Cq::poll`] until at least one completion arrives or `timeout` passes
    /// (`None`: no limit); returns how many were polled, 0 on timeout. Every
    /// [`LIVENESS_INTERVAL`] of finding nothing it asks the driver whether the context is still
    /// associated (one `poll(2)`), so it fails with [`Error::Disassociated`] instead of spinning
    /// for ever when the device goes away.
    ///
    /// The clock is first read after 256 empty polls (the timeout counts from there), so a
    /// completion found within them costs no system call and no clock read, even on a guest
    /// whose clocksource the vDSO cannot read.
    pub fn poll_wait(&mut self, wcs: &mut [Wc], timeout: Option<Duration>) -> Result<usize> {
        let mut start: Option<Instant> = None;
        let mut next_check = LIVENESS_INTERVAL;
        let mut spins = 0u32;
        loop {
            let n = self.poll(wcs);
            if n > 0 {
                return Ok(n);
            }
            spins = spins.wrapping_add(1);
            if spins % 256 == 0 {
                let t = start.get_or_insert_with(Instant::now).elapsed();
                if timeout.is_some_and(|to| t >= to) {
                    return Ok(0);
                }
                if t >= next_check {
                    self.inner.ctx.check()?;
                    next_check = t + LIVENESS_INTERVAL;
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Asks for one event on the next completion: a doorbell `CQ_ARM` naming the current
    /// consumer index. The arm is one-shot, as `ibv_req_notify_cq`: it signals the eventfd
    /// once, at the first CQE written past that index (at once if one is already there), and
    /// must be renewed after each event.
    ///
    /// The race-free sequence is: arm, poll once more (a completion that arrived before the
    /// arm is found here), then [`Cq::wait`], then poll until empty, then arm again.
    pub fn arm(&self) {
        let ci = self.inner.state().ci();
        self.db
            .ring(DbWord::new(DbType::CqArm, self.inner.cqn, ci).raw());
    }

    /// Blocks (in poll(2), not spinning) until the eventfd is signalled or `timeout` passes
    /// (`None`: for ever); returns whether it was signalled, and resets it.
    ///
    /// `true` means an armed CQ got a CQE since the arm: a completion was written, not that
    /// one is still there (another thread may have polled it); poll to find out. `false` is a
    /// timeout. A wait never outlasts the device: the driver signals every eventfd when it
    /// disassociates a context, and this then fails with [`Error::Disassociated`].
    ///
    /// Fails with [`Error::Invalid`] if the CQ has no eventfd.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let Some(fd) = self.inner.eventfd.as_ref() else {
            return Err(Error::Invalid {
                what: "wait on a CQ created without an eventfd".into(),
            });
        };
        let ctx = &self.inner.ctx;
        if ctx.is_dead() {
            return Err(Error::Disassociated { op: "wait on a CQ" });
        }
        let mut pfd = [
            libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // Errors only: POLLERR once the context is disassociated.
                fd: ctx.event_fd(),
                events: 0,
                revents: 0,
            },
        ];
        if poll_fds(&mut pfd, timeout, "poll CQ eventfd")? == 0 {
            return Ok(false);
        }
        ctx.dead_if_err(pfd[1].revents, "wait on a CQ")?;
        if ctx.uverbs.is_some() {
            // A completion channel: POLLERR once the core closed it (disassociation).
            ctx.dead_if_err(pfd[0].revents, "wait on a CQ")?;
            crate::uverbs::drain_comp_channel(fd.as_fd());
            return Ok(true);
        }
        let mut v = [0u8; 8];
        // SAFETY: reads at most 8 bytes into our 8-byte buffer; the fd is non-blocking, so a
        // concurrent reader that emptied it gives EAGAIN, which is fine (it was signalled).
        unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
        Ok(true)
    }

    /// The eventfd, for epoll or an async reactor (`None` if created without one); on a context
    /// opened on the RDMA core's node, the CQ's completion channel (readable while an event is
    /// queued: [`Cq::wait`] reads it, 16 bytes an event).
    pub fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.eventfd.as_ref().map(AsFd::as_fd)
    }

    /// How many CQEs the ring holds: at least what [`Cq::new`] was asked for.
    pub fn entries(&self) -> u32 {
        self.inner.state().entries()
    }

    /// Moves the CQ to a new ring of at least `entries` CQEs (`ibv_resize_cq`); smaller or
    /// larger than the one it has. The completions not polled yet stay, in order, and the
    /// consumer index goes on; an armed CQ stays armed.
    ///
    /// Fails, with the CQ unchanged, if the new ring cannot hold the completions not polled
    /// yet (`EINVAL`: poll some first), or if the CQ is in error (`EBUSY`).
    ///
    /// The CQ's lock is held from the command to the switch, so nothing polls or cleans it
    /// meanwhile (a QP reset on another thread waits for it). The ring left is unmapped at
    /// once, except the first one, which is kept (unused) until the CQ is destroyed: the core
    /// names the CQ's events by its address (see [`CqInner`]).
    pub fn resize(&mut self, entries: u32) -> Result<()> {
        let layout = CqLayout::new(entries)?;
        let buf = PageBuf::new(layout.buf_len)?;
        let ring = qhca_ib_create_cq {
            buf_addr: buf.addr(),
            buf_len: buf.len() as u64,
            log_entries: layout.log,
            comp_mask: 0,
        };
        let inner = &*self.inner;
        let mut state = inner.state();
        // On failure the device kept the old ring (the ABI's promise) and `buf` is unmapped
        // unused.
        inner.ctx.cmd_resize_cq(inner.cqn, &ring)?;
        // SAFETY: `buf` is a fresh page-aligned mapping of `layout.buf_len` bytes, which the
        // command's success says the device initialised as RESIZE_CQ does, leaving the old ring
        // for good; nothing polled or published since the command started (we hold the lock
        // every poll and clean takes). From here on `buf` belongs to the state next to the
        // consumer (as `moved`, dropped after it or replaced under this lock by the next
        // resize, after the consumer moved on), and no one but the device and this consumer
        // touches it.
        unsafe { state.consumer.move_to(buf.as_ptr(), &layout) };
        // INVARIANT: the consumer reads `buf`. The ring it read is unmapped here if a resize
        // made it; the first ring stays in `first`.
        drop(state.moved.replace(buf));
        Ok(())
    }

    /// The consumer index published so far.
    pub fn ci(&self) -> u32 {
        self.inner.state().ci()
    }

    /// Completions polled so far that named no outstanding work request of a QP of this CQ
    /// (a device bug: the provider never trusts the index a CQE carries).
    pub fn stray_cqes(&self) -> u64 {
        self.inner.state().stray()
    }
}

#[cfg(test)]
pub(crate) mod tests;
