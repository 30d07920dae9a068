// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Protection domains and memory regions.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use qhca_uapi::{
    qhca_ioc_handle, qhca_ioc_reg_mr, QHCA_ACCESS_LOCAL_WRITE, QHCA_ACCESS_MW_BIND,
    QHCA_ACCESS_ON_DEMAND, QHCA_ACCESS_REMOTE_ATOMIC, QHCA_ACCESS_REMOTE_READ,
    QHCA_ACCESS_REMOTE_WRITE, QHCA_ACCESS_WATCHED, QHCA_DEREG_MR_UNBIND_MWS,
};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::mem::{volatile_copy_from, volatile_copy_to, volatile_fill, PageBuf};
use crate::request::Request;
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
    /// Not a right: the region is on-demand paged ([`crate::OdpMr`]; `QHCA_ACCESS_ON_DEMAND`).
    /// The ODP registrations set it themselves.
    pub const ON_DEMAND: Access = Access(QHCA_ACCESS_ON_DEMAND);
    /// Not a right: the pinned region is watched for a registration cache ([`crate::WatchedMr`];
    /// `QHCA_ACCESS_WATCHED`). The watched registrations set it themselves.
    pub const WATCHED: Access = Access(QHCA_ACCESS_WATCHED);
    /// Memory windows may be bound to the region ([`crate::Mw`]; `IBV_ACCESS_MW_BIND`). Pinned
    /// regions only.
    pub const MW_BIND: Access = Access(QHCA_ACCESS_MW_BIND);
    /// Every right (not [`Access::ON_DEMAND`], [`Access::WATCHED`] nor [`Access::MW_BIND`]).
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

    /// True if a region with these rights may be written by the device (`LOCAL_WRITE`,
    /// `REMOTE_WRITE` or `REMOTE_ATOMIC`).
    pub fn writes(self) -> bool {
        self.0 & (QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_ATOMIC)
            != 0
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
        let _ = self.ctx.cmd_dealloc_pd(&mut req);
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
    /// `ALLOC_PD`.
    pub fn new(ctx: &Arc<Context>) -> Result<Pd> {
        let mut req = qhca_ioc_handle::request();
        ctx.cmd_alloc_pd(&mut req)?;
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

    /// Registers memory it owns: `len` bytes (at least 1), page-aligned, zeroed. Safe under any
    /// use of the returned region, `mem::forget` included: the memory is unmapped only after
    /// a successful deregistration, and leaked otherwise.
    pub fn reg_mr_buf(&self, len: usize, access: Access) -> Result<MrBuf> {
        let mem = PageBuf::new(len)?;
        // SAFETY: `mem` is moved into the returned region, which unmaps it only after a
        // successful deregistration (and leaks it otherwise); a forgotten region leaks it.
        unsafe { self.reg(mem.as_ptr(), len.max(1), access, Backing::Pages(mem)) }
    }

    /// Registers a buffer it takes ownership of (a `Vec<u8>` or `Box<[u8]>`, of at least one
    /// byte). [`Mr::into_box`] hands it back once it is deregistered; if deregistration fails
    /// (the device may still write it) it is leaked instead, never freed. Safe under any use of
    /// the returned region, `mem::forget` included (which leaks it).
    ///
    /// ```no_run
    /// # fn f(pd: &qhca::Pd) -> qhca::Result<()> {
    /// let mut mr = pd.reg_mr_box(vec![0u8; 64], qhca::Access::LOCAL_WRITE)?;
    /// mr.write_at(0, b"x");
    /// let buf: Box<[u8]> = mr.into_box()?; // deregistered: the buffer is ours again
    /// assert_eq!(buf[0], b'x');
    /// # Ok(()) }
    /// ```
    pub fn reg_mr_box(&self, buf: impl Into<Box<[u8]>>, access: Access) -> Result<MrBuf> {
        let buf: Box<[u8]> = buf.into();
        if buf.is_empty() {
            return Err(Error::Invalid {
                what: "memory region of 0 bytes".into(),
            });
        }
        let len = buf.len();
        let raw = NonNull::from(Box::leak(buf));
        // SAFETY: the box's memory is given to the returned region, which frees it only after
        // a successful deregistration (and leaks it otherwise); if registration fails `reg`
        // drops the backing, which frees the box (the device never knew it).
        unsafe { self.reg(raw.as_ptr().cast(), len, access, Backing::Boxed(raw)) }
    }

    /// Registers `buf`, which the region borrows mutably until it is deregistered. Read and
    /// write it through [`Mr::read_at`] / [`Mr::write_at`] meanwhile.
    ///
    /// # Safety
    ///
    /// The borrow alone does not keep the device away from `buf`: a region that is leaked
    /// (`mem::forget`, an `Rc` cycle) ends the borrow while the key is still live, and the
    /// device would then write memory that safe code may free or reuse. So the caller must
    ///
    /// - let the returned [`Mr`] be dropped or deregistered ([`Mr::dereg`]) before the buffer
    ///   is freed, reused or touched through its own name; and
    /// - if deregistration fails (`Mr::dereg` returns an error; a drop reports nothing, so
    ///   call `dereg` when it matters), never free or reuse the buffer again: the device may
    ///   still reach it.
    ///
    /// [`Pd::reg_mr_buf`] and [`Pd::reg_mr_box`] have no such contract.
    ///
    /// ```no_run
    /// # fn f(pd: &qhca::Pd) -> qhca::Result<()> {
    /// let mut buf = vec![0u8; 64];
    /// // SAFETY: the region is deregistered below, and the buffer leaked if that fails.
    /// let mut mr = unsafe { pd.reg_mr(&mut buf, qhca::Access::LOCAL_WRITE)? };
    /// mr.write_at(0, b"x");
    /// if mr.dereg().is_err() {
    ///     std::mem::forget(buf);
    ///     return Ok(());
    /// }
    /// buf[0] = 1; // the buffer is ours again
    /// # Ok(()) }
    /// ```
    ///
    /// The buffer cannot be freed while registered:
    ///
    /// ```compile_fail,E0597
    /// # fn f(pd: &qhca::Pd) -> qhca::Result<()> {
    /// let mut mr = {
    ///     let mut buf = vec![0u8; 64];
    ///     unsafe { pd.reg_mr(&mut buf, qhca::Access::LOCAL_WRITE)? }
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
    /// let mut mr = unsafe { pd.reg_mr(&mut buf, qhca::Access::LOCAL_WRITE)? };
    /// buf[0] = 1;
    /// mr.write_at(0, b"x");
    /// # Ok(()) }
    /// ```
    ///
    /// and safe code cannot forget the region to end the borrow early (it was safe, and
    /// unsound, before):
    ///
    /// ```compile_fail,E0133
    /// # fn f(pd: &qhca::Pd) -> qhca::Result<()> {
    /// let mut buf = vec![0u8; 64];
    /// std::mem::forget(pd.reg_mr(&mut buf, qhca::Access::LOCAL_WRITE)?);
    /// drop(buf); // the key is live: the device could write freed memory
    /// # Ok(()) }
    /// ```
    pub unsafe fn reg_mr<'buf>(&self, buf: &'buf mut [u8], access: Access) -> Result<Mr<'buf>> {
        // SAFETY: the borrow `'buf` is held by the returned `Mr` (PhantomData), and the caller
        // promises (this function's contract) that the region is deregistered before the
        // memory is reused, and the memory leaked if that fails.
        unsafe { self.reg_mr_raw(buf.as_mut_ptr(), buf.len(), access) }
    }

    /// Registers `len` bytes at `addr` (any alignment).
    ///
    /// # Safety
    ///
    /// The memory must stay mapped, and must not be reused for anything else, until the
    /// returned region is deregistered successfully ([`Mr::dereg`] returns `Ok`, or a drop in
    /// which it succeeded): the device may write it at any time until then. Nothing may
    /// access it meanwhile but the region's own methods.
    pub unsafe fn reg_mr_raw<'a>(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Mr<'a>> {
        // SAFETY: the caller's promise is this function's contract.
        unsafe { self.reg(addr, len, access, Backing::Borrowed) }
    }

    /// REG_MR of `len` bytes at `addr`, which `backing` owns (or the caller keeps alive).
    ///
    /// # Safety
    ///
    /// `addr..addr + len` is memory that stays allocated, and is accessed only through the
    /// returned region, until it is deregistered successfully; `backing` (dropped on failure
    /// here, or by the region after a successful deregistration) is what owns it, if anything.
    unsafe fn reg<'a>(
        &self,
        addr: *mut u8,
        len: usize,
        access: Access,
        backing: Backing,
    ) -> Result<Mr<'a>> {
        if len == 0 {
            backing.release();
            return Err(Error::Invalid {
                what: "memory region of 0 bytes".into(),
            });
        }
        let mut req = qhca_ioc_reg_mr::request();
        req.pdn = self.inner.pdn;
        req.access = access.0;
        req.addr = addr as u64;
        req.length = len as u64;
        if let Err(e) = self.inner.ctx.cmd_reg_mr(&mut req) {
            // A failed REG_MR registered nothing: the device never knew the memory.
            backing.release();
            return Err(e);
        }
        // INVARIANT: the caller's promise, and `backing` owns the memory if anyone does.
        Ok(Mr {
            pd: self.inner.clone(),
            lkey: req.lkey,
            rkey: req.rkey,
            addr,
            len,
            access,
            backing,
            registered: true,
            _buf: PhantomData,
        })
    }

    /// A region no device knows, over `len` fresh bytes: for host tests of teardown (its
    /// deregistration fails on a fake context).
    #[cfg(test)]
    pub(crate) fn fake_mr(&self, len: usize, boxed: bool) -> Mr<'static> {
        let (addr, backing) = if boxed {
            let raw = NonNull::from(Box::leak(vec![0u8; len].into_boxed_slice()));
            (raw.as_ptr().cast::<u8>(), Backing::Boxed(raw))
        } else {
            let mem = PageBuf::new(len).unwrap();
            (mem.as_ptr(), Backing::Pages(mem))
        };
        Mr {
            pd: self.inner.clone(),
            lkey: 0x100,
            rkey: 0x100,
            addr,
            len,
            access: Access::ALL,
            backing,
            registered: true,
            _buf: PhantomData,
        }
    }
}

