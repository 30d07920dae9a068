// SPDX-License-Identifier: GPL-2.0

//! The kernel's RDMA core, wrapped once for this driver.
//!
//! Rust-for-Linux has no RDMA abstractions. Our kernel build adds the RDMA core's headers to the
//! bindings (`scripts/kernel-patches/`), and this file turns the few pieces the driver needs into
//! safe types: a [`Registration`] is an `ib_device` registered with the core, whose operations
//! call a [`Driver`]. The core allocates the `ib_device` with the driver's data behind it (as
//! `ib_alloc_device` does for a C driver's container struct) and frees it; a [`Registration`]
//! owns both from allocation to `ib_dealloc_device`.
//!
//! What the core calls and what it may not: every operation runs only while the device is
//! registered (`ib_unregister_device` returns once none runs and none will), so the driver's data
//! outlives every call.

use core::{ffi::c_int, fmt::Write, marker::PhantomData, mem::MaybeUninit, ptr::NonNull};
use kernel::{
    bindings,
    device::{Bound, Device},
    error::to_result,
    ffi::c_char,
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex,
    },
    transmute::AsBytes,
    types::Opaque,
    uaccess::{UserPtr, UserSlice},
};

use crate::shim::{raw_device, rdma_mmap_io};

/// What the RDMA core asks of a device. Each method answers for the device the [`Registration`]
/// holds; a `&mut` argument is the core's, zeroed or filled with defaults by the core, and
/// written only by the method.
pub(crate) trait Driver: Send + Sync + Sized {
    /// `query_device`: the device's attributes.
    fn query_device(&self, attr: &mut bindings::ib_device_attr) -> Result;
    /// `query_port` for port `port` (1-based; the core checks it against the port count).
    fn query_port(&self, port: u32, attr: &mut bindings::ib_port_attr) -> Result;
    /// `get_port_immutable`: the port's table sizes and protocol, asked once at registration.
    fn port_immutable(&self, port: u32, imm: &mut bindings::ib_port_immutable) -> Result;
    /// `query_pkey`: entry `index` of the port's P_Key table.
    fn query_pkey(&self, port: u32, index: u16) -> Result<u16>;
    /// `get_dev_fw_str`: the firmware version as text (truncated to what the core holds).
    fn fw_version(&self, w: &mut dyn Write) -> core::fmt::Result;

    /// What one user context (the core's `ib_ucontext`: one open of the uverbs device) holds.
    type UContext: Send + Sync;
    /// `alloc_ucontext`: a new user context; `udata` carries the driver's input and response.
    fn alloc_ucontext(&self, uctx: &UContext, udata: &mut Udata<'_>) -> Result<Self::UContext>;
    /// `dealloc_ucontext`: the context goes. Its user mappings are gone, or were zapped when the
    /// core disassociated it (`ib_unregister_device` does that before it returns).
    fn dealloc_ucontext(&self, ctx: Self::UContext);

    /// A protection domain of a user context.
    type Pd: Send + Sync;
    /// `alloc_pd` for user context `uctx`.
    fn alloc_pd(&self, uctx: &Self::UContext, udata: &mut Udata<'_>) -> Result<Self::Pd>;
    /// `dealloc_pd`: the core deallocates a PD only once nothing of the context uses it. On
    /// success `pd` is dropped; on failure the core keeps the PD (and may call again).
    fn dealloc_pd(&self, uctx: &Self::UContext, pd: &Self::Pd) -> Result;
}

/// What a device is called and how it looks to the core, fixed at registration.
pub(crate) struct Info<'a> {
    /// The device's name (`qhca0`): no `%d`, the driver numbers its devices itself.
    pub(crate) name: &'a CStr,
    pub(crate) node_guid: u64,
    /// `node_desc` in sysfs (truncated to `IB_DEVICE_NODE_DESC_MAX - 1` bytes).
    pub(crate) node_desc: &'a CStr,
}

/// The allocation the core makes for one device: the `ib_device` first, as the core requires
/// (it allocates and frees the whole by the `ib_device`'s address), the driver's data behind it.
#[repr(C)]
struct IbDevice<T> {
    ib: bindings::ib_device,
    data: T,
}

/// An `ib_device` registered with the RDMA core for a bound PCI device, with its driver data.
///
/// Unregistered by [`Registration::unregister`] (the unbind path calls it before the device
/// stops) or else when dropped; freed when dropped. It lives in the bound device's driver data,
/// so it never outlives the binding whose device it names as parent and DMA device.
pub(crate) struct Registration<'bound, T: Driver> {
    dev: NonNull<IbDevice<T>>,
    registered: Atomic<bool>,
    gate: Arc<EventGate>,
    _bound: PhantomData<&'bound Device<Bound>>,
}

