// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Work requests and their encoding into ring slots: one tiny builder per segment, as mlx5's
//! `set_*_seg`, each writing little-endian bytes at its ABI offset. Pure: the builders take a
//! byte slice (a ring slot, or a `Vec` in the tests).

use qhca_uapi::{
    QHCA_WQE_DATA_OFFSET, QHCA_WQE_FENCE, QHCA_WQE_INLINE, QHCA_WQE_SIGNALED, QHCA_WQE_SOLICITED,
    QHCA_WR_ATOMIC_CMP_AND_SWP, QHCA_WR_ATOMIC_FETCH_AND_ADD, QHCA_WR_BIND_MW, QHCA_WR_LOCAL_INV,
    QHCA_WR_RDMA_READ, QHCA_WR_RDMA_WRITE, QHCA_WR_RDMA_WRITE_WITH_IMM, QHCA_WR_SEND,
    QHCA_WR_SEND_WITH_IMM, QHCA_WR_SEND_WITH_INV,
};

use core::mem::{offset_of, size_of};

use qhca_uapi::{
    qhca_rwqe, qhca_sge, qhca_wqe_atomic, qhca_wqe_bind, qhca_wqe_ctrl, qhca_wqe_raddr, qhca_wqe_ud,
};

use crate::ah::{UdDest, UD_MAX_MSG};
use crate::error::PostReason;
use crate::layout::{QpLayout, RWQE_HDR_SIZE, SGE_SIZE};
use crate::qp::QpType;

/// Offset of the control segment (`struct qhca_wqe_ctrl`) in a send WQE.
pub const CTRL_OFFSET: usize = 0;
/// Offset of the remote-address segment (`struct qhca_wqe_raddr`): after the control segment.
pub const RADDR_OFFSET: usize = CTRL_OFFSET + size_of::<qhca_wqe_ctrl>();
/// Offset of the atomic segment (`struct qhca_wqe_atomic`).
pub const ATOMIC_OFFSET: usize = RADDR_OFFSET + size_of::<qhca_wqe_raddr>();
/// Offset of the data (SGEs or inline bytes).
pub const DATA_OFFSET: usize = QHCA_WQE_DATA_OFFSET as usize;

/// Offset of the bind segment (`struct qhca_wqe_bind`) of a BIND_MW request: where the
/// remote-address and atomic segments are in the others.
pub const BIND_OFFSET: usize = RADDR_OFFSET;

/// Offset of the UD segment (`struct qhca_wqe_ud`) of a send on a UD QP: where the
/// remote-address segment is on an RC QP.
pub const UD_OFFSET: usize = RADDR_OFFSET;

const _: () = assert!(ATOMIC_OFFSET + size_of::<qhca_wqe_atomic>() == DATA_OFFSET);
const _: () = assert!(size_of::<qhca_wqe_ud>() == size_of::<qhca_wqe_raddr>());
const _: () = assert!(BIND_OFFSET + size_of::<qhca_wqe_bind>() == DATA_OFFSET);
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
    /// SEND_WITH_INV: SEND, and the peer invalidates its type 2 window `rkey` (bound to the
    /// peer QP) once the message is in; its CQE reports the key.
    SendInv {
        /// The peer's window key.
        rkey: u32,
    },
    /// BIND_MW: binds a window to `length` bytes at `addr` of a region (see [`crate::Mw::bind`],
    /// which builds it). No data, no SGEs.
    BindMw(MwBind),
    /// LOCAL_INV: unbinds the bound type 2 window whose key is `rkey` (see
    /// [`crate::Mw::invalidate`]). No data, no SGEs.
    LocalInv {
        /// The window's current key.
        rkey: u32,
    },
}

