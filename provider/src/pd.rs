// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Protection domains and memory regions.

use std::marker::PhantomData;
use std::sync::Arc;

use qhca_uapi::{
    qhca_ioc_handle, qhca_ioc_reg_mr, QHCA_ACCESS_LOCAL_WRITE, QHCA_ACCESS_REMOTE_ATOMIC,
    QHCA_ACCESS_REMOTE_READ, QHCA_ACCESS_REMOTE_WRITE,
};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::mem::PageBuf;
use crate::sys::{self, Request};
use crate::wqe::Sge;

/// Access rights of a memory region, or of a QP as responder (`QHCA_ACCESS_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Access(pub u32);

impl Access {
    /// Local reads only.
    pub const NONE: Access = Access(0);
    /// The device may write (receives, READ responses, atomic results).
    pub const LOCAL_WRITE: Access = Access(QHCA_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA WRITE (needs LOCAL_WRITE).
    pub const REMOTE_WRITE: Access = Access(QHCA_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA READ.
    pub const REMOTE_READ: Access = Access(QHCA_ACCESS_REMOTE_READ);
    /// Peers may use atomics (needs LOCAL_WRITE).
    pub const REMOTE_ATOMIC: Access = Access(QHCA_ACCESS_REMOTE_ATOMIC);
    /// Everything.
    pub const ALL: Access = Access(
        QHCA_ACCESS_LOCAL_WRITE
            | QHCA_ACCESS_REMOTE_WRITE
            | QHCA_ACCESS_REMOTE_READ
            | QHCA_ACCESS_REMOTE_ATOMIC,
    );

    /// True if every bit of `other` is set.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

#[derive(Debug)]
pub(crate) struct PdInner {
    pub(crate) ctx: Arc<Context>,
    pub(crate) pdn: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let mut req = qhca_ioc_handle::request();
        req.handle = self.pdn;
        // Nothing of ours is in a PD: a failure (device gone) leaves nothing to protect.
        let _ = self.ctx.ioctl("DEALLOC_PD", sys::dealloc_pd, &mut req);
    }
}

/// A protection domain. Clones share the device object, which is freed when the last clone,
/// [`Mr`] and [`crate::Qp`] of it are gone (they hold a reference), so a PD is never freed under
/// its users through this API.
#[derive(Clone, Debug)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    /// `QHCA_IOCTL_ALLOC_PD`.
    pub fn new(ctx: &Arc<Context>) -> Result<Pd> {
        let mut req = qhca_ioc_handle::request();
        ctx.ioctl("ALLOC_PD", sys::alloc_pd, &mut req)?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                pdn: req.handle,
            }),
        })
    }

    /// A PD no device knows, for host tests.
    #[cfg(test)]
    pub(crate) fn fake(ctx: &Arc<Context>, pdn: u32) -> Pd {
        Pd {
            inner: Arc::new(PdInner {
                ctx: ctx.clone(),
                pdn,
            }),
        }
    }

    /// The device's PD number.
    pub fn pdn(&self) -> u32 {
        self.inner.pdn
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Arc<Context> {
        &self.inner.ctx
    }

    /// Registers `buf`: the region borrows it mutably until it is dropped (deregistered), so the
    /// buffer can be neither freed nor touched by safe code while the device may reach it. Read
    /// and write it through [`Mr::read_at`] / [`Mr::write_at`].
    ///
    /// ```no_run
    /// # fn f(pd: &qhca::Pd) -> qhca::Result<()> {
    /// let mut buf = vec![0u8; 64];
    /// let mr = pd.reg_mr(&mut buf, qhca::Access::LOCAL_WRITE)?;
    /// mr.write_at(0, b"x");
    /// drop(mr); // deregistered: the buffer is ours again
    /// buf[0] = 1;
    /// # Ok(()) }
    /// ```
    ///
    /// The buffer cannot be freed while registered:
    ///
    /// ```compile_fail,E0597
    /// # fn f(pd: &qhca::Pd) -> qhca::Result<()> {
    /// let mr = {
    ///     let mut buf = vec![0u8; 64];
    ///     pd.reg_mr(&mut buf, qhca::Access::LOCAL_WRITE)?
    /// };
    /// mr.write_at(0, b"x");
    /// # Ok(()) }
    /// ```
    ///
    /// nor touched through its own name:
    ///
    /// ```compile_fail,E0503
    /// # fn f(pd: &qhca::Pd) -> qhca::Result<()> {
    /// let mut buf = [0u8; 64];
    /// let mr = pd.reg_mr(&mut buf, qhca::Access::LOCAL_WRITE)?;
    /// buf[0] = 1;
    /// mr.write_at(0, b"x");
    /// # Ok(()) }
    /// ```
    pub fn reg_mr<'buf>(&self, buf: &'buf mut [u8], access: Access) -> Result<Mr<'buf>> {
        // SAFETY: the borrow `'buf` is held by the returned `Mr` (PhantomData), so the memory
        // stays allocated and unused by safe code until it is deregistered.
        unsafe { self.reg_mr_raw(buf.as_mut_ptr(), buf.len(), access) }
    }

    /// Registers memory it owns: `len` bytes, page-aligned, zeroed.
    pub fn reg_mr_buf(&self, len: usize, access: Access) -> Result<MrBuf> {
        let mem = PageBuf::new(len)?;
        // SAFETY: `mem` is moved into the returned `MrBuf`, which deregisters before it unmaps
        // (and leaks the memory if deregistration fails).
        let mr = unsafe { self.reg_mr_raw(mem.as_ptr(), len.max(1), access)? };
        Ok(MrBuf {
            mr: Some(mr),
            mem: Some(mem),
        })
    }

    /// Registers `len` bytes at `addr` (any alignment).
    ///
    /// # Safety
    ///
    /// The memory must stay mapped and must not be reused for anything else until the returned
    /// region is dropped (deregistered): the device may write it at any time until then.
    pub unsafe fn reg_mr_raw<'a>(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Mr<'a>> {
        if len == 0 {
            return Err(Error::Invalid {
                what: "memory region of 0 bytes".into(),
            });
        }
        let mut req = qhca_ioc_reg_mr::request();
        req.pdn = self.inner.pdn;
        req.access = access.0;
        req.addr = addr as u64;
        req.length = len as u64;
        self.inner.ctx.ioctl("REG_MR", sys::reg_mr, &mut req)?;
        Ok(Mr {
            pd: self.inner.clone(),
            lkey: req.lkey,
            rkey: req.rkey,
            addr,
            len,
            access,
            deregistered: false,
            _buf: PhantomData,
        })
    }
}