/// Lets [`Events`] reach the `ib_device` while it is registered, and never after.
#[pin_data]
struct EventGate {
    ib: *mut bindings::ib_device,
    /// True while registered; cleared, under the lock, before unregistering.
    #[pin]
    open: Mutex<bool>,
}

// SAFETY: `ib` is only dereferenced (by the core, in `ib_dispatch_event`) under `open`'s lock
// while `open` is true, that is while the device is registered and allocated.
unsafe impl Send for EventGate {}
// SAFETY: As above.
unsafe impl Sync for EventGate {}

/// Raises device-wide asynchronous events on a registered device from anywhere in the driver
/// (the event and command paths); after unregistration it does nothing.
pub(crate) struct Events(Arc<EventGate>);

impl Events {
    /// `IB_EVENT_DEVICE_FATAL`: the device failed. Every user context gets it on its
    /// asynchronous event file (`ibv_get_async_event`); kernel clients through their handlers.
    /// May sleep.
    pub(crate) fn device_fatal(&self) {
        let open = self.0.open.lock();
        if !*open {
            return;
        }
        let mut ev: bindings::ib_event = pin_init::zeroed();
        ev.device = self.0.ib;
        ev.event = bindings::ib_event_type_IB_EVENT_DEVICE_FATAL;
        ev.element.port_num = 1;
        // SAFETY: Registered (checked under the lock, which unregistering takes first), so `ib`
        // is a live, registered device; `ev` lives across the call.
        unsafe { bindings::ib_dispatch_event(&ev) };
    }
}

// SAFETY: The registration only hands out `&T` (and `T: Sync`), and unregistering and freeing are
// each done once (`registered` is swapped; `drop` has `&mut self`), from any thread.
unsafe impl<T: Driver> Send for Registration<'_, T> {}
// SAFETY: As above: through `&Self` only `&T` and the once-only `unregister` are reachable.
unsafe impl<T: Driver> Sync for Registration<'_, T> {}

impl<'bound, T: Driver> Registration<'bound, T> {
    /// Allocates an `ib_device` with `data` behind it and registers it with the core as one
    /// port, one completion vector, Ethernet link layer (RoCE v2), child and DMA device of
    /// `parent`.
    pub(crate) fn new(parent: &'bound Device<Bound>, info: &Info<'_>, data: T) -> Result<Self> {
        const { assert!(core::mem::align_of::<IbDevice<T>>() <= 8) };
        // The core allocates user contexts the same way (kzalloc of `size_ib_ucontext`).
        const { assert!(core::mem::align_of::<IbUContext<T::UContext>>() <= 8) };
        const { assert!(core::mem::align_of::<IbPd<T::Pd>>() <= 8) };
        // SAFETY: `init_net` is the initial network namespace, which lives forever; the core
        // allocates `size` zeroed bytes (kvzalloc: aligned to at least 8, checked above) and
        // initialises the `ib_device` at their start.
        let ib = unsafe {
            bindings::_ib_alloc_device(
                core::mem::size_of::<IbDevice<T>>(),
                &raw mut bindings::init_net,
            )
        };
        let dev = NonNull::new(ib.cast::<IbDevice<T>>()).ok_or(ENOMEM)?;
        // SAFETY: `dev` points to a fresh allocation large and aligned enough for `IbDevice<T>`;
        // `data` is written once, before anything may read it.
        unsafe { (&raw mut (*dev.as_ptr()).data).write(data) };
        let gate = Arc::pin_init(
            pin_init!(EventGate {
                ib,
                open <- new_mutex!(false),
            }),
            GFP_KERNEL,
        );
        let gate = match gate {
            Ok(g) => g,
            Err(e) => {
                // SAFETY: Not registered; `data` was written above and is dropped once, here,
                // before the allocation goes back to the core.
                unsafe {
                    core::ptr::drop_in_place(&raw mut (*dev.as_ptr()).data);
                    bindings::ib_dealloc_device(ib);
                }
                return Err(e);
            }
        };
        let this = Self {
            dev,
            registered: Atomic::new(false),
            gate,
            _bound: PhantomData,
        };
        // SAFETY: `ib` is the allocated, not yet registered `ib_device`: nothing else touches it.
        unsafe { this.setup(ib, parent, info) }?;
        // SAFETY: As above; `info.name` is NUL-terminated and `parent` is bound, and stays so
        // while `this` lives (the lifetime `'bound`), which unregisters before it goes.
        to_result(unsafe {
            bindings::ib_register_device(ib, info.name.as_char_ptr(), raw_device(parent))
        })?;
        this.registered.store(true, Relaxed);
        *this.gate.open.lock() = true;
        Ok(this)
    }

