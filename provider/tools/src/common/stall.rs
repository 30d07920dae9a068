// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A FUSE file system that never answers a read: one file, `f`, whose pages cannot be had.
//!
//! The kernel's page fault on a mapping of `f` (the driver's HMM fault on behalf of a device
//! page fault included) waits for the daemon's answer, which never comes, until the daemon's
//! `/dev/fuse` is closed (the connection is then aborted and the read fails). That is the
//! hostile process of `qhca-odp-bench --neighbour stalled` (and so of the VM suite's
//! fault-service cases): it chooses how long its own faults take. Needs root (mount).
//!
//! Only what that needs of the protocol (`include/uapi/linux/fuse.h`, 7.31): INIT, LOOKUP,
//! GETATTR, OPEN, FLUSH, RELEASE; READ is recorded and left unanswered; FORGET and INTERRUPT get
//! no answer; everything else is answered `ENOSYS`.

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver};

const LOOKUP: u32 = 1;
const FORGET: u32 = 2;
const GETATTR: u32 = 3;
const OPEN: u32 = 14;
const READ: u32 = 15;
const RELEASE: u32 = 18;
const FLUSH: u32 = 25;
const INIT: u32 = 26;
const INTERRUPT: u32 = 36;
const BATCH_FORGET: u32 = 42;

const ROOT: u64 = 1;
const FILE: u64 = 2;
/// The file's size.
pub const FILE_LEN: u64 = 64 << 10;

/// `struct fuse_in_header`: 40 bytes.
const IN_HEADER: usize = 40;

/// A mounted stalling file system; unmounted (lazily) when dropped. The daemon runs on a thread
/// of its own for as long as the process lives (or until the mount goes).
pub struct Stall {
    dir: PathBuf,
    /// Each READ the daemon received (and left unanswered): its offset.
    pub reads: Receiver<u64>,
}

impl Stall {
    /// Mounts it at a fresh directory under `/tmp`.
    pub fn mount() -> std::io::Result<Stall> {
        let dir = dir_of(std::process::id());
        std::fs::create_dir_all(&dir)?;
        let dev = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")?;
        let opts = format!("fd={},rootmode=40000,user_id=0,group_id=0", dev.as_raw_fd());
        let c = |s: &[u8]| CString::new(s).map_err(std::io::Error::other);
        let (src, target, fs, data) = (
            c(b"qhca-stall")?,
            c(dir.as_os_str().as_bytes())?,
            c(b"fuse")?,
            c(opts.as_bytes())?,
        );
        // SAFETY: NUL-terminated strings that live across the call; the kernel copies them.
        let r = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fs.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (tx, reads) = channel();
        std::thread::spawn(move || serve(dev, &tx));
        Ok(Stall { dir, reads })
    }

    /// The one file's path.
    pub fn file(&self) -> PathBuf {
        self.dir.join("f")
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        unmount(&self.dir);
    }
}

