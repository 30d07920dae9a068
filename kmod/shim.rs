// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers around `qhca_shim.c`: the only place this crate calls into it.

use core::ptr::NonNull;
use kernel::{
    bindings,
    device::{Bound, Device},
    dma::CoherentBox,
    error::to_result,
    pci,
    prelude::*,
};

// Declared in `qhca_shim.h`. The pointers are opaque here; `improper_ctypes` only objects to some
// bindgen structs deep inside them having no fields.
#[allow(improper_ctypes)]
extern "C" {
    fn qhca_shim_uapi_defs() -> *const bindings::uapi_definition;
    fn qhca_shim_rdma_mmap_io(
        ucontext: *mut bindings::ib_ucontext,
        vma: *mut bindings::vm_area_struct,
        phys: u64,
        len: c_ulong,
        entry: *mut bindings::rdma_user_mmap_entry,
    ) -> c_int;
    fn qhca_shim_clear_master(pdev: *mut bindings::pci_dev);
    fn qhca_shim_pinned_pages() -> c_long;
    fn qhca_shim_umem_pin(addr: u64, len: u64, writable: bool, err: *mut c_int) -> *mut QhcaUmem;
    fn qhca_shim_umem_map(u: *mut QhcaUmem, dev: *mut bindings::device) -> c_int;
    fn qhca_shim_umem_npages(u: *const QhcaUmem) -> c_ulong;
    fn qhca_shim_umem_fill(
        u: *const QhcaUmem,
        pl: *const *mut u64,
        npl: c_ulong,
        per: c_ulong,
    ) -> c_ulong;
    fn qhca_shim_umem_release(u: *mut QhcaUmem);
    fn qhca_shim_umem_map_pages(u: *mut QhcaUmem, dev: *mut bindings::device) -> c_int;
    fn qhca_shim_umem_take(
        u: *mut QhcaUmem,
        first: c_ulong,
        count: c_ulong,
        out: *mut TakenPage,
    ) -> c_ulong;
    fn qhca_shim_umem_drop(
        dev: *mut bindings::device,
        pages: *const TakenPage,
        n: c_ulong,
        dirty: bool,
    );
    fn qhca_shim_odp_new(
        start: u64,
        len: u64,
        owner: *const c_void,
        watch: bool,
        err: *mut c_int,
    ) -> *mut QhcaOdp;
    fn qhca_shim_odp_read_begin(o: *mut QhcaOdp) -> c_ulong;
    fn qhca_shim_page_address(page: *mut bindings::page) -> *mut c_void;
    fn qhca_shim_odp_remove(o: *mut QhcaOdp);
    fn qhca_shim_odp_free(o: *mut QhcaOdp);
    fn qhca_shim_odp_set_seq(o: *mut QhcaOdp, seq: c_ulong);
    fn qhca_shim_odp_retry(o: *mut QhcaOdp, seq: c_ulong) -> bool;
    fn qhca_shim_odp_fault(
        o: *mut QhcaOdp,
        start: u64,
        npages: c_ulong,
        write: bool,
        out: *mut u64,
        seq: *mut c_ulong,
    ) -> c_int;
    fn qhca_shim_odp_dma_map(
        dev: *mut bindings::device,
        pfn: u64,
        writable: bool,
        dma: *mut u64,
    ) -> c_int;
    fn qhca_shim_odp_dma_unmap(dev: *mut bindings::device, dma: u64, pfn: u64, dirty: bool);
    fn qhca_shim_task_size() -> u64;
    fn qhca_shim_fatal_signal_pending() -> bool;
    fn qhca_shim_wq_new(instance: c_uint) -> *mut bindings::workqueue_struct;
    fn qhca_shim_wq_new_unbound(name: *const c_char) -> *mut bindings::workqueue_struct;
    fn qhca_shim_wq_destroy(wq: *mut bindings::workqueue_struct);
}

/// `struct qhca_umem` of `qhca_shim.c`, opaque here.
#[repr(C)]
pub(crate) struct QhcaUmem {
    _opaque: [u8; 0],
}

/// `struct qhca_odp` of `qhca_shim.c`, opaque here.
#[repr(C)]
pub(crate) struct QhcaOdp {
    _opaque: [u8; 0],
}

/// The driver's methods of the RDMA core's ioctl interface (`qhca_uverbs.c`), for
/// `ib_device.driver_def`: a static table.
pub(crate) fn uapi_defs() -> *const bindings::uapi_definition {
    // SAFETY: Returns the address of a static table; no preconditions.
    unsafe { qhca_shim_uapi_defs() }
}

