// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A registration cache: memory regions for whatever buffers a program hands to the device,
//! registered once and looked up afterwards without a system call.
//!
//! ```no_run
//! # fn main() -> qhca::Result<()> {
//! use std::sync::Arc;
//! use qhca::{Access, CacheConfig, Pd, RegCache};
//! let ctx = Arc::new(qhca::devices()?[0].open()?);
//! let pd = Pd::new(&ctx)?;
//! let cache = RegCache::new(&pd, CacheConfig::default())?;
//! let msg = b"hello".to_vec();
//! let mr = cache.get(msg.as_ptr(), msg.len(), Access::NONE)?; // a miss: REG_MR
//! let sge = mr.sge(msg.as_ptr() as u64, 5);
//! drop(mr); // the region stays cached
//! let again = cache.get(msg.as_ptr(), msg.len(), Access::NONE)?; // a hit: no system call
//! assert_eq!(again.lkey(), sge.lkey);
//! drop(msg); // fine: no borrow; were the memory unmapped, the driver would revoke the region first
//! # Ok(()) }
//! ```
//!
//! # Kept exact by the driver
//!
//! A cache must never hand out a key whose region no longer maps the memory the program now
//! has at those addresses (after `free` + `munmap` + a new `mmap`, say): the device would read
//! or write the old pages. MPI libraries and UCX keep their caches exact by hooking `malloc`,
//! `free`, `munmap` and friends, which misses every way of changing a mapping they did not hook.
//! Here the kernel does it: the cache registers *watched* regions ([`Pd::reg_watched_mr`]), the
//! driver's MMU interval notifier revokes a region before any change of its pages goes on
//! (whoever makes it: `munmap`, `mremap`, `madvise`, `mprotect`, `fork`, migration), and
//! publishes the key on the context's invalidation page ([`crate::InvalPage`]). Before each
//! lookup the cache loads the page's generation (one load from memory when nothing changed)
//! and drops the entries the driver revoked. A revoked key is dead in the device: a work
//! request that still names it completes in error and reaches no page.
//!
//! # How it works
//!
//! - Two classes of entries, in two maps: read-only ones (no write right) and writable ones.
//!   A request is served from, and merged into, its own class only, so a request without write
//!   rights never gets a key the device may write through. Within a class, entries never
//!   overlap; a hit is an entry covering the request with at least the requested rights.
//! - A hit takes a read lock, searches a `BTreeMap` and clones an `Arc`: no system call, and no
//!   lock that a miss holds across one.
//! - A miss widens the request to [`CacheConfig::granule`] (a page by default) and unites it
//!   with the entries of its class that it overlaps (their range and their rights), registers
//!   that with no lock held, and inserts it in place of the entries it covers. If part of the
//!   widened range is not mapped, it falls back to the request's own pages. Entries that only
//!   touch it stay apart: merging those too would grow one region over an arena of adjacent
//!   buffers, registering all of it again on every miss. A region may span several buffers
//!   (those sharing its pages or granules): when one of them is unmapped, the driver revokes
//!   only that one's pages (the requests in flight on the others complete), and the entry
//!   leaves the cache. Either way the revoked pages are uncharged and unpinned at once.
//! - The generation is read before each registration; when inserting, the revocations
//!   published since are checked for the new key, so a region revoked between its
//!   registration and its insertion is never inserted (the miss registers again).
//! - Entries are counted: [`CachedMr`] guards hold them. An entry that leaves the cache
//!   (replaced by a merge, evicted, revoked, flushed) is deregistered when its last guard goes;
//!   eviction and garbage collection never take an entry with a live guard. Forgetting a guard
//!   (`mem::forget`) only keeps its region registered.
//! - Limits: beyond [`CacheConfig::max_bytes`] or [`CacheConfig::max_entries`], unused entries
//!   are evicted least recently used first; [`RegCache::gc`] drops entries idle for
//!   [`CacheConfig::idle`] (misses run it too, now and then); a registration refused for
//!   `RLIMIT_MEMLOCK` (`ENOMEM`) gives back every unused entry and tries once more.
//!
//! # What is safe
//!
//! A region handed out may be larger than the request (the granule, merged neighbours) and carry
//! more rights (those of merged entries, of the same class). As for [`crate::OdpMr`], the only
//! concern is what the device may *write*: memory lifetime is not one, since the driver revokes
//! a region before its memory goes back to the system.
//!
//! - [`RegCache::get`] takes rights without writes (`NONE`, `REMOTE_READ`) and is safe: the
//!   device only reads. (With `REMOTE_READ`, any peer holding the rkey reads the whole covering
//!   region, larger than the request, and a request without remote rights may be served by a
//!   region that has `REMOTE_READ`: a disclosure decision, not a memory-safety one.)
//! - [`RegCache::get_raw`] takes any rights and is `unsafe`: see its `# Safety`.
//!
//! # When to use which mode
//!
//! - [`CacheMode::Pinned`] (the default): watched pinned regions. The fastest data path (the
//!   device never faults). Charges `RLIMIT_MEMLOCK` for what is cached. A region is revoked on
//!   any change of its pages, including `fork` (which write-protects private memory) and
//!   `mprotect`; the next lookup registers again. Needs a driver with the invalidation page.
//! - [`CacheMode::OnDemand`]: on-demand-paged regions ([`crate::OdpMr`]), nothing pinned or
//!   charged, never revoked (the device follows the page tables, so the cache is trivially
//!   exact and survives `munmap` and remapping), and the range need not be mapped when it is
//!   registered. But the device faults on the first access to each page (about half a
//!   millisecond each in the emulated device under TCG), and the device must support on-demand
//!   paging ([`crate::DeviceAttr::odp_caps`]).