    /// A handle that raises device-wide events while the device is registered.
    pub(crate) fn events(&self) -> Events {
        Events(self.gate.clone())
    }

    /// Fills in what the core reads at registration, and the operations.
    ///
    /// # Safety
    ///
    /// `ib` is this registration's `ib_device`, not registered, and nothing else accesses it.
    unsafe fn setup(
        &self,
        ib: *mut bindings::ib_device,
        parent: &Device<Bound>,
        info: &Info<'_>,
    ) -> Result {
        // SAFETY: The function's contract: `ib` is ours alone, allocated and initialised.
        let ib = unsafe { &mut *ib };
        ib.node_type = bindings::RDMA_NODE_IB_CA as u8;
        ib.phys_port_cnt = 1;
        ib.num_comp_vectors = 1;
        ib.node_guid = info.node_guid.to_be();
        // `dev` is the union's member the core uses for a device's `struct device` (`coredev`
        // wraps the same `struct device` first).
        ib.__bindgen_anon_1.dev.parent = raw_device(parent);
        let desc = info.node_desc.to_bytes();
        let n = desc.len().min(ib.node_desc.len() - 1);
        for (d, &s) in ib.node_desc.iter_mut().zip(&desc[..n]) {
            *d = s;
        }

        let mut ops = KBox::init(pin_init::zeroed::<bindings::ib_device_ops>(), GFP_KERNEL)?;
        ops.owner = <crate::QhcaModule as kernel::ModuleMetadata>::THIS_MODULE.as_ptr();
        ops.driver_id = bindings::rdma_driver_id_RDMA_DRIVER_UNKNOWN;
        ops.query_device = Some(query_device::<T>);
        ops.query_port = Some(query_port::<T>);
        ops.get_port_immutable = Some(get_port_immutable::<T>);
        ops.get_link_layer = Some(get_link_layer);
        ops.query_pkey = Some(query_pkey::<T>);
        ops.get_dev_fw_str = Some(get_dev_fw_str::<T>);
        ops.uverbs_abi_ver = crate::uapi::QHCA_IB_UVERBS_ABI_VERSION;
        ops.alloc_ucontext = Some(alloc_ucontext::<T>);
        ops.dealloc_ucontext = Some(dealloc_ucontext::<T>);
        ops.disassociate_ucontext = Some(disassociate_ucontext);
        ops.mmap = Some(mmap);
        ops.mmap_free = Some(mmap_free);
        ops.size_ib_ucontext = core::mem::size_of::<IbUContext<T::UContext>>();
        ops.alloc_pd = Some(alloc_pd::<T>);
        ops.dealloc_pd = Some(dealloc_pd::<T>);
        ops.size_ib_pd = core::mem::size_of::<IbPd<T::Pd>>();
        kernel_verbs::fill(&mut ops);
        // SAFETY: `ib` is valid; `ops` is read (copied into `ib.ops`) during the call only.
        unsafe { bindings::ib_set_device_ops(ib, &*ops) };
        Ok(())
    }

