// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Unmodified libibverbs programs on qhca ([`Via`]): the distribution's libibverbs with the
//! installed provider on the RDMA core's device, nothing preloaded (the `ibprov_*` cases; the
//! preloaded verbs layer that the `ibverbs_*` cases ran is gone). Debian's `ibv_devices`,
//! `ibv_devinfo`, `ibv_rc_pingpong` and perftest, server and client in this guest, each passing
//! its own checks; our C program `qhca-verbs-check` (tests/verbs-c/), whose battery asserts what
//! verbs do and whose post/poll loop must make no system call; and rxe beside qhca in one device
//! list.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::harness::{Case, CaseResult, Fail, T};
use crate::system::{self, describe, Config};
use crate::{bail, check, check_eq, require};

/// The cases of this section, in order.
pub fn cases() -> Vec<Case<Config>> {
    macro_rules! provider {
        ($($name:ident),* $(,)?) => {{
            let mut v = Vec::new();
            $({
                fn provider_case(t: &mut T, cfg: &Config) -> CaseResult {
                    $name(t, cfg, Via)
                }
                v.push(Case { name: concat!("ibprov_", stringify!($name)), run: provider_case });
            })*
            v
        }};
    }
    let mut v = provider![
        devices_lists_qhca,
        devinfo,
        rxe_beside_qhca,
        rc_pingpong,
        rc_pingpong_events,
        ud_pingpong,
        srq_pingpong,
        check_battery,
        zero_syscalls,
        perftest_write_lat,
        perftest_write_bw,
        perftest_read_lat,
        perftest_read_bw,
        perftest_send_lat,
        perftest_send_bw,
        perftest_atomic_lat,
        perftest_send_lat_ud,
        perftest_send_lat_srq,
        perftest_send_bw_srq,
    ];
    v.push(Case {
        name: "ibprov_kill9_frees_everything",
        run: ibprov_kill9_frees_everything,
    });
    v
}

/// How a program reaches qhca: the distribution's libibverbs and the installed provider, on the
/// RDMA core's device (named as udev named it), with no preload; addressed by GID (RoCE), so the
/// port's netdev is up.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Via;

impl Via {
    /// `prog args..` reaching the device this way.
    pub(crate) fn cmd(self, prog: &Path, args: &[&str]) -> Result<Command, Fail> {
        let mut c = Command::new(prog);
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c.env_remove("LD_PRELOAD");
        Ok(c)
    }

    fn run(self, prog: &Path, args: &[&str]) -> Result<Output, Fail> {
        Ok(self.cmd(prog, args)?.output()?)
    }

    /// The device's name for `-d`: the RDMA core's device of our PCI device, whose netdev is
    /// brought up first (its link-local address is the port's GID 0).
    pub(crate) fn device(self, cfg: &Config) -> Result<String, Fail> {
        let dev = crate::verbs::uverbs::core_device(cfg)?;
        // GID 0 once the link is up.
        let gid0 = Path::new("/sys/class/infiniband")
            .join(&dev.name)
            .join("ports/1/gid_attrs/ndevs/0");
        if !system::wait_for(Duration::from_secs(10), || gid0.exists()) {
            bail!("{}: no GID 0 once its netdev is up", dev.name);
        }
        Ok(dev.name)
    }

    /// What a pingpong needs to address the peer (`-g 0`: by GID, as RoCE requires).
    fn pingpong_args(self) -> &'static [&'static str] {
        &["-g", "0"]
    }

    /// What perftest needs to address the peer (`-x 0`).
    fn perftest_args(self) -> &'static [&'static str] {
        &["-x", "0"]
    }

    /// The TCP port of a case (apart from those the removed layer's cases used).
    fn port(self, base: u16) -> u16 {
        base + 100
    }
}

/// A file next to this binary (cargo's release directory): the C program.
pub(crate) fn beside_me(name: &str) -> Result<PathBuf, Fail> {
    let exe = std::env::current_exe()?;
    let p = exe.with_file_name(name);
    if !p.exists() {
        bail!("{} not found (scripts/build-all.sh builds it)", p.display());
    }
    Ok(p)
}

/// A Debian tool by name, or the case fails (setup-host.sh installs them).
pub(crate) fn tool(name: &str) -> Result<PathBuf, Fail> {
    match system::find_tool(name) {
        Some(p) => Ok(p),
        None => bail!("{name} not found (ibverbs-utils and perftest: scripts/setup-host.sh)"),
    }
}

pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits for `child` up to `limit`, killing it after; its output, or `None` if it was killed.
pub(crate) fn wait_output(mut child: Child, limit: Duration) -> Result<Option<Output>, Fail> {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if child.try_wait()?.is_some() {
            return Ok(Some(child.wait_with_output()?));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(None)
}

/// True once a TCP socket listens on `port` (any address).
pub(crate) fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|s| {
            s.lines().skip(1).any(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|a| format!("{a} ").ends_with(&want))
                    && l.split_whitespace().nth(3) == Some("0A")
            })
        })
    })
}

/// What one run of a server and its client gave: whether the server listened, and both outputs
/// (`None`: timed out).
pub(crate) type PairRun = (bool, Option<Output>, Option<Output>);

/// Runs `once` (a server and its client of `prog`) again while perftest could not calibrate its
/// clock, twice at most. perftest calibrates its cycle counter against gettimeofday first and
/// gives up ("Can't produce a report") when the samples correlate poorly (r^2 < 0.9), which a
/// loaded TCG guest can cause on either side: a failed measurement, not a failed transfer, so that
/// alone is retried.
pub(crate) fn rerun_clockless(
    prog: &Path,
    mut once: impl FnMut() -> Result<PairRun, Fail>,
) -> Result<PairRun, Fail> {
    const NO_CLOCK: &str = "Can't produce a report";
    let mut attempt = 0;
    loop {
        let (up, c, s) = once()?;
        let clockless = [&c, &s]
            .iter()
            .any(|o| o.as_ref().is_some_and(|o| text(o).contains(NO_CLOCK)));
        if !clockless || attempt == 2 {
            return Ok((up, c, s));
        }
        attempt += 1;
        println!(
            "    (perftest could not calibrate its clock: run {} again)",
            prog.display()
        );
    }
}

/// A server and a client of one program (perftest or a pingpong), both reaching the device
/// `via`, the client connecting to 127.0.0.1 on `port`: both must exit 0 within `limit`.
/// Returns their output.
fn pair(
    t: &mut T,
    via: Via,
    prog: &Path,
    args: &[&str],
    port: u16,
    port_flag: &str,
    limit: Duration,
) -> Result<(String, String), Fail> {
    let p = port.to_string();
    let mut all: Vec<&str> = args.to_vec();
    all.extend([port_flag, &p]);
    let mut client_args = all.clone();
    client_args.push("127.0.0.1");
    let (up, c, s) = rerun_clockless(prog, || {
        let server = via.cmd(prog, &all)?.spawn()?;
        let up = system::wait_for(Duration::from_secs(10), || listening(port));
        let client = via.cmd(prog, &client_args)?.spawn()?;
        let c = wait_output(client, limit)?;
        Ok((up, c, wait_output(server, Duration::from_secs(10))?))
    })?;
    require!(t, up, "the server did not listen on port {port}");
    let (Some(c), Some(s)) = (c, s) else {
        bail!("{} {:?}: timed out after {limit:?}", prog.display(), args);
    };
    check!(t, c.status.success(), "client: {}", describe(&c));
    check!(t, s.status.success(), "server: {}", describe(&s));
    let (ct, st) = (text(&c), text(&s));
    print!("{ct}");
    Ok((ct, st))
}

/// The device is listed once, with its node GUID.
fn devices_lists_qhca(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let name = via.device(cfg)?;
    let out = via.run(&tool("ibv_devices")?, &[])?;
    check!(t, out.status.success(), "{}", describe(&out));
    let line = text(&out)
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .map(str::to_owned);
    require!(t, line.is_some(), "{name} not listed: {}", text(&out));
    // The node GUID, as ibv_get_device_guid gives it: 16 hex digits, not zero.
    let guid = line
        .unwrap_or_default()
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_owned();
    check!(
        t,
        guid.len() == 16 && u64::from_str_radix(&guid, 16).is_ok_and(|g| g != 0),
        "GUID {guid:?}"
    );
    // One line per device.
    let same = text(&out)
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(guid.as_str()))
        .count();
    check_eq!(t, same, 1, "devices with GUID {guid}: {}", text(&out));
    Ok(())
}

fn devinfo(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let name = via.device(cfg)?;
    let out = via.run(&tool("ibv_devinfo")?, &["-v", "-d", &name])?;
    check!(t, out.status.success(), "{}", describe(&out));
    let s = text(&out);
    for want in [
        format!("hca_id:\t{name}"),
        "state:\t\t\tPORT_ACTIVE (4)".into(),
        "active_mtu:\t\t4096 (5)".into(),
        "link_layer:\t\tEthernet".into(),
        "phys_port_cnt:\t\t\t1".into(),
        "GID[  0]:\t\tfe80:".into(),
    ] {
        check!(t, s.contains(&want), "no {want:?} in:\n{s}");
    }
    Ok(())
}

