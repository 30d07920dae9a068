// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Work requests and their encoding into ring slots: one tiny builder per segment, as mlx5's
//! `set_*_seg`, each writing little-endian bytes at its ABI offset. Pure: the builders take a
//! byte slice (a ring slot, or a `Vec` in the tests).

use qhca_uapi::{
    QHCA_WQE_DATA_OFFSET, QHCA_WQE_FENCE, QHCA_WQE_INLINE, QHCA_WQE_SIGNALED, QHCA_WQE_SOLICITED,
    QHCA_WR_ATOMIC_CMP_AND_SWP, QHCA_WR_ATOMIC_FETCH_AND_ADD, QHCA_WR_RDMA_READ,
    QHCA_WR_RDMA_WRITE, QHCA_WR_RDMA_WRITE_WITH_IMM, QHCA_WR_SEND, QHCA_WR_SEND_WITH_IMM,
};

use core::mem::{offset_of, size_of};

use qhca_uapi::{qhca_rwqe, qhca_sge, qhca_wqe_atomic, qhca_wqe_ctrl, qhca_wqe_raddr};

use crate::error::PostReason;
use crate::layout::{QpLayout, RWQE_HDR_SIZE, SGE_SIZE};

/// Offset of the control segment (`struct qhca_wqe_ctrl`) in a send WQE.
pub const CTRL_OFFSET: usize = 0;
/// Offset of the remote-address segment (`struct qhca_wqe_raddr`): after the control segment.
pub const RADDR_OFFSET: usize = CTRL_OFFSET + size_of::<qhca_wqe_ctrl>();
/// Offset of the atomic segment (`struct qhca_wqe_atomic`).
pub const ATOMIC_OFFSET: usize = RADDR_OFFSET + size_of::<qhca_wqe_raddr>();
/// Offset of the data (SGEs or inline bytes).
pub const DATA_OFFSET: usize = QHCA_WQE_DATA_OFFSET as usize;

const _: () = assert!(ATOMIC_OFFSET + size_of::<qhca_wqe_atomic>() == DATA_OFFSET);
const _: () = assert!(size_of::<qhca_rwqe>() == RWQE_HDR_SIZE);
const _: () = assert!(size_of::<qhca_sge>() == SGE_SIZE);

/// A scatter/gather entry: `length` bytes at `addr`, inside the region with local key `lkey`.
///
/// Nothing here is trusted by the device: it checks the key, the PD, the rights and the bounds
/// of every entry, so a wrong entry fails the request, it never reaches other memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sge {
    /// First byte.
    pub addr: u64,
    /// Bytes (> 0).
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// True if `[addr, addr + len)` lies inside the region `[start, start + size)`.
pub(crate) fn region_contains(start: u64, size: u64, addr: u64, len: u64) -> bool {
    addr >= start && addr.checked_add(len).is_some_and(|e| e <= start + size)
}

impl Sge {
    /// The SGE a region's `sge()` hands out: `length` bytes at `addr` with the region's `lkey`.
    ///
    /// # Panics
    ///
    /// Unless `inside` (the region holds the range), naming the region: `what`, `size` bytes at
    /// `start`.
    pub(crate) fn in_region(
        inside: bool,
        what: &str,
        (start, size): (u64, u64),
        lkey: u32,
        addr: u64,
        length: u32,
    ) -> Sge {
        assert!(
            inside,
            "SGE {addr:#x}+{length} outside the {what} {start:#x}+{size:#x}"
        );
        Sge { addr, length, lkey }
    }
}

