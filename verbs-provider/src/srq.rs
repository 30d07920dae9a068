// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Shared receive queues: the ring in the process's memory (`struct qhca_ib_create_srq` names it
//! to the driver), posted to with no system call through the shared post path
//! (`qhca_verbs_abi::post`) over the `qhca` crate's SRQ queue; the limit (`IBV_SRQ_LIMIT`) and
//! the query are the core's commands. No resizing (`IBV_SRQ_MAX_WR`: `EINVAL`, as mlx5).
//!
//! Asynchronous events are libibverbs's own work: the core names the SRQ of
//! `IBV_EVENT_SRQ_LIMIT_REACHED` by the user handle `ibv_cmd_create_srq` gave it (the address of
//! the `struct ibv_srq`, which starts [`Srq`]), and a QP of `IBV_EVENT_QP_LAST_WQE_REACHED` by
//! its `struct ibv_qp`, as for every QP event.

use core::ffi::c_int;
use core::mem::size_of_val;
use core::ptr;
use std::sync::{Mutex, MutexGuard};

use qhca::{PageBuf, SrqLayout, SrqQueue};
use qhca_uapi::{qhca_ib_create_srq, qhca_ib_create_srq_resp};
use qhca_verbs_abi::ffi::*;
use qhca_verbs_abi::post::Posting;

use crate::cmd::*;
use crate::context::Context;
use crate::qp::debug;

/// An SRQ: libibverbs's `struct ibv_srq` first, then its ring.
#[repr(C)]
struct Srq {
    ibv: ibv_srq,
    /// Set once the kernel made the SRQ (its number names the ring's doorbells).
    posting: Mutex<Option<Posting<SrqQueue>>>,
    /// The ring: freed after the kernel destroyed the SRQ (after `posting`, which writes it),
    /// kept with the object if it could not.
    buf: PageBuf,
}

impl Srq {
    /// The provider's SRQ of libibverbs's `srq`.
    ///
    /// # Safety
    ///
    /// `srq` is an SRQ this provider made, not destroyed.
    unsafe fn of<'a>(srq: *mut ibv_srq) -> &'a Srq {
        // SAFETY: the caller's promise: the `ibv_srq` that starts a `Srq`.
        unsafe { &*srq.cast::<Srq>() }
    }

    fn posting(&self) -> MutexGuard<'_, Option<Posting<SrqQueue>>> {
        self.posting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `create_srq`: at least `max_wr` requests of at least `max_sge` SGEs (what the ring holds is
/// given back in `attr`, as libibverbs does with the kernel's answer). The limit the program
/// passes goes to the kernel as it is (`ibv_create_srq(3)`: irrelevant there).
pub(crate) unsafe extern "C" fn create_srq(
    pd: *mut ibv_pd,
    init: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    let fail = |e: c_int| {
        set_errno(e);
        ptr::null_mut()
    };
    if init.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the program's attributes.
    let asked = unsafe { (*init).attr };
    let Ok(layout) = SrqLayout::new(asked.max_wr, asked.max_sge) else {
        return fail(libc::EINVAL);
    };
    let buf = match PageBuf::new(layout.buf_len) {
        Ok(b) => b,
        Err(_) => return fail(libc::ENOMEM),
    };
    let mut cmd = Cmd::<CREATE_SRQ_CMD, qhca_ib_create_srq>::new(qhca_ib_create_srq {
        buf_addr: buf.addr(),
        buf_len: buf.len() as u64,
        log: layout.log as u8,
        stride_log: layout.stride_log as u8,
        rsvd: 0,
        comp_mask: 0,
    });
    let mut resp = Resp::<CREATE_SRQ_RESP, qhca_ib_create_srq_resp>::new();
    // The kernel is asked for what the ring holds.
    // SAFETY: the program's attributes; nothing else reads them during the call.
    unsafe {
        let a = &mut (*init).attr;
        a.max_wr = layout.depth();
        a.max_sge = layout.max_sge;
    }
    let base = buf.as_ptr();
    // At its final address: the kernel's events name the SRQ by it.
    let srq = Box::into_raw(Box::new(Srq {
        ibv: ibv_srq::default(),
        posting: Mutex::new(None),
        buf,
    }));
    // SAFETY: libibverbs's arguments, passed on; `srq` starts with the `struct ibv_srq` it fills
    // in; the buffers are the sizes given.
    let ret = unsafe {
        ibv_cmd_create_srq(
            pd,
            srq.cast(),
            init,
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            size_of_val(&resp),
        )
    };
    if ret != 0 {
        // SAFETY: the program's attributes given back as they were; `srq` is ours, not handed
        // out (the kernel never had the ring).
        unsafe {
            (*init).attr = asked;
            return discard(srq, ret);
        }
    }
    // SAFETY: ours; `pd` is a PD of a context of ours.
    let (s, db) = unsafe { (&*srq, Context::of((*pd).context).doorbell()) };
    // SAFETY: `base` is the SRQ's `buf`: `layout.buf_len` fresh, zeroed, page-aligned bytes,
    // which the same `Srq` owns after `posting` (so they outlive the queue) and frees only after
    // the kernel destroyed the SRQ; nothing else in the process touches them.
    let queue = unsafe { SrqQueue::new(base, layout, resp.drv.srqn, db) };
    *s.posting() = Some(Posting::for_recv(queue));
    srq.cast()
}

/// `modify_srq`: the limit (`IBV_SRQ_LIMIT`) alone; 0 disarms it. qhca's SRQs are not resized:
/// `IBV_SRQ_MAX_WR` is `EINVAL` (as mlx5's kernel driver answers), before the kernel is asked.
pub(crate) unsafe extern "C" fn modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    if attr.is_null() || mask & !(IBV_SRQ_LIMIT as c_int) != 0 {
        return libc::EINVAL;
    }
    let mut cmd = Cmd::<MODIFY_SRQ_CMD, NoData>::new(NoData);
    // SAFETY: libibverbs's arguments, passed on; `cmd` is the size given.
    unsafe { ibv_cmd_modify_srq(srq, attr, mask, cmd.as_mut_ptr(), size_of_val(&cmd)) }
}

/// `query_srq`: `max_wr`, `max_sge` and the armed limit (0: none, or it fired).
pub(crate) unsafe extern "C" fn query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    if attr.is_null() {
        return libc::EINVAL;
    }
    let mut cmd = Cmd::<QUERY_SRQ_CMD, NoData>::new(NoData);
    // SAFETY: libibverbs's arguments, passed on; `cmd` is the size given.
    unsafe { ibv_cmd_query_srq(srq, attr, cmd.as_mut_ptr(), size_of_val(&cmd)) }
}

