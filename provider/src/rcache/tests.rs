// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Host tests of the cache over a fake backend: registrations are numbers in a table, and the
//! invalidation page is a heap page the tests write as the driver would. No memory at the
//! addresses used here is ever touched.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::*;
use crate::error::Errno;
use crate::inval::fake::FakePage;

type Live = Arc<Mutex<HashMap<u32, (u64, u64, Access)>>>;

/// The device, faked: REG_MR hands out keys and records them in `live` until deregistered.
struct Fake {
    page: FakePage,
    next_key: AtomicU32,
    live: Live,
    registers: AtomicUsize,
    /// If set, a registration outside these ranges fails with `EFAULT`.
    mapped: Mutex<Option<Vec<(u64, u64)>>>,
    /// The next this-many registrations are revoked before REG_MR returns.
    revoke_next: AtomicUsize,
    /// Live bytes beyond which REG_MR fails with `ENOMEM` (`RLIMIT_MEMLOCK`).
    memlock: AtomicU64,
}

struct FakeReg {
    key: u32,
    live: Live,
}

impl Drop for FakeReg {
    fn drop(&mut self) {
        self.live.lock().unwrap().remove(&self.key);
    }
}

fn ioctl_err(source: Errno) -> Error {
    Error::Ioctl {
        op: "REG_MR",
        source,
    }
}

impl Backend for Fake {
    unsafe fn register(&self, start: u64, len: u64, access: Access) -> Result<Registration> {
        self.registers.fetch_add(1, Relaxed);
        if let Some(m) = &*self.mapped.lock().unwrap() {
            if !m.iter().any(|&(s, e)| start >= s && start + len <= e) {
                return Err(ioctl_err(Errno::EFAULT));
            }
        }
        let mut live = self.live.lock().unwrap();
        let pinned: u64 = live.values().map(|v| v.1).sum();
        if pinned + len > self.memlock.load(Relaxed) {
            return Err(ioctl_err(Errno::ENOMEM));
        }
        let key = self.next_key.fetch_add(0x100, Relaxed);
        live.insert(key, (start, len, access));
        drop(live);
        if self
            .revoke_next
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            self.page.revoke(key, start, len);
        }
        Ok(Registration {
            lkey: key,
            rkey: key,
            handle: Box::new(FakeReg {
                key,
                live: self.live.clone(),
            }),
        })
    }

    fn generation(&self) -> u64 {
        self.page.generation()
    }

    fn poll(&self, seen: u64) -> InvalPoll {
        self.page.poll(seen)
    }
}

impl Fake {
    fn live_keys(&self) -> Vec<u32> {
        let mut k: Vec<u32> = self.live.lock().unwrap().keys().copied().collect();
        k.sort_unstable();
        k
    }
}

fn config(granule: usize) -> CacheConfig {
    CacheConfig {
        mode: CacheMode::Pinned,
        max_bytes: u64::MAX,
        max_entries: 1000,
        granule,
        idle: Duration::from_secs(3600),
    }
}

fn cache(config: CacheConfig) -> (RegCache, Arc<Fake>) {
    let fake = Arc::new(Fake {
        page: FakePage::new(),
        next_key: AtomicU32::new(0x100),
        live: Live::default(),
        registers: AtomicUsize::new(0),
        mapped: Mutex::new(None),
        revoke_next: AtomicUsize::new(0),
        memlock: AtomicU64::new(u64::MAX),
    });
    (RegCache::with_backend(fake.clone(), config), fake)
}

fn ro(c: &RegCache, addr: u64, len: usize) -> CachedMr {
    c.get(addr as *const u8, len, Access::NONE).unwrap()
}

fn rw_try(c: &RegCache, addr: u64, len: usize, access: Access) -> Result<CachedMr> {
    // SAFETY: the fake backend registers nothing in a device: no device writes anything.
    unsafe { c.get_raw(addr as *mut u8, len, access) }
}

fn rw(c: &RegCache, addr: u64, len: usize, access: Access) -> CachedMr {
    rw_try(c, addr, len, access).unwrap()
}

const LW: Access = Access::LOCAL_WRITE;

