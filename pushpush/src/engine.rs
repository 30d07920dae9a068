// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The connection's engine: completions, control messages, pushes and flushes.

use std::time::Instant;

use qhca::{SendWr, Wc, WcOpcode, WcStatus, WrOp};

use crate::conn::{
    Connection, Inflight, TAG_CTRL_RECV, TAG_CTRL_SEND, TAG_DATA_RECV, TAG_DATA_SEND, TAG_MASK,
};
use crate::pool::{Flush, LocalState, RemotePool};
use crate::types::{Delivery, Event};
use crate::wire::{self, ElemRef, Imm, Indication, Msg, PoolDesc, MAX_MSG};
use crate::{Error, Result, RETURNED};

/// Data-channel receives reposted together.
pub(crate) const REPOST_BATCH: u32 = 16;

/// A data-channel receive: no buffer (a WRITE WITH IMMEDIATE consumes it with no payload), so
/// every one is the same.
const DATA_RECVS: [qhca::RecvWr<'static>; 64] = [qhca::RecvWr {
    wr_id: TAG_DATA_RECV,
    sges: &[],
}; 64];

/// Marks the plain WRITEs of [`Connection::bench_plain_writes`].
const BENCH: u64 = 1 << 40;

/// Pools of the peer's this side keeps track of, at most (a peer that advertises more is
/// refused: the bookkeeping is ours to bound).
const MAX_PEER_POOLS: usize = 1024;
/// Elements over all of them.
const MAX_PEER_ELEMS: u64 = 1 << 20;

impl Connection {
    /// Polls the CQ once and handles what it held; returns how many completions. Fails (and
    /// closes the connection) on a failed work request or a protocol violation.
    pub(crate) fn progress(&mut self) -> Result<usize> {
        self.check()?;
        let mut wcs = [Wc::default(); 32];
        let n = self.cq.poll(&mut wcs);
        for wc in &wcs[..n] {
            if let Err(e) = self.on_wc(wc) {
                return Err(match e {
                    Error::Closed(_) => e,
                    other => self.fail(other.to_string()),
                });
            }
        }
        self.drain_ctrl_queue()?;
        if n == 0 {
            self.liveness(false)?;
        }
        Ok(n)
    }

    fn on_wc(&mut self, wc: &Wc) -> Result<()> {
        if wc.status != WcStatus::Success {
            let what = match wc.wr_id & TAG_MASK {
                TAG_CTRL_SEND => "a control SEND",
                TAG_CTRL_RECV => "a control receive",
                TAG_DATA_SEND => "a data-channel WRITE",
                _ => "a data-channel receive",
            };
            return Err(Error::Protocol(format!("{what} failed: {:?}", wc.status)));
        }
        let low = wc.wr_id & !TAG_MASK;
        match wc.wr_id & TAG_MASK {
            TAG_CTRL_SEND => {
                self.ctrl_slots.push(low as u32);
                Ok(())
            }
            TAG_CTRL_RECV => {
                if wc.opcode != WcOpcode::Recv {
                    return Err(Error::Protocol(format!(
                        "{:?} on the control channel",
                        wc.opcode
                    )));
                }
                let bytes = self
                    .ctrl_rx
                    .to_vec(low as usize * MAX_MSG, (wc.byte_len as usize).min(MAX_MSG));
                self.post_ctrl_recv(low as u32)?;
                self.stats.ctrl_received += 1;
                let f = wire::decode(&bytes).map_err(|e| Error::Protocol(e.to_string()))?;
                self.on_msg(f.xid, f.msg)
            }
            TAG_DATA_RECV => {
                let imm = match (wc.opcode, wc.imm) {
                    (WcOpcode::RecvRdmaWithImm, Some(imm)) => imm,
                    (op, _) => {
                        return Err(Error::Protocol(format!("{op:?} on the data channel")));
                    }
                };
                self.repost_data_recv(false)?;
                let ind = Imm::decode(imm);
                if ind.len != wc.byte_len {
                    return Err(Error::Protocol(format!(
                        "immediate {imm:#010x} says {} bytes, the WRITE had {}",
                        ind.len, wc.byte_len
                    )));
                }
                self.consume(ind)
            }
            TAG_DATA_SEND if low & BENCH != 0 => {
                self.bench_done += 1;
                Ok(())
            }
            TAG_DATA_SEND => self.write_done(),
            _ => Err(Error::Protocol(format!(
                "completion of unknown wr_id {:#x}",
                wc.wr_id
            ))),
        }
    }

