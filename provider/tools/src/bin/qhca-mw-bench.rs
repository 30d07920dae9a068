// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `qhca-mw-bench`: memory windows bound, used and invalidated in a loop, on one device, in one
//! process (two RC QPs of one context connected to each other).
//!
//! ```text
//! qhca-mw-bench [-n ITER] [--type 1|2] [-d DEV]
//! ```
//!
//! One operation, `--type 2` (default): a type 2B window bound through QP b over one 8-byte word
//! of b's region (BIND_MW, with the window's next key), an 8-byte inline RDMA WRITE through the
//! window's key from QP a, LOCAL_INV of the window through b. `--type 1`: a type 1 window rebound
//! through b to the next word with the next key (what `ibv_bind_mw` does), then the WRITE; no
//! invalidation. Each request is signaled and its completion polled before the next is posted,
//! so an operation is the full round of its two or three requests; the written word is checked.
//! ITER / 10 operations warm up first. One line, the format `rxe-mw-bench` prints for the same
//! loop on libibverbs:
//!
//! ```text
//! mw type2 ops 20000 ops_per_sec 12345 usec_per_op 81.00
//! ```

#[path = "../common/bench.rs"]
mod bench;
#[path = "../common/tsc.rs"]
mod tsc;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bench::{pair, Pair};
use qhca::{Access, Context, Cq, Mr, Mw, MwType, Pd, SendWr, Wc, WcStatus, WrOp};

const USAGE: &str = "\
Usage: qhca-mw-bench [-n ITER] [--type 1|2] [-d DEV]
  -n ITER     timed operations (default 20000), after ITER / 10 of warm-up
  --type 2    type 2B window: BIND_MW + RDMA WRITE + LOCAL_INV per operation (default)
  --type 1    type 1 window: BIND_MW to the next key (ibv_bind_mw) + RDMA WRITE
  -d DEV      device: a name (rocep0s10, qhcaN) or a node (default: the first)
";

/// Words of the target region the operations go round.
const WORDS: u64 = 512;

/// How long one completion may take before the tool gives up.
const COMPLETION_TIMEOUT: Duration = Duration::from_secs(10);

struct Opts {
    iters: u64,
    ty: MwType,
    dev: String,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        iters: 20_000,
        ty: MwType::Type2B,
        dev: String::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "-n" => o.iters = val()?.parse().map_err(|_| "bad -n")?,
            "--type" => {
                o.ty = match val()?.as_str() {
                    "1" => MwType::Type1,
                    "2" | "2b" | "2B" => MwType::Type2B,
                    t => return Err(format!("--type {t}: 1 or 2\n{USAGE}")),
                }
            }
            "-d" => o.dev = val()?.clone(),
            "-h" | "--help" => return Err(USAGE.into()),
            _ => return Err(format!("unknown argument {a}\n{USAGE}")),
        }
    }
    if o.iters == 0 {
        return Err(format!("ITER > 0\n{USAGE}"));
    }
    Ok(o)
}

/// Spins on `cq` until the completion of `wr_id` is there; anything else is an error. Times out
/// with the cycle counter only, so a wait makes no system call and reads no clock.
fn wait(cq: &mut Cq, wr_id: u64, what: &str) -> Result<(), String> {
    let mut wc = [Wc::default(); 1];
    let mut spins = 0u32;
    let mut deadline = None;
    while cq.poll(&mut wc) == 0 {
        spins = spins.wrapping_add(1);
        if spins % 1024 == 0 {
            let now = tsc::now();
            if now > *deadline.get_or_insert(now + tsc::ticks(COMPLETION_TIMEOUT)) {
                return Err(format!(
                    "{what} {wr_id}: no completion in {COMPLETION_TIMEOUT:?}"
                ));
            }
        }
        std::hint::spin_loop();
    }
    let wc = &wc[0];
    if wc.status != WcStatus::Success || wc.wr_id != wr_id {
        return Err(format!(
            "{what} {wr_id}: completion of wr_id {} with {:?} (vendor_err {:#x})",
            wc.wr_id, wc.status, wc.vendor_err
        ));
    }
    Ok(())
}

/// Operation `i`: bind `mw` through `p.b` to word `i % WORDS` of `mr`, write `i` there through
/// the window from `p.a`, and (type 2) invalidate the window through `p.b`.
fn op(p: &mut Pair, mr: &Mr<'_>, mw: &mut Mw, i: u64) -> Result<(), String> {
    let post = |e: qhca::PostError| e.to_string();
    let off = (i % WORDS) * 8;
    let addr = mr.addr() + off;
    let bind = mw.bind(mr, addr, 8, Access::REMOTE_WRITE);
    p.b.post_send(&[SendWr::new(i, bind, &[])]).map_err(post)?;
    wait(&mut p.cq_b, i, "bind")?;
    let write = WrOp::Write {
        raddr: addr,
        rkey: mw.rkey(),
    };
    let v = i.to_le_bytes();
    p.a.post_send(&[SendWr::inline(i, write, &v)])
        .map_err(post)?;
    wait(&mut p.cq_a, i, "write")?;
    if mw.mw_type() != MwType::Type1 {
        p.b.post_send(&[SendWr::new(i, mw.invalidate(), &[])])
            .map_err(post)?;
        wait(&mut p.cq_b, i, "local_inv")?;
    }
    let got = mr.read_u64(off as usize);
    if got != i {
        return Err(format!("operation {i}: the word holds {got:#x}"));
    }
    Ok(())
}

fn run(o: &Opts) -> Result<(), String> {
    let err = |e: qhca::Error| e.to_string();
    tsc::calibrate();
    let ctx = Arc::new(Context::open(node(&o.dev)?).map_err(err)?);
    let pd = Pd::new(&ctx).map_err(err)?;
    let mut p = pair(&ctx, &pd).map_err(err)?;
    // The target grants no remote right of its own: only through the window.
    let mr = pd
        .reg_mr_buf((WORDS * 8) as usize, Access::LOCAL_WRITE | Access::MW_BIND)
        .map_err(err)?;
    let mut mw = pd.alloc_mw(o.ty).map_err(err)?;
    let warm = (o.iters / 10).max(1);
    for i in 0..warm {
        op(&mut p, &mr, &mut mw, i)?;
    }
    let t = tsc::now();
    for i in warm..warm + o.iters {
        op(&mut p, &mr, &mut mw, i)?;
    }
    let secs = tsc::duration(tsc::now() - t).as_secs_f64().max(1e-9);
    let ty = if o.ty == MwType::Type1 { 1 } else { 2 };
    println!(
        "mw type{ty} ops {} ops_per_sec {:.0} usec_per_op {:.2}",
        o.iters,
        o.iters as f64 / secs,
        secs * 1e6 / o.iters as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    bench::exit("qhca-mw-bench", parse(&args).and_then(|o| run(&o)))
}

/// The node `-d` names (the first device without one).
fn node(dev: &str) -> Result<std::path::PathBuf, String> {
    qhca::node_of(Some(dev)).map_err(|e| format!("{dev:?}: {e}"))
}
