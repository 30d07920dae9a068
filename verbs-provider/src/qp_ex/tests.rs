// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Host tests of `qp_ex`: no kernel and no device. A batch is built as the ops build it and its
//! list read back; an extended QP is made as `create_qp_ex` makes it, but for the command, with
//! a memfd's doorbell page, and driven through the `struct ibv_qp_ex` pointers, as libibverbs's
//! inline `ibv_wr_*` functions do; what it posted is counted in its send queue.

use super::*;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use qhca::{Doorbell, QpCaps, QpLayout, QpType};
use qhca_uapi::UAR_PAGE_SIZE;

use crate::VerbsQp;

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

const CAPS: QpCaps = QpCaps {
    max_send_wr: 8,
    max_recv_wr: 8,
    max_sge: 2,
    max_inline: 32,
};

/// What a QP of `CAPS` holds.
fn limits(ud: bool) -> Limits {
    let l = QpLayout::new(&CAPS).expect("layout");
    Limits {
        max_sge: l.max_sge,
        max_inline: l.max_inline,
        depth: l.sq_depth(),
        ud,
        sig_all: false,
    }
}

/// One posted request, as read back from what `complete` hands over.
#[derive(Debug, PartialEq)]
struct Got {
    wr_id: u64,
    op: WrOp,
    flags: SendFlags,
    sges: Vec<(u64, u32, u32)>,
    /// The bytes of an inline request.
    inline: Option<Vec<u8>>,
    ud: Option<UdDest>,
}

/// Completes `b`, reading back the requests it posts; `ret` is what the post answers.
fn complete(b: &mut WrBatch, ret: c_int) -> (c_int, Vec<Got>) {
    let mut got = Vec::new();
    let r = b.complete(|ready| {
        for i in 0..ready.len() {
            let w = ready.wr(i);
            got.push(Got {
                wr_id: w.wr_id,
                op: w.op,
                flags: w.flags,
                sges: w.sges.iter().map(|s| (s.addr, s.length, s.lkey)).collect(),
                inline: w.inline.map(<[u8]>::to_vec),
                ud: w.ud,
            });
        }
        ret
    });
    (r, got)
}

fn sge(addr: u64, length: u32, lkey: u32) -> ibv_sge {
    ibv_sge { addr, length, lkey }
}

const WRITE: WrOp = WrOp::Write {
    raddr: 0x9000,
    rkey: 7,
};
const READ: WrOp = WrOp::Read {
    raddr: 0x9000,
    rkey: 7,
};

/// A batch of several ops, with SGE lists and inline data, comes out as the `qhca` crate's
/// requests in order, with each op's `wr_id` and flags, its SGEs (zero-length ones left out) and
/// a copy of its inline bytes (the program's buffer may change after the setter); the batch is
/// empty after.
#[test]
fn a_batch_is_the_list_of_its_ops() {
    let mut b = WrBatch::new(limits(false));
    let mut data = *b"hello, inline";
    let none = ptr::null_mut();
    b.start();
    b.push(1, IBV_SEND_SIGNALED, WRITE, Data::MayInline, none);
    b.set_sges(&[sge(0x1000, 16, 3), sge(0x1800, 0, 3), sge(0x2000, 8, 3)]);
    // IBV_SEND_INLINE in wr_flags does not make a request inline; the setter does.
    b.push(2, IBV_SEND_INLINE, WrOp::Send, Data::MayInline, none);
    // SAFETY: `data` is readable for the call.
    unsafe { b.set_inline(core::iter::once((data.as_ptr(), data.len()))) };
    data[0] = b'J';
    b.push(3, IBV_SEND_FENCE, READ, Data::Sges, none);
    b.set_sges(&[sge(0x3000, 4, 5)]);
    b.push(4, 0, WrOp::Send, Data::MayInline, none);
    b.set_sges(&[sge(0x4000, 1, 1)]);
    // A second setter replaces the first.
    b.set_sges(&[sge(0x5000, 2, 2)]);
    let (r, got) = complete(&mut b, 0);
    assert_eq!(r, 0);
    let want = [
        (
            1,
            WRITE,
            SendFlags::SIGNALED,
            vec![(0x1000, 16, 3), (0x2000, 8, 3)],
            None,
        ),
        (
            2,
            WrOp::Send,
            SendFlags::NONE,
            vec![],
            Some(b"hello, inline".to_vec()),
        ),
        (3, READ, SendFlags::FENCE, vec![(0x3000, 4, 5)], None),
        (4, WrOp::Send, SendFlags::NONE, vec![(0x5000, 2, 2)], None),
    ];
    assert_eq!(got.len(), want.len());
    for (g, (id, op, flags, sges, inline)) in got.iter().zip(want) {
        assert_eq!((g.wr_id, g.op, g.flags), (id, op, flags));
        assert_eq!((&g.sges, &g.inline, g.ud), (&sges, &inline, None));
    }
    assert_ne!(got[1].inline.as_deref(), Some(&data[..]));
    assert!(b.staged.is_empty() && b.sges.is_empty() && b.inline.is_empty() && !b.open);

    // An empty batch posts nothing and succeeds.
    b.start();
    let (r, got) = complete(&mut b, libc::EIO);
    assert_eq!((r, got.len()), (0, 0));

    // A QP that signals every request signals each of the batch's.
    let mut all = limits(false);
    all.sig_all = true;
    let mut b = WrBatch::new(all);
    b.start();
    b.push(5, 0, WrOp::Send, Data::MayInline, none);
    assert_eq!(complete(&mut b, 0).1[0].flags, SendFlags::SIGNALED);
}

