// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The driver's lifetime and soundness cases: asynchronous events and poll(2), doorbell pages
//! allocated on first use, page-list limits and MRs over 2 GiB, pinning outside the device-wide
//! lock, a dead command queue, the probe error path, a device that claims more doorbell pages
//! than its BAR holds, and disassociation on surprise removal under traffic.
//!
//! They speak to the driver with raw system calls (no provider), so that they test the driver
//! alone. The fault-injection knobs are the driver's `/sys/kernel/debug/qhca/` files. The cases
//! that unbind or remove the device ([`destructive_cases`]) put it back, even when they fail.
//! `qhca-vmtest __disassoc DEVICE` is the helper process of [`remove_under_traffic`].

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
            run: async_event_and_poll,
        },
        Case {
            name: "open_takes_no_doorbell_page",
            run: open_takes_no_doorbell_page,
        },
        Case {
            name: "mr_limits_before_pinning",
            run: mr_limits_before_pinning,
        },
        Case {
            name: "large_mr_pinned_outside_lock",
            run: large_mr_pinned_outside_lock,
        },
        Case {
            name: "cq_overrun_event_rate_limited",
            run: cq_overrun_event_rate_limited,
        },
        Case {
            name: "events_routed_by_context",
            run: events_routed_by_context,
        },
        Case {
            name: "eq_overflow_reported",
            run: eq_overflow_reported,
        },
    ]
}

