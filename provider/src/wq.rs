// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Free-slot accounting of a work queue. Pure.
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
    #[cfg(test)]
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
pub(crate) struct WqShared {
    pub(crate) sq: std::sync::Mutex<Tracker>,
    pub(crate) rq: std::sync::Mutex<Tracker>,
}

impl WqShared {
    pub(crate) fn new(sq_depth: u32, rq_depth: u32) -> Self {
        WqShared {
            sq: std::sync::Mutex::new(Tracker::new(sq_depth)),
            rq: std::sync::Mutex::new(Tracker::new(rq_depth)),
        }
    }

    /// Frees the slots a polled completion accounts for; false if it names none (stray).
    pub(crate) fn complete(&self, wc: &crate::cq::Wc) -> bool {
        let q = if wc.is_recv { &self.rq } else { &self.sq };
        q.lock()
            .unwrap_or_else(|e| e.into_inner())
            .complete(wc.wqe_index)
            > 0
    }

    /// Forgets both queues (RESET).
    pub(crate) fn reset(&self) {
        self.sq.lock().unwrap_or_else(|e| e.into_inner()).reset();
        self.rq.lock().unwrap_or_else(|e| e.into_inner()).reset();
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
