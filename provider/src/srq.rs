// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Shared receive queues (IBA 10.2.9): one receive queue that RC and UD QPs of a context take
//! their receive WQEs from ([`Srq`], [`crate::Qp::with_srq`]), posted to without a system call
//! ([`SrqQueue`]).
//!
//! Who writes what (the SRQ buffer: `2^log` slots, then `struct qhca_srq_dbrec` at
//! `1 << (log + stride_log)`):
//!
//! - the provider writes receive WQEs (`struct qhca_rwqe` and its SGEs, as in a QP's receive
//!   queue) into free slots only, then rings `QHCA_DB_SRQ` with the new producer index
//!   (free-running, 16 bits), once per post call; it never writes the record;
//! - the device reads the slots between its consumer index and the producer index rung, copies
//!   a WQE when a QP takes it, and then writes the record's `ci`: the WQEs taken, free-running,
//!   the low 16 bits counting. A slot is free again once `ci` has passed it, before its WQE
//!   completes.
//!
//! The provider reads `ci` (an acquire load) only when the ring looks full, and does not trust
//! it: a value that is not between what it saw last and what it posted is ignored.
//!
//! A taken WQE completes on the receive CQ of the QP that took it, in the order messages end
//! (not ring order across QPs), with the WQE's `wr_id` and its SRQ index as `wqe_index`: such a
//! completion frees nothing ([`crate::WqShared`]).

use std::mem::offset_of;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use qhca_uapi::{qhca_ioc_create_srq, qhca_ioc_handle, qhca_srq_dbrec};

use crate::context::Context;
use crate::doorbell::Doorbell;
use crate::error::{Error, PostError, PostReason, Result};
use crate::layout::SrqLayout;
use crate::mem::PageBuf;
use crate::pd::{Pd, PdInner};
use crate::request::Request;
use crate::wq::{write_recv_wqes, RecvRing, Tracker};
use crate::wqe::RecvWr;
use crate::{DbType, DbWord};

/// Offset of `ci` in the doorbell record, from the bindings.
const RECORD_CI: usize = offset_of!(qhca_srq_dbrec, ci);

/// Orders the load of the record's `ci` before the stores into the slots it frees: a slot may be
/// rewritten only after the device said it copied the WQE there (rdma-core's
/// `udma_from_device_barrier()`, as an acquire load).
const CI_LOAD: Ordering = Ordering::Acquire;

/// An SRQ's ring as the process writes it: requests are checked, encoded into free slots and
/// announced with one doorbell store per batch, with no system call. A slot is free once the
/// device's doorbell record says it took the WQE there.
///
/// # Invariants
///
/// `base` points to `layout.buf_len` bytes of ring memory (the slots, then the doorbell record
/// at `layout.dbrec_offset`), page aligned, that stay mapped for the life of the value and that
/// in the process only this value accesses; the device reads only the slots between the
/// record's index and the producer index rung, and writes only the record.
#[derive(Debug)]
pub struct SrqQueue {
    srqn: u32,
    layout: SrqLayout,
    db: Arc<Doorbell>,
    /// The producer index (head) and the device's consumer index as the record last said (tail).
    slots: Tracker,
    base: *mut u8,
}

// SAFETY: the ring memory is reached only through `&mut self` (posting) and, for the record's
// atomic index, `&self`; nothing about it is tied to the thread that made it.
unsafe impl Send for SrqQueue {}
// SAFETY: through `&SrqQueue` only the record is read, with an atomic load (`record_ci`); the
// slots are written only through `&mut self`. The rest is `Sync` on its own.
unsafe impl Sync for SrqQueue {}

impl SrqQueue {
    /// The ring of SRQ `srqn`, laid out by `layout`, at `base`; doorbells go to `db`.
    ///
    /// # Safety
    ///
    /// `base` points to at least `layout.buf_len` bytes, page aligned, zeroed or holding only
    /// what this queue wrote and the device's record, that stay mapped for the life of the
    /// returned value and that no one else in the process reads or writes meanwhile.
    pub unsafe fn new(base: *mut u8, layout: SrqLayout, srqn: u32, db: Arc<Doorbell>) -> SrqQueue {
        debug_assert_eq!(base as usize % crate::mem::PAGE_SIZE, 0);
        // INVARIANT: the caller's promise.
        SrqQueue {
            srqn,
            layout,
            db,
            slots: Tracker::new(layout.depth()),
            base,
        }
    }

