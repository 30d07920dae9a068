// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Shared receive queues through the `qhca` crate: RC QPs taking their receives from one SRQ
//! in the order messages come, each on its own QP; a UD QP on the same SRQ; the limit event;
//! the last-WQE event of a QP that goes to ERR; a full SRQ refused without a system call.

use super::*;
use qhca::{QpType, Srq};

/// Two RC pairs whose responders receive from one SRQ of 8 WQEs, and a UD QP on it too.
pub(super) fn verbs_srq_shared_by_rc_and_ud(t: &mut T, cfg: &Config) -> CaseResult {
    let o = PairOpts::default();
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    require!(
        t,
        ctx.attr().supports_srq(),
        "the device has no SRQs: {:?}",
        ctx.attr()
    );
    let pd = Pd::new(&ctx)?;
    let mut cq_a = Cq::new(&ctx, 64, None)?;
    let mut cq_b = Cq::new(&ctx, 64, None)?;
    let mut srq = Srq::new(&pd, 8, 2)?;
    let attr = srq.query()?;
    check_eq!(t, (attr.max_wr, attr.limit), (8, 0), "QUERY_SRQ");
    let mut senders = Vec::new();
    let mut receivers = Vec::new();
    for _ in 0..2 {
        let a = Qp::new(&pd, &cq_a, &cq_a, &o.caps)?;
        let b = Qp::with_srq(&pd, &cq_b, &cq_b, &srq, &o.caps, QpType::Rc)?;
        connect(&a, PSN_A, b.qpn(), PSN_B, &o.conn)?;
        connect(&b, PSN_B, a.qpn(), PSN_A, &o.conn)?;
        senders.push(a);
        receivers.push(b);
    }
    let mut src = guarded(&pd, 4096, Access::NONE)?;
    let dst = pd.reg_mr_buf(8 * 512, Access::LOCAL_WRITE)?;
    let wrs: Vec<_> = (0..4u64)
        .map(|i| {
            [
                dst.sge(512 * i as usize, 256),
                dst.sge(512 * i as usize + 256, 256),
            ]
        })
        .collect();
    let posts: Vec<RecvWr<'_>> = wrs
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr {
            wr_id: 0x50 + i as u64,
            sges: s,
        })
        .collect();
    srq.post_recv(&posts)?;
    check_eq!(t, srq.outstanding(), 4);
    srq.arm_limit(3)?;
    check_eq!(t, srq.query()?.limit, 3);

    // Messages from sender 0, 1, 0: the SRQ's WQEs in that order, each on its receiver.
    for i in 0..3usize {
        let len = 300 + 50 * i;
        let data = pattern(10 + i as u8, len);
        src.write_at(GUARD, &data);
        let sge = [src.sge(GUARD, len as u32)];
        senders[i % 2].post_send(&[SendWr::new(i as u64, WrOp::Send, &sge)])?;
        check_wc(
            t,
            &wait_wc(&mut cq_a)?,
            i as u64,
            WcStatus::Success,
            WcOpcode::Send,
            "send",
        );
        let r = wait_wc(&mut cq_b)?;
        check_wc(
            t,
            &r,
            0x50 + i as u64,
            WcStatus::Success,
            WcOpcode::Recv,
            "recv",
        );
        check_eq!(t, (r.qpn, r.byte_len), (receivers[i % 2].qpn(), len as u32));
        check_eq!(
            t,
            dst.to_vec(512 * i, len),
            data,
            "message {i} across two SGEs"
        );
        if i == 1 {
            check_eq!(
                t,
                ctx.wait_async_event(Some(WC_TIMEOUT))?,
                Some(AsyncEvent::SrqLimitReached { srqn: srq.srqn() }),
                "two left, below the limit of 3"
            );
        }
    }
    check_eq!(
        t,
        ctx.wait_async_event(Some(QUIET))?,
        None,
        "the limit fires once"
    );
    check_eq!(t, srq.query()?.limit, 0, "disarmed");
    check_eq!(t, srq.outstanding(), 1);

    // A UD QP on the same SRQ takes the next WQE.
    let caps = QpCaps {
        max_inline: 64,
        ..o.caps
    };
    let u = Qp::with_srq(&pd, &cq_b, &cq_b, &srq, &caps, QpType::Ud)?;
    let mut s = Qp::new_ud(&pd, &cq_a, &cq_a, &caps)?;
    for q in [&u, &s] {
        q.ud_ready(0x1234)?;
    }
    let ah = pd.create_ah(&qhca::AhAttr::new(ctx.gid()))?;
    src.write_at(GUARD, b"datagram");
    let sge = [src.sge(GUARD, 8)];
    let wr = SendWr::new(7, WrOp::Send, &sge).to_ud(ah.dest(u.qpn(), 0x1234));
    s.post_send(&[wr])?;
    check_wc(
        t,
        &wait_wc(&mut cq_a)?,
        7,
        WcStatus::Success,
        WcOpcode::Send,
        "UD send",
    );
    let r = wait_wc(&mut cq_b)?;
    check_wc(t, &r, 0x53, WcStatus::Success, WcOpcode::Recv, "UD recv");
    check_eq!(t, (r.qpn, r.src_qp), (u.qpn(), s.qpn()));

    // A receiver in ERR holds nothing: the last-WQE event alone.
    receivers[1].modify(&QpAttr {
        state: Some(QpState::Err),
        ..QpAttr::default()
    })?;
    check_eq!(
        t,
        ctx.wait_async_event(Some(WC_TIMEOUT))?,
        Some(AsyncEvent::QpLastWqeReached {
            qpn: receivers[1].qpn()
        })
    );
    check_eq!(t, cq_b.poll_wait(&mut [Wc::default(); 1], Some(QUIET))?, 0);

    // Full: 8 posted, none taken; the ninth is refused with no system call.
    let many: Vec<_> = (0..9u64)
        .map(|i| RecvWr {
            wr_id: 0x100 + i,
            sges: &wrs[0][..1],
        })
        .collect();
    let e = srq.post_recv(&many).unwrap_err();
    check_eq!(t, e.index, 8, "{e:?}");
    check!(t, matches!(e.reason, PostReason::QueueFull { .. }), "{e:?}");
    // A receive posted to a QP of the SRQ is refused.
    let e = receivers[0]
        .post_recv(&[RecvWr {
            wr_id: 1,
            sges: &wrs[0][..1],
        }])
        .unwrap_err();
    check!(t, matches!(e.reason, PostReason::QpOnSrq), "{e:?}");
    Ok(())
}