/// Pages pinned by every qhca context right now.
pub(crate) fn pinned_pages() -> i64 {
    // SAFETY: Reads an atomic counter; no preconditions.
    (unsafe { qhca_shim_pinned_pages() }) as i64
}

/// Turns bus mastering off: the device can do no more DMA.
pub(crate) fn clear_master<Ctx: kernel::device::DeviceContext>(pdev: &pci::Device<Ctx>) {
    // `pci::Device` is `#[repr(transparent)]` over `Opaque<bindings::pci_dev>` (its `as_raw` is
    // private to the kernel crate).
    let raw = core::ptr::from_ref(pdev)
        .cast::<bindings::pci_dev>()
        .cast_mut();
    // SAFETY: `raw` is a live `struct pci_dev` for the duration of the call (we hold a reference);
    // `pci_clear_master` only writes the command register in config space.
    unsafe { qhca_shim_clear_master(raw) }
}

/// User memory pinned for the life of a verbs object, then DMA-mapped for the device.
///
/// # Invariants
///
/// `self.0` came from a successful `qhca_shim_umem_pin` and is released exactly once, in `Drop`.
pub(crate) struct Umem(NonNull<QhcaUmem>);

impl Umem {
    /// Pins `len` bytes of the calling process's memory at `addr` (FOLL_LONGTERM, accounted to its
    /// RLIMIT_MEMLOCK before anything is allocated). Touches no device; may take as long as user
    /// space makes a fault take, so no device-wide lock may be held.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an empty or wrapping range, `EFAULT` for an unmapped one, `ENOMEM` over the
    /// memlock limit, `EPERM` if the process may not lock memory.
    pub(crate) fn pin(addr: u64, len: u64, writable: bool) -> Result<Self> {
        let mut err: c_int = 0;
        // SAFETY: The shim validates `addr`/`len` and only touches the current process's memory
        // through the GUP API.
        let u = unsafe { qhca_shim_umem_pin(addr, len, writable, &mut err) };
        // INVARIANT: a non-null return is a live umem that we now own.
        NonNull::new(u)
            .map(Self)
            .ok_or_else(|| Error::from_errno(err))
    }

    /// DMA-maps the pages for `dev` one by one (once, instead of [`Umem::map`]), so that pages
    /// can be taken out on their own later ([`Umem::take`]).
    pub(crate) fn map_pages(&mut self, dev: &Device<Bound>) -> Result {
        // SAFETY: `self.0` is live (type invariant) and exclusively ours (`&mut self`); the
        // device is bound, and the shim references it for as long as the mappings exist.
        kernel::error::to_result(unsafe {
            qhca_shim_umem_map_pages(self.0.as_ptr(), raw_device(dev))
        })
    }

    /// Takes pages `[first, first + count)` (those still in it) out of a region mapped with
    /// [`Umem::map_pages`], into `out`'s spare room, which must hold `count`; they are no
    /// longer counted or charged as pinned. Allocates nothing and takes no lock: it may run in
    /// an invalidation. Hand them to [`drop_taken`] once the device cannot reach them.
    ///
    /// # Errors
    ///
    /// `ENOSPC` if `out` has less spare room than `count`.
    pub(crate) fn take(&mut self, first: usize, count: usize, out: &mut KVec<TakenPage>) -> Result {
        if out.capacity() - out.len() < count {
            return Err(ENOSPC);
        }
        // SAFETY: `self.0` is live and exclusively ours (type invariant, `&mut self`); the shim
        // writes at most `count` entries from the end of `out`'s initialised part, within its
        // capacity (checked above), and returns how many.
        let n = unsafe {
            qhca_shim_umem_take(
                self.0.as_ptr(),
                first as c_ulong,
                count as c_ulong,
                out.as_mut_ptr().add(out.len()),
            )
        };
        // SAFETY: the shim initialised `n <= count` entries after the old length, within the
        // capacity.
        unsafe { out.inc_len(n as usize) };
        Ok(())
    }

