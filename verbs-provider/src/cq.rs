// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Completion queues: the ring in the process's memory (`struct qhca_ib_create_cq` names it to
//! the driver), polled and armed with no system call, over the `qhca` crate's consumer.
//!
//! `create_cq` (`ibv_create_cq`) and `create_cq_ex` (`ibv_create_cq_ex`) make the same CQ, with
//! the same ring and the same driver data; the second also fills in the polling API of `struct
//! ibv_cq_ex` (`ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll`, `ibv_wc_read_*`), and
//! `ibv_poll_cq` works on it too. Both ways of polling take each completion from the same
//! consumer ([`CqConsumer::poll`]), which credits it to its QP's queues, and convert it once with
//! `wc_to_ibv`, so a completion reads the same either way.
//!
//! What `create_cq_ex` honours: the work-completion fields of `IBV_WC_STANDARD_FLAGS` (byte_len,
//! imm, qp_num, src_qp, slid, sl, dlid_path_bits; the port is RoCE, so the last three read 0, as
//! rxe's), and `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`, which changes nothing. The device has no
//! clock worth reporting, no VLAN stripping, flow tags or tag matching: those fields, and
//! `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`, are `EOPNOTSUPP`; unknown bits and parent domains
//! (`IBV_CQ_INIT_ATTR_MASK_PD`: qhca makes none) are `EINVAL` (as mlx5 answers both).
//!
//! # Poll batches
//!
//! A batch holds the consumer's lock from a successful `start_poll` to `end_poll`, as mlx5 holds
//! its CQ spinlock: other threads' polls, arms, and resets or destroys of the CQ's QPs wait for
//! it. The program must call `end_poll` after a successful `start_poll`, on the same thread, and
//! must not after a failed one (`ENOENT`: nothing to poll; no batch is open then). Where mlx5
//! would deadlock or break another thread's batch, a misuse here does neither:
//!
//! - `end_poll` on a thread that holds no batch of the CQ does nothing (pyverbs calls it after an
//!   `ENOENT`);
//! - `start_poll` on a thread whose batch is still open ends that batch first;
//! - on the thread that holds the batch, `ibv_poll_cq`, `ibv_req_notify_cq` and a reset or
//!   destroy of one of the CQ's QPs go through the batch's lock instead of waiting for it;
//! - `ibv_destroy_cq` while another thread holds a batch is `EBUSY`.
//!
//! A batch another thread leaves open (or ends on a thread other than its own: that `end_poll`
//! does nothing) keeps the CQ's other users waiting until that thread starts or ends a batch.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::mem::size_of_val;
use core::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use qhca::{CqConsumer, CqLayout, DbType, DbWord, Doorbell, PageBuf, Wc};
use qhca_uapi::{qhca_ib_create_cq, qhca_ib_create_cq_resp};
use qhca_verbs_abi::ffi::*;
use qhca_verbs_abi::wr::{poll_into, wc_to_ibv};

use crate::cmd::*;
use crate::context::Context;

/// A CQ: libibverbs's `struct verbs_cq` first (a `struct ibv_cq_ex`, which starts with the
/// members of `struct ibv_cq`), then the ring and its consumer.
///
/// Threads share it through libibverbs's pointer; what they change is behind the lock
/// (`consumer`), the batch (see [`Batch`]), or libibverbs's own struct.
#[repr(C)]
pub(crate) struct Cq {
    /// libibverbs's, which it writes too (the event counters, under its mutex): a batch writes
    /// `status` and `wr_id` field by field, never through a reference to the whole.
    ibv: UnsafeCell<ibv_cq_ex>,
    /// Before `consumer`: a guard it still holds goes (the lock is released) before the lock.
    batch: Batch,
    consumer: Mutex<CqConsumer>,
    db: Arc<Doorbell>,
    cqn: u32,
    /// The ring: freed after the kernel destroyed the CQ (or moved it to another ring), leaked
    /// if it could not. Taken under the consumer's lock, after it.
    buf: Mutex<Option<PageBuf>>,
}

