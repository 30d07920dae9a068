// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Host tests of `cq`: no device; the tests write CQEs as the device would (and the helpers for
//! that, which `qp`'s tests use too).

use super::*;

/// Writes a CQE the way the device does: body first, owner byte last.
pub(crate) fn device_write_cqe(buf: &PageBuf, log: u32, index: u32, body: &[u8; 32]) {
    let slot = ((index & ((1 << log) - 1)) as usize) * CQE_SIZE;
    let owner = CqRing::owner_for(index, log);
    // SAFETY: inside the test's own mapping, which no reference covers; the ring under test
    // runs on this thread, between these writes, so nothing accesses the entry meanwhile.
    unsafe {
        std::ptr::copy_nonoverlapping(body.as_ptr(), buf.as_ptr().add(slot), 31);
        fence(Ordering::Release);
        std::ptr::write_volatile(buf.as_ptr().add(slot + 31), owner);
    }
}

/// A CQE as the header lays it out, spelled out by hand (the decoder takes its offsets from
/// the bindings: this checks them); `wqe_index` is `wr_id`'s low 16 bits.
pub(crate) fn cqe(wr_id: u64, opcode: u8, status: u8, qpn: u32, imm: Option<u32>) -> [u8; 32] {
    let mut b = [0u8; 32];
    b[0..8].copy_from_slice(&wr_id.to_le_bytes());
    b[8..12].copy_from_slice(&(wr_id as u32 ^ 0x55).to_le_bytes());
    b[12..16].copy_from_slice(&imm.unwrap_or(0xdead).to_le_bytes());
    b[16..20].copy_from_slice(&qpn.to_le_bytes());
    b[20..24].copy_from_slice(&(qpn + 1).to_le_bytes());
    b[24] = opcode;
    b[25] = status;
    b[26] = 0x7e;
    b[27] = u8::from(imm.is_some());
    b[28..30].copy_from_slice(&(wr_id as u16).to_le_bytes());
    b
}

fn dbrec_ci(buf: &PageBuf, l: &CqLayout) -> u32 {
    // SAFETY: inside the test's own mapping.
    unsafe { std::ptr::read_volatile(buf.as_ptr().add(l.dbrec_offset).cast::<u32>()) }
}

#[test]
fn owner_bit_per_pass() {
    // log 1: two entries per pass; pass 0 writes 1, pass 1 writes 0, pass 2 writes 1.
    let got: Vec<u8> = (0..6).map(|i| CqRing::owner_for(i, 1)).collect();
    assert_eq!(got, [1, 1, 0, 0, 1, 1]);
    assert_eq!(CqRing::owner_for(u32::MAX, 1), 0, "pass 2^31 - 1 is odd");
    assert_eq!(CqRing::owner_for(u32::MAX, 16), 0, "pass 0xffff is odd");
    assert_eq!(CqRing::owner_for(1 << 16, 16), 0);
}

#[test]
fn decodes_every_field() {
    let b = cqe(0x0102_0304_0506_0708, 0x81, 0x0a, 0x42, Some(0xfeed));
    let wc = Wc::decode(&b);
    assert_eq!(
        wc,
        Wc {
            wr_id: 0x0102_0304_0506_0708,
            status: WcStatus::RemAccessErr,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 0x0506_0708 ^ 0x55,
            imm: Some(0xfeed),
            invalidated_rkey: None,
            qpn: 0x42,
            src_qp: 0x43,
            with_grh: false,
            vendor_err: 0x7e,
            is_recv: true,
            wqe_index: 0x0708,
        }
    );
    let wc = Wc::decode(&cqe(1, 0x03, 0, 7, None));
    assert_eq!(
        (wc.imm, wc.opcode, wc.status, wc.is_recv),
        (None, WcOpcode::CompSwap, WcStatus::Success, false)
    );
    assert_eq!(WcOpcode::from_raw(0x7f), WcOpcode::Unknown(0x7f));
    assert_eq!(WcStatus::from_raw(0x0d), WcStatus::RnrRetryExcErr);
    assert_eq!(WcStatus::from_raw(0x05), WcStatus::WrFlushErr);
    assert_eq!(WcStatus::from_raw(0x15), WcStatus::GeneralErr);
    assert_eq!(WcStatus::from_raw(0x06), WcStatus::MwBindErr);
    assert_eq!(WcStatus::from_raw(0x03), WcStatus::Unknown(3));
    assert_eq!(WcOpcode::from_raw(0x05), WcOpcode::BindMw);
    assert_eq!(WcOpcode::from_raw(0x06), WcOpcode::LocalInv);
    // SEND_WITH_INV: QHCA_CQE_WITH_INV, the key where the immediate goes.
    let mut b = cqe(9, 0x80, 0, 7, Some(0x8000_1234));
    b[27] = 2;
    let wc = Wc::decode(&b);
    assert_eq!((wc.imm, wc.invalidated_rkey), (None, Some(0x8000_1234)));
    assert!(!wc.with_grh);
}