/// Each misuse records `EINVAL` (or `ENOMEM`), `complete` answers it and posts nothing, and the
/// next batch starts clean.
#[test]
fn a_failed_op_or_setter_fails_the_whole_batch() {
    let l = limits(false);
    let none = ptr::null_mut();
    let too_many: Vec<_> = (0..=l.max_sge)
        .map(|i| sge(0x1000 * u64::from(i + 1), 8, 1))
        .collect();
    let big = vec![0u8; l.max_inline as usize + 1];
    type Build = Box<dyn Fn(&mut WrBatch)>;
    let send = move |b: &mut WrBatch| b.push(1, 0, WrOp::Send, Data::MayInline, none);
    let faa = |raddr| WrOp::FetchAdd {
        raddr,
        rkey: 7,
        add: 1,
    };
    let cases: Vec<(&str, c_int, Build)> = vec![
        (
            "too many SGEs",
            libc::EINVAL,
            Box::new(move |b| {
                send(b);
                b.set_sges(&too_many);
            }),
        ),
        (
            "inline over max_inline",
            libc::EINVAL,
            Box::new(move |b| {
                send(b);
                // SAFETY: `big` is readable.
                unsafe { b.set_inline(core::iter::once((big.as_ptr(), big.len()))) };
            }),
        ),
        (
            "inline on a READ",
            libc::EINVAL,
            Box::new(move |b| {
                b.push(1, 0, READ, Data::Sges, none);
                // SAFETY: no bytes are read.
                unsafe { b.set_inline(core::iter::once((ptr::null(), 0))) };
            }),
        ),
        (
            "data on LOCAL_INV",
            libc::EINVAL,
            Box::new(move |b| {
                b.push(1, 0, WrOp::LocalInv { rkey: 7 }, Data::Nothing, none);
                b.set_sges(&[sge(0x1000, 8, 1)]);
            }),
        ),
        (
            "unknown wr_flags",
            libc::EINVAL,
            Box::new(move |b| {
                b.push(1, IBV_SEND_IP_CSUM, WrOp::Send, Data::MayInline, none);
            }),
        ),
        (
            "an atomic of 4 bytes",
            libc::EINVAL,
            Box::new(move |b| {
                b.push(1, 0, faa(0x8000), Data::Atomic { raddr: 0x8000 }, none);
                b.set_sges(&[sge(0x1000, 4, 1)]);
            }),
        ),
        (
            "an atomic at an odd address",
            libc::EINVAL,
            Box::new(move |b| {
                b.push(1, 0, faa(0x8004), Data::Atomic { raddr: 0x8004 }, none);
                b.set_sges(&[sge(0x1000, 8, 1)]);
            }),
        ),
        (
            "more requests than the queue",
            libc::ENOMEM,
            Box::new(move |b| {
                for _ in 0..=l.depth {
                    send(b);
                }
            }),
        ),
    ];
    let mut b = WrBatch::new(l);
    for (what, errno, build) in cases {
        b.start();
        send(&mut b);
        build(&mut b);
        // Ops after the failure are ignored.
        send(&mut b);
        let (r, got) = complete(&mut b, 0);
        assert_eq!((r, got.len()), (errno, 0), "{what}");
        b.start();
        send(&mut b);
        assert_eq!(complete(&mut b, 0).1.len(), 1, "after {what}");
    }

    // A setter before any op.
    b.start();
    b.set_sges(&[sge(0x1000, 8, 1)]);
    send(&mut b);
    assert_eq!(complete(&mut b, 0), (libc::EINVAL, vec![]));

    // Outside a batch: ops and setters record EINVAL, complete answers it; abort drops all.
    send(&mut b);
    b.set_sges(&[sge(0x1000, 8, 1)]);
    assert_eq!(complete(&mut b, 0), (libc::EINVAL, vec![]));
    assert_eq!(complete(&mut b, 0).0, libc::EINVAL);
    b.start();
    send(&mut b);
    b.abort();
    assert_eq!(complete(&mut b, 0), (libc::EINVAL, vec![]));
}