/// The cases that kill, unbind or remove the device (and put it back): run last.
pub fn destructive_cases() -> Vec<Case<Config>> {
    vec![
        Case {
            name: "dead_queue_stops_device",
            run: dead_queue_stops_device,
        },
        Case {
            name: "dead_queue_on_close",
            run: dead_queue_on_close,
        },
        Case {
            name: "probe_error_stops_device",
            run: probe_error_stops_device,
        },
        Case {
            name: "uar_count_checked_against_bar",
            run: uar_count_checked_against_bar,
        },
        Case {
            name: "remove_under_traffic",
            run: remove_under_traffic,
        },
        Case {
            name: "perf_exits_on_removal",
            run: perf_exits_on_removal,
        },
        // Last: it leaks pinned pages on purpose.
        Case {
            name: "refused_destroy_leaks",
            run: refused_destroy_leaks,
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
fn dmesg_count(needle: &str) -> usize {
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

// ---------------------------------------------------------------------------------------------
// Cases that leave the device bound
// ---------------------------------------------------------------------------------------------

/// GET_ASYNC_EVENT and poll(2) on a healthy context: nothing queued (EAGAIN, no POLLIN), and the
/// argument is checked like every other.
fn async_event_and_poll(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Raw::open(&cfg.dev)?;
    check_errno!(t, ctx.async_event(), Errno::EAGAIN, "no event yet");
    let ev = ctx.poll(0)?;
    check!(t, ev.is_empty(), "poll of a quiet context: {ev:?}");

    let mut a = req::<qhca_ioc_async_event>();
    a.size += 8;
    let bad = ioc(&ctx.0, QHCA_IOCTL_GET_ASYNC_EVENT, &mut a);
    check_errno!(t, bad, Errno::EINVAL, "wrong size");
    let mut a = req::<qhca_ioc_async_event>();
    a.rsvd[1] = 1;
    let bad = ioc(&ctx.0, QHCA_IOCTL_GET_ASYNC_EVENT, &mut a);
    check_errno!(t, bad, Errno::EINVAL, "reserved field set");
    let mut a = req::<qhca_ioc_async_event>();
    a.comp_mask = 1;
    let bad = ioc(&ctx.0, QHCA_IOCTL_GET_ASYNC_EVENT, &mut a);
    check_errno!(t, bad, Errno::EINVAL, "comp_mask set");
    // The context still works.
    check!(t, ctx.query().is_ok(), "query after the bad requests");
    Ok(())
}

/// Opening runs no device command (it runs under the misc core's global mutex): a context gets
/// its doorbell page on first use, so more files than pages can be open, and the page shortage
/// shows at the first ioctl.
fn open_takes_no_doorbell_page(t: &mut T, cfg: &Config) -> CaseResult {
    let n = cfg.expect_num_uars as usize;
    let mut files = Vec::new();
    for i in 0..n + 2 {
        match Raw::open(&cfg.dev) {
            Ok(f) => files.push(f),
            Err(e) => {
                bail!("open {} of {} (no ioctl yet) failed: {e}", i + 1, n + 2);
            }
        }
    }
    let mut pages = Vec::new();
    for f in &files[..n] {
        pages.push(f.query()?.uar_index);
    }
    pages.sort_unstable();
    pages.dedup();
    check_eq!(t, pages.len(), n, "every context got its own page");
    check_errno!(
        t,
        files[n].query(),
        Errno::ENOSPC,
        "first use with every page taken"
    );
    check_errno!(t, files[n + 1].query(), Errno::ENOSPC, "and for the next");
    // A page freed by a close goes to the next first use.
    files.remove(0);
    check!(t, files[n - 1].query().is_ok(), "first use after a close");
    Ok(())
}

/// REG_MR checks the page-list limit before it pins, and RLIMIT_MEMLOCK before it allocates: a
/// region of 2^20 + 1 pages is EINVAL even where nothing is mapped (not EFAULT from pinning), and
/// a process without CAP_IPC_LOCK over its limit gets ENOMEM.
fn mr_limits_before_pinning(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Raw::open(&cfg.dev)?;
    let pd = ctx.alloc_pd()?;
    let max = u64::from(QHCA_MAX_PAGE_LIST) * PAGE;
    // Address space only: PROT_NONE, nothing to pin.
    let hole = RawMap::new(
        -1,
        (max + 2 * PAGE) as usize,
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        0,
    )?;
    let base = hole.addr() as u64;
    check_errno!(
        t,
        ctx.reg_mr(pd, base + 8, max),
        Errno::EINVAL,
        "a region of {} pages (one over the page-list limit)",
        QHCA_MAX_PAGE_LIST + 1
    );
    check_errno!(
        t,
        ctx.reg_mr(pd, base, max),
        Errno::EFAULT,
        "exactly {} pages, none mapped: pinning fails",
        QHCA_MAX_PAGE_LIST
    );

    // Over RLIMIT_MEMLOCK without CAP_IPC_LOCK: ENOMEM before pinning (so not EFAULT).
    let fd = ctx.0.as_raw_fd();
    // SAFETY: the child runs only async-signal-safe code (setrlimit, setuid, ioctl, _exit) on
    // memory it owns (its stack), then exits without running the parent's cleanup.
    let ws = match unsafe { fork() }? {
        ForkResult::Child => {
            let lim = libc::rlimit {
                rlim_cur: 64 << 10,
                rlim_max: 64 << 10,
            };
            let mut a = req::<qhca_ioc_reg_mr>();
            (a.pdn, a.addr, a.length) = (pd, base, 1 << 20);
            a.access = QHCA_ACCESS_LOCAL_WRITE;
            // SAFETY: plain system calls on our own stack values; `a` is the REG_MR argument,
            // exactly the size the request announces.
            let code = unsafe {
                if libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) != 0 || libc::setuid(65534) != 0 {
                    100
                } else if libc::ioctl(fd, QHCA_IOCTL_REG_MR as libc::Ioctl, &mut a) == 0 {
                    101
                } else {
                    *libc::__errno_location()
                }
            };
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => waitpid(child, None)?,
    };
    check!(
        t,
        matches!(ws, WaitStatus::Exited(_, c) if c == libc::ENOMEM),
        "1 MiB over a 64 KiB memlock limit, unprivileged: {ws:?} (ENOMEM is {})",
        libc::ENOMEM
    );
    Ok(())
}

/// The pages pinned by every context (`pinned_pages` in debugfs).
fn pinned() -> i64 {
    knob("pinned_pages").unwrap_or(-1)
}

/// An MR over 2 GiB (more than a 4 MiB page list, which one contiguous allocation cannot hold)
/// registers through the two-level page list; and while it is being pinned, which takes a
/// while, another context's ioctl is not held up (nothing device-wide is held while pinning).
fn large_mr_pinned_outside_lock(t: &mut T, cfg: &Config) -> CaseResult {
    const CHUNK: usize = 2 << 20;
    const CHUNKS: usize = 1026; // 2 GiB + 4 MiB: 525312 pages, a 4.1 MiB flat page list
    let len = CHUNK * CHUNKS;
    // One 2 MiB memfd mapped again and again: 2 GiB of address space over 2 MiB of memory.
    // SAFETY: plain system call with a static name.
    let mfd = unsafe { libc::memfd_create(c"qhca-large-mr".as_ptr(), libc::MFD_CLOEXEC) };
    if mfd < 0 {
        bail!("memfd_create: {}", std::io::Error::last_os_error());
    }
    // SAFETY: `mfd` is a new fd that we own from here on.
    let mfd = unsafe { OwnedFd::from_raw_fd(mfd) };
    nix::unistd::ftruncate(&mfd, CHUNK as i64)?;
    let area = RawMap::new(
        -1,
        len,
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        0,
    )?;
    for i in 0..CHUNKS {
        let at = area.addr() + i * CHUNK;
        // SAFETY: MAP_FIXED over a part of `area`, our own reservation that nothing else
        // refers to; `area` unmaps the whole range on drop.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                CHUNK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                mfd.as_raw_fd(),
                0,
            )
        };
        if p as usize != at {
            bail!("mmap chunk {i}: {}", std::io::Error::last_os_error());
        }
    }
    let (a, b) = (Raw::open(&cfg.dev)?, Raw::open(&cfg.dev)?);
    let (pd, _) = (a.alloc_pd()?, b.query()?);
    let before = pinned();
    let addr = area.addr() as u64;
    let start = Instant::now();
    let (key, took, pd_latency) = std::thread::scope(|s| {
        let reg = s.spawn(|| {
            let r = a.reg_mr(pd, addr, len as u64);
            (r, start.elapsed())
        });
        // While it pins: another context's ioctl.
        let mut lat = None;
        if wait_for(Duration::from_secs(60), || pinned() > before) && !reg.is_finished() {
            let t0 = Instant::now();
            let r = b.alloc_pd();
            lat = Some((r, t0.elapsed(), reg.is_finished()));
        }
        let (r, took) = reg.join().expect("reg_mr thread");
        (r, took, lat)
    });
    let pages = (len as u64 / PAGE) as i64;
    match key {
        Ok(key) => {
            check_eq!(t, pinned() - before, pages, "pinned pages while registered");
            check!(t, a.dereg_mr(key).is_ok(), "dereg of the large MR");
        }
        Err(e) => {
            check!(t, false, "REG_MR of {} pages ({len} bytes): {e}", pages);
        }
    }
    check_eq!(t, pinned(), before, "pinned pages after dereg");
    match pd_latency {
        Some((r, lat, reg_done)) => {
            check!(t, r.is_ok(), "ALLOC_PD while pinning: {r:?}");
            check!(
                t,
                !reg_done && lat < took / 2 && lat < Duration::from_secs(2),
                "ALLOC_PD on another context took {lat:?} while REG_MR pinned (REG_MR took {took:?}): held up by the pinning"
            );
        }
        None => {
            check!(
                t,
                false,
                "REG_MR ({took:?}) finished before another context's ioctl could run during it"
            );
        }
    }
    Ok(())
}

/// One CQ overrun: a 2-entry CQ under a QP that completes 8 signalled writes. Returns the CQ's
/// number and the asynchronous events the context got.
fn overrun_once(ctx: &Arc<Context>, pd: &Pd) -> Result<(u32, Vec<AsyncEvent>), Fail> {
    let small = Cq::new(ctx, 2, None)?;
    let other = Cq::new(ctx, 64, None)?;
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_sge: 1,
        max_inline: 64,
    };
    let mut a = Qp::new(pd, &small, &small, &caps)?;
    let b = Qp::new(pd, &other, &other, &caps)?;
    let opts = ConnOpts::default();
    for (qp, psn, peer, peer_psn) in [(&a, 1, b.qpn(), 2), (&b, 2, a.qpn(), 1)] {
        let remote = ConnInfo {
            qpn: peer,
            psn: peer_psn,
            ..ConnInfo::default()
        };
        qp.connect(&qp.conn_info(psn), &remote, &opts)?;
    }
    let dst = pd.reg_mr_buf(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    for i in 0..8u64 {
        let op = WrOp::Write {
            raddr: dst.addr() + 8 * i,
            rkey: dst.rkey(),
        };
        a.post_send(&[SendWr::inline(i, op, &[0xab; 8])])
            .map_err(|e| Fail::new(file!(), line!(), format!("post_send: {e:?}")))?;
    }
    let mut events = Vec::new();
    while let Some(ev) = ctx.wait_async_event(Some(Duration::from_secs(5)))? {
        let done = matches!(ev, AsyncEvent::CqErr { .. });
        events.push(ev);
        if done {
            break;
        }
    }
    Ok((small.cqn(), events))
}

/// A CQ overrun reaches its context as `QHCA_ASYNC_CQ_ERR`, and the kernel log line it causes,
/// which any process can trigger at will, is rate-limited.
fn cq_overrun_event_rate_limited(t: &mut T, cfg: &Config) -> CaseResult {
    const ROUNDS: usize = 24;
    let needle = "overran or failed";
    let before = dmesg_count(needle);
    let start = Instant::now();
    for round in 0..ROUNDS {
        let ctx = Arc::new(Context::open(&cfg.dev)?);
        let pd = Pd::new(&ctx)?;
        let (cqn, events) = overrun_once(&ctx, &pd)?;
        if !check!(
            t,
            events.contains(&AsyncEvent::CqErr { cqn }),
            "round {round}: CQ {cqn:#x} overran, events {events:?}"
        ) {
            break;
        }
    }
    let took = start.elapsed();
    let lines = dmesg_count(needle) - before;
    // At most 10 lines per 5 s window of the limiter.
    let windows = took.as_secs() as usize / 5 + 2;
    check!(t, lines >= 1, "no log line for {ROUNDS} overruns");
    check!(
        t,
        lines <= 10 * windows && (took >= Duration::from_secs(10) || lines < ROUNDS),
        "{lines} log lines for {ROUNDS} overruns in {took:?}: not rate-limited"
    );
    Ok(())
}

/// Dispatches an event as if the device had posted it (debugfs `qhcaN/inject_event`).
fn inject(cfg: &Config, kind: u32, d0: u32, d1: u32) -> Result<(), Fail> {
    let name = cfg.dev.file_name().unwrap_or_default();
    let path = Path::new(DEBUGFS).join(name).join("inject_event");
    std::fs::write(&path, format!("{kind} {d0} {d1}"))
        .map_err(|e| Fail::new(file!(), line!(), format!("{}: {e}", path.display())))
}

/// Completion and error events reach only the context the device names and only for an object
/// it owns: a CQ number alone (another context's, or a destroyed CQ's) signals nobody.
fn events_routed_by_context(t: &mut T, cfg: &Config) -> CaseResult {
    use qhca_uapi::{
        QHCA_ASYNC_CQ_ERR, QHCA_EQE_CQ_COMP as COMP, QHCA_EQE_CQ_ERR as CQ_ERR,
        QHCA_EQE_QP_ERR as QP_ERR,
    };
    let (a, b) = (Raw::open(&cfg.dev)?, Raw::open(&cfg.dev)?);
    let (ua, ub) = (a.query()?.uar_index, b.query()?.uar_index);
    let buf = RawMap::anonymous(PAGE as usize)?;
    let efd = eventfd()?;
    let cqn = a.create_cq(&buf, &efd)?;

    inject(cfg, COMP, cqn, ub)?;
    check_eq!(
        t,
        eventfd_count(&efd),
        0,
        "CQ {cqn:#x} named with context {ub}, not its own {ua}"
    );
    inject(cfg, COMP, cqn, ua)?;
    check_eq!(t, eventfd_count(&efd), 1, "CQ {cqn:#x} of context {ua}");
    inject(cfg, COMP, cqn + 1, ua)?;
    check_eq!(t, eventfd_count(&efd), 0, "a CQ context {ua} does not own");

    inject(cfg, CQ_ERR, cqn, ub)?;
    check_errno!(
        t,
        a.async_event(),
        Errno::EAGAIN,
        "CQ error named with the wrong context"
    );
    check_errno!(
        t,
        b.async_event(),
        Errno::EAGAIN,
        "nor for the context it names"
    );
    inject(cfg, CQ_ERR, cqn, ua)?;
    check_eq!(
        t,
        a.async_event(),
        Ok((QHCA_ASYNC_CQ_ERR, cqn)),
        "CQ error of its own CQ"
    );
    check_eq!(
        t,
        eventfd_count(&efd),
        1,
        "a CQ error wakes the CQ's waiters"
    );
    inject(cfg, QP_ERR, 0x00ab_cdef, ua)?;
    check_errno!(
        t,
        a.async_event(),
        Errno::EAGAIN,
        "QP error for a QP it does not own"
    );
    Ok(())
}

/// The `events lost` line of the device's debugfs `state`.
fn events_lost(cfg: &Config) -> Option<u64> {
    let name = cfg.dev.file_name()?;
    let state = std::fs::read_to_string(Path::new(DEBUGFS).join(name).join("state")).ok()?;
    state
        .lines()
        .find_map(|l| l.strip_prefix("events lost (EQ_OVERFLOWS): "))?
        .trim()
        .parse()
        .ok()
}

/// Events the device could not post because the event queue was full are noticed
/// (`EQ_OVERFLOWS`, which the driver reads and shows in debugfs `state`) and reported in the
/// kernel log. (The driver also wakes every CQ waiter then; the routed events wake this one
/// anyway, so that is not checked here.) The overflow: the interrupt thread stalls (fault injection) while a
/// CQ with a completion in it is armed again and again, one event per arm.
fn eq_overflow_reported(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "stall_events_ms")?;
    let said = dmesg_count("event queue overflowed");
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let efd = eventfd()?;
    let cq = Cq::new(&ctx, 64, Some(efd.try_clone()?))?;
    let other = Cq::new(&ctx, 64, None)?;
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_sge: 1,
        max_inline: 64,
    };
    let mut a = Qp::new(&pd, &cq, &cq, &caps)?;
    let b = Qp::new(&pd, &other, &other, &caps)?;
    for (qp, psn, peer, peer_psn) in [(&a, 1, b.qpn(), 2), (&b, 2, a.qpn(), 1)] {
        let remote = ConnInfo {
            qpn: peer,
            psn: peer_psn,
            ..ConnInfo::default()
        };
        qp.connect(&qp.conn_info(psn), &remote, &ConnOpts::default())?;
    }
    let dst = pd.reg_mr_buf(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    a.post_send(&[SendWr::inline(1, op, &[1; 8])])
        .map_err(|e| Fail::new(file!(), line!(), format!("post_send: {e:?}")))?;
    // The CQE lands; it stays unpolled, so every arm finds it and fires at once.
    std::thread::sleep(Duration::from_millis(300));
    let before = events_lost(cfg).unwrap_or(0);
    set_knob("stall_events_ms", 3000)?;
    let start = Instant::now();
    for _ in 0..150 {
        cq.arm();
        std::thread::sleep(Duration::from_millis(2));
    }
    check!(
        t,
        start.elapsed() < Duration::from_millis(2500),
        "arming took {:?}: the stall may be over before the queue filled",
        start.elapsed()
    );
    check!(
        t,
        wait_for(Duration::from_secs(10), || events_lost(cfg).unwrap_or(0)
            > before)
    );
    check_eq!(t, knob("stall_events_ms"), Some(0), "the stall was used");
    let lost = events_lost(cfg).unwrap_or(0) - before;
    check!(t, lost > 0, "no event lost: the queue did not overflow");
    check!(
        t,
        wait_for(Duration::from_secs(2), || dmesg_count(
            "event queue overflowed"
        ) > said),
        "the driver did not say that the event queue overflowed"
    );
    drop((a, b, cq, other, dst));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Cases that kill, unbind or remove the device
// ---------------------------------------------------------------------------------------------

/// Unbinds and binds the device again (a failed device comes back this way).
fn rebind(cfg: &Config, bdf: &str) -> Result<(), Fail> {
    let u = Unbound::unbind(cfg, bdf)?;
    u.rebind()?;
    if !wait_for(NODE_TIMEOUT, || cfg.dev.exists()) {
        bail!("{} did not come back after rebind", cfg.dev.display());
    }
    Ok(())
}

/// A command that times out kills the queue: before the failing ioctl returns, the device is
/// reset and bus mastering is off (only then is anything freed); the driver says so once; every
/// context is disassociated (DEVICE_FATAL, POLLERR, eventfds signalled, its doorbell a harmless
/// page, ioctls EIO); closing frees every pinned page; unbind and bind bring the device back.
fn dead_queue_stops_device(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "fail_cmds")?;
    let bdf = system::pci_bdf(cfg)?;
    let dead_lines = dmesg_count("command queue dead");
    let before = pinned();
    {
        let ctx = Raw::open(&cfg.dev)?;
        let pd = ctx.alloc_pd()?;
        let cq_buf = RawMap::anonymous(PAGE as usize)?;
        let efd = eventfd()?;
        ctx.create_cq(&cq_buf, &efd)?;
        let mr_buf = RawMap::anonymous(16 * PAGE as usize)?;
        ctx.reg_mr(pd, mr_buf.addr() as u64, 16 * PAGE)?;
        let db = ctx.map()?;
        check!(t, pinned() > before, "the CQ and MR pin pages");
        check!(
            t,
            bus_master(&bdf)?,
            "bus mastering is on while the device runs"
        );

        set_knob("fail_cmds", 1)?;
        check_errno!(t, ctx.alloc_pd(), Errno::EIO, "the command that times out");
        check_eq!(t, knob("fail_cmds"), Some(0), "the injection was used");
        check!(
            t,
            !bus_master(&bdf)?,
            "bus mastering still on after the queue died"
        );
        check_eq!(
            t,
            dmesg_count("command queue dead"),
            dead_lines + 1,
            "said once"
        );

        check_eq!(
            t,
            ctx.async_event(),
            Ok((QHCA_ASYNC_DEVICE_FATAL, 0)),
            "fatal event"
        );
        check_errno!(t, ctx.async_event(), Errno::EAGAIN, "queued once");
        let ev = ctx.poll(0)?;
        check!(
            t,
            ev.contains(PollFlags::POLLERR),
            "poll after the failure: {ev:?}"
        );
        check!(
            t,
            eventfd_count(&efd) >= 1,
            "the CQ's eventfd was signalled"
        );
        check_errno!(t, ctx.query(), Errno::EIO, "ioctl after the failure");
        check_errno!(t, ctx.map(), Errno::EIO, "mmap after the failure");
        check_eq!(
            t,
            store_load(&db, 0x5a5a_1234),
            0x5a5a_1234,
            "the doorbell mapping is now a page of memory (stores land, nothing faults)"
        );
        check_errno!(
            t,
            Raw::open(&cfg.dev)
                .map(drop)
                .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(0))),
            Errno::EIO,
            "open of a failed device"
        );
        check_errno!(t, ctx.alloc_pd(), Errno::EIO, "a second failing ioctl");
        check_eq!(
            t,
            dmesg_count("command queue dead"),
            dead_lines + 1,
            "still said once"
        );
    }
    check_eq!(t, pinned(), before, "closing freed every pinned page");

    rebind(cfg, &bdf)?;
    check!(t, bus_master(&bdf)?, "bus mastering on again after rebind");
    let ctx = Raw::open(&cfg.dev)?;
    check!(t, ctx.alloc_pd().is_ok(), "the device works after rebind");
    Ok(())
}

