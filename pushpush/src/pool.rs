// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Bookkeeping of pools on both sides, and the staging ring pushes copy through.
//!
//! A target's element is, in turn: advertised (the peer may write it), consumed (the peer
//! wrote it and said so; a [`crate::Delivery`] holds it), and advertised again once the user
//! releases it and a BufferRecvPoolUpdate says so. An initiator's copy of the same element is
//! free (it may write it) or busy (written, not yet replenished).

use qhca::MrBuf;

use crate::wire::{ElemRef, PoolDesc};

/// Where a pool of ours is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LocalState {
    /// Advertised; the peer may write its advertised elements.
    Open,
    /// We asked the peer to stop using it (BufferPoolFlushRequest); it may still write until it
    /// replies.
    Withdrawing,
    /// The peer will write it no more; freed once every delivery of it is released.
    Closed,
}

/// One pool of ours, which the peer writes into.
pub(crate) struct LocalPool {
    pub desc: PoolDesc,
    pub mr: MrBuf,
    /// Per element: true while the peer may write it (advertised, not consumed).
    pub advertised: Vec<bool>,
    /// Deliveries handed out and not released.
    pub delivered: u32,
    pub state: LocalState,
}

impl LocalPool {
    /// Byte offset of element `elem` in the region.
    pub fn offset(&self, elem: u32) -> usize {
        elem as usize * self.desc.elem_size as usize
    }
}

/// Why an initiator stops using a pool of the peer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flush {
    /// In use.
    No,
    /// The target withdraws it: reply with this transaction context once nothing is in flight.
    PeerAsked(u64),
    /// We return it: ask once nothing is in flight, then wait for the reply.
    WeReturn { asked: bool },
}

/// One pool of the peer's, which we write into.
pub(crate) struct RemotePool {
    pub desc: PoolDesc,
    /// Elements we may write (a stack: the most recently replenished first, warm in caches).
    pub free: Vec<u32>,
    /// Per element: written by us and not yet replenished.
    pub busy: Vec<bool>,
    /// Writes posted into it and not completed.
    pub inflight: u32,
    pub flush: Flush,
}

impl RemotePool {
    pub fn new(desc: PoolDesc) -> RemotePool {
        RemotePool {
            desc,
            free: (0..desc.elem_count).rev().collect(),
            busy: vec![false; desc.elem_count as usize],
            inflight: 0,
            flush: Flush::No,
        }
    }

    /// Usable for a new write of `len` bytes: not being flushed, big enough, an element free.
    pub fn takes(&self, len: usize) -> bool {
        self.flush == Flush::No && self.desc.elem_size as usize >= len && !self.free.is_empty()
    }

    /// Takes a free element for a write.
    pub fn take(&mut self) -> ElemRef {
        let elem = self.free.pop().expect("takes() said an element is free");
        self.busy[elem as usize] = true;
        self.inflight += 1;
        ElemRef {
            pool_ref: self.desc.pool_ref,
            elem,
        }
    }

    /// The target replenished `elem`: false if it was not ours to get back (never written, or
    /// replenished twice).
    pub fn replenish(&mut self, elem: u32) -> bool {
        match self.busy.get_mut(elem as usize) {
            Some(b) if *b => {
                *b = false;
                self.free.push(elem);
                true
            }
            _ => false,
        }
    }
}

/// A ring of registered bytes that pushes copy their payload into, freed in posting order (the
/// data channel's send completions arrive in that order).
pub(crate) struct Staging {
    pub mr: MrBuf,
    ring: Ring,
}

impl Staging {
    pub fn new(mr: MrBuf) -> Staging {
        let ring = Ring::new(mr.len());
        Staging { mr, ring }
    }

    pub fn size(&self) -> usize {
        self.ring.size
    }

    /// See [`Ring::alloc`].
    pub fn alloc(&mut self, len: usize) -> Option<(usize, usize)> {
        self.ring.alloc(len)
    }

    /// See [`Ring::free`].
    pub fn free(&mut self, need: usize) {
        self.ring.free(need)
    }
}

/// Staging allocations are this aligned.
const ALIGN: usize = 64;

/// The arithmetic of a FIFO byte ring: contiguous allocations, freed oldest first.
pub(crate) struct Ring {
    size: usize,
    head: usize,
    used: usize,
}

impl Ring {
    pub fn new(size: usize) -> Ring {
        Ring {
            size,
            head: 0,
            used: 0,
        }
    }

    /// `len` contiguous bytes: their offset, and what to give [`Ring::free`] back (the bytes
    /// skipped at the end when it wraps count too). `None` when not enough is free yet.
    pub fn alloc(&mut self, len: usize) -> Option<(usize, usize)> {
        let len = len.div_ceil(ALIGN) * ALIGN;
        if len > self.size {
            return None;
        }
        let (start, waste) = if self.head + len <= self.size {
            (self.head, 0)
        } else {
            (0, self.size - self.head)
        };
        let need = len + waste;
        if self.used + need > self.size {
            return None;
        }
        self.head = (start + len) % self.size;
        self.used += need;
        Some((start, need))
    }

    /// Frees the oldest allocation (its `need`).
    pub fn free(&mut self, need: usize) {
        debug_assert!(need <= self.used);
        self.used -= need;
        if self.used == 0 {
            self.head = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(count: u32) -> RemotePool {
        RemotePool::new(PoolDesc {
            pool_ref: 3,
            elem_count: count,
            elem_size: 256,
            rkey: 1,
            addr: 0x1000,
            context: 0,
        })
    }

    #[test]
    fn an_element_is_written_once_until_replenished() {
        let mut p = remote(2);
        assert!(p.takes(256) && !p.takes(257));
        let a = p.take();
        let b = p.take();
        assert_ne!(a.elem, b.elem);
        assert!(!p.takes(1), "both consumed");
        assert!(!p.replenish(7), "no such element");
        assert!(p.replenish(a.elem));
        assert!(!p.replenish(a.elem), "replenished twice");
        assert!(p.takes(1));
        assert_eq!(p.take(), a);
        p.flush = Flush::WeReturn { asked: false };
        assert!(p.replenish(b.elem));
        assert!(!p.takes(1), "a pool being flushed takes nothing");
    }

    #[test]
    fn the_staging_ring_never_hands_out_bytes_in_use() {
        let mut r = Ring::new(1024);
        let mut live: std::collections::VecDeque<(usize, usize, usize)> = Default::default();
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for step in 0..100_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let len = (s % 700) as usize;
            if s % 3 != 0 {
                if let Some((off, need)) = r.alloc(len) {
                    let end = off + len.div_ceil(ALIGN) * ALIGN;
                    assert!(end <= 1024, "step {step}: {off}+{len} past the end");
                    for &(o, e, _) in &live {
                        let empty = o == e || off == end;
                        assert!(
                            empty || end <= o || off >= e,
                            "step {step}: overlaps {o}..{e}"
                        );
                    }
                    live.push_back((off, end, need));
                    continue;
                }
                assert!(!live.is_empty(), "an empty ring refused {len} bytes");
            }
            if let Some((_, _, need)) = live.pop_front() {
                r.free(need);
            }
        }
        assert_eq!(r.alloc(1025), None);
        while let Some((_, _, need)) = live.pop_front() {
            r.free(need);
        }
        assert_eq!(r.alloc(1024), Some((0, 1024)), "all free again");
    }
}
