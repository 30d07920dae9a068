// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Watched pinned regions (`QHCA_ACCESS_WATCHED`): the building block of the registration cache
//! ([`crate::RegCache`]). [`WatchedMr`] says what they are and what is safe.

use std::sync::Arc;

use qhca_uapi::{qhca_ioc_handle, qhca_ioc_reg_mr};

use crate::error::{Errno, Error, Result};
use crate::pd::{Access, Pd, PdInner};
use crate::request::Request;
use crate::wqe::{region_contains, Sge};

/// How many times a registration is tried while the driver reports that the range changed
/// while it was being pinned (`EAGAIN`).
const EAGAIN_TRIES: usize = 4;

/// A watched pinned region, for registration caches. Dropping it deregisters it.
///
/// A watched region is pinned like any other ([`crate::Pd::reg_mr`]): the device reaches its
/// pages without faults. In addition the driver watches the range in this process's address
/// space (an MMU interval notifier). When the mapping of any of its pages changes (`munmap`,
/// `mremap`, `madvise(MADV_DONTNEED)`, `mprotect`, a new mapping at the same address, `fork`,
/// migration), the driver *revokes* the region before the change goes on: the device forgets
/// the key (a work request naming it completes in error and reaches no page), the pages are
/// unpinned, and the key is published on the context's invalidation page
/// ([`crate::InvalPage`]). The key stays this process's handle until it is deregistered
/// (dropping the region), which then always succeeds. Keys are never reused.
///
/// # What is safe
///
/// The revocation is what removes the lifetime concern of pinned regions: the device never
/// reaches memory after the process has given it back, so freeing or unmapping memory under a
/// live watched region is fine, and no watched region has a lifetime parameter. What remains is
/// what the device may *write*, as for on-demand regions (see [`crate::OdpMr`]):
///
/// - a region the device only reads ([`Access::writes`] false) is registered with the safe
///   [`Pd::reg_watched_mr`], over any memory;
/// - a writable region is registered with the `unsafe` [`Pd::reg_watched_mr_raw`], whose caller
///   promises that the device never writes bytes that Rust references.
///
/// Memory that is freed is not necessarily unmapped: an allocator may keep the pages and hand
/// them out again, and the region stays live over them. That is why the promise for a writable
/// region is about the whole time it is registered, not about the memory's owner.
///
/// # Invariants
///
/// If the region may write (its access has a write right), its creator promised (an `unsafe`
/// registration) not to let the device write bytes that Rust code references.
#[derive(Debug)]
pub struct WatchedMr {
    pd: Arc<PdInner>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
    access: Access,
    registered: bool,
}

impl Pd {
    /// Registers `len` bytes at `addr` as a watched pinned region the device only reads
    /// (`access` without `LOCAL_WRITE`, `REMOTE_WRITE` or `REMOTE_ATOMIC`). The range must be
    /// mapped (it is pinned now). Retries a few times while the range changes during pinning.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a writable `access` (see [`Pd::reg_watched_mr_raw`]), a flag that
    /// is not a right, or an empty range; `EFAULT` (or `EPERM`) if part of the range is not
    /// mapped (or cannot be pinned); `ENOMEM` over `RLIMIT_MEMLOCK`; `EAGAIN` if the range kept
    /// changing; `EINVAL` from a driver without watched regions.
    pub fn reg_watched_mr(&self, addr: *const u8, len: usize, access: Access) -> Result<WatchedMr> {
        if access.writes() {
            return Err(Error::Invalid {
                what: "reg_watched_mr with a write right (the unsafe _raw variant takes those)"
                    .into(),
            });
        }
        self.reg_watched(addr as u64, len, access)
    }

    /// Registers `len` bytes at `addr` as a watched pinned region with any rights.
    ///
    /// # Safety
    ///
    /// Until the region is deregistered (or revoked), the device may write, at any moment, any
    /// byte of the range: where this process's own work requests direct it (receive buffers,
    /// READ responses, atomic results) with `LOCAL_WRITE`, and where any peer holding the rkey
    /// directs it with `REMOTE_WRITE` or `REMOTE_ATOMIC`. The caller must ensure that no such
    /// write lands on bytes that Rust code references (`&`/`&mut`, including those inside live
    /// values), or reads or writes with non-volatile accesses concurrently: treat the range as
    /// memory another thread stores to through raw pointers. This covers memory that is freed
    /// and reused without being unmapped (an allocator's), since the region stays live over it.
    /// For `LOCAL_WRITE` alone, it is enough that the caller's own work requests point only at
    /// such bytes and that the key is not handed to peers.
    ///
    /// Unlike [`Pd::reg_mr_raw`], nothing is promised about lifetime: the memory may be
    /// unmapped or remapped while registered (the driver revokes the region first).
    pub unsafe fn reg_watched_mr_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<WatchedMr> {
        self.reg_watched(addr as u64, len, access)
    }

