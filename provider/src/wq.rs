// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Free-slot accounting of a work queue. Pure.
//!
//! The poster owns the producer index (`head`), the poller advances the consumer index (`tail`)
//! as completions arrive. Both are free-running `u32`; the device sees the low 16 bits of `head`
//! (queues have at most 2^15 slots, so 16-bit indices never alias).
//!
//! Send queues complete unsignaled requests silently, so the standard rule applies: a CQE for
//! slot n means every earlier slot of that SQ is done too. The CQE carries no slot index, only
//! the wr_id, so the tracker remembers per slot its wr_id and whether it was signaled:
//!
//! - a successful CQE completes up to and including the first signaled slot at or after `tail`
//!   (the device completes in order and writes CQEs only for signaled successes);
//! - a flush CQE (`WR_FLUSH_ERR`) is for exactly the slot at `tail` (after an error every
//!   request completes, signaled or not);
//! - any other error CQE is for the first slot at or after `tail` with its wr_id (the failing
//!   request may be unsignaled, with silent successes before it); if no slot has that wr_id,
//!   the one at `tail`.
//!
//! The wr_id rule is ambiguous only when an unsignaled request that succeeded silently has the
//! same wr_id as the failing one after it; the tracker then frees too few slots. The QP is in
//! ERR by then and has to be reset (which resets the tracker) or destroyed anyway.

use crate::cq::WcStatus;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Slot {
    wr_id: u64,
    signaled: bool,
}

/// Free-slot accounting of a send queue.
#[derive(Debug)]
pub struct SendTracker {
    slots: Box<[Slot]>,
    head: u32,
    tail: u32,
}

impl SendTracker {
    /// A tracker for `depth` (a power of two) slots.
    pub fn new(depth: u32) -> Self {
        debug_assert!(depth.is_power_of_two());
        SendTracker {
            slots: vec![Slot::default(); depth as usize].into_boxed_slice(),
            head: 0,
            tail: 0,
        }
    }

    /// Slots in the ring.
    pub fn depth(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Requests posted and not yet known to be complete.
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Slots free for posting.
    pub fn free(&self) -> u32 {
        self.depth() - self.outstanding()
    }

    /// The producer index (free-running).
    pub fn head(&self) -> u32 {
        self.head
    }

    /// The consumer index (free-running).
    pub fn tail(&self) -> u32 {
        self.tail
    }

    fn slot(&self, index: u32) -> &Slot {
        &self.slots[(index & (self.depth() - 1)) as usize]
    }

    /// Takes the next slot for a request; returns its free-running index. The caller checked
    /// [`SendTracker::free`].
    pub fn push(&mut self, wr_id: u64, signaled: bool) -> u32 {
        assert!(self.free() > 0, "push on a full send queue");
        let index = self.head;
        let mask = self.depth() - 1;
        self.slots[(index & mask) as usize] = Slot { wr_id, signaled };
        self.head = self.head.wrapping_add(1);
        index
    }

    /// Forgets every outstanding request and starts again at index 0 (the QP went to RESET,
    /// where the device starts its indices again at 0).
    pub fn reset(&mut self) {
        self.head = 0;
        self.tail = 0;
    }

    /// Accounts for one send CQE; returns how many slots it freed (0 for a CQE no outstanding
    /// slot can match, which a correct device never writes).
    pub fn complete(&mut self, status: WcStatus, wr_id: u64) -> u32 {
        let n = self.outstanding();
        if n == 0 {
            return 0;
        }
        let pick = |want: &dyn Fn(&Slot) -> bool| {
            (0..n).find(|&k| want(self.slot(self.tail.wrapping_add(k))))
        };
        let k = match status {
            WcStatus::Success => match pick(&|s| s.signaled) {
                Some(k) => k,
                None => return 0,
            },
            WcStatus::WrFlushErr => 0,
            _ => pick(&|s| s.wr_id == wr_id).unwrap_or(0),
        };
        self.tail = self.tail.wrapping_add(k + 1);
        k + 1
    }
}

/// Free-slot accounting of a receive queue: every receive request completes with a CQE, in
/// order, so each CQE frees exactly one slot.
#[derive(Debug)]
pub struct RecvTracker {
    depth: u32,
    head: u32,
    tail: u32,
}

impl RecvTracker {
    /// A tracker for `depth` (a power of two) slots.
    pub fn new(depth: u32) -> Self {
        RecvTracker {
            depth,
            head: 0,
            tail: 0,
        }
    }

    /// Slots in the ring.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Requests posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.tail)
    }

    /// Slots free for posting.
    pub fn free(&self) -> u32 {
        self.depth - self.outstanding()
    }

    /// The producer index (free-running).
    pub fn head(&self) -> u32 {
        self.head
    }

