// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The verbs cases: PDs, MRs, CQs and RC QPs on the real device, every opcode byte for byte,
//! the protection and RNR error paths, isolation between processes, cleanup after kill -9, a
//! data path without system calls, and the driver's destroy-order and state checks.
//!
//! They run only with `QHCA_VERBS=1` (see [`crate::cases::all`]); the helper processes they start
//! are this binary's `__verbs_*` subcommands ([`helper_main`]).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use qhca::{
    Access, ConnOpts, Context, Cq, DbType, DbWord, MrBuf, ObjKind, Pd, PostReason, Qp, QpAttr,
    QpCaps, QpState, RecvWr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOp,
};

use crate::harness::{Case, CaseResult, Fail, T};
use crate::system::{self, Config};
use crate::{bail, check, check_eq, check_errno, fail, require};

/// How long a completion may take (TCG is slow).
const WC_TIMEOUT: Duration = Duration::from_secs(20);
/// How long to watch a CQ to conclude that nothing arrives.
const QUIET: Duration = Duration::from_millis(300);
/// Guard bytes around every target, which must stay untouched.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xee;

/// The verbs cases, in order.
pub fn cases() -> Vec<Case<Config>> {
    macro_rules! cases {
        ($($name:ident),* $(,)?) => { vec![$(Case { name: stringify!($name), run: $name }),*] };
    }
    cases![
        verbs_objects,
        verbs_send,
        verbs_send_imm,
        verbs_rdma_write,
        verbs_write_imm,
        verbs_rdma_read,
        verbs_atomics,
        verbs_multi_sge,
        verbs_inline,
        verbs_larger_than_mtu,
        verbs_bad_rkey_flushes,
        verbs_wrong_rights,
        verbs_out_of_bounds_by_one,
        verbs_mr_of_another_pd,
        verbs_rnr_retry_infinite,
        verbs_rnr_retry_zero,
        verbs_post_errors_and_unsignaled,
        verbs_cq_event,
        verbs_invalid_transitions,
        verbs_destroy_in_use,
        verbs_doorbell_isolation,
        verbs_zero_syscalls,
        verbs_kill9_frees_everything,
    ]
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// How a [`Pair`] is connected.
#[derive(Clone, Copy, Debug)]
struct PairOpts {
    caps: QpCaps,
    conn: ConnOpts,
}

impl Default for PairOpts {
    fn default() -> Self {
        PairOpts {
            caps: QpCaps {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_sge: 4,
                max_inline: 128,
            },
            conn: ConnOpts {
                access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
                path_mtu: 10, // 1024: messages of a few KiB are several packets
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                min_rnr_timer: 1,
            },
        }
    }
}

/// Two RC QPs on one context, connected to each other over the device's loopback wire: `a`
/// (requester in most cases) completes on `cq_a`, `b` on `cq_b`.
struct Pair {
    a: Qp,
    b: Qp,
    cq_a: Cq,
    cq_b: Cq,
    pd: Pd,
    ctx: Arc<Context>,
}

const PSN_A: u32 = 0x00_1000;
const PSN_B: u32 = 0xff_fff0; // wraps within the first messages

#[track_caller]
fn pair(cfg: &Config, o: &PairOpts) -> Result<Pair, Fail> {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    pair_in(&ctx, &pd, o)
}

#[track_caller]
fn pair_in(ctx: &Arc<Context>, pd: &Pd, o: &PairOpts) -> Result<Pair, Fail> {
    let cq_a = Cq::new(ctx, 256, None)?;
    let cq_b = Cq::new(ctx, 256, None)?;
    let a = Qp::new(pd, &cq_a, &cq_a, &o.caps)?;
    let b = Qp::new(pd, &cq_b, &cq_b, &o.caps)?;
    a.connect(PSN_A, b.qpn(), PSN_B, &o.conn)?;
    b.connect(PSN_B, a.qpn(), PSN_A, &o.conn)?;
    Ok(Pair {
        a,
        b,
        cq_a,
        cq_b,
        pd: pd.clone(),
        ctx: ctx.clone(),
    })
}

/// Waits for one completion.
#[track_caller]
fn wait_wc(cq: &mut Cq) -> Result<Wc, Fail> {
    let at = std::panic::Location::caller();
    let end = Instant::now() + WC_TIMEOUT;
    let mut wc = [Wc::default(); 1];
    loop {
        if cq.poll(&mut wc) == 1 {
            return Ok(wc[0]);
        }
        if Instant::now() > end {
            return Err(Fail::new(
                at.file(),
                at.line(),
                format!("no completion on CQ {} within {WC_TIMEOUT:?}", cq.cqn()),
            ));
        }
        std::thread::yield_now();
    }
}

/// Polls for [`QUIET`]; returns what arrived (nothing, if all is well).
fn quiet(cq: &mut Cq) -> Vec<Wc> {
    let end = Instant::now() + QUIET;
    let mut got = Vec::new();
    let mut wc = [Wc::default(); 8];
    while Instant::now() < end {
        let n = cq.poll(&mut wc);
        got.extend_from_slice(&wc[..n]);
        std::thread::sleep(Duration::from_millis(5));
    }
    got
}

/// A test pattern: different for every `seed` and offset.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// A region of `len` bytes with [`GUARD`] bytes of [`GUARD_BYTE`] on both sides; the payload is
/// at [`GUARD`].
#[track_caller]
fn guarded(pd: &Pd, len: usize, access: Access) -> Result<MrBuf, Fail> {
    let mr = pd.reg_mr_buf(len + 2 * GUARD, access)?;
    mr.fill(0, mr.len(), GUARD_BYTE);
    Ok(mr)
}

/// Checks that the payload is `want` and both guards are untouched.
fn check_guarded(t: &mut T, mr: &MrBuf, want: &[u8], what: &str) {
    let got = mr.to_vec(GUARD, want.len());
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        fail!(
            t,
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}",
            want.len(),
            got[i],
            want[i]
        );
    } else {
        check!(t, true);
    }
    let before = mr.to_vec(0, GUARD);
    let after = mr.to_vec(GUARD + want.len(), GUARD);
    check!(
        t,
        before.iter().chain(&after).all(|&b| b == GUARD_BYTE),
        "{what}: memory around the target was written"
    );
}

/// Checks a completion's status, opcode and wr_id.
fn check_wc(t: &mut T, wc: &Wc, wr_id: u64, status: WcStatus, opcode: WcOpcode, what: &str) {
    check_eq!(t, wc.status, status, "{what}: status ({wc:?})");
    check_eq!(t, wc.wr_id, wr_id, "{what}: wr_id");
    if status == WcStatus::Success {
        check_eq!(t, wc.opcode, opcode, "{what}: opcode");
    }
}

// ---------------------------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------------------------

