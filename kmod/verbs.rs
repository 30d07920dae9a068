// SPDX-License-Identifier: GPL-2.0

//! Verbs objects of one context: protection domains, memory regions ([`mr`]) and windows
//! ([`mw`]), completion queues ([`cq`]), queue pairs ([`qp`]), shared receive queues ([`srq`])
//! and address handles ([`ah`]), created and destroyed by the RDMA core's operations on a user
//! context of the `ib_device` ([`crate::ib`] translates the core's arguments to qhca's); the
//! core's destroys go through [`Verbs::destroy_or_stop`].
//!
//! The device holds the objects' state; the driver keeps, per context, what it must undo when the
//! context goes away (the handles, the pinned memory, the event routes) and enforces the destroy
//! order: a PD with MRs, windows, QPs, SRQs or AHs, or a CQ or an SRQ with QPs, is busy (and a
//! region with
//! windows bound to it, which only the device knows: binding is the process's own business).
//! Handles are the device's numbers (a QPN or AH number carries a generation above its index),
//! looked up only among the handles this context created.
//! Every argument is checked here before the device checks it again; the device's word is final.
//!
//! Each command runs in two steps: check the arguments and pin user memory, with no lock held;
//! then, under the bound-device lock and the context's objects, map, build the page list and run
//! the command.

mod ah;
mod cq;
mod kobjects;
mod mr;
mod mw;
mod qp;
mod srq;

use crate::{
    cmdq::Cmd, context::Ctx, device::QhcaDevice, kverbs::ring::KRing, limits::Pool,
    pagelist::PageList, shim::Umem, uapi,
};
use ah::Ah;
pub(crate) use ah::{av_to_le, check_av};
use cq::Cq;
use kernel::{
    device::{Bound, Device},
    dma::{Coherent, CoherentBox},
    io::Io,
    prelude::*,
    sync::{Arc, Mutex},
    transmute::FromBytes,
};
use mr::{Mr, MrMem};
use mw::Mw;
use qp::Qp;
use srq::Srq;

/// The memory of a CQ's or QP's rings: the process's, pinned (unpinned when dropped), or the
/// driver's own for a kernel object (freed when the last holder drops it). Either way it is
/// held by the object's entry here until the device forgot the object, and leaked with the
/// entry if the device may still use it.
pub(crate) enum RingMem {
    User(Umem),
    Kernel(Arc<KRing>),
}

impl RingMem {
    /// The page list of the memory, mapped for the device first if it is the process's.
    fn page_list(&mut self, bound: &Device<Bound>) -> Result<PageList> {
        match self {
            RingMem::User(mem) => {
                mem.map(bound)?;
                PageList::new(bound, mem)
            }
            RingMem::Kernel(ring) => PageList::of_ring(bound, ring),
        }
    }
}

/// What one context created. Kept under its context's mutex ([`Ctx::objs`]).
#[derive(Default)]
pub(crate) struct Objects {
    pds: KVec<u32>,
    mrs: KVec<Mr>,
    mws: KVec<Mw>,
    cqs: KVec<Cq>,
    qps: KVec<Qp>,
    srqs: KVec<Srq>,
    ahs: KVec<Ah>,
}

/// Sends one of the destroy commands (`in[0]` = context, `in[1]` = handle, `in[2]` = flags:
/// DEREG_MR's `QHCA_DEREG_MR_*`, 0 for the others).
///
/// Fault injection (debugfs `refuse_destroys`): answers `EINVAL` without asking the device, as a
/// device that refuses would, leaving the object in it.
pub(crate) fn destroy_in_device(
    dev: &QhcaDevice,
    uar: u32,
    op: u32,
    handle: u32,
    flags: u32,
) -> Result {
    if crate::debugfs::take(&crate::debugfs::REFUSE_DESTROYS) {
        return Err(EINVAL);
    }
    dev.exec(
        Cmd::new(op)
            .input(0, uar.into())
            .input(1, handle.into())
            .input(2, flags.into()),
    )?;
    Ok(())
}

