// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The cache itself, over a [`Backend`] that registers regions and reads an invalidation page:
//! the device in [`super::RegCache`], a fake in the host tests.
//!
//! Locks, and what is done under them (never a system call):
//!
//! - `maps` (`RwLock`): read for a lookup (a `BTreeMap` search and an `Arc` clone) and to plan
//!   a merge; write to insert, remove, evict, collect garbage and apply revocations. Entries that
//!   leave the map are collected in a `Vec` and dropped after the lock is released, since the
//!   last drop of an entry deregisters its region.
//! - `inval` (`Mutex`): taken only when the page's generation moved, so that one thread applies
//!   a batch of revocations at a time and `seen` only grows; it nests `maps` (write).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};
use std::time::Instant;

use super::{CacheConfig, CacheStats, CachedMr};
use crate::error::{Errno, Error, Result};
use crate::inval::InvalPoll;
use crate::mem::PAGE_SIZE;
use crate::pd::Access;

/// How many registrations a miss makes, at most, when each is revoked before it could be
/// inserted (the range keeps changing).
const RACE_TRIES: usize = 4;

/// A registration a [`Backend`] made: dropping `handle` deregisters it.
pub(crate) struct Registration {
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) handle: Box<dyn Send + Sync>,
}

/// What the cache needs from the device: registrations and the invalidation page.
pub(crate) trait Backend: Send + Sync {
    /// Registers `[start, start + len)` with `access` (rights only).
    ///
    /// # Safety
    ///
    /// If `access.writes()`, the caller holds the promise of [`super::RegCache::get_raw`] for
    /// the range.
    unsafe fn register(&self, start: u64, len: u64, access: Access) -> Result<Registration>;

    /// The invalidation page's generation (acquire); constant if regions are never revoked.
    fn generation(&self) -> u64;

    /// What was revoked since `seen`.
    fn poll(&self, seen: u64) -> InvalPoll;
}

/// The two classes of entries. A read-only request is only ever served from (and merged into)
/// read-only entries, so it never gets a key the device may write through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    ReadOnly = 0,
    Writable = 1,
}

impl Class {
    fn of(access: Access) -> Class {
        if access.writes() {
            Class::Writable
        } else {
            Class::ReadOnly
        }
    }
}

const CLASSES: [Class; 2] = [Class::ReadOnly, Class::Writable];

/// A cached registration, shared by the map and by the guards ([`CachedMr`]) handed out. The
/// region is deregistered when the last of them drops it.
pub(crate) struct Entry {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) access: Access,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    /// Set when the cache learnt that the driver revoked it (or may have: a ring overflow).
    pub(crate) revoked: AtomicBool,
    /// Tick of the last lookup that returned it (LRU order).
    last_use: AtomicU64,
    /// `last_use` as the last garbage collection saw it, and since when (ns from the cache's
    /// epoch) it has not changed. Written under `maps` (write) only.
    gc_tick: AtomicU64,
    gc_since: AtomicU64,
    /// The cache, to read the page in [`CachedMr::is_revoked`].
    pub(crate) core: Weak<Core>,
    _registration: Box<dyn Send + Sync>,
}

impl Entry {
    fn len(&self) -> u64 {
        self.end - self.start
    }

    /// No guard holds it. Exact under `maps` (write): guards are only cloned from the map
    /// under `maps` (read) or from another guard, which would hold a count itself.
    fn unused(self: &Arc<Entry>) -> bool {
        Arc::strong_count(self) == 1
    }
}

/// The entries of both classes, each map keyed by start, entries of a class never overlapping.
#[derive(Default)]
struct Maps {
    classes: [BTreeMap<u64, Arc<Entry>>; 2],
    bytes: u64,
    /// Entries replaced while in use, to mark them if the driver revokes them later.
    retired: Vec<Weak<Entry>>,
}

impl Maps {
    fn len(&self) -> usize {
        self.classes.iter().map(BTreeMap::len).sum()
    }

    fn insert(&mut self, class: Class, e: Arc<Entry>) {
        self.bytes += e.len();
        let old = self.classes[class as usize].insert(e.start, e);
        debug_assert!(old.is_none(), "overlapping entries are removed first");
    }