/// A UD receive: QHCA_CQE_WITH_GRH (bit 2 of flags) beside WITH_IMM, byte_len counting the
/// GRH, src_qp the sender; the GRH itself is in the buffer, big-endian.
#[test]
fn decodes_a_ud_receive_and_its_grh() {
    use crate::{Gid, Grh, GRH_SIZE};
    let mut b = cqe(5, 0x80, 0, 0x42, Some(0x0102_0304));
    b[8..12].copy_from_slice(&(GRH_SIZE as u32 + 100).to_le_bytes());
    b[20..24].copy_from_slice(&0x1_0007u32.to_le_bytes());
    b[27] = 0b101;
    let wc = Wc::decode(&b);
    assert!(wc.with_grh && wc.is_recv);
    assert_eq!(
        (wc.opcode, wc.imm, wc.src_qp, wc.byte_len, wc.msg_len()),
        (WcOpcode::Recv, Some(0x0102_0304), 0x1_0007, 140, 100)
    );
    // Without the flag (RC), byte_len is all message.
    b[27] = 0;
    assert_eq!(Wc::decode(&b).msg_len(), 140);

    let sender = Gid::from_guid(0x5254_0012_3456_0002);
    let mut buf = vec![0u8; GRH_SIZE + 100];
    buf[..4].copy_from_slice(&(6u32 << 28 | 0x12 << 20 | 0xabcde).to_be_bytes());
    buf[4..6].copy_from_slice(&(8 + 124u16).to_be_bytes());
    buf[6] = 17;
    buf[7] = 64;
    buf[8..24].copy_from_slice(&sender.raw);
    buf[24..40].copy_from_slice(&Gid::from_guid(1).raw);
    let g = Grh::parse(&buf).unwrap();
    assert_eq!(
        (
            g.ip_version,
            g.traffic_class,
            g.flow_label,
            g.paylen,
            g.next_hdr,
            g.hop_limit
        ),
        (6, 0x12, 0xabcde, 124, 17, 64)
    );
    assert_eq!((g.sgid, g.dgid), (sender, Gid::from_guid(1)));
}

#[test]
fn polls_a_fake_ring_across_passes_and_publishes_ci_per_batch() {
    let l = CqLayout::new(4).unwrap();
    let buf = PageBuf::new(l.buf_len).unwrap();
    // SAFETY: our own zeroed mapping of the layout's size, written only by `device_write_cqe`.
    let mut ring = unsafe { CqRing::new(buf.as_ptr(), &l) };
    let mut wcs = [Wc::default(); 8];
    assert_eq!(ring.poll(&mut wcs), 0, "a zeroed ring is empty");
    assert_eq!(dbrec_ci(&buf, &l), 0);

    for i in 0..3 {
        device_write_cqe(&buf, l.log, i, &cqe(u64::from(i), 0, 0, 9, None));
    }
    assert_eq!(ring.poll(&mut wcs[..2]), 2, "limited by the output");
    assert_eq!(dbrec_ci(&buf, &l), 2);
    assert_eq!(ring.poll(&mut wcs), 1);
    assert_eq!(wcs[0].wr_id, 2);
    assert_eq!((ring.ci(), dbrec_ci(&buf, &l)), (3, 3));

    // Index 3 then 4..7 (second pass, owner 0) then 8 (third pass, owner 1).
    for i in 3..9 {
        device_write_cqe(&buf, l.log, i, &cqe(u64::from(i), 0x80, 0, 9, None));
        let n = ring.poll(&mut wcs);
        assert_eq!(n, 1, "index {i}");
        assert_eq!(wcs[0].wr_id, u64::from(i));
        assert!(wcs[0].is_recv);
    }
    assert_eq!(dbrec_ci(&buf, &l), 9);
    // A stale entry is not taken: slot 1 still holds index 5 (pass 1, owner 0), and index 9
    // (pass 2) expects owner 1.
    assert_eq!(ring.poll(&mut wcs), 0);
    assert_eq!(dbrec_ci(&buf, &l), 9, "an empty poll publishes nothing new");
}

/// [`cqe`] completing the WQE at `wqe_index`.
pub(crate) fn cqe_at(wr_id: u64, opcode: u8, status: u8, qpn: u32, wqe_index: u16) -> [u8; 32] {
    let mut b = cqe(wr_id, opcode, status, qpn, None);
    b[WQE_INDEX..WQE_INDEX + 2].copy_from_slice(&wqe_index.to_le_bytes());
    b
}

