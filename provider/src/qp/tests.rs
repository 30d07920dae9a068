// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Host tests of `qp`: no device; the tests play it (an ordinary file stands in for the doorbell
//! page, and they write CQEs as the device would).

use super::*;
use crate::{DbType, DbWord};

#[test]
fn attr_mask_follows_the_fields_set() {
    let a = QpAttr::default().to_raw();
    assert_eq!(a.mask, 0);
    let a = QpAttr {
        state: Some(QpState::Rtr),
        dest_qpn: Some(0x12_3456),
        rq_psn: Some(0xab_cdef),
        path_mtu: Some(10),
        min_rnr_timer: Some(12),
        ..QpAttr::default()
    }
    .to_raw();
    assert_eq!(
        a.mask,
        QHCA_QP_ATTR_STATE
            | QHCA_QP_ATTR_DEST_QPN
            | QHCA_QP_ATTR_RQ_PSN
            | QHCA_QP_ATTR_PATH_MTU
            | QHCA_QP_ATTR_MIN_RNR_TIMER
    );
    assert_eq!(
        (a.state, a.dest_qpn, a.rq_psn, a.path_mtu, a.min_rnr_timer),
        (2, 0x12_3456, 0xab_cdef, 10, 12)
    );
    assert_eq!(
        (a.max_rd_atomic, a.max_dest_rd_atomic, a.qkey, a.av.dgid),
        (0, 0, 0, [0; 16])
    );
    let all = QpAttr {
        state: Some(QpState::Err),
        access: Some(Access::ALL),
        dest_qpn: Some(1),
        rq_psn: Some(1),
        sq_psn: Some(1),
        path_mtu: Some(12),
        timeout: Some(1),
        retry_cnt: Some(1),
        rnr_retry: Some(1),
        min_rnr_timer: Some(1),
        max_rd_atomic: Some(3),
        max_dest_rd_atomic: Some(4),
        qkey: Some(5),
        av: Some(AhAttr {
            flow_label: 0x1_2345,
            ..AhAttr::new(crate::Gid::from_ipv4([10, 0, 0, 2].into())).from_index(3)
        }),
    }
    .to_raw();
    assert_eq!(all.mask, qhca_uapi::QHCA_QP_ATTR_ALL);
    assert_eq!(
        (
            all.av.sgid_index,
            all.av.hop_limit,
            all.av.port_num,
            all.av.flow_label
        ),
        (3, 64, 1, 0x1_2345)
    );
    assert_eq!(all.av.dgid[10..], [0xff, 0xff, 10, 0, 0, 2]);
    assert_eq!((all.max_rd_atomic, all.max_dest_rd_atomic), (3, 4));
    assert_eq!((all.state, all.access), (6, 0xf));
    let info = QpInfo::from_raw(&all);
    assert_eq!(info.state, QpState::Err);
    assert_eq!(info.access, Access::ALL);
    assert_eq!((info.max_rd_atomic, info.max_dest_rd_atomic), (3, 4));
    assert_eq!((all.qkey, info.qkey), (5, 5));
    assert_eq!(info.av.dgid.to_string(), "::ffff:10.0.0.2");
    assert_eq!((info.av.sgid_index, info.av.flow_label), (3, 0x1_2345));
}

