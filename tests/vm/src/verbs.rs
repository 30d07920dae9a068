// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The verbs cases: PDs, MRs, CQs and RC QPs on the real device, every opcode byte for byte,
//! the protection and RNR error paths, isolation between processes, cleanup after kill -9, a
//! data path without system calls, the QP state machine's checks, and on-demand paging (`odp`),
//! watched regions and the registration cache, memory windows (`mw`), unreliable datagram
//! (`ud`), the port and its GID table (`port`).
//!
//! They always run (see [`crate::cases::all`]); the helper processes they start are this
//! binary's `__verbs_*` subcommands ([`helper_main`]).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use qhca::{
    Access, AsyncEvent, ConnInfo, ConnOpts, Context, Cq, DbType, DbWord, MrBuf, Pd, PostReason, Qp,
    QpAttr, QpCaps, QpState, RecvWr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOp,
};

mod data;
mod lifecycle;
pub(crate) mod limits;
mod mw;
mod odp;
mod odp_changes;
pub(crate) mod odp_stall;
mod odp_storm;
mod port;
pub(crate) mod process;
mod protection;
mod rcache;
mod srq;
mod ud;
pub(crate) mod uverbs;
mod watch;

pub use process::helper_main;

use crate::harness::{Case, CaseResult, Fail, T};
use crate::system::{self, Config};
use crate::{bail, check, check_eq, check_errno, fail, require};

/// How long a completion may take (TCG is slow).
const WC_TIMEOUT: Duration = Duration::from_secs(20);
/// How long to watch a CQ to conclude that nothing arrives.
const QUIET: Duration = Duration::from_millis(300);
/// Guard bytes around every target, which must stay untouched.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xee;