// The provider's CQ is libibverbs's at offset 0, and `struct ibv_cq` is a prefix of `struct
// ibv_cq_ex` (`struct verbs_cq` is their union), so one pointer is all three.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(offset_of!(Cq, ibv) == 0);
    assert!(size_of::<ibv_cq>() == 128 && size_of::<ibv_cq_ex>() == 288);
    assert!(offset_of!(ibv_cq, context) == offset_of!(ibv_cq_ex, context));
    assert!(offset_of!(ibv_cq, channel) == offset_of!(ibv_cq_ex, channel));
    assert!(offset_of!(ibv_cq, cq_context) == offset_of!(ibv_cq_ex, cq_context));
    assert!(offset_of!(ibv_cq, handle) == offset_of!(ibv_cq_ex, handle));
    assert!(offset_of!(ibv_cq, cqe) == offset_of!(ibv_cq_ex, cqe));
    assert!(offset_of!(ibv_cq, mutex) == offset_of!(ibv_cq_ex, mutex));
    assert!(offset_of!(ibv_cq, cond) == offset_of!(ibv_cq_ex, cond));
    assert!(
        offset_of!(ibv_cq, comp_events_completed) == offset_of!(ibv_cq_ex, comp_events_completed)
    );
    assert!(
        offset_of!(ibv_cq, async_events_completed) == offset_of!(ibv_cq_ex, async_events_completed)
    );
    assert!(offset_of!(ibv_cq_ex, comp_mask) == size_of::<ibv_cq>());
};

/// The poll batch of the extended API, open from a successful `start_poll` to `end_poll`.
///
/// # Invariants
///
/// - `owner` is 0, or the [`thread_token`] of the thread that opened the open batch; only a
///   thread that holds the consumer's lock changes it.
/// - `guard` is `Some` exactly while `owner` is not 0: the batch's guard of the consumer's lock.
///   While a batch is open only its owner touches `guard`; while none is, only a thread that
///   holds the lock does (to open one).
/// - `cur` is written only by a thread that holds the lock (by its guard or the batch's), in
///   `start_poll` or `next_poll`.
struct Batch {
    owner: AtomicUsize,
    guard: UnsafeCell<Option<MutexGuard<'static, CqConsumer>>>,
    /// The completion the batch is at, as `ibv_poll_cq` gives it; the `read_*` ops read it.
    cur: UnsafeCell<ibv_wc>,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            owner: AtomicUsize::new(0),
            guard: UnsafeCell::new(None),
            cur: UnsafeCell::new(ibv_wc::default()),
        }
    }

    /// True if the thread of token `me` holds the open batch. Relaxed suffices: only `me`'s
    /// thread stores `me`, and it reads its own last store or a later one, which is another
    /// thread's token or 0 (coherence), so no thread takes itself for the owner by mistake.
    fn held_by(&self, me: usize) -> bool {
        self.owner.load(Ordering::Relaxed) == me
    }
}

/// The calling thread's token for [`Batch::owner`]: the address of a thread-local, never 0 and
/// distinct among the threads alive at one time. (A batch left open by a thread that exited is
/// then the batch of whichever thread reuses the address.)
fn thread_token() -> usize {
    thread_local!(static TOKEN: u8 = const { 0 });
    TOKEN.with(|t| ptr::from_ref(t) as usize)
}

/// A fresh zeroed ring of at least `cqe` entries (its layout and memory), and the driver data
/// that names it, at creation and at a resize.
fn new_ring(cqe: u32) -> Result<(CqLayout, PageBuf, qhca_ib_create_cq), c_int> {
    let layout = CqLayout::new(cqe.max(1)).map_err(|_| libc::EINVAL)?;
    let buf = PageBuf::new(layout.buf_len).map_err(|_| libc::ENOMEM)?;
    let drv = qhca_ib_create_cq {
        buf_addr: buf.addr(),
        buf_len: layout.buf_len as u64,
        log_entries: layout.log,
        comp_mask: 0,
    };
    Ok((layout, buf, drv))
}

/// The next completion of `consumer`, credited to its QP's queues (as `ibv_poll_cq` does).
fn poll_one(consumer: &mut CqConsumer) -> Option<Wc> {
    let mut wc = [Wc::default()];
    (consumer.poll(&mut wc) == 1).then_some(wc[0])
}

impl Cq {
    /// The provider's CQ of libibverbs's `cq`.
    ///
    /// # Safety
    ///
    /// `cq` is a CQ this provider made, not destroyed.
    pub(crate) unsafe fn of<'a>(cq: *mut ibv_cq) -> &'a Cq {
        // SAFETY: the caller's promise: the `ibv_cq` that starts a `Cq`.
        unsafe { &*cq.cast::<Cq>() }
    }