    /// Takes the next slot; returns its free-running index.
    pub fn push(&mut self) -> u32 {
        assert!(self.free() > 0, "push on a full receive queue");
        let index = self.head;
        self.head = self.head.wrapping_add(1);
        index
    }

    /// Forgets every outstanding request and starts again at index 0.
    pub fn reset(&mut self) {
        self.head = 0;
        self.tail = 0;
    }

    /// Accounts for one receive CQE; returns the slots freed (0 if none was outstanding).
    pub fn complete(&mut self) -> u32 {
        if self.outstanding() == 0 {
            return 0;
        }
        self.tail = self.tail.wrapping_add(1);
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signaled_completion_frees_the_unsignaled_before_it() {
        let mut t = SendTracker::new(4);
        assert_eq!((t.free(), t.outstanding()), (4, 0));
        t.push(1, false);
        t.push(2, false);
        t.push(3, true);
        t.push(4, false);
        assert_eq!(t.free(), 0);
        assert_eq!(t.complete(WcStatus::Success, 3), 3);
        assert_eq!((t.free(), t.tail(), t.head()), (3, 3, 4));
        // Slot 4 is unsignaled: nothing can complete it until a later signaled one.
        assert_eq!(
            t.complete(WcStatus::Success, 99),
            0,
            "no signaled slot outstanding"
        );
        t.push(5, true);
        assert_eq!(t.complete(WcStatus::Success, 5), 2);
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.complete(WcStatus::Success, 5), 0, "nothing outstanding");
    }

    #[test]
    fn error_then_flushes() {
        let mut t = SendTracker::new(8);
        t.push(10, false); // succeeds silently
        t.push(11, false); // fails: its error CQE is written although unsignaled
        t.push(12, true); // flushed
        t.push(13, false); // flushed
        assert_eq!(t.complete(WcStatus::RemAccessErr, 11), 2);
        assert_eq!(t.complete(WcStatus::WrFlushErr, 12), 1);
        assert_eq!(t.complete(WcStatus::WrFlushErr, 13), 1);
        assert_eq!(t.outstanding(), 0);
        // An error naming no outstanding wr_id: the slot at the tail.
        t.push(20, true);
        t.push(21, true);
        assert_eq!(t.complete(WcStatus::LocProtErr, 999), 1);
        assert_eq!(t.outstanding(), 1);
    }

    #[test]
    fn indices_run_past_16_bits() {
        let mut t = SendTracker::new(2);
        for i in 0..70_000u64 {
            let idx = t.push(i, i % 2 == 1);
            assert_eq!(u64::from(idx), i);
            if i % 2 == 1 {
                assert_eq!(t.complete(WcStatus::Success, i), 2);
            }
        }
        assert_eq!(t.head(), 70_000);
        assert_eq!(t.head() & 0xffff, 70_000 - 65_536);
    }

    #[test]
    #[should_panic(expected = "full send queue")]
    fn push_on_full_panics() {
        let mut t = SendTracker::new(2);
        t.push(0, true);
        t.push(0, true);
        t.push(0, true);
    }

    #[test]
    fn reset_starts_again_at_zero() {
        let mut t = SendTracker::new(4);
        t.push(1, false);
        t.push(2, false);
        t.reset();
        assert_eq!((t.head(), t.tail(), t.free()), (0, 0, 4));
        let mut r = RecvTracker::new(2);
        r.push();
        r.reset();
        assert_eq!((r.head(), r.free()), (0, 2));
    }

    #[test]
    fn recv_tracker() {
        let mut r = RecvTracker::new(2);
        assert_eq!(r.push(), 0);
        assert_eq!(r.push(), 1);
        assert_eq!(r.free(), 0);
        assert_eq!(r.complete(), 1);
        assert_eq!(
            (r.free(), r.outstanding(), r.head(), r.depth()),
            (1, 1, 2, 2)
        );
        assert_eq!(r.complete(), 1);
        assert_eq!(r.complete(), 0);
    }
}

/// The accounting of one QP's two queues, shared between the QP (which posts) and the CQs its
/// completions land in (which free slots as they poll).
#[derive(Debug)]
pub(crate) struct WqShared {
    pub(crate) sq: std::sync::Mutex<SendTracker>,
    pub(crate) rq: std::sync::Mutex<RecvTracker>,
}

impl WqShared {
    pub(crate) fn new(sq_depth: u32, rq_depth: u32) -> Self {
        WqShared {
            sq: std::sync::Mutex::new(SendTracker::new(sq_depth)),
            rq: std::sync::Mutex::new(RecvTracker::new(rq_depth)),
        }
    }

    /// Frees the slots a polled completion accounts for.
    pub(crate) fn complete(&self, wc: &crate::cq::Wc) {
        if wc.is_recv {
            self.rq.lock().unwrap_or_else(|e| e.into_inner()).complete();
        } else {
            self.sq
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .complete(wc.status, wc.wr_id);
        }
    }
}