/// Who owns a region's memory.
#[derive(Debug)]
enum Backing {
    /// The caller of [`Pd::reg_mr`] or [`Pd::reg_mr_raw`].
    Borrowed,
    /// The region: pages of our own ([`Pd::reg_mr_buf`]).
    Pages(PageBuf),
    /// The region: a `Box<[u8]>` given up with `Box::leak` ([`Pd::reg_mr_box`]), freed with
    /// `Box::from_raw` only after a successful deregistration.
    Boxed(NonNull<[u8]>),
}

impl Backing {
    /// Never frees the memory: the device may still reach it. (Dropping a `Boxed` backing
    /// leaks it too: only [`Backing::release`] frees a box.)
    fn leak(self) {
        match self {
            Backing::Borrowed | Backing::Boxed(_) => {}
            Backing::Pages(p) => p.leak(),
        }
    }

    /// Frees owned memory. Only once the device cannot reach it: the registration failed, or
    /// the deregistration succeeded.
    fn release(self) {
        match self {
            Backing::Borrowed => {}
            Backing::Pages(p) => drop(p),
            Backing::Boxed(raw) => {
                // SAFETY: `raw` came from `Box::leak` of a `Box<[u8]>` in `Pd::reg_mr_box` and
                // is rebuilt only here, from a `Backing` consumed by value (so once); the
                // caller says the device cannot reach the memory; no reference into it is left
                // (the region hands out copies only).
                drop(unsafe { Box::from_raw(raw.as_ptr()) });
            }
        }
    }
}