/// Polls the ring of `cq` until empty; returns (qpn, wr_id) of each completion.
fn drain(ring: &mut CqRing) -> Vec<(u32, u64)> {
    let mut wcs = [Wc::default(); 64];
    let n = ring.poll(&mut wcs);
    wcs[..n].iter().map(|w| (w.qpn, w.wr_id)).collect()
}

/// A QP reset or destroyed with CQEs still in its CQ: they are dropped, the other QPs'
/// stay, in order, across the ring's wrap, and entries the device writes afterwards are
/// still found. The old provider had no clean: the stale CQEs were polled and credited
/// to whatever QP had that number then.
#[test]
fn clean_drops_one_qps_cqes_and_keeps_the_rest_in_order() {
    let l = CqLayout::new(8).unwrap();
    let buf = PageBuf::new(l.buf_len).unwrap();
    // SAFETY: our own zeroed mapping of the layout's size, written only by `device_write_cqe`
    // and the ring.
    let mut ring = unsafe { CqRing::new(buf.as_ptr(), &l) };
    // Start at index 5 so that the entries wrap (8 entries).
    for i in 0..5 {
        device_write_cqe(&buf, l.log, i, &cqe(u64::from(i), 0, 0, 9, None));
    }
    assert_eq!(drain(&mut ring).len(), 5);
    let qpns = [1, 2, 1, 1, 2, 3, 1];
    for (k, &q) in qpns.iter().enumerate() {
        let i = 5 + k as u32;
        device_write_cqe(&buf, l.log, i, &cqe(100 + k as u64, 0, 0, q, None));
    }
    assert_eq!(ring.clean(1), 4);
    assert_eq!((ring.ci(), dbrec_ci(&buf, &l)), (9, 9), "published");
    assert_eq!(ring.clean(1), 0, "nothing left of QP 1");
    // The device goes on writing after the clean.
    device_write_cqe(&buf, l.log, 12, &cqe(200, 0, 0, 1, None));
    assert_eq!(
        drain(&mut ring),
        [(2, 101), (2, 104), (3, 105), (1, 200)],
        "the others in order, then the new one"
    );
    assert_eq!(ring.ci(), 13);
    // A clean of an empty ring, and of a full one (every entry of the pass).
    assert_eq!(ring.clean(2), 0);
    for i in 13..21 {
        device_write_cqe(&buf, l.log, i, &cqe(u64::from(i), 0, 0, i % 2, None));
    }
    assert_eq!(ring.clean(0), 4);
    let left = drain(&mut ring);
    assert_eq!(left, [(1, 13), (1, 15), (1, 17), (1, 19)]);
    assert_eq!(ring.ci(), 21);
}

#[test]
fn offsets_come_from_the_bindings() {
    assert_eq!((WR_ID, BYTE_LEN, IMM_DATA, QPN, SRC_QP), (0, 8, 12, 16, 20));
    assert_eq!(
        (OPCODE, STATUS, VENDOR_ERR, FLAGS, WQE_INDEX, OWNER_OFFSET),
        (24, 25, 26, 27, 28, 31)
    );
}

/// Plays the device's RESIZE_CQ from the ring at `old` (layout `lo`) to the zeroed ring at
/// `new` (layout `ln`): the CQEs from the consumer index in the old record to `pi` go to the
/// slots their indices have in the new ring, with the owner bit of their pass there; every
/// other slot gets the owner bit that is not valid for the next index the device writes to
/// it; the new record gets the consumer index.
fn device_resize(old: &PageBuf, lo: &CqLayout, pi: u32, new: &PageBuf, ln: &CqLayout) {
    let ci = dbrec_ci(old, lo);
    let pending = pi.wrapping_sub(ci);
    assert!(pending <= 1 << ln.log, "the device refuses this (EINVAL)");
    for k in 0..pending {
        let i = ci.wrapping_add(k);
        let src = ((i & ((1 << lo.log) - 1)) as usize) * CQE_SIZE;
        let mut body = [0u8; 32];
        // SAFETY: inside the test's own mapping, which the consumer does not touch meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(old.as_ptr().add(src), body.as_mut_ptr(), 32) };
        device_write_cqe(new, ln.log, i, &body);
    }
    for k in pending..1 << ln.log {
        let i = ci.wrapping_add(k);
        let slot = ((i & ((1 << ln.log) - 1)) as usize) * CQE_SIZE;
        let stale = CqRing::owner_for(i, ln.log) ^ 1;
        // SAFETY: inside the test's own mapping, which the consumer does not touch meanwhile.
        unsafe { std::ptr::write_volatile(new.as_ptr().add(slot + OWNER_OFFSET), stale) };
    }
    // SAFETY: inside the test's own mapping; the record is 4-aligned.
    unsafe { std::ptr::write_volatile(new.as_ptr().add(ln.dbrec_offset).cast::<u32>(), ci) };
}

