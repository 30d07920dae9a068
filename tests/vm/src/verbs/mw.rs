// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Memory windows on the real device: bounds at byte granularity, rebinding and invalidation
//! (LOCAL_INV, SEND_WITH_INV), type 2 windows tied to their QP, refused binds, deregistering a
//! region with windows bound, and the bind/write/invalidate loop with no system call.

use super::*;
use qhca::{Mw, MwType};

/// The right the target region has: the device writes it (through windows only: the region
/// itself grants no remote right).
const TARGET: Access = Access(Access::LOCAL_WRITE.0 | Access::MW_BIND.0);
/// A window that may be written and read.
const RW: Access = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

/// Posts `op` (no data) on `qp` and waits for its completion on `cq`.
fn local_op(qp: &mut Qp, cq: &mut Cq, wr_id: u64, op: WrOp) -> Result<Wc, Fail> {
    qp.post_send(&[SendWr::new(wr_id, op, &[])])?;
    wait_wc(cq)
}

/// Binds `mw` to `len` bytes at `off` of `mr` through `p.b` (the target side); checks the CQE.
fn bind(t: &mut T, p: &mut Pair, mw: &mut Mw, mr: &MrBuf, off: usize, len: u64) -> CaseResult {
    let op = mw.bind(mr, mr.addr() + off as u64, len, RW);
    let wc = local_op(&mut p.b, &mut p.cq_b, 7, op)?;
    check_wc(t, &wc, 7, WcStatus::Success, WcOpcode::BindMw, "bind");
    Ok(())
}

/// One RDMA WRITE of `len` bytes from `src` to `raddr`/`rkey` through `p.a`: its status.
fn write(p: &mut Pair, src: &MrBuf, len: u32, raddr: u64, rkey: u32) -> Result<WcStatus, Fail> {
    let sge = [src.sge(0, len)];
    p.a.post_send(&[SendWr::new(1, WrOp::Write { raddr, rkey }, &sge)])?;
    Ok(wait_wc(&mut p.cq_a)?.status)
}

/// One RDMA READ of `len` bytes from `raddr`/`rkey` into `dst` through `p.a`: its status.
fn read(p: &mut Pair, dst: &MrBuf, len: u32, raddr: u64, rkey: u32) -> Result<WcStatus, Fail> {
    let sge = [dst.sge(0, len)];
    p.a.post_send(&[SendWr::new(2, WrOp::Read { raddr, rkey }, &sge)])?;
    Ok(wait_wc(&mut p.cq_a)?.status)
}

/// A type 1 window over 128 bytes in the middle of a region: WRITE and READ inside work; one
/// byte outside, at either end, is a remote access error and writes nothing.
pub(super) fn verbs_mw_bounds(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let dst = guarded(&p.pd, 128, TARGET)?;
    let mut src = p.pd.reg_mr_buf(256, Access::LOCAL_WRITE)?;
    src.write_at(0, &pattern(3, 256));
    let mut mw = p.pd.alloc_mw(MwType::Type1)?;
    check!(
        t,
        mw.rkey() & qhca_uapi::QHCA_MW_KEY_FLAG != 0,
        "{:#x}",
        mw.rkey()
    );
    bind(t, &mut p, &mut mw, &dst, GUARD, 128)?;
    let base = dst.addr() + GUARD as u64;
    check_eq!(
        t,
        write(&mut p, &src, 128, base, mw.rkey())?,
        WcStatus::Success
    );
    check_guarded(t, &dst, &pattern(3, 128), "written through the window");
    check_eq!(
        t,
        read(&mut p, &src, 128, base, mw.rkey())?,
        WcStatus::Success
    );
    check_eq!(t, src.to_vec(0, 128), pattern(3, 128), "read back");

    // The region grants no remote right of its own: its key refuses what the window allows.
    let mut q = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    let st = write(&mut q, &src, 8, base, dst.rkey())?;
    check_eq!(t, st, WcStatus::RemAccessErr, "the region's own key");

    for (what, raddr, len) in [
        ("one byte before", base - 1, 8),
        ("one byte past the end", base + 121, 8),
        ("longer than the window", base, 129),
    ] {
        let mut q = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
        let st = write(&mut q, &src, len, raddr, mw.rkey())?;
        check_eq!(t, st, WcStatus::RemAccessErr, "WRITE {what}");
        let mut q = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
        let st = read(&mut q, &src, len, raddr, mw.rkey())?;
        check_eq!(t, st, WcStatus::RemAccessErr, "READ {what}");
    }
    check_guarded(t, &dst, &pattern(3, 128), "after the refused accesses");
    Ok(())
}

