// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! On-demand paging: registration, bogus fault events, and every opcode into memory the device
//! has never seen; what changes the memory under a region, and the rest, is in `odp_changes`.
//!
//! Each case checks the device's fault counters (QUERY_CTX) or the driver's (debugfs), so that a
//! case cannot pass without the faults it is about having happened.

use super::*;
use qhca::{Advice, CtxStats, OdpMr};

pub(super) const ODP_MAPPED: &str = "/sys/kernel/debug/qhca/odp_mapped_pages";
pub(super) const PAGE: usize = 4096;

/// RDMA rights for an ODP target.
pub(super) fn rw() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// The driver's `qhcaN/odp` counter `name`, of the device under test.
pub(super) fn drv_counter(cfg: &Config, name: &str) -> Result<u64, Fail> {
    let s = std::fs::read_to_string(crate::system::debugfs_dir(cfg)?.join("odp"))?;
    for line in s.lines() {
        if let Some(v) = line.strip_prefix(name).and_then(|r| r.strip_prefix(": ")) {
            return v
                .trim()
                .parse()
                .map_err(|e| fail_msg(format!("{name}: {e}")));
        }
    }
    Err(fail_msg(format!("no {name} in qhca0/odp: {s}")))
}

/// Posts one send WR on `a` and waits for its completion.
#[track_caller]
pub(super) fn run1(p: &mut Pair, wr_id: u64, op: WrOp, sges: &[Sge]) -> Result<Wc, Fail> {
    p.a.post_send(&[SendWr::new(wr_id, op, sges)])?;
    wait_wc(&mut p.cq_a)
}

/// RDMA WRITE of `src`'s whole length (filled with `pattern(seed, ..)` first) to the start of
/// `dst`; the pattern written.
#[track_caller]
pub(super) fn write_pattern(
    p: &mut Pair,
    src: &mut MrBuf,
    dst: &OdpMr,
    seed: u8,
    id: u64,
) -> Result<Vec<u8>, Fail> {
    let len = src.len();
    let data = pattern(seed, len);
    src.write_at(0, &data);
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    let wc = run1(p, id, op, &[src.sge(0, len as u32)])?;
    if wc.status != WcStatus::Success {
        return Err(fail_msg(format!("write {id}: {wc:?}")));
    }
    Ok(data)
}

/// Checks that `got` is `want`, naming the first differing byte; returns whether it is.
pub(super) fn check_bytes(t: &mut T, got: &[u8], want: &[u8], what: &str) -> bool {
    match (0..want.len().min(got.len())).find(|&i| got[i] != want[i]) {
        Some(i) => fail!(
            t,
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}",
            want.len(),
            got[i],
            want[i]
        ),
        None => check_eq!(t, got.len(), want.len(), "{what}: length"),
    }
}

pub(super) fn stats(p: &Pair) -> Result<CtxStats, Fail> {
    Ok(p.ctx.query_ctx()?)
}