/// `destroy_srq`: the kernel refuses it (`EBUSY`) while a QP receives from the SRQ; the ring is
/// freed once it is destroyed, kept with the object otherwise.
pub(crate) unsafe extern "C" fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: `srq` came from `create_srq`, a `Srq`; the program's last use (once destroyed,
    // the device reads the ring no more).
    unsafe { free_if_destroyed(ibv_cmd_destroy_srq(srq), srq.cast::<Srq>()) }
}

/// `post_srq_recv`: what the inline `ibv_post_srq_recv` calls; no system call.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the program's SRQ, of a context of ours.
    let s = unsafe { Srq::of(srq) };
    match s.posting().as_mut() {
        // SAFETY: the program's list of live requests (ibv_post_srq_recv(3)).
        Some(p) => unsafe { p.post_recv(wr, bad, debug) },
        None => libc::EINVAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_the_kernels_sizes() {
        // <rdma/ib_user_verbs.h>: header 8, then the core's struct; the driver's data follows.
        assert_eq!(
            core::mem::offset_of!(Cmd<CREATE_SRQ_CMD, qhca_ib_create_srq>, drv),
            40
        );
        assert_eq!(
            core::mem::offset_of!(Resp<CREATE_SRQ_RESP, qhca_ib_create_srq_resp>, drv),
            16
        );
        assert_eq!((MODIFY_SRQ_CMD, QUERY_SRQ_CMD), (24, 24));
        // rdma-core's `struct ibv_srq`.
        assert_eq!(core::mem::offset_of!(ibv_srq, handle), 24);
        assert_eq!(core::mem::size_of::<ibv_srq>(), 128);
    }

    /// Refused before the kernel is asked: a resize, unknown bits, no attributes.
    #[test]
    fn modify_refuses_a_resize() {
        let mut attr = ibv_srq_attr::default();
        for mask in [IBV_SRQ_MAX_WR, IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT, 1 << 5] {
            // SAFETY: refused before `srq` is looked at.
            let r = unsafe { modify_srq(ptr::null_mut(), &mut attr, mask as c_int) };
            assert_eq!(r, libc::EINVAL, "mask {mask:#x}");
        }
        // SAFETY: as above.
        let r = unsafe { modify_srq(ptr::null_mut(), ptr::null_mut(), IBV_SRQ_LIMIT as c_int) };
        assert_eq!(r, libc::EINVAL);
    }
}
