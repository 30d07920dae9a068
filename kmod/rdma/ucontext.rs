// SPDX-License-Identifier: GPL-2.0

//! User contexts (`ib_ucontext`: one open of the uverbs device), the driver data their commands
//! carry (`ib_udata`), and the MMIO they may map (`rdma_user_mmap_entry`).

use super::{data, Driver};
use crate::shim::rdma_mmap_io;
use core::{ffi::c_int, marker::PhantomData, mem::MaybeUninit, ptr::NonNull};
use kernel::{
    bindings,
    mm::virt::VmaNew,
    prelude::*,
    transmute::{AsBytes, FromBytes},
    types::Opaque,
    uaccess::{UserPtr, UserSlice},
};

/// A user context as the core allocates it: the `ib_ucontext` first, the driver's part behind
/// it (written by a successful `alloc_ucontext`, taken back by `dealloc_ucontext`).
#[repr(C)]
pub(super) struct IbUContext<C> {
    ib: bindings::ib_ucontext,
    pub(super) data: MaybeUninit<C>,
}

/// The core's `ib_ucontext`, as a driver sees it while creating its part of a user context.
#[repr(transparent)]
pub(crate) struct UContext(Opaque<bindings::ib_ucontext>);

impl UContext {
    fn as_raw(&self) -> *mut bindings::ib_ucontext {
        self.0.get()
    }
}

/// What a command's caller gave the driver and gets back from it (`ib_udata`): the bytes after
/// the core's structures, in user memory.
pub(crate) struct Udata<'a> {
    inbuf: usize,
    inlen: usize,
    outbuf: usize,
    outlen: usize,
    _core: PhantomData<&'a mut bindings::ib_udata>,
}

impl Udata<'_> {
    /// Succeeds if the driver input is empty or all zero (input this ABI version does not
    /// define).
    ///
    /// # Errors
    ///
    /// `EINVAL` for a nonzero byte, `EFAULT` for input that cannot be read.
    pub(crate) fn input_zero(&self) -> Result {
        let mut r = UserSlice::new(UserPtr::from_addr(self.inbuf), self.inlen).reader();
        let mut buf = [0u8; 64];
        while !r.is_empty() {
            let n = r.len().min(buf.len());
            r.read_slice(&mut buf[..n])?;
            if buf[..n].iter().any(|&b| b != 0) {
                return Err(EINVAL);
            }
        }
        Ok(())
    }

    /// How many bytes of driver input there are.
    pub(crate) fn in_len(&self) -> usize {
        self.inlen
    }

    /// Reads the driver input as an `R`: at least its size, anything beyond it zero (input a
    /// later ABI version defines).
    ///
    /// # Errors
    ///
    /// `EINVAL` for less input than an `R` or a nonzero byte beyond it, `EFAULT` for input that
    /// cannot be read.
    pub(crate) fn read_in<R: FromBytes>(&self) -> Result<R> {
        let size = core::mem::size_of::<R>();
        if self.inlen < size {
            return Err(EINVAL);
        }
        let mut r = UserSlice::new(UserPtr::from_addr(self.inbuf), size).reader();
        let v = r.read::<R>()?;
        let rest = Udata {
            inbuf: self.inbuf + size,
            inlen: self.inlen - size,
            outbuf: 0,
            outlen: 0,
            _core: PhantomData,
        };
        rest.input_zero()?;
        Ok(v)
    }

    /// Writes the driver's response: as much of `resp` as the caller has room for (an older
    /// caller's shorter response is a prefix of this one).
    ///
    /// # Errors
    ///
    /// `EFAULT` for memory that cannot be written.
    pub(crate) fn respond<R: AsBytes>(&mut self, resp: &R) -> Result {
        let bytes = resp.as_bytes();
        let n = bytes.len().min(self.outlen);
        UserSlice::new(UserPtr::from_addr(self.outbuf), n)
            .writer()
            .write_slice(&bytes[..n])
    }
}

/// An mmap entry of a user context (`rdma_user_mmap_entry` with what it maps behind it),
/// allocated by the driver, freed by the core's `mmap_free` once no mapping and no owner holds
/// it.
#[repr(C)]
struct IoEntry {
    rdma: bindings::rdma_user_mmap_entry,
    kind: EntryKind,
}

/// What an entry maps.
#[derive(Clone, Copy)]
enum EntryKind {
    /// `len` bytes of MMIO at bus address `phys` ([`IoMapping`]).
    Io { phys: u64, len: usize },
    /// Memory of the driver's, which [`Driver::mmap_page`] maps by `token` ([`PageMapping`]).
    Page { token: u64 },
}

/// MMIO that a user context may map with `mmap(2)` on the uverbs file, at [`IoMapping::offset`]:
/// uncached, shared, never executable, `len` bytes. Dropping it removes the entry: no new
/// mapping, while existing ones stay until unmapped or until the core disassociates the context
/// (which zaps them).
pub(crate) struct IoMapping {
    entry: NonNull<IoEntry>,
}

