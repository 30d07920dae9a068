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
//! 3. Isolation: a pinned stream of 8 x COUNT messages on its own context, alone, and beside
//!    another process: one that spins on a CPU (what any busy neighbour costs when the guest's
//!    vCPUs are the host's only cores), one writing into pinned memory in a loop, one writing into
//!    on-demand memory whose pages it drops after every round (every message faults).
//!
//! The fault service time (event to RESUME) is measured by the device's trace events, not here:
//! see `scripts/qhca-odp-faults.py`.

#[path = "../common/bench.rs"]
mod bench;
#[path = "../common/tsc.rs"]
mod tsc;

use std::io::{BufRead, BufReader, Write};
use std::process::ExitCode;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

use bench::{anon, pair, parse_size, Pair};
use qhca::{Access, Advice, Context, CtxStats, Pd, SendWr, WrOp};

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
    /// `--neighbour pinned|faulting`: be [`isolation`]'s neighbour process.
    neighbour: Option<Neighbour>,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        size: 64 << 10,
        count: 256,
        reg: 1 << 30,
        dev: "/dev/qhca0".into(),
        neighbour: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "-s" => o.size = parse_size(val()?).ok_or("bad -s")?,
            "-n" => o.count = val()?.parse().map_err(|_| "bad -n")?,
            "-r" => o.reg = parse_size(val()?).ok_or("bad -r")?,
            "-d" => o.dev = val()?.clone(),
            "--neighbour" => {
                o.neighbour = Some(match val()?.as_str() {
                    "spinning" => Neighbour::Spinning,
                    "pinned" => Neighbour::Pinned,
                    "faulting" => Neighbour::Faulting,
                    _ => return Err("bad --neighbour".into()),
                })
            }
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

/// `count` WRITEs of `size` from `src` to consecutive offsets at `raddr` (modulo `span`), 16 in
/// flight: MB/s.
fn stream(
    p: &mut Pair,
    count: usize,
    size: usize,
    src: qhca::Sge,
    raddr: u64,
    span: usize,
    rkey: u32,
) -> Result<f64, String> {
    bench::stream(p, count, size, 16, raddr, span, rkey, |_| Ok((src, ())))
}

fn delta(a: &CtxStats, b: &CtxStats) -> String {
    format!(
        "faults req {} resp {}, fault RNR NAKs {}",
        b.odp_req_faults - a.odp_req_faults,
        b.odp_resp_faults - a.odp_resp_faults,
        b.odp_fault_rnr_naks - a.odp_fault_rnr_naks
    )
}

/// What the neighbour of [`isolation`]'s streamer does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Neighbour {
    Idle,
    /// Spins on a CPU and leaves the device alone: what any busy neighbour costs on a guest
    /// whose vCPUs are the host's only cores.
    Spinning,
    /// Writes 16 messages a round into a pinned target, sleeping while it waits.
    Pinned,
    /// The same into an on-demand target whose pages it drops after every round, so that every
    /// message faults at the responder.
    Faulting,
}

/// `--neighbour MODE` (run by [`beside`] in a process of its own, so that the streamer shares
/// neither its address space nor its TLB shootdowns): writes 16 x SIZE a round, on its own
/// context, into a pinned target or into an on-demand one whose pages it drops after every round;
/// prints `ready` once set up, stops when its stdin closes, then prints `faults N` (its responder
/// faults).
/// The neighbour is set up: says `ready` to [`beside`], and returns the flag that its stdin
/// closing (the end of the measurement) sets.
fn neighbour_ready() -> Result<Arc<AtomicBool>, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let eof = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        eof.store(true, Relaxed);
    });
    println!("ready");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    Ok(stop)
}

