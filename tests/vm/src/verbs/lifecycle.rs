// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Objects, posting, CQ events, the QP state machine, and what a reset or destroyed QP leaves in
//! its CQ.

use super::*;

/// Every object can be made and dropped; a new QP is in RESET.
pub(super) fn verbs_objects(t: &mut T, cfg: &Config) -> CaseResult {
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
    let mut buf = vec![0u8; 100];
    // SAFETY: the region is deregistered with `dereg` just below, and the buffer leaked if
    // that fails.
    let borrowed = unsafe { pd.reg_mr(&mut buf[3..], Access::LOCAL_WRITE)? };
    check_eq!(t, borrowed.len(), 97);
    check!(t, borrowed.lkey() != mr.lkey(), "two regions, two keys");
    if let Err(e) = borrowed.dereg() {
        std::mem::forget(buf);
        bail!("deregistration failed: {e}");
    }
    // An owned buffer comes back after deregistration.
    let mut boxed = pd.reg_mr_box(vec![7u8; 33], Access::LOCAL_WRITE)?;
    boxed.write_at(32, b"x");
    let back = boxed.into_box()?;
    check_eq!(t, (back.len(), back[0], back[32]), (33, 7, b'x'));
    let cq = Cq::new(&ctx, 16, Some(qhca::eventfd()?))?;
    let qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let info = qp.query()?;
    check_eq!(t, info.state, QpState::Reset);
    check_eq!(t, ctx.query_ctx()?.db_violations, 0);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Posting, events, state machine, stale CQEs
// ---------------------------------------------------------------------------------------------

/// A full queue is refused with the index of the first request not posted; unsignaled requests
/// are freed by the signaled completion after them.
pub(super) fn verbs_post_errors_and_unsignaled(t: &mut T, cfg: &Config) -> CaseResult {
    let mut o = PairOpts::default();
    o.caps.max_send_wr = 8;
    o.caps.max_recv_wr = 4;
    let mut p = pair(cfg, &o)?;
    let depth = p.a.layout().sq_depth() as usize;
    check_eq!(t, depth, 8);
    let dst =
        p.pd.reg_mr_buf(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let mut src = p.pd.reg_mr_buf(4096, Access::NONE)?;
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
pub(super) fn verbs_cq_event(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let mut cq = Cq::new(&ctx, 16, Some(qhca::eventfd()?))?;
    let peer_cq = Cq::new(&ctx, 16, None)?;
    let mut qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let peer = Qp::new(&pd, &peer_cq, &peer_cq, &QpCaps::default())?;
    connect(&qp, 1, peer.qpn(), 2, &ConnOpts::default())?;
    connect(&peer, 2, qp.qpn(), 1, &ConnOpts::default())?;
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

/// What [`verbs_cq_resize`] drives: `a` SENDs into `b`'s receives, which complete on the CQ
/// under test; `a`'s own completions go to `cq_a`.
struct ResizeRig {
    a: Qp,
    b: Qp,
    cq_a: Cq,
    src: MrBuf,
    dst: MrBuf,
    /// The wr_id of the next receive.
    next: u64,
}

impl ResizeRig {
    /// `n` SENDs into `n` receives (the next `n` wr_ids); returns once every SEND completed.
    /// The device writes a receive's CQE before it acknowledges the SEND, so by then all `n`
    /// receive CQEs are in the CQ under test.
    #[track_caller]
    fn deliver(&mut self, n: u64) -> Result<std::ops::Range<u64>, Fail> {
        let ids = self.post(n)?;
        for id in ids.clone() {
            let wc = wait_wc(&mut self.cq_a)?;
            if wc.status != WcStatus::Success || wc.wr_id != id {
                return Err(fail_msg(format!("SEND {id}: {wc:?}")));
            }
        }
        Ok(ids)
    }

    /// Posts `n` receives and `n` SENDs into them (the next `n` wr_ids).
    #[track_caller]
    fn post(&mut self, n: u64) -> Result<std::ops::Range<u64>, Fail> {
        let ids = self.next..self.next + n;
        self.next += n;
        let rsge = [self.dst.sge(0, 8)];
        let ssge = [self.src.sge(0, 8)];
        let recvs: Vec<RecvWr<'_>> = ids
            .clone()
            .map(|wr_id| RecvWr { wr_id, sges: &rsge })
            .collect();
        let sends: Vec<SendWr<'_>> = ids
            .clone()
            .map(|id| SendWr::new(id, WrOp::Send, &ssge))
            .collect();
        self.b.post_recv(&recvs)?;
        self.a.post_send(&sends)?;
        Ok(ids)
    }
}

/// Polls `n` completions of `cq`; their wr_ids (each must be a successful receive).
#[track_caller]
fn take(t: &mut T, cq: &mut Cq, n: u64) -> Result<Vec<u64>, Fail> {
    let mut got = Vec::new();
    for _ in 0..n {
        let wc = wait_wc(cq)?;
        check!(t, wc.is_recv && wc.status.is_ok(), "{wc:?}");
        got.push(wc.wr_id);
    }
    Ok(got)
}

/// `Cq::resize` (RESIZE_CQ) on a CQ with completions not polled yet: smaller then larger, the
/// completions stay, in order, and many rounds go through the new ring; a ring too small for
/// what is pending is EINVAL and loses nothing; rings of each size in turn (the first is kept
/// for the events' handle, the later ones unmapped as they are replaced); an armed CQ stays
/// armed across a resize, and one armed after it still wakes; an overrun's error event still
/// names the CQ, and a CQ in error is not resized.
pub(super) fn verbs_cq_resize(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let o = PairOpts::default();
    let mut cq = Cq::new(&ctx, 64, Some(qhca::eventfd()?))?;
    let cq_a = Cq::new(&ctx, 256, None)?;
    let a = Qp::new(&pd, &cq_a, &cq_a, &o.caps)?;
    let b = Qp::new(&pd, &cq, &cq, &o.caps)?;
    connect(&a, PSN_A, b.qpn(), PSN_B, &o.conn)?;
    connect(&b, PSN_B, a.qpn(), PSN_A, &o.conn)?;
    let mut r = ResizeRig {
        a,
        b,
        cq_a,
        src: pd.reg_mr_buf(64, Access::NONE)?,
        dst: pd.reg_mr_buf(64, Access::LOCAL_WRITE)?,
        next: 0,
    };
    let all = |ids: std::ops::Range<u64>| ids.collect::<Vec<_>>();
    check_eq!(t, cq.entries(), 64);

    // Smaller, with 15 pending: they fit.
    r.deliver(20)?;
    check_eq!(t, take(t, &mut cq, 5)?, all(0..5));
    cq.resize(16)?;
    check_eq!(
        t,
        (cq.entries(), cq.ci()),
        (16, 5),
        "16 entries, index kept"
    );
    check_eq!(
        t,
        take(t, &mut cq, 15)?,
        all(5..20),
        "the pending ones, in order"
    );
    check_eq!(t, quiet(&mut cq).len(), 0, "nothing more");
    // 30 rounds of 7 through the 16-entry ring (13 passes).
    for _ in 0..30 {
        let ids = r.deliver(7)?;
        let got = take(t, &mut cq, 7)?;
        if got != all(ids.clone()) {
            fail!(t, "round {ids:?}: {got:?}");
            break;
        }
    }

    // Larger, with 10 pending; the device goes on in the new ring.
    r.deliver(12)?;
    let first = r.next - 12;
    check_eq!(t, take(t, &mut cq, 2)?, all(first..first + 2));
    cq.resize(200)?;
    check_eq!(t, cq.entries(), 256);
    r.deliver(40)?;
    check_eq!(
        t,
        take(t, &mut cq, 50)?,
        all(first + 2..r.next),
        "10 moved and 40 new, in order"
    );

    // Too small for the 10 pending: EINVAL, nothing lost, the CQ as it was.
    let ids = r.deliver(10)?;
    check_errno!(t, cq.resize(4), Errno::EINVAL, "4 entries for 10 pending");
    check_errno!(t, cq.resize(8), Errno::EINVAL, "8 entries for 10 pending");
    check_eq!(t, cq.entries(), 256, "unchanged");
    cq.resize(16)?;
    check_eq!(t, cq.entries(), 16);
    check_eq!(t, take(t, &mut cq, 10)?, all(ids), "after the refusals");
    check_eq!(t, quiet(&mut cq).len(), 0);

    // Armed, then resized: the arm holds.
    cq.arm();
    cq.resize(64)?;
    check_eq!(t, cq.wait(Some(QUIET))?, false, "no completion, no event");
    let ids = r.deliver(1)?;
    check_eq!(
        t,
        cq.wait(Some(WC_TIMEOUT))?,
        true,
        "the arm outlived the resize"
    );
    check_eq!(t, take(t, &mut cq, 1)?, all(ids));
    // Armed after a resize.
    cq.resize(32)?;
    cq.arm();
    let ids = r.deliver(3)?;
    check_eq!(
        t,
        cq.wait(Some(WC_TIMEOUT))?,
        true,
        "armed after the resize"
    );
    check_eq!(t, take(t, &mut cq, 3)?, all(ids));
    check_eq!(t, cq.wait(Some(QUIET))?, false, "one arm, one event");
    check_eq!(t, cq.stray_cqes(), 0);
    check_eq!(t, (r.a.send_outstanding(), r.b.recv_outstanding()), (0, 0));

    // An overrun after the resizes: its error event still names this CQ (the core reports it
    // by the first ring's address, which the CQ keeps), not a CQ made since; a CQ in error is
    // not resized (EBUSY).
    let later = Cq::new(&ctx, 64, None)?;
    cq.resize(2)?;
    r.post(4)?;
    let mut events = Vec::new();
    while let Some(ev) = ctx.wait_async_event(Some(WC_TIMEOUT))? {
        let done = matches!(ev, AsyncEvent::CqErr { .. });
        events.push(ev);
        if done {
            break;
        }
    }
    check!(
        t,
        events.contains(&AsyncEvent::CqErr { cqn: cq.cqn() }),
        "CQ {:#x} overran (a later CQ is {:#x}): events {events:?}",
        cq.cqn(),
        later.cqn()
    );
    check_errno!(t, cq.resize(64), Errno::EBUSY, "a CQ in error");
    Ok(())
}

/// Transitions the IB state machine forbids are EINVAL and leave the state as it was.
pub(super) fn verbs_invalid_transitions(t: &mut T, cfg: &Config) -> CaseResult {
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

/// Waits until the byte at `off` of `mr` is `v` (a WRITE landed), or fails.
fn landed(mr: &MrBuf, off: usize, v: u8) -> Result<(), Fail> {
    let end = Instant::now() + WC_TIMEOUT;
    while mr.load_u8(off) != v {
        if Instant::now() > end {
            bail!("the write to offset {off} did not land within {WC_TIMEOUT:?}");
        }
        std::thread::yield_now();
    }
    // The requester's CQE follows the ACK, shortly after the data.
    std::thread::sleep(QUIET);
    Ok(())
}

/// Two QPs share a CQ. One is moved to RESET, and later the other destroyed, each with
/// unpolled CQEs in that CQ: the provider removes exactly that QP's CQEs (as mlx5's
/// `__mlx5_cq_clean`), keeps the other's, and the reset QP's accounting starts clean. The old
/// provider polled the stale CQEs afterwards and credited them to whatever QP had the number.
pub(super) fn verbs_stale_cqes_cleaned(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let o = PairOpts::default();
    let mut shared = Cq::new(&ctx, 64, None)?;
    let peer_cq = Cq::new(&ctx, 64, None)?;
    let mut a = Qp::new(&pd, &shared, &shared, &o.caps)?;
    let mut c = Qp::new(&pd, &shared, &shared, &o.caps)?;
    let b = Qp::new(&pd, &peer_cq, &peer_cq, &o.caps)?;
    let d = Qp::new(&pd, &peer_cq, &peer_cq, &o.caps)?;
    connect(&a, 1, b.qpn(), 2, &o.conn)?;
    connect(&b, 2, a.qpn(), 1, &o.conn)?;
    connect(&c, 3, d.qpn(), 4, &o.conn)?;
    connect(&d, 4, c.qpn(), 3, &o.conn)?;
    let dst = pd.reg_mr_buf(4096, Access::ALL)?;
    let write = |off: usize, v: u8| -> (WrOp, Vec<u8>) {
        let op = WrOp::Write {
            raddr: dst.addr() + off as u64,
            rkey: dst.rkey(),
        };
        (op, vec![v])
    };
    for (id, off) in [(1u64, 0usize), (2, 1), (3, 2)] {
        let (op, data) = write(off, id as u8);
        a.post_send(&[SendWr::inline(id, op, &data)])?;
    }
    let (op, data) = write(100, 100);
    c.post_send(&[SendWr::inline(100, op, &data)])?;
    landed(&dst, 2, 3)?;
    landed(&dst, 100, 100)?;
    check_eq!(t, a.send_outstanding(), 3, "not polled yet");

    a.modify(&QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    })?;
    check_eq!(t, a.send_outstanding(), 0, "RESET empties the queue");
    let got = quiet(&mut shared);
    check_eq!(
        t,
        got.iter().map(|w| (w.qpn, w.wr_id)).collect::<Vec<_>>(),
        vec![(c.qpn(), 100)],
        "only the other QP's CQE is left after the reset: {got:?}"
    );
    check_eq!(t, c.send_outstanding(), 0);

    // Reconnected, the reset QP counts exactly its new requests.
    b.modify(&QpAttr {
        state: Some(QpState::Reset),
        ..QpAttr::default()
    })?;
    connect(&a, 5, b.qpn(), 6, &o.conn)?;
    connect(&b, 6, a.qpn(), 5, &o.conn)?;
    let (op, data) = write(200, 7);
    a.post_send(&[SendWr::inline(7, op, &data)])?;
    let wc = wait_wc(&mut shared)?;
    check_eq!(
        t,
        (wc.qpn, wc.wr_id, wc.status),
        (a.qpn(), 7, WcStatus::Success)
    );
    check_eq!(t, a.send_outstanding(), 0);
    check_eq!(
        t,
        shared.stray_cqes(),
        0,
        "no CQE named a slot not outstanding"
    );

    // Destroyed with CQEs pending: they go with it.
    for (id, off) in [(101u64, 101usize), (102, 102)] {
        let (op, data) = write(off, id as u8);
        c.post_send(&[SendWr::inline(id, op, &data)])?;
    }
    landed(&dst, 102, 102)?;
    let old_qpn = c.qpn();
    drop(c);
    drop(d);
    let e = Qp::new(&pd, &shared, &shared, &o.caps)?;
    check!(
        t,
        e.qpn() != old_qpn,
        "a new QP does not reuse a QPN at once ({:#x})",
        e.qpn()
    );
    check_eq!(
        t,
        quiet(&mut shared),
        Vec::<Wc>::new(),
        "the destroyed QP's CQEs are gone"
    );
    Ok(())
}

/// A QP that enters ERR on its own queues `QHCA_ASYNC_QP_FATAL` for its context; a MODIFY to
/// ERR does not; a healthy context has no event.
pub(super) fn verbs_async_qp_fatal(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    check_eq!(
        t,
        p.ctx.get_async_event()?,
        None,
        "no event on a new context"
    );
    check_eq!(t, p.ctx.wait_async_event(Some(QUIET))?, None);
    let src = p.pd.reg_mr_buf(64, Access::NONE)?;
    let dst =
        p.pd.reg_mr_buf(64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let bad = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey() ^ 0x100, // another index: no region
    };
    p.a.post_send(&[SendWr::new(1, bad, &[src.sge(0, 8)])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_eq!(t, wc.status, WcStatus::RemAccessErr);
    let mut fatal = Vec::new();
    while let Some(ev) = p.ctx.wait_async_event(Some(QUIET))? {
        fatal.push(ev);
    }
    for (who, qpn) in [("responder", p.b.qpn()), ("requester", p.a.qpn())] {
        check!(
            t,
            fatal.contains(&AsyncEvent::QpFatal { qpn }),
            "{who} QP {qpn:#x} in ERR: events {fatal:?}"
        );
    }
    check!(
        t,
        !p.ctx.is_dead(),
        "a QP error does not disassociate the context"
    );
    // Asked for: no event. Through INIT: the RDMA core has no RESET -> ERR.
    let cq = Cq::new(&p.ctx, 4, None)?;
    let q = Qp::new(&p.pd, &cq, &cq, &QpCaps::default())?;
    q.to_init(Access::NONE)?;
    q.modify(&QpAttr {
        state: Some(QpState::Err),
        ..QpAttr::default()
    })?;
    check_eq!(
        t,
        p.ctx.wait_async_event(Some(QUIET))?,
        None,
        "MODIFY_QP to ERR queues no event"
    );
    Ok(())
}

/// `ConnOpts::default()` retries RNR a finite number of times: a SEND without a receive at the
/// peer fails with RNR_RETRY_EXC_ERR instead of retrying for ever.
pub(super) fn verbs_default_rnr_is_finite(t: &mut T, cfg: &Config) -> CaseResult {
    let o = PairOpts {
        conn: ConnOpts::default(),
        ..PairOpts::default()
    };
    let mut p = pair(cfg, &o)?;
    p.a.post_send(&[SendWr::inline(9, WrOp::Send, b"nobody listens")])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_eq!(t, (wc.wr_id, wc.status), (9, WcStatus::RnrRetryExcErr));
    check_eq!(t, p.a.query()?.state, QpState::Err);
    Ok(())
}

/// `Qp::connect` sets the responder resources at INIT -> RTR and the initiator depth at RTR ->
/// RTS, through the driver to the device, and QUERY_QP reads them back; 16 of each by default.
/// Each is taken only at its own transitions (EINVAL otherwise), 1..=16. qhca's own node also
/// takes `max_rd_atomic` at RTS -> RTS; the RDMA core's takes it only at RTR -> RTS
/// (`ib_modify_qp_is_ok`, as for any device).
pub(super) fn verbs_connect_sets_rd_atomic_depths(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let cq = Cq::new(&ctx, 8, None)?;
    let attr = ctx.query()?;
    check_eq!(t, (attr.max_qp_rd_atom, attr.max_qp_init_rd_atom), (16, 16));
    let depths = |qp: &Qp| -> qhca::Result<(u8, u8)> {
        let i = qp.query()?;
        Ok((i.max_rd_atomic, i.max_dest_rd_atomic))
    };

    let dflt = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    check_eq!(t, depths(&dflt)?, (16, 16), "after create");
    let me = dflt.conn_info(1);
    dflt.connect(&me, &me, &ConnOpts::default())?;
    check_eq!(t, depths(&dflt)?, (16, 16), "connected with the defaults");

    let qp = Qp::new(&pd, &cq, &cq, &QpCaps::default())?;
    let me = qp.conn_info(2);
    let o = ConnOpts {
        max_rd_atomic: 3,
        max_dest_rd_atomic: 5,
        ..ConnOpts::default()
    };
    qp.connect(&me, &me, &o)?;
    check_eq!(t, qp.query()?.state, QpState::Rts);
    check_eq!(t, depths(&qp)?, (3, 5), "connected with 3 and 5");

    let rd = |v| QpAttr {
        max_rd_atomic: Some(v),
        ..QpAttr::default()
    };
    let dest = |v| QpAttr {
        max_dest_rd_atomic: Some(v),
        ..QpAttr::default()
    };
    // The core takes max_rd_atomic only at RTR -> RTS (ib_modify_qp_is_ok).
    check_errno!(
        t,
        qp.modify(&rd(1)),
        Errno::EINVAL,
        "RTS -> RTS max_rd_atomic"
    );
    let now = (3, 5);
    check_eq!(t, depths(&qp)?, now, "RTS -> RTS max_rd_atomic");
    check_errno!(t, qp.modify(&rd(0)), Errno::EINVAL, "max_rd_atomic 0");
    check_errno!(t, qp.modify(&rd(17)), Errno::EINVAL, "max_rd_atomic 17");
    check_errno!(
        t,
        qp.modify(&dest(4)),
        Errno::EINVAL,
        "RTS -> RTS max_dest_rd_atomic"
    );
    check_eq!(t, depths(&qp)?, now, "refused modifies change nothing");
    Ok(())
}
