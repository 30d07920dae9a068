// SPDX-License-Identifier: GPL-2.0

//! Watched regions and the invalidation page (`qhca-abi.h`, "The invalidation page"): what makes
//! a registration cache in user space exact without malloc or munmap hooks.
//!
//! A watched region ([`WatchedMr`], `QHCA_ACCESS_WATCHED`) is a pinned region plus an mmu
//! interval notifier over the pages it covers. A change of those mappings (`munmap`, `mremap`,
//! `madvise(MADV_DONTNEED)`, `mprotect`, `fork`, a new mapping at the same address) revokes
//! the pages it touches, from inside the kernel's `invalidate_range_start`, before the change
//! goes on, and the key is published (once) in the context's invalidation page ([`InvalPage`])
//! that the process maps read-only. All of the region's pages: `DEREG_MR` (the device forgets
//! the key, so no later work request reaches the old pages), then the pages are unpinned (and
//! `RLIMIT_MEMLOCK` uncharged) by the device's worker, since unpinning a dirty page locks it and
//! the invalidation may run under that very page's lock; the process keeps the key as a handle
//! until `DEREG_MR`, which then has nothing to ask the device. Some of them:
//! `QHCA_CMD_REVOKE_PAGES` for those only, so that requests in flight on the rest (another
//! buffer a cache entry spans) complete; those pages are taken out of the region (uncharged at
//! once: the region's memory is DMA-mapped page by page for this) and unmapped and unpinned by
//! the worker. A device that does not answer is stopped.
//!
//! Registration cannot miss a change: the notifier is inserted first, its sequence read, then
//! the pages are pinned, and the region goes live (under its lock, the lock its invalidations
//! take) only if no invalidation began since; else `REG_MR` fails with `EAGAIN`.
//!
//! Locking is that of ODP regions (see [`crate::odp`]): under a region's lock nothing allocates
//! memory that may reclaim, takes `mmap_lock`, the bound-device lock or a context's objects;
//! commands go through [`QhcaDevice::exec_no_report`]. The order is: bound-device lock, a context's
//! objects, a region's lock, then the command queue, the context's invalidation page and the
//! worker's queue.

use crate::{
    cmdq::Cmd,
    context::Ctx,
    device::QhcaDevice,
    pagelist::PageList,
    shim::{self, Invalidation, NotifierOwner, OdpNotifier, TakenPage, Umem},
    uapi,
};
use core::ptr::addr_of_mut;
use kernel::{
    device::{Bound, Device},
    ffi::c_void,
    mm::virt::VmaNew,
    new_mutex, new_work,
    page::Page,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed, Release},
        barrier::{smp_mb, Write},
        Arc, ArcBorrow, Mutex, SetOnce,
    },
    workqueue::{Work, WorkItem},
};

/// Watched regions registered and not yet deregistered, over every device (debugfs
/// `watched_regions`): what a registration cache holds.
pub(crate) static WATCHED: Atomic<i64> = Atomic::new(0);
/// Watched regions revoked by an invalidation, over every device (debugfs `watch_revocations`).
pub(crate) static REVOCATIONS: Atomic<u64> = Atomic::new(0);

const RING: u64 = uapi::QHCA_INVAL_RING_ENTRIES as u64;

/// A context's invalidation page: written only here, mapped read-only by its process.
#[pin_data]
pub(crate) struct InvalPage {
    page: Page,
    /// Serialises writers.
    #[pin]
    lock: Mutex<()>,
}

/// A `u64` field of the page, as an atomic.
///
/// # Safety
///
/// `p` points at a field of a live invalidation page, 8-byte aligned.
unsafe fn field<'a>(p: *mut u64) -> &'a Atomic<u64> {
    // SAFETY: The caller's promise; every access to the page's fields from the kernel goes
    // through these atomics (user space only reads).
    unsafe { Atomic::from_ptr(p) }
}

