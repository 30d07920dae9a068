// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The RoCEv2 wire, in one guest: `qhca-vmtest --wire` runs these cases (and only these) in a
//! VM that `scripts/vm.sh --nic --qhca-port --qhca2 PROPS --qhca3 PROPS` boots, where one
//! Ethernet segment (QEMU's hub 0) joins the guest's virtio-net NIC, on which Linux's Soft-RoCE
//! (`rxe0`) runs, the port of qhca0, the port of qhca1, whose device drops, duplicates and
//! reorders a fraction of the frames it sends (`x-loss-*`), and the port of qhca2, whose device
//! drops and duplicates but does not reorder. Every frame between them is a real RoCEv2 frame:
//! rxe parses ours and we parse rxe's.
//!
//! qhca2 is rxe's lossy peer because rxe (7.3) ends an RDMA READ wrongly when an older ACK
//! arrives after the READ's first response packet, which any reordering produces: its
//! `check_psn` sends such an ACK to `check_ack` (meant for a NAK in the middle of a READ), which
//! takes it as the end of a message (`comp.opcode = -1`), so the next MIDDLE packet is "not a
//! start": `COMPST_ERROR` with a success status (a WARN in `rxe_comp.c`), and the READ completes
//! as a success with everything past its first packet missing. Seen as "byte 4096 differs" in
//! this file's cases, two full runs in five, until qhca2 took that role.
//!
//! The segment: the NIC is 10.7.0.1/24 (MTU 9000, so that rxe's path MTU is 4096), qhca0 is
//! 10.7.0.2, the lossy qhca1 10.7.0.3, qhca2 10.7.0.4. The cases: the ports and ARP; hostile
//! datagrams counted and dropped; every RC opcode byte for byte both ways (`qhca-verbs-check
//! wire`, one program on both sides) between qhca and rxe, between qhca0 and qhca1 under loss,
//! and between rxe and qhca2 under loss; `ibv_rc_pingpong` and perftest (RC latency and
//! bandwidth of every opcode, UD) between qhca and rxe, each both ways: qhca as the client of
//! rxe's server and rxe as the client of qhca's. Both sides run the Debian programs as they are:
//! libibverbs loads rxe's provider and qhca's installed one.
//!
//! Last, the Ethernet function (`wire_eth.rs`): qhca0's netdev carries IP to and from the NIC as
//! any NIC would, and follows its port's link when the host takes it down and up again.
//!
//! Each qhca port's netdev (whose addresses are the port's GIDs) lives in a network namespace of
//! its own (`qhca-wire-N`), as each would on a host of its own: were qhca's addresses local to
//! this kernel, rxe would send to them through `lo` and never onto the wire. The RDMA core's
//! devices stay visible here (its shared namespace mode), so every program runs here, over TCP
//! on 127.0.0.1 for its exchange.

use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use qhca::{Context, PortAttr, PortCounters, PortState, Wire};

use crate::harness::{Case, CaseResult, Fail, T};
use crate::ibverbs::{beside_me, listening, rerun_clockless, text, tool, wait_output};
use crate::system::{self, sh, sh_ok, Config};
use crate::{bail, check, check_eq, require};

/// The cases of this section, in order.
pub fn cases() -> Vec<Case<Config>> {
    macro_rules! cases {
        ($($name:ident),* $(,)?) => { vec![$(Case { name: stringify!($name), run: $name }),*] };
    }
    let mut v = cases![
        wire_segment_up,
        wire_arp_and_hostile_datagrams,
        wire_rc_every_opcode_qhca_rxe,
        wire_rc_every_opcode_qhca_qhca_lossy,
        wire_rc_every_opcode_rxe_lossy_qhca,
        wire_rc_pingpong_qhca_rxe,
        wire_perftest_write_lat,
        wire_perftest_read_lat,
        wire_perftest_send_lat,
        wire_perftest_atomic_lat,
        wire_perftest_write_bw,
        wire_perftest_read_bw,
        wire_perftest_send_bw,
        wire_perftest_send_lat_ud,
    ];
    v.extend(crate::wire_eth::cases());
    v
}

