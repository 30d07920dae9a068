// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `qhca-odp-bench`: what on-demand paging costs, on one device, in one process.
//!
//! ```text
//! qhca-odp-bench [-s SIZE] [-n COUNT] [-r REG_BYTES] [-d DEV]
//! ```
//!
//! 1. `reg_mr` of REG_BYTES (default 1 GiB) of fresh anonymous memory, pinned against on demand
//!    (registration and deregistration timed apart);
//! 2. an RDMA WRITE stream of COUNT messages of SIZE bytes (default 256 x 64 KiB), each to its
//!    own offset of a target region, between two connected QPs: into a pinned region, into an
//!    on-demand region the device has never seen (every page faults on the responder, which RNR
//!    NAKs until the driver has mapped it), and into an on-demand region prefetched with
//!    `advise(PrefetchWrite, flush)` first. The fault counters of the context are printed beside
//!    each run, so a run that did not fault cannot pass for one that did.
//!
//! The fault service time (event to RESUME) is measured by the device's trace events, not here:
//! see `scripts/qhca-odp-faults.py`.

#[path = "../common/tsc.rs"]
mod tsc;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use qhca::{
    Access, Advice, ConnInfo, ConnOpts, Context, Cq, CtxStats, Pd, Qp, QpCaps, SendWr, WrOp,
};

const USAGE: &str = "\
Usage: qhca-odp-bench [-s SIZE] [-n COUNT] [-r REG_BYTES] [-d DEV]
  -s SIZE       bytes per RDMA WRITE (default 64k; k/M/G suffixes)
  -n COUNT      messages per stream (default 256)
  -r REG_BYTES  size of the reg_mr comparison (default 1G)
  -d DEV        device (default /dev/qhca0)
";

struct Opts {
    size: usize,
    count: usize,
    reg: usize,
    dev: String,
}

