// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Surprise removal under traffic, and the `__disassoc` helper process.

use super::*;
use crate::verbs::uverbs::core_device;

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
        // Waits for the device's uverbs node, its port up (the node's number may differ from
        // the one before the removal).
        wait_for(NODE_TIMEOUT, || system::pci_bdf(self.cfg).is_ok());
        let _ = core_device(self.cfg);
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

/// Surprise removal under traffic, with the `qhca` crate's own contexts: two processes ringing
/// their doorbells and mapping them afresh in a loop see the device go (DEVICE_FATAL once,
/// ENODEV, mmap refused, their CQs' completion channels woken, doorbell stores that land on a
/// page of the core's) and exit by themselves, not by SIGBUS; a rescan brings a working device
/// back. (`ibprov_removed_under_traffic` does the same through libibverbs and the installed
/// provider.)
pub(super) fn remove_under_traffic(t: &mut T, cfg: &Config) -> CaseResult {
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
                    "helper {i} ended with {s} \
                     (exit {HELPER_OK}: every check held; 135 or a signal: SIGBUS)"
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
    let ctx = Arc::new(Context::open(core_device(cfg)?.path)?);
    check!(t, Pd::new(&ctx).is_ok(), "the device works after rescan");
    Ok(())
}

/// Two `qhca-perf --loopback` streams, then surprise removal: both exit by themselves with an
/// error (not SIGBUS, exit 135), and the device comes back on rescan.
pub(super) fn perf_exits_on_removal(t: &mut T, cfg: &Config) -> CaseResult {
    let Some(perf) = system::find_tool("qhca-perf").or_else(|| {
        let p = std::env::current_exe().ok()?.with_file_name("qhca-perf");
        p.exists().then_some(p)
    }) else {
        bail!("qhca-perf not found next to qhca-vmtest or in PATH");
    };
    let bdf = system::pci_bdf(cfg)?;
    // qhca-perf opens the first device, the RDMA core's: its port's netdev up (GID 0).
    core_device(cfg)?;
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
    let ctx = Arc::new(Context::open(core_device(cfg)?.path)?);
    check!(t, Pd::new(&ctx).is_ok(), "the device works after rescan");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The helper process
// ---------------------------------------------------------------------------------------------

/// `qhca-vmtest __disassoc DEVICE`: holds a context of the `qhca` crate on the uverbs node
/// DEVICE with a PD, a CQ with a completion channel and its doorbell mapped, prints `ready`,
/// then rings its doorbell and maps it afresh in a loop until the context reports itself
/// disassociated ([`Context::check`]). Then checks what a disassociated context must look like
/// and exits [`HELPER_OK`] if all of it held (another code, and a message on stderr, naming the
/// first thing that did not; 10 if nothing happened within a minute). A doorbell store that
/// raised SIGBUS would end it by that signal instead.
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
    let e = |code: i32| move |x: qhca::Error| (code, x.to_string());
    let ctx = Arc::new(Context::open(dev).map_err(e(20))?);
    let _pd = Pd::new(&ctx).map_err(e(22))?;
    let efd = qhca::eventfd().map_err(e(24))?;
    let cq = Cq::new(&ctx, 2, Some(efd)).map_err(e(25))?;
    let db = ctx.doorbell().map_err(e(26))?;
    println!("ready");
    let word = qhca::DbWord::new(qhca::DbType::Sq, 0, 0).raw();

    let start = Instant::now();
    let mut fresh: Option<qhca::Doorbell> = None;
    loop {
        db.ring(word);
        // A mapping made now may race with the removal: it must end up harmless too.
        if let Ok(m) = ctx.map_doorbell() {
            m.ring(word);
            fresh = Some(m);
        }
        match ctx.check() {
            Ok(()) => {}
            Err(qhca::Error::Disassociated { .. }) => break,
            Err(x) => return Err(e(27)(x)),
        }
        if start.elapsed() > Duration::from_secs(60) {
            return Err((10, "not disassociated within a minute".into()));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    match ctx.get_async_event() {
        Ok(Some(AsyncEvent::DeviceFatal)) => {}
        other => return Err((12, format!("first async event: {other:?}"))),
    }
    match ctx.get_async_event() {
        Ok(None) => {}
        other => return Err((13, format!("second async event: {other:?}"))),
    }
    match Pd::new(&ctx) {
        Err(x) if x.errno() == Some(Errno::ENODEV) => {}
        other => return Err((14, format!("a command after disassociation: {other:?}"))),
    }
    // The core closed the CQ's completion channel: a waiter on it wakes (POLLERR).
    let Some(channel) = cq.event_fd() else {
        return Err((15, "no completion channel".into()));
    };
    match wakes(channel) {
        Ok(true) => {}
        other => return Err((15, format!("the CQ's channel wakes no waiter: {other:?}"))),
    }
    // The core zapped the doorbell mappings: stores now land on a page of its own (a SIGBUS
    // would end this process).
    db.ring(word);
    if let Some(m) = &fresh {
        m.ring(word);
    }
    match ctx.map_doorbell() {
        Err(x) if x.errno() == Some(Errno::EIO) => {}
        other => return Err((17, format!("mmap after disassociation: {other:?}"))),
    }
    Ok(())
}

/// What one context of [`unbind_releases_dma_while_bound`] holds: every kind of DMA resource.
struct Held {
    _qp: Qp,
    _cq: Cq,
    _mr: qhca::MrBuf,
    _odp: qhca::OdpMr,
    _pd: Pd,
    ctx: Arc<Context>,
}

/// The pages DMA-mapped for ODP regions (`odp_mapped_pages` in debugfs).
fn odp_mapped() -> i64 {
    knob("odp_mapped_pages").unwrap_or(-1)
}

/// Unbind with contexts open that hold a CQ, a QP, a pinned MR and an ODP region with pages
/// mapped: the unbind itself releases every DMA resource (pins and mappings), while the driver
/// is still bound; closing the files afterwards frees only plain memory (behind an IOMMU, a DMA
/// free or unmap after unbind goes through dma-direct with an IOVA and oopses, or faults in the
/// DMAR). Rebinding gives a working device and nothing stays pinned or mapped.
pub(super) fn unbind_releases_dma_while_bound(t: &mut T, cfg: &Config) -> CaseResult {
    const CTXS: usize = 4;
    const ODP_PAGES: u64 = 16;
    let bdf = system::pci_bdf(cfg)?;
    let (pinned_before, mapped_before) = (pinned(), odp_mapped());
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_sge: 1,
        max_inline: 64,
    };
    let mut held = Vec::new();
    for _ in 0..CTXS {
        let ctx = Arc::new(Context::open(&cfg.dev)?);
        let pd = Pd::new(&ctx)?;
        let cq = Cq::new(&ctx, 64, None)?;
        let qp = Qp::new(&pd, &cq, &cq, &caps)?;
        let mr = pd.reg_mr_buf(16 * PAGE as usize, Access::LOCAL_WRITE)?;
        let odp = pd.reg_odp_buf((ODP_PAGES * PAGE) as usize, Access::LOCAL_WRITE)?;
        odp.advise(
            qhca::Advice::PrefetchWrite,
            odp.addr(),
            ODP_PAGES * PAGE,
            true,
        )?;
        held.push(Held {
            _qp: qp,
            _cq: cq,
            _mr: mr,
            _odp: odp,
            _pd: pd,
            ctx,
        });
    }
    check!(
        t,
        pinned() > pinned_before,
        "pages pinned before unbind ({} then {})",
        pinned_before,
        pinned()
    );
    check_eq!(
        t,
        odp_mapped(),
        mapped_before + (CTXS as u64 * ODP_PAGES) as i64,
        "ODP pages mapped before unbind"
    );
    let unbound = Unbound::unbind(cfg, &bdf)?;
    check_eq!(
        t,
        pinned(),
        pinned_before,
        "the unbind unpinned every context's memory"
    );
    check_eq!(
        t,
        odp_mapped(),
        mapped_before,
        "the unbind unmapped every ODP page"
    );
    for (i, h) in held.iter().enumerate() {
        check!(
            t,
            Pd::new(&h.ctx).is_err(),
            "context {i}: ioctls fail after unbind"
        );
    }
    // The files close with the driver unbound: only plain memory may be freed now.
    drop(held);
    check_eq!(t, pinned(), pinned_before, "nothing pinned after close");
    check_eq!(t, odp_mapped(), mapped_before, "nothing mapped after close");
    unbound.rebind()?;
    // The device's uverbs node after the rebind (its number may have changed).
    let dev = crate::verbs::uverbs::core_device(cfg)?.path;
    let ctx = Arc::new(Context::open(&dev)?);
    let pd = Pd::new(&ctx)?;
    let cq = Cq::new(&ctx, 64, None)?;
    check!(
        t,
        Qp::new(&pd, &cq, &cq, &caps).is_ok(),
        "the device works after rebind"
    );
    let odp = pd.reg_odp_buf(PAGE as usize, Access::LOCAL_WRITE)?;
    check!(
        t,
        odp.advise(qhca::Advice::PrefetchWrite, odp.addr(), PAGE, true)
            .is_ok(),
        "ODP works after rebind"
    );
    Ok(())
}

/// Surprise removal under traffic through the installed provider (no preload): `qhca-verbs-check
/// unplug` writes in a loop when the device goes; it must get `IBV_EVENT_DEVICE_FATAL`, stop,
/// destroy every object and exit 0 by itself (not by SIGBUS), and the device comes back on
/// rescan with its RDMA core device.
pub(super) fn ibprov_removed_under_traffic(t: &mut T, cfg: &Config) -> CaseResult {
    use crate::ibverbs::{beside_me, Via};
    let via = Via;
    let name = via.device(cfg)?;
    let bdf = system::pci_bdf(cfg)?;
    let mut child = via
        .cmd(&beside_me("qhca-verbs-check")?, &["unplug", &name])?
        .stderr(Stdio::piped())
        .spawn()?;
    let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut first = String::new();
    out.read_line(&mut first)?;
    let rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out, &mut s);
        s
    });
    if first.trim() != "traffic" {
        let _ = child.kill();
        let _ = child.wait();
        bail!("qhca-verbs-check unplug said {first:?}");
    }
    // Some traffic first.
    std::thread::sleep(Duration::from_millis(300));
    let removed = Removed::remove(cfg, &bdf)?;
    let status = wait_exit(&mut child, EXIT_TIMEOUT);
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    let said = rest.join().unwrap_or_default();
    check!(
        t,
        status.is_some_and(|s| s.success()),
        "qhca-verbs-check unplug ended with {status:?} (135 or a signal: SIGBUS): {said}{err}"
    );
    check!(
        t,
        said.contains("unplug: DEVICE_FATAL after") && said.contains("every object destroyed"),
        "{said}{err}"
    );
    drop(removed);
    // `Removed` waited for the device's uverbs node to come back (under any number).
    crate::verbs::uverbs::core_device(cfg)?;
    check!(
        t,
        wait_for(NODE_TIMEOUT, || crate::cases::ib_device_of(&bdf).is_some()),
        "the RDMA core's device did not come back after rescan"
    );
    Ok(())
}