/// A registered memory region: over a buffer it borrows ([`Pd::reg_mr`], `unsafe`) or owns
/// ([`MrBuf`], from [`Pd::reg_mr_buf`] and [`Pd::reg_mr_box`]).
///
/// Dropping it deregisters it, unbinding any memory window still bound to it (so no key of any
/// kind reaches the memory afterwards); owned memory is then freed, or leaked if the deregistration
/// failed (the device may still reach it), so an owned region is sound under any use,
/// `mem::forget` included. [`Mr::dereg`] deregisters and reports the outcome.
///
/// # Invariants
///
/// While `registered`, `addr..addr + len` is memory that stays allocated and is accessed only
/// through this value (and by the device): kept so by `backing` when it owns it, by the
/// caller of [`Pd::reg_mr`] / [`Pd::reg_mr_raw`] otherwise (for `'buf`).
///
/// Writes take `&mut self`, so safe code never writes the region from two threads at once,
/// nor reads it while another thread writes it; `&Mr` is shared freely (it is `Sync`) and
/// only reads. The device (or a peer's WRITE) may change the region at any moment, and read it
/// (a peer's READ) too: every access here is a volatile copy through a raw pointer, never a
/// reference or an ordinary load or store; read what a completion announced.
#[derive(Debug)]
pub struct Mr<'buf> {
    pd: Arc<PdInner>,
    lkey: u32,
    rkey: u32,
    addr: *mut u8,
    len: usize,
    access: Access,
    backing: Backing,
    registered: bool,
    _buf: PhantomData<&'buf mut [u8]>,
}

