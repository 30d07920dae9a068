// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! On-demand paging, as the device sees it: regions registered with `QHCA_ACCESS_ON_DEMAND`
//! start with no page present; an access that needs a missing page raises a PAGE_FAULT event
//! and waits (requester: the QP stops where it was; responder: RNR NAKs until RESUME); the
//! test plays the driver with MAP_ODP, INVALIDATE_ODP and RESUME.
//!
//! The region's "virtual" addresses are arbitrary (VA below); MAP_ODP points their pages at
//! guest RAM the test allocated, so every byte the device moves can be checked.

use qhca_qtest::abi::*;
use qhca_qtest::hca::STEP_NS;
use qhca_qtest::port::{eui64, DEFAULT_MAC};
use qhca_qtest::ud::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const VA: u64 = 0x7f12_3400_0000;
const LOCAL: u32 = QHCA_ACCESS_LOCAL_WRITE;
const ALL: u32 = QHCA_ACCESS_LOCAL_WRITE
    | QHCA_ACCESS_REMOTE_WRITE
    | QHCA_ACCESS_REMOTE_READ
    | QHCA_ACCESS_REMOTE_ATOMIC;

/// A PAGE_FAULT event, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fault {
    token: u32,
    flags: u8,
    va: u64,
    key: u32,
    qpn: u32,
    length: u32,
}

fn fault_of(e: &qhca_eqe) -> Fault {
    assert_eq!(
        e.type_ as u32, QHCA_EQE_PAGE_FAULT,
        "not a page fault: {e:?}"
    );
    Fault {
        token: e.token,
        flags: e.status,
        va: e.data[0],
        key: e.data[1] as u32,
        qpn: (e.data[1] >> 32) as u32,
        length: u32::from_le_bytes(e.rsvd1[..4].try_into().unwrap()),
    }
}

/// The page faults among the events so far; anything else fails the test.
fn faults(h: &mut Hca) -> Vec<Fault> {
    take_events(h).iter().map(fault_of).collect()
}

/// An on-demand region over [iova, iova + len).
fn reg_odp(h: &mut Hca, p: &Pair, iova: u64, len: u64, access: u32) -> (u32, u32) {
    let b = reg_mr_bytes(
        p.uar,
        p.pdn,
        iova,
        len,
        access | QHCA_ACCESS_ON_DEMAND,
        0,
        0,
    );
    let (st, key) = obj_cmd(h, QHCA_CMD_REG_MR, in_words(&b));
    (st, key as u32)
}

/// MAP_ODP of raw entries from virtual page `first`.
fn map_raw(h: &mut Hca, p: &mut Pair, key: u32, first: u64, entries: &[u64]) -> u32 {
    map_odp_raw(h, &mut p.m, p.uar, key, first, entries)
}

/// Maps the pages of [va, va + len) onto RAM at `phys` (same offset from VA).
fn map(h: &mut Hca, p: &mut Pair, key: u32, va: u64, len: u64, phys: u64, writable: bool) {
    let first = va / PAGE;
    let n = (va + len).div_ceil(PAGE) - first;
    let bits = QHCA_ODP_PRESENT as u64
        | if writable {
            QHCA_ODP_WRITABLE as u64
        } else {
            0
        };
    let entries: Vec<u64> = (0..n)
        .map(|i| (phys + (first + i) * PAGE - VA) | bits)
        .collect();
    assert_eq!(map_raw(h, p, key, first, &entries), QHCA_CMD_OK, "MAP_ODP");
}

fn invalidate(h: &mut Hca, p: &Pair, key: u32, first: u64, count: u64) -> u32 {
    obj_cmd(
        h,
        QHCA_CMD_INVALIDATE_ODP,
        [p.uar as u64, key as u64, first, count, 0],
    )
    .0
}

/// Waits up to ~1 s of virtual time (RNR back-off grows while a fault is served).
fn wait_long(h: &mut Hca, cq: &mut Cq) -> Cqe {
    for _ in 0..20 {
        let mut got = None;
        if h.poll(|h| {
            got = cq.poll(h);
            got.is_some()
        }) {
            return got.unwrap();
        }
    }
    panic!("no CQE on CQ {}", cq.cqn);
}

fn params() -> ConnParams {
    ConnParams {
        rnr_retry: 7,
        ..Default::default()
    }
}

fn start() -> (Hca, Pair) {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(5, 6);
    let p = Pair::new(&mut h, &params());
    (h, p)
}

