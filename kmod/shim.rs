// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers around `qhca_shim.c`: the only place this crate calls into it.

use core::ptr::NonNull;
use kernel::{
    bindings,
    device::{Bound, Device},
    dma::Coherent,
    error::to_result,
    fs::File,
    mm::virt::VmaNew,
    prelude::*,
};

// Declared in `qhca_shim.h`. The pointers are opaque here; `improper_ctypes` only objects to some
// bindgen structs deep inside them having no fields.
#[allow(improper_ctypes)]
extern "C" {
    fn qhca_shim_map_io_page(vma: *mut bindings::vm_area_struct, phys: bindings::phys_addr_t)
        -> c_int;
    fn qhca_shim_vma_pgoff(vma: *const bindings::vm_area_struct) -> c_ulong;
    fn qhca_shim_zap_file(filp: *mut bindings::file);
    fn qhca_shim_debugfs_get();
    fn qhca_shim_debugfs_put();
    fn qhca_shim_umem_get(
        dev: *mut bindings::device,
        addr: u64,
        len: u64,
        writable: bool,
        err: *mut c_int,
    ) -> *mut QhcaUmem;
    fn qhca_shim_umem_npages(u: *const QhcaUmem) -> c_ulong;
    fn qhca_shim_umem_page_list(u: *const QhcaUmem, out: *mut u64, n: c_ulong) -> c_ulong;
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

/// Holds `/sys/kernel/debug/qhca/` (the pinned-page count) while any device is bound.
pub(crate) struct Debugfs(());

impl Debugfs {
    pub(crate) fn get() -> Self {
        // SAFETY: Reference-counted under the shim's mutex; no preconditions.
        unsafe { qhca_shim_debugfs_get() };
        Self(())
    }
}

impl Drop for Debugfs {
    fn drop(&mut self) {
        // SAFETY: Drops the reference `get` took.
        unsafe { qhca_shim_debugfs_put() };
    }
}

/// User memory pinned for the life of a verbs object and DMA-mapped for the device.
///
/// # Invariants
///
/// `self.0` came from a successful `qhca_shim_umem_get` and is released exactly once, in `Drop`.
pub(crate) struct Umem(NonNull<QhcaUmem>);

impl Umem {
    /// Pins `len` bytes of the calling process's memory at `addr` (FOLL_LONGTERM, accounted to its
    /// RLIMIT_MEMLOCK) and maps the pages for `dev`.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an empty or wrapping range, `EFAULT` for an unmapped one, `ENOMEM` over the
    /// memlock limit, `EPERM` if the process may not lock memory.
    pub(crate) fn pin(dev: &Device<Bound>, addr: u64, len: u64, writable: bool) -> Result<Self> {
        let mut err: c_int = 0;
        // `device::Device` is `#[repr(transparent)]` over `Opaque<bindings::device>`, so this is
        // the C device (its `as_raw` is private to the kernel crate).
        let raw = core::ptr::from_ref(dev).cast::<bindings::device>().cast_mut();
        // SAFETY: `raw` is a valid bound device; the shim validates `addr`/`len` and only touches
        // the current process's memory through the GUP API.
        let u = unsafe { qhca_shim_umem_get(raw, addr, len, writable, &mut err) };
        // INVARIANT: a non-null return is a live umem that we now own.
        NonNull::new(u).map(Self).ok_or_else(|| Error::from_errno(err))
    }

    /// Number of 4 KiB pages covered.
    pub(crate) fn npages(&self) -> usize {
        // SAFETY: `self.0` is live (type invariant).
        unsafe { qhca_shim_umem_npages(self.0.as_ptr()) as usize }
    }

    /// Writes the device address of every page, little-endian, into `out`, a DMA buffer of
    /// exactly `npages()` entries that the device does not own yet.
    pub(crate) fn write_page_list(&self, out: &Coherent<[u64]>) -> Result {
        if out.len() != self.npages() {
            return Err(EINVAL);
        }
        // SAFETY:
        // - `self.0` is live (type invariant);
        // - `out` is `npages()` u64s of CPU-visible DMA memory that no one else reads or writes
        //   until it is handed to the device after this returns, so writing through its pointer
        //   creates no aliasing.
        let n = unsafe {
            qhca_shim_umem_page_list(self.0.as_ptr(), out.as_mut_ptr().cast(), out.len() as c_ulong)
        };
        if n as usize == out.len() {
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
        NonNull::new(ctx).map(Self).ok_or_else(|| Error::from_errno(err))
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

/// The offset, in pages, that user space passed to `mmap`.
pub(crate) fn vma_pgoff(vma: &VmaNew) -> usize {
    // SAFETY: `vma.as_ptr()` is a valid vma for the duration of the `mmap` call (type invariant of
    // `VmaNew`), and the shim only reads `vm_pgoff`, which nobody writes during the setup.
    unsafe { qhca_shim_vma_pgoff(vma.as_ptr()) as usize }
}

/// Maps the page of device memory at `phys` over the whole of `vma`, uncached, as `VM_IO |
/// VM_PFNMAP | VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP`.
///
/// # Errors
///
/// `EINVAL` if the vma is not exactly one page, or whatever `vm_iomap_memory` returns.
pub(crate) fn map_io_page(vma: &VmaNew, phys: u64) -> Result {
    if vma.end() - vma.start() != bindings::PAGE_SIZE as usize {
        return Err(EINVAL);
    }
    // SAFETY:
    // - `vma` is a vma under construction (type invariant of `VmaNew`), so its flags and page
    //   protection may be changed and it may be populated.
    // - `phys` is a page of a PCI BAR the driver has claimed; mapping it creates no Rust reference
    //   to that memory.
    to_result(unsafe { qhca_shim_map_io_page(vma.as_ptr(), phys) })
}

/// Zaps every user mapping of `file`'s address space (see `qhca_shim_zap_file`).
pub(crate) fn zap_file_mappings(file: FilePtr) {
    // SAFETY: `FilePtr` is only constructed for files that stay open until it is dropped from the
    // device's open-file list, and the caller holds that list's lock (see `device::Files`).
    unsafe { qhca_shim_zap_file(file.0) }
}

/// A raw pointer to an open `struct file`, kept in the device's list of open files.
///
/// # Invariants
///
/// The file is open for as long as this pointer is in the list: `open` adds it after the file is
/// set up and `release` removes it before the file goes away, both under the list's lock.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct FilePtr(*mut bindings::file);

impl FilePtr {
    pub(crate) fn new(file: &File) -> Self {
        Self(file.as_ptr())
    }
}

// SAFETY: `FilePtr` is only an identity plus the ability to zap the file's mappings, which any
// thread may do; `struct file` is thread-safe.
unsafe impl Send for FilePtr {}

// SAFETY: As for `Send`: shared access only compares the pointer or zaps the file's mappings.
unsafe impl Sync for FilePtr {}
