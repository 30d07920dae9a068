// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Page-list and memlock limits before pinning, and an MR over 2 GiB pinned outside the
//! device-wide lock.

use super::*;

/// Exit codes of [`mr_limits_before_pinning`]'s child when it could not try the registration
/// (above every errno, which is what it exits with when it could).
const CHILD_SETUP: i32 = 200;
const CHILD_OPEN: i32 = 201;
const CHILD_PD: i32 = 202;
const CHILD_REGISTERED: i32 = 203;
const CHILD_NO_ERRNO: i32 = 204;
const CHILD_PANICKED: i32 = 205;

/// The child of [`mr_limits_before_pinning`]: without CAP_IPC_LOCK and with a 64 KiB memlock
/// limit, registers 1 MiB at `addr` on a context of its own; returns the errno it got, or one
/// of the `CHILD_*` codes.
fn register_over_memlock(dev: &Path, addr: u64) -> i32 {
    let lim = 64 << 10;
    if system::drop_cap(system::CAP_IPC_LOCK).is_err()
        || nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_MEMLOCK, lim, lim)
            .is_err()
    {
        return CHILD_SETUP;
    }
    // Opened only now: the core refuses the commands of a file opened with other credentials.
    let Ok(ctx) = Context::open(dev) else {
        return CHILD_OPEN;
    };
    let ctx = Arc::new(ctx);
    let Ok(pd) = Pd::new(&ctx) else {
        return CHILD_PD;
    };
    // SAFETY: the range is the parent's PROT_NONE reservation, inherited and kept mapped until
    // this process exits; a region over it (if the registration wrongly succeeded) is
    // deregistered when it is dropped here, before that.
    match unsafe { pd.reg_mr_raw(addr as *mut u8, 1 << 20, Access::LOCAL_WRITE) } {
        Ok(_) => CHILD_REGISTERED,
        Err(e) => e.errno().map_or(CHILD_NO_ERRNO, |e| e as i32),
    }
}

/// REG_MR checks the page-list limit before it pins, and RLIMIT_MEMLOCK before it allocates: a
/// region of 2^20 + 1 pages is EINVAL even where nothing is mapped (not EFAULT from pinning), and
/// a process without CAP_IPC_LOCK over its limit gets ENOMEM.
pub(super) fn mr_limits_before_pinning(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let max = u64::from(QHCA_MAX_PAGE_LIST) * PAGE;
    // Address space only: PROT_NONE, nothing to pin.
    let hole = RawMap::new(
        -1,
        (max + 2 * PAGE) as usize,
        libc::PROT_NONE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
        0,
    )?;
    let base = hole.addr() as *mut u8;
    // SAFETY (both registrations): the range is inside `hole`, our own reservation, mapped
    // until the end of this function; a region over it (if the registration wrongly succeeded)
    // is deregistered when `check_errno!` drops it, before that.
    check_errno!(
        t,
        unsafe { pd.reg_mr_raw(base.wrapping_add(8), max as usize, Access::LOCAL_WRITE) },
        Errno::EINVAL,
        "a region of {} pages (one over the page-list limit)",
        QHCA_MAX_PAGE_LIST + 1
    );
    check_errno!(
        t,
        unsafe { pd.reg_mr_raw(base, max as usize, Access::LOCAL_WRITE) },
        Errno::EFAULT,
        "exactly {} pages, none mapped: pinning fails",
        QHCA_MAX_PAGE_LIST
    );

    // Over RLIMIT_MEMLOCK without CAP_IPC_LOCK: ENOMEM before pinning (so not EFAULT). In a
    // child, whose limit and capabilities are its own; it exits with what it got.
    let (dev, addr) = (cfg.dev.as_path(), base as u64);
    // SAFETY: the suite runs its cases on one thread, so the child inherits no lock another
    // thread held; it runs `register_over_memlock` and ends with _exit, without running the
    // parent's cleanup, even if it panics.
    let ws = match unsafe { fork() }? {
        ForkResult::Child => {
            let code = std::panic::catch_unwind(|| register_over_memlock(dev, addr))
                .unwrap_or(CHILD_PANICKED);
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => waitpid(child, None)?,
    };
    check!(
        t,
        matches!(ws, WaitStatus::Exited(_, c) if c == libc::ENOMEM),
        "1 MiB over a 64 KiB memlock limit, without CAP_IPC_LOCK: {ws:?} (ENOMEM is {}; \
         {CHILD_SETUP}..={CHILD_PANICKED}: the child could not try)",
        libc::ENOMEM
    );
    drop(hole);
    Ok(())
}

/// An MR over 2 GiB (more than a 4 MiB page list, which one contiguous allocation cannot hold)
/// registers through the two-level page list; and while it is being pinned, which takes a
/// while, another context's command is not held up (nothing device-wide is held while pinning).
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
    let a = Arc::new(Context::open(&cfg.dev)?);
    let b = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&a)?;
    let before = pinned();
    let addr = area.addr();
    let start = Instant::now();
    let (mr, took, pd_latency) = std::thread::scope(|s| {
        let reg = s.spawn(|| {
            // SAFETY: `area` is our own mapping, mapped until the end of this function; the
            // region is deregistered below, before that (or, if that fails, its pages stay
            // pinned, so the device never reaches memory reused by anyone else).
            let r = unsafe { pd.reg_mr_raw(addr as *mut u8, len, Access::LOCAL_WRITE) };
            (r, start.elapsed())
        });
        // While it pins: a command of another context.
        let mut lat = None;
        if wait_for(Duration::from_secs(60), || pinned() > before) && !reg.is_finished() {
            let t0 = Instant::now();
            let r = Pd::new(&b).map(drop);
            lat = Some((r, t0.elapsed(), reg.is_finished()));
        }
        let (r, took) = reg.join().expect("reg_mr thread");
        (r, took, lat)
    });
    let pages = (len as u64 / PAGE) as i64;
    match mr {
        Ok(mr) => {
            check_eq!(t, pinned() - before, pages, "pinned pages while registered");
            let r = mr.dereg();
            check!(t, r.is_ok(), "dereg of the large MR: {r:?}");
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
                "REG_MR ({took:?}) finished before another context's command could run during it"
            );
        }
    }
    Ok(())
}
