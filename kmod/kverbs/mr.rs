// SPDX-License-Identifier: GPL-2.0

//! A kernel consumer's fast-registration region (`alloc_mr`, `map_mr_sg`, the `IB_WR_REG_MR`
//! work request): the page list the device copies when the REG_MR WQE runs (the ABI header's
//! "Fast registration"), in the driver's coherent memory, and how many of its entries the last
//! `map_mr_sg` filled.
//!
//! The consumer maps and registers one I/O at a time per region (the verbs' contract: it
//! neither maps a region again nor reuses it before the registration that used its list
//! completed and the region was invalidated). The entry count is still an atomic, so that a
//! consumer breaking that contract gets a wrong mapping of its own pages, not a race here.

use super::ring::KRing;
use crate::uapi;
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::{prelude::*, sync::Arc};

/// See the module documentation.
pub(crate) struct KFastMr {
    list: Arc<KRing>,
    max: u32,
    mapped: AtomicU32,
}

impl KFastMr {
    /// A region of up to `max` pages whose list is `list` (at least `max` entries).
    pub(crate) fn new(list: Arc<KRing>, max: u32) -> Result<Self> {
        let room = (list.npages() as u64) << uapi::QHCA_PAGE_SHIFT;
        if max == 0 || max > uapi::QHCA_FAST_REG_MAX_PAGES || u64::from(max) * 8 > room {
            return Err(EINVAL);
        }
        Ok(Self {
            list,
            max,
            mapped: AtomicU32::new(0),
        })
    }

    /// Bytes of list a region of `max` pages needs.
    pub(crate) fn list_bytes(max: u32) -> u64 {
        u64::from(max) * 8
    }

    /// A new mapping starts with pages of `page_size` bytes: only the device's page size.
    pub(crate) fn start(&self, page_size: u32) -> Result {
        if page_size != uapi::QHCA_PAGE_SIZE {
            return Err(EINVAL);
        }
        self.mapped.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// The next page of the mapping (`ib_sg_to_pages`' `set_page`): `ENOMEM` once the list
    /// is full, `EINVAL` for an address that is not page aligned.
    pub(crate) fn push(&self, addr: u64) -> Result {
        if addr % u64::from(uapi::QHCA_PAGE_SIZE) != 0 {
            return Err(EINVAL);
        }
        let n = self.mapped.load(Ordering::Relaxed);
        if n >= self.max {
            return Err(ENOMEM);
        }
        self.list.write64(addr, n as usize * 8);
        self.mapped.store(n + 1, Ordering::Release);
        Ok(())
    }

    /// The list's DMA address and the number of pages mapped, for a REG_MR WQE.
    pub(crate) fn pages(&self) -> (u64, u32) {
        (self.list.dma_address(), self.mapped.load(Ordering::Acquire))
    }
}