/// Registration: nothing pinned, the implicit region, refusals.
pub(super) fn verbs_odp_registers_nothing_pinned(t: &mut T, cfg: &Config) -> CaseResult {
    let p = pair(cfg, &PairOpts::default())?;
    let pinned = |_: ()| -> Result<String, Fail> {
        Ok(
            std::fs::read_to_string("/sys/kernel/debug/qhca/pinned_pages")?
                .trim()
                .to_owned(),
        )
    };
    let before = pinned(())?;
    // 1 GiB, never touched: no page exists, none is pinned or mapped.
    let big = p.pd.reg_odp_buf(1 << 30, rw())?;
    check!(t, big.lkey() != 0 && big.lkey() == big.rkey());
    check!(t, big.access().contains(Access::ON_DEMAND));
    let imp = p.pd.reg_odp_implicit(Access::REMOTE_READ)?;
    check!(t, imp.is_implicit());
    check_eq!(t, pinned(())?, before, "pinned pages after 1 GiB of ODP");
    check_eq!(t, std::fs::read_to_string(ODP_MAPPED)?.trim(), "0");
    // The safe registrations refuse write rights over memory they do not own.
    let x = [0u8; 16];
    check!(
        t,
        matches!(
            p.pd.reg_odp_mr(x.as_ptr(), 16, Access::LOCAL_WRITE),
            Err(qhca::Error::Invalid { .. })
        ),
        "reg_odp_mr with LOCAL_WRITE"
    );
    // Beyond the address space: EINVAL.
    // SAFETY: the registration fails; nothing can be written.
    let r = unsafe {
        p.pd.reg_odp_mr_raw((1u64 << 60) as *mut u8, 4096, Access::NONE)
    };
    check_errno!(t, r, Errno::EINVAL, "ODP range beyond TASK_SIZE");
    // ADVISE_MR outside the region, at either end: EINVAL.
    check_errno!(
        t,
        big.advise(Advice::Prefetch, big.addr() + (1 << 30), 1, true),
        Errno::EINVAL,
        "advice past the end"
    );
    check_errno!(
        t,
        big.advise(Advice::Prefetch, big.addr() - 1, 2, true),
        Errno::EINVAL,
        "advice from before the start"
    );
    // A range that is not mapped: EFAULT.
    let hole = Map::new(2 * PAGE)?;
    let hole_addr = hole.addr();
    drop(hole);
    let unmapped =
        p.pd.reg_odp_mr(hole_addr as *const u8, 2 * PAGE, Access::REMOTE_READ)?;
    check_errno!(
        t,
        unmapped.advise(Advice::Prefetch, hole_addr, PAGE as u64, true),
        Errno::EFAULT,
        "prefetch of an unmapped range"
    );
    drop((big, imp, unmapped));
    check_eq!(t, std::fs::read_to_string(ODP_MAPPED)?.trim(), "0");
    Ok(())
}

/// Page-fault events the driver cannot honour (an unknown key, a QP of nobody) are answered or
/// dropped, never a crash; the QP of an unknown key is resumed with an error and stays usable.
pub(super) fn verbs_odp_bogus_fault_events(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let inject = |ev: String| -> Result<(), Fail> {
        Ok(std::fs::write(
            crate::system::debugfs_dir(cfg)?.join("inject_event"),
            ev,
        )?)
    };
    let (f0, e0, r0, d0) = (
        drv_counter(cfg, "faults")?,
        drv_counter(cfg, "resumed_error")?,
        drv_counter(cfg, "resume_refused")?,
        drv_counter(cfg, "dropped_faults")?,
    );
    let bogus_key = 0x00ff_ff00u64;
    // Nobody's QP: nobody waits; dropped (and counted) by the dispatcher.
    inject(format!("5 0x1000 {}", 0x00ff_fffeu64 << 32 | bogus_key))?;
    check_eq!(
        t,
        drv_counter(cfg, "dropped_faults")?,
        d0 + 1,
        "the fault of nobody's QP"
    );
    // Our QP, an unknown key: RESUME_ERROR through our doorbell page; the device never issued
    // token 0, so it refuses the RESUME.
    inject(format!(
        "5 0x1000 {}",
        u64::from(p.a.qpn()) << 32 | bogus_key
    ))?;
    // The context's worker counts a fault when it takes it, and the refusal once its RESUME
    // command has come back: wait for the last of them.
    let end = Instant::now() + Duration::from_secs(10);
    while (drv_counter(cfg, "faults")? < f0 + 1
        || drv_counter(cfg, "resumed_error")? < e0 + 1
        || drv_counter(cfg, "resume_refused")? < r0 + 1)
        && Instant::now() < end
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    check_eq!(
        t,
        drv_counter(cfg, "faults")?,
        f0 + 1,
        "our QP's fault handled"
    );
    check_eq!(
        t,
        drv_counter(cfg, "resumed_error")?,
        e0 + 1,
        "one resumed with an error"
    );
    check_eq!(
        t,
        drv_counter(cfg, "resume_refused")?,
        r0 + 1,
        "the device refused token 0"
    );
    check_eq!(
        t,
        drv_counter(cfg, "dropped_faults")?,
        d0 + 1,
        "only nobody's fault dropped"
    );
    // The QP is unharmed.
    let mut src = p.pd.reg_mr_buf(64, Access::NONE)?;
    let dst = p.pd.reg_mr_buf(64, rw())?;
    src.write_at(0, &[9; 64]);
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    let wc = run1(&mut p, 1, op, &[src.sge(0, 64)])?;
    check_wc(t, &wc, 1, WcStatus::Success, WcOpcode::RdmaWrite, "write");
    check_bytes(t, &dst.to_vec(0, 64), &[9; 64], "written");
    Ok(())
}

