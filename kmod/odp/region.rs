// SPDX-License-Identifier: GPL-2.0

//! An on-demand-paged region ([`OdpMr`]): its record of the pages it mapped for the device, its
//! faults and prefetches, its invalidations and its teardown (see the parent module).

use super::*;

/// The fault a [`OdpMr::map`] answers: the `MAP_ODP` resumes it.
pub(super) struct Answer<'a> {
    token: u32,
    /// The start of the fault's current phase ([`Phase`]).
    clock: &'a mut Instant<Monotonic>,
}

/// One page of a region's record.
#[derive(Clone, Copy, Default)]
struct Entry {
    dma: u64,
    /// `pfn << 2 | writable << 1 | mapped`.
    bits: u64,
}

impl Entry {
    fn mapped(self) -> bool {
        self.bits & 1 != 0
    }

    fn writable(self) -> bool {
        self.bits & 2 != 0
    }

    fn pfn(self) -> u64 {
        self.bits >> 2
    }
}

/// `CHUNK` consecutive pages of a region's record.
struct Chunk {
    pages: KVec<Entry>,
    mapped: usize,
}

impl Chunk {
    fn new() -> Result<Self> {
        Ok(Self {
            pages: KVec::from_elem(Entry::default(), CHUNK, GFP_KERNEL)?,
            mapped: 0,
        })
    }
}

/// A sequential stream of faults in a region, which the fault service maps ahead of (as mlx5
/// prefetches behind a responder's fault): see [`OdpMr::read_ahead`].
#[derive(Default)]
struct Stream {
    /// Where the last fault began.
    last: u64,
    /// The end of what the stream mapped or queued for read-ahead.
    end: u64,
    /// How far past its fault the next sequential fault maps ahead: doubles with every
    /// sequential fault, up to `AHEAD_MAX`; 0 for no stream.
    window: u64,
}

struct State {
    /// Set once the device no longer has the region (deregistered, or the device stopped
    /// before): nothing is mapped or sent any more.
    dead: bool,
    /// The pages DMA-mapped and written into the device, by chunk (`vpn / CHUNK`). A page is
    /// recorded before the `MAP_ODP` that names it is sent, and unmapped only after the device
    /// invalidated it, destroyed the region, or was stopped.
    chunks: RBTree<u64, Chunk>,
}

/// An on-demand-paged memory region (see the module documentation).
///
/// # Invariants
///
/// Once `notifier` is set, the notifier's owner is this region, at its address in its `Arc`;
/// the notifier is removed ([`OdpMr::close`], or dropping it) before that memory is freed.
#[pin_data]
pub(crate) struct OdpMr {
    /// Declared first: dropped (removed) before the rest.
    notifier: SetOnce<OdpNotifier>,
    /// Set once by [`OdpMr::register`], before the region can be found or anything mapped.
    key: Atomic<u32>,
    pdn: u32,
    pub(super) uar: u32,
    access: u32,
    implicit: bool,
    /// The virtual range the region covers, `[start, end)`: what faults and invalidations are
    /// clipped to (the implicit region: the whole user address space).
    start: u64,
    end: u64,
    pub(super) ctx: Arc<Ctx>,
    dev: Arc<QhcaDevice>,
    #[pin]
    state: Mutex<State>,
    /// Only the context's fault worker takes it, and nothing under it.
    #[pin]
    stream: Mutex<Stream>,
}

impl OdpMr {
    /// Starts watching `[start, end)` of the calling process for a new region, not yet in the
    /// device ([`OdpMr::register`] puts it there). `implicit`: the device's region will be the
    /// implicit one (iova 0, `QHCA_ODP_IMPLICIT_LENGTH`), and `[start, end)` the whole user
    /// range. Called with no lock held: inserting the notifier may take the process's
    /// `mmap_lock`, under which `mmap` takes the bound-device lock.
    ///
    /// # Errors
    ///
    /// `ENOMEM`, or the notifier's errors (`EINVAL` for a range outside the address space).
    #[expect(clippy::too_many_arguments)]
    pub(crate) fn new(
        dev: &Arc<QhcaDevice>,
        ctx: &Arc<Ctx>,
        uar: u32,
        pdn: u32,
        access: u32,
        start: u64,
        end: u64,
        implicit: bool,
    ) -> Result<Arc<Self>> {
        let mr = Arc::pin_init(
            try_pin_init!(Self {
                notifier: SetOnce::new(),
                key: Atomic::new(0),
                pdn,
                uar,
                access,
                start,
                end,
                implicit,
                ctx: ctx.clone(),
                dev: dev.clone(),
                state <- new_mutex!(State {
                    dead: false,
                    chunks: RBTree::new(),
                }),
                stream <- new_mutex!(Stream::default()),
            }? Error),
            GFP_KERNEL,
        )?;
        let len = if implicit { 0 } else { end - start };
        // SAFETY: The owner is `mr`, at its final address inside the `Arc`; the notifier lives in
        // `mr.notifier` and is removed before `mr` is freed (type invariant of `OdpMr`: `close`,
        // or the field dropped first).
        let n = unsafe {
            OdpNotifier::new(
                start,
                len,
                Arc::as_ptr(&mr).cast::<c_void>(),
                NotifierOwner::Odp,
            )
        }?;
        // INVARIANT: the owner just registered is `mr`.
        mr.notifier.populate(n);
        Ok(mr)
    }

