// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A dead command queue, a destroy the device refuses, the probe error path, and a device that
//! claims more doorbell pages than its BAR holds.

use super::*;
use crate::cases::rdma_core::{alloc_pd, Uverbs};

/// `IB_EVENT_DEVICE_FATAL` (`enum ib_event_type`, as `ibv_event_type` numbers it).
const IB_EVENT_DEVICE_FATAL: u32 = 8;

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
/// page, ioctls EIO); a user context of the RDMA core's device gets IB_EVENT_DEVICE_FATAL on its
/// event file and its commands fail; closing frees every pinned page; unbind and bind bring the
/// device back.
pub(super) fn dead_queue_stops_device(t: &mut T, cfg: &Config) -> CaseResult {
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
        let (uverbs, _) = Uverbs::open(&bdf)?;
        let upd = alloc_pd(uverbs.fd.as_raw_fd());
        check!(t, upd.is_ok(), "ALLOC_PD through the core: {upd:?}");
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
        check_eq!(
            t,
            uverbs.async_event(1000),
            Ok((1, IB_EVENT_DEVICE_FATAL)),
            "the core's user context: DEVICE_FATAL (element: the port)"
        );
        check_errno!(
            t,
            alloc_pd(uverbs.fd.as_raw_fd()),
            Errno::EIO,
            "ALLOC_PD through the core after the failure"
        );
        // Closing it destroys its PD on a stopped device: no error, no warning.
        drop(uverbs);
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
    rebind(cfg, &bdf)?;
    let ctx = Arc::new(Context::open(&cfg.dev)?);
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

/// A destroy command that times out while a closing context cleans up: the device is stopped
/// before the context's pinned memory is freed (and is freed then: nothing is leaked).
pub(super) fn dead_queue_on_close(t: &mut T, cfg: &Config) -> CaseResult {
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
pub(super) fn refused_destroy_leaks(t: &mut T, cfg: &Config) -> CaseResult {
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