    /// The device's SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// The ring layout (depth, stride, SGEs per request).
    pub fn layout(&self) -> &SrqLayout {
        &self.layout
    }

    /// `ci` of the doorbell record: the device writes it, this queue only loads it.
    fn record_ci(&self) -> &AtomicU32 {
        // SAFETY: by the type invariant the record is at `dbrec_offset`, inside the mapping,
        // which outlives `&self`, and `ci` at `RECORD_CI` (0) in it; the page-aligned base plus
        // a power of two of at least 32 (`dbrec_offset`) is 4-aligned. The device writes it with
        // one aligned 4-byte DMA store and never reads it; in this process nothing but this
        // queue accesses it (the type invariant; the host tests store to it with a volatile
        // store on the queue's thread, between its calls), and the queue only through this
        // atomic, so no non-atomic access races with it, and a load sees the old index or the
        // new, never a torn one.
        unsafe {
            AtomicU32::from_ptr(
                self.base
                    .add(self.layout.dbrec_offset + RECORD_CI)
                    .cast::<u32>(),
            )
        }
    }

    /// The device's consumer index from the record (its low 16 bits: what the ABI counts).
    fn ci(&self) -> u16 {
        self.record_ci().load(CI_LOAD) as u16
    }

    /// Takes the record's index into account; returns the slots it freed.
    fn refresh(&mut self) -> u32 {
        let ci = self.ci();
        self.slots.consumed_to(ci)
    }

    /// Requests posted that the device has not taken yet (one load of the record).
    pub fn outstanding(&self) -> u32 {
        let posted = self.slots.outstanding();
        let taken = u32::from(self.ci().wrapping_sub(self.slots.tail() as u16));
        if taken <= posted {
            posted - taken
        } else {
            posted
        }
    }

    /// A slot. The caller took `index` from the tracker (the slot is free).
    fn slot(&mut self, index: u32) -> &mut [u8] {
        let l = &self.layout;
        let off = ((index & (l.depth() - 1)) as usize) * l.stride();
        debug_assert!(off + l.stride() <= l.dbrec_offset);
        // SAFETY:
        // - in bounds: `off + stride` is at most `dbrec_offset`, inside the memory by the layout
        //   (the type invariant), and the slot does not overlap the record;
        // - exclusive: the slot is free (the caller took it from the tracker: it was never
        //   posted, or the record's index passed it, which the device writes only after it
        //   copied the WQE), so the device does not read it (it reads only slots between its
        //   index and the producer index rung, and this one is not rung yet), and `&mut self`
        //   excludes any other slice of ours;
        // - lifetime: the slice borrows `self`, and the memory stays mapped while `self` lives
        //   (the type invariant).
        unsafe { std::slice::from_raw_parts_mut(self.base.add(off), l.stride()) }
    }

    /// Posts receive requests in order: each is checked, written into the next free slot, and
    /// after the loop the doorbell is rung once with the new producer index. No system call.
    ///
    /// The ring looks full when every slot was posted since the record last said the device
    /// took some: the record is read again then (one atomic load), and only if it still says
    /// full is the request refused ([`PostReason::QueueFull`], `ENOMEM`). On a refused request,
    /// the ones before it are posted (and rung) and the error names its index and the reason, as
    /// rdma-core's `bad_wr`.
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let max_sge = self.layout.max_sge;
        let (posted, result) = write_recv_wqes(self, wrs, max_sge);
        if posted > 0 {
            let pi = self.slots.head() & 0xffff;
            self.db.ring(DbWord::new(DbType::Srq, self.srqn, pi).raw());
        }
        result
    }
}

impl RecvRing for SrqQueue {
    fn tracker(&mut self) -> &mut Tracker {
        &mut self.slots
    }

    /// The record's index, read again.
    fn more_room(&mut self) -> u32 {
        self.refresh()
    }

    fn slot(&mut self, index: u32) -> &mut [u8] {
        SrqQueue::slot(self, index)
    }
}

/// The part of an SRQ that outlives its handle while QPs receive from it (they hold a
/// reference): the device object and its ring memory.
#[derive(Debug)]
pub(crate) struct SrqInner {
    pub(crate) pd: Arc<PdInner>,
    pub(crate) srqn: u32,
    // Freed after the destroy in `Drop` (and leaked if it failed).
    buf: Option<PageBuf>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        let mut req = qhca_ioc_handle::request();
        req.handle = self.srqn;
        if self.pd.ctx.cmd_destroy_srq(&mut req).is_err() {
            // The device may still read the slots and write the record: never let the addresses
            // be reused.
            if let Some(b) = self.buf.take() {
                b.leak();
            }
        }
    }
}

