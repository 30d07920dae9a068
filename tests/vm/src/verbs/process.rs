// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Processes: isolation between them, cleanup after kill -9, a data path without system calls,
//! and the helper processes the cases start.

use super::*;

/// A helper process of this binary speaking lines on stdin/stdout.
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Helper {
    fn spawn(args: &[&str]) -> Result<Helper, Fail> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| Fail::new(file!(), line!(), "no stdout"))?,
        );
        Ok(Helper {
            child,
            stdin,
            stdout,
        })
    }

    /// The next line, or a failure naming what was expected.
    fn line(&mut self, expect: &str) -> Result<String, Fail> {
        let mut s = String::new();
        if self.stdout.read_line(&mut s)? == 0 {
            let st = self.child.wait()?;
            bail!("helper ended ({st}) while we expected {expect:?}");
        }
        Ok(s.trim().to_owned())
    }

    fn say(&mut self, line: &str) -> Result<(), Fail> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Fail::new(file!(), line!(), "stdin closed"))?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    fn finish(mut self) -> Result<ExitStatus, Fail> {
        self.stdin.take();
        Ok(self.child.wait()?)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key value key value ...` → the value of `key`.
fn field(line: &str, key: &str) -> Option<u64> {
    let w: Vec<&str> = line.split_whitespace().collect();
    w.windows(2)
        .find(|p| p[0] == key)
        .and_then(|p| p[1].parse().ok())
}

/// Process A rings, on its own page, a doorbell naming process B's QP: the device drops it and
/// counts a violation for A; B sees nothing.
pub(super) fn verbs_doorbell_isolation(t: &mut T, cfg: &Config) -> CaseResult {
    let dev = cfg.dev.to_string_lossy().into_owned();
    let mut b = Helper::spawn(&["__verbs_peer", &dev])?;
    let hello = b.line("qpn N")?;
    let Some(b_qpn) = field(&hello, "qpn") else {
        bail!("helper said {hello:?}");
    };
    b.say("stats")?;
    let b_before = b.line("stats")?;

    let ctx = Arc::new(Context::open(&cfg.dev)?);
    // A has a QP of its own, so the only thing wrong with the doorbell is whose queue it names.
    let pd = Pd::new(&ctx)?;
    let cq = Cq::new(&ctx, 8, None)?;
    let _own = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let before = ctx.query_ctx()?;
    ctx.doorbell()?
        .ring(DbWord::new(DbType::Sq, b_qpn as u32, 5).raw());
    std::thread::sleep(QUIET);
    let after = ctx.query_ctx()?;
    check_eq!(
        t,
        after.db_violations,
        before.db_violations + 1,
        "A's violations"
    );
    check_eq!(
        t,
        after.db_accepted,
        before.db_accepted,
        "A's accepted doorbells"
    );

    b.say("stats")?;
    let b_after = b.line("stats")?;
    check_eq!(t, field(&b_after, "violations"), Some(0), "B: {b_after}");
    check_eq!(
        t,
        field(&b_after, "accepted"),
        field(&b_before, "accepted"),
        "B: {b_after}"
    );
    check_eq!(t, field(&b_after, "cqes"), Some(0), "B's CQ: {b_after}");
    check_eq!(
        t,
        field(&b_after, "state"),
        Some(u64::from(QpState::Rts.raw())),
        "B's QP: {b_after}"
    );
    let st = b.finish()?;
    check!(t, st.success(), "helper B exited with {st}");
    Ok(())
}

/// The driver's count of pinned user pages, over every context (debugfs).
pub(crate) const PINNED_PAGES: &str = "/sys/kernel/debug/qhca/pinned_pages";

/// The device's live-object registers, QHCA_REG_NUM_CTX .. QHCA_REG_NUM_QP, read from BAR0
/// through sysfs (`resource0`, mapped read-only; the registers are read-only and reading them has
/// no side effect).
pub(crate) fn device_object_counts(cfg: &Config) -> Result<[(&'static str, u32); 5], Fail> {
    let bdf = match system::pci_bdf(cfg) {
        Ok(bdf) => bdf,
        Err(e) => bail!("PCI address of the device: {e}"),
    };
    let f = std::fs::File::open(format!("/sys/bus/pci/devices/{bdf}/resource0"))?;
    let map = memmap2::MmapOptions::new()
        .len(qhca_uapi::QHCA_REGS_SIZE as usize)
        .map_raw_read_only(&f)?;
    let reg = |off: u32| {
        // SAFETY: `off` is a 4-byte aligned offset inside the 4 KiB mapping of BAR0, which lives
        // as long as `map`; a volatile load of a device register creates no reference.
        unsafe { core::ptr::read_volatile(map.as_ptr().add(off as usize).cast::<u32>()) }
    };
    let k = system::kernel_share(cfg)?;
    Ok([
        (
            "contexts",
            reg(qhca_uapi::QHCA_REG_NUM_CTX).wrapping_sub(k[0]),
        ),
        ("PDs", reg(qhca_uapi::QHCA_REG_NUM_PD).wrapping_sub(k[1])),
        ("MRs", reg(qhca_uapi::QHCA_REG_NUM_MR).wrapping_sub(k[2])),
        ("CQs", reg(qhca_uapi::QHCA_REG_NUM_CQ).wrapping_sub(k[3])),
        ("QPs", reg(qhca_uapi::QHCA_REG_NUM_QP).wrapping_sub(k[4])),
    ])
}

/// kill -9 in the middle of traffic: afterwards every object can be created again up to the
/// device's limits, and the doorbell page is free.
pub(super) fn verbs_kill9_frees_everything(t: &mut T, cfg: &Config) -> CaseResult {
    let dev = cfg.dev.to_string_lossy().into_owned();
    let mut h = Helper::spawn(&["__verbs_traffic", &dev])?;
    let first = h.line("running")?;
    require!(t, first == "running", "helper said {first:?}");
    std::thread::sleep(Duration::from_millis(200));
    kill(Pid::from_raw(h.child.id() as i32), Signal::SIGKILL)?;
    let st = h.child.wait()?;
    check!(
        t,
        system::killed_by_signal(&st, Signal::SIGKILL),
        "helper ended with {st}"
    );
    drop(h);

    // Nothing else in this process holds a context now: the device and the driver must be back
    // to zero objects and zero pinned pages.
    for (what, n) in device_object_counts(cfg)? {
        check_eq!(t, n, 0, "device {what} alive after kill -9");
    }
    let pinned = std::fs::read_to_string(PINNED_PAGES)?;
    check_eq!(t, pinned.trim(), "0", "{PINNED_PAGES} after kill -9");

    let first = system::first_user_uar(cfg)?;
    // What is left for user contexts: the device's pools, less what the kernel's consumers hold.
    let [_, kpd, kmr, kcq, kqp] = system::kernel_share(cfg)?;
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let mut a = ctx.query()?;
    check_eq!(
        t,
        a.uar_index,
        first,
        "the killed process's doorbell page is free again"
    );
    a.max_pd -= kpd;
    a.max_mr -= kmr;
    a.max_cq -= kcq;
    a.max_qp -= kqp;
    const MAX_EXERCISED: u32 = 1 << 14;
    for (what, n) in [
        ("PD", a.max_pd),
        ("CQ", a.max_cq),
        ("QP", a.max_qp),
        ("MR", a.max_mr),
    ] {
        require!(
            t,
            n > 0 && n <= MAX_EXERCISED,
            "{what} limit {n} (exercised up to {MAX_EXERCISED})"
        );
    }
    raise_nofile()?;
    let mut pds = Vec::new();
    for i in 0..a.max_pd {
        match Pd::new(&ctx) {
            Ok(p) => pds.push(p),
            Err(e) => bail!("PD {} of {}: {e}", i + 1, a.max_pd),
        }
    }
    check_errno!(
        t,
        Pd::new(&ctx),
        Errno::ENOSPC,
        "PD {} of {}",
        a.max_pd + 1,
        a.max_pd
    );
    let mut mrs = Vec::new();
    for i in 0..a.max_mr {
        match pds[0].reg_mr_buf(1, Access::NONE) {
            Ok(m) => mrs.push(m),
            Err(e) => bail!("MR {} of {}: {e}", i + 1, a.max_mr),
        }
    }
    check_errno!(
        t,
        pds[0].reg_mr_buf(1, Access::NONE),
        Errno::ENOSPC,
        "one MR too many"
    );
    drop(mrs);
    let mut cqs = Vec::new();
    for i in 0..a.max_cq {
        match Cq::new(&ctx, 2, None) {
            Ok(c) => cqs.push(c),
            Err(e) => bail!("CQ {} of {}: {e}", i + 1, a.max_cq),
        }
    }
    check_errno!(t, Cq::new(&ctx, 2, None), Errno::ENOSPC, "one CQ too many");
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_sge: 1,
        max_inline: 0,
    };
    let mut qps = Vec::new();
    for i in 0..a.max_qp {
        match Qp::new(&pds[0], &cqs[0], &cqs[0], &caps) {
            Ok(q) => qps.push(q),
            Err(e) => bail!("QP {} of {}: {e}", i + 1, a.max_qp),
        }
    }
    check_errno!(
        t,
        Qp::new(&pds[0], &cqs[0], &cqs[0], &caps),
        Errno::ENOSPC,
        "one QP too many"
    );
    Ok(())
}

/// Room for the file descriptors and mappings the limit test needs (each object is one ioctl,
/// no fd, but the process may be near its defaults).
fn raise_nofile() -> Result<(), Fail> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < 1024 {
        setrlimit(Resource::RLIMIT_NOFILE, 1024.min(hard), hard)?;
    }
    Ok(())
}

/// Operations of the no-syscall loop.
const NOSYS_OPS: u32 = 10_000;

/// Exit codes of `__verbs_nosys`.
pub(super) mod nosys_exit {
    pub const OK: i32 = 0;
    pub const SETUP: i32 = 10;
    pub const POST: i32 = 11;
    pub const WC_STATUS: i32 = 12;
    pub const STALL: i32 = 13;
    pub const DATA: i32 = 14;
    pub const SECCOMP: i32 = 15;
}

/// 10,000 post + poll operations in a helper under a seccomp filter that kills the process on
/// any system call: it must exit normally with code 0.
pub(super) fn verbs_zero_syscalls(t: &mut T, cfg: &Config) -> CaseResult {
    zero_syscalls(t, cfg, "__verbs_nosys")
}

/// Runs the no-syscall helper `cmd` (`__verbs_nosys` or another loop taking the same arguments)
/// for [`NOSYS_OPS`] operations under the seccomp filter (or strace): it must exit with 0.
pub(super) fn zero_syscalls(t: &mut T, cfg: &Config, cmd: &str) -> CaseResult {
    let dev = cfg.dev.to_string_lossy().into_owned();
    let ops = NOSYS_OPS.to_string();
    let out = Command::new(std::env::current_exe()?)
        .args([cmd, &dev, &ops])
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(nosys_exit::SECCOMP) {
        // The guest kernel has no seccomp filters: count with strace instead.
        return zero_syscalls_by_strace(t, &dev, cmd);
    }
    check!(
        t,
        !system::killed_by_signal(&out.status, Signal::SIGSYS),
        "the loop made a system call (killed by SIGSYS); stdout: {text}"
    );
    check_eq!(
        t,
        out.status.code(),
        Some(nosys_exit::OK),
        "exit status {}; stdout: {text}",
        out.status
    );
    check!(t, text.contains(&format!("loop {NOSYS_OPS} ops")), "{text}");
    Ok(())
}

/// The system calls a strace log shows after the line that prints the loop marker and before
/// `exit_group`: the loop's own. `None` if the marker or the exit is missing.
fn syscalls_in_loop(log: &str) -> Option<Vec<String>> {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines.iter().position(|l| l.contains("write(1, \"loop "))?;
    let end = start
        + lines[start..]
            .iter()
            .position(|l| l.contains("exit_group("))?;
    Some(
        lines[start + 1..end]
            .iter()
            .filter(|l| !l.contains("+++") && !l.contains("---"))
            .map(|l| (*l).to_owned())
            .collect(),
    )
}

/// The same loop without the filter, under `strace -f`: no system call between the marker and
/// the exit.
fn zero_syscalls_by_strace(t: &mut T, dev: &str, cmd: &str) -> CaseResult {
    let Some(strace) = system::find_tool("strace") else {
        bail!("neither seccomp filters nor strace are available to count system calls");
    };
    let log = std::env::temp_dir().join(format!("qhca-nosys-{}.strace", std::process::id()));
    let exe = std::env::current_exe()?;
    let ops = NOSYS_OPS.to_string();
    let out = Command::new(strace)
        .arg("-f")
        .arg("-o")
        .arg(&log)
        .arg(exe)
        .args([cmd, dev, &ops, "--no-seccomp"])
        .stdin(Stdio::null())
        .output()?;
    let text = std::fs::read_to_string(&log);
    let _ = std::fs::remove_file(&log);
    check_eq!(
        t,
        out.status.code(),
        Some(nosys_exit::OK),
        "{}",
        system::describe(&out)
    );
    match syscalls_in_loop(&text?) {
        Some(calls) => {
            check_eq!(t, calls.len(), 0, "system calls in the loop: {calls:?}");
        }
        None => {
            fail!(t, "strace log has no loop marker or no exit_group");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Helper processes
// ---------------------------------------------------------------------------------------------

/// `qhca-vmtest __verbs_peer DEV | __verbs_traffic DEV | __verbs_nosys DEV N`.
pub fn helper_main(cmd: &str, args: &[String]) -> i32 {
    let [dev] = args else {
        match (args, cmd) {
            ([dev, n], "__verbs_nosys") => {
                return nosys_main(Path::new(dev), n.parse().unwrap_or(NOSYS_OPS), true)
            }
            ([dev, n, flag], "__verbs_nosys") if flag == "--no-seccomp" => {
                return nosys_main(Path::new(dev), n.parse().unwrap_or(NOSYS_OPS), false)
            }
            ([dev, n, rest @ ..], "__verbs_nosys_mw") if rest.len() <= 1 => {
                let seccomp = match rest {
                    [] => true,
                    [flag] if flag == "--no-seccomp" => false,
                    _ => return 2,
                };
                let ops = n.parse().unwrap_or(NOSYS_OPS);
                return super::mw::nosys_mw_main(Path::new(dev), ops, seccomp);
            }
            _ => {}
        }
        eprintln!("usage: qhca-vmtest {cmd} DEVICE");
        return 2;
    };
    let r = match cmd {
        "__verbs_peer" => peer_main(Path::new(dev)),
        "__verbs_traffic" => traffic_main(Path::new(dev)),
        "__verbs_odp_fault" => super::odp_changes::odp_fault_main(Path::new(dev)),
        "__verbs_limits" => super::limits::limits_main(Path::new(dev)),
        "__verbs_rcache" => super::rcache::rcache_churn_main(Path::new(dev)),
        _ => Err(qhca::Error::Invalid {
            what: format!("unknown helper {cmd}"),
        }),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("qhca-vmtest {cmd}: {e}");
            1
        }
    }
}

pub(super) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A QP of its own in RTS (looped to itself); prints `qpn N`, then on each `stats` line prints
/// `stats accepted A violations V cqes C state S`.
fn peer_main(dev: &Path) -> qhca::Result<()> {
    let ctx = Arc::new(Context::open(dev)?);
    let pd = Pd::new(&ctx)?;
    let mut cq = Cq::new(&ctx, 16, None)?;
    let peer_cq = Cq::new(&ctx, 16, None)?;
    let qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let peer = Qp::new(&pd, &peer_cq, &peer_cq, &QpCaps::default())?;
    connect(&qp, 7, peer.qpn(), 8, &ConnOpts::default())?;
    connect(&peer, 8, qp.qpn(), 7, &ConnOpts::default())?;
    say(&format!("qpn {}", qp.qpn()));
    let mut cqes = 0;
    let mut wc = [Wc::default(); 16];
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "stats" {
            cqes += cq.poll(&mut wc);
            let s = ctx.query_ctx()?;
            let state = qp.query()?.state.raw();
            say(&format!(
                "stats accepted {} violations {} cqes {cqes} state {state}",
                s.db_accepted, s.db_violations
            ));
        }
    }
    Ok(())
}

/// Two QPs writing to each other as fast as they can; prints `running` after the first
/// completion and never stops (it is killed).
fn traffic_main(dev: &Path) -> qhca::Result<()> {
    let ctx = Arc::new(Context::open(dev)?);
    let pd = Pd::new(&ctx)?;
    let o = PairOpts::default();
    let mut cq_a = Cq::new(&ctx, 256, None)?;
    let cq_b = Cq::new(&ctx, 256, None)?;
    let mut a = Qp::new(&pd, &cq_a, &cq_a, &o.caps)?;
    let b = Qp::new(&pd, &cq_b, &cq_b, &o.caps)?;
    connect(&a, PSN_A, b.qpn(), PSN_B, &o.conn)?;
    connect(&b, PSN_B, a.qpn(), PSN_A, &o.conn)?;
    let mr = pd.reg_mr_buf(1 << 16, Access::ALL)?;
    let op = WrOp::Write {
        raddr: mr.addr() + (1 << 15),
        rkey: mr.rkey(),
    };
    let sge = [mr.sge(0, 1 << 15)];
    let mut said = false;
    let mut wc = [Wc::default(); 16];
    loop {
        while a.post_send(&[SendWr::new(0, op, &sge)]).is_ok() {}
        let n = cq_a.poll(&mut wc);
        if n > 0 && !said {
            say("running");
            said = true;
        }
    }
}

/// The no-syscall loop: setup, then seccomp, then `ops` × (post one inline WRITE + poll its
/// completion), checking the written value; exits with a [`nosys_exit`] code.
fn nosys_main(dev: &Path, ops: u32, seccomp: bool) -> i32 {
    let setup = || -> qhca::Result<_> {
        let ctx = Arc::new(Context::open(dev)?);
        let pd = Pd::new(&ctx)?;
        let o = PairOpts::default();
        let cq = Cq::new(&ctx, 256, None)?;
        let peer_cq = Cq::new(&ctx, 16, None)?;
        let qp = Qp::new(&pd, &cq, &cq, &o.caps)?;
        let peer = Qp::new(&pd, &peer_cq, &peer_cq, &o.caps)?;
        connect(&qp, PSN_A, peer.qpn(), PSN_B, &o.conn)?;
        connect(&peer, PSN_B, qp.qpn(), PSN_A, &o.conn)?;
        let mr = pd.reg_mr_buf(4096, Access::ALL)?;
        Ok((ctx, pd, cq, peer_cq, qp, peer, mr))
    };
    let Ok((_ctx, _pd, mut cq, _peer_cq, mut qp, _peer, mr)) = setup() else {
        return nosys_exit::SETUP;
    };
    // Everything that could allocate or call into the kernel happens before the filter: the
    // doorbell is mapped (at create), the output buffer is ours.
    let mut wc = [Wc::default(); 4];
    let op = WrOp::Write {
        raddr: mr.addr() + 64,
        rkey: mr.rkey(),
    };
    say(&format!("loop {ops} ops"));
    if seccomp && crate::sys::forbid_syscalls().is_err() {
        return nosys_exit::SECCOMP;
    }
    for i in 0..u64::from(ops) {
        let v = i.to_le_bytes();
        if qp.post_send(&[SendWr::inline(i, op, &v)]).is_err() {
            crate::sys::exit_now(nosys_exit::POST);
        }
        nosys_wait(&mut cq, &mut wc, i);
        if mr.read_u64(64) != i {
            crate::sys::exit_now(nosys_exit::DATA);
        }
    }
    crate::sys::exit_now(nosys_exit::OK)
}

/// The no-syscall loops' wait: spins on `cq` (with `wc` as the poll buffer, allocated before the
/// filter) until one completion arrives; exits the process unless it is `id`'s and successful, or
/// if none comes within 2^31 polls.
pub(super) fn nosys_wait(cq: &mut Cq, wc: &mut [Wc], id: u64) {
    let mut spins = 0u64;
    loop {
        if cq.poll(wc) == 1 {
            if wc[0].status != WcStatus::Success || wc[0].wr_id != id {
                crate::sys::exit_now(nosys_exit::WC_STATUS);
            }
            return;
        }
        spins += 1;
        if spins > 2_000_000_000 {
            crate::sys::exit_now(nosys_exit::STALL);
        }
        std::hint::spin_loop();
    }
}

/// Where `cargo build --release --examples` put the provider's example `name`: next to this
/// binary, in `examples/`.
fn example(name: &str) -> Result<std::path::PathBuf, Fail> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| Fail::new(file!(), line!(), "the suite's binary has no directory"))?;
    let path = dir.join("examples").join(name);
    if !path.is_file() {
        bail!(
            "{} is not built (scripts/build-all.sh builds it: cargo build --release --examples)",
            path.display()
        );
    }
    Ok(path)
}

/// Waits up to `limit` for `child` to exit, killing it after that; returns its status and
/// whether it had to be killed.
fn wait_or_kill(child: &mut Child, limit: Duration) -> Result<(ExitStatus, bool), Fail> {
    let end = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok((st, false));
        }
        if Instant::now() > end {
            let _ = child.kill();
            return Ok((child.wait()?, true));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The provider's two-process example (`provider/examples/rc_write_imm.rs`) runs end to end
/// in the guest: the server reports the client's WRITE_WITH_IMM (its bytes, immediate and
/// source QP), the client reads back the server's answer, and both exit 0.
pub(super) fn verbs_example_two_process(t: &mut T, cfg: &Config) -> CaseResult {
    let exe = example("rc_write_imm")?;
    // By the RDMA core's name, as `ibv_devices` lists it.
    let dev = super::uverbs::core_device(cfg)?.name;
    let port = (20000 + std::process::id() % 20000).to_string();
    let mut server = Command::new(&exe)
        .args(["server", "-p", &port, "-d", &dev])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut out = BufReader::new(
        server
            .stdout
            .take()
            .ok_or_else(|| Fail::new(file!(), line!(), "no stdout"))?,
    );
    let mut first = String::new();
    out.read_line(&mut first)?;
    if first.trim() != format!("listening on port {port}") {
        let _ = server.kill();
        let _ = server.wait();
        let mut err = String::new();
        if let Some(mut e) = server.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        bail!("server said {first:?}, and on stderr {err:?}");
    }
    let client = Command::new(&exe)
        .args(["client", "127.0.0.1", "-p", &port, "-d", &dev])
        .stdin(Stdio::null())
        .output()?;
    let (st, killed) = wait_or_kill(&mut server, WC_TIMEOUT)?;
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest)?;
    let mut err = String::new();
    if let Some(mut e) = server.stderr.take() {
        std::io::Read::read_to_string(&mut e, &mut err)?;
    }
    let ctext = String::from_utf8_lossy(&client.stdout);
    check!(
        t,
        client.status.success(),
        "client: {}",
        system::describe(&client)
    );
    check!(t, !killed && st.success(), "server: {st}; {rest}{err}");
    check!(
        t,
        rest.contains("server: 44 bytes with imm 0x1234abcd from QP")
            && rest.contains("hello over qhca, written with immediate data"),
        "server output: {rest}"
    );
    check!(
        t,
        ctext.contains("client: read back: HELLO OVER QHCA, WRITTEN WITH IMMEDIATE DATA"),
        "client output: {ctext}"
    );
    check!(
        t,
        ctext.contains("client: done") && rest.contains("server: done")
    );
    Ok(())
}

/// How long a provider call may take to notice that its device went away.
const NOTICE: Duration = Duration::from_secs(10);

/// The device is unbound under a context in use: a thread blocked in `Cq::wait(None)` wakes
/// with `Disassociated` (it used to return "signalled" and then block for ever), the context
/// gets `DeviceFatal` and then fails waits at once, posts fail without touching the queue,
/// `poll_wait` stops spinning within milliseconds, ioctls fail with ENODEV, everything drops
/// cleanly, and a new context works once the device is bound again.
pub(super) fn verbs_disassociated_context_fails_fast(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = match system::pci_bdf(cfg) {
        Ok(bdf) => bdf,
        Err(e) => bail!("PCI address of the device: {e}"),
    };
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let o = PairOpts::default();
    let waited = Cq::new(&ctx, 16, Some(qhca::eventfd()?))?;
    let mut cq = Cq::new(&ctx, 16, None)?;
    let peer_cq = Cq::new(&ctx, 16, None)?;
    let mut a = Qp::new(&pd, &cq, &cq, &o.caps)?;
    let b = Qp::new(&pd, &peer_cq, &peer_cq, &o.caps)?;
    connect(&a, PSN_A, b.qpn(), PSN_B, &o.conn)?;
    connect(&b, PSN_B, a.qpn(), PSN_A, &o.conn)?;
    let mr = pd.reg_mr_buf(4096, Access::ALL)?;
    waited.arm();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Wake-ups without an error (a signalled eventfd) are allowed; only an error ends it.
        let mut wakeups = 0u32;
        let r = loop {
            match waited.wait(None) {
                Ok(_) => wakeups += 1,
                Err(e) => break e,
            }
        };
        let _ = tx.send((r.to_string(), r.errno(), wakeups));
        drop(waited);
    });
    std::thread::sleep(QUIET);

    let unbound = system::Unbound::unbind(cfg, &bdf)?;
    match rx.recv_timeout(NOTICE) {
        Ok((text, errno, wakeups)) => {
            check_eq!(
                t,
                errno,
                Some(Errno::ENODEV),
                "Cq::wait after unbind: {text} (after {wakeups} wake-ups)"
            );
            check!(t, text.contains("disassociated"), "{text}");
        }
        Err(_) => {
            fail!(t, "Cq::wait(None) still blocked {NOTICE:?} after unbind");
        }
    }
    let ev = ctx.wait_async_event(Some(NOTICE));
    check!(
        t,
        matches!(ev, Ok(Some(AsyncEvent::DeviceFatal))),
        "first async event: {ev:?}"
    );
    check!(t, ctx.is_dead());
    let start = Instant::now();
    let again = ctx.wait_async_event(None);
    check!(
        t,
        matches!(again, Err(qhca::Error::Disassociated { .. })) && start.elapsed() < NOTICE,
        "a second wait: {again:?} after {:?}",
        start.elapsed()
    );
    let r = a.post_send(&[SendWr::inline(1, WrOp::Send, b"x")]);
    check!(
        t,
        matches!(r, Err(e) if e.reason == PostReason::Disassociated),
        "post after unbind: {r:?}"
    );
    check_eq!(t, a.send_outstanding(), 0, "nothing was queued");
    let mut wc = [Wc::default(); 4];
    let start = Instant::now();
    let r = cq.poll_wait(&mut wc, None);
    check!(
        t,
        matches!(r, Err(qhca::Error::Disassociated { .. })) && start.elapsed() < NOTICE,
        "poll_wait without a timeout: {r:?} after {:?}",
        start.elapsed()
    );
    check_errno!(t, a.query(), Errno::ENODEV, "ioctl after unbind");
    check!(t, mr.to_vec(0, 4).len() == 4, "our memory is still ours");
    drop((a, b, cq, peer_cq, mr, pd, ctx));

    unbound.rebind()?;
    check!(
        t,
        system::wait_for(NOTICE, || Context::open(&cfg.dev).is_ok()),
        "no context opens after rebind"
    );
    let ctx = Context::open(&cfg.dev)?;
    check!(t, !ctx.is_dead());
    check_eq!(
        t,
        ctx.get_async_event()?,
        None,
        "a new context starts clean"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_fields() {
        assert_ne!(pattern(1, 300), pattern(2, 300));
        let p = pattern(3, 600);
        assert_ne!(p[0..256], p[256..512], "no period of 256");
        assert_eq!(
            field("stats accepted 3 violations 0 cqes 0 state 3", "accepted"),
            Some(3)
        );
        assert_eq!(field("qpn 17", "qpn"), Some(17));
        assert_eq!(field("qpn x", "qpn"), None);
        assert_eq!(field("nothing", "qpn"), None);
    }

    #[test]
    fn names_are_prefixed_and_unique() {
        let names: Vec<_> = cases().iter().map(|c| c.name).collect();
        // The cases again on the uverbs node: `uverbs_` and the case's own name.
        assert!(names
            .iter()
            .all(|n| n.strip_prefix("uverbs_").unwrap_or(n).starts_with("verbs_")));
        let set: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(set.len(), names.len());
    }

    #[test]
    fn counts_the_syscalls_between_marker_and_exit() {
        let log = "10 openat(AT_FDCWD, \"/dev/qhca0\", O_RDWR) = 3\n\
                   10 write(1, \"loop 10000 ops\\n\", 15) = 15\n\
                   10 --- SIGCHLD {si_signo=SIGCHLD} ---\n\
                   10 exit_group(0) = ?\n\
                   10 +++ exited with 0 +++\n";
        assert_eq!(syscalls_in_loop(log), Some(vec![]));
        let bad = log.replace("--- SIGCHLD", "getpid() = 10\n10 --- SIGCHLD");
        assert_eq!(syscalls_in_loop(&bad).map(|v| v.len()), Some(1));
        assert_eq!(syscalls_in_loop("exit_group(0)"), None);
        assert_eq!(
            syscalls_in_loop("10 write(1, \"loop 1 ops\\n\", 11) = 11\n"),
            None
        );
    }

    #[test]
    fn nosys_loop_is_syscall_free_on_the_host_too_until_it_needs_a_device() {
        // Without a device the helper stops at setup; with --no-seccomp it takes the other path.
        assert_eq!(
            helper_main("__verbs_nosys", &["/nonexistent".into(), "5".into()]),
            nosys_exit::SETUP
        );
        let a = ["/nonexistent".into(), "5".into(), "--no-seccomp".into()];
        assert_eq!(helper_main("__verbs_nosys", &a), nosys_exit::SETUP);
    }

    #[test]
    fn helper_usage() {
        assert_eq!(helper_main("__verbs_peer", &[]), 2);
        assert_eq!(helper_main("__verbs_bogus", &["/dev/null".into()]), 1);
        assert_eq!(
            helper_main("__verbs_peer", &["/nonexistent/qhca0".into()]),
            1
        );
    }
}
