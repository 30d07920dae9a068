// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! On-demand paging under a hostile process: invalidations (`madvise`, `munmap`, `fork`) that
//! fall anywhere, at any moment, while the device faults pages in and moves data. Nothing may
//! crash the kernel or leave a page mapped; every access to memory that stays valid succeeds
//! and moves the right bytes.
//!
//! The first case pins down the shape that crashed the driver (an invalidation that empties the
//! last chunk of a region's record while an earlier chunk stays); the storms run a fixed,
//! seeded sequence for a bounded number of rounds and check the counters that prove the
//! invalidations and faults happened.

use super::odp::{check_bytes, drv_counter, run1, rw, stats, ODP_MAPPED, PAGE};
use super::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// Pages in one chunk of the driver's record of a region (`QHCA_ODP_MAP_MAX`: 2 MiB).
const CHUNK_BYTES: usize = qhca_uapi::QHCA_ODP_MAP_MAX as usize * PAGE;
/// The storms' target: 16 MiB, eight chunks.
const STORM_LEN: usize = 16 << 20;
/// One storm transfer: 64 KiB.
const XFER: usize = 64 << 10;

/// A small deterministic generator (xorshift64*), so that a failing storm repeats exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A page-aligned offset at which `len` bytes fit into `total`.
    fn page_offset(&mut self, total: usize, len: usize) -> usize {
        (self.next() as usize % ((total - len) / PAGE + 1)) * PAGE
    }
}

/// `madvise(MADV_DONTNEED)` of `[addr, addr + len)`.
fn dontneed(addr: u64, len: usize) -> Result<(), Fail> {
    // SAFETY: the callers pass ranges of their own `Map`, reached only through raw pointers;
    // DONTNEED only drops the pages (they read as zero afterwards), the mapping stays.
    let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) };
    if r != 0 {
        return Err(fail_msg(format!("madvise: {}", Errno::last())));
    }
    Ok(())
}

/// The driver's count of pages mapped for ODP regions, on every device.
fn odp_mapped() -> Result<i64, Fail> {
    let s = std::fs::read_to_string(ODP_MAPPED)?;
    s.trim()
        .parse()
        .map_err(|e| fail_msg(format!("{ODP_MAPPED}: {e}: {s:?}")))
}

/// A mapping of `len` bytes whose start is aligned to a chunk (2 MiB), inside `Map` `m`.
fn chunk_aligned(len: usize) -> Result<(Map, u64), Fail> {
    let m = Map::new(len + CHUNK_BYTES)?;
    let base = (m.addr() + CHUNK_BYTES as u64 - 1) & !(CHUNK_BYTES as u64 - 1);
    Ok((m, base))
}

/// RDMA WRITE of `data` (staged in `src`) to `raddr` through `rkey`; one completion, checked.
fn write_at(
    p: &mut Pair,
    src: &mut MrBuf,
    data: &[u8],
    raddr: u64,
    rkey: u32,
    id: u64,
) -> CaseResult {
    src.write_at(0, data);
    let wc = run1(
        p,
        id,
        WrOp::Write { raddr, rkey },
        &[src.sge(0, data.len() as u32)],
    )?;
    if wc.status != WcStatus::Success {
        return Err(fail_msg(format!("write {id} to {raddr:#x}: {wc:?}")));
    }
    Ok(())
}

