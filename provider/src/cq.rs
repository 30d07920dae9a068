// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Completion queues: the ring in our memory, polled without a system call.
//!
//! Who writes what (the CQ buffer, `2^log` CQEs of 32 bytes then the doorbell record):
//!
//! - the device writes CQEs, each one's owner byte last; the owner bit of entry i on pass p
//!   (p = index >> log) is `(p + 1) & 1`: the ring starts zeroed and the first pass writes 1;
//! - the consumer (us) writes only `dbrec.ci`, its free-running consumer index, with a release
//!   store once per poll batch; the device reads it before it would overwrite an entry.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qhca_uapi::{
    qhca_ioc_create_cq, qhca_ioc_handle, QHCA_CQE_OWNER, QHCA_CQE_SIZE, QHCA_CQE_WITH_IMM,
    QHCA_WC_BAD_RESP_ERR, QHCA_WC_COMP_SWAP, QHCA_WC_FETCH_ADD, QHCA_WC_GENERAL_ERR,
    QHCA_WC_LOC_ACCESS_ERR, QHCA_WC_LOC_LEN_ERR, QHCA_WC_LOC_PROT_ERR, QHCA_WC_LOC_QP_OP_ERR,
    QHCA_WC_RDMA_READ, QHCA_WC_RDMA_WRITE, QHCA_WC_RECV, QHCA_WC_RECV_RDMA_WITH_IMM,
    QHCA_WC_REM_ACCESS_ERR, QHCA_WC_REM_INV_REQ_ERR, QHCA_WC_REM_OP_ERR, QHCA_WC_RETRY_EXC_ERR,
    QHCA_WC_RNR_RETRY_EXC_ERR, QHCA_WC_SEND, QHCA_WC_SUCCESS, QHCA_WC_WR_FLUSH_ERR,
};

use crate::context::Context;
use crate::doorbell::Doorbell;
use crate::error::{Errno, Error, Result};
use crate::layout::CqLayout;
use crate::mem::PageBuf;
use crate::sys::{self, Request};
use crate::wq::WqShared;
use crate::{DbType, DbWord};

const CQE_SIZE: usize = QHCA_CQE_SIZE as usize;
/// Offset of the owner byte in a CQE.
const OWNER_OFFSET: usize = 31;

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

/// Completion status (`enum qhca_wc_status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum WcStatus {
    #[default]
    Success,
    LocLenErr,
    LocQpOpErr,
    LocProtErr,
    WrFlushErr,
    BadRespErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
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

/// What completed (`enum qhca_wc_opcode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum WcOpcode {
    #[default]
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    Recv,
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
    /// Bytes received (receive completions) or transferred.
    pub byte_len: u32,
    /// Immediate data, when the CQE carries it.
    pub imm: Option<u32>,
    /// The local QP.
    pub qpn: u32,
    /// The remote QP (receive completions).
    pub src_qp: u32,
    /// Device-specific detail of an error.
    pub vendor_err: u8,
    /// True if this completion is of a receive request.
    pub is_recv: bool,
}

impl Wc {
    /// Decodes a CQE (`struct qhca_cqe`, little-endian).
    pub fn decode(b: &[u8; CQE_SIZE]) -> Wc {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let flags = b[27];
        Wc {
            wr_id: u64::from_le_bytes(b[0..8].try_into().expect("8 bytes")),
            byte_len: u32_at(8),
            imm: (u32::from(flags) & QHCA_CQE_WITH_IMM != 0).then(|| u32_at(12)),
            qpn: u32_at(16),
            src_qp: u32_at(20),
            opcode: WcOpcode::from_raw(b[24]),
            status: WcStatus::from_raw(b[25]),
            vendor_err: b[26],
            is_recv: WcOpcode::is_recv_raw(b[24]),
        }
    }
}

/// The consumer side of a CQ ring: reads CQEs by owner bit and publishes the consumer index.
///
/// # Invariants
///
/// `base` points to `CQE_SIZE << log` bytes of CQEs followed by the 64-byte doorbell record, in
/// memory that stays mapped while `self` lives, 64-byte aligned; only the device writes the CQEs
/// and only this value writes the doorbell record.
#[derive(Debug)]
pub struct CqRing {
    base: *mut u8,
    log: u32,
    ci: u32,
}

// SAFETY: the ring is plain memory; the value holds only its address and its own index.
unsafe impl Send for CqRing {}