/// A UD request needs its destination; a datagram over the MTU is refused before posting.
#[test]
fn ud_requests_need_an_address_and_fit_the_mtu() {
    let mut b = WrBatch::new(limits(true));
    let none = ptr::null_mut();
    b.start();
    b.push(1, 0, WrOp::Send, Data::MayInline, none);
    assert_eq!(complete(&mut b, 0).0, libc::EINVAL);

    let dest = UdDest {
        ah: 3,
        remote_qpn: 0x42,
        remote_qkey: 0x1111,
    };
    b.start();
    b.push(2, 0, WrOp::SendImm(5), Data::MayInline, none);
    b.set_ud(dest);
    b.set_sges(&[sge(0x1000, UD_MAX_MSG as u32 + 1, 1)]);
    assert_eq!(complete(&mut b, 0).0, libc::EINVAL);

    b.start();
    b.push(3, 0, WrOp::Send, Data::MayInline, none);
    b.set_ud(dest);
    b.set_sges(&[sge(0x1000, 64, 1)]);
    let (r, got) = complete(&mut b, 0);
    assert_eq!((r, got.len(), got[0].ud), (0, 1, Some(dest)));
}

/// `create_qp_ex`'s attributes: the PD is required, unknown bits are `EINVAL`, features qhca
/// lacks and send ops the QP's type does not have are `EOPNOTSUPP`; the create flags' bit
/// with no flag set passes.
#[test]
fn create_attributes_are_checked() {
    let attr = |comp_mask: u32, qp_type: ibv_qp_type, ops: u32| ibv_qp_init_attr_ex {
        comp_mask,
        qp_type,
        send_ops_flags: u64::from(ops),
        ..Default::default()
    };
    let pd_ops = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    let rc_all = RC_SEND_OPS as u32;
    for (a, want) in [
        (attr(pd_ops, IBV_QPT_RC, rc_all), Ok(())),
        (
            attr(
                pd_ops,
                IBV_QPT_UD,
                IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
            ),
            Ok(()),
        ),
        (attr(IBV_QP_INIT_ATTR_PD, IBV_QPT_RC, u32::MAX), Ok(())),
        (
            attr(IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, IBV_QPT_RC, 0),
            Err(libc::EINVAL),
        ),
        (attr(pd_ops | 1 << 20, IBV_QPT_RC, 0), Err(libc::EINVAL)),
        // The create flags' bit with no flag asks for nothing (pyverbs sets it so).
        (
            attr(pd_ops | IBV_QP_INIT_ATTR_CREATE_FLAGS, IBV_QPT_RC, 0),
            Ok(()),
        ),
        (
            ibv_qp_init_attr_ex {
                create_flags: IBV_QP_CREATE_SCATTER_FCS,
                ..attr(pd_ops | IBV_QP_INIT_ATTR_CREATE_FLAGS, IBV_QPT_RC, 0)
            },
            Err(libc::EOPNOTSUPP),
        ),
        (
            attr(pd_ops | IBV_QP_INIT_ATTR_XRCD, IBV_QPT_RC, 0),
            Err(libc::EOPNOTSUPP),
        ),
        (
            attr(pd_ops, IBV_QPT_RC, IBV_QP_EX_WITH_TSO),
            Err(libc::EOPNOTSUPP),
        ),
        (
            attr(pd_ops, IBV_QPT_RC, IBV_QP_EX_WITH_ATOMIC_WRITE),
            Err(libc::EOPNOTSUPP),
        ),
        (
            attr(pd_ops, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE),
            Err(libc::EOPNOTSUPP),
        ),
        (
            attr(pd_ops, IBV_QPT_UC, IBV_QP_EX_WITH_SEND),
            Err(libc::EOPNOTSUPP),
        ),
    ] {
        assert_eq!(
            check_attr(&a),
            want,
            "{:#x} {:#x}",
            a.comp_mask,
            a.send_ops_flags
        );
    }
}

