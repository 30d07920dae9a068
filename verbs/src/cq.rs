// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Completion channels and CQs: polling (no system call), arming, and completion events.
//!
//! A channel is an epoll set: each CQ created on it adds its eventfd (which the driver signals
//! on the armed CQ's next completion), and the context's fd (an error there means the device
//! went away). So `poll(2)` on the channel's fd works as on libibverbs's, and
//! `ibv_get_cq_event` waits in `epoll_wait` (or not at all if the program made the fd
//! non-blocking).

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use std::collections::HashSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use crate::device::{nonblocking, Ctx};
use crate::ffi::*;
use crate::misc::{debug, fail_null, lock, set_errno};
use crate::obj::{impl_obj, Obj};
use crate::real::forward;
use crate::wr::poll_into;

/// A completion channel. `users` counts its CQs: destroying it is `EBUSY` while it has any.
#[repr(C)]
pub(crate) struct Channel {
    ibv: UnsafeCell<ibv_comp_channel>,
    epoll: OwnedFd,
    users: AtomicUsize,
    /// The CQs in the epoll set (their addresses, the events' tokens). `ibv_get_cq_event` takes
    /// an event's CQ only if it is still here, under this lock, which `ibv_destroy_cq` takes to
    /// remove it: a CQ is never reached after its destroy began.
    members: Mutex<HashSet<u64>>,
}
impl_obj!(Channel, ibv_comp_channel);

/// `epoll_data` of the context's fd in a channel's set: no CQ has address 0.
const CONTEXT_TOKEN: u64 = 0;

fn epoll_ctl(epoll: &OwnedFd, op: c_int, fd: c_int, events: u32, token: u64) -> c_int {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: both fds are open; `ev` is a live epoll_event for the call.
    unsafe { libc::epoll_ctl(epoll.as_raw_fd(), op, fd, &mut ev) }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            ibv_create_comp_channel(context) as fn(*mut ibv_context) -> *mut ibv_comp_channel,
            null_mut()
        );
    };
    // SAFETY: no pointer argument; a new fd is returned to us alone.
    let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if fd < 0 {
        return null_mut();
    }
    // SAFETY: a fresh fd nothing else owns.
    let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
    // Errors only (always reported): the context disassociated.
    if epoll_ctl(
        &epoll,
        libc::EPOLL_CTL_ADD,
        ctx.ctx.as_raw_fd(),
        0,
        CONTEXT_TOKEN,
    ) < 0
    {
        return null_mut();
    }
    let ibv = ibv_comp_channel {
        context: ctx.ibv(),
        fd,
        refcnt: 0,
    };
    ctx.hold();
    Box::new(Channel {
        ibv: UnsafeCell::new(ibv),
        epoll,
        users: AtomicUsize::new(0),
        members: Mutex::new(HashSet::new()),
    })
    .into_ibv()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    // SAFETY: the program passes a live channel.
    let Some((ch, ctx)) = (unsafe { Channel::ours(channel) }) else {
        return forward!(
            ibv_destroy_comp_channel(channel) as fn(*mut ibv_comp_channel) -> c_int,
            libc::ENOSYS
        );
    };
    if ch.users.load(Ordering::Relaxed) > 0 {
        // As libibverbs: the errno value, returned.
        set_errno(libc::EBUSY);
        return libc::EBUSY;
    }
    ctx.release();
    // SAFETY: made by `ibv_create_comp_channel`, no CQ uses it, the program's last use.
    drop(unsafe { Channel::from_ibv(channel) });
    0
}

/// A CQ. `users` counts the QPs using it (`ibv_destroy_cq` is `EBUSY` while there are any);
/// `events` counts its completion events handed out and acknowledged, and `acked` wakes a
/// destroy that waits for the two to meet.
#[repr(C)]
pub(crate) struct Cq {
    ibv: UnsafeCell<ibv_cq>,
    pub(crate) cq: Mutex<qhca::Cq>,
    users: AtomicUsize,
    events: Mutex<(u32, u32)>,
    acked: Condvar,
}
impl_obj!(Cq, ibv_cq);