    fn remove(&mut self, class: Class, start: u64) -> Option<Arc<Entry>> {
        let e = self.classes[class as usize].remove(&start)?;
        self.bytes -= e.len();
        Some(e)
    }

    /// Removes the entries `keep` refuses into `out`; returns how many.
    fn retain(&mut self, mut keep: impl FnMut(&Arc<Entry>) -> bool, out: &mut Vec<Arc<Entry>>) {
        for map in &mut self.classes {
            map.retain(|_, e| {
                if keep(e) {
                    return true;
                }
                out.push(e.clone());
                false
            });
        }
        self.bytes = self
            .classes
            .iter()
            .flat_map(|m| m.values())
            .map(|e| e.len())
            .sum();
    }
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    merges: AtomicU64,
    evictions: AtomicU64,
    revoked: AtomicU64,
    flushes: AtomicU64,
    gc_dropped: AtomicU64,
}

fn bump(c: &AtomicU64, n: usize) {
    c.fetch_add(n as u64, Relaxed);
}

/// The shared state of a [`super::RegCache`].
pub(crate) struct Core {
    backend: Arc<dyn Backend>,
    pub(crate) config: CacheConfig,
    maps: RwLock<Maps>,
    inval: Mutex<()>,
    /// The page generation whose revocations are applied to the maps (written under `inval`).
    seen: AtomicU64,
    tick: AtomicU64,
    epoch: Instant,
    /// When the last garbage collection ran (ns from `epoch`).
    last_gc: AtomicU64,
    stats: Counters,
}

fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn align_down(x: u64, align: u64) -> u64 {
    x & !(align - 1)
}

fn align_up(x: u64, align: u64) -> Option<u64> {
    Some(align_down(x.checked_add(align - 1)?, align))
}

impl Core {
    pub(crate) fn new(backend: Arc<dyn Backend>, config: CacheConfig) -> Core {
        Core {
            seen: AtomicU64::new(backend.generation()),
            backend,
            config,
            maps: RwLock::default(),
            inval: Mutex::new(()),
            tick: AtomicU64::new(0),
            epoch: Instant::now(),
            last_gc: AtomicU64::new(0),
            stats: Counters::default(),
        }
    }