mod engine;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use engine::{Backend, Core, Entry, Registration};

use crate::error::{Error, Result};
use crate::inval::{InvalPage, InvalPoll};
use crate::mem::PAGE_SIZE;
use crate::pd::{Access, Pd};
use crate::wqe::{region_contains, Sge};

/// What a [`RegCache`] registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CacheMode {
    /// Watched pinned regions ([`Pd::reg_watched_mr`]), revoked by the driver when their pages
    /// change.
    #[default]
    Pinned,
    /// On-demand-paged regions ([`Pd::reg_odp_mr`]), never revoked.
    OnDemand,
}

/// How a [`RegCache`] behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// What it registers (default [`CacheMode::Pinned`]).
    pub mode: CacheMode,
    /// Bytes registered beyond which unused entries are evicted (default 1 GiB).
    pub max_bytes: u64,
    /// Entries beyond which unused entries are evicted (default 4096; at least 1).
    pub max_entries: usize,
    /// The alignment a miss widens its range to: a power of two, at least [`PAGE_SIZE`]
    /// (default: a page). A wider one (UCX uses 64 KiB and more) means fewer registrations for
    /// small buffers close together, and more pinned memory that nobody asked for (in
    /// [`CacheMode::Pinned`]); neighbours whose widened ranges overlap share one region.
    pub granule: usize,
    /// How long an unused entry may go without a lookup before [`RegCache::gc`] drops it
    /// (default 30 s).
    pub idle: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            mode: CacheMode::Pinned,
            max_bytes: 1 << 30,
            max_entries: 4096,
            granule: PAGE_SIZE,
            idle: Duration::from_secs(30),
        }
    }
}

impl CacheConfig {
    fn check(&self) -> Result<()> {
        if !self.granule.is_power_of_two() || self.granule < PAGE_SIZE {
            return Err(Error::Invalid {
                what: format!(
                    "cache granule {}: not a power of two of at least a page",
                    self.granule
                ),
            });
        }
        if self.max_entries == 0 {
            return Err(Error::Invalid {
                what: "cache of at most 0 entries".into(),
            });
        }
        Ok(())
    }
}

/// What a [`RegCache`] did, and holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups served from the cache.
    pub hits: u64,
    /// Lookups that registered.
    pub misses: u64,
    /// Entries replaced by a registration that covers them (merged into it).
    pub merges: u64,
    /// Entries evicted for the limits.
    pub evictions: u64,
    /// Entries dropped because the driver revoked them (or may have: a flush).
    pub revoked: u64,
    /// Times everything was dropped: a revocation of everything (or an overflowed ring) on the
    /// invalidation page, [`RegCache::flush`], or a registration refused for `RLIMIT_MEMLOCK`.
    pub flushes: u64,
    /// Entries dropped by garbage collection.
    pub gc_dropped: u64,
    /// Entries now.
    pub entries: usize,
    /// Bytes they cover.
    pub bytes: u64,
    /// Entries with a live [`CachedMr`].
    pub in_use: usize,
}

