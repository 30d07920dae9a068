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
//! 4. Fault service isolation: 64 faults one at a time (a 4 KiB WRITE into an untouched page of
//!    an on-demand target, every other page so that no fault continues a sequential stream,
//!    posted once the one before completed), post to completion, median and
//!    p99, alone, beside the faulting writer, and beside a process whose own fault never ends
//!    (`--neighbour stalled`: its region lies over a FUSE file whose daemon never answers a read,
//!    so the driver's fault for it waits for ever; needs root, for the mount).
//!
//! The fault service time (event to RESUME) is measured by the device's trace events, not here:
//! see `scripts/qhca-odp-faults.py`.

#[path = "../common/bench.rs"]
mod bench;
#[path = "../common/stall.rs"]
mod stall;
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
       qhca-odp-bench --neighbour spinning|pinned|faulting|stalled [-s SIZE] [-d DEV]
  -s SIZE       bytes per RDMA WRITE (default 64k; k/M/G suffixes)
  -n COUNT      messages per stream (default 256)
  -r REG_BYTES  size of the reg_mr comparison (default 1G)
  -d DEV        device: a name (rocep0s10, qhcaN) or a node (default: the first)
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
        dev: String::new(),
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
                    "stalled" => Neighbour::Stalled,
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

/// What the neighbour of [`isolation`]'s streamer (and of [`fault_isolation`]) does.
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
    /// One WRITE into an on-demand region over a FUSE file whose daemon never answers a read
    /// ([`stall`]): the driver's fault for it waits until the process ends.
    Stalled,
}

/// `--neighbour MODE` (run by [`beside`] in a process of its own, so that the streamer shares
/// neither its address space nor its TLB shootdowns): writes 16 x SIZE a round, on its own
/// context, into a pinned target or into an on-demand one whose pages it drops after every round;
/// prints `ready` once set up, stops when its stdin closes, then prints `faults N` (its responder
/// faults).
/// The neighbour is set up: says `ready` to [`beside`], and returns the flag that its stdin
/// closing (the end of the measurement) sets.
fn neighbour_ready() -> Result<Arc<AtomicBool>, String> {
    let stop = watch_stdin();
    say_ready()?;
    Ok(stop)
}

/// A flag that its stdin closing (the end of the measurement) sets.
fn watch_stdin() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let eof = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        eof.store(true, Relaxed);
    });
    stop
}

fn say_ready() -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())
}

/// `--neighbour stalled`: see [`Neighbour::Stalled`]; says `ready` once the driver's fault
/// waits for the daemon (the daemon got the read).
fn stalled_main(o: &Opts) -> Result<(), String> {
    let err = |e: qhca::Error| e.to_string();
    let io = |e: std::io::Error| e.to_string();
    // Everything that maps memory comes first: once the driver's fault waits on the file, it
    // holds this process's mmap lock for reading, so a new thread (its stack, its malloc
    // arena) or a heap that grows would wait for ever too. (stdout's buffer is made here.)
    let _ = std::io::stdout().lock();
    let fs = stall::Stall::mount().map_err(|e| format!("mounting the FUSE file system: {e}"))?;
    let f = std::fs::File::open(fs.file()).map_err(io)?;
    let len = stall::FILE_LEN as usize;
    // SAFETY: a fresh private mapping of our own file at an address the kernel chooses; only
    // the device touches it (through the region below): the CPU would stall on it too.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    // Closed now (the mapping holds the file): a close at exit would send FLUSH to a daemon
    // that is gone already, and wait for it for ever.
    drop(f);
    let ctx = Arc::new(Context::open(node(&o.dev)?).map_err(err)?);
    let pd = Pd::new(&ctx).map_err(err)?;
    let mut p = pair(&ctx, &pd).map_err(err)?;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // SAFETY: nothing but the device reaches the mapping, through this key, which only our own
    // QPs use; the region goes before the mapping (at exit).
    let mr = unsafe { pd.reg_odp_mr_raw(map.cast(), len, rw) }.map_err(err)?;
    let src = pd.reg_mr_buf(64, Access::LOCAL_WRITE).map_err(err)?;
    let op = WrOp::Write {
        raddr: mr.addr(),
        rkey: mr.rkey(),
    };
    p.a.post_send(&[SendWr::new(1, op, &[src.sge(0, 64)])])
        .map_err(|e| e.to_string())?;
    fs.reads
        .recv_timeout(std::time::Duration::from_secs(30))
        .map_err(|_| "the fault never reached the FUSE file".to_string())?;
    say_ready()?;
    // Until stdin closes: a raw read into the stack, which allocates nothing.
    let mut buf = [0u8; 64];
    // SAFETY: reads at most `buf.len()` bytes into our own stack buffer.
    while unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    let faults = ctx.query_ctx().map_err(err)?.odp_resp_faults;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "faults {faults}").and_then(|()| out.flush());
    // No destructor or exit handler runs (`_exit`): unmapping anything, a large free
    // included, would wait for the mmap lock the stalled fault holds. The process's end closes
    // the daemon's /dev/fuse, which fails the read, and the driver cleans up after it; the
    // mount is detached first.
    stall::unmount(&stall::dir_of(std::process::id()));
    // SAFETY: ends the process at once; stdout was flushed above.
    unsafe { libc::_exit(0) }
}

