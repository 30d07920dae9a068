// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A dead command queue, a destroy the device refuses, the probe error path, and a device that
//! claims more doorbell pages than its BAR holds.

use std::panic::AssertUnwindSafe;

use super::*;
use crate::cases::rdma_core::{alloc_pd, Uverbs};
use crate::verbs::uverbs::core_device;

/// `IB_EVENT_DEVICE_FATAL` (`enum ib_event_type`, as `ibv_event_type` numbers it).
const IB_EVENT_DEVICE_FATAL: u32 = 8;

/// Unbinds and binds the device again (a failed device comes back this way); returns its
/// uverbs node once its port is up (the node's number may change across a reprobe).
fn rebind(cfg: &Config, bdf: &str) -> Result<PathBuf, Fail> {
    let u = Unbound::unbind(cfg, bdf)?;
    u.rebind()?;
    Ok(core_device(cfg)?.path)
}

/// A command that times out kills the queue: before the failing command returns, the device is
/// reset and bus mastering is off (only then is anything freed); the driver says so once; every
/// context is disassociated: a context of the crate gets DEVICE_FATAL once, its CQ's completion
/// channel wakes its waiters, its commands fail, and no new context opens; a raw user context of
/// the core gets IB_EVENT_DEVICE_FATAL (element: the port) and EIO, the reason the driver gives
/// the core. Closing frees every pinned page; unbind and bind bring the device back.
pub(super) fn dead_queue_stops_device(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "fail_cmds")?;
    let bdf = system::pci_bdf(cfg)?;
    let dead_lines = dmesg_count("command queue dead");
    let before = pinned();
    {
        let ctx = Arc::new(Context::open(&cfg.dev)?);
        let pd = Pd::new(&ctx)?;
        let cq = Cq::new(&ctx, 2, Some(eventfd()?))?;
        let _mr = pd.reg_mr_buf(16 * PAGE as usize, Access::LOCAL_WRITE)?;
        let (uverbs, _) = Uverbs::open(&bdf)?;
        let upd = alloc_pd(uverbs.fd.as_raw_fd());
        check!(t, upd.is_ok(), "ALLOC_PD through the core: {upd:?}");
        check!(t, pinned() > before, "the CQ and MR pin pages");
        check!(
            t,
            bus_master(&bdf)?,
            "bus mastering is on while the device runs"
        );
        let Some(channel) = cq.event_fd() else {
            bail!("a CQ created with an eventfd has no completion channel");
        };
        check!(t, !wakes(channel)?, "the CQ's channel is quiet before");

        set_knob("fail_cmds", 1)?;
        // The core answers EIO, the driver's reason for a failed device. The driver dispatches
        // DEVICE_FATAL before the command returns, but the core delivers it to the async file
        // from a work item: the crate reports the EIO of a context with an unread DEVICE_FATAL
        // as ENODEV, so this one command sees EIO or ENODEV by that race (a full run behind the
        // IOMMU saw EIO); once the event is taken, EIO (below).
        let r = Pd::new(&ctx).map(drop);
        check!(
            t,
            matches!(
                r.as_ref().map_err(|e| e.errno()),
                Err(Some(Errno::EIO | Errno::ENODEV))
            ),
            "the command that times out: {r:?} (want EIO or ENODEV)"
        );
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

        check!(
            t,
            matches!(ctx.get_async_event(), Ok(Some(AsyncEvent::DeviceFatal))),
            "fatal event"
        );
        check!(t, matches!(ctx.get_async_event(), Ok(None)), "queued once");
        check_eq!(
            t,
            uverbs.async_event(1000),
            Ok((1, IB_EVENT_DEVICE_FATAL)),
            "the core's raw user context: DEVICE_FATAL (element: the port)"
        );
        check_errno!(
            t,
            alloc_pd(uverbs.fd.as_raw_fd()),
            Errno::EIO,
            "ALLOC_PD through the core after the failure"
        );
        // Closing it destroys its PD on a stopped device: no error, no warning.
        drop(uverbs);
        check!(
            t,
            wakes(channel)?,
            "the CQ's completion channel was signalled"
        );
        check_errno!(
            t,
            Context::open(&cfg.dev),
            Errno::EIO,
            "a new context on a failed device"
        );
        check_errno!(
            t,
            Pd::new(&ctx),
            Errno::EIO,
            "a second failing command, DEVICE_FATAL taken"
        );
        check_eq!(
            t,
            dmesg_count("command queue dead"),
            dead_lines + 1,
            "still said once"
        );
    }
    check_eq!(t, pinned(), before, "closing freed every pinned page");

    let dev = rebind(cfg, &bdf)?;
    check!(t, bus_master(&bdf)?, "bus mastering on again after rebind");
    let ctx = Arc::new(Context::open(&dev)?);
    check!(t, Pd::new(&ctx).is_ok(), "the device works after rebind");
    Ok(())
}

