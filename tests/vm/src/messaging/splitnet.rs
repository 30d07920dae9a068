// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The split-model network driver, driven by Linux tools: its I/O-unit half owns an interface
//! in a network namespace of its own (the "LAN"), its host half an interface in ours; ping
//! and socat go through qhca between them, checked by sha256sum; kill -9 of either half
//! leaves nothing registered on the device, and a restarted half is connected again.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::harness::{CaseResult, Fail, T};
use crate::system::Config as VmConfig;
use crate::verbs::process::{device_object_counts, PINNED_PAGES};
use crate::{bail, check, check_eq, require};

const NETNS: &str = "qhca-pp";
const PORT: &str = "7471";
const HOST_IF: &str = "pphost0";
const IO_IF: &str = "ppio0";
const HOST_IP: &str = "10.77.0.1";
const IO_IP: &str = "10.77.0.2";
/// The I/O unit's LAN MTU, which the host half takes over.
const MTU: u32 = 1400;

/// One half, running; its stderr lines arrive on `lines`.
struct Half {
    child: Child,
    lines: Receiver<String>,
    log: Vec<String>,
}

impl Half {
    fn start(args: &[&str]) -> Result<Half, Fail> {
        let bin = std::env::current_exe()?
            .parent()
            .map(|d| d.join("qhca-splitnet"))
            .unwrap_or_else(|| PathBuf::from("qhca-splitnet"));
        let mut child = Command::new(&bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Fail::new(file!(), line!(), format!("{}: {e}", bin.display())))?;
        let err = child.stderr.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Ok(Half {
            child,
            lines,
            log: Vec::new(),
        })
    }

    /// Waits for a line containing `what`.
    fn wait_for(&mut self, what: &str, within: Duration) -> Result<(), Fail> {
        let t0 = Instant::now();
        while let Some(left) = within.checked_sub(t0.elapsed()) {
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    let hit = l.contains(what);
                    self.log.push(l);
                    if hit {
                        return Ok(());
                    }
                }
                Err(_) => break,
            }
        }
        bail!(
            "no {what:?} within {within:?}; it said:\n  {}",
            self.log.join("\n  ")
        )
    }

    fn kill9(&mut self) -> Result<(), Fail> {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGKILL)?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Half {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn iounit() -> Result<Half, Fail> {
    let ns = format!("/run/netns/{NETNS}");
    let addr = format!("{IO_IP}/24");
    let mtu = MTU.to_string();
    Half::start(&[
        "iounit", "--listen", PORT, "--tun", IO_IF, "--addr", &addr, "--mtu", &mtu, "--netns", &ns,
    ])
}

fn host() -> Result<Half, Fail> {
    let peer = format!("127.0.0.1:{PORT}");
    let addr = format!("{HOST_IP}/24");
    Half::start(&[
        "host",
        "--connect",
        &peer,
        "--tun",
        HOST_IF,
        "--addr",
        &addr,
    ])
}

/// Runs a command to its end: (success, stdout + stderr).
fn run(argv: &[&str]) -> Result<(bool, String), Fail> {
    let out = Command::new(argv[0]).args(&argv[1..]).output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.success(), text))
}

fn in_ns<'a>(argv: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["ip", "netns", "exec", NETNS];
    v.extend_from_slice(argv);
    v
}

/// ping from `from` (our namespace or the LAN's) to `to`: every reply received.
fn ping(t: &mut T, lan_side: bool, to: &str, size: &str, what: &str) -> Result<(), Fail> {
    let argv = [
        "ping", "-c", "5", "-i", "0.2", "-W", "10", "-M", "do", "-s", size, to,
    ];
    let argv = if lan_side {
        in_ns(&argv)
    } else {
        argv.to_vec()
    };
    let (ok, out) = run(&argv)?;
    check!(t, ok && out.contains(" 0% packet loss"), "{what}: {out}");
    Ok(())
}