    /// Unregisters the device (the first call does; later ones return at once): when this
    /// returns no operation runs or will run, every user context is disassociated (the core
    /// calls the driver for that) and the device is gone from sysfs and netlink.
    pub(crate) fn unregister(&self) {
        if self.registered.xchg(false, Relaxed) {
            // No event from [`Events`] from here on (one in flight finishes first).
            *self.gate.open.lock() = false;
            // SAFETY: The device is registered (the flag said so and is now clear, so no one
            // else unregisters it) and allocated until `drop`.
            unsafe { bindings::ib_unregister_device(&raw mut (*self.dev.as_ptr()).ib) };
        }
    }
}

impl<T: Driver> Drop for Registration<'_, T> {
    fn drop(&mut self) {
        self.unregister();
        let p = self.dev.as_ptr();
        // SAFETY: Unregistered: the core calls no operation any more, so nothing borrows `data`,
        // which is dropped once, here; then the allocation goes back to the core (sysfs may hold
        // the `ib_device` a little longer; it no longer reaches `data`).
        unsafe {
            core::ptr::drop_in_place(&raw mut (*p).data);
            bindings::ib_dealloc_device(&raw mut (*p).ib);
        }
    }
}

/// The driver data of the device the core named.
///
/// # Safety
///
/// `ib` is the `ib_device` of a registered [`Registration<T>`], and the core is inside one of
/// its operations (so the device is registered for the whole call).
unsafe fn data<'a, T: Driver>(ib: *mut bindings::ib_device) -> &'a T {
    // SAFETY: `ib` is the first field of a `#[repr(C)]` `IbDevice<T>`, so both have one address;
    // `data` lives until after unregistration, which waits for this call to return.
    unsafe { &(*ib.cast::<IbDevice<T>>()).data }
}

/// The errno the core wants: 0 or a negative error.
fn errno(r: Result) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only: `ib` is a registered device of ours (see [`data`]) and every
/// other pointer is valid as the operation's contract says.
unsafe extern "C" fn query_device<T: Driver>(
    ib: *mut bindings::ib_device,
    attr: *mut bindings::ib_device_attr,
    udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: The core passes a valid `udata` or none; nothing in this driver's ABI goes in
    // (yet), so input there is refused rather than ignored.
    if !udata.is_null() && unsafe { (*udata).inlen } != 0 {
        return EINVAL.to_errno();
    }
    // SAFETY: The core calls this for a registered device of ours, with `attr` valid for writes
    // and not otherwise accessed during the call.
    errno(unsafe { data::<T>(ib).query_device(&mut *attr) })
}

/// # Safety
///
/// Called by the RDMA core only: `ib` is a registered device of ours (see [`data`]) and every
/// other pointer is valid as the operation's contract says.
unsafe extern "C" fn query_port<T: Driver>(
    ib: *mut bindings::ib_device,
    port: u32,
    attr: *mut bindings::ib_port_attr,
) -> c_int {
    // SAFETY: As for `query_device`: our device, `attr` the core's (zeroed) and ours to fill.
    errno(unsafe { data::<T>(ib).query_port(port, &mut *attr) })
}

/// # Safety
///
/// Called by the RDMA core only: `ib` is a registered device of ours (see [`data`]) and every
/// other pointer is valid as the operation's contract says.
unsafe extern "C" fn get_port_immutable<T: Driver>(
    ib: *mut bindings::ib_device,
    port: u32,
    imm: *mut bindings::ib_port_immutable,
) -> c_int {
    // SAFETY: As for `query_device`: our device, `imm` the core's to fill.
    errno(unsafe { data::<T>(ib).port_immutable(port, &mut *imm) })
}

extern "C" fn get_link_layer(
    _ib: *mut bindings::ib_device,
    _port: u32,
) -> bindings::rdma_link_layer {
    bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET
}