/// An invalidation that empties the last chunk of a region's record while an earlier chunk
/// keeps its pages: only the pages in the range go, the earlier ones stay mapped, and the region
/// works on. (The driver's walk over its record stepped back to the earlier chunk after
/// removing the last one, and indexed it with the range's offset: a kernel BUG.)
pub(super) fn verbs_odp_invalidate_last_chunk(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 4 * CHUNK_BYTES;
    let (m, base) = chunk_aligned(len)?;
    // SAFETY: `m` is reached only through raw pointers (volatile copies and madvise) while the
    // device may write it; the key is used only by this case's own QPs.
    let mr = unsafe { p.pd.reg_odp_mr_raw(base as *mut u8, len, rw())? };
    let mut src = p.pd.reg_mr_buf(PAGE, Access::NONE)?;
    let m0 = odp_mapped()?;
    // One page in the first chunk, one 47 pages into the fourth.
    let early = base;
    let late = base + (3 * CHUNK_BYTES + 47 * PAGE) as u64;
    write_at(&mut p, &mut src, &pattern(0x11, PAGE), early, mr.rkey(), 1)?;
    write_at(&mut p, &mut src, &pattern(0x12, PAGE), late, mr.rkey(), 2)?;
    check_eq!(t, odp_mapped()? - m0, 2, "pages mapped by the two writes");
    let inv0 = drv_counter(cfg, "invalidations")?;
    // From 40 pages into the fourth chunk, 1 MiB: the late page goes, and with it the chunk.
    dontneed(base + (3 * CHUNK_BYTES + 40 * PAGE) as u64, 1 << 20)?;
    check_eq!(
        t,
        odp_mapped()? - m0,
        1,
        "pages mapped after the invalidation"
    );
    check!(
        t,
        drv_counter(cfg, "invalidations")? > inv0,
        "the device was told about the invalidation"
    );
    // Both pages work on: the early one still mapped, the late one faulted in again.
    let off = |a: u64| (a - m.addr()) as usize;
    check_bytes(
        t,
        &m.read(off(early), PAGE),
        &pattern(0x11, PAGE),
        "early page",
    );
    check!(
        t,
        m.read(off(late), PAGE).iter().all(|&b| b == 0),
        "the late page reads as zero after DONTNEED"
    );
    write_at(&mut p, &mut src, &pattern(0x13, PAGE), late, mr.rkey(), 3)?;
    write_at(&mut p, &mut src, &pattern(0x14, PAGE), early, mr.rkey(), 4)?;
    check_bytes(
        t,
        &m.read(off(late), PAGE),
        &pattern(0x13, PAGE),
        "late page rewritten",
    );
    check_bytes(
        t,
        &m.read(off(early), PAGE),
        &pattern(0x14, PAGE),
        "early page rewritten",
    );
    // The same with the range's start before the last chunk's first mapped page and its end
    // inside a later chunk that has none.
    dontneed(base + (3 * CHUNK_BYTES) as u64, CHUNK_BYTES)?;
    check_eq!(
        t,
        odp_mapped()? - m0,
        1,
        "pages mapped after the second invalidation"
    );
    drop(mr);
    check_eq!(t, odp_mapped()?, m0, "pages mapped after deregistration");
    Ok(())
}

/// 64 KiB RDMA WRITEs at random page-aligned offsets of a 16 MiB on-demand target, each checked
/// by the CPU, with `MADV_DONTNEED` over the whole target every 10 rounds.
pub(super) fn verbs_odp_storm_writes(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let m = Map::new(STORM_LEN)?;
    // SAFETY: as in `verbs_odp_invalidate_last_chunk`.
    let mr = unsafe { p.pd.reg_odp_mr_raw(m.ptr, STORM_LEN, rw())? };
    let mut src = p.pd.reg_mr_buf(XFER, Access::NONE)?;
    let m0 = odp_mapped()?;
    let s0 = stats(&p)?;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let rounds = 150;
    for round in 0..rounds {
        let off = rng.page_offset(STORM_LEN, XFER);
        let data = pattern(round as u8, XFER);
        write_at(
            &mut p,
            &mut src,
            &data,
            m.addr() + off as u64,
            mr.rkey(),
            round,
        )?;
        if !check_bytes(
            t,
            &m.read(off, XFER),
            &data,
            &format!("round {round} at {off:#x}"),
        ) {
            break;
        }
        if round % 10 == 9 {
            dontneed(m.addr(), STORM_LEN)?;
        }
    }
    let s1 = stats(&p)?;
    check!(
        t,
        s1.odp_invalidations > s0.odp_invalidations + rounds / 20,
        "invalidations {} -> {}",
        s0.odp_invalidations,
        s1.odp_invalidations
    );
    check!(t, s1.odp_resp_faults > s0.odp_resp_faults + rounds / 2);
    drop(mr);
    check_eq!(t, odp_mapped()?, m0, "pages mapped after deregistration");
    Ok(())
}

