// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A QP's send and receive queues as the process writes them ([`WorkQueues`]: check, encode,
//! ring), and the free-slot accounting of each ([`Tracker`], pure).
//!
//! The poster owns the producer index (`head`), the poller advances the consumer index (`tail`)
//! as completions arrive. Both are free-running `u32`; the device sees the low 16 bits (queues
//! have at most 2^15 slots, so 16-bit indices never alias).
//!
//! Every CQE carries the free-running 16-bit index of the WQE it completes (`wqe_index`), as
//! mlx5's `wqe_counter`:
//!
//! - a send CQE completes that WQE and every earlier one of the SQ, signaled or not (the device
//!   executes in order and writes CQEs only for signaled successes, errors and flushes);
//! - a receive CQE completes that RQ slot (and, in order, any before it).
//!
//! The index is not trusted: a CQE naming a slot that is not outstanding (a stale CQE of a QP
//! that was reset, a device bug) frees nothing and is counted as stray by the CQ.
//!
//! A QP that receives from a shared receive queue ([`crate::Srq`]) has no receive queue here:
//! its receive CQEs name slots of the SRQ, whose slots come back as the device takes the WQEs
//! (its doorbell record), not as they complete; so they free nothing here and are not stray.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::doorbell::Doorbell;
use crate::error::{PostError, PostReason};
use crate::layout::QpLayout;
use crate::qp::QpType;
use crate::wqe::{check_recv_wr, check_send_wr, encode_recv_wqe, encode_send_wqe, RecvWr, SendWr};
use crate::{DbType, DbWord};

/// A ring receive WQEs are written into: a QP's receive queue or an SRQ ([`write_recv_wqes`]).
pub(crate) trait RecvRing {
    /// The ring's free-slot accounting.
    fn tracker(&mut self) -> &mut Tracker;
    /// Asked once the tracker sees no free slot: frees what the device says it is done with
    /// and returns how many (an SRQ reads its doorbell record; a QP's receive queue learns of
    /// free slots from its CQEs alone, and has nothing to ask).
    fn more_room(&mut self) -> u32;
    /// The slot of free-running index `index`, which the caller took from the tracker.
    fn slot(&mut self, index: u32) -> &mut [u8];
}

/// Writes receive requests into `ring` in order, each checked against `max_sge` and encoded into
/// the next free slot, until one is malformed or no slot is free: the loop of a QP's receive
/// queue and of an SRQ, whose callers ring the doorbell once if any was written. Returns how
/// many were written, and the error that stopped the loop (its index and reason, as
/// rdma-core's `bad_wr`).
pub(crate) fn write_recv_wqes(
    ring: &mut impl RecvRing,
    wrs: &[RecvWr<'_>],
    max_sge: u32,
) -> (u32, Result<(), PostError>) {
    for (i, wr) in wrs.iter().enumerate() {
        let reason = match check_recv_wr(wr, max_sge) {
            Err(reason) => reason,
            Ok(()) if ring.tracker().free() == 0 && ring.more_room() == 0 => {
                let t = ring.tracker();
                PostReason::QueueFull {
                    outstanding: t.outstanding(),
                    depth: t.depth(),
                }
            }
            Ok(()) => {
                let index = ring.tracker().push();
                encode_recv_wqe(ring.slot(index), wr);
                continue;
            }
        };
        // At most 2^15 slots: `i` requests were written before this one.
        return (i as u32, Err(PostError { index: i, reason }));
    }
    (wrs.len() as u32, Ok(()))
}

/// A QP's receive queue while its tracker is locked: the ring [`WorkQueues::post_recv`] writes.
struct QpRecvRing<'a> {
    tracker: &'a mut Tracker,
    base: *mut u8,
    layout: &'a QpLayout,
}

impl RecvRing for QpRecvRing<'_> {
    fn tracker(&mut self) -> &mut Tracker {
        self.tracker
    }

    fn more_room(&mut self) -> u32 {
        0
    }

    fn slot(&mut self, index: u32) -> &mut [u8] {
        // The caller holds `&mut WorkQueues` (this borrows from it) and took `index` from the
        // tracker: `WorkQueues::slot`'s requirements.
        WorkQueues::slot(self.base, self.layout, true, index)
    }
}

/// Free-slot accounting of one ring (send or receive).
#[derive(Debug)]
pub(crate) struct Tracker {
    depth: u32,
    head: u32,
    tail: u32,
}

impl Tracker {
    /// A tracker for `depth` (a power of two, at most 2^15) slots.
    pub(crate) fn new(depth: u32) -> Self {
        debug_assert!(depth.is_power_of_two() && depth <= 1 << 15);
        Tracker {
            depth,
            head: 0,
            tail: 0,
        }
    }

