// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `qhca-rcache-bench`: what the registration cache saves, on one device, in one process.
//!
//! ```text
//! qhca-rcache-bench [-s SIZE] [-n COUNT] [-b BUFFERS] [-d DEV]
//! ```
//!
//! 1. Lookup cost: BUFFERS buffers of SIZE (default 64 x 64 KiB), fresh memory each. The first
//!    lookup of each is a miss (REG_MR of a watched region: pin, notifier, device command);
//!    then lookups round the buffers are hits (a load of the invalidation page's generation,
//!    a read lock, a tree search). Nanoseconds per lookup for both, their ratio, and beside
//!    them a plain `reg_mr` + `dereg_mr` of SIZE.
//! 2. write_bw: COUNT RDMA WRITEs of SIZE (default 1024 x 64 KiB), 16 in flight, from BUFFERS
//!    source buffers in turn, three ways: `reg_mr` before and `dereg_mr` after every request
//!    (register per I/O), a cache lookup before every request (the guard held until it
//!    completes; once into an empty cache, once more into the warm one), and regions
//!    registered once beforehand.

#[path = "../common/bench.rs"]
mod bench;
#[path = "../common/tsc.rs"]
mod tsc;

use std::process::ExitCode;
use std::sync::Arc;

use bench::{anon, fill, pair, parse_size, stream};
use qhca::{Access, CacheConfig, Context, Mr, PageBuf, Pd, RegCache};

const USAGE: &str = "\
Usage: qhca-rcache-bench [-s SIZE] [-n COUNT] [-b BUFFERS] [-d DEV]
  -s SIZE     bytes per buffer and per RDMA WRITE (default 64k; k/M suffixes)
  -n COUNT    RDMA WRITEs per write_bw run (default 1024)
  -b BUFFERS  source buffers (default 64, at least 16)
  -d DEV      device: a name (rocep0s10, qhcaN) or a node (default: the first)
";

/// Requests in flight in the write_bw runs.
const DEPTH: usize = 16;

struct Opts {
    size: usize,
    count: usize,
    buffers: usize,
    dev: String,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        size: 64 << 10,
        count: 1024,
        buffers: 64,
        dev: String::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "-s" => o.size = parse_size(val()?).ok_or("bad -s")?,
            "-n" => o.count = val()?.parse().map_err(|_| "bad -n")?,
            "-b" => o.buffers = val()?.parse().map_err(|_| "bad -b")?,
            "-d" => o.dev = val()?.clone(),
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if o.size == 0 || o.size > 64 << 20 || o.count == 0 || o.buffers < DEPTH {
        return Err(format!(
            "SIZE 1 B..64 MiB, COUNT > 0, BUFFERS >= {DEPTH}\n{USAGE}"
        ));
    }
    Ok(o)
}

fn ns_per(ticks: u64, n: usize) -> f64 {
    tsc::us(ticks) * 1e3 / n as f64
}

/// Misses, then hits, then plain registrations: ns each.
fn lookups(pd: &Pd, o: &Opts, bufs: &[PageBuf]) -> Result<(), String> {
    let err = |e: qhca::Error| e.to_string();
    let cache = RegCache::new(pd, CacheConfig::default()).map_err(err)?;
    let t = tsc::now();
    for b in bufs {
        drop(cache.get(b.as_ptr(), o.size, Access::NONE).map_err(err)?);
    }
    let miss = ns_per(tsc::now() - t, bufs.len());
    let hits = (o.count * 100).max(100_000);
    let t = tsc::now();
    for i in 0..hits {
        let b = &bufs[i % bufs.len()];
        drop(cache.get(b.as_ptr(), o.size, Access::NONE).map_err(err)?);
    }
    let hit = ns_per(tsc::now() - t, hits);
    let s = cache.stats();
    if s.misses != bufs.len() as u64 || s.hits != hits as u64 {
        return Err(format!("the cache did not do what was timed: {s:?}"));
    }
    drop(cache);
    let t = tsc::now();
    for b in bufs {
        // SAFETY: the region only reads `b` (no write right) and is dropped (deregistered)
        // right away, while `b` is mapped.
        let mr: Mr<'_> = unsafe { pd.reg_mr_raw(b.as_ptr(), o.size, Access::NONE) }.map_err(err)?;
        drop(mr);
    }
    let plain = ns_per(tsc::now() - t, bufs.len());
    println!("lookup of {} B buffers ({} buffers):", o.size, bufs.len());
    println!("  miss (REG_MR of a watched region): {miss:>12.0} ns");
    println!("  hit:                               {hit:>12.0} ns  ({hits} lookups)");
    println!(
        "  miss / hit:                        {:>12.0} x",
        miss / hit
    );
    println!("  reg_mr + dereg_mr, no cache:       {plain:>12.0} ns");
    Ok(())
}