/// What a BIND_MW request says (`struct qhca_wqe_bind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// The window (its key; the tag is not looked at).
    pub mw_key: u32,
    /// Its key once bound: the same index, another tag.
    pub new_key: u32,
    /// The region's key (it has [`crate::Access::MW_BIND`]).
    pub mr_key: u32,
    /// The window's first byte.
    pub addr: u64,
    /// Bytes; 0 unbinds a type 1 window.
    pub length: u64,
    /// The window's rights: [`crate::Access::REMOTE_READ`], `REMOTE_WRITE`, `REMOTE_ATOMIC`.
    pub access: u32,
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
            WrOp::SendInv { .. } => QHCA_WR_SEND_WITH_INV,
            WrOp::BindMw(_) => QHCA_WR_BIND_MW,
            WrOp::LocalInv { .. } => QHCA_WR_LOCAL_INV,
        }) as u8
    }

    /// `imm_data`: the immediate, or the key to invalidate.
    fn imm(&self) -> u32 {
        match *self {
            WrOp::SendImm(imm) | WrOp::WriteImm { imm, .. } => imm,
            WrOp::SendInv { rkey } | WrOp::LocalInv { rkey } => rkey,
            _ => 0,
        }
    }

    /// True for the operations that run on the local HCA and carry no data (BIND_MW,
    /// LOCAL_INV).
    pub fn is_local(&self) -> bool {
        matches!(self, WrOp::BindMw(_) | WrOp::LocalInv { .. })
    }

    /// The remote address and key, for the operations that have one.
    pub fn remote(&self) -> Option<(u64, u32)> {
        match *self {
            WrOp::Send
            | WrOp::SendImm(_)
            | WrOp::SendInv { .. }
            | WrOp::BindMw(_)
            | WrOp::LocalInv { .. } => None,
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
            WrOp::Send
                | WrOp::SendImm(_)
                | WrOp::SendInv { .. }
                | WrOp::Write { .. }
                | WrOp::WriteImm { .. }
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
    /// Where a send of a UD QP goes (`None` on an RC QP, whose peer is fixed at connection
    /// time); see [`SendWr::to_ud`].
    pub ud: Option<UdDest>,
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
            ud: None,
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
            ud: None,
        }
    }

    /// The same request with other flags.
    pub fn with_flags(self, flags: SendFlags) -> Self {
        SendWr { flags, ..self }
    }

    /// The same request as a datagram to `dest`, for a UD QP (`ibv_send_wr.wr.ud`): only
    /// [`WrOp::Send`] and [`WrOp::SendImm`], at most [`crate::UD_MAX_MSG`] bytes.
    pub fn to_ud(self, dest: UdDest) -> Self {
        SendWr {
            ud: Some(dest),
            ..self
        }
    }

    /// Bytes of data it carries (inline or in its SGEs).
    pub fn data_len(&self) -> u64 {
        match self.inline {
            Some(d) => d.len() as u64,
            None => self.sges.iter().map(|s| u64::from(s.length)).sum(),
        }
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

/// The UD segment (`struct qhca_wqe_ud`) at [`UD_OFFSET`]; reserved bytes zero.
pub fn set_ud_seg(wqe: &mut [u8], d: &UdDest) {
    let seg = &mut wqe[UD_OFFSET..UD_OFFSET + size_of::<qhca_wqe_ud>()];
    seg.fill(0);
    put_u32(seg, offset_of!(qhca_wqe_ud, ah), d.ah);
    put_u32(seg, offset_of!(qhca_wqe_ud, remote_qpn), d.remote_qpn);
    put_u32(seg, offset_of!(qhca_wqe_ud, remote_qkey), d.remote_qkey);
}

/// The atomic segment (`struct qhca_wqe_atomic`) at [`ATOMIC_OFFSET`].
pub fn set_atomic_seg(wqe: &mut [u8], swap_add: u64, compare: u64) {
    let seg = &mut wqe[ATOMIC_OFFSET..ATOMIC_OFFSET + size_of::<qhca_wqe_atomic>()];
    put_u64(seg, offset_of!(qhca_wqe_atomic, swap_add), swap_add);
    put_u64(seg, offset_of!(qhca_wqe_atomic, compare), compare);
}

/// The bind segment (`struct qhca_wqe_bind`) at [`BIND_OFFSET`].
pub fn set_bind_seg(wqe: &mut [u8], b: &MwBind) {
    let seg = &mut wqe[BIND_OFFSET..BIND_OFFSET + size_of::<qhca_wqe_bind>()];
    put_u64(seg, offset_of!(qhca_wqe_bind, addr), b.addr);
    put_u64(seg, offset_of!(qhca_wqe_bind, length), b.length);
    put_u32(seg, offset_of!(qhca_wqe_bind, mw_key), b.mw_key);
    put_u32(seg, offset_of!(qhca_wqe_bind, new_key), b.new_key);
    put_u32(seg, offset_of!(qhca_wqe_bind, mr_key), b.mr_key);
    put_u32(seg, offset_of!(qhca_wqe_bind, access), b.access);
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
/// and what the ABI requires of atomics and datagrams).
pub fn check_send_wr(
    wr: &SendWr<'_>,
    layout: &QpLayout,
    qp_type: QpType,
) -> Result<(), PostReason> {
    match (qp_type, wr.ud.is_some()) {
        (QpType::Rc, true) => return Err(PostReason::UdDestOnRc),
        (QpType::Ud, false) => return Err(PostReason::NoUdDest),
        (QpType::Ud, true) if !matches!(wr.op, WrOp::Send | WrOp::SendImm(_)) => {
            return Err(PostReason::UdOpcode)
        }
        _ => {}
    }
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
    if wr.op.is_local() && (!wr.sges.is_empty() || wr.inline.is_some()) {
        return Err(PostReason::DataOnLocalOp);
    }
    if let Some(i) = wr.sges.iter().position(|s| s.length == 0) {
        return Err(PostReason::EmptySge { sge: i });
    }
    let total: u64 = wr.sges.iter().map(|s| u64::from(s.length)).sum();
    if total > 1 << 31 {
        return Err(PostReason::MessageTooLong { len: total });
    }
    if qp_type == QpType::Ud && wr.data_len() > UD_MAX_MSG as u64 {
        return Err(PostReason::DatagramTooLong { len: wr.data_len() });
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
    if let WrOp::BindMw(b) = &wr.op {
        set_bind_seg(slot, b);
    } else if let Some(d) = &wr.ud {
        set_ud_seg(slot, d);
        set_atomic_seg(slot, 0, 0);
    } else {
        let (raddr, rkey) = wr.op.remote().unwrap_or((0, 0));
        set_raddr_seg(slot, raddr, rkey);
        let (swap_add, compare) = wr.op.atomic().unwrap_or((0, 0));
        set_atomic_seg(slot, swap_add, compare);
    }
    match wr.inline {
        Some(d) => set_inline_data(slot, d),
        None => {
            for (i, s) in wr.sges.iter().enumerate() {
                set_data_seg(slot, DATA_OFFSET + i * SGE_SIZE, s);
            }
        }
    }
}

/// Checks a receive request against the limit of its queue (a QP's receive queue or an SRQ):
/// `max_sge` SGEs per request.
pub fn check_recv_wr(wr: &RecvWr<'_>, max_sge: u32) -> Result<(), PostReason> {
    if wr.sges.len() > max_sge as usize {
        return Err(PostReason::TooManySge {
            num_sge: wr.sges.len(),
            max_sge,
        });
    }
    if let Some(i) = wr.sges.iter().position(|s| s.length == 0) {
        return Err(PostReason::EmptySge { sge: i });
    }
    Ok(())
}

/// Encodes a checked receive request into `slot` (one RQ or SRQ stride).
pub fn encode_recv_wqe(slot: &mut [u8], wr: &RecvWr<'_>) {
    set_rwqe_hdr(slot, wr.wr_id, wr.sges.len() as u32);
    for (i, s) in wr.sges.iter().enumerate() {
        set_data_seg(slot, RWQE_HDR_SIZE + i * SGE_SIZE, s);
    }
}

#[cfg(test)]
mod tests;