/// A registration cache over one PD: see the [module documentation](self). Clones share it.
#[derive(Clone)]
pub struct RegCache {
    core: Arc<Core>,
}

impl fmt::Debug for RegCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the stats: reading them applies revocations, which may deregister regions.
        f.debug_struct("RegCache")
            .field("config", &self.core.config)
            .finish_non_exhaustive()
    }
}

impl RegCache {
    /// A cache that registers in `pd`. In [`CacheMode::Pinned`] it maps the context's
    /// invalidation page ([`crate::Context::inval_page`]) if nobody has yet.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad `config` or [`CacheMode::OnDemand`] on a device without
    /// on-demand paging; [`Error::Mmap`] if the invalidation page cannot be mapped (a driver
    /// without it: `EINVAL`).
    pub fn new(pd: &Pd, config: CacheConfig) -> Result<RegCache> {
        config.check()?;
        let page = match config.mode {
            CacheMode::Pinned => Some(pd.context().inval_page()?),
            CacheMode::OnDemand if !pd.context().attr().odp_caps.supported() => {
                return Err(Error::Invalid {
                    what: "an on-demand cache on a device without on-demand paging".into(),
                })
            }
            CacheMode::OnDemand => None,
        };
        let backend = DevBackend {
            pd: pd.clone(),
            mode: config.mode,
            page,
        };
        Ok(Self::with_backend(Arc::new(backend), config))
    }

    fn with_backend(backend: Arc<dyn Backend>, config: CacheConfig) -> RegCache {
        RegCache {
            core: Arc::new(Core::new(backend, config)),
        }
    }

    /// A region covering `[addr, addr + len)` for the device to read only (`access` without
    /// `LOCAL_WRITE`, `REMOTE_WRITE` or `REMOTE_ATOMIC`): from the cache, or registered now.
    /// The memory needs to be mapped (in [`CacheMode::Pinned`]), nothing else: it may be freed
    /// or unmapped at any time, even while the guard lives (its key then stops working).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a writable `access` (see [`RegCache::get_raw`]), a flag that is
    /// not a right, or an empty or wrapping range; the registration's errors (`EFAULT`: not
    /// mapped, `ENOMEM`: `RLIMIT_MEMLOCK`, `EAGAIN`: the range kept changing).
    pub fn get(&self, addr: *const u8, len: usize, access: Access) -> Result<CachedMr> {
        if access.writes() {
            return Err(Error::Invalid {
                what: "RegCache::get with a write right (the unsafe get_raw takes those)".into(),
            });
        }
        // SAFETY: no write right: `Core::get` asks for no promise then.
        unsafe { self.core.get(addr as u64, len, access) }
    }

    /// As [`RegCache::get`], with any rights.
    ///
    /// # Safety
    ///
    /// The cache keeps regions registered after their guards are gone, widens them and merges
    /// them with their neighbours (rights included): for as long as the cache or any guard lives,
    /// the device may write, at any moment, any byte that this process has mapped writable in
    /// the covering region of any writable request made to this cache — `[addr, addr + len)`
    /// widened to [`CacheConfig::granule`] and united with the writable entries it overlaps —
    /// where this process's own work requests direct it (`LOCAL_WRITE`), and, if any writable
    /// request to this cache asked for `REMOTE_WRITE` or `REMOTE_ATOMIC`, where any peer holding
    /// one of its rkeys directs it. The caller must ensure that no such write lands on bytes that
    /// Rust code references (`&`/`&mut`, including those inside live values), or reads or writes
    /// with non-volatile accesses concurrently: treat that memory as another thread stores to it
    /// through raw pointers. This covers memory that is freed and reused without being unmapped.
    /// For `LOCAL_WRITE` alone it is enough that this process's work requests point only at such
    /// bytes and that the keys are not handed to peers; with remote rights, keep the buffers in
    /// memory set aside for the device (an arena of whole granules).
    ///
    /// Nothing is promised about lifetime: the memory may be freed, unmapped or remapped at any
    /// time (the driver revokes the region first).
    pub unsafe fn get_raw(&self, addr: *mut u8, len: usize, access: Access) -> Result<CachedMr> {
        // SAFETY: the caller's promise is `Core::get`'s.
        unsafe { self.core.get(addr as u64, len, access) }
    }