#[test]
fn hits_and_misses_on_a_known_pattern() {
    let (c, fake) = cache(config(64 << 10));
    let a = ro(&c, 0x10_0000, 100);
    assert_eq!(
        (a.addr(), a.len()),
        (0x10_0000, 0x1_0000),
        "widened to the granule"
    );
    let b = ro(&c, 0x10_0010, 200);
    assert_eq!(b.lkey(), a.lkey(), "a hit");
    let m = ro(&c, 0x10_fff0, 0x20); // crosses into the next granule: merged
    assert_eq!((m.addr(), m.len()), (0x10_0000, 0x2_0000));
    assert_ne!(m.lkey(), a.lkey());
    let d = ro(&c, 0x11_8000, 0x1000);
    assert_eq!(d.lkey(), m.lkey());
    let e = c
        .get(0x20_0000 as *const u8, 1, Access::REMOTE_READ)
        .unwrap();
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.merges), (2, 3, 1));
    assert_eq!((s.entries, s.bytes, s.in_use), (2, 0x3_0000, 2));
    assert_eq!(fake.registers.load(Relaxed), 3);
    assert_eq!(
        fake.live_keys().len(),
        3,
        "the replaced region lives while guarded"
    );
    drop((a, b));
    assert_eq!(fake.live_keys(), [m.lkey(), e.lkey()]);
    assert_eq!(e.sge(0x20_0000, 8).lkey, e.lkey());
    drop((m, d, e));
    assert_eq!(c.stats().in_use, 0);
    drop(c);
    assert!(
        fake.live_keys().is_empty(),
        "dropping the cache deregisters"
    );
}

#[test]
#[should_panic(expected = "outside the cached region")]
fn an_sge_outside_the_region_panics() {
    let (c, _fake) = cache(config(4096));
    let a = ro(&c, 0x1000, 10);
    let _ = a.sge(0x1ff0, 0x20);
}

#[test]
fn merges_overlapping_entries_not_adjacent_ones() {
    let (c, fake) = cache(config(4096));
    let w1 = rw(&c, 0x1000, 0x1000, LW);
    let w3 = rw(&c, 0x3000, 0x1000, LW | Access::REMOTE_WRITE);
    assert_eq!(c.stats().entries, 2);
    let lone = rw(&c, 0x2000, 0x10, LW); // touches both, overlaps neither
    assert_eq!((lone.addr(), lone.len()), (0x2000, 0x1000));
    assert_eq!((c.stats().entries, c.stats().merges), (3, 0));
    drop(lone);
    let w2 = rw(&c, 0x1800, 0x2000, LW | Access::REMOTE_READ); // overlaps all three
    assert_eq!((w2.addr(), w2.len()), (0x1000, 0x3000));
    assert_eq!(
        w2.access(),
        LW | Access::REMOTE_WRITE | Access::REMOTE_READ,
        "rights united"
    );
    assert_eq!((c.stats().entries, c.stats().merges), (1, 3));
    let w4 = rw(&c, 0x3800, 0x1000, LW); // overlaps, and goes past the end
    assert_eq!((w4.addr(), w4.len()), (0x1000, 0x4000));
    assert_eq!((c.stats().entries, c.stats().merges), (1, 4));
    assert_eq!(
        fake.live_keys().len(),
        4,
        "replaced entries live while guarded (the lone one went with its guard)"
    );
    assert!(!w1.is_revoked() && !w3.is_revoked());
    drop((w1, w2, w3));
    assert_eq!(fake.live_keys(), [w4.lkey()]);
    assert_eq!(rw(&c, 0x1000, 0x4000, LW).lkey(), w4.lkey());
}