/// A destroy command that times out while a closing context cleans up: the device is stopped
/// before the context's pinned memory is freed (and is freed then: nothing is leaked).
fn dead_queue_on_close(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "fail_cmds")?;
    let bdf = system::pci_bdf(cfg)?;
    let dead_lines = dmesg_count("command queue dead");
    let before = pinned();
    let cq_buf = RawMap::anonymous(PAGE as usize)?;
    let mr_buf = RawMap::anonymous(16 * PAGE as usize)?;
    let efd = eventfd()?;
    {
        let ctx = Raw::open(&cfg.dev)?;
        let pd = ctx.alloc_pd()?;
        ctx.create_cq(&cq_buf, &efd)?;
        ctx.reg_mr(pd, mr_buf.addr() as u64, 16 * PAGE)?;
        check_eq!(t, pinned() - before, 17, "the CQ and MR pin 17 pages");
        set_knob("fail_cmds", 1)?;
    }
    check_eq!(
        t,
        knob("fail_cmds"),
        Some(0),
        "the close ran a destroy command"
    );
    check!(
        t,
        !bus_master(&bdf)?,
        "bus mastering still on after a destroy timed out"
    );
    check_eq!(
        t,
        dmesg_count("command queue dead"),
        dead_lines + 1,
        "said once"
    );
    check_eq!(t, pinned(), before, "freed once the device was stopped");
    check_eq!(t, dmesg_count("leaking its memory"), 0, "nothing leaked");
    rebind(cfg, &bdf)?;
    check!(
        t,
        Raw::open(&cfg.dev)?.alloc_pd().is_ok(),
        "the device works after rebind"
    );
    Ok(())
}

