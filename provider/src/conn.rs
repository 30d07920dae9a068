// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Connection setup over TCP, as perftest and ibv_rc_pingpong do: each side sends what the other
//! needs to reach it (QP number, first PSN, a region's key, address and length), then both move
//! their QPs to RTS.
//!
//! The record is 56 bytes, little-endian: magic `"QHC2"`, qpn, psn, rkey, addr (u64), len
//! (u64), then the sender's GID (16 bytes, as on the wire; all zero: none named), its index in
//! the sender's GID table (u8) and 7 zero bytes. Each side passes its own record and the peer's
//! to [`crate::Qp::connect`]. (Version 1, magic `"QHCI"`, was the first 32 bytes: a peer that
//! sends one is told so.)
//!
//! Every helper waits at most the timeout it is given (or that [`set_timeouts`] put on the
//! stream), and reports a peer that closed the connection as [`Error::PeerClosed`], not as an
//! I/O error.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::ah::Gid;
use crate::error::{errno_of, Error, Result};

/// Bytes of an encoded [`ConnInfo`].
pub const CONN_INFO_LEN: usize = 56;
/// First four bytes of a record.
pub const CONN_MAGIC: [u8; 4] = *b"QHC2";
/// First four bytes of a record of the first version (no GID).
const CONN_MAGIC_V1: [u8; 4] = *b"QHCI";
/// Bytes of a record of the first version.
const CONN_INFO_V1_LEN: usize = 32;

/// What one side tells the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnInfo {
    /// The sender's QP number.
    pub qpn: u32,
    /// The PSN of the sender's first outgoing packet (24 bits): its `sq_psn`, and the
    /// receiver's `rq_psn`.
    pub psn: u32,
    /// The R_Key of the region the peer may access.
    pub rkey: u32,
    /// Its address.
    pub addr: u64,
    /// Its length.
    pub len: u64,
    /// The GID the sender's QP sends from, what the receiver's address vector names (all
    /// zero: none named, the QPs talk through their port's GID 0; see
    /// [`crate::Qp::connect`]). On UD, where the sender's datagrams come from.
    pub gid: Gid,
    /// That GID's index in the sender's GID table (its `sgid_index`).
    pub gid_index: u8,
}

impl ConnInfo {
    /// The same record lending the peer the region `mr` (its R_Key, address and length).
    pub fn with_region(self, mr: &crate::Mr<'_>) -> ConnInfo {
        ConnInfo {
            rkey: mr.rkey(),
            addr: mr.addr(),
            len: mr.len() as u64,
            ..self
        }
    }

    /// The same record naming the GID at `index` of the sender's port (see
    /// [`crate::Context::query_port`]): the peer's QP then sends to `gid`, and this side's from
    /// entry `index`.
    pub fn with_gid(self, gid: Gid, index: u8) -> ConnInfo {
        ConnInfo {
            gid,
            gid_index: index,
            ..self
        }
    }

    /// The wire record.
    pub fn encode(&self) -> [u8; CONN_INFO_LEN] {
        let mut b = [0u8; CONN_INFO_LEN];
        b[0..4].copy_from_slice(&CONN_MAGIC);
        b[4..8].copy_from_slice(&self.qpn.to_le_bytes());
        b[8..12].copy_from_slice(&self.psn.to_le_bytes());
        b[12..16].copy_from_slice(&self.rkey.to_le_bytes());
        b[16..24].copy_from_slice(&self.addr.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..48].copy_from_slice(&self.gid.raw);
        b[48] = self.gid_index;
        b
    }