/// rxe on `lo` beside qhca: one list has both, and a program reaches rxe through the real
/// libibverbs (ibv_devinfo on rxe0).
fn rxe_beside_qhca(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let name = via.device(cfg)?;
    let rdma = tool("rdma")?;
    let modprobe = tool("modprobe")?;
    let out = system::run_tool(&modprobe, &[OsStr::new("rdma_rxe")])?;
    require!(
        t,
        out.status.success(),
        "modprobe rdma_rxe: {}",
        describe(&out)
    );
    let args = ["link", "add", "rxe0", "type", "rxe", "netdev", "lo"].map(OsStr::new);
    let out = system::run_tool(&rdma, &args)?;
    require!(t, out.status.success(), "rdma link add: {}", describe(&out));
    let res = (|| -> CaseResult {
        let listed = |s: &str, n: &str| s.lines().any(|l| l.split_whitespace().next() == Some(n));
        let devices = tool("ibv_devices")?;
        let mut s = String::new();
        let seen = system::wait_for(Duration::from_secs(5), || {
            s = via.run(&devices, &[]).map(|o| text(&o)).unwrap_or_default();
            listed(&s, "rxe0")
        });
        check!(t, seen, "rxe0 not listed: {s}");
        check!(t, listed(&s, &name), "{name} not listed beside rxe0: {s}");
        let out = via.run(&tool("ibv_devinfo")?, &["-d", "rxe0"])?;
        check!(t, out.status.success(), "{}", describe(&out));
        check!(t, text(&out).contains("hca_id:\trxe0"), "{}", text(&out));
        Ok(())
    })();
    let args = ["link", "delete", "rxe0"].map(OsStr::new);
    let out = system::run_tool(&rdma, &args)?;
    check!(
        t,
        out.status.success(),
        "rdma link delete: {}",
        describe(&out)
    );
    res
}

fn rc_pingpong(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let name = via.device(cfg)?;
    // -c: each side checks the received buffer; 4 KiB messages.
    let mut args = vec!["-d", &name, "-c", "-s", "4096", "-n", "500"];
    args.extend_from_slice(via.pingpong_args());
    let (c, s) = pair(
        t,
        via,
        &tool("ibv_rc_pingpong")?,
        &args,
        via.port(18600),
        "-p",
        Duration::from_secs(60),
    )?;
    for (who, out) in [("client", &c), ("server", &s)] {
        check!(t, out.contains("500 iters in"), "{who}: {out}");
    }
    Ok(())
}

fn rc_pingpong_events(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let name = via.device(cfg)?;
    // -e: completion channel and events; -g 0: addressed by GID.
    let args = ["-d", &name, "-e", "-g", "0", "-n", "200"];
    let (c, s) = pair(
        t,
        via,
        &tool("ibv_rc_pingpong")?,
        &args,
        via.port(18601),
        "-p",
        Duration::from_secs(60),
    )?;
    for (who, out) in [("client", &c), ("server", &s)] {
        check!(t, out.contains("200 iters in"), "{who}: {out}");
        check!(t, out.contains("GID fe80:"), "{who}: {out}");
    }
    Ok(())
}

/// Datagrams: Debian's `ibv_ud_pingpong` (each side checks the completions' count).
fn ud_pingpong(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let name = via.device(cfg)?;
    let args = ["-d", &name, "-g", "0", "-s", "1024", "-n", "200"];
    let (c, s) = pair(
        t,
        via,
        &tool("ibv_ud_pingpong")?,
        &args,
        via.port(18602),
        "-p",
        Duration::from_secs(60),
    )?;
    for (who, out) in [("client", &c), ("server", &s)] {
        check!(t, out.contains("200 iters in"), "{who}: {out}");
    }
    Ok(())
}

/// A shared receive queue: Debian's `ibv_srq_pingpong`, 16 RC QPs a side receiving from one SRQ
/// of 500 WQEs, each side checking the received buffers (`-c`) and counting the completions of
/// every QP.
fn srq_pingpong(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let name = via.device(cfg)?;
    let args = ["-d", &name, "-g", "0", "-c", "-s", "1024", "-n", "100"];
    let (c, s) = pair(
        t,
        via,
        &tool("ibv_srq_pingpong")?,
        &args,
        via.port(18603),
        "-p",
        Duration::from_secs(120),
    )?;
    for (who, out) in [("client", &c), ("server", &s)] {
        // Every QP's 100 exchanges: the loop ends only when each QP has its count.
        check!(t, out.contains("100 iters in"), "{who}: {out}");
    }
    Ok(())
}