impl Cq {
    pub(crate) fn hold(&self) {
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn release(&self) {
        self.users.fetch_sub(1, Ordering::Relaxed);
    }

    fn channel(&self) -> *mut ibv_comp_channel {
        // SAFETY: a field read of our own object; the program does not write `channel`.
        unsafe { (*self.ibv()).channel }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            ibv_create_cq(context, cqe, cq_context, channel, comp_vector)
                as fn(
                    *mut ibv_context,
                    c_int,
                    *mut c_void,
                    *mut ibv_comp_channel,
                    c_int,
                ) -> *mut ibv_cq,
            null_mut()
        );
    };
    let entries = match u32::try_from(cqe) {
        Ok(n) if n >= 1 && n <= ctx.attr.max_cqe => n,
        _ => {
            debug(format_args!(
                "ibv_create_cq: {cqe} entries, 1..={}",
                ctx.attr.max_cqe
            ));
            set_errno(libc::EINVAL);
            return null_mut();
        }
    };
    if comp_vector != 0 {
        debug(format_args!(
            "ibv_create_cq: completion vector {comp_vector}; the context has one"
        ));
        set_errno(libc::EINVAL);
        return null_mut();
    }
    let ch = if channel.is_null() {
        None
    } else {
        // SAFETY: the program passes NULL or a live channel.
        match unsafe { Channel::ours(channel) } {
            Some((ch, c)) if core::ptr::eq(c, ctx) => Some(ch),
            _ => {
                debug(format_args!(
                    "ibv_create_cq: the channel is not of this context"
                ));
                set_errno(libc::EINVAL);
                return null_mut();
            }
        }
    };
    let efd = match ch.map(|_| qhca::eventfd()).transpose() {
        Ok(e) => e,
        Err(e) => return fail_null("ibv_create_cq", &e),
    };
    let cq = match qhca::Cq::new(&ctx.ctx, entries, efd) {
        Ok(cq) => cq,
        Err(e) => return fail_null("ibv_create_cq", &e),
    };
    // SAFETY: plain C data (pointers, integers, a pthread mutex and condition variable whose
    // all-zero values are their static initializers on Linux): all-zero is valid.
    let mut ibv: ibv_cq = unsafe { core::mem::zeroed() };
    ibv.context = ctx.ibv();
    ibv.channel = channel;
    ibv.cq_context = cq_context;
    ibv.handle = cq.cqn();
    ibv.cqe = c_int::try_from(cq.entries()).unwrap_or(c_int::MAX);
    let cqn = cq.cqn();
    let efd = cq.event_fd().map(|f| f.as_raw_fd());
    let c = Box::new(Cq {
        ibv: UnsafeCell::new(ibv),
        cq: Mutex::new(cq),
        users: AtomicUsize::new(0),
        events: Mutex::new((0, 0)),
        acked: Condvar::new(),
    });
    let p = c.into_ibv();
    if let (Some(ch), Some(efd)) = (ch, efd) {
        let mut members = lock(&ch.members);
        if epoll_ctl(
            &ch.epoll,
            libc::EPOLL_CTL_ADD,
            efd,
            libc::EPOLLIN as u32,
            p as u64,
        ) < 0
        {
            let e = std::io::Error::last_os_error();
            debug(format_args!("ibv_create_cq: epoll_ctl: {e}"));
            // SAFETY: just made above, never handed out.
            drop(unsafe { Cq::from_ibv(p) });
            set_errno(e.raw_os_error().unwrap_or(libc::EIO));
            return null_mut();
        }
        members.insert(p as u64);
        ch.users.fetch_add(1, Ordering::Relaxed);
    }
    ctx.hold();
    ctx.register_cq(cqn, p);
    p
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: the program passes a live CQ.
    let Some((c, ctx)) = (unsafe { Cq::ours(cq) }) else {
        return forward!(ibv_destroy_cq(cq) as fn(*mut ibv_cq) -> c_int, libc::ENOSYS);
    };
    if c.users.load(Ordering::Relaxed) > 0 {
        debug(format_args!("ibv_destroy_cq: QPs still use the CQ"));
        return libc::EBUSY;
    }
    // Out of the channel first (no event hands it out any more), then, as libibverbs, wait
    // until every completion event handed out is acknowledged.
    // SAFETY: a channel recorded at creation is live while it has CQs (its destroy is EBUSY).
    let ch = unsafe { Channel::ours(c.channel()) }.map(|(ch, _)| ch);
    if let Some(ch) = ch {
        let mut members = lock(&ch.members);
        members.remove(&(cq as u64));
        if let Some(fd) = lock(&c.cq).event_fd() {
            epoll_ctl(&ch.epoll, libc::EPOLL_CTL_DEL, fd.as_raw_fd(), 0, 0);
        }
    }
    let mut ev = lock(&c.events);
    while ev.0 != ev.1 {
        ev = c.acked.wait(ev).unwrap_or_else(|e| e.into_inner());
    }
    drop(ev);
    let cqn = lock(&c.cq).cqn();
    ctx.unregister(None, Some(cqn), cq as usize);
    if let Some(ch) = ch {
        ch.users.fetch_sub(1, Ordering::Relaxed);
    }
    ctx.release();
    // SAFETY: made by `ibv_create_cq`, no QP uses it, the program's last use.
    drop(unsafe { Cq::from_ibv(cq) });
    // Destroyed in the driver: its queued asynchronous events go, as uverbs drops them.
    ctx.purge_events(None, Some(cqn));
    0
}