    /// DMA-maps the pages for `dev` (once).
    pub(crate) fn map(&mut self, dev: &Device<Bound>) -> Result {
        // `device::Device` is `#[repr(transparent)]` over `Opaque<bindings::device>`.
        let raw = core::ptr::from_ref(dev)
            .cast::<bindings::device>()
            .cast_mut();
        // SAFETY: `self.0` is live (type invariant) and exclusively ours (`&mut self`); `raw` is a
        // bound device, which the shim references for as long as the mapping exists.
        kernel::error::to_result(unsafe { qhca_shim_umem_map(self.0.as_ptr(), raw) })
    }

    /// Number of 4 KiB pages covered.
    pub(crate) fn npages(&self) -> usize {
        // SAFETY: `self.0` is live (type invariant).
        unsafe { qhca_shim_umem_npages(self.0.as_ptr()) as usize }
    }

    /// Writes the device address of every page, little-endian, into `pl`: page `k` into
    /// `pl[k / per][k % per]`. Every list holds `per` entries but the last, which holds the rest.
    ///
    /// # Errors
    ///
    /// `EINVAL` if the lists do not have that shape, `EIO` if the region is not mapped.
    pub(crate) fn fill(&self, pl: &mut [CoherentBox<[u64]>], per: usize) -> Result {
        let n = self.npages();
        if per == 0 || pl.len() != n.div_ceil(per) {
            return Err(EINVAL);
        }
        let mut ptrs = KVec::with_capacity(pl.len(), GFP_KERNEL)?;
        for (i, list) in pl.iter_mut().enumerate() {
            if list.len() != per.min(n - i * per) {
                return Err(EINVAL);
            }
            ptrs.push(list.as_mut_ptr(), GFP_KERNEL)?;
        }
        // SAFETY:
        // - `self.0` is live (type invariant);
        // - `ptrs[i]` points at `pl[i]`, CPU-owned DMA memory (`CoherentBox`: the device does not
        //   know its address yet) that we borrow exclusively for the call, and the shim writes
        //   entry `k < npages` to `ptrs[k / per][k % per]`, which the shape checked above keeps in
        //   bounds.
        let k = unsafe {
            qhca_shim_umem_fill(
                self.0.as_ptr(),
                ptrs.as_ptr(),
                pl.len() as c_ulong,
                per as c_ulong,
            )
        };
        if k as usize == n {
            Ok(())
        } else {
            Err(EIO)
        }
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: `self.0` is live and released only here (type invariant).
        unsafe { qhca_shim_umem_release(self.0.as_ptr()) }
    }
}

// SAFETY: A umem is a set of pinned pages and their mapping, usable from any thread.
unsafe impl Send for Umem {}
// SAFETY: `&Umem` only reads immutable state.
unsafe impl Sync for Umem {}

/// The raw `struct device` of `dev` (`device::Device` is `#[repr(transparent)]` over
/// `Opaque<bindings::device>`).
pub(crate) fn raw_device<Ctx: kernel::device::DeviceContext>(
    dev: &Device<Ctx>,
) -> *mut bindings::device {
    core::ptr::from_ref(dev)
        .cast::<bindings::device>()
        .cast_mut()
}

/// The kernel address of `page`, valid while the page is. The page must be one the driver
/// allocated without `__GFP_HIGHMEM` (so it is in the kernel's direct map).
pub(crate) fn page_address(page: &kernel::page::Page) -> *mut u8 {
    // SAFETY: `page` is a live page (the reference keeps it); `page_address` only computes.
    unsafe { qhca_shim_page_address(page.as_ptr()) }.cast()
}

/// A page taken out of a [`Umem`] ([`Umem::take`]): still pinned and DMA-mapped until
/// [`drop_taken`]. `struct qhca_umem_page` of `qhca_shim.h`.
#[repr(C)]
pub(crate) struct TakenPage {
    page: *mut bindings::page,
    dma: u64,
}

// SAFETY: a pinned page and its DMA address: plain data, usable from any thread.
unsafe impl Send for TakenPage {}

/// Unmaps (for `dev`) and unpins pages taken out of a region, dirtying them if `dirty`.
///
/// # Safety
///
/// The pages came from [`Umem::take`] of a region mapped for `dev` (which is still bound), each
/// is dropped once, and the device can no longer reach them (revoked, or stopped). Not from an
/// invalidation: unpinning a dirty page locks it.
pub(crate) unsafe fn drop_taken(dev: &Device, pages: &[TakenPage], dirty: bool) {
    // SAFETY: the caller's promise; the slice is live for the call.
    unsafe {
        qhca_shim_umem_drop(
            raw_device(dev),
            pages.as_ptr(),
            pages.len() as c_ulong,
            dirty,
        )
    }
}

