// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Ring layouts: how big the CQ, QP and SRQ buffers are and where each part lives. Pure
//! arithmetic.

use qhca_uapi::{
    QHCA_CQE_SIZE, QHCA_CQ_MAX_LOG, QHCA_CQ_MIN_LOG, QHCA_RQ_MAX_STRIDE_LOG,
    QHCA_RQ_MIN_STRIDE_LOG, QHCA_SQ_MAX_STRIDE_LOG, QHCA_SQ_MIN_STRIDE_LOG, QHCA_WQE_DATA_OFFSET,
    QHCA_WQ_MAX_LOG,
};

use crate::error::{Error, Result};
use crate::mem::round_up_to_page;

/// Bytes of one SGE (`struct qhca_sge`) and of the receive WQE header (`struct qhca_rwqe`).
pub const SGE_SIZE: usize = 16;
/// Bytes of the receive WQE header.
pub const RWQE_HDR_SIZE: usize = 16;
/// Bytes of the CQ doorbell record (`struct qhca_cq_dbrec`).
pub const CQ_DBREC_SIZE: usize = 64;
/// Bytes of the SRQ doorbell record (`struct qhca_srq_dbrec`).
pub const SRQ_DBREC_SIZE: usize = 64;

const _: () = assert!(core::mem::size_of::<qhca_uapi::qhca_sge>() == SGE_SIZE);
const _: () = assert!(core::mem::size_of::<qhca_uapi::qhca_rwqe>() == RWQE_HDR_SIZE);
const _: () = assert!(core::mem::size_of::<qhca_uapi::qhca_cq_dbrec>() == CQ_DBREC_SIZE);
const _: () = assert!(core::mem::size_of::<qhca_uapi::qhca_srq_dbrec>() == SRQ_DBREC_SIZE);
const _: () = assert!(core::mem::size_of::<qhca_uapi::qhca_cqe>() == QHCA_CQE_SIZE as usize);

/// ⌈log2(n)⌉, with `log2ceil(0) == log2ceil(1) == 0`.
pub const fn log2ceil(n: u64) -> u32 {
    if n <= 1 {
        0
    } else {
        64 - (n - 1).leading_zeros()
    }
}

/// Where the parts of a CQ buffer are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqLayout {
    /// log2 of the number of CQEs.
    pub log: u32,
    /// Offset of the doorbell record: `32 << log`.
    pub dbrec_offset: usize,
    /// Bytes to allocate: `round_up(dbrec_offset + 64, 4096)`.
    pub buf_len: usize,
}

impl CqLayout {
    /// The smallest CQ with at least `entries` CQEs (and at least `2^QHCA_CQ_MIN_LOG`).
    pub fn new(entries: u32) -> Result<CqLayout> {
        let log = log2ceil(u64::from(entries)).max(QHCA_CQ_MIN_LOG);
        if log > QHCA_CQ_MAX_LOG {
            return Err(Error::Invalid {
                what: format!(
                    "CQ of {entries} entries: at most {} (2^QHCA_CQ_MAX_LOG)",
                    1u32 << QHCA_CQ_MAX_LOG
                ),
            });
        }
        let dbrec_offset = (QHCA_CQE_SIZE as usize) << log;
        Ok(CqLayout {
            log,
            dbrec_offset,
            buf_len: round_up_to_page(dbrec_offset + CQ_DBREC_SIZE),
        })
    }

    /// Number of CQEs.
    #[cfg(test)]
    pub fn entries(&self) -> u32 {
        1 << self.log
    }
}

/// What a QP is created for: the queue depths and per-request limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Outstanding send work requests (rounded up to a power of two, at least 2).
    pub max_send_wr: u32,
    /// Outstanding receive work requests (rounded up to a power of two, at least 2).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send and per receive request.
    pub max_sge: u32,
    /// Inline bytes per send request.
    pub max_inline: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_sge: 4,
            max_inline: 64,
        }
    }
}

