// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The page-fault service against a process that stalls its own faults: its on-demand region
//! lies over a FUSE file whose daemon never answers a read (`qhca-odp-bench --neighbour
//! stalled`, the bench's own stalling neighbour), so the driver's fault for it waits for ever.
//! Another process's faults must go on being served, with no more delay than without it; the
//! stalled process is still cleaned up when it dies; unbind does not wait for the stuck fault
//! (`unbind_with_a_stalled_fault`, among the destructive cases).

use super::odp::{drv_counter, run1, rw, PAGE};
use super::*;

/// How long one fault of another process may take while the stall goes on (TCG is slow; a
/// fault served in turn takes milliseconds).
const FAULT_BOUND: Duration = Duration::from_secs(5);

/// Starts the stalling neighbour (`qhca-odp-bench --neighbour stalled`, beside this binary),
/// which says `ready` once the driver's fault for it waits on the FUSE daemon; `None` (the case
/// fails with a note) if the kernel has no FUSE.
fn start_stall(t: &mut T, cfg: &Config) -> Result<Option<Child>, Fail> {
    if !Path::new("/dev/fuse").exists() {
        check!(
            t,
            false,
            "no /dev/fuse: the guest kernel lacks CONFIG_FUSE_FS"
        );
        return Ok(None);
    }
    let bench = std::env::current_exe()?.with_file_name("qhca-odp-bench");
    let mut c = Command::new(&bench);
    c.args(["--neighbour", "stalled", "-d"])
        .arg(&cfg.dev)
        .stdin(Stdio::piped());
    let child = spawn_until_says(c, "ready", "the stalling neighbour")?;
    Ok(Some(child))
}

/// Unmounts what a killed neighbour `pid` left mounted.
fn unmount_stall(pid: u32) {
    let dir = format!("/tmp/qhca-fuse-{pid}");
    let _ = nix::mount::umount2(dir.as_str(), nix::mount::MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir(&dir);
}

/// Kills the helper and waits until its context is gone from the device and nothing is left
/// mapped; unmounts its file system.
fn end_stall(t: &mut T, cfg: &Config, mut child: Child) -> CaseResult {
    let pid = child.id();
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL)?;
    let end = Instant::now() + Duration::from_secs(20);
    let st = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() > end {
            bail!("the stalled helper {pid} did not die within 20 s of SIGKILL");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    check!(
        t,
        system::killed_by_signal(&st, Signal::SIGKILL),
        "helper ended with {st}"
    );
    unmount_stall(pid);
    let end = Instant::now() + Duration::from_secs(20);
    let mut counts = super::process::device_object_counts(cfg)?;
    while counts.iter().any(|&(_, n)| n != 0) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
        counts = super::process::device_object_counts(cfg)?;
    }
    for (what, n) in counts {
        check_eq!(
            t,
            n,
            0,
            "device {what} alive 20 s after the stalled process died"
        );
    }
    Ok(())
}

/// While one process's fault waits for ever, another process's faults are served, each within
/// [`FAULT_BOUND`]; the stalled process is cleaned up when killed.
pub(super) fn verbs_odp_stalled_fault_delays_no_one(t: &mut T, cfg: &Config) -> CaseResult {
    let Some(child) = start_stall(t, cfg)? else {
        return Ok(());
    };
    let (f0, d0) = (
        drv_counter(cfg, "faults")?,
        drv_counter(cfg, "dropped_faults")?,
    );
    let res = (|| -> CaseResult {
        let mut p = pair(cfg, &PairOpts::default())?;
        let n = 16;
        let dst = p.pd.reg_odp_buf(n * PAGE, rw())?;
        let mut src = p.pd.reg_mr_buf(64, Access::NONE)?;
        let mut worst = Duration::ZERO;
        for i in 0..n {
            src.write_at(0, &pattern(i as u8, 64));
            let op = WrOp::Write {
                raddr: dst.addr() + (i * PAGE) as u64,
                rkey: dst.rkey(),
            };
            let t0 = Instant::now();
            let wc = run1(&mut p, i as u64, op, &[src.sge(0, 64)])?;
            worst = worst.max(t0.elapsed());
            check_wc(
                t,
                &wc,
                i as u64,
                WcStatus::Success,
                WcOpcode::RdmaWrite,
                "write",
            );
        }
        check!(
            t,
            worst <= FAULT_BOUND,
            "a fault of ours took {worst:?} while another process's fault stalled"
        );
        let faults = drv_counter(cfg, "faults")? - f0;
        check!(
            t,
            faults >= n as u64,
            "our writes faulted ({faults} faults since the start)"
        );
        check!(
            t,
            dst.to_vec(0, n * PAGE)
                .chunks(PAGE)
                .enumerate()
                .all(|(i, pg)| pg[..64] == pattern(i as u8, 64)[..]),
            "the writes landed"
        );
        check_eq!(
            t,
            drv_counter(cfg, "dropped_faults")?,
            d0,
            "no fault was dropped"
        );
        Ok(())
    })();
    end_stall(t, cfg, child)?;
    res
}

/// Unbind while a process's fault waits for ever: unbind completes (the fault service is not
/// waited for), the stalled process's context is disassociated, and once the process dies
/// everything is freed; the device binds again and works.
pub fn unbind_with_a_stalled_fault(t: &mut T, cfg: &Config) -> CaseResult {
    let Some(child) = start_stall(t, cfg)? else {
        return Ok(());
    };
    let bdf = match system::pci_bdf(cfg) {
        Ok(bdf) => bdf,
        Err(e) => bail!("PCI address of the device: {e}"),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let cfg2 = cfg.clone();
    let b2 = bdf.clone();
    std::thread::spawn(move || {
        let r = std::fs::write(cfg2.driver_dir().join("unbind"), &b2);
        let _ = tx.send(r.map_err(|e| e.to_string()));
    });
    let unbound = rx.recv_timeout(Duration::from_secs(30));
    check!(
        t,
        matches!(unbound, Ok(Ok(()))),
        "unbind with a stalled fault: {unbound:?}"
    );
    let pid = child.id();
    let mut child = child;
    kill(Pid::from_raw(pid as i32), Signal::SIGKILL)?;
    let end = Instant::now() + Duration::from_secs(20);
    while child.try_wait()?.is_none() {
        if Instant::now() > end {
            bail!("the stalled helper {pid} did not die within 20 s of SIGKILL");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    unmount_stall(pid);
    if unbound.is_err() {
        // Still stuck: the process is gone now, which ends the stall; let unbind finish.
        let _ = rx.recv_timeout(Duration::from_secs(30));
    }
    std::fs::write(cfg.driver_dir().join("bind"), &bdf)?;
    // The device works again, on its uverbs node once its port is up (the node's number may
    // change across the reprobe).
    let cfg = &uverbs::on_uverbs(cfg)?;
    let mut p = pair(cfg, &PairOpts::default())?;
    let dst = p.pd.reg_odp_buf(PAGE, rw())?;
    let mut src = p.pd.reg_mr_buf(64, Access::NONE)?;
    src.write_at(0, &[5; 64]);
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    let wc = run1(&mut p, 1, op, &[src.sge(0, 64)])?;
    check_wc(
        t,
        &wc,
        1,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "write after rebind",
    );
    check_eq!(
        t,
        std::fs::read_to_string(super::odp::ODP_MAPPED)?.trim(),
        "1",
        "pages mapped: only the new region's"
    );
    Ok(())
}