/// An extended QP made as `create_qp_ex` makes it (but known to no kernel), freed on drop.
struct FakeQp(*mut Qp);

impl FakeQp {
    fn new(qp_type: QpType) -> FakeQp {
        FakeQp(Qp::fake_ex(&CAPS, qp_type, doorbell()))
    }

    /// What libibverbs's `ibv_qp_to_qp_ex` answers: the `struct ibv_qp_ex` if `comp_mask` of
    /// the `struct verbs_qp` says `VERBS_QP_EX`.
    fn qpx(&self) -> *mut ibv_qp_ex {
        let vqp = self.0.cast::<VerbsQp>();
        // SAFETY: our QP, which starts with a `struct verbs_qp`; read while no op runs.
        assert!(unsafe { (*vqp).is_ex() });
        vqp.cast()
    }

    fn outstanding(&self) -> u32 {
        // SAFETY: ours, live until drop.
        unsafe { &*self.0 }.sq_outstanding()
    }

    /// The program's `qpx->wr_id = id; qpx->wr_flags = flags;`.
    fn set_wr(&self, id: u64, flags: c_uint) {
        let q = self.qpx();
        // SAFETY: our QP; the fields written on their own, as a program does between calls.
        unsafe {
            (&raw mut (*q).wr_id).write(id);
            (&raw mut (*q).wr_flags).write(flags);
        }
    }
}

