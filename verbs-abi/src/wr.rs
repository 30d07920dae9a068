// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Work requests and completions between libibverbs's structs and the provider's: pure
//! conversions, so the data path is the provider's own.

use core::ffi::c_uint;

use qhca::{MwBind, SendFlags, Sge, Wc, WcOpcode, WcStatus, WrOp};

use crate::access::mw_access_from_ibv;
use crate::ffi::*;

/// Why a work request cannot be posted: `EINVAL`, and what to say about it.
#[derive(Debug, PartialEq, Eq)]
pub struct Refused(pub &'static str);

/// The operation of a send request, but for the BIND_MW window and region (the caller looks
/// them up: `bind` gives the window's current key and the region's L_Key).
///
/// # Safety
///
/// The union members that verbs.h assigns to `wr.opcode` are initialised, as
/// ibv_post_send(3) requires of the program; the others need not be.
pub unsafe fn send_op(
    wr: &ibv_send_wr,
    bind: impl FnOnce() -> Result<(u32, u32), Refused>,
) -> Result<WrOp, Refused> {
    // SAFETY (every union read below): each arm reads, field by field, only the fields of
    // `wr.wr` and of the anonymous unions that verbs.h assigns to its opcode, initialised by the
    // caller's promise; nothing else is read, since the rest (an RDMA WRITE's `atomic.swap`, a
    // FETCH_AND_ADD's too) need not be. Every field read is a plain integer.
    Ok(match wr.opcode {
        IBV_WR_SEND => WrOp::Send,
        IBV_WR_SEND_WITH_IMM => WrOp::SendImm(unsafe { wr.__bindgen_anon_1.imm_data }),
        IBV_WR_SEND_WITH_INV => WrOp::SendInv {
            rkey: unsafe { wr.__bindgen_anon_1.invalidate_rkey },
        },
        IBV_WR_RDMA_WRITE => WrOp::Write {
            raddr: unsafe { wr.wr.rdma.remote_addr },
            rkey: unsafe { wr.wr.rdma.rkey },
        },
        IBV_WR_RDMA_WRITE_WITH_IMM => WrOp::WriteImm {
            raddr: unsafe { wr.wr.rdma.remote_addr },
            rkey: unsafe { wr.wr.rdma.rkey },
            imm: unsafe { wr.__bindgen_anon_1.imm_data },
        },
        IBV_WR_RDMA_READ => WrOp::Read {
            raddr: unsafe { wr.wr.rdma.remote_addr },
            rkey: unsafe { wr.wr.rdma.rkey },
        },
        IBV_WR_ATOMIC_CMP_AND_SWP => WrOp::CmpSwp {
            raddr: unsafe { wr.wr.atomic.remote_addr },
            rkey: unsafe { wr.wr.atomic.rkey },
            compare: unsafe { wr.wr.atomic.compare_add },
            swap: unsafe { wr.wr.atomic.swap },
        },
        // FETCH_AND_ADD has no swap value: `atomic.swap` is not read.
        IBV_WR_ATOMIC_FETCH_AND_ADD => WrOp::FetchAdd {
            raddr: unsafe { wr.wr.atomic.remote_addr },
            rkey: unsafe { wr.wr.atomic.rkey },
            add: unsafe { wr.wr.atomic.compare_add },
        },
        IBV_WR_LOCAL_INV => WrOp::LocalInv {
            rkey: unsafe { wr.__bindgen_anon_1.invalidate_rkey },
        },
        IBV_WR_BIND_MW => {
            let (mw_key, mr_key) = bind()?;
            // SAFETY: the fields of the bind member that BIND_MW uses (`bind` reads the
            // window and region pointers).
            let (new_key, addr, length, flags) = unsafe {
                let b = &wr.__bindgen_anon_2.bind_mw;
                (
                    b.rkey,
                    b.bind_info.addr,
                    b.bind_info.length,
                    b.bind_info.mw_access_flags,
                )
            };
            let access = mw_access_from_ibv(flags)
                .map_err(|_| Refused("BIND_MW with access bits that are not qhca's"))?;
            WrOp::BindMw(MwBind {
                mw_key,
                new_key,
                mr_key,
                addr,
                length,
                access: access.0,
            })
        }
        _ => {
            return Err(Refused(
                "an opcode qhca does not have (TSO, ATOMIC_WRITE, FLUSH, driver)",
            ))
        }
    })
}

/// The flags of a send request; `sig_all` is the QP's `sq_sig_all`.
pub fn send_flags(flags: c_uint, sig_all: bool) -> Result<SendFlags, Refused> {
    let known = IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;
    if flags & !known != 0 {
        return Err(Refused("send flags qhca does not have (IP_CSUM)"));
    }
    let mut f = SendFlags::NONE;
    if sig_all || flags & IBV_SEND_SIGNALED != 0 {
        f = f | SendFlags::SIGNALED;
    }
    if flags & IBV_SEND_SOLICITED != 0 {
        f = f | SendFlags::SOLICITED;
    }
    if flags & IBV_SEND_FENCE != 0 {
        f = f | SendFlags::FENCE;
    }
    Ok(f)
}

/// Copies the non-empty entries of `list` into `out`; returns how many. A zero-length entry
/// carries nothing and is left out (as rdma-core's providers do); more than `out` holds is
/// refused.
pub fn sges(list: &[ibv_sge], out: &mut [Sge]) -> Result<usize, Refused> {
    let mut n = 0;
    for s in list.iter().filter(|s| s.length != 0) {
        let slot = out
            .get_mut(n)
            .ok_or(Refused("more scatter/gather entries than the QP allows"))?;
        *slot = Sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        };
        n += 1;
    }
    Ok(n)
}

