// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Host tests of the WQE encoders: every byte as the header lays it out.

use super::*;
use crate::layout::QpCaps;

fn layout() -> QpLayout {
    QpLayout::new(&QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_sge: 2,
        max_inline: 100,
    })
    .unwrap()
}

const SGE_A: Sge = Sge {
    addr: 0x1122_3344_5566_7788,
    length: 0x0aab_bccd,
    lkey: 0xddee_ff00,
};
const SGE_B: Sge = Sge {
    addr: 0x1000,
    length: 8,
    lkey: 0x0102_0304,
};

/// The bytes of a WQE as the header describes them, spelled out by hand.
#[allow(clippy::too_many_arguments)]
fn expect_hdr(
    wr_id: u64,
    op: u8,
    flags: u8,
    nsge: u8,
    imm: u32,
    inl: u32,
    raddr: u64,
    rkey: u32,
    swap_add: u64,
    cmp: u64,
) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(wr_id.to_le_bytes());
    v.extend([op, flags, nsge, 0]);
    v.extend(imm.to_le_bytes());
    v.extend(inl.to_le_bytes());
    v.extend([0; 12]);
    v.extend(raddr.to_le_bytes());
    v.extend(rkey.to_le_bytes());
    v.extend([0; 4]);
    v.extend(swap_add.to_le_bytes());
    v.extend(cmp.to_le_bytes());
    assert_eq!(v.len(), 64);
    v
}

/// [`check_send_wr`] for an RC QP, as most tests post.
fn check_rc(wr: &SendWr<'_>, l: &QpLayout) -> Result<(), PostReason> {
    check_send_wr(wr, l, QpType::Rc)
}

fn sge_bytes(s: &Sge) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(s.addr.to_le_bytes());
    v.extend(s.length.to_le_bytes());
    v.extend(s.lkey.to_le_bytes());
    v
}

#[test]
fn send_with_two_sges_byte_for_byte() {
    let sges = [SGE_A, SGE_B];
    let wr = SendWr::new(0xdead_beef_0000_0001, WrOp::SendImm(0x0a0b_0c0d), &sges)
        .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED);
    check_rc(&wr, &layout()).unwrap();
    let mut slot = vec![0xa5u8; 128];
    encode_send_wqe(&mut slot, &wr);
    let mut want = expect_hdr(
        0xdead_beef_0000_0001,
        3,
        0b011,
        2,
        0x0a0b_0c0d,
        0,
        0,
        0,
        0,
        0,
    );
    want.extend(sge_bytes(&SGE_A));
    want.extend(sge_bytes(&SGE_B));
    assert_eq!(slot[..96], want[..]);
    assert!(
        slot[96..].iter().all(|&b| b == 0xa5),
        "past the data untouched"
    );
}

#[test]
fn every_opcode_encodes_its_segments() {
    let one = [SGE_B];
    let cases: [(WrOp, u8, u32, u64, u32, u64, u64); 7] = [
        (WrOp::Send, 2, 0, 0, 0, 0, 0),
        (WrOp::SendImm(7), 3, 7, 0, 0, 0, 0),
        (
            WrOp::Write {
                raddr: 0xabc,
                rkey: 5,
            },
            0,
            0,
            0xabc,
            5,
            0,
            0,
        ),
        (
            WrOp::WriteImm {
                raddr: 0xabc,
                rkey: 5,
                imm: 9,
            },
            1,
            9,
            0xabc,
            5,
            0,
            0,
        ),
        (
            WrOp::Read {
                raddr: 0x10,
                rkey: 6,
            },
            4,
            0,
            0x10,
            6,
            0,
            0,
        ),
        (
            WrOp::CmpSwp {
                raddr: 0x18,
                rkey: 7,
                compare: 11,
                swap: 22,
            },
            5,
            0,
            0x18,
            7,
            22,
            11,
        ),
        (
            WrOp::FetchAdd {
                raddr: 0x20,
                rkey: 8,
                add: 33,
            },
            6,
            0,
            0x20,
            8,
            33,
            0,
        ),
    ];
    for (op, code, imm, raddr, rkey, sa, cmp) in cases {
        let wr = SendWr::new(42, op, &one).with_flags(SendFlags::NONE);
        check_rc(&wr, &layout()).unwrap();
        let mut slot = vec![0xffu8; 128];
        encode_send_wqe(&mut slot, &wr);
        let mut want = expect_hdr(42, code, 0, 1, imm, 0, raddr, rkey, sa, cmp);
        want.extend(sge_bytes(&SGE_B));
        assert_eq!(slot[..80], want[..], "{op:?}");
    }
}