/// Every object can be made and dropped; a new QP is in RESET; unknown handles are ENOENT.
fn verbs_objects(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let attr = ctx.query()?;
    check!(
        t,
        attr.has_cap(qhca_uapi::QHCA_CAP_RC as u64),
        "caps {:#x}",
        attr.caps
    );
    let pd = Pd::new(&ctx)?;
    let mr = pd.reg_mr_buf(4096, Access::ALL)?;
    check_eq!(
        t,
        mr.lkey(),
        mr.rkey(),
        "L_Key and R_Key are the same value"
    );
    let mut buf = [0u8; 100];
    let borrowed = pd.reg_mr(&mut buf[3..], Access::LOCAL_WRITE)?;
    check_eq!(t, borrowed.len(), 97);
    check!(t, borrowed.lkey() != mr.lkey(), "two regions, two keys");
    drop(borrowed);
    let cq = Cq::new(&ctx, 16, Some(qhca::eventfd()?))?;
    let qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let info = qp.query()?;
    check_eq!(t, info.state, QpState::Reset);
    check_eq!(t, ctx.query_ctx()?.db_violations, 0);

    for (kind, h) in [
        (ObjKind::Pd, 0xff_fff0),
        (ObjKind::Mr, 0xdead_be00),
        (ObjKind::Cq, 0xff_fff0),
        (ObjKind::Qp, 0xff_fff0),
    ] {
        check_errno!(
            t,
            ctx.destroy_raw(kind, h),
            Errno::ENOENT,
            "{kind:?} {h:#x}"
        );
    }
    // Another context cannot name our objects either.
    let other = Context::open(&cfg.dev)?;
    check_errno!(t, other.destroy_raw(ObjKind::Qp, qp.qpn()), Errno::ENOENT);
    check_errno!(t, other.destroy_raw(ObjKind::Mr, mr.lkey()), Errno::ENOENT);
    check_eq!(t, qp.query()?.state, QpState::Reset, "still there");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Every opcode, byte for byte
// ---------------------------------------------------------------------------------------------

/// SEND into a posted receive; both completions; memory around the receive buffer untouched.
fn verbs_send(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 777;
    let src = guarded(&p.pd, len, Access::NONE)?;
    let dst = guarded(&p.pd, len, Access::LOCAL_WRITE)?;
    let data = pattern(1, len);
    src.write_at(GUARD, &data);
    p.b.post_recv(&[RecvWr {
        wr_id: 0xb0,
        sges: &[dst.sge(GUARD, len as u32)],
    }])?;
    p.a.post_send(&[SendWr::new(0xa0, WrOp::Send, &[src.sge(GUARD, len as u32)])])?;
    let s = wait_wc(&mut p.cq_a)?;
    check_wc(t, &s, 0xa0, WcStatus::Success, WcOpcode::Send, "send");
    check_eq!(t, s.qpn, p.a.qpn());
    let r = wait_wc(&mut p.cq_b)?;
    check_wc(t, &r, 0xb0, WcStatus::Success, WcOpcode::Recv, "recv");
    check_eq!(t, r.byte_len, len as u32);
    check_eq!(t, r.imm, None);
    check_eq!(t, r.qpn, p.b.qpn());
    check_eq!(t, r.src_qp, p.a.qpn());
    check_guarded(t, &dst, &data, "received");
    check_eq!(t, (p.a.send_outstanding(), p.b.recv_outstanding()), (0, 0));
    Ok(())
}

/// SEND_WITH_IMM: the immediate arrives in the receive completion.
fn verbs_send_imm(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let src = guarded(&p.pd, 64, Access::NONE)?;
    let dst = guarded(&p.pd, 64, Access::LOCAL_WRITE)?;
    let data = pattern(2, 64);
    src.write_at(GUARD, &data);
    p.b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[dst.sge(GUARD, 64)],
    }])?;
    p.a.post_send(&[SendWr::new(
        2,
        WrOp::SendImm(0x1234_5678),
        &[src.sge(GUARD, 64)],
    )])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        2,
        WcStatus::Success,
        WcOpcode::Send,
        "send",
    );
    let r = wait_wc(&mut p.cq_b)?;
    check_wc(t, &r, 1, WcStatus::Success, WcOpcode::Recv, "recv");
    check_eq!(t, r.imm, Some(0x1234_5678));
    check_eq!(t, r.byte_len, 64);
    check_guarded(t, &dst, &data, "received");
    Ok(())
}

/// RDMA WRITE: data lands, no receive is consumed, the responder sees no completion.
fn verbs_rdma_write(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 3000;
    let src = guarded(&p.pd, len, Access::NONE)?;
    let dst = guarded(&p.pd, len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let data = pattern(3, len);
    src.write_at(GUARD, &data);
    let spare = p.pd.reg_mr_buf(64, Access::LOCAL_WRITE)?;
    p.b.post_recv(&[RecvWr {
        wr_id: 9,
        sges: &[spare.sge(0, 64)],
    }])?;
    let op = WrOp::Write {
        raddr: dst.addr() + GUARD as u64,
        rkey: dst.rkey(),
    };
    p.a.post_send(&[SendWr::new(3, op, &[src.sge(GUARD, len as u32)])])?;
    let s = wait_wc(&mut p.cq_a)?;
    check_wc(t, &s, 3, WcStatus::Success, WcOpcode::RdmaWrite, "write");
    check_guarded(t, &dst, &data, "written");
    check_eq!(
        t,
        quiet(&mut p.cq_b),
        Vec::<Wc>::new(),
        "a WRITE completes nothing at the responder"
    );
    check_eq!(t, p.b.recv_outstanding(), 1, "the receive is still posted");
    Ok(())
}

/// RDMA WRITE_WITH_IMM: data lands and a receive completes with the immediate.
fn verbs_write_imm(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 200;
    let src = guarded(&p.pd, len, Access::NONE)?;
    let dst = guarded(&p.pd, len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let data = pattern(4, len);
    src.write_at(GUARD, &data);
    let spare = guarded(&p.pd, 16, Access::LOCAL_WRITE)?;
    p.b.post_recv(&[RecvWr {
        wr_id: 0x77,
        sges: &[spare.sge(GUARD, 16)],
    }])?;
    let op = WrOp::WriteImm {
        raddr: dst.addr() + GUARD as u64,
        rkey: dst.rkey(),
        imm: 0xcafe_f00d,
    };
    p.a.post_send(&[SendWr::new(4, op, &[src.sge(GUARD, len as u32)])])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        4,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "write",
    );
    let r = wait_wc(&mut p.cq_b)?;
    check_wc(
        t,
        &r,
        0x77,
        WcStatus::Success,
        WcOpcode::RecvRdmaWithImm,
        "recv",
    );
    check_eq!(t, r.imm, Some(0xcafe_f00d));
    check_eq!(
        t,
        r.byte_len,
        len as u32,
        "byte_len of a WRITE_WITH_IMM is the write's length"
    );
    check_guarded(t, &dst, &data, "written");
    check_guarded(
        t,
        &spare,
        &[GUARD_BYTE; 16],
        "the receive buffer is not written",
    );
    Ok(())
}

/// RDMA READ: the remote bytes land locally.
fn verbs_rdma_read(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 2500;
    let remote = guarded(&p.pd, len, Access::REMOTE_READ)?;
    let local = guarded(&p.pd, len, Access::LOCAL_WRITE)?;
    let data = pattern(5, len);
    remote.write_at(GUARD, &data);
    let op = WrOp::Read {
        raddr: remote.addr() + GUARD as u64,
        rkey: remote.rkey(),
    };
    p.a.post_send(&[SendWr::new(5, op, &[local.sge(GUARD, len as u32)])])?;
    let s = wait_wc(&mut p.cq_a)?;
    check_wc(t, &s, 5, WcStatus::Success, WcOpcode::RdmaRead, "read");
    check_eq!(t, s.byte_len, len as u32);
    check_guarded(t, &local, &data, "read");
    check_guarded(t, &remote, &data, "the source is unchanged");
    Ok(())
}

/// Compare-and-swap (hit and miss) and fetch-and-add, with the old values returned.
fn verbs_atomics(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let target = guarded(&p.pd, 8, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    let old = guarded(&p.pd, 8, Access::LOCAL_WRITE)?;
    let (raddr, rkey) = (target.addr() + GUARD as u64, target.rkey());
    target.write_u64(GUARD, 0x1111_2222_3333_4444);

    let op = |t: &mut T, p: &mut Pair, wr_id: u64, op: WrOp, opcode| -> CaseResult {
        old.write_u64(GUARD, 0);
        p.a.post_send(&[SendWr::new(wr_id, op, &[old.sge(GUARD, 8)])])?;
        let wc = wait_wc(&mut p.cq_a)?;
        check_wc(t, &wc, wr_id, WcStatus::Success, opcode, "atomic");
        Ok(())
    };
    // Miss: compare differs, nothing swapped, the old value comes back.
    op(
        t,
        &mut p,
        1,
        WrOp::CmpSwp {
            raddr,
            rkey,
            compare: 5,
            swap: 6,
        },
        WcOpcode::CompSwap,
    )?;
    check_eq!(
        t,
        old.read_u64(GUARD),
        0x1111_2222_3333_4444,
        "CAS miss: old value"
    );
    check_eq!(
        t,
        target.read_u64(GUARD),
        0x1111_2222_3333_4444,
        "CAS miss: unchanged"
    );
    // Hit.
    let cas = WrOp::CmpSwp {
        raddr,
        rkey,
        compare: 0x1111_2222_3333_4444,
        swap: 0xaaaa_bbbb_cccc_dddd,
    };
    op(t, &mut p, 2, cas, WcOpcode::CompSwap)?;
    check_eq!(
        t,
        old.read_u64(GUARD),
        0x1111_2222_3333_4444,
        "CAS hit: old value"
    );
    check_eq!(
        t,
        target.read_u64(GUARD),
        0xaaaa_bbbb_cccc_dddd,
        "CAS hit: swapped"
    );
    // Fetch-and-add, wrapping.
    let fa = WrOp::FetchAdd {
        raddr,
        rkey,
        add: 0x5555_4444_3333_2223,
    };
    op(t, &mut p, 3, fa, WcOpcode::FetchAdd)?;
    check_eq!(
        t,
        old.read_u64(GUARD),
        0xaaaa_bbbb_cccc_dddd,
        "FAA: old value"
    );
    check_eq!(
        t,
        target.read_u64(GUARD),
        0xaaaa_bbbb_cccc_dddd_u64.wrapping_add(0x5555_4444_3333_2223)
    );
    check_guarded(t, &target, &target.to_vec(GUARD, 8), "target guards");
    check_guarded(t, &old, &old.to_vec(GUARD, 8), "result guards");
    Ok(())
}

/// Gather from three SGEs, scatter into two; a WRITE gathered from two.
fn verbs_multi_sge(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let src = p.pd.reg_mr_buf(4096, Access::NONE)?;
    let data = pattern(6, 1000);
    // Pieces of 100, 500 and 400 bytes at scattered offsets.
    src.write_at(10, &data[..100]);
    src.write_at(1000, &data[100..600]);
    src.write_at(3000, &data[600..]);
    let gather = [src.sge(10, 100), src.sge(1000, 500), src.sge(3000, 400)];
    let d1 = guarded(&p.pd, 300, Access::LOCAL_WRITE)?;
    let d2 = guarded(&p.pd, 700, Access::LOCAL_WRITE)?;
    p.b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[d1.sge(GUARD, 300), d2.sge(GUARD, 700)],
    }])?;
    p.a.post_send(&[SendWr::new(2, WrOp::Send, &gather)])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        2,
        WcStatus::Success,
        WcOpcode::Send,
        "send",
    );
    let r = wait_wc(&mut p.cq_b)?;
    check_wc(t, &r, 1, WcStatus::Success, WcOpcode::Recv, "recv");
    check_eq!(t, r.byte_len, 1000);
    check_guarded(t, &d1, &data[..300], "first scatter entry");
    check_guarded(t, &d2, &data[300..], "second scatter entry");

    // The last two pieces, 500 + 400 bytes, gathered into one 900-byte target.
    let dst = guarded(&p.pd, 900, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let op = WrOp::Write {
        raddr: dst.addr() + GUARD as u64,
        rkey: dst.rkey(),
    };
    p.a.post_send(&[SendWr::new(3, op, &gather[1..])])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        3,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "write",
    );
    check_guarded(t, &dst, &data[100..], "gathered write");
    Ok(())
}

