// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! What qhca-pingpong and qhca-perf share: options, setting up one side of a connection, waiting
//! for completions, and perftest-style reports.

#![allow(dead_code)] // each tool uses part of it

pub mod tsc;

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use qhca::conn::{self, ConnInfo};
use qhca::{
    Access, Ah, AhAttr, ConnOpts, Context, Cq, Error, Gid, MrBuf, Pd, Qp, QpCaps, SendWr, UdDest,
    Wc, WcStatus, GRH_SIZE,
};

/// Options both tools take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Opts {
    /// `-d NAME`: the device (default: the first).
    pub dev: Option<String>,
    /// `-p PORT`: TCP port (default 18515, as perftest).
    pub port: u16,
    /// `-s BYTES`: message size.
    pub size: usize,
    /// `-n N`: iterations.
    pub iters: u64,
    /// `-m BYTES`: path MTU, 256..4096.
    pub mtu: u32,
    /// `-t N`: send queue depth (outstanding requests in bandwidth tests).
    pub tx_depth: u32,
    /// `-r N`: receive queue depth (receives kept posted); 0: as `tx_depth`.
    pub rx_depth: u32,
    /// Unreliable datagram instead of RC (set by the tool from its mode, not an option).
    pub ud: bool,
    /// RC RNR retries (set by the tool: perftest's bandwidth tests retry for ever, 7).
    pub rnr_retry: u8,
    /// `-c`: check the data of every message (pingpong).
    pub check: bool,
    /// `--loopback`: both sides in this process, on two QPs.
    pub loopback: bool,
    /// `--one-thread` (with `--loopback`): one thread drives both sides in turn, so no handoff
    /// between two spinning threads is measured: the device's own latency.
    pub one_thread: bool,
    /// `-x N`: send from entry N of the port's GID table and name that GID in the connection
    /// record, as perftest's `-x`: the peer's QP (RC) or address handle (UD) sends to it.
    /// Without it an RC QP talks through its port's GID 0, both ends on one device, as before
    /// the GID table; UD sends from GID 0.
    pub gid_index: Option<u8>,
    /// Positional words: the mode (perf), then the server to connect to (client side).
    pub words: Vec<String>,
    /// `-h`.
    pub help: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            dev: None,
            port: 18515,
            size: 2,
            iters: 1000,
            mtu: 4096,
            tx_depth: 128,
            rx_depth: 0,
            ud: false,
            rnr_retry: ConnOpts::default().rnr_retry,
            check: false,
            loopback: false,
            one_thread: false,
            gid_index: None,
            words: Vec::new(),
            help: false,
        }
    }
}

fn num<T: std::str::FromStr>(opt: &str, v: Option<String>) -> Result<T, String> {
    let v = v.ok_or_else(|| format!("option {opt} needs a value"))?;
    let (digits, mult) = match v.strip_suffix(['k', 'K']) {
        Some(d) => (d, 1024u64),
        None => match v.strip_suffix(['m', 'M']) {
            Some(d) => (d, 1024 * 1024),
            None => (v.as_str(), 1),
        },
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("option {opt}: {v:?} is not a number"))?;
    n.checked_mul(mult)
        .map(|x| x.to_string())
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("option {opt}: {v:?} is out of range"))
}

/// Parses the command line (without the program name).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(v.to_owned())),
            _ => (a.clone(), None),
        };
        let mut val = || inline.clone().or_else(|| it.next());
        match name.as_str() {
            "-h" | "--help" => o.help = true,
            "-d" | "--ib-dev" => o.dev = Some(val().ok_or("option -d needs a device name")?),
            "-p" | "--port" => o.port = num(&name, val())?,
            "-s" | "--size" => o.size = num(&name, val())?,
            "-n" | "--iters" => o.iters = num(&name, val())?,
            "-m" | "--mtu" => o.mtu = num(&name, val())?,
            "-t" | "--tx-depth" => o.tx_depth = num(&name, val())?,
            "-r" | "--rx-depth" => o.rx_depth = num(&name, val())?,
            "-c" | "--chk" | "--check" => o.check = true,
            "--loopback" => o.loopback = true,
            "--one-thread" => o.one_thread = true,
            "-x" | "--gid-index" => o.gid_index = Some(num(&name, val())?),
            s if s.starts_with('-') && s.len() > 1 => return Err(format!("unknown option {s}")),
            _ => o.words.push(a),
        }
    }
    if o.size == 0 {
        return Err("size must be at least 1 byte".into());
    }
    if o.iters == 0 {
        return Err("iterations must be at least 1".into());
    }
    if !(256..=4096).contains(&o.mtu) || !o.mtu.is_power_of_two() {
        return Err(format!(
            "MTU {} is not one of 256, 512, 1024, 2048, 4096",
            o.mtu
        ));
    }
    if o.tx_depth == 0 || o.tx_depth > 1 << 15 {
        return Err(format!("tx depth {} is not in 1..=32768", o.tx_depth));
    }
    if o.rx_depth > 1 << 15 {
        return Err(format!("rx depth {} is not in 1..=32768", o.rx_depth));
    }
    if let Some(x) = o
        .gid_index
        .filter(|&x| usize::from(x) >= qhca::GID_TABLE_LEN)
    {
        return Err(format!(
            "GID index {x} is not in 0..{}",
            qhca::GID_TABLE_LEN
        ));
    }
    Ok(o)
}

