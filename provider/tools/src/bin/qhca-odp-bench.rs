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

#[path = "../common/bench.rs"]
mod bench;
#[path = "../common/tsc.rs"]
mod tsc;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use bench::{anon, pair, parse_size, Pair};
use qhca::{Access, Advice, Context, CtxStats, Pd};

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

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Registers and deregisters `len` bytes, pinned and on demand: (reg ms, dereg ms) each.
fn reg_compare(pd: &Pd, len: usize) -> Result<(), String> {
    let err = |e: qhca::Error| e.to_string();
    let mem = anon(len)?;
    // SAFETY: `mem` is our own mapping of `len` bytes, and this slice is the only reference
    // into it; it lives (and `mem` with it) until after the region is deregistered.
    let buf = unsafe { std::slice::from_raw_parts_mut(mem.as_ptr(), len) };
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

    let mem = anon(len)?;
    let t = Instant::now();
    // SAFETY: the device may write `mem`, which no Rust reference points into; the region is
    // dropped below, before `mem` is unmapped.
    let mr = unsafe { pd.reg_odp_mr_raw(mem.as_ptr(), len, Access::LOCAL_WRITE) }.map_err(err)?;
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

/// COUNT WRITEs of SIZE from `src` to consecutive offsets at `raddr`, 16 in flight: MB/s.
fn stream(p: &mut Pair, o: &Opts, src: qhca::Sge, raddr: u64, rkey: u32) -> Result<f64, String> {
    let span = o.size * o.count;
    bench::stream(p, o.count, o.size, 16, raddr, span, rkey, |_| Ok((src, ())))
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
