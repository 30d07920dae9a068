// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers around `qhca_shim.c`: the only place this crate calls into it.

use kernel::{bindings, error::to_result, fs::File, mm::virt::VmaNew, prelude::*};

// Declared in `qhca_shim.h`. The pointers are opaque here; `improper_ctypes` only objects to some
// bindgen structs deep inside them having no fields.
#[allow(improper_ctypes)]
extern "C" {
    fn qhca_shim_map_io_page(vma: *mut bindings::vm_area_struct, phys: bindings::phys_addr_t)
        -> c_int;
    fn qhca_shim_vma_pgoff(vma: *const bindings::vm_area_struct) -> c_ulong;
    fn qhca_shim_zap_file(filp: *mut bindings::file);
}

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
