// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The work-request API of extended QPs (`struct ibv_qp_ex`: `ibv_wr_start`, the `ibv_wr_*` ops
//! and setters, `ibv_wr_complete`, `ibv_wr_abort`), for the QPs `create_qp_ex` makes with
//! `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
//!
//! Between `wr_start` and `wr_complete` the QP's [`WrBatch`] stages each op as the request the
//! `qhca` crate posts ([`SendWr`]: its [`WrOp`], `SendFlags` from the program's `qpx->wr_flags`
//! and the QP's `sq_sig_all`, `qpx->wr_id` as it is when the op is called), with the setters'
//! SGEs and inline data copied into the batch's own buffers (kept from batch to batch: no
//! allocation once they have grown to the program's batches); address handles, windows and
//! regions are looked up when the op or setter names them. `wr_complete` checks the whole
//! batch, then writes it into the send queue under the QP's posting lock
//! ([`Qp::post_batch`]), all of it or, if the send queue has no room for all of it, none
//! (`ENOMEM`), with one doorbell per eight requests; `wr_abort` drops it. No system call, and
//! no `ibv_send_wr` is built: a batch of one WRITE costs about what `ibv_post_send` of one does.

//! Ops: RC has SEND, SEND_WITH_IMM, SEND_WITH_INV, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ,
//! ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD, LOCAL_INV and BIND_MW (of type 2 windows, as
//! `ibv_post_send`'s); UD has SEND and SEND_WITH_IMM, with `wr_set_ud_addr`. Every op of the
//! QP's type is set, whichever `send_ops_flags` asked for; the ops qhca lacks (TSO,
//! ATOMIC_WRITE, FLUSH, XRC) stay NULL and asking for them is `EOPNOTSUPP`, as rxe answers.
//!
//! # Errors
//!
//! As rxe and mlx5, an op or setter that cannot be honoured records an errno, the rest of the
//! batch is ignored, and `wr_complete` returns it and posts nothing: `EINVAL` for an op or
//! setter outside a batch (then `wr_complete` is `EINVAL` too), a setter before any op, unknown
//! `wr_flags`, more SGEs than the QP's `max_send_sge`, more inline data than its
//! `max_inline_data`, inline data on an op that carries none inline (READ, atomics), data on
//! LOCAL_INV or BIND_MW, an atomic whose SGE is not one aligned 8-byte entry, a UD send without
//! a qhca address handle, a message over 2 GiB or a datagram over the MTU, a window or region
//! that is not this context's; `ENOMEM` for more requests than the send queue holds. A refusal
//! the checks do not foresee stops the post at that request, as `ibv_post_send` does.
//!
//! # Threads
//!
//! libibverbs's contract: a batch is built by one thread, from `wr_start` to `wr_complete` or
//! `wr_abort`, and no other thread builds one on the QP meanwhile. The batch is behind a lock
//! of its own that each call takes briefly (no system call while uncontended), so a program
//! that breaks the contract mixes requests into one batch but cannot corrupt anything. The QP's
//! posting lock is held only inside `wr_complete`: `ibv_post_send` on other threads goes on
//! during a batch, and the batch's requests land in the send queue together.

use core::ffi::{c_int, c_uint, c_void};
use core::ptr;

use qhca::{MwBind, QpLayout, QpType, SendFlags, SendWr, Sge, UdDest, WrOp, UD_MAX_MSG};
use qhca_verbs_abi::access::mw_access_from_ibv;
use qhca_verbs_abi::ffi::*;
use qhca_verbs_abi::post::Objects;
use qhca_verbs_abi::wr::send_flags;

use crate::qp::{debug, Ours, Qp};

/// `send_ops_flags` of an RC QP.
const RC_SEND_OPS: u64 = (IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW) as u64;

/// `send_ops_flags` of a UD QP.
const UD_SEND_OPS: u64 = (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM) as u64;

/// The largest message, as the post path allows it.
const MAX_MSG: u64 = 1 << 31;

