// SPDX-License-Identifier: GPL-2.0-only OR MIT

use qhca_uapi::db::*;
use qhca_uapi::*;

#[test]
fn encode_places_each_field() {
    let w = DbWord::new(DbType::Sq, 0x12_3456, 0xdead_beef);
    assert_eq!(w.raw(), 0xdead_beef_0112_3456);
    assert_eq!(
        DbWord::new(DbType::Rq, 1, 2).raw(),
        (2 << 32) | (2 << 24) | 1
    );
    assert_eq!(DbWord::new(DbType::CqArm, 0, 0).raw(), 3 << 24);
    assert_eq!(
        u64::from(DbWord::new(DbType::CqArm, 7, 9)),
        (9 << 32) | (3 << 24) | 7
    );
}

#[test]
fn round_trip() {
    for ty in [DbType::Sq, DbType::Rq, DbType::CqArm] {
        for qn in [0, 1, 0x80_0000, DB_QN_MASK] {
            for index in [0, 1, 0x7fff_ffff, u32::MAX] {
                let w = DbWord::new(ty, qn, index);
                assert_eq!(w.qn(), qn);
                assert_eq!(w.db_type(), Some(ty));
                assert_eq!(w.type_bits(), ty.raw());
                assert_eq!(w.index(), index);
                assert_eq!(w.reserved_bits(), 0);
                assert!(w.is_well_formed());
                assert_eq!(DbWord::from_raw(w.raw()), w);
            }
        }
    }
}

#[test]
fn queue_number_is_masked_to_24_bits() {
    let w = DbWord::new(DbType::Sq, 0xff12_3456, 5);
    assert_eq!(w.qn(), 0x12_3456);
    assert_eq!(
        w.db_type(),
        Some(DbType::Sq),
        "high qn bits must not leak into the type"
    );
    assert_eq!(
        w.reserved_bits(),
        0,
        "high qn bits must not leak into the reserved bits"
    );
    assert_eq!(w.index(), 5);
    assert_eq!(DbWord::try_new(DbType::Sq, 0x100_0000, 0), None);
    assert_eq!(
        DbWord::try_new(DbType::Sq, DB_QN_MASK, 0),
        Some(DbWord::new(DbType::Sq, DB_QN_MASK, 0))
    );
}

#[test]
fn decode_rejects_what_the_header_does_not_define() {
    // Reserved bits 31..28 set.
    let w = DbWord::from_raw(DbWord::new(DbType::Sq, 1, 1).raw() | (1 << 28));
    assert_eq!(w.db_type(), Some(DbType::Sq));
    assert_eq!(w.reserved_bits(), 1 << 28);
    assert!(!w.is_well_formed());
    // Undefined types.
    for t in [0u64, 5, 0xf] {
        let w = DbWord::from_raw(t << QHCA_DB_TYPE_SHIFT);
        assert_eq!(w.type_bits() as u64, t);
        assert_eq!(w.db_type(), None);
        assert!(!w.is_well_formed());
    }
    // All ones: every field saturates, reserved bits set.
    let w = DbWord::from_raw(u64::MAX);
    assert_eq!(w.qn(), DB_QN_MASK);
    assert_eq!(w.type_bits(), 0xf);
    assert_eq!(w.index(), u32::MAX);
    assert_eq!(w.reserved_bits(), DB_RSVD_MASK);
}

#[test]
fn header_masks_and_helpers_agree() {
    assert_eq!(DB_QN_MASK as u64, QHCA_DB_QN_MASK as u64);
    assert_eq!(DB_TYPE_MASK as u64, QHCA_DB_TYPE_MASK as u64);
    assert_eq!(QHCA_DB_TYPE_SHIFT, 24);
    assert_eq!(QHCA_DB_INDEX_SHIFT, 32);
    assert_eq!(DbType::Sq.raw(), QHCA_DB_SQ);
    assert_eq!(DbType::Rq.raw(), QHCA_DB_RQ);
    assert_eq!(DbType::CqArm.raw(), QHCA_DB_CQ_ARM);
}
