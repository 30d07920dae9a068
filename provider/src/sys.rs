// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The raw ioctls, declared once from the header's numbers. Only [`crate::context`] calls them.

use qhca_uapi::{qhca_ioc_query_device, QHCA_IOCTL_QUERY_DEVICE};

// `QHCA_IOCTL_QUERY_DEVICE`: qhca_uapi checks at compile time that the header's literal is
// `_IOWR(QHCA_IOC_MAGIC, QHCA_IOC_NR_QUERY_DEVICE, struct qhca_ioc_query_device)`.
nix::ioctl_readwrite_bad!(
    /// `ioctl(fd, QHCA_IOCTL_QUERY_DEVICE, data)`.
    ///
    /// # Safety
    ///
    /// `data` must be valid for reads and writes of one `qhca_ioc_query_device` for the duration
    /// of the call.
    query_device,
    QHCA_IOCTL_QUERY_DEVICE,
    qhca_ioc_query_device
);