/// `ops.poll_cq`: what the inline `ibv_poll_cq` calls. The provider's poll, no system call.
pub(crate) unsafe extern "C" fn poll_cq_op(cq: *mut ibv_cq, num: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the inline function passes the program's CQ, whose context has this op: ours,
    // made by `ibv_create_cq` as a `Cq`.
    let c = unsafe { &*cq.cast::<Cq>() };
    let mut q = lock(&c.cq);
    // SAFETY: the program passes room for `num` completions at `wc`.
    unsafe { poll_into(num, wc, |out| q.poll(out)) }
}

/// `ops.req_notify_cq`: what the inline `ibv_req_notify_cq` calls. A doorbell store, no
/// system call. `solicited_only` arms for every completion, a superset of the solicited ones
/// (the channel may then wake for more than asked: allowed, a wake-up is a hint to poll).
pub(crate) unsafe extern "C" fn req_notify_cq_op(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    // SAFETY: as in `poll_cq_op`.
    let c = unsafe { &*cq.cast::<Cq>() };
    lock(&c.cq).arm();
    0
}

#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq_out: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: the program passes a live channel.
    let Some((ch, ctx)) = (unsafe { Channel::ours(channel) }) else {
        return forward!(
            ibv_get_cq_event(channel, cq_out, cq_context)
                as fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int,
            -1
        );
    };
    let timeout = if nonblocking(ch.epoll.as_raw_fd()) {
        0
    } else {
        -1
    };
    loop {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for one event.
        let n = unsafe { libc::epoll_wait(ch.epoll.as_raw_fd(), &mut ev, 1, timeout) };
        if n < 0 {
            return -1; // errno from epoll_wait (EINTR: the program retries, as with libibverbs)
        }
        if n == 0 {
            set_errno(libc::EAGAIN);
            return -1;
        }
        // (A copy: `epoll_event` is packed.)
        let token = ev.u64;
        if token == CONTEXT_TOKEN || ctx.ctx.is_dead() {
            debug(format_args!("ibv_get_cq_event: the device is gone"));
            set_errno(libc::EIO);
            return -1;
        }
        // The CQ only if it is still a member, and its event taken under that lock: its
        // destroy removes it under the same lock first, so it is live here.
        let members = lock(&ch.members);
        if !members.contains(&token) {
            continue; // destroyed since: its last event is gone with it
        }
        // SAFETY: a member's token is the address of a live CQ of ours (above).
        let c = unsafe { &*(token as *const Cq) };
        let fd = lock(&c.cq).event_fd().map(|f| f.as_raw_fd());
        let Some(fd) = fd else { continue };
        let mut v = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `v`; the eventfd is non-blocking.
        if unsafe { libc::read(fd, v.as_mut_ptr().cast(), 8) } != 8 {
            continue; // another thread took this event
        }
        lock(&c.events).0 += 1;
        drop(members);
        // SAFETY: the program passes room for the CQ and its context.
        unsafe {
            if !cq_out.is_null() {
                *cq_out = c.ibv();
            }
            if !cq_context.is_null() {
                *cq_context = (*c.ibv()).cq_context;
            }
        }
        return 0;
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    // SAFETY: the program passes a live CQ.
    let Some((c, _)) = (unsafe { Cq::ours(cq) }) else {
        forward!(
            ibv_ack_cq_events(cq, nevents) as fn(*mut ibv_cq, u32) -> (),
            ()
        );
        return;
    };
    let mut ev = lock(&c.events);
    ev.1 = ev.1.wrapping_add(nevents);
    drop(ev);
    c.acked.notify_all();
}