    /// Parses a wire record; [`Error::Protocol`] if the magic, the PSN or the reserved bytes
    /// are wrong.
    pub fn decode(b: &[u8; CONN_INFO_LEN]) -> Result<ConnInfo> {
        if b[0..4] == CONN_MAGIC_V1 {
            return Err(Error::Protocol {
                what: "a record of the first version (32 bytes, no GID): the peer runs an older \
                       qhca"
                    .into(),
            });
        }
        if b[0..4] != CONN_MAGIC {
            return Err(Error::Protocol {
                what: format!("bad magic {:02x?}", &b[0..4]),
            });
        }
        if b[49..].iter().any(|&x| x != 0) {
            return Err(Error::Protocol {
                what: format!("reserved bytes {:02x?} not zero", &b[49..]),
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let info = ConnInfo {
            qpn: u32_at(4),
            psn: u32_at(8),
            rkey: u32_at(12),
            addr: u64_at(16),
            len: u64_at(24),
            gid: Gid {
                raw: b[32..48].try_into().expect("16 bytes"),
            },
            gid_index: b[48],
        };
        if info.psn > 0xff_ffff {
            return Err(Error::Protocol {
                what: format!("PSN {:#x} wider than 24 bits", info.psn),
            });
        }
        Ok(info)
    }
}

/// How long the helpers wait for the peer unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Maps an I/O error of `op` to ours: a timeout is [`Error::Timeout`], a peer that closed the
/// connection [`Error::PeerClosed`], anything else [`Error::Sys`].
fn net_err(op: &'static str, timeout: Duration) -> impl Fn(std::io::Error) -> Error {
    use std::io::ErrorKind::*;
    move |e| match e.kind() {
        WouldBlock | TimedOut => Error::Timeout {
            what: op,
            after: timeout,
        },
        UnexpectedEof | ConnectionReset | BrokenPipe | ConnectionAborted => {
            Error::PeerClosed { during: op }
        }
        _ => Error::Sys {
            op,
            source: errno_of(&e),
        },
    }
}

/// Gives every later read and write on `stream` a limit of `timeout`, and turns Nagle off
/// (records are small and each waits for an answer).
pub fn set_timeouts(stream: &TcpStream, timeout: Duration) -> Result<()> {
    let sys = |op| {
        move |e: std::io::Error| Error::Sys {
            op,
            source: errno_of(&e),
        }
    };
    let t = Some(timeout.max(Duration::from_millis(1)));
    stream.set_read_timeout(t).map_err(sys("set SO_RCVTIMEO"))?;
    stream
        .set_write_timeout(t)
        .map_err(sys("set SO_SNDTIMEO"))?;
    stream.set_nodelay(true).map_err(sys("set TCP_NODELAY"))
}

/// The timeout set on `stream` ([`set_timeouts`]), for error messages.
fn stream_timeout(stream: &TcpStream) -> Duration {
    stream
        .read_timeout()
        .ok()
        .flatten()
        .unwrap_or(Duration::ZERO)
}

/// Sends `local` and receives the peer's record on an established stream, each within the
/// stream's timeouts ([`set_timeouts`]; none set: it may block for ever).
///
/// Fails with [`Error::Timeout`], [`Error::PeerClosed`], [`Error::Protocol`] (not a record) or
/// [`Error::Sys`].
pub fn exchange(stream: &mut TcpStream, local: &ConnInfo) -> Result<ConnInfo> {
    let t = stream_timeout(stream);
    stream
        .write_all(&local.encode())
        .map_err(net_err("send connection record", t))?;
    let mut b = [0u8; CONN_INFO_LEN];
    // The first version's length first: a peer that sends one is told so, not waited for.
    let (head, tail) = b.split_at_mut(CONN_INFO_V1_LEN);
    stream
        .read_exact(head)
        .map_err(net_err("receive connection record", t))?;
    if head[0..4] != CONN_MAGIC_V1 {
        stream
            .read_exact(tail)
            .map_err(net_err("receive connection record", t))?;
    }
    ConnInfo::decode(&b)
}

/// Server side: waits up to `timeout` for one connection on `listener`; the returned stream
/// has that timeout on every read and write ([`set_timeouts`]).
pub fn accept(listener: &TcpListener, timeout: Duration) -> Result<TcpStream> {
    let mut pfd = [libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if crate::context::poll_fds(&mut pfd, Some(timeout), "poll listener")? == 0 {
        return Err(Error::Timeout {
            what: "accept a connection",
            after: timeout,
        });
    }
    let (s, _) = listener.accept().map_err(net_err("accept", timeout))?;
    // The accepted socket inherits no O_NONBLOCK from a blocking listener; the timeouts bound
    // every later read and write.
    set_timeouts(&s, timeout)?;
    Ok(s)
}

/// Server side: [`accept`], then [`exchange`] records with the same timeout, which stays set
/// on the returned stream (for [`sync`]).
pub fn accept_exchange(
    listener: &TcpListener,
    local: &ConnInfo,
    timeout: Duration,
) -> Result<(TcpStream, ConnInfo)> {
    let mut s = accept(listener, timeout)?;
    let remote = exchange(&mut s, local)?;
    Ok((s, remote))
}

/// Client side: connects to `addr` (each address it resolves to in turn) within `timeout`;
/// the returned stream has that timeout on every read and write ([`set_timeouts`]).
pub fn connect(addr: impl ToSocketAddrs, timeout: Duration) -> Result<TcpStream> {
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .map_err(net_err("resolve the peer's address", timeout))?
        .collect();
    let mut last = Error::Invalid {
        what: "the peer's address resolves to nothing".into(),
    };
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                set_timeouts(&s, timeout)?;
                return Ok(s);
            }
            Err(e) => last = net_err("connect", timeout)(e),
        }
    }
    Err(last)
}

/// Client side: [`connect`], then [`exchange`] records with the same timeout, which stays set
/// on the returned stream (for [`sync`]).
pub fn connect_exchange(
    addr: impl ToSocketAddrs,
    local: &ConnInfo,
    timeout: Duration,
) -> Result<(TcpStream, ConnInfo)> {
    let mut s = connect(addr, timeout)?;
    let remote = exchange(&mut s, local)?;
    Ok((s, remote))
}

/// A barrier over the stream: both sides send one byte and wait for the other's, within the
/// stream's timeouts. A peer that exited is [`Error::PeerClosed`].
pub fn sync(stream: &mut TcpStream) -> Result<()> {
    let t = stream_timeout(stream);
    stream.write_all(b"S").map_err(net_err("send sync", t))?;
    let mut b = [0u8; 1];
    stream
        .read_exact(&mut b)
        .map_err(net_err("receive sync", t))?;
    if b != *b"S" {
        return Err(Error::Protocol {
            what: format!("sync byte {:#04x}", b[0]),
        });
    }
    Ok(())
}

/// A random 24-bit PSN, as ibv_rc_pingpong picks one (from the clock and the pid: no need for a
/// cryptographic source).
pub fn random_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (t ^ std::process::id().rotate_left(12)) & 0xff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: ConnInfo = ConnInfo {
        qpn: 0x12_3456,
        psn: 0xab_cdef,
        rkey: 0x0102_0304,
        addr: 0x7fff_0000_1000,
        len: 1 << 20,
        gid: Gid {
            raw: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 7, 0, 3],
        },
        gid_index: 2,
    };

    #[test]
    fn encodes_byte_for_byte_and_back() {
        let b = INFO.encode();
        let mut want = Vec::from(*b"QHC2");
        want.extend(0x12_3456u32.to_le_bytes());
        want.extend(0xab_cdefu32.to_le_bytes());
        want.extend(0x0102_0304u32.to_le_bytes());
        want.extend(0x7fff_0000_1000u64.to_le_bytes());
        want.extend((1u64 << 20).to_le_bytes());
        want.extend([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 7, 0, 3]);
        want.extend([2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b[..], want[..]);
        assert_eq!(ConnInfo::decode(&b).unwrap(), INFO);
        // No GID named: all zero.
        let plain = ConnInfo {
            gid: Gid::default(),
            gid_index: 0,
            ..INFO
        };
        assert_eq!(plain.encode()[32..], [0; 24]);
        assert_eq!(
            plain.with_gid(INFO.gid, 2),
            INFO,
            "with_gid sets the GID and its index"
        );
    }

    #[test]
    fn rejects_bad_records() {
        let mut b = INFO.encode();
        b[0] = b'X';
        assert!(matches!(ConnInfo::decode(&b), Err(Error::Protocol { .. })));
        let mut b = INFO.encode();
        b[0..4].copy_from_slice(b"QHCI");
        assert!(ConnInfo::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("first version"));
        let mut b = INFO.encode();
        b[55] = 1;
        assert!(ConnInfo::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("reserved"));
        let mut b = INFO.encode();
        b[11] = 1; // PSN 0x01abcdef
        assert!(ConnInfo::decode(&b)
            .unwrap_err()
            .to_string()
            .contains("24 bits"));
        assert!(random_psn() <= 0xff_ffff);
    }

    #[test]
    fn exchanges_over_loopback_tcp() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server_info = ConnInfo { qpn: 7, ..INFO };
        let t = std::thread::spawn(move || {
            let (mut s, remote) = accept_exchange(&l, &server_info, DEFAULT_TIMEOUT).unwrap();
            sync(&mut s).unwrap();
            remote
        });
        let (mut s, remote) = connect_exchange(addr, &INFO, DEFAULT_TIMEOUT).unwrap();
        sync(&mut s).unwrap();
        assert_eq!(remote, server_info);
        assert_eq!(t.join().unwrap(), INFO);
    }

    /// The helpers blocked for ever, and reported a closed peer as an I/O error (EIO).
    #[test]
    fn a_silent_peer_times_out_and_a_closed_one_is_named() {
        let t = Duration::from_millis(200);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // Nobody connects.
        let start = std::time::Instant::now();
        assert!(matches!(
            accept_exchange(&l, &INFO, t),
            Err(Error::Timeout {
                what: "accept a connection",
                ..
            })
        ));
        assert!(start.elapsed() < Duration::from_secs(5));
        // A peer that connects and says nothing.
        let silent = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_millis(600));
            drop(s);
            l
        });
        let e = connect_exchange(addr, &INFO, t).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Timeout {
                    what: "receive connection record",
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.errno(), Some(crate::Errno::ETIMEDOUT));
        let l = silent.join().unwrap();
        // A peer that closes at once.
        let closer = std::thread::spawn(move || drop(l.accept().unwrap()));
        let e = connect_exchange(addr, &INFO, Duration::from_secs(5)).unwrap_err();
        closer.join().unwrap();
        assert!(matches!(e, Error::PeerClosed { .. }), "{e}");
        assert!(e.to_string().contains("peer closed"), "{e}");
    }
}