impl InvalPage {
    pub(crate) fn new() -> Result<impl PinInit<Self, Error>> {
        let page = Page::alloc_page(GFP_KERNEL | __GFP_ZERO)?;
        let p = shim::page_address(&page).cast::<uapi::qhca_inval_page>();
        // SAFETY: `p` is the page just allocated (4 KiB, the size of `qhca_inval_page`, whose
        // layout the uapi tests check); nobody else has it yet.
        unsafe { (*p).ring_entries = uapi::QHCA_INVAL_RING_ENTRIES };
        Ok(try_pin_init!(Self {
            page,
            lock <- new_mutex!(()),
        }? Error))
    }

    fn raw(&self) -> *mut uapi::qhca_inval_page {
        shim::page_address(&self.page).cast()
    }

    /// Publishes the revocation of `key` (registered over `len` bytes at `start`), as the ABI's
    /// writer protocol says: the entry's `seq` 0, the fields, `seq`, then `generation`.
    pub(crate) fn publish(&self, key: u32, start: u64, len: u64) {
        let _guard = self.lock.lock();
        let p = self.raw();
        // SAFETY: `p` is our live page, laid out as `qhca_inval_page` (8-byte aligned fields);
        // the same holds for the projections below, where `idx` < the ring's length.
        let generation = unsafe { field(addr_of_mut!((*p).generation)) };
        let g = generation.load(Relaxed) + 1;
        let idx = ((g - 1) % RING) as usize;
        // SAFETY: See above.
        let e = unsafe { addr_of_mut!((*p).ring[idx]) };
        // SAFETY: See above.
        let seq = unsafe { field(addr_of_mut!((*e).seq)) };
        seq.store(0, Relaxed);
        smp_mb(Write);
        // SAFETY: See above.
        unsafe {
            field(addr_of_mut!((*e).start)).store(start, Relaxed);
            field(addr_of_mut!((*e).length)).store(len, Relaxed);
            Atomic::<u32>::from_ptr(addr_of_mut!((*e).key)).store(key, Relaxed);
        }
        seq.store(g, Release);
        generation.store(g, Release);
    }

    /// Publishes that every watched region of the context is gone (the device stopped).
    pub(crate) fn flush(&self) {
        let _guard = self.lock.lock();
        let p = self.raw();
        // SAFETY: As in `publish`.
        let (generation, flush) = unsafe {
            (
                field(addr_of_mut!((*p).generation)),
                field(addr_of_mut!((*p).flush_generation)),
            )
        };
        let g = generation.load(Relaxed) + 1;
        flush.store(g, Relaxed);
        generation.store(g, Release);
    }

    /// Maps the page into `vma` (its mmap entry, checked by the caller): read-only
    /// for good, never copied into a child, never grown. The PTE is inserted now and holds its
    /// own reference to the page, so the page outlives the context if the mapping does.
    ///
    /// # Errors
    ///
    /// `EACCES` for a writable mapping, what inserting the page returns.
    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        if vma.writable() {
            return Err(EACCES);
        }
        vma.try_clear_maywrite()?;
        vma.try_clear_mayexec()?;
        vma.set_dontcopy();
        vma.set_dontexpand();
        vma.set_mixedmap().vm_insert_page(vma.start(), &self.page)
    }
}

struct State {
    /// Registered in the device and not revoked whole. While set, the context's objects hold an
    /// `Arc` of the region (so an invalidation may take one).
    live: bool,
    /// Its key was published (once is enough: the cache drops the entry).
    published: bool,
    /// The pinned pages (DMA-mapped one by one), until deregistration or the worker after a
    /// revocation of all of them.
    mem: Option<Umem>,
    /// Pages an invalidation took out of `mem`, for the worker to unmap and unpin. Room for
    /// every page of the region, reserved beforehand: an invalidation does not allocate.
    taken: KVec<TakenPage>,
    /// The pages may have been written (`LOCAL_WRITE`): unpinned dirty.
    writable: bool,
}