#[test]
fn registration_and_commands_are_checked() {
    let (mut h, mut p) = start();
    let bad = |h: &mut Hca, iova: u64, len: u64, access: u32, npages: u32, pl: u64| {
        let b = reg_mr_bytes(p.uar, p.pdn, iova, len, access, npages, pl);
        obj_cmd(h, QHCA_CMD_REG_MR, in_words(&b)).0
    };
    let od = QHCA_ACCESS_ON_DEMAND | LOCAL;
    assert_eq!(
        bad(&mut h, VA, 4096, od, 1, 0),
        QHCA_CMD_BAD_PARAM,
        "npages"
    );
    assert_eq!(
        bad(&mut h, VA, 4096, od, 0, 0x1000),
        QHCA_CMD_BAD_PARAM,
        "page list"
    );
    assert_eq!(bad(&mut h, VA, 0, od, 0, 0), QHCA_CMD_BAD_PARAM, "empty");
    let implicit = QHCA_ODP_IMPLICIT_LENGTH;
    assert_eq!(
        bad(&mut h, 0, implicit + 1, od, 0, 0),
        QHCA_CMD_BAD_PARAM,
        "too long"
    );
    assert_eq!(
        bad(&mut h, 4096, implicit, od, 0, 0),
        QHCA_CMD_BAD_PARAM,
        "past the end"
    );
    assert_eq!(
        bad(
            &mut h,
            VA,
            4096,
            QHCA_ACCESS_ON_DEMAND | QHCA_ACCESS_REMOTE_WRITE,
            0,
            0
        ),
        QHCA_CMD_BAD_PARAM,
        "remote write without local write"
    );
    assert_eq!(
        bad(&mut h, VA, 4096, od | 0x20, 0, 0),
        QHCA_CMD_BAD_PARAM,
        "unknown bit"
    );
    let (st, implicit_key) = reg_odp(&mut h, &p, 0, implicit, ALL);
    assert_eq!(st, QHCA_CMD_OK, "the implicit region");

    let (st, key) = reg_odp(&mut h, &p, VA + 100, 3 * PAGE, ALL);
    assert_eq!(st, QHCA_CMD_OK);
    let (_, pinned) = p.buf(&mut h, 4096, 0, ALL);
    let first = VA / PAGE;
    let ram = p.m.alloc(&mut h, PAGE);
    let ok = ram | QHCA_ODP_PRESENT as u64;
    // The region spans pages first .. first + 3 (100 bytes in, 3 pages long).
    assert_eq!(map_raw(&mut h, &mut p, key, first, &[ok; 4]), QHCA_CMD_OK);
    assert_eq!(
        map_raw(&mut h, &mut p, key, first - 1, &[ok]),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        map_raw(&mut h, &mut p, key, first + 4, &[ok]),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        map_raw(&mut h, &mut p, key, first + 3, &[ok; 2]),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        map_raw(&mut h, &mut p, key, first, &[]),
        QHCA_CMD_BAD_PARAM,
        "count 0"
    );
    assert_eq!(
        map_raw(&mut h, &mut p, implicit_key, first, &[ok; 513]),
        QHCA_CMD_BAD_PARAM,
        "more than QHCA_ODP_MAP_MAX"
    );
    assert_eq!(
        map_raw(&mut h, &mut p, key, first, &[ok | 4]),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        map_raw(
            &mut h,
            &mut p,
            key,
            first,
            &[ram | QHCA_ODP_WRITABLE as u64]
        ),
        QHCA_CMD_BAD_PARAM,
        "writable but not present"
    );
    assert_eq!(
        map_raw(&mut h, &mut p, key, first, &[ram]),
        QHCA_CMD_BAD_PARAM
    );
    assert_eq!(
        map_raw(&mut h, &mut p, key, first, &[0]),
        QHCA_CMD_OK,
        "clears"
    );
    assert_eq!(
        map_raw(&mut h, &mut p, pinned, first, &[ok]),
        QHCA_CMD_BAD_PARAM
    );
    let (st, _) = obj_cmd(
        &mut h,
        QHCA_CMD_MAP_ODP,
        [p.uar as u64, key as u64, first, 1, ram + 4],
    );
    assert_eq!(st, QHCA_CMD_BAD_PARAM, "entries not 8-byte aligned");
    let (st, _) = obj_cmd(
        &mut h,
        QHCA_CMD_MAP_ODP,
        [p.uar as u64 + 1, key as u64, first, 1, ram],
    );
    assert_eq!(st, QHCA_CMD_BAD_RESOURCE, "another context's key");
    assert_eq!(invalidate(&mut h, &p, key, first, 4), QHCA_CMD_OK);
    assert_eq!(invalidate(&mut h, &p, key, first, 5), QHCA_CMD_BAD_PARAM);
    assert_eq!(invalidate(&mut h, &p, key, first, 0), QHCA_CMD_BAD_PARAM);
    assert_eq!(
        invalidate(&mut h, &p, implicit_key, 0, 1 << 45),
        QHCA_CMD_OK
    );
    assert_eq!(resume(&mut h, p.uar, 0x1234_5000, 0), QHCA_CMD_BAD_RESOURCE);
    assert_eq!(resume(&mut h, p.uar, 0, 2), QHCA_CMD_BAD_PARAM);
    let (st, s) = query_ctx_stats(&mut h, p.uar);
    assert_eq!(st, QHCA_CMD_OK);
    assert_eq!(s.odp_invalidations, 2);
    assert_eq!((s.odp_req_faults, s.odp_resp_faults), (0, 0));
}

