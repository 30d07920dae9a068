// SPDX-License-Identifier: GPL-2.0

//! Memory regions: REG_MR of pinned, on-demand-paged ([`crate::odp`]) and watched
//! ([`crate::watch`]) regions, and ADVISE_MR; DEREG_MR goes through [`Verbs::destroy`], the
//! one of a region a rereg replaces too ([`Verbs::dereg_replaced`]).

use super::{position, Verbs};
use crate::{
    cmdq::Cmd,
    kverbs::ring::KRing,
    limits::Pool,
    odp::OdpMr,
    pagelist::{span_pages, PageList},
    shim::Umem,
    uapi,
    watch::WatchedMr,
};
use kernel::{prelude::*, sync::Arc};

/// A region's memory: pinned, on-demand paged, pinned and watched, none of the driver's (a
/// kernel context's physical region: DMA addresses the kernel's consumers mapped), or a
/// fast-registration region's page list.
pub(super) enum MrMem {
    Pinned(#[expect(dead_code, reason = "held: unpinned when dropped")] Umem),
    Odp(Arc<OdpMr>),
    Watched(Arc<WatchedMr>),
    Physical,
    /// A kernel context's fast-registration region: the page list its REG_MR WQEs name,
    /// which the device reads as long as the region exists.
    FastReg(#[expect(dead_code, reason = "held: the device reads it")] Arc<KRing>),
}

pub(super) struct Mr {
    pub(super) key: u32,
    pub(super) pdn: u32,
    pub(super) mem: MrMem,
}

impl Verbs<'_> {
    /// REG_MR as `a` describes it (its header and output fields ignored): pins the region and
    /// hands the device its translation, or registers an on-demand-paged
    /// ([`Verbs::reg_odp_mr`]) or watched ([`Verbs::reg_watched_mr`]) region. The region's key.
    pub(crate) fn reg_mr(&self, a: &uapi::qhca_ioc_reg_mr) -> Result<u32> {
        let writes = uapi::QHCA_ACCESS_REMOTE_WRITE | uapi::QHCA_ACCESS_REMOTE_ATOMIC;
        if a.rsvd != 0
            || a.access
                & !(uapi::QHCA_ACCESS_ALL
                    | uapi::QHCA_ACCESS_ON_DEMAND
                    | uapi::QHCA_ACCESS_WATCHED
                    | uapi::QHCA_ACCESS_MW_BIND)
                != 0
            || (a.access & writes != 0 && a.access & uapi::QHCA_ACCESS_LOCAL_WRITE == 0)
            || (a.access & uapi::QHCA_ACCESS_ON_DEMAND != 0
                && a.access & uapi::QHCA_ACCESS_WATCHED != 0)
            // Windows need a pinned region that stays until they are unbound.
            || (a.access & uapi::QHCA_ACCESS_MW_BIND != 0
                && a.access & (uapi::QHCA_ACCESS_ON_DEMAND | uapi::QHCA_ACCESS_WATCHED) != 0)
            || a.length == 0
        {
            return Err(EINVAL);
        }
        if a.access & uapi::QHCA_ACCESS_ON_DEMAND != 0 {
            return self.reg_odp_mr(a);
        }
        if a.length > self.dev.attr()?.max_mr_size {
            return Err(EINVAL);
        }
        // Limits before anything is allocated or pinned.
        span_pages(a.addr, a.length)?;
        position(&self.objs.lock().pds, |&p| p == a.pdn)?;
        if a.access & uapi::QHCA_ACCESS_WATCHED != 0 {
            return self.reg_watched_mr(a);
        }
        let writable = a.access & uapi::QHCA_ACCESS_LOCAL_WRITE != 0;
        let mut mem = Umem::pin(a.addr, a.length, writable)?;
        self.locked(|bound, objs| {
            position(&objs.pds, |&p| p == a.pdn)?;
            objs.mrs.reserve(1, GFP_KERNEL)?;
            mem.map(bound)?;
            let list = PageList::new(bound, &mem)?;
            let args = uapi::qhca_cmd_reg_mr {
                uar: self.uar.to_le(),
                pdn: a.pdn.to_le(),
                iova: a.addr.to_le(),
                length: a.length.to_le(),
                access: a.access.to_le(),
                npages: list.npages().to_le(),
                pages_addr: list.dma_address().to_le(),
            };
            let cmd = Cmd::new(uapi::QHCA_CMD_REG_MR).input_struct(&args);
            let key = self.charged(Pool::Mrs, || self.create(cmd, "key"))?;
            objs.mrs.push(
                Mr {
                    key,
                    pdn: a.pdn,
                    mem: MrMem::Pinned(mem),
                },
                GFP_KERNEL,
            )?;
            Ok(key)
        })
    }

    /// REG_MR of a watched pinned region (`QHCA_ACCESS_WATCHED`, see [`crate::watch`]): the
    /// notifier first (no lock held), its sequence, the pages pinned, then the region goes live
    /// only if no invalidation began since. The caller checked the argument.
    ///
    /// # Errors
    ///
    /// `EAGAIN` if the range changed while it was pinned; `EINVAL` for a range outside the
    /// address space; `ENOENT` for an unknown PD; what pinning and the device answer.
    fn reg_watched_mr(&self, a: &uapi::qhca_ioc_reg_mr) -> Result<u32> {
        let mr = WatchedMr::new(self.dev, self.ctx, self.uar, a.addr, a.length)?;
        let seq = mr.read_begin()?;
        let access = a.access & !uapi::QHCA_ACCESS_WATCHED;
        let mut mem = Umem::pin(
            a.addr,
            a.length,
            access & uapi::QHCA_ACCESS_LOCAL_WRITE != 0,
        )?;
        // On failure `mr` goes with its notifier; it never went live.
        self.locked(|bound, objs| {
            position(&objs.pds, |&p| p == a.pdn)?;
            objs.mrs.reserve(1, GFP_KERNEL)?;
            mem.map_pages(bound)?;
            let key = self.charged(Pool::Mrs, || mr.register(bound, a.pdn, access, mem, seq))?;
            // Cannot fail: room was reserved above.
            objs.mrs.push(
                Mr {
                    key,
                    pdn: a.pdn,
                    mem: MrMem::Watched(mr.clone()),
                },
                GFP_KERNEL,
            )?;
            Ok(key)
        })
    }

    /// REG_MR of an on-demand-paged region: nothing is pinned or charged to RLIMIT_MEMLOCK.
    /// `addr` 0 with `length` `u64::MAX` is the implicit region (the whole address space).
    ///
    /// # Errors
    ///
    /// `EOPNOTSUPP` if the device has no ODP (or no implicit ODP, for the implicit region);
    /// `EINVAL` for a range outside the process's address space or over `max_mr_size`;
    /// `ENOENT` for an unknown PD; what the device answers.
    fn reg_odp_mr(&self, a: &uapi::qhca_ioc_reg_mr) -> Result<u32> {
        let attr = self.dev.attr()?;
        let implicit = a.addr == 0 && a.length == u64::MAX;
        if attr.caps & u64::from(uapi::QHCA_CAP_ODP) == 0
            || attr.odp_general_caps & u64::from(uapi::QHCA_ODP_SUPPORT) == 0
            || (implicit && attr.odp_general_caps & u64::from(uapi::QHCA_ODP_SUPPORT_IMPLICIT) == 0)
        {
            return Err(EOPNOTSUPP);
        }
        let (start, end) = if implicit {
            (0, crate::shim::task_size())
        } else {
            let end = a.addr.checked_add(a.length).ok_or(EINVAL)?;
            if end > crate::shim::task_size() || a.length > attr.max_mr_size {
                return Err(EINVAL);
            }
            (a.addr, end)
        };
        position(&self.objs.lock().pds, |&p| p == a.pdn)?;
        // The notifier first, with no lock held (see `OdpMr::new`).
        let mr = OdpMr::new(
            self.dev, self.ctx, self.uar, a.pdn, a.access, start, end, implicit,
        )?;
        self.locked(|_, objs| {
            position(&objs.pds, |&p| p == a.pdn)?;
            objs.mrs.reserve(1, GFP_KERNEL)?;
            let key = self.charged(Pool::Mrs, || mr.register(self.dev))?;
            // Cannot fail: room was reserved above.
            objs.mrs.push(
                Mr {
                    key,
                    pdn: a.pdn,
                    mem: MrMem::Odp(mr),
                },
                GFP_KERNEL,
            )?;
            Ok(key)
        })
    }

    /// MODIFY_MR: region `key` of this context goes to PD `pdn` (this context's) with rights
    /// `access` (`QHCA_ACCESS_*` the device takes), under the same key; the caller checked
    /// that its memory allows them (writable only if pinned writable).
    ///
    /// # Errors
    ///
    /// `ENOENT` for a region or PD this context did not create; `EBUSY` while windows are
    /// bound to the region; `EINVAL` for rights the device refuses.
    pub(crate) fn modify_mr(&self, key: u32, pdn: u32, access: u32) -> Result {
        self.locked(|_, objs| {
            position(&objs.pds, |&p| p == pdn)?;
            let i = position(&objs.mrs, |m| m.key == key)?;
            let cmd = Cmd::new(uapi::QHCA_CMD_MODIFY_MR)
                .input(0, self.uar.into())
                .input(1, key.into())
                .input(2, pdn.into())
                .input(3, access.into());
            self.dev.exec(cmd)?;
            // The PD the region keeps busy from now on.
            objs.mrs[i].pdn = pdn;
            Ok(())
        })
    }

    /// DEREG_MR of region `key`, which a rereg replaced with a region registered already:
    /// without unbinding windows, so that a region with windows bound to it stays (the device
    /// answers BAD_STATE). On success the context forgot the region (its memory unpinned, its
    /// charge given back).
    ///
    /// # Errors
    ///
    /// `EBUSY` while windows are bound to the region; `ENOENT` for a key this context does not
    /// hold; what the device answers otherwise (the region then stays the context's, and is
    /// destroyed as any other).
    pub(crate) fn dereg_replaced(&self, key: u32) -> Result {
        self.destroy(uapi::QHCA_CMD_DEREG_MR, key, 0)
    }

    /// Prefetches `addr..addr + length` of the ODP region `lkey` (for writing if `write`), now
    /// (`flush`) or through the fault worker.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a pinned region, an empty range or one outside the region; `ENOENT` for an
    /// unknown key; `EFAULT` if a page cannot be faulted in (with `flush`); `EAGAIN` if too many
    /// prefetches are queued (without).
    pub(crate) fn advise_mr(
        &self,
        lkey: u32,
        addr: u64,
        length: u64,
        write: bool,
        flush: bool,
    ) -> Result {
        if length == 0 {
            return Err(EINVAL);
        }
        let mr = {
            let objs = self.objs.lock();
            let pos = position(&objs.mrs, |m| m.key == lkey)?;
            match &objs.mrs[pos].mem {
                MrMem::Odp(mr) => mr.clone(),
                MrMem::Pinned(_) | MrMem::Watched(_) | MrMem::Physical | MrMem::FastReg(_) => {
                    return Err(EINVAL)
                }
            }
        };
        if !mr.contains(addr, length) {
            return Err(EINVAL);
        }
        if flush {
            mr.prefetch(self.dev, addr, length, write)
        } else {
            mr.prefetch_async(self.dev, addr, length, write)
        }
    }
}