const NIC_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 1);
pub(crate) const QHCA_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 2);
const LOSSY_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 3);
const RXE_LOSSY_IP: Ipv4Addr = Ipv4Addr::new(10, 7, 0, 4);
const PREFIX: u8 = 24;
/// The RoCEv2 UDP port.
const ROCE_PORT: u16 = 4791;

/// One end of a connection: a verbs device and the GID index of its IPv4 address.
#[derive(Clone)]
pub(crate) struct End {
    pub(crate) dev: String,
    pub(crate) gidx: u32,
}

/// The segment, once set up.
#[derive(Clone)]
pub(crate) struct Segment {
    ifname: String,
    rxe: End,
    pub(crate) qhca: End,
    lossy: End,
    /// rxe's lossy peer (no reordering).
    rxe_lossy: End,
    pub(crate) qhca_path: PathBuf,
    lossy_path: PathBuf,
    rxe_lossy_path: PathBuf,
    pub(crate) qhca_mac: String,
}

static SEGMENT: Mutex<Option<Segment>> = Mutex::new(None);

/// The segment, set up by the first case that needs it (again if that failed).
pub(crate) fn segment() -> Result<Segment, Fail> {
    let mut g = SEGMENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(s) = g.as_ref() {
        return Ok(s.clone());
    }
    let s = set_up()?;
    *g = Some(s.clone());
    Ok(s)
}