/// A destroy that the live device refuses leaves the object in the device, which may still use
/// its memory: the ioctl keeps the object, and at close the pages stay pinned (leaked) rather
/// than being freed under the device.
fn refused_destroy_leaks(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "refuse_destroys")?;
    let before = pinned();
    let leaks = dmesg_count("leaking its pinned memory");
    let mr_buf = RawMap::anonymous(16 * PAGE as usize)?;
    {
        let ctx = Raw::open(&cfg.dev)?;
        let pd = ctx.alloc_pd()?;
        let key = ctx.reg_mr(pd, mr_buf.addr() as u64, 16 * PAGE)?;
        check_eq!(t, pinned() - before, 16, "the MR pins 16 pages");
        set_knob("refuse_destroys", 1)?;
        check_errno!(t, ctx.dereg_mr(key), Errno::EINVAL, "the refused DEREG_MR");
        check_eq!(
            t,
            pinned() - before,
            16,
            "still pinned after a refused DEREG_MR"
        );
        check!(
            t,
            ctx.dereg_mr(key).is_ok(),
            "the MR is still this context's to deregister"
        );
        check_eq!(
            t,
            pinned(),
            before,
            "freed after the DEREG_MR the device did"
        );
        ctx.reg_mr(pd, mr_buf.addr() as u64, 16 * PAGE)?;
        set_knob("refuse_destroys", 1)?;
    }
    check_eq!(
        t,
        knob("refuse_destroys"),
        Some(0),
        "the close ran DEREG_MR"
    );
    check_eq!(
        t,
        pinned() - before,
        16,
        "a region the device kept at close stays pinned (leaked), not freed under it"
    );
    check_eq!(
        t,
        dmesg_count("leaking its pinned memory"),
        leaks + 1,
        "said so"
    );
    Ok(())
}

