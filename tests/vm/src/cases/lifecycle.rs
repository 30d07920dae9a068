// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The destructive cases, run last: unbinding with a context open, and unloading and loading the
//! module again.

use std::sync::Arc;

use qhca::Pd;

use super::rdma_core::{alloc_pd, get_context, has_ib_device, ib_dirs, Uverbs};
use super::*;
use crate::verbs::uverbs::core_device;

/// Case 7: Unbinding with user contexts of the RDMA core's device open, which the core
/// disassociates: unbind does not wait for their files, the PDs they hold are destroyed, the
/// files stay closable, and their doorbell mappings are zapped (a store lands on a page of the
/// core's instead of raising SIGBUS, here and in a helper process). A context of the `qhca` crate
/// sees ENODEV on its commands and its doorbell mapping refused; a raw one sees the core's EIO.
/// Binding again brings a working device back, every doorbell page free.
pub(super) fn unbind_while_open(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    require!(
        t,
        cfg.driver_dir().join(&bdf).exists(),
        "{bdf} is not bound to {}",
        cfg.driver_dir().display()
    );

    let ctx = Arc::new(Context::open(&cfg.dev)?);
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
    check_errno!(t, Pd::new(&ctx), Errno::ENODEV, "a command after unbind");
    check_errno!(t, ctx.map_doorbell(), Errno::EIO, "mmap after unbind");
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
    // core's instead of raising SIGBUS, and the helper exits normally.
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

    // A store through our own zapped mapping, then its munmap.
    db.ring(stray_doorbell());
    drop(db);
    let Some(ctx) = Arc::into_inner(ctx) else {
        bail!("the context is still shared");
    };
    let fd: OwnedFd = ctx.into();
    check_eq!(
        t,
        nix::unistd::close(fd.into_raw_fd()),
        Ok(()),
        "close after unbind"
    );

    let rebound = unbound.rebind();
    check!(t, rebound.is_ok(), "bind {bdf}: {rebound:?}");
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
    let (_ctx, a) = open_query(&core_device(cfg)?.path)?;
    check_eq!(t, a.num_uars, cfg.expect_num_uars, "after rebind");
    check_eq!(
        t,
        a.uar_index,
        system::first_user_uar(cfg)?,
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
            let _ = core_device(self.cfg);
        }
    }
}

/// `rmmod`, which must succeed `when` (with or without users), and what goes with the module:
/// its uverbs node `dev` and the RDMA core's device.
fn unload(t: &mut T, cfg: &Config, rmmod: &Path, bdf: &str, dev: &Path, when: &str) -> CaseResult {
    let m = cfg.module.as_str();
    let out = run_tool(rmmod, &[m.as_ref()])?;
    require!(
        t,
        out.status.success(),
        "rmmod {m} {when}: {}",
        describe(&out)
    );
    check!(
        t,
        !system::module_loaded(cfg),
        "{} still there after rmmod {when}",
        cfg.module_dir().display()
    );
    check!(
        t,
        !dev.exists(),
        "{} still there after rmmod {when}",
        dev.display()
    );
    check!(
        t,
        ib_dirs(bdf).is_empty(),
        "the RDMA core's device still there after rmmod {when}: {:?}",
        ib_dirs(bdf)
    );
    check_errno!(
        t,
        Context::open(dev),
        Errno::ENOENT,
        "open with the module unloaded ({when})"
    );
    Ok(())
}

/// `insmod`, which must succeed, and a working device after it: its uverbs node (whose number
/// may have changed) answers, every doorbell page free.
fn load(t: &mut T, cfg: &Config, insmod: &Path, ko: &Path, bdf: &str) -> CaseResult {
    let out = run_tool(insmod, &[ko.as_os_str()])?;
    require!(
        t,
        out.status.success(),
        "insmod {}: {}",
        ko.display(),
        describe(&out)
    );
    check!(
        t,
        wait_for(NODE_TIMEOUT, || has_ib_device(bdf)),
        "the RDMA core's device did not come back after insmod: {:?}",
        ib_dirs(bdf)
    );
    let (_ctx, a) = open_query(&core_device(cfg)?.path)?;
    check_eq!(t, a.num_uars, cfg.expect_num_uars, "after insmod");
    check_eq!(
        t,
        a.uar_index,
        system::first_user_uar(cfg)?,
        "a fresh driver hands out its lowest free page first"
    );
    Ok(())
}

/// Case 8: Without users the module unloads, and loads again. An open user context of the RDMA
/// core's device does not pin the module (the driver lets the core disassociate its contexts):
/// rmmod with one open succeeds, and the context is disassociated (DEVICE_FATAL once, ENODEV on
/// its commands, its doorbell mapping zapped: a store lands on a page of the core's, where a
/// SIGBUS would end the suite); the module loads again.
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

    unload(t, cfg, &rmmod, &bdf, &cfg.dev, "with no users")?;
    load(t, cfg, &insmod, ko, &bdf)?;

    let dev = core_device(cfg)?.path;
    let ctx = Arc::new(Context::open(&dev)?);
    let pd = Pd::new(&ctx)?;
    let db = ctx.doorbell()?;
    db.ring(stray_doorbell());
    unload(t, cfg, &rmmod, &bdf, &dev, "with a context open")?;
    check!(
        t,
        matches!(
            ctx.wait_async_event(Some(Duration::from_secs(10))),
            Ok(Some(qhca::AsyncEvent::DeviceFatal))
        ),
        "the open context is told"
    );
    check!(
        t,
        matches!(ctx.get_async_event(), Ok(None)),
        "DEVICE_FATAL queued once"
    );
    check_errno!(t, Pd::new(&ctx), Errno::ENODEV, "a command after rmmod");
    db.ring(stray_doorbell());
    // Closing the disassociated context with the module gone: the core calls nothing of it.
    drop((db, pd, ctx));
    load(t, cfg, &insmod, ko, &bdf)
}