#[test]
fn window_operations_byte_for_byte() {
    // SEND_WITH_INV: the key where the immediate goes; a SEND otherwise.
    let one = [SGE_B];
    let wr = SendWr::new(3, WrOp::SendInv { rkey: 0x8000_1205 }, &one);
    check_rc(&wr, &layout()).unwrap();
    let mut slot = vec![0xffu8; 128];
    encode_send_wqe(&mut slot, &wr);
    let mut want = expect_hdr(3, 9, 1, 1, 0x8000_1205, 0, 0, 0, 0, 0);
    want.extend(sge_bytes(&SGE_B));
    assert_eq!(slot[..80], want[..]);

    // LOCAL_INV: the key in imm_data, nothing else.
    let wr = SendWr::new(4, WrOp::LocalInv { rkey: 0x8000_1206 }, &[]);
    check_rc(&wr, &layout()).unwrap();
    encode_send_wqe(&mut slot, &wr);
    assert_eq!(
        slot[..64],
        expect_hdr(4, 7, 1, 0, 0x8000_1206, 0, 0, 0, 0, 0)[..]
    );

    // BIND_MW: struct qhca_wqe_bind in place of the remote-address and atomic segments.
    let bind = MwBind {
        mw_key: 0x8000_1206,
        new_key: 0x8000_1207,
        mr_key: 0x0000_0301,
        addr: 0x1122_3344_5566_7788,
        length: 0x99aa,
        access: 2,
    };
    let wr = SendWr::new(5, WrOp::BindMw(bind), &[]);
    check_rc(&wr, &layout()).unwrap();
    encode_send_wqe(&mut slot, &wr);
    let mut want = expect_hdr(5, 8, 1, 0, 0, 0, 0, 0, 0, 0)[..32].to_vec();
    want.extend(0x1122_3344_5566_7788u64.to_le_bytes());
    want.extend(0x99aau64.to_le_bytes());
    for w in [0x8000_1206u32, 0x8000_1207, 0x301, 2] {
        want.extend(w.to_le_bytes());
    }
    assert_eq!(slot[..64], want[..]);

    // Local operations carry no data.
    for op in [WrOp::BindMw(bind), WrOp::LocalInv { rkey: 1 }] {
        assert_eq!(
            check_rc(&SendWr::new(6, op, &one), &layout()),
            Err(PostReason::DataOnLocalOp)
        );
        assert_eq!(
            check_rc(&SendWr::inline(6, op, b"x"), &layout()),
            Err(PostReason::InlineNotAllowed)
        );
    }
}

#[test]
fn inline_write_byte_for_byte() {
    let data: Vec<u8> = (0..100).collect();
    let wr = SendWr::inline(
        1,
        WrOp::Write {
            raddr: 0x5000,
            rkey: 0x77,
        },
        &data,
    )
    .with_flags(SendFlags::FENCE | SendFlags::SIGNALED);
    check_rc(&wr, &layout()).unwrap();
    let mut slot = vec![0u8; 256];
    encode_send_wqe(&mut slot, &wr);
    let mut want = expect_hdr(1, 0, 0b1101, 0, 0, 100, 0x5000, 0x77, 0, 0);
    want.extend(&data);
    assert_eq!(slot[..164], want[..]);
    // The caller cannot smuggle INLINE in without data.
    let wr = SendWr::new(1, WrOp::Send, &[SGE_B]).with_flags(SendFlags::INLINE);
    encode_send_wqe(&mut slot, &wr);
    assert_eq!(slot[9], 0);
}