/// The same storm with RDMA READs out of the target and both atomics into it, every result
/// checked against what the CPU sees (DONTNEED zeroes the pages).
pub(super) fn verbs_odp_storm_reads_atomics(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let m = Map::new(STORM_LEN)?;
    // SAFETY: as in `verbs_odp_invalidate_last_chunk`.
    let mr = unsafe { p.pd.reg_odp_mr_raw(m.ptr, STORM_LEN, rw())? };
    let back = p.pd.reg_mr_buf(XFER, Access::LOCAL_WRITE)?;
    let m0 = odp_mapped()?;
    let s0 = stats(&p)?;
    let mut rng = Rng(0x51ed_270b_27f1_0e4d);
    let rounds = 150u64;
    for round in 0..rounds {
        let off = rng.page_offset(STORM_LEN, XFER);
        let raddr = m.addr() + off as u64;
        let rkey = mr.rkey();
        match round % 3 {
            0 => {
                let data = pattern(round as u8 ^ 0x5a, XFER);
                m.write(off, &data);
                let wc = run1(
                    &mut p,
                    round,
                    WrOp::Read { raddr, rkey },
                    &[back.sge(0, XFER as u32)],
                )?;
                check_wc(t, &wc, round, WcStatus::Success, WcOpcode::RdmaRead, "read");
                if !check_bytes(t, &back.to_vec(0, XFER), &data, &format!("read {round}")) {
                    break;
                }
            }
            n => {
                let at = off + (rng.next() as usize % (XFER / 8)) * 8;
                let old = u64::from_ne_bytes(m.read(at, 8).try_into().unwrap_or_default());
                let (op, new) = if n == 1 {
                    let add = rng.next() | 1;
                    (
                        WrOp::FetchAdd {
                            raddr: m.addr() + at as u64,
                            rkey,
                            add,
                        },
                        old.wrapping_add(add),
                    )
                } else {
                    let swap = rng.next();
                    (
                        WrOp::CmpSwp {
                            raddr: m.addr() + at as u64,
                            rkey,
                            compare: old,
                            swap,
                        },
                        swap,
                    )
                };
                let wc = run1(&mut p, round, op, &[back.sge(0, 8)])?;
                let opcode = if n == 1 {
                    WcOpcode::FetchAdd
                } else {
                    WcOpcode::CompSwap
                };
                check_wc(t, &wc, round, WcStatus::Success, opcode, "atomic");
                let got = u64::from_ne_bytes(back.to_vec(0, 8).try_into().unwrap_or_default());
                check_eq!(t, got, old, "atomic {round}: the old value returned");
                let now = u64::from_ne_bytes(m.read(at, 8).try_into().unwrap_or_default());
                if !check_eq!(t, now, new, "atomic {round}: the value in memory") {
                    break;
                }
            }
        }
        if round % 10 == 9 {
            dontneed(m.addr(), STORM_LEN)?;
        }
    }
    let s1 = stats(&p)?;
    check!(t, s1.odp_invalidations > s0.odp_invalidations + rounds / 20);
    check!(t, s1.odp_resp_faults > s0.odp_resp_faults + rounds / 2);
    drop(mr);
    check_eq!(t, odp_mapped()?, m0, "pages mapped after deregistration");
    Ok(())
}

