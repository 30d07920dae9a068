// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Watched regions and the invalidation page at the driver's ABI (`QHCA_ACCESS_WATCHED`,
//! `QHCA_MMAP_INVAL`), with raw ioctls and mappings: what the registration cache builds on.

use super::*;
use qhca_uapi::{
    qhca_inval_page, qhca_ioc_reg_mr, QHCA_ACCESS_LOCAL_WRITE, QHCA_ACCESS_ON_DEMAND,
    QHCA_ACCESS_WATCHED, QHCA_INVAL_RING_ENTRIES, QHCA_IOCTL_REG_MR, QHCA_MMAP_INVAL,
};
use std::os::fd::AsRawFd;

const PAGE: usize = 4096;
pub(super) const WATCHED: &str = "/sys/kernel/debug/qhca/watched_regions";
pub(super) const REVOCATIONS: &str = "/sys/kernel/debug/qhca/watch_revocations";
pub(super) const PINNED: &str = "/sys/kernel/debug/qhca/pinned_pages";

pub(super) fn knob(path: &str) -> Result<i64, Fail> {
    let s = std::fs::read_to_string(path)?;
    s.trim()
        .parse()
        .map_err(|e| fail_msg(format!("{path}: {s:?}: {e}")))
}

/// Polls `path` until it reads `want` (the driver unpins revoked regions from its worker).
pub(super) fn await_knob(path: &str, want: i64) -> Result<i64, Fail> {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let v = knob(path)?;
        if v == want || Instant::now() > end {
            return Ok(v);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Raw `QHCA_IOCTL_REG_MR`; the keys.
fn reg_raw(ctx: &Context, pdn: u32, addr: u64, len: u64, access: u32) -> Result<u32, Errno> {
    let mut buf = crate::sys::IoctlBuf::new();
    let a = qhca_ioc_reg_mr {
        size: std::mem::size_of::<qhca_ioc_reg_mr>() as u32,
        pdn,
        access,
        addr,
        length: len,
        ..Default::default()
    };
    // SAFETY: `qhca_ioc_reg_mr` is plain integers, no padding (uapi's layout tests); its
    // bytes are copied into the buffer, which is larger.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&a as *const qhca_ioc_reg_mr).cast::<u8>(),
            std::mem::size_of::<qhca_ioc_reg_mr>(),
        )
    };
    buf.0[..bytes.len()].copy_from_slice(bytes);
    crate::sys::ioctl_buf(ctx.as_raw_fd(), QHCA_IOCTL_REG_MR, &mut buf)?;
    let at = std::mem::offset_of!(qhca_ioc_reg_mr, lkey);
    Ok(u32::from_ne_bytes(buf.0[at..at + 4].try_into().unwrap()))
}

/// The context's invalidation page, mapped read-only.
struct InvalMap(crate::sys::RawMap);

impl InvalMap {
    fn new(ctx: &Context) -> nix::Result<InvalMap> {
        crate::sys::RawMap::new(
            ctx.as_raw_fd(),
            PAGE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            QHCA_MMAP_INVAL as i64,
        )
        .map(InvalMap)
    }

    fn page(&self) -> qhca_inval_page {
        // SAFETY: a readable mapping of one page, the size of `qhca_inval_page` (plain
        // integers); a volatile copy, as the driver writes it concurrently.
        unsafe { std::ptr::read_volatile(self.0.addr() as *const qhca_inval_page) }
    }
}