/// Unmounts (lazily) and removes a stalling file system's directory: its own at drop, or one
/// left behind by a process that was killed (`/tmp/qhca-fuse-PID`).
pub fn unmount(dir: &Path) {
    if let Ok(target) = CString::new(dir.as_os_str().as_bytes()) {
        // SAFETY: a NUL-terminated path that lives across the call.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
    let _ = std::fs::remove_dir(dir);
}

/// The directory a process `pid` mounts its stalling file system at.
pub fn dir_of(pid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/qhca-fuse-{pid}"))
}

fn put32(b: &mut Vec<u8>, v: u32) {
    b.extend_from_slice(&v.to_ne_bytes());
}

fn put64(b: &mut Vec<u8>, v: u64) {
    b.extend_from_slice(&v.to_ne_bytes());
}

/// `struct fuse_attr` of `node`.
fn attr(b: &mut Vec<u8>, node: u64) {
    let (mode, size, nlink) = if node == ROOT {
        (0o040755, 0, 2)
    } else {
        (0o100644, FILE_LEN, 1)
    };
    put64(b, node); // ino
    put64(b, size);
    put64(b, size.div_ceil(512)); // blocks
    for _ in 0..3 {
        put64(b, 0); // atime, mtime, ctime
    }
    for _ in 0..3 {
        put32(b, 0); // their nanoseconds
    }
    put32(b, mode);
    put32(b, nlink);
    put32(b, 0); // uid
    put32(b, 0); // gid
    put32(b, 0); // rdev
    put32(b, 4096); // blksize
    put32(b, 0); // flags
}

/// Answers request `unique` with `error` (a negative errno, or 0) and `body`.
fn reply(dev: &mut File, unique: u64, error: i32, body: &[u8]) -> std::io::Result<()> {
    let mut b = Vec::with_capacity(16 + body.len());
    put32(&mut b, (16 + body.len()) as u32);
    put32(&mut b, error as u32);
    put64(&mut b, unique);
    b.extend_from_slice(body);
    dev.write_all(&b)
}

/// The daemon: until the connection goes.
fn serve(mut dev: File, reads: &std::sync::mpsc::Sender<u64>) {
    let mut buf = vec![0u8; (1 << 20) + 4096];
    loop {
        let n = match dev.read(&mut buf) {
            Ok(n) => n,
            // ENOENT: a request was interrupted before we read it; try again.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
            Err(_) => return,
        };
        if n < IN_HEADER {
            return;
        }
        let u32_at = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap_or_default());
        let u64_at = |o: usize| u64::from_ne_bytes(buf[o..o + 8].try_into().unwrap_or_default());
        let (opcode, unique, node) = (u32_at(4), u64_at(8), u64_at(16));
        let arg = &buf[IN_HEADER..n];
        let mut body = Vec::new();
        let res = match opcode {
            INIT => {
                // struct fuse_init_out (64 bytes): 7.31, no flags, 128 KiB writes.
                put32(&mut body, 7);
                put32(&mut body, 31);
                put32(&mut body, 0); // max_readahead
                put32(&mut body, 0); // flags
                body.extend_from_slice(&1u16.to_ne_bytes()); // max_background
                body.extend_from_slice(&1u16.to_ne_bytes()); // congestion_threshold
                put32(&mut body, 128 << 10); // max_write
                put32(&mut body, 1); // time_gran
                body.extend_from_slice(&32u16.to_ne_bytes()); // max_pages
                body.resize(64, 0);
                reply(&mut dev, unique, 0, &body)
            }
            LOOKUP if node == ROOT && arg.starts_with(b"f\0") => {
                // struct fuse_entry_out: nodeid, generation, entry and attr validity, attr.
                put64(&mut body, FILE);
                put64(&mut body, 1);
                put64(&mut body, 3600);
                put64(&mut body, 3600);
                put32(&mut body, 0);
                put32(&mut body, 0);
                attr(&mut body, FILE);
                reply(&mut dev, unique, 0, &body)
            }
            LOOKUP => reply(&mut dev, unique, -libc::ENOENT, &[]),
            GETATTR => {
                // struct fuse_attr_out: validity, then attr.
                put64(&mut body, 3600);
                put32(&mut body, 0);
                put32(&mut body, 0);
                attr(&mut body, node);
                reply(&mut dev, unique, 0, &body)
            }
            OPEN => {
                // struct fuse_open_out: fh, flags (none: the page cache, so mmap works).
                put64(&mut body, 1);
                put32(&mut body, 0);
                put32(&mut body, 0);
                reply(&mut dev, unique, 0, &body)
            }
            READ => {
                // struct fuse_read_in: fh, offset, ...: never answered.
                let off = if arg.len() >= 16 {
                    u64::from_ne_bytes(arg[8..16].try_into().unwrap_or_default())
                } else {
                    0
                };
                let _ = reads.send(off);
                Ok(())
            }
            FLUSH | RELEASE => reply(&mut dev, unique, 0, &[]),
            FORGET | BATCH_FORGET | INTERRUPT => Ok(()),
            _ => reply(&mut dev, unique, -libc::ENOSYS, &[]),
        };
        if res.is_err() {
            // ENOENT: the request was interrupted meanwhile; anything else ends the daemon.
            if !matches!(res, Err(ref e) if e.raw_os_error() == Some(libc::ENOENT)) {
                return;
            }
        }
    }
}

/// True if the kernel has FUSE.
pub fn available() -> bool {
    Path::new("/dev/fuse").exists()
}
