// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Raw system calls for the cases that map memory by hand, store to a doorbell from a child or
//! forbid system calls, wrapped so that the cases themselves contain no `unsafe`. This is the only module of the suite with `unsafe`.

use std::os::fd::RawFd;

use libc::{c_int, c_void};
use nix::errno::Errno;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{fork, ForkResult};
use qhca::Doorbell;

/// An `mmap` made with raw arguments; unmapped on drop.
///
/// # Invariants
///
/// `addr..addr + len` is a mapping created by `mmap` for this value alone, unmapped only in
/// `Drop`.
#[derive(Debug)]
pub struct RawMap {
    addr: *mut c_void,
    len: usize,
}

impl RawMap {
    /// `mmap(NULL, len, prot, flags, fd, offset)`; `fd` -1 with `MAP_ANONYMOUS`.
    pub fn new(
        fd: RawFd,
        len: usize,
        prot: c_int,
        flags: c_int,
        offset: i64,
    ) -> nix::Result<RawMap> {
        // SAFETY: without MAP_FIXED the kernel picks an address that overlaps no existing mapping,
        // so no memory Rust knows about can be replaced or aliased; the new mapping is owned by
        // the returned value alone.
        let addr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, offset) };
        if addr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        // INVARIANT: a fresh mapping of `len` bytes that nothing else refers to.
        Ok(RawMap { addr, len })
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.addr as usize
    }

    /// `mprotect` on the whole mapping.
    pub fn protect(&self, prot: c_int) -> nix::Result<()> {
        // SAFETY: the range is exactly our own mapping (type invariant) and no Rust reference
        // points into it, so changing its protection cannot invalidate a reference.
        Errno::result(unsafe { libc::mprotect(self.addr, self.len, prot) }).map(drop)
    }
}