/// A watched pinned region: see the module documentation.
///
/// # Invariants
///
/// Once `notifier` is set, the notifier's owner is this region, at its address in its `Arc`;
/// the notifier is removed ([`WatchedMr::close`], or dropping it) before that memory is freed.
#[pin_data(PinnedDrop)]
pub(crate) struct WatchedMr {
    /// Declared first: dropped (removed) before the rest.
    notifier: SetOnce<OdpNotifier>,
    key: Atomic<u32>,
    uar: u32,
    /// The region as registered.
    addr: u64,
    len: u64,
    /// Pages it spans.
    npages: usize,
    /// Counted in [`WATCHED`] (from the notifier's insertion to deregistration or drop).
    counted: Atomic<bool>,
    ctx: Arc<Ctx>,
    dev: Arc<QhcaDevice>,
    #[pin]
    state: Mutex<State>,
    #[pin]
    reap: Work<WatchedMr>,
}

kernel::impl_has_work! {
    impl HasWork<Self> for WatchedMr { self.reap }
}

impl WorkItem for WatchedMr {
    type Pointer = Arc<WatchedMr>;

    /// After a revocation: unmaps and unpins what it took away, outside the invalidation
    /// (unpinning a dirty page locks it) and outside the region's lock.
    fn run(this: Arc<WatchedMr>) {
        // Room for the next revocations, allocated before the lock. Without it the pages wait
        // for deregistration.
        let Ok(fresh) = KVec::with_capacity(this.npages, GFP_KERNEL) else {
            return;
        };
        let (mem, taken, writable) = {
            let mut st = this.state.lock();
            let taken = core::mem::replace(&mut st.taken, fresh);
            let mem = if st.live { None } else { st.mem.take() };
            (mem, taken, st.writable)
        };
        // SAFETY: these pages were taken out of this region's memory, mapped for this device
        // (bound: the worker is drained before unbind ends), and the device no longer reaches
        // them (REVOKE_PAGES completed, or the device is stopped); each is dropped only here.
        unsafe { shim::drop_taken(this.dev.dev(), &taken, writable) };
        drop(mem);
    }
}

impl WatchedMr {
    /// Starts watching the pages of `[addr, addr + len)` of the calling process for a new
    /// region. Called with no lock held (inserting the notifier may take `mmap_lock`).
    ///
    /// # Errors
    ///
    /// `ENOMEM`, the notifier's errors (`EINVAL` for a range outside the address space).
    pub(crate) fn new(
        dev: &Arc<QhcaDevice>,
        ctx: &Arc<Ctx>,
        uar: u32,
        addr: u64,
        len: u64,
    ) -> Result<Arc<Self>> {
        let end = addr.checked_add(len).ok_or(EINVAL)?;
        let page = u64::from(uapi::QHCA_PAGE_SIZE);
        let start = addr & !(page - 1);
        let end = end.checked_next_multiple_of(page).ok_or(EINVAL)?;
        let npages = usize::try_from((end - start) / page).map_err(|_| EINVAL)?;
        let taken = KVec::with_capacity(npages, GFP_KERNEL)?;
        let mr = Arc::pin_init(
            try_pin_init!(Self {
                notifier: SetOnce::new(),
                key: Atomic::new(0),
                uar,
                addr,
                len,
                npages,
                counted: Atomic::new(false),
                ctx: ctx.clone(),
                dev: dev.clone(),
                state <- new_mutex!(State {
                    live: false,
                    published: false,
                    mem: None,
                    taken,
                    writable: false,
                }),
                reap <- new_work!("qhca-watch"),
            }? Error),
            GFP_KERNEL,
        )?;
        // SAFETY: The owner is `mr`, at its final address inside the `Arc`, a `WatchedMr`; the
        // notifier lives in `mr.notifier` and is removed before `mr` is freed (type invariant:
        // `close`, or the field dropped first).
        let n = unsafe {
            OdpNotifier::new(
                start,
                end - start,
                Arc::as_ptr(&mr).cast::<c_void>(),
                NotifierOwner::Watch,
            )
        }?;
        // INVARIANT: the owner just registered is `mr`.
        WATCHED.fetch_add(1, Relaxed);
        mr.counted.store(true, Relaxed);
        mr.notifier.populate(n);
        Ok(mr)
    }

    /// The sequence that [`WatchedMr::register`] checks: read before the pages are pinned.
    pub(crate) fn read_begin(&self) -> Result<kernel::ffi::c_ulong> {
        Ok(self.notifier.as_ref().ok_or(EINVAL)?.read_begin())
    }