/// What a send work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WrOp {
    /// SEND: consumes a receive request at the peer.
    Send,
    /// SEND_WITH_IMM: SEND plus 32 bits the peer's CQE carries.
    SendImm(u32),
    /// RDMA WRITE to `raddr` in the peer's region `rkey`.
    Write {
        /// Remote address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE_WITH_IMM: WRITE, then consumes a receive request carrying `imm`.
    WriteImm {
        /// Remote address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ from `raddr` into the local SGEs.
    Read {
        /// Remote address.
        raddr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Atomic compare and swap of the 8 bytes at `raddr`; the old value lands in the one SGE.
    CmpSwp {
        /// Remote address (8-aligned).
        raddr: u64,
        /// Remote key.
        rkey: u32,
        /// Swap if the old value equals this.
        compare: u64,
        /// The new value.
        swap: u64,
    },
    /// Atomic fetch and add on the 8 bytes at `raddr`; the old value lands in the one SGE.
    FetchAdd {
        /// Remote address (8-aligned).
        raddr: u64,
        /// Remote key.
        rkey: u32,
        /// Added to the remote value.
        add: u64,
    },
}

impl WrOp {
    /// `enum qhca_wr_opcode`.
    pub fn opcode(&self) -> u8 {
        (match self {
            WrOp::Send => QHCA_WR_SEND,
            WrOp::SendImm(_) => QHCA_WR_SEND_WITH_IMM,
            WrOp::Write { .. } => QHCA_WR_RDMA_WRITE,
            WrOp::WriteImm { .. } => QHCA_WR_RDMA_WRITE_WITH_IMM,
            WrOp::Read { .. } => QHCA_WR_RDMA_READ,
            WrOp::CmpSwp { .. } => QHCA_WR_ATOMIC_CMP_AND_SWP,
            WrOp::FetchAdd { .. } => QHCA_WR_ATOMIC_FETCH_AND_ADD,
        }) as u8
    }

    fn imm(&self) -> u32 {
        match *self {
            WrOp::SendImm(imm) | WrOp::WriteImm { imm, .. } => imm,
            _ => 0,
        }
    }

    /// The remote address and key, for the operations that have one.
    pub fn remote(&self) -> Option<(u64, u32)> {
        match *self {
            WrOp::Send | WrOp::SendImm(_) => None,
            WrOp::Write { raddr, rkey }
            | WrOp::WriteImm { raddr, rkey, .. }
            | WrOp::Read { raddr, rkey }
            | WrOp::CmpSwp { raddr, rkey, .. }
            | WrOp::FetchAdd { raddr, rkey, .. } => Some((raddr, rkey)),
        }
    }

    /// `(swap_add, compare)` for the atomics.
    fn atomic(&self) -> Option<(u64, u64)> {
        match *self {
            WrOp::CmpSwp { compare, swap, .. } => Some((swap, compare)),
            WrOp::FetchAdd { add, .. } => Some((add, 0)),
            _ => None,
        }
    }

    /// True for the operations that may carry inline data (SEND and WRITE kinds).
    pub fn may_inline(&self) -> bool {
        matches!(
            self,
            WrOp::Send | WrOp::SendImm(_) | WrOp::Write { .. } | WrOp::WriteImm { .. }
        )
    }
}

/// `QHCA_WQE_*` flags of a send request; [`SendFlags::INLINE`] is set by the encoder from
/// [`SendWr::inline`], not by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SendFlags(pub u8);

impl SendFlags {
    /// No flag: the request completes silently on success.
    pub const NONE: SendFlags = SendFlags(0);
    /// Write a CQE on success.
    pub const SIGNALED: SendFlags = SendFlags(QHCA_WQE_SIGNALED as u8);
    /// Ask for a solicited event at the peer.
    pub const SOLICITED: SendFlags = SendFlags(QHCA_WQE_SOLICITED as u8);
    /// Wait for earlier READs and atomics to finish first.
    pub const FENCE: SendFlags = SendFlags(QHCA_WQE_FENCE as u8);
    /// Data is inline (set by the encoder).
    pub const INLINE: SendFlags = SendFlags(QHCA_WQE_INLINE as u8);

    /// True if every bit of `other` is set.
    pub fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// A send work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: WrOp,
    /// Local memory: the data to send or write, or where READ and atomic results land.
    pub sges: &'a [Sge],
    /// Inline data, copied into the WQE at post time (SEND and WRITE only; no SGEs then).
    pub inline: Option<&'a [u8]>,
    /// SIGNALED, SOLICITED, FENCE.
    pub flags: SendFlags,
}

impl<'a> SendWr<'a> {
    /// A signaled request over `sges`.
    pub fn new(wr_id: u64, op: WrOp, sges: &'a [Sge]) -> Self {
        SendWr {
            wr_id,
            op,
            sges,
            inline: None,
            flags: SendFlags::SIGNALED,
        }
    }

    /// A signaled request carrying `data` inline.
    pub fn inline(wr_id: u64, op: WrOp, data: &'a [u8]) -> Self {
        SendWr {
            wr_id,
            op,
            sges: &[],
            inline: Some(data),
            flags: SendFlags::SIGNALED,
        }
    }

    /// The same request with other flags.
    pub fn with_flags(self, flags: SendFlags) -> Self {
        SendWr { flags, ..self }
    }

    /// True if it writes a CQE on success.
    pub fn signaled(&self) -> bool {
        self.flags.contains(SendFlags::SIGNALED)
    }
}

/// A receive work request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where incoming data lands, in order.
    pub sges: &'a [Sge],
}

fn put_u8(b: &mut [u8], off: usize, v: u8) {
    b[off] = v;
}
fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// The control segment (`struct qhca_wqe_ctrl`) at [`CTRL_OFFSET`]; reserved bytes zero. Every
/// field offset comes from the bindings.
pub fn set_ctrl_seg(
    wqe: &mut [u8],
    wr_id: u64,
    opcode: u8,
    flags: u8,
    num_sge: u8,
    imm: u32,
    inline_len: u32,
) {
    let seg = &mut wqe[CTRL_OFFSET..CTRL_OFFSET + size_of::<qhca_wqe_ctrl>()];
    seg.fill(0);
    put_u64(seg, offset_of!(qhca_wqe_ctrl, wr_id), wr_id);
    put_u8(seg, offset_of!(qhca_wqe_ctrl, opcode), opcode);
    put_u8(seg, offset_of!(qhca_wqe_ctrl, flags), flags);
    put_u8(seg, offset_of!(qhca_wqe_ctrl, num_sge), num_sge);
    put_u32(seg, offset_of!(qhca_wqe_ctrl, imm_data), imm);
    put_u32(seg, offset_of!(qhca_wqe_ctrl, inline_len), inline_len);
}

/// The remote-address segment (`struct qhca_wqe_raddr`) at [`RADDR_OFFSET`].
pub fn set_raddr_seg(wqe: &mut [u8], raddr: u64, rkey: u32) {
    let seg = &mut wqe[RADDR_OFFSET..RADDR_OFFSET + size_of::<qhca_wqe_raddr>()];
    seg.fill(0);
    put_u64(seg, offset_of!(qhca_wqe_raddr, remote_addr), raddr);
    put_u32(seg, offset_of!(qhca_wqe_raddr, rkey), rkey);
}

/// The atomic segment (`struct qhca_wqe_atomic`) at [`ATOMIC_OFFSET`].
pub fn set_atomic_seg(wqe: &mut [u8], swap_add: u64, compare: u64) {
    let seg = &mut wqe[ATOMIC_OFFSET..ATOMIC_OFFSET + size_of::<qhca_wqe_atomic>()];
    put_u64(seg, offset_of!(qhca_wqe_atomic, swap_add), swap_add);
    put_u64(seg, offset_of!(qhca_wqe_atomic, compare), compare);
}

/// One data segment (`struct qhca_sge`) at `off`.
pub fn set_data_seg(wqe: &mut [u8], off: usize, sge: &Sge) {
    let seg = &mut wqe[off..off + size_of::<qhca_sge>()];
    put_u64(seg, offset_of!(qhca_sge, addr), sge.addr);
    put_u32(seg, offset_of!(qhca_sge, length), sge.length);
    put_u32(seg, offset_of!(qhca_sge, lkey), sge.lkey);
}

/// Inline data at [`DATA_OFFSET`].
pub fn set_inline_data(wqe: &mut [u8], data: &[u8]) {
    wqe[DATA_OFFSET..DATA_OFFSET + data.len()].copy_from_slice(data);
}

/// The receive WQE header (`struct qhca_rwqe`) at the start of `rwqe`; reserved bytes zero.
pub fn set_rwqe_hdr(rwqe: &mut [u8], wr_id: u64, num_sge: u32) {
    let hdr = &mut rwqe[..size_of::<qhca_rwqe>()];
    hdr.fill(0);
    put_u64(hdr, offset_of!(qhca_rwqe, wr_id), wr_id);
    put_u32(hdr, offset_of!(qhca_rwqe, num_sge), num_sge);
}

/// Checks a send request against the QP's limits (what the encoder needs to stay in its slot,
/// and what the ABI requires of atomics).
pub fn check_send_wr(wr: &SendWr<'_>, layout: &QpLayout) -> Result<(), PostReason> {
    if wr.sges.len() > layout.max_sge as usize {
        return Err(PostReason::TooManySge {
            num_sge: wr.sges.len(),
            max_sge: layout.max_sge,
        });
    }
    if let Some(data) = wr.inline {
        if !wr.op.may_inline() {
            return Err(PostReason::InlineNotAllowed);
        }
        if !wr.sges.is_empty() {
            return Err(PostReason::InlineAndSge);
        }
        if data.len() > layout.max_inline as usize {
            return Err(PostReason::InlineTooLong {
                len: data.len(),
                max_inline: layout.max_inline,
            });
        }
    }
    if let Some(i) = wr.sges.iter().position(|s| s.length == 0) {
        return Err(PostReason::EmptySge { sge: i });
    }
    let total: u64 = wr.sges.iter().map(|s| u64::from(s.length)).sum();
    if total > 1 << 31 {
        return Err(PostReason::MessageTooLong { len: total });
    }
    if wr.op.atomic().is_some() {
        let raddr = wr.op.remote().map_or(0, |(a, _)| a);
        let ok = matches!(wr.sges, [s] if s.length == 8 && s.addr % 8 == 0) && raddr % 8 == 0;
        if !ok {
            return Err(PostReason::AtomicShape);
        }
    }
    Ok(())
}

/// Encodes a checked send request into `slot` (one SQ stride).
pub fn encode_send_wqe(slot: &mut [u8], wr: &SendWr<'_>) {
    let mut flags = wr.flags.0 & !SendFlags::INLINE.0;
    let (num_sge, inline_len) = match wr.inline {
        Some(d) => {
            flags |= SendFlags::INLINE.0;
            (0, d.len() as u32)
        }
        None => (wr.sges.len() as u8, 0),
    };
    set_ctrl_seg(
        slot,
        wr.wr_id,
        wr.op.opcode(),
        flags,
        num_sge,
        wr.op.imm(),
        inline_len,
    );
    let (raddr, rkey) = wr.op.remote().unwrap_or((0, 0));
    set_raddr_seg(slot, raddr, rkey);
    let (swap_add, compare) = wr.op.atomic().unwrap_or((0, 0));
    set_atomic_seg(slot, swap_add, compare);
    match wr.inline {
        Some(d) => set_inline_data(slot, d),
        None => {
            for (i, s) in wr.sges.iter().enumerate() {
                set_data_seg(slot, DATA_OFFSET + i * SGE_SIZE, s);
            }
        }
    }
}

/// Checks a receive request against the QP's limits.
pub fn check_recv_wr(wr: &RecvWr<'_>, layout: &QpLayout) -> Result<(), PostReason> {
    if wr.sges.len() > layout.max_sge as usize {
        return Err(PostReason::TooManySge {
            num_sge: wr.sges.len(),
            max_sge: layout.max_sge,
        });
    }
    if let Some(i) = wr.sges.iter().position(|s| s.length == 0) {
        return Err(PostReason::EmptySge { sge: i });
    }
    Ok(())
}

/// Encodes a checked receive request into `slot` (one RQ stride).
pub fn encode_recv_wqe(slot: &mut [u8], wr: &RecvWr<'_>) {
    set_rwqe_hdr(slot, wr.wr_id, wr.sges.len() as u32);
    for (i, s) in wr.sges.iter().enumerate() {
        set_data_seg(slot, RWQE_HDR_SIZE + i * SGE_SIZE, s);
    }
}

#[cfg(test)]
mod tests {
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
        check_send_wr(&wr, &layout()).unwrap();
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
            check_send_wr(&wr, &layout()).unwrap();
            let mut slot = vec![0xffu8; 128];
            encode_send_wqe(&mut slot, &wr);
            let mut want = expect_hdr(42, code, 0, 1, imm, 0, raddr, rkey, sa, cmp);
            want.extend(sge_bytes(&SGE_B));
            assert_eq!(slot[..80], want[..], "{op:?}");
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
        check_send_wr(&wr, &layout()).unwrap();
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
            check_send_wr(&SendWr::new(0, WrOp::Send, &three), &l),
            Err(PostReason::TooManySge {
                num_sge: 3,
                max_sge: 2
            })
        );
        let big = [0u8; 101];
        assert_eq!(
            check_send_wr(&SendWr::inline(0, WrOp::Send, &big), &l),
            Err(PostReason::InlineTooLong {
                len: 101,
                max_inline: 100
            })
        );
        assert_eq!(
            check_send_wr(
                &SendWr::inline(0, WrOp::Read { raddr: 0, rkey: 0 }, &big[..8]),
                &l
            ),
            Err(PostReason::InlineNotAllowed)
        );
        let mut both = SendWr::inline(0, WrOp::Send, &big[..8]);
        both.sges = &three[..1];
        assert_eq!(check_send_wr(&both, &l), Err(PostReason::InlineAndSge));
        let empty = [Sge { length: 0, ..SGE_B }];
        assert_eq!(
            check_send_wr(&SendWr::new(0, WrOp::Send, &empty), &l),
            Err(PostReason::EmptySge { sge: 0 })
        );
        let fa = |raddr, s: &[Sge]| {
            check_send_wr(
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
            check_send_wr(&SendWr::new(0, WrOp::Send, &huge), &l),
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
        check_recv_wr(&wr, &layout()).unwrap();
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
            &layout()
        )
        .is_err());
    }
}
