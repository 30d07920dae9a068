// SPDX-License-Identifier: GPL-2.0

//! The port's `net_device` (`qhca_netdev.c`, its data path `qhca_eth.c`), wrapped once.
//!
//! A RoCE port is an Ethernet port: the RDMA core fills its GID table from the IP addresses of
//! the Linux interface bound to it (`ib_device_set_netdev`), and connection management resolves
//! addresses through that interface. On a device with the Ethernet function
//! (`QHCA_CAP_ETH`) the interface carries the port's frames that are not RoCEv2, through the
//! device's Ethernet QP, once the `ib_device` is registered ([`Netdev::attach`]) and until it is
//! about to be unregistered ([`Netdev::detach`]). Without it (a port with no wire) the interface
//! carries nothing: it has the port's MAC, takes addresses, drops every frame the stack hands
//! it (counted as `tx_dropped`) and, being `IFF_NOARP`, resolves every neighbour to its own MAC,
//! which the device ignores (it routes by GID).

use core::{ffi::c_int, ptr::NonNull};
use kernel::{
    bindings,
    device::{Bound, Device},
    prelude::*,
};

// Declared in `qhca_shim.h`. The pointers are opaque here (`improper_ctypes` objects to some
// kernel structs' zero-sized members, which only C reads).
#[allow(improper_ctypes)]
extern "C" {
    fn qhca_shim_netdev_new(
        parent: *mut bindings::device,
        mac: *const u8,
        eth: bool,
        err: *mut c_int,
    ) -> *mut bindings::net_device;
    fn qhca_shim_netdev_attach(ndev: *mut bindings::net_device, ib: *mut bindings::ib_device);
    fn qhca_shim_netdev_detach(ndev: *mut bindings::net_device);
    fn qhca_shim_netdev_link_changed(ndev: *mut bindings::net_device);
    fn qhca_shim_netdev_free(ndev: *mut bindings::net_device);
    fn qhca_shim_netdev_ipv4_prefix(ndev: *mut bindings::net_device, addr: u32) -> u8;
}

/// A registered `net_device` of a bound qhca device; unregistered and freed when dropped.
pub(crate) struct Netdev {
    ndev: NonNull<bindings::net_device>,
}

// SAFETY: The netdev is the networking core's to lock; this handle only passes its address to
// the core and unregisters it once, in `drop`.
unsafe impl Send for Netdev {}
// SAFETY: Through `&Self` only the address is read.
unsafe impl Sync for Netdev {}

impl Netdev {
    /// Registers an Ethernet interface (`ethN`) with MAC `mac`, child of `parent`, which
    /// carries frames through the device's Ethernet QP if `eth` (the device has
    /// `QHCA_CAP_ETH`).
    ///
    /// # Errors
    ///
    /// `EINVAL` for a MAC that is not a unicast address, `ENOMEM`, or what registering returns.
    pub(crate) fn new(parent: &Device<Bound>, mac: &[u8; 6], eth: bool) -> Result<Self> {
        let mut err: c_int = 0;
        // SAFETY: `parent` is a live device; `mac` is 6 readable bytes, read during the call.
        let ndev = unsafe {
            qhca_shim_netdev_new(crate::shim::raw_device(parent), mac.as_ptr(), eth, &mut err)
        };
        match NonNull::new(ndev) {
            Some(ndev) => Ok(Self { ndev }),
            None => Err(Error::from_errno(err)),
        }
    }

    /// The Ethernet function may run on `ib`, and does while the interface is up. May sleep
    /// (it takes RTNL).
    ///
    /// # Safety
    ///
    /// `ib` is the registered `ib_device` this netdev is bound to, and stays registered until
    /// [`Netdev::detach`] has returned.
    pub(crate) unsafe fn attach(&self, ib: *mut bindings::ib_device) {
        // SAFETY: The netdev is registered (`self` lives); `ib` as the function's contract says.
        unsafe { qhca_shim_netdev_attach(self.ndev.as_ptr(), ib) };
    }

    /// Stops the Ethernet function for good: its QP, CQ and buffers are gone when this returns.
    /// May sleep (it takes RTNL). Does nothing if it never ran.
    pub(crate) fn detach(&self) {
        // SAFETY: The netdev is registered (`self` lives); the shim forgets the `ib_device`.
        unsafe { qhca_shim_netdev_detach(self.ndev.as_ptr()) };
    }

    /// The `net_device`, registered until `self` is dropped.
    pub(crate) fn as_raw(&self) -> *mut bindings::net_device {
        self.ndev.as_ptr()
    }
}

impl Drop for Netdev {
    fn drop(&mut self) {
        // SAFETY: Registered by `new`, unregistered and freed once, here.
        unsafe { qhca_shim_netdev_free(self.ndev.as_ptr()) };
    }
}

/// The port's link went up or down: the carrier of a running Ethernet function follows what
/// the port says (read again from a work item). Any context.
///
/// # Safety
///
/// `ndev` is a [`Netdev`]'s `net_device`, and that `Netdev` is not dropped during the call.
pub(crate) unsafe fn link_changed(ndev: *mut bindings::net_device) {
    // SAFETY: The caller's contract: `ndev` is registered and allocated; the shim only queues
    // its work item, which freeing the netdev cancels.
    unsafe { qhca_shim_netdev_link_changed(ndev) }
}

/// The prefix length of IPv4 address `addr` on `ndev` (32 if it is not there).
///
/// # Safety
///
/// `ndev` is a `net_device` that stays allocated during the call (a reference is held on it).
pub(crate) unsafe fn ipv4_prefix(ndev: *mut bindings::net_device, addr: [u8; 4]) -> u8 {
    // SAFETY: The caller's contract; the shim reads the address list under RCU.
    unsafe { qhca_shim_netdev_ipv4_prefix(ndev, u32::from_ne_bytes(addr)) }
}
