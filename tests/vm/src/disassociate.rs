// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The driver's lifetime and soundness cases: asynchronous events and poll(2), doorbell pages
//! allocated on first use, page-list limits and MRs over 2 GiB, pinning outside the device-wide
//! lock, a dead command queue, the probe error path, a device that claims more doorbell pages
//! than its BAR holds, and disassociation on surprise removal under traffic.
//!
//! They speak to the driver with raw system calls (no provider), so that they test the driver
//! alone. The fault-injection knobs are the driver's `/sys/kernel/debug/qhca/` files. The cases
//! that unbind or remove the device ([`destructive_cases`]) put it back, even when they fail.
//! `qhca-vmtest __disassoc DEVICE` is the helper process of [`removal::remove_under_traffic`].

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};
use qhca::{Access, AsyncEvent, ConnInfo, ConnOpts, Context, Cq, Pd, Qp, QpCaps, SendWr, WrOp};
use qhca_uapi::ioctl::ioc_size;
use qhca_uapi::{
    qhca_ioc_async_event, qhca_ioc_create_cq, qhca_ioc_handle, qhca_ioc_query_device,
    qhca_ioc_reg_mr, QHCA_ACCESS_LOCAL_WRITE, QHCA_ASYNC_DEVICE_FATAL, QHCA_IOCTL_ALLOC_PD,
    QHCA_IOCTL_CREATE_CQ, QHCA_IOCTL_DEREG_MR, QHCA_IOCTL_GET_ASYNC_EVENT, QHCA_IOCTL_QUERY_DEVICE,
    QHCA_IOCTL_REG_MR, QHCA_MAX_PAGE_LIST, UAR_PAGE_SIZE,
};

use crate::harness::{Case, CaseResult, Fail, T};
use crate::sys::RawMap;
use crate::system::{self, wait_for, Config, Unbound};
use crate::{bail, check, check_eq, check_errno, require};

mod events;
mod failure;
mod memory;
mod removal;

pub use removal::helper_main;

const DEBUGFS: &str = "/sys/kernel/debug/qhca";
const PAGE: u64 = 4096;
/// How long a node may take to appear after bind or rescan.
const NODE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a disassociated process may take to notice and exit.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Exit code of the `__disassoc` helper when everything it checked held.
const HELPER_OK: i32 = 3;

/// The cases that leave the device bound: run with the others.
pub fn cases() -> Vec<Case<Config>> {
    vec![
        Case {
            name: "async_event_and_poll",
            run: events::async_event_and_poll,
        },
        Case {
            name: "open_takes_no_doorbell_page",
            run: memory::open_takes_no_doorbell_page,
        },
        Case {
            name: "mr_limits_before_pinning",
            run: memory::mr_limits_before_pinning,
        },
        Case {
            name: "large_mr_pinned_outside_lock",
            run: memory::large_mr_pinned_outside_lock,
        },
        Case {
            name: "cq_overrun_event_rate_limited",
            run: events::cq_overrun_event_rate_limited,
        },
        Case {
            name: "events_routed_by_context",
            run: events::events_routed_by_context,
        },
        Case {
            name: "eq_overflow_reported",
            run: events::eq_overflow_reported,
        },
    ]
}