/// A context on `-d NAME` (the RDMA core's name of a qhca device, `rocep0s10` as `ibv_devices`
/// lists it, or `qhcaN`, the N-th qhca device: its uverbs node), on `-d PATH` (a node:
/// `/dev/infiniband/uverbs0`), or on the first device.
pub fn open_ctx(dev: Option<&str>) -> qhca::Result<Arc<Context>> {
    Ok(Arc::new(Context::open(qhca::node_of(dev)?)?))
}

/// Which side of the TCP exchange this is.
pub enum Role<'a> {
    /// Accept on this listener.
    Server(&'a TcpListener),
    /// Connect to this `host:port`.
    Client(&'a str),
}

/// The Q_Key of the tools' UD QPs (perftest's `DEFF_QKEY`).
pub const QKEY: u32 = 0x1111_1111;

/// Where a UD side's datagrams go: the peer's QP through an address handle to its port.
pub struct UdPeer {
    pub dest: UdDest,
    pub ah: Ah,
}

/// One side of a connection, ready to run: QP in RTS against the peer, a registered buffer of
/// `2 * slot` bytes (the peer's target at 0, our source at `slot`), one CQ for both queues.
///
/// With [`Opts::ud`] the QP is UD, in RTS, and `ud` says where its datagrams go; at 0 is
/// where datagrams land (a GRH, then the message), and `slot` has room for both.
pub struct Side {
    // Field order is teardown order; the QP holds the CQ and PD anyway.
    pub qp: Qp,
    pub ud: Option<UdPeer>,
    pub cq: Cq,
    pub mr: MrBuf,
    pub pd: Pd,
    pub ctx: Arc<Context>,
    pub remote: ConnInfo,
    pub stream: TcpStream,
    /// Bytes of each half of the buffer: the message size rounded up to 8 (atomics need 8).
    pub slot: usize,
    /// The QP's inline limit.
    pub max_inline: u32,
}

/// The largest inline message the tools ask for.
pub const MAX_INLINE: u32 = 64;

impl Side {
    /// Bytes a receive needs for a message of `size` bytes: the GRH first on UD.
    pub fn recv_len(&self, size: usize) -> u32 {
        (size + if self.ud.is_some() { GRH_SIZE } else { 0 }) as u32
    }

    /// `wr` as this side sends it: to the peer's QP through its address handle on UD, as it
    /// is on RC (whose peer is fixed).
    pub fn route<'a>(&self, wr: SendWr<'a>) -> SendWr<'a> {
        match &self.ud {
            Some(u) => wr.to_ud(u.dest),
            None => wr,
        }
    }
}

/// The GID at `index` of the context's port: GID 0 from the device's attributes, another
/// from its GID table (an [`Error::Invalid`] naming the fix if that entry is empty).
pub fn port_gid(ctx: &Context, index: u8) -> qhca::Result<Gid> {
    if index == 0 {
        return Ok(ctx.gid());
    }
    let port = ctx.query_port()?;
    match port.gid(index) {
        Some(e) => Ok(e.gid),
        None => Err(Error::Invalid {
            what: format!(
                "GID index {index} is empty on {} (qhca-info addr lists the table, qhca-info \
                 addr add gives the port an address)",
                ctx.path().display()
            ),
        }),
    }
}

