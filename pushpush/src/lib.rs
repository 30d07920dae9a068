// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Push-push messaging over qhca (seed 002): both sides only ever push.
//!
//! Each side of a [`Connection`] is a *target* for the pools it advertises and an
//! *initiator* for the pools the peer advertised to it, both at once:
//!
//! - The target registers pools of fixed-size receive elements and advertises them
//!   (BufferRecvPool: element count, element size, pool reference, context, address, R_Key).
//! - The initiator [`Connection::push`]es data straight into a free element with one RDMA WRITE
//!   WITH IMMEDIATE whose 32 bits name the element it consumed ([`wire::Imm`]); a transfer the
//!   immediate cannot name goes as a WRITE followed by a BufferRDMAIndicate.
//! - The target hands the data to its user as [`Event::Data`]; when the user
//!   [`Connection::release`]s it, the element is replenished (BufferRecvPoolUpdate, batched).
//! - An initiator never writes an element that was not advertised or is consumed and not yet
//!   replenished: with none free it waits, and if no pool of the peer's is big enough it asks
//!   for one (BufferRecvPoolGet), which the peer grants within its [`Config`] limits.
//! - Either side ends the use of a pool: the target withdraws one of its own
//!   ([`Connection::flush_pool`]), the initiator returns one of the peer's
//!   ([`Connection::return_pool`]). Only after the BufferPoolFlushReply, when no write into
//!   it can be in flight, is the pool deregistered and freed.
//! - Small payloads go as SendData ([`Connection::send_data`]), configuration as
//!   CfgUtilRequest / CfgUtilReply ([`Connection::request`], [`Connection::call`],
//!   [`Connection::reply`]).
//!
//! Two channels per connection, as in the seed: the control channel (one RC QP: every control
//! message is a SEND) and the data channel (another RC QP: only RDMA WRITE WITH IMMEDIATE and
//! plain WRITE). Both report to one CQ, so a write's delivery is always seen before a
//! control message the peer sent after the write completed. The wire format of control
//! messages is documented in [`wire`].
//!
//! Setup is a TCP exchange (the two QPs' [`qhca::conn::ConnInfo`] records and a version
//! record); the stream stays open, and its end is how a peer that died is noticed. Any error
//! — a failed work request, a malformed or unknown message, a bad version, an indication
//! naming an element that was not advertised or is consumed — closes the connection
//! ([`Error::Closed`] from then on): both QPs go to the error state first, so the peer can
//! write nothing more, and the pools are freed only after that (when the [`Connection`] is
//! dropped, QPs first).
//!
//! ```no_run
//! # fn main() -> pushpush::Result<()> {
//! use std::sync::Arc;
//! let ctx = Arc::new(qhca::devices()?[0].open()?);
//! let cfg = pushpush::Config::default();
//! // One side: pushpush::Listener::bind("0.0.0.0:7470")?.accept(&ctx, &cfg)?
//! let mut c = pushpush::Connection::connect(&ctx, "10.0.0.2:7470", &cfg)?;
//! c.push(b"a packet", None)?;
//! while let Some(ev) = c.poll(Some(std::time::Duration::from_secs(1)))? {
//!     if let pushpush::Event::Data(d) = ev {
//!         println!("{} bytes", c.read(&d).len());
//!         c.release(d)?;
//!     }
//! }
//! # Ok(()) }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod conn;
mod engine;
mod pool;
mod types;
pub mod wire;

pub use conn::{Connection, Listener};
pub use types::{Config, Delivery, Event, PoolShape, Stats};
pub use wire::ElemRef;

/// Pool references are below this: bit 31 of a reference in a flush message says whose pool
/// it is ([`RETURNED`]).
pub const MAX_POOL_REF: u32 = 1 << 31;

/// In a BufferPoolFlushRequest or Reply, bit 31 of a pool reference set means the pool is the
/// *receiver's* of the request (its user returns it); clear, the *sender's* of the request
/// (its owner withdraws it). A reply echoes the request's references.
pub const RETURNED: u32 = 1 << 31;

/// Everything a connection can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The provider failed (an object could not be created, a post was refused).
    #[error(transparent)]
    Qhca(#[from] qhca::Error),
    /// A system call of the setup or of waiting failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The peer broke the protocol (the connection is closed).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The connection is closed; why.
    #[error("connection closed: {0}")]
    Closed(String),
    /// An argument or configuration was refused.
    #[error("refused: {0}")]
    Config(&'static str),
    /// A payload longer than the path allows.
    #[error("{len} bytes, at most {max}")]
    TooLong {
        /// Bytes asked for.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Waited until the deadline for this.
    #[error("timed out waiting for {0}")]
    Timeout(&'static str),
}

impl From<qhca::PostError> for Error {
    fn from(e: qhca::PostError) -> Error {
        Error::Qhca(e.into())
    }
}

impl Error {
    pub(crate) fn io(op: &'static str, source: std::io::Error) -> Error {
        Error::Io { op, source }
    }
}

/// What the library returns.
pub type Result<T, E = Error> = std::result::Result<T, E>;
