// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A connection: its setup over TCP, its objects, and what its user calls.

use std::collections::{BTreeMap, VecDeque};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qhca::conn::{self as qconn, ConnInfo};
use qhca::{Access, ConnOpts, Context, Cq, MrBuf, Pd, Qp, QpCaps, RecvWr};

use crate::pool::{LocalPool, LocalState, RemotePool, Staging};
use crate::types::{Config, Delivery, Event, PoolShape, Stats};
use crate::wire::{self, Msg, PoolDesc, MAX_MSG};
use crate::{Error, Result};

/// Tags in the high bits of a work request id: which queue it is of.
pub(crate) const TAG_CTRL_SEND: u64 = 1 << 60;
pub(crate) const TAG_CTRL_RECV: u64 = 2 << 60;
pub(crate) const TAG_DATA_SEND: u64 = 3 << 60;
pub(crate) const TAG_DATA_RECV: u64 = 4 << 60;
pub(crate) const TAG_MASK: u64 = 0xf << 60;

/// Empty polls between two checks of the setup stream (one `recv` system call).
const LIVENESS_POLLS: u32 = 4096;

/// Control sends in flight.
pub(crate) const CTRL_SQ: u32 = 32;

/// The setup record after the two QPs' records (16 bytes): magic, version (u16), the number of
/// pools the sender advertises right after setup (u16), its control and data depths (u32).
const HELLO_MAGIC: [u8; 4] = *b"QPP1";

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A write on the data channel, from post to completion.
pub(crate) struct Inflight {
    pub at: wire::ElemRef,
    pub len: u32,
    /// Staging bytes to free.
    pub staged: usize,
    /// Indicated by a BufferRDMAIndicate after completion (not the immediate).
    pub indicate: bool,
}

/// One push-push connection: a control channel and a data channel (two RC QPs on one CQ),
/// pools both ways.
///
/// Not `Sync`: one thread drives it (pushes, polls, releases); both directions run at once
/// on that thread. Any number of connections may live in one process.
pub struct Connection {
    // Field order is teardown order: the QPs go first, so the peer can write nothing more,
    // then the CQ, then the registered memory.
    pub(crate) ctrl: Qp,
    pub(crate) data: Qp,
    pub(crate) cq: Cq,
    pub(crate) ctrl_rx: MrBuf,
    pub(crate) ctrl_tx: MrBuf,
    pub(crate) staging: Staging,
    pub(crate) local: BTreeMap<u32, LocalPool>,
    pub(crate) remote: BTreeMap<u32, RemotePool>,
    pub(crate) pd: Pd,
    pub(crate) ctx: Arc<Context>,
    /// The setup stream, kept open: its end is how a peer that died is noticed.
    pub(crate) stream: Option<TcpStream>,
    pub(crate) cfg: Config,
    pub(crate) id: u64,
    /// Control send slots free (indices into `ctrl_tx`).
    pub(crate) ctrl_slots: Vec<u32>,
    /// Control messages waiting for a slot.
    pub(crate) ctrl_queue: VecDeque<(u64, Msg)>,
    /// Data-channel writes in posting order.
    pub(crate) inflight: VecDeque<Inflight>,
    pub(crate) pending_updates: Vec<wire::ElemRef>,
    pub(crate) events: VecDeque<Event>,
    pub(crate) next_xid: u64,
    /// A BufferRecvPoolGet is outstanding (no pool of the peer's could take a push).
    pub(crate) pool_get_pending: bool,
    /// Pools granted to the peer's BufferRecvPoolGet so far.
    pub(crate) granted: u32,
    /// Set once the connection failed; every later call returns it.
    pub(crate) broken: Option<String>,
    /// Empty polls so far, for [`Connection::liveness`].
    pub(crate) idle_polls: u32,
    pub(crate) stats: Stats,
    /// Plain WRITEs of [`Connection::bench_plain_writes`] completed.
    pub(crate) bench_done: u64,
    /// Pools of the peer's initial advertisement not received yet.
    pub(crate) peer_initial: u32,
    /// Data-channel receives consumed and not reposted yet.
    pub(crate) data_consumed: u32,
}

/// Accepts connections.
pub struct Listener {
    listener: TcpListener,
}

