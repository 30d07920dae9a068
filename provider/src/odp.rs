// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! On-demand-paged memory regions (`QHCA_ACCESS_ON_DEMAND`).
//!
//! An ODP region pins nothing and charges nothing to `RLIMIT_MEMLOCK`. The device follows the
//! process's page tables: a page is reached only once the driver has mapped it for the device,
//! on the device's first access (a page fault the driver resolves as the CPU would, then the QP
//! goes on) or ahead of it ([`OdpMr::advise`]), and every change of the page tables (`munmap`,
//! `madvise(MADV_DONTNEED)`, `mremap`, a copy-on-write after `fork`, migration, swap) takes the
//! page away from the device first. An access to an address that is not mapped (or not writable,
//! for a write) fails the work request with a protection error; it never reaches memory that is
//! not the process's.
//!
//! # What is safe, and why registering may be `unsafe`
//!
//! Pinned regions ([`crate::Pd::reg_mr`]) promise two things: that the memory outlives the
//! registration, and that nothing touches it but the region. ODP removes the first concern
//! entirely: freeing, unmapping or remapping the memory of a live ODP region is fine (the device
//! loses the pages before the kernel reuses them, and later accesses fail), so no ODP region has
//! a lifetime parameter or a deregistration contract.
//!
//! What remains is what the device may *write*. A device write lands exactly where a store by
//! this process to the same virtual address would (never a page the process does not have
//! mapped writable), and like such a store it is invisible to the compiler: if Rust code holds a
//! reference to those bytes, or reads them with ordinary loads while the device writes, that is
//! a data race. So:
//!
//! - A region the device only reads ([`Access::writes`] false: no `LOCAL_WRITE`,
//!   `REMOTE_WRITE` or `REMOTE_ATOMIC`) is registered with a safe function,
//!   [`crate::Pd::reg_odp_mr`] or [`crate::Pd::reg_odp_implicit`], over any range: a device
//!   read of memory Rust is writing is outside the program and cannot break it. (It is a
//!   disclosure decision: with `REMOTE_READ`, any peer that has the key reads that range, for
//!   the implicit region the whole address space.)
//! - A region over memory it owns ([`crate::Pd::reg_odp_buf`]) is safe with any rights: the
//!   memory is never referenced, only copied in and out, as for [`crate::MrBuf`].
//! - A writable region over memory the caller names ([`crate::Pd::reg_odp_mr_raw`],
//!   [`crate::Pd::reg_odp_implicit_raw`]) is `unsafe`: the caller promises not to let the device
//!   write bytes that Rust references (see their `# Safety`). Nothing about the memory's
//!   lifetime.

use std::sync::Arc;

use qhca_uapi::{
    qhca_ioc_advise_mr, qhca_ioc_handle, qhca_ioc_reg_mr, QHCA_ADVISE_FLAG_FLUSH,
    QHCA_ADVISE_PREFETCH, QHCA_ADVISE_PREFETCH_WRITE,
};

use crate::error::{Error, Result};
use crate::mem::{volatile_copy_from, volatile_copy_to, PageBuf};
use crate::pd::{Access, Pd, PdInner};
use crate::request::Request;
use crate::wqe::{region_contains, Sge};

/// What [`OdpMr::advise`] asks for (`ibv_advise_mr()`'s advice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Advice {
    /// Map the pages for the device to read (`QHCA_ADVISE_PREFETCH`).
    Prefetch,
    /// Map them writable (`QHCA_ADVISE_PREFETCH_WRITE`): the pages are faulted in for writing
    /// (a copy-on-write page is copied now).
    PrefetchWrite,
}

/// An on-demand-paged memory region: see the [module documentation](self).
///
/// It names a range of this process's address space (or all of it: [`OdpMr::is_implicit`]),
/// not memory it owns, except [`crate::Pd::reg_odp_buf`]'s, which it owns and unmaps after a
/// successful deregistration (leaks after a failed one). Dropping it deregisters it.
///
/// # Invariants
///
/// If the region may write (its access has a write right) and `buf` is `None`, the creator
/// promised (an `unsafe` registration) not to let the device write bytes that Rust code
/// references; if `buf` is `Some`, the range is that buffer, reached only through copies.
#[derive(Debug)]
pub struct OdpMr {
    pd: Arc<PdInner>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    /// `u64::MAX` for the implicit region.
    len: u64,
    access: Access,
    buf: Option<PageBuf>,
    registered: bool,
}