impl CqRing {
    /// A consumer over the ring at `base` with layout `layout`, starting at index 0.
    ///
    /// # Safety
    ///
    /// `base` must point to at least `layout.dbrec_offset + 64` bytes, 64-byte aligned, zeroed
    /// or written only as the device writes CQEs, that stay mapped and are read and written by
    /// no one else (but the device) for the life of the returned value.
    pub unsafe fn new(base: *mut u8, layout: &CqLayout) -> CqRing {
        debug_assert_eq!(base as usize % 64, 0);
        // INVARIANT: the caller's promise.
        CqRing {
            base,
            log: layout.log,
            ci: 0,
        }
    }

    /// The free-running consumer index.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// The owner bit a valid entry at free-running index `index` carries.
    pub fn owner_for(index: u32, log: u32) -> u8 {
        (((index >> log) + 1) & 1) as u8
    }

    fn dbrec_ci(&self) -> &AtomicU32 {
        // SAFETY: by the type invariant the doorbell record is at `CQE_SIZE << log`, inside the
        // mapping, 64-byte aligned (so 4-aligned); only this value accesses it, and only
        // through this atomic.
        unsafe { AtomicU32::from_ptr(self.base.add(CQE_SIZE << self.log).cast::<u32>()) }
    }

    /// Moves up to `out.len()` completions into `out`; returns how many. The consumer index is
    /// published once, after the batch.
    pub fn poll(&mut self, out: &mut [Wc]) -> usize {
        let mask = (1u32 << self.log) - 1;
        let mut n = 0;
        while n < out.len() {
            // SAFETY: `(ci & mask) * 32 + 32 <= 32 << log`, inside the mapping by the type
            // invariant.
            let cqe = unsafe { self.base.add(((self.ci & mask) as usize) * CQE_SIZE) };
            // SAFETY: the owner byte is in bounds (above) and a byte is always aligned; the device
            // writes it with a single store, so an atomic load sees either the old or new value.
            let owner =
                unsafe { AtomicU8::from_ptr(cqe.add(OWNER_OFFSET)) }.load(Ordering::Relaxed);
            if owner & QHCA_CQE_OWNER as u8 != Self::owner_for(self.ci, self.log) {
                break;
            }
            // Owner bit → barrier → body.
            udma_from_device_barrier();
            // SAFETY: 32 bytes in bounds (above); the device does not write this entry again
            // until we publish a consumer index past it, so the copy is stable; volatile because
            // the device, not Rust, wrote it.
            let bytes = unsafe { std::ptr::read_volatile(cqe.cast::<[u8; CQE_SIZE]>()) };
            out[n] = Wc::decode(&bytes);
            n += 1;
            self.ci = self.ci.wrapping_add(1);
        }
        if n > 0 {
            // Everything read above happens before the device may reuse the entries.
            self.dbrec_ci().store(self.ci, CI_PUBLISH);
        }
        n
    }
}

/// The part of a CQ that outlives its handle while QPs use it: the device object, its ring
/// memory and the QPs whose completions land in it.
#[derive(Debug)]
pub(crate) struct CqInner {
    pub(crate) ctx: Arc<Context>,
    pub(crate) cqn: u32,
    buf: Option<PageBuf>,
    eventfd: Option<OwnedFd>,
    /// The work queues of the QPs that complete here, by qpn.
    pub(crate) qps: Mutex<HashMap<u32, Arc<WqShared>>>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let mut req = qhca_ioc_handle::request();
        req.handle = self.cqn;
        if self
            .ctx
            .ioctl("DESTROY_CQ", sys::destroy_cq, &mut req)
            .is_err()
        {
            // The device may still write the ring: never let its addresses be reused.
            if let Some(b) = self.buf.take() {
                b.leak();
            }
        }
    }
}