/// A handle the device returned: a 24-bit number (what doorbells, CQEs and events can carry),
/// else the device is broken.
pub(crate) fn device_handle(dev: &QhcaDevice, what: &str, raw: u64) -> Result<u32> {
    match u32::try_from(raw) {
        Ok(h) if h <= uapi::QHCA_DB_QN_MASK || what == "key" => Ok(h),
        _ => {
            dev_err!(dev.dev(), "device returned bad {} {:#x}\n", what, raw);
            Err(EIO)
        }
    }
}

/// Takes a handle from a list, or `ENOENT`.
fn position<T>(v: &KVec<T>, f: impl Fn(&T) -> bool) -> Result<usize> {
    v.iter().position(f).ok_or(ENOENT)
}

fn page_align(x: u64) -> u64 {
    (x + u64::from(uapi::QHCA_PAGE_SIZE) - 1) & !(u64::from(uapi::QHCA_PAGE_SIZE) - 1)
}

/// One command's view of its context: an RDMA core operation's, with the arguments the core
/// checked and [`crate::ib`] translated.
pub(crate) struct Verbs<'a> {
    dev: &'a Arc<QhcaDevice>,
    ctx: &'a Arc<Ctx>,
    objs: &'a Mutex<Objects>,
    uar: u32,
}

impl<'a> Verbs<'a> {
    /// The view of context `ctx`, whose doorbell page is `uar`.
    pub(crate) fn of(ctx: &'a Arc<Ctx>, uar: u32) -> Self {
        Self {
            dev: &ctx.dev,
            ctx,
            objs: &ctx.objs,
            uar,
        }
    }

    /// Runs `f` under the bound-device lock and the context's objects.
    fn locked<R>(&self, f: impl FnOnce(&Device<Bound>, &mut Objects) -> Result<R>) -> Result<R> {
        self.dev.with_bound(|bound| f(bound, &mut self.objs.lock()))
    }

    /// Runs `f` (which creates one object of `pool`) with it charged to the context's user,
    /// given back if `f` fails.
    ///
    /// # Errors
    ///
    /// `EDQUOT` if the user holds its share of the device's pool already (see
    /// [`crate::limits`]), or what `f` returns.
    fn charged<R>(&self, pool: Pool, f: impl FnOnce() -> Result<R>) -> Result<R> {
        self.ctx.quota.charge(self.dev, pool, 1)?;
        f().inspect_err(|_| self.ctx.quota.uncharge(pool, 1))
    }

    /// Runs a create command and checks the handle the device returned. An unusable handle
    /// means a broken device, which may still use the object's memory: it is stopped before
    /// the caller frees that memory.
    fn create(&self, cmd: Cmd, what: &str) -> Result<u32> {
        let raw = self.dev.exec(cmd)?.data[0];
        device_handle(self.dev, what, raw).inspect_err(|_| self.dev.declare_dead())
    }

    /// A PD: its number.
    pub(crate) fn alloc_pd(&self) -> Result<u32> {
        self.locked(|_, objs| {
            objs.pds.reserve(1, GFP_KERNEL)?;
            let cmd = Cmd::new(uapi::QHCA_CMD_ALLOC_PD).input(0, self.uar.into());
            let pdn = self.charged(Pool::Pds, || self.create(cmd, "pdn"))?;
            objs.pds.push(pdn, GFP_KERNEL)?;
            Ok(pdn)
        })
    }

