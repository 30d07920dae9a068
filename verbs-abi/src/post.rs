// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The post path of `ibv_post_send`, `ibv_post_recv` and `ibv_post_srq_recv`: a list of
//! libibverbs requests converted in batches and written into a QP's rings, or an SRQ's, with one
//! doorbell store per batch, no system call. Shared by the libraries that give programs qhca QPs:
//! each says how it finds the objects a request names ([`Objects`]) and posts through its queues
//! ([`Queues`], [`RecvQueue`]).

use core::ffi::c_int;
use core::fmt::Arguments;
use core::ptr::{self, null_mut};

use qhca::{
    inc_rkey, Access, MwBind, PostError, QpLayout, QpType, RecvWr, SendWr, Sge, SrqQueue, UdDest,
    WorkQueues, WrOp,
};

use crate::access::mw_access_from_ibv;

use crate::ffi::*;
use crate::wr::{send_flags, send_op, sges, Refused};

/// Work requests converted and handed to the queues at once (one doorbell store each).
pub const BATCH: usize = 8;

/// A receive queue as the post path writes it: a QP's, or a shared one.
pub trait RecvQueue {
    /// SGEs per receive request.
    fn max_recv_sge(&self) -> u32;
    /// Posts receive requests in order; on a refusal, those before it are posted.
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError>;
}

/// A QP's two queues as the post path writes them.
pub trait Queues: RecvQueue {
    /// RC or UD.
    fn qp_type(&self) -> QpType;
    /// The ring layout (SGEs and inline bytes per request).
    fn layout(&self) -> &QpLayout;
    /// Posts send requests in order; on a refusal, those before it are posted.
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError>;
}

impl RecvQueue for WorkQueues {
    fn max_recv_sge(&self) -> u32 {
        WorkQueues::layout(self).max_sge
    }
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        WorkQueues::post_recv(self, wrs)
    }
}

impl Queues for WorkQueues {
    fn qp_type(&self) -> QpType {
        WorkQueues::qp_type(self)
    }
    fn layout(&self) -> &QpLayout {
        WorkQueues::layout(self)
    }
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        WorkQueues::post_send(self, wrs)
    }
}

impl RecvQueue for qhca::Qp {
    fn max_recv_sge(&self) -> u32 {
        qhca::Qp::layout(self).max_sge
    }
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        qhca::Qp::post_recv(self, wrs)
    }
}

impl Queues for qhca::Qp {
    fn qp_type(&self) -> QpType {
        qhca::Qp::qp_type(self)
    }
    fn layout(&self) -> &QpLayout {
        qhca::Qp::layout(self)
    }
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        qhca::Qp::post_send(self, wrs)
    }
}

impl RecvQueue for SrqQueue {
    fn max_recv_sge(&self) -> u32 {
        SrqQueue::layout(self).max_sge
    }
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        SrqQueue::post_recv(self, wrs)
    }
}

impl RecvQueue for qhca::Srq {
    fn max_recv_sge(&self) -> u32 {
        qhca::Srq::layout(self).max_sge
    }
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        qhca::Srq::post_recv(self, wrs)
    }
}

/// How a library finds its objects behind the pointers a request carries. Each answers `None`
/// for an object that is not the library's (of another device, or freed).
pub trait Objects {
    /// The UD destination through address handle `ah`.
    ///
    /// # Safety
    ///
    /// `ah` is NULL or a live address handle of the program's.
    unsafe fn ud_dest(&self, ah: *mut ibv_ah, qpn: u32, qkey: u32) -> Option<UdDest>;
    /// The current key of window `mw`.
    ///
    /// # Safety
    ///
    /// `mw` is NULL or a live window of the program's.
    unsafe fn window_key(&self, mw: *mut ibv_mw) -> Option<u32>;
    /// The L_Key of region `mr`.
    ///
    /// # Safety
    ///
    /// `mr` is NULL or a live region of the program's.
    unsafe fn region_lkey(&self, mr: *mut ibv_mr) -> Option<u32>;
    /// A BIND_MW of window `mw` was posted: its key is `key` from now on (`ibv_mw.rkey`).
    ///
    /// # Safety
    ///
    /// `mw` is a window [`Objects::window_key`] knew.
    unsafe fn bound(&self, mw: *mut ibv_mw, key: u32);
}