fn parse_size(s: &str) -> Option<usize> {
    let (n, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<usize>().ok()?.checked_mul(mul)
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        size: 64 << 10,
        count: 256,
        reg: 1 << 30,
        dev: "/dev/qhca0".into(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "-s" => o.size = parse_size(val()?).ok_or("bad -s")?,
            "-n" => o.count = val()?.parse().map_err(|_| "bad -n")?,
            "-r" => o.reg = parse_size(val()?).ok_or("bad -r")?,
            "-d" => o.dev = val()?.clone(),
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if o.size == 0 || o.size > 1 << 30 || o.count == 0 || o.reg == 0 {
        return Err("sizes and counts must be > 0 (SIZE at most 1 GiB)".into());
    }
    Ok(o)
}

/// Fresh anonymous memory, never touched here.
struct Anon {
    ptr: *mut u8,
    len: usize,
}

impl Anon {
    fn new(len: usize) -> Result<Anon, String> {
        // SAFETY: a new private anonymous mapping at an address the kernel picks replaces nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap {len}: {}", std::io::Error::last_os_error()));
        }
        Ok(Anon { ptr: p.cast(), len })
    }
}

impl Drop for Anon {
    fn drop(&mut self) {
        // SAFETY: our own mapping; every region over it was deregistered before (drop order).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Registers and deregisters `len` bytes, pinned and on demand: (reg ms, dereg ms) each.
fn reg_compare(pd: &Pd, len: usize) -> Result<(), String> {
    let err = |e: qhca::Error| e.to_string();
    let mem = Anon::new(len)?;
    // SAFETY: `mem` is our own mapping of `len` bytes, and this slice is the only reference
    // into it; it lives (and `mem` with it) until after the region is deregistered.
    let buf = unsafe { std::slice::from_raw_parts_mut(mem.ptr, len) };
    let t = Instant::now();
    // SAFETY: the region is dropped (deregistered) below, before `buf` and `mem` go.
    let mr = unsafe { pd.reg_mr(buf, Access::LOCAL_WRITE) }.map_err(err)?;
    let reg = ms(t);
    let t = Instant::now();
    drop(mr);
    let dereg = ms(t);
    println!(
        "reg_mr {:>5} MiB pinned:    reg {reg:>9.2} ms  dereg {dereg:>8.2} ms",
        len >> 20
    );
    drop(mem);

    let mem = Anon::new(len)?;
    let t = Instant::now();
    // SAFETY: the device may write `mem`, which no Rust reference points into; the region is
    // dropped below, before `mem` is unmapped.
    let mr = unsafe { pd.reg_odp_mr_raw(mem.ptr, len, Access::LOCAL_WRITE) }.map_err(err)?;
    let reg = ms(t);
    let t = Instant::now();
    drop(mr);
    let dereg = ms(t);
    println!(
        "reg_mr {:>5} MiB on demand: reg {reg:>9.2} ms  dereg {dereg:>8.2} ms",
        len >> 20
    );
    Ok(())
}

struct Pair {
    a: Qp,
    b: Qp,
    cq_a: Cq,
    _cq_b: Cq,
}

fn pair(ctx: &Arc<Context>, pd: &Pd) -> qhca::Result<Pair> {
    let cq_a = Cq::new(ctx, 256, None)?;
    let cq_b = Cq::new(ctx, 256, None)?;
    let caps = QpCaps {
        max_send_wr: 64,
        ..QpCaps::default()
    };
    let a = Qp::new(pd, &cq_a, &cq_a, &caps)?;
    let b = Qp::new(pd, &cq_b, &cq_b, &caps)?;
    // A peer of on-demand memory retries RNR NAKs for ever, as with mlx5.
    let opts = ConnOpts {
        rnr_retry: 7,
        ..ConnOpts::default()
    };
    let remote = |q: &Qp, psn| ConnInfo {
        qpn: q.qpn(),
        psn,
        ..ConnInfo::default()
    };
    a.connect(&a.conn_info(1), &remote(&b, 2), &opts)?;
    b.connect(&b.conn_info(2), &remote(&a, 1), &opts)?;
    Ok(Pair {
        a,
        b,
        cq_a,
        _cq_b: cq_b,
    })
}

/// COUNT WRITEs of SIZE from `src` to consecutive offsets at `raddr`, 16 in flight: MB/s.
fn stream(p: &mut Pair, o: &Opts, src: qhca::Sge, raddr: u64, rkey: u32) -> Result<f64, String> {
    let depth = 16;
    let (mut posted, mut done) = (0usize, 0usize);
    let mut wcs = [qhca::Wc::default(); 16];
    let start = tsc::now();
    let deadline = start + tsc::ticks(std::time::Duration::from_secs(120));
    while done < o.count {
        while posted < o.count && posted - done < depth {
            let op = WrOp::Write {
                raddr: raddr + (posted * o.size) as u64,
                rkey,
            };
            p.a.post_send(&[SendWr::new(posted as u64, op, &[src])])
                .map_err(|e| e.to_string())?;
            posted += 1;
        }
        let n = p.cq_a.poll(&mut wcs);
        for wc in &wcs[..n] {
            if !wc.status.is_ok() {
                return Err(format!("write {} failed: {:?}", wc.wr_id, wc.status));
            }
        }
        done += n;
        if n == 0 && done < o.count && tsc::now() > deadline {
            return Err(format!("stream stuck at {done} of {} completions", o.count));
        }
    }
    let secs = tsc::duration(tsc::now() - start).as_secs_f64();
    Ok((o.count * o.size) as f64 / secs / 1e6)
}

fn delta(a: &CtxStats, b: &CtxStats) -> String {
    format!(
        "faults req {} resp {}, fault RNR NAKs {}",
        b.odp_req_faults - a.odp_req_faults,
        b.odp_resp_faults - a.odp_resp_faults,
        b.odp_fault_rnr_naks - a.odp_fault_rnr_naks
    )
}

fn run(o: &Opts) -> Result<(), String> {
    let err = |e: qhca::Error| e.to_string();
    tsc::calibrate();
    let ctx = Arc::new(Context::open(&o.dev).map_err(err)?);
    let pd = Pd::new(&ctx).map_err(err)?;
    reg_compare(&pd, o.reg)?;

    let mut p = pair(&ctx, &pd).map_err(err)?;
    let _ = &p.b;
    let src = pd.reg_mr_buf(o.size, Access::LOCAL_WRITE).map_err(err)?;
    let sge = src.sge(0, o.size as u32);
    let total = o.size * o.count;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    println!(
        "write_bw {} x {} B to consecutive offsets, 16 in flight (MB/s = 10^6 B/s):",
        o.count, o.size
    );

    let pinned = pd.reg_mr_buf(total, rw).map_err(err)?;
    stream(&mut p, o, sge, pinned.addr(), pinned.rkey())?;
    let s0 = ctx.query_ctx().map_err(err)?;
    let bw = stream(&mut p, o, sge, pinned.addr(), pinned.rkey())?;
    let s1 = ctx.query_ctx().map_err(err)?;
    println!(
        "  pinned target (warm):          {bw:>10.1} MB/s  ({})",
        delta(&s0, &s1)
    );
    drop(pinned);

    for prefetch in [false, true] {
        let target = pd.reg_odp_buf(total, rw).map_err(err)?;
        if prefetch {
            target
                .advise(Advice::PrefetchWrite, target.addr(), total as u64, true)
                .map_err(err)?;
        }
        let s0 = ctx.query_ctx().map_err(err)?;
        let bw = stream(&mut p, o, sge, target.addr(), target.rkey())?;
        let s1 = ctx.query_ctx().map_err(err)?;
        let what = if prefetch {
            "on-demand target, prefetched:"
        } else {
            "on-demand target, untouched:"
        };
        println!("  {what:<31}{bw:>10.1} MB/s  ({})", delta(&s0, &s1));
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args).and_then(|o| run(&o)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qhca-odp-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