/// True if the calling task has `CAP_SYS_RESOURCE` (it may go past resource limits).
pub(crate) fn capable_sys_resource() -> bool {
    // SAFETY: `capable` checks the current task's credentials; no other precondition.
    unsafe { bindings::capable(bindings::CAP_SYS_RESOURCE as i32) }
}

/// The highest user address plus one of the calling process (`TASK_SIZE`).
pub(crate) fn task_size() -> u64 {
    // SAFETY: Reads the current task's address-space limit; no preconditions.
    unsafe { qhca_shim_task_size() }
}

/// True if the calling task has `CAP_NET_RAW` (in the initial user namespace), as the RDMA core
/// asks of whoever sets a controlled Q_Key. Marks the task as having used a privilege if so.
pub(crate) fn capable_net_raw() -> bool {
    // SAFETY: `capable` checks the current task's credentials, which are always valid in process
    // context (a command); `CAP_NET_RAW` is a valid capability number.
    unsafe { bindings::capable(bindings::CAP_NET_RAW as c_int) }
}

/// True if the calling task has been killed: long loops on its behalf stop.
pub(crate) fn fatal_signal_pending() -> bool {
    // SAFETY: Reads the current task's signal state; no preconditions.
    unsafe { qhca_shim_fatal_signal_pending() }
}

/// An mmu interval notifier over part (or all) of the address space of the process that created
/// it, for an on-demand-paged region: every change to those page tables (munmap, madvise,
/// mremap, a COW after fork, migration, reclaim, exit) first calls
/// `qhca_rust_odp_invalidate(owner, ...)` (`odp.rs`). Also resolves pages of that process with
/// HMM, valid until the next invalidation.
///
/// # Invariants
///
/// `self.0` came from a successful `qhca_shim_odp_new` and is freed exactly once, in `Drop`
/// (which removes the notifier first if [`OdpNotifier::remove`] has not).
pub(crate) struct OdpNotifier(NonNull<QhcaOdp>);

/// A page that [`OdpNotifier::fault`] resolved: its page frame number and whether the process
/// may write it.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct FaultedPage(u64);

impl FaultedPage {
    pub(crate) fn pfn(self) -> u64 {
        self.0 >> 1
    }

    pub(crate) fn writable(self) -> bool {
        self.0 & 1 != 0
    }
}

/// An invalidation in progress, handed to the notifier's owner.
pub(crate) struct Invalidation {
    odp: NonNull<QhcaOdp>,
    cur_seq: c_ulong,
    /// The first byte whose mapping changes.
    pub(crate) start: u64,
    /// One past the last.
    pub(crate) end: u64,
}

impl Invalidation {
    /// Builds the invalidation the C callback reports.
    ///
    /// # Safety
    ///
    /// `odp` must be the notifier the callback runs for, live for the duration of the callback,
    /// and `cur_seq` the sequence the callback received; the value must not outlive the callback.
    pub(crate) unsafe fn new(odp: *mut QhcaOdp, start: u64, end: u64, cur_seq: c_ulong) -> Self {
        Self {
            // SAFETY: `odp` is the notifier the callback runs for (caller's promise): the C
            // callback passes its container, never null.
            odp: unsafe { NonNull::new_unchecked(odp) },
            cur_seq,
            start,
            end,
        }
    }

    /// Records that the invalidation began: every fault resolved before it now fails
    /// [`OdpNotifier::retry`]. Called under the lock that the faults' users take.
    pub(crate) fn set_seq(&self) {
        // SAFETY: `self.odp` is the live notifier the callback runs for, and `cur_seq` its
        // sequence (see `new`); setting it is what the callback must do.
        unsafe { qhca_shim_odp_set_seq(self.odp.as_ptr(), self.cur_seq) }
    }
}

/// Who an [`OdpNotifier`]'s invalidations go to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotifierOwner {
    /// `qhca_rust_odp_invalidate`, with an `OdpMr`.
    Odp,
    /// `qhca_rust_watch_invalidate`, with a `WatchedMr`.
    Watch,
}