/// Sets up one side: context, PD, buffer, CQ, QP; exchanges connection records; connects
/// (RC), or makes an address handle to the peer's port (UD, [`Opts::ud`]).
pub fn setup(o: &Opts, role: Role<'_>) -> qhca::Result<Side> {
    let ctx = open_ctx(o.dev.as_deref())?;
    let pd = Pd::new(&ctx)?;
    let grh = if o.ud { GRH_SIZE } else { 0 };
    let slot = (o.size + grh).next_multiple_of(8).max(8);
    let mr = pd.reg_mr_buf(2 * slot, Access::ALL)?;
    let depth = o.tx_depth.max(2);
    let rx_depth = if o.rx_depth == 0 {
        depth
    } else {
        o.rx_depth.max(2)
    };
    let cq = Cq::new(&ctx, depth + rx_depth + 2, None)?;
    let caps = QpCaps {
        max_send_wr: depth,
        max_recv_wr: rx_depth,
        max_sge: 1,
        max_inline: MAX_INLINE,
    };
    let qp = if o.ud {
        let qp = Qp::new_ud(&pd, &cq, &cq, &caps)?;
        // Ready before the exchange: the peer may send as soon as it has our record.
        qp.ud_ready(QKEY)?;
        qp
    } else {
        Qp::new(&pd, &cq, &cq, &caps)?
    };
    let mut local: ConnInfo = qp.conn_info(conn::random_psn()).with_region(&mr);
    // A GID in the record when asked for, and always on UD (the peer's handle names it).
    let gid_index = o.gid_index.unwrap_or(0);
    if o.gid_index.is_some() || o.ud {
        local = local.with_gid(port_gid(&ctx, gid_index)?, gid_index);
    }
    let (mut stream, remote) = match role {
        Role::Server(l) => conn::accept_exchange(l, &local, EXCHANGE_TIMEOUT)?,
        Role::Client(addr) => conn::connect_exchange(addr, &local, EXCHANGE_TIMEOUT)?,
    };
    let ud = if o.ud {
        if remote.gid.is_zero() {
            return Err(Error::Protocol {
                what: "the peer's record names no GID (UD needs it)".into(),
            });
        }
        let ah = pd.create_ah(&AhAttr::new(remote.gid).from_index(gid_index))?;
        Some(UdPeer {
            dest: ah.dest(remote.qpn, QKEY),
            ah,
        })
    } else {
        let opts = ConnOpts {
            path_mtu: o.mtu.trailing_zeros() as u8,
            rnr_retry: o.rnr_retry,
            ..ConnOpts::default()
        };
        qp.connect(&local, &remote, &opts)?;
        None
    };
    conn::sync(&mut stream)?;
    Ok(Side {
        qp,
        ud,
        cq,
        mr,
        pd,
        ctx,
        remote,
        stream,
        slot,
        max_inline: MAX_INLINE,
    })
}

/// How long a tool waits for one completion before giving up.
pub const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a tool waits for its peer in the TCP exchange and the barriers.
pub const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Spins on the CQ until a completion arrives; an error status is an error. A device that
/// goes away ends the wait with [`Error::Disassociated`] within a few milliseconds
/// ([`Every`]); a completion that arrives in time costs no system call and no clock read.
pub fn wait_wc(ctx: &Context, cq: &mut Cq) -> qhca::Result<Wc> {
    let mut wc = [Wc::default(); 1];
    let mut every = Every::new();
    while cq.poll(&mut wc) == 0 {
        every.tick(ctx, COMPLETION_TIMEOUT, "completion")?;
        std::hint::spin_loop();
    }
    if wc[0].status != WcStatus::Success {
        return Err(Error::Invalid {
            what: format!(
                "completion of wr_id {} failed: {:?} (vendor_err {:#x})",
                wc[0].wr_id, wc[0].status, wc[0].vendor_err
            ),
        });
    }
    Ok(wc[0])
}

/// Paces the checks of a spin loop that found nothing: every [`qhca::LIVENESS_INTERVAL`] it asks
/// the driver whether the context is still there (one `poll(2)`), and after a timeout it gives
/// up. Timed with the cycle counter ([`tsc`]), so a loop that finds its completion in time makes
/// no system call and reads no clock.
pub struct Every {
    start: u64,
    next: u64,
    spins: u32,
}

impl Every {
    pub fn new() -> Self {
        Every {
            start: tsc::now(),
            next: tsc::ticks(qhca::LIVENESS_INTERVAL),
            spins: 0,
        }
    }

    /// One empty turn of the loop: checks `ctx` every few milliseconds, and fails after
    /// `timeout` with `what`.
    pub fn tick(
        &mut self,
        ctx: &Context,
        timeout: Duration,
        what: &'static str,
    ) -> qhca::Result<()> {
        self.spins = self.spins.wrapping_add(1);
        if self.spins % 256 != 0 {
            return Ok(());
        }
        let t = tsc::now().wrapping_sub(self.start);
        if t > tsc::ticks(timeout) {
            return Err(Error::Timeout {
                what,
                after: timeout,
            });
        }
        if t >= self.next {
            ctx.check()?;
            self.next = t + tsc::ticks(qhca::LIVENESS_INTERVAL);
        }
        Ok(())
    }
}

/// Spins until `cond` holds (a flag a peer's WRITE sets), or times out, or the device goes
/// away.
pub fn spin_until(ctx: &Context, mut cond: impl FnMut() -> bool) -> qhca::Result<()> {
    let mut every = Every::new();
    while !cond() {
        every.tick(ctx, COMPLETION_TIMEOUT, "the peer's write")?;
        std::hint::spin_loop();
    }
    Ok(())
}