/// Whether `create_qp_ex` honours `a`, or the errno it refuses it with: unknown `comp_mask` bits
/// and a missing PD are `EINVAL`; XRC, create flags (the mask's bit with no flag set is
/// honoured: it asks for nothing), TSO, RSS and send ops the QP's type does not have in qhca are
/// `EOPNOTSUPP` (rxe's answer). The QP type and the rest are `create_qp`'s.
pub(crate) fn check_attr(a: &ibv_qp_init_attr_ex) -> Result<(), c_int> {
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_CREATE_FLAGS
        | IBV_QP_INIT_ATTR_MAX_TSO_HEADER
        | IBV_QP_INIT_ATTR_IND_TABLE
        | IBV_QP_INIT_ATTR_RX_HASH
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 || a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return Err(libc::EINVAL);
    }
    let mut honoured = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.create_flags == 0 {
        honoured |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
    }
    if a.comp_mask & !honoured != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        let ops = match a.qp_type {
            IBV_QPT_RC => RC_SEND_OPS,
            IBV_QPT_UD => UD_SEND_OPS,
            _ => return Err(libc::EOPNOTSUPP),
        };
        if a.send_ops_flags & !ops != 0 {
            return Err(libc::EOPNOTSUPP);
        }
    }
    Ok(())
}

/// Fills in the ops of `struct ibv_qp_ex` for an RC QP, or a UD one (`ud`).
pub(crate) fn set_ops(ex: &mut ibv_qp_ex, ud: bool) {
    ex.wr_start = Some(wr_start);
    ex.wr_complete = Some(wr_complete);
    ex.wr_abort = Some(wr_abort);
    ex.wr_send = Some(wr_send);
    ex.wr_send_imm = Some(wr_send_imm);
    ex.wr_set_sge = Some(wr_set_sge);
    ex.wr_set_sge_list = Some(wr_set_sge_list);
    ex.wr_set_inline_data = Some(wr_set_inline_data);
    ex.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    if ud {
        ex.wr_set_ud_addr = Some(wr_set_ud_addr);
        return;
    }
    ex.wr_send_inv = Some(wr_send_inv);
    ex.wr_rdma_write = Some(wr_rdma_write);
    ex.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    ex.wr_rdma_read = Some(wr_rdma_read);
    ex.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    ex.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    ex.wr_local_inv = Some(wr_local_inv);
    ex.wr_bind_mw = Some(wr_bind_mw);
}

/// What a QP's batch may hold, from its ring layout, and how it signals.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// SGEs per request.
    pub(crate) max_sge: u32,
    /// Inline bytes per request.
    pub(crate) max_inline: u32,
    /// Requests in the send queue, and so in one batch.
    pub(crate) depth: u32,
    /// A UD QP: each request needs `wr_set_ud_addr`.
    pub(crate) ud: bool,
    /// The QP signals every request (`sq_sig_all`).
    pub(crate) sig_all: bool,
}

impl Limits {
    /// The limits of a QP of `qp_type` over rings of `layout`.
    pub(crate) fn of(layout: &QpLayout, qp_type: QpType, sig_all: bool) -> Limits {
        Limits {
            max_sge: layout.max_sge,
            max_inline: layout.max_inline,
            depth: layout.sq_depth(),
            ud: qp_type == QpType::Ud,
            sig_all,
        }
    }
}

/// What data a request carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Data {
    /// SGEs or inline data (SEND, WRITE).
    MayInline,
    /// SGEs (READ).
    Sges,
    /// One aligned 8-byte SGE (the atomics), at this remote address.
    Atomic { raddr: u64 },
    /// None (LOCAL_INV, BIND_MW).
    Nothing,
}

/// Where a request's data is in the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Payload {
    /// `sges[first..first + n]`.
    Sges { first: usize, n: usize },
    /// `inline[at..at + len]`.
    Inline { at: usize, len: usize },
}