fn status_to_ibv(s: WcStatus) -> ibv_wc_status {
    match s {
        WcStatus::Success => IBV_WC_SUCCESS,
        WcStatus::LocLenErr => IBV_WC_LOC_LEN_ERR,
        WcStatus::LocQpOpErr => IBV_WC_LOC_QP_OP_ERR,
        WcStatus::LocProtErr => IBV_WC_LOC_PROT_ERR,
        WcStatus::WrFlushErr => IBV_WC_WR_FLUSH_ERR,
        WcStatus::MwBindErr => IBV_WC_MW_BIND_ERR,
        WcStatus::BadRespErr => IBV_WC_BAD_RESP_ERR,
        WcStatus::LocAccessErr => IBV_WC_LOC_ACCESS_ERR,
        WcStatus::RemInvReqErr => IBV_WC_REM_INV_REQ_ERR,
        WcStatus::RemAccessErr => IBV_WC_REM_ACCESS_ERR,
        WcStatus::RemOpErr => IBV_WC_REM_OP_ERR,
        WcStatus::RetryExcErr => IBV_WC_RETRY_EXC_ERR,
        WcStatus::RnrRetryExcErr => IBV_WC_RNR_RETRY_EXC_ERR,
        WcStatus::GeneralErr | WcStatus::Unknown(_) => IBV_WC_GENERAL_ERR,
    }
}

fn opcode_to_ibv(o: WcOpcode) -> ibv_wc_opcode {
    match o {
        WcOpcode::Send => IBV_WC_SEND,
        WcOpcode::RdmaWrite => IBV_WC_RDMA_WRITE,
        WcOpcode::RdmaRead => IBV_WC_RDMA_READ,
        WcOpcode::CompSwap => IBV_WC_COMP_SWAP,
        WcOpcode::FetchAdd => IBV_WC_FETCH_ADD,
        WcOpcode::BindMw => IBV_WC_BIND_MW,
        WcOpcode::LocalInv => IBV_WC_LOCAL_INV,
        WcOpcode::Recv => IBV_WC_RECV,
        WcOpcode::RecvRdmaWithImm => IBV_WC_RECV_RDMA_WITH_IMM,
        // Only error completions carry an opcode this ABI does not name.
        WcOpcode::Unknown(_) => IBV_WC_SEND,
    }
}

