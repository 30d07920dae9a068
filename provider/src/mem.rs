// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Page-aligned memory the device reaches by DMA: ring buffers and owned memory regions.

use std::ptr::NonNull;

use crate::error::{Errno, Error, Result};

/// The page size rings are aligned and rounded to (`QHCA_PAGE_SIZE`).
pub const PAGE_SIZE: usize = qhca_uapi::QHCA_PAGE_SIZE as usize;

/// `len` rounded up to a whole number of pages.
pub const fn round_up_to_page(len: usize) -> usize {
    (len + PAGE_SIZE - 1) & !(PAGE_SIZE - 1)
}

/// An anonymous private mapping (`MAP_PRIVATE | MAP_ANONYMOUS`, zeroed, page aligned), unmapped
/// on drop unless [`PageBuf::leak`]ed.
///
/// The memory is shared with the device (once its address is given to the driver), so this type
/// hands out raw pointers and copies, never references that could alias a device write, except
/// through the `unsafe` accessors whose contract says when the device is not writing.
///
/// # Invariants
///
/// `ptr..ptr + len` is a live read-write mapping made for this value alone, `len` is a non-zero
/// multiple of [`PAGE_SIZE`], and it is unmapped only in `Drop`.
#[derive(Debug)]
pub struct PageBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value alone; moving the owner to another
// thread or reading its address from several threads does not create references into it.
unsafe impl Send for PageBuf {}
// SAFETY: as for `Send`: `&PageBuf` only gives raw pointers and copies.
unsafe impl Sync for PageBuf {}

impl PageBuf {
    /// Maps `len` bytes rounded up to whole pages (at least one), zeroed.
    pub fn new(len: usize) -> Result<PageBuf> {
        let len = round_up_to_page(len.max(1));
        // SAFETY: without MAP_FIXED the kernel picks an address overlapping no existing mapping,
        // so no memory Rust knows about is replaced; the new mapping belongs to the returned value.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::Sys {
                op: "mmap ring or region memory",
                source: Errno::last(),
            });
        }
        // INVARIANT: a fresh, page-aligned mapping of `len` (a non-zero page multiple) bytes.
        Ok(PageBuf {
            ptr: NonNull::new(p.cast()).expect("mmap does not return NULL on success"),
            len,
        })
    }

    /// Start of the memory.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Start of the memory as the address the driver is given.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Length in bytes (a multiple of [`PAGE_SIZE`]).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a buffer has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Gives up the memory without unmapping it: for when the driver may still let the device
    /// write to it (a destroy that failed), so that the addresses are never reused.
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: by the type invariant this is our own mapping, unmapped nowhere else, and no
        // reference into it outlives `self` (every accessor borrows `self`).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_to_pages_and_is_zeroed() {
        assert_eq!(round_up_to_page(0), 0);
        assert_eq!(round_up_to_page(1), 4096);
        assert_eq!(round_up_to_page(4096), 4096);
        assert_eq!(round_up_to_page(4097), 8192);
        let b = PageBuf::new(5000).unwrap();
        assert_eq!(b.len(), 8192);
        assert_eq!(b.addr() % 4096, 0);
        // SAFETY: our own fresh mapping of `len` bytes; nothing else refers to it.
        let s = unsafe { std::slice::from_raw_parts(b.as_ptr(), b.len()) };
        assert!(s.iter().all(|&x| x == 0));
        let one = PageBuf::new(0).unwrap();
        assert_eq!(one.len(), 4096);
    }
}
