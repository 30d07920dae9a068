// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The provider's error type: every variant says what was being done and carries the errno.

use std::path::PathBuf;

pub use nix::errno::Errno;

/// Everything the provider can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening a device node failed (`ENOENT`, `EACCES`, `ENOSPC` when the device has no free
    /// doorbell page, `ENODEV` when the device is gone, ...).
    #[error("cannot open {}: {source}", path.display())]
    Open {
        /// The node that was opened.
        path: PathBuf,
        /// Why.
        source: Errno,
    },

    /// An ioctl on an open context failed.
    #[error("ioctl {op} failed: {source}")]
    Ioctl {
        /// The ioctl, by its header name without `QHCA_IOCTL_` (e.g. `QUERY_DEVICE`).
        op: &'static str,
        /// Why.
        source: Errno,
    },

    /// Mapping part of the device into this process failed.
    #[error("cannot mmap {what}: {source}")]
    Mmap {
        /// What was mapped (e.g. `doorbell page`).
        what: &'static str,
        /// Why.
        source: Errno,
    },

    /// Listing devices failed (reading `/dev`).
    #[error("cannot list devices in {}: {source}", path.display())]
    Discover {
        /// The directory that was read.
        path: PathBuf,
        /// Why.
        source: Errno,
    },

    /// No `/dev/qhcaN` node exists.
    #[error("no qhca devices found (is the qhca module loaded and a qhca PCI device present?)")]
    NoDevices,

    /// A device asked for by name does not exist.
    #[error("device {name} not found")]
    NotFound {
        /// The name asked for (e.g. `qhca1`).
        name: String,
    },

    /// The driver speaks a different ABI version than this provider was built for.
    #[error("ABI mismatch: driver has ABI version {driver}, provider was built for {provider}")]
    AbiMismatch {
        /// The version the driver reported.
        driver: u32,
        /// [`qhca_uapi::QHCA_ABI_VERSION`].
        provider: u32,
    },
}

impl Error {
    /// The errno behind the error, for the variants that have one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Open { source, .. }
            | Error::Ioctl { source, .. }
            | Error::Mmap { source, .. }
            | Error::Discover { source, .. } => Some(*source),
            Error::NoDevices | Error::NotFound { .. } | Error::AbiMismatch { .. } => None,
        }
    }
}

/// `Result` with the provider's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The errno of an `io::Error` from std or memmap2; `EIO` if it carries none (such errors are
/// argument checks done before any system call, which never happen with our fixed arguments).
pub(crate) fn errno_of(e: &std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_context_and_errno_text() {
        let e = Error::Open {
            path: "/dev/qhca0".into(),
            source: Errno::ENOSPC,
        };
        let s = e.to_string();
        assert!(s.contains("/dev/qhca0"), "{s}");
        assert!(s.contains("ENOSPC"), "{s}");
        assert!(s.contains("No space left on device"), "{s}");
        assert_eq!(e.errno(), Some(Errno::ENOSPC));

        let e = Error::Ioctl {
            op: "QUERY_DEVICE",
            source: Errno::EINVAL,
        };
        assert!(e.to_string().contains("QUERY_DEVICE"));
        assert_eq!(e.errno(), Some(Errno::EINVAL));

        let e = Error::AbiMismatch {
            driver: 2,
            provider: 1,
        };
        assert!(e.to_string().contains("ABI version 2"));
        assert_eq!(e.errno(), None);
        assert_eq!(Error::NoDevices.errno(), None);
    }

    #[test]
    fn errno_of_io_error() {
        let e = std::io::Error::from_raw_os_error(libc::ENODEV);
        assert_eq!(errno_of(&e), Errno::ENODEV);
        let e = std::io::Error::other("no errno");
        assert_eq!(errno_of(&e), Errno::EIO);
    }

    #[test]
    fn source_is_the_errno() {
        use std::error::Error as _;
        let e = Error::Mmap {
            what: "doorbell page",
            source: Errno::EINVAL,
        };
        let src = e.source().expect("has a source");
        assert_eq!(src.to_string(), Errno::EINVAL.to_string());
    }
}