impl Drop for FakeQp {
    fn drop(&mut self) {
        // SAFETY: `Box::into_raw` of `fake_ex`, used no more.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// Calls the op `$op` of a `FakeQp`'s `struct ibv_qp_ex`, as libibverbs's inline functions do.
macro_rules! call {
    ($f:expr, $op:ident $(, $arg:expr)*) => {{
        let q = $f.qpx();
        // SAFETY: our extended QP, whose ops were set before it was shared and are not written
        // after; the arguments are live for the call.
        unsafe { (&raw const (*q).$op).read().expect(stringify!($op))(q $(, $arg)*) }
    }};
}

/// `struct verbs_qp` as libibverbs 44 lays it out, and the ops of each type: RC has every op
/// qhca posts, UD the sends and `wr_set_ud_addr`; what qhca lacks stays NULL.
#[test]
fn the_qp_is_a_verbs_qp_with_the_ops_of_its_type() {
    // The libibverbs these tests link (Debian's 44) reads the mask right after its 352-byte
    // `struct ibv_qp_ex`.
    assert_eq!(crate::verbs_qp_mask_offset(), Some(size_of::<ibv_qp_ex>()));
    let rc = FakeQp::new(QpType::Rc);
    let ud = FakeQp::new(QpType::Ud);
    // SAFETY: ours; the ops are not written after creation.
    let (r, u) = unsafe { (&*rc.qpx(), &*ud.qpx()) };
    assert!(r.wr_rdma_write.is_some() && r.wr_atomic_fetch_add.is_some() && r.wr_bind_mw.is_some());
    assert!(r.wr_set_ud_addr.is_none() && r.wr_send_tso.is_none() && r.wr_atomic_write.is_none());
    assert!(u.wr_send.is_some() && u.wr_send_imm.is_some() && u.wr_set_ud_addr.is_some());
    assert!(u.wr_rdma_write.is_none() && u.wr_atomic_cmp_swp.is_none());
    assert!(r.wr_start.is_some() && r.wr_complete.is_some() && r.wr_abort.is_some());
}

/// Through the ops: a batch posts all its requests with one complete; an aborted or failed batch
/// posts none; one that does not fit the send queue's room is `ENOMEM` and posts none.
#[test]
fn the_ops_post_whole_batches_or_nothing() {
    let f = FakeQp::new(QpType::Rc);
    let depth = limits(false).depth;
    let data = [7u8; 8];
    let list = [sge(0x1000, 8, 1), sge(0x2000, 8, 1)];

    call!(f, wr_start);
    f.set_wr(1, IBV_SEND_SIGNALED);
    call!(f, wr_rdma_write, 7, 0x9000);
    call!(f, wr_set_sge, 1, 0x1000, 64);
    f.set_wr(2, 0);
    call!(f, wr_send_imm, 0x1234u32.to_be());
    call!(
        f,
        wr_set_inline_data,
        data.as_ptr().cast_mut().cast(),
        data.len()
    );
    f.set_wr(3, IBV_SEND_SIGNALED);
    call!(f, wr_atomic_fetch_add, 7, 0x9008, 1);
    call!(f, wr_set_sge_list, 1, list.as_ptr());
    assert_eq!(f.outstanding(), 0, "nothing before complete");
    assert_eq!(call!(f, wr_complete), 0);
    assert_eq!(f.outstanding(), 3);

    // Aborted: nothing.
    call!(f, wr_start);
    call!(f, wr_send);
    call!(f, wr_set_sge, 1, 0x1000, 64);
    call!(f, wr_abort);
    assert_eq!(f.outstanding(), 3);

    // Too many SGEs: EINVAL at complete, nothing posted, even the good request before it.
    call!(f, wr_start);
    call!(f, wr_send);
    call!(f, wr_set_sge, 1, 0x1000, 64);
    call!(f, wr_rdma_read, 7, 0x9000);
    let many = vec![sge(0x1000, 8, 1); limits(false).max_sge as usize + 1];
    call!(f, wr_set_sge_list, many.len(), many.as_ptr());
    assert_eq!(call!(f, wr_complete), libc::EINVAL);
    assert_eq!(f.outstanding(), 3);

    // An op with no batch: no crash, nothing posted; complete says EINVAL.
    call!(f, wr_send);
    assert_eq!(call!(f, wr_complete), libc::EINVAL);
    assert_eq!(f.outstanding(), 3);

    // More than the room left (the queue holds `depth`, 3 are outstanding): ENOMEM, none.
    call!(f, wr_start);
    for _ in 0..depth - 2 {
        call!(f, wr_send);
        call!(f, wr_set_sge, 1, 0x1000, 64);
    }
    assert_eq!(call!(f, wr_complete), libc::ENOMEM);
    assert_eq!(f.outstanding(), 3);
    // Exactly the room: all of it.
    call!(f, wr_start);
    for _ in 0..depth - 3 {
        call!(f, wr_send);
        call!(f, wr_set_sge, 1, 0x1000, 64);
    }
    assert_eq!(call!(f, wr_complete), 0);
    assert_eq!(f.outstanding(), depth);
}

/// A window or address handle of no context of ours (here: the fake QP has none, so any
/// handle's context differs) fails the batch.
#[test]
fn foreign_handles_fail_the_batch() {
    let ud = FakeQp::new(QpType::Ud);
    let mut ah = ibv_ah {
        context: ptr::NonNull::dangling().as_ptr(),
        ..Default::default()
    };
    call!(ud, wr_start);
    call!(ud, wr_send);
    call!(ud, wr_set_ud_addr, &mut ah, 2, 3);
    call!(ud, wr_set_sge, 1, 0x1000, 64);
    assert_eq!(call!(ud, wr_complete), libc::EINVAL);
    assert_eq!(ud.outstanding(), 0);

    let rc = FakeQp::new(QpType::Rc);
    let mut mw = ibv_mw {
        context: ptr::NonNull::dangling().as_ptr(),
        ..Default::default()
    };
    let info = ibv_mw_bind_info::default();
    call!(rc, wr_start);
    call!(rc, wr_bind_mw, &mut mw, 5, &info);
    assert_eq!(call!(rc, wr_complete), libc::EINVAL);
    call!(rc, wr_start);
    call!(rc, wr_bind_mw, &mut mw, 5, ptr::null());
    assert_eq!(call!(rc, wr_complete), libc::EINVAL);
    assert_eq!(rc.outstanding(), 0);
}
