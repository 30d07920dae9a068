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
//!
//! - this file: the device (registration, attributes, device-wide events);
//! - `ucontext`: user contexts, their commands' driver data, the MMIO they map;
//! - `pd`: protection domains;
//! - `cq`, `qp`, `srq`, `mr` (regions and windows), `ah`: the verbs objects of user contexts;
//! - `stats`: the port's hardware counters;
//! - `kernel_verbs`: the data path of kernel consumers' objects (posts, polls, arming).

mod ah;
mod cq;
mod kernel_verbs;
mod mr;
mod pd;
mod qp;
mod srq;
mod stats;
mod ucontext;

pub(crate) use ah::Av;
pub(crate) use cq::{CqAttr, CqEvents};
pub(crate) use kernel_verbs::{RecvWr, SendWr, WrKind};
pub(crate) use mr::{MrAttr, MrRange, MrRereg};
use pd::IbPd;
pub(crate) use qp::QpEvents;
pub(crate) use srq::SrqEvents;
pub(crate) use stats::StatNames;
use ucontext::IbUContext;
pub(crate) use ucontext::{method_ucontext, IoMapping, PageMapping, UContext, Udata};

use core::{
    ffi::{c_int, c_void},
    fmt::Write,
    marker::PhantomData,
    mem::MaybeUninit,
    ptr::NonNull,
};
use kernel::{
    bindings,
    device::{Bound, Device},
    error::to_result,
    ffi::c_char,
    mm::virt::VmaNew,
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex,
    },
};

use crate::{netdev::Netdev, shim::raw_device};

