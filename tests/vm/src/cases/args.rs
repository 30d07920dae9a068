// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! What the driver refuses at its file: bad mmap arguments, unknown ioctls, bad arguments and
//! pointers.

use super::*;

/// Case 5c: mmap accepts only offsets 0 (the doorbell page) and 4096 (the invalidation page,
/// read-only), one page, shared, not executable.
pub(super) fn mmap_bad_args(t: &mut T, cfg: &Config) -> CaseResult {
    use libc::{MAP_PRIVATE, MAP_SHARED, PROT_EXEC, PROT_READ, PROT_WRITE};
    let (ctx, _) = open_query(&cfg.dev)?;
    let fd = ctx.as_raw_fd();
    let page = UAR_PAGE_SIZE;
    let rw = PROT_READ | PROT_WRITE;

    check_errno!(
        t,
        RawMap::new(fd, page, rw, MAP_SHARED, 2 * page as i64),
        Errno::EINVAL,
        "offset 8192"
    );
    check_errno!(
        t,
        RawMap::new(fd, page, rw, MAP_SHARED, page as i64),
        Errno::EACCES,
        "the invalidation page, writable"
    );
    check_errno!(
        t,
        RawMap::new(fd, page, PROT_READ, MAP_PRIVATE, page as i64),
        Errno::EINVAL,
        "the invalidation page, private"
    );
    check_errno!(
        t,
        RawMap::new(fd, page, PROT_READ | PROT_EXEC, MAP_SHARED, page as i64),
        Errno::EINVAL,
        "the invalidation page, executable"
    );
    check_errno!(
        t,
        RawMap::new(fd, page, rw, MAP_SHARED, 1 << 40),
        Errno::EINVAL,
        "offset 1 TiB"
    );
    check_errno!(
        t,
        RawMap::new(fd, 2 * page, rw, MAP_SHARED, 0),
        Errno::EINVAL,
        "length 8192"
    );
    check_errno!(
        t,
        RawMap::new(fd, page, rw, MAP_PRIVATE, 0),
        Errno::EINVAL,
        "MAP_PRIVATE"
    );
    // On a noexec mount the VFS refuses PROT_EXEC (EPERM) before the driver is asked.
    let noexec = nix::sys::statvfs::statvfs(&cfg.dev)?
        .flags()
        .contains(nix::sys::statvfs::FsFlags::ST_NOEXEC);
    let exec_errno = if noexec { Errno::EPERM } else { Errno::EINVAL };
    check_errno!(
        t,
        RawMap::new(fd, page, rw | PROT_EXEC, MAP_SHARED, 0),
        exec_errno,
        "PROT_EXEC (noexec mount: {noexec})"
    );
    check_errno!(
        t,
        RawMap::new(fd, page, PROT_READ | PROT_EXEC, MAP_SHARED, 0),
        exec_errno,
        "PROT_READ|PROT_EXEC"
    );

    // What is allowed still works after all that.
    let good = RawMap::new(fd, page, rw, MAP_SHARED, 0);
    check!(
        t,
        good.is_ok(),
        "offset 0, one page, shared, read-write: {:?}",
        good.as_ref().err()
    );
    let good = RawMap::new(fd, page, PROT_WRITE, MAP_SHARED, 0);
    check!(t, good.is_ok(), "write-only: {:?}", good.as_ref().err());
    Ok(())
}

/// Case 6: Unknown ioctls are ENOTTY; bad QUERY_DEVICE arguments are EINVAL; bad pointers EFAULT;
/// none of it breaks the context.
pub(super) fn ioctl_bad_args(t: &mut T, cfg: &Config) -> CaseResult {
    let (ctx, before) = open_query(&cfg.dev)?;
    let fd = ctx.as_raw_fd();
    let size = std::mem::size_of::<qhca_ioc_query_device>();
    let mut buf = IoctlBuf::new();

    for nr in [0x7f, 0xff] {
        check_errno!(
            t,
            sys::ioctl_buf(fd, iowr(QHCA_IOC_MAGIC, nr, size), &mut buf),
            Errno::ENOTTY,
            "nr {nr:#x}"
        );
    }
    let other_magic = QHCA_IOC_MAGIC ^ 1;
    check_errno!(
        t,
        sys::ioctl_buf(
            fd,
            iowr(other_magic, QHCA_IOC_NR_QUERY_DEVICE, size),
            &mut buf
        ),
        Errno::ENOTTY,
        "magic {other_magic:#x}"
    );
    // QUERY_DEVICE's nr with another direction or size is another number, so unknown too.
    check_errno!(
        t,
        sys::ioctl_buf(
            fd,
            ioc(IOC_NONE, QHCA_IOC_MAGIC, QHCA_IOC_NR_QUERY_DEVICE, 0),
            &mut buf
        ),
        Errno::ENOTTY,
        "_IO(magic, 0)"
    );
    check_errno!(
        t,
        sys::ioctl_buf(
            fd,
            iowr(QHCA_IOC_MAGIC, QHCA_IOC_NR_QUERY_DEVICE, 128),
            &mut buf
        ),
        Errno::ENOTTY,
        "_IOWR size 128"
    );

    for bad_size in [0, 159, 161, u32::MAX] {
        let mut q = query_request();
        q.size = bad_size;
        check_errno!(
            t,
            sys::query_raw(fd, &mut q),
            Errno::EINVAL,
            "size field {bad_size}"
        );
    }
    for mask in [1, 1 << 31] {
        let mut q = query_request();
        q.comp_mask = mask;
        check_errno!(
            t,
            sys::query_raw(fd, &mut q),
            Errno::EINVAL,
            "comp_mask {mask:#x}"
        );
    }
    for (i, v) in [(0, 1), (1, 1u64 << 63)] {
        let mut q = query_request();
        q.rsvd_in[i] = v;
        check_errno!(
            t,
            sys::query_raw(fd, &mut q),
            Errno::EINVAL,
            "rsvd_in[{i}] = {v:#x}"
        );
    }

    // SAFETY: NULL: nothing can be written through it.
    check_errno!(
        t,
        unsafe { sys::ioctl_addr(fd, QHCA_IOCTL_QUERY_DEVICE, 0) },
        Errno::EFAULT,
        "NULL"
    );
    // SAFETY: the top page of the address space is never user memory on a 64-bit kernel.
    check_errno!(
        t,
        unsafe { sys::ioctl_addr(fd, QHCA_IOCTL_QUERY_DEVICE, usize::MAX & !0xfff) },
        Errno::EFAULT,
        "kernel address"
    );
    // A valid request in a read-only page: read fine, answer cannot be written back.
    let ro = RawMap::anonymous(UAR_PAGE_SIZE)?;
    // SAFETY: a fresh anonymous read-write mapping.
    unsafe { ro.fill(&sys::query_bytes(&query_request())) };
    ro.protect(libc::PROT_READ)?;
    // SAFETY: the mapping is read-only now, so the kernel cannot write through its address.
    check_errno!(
        t,
        unsafe { sys::ioctl_addr(fd, QHCA_IOCTL_QUERY_DEVICE, ro.addr()) },
        Errno::EFAULT,
        "read-only buffer"
    );

    let after = ctx.query();
    check!(
        t,
        after.as_ref().is_ok_and(|a| *a == before),
        "query after the bad calls: {after:?}"
    );
    Ok(())
}
