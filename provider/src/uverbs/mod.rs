// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The control path over the RDMA core's uverbs device (`/dev/infiniband/uverbsN`), the kernel
//! ABI every RDMA device has: a context opened there speaks the core's write-ABI commands
//! (`write(2)` of `struct ib_uverbs_cmd_hdr` and the command, with qhca's udata after it), as
//! libibverbs does for the installed provider, and maps its doorbell page through the core's
//! mmap entry. The data path (rings in the process's memory, one doorbell store per post) makes
//! no system call.
//!
//! The rest of the crate keeps naming objects by the device's numbers (PDN, key, CQN, QPN, SRQN,
//! AH):
//! this backend remembers which core handle each number is ([`Handles`]) and which number each
//! user handle the core reports events with is.
//!
//! `ADVISE_MR` is a method of the core's ioctl interface (it has no write command), and so are
//! the driver's own `QUERY_CTX` and `QUERY_PORT` ([`methods`]); watched regions are a flag of
//! REG_MR's udata, their invalidation page an mmap entry of the context. `SET_GID` is not here
//! (`EOPNOTSUPP`): the port's GIDs are its netdev's addresses (`ip addr`).

mod abi;
mod methods;
mod verbs;

use std::collections::{HashMap, VecDeque};
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use qhca_uapi::{
    qhca_ib_alloc_ucontext_resp, qhca_ioc_query_device, QHCA_ABI_VERSION, QHCA_ASYNC_CQ_ERR,
    QHCA_ASYNC_DEVICE_FATAL, QHCA_ASYNC_QP_FATAL, QHCA_IB_UVERBS_ABI_VERSION,
};

use crate::error::{Errno, Error, Result};

use abi::*;

/// The driver that a uverbs device must belong to.
const DRIVER: &str = "qhca";

/// The core's `enum ib_event_type` values this backend translates.
const IB_EVENT_CQ_ERR: u32 = 0;
const IB_EVENT_QP_FATAL: u32 = 1;
const IB_EVENT_QP_REQ_ERR: u32 = 2;
const IB_EVENT_QP_ACCESS_ERR: u32 = 3;
const IB_EVENT_DEVICE_FATAL: u32 = 8;
pub(crate) const IB_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
pub(crate) const IB_EVENT_QP_LAST_WQE_REACHED: u32 = 16;

/// How a core event outside `enum qhca_async_event_type` is given: `0x100 +` its type.
pub(crate) const ASYNC_CORE_BASE: u32 = 0x100;

/// The kinds of object whose device numbers map to core handles, and the three whose user
/// handles (what the core's events name) map back to device numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Pd,
    Mr,
    Mw,
    Cq,
    Qp,
    Srq,
    Ah,
    CqEvents,
    QpEvents,
    SrqEvents,
    /// QPN → the core's QP type (not a handle).
    QpType,
    /// lkey → the core handle of the region's PD.
    MrPd,
}

/// Device number (or user handle) → core handle (or device number), per kind.
#[derive(Debug, Default)]
pub(crate) struct Handles(HashMap<(Kind, u64), u32>);

/// What a context opened on a uverbs device holds beyond the command file.
#[derive(Debug)]
pub(crate) struct Uverbs {
    cmd: RawFd,
    /// `/sys/class/infiniband_verbs/uverbsN`: gone once the device is.
    class_dir: PathBuf,
    async_fd: OwnedFd,
    db_mmap_offset: u64,
    inval_mmap_offset: u64,
    handles: Mutex<Handles>,
    /// Events read from the async file before they were asked for ([`Uverbs::peek_events`]).
    pending: Mutex<VecDeque<(u32, u32)>>,
}

/// Reads a sysfs attribute, trimmed.
fn sysfs(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// True if `path` names a uverbs node (`/dev/infiniband/uverbsN`).
pub(crate) fn is_uverbs_path(path: &Path) -> bool {
    path.starts_with("/dev/infiniband")
        && path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("uverbs"))
}

/// The sysfs directory of the uverbs node `path`.
fn class_dir(path: &Path) -> PathBuf {
    let name = path.file_name().unwrap_or_default();
    Path::new(crate::device::SYSFS_UVERBS_DIR).join(name)
}