/// A WRITE gathered from an untouched region faults page by page; the QP stops at the
/// packet it was building while another QP of the context goes on; data arrives whole.
#[test]
fn requester_gather_faults_page_by_page_and_only_that_qp_waits() {
    let (mut h, mut p) = start();
    let len = 3 * PAGE;
    let src = p.m.alloc(&mut h, len);
    let data = pattern(len as usize, 7);
    h.qt.memwrite(src, &data);
    let (st, key) = reg_odp(&mut h, &p, VA, len, LOCAL);
    assert_eq!(st, QHCA_CMD_OK);
    let (dst, rkey) = p.buf(&mut h, len, 0, ALL);

    p.a.post_send(&mut h, &SendWr::write(VA, len as u32, key, dst, rkey));
    let f = faults(&mut h);
    assert_eq!(
        f.iter()
            .map(|f| (f.flags, f.va, f.key, f.qpn, f.length))
            .collect::<Vec<_>>(),
        vec![(0, VA, key, p.a.qpn, len as u32)],
        "one fault: requester, read access, the whole gather"
    );
    p.scq.expect_empty(&mut h);

    // Two more QPs of the same context: a WRITE between them completes while QP a waits.
    let caps = QpCaps::default();
    let (st, mut cq) = create_cq(&mut h, &mut p.m, p.uar, 4);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, mut c) = create_qp(&mut h, &mut p.m, p.uar, p.pdn, cq.cqn, cq.cqn, &caps);
    assert_eq!(st, QHCA_CMD_OK);
    let (st, d) = create_qp(&mut h, &mut p.m, p.uar, p.pdn, cq.cqn, cq.cqn, &caps);
    assert_eq!(st, QHCA_CMD_OK);
    bring_to_rts(&mut h, &c, d.qpn, 0x200, &params());
    bring_to_rts(&mut h, &d, c.qpn, 0x200, &params());
    let (s2, k2) = p.buf(&mut h, 64, 0x5a, ALL);
    let (d2, r2) = p.buf(&mut h, 64, 0, ALL);
    c.post_send(&mut h, &SendWr::write(s2, 64, k2, d2, r2));
    assert_eq!(cq.wait(&mut h).status, QHCA_WC_SUCCESS as u8);
    assert_eq!(h.qt.memread(d2, 64), vec![0x5a; 64]);
    p.scq.expect_empty(&mut h);
    assert!(faults(&mut h).is_empty());

    // One page: the QP goes on and faults on the next.
    map(&mut h, &mut p, key, VA, PAGE, src, false);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let f2 = faults(&mut h);
    assert_eq!(f2.len(), 1, "{f2:?}");
    assert_eq!((f2[0].va, f2[0].length), (VA + PAGE, 2 * PAGE as u32));
    assert_ne!(f2[0].token, f[0].token);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_BAD_RESOURCE,
        "a token already answered"
    );
    map(&mut h, &mut p, key, VA + PAGE, 2 * PAGE, src, false);
    assert_eq!(
        resume(&mut h, p.uar, f2[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let c = p.scq.wait(&mut h);
    assert_eq!((c.wr_id, c.status), (0x77, QHCA_WC_SUCCESS as u8));
    assert_eq!(h.qt.memread(dst, len as usize), data);
    let (_, s) = query_ctx_stats(&mut h, p.uar);
    assert_eq!((s.odp_req_faults, s.odp_resp_faults), (2, 0));
}

/// A WRITE into a peer's untouched region: the responder RNR NAKs while the fault is served
/// (one event however many retries), then the data lands once, whole.
#[test]
fn responder_fault_backs_the_requester_off_then_succeeds() {
    let (mut h, mut p) = start();
    let len = 2 * PAGE + 300;
    let (src, lkey) = p.buf(&mut h, len, 0, ALL);
    let data = pattern(len as usize, 3);
    h.qt.memwrite(src, &data);
    let dst = p.m.alloc(&mut h, 3 * PAGE);
    let (st, rkey) = reg_odp(&mut h, &p, VA, 3 * PAGE, ALL);
    assert_eq!(st, QHCA_CMD_OK);

    p.a.post_send(&mut h, &SendWr::write(src, len as u32, lkey, VA, rkey));
    let f = faults(&mut h);
    assert_eq!(
        f.len(),
        1,
        "one event for the fault, not one per retry: {f:?}"
    );
    assert_eq!(
        (f[0].flags as u32, f[0].va, f[0].key, f[0].qpn),
        (QHCA_PF_RESPONDER | QHCA_PF_WRITE, VA, rkey, p.b.qpn)
    );
    p.scq.expect_empty(&mut h);
    let (_, s) = query_ctx_stats(&mut h, p.uar);
    assert!(s.odp_fault_rnr_naks >= 2, "retries were NAKed again: {s:?}");
    assert!(s.rnr_retries >= 2, "the requester backed off: {s:?}");
    assert_eq!(s.odp_resp_faults, 1);

    // Let the back-off grow (rnr_retry 7 doubles it each time, from 10 us): ~30 ms more.
    for _ in 0..10 {
        h.settle();
    }
    assert!(faults(&mut h).is_empty(), "still one event");
    map(&mut h, &mut p, rkey, VA, 3 * PAGE, dst, true);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    // The responder's unsolicited ACK ends the back-off: the WRITE completes within a few
    // 100 us steps, not when a back-off of several ms runs out.
    let mut c = None;
    for _ in 0..5 {
        h.qt.clock_step(STEP_NS);
        c = p.scq.poll(&mut h);
        if c.is_some() {
            break;
        }
    }
    let c = c.expect("no completion within 500 us of RESUME: the back-off did not end");
    assert_eq!(c.status, QHCA_WC_SUCCESS as u8, "{c:?}");
    assert_eq!(h.qt.memread(dst, len as usize), data);
    assert!(faults(&mut h).is_empty());
}

/// MAP_ODP with QHCA_CMD_FLAG_RESUME (the token in `in_ext`): the status of the mapping, and
/// `data[0]` that of the resume.
fn map_resume(
    h: &mut Hca,
    p: &mut Pair,
    key: u32,
    first: u64,
    e: &[u64],
    token: u32,
) -> (u32, u64) {
    let buf = p.m.alloc(h, (e.len() as u64 * 8).max(8));
    let bytes: Vec<u8> = e.iter().flat_map(|x| x.to_le_bytes()).collect();
    h.qt.memwrite(buf, &bytes);
    let mut c = h.cmd(QHCA_CMD_MAP_ODP);
    c.flags = QHCA_CMD_FLAG_RESUME as u16;
    c.in_ext = token;
    c.in_ = [p.uar as u64, key as u64, first, e.len() as u64, buf];
    let done = h.exec(&c);
    (done.status as u32, done.data[0])
}

#[test]
fn map_odp_resumes_the_fault_in_the_same_command() {
    let (mut h, mut p) = start();
    let len = 2 * PAGE;
    let (src, lkey) = p.buf(&mut h, len, 0, ALL);
    let data = pattern(len as usize, 5);
    h.qt.memwrite(src, &data);
    let dst = p.m.alloc(&mut h, 2 * PAGE);
    let (st, rkey) = reg_odp(&mut h, &p, VA, 2 * PAGE, ALL);
    assert_eq!(st, QHCA_CMD_OK);

    p.a.post_send(&mut h, &SendWr::write(src, len as u32, lkey, VA, rkey));
    let f = faults(&mut h);
    assert_eq!(f.len(), 1, "{f:?}");
    let bits = (QHCA_ODP_PRESENT | QHCA_ODP_WRITABLE) as u64;
    let e = [dst | bits, (dst + PAGE) | bits];

    // The resume's fields are checked as the rest: a token without the flag, a flag on another
    // command.
    let mut c = h.cmd(QHCA_CMD_MAP_ODP);
    c.in_ext = f[0].token;
    c.in_ = [p.uar as u64, rkey as u64, VA / PAGE, 2, dst];
    h.expect_status(&c, QHCA_CMD_BAD_PARAM);
    let mut c = h.cmd(QHCA_CMD_RESUME);
    c.flags = QHCA_CMD_FLAG_RESUME as u16;
    c.in_ = [p.uar as u64, f[0].token as u64, QHCA_RESUME_OK as u64, 0, 0];
    h.expect_status(&c, QHCA_CMD_BAD_PARAM);
    // A mapping that fails resumes nothing: out of the region.
    assert_eq!(
        map_resume(&mut h, &mut p, rkey, VA / PAGE + 1, &e, f[0].token).0,
        QHCA_CMD_BAD_PARAM
    );
    p.scq.expect_empty(&mut h);

    // Mapped and resumed at once: the WRITE completes and lands.
    assert_eq!(
        map_resume(&mut h, &mut p, rkey, VA / PAGE, &e, f[0].token),
        (QHCA_CMD_OK, QHCA_CMD_OK as u64)
    );
    let c = wait_long(&mut h, &mut p.scq);
    assert_eq!(c.status, QHCA_WC_SUCCESS as u8, "{c:?}");
    assert_eq!(h.qt.memread(dst, len as usize), data);
    assert!(faults(&mut h).is_empty());

    // The token is spent: the mapping is done, its resume refused.
    assert_eq!(
        map_resume(&mut h, &mut p, rkey, VA / PAGE, &e, f[0].token),
        (QHCA_CMD_OK, QHCA_CMD_BAD_RESOURCE as u64)
    );
}

#[test]
fn unresolved_faults_fail_the_access_on_each_side() {
    // Requester: the WQE completes with a local protection error, the QP goes to ERR.
    let (mut h, mut p) = start();
    let (st, key) = reg_odp(&mut h, &p, VA, PAGE, LOCAL);
    assert_eq!(st, QHCA_CMD_OK);
    let (dst, rkey) = p.buf(&mut h, PAGE, 0, ALL);
    p.a.post_send(&mut h, &SendWr::write(VA, 64, key, dst, rkey));
    let f = faults(&mut h);
    assert_eq!(f.len(), 1);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_ERROR),
        QHCA_CMD_OK
    );
    let c = p.scq.wait(&mut h);
    assert_eq!((c.wr_id, c.status), (0x77, QHCA_WC_LOC_PROT_ERR as u8));
    let ev = event_keys(&take_events(&mut h));
    assert!(
        ev.contains(&(QHCA_EQE_QP_ERR, p.a.qpn as u64, p.uar as u64)),
        "{ev:?}"
    );
    assert_eq!(query_qp(&mut h, p.uar, p.a.qpn).1.state, QHCA_QPS_ERR as u8);
    assert_eq!(h.qt.memread(dst, 64), vec![0; 64]);

    // Responder: the retry is NAKed with a remote access error.
    let (mut h, mut p) = start();
    let (src, lkey) = p.buf(&mut h, 64, 0x11, ALL);
    let (st, rkey) = reg_odp(&mut h, &p, VA, PAGE, ALL);
    assert_eq!(st, QHCA_CMD_OK);
    p.a.post_send(&mut h, &SendWr::write(src, 64, lkey, VA, rkey));
    let f = faults(&mut h);
    assert_eq!(f.len(), 1);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_ERROR),
        QHCA_CMD_OK
    );
    let c = wait_long(&mut h, &mut p.scq);
    assert_eq!(c.status, QHCA_WC_REM_ACCESS_ERR as u8, "{c:?}");
    let ev = event_keys(&take_events(&mut h));
    assert!(
        ev.contains(&(QHCA_EQE_QP_ERR, p.b.qpn as u64, p.uar as u64)),
        "{ev:?}"
    );
    assert_eq!(query_qp(&mut h, p.uar, p.b.qpn).1.state, QHCA_QPS_ERR as u8);
    assert_eq!(h.qt.memread(src, 64), vec![0x11; 64]);
}

