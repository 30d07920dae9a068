// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The RC transport against a peer that duplicates, reorders, replays or lies (issue 29,
//! finding 7): the test is the far end of the port's `-netdev dgram` (`qhca_qtest::roce`), as
//! in `roce.rs`, and sends the device what a real network can deliver: the same NAK many times
//! or late, a READ request again long after it was answered, READ responses twice or out of
//! order, and answers no honest responder could have sent (an ACK or a NAK for a packet that has
//! not gone out, READ responses out of their FIRST/MIDDLE/LAST order, longer than the path MTU,
//! or with a NAK's syndrome). A healthy connection survives the first kind; the second kind is
//! dropped or fails the WQE with BAD_RESP_ERR, never completes it.
//!
//! Packets that must not go out yet are held back by on-demand paging: a WRITE whose second
//! page is not mapped sends its first packet and waits for RESUME with the rest of its PSNs
//! assigned, and READ responses from a page that was invalidated wait the same way. The virtual
//! clock stands still while the test listens, so no ACK timeout muddles what is counted.
//!
//! Also (finding 6): a READ request longer than 2^31 bytes, IBA's largest message, is refused
//! with an invalid-request NAK.

use std::time::Duration;

use qhca_qtest::abi::*;
use qhca_qtest::port::*;
use qhca_qtest::roce::*;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

/// Both directions' first PSN.
const PSN: u32 = 0x100;
/// Path MTU 256 (`path_mtu` 8): a 768-byte message is three packets.
const MTU: usize = 256;
const BUF_LEN: u64 = 0x4000;
/// An on-demand region's virtual addresses (MAP_ODP points them at test RAM).
const VA: u64 = 0x7f12_3400_0000;
/// How long a frame the device owes may take (real time).
const WAIT: Duration = Duration::from_secs(3);
/// How long the test listens to conclude that nothing (more) comes.
const QUIET: Duration = Duration::from_millis(150);

const SYN_ACK: u8 = 0x1f;
const SYN_RNR: u8 = 0x20;
const SYN_NAK_PSN: u8 = 0x60;
const SYN_NAK_INV_REQ: u8 = 0x61;
const SYN_NAK_REM_ACCESS: u8 = 0x62;
const SYN_NAK_REM_OP: u8 = 0x63;

/// A device on a netdev whose other end is the test, with one RC QP connected to the test's
/// (the test's MAC already known to it).
struct W {
    h: Hca,
    peer: Peer,
    m: Mem,
    uar: u32,
    pdn: u32,
    cq: Cq,
    qp: Qp,
    /// BUF_LEN bytes of 0xee, registered with every right.
    buf: u64,
    key: u32,
    /// Events that came while a command was waited for (page faults, QP_ERR).
    events: Vec<qhca_eqe>,
}

/// Path MTU 256, retry_cnt 7, an ACK timeout of 4.3 s (virtual; no retransmission while the
/// test looks), `max_dest_rd_atomic` as given (0: the device's 16).
fn params(max_dest_rd_atomic: u8) -> ConnParams {
    ConnParams {
        access: QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ | QHCA_ACCESS_REMOTE_ATOMIC,
        path_mtu: 8,
        timeout: 20,
        retry_cnt: 7,
        max_dest_rd_atomic,
        av: Some(AhAttr::from_to(1, v4_gid(PEER_IP))),
        ..Default::default()
    }
}