/// A completion queue.
///
/// The device object is destroyed when the handle and every [`crate::Qp`] using it are gone
/// (QPs hold a reference), so a CQ can never be destroyed under a QP through this API.
#[derive(Debug)]
pub struct Cq {
    ring: CqRing,
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

impl Cq {
    /// Creates a CQ of at least `entries` CQEs; `eventfd` (see [`eventfd`]) is signalled on each
    /// completion event of the armed CQ.
    pub fn new(ctx: &Arc<Context>, entries: u32, eventfd: Option<OwnedFd>) -> Result<Cq> {
        let layout = CqLayout::new(entries)?;
        let db = ctx.doorbell()?;
        let buf = PageBuf::new(layout.buf_len)?;
        let mut req = qhca_ioc_create_cq::request();
        req.log_entries = layout.log;
        req.eventfd = eventfd.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        req.buf_addr = buf.addr();
        req.buf_len = buf.len() as u64;
        ctx.ioctl("CREATE_CQ", sys::create_cq, &mut req)?;
        // SAFETY: `buf` is a fresh zeroed page-aligned mapping of `layout.buf_len` bytes, owned by
        // `inner` (which the returned `Cq` keeps alive) and written by no one but the device.
        let ring = unsafe { CqRing::new(buf.as_ptr(), &layout) };
        Ok(Cq {
            ring,
            db,
            inner: Arc::new(CqInner {
                ctx: ctx.clone(),
                cqn: req.cqn,
                buf: Some(buf),
                eventfd,
                qps: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// A CQ over fresh memory that no device knows, for host tests of the data path: the
    /// test writes CQEs into [`Cq::ring_ptr`] as the device would.
    #[cfg(test)]
    pub(crate) fn fake(ctx: &Arc<Context>, cqn: u32, entries: u32) -> Result<Cq> {
        let layout = CqLayout::new(entries)?;
        let buf = PageBuf::new(layout.buf_len)?;
        // SAFETY: a fresh zeroed mapping of the layout's size, owned by `inner`.
        let ring = unsafe { CqRing::new(buf.as_ptr(), &layout) };
        Ok(Cq {
            ring,
            db: ctx.doorbell()?,
            inner: Arc::new(CqInner {
                ctx: ctx.clone(),
                cqn,
                buf: Some(buf),
                eventfd: None,
                qps: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Start of the ring memory (tests).
    #[cfg(test)]
    pub(crate) fn ring_ptr(&self) -> &PageBuf {
        self.inner.buf.as_ref().expect("present")
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

    /// Polls up to `wcs.len()` completions straight from the ring; no system call. Send and
    /// receive completions also free their slots in the QP they belong to.
    pub fn poll(&mut self, wcs: &mut [Wc]) -> usize {
        let n = self.ring.poll(wcs);
        if n > 0 {
            // Uncontended unless a post on another thread is in flight: no system call.
            let qps = self.inner.qps.lock().unwrap_or_else(|e| e.into_inner());
            for wc in &wcs[..n] {
                if let Some(wq) = qps.get(&wc.qpn) {
                    wq.complete(wc);
                }
            }
        }
        n
    }

    /// Asks for an event on the next completion (doorbell `CQ_ARM` naming the current consumer
    /// index). Arm, then poll once more, then [`Cq::wait`]: a completion that arrived before the
    /// arm is found by that poll.
    pub fn arm(&self) {
        self.db
            .ring(DbWord::new(DbType::CqArm, self.inner.cqn, self.ring.ci()).raw());
    }

    /// Blocks (in poll(2), not spinning) until the eventfd is signalled or `timeout` passes
    /// (`None`: forever); returns whether it was signalled, and resets it.
    ///
    /// Fails with [`Error::Invalid`] if the CQ has no eventfd.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let Some(fd) = self.inner.eventfd.as_ref() else {
            return Err(Error::Invalid {
                what: "wait on a CQ created without an eventfd".into(),
            });
        };
        let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid `pollfd` on our stack, exclusively borrowed for the call.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = Errno::last();
                if e == Errno::EINTR {
                    continue;
                }
                return Err(Error::Sys {
                    op: "poll CQ eventfd",
                    source: e,
                });
            }
            if r == 0 {
                return Ok(false);
            }
            break;
        }
        let mut v = [0u8; 8];
        // SAFETY: reads at most 8 bytes into our 8-byte buffer; the fd is non-blocking, so a
        // concurrent reader that emptied it gives EAGAIN, which is fine (it was signalled).
        unsafe { libc::read(fd.as_raw_fd(), v.as_mut_ptr().cast(), 8) };
        Ok(true)
    }

    /// The eventfd, for epoll or an async reactor (`None` if created without one).
    pub fn event_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inner.eventfd.as_ref().map(AsFd::as_fd)
    }

    /// The consumer index published so far.
    pub fn ci(&self) -> u32 {
        self.ring.ci()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Writes a CQE the way the device does: body first, owner byte last.
    pub(crate) fn device_write_cqe(buf: &PageBuf, log: u32, index: u32, body: &[u8; 32]) {
        let slot = ((index & ((1 << log) - 1)) as usize) * CQE_SIZE;
        let owner = CqRing::owner_for(index, log);
        // SAFETY: inside the test's own mapping; the ring under test only reads it.
        unsafe {
            std::ptr::copy_nonoverlapping(body.as_ptr(), buf.as_ptr().add(slot), 31);
            fence(Ordering::Release);
            std::ptr::write_volatile(buf.as_ptr().add(slot + 31), owner);
        }
    }

    pub(crate) fn cqe(wr_id: u64, opcode: u8, status: u8, qpn: u32, imm: Option<u32>) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&wr_id.to_le_bytes());
        b[8..12].copy_from_slice(&(wr_id as u32 ^ 0x55).to_le_bytes());
        b[12..16].copy_from_slice(&imm.unwrap_or(0xdead).to_le_bytes());
        b[16..20].copy_from_slice(&qpn.to_le_bytes());
        b[20..24].copy_from_slice(&(qpn + 1).to_le_bytes());
        b[24] = opcode;
        b[25] = status;
        b[26] = 0x7e;
        b[27] = u8::from(imm.is_some());
        b
    }

    fn dbrec_ci(buf: &PageBuf, l: &CqLayout) -> u32 {
        // SAFETY: inside the test's own mapping.
        unsafe { std::ptr::read_volatile(buf.as_ptr().add(l.dbrec_offset).cast::<u32>()) }
    }

    #[test]
    fn owner_bit_per_pass() {
        // log 1: two entries per pass; pass 0 writes 1, pass 1 writes 0, pass 2 writes 1.
        let got: Vec<u8> = (0..6).map(|i| CqRing::owner_for(i, 1)).collect();
        assert_eq!(got, [1, 1, 0, 0, 1, 1]);
        assert_eq!(CqRing::owner_for(u32::MAX, 1), 0, "pass 2^31 - 1 is odd");
        assert_eq!(CqRing::owner_for(u32::MAX, 16), 0, "pass 0xffff is odd");
        assert_eq!(CqRing::owner_for(1 << 16, 16), 0);
    }

    #[test]
    fn decodes_every_field() {
        let b = cqe(0x0102_0304_0506_0708, 0x81, 0x0a, 0x42, Some(0xfeed));
        let wc = Wc::decode(&b);
        assert_eq!(
            wc,
            Wc {
                wr_id: 0x0102_0304_0506_0708,
                status: WcStatus::RemAccessErr,
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: 0x0506_0708 ^ 0x55,
                imm: Some(0xfeed),
                qpn: 0x42,
                src_qp: 0x43,
                vendor_err: 0x7e,
                is_recv: true,
            }
        );
        let wc = Wc::decode(&cqe(1, 0x03, 0, 7, None));
        assert_eq!(
            (wc.imm, wc.opcode, wc.status, wc.is_recv),
            (None, WcOpcode::CompSwap, WcStatus::Success, false)
        );
        assert_eq!(WcOpcode::from_raw(0x7f), WcOpcode::Unknown(0x7f));
        assert_eq!(WcStatus::from_raw(0x0d), WcStatus::RnrRetryExcErr);
        assert_eq!(WcStatus::from_raw(0x05), WcStatus::WrFlushErr);
        assert_eq!(WcStatus::from_raw(0x15), WcStatus::GeneralErr);
        assert_eq!(WcStatus::from_raw(0x06), WcStatus::Unknown(6));
    }

    #[test]
    fn polls_a_fake_ring_across_passes_and_publishes_ci_per_batch() {
        let l = CqLayout::new(4).unwrap();
        let buf = PageBuf::new(l.buf_len).unwrap();
        // SAFETY: our own zeroed mapping of the layout's size, written only by `device_write_cqe`.
        let mut ring = unsafe { CqRing::new(buf.as_ptr(), &l) };
        let mut wcs = [Wc::default(); 8];
        assert_eq!(ring.poll(&mut wcs), 0, "a zeroed ring is empty");
        assert_eq!(dbrec_ci(&buf, &l), 0);

        for i in 0..3 {
            device_write_cqe(&buf, l.log, i, &cqe(u64::from(i), 0, 0, 9, None));
        }
        assert_eq!(ring.poll(&mut wcs[..2]), 2, "limited by the output");
        assert_eq!(dbrec_ci(&buf, &l), 2);
        assert_eq!(ring.poll(&mut wcs), 1);
        assert_eq!(wcs[0].wr_id, 2);
        assert_eq!((ring.ci(), dbrec_ci(&buf, &l)), (3, 3));

        // Index 3 then 4..7 (second pass, owner 0) then 8 (third pass, owner 1).
        for i in 3..9 {
            device_write_cqe(&buf, l.log, i, &cqe(u64::from(i), 0x80, 0, 9, None));
            let n = ring.poll(&mut wcs);
            assert_eq!(n, 1, "index {i}");
            assert_eq!(wcs[0].wr_id, u64::from(i));
            assert!(wcs[0].is_recv);
        }
        assert_eq!(dbrec_ci(&buf, &l), 9);
        // A stale entry is not taken: slot 1 still holds index 5 (pass 1, owner 0), and index 9
        // (pass 2) expects owner 1.
        assert_eq!(ring.poll(&mut wcs), 0);
        assert_eq!(dbrec_ci(&buf, &l), 9, "an empty poll publishes nothing new");
    }
}