/// connect() sets the responder resources at INIT → RTR and the initiator depth at RTR →
/// RTS, the only transitions the device takes them at; 16 of each unless asked.
#[test]
fn connect_sets_the_rd_atomic_depths() {
    let me = ConnInfo {
        qpn: 0x42,
        psn: 1,
        ..ConnInfo::default()
    };
    let peer = ConnInfo {
        qpn: 0x43,
        psn: 2,
        ..ConnInfo::default()
    };
    let o = ConnOpts::default();
    assert_eq!((o.max_rd_atomic, o.max_dest_rd_atomic), (16, 16));
    let o = ConnOpts {
        max_rd_atomic: 3,
        max_dest_rd_atomic: 5,
        ..o
    };
    let [init, rtr, rts] = connect_attrs(&me, &peer, &o).map(|a| a.to_raw());
    assert_eq!(
        init.mask & (QHCA_QP_ATTR_MAX_RD_ATOMIC | QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC),
        0
    );
    assert_eq!(rtr.mask & QHCA_QP_ATTR_MAX_RD_ATOMIC, 0);
    assert_ne!(rtr.mask & QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC, 0);
    assert_eq!(
        (rtr.dest_qpn, rtr.rq_psn, rtr.max_dest_rd_atomic),
        (0x43, 2, 5)
    );
    assert_eq!(rts.mask & QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC, 0);
    assert_ne!(rts.mask & QHCA_QP_ATTR_MAX_RD_ATOMIC, 0);
    assert_eq!((rts.sq_psn, rts.max_rd_atomic), (1, 3));
    // Records without GIDs: no address vector (the port's GID 0, as before the table).
    assert_eq!(rtr.mask & QHCA_QP_ATTR_AV, 0);
}

/// Records that name GIDs make INIT → RTR carry the address vector: to the peer's GID, from
/// our entry; connect() refuses a pair where only one names a GID.
#[test]
fn connect_sets_the_address_vector_from_the_records_gids() {
    let ours = crate::Gid::from_ipv4([10, 7, 0, 3].into());
    let theirs = crate::Gid::from_ipv4([10, 7, 0, 4].into());
    let me = ConnInfo {
        qpn: 0x42,
        psn: 1,
        ..ConnInfo::default()
    }
    .with_gid(ours, 2);
    let peer = ConnInfo {
        qpn: 0x43,
        psn: 2,
        ..ConnInfo::default()
    }
    .with_gid(theirs, 5);
    let [init, rtr, rts] = connect_attrs(&me, &peer, &ConnOpts::default()).map(|a| a.to_raw());
    assert_eq!((init.mask | rts.mask) & QHCA_QP_ATTR_AV, 0);
    assert_ne!(rtr.mask & QHCA_QP_ATTR_AV, 0);
    assert_eq!((rtr.av.dgid, rtr.av.sgid_index), (theirs.raw, 2));
    assert_eq!((rtr.av.port_num, rtr.av.hop_limit), (1, 64));

    let f = FakeDevice::new("connect-gid");
    let pd = crate::Pd::fake(&f.ctx, 1);
    let cq = crate::Cq::fake(&f.ctx, 8, 1).unwrap();
    let qp = Qp::fake(&pd, &cq, &cq, &QpCaps::default(), 0x42).unwrap();
    let plain = ConnInfo {
        gid: crate::Gid::default(),
        ..peer
    };
    for (l, r) in [
        (&me, &plain),
        (
            &ConnInfo {
                gid: crate::Gid::default(),
                ..me
            },
            &peer,
        ),
    ] {
        let e = qp.connect(l, r, &ConnOpts::default()).unwrap_err();
        assert!(e.to_string().contains("both or neither"), "{e}");
    }
}

/// A context on an ordinary 4 KiB file: its "doorbell page" is the file, so the test reads
/// the last doorbell word back from it; ioctls on it fail (ENOTTY), which only makes the
/// objects' drops leak their rings.
pub(crate) struct FakeDevice {
    path: std::path::PathBuf,
    pub(crate) ctx: Arc<Context>,
}