fn world(max_dest_rd_atomic: u8) -> W {
    let peer = Peer::new();
    let netdev = peer.netdev("n0");
    let props = format!("num-uars=8,netdev=n0,mac={}", mac_str(DEV_MAC));
    let mut h = Hca::start_with(&props, &["-netdev", &netdev]);
    h.bring_up(5, 6);
    add_ipv4(&mut h, 1, DEV_IP);
    let mut m = Mem::default();
    let uar = h.alloc_uar().1 as u32;
    let (_, pdn) = alloc_pd(&mut h, uar);
    let (_, cq) = create_cq(&mut h, &mut m, uar, 8);
    let (st, qp) = create_qp(&mut h, &mut m, uar, pdn, cq.cqn, cq.cqn, &QpCaps::default());
    assert_eq!(st, QHCA_CMD_OK);
    bring_to_rts(&mut h, &qp, PEER_QPN, PSN, &params(max_dest_rd_atomic));
    let buf = m.alloc(&mut h, BUF_LEN);
    h.qt.memset(buf, BUF_LEN as usize, 0xee);
    let all = QHCA_ACCESS_LOCAL_WRITE
        | QHCA_ACCESS_REMOTE_WRITE
        | QHCA_ACCESS_REMOTE_READ
        | QHCA_ACCESS_REMOTE_ATOMIC;
    let (st, key) = reg_mr(&mut h, &mut m, uar, pdn, buf, BUF_LEN, all);
    assert_eq!(st, QHCA_CMD_OK);
    // The test asks who has 10.7.0.1 and gets the device's answer (the device learns the test's
    // MAC only by asking: `expect_pkt` and `drain` answer its request).
    let q = Arp::request(PEER_MAC, PEER_IP, DEV_IP);
    peer.send(&q.encode());
    let f = peer.recv(WAIT).expect("an ARP reply");
    assert_eq!(Arp::parse(&f), Ok(Arp::reply_to(&q, DEV_MAC)), "{f:02x?}");
    W {
        h,
        peer,
        m,
        uar,
        pdn,
        cq,
        qp,
        buf,
        key,
        events: Vec::new(),
    }
}

impl W {
    /// The next frame from the device, a RoCEv2 one for the test's QP.
    fn expect_pkt(&self) -> Pkt {
        let f = self
            .peer
            .recv_answering(WAIT, DEV, PEER)
            .expect("a RoCEv2 frame from the device");
        let p = Pkt::parse(&f).unwrap_or_else(|e| panic!("frame from the device: {e}: {f:02x?}"));
        assert_eq!(p.dest_qpn, PEER_QPN, "{p:?}");
        p
    }

    /// Every frame the device sends until it has been quiet for a while: (opcode, PSN).
    fn drain(&self) -> Vec<(u8, u32)> {
        self.peer
            .drain_answering(QUIET, DEV, PEER)
            .iter()
            .map(|f| {
                let p = Pkt::parse(f).unwrap_or_else(|e| panic!("{e}: {f:02x?}"));
                (p.opcode, p.psn)
            })
            .collect()
    }

    fn expect_nothing(&self, what: &str) {
        if let Some(f) = self.peer.recv_answering(QUIET, DEV, PEER) {
            let p = Pkt::parse(&f);
            panic!("{what}: the device sent a frame: {p:?}");
        }
    }

    fn send(&self, p: &Pkt) {
        self.peer.send(&p.encode());
    }

    /// A packet from the test's QP to the device's.
    fn pkt(&self, opcode: u8, psn: u32) -> Pkt {
        Pkt::new(PEER, DEV, opcode, self.qp.qpn, psn)
    }

    /// An ACK packet (ACK, RNR NAK or NAK by its syndrome) for `psn`.
    fn ack(&self, psn: u32, syndrome: u8) -> Pkt {
        let mut p = self.pkt(op::ACK, psn);
        p.aeth = Some(Aeth { syndrome, msn: 1 });
        p
    }

    /// A READ response packet: `opcode` (FIRST/MIDDLE/LAST/ONLY) at `psn` carrying `data`,
    /// with an AETH of `syndrome` where the opcode has one.
    fn read_resp(&self, opcode: u8, psn: u32, data: &[u8], syndrome: u8) -> Pkt {
        let mut p = self.pkt(opcode, psn);
        if opcode != op::READ_RESP_MIDDLE {
            p.aeth = Some(Aeth { syndrome, msn: 1 });
        }
        p.payload = data.to_vec();
        p
    }

    /// A READ request from the test for `len` bytes at `va`.
    fn read_req(&self, psn: u32, va: u64, rkey: u32, len: u32) -> Pkt {
        let mut p = self.pkt(op::READ_REQUEST, psn);
        p.ack_req = true;
        p.reth = Some(Reth { va, rkey, len });
        p
    }