    /// Destroys object `h` with destroy command `op` (and its flags: DEREG_MR's
    /// `QHCA_DEREG_MR_*`, 0 for the others): `EBUSY` while something uses the object, `ENOENT`
    /// for one this context did not create; the device forgets it before its memory is unpinned.
    pub(crate) fn destroy(&self, op: u32, h: u32, flags: u32) -> Result {
        self.locked(|_, objs| {
            let busy = match op {
                uapi::QHCA_CMD_DEALLOC_PD => {
                    position(&objs.pds, |&p| p == h)?;
                    objs.mrs.iter().any(|m| m.pdn == h)
                        || objs.mws.iter().any(|w| w.pdn == h)
                        || objs.qps.iter().any(|q| q.pdn == h)
                        || objs.srqs.iter().any(|s| s.pdn == h)
                        || objs.ahs.iter().any(|x| x.pdn == h)
                }
                uapi::QHCA_CMD_DEREG_MR => {
                    position(&objs.mrs, |m| m.key == h)?;
                    false
                }
                uapi::QHCA_CMD_DEALLOC_MW => {
                    position(&objs.mws, |w| w.named_by(h))?;
                    false
                }
                uapi::QHCA_CMD_DESTROY_AH => {
                    position(&objs.ahs, |x| x.ah == h)?;
                    false
                }
                uapi::QHCA_CMD_DESTROY_CQ => {
                    position(&objs.cqs, |c| c.cqn == h)?;
                    objs.qps.iter().any(|q| q.send_cqn == h || q.recv_cqn == h)
                }
                uapi::QHCA_CMD_DESTROY_SRQ => {
                    position(&objs.srqs, |s| s.srqn == h)?;
                    objs.qps.iter().any(|q| q.srqn == h)
                }
                _ => {
                    position(&objs.qps, |q| q.qpn == h)?;
                    false
                }
            };
            if busy {
                return Err(EBUSY);
            }
            if op == uapi::QHCA_CMD_DEREG_MR {
                let pos = position(&objs.mrs, |m| m.key == h)?;
                let closed = match &objs.mrs[pos].mem {
                    MrMem::Odp(odp) => Some(odp.close(self.dev, true)),
                    MrMem::Watched(w) => Some(w.close(self.dev, true)),
                    MrMem::Pinned(_) | MrMem::Physical | MrMem::FastReg(_) => None,
                };
                if let Some(res) = closed {
                    res?;
                    self.forget(objs, op, h, false);
                    return Ok(());
                }
            }
            // DEREG_MR of a region with windows bound to it: the device says BAD_STATE (EBUSY)
            // unless the flags tell it to unbind them.
            destroy_in_device(self.dev, self.uar, op, h, flags)?;
            self.forget(objs, op, h, false);
            Ok(())
        })
    }

    /// Drops object `h` of destroy command `op` from the context, and its charge: what the
    /// driver holds of it goes (its pinned memory, its event route). The device forgot it, or
    /// is stopped. `close_mrs`: an on-demand or watched region is not closed yet (it is, here).
    fn forget(&self, objs: &mut Objects, op: u32, h: u32, close_mrs: bool) {
        let pool = match op {
            uapi::QHCA_CMD_DEALLOC_PD => {
                objs.pds.retain(|p| *p != h);
                Pool::Pds
            }
            uapi::QHCA_CMD_DEREG_MR => {
                for m in objs.mrs.iter().filter(|m| close_mrs && m.key == h) {
                    // Stopped or gone already: this only lets go of the host's side.
                    let _ = match &m.mem {
                        MrMem::Odp(odp) => odp.close(self.dev, false),
                        MrMem::Watched(w) => w.close(self.dev, false),
                        MrMem::Pinned(_) | MrMem::Physical | MrMem::FastReg(_) => Ok(()),
                    };
                }
                objs.mrs.retain(|m| m.key != h);
                Pool::Mrs
            }
            uapi::QHCA_CMD_DEALLOC_MW => {
                objs.mws.retain(|w| !w.named_by(h));
                Pool::Mws
            }
            uapi::QHCA_CMD_DESTROY_AH => {
                objs.ahs.retain(|x| x.ah != h);
                Pool::Ahs
            }
            uapi::QHCA_CMD_DESTROY_CQ => {
                self.ctx.remove_cq(h);
                objs.cqs.retain(|c| c.cqn != h);
                Pool::Cqs
            }
            uapi::QHCA_CMD_DESTROY_SRQ => {
                self.ctx.remove_srq(h);
                objs.srqs.retain(|s| s.srqn != h);
                Pool::Srqs
            }
            _ => {
                self.ctx.remove_qp(h);
                objs.qps.retain(|q| q.qpn != h);
                Pool::Qps
            }
        };
        self.ctx.quota.uncharge(pool, 1);
    }