impl FakeDevice {
    pub(crate) fn new(tag: &str) -> FakeDevice {
        let path = std::env::temp_dir().join(format!("qhca-fake-{tag}-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(4096).unwrap();
        let ctx = Arc::new(Context::open_unchecked(&path).unwrap());
        FakeDevice { path, ctx }
    }

    pub(crate) fn last_doorbell(&self) -> DbWord {
        let b = std::fs::read(&self.path).unwrap();
        DbWord::from_raw(u64::from_le_bytes(b[0..8].try_into().unwrap()))
    }
}

impl Drop for FakeDevice {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

pub(crate) fn bytes(buf: &PageBuf, off: usize, len: usize) -> Vec<u8> {
    // SAFETY: inside the test's own mapping, which nothing else writes now.
    unsafe { std::slice::from_raw_parts(buf.as_ptr().add(off), len) }.to_vec()
}

#[test]
fn post_writes_slots_rings_once_and_polling_frees_them() {
    use crate::cq::tests::{cqe_at, device_write_cqe};
    use crate::wqe::{Sge, WrOp};
    use crate::{RecvWr, SendFlags, SendWr};

    let dev = FakeDevice::new("post");
    let pd = Pd::fake(&dev.ctx, 3);
    let mut cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 2,
        max_sge: 1,
        max_inline: 16,
    };
    let mut qp = Qp::fake(&pd, &cq, &cq, &caps, 0x42).unwrap();
    let l = *qp.layout();
    assert_eq!((l.sq_depth(), l.sq_stride(), l.rq_offset), (4, 128, 4096));

    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 0x77,
    }];
    let op = WrOp::Write {
        raddr: 0x2000,
        rkey: 0x88,
    };
    let wrs = [
        SendWr::new(10, op, &sge).with_flags(SendFlags::NONE),
        SendWr::inline(11, WrOp::Send, b"hi"),
        SendWr::new(12, op, &sge).with_flags(SendFlags::NONE),
    ];
    qp.post_send(&wrs).unwrap();
    // One doorbell for the batch, naming the SQ and producer index 3.
    assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Sq, 0x42, 3));
    // Slot 1 holds the inline SEND, byte for byte.
    let slot1 = bytes(qp.ring(), 128, 66);
    assert_eq!(slot1[0..8], 11u64.to_le_bytes());
    assert_eq!(slot1[8..12], [2, 0b101, 0, 0]);
    assert_eq!(slot1[16..20], 2u32.to_le_bytes());
    assert_eq!(slot1[64..66], *b"hi");
    // Slot 2's SGE.
    assert_eq!(
        bytes(qp.ring(), 256 + 64, 16)[12..16],
        0x77u32.to_le_bytes()
    );
    assert_eq!(qp.send_outstanding(), 3);

    // Two more fit; the third is refused with its index.
    let more = [wrs[0], wrs[0], wrs[0]];
    let e = qp.post_send(&more).unwrap_err();
    assert_eq!(e.index, 1);
    assert_eq!(
        e.reason,
        PostReason::QueueFull {
            outstanding: 4,
            depth: 4
        }
    );
    assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Sq, 0x42, 4));

    // The device completes the signaled SEND (slot 1): slots 0 and 1 are free again.
    device_write_cqe(cq.ring_ptr(), 3, 0, &cqe_at(11, 0x00, 0, 0x42, 1));
    let mut wc = [crate::Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].qpn), (11, 0x42));
    assert_eq!(qp.send_outstanding(), 2);
    // A flush of slot 2 (unsignaled), then of slot 3.
    device_write_cqe(cq.ring_ptr(), 3, 1, &cqe_at(12, 0x01, 5, 0x42, 2));
    device_write_cqe(cq.ring_ptr(), 3, 2, &cqe_at(10, 0x01, 5, 0x42, 3));
    assert_eq!(cq.poll(&mut wc), 2);
    assert_eq!(qp.send_outstanding(), 0);
    // The consumer index was published in the doorbell record.
    assert_eq!(bytes(cq.ring_ptr(), 32 << 3, 4), 3u32.to_le_bytes());

    // Receives: the RQ at its page, its own doorbell; a receive CQE frees one slot.
    let rsge = [Sge {
        addr: 0x3000,
        length: 64,
        lkey: 5,
    }];
    qp.post_recv(&[
        RecvWr {
            wr_id: 20,
            sges: &rsge,
        },
        RecvWr {
            wr_id: 21,
            sges: &rsge,
        },
    ])
    .unwrap();
    assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Rq, 0x42, 2));
    assert_eq!(bytes(qp.ring(), 4096 + 32, 12)[0..8], 21u64.to_le_bytes());
    assert!(qp
        .post_recv(&[RecvWr {
            wr_id: 22,
            sges: &rsge
        }])
        .is_err());
    device_write_cqe(cq.ring_ptr(), 3, 3, &cqe_at(20, 0x80, 0, 0x42, 0));
    assert_eq!(cq.poll(&mut wc), 1);
    assert!(wc[0].is_recv);
    assert_eq!(qp.recv_outstanding(), 1);

    // Arm names the CQ and the consumer index.
    cq.arm();
    assert_eq!(dev.last_doorbell(), DbWord::new(DbType::CqArm, 9, 4));
    assert!(cq.wait(None).is_err(), "no eventfd");
}