    /// An object command (output into `out` if given), taking the events that come before its
    /// completion: (status, data[0]).
    fn obj(&mut self, opcode: u32, in_: [u64; 5], out: Option<(u64, u32)>) -> (u32, u64) {
        let mut c = self.h.cmd(opcode);
        c.in_ = in_;
        if let Some((addr, len)) = out {
            c.out_addr = addr;
            c.out_len = len;
        }
        let (e, others) = self.h.exec_amid_events(&c);
        self.events.extend(others);
        (e.status as u32, e.data[0])
    }

    fn qp_state(&mut self) -> u32 {
        let out = MAILBOX + 0x1000;
        self.h.qt.memset(out, 64, 0xee);
        let in_ = [self.uar as u64, self.qp.qpn as u64, 0, 0, 0];
        let st = self.obj(QHCA_CMD_QUERY_QP, in_, Some((out, 64))).0;
        assert_eq!(st, QHCA_CMD_OK);
        QpAttr::decode(&self.h.qt.memread(out, 64)).state as u32
    }

    // ------------------------------------------------------------ on-demand paging

    /// An on-demand region over [iova, iova + len) with `access`: its key.
    fn reg_odp(&mut self, iova: u64, len: u64, access: u32) -> u32 {
        let b = reg_mr_bytes(
            self.uar,
            self.pdn,
            iova,
            len,
            access | QHCA_ACCESS_ON_DEMAND,
            0,
            0,
        );
        let (st, key) = self.obj(QHCA_CMD_REG_MR, in_words(&b), None);
        assert_eq!(st, QHCA_CMD_OK, "REG_MR on demand");
        key as u32
    }

    /// Maps the region's pages from `va` (page aligned) onto test RAM at `ram`, writable.
    fn map(&mut self, key: u32, va: u64, npages: u64, ram: u64) {
        let bits = (QHCA_ODP_PRESENT | QHCA_ODP_WRITABLE) as u64;
        let bytes: Vec<u8> = (0..npages)
            .flat_map(|i| ((ram + i * PAGE) | bits).to_le_bytes())
            .collect();
        let list = self.m.alloc(&mut self.h, bytes.len() as u64);
        self.h.qt.memwrite(list, &bytes);
        let in_ = [self.uar as u64, key as u64, va / PAGE, npages, list];
        let st = self.obj(QHCA_CMD_MAP_ODP, in_, None).0;
        assert_eq!(st, QHCA_CMD_OK, "MAP_ODP");
    }

    fn invalidate(&mut self, key: u32, va: u64, npages: u64) {
        let in_ = [self.uar as u64, key as u64, va / PAGE, npages, 0];
        let st = self.obj(QHCA_CMD_INVALIDATE_ODP, in_, None).0;
        assert_eq!(st, QHCA_CMD_OK, "INVALIDATE_ODP");
    }

    fn resume(&mut self, token: u32) {
        let in_ = [self.uar as u64, token as u64, QHCA_RESUME_OK as u64, 0, 0];
        let st = self.obj(QHCA_CMD_RESUME, in_, None).0;
        assert_eq!(st, QHCA_CMD_OK, "RESUME");
    }

    /// The one page fault the device has raised since the last look, at `va`: its token.
    fn fault_at(&mut self, va: u64) -> u32 {
        let mut ev = std::mem::take(&mut self.events);
        ev.extend(take_events(&mut self.h));
        assert_eq!(ev.len(), 1, "one event: {ev:?}");
        let e = &ev[0];
        assert_eq!(
            (e.type_ as u32, e.data[0]),
            (QHCA_EQE_PAGE_FAULT, va),
            "{e:?}"
        );
        e.token
    }
}