/// READ responses scattered into an untouched region: a response that cannot be placed is
/// dropped and asked for again from that packet; a read-only page is a fault for a write.
#[test]
fn read_responses_into_a_faulting_region_are_asked_for_again() {
    let (mut h, mut p) = start();
    let len = 2 * PAGE;
    let (src, rkey) = p.buf(&mut h, len, 0, ALL);
    let data = pattern(len as usize, 9);
    h.qt.memwrite(src, &data);
    let dst = p.m.alloc(&mut h, len);
    let (st, lkey) = reg_odp(&mut h, &p, VA, len, LOCAL);
    assert_eq!(st, QHCA_CMD_OK);
    let wr = SendWr {
        wr_id: 5,
        opcode: QHCA_WR_RDMA_READ,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: src,
        rkey,
        sges: vec![(VA, len as u32, lkey)],
        ..Default::default()
    };
    p.a.post_send(&mut h, &wr);
    let f = faults(&mut h);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].flags as u32, f[0].va), (QHCA_PF_WRITE, VA));
    // Present but read-only: still a fault for a write.
    map(&mut h, &mut p, lkey, VA, PAGE, dst, false);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let f = faults(&mut h);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].flags as u32, f[0].va), (QHCA_PF_WRITE, VA));
    map(&mut h, &mut p, lkey, VA, PAGE, dst, true);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let f = faults(&mut h);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].va, f[0].length), (VA + PAGE, PAGE as u32));
    map(&mut h, &mut p, lkey, VA + PAGE, PAGE, dst, true);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let c = wait_long(&mut h, &mut p.scq);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (5, QHCA_WC_SUCCESS as u8, len as u32)
    );
    assert_eq!(h.qt.memread(dst, len as usize), data);
}