/// Rebinding a type 1 window, and LOCAL_INV of a type 2 window, end the old key at once; a
/// type 2 window is bound again only once invalidated; a type 1 zero-length bind unbinds. Type 2
/// is 2B: a type 2A window is refused (`EOPNOTSUPP`).
pub(super) fn verbs_mw_rebind_and_invalidate(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let dst = guarded(&p.pd, 256, TARGET)?;
    let src = p.pd.reg_mr_buf(256, Access::LOCAL_WRITE)?;
    let base = dst.addr() + GUARD as u64;

    let mut w1 = p.pd.alloc_mw(MwType::Type1)?;
    check_eq!(t, (w1.mw_type(), w1.pdn()), (MwType::Type1, p.pd.pdn()));
    bind(t, &mut p, &mut w1, &dst, GUARD, 64)?;
    let old = w1.rkey();
    bind(t, &mut p, &mut w1, &dst, GUARD + 64, 64)?;
    check!(t, w1.rkey() != old, "a bind changes the key");
    check_eq!(
        t,
        write(&mut p, &src, 8, base + 64, w1.rkey())?,
        WcStatus::Success
    );
    let mut q = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    let st = write(&mut q, &src, 8, base, old)?;
    check_eq!(t, st, WcStatus::RemAccessErr, "the key of the earlier bind");
    let unbind = w1.unbind();
    let wc = local_op(&mut p.b, &mut p.cq_b, 8, unbind)?;
    check_wc(
        t,
        &wc,
        8,
        WcStatus::Success,
        WcOpcode::BindMw,
        "zero-length bind",
    );
    let mut q = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    let st = write(&mut q, &src, 8, base + 64, w1.rkey())?;
    check_eq!(t, st, WcStatus::RemAccessErr, "an unbound type 1 window");

    // Type 2 windows: the core's type 2 is qhca's 2B (checked by QPN and PD). The core has no
    // type 2A, so the provider refuses one on its node rather than hand out a 2B in its place.
    check_errno!(
        t,
        p.pd.alloc_mw(MwType::Type2A),
        Errno::EOPNOTSUPP,
        "a type 2A window"
    );
    let mut p = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    let mut w2 = p.pd.alloc_mw(MwType::Type2B)?;
    check_eq!(t, (w2.mw_type(), w2.pdn()), (MwType::Type2B, p.pd.pdn()));
    bind(t, &mut p, &mut w2, &dst, GUARD, 64)?;
    check_eq!(
        t,
        write(&mut p, &src, 8, base, w2.rkey())?,
        WcStatus::Success
    );
    let inv = w2.invalidate();
    let wc = local_op(&mut p.b, &mut p.cq_b, 9, inv)?;
    check_wc(
        t,
        &wc,
        9,
        WcStatus::Success,
        WcOpcode::LocalInv,
        "LOCAL_INV",
    );
    let st = write(&mut p, &src, 8, base, w2.rkey())?;
    check_eq!(t, st, WcStatus::RemAccessErr, "type 2 after LOCAL_INV");

    // Bound again after the invalidation; binding a bound type 2 window is refused.
    let mut p = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    bind(t, &mut p, &mut w2, &dst, GUARD, 64)?;
    check_eq!(
        t,
        write(&mut p, &src, 8, base, w2.rkey())?,
        WcStatus::Success
    );
    let key = w2.rkey();
    let again = w2.bind(&dst, base, 8, RW);
    let wc = local_op(&mut p.b, &mut p.cq_b, 10, again)?;
    check_eq!(t, wc.status, WcStatus::MwBindErr, "type 2: bound already");
    let mut q = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    let st = write(&mut q, &src, 8, base, key)?;
    check_eq!(t, st, WcStatus::RemAccessErr, "type 2: only through its QP");
    Ok(())
}