/// The interface with MAC `mac` (udev may still be naming it).
fn interface_by_mac(mac: &str) -> Option<String> {
    let mut found = None;
    system::wait_for(Duration::from_secs(5), || {
        found = std::fs::read_dir("/sys/class/net").ok().and_then(|d| {
            d.flatten()
                .find(|e| {
                    std::fs::read_to_string(e.path().join("address"))
                        .is_ok_and(|a| a.trim().eq_ignore_ascii_case(mac))
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
        });
        found.is_some()
    });
    found
}

/// The GID index of `ip` on RDMA device `ibdev`'s port, as sysfs shows it, once the port is
/// active (10 s at most).
fn gid_index(ibdev: &str, ip: Ipv4Addr) -> Option<u32> {
    let want = crate::cases::gid_text(&qhca::Gid::from_ipv4(ip));
    let port = Path::new("/sys/class/infiniband")
        .join(ibdev)
        .join("ports/1");
    let mut idx = None;
    system::wait_for(Duration::from_secs(10), || {
        let active =
            std::fs::read_to_string(port.join("state")).is_ok_and(|s| s.trim() == "4: ACTIVE");
        idx = std::fs::read_dir(port.join("gids")).ok().and_then(|d| {
            d.flatten()
                .find(|e| std::fs::read_to_string(e.path()).is_ok_and(|g| g.trim() == want))
                .and_then(|e| e.file_name().to_str()?.parse().ok())
        });
        active && idx.is_some()
    });
    idx
}

/// The qhca device whose port has MAC `mac`, given address `ip` on its netdev in network
/// namespace `ns` (made anew): the device and the End that names it.
fn qhca_end(mac: &str, ip: Ipv4Addr, ns: &str) -> Result<(qhca::DeviceInfo, End), Fail> {
    let ndev = interface_by_mac(mac);
    let found = qhca::devices()?
        .into_iter()
        .find(|d| ndev.is_some() && d.netdev() == ndev);
    let (Some(dev), Some(ndev)) = (found, ndev) else {
        bail!("no qhca device whose port's netdev has MAC {mac}");
    };
    let _ = sh("ip", &["netns", "del", ns]);
    sh_ok("ip", &["netns", "add", ns])?;
    sh_ok("ip", &["link", "set", &ndev, "netns", ns])?;
    let cidr = format!("{ip}/{PREFIX}");
    for cmd in [
        &["link", "set", &ndev, "up"][..],
        &["addr", "add", &cidr, "dev", &ndev],
    ] {
        let mut a = vec!["netns", "exec", ns, "ip"];
        a.extend_from_slice(cmd);
        sh_ok("ip", &a)?;
    }
    let Some(gidx) = gid_index(&dev.name, ip) else {
        bail!("{}: no active port with the GID of {ip}", dev.name);
    };
    let end = End {
        dev: dev.name.clone(),
        gidx,
    };
    Ok((dev, end))
}

fn set_up() -> Result<Segment, Fail> {
    let Ok(mac) = std::env::var("QHCA_NET_MAC") else {
        bail!("QHCA_NET_MAC is not set: boot with scripts/vm.sh --nic --qhca-port --qhca2 .. --qhca3 ..");
    };
    let Some(ifname) = interface_by_mac(&mac) else {
        bail!("no interface with MAC {mac}");
    };
    let nic_cidr = format!("{NIC_IP}/{PREFIX}");
    sh_ok("ip", &["addr", "flush", "dev", &ifname])?;
    sh_ok("ip", &["link", "set", "dev", &ifname, "mtu", "9000", "up"])?;
    sh_ok("ip", &["addr", "add", &nic_cidr, "dev", &ifname])?;
    if !Path::new("/sys/class/infiniband/rxe0").exists() {
        sh_ok("modprobe", &["rdma_rxe"])?;
        sh_ok(
            "rdma",
            &["link", "add", "rxe0", "type", "rxe", "netdev", &ifname],
        )?;
    }
    let Some(rxe_gidx) = gid_index("rxe0", NIC_IP) else {
        bail!("rxe0 has no active port with the GID of {NIC_IP}");
    };
    // The three HCAs, told apart by their ports' MACs (vm.sh: 52:54:00:12:35:NN, :36:NN, :37:NN).
    let want = |plus: u8| -> Result<String, Fail> {
        let b: Vec<u8> = mac
            .split(':')
            .map(|x| u8::from_str_radix(x, 16))
            .collect::<Result<_, _>>()
            .map_err(|e| Fail::new(file!(), line!(), format!("QHCA_NET_MAC {mac}: {e}")))?;
        Ok(format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0],
            b[1],
            b[2],
            b[3],
            b[4].wrapping_add(plus),
            b[5]
        ))
    };
    let qmac = want(1)?;
    let (qdev, qhca) = qhca_end(&qmac, QHCA_IP, "qhca-wire-1")?;
    let (ldev, lossy) = qhca_end(&want(2)?, LOSSY_IP, "qhca-wire-2")?;
    let (rdev, rxe_lossy) = qhca_end(&want(3)?, RXE_LOSSY_IP, "qhca-wire-3")?;
    Ok(Segment {
        rxe: End {
            dev: "rxe0".into(),
            gidx: rxe_gidx,
        },
        qhca,
        lossy,
        rxe_lossy,
        ifname,
        qhca_path: qdev.path,
        lossy_path: ldev.path,
        rxe_lossy_path: rdev.path,
        qhca_mac: qmac,
    })
}

pub(crate) fn port_of(path: &Path) -> Result<PortAttr, Fail> {
    Ok(Context::open(path)?.query_port()?)
}

fn wire_segment_up(t: &mut T, _cfg: &Config) -> CaseResult {
    let s = segment()?;
    for (path, ip, end) in [
        (&s.qhca_path, QHCA_IP, &s.qhca),
        (&s.lossy_path, LOSSY_IP, &s.lossy),
        (&s.rxe_lossy_path, RXE_LOSSY_IP, &s.rxe_lossy),
    ] {
        let p = port_of(path)?;
        check_eq!(t, p.state, PortState::Active, "{}", path.display());
        check_eq!(t, p.wire, Wire::RoceV2, "{}: no netdev?", path.display());
        let e = p.gid(end.gidx as u8);
        check!(
            t,
            e.is_some_and(|e| e.ipv4() == Some(ip) && e.prefix_len == PREFIX),
            "{}: GID {} is {e:?}",
            path.display(),
            end.gidx
        );
    }
    let out = Command::new(tool("ibv_devinfo")?)
        .args(["-d", "rxe0"])
        .output()?;
    check!(
        t,
        text(&out).contains("PORT_ACTIVE") && text(&out).contains("active_mtu:\t\t4096"),
        "rxe0: {}",
        text(&out)
    );
    Ok(())
}

