// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A context's `async_fd` and the asynchronous events behind it.
//!
//! The kernel's uverbs drops the queued events of an object when the object is destroyed, so
//! `poll(2)` on libibverbs's `async_fd` says readable only while an event is queued that
//! `ibv_get_async_event` will return, and a blocking `ibv_get_async_event` after such a poll
//! returns at once. qhca's driver keeps a destroyed object's events in the context's queue
//! (nothing of its uapi removes them), and the layer must not hand them out: the program may
//! have freed the object's memory, and the address may be another object's by now. Skipping
//! them at `ibv_get_async_event` alone would leave the fd readable for events that are never
//! returned, and a blocking call after `poll` said readable would skip them and then wait for
//! ever.
//!
//! So the layer does what uverbs does, at the same moment: once the driver has destroyed a QP
//! or CQ (it queues nothing for it any more), [`AsyncEvents::purge`] takes every event queued in
//! the driver into a queue of its own (`held`, oldest first, all older than any left in the
//! driver) and drops those that name the destroyed object, in `held` too. The program's
//! `async_fd` is an epoll set of the context's fd (readable while the driver has an event, in
//! error once the device is gone) and an eventfd that is readable exactly while `held` is not
//! empty: readable means an event is queued, of a live object or of the device. The one way an
//! event can still be skipped is a destroy that runs concurrently with the
//! `ibv_get_async_event` (between its `ibv_destroy_*` call and the end of the purge), which is
//! the program's own race, and uverbs's read blocks in the same case.

use core::ffi::c_int;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use qhca::{AsyncEvent, Errno, Error};

use crate::misc::lock;

/// Events taken from the driver before the program asked for them, and whether `signal` is
/// set (which it is exactly while `queue` is not empty, changed under the same lock).
#[derive(Default)]
struct Held {
    queue: VecDeque<AsyncEvent>,
    signalled: bool,
}

/// The driver's queue as `AsyncEvents` sees it: its non-blocking take
/// ([`qhca::Context::get_async_event`]).
pub(crate) type Driver<'a> = &'a mut dyn FnMut() -> qhca::Result<Option<AsyncEvent>>;

/// A context's `async_fd` and its held events: see the module documentation.
pub(crate) struct AsyncEvents {
    held: Mutex<Held>,
    /// A non-blocking eventfd, 1 while `held` has events and 0 otherwise.
    signal: OwnedFd,
    /// The program's `async_fd`: an epoll set of the context's fd and `signal`, for `POLLIN`.
    epoll: OwnedFd,
}

fn sys(op: &'static str) -> Error {
    Error::Sys {
        op,
        source: Errno::last(),
    }
}