/// One perftest-style result line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Report {
    pub bytes: usize,
    pub iters: u64,
    pub t_min: f64,
    pub t_typical: f64,
    pub t_max: f64,
    pub bw_mbs: f64,
    pub mpps: f64,
}

/// The column header.
pub const HEADER: &str =
    " #bytes     #iterations    t_min[usec]    t_typical[usec]    t_max[usec]    BW[MB/s]    MsgRate[Mpps]";

impl Report {
    /// From per-iteration times (usec) and the whole run's duration: t_typical is the median;
    /// bandwidth and message rate are over the whole run.
    pub fn new(bytes: usize, samples: &mut [f64], total: Duration) -> Report {
        samples.sort_by(f64::total_cmp);
        let iters = samples.len() as u64;
        let secs = total.as_secs_f64().max(1e-9);
        Report {
            bytes,
            iters,
            t_min: samples.first().copied().unwrap_or(0.0),
            t_typical: samples.get(samples.len() / 2).copied().unwrap_or(0.0),
            t_max: samples.last().copied().unwrap_or(0.0),
            bw_mbs: bytes as f64 * iters as f64 / secs / 1e6,
            mpps: iters as f64 / secs / 1e6,
        }
    }

    /// The line under [`HEADER`].
    pub fn line(&self) -> String {
        format!(
            " {:<10} {:<14} {:<14.2} {:<18.2} {:<14.2} {:<11.2} {:.6}",
            self.bytes, self.iters, self.t_min, self.t_typical, self.t_max, self.bw_mbs, self.mpps
        )
    }
}

/// Runs `server` on a thread against a listener on 127.0.0.1 (any free port) and `client` here,
/// connected to it: both sides in one process, each with its own context and QP.
pub fn run_loopback<S, C>(server: S, client: C) -> qhca::Result<()>
where
    S: FnOnce(&TcpListener) -> qhca::Result<()> + Send + 'static,
    C: FnOnce(&str) -> qhca::Result<()>,
{
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| Error::Sys {
        op: "bind 127.0.0.1",
        source: qhca::Errno::from_raw(e.raw_os_error().unwrap_or(qhca::Errno::EIO as i32)),
    })?;
    let addr = l
        .local_addr()
        .map_err(|_| Error::Invalid {
            what: "listener without an address".into(),
        })?
        .to_string();
    let t = std::thread::spawn(move || server(&l));
    let c = client(&addr);
    if c.is_err() {
        // The client may have failed before connecting: a connection that closes at once gets
        // the server out of accept() (its exchange then fails), so the join cannot hang.
        drop(TcpStream::connect(&addr));
    }
    let s = t.join().unwrap_or_else(|_| {
        Err(Error::Invalid {
            what: "server thread panicked".into(),
        })
    });
    c.and(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn parses_options() {
        let o = parse(args(
            "write_lat -s 4k -n 100 -d qhca1 --port=7000 -m 1024 host",
        ))
        .unwrap();
        assert_eq!(o.size, 4096);
        assert_eq!(o.iters, 100);
        assert_eq!(o.dev.as_deref(), Some("qhca1"));
        assert_eq!(o.port, 7000);
        assert_eq!(o.mtu, 1024);
        assert_eq!(o.words, ["write_lat", "host"]);
        let o = parse(args("--loopback -c -t 16 -s 1M --one-thread -r 512")).unwrap();
        assert!(o.loopback && o.check && o.one_thread && !o.ud);
        assert_eq!((o.tx_depth, o.size, o.rx_depth), (16, 1 << 20, 512));
        assert_eq!(parse(args("")).unwrap(), Opts::default());
        assert_eq!(parse(args("-x 3 host")).unwrap().gid_index, Some(3));
        assert_eq!(parse(args("--gid-index=0")).unwrap().gid_index, Some(0));
        for bad in [
            "-s 0", "-n 0", "-m 300", "-m 8192", "-t 0", "-x", "-x 16", "-x 300", "-s", "-s abc",
            "-p 70000", "-r 40000",
        ] {
            assert!(parse(args(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn report_columns() {
        let mut s = [3.0, 1.0, 2.0, 10.0];
        let r = Report::new(64, &mut s, Duration::from_micros(16));
        assert_eq!((r.t_min, r.t_typical, r.t_max), (1.0, 3.0, 10.0));
        assert_eq!(r.iters, 4);
        assert!((r.bw_mbs - 16.0).abs() < 1e-9, "{}", r.bw_mbs);
        assert!((r.mpps - 0.25).abs() < 1e-9);
        let line = r.line();
        assert!(
            line.starts_with(" 64         4              1.00"),
            "{line}"
        );
        assert_eq!(HEADER.split_whitespace().count(), 7);
        assert_eq!(line.split_whitespace().count(), 7);
    }
}