    /// Puts the region in the device over `mem` (pinned after [`WatchedMr::read_begin`]
    /// returned `seq`, and DMA-mapped), if no invalidation began since; then it is live. The
    /// caller holds the bound-device lock and the context's objects, and pushes the region into
    /// them (room reserved) once this succeeded.
    ///
    /// # Errors
    ///
    /// `EAGAIN` if the range changed since `seq` (nothing registered); what REG_MR returns.
    pub(crate) fn register(
        &self,
        bound: &Device<Bound>,
        pdn: u32,
        access: u32,
        mem: Umem,
        seq: kernel::ffi::c_ulong,
    ) -> Result<u32> {
        let n = self.notifier.as_ref().ok_or(EINVAL)?;
        // Allocates: before the region's lock.
        let list = PageList::new(bound, &mem)?;
        let res = {
            let mut st = self.state.lock();
            if n.retry(seq) {
                Err(EAGAIN)
            } else {
                let args = uapi::qhca_cmd_reg_mr {
                    uar: self.uar.to_le(),
                    pdn: pdn.to_le(),
                    iova: self.addr.to_le(),
                    length: self.len.to_le(),
                    access: access.to_le(),
                    npages: list.npages().to_le(),
                    pages_addr: list.dma_address().to_le(),
                };
                let cmd = Cmd::new(uapi::QHCA_CMD_REG_MR).input_struct(&args);
                let res = self.dev.exec_no_report(cmd).and_then(|out| {
                    u32::try_from(out.data[0]).map_err(|_| {
                        dev_err!(
                            self.dev.dev(),
                            "device returned bad key {:#x}\n",
                            out.data[0]
                        );
                        self.dev.stop_no_report();
                        EIO
                    })
                });
                if let Ok(key) = res {
                    self.key.store(key, Relaxed);
                    st.live = true;
                    st.mem = Some(mem);
                    st.writable = access & uapi::QHCA_ACCESS_LOCAL_WRITE != 0;
                }
                res
            }
        };
        self.dev.check_death();
        res
    }

    /// The region's key (0 until registered).
    pub(crate) fn key(&self) -> u32 {
        self.key.load(Relaxed)
    }

    /// The notifier's callback. Returns false only when it may not sleep (the kernel then
    /// retries in a context that may).
    fn invalidate(&self, inv: &Invalidation, blockable: bool) -> bool {
        if !blockable {
            return false;
        }
        let mut st = self.state.lock();
        inv.set_seq();
        // The region's pages: page-list entry k is the page at `base + k * PAGE`.
        let page = u64::from(uapi::QHCA_PAGE_SIZE);
        let base = self.addr & !(page - 1);
        let npages = self.npages as u64;
        let end = base + npages * page;
        if !st.live || inv.end <= base || inv.start >= end {
            return true;
        }
        let first = (inv.start.max(base) - base) / page;
        let count = (inv.end.min(end) - base).div_ceil(page) - first;
        // Some pages: only they are revoked, the rest of the region serves the requests in
        // flight (a cache entry may span several buffers); all of them: the region goes.
        let whole = count == npages;
        let dev = &*self.dev;
        let was_stopped = dev.is_stopped();
        if !was_stopped {
            let cmd = if whole {
                Cmd::new(uapi::QHCA_CMD_DEREG_MR)
                    .input(0, self.uar.into())
                    .input(1, self.key().into())
            } else {
                Cmd::new(uapi::QHCA_CMD_REVOKE_PAGES)
                    .input(0, self.uar.into())
                    .input(1, self.key().into())
                    .input(2, first)
                    .input(3, count)
            };
            if let Err(e) = dev.exec_no_report(cmd) {
                // The device may still use the pages: stop it before they go.
                dev_err!(
                    dev.dev(),
                    "revoking watched key {:#x} failed ({:?}); stopping the device\n",
                    self.key(),
                    e
                );
                dev.stop_no_report();
            }
        }
        if !st.published {
            st.published = true;
            REVOCATIONS.fetch_add(1, Relaxed);
            self.ctx.inval.publish(self.key(), self.addr, self.len);
        }
        // SAFETY: `self` is the owner of an inserted notifier, at its address in its `Arc`
        // (`Arc::as_ptr`, type invariant); `st.live` is set, under this lock, so the context's
        // objects hold an `Arc` of it, which only `close` (which takes this lock first) lets go of:
        // the count stays above zero while the borrow lives.
        let this: Arc<Self> = unsafe { ArcBorrow::from_raw(self) }.into();
        if whole || dev.is_stopped() {
            st.live = false;
        } else {
            // Those pages only: uncharged now, unmapped and unpinned by the worker.
            let State { mem, taken, .. } = &mut *st;
            if let Some(mem) = mem.as_mut() {
                // Cannot fail: `taken` has room for every page of the region, each taken once.
                let _ = mem.take(first as usize, count as usize, taken);
            }
        }
        drop(st);
        // Unpinned by the worker; without one (the device is shut down), at deregistration.
        // (`this` is not the last reference: `close` waits for this callback before the
        // context's objects let go of theirs.)
        let _ = dev.odp.with_queue(|q| q.enqueue(this));
        if !was_stopped && dev.is_stopped() {
            dev.odp.report_death_later(&self.dev);
        }
        true
    }

