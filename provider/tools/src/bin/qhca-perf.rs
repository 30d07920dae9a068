// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `qhca-perf`: perftest's ib_*_lat / ib_*_bw for qhca devices.
//!
//! ```text
//! qhca-perf MODE [-s SIZE] [-n ITERS] [-d DEV] [-p PORT] [-m MTU] [-t DEPTH]   (server)
//! qhca-perf MODE [options] HOST                                               (client)
//! qhca-perf MODE [options] --loopback                                         (both, one process)
//! ```
//!
//! MODE is write_lat, write_bw, send_lat, send_bw, read_lat or atomic_lat on RC QPs, or
//! ud_send_lat / ud_send_bw on UD QPs (perftest's `ib_send_lat -c UD` / `ib_send_bw -c UD`).
//! The client prints perftest's columns. Like perftest, it times with the cycle counter
//! (`rdtsc`, calibrated against the clock once at start), so its timed loops make no system
//! call even on a guest whose clocksource the vDSO cannot read.
//!
//! send_bw and ud_send_bw: the client sends, the server keeps receives posted and, after the
//! run, tells the client how many messages arrived (on UD, a datagram that finds no receive
//! posted is dropped); the client prints that under the table.

#[path = "../common/mod.rs"]
mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use common::{setup, spin_until, tsc, wait_wc, Opts, Report, Role, Side, HEADER};
use qhca::conn;
use qhca::{RecvWr, SendFlags, SendWr, WrOp};

const USAGE: &str = "\
Usage: qhca-perf MODE [options] [HOST]
Measures qhca latency or bandwidth like perftest. Without HOST: the server side; with HOST: the
client, which prints the results; with --loopback: both sides in this process, on two QPs.

Modes: write_lat write_bw send_lat send_bw read_lat atomic_lat (RC)
       ud_send_lat ud_send_bw (UD: perftest's -c UD; at most 4096 bytes and the MTU)

Options:
  -s, --size=BYTES      message size (default 2; atomic_lat: always 8; k/M suffixes)
  -n, --iters=N         iterations (default 1000)
  -d, --ib-dev=NAME     device (default: the first qhca device); or its node,
                        /dev/infiniband/uverbsN
  -p, --port=PORT       TCP port for the connection exchange (default 18515)
  -m, --mtu=BYTES       path MTU: 256, 512, 1024, 2048 or 4096 (default 4096)
  -t, --tx-depth=N      outstanding requests in write_bw and send_bw (default 128)
  -r, --rx-depth=N      receives kept posted by send_bw's receiver (default 512)
  -x, --gid-index=N     send from GID N of the port and name it to the peer (as
                        perftest's -x; default: RC none named, both ends on one device;
                        UD GID 0)
      --loopback        run server and client in this process
      --one-thread      with --loopback, write_lat only: one thread drives both QPs in
                        turn (the device's latency, without a handoff between threads)
  -h, --help            show this help
";

/// The benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    WriteLat,
    WriteBw,
    SendLat,
    SendBw,
    ReadLat,
    AtomicLat,
    UdSendLat,
    UdSendBw,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "write_lat" => Mode::WriteLat,
            "write_bw" => Mode::WriteBw,
            "send_lat" => Mode::SendLat,
            "send_bw" => Mode::SendBw,
            "read_lat" => Mode::ReadLat,
            "atomic_lat" => Mode::AtomicLat,
            "ud_send_lat" => Mode::UdSendLat,
            "ud_send_bw" => Mode::UdSendBw,
            _ => return None,
        })
    }

    /// On UD QPs.
    fn is_ud(self) -> bool {
        matches!(self, Mode::UdSendLat | Mode::UdSendBw)
    }

    /// A stream of SENDs to a receiver that keeps receives posted.
    fn is_send_bw(self) -> bool {
        matches!(self, Mode::SendBw | Mode::UdSendBw)
    }
}

/// Receives perftest's bandwidth tests keep posted (its default `--rx-depth`).
const BW_RX_DEPTH: u32 = 512;
/// How long a send_bw receiver waits for more once the sender says it is done (datagrams
/// still on their way).
const DRAIN: Duration = Duration::from_millis(20);

