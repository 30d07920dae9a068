// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Every opcode, byte for byte.

use super::*;

/// SEND into a posted receive; both completions; memory around the receive buffer untouched.
pub(super) fn verbs_send(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 777;
    let mut src = guarded(&p.pd, len, Access::NONE)?;
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
pub(super) fn verbs_send_imm(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let mut src = guarded(&p.pd, 64, Access::NONE)?;
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
pub(super) fn verbs_rdma_write(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 3000;
    let mut src = guarded(&p.pd, len, Access::NONE)?;
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
pub(super) fn verbs_write_imm(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 200;
    let mut src = guarded(&p.pd, len, Access::NONE)?;
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
    check_eq!(t, r.src_qp, p.a.qpn(), "src_qp is the sender");
    // A receive without SGEs serves a WRITE_WITH_IMM just as well.
    p.b.post_recv(&[RecvWr {
        wr_id: 0x78,
        sges: &[],
    }])?;
    let op = WrOp::WriteImm {
        raddr: dst.addr() + GUARD as u64,
        rkey: dst.rkey(),
        imm: 0x0bad_cafe,
    };
    p.a.post_send(&[SendWr::new(5, op, &[src.sge(GUARD, 10)])])?;
    check_eq!(t, wait_wc(&mut p.cq_a)?.status, WcStatus::Success);
    let r = wait_wc(&mut p.cq_b)?;
    check_wc(
        t,
        &r,
        0x78,
        WcStatus::Success,
        WcOpcode::RecvRdmaWithImm,
        "recv without SGEs",
    );
    check_eq!(
        t,
        (r.imm, r.byte_len, r.src_qp),
        (Some(0x0bad_cafe), 10, p.a.qpn()),
        "zero-SGE receive"
    );
    Ok(())
}

/// RDMA READ: the remote bytes land locally.
pub(super) fn verbs_rdma_read(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 2500;
    let mut remote = guarded(&p.pd, len, Access::REMOTE_READ)?;
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
pub(super) fn verbs_atomics(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let mut target = guarded(&p.pd, 8, Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    let mut old = guarded(&p.pd, 8, Access::LOCAL_WRITE)?;
    let (raddr, rkey) = (target.addr() + GUARD as u64, target.rkey());
    target.write_u64(GUARD, 0x1111_2222_3333_4444);

    let op =
        |t: &mut T, p: &mut Pair, old: &mut MrBuf, wr_id: u64, op: WrOp, opcode| -> CaseResult {
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
        &mut old,
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
    op(t, &mut p, &mut old, 2, cas, WcOpcode::CompSwap)?;
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
    op(t, &mut p, &mut old, 3, fa, WcOpcode::FetchAdd)?;
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
pub(super) fn verbs_multi_sge(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let mut src = p.pd.reg_mr_buf(4096, Access::NONE)?;
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
pub(super) fn verbs_inline(t: &mut T, cfg: &Config) -> CaseResult {
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
pub(super) fn verbs_larger_than_mtu(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 3 * 1024 + 123;
    let mut src = guarded(&p.pd, len, Access::REMOTE_READ)?;
    let data = pattern(8, len);
    src.write_at(GUARD, &data);
    let mut dst = guarded(&p.pd, len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
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
