// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The guest around the device: configuration from the environment, sysfs, module tools, and
//! helper processes that hold contexts of their own.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use crate::harness::Fail;

/// What the suite is told about the VM it runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `QHCA_EXPECT_NUM_UARS`: the `num-uars` QEMU was started with.
    pub expect_num_uars: u32,
    /// `QHCA_KO`: the built module, for the reload case.
    pub ko: Option<PathBuf>,
    /// `QHCA_MODULE_NAME` (default `qhca`): the module's name for rmmod and /sys/module.
    pub module: String,
    /// The PCI driver's name in sysfs (`/sys/bus/pci/drivers/qhca`).
    pub driver: String,
    /// The device node under test: the RDMA core's uverbs node of the device, which each case
    /// gets from [`crate::verbs::uverbs::on_uverbs`] (empty before).
    pub dev: PathBuf,
}

impl Config {
    /// Reads the configuration from the process environment.
    pub fn from_env() -> Result<Config, String> {
        Self::from_vars(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Reads the configuration through `get` (for tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let uars = get("QHCA_EXPECT_NUM_UARS").ok_or(
            "QHCA_EXPECT_NUM_UARS is not set (the num-uars the VM's QEMU was started with)",
        )?;
        let expect_num_uars = match uars.trim().parse::<u32>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "QHCA_EXPECT_NUM_UARS={uars:?} is not a positive integer"
                ))
            }
        };
        Ok(Config {
            expect_num_uars,
            ko: get("QHCA_KO").filter(|s| !s.is_empty()).map(PathBuf::from),
            module: get("QHCA_MODULE_NAME")
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "qhca".into()),
            driver: "qhca".into(),
            dev: PathBuf::new(),
        })
    }

    /// `/sys/bus/pci/drivers/<driver>`.
    pub fn driver_dir(&self) -> PathBuf {
        Path::new("/sys/bus/pci/drivers").join(&self.driver)
    }

    /// `/sys/module/<module>`.
    pub fn module_dir(&self) -> PathBuf {
        Path::new("/sys/module").join(&self.module)
    }
}

/// Polls `cond` every 20 ms until it holds or `timeout` has passed; returns its last value.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An executable called `name` in `$PATH`, `/sbin` or `/usr/sbin`.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin", "/bin", "/usr/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Runs `tool args..` to completion, capturing its output.
pub fn run_tool(tool: &Path, args: &[&OsStr]) -> Result<Output, Fail> {
    Ok(Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .output()?)
}

/// Runs tool `prog` (found as [`find_tool`] finds it) with `args` to its end.
pub fn sh(prog: &str, args: &[&str]) -> Result<Output, Fail> {
    let Some(p) = find_tool(prog) else {
        return Err(Fail::new(file!(), line!(), format!("{prog} not found")));
    };
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    run_tool(&p, &args)
}

/// [`sh`], which must succeed.
pub fn sh_ok(prog: &str, args: &[&str]) -> Result<(), Fail> {
    let out = sh(prog, args)?;
    if !out.status.success() {
        return Err(Fail::new(
            file!(),
            line!(),
            format!("{prog} {}: {}", args.join(" "), describe(&out)),
        ));
    }
    Ok(())
}