/// When probe fails after enabling the device (not ready, or QUERY_DEVICE timing out), the
/// device is reset and bus mastering is off before the rings are freed.
fn probe_error_stops_device(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "fail_probe")?;
    let bdf = system::pci_bdf(cfg)?;
    let unbound = Unbound::unbind(cfg, &bdf)?;
    for mode in [1, 2] {
        set_knob("fail_probe", mode)?;
        let r = std::fs::write(cfg.driver_dir().join("bind"), &bdf);
        check!(t, r.is_err(), "mode {mode}: bind succeeded");
        check!(
            t,
            !cfg.driver_dir().join(&bdf).exists(),
            "mode {mode}: bound after a failed probe"
        );
        check_eq!(
            t,
            knob("fail_probe"),
            Some(0),
            "mode {mode}: injection used"
        );
        check!(t, !bus_master(&bdf)?, "mode {mode}: bus mastering left on");
        let status = bar0_status(&bdf)?;
        check_eq!(
            t,
            status & qhca_uapi::QHCA_STATUS_READY,
            0,
            "mode {mode}: the device is still enabled (status {status:#x})"
        );
    }
    set_knob("fail_probe", 0)?;
    unbound.rebind()?;
    require!(
        t,
        wait_for(NODE_TIMEOUT, || cfg.dev.exists()),
        "no node after bind"
    );
    check!(
        t,
        Raw::open(&cfg.dev)?.alloc_pd().is_ok(),
        "the device works after bind"
    );
    Ok(())
}