#[test]
fn a_read_only_request_never_gets_a_writable_key() {
    let (c, _fake) = cache(config(4096));
    let w = rw(&c, 0x1_0000, 0x1000, Access::ALL);
    let r = ro(&c, 0x1_0000, 0x100);
    assert_ne!(r.lkey(), w.lkey());
    assert!(!r.access().writes());
    assert!(matches!(
        c.get(0x1_0000 as *const u8, 1, LW),
        Err(Error::Invalid { .. })
    ));
    // A writable request may use a writable entry with more rights.
    assert_eq!(rw(&c, 0x1_0000, 0x10, LW).lkey(), w.lkey());
    // Merging stays within a class: the overlapped writable entry grows, the read-only one not.
    let w2 = rw(&c, 0x1_0800, 0x1000, LW);
    assert_eq!((w2.addr(), w2.len()), (0x1_0000, 0x2000));
    let r2 = c
        .get(0x1_0800 as *const u8, 0x1000, Access::REMOTE_READ)
        .unwrap();
    assert_eq!((r2.addr(), r2.len()), (0x1_0000, 0x2000));
    assert_eq!(r2.access(), Access::REMOTE_READ);
    for (read_only, _, _, access, _) in c.core.entries() {
        assert_eq!(read_only, !access.writes());
    }
    assert_eq!(c.stats().entries, 2);
}

#[test]
fn revoked_entries_are_dropped_and_missed_again() {
    let (c, fake) = cache(config(4096));
    let a = ro(&c, 0x4_0000, 10);
    drop(ro(&c, 0x8_0000, 10));
    assert!(!a.is_revoked());
    fake.page.revoke(a.lkey(), a.addr(), a.len() as u64);
    assert!(a.is_revoked(), "read from the page");
    let s = c.stats();
    assert_eq!((s.revoked, s.entries), (1, 1));
    let a2 = ro(&c, 0x4_0000, 10);
    assert_ne!(a2.lkey(), a.lkey(), "a miss");
    assert_eq!(c.stats().misses, 3);
    let old = a.lkey();
    assert!(
        fake.live_keys().contains(&old),
        "deregistered by its last guard"
    );
    drop(a);
    assert!(!fake.live_keys().contains(&old));

    // Someone else's key: nothing to do.
    fake.page.revoke(0xdead_0000, 0x4_0000, 4096);
    assert_eq!(c.stats().entries, 2);

    // A revoked entry that a merge had already replaced still learns it.
    let d = ro(&c, 0x10_0000, 0x10);
    let e = ro(&c, 0x10_0ff0, 0x20);
    assert_eq!(e.addr(), 0x10_0000, "merged with d's");
    fake.page.revoke(d.lkey(), d.addr(), d.len() as u64);
    assert!(d.is_revoked());
    assert!(!e.is_revoked());
    assert_eq!(c.stats().revoked, 1, "d had left the cache already");
}

#[test]
fn a_wrapped_ring_or_a_flush_drops_everything() {
    let (c, fake) = cache(config(4096));
    let held = ro(&c, 0x1000, 1);
    drop(ro(&c, 0x10_0000, 1));
    drop(rw(&c, 0x20_0000, 1, LW));
    for k in 0..=qhca_uapi::QHCA_INVAL_RING_ENTRIES {
        fake.page.revoke(0xff00_0000 + k, 0, 4096); // keys the cache does not know
    }
    let s = c.stats();
    assert_eq!((s.entries, s.revoked, s.flushes), (0, 3, 1));
    assert!(held.is_revoked(), "may have been: counted as revoked");
    assert_ne!(ro(&c, 0x1000, 1).lkey(), held.lkey());
    fake.page.revoke_all();
    let s = c.stats();
    assert_eq!((s.entries, s.revoked, s.flushes), (0, 4, 2));
}

#[test]
fn a_region_revoked_before_insertion_is_not_inserted() {
    let (c, fake) = cache(config(4096));
    fake.revoke_next.store(1, Relaxed);
    let a = ro(&c, 0x5000, 1);
    assert_eq!(fake.registers.load(Relaxed), 2, "registered again");
    assert_eq!(
        fake.live_keys(),
        [a.lkey()],
        "the revoked one is deregistered"
    );
    assert_eq!(c.core.entries().len(), 1);
    assert!(!a.is_revoked());
    assert_eq!(c.stats().revoked, 0, "never inserted, never dropped");

    // A range that never stays put: the miss gives up.
    fake.revoke_next.store(usize::MAX, Relaxed);
    let err = c.get(0x9000 as *const u8, 1, Access::NONE).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EAGAIN));
    assert_eq!(fake.registers.load(Relaxed), 2 + 4);
    assert_eq!(fake.live_keys(), [a.lkey()]);
    assert_eq!(c.stats().entries, 1);
}