/// The verbs cases, in order.
pub fn cases() -> Vec<Case<Config>> {
    macro_rules! cases {
        ($($m:ident::$name:ident),* $(,)?) => {
            vec![$(Case { name: stringify!($name), run: $m::$name }),*]
        };
    }
    cases![
        lifecycle::verbs_objects,
        data::verbs_send,
        data::verbs_send_imm,
        data::verbs_rdma_write,
        data::verbs_write_imm,
        data::verbs_rdma_read,
        data::verbs_atomics,
        data::verbs_multi_sge,
        data::verbs_inline,
        data::verbs_larger_than_mtu,
        protection::verbs_bad_rkey_flushes,
        protection::verbs_wrong_rights,
        protection::verbs_out_of_bounds_by_one,
        protection::verbs_mr_of_another_pd,
        protection::verbs_rnr_retry_infinite,
        protection::verbs_rnr_retry_zero,
        protection::verbs_refused_dma_is_an_error_completion,
        lifecycle::verbs_post_errors_and_unsignaled,
        lifecycle::verbs_cq_event,
        lifecycle::verbs_cq_resize,
        lifecycle::verbs_invalid_transitions,
        lifecycle::verbs_stale_cqes_cleaned,
        lifecycle::verbs_async_qp_fatal,
        lifecycle::verbs_default_rnr_is_finite,
        lifecycle::verbs_connect_sets_rd_atomic_depths,
        process::verbs_doorbell_isolation,
        process::verbs_zero_syscalls,
        process::verbs_kill9_frees_everything,
        process::verbs_example_two_process,
        process::verbs_disassociated_context_fails_fast,
        odp::verbs_odp_registers_nothing_pinned,
        odp::verbs_odp_bogus_fault_events,
        odp::verbs_odp_rdma_write,
        odp::verbs_odp_rdma_read,
        odp::verbs_odp_send_recv,
        odp::verbs_odp_atomics,
        odp_changes::verbs_odp_madvise_refaults,
        odp_changes::verbs_odp_munmap_then_error,
        odp_changes::verbs_odp_responder_faults_rnr,
        odp_changes::verbs_odp_implicit,
        odp_changes::verbs_odp_fork_cow,
        odp_changes::verbs_odp_advise_prefetch,
        odp_changes::verbs_odp_kill_while_faulting,
        odp_storm::verbs_odp_invalidate_last_chunk,
        odp_storm::verbs_odp_storm_writes,
        odp_storm::verbs_odp_storm_reads_atomics,
        odp_storm::verbs_odp_storm_threads,
        odp_storm::verbs_odp_storm_fork_munmap,
        odp_stall::verbs_odp_stalled_fault_delays_no_one,
        limits::verbs_limits_per_user,
        watch::verbs_watch_revokes_on_munmap,
        watch::verbs_watch_revokes_only_the_pages_that_went,
        rcache::verbs_rcache_hits_and_misses,
        rcache::verbs_rcache_reuse_after_free,
        rcache::verbs_rcache_changes_revoke,
        rcache::verbs_rcache_eviction_spares_in_use,
        rcache::verbs_rcache_stress,
        rcache::verbs_rcache_on_demand,
        rcache::verbs_rcache_process_gone,
        mw::verbs_mw_bounds,
        mw::verbs_mw_rebind_and_invalidate,
        mw::verbs_mw_send_with_inv,
        mw::verbs_mw_refused_binds,
        mw::verbs_mw_dereg_with_window_bound,
        mw::verbs_mw_zero_syscalls,
        ud::verbs_ud_datagrams,
        ud::verbs_ud_drops,
        ud::verbs_ud_many_to_one,
        ud::verbs_ud_one_to_many,
        ud::verbs_ud_ah_checks,
        srq::verbs_srq_shared_by_rc_and_ud,
        port::verbs_port_query,
        port::verbs_port_addr_tool,
        port::verbs_port_rc_unreachable,
        port::verbs_port_rc_ipv4_gids,
        port::verbs_port_tools_gid_index,
    ]
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

/// How a [`Pair`] is connected.
#[derive(Clone, Copy, Debug)]
struct PairOpts {
    caps: QpCaps,
    conn: ConnOpts,
}

impl Default for PairOpts {
    fn default() -> Self {
        PairOpts {
            caps: QpCaps {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_sge: 4,
                max_inline: 128,
            },
            conn: ConnOpts {
                access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
                path_mtu: 10, // 1024: messages of a few KiB are several packets
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                min_rnr_timer: 1,
                ..ConnOpts::default()
            },
        }
    }
}

/// Two RC QPs on one context, connected to each other over the device's loopback wire: `a`
/// (requester in most cases) completes on `cq_a`, `b` on `cq_b`.
struct Pair {
    a: Qp,
    b: Qp,
    cq_a: Cq,
    cq_b: Cq,
    pd: Pd,
    ctx: Arc<Context>,
}

const PSN_A: u32 = 0x00_1000;
const PSN_B: u32 = 0xff_fff0; // wraps within the first messages

#[track_caller]
fn pair(cfg: &Config, o: &PairOpts) -> Result<Pair, Fail> {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    pair_in(&ctx, &pd, o)
}

#[track_caller]
fn pair_in(ctx: &Arc<Context>, pd: &Pd, o: &PairOpts) -> Result<Pair, Fail> {
    Ok(connected_pair(ctx, pd, o)?)
}

/// [`pair_in`] for the helper processes, which report the provider's errors as they are.
fn connected_pair(ctx: &Arc<Context>, pd: &Pd, o: &PairOpts) -> qhca::Result<Pair> {
    let cq_a = Cq::new(ctx, 256, None)?;
    let cq_b = Cq::new(ctx, 256, None)?;
    let a = Qp::new(pd, &cq_a, &cq_a, &o.caps)?;
    let b = Qp::new(pd, &cq_b, &cq_b, &o.caps)?;
    connect(&a, PSN_A, b.qpn(), PSN_B, &o.conn)?;
    connect(&b, PSN_B, a.qpn(), PSN_A, &o.conn)?;
    Ok(Pair {
        a,
        b,
        cq_a,
        cq_b,
        pd: pd.clone(),
        ctx: ctx.clone(),
    })
}

/// Connects `qp` (first PSN `psn`) to the QP `peer` (first PSN `peer_psn`).
fn connect(qp: &Qp, psn: u32, peer: u32, peer_psn: u32, o: &ConnOpts) -> qhca::Result<()> {
    let remote = ConnInfo {
        qpn: peer,
        psn: peer_psn,
        ..ConnInfo::default()
    };
    qp.connect(&qp.conn_info(psn), &remote, o)
}

/// Starts this binary's helper subcommand `cmd` on `dev` (see [`helper_main`]) and waits for
/// its first line, which must be `running`.
#[track_caller]
fn start_running_helper(cmd: &str, dev: &Path) -> Result<Child, Fail> {
    let mut c = Command::new("/proc/self/exe");
    c.arg(cmd).arg(dev);
    spawn_until_says(c, "running", cmd)
}

/// Spawns `cmd` with its stdout piped and waits for its first line, which must be `want` (else
/// it is killed and reaped, and the failure names it `who`).
#[track_caller]
pub(super) fn spawn_until_says(mut cmd: Command, want: &str, who: &str) -> Result<Child, Fail> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| fail_msg(format!("{who}: {e}")))?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| fail_msg("no stdout".into()))?;
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line)?;
    if line.trim() != want {
        let _ = child.kill();
        let _ = child.wait();
        return Err(fail_msg(format!("{who} said {line:?}")));
    }
    Ok(child)
}