/// What `QUERY_SRQ` says of an SRQ (`struct ibv_srq_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SrqAttr {
    /// Work requests the ring holds: `2^log`, at least what [`Srq::new`] asked for.
    pub max_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// The armed limit ([`Srq::arm_limit`]); 0 when none is armed, or once it fired.
    pub limit: u32,
}

/// A shared receive queue: a receive queue in the process's memory that RC and UD QPs of its
/// context created on it ([`crate::Qp::with_srq`]) take their receive requests from, whichever
/// QP a message arrives on.
///
/// Posting ([`Srq::post_recv`]) makes no system call: a slot is free again as soon as the
/// device took its request (before the request completes). Each request completes on the
/// receive CQ of the QP that took it, with its `wr_id`; [`crate::Wc::qpn`] says which QP.
///
/// The device object is destroyed when the handle and every QP created on it are gone (the QPs
/// hold a reference), so an SRQ is never destroyed under a QP through this API; its ring memory
/// is freed only after the destroy succeeded, and leaked otherwise. The SRQ's limit event
/// ([`Srq::arm_limit`]) and its QPs' last-WQE events arrive as [`crate::AsyncEvent`]s.
#[derive(Debug)]
pub struct Srq {
    queue: SrqQueue,
    // Last: the ring memory lives in here.
    inner: Arc<SrqInner>,
}

impl Srq {
    /// `CREATE_SRQ` in `pd`: an SRQ of at least `max_wr` work requests (1 to 2^15, rounded up
    /// to a power of two) of at least `max_sge` SGEs each (0 is taken as 1), its ring in fresh
    /// page-aligned memory of the process ([`SrqLayout`]). No limit is armed.
    ///
    /// Fails with [`Error::Invalid`] for sizes the ABI does not allow, with [`Error::Ioctl`]
    /// (`CREATE_SRQ`: `EOPNOTSUPP` without `QHCA_CAP_SRQ`, `EINVAL` past the device's
    /// `max_srq_wr` or `max_sge`), and [`Error::Sys`] or [`Error::Mmap`] if the memory or the
    /// doorbell page cannot be mapped.
    pub fn new(pd: &Pd, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let layout = SrqLayout::new(max_wr, max_sge)?;
        let ctx = &pd.inner.ctx;
        let db = ctx.doorbell()?;
        let buf = PageBuf::new(layout.buf_len)?;
        let mut req = qhca_ioc_create_srq::request();
        req.pdn = pd.inner.pdn;
        req.log = layout.log as u8;
        req.stride_log = layout.stride_log as u8;
        req.max_sge = layout.max_sge as u16;
        req.buf_addr = buf.addr();
        req.buf_len = buf.len() as u64;
        ctx.cmd_create_srq(&mut req)?;
        Ok(Self::with_buf(pd, db, req.srqn, layout, buf))
    }

    fn with_buf(pd: &Pd, db: Arc<Doorbell>, srqn: u32, layout: SrqLayout, buf: PageBuf) -> Srq {
        // SAFETY: `buf` is `layout.buf_len` fresh, zeroed, page-aligned bytes owned by the
        // `SrqInner` built here, which the returned `Srq` holds after the queue (so the memory
        // outlives it: fields drop in declaration order) and which frees them only after the
        // device object is destroyed (or leaks them); nothing else in the process touches them.
        let queue = unsafe { SrqQueue::new(buf.as_ptr(), layout, srqn, db) };
        Srq {
            queue,
            inner: Arc::new(SrqInner {
                pd: pd.inner.clone(),
                srqn,
                buf: Some(buf),
            }),
        }
    }

    /// An SRQ over fresh memory that no device knows, for host tests of posting: the test
    /// reads the ring ([`Srq::ring`]) and writes the record the way the device would.
    #[cfg(test)]
    pub(crate) fn fake(pd: &Pd, srqn: u32, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let layout = SrqLayout::new(max_wr, max_sge)?;
        let buf = PageBuf::new(layout.buf_len)?;
        Ok(Self::with_buf(
            pd,
            pd.inner.ctx.doorbell()?,
            srqn,
            layout,
            buf,
        ))
    }

    /// The ring memory (tests).
    #[cfg(test)]
    pub(crate) fn ring(&self) -> &PageBuf {
        self.inner.buf.as_ref().expect("present")
    }

