// SPDX-License-Identifier: GPL-2.0

//! Two-level page lists (`qhca-abi.h`, "Verbs objects"): a directory of the DMA addresses of
//! 4 KiB page-list pages, each holding the addresses of up to `QHCA_PL_PAGE_ENTRIES` pages of the
//! object. No allocation is larger than 16 KiB (the largest directory), whatever the object's
//! size.
//!
//! Every list is filled while it is a `CoherentBox` (owned by the CPU) and becomes `Coherent` only
//! once complete; the device learns the directory's address from the command that follows, and
//! copies the list into its own state before that command completes, so a `PageList` lives only
//! for the duration of one create command.

use crate::{kverbs::ring::KRing, shim::Umem, uapi};
use kernel::{
    device::{Bound, Device},
    dma::{Coherent, CoherentBox},
    prelude::*,
};

/// What fault injection (debugfs `bad_dma_pages`) puts in a page list: page aligned, far above
/// any RAM the guest has, and never an IOVA the driver maps.
pub(crate) const BAD_DMA: u64 = 0xdead_0000_0000;

/// Addresses in one page-list page.
pub(crate) const PER_PAGE: usize = uapi::QHCA_PL_PAGE_ENTRIES as usize;

/// Pages the object at `addr` with `len` bytes spans, checked against the ABI's largest page list
/// before anything is allocated or pinned.
///
/// # Errors
///
/// `EINVAL` for an empty or wrapping range, or one over `QHCA_MAX_PAGE_LIST` pages.
pub(crate) fn span_pages(addr: u64, len: u64) -> Result<usize> {
    let shift = uapi::QHCA_PAGE_SHIFT;
    let end = addr.checked_add(len).filter(|_| len > 0).ok_or(EINVAL)?;
    let n = ((end - 1) >> shift) - (addr >> shift) + 1;
    if n > u64::from(uapi::QHCA_MAX_PAGE_LIST) {
        return Err(EINVAL);
    }
    usize::try_from(n).map_err(|_| EINVAL)
}

/// A complete two-level page list of a mapped [`Umem`] or of a kernel object's [`KRing`].
pub(crate) struct PageList {
    dir: Coherent<[u64]>,
    _pages: KVec<Coherent<[u64]>>,
    npages: u32,
}

impl PageList {
    /// Builds the list of `mem`, which must be DMA-mapped for `dev`.
    ///
    /// # Errors
    ///
    /// `EINVAL` if `mem` is larger than the ABI allows, `ENOMEM`, `EIO` if `mem` is not mapped.
    pub(crate) fn new(dev: &Device<Bound>, mem: &Umem) -> Result<Self> {
        Self::build(dev, mem.npages(), |boxes| mem.fill(boxes, PER_PAGE))
    }

    /// The list of `ring`, contiguous in the device's address space.
    ///
    /// # Errors
    ///
    /// `EINVAL` if `ring` is larger than the ABI allows, `ENOMEM`.
    pub(crate) fn of_ring(dev: &Device<Bound>, ring: &KRing) -> Result<Self> {
        let base = ring.dma_address();
        Self::build(dev, ring.npages(), |boxes| {
            let page = u64::from(uapi::QHCA_PAGE_SIZE);
            for (i, slot) in boxes.iter_mut().flat_map(|b| b.iter_mut()).enumerate() {
                *slot = (base + i as u64 * page).to_le();
            }
            Ok(())
        })
    }

    /// A list of `n` pages whose addresses `fill` writes into the page-list pages.
    fn build(
        dev: &Device<Bound>,
        n: usize,
        fill: impl FnOnce(&mut [CoherentBox<[u64]>]) -> Result,
    ) -> Result<Self> {
        let ndir = n.div_ceil(PER_PAGE);
        if n == 0 || n > uapi::QHCA_MAX_PAGE_LIST as usize {
            return Err(EINVAL);
        }
        let mut boxes = KVec::with_capacity(ndir, GFP_KERNEL)?;
        for i in 0..ndir {
            let len = PER_PAGE.min(n - i * PER_PAGE);
            boxes.push(
                CoherentBox::<[u64]>::zeroed_slice(dev, len, GFP_KERNEL)?,
                GFP_KERNEL,
            )?;
        }
        fill(&mut boxes)?;
        if crate::debugfs::take(&crate::debugfs::BAD_DMA_PAGES) {
            if let Some(last) = boxes.last_mut().and_then(|b| b.last_mut()) {
                *last = BAD_DMA.to_le();
            }
        }

        let mut dir = CoherentBox::<[u64]>::zeroed_slice(dev, ndir, GFP_KERNEL)?;
        let mut pages = KVec::with_capacity(ndir, GFP_KERNEL)?;
        for (slot, list) in dir.iter_mut().zip(boxes) {
            let list: Coherent<[u64]> = list.into();
            *slot = list.dma_address().to_le();
            pages.push(list, GFP_KERNEL)?;
        }
        Ok(Self {
            dir: dir.into(),
            _pages: pages,
            // `n <= QHCA_MAX_PAGE_LIST`, checked above.
            npages: n as u32,
        })
    }

    /// The directory's DMA address, for the command's `pages_addr`.
    pub(crate) fn dma_address(&self) -> u64 {
        self.dir.dma_address()
    }

    /// Pages in the list, for the command's `npages`.
    pub(crate) fn npages(&self) -> u32 {
        self.npages
    }
}