/// A WRITE of three packets whose first one goes out and whose last two wait for a page fault
/// to be served (their PSNs, PSN + 1 and PSN + 2, assigned but not sent): the world, the data
/// and the fault's token.
fn write_stopped_by_a_fault() -> (W, Vec<u8>, u32) {
    let mut w = world(0);
    let key = w.reg_odp(VA, 2 * PAGE, QHCA_ACCESS_LOCAL_WRITE);
    let ram = w.m.alloc(&mut w.h, 2 * PAGE);
    let data = pattern(3 * MTU, 7);
    w.h.qt.memwrite(ram + PAGE - MTU as u64, &data);
    w.map(key, VA, 1, ram);
    let (dst, rkey) = (0x1000_0000, 0x4242);
    let src = VA + PAGE - MTU as u64;
    w.qp.post_send(
        &mut w.h,
        &SendWr::write(src, 3 * MTU as u32, key, dst, rkey),
    );
    let p = w.expect_pkt();
    assert_eq!((p.opcode, p.psn), (op::WRITE_FIRST, PSN), "{p:?}");
    assert_eq!(p.payload, data[..MTU]);
    let token = w.fault_at(VA + PAGE);
    w.expect_nothing("the WRITE waits for its page");
    // Mapped now; the rest goes out at RESUME.
    w.map(key, VA + PAGE, 1, ram + PAGE);
    (w, data, token)
}

/// After RESUME the rest of the WRITE goes out, all of it, and the ACK of its last PSN completes
/// it.
fn resume_and_finish(w: &mut W, data: &[u8], token: u32) {
    w.resume(token);
    let rest: Vec<(u8, u32, Vec<u8>)> = (0..2)
        .map(|_| {
            let p = w.expect_pkt();
            (p.opcode, p.psn, p.payload)
        })
        .collect();
    assert_eq!(
        rest,
        [
            (op::WRITE_MIDDLE, PSN + 1, data[MTU..2 * MTU].to_vec()),
            (op::WRITE_LAST, PSN + 2, data[2 * MTU..].to_vec()),
        ]
    );
    w.expect_nothing("the WRITE was sent once");
    w.send(&w.ack(PSN + 2, SYN_ACK));
    let c = w.cq.wait(&mut w.h);
    assert_eq!((c.wr_id, c.status as u32), (0x77, QHCA_WC_SUCCESS), "{c:?}");
    w.cq.expect_empty(&mut w.h);
}

/// An ACK for a PSN the requester has assigned but not sent says something the responder cannot
/// know: it completes nothing (the WQE used to complete, its last two packets never sent).
#[test]
fn an_ack_for_a_psn_not_yet_sent_completes_nothing() {
    let (mut w, data, token) = write_stopped_by_a_fault();
    w.send(&w.ack(PSN + 2, SYN_ACK));
    w.send(&w.ack(PSN + 1, SYN_ACK));
    w.cq.expect_empty(&mut w.h);
    w.expect_nothing("an ACK from the future");
    // The ACK of what did go out is taken, and completes nothing either.
    w.send(&w.ack(PSN, SYN_ACK));
    w.cq.expect_empty(&mut w.h);
    assert_eq!(w.qp_state(), QHCA_QPS_RTS);
    resume_and_finish(&mut w, &data, token);
}

/// The same for NAKs: a PSN-sequence NAK for a PSN not sent neither acknowledges the packet
/// before it nor moves the requester past it, and a fatal NAK for one fails nothing.
#[test]
fn a_nak_for_a_psn_not_yet_sent_changes_nothing() {
    let (mut w, data, token) = write_stopped_by_a_fault();
    w.send(&w.ack(PSN + 2, SYN_NAK_PSN));
    w.send(&w.ack(PSN + 1, SYN_NAK_REM_ACCESS));
    w.send(&w.ack(PSN + 2, SYN_RNR | 1));
    w.cq.expect_empty(&mut w.h);
    w.expect_nothing("NAKs from the future");
    assert_eq!(w.qp_state(), QHCA_QPS_RTS);
    resume_and_finish(&mut w, &data, token);
}