fn check_battery(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let prog = beside_me("qhca-verbs-check")?;
    let name = via.device(cfg)?;
    let c = via.cmd(&prog, &["checks", &name])?.spawn()?;
    let Some(out) = wait_output(c, Duration::from_secs(120))? else {
        bail!("qhca-verbs-check checks: timed out");
    };
    let s = text(&out);
    print!("{s}");
    for l in s.lines().filter(|l| l.starts_with("FAIL ")) {
        check!(t, false, "{l}");
    }
    let last = s.lines().rfind(|l| l.starts_with("verbs-check: "));
    let counts = last.and_then(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        Some((
            w.get(1)?.parse::<u32>().ok()?,
            w.get(3)?.parse::<u32>().ok()?,
        ))
    });
    require!(t, counts.is_some(), "no closing line: {}", describe(&out));
    let (passed, failed) = counts.unwrap_or_default();
    check_eq!(t, failed, 0);
    check!(t, passed >= 10, "only {passed} checks ran");
    check!(t, out.status.success(), "{}", describe(&out));
    Ok(())
}

/// Operations of the C program's post/poll loop.
const NOSYS_OPS: &str = "10000";

/// The C program's loop of inline WRITE + poll, 10,000 times, under a seccomp filter that
/// kills it on any system call (or, on a kernel without seccomp filters, under strace, which
/// must see none between the loop's marker and the exit).
fn zero_syscalls(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let prog = beside_me("qhca-verbs-check")?;
    let name = via.device(cfg)?;
    let out = via.run(&prog, &["nosys", &name, NOSYS_OPS])?;
    let marker = format!("loop {NOSYS_OPS} ops");
    if out.status.code() == Some(15) {
        // No seccomp filters in this kernel: strace.
        let Some(strace) = system::find_tool("strace") else {
            bail!("neither seccomp filters nor strace are available to count system calls");
        };
        let log =
            std::env::temp_dir().join(format!("qhca-verbs-nosys-{}.strace", std::process::id()));
        let c2 = Command::new(strace)
            .arg("-f")
            .arg("-o")
            .arg(&log)
            .env_remove("LD_PRELOAD")
            .arg(&prog)
            .args(["nosys", &name, NOSYS_OPS, "--no-seccomp"])
            .stdin(Stdio::null())
            .output()?;
        let trace = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_file(&log);
        check!(t, c2.status.success(), "{}", describe(&c2));
        let lines: Vec<&str> = trace.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.contains(&format!("write(1, \"{marker}")));
        let end = start.and_then(|s| {
            lines[s..]
                .iter()
                .position(|l| l.contains("exit_group("))
                .map(|e| s + e)
        });
        require!(
            t,
            start.is_some() && end.is_some(),
            "no loop marker or exit in the trace"
        );
        let (s, e) = (start.unwrap_or(0), end.unwrap_or(0));
        let calls: Vec<&&str> = lines[s + 1..e]
            .iter()
            .filter(|l| !l.contains("+++") && !l.contains("---"))
            .collect();
        check_eq!(t, calls.len(), 0, "system calls in the loop: {calls:?}");
        return Ok(());
    }
    check!(
        t,
        !system::killed_by_signal(&out.status, Signal::SIGSYS),
        "the loop made a system call (killed by SIGSYS): {}",
        describe(&out)
    );
    check_eq!(t, out.status.code(), Some(0), "{}", describe(&out));
    check!(t, text(&out).contains(&marker), "{}", describe(&out));
    Ok(())
}

