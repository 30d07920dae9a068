// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A context: one open `/dev/qhcaN`, which owns one doorbell page of the device.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use qhca_uapi::qhca_ioc_query_device;

use crate::attr::DeviceAttr;
use crate::doorbell::Doorbell;
use crate::error::{errno_of, Error, Result};
use crate::sys;

/// An open device. The driver allocates the context's doorbell page when the file is opened and
/// frees it when the last reference to the file goes away (this fd and any [`Doorbell`]
/// mapping, which keeps the file open on its own).
#[derive(Debug)]
pub struct Context {
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