impl Listener {
    /// Listens on `addr` (e.g. `"0.0.0.0:18515"`).
    pub fn bind(addr: impl ToSocketAddrs) -> Result<Listener> {
        let listener = TcpListener::bind(addr).map_err(|e| Error::io("listen", e))?;
        Ok(Listener { listener })
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// Waits up to `cfg.timeout` for one peer and sets the connection up. Nothing is
    /// created on the device until a peer is there.
    pub fn accept(&self, ctx: &Arc<Context>, cfg: &Config) -> Result<Connection> {
        let stream = qconn::accept(&self.listener, cfg.timeout)?;
        Connection::over(ctx, stream, cfg)
    }
}

impl Connection {
    /// Connects to a [`Listener`] at `addr` and sets the connection up. Nothing is created
    /// on the device until the peer answered.
    pub fn connect(
        ctx: &Arc<Context>,
        addr: impl ToSocketAddrs,
        cfg: &Config,
    ) -> Result<Connection> {
        let stream = qconn::connect(addr, cfg.timeout)?;
        Connection::over(ctx, stream, cfg)
    }

    /// Sets the connection up over an established stream (with `cfg.timeout` set on it).
    fn over(ctx: &Arc<Context>, mut stream: TcpStream, cfg: &Config) -> Result<Connection> {
        let mut c = Connection::objects(ctx, cfg)?;
        let (ci, di) = c.local_infos()?;
        let rc = qconn::exchange(&mut stream, &ci)?;
        let rd = qconn::exchange(&mut stream, &di)?;
        c.finish(stream, (ci, di), (rc, rd))?;
        Ok(c)
    }

    fn objects(ctx: &Arc<Context>, cfg: &Config) -> Result<Connection> {
        if cfg.data_depth == 0 || cfg.ctrl_depth == 0 || cfg.send_window == 0 {
            return Err(Error::Config(
                "depths and the send window must be at least 1",
            ));
        }
        if cfg.staging == 0 || cfg.update_batch == 0 || cfg.get_count == 0 {
            return Err(Error::Config(
                "staging, update_batch and get_count must be at least 1",
            ));
        }
        let pd = Pd::new(ctx)?;
        let entries = CTRL_SQ + cfg.ctrl_depth + cfg.send_window + cfg.data_depth;
        let cq = Cq::new(ctx, entries, Some(qhca::eventfd()?))?;
        let ctrl = Qp::new(
            &pd,
            &cq,
            &cq,
            &QpCaps {
                max_send_wr: CTRL_SQ,
                max_recv_wr: cfg.ctrl_depth,
                max_sge: 1,
                max_inline: 0,
            },
        )?;
        let data = Qp::new(
            &pd,
            &cq,
            &cq,
            &QpCaps {
                max_send_wr: cfg.send_window,
                max_recv_wr: cfg.data_depth,
                max_sge: 1,
                max_inline: 0,
            },
        )?;
        let ctrl_rx = pd.reg_mr_buf(cfg.ctrl_depth as usize * MAX_MSG, Access::LOCAL_WRITE)?;
        let ctrl_tx = pd.reg_mr_buf(CTRL_SQ as usize * MAX_MSG, Access::LOCAL_WRITE)?;
        let staging = Staging::new(pd.reg_mr_buf(cfg.staging, Access::LOCAL_WRITE)?);
        Ok(Connection {
            ctrl,
            data,
            cq,
            ctrl_rx,
            ctrl_tx,
            staging,
            local: BTreeMap::new(),
            remote: BTreeMap::new(),
            pd,
            ctx: Arc::clone(ctx),
            stream: None,
            cfg: cfg.clone(),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            ctrl_slots: (0..CTRL_SQ).rev().collect(),
            ctrl_queue: VecDeque::new(),
            inflight: VecDeque::new(),
            pending_updates: Vec::new(),
            events: VecDeque::new(),
            next_xid: 1,
            pool_get_pending: false,
            granted: 0,
            broken: None,
            idle_polls: 0,
            stats: Stats::default(),
            bench_done: 0,
            peer_initial: 0,
            data_consumed: 0,
        })
    }

    fn local_infos(&self) -> Result<(ConnInfo, ConnInfo)> {
        let mut ci = self.ctrl.conn_info(qconn::random_psn());
        let mut di = self.data.conn_info(qconn::random_psn() ^ 0x5a5a5a);
        if let Some(ix) = self.cfg.gid_index {
            let port = self.ctx.query_port()?;
            let gid = match port.gid(ix) {
                Some(e) => e.gid,
                None => return Err(Error::Config("the GID index is empty on this port")),
            };
            ci = ci.with_gid(gid, ix);
            di = di.with_gid(gid, ix);
        }
        Ok((ci, di))
    }

