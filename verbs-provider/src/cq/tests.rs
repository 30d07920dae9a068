// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Host tests of `cq`: no kernel and no device. A CQ is made as the create ops make it, but for
//! the command; its doorbell page is a memfd's; the tests write CQEs as the device would and
//! call the ops through the `struct ibv_cq_ex` pointers, as libibverbs's inline functions do.

use super::*;
use core::mem::offset_of;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::fence;
use std::sync::mpsc;
use std::time::Duration;

use qhca::{QpCaps, QpLayout, QpType, RecvWr, WorkQueues};
use qhca_uapi::{
    qhca_cqe, QHCA_CQE_SIZE, QHCA_CQE_WITH_IMM, QHCA_CQE_WITH_INV, QHCA_WC_RECV,
    QHCA_WC_RECV_RDMA_WITH_IMM, QHCA_WC_WR_FLUSH_ERR, UAR_PAGE_SIZE,
};

/// A doorbell page no device reads: a memfd's.
fn doorbell() -> Arc<Doorbell> {
    // SAFETY: a NUL-terminated name and plain flags; the fd returned is ours alone.
    let fd = unsafe { libc::memfd_create(c"qhca-test-db".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create");
    // SAFETY: a fresh fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: a plain call on our fd.
    assert_eq!(
        unsafe { libc::ftruncate(fd.as_raw_fd(), UAR_PAGE_SIZE as i64) },
        0
    );
    Arc::new(Doorbell::map_at(fd.as_fd(), 0).expect("map the memfd"))
}

/// Calls the op `$op` of a `FakeCq`'s `struct ibv_cq_ex`, as libibverbs's inline functions do:
/// the pointer is read on its own, with no reference to the struct (a batch writes its `status`
/// and `wr_id`).
macro_rules! call {
    ($f:expr, $op:ident $(, $arg:expr)*) => {{
        let ex = $f.ex();
        // SAFETY: our extended CQ, whose ops were set before it was shared and are not written
        // after; the tests call a reader within their batch.
        unsafe { (&raw const (*ex).$op).read().expect(stringify!($op))(ex $(, $arg)*) }
    }};
}

/// A CQ as `create_cq_ex` makes it (with `wc_flags`), but known to no kernel.
struct FakeCq {
    cq: *mut Cq,
    log: u32,
}

impl FakeCq {
    fn new(entries: u32, wc_flags: u64) -> FakeCq {
        let (cq, drv) = Cq::alloc(doorbell(), entries).expect("alloc");
        // SAFETY: ours, not shared yet.
        unsafe { (*cq).set_ex_ops(wc_flags) };
        FakeCq {
            cq,
            log: drv.log_entries,
        }
    }

    fn ex(&self) -> *mut ibv_cq_ex {
        self.cq.cast()
    }

    fn ibv(&self) -> *mut ibv_cq {
        self.cq.cast()
    }

    fn cq(&self) -> &Cq {
        // SAFETY: ours, live until `drop`.
        unsafe { &*self.cq }
    }

    /// The `struct ibv_cq_ex`, while no batch writes it.
    fn ops(&self) -> &ibv_cq_ex {
        // SAFETY: the ops were set before the CQ was shared and nothing writes them after; the
        // callers hold no batch while they hold the reference.
        unsafe { &*self.cq().ibv.get() }
    }

    fn base(&self) -> *mut u8 {
        let buf = self.cq().buf.lock().unwrap();
        buf.as_ref().expect("ring").as_ptr()
    }

    /// Writes the CQE at free-running `index` as the device does: the body, then the owner
    /// byte (`(pass + 1) & 1`, the ring starting zeroed).
    fn device_write(&self, index: u32, cqe: &qhca_cqe) {
        let size = QHCA_CQE_SIZE as usize;
        let owner = offset_of!(qhca_cqe, owner);
        let slot = ((index & ((1 << self.log) - 1)) as usize) * size;
        // SAFETY: one entry inside the ring, which no reference covers; the consumer does not
        // read an entry before its owner byte says it is written, and that byte is stored last.
        unsafe {
            let dst = self.base().add(slot);
            ptr::copy_nonoverlapping(ptr::from_ref(cqe).cast::<u8>(), dst, owner);
            fence(Ordering::Release);
            ptr::write_volatile(dst.add(owner), (((index >> self.log) + 1) & 1) as u8);
        }
    }

    /// The consumer index the CQ published to the device.
    fn published_ci(&self) -> u32 {
        let at = (QHCA_CQE_SIZE as usize) << self.log;
        // SAFETY: the doorbell record, inside the ring's memory; read between the CQ's calls.
        unsafe { ptr::read_volatile(self.base().add(at).cast::<u32>()) }
    }

    fn start(&self) -> c_int {
        let mut attr = ibv_poll_cq_attr::default();
        call!(self, start_poll, &mut attr)
    }

    fn next(&self) -> c_int {
        call!(self, next_poll)
    }

    fn end(&self) {
        call!(self, end_poll)
    }

    fn status_wr_id(&self) -> (ibv_wc_status, u64) {
        // SAFETY: written by the batch of this thread, read between its calls.
        unsafe { ((*self.ex()).status, (*self.ex()).wr_id) }
    }

    /// `ibv_poll_cq` of one completion.
    fn poll_cq(&self) -> Option<ibv_wc> {
        let mut wc = ibv_wc::default();
        // SAFETY: our CQ; room for one completion.
        (unsafe { poll_cq(self.ibv(), 1, &mut wc) } == 1).then_some(wc)
    }
}

impl Drop for FakeCq {
    fn drop(&mut self) {
        // SAFETY: `Box::into_raw` of `alloc`; no kernel has the ring.
        drop(unsafe { Box::from_raw(self.cq) });
    }
}

/// The address of a `FakeCq`'s CQ, for another thread.
#[derive(Clone, Copy)]
struct Addr(usize);

impl Addr {
    fn of(f: &FakeCq) -> Addr {
        Addr(f.cq as usize)
    }

    /// `ibv_poll_cq` of one completion, on this thread; its wr_id.
    fn poll_cq(self) -> Option<u64> {
        let mut wc = ibv_wc::default();
        // SAFETY: a `FakeCq` that the test keeps alive until this thread is joined.
        (unsafe { poll_cq(self.0 as *mut ibv_cq, 1, &mut wc) } == 1).then_some(wc.wr_id)
    }
}

/// A receive completion of QP `qpn` for its WQE at `wqe_index`.
fn recv_cqe(qpn: u32, wqe_index: u16) -> qhca_cqe {
    qhca_cqe {
        wr_id: 0x100 + u64::from(wqe_index),
        byte_len: 12,
        qpn,
        src_qp: 0x77,
        opcode: QHCA_WC_RECV as u8,
        wqe_index,
        ..Default::default()
    }
}

/// Runs `f` on another thread and says whether it finished within `wait`; then (after `then`)
/// waits for it and gives its result.
fn on_another_thread<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
    wait: Duration,
    then: impl FnOnce(),
) -> (bool, R) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    let finished_early = rx.recv_timeout(wait).is_ok();
    then();
    (finished_early, t.join().expect("thread"))
}