/// One PSN-sequence NAK delivered eight times is one go-back-N and one retry: the duplicates,
/// which arrive while that retry is under way, change nothing (as in rxe). It used to end in
/// RETRY_EXC_ERR at retry_cnt 7. A NAK for a later PSN after progress is a new retry; the old
/// NAK replayed once its PSN is acknowledged is stale.
#[test]
fn a_psn_nak_delivered_many_times_is_one_retry() {
    let mut w = world(0);
    let data = pattern(3 * MTU, 3);
    w.h.qt.memwrite(w.buf, &data);
    w.qp.post_send(
        &mut w.h,
        &SendWr::write(w.buf, 3 * MTU as u32, w.key, 0x1000_0000, 0x4242),
    );
    let sent = [
        (op::WRITE_FIRST, PSN),
        (op::WRITE_MIDDLE, PSN + 1),
        (op::WRITE_LAST, PSN + 2),
    ];
    assert_eq!(w.drain(), sent);

    // PSN was lost: the responder NAKs the arrival of PSN + 1; the network repeats the NAK.
    for _ in 0..8 {
        w.send(&w.ack(PSN, SYN_NAK_PSN));
    }
    assert_eq!(w.drain(), sent, "one go-back-N from PSN");
    w.cq.expect_empty(&mut w.h);
    assert_eq!(w.qp_state(), QHCA_QPS_RTS);

    // PSN made it this time, PSN + 1 did not: a new NAK after progress, a new retry (once).
    for _ in 0..3 {
        w.send(&w.ack(PSN + 1, SYN_NAK_PSN));
    }
    assert_eq!(w.drain(), sent[1..], "one go-back-N from PSN + 1");
    // PSN + 1 is in. The first NAK once more, late: PSN is acknowledged since; nothing to do.
    w.send(&w.ack(PSN + 1, SYN_ACK));
    w.send(&w.ack(PSN, SYN_NAK_PSN));
    w.expect_nothing("a stale NAK");
    w.cq.expect_empty(&mut w.h);

    w.send(&w.ack(PSN + 2, SYN_ACK));
    let c = w.cq.wait(&mut w.h);
    assert_eq!(c.status as u32, QHCA_WC_SUCCESS, "{c:?}");
}

/// A READ request replayed after it was answered (the requester has its data and went on) is
/// answered again, but it is not a new request: it does not take one of the responder's
/// `max_dest_rd_atomic` resources, so the requester's next READ is not an invalid request.
/// The replay is held in the middle by a page fault (its second page invalidated), so that the
/// new READ arrives while it is still being answered.
#[test]
fn a_replayed_read_does_not_make_the_next_one_an_invalid_request() {
    let mut w = world(1);
    let all = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_READ;
    let key = w.reg_odp(VA, 2 * PAGE, all);
    let ram = w.m.alloc(&mut w.h, 2 * PAGE);
    let data = pattern(2 * PAGE as usize, 9);
    w.h.qt.memwrite(ram, &data);
    w.map(key, VA, 2, ram);
    let n = (2 * PAGE as usize / MTU) as u32;

    // READ A: 32 responses.
    let a = w.read_req(PSN, VA, key, 2 * PAGE as u32);
    w.send(&a);
    let resp: Vec<u32> = w.drain().iter().map(|&(_, psn)| psn).collect();
    assert_eq!(resp, (PSN..PSN + n).collect::<Vec<_>>());

    // Replayed: answered again up to its second page, which is not there any more.
    w.invalidate(key, VA + PAGE, 1);
    w.send(&a);
    let resp: Vec<u32> = w.drain().iter().map(|&(_, psn)| psn).collect();
    assert_eq!(resp, (PSN..PSN + n / 2).collect::<Vec<_>>());
    let token = w.fault_at(VA + PAGE);

    // READ B, new, while the replay waits: accepted (its answer comes after the replay's).
    w.h.qt.memwrite(w.buf, &[0x5a; 16]);
    w.send(&w.read_req(PSN + n, w.buf, w.key, 16));
    w.expect_nothing("READ B waits behind the replay; no NAK");
    assert_eq!(w.qp_state(), QHCA_QPS_RTS);

    w.map(key, VA + PAGE, 1, ram + PAGE);
    w.resume(token);
    let mut rest: Vec<Pkt> = (0..n / 2 + 1).map(|_| w.expect_pkt()).collect();
    let b = rest.pop().unwrap();
    assert_eq!(
        rest.iter().map(|p| p.psn).collect::<Vec<_>>(),
        (PSN + n / 2..PSN + n).collect::<Vec<_>>()
    );
    let replayed: Vec<u8> = rest.iter().flat_map(|p| p.payload.clone()).collect();
    assert_eq!(replayed, data[PAGE as usize..]);
    assert_eq!((b.opcode, b.psn), (op::READ_RESP_ONLY, PSN + n), "{b:?}");
    assert_eq!(b.payload, [0x5a; 16]);
    assert_eq!(b.aeth.map(|a| a.syndrome & 0xe0), Some(0), "{b:?}");
    w.expect_nothing("all answered");
    assert_eq!(w.qp_state(), QHCA_QPS_RTS);
}

