// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The wire format: control messages and the transfer indication in immediate data.
//!
//! # Control messages (version 1)
//!
//! Every control message is one SEND on the control channel, at most [`MAX_MSG`] bytes,
//! little-endian, and starts with a 16-byte header:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | function code ([`Function`]) |
//! | 2 | 2 | protocol version ([`VERSION`]) |
//! | 4 | 4 | length of the whole message, header included; equals the SEND's length |
//! | 8 | 8 | transaction context: chosen by the sender of a request, echoed in its reply |
//!
//! The body follows at offset 16. A list body starts with `n: u32` and a reserved `u32` (zero),
//! then `n` fixed-size entries; the length must be exactly the header, those 8 bytes and the
//! entries. Reserved fields must be zero. Anything else is malformed and closes the
//! connection ([`crate::Error::Protocol`]).
//!
//! | code | function | body |
//! |---|---|---|
//! | 1 | BufferRecvPool | list of pools, 32 bytes each: `pool_ref: u32`, `elem_count: u32`, `elem_size: u32`, `rkey: u32`, `addr: u64`, `context: u64` |
//! | 2 | BufferRecvPoolGet | `elem_count: u32`, `elem_size: u32` |
//! | 3 | BufferRecvPoolUpdate | list of replenished elements, 8 bytes each: `pool_ref: u32`, `elem: u32` |
//! | 4 | BufferPoolFlushRequest | list of `pool_ref: u32` |
//! | 5 | BufferPoolFlushReply | list of `pool_ref: u32` (those of the request) |
//! | 6 | SendData | `len: u32`, reserved `u32`, then `len` bytes (at most [`MAX_SEND_DATA`]) |
//! | 7 | BufferRDMAIndicate | list of consumed elements, 16 bytes each: `pool_ref: u32`, `elem: u32`, `len: u32`, reserved `u32` |
//! | 8 | CfgUtilRequest | `code: u32`, `len: u32`, then `len` bytes |
//! | 9 | CfgUtilReply | `code: u32`, `status: u32`, `len: u32`, reserved `u32`, then `len` bytes |
//!
//! In the two flush messages, bit 31 of a reference says whose pool it is: set, a pool of the
//! request's *receiver* that its user returns ([`crate::Connection::return_pool`]); clear, a pool
//! of the request's *sender* that its owner withdraws ([`crate::Connection::flush_pool`]). A
//! reply echoes its request's references, and is sent only once no write into the pools can be
//! in flight. Pool references are below 2^31.
//!
//! A pool's `elem_count` is 1..=[`MAX_POOL_ELEMS`], its `elem_size` 1..=[`MAX_ELEM_SIZE`],
//! and `addr .. addr + elem_count * elem_size` must not wrap. Element `i` of a pool is the
//! bytes at `addr + i * elem_size`.
//!
//! # Setup
//!
//! Over TCP, each side sends, in order: the control QP's and the data QP's
//! [`qhca::conn::ConnInfo`] records, then a 16-byte hello: `"QPP1"`, the version (u16), the
//! number of pools it advertises right after setup (u16; the peer asks for no pool before
//! they are all in), its control and data receive depths (u32 each). A peer of another version
//! is refused before anything is connected. The stream then stays open, unused: its end is how
//! a side learns that the other died.
//!
//! # The transfer indication in immediate data
//!
//! A data transfer is one RDMA WRITE WITH IMMEDIATE into one element. Its 32-bit immediate
//! names the element ([`Imm`]), the seed's (pool reference, element, length):
//!
//! | bits | field |
//! |---|---|
//! | 31..24 | pool reference, 0..=255 |
//! | 23..16 | element index, 0..=255 |
//! | 15..0 | length − 1 (1..=65536 bytes) |
//!
//! A transfer it cannot describe (a pool reference or element index above 255, 0 bytes, or more
//! than 64 KiB) is a plain RDMA WRITE followed, once the WRITE has completed (so the data is in
//! place at the target), by a BufferRDMAIndicate on the control channel.

use std::fmt;