/// SEND_WITH_INV: the receiver's CQE reports the key, and the window is unbound when the CQE
/// is there. A key that is no bound type 2 window of the receiving QP fails both sides.
pub(super) fn verbs_mw_send_with_inv(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let dst = guarded(&p.pd, 64, TARGET)?;
    let rbuf = p.pd.reg_mr_buf(64, Access::LOCAL_WRITE)?;
    let mut src = p.pd.reg_mr_buf(64, Access::LOCAL_WRITE)?;
    src.write_at(0, &pattern(5, 64));
    let base = dst.addr() + GUARD as u64;
    let mut mw = p.pd.alloc_mw(MwType::Type2B)?;
    bind(t, &mut p, &mut mw, &dst, GUARD, 64)?;
    check_eq!(
        t,
        write(&mut p, &src, 64, base, mw.rkey())?,
        WcStatus::Success
    );

    p.b.post_recv(&[RecvWr {
        wr_id: 40,
        sges: &[rbuf.sge(0, 64)],
    }])?;
    let sge = [src.sge(0, 16)];
    let op = WrOp::SendInv { rkey: mw.rkey() };
    p.a.post_send(&[SendWr::new(41, op, &sge)])?;
    let r = wait_wc(&mut p.cq_b)?;
    check_wc(
        t,
        &r,
        40,
        WcStatus::Success,
        WcOpcode::Recv,
        "SEND_WITH_INV",
    );
    check_eq!(
        t,
        (r.invalidated_rkey, r.imm, r.byte_len),
        (Some(mw.rkey()), None, 16)
    );
    check_eq!(t, rbuf.to_vec(0, 16), pattern(5, 16), "the message");
    let s = wait_wc(&mut p.cq_a)?;
    check_wc(t, &s, 41, WcStatus::Success, WcOpcode::Send, "sender");
    let st = write(&mut p, &src, 8, base, mw.rkey())?;
    check_eq!(t, st, WcStatus::RemAccessErr, "after SEND_WITH_INV");

    // Again, now that nothing is bound: a remote invalid request on both sides.
    let mut p = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    p.b.post_recv(&[RecvWr {
        wr_id: 42,
        sges: &[rbuf.sge(0, 64)],
    }])?;
    p.a.post_send(&[SendWr::new(43, op, &sge)])?;
    let r = wait_wc(&mut p.cq_b)?;
    check_eq!(t, (r.wr_id, r.status), (42, WcStatus::RemInvReqErr));
    let s = wait_wc(&mut p.cq_a)?;
    check_eq!(t, (s.wr_id, s.status), (43, WcStatus::RemInvReqErr));
    Ok(())
}

/// What a window's rights and its region allow: a bind the region does not allow completes
/// with MW_BIND_ERR and changes nothing; a READ-only window refuses a WRITE.
pub(super) fn verbs_mw_refused_binds(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let src = pd.reg_mr_buf(64, Access::LOCAL_WRITE)?;
    let dst = guarded(&pd, 64, TARGET)?;
    let no_bind = pd.reg_mr_buf(64, Access::LOCAL_WRITE)?;
    let read_only = pd.reg_mr_buf(64, Access::MW_BIND)?;
    let base = dst.addr() + GUARD as u64;

    // A type 1 window bound to dst, read-only.
    let mut p = pair_in(&ctx, &pd, &PairOpts::default())?;
    let mut mw = pd.alloc_mw(MwType::Type1)?;
    let op = mw.bind(&dst, base, 64, Access::REMOTE_READ);
    let wc = local_op(&mut p.b, &mut p.cq_b, 1, op)?;
    check_eq!(t, wc.status, WcStatus::Success, "read-only bind");
    let good = mw.rkey();
    let st = write(&mut p, &src, 8, base, good)?;
    check_eq!(
        t,
        st,
        WcStatus::RemAccessErr,
        "WRITE through a READ-only window"
    );

    let cases: [(&str, &MrBuf, u64, u64, Access); 4] = [
        (
            "no MW_BIND",
            &no_bind,
            no_bind.addr(),
            64,
            Access::REMOTE_READ,
        ),
        (
            "REMOTE_WRITE without LOCAL_WRITE",
            &read_only,
            read_only.addr(),
            64,
            Access::REMOTE_WRITE,
        ),
        (
            "one byte past the region",
            &dst,
            base,
            64 + GUARD as u64 + 1,
            RW,
        ),
        ("a local right", &dst, base, 8, Access::LOCAL_WRITE),
    ];
    for (what, mr, addr, len, access) in cases {
        let mut p = pair_in(&ctx, &pd, &PairOpts::default())?;
        let op = mw.bind(mr, addr, len, access);
        let wc = local_op(&mut p.b, &mut p.cq_b, 2, op)?;
        check_eq!(t, wc.status, WcStatus::MwBindErr, "{what}");
        check_eq!(t, p.b.query()?.state, QpState::Err, "{what}: QP in ERR");
        // Nothing changed: the key of the last good bind still reads.
        let mut q = pair_in(&ctx, &pd, &PairOpts::default())?;
        check_eq!(
            t,
            read(&mut q, &src, 8, base, good)?,
            WcStatus::Success,
            "{what}"
        );
    }
    Ok(())
}

