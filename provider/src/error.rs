// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The provider's error type: every variant says what was being done and carries the errno.

use std::path::PathBuf;
use std::time::Duration;

pub use nix::errno::Errno;

/// Everything the provider can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening a device node failed (`ENOENT`, `EACCES`, `ENODEV` when the device is gone,
    /// ...). A device without a free doorbell page fails the first ioctl instead
    /// ([`Error::Ioctl`] with `ENOSPC`).
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
        /// The command, by its name without a prefix (e.g. `REG_MR`, `GET_CONTEXT`).
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

    /// The RDMA core has no qhca device.
    #[error(
        "no qhca devices found (are the qhca and ib_uverbs modules loaded and a qhca PCI device \
         present?)"
    )]
    NoDevices,

    /// A device asked for by name does not exist.
    #[error("device {name} not found")]
    NotFound {
        /// The name asked for (e.g. `qhca1`).
        name: String,
    },

    /// A system call other than a device ioctl failed (mmap of a ring, eventfd, poll, TCP).
    #[error("{op} failed: {source}")]
    Sys {
        /// What was being done (e.g. `mmap CQ ring`, `poll eventfd`).
        op: &'static str,
        /// Why.
        source: Errno,
    },

    /// An argument was refused before anything was asked of the driver (sizes, capabilities).
    #[error("invalid argument: {what}")]
    Invalid {
        /// What was wrong.
        what: String,
    },

    /// A work request could not be posted; see [`PostError`].
    #[error(transparent)]
    Post(#[from] PostError),

    /// The peer of a connection exchange sent something that is not a connection record.
    #[error("connection exchange: {what}")]
    Protocol {
        /// What was wrong.
        what: String,
    },

    /// The context is disassociated from its device: the device was unbound, removed or failed
    /// (the driver queued `QHCA_ASYNC_DEVICE_FATAL`, reports `EPOLLERR` on the file, or an
    /// ioctl failed with `ENODEV` or `EIO`). Nothing on it works any more: clean up and exit,
    /// or open a new context once a device is back.
    #[error("{op}: the device is gone (context disassociated)")]
    Disassociated {
        /// What found out (e.g. `poll CQ`, `post_send`, `MODIFY_QP`).
        op: &'static str,
    },

    /// A wait ended without what was waited for.
    #[error("{what}: timed out after {after:?}")]
    Timeout {
        /// What was waited for (e.g. `receive connection record`, `completion`).
        what: &'static str,
        /// The timeout.
        after: Duration,
    },

    /// The peer of a connection exchange closed the connection.
    #[error("{during}: the peer closed the connection")]
    PeerClosed {
        /// What was being done (e.g. `receive connection record`).
        during: &'static str,
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
            | Error::Discover { source, .. }
            | Error::Sys { source, .. } => Some(*source),
            Error::Invalid { .. } => Some(Errno::EINVAL),
            Error::Disassociated { .. } => Some(Errno::ENODEV),
            Error::Timeout { .. } => Some(Errno::ETIMEDOUT),
            Error::PeerClosed { .. } => Some(Errno::ECONNRESET),
            Error::Post(p) => Some(p.errno()),
            Error::NoDevices
            | Error::NotFound { .. }
            | Error::AbiMismatch { .. }
            | Error::Protocol { .. } => None,
        }
    }
}

/// Why a work request was refused (rdma-core's `bad_wr` plus the reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("work request {index} not posted: {reason}")]
pub struct PostError {
    /// Index in the caller's slice of the first request not posted; the ones before it were
    /// posted (and the doorbell rung for them).
    pub index: usize,
    /// Why it was refused.
    pub reason: PostReason,
}

impl PostError {
    /// `ENOMEM` for a full queue (as rdma-core's providers return), `ENODEV` on a disassociated
    /// context, `EINVAL` otherwise.
    pub fn errno(&self) -> Errno {
        match self.reason {
            PostReason::QueueFull { .. } => Errno::ENOMEM,
            PostReason::Disassociated => Errno::ENODEV,
            _ => Errno::EINVAL,
        }
    }
}