/// Where the parts of a QP buffer are: the SQ at 0, the RQ at the next page boundary; or the SQ
/// alone, for a QP that receives from a shared receive queue ([`QpLayout::on_srq`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpLayout {
    /// log2(SQ slots).
    pub sq_log: u32,
    /// log2(bytes per SQ slot).
    pub sq_stride_log: u32,
    /// log2(RQ slots); 0 without an RQ.
    pub rq_log: u32,
    /// log2(bytes per RQ slot); 0 without an RQ (what tells a QP of an SRQ).
    pub rq_stride_log: u32,
    /// Offset of the RQ: the SQ's size rounded up to a page (the buffer's end without an RQ).
    pub rq_offset: usize,
    /// Bytes to allocate: the RQ's end rounded up to a page.
    pub buf_len: usize,
    /// Inline bytes a send slot holds (what the caps asked for; the slot may hold more).
    pub max_inline: u32,
    /// SGEs per request.
    pub max_sge: u32,
}

fn wq_log(what: &str, wr: u32) -> Result<u32> {
    let log = log2ceil(u64::from(wr)).max(1);
    if log > QHCA_WQ_MAX_LOG {
        return Err(Error::Invalid {
            what: format!(
                "{what} of {wr} work requests: at most {}",
                1u32 << QHCA_WQ_MAX_LOG
            ),
        });
    }
    Ok(log)
}

impl QpLayout {
    /// The layout for `caps`, as the ABI prescribes:
    /// `sq_stride_log = max(QHCA_SQ_MIN_STRIDE_LOG, log2ceil(64 + max(16 * max_sge, max_inline)))`,
    /// `rq_stride_log = max(QHCA_RQ_MIN_STRIDE_LOG, log2ceil(16 + 16 * max_sge))`,
    /// `sq_log / rq_log = log2ceil(max_wr)` (at least 1, at most `QHCA_WQ_MAX_LOG`).
    pub fn new(caps: &QpCaps) -> Result<QpLayout> {
        let sge = u64::from(caps.max_sge);
        let send_data = (SGE_SIZE as u64 * sge).max(u64::from(caps.max_inline));
        let sq_stride_log =
            log2ceil(u64::from(QHCA_WQE_DATA_OFFSET) + send_data).max(QHCA_SQ_MIN_STRIDE_LOG);
        if sq_stride_log > QHCA_SQ_MAX_STRIDE_LOG {
            return Err(Error::Invalid {
                what: format!(
                    "max_sge {} / max_inline {} need a {}-byte send slot: at most {}",
                    caps.max_sge,
                    caps.max_inline,
                    1u64 << sq_stride_log,
                    1u32 << QHCA_SQ_MAX_STRIDE_LOG
                ),
            });
        }
        let rq_stride_log = recv_stride_log(caps.max_sge)?;
        if caps.max_sge > u32::from(u8::MAX) {
            return Err(Error::Invalid {
                what: format!("max_sge {}: num_sge is a byte", caps.max_sge),
            });
        }
        let sq_log = wq_log("send queue", caps.max_send_wr)?;
        let rq_log = wq_log("receive queue", caps.max_recv_wr)?;
        let rq_offset = round_up_to_page(1usize << (sq_log + sq_stride_log));
        let buf_len = round_up_to_page(rq_offset + (1usize << (rq_log + rq_stride_log)));
        Ok(QpLayout {
            sq_log,
            sq_stride_log,
            rq_log,
            rq_stride_log,
            rq_offset,
            buf_len,
            max_inline: caps.max_inline,
            max_sge: caps.max_sge,
        })
    }

