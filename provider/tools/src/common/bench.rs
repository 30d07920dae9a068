// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! What qhca-odp-bench, qhca-rcache-bench and qhca-mw-bench share: sizes on the command line,
//! fresh anonymous memory, two QPs of one context connected to each other, a WRITE stream, and
//! the exit status.

#![allow(dead_code)] // each tool uses part of it

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use qhca::{ConnInfo, ConnOpts, Context, Cq, PageBuf, Pd, Qp, QpCaps, SendWr, Sge, Wc, WrOp};

use super::tsc;

/// A tool's exit status: success, or its error on stderr after its name and failure.
pub fn exit(tool: &str, res: Result<(), String>) -> ExitCode {
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{tool}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `64k`, `1M`, `1G` or plain bytes.
pub fn parse_size(s: &str) -> Option<usize> {
    let (n, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    n.parse::<usize>().ok()?.checked_mul(mul)
}

/// Fresh anonymous memory (never touched): a [`PageBuf`].
pub fn anon(len: usize) -> Result<PageBuf, String> {
    PageBuf::new(len).map_err(|e| e.to_string())
}

/// Writes `byte` over all of `b` (so that its pages exist), with plain stores: for a buffer no
/// region lets the device write (the benches fill theirs before registering them read-only).
pub fn fill(b: &PageBuf, byte: u8) {
    // SAFETY: `b`'s own mapping of `b.len()` bytes, which no reference points into (a
    // `PageBuf` hands out none); no device writes it (the callers' use above), and a device
    // read of bytes being stored is outside this program's memory model.
    unsafe { std::ptr::write_bytes(b.as_ptr(), byte, b.len()) }
}

/// Two RC QPs of one context connected to each other: `a` sends, its completions on `cq_a`.
pub struct Pair {
    pub a: Qp,
    pub b: Qp,
    pub cq_a: Cq,
    pub cq_b: Cq,
}

pub fn pair(ctx: &Arc<Context>, pd: &Pd) -> qhca::Result<Pair> {
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
    Ok(Pair { a, b, cq_a, cq_b })
}

/// `count` RDMA WRITEs of `size` bytes to consecutive offsets at `raddr` (modulo `span`
/// bytes), `depth` in flight. Before each post, `source(i)` gives the local SGE and what must
/// live until the request completes (a registration, a cache guard), which is dropped then.
/// Returns MB/s (10^6 B/s).
#[allow(clippy::too_many_arguments)]
pub fn stream<T>(
    p: &mut Pair,
    count: usize,
    size: usize,
    depth: usize,
    raddr: u64,
    span: usize,
    rkey: u32,
    mut source: impl FnMut(usize) -> Result<(Sge, T), String>,
) -> Result<f64, String> {
    let (mut posted, mut done) = (0usize, 0usize);
    let mut held: Vec<Option<T>> = (0..depth).map(|_| None).collect();
    let mut wcs = [Wc::default(); 16];
    let start = tsc::now();
    let deadline = start + tsc::ticks(Duration::from_secs(120));
    while done < count {
        while posted < count && posted - done < depth {
            let (sge, keep) = source(posted)?;
            let op = WrOp::Write {
                raddr: raddr + ((posted * size) % span.max(size)) as u64,
                rkey,
            };
            p.a.post_send(&[SendWr::new(posted as u64, op, &[sge])])
                .map_err(|e| e.to_string())?;
            held[posted % depth] = Some(keep);
            posted += 1;
        }
        let n = p.cq_a.poll(&mut wcs);
        for wc in &wcs[..n] {
            if !wc.status.is_ok() {
                return Err(format!("write {} failed: {:?}", wc.wr_id, wc.status));
            }
            // Completions come in order on one QP.
            held[wc.wr_id as usize % depth] = None;
        }
        done += n;
        if n == 0 && done < count && tsc::now() > deadline {
            return Err(format!("stream stuck at {done} of {count} completions"));
        }
    }
    let secs = tsc::duration(tsc::now() - start).as_secs_f64();
    Ok((count * size) as f64 / secs / 1e6)
}