/// The protocol version this library speaks.
pub const VERSION: u16 = 1;
/// Bytes of the header of every control message.
pub const HEADER_LEN: usize = 16;
/// The largest control message; each side posts control receives of this size.
pub const MAX_MSG: usize = 4096;
/// The largest SendData payload.
pub const MAX_SEND_DATA: usize = MAX_MSG - HEADER_LEN - 8;
/// The largest CfgUtilRequest payload.
pub const MAX_CFG_REQUEST: usize = MAX_MSG - HEADER_LEN - 8;
/// The largest CfgUtilReply payload.
pub const MAX_CFG_REPLY: usize = MAX_MSG - HEADER_LEN - 16;
/// Most elements in one pool.
pub const MAX_POOL_ELEMS: u32 = 1 << 16;
/// The largest element (16 MiB).
pub const MAX_ELEM_SIZE: u32 = 1 << 24;
/// Pools per BufferRecvPool message.
pub const MAX_POOLS_PER_MSG: usize = (MAX_MSG - HEADER_LEN - 8) / POOL_ENTRY;
/// Elements per BufferRecvPoolUpdate message.
pub const MAX_UPDATES_PER_MSG: usize = (MAX_MSG - HEADER_LEN - 8) / 8;
/// Pool references per flush message.
pub const MAX_FLUSH_PER_MSG: usize = (MAX_MSG - HEADER_LEN - 8) / 4;
/// Indications per BufferRDMAIndicate message.
pub const MAX_INDICATES_PER_MSG: usize = (MAX_MSG - HEADER_LEN - 8) / 16;

const POOL_ENTRY: usize = 32;

/// Function codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Function {
    /// Advertise pools.
    BufferRecvPool = 1,
    /// Ask for a pool.
    BufferRecvPoolGet = 2,
    /// Replenish elements.
    BufferRecvPoolUpdate = 3,
    /// Stop using pools.
    BufferPoolFlushRequest = 4,
    /// Pools no longer used.
    BufferPoolFlushReply = 5,
    /// A small payload in the message itself.
    SendData = 6,
    /// Consumed elements the immediate data could not name.
    BufferRdmaIndicate = 7,
    /// A configuration or utility request.
    CfgUtilRequest = 8,
    /// Its reply.
    CfgUtilReply = 9,
}

impl Function {
    fn from_raw(v: u16) -> Option<Function> {
        use Function::*;
        Some(match v {
            1 => BufferRecvPool,
            2 => BufferRecvPoolGet,
            3 => BufferRecvPoolUpdate,
            4 => BufferPoolFlushRequest,
            5 => BufferPoolFlushReply,
            6 => SendData,
            7 => BufferRdmaIndicate,
            8 => CfgUtilRequest,
            9 => CfgUtilReply,
            _ => return None,
        })
    }
}

/// One advertised pool: `elem_count` elements of `elem_size` bytes at `addr`, writable with
/// `rkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolDesc {
    /// The pool's reference, chosen by its owner (the target).
    pub pool_ref: u32,
    /// Elements in the pool.
    pub elem_count: u32,
    /// Bytes per element.
    pub elem_size: u32,
    /// The R_Key the initiator writes with.
    pub rkey: u32,
    /// Address of element 0 in the target's memory.
    pub addr: u64,
    /// Opaque to the protocol: the owner's context for the pool (the seed's example: ports and
    /// addresses of the traffic it is for).
    pub context: u64,
}

/// One element: of which pool, which.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ElemRef {
    /// The pool's reference.
    pub pool_ref: u32,
    /// The element's index in it.
    pub elem: u32,
}

/// One consumed element and how many bytes were written into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Indication {
    /// The element.
    pub at: ElemRef,
    /// Bytes written at its start.
    pub len: u32,
}

/// A control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// BufferRecvPool.
    BufferRecvPool(Vec<PoolDesc>),
    /// BufferRecvPoolGet.
    BufferRecvPoolGet {
        /// Elements wanted.
        elem_count: u32,
        /// Bytes per element wanted.
        elem_size: u32,
    },
    /// BufferRecvPoolUpdate.
    BufferRecvPoolUpdate(Vec<ElemRef>),
    /// BufferPoolFlushRequest.
    BufferPoolFlushRequest(Vec<u32>),
    /// BufferPoolFlushReply.
    BufferPoolFlushReply(Vec<u32>),
    /// SendData.
    SendData(Vec<u8>),
    /// BufferRDMAIndicate.
    BufferRdmaIndicate(Vec<Indication>),
    /// CfgUtilRequest.
    CfgUtilRequest {
        /// What is asked (defined by the user of the library).
        code: u32,
        /// Its data.
        data: Vec<u8>,
    },
    /// CfgUtilReply.
    CfgUtilReply {
        /// The request's code.
        code: u32,
        /// 0: done; otherwise an errno-like code of the user's choosing.
        status: u32,
        /// Its data.
        data: Vec<u8>,
    },
}

