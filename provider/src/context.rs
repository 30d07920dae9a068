// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A context: one open `/dev/qhcaN`, which owns one doorbell page of the device.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use qhca_uapi::{qhca_ioc_handle, qhca_ioc_query_ctx, qhca_ioc_query_device};

use crate::attr::DeviceAttr;
use crate::doorbell::Doorbell;
use crate::error::{errno_of, Error, Result};
use crate::sys::{self, Request};

/// A raw verbs ioctl as nix declares it.
pub(crate) type RawIoctl<T> = unsafe fn(libc::c_int, *mut T) -> nix::Result<libc::c_int>;

/// What the device counted for one context (`QHCA_IOCTL_QUERY_CTX`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CtxStats {
    /// Doorbells rung on this context's page that named one of its queues.
    pub db_accepted: u64,
    /// Doorbells rung on this context's page that named another context's queue (dropped).
    pub db_violations: u64,
}

/// The kinds of object [`Context::destroy_raw`] can name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjKind {
    /// A protection domain (`DEALLOC_PD`).
    Pd,
    /// A memory region, named by its key (`DEREG_MR`).
    Mr,
    /// A completion queue (`DESTROY_CQ`).
    Cq,
    /// A queue pair (`DESTROY_QP`).
    Qp,
}

/// An open device. The driver allocates the context's doorbell page when the file is opened and
/// frees it when the last reference to the file goes away (this fd and any [`Doorbell`]
/// mapping, which keeps the file open on its own).
#[derive(Debug)]
pub struct Context {
    // Dropped first: the mapping holds its own reference to the file anyway.
    db: OnceLock<Arc<Doorbell>>,
    fd: OwnedFd,
    path: PathBuf,
}

impl Context {
    /// Opens `path` (`/dev/qhcaN`) read-write, close-on-exec.
    ///
    /// Fails with [`Error::Open`]: `ENOENT` (no such node), `EACCES`, `ENOSPC` (every doorbell
    /// page of the device is taken), `ENODEV` (the device is going away).
    pub fn open(path: impl AsRef<Path>) -> Result<Context> {
        let path = path.as_ref();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::Open {
                path: path.to_owned(),
                source: errno_of(&e),
            })?;
        Ok(Context {
            db: OnceLock::new(),
            fd: file.into(),
            path: path.to_owned(),
        })
    }

    /// The node this context was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file descriptor, for tests that issue raw system calls on it.
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// `QHCA_IOCTL_QUERY_DEVICE`: what the device is and which doorbell page this context owns.
    ///
    /// Fails with [`Error::Ioctl`] (`ENODEV` once the device is unbound, `EINVAL`/`ENOTTY` from
    /// a driver that does not know this request) or [`Error::AbiMismatch`].
    pub fn query(&self) -> Result<DeviceAttr> {
        let mut req = query_device_request();
        // SAFETY:
        // - `req` is a live, exclusively borrowed `qhca_ioc_query_device` on our stack, so the
        //   pointer is valid for reads and writes of the whole struct for the duration of the
        //   call (the size field tells the driver exactly that size);
        // - the fd is open: `self.fd` is an `OwnedFd` that outlives the call.
        unsafe { sys::query_device(self.fd.as_raw_fd(), &mut req) }.map_err(|source| {
            Error::Ioctl {
                op: "QUERY_DEVICE",
                source,
            }
        })?;
        DeviceAttr::from_ioctl(&req)
    }

    /// Maps this context's doorbell page (`QHCA_MMAP_UAR`, one `QHCA_UAR_PAGE_SIZE` page, shared,
    /// read-write).
    ///
    /// Fails with [`Error::Mmap`] (`ENODEV` once the device is unbound).
    pub fn map_doorbell(&self) -> Result<Doorbell> {
        Doorbell::map(self.fd.as_fd())
    }
}

impl Context {
    /// The doorbell page shared by every queue of this context, mapped on first use.
    ///
    /// Fails with [`Error::Mmap`].
    pub fn doorbell(&self) -> Result<Arc<Doorbell>> {
        if let Some(db) = self.db.get() {
            return Ok(db.clone());
        }
        let db = Arc::new(self.map_doorbell()?);
        // Two threads racing here map twice; the loser's mapping is dropped.
        Ok(self.db.get_or_init(|| db).clone())
    }

    /// Issues one verbs ioctl on `req`.
    pub(crate) fn ioctl<T>(&self, op: &'static str, f: RawIoctl<T>, req: &mut T) -> Result<()> {
        // SAFETY:
        // - `req` is a live, exclusively borrowed `T` for the whole call, and every `f` passed
        //   here is the nix wrapper of the ioctl whose number announces exactly `size_of::<T>()`
        //   (checked at compile time in `sys`), so the driver reads and writes only `*req`;
        // - the fd is open: `self.fd` outlives the call.
        unsafe { f(self.fd.as_raw_fd(), req) }
            .map(drop)
            .map_err(|source| Error::Ioctl { op, source })
    }