/// One watched region over part of an anonymous mapping, revoked by `munmap`: the published
/// entry, the counters, the pages unpinned, the key dead in the device, and DEREG_MR after.
pub(super) fn verbs_watch_revokes_on_munmap(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let inval = InvalMap::new(&p.ctx)?;
    let first = inval.page();
    check_eq!(t, first.ring_entries, QHCA_INVAL_RING_ENTRIES);
    check_eq!(t, first.generation, 0);
    // Read-only for good, one page only.
    check_errno!(
        t,
        crate::sys::RawMap::new(
            p.ctx.as_raw_fd(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            QHCA_MMAP_INVAL as i64,
        ),
        Errno::EACCES
    );
    check_errno!(
        t,
        crate::sys::RawMap::new(
            p.ctx.as_raw_fd(),
            2 * PAGE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            QHCA_MMAP_INVAL as i64,
        ),
        Errno::EINVAL
    );
    check_errno!(
        t,
        inval.0.protect(libc::PROT_READ | libc::PROT_WRITE),
        Errno::EACCES
    );

    let m = Map::new(3 * PAGE)?;
    let (addr, len) = (m.addr() + 100, 2 * PAGE as u64);
    let pdn = p.pd.pdn();
    check_errno!(
        t,
        reg_raw(
            &p.ctx,
            pdn,
            addr,
            len,
            QHCA_ACCESS_ON_DEMAND | QHCA_ACCESS_WATCHED
        ),
        Errno::EINVAL
    );
    let mut dst =
        p.pd.reg_mr_buf(256, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let (watched0, revoked0, pinned0) = (knob(WATCHED)?, knob(REVOCATIONS)?, knob(PINNED)?);
    let key = reg_raw(
        &p.ctx,
        pdn,
        addr,
        len,
        QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_WATCHED,
    )?;
    check_eq!(t, knob(WATCHED)?, watched0 + 1);
    check_eq!(
        t,
        knob(PINNED)?,
        pinned0 + 3,
        "3 pages under {addr:#x}+{len:#x}"
    );

    // The region works while its mapping is there.
    let data = pattern(0x3c, 256);
    m.write(100, &data);
    let w = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    let sge = Sge {
        addr,
        length: 256,
        lkey: key,
    };
    p.a.post_send(&[SendWr::new(1, w, &[sge])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_wc(t, &wc, 1, WcStatus::Success, WcOpcode::RdmaWrite, "write");
    check_eq!(t, dst.to_vec(0, 256), data);

    drop(m); // munmap: the region is revoked before it returns
    let page = inval.page();
    check_eq!(t, page.generation, 1);
    check_eq!(t, page.flush_generation, 0);
    let e = page.ring[0];
    check_eq!(t, (e.seq, e.key, e.start, e.length), (1, key, addr, len));
    check_eq!(t, knob(REVOCATIONS)?, revoked0 + 1);
    check_eq!(
        t,
        await_knob(PINNED, pinned0)?,
        pinned0,
        "unpinned after revocation"
    );

    // The key is dead in the device: the same request fails, nothing is read.
    dst.fill(0, 256, 0);
    p.a.post_send(&[SendWr::new(2, w, &[sge])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_wc(
        t,
        &wc,
        2,
        WcStatus::LocProtErr,
        WcOpcode::RdmaWrite,
        "write after munmap",
    );
    check_eq!(t, dst.to_vec(0, 256), vec![0u8; 256]);

    // The handle stays until DEREG_MR, which succeeds.
    check_eq!(t, knob(WATCHED)?, watched0 + 1);
    destroy_raw(&p.ctx, ObjKind::Mr, key)?;
    check_eq!(t, knob(WATCHED)?, watched0);
    check_errno!(t, destroy_raw(&p.ctx, ObjKind::Mr, key), Errno::ENOENT);
    Ok(())
}

/// A watched region over two buffers, one of them unmapped: only its pages are revoked (and
/// unpinned at once); the same key keeps serving the other (so requests in flight on it
/// complete), and the key is published once.
pub(super) fn verbs_watch_revokes_only_the_pages_that_went(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let inval = InvalMap::new(&p.ctx)?;
    let mut dst =
        p.pd.reg_mr_buf(PAGE, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let (pinned0, rev0) = (knob(PINNED)?, knob(REVOCATIONS)?);
    let both = Map::new(4 * PAGE)?;
    both.write(0, &pattern(0x4b, 4 * PAGE));
    let (a, b) = (both.addr(), both.addr() + 2 * PAGE as u64);
    let key = reg_raw(&p.ctx, p.pd.pdn(), a, 4 * PAGE as u64, QHCA_ACCESS_WATCHED)?;
    check_eq!(t, knob(PINNED)?, pinned0 + 4);
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    let mut send = |p: &mut Pair, addr: u64, id: u64| -> Result<(WcStatus, Vec<u8>), Fail> {
        dst.fill(0, 128, 0);
        let sge = Sge {
            addr,
            length: 128,
            lkey: key,
        };
        p.a.post_send(&[SendWr::new(id, op, &[sge])])?;
        Ok((wait_wc(&mut p.cq_a)?.status, dst.to_vec(0, 128)))
    };
    let want_b = both.read(2 * PAGE, 128);

    // SAFETY: the first half of our own mapping; nothing refers into it.
    check_eq!(t, unsafe { libc::munmap(both.ptr.cast(), 2 * PAGE) }, 0);
    let g = inval.page();
    check_eq!(t, (g.generation, g.ring[0].key), (1, key), "published");
    check_eq!(t, knob(REVOCATIONS)?, rev0 + 1);
    check_eq!(
        t,
        send(&mut p, b, 1)?,
        (WcStatus::Success, want_b.clone()),
        "the other buffer"
    );
    let (st, got) = send(&mut p, a + 64, 2)?;
    check_eq!(t, st, WcStatus::LocAccessErr, "the unmapped buffer");
    check_eq!(t, got, vec![0u8; 128]);
    check_eq!(
        t,
        knob(PINNED)?,
        pinned0 + 2,
        "the unmapped buffer's pages unpinned"
    );

    // The other half goes too: published already, so nothing new on the page.
    // SAFETY: the second half of our own mapping; nothing refers into it.
    check_eq!(
        t,
        unsafe { libc::munmap(b as *mut libc::c_void, 2 * PAGE) },
        0
    );
    std::mem::forget(both); // unmapped by hand
    check_eq!(t, inval.page().generation, 1);
    check_eq!(t, knob(PINNED)?, pinned0, "all unpinned");
    destroy_raw(&p.ctx, ObjKind::Mr, key)?;
    check_eq!(t, knob(PINNED)?, pinned0);
    Ok(())
}