/// A QP's queues (or an SRQ) with scratch room for the scatter/gather lists and inline data of
/// one batch: what a post needs, under the QP's (or the SRQ's) lock.
pub struct Posting<Q> {
    pub queues: Q,
    sges: Vec<Sge>,
    inline: Vec<u8>,
}

impl<Q: Queues> Posting<Q> {
    pub fn new(queues: Q) -> Self {
        let l = queues.layout();
        let (sges, inline) = (l.max_sge as usize, l.max_inline as usize);
        Posting {
            queues,
            sges: vec![Sge::default(); BATCH * sges],
            inline: vec![0; BATCH * inline],
        }
    }

    /// `ibv_post_send`: posts the list at `wr`; on failure sets `*bad` (if not NULL) to the first
    /// request not posted and returns its errno. `sig_all`: the QP signals every request.
    /// `debug` hears why a request was refused.
    ///
    /// # Safety
    ///
    /// `wr` is the program's NULL-terminated list of live requests (their SGEs, address
    /// handles, windows and regions live, as ibv_post_send(3) requires); `bad` is NULL or room
    /// for a request's address.
    pub unsafe fn post_send(
        &mut self,
        objs: &impl Objects,
        sig_all: bool,
        wr: *mut ibv_send_wr,
        bad: *mut *mut ibv_send_wr,
        debug: fn(Arguments<'_>),
    ) -> c_int {
        // A list of one request (the common case: perftest, most programs) is converted and
        // posted on its own: no batch arrays, no chunking (the batch path cost a post of one
        // 640 instructions on the host, against 250 for the `qhca` crate's post of the same
        // request; this one about 330).
        // SAFETY: the caller's promise.
        if !wr.is_null() && unsafe { (*wr).next.is_null() } {
            // SAFETY: the caller's promise.
            unsafe { self.post_one(objs, sig_all, wr, bad, debug) }
        } else {
            // SAFETY: the caller's promise.
            unsafe { self.post_sends::<BATCH>(objs, sig_all, wr, bad, debug) }
        }
    }

    /// `post_send` of the list of one request `wr`.
    ///
    /// # Safety
    ///
    /// As `post_send`, with `wr` not NULL.
    #[inline(always)]
    unsafe fn post_one(
        &mut self,
        objs: &impl Objects,
        sig_all: bool,
        wr: *mut ibv_send_wr,
        bad: *mut *mut ibv_send_wr,
        debug: fn(Arguments<'_>),
    ) -> c_int {
        let Posting {
            queues,
            sges,
            inline,
        } = self;
        let ud = queues.qp_type() == QpType::Ud;
        let l = queues.layout();
        let (max_sge, max_inline) = (l.max_sge as usize, l.max_inline as usize);
        // SAFETY: the caller's promise: the program's live request.
        let w = unsafe { &*wr };
        // SAFETY: the request's objects are live (ibv_post_send(3)).
        let converted = unsafe {
            convert(
                objs,
                w,
                ud,
                sig_all,
                &mut sges[..max_sge],
                &mut inline[..max_inline],
            )
        };
        let (posted, refusal) = match converted {
            Ok(s) => {
                let posted = queues.post_send(core::slice::from_ref(&s));
                if let (Ok(()), WrOp::BindMw(b)) = (&posted, s.op) {
                    // SAFETY: the bind member, which BIND_MW uses; a window `convert` found
                    // through `objs`.
                    unsafe { objs.bound(w.__bindgen_anon_2.bind_mw.mw, b.new_key) };
                }
                (posted, None)
            }
            Err(r) => (Ok(()), Some(r)),
        };
        // SAFETY: the caller's promise for `bad`.
        unsafe { batch_end("ibv_post_send", posted, refusal, &[wr], wr, bad, debug) }.unwrap_or(0)
    }

    /// `post_send` in batches of up to `N` requests, one doorbell store each.
    ///
    /// # Safety
    ///
    /// As `post_send`.
    unsafe fn post_sends<const N: usize>(
        &mut self,
        objs: &impl Objects,
        sig_all: bool,
        wr: *mut ibv_send_wr,
        bad: *mut *mut ibv_send_wr,
        debug: fn(Arguments<'_>),
    ) -> c_int {
        let Posting {
            queues,
            sges: sge_buf,
            inline: inl_buf,
        } = self;
        let ud = queues.qp_type() == QpType::Ud;
        let max_sge = queues.layout().max_sge as usize;
        let max_inline = queues.layout().max_inline as usize;
        let mut cur = wr;
        while !cur.is_null() {
            let mut wrs = [SendWr::new(0, WrOp::Send, &[]); N];
            let mut heads = [null_mut::<ibv_send_wr>(); N];
            let mut binds = [(null_mut::<ibv_mw>(), 0u32); N];
            let mut sge_chunks = sge_buf.chunks_mut(max_sge.max(1));
            let mut inl_chunks = inl_buf.chunks_mut(max_inline.max(1));
            let mut n = 0;
            let mut refusal = None;
            while n < N && !cur.is_null() {
                // SAFETY: the program's list of live requests, NULL-terminated.
                let w = unsafe { &*cur };
                let sge_chunk = sge_chunks.next().unwrap_or_default();
                let inl_chunk = inl_chunks.next().unwrap_or_default();
                // SAFETY: the request's objects are live (ibv_post_send(3)).
                match unsafe { convert(objs, w, ud, sig_all, sge_chunk, inl_chunk) } {
                    Ok(s) => {
                        if let WrOp::BindMw(b) = s.op {
                            // SAFETY: the bind member, which BIND_MW uses.
                            binds[n] = (unsafe { w.__bindgen_anon_2.bind_mw.mw }, b.new_key);
                        }
                        wrs[n] = s;
                        heads[n] = cur;
                        n += 1;
                        cur = w.next;
                    }
                    Err(r) => {
                        refusal = Some(r);
                        break;
                    }
                }
            }
            let posted = queues.post_send(&wrs[..n]);
            let k = match &posted {
                Ok(()) => n,
                Err(PostError { index, .. }) => *index,
            };
            for &(mw, key) in binds[..k].iter().filter(|(mw, _)| !mw.is_null()) {
                // SAFETY: a window `convert` found through `objs` (the others are NULL).
                unsafe { objs.bound(mw, key) };
            }
            // SAFETY: the program passes room for the failed request's address (or NULL).
            if let Some(errno) =
                unsafe { batch_end("ibv_post_send", posted, refusal, &heads, cur, bad, debug) }
            {
                return errno;
            }
        }
        0
    }

    /// `ibv_bind_mw` of a type 1 window: one BIND_MW request with no data, posted as
    /// `ibv_post_send` would, and on success the window's next key in `mw->rkey`. A length of 0
    /// unbinds it.
    ///
    /// # Safety
    ///
    /// `mw` and `bind` are NULL or the program's live window and bind request; the region the
    /// request names (if its length is not 0) is live.
    pub unsafe fn bind_mw(
        &mut self,
        objs: &impl Objects,
        sig_all: bool,
        mw: *mut ibv_mw,
        bind: *const ibv_mw_bind,
        debug: fn(Arguments<'_>),
    ) -> c_int {
        if bind.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's promise.
        let (b, one) = unsafe { (&*bind, !mw.is_null() && (*mw).type_ == IBV_MW_TYPE_1) };
        let req = if one {
            // SAFETY: the caller's promise.
            unsafe { bind_request(objs, mw, b) }
        } else {
            Err(Refused(
                "ibv_bind_mw of a window that is not a type 1 window of qhca's",
            ))
        };
        let flags = req.and_then(|r| Ok((r, send_flags(b.send_flags, sig_all)?)));
        let ((op, key), flags) = match flags {
            Ok(x) => x,
            Err(r) => {
                debug(format_args!("ibv_bind_mw: {}", r.0));
                return libc::EINVAL;
            }
        };
        match self
            .queues
            .post_send(&[SendWr::new(b.wr_id, op, &[]).with_flags(flags)])
        {
            Ok(()) => {
                // SAFETY: a window `bind_request` found through `objs`.
                unsafe { objs.bound(mw, key) };
                0
            }
            Err(e) => {
                debug(format_args!("ibv_bind_mw: {e}"));
                e.errno() as c_int
            }
        }
    }
}

impl<Q: RecvQueue> Posting<Q> {
    /// A receive queue alone (an SRQ): scratch room for SGEs, none for inline data.
    pub fn for_recv(queues: Q) -> Self {
        let sges = queues.max_recv_sge() as usize;
        Posting {
            queues,
            sges: vec![Sge::default(); BATCH * sges],
            inline: Vec::new(),
        }
    }

    /// `ibv_post_recv` (and `ibv_post_srq_recv`), as `post_send`.
    ///
    /// # Safety
    ///
    /// `wr` is the program's NULL-terminated list of live requests; `bad` is NULL or room for
    /// a request's address.
    pub unsafe fn post_recv(
        &mut self,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
        debug: fn(Arguments<'_>),
    ) -> c_int {
        // SAFETY: the caller's promise.
        if !wr.is_null() && unsafe { (*wr).next.is_null() } {
            // SAFETY: the caller's promise.
            unsafe { self.post_recvs::<1>(wr, bad, debug) }
        } else {
            // SAFETY: the caller's promise.
            unsafe { self.post_recvs::<BATCH>(wr, bad, debug) }
        }
    }

    /// `post_recv` in batches of up to `N` requests, as `post_sends`.
    ///
    /// # Safety
    ///
    /// As `post_recv`.
    unsafe fn post_recvs<const N: usize>(
        &mut self,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
        debug: fn(Arguments<'_>),
    ) -> c_int {
        let Posting {
            queues,
            sges: sge_buf,
            ..
        } = self;
        let max_sge = queues.max_recv_sge() as usize;
        let mut cur = wr;
        while !cur.is_null() {
            let mut wrs = [RecvWr {
                wr_id: 0,
                sges: &[],
            }; N];
            let mut heads = [null_mut::<ibv_recv_wr>(); N];
            let mut chunks = sge_buf.chunks_mut(max_sge.max(1));
            let mut n = 0;
            let mut refusal = None;
            while n < N && !cur.is_null() {
                // SAFETY: the program's list of live requests, NULL-terminated.
                let w = unsafe { &*cur };
                let out = chunks.next().unwrap_or_default();
                let list: &[ibv_sge] = match usize::try_from(w.num_sge) {
                    // SAFETY: the program passes `num_sge` entries at `sg_list`.
                    Ok(k) if k > 0 => unsafe { core::slice::from_raw_parts(w.sg_list, k) },
                    _ => &[],
                };
                match sges(list, out) {
                    Ok(k) => {
                        wrs[n] = RecvWr {
                            wr_id: w.wr_id,
                            sges: &out[..k],
                        };
                        heads[n] = cur;
                        n += 1;
                        cur = w.next;
                    }
                    Err(r) => {
                        refusal = Some(r);
                        break;
                    }
                }
            }
            let posted = queues.post_recv(&wrs[..n]);
            // SAFETY: the program passes room for the failed request's address (or NULL).
            if let Some(errno) =
                unsafe { batch_end("ibv_post_recv", posted, refusal, &heads, cur, bad, debug) }
            {
                return errno;
            }
        }
        0
    }
}

/// The BIND_MW of `ibv_bind_mw`'s request `b` for window `mw`, and the window's key once
/// bound (the same index, the next tag).
///
/// # Safety
///
/// `mw` is the program's live window; `b`'s region is NULL or live.
unsafe fn bind_request(
    objs: &impl Objects,
    mw: *mut ibv_mw,
    b: &ibv_mw_bind,
) -> Result<(WrOp, u32), Refused> {
    // SAFETY: the caller's promise.
    let mw_key = unsafe { objs.window_key(mw) }
        .ok_or(Refused("ibv_bind_mw of a window that is not qhca's"))?;
    let info = b.bind_info;
    let (mr_key, access) = if info.length == 0 {
        (0, Access::NONE)
    } else {
        // SAFETY: the caller's promise.
        let lkey = unsafe { objs.region_lkey(info.mr) }
            .ok_or(Refused("ibv_bind_mw to a region that is not qhca's"))?;
        let access = mw_access_from_ibv(info.mw_access_flags)
            .map_err(|_| Refused("ibv_bind_mw: rights qhca's windows do not have"))?;
        (lkey, access)
    };
    let new_key = inc_rkey(mw_key);
    let op = WrOp::BindMw(MwBind {
        mw_key,
        new_key,
        mr_key,
        addr: info.addr,
        length: info.length,
        access: access.0,
    });
    Ok((op, new_key))
}

/// The end of one batch of a post: `None` if all of it was posted, else the errno, with
/// `*bad` set to the first request not posted (the queues' refusal at its index, or ours at
/// `cur`, the request that was being converted), as rdma-core's `bad_wr`.
///
/// # Safety
///
/// `bad` is NULL or room for a request's address.
unsafe fn batch_end<W>(
    verb: &str,
    posted: Result<(), PostError>,
    refusal: Option<Refused>,
    heads: &[*mut W],
    cur: *mut W,
    bad: *mut *mut W,
    debug: fn(Arguments<'_>),
) -> Option<c_int> {
    let (at, errno) = match (posted, refusal) {
        (Err(e), _) => {
            debug(format_args!("{verb}: {e}"));
            (heads[e.index], e.errno() as c_int)
        }
        (Ok(()), Some(r)) => {
            debug(format_args!("{verb}: {}", r.0));
            (cur, libc::EINVAL)
        }
        (Ok(()), None) => return None,
    };
    if !bad.is_null() {
        // SAFETY: the caller's promise.
        unsafe { *bad = at };
    }
    Some(errno)
}

/// One send request as the queues take it.
///
/// # Safety
///
/// `w` is the program's request, whose SGEs (inline), address handle, window and region are
/// live.
#[inline]
unsafe fn convert<'a>(
    objs: &impl Objects,
    w: &ibv_send_wr,
    ud: bool,
    sig_all: bool,
    sge_out: &'a mut [Sge],
    inl_out: &'a mut [u8],
) -> Result<SendWr<'a>, Refused> {
    // SAFETY: the caller's promise: the program's request, whose members for its opcode are
    // set (ibv_post_send(3)), and BIND_MW's window and region live.
    let op = unsafe { send_op(w, || bind_keys(objs, w)) }?;
    let flags = send_flags(w.send_flags, sig_all)?;
    let list: &[ibv_sge] = match usize::try_from(w.num_sge) {
        // SAFETY: the program passes `num_sge` entries at `sg_list`.
        Ok(n) if n > 0 => unsafe { core::slice::from_raw_parts(w.sg_list, n) },
        _ => &[],
    };
    let mut s = if w.send_flags & IBV_SEND_INLINE != 0 && op.may_inline() {
        match list {
            // One buffer (the common inline request) is read where it is, when the request is
            // written into the ring, before the post returns: no copy into `inl_out` first.
            [one] if one.length != 0 && one.length as usize <= inl_out.len() => {
                // SAFETY: the caller's promise: the program's `length` readable bytes at
                // `addr`, which it leaves alone until ibv_post_send returns (ibv_post_send(3)
                // with IBV_SEND_INLINE); `'a` ends within this post.
                let data = unsafe {
                    core::slice::from_raw_parts(one.addr as *const u8, one.length as usize)
                };
                SendWr::inline(w.wr_id, op, data)
            }
            _ => {
                // SAFETY: the caller's promise.
                let n = unsafe { gather(list, inl_out)? };
                SendWr::inline(w.wr_id, op, &inl_out[..n])
            }
        }
    } else {
        let n = sges(list, sge_out)?;
        SendWr::new(w.wr_id, op, &sge_out[..n])
    };
    s = s.with_flags(flags);
    if ud {
        // SAFETY: the UD member, which a UD QP's sends use; its handle is live (the caller's
        // promise).
        let dest = unsafe {
            let u = w.wr.ud;
            objs.ud_dest(u.ah, u.remote_qpn, u.remote_qkey)
        };
        s = s.to_ud(dest.ok_or(Refused("a UD send needs a qhca address handle"))?);
    }
    Ok(s)
}

/// Copies the bytes `list` names into `out` (inline data); returns how many.
///
/// # Safety
///
/// Each entry names readable memory of the program (ibv_post_send(3) with IBV_SEND_INLINE).
unsafe fn gather(list: &[ibv_sge], out: &mut [u8]) -> Result<usize, Refused> {
    let mut n = 0usize;
    // A zero-length entry carries nothing, and its address may be anything (even NULL).
    for s in list.iter().filter(|s| s.length != 0) {
        let len = s.length as usize;
        let end = n
            .checked_add(len)
            .filter(|&e| e <= out.len())
            .ok_or(Refused("more inline data than the QP allows"))?;
        // SAFETY: the caller's promise for the source; `out[n..end]` is in bounds; a raw copy,
        // since the program's buffer is not ours to reference.
        unsafe { ptr::copy_nonoverlapping(s.addr as *const u8, out[n..end].as_mut_ptr(), len) };
        n = end;
    }
    Ok(n)
}

/// The window and region keys of a BIND_MW request.
///
/// # Safety
///
/// `wr` is the program's request; its window and region are NULL or live.
unsafe fn bind_keys(objs: &impl Objects, wr: &ibv_send_wr) -> Result<(u32, u32), Refused> {
    // SAFETY: the bind member, which BIND_MW uses.
    let b = unsafe { wr.__bindgen_anon_2.bind_mw };
    // SAFETY: the caller's promise.
    let mw_key = unsafe { objs.window_key(b.mw) }
        .ok_or(Refused("BIND_MW of a window that is not qhca's"))?;
    if b.bind_info.length == 0 {
        return Ok((mw_key, 0));
    }
    // SAFETY: the caller's promise.
    let lkey = unsafe { objs.region_lkey(b.bind_info.mr) }
        .ok_or(Refused("BIND_MW to a region that is not qhca's"))?;
    Ok((mw_key, lkey))
}

#[cfg(test)]
mod tests {
    use super::*;
    use qhca::PostReason;

    /// A receive queue (an SRQ, as the provider's) of `room` slots, 2 SGEs each, that records
    /// what it is given and how many times.
    #[derive(Default)]
    struct Fake {
        room: usize,
        posted: Vec<(u64, Vec<Sge>)>,
        calls: usize,
    }

    impl RecvQueue for Fake {
        fn max_recv_sge(&self) -> u32 {
            2
        }
        fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
            self.calls += 1;
            for (index, w) in wrs.iter().enumerate() {
                if self.posted.len() == self.room {
                    let n = self.room as u32;
                    let reason = PostReason::QueueFull {
                        outstanding: n,
                        depth: n,
                    };
                    return Err(PostError { index, reason });
                }
                self.posted.push((w.wr_id, w.sges.to_vec()));
            }
            Ok(())
        }
    }

    /// `n` linked requests of `num_sge` entries each, all over `sge`.
    fn list(n: usize, sge: &mut [ibv_sge], num_sge: usize) -> Vec<ibv_recv_wr> {
        let mut wrs: Vec<ibv_recv_wr> = (0..n)
            .map(|i| ibv_recv_wr {
                wr_id: 100 + i as u64,
                next: null_mut(),
                sg_list: sge.as_mut_ptr(),
                num_sge: num_sge as c_int,
            })
            .collect();
        for i in 1..n {
            let next: *mut ibv_recv_wr = &mut wrs[i];
            wrs[i - 1].next = next;
        }
        wrs
    }

    /// `ibv_post_srq_recv`'s path: a list goes in batches of [`BATCH`], one queue call each; a
    /// full queue stops it with `ENOMEM` and `bad_wr` at the first request not posted.
    #[test]
    fn a_receive_list_posts_in_batches_and_names_the_first_refused() {
        let mut sge = [ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        }; 3];
        let mut wrs = list(12, &mut sge, 2);
        let mut p = Posting::for_recv(Fake {
            room: 10,
            ..Fake::default()
        });
        let mut bad = null_mut();
        // SAFETY: a list of live requests over `sge`; `bad` is room for an address.
        let r = unsafe { p.post_recv(wrs.as_mut_ptr(), &mut bad, |_| {}) };
        assert_eq!(r, libc::ENOMEM);
        assert!(ptr::eq(bad, &wrs[10]));
        assert_eq!((p.queues.calls, p.queues.posted.len()), (2, 10));
        let want = Sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        };
        assert_eq!(p.queues.posted[9], (109, vec![want; 2]));

        // More SGEs than the queue takes: refused at that request, the ones before posted.
        let mut wrs = list(3, &mut sge, 2);
        wrs[1].num_sge = 3;
        let mut p = Posting::for_recv(Fake {
            room: 10,
            ..Fake::default()
        });
        // SAFETY: as above.
        let r = unsafe { p.post_recv(wrs.as_mut_ptr(), &mut bad, |_| {}) };
        assert_eq!(r, libc::EINVAL);
        assert!(ptr::eq(bad, &wrs[1]));
        assert_eq!(p.queues.posted.len(), 1);

        // One request, and an empty list.
        let mut wrs = list(1, &mut sge, 0);
        // SAFETY: as above; NULL `bad` is allowed.
        let r = unsafe { p.post_recv(wrs.as_mut_ptr(), null_mut(), |_| {}) };
        assert_eq!(r, 0);
        assert_eq!(p.queues.posted[1], (100, vec![]));
        // SAFETY: the empty list.
        assert_eq!(unsafe { p.post_recv(null_mut(), null_mut(), |_| {}) }, 0);
    }
}