/// One request of a batch, as the `qhca` crate posts it.
#[derive(Clone, Copy, Debug)]
struct Staged {
    wr_id: u64,
    op: WrOp,
    flags: SendFlags,
    data: Data,
    payload: Payload,
    ud: Option<UdDest>,
    /// BIND_MW: the window, whose key is the op's new key once posted (`ibv_mw.rkey`).
    mw: *mut ibv_mw,
}

/// The requests of one batch of the work-request API, and the errno of the first op or setter
/// that failed.
///
/// # Invariants
///
/// Each staged request's payload names SGEs inside `sges` or bytes inside `inline`.
pub(crate) struct WrBatch {
    limits: Limits,
    open: bool,
    err: c_int,
    staged: Vec<Staged>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
}

// SAFETY: the raw pointers in the staged requests are the program's windows, only carried;
// nothing ties them to a thread.
unsafe impl Send for WrBatch {}

/// A checked batch, handed to the post: its requests as the `qhca` crate posts them.
pub(crate) struct Ready<'a> {
    staged: &'a [Staged],
    sges: &'a [Sge],
    inline: &'a [u8],
}

impl<'a> Ready<'a> {
    /// How many requests.
    pub(crate) fn len(&self) -> usize {
        self.staged.len()
    }

    /// Request `i` (below [`Ready::len`]).
    pub(crate) fn wr(&self, i: usize) -> SendWr<'a> {
        let s = &self.staged[i];
        let mut w = match s.payload {
            Payload::Sges { first, n } => SendWr::new(s.wr_id, s.op, &self.sges[first..first + n]),
            Payload::Inline { at, len } => {
                SendWr::inline(s.wr_id, s.op, &self.inline[at..at + len])
            }
        }
        .with_flags(s.flags);
        if let Some(dest) = s.ud {
            w = w.to_ud(dest);
        }
        w
    }

    /// The windows the first `posted` requests bound, with their new keys.
    pub(crate) fn binds(&self, posted: usize) -> impl Iterator<Item = (*mut ibv_mw, u32)> + '_ {
        self.staged[..posted].iter().filter_map(|s| match s.op {
            WrOp::BindMw(b) => Some((s.mw, b.new_key)),
            _ => None,
        })
    }
}

impl WrBatch {
    pub(crate) fn new(limits: Limits) -> WrBatch {
        WrBatch {
            limits,
            open: false,
            err: 0,
            staged: Vec::new(),
            sges: Vec::new(),
            inline: Vec::new(),
        }
    }

    /// Empties the batch (its buffers keep their room) and closes it.
    fn clear(&mut self) {
        self.open = false;
        self.err = 0;
        self.staged.clear();
        self.sges.clear();
        self.inline.clear();
    }

    /// `wr_start`: a new, empty batch (one left open is dropped).
    pub(crate) fn start(&mut self) {
        self.clear();
        self.open = true;
    }

    /// `wr_abort`: drops the batch; nothing is posted.
    pub(crate) fn abort(&mut self) {
        self.clear();
    }

    /// Records the first failure of the batch (outside one: it stays until the next start).
    fn fail(&mut self, errno: c_int, why: &str) {
        debug(format_args!("ibv_wr_*: {why}"));
        if self.err == 0 {
            self.err = errno;
        }
    }

    /// Whether a call may add to the batch: it is open and nothing failed yet.
    fn usable(&mut self, call: &str) -> bool {
        if !self.open {
            self.fail(libc::EINVAL, call);
            return false;
        }
        self.err == 0
    }