/// RDMA WRITE: the local source and the remote target are ODP memory the device never saw.
pub(super) fn verbs_odp_rdma_write(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 5 * PAGE + 333;
    let mut src = p.pd.reg_odp_buf(len, Access::NONE)?;
    let dst = p.pd.reg_odp_buf(len + 2 * GUARD, rw())?;
    let data = pattern(0x31, len);
    src.write_at(0, &data);
    let s0 = stats(&p)?;
    let op = WrOp::Write {
        raddr: dst.addr() + GUARD as u64,
        rkey: dst.rkey(),
    };
    let wc = run1(&mut p, 1, op, &[src.sge_at(0, len as u32)])?;
    check_wc(t, &wc, 1, WcStatus::Success, WcOpcode::RdmaWrite, "write");
    check_bytes(t, &dst.to_vec(GUARD, len), &data, "written");
    check!(
        t,
        dst.to_vec(0, GUARD).iter().all(|&b| b == 0)
            && dst.to_vec(GUARD + len, GUARD).iter().all(|&b| b == 0),
        "bytes around the target were written"
    );
    let s1 = stats(&p)?;
    check!(
        t,
        s1.odp_req_faults > s0.odp_req_faults,
        "requester faults {} -> {}",
        s0.odp_req_faults,
        s1.odp_req_faults
    );
    check!(
        t,
        s1.odp_resp_faults > s0.odp_resp_faults,
        "responder faults {} -> {}",
        s0.odp_resp_faults,
        s1.odp_resp_faults
    );
    // Mapped now: the same WRITE again faults nothing.
    let wc = run1(&mut p, 2, op, &[src.sge_at(0, len as u32)])?;
    check_wc(
        t,
        &wc,
        2,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "write again",
    );
    let s2 = stats(&p)?;
    check_eq!(
        t,
        (s2.odp_req_faults, s2.odp_resp_faults),
        (s1.odp_req_faults, s1.odp_resp_faults)
    );
    Ok(())
}

/// RDMA READ: the remote source and the local target are ODP memory.
pub(super) fn verbs_odp_rdma_read(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 3 * PAGE + 77;
    let mut src = p.pd.reg_odp_buf(len, rw())?;
    let dst = p.pd.reg_odp_buf(len, Access::LOCAL_WRITE)?;
    let data = pattern(0x42, len);
    src.write_at(0, &data);
    let s0 = stats(&p)?;
    let op = WrOp::Read {
        raddr: src.addr(),
        rkey: src.rkey(),
    };
    let wc = run1(&mut p, 3, op, &[dst.sge_at(0, len as u32)])?;
    check_wc(t, &wc, 3, WcStatus::Success, WcOpcode::RdmaRead, "read");
    check_bytes(t, &dst.to_vec(0, len), &data, "read");
    let s1 = stats(&p)?;
    check!(t, s1.odp_req_faults > s0.odp_req_faults, "requester faults");
    check!(
        t,
        s1.odp_resp_faults > s0.odp_resp_faults,
        "responder faults"
    );
    Ok(())
}