    /// The provider's CQ of libibverbs's `cq`, an extended one.
    ///
    /// # Safety
    ///
    /// `cq` is a CQ `create_cq_ex` made, not destroyed.
    unsafe fn of_ex<'a>(cq: *mut ibv_cq_ex) -> &'a Cq {
        // SAFETY: the caller's promise: the `ibv_cq_ex` that starts a `Cq`.
        unsafe { &*cq.cast::<Cq>() }
    }

    /// A CQ of at least `cqe` entries over a fresh ring, at its final address (the kernel's
    /// events name it by it), that no kernel knows yet; and the driver data that names the ring.
    fn alloc(db: Arc<Doorbell>, cqe: u32) -> Result<(*mut Cq, qhca_ib_create_cq), c_int> {
        let (layout, buf, drv) = new_ring(cqe)?;
        // SAFETY: `buf` is `layout.buf_len` fresh, zeroed, page-aligned bytes, which the CQ owns
        // and frees only after the consumer is gone (or leaks); nothing else in the process
        // touches them.
        let consumer = unsafe { CqConsumer::new(buf.as_ptr(), &layout) };
        let cq = Box::into_raw(Box::new(Cq {
            ibv: UnsafeCell::new(ibv_cq_ex::default()),
            batch: Batch::new(),
            consumer: Mutex::new(consumer),
            db,
            cqn: 0,
            buf: Mutex::new(Some(buf)),
        }));
        Ok((cq, drv))
    }

    /// Moves the CQ to a fresh ring of at least `cqe` entries (`ibv_resize_cq`): under the
    /// consumer's lock, so that nothing polls meanwhile, the kernel has the device move the
    /// CQEs not polled yet; then polling goes on in the new ring and the old one is unmapped.
    /// On failure the old ring stays the CQ's.
    fn resize(&self, ibcq: *mut ibv_cq, cqe: u32) -> c_int {
        let (layout, buf, drv) = match new_ring(cqe) {
            Ok(r) => r,
            Err(e) => return e,
        };
        self.with_consumer(|consumer| {
            let mut cmd = Cmd::<RESIZE_CQ_CMD, qhca_ib_create_cq>::new(drv);
            let mut resp = Resp::<RESIZE_CQ_RESP, NoData>::new();
            // SAFETY: libibverbs's CQ (`ibcq`, this one), passed on with a `cqe` that fits an
            // int (`CqLayout` took it); the buffers are the sizes given.
            let ret = unsafe {
                ibv_cmd_resize_cq(
                    ibcq,
                    cqe as c_int,
                    cmd.as_mut_ptr(),
                    size_of_val(&cmd),
                    resp.as_mut_ptr(),
                    size_of_val(&resp),
                )
            };
            if ret != 0 {
                // The device refused and kept the old ring, or it is stopped: the new ring
                // may go.
                return ret;
            }
            // SAFETY: `buf` is `layout.buf_len` page-aligned bytes that the CQ owns from here
            // on (below) and that nothing else in the process touches; the command's success
            // means the device initialised them as RESIZE_CQ does and left the old ring.
            unsafe { consumer.move_to(buf.as_ptr(), &layout) };
            let old = self
                .buf
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .replace(buf);
            drop(old);
            0
        })
    }

    /// The polling ops of `struct ibv_cq_ex`, and the readers of the fields in `wc_flags` (as
    /// mlx5 and rxe, a reader of a field the program did not ask for stays NULL).
    fn set_ex_ops(&mut self, wc_flags: u64) {
        let ex = self.ibv.get_mut();
        let has = |f: ibv_create_cq_wc_flags| wc_flags & u64::from(f) != 0;
        ex.start_poll = Some(start_poll);
        ex.next_poll = Some(next_poll);
        ex.end_poll = Some(end_poll);
        ex.read_opcode = Some(read_opcode);
        ex.read_vendor_err = Some(read_vendor_err);
        ex.read_wc_flags = Some(read_wc_flags);
        if has(IBV_WC_EX_WITH_BYTE_LEN) {
            ex.read_byte_len = Some(read_byte_len);
        }
        if has(IBV_WC_EX_WITH_IMM) {
            ex.read_imm_data = Some(read_imm_data);
        }
        if has(IBV_WC_EX_WITH_QP_NUM) {
            ex.read_qp_num = Some(read_qp_num);
        }
        if has(IBV_WC_EX_WITH_SRC_QP) {
            ex.read_src_qp = Some(read_src_qp);
        }
        if has(IBV_WC_EX_WITH_SLID) {
            ex.read_slid = Some(read_slid);
        }
        if has(IBV_WC_EX_WITH_SL) {
            ex.read_sl = Some(read_sl);
        }
        if has(IBV_WC_EX_WITH_DLID_PATH_BITS) {
            ex.read_dlid_path_bits = Some(read_dlid_path_bits);
        }
    }