/// WRITEs, several in flight, while another thread drops random ranges of the target (not
/// aligned to chunks, from one page to a few MiB) as fast as it can: the memory stays valid all
/// along, so every WRITE succeeds.
pub(super) fn verbs_odp_storm_threads(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let m = Map::new(STORM_LEN)?;
    // SAFETY: as in `verbs_odp_invalidate_last_chunk` (the other thread only calls madvise).
    let mr = unsafe { p.pd.reg_odp_mr_raw(m.ptr, STORM_LEN, rw())? };
    let src = p.pd.reg_mr_buf(8 * XFER, Access::NONE)?;
    let m0 = odp_mapped()?;
    let inv0 = drv_counter(cfg, "invalidations")?;
    let stop = Arc::new(AtomicBool::new(false));
    let base = m.addr();
    let storm = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(0x2545_f491_4f6c_dd1d);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let len = PAGE * (1 + rng.next() as usize % 1024);
                let off = rng.page_offset(STORM_LEN, len);
                if dontneed(base + off as u64, len).is_err() {
                    return None;
                }
                n += 1;
                if n % 16 == 0 {
                    std::thread::yield_now();
                }
            }
            Some(n)
        })
    };
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut bad = Vec::new();
    let (batches, depth) = (40u64, 8usize);
    for b in 0..batches {
        let sges: Vec<[Sge; 1]> = (0..depth)
            .map(|i| [src.sge(i * XFER, XFER as u32)])
            .collect();
        let wrs: Vec<SendWr<'_>> = (0..depth)
            .map(|i| {
                let off = rng.page_offset(STORM_LEN, XFER);
                let op = WrOp::Write {
                    raddr: base + off as u64,
                    rkey: mr.rkey(),
                };
                SendWr::new(b * depth as u64 + i as u64, op, &sges[i])
            })
            .collect();
        p.a.post_send(&wrs)?;
        for _ in 0..depth {
            let wc = wait_wc(&mut p.cq_a)?;
            if wc.status != WcStatus::Success {
                bad.push(wc);
            }
        }
        if !bad.is_empty() {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let drops = storm
        .join()
        .map_err(|_| fail_msg("the madvise thread panicked".into()))?;
    check!(
        t,
        bad.is_empty(),
        "failed WRITEs into valid memory: {bad:?}"
    );
    check!(
        t,
        drops.is_some_and(|n| n > 0),
        "the madvise thread ran: {drops:?}"
    );
    check!(
        t,
        drv_counter(cfg, "invalidations")? > inv0,
        "nothing was invalidated"
    );
    drop(mr);
    check_eq!(t, odp_mapped()?, m0, "pages mapped after deregistration");
    Ok(())
}

/// Children forked while WRITEs are posted (their copy-on-write invalidates the parent's pages),
/// then half of the target unmapped under posted work: WRITEs into the half that stays succeed
/// until the first into the unmapped half fails with a remote access error; nothing stays
/// mapped once the region is gone.
pub(super) fn verbs_odp_storm_fork_munmap(t: &mut T, cfg: &Config) -> CaseResult {
    let o = PairOpts::default();
    let mut p = pair(cfg, &o)?;
    let m = Map::new(STORM_LEN)?;
    // SAFETY: as in `verbs_odp_invalidate_last_chunk`; the children touch only their own copy.
    let mr = unsafe { p.pd.reg_odp_mr_raw(m.ptr, STORM_LEN, rw())? };
    let src = p.pd.reg_mr_buf(8 * XFER, Access::NONE)?;
    let m0 = odp_mapped()?;
    let inv0 = drv_counter(cfg, "invalidations")?;
    let mut rng = Rng(0x0ddb_1a5e_5ca1_ab1e);
    let depth = 8usize;
    let half = STORM_LEN / 2;
    let post = |p: &mut Pair, rng: &mut Rng, id0: u64, lo: usize, span: usize| -> CaseResult {
        let sges: Vec<[Sge; 1]> = (0..depth)
            .map(|i| [src.sge(i * XFER, XFER as u32)])
            .collect();
        let wrs: Vec<SendWr<'_>> = (0..depth)
            .map(|i| {
                let off = lo + rng.page_offset(span, XFER);
                let op = WrOp::Write {
                    raddr: m.addr() + off as u64,
                    rkey: mr.rkey(),
                };
                SendWr::new(id0 + i as u64, op, &sges[i])
            })
            .collect();
        p.a.post_send(&wrs)?;
        Ok(())
    };
    for round in 0..8u64 {
        post(&mut p, &mut rng, round * depth as u64, 0, STORM_LEN)?;
        // SAFETY: the child writes its own copy of the target through raw pointers and leaves
        // with `_exit`: no allocation, no lock, no destructor of the parent's.
        match unsafe { nix::unistd::fork() }? {
            nix::unistd::ForkResult::Child => {
                for i in (0..STORM_LEN).step_by(PAGE * 7) {
                    // SAFETY: the child's private copy of the mapping.
                    unsafe { std::ptr::write_volatile(m.ptr.add(i), 0xcc) };
                }
                // SAFETY: ends the child without running anything of the parent's.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                for _ in 0..depth {
                    let wc = wait_wc(&mut p.cq_a)?;
                    check_wc(
                        t,
                        &wc,
                        wc.wr_id,
                        WcStatus::Success,
                        WcOpcode::RdmaWrite,
                        "write",
                    );
                }
                let st = nix::sys::wait::waitpid(child, None)?;
                check_eq!(t, st, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }
    // Writes into the upper half posted, then that half unmapped under them.
    post(&mut p, &mut rng, 1000, half, half)?;
    // SAFETY: the upper half of our own mapping; nothing refers into it but raw pointers, and
    // `m` is not used past `half` from here on (its Drop unmaps the whole range again, which
    // the kernel accepts).
    check_eq!(
        t,
        unsafe { libc::munmap(m.ptr.add(half).cast(), half) },
        0,
        "munmap"
    );
    let mut outcome = Vec::new();
    for _ in 0..depth {
        outcome.push(wait_wc(&mut p.cq_a)?.status);
    }
    let first_bad = outcome.iter().position(|s| *s != WcStatus::Success);
    if let Some(i) = first_bad {
        check_eq!(
            t,
            outcome[i],
            WcStatus::RemAccessErr,
            "first failure: {outcome:?}"
        );
        check!(
            t,
            outcome[i + 1..].iter().all(|s| *s == WcStatus::WrFlushErr),
            "after the first failure, flushes: {outcome:?}"
        );
    }
    // A WRITE into the unmapped half now fails for sure; one into the lower half, on a fresh
    // pair, still works.
    let mut q = pair_in(&p.ctx, &p.pd, &o)?;
    let op = WrOp::Write {
        raddr: m.addr() + half as u64,
        rkey: mr.rkey(),
    };
    let wc = run1(&mut q, 1, op, &[src.sge(0, 64)])?;
    check_wc(
        t,
        &wc,
        1,
        WcStatus::RemAccessErr,
        WcOpcode::RdmaWrite,
        "write to the unmapped half",
    );
    let mut q = pair_in(&p.ctx, &p.pd, &o)?;
    let op = WrOp::Write {
        raddr: m.addr(),
        rkey: mr.rkey(),
    };
    let wc = run1(&mut q, 2, op, &[src.sge(0, 64)])?;
    check_wc(
        t,
        &wc,
        2,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "write to the lower half",
    );
    check!(
        t,
        drv_counter(cfg, "invalidations")? > inv0,
        "nothing was invalidated"
    );
    drop(mr);
    check_eq!(t, odp_mapped()?, m0, "pages mapped after deregistration");
    Ok(())
}