    /// REG_MR with no page list, then the region can be found by its key. The caller holds the
    /// bound-device lock and the context's objects (`exec` is the plain one: no region lock is
    /// held). Until this succeeded, nothing is mapped and no invalidation sends a command.
    ///
    /// # Errors
    ///
    /// What REG_MR returns, `ENOMEM` (then the region is deregistered again).
    pub(crate) fn register(self: &Arc<Self>, dev: &QhcaDevice) -> Result<u32> {
        let (iova, length) = if self.implicit {
            (0, uapi::QHCA_ODP_IMPLICIT_LENGTH)
        } else {
            (self.start, self.end - self.start)
        };
        dev.odp.mrs.lock().reserve(1, GFP_KERNEL)?;
        let args = uapi::qhca_cmd_reg_mr {
            uar: self.uar.to_le(),
            pdn: self.pdn.to_le(),
            iova: iova.to_le(),
            length: length.to_le(),
            access: self.access.to_le(),
            npages: 0,
            pages_addr: 0,
        };
        let raw = dev
            .exec(Cmd::new(uapi::QHCA_CMD_REG_MR).input_struct(&args))?
            .data[0];
        let key = u32::try_from(raw).map_err(|_| {
            dev_err!(dev.dev(), "device returned bad key {:#x}\n", raw);
            dev.declare_dead();
            EIO
        })?;
        self.key.store(key, Relaxed);
        dev.odp.add(self.clone()).inspect_err(|_| {
            let cmd = Cmd::new(uapi::QHCA_CMD_DEREG_MR)
                .input(0, self.uar.into())
                .input(1, key.into());
            // Nothing was mapped: a device that refuses to forget the region can do nothing
            // with it, but it is broken.
            if dev.exec(cmd).is_err() && !dev.cmdq.is_dead() {
                dev.declare_dead();
            }
        })?;
        Ok(key)
    }

    /// The region's key (0 until registered in the device).
    pub(crate) fn key(&self) -> u32 {
        self.key.load(Relaxed)
    }