fn fetch_add(local: u64, lkey: u32, remote: u64, rkey: u32, add: u64) -> SendWr {
    SendWr {
        wr_id: 9,
        opcode: QHCA_WR_ATOMIC_FETCH_AND_ADD,
        flags: QHCA_WQE_SIGNALED,
        remote_addr: remote,
        rkey,
        swap_add: add,
        sges: vec![(local, 8, lkey)],
        ..Default::default()
    }
}

/// Atomics run exactly once whichever side faults: a responder executes only once its page
/// is there; a requester that cannot place the result asks again and gets the saved one.
#[test]
fn atomics_with_faults_run_exactly_once() {
    // Responder side.
    let (mut h, mut p) = start();
    let (res, lkey) = p.buf(&mut h, 8, 0, ALL);
    let target = p.m.alloc(&mut h, PAGE);
    h.qt.memwrite(target, &100u64.to_le_bytes());
    let (st, rkey) = reg_odp(&mut h, &p, VA, PAGE, ALL);
    assert_eq!(st, QHCA_CMD_OK);
    p.a.post_send(&mut h, &fetch_add(res, lkey, VA, rkey, 5));
    let f = faults(&mut h);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        f[0].flags as u32,
        QHCA_PF_RESPONDER | QHCA_PF_WRITE,
        "{f:?}"
    );
    assert_eq!(
        h.qt.memread(target, 8),
        100u64.to_le_bytes(),
        "not executed yet"
    );
    map(&mut h, &mut p, rkey, VA, PAGE, target, true);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let c = wait_long(&mut h, &mut p.scq);
    assert_eq!(c.status, QHCA_WC_SUCCESS as u8, "{c:?}");
    assert_eq!(h.qt.memread(target, 8), 105u64.to_le_bytes());
    assert_eq!(h.qt.memread(res, 8), 100u64.to_le_bytes());

    // Requester side: the result buffer faults after the responder executed.
    let (mut h, mut p) = start();
    let (target, rkey) = p.buf(&mut h, 8, 0, ALL);
    h.qt.memwrite(target, &7u64.to_le_bytes());
    let res = p.m.alloc(&mut h, PAGE);
    let (st, lkey) = reg_odp(&mut h, &p, VA, PAGE, LOCAL);
    assert_eq!(st, QHCA_CMD_OK);
    p.a.post_send(&mut h, &fetch_add(VA + 16, lkey, target, rkey, 1));
    let f = faults(&mut h);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].flags as u32, f[0].va, f[0].length),
        (QHCA_PF_WRITE, VA + 16, 8)
    );
    assert_eq!(h.qt.memread(target, 8), 8u64.to_le_bytes(), "executed once");
    map(&mut h, &mut p, lkey, VA, PAGE, res, true);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let c = wait_long(&mut h, &mut p.scq);
    assert_eq!(c.status, QHCA_WC_SUCCESS as u8, "{c:?}");
    assert_eq!(h.qt.memread(target, 8), 8u64.to_le_bytes(), "still once");
    assert_eq!(
        h.qt.memread(res + 16, 8),
        7u64.to_le_bytes(),
        "the saved result"
    );
}