    /// Deregisters the region: `DEREG_MR` unless it was revoked (or `alive` is false: the
    /// device is stopped and forgot it), then the pages are unpinned and the notifier removed.
    /// The caller holds the bound-device lock and the context's objects, not this region's lock.
    ///
    /// # Errors
    ///
    /// What `DEREG_MR` returned while the device stays alive: the region is then left as it
    /// was (registered, watched, pinned).
    pub(crate) fn close(&self, dev: &QhcaDevice, alive: bool) -> Result {
        let res = {
            let mut st = self.state.lock();
            let res = if !st.live || !alive || dev.is_stopped() {
                Ok(())
            } else {
                crate::odp::dereg_locked(dev, self.uar, self.key())
            };
            if res.is_ok() {
                st.live = false;
            }
            res.map(|()| {
                let taken = core::mem::take(&mut st.taken);
                (st.mem.take(), taken, st.writable)
            })
        };
        dev.check_death();
        let (mem, taken, writable) = res?;
        // SAFETY: pages taken out of this region's memory, mapped for this device (bound: the
        // caller holds the bound-device lock), which no longer reaches them (deregistered, or
        // stopped); taken out of the state, so dropped only here.
        unsafe { shim::drop_taken(dev.dev(), &taken, writable) };
        drop(mem);
        if let Some(n) = self.notifier.as_ref() {
            n.remove();
        }
        // Deregistered now, even if the worker still holds the region for a moment.
        self.uncount();
        Ok(())
    }

    fn uncount(&self) {
        if self.counted.xchg(false, Relaxed) {
            WATCHED.fetch_sub(1, Relaxed);
        }
    }
}

#[pinned_drop]
impl PinnedDrop for WatchedMr {
    fn drop(self: Pin<&mut Self>) {
        self.uncount();
    }
}

/// The notifier's callback (`qhca_shim.c`, `qhca_watch_invalidate`).
///
/// # Safety
///
/// `owner` is the owner given to [`OdpNotifier::new`] with [`NotifierOwner::Watch`] (a
/// `WatchedMr`, alive while the notifier is inserted), `o` the notifier the callback runs for,
/// and `cur_seq` its sequence.
#[no_mangle]
unsafe extern "C" fn qhca_rust_watch_invalidate(
    owner: *const c_void,
    o: *mut shim::QhcaOdp,
    start: u64,
    end: u64,
    cur_seq: kernel::ffi::c_ulong,
    blockable: bool,
) -> bool {
    // SAFETY: By the type invariant of `WatchedMr`, the owner of an inserted notifier is a live
    // `WatchedMr` (the notifier is removed before it is freed), and the callback runs only
    // while the notifier is inserted.
    let mr = unsafe { &*owner.cast::<WatchedMr>() };
    // SAFETY: `o` and `cur_seq` are the callback's own (caller's promise); `inv` does not
    // outlive this call.
    let inv = unsafe { Invalidation::new(o, start, end, cur_seq) };
    mr.invalidate(&inv, blockable)
}
