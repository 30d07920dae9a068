// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The destructive cases, run last: unbinding with a context open, and unloading and loading the
//! module again.

use super::rdma_core::{alloc_pd, get_context, has_ib_device, ib_dirs, Uverbs};
use super::*;

/// Case 7: Unbinding with a context open: the file stays closable, everything else on it is ENODEV,
/// the doorbell mappings are zapped; binding again brings a working device back. The same for a
/// user context of the RDMA core's device, which the core disassociates: unbind does not wait for
/// its files, its PD is destroyed, its commands fail with EIO, its doorbell mapping is zapped (a
/// store lands on a page of the core's).
pub(super) fn unbind_while_open(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    require!(
        t,
        cfg.driver_dir().join(&bdf).exists(),
        "{bdf} is not bound to {}",
        cfg.driver_dir().display()
    );

    let (ctx, _) = open_query(&cfg.dev)?;
    let db = ctx.map_doorbell()?;
    db.ring(stray_doorbell());
    // A helper with its doorbell mapped, to ring it after the unbind in a process that may die.
    let mut h = Holder::spawn(&cfg.dev, true)?
        .map_err(|e| Fail::new(file!(), line!(), format!("helper: {e}")))?;

    let (uverbs, _) = Uverbs::open(&bdf)?;
    let page = UAR_PAGE_SIZE;
    let udb = uverbs
        .map(
            page,
            libc::PROT_WRITE,
            libc::MAP_SHARED,
            uverbs.resp.db_mmap_offset,
        )
        .map_err(|e| Fail::new(file!(), line!(), format!("mmap: {e}")))?;
    // A PD the core destroys at the disassociation, while the device still answers.
    let pd = alloc_pd(uverbs.fd.as_raw_fd());
    check!(t, pd.is_ok(), "ALLOC_PD: {pd:?}");
    // A program of the installed provider with a region, a CQ and a QP (a pingpong server waiting
    // for its client): the core destroys them through the driver at the unbind.
    let via = crate::ibverbs::Via;
    let port = 18690;
    let name = via.device(cfg)?;
    let args = ["-d", name.as_str(), "-g", "0", "-p", "18690"];
    let mut server = via
        .cmd(&crate::ibverbs::tool("ibv_rc_pingpong")?, &args)?
        .spawn()?;
    let listened = wait_for(NODE_TIMEOUT, || crate::ibverbs::listening(port));

    let unbound = Unbound::unbind(cfg, &bdf)?;
    let _ = server.kill();
    let _ = server.wait();
    check!(t, listened, "ibv_rc_pingpong did not listen on {port}");
    check_errno!(
        t,
        get_context(uverbs.fd.as_raw_fd()),
        Errno::EIO,
        "a command on a disassociated uverbs file"
    );
    // SAFETY: one page, mapped shared and writable; the core replaced the doorbell page with a
    // page of its own, so this is a plain store that must not raise SIGBUS.
    unsafe { std::ptr::write_volatile(udb.addr() as *mut u64, stray_doorbell()) };
    drop(udb);
    drop(uverbs);
    check!(
        t,
        !cfg.driver_dir().join(&bdf).exists(),
        "{bdf} still bound after unbind"
    );
    check!(
        t,
        ib_dirs(&bdf).is_empty(),
        "the RDMA core's device still there after unbind: {:?}",
        ib_dirs(&bdf)
    );
    check_errno!(t, ctx.query(), Errno::ENODEV, "ioctl after unbind");
    check_errno!(t, ctx.map_doorbell(), Errno::ENODEV, "mmap after unbind");
    let reopen = Context::open(&cfg.dev);
    check!(
        t,
        matches!(
            reopen.as_ref().map_err(Error::errno),
            Err(Some(Errno::ENOENT | Errno::ENODEV | Errno::ENXIO))
        ),
        "open while unbound: {reopen:?}"
    );
    drop(reopen);

    // The zapped mapping is disassociated: a store through it lands on a harmless page of the
    // helper's own instead of raising SIGBUS, and the helper exits normally.
    let answered = h.ring()?;
    check!(
        t,
        answered,
        "the helper's doorbell store after unbind did not return"
    );
    let status = h.finish()?;
    check!(
        t,
        status.success() && !system::killed_by_signal(&status, Signal::SIGBUS),
        "helper ended with {status}"
    );

    drop(db); // munmap of a zapped mapping
    let fd: OwnedFd = ctx.into();
    check_eq!(
        t,
        nix::unistd::close(fd.into_raw_fd()),
        Ok(()),
        "close after unbind"
    );

    let rebound = unbound.rebind();
    check!(t, rebound.is_ok(), "bind {bdf}: {rebound:?}");
    require!(
        t,
        wait_for(NODE_TIMEOUT, || cfg.dev.exists()),
        "{} did not come back after bind",
        cfg.dev.display()
    );
    check!(
        t,
        cfg.driver_dir().join(&bdf).exists(),
        "{bdf} not bound after bind"
    );
    check!(
        t,
        wait_for(NODE_TIMEOUT, || has_ib_device(&bdf)),
        "the RDMA core's device did not come back after bind: {:?}",
        ib_dirs(&bdf)
    );
    let (_ctx, a) = open_query(&cfg.dev)?;
    check_eq!(t, a.num_uars, cfg.expect_num_uars, "after rebind");
    check_eq!(
        t,
        a.uar_index,
        0,
        "after rebind every page is free again, the unbound contexts' too"
    );
    Ok(())
}