/// Inline SEND and WRITE: the bytes travel in the WQE (the source memory is not registered).
fn verbs_inline(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let max = p.a.layout().max_inline as usize;
    let data = pattern(7, max);
    let dst = guarded(&p.pd, max, Access::LOCAL_WRITE)?;
    p.b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[dst.sge(GUARD, max as u32)],
    }])?;
    p.a.post_send(&[SendWr::inline(2, WrOp::SendImm(42), &data)])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        2,
        WcStatus::Success,
        WcOpcode::Send,
        "inline send",
    );
    let r = wait_wc(&mut p.cq_b)?;
    check_wc(t, &r, 1, WcStatus::Success, WcOpcode::Recv, "recv");
    check_eq!(t, (r.byte_len, r.imm), (max as u32, Some(42)));
    check_guarded(t, &dst, &data, "inline send");

    let w = guarded(&p.pd, 13, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let op = WrOp::Write {
        raddr: w.addr() + GUARD as u64,
        rkey: w.rkey(),
    };
    p.a.post_send(&[SendWr::inline(3, op, &data[..13])])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        3,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "inline write",
    );
    check_guarded(t, &w, &data[..13], "inline write");

    let too_long = vec![0u8; max + 1];
    let r = p.a.post_send(&[SendWr::inline(4, WrOp::Send, &too_long)]);
    check!(
        t,
        matches!(r, Err(e) if e.index == 0 && matches!(e.reason, PostReason::InlineTooLong { .. })),
        "{r:?}"
    );
    Ok(())
}

/// Messages of several MTUs (1024 here): SEND, WRITE and READ, byte for byte.
fn verbs_larger_than_mtu(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 3 * 1024 + 123;
    let src = guarded(&p.pd, len, Access::REMOTE_READ)?;
    let data = pattern(8, len);
    src.write_at(GUARD, &data);
    let dst = guarded(&p.pd, len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    p.b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[dst.sge(GUARD, len as u32)],
    }])?;
    p.a.post_send(&[SendWr::new(2, WrOp::Send, &[src.sge(GUARD, len as u32)])])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        2,
        WcStatus::Success,
        WcOpcode::Send,
        "send",
    );
    let r = wait_wc(&mut p.cq_b)?;
    check_eq!(t, (r.status, r.byte_len), (WcStatus::Success, len as u32));
    check_guarded(t, &dst, &data, "send of 4 packets");

    dst.fill(GUARD, len, 0);
    let op = WrOp::Write {
        raddr: dst.addr() + GUARD as u64,
        rkey: dst.rkey(),
    };
    p.a.post_send(&[SendWr::new(3, op, &[src.sge(GUARD, len as u32)])])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        3,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "write",
    );
    check_guarded(t, &dst, &data, "write of 4 packets");

    let back = guarded(&p.pd, len, Access::LOCAL_WRITE)?;
    let op = WrOp::Read {
        raddr: src.addr() + GUARD as u64,
        rkey: src.rkey(),
    };
    p.a.post_send(&[SendWr::new(4, op, &[back.sge(GUARD, len as u32)])])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        4,
        WcStatus::Success,
        WcOpcode::RdmaRead,
        "read",
    );
    check_guarded(t, &back, &data, "read of 4 packets");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Protection errors
// ---------------------------------------------------------------------------------------------

/// Posts one WRITE of `len` bytes to `raddr`/`rkey` followed by two more requests; expects the
/// first to fail with `status`, the QP to go to ERR and the other two to be flushed.
fn write_fails_and_flushes(
    t: &mut T,
    p: &mut Pair,
    src: &MrBuf,
    sge: Sge,
    op: WrOp,
    status: WcStatus,
    what: &str,
) -> CaseResult {
    let follow = [src.sge(0, 8)];
    p.a.post_send(&[
        SendWr::new(100, op, &[sge]),
        SendWr::new(101, WrOp::Send, &follow).with_flags(SendFlags::NONE),
        SendWr::new(102, WrOp::Send, &follow),
    ])?;
    let e = wait_wc(&mut p.cq_a)?;
    check_eq!(
        t,
        (e.wr_id, e.status),
        (100, status),
        "{what}: the failing request ({e:?})"
    );
    for id in [101, 102] {
        let f = wait_wc(&mut p.cq_a)?;
        check_eq!(
            t,
            (f.wr_id, f.status),
            (id, WcStatus::WrFlushErr),
            "{what}: flushed"
        );
    }
    check_eq!(
        t,
        p.a.query()?.state,
        QpState::Err,
        "{what}: requester QP in ERR"
    );
    check_eq!(
        t,
        p.a.send_outstanding(),
        0,
        "{what}: every slot accounted for"
    );
    check_eq!(
        t,
        quiet(&mut p.cq_a),
        Vec::<Wc>::new(),
        "{what}: nothing more"
    );
    Ok(())
}