/// The reason part of a [`PostError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostReason {
    /// Every slot of the queue holds an outstanding work request.
    #[error("queue full ({outstanding} outstanding of {depth})")]
    QueueFull {
        /// Work requests posted and not yet completed.
        outstanding: u32,
        /// Slots in the ring.
        depth: u32,
    },
    /// More scatter/gather entries than the QP was created for.
    #[error("{num_sge} SGEs, the QP allows {max_sge}")]
    TooManySge {
        /// Entries in the request.
        num_sge: usize,
        /// The QP's `max_sge`.
        max_sge: u32,
    },
    /// More inline data than the QP was created for.
    #[error("{len} bytes inline, the QP allows {max_inline}")]
    InlineTooLong {
        /// Bytes in the request.
        len: usize,
        /// The QP's `max_inline`.
        max_inline: u32,
    },
    /// Inline data with an operation that has no local data to send (READ, atomics).
    #[error("inline data is only for SEND and RDMA WRITE")]
    InlineNotAllowed,
    /// Inline data and SGEs in the same request.
    #[error("inline data and SGEs are exclusive")]
    InlineAndSge,
    /// An atomic needs exactly one 8-byte, 8-aligned local SGE and an 8-aligned remote address.
    #[error("atomic needs one 8-byte 8-aligned SGE and an 8-aligned remote address")]
    AtomicShape,
    /// SGEs or inline data on BIND_MW or LOCAL_INV, which carry none.
    #[error("a local operation (BIND_MW, LOCAL_INV) carries no data")]
    DataOnLocalOp,
    /// A scatter/gather entry of zero bytes (the ABI's lengths are > 0 and 32 bit).
    #[error("SGE {sge} has length 0")]
    EmptySge {
        /// Which entry.
        sge: usize,
    },
    /// The context is disassociated from its device (see [`Error::Disassociated`]): nothing
    /// was written to the queue.
    #[error("the device is gone (context disassociated)")]
    Disassociated,
    /// The message is longer than 2^31 bytes (the CQE's byte_len).
    #[error("message of {len} bytes is too long")]
    MessageTooLong {
        /// Total bytes.
        len: u64,
    },
    /// A UD destination ([`crate::SendWr::to_ud`]) on a request for an RC QP, whose peer is
    /// fixed at connection time.
    #[error("a UD destination on a send of an RC QP")]
    UdDestOnRc,
    /// A send on a UD QP without a destination ([`crate::SendWr::to_ud`]).
    #[error("a send on a UD QP needs a destination (SendWr::to_ud)")]
    NoUdDest,
    /// An operation other than SEND and SEND_WITH_IMM on a UD QP.
    #[error("a UD QP sends only SEND and SEND_WITH_IMM")]
    UdOpcode,
    /// A receive request on a QP that receives from a shared receive queue
    /// ([`crate::Qp::with_srq`]): it has no receive queue of its own; receives go to the SRQ
    /// ([`crate::Srq::post_recv`]).
    #[error("the QP receives from an SRQ: post receives to the SRQ")]
    QpOnSrq,
    /// A datagram longer than [`crate::UD_MAX_MSG`] bytes (the port's MTU).
    #[error("datagram of {len} bytes: at most {} (the MTU)", crate::UD_MAX_MSG)]
    DatagramTooLong {
        /// Total bytes.
        len: u64,
    },
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

    #[test]
    fn post_errors_name_the_request_and_the_reason() {
        let e = PostError {
            index: 3,
            reason: PostReason::QueueFull {
                outstanding: 8,
                depth: 8,
            },
        };
        assert_eq!(
            e.to_string(),
            "work request 3 not posted: queue full (8 outstanding of 8)"
        );
        assert_eq!(Error::from(e).errno(), Some(Errno::ENOMEM));
        let e = PostError {
            index: 0,
            reason: PostReason::TooManySge {
                num_sge: 5,
                max_sge: 4,
            },
        };
        assert!(Error::from(e)
            .to_string()
            .contains("5 SGEs, the QP allows 4"));
        assert_eq!(e.errno(), Errno::EINVAL);
        let e = Error::Invalid { what: "x".into() };
        assert_eq!(e.errno(), Some(Errno::EINVAL));
    }
}
