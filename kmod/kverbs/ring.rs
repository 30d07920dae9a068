// SPDX-License-Identifier: GPL-2.0

//! The memory of a kernel object's rings: one DMA-coherent allocation, contiguous and page
//! aligned, that the driver reads and writes while the device does (CQEs in, WQEs out).
//!
//! Every access is bounds-checked against the allocation (an index the device or a consumer
//! gets wrong reads zero or writes nothing, it never strays), and volatile: the device reads
//! and writes it under us.

use crate::{rdma::RecvWr, uapi};
use kernel::{
    bindings,
    device::{Bound, Device},
    dma::{Coherent, CoherentBox},
    prelude::*,
};

/// One ring allocation of a kernel CQ or QP. Kept alive by the object's entry among its
/// context's objects as long as the device may use it (and leaked with it if a destroy fails).
pub(crate) struct KRing {
    mem: Coherent<[u8]>,
}

impl KRing {
    /// `bytes` zeroed bytes (rounded up to whole pages) for device `dev`.
    ///
    /// # Errors
    ///
    /// `EINVAL` for an empty or oversized ring (more than `QHCA_MAX_PAGE_LIST` pages), `ENOMEM`.
    pub(crate) fn new(dev: &Device<Bound>, bytes: u64) -> Result<Self> {
        let page = u64::from(uapi::QHCA_PAGE_SIZE);
        let pages = bytes.div_ceil(page);
        if pages == 0 || pages > u64::from(uapi::QHCA_MAX_PAGE_LIST) {
            return Err(EINVAL);
        }
        let len = usize::try_from(pages * page).map_err(|_| EINVAL)?;
        // Coherent allocations of a page or more are page aligned and contiguous in the
        // device's address space (the DMA API guarantees both), which the page list relies on.
        let mem = CoherentBox::<[u8]>::zeroed_slice(dev, len, GFP_KERNEL)?.into();
        Ok(Self { mem })
    }

    /// The device's address of the first byte.
    pub(crate) fn dma_address(&self) -> u64 {
        self.mem.dma_address()
    }

    /// Whole pages in the ring.
    pub(crate) fn npages(&self) -> usize {
        self.mem.len() >> uapi::QHCA_PAGE_SHIFT
    }

    /// The address of the `T` at `off`, if it lies within the ring and is aligned.
    fn at<T>(&self, off: usize) -> Option<*mut T> {
        let size = core::mem::size_of::<T>();
        if off % size != 0 || off.checked_add(size)? > self.mem.len() {
            return None;
        }
        // In bounds (checked above) of the allocation `as_mut_ptr` points to.
        Some(
            self.mem
                .as_mut_ptr()
                .cast::<u8>()
                .wrapping_add(off)
                .cast::<T>(),
        )
    }

    /// Reads the `T` at `off` (0 outside the ring).
    fn read<T: Copy + Default>(&self, off: usize) -> T {
        self.at::<T>(off).map_or(T::default(), |p| {
            // SAFETY: `p` is aligned and within the allocation, which lives as long as `self`;
            // the device may write it concurrently, hence a volatile read of a plain integer
            // (every bit pattern is one).
            unsafe { core::ptr::read_volatile(p) }
        })
    }

    /// Writes the `T` at `off` (nothing outside the ring).
    fn write<T: Copy>(&self, v: T, off: usize) {
        if let Some(p) = self.at::<T>(off) {
            // SAFETY: As in `read`; the driver writes only what the device does not (a WQE it
            // has not been given yet, the consumer index), a volatile store of a plain integer.
            unsafe { core::ptr::write_volatile(p, v) };
        }
    }

    pub(crate) fn read8(&self, off: usize) -> u8 {
        self.read(off)
    }

    pub(crate) fn read16(&self, off: usize) -> u16 {
        u16::from_le(self.read(off))
    }

    pub(crate) fn read32(&self, off: usize) -> u32 {
        u32::from_le(self.read(off))
    }

    pub(crate) fn read64(&self, off: usize) -> u64 {
        u64::from_le(self.read(off))
    }

    pub(crate) fn write8(&self, v: u8, off: usize) {
        self.write(v, off);
    }

    pub(crate) fn write32(&self, v: u32, off: usize) {
        self.write(v.to_le(), off);
    }

    pub(crate) fn write64(&self, v: u64, off: usize) {
        self.write(v.to_le(), off);
    }

    /// Writes `bytes` at `off` (all of them, or none if they do not fit).
    pub(crate) fn write_bytes(&self, bytes: &[u8], off: usize) {
        if off
            .checked_add(bytes.len())
            .is_none_or(|end| end > self.mem.len())
        {
            return;
        }
        for (i, &b) in bytes.iter().enumerate() {
            self.write8(b, off + i);
        }
    }

    /// Writes scatter entries at `off` (`struct qhca_sge` each).
    pub(crate) fn write_sges(&self, sges: &[bindings::ib_sge], off: usize) {
        for (i, s) in sges.iter().enumerate() {
            let o = off + 16 * i;
            self.write64(s.addr, o);
            self.write32(s.length, o + 8);
            self.write32(s.lkey, o + 12);
        }
    }

    /// Writes receive WQE `wr` at `off` (`struct qhca_rwqe` and its scatter entries, as a QP's
    /// receive queue and an SRQ hold them); the caller checked that it fits the slot.
    pub(crate) fn write_recv_wqe(&self, wr: &RecvWr<'_>, off: usize) {
        self.write64(wr.wr_id, off);
        self.write32(wr.sges.len() as u32, off + 8);
        self.write32(0, off + 12);
        self.write_sges(wr.sges, off + 16);
    }

    /// Writes the receive requests `wrs` one after the other into a receive ring (a QP's or an
    /// SRQ's) of slots of `2^stride_log` bytes that take at most `max_sge` SGEs: `next_slot`
    /// takes the next free slot and gives its offset, or `None` when the ring is full. Stops at
    /// the first request that fails, with its error and position: its own, `EINVAL` for more
    /// SGEs than fit, `ENOMEM` when the ring is full. The caller rings the doorbell for what
    /// was written.
    pub(crate) fn write_recv_wqes(
        &self,
        wrs: &mut dyn Iterator<Item = Result<RecvWr<'_>>>,
        max_sge: u16,
        stride_log: u32,
        mut next_slot: impl FnMut() -> Option<usize>,
    ) -> core::result::Result<(), (Error, usize)> {
        for (n, wr) in wrs.enumerate() {
            let wr = wr.map_err(|e| (e, n))?;
            if wr.sges.len() > usize::from(max_sge)
                || 16 + 16 * wr.sges.len() > 1usize << stride_log
            {
                return Err((EINVAL, n));
            }
            let off = next_slot().ok_or((ENOMEM, n))?;
            self.write_recv_wqe(&wr, off);
        }
        Ok(())
    }

    /// Zeroes `len` bytes at `off` (within the ring).
    pub(crate) fn zero(&self, off: usize, len: usize) {
        let mut i = 0;
        while i + 8 <= len {
            self.write64(0, off + i);
            i += 8;
        }
        while i < len {
            self.write8(0, off + i);
            i += 1;
        }
    }
}
