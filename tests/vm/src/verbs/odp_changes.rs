// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! On-demand paging when the memory changes under a region, and around it: invalidation by
//! `madvise`, `munmap` and a copy-on-write after `fork`, responder faults answered with RNR NAKs,
//! the implicit region over stack, heap and fresh mappings, prefetch, and a process killed while
//! its QP waits on a fault.
//!
//! Each case checks the device's fault counters (QUERY_CTX) or the driver's (debugfs), so that a
//! case cannot pass without the faults it is about having happened.

use super::odp::{check_bytes, drv_counter, run1, rw, stats, write_pattern, ODP_MAPPED, PAGE};
use super::*;
use qhca::Advice;
use std::os::fd::AsRawFd;

/// After `madvise(MADV_DONTNEED)` the pages are invalidated; the next access faults again and
/// finds the right data.
pub(super) fn verbs_odp_madvise_refaults(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 4 * PAGE;
    let dst = p.pd.reg_odp_buf(len, rw())?;
    let mut src = p.pd.reg_mr_buf(len, Access::NONE)?;
    let d1 = write_pattern(&mut p, &mut src, &dst, 0x61, 1)?;
    check_bytes(t, &dst.to_vec(0, len), &d1, "first write");
    let s1 = stats(&p)?;
    let inv1 = drv_counter(cfg, "invalidations")?;
    // SAFETY: the region owns the range and hands out no reference into it; DONTNEED only
    // drops its pages (they read as zero afterwards).
    let r = unsafe { libc::madvise(dst.addr() as *mut libc::c_void, len, libc::MADV_DONTNEED) };
    check_eq!(t, r, 0, "madvise");
    check!(
        t,
        dst.to_vec(0, len).iter().all(|&b| b == 0),
        "DONTNEED zeroed the pages"
    );
    let s2 = stats(&p)?;
    check!(
        t,
        s2.odp_invalidations > s1.odp_invalidations && drv_counter(cfg, "invalidations")? > inv1,
        "madvise invalidated nothing ({} -> {})",
        s1.odp_invalidations,
        s2.odp_invalidations
    );
    let d2 = write_pattern(&mut p, &mut src, &dst, 0x62, 2)?;
    check_bytes(t, &dst.to_vec(0, len), &d2, "write after DONTNEED");
    let s3 = stats(&p)?;
    check!(
        t,
        s3.odp_resp_faults > s2.odp_resp_faults,
        "the write after DONTNEED faulted again"
    );
    Ok(())
}

/// After `munmap`, an access with the old key fails; a page mapped at the same address later is
/// what the device then sees (never the old page): readable, and not writable while mapped
/// read-only, and untouched.
pub(super) fn verbs_odp_munmap_then_error(t: &mut T, cfg: &Config) -> CaseResult {
    let o = PairOpts::default();
    let mut p = pair(cfg, &o)?;
    let len = 2 * PAGE;
    let m = Map::new(len)?;
    let addr = m.addr();
    // SAFETY: `m` is reached only through raw pointers (volatile copies): no Rust reference
    // points into it while the device writes it.
    let mr = unsafe { p.pd.reg_odp_mr_raw(m.ptr, len, rw())? };
    let mut src = p.pd.reg_mr_buf(len, Access::LOCAL_WRITE)?;
    let d1 = pattern(0x71, len);
    src.write_at(0, &d1);
    let w = WrOp::Write {
        raddr: addr,
        rkey: mr.rkey(),
    };
    let wc = run1(&mut p, 1, w, &[src.sge(0, len as u32)])?;
    check_wc(t, &wc, 1, WcStatus::Success, WcOpcode::RdmaWrite, "write");
    check_bytes(t, &m.read(0, len), &d1, "written");
    drop(m); // munmap
    let wc = run1(&mut p, 2, w, &[src.sge(0, len as u32)])?;
    check_wc(
        t,
        &wc,
        2,
        WcStatus::RemAccessErr,
        WcOpcode::RdmaWrite,
        "write after munmap",
    );

    // A fresh page at the same address, read-only: the old key reads it (not the old page's
    // data) and cannot write it.
    let mut p = pair_in(&p.ctx, &p.pd, &o)?;
    // SAFETY: MAP_FIXED over `addr`, which we unmapped above and nothing else uses.
    let q = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    require!(t, q as u64 == addr, "MAP_FIXED at {addr:#x}: {q:?}");
    let fresh = Map {
        ptr: q.cast(),
        len: PAGE,
    };
    fresh.write(0, &[0x5a; PAGE]);
    // SAFETY: our page, read-only from now on.
    check_eq!(t, unsafe { libc::mprotect(q, PAGE, libc::PROT_READ) }, 0);
    let r = WrOp::Read {
        raddr: addr,
        rkey: mr.rkey(),
    };
    let wc = run1(&mut p, 3, r, &[src.sge(0, 256)])?;
    check_wc(
        t,
        &wc,
        3,
        WcStatus::Success,
        WcOpcode::RdmaRead,
        "read of the new page",
    );
    check_bytes(t, &src.to_vec(0, 256), &[0x5a; 256], "the new page's data");
    let wc = run1(&mut p, 4, w, &[src.sge(0, 64)])?;
    check_wc(
        t,
        &wc,
        4,
        WcStatus::RemAccessErr,
        WcOpcode::RdmaWrite,
        "write to a read-only page",
    );
    check!(
        t,
        fresh.read(0, PAGE).iter().all(|&b| b == 0x5a),
        "the new page was written"
    );
    drop(mr);
    Ok(())
}

