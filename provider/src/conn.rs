// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Connection setup over TCP, as perftest and ibv_rc_pingpong do: each side sends what the other
//! needs to reach it (QP number, first PSN, a region's key, address and length), then both move
//! their QPs to RTS.
//!
//! The record is 32 bytes, little-endian: magic `"QHCI"`, qpn, psn, rkey, addr (u64), len (u64).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};

use crate::error::{errno_of, Error, Result};

/// Bytes of an encoded [`ConnInfo`].
pub const CONN_INFO_LEN: usize = 32;
/// First four bytes of a record.
pub const CONN_MAGIC: [u8; 4] = *b"QHCI";

/// What one side tells the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnInfo {
    /// The sender's QP number.
    pub qpn: u32,
    /// The sender's first send PSN (24 bits).
    pub psn: u32,
    /// The R_Key of the region the peer may access.
    pub rkey: u32,
    /// Its address.
    pub addr: u64,
    /// Its length.
    pub len: u64,
}

impl ConnInfo {
    /// The wire record.
    pub fn encode(&self) -> [u8; CONN_INFO_LEN] {
        let mut b = [0u8; CONN_INFO_LEN];
        b[0..4].copy_from_slice(&CONN_MAGIC);
        b[4..8].copy_from_slice(&self.qpn.to_le_bytes());
        b[8..12].copy_from_slice(&self.psn.to_le_bytes());
        b[12..16].copy_from_slice(&self.rkey.to_le_bytes());
        b[16..24].copy_from_slice(&self.addr.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Parses a wire record; [`Error::Protocol`] if the magic or the PSN is wrong.
    pub fn decode(b: &[u8; CONN_INFO_LEN]) -> Result<ConnInfo> {
        if b[0..4] != CONN_MAGIC {
            return Err(Error::Protocol {
                what: format!("bad magic {:02x?}", &b[0..4]),
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
        };
        if info.psn > 0xff_ffff {
            return Err(Error::Protocol {
                what: format!("PSN {:#x} wider than 24 bits", info.psn),
            });
        }
        Ok(info)
    }
}

fn net_err(op: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::Sys {
        op,
        source: errno_of(&e),
    }
}

/// Sends `local` and receives the peer's record on an established stream.
pub fn exchange(stream: &mut TcpStream, local: &ConnInfo) -> Result<ConnInfo> {
    stream
        .write_all(&local.encode())
        .map_err(net_err("send connection record"))?;
    let mut b = [0u8; CONN_INFO_LEN];
    stream
        .read_exact(&mut b)
        .map_err(net_err("receive connection record"))?;
    ConnInfo::decode(&b)
}

/// Server side: accepts one connection on `listener` and exchanges records.
pub fn accept_exchange(listener: &TcpListener, local: &ConnInfo) -> Result<(TcpStream, ConnInfo)> {
    let (mut s, _) = listener.accept().map_err(net_err("accept"))?;
    s.set_nodelay(true).map_err(net_err("set TCP_NODELAY"))?;
    let remote = exchange(&mut s, local)?;
    Ok((s, remote))
}

/// Client side: connects to `addr` and exchanges records.
pub fn connect_exchange(
    addr: impl ToSocketAddrs,
    local: &ConnInfo,
) -> Result<(TcpStream, ConnInfo)> {
    let mut s = TcpStream::connect(addr).map_err(net_err("connect"))?;
    s.set_nodelay(true).map_err(net_err("set TCP_NODELAY"))?;
    let remote = exchange(&mut s, local)?;
    Ok((s, remote))
}

/// A barrier over the stream: both sides send one byte and wait for the other's.
pub fn sync(stream: &mut TcpStream) -> Result<()> {
    stream.write_all(b"S").map_err(net_err("send sync"))?;
    let mut b = [0u8; 1];
    stream.read_exact(&mut b).map_err(net_err("receive sync"))?;
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
    };

    #[test]
    fn encodes_byte_for_byte_and_back() {
        let b = INFO.encode();
        let mut want = Vec::from(*b"QHCI");
        want.extend(0x12_3456u32.to_le_bytes());
        want.extend(0xab_cdefu32.to_le_bytes());
        want.extend(0x0102_0304u32.to_le_bytes());
        want.extend(0x7fff_0000_1000u64.to_le_bytes());
        want.extend((1u64 << 20).to_le_bytes());
        assert_eq!(b[..], want[..]);
        assert_eq!(ConnInfo::decode(&b).unwrap(), INFO);
    }

    #[test]
    fn rejects_bad_records() {
        let mut b = INFO.encode();
        b[0] = b'X';
        assert!(matches!(ConnInfo::decode(&b), Err(Error::Protocol { .. })));
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
            let (mut s, remote) = accept_exchange(&l, &server_info).unwrap();
            sync(&mut s).unwrap();
            remote
        });
        let (mut s, remote) = connect_exchange(addr, &INFO).unwrap();
        sync(&mut s).unwrap();
        assert_eq!(remote, server_info);
        assert_eq!(t.join().unwrap(), INFO);
    }
}