    /// `QHCA_IOCTL_QUERY_CTX`: the device's doorbell counters for this context.
    pub fn query_ctx(&self) -> Result<CtxStats> {
        let mut req = qhca_ioc_query_ctx::request();
        self.ioctl("QUERY_CTX", sys::query_ctx, &mut req)?;
        Ok(CtxStats {
            db_accepted: req.stats.db_accepted,
            db_violations: req.stats.db_violations,
        })
    }

    /// Destroys an object by its handle, bypassing the typed wrappers: for tests of the
    /// driver's own checks (`EBUSY` for a PD or CQ in use, `ENOENT` for an unknown handle).
    ///
    /// This is safe for memory: a destroyed object's rings and regions are no longer reached by
    /// the device, and the wrapper that still owns them frees them only after its own destroy
    /// call (which then fails with `ENOENT` and is ignored).
    pub fn destroy_raw(&self, kind: ObjKind, handle: u32) -> Result<()> {
        let mut req = qhca_ioc_handle::request();
        req.handle = handle;
        let (op, f): (&'static str, RawIoctl<qhca_ioc_handle>) = match kind {
            ObjKind::Pd => ("DEALLOC_PD", sys::dealloc_pd),
            ObjKind::Mr => ("DEREG_MR", sys::dereg_mr),
            ObjKind::Cq => ("DESTROY_CQ", sys::destroy_cq),
            ObjKind::Qp => ("DESTROY_QP", sys::destroy_qp),
        };
        self.ioctl(op, f, &mut req)
    }
}

impl AsFd for Context {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Gives up the context as its file descriptor (closing that fd is then the caller's business,
/// e.g. to see what `close` returns).
impl From<Context> for OwnedFd {
    fn from(ctx: Context) -> OwnedFd {
        ctx.fd
    }
}

impl AsRawFd for Context {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The request as this ABI version sends it: `size` set, everything else zero.
pub(crate) fn query_device_request() -> qhca_ioc_query_device {
    qhca_ioc_query_device {
        size: core::mem::size_of::<qhca_ioc_query_device>() as u32,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Errno;

    #[test]
    fn request_has_size_and_zero_everything_else() {
        let r = query_device_request();
        assert_eq!(r.size, 160);
        assert_eq!(r.comp_mask, 0);
        assert_eq!(r.rsvd_in, [0, 0]);
        assert_eq!(r.abi_version, 0);
        assert_eq!(r.uar_index, 0);
    }

    #[test]
    fn open_missing_node_reports_path_and_enoent() {
        match Context::open("/dev/qhca-does-not-exist") {
            Err(Error::Open { path, source }) => {
                assert_eq!(path, Path::new("/dev/qhca-does-not-exist"));
                assert_eq!(source, Errno::ENOENT);
            }
            other => panic!("expected Open error, got {other:?}"),
        }
    }

    #[test]
    fn query_on_a_non_qhca_file_is_an_ioctl_error() {
        // /dev/null knows no ioctls: ENOTTY, reported as a typed error.
        let ctx = Context::open("/dev/null").unwrap();
        assert_eq!(ctx.path(), Path::new("/dev/null"));
        assert!(ctx.raw_fd() >= 0);
        match ctx.query() {
            Err(Error::Ioctl {
                op: "QUERY_DEVICE",
                source,
            }) => assert_eq!(source, Errno::ENOTTY),
            other => panic!("expected ENOTTY, got {other:?}"),
        }
    }

    #[test]
    fn verbs_ioctls_on_a_non_qhca_file_are_typed_errors() {
        let ctx = Context::open("/dev/null").unwrap();
        match ctx.query_ctx() {
            Err(Error::Ioctl {
                op: "QUERY_CTX",
                source,
            }) => assert_eq!(source, Errno::ENOTTY),
            other => panic!("expected ENOTTY, got {other:?}"),
        }
        match ctx.destroy_raw(ObjKind::Cq, 1) {
            Err(Error::Ioctl {
                op: "DESTROY_CQ",
                source,
            }) => assert_eq!(source, Errno::ENOTTY),
            other => panic!("expected ENOTTY, got {other:?}"),
        }
        assert!(ctx.doorbell().is_err());
    }

    #[test]
    fn map_doorbell_on_a_non_qhca_file_is_an_mmap_error() {
        // /dev/null cannot be mapped shared: ENODEV.
        let ctx = Context::open("/dev/null").unwrap();
        match ctx.map_doorbell() {
            Err(Error::Mmap {
                what: "doorbell page",
                source,
            }) => assert_eq!(source, Errno::ENODEV),
            other => panic!("expected an Mmap error, got {other:?}"),
        }
    }
}