/// Deregistering a region with a window bound (the core's DEREG_MR) unbinds the window, whose
/// key then fails, and succeeds.
pub(super) fn verbs_mw_dereg_with_window_bound(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let src = p.pd.reg_mr_buf(64, Access::LOCAL_WRITE)?;
    let dst = p.pd.reg_mr_buf(64, TARGET)?;
    let mut mw = p.pd.alloc_mw(MwType::Type1)?;
    bind(t, &mut p, &mut mw, &dst, 0, 64)?;
    check_eq!(
        t,
        write(&mut p, &src, 8, dst.addr(), mw.rkey())?,
        WcStatus::Success
    );
    let addr = dst.addr();
    dst.dereg()?;
    let st = write(&mut p, &src, 8, addr, mw.rkey())?;
    check_eq!(
        t,
        st,
        WcStatus::RemAccessErr,
        "the window went with its region"
    );
    Ok(())
}

/// The bind + WRITE + LOCAL_INV loop in a helper under the seccomp filter that kills the process
/// on any system call.
pub(super) fn verbs_mw_zero_syscalls(t: &mut T, cfg: &Config) -> CaseResult {
    process::zero_syscalls(t, cfg, "__verbs_nosys_mw")
}

/// The loop of [`verbs_mw_zero_syscalls`]: `ops` × (bind a type 2 window over a word of `b`'s
/// region through `b`, WRITE the word through it from `a`, LOCAL_INV it through `b`), checking
/// every completion and the word.
pub(super) fn nosys_mw_main(dev: &Path, ops: u32, seccomp: bool) -> i32 {
    use process::nosys_exit;
    let setup = || -> qhca::Result<_> {
        let ctx = Arc::new(Context::open(dev)?);
        let pd = Pd::new(&ctx)?;
        let p = connected_pair(&ctx, &pd, &PairOpts::default())?;
        let mr = pd.reg_mr_buf(4096, TARGET)?;
        let mw = pd.alloc_mw(MwType::Type2B)?;
        Ok((p, mr, mw))
    };
    let Ok((mut p, mr, mut mw)) = setup() else {
        return nosys_exit::SETUP;
    };
    let mut wc = [Wc::default(); 4];
    let mut wait = |cq: &mut Cq, id: u64| process::nosys_wait(cq, &mut wc, id);
    process::say(&format!("loop {ops} ops"));
    if seccomp && crate::sys::forbid_syscalls().is_err() {
        return nosys_exit::SECCOMP;
    }
    for i in 0..u64::from(ops) {
        let off = (i % 512) * 8;
        let bind = mw.bind(&mr, mr.addr() + off, 8, Access::REMOTE_WRITE);
        let write = WrOp::Write {
            raddr: mr.addr() + off,
            rkey: mw.rkey(),
        };
        let v = i.to_le_bytes();
        let ok = p.b.post_send(&[SendWr::new(i, bind, &[])]).is_ok();
        wait(&mut p.cq_b, i);
        let ok = ok && p.a.post_send(&[SendWr::inline(i, write, &v)]).is_ok();
        wait(&mut p.cq_a, i);
        let ok = ok
            && p.b
                .post_send(&[SendWr::new(i, mw.invalidate(), &[])])
                .is_ok();
        if !ok {
            crate::sys::exit_now(nosys_exit::POST);
        }
        wait(&mut p.cq_b, i);
        if mr.read_u64(off as usize) != i {
            crate::sys::exit_now(nosys_exit::DATA);
        }
    }
    crate::sys::exit_now(nosys_exit::OK)
}