    /// The layout of a QP that receives from a shared receive queue: the send queue of
    /// [`QpLayout::new`] alone (`caps.max_recv_wr` is not looked at), `rq_log` and
    /// `rq_stride_log` 0, the buffer the SQ rounded up to a page, as the ABI prescribes.
    pub fn on_srq(caps: &QpCaps) -> Result<QpLayout> {
        let l = QpLayout::new(&QpCaps {
            max_recv_wr: 1,
            ..*caps
        })?;
        Ok(QpLayout {
            rq_log: 0,
            rq_stride_log: 0,
            buf_len: l.rq_offset,
            ..l
        })
    }

    /// False for a QP of an SRQ ([`QpLayout::on_srq`]): it has no receive queue of its own.
    pub fn has_rq(&self) -> bool {
        self.rq_stride_log != 0
    }

    /// SQ slots.
    pub fn sq_depth(&self) -> u32 {
        1 << self.sq_log
    }

    /// RQ slots (0 without an RQ).
    pub fn rq_depth(&self) -> u32 {
        if self.has_rq() {
            1 << self.rq_log
        } else {
            0
        }
    }

    /// Bytes per SQ slot.
    pub fn sq_stride(&self) -> usize {
        1 << self.sq_stride_log
    }

    /// Bytes per RQ slot (0 without an RQ).
    pub fn rq_stride(&self) -> usize {
        if self.has_rq() {
            1 << self.rq_stride_log
        } else {
            0
        }
    }
}

/// log2(bytes) of a receive slot for `max_sge` SGEs, as the ABI prescribes for a QP's receive
/// queue and an SRQ alike: `max(QHCA_RQ_MIN_STRIDE_LOG, log2ceil(16 + 16 * max_sge))`, at most
/// `QHCA_RQ_MAX_STRIDE_LOG`.
fn recv_stride_log(max_sge: u32) -> Result<u32> {
    let stride_log = log2ceil(RWQE_HDR_SIZE as u64 + SGE_SIZE as u64 * u64::from(max_sge))
        .max(QHCA_RQ_MIN_STRIDE_LOG);
    if stride_log > QHCA_RQ_MAX_STRIDE_LOG {
        return Err(Error::Invalid {
            what: format!(
                "max_sge {max_sge} needs a {}-byte receive slot: at most {}",
                1u64 << stride_log,
                1u32 << QHCA_RQ_MAX_STRIDE_LOG
            ),
        });
    }
    Ok(stride_log)
}

/// Where the parts of a shared receive queue's buffer are: `2^log` slots of `2^stride_log` bytes
/// (a receive WQE each, as in a QP's receive queue), then the doorbell record
/// (`struct qhca_srq_dbrec`, which the device writes), the whole rounded up to a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqLayout {
    /// log2(slots), 0..=`QHCA_WQ_MAX_LOG`.
    pub log: u32,
    /// log2(bytes per slot).
    pub stride_log: u32,
    /// SGEs per receive request.
    pub max_sge: u32,
    /// Offset of the doorbell record: `1 << (log + stride_log)`.
    pub dbrec_offset: usize,
    /// Bytes to allocate: `round_up(dbrec_offset + 64, 4096)`.
    pub buf_len: usize,
}

impl SrqLayout {
    /// The smallest SRQ with at least `max_wr` slots (1..=`2^QHCA_WQ_MAX_LOG`) of at least
    /// `max_sge` SGEs each (at least 1: the driver refuses 0; 1 costs nothing, a slot is at least
    /// 32 bytes): `log = log2ceil(max_wr)`, `stride_log` as a receive queue's.
    pub fn new(max_wr: u32, max_sge: u32) -> Result<SrqLayout> {
        let max_sge = max_sge.max(1);
        if max_wr == 0 || log2ceil(u64::from(max_wr)) > QHCA_WQ_MAX_LOG {
            return Err(Error::Invalid {
                what: format!(
                    "SRQ of {max_wr} work requests: 1 to {}",
                    1u32 << QHCA_WQ_MAX_LOG
                ),
            });
        }
        let log = log2ceil(u64::from(max_wr));
        let stride_log = recv_stride_log(max_sge)?;
        let dbrec_offset = 1usize << (log + stride_log);
        Ok(SrqLayout {
            log,
            stride_log,
            max_sge,
            dbrec_offset,
            buf_len: round_up_to_page(dbrec_offset + SRQ_DBREC_SIZE),
        })
    }