    fn finish(
        &mut self,
        mut stream: TcpStream,
        local: (ConnInfo, ConnInfo),
        remote: (ConnInfo, ConnInfo),
    ) -> Result<()> {
        // Versions first: a peer of another version is told so before anything is connected.
        let mut hello = [0u8; 16];
        hello[..4].copy_from_slice(&HELLO_MAGIC);
        hello[4..6].copy_from_slice(&wire::VERSION.to_le_bytes());
        let initial = u16::try_from(self.cfg.pools.len())
            .map_err(|_| Error::Config("more than 65535 pools in Config::pools"))?;
        hello[6..8].copy_from_slice(&initial.to_le_bytes());
        hello[8..12].copy_from_slice(&self.cfg.ctrl_depth.to_le_bytes());
        hello[12..16].copy_from_slice(&self.cfg.data_depth.to_le_bytes());
        let peer = exchange_bytes(&mut stream, &hello)?;
        if peer[..4] != HELLO_MAGIC {
            return Err(Error::Protocol(
                "the peer is not a push-push endpoint".into(),
            ));
        }
        let v = u16::from_le_bytes([peer[4], peer[5]]);
        if v != wire::VERSION {
            return Err(Error::Protocol(format!(
                "the peer speaks protocol version {v}, this side {}",
                wire::VERSION
            )));
        }
        // The pools the peer advertises right after setup: no BufferRecvPoolGet before
        // they are all here.
        self.peer_initial = u32::from(u16::from_le_bytes([peer[6], peer[7]]));
        let opts = ConnOpts {
            access: Access::REMOTE_WRITE,
            path_mtu: self.cfg.path_mtu,
            // RNR: a control SEND the peer has no receive for yet waits, for ever (the
            // peer reposts each receive as it handles it); nothing is lost.
            rnr_retry: 7,
            ..ConnOpts::default()
        };
        self.ctrl.connect(&local.0, &remote.0, &opts)?;
        self.data.connect(&local.1, &remote.1, &opts)?;
        for slot in 0..self.cfg.ctrl_depth {
            self.post_ctrl_recv(slot)?;
        }
        self.data_consumed = self.cfg.data_depth;
        self.repost_data_recv(true)?;
        qconn::sync(&mut stream)?;
        stream
            .set_nonblocking(true)
            .map_err(|e| Error::io("set the stream non-blocking", e))?;
        self.stream = Some(stream);
        let shapes = self.cfg.pools.clone();
        let mut descs = Vec::new();
        for s in shapes {
            descs.push(self.new_pool(s, 0)?);
        }
        if !descs.is_empty() {
            self.advertise(descs)?;
        }
        Ok(())
    }

    pub(crate) fn post_ctrl_recv(&mut self, slot: u32) -> Result<()> {
        let sge = self.ctrl_rx.sge(slot as usize * MAX_MSG, MAX_MSG as u32);
        self.ctrl.post_recv(&[RecvWr {
            wr_id: TAG_CTRL_RECV | u64::from(slot),
            sges: &[sge],
        }])?;
        Ok(())
    }