fn neighbour_main(o: &Opts, which: Neighbour) -> Result<(), String> {
    let err = |e: qhca::Error| e.to_string();
    if which == Neighbour::Stalled {
        return stalled_main(o);
    }
    if which == Neighbour::Spinning {
        let stop = neighbour_ready()?;
        while !stop.load(Relaxed) {
            std::hint::spin_loop();
        }
        println!("faults 0");
        return Ok(());
    }
    let ctx = Arc::new(Context::open(node(&o.dev)?).map_err(err)?);
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
    let ctx = Arc::new(Context::open(node(&o.dev)?).map_err(err)?);
    let pd = Pd::new(&ctx).map_err(err)?;
    let mut p = pair(&ctx, &pd).map_err(err)?;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let src = pd.reg_mr_buf(o.size, Access::LOCAL_WRITE).map_err(err)?;
    let dst = pd.reg_mr_buf(o.size * 16, rw).map_err(err)?;
    let child = spawn_neighbour(o, which)?;
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
    let faults = end_neighbour(child)?;
    res?;
    runs.sort_by(f64::total_cmp);
    Ok((runs[1], faults))
}

/// A neighbour process (`--neighbour`), once it said `ready`: `None` for [`Neighbour::Idle`].
type Child = Option<(std::process::Child, BufReader<std::process::ChildStdout>)>;

fn spawn_neighbour(o: &Opts, which: Neighbour) -> Result<Child, String> {
    let io = |e: std::io::Error| e.to_string();
    let m = match which {
        Neighbour::Idle => return Ok(None),
        Neighbour::Spinning => "spinning",
        Neighbour::Pinned => "pinned",
        Neighbour::Faulting => "faulting",
        Neighbour::Stalled => "stalled",
    };
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
        let _ = c.wait();
        return Err(format!("the {m} neighbour said {line:?}"));
    }
    Ok(Some((c, out)))
}

/// Stops a neighbour (closes its stdin) and returns the faults it reports.
fn end_neighbour(child: Child) -> Result<u64, String> {
    let io = |e: std::io::Error| e.to_string();
    let Some((mut c, mut out)) = child else {
        return Ok(0);
    };
    drop(c.stdin.take());
    let mut line = String::new();
    out.read_line(&mut line).map_err(io)?;
    let st = c.wait().map_err(io)?;
    line.trim()
        .strip_prefix("faults ")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("the neighbour said {line:?} and ended with {st}"))
}