impl OdpNotifier {
    /// Starts watching `len` bytes at `start` of the calling process (`len` 0: its whole
    /// address space).
    ///
    /// # Safety
    ///
    /// `owner` is passed to the callback `kind` names from every invalidation until
    /// [`OdpNotifier::remove`] returns or the notifier is dropped: it must stay valid for that
    /// long and be what that function expects (an `OdpMr` or a `WatchedMr`).
    ///
    /// # Errors
    ///
    /// `EINVAL` for a range outside the process's address space or a kernel thread, `ENOMEM`.
    pub(crate) unsafe fn new(
        start: u64,
        len: u64,
        owner: *const c_void,
        kind: NotifierOwner,
    ) -> Result<Self> {
        let mut err: c_int = 0;
        let watch = kind == NotifierOwner::Watch;
        // SAFETY: The shim checks the range and registers on the current process's mm; the
        // owner pointer's validity is the caller's promise.
        let o = unsafe { qhca_shim_odp_new(start, len, owner, watch, &mut err) };
        // INVARIANT: non-null is a live, inserted notifier that we own.
        NonNull::new(o)
            .map(Self)
            .ok_or_else(|| Error::from_errno(err))
    }

    /// Stops the invalidations: none runs once this returns. Sleeps until those in progress
    /// end, so the caller must hold no lock that the owner's invalidation takes.
    pub(crate) fn remove(&self) {
        // SAFETY: `self.0` is live (type invariant). The shim serialises removals under the
        // notifier's own mutex: a second call, concurrent or not, waits for the first and then
        // does nothing, so any interleaving of callers is fine.
        unsafe { qhca_shim_odp_remove(self.0.as_ptr()) }
    }

    /// Faults `out.len()` pages at `start` (page-aligned) in, writable if `write`, and fills
    /// `out`. The result holds until an invalidation begins: use it only under the lock that
    /// the invalidations take, after [`OdpNotifier::retry`] of the returned sequence said no.
    ///
    /// # Errors
    ///
    /// `ESRCH` if the process is exiting, `EFAULT` or `EPERM` if a page is not mapped (or not
    /// writable when `write`), `EBUSY` if invalidations kept interrupting for a second.
    pub(crate) fn fault(
        &self,
        start: u64,
        out: &mut [FaultedPage],
        write: bool,
    ) -> Result<c_ulong> {
        let mut seq: c_ulong = 0;
        // SAFETY:
        // - `self.0` is live (type invariant);
        // - `out` is ours for the call, and `FaultedPage` is `#[repr(transparent)]` over a `u64`
        //   (any value is valid), so the shim writes exactly `out.len()` `u64`s into it.
        to_result(unsafe {
            qhca_shim_odp_fault(
                self.0.as_ptr(),
                start,
                out.len() as c_ulong,
                write,
                out.as_mut_ptr().cast::<u64>(),
                &mut seq,
            )
        })?;
        Ok(seq)
    }

    /// The sequence to check with [`OdpNotifier::retry`] once the range's pages are pinned
    /// (waits for an invalidation in progress to end: no lock that one takes may be held).
    pub(crate) fn read_begin(&self) -> c_ulong {
        // SAFETY: `self.0` is live (type invariant) and its notifier inserted until removed;
        // `mmu_interval_read_begin` has no other precondition.
        unsafe { qhca_shim_odp_read_begin(self.0.as_ptr()) }
    }

    /// True if an invalidation began since the [`OdpNotifier::fault`] (or
    /// [`OdpNotifier::read_begin`]) that returned `seq`.
    pub(crate) fn retry(&self, seq: c_ulong) -> bool {
        // SAFETY: `self.0` is live (type invariant); reading the sequence has no precondition.
        unsafe { qhca_shim_odp_retry(self.0.as_ptr(), seq) }
    }

    /// DMA-maps a page that [`OdpNotifier::fault`] returned, for `dev`: both ways if
    /// `writable` (the device may write it), else to the device only.
    ///
    /// # Safety
    ///
    /// `page` came from a fault of this notifier whose sequence [`OdpNotifier::retry`] said is
    /// still current, under a lock that this notifier's invalidations take, and that lock is
    /// still held: so the page is still the process's and cannot be freed before an
    /// invalidation, which unmaps it ([`odp_dma_unmap`]) before that.
    pub(crate) unsafe fn dma_map(
        &self,
        dev: &Device<Bound>,
        page: FaultedPage,
        writable: bool,
    ) -> Result<u64> {
        let mut dma = 0u64;
        // SAFETY: `dev` is bound; the page frame is a live page of the process (the caller's
        // promise), which the shim maps with `dma_map_page`.
        to_result(unsafe {
            qhca_shim_odp_dma_map(raw_device(dev), page.pfn(), writable, &mut dma)
        })?;
        Ok(dma)
    }
}