    /// Registers a new pool of ours (not yet advertised): the next free reference, checked
    /// against the element and byte budgets.
    pub(crate) fn new_pool(&mut self, s: PoolShape, context: u64) -> Result<PoolDesc> {
        if s.count == 0
            || s.count > wire::MAX_POOL_ELEMS
            || s.size == 0
            || s.size > wire::MAX_ELEM_SIZE
        {
            return Err(Error::Config("a pool of 1..=65536 elements of 1..=16 MiB"));
        }
        let elems: u64 = self
            .local
            .values()
            .map(|p| u64::from(p.desc.elem_count))
            .sum();
        let room = self
            .cfg
            .data_depth
            .saturating_sub(crate::engine::REPOST_BATCH);
        if elems + u64::from(s.count) > u64::from(room) {
            return Err(Error::Config(
                "more elements than data_depth less 16 receives: raise Config::data_depth",
            ));
        }
        let bytes: u64 = self
            .local
            .values()
            .map(|p| u64::from(p.desc.elem_count) * u64::from(p.desc.elem_size))
            .sum();
        let want = u64::from(s.count) * u64::from(s.size);
        if bytes + want > self.cfg.max_pool_bytes {
            return Err(Error::Config(
                "more pool memory than Config::max_pool_bytes",
            ));
        }
        // The lowest free reference: small ones fit the immediate data.
        let pool_ref = (0..crate::MAX_POOL_REF)
            .find(|r| !self.local.contains_key(r))
            .ok_or(Error::Config("no free pool reference"))?;
        let mr = self
            .pd
            .reg_mr_buf(want as usize, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let desc = PoolDesc {
            pool_ref,
            elem_count: s.count,
            elem_size: s.size,
            rkey: mr.rkey(),
            addr: mr.addr(),
            context,
        };
        self.local.insert(
            pool_ref,
            LocalPool {
                desc,
                mr,
                advertised: vec![true; s.count as usize],
                delivered: 0,
                state: LocalState::Open,
            },
        );
        Ok(desc)
    }

    /// Sends BufferRecvPool messages for `descs`.
    pub(crate) fn advertise(&mut self, descs: Vec<PoolDesc>) -> Result<()> {
        for chunk in descs.chunks(wire::MAX_POOLS_PER_MSG) {
            self.send_ctrl(Msg::BufferRecvPool(chunk.to_vec()))?;
        }
        Ok(())
    }

    /// Adds and advertises a pool of `shape`, with `context` for the peer; returns its
    /// reference.
    pub fn add_pool(&mut self, shape: PoolShape, context: u64) -> Result<u32> {
        self.check()?;
        let d = self.new_pool(shape, context)?;
        self.advertise(vec![d])?;
        Ok(d.pool_ref)
    }

    /// The pools of the peer's this side may push into: (reference, element count, element
    /// size, elements free now).
    pub fn peer_pools(&self) -> Vec<(u32, u32, u32, usize)> {
        self.remote
            .values()
            .map(|p| {
                (
                    p.desc.pool_ref,
                    p.desc.elem_count,
                    p.desc.elem_size,
                    p.free.len(),
                )
            })
            .collect()
    }

    /// Our pools: (reference, element count, element size, deliveries not released).
    pub fn pools(&self) -> Vec<(u32, u32, u32, u32)> {
        self.local
            .values()
            .map(|p| {
                (
                    p.desc.pool_ref,
                    p.desc.elem_count,
                    p.desc.elem_size,
                    p.delivered,
                )
            })
            .collect()
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// The file descriptors a caller that multiplexes (poll, epoll) waits on besides its
    /// own: the CQ's eventfd and the setup stream (readable when the peer goes away). Call
    /// [`Connection::arm`] before waiting.
    pub fn wait_fds(&self) -> [RawFd; 2] {
        let cq = self
            .cq
            .event_fd()
            .map(|f| f.as_raw_fd())
            .expect("the CQ was created with an eventfd");
        [cq, self.stream.as_ref().map_or(-1, AsRawFd::as_raw_fd)]
    }

    /// The error the connection failed with, if it did.
    pub fn check(&self) -> Result<()> {
        match &self.broken {
            Some(why) => Err(Error::Closed(why.clone())),
            None => Ok(()),
        }
    }

    /// Reads a delivery's bytes.
    pub fn read(&self, d: &Delivery) -> Vec<u8> {
        let p = self.delivery_pool(d);
        p.mr.to_vec(p.offset(d.at().elem), d.len() as usize)
    }

    /// Copies a delivery's bytes into `out` (at most `out.len()`); returns how many.
    pub fn read_into(&self, d: &Delivery, out: &mut [u8]) -> usize {
        let p = self.delivery_pool(d);
        let n = out.len().min(d.len() as usize);
        p.mr.read_at(p.offset(d.at().elem), &mut out[..n]);
        n
    }

    fn delivery_pool(&self, d: &Delivery) -> &LocalPool {
        assert_eq!(d.conn(), self.id, "a delivery of another connection");
        // A pool is freed only once every delivery of it is released.
        &self.local[&d.at().pool_ref]
    }

    /// Gives a delivered element back: it is advertised to the peer again (in the next
    /// BufferRecvPoolUpdate), unless its pool is being flushed.
    ///
    /// # Panics
    ///
    /// If `d` is of another connection.
    pub fn release(&mut self, d: Delivery) -> Result<()> {
        assert_eq!(d.conn(), self.id, "a delivery of another connection");
        let at = d.at();
        let p = self
            .local
            .get_mut(&at.pool_ref)
            .expect("a pool outlives its deliveries");
        p.delivered -= 1;
        let pool_ref = at.pool_ref;
        if p.state == LocalState::Open {
            p.advertised[at.elem as usize] = true;
            self.pending_updates.push(at);
            if self.pending_updates.len() >= self.cfg.update_batch {
                self.send_updates()?;
            }
        } else {
            self.free_if_done(pool_ref)?;
        }
        Ok(())
    }

    /// Sends what releases gathered.
    pub(crate) fn send_updates(&mut self) -> Result<()> {
        while !self.pending_updates.is_empty() {
            let n = self.pending_updates.len().min(wire::MAX_UPDATES_PER_MSG);
            let batch: Vec<_> = self.pending_updates.drain(..n).collect();
            self.stats.replenished += batch.len() as u64;
            self.stats.updates_sent += 1;
            self.send_ctrl(Msg::BufferRecvPoolUpdate(batch))?;
        }
        Ok(())
    }

    /// Frees a closed pool of ours once no delivery of it is held.
    pub(crate) fn free_if_done(&mut self, pool_ref: u32) -> Result<()> {
        let done = self
            .local
            .get(&pool_ref)
            .is_some_and(|p| p.state == LocalState::Closed && p.delivered == 0);
        if done {
            let p = self.local.remove(&pool_ref).expect("checked");
            // Deregistered before its memory goes; leaked if that fails (see qhca::Mr).
            p.mr.dereg()?;
            self.events.push_back(Event::PoolFreed(pool_ref));
        }
        Ok(())
    }

    /// A SendData message: `data` (at most [`wire::MAX_SEND_DATA`] bytes) copied into a
    /// control message.
    pub fn send_data(&mut self, data: &[u8]) -> Result<()> {
        self.check()?;
        if data.len() > wire::MAX_SEND_DATA {
            return Err(Error::TooLong {
                len: data.len(),
                max: wire::MAX_SEND_DATA,
            });
        }
        self.send_ctrl(Msg::SendData(data.to_vec()))
    }

    /// A CfgUtilRequest; its reply comes as [`Event::CfgReply`] with the returned `xid`.
    pub fn request(&mut self, code: u32, data: &[u8]) -> Result<u64> {
        self.check()?;
        if data.len() > wire::MAX_CFG_REQUEST {
            return Err(Error::TooLong {
                len: data.len(),
                max: wire::MAX_CFG_REQUEST,
            });
        }
        let xid = self.xid();
        self.send_ctrl_xid(
            xid,
            Msg::CfgUtilRequest {
                code,
                data: data.to_vec(),
            },
        )?;
        Ok(xid)
    }

    /// A CfgUtilRequest, waiting (other events are kept) for its reply: `(status, data)`.
    pub fn call(&mut self, code: u32, data: &[u8], timeout: Duration) -> Result<(u32, Vec<u8>)> {
        let xid = self.request(code, data)?;
        let deadline = Instant::now() + timeout;
        loop {
            let at = self
                .events
                .iter()
                .position(|e| matches!(e, Event::CfgReply { xid: x, .. } if *x == xid));
            if let Some(i) = at {
                if let Some(Event::CfgReply { status, data, .. }) = self.events.remove(i) {
                    return Ok((status, data));
                }
            }
            self.wait_progress(Some(deadline), "the CfgUtilReply")?;
        }
    }

    /// Answers the CfgUtilRequest `xid`.
    pub fn reply(&mut self, xid: u64, code: u32, status: u32, data: &[u8]) -> Result<()> {
        self.check()?;
        if data.len() > wire::MAX_CFG_REPLY {
            return Err(Error::TooLong {
                len: data.len(),
                max: wire::MAX_CFG_REPLY,
            });
        }
        self.send_ctrl_xid(
            xid,
            Msg::CfgUtilReply {
                code,
                status,
                data: data.to_vec(),
            },
        )
    }

    pub(crate) fn xid(&mut self) -> u64 {
        self.next_xid += 1;
        self.next_xid
    }

    /// The next event, waiting up to `timeout` (`None`: for ever) for one: spins briefly,
    /// then sleeps on the CQ's eventfd and the stream. `Ok(None)` on timeout.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<Option<Event>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(e) = self.events.pop_front() {
                return Ok(Some(e));
            }
            match self.wait_progress(deadline, "an event") {
                Ok(()) => {}
                Err(Error::Timeout(_)) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Events already received, without waiting.
    pub fn try_event(&mut self) -> Result<Option<Event>> {
        if self.events.is_empty() {
            self.progress()?;
        }
        Ok(self.events.pop_front())
    }

    /// Whether events are queued.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Arms the CQ and makes progress once more: returns `true` if there is something to do
    /// now (do not sleep), `false` if the caller may sleep on [`Connection::wait_fds`].
    /// Pending replenishments are sent first: a side about to sleep sends what it holds.
    pub fn arm(&mut self) -> Result<bool> {
        self.send_updates()?;
        self.repost_data_recv(true)?;
        self.cq.arm();
        let n = self.progress()?;
        Ok(n > 0 || !self.events.is_empty())
    }

    /// After the caller's poll(2) woke: consumes the CQ's wakeup and checks the peer.
    pub fn woke(&mut self) -> Result<()> {
        let _ = self.cq.wait(Some(Duration::ZERO))?;
        self.liveness(true)?;
        self.progress().map(|_| ())
    }

    /// Makes progress until something happened, `deadline` passed (`Error::Timeout`) or the
    /// connection failed.
    pub(crate) fn wait_progress(
        &mut self,
        deadline: Option<Instant>,
        what: &'static str,
    ) -> Result<()> {
        // Spin a little: under load the next completion is microseconds away.
        for _ in 0..2000 {
            if self.progress()? > 0 || !self.events.is_empty() {
                return Ok(());
            }
            std::hint::spin_loop();
        }
        if self.arm()? {
            return Ok(());
        }
        let slice = Duration::from_millis(100);
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Err(Error::Timeout(what));
        }
        let wait = left.map_or(slice, |l| l.min(slice));
        let mut pfd = self.wait_fds().map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // SAFETY: two valid pollfd structs in our array, for the call's duration.
        let r = unsafe { libc::poll(pfd.as_mut_ptr(), 2, wait.as_millis() as i32) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::io("poll", e));
            }
        }
        self.woke()
    }