/// A wrong R_Key: REM_ACCESS_ERR, QP in ERR, later requests flushed, memory untouched.
fn verbs_bad_rkey_flushes(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let src = p.pd.reg_mr_buf(256, Access::NONE)?;
    src.write_at(0, &pattern(9, 256));
    let dst = guarded(&p.pd, 256, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let op = WrOp::Write {
        raddr: dst.addr() + GUARD as u64,
        rkey: dst.rkey() ^ 0x5a, // same index, another tag: a stale key
    };
    write_fails_and_flushes(
        t,
        &mut p,
        &src,
        src.sge(0, 256),
        op,
        WcStatus::RemAccessErr,
        "bad rkey",
    )?;
    check_guarded(t, &dst, &[GUARD_BYTE; 256], "target of the refused write");
    // Receives posted to a QP in ERR are flushed too.
    let mut b_err = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    b_err.b.modify(&QpAttr {
        state: Some(QpState::Err),
        ..QpAttr::default()
    })?;
    b_err.b.post_recv(&[RecvWr {
        wr_id: 55,
        sges: &[dst.sge(GUARD, 8)],
    }])?;
    let f = wait_wc(&mut b_err.cq_b)?;
    check_eq!(
        t,
        (f.wr_id, f.status, f.is_recv),
        (55, WcStatus::WrFlushErr, true)
    );
    Ok(())
}

/// A region without REMOTE_WRITE refuses a WRITE; without REMOTE_READ a READ; without
/// REMOTE_ATOMIC an atomic; a QP without REMOTE_WRITE refuses a WRITE to an open region.
fn verbs_wrong_rights(t: &mut T, cfg: &Config) -> CaseResult {
    let cases: [(Access, Access, &str); 4] = [
        (
            Access::LOCAL_WRITE | Access::REMOTE_READ,
            Access::REMOTE_WRITE,
            "WRITE to a read-only region",
        ),
        (
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            Access::REMOTE_READ,
            "READ of a write-only region",
        ),
        (
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            Access::REMOTE_ATOMIC,
            "atomic on a non-atomic region",
        ),
        (
            Access::ALL,
            Access::NONE,
            "WRITE to a QP that grants no remote rights",
        ),
    ];
    for (mr_access, op_kind, what) in cases {
        let mut o = PairOpts::default();
        if op_kind == Access::NONE {
            o.conn.access = Access::REMOTE_READ;
        }
        let mut p = pair(cfg, &o)?;
        let src = p.pd.reg_mr_buf(64, Access::LOCAL_WRITE)?;
        let dst = guarded(&p.pd, 64, mr_access)?;
        let (raddr, rkey) = (dst.addr() + GUARD as u64, dst.rkey());
        let (op, len) = match op_kind {
            Access::REMOTE_READ => (WrOp::Read { raddr, rkey }, 64),
            Access::REMOTE_ATOMIC => (
                WrOp::FetchAdd {
                    raddr,
                    rkey,
                    add: 1,
                },
                8,
            ),
            _ => (WrOp::Write { raddr, rkey }, 64),
        };
        write_fails_and_flushes(
            t,
            &mut p,
            &src,
            src.sge(0, len),
            op,
            WcStatus::RemAccessErr,
            what,
        )?;
        check_guarded(t, &dst, &[GUARD_BYTE; 64], what);
    }
    Ok(())
}

/// One byte past the end of the remote region, and of the local one: refused; exactly the
/// region: fine.
fn verbs_out_of_bounds_by_one(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let outer = p.pd.reg_mr_buf(4096, Access::ALL)?;
    outer.fill(0, 4096, GUARD_BYTE);
    // A region of 100 bytes borrowed from the middle of a Vec: the bytes around it are ordinary
    // memory of ours that no key covers.
    let mut backing = vec![GUARD_BYTE; 100 + 2 * GUARD];
    let region = p.pd.reg_mr(
        &mut backing[GUARD..GUARD + 100],
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
    )?;
    let src = p.pd.reg_mr_buf(256, Access::NONE)?;
    src.write_at(0, &pattern(10, 256));
    let ok = WrOp::Write {
        raddr: region.addr(),
        rkey: region.rkey(),
    };
    p.a.post_send(&[SendWr::new(1, ok, &[src.sge(0, 100)])])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        1,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "exact fit",
    );
    check_eq!(
        t,
        region.to_vec(0, 100),
        pattern(10, 100),
        "exact fit written"
    );
    region.fill(0, 100, 0);

    let past = WrOp::Write {
        raddr: region.addr() + 1,
        rkey: region.rkey(),
    };
    write_fails_and_flushes(
        t,
        &mut p,
        &src,
        src.sge(0, 100),
        past,
        WcStatus::RemAccessErr,
        "remote end + 1",
    )?;
    check_eq!(
        t,
        region.to_vec(0, 100),
        vec![0; 100],
        "nothing of the refused write landed"
    );
    drop(region);
    check!(
        t,
        backing[..GUARD]
            .iter()
            .chain(&backing[GUARD + 100..])
            .all(|&b| b == GUARD_BYTE),
        "memory around the region untouched"
    );

    // Local: an SGE one byte longer than its region (a fresh pair: `p.a` is in ERR now).
    let mut p = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    let small = p.pd.reg_mr_buf(4096, Access::NONE)?;
    let bad = Sge {
        addr: small.addr() + 4000,
        length: 97,
        lkey: small.lkey(),
    };
    let op = WrOp::Write {
        raddr: outer.addr(),
        rkey: outer.rkey(),
    };
    write_fails_and_flushes(
        t,
        &mut p,
        &small,
        bad,
        op,
        WcStatus::LocProtErr,
        "local end + 1",
    )?;
    check!(
        t,
        outer.to_vec(0, 4096).iter().all(|&b| b == GUARD_BYTE),
        "target untouched"
    );
    Ok(())
}