    /// Slots.
    pub fn depth(&self) -> u32 {
        1 << self.log
    }

    /// Bytes per slot.
    pub fn stride(&self) -> usize {
        1 << self.stride_log
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log2ceil_values() {
        let cases = [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 2),
            (5, 3),
            (64, 6),
            (65, 7),
        ];
        for (n, l) in cases {
            assert_eq!(log2ceil(n), l, "{n}");
        }
        assert_eq!(log2ceil(u64::MAX), 64);
    }

    #[test]
    fn cq_layout() {
        let l = CqLayout::new(1).unwrap();
        assert_eq!(
            (l.log, l.entries(), l.dbrec_offset, l.buf_len),
            (1, 2, 64, 4096)
        );
        let l = CqLayout::new(100).unwrap();
        assert_eq!((l.log, l.dbrec_offset, l.buf_len), (7, 4096, 8192));
        let l = CqLayout::new(127).unwrap();
        assert_eq!(l.log, 7);
        let l = CqLayout::new(1 << 16).unwrap();
        assert_eq!((l.dbrec_offset, l.buf_len), (32 << 16, (32 << 16) + 4096));
        assert!(CqLayout::new((1 << 16) + 1).is_err());
    }

    #[test]
    fn qp_layout_minimums() {
        let l = QpLayout::new(&QpCaps {
            max_send_wr: 1,
            max_recv_wr: 0,
            max_sge: 1,
            max_inline: 0,
        })
        .unwrap();
        assert_eq!((l.sq_log, l.sq_stride_log), (1, 7));
        assert_eq!((l.rq_log, l.rq_stride_log), (1, 5));
        assert_eq!((l.rq_offset, l.buf_len), (4096, 8192));
    }

    #[test]
    fn qp_layout_strides_follow_sge_and_inline() {
        // 4 SGEs: 64 + 64 = 128 -> 7; RQ 16 + 64 = 80 -> 7.
        let l = QpLayout::new(&QpCaps::default()).unwrap();
        assert_eq!(
            (l.sq_log, l.sq_stride_log, l.rq_log, l.rq_stride_log),
            (6, 7, 6, 7)
        );
        assert_eq!((l.rq_offset, l.buf_len), (8192, 16384));
        // 5 SGEs: 64 + 80 = 144 -> 8; RQ 96 -> 7.
        let l = QpLayout::new(&QpCaps {
            max_sge: 5,
            ..QpCaps::default()
        })
        .unwrap();
        assert_eq!((l.sq_stride_log, l.rq_stride_log), (8, 7));
        // 200 inline bytes win over 1 SGE: 264 -> 9.
        let l = QpLayout::new(&QpCaps {
            max_send_wr: 1000,
            max_recv_wr: 3,
            max_sge: 1,
            max_inline: 200,
        })
        .unwrap();
        assert_eq!(
            (l.sq_log, l.sq_stride_log, l.rq_log, l.rq_stride_log),
            (10, 9, 2, 5)
        );
        assert_eq!(l.rq_offset, 512 * 1024);
        assert_eq!(l.buf_len, 512 * 1024 + 4096);
        assert_eq!(
            (l.sq_depth(), l.rq_depth(), l.sq_stride(), l.rq_stride()),
            (1024, 4, 512, 32)
        );
    }