    /// Fails the connection: every later call returns `why`. The QPs go to the error state,
    /// so the peer can write nothing more into our pools.
    pub(crate) fn fail(&mut self, why: String) -> Error {
        if self.broken.is_none() {
            let err = qhca::QpAttr {
                state: Some(qhca::QpState::Err),
                ..Default::default()
            };
            let _ = self.ctrl.modify(&err);
            let _ = self.data.modify(&err);
            if let Some(s) = &self.stream {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            self.broken = Some(why.clone());
        }
        Error::Closed(why)
    }

    /// Checks the stream for the peer having gone: once in [`LIVENESS_POLLS`] calls, unless
    /// `now`. Counted, not timed: an idle spin reads no clock (on a guest whose clocksource the
    /// vDSO cannot read, each read would be a system call).
    pub(crate) fn liveness(&mut self, now: bool) -> Result<()> {
        if !now {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            if self.idle_polls % LIVENESS_POLLS != 0 {
                return Ok(());
            }
        }
        let Some(fd) = self.stream.as_ref().map(AsRawFd::as_raw_fd) else {
            return Ok(());
        };
        let mut b = [0u8; 1];
        // SAFETY: reads at most one byte into `b`; MSG_PEEK leaves it, MSG_DONTWAIT never
        // blocks.
        let r = unsafe {
            libc::recv(
                fd,
                b.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        let gone = match r {
            0 => true,
            r if r > 0 => false,
            _ => {
                let e = std::io::Error::last_os_error();
                e.kind() != std::io::ErrorKind::WouldBlock
                    && e.kind() != std::io::ErrorKind::Interrupted
            }
        };
        if gone {
            return Err(self.fail("the peer went away".into()));
        }
        Ok(())
    }
}

/// Sends `b` and reads as many bytes back on a blocking stream with timeouts.
fn exchange_bytes(stream: &mut TcpStream, b: &[u8; 16]) -> Result<[u8; 16]> {
    use std::io::{Read, Write};
    stream
        .write_all(b)
        .map_err(|e| Error::io("send the hello record", e))?;
    let mut r = [0u8; 16];
    stream
        .read_exact(&mut r)
        .map_err(|e| Error::io("receive the hello record", e))?;
    Ok(r)
}