/// The cases that kill, unbind or remove the device (and put it back): run last.
pub fn destructive_cases() -> Vec<Case<Config>> {
    vec![
        Case {
            name: "dead_queue_stops_device",
            run: failure::dead_queue_stops_device,
        },
        Case {
            name: "dead_queue_on_close",
            run: failure::dead_queue_on_close,
        },
        Case {
            name: "odp_invalidate_timeout_stops_device",
            run: failure::odp_invalidate_timeout_stops_device,
        },
        Case {
            name: "probe_error_stops_device",
            run: failure::probe_error_stops_device,
        },
        Case {
            name: "uar_count_checked_against_bar",
            run: failure::uar_count_checked_against_bar,
        },
        Case {
            name: "remove_under_traffic",
            run: removal::remove_under_traffic,
        },
        Case {
            name: "unbind_releases_dma_while_bound",
            run: removal::unbind_releases_dma_while_bound,
        },
        Case {
            name: "perf_exits_on_removal",
            run: removal::perf_exits_on_removal,
        },
        Case {
            name: "ibprov_removed_under_traffic",
            run: removal::ibprov_removed_under_traffic,
        },
        Case {
            name: "unbind_with_a_stalled_fault",
            run: crate::verbs::odp_stall::unbind_with_a_stalled_fault,
        },
        // Last: it leaks pinned pages on purpose.
        Case {
            name: "refused_destroy_leaks",
            run: failure::refused_destroy_leaks,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// Raw access to the driver
// ---------------------------------------------------------------------------------------------

/// The ABI's ioctl argument structs: `repr(C)` integers only, so every byte pattern the kernel
/// writes is a valid value.
///
/// # Safety
///
/// Only for bindgen structs of `qhca-abi.h` made of integer fields and arrays of them.
unsafe trait IoctlArg: Default {}
// SAFETY: Integer fields only (uapi/src/bindings.rs).
unsafe impl IoctlArg for qhca_ioc_query_device {}
// SAFETY: As above.
unsafe impl IoctlArg for qhca_ioc_handle {}
// SAFETY: As above.
unsafe impl IoctlArg for qhca_ioc_reg_mr {}
// SAFETY: As above.
unsafe impl IoctlArg for qhca_ioc_create_cq {}
// SAFETY: As above.
unsafe impl IoctlArg for qhca_ioc_async_event {}

/// A request with only its `size` set (every ABI struct starts with `size`, then `comp_mask`).
fn req<A: IoctlArg>() -> A {
    let mut a = A::default();
    let size = (std::mem::size_of::<A>() as u32).to_ne_bytes();
    // SAFETY: `A` is a `repr(C)` ABI struct whose first field is the `__u32 size` (IoctlArg's
    // contract), so its first four bytes are that field; any bytes are a valid `u32`.
    unsafe { std::ptr::copy_nonoverlapping(size.as_ptr(), std::ptr::from_mut(&mut a).cast(), 4) };
    a
}

/// `ioctl(fd, req, a)`.
///
/// # Panics
///
/// If `req` announces another size than `A`'s (the kernel could then write past `a`).
fn ioc<A: IoctlArg>(fd: &impl AsRawFd, req: u32, a: &mut A) -> nix::Result<()> {
    assert_eq!(ioc_size(req) as usize, std::mem::size_of::<A>());
    // SAFETY: `a` is exclusively borrowed and exactly as large as the request announces, so the
    // kernel reads and writes only inside it, and any bytes it writes are a valid `A`
    // (IoctlArg); the fd is only a number to the kernel.
    Errno::result(unsafe { libc::ioctl(fd.as_raw_fd(), req as libc::Ioctl, std::ptr::from_mut(a)) })
        .map(drop)
}

/// An open context, without the provider.
struct Raw(File);

impl Raw {
    fn open(dev: &Path) -> std::io::Result<Raw> {
        Ok(Raw(OpenOptions::new().read(true).write(true).open(dev)?))
    }

    fn query(&self) -> nix::Result<qhca_ioc_query_device> {
        let mut q = req::<qhca_ioc_query_device>();
        ioc(&self.0, QHCA_IOCTL_QUERY_DEVICE, &mut q)?;
        Ok(q)
    }

    fn alloc_pd(&self) -> nix::Result<u32> {
        let mut a = req::<qhca_ioc_handle>();
        ioc(&self.0, QHCA_IOCTL_ALLOC_PD, &mut a)?;
        Ok(a.handle)
    }

    fn reg_mr(&self, pdn: u32, addr: u64, len: u64) -> nix::Result<u32> {
        let mut a = req::<qhca_ioc_reg_mr>();
        (a.pdn, a.addr, a.length, a.access) = (pdn, addr, len, QHCA_ACCESS_LOCAL_WRITE);
        ioc(&self.0, QHCA_IOCTL_REG_MR, &mut a)?;
        Ok(a.lkey)
    }

    fn dereg_mr(&self, key: u32) -> nix::Result<()> {
        let mut a = req::<qhca_ioc_handle>();
        a.handle = key;
        ioc(&self.0, QHCA_IOCTL_DEREG_MR, &mut a)
    }

    /// A CQ of 2 entries on `buf` (one page) whose completion events go to `efd`.
    fn create_cq(&self, buf: &RawMap, efd: &OwnedFd) -> nix::Result<u32> {
        let mut a = req::<qhca_ioc_create_cq>();
        a.log_entries = 1;
        a.eventfd = efd.as_raw_fd();
        (a.buf_addr, a.buf_len) = (buf.addr() as u64, PAGE);
        ioc(&self.0, QHCA_IOCTL_CREATE_CQ, &mut a)?;
        Ok(a.cqn)
    }

    fn async_event(&self) -> nix::Result<(u32, u32)> {
        let mut a = req::<qhca_ioc_async_event>();
        ioc(&self.0, QHCA_IOCTL_GET_ASYNC_EVENT, &mut a)?;
        Ok((a.type_, a.element))
    }

    /// poll(2) for input, `ms` milliseconds at most; the returned events.
    fn poll(&self, ms: u16) -> nix::Result<PollFlags> {
        let mut fds = [PollFd::new(self.0.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::from(ms))?;
        Ok(fds[0].revents().unwrap_or(PollFlags::empty()))
    }

    /// The doorbell page, mapped.
    fn map(&self) -> nix::Result<RawMap> {
        RawMap::new(
            self.0.as_raw_fd(),
            UAR_PAGE_SIZE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            0,
        )
    }
}

/// A 64-bit store to the start of a doorbell mapping, then a load back.
fn store_load(m: &RawMap, v: u64) -> u64 {
    let p = m.addr() as *mut u64;
    // SAFETY: `m` is a live shared mapping of at least one page, page aligned (RawMap's
    // invariant), of device memory or of the driver's replacement page: the store and the load
    // are in bounds and aligned, and no Rust reference points into the mapping. Reading a
    // doorbell page is harmless (the device returns 0).
    unsafe {
        p.write_volatile(v);
        p.read_volatile()
    }
}

/// A non-blocking eventfd.
fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: plain system call; a non-negative result is a new fd that we then own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The eventfd's counter (0 if it was never signalled), read and reset.
fn eventfd_count(efd: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    let mut f = File::from(efd.try_clone().expect("dup eventfd"));
    match f.read(&mut b) {
        Ok(8) => u64::from_ne_bytes(b),
        _ => 0,
    }
}

/// Reads a number from a debugfs knob.
fn knob(name: &str) -> Option<i64> {
    std::fs::read_to_string(Path::new(DEBUGFS).join(name))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The pages pinned by every context (`pinned_pages` in debugfs).
fn pinned() -> i64 {
    knob("pinned_pages").unwrap_or(-1)
}

fn set_knob(name: &str, v: u64) -> std::io::Result<()> {
    std::fs::write(Path::new(DEBUGFS).join(name), v.to_string())
}

fn pci_dir(bdf: &str) -> PathBuf {
    Path::new("/sys/bus/pci/devices").join(bdf)
}

/// The Bus Master Enable bit of the device's PCI command register.
fn bus_master(bdf: &str) -> Result<bool, Fail> {
    let cfg = std::fs::read(pci_dir(bdf).join("config"))?;
    require_len(&cfg, 6)?;
    Ok(u16::from_le_bytes([cfg[4], cfg[5]]) & 0x4 != 0)
}

fn require_len(b: &[u8], n: usize) -> Result<(), Fail> {
    if b.len() < n {
        bail!("short read: {} bytes", b.len());
    }
    Ok(())
}

/// BAR0's STATUS register, read through sysfs (only while no driver holds the BAR).
fn bar0_status(bdf: &str) -> Result<u32, Fail> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(pci_dir(bdf).join("resource0"))?;
    let m = RawMap::new(
        f.as_raw_fd(),
        PAGE as usize,
        libc::PROT_READ,
        libc::MAP_SHARED,
        0,
    )?;
    let reg = (m.addr() + qhca_uapi::QHCA_REG_STATUS as usize) as *const u32;
    // SAFETY: `m` maps the first page of BAR0 (4 KiB of 32-bit registers), readable; the
    // register is 4-byte aligned and inside it; reads have no side effect on this device.
    Ok(unsafe { reg.read_volatile() })
}

/// Length of BAR `n`, from sysfs `resource`.
fn bar_len(bdf: &str, n: usize) -> Result<u64, Fail> {
    let text = std::fs::read_to_string(pci_dir(bdf).join("resource"))?;
    let line = text
        .lines()
        .nth(n)
        .ok_or_else(|| Fail::new(file!(), line!(), "no such BAR"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).unwrap_or(0))
        .collect();
    Ok(v[1] - v[0] + 1)
}

/// Lines of the kernel log that contain `needle`.
pub(crate) fn dmesg_count(needle: &str) -> usize {
    Command::new("dmesg")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains(needle))
                .count()
        })
        .unwrap_or(0)
}

/// The fault-injection knob `name`, or a failure saying the driver has none.
fn require_knob(t: &mut T, name: &str) -> Result<(), Fail> {
    require!(
        t,
        knob(name).is_some(),
        "{DEBUGFS}/{name} is missing: the driver has no such fault injection"
    );
    Ok(())
}

/// Waits for `child` to exit by itself within `timeout`; kills it otherwise (None).
fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}