/// The responder keeps its last 16 READs and atomics. When a new request needs the slot of the
/// oldest while that one is being replayed for a duplicate, the replay ends there (its
/// requester cannot be waiting for it: it would have 16 outstanding and could not have sent the
/// 17th); if the replay was held by a page fault, the new READ is not held with it.
#[test]
fn a_new_read_ends_the_replay_in_the_slot_it_takes() {
    let mut w = world(0);
    let key = w.reg_odp(
        VA,
        2 * PAGE,
        QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_READ,
    );
    let ram = w.m.alloc(&mut w.h, 2 * PAGE);
    w.map(key, VA, 2, ram);
    let n = (2 * PAGE as usize / MTU) as u32;
    // READ 0 over both pages (32 responses), then 15 one-packet READs: 16 resources.
    let first = w.read_req(PSN, VA, key, 2 * PAGE as u32);
    w.send(&first);
    assert_eq!(w.drain().len(), n as usize);
    for i in 0..15 {
        w.send(&w.read_req(PSN + n + i, w.buf, w.key, 8));
        let p = w.expect_pkt();
        assert_eq!(
            (p.opcode, p.psn),
            (op::READ_RESP_ONLY, PSN + n + i),
            "{p:?}"
        );
    }
    // READ 0 replayed, held by its second page.
    w.invalidate(key, VA + PAGE, 1);
    w.send(&first);
    assert_eq!(w.drain().len(), n as usize / 2);
    let token = w.fault_at(VA + PAGE);

    // READ 16 takes READ 0's slot: answered now, not after RESUME.
    let next = PSN + n + 15;
    w.h.qt.memwrite(w.buf, &[0x3c; 8]);
    w.send(&w.read_req(next, w.buf, w.key, 8));
    let p = w.expect_pkt();
    assert_eq!((p.opcode, p.psn), (op::READ_RESP_ONLY, next), "{p:?}");
    assert_eq!(p.payload, [0x3c; 8]);
    w.expect_nothing("the replay is over");
    // READ 0 is forgotten: a duplicate of it gets nothing.
    w.send(&first);
    w.expect_nothing("a duplicate older than the resources");

    // The fault's RESUME comes late: no replay goes on (an unsolicited ACK at most).
    w.map(key, VA + PAGE, 1, ram + PAGE);
    w.resume(token);
    for (opcode, psn) in w.drain() {
        assert_eq!((opcode, psn), (op::ACK, next), "after RESUME");
    }
    assert_eq!(w.qp_state(), QHCA_QPS_RTS);
    w.send(&w.read_req(next + 1, w.buf, w.key, 8));
    let p = w.expect_pkt();
    assert_eq!((p.opcode, p.psn), (op::READ_RESP_ONLY, next + 1), "{p:?}");
}