/// What the RDMA core asks of a device. Each method answers for the device the [`Registration`]
/// holds; a `&mut` argument is the core's, zeroed or filled with defaults by the core, and
/// written only by the method.
///
/// # Safety
///
/// The [`CqEvents`], [`QpEvents`] and [`SrqEvents`] an implementation is given by
/// [`Driver::create_cq`], [`Driver::create_qp`] and [`Driver::create_srq`] point to the core's
/// CQ, QP and SRQ, which the core frees once [`Driver::destroy_cq`], [`Driver::destroy_qp`] or
/// [`Driver::destroy_srq`] returns `Ok`: by then the implementation has
/// dropped them, and no call through them runs or starts afterwards (nor after a failed create,
/// whose object the core frees too).
pub(crate) unsafe trait Driver: Send + Sync + Sized {
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
    /// The names of the port's hardware counters ([`stats`]).
    fn port_counter_names(&self) -> &'static [bindings::rdma_stat_desc];
    /// The port's counters now, in the order of [`Driver::port_counter_names`] (`out` has one
    /// place per name).
    fn port_counters(&self, port: u32, out: &mut [u64]) -> Result;
    /// `add_gid`: the core put `gid` in its GID table (the port's netdev has the address, or it
    /// is the port's default GID); the device's table gets it at the same index, which address
    /// vectors name. The core calls this and [`Driver::del_gid`] one at a time per port.
    fn add_gid(&self, gid: &GidAttr<'_>) -> Result;
    /// `del_gid`: the entry `gid` names leaves the core's table.
    fn del_gid(&self, gid: &GidAttr<'_>) -> Result;

    /// What one user context (the core's `ib_ucontext`: one open of the uverbs device) holds.
    type UContext: Send + Sync;
    /// `alloc_ucontext`: a new user context; `udata` carries the driver's input and response.
    fn alloc_ucontext(&self, uctx: &UContext, udata: &mut Udata<'_>) -> Result<Self::UContext>;
    /// `dealloc_ucontext`: the context goes. Its user mappings are gone, or were zapped when the
    /// core disassociated it (`ib_unregister_device` does that before it returns).
    fn dealloc_ucontext(&self, ctx: Self::UContext);
    /// `mmap(2)` of a [`PageMapping`] of `ctx`'s: maps the page `token` names into `vma` (one
    /// page, shared), which the core found by the entry's offset.
    fn mmap_page(&self, ctx: &Self::UContext, token: u64, vma: &VmaNew) -> Result;

    /// A protection domain of a user context.
    type Pd: Send + Sync;
    /// `alloc_pd` for user context `uctx`.
    fn alloc_pd(&self, uctx: &Self::UContext, udata: &mut Udata<'_>) -> Result<Self::Pd>;
    /// `dealloc_pd` (of a user or kernel PD): the core deallocates a PD only once nothing uses
    /// it. On success `pd` is dropped; on failure the core keeps the PD (and may call again).
    fn dealloc_pd(&self, pd: &Self::Pd) -> Result;

    // Every destroy below: the core destroys an object only once nothing of the context uses
    // it; on success the object is dropped, on failure the core keeps it, and may call again
    // (a user's destroy) or leak it with a warning (when the context closes or the device
    // goes), so a driver fails a destroy only when it must.

    /// A completion queue of a user context.
    type Cq: Send + Sync;
    /// `create_user_cq`: the CQ and its number of entries (at least `attr.cqe`). `ev` reaches
    /// the core's CQ until the CQ is destroyed.
    fn create_cq(
        &self,
        uctx: &Self::UContext,
        ev: CqEvents,
        attr: &CqAttr,
        udata: &mut Udata<'_>,
    ) -> Result<(Self::Cq, u32)>;
    /// `resize_user_cq`: the CQ moves to a ring of at least `cqe` entries that `udata` names;
    /// `moved` is told its number of entries while the CQ cannot move again.
    fn resize_cq(
        &self,
        cq: &Self::Cq,
        cqe: u32,
        udata: &mut Udata<'_>,
        moved: &mut dyn FnMut(u32),
    ) -> Result;
    /// `destroy_cq`: `ev` is dropped before this returns success.
    fn destroy_cq(&self, cq: &Self::Cq) -> Result;

    /// A shared receive queue of a user context or of the kernel's consumers.
    type Srq: Send + Sync;
    /// `create_srq` of a user SRQ in `pd`: the SRQ; `attr.max_wr` and `attr.max_sge` are
    /// updated to what it has. `ev` reaches the core's SRQ until the SRQ is destroyed.
    fn create_srq(
        &self,
        pd: &Self::Pd,
        ev: SrqEvents,
        attr: &mut bindings::ib_srq_attr,
        udata: &mut Udata<'_>,
    ) -> Result<Self::Srq>;
    /// `modify_srq`: the attributes `mask` (`IB_SRQ_*`) names.
    fn modify_srq(&self, srq: &Self::Srq, attr: &bindings::ib_srq_attr, mask: u32) -> Result;
    /// `query_srq`: fills the attributes.
    fn query_srq(&self, srq: &Self::Srq, attr: &mut bindings::ib_srq_attr) -> Result;
    /// `destroy_srq` (no QP uses it): `ev` is dropped before this returns success.
    fn destroy_srq(&self, srq: &Self::Srq) -> Result;

    /// A queue pair of a user context.
    type Qp: Send + Sync;
    /// `create_qp` of a user QP in `pd` with the CQs `init` names (`send_cq`, `recv_cq`) and,
    /// if it has one, the SRQ it receives from: the QP and its number; `init.cap` is updated to
    /// what the QP has. `ev` reaches the core's QP until the QP is destroyed.
    #[allow(clippy::too_many_arguments)]
    fn create_qp(
        &self,
        pd: &Self::Pd,
        ev: QpEvents,
        init: &mut bindings::ib_qp_init_attr,
        send_cq: &Self::Cq,
        recv_cq: &Self::Cq,
        srq: Option<&Self::Srq>,
        udata: &mut Udata<'_>,
    ) -> Result<(Self::Qp, u32)>;
    /// `modify_qp`: the attributes `mask` (`IB_QP_*`) names; `udata` is a user's command's
    /// (none for a kernel QP). An address vector's source GID is resolved (see
    /// [`Av::from_core`]).
    fn modify_qp(
        &self,
        qp: &Self::Qp,
        attr: &bindings::ib_qp_attr,
        mask: u32,
        udata: Option<&mut Udata<'_>>,
    ) -> Result;
    /// `query_qp`: fills the attributes and the creation attributes.
    fn query_qp(
        &self,
        qp: &Self::Qp,
        attr: &mut bindings::ib_qp_attr,
        init: &mut bindings::ib_qp_init_attr,
    ) -> Result;
    /// `destroy_qp`: `ev` is dropped before this returns success.
    fn destroy_qp(&self, qp: &Self::Qp) -> Result;

    /// A memory region of a user context.
    type Mr: Send + Sync;
    /// `reg_user_mr` in `pd`: the region and its key (its lkey and rkey).
    fn reg_user_mr(
        &self,
        pd: &Self::Pd,
        attr: &MrAttr,
        udata: &mut Udata<'_>,
    ) -> Result<(Self::Mr, u32)>;
    /// `rereg_user_mr` of user region `mr`, with what `change` names changed, in `pd` (the
    /// region's PD unless the rereg changes it): `None` if `mr` itself changed (its keys
    /// stay), else a new region (and its key) that replaces `mr`; then `mr` is gone from the
    /// device and [`Driver::dereg_mr`] of it, which the core calls next, does nothing. On
    /// failure `mr` is as it was.
    fn rereg_user_mr(
        &self,
        mr: &Self::Mr,
        pd: &Self::Pd,
        change: &MrRereg,
        udata: &mut Udata<'_>,
    ) -> Result<Option<(Self::Mr, u32)>>;
    /// `dereg_mr`.
    fn dereg_mr(&self, mr: &Self::Mr) -> Result;
    /// `advise_mr` of ranges (`address, length, lkey`) of regions of `pd`'s context: prefetch
    /// (`write`: for writing) now (`flush`) or in the background.
    fn advise_mr(
        &self,
        pd: &Self::Pd,
        write: bool,
        flush: bool,
        ranges: &[bindings::ib_sge],
    ) -> Result;

    /// A memory window of a user context.
    type Mw: Send + Sync;
    /// `alloc_mw` in `pd` of type `kind` (`IB_MW_TYPE_*`): the window and its rkey.
    fn alloc_mw(
        &self,
        pd: &Self::Pd,
        kind: bindings::ib_mw_type,
        udata: &mut Udata<'_>,
    ) -> Result<(Self::Mw, u32)>;
    /// `dealloc_mw`.
    fn dealloc_mw(&self, mw: &Self::Mw) -> Result;

    /// An address handle of a user context.
    type Ah: Send + Sync;
    /// `create_user_ah` in `pd` for `av`.
    fn create_ah(&self, pd: &Self::Pd, av: &Av, udata: &mut Udata<'_>) -> Result<Self::Ah>;
    /// `destroy_ah` (of a user or kernel AH); for a kernel AH it must not sleep.
    fn destroy_ah(&self, ah: &Self::Ah) -> Result;

    // Kernel verbs: what the kernel's own consumers use (the MAD layer and the CM on QP1,
    // NVMe over RDMA, ...), on objects without a user context. Creating and destroying them may
    // sleep, except for AHs; the data path (posts, polls, arming: [`kernel_verbs`]) never
    // sleeps, since the core may call it with interrupts off.

    /// Whether the device serves kernel consumers. Without, the core's kernel operations
    /// refuse with `EOPNOTSUPP` and the port claims neither MADs nor the CM.
    fn kernel_verbs(&self) -> bool;
    /// `alloc_pd` of a kernel PD.
    fn alloc_kernel_pd(&self) -> Result<Self::Pd>;
    /// `get_dma_mr`: a region of kernel PD `pd` over every DMA address, with `access`
    /// (`IB_ACCESS_*`): the region and its key.
    fn get_dma_mr(&self, pd: &Self::Pd, access: u32) -> Result<(Self::Mr, u32)>;
    /// `alloc_mr` of a fast-registration region (`IB_MR_TYPE_MEM_REG`) of kernel PD `pd` that
    /// maps up to `max_pages` pages: the region and its key (`EOPNOTSUPP` without fast
    /// registration).
    fn alloc_mr(&self, pd: &Self::Pd, max_pages: u32) -> Result<(Self::Mr, u32)>;
    /// `map_mr_sg` of region `mr` begins, in pages of `page_size` bytes. Must not sleep.
    fn map_mr_start(&self, mr: &Self::Mr, page_size: u32) -> Result;
    /// The next page of `map_mr_sg`'s mapping (page aligned). Must not sleep.
    fn map_mr_page(&self, mr: &Self::Mr, addr: u64) -> Result;
    /// `create_cq` of a kernel CQ: the CQ and its number of entries (at least `attr.cqe`).
    fn create_kernel_cq(&self, ev: CqEvents, attr: &CqAttr) -> Result<(Self::Cq, u32)>;
    /// `create_srq` of a kernel SRQ in kernel PD `pd`, as [`Driver::create_srq`].
    fn create_kernel_srq(
        &self,
        pd: &Self::Pd,
        ev: SrqEvents,
        attr: &mut bindings::ib_srq_attr,
    ) -> Result<Self::Srq>;
    /// `create_qp` of a kernel QP (RC, UD, or the port's GSI QP) in kernel PD `pd`, receiving
    /// from kernel SRQ `srq` if given: the QP and its number; `init.cap` is updated to what
    /// the QP has.
    fn create_kernel_qp(
        &self,
        pd: &Self::Pd,
        ev: QpEvents,
        init: &mut bindings::ib_qp_init_attr,
        send_cq: &Self::Cq,
        recv_cq: &Self::Cq,
        srq: Option<&Self::Srq>,
    ) -> Result<(Self::Qp, u32)>;
    /// `create_ah` of a kernel AH in kernel PD `pd`. Must not sleep.
    fn create_kernel_ah(&self, pd: &Self::Pd, av: &Av) -> Result<Self::Ah>;
    /// `poll_cq` of a kernel CQ: fills the first entries of `wc` with the oldest completions
    /// (`qp` of each is the core's QP that [`QpEvents`] named at its creation) and returns
    /// how many.
    fn poll_cq(&self, cq: &Self::Cq, wc: &mut [MaybeUninit<bindings::ib_wc>]) -> Result<usize>;
    /// `req_notify_cq` of a kernel CQ: the next completion (`solicited`: the next solicited
    /// one) runs its completion handler once. Returns true if `report_missed` and completions
    /// are waiting already (the caller polls again rather than wait).
    fn req_notify_cq(&self, cq: &Self::Cq, solicited: bool, report_missed: bool) -> Result<bool>;
    /// `post_send` of a kernel QP: posts the requests in order, ringing once. `Err((e, n))`:
    /// the first `n` were posted, the next one was not (nor any after it).
    fn post_send(
        &self,
        qp: &Self::Qp,
        wrs: &mut dyn Iterator<Item = Result<SendWr<'_, Self::Ah, Self::Mr>>>,
    ) -> core::result::Result<(), (Error, usize)>;
    /// `post_recv` of a kernel QP, as [`Driver::post_send`].
    fn post_recv(
        &self,
        qp: &Self::Qp,
        wrs: &mut dyn Iterator<Item = Result<RecvWr<'_>>>,
    ) -> core::result::Result<(), (Error, usize)>;
    /// `post_srq_recv` of a kernel SRQ, as [`Driver::post_send`].
    fn post_srq_recv(
        &self,
        srq: &Self::Srq,
        wrs: &mut dyn Iterator<Item = Result<RecvWr<'_>>>,
    ) -> core::result::Result<(), (Error, usize)>;
}

/// What a device is called and how it looks to the core, fixed at registration.
pub(crate) struct Info<'a> {
    /// The device's name (`qhca0`): no `%d`, the driver numbers its devices itself.
    pub(crate) name: &'a CStr,
    pub(crate) node_guid: u64,
    /// `node_desc` in sysfs (truncated to `IB_DEVICE_NODE_DESC_MAX - 1` bytes).
    pub(crate) node_desc: &'a CStr,
    /// The driver's methods of the core's ioctl interface (`ib_device.driver_def`): a static,
    /// `{}`-terminated `uapi_definition` table whose handlers find their user context with
    /// [`method_ucontext`], or null for none.
    pub(crate) methods: *const bindings::uapi_definition,
}

/// The allocation the core makes for one device: the `ib_device` first, as the core requires
/// (it allocates and frees the whole by the `ib_device`'s address), the driver's data behind it.
#[repr(C)]
struct IbDevice<T> {
    ib: bindings::ib_device,
    data: T,
}

/// An `ib_device` registered with the RDMA core for a bound PCI device, with its driver data
/// and the netdev of its port, if it has one.
///
/// Unregistered by [`Registration::unregister`] (the unbind path calls it before the device
/// stops) or else when dropped; freed when dropped. It lives in the bound device's driver data,
/// so it never outlives the binding whose device it names as parent and DMA device.
pub(crate) struct Registration<'bound, T: Driver> {
    dev: NonNull<IbDevice<T>>,
    registered: Atomic<bool>,
    gate: Arc<EventGate>,
    /// Bound to port 1 from before registration; unregistered only after the `ib_device` is
    /// (dropped after `drop` ran).
    netdev: Option<Netdev>,
    _bound: PhantomData<&'bound Device<Bound>>,
}

/// Lets [`Events`] reach the `ib_device` while it is registered, and never after.
#[pin_data]
struct EventGate {
    ib: *mut bindings::ib_device,
    /// The port's netdev (the registration's, dropped after it is unregistered), or null.
    ndev: *mut bindings::net_device,
    /// True while registered; cleared, under the lock, before unregistering.
    #[pin]
    open: Mutex<bool>,
}

// SAFETY: `ib` is only dereferenced (by the core, in `ib_dispatch_event`) and `ndev` only passed
// to the netdev's shim under `open`'s lock while `open` is true, that is while the device is
// registered and allocated and the registration (which owns the netdev) not dropped.
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

    /// The port's link went up or down (`QHCA_EQE_PORT_CHANGE`): the netdev's carrier follows
    /// (from a work item that reads the port again), and the core turns the carrier's change
    /// into `IB_EVENT_PORT_ACTIVE` or `IB_EVENT_PORT_ERR` for every user context, kernel client
    /// and rdma_cm (`ib_dispatch_port_state_event`, once per change), as for any RoCE device
    /// bound to a netdev: raising them here too would say everything twice. May sleep.
    pub(crate) fn link_changed(&self) {
        let open = self.0.open.lock();
        if *open && !self.0.ndev.is_null() {
            // SAFETY: Open (checked under the lock, which unregistering takes before the
            // registration and its netdev can go), so the netdev is alive.
            unsafe { crate::netdev::link_changed(self.0.ndev) };
        }
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
    /// `parent`; the port's netdev is `netdev` (whose addresses become the port's GIDs).
    pub(crate) fn new(
        parent: &'bound Device<Bound>,
        info: &Info<'_>,
        data: T,
        netdev: Option<Netdev>,
    ) -> Result<Self> {
        const { assert!(core::mem::align_of::<IbDevice<T>>() <= 8) };
        // The core allocates user contexts the same way (kzalloc of `size_ib_ucontext`).
        const { assert!(core::mem::align_of::<IbUContext<T::UContext>>() <= 8) };
        const { assert!(core::mem::align_of::<IbPd<T::Pd>>() <= 8) };
        const { assert!(core::mem::align_of::<cq::IbCq<T::Cq>>() <= 8) };
        const { assert!(core::mem::align_of::<qp::IbQp<T::Qp>>() <= 8) };
        const { assert!(core::mem::align_of::<srq::IbSrq<T::Srq>>() <= 8) };
        const { assert!(core::mem::align_of::<mr::IbMw<T::Mw>>() <= 8) };
        const { assert!(core::mem::align_of::<ah::IbAh<T::Ah>>() <= 8) };
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
        let ndev = netdev
            .as_ref()
            .map_or(core::ptr::null_mut(), Netdev::as_raw);
        let gate = Arc::pin_init(
            pin_init!(EventGate {
                ib,
                ndev,
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
            netdev,
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
        if let Some(n) = &this.netdev {
            // SAFETY: `ib` is registered, and `unregister` detaches the netdev before it
            // unregisters `ib`.
            unsafe { n.attach(ib) };
        }
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
        ib.driver_def = info.methods;
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
        ops.alloc_ucontext = Some(ucontext::alloc_ucontext::<T>);
        ops.dealloc_ucontext = Some(ucontext::dealloc_ucontext::<T>);
        ops.disassociate_ucontext = Some(ucontext::disassociate_ucontext);
        ops.mmap = Some(ucontext::mmap::<T>);
        ops.mmap_free = Some(ucontext::mmap_free);
        ops.size_ib_ucontext = core::mem::size_of::<IbUContext<T::UContext>>();
        ops.alloc_pd = Some(pd::alloc_pd::<T>);
        ops.dealloc_pd = Some(pd::dealloc_pd::<T>);
        ops.size_ib_pd = core::mem::size_of::<IbPd<T::Pd>>();
        ops.create_cq = Some(cq::create_cq::<T>);
        ops.create_user_cq = Some(cq::create_user_cq::<T>);
        ops.resize_user_cq = Some(cq::resize_user_cq::<T>);
        ops.destroy_cq = Some(cq::destroy_cq::<T>);
        ops.size_ib_cq = core::mem::size_of::<cq::IbCq<T::Cq>>();
        ops.create_qp = Some(qp::create_qp::<T>);
        ops.modify_qp = Some(qp::modify_qp::<T>);
        ops.query_qp = Some(qp::query_qp::<T>);
        ops.destroy_qp = Some(qp::destroy_qp::<T>);
        ops.size_ib_qp = core::mem::size_of::<qp::IbQp<T::Qp>>();
        ops.create_srq = Some(srq::create_srq::<T>);
        ops.modify_srq = Some(srq::modify_srq::<T>);
        ops.query_srq = Some(srq::query_srq::<T>);
        ops.destroy_srq = Some(srq::destroy_srq::<T>);
        ops.size_ib_srq = core::mem::size_of::<srq::IbSrq<T::Srq>>();
        ops.reg_user_mr = Some(mr::reg_user_mr::<T>);
        ops.rereg_user_mr = Some(mr::rereg_user_mr::<T>);
        ops.dereg_mr = Some(mr::dereg_mr::<T>);
        ops.advise_mr = Some(mr::advise_mr::<T>);
        ops.alloc_mw = Some(mr::alloc_mw::<T>);
        ops.dealloc_mw = Some(mr::dealloc_mw::<T>);
        ops.size_ib_mw = core::mem::size_of::<mr::IbMw<T::Mw>>();
        ops.create_ah = Some(ah::create_ah::<T>);
        ops.create_user_ah = Some(ah::create_user_ah::<T>);
        ops.destroy_ah = Some(ah::destroy_ah::<T>);
        ops.size_ib_ah = core::mem::size_of::<ah::IbAh<T::Ah>>();
        ops.alloc_hw_port_stats = Some(stats::alloc_hw_port_stats::<T>);
        ops.get_hw_stats = Some(stats::get_hw_stats::<T>);
        ops.add_gid = Some(add_gid::<T>);
        ops.del_gid = Some(del_gid::<T>);
        ops.get_dma_mr = Some(mr::get_dma_mr::<T>);
        ops.alloc_mr = Some(mr::alloc_mr::<T>);
        ops.map_mr_sg = Some(mr::map_mr_sg::<T>);
        kernel_verbs::fill::<T>(&mut ops);
        // SAFETY: `ib` is valid; `ops` is read (copied into `ib.ops`) during the call only.
        unsafe { bindings::ib_set_device_ops(ib, &*ops) };
        if let Some(n) = &self.netdev {
            // SAFETY: `ib` is valid and not registered; the netdev is registered and stays so
            // until after `ib` is unregistered (`self.netdev` is dropped after `drop`), which
            // lets go of it (`free_netdevs`), as deallocating an unregistered device does.
            to_result(unsafe { bindings::ib_device_set_netdev(ib, n.as_raw(), 1) })?;
        }
        Ok(())
    }

    /// Unregisters the device (the first call does; later ones return at once): when this
    /// returns no operation runs or will run, every user context is disassociated (the core
    /// calls the driver for that) and the device is gone from sysfs and netlink.
    pub(crate) fn unregister(&self) {
        if self.registered.xchg(false, Relaxed) {
            // The Ethernet function's objects are the device's own kernel verbs: gone first.
            if let Some(n) = &self.netdev {
                n.detach();
            }
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

/// The port capabilities of a RoCE v2 port (UDP encapsulation) with Ethernet address handles,
/// without the MAD and CM capabilities that need kernel QP1 (so its `max_mad_size` is 0: the
/// core refuses a MAD size on a port without MADs).
pub(crate) const PORT_CAPS_ROCE_V2: u32 =
    bindings::RDMA_CORE_CAP_PROT_ROCE_UDP_ENCAP | bindings::RDMA_CORE_CAP_ETH_AH;

/// The port capabilities of a RoCE v2 port with kernel verbs and QP1: MADs, the CM and
/// `AF_IB` addresses, as ConnectX's (`RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP`), with MADs of
/// [`MAD_SIZE`] bytes.
pub(crate) const PORT_CAPS_ROCE_V2_CM: u32 = bindings::RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP;

/// The size of a MAD (`IB_MGMT_MAD_SIZE` of `rdma/ib_mad.h`, an enum the bindings lack): what a
/// port with MADs announces.
pub(crate) const MAD_SIZE: u32 = 256;

/// An entry of a port's GID table, as the core hands it to `add_gid` and `del_gid`.
pub(crate) struct GidAttr<'a>(&'a bindings::ib_gid_attr);

/// The types of GID a port may hold.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum GidType {
    /// RoCE v1 (or InfiniBand): never on qhca's port, which claims RoCE v2 alone.
    Other,
    /// RoCE v2 (`IB_GID_TYPE_ROCE_UDP_ENCAP`).
    RoceV2,
}

impl GidAttr<'_> {
    pub(crate) fn index(&self) -> u32 {
        u32::from(self.0.index)
    }

    pub(crate) fn port(&self) -> u32 {
        self.0.port_num
    }

    /// The GID, as on the wire.
    pub(crate) fn gid(&self) -> [u8; 16] {
        // SAFETY: Every bit pattern is a valid `[u8; 16]`, the union's raw view.
        unsafe { self.0.gid.raw }
    }

    pub(crate) fn gid_type(&self) -> GidType {
        if self.0.gid_type == bindings::ib_gid_type_IB_GID_TYPE_ROCE_UDP_ENCAP {
            GidType::RoceV2
        } else {
            GidType::Other
        }
    }

    /// The prefix length of the IPv4 address `addr` on the entry's netdev (32 without one).
    pub(crate) fn ipv4_prefix(&self, addr: [u8; 4]) -> u8 {
        let ndev = self.0.ndev;
        if ndev.is_null() {
            return 32;
        }
        // SAFETY: The core holds a reference on an entry's netdev for as long as the entry is in
        // its table, which covers `add_gid` and `del_gid`, the only places a `GidAttr` exists.
        unsafe { crate::netdev::ipv4_prefix(ndev, addr) }
    }
}

/// # Safety
///
/// Called by the RDMA core only, with `attr` an entry of a registered device of ours.
unsafe extern "C" fn add_gid<T: Driver>(
    attr: *const bindings::ib_gid_attr,
    _context: *mut *mut c_void,
) -> c_int {
    // SAFETY: The core's entry, valid for the call; its device is ours and registered.
    let (attr, dev) = unsafe { (&*attr, data::<T>((*attr).device)) };
    errno(dev.add_gid(&GidAttr(attr)))
}

/// # Safety
///
/// Called by the RDMA core only, with `attr` an entry of a registered device of ours.
unsafe extern "C" fn del_gid<T: Driver>(
    attr: *const bindings::ib_gid_attr,
    _context: *mut *mut c_void,
) -> c_int {
    // SAFETY: As for `add_gid`.
    let (attr, dev) = unsafe { (&*attr, data::<T>((*attr).device)) };
    errno(dev.del_gid(&GidAttr(attr)))
}
