// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers around `qhca_shim.c`: the only place this crate calls into it.

use core::ptr::NonNull;
use kernel::{
    bindings,
    device::{Bound, Device},
    dma::CoherentBox,
    fs::File,
    mm::virt::VmaNew,
    pci,
    prelude::*,
};

// Declared in `qhca_shim.h`. The pointers are opaque here; `improper_ctypes` only objects to some
// bindgen structs deep inside them having no fields.
#[allow(improper_ctypes)]
extern "C" {
    fn qhca_shim_umap_new() -> *mut QhcaUmap;
    fn qhca_shim_umap_free(m: *mut QhcaUmap);
    fn qhca_shim_umap_set_phys(m: *mut QhcaUmap, phys: bindings::phys_addr_t);
    fn qhca_shim_umap_revoke(m: *mut QhcaUmap);
    fn qhca_shim_umap_mmap(m: *mut QhcaUmap, vma: *mut bindings::vm_area_struct);
    fn qhca_shim_vma_pgoff(vma: *const bindings::vm_area_struct) -> c_ulong;
    fn qhca_shim_inode_get(filp: *mut bindings::file) -> *mut bindings::inode;
    fn qhca_shim_inode_put(inode: *mut bindings::inode);
    fn qhca_shim_inode_zap(inode: *mut bindings::inode);
    fn qhca_shim_file_add_poll(filp: *mut bindings::file);
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
    fn qhca_shim_eventfd_get(fd: c_int, err: *mut c_int) -> *mut bindings::eventfd_ctx;
    fn qhca_shim_eventfd_signal(ctx: *mut bindings::eventfd_ctx);
    fn qhca_shim_eventfd_put(ctx: *mut bindings::eventfd_ctx);
}

/// `struct qhca_umem` of `qhca_shim.c`, opaque here.
#[repr(C)]
pub(crate) struct QhcaUmem {
    _opaque: [u8; 0],
}

/// `struct qhca_umap` of `qhca_shim.c`, opaque here.
#[repr(C)]
pub(crate) struct QhcaUmap {
    _opaque: [u8; 0],
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

/// One context's doorbell page as user space maps it: the PTE is inserted on fault, and once
/// revoked a fault maps a zeroed page of this context instead (see `qhca_shim.c`).
///
/// # Invariants
///
/// `self.0` came from `qhca_shim_umap_new` and is freed exactly once, in `Drop`.
pub(crate) struct Umap(NonNull<QhcaUmap>);

impl Umap {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: No preconditions.
        let m = unsafe { qhca_shim_umap_new() };
        // INVARIANT: non-null is a fresh umap that we own.
        NonNull::new(m).map(Self).ok_or(ENOMEM)
    }

    /// Sets the doorbell page that faults map while the umap is not revoked.
    ///
    /// # Safety
    ///
    /// `phys` must be the address of one 4 KiB doorbell page of the device's BAR2 that belongs
    /// to this umap's context, and the umap must be revoked ([`Umap::revoke`], then the
    /// mapping zapped) before that BAR is released: until then every fault of the context's
    /// mappings maps that page into user space.
    pub(crate) unsafe fn set_phys(&self, phys: u64) {
        // SAFETY: `self.0` is live (type invariant); the shim takes its lock. What `phys` names
        // is the caller's promise.
        unsafe { qhca_shim_umap_set_phys(self.0.as_ptr(), phys) }
    }

    /// From now on faults map the harmless page. The caller zaps the existing PTEs afterwards
    /// ([`InodeMapping::zap`]).
    pub(crate) fn revoke(&self) {
        // SAFETY: `self.0` is live (type invariant); the shim takes its lock.
        unsafe { qhca_shim_umap_revoke(self.0.as_ptr()) }
    }

    /// Sets `vma` up to be filled on fault from this umap.
    ///
    /// # Safety
    ///
    /// `self` must outlive `vma` and every copy of it: the vma's fault handler uses it. That holds
    /// when `self` belongs to the file being mapped and is dropped only after the file's release
    /// (every vma holds a reference to its file).
    pub(crate) unsafe fn mmap(&self, vma: &VmaNew) {
        // SAFETY:
        // - `vma` is a vma under construction (type invariant of `VmaNew`), so its flags, page
        //   protection, ops and private data may be set;
        // - `self.0` is live and, by the caller's promise, stays live while the vma exists.
        unsafe { qhca_shim_umap_mmap(self.0.as_ptr(), vma.as_ptr()) }
    }
}