/// A completion as `struct ibv_wc`. The immediate data is the 32 bits the sender posted, in
/// the same byte order (verbs.h calls both `__be32`: the program converts).
pub fn wc_to_ibv(wc: &Wc) -> ibv_wc {
    let mut flags = 0;
    let mut extra = 0;
    if let Some(imm) = wc.imm {
        flags |= IBV_WC_WITH_IMM;
        extra = imm;
    }
    if let Some(rkey) = wc.invalidated_rkey {
        flags |= IBV_WC_WITH_INV;
        extra = rkey;
    }
    if wc.with_grh {
        flags |= IBV_WC_GRH;
    }
    ibv_wc {
        wr_id: wc.wr_id,
        status: status_to_ibv(wc.status),
        opcode: opcode_to_ibv(wc.opcode),
        vendor_err: u32::from(wc.vendor_err),
        byte_len: wc.byte_len,
        __bindgen_anon_1: ibv_wc__bindgen_ty_1 { imm_data: extra },
        qp_num: wc.qpn,
        src_qp: wc.src_qp,
        wc_flags: flags,
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
    }
}

/// `ibv_poll_cq` over `poll` (a CQ's poll into qhca's completions): up to `num` completions
/// converted into `out`, polled in chunks; returns how many.
///
/// # Safety
///
/// `out` is NULL or room for `num` completions (ibv_poll_cq(3)).
#[inline]
pub unsafe fn poll_into(
    num: core::ffi::c_int,
    out: *mut ibv_wc,
    poll: impl FnMut(&mut [Wc]) -> usize,
) -> core::ffi::c_int {
    let want = usize::try_from(num).unwrap_or(0);
    if want == 0 || out.is_null() {
        return 0;
    }
    // One at a time (the common poll loop) goes through a chunk of one: filling sixteen
    // completions first costs more than the poll of an empty CQ.
    if want == 1 {
        // SAFETY: the caller's promise.
        return unsafe { poll_chunks::<1>(want, out, poll) };
    }
    // SAFETY: the caller's promise.
    unsafe { poll_chunks::<16>(want, out, poll) }
}

