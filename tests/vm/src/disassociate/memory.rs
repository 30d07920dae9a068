// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Doorbell pages on first use, page-list and memlock limits before pinning, and an MR over
//! 2 GiB pinned outside the device-wide lock.

use super::*;

/// Opening runs no device command (it runs under the misc core's global mutex): a context gets
/// its doorbell page on first use, so more files than pages can be open, and the page shortage
/// shows at the first ioctl.
pub(super) fn open_takes_no_doorbell_page(t: &mut T, cfg: &Config) -> CaseResult {
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
pub(super) fn mr_limits_before_pinning(t: &mut T, cfg: &Config) -> CaseResult {
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

/// An MR over 2 GiB (more than a 4 MiB page list, which one contiguous allocation cannot hold)
/// registers through the two-level page list; and while it is being pinned, which takes a
/// while, another context's ioctl is not held up (nothing device-wide is held while pinning).
pub(super) fn large_mr_pinned_outside_lock(t: &mut T, cfg: &Config) -> CaseResult {
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
                "ALLOC_PD on another context took {lat:?} while REG_MR pinned \
                 (REG_MR took {took:?}): held up by the pinning"
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
