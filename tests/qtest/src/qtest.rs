// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A QEMU process driven through the qtest text protocol (QEMU's `system/qtest.c`).
//!
//! QEMU runs with `-accel qtest -qtest stdio`: no guest code executes, and every line we write
//! on its stdin is one command (`readl ADDR`, `writel ADDR VAL`, `read ADDR LEN`,
//! `write ADDR LEN 0xHEX`, `outl PORT VAL`, `inl PORT`, `clock_step NS`, ...). Each command
//! gets exactly one reply line, `OK [value]`, `FAIL reason` or `ERR reason`. Asynchronous
//! `IRQ raise N` / `IRQ lower N` lines (only sent after `irq_intercept_*`) are skipped.
//!
//! A QEMU that dies (EOF on its stdout, a broken stdin) or stops answering (no reply within
//! [`REPLY_TIMEOUT`]) is a test failure: the panic message carries the exit status, QEMU's
//! stderr and the last commands sent, which is what one needs to turn it into a regression.
//! QEMU is killed on drop.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long one command may take to be answered. QEMU answers in microseconds; this only
/// turns a hang (a device stuck in a loop, a deadlock) into a failure instead of a stuck test.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long QEMU may take to exit by itself (realize errors).
pub const EXIT_TIMEOUT: Duration = Duration::from_secs(20);

/// How many recent commands a failure message shows.
const HISTORY: usize = 40;

/// The QEMU binary under test, from `$QHCA_QEMU`.
///
/// # Panics
///
/// If the variable is unset: these tests need our own QEMU build.
pub fn qemu_binary() -> PathBuf {
    match std::env::var_os("QHCA_QEMU") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => panic!("set QHCA_QEMU (scripts/test.sh does) to the qemu-system-x86_64 built with the qhca device"),
    }
}

/// The arguments every test QEMU gets: a q35 machine with nothing on it but what the test adds,
/// the qtest accelerator, the protocol on stdio and its log off (it would flood stderr).
/// `$QHCA_QTEST_ARGS` (split on whitespace) is appended, e.g. `-d guest_errors` or
/// `-trace qhca_*` when debugging a failure.
pub fn base_args() -> Vec<String> {
    let mut args: Vec<String> = [
        "-M",
        "q35",
        "-accel",
        "qtest",
        "-nodefaults",
        "-display",
        "none",
        "-m",
        "128M",
        "-L",
        "/usr/share/qemu",
        "-L",
        "/usr/share/seabios",
        "-qtest",
        "stdio",
        "-qtest-log",
        "/dev/null",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Ok(extra) = std::env::var("QHCA_QTEST_ARGS") {
        args.extend(extra.split_whitespace().map(str::to_string));
    }
    args
}

/// Collects a child's stderr in the background.
fn collect(mut r: impl Read + Send + 'static) -> Arc<Mutex<Vec<u8>>> {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let b = Arc::clone(&buf);
    thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        loop {
            match r.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => b.lock().unwrap().extend_from_slice(&chunk[..n]),
            }
        }
    });
    buf
}

/// What became of a QEMU that was expected to exit by itself.
#[derive(Debug)]
pub struct Exited {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs QEMU with `base_args()` plus `extra` and waits for it to exit by itself (a realize error),
/// with stdin closed. Returns `Err` with what QEMU printed if it was still running after
/// [`EXIT_TIMEOUT`] (it is killed then).
pub fn run_to_exit(extra: &[&str]) -> Result<Exited, String> {
    let mut child = Command::new(qemu_binary())
        .args(base_args())
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", qemu_binary().display()));
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waitpid") {
            // The collectors finish at EOF right after exit; give them a moment.
            thread::sleep(Duration::from_millis(50));
            let stdout = String::from_utf8_lossy(&out.lock().unwrap()).into_owned();
            let stderr = String::from_utf8_lossy(&err.lock().unwrap()).into_owned();
            return Ok(Exited {
                status,
                stdout,
                stderr,
            });
        }
        if t0.elapsed() > EXIT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "QEMU still running after {EXIT_TIMEOUT:?}; stderr:\n{}",
                String::from_utf8_lossy(&err.lock().unwrap())
            ));
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// One QEMU process under qtest control.
pub struct Qtest {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Reply lines from QEMU's stdout; disconnected at EOF.
    lines: Receiver<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The last commands sent (with their replies), for failure messages.
    history: VecDeque<String>,
    /// Print every command and reply on our stderr (`QHCA_QTEST_LOG=1`).
    verbose: bool,
    /// Every command line, appended to `$QHCA_QTEST_TRACE_FILE` when set: the full raw
    /// sequence behind a failure, ready to be minimised into a regression.
    trace: Option<std::fs::File>,
    /// Commands sent so far.
    pub sent: u64,
    args: Vec<String>,
}