    /// Slots in the ring.
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    /// Requests posted and not yet known to be complete.
    pub(crate) fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Slots free for posting.
    pub(crate) fn free(&self) -> u32 {
        self.depth - self.outstanding()
    }

    /// The producer index (free-running).
    pub(crate) fn head(&self) -> u32 {
        self.head
    }

    /// The consumer index (free-running).
    pub(crate) fn tail(&self) -> u32 {
        self.tail
    }

    /// Takes the next slot; returns its free-running index. The caller checked
    /// [`Tracker::free`].
    pub(crate) fn push(&mut self) -> u32 {
        assert!(self.free() > 0, "push on a full work queue");
        let index = self.head;
        self.head = self.head.wrapping_add(1);
        index
    }

    /// Forgets every outstanding request and starts again at index 0 (the QP went to RESET,
    /// where the device starts its indices again at 0).
    pub(crate) fn reset(&mut self) {
        self.head = 0;
        self.tail = 0;
    }

    /// Accounts for a consumer index the device published (an SRQ's doorbell record: every WQE
    /// before free-running 16-bit index `ci` is taken). Returns the slots freed; 0 if `ci` does
    /// not lie between the tail and the head (the record is not trusted).
    pub(crate) fn consumed_to(&mut self, ci: u16) -> u32 {
        let k = u32::from(ci.wrapping_sub(self.tail as u16));
        if k > self.outstanding() {
            return 0;
        }
        self.tail = self.tail.wrapping_add(k);
        k
    }

    /// Accounts for a CQE naming the WQE at 16-bit index `wqe_index`: it and every earlier
    /// outstanding slot are done. Returns the slots freed; 0 if `wqe_index` names no
    /// outstanding slot (the CQE is stray).
    pub(crate) fn complete(&mut self, wqe_index: u16) -> u32 {
        // Distance from the oldest outstanding slot, modulo 2^16: unambiguous because fewer
        // than 2^15 slots are ever outstanding.
        let k = u32::from(wqe_index.wrapping_sub(self.tail as u16));
        if k >= self.outstanding() {
            return 0;
        }
        self.tail = self.tail.wrapping_add(k + 1);
        k + 1
    }
}

/// The accounting of one QP's two queues, shared between the QP (which posts) and the CQs its
/// completions land in (which free slots as they poll).
#[derive(Debug)]
pub struct WqShared {
    pub(crate) sq: Mutex<Tracker>,
    /// `None` for a QP that receives from an SRQ.
    pub(crate) rq: Option<Mutex<Tracker>>,
}

fn lock(q: &Mutex<Tracker>) -> MutexGuard<'_, Tracker> {
    q.lock().unwrap_or_else(|e| e.into_inner())
}

impl WqShared {
    /// Queues of `sq_depth` and `rq_depth` slots; `rq_depth` 0: no receive queue (the QP
    /// receives from an SRQ).
    pub(crate) fn new(sq_depth: u32, rq_depth: u32) -> Self {
        WqShared {
            sq: Mutex::new(Tracker::new(sq_depth)),
            rq: (rq_depth > 0).then(|| Mutex::new(Tracker::new(rq_depth))),
        }
    }

    /// Frees the slots a polled completion accounts for; false if it names none (stray). A
    /// receive completion of a QP of an SRQ frees nothing here (the SRQ's slots came back when
    /// the device took its WQE) and is not stray.
    pub fn complete(&self, wc: &crate::cq::Wc) -> bool {
        let q = match (&self.rq, wc.is_recv) {
            (_, false) => &self.sq,
            (Some(rq), true) => rq,
            (None, true) => return true,
        };
        lock(q).complete(wc.wqe_index) > 0
    }

    /// Forgets both queues (RESET).
    pub fn reset(&self) {
        lock(&self.sq).reset();
        if let Some(rq) = &self.rq {
            lock(rq).reset();
        }
    }
}

/// The two queues of one QP in the process's ring memory: requests are checked, encoded into
/// free slots and announced with one doorbell store per batch, with no system call. The
/// completions that free slots are credited through [`WorkQueues::shared`] (by the CQs the
/// QP's completions land in).
///
/// # Invariants
///
/// `base` points to `layout.buf_len` bytes of ring memory (the send queue, then the receive
/// queue at `layout.rq_offset` unless the QP receives from an SRQ) that stay mapped for the life
/// of the value, that no one but this value and the device accesses, and that the device reads
/// only up to the producer indices rung.
#[derive(Debug)]
pub struct WorkQueues {
    qpn: u32,
    qp_type: QpType,
    layout: QpLayout,
    db: Arc<Doorbell>,
    shared: Arc<WqShared>,
    base: *mut u8,
}

// SAFETY: the ring memory is reached only through `&mut self` (posting) and the device; nothing
// about it is tied to the thread that made it.
unsafe impl Send for WorkQueues {}
// SAFETY: through `&WorkQueues` the ring memory is not touched (posting takes `&mut self`); the
// rest is `Sync` on its own.
unsafe impl Sync for WorkQueues {}

