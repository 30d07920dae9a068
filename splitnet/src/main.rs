// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! qhca-splitnet: a network driver split in two halves that talk only through push-push
//! messaging over qhca (seed 002's LAN adapter).
//!
//! ```text
//! qhca-splitnet iounit --listen PORT --tun NAME [--addr A.B.C.D/N] [--mtu N] [--netns PATH]
//!                      [-d DEV] [-x GIDX]
//! qhca-splitnet host   --connect HOST:PORT --tun NAME [--addr A.B.C.D/N] [-d DEV] [-x GIDX]
//! ```
//!
//! The *I/O-unit module* owns the LAN side: a TUN interface (optionally created in another
//! network namespace, `--netns /run/netns/NAME`, while its control connection stays in this
//! one). The *host module* is the interface the host's stack and tools use: another TUN
//! interface. Between them, one push-push connection ([`pushpush::Connection`]):
//!
//! - every IP packet either side's interface sends is pushed into the other side's receive
//!   pool (RDMA WRITE WITH IMMEDIATE naming the element) and written to the other interface;
//!   the element is replenished once written;
//! - configuration goes as CfgUtil requests: the host asks the I/O unit for its link
//!   ([`CFG_GET_LINK`]: MTU and LAN interface name) and takes its MTU, and for its counters
//!   ([`CFG_GET_STATS`]).
//!
//! Either half may restart: the other keeps its interface, notices the peer went away (the
//! connection's setup stream ends, or a request fails), drops its connection (its regions
//! are deregistered only after its QPs are gone) and connects again (host) or accepts again
//! (I/O unit). Packets sent meanwhile are dropped, as by a NIC whose link is down.

mod tun;

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pushpush::{Config, Connection, Event, Listener, PoolShape};

use tun::Tun;

/// CfgUtilRequest: the I/O unit's link. Reply: `mtu: u32` then the LAN interface's name.
const CFG_GET_LINK: u32 = 1;
/// CfgUtilRequest: the replier's counters, six `u64`s ([`Counters`]).
const CFG_GET_STATS: u32 = 2;
/// CfgUtilReply status for an unknown request.
const CFG_ENOSYS: u32 = 38;

const USAGE: &str = "\
usage: qhca-splitnet iounit --listen PORT --tun NAME [--addr A.B.C.D/N] [--mtu N] [--netns PATH]
                            [-d DEV] [-x GIDX]
       qhca-splitnet host   --connect HOST:PORT --tun NAME [--addr A.B.C.D/N] [-d DEV] [-x GIDX]
A network interface split in two halves over push-push messaging on qhca: the host module is
the TUN interface the host's tools use, the I/O-unit module owns the LAN side (another TUN
interface, --netns: in that network namespace). Either half may be restarted.
";

#[derive(Default)]
struct Opts {
    iounit: bool,
    peer: String,
    tun: String,
    addr: Option<(Ipv4Addr, u8)>,
    mtu: u32,
    netns: Option<String>,
    dev: Option<String>,
    gid_index: Option<u8>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        mtu: 1500,
        ..Opts::default()
    };
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("iounit") => o.iounit = true,
        Some("host") => {}
        _ => return Err("the first word is iounit or host".into()),
    }
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--listen" if o.iounit => o.peer = val()?,
            "--connect" if !o.iounit => o.peer = val()?,
            "--tun" => o.tun = val()?,
            "--addr" => {
                let v = val()?;
                let (ip, len) = v.split_once('/').ok_or("--addr A.B.C.D/N")?;
                let ip = ip.parse().map_err(|_| format!("bad address {ip}"))?;
                let len: u8 = len.parse().map_err(|_| format!("bad prefix {len}"))?;
                if len > 32 {
                    return Err(format!("bad prefix {len}"));
                }
                o.addr = Some((ip, len));
            }
            "--mtu" if o.iounit => {
                o.mtu = val()?.parse().map_err(|_| "bad --mtu")?;
                if !(576..=65535).contains(&o.mtu) {
                    return Err("--mtu is 576..=65535".into());
                }
            }
            "--netns" if o.iounit => o.netns = Some(val()?),
            "-d" => o.dev = Some(val()?),
            "-x" => o.gid_index = Some(val()?.parse().map_err(|_| "bad -x")?),
            _ => return Err(format!("unknown option {a}")),
        }
    }
    if o.peer.is_empty() || o.tun.is_empty() {
        return Err("--listen/--connect and --tun are required".into());
    }
    Ok(o)
}

