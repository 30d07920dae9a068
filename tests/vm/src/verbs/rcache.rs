// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The registration cache ([`RegCache`]) on the real driver: hits and misses on a known pattern,
//! the classic free-then-reallocate corruption, every kind of mapping change revoking what it
//! must, eviction that spares entries in use, threads registering, sending, freeing and
//! reallocating at once, and the on-demand mode.
//!
//! Every case checks what arrived at the peer byte for byte, and the cache's counters or the
//! driver's (debugfs), so that none can pass without what it is about having happened.

use super::watch::{await_knob, knob, PINNED, REVOCATIONS, WATCHED};
use super::*;
use qhca::{CacheConfig, CacheMode, CacheStats, CachedMr, RegCache};

const PAGE: usize = 4096;

/// A cache with page granularity (what it registers is then predictable).
fn page_cache(p: &Pair) -> Result<RegCache, Fail> {
    Ok(RegCache::new(
        &p.pd,
        CacheConfig {
            granule: PAGE,
            ..CacheConfig::default()
        },
    )?)
}

/// RDMA WRITE of `len` bytes at `addr` (inside `mr`) to the start of `dst`; the completion's
/// status and what arrived (zeroed first).
#[track_caller]
fn send_from(
    p: &mut Pair,
    mr: &CachedMr,
    addr: u64,
    len: usize,
    dst: &mut MrBuf,
    id: u64,
) -> Result<(WcStatus, Vec<u8>), Fail> {
    dst.fill(0, len, 0);
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    p.a.post_send(&[SendWr::new(id, op, &[mr.sge(addr, len as u32)])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    Ok((wc.status, dst.to_vec(0, len)))
}

/// Sends `len` bytes at `addr` through `cache` and checks that `want` arrived.
#[track_caller]
fn check_send(
    t: &mut T,
    p: &mut Pair,
    cache: &RegCache,
    addr: u64,
    want: &[u8],
    dst: &mut MrBuf,
    what: &str,
) -> Result<u32, Fail> {
    let mr = cache.get(addr as *const u8, want.len(), Access::NONE)?;
    let (status, got) = send_from(p, &mr, addr, want.len(), dst, 0)?;
    check_eq!(t, status, WcStatus::Success, "{what}");
    check!(
        t,
        got == want,
        "{what}: the peer got other bytes than the buffer holds"
    );
    Ok(mr.lkey())
}

/// A mapping of `len` bytes exactly at `addr`, which must be free (`MAP_FIXED_NOREPLACE`).
fn map_at(addr: u64, len: usize) -> Result<Map, Fail> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the new one is ours.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p as u64 != addr {
        return Err(fail_msg(format!(
            "mmap at {addr:#x}: {:?} ({})",
            p,
            Errno::last()
        )));
    }
    Ok(Map { ptr: p.cast(), len })
}

fn stats_delta(a: &CacheStats, b: &CacheStats) -> (u64, u64, u64) {
    (b.hits - a.hits, b.misses - a.misses, b.revoked - a.revoked)
}

/// A known pattern of lookups: exactly the misses, hits and merges it must give, the driver's
/// watched regions matching the entries, and every region usable.
pub(super) fn verbs_rcache_hits_and_misses(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let mut dst =
        p.pd.reg_mr_buf(2 * PAGE, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let watched0 = knob(WATCHED)?;
    let cache = page_cache(&p)?;
    let m = Map::new(16 * PAGE)?;
    m.write(0, &pattern(0x11, 16 * PAGE));
    let at = |off: usize| m.addr() + off as u64;
    let get = |off: usize, len: usize| cache.get(at(off) as *const u8, len, Access::NONE);

    let s0 = cache.stats();
    let k0 = get(0, 100)?.lkey(); // miss: page 0
    check_eq!(t, get(0, 100)?.lkey(), k0); // hit
    check_eq!(t, get(50, 4000)?.lkey(), k0); // hit: inside page 0
    let k8 = get(8 * PAGE, PAGE)?.lkey(); // miss: page 8
    let k1 = get(PAGE, 100)?.lkey(); // miss: page 1, next to page 0 but not merged
    check!(t, k8 != k0 && k1 != k0 && k1 != k8);
    let k01 = get(PAGE - 10, 20)?.lkey(); // miss: overlaps pages 0 and 1: merged
    check_eq!(t, get(100, 2 * PAGE - 200)?.lkey(), k01); // hit: the merged entry
    let s1 = cache.stats();
    check_eq!(
        t,
        stats_delta(&s0, &s1),
        (3, 4, 0),
        "(hits, misses, revoked)"
    );
    check_eq!(t, s1.merges - s0.merges, 2);
    check_eq!(t, (s1.entries, s1.bytes), (2, 3 * PAGE as u64));
    check_eq!(
        t,
        knob(WATCHED)?,
        watched0 + 2,
        "the merged-away regions are deregistered"
    );

    for _ in 0..1000 {
        get(100, 3000)?;
    }
    let s2 = cache.stats();
    check_eq!(t, stats_delta(&s1, &s2), (1000, 0, 0));
    check_eq!(t, knob(WATCHED)?, watched0 + 2);

    let data = m.read(PAGE - 500, 1000);
    check_send(
        t,
        &mut p,
        &cache,
        at(PAGE - 500),
        &data,
        &mut dst,
        "across the merge",
    )?;
    let data = m.read(8 * PAGE, PAGE);
    check_send(t, &mut p, &cache, at(8 * PAGE), &data, &mut dst, "page 8")?;
    drop(cache);
    check_eq!(
        t,
        knob(WATCHED)?,
        watched0,
        "dropping the cache deregisters it all"
    );
    Ok(())
}

/// The bug every registration cache had: a buffer freed to the system and allocated again at
/// the same address must be sent with its new contents, never the old pages.
pub(super) fn verbs_rcache_reuse_after_free(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 4 * PAGE;
    let mut dst =
        p.pd.reg_mr_buf(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let (pinned0, watched0) = (knob(PINNED)?, knob(WATCHED)?);
    let cache = RegCache::new(&p.pd, CacheConfig::default())?;

    // At a fixed address: munmap, then a new mapping there.
    let m = Map::new(len)?;
    let addr = m.addr();
    let old = pattern(0x21, len);
    m.write(0, &old);
    let key1 = check_send(t, &mut p, &cache, addr, &old, &mut dst, "the old buffer")?;
    let s0 = cache.stats();
    drop(m);
    let m = map_at(addr, len)?;
    let new = pattern(0x9e, len);
    m.write(0, &new);
    let key2 = check_send(t, &mut p, &cache, addr, &new, &mut dst, "the new buffer")?;
    let s1 = cache.stats();
    check!(t, key2 != key1, "a new registration");
    check_eq!(t, s1.misses - s0.misses, 1);
    check!(
        t,
        s1.revoked > s0.revoked,
        "the old entry was revoked: {s1:?}"
    );

    // The old key is dead in the device.
    let sge = Sge {
        addr,
        length: 64,
        lkey: key1,
    };
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    dst.fill(0, 64, 0);
    p.a.post_send(&[SendWr::new(9, op, &[sge])])?;
    let wc = wait_wc(&mut p.cq_a)?;
    check_eq!(t, wc.status, WcStatus::LocProtErr, "the revoked key");
    check_eq!(t, dst.to_vec(0, 64), vec![0u8; 64]);

    // Through malloc: a buffer above glibc's mmap threshold is unmapped by free, and the next
    // one of the same size usually lands at the same address. (A fixed threshold: glibc's
    // adaptive one would serve the second from the heap.)
    // SAFETY: mallopt only changes a malloc tunable.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) };
    let mut p = pair_in(&p.ctx, &p.pd, &PairOpts::default())?;
    let big = 1 << 20;
    let mut dst =
        p.pd.reg_mr_buf(big, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let v = pattern(0x33, big);
    let a1 = v.as_ptr() as u64;
    check_send(t, &mut p, &cache, a1, &v, &mut dst, "malloc'd buffer")?;
    drop(v);
    let w = pattern(0x44, big);
    let a2 = w.as_ptr() as u64;
    check_send(t, &mut p, &cache, a2, &w, &mut dst, "malloc'd again")?;
    eprintln!(
        "    malloc after free: {} address",
        if a1 == a2 { "the same" } else { "another" }
    );
    drop(w);
    drop((cache, p, dst));
    check_eq!(t, knob(WATCHED)?, watched0);
    check_eq!(
        t,
        await_knob(PINNED, pinned0)?,
        pinned0,
        "nothing stays pinned"
    );
    Ok(())
}

/// One way of changing a buffer's mapping, then what the buffer holds afterwards.
type Change = fn(&Map) -> Result<Vec<u8>, Fail>;

fn change_mremap(m: &Map) -> Result<Vec<u8>, Fail> {
    // Moves the pages away and back: each move unmaps the range it leaves.
    let tmp = Map::new(m.len)?;
    let before = m.read(0, m.len);
    for (from, to) in [(m.ptr, tmp.ptr), (tmp.ptr, m.ptr)] {
        // SAFETY: both are our own mappings of `m.len` bytes, reached only through raw
        // pointers; MREMAP_FIXED replaces the destination mapping, which we own.
        let r = unsafe {
            libc::mremap(
                from.cast(),
                m.len,
                m.len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                to.cast::<libc::c_void>(),
            )
        };
        if r != to.cast() {
            return Err(fail_msg(format!("mremap: {}", Errno::last())));
        }
    }
    // `tmp`'s range is unmapped now: do not unmap it again (something else may be there).
    std::mem::forget(tmp);
    Ok(before)
}

fn change_madvise(m: &Map) -> Result<Vec<u8>, Fail> {
    // SAFETY: our own private anonymous mapping, reached only through raw pointers: it reads as
    // zeros afterwards.
    if unsafe { libc::madvise(m.ptr.cast(), m.len, libc::MADV_DONTNEED) } != 0 {
        return Err(fail_msg(format!("madvise: {}", Errno::last())));
    }
    Ok(vec![0; m.len])
}

fn change_fork(m: &Map) -> Result<Vec<u8>, Fail> {
    // SAFETY: the child only calls _exit (async-signal-safe).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    if pid < 0 {
        return Err(fail_msg(format!("fork: {}", Errno::last())));
    }
    nix::sys::wait::waitpid(Pid::from_raw(pid), None).map_err(|e| fail_msg(e.to_string()))?;
    // Written after the fork: copy-on-write gives the parent new pages.
    let new = pattern(0x5f, m.len);
    m.write(0, &new);
    Ok(new)
}

fn change_mprotect(m: &Map) -> Result<Vec<u8>, Fail> {
    // SAFETY: our own mapping; no reference points into it.
    if unsafe { libc::mprotect(m.ptr.cast(), m.len, libc::PROT_READ) } != 0 {
        return Err(fail_msg(format!("mprotect: {}", Errno::last())));
    }
    Ok(m.read(0, m.len))
}

/// munmap (above), mremap, madvise(MADV_DONTNEED), fork and mprotect each revoke the cached
/// region; the next lookup registers again and the peer gets what the buffer holds now.
pub(super) fn verbs_rcache_changes_revoke(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 2 * PAGE;
    let mut dst =
        p.pd.reg_mr_buf(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let cache = page_cache(&p)?;
    let changes: [(&str, Change); 4] = [
        ("mremap", change_mremap),
        ("madvise(MADV_DONTNEED)", change_madvise),
        ("fork", change_fork),
        ("mprotect", change_mprotect),
    ];
    for (i, (name, change)) in changes.into_iter().enumerate() {
        let m = Map::new(len)?;
        let before = pattern(0x60 + i as u8, len);
        m.write(0, &before);
        let key = check_send(t, &mut p, &cache, m.addr(), &before, &mut dst, name)?;
        let rev0 = knob(REVOCATIONS)?;
        let s0 = cache.stats();
        let now = change(&m)?;
        check!(
            t,
            knob(REVOCATIONS)? > rev0,
            "{name}: the driver revoked the region"
        );
        let key2 = check_send(t, &mut p, &cache, m.addr(), &now, &mut dst, name)?;
        let s1 = cache.stats();
        check!(t, key2 != key, "{name}: registered again");
        check_eq!(
            t,
            stats_delta(&s0, &s1),
            (0, 1, 1),
            "{name}: (hits, misses, revoked)"
        );
    }
    Ok(())
}

/// Beyond the entry limit, only unused entries are evicted (least recently used first); those
/// held by a guard stay registered and usable.
pub(super) fn verbs_rcache_eviction_spares_in_use(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let mut dst =
        p.pd.reg_mr_buf(PAGE, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let watched0 = knob(WATCHED)?;
    let cache = RegCache::new(
        &p.pd,
        CacheConfig {
            granule: PAGE,
            max_entries: 2,
            ..CacheConfig::default()
        },
    )?;
    let m = Map::new(8 * PAGE)?;
    m.write(0, &pattern(0x70, 8 * PAGE));
    let get = |page: usize| {
        cache.get(
            (m.addr() + (page * PAGE) as u64) as *const u8,
            PAGE,
            Access::NONE,
        )
    };
    let g0 = get(0)?;
    let g2 = get(2)?;
    let g4 = get(4)?;
    let s = cache.stats();
    check_eq!(
        t,
        (s.entries, s.in_use, s.evictions),
        (3, 3, 0),
        "all in use: over the limit"
    );
    check_eq!(t, knob(WATCHED)?, watched0 + 3);
    drop(g0);
    let g6 = get(6)?;
    let s = cache.stats();
    check_eq!(
        t,
        (s.entries, s.in_use, s.evictions),
        (3, 3, 1),
        "page 0 evicted"
    );
    check_eq!(t, knob(WATCHED)?, watched0 + 3);
    for (g, page) in [(&g2, 2), (&g4, 4), (&g6, 6)] {
        let addr = m.addr() + (page * PAGE) as u64;
        let (status, got) = send_from(&mut p, g, addr, PAGE, &mut dst, page as u64)?;
        check_eq!(t, status, WcStatus::Success, "page {page} in use");
        check!(t, got == m.read(page * PAGE, PAGE), "page {page}'s bytes");
    }
    drop((g2, g4, g6));
    get(0)?; // a miss: evicts down to the limit
    let s = cache.stats();
    check_eq!(t, (s.entries, s.in_use), (2, 0));
    check_eq!(t, s.evictions, 3);
    check_eq!(t, knob(WATCHED)?, watched0 + 2);
    Ok(())
}

/// Threads sharing one cache register, send, free and reallocate for a fixed time: every
/// message arrives as the buffer held it, and nothing stays registered or pinned afterwards.
pub(super) fn verbs_rcache_stress(t: &mut T, cfg: &Config) -> CaseResult {
    const THREADS: usize = 3;
    const RUN: Duration = Duration::from_secs(4);
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let (pinned0, watched0, rev0) = (knob(PINNED)?, knob(WATCHED)?, knob(REVOCATIONS)?);
    let cache = RegCache::new(
        &pd,
        CacheConfig {
            max_entries: 16,
            ..CacheConfig::default()
        },
    )?;
    let end = Instant::now() + RUN;
    let results: Vec<Result<(u64, u64), String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|id| {
                let (ctx, pd, cache) = (&ctx, &pd, &cache);
                s.spawn(move || -> Result<(u64, u64), String> {
                    let err = |e: Fail| format!("{e:?}");
                    let mut p = pair_in(ctx, pd, &PairOpts::default()).map_err(err)?;
                    let mut dst = pd
                        .reg_mr_buf(4 * PAGE, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                        .map_err(|e| e.to_string())?;
                    let (mut sent, mut bad) = (0u64, 0u64);
                    let mut keep: Option<Map> = None;
                    while Instant::now() < end {
                        let i = sent as usize;
                        // Every third buffer is used again in the next round (a hit); the
                        // others are freed to the system right after use (revocations, and
                        // the next buffer often gets the same address).
                        let m = match keep.take() {
                            Some(m) => m,
                            None => Map::new((1 + (i + id) % 4) * PAGE).map_err(err)?,
                        };
                        let len = m.len;
                        let data = pattern((id * 64 + i) as u8, len);
                        m.write(0, &data);
                        let mr = cache
                            .get(m.ptr, len, Access::NONE)
                            .map_err(|e| e.to_string())?;
                        let (status, got) =
                            send_from(&mut p, &mr, m.addr(), len, &mut dst, sent).map_err(err)?;
                        if status != WcStatus::Success || got != data {
                            bad += 1;
                        }
                        sent += 1;
                        drop(mr);
                        if i % 3 == 0 {
                            keep = Some(m);
                        }
                    }
                    Ok((sent, bad))
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("thread panicked".into())))
            .collect()
    });
    let (mut sent, mut bad) = (0, 0);
    for r in results {
        match r {
            Ok((s, b)) => {
                sent += s;
                bad += b;
            }
            Err(e) => bail!("worker: {e}"),
        }
    }
    let s = cache.stats();
    eprintln!("    {sent} messages by {THREADS} threads in {RUN:?}; cache {s:?}");
    check_eq!(
        t,
        bad,
        0,
        "messages that arrived other than sent, of {sent}"
    );
    check!(
        t,
        sent >= 3 * THREADS as u64,
        "each thread sent some: {sent}"
    );
    check!(t, s.hits > 0 && s.misses > 0, "{s:?}");
    check!(t, knob(REVOCATIONS)? > rev0, "freeing revoked regions");
    drop(cache);
    check_eq!(t, knob(WATCHED)?, watched0, "no watched region left");
    check_eq!(
        t,
        await_knob(PINNED, pinned0)?,
        pinned0,
        "no page left pinned"
    );
    Ok(())
}

/// The on-demand mode: nothing pinned or watched, and a buffer unmapped and mapped again at the
/// same address is a hit that sends the new contents (the device follows the page tables).
pub(super) fn verbs_rcache_on_demand(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 4 * PAGE;
    let mut dst =
        p.pd.reg_mr_buf(len, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let (pinned0, watched0) = (knob(PINNED)?, knob(WATCHED)?);
    let cache = RegCache::new(
        &p.pd,
        CacheConfig {
            mode: CacheMode::OnDemand,
            ..CacheConfig::default()
        },
    )?;
    let m = Map::new(len)?;
    let addr = m.addr();
    let old = pattern(0x81, len);
    m.write(0, &old);
    let key1 = check_send(t, &mut p, &cache, addr, &old, &mut dst, "first")?;
    check_eq!(t, (knob(PINNED)?, knob(WATCHED)?), (pinned0, watched0));
    drop(m);
    let m = map_at(addr, len)?;
    let new = pattern(0x18, len);
    m.write(0, &new);
    let s0 = cache.stats();
    let key2 = check_send(t, &mut p, &cache, addr, &new, &mut dst, "after remapping")?;
    let s1 = cache.stats();
    check_eq!(t, key2, key1, "the same region");
    check_eq!(t, stats_delta(&s0, &s1), (1, 0, 0));
    Ok(())
}

/// A process killed with regions in its cache, some in flight: the driver releases every one
/// (watched regions and pinned pages back where they were).
pub(super) fn verbs_rcache_process_gone(t: &mut T, cfg: &Config) -> CaseResult {
    let (pinned0, watched0) = (knob(PINNED)?, knob(WATCHED)?);
    let mut child = start_running_helper("__verbs_rcache", &cfg.dev)?;
    check!(
        t,
        knob(WATCHED)? > watched0 && knob(PINNED)? >= pinned0 + 17,
        "the helper's cache holds its regions"
    );
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL)?;
    let st = child.wait()?;
    check!(
        t,
        system::killed_by_signal(&st, Signal::SIGKILL),
        "helper ended with {st}"
    );
    check_eq!(
        t,
        await_knob(WATCHED, watched0)?,
        watched0,
        "watched regions after kill -9"
    );
    check_eq!(
        t,
        await_knob(PINNED, pinned0)?,
        pinned0,
        "pinned pages after kill -9"
    );
    Ok(())
}

/// `__verbs_rcache DEVICE`: sends from buffers looked up in a cache, eight of them (16 pages)
/// kept and the rest freed and allocated again, with requests in flight; prints `running` once
/// they are cached, and runs until killed.
pub(super) fn rcache_churn_main(dev: &Path) -> qhca::Result<()> {
    let ctx = Arc::new(Context::open(dev)?);
    let pd = Pd::new(&ctx)?;
    let mut p = connected_pair(&ctx, &pd, &PairOpts::default())?;
    let cache = RegCache::new(&pd, CacheConfig::default())?;
    let dst = pd.reg_mr_buf(PAGE, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    let keep: Vec<Map> = (0..8)
        .map(|_| Map::new(2 * PAGE))
        .collect::<Result<_, Fail>>()
        .map_err(|e| qhca::Error::Invalid {
            what: format!("{e:?}"),
        })?;
    let mut first = true;
    let mut wc = [Wc::default(); 16];
    loop {
        let fresh = Map::new(PAGE).map_err(|e| qhca::Error::Invalid {
            what: format!("{e:?}"),
        })?;
        let guards = keep
            .iter()
            .chain([&fresh])
            .map(|m| cache.get(m.ptr, m.len, Access::NONE))
            .collect::<qhca::Result<Vec<CachedMr>>>()?;
        let sges: Vec<[Sge; 1]> = guards.iter().map(|g| [g.sge(g.addr(), 64)]).collect();
        let wrs: Vec<SendWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(i, s)| SendWr::new(i as u64, op, s))
            .collect();
        p.a.post_send(&wrs)?;
        if first {
            super::process::say("running");
            first = false;
        }
        let mut done = 0;
        while done < wrs.len() {
            done += p.cq_a.poll(&mut wc);
        }
        drop(guards);
    }
}