    // A panic under a lock leaves the maps consistent enough: every entry is still a live
    // registration of its class, which is all that soundness needs.
    fn read(&self) -> RwLockReadGuard<'_, Maps> {
        self.maps.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Maps> {
        self.maps.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn now(&self) -> u64 {
        ns(self.epoch.elapsed())
    }

    /// Applies what the driver revoked since `seen`: one load of the page when nothing was.
    #[inline]
    pub(crate) fn sync(&self) {
        if self.backend.generation() != self.seen.load(Relaxed) {
            self.sync_slow();
        }
    }

    #[cold]
    fn sync_slow(&self) {
        let mut dropped = Vec::new();
        let mut others = Vec::new(); // references to retired entries
        {
            let _one_at_a_time = self.inval.lock().unwrap_or_else(PoisonError::into_inner);
            let seen = self.seen.load(Relaxed);
            let upto = match self.backend.poll(seen) {
                InvalPoll::Nothing => return,
                InvalPoll::Revoked { regions, upto } => {
                    let mut maps = self.write();
                    for r in regions {
                        // Keys are unique: at most one entry, found by the start it was
                        // registered at.
                        let class = CLASSES.into_iter().find(|&c| {
                            maps.classes[c as usize]
                                .get(&r.start)
                                .is_some_and(|e| e.lkey == r.key)
                        });
                        match class.and_then(|c| maps.remove(c, r.start)) {
                            Some(e) => {
                                e.revoked.store(true, Relaxed);
                                dropped.push(e);
                            }
                            // Not ours, or already replaced while in use.
                            None => mark_retired(&mut maps.retired, Some(r.key), &mut others),
                        }
                    }
                    upto
                }
                InvalPoll::FlushAll { upto } => {
                    let mut maps = self.write();
                    maps.retain(|_| false, &mut dropped);
                    for e in &dropped {
                        e.revoked.store(true, Relaxed);
                    }
                    mark_retired(&mut maps.retired, None, &mut others);
                    bump(&self.stats.flushes, 1);
                    upto
                }
            };
            bump(&self.stats.revoked, dropped.len());
            self.seen.store(upto, Relaxed);
        }
        // Deregistered here, with no lock held.
        drop(dropped);
        drop(others);
    }

    /// Looks `[addr, addr + len)` up with `access`, registering it on a miss.
    ///
    /// # Safety
    ///
    /// If `access.writes()`, the caller holds the promise of [`super::RegCache::get_raw`].
    pub(crate) unsafe fn get(
        self: &Arc<Self>,
        addr: u64,
        len: usize,
        access: Access,
    ) -> Result<CachedMr> {
        if len == 0 {
            return Err(Error::Invalid {
                what: "cache lookup of 0 bytes".into(),
            });
        }
        if !Access::ALL.contains(access) {
            return Err(Error::Invalid {
                what: format!("cache lookup with access {:#x}: not only rights", access.0),
            });
        }
        let end = addr.checked_add(len as u64).ok_or_else(|| Error::Invalid {
            what: format!("cache lookup of {len} bytes at {addr:#x} wraps"),
        })?;
        let class = Class::of(access);
        self.sync();
        if let Some(entry) = self.lookup(class, addr, end, access) {
            bump(&self.stats.hits, 1);
            return Ok(CachedMr { entry });
        }
        bump(&self.stats.misses, 1);
        // SAFETY: the caller's promise, for a range that the miss only widens within its
        // class (which `get_raw`'s contract covers).
        unsafe { self.miss(class, addr, end, access) }
    }

    /// The hit path: a read lock, a search, an `Arc` clone, a tick.
    fn lookup(&self, class: Class, start: u64, end: u64, access: Access) -> Option<Arc<Entry>> {
        let maps = self.read();
        let (_, e) = maps.classes[class as usize].range(..=start).next_back()?;
        if e.end < end || !e.access.contains(access) {
            return None;
        }
        e.last_use.store(self.tick.fetch_add(1, Relaxed), Relaxed);
        Some(e.clone())
    }

    /// The range and rights to register for `[start, end)`: united with every entry of the
    /// class that overlaps it if `merge`. Entries that only touch it stay apart, so that a
    /// region does not grow over an arena of adjacent buffers one miss (one REG_MR of all of
    /// it) at a time.
    fn plan(&self, class: Class, start: u64, end: u64, access: Access, merge: bool) -> Plan {
        let mut p = Plan { start, end, access };
        if merge {
            let maps = self.read();
            // Entries of a class do not overlap, so their ends grow with their starts.
            for (_, e) in maps.classes[class as usize].range(..end).rev() {
                if e.end <= start {
                    break;
                }
                p.start = p.start.min(e.start);
                p.end = p.end.max(e.end);
                p.access = p.access | e.access;
            }
        }
        assert_eq!(Class::of(p.access), class, "rights never cross classes");
        p
    }

    /// # Safety
    ///
    /// As [`Core::get`].
    unsafe fn miss(
        self: &Arc<Self>,
        class: Class,
        start: u64,
        end: u64,
        access: Access,
    ) -> Result<CachedMr> {
        let page = PAGE_SIZE as u64;
        let invalid = || Error::Invalid {
            what: format!("cache lookup at {start:#x}..{end:#x}: no page holds its end"),
        };
        let exact = (
            align_down(start, page),
            align_up(end, page).ok_or_else(invalid)?,
        );
        let g = self.config.granule as u64;
        let wide = align_up(end, g).map_or(exact, |e| (align_down(start, g), e));
        // Widened to the granule with the entries it overlaps; if part of that is not mapped
        // (EFAULT) or cannot be registered (EPERM), the pages of the request with the entries
        // they overlap (which are registered, so mapped); then the pages of the request alone.
        // (A pinned region that spans several buffers is safe: when one of them is unmapped
        // the driver revokes only its pages, so requests in flight on the others complete.)
        let mut plans = vec![(wide, true), (exact, true), (exact, false)];
        plans.dedup();
        let mut plans = plans.into_iter().peekable();
        let (mut range, mut merge) = plans.next().expect("three plans");
        let mut races = 0;
        let mut evicted_for_memlock = false;
        loop {
            let p = self.plan(class, range.0, range.1, access, merge);
            let before = self.backend.generation();
            // SAFETY: the caller's promise if `p.access` writes: it is the request's class,
            // widened as `get_raw`'s contract allows.
            let reg = match unsafe { self.backend.register(p.start, p.end - p.start, p.access) } {
                Ok(reg) => reg,
                Err(e) => match e.errno() {
                    Some(Errno::EFAULT | Errno::EPERM) if plans.peek().is_some() => {
                        (range, merge) = plans.next().expect("peeked");
                        continue;
                    }
                    Some(Errno::ENOMEM) if !evicted_for_memlock => {
                        // Over RLIMIT_MEMLOCK: give back what nobody uses and try once more.
                        evicted_for_memlock = true;
                        self.flush();
                        continue;
                    }
                    _ => return Err(e),
                },
            };
            match self.insert(class, p, reg, before) {
                Some(guard) => return Ok(guard),
                None if races + 1 < RACE_TRIES => races += 1,
                None => {
                    return Err(Error::Ioctl {
                        op: "REG_MR",
                        source: Errno::EAGAIN,
                    })
                }
            }
        }
    }

    /// True if the driver revoked `key` after generation `before` (read before the key was
    /// registered), or may have (the ring wrapped, or everything was revoked).
    fn revoked_since(&self, before: u64, key: u32) -> bool {
        match self.backend.poll(before) {
            InvalPoll::Nothing => false,
            InvalPoll::Revoked { regions, .. } => regions.iter().any(|r| r.key == key),
            InvalPoll::FlushAll { .. } => true,
        }
    }

    /// Inserts a fresh registration, replacing the entries of its class it overlaps, unless it
    /// was revoked already (`None`: it is deregistered).
    fn insert(
        self: &Arc<Self>,
        class: Class,
        p: Plan,
        reg: Registration,
        before: u64,
    ) -> Option<CachedMr> {
        let mut dropped = Vec::new();
        let guard;
        {
            let mut maps = self.write();
            // A revocation published from here on is applied by a later `sync`, which finds
            // the entry in the map; one published since `before` may have been applied
            // already (`seen` past it) without finding it, so it is checked here. Under the
            // lock, so that no `sync` applies a batch between this check and the insertion.
            if self.revoked_since(before, reg.lkey) {
                drop(maps);
                drop(reg); // deregistered, with no lock held
                return None;
            }
            let map = &maps.classes[class as usize];
            let overlapping: Vec<u64> = map
                .range(..p.end)
                .rev()
                .take_while(|(_, e)| e.end > p.start)
                .map(|(&k, _)| k)
                .collect();
            for k in overlapping {
                let e = maps.remove(class, k).expect("just seen");
                if !e.unused() {
                    maps.retired.push(Arc::downgrade(&e));
                }
                dropped.push(e);
            }
            bump(&self.stats.merges, dropped.len());
            let now = self.now();
            let tick = self.tick.fetch_add(1, Relaxed);
            let entry = Arc::new(Entry {
                start: p.start,
                end: p.end,
                access: p.access,
                lkey: reg.lkey,
                rkey: reg.rkey,
                revoked: AtomicBool::new(false),
                last_use: AtomicU64::new(tick),
                gc_tick: AtomicU64::new(tick),
                gc_since: AtomicU64::new(now),
                core: Arc::downgrade(self),
                _registration: reg.handle,
            });
            maps.insert(class, entry.clone());
            guard = CachedMr { entry };
            self.evict(&mut maps, &mut dropped);
            let since_gc = now.saturating_sub(self.last_gc.load(Relaxed));
            if since_gc >= ns(self.config.idle) / 2 {
                let n = self.gc_locked(&mut maps, now, &mut dropped);
                bump(&self.stats.gc_dropped, n);
            }
            maps.retired.retain(|w| w.strong_count() > 0);
        }
        drop(dropped);
        Some(guard)
    }

    /// Evicts unused entries, least recently used first, until the cache is within its
    /// limits (or only entries in use are left).
    fn evict(&self, maps: &mut Maps, out: &mut Vec<Arc<Entry>>) {
        let over = |m: &Maps| m.len() > self.config.max_entries || m.bytes > self.config.max_bytes;
        if !over(maps) {
            return;
        }
        let mut lru: Vec<(u64, Class, u64)> = CLASSES
            .iter()
            .flat_map(|&c| {
                maps.classes[c as usize]
                    .values()
                    .filter(|e| e.unused())
                    .map(move |e| (e.last_use.load(Relaxed), c, e.start))
            })
            .collect();
        lru.sort_unstable();
        let mut n = 0;
        for (_, c, start) in lru {
            if !over(maps) {
                break;
            }
            out.extend(maps.remove(c, start));
            n += 1;
        }
        bump(&self.stats.evictions, n);
    }

    /// Drops the unused entries not looked up since `config.idle` (as far as the garbage
    /// collections tell: an entry is idle from the first collection that saw its last use).
    fn gc_locked(&self, maps: &mut Maps, now: u64, out: &mut Vec<Arc<Entry>>) -> usize {
        self.last_gc.store(now, Relaxed);
        let idle = ns(self.config.idle);
        let before = out.len();
        maps.retain(
            |e| {
                let tick = e.last_use.load(Relaxed);
                if !e.unused() || tick != e.gc_tick.load(Relaxed) {
                    e.gc_tick.store(tick, Relaxed);
                    e.gc_since.store(now, Relaxed);
                    return true;
                }
                now.saturating_sub(e.gc_since.load(Relaxed)) < idle
            },
            out,
        );
        out.len() - before
    }

    pub(crate) fn gc(&self) -> usize {
        self.sync();
        let mut dropped = Vec::new();
        let n = {
            let mut maps = self.write();
            let now = self.now();
            self.gc_locked(&mut maps, now, &mut dropped)
        };
        bump(&self.stats.gc_dropped, n);
        drop(dropped);
        n
    }

    pub(crate) fn flush(&self) -> usize {
        self.sync();
        let mut dropped = Vec::new();
        self.write().retain(|e| !e.unused(), &mut dropped);
        bump(&self.stats.flushes, 1);
        let n = dropped.len();
        drop(dropped);
        n
    }

    pub(crate) fn stats(&self) -> CacheStats {
        self.sync();
        let maps = self.read();
        let s = &self.stats;
        CacheStats {
            hits: s.hits.load(Relaxed),
            misses: s.misses.load(Relaxed),
            merges: s.merges.load(Relaxed),
            evictions: s.evictions.load(Relaxed),
            revoked: s.revoked.load(Relaxed),
            flushes: s.flushes.load(Relaxed),
            gc_dropped: s.gc_dropped.load(Relaxed),
            entries: maps.len(),
            bytes: maps.bytes,
            in_use: maps
                .classes
                .iter()
                .flat_map(BTreeMap::values)
                .filter(|e| !e.unused())
                .count(),
        }
    }

    /// Every entry as (read-only class?, start, end, access, lkey), for tests.
    #[cfg(test)]
    pub(crate) fn entries(&self) -> Vec<(bool, u64, u64, Access, u32)> {
        let maps = self.read();
        CLASSES
            .iter()
            .flat_map(|&c| {
                maps.classes[c as usize]
                    .values()
                    .map(move |e| (c == Class::ReadOnly, e.start, e.end, e.access, e.lkey))
            })
            .collect()
    }
}

/// Marks the retired entries with `key` (all of them for `None`) revoked, and forgets those
/// that are gone or marked. The references it takes go to `out`: a guard may drop its own
/// meanwhile, and the last drop deregisters, which must not happen under a lock.
fn mark_retired(retired: &mut Vec<Weak<Entry>>, key: Option<u32>, out: &mut Vec<Arc<Entry>>) {
    retired.retain(|w| {
        let Some(e) = w.upgrade() else {
            return false;
        };
        let hit = key.is_none_or(|k| k == e.lkey);
        if hit {
            e.revoked.store(true, Relaxed);
        }
        out.push(e);
        !hit
    });
}

/// A range and rights to register.
#[derive(Clone, Copy, Debug)]
struct Plan {
    start: u64,
    end: u64,
    access: Access,
}