#[test]
fn lru_eviction_spares_entries_in_use() {
    let (c, fake) = cache(CacheConfig {
        max_entries: 2,
        ..config(4096)
    });
    let page = |n: u64| n << 16; // far apart: never merged
    let a = ro(&c, page(1), 1);
    drop(ro(&c, page(2), 1));
    let cc = ro(&c, page(3), 1);
    let starts = |c: &RegCache| c.core.entries().iter().map(|e| e.1).collect::<Vec<_>>();
    assert_eq!(starts(&c), [page(1), page(3)], "the unused one went");
    assert_eq!(c.stats().evictions, 1);
    drop(cc);
    drop(ro(&c, page(1), 1)); // a hit: now more recent than page 3
    drop(a);
    let d = ro(&c, page(4), 1);
    assert_eq!(
        starts(&c),
        [page(1), page(4)],
        "the least recently used went"
    );
    let a = ro(&c, page(1), 1);
    let e = ro(&c, page(5), 1);
    assert_eq!(c.stats().entries, 3, "over the limit, but all in use");
    assert_eq!(c.stats().evictions, 2);
    assert_eq!(fake.live_keys().len(), 3);
    drop((a, d, e));

    let (c, _) = cache(CacheConfig {
        max_bytes: 0x2000,
        ..config(4096)
    });
    drop(ro(&c, page(1), 1));
    drop(ro(&c, page(2), 0x1000));
    drop(ro(&c, page(3), 0x1000));
    assert_eq!(starts(&c), [page(2), page(3)]);
}

#[test]
fn gc_drops_idle_unused_entries_and_flush_every_unused_one() {
    let idle = Duration::from_millis(40);
    let (c, _) = cache(CacheConfig {
        idle,
        ..config(4096)
    });
    drop(ro(&c, 0x1_0000, 1));
    let b = ro(&c, 0x2_0000, 1);
    thread::sleep(idle + idle / 2);
    assert_eq!(c.gc(), 1, "the idle one; the one in use stays");
    drop(ro(&c, 0x2_0000, 1));
    drop(b);
    assert_eq!(c.gc(), 0, "used since the last collection");
    thread::sleep(idle + idle / 2);
    assert_eq!(c.gc(), 1);
    assert_eq!(c.stats().gc_dropped, 2);

    let held = ro(&c, 0x3_0000, 1);
    drop(ro(&c, 0x4_0000, 1));
    assert_eq!(c.flush(), 1);
    assert_eq!(c.stats().entries, 1);
    drop(held);
}

#[test]
fn forgetting_a_guard_only_leaks_its_region() {
    let (c, fake) = cache(config(4096));
    let a = ro(&c, 0x1000, 1);
    let (key, start, len) = (a.lkey(), a.addr(), a.len() as u64);
    std::mem::forget(a);
    assert_eq!(c.flush(), 0, "still in use");
    assert_eq!(c.stats().in_use, 1);
    fake.page.revoke(key, start, len);
    assert_eq!(c.stats().entries, 0);
    drop(c);
    assert_eq!(fake.live_keys(), [key], "leaked, registered");
}

#[test]
fn a_widened_range_falls_back_to_the_pages_of_the_request() {
    let (c, fake) = cache(config(64 << 10));
    *fake.mapped.lock().unwrap() = Some(vec![(0x20_0000, 0x20_2000)]);
    let a = ro(&c, 0x20_0100, 0x100);
    assert_eq!((a.addr(), a.len()), (0x20_0000, 0x1000));
    assert_eq!(fake.registers.load(Relaxed), 2);
    let err = c.get(0x30_0000 as *const u8, 1, Access::NONE).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EFAULT));
}

#[test]
fn memlock_pressure_gives_back_unused_entries() {
    let (c, fake) = cache(config(4096));
    fake.memlock.store(0x3000, Relaxed);
    let held: Vec<CachedMr> = (1..=3).map(|n| ro(&c, n << 16, 1)).collect();
    let err = c.get((4 << 16) as *const u8, 1, Access::NONE).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENOMEM), "nothing to give back");
    drop(held);
    let d = ro(&c, 4 << 16, 1);
    let s = c.stats();
    assert_eq!((s.entries, s.flushes), (1, 2));
    assert_eq!(fake.live_keys(), [d.lkey()]);
}