    /// One data-channel receive was consumed: repost them [`REPOST_BATCH`] at a time (one
    /// doorbell), or all now (`now`: before the side sleeps). Pools never advertise more than
    /// `data_depth - REPOST_BATCH` elements, so a WRITE WITH IMMEDIATE always finds one.
    pub(crate) fn repost_data_recv(&mut self, now: bool) -> Result<()> {
        if !now {
            self.data_consumed += 1;
        }
        if self.data_consumed == 0 || (!now && self.data_consumed < REPOST_BATCH) {
            return Ok(());
        }
        // All alike, so posted from one constant list: no allocation on the data path (setup's
        // `data_depth` receives go DATA_RECVS.len() to a doorbell).
        while self.data_consumed > 0 {
            let n = (self.data_consumed as usize).min(DATA_RECVS.len());
            self.data.post_recv(&DATA_RECVS[..n])?;
            self.data_consumed -= n as u32;
        }
        Ok(())
    }

    /// The peer says it wrote `ind`: it must be an element of ours it was allowed to write.
    fn consume(&mut self, ind: Indication) -> Result<()> {
        let id = self.id;
        let Some(p) = self.local.get_mut(&ind.at.pool_ref) else {
            return Err(Error::Protocol(format!(
                "indication for pool {} which this side does not have",
                ind.at.pool_ref
            )));
        };
        if p.state == LocalState::Closed {
            return Err(Error::Protocol(format!(
                "indication for pool {} after it was flushed",
                ind.at.pool_ref
            )));
        }
        let ok = p.advertised.get(ind.at.elem as usize) == Some(&true);
        if !ok {
            return Err(Error::Protocol(format!(
                "indication for element {} of pool {}, which was not advertised or is consumed",
                ind.at.elem, ind.at.pool_ref
            )));
        }
        if ind.len > p.desc.elem_size {
            return Err(Error::Protocol(format!(
                "indication of {} bytes for an element of {}",
                ind.len, p.desc.elem_size
            )));
        }
        p.advertised[ind.at.elem as usize] = false;
        p.delivered += 1;
        self.stats.delivered += 1;
        self.events.push_back(Event::Data(Delivery::new(
            id,
            ind.at,
            ind.len,
            p.desc.context,
        )));
        Ok(())
    }

    fn on_msg(&mut self, xid: u64, msg: Msg) -> Result<()> {
        match msg {
            Msg::BufferRecvPool(pools) => pools.into_iter().try_for_each(|d| self.peer_pool(d)),
            Msg::BufferRecvPoolGet {
                elem_count,
                elem_size,
            } => self.grant(elem_count, elem_size),
            Msg::BufferRecvPoolUpdate(elems) => {
                for e in elems {
                    let ok = self
                        .remote
                        .get_mut(&e.pool_ref)
                        .is_some_and(|p| p.replenish(e.elem));
                    if !ok {
                        return Err(Error::Protocol(format!(
                            "update for element {} of pool {}, which this side had not written",
                            e.elem, e.pool_ref
                        )));
                    }
                }
                Ok(())
            }
            Msg::BufferPoolFlushRequest(refs) => refs
                .into_iter()
                .try_for_each(|r| self.flush_request(xid, r)),
            Msg::BufferPoolFlushReply(refs) => {
                refs.into_iter().try_for_each(|r| self.flush_reply(r))
            }
            Msg::SendData(d) => {
                self.events.push_back(Event::SendData(d));
                Ok(())
            }
            Msg::BufferRdmaIndicate(v) => v.into_iter().try_for_each(|i| self.consume(i)),
            Msg::CfgUtilRequest { code, data } => {
                self.events.push_back(Event::CfgRequest { xid, code, data });
                Ok(())
            }
            Msg::CfgUtilReply { code, status, data } => {
                self.events.push_back(Event::CfgReply {
                    xid,
                    code,
                    status,
                    data,
                });
                Ok(())
            }
        }
    }