impl Qtest {
    /// Starts QEMU with [`base_args`] plus `extra` and checks that it answers.
    ///
    /// # Panics
    ///
    /// If QEMU cannot be started or exits before answering (e.g. a realize error).
    pub fn start(extra: &[&str]) -> Qtest {
        let mut args = base_args();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut child = Command::new(qemu_binary())
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", qemu_binary().display()));
        let stdout = child.stdout.take().unwrap();
        let stderr = collect(child.stderr.take().unwrap());
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if tx.send(line.trim_end().to_string()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        let mut qt = Qtest {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            history: VecDeque::new(),
            verbose: std::env::var_os("QHCA_QTEST_LOG").is_some_and(|v| v != "0"),
            trace: std::env::var_os("QHCA_QTEST_TRACE_FILE").map(|p| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&p)
                    .expect("QHCA_QTEST_TRACE_FILE")
            }),
            sent: 0,
            args,
        };
        if let Some(t) = qt.trace.as_mut() {
            let _ = writeln!(t, "# {} {}", qemu_binary().display(), qt.args.join(" "));
        }
        let e = qt.cmd("endianness");
        assert_eq!(e, "little", "qtest endianness reply");
        qt
    }

    /// QEMU's stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// QEMU's stderr after it exited: the reader thread may still be draining the pipe, so
    /// wait (at most 1 s) until the text stops growing.
    pub fn final_stderr(&self) -> String {
        let t0 = Instant::now();
        let mut last = usize::MAX;
        loop {
            let n = self.stderr.lock().unwrap().len();
            if (n == last && n > 0) || t0.elapsed() > Duration::from_secs(1) {
                return self.stderr();
            }
            last = n;
            thread::sleep(Duration::from_millis(30));
        }
    }

    /// Fails the test with everything known about QEMU's state.
    fn die(&mut self, what: &str) -> ! {
        // Give a dying QEMU a moment to finish exiting and writing its last words.
        let t0 = Instant::now();
        let mut status = None;
        while t0.elapsed() < Duration::from_secs(2) {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            thread::sleep(Duration::from_millis(20));
        }
        thread::sleep(Duration::from_millis(50));
        let mut msg = format!("qtest: {what}\n");
        match status {
            Some(s) => writeln!(msg, "QEMU exited: {s}").unwrap(),
            None => writeln!(msg, "QEMU is still running (hung?)").unwrap(),
        }
        writeln!(msg, "command line: {}", self.args.join(" ")).unwrap();
        writeln!(msg, "last {} commands (oldest first):", self.history.len()).unwrap();
        for h in &self.history {
            writeln!(msg, "  {h}").unwrap();
        }
        writeln!(msg, "QEMU stderr:\n{}", self.stderr()).unwrap();
        panic!("{msg}");
    }

    /// Sends one raw command line and returns the raw reply line, or an error when QEMU is
    /// gone or silent. Nothing is interpreted; `IRQ` lines are skipped.
    pub fn raw(&mut self, line: &str) -> Result<String, String> {
        debug_assert!(!line.contains('\n'));
        self.sent += 1;
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(line.chars().take(200).collect());
        if let Some(t) = self.trace.as_mut() {
            let _ = writeln!(t, "{line}");
        }
        let Some(stdin) = self.stdin.as_mut() else {
            return Err("qtest channel closed".into());
        };
        if let Err(e) = stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|_| stdin.flush())
        {
            return Err(format!("cannot send to QEMU: {e}"));
        }
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(reply) if reply.starts_with("IRQ ") => continue,
                Ok(reply) => {
                    if self.verbose {
                        eprintln!("qtest> {line}\nqtest< {reply}");
                    }
                    if let Some(h) = self.history.back_mut() {
                        let short: String = reply.chars().take(80).collect();
                        write!(h, "  -> {short}").unwrap();
                    }
                    return Ok(reply);
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!("no reply to `{line}` within {REPLY_TIMEOUT:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!("QEMU closed the qtest channel (died?) on `{line}`"))
                }
            }
        }
    }

    /// Sends one command and returns what follows `OK` (trimmed). Any other reply, a dead or
    /// a silent QEMU fails the test.
    pub fn cmd(&mut self, line: &str) -> String {
        match self.raw(line) {
            Ok(reply) => {
                if reply == "OK" {
                    String::new()
                } else if let Some(rest) = reply.strip_prefix("OK ") {
                    rest.trim().to_string()
                } else {
                    self.die(&format!("`{line}` answered `{reply}`"))
                }
            }
            Err(e) => self.die(&e),
        }
    }

    fn cmd_hex(&mut self, line: &str) -> u64 {
        let r = self.cmd(line);
        let h = r.strip_prefix("0x").unwrap_or(&r);
        u64::from_str_radix(h, 16)
            .unwrap_or_else(|_| self.die(&format!("`{line}`: bad value `{r}`")))
    }

    pub fn readb(&mut self, addr: u64) -> u8 {
        self.cmd_hex(&format!("readb {addr:#x}")) as u8
    }
    pub fn readw(&mut self, addr: u64) -> u16 {
        self.cmd_hex(&format!("readw {addr:#x}")) as u16
    }
    pub fn readl(&mut self, addr: u64) -> u32 {
        self.cmd_hex(&format!("readl {addr:#x}")) as u32
    }
    pub fn readq(&mut self, addr: u64) -> u64 {
        self.cmd_hex(&format!("readq {addr:#x}"))
    }
    pub fn writeb(&mut self, addr: u64, v: u8) {
        self.cmd(&format!("writeb {addr:#x} {v:#x}"));
    }
    pub fn writew(&mut self, addr: u64, v: u16) {
        self.cmd(&format!("writew {addr:#x} {v:#x}"));
    }
    pub fn writel(&mut self, addr: u64, v: u32) {
        self.cmd(&format!("writel {addr:#x} {v:#x}"));
    }
    pub fn writeq(&mut self, addr: u64, v: u64) {
        self.cmd(&format!("writeq {addr:#x} {v:#x}"));
    }
    pub fn inb(&mut self, port: u16) -> u8 {
        self.cmd_hex(&format!("inb {port:#x}")) as u8
    }
    pub fn inw(&mut self, port: u16) -> u16 {
        self.cmd_hex(&format!("inw {port:#x}")) as u16
    }
    pub fn inl(&mut self, port: u16) -> u32 {
        self.cmd_hex(&format!("inl {port:#x}")) as u32
    }
    pub fn outb(&mut self, port: u16, v: u8) {
        self.cmd(&format!("outb {port:#x} {v:#x}"));
    }
    pub fn outw(&mut self, port: u16, v: u16) {
        self.cmd(&format!("outw {port:#x} {v:#x}"));
    }
    pub fn outl(&mut self, port: u16, v: u32) {
        self.cmd(&format!("outl {port:#x} {v:#x}"));
    }

    /// Reads guest memory (libqtest's `qtest_memread`; the wire command is `read`).
    pub fn memread(&mut self, addr: u64, len: usize) -> Vec<u8> {
        assert!(len > 0, "qtest `read` of 0 bytes asserts in QEMU");
        let r = self.cmd(&format!("read {addr:#x} {len:#x}"));
        let h = r.strip_prefix("0x").unwrap_or(&r);
        if h.len() != 2 * len {
            self.die(&format!(
                "read {addr:#x} {len}: reply has {} hex digits",
                h.len()
            ));
        }
        (0..len)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).expect("hex byte"))
            .collect()
    }

    /// Writes guest memory (libqtest's `qtest_memwrite`; the wire command is `write`).
    pub fn memwrite(&mut self, addr: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut line = format!("write {addr:#x} {:#x} 0x", data.len());
        for b in data {
            write!(line, "{b:02x}").unwrap();
        }
        self.cmd(&line);
    }

    /// Fills guest memory with one byte value.
    pub fn memset(&mut self, addr: u64, len: usize, byte: u8) {
        self.cmd(&format!("memset {addr:#x} {len:#x} {byte:#x}"));
    }

    /// Advances the virtual clock by `ns` (runs due timers); returns the new clock.
    pub fn clock_step(&mut self, ns: u64) -> u64 {
        let r = self.cmd(&format!("clock_step {ns}"));
        r.parse().unwrap_or(0)
    }

    /// Whether QEMU has exited (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for Qtest {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