/// An INVALIDATE_ODP that times out (inside `madvise`, from the mmu notifier): the device is
/// stopped before the pages are unmapped, `madvise` returns, the context learns it (DEVICE_FATAL,
/// reported by the fault worker, not from inside the notifier), and a rebind brings it back.
pub(super) fn odp_invalidate_timeout_stops_device(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "fail_cmds")?;
    const ODP_MAPPED: &str = "/sys/kernel/debug/qhca/odp_mapped_pages";
    let mapped = || -> i64 {
        std::fs::read_to_string(ODP_MAPPED)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(-1)
    };
    let bdf = system::pci_bdf(cfg)?;
    let dead_lines = dmesg_count("command queue dead");
    let before = mapped();
    {
        let ctx = Arc::new(Context::open(&cfg.dev)?);
        let pd = Pd::new(&ctx)?;
        let len = 16 * PAGE;
        let mr = pd.reg_odp_buf(len as usize, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        mr.advise(qhca::Advice::PrefetchWrite, mr.addr(), len, true)?;
        check_eq!(t, mapped(), before + 16, "prefetched pages mapped");

        set_knob("fail_cmds", 1)?;
        // SAFETY: the region owns the range and hands out no reference into it.
        let r = unsafe {
            libc::madvise(
                mr.addr() as *mut libc::c_void,
                len as usize,
                libc::MADV_DONTNEED,
            )
        };
        check_eq!(t, r, 0, "madvise returns");
        check_eq!(t, knob("fail_cmds"), Some(0), "the injection was used");
        check!(
            t,
            !bus_master(&bdf)?,
            "bus mastering off after INVALIDATE_ODP timed out"
        );
        check_eq!(
            t,
            mapped(),
            before,
            "the pages were unmapped (after the device stopped)"
        );
        check_eq!(
            t,
            ctx.wait_async_event(Some(Duration::from_secs(10)))?,
            Some(AsyncEvent::DeviceFatal),
            "the context is told"
        );
        check_eq!(
            t,
            dmesg_count("command queue dead"),
            dead_lines + 1,
            "said once"
        );
        check!(
            t,
            dmesg_count("INVALIDATE_ODP of key") >= 1,
            "the failure is logged"
        );
    }
    check_eq!(t, mapped(), before, "nothing mapped after close");
    let dev = rebind(cfg, &bdf)?;
    let ctx = Arc::new(Context::open(&dev)?);
    let pd = Pd::new(&ctx)?;
    let mr = pd.reg_odp_buf(PAGE as usize, Access::LOCAL_WRITE)?;
    check!(
        t,
        mr.advise(qhca::Advice::PrefetchWrite, mr.addr(), PAGE, true)
            .is_ok(),
        "ODP works after rebind"
    );
    Ok(())
}

/// Exit code of [`dead_queue_on_close`]'s child once it holds its objects and was told to go.
const CLOSE_CHILD_OK: i32 = 7;

/// The child of [`dead_queue_on_close`]: opens a context on `dev` with a PD, a CQ and a region
/// of 16 pages, writes one byte to `ready`, waits until `go` has something to read or is closed,
/// and returns [`CLOSE_CHILD_OK`] without destroying anything, so that the file's close (the
/// core's cleanup, which runs the driver's destroys) does it; another code if a step failed.
fn close_child(dev: &Path, ready: OwnedFd, go: OwnedFd) -> i32 {
    let held = (|| -> qhca::Result<_> {
        let ctx = Arc::new(Context::open(dev)?);
        let pd = Pd::new(&ctx)?;
        let cq = Cq::new(&ctx, 2, None)?;
        let mr = pd.reg_mr_buf(16 * PAGE as usize, Access::LOCAL_WRITE)?;
        Ok((ctx, pd, cq, mr))
    })();
    let Ok(held) = held else {
        return 20;
    };
    if nix::unistd::write(&ready, &[1]) != Ok(1) {
        return 21;
    }
    let mut b = [0u8; 1];
    let _ = nix::unistd::read(go.as_raw_fd(), &mut b);
    // The objects stay for the kernel to clean up at exit.
    std::mem::forget(held);
    CLOSE_CHILD_OK
}