    pub(crate) fn inner(&self) -> &Arc<SrqInner> {
        &self.inner
    }

    /// The device's SRQ number.
    pub fn srqn(&self) -> u32 {
        self.inner.srqn
    }

    /// The ring layout: [`SrqLayout::depth`] is the SRQ's `max_wr`, [`SrqLayout::max_sge`] its
    /// SGEs per request.
    pub fn layout(&self) -> &SrqLayout {
        self.queue.layout()
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.inner.pd.ctx
    }

    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.inner.pd.pdn
    }

    /// Requests posted that the device has not taken yet (one load of the doorbell record; no
    /// system call).
    pub fn outstanding(&self) -> u32 {
        self.queue.outstanding()
    }

    /// Posts receive requests in order, with no system call: each is checked, written into the
    /// next free slot, and after the loop the doorbell is rung once with the new producer index.
    ///
    /// On a refused request, the ones before it are posted (and rung) and the error names its
    /// index and the reason, as rdma-core's `bad_wr`: more SGEs than the SRQ's `max_sge` or an
    /// empty SGE (`EINVAL`), every slot holding a request the device has not taken
    /// ([`PostReason::QueueFull`], `ENOMEM`). On a disassociated context nothing is posted:
    /// [`PostReason::Disassociated`].
    ///
    /// A receive that only a WRITE_WITH_IMM will consume needs no buffer: `sges` may be empty.
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        if self.context().is_dead() {
            return Err(PostError {
                index: 0,
                reason: PostReason::Disassociated,
            });
        }
        self.queue.post_recv(wrs)
    }

    /// `MODIFY_SRQ`: arms the limit. When a QP takes a request and fewer than `limit` are left
    /// posted, the device raises [`crate::AsyncEvent::SrqLimitReached`] once and disarms it;
    /// arm it again after posting more. 0 disarms it.
    ///
    /// Fails with [`Error::Invalid`] for a limit above the SRQ's size
    /// ([`SrqLayout::depth`]), and with the `MODIFY_SRQ` errors.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let depth = self.layout().depth();
        if limit > depth {
            return Err(Error::Invalid {
                what: format!(
                    "limit {limit} of SRQ {:#x}: at most its {depth} requests",
                    self.srqn()
                ),
            });
        }
        self.context().cmd_modify_srq(self.srqn(), limit)
    }

    /// `QUERY_SRQ`: its size and its armed limit.
    pub fn query(&self) -> Result<SrqAttr> {
        let (max_wr, max_sge, limit) = self.context().cmd_query_srq(self.srqn())?;
        Ok(SrqAttr {
            max_wr,
            max_sge,
            limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cq::tests::{cqe_at, device_write_cqe};
    use crate::qp::tests::{bytes, FakeDevice};
    use crate::{Cq, Errno, Qp, QpCaps, QpType, SendWr, Sge, Wc, WrOp};

    /// Writes the record's `ci` as the device does (tests run the queue on the same thread).
    fn device_take(srq: &Srq, ci: u32) {
        let off = srq.layout().dbrec_offset + RECORD_CI;
        // SAFETY: inside the test's own mapping, which no reference covers; the queue under
        // test runs on this thread, between these stores.
        unsafe { std::ptr::write_volatile(srq.ring().as_ptr().add(off).cast::<u32>(), ci.to_le()) };
    }

    const SGE: Sge = Sge {
        addr: 0x3000,
        length: 64,
        lkey: 5,
    };

    fn recv(wr_id: u64, sges: &[Sge]) -> RecvWr<'_> {
        RecvWr { wr_id, sges }
    }

    #[test]
    fn post_writes_slots_and_rings_the_srq_doorbell_once() {
        let dev = FakeDevice::new("srq-post");
        let pd = Pd::fake(&dev.ctx, 3);
        let mut srq = Srq::fake(&pd, 0x1401, 4, 2).unwrap();
        let l = *srq.layout();
        assert_eq!(
            (l.depth(), l.stride(), l.max_sge, l.dbrec_offset),
            (4, 64, 2, 256)
        );
        assert_eq!(srq.srqn(), 0x1401);
        let two = [SGE, Sge { lkey: 6, ..SGE }];
        srq.post_recv(&[recv(7, &two), recv(8, &[]), recv(9, &two[..1])])
            .unwrap();
        // One doorbell for the batch: QHCA_DB_SRQ, the SRQ, producer index 3.
        assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Srq, 0x1401, 3));
        // Slot 0, byte for byte: wr_id, num_sge, rsvd, then the SGEs.
        let s0 = bytes(srq.ring(), 0, 64);
        assert_eq!(s0[0..8], 7u64.to_le_bytes());
        assert_eq!(s0[8..16], [2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(s0[16..24], 0x3000u64.to_le_bytes());
        assert_eq!(s0[24..32], [64, 0, 0, 0, 5, 0, 0, 0]);
        assert_eq!(s0[44..48], 6u32.to_le_bytes());
        // Slot 1: no SGE (a receive for WRITE_WITH_IMM).
        assert_eq!(
            bytes(srq.ring(), 64, 16)[0..12],
            [8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(bytes(srq.ring(), 128, 8), 9u64.to_le_bytes());
        assert_eq!(srq.outstanding(), 3);
        // Refused requests, with their index; the ones before are posted and rung.
        let three = [SGE; 3];
        let e = srq
            .post_recv(&[recv(10, &[SGE]), recv(11, &three)])
            .unwrap_err();
        assert_eq!(
            (e.index, e.reason),
            (
                1,
                PostReason::TooManySge {
                    num_sge: 3,
                    max_sge: 2
                }
            )
        );
        assert_eq!(e.errno(), Errno::EINVAL);
        assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Srq, 0x1401, 4));
        let empty = [Sge { length: 0, ..SGE }];
        let e = srq.post_recv(&[recv(12, &empty)]).unwrap_err();
        assert_eq!(e.reason, PostReason::EmptySge { sge: 0 });
    }

    /// The ring is full until the record says the device took WQEs; then their slots are free
    /// at once (before any completion). A record that names more than was posted, or goes
    /// backwards, frees nothing.
    #[test]
    fn slots_come_back_when_the_record_passes_them() {
        let dev = FakeDevice::new("srq-full");
        let pd = Pd::fake(&dev.ctx, 3);
        let mut srq = Srq::fake(&pd, 0x401, 3, 1).unwrap();
        assert_eq!(srq.layout().depth(), 4);
        let wrs: Vec<_> = (0..5).map(|i| recv(i, &[SGE])).collect();
        let e = srq.post_recv(&wrs).unwrap_err();
        assert_eq!(
            (e.index, e.reason),
            (
                4,
                PostReason::QueueFull {
                    outstanding: 4,
                    depth: 4
                }
            )
        );
        assert_eq!(e.errno(), Errno::ENOMEM);
        assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Srq, 0x401, 4));
        // A forged record: more taken than posted.
        device_take(&srq, 9);
        assert_eq!(srq.outstanding(), 4);
        assert!(srq.post_recv(&wrs[..1]).is_err());
        // The device took two: two slots, the first two, are free.
        device_take(&srq, 2);
        assert_eq!(srq.outstanding(), 2);
        srq.post_recv(&[recv(40, &[SGE]), recv(41, &[SGE])])
            .unwrap();
        assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Srq, 0x401, 6));
        assert_eq!(bytes(srq.ring(), 0, 8), 40u64.to_le_bytes());
        assert_eq!(bytes(srq.ring(), 32, 8), 41u64.to_le_bytes());
        assert!(srq.post_recv(&wrs[..1]).is_err(), "full again");
        // Backwards: ignored.
        device_take(&srq, 1);
        assert!(srq.post_recv(&wrs[..1]).is_err());
        assert_eq!(srq.outstanding(), 4);
        // The record's upper bits do not count; the index runs past 16 bits.
        let mut pi = 6u32;
        for round in 0..20_000u32 {
            device_take(&srq, (pi & 0xffff) | round << 16);
            srq.post_recv(&wrs[..4]).unwrap();
            pi += 4;
        }
        assert_eq!(
            dev.last_doorbell(),
            DbWord::new(DbType::Srq, 0x401, pi & 0xffff)
        );
    }

    #[test]
    fn arming_a_limit_above_the_size_is_refused_before_the_driver() {
        let dev = FakeDevice::new("srq-limit");
        let pd = Pd::fake(&dev.ctx, 3);
        let srq = Srq::fake(&pd, 0x401, 8, 1).unwrap();
        assert!(matches!(srq.arm_limit(9), Err(Error::Invalid { .. })));
        // Within the size, the driver is asked (which the fake device is not).
        for limit in [0, 8] {
            assert!(matches!(
                srq.arm_limit(limit),
                Err(Error::Ioctl {
                    op: "MODIFY_SRQ",
                    source: Errno::ENOTTY
                })
            ));
        }
        assert!(matches!(
            srq.query(),
            Err(Error::Ioctl {
                op: "QUERY_SRQ",
                ..
            })
        ));
        assert!(matches!(Srq::new(&pd, 0, 1), Err(Error::Invalid { .. })));
        assert!(matches!(
            Srq::new(&pd, 8, 1),
            Err(Error::Ioctl {
                op: "CREATE_SRQ",
                ..
            })
        ));
    }

    #[test]
    fn posting_on_a_dead_context_writes_nothing() {
        let dev = FakeDevice::new("srq-dead");
        let pd = Pd::fake(&dev.ctx, 3);
        let mut srq = Srq::fake(&pd, 0x401, 8, 1).unwrap();
        dev.ctx.dead_if_err(libc::POLLERR, "test").unwrap_err();
        let e = srq.post_recv(&[recv(1, &[SGE])]).unwrap_err();
        assert_eq!((e.index, e.reason), (0, PostReason::Disassociated));
        assert_eq!(srq.outstanding(), 0);
        assert_eq!(dev.last_doorbell().raw(), 0, "no doorbell rung");
    }

    /// A QP of an SRQ: it has no receive queue (a post is refused), its buffer is the SQ alone,
    /// its receive CQEs (SRQ indices, in any order) free nothing and are not stray, and its
    /// send CQEs are credited as ever. It keeps the SRQ alive.
    #[test]
    fn a_qp_of_an_srq_receives_only_from_it() {
        let dev = FakeDevice::new("srq-qp");
        let pd = Pd::fake(&dev.ctx, 3);
        let mut cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
        let mut srq = Srq::fake(&pd, 0x401, 4, 1).unwrap();
        let caps = QpCaps {
            max_send_wr: 4,
            max_recv_wr: 64,
            max_sge: 1,
            max_inline: 16,
        };
        let mut qp = Qp::fake_on_srq(&pd, &cq, &cq, &srq, &caps, 0x42, QpType::Rc).unwrap();
        let other = Qp::fake_on_srq(&pd, &cq, &cq, &srq, &caps, 0x43, QpType::Ud).unwrap();
        assert_eq!(qp.srqn(), Some(0x401));
        assert!(!qp.layout().has_rq());
        assert_eq!((qp.ring().len(), qp.layout().buf_len), (4096, 4096));
        let e = qp.post_recv(&[recv(1, &[SGE])]).unwrap_err();
        assert_eq!((e.index, e.reason), (0, PostReason::QpOnSrq));
        assert_eq!(e.errno(), Errno::EINVAL);
        qp.post_recv(&[]).unwrap();
        assert_eq!(dev.last_doorbell().raw(), 0, "no RQ doorbell");

        srq.post_recv(&[recv(20, &[SGE]), recv(21, &[SGE]), recv(22, &[SGE])])
            .unwrap();
        qp.post_send(&[SendWr::inline(30, WrOp::Send, b"x")])
            .unwrap();
        // The device gave 21 to the other QP, then 20 to this one; they end in that order.
        device_take(&srq, 2);
        device_write_cqe(cq.ring_ptr(), 3, 0, &cqe_at(21, 0x80, 0, 0x43, 1));
        device_write_cqe(cq.ring_ptr(), 3, 1, &cqe_at(20, 0x80, 0, 0x42, 0));
        device_write_cqe(cq.ring_ptr(), 3, 2, &cqe_at(30, 0x00, 0, 0x42, 0));
        let mut wc = [Wc::default(); 4];
        assert_eq!(cq.poll(&mut wc), 3);
        assert_eq!(
            wc[..3].iter().map(|w| (w.qpn, w.wr_id)).collect::<Vec<_>>(),
            [(0x43, 21), (0x42, 20), (0x42, 30)]
        );
        assert!(wc[0].is_recv && wc[1].is_recv && !wc[2].is_recv);
        assert_eq!(cq.stray_cqes(), 0);
        assert_eq!((qp.send_outstanding(), qp.recv_outstanding()), (0, 0));
        assert_eq!(srq.outstanding(), 1);
        // The QPs hold the SRQ: dropping the handle leaves the object to them.
        let inner = srq.inner().clone();
        drop(srq);
        assert_eq!(Arc::strong_count(&inner), 3);
        drop(qp);
        drop(other);
        assert_eq!(Arc::strong_count(&inner), 1);
    }

    #[test]
    fn srqs_and_their_queues_go_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Srq>();
        send_sync::<SrqQueue>();
    }
}
