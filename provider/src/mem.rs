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
/// hands out raw pointers only, never references that could alias a device write; its users
/// copy in and out with volatile accesses (`volatile_copy_from`, `volatile_copy_to`) or
/// through rings whose protocol says when the device is not writing a slot.
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

/// Copies `out.len()` bytes from `src` with volatile loads: for memory the device may write at
/// any moment (a region a peer WRITEs into), which Rust must never reference nor read with
/// ordinary loads. A volatile load is the access Rust has for memory that something outside
/// the program changes: the compiler performs it as written, never elides, merges or repeats
/// it, and assumes nothing about the value. Bytes that a device write changes during the copy
/// may come out old or new (every byte value is a valid `u8`); completions say when a range is
/// stable. Aligned 8-byte loads where the source allows (so 8 bytes at an 8-aligned address
/// are one load), single bytes at the edges.
///
/// # Safety
///
/// `src..src + out.len()` is readable memory that stays mapped for the call and that no Rust
/// reference covers.
pub(crate) unsafe fn volatile_copy_from(src: *const u8, out: &mut [u8]) {
    let len = out.len();
    let head = src.align_offset(8).min(len);
    let mut i = 0;
    while i < len {
        if i >= head && len - i >= 8 {
            // SAFETY: `src + i` is 8-aligned (`i - head` is a multiple of 8) and its 8 bytes are
            // inside the range (the caller's promise); `u64` has no invalid values.
            let w = unsafe { std::ptr::read_volatile(src.add(i).cast::<u64>()) };
            out[i..i + 8].copy_from_slice(&w.to_ne_bytes());
            i += 8;
        } else {
            // SAFETY: `src + i` is inside the range (the caller's promise).
            out[i] = unsafe { std::ptr::read_volatile(src.add(i)) };
            i += 1;
        }
    }
}

/// Copies `data` to `dst` with volatile stores, as [`volatile_copy_from`] reads: memory the
/// device may read or write at any moment. A device access during the copy sees some bytes old
/// and some new; a work request posted afterwards sees them all (the doorbell's barrier).
///
/// # Safety
///
/// `dst..dst + data.len()` is writable memory that stays mapped for the call, that no Rust
/// reference covers and that no other thread of the program accesses during the call.
pub(crate) unsafe fn volatile_copy_to(data: &[u8], dst: *mut u8) {
    let len = data.len();
    let head = dst.align_offset(8).min(len);
    let mut i = 0;
    while i < len {
        if i >= head && len - i >= 8 {
            let w = u64::from_ne_bytes(data[i..i + 8].try_into().expect("8 bytes"));
            // SAFETY: `dst + i` is 8-aligned and its 8 bytes are inside the range (the caller's
            // promise).
            unsafe { std::ptr::write_volatile(dst.add(i).cast::<u64>(), w) };
            i += 8;
        } else {
            // SAFETY: `dst + i` is inside the range (the caller's promise).
            unsafe { std::ptr::write_volatile(dst.add(i), data[i]) };
            i += 1;
        }
    }
}

/// Sets `len` bytes at `dst` to `byte` with volatile stores, as [`volatile_copy_to`].
///
/// # Safety
///
/// As for [`volatile_copy_to`], for `dst..dst + len`.
pub(crate) unsafe fn volatile_fill(dst: *mut u8, len: usize, byte: u8) {
    let head = dst.align_offset(8).min(len);
    let word = u64::from_ne_bytes([byte; 8]);
    let mut i = 0;
    while i < len {
        if i >= head && len - i >= 8 {
            // SAFETY: `dst + i` is 8-aligned and its 8 bytes are inside the range (the caller's
            // promise).
            unsafe { std::ptr::write_volatile(dst.add(i).cast::<u64>(), word) };
            i += 8;
        } else {
            // SAFETY: `dst + i` is inside the range (the caller's promise).
            unsafe { std::ptr::write_volatile(dst.add(i), byte) };
            i += 1;
        }
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

    #[test]
    fn volatile_copies_at_every_alignment_and_length() {
        let b = PageBuf::new(4096).unwrap();
        let src: Vec<u8> = (0..64u8)
            .map(|i| i.wrapping_mul(7).wrapping_add(1))
            .collect();
        for off in 0..9 {
            for len in 0..40 {
                // SAFETY: inside our own fresh mapping, which nothing references.
                unsafe {
                    volatile_fill(b.as_ptr(), 128, 0xee);
                    volatile_copy_to(&src[..len], b.as_ptr().add(off));
                }
                let mut out = vec![0u8; 128];
                // SAFETY: as above.
                unsafe { volatile_copy_from(b.as_ptr(), &mut out) };
                assert!(out[..off].iter().all(|&x| x == 0xee), "{off} {len}");
                assert_eq!(&out[off..off + len], &src[..len], "{off} {len}");
                assert!(out[off + len..].iter().all(|&x| x == 0xee), "{off} {len}");
                let mut back = vec![0u8; len];
                // SAFETY: as above.
                unsafe { volatile_copy_from(b.as_ptr().add(off), &mut back) };
                assert_eq!(back, &src[..len]);
            }
        }
    }
}