#[test]
fn sizes_are_the_kernels_and_libibverbs() {
    // <rdma/ib_user_verbs.h>: the extended header 24, `ib_uverbs_ex_create_cq` 32, then the
    // driver's data; the response `ib_uverbs_ex_create_cq_resp` 16.
    assert_eq!(
        offset_of!(Cmd<CREATE_CQ_EX_CMD, qhca_ib_create_cq>, drv),
        56
    );
    assert_eq!(
        offset_of!(Resp<CREATE_CQ_EX_RESP, qhca_ib_create_cq_resp>, drv),
        16
    );
    assert_eq!(offset_of!(Cmd<CREATE_CQ_CMD, qhca_ib_create_cq>, drv), 40);
    assert_eq!(
        offset_of!(Resp<CREATE_CQ_RESP, qhca_ib_create_cq_resp>, drv),
        8
    );
    // rdma-core's `struct ibv_cq_ex`: `status` and `wr_id` after the `struct ibv_cq` members.
    assert_eq!(offset_of!(ibv_cq_ex, status), 132);
    assert_eq!(offset_of!(ibv_cq_ex, wr_id), 136);
    assert_eq!(offset_of!(ibv_cq_ex, start_poll), 144);
}

#[test]
fn flags_are_honoured_or_refused_as_mlx5_does() {
    let ok = |wc_flags: u32, comp_mask: u32, flags: u32| {
        check_cq_attr_ex(&ibv_cq_init_attr_ex {
            cqe: 16,
            wc_flags: u64::from(wc_flags),
            comp_mask,
            flags,
            ..Default::default()
        })
    };
    assert_eq!(ok(0, 0, 0), Ok(()));
    assert_eq!(ok(IBV_WC_STANDARD_FLAGS, 0, 0), Ok(()));
    for f in [
        IBV_WC_EX_WITH_BYTE_LEN,
        IBV_WC_EX_WITH_IMM,
        IBV_WC_EX_WITH_QP_NUM,
        IBV_WC_EX_WITH_SRC_QP,
        IBV_WC_EX_WITH_SLID,
        IBV_WC_EX_WITH_SL,
        IBV_WC_EX_WITH_DLID_PATH_BITS,
    ] {
        assert_eq!(ok(f, 0, 0), Ok(()), "wc_flags {f:#x}");
    }
    for f in [
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
        IBV_WC_EX_WITH_CVLAN,
        IBV_WC_EX_WITH_FLOW_TAG,
        IBV_WC_EX_WITH_TM_INFO,
        IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
        IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
    ] {
        assert_eq!(ok(f, 0, 0), Err(libc::EOPNOTSUPP), "wc_flags {f:#x}");
    }
    let flags = IBV_CQ_INIT_ATTR_MASK_FLAGS;
    assert_eq!(ok(0, flags, IBV_CREATE_CQ_ATTR_SINGLE_THREADED), Ok(()));
    assert_eq!(
        ok(0, flags, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN),
        Err(libc::EOPNOTSUPP)
    );
    assert_eq!(ok(0, flags, 1 << 7), Err(libc::EINVAL));
    // Flags without their comp_mask bit are not read.
    assert_eq!(ok(0, 0, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN | 1 << 7), Ok(()));
    assert_eq!(ok(0, IBV_CQ_INIT_ATTR_MASK_PD, 0), Err(libc::EINVAL));
    assert_eq!(ok(0, 1 << 5, 0), Err(libc::EINVAL));
}

