// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The context's doorbell (UAR) page, mapped into the process, and the one store that rings it.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{fence, Ordering};

use memmap2::{MmapOptions, MmapRaw};
use qhca_uapi::{QHCA_DB_OFFSET, UAR_PAGE_SIZE};

use crate::error::{errno_of, Error, Result};

/// Offset of the doorbell word in the page.
const DB_OFFSET: usize = QHCA_DB_OFFSET as usize;

/// Where [`Doorbell::map`] maps the page from: the first page of a file that stands in for the
/// device in host tests (a context opened with `Context::open_unchecked`). Not ABI: a device's
/// context maps its page at the offset `GET_CONTEXT` answered ([`Doorbell::map_at`]).
const STAND_IN_OFFSET: u64 = 0;

// The doorbell is one aligned 64-bit store inside the page.
const _: () = assert!(DB_OFFSET % core::mem::align_of::<u64>() == 0);
const _: () = assert!(DB_OFFSET + core::mem::size_of::<u64>() <= UAR_PAGE_SIZE);

/// Orders every store this thread made to memory the device reads by DMA (work queue entries,
/// doorbell records) before the MMIO doorbell store that tells the device to read them.
///
/// rdma-core calls this `udma_to_device_barrier()`. A release fence is what we need on the
/// architectures we run on: on x86-64 stores are not reordered with older stores (and the page is
/// mapped uncached), so it only has to stop the compiler; on arm64 it is a `dmb ish`. A real
/// device behind a non-coherent interconnect on arm64 would need `dmb oshst` here, as rdma-core
/// has; the emulated device shares the guest's coherent memory.
#[inline(always)]
fn udma_to_device_barrier() {
    fence(Ordering::Release);
}

/// This context's doorbell page, mapped shared and read-write.
///
/// # Invariants
///
/// `map` is a live mapping of exactly [`UAR_PAGE_SIZE`] bytes, page aligned, not moved or
/// unmapped until `self` is dropped.
///
/// The mapping holds its own reference to the device file, so it may outlive the [`Context`]
/// it came from; the driver frees the page only when both are gone.
///
/// If the device is unbound or removed, the driver disassociates the context: the mapping then
/// points to a harmless page, so a later [`Doorbell::ring`] stores into nothing and returns
/// (nothing faults); the context reports the loss (see [`Context`]).
///
/// [`Context`]: crate::Context
#[derive(Debug)]
pub struct Doorbell {
    map: MmapRaw,
}

impl Doorbell {
    /// Maps the page of a host test's stand-in file (at [`STAND_IN_OFFSET`]).
    pub(crate) fn map(fd: BorrowedFd<'_>) -> Result<Doorbell> {
        Self::map_at(fd, STAND_IN_OFFSET)
    }

    /// Maps the doorbell page that `fd` offers at `offset` (a uverbs file's, at the offset
    /// GET_CONTEXT answered: `struct qhca_ib_alloc_ucontext_resp`).
    pub fn map_at(fd: BorrowedFd<'_>, offset: u64) -> Result<Doorbell> {
        let map = MmapOptions::new()
            .offset(offset)
            .len(UAR_PAGE_SIZE)
            .map_raw(fd.as_raw_fd())
            .map_err(|e| Error::Mmap {
                what: "doorbell page",
                source: errno_of(&e),
            })?;
        // INVARIANT: memmap2 mapped exactly `UAR_PAGE_SIZE` bytes at `offset` (page aligned,
        // so the pointer is the page-aligned start of the mapping), PROT_READ | PROT_WRITE,
        // MAP_SHARED; `MmapRaw` unmaps only in its `Drop`.
        debug_assert_eq!(map.len(), UAR_PAGE_SIZE);
        Ok(Doorbell { map })
    }

    /// Rings the doorbell: a barrier that makes this thread's earlier stores visible to the device,
    /// then one aligned 64-bit store of `word` (little-endian, as the device reads it) at
    /// `QHCA_DB_OFFSET`. Build `word` with [`qhca_uapi::db::DbWord`].
    ///
    /// On x86-64 the store is a `rep stosq` of one element: the same single aligned 8-byte
    /// write, but an instruction that ends QEMU's translation block. qhca only ever runs under
    /// QEMU, and TCG lets only the last instruction of a block touch device memory: a plain
    /// `mov` in the middle of a block makes it throw the block away and re-execute the store
    /// alone, on every ring (`cpu_io_recompile` and the unwinding around it: 7.7 % of QEMU's
    /// samples under perftest's `ib_write_bw` 64 B, one doorbell per request). Measured in one
    /// boot, four rounds each: 0.42 Mpps with `mov`, 0.51 with `rep stosq`; latency unchanged.
    #[inline]
    pub fn ring(&self, word: u64) {
        udma_to_device_barrier();
        // SAFETY (both forms):
        // - validity: by the type invariant the mapping is live and `UAR_PAGE_SIZE` bytes long;
        //   `DB_OFFSET + 8 <= UAR_PAGE_SIZE` (checked at compile time), so the 8 bytes are inside
        //   it, and the page-aligned base plus an 8-aligned offset is 8-aligned;
        // - aliasing: no Rust reference to the page exists (`MmapRaw` only hands out raw
        //   pointers), and the store is volatile (or asm), so it is neither elided, merged nor
        //   split; concurrent rings from several threads are separate whole-word stores;
        // - after the device is gone the driver backs the mapping with a harmless page, which
        //   belongs to no Rust object.
        // The asm: `rep stosq` with RCX = 1 stores RAX at [RDI] once (the direction flag is
        // clear on entry to asm, as the Rust ABI guarantees); it changes RDI and RCX, which are
        // declared clobbered, no flags, and touches no stack.
        unsafe {
            let db = self.map.as_mut_ptr().add(DB_OFFSET).cast::<u64>();
            #[cfg(target_arch = "x86_64")]
            core::arch::asm!(
                "rep stosq",
                inout("rdi") db => _,
                inout("rcx") 1u64 => _,
                in("rax") word.to_le(),
                options(nostack, preserves_flags),
            );
            #[cfg(not(target_arch = "x86_64"))]
            core::ptr::write_volatile(db, word.to_le());
        }
    }

    /// Length of the mapping ([`UAR_PAGE_SIZE`]).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: a doorbell page is never empty (here for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Start of the mapping (tests).
    #[cfg(test)]
    fn as_ptr(&self) -> *const u8 {
        self.map.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A memfd-like stand-in for the device: a shared mapping of an ordinary file behaves like
    /// the doorbell page for everything but the device on the other side.
    #[test]
    fn ring_stores_one_little_endian_word_at_db_offset() {
        let path = std::env::temp_dir().join(format!("qhca-db-test-{}", std::process::id()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(UAR_PAGE_SIZE as u64).unwrap();
        let db = Doorbell::map(file.as_fd()).unwrap();
        assert_eq!(db.len(), UAR_PAGE_SIZE);
        assert!(!db.is_empty());
        assert_eq!(db.as_ptr() as usize % UAR_PAGE_SIZE, 0);

        let word = qhca_uapi::db::DbWord::new(qhca_uapi::db::DbType::Sq, 0x12_3456, 0xabcd).raw();
        db.ring(word);
        drop(db);

        let bytes = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(bytes[DB_OFFSET..DB_OFFSET + 8], word.to_le_bytes());
        assert!(bytes[DB_OFFSET + 8..].iter().all(|&b| b == 0));
    }
}