fn neighbour_main(o: &Opts, which: Neighbour) -> Result<(), String> {
    let err = |e: qhca::Error| e.to_string();
    if which == Neighbour::Spinning {
        let stop = neighbour_ready()?;
        while !stop.load(Relaxed) {
            std::hint::spin_loop();
        }
        println!("faults 0");
        return Ok(());
    }
    let ctx = Arc::new(Context::open(&o.dev).map_err(err)?);
    let pd = Pd::new(&ctx).map_err(err)?;
    let mut p = pair(&ctx, &pd).map_err(err)?;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let src = pd.reg_mr_buf(o.size, Access::LOCAL_WRITE).map_err(err)?;
    let len = o.size * 16;
    let pinned;
    let odp;
    let (addr, rkey) = if which == Neighbour::Pinned {
        pinned = pd.reg_mr_buf(len, rw).map_err(err)?;
        (pinned.addr(), pinned.rkey())
    } else {
        odp = pd.reg_odp_buf(len, rw).map_err(err)?;
        (odp.addr(), odp.rkey())
    };
    let s0 = ctx.query_ctx().map_err(err)?;
    let stop = neighbour_ready()?;
    let sge = [src.sge(0, o.size as u32)];
    let mut wcs = [qhca::Wc::default(); 16];
    while !stop.load(Relaxed) {
        let wrs: Vec<SendWr<'_>> = (0..16)
            .map(|i| {
                let op = WrOp::Write {
                    raddr: addr + (i * o.size) as u64,
                    rkey,
                };
                SendWr::new(i as u64, op, &sge)
            })
            .collect();
        p.a.post_send(&wrs).map_err(|e| e.to_string())?;
        // Sleeps rather than spins while it waits (for the faults, mostly), so that it takes no
        // more CPU than the pinned neighbour.
        let mut done = 0;
        while done < wrs.len() {
            let n = p.cq_a.poll(&mut wcs);
            if let Some(wc) = wcs[..n].iter().find(|wc| !wc.status.is_ok()) {
                return Err(format!("neighbour write failed: {:?}", wc.status));
            }
            done += n;
            if n == 0 {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        }
        if which == Neighbour::Faulting {
            // SAFETY: the on-demand region's own buffer, which nothing references: its pages
            // go (they read as zeros after), and the device loses them first.
            unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
        }
    }
    let s1 = ctx.query_ctx().map_err(err)?;
    println!("faults {}", s1.odp_resp_faults - s0.odp_resp_faults);
    Ok(())
}

/// The streamer's MB/s (pinned to pinned, 8 x COUNT messages, its own context), the median of
/// three runs, with `which` neighbour running in another process meanwhile; and the
/// neighbour's responder faults.
fn beside(o: &Opts, which: Neighbour) -> Result<(f64, u64), String> {
    let err = |e: qhca::Error| e.to_string();
    let io = |e: std::io::Error| e.to_string();
    let ctx = Arc::new(Context::open(&o.dev).map_err(err)?);
    let pd = Pd::new(&ctx).map_err(err)?;
    let mut p = pair(&ctx, &pd).map_err(err)?;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let src = pd.reg_mr_buf(o.size, Access::LOCAL_WRITE).map_err(err)?;
    let dst = pd.reg_mr_buf(o.size * 16, rw).map_err(err)?;
    let mode = match which {
        Neighbour::Idle => None,
        Neighbour::Spinning => Some("spinning"),
        Neighbour::Pinned => Some("pinned"),
        Neighbour::Faulting => Some("faulting"),
    };
    let mut child = match mode {
        None => None,
        Some(m) => {
            let mut c = Command::new(std::env::current_exe().map_err(io)?)
                .args(["--neighbour", m, "-d", &o.dev, "-s", &o.size.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .map_err(io)?;
            let mut out = BufReader::new(c.stdout.take().ok_or("no stdout")?);
            let mut line = String::new();
            out.read_line(&mut line).map_err(io)?;
            if line.trim() != "ready" {
                let _ = c.kill();
                return Err(format!("the neighbour said {line:?}"));
            }
            Some((c, out))
        }
    };
    let sge = src.sge(0, o.size as u32);
    let mut runs = Vec::new();
    let mut res = Ok(());
    for _ in 0..3 {
        match stream(
            &mut p,
            o.count * 8,
            o.size,
            sge,
            dst.addr(),
            o.size * 16,
            dst.rkey(),
        ) {
            Ok(bw) => runs.push(bw),
            Err(e) => {
                res = Err(e);
                break;
            }
        }
    }
    let mut faults = 0;
    if let Some((mut c, mut out)) = child.take() {
        drop(c.stdin.take()); // the neighbour stops
        let mut line = String::new();
        out.read_line(&mut line).map_err(io)?;
        let st = c.wait().map_err(io)?;
        faults = line
            .trim()
            .strip_prefix("faults ")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("the neighbour said {line:?} and ended with {st}"))?;
    }
    res?;
    runs.sort_by(f64::total_cmp);
    Ok((runs[1], faults))
}

/// Isolation (seed 003): a streamer's throughput alone, and beside another process that
/// spins on a CPU, writes into pinned memory in a loop, or writes into on-demand memory whose
/// every message faults.
fn isolation(o: &Opts) -> Result<(), String> {
    println!(
        "isolation: a stream of {} x {} B, pinned to pinned, beside another process \
         (writers: 16 x {} B a round, own context; median of 3 runs):",
        o.count * 8,
        o.size,
        o.size
    );
    let (alone, _) = beside(o, Neighbour::Idle)?;
    println!("  alone:                         {alone:>10.1} MB/s");
    for (which, what) in [
        (Neighbour::Spinning, "beside a CPU spinner:"),
        (Neighbour::Pinned, "beside a pinned writer:"),
        (Neighbour::Faulting, "beside a faulting writer:"),
    ] {
        let (bw, faults) = beside(o, which)?;
        println!(
            "  {what:<31}{bw:>10.1} MB/s  ({:.2} of alone; {faults} faults meanwhile)",
            bw / alone
        );
        if which == Neighbour::Faulting && faults == 0 {
            return Err("the faulting neighbour did not fault".into());
        }
    }
    Ok(())
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
    stream(
        &mut p,
        o.count,
        o.size,
        sge,
        pinned.addr(),
        total,
        pinned.rkey(),
    )?;
    let s0 = ctx.query_ctx().map_err(err)?;
    let bw = stream(
        &mut p,
        o.count,
        o.size,
        sge,
        pinned.addr(),
        total,
        pinned.rkey(),
    )?;
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
        let bw = stream(
            &mut p,
            o.count,
            o.size,
            sge,
            target.addr(),
            total,
            target.rkey(),
        )?;
        let s1 = ctx.query_ctx().map_err(err)?;
        let what = if prefetch {
            "on-demand target, prefetched:"
        } else {
            "on-demand target, untouched:"
        };
        println!("  {what:<31}{bw:>10.1} MB/s  ({})", delta(&s0, &s1));
    }
    isolation(o)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = parse(&args).and_then(|o| match o.neighbour {
        Some(n) => neighbour_main(&o, n),
        None => run(&o),
    });
    bench::exit("qhca-odp-bench", res)
}