    fn reg_watched(&self, addr: u64, len: usize, access: Access) -> Result<WatchedMr> {
        if len == 0 {
            return Err(Error::Invalid {
                what: "watched region of 0 bytes".into(),
            });
        }
        if !Access::ALL.contains(access) {
            return Err(Error::Invalid {
                what: format!(
                    "watched region with access {:#x}: not only rights",
                    access.0
                ),
            });
        }
        let mut tries = 0;
        loop {
            let mut req = qhca_ioc_reg_mr::request();
            req.pdn = self.inner.pdn;
            req.access = (access | Access::WATCHED).0;
            req.addr = addr;
            req.length = len as u64;
            match self.inner.ctx.cmd_reg_mr(&mut req) {
                Ok(()) => {
                    // INVARIANT: the caller's promise for a writable range.
                    return Ok(WatchedMr {
                        pd: self.inner.clone(),
                        lkey: req.lkey,
                        rkey: req.rkey,
                        addr,
                        len,
                        access: access | Access::WATCHED,
                        registered: true,
                    });
                }
                Err(e) if e.errno() == Some(Errno::EAGAIN) && tries + 1 < EAGAIN_TRIES => {
                    tries += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl WatchedMr {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The first byte's address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true (a region has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rights, with [`Access::WATCHED`].
    pub fn access(&self) -> Access {
        self.access
    }

    /// True if `[addr, addr + len)` is inside the region.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        region_contains(self.addr, self.len as u64, addr, len)
    }

    /// An SGE of `len` bytes at the virtual address `addr`. Panics if outside the region.
    pub fn sge(&self, addr: u64, len: u32) -> Sge {
        let inside = self.contains(addr, u64::from(len));
        let region = (self.addr, self.len as u64);
        Sge::in_region(inside, "watched region", region, self.lkey, addr, len)
    }

    /// Deregisters now and reports the outcome (dropping does the same silently). A revoked
    /// region deregisters successfully.
    pub fn dereg(mut self) -> Result<()> {
        self.dereg_inner()
    }

    fn dereg_inner(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.registered, false) {
            return Ok(());
        }
        let mut req = qhca_ioc_handle::request();
        req.handle = self.lkey;
        self.pd.ctx.cmd_dereg_mr(&mut req)
    }
}

impl Drop for WatchedMr {
    fn drop(&mut self) {
        // Nothing to leak on failure: the region owns no memory, and the driver still revokes
        // it before the memory goes back to the system.
        let _ = self.dereg_inner();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Context;

    #[test]
    fn refuses_what_it_cannot_register_safely() {
        let ctx = Arc::new(Context::open_unchecked(std::path::Path::new("/dev/null")).unwrap());
        let pd = Pd::fake(&ctx, 1);
        let buf = [0u8; 64];
        for bad in [Access::LOCAL_WRITE, Access::REMOTE_ATOMIC, Access::ALL] {
            assert!(matches!(
                pd.reg_watched_mr(buf.as_ptr(), 64, bad),
                Err(Error::Invalid { .. })
            ));
        }
        assert!(matches!(
            pd.reg_watched_mr(buf.as_ptr(), 64, Access::ON_DEMAND),
            Err(Error::Invalid { .. })
        ));
        assert!(matches!(
            pd.reg_watched_mr(buf.as_ptr(), 0, Access::REMOTE_READ),
            Err(Error::Invalid { .. })
        ));
        // A fine request reaches the driver (here: ENOTTY from /dev/null).
        assert!(matches!(
            pd.reg_watched_mr(buf.as_ptr(), 64, Access::REMOTE_READ),
            Err(Error::Ioctl { op: "REG_MR", .. })
        ));
    }
}