    /// An op: a new request of `op` carrying `data`, with the program's `wr_id` and `wr_flags`
    /// (`mw`: the window a BIND_MW binds, NULL otherwise).
    fn push(&mut self, wr_id: u64, flags: c_uint, op: WrOp, data: Data, mw: *mut ibv_mw) {
        if !self.usable("an op outside ibv_wr_start..ibv_wr_complete") {
            return;
        }
        if self.staged.len() >= self.limits.depth as usize {
            return self.fail(libc::ENOMEM, "more requests than the send queue holds");
        }
        // Inline data is the setters' to ask for (`wr_set_inline_data`), as mlx5's.
        let Ok(flags) = send_flags(flags & !IBV_SEND_INLINE, self.limits.sig_all) else {
            return self.fail(libc::EINVAL, "wr_flags qhca does not have");
        };
        self.staged.push(Staged {
            wr_id,
            op,
            flags,
            data,
            payload: Payload::Sges {
                first: self.sges.len(),
                n: 0,
            },
            ud: None,
            mw,
        });
    }

    /// The request the setters apply to: the last op's.
    fn current(&mut self, call: &str) -> Option<&mut Staged> {
        if !self.usable(call) {
            return None;
        }
        if self.staged.is_empty() {
            self.fail(libc::EINVAL, "a setter before any op of the batch");
        }
        self.staged.last_mut()
    }

    /// `wr_set_sge`, `wr_set_sge_list`: the request's SGEs are `list` (replacing any set). A
    /// zero-length entry carries nothing and is left out, as `ibv_post_send`'s.
    pub(crate) fn set_sges(&mut self, list: &[ibv_sge]) {
        let (max_sge, first) = (self.limits.max_sge as usize, self.sges.len());
        let Some(s) = self.current("ibv_wr_set_sge") else {
            return;
        };
        let kept = list.iter().filter(|e| e.length != 0);
        let n = kept.clone().count();
        let why = match s.data {
            Data::Nothing => "data on LOCAL_INV or BIND_MW",
            _ if n > max_sge => "more SGEs than the QP's max_send_sge",
            _ => {
                s.payload = Payload::Sges { first, n };
                self.sges.extend(kept.map(|e| Sge {
                    addr: e.addr,
                    length: e.length,
                    lkey: e.lkey,
                }));
                return;
            }
        };
        self.fail(libc::EINVAL, why);
    }

    /// `wr_set_inline_data`, `wr_set_inline_data_list`: the request's data is the bytes of the
    /// buffers `bufs` names (`(address, length)`), copied now (replacing any set). The lengths
    /// are added up first: too many bytes is `EINVAL` before any is read.
    ///
    /// # Safety
    ///
    /// Each `(addr, len)` of `bufs` is `len` bytes the program lets us read (any address if 0).
    pub(crate) unsafe fn set_inline<I>(&mut self, bufs: I)
    where
        I: Iterator<Item = (*const u8, usize)> + Clone,
    {
        let (max_inline, at) = (self.limits.max_inline as usize, self.inline.len());
        let Some(s) = self.current("ibv_wr_set_inline_data") else {
            return;
        };
        let total = bufs
            .clone()
            .try_fold(0usize, |t, (_, len)| t.checked_add(len))
            .filter(|&t| t <= max_inline);
        let why = match (s.data, total) {
            (Data::MayInline, Some(len)) => {
                s.payload = Payload::Inline { at, len };
                for (addr, len) in bufs.filter(|&(_, len)| len > 0) {
                    // SAFETY: the caller's promise: `len` readable bytes at `addr`, which the
                    // program does not write during the call (the data is copied before it
                    // returns, as ibv_wr_set_inline_data(3) allows the program to reuse it).
                    self.inline
                        .extend_from_slice(unsafe { core::slice::from_raw_parts(addr, len) });
                }
                return;
            }
            (Data::MayInline, None) => "more inline data than the QP's max_inline_data",
            _ => "inline data on an op that carries none inline",
        };
        self.fail(libc::EINVAL, why);
    }

    /// `wr_set_ud_addr`, its handle resolved by the caller: the request's UD destination.
    fn set_ud(&mut self, dest: UdDest) {
        if let Some(s) = self.current("ibv_wr_set_ud_addr") {
            s.ud = Some(dest);
        }
    }