/// `poll_into` in chunks of up to `CHUNK` completions.
///
/// # Safety
///
/// As `poll_into`, with `out` not NULL and `want` not 0.
#[inline(always)]
unsafe fn poll_chunks<const CHUNK: usize>(
    want: usize,
    out: *mut ibv_wc,
    mut poll: impl FnMut(&mut [Wc]) -> usize,
) -> core::ffi::c_int {
    let mut buf = [Wc::default(); CHUNK];
    let mut done = 0;
    while done < want {
        let n = (want - done).min(CHUNK);
        let got = poll(&mut buf[..n]);
        for (i, w) in buf[..got].iter().enumerate() {
            // SAFETY: the caller's promise: room for `num` completions; `done + i < num`.
            unsafe { out.add(done + i).write(wc_to_ibv(w)) };
        }
        done += got;
        if got < n {
            break;
        }
    }
    core::ffi::c_int::try_from(done).unwrap_or(core::ffi::c_int::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wr(opcode: ibv_wr_opcode) -> ibv_send_wr {
        ibv_send_wr {
            opcode,
            ..Default::default()
        }
    }

    fn no_bind() -> Result<(u32, u32), Refused> {
        panic!("not a bind")
    }

    /// `send_op` of a request that `wr` made (all zero) and the test filled in.
    fn op(
        w: &ibv_send_wr,
        bind: impl FnOnce() -> Result<(u32, u32), Refused>,
    ) -> Result<WrOp, Refused> {
        // SAFETY: every byte of `w` is initialised (`Default` zeroes the unions).
        unsafe { send_op(w, bind) }
    }

    #[test]
    fn send_opcodes_map_to_the_providers() {
        let mut w = wr(IBV_WR_RDMA_WRITE_WITH_IMM);
        w.wr.rdma = ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: 0x1000,
            rkey: 7,
        };
        w.__bindgen_anon_1.imm_data = 0x1234_5678;
        assert_eq!(
            op(&w, no_bind),
            Ok(WrOp::WriteImm {
                raddr: 0x1000,
                rkey: 7,
                imm: 0x1234_5678
            })
        );
        let mut w = wr(IBV_WR_ATOMIC_CMP_AND_SWP);
        w.wr.atomic = ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr: 8,
            compare_add: 1,
            swap: 2,
            rkey: 3,
        };
        assert_eq!(
            op(&w, no_bind),
            Ok(WrOp::CmpSwp {
                raddr: 8,
                rkey: 3,
                compare: 1,
                swap: 2
            })
        );
        let mut w = wr(IBV_WR_ATOMIC_FETCH_AND_ADD);
        w.wr.atomic.compare_add = 5;
        w.wr.atomic.remote_addr = 16;
        assert!(matches!(
            op(&w, no_bind),
            Ok(WrOp::FetchAdd {
                add: 5,
                raddr: 16,
                ..
            })
        ));
        let mut w = wr(IBV_WR_SEND_WITH_INV);
        w.__bindgen_anon_1.invalidate_rkey = 0x42;
        assert_eq!(op(&w, no_bind), Ok(WrOp::SendInv { rkey: 0x42 }));
        assert!(op(&wr(IBV_WR_TSO), no_bind).is_err());
        assert!(op(&wr(99), no_bind).is_err());
    }

    #[test]
    fn a_bind_takes_the_new_key_from_the_request() {
        let mut w = wr(IBV_WR_BIND_MW);
        w.__bindgen_anon_2.bind_mw.rkey = 0x101;
        w.__bindgen_anon_2.bind_mw.bind_info.addr = 0x2000;
        w.__bindgen_anon_2.bind_mw.bind_info.length = 64;
        w.__bindgen_anon_2.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
        let bound = op(&w, || Ok((0x100, 0x55))).unwrap();
        assert_eq!(
            bound,
            WrOp::BindMw(MwBind {
                mw_key: 0x100,
                new_key: 0x101,
                mr_key: 0x55,
                addr: 0x2000,
                length: 64,
                access: qhca::Access::REMOTE_READ.0,
            })
        );
        assert_eq!(
            op(&w, || Err(Refused("no window"))),
            Err(Refused("no window"))
        );
    }

    #[test]
    fn flags_and_sig_all() {
        assert_eq!(send_flags(0, false), Ok(SendFlags::NONE));
        assert_eq!(send_flags(0, true), Ok(SendFlags::SIGNALED));
        let f = send_flags(IBV_SEND_SIGNALED | IBV_SEND_FENCE | IBV_SEND_INLINE, false).unwrap();
        assert!(f.contains(SendFlags::SIGNALED | SendFlags::FENCE));
        assert!(
            !f.contains(SendFlags::INLINE),
            "the encoder sets INLINE itself"
        );
        assert!(send_flags(IBV_SEND_IP_CSUM, false).is_err());
    }

    #[test]
    fn empty_entries_are_left_out_and_too_many_refused() {
        let list = [
            ibv_sge {
                addr: 1,
                length: 4,
                lkey: 9,
            },
            ibv_sge {
                addr: 2,
                length: 0,
                lkey: 9,
            },
            ibv_sge {
                addr: 3,
                length: 8,
                lkey: 9,
            },
        ];
        let mut out = [Sge::default(); 2];
        assert_eq!(sges(&list, &mut out), Ok(2));
        assert_eq!(
            out[1],
            Sge {
                addr: 3,
                length: 8,
                lkey: 9
            }
        );
        let mut one = [Sge::default(); 1];
        assert!(sges(&list, &mut one).is_err());
    }

    #[test]
    fn completions_carry_imm_inv_and_grh_flags() {
        let wc = Wc {
            wr_id: 5,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 12,
            imm: Some(0xaabb_ccdd),
            qpn: 0x1001,
            src_qp: 0x1002,
            ..Wc::default()
        };
        let w = wc_to_ibv(&wc);
        assert_eq!(
            (w.wr_id, w.opcode, w.byte_len),
            (5, IBV_WC_RECV_RDMA_WITH_IMM, 12)
        );
        assert_eq!(w.wc_flags, IBV_WC_WITH_IMM);
        // SAFETY: a plain integer union.
        assert_eq!(unsafe { w.__bindgen_anon_1.imm_data }, 0xaabb_ccdd);
        assert_eq!((w.qp_num, w.src_qp), (0x1001, 0x1002));
        let wc = Wc {
            opcode: WcOpcode::Recv,
            invalidated_rkey: Some(0x77),
            with_grh: true,
            status: WcStatus::RemAccessErr,
            ..Wc::default()
        };
        let w = wc_to_ibv(&wc);
        assert_eq!(w.wc_flags, IBV_WC_WITH_INV | IBV_WC_GRH);
        assert_eq!(w.status, IBV_WC_REM_ACCESS_ERR);
        // SAFETY: a plain integer union.
        assert_eq!(unsafe { w.__bindgen_anon_1.invalidated_rkey }, 0x77);
    }
}