    fn lock(&self) -> MutexGuard<'_, CqConsumer> {
        self.consumer.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the consumer: under its lock, or, on the thread that holds the CQ's open
    /// batch, through the batch's guard (the lock is this thread's already: waiting for it would
    /// wait for ever).
    pub(crate) fn with_consumer<R>(&self, f: impl FnOnce(&mut CqConsumer) -> R) -> R {
        match self.consumer.try_lock() {
            Ok(mut g) => f(&mut g),
            Err(TryLockError::Poisoned(p)) => f(&mut p.into_inner()),
            Err(TryLockError::WouldBlock) if self.batch.held_by(thread_token()) => {
                // SAFETY: this thread holds the open batch, so it alone touches `guard` (the
                // type invariant), and no other reference to it is live here: the batch's ops
                // are other calls from the program, which do not nest in this one.
                let g = unsafe { &mut *self.batch.guard.get() };
                f(g.as_deref_mut().expect("an open batch holds the lock"))
            }
            Err(TryLockError::WouldBlock) => f(&mut self.lock()),
        }
    }

    /// Opens a batch at the completion made current, holding `guard` until `end_batch`.
    fn open_batch(&self, guard: MutexGuard<'_, CqConsumer>, me: usize) {
        // SAFETY: the guard borrows `self.consumer`, of the same boxed `Cq`, which does not move
        // (libibverbs holds it by address) and outlives the guard: `end_batch` drops it, and so
        // does dropping the `Cq` (`batch` is declared before `consumer`), on the thread that
        // holds it (`destroy_cq` refuses while another thread does).
        let guard = unsafe {
            core::mem::transmute::<MutexGuard<'_, CqConsumer>, MutexGuard<'static, CqConsumer>>(
                guard,
            )
        };
        // SAFETY: this thread holds the lock (`guard`), so no batch is open (its guard would
        // hold it) and no other thread touches `guard` (the type invariant).
        unsafe { *self.batch.guard.get() = Some(guard) };
        // INVARIANT: set by the lock's holder, with `guard` now `Some`.
        self.batch.owner.store(me, Ordering::Relaxed);
    }

    /// Ends the batch of the thread of token `me`, if it holds one; does nothing otherwise.
    fn end_batch(&self, me: usize) {
        if !self.batch.held_by(me) {
            return;
        }
        // INVARIANT: cleared by the lock's holder (the batch), which drops its guard next.
        self.batch.owner.store(0, Ordering::Relaxed);
        // SAFETY: this thread held the open batch: `guard` is its alone.
        let guard = unsafe { (*self.batch.guard.get()).take() };
        // Releases the lock: whoever takes it next sees `owner` 0.
        drop(guard);
    }

    /// Makes `w` the batch's current completion: `status` and `wr_id` of the `ibv_cq_ex`, and
    /// what the `read_*` ops read.
    ///
    /// # Safety
    ///
    /// The calling thread holds the consumer's lock (opening a batch, or by its open batch).
    unsafe fn set_current(&self, w: &Wc) {
        let wc = wc_to_ibv(w);
        let ex = self.ibv.get();
        // SAFETY: `cur` is written only under the lock (the type invariant of `Batch`), which
        // the caller holds, and read by the batch's owner between its calls; `status` and `wr_id`
        // are written field by field through the `UnsafeCell`'s pointer, with no reference to
        // the rest of the struct, which libibverbs may be writing meanwhile.
        unsafe {
            *self.batch.cur.get() = wc;
            (&raw mut (*ex).status).write(wc.status);
            (&raw mut (*ex).wr_id).write(wc.wr_id);
        }
    }
}