/// A region of another PD: refused as a remote target (REM_ACCESS_ERR) and as a local SGE
/// (LOC_PROT_ERR).
fn verbs_mr_of_another_pd(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let other = Pd::new(&p.ctx)?;
    check!(t, other.pdn() != p.pd.pdn());
    let foreign = guarded(&other, 64, Access::ALL)?;
    let src = p.pd.reg_mr_buf(64, Access::NONE)?;
    let op = WrOp::Write {
        raddr: foreign.addr() + GUARD as u64,
        rkey: foreign.rkey(),
    };
    write_fails_and_flushes(
        t,
        &mut p,
        &src,
        src.sge(0, 64),
        op,
        WcStatus::RemAccessErr,
        "remote region of another PD",
    )?;
    check_guarded(t, &foreign, &[GUARD_BYTE; 64], "foreign region");

    let mut p = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    let dst = guarded(&p.pd, 64, Access::ALL)?;
    let op = WrOp::Write {
        raddr: dst.addr() + GUARD as u64,
        rkey: dst.rkey(),
    };
    let local_foreign = foreign.sge(GUARD, 64);
    write_fails_and_flushes(
        t,
        &mut p,
        &src,
        local_foreign,
        op,
        WcStatus::LocProtErr,
        "local SGE of another PD",
    )?;
    check_guarded(t, &dst, &[GUARD_BYTE; 64], "target");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RNR
// ---------------------------------------------------------------------------------------------

/// rnr_retry = 7 (infinite): a SEND without a receive waits, and completes once one is posted.
fn verbs_rnr_retry_infinite(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let src = p.pd.reg_mr_buf(64, Access::NONE)?;
    let data = pattern(11, 64);
    src.write_at(0, &data);
    p.a.post_send(&[SendWr::new(1, WrOp::Send, &[src.sge(0, 64)])])?;
    check_eq!(
        t,
        quiet(&mut p.cq_a),
        Vec::<Wc>::new(),
        "no completion while no receive is posted"
    );
    let dst = guarded(&p.pd, 64, Access::LOCAL_WRITE)?;
    p.b.post_recv(&[RecvWr {
        wr_id: 2,
        sges: &[dst.sge(GUARD, 64)],
    }])?;
    check_wc(
        t,
        &wait_wc(&mut p.cq_a)?,
        1,
        WcStatus::Success,
        WcOpcode::Send,
        "send after RNR",
    );
    let r = wait_wc(&mut p.cq_b)?;
    check_wc(t, &r, 2, WcStatus::Success, WcOpcode::Recv, "recv");
    check_guarded(t, &dst, &data, "received after RNR");
    check_eq!(t, p.a.query()?.state, QpState::Rts);
    Ok(())
}

/// rnr_retry = 0: a SEND without a receive fails with RNR_RETRY_EXC_ERR.
fn verbs_rnr_retry_zero(t: &mut T, cfg: &Config) -> CaseResult {
    let mut o = PairOpts::default();
    o.conn.rnr_retry = 0;
    let mut p = pair(cfg, &o)?;
    let src = p.pd.reg_mr_buf(64, Access::NONE)?;
    write_fails_and_flushes(
        t,
        &mut p,
        &src,
        src.sge(0, 64),
        WrOp::Send,
        WcStatus::RnrRetryExcErr,
        "rnr_retry 0",
    )?;
    check_eq!(
        t,
        p.b.query()?.state,
        QpState::Rts,
        "the responder is not affected"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Posting, events, state machine, destroy order
// ---------------------------------------------------------------------------------------------

/// A full queue is refused with the index of the first request not posted; unsignaled requests
/// are freed by the signaled completion after them.
fn verbs_post_errors_and_unsignaled(t: &mut T, cfg: &Config) -> CaseResult {
    let mut o = PairOpts::default();
    o.caps.max_send_wr = 8;
    o.caps.max_recv_wr = 4;
    let mut p = pair(cfg, &o)?;
    let depth = p.a.layout().sq_depth() as usize;
    check_eq!(t, depth, 8);
    let dst =
        p.pd.reg_mr_buf(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let src = p.pd.reg_mr_buf(4096, Access::NONE)?;
    src.write_at(0, &pattern(12, 4096));
    let sges: Vec<[Sge; 1]> = (0..depth + 2).map(|i| [src.sge(i * 8, 8)]).collect();
    // depth - 1 unsignaled writes, one signaled, then two that do not fit.
    let wrs: Vec<SendWr<'_>> = (0..depth + 2)
        .map(|i| {
            let op = WrOp::Write {
                raddr: dst.addr() + (i * 8) as u64,
                rkey: dst.rkey(),
            };
            let flags = if i == depth - 1 {
                SendFlags::SIGNALED
            } else {
                SendFlags::NONE
            };
            SendWr::new(i as u64, op, &sges[i]).with_flags(flags)
        })
        .collect();
    let r = p.a.post_send(&wrs);
    check!(
        t,
        matches!(r, Err(e) if e.index == depth && matches!(e.reason, PostReason::QueueFull { outstanding: 8, depth: 8 })),
        "{r:?}"
    );
    check_eq!(t, p.a.send_outstanding(), depth as u32);
    let wc = wait_wc(&mut p.cq_a)?;
    check_wc(
        t,
        &wc,
        depth as u64 - 1,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "the signaled one",
    );
    check_eq!(
        t,
        p.a.send_outstanding(),
        0,
        "its completion frees the unsignaled ones before it"
    );
    check_eq!(
        t,
        dst.to_vec(0, depth * 8),
        pattern(12, depth * 8),
        "all of them were executed"
    );
    check_eq!(
        t,
        quiet(&mut p.cq_a),
        Vec::<Wc>::new(),
        "unsignaled requests write no CQE"
    );
    // Now the two that did not fit go in.
    p.a.post_send(
        &wrs[depth..]
            .iter()
            .map(|w| w.with_flags(SendFlags::SIGNALED))
            .collect::<Vec<_>>(),
    )?;
    for id in [depth as u64, depth as u64 + 1] {
        check_eq!(t, wait_wc(&mut p.cq_a)?.wr_id, id);
    }
    // Receive side and SGE limits.
    let max_sge = p.b.layout().max_sge as usize;
    let many = vec![dst.sge(0, 8); max_sge + 1];
    let r = p.b.post_recv(&[
        RecvWr {
            wr_id: 0,
            sges: &many[..1],
        },
        RecvWr {
            wr_id: 1,
            sges: &many,
        },
    ]);
    check!(
        t,
        matches!(r, Err(e) if e.index == 1 && matches!(e.reason, PostReason::TooManySge { .. })),
        "{r:?}"
    );
    let recvs = vec![
        RecvWr {
            wr_id: 0,
            sges: &many[..1]
        };
        4
    ];
    let r = p.b.post_recv(&recvs);
    check!(
        t,
        matches!(r, Err(e) if e.index == 3 && matches!(e.reason, PostReason::QueueFull { .. })),
        "{r:?}"
    );
    Ok(())
}

/// An armed CQ signals its eventfd on a completion; an unarmed one does not.
fn verbs_cq_event(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let mut cq = Cq::new(&ctx, 16, Some(qhca::eventfd()?))?;
    let peer_cq = Cq::new(&ctx, 16, None)?;
    let mut qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let peer = Qp::new(&pd, &peer_cq, &peer_cq, &QpCaps::default())?;
    qp.connect(1, peer.qpn(), 2, &ConnOpts::default())?;
    peer.connect(2, qp.qpn(), 1, &ConnOpts::default())?;
    let mr = pd.reg_mr_buf(64, Access::ALL)?;
    check!(t, cq.event_fd().is_some());

    // Not armed: a completion, no event.
    let op = WrOp::Write {
        raddr: mr.addr() + 32,
        rkey: mr.rkey(),
    };
    qp.post_send(&[SendWr::new(1, op, &[mr.sge(0, 8)])])?;
    wait_wc(&mut cq)?;
    check_eq!(t, cq.wait(Some(QUIET))?, false, "no event without arm");
    // Armed: the next completion signals.
    cq.arm();
    qp.post_send(&[SendWr::new(2, op, &[mr.sge(0, 8)])])?;
    check_eq!(t, cq.wait(Some(WC_TIMEOUT))?, true, "event after arm");
    check_eq!(t, wait_wc(&mut cq)?.wr_id, 2);
    // One arm, one event.
    qp.post_send(&[SendWr::new(3, op, &[mr.sge(0, 8)])])?;
    wait_wc(&mut cq)?;
    check_eq!(t, cq.wait(Some(QUIET))?, false, "the arm was used up");
    let no_fd = Cq::new(&ctx, 2, None)?;
    check_errno!(t, no_fd.wait(Some(QUIET)), Errno::EINVAL);
    Ok(())
}

/// Transitions the IB state machine forbids are EINVAL and leave the state as it was.
fn verbs_invalid_transitions(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let cq = Cq::new(&ctx, 8, None)?;
    let qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let o = ConnOpts::default();
    let to = |s| QpAttr {
        state: Some(s),
        ..QpAttr::default()
    };
    check_errno!(
        t,
        qp.to_rtr(qp.qpn(), 0, o.path_mtu, o.min_rnr_timer),
        Errno::EINVAL,
        "RESET -> RTR"
    );
    check_errno!(
        t,
        qp.to_rts(0, o.timeout, o.retry_cnt, o.rnr_retry),
        Errno::EINVAL,
        "RESET -> RTS"
    );
    check_errno!(
        t,
        qp.modify(&to(QpState::Unknown(4))),
        Errno::EINVAL,
        "state 4 (undefined)"
    );
    check_errno!(
        t,
        qp.modify(&to(QpState::Unknown(0xff))),
        Errno::EINVAL,
        "state 0xff"
    );
    check_eq!(t, qp.query()?.state, QpState::Reset);
    qp.to_init(o.access)?;
    check_errno!(
        t,
        qp.to_rts(0, o.timeout, o.retry_cnt, o.rnr_retry),
        Errno::EINVAL,
        "INIT -> RTS"
    );
    check_errno!(
        t,
        qp.modify(&QpAttr {
            state: Some(QpState::Rtr),
            ..QpAttr::default()
        }),
        Errno::EINVAL,
        "INIT -> RTR without dest_qpn"
    );
    check_errno!(
        t,
        qp.to_rtr(qp.qpn(), 0, 7, o.min_rnr_timer),
        Errno::EINVAL,
        "path_mtu 7"
    );
    check_errno!(
        t,
        qp.to_rtr(qp.qpn(), 1 << 24, o.path_mtu, o.min_rnr_timer),
        Errno::EINVAL,
        "rq_psn of 25 bits"
    );
    check_eq!(t, qp.query()?.state, QpState::Init);
    qp.to_rtr(qp.qpn(), 0x12, o.path_mtu, o.min_rnr_timer)?;
    check_errno!(
        t,
        qp.modify(&to(QpState::Init)),
        Errno::EINVAL,
        "RTR -> INIT"
    );
    qp.to_rts(0x34, o.timeout, o.retry_cnt, o.rnr_retry)?;
    let info = qp.query()?;
    check_eq!(
        t,
        (info.state, info.dest_qpn, info.rq_psn, info.sq_psn),
        (QpState::Rts, qp.qpn(), 0x12, 0x34)
    );
    check_eq!(
        t,
        (info.path_mtu, info.rnr_retry, info.access),
        (o.path_mtu, o.rnr_retry, o.access)
    );
    check_errno!(t, qp.modify(&to(QpState::Rtr)), Errno::EINVAL, "RTS -> RTR");
    qp.modify(&to(QpState::Err))?;
    check_errno!(t, qp.modify(&to(QpState::Rts)), Errno::EINVAL, "ERR -> RTS");
    qp.modify(&to(QpState::Reset))?;
    check_eq!(t, qp.query()?.state, QpState::Reset, "any state -> RESET");
    Ok(())
}

/// A CQ or PD in use cannot be destroyed (EBUSY); once the QP is gone, they can.
fn verbs_destroy_in_use(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let cq = Cq::new(&ctx, 8, None)?;
    let qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    check_errno!(
        t,
        ctx.destroy_raw(ObjKind::Cq, cq.cqn()),
        Errno::EBUSY,
        "CQ of a QP"
    );
    check_errno!(
        t,
        ctx.destroy_raw(ObjKind::Pd, pd.pdn()),
        Errno::EBUSY,
        "PD of a QP"
    );
    let (qpn, cqn, pdn) = (qp.qpn(), cq.cqn(), pd.pdn());
    drop(qp);
    let mr = pd.reg_mr_buf(64, Access::NONE)?;
    check_errno!(
        t,
        ctx.destroy_raw(ObjKind::Pd, pdn),
        Errno::EBUSY,
        "PD of an MR"
    );
    let key = mr.lkey();
    drop(mr);
    check_errno!(
        t,
        ctx.destroy_raw(ObjKind::Mr, key),
        Errno::ENOENT,
        "the MR is gone"
    );
    check_errno!(
        t,
        ctx.destroy_raw(ObjKind::Qp, qpn),
        Errno::ENOENT,
        "the QP is gone"
    );
    check_eq!(
        t,
        ctx.destroy_raw(ObjKind::Cq, cqn).map_err(|e| e.errno()),
        Ok(()),
        "CQ without users"
    );
    check_eq!(
        t,
        ctx.destroy_raw(ObjKind::Pd, pdn).map_err(|e| e.errno()),
        Ok(()),
        "PD without users"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Processes: isolation, kill -9, no system calls
// ---------------------------------------------------------------------------------------------

/// A helper process of this binary speaking lines on stdin/stdout.
struct Helper {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Helper {
    fn spawn(args: &[&str]) -> Result<Helper, Fail> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdin = child.stdin.take();
        let stdout = BufReader::new(
            child
                .stdout
                .take()
                .ok_or_else(|| Fail::new(file!(), line!(), "no stdout"))?,
        );
        Ok(Helper {
            child,
            stdin,
            stdout,
        })
    }

    /// The next line, or a failure naming what was expected.
    fn line(&mut self, expect: &str) -> Result<String, Fail> {
        let mut s = String::new();
        if self.stdout.read_line(&mut s)? == 0 {
            let st = self.child.wait()?;
            bail!("helper ended ({st}) while we expected {expect:?}");
        }
        Ok(s.trim().to_owned())
    }

    fn say(&mut self, line: &str) -> Result<(), Fail> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Fail::new(file!(), line!(), "stdin closed"))?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    fn finish(mut self) -> Result<ExitStatus, Fail> {
        self.stdin.take();
        Ok(self.child.wait()?)
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `key value key value ...` → the value of `key`.
fn field(line: &str, key: &str) -> Option<u64> {
    let w: Vec<&str> = line.split_whitespace().collect();
    w.windows(2)
        .find(|p| p[0] == key)
        .and_then(|p| p[1].parse().ok())
}

/// Process A rings, on its own page, a doorbell naming process B's QP: the device drops it and
/// counts a violation for A; B sees nothing.
fn verbs_doorbell_isolation(t: &mut T, cfg: &Config) -> CaseResult {
    let dev = cfg.dev.to_string_lossy().into_owned();
    let mut b = Helper::spawn(&["__verbs_peer", &dev])?;
    let hello = b.line("qpn N")?;
    let Some(b_qpn) = field(&hello, "qpn") else {
        bail!("helper said {hello:?}");
    };
    b.say("stats")?;
    let b_before = b.line("stats")?;

    let ctx = Arc::new(Context::open(&cfg.dev)?);
    // A has a QP of its own, so the only thing wrong with the doorbell is whose queue it names.
    let pd = Pd::new(&ctx)?;
    let cq = Cq::new(&ctx, 8, None)?;
    let _own = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let before = ctx.query_ctx()?;
    ctx.doorbell()?
        .ring(DbWord::new(DbType::Sq, b_qpn as u32, 5).raw());
    std::thread::sleep(QUIET);
    let after = ctx.query_ctx()?;
    check_eq!(
        t,
        after.db_violations,
        before.db_violations + 1,
        "A's violations"
    );
    check_eq!(
        t,
        after.db_accepted,
        before.db_accepted,
        "A's accepted doorbells"
    );

    b.say("stats")?;
    let b_after = b.line("stats")?;
    check_eq!(t, field(&b_after, "violations"), Some(0), "B: {b_after}");
    check_eq!(
        t,
        field(&b_after, "accepted"),
        field(&b_before, "accepted"),
        "B: {b_after}"
    );
    check_eq!(t, field(&b_after, "cqes"), Some(0), "B's CQ: {b_after}");
    check_eq!(
        t,
        field(&b_after, "state"),
        Some(u64::from(QpState::Rts.raw())),
        "B's QP: {b_after}"
    );
    let st = b.finish()?;
    check!(t, st.success(), "helper B exited with {st}");
    Ok(())
}

/// The driver's count of pinned user pages, over every context (debugfs).
const PINNED_PAGES: &str = "/sys/kernel/debug/qhca/pinned_pages";

/// The device's live-object registers, QHCA_REG_NUM_CTX .. QHCA_REG_NUM_QP, read from BAR0
/// through sysfs (`resource0`, mapped read-only; the registers are read-only and reading them has
/// no side effect).
fn device_object_counts(cfg: &Config) -> Result<[(&'static str, u32); 5], Fail> {
    let bdf = match system::pci_bdf(cfg) {
        Ok(bdf) => bdf,
        Err(e) => bail!("PCI address of the device: {e}"),
    };
    let f = std::fs::File::open(format!("/sys/bus/pci/devices/{bdf}/resource0"))?;
    let map = memmap2::MmapOptions::new()
        .len(qhca_uapi::QHCA_REGS_SIZE as usize)
        .map_raw_read_only(&f)?;
    let reg = |off: u32| {
        // SAFETY: `off` is a 4-byte aligned offset inside the 4 KiB mapping of BAR0, which lives
        // as long as `map`; a volatile load of a device register creates no reference.
        unsafe { core::ptr::read_volatile(map.as_ptr().add(off as usize).cast::<u32>()) }
    };
    Ok([
        ("contexts", reg(qhca_uapi::QHCA_REG_NUM_CTX)),
        ("PDs", reg(qhca_uapi::QHCA_REG_NUM_PD)),
        ("MRs", reg(qhca_uapi::QHCA_REG_NUM_MR)),
        ("CQs", reg(qhca_uapi::QHCA_REG_NUM_CQ)),
        ("QPs", reg(qhca_uapi::QHCA_REG_NUM_QP)),
    ])
}

/// kill -9 in the middle of traffic: afterwards every object can be created again up to the
/// device's limits, and the doorbell page is free.
fn verbs_kill9_frees_everything(t: &mut T, cfg: &Config) -> CaseResult {
    let dev = cfg.dev.to_string_lossy().into_owned();
    let mut h = Helper::spawn(&["__verbs_traffic", &dev])?;
    let first = h.line("running")?;
    require!(t, first == "running", "helper said {first:?}");
    std::thread::sleep(Duration::from_millis(200));
    kill(Pid::from_raw(h.child.id() as i32), Signal::SIGKILL)?;
    let st = h.child.wait()?;
    check!(
        t,
        system::killed_by_signal(&st, Signal::SIGKILL),
        "helper ended with {st}"
    );
    drop(h);

    // Nothing else in this process holds a context now: the device and the driver must be back
    // to zero objects and zero pinned pages.
    for (what, n) in device_object_counts(cfg)? {
        check_eq!(t, n, 0, "device {what} alive after kill -9");
    }
    let pinned = std::fs::read_to_string(PINNED_PAGES)?;
    check_eq!(t, pinned.trim(), "0", "{PINNED_PAGES} after kill -9");

    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let a = ctx.query()?;
    check_eq!(
        t,
        a.uar_index,
        0,
        "the killed process's doorbell page is free again"
    );
    const MAX_EXERCISED: u32 = 1 << 14;
    for (what, n) in [
        ("PD", a.max_pd),
        ("CQ", a.max_cq),
        ("QP", a.max_qp),
        ("MR", a.max_mr),
    ] {
        require!(
            t,
            n > 0 && n <= MAX_EXERCISED,
            "{what} limit {n} (exercised up to {MAX_EXERCISED})"
        );
    }
    raise_nofile()?;
    let mut pds = Vec::new();
    for i in 0..a.max_pd {
        match Pd::new(&ctx) {
            Ok(p) => pds.push(p),
            Err(e) => bail!("PD {} of {}: {e}", i + 1, a.max_pd),
        }
    }
    check_errno!(
        t,
        Pd::new(&ctx),
        Errno::ENOSPC,
        "PD {} of {}",
        a.max_pd + 1,
        a.max_pd
    );
    let mut mrs = Vec::new();
    for i in 0..a.max_mr {
        match pds[0].reg_mr_buf(1, Access::NONE) {
            Ok(m) => mrs.push(m),
            Err(e) => bail!("MR {} of {}: {e}", i + 1, a.max_mr),
        }
    }
    check_errno!(
        t,
        pds[0].reg_mr_buf(1, Access::NONE),
        Errno::ENOSPC,
        "one MR too many"
    );
    drop(mrs);
    let mut cqs = Vec::new();
    for i in 0..a.max_cq {
        match Cq::new(&ctx, 2, None) {
            Ok(c) => cqs.push(c),
            Err(e) => bail!("CQ {} of {}: {e}", i + 1, a.max_cq),
        }
    }
    check_errno!(t, Cq::new(&ctx, 2, None), Errno::ENOSPC, "one CQ too many");
    let caps = QpCaps {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_sge: 1,
        max_inline: 0,
    };
    let mut qps = Vec::new();
    for i in 0..a.max_qp {
        match Qp::new(&pds[0], &cqs[0], &cqs[0], &caps) {
            Ok(q) => qps.push(q),
            Err(e) => bail!("QP {} of {}: {e}", i + 1, a.max_qp),
        }
    }
    check_errno!(
        t,
        Qp::new(&pds[0], &cqs[0], &cqs[0], &caps),
        Errno::ENOSPC,
        "one QP too many"
    );
    Ok(())
}

/// Room for the file descriptors and mappings the limit test needs (each object is one ioctl,
/// no fd, but the process may be near its defaults).
fn raise_nofile() -> Result<(), Fail> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < 1024 {
        setrlimit(Resource::RLIMIT_NOFILE, 1024.min(hard), hard)?;
    }
    Ok(())
}

/// Operations of the no-syscall loop.
const NOSYS_OPS: u32 = 10_000;

/// Exit codes of `__verbs_nosys`.
mod nosys_exit {
    pub const OK: i32 = 0;
    pub const SETUP: i32 = 10;
    pub const POST: i32 = 11;
    pub const WC_STATUS: i32 = 12;
    pub const STALL: i32 = 13;
    pub const DATA: i32 = 14;
    pub const SECCOMP: i32 = 15;
}

/// 10,000 post + poll operations in a helper under a seccomp filter that kills the process on
/// any system call: it must exit normally with code 0.
fn verbs_zero_syscalls(t: &mut T, cfg: &Config) -> CaseResult {
    let dev = cfg.dev.to_string_lossy().into_owned();
    let ops = NOSYS_OPS.to_string();
    let out = Command::new(std::env::current_exe()?)
        .args(["__verbs_nosys", &dev, &ops])
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.code() == Some(nosys_exit::SECCOMP) {
        // The guest kernel has no seccomp filters: count with strace instead.
        return zero_syscalls_by_strace(t, &dev);
    }
    check!(
        t,
        !system::killed_by_signal(&out.status, Signal::SIGSYS),
        "the loop made a system call (killed by SIGSYS); stdout: {text}"
    );
    check_eq!(
        t,
        out.status.code(),
        Some(nosys_exit::OK),
        "exit status {}; stdout: {text}",
        out.status
    );
    check!(t, text.contains(&format!("loop {NOSYS_OPS} ops")), "{text}");
    Ok(())
}

/// The system calls a strace log shows after the line that prints the loop marker and before
/// `exit_group`: the loop's own. `None` if the marker or the exit is missing.
fn syscalls_in_loop(log: &str) -> Option<Vec<String>> {
    let lines: Vec<&str> = log.lines().collect();
    let start = lines.iter().position(|l| l.contains("write(1, \"loop "))?;
    let end = start
        + lines[start..]
            .iter()
            .position(|l| l.contains("exit_group("))?;
    Some(
        lines[start + 1..end]
            .iter()
            .filter(|l| !l.contains("+++") && !l.contains("---"))
            .map(|l| (*l).to_owned())
            .collect(),
    )
}

/// The same loop without the filter, under `strace -f`: no system call between the marker and
/// the exit.
fn zero_syscalls_by_strace(t: &mut T, dev: &str) -> CaseResult {
    let Some(strace) = system::find_tool("strace") else {
        bail!("neither seccomp filters nor strace are available to count system calls");
    };
    let log = std::env::temp_dir().join(format!("qhca-nosys-{}.strace", std::process::id()));
    let exe = std::env::current_exe()?;
    let ops = NOSYS_OPS.to_string();
    let out = Command::new(strace)
        .arg("-f")
        .arg("-o")
        .arg(&log)
        .arg(exe)
        .args(["__verbs_nosys", dev, &ops, "--no-seccomp"])
        .stdin(Stdio::null())
        .output()?;
    let text = std::fs::read_to_string(&log);
    let _ = std::fs::remove_file(&log);
    check_eq!(
        t,
        out.status.code(),
        Some(nosys_exit::OK),
        "{}",
        system::describe(&out)
    );
    match syscalls_in_loop(&text?) {
        Some(calls) => {
            check_eq!(t, calls.len(), 0, "system calls in the loop: {calls:?}");
        }
        None => {
            fail!(t, "strace log has no loop marker or no exit_group");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Helper processes
// ---------------------------------------------------------------------------------------------

/// `qhca-vmtest __verbs_peer DEV | __verbs_traffic DEV | __verbs_nosys DEV N`.
pub fn helper_main(cmd: &str, args: &[String]) -> i32 {
    let [dev] = args else {
        match (args, cmd) {
            ([dev, n], "__verbs_nosys") => {
                return nosys_main(Path::new(dev), n.parse().unwrap_or(NOSYS_OPS), true)
            }
            ([dev, n, flag], "__verbs_nosys") if flag == "--no-seccomp" => {
                return nosys_main(Path::new(dev), n.parse().unwrap_or(NOSYS_OPS), false)
            }
            _ => {}
        }
        eprintln!("usage: qhca-vmtest {cmd} DEVICE");
        return 2;
    };
    let r = match cmd {
        "__verbs_peer" => peer_main(Path::new(dev)),
        "__verbs_traffic" => traffic_main(Path::new(dev)),
        _ => Err(qhca::Error::Invalid {
            what: format!("unknown helper {cmd}"),
        }),
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("qhca-vmtest {cmd}: {e}");
            1
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A QP of its own in RTS (looped to itself); prints `qpn N`, then on each `stats` line prints
/// `stats accepted A violations V cqes C state S`.
fn peer_main(dev: &Path) -> qhca::Result<()> {
    let ctx = Arc::new(Context::open(dev)?);
    let pd = Pd::new(&ctx)?;
    let mut cq = Cq::new(&ctx, 16, None)?;
    let peer_cq = Cq::new(&ctx, 16, None)?;
    let qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let peer = Qp::new(&pd, &peer_cq, &peer_cq, &QpCaps::default())?;
    qp.connect(7, peer.qpn(), 8, &ConnOpts::default())?;
    peer.connect(8, qp.qpn(), 7, &ConnOpts::default())?;
    say(&format!("qpn {}", qp.qpn()));
    let mut cqes = 0;
    let mut wc = [Wc::default(); 16];
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "stats" {
            cqes += cq.poll(&mut wc);
            let s = ctx.query_ctx()?;
            let state = qp.query()?.state.raw();
            say(&format!(
                "stats accepted {} violations {} cqes {cqes} state {state}",
                s.db_accepted, s.db_violations
            ));
        }
    }
    Ok(())
}

/// Two QPs writing to each other as fast as they can; prints `running` after the first
/// completion and never stops (it is killed).
fn traffic_main(dev: &Path) -> qhca::Result<()> {
    let ctx = Arc::new(Context::open(dev)?);
    let pd = Pd::new(&ctx)?;
    let o = PairOpts::default();
    let mut cq_a = Cq::new(&ctx, 256, None)?;
    let cq_b = Cq::new(&ctx, 256, None)?;
    let mut a = Qp::new(&pd, &cq_a, &cq_a, &o.caps)?;
    let b = Qp::new(&pd, &cq_b, &cq_b, &o.caps)?;
    a.connect(PSN_A, b.qpn(), PSN_B, &o.conn)?;
    b.connect(PSN_B, a.qpn(), PSN_A, &o.conn)?;
    let mr = pd.reg_mr_buf(1 << 16, Access::ALL)?;
    let op = WrOp::Write {
        raddr: mr.addr() + (1 << 15),
        rkey: mr.rkey(),
    };
    let sge = [mr.sge(0, 1 << 15)];
    let mut said = false;
    let mut wc = [Wc::default(); 16];
    loop {
        while a.post_send(&[SendWr::new(0, op, &sge)]).is_ok() {}
        let n = cq_a.poll(&mut wc);
        if n > 0 && !said {
            say("running");
            said = true;
        }
    }
}

/// The no-syscall loop: setup, then seccomp, then `ops` × (post one inline WRITE + poll its
/// completion), checking the written value; exits with a [`nosys_exit`] code.
fn nosys_main(dev: &Path, ops: u32, seccomp: bool) -> i32 {
    let setup = || -> qhca::Result<_> {
        let ctx = Arc::new(Context::open(dev)?);
        let pd = Pd::new(&ctx)?;
        let o = PairOpts::default();
        let cq = Cq::new(&ctx, 256, None)?;
        let peer_cq = Cq::new(&ctx, 16, None)?;
        let qp = Qp::new(&pd, &cq, &cq, &o.caps)?;
        let peer = Qp::new(&pd, &peer_cq, &peer_cq, &o.caps)?;
        qp.connect(PSN_A, peer.qpn(), PSN_B, &o.conn)?;
        peer.connect(PSN_B, qp.qpn(), PSN_A, &o.conn)?;
        let mr = pd.reg_mr_buf(4096, Access::ALL)?;
        Ok((ctx, pd, cq, peer_cq, qp, peer, mr))
    };
    let Ok((_ctx, _pd, mut cq, _peer_cq, mut qp, _peer, mr)) = setup() else {
        return nosys_exit::SETUP;
    };
    // Everything that could allocate or call into the kernel happens before the filter: the
    // doorbell is mapped (at create), the output buffer is ours.
    let mut wc = [Wc::default(); 4];
    let op = WrOp::Write {
        raddr: mr.addr() + 64,
        rkey: mr.rkey(),
    };
    say(&format!("loop {ops} ops"));
    if seccomp && crate::sys::forbid_syscalls().is_err() {
        return nosys_exit::SECCOMP;
    }
    for i in 0..u64::from(ops) {
        let v = i.to_le_bytes();
        if qp.post_send(&[SendWr::inline(i, op, &v)]).is_err() {
            crate::sys::exit_now(nosys_exit::POST);
        }
        let mut spins = 0u64;
        loop {
            let n = cq.poll(&mut wc);
            if n == 1 {
                if wc[0].status != WcStatus::Success || wc[0].wr_id != i {
                    crate::sys::exit_now(nosys_exit::WC_STATUS);
                }
                break;
            }
            spins += 1;
            if spins > 2_000_000_000 {
                crate::sys::exit_now(nosys_exit::STALL);
            }
            std::hint::spin_loop();
        }
        if mr.read_u64(64) != i {
            crate::sys::exit_now(nosys_exit::DATA);
        }
    }
    crate::sys::exit_now(nosys_exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_fields() {
        assert_ne!(pattern(1, 300), pattern(2, 300));
        let p = pattern(3, 600);
        assert_ne!(p[0..256], p[256..512], "no period of 256");
        assert_eq!(
            field("stats accepted 3 violations 0 cqes 0 state 3", "accepted"),
            Some(3)
        );
        assert_eq!(field("qpn 17", "qpn"), Some(17));
        assert_eq!(field("qpn x", "qpn"), None);
        assert_eq!(field("nothing", "qpn"), None);
    }

    #[test]
    fn names_are_prefixed_and_unique() {
        let names: Vec<_> = cases().iter().map(|c| c.name).collect();
        assert!(names.iter().all(|n| n.starts_with("verbs_")));
        let set: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(set.len(), names.len());
    }

    #[test]
    fn counts_the_syscalls_between_marker_and_exit() {
        let log = "10 openat(AT_FDCWD, \"/dev/qhca0\", O_RDWR) = 3\n\
                   10 write(1, \"loop 10000 ops\\n\", 15) = 15\n\
                   10 --- SIGCHLD {si_signo=SIGCHLD} ---\n\
                   10 exit_group(0) = ?\n\
                   10 +++ exited with 0 +++\n";
        assert_eq!(syscalls_in_loop(log), Some(vec![]));
        let bad = log.replace("--- SIGCHLD", "getpid() = 10\n10 --- SIGCHLD");
        assert_eq!(syscalls_in_loop(&bad).map(|v| v.len()), Some(1));
        assert_eq!(syscalls_in_loop("exit_group(0)"), None);
        assert_eq!(
            syscalls_in_loop("10 write(1, \"loop 1 ops\\n\", 11) = 11\n"),
            None
        );
    }

    #[test]
    fn nosys_loop_is_syscall_free_on_the_host_too_until_it_needs_a_device() {
        // Without a device the helper stops at setup; with --no-seccomp it takes the other path.
        assert_eq!(
            helper_main("__verbs_nosys", &["/nonexistent".into(), "5".into()]),
            nosys_exit::SETUP
        );
        let a = ["/nonexistent".into(), "5".into(), "--no-seccomp".into()];
        assert_eq!(helper_main("__verbs_nosys", &a), nosys_exit::SETUP);
    }

    #[test]
    fn helper_usage() {
        assert_eq!(helper_main("__verbs_peer", &[]), 2);
        assert_eq!(helper_main("__verbs_bogus", &["/dev/null".into()]), 1);
        assert_eq!(
            helper_main("__verbs_peer", &["/nonexistent/qhca0".into()]),
            1
        );
    }
}