/// A SEND into a receive buffer in an untouched region: RNR back-off, then the message.
#[test]
fn send_into_a_faulting_receive_buffer() {
    let (mut h, mut p) = start();
    let len = 5000u64;
    let (src, lkey) = p.buf(&mut h, len, 0, ALL);
    let data = pattern(len as usize, 1);
    h.qt.memwrite(src, &data);
    let dst = p.m.alloc(&mut h, 2 * PAGE);
    let (st, rkey) = reg_odp(&mut h, &p, VA, 2 * PAGE, LOCAL);
    assert_eq!(st, QHCA_CMD_OK);
    p.b.post_recv(&mut h, 0x99, &[(VA, 2 * PAGE as u32, rkey)]);
    let wr = SendWr {
        wr_id: 1,
        opcode: QHCA_WR_SEND,
        flags: QHCA_WQE_SIGNALED,
        sges: vec![(src, len as u32, lkey)],
        ..Default::default()
    };
    p.a.post_send(&mut h, &wr);
    let f = faults(&mut h);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].flags as u32, f[0].qpn),
        (QHCA_PF_RESPONDER | QHCA_PF_WRITE, p.b.qpn)
    );
    p.rcq.expect_empty(&mut h);
    map(&mut h, &mut p, rkey, VA, 2 * PAGE, dst, true);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let c = wait_long(&mut h, &mut p.rcq);
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (0x99, QHCA_WC_SUCCESS as u8, len as u32)
    );
    assert_eq!(h.qt.memread(dst, len as usize), data);
    assert_eq!(wait_long(&mut h, &mut p.scq).status, QHCA_WC_SUCCESS as u8);
}