#[test]
fn checks_against_caps_and_atomic_rules() {
    let l = layout();
    let three = [SGE_B; 3];
    assert_eq!(
        check_rc(&SendWr::new(0, WrOp::Send, &three), &l),
        Err(PostReason::TooManySge {
            num_sge: 3,
            max_sge: 2
        })
    );
    let big = [0u8; 101];
    assert_eq!(
        check_rc(&SendWr::inline(0, WrOp::Send, &big), &l),
        Err(PostReason::InlineTooLong {
            len: 101,
            max_inline: 100
        })
    );
    assert_eq!(
        check_rc(
            &SendWr::inline(0, WrOp::Read { raddr: 0, rkey: 0 }, &big[..8]),
            &l
        ),
        Err(PostReason::InlineNotAllowed)
    );
    let mut both = SendWr::inline(0, WrOp::Send, &big[..8]);
    both.sges = &three[..1];
    assert_eq!(check_rc(&both, &l), Err(PostReason::InlineAndSge));
    let empty = [Sge { length: 0, ..SGE_B }];
    assert_eq!(
        check_rc(&SendWr::new(0, WrOp::Send, &empty), &l),
        Err(PostReason::EmptySge { sge: 0 })
    );
    let fa = |raddr, s: &[Sge]| {
        check_rc(
            &SendWr::new(
                0,
                WrOp::FetchAdd {
                    raddr,
                    rkey: 1,
                    add: 1,
                },
                s,
            ),
            &l,
        )
    };
    assert_eq!(fa(8, &[SGE_B]), Ok(()));
    assert_eq!(
        fa(4, &[SGE_B]),
        Err(PostReason::AtomicShape),
        "remote misaligned"
    );
    assert_eq!(
        fa(
            8,
            &[Sge {
                addr: 0x1004,
                ..SGE_B
            }]
        ),
        Err(PostReason::AtomicShape)
    );
    assert_eq!(
        fa(
            8,
            &[Sge {
                length: 16,
                ..SGE_B
            }]
        ),
        Err(PostReason::AtomicShape)
    );
    assert_eq!(fa(8, &[SGE_B, SGE_B]), Err(PostReason::AtomicShape));
    assert_eq!(fa(8, &[]), Err(PostReason::AtomicShape));
    let huge = [Sge {
        length: u32::MAX,
        ..SGE_B
    }; 1];
    assert_eq!(
        check_rc(&SendWr::new(0, WrOp::Send, &huge), &l),
        Err(PostReason::MessageTooLong {
            len: u64::from(u32::MAX)
        })
    );
}

#[test]
fn recv_wqe_byte_for_byte() {
    let sges = [SGE_A, SGE_B];
    let wr = RecvWr {
        wr_id: 0x0102_0304_0506_0708,
        sges: &sges,
    };
    check_recv_wr(&wr, layout().max_sge).unwrap();
    let mut slot = vec![0xeeu8; 64];
    encode_recv_wqe(&mut slot, &wr);
    let mut want = Vec::new();
    want.extend(0x0102_0304_0506_0708u64.to_le_bytes());
    want.extend(2u32.to_le_bytes());
    want.extend([0; 4]);
    want.extend(sge_bytes(&SGE_A));
    want.extend(sge_bytes(&SGE_B));
    assert_eq!(slot[..48], want[..]);
    assert!(slot[48..].iter().all(|&b| b == 0xee));
    let three = [SGE_B; 3];
    assert!(check_recv_wr(
        &RecvWr {
            wr_id: 0,
            sges: &three
        },
        layout().max_sge
    )
    .is_err());
}

const DEST: UdDest = UdDest {
    ah: 0x0000_1003,
    remote_qpn: 0x0042_0401,
    remote_qkey: 0x1122_3344,
};