/// A message with its transaction context.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The transaction context of the header.
    pub xid: u64,
    /// The message.
    pub msg: Msg,
}

/// Why bytes are not a control message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the header or than the body needs, or longer than [`MAX_MSG`].
    Length {
        /// Bytes received.
        got: usize,
        /// Bytes the header and body call for.
        want: usize,
    },
    /// A version other than [`VERSION`].
    Version(u16),
    /// An unknown function code.
    Function(u16),
    /// A field out of its range (a reserved field not zero, a pool of no elements, ...).
    Field(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Length { got, want } => {
                write!(f, "message of {got} bytes where {want} were expected")
            }
            WireError::Version(v) => write!(f, "protocol version {v} (this side speaks {VERSION})"),
            WireError::Function(c) => write!(f, "unknown function code {c}"),
            WireError::Field(what) => write!(f, "bad field: {what}"),
        }
    }
}

impl std::error::Error for WireError {}

impl Msg {
    /// The message's function code.
    pub fn function(&self) -> Function {
        match self {
            Msg::BufferRecvPool(_) => Function::BufferRecvPool,
            Msg::BufferRecvPoolGet { .. } => Function::BufferRecvPoolGet,
            Msg::BufferRecvPoolUpdate(_) => Function::BufferRecvPoolUpdate,
            Msg::BufferPoolFlushRequest(_) => Function::BufferPoolFlushRequest,
            Msg::BufferPoolFlushReply(_) => Function::BufferPoolFlushReply,
            Msg::SendData(_) => Function::SendData,
            Msg::BufferRdmaIndicate(_) => Function::BufferRdmaIndicate,
            Msg::CfgUtilRequest { .. } => Function::CfgUtilRequest,
            Msg::CfgUtilReply { .. } => Function::CfgUtilReply,
        }
    }

    /// Bytes of the encoded message.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Msg::BufferRecvPool(p) => 8 + p.len() * POOL_ENTRY,
                Msg::BufferRecvPoolGet { .. } => 8,
                Msg::BufferRecvPoolUpdate(e) => 8 + e.len() * 8,
                Msg::BufferPoolFlushRequest(p) | Msg::BufferPoolFlushReply(p) => 8 + p.len() * 4,
                Msg::SendData(d) => 8 + d.len(),
                Msg::BufferRdmaIndicate(i) => 8 + i.len() * 16,
                Msg::CfgUtilRequest { data, .. } => 8 + data.len(),
                Msg::CfgUtilReply { data, .. } => 16 + data.len(),
            }
    }

    /// Checks what encoding cannot: sizes against [`MAX_MSG`] and the pool ranges.
    pub fn validate(&self) -> Result<(), WireError> {
        let len = self.encoded_len();
        if len > MAX_MSG {
            return Err(WireError::Length {
                got: len,
                want: MAX_MSG,
            });
        }
        match self {
            Msg::BufferRecvPool(pools) => pools.iter().try_for_each(check_pool),
            Msg::BufferRecvPoolGet {
                elem_count,
                elem_size,
            } => check_shape(*elem_count, *elem_size),
            _ => Ok(()),
        }
    }

    /// Appends the encoded message (header included) to `out`.
    ///
    /// # Panics
    ///
    /// If the message does not [`Msg::validate`]: callers build messages within the limits.
    pub fn encode(&self, xid: u64, out: &mut Vec<u8>) {
        if let Err(e) = self.validate() {
            panic!("encoding an invalid {:?}: {e}", self.function());
        }
        let start = out.len();
        let len = self.encoded_len();
        out.extend_from_slice(&(self.function() as u16).to_le_bytes());
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&xid.to_le_bytes());
        let u32s = |out: &mut Vec<u8>, v: &[u32]| {
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        };
        let count = |out: &mut Vec<u8>, n: usize| u32s(out, &[n as u32, 0]);
        match self {
            Msg::BufferRecvPool(pools) => {
                count(out, pools.len());
                for p in pools {
                    u32s(out, &[p.pool_ref, p.elem_count, p.elem_size, p.rkey]);
                    out.extend_from_slice(&p.addr.to_le_bytes());
                    out.extend_from_slice(&p.context.to_le_bytes());
                }
            }
            Msg::BufferRecvPoolGet {
                elem_count,
                elem_size,
            } => u32s(out, &[*elem_count, *elem_size]),
            Msg::BufferRecvPoolUpdate(elems) => {
                count(out, elems.len());
                for e in elems {
                    u32s(out, &[e.pool_ref, e.elem]);
                }
            }
            Msg::BufferPoolFlushRequest(p) | Msg::BufferPoolFlushReply(p) => {
                count(out, p.len());
                u32s(out, p);
            }
            Msg::SendData(d) => {
                u32s(out, &[d.len() as u32, 0]);
                out.extend_from_slice(d);
            }
            Msg::BufferRdmaIndicate(ind) => {
                count(out, ind.len());
                for i in ind {
                    u32s(out, &[i.at.pool_ref, i.at.elem, i.len, 0]);
                }
            }
            Msg::CfgUtilRequest { code, data } => {
                u32s(out, &[*code, data.len() as u32]);
                out.extend_from_slice(data);
            }
            Msg::CfgUtilReply { code, status, data } => {
                u32s(out, &[*code, *status, data.len() as u32, 0]);
                out.extend_from_slice(data);
            }
        }
        debug_assert_eq!(out.len() - start, len);
    }
}