/// Tag of iteration `i` in the last byte of a write_lat message: never 0 (the buffer's initial
/// value), and different from the previous iteration's.
fn tag(i: u64) -> u8 {
    (i % 255 + 1) as u8
}

/// The send request of one message from our source half to the peer's target half: inline when
/// it fits.
fn message<'a>(s: &Side, op: WrOp, sge: &'a [qhca::Sge], inline: &'a [u8]) -> SendWr<'a> {
    if inline.len() <= s.max_inline as usize && op.may_inline() {
        SendWr::inline(0, op, inline)
    } else {
        SendWr::new(0, op, sge)
    }
}

fn write_lat(s: &mut Side, o: &Opts, client: bool) -> qhca::Result<Option<Report>> {
    let size = o.size;
    let raddr = s.remote.addr;
    let op = WrOp::Write {
        raddr,
        rkey: s.remote.rkey,
    };
    let sge = [s.mr.sge(s.slot, size as u32)];
    let mut buf = vec![0u8; size];
    let mut samples = Vec::with_capacity(o.iters as usize);
    let start = tsc::now();
    for i in 0..o.iters {
        let t0 = tsc::now();
        if !client {
            spin_until(&s.ctx, || s.mr.load_u8(size - 1) == tag(i))?;
        }
        // The message: inline from `buf`, or from our source half; either way ending in the tag.
        buf[size - 1] = tag(i);
        s.mr.write_at(s.slot + size - 1, &[tag(i)]);
        s.qp.post_send(&[message(s, op, &sge, &buf)])?;
        wait_wc(&s.ctx, &mut s.cq)?;
        if client {
            spin_until(&s.ctx, || s.mr.load_u8(size - 1) == tag(i))?;
            samples.push(tsc::us(tsc::now() - t0) / 2.0);
        }
    }
    Ok(client.then(|| Report::new(size, &mut samples, tsc::duration(tsc::now() - start))))
}

/// write_lat with both sides driven by this one thread: the client writes the tag into the
/// server's buffer, the server sees it and writes it back, the client sees it. The same
/// messages as [`write_lat`], without the handoff between two spinning threads (and the two
/// vCPUs they need), so what is timed is the device's round trip.
fn write_lat_one_thread(c: &mut Side, s: &mut Side, o: &Opts) -> qhca::Result<Report> {
    let size = o.size;
    let to_server = WrOp::Write {
        raddr: c.remote.addr,
        rkey: c.remote.rkey,
    };
    let to_client = WrOp::Write {
        raddr: s.remote.addr,
        rkey: s.remote.rkey,
    };
    let (c_sge, s_sge) = (
        [c.mr.sge(c.slot, size as u32)],
        [s.mr.sge(s.slot, size as u32)],
    );
    let mut buf = vec![0u8; size];
    let mut samples = Vec::with_capacity(o.iters as usize);
    let start = tsc::now();
    for i in 0..o.iters {
        let t0 = tsc::now();
        buf[size - 1] = tag(i);
        c.mr.write_at(c.slot + size - 1, &[tag(i)]);
        c.qp.post_send(&[message(c, to_server, &c_sge, &buf)])?;
        wait_wc(&c.ctx, &mut c.cq)?;
        spin_until(&s.ctx, || s.mr.load_u8(size - 1) == tag(i))?;
        s.mr.write_at(s.slot + size - 1, &[tag(i)]);
        s.qp.post_send(&[message(s, to_client, &s_sge, &buf)])?;
        wait_wc(&s.ctx, &mut s.cq)?;
        spin_until(&c.ctx, || c.mr.load_u8(size - 1) == tag(i))?;
        samples.push(tsc::us(tsc::now() - t0) / 2.0);
    }
    Ok(Report::new(
        size,
        &mut samples,
        tsc::duration(tsc::now() - start),
    ))
}

