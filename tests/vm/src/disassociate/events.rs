// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Asynchronous events: CQ overruns, routing by context, and event-queue overflows.

use super::*;

/// One CQ overrun: a 2-entry CQ under a QP that completes 8 signalled writes. Returns the CQ's
/// number and the asynchronous events the context got.
fn overrun_once(ctx: &Arc<Context>, pd: &Pd) -> Result<(u32, Vec<AsyncEvent>), Fail> {
    let small = Cq::new(ctx, 2, None)?;
    let other = Cq::new(ctx, 64, None)?;
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_sge: 1,
        max_inline: 64,
    };
    let mut a = Qp::new(pd, &small, &small, &caps)?;
    let b = Qp::new(pd, &other, &other, &caps)?;
    let opts = ConnOpts::default();
    for (qp, psn, peer, peer_psn) in [(&a, 1, b.qpn(), 2), (&b, 2, a.qpn(), 1)] {
        let remote = ConnInfo {
            qpn: peer,
            psn: peer_psn,
            ..ConnInfo::default()
        };
        qp.connect(&qp.conn_info(psn), &remote, &opts)?;
    }
    let dst = pd.reg_mr_buf(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    for i in 0..8u64 {
        let op = WrOp::Write {
            raddr: dst.addr() + 8 * i,
            rkey: dst.rkey(),
        };
        a.post_send(&[SendWr::inline(i, op, &[0xab; 8])])
            .map_err(|e| Fail::new(file!(), line!(), format!("post_send: {e:?}")))?;
    }
    let mut events = Vec::new();
    while let Some(ev) = ctx.wait_async_event(Some(Duration::from_secs(5)))? {
        let done = matches!(ev, AsyncEvent::CqErr { .. });
        events.push(ev);
        if done {
            break;
        }
    }
    Ok((small.cqn(), events))
}

/// A CQ overrun reaches its context as `QHCA_ASYNC_CQ_ERR`, and the kernel log line it causes,
/// which any process can trigger at will, is rate-limited.
pub(super) fn cq_overrun_event_rate_limited(t: &mut T, cfg: &Config) -> CaseResult {
    const ROUNDS: usize = 24;
    let needle = "overran or failed";
    let before = dmesg_count(needle);
    let start = Instant::now();
    for round in 0..ROUNDS {
        let ctx = Arc::new(Context::open(&cfg.dev)?);
        let pd = Pd::new(&ctx)?;
        let (cqn, events) = overrun_once(&ctx, &pd)?;
        if !check!(
            t,
            events.contains(&AsyncEvent::CqErr { cqn }),
            "round {round}: CQ {cqn:#x} overran, events {events:?}"
        ) {
            break;
        }
    }
    let took = start.elapsed();
    let lines = dmesg_count(needle) - before;
    // At most 10 lines per 5 s window of the limiter.
    let windows = took.as_secs() as usize / 5 + 2;
    check!(t, lines >= 1, "no log line for {ROUNDS} overruns");
    check!(
        t,
        lines <= 10 * windows && (took >= Duration::from_secs(10) || lines < ROUNDS),
        "{lines} log lines for {ROUNDS} overruns in {took:?}: not rate-limited"
    );
    Ok(())
}

/// Dispatches an event as if the device had posted it (debugfs `qhcaN/inject_event`).
fn inject(dir: &Path, kind: u32, d0: u32, d1: u32) -> Result<(), Fail> {
    let path = dir.join("inject_event");
    std::fs::write(&path, format!("{kind} {d0} {d1}"))
        .map_err(|e| Fail::new(file!(), line!(), format!("{}: {e}", path.display())))
}

/// The completion events queued on `cq`'s completion channel, read: each is counted once. The
/// channel is non-blocking, and the core hands out one `ib_uverbs_comp_event_desc` (8 bytes)
/// per read.
fn comp_events(cq: &Cq) -> u64 {
    let Some(fd) = cq.event_fd() else {
        return 0;
    };
    let mut desc = [0u8; 8];
    let mut n = 0;
    while nix::unistd::read(fd.as_raw_fd(), &mut desc).is_ok_and(|r| r == desc.len()) {
        n += 1;
    }
    n
}