/// Undoes [`OdpNotifier::dma_map`]; marks the page dirty if the device could write it.
///
/// # Safety
///
/// `dma` is a live mapping that `dma_map` made of `pfn` for `dev` with `writable` = `dirty`
/// (the direction), unmapped only here; the device
/// no longer uses it (it invalidated the page, destroyed the region, or was stopped); and the
/// page is still the process's (an invalidation of it is in progress or has not begun).
pub(crate) unsafe fn odp_dma_unmap(dev: &Device, dma: u64, pfn: u64, dirty: bool) {
    // SAFETY: The caller's promises above are the shim's preconditions.
    unsafe { qhca_shim_odp_dma_unmap(raw_device(dev), dma, pfn, dirty) }
}

impl Drop for OdpNotifier {
    fn drop(&mut self) {
        // SAFETY: `self.0` is live and freed only here (type invariant); the shim removes the
        // notifier first if it is still inserted.
        unsafe { qhca_shim_odp_free(self.0.as_ptr()) }
    }
}

// SAFETY: The notifier is usable from any thread; the kernel serialises its tree, and the shim's
// `inserted` flag is read and written only under the notifier's own mutex (`remove`, `drop`).
unsafe impl Send for OdpNotifier {}
// SAFETY: See above; `fault` and `retry` may run concurrently.
unsafe impl Sync for OdpNotifier {}

/// A workqueue of our own (one work item at a time, in order), destroyed (after it drained) on
/// drop.
///
/// # Invariants
///
/// `self.0` came from `qhca_shim_wq_new` and is destroyed exactly once, in `Drop`.
pub(crate) struct OwnedQueue(NonNull<bindings::workqueue_struct>);

impl OwnedQueue {
    /// A device's ordered queue (`qhcaN_odp`): one work at a time, in order.
    pub(crate) fn new(instance: u32) -> Result<Self> {
        // SAFETY: No preconditions.
        let wq = unsafe { qhca_shim_wq_new(instance) };
        // INVARIANT: non-null is a fresh workqueue that we own.
        NonNull::new(wq).map(Self).ok_or(ENOMEM)
    }

    /// An unbound queue named `name`: its work items run at the same time, on any CPU.
    pub(crate) fn new_unbound(name: &'static CStr) -> Result<Self> {
        // SAFETY: `name` is a NUL-terminated string that lives for ever (the workqueue keeps
        // a copy anyway).
        let wq = unsafe { qhca_shim_wq_new_unbound(name.as_char_ptr()) };
        // INVARIANT: non-null is a fresh workqueue that we own.
        NonNull::new(wq).map(Self).ok_or(ENOMEM)
    }

    pub(crate) fn queue(&self) -> &kernel::workqueue::Queue {
        // SAFETY: `self.0` is a live workqueue (type invariant), which outlives the returned
        // borrow of `self`.
        unsafe { kernel::workqueue::Queue::from_raw(self.0.as_ptr()) }
    }
}

impl Drop for OwnedQueue {
    fn drop(&mut self) {
        // SAFETY: `self.0` is live and destroyed only here (type invariant); destroying drains
        // what is queued first.
        unsafe { qhca_shim_wq_destroy(self.0.as_ptr()) }
    }
}

// SAFETY: A workqueue may be used and destroyed from any thread.
unsafe impl Send for OwnedQueue {}
// SAFETY: Queueing work is thread-safe.
unsafe impl Sync for OwnedQueue {}

/// Maps `len` bytes of MMIO at bus address `phys` into `vma`, uncached, as `entry` of `ucontext`
/// (`rdma_user_mmap_io`), never copied on fork; refuses an executable mapping and clears
/// `VM_MAYEXEC`.
///
/// # Safety
///
/// The core is inside the `mmap` operation of `ucontext` for `vma`, and holds a reference to
/// `entry`, an entry of `ucontext`; `phys..phys + len` is MMIO that the context may map until the
/// core disassociates it.
pub(crate) unsafe fn rdma_mmap_io(
    ucontext: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
    phys: u64,
    len: usize,
    entry: *mut bindings::rdma_user_mmap_entry,
) -> c_int {
    // SAFETY: The caller's contract.
    unsafe { qhca_shim_rdma_mmap_io(ucontext, vma, phys, len as c_ulong, entry) }
}