/// A fresh fd a system call returned (or the error it set).
fn owned(fd: c_int, op: &'static str) -> qhca::Result<OwnedFd> {
    if fd < 0 {
        return Err(sys(op));
    }
    // SAFETY: a new fd that the call returned to us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl AsyncEvents {
    /// `async_fd` for the context whose file is `ctx_fd`, with nothing held.
    pub(crate) fn new(ctx_fd: BorrowedFd<'_>) -> qhca::Result<AsyncEvents> {
        // SAFETY: no pointer argument.
        let signal = owned(
            unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) },
            "eventfd for async_fd",
        )?;
        // SAFETY: no pointer argument.
        let epoll = owned(
            unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) },
            "epoll_create1 for async_fd",
        )?;
        for fd in [ctx_fd.as_raw_fd(), signal.as_raw_fd()] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: both fds are open; `ev` is a live epoll_event for the call.
            if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
                return Err(sys("epoll_ctl for async_fd"));
            }
        }
        Ok(AsyncEvents {
            held: Mutex::new(Held::default()),
            signal,
            epoll,
        })
    }

    /// The program's `async_fd`.
    pub(crate) fn fd(&self) -> c_int {
        self.epoll.as_raw_fd()
    }

    /// Sets or clears `signal` to match `held` (called with its lock held).
    fn sync(&self, held: &mut Held) {
        let want = !held.queue.is_empty();
        if want == held.signalled {
            return;
        }
        let fd = self.signal.as_raw_fd();
        let mut v = [0u8; 8];
        if want {
            v = 1u64.to_ne_bytes();
            // SAFETY: writes our 8 bytes to our own eventfd, which cannot overflow: it only
            // holds 0 or 1.
            unsafe { libc::write(fd, v.as_ptr().cast(), 8) };
        } else {
            // SAFETY: reads at most 8 bytes into `v` from our own non-blocking eventfd.
            unsafe { libc::read(fd, v.as_mut_ptr().cast(), 8) };
        }
        held.signalled = want;
    }

    /// The oldest queued event, without waiting: a held one first, else the driver's.
    fn take(&self, driver: Driver<'_>) -> qhca::Result<Option<AsyncEvent>> {
        let mut held = lock(&self.held);
        if let Some(ev) = held.queue.pop_front() {
            self.sync(&mut held);
            return Ok(Some(ev));
        }
        // Under the lock, so that no purge moves a newer event into `held` before this one
        // is out.
        driver()
    }

    /// After the driver destroyed an object (see the module documentation): takes every event
    /// it has queued into `held`, then drops the held events for which `gone` is true. An error
    /// of the driver ends the taking (the events left there are newer than the held ones).
    pub(crate) fn purge(&self, driver: Driver<'_>, gone: impl Fn(&AsyncEvent) -> bool) {
        let mut held = lock(&self.held);
        while let Ok(Some(ev)) = driver() {
            held.queue.push_back(ev);
        }
        held.queue.retain(|ev| !gone(ev));
        self.sync(&mut held);
    }

    /// Waits until `async_fd` is readable (an event queued, or the device gone).
    fn wait(&self) -> qhca::Result<()> {
        let mut pfd = libc::pollfd {
            fd: self.epoll.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd of ours, for the call's duration.
            if unsafe { libc::poll(&mut pfd, 1, -1) } >= 0 {
                return Ok(());
            }
            if Errno::last() != Errno::EINTR {
                return Err(sys("poll async_fd"));
            }
        }
    }

    /// `ibv_get_async_event`: the oldest event that `accept` takes (it returns `None` for one
    /// that names an object the program no longer has, which is dropped), `Ok(None)` if
    /// `nonblock` and there is none. Blocking, it waits while nothing is queued, as uverbs's
    /// read does: never after `poll(2)` said `async_fd` is readable, unless the program destroys
    /// the object of every queued event meanwhile. `check` is the context's
    /// [`qhca::Context::check`]: once the device is gone this returns the DEVICE_FATAL event
    /// still queued, then fails with [`Error::Disassociated`] instead of waiting.
    pub(crate) fn get<T>(
        &self,
        nonblock: bool,
        driver: Driver<'_>,
        check: &dyn Fn() -> qhca::Result<()>,
        mut accept: impl FnMut(AsyncEvent) -> Option<T>,
    ) -> qhca::Result<Option<T>> {
        let mut gone_seen = false;
        loop {
            if let Some(ev) = self.take(driver)? {
                if let Some(t) = accept(ev) {
                    return Ok(Some(t));
                }
                continue;
            }
            if nonblock {
                return Ok(None);
            }
            if let Err(e) = check() {
                // The driver queues DEVICE_FATAL together with the error: take once more.
                if gone_seen {
                    return Err(e);
                }
                gone_seen = true;
                continue;
            }
            self.wait()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::os::fd::AsFd;
    use std::time::Duration;

    /// A stand-in for the driver's queue: the events, and a pipe whose read end is readable
    /// while there are any (one byte per event), as the context's fd is.
    struct FakeDriver {
        events: RefCell<VecDeque<AsyncEvent>>,
        rx: OwnedFd,
        tx: OwnedFd,
    }

    impl FakeDriver {
        fn new() -> FakeDriver {
            let mut fds = [0; 2];
            // SAFETY: room for two fds.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
            // SAFETY: two fresh fds of ours.
            let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
            FakeDriver {
                events: RefCell::new(VecDeque::new()),
                rx,
                tx,
            }
        }

        fn queue(&self, ev: AsyncEvent) {
            self.events.borrow_mut().push_back(ev);
            // SAFETY: one byte from ours into our pipe.
            assert_eq!(
                unsafe { libc::write(self.tx.as_raw_fd(), [0u8].as_ptr().cast(), 1) },
                1
            );
        }

        fn take(&self) -> qhca::Result<Option<AsyncEvent>> {
            let ev = self.events.borrow_mut().pop_front();
            if ev.is_some() {
                let mut b = [0u8];
                // SAFETY: one byte into ours; there is one, so it does not block.
                assert_eq!(
                    unsafe { libc::read(self.rx.as_raw_fd(), b.as_mut_ptr().cast(), 1) },
                    1
                );
            }
            Ok(ev)
        }
    }

    fn readable(a: &AsyncEvents) -> bool {
        let mut pfd = libc::pollfd {
            fd: a.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, for the call.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n == 1 && pfd.revents & libc::POLLIN != 0
    }

    fn qp(qpn: u32) -> AsyncEvent {
        AsyncEvent::QpFatal { qpn }
    }

    fn names_qp(qpn: u32) -> impl Fn(&AsyncEvent) -> bool {
        move |ev| *ev == AsyncEvent::QpFatal { qpn }
    }

    fn none_gone(_: &AsyncEvent) -> bool {
        false
    }

    #[test]
    fn a_destroyed_objects_events_leave_async_fd_with_it() {
        let d = FakeDriver::new();
        let a = AsyncEvents::new(d.rx.as_fd()).unwrap();
        assert!(!readable(&a));
        d.queue(qp(1));
        d.queue(qp(2));
        d.queue(AsyncEvent::CqErr { cqn: 3 });
        assert!(readable(&a));
        // QP 1 destroyed: the rest is held, and still makes the fd readable.
        a.purge(&mut || d.take(), names_qp(1));
        assert!(d.events.borrow().is_empty());
        assert!(readable(&a));
        a.purge(&mut || d.take(), names_qp(2));
        a.purge(&mut || d.take(), |ev| *ev == AsyncEvent::CqErr { cqn: 3 });
        // Every queued event named a destroyed object: not readable, as after uverbs's destroy.
        assert!(!readable(&a));
        // (A blocking get would wait now, as uverbs's read: nothing is queued.)
        let none = a.get(true, &mut || d.take(), &|| Ok(()), Some);
        assert!(matches!(none, Ok(None)));
    }

    #[test]
    fn held_events_come_first_and_in_order() {
        let d = FakeDriver::new();
        let a = AsyncEvents::new(d.rx.as_fd()).unwrap();
        d.queue(qp(1));
        d.queue(qp(2));
        a.purge(&mut || d.take(), names_qp(9));
        d.queue(qp(3));
        let mut got = Vec::new();
        while let Some(ev) = a.get(true, &mut || d.take(), &|| Ok(()), Some).unwrap() {
            got.push(ev);
        }
        assert_eq!(got, [qp(1), qp(2), qp(3)]);
        assert!(
            !readable(&a),
            "the eventfd is cleared with the last held event"
        );
    }

    #[test]
    fn a_blocking_get_after_poll_said_readable_returns_an_event() {
        let d = FakeDriver::new();
        let a = AsyncEvents::new(d.rx.as_fd()).unwrap();
        // An event the program no longer has an object for (destroyed concurrently), then one
        // it has: the first is skipped, the second returned, without waiting.
        d.queue(qp(7));
        d.queue(qp(8));
        assert!(readable(&a));
        let got = a.get(false, &mut || d.take(), &|| Ok(()), |ev| {
            (ev != qp(7)).then_some(ev)
        });
        assert_eq!(got.unwrap(), Some(qp(8)));

        // Held events too.
        d.queue(qp(4));
        a.purge(&mut || d.take(), none_gone);
        assert!(readable(&a));
        let got = a.get(false, &mut || d.take(), &|| Ok(()), Some);
        assert_eq!(got.unwrap(), Some(qp(4)));
    }

    #[test]
    fn a_blocking_get_waits_for_the_next_event() {
        let d = FakeDriver::new();
        let a = AsyncEvents::new(d.rx.as_fd()).unwrap();
        let tx = d.tx.try_clone().unwrap();
        d.events.borrow_mut().push_back(qp(5));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: one byte from ours into the pipe: the event is now "queued".
            unsafe { libc::write(tx.as_raw_fd(), [0u8].as_ptr().cast(), 1) };
        });
        // The event is in the list but not "queued" until the byte arrives; take only then.
        let mut ready = false;
        let got = a.get(
            false,
            &mut || {
                if !ready {
                    ready = true;
                    return Ok(None);
                }
                d.take()
            },
            &|| Ok(()),
            Some,
        );
        t.join().unwrap();
        assert_eq!(got.unwrap(), Some(qp(5)));
    }

    #[test]
    fn a_gone_device_gives_its_fatal_event_then_fails() {
        let d = FakeDriver::new();
        let a = AsyncEvents::new(d.rx.as_fd()).unwrap();
        let gone = || Err(Error::Disassociated { op: "check" });
        let mut first = true;
        // DEVICE_FATAL queued with the error, after the first take looked.
        let got = a.get(
            false,
            &mut || {
                if first {
                    first = false;
                    d.queue(AsyncEvent::DeviceFatal);
                    return Ok(None);
                }
                d.take()
            },
            &gone,
            Some,
        );
        assert_eq!(got.unwrap(), Some(AsyncEvent::DeviceFatal));
        let got = a.get(false, &mut || d.take(), &gone, Some);
        assert!(matches!(got, Err(Error::Disassociated { .. })));
    }

    #[test]
    fn o_nonblock_on_async_fd_is_seen() {
        let d = FakeDriver::new();
        let a = AsyncEvents::new(d.rx.as_fd()).unwrap();
        assert!(!crate::device::nonblocking(a.fd()));
        // SAFETY: F_SETFL on our own fd.
        unsafe { libc::fcntl(a.fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert!(crate::device::nonblocking(a.fd()));
    }
}