impl WorkQueues {
    /// The queues of QP `qpn` of type `qp_type`, whose rings, laid out by `layout`, are at
    /// `base`; doorbells go to `db`.
    ///
    /// # Safety
    ///
    /// `base` points to at least `layout.buf_len` bytes, page aligned, zeroed or holding only
    /// what this queue wrote, that stay mapped for the life of the returned value and that no
    /// one else in the process reads or writes meanwhile.
    pub unsafe fn new(
        base: *mut u8,
        layout: QpLayout,
        qpn: u32,
        qp_type: QpType,
        db: Arc<Doorbell>,
    ) -> WorkQueues {
        let shared = Arc::new(WqShared::new(layout.sq_depth(), layout.rq_depth()));
        // INVARIANT: the caller's promise.
        WorkQueues {
            qpn,
            qp_type,
            layout,
            db,
            shared,
            base,
        }
    }

    /// The accounting the QP's CQs credit completions to.
    pub fn shared(&self) -> &Arc<WqShared> {
        &self.shared
    }

    /// The ring layout.
    pub fn layout(&self) -> &QpLayout {
        &self.layout
    }

    /// RC or UD.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The QP's number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// A ring slot. Takes the layout and base, not `&mut self`, so that a post can hold its
    /// queue's lock (in `shared`) while it writes the slot. `rq` only if the layout has one.
    fn slot<'b>(base: *mut u8, l: &QpLayout, rq: bool, index: u32) -> &'b mut [u8] {
        debug_assert!(!rq || l.has_rq());
        let (start, log, stride) = if rq {
            (l.rq_offset, l.rq_log, l.rq_stride())
        } else {
            (0, l.sq_log, l.sq_stride())
        };
        let off = start + ((index & ((1 << log) - 1)) as usize) * stride;
        debug_assert!(off + stride <= l.buf_len);
        // SAFETY:
        // - in bounds: `off + stride` is at most the ring's end, inside the memory by the layout
        //   (the type invariant);
        // - exclusive: the slot is free (the caller took it from the tracker), so the device does
        //   not read it (it reads only slots up to the producer index rung, and this index is not
        //   rung yet), and the caller holds `&mut WorkQueues`, which excludes any other slice of
        //   ours;
        // - lifetime: the caller uses the slice within its `&mut` borrow, while the memory stays
        //   mapped (the type invariant).
        unsafe { std::slice::from_raw_parts_mut(base.add(off), stride) }
    }