fn check_shape(elem_count: u32, elem_size: u32) -> Result<(), WireError> {
    if !(1..=MAX_POOL_ELEMS).contains(&elem_count) {
        return Err(WireError::Field("elem_count"));
    }
    if !(1..=MAX_ELEM_SIZE).contains(&elem_size) {
        return Err(WireError::Field("elem_size"));
    }
    Ok(())
}

fn check_pool(p: &PoolDesc) -> Result<(), WireError> {
    check_shape(p.elem_count, p.elem_size)?;
    let bytes = u64::from(p.elem_count) * u64::from(p.elem_size);
    if p.addr.checked_add(bytes).is_none() {
        return Err(WireError::Field("pool addr + size wraps"));
    }
    Ok(())
}

/// A bounds-checked little-endian reader over a received message.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> u32 {
        let v = u32::from_le_bytes(self.b[self.at..self.at + 4].try_into().expect("4 bytes"));
        self.at += 4;
        v
    }

    fn u64(&mut self) -> u64 {
        let v = u64::from_le_bytes(self.b[self.at..self.at + 8].try_into().expect("8 bytes"));
        self.at += 8;
        v
    }

    fn zero(&mut self, what: &'static str) -> Result<(), WireError> {
        if self.u32() != 0 {
            return Err(WireError::Field(what));
        }
        Ok(())
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let v = self.b[self.at..self.at + n].to_vec();
        self.at += n;
        v
    }
}