    /// A destroy that must not fail (the RDMA core's: it frees the object afterwards, or warns
    /// and leaks it): as [`Verbs::destroy`], and if the device refuses, which leaves it
    /// holding an object that may name the process's memory, the device is stopped first
    /// (reset, bus mastering off); then the driver lets go of the object.
    pub(crate) fn destroy_or_stop(&self, op: u32, h: u32, flags: u32) {
        match self.destroy(op, h, flags) {
            Ok(()) => {}
            // Not (or no longer) this context's: unbind released it.
            Err(e) if e == ENOENT => {}
            Err(e) => {
                if !self.dev.is_stopped() {
                    dev_err!(
                        self.dev.dev(),
                        "destroy command {} for {:#x} failed ({:?}); stopping the device\n",
                        op,
                        h,
                        e
                    );
                    self.dev.declare_dead();
                }
                self.forget(&mut self.objs.lock(), op, h, true);
            }
        }
    }

    /// Runs a query command into a fresh buffer of `SIZE` bytes and returns what the device wrote.
    fn query<const SIZE: usize>(&self, bound: &Device<Bound>, cmd: Cmd) -> Result<[u8; SIZE]> {
        let out: Coherent<[u8]> =
            CoherentBox::<[u8]>::zeroed_slice(bound, SIZE, GFP_KERNEL)?.into();
        self.dev.exec(cmd.output(out.dma_address(), SIZE as u32))?;
        let mut bytes = [0u8; SIZE];
        (&out).copy_to_slice(&mut bytes);
        Ok(bytes)
    }

    /// QUERY_CTX: what the device counted for this context, in CPU byte order.
    ///
    /// # Errors
    ///
    /// `ENODEV` after unbind, `EIO` after a device failure or an answer that does not parse.
    pub(crate) fn ctx_stats(&self) -> Result<uapi::qhca_ctx_stats> {
        const SIZE: usize = core::mem::size_of::<uapi::qhca_ctx_stats>();
        let bytes = self.locked(|bound, _| {
            let cmd = Cmd::new(uapi::QHCA_CMD_QUERY_CTX).input(0, self.uar.into());
            self.query::<SIZE>(bound, cmd)
        })?;
        // Every field is a little-endian u64 counter.
        let mut cpu = [0u8; SIZE];
        for (o, i) in cpu.chunks_exact_mut(8).zip(bytes.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(i);
            o.copy_from_slice(&u64::from_le_bytes(w).to_ne_bytes());
        }
        uapi::qhca_ctx_stats::from_bytes_copy(&cpu).ok_or(EIO)
    }
}

impl Objects {
    /// How many PDs, regions, CQs, QPs and AHs there are.
    pub(crate) fn counts(&self) -> [usize; 5] {
        [
            self.pds.len(),
            self.mrs.len(),
            self.cqs.len(),
            self.qps.len(),
            self.ahs.len(),
        ]
    }