/// `status, stdout and stderr` of a finished tool, for failure messages.
pub fn describe(out: &Output) -> String {
    format!(
        "{}; stdout: {:?}; stderr: {:?}",
        out.status,
        String::from_utf8_lossy(&out.stdout).trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

/// The PCI address of the device behind `cfg.dev`: from its uverbs class entry's `device` link
/// once the case has a node, else the one device bound to the driver.
pub fn pci_bdf(cfg: &Config) -> Result<String, String> {
    let class_dir = cfg
        .dev
        .file_name()
        .map(|n| Path::new(qhca::SYSFS_UVERBS_DIR).join(n));
    if let Some(target) = class_dir.and_then(|d| std::fs::read_link(d.join("device")).ok()) {
        if let Some(name) = target.file_name().and_then(OsStr::to_str) {
            if qhca::is_pci_addr(name) {
                return Ok(name.to_owned());
            }
        }
    }
    let dir = cfg.driver_dir();
    let entries =
        std::fs::read_dir(&dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let bound: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| qhca::is_pci_addr(n))
        .collect();
    match bound.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(format!("no PCI device is bound to {}", dir.display())),
        many => Err(format!(
            "several devices are bound to {}: {many:?}; cannot tell which is {}",
            dir.display(),
            cfg.dev.display()
        )),
    }
}

/// `/sys/module/<name>/refcnt`: how many references hold the module (absent when built in).
pub fn module_refcnt(cfg: &Config) -> Option<u64> {
    std::fs::read_to_string(cfg.module_dir().join("refcnt"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// True if the module is loaded (or built in).
pub fn module_loaded(cfg: &Config) -> bool {
    cfg.module_dir().exists()
}

/// The device, unbound from its driver until [`Unbound::rebind`] (or drop, as a best effort so
/// that a failing case leaves the driver bound for the cases after it).
pub struct Unbound<'a> {
    cfg: &'a Config,
    bdf: String,
    rebound: bool,
}

impl<'a> Unbound<'a> {
    /// `echo <bdf> > /sys/bus/pci/drivers/<driver>/unbind`.
    pub fn unbind(cfg: &'a Config, bdf: &str) -> Result<Self, Fail> {
        let path = cfg.driver_dir().join("unbind");
        std::fs::write(&path, bdf)
            .map_err(|e| Fail::new(file!(), line!(), format!("unbind {bdf}: {e}")))?;
        Ok(Unbound {
            cfg,
            bdf: bdf.to_owned(),
            rebound: false,
        })
    }

    fn bind(&self) -> std::io::Result<()> {
        std::fs::write(self.cfg.driver_dir().join("bind"), &self.bdf)
    }

    /// `echo <bdf> > /sys/bus/pci/drivers/<driver>/bind`.
    pub fn rebind(mut self) -> std::io::Result<()> {
        self.rebound = true;
        self.bind()
    }
}

impl Drop for Unbound<'_> {
    fn drop(&mut self) {
        if !self.rebound {
            let _ = self.bind();
        }
    }
}

/// A message of the `__hold` helper.
#[derive(Debug, PartialEq, Eq)]
pub enum HoldMsg {
    /// `uar_index N`: the helper holds a context with this doorbell page.
    UarIndex(u32),
    /// `mapped`: the helper mapped its doorbell page and rang it once.
    Mapped,
    /// `rang`: the helper rang its doorbell again, on request.
    Rang,
    /// `errno N TEXT`: opening, querying or mapping failed.
    Errno(Errno),
}

impl HoldMsg {
    /// The line the helper prints.
    pub fn line(&self) -> String {
        match self {
            HoldMsg::UarIndex(n) => format!("uar_index {n}"),
            HoldMsg::Mapped => "mapped".into(),
            HoldMsg::Rang => "rang".into(),
            HoldMsg::Errno(e) => format!("errno {} {}", *e as i32, e.desc()),
        }
    }

    /// Parses one line; `None` if it is none of the above.
    pub fn parse(line: &str) -> Option<HoldMsg> {
        let mut w = line.split_whitespace();
        match w.next()? {
            "uar_index" => Some(HoldMsg::UarIndex(w.next()?.parse().ok()?)),
            "mapped" => Some(HoldMsg::Mapped),
            "rang" => Some(HoldMsg::Rang),
            "errno" => Some(HoldMsg::Errno(Errno::from_raw(w.next()?.parse().ok()?))),
            _ => None,
        }
    }
}

/// A helper process (this binary, `__hold DEV [--map]`) holding a context on the device, so a case
/// can have contexts in processes other than its own. It lives until [`Holder::finish`] or drop
/// closes its stdin.
pub struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// The helper's doorbell page.
    pub uar_index: u32,
}

impl Holder {
    /// Starts a helper on `dev`; with `map` it also maps its doorbell page and rings it once.
    ///
    /// The outer error is a harness failure (cannot start, garbled answer); the inner one is the
    /// errno the helper got opening, querying or mapping the device.
    pub fn spawn(dev: &Path, map: bool) -> Result<Result<Holder, Errno>, Fail> {
        let exe = std::env::current_exe()?;
        let mut cmd = Command::new(exe);
        cmd.arg("__hold").arg(dev);
        if map {
            cmd.arg("--map");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| Fail::new(file!(), line!(), "no stdout pipe"))?,
        );
        let mut h = Holder {
            child,
            stdin,
            stdout,
            uar_index: 0,
        };
        match h.read_msg()? {
            Some(HoldMsg::UarIndex(n)) => h.uar_index = n,
            Some(HoldMsg::Errno(e)) => return Ok(Err(e)),
            other => {
                return Err(Fail::new(
                    file!(),
                    line!(),
                    format!("__hold helper said {other:?}"),
                ))
            }
        }
        if map {
            match h.read_msg()? {
                Some(HoldMsg::Mapped) => {}
                Some(HoldMsg::Errno(e)) => return Ok(Err(e)),
                other => {
                    return Err(Fail::new(
                        file!(),
                        line!(),
                        format!("__hold --map helper said {other:?}"),
                    ))
                }
            }
        }
        Ok(Ok(h))
    }

    /// The next message; `None` at end of file (the helper is gone).
    fn read_msg(&mut self) -> Result<Option<HoldMsg>, Fail> {
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        match HoldMsg::parse(&line) {
            Some(m) => Ok(Some(m)),
            None => Err(Fail::new(
                file!(),
                line!(),
                format!("__hold helper printed {line:?}"),
            )),
        }
    }

    /// Asks the helper to ring its doorbell again; true if it answered, false if it died first
    /// (see [`Holder::finish`] for how).
    pub fn ring(&mut self) -> Result<bool, Fail> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Ok(false);
        };
        if writeln!(stdin, "ring")
            .and_then(|()| stdin.flush())
            .is_err()
        {
            return Ok(false); // EPIPE: the helper is gone.
        }
        match self.read_msg()? {
            Some(HoldMsg::Rang) => Ok(true),
            None => Ok(false),
            other => Err(Fail::new(
                file!(),
                line!(),
                format!("__hold helper answered ring with {other:?}"),
            )),
        }
    }

    /// Closes the helper's stdin (it then closes its context and exits) and waits for it.
    pub fn finish(mut self) -> Result<ExitStatus, Fail> {
        self.stdin.take();
        Ok(self.child.wait()?)
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.wait();
    }
}

