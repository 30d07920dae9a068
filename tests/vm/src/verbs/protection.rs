// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Protection errors and RNR: what the device refuses, and what it retries.

use super::*;

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
pub(super) fn verbs_bad_rkey_flushes(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let mut src = p.pd.reg_mr_buf(256, Access::NONE)?;
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
pub(super) fn verbs_wrong_rights(t: &mut T, cfg: &Config) -> CaseResult {
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
pub(super) fn verbs_out_of_bounds_by_one(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let mut outer = p.pd.reg_mr_buf(4096, Access::ALL)?;
    outer.fill(0, 4096, GUARD_BYTE);
    // A region of 100 bytes borrowed from the middle of a Vec: the bytes around it are ordinary
    // memory of ours that no key covers.
    let mut backing = vec![GUARD_BYTE; 100 + 2 * GUARD];
    // SAFETY: `region` is deregistered with `dereg` below before `backing` is read, and
    // `backing` is leaked if that fails; it is never forgotten.
    let mut region = unsafe {
        p.pd.reg_mr(
            &mut backing[GUARD..GUARD + 100],
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )?
    };
    let mut src = p.pd.reg_mr_buf(256, Access::NONE)?;
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
    if let Err(e) = region.dereg() {
        std::mem::forget(backing);
        bail!("deregistration failed: {e}");
    }
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
pub(super) fn verbs_mr_of_another_pd(t: &mut T, cfg: &Config) -> CaseResult {
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
pub(super) fn verbs_rnr_retry_infinite(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let mut src = p.pd.reg_mr_buf(64, Access::NONE)?;
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
pub(super) fn verbs_rnr_retry_zero(t: &mut T, cfg: &Config) -> CaseResult {
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

const BAD_DMA_KNOB: &str = "/sys/kernel/debug/qhca/bad_dma_pages";
/// What the driver's fault injection puts in a page list (`kmod/pagelist.rs`, `BAD_DMA`).
const BAD_DMA_LOG: &str = "fault addr 0xdead00000000";

/// A page the device may not reach (the driver's fault injection hands it an address nothing
/// maps, as a driver bug would): each access to it fails the request, as requester and as
/// responder, the rest of the region works, nothing else breaks; behind the guest IOMMU, the
/// refused DMA is in the guest log.
pub(super) fn verbs_refused_dma_is_an_error_completion(t: &mut T, cfg: &Config) -> CaseResult {
    require!(
        t,
        Path::new(BAD_DMA_KNOB).exists(),
        "{BAD_DMA_KNOB} is missing: the driver has no such fault injection"
    );
    let behind_iommu = std::fs::read_dir("/sys/class/iommu").is_ok_and(|mut d| d.next().is_some());
    let logged0 = crate::disassociate::dmesg_count(BAD_DMA_LOG);
    let o = PairOpts::default();
    let mut p = pair(cfg, &o)?;
    let mut good = p.pd.reg_mr_buf(2 * 4096, Access::ALL)?;
    std::fs::write(BAD_DMA_KNOB, "1")?;
    let mut bad = p.pd.reg_mr_buf(2 * 4096, Access::ALL)?;
    check_eq!(
        t,
        std::fs::read_to_string(BAD_DMA_KNOB)?.trim(),
        "0",
        "used up"
    );
    let data = pattern(0x6d, 8192);
    bad.write_at(0, &data);
    good.fill(0, 8192, 0);
    let (good_addr, good_rkey) = (good.addr(), good.rkey());
    let to_good = |off: u64| WrOp::Write {
        raddr: good_addr + off,
        rkey: good_rkey,
    };

    // Requester: gathering from the page that works, then from the one that does not.
    p.a.post_send(&[SendWr::new(1, to_good(0), &[bad.sge(0, 256)])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_wc(
        t,
        &wc,
        1,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "from page 0",
    );
    check_eq!(t, good.to_vec(0, 256), data[..256]);
    p.a.post_send(&[SendWr::new(2, to_good(4096), &[bad.sge(4096, 256)])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_wc(
        t,
        &wc,
        2,
        WcStatus::LocAccessErr,
        WcOpcode::RdmaWrite,
        "from page 1",
    );
    check_eq!(t, good.to_vec(4096, 256), vec![0u8; 256]);

    // Responder: a WRITE into the page that does not work is refused.
    let mut p = pair_in(&p.ctx, &p.pd, &o)?;
    good.write_at(0, &data[..256]);
    let into_bad = WrOp::Write {
        raddr: bad.addr() + 4096,
        rkey: bad.rkey(),
    };
    p.a.post_send(&[SendWr::new(3, into_bad, &[good.sge(0, 256)])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_wc(
        t,
        &wc,
        3,
        WcStatus::RemOpErr,
        WcOpcode::RdmaWrite,
        "into page 1",
    );
    check_eq!(
        t,
        bad.to_vec(4096, 256),
        data[4096..4096 + 256],
        "page 1 untouched"
    );

    // The device and the driver are fine: a fresh pair works.
    let mut p = pair_in(&p.ctx, &p.pd, &o)?;
    p.a.post_send(&[SendWr::new(4, to_good(512), &[bad.sge(100, 64)])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_wc(t, &wc, 4, WcStatus::Success, WcOpcode::RdmaWrite, "after");
    if behind_iommu {
        let end = Instant::now() + Duration::from_secs(5);
        while crate::disassociate::dmesg_count(BAD_DMA_LOG) == logged0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(20));
        }
        check!(
            t,
            crate::disassociate::dmesg_count(BAD_DMA_LOG) > logged0,
            "the IOMMU's refusal is in the guest log ({BAD_DMA_LOG})"
        );
    }
    eprintln!("    behind an IOMMU: {behind_iommu}");
    Ok(())
}
