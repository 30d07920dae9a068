// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `qhca-pingpong`: ibv_rc_pingpong for qhca devices: SEND/RECV ping-pong over an RC QP.
//!
//! ```text
//! qhca-pingpong [-s SIZE] [-n ITERS] [-c] [-d DEV] [-p PORT] [-m MTU] [-x GID_INDEX] (server)
//! qhca-pingpong [options] HOST                                              (client)
//! qhca-pingpong [options] --loopback                                        (both)
//! ```
//!
//! Prints, as ibv_rc_pingpong does, `N bytes in T seconds = X Mbit/sec` and
//! `N iters in T seconds = Y usec/iter`.

#[path = "../common/mod.rs"]
mod common;

use std::net::TcpListener;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::{setup, wait_wc, Opts, Role, Side};
use qhca::conn;
use qhca::{RecvWr, SendWr, WrOp};

const USAGE: &str = "\
Usage: qhca-pingpong [options] [HOST]
SEND/RECV ping-pong over a qhca RC QP, like ibv_rc_pingpong. Without HOST: the server; with
HOST: the client; with --loopback: both in this process, on two QPs.

Options:
  -s, --size=BYTES      message size (default 4096; k/M suffixes)
  -n, --iters=N         round trips (default 1000)
  -c, --chk             check every received message's contents
  -d, --ib-dev=NAME     device (default: the first qhca device); or its node,
                        /dev/infiniband/uverbsN
  -p, --port=PORT       TCP port for the connection exchange (default 18515)
  -m, --mtu=BYTES       path MTU (default 4096)
  -x, --gid-index=N     send from GID N of the port and name it to the peer (as
                        perftest's -x; default: none named, both ends on one device)
      --loopback        run server and client in this process
  -h, --help            show this help
";

/// The byte at `i` of message number `n`: a pattern that changes per message.
fn pattern(n: u64, i: usize) -> u8 {
    (n as usize).wrapping_mul(31).wrapping_add(i) as u8
}

/// Ping-pong: the client sends first; each side answers every message it receives. Returns the
/// elapsed time (for the client's printout).
fn pingpong(s: &mut Side, o: &Opts, client: bool) -> qhca::Result<Duration> {
    let size = o.size;
    let recv_sge = [s.mr.sge(0, size as u32)];
    let send_sge = [s.mr.sge(s.slot, size as u32)];
    s.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &recv_sge,
    }])?;
    conn::sync(&mut s.stream)?;
    let mut msg = vec![0u8; size];
    let start = Instant::now();
    for n in 0..o.iters {
        let send = |s: &mut Side, msg: &mut [u8]| -> qhca::Result<()> {
            if o.check {
                for (i, b) in msg.iter_mut().enumerate() {
                    *b = pattern(n, i);
                }
                s.mr.write_at(s.slot, msg);
            }
            s.qp.post_send(&[SendWr::new(2, WrOp::Send, &send_sge)])?;
            Ok(())
        };
        if client {
            send(s, &mut msg)?;
        }
        // Our send's completion and the peer's message, in either order.
        let (mut sent, mut got) = (!client, false);
        while !(sent && got) {
            let wc = wait_wc(&s.ctx, &mut s.cq)?;
            if wc.is_recv {
                if wc.byte_len as usize != size {
                    return Err(qhca::Error::Invalid {
                        what: format!("message {n}: {} bytes, expected {size}", wc.byte_len),
                    });
                }
                if o.check {
                    s.mr.read_at(0, &mut msg);
                    if let Some(i) = (0..size).find(|&i| msg[i] != pattern(n, i)) {
                        return Err(qhca::Error::Invalid {
                            what: format!(
                                "message {n}: byte {i} is {:#04x}, expected {:#04x}",
                                msg[i],
                                pattern(n, i)
                            ),
                        });
                    }
                }
                got = true;
                s.qp.post_recv(&[RecvWr {
                    wr_id: 1,
                    sges: &recv_sge,
                }])?;
                if !client {
                    send(s, &mut msg)?;
                }
            } else {
                sent = true;
            }
        }
    }
    let elapsed = start.elapsed();
    conn::sync(&mut s.stream)?;
    Ok(elapsed)
}

fn run(o: &Opts, role: Role<'_>) -> qhca::Result<Duration> {
    let client = matches!(role, Role::Client(_));
    let mut s = setup(o, role)?;
    println!(
        "  local address:  QPN {:#08x}, PSN from the exchange, rkey {:#010x}",
        s.qp.qpn(),
        s.mr.rkey()
    );
    println!(
        "  remote address: QPN {:#08x}, PSN {:#08x}, rkey {:#010x}",
        s.remote.qpn, s.remote.psn, s.remote.rkey
    );
    pingpong(&mut s, o, client)
}

fn summary(o: &Opts, t: Duration) {
    let secs = t.as_secs_f64().max(1e-9);
    let bytes = o.size as u64 * o.iters * 2;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        o.iters,
        secs * 1e6 / o.iters as f64
    );
}

fn main_result(o: Opts) -> Result<(), String> {
    if o.words.len() > 1 || (o.loopback && !o.words.is_empty()) {
        return Err("too many arguments (one HOST, and none with --loopback)".into());
    }
    if o.size > u32::MAX as usize / 2 {
        return Err("size too large".into());
    }
    let err = |e: qhca::Error| e.to_string();
    if o.loopback {
        let so = o.clone();
        let mut out = None;
        common::run_loopback(
            move |l| run(&so, Role::Server(l)).map(drop),
            |addr| {
                out = Some(run(&o, Role::Client(addr))?);
                Ok(())
            },
        )
        .map_err(err)?;
        if let Some(t) = out {
            summary(&o, t);
        }
        return Ok(());
    }
    match o.words.first() {
        Some(h) => {
            let t = run(&o, Role::Client(&format!("{h}:{}", o.port))).map_err(err)?;
            summary(&o, t);
        }
        None => {
            let l = TcpListener::bind(("0.0.0.0", o.port))
                .map_err(|e| format!("listen on port {}: {e}", o.port))?;
            let t = run(&o, Role::Server(&l)).map_err(err)?;
            summary(&o, t);
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    // ibv_rc_pingpong's default size is 4096.
    if !args.iter().any(|a| a == "-s" || a.starts_with("--size")) {
        args.extend(["-s".to_owned(), "4096".to_owned()]);
    }
    let o = match common::parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("qhca-pingpong: {e}\n\n{USAGE}");
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
            eprintln!("qhca-pingpong: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_differs_per_message() {
        assert_ne!(pattern(0, 0), pattern(1, 0));
        assert_eq!(pattern(0, 5), 5);
        assert_eq!(pattern(1, 0), 31);
    }
}