/// A region over memory it owns: page-aligned and zeroed from [`Pd::reg_mr_buf`], or a box
/// from [`Pd::reg_mr_box`]. Nothing to borrow, nothing to outlive.
pub type MrBuf = Mr<'static>;

// SAFETY: the region is memory reached only through raw-pointer copies, owned by `backing`
// (a `PageBuf` or a box, both `Send`) or borrowed as a `&mut [u8]` (which is `Send`); nothing
// in it is tied to a thread.
unsafe impl Send for Mr<'_> {}
// SAFETY: through `&Mr` the region is only read (copies out); every write takes `&mut Mr`, so
// two threads holding `&Mr` cannot race on it.
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

    /// Copies `out.len()` bytes at `offset` out of the region (volatile loads: the device may
    /// be writing them; see the type's documentation). Panics if out of bounds.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: in bounds (checked) of memory that stays allocated and that no Rust reference
        // covers (invariant: it is reached only through this value, which copies); the device
        // may write it concurrently, which volatile loads allow (`volatile_copy_from`); no Rust
        // thread writes it now (writes take `&mut self`); `out` is ours, outside the region.
        unsafe { volatile_copy_from(self.addr.add(offset), out) }
    }

    /// Copies `data` into the region at `offset` (volatile stores). Panics if out of bounds.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        // SAFETY: as for `read_at`; `&mut self` excludes every other access through Rust, so
        // no other thread touches the range during the copy.
        unsafe { volatile_copy_to(data, self.addr.add(offset)) }
    }

    /// Fills `len` bytes at `offset` with `byte` (volatile stores). Panics if out of bounds.
    pub fn fill(&mut self, offset: usize, len: usize, byte: u8) {
        self.check(offset, len);
        // SAFETY: as for `write_at`.
        unsafe { volatile_fill(self.addr.add(offset), len, byte) }
    }

    /// The `len` bytes at `offset`, copied.
    pub fn to_vec(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.read_at(offset, &mut v);
        v
    }

    /// Reads the little-endian u64 at `offset`. Where that address is 8-aligned (as an atomic's
    /// target is) it is one volatile 8-byte load, so a value the device writes whole (an
    /// atomic result) is never seen half old; elsewhere it is [`Mr::read_at`]'s copy. Panics
    /// if out of bounds.
    pub fn read_u64(&self, offset: usize) -> u64 {
        let mut b = [0u8; 8];
        // `read_at` checks the bounds and does the aligned case with one load too; the copy
        // goes through it so that both read the same memory the same way.
        self.read_at(offset, &mut b);
        u64::from_le_bytes(b)
    }

    /// Loads the byte at `offset` with one volatile load, for spinning on a flag a peer's WRITE
    /// sets (perftest's write_lat does that with the last byte of the message).
    pub fn load_u8(&self, offset: usize) -> u8 {
        let mut b = [0u8; 1];
        self.read_at(offset, &mut b);
        b[0]
    }

    /// Writes `v` little-endian at `offset`.
    pub fn write_u64(&mut self, offset: usize, v: u64) {
        self.write_at(offset, &v.to_le_bytes());
    }

    /// Deregisters now and reports the outcome (dropping does the same silently). Owned memory
    /// is freed after a success and leaked after a failure.
    pub fn dereg(mut self) -> Result<()> {
        self.dereg_inner()
    }

    /// Deregisters and hands back the buffer given to [`Pd::reg_mr_box`]. If deregistration
    /// fails the buffer is leaked (the device may still reach it) and the error returned; a
    /// region of another kind is deregistered and [`Error::Invalid`] returned.
    pub fn into_box(mut self) -> Result<Box<[u8]>> {
        self.dereg_inner()?;
        match std::mem::replace(&mut self.backing, Backing::Borrowed) {
            Backing::Boxed(raw) => {
                // SAFETY: `raw` came from `Box::leak` in `Pd::reg_mr_box`; the region is
                // deregistered (the device no longer reaches it), and the backing that held it
                // was replaced just above, so the box is rebuilt exactly once.
                Ok(unsafe { Box::from_raw(raw.as_ptr()) })
            }
            other => {
                other.release();
                Err(Error::Invalid {
                    what: "into_box on a region not registered with reg_mr_box".into(),
                })
            }
        }
    }

    fn dereg_inner(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.registered, false) {
            return Ok(());
        }
        let mut req = qhca_ioc_handle::request();
        req.handle = self.lkey;
        // Windows still bound to it are unbound with it: after this, no key reaches the memory.
        req.flags = QHCA_DEREG_MR_UNBIND_MWS;
        let r = self.pd.ctx.cmd_dereg_mr(&mut req);
        if r.is_err() {
            // The device may still reach the memory (a command that timed out, EIO, leaves the
            // region's fate unknown): never free it.
            std::mem::replace(&mut self.backing, Backing::Borrowed).leak();
        }
        r
    }
}