/// `--loopback --one-thread`: both sides are set up as for `--loopback` (the server's in a
/// thread of its own, for the TCP exchange), then the server hands its side over and this
/// thread runs [`write_lat_one_thread`].
fn run_one_thread(o: &Opts) -> qhca::Result<Report> {
    let (tx, rx) = std::sync::mpsc::channel();
    let so = o.clone();
    let mut out = None;
    common::run_loopback(
        move |l| {
            let side = setup(&so, Role::Server(l))?;
            tx.send(side).map_err(|_| qhca::Error::Invalid {
                what: "the client thread is gone".into(),
            })
        },
        |addr| {
            let mut c = setup(o, Role::Client(addr))?;
            let mut s = rx.recv().map_err(|_| qhca::Error::Invalid {
                what: "the server side was not set up".into(),
            })?;
            out = Some(write_lat_one_thread(&mut c, &mut s, o)?);
            Ok(())
        },
    )?;
    out.ok_or_else(|| qhca::Error::Invalid {
        what: "no result".into(),
    })
}

/// SEND ping-pong, as ib_send_lat: each side keeps receives posted (reposting each one as it
/// completes, before it answers, so a UD datagram always finds one); the client sends, the
/// server answers when its receive completes.
fn send_lat(s: &mut Side, o: &Opts, client: bool) -> qhca::Result<Option<Report>> {
    let size = o.size;
    let recv_sge = [s.mr.sge(0, s.recv_len(size))];
    let send_sge = [s.mr.sge(s.slot, size as u32)];
    let mut inline = vec![0u8; size.min(s.max_inline as usize)];
    s.mr.read_at(s.slot, &mut inline);
    let depth = s.qp.layout().rq_depth().min(16);
    for _ in 0..depth {
        s.qp.post_recv(&[RecvWr {
            wr_id: 1,
            sges: &recv_sge,
        }])?;
    }
    conn::sync(&mut s.stream)?; // every receive is posted on both sides before the first send
    let mut samples = Vec::with_capacity(o.iters as usize);
    let start = tsc::now();
    let wait_recv = |s: &mut Side| -> qhca::Result<()> {
        loop {
            let wc = wait_wc(&s.ctx, &mut s.cq)?;
            if wc.is_recv {
                return s
                    .qp
                    .post_recv(&[RecvWr {
                        wr_id: 1,
                        sges: &recv_sge,
                    }])
                    .map_err(Into::into);
            }
        }
    };
    let mut sends_pending = 0u32;
    for _ in 0..o.iters {
        let t0 = tsc::now();
        if !client {
            wait_recv(s)?;
        }
        // Unsignaled sends, a signaled one every half queue to free the slots.
        sends_pending += 1;
        let flags = if sends_pending >= s.qp.layout().sq_depth() / 2 {
            sends_pending = 0;
            SendFlags::SIGNALED
        } else {
            SendFlags::NONE
        };
        s.qp.post_send(&[s.route(message(s, WrOp::Send, &send_sge, &inline).with_flags(flags))])?;
        if client {
            wait_recv(s)?;
            samples.push(tsc::us(tsc::now() - t0) / 2.0);
        }
    }
    Ok(client.then(|| Report::new(size, &mut samples, tsc::duration(tsc::now() - start))))
}

fn one_sided_lat(s: &mut Side, o: &Opts, mode: Mode) -> qhca::Result<Report> {
    let (size, op) = match mode {
        Mode::ReadLat => (
            o.size,
            WrOp::Read {
                raddr: s.remote.addr,
                rkey: s.remote.rkey,
            },
        ),
        _ => (
            8,
            WrOp::FetchAdd {
                raddr: s.remote.addr,
                rkey: s.remote.rkey,
                add: 1,
            },
        ),
    };
    let sge = [s.mr.sge(s.slot, size as u32)];
    let mut samples = Vec::with_capacity(o.iters as usize);
    let start = tsc::now();
    for i in 0..o.iters {
        let t0 = tsc::now();
        s.qp.post_send(&[SendWr::new(i, op, &sge)])?;
        wait_wc(&s.ctx, &mut s.cq)?;
        samples.push(tsc::us(tsc::now() - t0));
    }
    let total = tsc::duration(tsc::now() - start);
    if mode == Mode::AtomicLat {
        let last = s.mr.read_u64(s.slot);
        if last != o.iters - 1 {
            return Err(qhca::Error::Invalid {
                what: format!(
                    "last fetch-and-add returned {last}, expected {}",
                    o.iters - 1
                ),
            });
        }
    }
    Ok(Report::new(size, &mut samples, total))
}