/// True if `status` is death by `sig`.
pub fn killed_by_signal(status: &ExitStatus, sig: nix::sys::signal::Signal) -> bool {
    status.signal() == Some(sig as i32)
}

/// The `__hold DEV [--map]` helper's main: see [`Holder`]. Returns the exit code.
pub fn hold_main(args: &[String]) -> i32 {
    let (dev, map) = match args {
        [dev] => (dev, false),
        [dev, flag] if flag == "--map" => (dev, true),
        _ => {
            eprintln!("usage: qhca-vmtest __hold DEVICE [--map]");
            return 2;
        }
    };
    let say = |m: HoldMsg| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", m.line());
        let _ = out.flush();
    };
    let fail = |e: qhca::Error| {
        say(HoldMsg::Errno(e.errno().unwrap_or(Errno::UnknownErrno)));
        eprintln!("qhca-vmtest __hold: {e}");
        1
    };
    let ctx = match qhca::Context::open(dev) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    match ctx.query() {
        Ok(a) => say(HoldMsg::UarIndex(a.uar_index)),
        Err(e) => return fail(e),
    }
    let word = qhca::DbWord::new(qhca::DbType::Sq, 0, 0).raw();
    let db = if map {
        match ctx.map_doorbell() {
            Ok(db) => {
                db.ring(word);
                say(HoldMsg::Mapped);
                Some(db)
            }
            Err(e) => return fail(e),
        }
    } else {
        None
    };
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "ring" {
            if let Some(db) = &db {
                db.ring(word);
            }
            say(HoldMsg::Rang);
        }
    }
    drop(db);
    drop(ctx);
    0
}

/// Capabilities the cases drop (linux/capability.h).
pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_NET_RAW: u32 = 13;
pub const CAP_IPC_LOCK: u32 = 14;