/// A file through socat over TCP, `from_lan` or to the LAN; sha256sum of both ends compared.
fn tcp_transfer(t: &mut T, from_lan: bool, mib: usize, what: &str) -> Result<(), Fail> {
    let (src, dst) = ("/tmp/qhca-pp-src", "/tmp/qhca-pp-dst");
    let mut s = 0x1234_5678_9abc_def1u64 ^ mib as u64 ^ u64::from(from_lan);
    let data: Vec<u8> = (0..mib << 20)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    std::fs::write(src, &data)?;
    let _ = std::fs::remove_file(dst);
    let listen = "TCP-LISTEN:7600,reuseaddr";
    let sink = format!("OPEN:{dst},creat,trunc");
    let recv_argv = ["socat", "-u", listen, &sink];
    let recv_argv = if from_lan {
        recv_argv.to_vec()
    } else {
        in_ns(&recv_argv)
    };
    let mut receiver = Command::new(recv_argv[0]).args(&recv_argv[1..]).spawn()?;
    let to = if from_lan { HOST_IP } else { IO_IP };
    let source = format!("OPEN:{src}");
    let conn = format!("TCP:{to}:7600,retry=50,interval=0.2");
    let send_argv = ["socat", "-u", &source, &conn];
    let send_argv = if from_lan {
        in_ns(&send_argv)
    } else {
        send_argv.to_vec()
    };
    let t0 = Instant::now();
    let (sent, out) = run(&send_argv)?;
    let st = receiver.wait()?;
    check!(
        t,
        sent && st.success(),
        "{what}: socat sender {out} receiver {st}"
    );
    let sums = run(&["sha256sum", src, dst])?.1;
    let hashes: Vec<&str> = sums
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    check!(
        t,
        hashes.len() == 2 && hashes[0] == hashes[1],
        "{what}: sha256sum: {sums}"
    );
    println!(
        "    {what}: {mib} MiB in {:.2} s, sha256 {}",
        t0.elapsed().as_secs_f64(),
        hashes.first().map(|h| &h[..16]).unwrap_or("?")
    );
    let _ = std::fs::remove_file(src);
    let _ = std::fs::remove_file(dst);
    Ok(())
}

/// Device objects alive now, by kind, must become `want` within 10 s; pinned pages must match
/// (0 when nothing is registered).
fn objects_become(t: &mut T, cfg: &VmConfig, contexts: u32, what: &str) -> Result<(), Fail> {
    let want = [
        ("contexts", contexts),
        ("PDs", 0),
        ("MRs", 0),
        ("CQs", 0),
        ("QPs", 0),
    ];
    let t0 = Instant::now();
    let mut now = device_object_counts(cfg)?;
    while now != want && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        now = device_object_counts(cfg)?;
    }
    check_eq!(t, now, want, "{what}: device objects");
    let pinned = std::fs::read_to_string(PINNED_PAGES)?;
    check_eq!(t, pinned.trim(), "0", "{what}: {PINNED_PAGES}");
    Ok(())
}

pub(super) fn splitnet_ping_and_tcp_survive_restarts(t: &mut T, cfg: &VmConfig) -> CaseResult {
    // The halves open the first device, the RDMA core's: its port's netdev up (GID 0).
    crate::verbs::uverbs::core_device(cfg)?;
    let _ = run(&["ip", "netns", "del", NETNS]);
    let (ok, out) = run(&["ip", "netns", "add", NETNS])?;
    require!(t, ok, "ip netns add: {out}");
    let r = (|| -> CaseResult {
        let mut io = iounit()?;
        io.wait_for(&format!("interface {IO_IF} up"), Duration::from_secs(20))?;
        let mut h = host()?;
        h.wait_for(
            &format!("connected to the I/O unit: LAN interface {IO_IF}, MTU {MTU}"),
            Duration::from_secs(30),
        )?;
        let mtu = std::fs::read_to_string(format!("/sys/class/net/{HOST_IF}/mtu"))?;
        check_eq!(
            t,
            mtu.trim(),
            MTU.to_string(),
            "the host took the I/O unit's MTU"
        );
        let full = (MTU - 28).to_string();
        ping(t, false, IO_IP, "56", "host -> LAN")?;
        ping(t, false, IO_IP, &full, "host -> LAN, full-MTU packets")?;
        ping(t, true, HOST_IP, "1000", "LAN -> host")?;
        tcp_transfer(t, false, 8, "TCP host -> LAN")?;
        tcp_transfer(t, true, 8, "TCP LAN -> host")?;

        // The I/O unit dies: the host drops its connection and holds nothing but its context.
        io.kill9()?;
        h.wait_for("waiting for the peer again", Duration::from_secs(20))?;
        objects_become(t, cfg, 1, "I/O unit killed")?;
        let mut io = iounit()?;
        h.wait_for("connected to the I/O unit", Duration::from_secs(30))?;
        ping(t, false, IO_IP, "56", "after the I/O unit restarted")?;
        tcp_transfer(t, false, 2, "TCP after the I/O unit restarted")?;

        // The host dies: the I/O unit drops its connection and waits for the next.
        h.kill9()?;
        io.wait_for("waiting for the peer again", Duration::from_secs(20))?;
        objects_become(t, cfg, 1, "host killed")?;
        let mut h = host()?;
        h.wait_for("connected to the I/O unit", Duration::from_secs(30))?;
        ping(t, true, HOST_IP, "56", "after the host restarted")?;

        h.kill9()?;
        io.kill9()?;
        objects_become(t, cfg, 0, "both killed")?;
        Ok(())
    })();
    let _ = run(&["ip", "netns", "del", NETNS]);
    r
}