fn write_bw(s: &mut Side, o: &Opts) -> qhca::Result<Report> {
    let op = WrOp::Write {
        raddr: s.remote.addr,
        rkey: s.remote.rkey,
    };
    stream_bw(s, o, op, "write")
}

/// Streams `o.iters` requests of `op` from our source half, `tx_depth` outstanding, every one
/// signaled (as perftest's bandwidth tests), each completion a sample.
fn stream_bw(s: &mut Side, o: &Opts, op: WrOp, what: &str) -> qhca::Result<Report> {
    let size = o.size;
    let sge = [s.mr.sge(s.slot, size as u32)];
    let depth = u64::from(o.tx_depth.min(s.qp.layout().sq_depth()));
    let mut samples = Vec::with_capacity(o.iters as usize);
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wcs = [qhca::Wc::default(); 16];
    let start = tsc::now();
    let mut last = start;
    let mut every = common::Every::new();
    while done < o.iters {
        while posted < o.iters && posted - done < depth {
            s.qp.post_send(&[s.route(SendWr::new(posted, op, &sge))])?;
            posted += 1;
        }
        let n = s.cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            if !wc.status.is_ok() {
                return Err(qhca::Error::Invalid {
                    what: format!("{what} {} failed: {:?}", wc.wr_id, wc.status),
                });
            }
            let now = tsc::now();
            samples.push(tsc::us(now - last));
            last = now;
        }
        done += n as u64;
        if n == 0 {
            // Every few ms of nothing: is the device still there? (No system call otherwise.)
            every.tick(
                &s.ctx,
                common::COMPLETION_TIMEOUT * 10,
                "bandwidth completions",
            )?;
        } else {
            every = common::Every::new();
        }
    }
    Ok(Report::new(
        size,
        &mut samples,
        tsc::duration(tsc::now() - start),
    ))
}

/// An I/O error on the TCP stream, as the provider's.
fn io_err(op: &'static str) -> impl Fn(std::io::Error) -> qhca::Error {
    move |e| qhca::Error::Sys {
        op,
        source: qhca::Errno::from_raw(e.raw_os_error().unwrap_or(qhca::Errno::EIO as i32)),
    }
}

/// send_bw's sender (the client), as ib_send_bw's: SENDs streamed `tx_depth` deep from our
/// source half, every one signaled, to a receiver that keeps receives posted. Returns the
/// report and how many messages the receiver got (fewer on UD if it dropped some: no receive
/// posted in time).
fn send_bw(s: &mut Side, o: &Opts) -> qhca::Result<(Report, u64)> {
    conn::sync(&mut s.stream)?; // the receiver's receives are posted
    let r = stream_bw(s, o, WrOp::Send, "send")?;
    conn::sync(&mut s.stream)?; // done sending
    let mut got = [0u8; 8];
    s.stream
        .read_exact(&mut got)
        .map_err(io_err("receive the count of messages received"))?;
    Ok((r, u64::from_le_bytes(got)))
}

/// True once the peer has written something on the stream (its "done" sync byte), without
/// taking it.
fn peer_spoke(stream: &TcpStream) -> qhca::Result<bool> {
    stream
        .set_nonblocking(true)
        .map_err(io_err("set O_NONBLOCK"))?;
    let r = stream.peek(&mut [0u8; 1]);
    stream
        .set_nonblocking(false)
        .map_err(io_err("clear O_NONBLOCK"))?;
    match r {
        Ok(0) => Err(qhca::Error::PeerClosed { during: "send_bw" }),
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(false),
        Err(e) => Err(io_err("peek at the stream")(e)),
    }
}

