// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `qhca-perf`: perftest's ib_*_lat / ib_*_bw for qhca devices.
//!
//! ```text
//! qhca-perf MODE [-s SIZE] [-n ITERS] [-d DEV] [-p PORT] [-m MTU] [-t DEPTH]   (server)
//! qhca-perf MODE [options] HOST                                               (client)
//! qhca-perf MODE [options] --loopback                                         (both, one process)
//! ```
//!
//! MODE is write_lat, write_bw, send_lat, read_lat or atomic_lat. The client prints
//! perftest's columns. Like perftest, it times with the cycle counter (`rdtsc`, calibrated
//! against the clock once at start), so its timed loops make no system call even on a guest
//! whose clocksource the vDSO cannot read.

#[path = "../common/mod.rs"]
mod common;

use std::net::TcpListener;
use std::process::ExitCode;

use common::{setup, spin_until, tsc, wait_wc, Opts, Report, Role, Side, HEADER};
use qhca::conn;
use qhca::{RecvWr, SendFlags, SendWr, WrOp};

const USAGE: &str = "\
Usage: qhca-perf MODE [options] [HOST]
Measures qhca latency or bandwidth like perftest. Without HOST: the server side; with HOST: the
client, which prints the results; with --loopback: both sides in this process, on two QPs.

Modes: write_lat write_bw send_lat read_lat atomic_lat

Options:
  -s, --size=BYTES      message size (default 2; atomic_lat: always 8; k/M suffixes)
  -n, --iters=N         iterations (default 1000)
  -d, --ib-dev=NAME     device (default: the first qhca device)
  -p, --port=PORT       TCP port for the connection exchange (default 18515)
  -m, --mtu=BYTES       path MTU: 256, 512, 1024, 2048 or 4096 (default 4096)
  -t, --tx-depth=N      outstanding requests in write_bw (default 128)
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
    ReadLat,
    AtomicLat,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "write_lat" => Mode::WriteLat,
            "write_bw" => Mode::WriteBw,
            "send_lat" => Mode::SendLat,
            "read_lat" => Mode::ReadLat,
            "atomic_lat" => Mode::AtomicLat,
            _ => return None,
        })
    }
}

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

fn send_lat(s: &mut Side, o: &Opts, client: bool) -> qhca::Result<Option<Report>> {
    let size = o.size;
    let recv_sge = [s.mr.sge(0, size as u32)];
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
        s.qp.post_send(&[message(s, WrOp::Send, &send_sge, &inline).with_flags(flags)])?;
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
    let size = o.size;
    let op = WrOp::Write {
        raddr: s.remote.addr,
        rkey: s.remote.rkey,
    };
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
            s.qp.post_send(&[SendWr::new(posted, op, &sge)])?;
            posted += 1;
        }
        let n = s.cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            if !wc.status.is_ok() {
                return Err(qhca::Error::Invalid {
                    what: format!("write {} failed: {:?}", wc.wr_id, wc.status),
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
                "write_bw completions",
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

/// Runs `mode` on a connected side; the client returns the report.
fn run(mode: Mode, o: &Opts, role: Role<'_>) -> qhca::Result<Option<Report>> {
    let client = matches!(role, Role::Client(_));
    let mut s = setup(o, role)?;
    let r = match (mode, client) {
        (Mode::WriteLat, _) => write_lat(&mut s, o, client)?,
        (Mode::SendLat, _) => send_lat(&mut s, o, client)?,
        (Mode::WriteBw, true) => Some(write_bw(&mut s, o)?),
        (Mode::ReadLat | Mode::AtomicLat, true) => Some(one_sided_lat(&mut s, o, mode)?),
        // One-sided modes: the server only lends its memory.
        (_, false) => None,
    };
    conn::sync(&mut s.stream)?;
    Ok(r)
}

fn print(mode: Mode, r: &Report) {
    println!("{:-<100}", "");
    println!(" qhca-perf {mode:?}");
    println!("{HEADER}");
    println!("{}", r.line());
    println!("{:-<100}", "");
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
    let err = |e: qhca::Error| e.to_string();
    // Times are read from the cycle counter, as perftest does: measure its rate now, so that
    // no timed loop reads the clock.
    tsc::calibrate();
    if o.one_thread {
        let r = run_one_thread(&o).map_err(err)?;
        print(mode, &r);
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
            "read_lat",
            "atomic_lat",
        ] {
            assert!(Mode::parse(m).is_some(), "{m}");
        }
        assert_eq!(Mode::parse("bogus"), None);
        assert_eq!(tag(0), 1);
        assert_eq!(tag(254), 255);
        assert_eq!(tag(255), 1);
        assert!((0..1000).all(|i| tag(i) != 0 && tag(i) != tag(i + 1)));
    }
}