/// A perftest tool, server and client on qhca, with `args`: both finish and the client prints
/// a result row for `size`.
/// Atomics have their one size (8) and take no `-s`.
#[allow(clippy::too_many_arguments)]
fn perftest(
    t: &mut T,
    cfg: &Config,
    via: Via,
    prog: &str,
    args: &[&str],
    size: &str,
    port: u16,
) -> CaseResult {
    let name = via.device(cfg)?;
    let mut all = vec!["-d", name.as_str()];
    if !prog.starts_with("ib_atomic") {
        all.extend(["-s", size]);
    }
    all.extend_from_slice(args);
    all.extend_from_slice(via.perftest_args());
    let port = via.port(port);
    let (c, _) = pair(
        t,
        via,
        &tool(prog)?,
        &all,
        port,
        "-p",
        Duration::from_secs(120),
    )?;
    let row = c
        .lines()
        .any(|l| l.split_whitespace().next() == Some(size) && l.split_whitespace().count() >= 4);
    check!(t, row, "{prog}: no result row for {size} bytes in:\n{c}");
    check!(
        t,
        c.contains("Device         : ") && c.contains(&name),
        "{prog}: {c}"
    );
    Ok(())
}

fn perftest_write_lat(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    perftest(t, cfg, via, "ib_write_lat", &["-n", "2000"], "8", 18610)
}

fn perftest_write_bw(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    perftest(t, cfg, via, "ib_write_bw", &["-n", "2000"], "65536", 18611)
}

fn perftest_read_lat(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    perftest(t, cfg, via, "ib_read_lat", &["-n", "2000"], "8", 18612)
}

fn perftest_read_bw(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    perftest(t, cfg, via, "ib_read_bw", &["-n", "2000"], "65536", 18613)
}

fn perftest_send_lat(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    perftest(t, cfg, via, "ib_send_lat", &["-n", "2000"], "8", 18614)
}

fn perftest_send_bw(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    perftest(t, cfg, via, "ib_send_bw", &["-n", "2000"], "4096", 18615)
}

fn perftest_atomic_lat(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    perftest(t, cfg, via, "ib_atomic_lat", &["-n", "2000"], "8", 18616)
}

fn perftest_send_lat_ud(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    perftest(
        t,
        cfg,
        via,
        "ib_send_lat",
        &["-c", "UD", "-n", "2000"],
        "1024",
        18617,
    )
}

/// SENDs into a shared receive queue (`--use-srq`), latency and bandwidth.
fn perftest_send_lat_srq(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let args = ["--use-srq", "-n", "2000"];
    perftest(t, cfg, via, "ib_send_lat", &args, "8", 18618)
}

fn perftest_send_bw_srq(t: &mut T, cfg: &Config, via: Via) -> CaseResult {
    let args = ["--use-srq", "-n", "2000"];
    perftest(t, cfg, via, "ib_send_bw", &args, "4096", 18619)
}

/// A provider program killed (SIGKILL) while it holds a context, a PD, a region, a CQ and a QP
/// (`ibv_rc_pingpong`'s server, waiting for its client): the RDMA core destroys them through the
/// driver, so the device's objects and the user's charges go back to what they were, and
/// nothing is warned about (the suite's kernel-log check).
fn ibprov_kill9_frees_everything(t: &mut T, cfg: &Config) -> CaseResult {
    use crate::verbs::limits::held;
    use crate::verbs::process::device_object_counts;
    let via = Via;
    let name = via.device(cfg)?;
    let before = device_object_counts(cfg)?;
    let charged = |pools: &[&str]| -> Result<Vec<u32>, Fail> {
        pools.iter().map(|p| held(cfg, 0, p)).collect()
    };
    const POOLS: [&str; 5] = ["contexts", "pds", "mrs", "cqs", "qps"];
    let was = charged(&POOLS)?;
    let port = via.port(18603);
    let p = port.to_string();
    let args = ["-d", name.as_str(), "-g", "0", "-p", p.as_str()];
    let mut server = via.cmd(&tool("ibv_rc_pingpong")?, &args)?.spawn()?;
    let up = system::wait_for(Duration::from_secs(10), || listening(port));
    let during = device_object_counts(cfg)?;
    let charged_during = charged(&POOLS)?;
    let _ = server.kill();
    let _ = server.wait();
    require!(t, up, "ibv_rc_pingpong did not listen on {port}");
    for (i, ((what, n), (_, b))) in during.iter().zip(before.iter()).enumerate() {
        check!(t, n > b, "{what}: {n} while the server runs, {b} before");
        check!(
            t,
            charged_during[i] > was[i],
            "{} not charged to the user",
            POOLS[i]
        );
    }
    let back = system::wait_for(Duration::from_secs(10), || {
        device_object_counts(cfg).is_ok_and(|now| now == before)
    });
    let after = device_object_counts(cfg)?;
    check!(
        t,
        back,
        "device objects {after:?} after the kill, {before:?} before"
    );
    check_eq!(
        t,
        charged(&POOLS)?,
        was,
        "the user's charges after the kill"
    );
    Ok(())
}