    /// True if `[addr, addr + len)` is inside the region.
    pub(crate) fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.start && addr.checked_add(len).is_some_and(|e| e <= self.end)
    }

    /// Bytes from `addr` that one step (one `MAP_ODP`) covers, at most `len`.
    pub(super) fn step_len(&self, addr: u64, len: u64) -> u64 {
        let page_end = ((addr >> PAGE_SHIFT) + CHUNK as u64) << PAGE_SHIFT;
        len.min(page_end - addr)
    }

    /// Handles a fault: the pages of `[va, va + length)` clipped to the region, at most
    /// `CHUNK` of them.
    /// The `MAP_ODP` also resumes the fault (`QHCA_CMD_FLAG_RESUME`): returns that RESUME's
    /// status as the device reported it, and the end of the range mapped. `clock` is the start
    /// of the fault's current phase (see [`Phase`]), moved on as the phases end.
    pub(super) fn fault(
        &self,
        dev: &QhcaDevice,
        pf: &PageFault,
        write: bool,
        clock: &mut Instant<Monotonic>,
    ) -> Result<(u64, u64)> {
        if pf.va < self.start || pf.va >= self.end {
            return Err(EFAULT);
        }
        let len = u64::from(pf.length.max(1)).min(self.end - pf.va);
        let answer = Answer {
            token: pf.token,
            clock,
        };
        // All the access needs, up to a chunk's end (the rest is read ahead once the QP runs
        // again, [`OdpMr::read_ahead`]): on this device a fault costs far more than mapping a
        // few more pages before its RESUME.
        let step = self.step_len(pf.va, len);
        let resumed = self.map(dev, pf.va, step, write, Some(answer))?;
        Ok((resumed, pf.va + step))
    }

    /// After a fault at `va` whose pages up to `mapped` are now mapped and whose access needs
    /// them up to `needed`: the range to read ahead next, `[from, from + len)`. That is the rest
    /// of the access and, if the fault continues the region's stream (it lies between the
    /// stream's last fault and the end of what the stream mapped or read ahead), a window past
    /// it that doubles with each sequential fault, up to `AHEAD_MAX`. Any other fault starts a
    /// new stream.
    pub(super) fn read_ahead(&self, va: u64, mapped: u64, needed: u64) -> Option<(u64, u64)> {
        let needed = needed.min(self.end);
        let mut st = self.stream.lock();
        let to = if st.window == 0 || va < st.last || va > st.end {
            *st = Stream {
                last: va,
                end: mapped,
                window: needed.saturating_sub(va).max(1 << PAGE_SHIFT),
            };
            needed
        } else {
            st.last = va;
            st.window = (st.window * 2).min(AHEAD_MAX);
            needed.max(mapped.saturating_add(st.window).min(self.end))
        };
        let from = st.end.max(mapped);
        if to <= from {
            return None;
        }
        st.end = to;
        Some((from, to - from))
    }

    /// One step of a read-ahead: at most `AHEAD_STEP` pages from `addr`, within the step
    /// [`OdpMr::map`] takes. Returns the bytes done.
    pub(super) fn read_ahead_step(
        &self,
        dev: &QhcaDevice,
        addr: u64,
        len: u64,
        write: bool,
    ) -> Result<u64> {
        let page_end = ((addr >> PAGE_SHIFT) + AHEAD_STEP) << PAGE_SHIFT;
        let step = self.step_len(addr, len.min(page_end - addr));
        let t = Instant::<Monotonic>::now();
        self.map(dev, addr, step, write, None)?;
        dev.odp.stats.phase(Phase::Ahead, t);
        add(
            &dev.odp.stats.readahead_pages,
            step.div_ceil(1 << PAGE_SHIFT),
        );
        Ok(step)
    }

    /// `ADVISE_MR` with `QHCA_ADVISE_FLAG_FLUSH`: maps `[addr, addr + len)` (inside the region)
    /// now, step by step.
    ///
    /// # Errors
    ///
    /// `EFAULT` if a page cannot be faulted in, `EINTR` if the caller is killed, `ENOENT` if the
    /// region is deregistered meanwhile, `EIO`/`ENODEV` if the device is gone.
    pub(crate) fn prefetch(
        &self,
        dev: &QhcaDevice,
        mut addr: u64,
        mut len: u64,
        write: bool,
    ) -> Result {
        add(&dev.odp.stats.prefetches, 1);
        while len != 0 {
            if shim::fatal_signal_pending() {
                return Err(EINTR);
            }
            let step = self.step_len(addr, len);
            self.map(dev, addr, step, write, None)
                .map(drop)
                .map_err(|e| {
                    if e == EPERM || e == ESRCH || e == EBUSY {
                        EFAULT
                    } else {
                        e
                    }
                })?;
            addr += step;
            len -= step;
        }
        Ok(())
    }

    /// `ADVISE_MR` without the flag: queues the prefetch with the region's context, whose
    /// fault service runs it a step at a time.
    ///
    /// # Errors
    ///
    /// `EAGAIN` if the context has too many queued, `ENODEV` once the device is shut down.
    pub(crate) fn prefetch_async(
        self: &Arc<Self>,
        dev: &QhcaDevice,
        addr: u64,
        len: u64,
        write: bool,
    ) -> Result {
        if dev.odp.is_closed() {
            return Err(ENODEV);
        }
        add(&dev.odp.stats.prefetches, 1);
        let job = Prefetch {
            mr: self.clone(),
            addr,
            len,
            write,
        };
        self.ctx.faults.push_prefetch(job)?;
        service::kick(&self.ctx);
        Ok(())
    }

    /// Maps the pages of `[addr, addr + len)` (inside the region, at most `CHUNK` pages) into the
    /// device: resolve, then under the lock check that no invalidation began, DMA-map, record,
    /// `MAP_ODP`. Retries when an invalidation raced. With `answer` (a fault), the `MAP_ODP`
    /// resumes the fault too, and what it returns is that RESUME's status (see
    /// [`OdpMr::fault`]); else 0.
    pub(super) fn map(
        &self,
        dev: &QhcaDevice,
        addr: u64,
        len: u64,
        write: bool,
        mut answer: Option<Answer<'_>>,
    ) -> Result<u64> {
        let token = answer.as_ref().map(|a| a.token);
        let mut tick = |phase| {
            if let Some(a) = answer.as_mut() {
                *a.clock = dev.odp.stats.phase(phase, *a.clock);
            }
        };
        let first = addr >> PAGE_SHIFT;
        let last = (addr + len.max(1) - 1) >> PAGE_SHIFT;
        let n = (last - first + 1) as usize;
        if n > CHUNK || !self.contains(addr, len.max(1)) {
            return Err(EINVAL);
        }
        if write && self.access & uapi::QHCA_ACCESS_LOCAL_WRITE == 0 {
            return Err(EPERM);
        }
        let notifier = self.notifier.as_ref().ok_or(ENOENT)?;
        let mut pages = KVec::from_elem(FaultedPage::default(), n, GFP_KERNEL)?;
        // Pages whose mapping went from read-only to both ways in one step: (index, old DMA).
        let mut upgraded: KVec<(usize, u64)> = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..MAX_RETRIES {
            if self.state.lock().dead {
                return Err(ENOENT);
            }
            let seq = notifier.fault(first << PAGE_SHIFT, &mut pages, write)?;
            tick(Phase::Resolve);
            // The chunks the range needs, allocated here: nothing allocates under the lock.
            let mut spare: [Option<(u64, RBTreeNode<u64, Chunk>)>; 2] = [None, None];
            for (i, c) in [first / CHUNK as u64, last / CHUNK as u64]
                .into_iter()
                .enumerate()
            {
                if (i == 0 || c != first / CHUNK as u64)
                    && self.state.lock().chunks.get(&c).is_none()
                {
                    spare[i] = Some((c, RBTreeNode::new(c, Chunk::new()?, GFP_KERNEL)?));
                }
            }
            let done = dev.with_bound(|bound| {
                let mut mailbox = CoherentBox::<[u64]>::zeroed_slice(bound, n, GFP_KERNEL)?;
                let mut st = self.state.lock();
                if st.dead {
                    return Err(ENOENT);
                }
                if notifier.retry(seq) {
                    return Ok(None);
                }
                for (k, node) in spare.iter_mut().filter_map(Option::take) {
                    if st.chunks.get(&k).is_none() {
                        // A chunk of the device's translations: the user's share first.
                        self.ctx.quota.charge(dev, Pool::OdpChunks, 1)?;
                        st.chunks.insert(node);
                    }
                }
                let writable_mr = self.access & uapi::QHCA_ACCESS_LOCAL_WRITE != 0;
                let mut added = 0u64;
                let mut res = Ok(());
                for (i, page) in pages.iter().enumerate() {
                    let vpn = first + i as u64;
                    let chunk = st.chunks.get_mut(&(vpn / CHUNK as u64)).ok_or(ENOMEM)?;
                    let e = &mut chunk.pages[(vpn % CHUNK as u64) as usize];
                    let writable = writable_mr && page.writable();
                    if e.mapped() {
                        if e.pfn() != page.pfn() {
                            // An invalidation clears a page before its mapping changes, and
                            // none began since the fault: this cannot be.
                            dev_err!(
                                dev.dev(),
                                "ODP key {:#x}: page {:#x} changed without an invalidation\n",
                                self.key(),
                                vpn
                            );
                            res = Err(EIO);
                            break;
                        }
                        if writable && !e.writable() {
                            // Mapped for the device to read only; now it may write: a mapping
                            // both ways, and the old one goes once the device has the new.
                            // SAFETY: as below.
                            match unsafe { notifier.dma_map(bound, *page, true) } {
                                Ok(dma) => {
                                    // Room: at most one per page of the step.
                                    let _ = upgraded.push_within_capacity((i, e.dma));
                                    e.dma = dma;
                                    e.bits |= 2;
                                }
                                Err(err) => {
                                    res = Err(err);
                                    break;
                                }
                            }
                        }
                    } else {
                        // SAFETY: `page` came from `notifier.fault` with sequence `seq`, which
                        // `retry` just found current under `state`, the lock this region's
                        // invalidations take; we still hold it, and the record below makes the
                        // next invalidation of the page unmap it first.
                        match unsafe { notifier.dma_map(bound, *page, writable) } {
                            Ok(dma) => {
                                *e = Entry {
                                    dma,
                                    bits: page.pfn() << 2 | u64::from(writable) << 1 | 1,
                                };
                                chunk.mapped += 1;
                                added += 1;
                            }
                            Err(err) => {
                                res = Err(err);
                                break;
                            }
                        }
                    }
                    let flags = u64::from(uapi::QHCA_ODP_PRESENT)
                        | if e.writable() {
                            u64::from(uapi::QHCA_ODP_WRITABLE)
                        } else {
                            0
                        };
                    mailbox[i] = (e.dma | flags).to_le();
                }
                add(&dev.odp.stats.pages_mapped, added);
                MAPPED_PAGES.add(added as i64, Relaxed);
                tick(Phase::Map);
                let res = res.and_then(|()| {
                    let mailbox: Coherent<[u64]> = mailbox.into();
                    let mut cmd = Cmd::new(uapi::QHCA_CMD_MAP_ODP)
                        .input(0, self.uar.into())
                        .input(1, self.key().into())
                        .input(2, first)
                        .input(3, n as u64)
                        .input(4, mailbox.dma_address());
                    if let Some(token) = token {
                        cmd = cmd.flags(uapi::QHCA_CMD_FLAG_RESUME).input_ext(token);
                    }
                    dev.exec_no_report(cmd)
                        .map(|out| if token.is_some() { out.data[0] } else { 0 })
                });
                tick(Phase::MapCmd);
                // The pages mapped both ways now: the device has the new mappings (MAP_ODP
                // completed), so the old ones go; or it never got them (an error before, a
                // refused MAP_ODP) or uses nothing any more (stopped), so the new ones go and
                // the record keeps the old.
                for &(i, old) in upgraded.iter() {
                    let vpn = first + i as u64;
                    let Some(chunk) = st.chunks.get_mut(&(vpn / CHUNK as u64)) else {
                        continue;
                    };
                    let e = &mut chunk.pages[(vpn % CHUNK as u64) as usize];
                    let (gone, writable) = if res.is_ok() {
                        (old, false)
                    } else {
                        let new = core::mem::replace(&mut e.dma, old);
                        e.bits &= !2;
                        (new, true)
                    };
                    // SAFETY: `gone` is a live mapping of `e.pfn()` made by `dma_map` with
                    // `writable` and recorded nowhere else now; the device does not use it
                    // (see above); the page is still the process's: we hold the lock its
                    // invalidation takes, and no invalidation began since the fault.
                    unsafe { shim::odp_dma_unmap(dev.dev(), gone, e.pfn(), writable) };
                }
                upgraded.clear();
                res.map(Some)
            });
            dev.check_death();
            if let Some(resumed) = done? {
                return Ok(resumed);
            }
        }
        Err(EBUSY)
    }

    /// The notifier's callback: see the module documentation. Returns false only when it may
    /// not sleep (the kernel then retries in a context that may).
    fn invalidate(&self, inv: &Invalidation, blockable: bool) -> bool {
        if !blockable {
            return false;
        }
        let mut st = self.state.lock();
        inv.set_seq();
        let start = inv.start.max(self.start);
        let end = inv.end.min(self.end);
        if start < end {
            let tell = !st.dead && !self.dev.is_stopped();
            self.unmap_locked(&mut st, start >> PAGE_SHIFT, (end - 1) >> PAGE_SHIFT, tell);
            drop(st);
            if tell && self.dev.is_stopped() {
                self.dev.odp.report_death_later(&self.dev);
            }
        }
        true
    }

    /// Unmaps every recorded page in `[first, last]` (page numbers): first `INVALIDATE_ODP` for
    /// them (if `tell`), and if the device does not confirm, it is stopped before anything is
    /// unmapped. Called under the region's lock (`st`).
    ///
    /// The chunks are visited by key, each found afresh from the one after the last visited:
    /// the range may start or end anywhere (inside a chunk, in a gap between chunks, beyond the
    /// record), and removing an emptied chunk must not step back to an earlier one.
    fn unmap_locked(&self, st: &mut State, first: u64, last: u64, tell: bool) {
        let dev = &*self.dev;
        let per = CHUNK as u64;
        let last_chunk = last / per;
        let mut next = first / per;
        while first <= last && next <= last_chunk {
            let Some(mut cur) = st.chunks.cursor_lower_bound_mut(&next) else {
                break;
            };
            let (&c, chunk) = cur.current_mut();
            if c > last_chunk {
                break;
            }
            // `first / per <= next <= c <= last / per`: the range meets this chunk, so both
            // bounds fall inside it.
            let base = c * per;
            let lo = (first.max(base) - base) as usize;
            let hi = (last.min(base + per - 1) - base) as usize;
            let Some(range) = chunk.pages.get_mut(lo..=hi) else {
                break;
            };
            let lo_m = range.iter().position(|e| e.mapped());
            let hi_m = range.iter().rposition(|e| e.mapped());
            if let (Some(a), Some(b)) = (lo_m, hi_m) {
                if tell && !dev.is_stopped() {
                    let cmd = Cmd::new(uapi::QHCA_CMD_INVALIDATE_ODP)
                        .input(0, self.uar.into())
                        .input(1, self.key().into())
                        .input(2, base + (lo + a) as u64)
                        .input(3, (b - a + 1) as u64);
                    match dev.exec_no_report(cmd) {
                        Ok(_) => add(&dev.odp.stats.invalidations, 1),
                        Err(e) => {
                            // The device may still use the pages: stop it before they go.
                            dev_err!(
                                dev.dev(),
                                "INVALIDATE_ODP of key {:#x} failed ({:?}); stopping the device\n",
                                self.key(),
                                e
                            );
                            dev.stop_no_report();
                        }
                    }
                }
                let mut gone = 0usize;
                for e in range[a..=b].iter_mut().filter(|e| e.mapped()) {
                    // SAFETY: `e` records a live mapping of `e.pfn()` for this device, made by
                    // `map` and unmapped only here, where it is cleared; the device no longer
                    // uses it (INVALIDATE_ODP completed, the region is gone from the device, or
                    // the device is stopped); and the page is still the process's: this runs in
                    // its invalidation, or before the notifier is removed.
                    unsafe { shim::odp_dma_unmap(dev.dev(), e.dma, e.pfn(), e.writable()) };
                    *e = Entry::default();
                    gone += 1;
                }
                chunk.mapped = chunk.mapped.saturating_sub(gone);
                add(&dev.odp.stats.pages_unmapped, gone as u64);
                MAPPED_PAGES.fetch_sub(gone as i64, Relaxed);
            }
            if chunk.mapped == 0 {
                drop(cur.remove_current().1);
                self.ctx.quota.uncharge(Pool::OdpChunks, 1);
            }
            // `c <= u64::MAX / per`: no overflow.
            next = c + 1;
        }
    }

    /// Deregisters the region: `DEREG_MR` (unless `alive` is false: the device is stopped and
    /// forgot it), then everything is unmapped, then the notifier removed. The caller holds the
    /// bound-device lock and the context's objects, not this region's lock.
    ///
    /// # Errors
    ///
    /// What `DEREG_MR` returned while the device stays alive: the region is then left as it was
    /// (registered, watched, its pages mapped).
    pub(crate) fn close(&self, dev: &QhcaDevice, alive: bool) -> Result {
        let res = {
            let mut st = self.state.lock();
            let res = if st.dead || !alive || dev.is_stopped() {
                Ok(())
            } else {
                dereg_locked(dev, self.uar, self.key())
            };
            if res.is_ok() {
                st.dead = true;
                self.unmap_locked(&mut st, 0, u64::MAX >> PAGE_SHIFT, false);
            }
            res
        };
        dev.check_death();
        res?;
        dev.odp.forget(self.key());
        if let Some(n) = self.notifier.as_ref() {
            n.remove();
        }
        Ok(())
    }
}

/// The notifier's callback (`qhca_shim.c`, `qhca_odp_invalidate`).
///
/// # Safety
///
/// `owner` is the owner given to [`OdpNotifier::new`] (an `OdpMr`, alive while the notifier is
/// inserted), `o` the notifier the callback runs for, and `cur_seq` its sequence.
#[no_mangle]
unsafe extern "C" fn qhca_rust_odp_invalidate(
    owner: *const kernel::ffi::c_void,
    o: *mut shim::QhcaOdp,
    start: u64,
    end: u64,
    cur_seq: kernel::ffi::c_ulong,
    blockable: bool,
) -> bool {
    // SAFETY: By the type invariant of `OdpMr`, the owner of an inserted notifier is a live
    // `OdpMr` (the notifier is removed before it is freed), and the callback runs only while
    // the notifier is inserted.
    let mr = unsafe { &*owner.cast::<OdpMr>() };
    // SAFETY: `o` and `cur_seq` are the callback's own (caller's promise); `inv` does not
    // outlive this call.
    let inv = unsafe { Invalidation::new(o, start, end, cur_seq) };
    mr.invalidate(&inv, blockable)
}