#[test]
fn states_round_trip() {
    for s in [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Err,
    ] {
        assert_eq!(QpState::from_raw(s.raw()), s);
    }
    assert_eq!(QpState::from_raw(4), QpState::Unknown(4));
    assert_eq!(QpState::Unknown(5).raw(), 5);
}

/// What a move to RESET does after the driver accepted it (the fake device refuses every
/// ioctl, so the test does those steps itself): the QP's unpolled CQEs are gone from a CQ
/// it shares with another QP, the other QP's stay, and a stale CQE cannot free a slot of the
/// requests posted after the reset.
#[test]
fn reset_cleans_the_cq_and_stale_cqes_free_nothing() {
    use crate::cq::tests::{cqe_at, device_write_cqe};
    use crate::{SendWr, WrOp};

    let dev = FakeDevice::new("reset");
    let pd = Pd::fake(&dev.ctx, 3);
    let mut cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 2,
        max_sge: 1,
        max_inline: 16,
    };
    let mut qp = Qp::fake(&pd, &cq, &cq, &caps, 0x42).unwrap();
    let mut other = Qp::fake(&pd, &cq, &cq, &caps, 0x43).unwrap();
    let send = |id| SendWr::inline(id, WrOp::Send, b"x");
    qp.post_send(&[send(1), send(2), send(3)]).unwrap();
    other.post_send(&[send(7)]).unwrap();
    device_write_cqe(cq.ring_ptr(), 3, 0, &cqe_at(1, 0, 0, 0x42, 0));
    device_write_cqe(cq.ring_ptr(), 3, 1, &cqe_at(7, 0, 0, 0x43, 0));
    device_write_cqe(cq.ring_ptr(), 3, 2, &cqe_at(3, 0, 0, 0x42, 2));
    // RESET.
    qp.clean_cqs();
    qp.queues.shared().reset();
    assert_eq!(qp.send_outstanding(), 0);
    qp.post_send(&[send(10), send(11)]).unwrap();
    let mut wc = [crate::Wc::default(); 8];
    assert_eq!(cq.poll(&mut wc), 1, "only the other QP's CQE is left");
    assert_eq!((wc[0].qpn, wc[0].wr_id), (0x43, 7));
    assert_eq!(other.send_outstanding(), 0);
    assert_eq!(qp.send_outstanding(), 2, "nothing stale was credited");
    // A CQE for an index not outstanding (a stale or forged one) frees nothing.
    device_write_cqe(cq.ring_ptr(), 3, 3, &cqe_at(99, 0, 0, 0x42, 5));
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(qp.send_outstanding(), 2);
    assert_eq!(cq.stray_cqes(), 1);
    device_write_cqe(cq.ring_ptr(), 3, 4, &cqe_at(11, 0, 0, 0x42, 1));
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(qp.send_outstanding(), 0);
    assert_eq!(cq.stray_cqes(), 1);
}