/// READ responses from the test to a three-packet READ of the device (768 bytes into the
/// buffer): duplicates and a response ahead of its turn are dropped and the READ completes with
/// the right bytes; responses out of FIRST/MIDDLE/LAST order, longer than the path MTU or with
/// a NAK's syndrome fail it with BAD_RESP_ERR (the QP in ERR), and nothing of them lands.
#[test]
fn read_responses_are_checked_for_order_length_and_syndrome() {
    let data = pattern(3 * MTU, 5);
    let d = |k: usize| data[k * MTU..(k + 1) * MTU].to_vec();
    type Resp = (u8, u32, Vec<u8>, u8);
    let good: Vec<Resp> = vec![
        // LAST ahead of MIDDLE: dropped, sent again below.
        (op::READ_RESP_LAST, PSN + 2, d(2), SYN_ACK),
        (op::READ_RESP_FIRST, PSN, d(0), SYN_ACK),
        (op::READ_RESP_FIRST, PSN, d(0), SYN_ACK),
        (op::READ_RESP_MIDDLE, PSN + 1, d(1), 0),
        (op::READ_RESP_MIDDLE, PSN + 1, d(1), 0),
        (op::READ_RESP_FIRST, PSN, d(0), SYN_ACK),
        (op::READ_RESP_LAST, PSN + 2, d(2), SYN_ACK),
    ];
    let bad: Vec<(&str, Vec<Resp>)> = vec![
        (
            "MIDDLE where FIRST belongs",
            vec![(op::READ_RESP_MIDDLE, PSN, d(0), 0)],
        ),
        (
            "ONLY for a three-packet READ, 768 bytes",
            vec![(op::READ_RESP_ONLY, PSN, data.clone(), SYN_ACK)],
        ),
        (
            "FIRST, then a LAST of 512 bytes",
            vec![
                (op::READ_RESP_FIRST, PSN, d(0), SYN_ACK),
                (op::READ_RESP_LAST, PSN + 1, data[MTU..].to_vec(), SYN_ACK),
            ],
        ),
        (
            "FIRST, FIRST",
            vec![
                (op::READ_RESP_FIRST, PSN, d(0), SYN_ACK),
                (op::READ_RESP_FIRST, PSN + 1, d(1), SYN_ACK),
            ],
        ),
        (
            "FIRST, MIDDLE, MIDDLE",
            vec![
                (op::READ_RESP_FIRST, PSN, d(0), SYN_ACK),
                (op::READ_RESP_MIDDLE, PSN + 1, d(1), 0),
                (op::READ_RESP_MIDDLE, PSN + 2, d(2), 0),
            ],
        ),
        (
            "FIRST with a NAK's syndrome",
            vec![(op::READ_RESP_FIRST, PSN, d(0), SYN_NAK_INV_REQ)],
        ),
        (
            "LAST with an RNR NAK's syndrome",
            vec![
                (op::READ_RESP_FIRST, PSN, d(0), SYN_ACK),
                (op::READ_RESP_MIDDLE, PSN + 1, d(1), 0),
                (op::READ_RESP_LAST, PSN + 2, d(2), SYN_RNR | 3),
            ],
        ),
    ];
    let cases = std::iter::once(("duplicated and reordered", good)).chain(bad);
    for (what, resps) in cases {
        let mut w = world(0);
        let dst = w.buf + 0x1000;
        let (va, rkey) = (0x1000_0000, 0x4242);
        w.qp.post_send(
            &mut w.h,
            &SendWr {
                wr_id: 0x88,
                opcode: QHCA_WR_RDMA_READ,
                flags: QHCA_WQE_SIGNALED,
                remote_addr: va,
                rkey,
                sges: vec![(dst, 3 * MTU as u32, w.key)],
                ..Default::default()
            },
        );
        let p = w.expect_pkt();
        assert_eq!((p.opcode, p.psn), (op::READ_REQUEST, PSN), "{what}: {p:?}");
        for (opcode, psn, payload, syndrome) in &resps {
            w.send(&w.read_resp(*opcode, *psn, payload, *syndrome));
        }
        let c = w.cq.wait(&mut w.h);
        let landed = w.h.qt.memread(dst, 3 * MTU);
        if what == "duplicated and reordered" {
            assert_eq!(
                (c.wr_id, c.status as u32, c.byte_len),
                (0x88, QHCA_WC_SUCCESS, 3 * MTU as u32),
                "{what}: {c:?}"
            );
            assert_eq!(landed, data, "{what}");
            assert_eq!(w.qp_state(), QHCA_QPS_RTS, "{what}");
        } else {
            assert_eq!(
                (c.wr_id, c.status as u32),
                (0x88, QHCA_WC_BAD_RESP_ERR),
                "{what}: {c:?}"
            );
            assert_eq!(w.qp_state(), QHCA_QPS_ERR, "{what}");
            // What came before the bad packet may have landed; the bad one did not.
            let bad_k = (resps.last().unwrap().1 - PSN) as usize;
            assert!(
                landed[bad_k * MTU..].iter().all(|&x| x == 0xee),
                "{what}: the bad packet's bytes landed"
            );
        }
        w.expect_nothing(what);
    }
}