impl Drop for Umap {
    fn drop(&mut self) {
        // SAFETY: `self.0` is live and freed only here (type invariant).
        unsafe { qhca_shim_umap_free(self.0.as_ptr()) }
    }
}

// SAFETY: The umap's state is guarded by its own mutex; any thread may use it.
unsafe impl Send for Umap {}
// SAFETY: See above.
unsafe impl Sync for Umap {}

/// The offset, in pages, that user space passed to `mmap`.
pub(crate) fn vma_pgoff(vma: &VmaNew) -> usize {
    // SAFETY: `vma.as_ptr()` is a valid vma for the duration of the `mmap` call (type invariant of
    // `VmaNew`), and the shim only reads `vm_pgoff`, which nobody writes during the setup.
    unsafe { qhca_shim_vma_pgoff(vma.as_ptr()) as usize }
}

/// A reference to the inode of an open file, through which every user mapping of the file's
/// address space can be zapped.
///
/// # Invariants
///
/// `self.0` holds a reference taken with `ihold`, dropped once in `Drop`.
pub(crate) struct InodeMapping(NonNull<bindings::inode>);

impl InodeMapping {
    pub(crate) fn new(file: &File) -> Result<Self> {
        // SAFETY: `file` is an open file, so its inode is live; the shim takes a reference.
        let inode = unsafe { qhca_shim_inode_get(file.as_ptr()) };
        // INVARIANT: non-null is an inode we now hold a reference to (`file_inode` of an open
        // file is never null).
        NonNull::new(inode).map(Self).ok_or(EINVAL)
    }

    /// Zaps every user mapping of the inode's address space (for a character device, the node's:
    /// every file opened through it). Later faults go to the vma's fault handler.
    pub(crate) fn zap(&self) {
        // SAFETY: The inode is live: we hold a reference (type invariant).
        unsafe { qhca_shim_inode_zap(self.0.as_ptr()) }
    }
}

impl Drop for InodeMapping {
    fn drop(&mut self) {
        // SAFETY: Drops the reference taken in `new` (type invariant).
        unsafe { qhca_shim_inode_put(self.0.as_ptr()) }
    }
}

// SAFETY: An inode reference may be used and dropped from any thread.
unsafe impl Send for InodeMapping {}
// SAFETY: `zap` may run concurrently from several threads.
unsafe impl Sync for InodeMapping {}

/// Gives a file of ours a `poll` operation (the Rust miscdevice has none).
///
/// # Safety
///
/// `file` must be a file of this driver's misc device, being opened (inside its `open`).
pub(crate) unsafe fn file_add_poll(file: &File) {
    // SAFETY: By the caller's promise, `file` is being opened through our misc device: its
    // `f_op` is our Rust vtable and no other thread uses the file yet.
    unsafe { qhca_shim_file_add_poll(file.as_ptr()) }
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

/// A reference to a user's eventfd, signalled on completion events.
///
/// # Invariants
///
/// `self.0` holds a reference from `eventfd_ctx_fdget`, dropped once in `Drop`.
pub(crate) struct EventFd(NonNull<bindings::eventfd_ctx>);

impl EventFd {
    /// Takes a reference to the eventfd open as `fd` in the calling process.
    ///
    /// # Errors
    ///
    /// `EBADF` if `fd` is not open, `EINVAL` if it is not an eventfd.
    pub(crate) fn get(fd: i32) -> Result<Self> {
        let mut err: c_int = 0;
        // SAFETY: The shim looks `fd` up in the current process's table and checks its type.
        let ctx = unsafe { qhca_shim_eventfd_get(fd, &mut err) };
        // INVARIANT: non-null means we own a reference.
        NonNull::new(ctx)
            .map(Self)
            .ok_or_else(|| Error::from_errno(err))
    }

    /// Adds one to the eventfd's counter, waking its readers. Callable from any context.
    pub(crate) fn signal(&self) {
        // SAFETY: `self.0` is a live reference (type invariant).
        unsafe { qhca_shim_eventfd_signal(self.0.as_ptr()) }
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a live reference, dropped only here (type invariant).
        unsafe { qhca_shim_eventfd_put(self.0.as_ptr()) }
    }
}

// SAFETY: eventfd contexts are reference-counted and thread-safe.
unsafe impl Send for EventFd {}
// SAFETY: See above; `signal` is safe to call concurrently.
unsafe impl Sync for EventFd {}