/// A device claiming more doorbell pages than BAR2 holds is refused at probe (so every page the
/// driver maps is inside the BAR).
fn uar_count_checked_against_bar(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "fake_num_uars")?;
    let bdf = system::pci_bdf(cfg)?;
    let pages = bar_len(&bdf, qhca_uapi::QHCA_BAR_UAR as usize)? / PAGE;
    let unbound = Unbound::unbind(cfg, &bdf)?;
    let said = dmesg_count("doorbell pages but BAR2 holds");
    set_knob("fake_num_uars", pages + 1)?;
    let r = std::fs::write(cfg.driver_dir().join("bind"), &bdf);
    let _ = set_knob("fake_num_uars", 0);
    check!(
        t,
        r.is_err(),
        "a device claiming {} pages in a {pages}-page BAR was bound",
        pages + 1
    );
    check_eq!(
        t,
        dmesg_count("doorbell pages but BAR2 holds"),
        said + 1,
        "said why"
    );
    unbound.rebind()?;
    require!(
        t,
        wait_for(NODE_TIMEOUT, || cfg.dev.exists()),
        "no node after bind"
    );
    check_eq!(
        t,
        Raw::open(&cfg.dev)?.query()?.attr.num_uars,
        cfg.expect_num_uars
    );
    Ok(())
}