/// send_bw's receiver (the server): keeps its whole receive queue posted into one buffer,
/// reposting each receive as it completes, until `iters` messages arrived or, once the sender
/// says it is done, nothing more arrives for [`DRAIN`] (UD drops what finds no receive). Then
/// tells the sender how many arrived.
fn send_bw_receiver(s: &mut Side, o: &Opts) -> qhca::Result<()> {
    let recv_sge = [s.mr.sge(0, s.recv_len(o.size))];
    let depth = s.qp.layout().rq_depth() as usize;
    let wrs = vec![
        RecvWr {
            wr_id: 0,
            sges: &recv_sge,
        };
        depth
    ];
    s.qp.post_recv(&wrs)?;
    conn::sync(&mut s.stream)?;
    let mut wcs = [qhca::Wc::default(); 16];
    let mut got = 0u64;
    let mut every = common::Every::new();
    let mut sender_done = false;
    let mut last = tsc::now();
    let mut last_peek = last;
    let (peek_every, drain) = (tsc::ticks(Duration::from_millis(1)), tsc::ticks(DRAIN));
    while got < o.iters {
        let n = s.cq.poll(&mut wcs);
        if let Some(wc) = wcs[..n].iter().find(|wc| !wc.status.is_ok() || !wc.is_recv) {
            return Err(qhca::Error::Invalid {
                what: format!("receive failed: {:?} {:?}", wc.opcode, wc.status),
            });
        }
        if n > 0 {
            got += n as u64;
            s.qp.post_recv(&wrs[..n])?;
            every = common::Every::new();
            last = tsc::now();
            continue;
        }
        every.tick(&s.ctx, common::COMPLETION_TIMEOUT * 10, "send_bw receives")?;
        let now = tsc::now();
        if now.wrapping_sub(last_peek) >= peek_every {
            last_peek = now;
            if !sender_done {
                sender_done = peer_spoke(&s.stream)?;
                last = now;
            } else if now.wrapping_sub(last) >= drain {
                break;
            }
        }
        std::hint::spin_loop();
    }
    conn::sync(&mut s.stream)?;
    s.stream
        .write_all(&got.to_le_bytes())
        .map_err(io_err("send the count of messages received"))
}

/// What the client measured, and for send_bw how many messages the receiver got.
type Outcome = (Report, Option<u64>);

/// Runs `mode` on a connected side; the client returns the report.
fn run(mode: Mode, o: &Opts, role: Role<'_>) -> qhca::Result<Option<Outcome>> {
    let client = matches!(role, Role::Client(_));
    let mut s = setup(o, role)?;
    let only = |r: Option<Report>| r.map(|r| (r, None));
    let r = match (mode, client) {
        (Mode::WriteLat, _) => only(write_lat(&mut s, o, client)?),
        (Mode::SendLat | Mode::UdSendLat, _) => only(send_lat(&mut s, o, client)?),
        (Mode::WriteBw, true) => Some((write_bw(&mut s, o)?, None)),
        (Mode::SendBw | Mode::UdSendBw, true) => {
            let (r, got) = send_bw(&mut s, o)?;
            Some((r, Some(got)))
        }
        (Mode::SendBw | Mode::UdSendBw, false) => {
            send_bw_receiver(&mut s, o)?;
            None
        }
        (Mode::ReadLat | Mode::AtomicLat, true) => Some((one_sided_lat(&mut s, o, mode)?, None)),
        // One-sided modes: the server only lends its memory.
        (_, false) => None,
    };
    conn::sync(&mut s.stream)?;
    Ok(r)
}

fn print(mode: Mode, (r, got): &Outcome) {
    println!("{:-<100}", "");
    println!(" qhca-perf {mode:?}");
    println!("{HEADER}");
    println!("{}", r.line());
    println!("{:-<100}", "");
    if let Some(got) = got {
        println!(
            " the receiver got {got} of {} messages ({} dropped)",
            r.iters,
            r.iters.saturating_sub(*got)
        );
    }
}

/// The options `mode` runs with: UD or RC, and the receive depth and RNR retries of
/// perftest's bandwidth tests for send_bw.
fn mode_opts(mode: Mode, mut o: Opts) -> Result<Opts, String> {
    o.ud = mode.is_ud();
    if o.ud {
        let max = qhca::UD_MAX_MSG.min(o.mtu as usize);
        if o.size > max {
            return Err(format!(
                "a UD message is at most the MTU: {} bytes > {max}",
                o.size
            ));
        }
    }
    if mode.is_send_bw() {
        if o.rx_depth == 0 {
            o.rx_depth = BW_RX_DEPTH;
        }
        o.rnr_retry = 7;
    }
    Ok(o)
}

