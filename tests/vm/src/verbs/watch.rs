// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Watched regions and the invalidation page (`Pd::reg_watched_mr`, `Context::map_inval_page`),
//! what the registration cache builds on, against the driver's counters: what a revocation
//! publishes, unpins and leaves of the key.

use super::*;
use qhca::{InvalPoll, Revocation};

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

/// Checks that `inval` has published exactly one revocation since it was mapped: region `key`,
/// `start..start + length`.
fn check_published_once(t: &mut T, inval: &qhca::InvalPage, key: u32, start: u64, length: u64) {
    let revoked = Revocation { key, start, length };
    check_eq!(
        t,
        inval.poll(0),
        InvalPoll::Revoked {
            regions: vec![revoked],
            upto: 1
        },
        "published"
    );
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

/// One watched region over part of an anonymous mapping, revoked by `munmap`: the revocation
/// published on the invalidation page, the counters, the pages unpinned, the key dead in the
/// device, and the deregistration after.
pub(super) fn verbs_watch_revokes_on_munmap(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let inval = p.ctx.map_inval_page()?;
    check_eq!(
        t,
        inval.generation(),
        0,
        "a new context's invalidation page"
    );
    check_eq!(t, inval.poll(0), InvalPoll::Nothing);

    let m = Map::new(3 * PAGE)?;
    let (addr, len) = (m.addr() + 100, 2 * PAGE);
    let mut dst =
        p.pd.reg_mr_buf(256, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let (watched0, revoked0, pinned0) = (knob(WATCHED)?, knob(REVOCATIONS)?, knob(PINNED)?);
    // SAFETY: the device writes the range only where this process's own requests direct it
    // (LOCAL_WRITE, and the key goes to no peer), and the only request here reads it (a WRITE's
    // source); `m` is only reached through raw pointers.
    let mr = unsafe {
        p.pd.reg_watched_mr_raw(addr as *mut u8, len, Access::LOCAL_WRITE)?
    };
    check_eq!(t, mr.access(), Access::LOCAL_WRITE | Access::WATCHED);
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
    let sge = mr.sge(addr, 256);
    p.a.post_send(&[SendWr::new(1, w, &[sge])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_wc(t, &wc, 1, WcStatus::Success, WcOpcode::RdmaWrite, "write");
    check_eq!(t, dst.to_vec(0, 256), data);

    drop(m); // munmap: the region is revoked before it returns
    check_published_once(t, &inval, mr.lkey(), addr, len as u64);
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

    // The handle stays until it is deregistered, which succeeds.
    check_eq!(t, knob(WATCHED)?, watched0 + 1);
    let r = mr.dereg();
    check!(t, r.is_ok(), "deregistering the revoked region: {r:?}");
    check_eq!(t, knob(WATCHED)?, watched0);
    Ok(())
}

/// A watched region over two buffers, one of them unmapped: only its pages are revoked (and
/// unpinned at once); the same key keeps serving the other (so requests in flight on it
/// complete), and the key is published once.
pub(super) fn verbs_watch_revokes_only_the_pages_that_went(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let inval = p.ctx.map_inval_page()?;
    let mut dst =
        p.pd.reg_mr_buf(PAGE, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let (pinned0, rev0) = (knob(PINNED)?, knob(REVOCATIONS)?);
    let both = Map::new(4 * PAGE)?;
    both.write(0, &pattern(0x4b, 4 * PAGE));
    let (a, b) = (both.addr(), both.addr() + 2 * PAGE as u64);
    // No rights: the device only reads it, as the source of our own requests.
    let mr = p.pd.reg_watched_mr(both.ptr, 4 * PAGE, Access::NONE)?;
    check_eq!(t, knob(PINNED)?, pinned0 + 4);
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    let mut send = |p: &mut Pair, addr: u64, id: u64| -> Result<(WcStatus, Vec<u8>), Fail> {
        dst.fill(0, 128, 0);
        p.a.post_send(&[SendWr::new(id, op, &[mr.sge(addr, 128)])])?;
        Ok((wait_wc(&mut p.cq_a)?.status, dst.to_vec(0, 128)))
    };
    let want_b = both.read(2 * PAGE, 128);

    // SAFETY: the first half of our own mapping; nothing refers into it.
    check_eq!(t, unsafe { libc::munmap(both.ptr.cast(), 2 * PAGE) }, 0);
    check_published_once(t, &inval, mr.lkey(), a, 4 * PAGE as u64);
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
    check_eq!(t, inval.generation(), 1);
    check_eq!(t, knob(PINNED)?, pinned0, "all unpinned");
    let r = mr.dereg();
    check!(t, r.is_ok(), "deregistering the revoked region: {r:?}");
    check_eq!(t, knob(PINNED)?, pinned0);
    Ok(())
}