/// Rescans the PCI bus when dropped, so that a removed device comes back.
struct Removed<'a> {
    cfg: &'a Config,
}

impl Removed<'_> {
    fn remove<'a>(cfg: &'a Config, bdf: &str) -> Result<Removed<'a>, Fail> {
        std::fs::write(pci_dir(bdf).join("remove"), "1")?;
        Ok(Removed { cfg })
    }
}

impl Drop for Removed<'_> {
    fn drop(&mut self) {
        let _ = std::fs::write("/sys/bus/pci/rescan", "1");
        wait_for(NODE_TIMEOUT, || self.cfg.dev.exists());
    }
}

/// Starts a `__disassoc` helper and waits for its `ready` line.
fn spawn_helper(dev: &Path) -> Result<Child, Fail> {
    let mut child = Command::new(std::env::current_exe()?)
        .arg("__disassoc")
        .arg(dev)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let out = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        bail!("__disassoc helper said {line:?}");
    }
    Ok(child)
}

/// Surprise removal under traffic: two processes ringing their doorbells and mapping it afresh
/// in a loop see the device go (POLLERR, DEVICE_FATAL, EIO/ENODEV, a signalled eventfd, a
/// harmless doorbell page) and exit by themselves, not by SIGBUS; a rescan brings a working
/// device back.
fn remove_under_traffic(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    let mut kids = [spawn_helper(&cfg.dev)?, spawn_helper(&cfg.dev)?];
    std::thread::sleep(Duration::from_millis(300));
    let removed = Removed::remove(cfg, &bdf)?;
    for (i, kid) in kids.iter_mut().enumerate() {
        match wait_exit(kid, EXIT_TIMEOUT) {
            Some(s) => {
                check!(
                    t,
                    s.code() == Some(HELPER_OK),
                    "helper {i} ended with {s} (exit {HELPER_OK} means every check held; 135 or a signal is SIGBUS)"
                );
            }
            None => {
                check!(
                    t,
                    false,
                    "helper {i} did not exit within {EXIT_TIMEOUT:?} of the removal"
                );
            }
        }
    }
    drop(removed);
    require!(
        t,
        cfg.dev.exists(),
        "{} not back after rescan",
        cfg.dev.display()
    );
    let ctx = Raw::open(&cfg.dev)?;
    check!(t, ctx.alloc_pd().is_ok(), "the device works after rescan");
    Ok(())
}