/// `create_cq`: at least `cqe` entries.
pub(crate) unsafe extern "C" fn create_cq(
    ibctx: *mut ibv_context,
    cqe: c_int,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let fail = |e: c_int| {
        set_errno(e);
        ptr::null_mut()
    };
    let Ok(entries) = u32::try_from(cqe) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: `ibctx` is a context of ours (libibverbs dispatched to its ops).
    let db = unsafe { Context::of(ibctx) }.doorbell();
    let (cq, drv) = match Cq::alloc(db, entries) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let mut cmd = Cmd::<CREATE_CQ_CMD, qhca_ib_create_cq>::new(drv);
    let mut resp = Resp::<CREATE_CQ_RESP, qhca_ib_create_cq_resp>::new();
    // SAFETY: libibverbs's arguments, passed on; `cq` starts with the `struct ibv_cq` it fills
    // in; the buffers are the sizes given.
    let ret = unsafe {
        ibv_cmd_create_cq(
            ibctx,
            cqe,
            channel,
            comp_vector,
            cq.cast(),
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            size_of_val(&resp),
        )
    };
    // SAFETY: `cq` is ours, not handed out; `ret` is the command's answer.
    unsafe { created(cq, ret, resp.drv.cqn) }.cast()
}

/// The end of both create ops: the CQ the kernel made (`ret` 0), numbered `cqn`; otherwise NULL
/// with errno `ret`, the CQ freed.
///
/// # Safety
///
/// `cq` came from [`Cq::alloc`] and was not handed out; if `ret` is not 0 the kernel never had
/// its ring.
unsafe fn created(cq: *mut Cq, ret: c_int, cqn: u32) -> *mut Cq {
    if ret != 0 {
        // SAFETY: the caller's promise.
        return unsafe { discard(cq, ret) };
    }
    // SAFETY: ours (the caller's promise), not shared yet.
    unsafe { (*cq).cqn = cqn };
    cq
}

/// The work-completion fields `create_cq_ex` honours: `IBV_WC_STANDARD_FLAGS`.
const EX_WC_FLAGS: u64 = IBV_WC_STANDARD_FLAGS as u64;

/// Whether `create_cq_ex` honours `a`, or the errno it refuses it with (mlx5's choices).
fn check_cq_attr_ex(a: &ibv_cq_init_attr_ex) -> Result<(), c_int> {
    let known = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
    if a.comp_mask & !known != 0 {
        return Err(libc::EINVAL);
    }
    // qhca makes no parent domain, so the PD cannot be one (mlx5: EINVAL for a plain PD).
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
        return Err(libc::EINVAL);
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        let flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
        if a.flags & !flags != 0 {
            return Err(libc::EINVAL);
        }
        // The device reports an overrun (the CQ's error event) and stops writing; it cannot
        // keep going.
        if a.flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN != 0 {
            return Err(libc::EOPNOTSUPP);
        }
    }
    // Timestamps (no clock worth reporting), CVLAN, flow tag, tag matching.
    if a.wc_flags & !EX_WC_FLAGS != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(())
}

/// `create_cq_ex`: the CQ of `create_cq` (the same ring and driver data, sent with the core's
/// extended command), with the polling API of `struct ibv_cq_ex`; libibverbs then sets its
/// channel, context and counters (`verbs_init_cq`).
pub(crate) unsafe extern "C" fn create_cq_ex(
    ibctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    let fail = |e: c_int| {
        set_errno(e);
        ptr::null_mut()
    };
    if attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the program's attributes (ibv_create_cq_ex(3)).
    let a = unsafe { &*attr };
    if let Err(e) = check_cq_attr_ex(a) {
        return fail(e);
    }
    // SAFETY: `ibctx` is a context of ours (libibverbs dispatched to its ops).
    let db = unsafe { Context::of(ibctx) }.doorbell();
    let (cq, drv) = match Cq::alloc(db, a.cqe) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    // SAFETY: ours, not handed out yet.
    unsafe { (*cq).set_ex_ops(a.wc_flags) };
    let mut cmd = Cmd::<CREATE_CQ_EX_CMD, qhca_ib_create_cq>::new(drv);
    let mut resp = Resp::<CREATE_CQ_EX_RESP, qhca_ib_create_cq_resp>::new();
    // SAFETY: libibverbs's arguments, passed on (checked above: no flag that changes the
    // command); `cq` starts with the `struct verbs_cq` it fills in; the buffers are the sizes
    // given.
    let ret = unsafe {
        ibv_cmd_create_cq_ex(
            ibctx,
            attr,
            cq.cast(),
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            size_of_val(&resp),
            0,
        )
    };
    // SAFETY: `cq` is ours, not handed out; `ret` is the command's answer.
    unsafe { created(cq, ret, resp.drv.cqn) }.cast()
}