/// A UD send: struct qhca_wqe_ud at offset 32 in place of the remote-address segment (ah,
/// remote_qpn, remote_qkey, rsvd), the atomic segment zero, the data at 64.
#[test]
fn ud_send_byte_for_byte() {
    let one = [SGE_B];
    let wr = SendWr::new(7, WrOp::SendImm(0xcafe), &one).to_ud(DEST);
    assert_eq!(wr.ud, Some(DEST));
    check_send_wr(&wr, &layout(), QpType::Ud).unwrap();
    let mut slot = vec![0xa5u8; 128];
    encode_send_wqe(&mut slot, &wr);
    let mut want = expect_hdr(7, 3, 1, 1, 0xcafe, 0, 0, 0, 0, 0)[..32].to_vec();
    want.extend(0x0000_1003u32.to_le_bytes());
    want.extend(0x0042_0401u32.to_le_bytes());
    want.extend(0x1122_3344u32.to_le_bytes());
    want.extend([0; 4]);
    want.extend([0; 16]);
    want.extend(sge_bytes(&SGE_B));
    assert_eq!(slot[..80], want[..]);
    assert!(slot[80..].iter().all(|&b| b == 0xa5));

    // Inline, with the QP's own Q_Key.
    let dest = UdDest {
        remote_qkey: crate::QKEY_CONTROLLED,
        ..DEST
    };
    let wr = SendWr::inline(8, WrOp::Send, b"datagram").to_ud(dest);
    check_send_wr(&wr, &layout(), QpType::Ud).unwrap();
    encode_send_wqe(&mut slot, &wr);
    assert_eq!(slot[8..12], [2, 0b101, 0, 0]);
    assert_eq!(slot[16..20], 8u32.to_le_bytes());
    assert_eq!(
        slot[UD_OFFSET + 8..UD_OFFSET + 12],
        0x8000_0000u32.to_le_bytes()
    );
    assert_eq!(slot[64..72], *b"datagram");

    // The same slot reused for an RC WRITE gets its raddr segment back, rsvd zero.
    let wr = SendWr::new(9, WrOp::Write { raddr: 5, rkey: 6 }, &one);
    encode_send_wqe(&mut slot, &wr);
    assert_eq!(slot[..64], expect_hdr(9, 0, 1, 1, 0, 0, 5, 6, 0, 0)[..]);
}

#[test]
fn ud_rules() {
    let l = layout();
    let one = [SGE_B];
    // A destination belongs on a UD QP, and a UD QP needs one.
    assert_eq!(
        check_send_wr(
            &SendWr::new(0, WrOp::Send, &one).to_ud(DEST),
            &l,
            QpType::Rc
        ),
        Err(PostReason::UdDestOnRc)
    );
    assert_eq!(
        check_send_wr(&SendWr::new(0, WrOp::Send, &one), &l, QpType::Ud),
        Err(PostReason::NoUdDest)
    );
    // SEND and SEND_WITH_IMM only.
    for op in [
        WrOp::Write { raddr: 0, rkey: 1 },
        WrOp::WriteImm {
            raddr: 0,
            rkey: 1,
            imm: 2,
        },
        WrOp::Read { raddr: 0, rkey: 1 },
        WrOp::FetchAdd {
            raddr: 0,
            rkey: 1,
            add: 1,
        },
        WrOp::SendInv { rkey: 3 },
        WrOp::LocalInv { rkey: 3 },
    ] {
        assert_eq!(
            check_send_wr(&SendWr::new(0, op, &one).to_ud(DEST), &l, QpType::Ud),
            Err(PostReason::UdOpcode),
            "{op:?}"
        );
    }
    // At most QHCA_UD_MAX_MSG bytes, over every SGE.
    let max = [
        Sge {
            length: 4000,
            ..SGE_B
        },
        Sge {
            length: 96,
            ..SGE_B
        },
    ];
    let wr = SendWr::new(0, WrOp::Send, &max).to_ud(DEST);
    assert_eq!(wr.data_len(), crate::UD_MAX_MSG as u64);
    check_send_wr(&wr, &l, QpType::Ud).unwrap();
    let over = [
        max[0],
        Sge {
            length: 97,
            ..SGE_B
        },
    ];
    assert_eq!(
        check_send_wr(
            &SendWr::new(0, WrOp::Send, &over).to_ud(DEST),
            &l,
            QpType::Ud
        ),
        Err(PostReason::DatagramTooLong { len: 4097 })
    );
    // An RC SEND of the same length is fine.
    check_rc(&SendWr::new(0, WrOp::Send, &over), &l).unwrap();
    let e = crate::PostError {
        index: 0,
        reason: PostReason::DatagramTooLong { len: 4097 },
    };
    assert!(e.to_string().contains("at most 4096"), "{e}");
}