/// Completion and error events reach only the context the device names and only for an object
/// it owns: a CQ or QP number alone (another context's, or a destroyed CQ's) signals nobody.
/// The core delivers them: completion events on the CQ's completion channel, errors on the
/// context's async event file.
pub(super) fn events_routed_by_context(t: &mut T, cfg: &Config) -> CaseResult {
    use qhca_uapi::{
        QHCA_EQE_CQ_COMP as COMP, QHCA_EQE_CQ_ERR as CQ_ERR, QHCA_EQE_QP_ERR as QP_ERR,
    };
    let dir = crate::system::debugfs_dir(cfg)?;
    let a = Arc::new(Context::open(&cfg.dev)?);
    let b = Arc::new(Context::open(&cfg.dev)?);
    let (ua, ub) = (a.attr().uar_index, b.attr().uar_index);
    require!(t, ua != ub, "two contexts with doorbell page {ua}");
    let cq = Cq::new(&a, 2, Some(eventfd()?))?;
    let cqn = cq.cqn();
    let other = Cq::new(&b, 2, Some(eventfd()?))?;
    let pd_b = Pd::new(&b)?;
    let qp_b = Qp::new(&pd_b, &other, &other, &QpCaps::default())?;
    let qpn = qp_b.qpn();
    // Made last, so that no CQ made after it can have its number.
    let gone = Cq::new(&a, 2, None)?.cqn();

    inject(&dir, COMP, cqn, ub)?;
    check_eq!(
        t,
        (comp_events(&cq), comp_events(&other)),
        (0, 0),
        "CQ {cqn:#x} named with context {ub}, not its own {ua}"
    );
    inject(&dir, COMP, cqn, ua)?;
    check_eq!(t, comp_events(&cq), 1, "CQ {cqn:#x} of context {ua}");
    inject(&dir, COMP, other.cqn(), ua)?;
    check_eq!(
        t,
        (comp_events(&cq), comp_events(&other)),
        (0, 0),
        "context {ub}'s CQ {:#x} named with context {ua}",
        other.cqn()
    );
    inject(&dir, COMP, gone, ua)?;
    check_eq!(
        t,
        comp_events(&cq),
        0,
        "destroyed CQ {gone:#x} of context {ua}"
    );

    inject(&dir, CQ_ERR, cqn, ub)?;
    check_eq!(
        t,
        a.get_async_event()?,
        None,
        "CQ error named with the wrong context"
    );
    check_eq!(
        t,
        b.get_async_event()?,
        None,
        "nor for the context it names"
    );
    inject(&dir, CQ_ERR, cqn, ua)?;
    check_eq!(
        t,
        a.get_async_event()?,
        Some(AsyncEvent::CqErr { cqn }),
        "CQ error of its own CQ"
    );
    check_eq!(t, comp_events(&cq), 1, "a CQ error wakes the CQ's waiters");

    inject(&dir, QP_ERR, 0x00ab_cdef, ua)?;
    check_eq!(
        t,
        a.get_async_event()?,
        None,
        "QP error for a QP it does not own"
    );
    inject(&dir, QP_ERR, qpn, ua)?;
    check_eq!(
        t,
        (a.get_async_event()?, b.get_async_event()?),
        (None, None),
        "context {ub}'s QP {qpn:#x} named with context {ua}"
    );
    // The same event, named right, does arrive: the checks above are not vacuous.
    inject(&dir, QP_ERR, qpn, ub)?;
    check_eq!(
        t,
        b.get_async_event()?,
        Some(AsyncEvent::QpFatal { qpn }),
        "QP error of its own QP"
    );
    Ok(())
}

/// The `events lost` line of the device's debugfs `state` (in `dir`, [`debugfs_dir`]).
fn events_lost(dir: &Path) -> Option<u64> {
    let state = std::fs::read_to_string(dir.join("state")).ok()?;
    state
        .lines()
        .find_map(|l| l.strip_prefix("events lost (EQ_OVERFLOWS): "))?
        .trim()
        .parse()
        .ok()
}

/// Events the device could not post because the event queue was full are noticed
/// (`EQ_OVERFLOWS`, which the driver reads and shows in debugfs `state`) and reported in the
/// kernel log. (The driver also wakes every CQ waiter then; the routed events wake this one
/// anyway, so that is not checked here.) The overflow: the interrupt thread stalls (fault
/// injection) while a CQ with a completion in it is armed again and again, one event per arm.
pub(super) fn eq_overflow_reported(t: &mut T, cfg: &Config) -> CaseResult {
    require_knob(t, "stall_events_ms")?;
    let dir = crate::system::debugfs_dir(cfg)?;
    let said = dmesg_count("event queue overflowed");
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let efd = eventfd()?;
    let cq = Cq::new(&ctx, 64, Some(efd.try_clone()?))?;
    let other = Cq::new(&ctx, 64, None)?;
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_sge: 1,
        max_inline: 64,
    };
    let mut a = Qp::new(&pd, &cq, &cq, &caps)?;
    let b = Qp::new(&pd, &other, &other, &caps)?;
    for (qp, psn, peer, peer_psn) in [(&a, 1, b.qpn(), 2), (&b, 2, a.qpn(), 1)] {
        let remote = ConnInfo {
            qpn: peer,
            psn: peer_psn,
            ..ConnInfo::default()
        };
        qp.connect(&qp.conn_info(psn), &remote, &ConnOpts::default())?;
    }
    let dst = pd.reg_mr_buf(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    a.post_send(&[SendWr::inline(1, op, &[1; 8])])
        .map_err(|e| Fail::new(file!(), line!(), format!("post_send: {e:?}")))?;
    // The CQE lands; it stays unpolled, so every arm finds it and fires at once.
    std::thread::sleep(Duration::from_millis(300));
    let before = events_lost(&dir).unwrap_or(0);
    set_knob("stall_events_ms", 3000)?;
    let start = Instant::now();
    for _ in 0..150 {
        cq.arm();
        std::thread::sleep(Duration::from_millis(2));
    }
    check!(
        t,
        start.elapsed() < Duration::from_millis(2500),
        "arming took {:?}: the stall may be over before the queue filled",
        start.elapsed()
    );
    check!(
        t,
        wait_for(Duration::from_secs(10), || events_lost(&dir).unwrap_or(0)
            > before)
    );
    check_eq!(t, knob("stall_events_ms"), Some(0), "the stall was used");
    let lost = events_lost(&dir).unwrap_or(0) - before;
    check!(t, lost > 0, "no event lost: the queue did not overflow");
    check!(
        t,
        wait_for(Duration::from_secs(2), || dmesg_count(
            "event queue overflowed"
        ) > said),
        "the driver did not say that the event queue overflowed"
    );
    drop((a, b, cq, other, dst));
    Ok(())
}