/// Many WRITEs into a peer's untouched ODP region: the responder faults, answers RNR NAKs, and
/// every byte arrives once.
pub(super) fn verbs_odp_responder_faults_rnr(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let n = 48;
    let chunk = 3 * PAGE + 512;
    let dst = p.pd.reg_odp_buf(n * chunk, rw())?;
    let mut src = p.pd.reg_mr_buf(n * chunk, Access::NONE)?;
    let data = pattern(0x81, n * chunk);
    src.write_at(0, &data);
    let s0 = stats(&p)?;
    let sges: Vec<[Sge; 1]> = (0..n).map(|i| [src.sge(i * chunk, chunk as u32)]).collect();
    let wrs: Vec<SendWr<'_>> = (0..n)
        .map(|i| {
            SendWr::new(
                i as u64,
                WrOp::Write {
                    raddr: dst.addr() + (i * chunk) as u64,
                    rkey: dst.rkey(),
                },
                &sges[i],
            )
        })
        .collect();
    for batch in wrs.chunks(16) {
        p.a.post_send(batch)?;
    }
    for i in 0..n {
        let wc = wait_wc(&mut p.cq_a)?;
        check_wc(
            t,
            &wc,
            i as u64,
            WcStatus::Success,
            WcOpcode::RdmaWrite,
            "write",
        );
    }
    let got = dst.to_vec(0, n * chunk);
    for i in 0..n {
        let r = i * chunk..(i + 1) * chunk;
        let (a, b): (u64, u64) = (
            got[r.clone()].iter().map(|&x| u64::from(x)).sum(),
            data[r.clone()].iter().map(|&x| u64::from(x)).sum(),
        );
        check_eq!(t, a, b, "checksum of write {i}");
    }
    check_bytes(t, &got, &data, "all writes");
    let s1 = stats(&p)?;
    check!(
        t,
        s1.odp_resp_faults > s0.odp_resp_faults,
        "responder faults {} -> {}",
        s0.odp_resp_faults,
        s1.odp_resp_faults
    );
    check!(
        t,
        s1.odp_fault_rnr_naks > s0.odp_fault_rnr_naks,
        "RNR NAKs for faults {} -> {}",
        s0.odp_fault_rnr_naks,
        s1.odp_fault_rnr_naks
    );
    check!(
        t,
        s1.rnr_retries > s0.rnr_retries,
        "the requester waited out RNR NAKs"
    );
    Ok(())
}