    /// Why request `s` cannot be posted, if it cannot.
    fn refusal(&self, s: &Staged) -> Option<&'static str> {
        let len = match s.payload {
            Payload::Sges { first, n } => self.sges[first..first + n]
                .iter()
                .map(|e| u64::from(e.length))
                .sum(),
            Payload::Inline { len, .. } => len as u64,
        };
        if self.limits.ud && s.ud.is_none() {
            return Some("a UD send without ibv_wr_set_ud_addr");
        }
        if let Data::Atomic { raddr } = s.data {
            let one = match s.payload {
                Payload::Sges { first, n: 1 } => Some(self.sges[first]),
                _ => None,
            };
            let ok = one.is_some_and(|e| e.length == 8 && e.addr % 8 == 0) && raddr % 8 == 0;
            if !ok {
                return Some("an atomic needs one aligned 8-byte SGE and remote address");
            }
        }
        if len > MAX_MSG {
            return Some("a message over 2 GiB");
        }
        if self.limits.ud && len > UD_MAX_MSG as u64 {
            return Some("a datagram over the MTU");
        }
        None
    }

    /// `wr_complete`: checks the batch and hands it to `post` (which answers the post's
    /// errno), unless it is empty; then empties the batch. The errno of a failed op or setter
    /// or check, with nothing posted; or `post`'s answer.
    pub(crate) fn complete(&mut self, post: impl FnOnce(Ready<'_>) -> c_int) -> c_int {
        if !self.open {
            self.fail(libc::EINVAL, "ibv_wr_complete without ibv_wr_start");
        }
        if self.err == 0 {
            if let Some(why) = self.staged.iter().find_map(|s| self.refusal(s)) {
                self.fail(libc::EINVAL, why);
            }
        }
        let ret = match self.err {
            0 if self.staged.is_empty() => 0,
            0 => post(Ready {
                staged: &self.staged,
                sges: &self.sges,
                inline: &self.inline,
            }),
            e => e,
        };
        self.clear();
        ret
    }
}

// ---- the ops of `struct ibv_qp_ex` -----------------------------------------------------------

/// Runs `f` on the batch of the extended QP `qp`.
///
/// # Safety
///
/// `qp` is an extended QP of ours, live (libibverbs calls these ops only through its `struct
/// ibv_qp_ex`).
unsafe fn with_batch<R>(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut WrBatch) -> R) -> R {
    // SAFETY: the caller's promise; `qp_base` is at offset 0.
    let q = unsafe { Qp::of(qp.cast()) };
    f(&mut q.batch())
}

/// An op: a request of `op` with the program's `qp->wr_id` and `qp->wr_flags` (`mw`: the window
/// of a BIND_MW, NULL otherwise).
///
/// # Safety
///
/// As [`with_batch`].
unsafe fn op(qp: *mut ibv_qp_ex, op: WrOp, data: Data, mw: *mut ibv_mw) {
    // SAFETY: the caller's promise; the two fields the program sets before an op (verbs.h),
    // read on their own, with no reference to the struct.
    let (wr_id, flags) = unsafe {
        (
            (&raw const (*qp).wr_id).read(),
            (&raw const (*qp).wr_flags).read(),
        )
    };
    // SAFETY: the caller's promise.
    unsafe { with_batch(qp, |b| b.push(wr_id, flags, op, data, mw)) }
}

/// `wr_start` (`ibv_wr_start`).
unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: libibverbs's call on an extended QP of ours.
    unsafe { with_batch(qp, WrBatch::start) }
}

/// `wr_complete` (`ibv_wr_complete`): posts the batch (0), or nothing (an errno).
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: libibverbs's call on an extended QP of ours.
    let q = unsafe { Qp::of(qp.cast()) };
    // Batch, then posting: no path takes them the other way round.
    // SAFETY: the windows of the batch's BIND_MWs are the program's, live (the ops' contract).
    q.batch().complete(|ready| unsafe { q.post_batch(&ready) })
}