// SAFETY: The entry is the core's to lock and refcount; this handle only reads its offset and
// removes it once (in `drop`), from any thread.
unsafe impl Send for IoMapping {}
// SAFETY: Through `&Self` only the offset is read.
unsafe impl Sync for IoMapping {}

impl IoMapping {
    /// Offers `len` bytes of MMIO at bus address `phys` to `uctx`'s process.
    ///
    /// # Safety
    ///
    /// `phys..phys + len` is MMIO of the device that this context alone may map, for as long as
    /// the context lives or until the core disassociates it (the device stays bound until then:
    /// unregistering the device disassociates every context before it returns).
    pub(crate) unsafe fn new(uctx: &UContext, phys: u64, len: usize) -> Result<Self> {
        // SAFETY: The function's contract.
        unsafe { Self::insert(uctx, EntryKind::Io { phys, len }, len) }
    }

    /// Inserts an entry of `kind`, `len` bytes, into `uctx`'s.
    ///
    /// # Safety
    ///
    /// An [`EntryKind::Io`] is [`IoMapping::new`]'s MMIO.
    unsafe fn insert(uctx: &UContext, kind: EntryKind, len: usize) -> Result<Self> {
        let e = KBox::new(
            IoEntry {
                rdma: pin_init::zeroed::<bindings::rdma_user_mmap_entry>(),
                kind,
            },
            GFP_KERNEL,
        )?;
        let p = KBox::into_raw(e);
        // SAFETY: `p` is a fresh, zeroed entry the core initialises; `uctx` is the context being
        // created, which the core passed to `alloc_ucontext`.
        let r = unsafe {
            bindings::rdma_user_mmap_entry_insert(uctx.as_raw(), &raw mut (*p).rdma, len)
        };
        if r != 0 {
            // SAFETY: Not inserted: `p` is still only ours.
            drop(unsafe { KBox::from_raw(p) });
            return Err(Error::from_errno(r));
        }
        // SAFETY: `KBox::into_raw` never returns null.
        let entry = unsafe { NonNull::new_unchecked(p) };
        Ok(Self { entry })
    }

    /// The `mmap(2)` offset (bytes) that maps it.
    pub(crate) fn offset(&self) -> u64 {
        // SAFETY: The entry lives while inserted, which it is until `drop`; `start_pgoff` was set
        // by the insertion and does not change.
        let pgoff = unsafe { (*self.entry.as_ptr()).rdma.start_pgoff };
        (pgoff as u64) << bindings::PAGE_SHIFT
    }
}

/// One page of the driver's memory that a user context may map with `mmap(2)` on the uverbs file,
/// at [`PageMapping::offset`]: the core finds the entry, and [`Driver::mmap_page`] maps the page
/// it names by `token`. Dropping it removes the entry (no new mapping).
pub(crate) struct PageMapping(IoMapping);

impl PageMapping {
    /// Offers the page that `token` names to [`Driver::mmap_page`] to `uctx`'s process.
    pub(crate) fn new(uctx: &UContext, token: u64) -> Result<Self> {
        let kind = EntryKind::Page { token };
        // SAFETY: Not an `Io` entry: nothing of the device's is mapped through it.
        Ok(Self(unsafe {
            IoMapping::insert(uctx, kind, bindings::PAGE_SIZE)
        }?))
    }

    /// The `mmap(2)` offset (bytes) that maps it.
    pub(crate) fn offset(&self) -> u64 {
        self.0.offset()
    }
}

impl Drop for IoMapping {
    fn drop(&mut self) {
        // SAFETY: Inserted (`new`), removed once, here; the core frees it through `mmap_free`
        // when its last reference goes.
        unsafe { bindings::rdma_user_mmap_entry_remove(&raw mut (*self.entry.as_ptr()).rdma) };
    }
}