fn run(o: &Opts) -> Result<(), String> {
    let err = |e: qhca::Error| e.to_string();
    tsc::calibrate();
    let ctx = Arc::new(Context::open(node(&o.dev)?).map_err(err)?);
    let pd = Pd::new(&ctx).map_err(err)?;
    let bufs = (0..o.buffers)
        .map(|i| {
            let b = anon(o.size)?;
            fill(&b, i as u8);
            Ok(b)
        })
        .collect::<Result<Vec<_>, String>>()?;
    lookups(&pd, o, &bufs)?;

    let mut p = pair(&ctx, &pd).map_err(err)?;
    let span = o.size * DEPTH;
    let target = pd
        .reg_mr_buf(span, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .map_err(err)?;
    let (raddr, rkey) = (target.addr(), target.rkey());
    let buf = |i: usize| &bufs[i % bufs.len()];
    println!(
        "write_bw {} x {} B from {} buffers in turn, {DEPTH} in flight (MB/s = 10^6 B/s):",
        o.count,
        o.size,
        bufs.len()
    );

    let per_io = stream(&mut p, o.count, o.size, DEPTH, raddr, span, rkey, |i| {
        // SAFETY: read-only; the region is dropped (deregistered) when its request completed,
        // while the buffer is mapped (`bufs` outlives the stream).
        let mr: Mr<'_> =
            unsafe { pd.reg_mr_raw(buf(i).as_ptr(), o.size, Access::NONE) }.map_err(err)?;
        Ok((mr.sge(0, o.size as u32), mr))
    })?;
    println!("  reg_mr + dereg_mr around every request: {per_io:>10.1} MB/s");

    let cache = RegCache::new(&pd, CacheConfig::default()).map_err(err)?;
    for what in ["cold", "warm"] {
        let s0 = cache.stats();
        let cached = stream(&mut p, o.count, o.size, DEPTH, raddr, span, rkey, |i| {
            let b = buf(i);
            let mr = cache.get(b.as_ptr(), o.size, Access::NONE).map_err(err)?;
            Ok((mr.sge(b.addr(), o.size as u32), mr))
        })?;
        let s = cache.stats();
        println!(
            "  a cache lookup per request ({what}):      {cached:>10.1} MB/s  ({} misses, {} hits)",
            s.misses - s0.misses,
            s.hits - s0.hits
        );
    }
    drop(cache);

    let mrs = bufs
        .iter()
        // SAFETY: read-only regions, dropped (deregistered) below, before `bufs`.
        .map(|b| unsafe { pd.reg_mr_raw(b.as_ptr(), o.size, Access::NONE) })
        .collect::<qhca::Result<Vec<Mr<'_>>>>()
        .map_err(err)?;
    let pre = stream(&mut p, o.count, o.size, DEPTH, raddr, span, rkey, |i| {
        Ok((mrs[i % mrs.len()].sge(0, o.size as u32), ()))
    })?;
    println!("  registered once beforehand:             {pre:>10.1} MB/s");
    drop(mrs);
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    bench::exit("qhca-rcache-bench", parse(&args).and_then(|o| run(&o)))
}

/// The node `-d` names (the first device without one).
fn node(dev: &str) -> Result<std::path::PathBuf, String> {
    qhca::node_of(Some(dev)).map_err(|e| format!("{dev:?}: {e}"))
}
