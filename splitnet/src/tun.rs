// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A TUN interface: created by name, configured (address, MTU, up) with the ioctls `ip`
//! uses, read and written one IP packet at a time.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

/// `TUNSETIFF`: `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// `struct ifreq` with the union members we use.
#[repr(C)]
#[derive(Clone, Copy)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    /// `ifr_flags`, `ifr_mtu`, or the start of `ifr_addr`.
    u: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> io::Result<IfReq> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "bad interface name",
            ));
        }
        let mut r = IfReq {
            name: [0; libc::IFNAMSIZ],
            u: [0; 24],
        };
        r.name[..name.len()].copy_from_slice(name.as_bytes());
        Ok(r)
    }

    fn set_i16(&mut self, v: i16) {
        self.u[..2].copy_from_slice(&v.to_ne_bytes());
    }

    fn i16(&self) -> i16 {
        i16::from_ne_bytes([self.u[0], self.u[1]])
    }

    fn set_i32(&mut self, v: i32) {
        self.u[..4].copy_from_slice(&v.to_ne_bytes());
    }

    /// A `sockaddr_in` for `addr`.
    fn set_inet(&mut self, addr: Ipv4Addr) {
        self.u = [0; 24];
        self.u[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        self.u[4..8].copy_from_slice(&addr.octets());
    }
}

/// Runs one interface ioctl on `fd` with `req`.
fn ifioctl(fd: RawFd, op: libc::c_ulong, req: &mut IfReq, what: &str) -> io::Result<()> {
    // SAFETY: `req` is a valid `struct ifreq`-sized buffer for the call's duration; every
    // request used here reads and writes at most that.
    let r = unsafe { libc::ioctl(fd, op as _, req as *mut IfReq) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

/// One TUN interface (`IFF_TUN | IFF_NO_PI`), non-blocking.
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Creates (or attaches to) the interface `name` in this thread's network namespace.
    pub fn create(name: &str) -> io::Result<Tun> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("open /dev/net/tun: {e}")))?;
        let mut req = IfReq::new(name)?;
        req.set_i16((libc::IFF_TUN | libc::IFF_NO_PI) as i16);
        ifioctl(file.as_raw_fd(), TUNSETIFF, &mut req, "TUNSETIFF")?;
        Ok(Tun {
            file,
            name: name.to_string(),
        })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Sets the MTU.
    pub fn set_mtu(&self, mtu: u32) -> io::Result<()> {
        let s = ctl_socket()?;
        let mut req = IfReq::new(&self.name)?;
        req.set_i32(mtu as i32);
        ifioctl(s.as_raw_fd(), libc::SIOCSIFMTU, &mut req, "SIOCSIFMTU")
    }

    /// Gives it `addr/prefix` and brings it up.
    pub fn configure(&self, addr: Ipv4Addr, prefix: u8) -> io::Result<()> {
        let s = ctl_socket()?;
        let fd = s.as_raw_fd();
        let mut req = IfReq::new(&self.name)?;
        req.set_inet(addr);
        ifioctl(fd, libc::SIOCSIFADDR, &mut req, "SIOCSIFADDR")?;
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix.min(32)))
        };
        req.set_inet(Ipv4Addr::from(mask));
        ifioctl(fd, libc::SIOCSIFNETMASK, &mut req, "SIOCSIFNETMASK")?;
        self.up()
    }

    /// Brings it up.
    pub fn up(&self) -> io::Result<()> {
        let s = ctl_socket()?;
        let mut req = IfReq::new(&self.name)?;
        ifioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req, "SIOCGIFFLAGS")?;
        let flags = req.i16() | (libc::IFF_UP | libc::IFF_RUNNING) as i16;
        req.set_i16(flags);
        ifioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &mut req, "SIOCSIFFLAGS")
    }

    /// Reads one packet; `Ok(None)` when none is queued.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match self.file.read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes one packet (the kernel takes it whole or drops it).
    pub fn send(&mut self, pkt: &[u8]) -> io::Result<()> {
        match self.file.write(pkt) {
            Ok(_) => Ok(()),
            // The interface is down or its queue full: a NIC drops too.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EIO) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The fd, for poll(2).
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// A datagram socket for interface ioctls, in this thread's network namespace.
fn ctl_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned by the returned value.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Moves this thread into the network namespace at `path` (e.g. `/run/netns/NAME`).
pub fn enter_netns(path: &str) -> io::Result<()> {
    let f = File::open(path).map_err(|e| io::Error::new(e.kind(), format!("open {path}: {e}")))?;
    // SAFETY: setns(2) on an fd we hold open; it changes only this thread's namespace.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setns {path}: {e}")));
    }
    Ok(())
}