fn main_result(o: Opts) -> Result<(), String> {
    let Some(mode) = o.words.first().and_then(|w| Mode::parse(w)) else {
        return Err(format!("need a MODE\n\n{USAGE}"));
    };
    let host = o.words.get(1).cloned();
    if o.words.len() > 2 || (o.loopback && host.is_some()) {
        return Err("too many arguments (one HOST, and none with --loopback)".into());
    }
    if o.one_thread && !(o.loopback && mode == Mode::WriteLat) {
        return Err("--one-thread goes with --loopback and write_lat".into());
    }
    if o.size > u32::MAX as usize / 2 {
        return Err("size too large".into());
    }
    let o = mode_opts(mode, o)?;
    let err = |e: qhca::Error| e.to_string();
    // Times are read from the cycle counter, as perftest does: measure its rate now, so that
    // no timed loop reads the clock.
    tsc::calibrate();
    if o.one_thread {
        let r = run_one_thread(&o).map_err(err)?;
        print(mode, &(r, None));
        return Ok(());
    }
    if o.loopback {
        let so = o.clone();
        let mut out = None;
        common::run_loopback(
            move |l| run(mode, &so, Role::Server(l)).map(drop),
            |addr| {
                out = run(mode, &o, Role::Client(addr))?;
                Ok(())
            },
        )
        .map_err(err)?;
        if let Some(r) = out {
            print(mode, &r);
        }
        return Ok(());
    }
    match host {
        Some(h) => {
            let addr = format!("{h}:{}", o.port);
            if let Some(r) = run(mode, &o, Role::Client(&addr)).map_err(err)? {
                print(mode, &r);
            }
        }
        None => {
            let l = TcpListener::bind(("0.0.0.0", o.port))
                .map_err(|e| format!("listen on port {}: {e}", o.port))?;
            println!(" waiting for a client on port {} ({mode:?})", o.port);
            run(mode, &o, Role::Server(&l)).map_err(err)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let o = match common::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("qhca-perf: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if o.help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    match main_result(o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qhca-perf: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_tags() {
        for m in [
            "write_lat",
            "write_bw",
            "send_lat",
            "send_bw",
            "read_lat",
            "atomic_lat",
            "ud_send_lat",
            "ud_send_bw",
        ] {
            let mode = Mode::parse(m).unwrap_or_else(|| panic!("{m}"));
            assert_eq!(mode.is_ud(), m.starts_with("ud_"), "{m}");
            assert_eq!(mode.is_send_bw(), m.ends_with("send_bw"), "{m}");
        }
        assert_eq!(Mode::parse("bogus"), None);
        assert_eq!(tag(0), 1);
        assert_eq!(tag(254), 255);
        assert_eq!(tag(255), 1);
        assert!((0..1000).all(|i| tag(i) != 0 && tag(i) != tag(i + 1)));
    }

    #[test]
    fn mode_options() {
        let o = |size, mtu| Opts {
            size,
            mtu,
            ..Opts::default()
        };
        let u = mode_opts(Mode::UdSendBw, o(4096, 4096)).unwrap();
        assert!(u.ud);
        assert_eq!((u.rx_depth, u.rnr_retry), (BW_RX_DEPTH, 7));
        assert!(mode_opts(Mode::UdSendLat, o(4097, 4096)).is_err());
        assert!(mode_opts(Mode::UdSendLat, o(2048, 1024)).is_err());
        let r = mode_opts(Mode::SendLat, o(1 << 20, 4096)).unwrap();
        assert!(!r.ud);
        assert_eq!(r.rx_depth, 0);
        assert_eq!(r.rnr_retry, Opts::default().rnr_retry);
        let b = mode_opts(
            Mode::SendBw,
            Opts {
                rx_depth: 64,
                ..o(65536, 4096)
            },
        )
        .unwrap();
        assert_eq!((b.ud, b.rx_depth, b.rnr_retry), (false, 64, 7));
    }
}