/// Drops capability `cap` (below 32) from the calling thread's effective set (capabilities are
/// per thread).
pub fn drop_cap(cap: u32) -> std::io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut hdr = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget writes two `struct __user_cap_data_struct` (version 3) at `data`, which
    // has room for them, and reads `hdr`; both live across the call.
    let r = unsafe { libc::syscall(libc::SYS_capget, &mut hdr as *mut Header, data.as_mut_ptr()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    data[0].effective &= !(1 << cap);
    // SAFETY: capset reads `hdr` and two data structs at `data`, all initialised and live; it
    // changes the calling thread's capabilities only.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut Header, data.as_ptr()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The device's debugfs directory (`/sys/kernel/debug/qhca/qhcaN`).
pub(crate) fn debugfs_dir(cfg: &Config) -> Result<PathBuf, Fail> {
    let dev = crate::verbs::uverbs::core_device(cfg)?;
    let dir = Path::new("/sys/kernel/debug/qhca").join(format!("qhca{}", dev.index));
    if !dir.is_dir() {
        crate::bail!(
            "{} ({}): no {}",
            dev.name,
            dev.path.display(),
            dir.display()
        );
    }
    Ok(dir)
}

/// The doorbell page of the driver's kernel context (debugfs `state`), if it has one: a page
/// no user context gets.
pub(crate) fn kernel_uar(cfg: &Config) -> Result<Option<u32>, Fail> {
    let state = std::fs::read_to_string(debugfs_dir(cfg)?.join("state"))?;
    Ok(state
        .lines()
        .find_map(|l| l.strip_prefix("kernel context: uar "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|u| u.parse().ok()))
}

/// The doorbell page a fresh driver (or one whose user contexts are all closed) hands a user
/// context first: the lowest one that is not the kernel context's.
pub(crate) fn first_user_uar(cfg: &Config) -> Result<u32, Fail> {
    let k = kernel_uar(cfg)?;
    Ok((0..).find(|&p| Some(p) != k).unwrap_or(0))
}

/// What the kernel's own consumers hold of the device (the driver's kernel context, which the
/// MAD layer's QP1 needs): its contexts (0 or 1), PDs, MRs, CQs and QPs, from debugfs `state`.
/// The device's counts include them.
pub(crate) fn kernel_share(cfg: &Config) -> Result<[u32; 5], Fail> {
    let state = std::fs::read_to_string(debugfs_dir(cfg)?.join("state"))?;
    let Some(line) = state.lines().find(|l| l.starts_with("kernel context:")) else {
        return Ok([0; 5]);
    };
    let w: Vec<&str> = line.split_whitespace().collect();
    let num = |key: &str| -> Result<u32, Fail> {
        match w.iter().position(|&x| x == key).and_then(|i| w.get(i + 1)) {
            Some(v) => Ok(v.parse::<u32>().unwrap_or(u32::MAX)),
            None => crate::bail!("no {key} in {line:?}"),
        }
    };
    Ok([1, num("pd")?, num("mr")?, num("cq")?, num("qp")?])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn config_from_env() {
        let c = Config::from_vars(vars(&[("QHCA_EXPECT_NUM_UARS", "24")])).unwrap();
        assert_eq!(c.expect_num_uars, 24);
        assert_eq!(c.ko, None);
        assert_eq!(c.module, "qhca");
        assert_eq!(c.driver_dir(), Path::new("/sys/bus/pci/drivers/qhca"));
        assert_eq!(c.module_dir(), Path::new("/sys/module/qhca"));
        assert_eq!(c.dev, Path::new(""));

        let c = Config::from_vars(vars(&[
            ("QHCA_EXPECT_NUM_UARS", " 8\n"),
            ("QHCA_KO", "/x/qhca.ko"),
            ("QHCA_MODULE_NAME", "qhca_test"),
        ]))
        .unwrap();
        assert_eq!(
            (c.expect_num_uars, c.ko.as_deref(), c.module.as_str()),
            (8, Some(Path::new("/x/qhca.ko")), "qhca_test")
        );

        assert!(Config::from_vars(vars(&[]))
            .unwrap_err()
            .contains("QHCA_EXPECT_NUM_UARS is not set"));
        for bad in ["", "0", "-1", "x", "4294967296"] {
            let e = Config::from_vars(vars(&[("QHCA_EXPECT_NUM_UARS", bad)])).unwrap_err();
            assert!(e.contains("not a positive integer"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn hold_messages_round_trip() {
        for m in [
            HoldMsg::UarIndex(0),
            HoldMsg::UarIndex(23),
            HoldMsg::Mapped,
            HoldMsg::Rang,
            HoldMsg::Errno(Errno::ENOSPC),
        ] {
            assert_eq!(HoldMsg::parse(&format!("{}\n", m.line())), Some(m));
        }
        assert_eq!(
            HoldMsg::Errno(Errno::ENOSPC).line(),
            "errno 28 No space left on device"
        );
        for bad in ["", "uar_index", "uar_index x", "hello", "errno"] {
            assert_eq!(HoldMsg::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn finds_tools_and_waits() {
        assert!(find_tool("sh").is_some());
        assert_eq!(find_tool("qhca-no-such-tool"), None);
        let out = run_tool(
            &find_tool("sh").unwrap(),
            &["-c".as_ref(), "echo hi; exit 3".as_ref()],
        )
        .unwrap();
        assert_eq!(out.status.code(), Some(3));
        assert!(describe(&out).contains("\"hi\""));
        assert!(wait_for(Duration::from_millis(1), || true));
        let mut n = 0;
        assert!(wait_for(Duration::from_secs(5), || {
            n += 1;
            n == 3
        }));
        assert!(!wait_for(Duration::from_millis(50), || false));
    }

    #[test]
    fn bdf_falls_back_to_the_driver_directory() {
        // Neither a class link nor a driver directory exists on the host.
        let c = Config {
            driver: "qhca-no-such-driver".into(),
            dev: "/dev/infiniband/uverbs-no-such-node".into(),
            ..Config::from_vars(vars(&[("QHCA_EXPECT_NUM_UARS", "1")])).unwrap()
        };
        assert!(pci_bdf(&c)
            .unwrap_err()
            .contains("cannot read /sys/bus/pci/drivers/qhca-no-such-driver"));
        assert!(!module_loaded(&Config {
            module: "qhca_no_such_module".into(),
            ..c.clone()
        }));
        assert_eq!(
            module_refcnt(&Config {
                module: "qhca_no_such_module".into(),
                ..c
            }),
            None
        );
    }
}