    /// Destroys everything, in dependency order (QPs, SRQs, AHs, CQs, windows, MRs, PDs). Called
    /// when the
    /// context is deallocated, and at unbind ([`Ctx::release_objects`]). With `device_alive` false
    /// the device is stopped (unbound or failed) and forgot the objects, so only the host resources
    /// are freed. A destroy the live device refuses leaves an object the device may still use: its
    /// memory is leaked, pinned, rather than freed under the device.
    pub(crate) fn destroy_all(
        &mut self,
        dev: &QhcaDevice,
        ctx: &Ctx,
        uar: Option<u32>,
        device_alive: bool,
    ) {
        // True if the object is gone from the device (or the device is stopped).
        let gone = |op: u32, h: u32| -> bool {
            let Some(uar) = uar.filter(|_| device_alive) else {
                return true;
            };
            match destroy_in_device(dev, uar, op, h, 0) {
                Ok(()) => true,
                // The queue died on the way: the device is stopped now.
                Err(_) if dev.cmdq.is_dead() => true,
                Err(e) => {
                    if dev.warn.allow() {
                        let leak = if matches!(
                            op,
                            uapi::QHCA_CMD_DEALLOC_PD
                                | uapi::QHCA_CMD_DEALLOC_MW
                                | uapi::QHCA_CMD_DESTROY_AH
                        ) {
                            // Nothing of the host's is in these.
                            ""
                        } else {
                            "; the device may still use it: leaking its pinned memory"
                        };
                        dev_err!(
                            dev.dev(),
                            "cleanup command {} for {:#x} failed ({:?}){}\n",
                            op,
                            h,
                            e,
                            leak
                        );
                    }
                    false
                }
            }
        };
        while let Some(qp) = self.qps.pop() {
            ctx.remove_qp(qp.qpn);
            if !gone(uapi::QHCA_CMD_DESTROY_QP, qp.qpn) {
                core::mem::forget(qp);
            }
        }
        while let Some(srq) = self.srqs.pop() {
            ctx.remove_srq(srq.srqn);
            if !gone(uapi::QHCA_CMD_DESTROY_SRQ, srq.srqn) {
                core::mem::forget(srq);
            }
        }
        // Address handles once no QP can send through them, and before their PDs (the device
        // refuses DEALLOC_PD while AHs name the PD).
        while let Some(ah) = self.ahs.pop() {
            gone(uapi::QHCA_CMD_DESTROY_AH, ah.ah);
        }
        while let Some(cq) = self.cqs.pop() {
            ctx.remove_cq(cq.cqn);
            if !gone(uapi::QHCA_CMD_DESTROY_CQ, cq.cqn) {
                core::mem::forget(cq);
            }
        }
        // Windows before regions: a region with windows bound to it cannot go.
        while let Some(mw) = self.mws.pop() {
            gone(uapi::QHCA_CMD_DEALLOC_MW, mw.key);
        }
        while let Some(mr) = self.mrs.pop() {
            if let MrMem::Odp(odp) = &mr.mem {
                let alive = device_alive && uar.is_some();
                if odp.close(dev, alive).is_err() {
                    // The device keeps a region whose pages the process may free at any time,
                    // and nothing pins them: stop it, then the pages can go.
                    dev_err!(
                        dev.dev(),
                        "DEREG_MR of ODP key {:#x} failed; stopping the device\n",
                        mr.key
                    );
                    dev.declare_dead();
                    let _ = odp.close(dev, false);
                }
                continue;
            }
            if let MrMem::Watched(w) = &mr.mem {
                let alive = device_alive && uar.is_some();
                if w.close(dev, alive).is_err() {
                    // The device was given the pages, and the context is going: stop it, then
                    // they can go.
                    dev_err!(
                        dev.dev(),
                        "DEREG_MR of watched key {:#x} failed; stopping the device\n",
                        mr.key
                    );
                    dev.declare_dead();
                    let _ = w.close(dev, false);
                }
                continue;
            }
            if !gone(uapi::QHCA_CMD_DEREG_MR, mr.key) {
                core::mem::forget(mr);
            }
        }
        while let Some(pd) = self.pds.pop() {
            gone(uapi::QHCA_CMD_DEALLOC_PD, pd);
        }
        // Everything is gone (or leaked to a device that is stopped or broken): the user's
        // share comes back. (ODP regions gave back their chunks as they closed.)
        for pool in [
            Pool::Qps,
            Pool::Srqs,
            Pool::Ahs,
            Pool::Cqs,
            Pool::Mws,
            Pool::Mrs,
            Pool::Pds,
        ] {
            ctx.quota.uncharge(pool, u32::MAX);
        }
    }
}