/// SEND/RECV: the gathered source and the receive buffer are ODP memory.
pub(super) fn verbs_odp_send_recv(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 2 * PAGE + 900;
    let mut src = p.pd.reg_odp_buf(len, Access::NONE)?;
    let dst = p.pd.reg_odp_buf(len + PAGE, Access::LOCAL_WRITE)?;
    let data = pattern(0x53, len);
    src.write_at(0, &data);
    let s0 = stats(&p)?;
    p.b.post_recv(&[RecvWr {
        wr_id: 0xb1,
        sges: &[dst.sge_at(100, len as u32)],
    }])?;
    let wc = run1(&mut p, 4, WrOp::Send, &[src.sge_at(0, len as u32)])?;
    check_wc(t, &wc, 4, WcStatus::Success, WcOpcode::Send, "send");
    let r = wait_wc(&mut p.cq_b)?;
    check_wc(t, &r, 0xb1, WcStatus::Success, WcOpcode::Recv, "recv");
    check_eq!(t, r.byte_len, len as u32);
    check_bytes(t, &dst.to_vec(100, len), &data, "received");
    check!(
        t,
        dst.to_vec(0, 100).iter().all(|&b| b == 0),
        "before the buffer"
    );
    let s1 = stats(&p)?;
    check!(t, s1.odp_req_faults > s0.odp_req_faults, "requester faults");
    check!(
        t,
        s1.odp_resp_faults > s0.odp_resp_faults,
        "responder faults"
    );
    Ok(())
}

/// Both atomics on an ODP target, their results into ODP memory; each runs exactly once.
pub(super) fn verbs_odp_atomics(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let mut target = p.pd.reg_odp_buf(2 * PAGE, rw())?;
    let old = p.pd.reg_odp_buf(2 * PAGE, Access::LOCAL_WRITE)?;
    // The target's second page is written by the CPU; the first is never touched (zero).
    target.write_at(PAGE, &0x1111_2222_3333_4444u64.to_le_bytes());
    let s0 = stats(&p)?;
    let u64_at = |m: &OdpMr, off: usize| u64::from_le_bytes(m.to_vec(off, 8).try_into().unwrap());

    let fa = WrOp::FetchAdd {
        raddr: target.addr(),
        rkey: target.rkey(),
        add: 5,
    };
    let wc = run1(&mut p, 5, fa, &[old.sge_at(0, 8)])?;
    check_wc(
        t,
        &wc,
        5,
        WcStatus::Success,
        WcOpcode::FetchAdd,
        "fetch-add",
    );
    check_eq!(
        t,
        u64_at(&old, 0),
        0,
        "fetch-add: old value of a fresh page"
    );
    check_eq!(t, u64_at(&target, 0), 5, "fetch-add applied once");

    let cas = WrOp::CmpSwp {
        raddr: target.addr() + PAGE as u64,
        rkey: target.rkey(),
        compare: 0x1111_2222_3333_4444,
        swap: 0x5555_6666_7777_8888,
    };
    let wc = run1(&mut p, 6, cas, &[old.sge_at(PAGE as u64 + 8, 8)])?;
    check_wc(t, &wc, 6, WcStatus::Success, WcOpcode::CompSwap, "cas");
    check_eq!(
        t,
        u64_at(&old, PAGE + 8),
        0x1111_2222_3333_4444,
        "cas: old value"
    );
    check_eq!(
        t,
        u64_at(&target, PAGE),
        0x5555_6666_7777_8888,
        "cas: swapped"
    );
    let wc = run1(&mut p, 7, fa, &[old.sge_at(16, 8)])?;
    check_wc(
        t,
        &wc,
        7,
        WcStatus::Success,
        WcOpcode::FetchAdd,
        "fetch-add 2",
    );
    check_eq!(t, (u64_at(&old, 16), u64_at(&target, 0)), (5, 10));
    let s1 = stats(&p)?;
    check!(t, s1.odp_req_faults > s0.odp_req_faults, "requester faults");
    check!(
        t,
        s1.odp_resp_faults > s0.odp_resp_faults,
        "responder faults"
    );
    Ok(())
}