/// INVALIDATE_ODP takes pages away: the next access faults again and then lands in the new
/// page, never in the old one.
#[test]
fn invalidated_pages_fault_again_and_the_old_page_is_left_alone() {
    let (mut h, mut p) = start();
    let (src, lkey) = p.buf(&mut h, 64, 0x33, ALL);
    let old = p.m.alloc(&mut h, PAGE);
    let new = p.m.alloc(&mut h, PAGE);
    let (st, rkey) = reg_odp(&mut h, &p, VA, PAGE, ALL);
    assert_eq!(st, QHCA_CMD_OK);
    map(&mut h, &mut p, rkey, VA, PAGE, old, true);
    p.a.post_send(&mut h, &SendWr::write(src, 64, lkey, VA, rkey));
    assert_eq!(p.scq.wait(&mut h).status, QHCA_WC_SUCCESS as u8);
    assert!(faults(&mut h).is_empty(), "mapped: no fault");
    assert_eq!(h.qt.memread(old, 64), vec![0x33; 64]);

    assert_eq!(invalidate(&mut h, &p, rkey, VA / PAGE, 1), QHCA_CMD_OK);
    h.qt.memset(src, 64, 0x44);
    p.a.post_send(&mut h, &SendWr::write(src, 64, lkey, VA, rkey));
    let f = faults(&mut h);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        h.qt.memread(old, 64),
        vec![0x33; 64],
        "the old page is untouched"
    );
    map(&mut h, &mut p, rkey, VA, PAGE, new, true);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    assert_eq!(wait_long(&mut h, &mut p.scq).status, QHCA_WC_SUCCESS as u8);
    assert_eq!(h.qt.memread(new, 64), vec![0x44; 64]);
    assert_eq!(h.qt.memread(old, 64), vec![0x33; 64]);
    let (_, s) = query_ctx_stats(&mut h, p.uar);
    assert_eq!(s.odp_invalidations, 1);
}

/// A fault outstanding when its QP is reset, or its key deregistered: the token goes stale,
/// and a QP that retries with a key that is gone fails the WQE instead of touching memory.
#[test]
fn tokens_go_stale_and_a_deregistered_key_fails_the_retry() {
    let (mut h, mut p) = start();
    let (dst, rkey) = p.buf(&mut h, PAGE, 0, ALL);
    let (st, key) = reg_odp(&mut h, &p, VA, PAGE, LOCAL);
    assert_eq!(st, QHCA_CMD_OK);
    p.a.post_send(&mut h, &SendWr::write(VA, 64, key, dst, rkey));
    let f = faults(&mut h);
    assert_eq!(f.len(), 1);
    let reset = QpAttr {
        mask: QHCA_QP_ATTR_STATE,
        state: QHCA_QPS_RESET as u8,
        ..Default::default()
    };
    assert_eq!(modify_qp(&mut h, p.uar, p.a.qpn, &reset), QHCA_CMD_OK);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_BAD_RESOURCE,
        "the QP was reset"
    );

    let (mut h, mut p) = start();
    let (dst, rkey) = p.buf(&mut h, PAGE, 0, ALL);
    let ram = p.m.alloc(&mut h, PAGE);
    let (st, key) = reg_odp(&mut h, &p, VA, PAGE, LOCAL);
    assert_eq!(st, QHCA_CMD_OK);
    p.a.post_send(&mut h, &SendWr::write(VA, 64, key, dst, rkey));
    let f = faults(&mut h);
    assert_eq!(f.len(), 1);
    map(&mut h, &mut p, key, VA, PAGE, ram, false);
    assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, p.uar, key), QHCA_CMD_OK);
    assert_eq!(
        resume(&mut h, p.uar + 1, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_BAD_RESOURCE,
        "another context"
    );
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let c = p.scq.wait(&mut h);
    assert_eq!(c.status, QHCA_WC_LOC_PROT_ERR as u8, "{c:?}");
    assert_eq!(h.qt.memread(dst, 64), vec![0; 64]);
}

/// The implicit region: one key, any address, pages mapped as they are needed.
#[test]
fn the_implicit_region_covers_any_address() {
    let (mut h, mut p) = start();
    let (st, key) = reg_odp(&mut h, &p, 0, QHCA_ODP_IMPLICIT_LENGTH, ALL);
    assert_eq!(st, QHCA_CMD_OK);
    let (dst, rkey) = p.buf(&mut h, PAGE, 0, ALL);
    let ram = p.m.alloc(&mut h, PAGE);
    h.qt.memset(ram, PAGE as usize, 0x6b);
    for va in [VA, 0x1000, 0x00ff_ffff_f000u64] {
        h.qt.memset(dst, 64, 0);
        p.a.post_send(&mut h, &SendWr::write(va + 8, 64, key, dst, rkey));
        let f = faults(&mut h);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!((f[0].va, f[0].key), (va + 8, key));
        let e = [ram | QHCA_ODP_PRESENT as u64];
        assert_eq!(map_raw(&mut h, &mut p, key, va / PAGE, &e), QHCA_CMD_OK);
        assert_eq!(
            resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
            QHCA_CMD_OK
        );
        assert_eq!(p.scq.wait(&mut h).status, QHCA_WC_SUCCESS as u8);
        assert_eq!(h.qt.memread(dst, 64), vec![0x6b; 64]);
    }
}

