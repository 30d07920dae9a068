// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The driver's lifetime and soundness cases: events routed to the context that owns the queue,
//! event-queue overflow, page-list limits and MRs over 2 GiB, pinning outside the device-wide
//! lock, a dead command queue, a refused destroy, the probe error path, a device that claims
//! more doorbell pages than its BAR holds, and disassociation on surprise removal under traffic.
//!
//! They run on the RDMA core's node through the `qhca` crate (and, where they look at the core
//! itself, its raw commands). The fault-injection knobs are the driver's `/sys/kernel/debug/qhca/` files. The cases
//! that unbind or remove the device ([`destructive_cases`]) put it back, even when they fail.
//! `qhca-vmtest __disassoc DEVICE` is the helper process of [`removal::remove_under_traffic`].

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};
use qhca::{Access, AsyncEvent, ConnInfo, ConnOpts, Context, Cq, Pd, Qp, QpCaps, SendWr, WrOp};
use qhca_uapi::QHCA_MAX_PAGE_LIST;

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
        Case {
            name: "refused_destroy_stops_device",
            run: failure::refused_destroy_stops_device,
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// True if `fd` polls readable or in error right now: a waiter on it would wake.
fn wakes(fd: BorrowedFd<'_>) -> nix::Result<bool> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO)?;
    let ev = fds[0].revents().unwrap_or(PollFlags::empty());
    Ok(ev.intersects(PollFlags::POLLIN | PollFlags::POLLERR))
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