/// The kernel resolves qhca's address by ARP (qhca's netdev answers, with its port's MAC: the
/// request reached it through the port's Ethernet QP), and datagrams to UDP 4791 that are not
/// valid RoCEv2 packets for it are dropped and counted.
fn wire_arp_and_hostile_datagrams(t: &mut T, _cfg: &Config) -> CaseResult {
    let s = segment()?;
    let before = port_of(&s.qhca_path)?.counters;
    let sock = UdpSocket::bind((NIC_IP, 0))?;
    let to = (QHCA_IP, ROCE_PORT);
    // Too short for a BTH and its ICRC.
    sock.send_to(&[0u8; 7], to)?;
    // A well-formed SEND_ONLY to a QP nobody has, with an ICRC of zero.
    let mut bth = [0u8; 16];
    bth[0] = 0x04;
    bth[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    bth[5..8].copy_from_slice(&[0x12, 0x34, 0x56]);
    sock.send_to(&bth, to)?;
    let mut after = before;
    let counted = system::wait_for(Duration::from_secs(10), || {
        after = port_of(&s.qhca_path).map(|p| p.counters).unwrap_or(before);
        after.rx_malformed > before.rx_malformed && after.rx_bad_icrc > before.rx_bad_icrc
    });
    check!(t, counted, "counters before {before:?}, after {after:?}");
    check!(
        t,
        after.eth_rx_frames > before.eth_rx_frames,
        "nothing reached the netdev (no ARP?): {after:?}"
    );
    let out = sh(
        "ip",
        &["neigh", "show", &QHCA_IP.to_string(), "dev", &s.ifname],
    )?;
    let neigh = String::from_utf8_lossy(&out.stdout).into_owned();
    check!(
        t,
        neigh.contains(&format!("lladdr {}", s.qhca_mac)),
        "the kernel's neighbour entry for {QHCA_IP}: {neigh:?}"
    );
    Ok(())
}

/// `prog args..`, its output piped.
fn prog_cmd(prog: &Path, args: &[String]) -> Result<Command, Fail> {
    let mut c = Command::new(prog);
    c.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok(c)
}

/// `prog` as a server on `server` (its arguments from `args(server)`) and as its client on
/// `client` connecting over TCP `port` to 127.0.0.1: both must exit 0 within `limit`. Returns
/// the client's and the server's output.
fn cross(
    t: &mut T,
    prog: &Path,
    server: &End,
    client: &End,
    args: impl Fn(&End) -> Vec<String>,
    port: u16,
    limit: Duration,
) -> Result<(String, String), Fail> {
    let (up, c, s) = rerun_clockless(prog, || {
        let sv = prog_cmd(prog, &args(server))?.spawn()?;
        let up = system::wait_for(Duration::from_secs(15), || listening(port));
        let mut ca = args(client);
        ca.push("127.0.0.1".into());
        let cl = prog_cmd(prog, &ca)?.spawn()?;
        let c = wait_output(cl, limit)?;
        Ok((up, c, wait_output(sv, Duration::from_secs(20))?))
    })?;
    require!(
        t,
        up,
        "the server on {} did not listen on port {port}",
        server.dev
    );
    let (Some(c), Some(s)) = (c, s) else {
        bail!(
            "{} between {} (server) and {} (client): timed out after {limit:?}",
            prog.display(),
            server.dev,
            client.dev
        );
    };
    let (ct, st) = (text(&c), text(&s));
    print!("{ct}");
    check!(
        t,
        c.status.success(),
        "client on {}: {}\n{ct}\nserver on {}:\n{st}",
        client.dev,
        c.status,
        server.dev
    );
    check!(
        t,
        s.status.success(),
        "server on {}: {}\n{st}",
        server.dev,
        s.status
    );
    Ok((ct, st))
}

/// The wire check between `a` (server) and `b` (client), `rounds` rounds, on TCP `port`.
fn every_opcode(t: &mut T, a: &End, b: &End, rounds: u32, port: u16) -> CaseResult {
    let prog = beside_me("qhca-verbs-check")?;
    let args = |e: &End| -> Vec<String> {
        vec![
            "wire".into(),
            e.dev.clone(),
            e.gidx.to_string(),
            port.to_string(),
            "-r".into(),
            rounds.to_string(),
        ]
    };
    let (c, s) = cross(t, &prog, a, b, args, port, Duration::from_secs(600))?;
    for (who, out) in [("client", &c), ("server", &s)] {
        check!(
            t,
            out.contains(&format!("wire: ok: {rounds} rounds")),
            "{who}: {out}"
        );
        check!(t, out.contains("mtu 4096"), "{who}: not at MTU 4096: {out}");
    }
    Ok(())
}

fn wire_rc_every_opcode_qhca_rxe(t: &mut T, _cfg: &Config) -> CaseResult {
    let s = segment()?;
    every_opcode(t, &s.rxe, &s.qhca, 2, 18700)
}

/// The loss the lossy port `path` injected while `f` ran: dropped, duplicated and (if
/// `reorders`) reordered frames; none reordered if not.
fn under_loss(
    t: &mut T,
    path: &Path,
    reorders: bool,
    f: impl FnOnce(&mut T) -> CaseResult,
) -> CaseResult {
    let before: PortCounters = port_of(path)?.counters;
    f(t)?;
    let after = port_of(path)?.counters;
    println!(
        "lossy port: {} frames sent, {} dropped, {} duplicated, {} reordered",
        after.tx_frames - before.tx_frames,
        after.test_dropped - before.test_dropped,
        after.test_duplicated - before.test_duplicated,
        after.test_reordered - before.test_reordered
    );
    check!(
        t,
        after.test_dropped > before.test_dropped
            && after.test_duplicated > before.test_duplicated
            && (after.test_reordered > before.test_reordered) == reorders,
        "not the loss {} wants (x-loss-* as scripts/test.sh sets them?): {before:?} -> {after:?}",
        path.display()
    );
    Ok(())
}

fn wire_rc_every_opcode_qhca_qhca_lossy(t: &mut T, _cfg: &Config) -> CaseResult {
    let s = segment()?;
    under_loss(t, &s.lossy_path, true, |t| {
        every_opcode(t, &s.qhca, &s.lossy, 3, 18701)
    })
}

fn wire_rc_every_opcode_rxe_lossy_qhca(t: &mut T, _cfg: &Config) -> CaseResult {
    let s = segment()?;
    under_loss(t, &s.rxe_lossy_path, false, |t| {
        every_opcode(t, &s.rxe_lossy, &s.rxe, 2, 18702)
    })
}

/// `ibv_rc_pingpong -c` (each side checks the bytes it receives) by GID, both ways.
fn wire_rc_pingpong_qhca_rxe(t: &mut T, _cfg: &Config) -> CaseResult {
    let s = segment()?;
    let prog = tool("ibv_rc_pingpong")?;
    for (server, client, port) in [(&s.rxe, &s.qhca, 18703), (&s.qhca, &s.rxe, 18704)] {
        let args = |e: &End| -> Vec<String> {
            [
                "-d",
                &e.dev,
                "-g",
                &e.gidx.to_string(),
                "-c",
                "-s",
                "4096",
                "-n",
                "300",
            ]
            .into_iter()
            .chain(["-p", &port.to_string()])
            .map(String::from)
            .collect()
        };
        let (c, sv) = cross(
            t,
            &prog,
            server,
            client,
            args,
            port,
            Duration::from_secs(120),
        )?;
        for (who, out) in [("client", &c), ("server", &sv)] {
            check!(t, out.contains("300 iters in"), "{who}: {out}");
        }
    }
    Ok(())
}

/// perftest's `prog` between qhca and rxe, both ways: each client prints a result row for
/// `size`. READ and atomic tests get `-o 16`: perftest sets each side's max_rd_atomic to the
/// other side's outstanding reads, which default to the device's own maximum (qhca 16, rxe
/// 128), and a device refuses a depth above its maximum (qhca, like mlx5, with EINVAL).
fn perftest(t: &mut T, prog: &str, extra: &[&str], size: &str, port: u16) -> CaseResult {
    let s = segment()?;
    let exe = tool(prog)?;
    for (server, client, port) in [(&s.rxe, &s.qhca, port), (&s.qhca, &s.rxe, port + 1)] {
        let args = |e: &End| -> Vec<String> {
            let mut v: Vec<String> = ["-d", &e.dev, "-x", &e.gidx.to_string()]
                .into_iter()
                .map(String::from)
                .collect();
            if !prog.starts_with("ib_atomic") {
                v.extend(["-s".into(), size.into()]);
            }
            if prog.starts_with("ib_atomic") || prog.starts_with("ib_read") {
                v.extend(["-o".into(), "16".into()]);
            }
            v.extend(extra.iter().map(|a| a.to_string()));
            v.extend(["-p".into(), port.to_string()]);
            v
        };
        let (c, _) = cross(
            t,
            &exe,
            server,
            client,
            args,
            port,
            Duration::from_secs(240),
        )?;
        let row = c.lines().any(|l| {
            l.split_whitespace().next() == Some(size) && l.split_whitespace().count() >= 4
        });
        check!(
            t,
            row,
            "{prog} {} -> {}: no result row for {size} bytes in:\n{c}",
            client.dev,
            server.dev
        );
    }
    Ok(())
}

fn wire_perftest_write_lat(t: &mut T, _cfg: &Config) -> CaseResult {
    perftest(t, "ib_write_lat", &["-n", "500"], "8", 18710)
}

fn wire_perftest_read_lat(t: &mut T, _cfg: &Config) -> CaseResult {
    perftest(t, "ib_read_lat", &["-n", "500"], "8", 18712)
}

fn wire_perftest_send_lat(t: &mut T, _cfg: &Config) -> CaseResult {
    perftest(t, "ib_send_lat", &["-n", "500"], "8", 18714)
}

fn wire_perftest_atomic_lat(t: &mut T, _cfg: &Config) -> CaseResult {
    perftest(t, "ib_atomic_lat", &["-n", "500"], "8", 18716)
}

fn wire_perftest_write_bw(t: &mut T, _cfg: &Config) -> CaseResult {
    perftest(t, "ib_write_bw", &["-n", "100"], "65536", 18718)
}

fn wire_perftest_read_bw(t: &mut T, _cfg: &Config) -> CaseResult {
    perftest(t, "ib_read_bw", &["-n", "100"], "65536", 18720)
}

fn wire_perftest_send_bw(t: &mut T, _cfg: &Config) -> CaseResult {
    perftest(t, "ib_send_bw", &["-n", "100"], "4096", 18722)
}

fn wire_perftest_send_lat_ud(t: &mut T, _cfg: &Config) -> CaseResult {
    perftest(t, "ib_send_lat", &["-c", "UD", "-n", "500"], "1024", 18724)
}

/// `ip netns exec ns PROG ARGS..`, which must succeed; its standard output.
pub(crate) fn in_ns(ns: &str, prog: &str, args: &[&str]) -> Result<String, Fail> {
    let mut a = vec!["netns", "exec", ns, prog];
    a.extend_from_slice(args);
    let out = sh("ip", &a)?;
    if !out.status.success() {
        bail!("ip {}: {}", a.join(" "), system::describe(&out));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