    /// Drops the unused entries that were not looked up for [`CacheConfig::idle`]; returns how
    /// many. Misses run it too, at most every `idle / 2`.
    pub fn gc(&self) -> usize {
        self.core.gc()
    }

    /// Drops every unused entry; returns how many.
    pub fn flush(&self) -> usize {
        self.core.flush()
    }

    /// What it did and holds (after applying the driver's revocations).
    pub fn stats(&self) -> CacheStats {
        self.core.stats()
    }

    /// Its configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.core.config
    }
}

/// A region from a [`RegCache`], held: the cache does not deregister it while this guard (or a
/// clone) lives. It describes the whole covering region, which may be larger than the request
/// and have more rights.
#[derive(Clone)]
pub struct CachedMr {
    entry: Arc<Entry>,
}

impl fmt::Debug for CachedMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedMr")
            .field("lkey", &self.lkey())
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("access", &self.access())
            .finish()
    }
}

impl CachedMr {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.entry.lkey
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.entry.rkey
    }

    /// The covering region's first byte.
    pub fn addr(&self) -> u64 {
        self.entry.start
    }

    /// The covering region's length.
    pub fn len(&self) -> usize {
        (self.entry.end - self.entry.start) as usize
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.entry.end == self.entry.start
    }

    /// The covering region's rights (at least those asked for).
    pub fn access(&self) -> Access {
        self.entry.access
    }

    /// True if `[addr, addr + len)` is inside the covering region.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        region_contains(self.addr(), self.len() as u64, addr, len)
    }

    /// An SGE of `len` bytes at the virtual address `addr`. Panics if outside the covering
    /// region.
    pub fn sge(&self, addr: u64, len: u32) -> Sge {
        let inside = self.contains(addr, u64::from(len));
        let region = (self.addr(), self.len() as u64);
        Sge::in_region(inside, "cached region", region, self.entry.lkey, addr, len)
    }

    /// True if the driver revoked the region (its memory changed): its key no longer works;
    /// look the buffer up again. Reads the invalidation page (one load when nothing changed).
    /// After an overflow of the page's ring every region then cached counts as revoked.
    pub fn is_revoked(&self) -> bool {
        if !self
            .entry
            .revoked
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            if let Some(core) = self.entry.core.upgrade() {
                core.sync();
            }
        }
        self.entry
            .revoked
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The device: registrations in a PD, revocations from the context's invalidation page.
struct DevBackend {
    pd: Pd,
    mode: CacheMode,
    /// `Some` in [`CacheMode::Pinned`].
    page: Option<Arc<InvalPage>>,
}

impl Backend for DevBackend {
    unsafe fn register(&self, start: u64, len: u64, access: Access) -> Result<Registration> {
        let len = usize::try_from(len).map_err(|_| Error::Invalid {
            what: format!("cached region of {len} bytes"),
        })?;
        let (lkey, rkey, handle): (u32, u32, Box<dyn Send + Sync>) = match (self.mode, access) {
            (CacheMode::Pinned, a) if a.writes() => {
                // SAFETY: a write right: the caller holds `get_raw`'s promise for the range.
                let mr = unsafe { self.pd.reg_watched_mr_raw(start as *mut u8, len, a)? };
                (mr.lkey(), mr.rkey(), Box::new(mr))
            }
            (CacheMode::Pinned, a) => {
                let mr = self.pd.reg_watched_mr(start as *const u8, len, a)?;
                (mr.lkey(), mr.rkey(), Box::new(mr))
            }
            (CacheMode::OnDemand, a) if a.writes() => {
                // SAFETY: as above.
                let mr = unsafe { self.pd.reg_odp_mr_raw(start as *mut u8, len, a)? };
                (mr.lkey(), mr.rkey(), Box::new(mr))
            }
            (CacheMode::OnDemand, a) => {
                let mr = self.pd.reg_odp_mr(start as *const u8, len, a)?;
                (mr.lkey(), mr.rkey(), Box::new(mr))
            }
        };
        Ok(Registration { lkey, rkey, handle })
    }

    fn generation(&self) -> u64 {
        self.page.as_ref().map_or(0, |p| p.generation())
    }

    fn poll(&self, seen: u64) -> InvalPoll {
        self.page
            .as_ref()
            .map_or(InvalPoll::Nothing, |p| p.poll(seen))
    }
}