/// Two `qhca-perf --loopback` streams, then surprise removal: both exit by themselves with an
/// error (not SIGBUS, exit 135), and the device comes back on rescan.
fn perf_exits_on_removal(t: &mut T, cfg: &Config) -> CaseResult {
    let Some(perf) = system::find_tool("qhca-perf").or_else(|| {
        let p = std::env::current_exe().ok()?.with_file_name("qhca-perf");
        p.exists().then_some(p)
    }) else {
        bail!("qhca-perf not found next to qhca-vmtest or in PATH");
    };
    let bdf = system::pci_bdf(cfg)?;
    let mut kids = Vec::new();
    for _ in 0..2 {
        kids.push(
            Command::new(&perf)
                .args(["write_bw", "--loopback", "-s", "4096", "-n", "100000000"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()?,
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    for (i, kid) in kids.iter_mut().enumerate() {
        check!(
            t,
            matches!(kid.try_wait(), Ok(None)),
            "qhca-perf {i} ended before the removal"
        );
    }
    let removed = Removed::remove(cfg, &bdf)?;
    for (i, kid) in kids.iter_mut().enumerate() {
        match wait_exit(kid, EXIT_TIMEOUT) {
            Some(s) => {
                check!(
                    t,
                    s.code().is_some_and(|c| c != 0 && c != 135),
                    "qhca-perf {i} ended with {s}: want an error exit of its own, not SIGBUS"
                );
            }
            None => {
                check!(
                    t,
                    false,
                    "qhca-perf {i} still running {EXIT_TIMEOUT:?} after the removal"
                );
            }
        }
    }
    drop(removed);
    require!(
        t,
        cfg.dev.exists(),
        "{} not back after rescan",
        cfg.dev.display()
    );
    let ctx = Raw::open(&cfg.dev)?;
    check!(t, ctx.alloc_pd().is_ok(), "the device works after rescan");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The helper process
// ---------------------------------------------------------------------------------------------

/// `qhca-vmtest __disassoc DEVICE`: holds a context with a PD, a CQ with an eventfd and its
/// doorbell mapped, prints `ready`, then rings its doorbell and maps it afresh in a loop until
/// poll(2) reports the context disassociated. Then checks what a disassociated context must
/// look like and exits [`HELPER_OK`] if all of it held (another code, and a message on stderr,
/// naming the first thing that did not; 10 if nothing happened within a minute).
pub fn helper_main(args: &[String]) -> i32 {
    let [dev] = args else {
        eprintln!("usage: qhca-vmtest __disassoc DEVICE");
        return 2;
    };
    match helper(Path::new(dev)) {
        Ok(()) => HELPER_OK,
        Err((code, msg)) => {
            eprintln!("qhca-vmtest __disassoc: {msg}");
            code
        }
    }
}

fn helper(dev: &Path) -> Result<(), (i32, String)> {
    let e = |code: i32| move |x: &dyn std::fmt::Debug| (code, format!("{x:?}"));
    let ctx = Raw::open(dev).map_err(|x| e(20)(&x))?;
    ctx.query().map_err(|x| e(21)(&x))?;
    ctx.alloc_pd().map_err(|x| e(22)(&x))?;
    let cq_buf = RawMap::anonymous(PAGE as usize).map_err(|x| e(23)(&x))?;
    let efd = eventfd().map_err(|x| e(24)(&x))?;
    ctx.create_cq(&cq_buf, &efd).map_err(|x| e(25)(&x))?;
    let db = ctx.map().map_err(|x| e(26)(&x))?;
    println!("ready");
    let word = qhca::DbWord::new(qhca::DbType::Sq, 0, 0).raw();

    let start = Instant::now();
    let mut fresh: Option<RawMap> = None;
    loop {
        store_load(&db, word);
        // A mapping made now may race with the removal: it must end up harmless too.
        if let Ok(m) = ctx.map() {
            store_load(&m, word);
            fresh = Some(m);
        }
        let ev = ctx.poll(1).map_err(|x| e(27)(&x))?;
        if ev.intersects(PollFlags::POLLIN | PollFlags::POLLERR) {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err((10, "not disassociated within a minute".into()));
        }
    }
    let ev = ctx.poll(0).map_err(|x| e(11)(&x))?;
    if !ev.contains(PollFlags::POLLERR | PollFlags::POLLIN) {
        return Err((11, format!("poll after disassociation: {ev:?}")));
    }
    match ctx.async_event() {
        Ok((ty, 0)) if ty == QHCA_ASYNC_DEVICE_FATAL => {}
        other => return Err((12, format!("first async event: {other:?}"))),
    }
    if ctx.async_event() != Err(Errno::EAGAIN) {
        return Err((13, "DEVICE_FATAL queued more than once".into()));
    }
    match ctx.query() {
        Err(Errno::ENODEV | Errno::EIO) => {}
        other => return Err((14, format!("ioctl after disassociation: {other:?}"))),
    }
    if eventfd_count(&efd) == 0 {
        return Err((15, "the CQ eventfd was not signalled".into()));
    }
    for (name, m) in [("doorbell", Some(&db)), ("fresh mapping", fresh.as_ref())] {
        if let Some(m) = m {
            let got = store_load(m, 0x1234_5678_9abc);
            if got != 0x1234_5678_9abc {
                return Err((
                    16,
                    format!("{name} still reaches the device: read {got:#x}"),
                ));
            }
        }
    }
    if ctx.map().is_ok() {
        return Err((17, "mmap after disassociation succeeded".into()));
    }
    Ok(())
}