#[test]
fn connect_takes_the_records_and_checks_them() {
    let dev = FakeDevice::new("connect");
    let pd = Pd::fake(&dev.ctx, 3);
    let cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
    let qp = Qp::fake(&pd, &cq, &cq, &QpCaps::default(), 0x42).unwrap();
    let me = qp.conn_info(0x1234);
    assert_eq!((me.qpn, me.psn, me.rkey), (0x42, 0x1234, 0));
    let peer = ConnInfo {
        qpn: 0x43,
        psn: 5,
        ..ConnInfo::default()
    };
    let o = ConnOpts::default();
    // The records the wrong way round: refused before the driver is asked.
    let e = qp.connect(&peer, &me, &o).unwrap_err();
    assert!(e.to_string().contains("local record of QP 0x43"), "{e}");
    let wide = ConnInfo {
        psn: 1 << 24,
        ..peer
    };
    assert!(matches!(
        qp.connect(&me, &wide, &o),
        Err(Error::Invalid { .. })
    ));
    // The right way round reaches the driver (which the fake device is not).
    assert!(matches!(
        qp.connect(&me, &peer, &o),
        Err(Error::Ioctl {
            op: "MODIFY_QP",
            ..
        })
    ));
}

/// rnr_retry 7 retries for ever: a forgotten receive hung the requester silently.
#[test]
fn default_rnr_retry_is_finite() {
    let o = ConnOpts::default();
    assert!(o.rnr_retry < 7, "{o:?}");
    assert!(o.retry_cnt <= 7 && o.path_mtu == 12);
}

#[test]
fn posting_on_a_dead_context_writes_nothing() {
    let dev = FakeDevice::new("dead");
    let pd = Pd::fake(&dev.ctx, 3);
    let cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
    let mut qp = Qp::fake(&pd, &cq, &cq, &QpCaps::default(), 0x42).unwrap();
    dev.ctx.dead_if_err(libc::POLLERR, "test").unwrap_err();
    let e = qp
        .post_send(&[crate::SendWr::inline(1, crate::WrOp::Send, b"x")])
        .unwrap_err();
    assert_eq!((e.index, e.reason), (0, PostReason::Disassociated));
    assert_eq!(e.errno(), crate::Errno::ENODEV);
    assert!(qp
        .post_recv(&[crate::RecvWr {
            wr_id: 1,
            sges: &[]
        }])
        .is_err());
    assert_eq!((qp.send_outstanding(), qp.recv_outstanding()), (0, 0));
    assert_eq!(dev.last_doorbell().raw(), 0, "no doorbell rung");
}

/// A spin-wait on a CQ ends: at its timeout while the device is there, and within a few
/// milliseconds once the context is disassociated (the old tools spun on `poll` for ever).
#[test]
fn poll_wait_times_out_and_stops_on_a_dead_context() {
    use std::time::{Duration, Instant};
    let dev = FakeDevice::new("pollwait");
    let mut cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
    let mut wc = [crate::Wc::default(); 2];
    let t = Instant::now();
    assert_eq!(
        cq.poll_wait(&mut wc, Some(Duration::from_millis(30)))
            .unwrap(),
        0
    );
    assert!(t.elapsed() >= Duration::from_millis(30));
    dev.ctx.dead_if_err(libc::POLLERR, "test").unwrap_err();
    let t = Instant::now();
    assert!(matches!(
        cq.poll_wait(&mut wc, None),
        Err(Error::Disassociated { .. })
    ));
    assert!(t.elapsed() < Duration::from_secs(1));
}