/// Refused before the context is looked at: NULL, errno set.
#[test]
fn create_refuses_before_asking_the_kernel() {
    let mut a = ibv_cq_init_attr_ex {
        cqe: 16,
        wc_flags: u64::from(IBV_WC_EX_WITH_COMPLETION_TIMESTAMP),
        ..Default::default()
    };
    // SAFETY: refused before `ibctx` is used.
    let cq = unsafe { create_cq_ex(ptr::null_mut(), &mut a) };
    // SAFETY: this thread's errno.
    assert_eq!(
        (cq, unsafe { *libc::__errno_location() }),
        (ptr::null_mut(), libc::EOPNOTSUPP)
    );
    a.wc_flags = 0;
    a.comp_mask = 1 << 4;
    // SAFETY: as above.
    let cq = unsafe { create_cq_ex(ptr::null_mut(), &mut a) };
    // SAFETY: this thread's errno.
    assert_eq!(
        (cq, unsafe { *libc::__errno_location() }),
        (ptr::null_mut(), libc::EINVAL)
    );
    // SAFETY: as above.
    let cq = unsafe { create_cq_ex(ptr::null_mut(), ptr::null_mut()) };
    assert!(cq.is_null());
}

#[test]
fn readers_are_set_for_the_fields_asked_for() {
    let none = FakeCq::new(4, 0);
    let o = none.ops();
    assert!(o.start_poll.is_some() && o.next_poll.is_some() && o.end_poll.is_some());
    assert!(o.read_opcode.is_some() && o.read_vendor_err.is_some() && o.read_wc_flags.is_some());
    assert!(o.read_byte_len.is_none() && o.read_imm_data.is_none() && o.read_qp_num.is_none());
    assert!(o.read_src_qp.is_none() && o.read_slid.is_none() && o.read_sl.is_none());
    assert!(o.read_dlid_path_bits.is_none());
    let all = FakeCq::new(4, u64::from(IBV_WC_STANDARD_FLAGS));
    let o = all.ops();
    assert!(o.read_byte_len.is_some() && o.read_imm_data.is_some() && o.read_qp_num.is_some());
    assert!(o.read_src_qp.is_some() && o.read_slid.is_some() && o.read_sl.is_some());
    assert!(o.read_dlid_path_bits.is_some());
    for o in [none.ops(), all.ops()] {
        assert!(o.read_completion_ts.is_none() && o.read_completion_wallclock_ns.is_none());
        assert!(o.read_cvlan.is_none() && o.read_flow_tag.is_none() && o.read_tm_info.is_none());
    }
}