/// Packets and bytes each way, and drops.
#[derive(Clone, Copy, Debug, Default)]
struct Counters {
    /// From the interface into the connection.
    tx_packets: u64,
    tx_bytes: u64,
    /// From the connection out of the interface.
    rx_packets: u64,
    rx_bytes: u64,
    /// Read from the interface while no peer was connected.
    dropped: u64,
    /// Connections made.
    connects: u64,
}

impl Counters {
    fn encode(&self) -> Vec<u8> {
        [
            self.tx_packets,
            self.tx_bytes,
            self.rx_packets,
            self.rx_bytes,
            self.dropped,
            self.connects,
        ]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
    }
}

/// Why a link ended.
enum End {
    /// The connection failed or the peer left: connect again.
    Conn(pushpush::Error),
    /// The interface failed: give up.
    Tun(std::io::Error),
}

impl From<pushpush::Error> for End {
    fn from(e: pushpush::Error) -> End {
        End::Conn(e)
    }
}

struct Side {
    o: Opts,
    name: &'static str,
    tun: Tun,
    ctx: Arc<qhca::Context>,
    cfg: Config,
    st: Counters,
    /// A delivered packet on its way to the interface (grown to the largest delivery).
    rx: Vec<u8>,
}

impl Side {
    fn log(&self, msg: impl std::fmt::Display) {
        eprintln!("qhca-splitnet[{}]: {msg}", self.name);
    }