/// `n` faults one at a time: a 4 KiB WRITE into an untouched page of an on-demand target (every
/// other page), each posted once the one before completed; post-to-completion times in µs,
/// sorted.
fn fault_times(o: &Opts, n: usize) -> Result<Vec<f64>, String> {
    let err = |e: qhca::Error| e.to_string();
    let ctx = Arc::new(Context::open(node(&o.dev)?).map_err(err)?);
    let pd = Pd::new(&ctx).map_err(err)?;
    let mut p = pair(&ctx, &pd).map_err(err)?;
    let page = 4096;
    let src = pd.reg_mr_buf(page, Access::LOCAL_WRITE).map_err(err)?;
    // Every other page: no fault continues a sequential stream, which the driver would map
    // ahead of (and so spare the next faults).
    let dst = pd
        .reg_odp_buf(2 * n * page, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .map_err(err)?;
    let sge = [src.sge(0, page as u32)];
    let s0 = ctx.query_ctx().map_err(err)?;
    let mut times = Vec::with_capacity(n);
    let mut wc = [qhca::Wc::default(); 1];
    for i in 0..n {
        let op = WrOp::Write {
            raddr: dst.addr() + (2 * i * page) as u64,
            rkey: dst.rkey(),
        };
        let t = Instant::now();
        p.a.post_send(&[SendWr::new(i as u64, op, &sge)])
            .map_err(|e| e.to_string())?;
        loop {
            if p.cq_a.poll(&mut wc) == 1 {
                break;
            }
            if t.elapsed().as_secs() > 30 {
                return Err(format!("fault {i}: no completion in 30 s"));
            }
            std::hint::spin_loop();
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
        if !wc[0].status.is_ok() {
            return Err(format!("fault {i}: {:?}", wc[0].status));
        }
    }
    let s1 = ctx.query_ctx().map_err(err)?;
    if s1.odp_resp_faults - s0.odp_resp_faults < n as u64 {
        return Err(format!(
            "{} faults for {n} untouched pages",
            s1.odp_resp_faults - s0.odp_resp_faults
        ));
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

/// Fault service isolation (issue 29): one fault at a time on its own context, alone, beside
/// the faulting writer, and beside a process whose own fault never ends.
fn fault_isolation(o: &Opts) -> Result<(), String> {
    let n = 64;
    println!(
        "fault service: {n} faults one at a time (4 KiB WRITE into an untouched page, post to \
         completion), own context, beside another process:"
    );
    for (which, what) in [
        (Neighbour::Idle, "alone:"),
        (Neighbour::Faulting, "beside a faulting writer:"),
        (Neighbour::Stalled, "beside a stalled fault:"),
    ] {
        if which == Neighbour::Stalled && !stall::available() {
            println!("  {what:<31}skipped: no FUSE in this kernel");
            continue;
        }
        let child = spawn_neighbour(o, which)?;
        let times = fault_times(o, n);
        let faults = end_neighbour(child)?;
        let t = times?;
        let pct = |q: f64| t[((t.len() - 1) as f64 * q).round() as usize];
        println!(
            "  {what:<31}median {:>9.1} us  p99 {:>9.1} us  max {:>9.1} us  ({faults} faults \
             of the other meanwhile)",
            pct(0.5),
            pct(0.99),
            t[t.len() - 1]
        );
    }
    Ok(())
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
    let ctx = Arc::new(Context::open(node(&o.dev)?).map_err(err)?);
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
    isolation(o)?;
    fault_isolation(o)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = parse(&args).and_then(|o| match o.neighbour {
        Some(n) => neighbour_main(&o, n),
        None => run(&o),
    });
    bench::exit("qhca-odp-bench", res)
}

/// The node `-d` names (the first device without one).
fn node(dev: &str) -> Result<std::path::PathBuf, String> {
    qhca::node_of(Some(dev)).map_err(|e| format!("{dev:?}: {e}"))
}