    /// Posts send requests in order: each is checked, written into the next free slot, and after
    /// the loop the doorbell is rung once with the new producer index. No system call.
    ///
    /// On a refused request, the ones before it are posted (and rung) and the error names its
    /// index and the reason, as rdma-core's `bad_wr`.
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.post_sends(wrs, false)
    }

    /// Posts all of `wrs` or none: if the send queue has no room for all of them, the error is
    /// [`PostReason::QueueFull`] at index 0 and nothing is written. A refused request stops the
    /// post there, as in [`WorkQueues::post_send`] (the batches of libibverbs's `ibv_wr_*` API,
    /// checked before).
    pub fn post_send_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.post_sends(wrs, true)
    }

    /// `post_send`, and with `all` first a check that the queue holds all of `wrs`, under the
    /// same lock.
    #[inline]
    fn post_sends(&mut self, wrs: &[SendWr<'_>], all: bool) -> Result<(), PostError> {
        let mut sq = lock(&self.shared.sq);
        if all && (sq.free() as usize) < wrs.len() {
            let reason = PostReason::QueueFull {
                outstanding: sq.outstanding(),
                depth: sq.depth(),
            };
            return Err(PostError { index: 0, reason });
        }
        let mut result = Ok(());
        let mut posted = 0;
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(reason) = check_send_wr(wr, &self.layout, self.qp_type) {
                result = Err(PostError { index: i, reason });
                break;
            }
            if sq.free() == 0 {
                let reason = PostReason::QueueFull {
                    outstanding: sq.outstanding(),
                    depth: sq.depth(),
                };
                result = Err(PostError { index: i, reason });
                break;
            }
            let index = sq.push();
            encode_send_wqe(Self::slot(self.base, &self.layout, false, index), wr);
            posted += 1;
        }
        if posted > 0 {
            self.db
                .ring(DbWord::new(DbType::Sq, self.qpn, sq.head() & 0xffff).raw());
        }
        result
    }

    /// Posts receive requests, as [`WorkQueues::post_send`] does. A QP of an SRQ has no receive
    /// queue: any request is refused ([`PostReason::QpOnSrq`]).
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let Some(rq) = &self.shared.rq else {
            return match wrs {
                [] => Ok(()),
                _ => Err(PostError {
                    index: 0,
                    reason: PostReason::QpOnSrq,
                }),
            };
        };
        let mut rq = lock(rq);
        let mut ring = QpRecvRing {
            tracker: &mut rq,
            base: self.base,
            layout: &self.layout,
        };
        let (posted, result) = write_recv_wqes(&mut ring, wrs, self.layout.max_sge);
        if posted > 0 {
            self.db
                .ring(DbWord::new(DbType::Rq, self.qpn, rq.head() & 0xffff).raw());
        }
        result
    }

    /// Requests posted and not completed yet: (send, receive); receive 0 for a QP of an SRQ.
    pub fn outstanding(&self) -> (u32, u32) {
        let rq = self.shared.rq.as_ref().map_or(0, |q| lock(q).outstanding());
        (lock(&self.shared.sq).outstanding(), rq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cqe_frees_its_wqe_and_every_earlier_one() {
        let mut t = Tracker::new(4);
        assert_eq!((t.free(), t.outstanding()), (4, 0));
        for i in 0..4 {
            assert_eq!(t.push(), i);
        }
        assert_eq!(t.free(), 0);
        // The signaled one at index 2: 0 and 1 (unsignaled) are done too.
        assert_eq!(t.complete(2), 3);
        assert_eq!((t.free(), t.tail(), t.head()), (3, 3, 4));
        // Index 3, then nothing is outstanding.
        assert_eq!(t.complete(3), 1);
        assert_eq!(t.outstanding(), 0);
    }

    /// The old tracker guessed slots from wr_id and signaled flags: a CQE whose wr_id matched
    /// an outstanding request freed slots the device had not read. Now only the index counts,
    /// and an index outside the outstanding window frees nothing.
    #[test]
    fn a_cqe_naming_no_outstanding_slot_frees_nothing() {
        let mut t = Tracker::new(8);
        t.push();
        t.push();
        assert_eq!(t.complete(2), 0, "not posted yet");
        assert_eq!(t.complete(0xffff), 0, "before the tail");
        assert_eq!(t.complete(7), 0);
        assert_eq!(t.outstanding(), 2);
        assert_eq!(t.complete(0), 1);
        assert_eq!(t.complete(0), 0, "already completed");
        assert_eq!(t.complete(1), 1);
    }

    #[test]
    fn indices_run_past_16_bits() {
        let mut t = Tracker::new(2);
        for i in 0..70_000u32 {
            assert_eq!(t.push(), i);
            if i % 2 == 1 {
                assert_eq!(t.complete(i as u16), 2, "index {i}");
            }
        }
        assert_eq!(t.head(), 70_000);
        // Near the 16-bit wrap, in a deep queue.
        let mut t = Tracker::new(1 << 15);
        for _ in 0..65_530 {
            t.push();
            t.complete(t.head().wrapping_sub(1) as u16);
        }
        for _ in 0..20 {
            t.push();
        }
        assert_eq!(t.complete(3), 10, "65530..=65539 wraps to 65530..=3");
        assert_eq!(t.outstanding(), 10);
    }

    /// An SRQ's record: every WQE before its index is taken; an index outside what is
    /// outstanding (behind the tail, past the head) frees nothing.
    #[test]
    fn a_published_consumer_index_frees_what_it_passed() {
        let mut t = Tracker::new(4);
        for _ in 0..4 {
            t.push();
        }
        assert_eq!(t.consumed_to(0), 0, "nothing taken");
        assert_eq!(t.consumed_to(3), 3);
        assert_eq!((t.free(), t.tail()), (3, 3));
        assert_eq!(t.consumed_to(5), 0, "past the head");
        assert_eq!(t.consumed_to(2), 0, "behind the tail");
        assert_eq!(t.consumed_to(3), 0, "the same again");
        assert_eq!(t.consumed_to(4), 1);
        assert_eq!(t.outstanding(), 0);
        // Across the 16-bit wrap: tail 65534, head 65538.
        let mut t = Tracker::new(8);
        for i in 1..=65_534u32 {
            t.push();
            assert_eq!(t.consumed_to(i as u16), 1);
        }
        for _ in 0..4 {
            t.push();
        }
        assert_eq!(t.consumed_to(1), 3, "65534, 65535, 0");
        assert_eq!((t.tail(), t.outstanding()), (65_537, 1));
    }

    #[test]
    #[should_panic(expected = "full work queue")]
    fn push_on_full_panics() {
        let mut t = Tracker::new(2);
        t.push();
        t.push();
        t.push();
    }

    #[test]
    fn reset_starts_again_at_zero() {
        let mut t = Tracker::new(4);
        t.push();
        t.push();
        t.reset();
        assert_eq!((t.head(), t.tail(), t.free(), t.depth()), (0, 0, 4, 4));
        assert_eq!(t.complete(1), 0, "a stale CQE of before the reset");
    }
}