/// [`CqConsumer::move_to`] after a RESIZE_CQ: the completions not polled stay, in order, in a
/// smaller ring and then a larger one, whatever the passes (the indices go on, and the owner
/// bit of an index differs between the rings), and the rounds after each move are found.
#[test]
fn move_to_keeps_the_order_across_resizes() {
    let wr = |i: u32| cqe(u64::from(i) + 1000, 0, 0, 9, None);
    let polled = |c: &mut CqConsumer, n: usize| -> Vec<u64> {
        let mut wcs = vec![Wc::default(); n];
        let got = c.poll(&mut wcs);
        wcs[..got].iter().map(|w| w.wr_id - 1000).collect()
    };
    let l8 = CqLayout::new(8).unwrap();
    let a = PageBuf::new(l8.buf_len).unwrap();
    // SAFETY: our own zeroed mapping of the layout's size, written only by the test as the
    // device and by the consumer; it outlives the consumer's use of it (moved off below).
    let mut c = unsafe { CqConsumer::new(a.as_ptr(), &l8) };
    // 11 rounds (the ring is in its second pass), then 6 more of which 2 are polled.
    for i in 0..11 {
        device_write_cqe(&a, l8.log, i, &wr(i));
        assert_eq!(polled(&mut c, 64), [u64::from(i)]);
    }
    for i in 11..17 {
        device_write_cqe(&a, l8.log, i, &wr(i));
    }
    assert_eq!(polled(&mut c, 2), [11, 12]);

    // Smaller: 4 entries hold the 4 pending (13..17).
    let l4 = CqLayout::new(4).unwrap();
    let b = PageBuf::new(l4.buf_len).unwrap();
    device_resize(&a, &l8, 17, &b, &l4);
    // SAFETY: `b` is initialised as RESIZE_CQ does; the test writes `a` no more.
    unsafe { c.move_to(b.as_ptr(), &l4) };
    assert_eq!((c.entries(), c.ci()), (4, 13));
    assert_eq!(polled(&mut c, 1), [13]);
    assert_eq!(dbrec_ci(&b, &l4), 14, "published in the new ring");
    // The device goes on at 17 in the new ring.
    device_write_cqe(&b, l4.log, 17, &wr(17));
    assert_eq!(polled(&mut c, 64), [14, 15, 16, 17]);
    assert_eq!(polled(&mut c, 64), [], "later passes are not valid yet");
    // Many rounds through it.
    for i in 18..60 {
        device_write_cqe(&b, l4.log, i, &wr(i));
        assert_eq!(polled(&mut c, 64), [u64::from(i)]);
    }

    // Larger, with 3 pending (60..63).
    for i in 60..63 {
        device_write_cqe(&b, l4.log, i, &wr(i));
    }
    let l32 = CqLayout::new(32).unwrap();
    let d = PageBuf::new(l32.buf_len).unwrap();
    device_resize(&b, &l4, 63, &d, &l32);
    // SAFETY: as above, for `d`.
    unsafe { c.move_to(d.as_ptr(), &l32) };
    assert_eq!(c.entries(), 32);
    // The device fills it (the 3 moved and 29 new), then goes on as it is polled.
    for i in 63..92 {
        device_write_cqe(&d, l32.log, i, &wr(i));
    }
    assert_eq!(polled(&mut c, 64), (60..92).collect::<Vec<_>>());
    for i in 92..200 {
        device_write_cqe(&d, l32.log, i, &wr(i));
        assert_eq!(polled(&mut c, 64), [u64::from(i)]);
    }
    assert_eq!((c.ci(), dbrec_ci(&d, &l32)), (200, 200));
}

/// A failed resize leaves the CQ as it was: on a context without a device the command fails
/// (`ENOTTY`), and the completions are still polled from the first ring, in order.
#[test]
fn failed_resize_changes_nothing() {
    let dev = crate::qp::tests::FakeDevice::new("cq-resize");
    let mut cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
    let l8 = CqLayout::new(8).unwrap();
    for i in 0..3 {
        device_write_cqe(cq.ring_ptr(), l8.log, i, &cqe(u64::from(i), 0, 0, 9, None));
    }
    let mut wcs = [Wc::default(); 8];
    assert_eq!(cq.poll(&mut wcs[..1]), 1);
    let err = cq.resize(64).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Ioctl {
                op: "RESIZE_CQ",
                source: Errno::ENOTTY
            }
        ),
        "{err:?}"
    );
    assert!(cq.resize(1 << 20).is_err(), "past QHCA_CQ_MAX_LOG");
    assert_eq!((cq.entries(), cq.ci()), (8, 1));
    assert_eq!(cq.poll(&mut wcs), 2);
    assert_eq!((wcs[0].wr_id, wcs[1].wr_id), (1, 2));
}