/// UD: the type goes to CREATE_QP, the Q_Key to MODIFY_QP (QHCA_QP_ATTR_QKEY); ud_ready's
/// three steps carry only what the device accepts of a UD QP.
#[test]
fn ud_attrs_and_transitions() {
    assert_eq!((QpType::Rc.raw(), QpType::Ud.raw()), (0, 1));
    assert_eq!(QpType::default(), QpType::Rc);
    let [init, rtr, rts] = ud::ud_ready_attrs(0x1111_1111, 0x12_3456).map(|a| a.to_raw());
    assert_eq!(init.mask, QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_QKEY);
    assert_eq!((init.state, init.qkey), (1, 0x1111_1111));
    assert_eq!(rtr.mask, QHCA_QP_ATTR_STATE);
    assert_eq!(rtr.state, 2);
    assert_eq!(rts.mask, QHCA_QP_ATTR_STATE | QHCA_QP_ATTR_SQ_PSN);
    assert_eq!((rts.state, rts.sq_psn, rts.qkey), (3, 0x12_3456, 0));
    let info = QpInfo::from_raw(&init);
    assert_eq!((info.qkey, info.qp_type), (0x1111_1111, None));

    let dev = FakeDevice::new("ud");
    let pd = Pd::fake(&dev.ctx, 3);
    let cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
    let rc = Qp::fake(&pd, &cq, &cq, &QpCaps::default(), 0x42).unwrap();
    let ud = Qp::fake_typed(&pd, &cq, &cq, &QpCaps::default(), 0x43, QpType::Ud).unwrap();
    assert_eq!((rc.qp_type(), ud.qp_type()), (QpType::Rc, QpType::Ud));
    // UD transitions on an RC QP, connect on a UD QP: refused before the driver is asked.
    for r in [
        rc.ud_ready(1),
        rc.to_init_ud(1),
        rc.to_rtr_ud(),
        rc.to_rts_ud(0),
    ] {
        assert!(matches!(r, Err(Error::Invalid { .. })), "{r:?}");
    }
    let me = ud.conn_info(0);
    let e = ud.connect(&me, &me, &ConnOpts::default()).unwrap_err();
    assert!(e.to_string().contains("UD QP 0x43"), "{e}");
    assert!(matches!(ud.to_rts_ud(1 << 24), Err(Error::Invalid { .. })));
    // The right ones reach the driver (which the fake device is not).
    assert!(matches!(
        ud.ud_ready(7),
        Err(Error::Ioctl {
            op: "MODIFY_QP",
            ..
        })
    ));
}

#[test]
fn ud_post_writes_the_ud_segment_and_checks_the_type() {
    use crate::{SendWr, UdDest, WrOp};
    let dev = FakeDevice::new("udpost");
    let pd = Pd::fake(&dev.ctx, 3);
    let cq = Cq::fake(&dev.ctx, 9, 8).unwrap();
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 2,
        max_sge: 1,
        max_inline: 16,
    };
    let mut ud = Qp::fake_typed(&pd, &cq, &cq, &caps, 0x43, QpType::Ud).unwrap();
    let mut rc = Qp::fake(&pd, &cq, &cq, &caps, 0x42).unwrap();
    let dest = UdDest {
        ah: 0x2001,
        remote_qpn: 0x401,
        remote_qkey: 0x11,
    };
    let to = SendWr::inline(1, WrOp::Send, b"hi").to_ud(dest);
    let no_dest = SendWr::inline(2, WrOp::Send, b"hi");
    // The UD QP takes the first, refuses the second (after posting the first).
    let e = ud.post_send(&[to, no_dest]).unwrap_err();
    assert_eq!((e.index, e.reason), (1, PostReason::NoUdDest));
    assert_eq!(dev.last_doorbell(), DbWord::new(DbType::Sq, 0x43, 1));
    let slot0 = bytes(ud.ring(), 0, 66);
    assert_eq!(slot0[32..36], 0x2001u32.to_le_bytes());
    assert_eq!(slot0[36..40], 0x401u32.to_le_bytes());
    assert_eq!(slot0[40..44], 0x11u32.to_le_bytes());
    assert_eq!(slot0[64..66], *b"hi");
    // The RC QP refuses a destination.
    let e = rc.post_send(&[to]).unwrap_err();
    assert_eq!((e.index, e.reason), (0, PostReason::UdDestOnRc));
    assert_eq!(rc.send_outstanding(), 0);
}