/// An atomic ACK whose AETH carries a NAK's syndrome is no answer: BAD_RESP_ERR, and the
/// original value it carries is not written.
#[test]
fn an_atomic_ack_with_a_naks_syndrome_fails_the_wqe() {
    for syndrome in [SYN_NAK_REM_OP, SYN_RNR | 1, SYN_NAK_PSN] {
        let mut w = world(0);
        w.qp.post_send(
            &mut w.h,
            &SendWr {
                wr_id: 0x99,
                opcode: QHCA_WR_ATOMIC_FETCH_AND_ADD,
                flags: QHCA_WQE_SIGNALED,
                remote_addr: 0x1000_0000,
                rkey: 0x4242,
                swap_add: 1,
                sges: vec![(w.buf, 8, w.key)],
                ..Default::default()
            },
        );
        let p = w.expect_pkt();
        assert_eq!((p.opcode, p.psn), (op::FETCH_ADD, PSN), "{p:?}");
        let mut a = w.pkt(op::ATOMIC_ACK, PSN);
        a.aeth = Some(Aeth { syndrome, msn: 1 });
        a.atomic_ack = Some(0x1122_3344_5566_7788);
        w.send(&a);
        let c = w.cq.wait(&mut w.h);
        assert_eq!(
            (c.wr_id, c.status as u32),
            (0x99, QHCA_WC_BAD_RESP_ERR),
            "syndrome {syndrome:#x}: {c:?}"
        );
        assert_eq!(w.h.qt.memread(w.buf, 8), [0xee; 8]);
    }
}

/// Finding 6: a READ request longer than 2^31 bytes (IBA's largest message; at MTU 256,
/// 2^32 - 1 bytes would take 2^24 PSNs, the whole PSN space) is an invalid request, NAKed so,
/// the responder in ERR. 2^31 itself is taken: over the implicit on-demand region it goes as
/// far as the page fault its first page raises (an RNR NAK).
#[test]
fn a_read_longer_than_2_to_the_31_is_an_invalid_request() {
    for (len, syndrome) in [
        (1u32 << 31, SYN_RNR),
        ((1 << 31) + 1, SYN_NAK_INV_REQ),
        (u32::MAX, SYN_NAK_INV_REQ),
    ] {
        let mut w = world(0);
        let key = w.reg_odp(0, QHCA_ODP_IMPLICIT_LENGTH, QHCA_ACCESS_REMOTE_READ);
        w.send(&w.read_req(PSN, 0x10_0000, key, len));
        let p = w.expect_pkt();
        let a = p.aeth.expect("an AETH");
        assert_eq!((p.opcode, p.psn), (op::ACK, PSN), "{p:?}");
        if syndrome == SYN_RNR {
            assert_eq!(a.syndrome & 0xe0, SYN_RNR, "READ of {len:#x} bytes: {p:?}");
        } else {
            assert_eq!(a.syndrome, syndrome, "READ of {len:#x} bytes: {p:?}");
        }
        let state = w.qp_state();
        if syndrome == SYN_RNR {
            assert_eq!(state, QHCA_QPS_RTS);
            w.fault_at(0x10_0000);
        } else {
            assert_eq!(state, QHCA_QPS_ERR, "READ of {len:#x} bytes");
            let ev = std::mem::take(&mut w.events);
            assert_eq!(event_keys(&ev)[0].0, QHCA_EQE_QP_ERR, "{ev:?}");
        }
        w.expect_nothing("one answer");
    }
}