#[test]
fn bad_requests_and_configurations_are_refused() {
    let (c, _) = cache(config(4096));
    for (addr, len, access) in [
        (0x1000, 0, Access::NONE),
        (u64::MAX - 10, 100, Access::NONE),
        (0x1000, 1, Access::ON_DEMAND),
        (0x1000, 1, Access::WATCHED),
    ] {
        assert!(matches!(
            rw_try(&c, addr, len, access),
            Err(Error::Invalid { .. })
        ));
    }
    for granule in [0, 2048, 3 << 12] {
        assert!(CacheConfig {
            granule,
            ..config(4096)
        }
        .check()
        .is_err());
    }
    assert!(CacheConfig {
        max_entries: 0,
        ..config(4096)
    }
    .check()
    .is_err());
    CacheConfig::default().check().unwrap();

    let ctx = Arc::new(crate::Context::open_unchecked(std::path::Path::new("/dev/null")).unwrap());
    let pd = Pd::fake(&ctx, 1);
    assert!(matches!(
        RegCache::new(&pd, CacheConfig::default()),
        Err(Error::Mmap { .. })
    ));
    let odp = CacheConfig {
        mode: CacheMode::OnDemand,
        ..CacheConfig::default()
    };
    assert!(matches!(
        RegCache::new(&pd, odp),
        Err(Error::Invalid { .. })
    ));
}

#[test]
fn the_cache_is_shared_between_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RegCache>();
    send_sync::<CachedMr>();
}

/// Four threads look up random ranges of both classes while a fifth plays the driver and
/// revokes live regions: every guard covers its request with its class and rights and names a
/// registered region, the maps stay free of overlaps, and nothing is left registered at the end.
#[test]
fn concurrent_lookups_stay_consistent() {
    let (c, fake) = cache(CacheConfig {
        max_entries: 8,
        ..config(4096)
    });
    let done = Arc::new(AtomicBool::new(false));
    let revoker = {
        let (fake, done) = (fake.clone(), done.clone());
        thread::spawn(move || {
            let mut n = 0u64;
            while !done.load(Relaxed) {
                let victim = fake
                    .live
                    .lock()
                    .unwrap()
                    .iter()
                    .next()
                    .map(|(&k, &v)| (k, v));
                if let Some((key, (start, len, _))) = victim {
                    fake.page.revoke(key, start, len);
                    n += 1;
                }
                thread::sleep(Duration::from_micros(200));
            }
            n
        })
    };
    const ITERS: u64 = 20_000;
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let (c, fake) = (c.clone(), fake.clone());
            thread::spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15 ^ (t + 1);
                let mut next = move || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x
                };
                let mut held: Vec<CachedMr> = Vec::new();
                for i in 0..ITERS {
                    let r = next();
                    let addr = (r % 64) * 4096 + (r >> 8) % 4096;
                    let len = 1 + ((r >> 20) % 8192) as usize;
                    let access = match (r >> 40) % 4 {
                        0 => Access::NONE,
                        1 => Access::REMOTE_READ,
                        2 => LW,
                        _ => LW | Access::REMOTE_WRITE,
                    };
                    let m = rw(&c, addr, len, access);
                    assert!(m.contains(addr, len as u64));
                    assert!(m.access().contains(access));
                    assert_eq!(m.access().writes(), access.writes(), "its own class");
                    assert!(fake.live.lock().unwrap().contains_key(&m.lkey()));
                    if i % 3 == 0 {
                        held.push(m);
                        if held.len() > 3 {
                            held.remove(0);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, Relaxed);
    let revocations = revoker.join().unwrap();
    let s = c.stats();
    assert_eq!(s.hits + s.misses, 4 * ITERS);
    assert!(s.hits > 0 && s.misses > 0 && revocations > 0, "{s:?}");
    let mut entries = c.core.entries();
    entries.sort_by_key(|e| (e.0, e.1));
    for w in entries.windows(2) {
        assert!(w[0].0 != w[1].0 || w[0].2 <= w[1].1, "overlap: {w:?}");
    }
    drop(c);
    assert!(fake.live_keys().is_empty(), "everything deregistered");
}