    /// The peer advertises a pool.
    fn peer_pool(&mut self, d: PoolDesc) -> Result<()> {
        if d.pool_ref >= crate::MAX_POOL_REF || self.remote.contains_key(&d.pool_ref) {
            return Err(Error::Protocol(format!(
                "pool {} advertised twice or out of range",
                d.pool_ref
            )));
        }
        let elems: u64 = self
            .remote
            .values()
            .map(|p| u64::from(p.desc.elem_count))
            .sum();
        if self.remote.len() >= MAX_PEER_POOLS || elems + u64::from(d.elem_count) > MAX_PEER_ELEMS {
            return Err(Error::Protocol("the peer advertises too many pools".into()));
        }
        self.remote.insert(d.pool_ref, RemotePool::new(d));
        self.pool_get_pending = false;
        self.peer_initial = self.peer_initial.saturating_sub(1);
        Ok(())
    }

    /// The peer asks for a pool of a shape (BufferRecvPoolGet): granted within the limits of
    /// [`crate::Config`], silently refused beyond them (the message asks for no reply).
    fn grant(&mut self, count: u32, size: u32) -> Result<()> {
        if self.granted >= self.cfg.grant_pools {
            return Ok(());
        }
        let shape = crate::PoolShape { count, size };
        match self.new_pool(shape, 0) {
            Ok(d) => {
                self.granted += 1;
                self.advertise(vec![d])
            }
            Err(Error::Config(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// A BufferPoolFlushRequest naming `r`: with [`RETURNED`] set, the peer returns a pool of
    /// ours; without, it withdraws one of its own.
    fn flush_request(&mut self, xid: u64, r: u32) -> Result<()> {
        let pool_ref = r & !RETURNED;
        if r & RETURNED != 0 {
            let Some(p) = self.local.get_mut(&pool_ref) else {
                return Err(Error::Protocol(format!(
                    "the peer returns pool {pool_ref}, not ours"
                )));
            };
            if p.state == LocalState::Closed {
                return Err(Error::Protocol(format!("pool {pool_ref} returned twice")));
            }
            p.state = LocalState::Closed;
            // The peer has forgotten the pool: releases not yet sent must not name it.
            self.pending_updates.retain(|e| e.pool_ref != pool_ref);
            self.send_ctrl_xid(xid, Msg::BufferPoolFlushReply(vec![r]))?;
            return self.free_if_done(pool_ref);
        }
        let Some(p) = self.remote.get_mut(&pool_ref) else {
            return Err(Error::Protocol(format!(
                "the peer withdraws pool {pool_ref}, unknown"
            )));
        };
        match p.flush {
            Flush::No => p.flush = Flush::PeerAsked(xid),
            // We are returning it already: the peer's reply to that ends it for both.
            Flush::WeReturn { .. } => return Ok(()),
            Flush::PeerAsked(_) => {
                return Err(Error::Protocol(format!("pool {pool_ref} withdrawn twice")));
            }
        }
        self.settle_flush(pool_ref)
    }

    /// A BufferPoolFlushReply to one of our requests.
    fn flush_reply(&mut self, r: u32) -> Result<()> {
        let pool_ref = r & !RETURNED;
        if r & RETURNED != 0 {
            // Our return of a pool of the peer's is done.
            let ok = self
                .remote
                .get(&pool_ref)
                .is_some_and(|p| p.flush == Flush::WeReturn { asked: true });
            if !ok {
                return Err(Error::Protocol(format!(
                    "unasked flush reply for pool {pool_ref}"
                )));
            }
            self.remote.remove(&pool_ref);
            self.events.push_back(Event::PeerPoolGone(pool_ref));
            return Ok(());
        }
        // Our withdrawal of a pool of ours is done: the peer writes it no more.
        let ok = self
            .local
            .get(&pool_ref)
            .is_some_and(|p| p.state == LocalState::Withdrawing);
        if !ok {
            return Err(Error::Protocol(format!(
                "unasked flush reply for pool {pool_ref}"
            )));
        }
        if let Some(p) = self.local.get_mut(&pool_ref) {
            p.state = LocalState::Closed;
        }
        self.free_if_done(pool_ref)
    }

    /// A pool of the peer's being flushed: once no write into it is in flight, reply (it
    /// withdrew it) or ask (we return it).
    fn settle_flush(&mut self, pool_ref: u32) -> Result<()> {
        let Some(p) = self.remote.get_mut(&pool_ref) else {
            return Ok(());
        };
        if p.inflight > 0 {
            return Ok(());
        }
        match p.flush {
            Flush::PeerAsked(xid) => {
                self.remote.remove(&pool_ref);
                self.events.push_back(Event::PeerPoolGone(pool_ref));
                self.send_ctrl_xid(xid, Msg::BufferPoolFlushReply(vec![pool_ref]))
            }
            Flush::WeReturn { asked: false } => {
                p.flush = Flush::WeReturn { asked: true };
                let xid = self.xid();
                self.send_ctrl_xid(xid, Msg::BufferPoolFlushRequest(vec![pool_ref | RETURNED]))
            }
            _ => Ok(()),
        }
    }

    /// Withdraws a pool of ours: the peer is asked to stop using it
    /// (BufferPoolFlushRequest); once it replies, and every delivery of the pool is released,
    /// the pool is deregistered and freed ([`Event::PoolFreed`]).
    pub fn flush_pool(&mut self, pool_ref: u32) -> Result<()> {
        self.check()?;
        match self.local.get_mut(&pool_ref) {
            Some(p) if p.state == LocalState::Open => p.state = LocalState::Withdrawing,
            _ => return Err(Error::Config("no such open pool of ours")),
        }
        // Releases not yet sent for it would re-advertise what is being withdrawn.
        self.pending_updates.retain(|e| e.pool_ref != pool_ref);
        let xid = self.xid();
        self.send_ctrl_xid(xid, Msg::BufferPoolFlushRequest(vec![pool_ref]))
    }

    /// Returns a pool of the peer's: no new push goes into it; once those in flight complete
    /// the peer is asked to free it ([`Event::PeerPoolGone`] when it has).
    pub fn return_pool(&mut self, pool_ref: u32) -> Result<()> {
        self.check()?;
        match self.remote.get_mut(&pool_ref) {
            Some(p) if p.flush == Flush::No => p.flush = Flush::WeReturn { asked: false },
            _ => return Err(Error::Config("no such pool of the peer's in use")),
        }
        self.settle_flush(pool_ref)
    }

    /// A data-channel write completed (they complete in posting order).
    fn write_done(&mut self) -> Result<()> {
        let Some(w) = self.inflight.pop_front() else {
            return Err(Error::Protocol(
                "a WRITE completion with none in flight".into(),
            ));
        };
        self.staging.free(w.staged);
        if w.indicate {
            self.send_ctrl(Msg::BufferRdmaIndicate(vec![Indication {
                at: w.at,
                len: w.len,
            }]))?;
        }
        if let Some(p) = self.remote.get_mut(&w.at.pool_ref) {
            p.inflight -= 1;
            if p.flush != Flush::No {
                self.settle_flush(w.at.pool_ref)?;
            }
        }
        Ok(())
    }

    /// Copies `data` into a free element of the peer's (the smallest that fits) with one RDMA
    /// WRITE WITH IMMEDIATE naming it, or a WRITE plus a BufferRDMAIndicate when the immediate
    /// cannot. Waits, until `deadline` (`None`: as long as the peer lives), while no element is
    /// free; if no pool of the peer's is big enough, asks for one (BufferRecvPoolGet) once.
    /// Returns the element written.
    pub fn push(&mut self, data: &[u8], deadline: Option<Instant>) -> Result<ElemRef> {
        loop {
            if let Some(at) = self.try_push(data)? {
                return Ok(at);
            }
            self.stats.push_waits += 1;
            self.wait_progress(deadline, "a free element of the peer's")?;
        }
    }

    /// [`Connection::push`] without waiting: `None` when it would have to.
    pub fn try_push(&mut self, data: &[u8]) -> Result<Option<ElemRef>> {
        self.check()?;
        if data.len() > self.staging.size() || data.len() > wire::MAX_ELEM_SIZE as usize {
            return Err(Error::TooLong {
                len: data.len(),
                max: self.staging.size().min(wire::MAX_ELEM_SIZE as usize),
            });
        }
        if !self.window_free()? {
            return Ok(None);
        }
        let Some(pool_ref) = self.pick(data.len())? else {
            self.progress()?;
            return Ok(None);
        };
        let Some((off, staged)) = self.staging.alloc(data.len()) else {
            self.progress()?;
            return Ok(None);
        };
        self.staging.mr.write_at(off, data);
        let sge = self.staging.mr.sge(off, data.len() as u32);
        self.post_push(pool_ref, sge, data.len() as u32, staged)
            .map(Some)
    }

    /// [`Connection::push`] without the copy: `len` bytes at `offset` of `mr`, a region of this
    /// connection's protection domain ([`Connection::reg_buf`]), go straight from there. The
    /// bytes must not change until the push completes ([`Connection::pushes_in_flight`] back to
    /// what it was before it). A region of another PD fails the WRITE, and the connection.
    pub fn push_from(
        &mut self,
        mr: &qhca::Mr<'_>,
        offset: usize,
        len: usize,
        deadline: Option<Instant>,
    ) -> Result<ElemRef> {
        loop {
            if let Some(at) = self.try_push_from(mr, offset, len)? {
                return Ok(at);
            }
            self.stats.push_waits += 1;
            self.wait_progress(deadline, "a free element of the peer's")?;
        }
    }

    /// [`Connection::push_from`] without waiting.
    pub fn try_push_from(
        &mut self,
        mr: &qhca::Mr<'_>,
        offset: usize,
        len: usize,
    ) -> Result<Option<ElemRef>> {
        self.check()?;
        if offset.checked_add(len).is_none_or(|e| e > mr.len()) {
            return Err(Error::Config("push_from: outside the region"));
        }
        if len > wire::MAX_ELEM_SIZE as usize {
            return Err(Error::TooLong {
                len,
                max: wire::MAX_ELEM_SIZE as usize,
            });
        }
        if !self.window_free()? {
            return Ok(None);
        }
        let Some(pool_ref) = self.pick(len)? else {
            self.progress()?;
            return Ok(None);
        };
        self.post_push(pool_ref, mr.sge(offset, len as u32), len as u32, 0)
            .map(Some)
    }

    /// Whether a data-channel write may be posted now (after one round of progress if not).
    fn window_free(&mut self) -> Result<bool> {
        if self.inflight.len() >= self.cfg.send_window as usize {
            self.progress()?;
        }
        Ok(self.inflight.len() < self.cfg.send_window as usize)
    }

    /// Posts the write of a push from `sge` into a free element of `pool_ref`.
    fn post_push(
        &mut self,
        pool_ref: u32,
        sge: qhca::Sge,
        len: u32,
        staged: usize,
    ) -> Result<ElemRef> {
        let p = self.remote.get_mut(&pool_ref).expect("picked");
        let at = p.take();
        let raddr = p.desc.addr + u64::from(at.elem) * u64::from(p.desc.elem_size);
        let rkey = p.desc.rkey;
        let imm = Imm::encode(at, len);
        let op = match imm {
            Some(imm) => WrOp::WriteImm { raddr, rkey, imm },
            None => WrOp::Write { raddr, rkey },
        };
        let sge = [sge];
        let sges: &[qhca::Sge] = if len == 0 { &[] } else { &sge };
        self.data
            .post_send(&[SendWr::new(TAG_DATA_SEND, op, sges)])?;
        self.inflight.push_back(Inflight {
            at,
            len,
            staged,
            indicate: imm.is_none(),
        });
        if imm.is_some() {
            self.stats.pushed_imm += 1;
        } else {
            self.stats.pushed_indicated += 1;
        }
        self.stats.pushed_bytes += u64::from(len);
        Ok(at)
    }

    /// Pushes posted and not yet completed.
    pub fn pushes_in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Registers `len` bytes (zeroed) in this connection's protection domain, for
    /// [`Connection::push_from`].
    pub fn reg_buf(&self, len: usize) -> Result<qhca::MrBuf> {
        Ok(self.pd.reg_mr_buf(len, qhca::Access::LOCAL_WRITE)?)
    }

    /// The peer's pool to push `len` bytes into: the smallest elements that fit with one
    /// free. `None` if none is free now; if no pool could ever take it, one BufferRecvPoolGet.
    fn pick(&mut self, len: usize) -> Result<Option<u32>> {
        let best = self
            .remote
            .values()
            .filter(|p| p.takes(len))
            .min_by_key(|p| (p.desc.elem_size, p.desc.pool_ref))
            .map(|p| p.desc.pool_ref);
        if best.is_some() {
            return Ok(best);
        }
        let fits = self
            .remote
            .values()
            .any(|p| p.flush == Flush::No && p.desc.elem_size as usize >= len);
        // Before the peer's first pools are all here, nothing is missing yet: wait for them.
        if !fits && !self.pool_get_pending && self.peer_initial == 0 {
            self.pool_get_pending = true;
            self.stats.pool_gets += 1;
            let size = (len.max(256).next_power_of_two() as u32).min(wire::MAX_ELEM_SIZE);
            self.send_ctrl(Msg::BufferRecvPoolGet {
                elem_count: self.cfg.get_count,
                elem_size: size,
            })?;
        }
        Ok(None)
    }

    /// For benchmarks: `n` plain RDMA WRITEs of `len` bytes on this connection's data channel
    /// (the same QP, window and CQ as pushes) into the first pool of the peer's big enough,
    /// element 0, over and over: no indication, no replenishment, nothing for the peer's CPU.
    /// Returns how long they took.
    #[doc(hidden)]
    pub fn bench_plain_writes(&mut self, len: usize, n: u64) -> Result<std::time::Duration> {
        self.check()?;
        let p = self
            .remote
            .values()
            .find(|p| p.desc.elem_size as usize >= len && len <= self.staging.size())
            .ok_or(Error::Config("no pool of the peer's takes that length"))?;
        let (raddr, rkey) = (p.desc.addr, p.desc.rkey);
        // Pushes still in flight complete first (their staging is reused below).
        let until = Instant::now() + self.cfg.timeout;
        while !self.inflight.is_empty() {
            self.wait_progress(Some(until), "the pushes in flight")?;
        }
        let sge = [self.staging.mr.sge(0, len as u32)];
        let window = u64::from(self.cfg.send_window);
        self.bench_done = 0;
        let mut posted = 0u64;
        let t0 = Instant::now();
        while self.bench_done < n {
            while posted < n && posted - self.bench_done < window {
                self.data.post_send(&[SendWr::new(
                    TAG_DATA_SEND | BENCH,
                    WrOp::Write { raddr, rkey },
                    &sge,
                )])?;
                posted += 1;
            }
            self.progress()?;
        }
        Ok(t0.elapsed())
    }

    /// Sends a control message with a fresh transaction context.
    pub(crate) fn send_ctrl(&mut self, msg: Msg) -> Result<()> {
        let xid = self.xid();
        self.send_ctrl_xid(xid, msg)
    }

    /// Sends a control message now if a send slot is free, else queues it (in order).
    pub(crate) fn send_ctrl_xid(&mut self, xid: u64, msg: Msg) -> Result<()> {
        msg.validate()
            .map_err(|e| Error::Protocol(format!("building {:?}: {e}", msg.function())))?;
        self.ctrl_queue.push_back((xid, msg));
        self.drain_ctrl_queue()
    }

    pub(crate) fn drain_ctrl_queue(&mut self) -> Result<()> {
        while !self.ctrl_queue.is_empty() {
            let Some(slot) = self.ctrl_slots.pop() else {
                return Ok(());
            };
            let (xid, msg) = self.ctrl_queue.pop_front().expect("not empty");
            let mut b = Vec::with_capacity(msg.encoded_len());
            msg.encode(xid, &mut b);
            let off = slot as usize * MAX_MSG;
            self.ctrl_tx.write_at(off, &b);
            let sge = [self.ctrl_tx.sge(off, b.len() as u32)];
            self.ctrl.post_send(&[SendWr::new(
                TAG_CTRL_SEND | u64::from(slot),
                WrOp::Send,
                &sge,
            )])?;
            self.stats.ctrl_sent += 1;
        }
        Ok(())
    }
}

/// Hooks for tests that play a hostile or broken peer (`features = ["test-hooks"]`): they
/// bypass every check this side makes on what it sends.
#[cfg(feature = "test-hooks")]
impl Connection {
    /// Sends `bytes` as one control message, as they are.
    pub fn inject_ctrl(&mut self, bytes: &[u8]) -> Result<()> {
        assert!(bytes.len() <= MAX_MSG);
        self.progress()?;
        let slot = self.ctrl_slots.pop().expect("a free control slot");
        let off = slot as usize * MAX_MSG;
        self.ctrl_tx.write_at(off, bytes);
        let sge = [self.ctrl_tx.sge(off, bytes.len().max(1) as u32)];
        self.ctrl.post_send(&[SendWr::new(
            TAG_CTRL_SEND | u64::from(slot),
            WrOp::Send,
            &sge[..usize::from(!bytes.is_empty())],
        )])?;
        Ok(())
    }

    /// WRITE WITH IMMEDIATE `imm` of `data` into element `elem` of the peer's pool
    /// `pool_ref`, whether it is free or not.
    pub fn inject_write_imm(
        &mut self,
        pool_ref: u32,
        elem: u32,
        imm: u32,
        data: &[u8],
    ) -> Result<()> {
        self.progress()?;
        let p = self
            .remote
            .get_mut(&pool_ref)
            .expect("a pool of the peer's");
        let raddr = p.desc.addr + u64::from(elem) * u64::from(p.desc.elem_size);
        let rkey = p.desc.rkey;
        p.inflight += 1;
        let (off, staged) = self.staging.alloc(data.len()).expect("staging free");
        self.staging.mr.write_at(off, data);
        let sge = [self.staging.mr.sge(off, data.len() as u32)];
        self.data.post_send(&[SendWr::new(
            TAG_DATA_SEND,
            WrOp::WriteImm { raddr, rkey, imm },
            &sge,
        )])?;
        self.inflight.push_back(Inflight {
            at: ElemRef { pool_ref, elem },
            len: data.len() as u32,
            staged,
            indicate: false,
        });
        Ok(())
    }

    /// Bytes of a pool of ours, as they are now.
    pub fn pool_bytes(&self, pool_ref: u32, offset: usize, len: usize) -> Vec<u8> {
        self.local[&pool_ref].mr.to_vec(offset, len)
    }
}