/// A UD send gathering from an on-demand region (odp_ud_caps SEND): the QP stops at the WQE
/// until RESUME, then the datagram goes out whole; an unresolved fault fails the WQE. A receive
/// buffer whose page is not present drops the datagram (counted), with no fault raised.
#[test]
fn ud_send_faults_and_resumes() {
    let (mut h, mut p) = start();
    let qkey = 0x77;
    let caps = QpCaps::default();
    let qp = |h: &mut Hca, p: &mut Pair| {
        let (scqn, rcqn) = (p.scq.cqn, p.rcq.cqn);
        let (st, q) = create_qp_typed(h, &mut p.m, p.uar, p.pdn, scqn, rcqn, &caps, QHCA_QPT_UD);
        assert_eq!(st, QHCA_CMD_OK);
        ud_to_rts(h, &q, qkey, 0);
        q
    };
    let (mut a, mut b) = (qp(&mut h, &mut p), qp(&mut h, &mut p));
    // This port's GID 0 (the default node GUID: the default MAC's EUI-64).
    let (st, ah) = create_ah(
        &mut h,
        p.uar,
        p.pdn,
        &AhAttr::to(port_gid(eui64(DEFAULT_MAC))),
    );
    assert_eq!(st, QHCA_CMD_OK);
    let (st, key) = reg_odp(&mut h, &p, VA, 2 * PAGE, LOCAL);
    assert_eq!(st, QHCA_CMD_OK);
    let phys = p.m.alloc(&mut h, 2 * PAGE);
    h.qt.memwrite(phys + PAGE - 8, &pattern(16, 5));
    let (dst, dkey) = p.buf(&mut h, PAGE, 0xee, LOCAL);
    b.post_recv(&mut h, 0x1, &[(dst, 64, dkey)]);
    // 16 bytes across the two pages of the region.
    a.post_ud(
        &mut h,
        &UdWr::send(0x5, ah, b.qpn, qkey, &[(VA + PAGE - 8, 16, key)]),
    );
    let f = faults(&mut h);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].qpn, f[0].key, f[0].va), (a.qpn, key, VA + PAGE - 8));
    p.rcq.expect_empty(&mut h);
    map(&mut h, &mut p, key, VA, 2 * PAGE, phys, false);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_OK),
        QHCA_CMD_OK
    );
    let c = p.scq.wait(&mut h);
    assert_eq!((c.wr_id, c.status as u32), (0x5, QHCA_WC_SUCCESS));
    let c = p.rcq.wait(&mut h);
    assert_eq!((c.wr_id, c.byte_len, c.src_qp), (0x1, 40 + 16, a.qpn));
    assert_eq!(h.qt.memread(dst + 40, 16), pattern(16, 5));

    // A receive buffer in the region, its page not present: dropped, no fault.
    let (st, rkey) = reg_odp(&mut h, &p, VA + 0x10_0000, PAGE, LOCAL);
    assert_eq!(st, QHCA_CMD_OK);
    a.post_recv(&mut h, 0x2, &[(VA + 0x10_0000, 64, rkey)]);
    a.post_ud(&mut h, &UdWr::send(0x6, ah, a.qpn, qkey, &[(dst, 8, dkey)]));
    assert_eq!(p.scq.wait(&mut h).status as u32, QHCA_WC_SUCCESS);
    assert!(faults(&mut h).is_empty(), "a UD receiver raises no fault");
    assert_eq!(query_ctx_stats(&mut h, p.uar).1.ud_drop_fault, 1);

    // Unresolved: the WQE fails, the QP goes to ERR.
    assert_eq!(invalidate(&mut h, &p, key, VA / PAGE, 2), QHCA_CMD_OK);
    a.post_ud(&mut h, &UdWr::send(0x7, ah, b.qpn, qkey, &[(VA, 8, key)]));
    let f = faults(&mut h);
    assert_eq!(f.len(), 1);
    assert_eq!(
        resume(&mut h, p.uar, f[0].token, QHCA_RESUME_ERROR),
        QHCA_CMD_OK
    );
    let c = p.scq.wait(&mut h);
    assert_eq!((c.wr_id, c.status as u32), (0x7, QHCA_WC_LOC_PROT_ERR));
    let ev = event_keys(&take_events(&mut h));
    assert_eq!(ev, [(QHCA_EQE_QP_ERR, a.qpn as u64, p.uar as u64)]);
}