    /// Moves packets both ways until the connection ends.
    fn pump(&mut self, c: &mut Connection) -> Result<(), End> {
        let mut buf = vec![0u8; 65536];
        let mut held: Option<usize> = None;
        loop {
            let mut busy = false;
            // Interface -> peer, while the peer has elements free.
            for _ in 0..64 {
                let n = match held.take() {
                    Some(n) => n,
                    None => match self.tun.recv(&mut buf).map_err(End::Tun)? {
                        Some(n) => n,
                        None => break,
                    },
                };
                if c.try_push(&buf[..n])?.is_none() {
                    held = Some(n);
                    break;
                }
                busy = true;
                self.st.tx_packets += 1;
                self.st.tx_bytes += n as u64;
            }
            // Peer -> interface.
            while let Some(ev) = c.try_event()? {
                busy = true;
                self.event(c, ev)?;
            }
            if busy || c.arm()? {
                continue;
            }
            let [cq, stream] = c.wait_fds();
            let mut pfd = [
                libc::pollfd {
                    fd: if held.is_none() { self.tun.fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: cq,
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stream,
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: three valid pollfd structs in our array, for the call's duration.
            unsafe { libc::poll(pfd.as_mut_ptr(), 3, 1000) };
            c.woke()?;
        }
    }

    fn event(&mut self, c: &mut Connection, ev: Event) -> Result<(), End> {
        match ev {
            Event::Data(d) => {
                if self.rx.len() < d.len() as usize {
                    self.rx.resize(d.len() as usize, 0);
                }
                let n = c.read_into(&d, &mut self.rx);
                c.release(d)?;
                self.tun.send(&self.rx[..n]).map_err(End::Tun)?;
                self.st.rx_packets += 1;
                self.st.rx_bytes += n as u64;
            }
            Event::CfgRequest { xid, code, .. } => match code {
                CFG_GET_LINK => {
                    let mut r = self.o.mtu.to_le_bytes().to_vec();
                    r.extend_from_slice(self.tun.name().as_bytes());
                    c.reply(xid, code, 0, &r)?;
                }
                CFG_GET_STATS => c.reply(xid, code, 0, &self.st.encode())?,
                _ => c.reply(xid, code, CFG_ENOSYS, &[])?,
            },
            Event::SendData(d) => self.log(format!("peer says: {}", String::from_utf8_lossy(&d))),
            Event::CfgReply { .. } | Event::PoolFreed(_) | Event::PeerPoolGone(_) => {}
        }
        Ok(())
    }

    /// Reads and drops what the interface queued while no peer is connected.
    fn drain(&mut self) -> Result<(), std::io::Error> {
        let mut buf = vec![0u8; 65536];
        while self.tun.recv(&mut buf)?.is_some() {
            self.st.dropped += 1;
        }
        Ok(())
    }

    /// A connection made: the host learns the I/O unit's link; both pump until it ends.
    fn serve(&mut self, mut c: Connection) -> Result<(), std::io::Error> {
        self.st.connects += 1;
        let r = (|| -> Result<(), End> {
            if !self.o.iounit {
                let (status, link) = c.call(CFG_GET_LINK, &[], self.cfg.timeout)?;
                if status != 0 || link.len() < 4 {
                    return Err(End::Conn(pushpush::Error::Protocol(format!(
                        "GET_LINK: status {status}"
                    ))));
                }
                let mtu = u32::from_le_bytes(link[..4].try_into().expect("4 bytes"));
                self.tun.set_mtu(mtu).map_err(End::Tun)?;
                self.log(format!(
                    "connected to the I/O unit: LAN interface {}, MTU {mtu}",
                    String::from_utf8_lossy(&link[4..])
                ));
            } else {
                self.log("the host module connected");
            }
            self.pump(&mut c)
        })();
        let s = c.stats();
        self.log(format!(
            "connection ended: pushed {} (+{} indicated), delivered {}, waits {}; interface tx {} rx {}",
            s.pushed_imm, s.pushed_indicated, s.delivered, s.push_waits, self.st.tx_packets,
            self.st.rx_packets
        ));
        drop(c);
        match r {
            Ok(()) => Ok(()),
            Err(End::Conn(e)) => {
                self.log(format!("{e}; waiting for the peer again"));
                Ok(())
            }
            Err(End::Tun(e)) => Err(e),
        }
    }
}

fn run(o: Opts) -> Result<(), String> {
    let ctx = {
        let info = match &o.dev {
            Some(n) => qhca::DeviceInfo::find(n),
            None => qhca::devices().map(|mut v| v.remove(0)),
        };
        Arc::new(info.and_then(|i| i.open()).map_err(|e| e.to_string())?)
    };
    // Elements hold one packet of the LAN's MTU (the host learns it from the I/O unit; its
    // pools are sized for the largest the interface may carry).
    let elem = if o.iounit {
        o.mtu.next_power_of_two().max(2048)
    } else {
        65536
    };
    let cfg = Config {
        pools: vec![PoolShape {
            count: if elem > 16384 { 32 } else { 256 },
            size: elem,
        }],
        data_depth: 512,
        gid_index: o.gid_index,
        timeout: Duration::from_secs(2),
        ..Config::default()
    };
    let listener = if o.iounit {
        let addr = if o.peer.contains(':') {
            o.peer.clone()
        } else {
            format!("0.0.0.0:{}", o.peer)
        };
        Some(Listener::bind(addr).map_err(|e| e.to_string())?)
    } else {
        None
    };
    // The control connection's socket is in this namespace already; the interface goes
    // where the LAN is.
    if let Some(ns) = &o.netns {
        tun::enter_netns(ns).map_err(|e| e.to_string())?;
    }
    let tun = Tun::create(&o.tun).map_err(|e| e.to_string())?;
    match o.addr {
        Some((ip, len)) => tun.configure(ip, len),
        None => tun.up(),
    }
    .map_err(|e| format!("{}: {e}", o.tun))?;
    if o.iounit {
        tun.set_mtu(o.mtu).map_err(|e| e.to_string())?;
    }
    let name = if o.iounit { "iounit" } else { "host" };
    let mut side = Side {
        o,
        name,
        tun,
        ctx,
        cfg,
        st: Counters::default(),
        rx: vec![0; 65536],
    };
    side.log(format!("interface {} up", side.tun.name()));
    let mut quiet_since: Option<Instant> = None;
    loop {
        side.drain().map_err(|e| e.to_string())?;
        let c = match &listener {
            Some(l) => l.accept(&side.ctx, &side.cfg),
            None => Connection::connect(&side.ctx, side.o.peer.as_str(), &side.cfg),
        };
        match c {
            Ok(c) => {
                quiet_since = None;
                side.serve(c).map_err(|e| e.to_string())?;
            }
            Err(
                e @ pushpush::Error::Qhca(qhca::Error::Sys { .. } | qhca::Error::Timeout { .. }),
            ) => {
                // No peer yet (refused, nobody connecting): say so once, keep trying.
                if quiet_since.is_none() {
                    side.log(format!("no peer yet ({e}); retrying"));
                    quiet_since = Some(Instant::now());
                }
                if listener.is_none() {
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
            Err(e) => {
                side.log(format!("connection setup failed: {e}; retrying"));
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("qhca-splitnet: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qhca-splitnet: {e}");
            ExitCode::FAILURE
        }
    }
}