/// A batch reads each completion as `ibv_poll_cq` gives it, credits it to its QP's receive
/// queue, and publishes the consumer index as it goes.
#[test]
fn a_batch_reads_and_credits_each_completion() {
    let f = FakeCq::new(8, u64::from(IBV_WC_STANDARD_FLAGS));
    // A QP whose receive queue has three requests outstanding, completing in this CQ.
    let qpn = 0x11;
    let layout = QpLayout::new(&QpCaps::default()).expect("layout");
    let rings = PageBuf::new(layout.buf_len).expect("rings");
    // SAFETY: fresh zeroed page-aligned memory of `layout.buf_len` bytes, which outlives the
    // queues (dropped at the end of the test, after them) and nothing else touches.
    let mut wq = unsafe { WorkQueues::new(rings.as_ptr(), layout, qpn, QpType::Rc, doorbell()) };
    let wrs: Vec<_> = (0..3)
        .map(|i| RecvWr {
            wr_id: 0x100 + i,
            sges: &[],
        })
        .collect();
    wq.post_recv(&wrs).expect("post");
    f.cq().with_consumer(|c| c.attach(qpn, wq.shared().clone()));
    assert_eq!(wq.outstanding(), (0, 3));

    assert_eq!(f.start(), libc::ENOENT, "empty");
    f.device_write(
        0,
        &qhca_cqe {
            imm_data: 0x1122_3344,
            flags: QHCA_CQE_WITH_IMM as u8,
            ..recv_cqe(qpn, 0)
        },
    );
    f.device_write(
        1,
        &qhca_cqe {
            imm_data: 0x0abc_de01,
            flags: QHCA_CQE_WITH_INV as u8,
            ..recv_cqe(qpn, 1)
        },
    );
    f.device_write(
        2,
        &qhca_cqe {
            opcode: QHCA_WC_RECV_RDMA_WITH_IMM as u8,
            status: QHCA_WC_WR_FLUSH_ERR as u8,
            vendor_err: 5,
            ..recv_cqe(qpn, 2)
        },
    );

    assert_eq!(f.start(), 0);
    assert_eq!(f.status_wr_id(), (IBV_WC_SUCCESS, 0x100));
    assert_eq!(call!(f, read_opcode), IBV_WC_RECV);
    assert_eq!(call!(f, read_wc_flags), IBV_WC_WITH_IMM);
    // The 32 bits the sender posted, as `ibv_wc.imm_data`.
    assert_eq!(call!(f, read_imm_data), 0x1122_3344);
    assert_eq!(call!(f, read_byte_len), 12);
    assert_eq!((call!(f, read_qp_num), call!(f, read_src_qp)), (qpn, 0x77));
    assert_eq!(call!(f, read_slid), 0);
    assert_eq!((call!(f, read_sl), call!(f, read_dlid_path_bits)), (0, 0));
    assert_eq!(call!(f, read_vendor_err), 0);
    assert_eq!(wq.outstanding(), (0, 2), "credited as it is polled");
    assert_eq!(f.published_ci(), 1);

    assert_eq!(f.next(), 0);
    assert_eq!(f.status_wr_id(), (IBV_WC_SUCCESS, 0x101));
    assert_eq!(call!(f, read_wc_flags), IBV_WC_WITH_INV);
    // `ibv_wc_read_invalidated_rkey`: the key, as `ibv_wc.invalidated_rkey`.
    assert_eq!(call!(f, read_imm_data), 0x0abc_de01);

    assert_eq!(f.next(), 0);
    assert_eq!(f.status_wr_id(), (IBV_WC_WR_FLUSH_ERR, 0x102));
    assert_eq!(call!(f, read_opcode), IBV_WC_RECV_RDMA_WITH_IMM);
    assert_eq!(call!(f, read_vendor_err), 5);

    assert_eq!(f.next(), libc::ENOENT);
    f.end();
    assert_eq!(wq.outstanding(), (0, 0));
    assert_eq!(f.published_ci(), 3);
    assert_eq!(f.cq().with_consumer(|c| c.stray()), 0);
    // The lock is free again: another thread polls (nothing).
    let addr = Addr::of(&f);
    let (early, got) = on_another_thread(move || addr.poll_cq(), Duration::from_secs(10), || ());
    assert!(early && got.is_none());
}

