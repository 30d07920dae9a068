// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The doorbell word: one aligned 64-bit store at `QHCA_DB_OFFSET` in a doorbell (UAR) page.
//!
//! ```text
//!  63                              32 31  28 27  24 23                     0
//! +----------------------------------+------+------+------------------------+
//! |              index               | rsvd | type |      queue number      |
//! +----------------------------------+------+------+------------------------+
//! ```
//!
//! Bits 31..28 are not assigned by the header; [`DbWord::new`] leaves them zero and
//! [`DbWord::is_well_formed`] rejects a word that sets them.

use super::bindings::{
    qhca_db_type, QHCA_DB_CQ_ARM, QHCA_DB_INDEX_SHIFT, QHCA_DB_QN_MASK, QHCA_DB_RQ, QHCA_DB_SQ,
    QHCA_DB_SRQ, QHCA_DB_TYPE_MASK, QHCA_DB_TYPE_SHIFT,
};

// The header's masks as words (bindgen types each macro by its value, here `u32`).
const QN_MASK: u64 = QHCA_DB_QN_MASK as u64;
const TYPE_MASK: u64 = QHCA_DB_TYPE_MASK as u64;

/// Largest queue number a doorbell can name.
pub const DB_QN_MASK: u32 = QN_MASK as u32;
/// Mask of the type field once shifted down.
pub const DB_TYPE_MASK: u32 = TYPE_MASK as u32;
/// Bits 31..28 of the word: unassigned, must be zero.
pub const DB_RSVD_MASK: u64 = 0xffff_ffff & !QN_MASK & !(TYPE_MASK << QHCA_DB_TYPE_SHIFT);

/// What a doorbell announces (`enum qhca_db_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum DbType {
    /// `QHCA_DB_SQ`: index = new send queue producer index.
    Sq = QHCA_DB_SQ,
    /// `QHCA_DB_RQ`: index = new receive queue producer index.
    Rq = QHCA_DB_RQ,
    /// `QHCA_DB_CQ_ARM`: index = the consumer index the arm refers to.
    CqArm = QHCA_DB_CQ_ARM,
    /// `QHCA_DB_SRQ`: queue = SRQ number, index = new SRQ producer index.
    Srq = QHCA_DB_SRQ,
}

impl DbType {
    /// The type for a raw `qhca_db_type` value, or `None` if the ABI does not define it.
    pub const fn from_raw(raw: qhca_db_type) -> Option<Self> {
        match raw {
            QHCA_DB_SQ => Some(Self::Sq),
            QHCA_DB_RQ => Some(Self::Rq),
            QHCA_DB_CQ_ARM => Some(Self::CqArm),
            QHCA_DB_SRQ => Some(Self::Srq),
            _ => None,
        }
    }

    /// The raw `qhca_db_type` value.
    pub const fn raw(self) -> qhca_db_type {
        self as qhca_db_type
    }
}

/// A doorbell word, as stored to (and decoded by) the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct DbWord(u64);

impl DbWord {
    /// Encodes a doorbell. `qn` is masked to its 24 bits (the device does the same); use
    /// [`DbWord::try_new`] to have an out-of-range queue number rejected instead.
    pub const fn new(ty: DbType, qn: u32, index: u32) -> Self {
        Self(
            ((index as u64) << QHCA_DB_INDEX_SHIFT)
                | ((ty.raw() as u64 & TYPE_MASK) << QHCA_DB_TYPE_SHIFT)
                | (qn as u64 & QN_MASK),
        )
    }

    /// Encodes a doorbell, or returns `None` if `qn` does not fit in 24 bits.
    pub const fn try_new(ty: DbType, qn: u32, index: u32) -> Option<Self> {
        if qn & !DB_QN_MASK != 0 {
            None
        } else {
            Some(Self::new(ty, qn, index))
        }
    }

    /// Wraps a raw word (for example one the device received); nothing is checked.
    pub const fn from_raw(raw: u64) -> Self {
        Self(raw)
    }

    /// The 64-bit value to store.
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// Bits 23..0: the queue number.
    pub const fn qn(self) -> u32 {
        (self.0 & QN_MASK) as u32
    }

    /// Bits 27..24, unchecked: may be a value the ABI does not define.
    pub const fn type_bits(self) -> qhca_db_type {
        ((self.0 >> QHCA_DB_TYPE_SHIFT) & TYPE_MASK) as qhca_db_type
    }

    /// Bits 27..24 decoded, or `None` if they hold no defined `qhca_db_type`.
    pub const fn db_type(self) -> Option<DbType> {
        DbType::from_raw(self.type_bits())
    }

    /// Bits 63..32: the index.
    pub const fn index(self) -> u32 {
        (self.0 >> QHCA_DB_INDEX_SHIFT) as u32
    }

    /// Bits 31..28 (in place): zero in a well-formed word.
    pub const fn reserved_bits(self) -> u64 {
        self.0 & DB_RSVD_MASK
    }

    /// True if the reserved bits are zero and the type is one the ABI defines.
    pub const fn is_well_formed(self) -> bool {
        self.reserved_bits() == 0 && self.db_type().is_some()
    }
}

impl From<DbWord> for u64 {
    fn from(w: DbWord) -> u64 {
        w.raw()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_mask_is_bits_31_to_28() {
        assert_eq!(DB_RSVD_MASK, 0xf000_0000);
    }

    #[test]
    fn type_raw_round_trip() {
        for t in [DbType::Sq, DbType::Rq, DbType::CqArm, DbType::Srq] {
            assert_eq!(DbType::from_raw(t.raw()), Some(t));
        }
        assert_eq!(DbType::from_raw(0), None);
        assert_eq!(DbType::from_raw(5), None);
    }
}