impl Pd {
    /// Registers `len` bytes at `addr` as an on-demand-paged region the device only reads
    /// (`access` without `LOCAL_WRITE`, `REMOTE_WRITE` or `REMOTE_ATOMIC`). Nothing is pinned;
    /// the range need not be mapped yet (an access to an unmapped page fails at that time).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a writable `access` (see [`Pd::reg_odp_mr_raw`]) or an empty range;
    /// `EOPNOTSUPP` if the device has no ODP; `EINVAL` for a range outside the address space.
    pub fn reg_odp_mr(&self, addr: *const u8, len: usize, access: Access) -> Result<OdpMr> {
        refuse_writes(access, "reg_odp_mr")?;
        self.reg_odp(addr as u64, len as u64, access, None)
    }

    /// Registers `len` bytes at `addr` as an on-demand-paged region with any rights.
    ///
    /// # Safety
    ///
    /// While the region is registered, the device may write, at any moment, any byte of the
    /// range that this process has mapped writable: where this process's own work requests
    /// direct it (receive buffers, READ responses, atomic results) with `LOCAL_WRITE`, and where
    /// any peer holding the rkey directs it with `REMOTE_WRITE` or `REMOTE_ATOMIC`. The caller
    /// must ensure that no such write lands on bytes that Rust code references (`&`/`&mut`,
    /// including those inside live values), or reads or writes with non-volatile accesses
    /// concurrently: treat the range as memory another thread stores to through raw pointers.
    /// For `LOCAL_WRITE` alone, it is enough that the caller's own work requests point only at
    /// such bytes and that the region's key is not handed to peers.
    ///
    /// Unlike [`Pd::reg_mr_raw`], nothing is promised about lifetime: the memory may be freed,
    /// unmapped or remapped while registered.
    pub unsafe fn reg_odp_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<OdpMr> {
        self.reg_odp(addr as u64, len as u64, access, None)
    }

    /// Registers the implicit region, one key for this process's whole address space, for the
    /// device to read only (`access` without a write right). The [`OdpMr::sge`] of any address
    /// works with it.
    ///
    /// # Errors
    ///
    /// As [`Pd::reg_odp_mr`]; `EOPNOTSUPP` if the device has no implicit ODP.
    pub fn reg_odp_implicit(&self, access: Access) -> Result<OdpMr> {
        refuse_writes(access, "reg_odp_implicit")?;
        self.reg_odp(0, u64::MAX, access, None)
    }

    /// Registers the implicit region with any rights.
    ///
    /// # Safety
    ///
    /// As [`Pd::reg_odp_mr_raw`], for every address of the process.
    pub unsafe fn reg_odp_implicit_raw(&self, access: Access) -> Result<OdpMr> {
        self.reg_odp(0, u64::MAX, access, None)
    }

    /// Registers `len` bytes of fresh memory it owns (zeroed, page aligned, never touched, so
    /// not even allocated until the CPU or the device first uses a page) as an on-demand-paged
    /// region with any rights. Safe: the memory is reached only through the region's copying
    /// accessors ([`OdpMr::read_at`], [`OdpMr::write_at`]).
    pub fn reg_odp_buf(&self, len: usize, access: Access) -> Result<OdpMr> {
        let buf = PageBuf::new(len)?;
        let addr = buf.as_ptr() as u64;
        self.reg_odp(addr, len.max(1) as u64, access, Some(buf))
    }

    fn reg_odp(&self, addr: u64, len: u64, access: Access, buf: Option<PageBuf>) -> Result<OdpMr> {
        if len == 0 {
            return Err(Error::Invalid {
                what: "ODP region of 0 bytes".into(),
            });
        }
        let mut req = qhca_ioc_reg_mr::request();
        req.pdn = self.inner.pdn;
        req.access = (access | Access::ON_DEMAND).0;
        req.addr = addr;
        req.length = len;
        // A failed registration: `buf`, if any, is dropped (the device never knew it).
        self.inner.ctx.cmd_reg_mr(&mut req)?;
        // INVARIANT: the caller's promise for a writable borrowed range, or `buf` owns it.
        Ok(OdpMr {
            pd: self.inner.clone(),
            lkey: req.lkey,
            rkey: req.rkey,
            addr,
            len,
            access: access | Access::ON_DEMAND,
            buf,
            registered: true,
        })
    }
}

fn refuse_writes(access: Access, what: &str) -> Result<()> {
    if access.writes() {
        return Err(Error::Invalid {
            what: format!("{what} with a write right (the unsafe _raw variant takes those)"),
        });
    }
    Ok(())
}