/// Puts the module back (best effort) if a case leaves it unloaded.
struct Reload<'a> {
    cfg: &'a Config,
    insmod: &'a Path,
    ko: &'a Path,
}

impl Drop for Reload<'_> {
    fn drop(&mut self) {
        if !system::module_loaded(self.cfg) {
            let _ = run_tool(self.insmod, &[self.ko.as_os_str()]);
            wait_for(NODE_TIMEOUT, || self.cfg.dev.exists());
        }
    }
}

/// Case 8: An open file pins the module; without users it unloads, and loads again.
pub(super) fn reload_module(t: &mut T, cfg: &Config) -> CaseResult {
    let Some(ko) = cfg.ko.as_deref() else {
        bail!("QHCA_KO is not set: cannot reload the module");
    };
    require!(t, ko.is_file(), "QHCA_KO={} is not a file", ko.display());
    let m = cfg.module.as_str();
    require!(t, system::module_loaded(cfg), "module {m} is not loaded");
    require!(
        t,
        system::module_refcnt(cfg).is_some(),
        "module {m} is built in: cannot unload it"
    );
    let bdf = system::pci_bdf(cfg)?;
    let (Some(rmmod), Some(insmod)) = (find_tool("rmmod"), find_tool("insmod")) else {
        bail!("rmmod or insmod not found in PATH, /sbin or /usr/sbin");
    };

    // From here on, whatever happens, the module is loaded again at the end.
    let _reload = Reload {
        cfg,
        insmod: &insmod,
        ko,
    };

    let (ctx, _) = open_query(&cfg.dev)?;
    let refs = system::module_refcnt(cfg);
    check!(
        t,
        refs.is_some_and(|r| r >= 1),
        "an open file holds a module reference: refcnt {refs:?}"
    );
    let out = run_tool(&rmmod, &[m.as_ref()])?;
    if !check!(
        t,
        !out.status.success(),
        "rmmod {m} with a file open: {}",
        describe(&out)
    ) {
        // The module is gone under an open file: do not call into it again.
        std::mem::forget(ctx);
        return Err(Fail::recorded());
    }
    check!(
        t,
        system::module_loaded(cfg),
        "module gone after the refused rmmod"
    );
    check!(
        t,
        cfg.dev.exists(),
        "{} gone after the refused rmmod",
        cfg.dev.display()
    );
    let q = ctx.query();
    check!(
        t,
        q.is_ok(),
        "the open context after the refused rmmod: {q:?}"
    );
    drop(ctx);

    let out = run_tool(&rmmod, &[m.as_ref()])?;
    require!(
        t,
        out.status.success(),
        "rmmod {m} with no users: {}",
        describe(&out)
    );
    check!(
        t,
        !system::module_loaded(cfg),
        "{} still there after rmmod",
        cfg.module_dir().display()
    );
    check!(
        t,
        !cfg.dev.exists(),
        "{} still there after rmmod",
        cfg.dev.display()
    );
    check!(
        t,
        ib_dirs(&bdf).is_empty(),
        "the RDMA core's device still there after rmmod: {:?}",
        ib_dirs(&bdf)
    );
    check_errno!(
        t,
        Context::open(&cfg.dev),
        Errno::ENOENT,
        "open with the module unloaded"
    );

    let out = run_tool(&insmod, &[ko.as_os_str()])?;
    require!(
        t,
        out.status.success(),
        "insmod {}: {}",
        ko.display(),
        describe(&out)
    );
    require!(
        t,
        wait_for(NODE_TIMEOUT, || cfg.dev.exists()),
        "{} did not come back after insmod",
        cfg.dev.display()
    );
    check!(
        t,
        wait_for(NODE_TIMEOUT, || has_ib_device(&bdf)),
        "the RDMA core's device did not come back after insmod: {:?}",
        ib_dirs(&bdf)
    );
    let (_ctx, a) = open_query(&cfg.dev)?;
    check_eq!(t, a.abi_version, QHCA_ABI_VERSION, "after insmod");
    check_eq!(t, a.num_uars, cfg.expect_num_uars, "after insmod");
    check_eq!(t, a.uar_index, 0, "a fresh driver hands out page 0 first");
    Ok(())
}