impl Drop for RawMap {
    fn drop(&mut self) {
        // SAFETY: by the type invariant this is our own mapping, unmapped nowhere else.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}

/// Forks a child that rings `db` with `word` and then `_exit(0)`s, and waits for it: the status
/// tells whether the store faulted (`Signaled(.., SIGBUS, ..)`) or returned (`Exited(.., 0)`).
///
/// The caller must be single-threaded (the suite runs its cases on the main thread and starts
/// no threads), or at least hold no lock the child would need: the child only calls
/// async-signal-safe code.
pub fn store_in_child(db: &Doorbell, word: u64) -> nix::Result<WaitStatus> {
    // SAFETY: after fork the child runs only async-signal-safe code: signal(2), one volatile
    // store (no allocation, no lock), and _exit(2), which skips atexit handlers and the parent's
    // buffered stdout.
    match unsafe { fork() }? {
        ForkResult::Child => {
            // SAFETY: resetting SIGBUS to its default action (Rust's runtime installs a handler
            // for stack-overflow detection) so a fault kills the child with SIGBUS as-is.
            unsafe {
                libc::signal(libc::SIGBUS, libc::SIG_DFL);
                libc::signal(libc::SIGSEGV, libc::SIG_DFL);
            }
            db.ring(word);
            // SAFETY: ends the child at once, without running any of the parent's cleanup.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => waitpid(child, None),
    }
}

/// True if the child was killed by `sig`.
pub fn killed_by(ws: &WaitStatus, sig: nix::sys::signal::Signal) -> bool {
    matches!(ws, WaitStatus::Signaled(_, s, _) if *s == sig)
}

/// Classic BPF, as `linux/filter.h` spells it (libc does not carry these for Linux).
mod bpf {
    /// `BPF_LD | BPF_W | BPF_ABS` (0x00 | 0x00 | 0x20).
    pub const LD_W_ABS: u16 = 0x20;
    /// `BPF_JMP | BPF_JEQ | BPF_K` (0x05 | 0x10 | 0x00).
    pub const JEQ_K: u16 = 0x15;
    pub const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    pub const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
    pub const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    pub const PR_SET_SECCOMP: libc::c_int = 22;
    pub const PR_SET_NO_NEW_PRIVS: libc::c_int = 38;
    pub const SECCOMP_MODE_FILTER: libc::c_ulong = 2;
    #[cfg(target_arch = "x86_64")]
    pub const AUDIT_ARCH: u32 = 0xc000_003e;
    #[cfg(target_arch = "aarch64")]
    pub const AUDIT_ARCH: u32 = 0xc000_00b7;
    /// `struct seccomp_data`: `nr` at 0, `arch` at 4.
    pub const OFF_NR: u32 = 0;
    pub const OFF_ARCH: u32 = 4;

    #[repr(C)]
    #[derive(Clone, Copy)]
    pub struct SockFilter {
        pub code: u16,
        pub jt: u8,
        pub jf: u8,
        pub k: u32,
    }

    #[repr(C)]
    pub struct SockFprog {
        pub len: u16,
        pub filter: *const SockFilter,
    }

    pub const fn stmt(code: u16, k: u32) -> SockFilter {
        SockFilter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }
    pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> SockFilter {
        SockFilter { code, jt, jf, k }
    }
}

/// From here on, any system call of this thread except `exit` and `exit_group` kills the whole
/// process with SIGSYS (seccomp filter, `SECCOMP_RET_KILL_PROCESS`). Used to prove that a data
/// path loop makes no system call: the process then ends with [`exit_now`]'s code, or is killed.
///
/// Irreversible; call it only in a helper process, single-threaded, with stdout flushed.
pub fn forbid_syscalls() -> nix::Result<()> {
    use bpf::*;
    let filter = [
        stmt(LD_W_ABS, OFF_ARCH),
        jump(JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(RET_K, SECCOMP_RET_KILL_PROCESS),
        stmt(LD_W_ABS, OFF_NR),
        jump(JEQ_K, libc::SYS_exit_group as u32, 2, 0),
        jump(JEQ_K, libc::SYS_exit as u32, 1, 0),
        stmt(RET_K, SECCOMP_RET_KILL_PROCESS),
        stmt(RET_K, SECCOMP_RET_ALLOW),
    ];
    let prog = SockFprog {
        len: filter.len() as u16,
        filter: filter.as_ptr(),
    };
    // SAFETY: prctl(PR_SET_NO_NEW_PRIVS) takes only integers.
    Errno::result(unsafe { libc::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
    // SAFETY: `prog` and the filter it points to are live on our stack for the call; the kernel
    // copies the program before returning.
    Errno::result(unsafe {
        libc::prctl(
            PR_SET_SECCOMP,
            SECCOMP_MODE_FILTER,
            std::ptr::from_ref(&prog),
            0,
            0,
        )
    })
    .map(drop)
}

/// `exit_group(code)` straight away: no atexit handlers, no flushing (so no `write`), which is
/// the only way out once [`forbid_syscalls`] is in force.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: exit_group takes an integer and does not return; nothing of ours needs cleanup
    // that the kernel does not do at process exit.
    unsafe {
        libc::syscall(libc::SYS_exit_group, code as libc::c_long);
    }
    unreachable!("exit_group returned")
}

/// Runs `f` in a forked child under [`forbid_syscalls`]; the child exits with `f`'s code.
/// Returns the child's wait status. For the host tests of the mechanism itself.
///
/// The caller must be single-threaded or hold no lock `f` needs (fork copies one thread).
#[cfg(test)]
pub fn run_without_syscalls(f: impl FnOnce() -> i32) -> nix::Result<WaitStatus> {
    // SAFETY: the child runs only `f` (which the caller promises needs no lock another thread
    // held) and then exit_group; it never returns into the parent's code.
    match unsafe { fork() }? {
        ForkResult::Child => {
            if forbid_syscalls().is_err() {
                exit_now(100);
            }
            exit_now(f())
        }
        ForkResult::Parent { child } => waitpid(child, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;
    use std::os::fd::AsRawFd;

    fn scratch_file(tag: &str, len: u64) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("qhca-vmtest-{tag}-{}", std::process::id()));
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(len).unwrap();
        p
    }

    #[test]
    fn store_in_child_tells_a_fault_from_a_store() {
        // A shared mapping of a file stands in for the doorbell page: a store inside the file
        // succeeds, a store past its end raises SIGBUS, as the zapped page does.
        let good = scratch_file("good", 4096);
        let ctx = qhca::Context::open_unchecked(&good).unwrap();
        let db = ctx.map_doorbell().unwrap();
        let ws = store_in_child(&db, 7).unwrap();
        assert!(matches!(ws, WaitStatus::Exited(_, 0)), "{ws:?}");
        assert!(!killed_by(&ws, Signal::SIGBUS));

        let empty = scratch_file("empty", 0);
        let ctx = qhca::Context::open_unchecked(&empty).unwrap();
        let db = ctx.map_doorbell().unwrap();
        let ws = store_in_child(&db, 7).unwrap();
        assert!(killed_by(&ws, Signal::SIGBUS), "{ws:?}");

        let _ = std::fs::remove_file(good);
        let _ = std::fs::remove_file(empty);
    }

    #[test]
    fn raw_mmap_reports_errno_and_unmaps() {
        let null = std::fs::File::open("/dev/null").unwrap();
        // /dev/null opened read-only cannot be mapped shared-writable.
        let r = RawMap::new(
            null.as_raw_fd(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            0,
        );
        assert_eq!(r.unwrap_err(), Errno::EACCES);
        let m = RawMap::new(
            -1,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            0,
        )
        .unwrap();
        assert_eq!(m.addr() % 4096, 0);
        m.protect(libc::PROT_READ).unwrap();
    }

    #[test]
    fn seccomp_catches_a_system_call_and_lets_pure_code_run() {
        // Pure computation and memory access: no system call, the child exits with its code.
        let ws = run_without_syscalls(|| {
            let mut v = [0u64; 64];
            for i in 0..10_000 {
                v[i % 64] = v[(i + 1) % 64].wrapping_add(i as u64);
            }
            i32::from(std::hint::black_box(v[0]) == u64::MAX) + 7
        })
        .unwrap();
        assert_eq!(ws, WaitStatus::Exited(ws.pid().unwrap(), 7), "{ws:?}");
        // One getppid(): killed by SIGSYS.
        let ws = run_without_syscalls(|| {
            // SAFETY: getppid has no arguments and no preconditions.
            unsafe { libc::getppid() };
            0
        })
        .unwrap();
        assert!(killed_by(&ws, Signal::SIGSYS), "{ws:?}");
    }
}