/// `ibv_poll_cq` on an extended CQ gives the same completions, mixed with batches.
#[test]
fn poll_cq_and_batches_share_the_consumer() {
    let f = FakeCq::new(4, 0);
    for i in 0..6 {
        // Wraps: 4 entries, two passes.
        f.device_write(i, &recv_cqe(9, i as u16));
        if i % 2 == 0 {
            assert_eq!(f.start(), 0);
            assert_eq!(f.status_wr_id().1, 0x100 + u64::from(i));
            f.end();
        } else {
            assert_eq!(f.poll_cq().map(|w| w.wr_id), Some(0x100 + u64::from(i)));
        }
    }
    assert_eq!(f.poll_cq().map(|w| w.wr_id), None);
    assert_eq!(f.published_ci(), 6);
}

/// A failed `start_poll` opens no batch, and the `end_poll` that follows it (pyverbs) does
/// nothing.
#[test]
fn an_empty_start_poll_leaves_the_cq_unlocked() {
    let f = FakeCq::new(4, 0);
    assert_eq!(f.start(), libc::ENOENT);
    f.end();
    assert_eq!(f.cq().batch.owner.load(Ordering::Relaxed), 0);
    assert_eq!(f.next(), libc::EINVAL, "no batch");
    f.device_write(0, &recv_cqe(9, 0));
    let addr = Addr::of(&f);
    let (early, got) = on_another_thread(move || addr.poll_cq(), Duration::from_secs(10), || ());
    assert!(early);
    assert_eq!(got, Some(0x100));
}

/// A batch holds the lock until `end_poll`: another thread's poll waits for it, while this
/// thread's `ibv_poll_cq` and arm go through the batch, and another thread's `end_poll` does not
/// end it.
#[test]
fn a_batch_holds_the_cq_until_its_end() {
    let f = FakeCq::new(8, 0);
    for i in 0..3 {
        f.device_write(i, &recv_cqe(9, i as u16));
    }
    assert_eq!(f.start(), 0);
    // This thread's other uses of the CQ, within the batch.
    assert_eq!(f.poll_cq().map(|w| w.wr_id), Some(0x101));
    // SAFETY: our CQ.
    assert_eq!(unsafe { req_notify_cq(f.ibv(), 0) }, 0);
    // Another thread's `end_poll` leaves this thread's batch alone.
    let addr = Addr::of(&f);
    let (early, ()) = on_another_thread(
        // SAFETY: our extended CQ, alive until the thread is joined.
        move || unsafe { end_poll(addr.0 as *mut ibv_cq_ex) },
        Duration::from_secs(10),
        || (),
    );
    assert!(early);
    assert_eq!(f.next(), 0);
    assert_eq!(f.status_wr_id().1, 0x102);
    // Another thread's poll waits for the end of the batch, then finds the next completion.
    let (early, got) = on_another_thread(
        move || addr.poll_cq(),
        Duration::from_millis(100),
        || {
            f.device_write(3, &recv_cqe(9, 3));
            f.end();
        },
    );
    assert!(!early, "polled within another thread's batch");
    assert_eq!(got, Some(0x103));
}

/// A `start_poll` with this thread's batch still open ends it (mlx5 would wait for ever).
#[test]
fn start_poll_again_ends_the_open_batch() {
    let f = FakeCq::new(4, 0);
    f.device_write(0, &recv_cqe(9, 0));
    f.device_write(1, &recv_cqe(9, 1));
    assert_eq!(f.start(), 0);
    assert_eq!(f.start(), 0);
    assert_eq!(f.status_wr_id().1, 0x101);
    // Left open: this thread still polls; so does another once it ends.
    assert_eq!(f.start(), libc::ENOENT);
    assert_eq!(f.cq().batch.owner.load(Ordering::Relaxed), 0);
    f.device_write(2, &recv_cqe(9, 2));
    let addr = Addr::of(&f);
    let (early, got) = on_another_thread(move || addr.poll_cq(), Duration::from_secs(10), || ());
    assert!(early);
    assert_eq!(got, Some(0x102));
}