/// A registered memory region over a borrowed buffer.
///
/// # Invariants
///
/// `addr..addr + len` is memory the caller of [`Pd::reg_mr_raw`] keeps alive and unused for
/// `'buf` (for [`Pd::reg_mr`], a `&'buf mut [u8]` this value holds).
///
/// What the types cannot enforce: the device may write the region (receives, READ responses,
/// atomics, a peer's WRITE) at any moment, so [`Mr::read_at`] may see a write in progress; read
/// what a completion said is complete.
#[derive(Debug)]
pub struct Mr<'buf> {
    pd: Arc<PdInner>,
    lkey: u32,
    rkey: u32,
    addr: *mut u8,
    len: usize,
    access: Access,
    deregistered: bool,
    _buf: PhantomData<&'buf mut [u8]>,
}

// SAFETY: the region is plain memory reached only through raw-pointer copies; the borrow it
// stands for (`&mut [u8]`) is itself Send.
unsafe impl Send for Mr<'_> {}
// SAFETY: `&Mr` only copies in and out through raw pointers (the same as the device does).
unsafe impl Sync for Mr<'_> {}

impl Mr<'_> {
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
        self.addr as u64
    }
    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Never true (a region has at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The rights it was registered with.
    pub fn access(&self) -> Access {
        self.access
    }
    /// The PD number it belongs to.
    pub fn pdn(&self) -> u32 {
        self.pd.pdn
    }

    /// An SGE for `len` bytes at `offset`. Panics if that is outside the region.
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        assert!(
            offset
                .checked_add(len as usize)
                .is_some_and(|e| e <= self.len),
            "SGE {offset}+{len} outside a region of {} bytes",
            self.len
        );
        Sge {
            addr: self.addr as u64 + offset as u64,
            length: len,
            lkey: self.lkey,
        }
    }

    fn check(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len),
            "{offset}+{len} outside a region of {} bytes",
            self.len
        );
    }

    /// Copies `out.len()` bytes at `offset` out of the region. Panics if out of bounds.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: in bounds (checked) of memory alive for 'buf (invariant); `out` is ours and
        // cannot overlap the region, which safe code cannot reach while it is registered.
        unsafe { std::ptr::copy_nonoverlapping(self.addr.add(offset), out.as_mut_ptr(), out.len()) }
    }

    /// Copies `data` into the region at `offset`. Panics if out of bounds.
    pub fn write_at(&self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        // SAFETY: as for `read_at`, in the other direction.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.addr.add(offset), data.len()) }
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) {
        self.check(offset, len);
        // SAFETY: as for `write_at`.
        unsafe { std::ptr::write_bytes(self.addr.add(offset), byte, len) }
    }

    /// The `len` bytes at `offset`, copied.
    pub fn to_vec(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read_at(offset, &mut v);
        v
    }

    /// Reads the little-endian u64 at `offset` (8-aligned in memory) with one load, as an atomic
    /// result is read.
    pub fn read_u64(&self, offset: usize) -> u64 {
        self.check(offset, 8);
        // SAFETY: in bounds (checked) of memory alive for 'buf; `[u8; 8]` has alignment 1;
        // volatile because the device, not Rust, writes it.
        u64::from_le_bytes(unsafe {
            std::ptr::read_volatile(self.addr.add(offset).cast::<[u8; 8]>())
        })
    }

    /// Loads the byte at `offset` with one volatile load, for spinning on a flag a peer's WRITE
    /// sets (perftest's write_lat does that with the last byte of the message).
    pub fn load_u8(&self, offset: usize) -> u8 {
        self.check(offset, 1);
        // SAFETY: in bounds (checked) of memory alive for 'buf; volatile, so every call loads.
        unsafe { std::ptr::read_volatile(self.addr.add(offset)) }
    }

    /// Writes `v` little-endian at `offset`.
    pub fn write_u64(&self, offset: usize, v: u64) {
        self.write_at(offset, &v.to_le_bytes());
    }

    /// Deregisters now, reporting failure (dropping does the same and ignores it).
    pub fn dereg(mut self) -> Result<()> {
        self.dereg_inner()
    }

    fn dereg_inner(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.deregistered, true) {
            return Ok(());
        }
        let mut req = qhca_ioc_handle::request();
        req.handle = self.lkey;
        self.pd.ctx.ioctl("DEREG_MR", sys::dereg_mr, &mut req)
    }
}

impl Drop for Mr<'_> {
    fn drop(&mut self) {
        // A failure here (only ENODEV: the device is gone and the driver has released it) cannot
        // be reported; see the type's documentation.
        let _ = self.dereg_inner();
    }
}

/// A memory region over memory it owns (page-aligned, zeroed): nothing to borrow, nothing to
/// outlive. Derefs to [`Mr`].
#[derive(Debug)]
pub struct MrBuf {
    // Deregistered before the memory is unmapped.
    mr: Option<Mr<'static>>,
    mem: Option<PageBuf>,
}

impl std::ops::Deref for MrBuf {
    type Target = Mr<'static>;
    fn deref(&self) -> &Mr<'static> {
        self.mr.as_ref().expect("present until drop")
    }
}

impl Drop for MrBuf {
    fn drop(&mut self) {
        let ok = self.mr.take().is_none_or(|mr| mr.dereg().is_ok());
        if let Some(mem) = self.mem.take() {
            if ok {
                drop(mem);
            } else {
                // The device may still reach it: never let the addresses be reused.
                mem.leak();
            }
        }
    }
}