impl Drop for Mr<'_> {
    fn drop(&mut self) {
        // A failure leaked owned memory (in `dereg_inner`); for a borrowed buffer, the caller of
        // the `unsafe` registration promised to call `dereg` where a failure matters.
        if self.dereg_inner().is_ok() {
            std::mem::replace(&mut self.backing, Backing::Borrowed).release();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page range is still mapped (msync fails with ENOMEM on unmapped memory).
    fn mapped(addr: u64, len: usize) -> bool {
        // SAFETY: msync only inspects the range; it touches no memory of ours.
        unsafe { libc::msync(addr as *mut libc::c_void, len, libc::MS_ASYNC) == 0 }
    }

    /// Mr::drop ignored a failed deregistration; now owned memory is leaked, never freed, when
    /// the device may still reach it (a fake context fails every ioctl, as EIO would).
    #[test]
    fn a_failed_dereg_leaks_owned_memory() {
        let ctx = Arc::new(Context::open_unchecked(std::path::Path::new("/dev/null")).unwrap());
        let pd = Pd::fake(&ctx, 1);
        let mr = pd.fake_mr(8192, false);
        let addr = mr.addr();
        assert!(mapped(addr, 8192));
        assert!(mr.dereg().is_err());
        assert!(mapped(addr, 8192), "leaked, not unmapped");
        let mr = pd.fake_mr(4096, false);
        let addr = mr.addr();
        drop(mr);
        assert!(mapped(addr, 4096), "a drop leaks too");

        // A successful deregistration frees it (a mapping no device knows: pretend it went).
        let mut mr = pd.fake_mr(4096, false);
        let addr = mr.addr();
        mr.registered = false;
        drop(mr);
        assert!(!mapped(addr, 4096), "freed once deregistered");

        let mut mr = pd.fake_mr(100, true);
        mr.write_at(0, b"abc");
        assert_eq!(mr.to_vec(0, 3), b"abc");
        assert!(
            mr.into_box().is_err(),
            "dereg failed: the box is leaked, not returned"
        );
        let mut mr = pd.fake_mr(100, true);
        mr.write_at(1, b"z");
        mr.registered = false;
        let b = mr.into_box().unwrap();
        assert_eq!((b.len(), b[1]), (100, b'z'));
        let mut mr = pd.fake_mr(100, false);
        mr.registered = false;
        assert!(matches!(mr.into_box(), Err(Error::Invalid { .. })));
    }

    #[test]
    fn empty_box_is_refused() {
        let ctx = Arc::new(Context::open_unchecked(std::path::Path::new("/dev/null")).unwrap());
        let pd = Pd::fake(&ctx, 1);
        assert!(matches!(
            pd.reg_mr_box(Vec::new(), Access::ALL),
            Err(Error::Invalid { .. })
        ));
        // The registration fails (ENOTTY): the box is freed, nothing is leaked or kept.
        assert!(matches!(
            pd.reg_mr_box(vec![1u8; 10], Access::ALL),
            Err(Error::Ioctl { op: "REG_MR", .. })
        ));
    }
}