/// # Safety
///
/// Called by the RDMA core only: `uctx` is a fresh user context of a registered device of ours,
/// allocated with `size_ib_ucontext` zeroed bytes, and `udata` the command's.
pub(super) unsafe extern "C" fn alloc_ucontext<T: Driver>(
    uctx: *mut bindings::ib_ucontext,
    udata: *mut bindings::ib_udata,
) -> c_int {
    if udata.is_null() {
        // User contexts come from user space only.
        return EINVAL.to_errno();
    }
    // SAFETY: The core's `udata`, valid for the call.
    let mut udata = unsafe { udata_of(udata) };
    // SAFETY: `uctx` is valid for the call; `UContext` is a transparent wrapper of it.
    let (dev, ctx) = unsafe { (data::<T>((*uctx).device), &*uctx.cast::<UContext>()) };
    match dev.alloc_ucontext(ctx, &mut udata) {
        Ok(c) => {
            // SAFETY: The core allocated an `IbUContext<T::UContext>` (`size_ib_ucontext`);
            // `data` is written once, here, and read back only by `dealloc_ucontext`.
            unsafe { (*uctx.cast::<IbUContext<T::UContext>>()).data.write(c) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, once, for a context whose `alloc_ucontext` succeeded.
pub(super) unsafe extern "C" fn dealloc_ucontext<T: Driver>(uctx: *mut bindings::ib_ucontext) {
    // SAFETY: `alloc_ucontext` wrote `data`; the core deallocates a context once and touches
    // nothing of ours after, so it is read out exactly once.
    let (dev, c) = unsafe {
        (
            data::<T>((*uctx).device),
            (*uctx.cast::<IbUContext<T::UContext>>())
                .data
                .assume_init_read(),
        )
    };
    dev.dealloc_ucontext(c);
}

/// Nothing to do: the core zaps every mapping made through [`IoMapping`]; a [`PageMapping`]'s
/// maps the driver's memory, not the device's, and holds its page.
pub(super) extern "C" fn disassociate_ucontext(_uctx: *mut bindings::ib_ucontext) {}

/// # Safety
///
/// Called by the RDMA core only, from `mmap(2)` of a user context of ours.
pub(super) unsafe extern "C" fn mmap<T: Driver>(
    uctx: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    // SAFETY: The core's context and vma, valid for the call.
    let entry = unsafe { bindings::rdma_user_mmap_entry_get(uctx, vma) };
    if entry.is_null() {
        return EINVAL.to_errno();
    }
    // Every entry of our contexts is an `IoEntry` (`IoMapping::insert` inserts no other kind).
    let e = entry.cast::<IoEntry>();
    // SAFETY: `entry_get` took a reference, so the entry lives until the `put` below.
    let r = match unsafe { (*e).kind } {
        // SAFETY: The MMIO is the context's to map (`IoMapping::new`'s contract).
        EntryKind::Io { phys, len } => unsafe { rdma_mmap_io(uctx, vma, phys, len, entry) },
        EntryKind::Page { token } => {
            // SAFETY: The core calls `mmap` on a context whose `alloc_ucontext` succeeded and
            // which it keeps for the call; `vma` is the mapping being set up by this `mmap(2)`.
            let (dev, c, vma) = unsafe {
                (
                    data::<T>((*uctx).device),
                    ucontext_data::<T>(uctx),
                    VmaNew::from_raw(vma),
                )
            };
            match c.map(|c| dev.mmap_page(c, token, vma)) {
                Some(Ok(())) => 0,
                Some(Err(e)) => e.to_errno(),
                None => EINVAL.to_errno(),
            }
        }
    };
    // SAFETY: The reference `entry_get` took (a successful MMIO mapping took its own; a page
    // mapping holds the page, not the entry).
    unsafe { bindings::rdma_user_mmap_entry_put(entry) };
    r
}

/// # Safety
///
/// Called by the RDMA core only, once the last reference to `entry`, one of ours, is gone.
pub(super) unsafe extern "C" fn mmap_free(entry: *mut bindings::rdma_user_mmap_entry) {
    // SAFETY: Every entry of ours is an `IoEntry` from `KBox::into_raw` (`IoMapping::new`); the
    // core frees it once.
    drop(unsafe { KBox::from_raw(entry.cast::<IoEntry>()) });
}

/// Reads the core's `ib_udata`.
///
/// # Safety
///
/// `udata` is valid for the call.
pub(super) unsafe fn udata_of<'a>(udata: *const bindings::ib_udata) -> Udata<'a> {
    // SAFETY: The function's contract.
    let u = unsafe { &*udata };
    Udata {
        inbuf: u.inbuf as usize,
        inlen: u.inlen,
        outbuf: u.outbuf as usize,
        outlen: u.outlen,
        _core: PhantomData,
    }
}

/// The driver's part of user context `uctx`, or `None` for a null one (a kernel object's).
///
/// # Safety
///
/// `uctx` is null or a user context of a registered device of ours whose `alloc_ucontext`
/// succeeded, alive for `'a` (a context outlives the calls on its objects).
pub(super) unsafe fn ucontext_data<'a, T: Driver>(
    uctx: *mut bindings::ib_ucontext,
) -> Option<&'a T::UContext> {
    if uctx.is_null() {
        return None;
    }
    // SAFETY: The function's contract: `data` was written by a successful `alloc_ucontext`.
    Some(unsafe {
        (*uctx.cast::<IbUContext<T::UContext>>())
            .data
            .assume_init_ref()
    })
}

/// The driver's part of the user context a method of the driver's own (`Info::methods`) runs
/// for, as its handler got it from `ib_uverbs_get_ucontext()`; `None` for a null one.
///
/// # Safety
///
/// `uctx` is null or the user context of a method call on a registered device of `T`, which
/// the core keeps alive (and allocated by a successful `alloc_ucontext`) for `'a`, the call.
pub(crate) unsafe fn method_ucontext<'a, T: Driver>(
    uctx: *mut bindings::ib_ucontext,
) -> Option<&'a T::UContext> {
    // SAFETY: The function's contract is `ucontext_data`'s.
    unsafe { ucontext_data::<T>(uctx) }
}