/// `wr_abort` (`ibv_wr_abort`).
unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: libibverbs's call on an extended QP of ours.
    unsafe { with_batch(qp, WrBatch::abort) }
}

/// The ops that add one request of an operation to the batch: `fn NAME(ARGS) = OP, DATA;` makes
/// `unsafe extern "C" fn NAME(qp, ARGS)`, which pushes a request of `OP` (a [`WrOp`] of the
/// arguments) whose data is `DATA` ([`Data`]).
macro_rules! batch_ops {
    ($($(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) = $op:expr, $data:expr;)*) => {$(
        $(#[$doc])*
        unsafe extern "C" fn $name(qp: *mut ibv_qp_ex, $($arg: $ty),*) {
            // SAFETY: libibverbs's call on an extended QP of ours.
            unsafe { op(qp, $op, $data, ptr::null_mut()) }
        }
    )*};
}

batch_ops! {
    /// `wr_send` (`ibv_wr_send`).
    fn wr_send() = WrOp::Send, Data::MayInline;
    /// `wr_send_imm` (`ibv_wr_send_imm`).
    fn wr_send_imm(imm_data: __be32) = WrOp::SendImm(imm_data), Data::MayInline;
    /// `wr_send_inv` (`ibv_wr_send_inv`).
    fn wr_send_inv(invalidate_rkey: u32) =
        WrOp::SendInv { rkey: invalidate_rkey }, Data::MayInline;
    /// `wr_rdma_write` (`ibv_wr_rdma_write`).
    fn wr_rdma_write(rkey: u32, remote_addr: u64) =
        WrOp::Write { raddr: remote_addr, rkey }, Data::MayInline;
    /// `wr_rdma_write_imm` (`ibv_wr_rdma_write_imm`).
    fn wr_rdma_write_imm(rkey: u32, remote_addr: u64, imm_data: __be32) =
        WrOp::WriteImm { raddr: remote_addr, rkey, imm: imm_data }, Data::MayInline;
    /// `wr_rdma_read` (`ibv_wr_rdma_read`).
    fn wr_rdma_read(rkey: u32, remote_addr: u64) =
        WrOp::Read { raddr: remote_addr, rkey }, Data::Sges;
    /// `wr_atomic_cmp_swp` (`ibv_wr_atomic_cmp_swp`).
    fn wr_atomic_cmp_swp(rkey: u32, remote_addr: u64, compare: u64, swap: u64) =
        WrOp::CmpSwp { raddr: remote_addr, rkey, compare, swap },
        Data::Atomic { raddr: remote_addr };
    /// `wr_atomic_fetch_add` (`ibv_wr_atomic_fetch_add`).
    fn wr_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64) =
        WrOp::FetchAdd { raddr: remote_addr, rkey, add }, Data::Atomic { raddr: remote_addr };
    /// `wr_local_inv` (`ibv_wr_local_inv`).
    fn wr_local_inv(invalidate_rkey: u32) = WrOp::LocalInv { rkey: invalidate_rkey }, Data::Nothing;
}