/// The implicit region: one key for the stack, the heap and a fresh mapping.
pub(super) fn verbs_odp_implicit(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    // SAFETY: the device writes only where this case's work requests direct it: `heap` and
    // `m`, reached only through raw pointers while it may; the key is not given to anyone else.
    let imp = unsafe { p.pd.reg_odp_implicit_raw(rw())? };
    check!(t, imp.is_implicit());
    let len = 6000;
    let mut stack = [0u8; 6000];
    stack.copy_from_slice(&pattern(0x91, len));
    let stack_addr = std::hint::black_box(stack.as_ptr()) as u64;
    let heap: Vec<u8> = vec![0u8; 3 * PAGE];
    let heap_ptr = std::hint::black_box(heap.as_ptr()) as *mut u8;
    let m = Map::new(2 * PAGE)?;
    let s0 = stats(&p)?;

    // Stack -> heap (WRITE: local gather and remote target through the one key).
    let w = WrOp::Write {
        raddr: heap_ptr as u64 + 100,
        rkey: imp.rkey(),
    };
    let wc = run1(&mut p, 1, w, &[imp.sge(stack_addr, len as u32)])?;
    check_wc(
        t,
        &wc,
        1,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "stack -> heap",
    );
    // SAFETY: the WRITE completed (its CQE was polled); the device writes `heap` no more.
    let got: Vec<u8> = (0..len)
        .map(|i| unsafe { std::ptr::read_volatile(heap_ptr.add(100 + i)) })
        .collect();
    check_bytes(t, &got, &stack, "heap after WRITE");
    // Heap -> fresh mapping (READ).
    let r = WrOp::Read {
        raddr: heap_ptr as u64 + 100,
        rkey: imp.rkey(),
    };
    let wc = run1(&mut p, 2, r, &[imp.sge(m.addr() + 10, len as u32)])?;
    check_wc(
        t,
        &wc,
        2,
        WcStatus::Success,
        WcOpcode::RdmaRead,
        "heap -> mmap",
    );
    check_bytes(t, &m.read(10, len), &stack, "mapping after READ");
    // An address nobody mapped: the access fails.
    let hole = Map::new(PAGE)?;
    let hole_addr = hole.addr();
    drop(hole);
    let w = WrOp::Write {
        raddr: hole_addr,
        rkey: imp.rkey(),
    };
    let wc = run1(&mut p, 3, w, &[imp.sge(stack_addr, 64)])?;
    check_wc(
        t,
        &wc,
        3,
        WcStatus::RemAccessErr,
        WcOpcode::RdmaWrite,
        "write to a hole",
    );
    let s1 = stats(&p)?;
    check!(t, s1.odp_req_faults > s0.odp_req_faults, "requester faults");
    check!(
        t,
        s1.odp_resp_faults > s0.odp_resp_faults,
        "responder faults"
    );
    drop(imp);
    drop(heap);
    Ok(())
}

/// `fork()` with an ODP region: the parent's pages become copy-on-write; the device's writes
/// land in the parent's memory, never in the child's copy.
pub(super) fn verbs_odp_fork_cow(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 2 * PAGE;
    let mut dst = p.pd.reg_odp_buf(len, rw())?;
    let mut src = p.pd.reg_mr_buf(len, Access::NONE)?;
    dst.write_at(0, &[0xaa; 2 * PAGE]);
    // The device maps the parent's pages.
    let d1 = write_pattern(&mut p, &mut src, &dst, 0xa1, 1)?;
    check_bytes(t, &dst.to_vec(0, len), &d1, "before fork");

    let (from_parent, to_child) = nix::unistd::pipe()?;
    let (from_child, to_parent) = nix::unistd::pipe()?;
    let dst_ptr = dst.addr() as *mut u8;
    // SAFETY: the child only writes and reads its own copy of the region through raw pointers,
    // talks through the pipes and leaves with `_exit`: no allocation, no lock, no destructor.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            let mut b = [0u8; 1];
            // Copy-on-write: the child's own page.
            for i in 0..len {
                // SAFETY: the child's private copy of the mapping.
                unsafe { std::ptr::write_volatile(dst_ptr.add(i), 0xcc) };
            }
            let _ = nix::unistd::write(&to_parent, b"w");
            let _ = nix::unistd::read(from_parent.as_raw_fd(), &mut b);
            let ok = (0..len).all(|i| unsafe { std::ptr::read_volatile(dst_ptr.add(i)) } == 0xcc);
            // SAFETY: ends the child without running anything of the parent's.
            unsafe { libc::_exit(if ok { 0 } else { 3 }) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            let mut b = [0u8; 1];
            nix::unistd::read(from_child.as_raw_fd(), &mut b)?;
            let inv = stats(&p)?.odp_invalidations;
            // The device writes again: it must reach the parent's page.
            let d2 = write_pattern(&mut p, &mut src, &dst, 0xa2, 2)?;
            nix::unistd::write(&to_child, b"c")?;
            let st = nix::sys::wait::waitpid(child, None)?;
            check_eq!(
                t,
                st,
                nix::sys::wait::WaitStatus::Exited(child, 0),
                "the child's copy changed under the device's WRITE"
            );
            check_bytes(t, &dst.to_vec(0, len), &d2, "parent after the WRITE");
            check!(
                t,
                stats(&p)?.odp_invalidations >= inv,
                "invalidation counter went back"
            );
            // And the CPU's own writes after fork reach the device (READ back).
            dst.write_at(0, &[0x3c; 64]);
            let r = WrOp::Read {
                raddr: dst.addr(),
                rkey: dst.rkey(),
            };
            let back = p.pd.reg_mr_buf(64, Access::LOCAL_WRITE)?;
            let wc = run1(&mut p, 3, r, &[back.sge(0, 64)])?;
            check_wc(
                t,
                &wc,
                3,
                WcStatus::Success,
                WcOpcode::RdmaRead,
                "read after fork",
            );
            check_bytes(t, &back.to_vec(0, 64), &[0x3c; 64], "read after fork");
        }
    }
    Ok(())
}