/// `destroy_cq`: libibverbs refuses it while QPs use the CQ (the kernel counts them); `EBUSY`
/// while another thread holds a poll batch. A batch of this thread ends with the CQ.
pub(crate) unsafe extern "C" fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: the program's CQ, of a context of ours.
    let c = unsafe { Cq::of(cq) };
    let owner = c.batch.owner.load(Ordering::Relaxed);
    if owner != 0 && owner != thread_token() {
        return libc::EBUSY;
    }
    // SAFETY: `cq` came from a create op, a `Cq`; the program's last use (once destroyed, the
    // device writes the ring no more); its batch, if any, is this thread's.
    unsafe { free_if_destroyed(ibv_cmd_destroy_cq(cq), cq.cast::<Cq>()) }
}

/// `resize_cq`: at least `cqe` entries; the completions not polled yet stay, in order.
pub(crate) unsafe extern "C" fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    let Ok(entries) = u32::try_from(cqe) else {
        return libc::EINVAL;
    };
    // SAFETY: the program's CQ, of a context of ours.
    unsafe { Cq::of(cq) }.resize(cq, entries)
}

/// `poll_cq`: what the inline `ibv_poll_cq` calls, on a CQ of either create op; no system call.
pub(crate) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the program's CQ, of a context of ours.
    let c = unsafe { Cq::of(cq) };
    c.with_consumer(|consumer| {
        // SAFETY: the program passes room for `num` completions at `wc`.
        unsafe { poll_into(num, wc, |out| consumer.poll(out)) }
    })
}

/// `req_notify_cq`: what the inline `ibv_req_notify_cq` calls: a doorbell store naming the
/// consumer index, no system call. `solicited_only` arms for every completion, a superset of
/// the solicited ones (a wake-up is a hint to poll).
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    // SAFETY: the program's CQ, of a context of ours.
    let c = unsafe { Cq::of(cq) };
    let ci = c.with_consumer(|consumer| consumer.ci());
    c.db.ring(DbWord::new(DbType::CqArm, c.cqn, ci).raw());
    0
}

// ---- the polling API of `struct ibv_cq_ex` ---------------------------------------------------

/// `start_poll` (`ibv_start_poll`): opens a batch at the next completion (0; `status` and
/// `wr_id` of the `ibv_cq_ex` are its), or answers `ENOENT` (none: no batch is open) or `EINVAL`
/// (`attr` NULL or with a `comp_mask`, as mlx5). No system call.
///
/// The contract (libibverbs's, as mlx5 implements it; the misuses it survives are in the module
/// documentation): after a 0, the batch holds the CQ's lock, and the program calls
/// `next_poll`, the `read_*` ops and finally `end_poll`, on this thread.
unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: NULL or the program's attributes.
    if attr.is_null() || unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: the program's CQ, from `create_cq_ex` (only it sets this op).
    let c = unsafe { Cq::of_ex(cq) };
    let me = thread_token();
    // A batch this thread left open ends here: waiting for its lock would wait for ever.
    c.end_batch(me);
    let mut guard = c.lock();
    let Some(w) = poll_one(&mut guard) else {
        return libc::ENOENT;
    };
    // SAFETY: this thread holds the lock (`guard`).
    unsafe { c.set_current(&w) };
    c.open_batch(guard, me);
    0
}

/// `next_poll` (`ibv_next_poll`): the batch's next completion (0), or `ENOENT` (none for now;
/// the batch stays open). `EINVAL` if this thread holds no batch of the CQ.
unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the program's CQ, from `create_cq_ex`.
    let c = unsafe { Cq::of_ex(cq) };
    if !c.batch.held_by(thread_token()) {
        return libc::EINVAL;
    }
    // SAFETY: this thread holds the open batch: `guard` is its alone (the type invariant), and
    // this is the only reference to it until the end of the call.
    let guard = unsafe { &mut *c.batch.guard.get() };
    let Some(w) = guard.as_deref_mut().and_then(poll_one) else {
        return libc::ENOENT;
    };
    // SAFETY: this thread holds the lock, by its batch.
    unsafe { c.set_current(&w) };
    0
}