/// `wr_bind_mw` (`ibv_wr_bind_mw`): binds window `mw` with its new key `rkey`, as
/// `ibv_post_send`'s BIND_MW (the window's and region's keys are read now). `EINVAL` unless the
/// window (and the region, unless the length is 0) is this context's and the access is qhca's.
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    bind_info: *const ibv_mw_bind_info,
) {
    // SAFETY: libibverbs's call on an extended QP of ours: its context, set at create.
    let ours = Ours(unsafe { Qp::of(qp.cast()) }.context());
    // SAFETY: NULL or the program's live bind information (ibv_wr_bind_mw(3)), copied out.
    let info = unsafe { (!bind_info.is_null()).then(|| *bind_info) };
    let bind = info.and_then(|info| {
        // SAFETY: the window and region are NULL or the program's, live (ibv_wr_bind_mw(3)).
        let mw_key = unsafe { ours.window_key(mw) }?;
        let mr_key = match info.length {
            0 => 0,
            // SAFETY: as above.
            _ => unsafe { ours.region_lkey(info.mr) }?,
        };
        let access = mw_access_from_ibv(info.mw_access_flags).ok()?;
        Some(WrOp::BindMw(MwBind {
            mw_key,
            new_key: rkey,
            mr_key,
            addr: info.addr,
            length: info.length,
            access: access.0,
        }))
    });
    match bind {
        // SAFETY: libibverbs's call on an extended QP of ours.
        Some(bind) => unsafe { op(qp, bind, Data::Nothing, mw) },
        // SAFETY: libibverbs's call on an extended QP of ours.
        None => unsafe {
            with_batch(qp, |b| {
                if b.usable("ibv_wr_bind_mw outside a batch") {
                    b.fail(
                        libc::EINVAL,
                        "ibv_wr_bind_mw of a window or region not qhca's",
                    );
                }
            })
        },
    }
}

/// `wr_set_sge` (`ibv_wr_set_sge`).
unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let sge = ibv_sge { addr, length, lkey };
    // SAFETY: libibverbs's call on an extended QP of ours.
    unsafe { with_batch(qp, |b| b.set_sges(&[sge])) }
}

/// `wr_set_sge_list` (`ibv_wr_set_sge_list`).
unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    let list: &[ibv_sge] = if num_sge == 0 || sg_list.is_null() {
        &[]
    } else {
        // SAFETY: the program passes `num_sge` entries at `sg_list` (ibv_wr_set_sge_list(3)),
        // which it does not write during the call (they are copied).
        unsafe { core::slice::from_raw_parts(sg_list, num_sge) }
    };
    // SAFETY: libibverbs's call on an extended QP of ours.
    unsafe { with_batch(qp, |b| b.set_sges(list)) }
}

/// `wr_set_inline_data` (`ibv_wr_set_inline_data`).
unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let buf = core::iter::once((addr.cast_const().cast::<u8>(), length));
    // SAFETY: libibverbs's call on an extended QP of ours; the program's `length` bytes at
    // `addr` (ibv_wr_set_inline_data(3)).
    unsafe { with_batch(qp, |b| b.set_inline(buf)) }
}

/// `wr_set_inline_data_list` (`ibv_wr_set_inline_data_list`).
unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    let list: &[ibv_data_buf] = if num_buf == 0 || buf_list.is_null() {
        &[]
    } else {
        // SAFETY: the program passes `num_buf` entries at `buf_list`
        // (ibv_wr_set_inline_data_list(3)), which it does not write during the call.
        unsafe { core::slice::from_raw_parts(buf_list, num_buf) }
    };
    let bufs = list
        .iter()
        .map(|d| (d.addr.cast_const().cast::<u8>(), d.length));
    // SAFETY: libibverbs's call on an extended QP of ours; each buffer is the program's
    // `length` readable bytes.
    unsafe { with_batch(qp, |b| b.set_inline(bufs)) }
}

/// `wr_set_ud_addr` (`ibv_wr_set_ud_addr`): `EINVAL` unless `ah` is an address handle of this
/// context.
unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    // SAFETY: libibverbs's call on an extended QP of ours.
    let ours = Ours(unsafe { Qp::of(qp.cast()) }.context());
    // SAFETY: NULL or the program's live handle (ibv_wr_set_ud_addr(3)).
    let dest = unsafe { ours.ud_dest(ah, remote_qpn, remote_qkey) };
    // SAFETY: libibverbs's call on an extended QP of ours.
    unsafe {
        with_batch(qp, |b| match dest {
            Some(dest) => b.set_ud(dest),
            None => {
                if b.usable("ibv_wr_set_ud_addr outside a batch") {
                    b.fail(
                        libc::EINVAL,
                        "ibv_wr_set_ud_addr without a qhca address handle",
                    );
                }
            }
        })
    }
}

#[cfg(test)]
mod tests;
