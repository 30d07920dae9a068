// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! What a connection's user hands in and gets out: its configuration, its events and
//! deliveries, its counters.

use std::time::Duration;

use crate::wire;

/// A pool's shape: `count` elements of `size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolShape {
    /// Elements.
    pub count: u32,
    /// Bytes per element.
    pub size: u32,
}

/// How a connection is set up.
#[derive(Clone, Debug)]
pub struct Config {
    /// Pools this side advertises once connected (the peer writes into them).
    pub pools: Vec<PoolShape>,
    /// Receive requests posted on the data channel: the most elements this side advertises
    /// at once, over all its pools, is this less 16 (receives are reposted 16 at a time).
    pub data_depth: u32,
    /// Control receives posted (of [`wire::MAX_MSG`] bytes each).
    pub ctrl_depth: u32,
    /// Data-channel writes in flight.
    pub send_window: u32,
    /// Bytes of the registered ring pushes copy through (the largest push).
    pub staging: usize,
    /// Released elements gathered into one BufferRecvPoolUpdate (it is sent sooner whenever
    /// the connection would otherwise wait).
    pub update_batch: usize,
    /// Pools a BufferRecvPoolGet from the peer may add, at most; 0 refuses them.
    pub grant_pools: u32,
    /// Bytes of all pools of this side together, at most (configured and granted).
    pub max_pool_bytes: u64,
    /// Elements of a pool this side asks for with BufferRecvPoolGet.
    pub get_count: u32,
    /// Setup, and how long a wait for the peer may take before the peer counts as gone.
    pub timeout: Duration,
    /// The GID table entry to talk from (across machines); `None`: the port's GID 0.
    pub gid_index: Option<u8>,
    /// log2 of the path MTU.
    pub path_mtu: u8,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pools: vec![
                PoolShape {
                    count: 64,
                    size: 2048,
                },
                PoolShape {
                    count: 16,
                    size: 65536,
                },
            ],
            data_depth: 512,
            ctrl_depth: 64,
            send_window: 64,
            staging: 4 << 20,
            update_batch: 16,
            grant_pools: 8,
            max_pool_bytes: 64 << 20,
            get_count: 16,
            timeout: Duration::from_secs(10),
            gid_index: None,
            path_mtu: 12,
        }
    }
}

/// Something that arrived.
#[derive(Debug)]
pub enum Event {
    /// The peer pushed data into one of our pools: read it ([`crate::Connection::read`]), then give
    /// the element back ([`crate::Connection::release`]).
    Data(Delivery),
    /// A SendData message's payload.
    SendData(Vec<u8>),
    /// A CfgUtilRequest: answer it with [`crate::Connection::reply`] and the same `xid`.
    CfgRequest {
        /// Its transaction context.
        xid: u64,
        /// What is asked.
        code: u32,
        /// Its data.
        data: Vec<u8>,
    },
    /// A CfgUtilReply to one of our requests.
    CfgReply {
        /// The request's transaction context.
        xid: u64,
        /// The request's code.
        code: u32,
        /// 0: done.
        status: u32,
        /// Its data.
        data: Vec<u8>,
    },
    /// One of our pools is flushed and freed: deregistered, its memory gone.
    PoolFreed(u32),
    /// A pool of the peer's was flushed: we write into it no more.
    PeerPoolGone(u32),
}

/// One pushed transfer in one of our elements. Hand it back with [`crate::Connection::release`]; a
/// delivery that is dropped instead keeps its element (and its pool) for ever.
///
/// What it says is read-only ([`Delivery::at`], [`Delivery::len`], [`Delivery::context`]):
/// `release` gives back exactly the element the connection delivered, and `read` reads
/// exactly the bytes written, whatever the user does with the value. (They were public
/// fields once, which `release` trusted; these must not compile.)
///
/// ```compile_fail,E0616
/// fn f(d: &mut pushpush::Delivery) {
///     d.at.elem += 1; // would have released an element still in use
/// }
/// ```
///
/// ```compile_fail,E0616
/// fn f(d: &mut pushpush::Delivery) {
///     d.len = u32::MAX; // would have read past the element
/// }
/// ```
#[derive(Debug)]
#[must_use = "a delivery holds its element until it is released"]
pub struct Delivery {
    conn: u64,
    at: wire::ElemRef,
    len: u32,
    context: u64,
}

impl Delivery {
    pub(crate) fn new(conn: u64, at: wire::ElemRef, len: u32, context: u64) -> Delivery {
        Delivery {
            conn,
            at,
            len,
            context,
        }
    }

    /// The connection it came from (its id).
    pub(crate) fn conn(&self) -> u64 {
        self.conn
    }

    /// The element.
    pub fn at(&self) -> wire::ElemRef {
        self.at
    }

    /// Bytes written.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// True for a transfer of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pool's context, as advertised.
    pub fn context(&self) -> u64 {
        self.context
    }
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Pushes whose indication was the immediate data.
    pub pushed_imm: u64,
    /// Pushes indicated with BufferRDMAIndicate.
    pub pushed_indicated: u64,
    /// Bytes pushed.
    pub pushed_bytes: u64,
    /// Deliveries.
    pub delivered: u64,
    /// Elements replenished by us (in BufferRecvPoolUpdate messages).
    pub replenished: u64,
    /// BufferRecvPoolUpdate messages sent.
    pub updates_sent: u64,
    /// Times a push found no free element (or staging, or send slot) and waited.
    pub push_waits: u64,
    /// BufferRecvPoolGet messages sent.
    pub pool_gets: u64,
    /// Control messages sent and received.
    pub ctrl_sent: u64,
    /// Control messages received.
    pub ctrl_received: u64,
}