/// Checks in sysfs that the uverbs node `path` is a qhca device with this provider's ABI.
fn check_device(path: &Path) -> Result<()> {
    let class = class_dir(path);
    let driver = std::fs::read_link(class.join("device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    if driver.as_deref() != Some(DRIVER) {
        return Err(Error::NotFound {
            name: format!("{} (not a qhca device: driver {driver:?})", path.display()),
        });
    }
    let abi = sysfs(&class.join("abi_version")).and_then(|s| s.parse::<u32>().ok());
    if abi != Some(QHCA_IB_UVERBS_ABI_VERSION) {
        return Err(Error::AbiMismatch {
            driver: abi.unwrap_or(0),
            provider: QHCA_IB_UVERBS_ABI_VERSION,
        });
    }
    Ok(())
}

/// A command as `write(2)` takes it: the header, the core's struct, the driver's input.
#[repr(C)]
struct Msg<C, D> {
    hdr: ib_uverbs_cmd_hdr,
    cmd: C,
    drv: D,
}

/// A response: the core's struct, then the driver's (at the offset the kernel writes it).
#[repr(C)]
#[derive(Default)]
struct Resp<R, D> {
    core: R,
    drv: D,
}

/// A core command struct: where its response goes (the `response` field; commands without
/// one have nothing to set).
trait Command {
    fn respond_to(&mut self, addr: u64);
}

macro_rules! command {
    (respond: $($t:ty),*; none: $($n:ty),*) => {
        $(impl Command for $t {
            fn respond_to(&mut self, addr: u64) {
                self.response = addr;
            }
        })*
        $(impl Command for $n {
            fn respond_to(&mut self, _: u64) {}
        })*
    };
}

command!(
    respond: ib_uverbs_get_context, ib_uverbs_alloc_pd, ib_uverbs_reg_mr, ib_uverbs_alloc_mw,
    ib_uverbs_create_comp_channel, ib_uverbs_create_cq, ib_uverbs_resize_cq, ib_uverbs_destroy_cq,
    ib_uverbs_create_qp, ib_uverbs_query_qp, ib_uverbs_destroy_qp, ib_uverbs_create_ah,
    ib_uverbs_create_srq, ib_uverbs_query_srq, ib_uverbs_destroy_srq;
    none: ib_uverbs_dealloc_pd, ib_uverbs_dereg_mr, ib_uverbs_dealloc_mw, ib_uverbs_destroy_ah,
    ib_uverbs_modify_qp, ib_uverbs_modify_srq
);

/// Issues command `command` on `fd` with the core's `cmd` and the driver's `drv`; the kernel
/// writes its answer (the core's, then the driver's) into `resp`.
fn exec<C: Command, D, R>(
    fd: RawFd,
    command: u32,
    cmd: C,
    drv: D,
    resp: &mut R,
) -> Result<(), Errno> {
    let mut msg = Msg {
        hdr: ib_uverbs_cmd_hdr::default(),
        cmd,
        drv,
    };
    let len = size_of::<Msg<C, D>>();
    msg.hdr = ib_uverbs_cmd_hdr {
        command,
        in_words: u16::try_from(len / 4).map_err(|_| Errno::EINVAL)?,
        out_words: u16::try_from(size_of::<R>() / 4).map_err(|_| Errno::EINVAL)?,
    };
    msg.cmd.respond_to(std::ptr::from_mut(resp) as u64);
    // SAFETY: `msg` is `len` initialized bytes (repr(C) structs of integers) that live for the
    // call; the kernel writes at most `size_of::<R>()` bytes (`out_words`) at `resp`, which is
    // exclusively borrowed for the call, and any bytes are a valid `R` (integers only).
    let n = unsafe { libc::write(fd, std::ptr::from_ref(&msg).cast(), len) };
    if n < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

impl Uverbs {
    /// Opens the context on the uverbs node `fd` (`GET_CONTEXT`, which makes the context's async
    /// event file and doorbell page) and returns it with what the device is and which doorbell
    /// page the context owns (GET_CONTEXT's answer).
    pub(crate) fn open(path: &Path, fd: BorrowedFd<'_>) -> Result<(Uverbs, qhca_ioc_query_device)> {
        check_device(path)?;
        let mut resp = Resp::<ib_uverbs_get_context_resp, qhca_ib_alloc_ucontext_resp>::default();
        let cmd = ib_uverbs_get_context::default();
        exec(
            fd.as_raw_fd(),
            IB_USER_VERBS_CMD_GET_CONTEXT,
            cmd,
            (),
            &mut resp,
        )
        .map_err(|source| Error::Ioctl {
            op: "GET_CONTEXT",
            source,
        })?;
        // SAFETY: the kernel made this fd for us alone in the command just answered.
        let async_fd = unsafe { OwnedFd::from_raw_fd(resp.core.async_fd as RawFd) };
        set_nonblocking(&async_fd)?;
        if resp.drv.comp_mask != 0 {
            // A response this provider cannot read.
            return Err(Error::Ioctl {
                op: "GET_CONTEXT",
                source: Errno::EPROTO,
            });
        }
        let attr = qhca_ioc_query_device {
            size: size_of::<qhca_ioc_query_device>() as u32,
            abi_version: QHCA_ABI_VERSION,
            uar_index: resp.drv.uar_index,
            attr: resp.drv.attr,
            ..Default::default()
        };
        let u = Uverbs {
            cmd: fd.as_raw_fd(),
            class_dir: class_dir(path),
            async_fd,
            db_mmap_offset: resp.drv.db_mmap_offset,
            inval_mmap_offset: resp.drv.inval_mmap_offset,
            handles: Mutex::default(),
            pending: Mutex::default(),
        };
        Ok((u, attr))
    }

    /// Where the doorbell page is mapped from on the command file.
    pub(crate) fn db_mmap_offset(&self) -> u64 {
        self.db_mmap_offset
    }

    /// Where the invalidation page of watched regions is mapped from on the command file (0: a
    /// driver without it, which the mapping then fails on).
    pub(crate) fn inval_mmap_offset(&self) -> u64 {
        self.inval_mmap_offset
    }

    /// The async event file: readable while an event is queued, `POLLERR` once the context is
    /// disassociated and its events read.
    pub(crate) fn async_fd(&self) -> RawFd {
        self.async_fd.as_raw_fd()
    }

    fn handles(&self) -> MutexGuard<'_, Handles> {
        self.handles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The core handle of the device's object `num` of `kind`.
    fn handle(&self, kind: Kind, num: u32) -> Result<u32, Errno> {
        self.handles()
            .0
            .get(&(kind, u64::from(num)))
            .copied()
            .ok_or(Errno::EINVAL)
    }

    fn remember(&self, kind: Kind, key: u64, value: u32) {
        self.handles().0.insert((kind, key), value);
    }

    fn forget(&self, kind: Kind, key: u64) -> Option<u32> {
        self.handles().0.remove(&(kind, key))
    }

    /// Issues `command` with the core's `cmd` and the driver's `drv`, the answer into `resp`.
    fn run<C: Command, D, R>(
        &self,
        command: u32,
        cmd: C,
        drv: D,
        resp: &mut R,
    ) -> Result<(), Errno> {
        exec(self.cmd, command, cmd, drv, resp)
    }

    /// A command's errno as the crate reports it: the core answers `EIO` to every command
    /// of a disassociated context, which the rest of the crate knows as `ENODEV` (the device
    /// went away; `EIO` stays a device failure's).
    pub(crate) fn errno_of(&self, e: Errno) -> Errno {
        if e == Errno::EIO && (self.peek_events().unwrap_or(false) || !self.class_dir.exists()) {
            return Errno::ENODEV;
        }
        e
    }

    /// Reads every queued async event into `pending`; returns whether one said the device is
    /// gone.
    pub(crate) fn peek_events(&self) -> Result<bool> {
        let mut fatal = false;
        loop {
            let mut d = ib_uverbs_async_event_desc::default();
            // SAFETY: reads at most one descriptor into `d`; the fd is ours and non-blocking.
            let n = unsafe {
                libc::read(
                    self.async_fd.as_raw_fd(),
                    std::ptr::from_mut(&mut d).cast(),
                    size_of_val(&d),
                )
            };
            if n < 0 {
                return match Errno::last() {
                    Errno::EAGAIN => Ok(fatal),
                    // Disassociated and drained: the core closed the queue.
                    Errno::EIO | Errno::ENODEV => Ok(true),
                    source => Err(Error::Sys {
                        op: "read the async event file",
                        source,
                    }),
                };
            }
            if n as usize != size_of_val(&d) {
                return Ok(fatal);
            }
            let ev = self.translate(&d);
            fatal |= ev.0 == QHCA_ASYNC_DEVICE_FATAL;
            self.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(ev);
        }
    }

    /// The oldest async event as `GET_ASYNC_EVENT` gives it (`EAGAIN`: none).
    pub(crate) fn get_async_event(&self) -> Result<(u32, u32), Errno> {
        self.peek_events()
            .map_err(|e| e.errno().unwrap_or(Errno::EIO))?;
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
            .ok_or(Errno::EAGAIN)
    }

    /// The core's event, in qhca's terms (`enum qhca_async_event_type` and the device number).
    /// The SRQ's limit and a QP's last WQE, which that enum does not have, keep the core's type
    /// (`0x100 +`, as every other event) but name the device's SRQ or QP.
    fn translate(&self, d: &ib_uverbs_async_event_desc) -> (u32, u32) {
        let num = |kind| {
            self.handles()
                .0
                .get(&(kind, d.element))
                .copied()
                .unwrap_or(u32::MAX)
        };
        match d.event_type {
            IB_EVENT_CQ_ERR => (QHCA_ASYNC_CQ_ERR, num(Kind::CqEvents)),
            IB_EVENT_QP_FATAL | IB_EVENT_QP_REQ_ERR | IB_EVENT_QP_ACCESS_ERR => {
                (QHCA_ASYNC_QP_FATAL, num(Kind::QpEvents))
            }
            IB_EVENT_DEVICE_FATAL => (QHCA_ASYNC_DEVICE_FATAL, 0),
            IB_EVENT_SRQ_LIMIT_REACHED => (
                ASYNC_CORE_BASE + IB_EVENT_SRQ_LIMIT_REACHED,
                num(Kind::SrqEvents),
            ),
            IB_EVENT_QP_LAST_WQE_REACHED => (
                ASYNC_CORE_BASE + IB_EVENT_QP_LAST_WQE_REACHED,
                num(Kind::QpEvents),
            ),
            // Outside qhca's types: the core's, offset so that they cannot be taken for one.
            t => (ASYNC_CORE_BASE + t, d.element as u32),
        }
    }

    /// A completion channel for one CQ: the fd the core signals on each completion event of the
    /// armed CQ (non-blocking; readable, one `ib_uverbs_comp_event_desc` per event; `POLLERR`
    /// once the context is disassociated).
    pub(crate) fn create_comp_channel(&self) -> Result<OwnedFd> {
        let mut resp = ib_uverbs_create_comp_channel_resp::default();
        let cmd = ib_uverbs_create_comp_channel::default();
        self.run(IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, cmd, (), &mut resp)
            .map_err(|source| Error::Ioctl {
                op: "CREATE_COMP_CHANNEL",
                source,
            })?;
        // SAFETY: the kernel made this fd for us alone in the command just answered.
        let fd = unsafe { OwnedFd::from_raw_fd(resp.fd as RawFd) };
        set_nonblocking(&fd)?;
        Ok(fd)
    }
}

/// Drains a completion channel: reads every queued event (the channel is non-blocking).
pub(crate) fn drain_comp_channel(fd: BorrowedFd<'_>) {
    let mut d = [ib_uverbs_comp_event_desc::default(); 16];
    loop {
        // SAFETY: reads at most `size_of_val(&d)` bytes into `d`; the fd is non-blocking.
        let n = unsafe { libc::read(fd.as_raw_fd(), d.as_mut_ptr().cast(), size_of_val(&d)) };
        if n < size_of_val(&d) as isize {
            return;
        }
    }
}

fn set_nonblocking(fd: &OwnedFd) -> Result<()> {
    // SAFETY: fcntl on an fd we own, no pointers.
    let r = unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK)
    };
    if r < 0 {
        return Err(Error::Sys {
            op: "fcntl O_NONBLOCK",
            source: Errno::last(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uverbs_nodes_are_told_from_misc_ones() {
        assert!(is_uverbs_path(Path::new("/dev/infiniband/uverbs0")));
        assert!(!is_uverbs_path(Path::new("/dev/qhca0")));
        assert!(!is_uverbs_path(Path::new("/dev/infiniband/rdma_cm")));
    }

    /// The core's events name objects by the user handles the backend gave them (ring
    /// addresses): the SRQ limit and a QP's last WQE come out with the device's numbers.
    #[test]
    fn srq_events_name_the_device_objects() {
        let null = std::fs::File::open("/dev/null").unwrap();
        let u = Uverbs {
            cmd: -1,
            class_dir: PathBuf::new(),
            async_fd: null.into(),
            db_mmap_offset: 0,
            inval_mmap_offset: 0,
            handles: Mutex::default(),
            pending: Mutex::default(),
        };
        u.remember(Kind::SrqEvents, 0x7f00_0000_0000, 0x1401);
        u.remember(Kind::QpEvents, 0x7f00_0001_0000, 0x42);
        let ev = |event_type, element| {
            u.translate(&ib_uverbs_async_event_desc {
                element,
                event_type,
                ..Default::default()
            })
        };
        assert_eq!(
            ev(IB_EVENT_SRQ_LIMIT_REACHED, 0x7f00_0000_0000),
            (0x10f, 0x1401)
        );
        assert_eq!(
            ev(IB_EVENT_QP_LAST_WQE_REACHED, 0x7f00_0001_0000),
            (0x110, 0x42)
        );
        assert_eq!(ev(IB_EVENT_QP_FATAL, 0x7f00_0001_0000), (1, 0x42));
        // An SRQ the backend does not know (destroyed meanwhile).
        assert_eq!(ev(IB_EVENT_SRQ_LIMIT_REACHED, 0x1000), (0x10f, u32::MAX));
    }

    #[test]
    fn commands_have_the_kernels_sizes() {
        // <rdma/ib_user_verbs.h>: the write ABI's fixed sizes.
        assert_eq!(size_of::<ib_uverbs_cmd_hdr>(), 8);
        assert_eq!(size_of::<ib_uverbs_create_cq>(), 32);
        assert_eq!(size_of::<ib_uverbs_resize_cq>(), 16);
        assert_eq!(size_of::<ib_uverbs_resize_cq_resp>(), 8);
        assert_eq!(size_of::<ib_uverbs_create_qp>(), 56);
        assert_eq!(size_of::<ib_uverbs_create_qp_resp>(), 32);
        assert_eq!(size_of::<ib_uverbs_modify_qp>(), 112);
        assert_eq!(size_of::<ib_uverbs_query_qp_resp>(), 128);
        assert_eq!(size_of::<ib_uverbs_reg_mr>(), 40);
        assert_eq!(size_of::<ib_uverbs_create_ah>(), 56);
        assert_eq!(size_of::<ib_uverbs_async_event_desc>(), 16);
        assert_eq!(size_of::<ib_uverbs_create_srq>(), 32);
        assert_eq!(size_of::<ib_uverbs_create_srq_resp>(), 16);
        assert_eq!(size_of::<ib_uverbs_modify_srq>(), 16);
        assert_eq!(size_of::<ib_uverbs_query_srq>(), 16);
        assert_eq!(size_of::<ib_uverbs_query_srq_resp>(), 16);
        assert_eq!(size_of::<ib_uverbs_destroy_srq>(), 16);
        assert_eq!(size_of::<ib_uverbs_destroy_srq_resp>(), 4);
        // CREATE_SRQ's udata: right after the core's struct, both ways.
        type SrqMsg = Msg<ib_uverbs_create_srq, qhca_uapi::qhca_ib_create_srq>;
        type SrqResp = Resp<ib_uverbs_create_srq_resp, qhca_uapi::qhca_ib_create_srq_resp>;
        assert_eq!(core::mem::offset_of!(SrqMsg, drv), 8 + 32);
        assert_eq!(size_of::<SrqMsg>(), 8 + 32 + 24);
        assert_eq!(core::mem::offset_of!(SrqResp, drv), 16);
        assert_eq!(size_of::<SrqResp>(), 16 + 8);
        // RESIZE_CQ's udata: CREATE_CQ's driver input after the core's 16 bytes.
        type ResizeMsg = Msg<ib_uverbs_resize_cq, qhca_uapi::qhca_ib_create_cq>;
        assert_eq!(core::mem::offset_of!(ResizeMsg, drv), 8 + 16);
        assert_eq!(size_of::<ResizeMsg>(), 8 + 16 + 24);
    }
}