impl OdpMr {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The first address (0 for the implicit region).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes covered (`u64::MAX` for the implicit region).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True for the implicit region (the whole address space).
    pub fn is_implicit(&self) -> bool {
        self.addr == 0 && self.len == u64::MAX
    }

    /// The rights, with [`Access::ON_DEMAND`].
    pub fn access(&self) -> Access {
        self.access
    }

    /// True if `[addr, addr + len)` is inside the region.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        self.is_implicit() || region_contains(self.addr, self.len, addr, len)
    }

    /// An SGE of `len` bytes at the virtual address `addr`. Panics if outside the region.
    pub fn sge(&self, addr: u64, len: u32) -> Sge {
        let inside = self.contains(addr, u64::from(len));
        Sge::in_region(
            inside,
            "ODP region",
            (self.addr, self.len),
            self.lkey,
            addr,
            len,
        )
    }

    /// An SGE of `len` bytes at `offset` from the region's start.
    pub fn sge_at(&self, offset: u64, len: u32) -> Sge {
        self.sge(self.addr + offset, len)
    }

    /// `ADVISE_MR` (`ibv_advise_mr()`): maps `[addr, addr + len)` into the device
    /// ahead of use, so that the first access does not fault. With `flush` it returns once the
    /// pages are mapped, else it queues the work and returns at once.
    ///
    /// # Errors
    ///
    /// `EINVAL` for a range outside the region, `EFAULT` if a page is not mapped (or not
    /// writable for [`Advice::PrefetchWrite`]; with `flush` only), `EAGAIN` when too much is
    /// queued.
    pub fn advise(&self, advice: Advice, addr: u64, len: u64, flush: bool) -> Result<()> {
        let mut req = qhca_ioc_advise_mr::request();
        req.lkey = self.lkey;
        req.advice = match advice {
            Advice::Prefetch => QHCA_ADVISE_PREFETCH,
            Advice::PrefetchWrite => QHCA_ADVISE_PREFETCH_WRITE,
        };
        req.flags = if flush { QHCA_ADVISE_FLAG_FLUSH } else { 0 };
        req.addr = addr;
        req.length = len;
        self.pd.ctx.cmd_advise_mr(&mut req)
    }

    fn owned(&self, offset: usize, len: usize) -> &PageBuf {
        let buf = self
            .buf
            .as_ref()
            .expect("read_at/write_at are for regions from reg_odp_buf");
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|e| e as u64 <= self.len),
            "{offset}+{len} outside a region of {} bytes",
            self.len
        );
        buf
    }

    /// Copies bytes out of a [`Pd::reg_odp_buf`] region. Panics for another kind of region or
    /// out of bounds.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) {
        let buf = self.owned(offset, out.len());
        // SAFETY: in bounds (checked) of the buffer this region owns, mapped while `self` lives
        // and covered by no Rust reference (type invariant: reached only through these copies);
        // the device may write it concurrently, which volatile loads allow
        // (`volatile_copy_from`); no Rust thread writes it now (writes take `&mut self`); `out`
        // is ours, outside the buffer.
        unsafe { volatile_copy_from(buf.as_ptr().add(offset), out) }
    }

    /// The `len` bytes at `offset` of a [`Pd::reg_odp_buf`] region, copied.
    pub fn to_vec(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read_at(offset, &mut v);
        v
    }

    /// Copies `data` into a [`Pd::reg_odp_buf`] region.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) {
        let buf = self.owned(offset, data.len());
        // SAFETY: as for `read_at`; `&mut self` excludes every other access through Rust, so no
        // other thread touches the range during the copy.
        unsafe { volatile_copy_to(data, buf.as_ptr().add(offset)) }
    }

    /// Deregisters now and reports the outcome (dropping does the same silently). Owned memory
    /// is unmapped after a success and leaked after a failure.
    pub fn dereg(mut self) -> Result<()> {
        self.dereg_inner()
    }

    fn dereg_inner(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.registered, false) {
            return Ok(());
        }
        let mut req = qhca_ioc_handle::request();
        req.handle = self.lkey;
        let r = self.pd.ctx.cmd_dereg_mr(&mut req);
        if r.is_err() {
            // The device may still reach owned memory: never unmap it.
            if let Some(b) = self.buf.take() {
                b.leak();
            }
        }
        r
    }
}

impl Drop for OdpMr {
    fn drop(&mut self) {
        // A failure leaks owned memory (in `dereg_inner`); borrowed ranges need nothing: the
        // device loses their pages whenever they change.
        let _ = self.dereg_inner();
    }
}