/// # Safety
///
/// Called by the RDMA core only: `ib` is a registered device of ours (see [`data`]) and every
/// other pointer is valid as the operation's contract says.
unsafe extern "C" fn query_pkey<T: Driver>(
    ib: *mut bindings::ib_device,
    port: u32,
    index: u16,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: Our device (see `query_device`).
    match unsafe { data::<T>(ib).query_pkey(port, index) } {
        Ok(v) => {
            // SAFETY: `pkey` is the core's, valid for a write.
            unsafe { pkey.write(v) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// Writes into a C string buffer, always leaving room for the NUL; what does not fit is dropped.
struct CBuf<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Write for CBuf<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.buf.len().saturating_sub(self.len + 1);
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// # Safety
///
/// Called by the RDMA core only: `ib` is a registered device of ours (see [`data`]) and every
/// other pointer is valid as the operation's contract says.
unsafe extern "C" fn get_dev_fw_str<T: Driver>(ib: *mut bindings::ib_device, out: *mut c_char) {
    let mut buf = [0u8; bindings::IB_FW_VERSION_NAME_MAX as usize];
    let mut w = CBuf {
        buf: &mut buf,
        len: 0,
    };
    // SAFETY: Our device (see `query_device`).
    let _ = unsafe { data::<T>(ib).fw_version(&mut w) };
    let n = w.len + 1;
    // SAFETY: The core's buffer holds `IB_FW_VERSION_NAME_MAX` bytes (ib_get_device_fw_str's
    // contract); `n` is at most that, the last byte written a NUL.
    unsafe { core::ptr::copy_nonoverlapping(buf.as_ptr().cast::<c_char>(), out, n) };
}

/// A user context as the core allocates it: the `ib_ucontext` first, the driver's part behind
/// it (written by a successful `alloc_ucontext`, taken back by `dealloc_ucontext`).
#[repr(C)]
struct IbUContext<C> {
    ib: bindings::ib_ucontext,
    data: MaybeUninit<C>,
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

/// An mmap entry of a user context for MMIO (`rdma_user_mmap_entry` with the bus address behind
/// it), allocated by the driver, freed by the core's `mmap_free` once no mapping and no owner
/// holds it.
#[repr(C)]
struct IoEntry {
    rdma: bindings::rdma_user_mmap_entry,
    phys: u64,
    len: usize,
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
        let e = KBox::new(
            IoEntry {
                rdma: pin_init::zeroed::<bindings::rdma_user_mmap_entry>(),
                phys,
                len,
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
unsafe extern "C" fn alloc_ucontext<T: Driver>(
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
unsafe extern "C" fn dealloc_ucontext<T: Driver>(uctx: *mut bindings::ib_ucontext) {
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

/// Nothing to do: the core zaps every mapping made through [`IoMapping`], and a context holds
/// nothing else that reaches user memory.
extern "C" fn disassociate_ucontext(_uctx: *mut bindings::ib_ucontext) {}

/// # Safety
///
/// Called by the RDMA core only, from `mmap(2)` of a user context of ours.
unsafe extern "C" fn mmap(
    uctx: *mut bindings::ib_ucontext,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    // SAFETY: The core's context and vma, valid for the call.
    let entry = unsafe { bindings::rdma_user_mmap_entry_get(uctx, vma) };
    if entry.is_null() {
        return EINVAL.to_errno();
    }
    // Every entry of our contexts is an `IoEntry` (`IoMapping::new` inserts no other kind).
    let e = entry.cast::<IoEntry>();
    // SAFETY: `entry_get` took a reference, so the entry lives until the `put` below; its MMIO
    // is the context's to map (`IoMapping::new`'s contract).
    let r = unsafe { rdma_mmap_io(uctx, vma, (*e).phys, (*e).len, entry) };
    // SAFETY: The reference `entry_get` took (a successful mapping took its own).
    unsafe { bindings::rdma_user_mmap_entry_put(entry) };
    r
}

/// # Safety
///
/// Called by the RDMA core only, once the last reference to `entry`, one of ours, is gone.
unsafe extern "C" fn mmap_free(entry: *mut bindings::rdma_user_mmap_entry) {
    // SAFETY: Every entry of ours is an `IoEntry` from `KBox::into_raw` (`IoMapping::new`); the
    // core frees it once.
    drop(unsafe { KBox::from_raw(entry.cast::<IoEntry>()) });
}

/// A protection domain as the core allocates it: the `ib_pd` first, the driver's part behind.
#[repr(C)]
struct IbPd<P> {
    ib: bindings::ib_pd,
    data: MaybeUninit<P>,
}

/// The driver's part of the user context that created `uobject`, or `None` for a kernel object.
///
/// # Safety
///
/// `uobject` is null or the uverbs object of an object of a registered device of ours, in one of
/// the core's operations on it (so its context, which outlives its objects, is alive).
unsafe fn ucontext_of<'a, T: Driver>(
    uobject: *mut bindings::ib_uobject,
) -> Option<&'a T::UContext> {
    if uobject.is_null() {
        return None;
    }
    // SAFETY: The function's contract: the object's context is one of ours, whose `data` a
    // successful `alloc_ucontext` wrote (a context makes objects only after that).
    Some(unsafe {
        (*(*uobject).context.cast::<IbUContext<T::UContext>>())
            .data
            .assume_init_ref()
    })
}

/// Reads the core's `ib_udata`.
///
/// # Safety
///
/// `udata` is valid for the call.
unsafe fn udata_of<'a>(udata: *const bindings::ib_udata) -> Udata<'a> {
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

/// # Safety
///
/// Called by the RDMA core only, for a fresh PD of a registered device of ours (allocated with
/// `size_ib_pd` zeroed bytes, `device` and `uobject` set).
unsafe extern "C" fn alloc_pd<T: Driver>(
    pd: *mut bindings::ib_pd,
    udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: The core's PD, valid for the call; a user PD's context is alive.
    let Some(uctx) = (unsafe { ucontext_of::<T>((*pd).uobject) }) else {
        // A kernel PD: kernel verbs are not there yet.
        return EOPNOTSUPP.to_errno();
    };
    if udata.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: `udata` is the command's, valid for the call.
    let mut udata = unsafe { udata_of(udata) };
    // SAFETY: Our device (see `query_device`).
    let dev = unsafe { data::<T>((*pd).device) };
    match dev.alloc_pd(uctx, &mut udata) {
        Ok(p) => {
            // SAFETY: The core allocated an `IbPd<T::Pd>`; `data` is written once, here.
            unsafe { (*pd.cast::<IbPd<T::Pd>>()).data.write(p) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a PD whose `alloc_pd` succeeded.
unsafe extern "C" fn dealloc_pd<T: Driver>(
    pd: *mut bindings::ib_pd,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: A user PD of ours (only those are allocated: `alloc_pd` refuses the rest); its
    // context is alive while it is, and `data` was written by `alloc_pd`.
    let (dev, uctx, p) = unsafe {
        (
            data::<T>((*pd).device),
            ucontext_of::<T>((*pd).uobject),
            pd.cast::<IbPd<T::Pd>>(),
        )
    };
    let Some(uctx) = uctx else {
        return EINVAL.to_errno();
    };
    // SAFETY: `data` is initialised until dropped below, once, on success.
    match dev.dealloc_pd(uctx, unsafe { (*p).data.assume_init_ref() }) {
        Ok(()) => {
            // SAFETY: The core frees the PD after this and calls nothing more on it.
            unsafe { (*p).data.assume_init_drop() };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// The rest of the operations the core requires of every device (`ib_device_check_mandatory`):
/// CQs, QPs and MRs. Through the core they do not exist yet, for kernel consumers or user
/// contexts (which still make them on `/dev/qhcaN`): each create refuses with `EOPNOTSUPP` (a
/// kernel PD, one without a user context, is refused by [`alloc_pd`]), and the port does not claim
/// the MAD and CM capabilities, so that the core's MAD and CM clients leave it alone. The destroy
/// operations are never reached: the core destroys only what a create made.
mod kernel_verbs {
    use super::*;

    pub(super) fn fill(ops: &mut bindings::ib_device_ops) {
        ops.create_cq = Some(create_cq);
        ops.destroy_cq = Some(destroy_cq);
        ops.poll_cq = Some(poll_cq);
        ops.req_notify_cq = Some(req_notify_cq);
        ops.create_qp = Some(create_qp);
        ops.modify_qp = Some(modify_qp);
        ops.destroy_qp = Some(destroy_qp);
        ops.post_send = Some(post_send);
        ops.post_recv = Some(post_recv);
        ops.get_dma_mr = Some(get_dma_mr);
        ops.reg_user_mr = Some(reg_user_mr);
        ops.dereg_mr = Some(dereg_mr);
        // The core allocates these objects itself, this many bytes each, before calling the
        // create operation (which then refuses).
        ops.size_ib_cq = core::mem::size_of::<bindings::ib_cq>();
        ops.size_ib_qp = core::mem::size_of::<bindings::ib_qp>();
    }

    fn unsupported() -> c_int {
        EOPNOTSUPP.to_errno()
    }

    extern "C" fn create_cq(
        _cq: *mut bindings::ib_cq,
        _attr: *const bindings::ib_cq_init_attr,
        _attrs: *mut bindings::uverbs_attr_bundle,
    ) -> c_int {
        unsupported()
    }

    extern "C" fn destroy_cq(_cq: *mut bindings::ib_cq, _u: *mut bindings::ib_udata) -> c_int {
        0
    }

    extern "C" fn poll_cq(
        _cq: *mut bindings::ib_cq,
        _n: c_int,
        _wc: *mut bindings::ib_wc,
    ) -> c_int {
        unsupported()
    }

    extern "C" fn req_notify_cq(
        _cq: *mut bindings::ib_cq,
        _flags: bindings::ib_cq_notify_flags,
    ) -> c_int {
        unsupported()
    }

    extern "C" fn create_qp(
        _qp: *mut bindings::ib_qp,
        _attr: *mut bindings::ib_qp_init_attr,
        _u: *mut bindings::ib_udata,
    ) -> c_int {
        unsupported()
    }

    extern "C" fn modify_qp(
        _qp: *mut bindings::ib_qp,
        _attr: *mut bindings::ib_qp_attr,
        _mask: c_int,
        _u: *mut bindings::ib_udata,
    ) -> c_int {
        unsupported()
    }

    extern "C" fn destroy_qp(_qp: *mut bindings::ib_qp, _u: *mut bindings::ib_udata) -> c_int {
        0
    }

    /// # Safety
    ///
    /// Called by the RDMA core only, with `bad` valid for a write.
    unsafe extern "C" fn post_send(
        _qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_send_wr,
        bad: *mut *const bindings::ib_send_wr,
    ) -> c_int {
        // SAFETY: The core passes a valid place for the first request not posted.
        unsafe { bad.write(wr) };
        unsupported()
    }

    /// # Safety
    ///
    /// Called by the RDMA core only, with `bad` valid for a write.
    unsafe extern "C" fn post_recv(
        _qp: *mut bindings::ib_qp,
        wr: *const bindings::ib_recv_wr,
        bad: *mut *const bindings::ib_recv_wr,
    ) -> c_int {
        // SAFETY: As for `post_send`.
        unsafe { bad.write(wr) };
        unsupported()
    }

    extern "C" fn get_dma_mr(_pd: *mut bindings::ib_pd, _access: c_int) -> *mut bindings::ib_mr {
        EOPNOTSUPP.to_ptr()
    }

    extern "C" fn reg_user_mr(
        _pd: *mut bindings::ib_pd,
        _start: u64,
        _length: u64,
        _iova: u64,
        _access: c_int,
        _dmah: *mut bindings::ib_dmah,
        _u: *mut bindings::ib_udata,
    ) -> *mut bindings::ib_mr {
        EOPNOTSUPP.to_ptr()
    }

    extern "C" fn dereg_mr(_mr: *mut bindings::ib_mr, _u: *mut bindings::ib_udata) -> c_int {
        0
    }
}

/// The port capabilities qhca's port claims now: RoCE v2 (UDP encapsulation) with Ethernet
/// address handles, without the MAD and CM capabilities that need kernel QP1 (so its
/// `max_mad_size` is 0: the core refuses a MAD size on a port without MADs).
pub(crate) const PORT_CAPS_ROCE_V2: u32 =
    bindings::RDMA_CORE_CAP_PROT_ROCE_UDP_ENCAP | bindings::RDMA_CORE_CAP_ETH_AH;