/// A destroy command that times out while a closing context cleans up (the core's cleanup of a
/// file closed with its objects in it, which runs the driver's destroys): the device is stopped
/// before the context's pinned memory is freed (and is freed then: nothing is leaked).
pub(super) fn dead_queue_on_close(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "fail_cmds")?;
    let bdf = system::pci_bdf(cfg)?;
    let dead_lines = dmesg_count("command queue dead");
    let leaks = dmesg_count("leaking its");
    let before = pinned();
    let (ready_r, ready_w) = nix::unistd::pipe()?;
    let (go_r, go_w) = nix::unistd::pipe()?;
    // SAFETY: the child runs only the code of `close_child` (the crate's calls, which allocate:
    // glibc's fork leaves its allocator usable in the child), catches any unwind there, and
    // ends with `_exit`, so it never returns into the harness of the parent's copy.
    let child = match unsafe { fork() }? {
        ForkResult::Child => {
            drop((ready_r, go_w));
            let code =
                std::panic::catch_unwind(AssertUnwindSafe(|| close_child(&cfg.dev, ready_w, go_r)))
                    .unwrap_or(22);
            // SAFETY: ends the child at once, closing its files (the context's among them).
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => child,
    };
    drop((ready_w, go_r));
    let mut b = [0u8; 1];
    let got = nix::unistd::read(ready_r.as_raw_fd(), &mut b);
    if !check_eq!(t, got, Ok(1), "the child made its objects") {
        // No injection armed: it would hit the next case's first command.
        drop(go_w);
        let ws = waitpid(child, None)?;
        bail!("the child ended with {ws:?}");
    }
    check_eq!(t, pinned() - before, 17, "the CQ and MR pin 17 pages");
    set_knob("fail_cmds", 1)?;
    // The child exits: its file's close destroys the objects.
    drop(go_w);
    let ws = waitpid(child, None)?;
    check!(
        t,
        matches!(ws, WaitStatus::Exited(_, CLOSE_CHILD_OK)),
        "the child ended with {ws:?}"
    );
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
    check_eq!(t, dmesg_count("leaking its"), leaks, "nothing leaked");
    let dev = rebind(cfg, &bdf)?;
    let ctx = Arc::new(Context::open(&dev)?);
    check!(t, Pd::new(&ctx).is_ok(), "the device works after rebind");
    Ok(())
}

/// A destroy that the device refuses, through the core, which frees the object whatever the
/// driver answers: the driver stops the device first (reset, bus mastering off) and says why,
/// then lets go of the object, so that the region's pinned pages are freed (not leaked, and not
/// under a device that may still use them); every context learns that the device failed; a
/// rebind brings the device back.
pub(super) fn refused_destroy_stops_device(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "refuse_destroys")?;
    let bdf = system::pci_bdf(cfg)?;
    let before = pinned();
    let dead_lines = dmesg_count("command queue dead");
    let leaks = dmesg_count("leaking its");
    {
        let ctx = Arc::new(Context::open(&cfg.dev)?);
        let pd = Pd::new(&ctx)?;
        let mr = pd.reg_mr_buf(16 * PAGE as usize, Access::LOCAL_WRITE)?;
        check_eq!(t, pinned() - before, 16, "the MR pins 16 pages");
        check!(
            t,
            bus_master(&bdf)?,
            "bus mastering is on while the device runs"
        );
        let said = format!(
            "destroy command {} for {:#x} failed (Error({})); stopping the device",
            qhca_uapi::QHCA_CMD_DEREG_MR,
            mr.lkey(),
            libc::EINVAL
        );
        let said_before = dmesg_count(&said);
        set_knob("refuse_destroys", 1)?;
        let r = mr.dereg();
        check!(t, r.is_ok(), "DEREG_MR through the core: {r:?}");
        check_eq!(
            t,
            knob("refuse_destroys"),
            Some(0),
            "the device refused the DEREG_MR"
        );
        check!(
            t,
            !bus_master(&bdf)?,
            "bus mastering still on after the device refused a destroy"
        );
        check_eq!(
            t,
            dmesg_count(&said),
            said_before + 1,
            "said why ({said:?})"
        );
        check_eq!(
            t,
            dmesg_count("command queue dead"),
            dead_lines + 1,
            "said once that the device is stopped"
        );
        check_eq!(
            t,
            pinned(),
            before,
            "the region's pages were freed once the device was stopped"
        );
        check!(
            t,
            matches!(
                ctx.wait_async_event(Some(Duration::from_secs(10))),
                Ok(Some(AsyncEvent::DeviceFatal))
            ),
            "the context is told"
        );
        // EIO, a failed device's reason: DEVICE_FATAL is taken (see dead_queue_stops_device).
        check_errno!(
            t,
            Pd::new(&ctx),
            Errno::EIO,
            "a command on the stopped device"
        );
    }
    check_eq!(t, pinned(), before, "nothing pinned after close");
    check_eq!(t, dmesg_count("leaking its"), leaks, "nothing leaked");
    let dev = rebind(cfg, &bdf)?;
    check!(t, bus_master(&bdf)?, "bus mastering on again after rebind");
    let ctx = Arc::new(Context::open(&dev)?);
    check!(t, Pd::new(&ctx).is_ok(), "the device works after rebind");
    Ok(())
}

/// When probe fails after enabling the device (not ready, or QUERY_DEVICE timing out), the
/// device is reset and bus mastering is off before the rings are freed.
pub(super) fn probe_error_stops_device(t: &mut T, cfg: &Config) -> CaseResult {
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
    let ctx = Arc::new(Context::open(core_device(cfg)?.path)?);
    check!(t, Pd::new(&ctx).is_ok(), "the device works after bind");
    Ok(())
}

/// A device claiming more doorbell pages than BAR2 holds is refused at probe (so every page the
/// driver maps is inside the BAR).
pub(super) fn uar_count_checked_against_bar(t: &mut T, cfg: &Config) -> CaseResult {
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
    let ctx = Context::open(core_device(cfg)?.path)?;
    check_eq!(t, ctx.attr().num_uars, cfg.expect_num_uars);
    Ok(())
}