/// Decodes one received control message: exactly `b` (the SEND's bytes), nothing trusted.
pub fn decode(b: &[u8]) -> Result<Frame, WireError> {
    if b.len() < HEADER_LEN || b.len() > MAX_MSG {
        return Err(WireError::Length {
            got: b.len(),
            want: HEADER_LEN.max(b.len().min(MAX_MSG)),
        });
    }
    let func = u16::from_le_bytes([b[0], b[1]]);
    let version = u16::from_le_bytes([b[2], b[3]]);
    let len = u32::from_le_bytes(b[4..8].try_into().expect("4 bytes")) as usize;
    let xid = u64::from_le_bytes(b[8..16].try_into().expect("8 bytes"));
    if version != VERSION {
        return Err(WireError::Version(version));
    }
    let func = Function::from_raw(func).ok_or(WireError::Function(func))?;
    if len != b.len() {
        return Err(WireError::Length {
            got: b.len(),
            want: len,
        });
    }
    // The fixed part of each body, then the variable part's size from its count.
    let fixed = match func {
        Function::CfgUtilReply => 16,
        _ => 8,
    };
    let need = |want: usize| {
        if b.len() == want {
            Ok(())
        } else {
            Err(WireError::Length { got: b.len(), want })
        }
    };
    if b.len() < HEADER_LEN + fixed {
        return Err(WireError::Length {
            got: b.len(),
            want: HEADER_LEN + fixed,
        });
    }
    let mut r = Reader { b, at: HEADER_LEN };
    let list = |r: &mut Reader<'_>, entry: usize| -> Result<usize, WireError> {
        let n = r.u32() as usize;
        r.zero("list reserved")?;
        need(HEADER_LEN + 8 + n.saturating_mul(entry))?;
        Ok(n)
    };
    let msg = match func {
        Function::BufferRecvPool => {
            let n = list(&mut r, POOL_ENTRY)?;
            let mut pools = Vec::with_capacity(n);
            for _ in 0..n {
                let p = PoolDesc {
                    pool_ref: r.u32(),
                    elem_count: r.u32(),
                    elem_size: r.u32(),
                    rkey: r.u32(),
                    addr: r.u64(),
                    context: r.u64(),
                };
                check_pool(&p)?;
                pools.push(p);
            }
            Msg::BufferRecvPool(pools)
        }
        Function::BufferRecvPoolGet => {
            need(HEADER_LEN + 8)?;
            let (elem_count, elem_size) = (r.u32(), r.u32());
            check_shape(elem_count, elem_size)?;
            Msg::BufferRecvPoolGet {
                elem_count,
                elem_size,
            }
        }
        Function::BufferRecvPoolUpdate => {
            let n = list(&mut r, 8)?;
            Msg::BufferRecvPoolUpdate(
                (0..n)
                    .map(|_| ElemRef {
                        pool_ref: r.u32(),
                        elem: r.u32(),
                    })
                    .collect(),
            )
        }
        Function::BufferPoolFlushRequest | Function::BufferPoolFlushReply => {
            let n = list(&mut r, 4)?;
            let refs = (0..n).map(|_| r.u32()).collect();
            if func == Function::BufferPoolFlushRequest {
                Msg::BufferPoolFlushRequest(refs)
            } else {
                Msg::BufferPoolFlushReply(refs)
            }
        }
        Function::SendData => {
            let n = r.u32() as usize;
            r.zero("SendData reserved")?;
            need(HEADER_LEN + 8 + n)?;
            Msg::SendData(r.bytes(n))
        }
        Function::BufferRdmaIndicate => {
            let n = list(&mut r, 16)?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                let at = ElemRef {
                    pool_ref: r.u32(),
                    elem: r.u32(),
                };
                let len = r.u32();
                r.zero("indication reserved")?;
                v.push(Indication { at, len });
            }
            Msg::BufferRdmaIndicate(v)
        }
        Function::CfgUtilRequest => {
            let code = r.u32();
            let n = r.u32() as usize;
            need(HEADER_LEN + 8 + n)?;
            Msg::CfgUtilRequest {
                code,
                data: r.bytes(n),
            }
        }
        Function::CfgUtilReply => {
            let code = r.u32();
            let status = r.u32();
            let n = r.u32() as usize;
            r.zero("CfgUtilReply reserved")?;
            need(HEADER_LEN + 16 + n)?;
            Msg::CfgUtilReply {
                code,
                status,
                data: r.bytes(n),
            }
        }
    };
    Ok(Frame { xid, msg })
}

/// The transfer indication carried in a WRITE WITH IMMEDIATE's 32 bits: pool reference
/// (bits 31..24), element index (23..16) and length − 1 (15..0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Imm;

impl Imm {
    /// Pool references the immediate can name.
    pub const MAX_POOLS: u32 = 256;
    /// Element indices it can name.
    pub const MAX_ELEMS: u32 = 256;
    /// The longest transfer it can describe.
    pub const MAX_LEN: u32 = 1 << 16;

    /// The immediate for `len` bytes into `at`, or `None` when it cannot describe them (the
    /// transfer then goes as a WRITE plus BufferRDMAIndicate).
    pub fn encode(at: ElemRef, len: u32) -> Option<u32> {
        if at.pool_ref >= Self::MAX_POOLS
            || at.elem >= Self::MAX_ELEMS
            || len == 0
            || len > Self::MAX_LEN
        {
            return None;
        }
        Some(at.pool_ref << 24 | at.elem << 16 | (len - 1))
    }

    /// What an immediate says; every value is some indication (the receiver checks it names
    /// an element it advertised).
    pub fn decode(imm: u32) -> Indication {
        Indication {
            at: ElemRef {
                pool_ref: imm >> 24,
                elem: (imm >> 16) & 0xff,
            },
            len: (imm & 0xffff) + 1,
        }
    }
}

#[cfg(test)]
mod tests;