/// Waits for one completion.
#[track_caller]
fn wait_wc(cq: &mut Cq) -> Result<Wc, Fail> {
    let at = std::panic::Location::caller();
    let end = Instant::now() + WC_TIMEOUT;
    let mut wc = [Wc::default(); 1];
    loop {
        if cq.poll(&mut wc) == 1 {
            return Ok(wc[0]);
        }
        if Instant::now() > end {
            return Err(Fail::new(
                at.file(),
                at.line(),
                format!("no completion on CQ {} within {WC_TIMEOUT:?}", cq.cqn()),
            ));
        }
        std::thread::yield_now();
    }
}

/// Polls for [`QUIET`]; returns what arrived (nothing, if all is well).
fn quiet(cq: &mut Cq) -> Vec<Wc> {
    let end = Instant::now() + QUIET;
    let mut got = Vec::new();
    let mut wc = [Wc::default(); 8];
    while Instant::now() < end {
        let n = cq.poll(&mut wc);
        got.extend_from_slice(&wc[..n]);
        std::thread::sleep(Duration::from_millis(5));
    }
    got
}

/// A test pattern: different for every `seed` and offset.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// A region of `len` bytes with [`GUARD`] bytes of [`GUARD_BYTE`] on both sides; the payload is
/// at [`GUARD`].
#[track_caller]
fn guarded(pd: &Pd, len: usize, access: Access) -> Result<MrBuf, Fail> {
    let mut mr = pd.reg_mr_buf(len + 2 * GUARD, access)?;
    mr.fill(0, mr.len(), GUARD_BYTE);
    Ok(mr)
}

/// Checks that the payload is `want` and both guards are untouched.
fn check_guarded(t: &mut T, mr: &MrBuf, want: &[u8], what: &str) {
    let got = mr.to_vec(GUARD, want.len());
    if let Some(i) = (0..want.len()).find(|&i| got[i] != want[i]) {
        fail!(
            t,
            "{what}: byte {i} of {} is {:#04x}, expected {:#04x}",
            want.len(),
            got[i],
            want[i]
        );
    } else {
        check!(t, true);
    }
    let before = mr.to_vec(0, GUARD);
    let after = mr.to_vec(GUARD + want.len(), GUARD);
    check!(
        t,
        before.iter().chain(&after).all(|&b| b == GUARD_BYTE),
        "{what}: memory around the target was written"
    );
}

/// Checks a completion's status, opcode and wr_id.
fn check_wc(t: &mut T, wc: &Wc, wr_id: u64, status: WcStatus, opcode: WcOpcode, what: &str) {
    check_eq!(t, wc.status, status, "{what}: status ({wc:?})");
    check_eq!(t, wc.wr_id, wr_id, "{what}: wr_id");
    if status == WcStatus::Success {
        check_eq!(t, wc.opcode, opcode, "{what}: opcode");
    }
}

#[track_caller]
fn fail_msg(msg: String) -> Fail {
    let at = std::panic::Location::caller();
    Fail::new(at.file(), at.line(), msg)
}

/// An anonymous private mapping of our own, touched only through raw pointers (so that the
/// device may write it under an `unsafe` ODP registration: no Rust reference points into it).
struct Map {
    ptr: *mut u8,
    len: usize,
}

impl Map {
    fn new(len: usize) -> Result<Map, Fail> {
        // SAFETY: a fresh anonymous mapping at an address the kernel chooses replaces nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(fail_msg(format!("mmap: {}", Errno::last())));
        }
        Ok(Map { ptr: p.cast(), len })
    }

    fn addr(&self) -> u64 {
        self.ptr as u64
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        // SAFETY: in bounds of our mapping; volatile byte loads, so that no reference to the
        // memory exists while the device may write it.
        (0..len)
            .map(|i| unsafe { std::ptr::read_volatile(self.ptr.add(off + i)) })
            .collect()
    }

    fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        for (i, &b) in data.iter().enumerate() {
            // SAFETY: as for `read`.
            unsafe { std::ptr::write_volatile(self.ptr.add(off + i), b) }
        }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our own mapping; nothing refers into it (only raw pointers were handed out).
        // (An ODP region over it may live on: the device loses the pages first.)
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