/// Prefetch with FLUSH: the access that follows raises no fault; without FLUSH the pages are
/// mapped by the worker soon after.
pub(super) fn verbs_odp_advise_prefetch(t: &mut T, cfg: &Config) -> CaseResult {
    let mut p = pair(cfg, &PairOpts::default())?;
    let len = 8 * PAGE;
    let mut src = p.pd.reg_odp_buf(len, Access::NONE)?;
    let dst = p.pd.reg_odp_buf(len, rw())?;
    let data = pattern(0xb1, len);
    src.write_at(0, &data);
    let pf0 = drv_counter(cfg, "prefetches")?;
    src.advise(Advice::Prefetch, src.addr(), len as u64, true)?;
    dst.advise(Advice::PrefetchWrite, dst.addr(), len as u64, true)?;
    check!(
        t,
        drv_counter(cfg, "prefetches")? >= pf0 + 2,
        "prefetches counted"
    );
    let s0 = stats(&p)?;
    let f0 = drv_counter(cfg, "faults")?;
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    let wc = run1(&mut p, 1, op, &[src.sge_at(0, len as u32)])?;
    check_wc(t, &wc, 1, WcStatus::Success, WcOpcode::RdmaWrite, "write");
    check_bytes(t, &dst.to_vec(0, len), &data, "written");
    let s1 = stats(&p)?;
    check_eq!(
        t,
        s1.odp_req_faults,
        s0.odp_req_faults,
        "requester faults after prefetch"
    );
    check_eq!(
        t,
        s1.odp_resp_faults,
        s0.odp_resp_faults,
        "responder faults after prefetch"
    );
    check_eq!(
        t,
        drv_counter(cfg, "faults")?,
        f0,
        "driver faults after prefetch"
    );

    // Without FLUSH: queued, then mapped by the worker.
    let other = p.pd.reg_odp_buf(len, rw())?;
    let before: i64 = std::fs::read_to_string(ODP_MAPPED)?
        .trim()
        .parse()
        .unwrap_or(-1);
    other.advise(Advice::PrefetchWrite, other.addr(), len as u64, false)?;
    let end = Instant::now() + WC_TIMEOUT;
    let mut now = before;
    while Instant::now() < end {
        now = std::fs::read_to_string(ODP_MAPPED)?
            .trim()
            .parse()
            .unwrap_or(-1);
        if now >= before + 8 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    check!(
        t,
        now >= before + 8,
        "async prefetch mapped {} pages",
        now - before
    );
    let s2 = stats(&p)?;
    let op = WrOp::Write {
        raddr: other.addr(),
        rkey: other.rkey(),
    };
    let wc = run1(&mut p, 2, op, &[src.sge_at(0, len as u32)])?;
    check_wc(t, &wc, 2, WcStatus::Success, WcOpcode::RdmaWrite, "write 2");
    check_bytes(t, &other.to_vec(0, len), &data, "written 2");
    check_eq!(
        t,
        stats(&p)?.odp_resp_faults,
        s2.odp_resp_faults,
        "faults after async prefetch"
    );
    Ok(())
}

/// A process killed while its QPs fault: everything is freed (no object in the device, nothing
/// mapped or pinned), and the device works on.
pub(super) fn verbs_odp_kill_while_faulting(t: &mut T, cfg: &Config) -> CaseResult {
    let f0 = drv_counter(cfg, "faults")?;
    let mut child = start_running_helper("__verbs_odp_fault", &cfg.dev)?;
    // Let it fault for a while, then kill it mid-way.
    let end = Instant::now() + Duration::from_secs(10);
    while drv_counter(cfg, "faults")? < f0 + 20 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    check!(
        t,
        drv_counter(cfg, "faults")? >= f0 + 20,
        "the helper faulted"
    );
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL)?;
    let st = child.wait()?;
    check!(
        t,
        system::killed_by_signal(&st, Signal::SIGKILL),
        "helper ended with {st}"
    );
    // The mappings go with the address space (exit_mm) and the pinned rings with the file's
    // release, which comes after it (exit_files, then the core's release of the uverbs file);
    // the worker may still be finishing: both must reach 0, within 10 s.
    const PINNED: &str = "/sys/kernel/debug/qhca/pinned_pages";
    let end = Instant::now() + Duration::from_secs(10);
    let (mut mapped, mut pinned) = (String::new(), String::new());
    while Instant::now() < end {
        mapped = std::fs::read_to_string(ODP_MAPPED)?.trim().to_owned();
        pinned = std::fs::read_to_string(PINNED)?.trim().to_owned();
        if mapped == "0" && pinned == "0" {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    check_eq!(t, mapped, "0", "{ODP_MAPPED} after kill -9");
    check_eq!(t, pinned, "0", "{PINNED} after kill -9");
    // The mappings go with the address space (the exit's invalidations), before the file is
    // released; a region that the fault worker holds at the release is destroyed, and its PD
    // and context with it, when the worker lets go of it: that can come later.
    let mut counts = super::process::device_object_counts(cfg)?;
    while counts.iter().any(|&(_, n)| n != 0) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
        counts = super::process::device_object_counts(cfg)?;
    }
    for (what, n) in counts {
        check_eq!(t, n, 0, "device {what} alive 10 s after kill -9");
    }
    // The device works on.
    let mut p = pair(cfg, &PairOpts::default())?;
    let dst = p.pd.reg_odp_buf(PAGE, rw())?;
    let mut src = p.pd.reg_mr_buf(64, Access::NONE)?;
    src.write_at(0, &[7; 64]);
    let op = WrOp::Write {
        raddr: dst.addr(),
        rkey: dst.rkey(),
    };
    let wc = run1(&mut p, 1, op, &[src.sge(0, 64)])?;
    check_wc(
        t,
        &wc,
        1,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "write after the kill",
    );
    check_bytes(t, &dst.to_vec(0, 64), &[7; 64], "written after the kill");
    Ok(())
}

/// `__verbs_odp_fault DEVICE`: WRITEs into ODP pages that are dropped again and again
/// (`MADV_DONTNEED`), so that its QPs keep faulting; prints `running`, runs until killed.
pub(super) fn odp_fault_main(dev: &Path) -> qhca::Result<()> {
    let ctx = Arc::new(Context::open(dev)?);
    let pd = Pd::new(&ctx)?;
    let mut p = connected_pair(&ctx, &pd, &PairOpts::default())?;
    let len = 64 * PAGE;
    let dst = pd.reg_odp_buf(len, rw())?;
    let src = pd.reg_odp_buf(len, Access::NONE)?;
    let mut first = true;
    let mut wc = [Wc::default(); 16];
    loop {
        let sges: Vec<[Sge; 1]> = (0..16)
            .map(|i| [src.sge_at(i * 4 * PAGE as u64, 4 * PAGE as u32)])
            .collect();
        let wrs: Vec<SendWr<'_>> = (0..16)
            .map(|i| {
                SendWr::new(
                    i,
                    WrOp::Write {
                        raddr: dst.addr() + i * 4 * PAGE as u64,
                        rkey: dst.rkey(),
                    },
                    &sges[i as usize],
                )
            })
            .collect();
        p.a.post_send(&wrs)?;
        if first {
            super::process::say("running");
            first = false;
        }
        let mut done = 0;
        while done < 16 {
            done += p.cq_a.poll(&mut wc);
        }
        // SAFETY: the region owns the range and hands out no reference into it.
        unsafe {
            libc::madvise(dst.addr() as *mut libc::c_void, len, libc::MADV_DONTNEED);
            libc::madvise(src.addr() as *mut libc::c_void, len, libc::MADV_DONTNEED);
        }
    }
}