/// `end_poll` (`ibv_end_poll`): ends this thread's batch and releases the CQ's lock; nothing
/// if this thread holds no batch of the CQ.
unsafe extern "C" fn end_poll(cq: *mut ibv_cq_ex) {
    // SAFETY: the program's CQ, from `create_cq_ex`.
    unsafe { Cq::of_ex(cq) }.end_batch(thread_token());
}

/// What `read` takes from the batch's current completion.
///
/// # Safety
///
/// `cq` is a CQ of `create_cq_ex`, and the program reads within its batch, not concurrently
/// with the `start_poll` or `next_poll` that moves it (the contract of the `ibv_wc_read_*`
/// functions: they read the completion that call made current).
unsafe fn current<T>(cq: *mut ibv_cq_ex, read: impl FnOnce(&ibv_wc) -> T) -> T {
    // SAFETY: the caller's promise: a CQ of ours, whose `cur` nothing writes meanwhile (only
    // `start_poll` and `next_poll` do, under the lock: the type invariant of `Batch`).
    read(unsafe { &*Cq::of_ex(cq).batch.cur.get() })
}

/// `read_opcode` (`ibv_wc_read_opcode`).
unsafe extern "C" fn read_opcode(cq: *mut ibv_cq_ex) -> ibv_wc_opcode {
    // SAFETY: called within the program's batch (libibverbs's contract).
    unsafe { current(cq, |w| w.opcode) }
}

/// `read_vendor_err` (`ibv_wc_read_vendor_err`).
unsafe extern "C" fn read_vendor_err(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: called within the program's batch (libibverbs's contract).
    unsafe { current(cq, |w| w.vendor_err) }
}

/// `read_byte_len` (`ibv_wc_read_byte_len`).
unsafe extern "C" fn read_byte_len(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: called within the program's batch (libibverbs's contract).
    unsafe { current(cq, |w| w.byte_len) }
}

/// `read_imm_data` (`ibv_wc_read_imm_data`, and `ibv_wc_read_invalidated_rkey`): the union of
/// `struct ibv_wc`, as `ibv_poll_cq` gives it: the immediate data as the sender posted it
/// (`IBV_WC_WITH_IMM`), or the key a SEND_WITH_INV invalidated (`IBV_WC_WITH_INV`, as mlx5).
unsafe extern "C" fn read_imm_data(cq: *mut ibv_cq_ex) -> __be32 {
    // SAFETY: called within the program's batch (libibverbs's contract); both members of the
    // union are a `u32`, so reading either is reading its 4 bytes.
    unsafe { current(cq, |w| w.__bindgen_anon_1.imm_data) }
}

/// `read_qp_num` (`ibv_wc_read_qp_num`).
unsafe extern "C" fn read_qp_num(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: called within the program's batch (libibverbs's contract).
    unsafe { current(cq, |w| w.qp_num) }
}

/// `read_src_qp` (`ibv_wc_read_src_qp`).
unsafe extern "C" fn read_src_qp(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: called within the program's batch (libibverbs's contract).
    unsafe { current(cq, |w| w.src_qp) }
}

/// `read_wc_flags` (`ibv_wc_read_wc_flags`): `IBV_WC_GRH`, `IBV_WC_WITH_IMM`,
/// `IBV_WC_WITH_INV`.
unsafe extern "C" fn read_wc_flags(cq: *mut ibv_cq_ex) -> core::ffi::c_uint {
    // SAFETY: called within the program's batch (libibverbs's contract).
    unsafe { current(cq, |w| w.wc_flags) }
}

/// `read_slid` (`ibv_wc_read_slid`): 0, the port being RoCE.
unsafe extern "C" fn read_slid(cq: *mut ibv_cq_ex) -> u32 {
    // SAFETY: called within the program's batch (libibverbs's contract).
    unsafe { current(cq, |w| u32::from(w.slid)) }
}

/// `read_sl` (`ibv_wc_read_sl`): 0, the port being RoCE.
unsafe extern "C" fn read_sl(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: called within the program's batch (libibverbs's contract).
    unsafe { current(cq, |w| w.sl) }
}

/// `read_dlid_path_bits` (`ibv_wc_read_dlid_path_bits`): 0, the port being RoCE.
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ibv_cq_ex) -> u8 {
    // SAFETY: called within the program's batch (libibverbs's contract).
    unsafe { current(cq, |w| w.dlid_path_bits) }
}

#[cfg(test)]
mod tests;