    #[test]
    fn qp_layout_limits() {
        let big_inline = QpCaps {
            max_inline: 2048 - 64 + 1,
            ..QpCaps::default()
        };
        assert!(QpLayout::new(&big_inline).is_err());
        let ok = QpCaps {
            max_inline: 2048 - 64,
            ..QpCaps::default()
        };
        assert_eq!(QpLayout::new(&ok).unwrap().sq_stride_log, 11);
        // RQ stride 512: 16 + 16 * 31 = 512 fits, 32 SGEs do not.
        let sge31 = QpCaps {
            max_sge: 31,
            ..QpCaps::default()
        };
        assert_eq!(QpLayout::new(&sge31).unwrap().rq_stride_log, 9);
        assert!(QpLayout::new(&QpCaps {
            max_sge: 32,
            ..QpCaps::default()
        })
        .is_err());
        assert_eq!(
            QpLayout::new(&QpCaps {
                max_send_wr: 1 << 15,
                ..QpCaps::default()
            })
            .unwrap()
            .sq_log,
            15
        );
        assert!(QpLayout::new(&QpCaps {
            max_recv_wr: (1 << 15) + 1,
            ..QpCaps::default()
        })
        .is_err());
    }

    #[test]
    fn srq_layout() {
        // One slot of one SGE: 32 bytes, the record at 32, one page.
        let l = SrqLayout::new(1, 1).unwrap();
        assert_eq!((l.log, l.stride_log, l.max_sge), (0, 5, 1));
        assert_eq!(
            (l.depth(), l.stride(), l.dbrec_offset, l.buf_len),
            (1, 32, 32, 4096)
        );
        // max_sge 0 is 1 (the driver refuses 0).
        assert_eq!(SrqLayout::new(1, 0).unwrap(), l);
        // 100 WRs of 4 SGEs: 128 slots of 16 + 64 = 80 -> 128 bytes; the record at 16 KiB.
        let l = SrqLayout::new(100, 4).unwrap();
        assert_eq!((l.log, l.stride_log, l.max_sge), (7, 7, 4));
        assert_eq!((l.dbrec_offset, l.buf_len), (16384, 16384 + 4096));
        // 16 SGEs (the device's maximum): 272 -> 512 bytes.
        assert_eq!(SrqLayout::new(2, 16).unwrap().stride_log, 9);
        // The limits: 2^15 slots, 31 SGEs (a 512-byte slot), at least one slot.
        let l = SrqLayout::new(1 << 15, 31).unwrap();
        assert_eq!((l.log, l.stride_log, l.dbrec_offset), (15, 9, 1 << 24));
        assert_eq!(l.buf_len, (1 << 24) + 4096);
        assert!(SrqLayout::new((1 << 15) + 1, 1).is_err());
        assert!(SrqLayout::new(0, 1).is_err());
        assert!(SrqLayout::new(4, 32).is_err());
    }

    /// A QP of an SRQ: the same send queue, no receive queue, the buffer the SQ alone.
    #[test]
    fn qp_layout_on_an_srq() {
        let caps = QpCaps::default();
        let full = QpLayout::new(&caps).unwrap();
        let l = QpLayout::on_srq(&QpCaps {
            max_recv_wr: 1 << 20,
            ..caps
        })
        .unwrap();
        assert!(full.has_rq() && !l.has_rq());
        assert_eq!(
            (l.sq_log, l.sq_stride_log, l.max_sge, l.max_inline),
            (
                full.sq_log,
                full.sq_stride_log,
                full.max_sge,
                full.max_inline
            )
        );
        assert_eq!((l.rq_log, l.rq_stride_log), (0, 0));
        assert_eq!((l.rq_depth(), l.rq_stride()), (0, 0));
        assert_eq!((l.rq_offset, l.buf_len), (8192, 8192));
        // A send queue of less than a page still takes a whole one.
        let l = QpLayout::on_srq(&QpCaps {
            max_send_wr: 2,
            max_sge: 1,
            max_inline: 0,
            max_recv_wr: 0,
        })
        .unwrap();
        assert_eq!((l.sq_log, l.sq_stride_log, l.buf_len), (1, 7, 4096));
        assert!(QpLayout::on_srq(&QpCaps {
            max_send_wr: (1 << 15) + 1,
            ..caps
        })
        .is_err());
    }
}
