// SPDX-License-Identifier: GPL-2.0

//! Verbs objects of one context: protection domains, memory regions, completion queues and queue
//! pairs, created and destroyed by ioctl.
//!
//! The device holds the objects' state; the driver keeps, per context, what it must undo when the
//! file goes away (the handles, the pinned memory, the eventfds) and enforces the destroy order:
//! a PD with MRs or QPs, or a CQ with QPs, is busy. Every ioctl argument is checked here before
//! the device checks it again; the device's word is final.

use crate::{
    cmdq::Cmd,
    device::QhcaDevice,
    shim::{EventFd, Umem},
    uapi,
};
use kernel::{
    device::{Bound, Device},
    dma::{Coherent, CoherentBox},
    io::Io,
    prelude::*,
    sync::Arc,
    transmute::{AsBytes, FromBytes},
    uaccess::{UserPtr, UserSlice, UserSliceWriter},
};

struct Mr {
    key: u32,
    pdn: u32,
    _mem: Umem,
}

struct Cq {
    cqn: u32,
    events: bool,
    _mem: Umem,
}

struct Qp {
    qpn: u32,
    pdn: u32,
    send_cqn: u32,
    recv_cqn: u32,
    _mem: Umem,
}

/// What one context created. Kept under the file's mutex.
#[derive(Default)]
pub(crate) struct Objects {
    pds: KVec<u32>,
    mrs: KVec<Mr>,
    cqs: KVec<Cq>,
    qps: KVec<Qp>,
}

/// Reads an ioctl argument of type `T` from user space and checks its header: `size` must be
/// `size_of::<T>()` and `comp_mask` zero. Returns it and the writer for the answer.
fn read_arg<T: FromBytes + AsBytes>(arg: usize) -> Result<(T, UserSliceWriter)> {
    let size = core::mem::size_of::<T>();
    let (mut reader, writer) = UserSlice::new(UserPtr::from_addr(arg), size).reader_writer();
    let v: T = reader.read()?;
    let head = v.as_bytes();
    let (sz, mask) = (
        u32::from_ne_bytes([head[0], head[1], head[2], head[3]]),
        u32::from_ne_bytes([head[4], head[5], head[6], head[7]]),
    );
    if sz as usize != size || mask != 0 {
        return Err(EINVAL);
    }
    Ok((v, writer))
}

/// Writes `v` back to the user's argument.
fn write_arg<T: AsBytes>(mut writer: UserSliceWriter, v: &T) -> Result<isize> {
    writer.write(v)?;
    Ok(0)
}

/// A DMA page list for the device: one little-endian address per page of `mem`.
fn page_list(dev: &Device<Bound>, mem: &Umem) -> Result<Coherent<[u64]>> {
    let list: Coherent<[u64]> =
        CoherentBox::<[u64]>::zeroed_slice(dev, mem.npages(), GFP_KERNEL)?.into();
    mem.write_page_list(&list)?;
    Ok(list)
}

/// Reads a `qhca_ioc_handle` argument naming an existing object.
fn read_handle(arg: usize) -> Result<u32> {
    let (a, _) = read_arg::<uapi::qhca_ioc_handle>(arg)?;
    if a.rsvd != 0 {
        return Err(EINVAL);
    }
    Ok(a.handle)
}

/// Sends one of the destroy commands (`in[0]` = context, `in[1]` = handle).
fn destroy_in_device(dev: &QhcaDevice, uar: u32, op: u32, handle: u32) -> Result {
    dev.exec(Cmd::new(op).input(0, uar.into()).input(1, handle.into()))?;
    Ok(())
}

/// Takes a handle from a list, or `ENOENT`.
fn position<T>(v: &KVec<T>, f: impl Fn(&T) -> bool) -> Result<usize> {
    v.iter().position(f).ok_or(ENOENT)
}

/// Index `log` entries of `stride_log` bytes: the ring's size, or `EINVAL` if out of the ABI's
/// limits.
fn ring_bytes(log: u8, min_log: u32, stride_log: u8, min_stride: u32, max_stride: u32) -> Result<u64> {
    let (log, stride_log) = (u32::from(log), u32::from(stride_log));
    if !(min_log..=uapi::QHCA_WQ_MAX_LOG).contains(&log)
        || !(min_stride..=max_stride).contains(&stride_log)
    {
        return Err(EINVAL);
    }
    Ok(1u64 << (log + stride_log))
}

fn page_align(x: u64) -> u64 {
    (x + u64::from(uapi::QHCA_PAGE_SIZE) - 1) & !(u64::from(uapi::QHCA_PAGE_SIZE) - 1)
}

impl Objects {
    /// `QHCA_IOCTL_ALLOC_PD`.
    pub(crate) fn alloc_pd(&mut self, dev: &QhcaDevice, uar: u32, arg: usize) -> Result<isize> {
        let (mut a, slice) = read_arg::<uapi::qhca_ioc_handle>(arg)?;
        if a.handle != 0 || a.rsvd != 0 {
            return Err(EINVAL);
        }
        self.pds.reserve(1, GFP_KERNEL)?;
        let pdn = dev.exec(Cmd::new(uapi::QHCA_CMD_ALLOC_PD).input(0, uar.into()))?.data[0] as u32;
        self.pds.push(pdn, GFP_KERNEL)?;
        a.handle = pdn;
        write_arg(slice, &a)
    }

    /// `QHCA_IOCTL_DEALLOC_PD`: `EBUSY` while MRs or QPs use the PD.
    pub(crate) fn dealloc_pd(&mut self, dev: &QhcaDevice, uar: u32, arg: usize) -> Result<isize> {
        let pdn = read_handle(arg)?;
        let pos = position(&self.pds, |&p| p == pdn)?;
        if self.mrs.iter().any(|m| m.pdn == pdn) || self.qps.iter().any(|q| q.pdn == pdn) {
            return Err(EBUSY);
        }
        destroy_in_device(dev, uar, uapi::QHCA_CMD_DEALLOC_PD, pdn)?;
        let _ = self.pds.remove(pos);
        Ok(0)
    }

    /// `QHCA_IOCTL_REG_MR`: pins the region and hands the device its translation.
    pub(crate) fn reg_mr(
        &mut self,
        dev: &QhcaDevice,
        bound: &Device<Bound>,
        uar: u32,
        arg: usize,
    ) -> Result<isize> {
        let (mut a, slice) = read_arg::<uapi::qhca_ioc_reg_mr>(arg)?;
        let writes = uapi::QHCA_ACCESS_REMOTE_WRITE | uapi::QHCA_ACCESS_REMOTE_ATOMIC;
        if a.rsvd != 0
            || a.lkey != 0
            || a.rkey != 0
            || a.access & !uapi::QHCA_ACCESS_ALL != 0
            || (a.access & writes != 0 && a.access & uapi::QHCA_ACCESS_LOCAL_WRITE == 0)
            || a.length == 0
            || a.length > dev.attr()?.max_mr_size
        {
            return Err(EINVAL);
        }
        position(&self.pds, |&p| p == a.pdn)?;
        self.mrs.reserve(1, GFP_KERNEL)?;
        let mem = Umem::pin(bound, a.addr, a.length, a.access & uapi::QHCA_ACCESS_LOCAL_WRITE != 0)?;
        let list = page_list(bound, &mem)?;
        let args = uapi::qhca_cmd_reg_mr {
            uar: uar.to_le(),
            pdn: a.pdn.to_le(),
            iova: a.addr.to_le(),
            length: a.length.to_le(),
            access: a.access.to_le(),
            npages: (mem.npages() as u32).to_le(),
            pages_addr: list.dma_address().to_le(),
        };
        let key = dev.exec(Cmd::new(uapi::QHCA_CMD_REG_MR).input_struct(&args))?.data[0] as u32;
        self.mrs.push(Mr { key, pdn: a.pdn, _mem: mem }, GFP_KERNEL)?;
        a.lkey = key;
        a.rkey = key;
        write_arg(slice, &a)
    }

    /// `QHCA_IOCTL_DEREG_MR`: the device forgets the key before the pages are unpinned.
    pub(crate) fn dereg_mr(&mut self, dev: &QhcaDevice, uar: u32, arg: usize) -> Result<isize> {
        let key = read_handle(arg)?;
        let pos = position(&self.mrs, |m| m.key == key)?;
        destroy_in_device(dev, uar, uapi::QHCA_CMD_DEREG_MR, key)?;
        let _ = self.mrs.remove(pos);
        Ok(0)
    }

    /// `QHCA_IOCTL_CREATE_CQ`.
    pub(crate) fn create_cq(
        &mut self,
        dev: &QhcaDevice,
        bound: &Device<Bound>,
        uar: u32,
        arg: usize,
    ) -> Result<isize> {
        let (mut a, slice) = read_arg::<uapi::qhca_ioc_create_cq>(arg)?;
        let log = a.log_entries;
        if a.rsvd != 0
            || a.cqn != 0
            || !(uapi::QHCA_CQ_MIN_LOG..=uapi::QHCA_CQ_MAX_LOG).contains(&log)
            || (1u32 << log) > dev.attr()?.max_cqe.max(2)
            || a.buf_addr % u64::from(uapi::QHCA_PAGE_SIZE) != 0
            || a.buf_len < page_align((u64::from(uapi::QHCA_CQE_SIZE) << log) + 64)
            || a.buf_len > page_align((u64::from(uapi::QHCA_CQE_SIZE) << log) + 64)
            || a.eventfd < -1
        {
            return Err(EINVAL);
        }
        let efd = match a.eventfd {
            -1 => None,
            fd => Some(Arc::new(EventFd::get(fd)?, GFP_KERNEL)?),
        };
        self.cqs.reserve(1, GFP_KERNEL)?;
        let mem = Umem::pin(bound, a.buf_addr, a.buf_len, true)?;
        let list = page_list(bound, &mem)?;
        let args = uapi::qhca_cmd_create_cq {
            uar: uar.to_le(),
            log_entries: log.to_le(),
            npages: (mem.npages() as u32).to_le(),
            pages_addr: list.dma_address().to_le(),
            ..Default::default()
        };
        let cqn = dev.exec(Cmd::new(uapi::QHCA_CMD_CREATE_CQ).input_struct(&args))?.data[0] as u32;
        let events = efd.is_some();
        if let Some(efd) = efd {
            if let Err(e) = dev.add_cq_events(cqn, efd) {
                if let Err(e) = destroy_in_device(dev, uar, uapi::QHCA_CMD_DESTROY_CQ, cqn) {
                    dev_warn!(dev.dev(), "DESTROY_CQ {} failed: {:?}\n", cqn, e);
                }
                return Err(e);
            }
        }
        self.cqs.push(Cq { cqn, events, _mem: mem }, GFP_KERNEL)?;
        a.cqn = cqn;
        write_arg(slice, &a)
    }

    /// `QHCA_IOCTL_DESTROY_CQ`: `EBUSY` while a QP uses the CQ.
    pub(crate) fn destroy_cq(&mut self, dev: &QhcaDevice, uar: u32, arg: usize) -> Result<isize> {
        let cqn = read_handle(arg)?;
        let pos = position(&self.cqs, |c| c.cqn == cqn)?;
        if self.qps.iter().any(|q| q.send_cqn == cqn || q.recv_cqn == cqn) {
            return Err(EBUSY);
        }
        destroy_in_device(dev, uar, uapi::QHCA_CMD_DESTROY_CQ, cqn)?;
        let cq = self.cqs.remove(pos)?;
        if cq.events {
            dev.remove_cq_events(cq.cqn);
        }
        Ok(0)
    }

    /// `QHCA_IOCTL_CREATE_QP`.
    pub(crate) fn create_qp(
        &mut self,
        dev: &QhcaDevice,
        bound: &Device<Bound>,
        uar: u32,
        arg: usize,
    ) -> Result<isize> {
        let (mut a, slice) = read_arg::<uapi::qhca_ioc_create_qp>(arg)?;
        let attr = dev.attr()?;
        if a.rsvd0 != 0 || a.rsvd1 != 0 || a.qpn != 0 {
            return Err(EINVAL);
        }
        let sq = ring_bytes(
            a.sq_log,
            1,
            a.sq_stride_log,
            uapi::QHCA_SQ_MIN_STRIDE_LOG,
            uapi::QHCA_SQ_MAX_STRIDE_LOG,
        )?;
        let rq = ring_bytes(
            a.rq_log,
            1,
            a.rq_stride_log,
            uapi::QHCA_RQ_MIN_STRIDE_LOG,
            uapi::QHCA_RQ_MAX_STRIDE_LOG,
        )?;
        let sq_room = (1u32 << a.sq_stride_log) - uapi::QHCA_WQE_DATA_OFFSET;
        let rq_room = (1u32 << a.rq_stride_log) - 16;
        if a.max_sge == 0
            || u32::from(a.max_sge) > attr.max_sge
            || u32::from(a.max_inline) > attr.max_inline
            || 16 * u32::from(a.max_sge) > sq_room
            || u32::from(a.max_inline) > sq_room
            || 16 * u32::from(a.max_sge) > rq_room
            || (1u32 << a.sq_log) > attr.max_qp_wr
            || (1u32 << a.rq_log) > attr.max_qp_wr
            || a.buf_addr % u64::from(uapi::QHCA_PAGE_SIZE) != 0
            || a.buf_len < page_align(sq) + rq
            || a.buf_len > page_align(sq) + page_align(rq)
        {
            return Err(EINVAL);
        }
        position(&self.pds, |&p| p == a.pdn)?;
        position(&self.cqs, |c| c.cqn == a.send_cqn)?;
        position(&self.cqs, |c| c.cqn == a.recv_cqn)?;
        self.qps.reserve(1, GFP_KERNEL)?;
        let mem = Umem::pin(bound, a.buf_addr, a.buf_len, true)?;
        let list = page_list(bound, &mem)?;
        let args = uapi::qhca_cmd_create_qp {
            uar: uar.to_le(),
            pdn: a.pdn.to_le(),
            send_cqn: a.send_cqn.to_le(),
            recv_cqn: a.recv_cqn.to_le(),
            sq_log: a.sq_log,
            sq_stride_log: a.sq_stride_log,
            rq_log: a.rq_log,
            rq_stride_log: a.rq_stride_log,
            max_inline: a.max_inline.to_le(),
            max_sge: a.max_sge.to_le(),
            npages: (mem.npages() as u32).to_le(),
            rsvd0: 0,
            pages_addr: list.dma_address().to_le(),
        };
        let qpn = dev.exec(Cmd::new(uapi::QHCA_CMD_CREATE_QP).input_struct(&args))?.data[0] as u32;
        self.qps.push(
            Qp { qpn, pdn: a.pdn, send_cqn: a.send_cqn, recv_cqn: a.recv_cqn, _mem: mem },
            GFP_KERNEL,
        )?;
        a.qpn = qpn;
        write_arg(slice, &a)
    }

    /// `QHCA_IOCTL_MODIFY_QP`: the device checks the transition (`EINVAL` if invalid).
    pub(crate) fn modify_qp(
        &mut self,
        dev: &QhcaDevice,
        bound: &Device<Bound>,
        uar: u32,
        arg: usize,
    ) -> Result<isize> {
        let (a, _) = read_arg::<uapi::qhca_ioc_qp_attr>(arg)?;
        let q = &a.attr;
        if a.rsvd != 0
            || q.mask == 0
            || q.mask & !uapi::QHCA_QP_ATTR_ALL != 0
            || q.rsvd0 != 0
            || q.rsvd1.iter().any(|&r| r != 0)
        {
            return Err(EINVAL);
        }
        position(&self.qps, |x| x.qpn == a.qpn)?;
        let mut le = *q;
        le.mask = q.mask.to_le();
        le.access = q.access.to_le();
        le.dest_qpn = q.dest_qpn.to_le();
        le.rq_psn = q.rq_psn.to_le();
        le.sq_psn = q.sq_psn.to_le();
        let mailbox: Coherent<[u8]> =
            CoherentBox::<[u8]>::zeroed_slice(bound, core::mem::size_of_val(q), GFP_KERNEL)?.into();
        (&mailbox).copy_from_slice(le.as_bytes());
        dev.exec(
            Cmd::new(uapi::QHCA_CMD_MODIFY_QP)
                .input(0, uar.into())
                .input(1, a.qpn.into())
                .input(2, mailbox.dma_address()),
        )?;
        Ok(0)
    }

    /// `QHCA_IOCTL_QUERY_QP`.
    pub(crate) fn query_qp(
        &mut self,
        dev: &QhcaDevice,
        bound: &Device<Bound>,
        uar: u32,
        arg: usize,
    ) -> Result<isize> {
        let (mut a, slice) = read_arg::<uapi::qhca_ioc_qp_attr>(arg)?;
        if a.rsvd != 0 || a.attr.as_bytes().iter().any(|&b| b != 0) {
            return Err(EINVAL);
        }
        position(&self.qps, |x| x.qpn == a.qpn)?;
        const SIZE: usize = core::mem::size_of::<uapi::qhca_qp_attr>();
        let out: Coherent<[u8]> = CoherentBox::<[u8]>::zeroed_slice(bound, SIZE, GFP_KERNEL)?.into();
        dev.exec(
            Cmd::new(uapi::QHCA_CMD_QUERY_QP)
                .input(0, uar.into())
                .input(1, a.qpn.into())
                .output(out.dma_address(), SIZE as u32),
        )?;
        let mut bytes = [0u8; SIZE];
        (&out).copy_to_slice(&mut bytes);
        let le = uapi::qhca_qp_attr::from_bytes_copy(&bytes).ok_or(EIO)?;
        a.attr = uapi::qhca_qp_attr {
            mask: u32::from_le(le.mask),
            access: u32::from_le(le.access),
            dest_qpn: u32::from_le(le.dest_qpn),
            rq_psn: u32::from_le(le.rq_psn),
            sq_psn: u32::from_le(le.sq_psn),
            ..le
        };
        write_arg(slice, &a)
    }

    /// `QHCA_IOCTL_DESTROY_QP`.
    pub(crate) fn destroy_qp(&mut self, dev: &QhcaDevice, uar: u32, arg: usize) -> Result<isize> {
        let qpn = read_handle(arg)?;
        let pos = position(&self.qps, |q| q.qpn == qpn)?;
        destroy_in_device(dev, uar, uapi::QHCA_CMD_DESTROY_QP, qpn)?;
        let _ = self.qps.remove(pos);
        Ok(0)
    }

    /// `QHCA_IOCTL_QUERY_CTX`: what the device counted for this context.
    pub(crate) fn query_ctx(&self, dev: &QhcaDevice, bound: &Device<Bound>, uar: u32, arg: usize) -> Result<isize> {
        let (mut a, slice) = read_arg::<uapi::qhca_ioc_query_ctx>(arg)?;
        if a.rsvd != 0 {
            return Err(EINVAL);
        }
        const SIZE: usize = core::mem::size_of::<uapi::qhca_ctx_stats>();
        let out: Coherent<[u8]> = CoherentBox::<[u8]>::zeroed_slice(bound, SIZE, GFP_KERNEL)?.into();
        dev.exec(
            Cmd::new(uapi::QHCA_CMD_QUERY_CTX)
                .input(0, uar.into())
                .output(out.dma_address(), SIZE as u32),
        )?;
        let mut bytes = [0u8; SIZE];
        (&out).copy_to_slice(&mut bytes);
        let le = uapi::qhca_ctx_stats::from_bytes_copy(&bytes).ok_or(EIO)?;
        a.stats.db_accepted = u64::from_le(le.db_accepted);
        a.stats.db_violations = u64::from_le(le.db_violations);
        write_arg(slice, &a)
    }

    /// Destroys everything, in dependency order (QPs, CQs, MRs, PDs). Called when the file is
    /// released; a device that is gone (unbound) forgets the objects with the context, so only
    /// the host resources (pinned pages, eventfds) are dropped then.
    pub(crate) fn destroy_all(&mut self, dev: &QhcaDevice, uar: u32, device_alive: bool) {
        let exec = |op: u32, h: u32| {
            if device_alive {
                if let Err(e) = destroy_in_device(dev, uar, op, h) {
                    dev_warn!(dev.dev(), "cleanup command {} for {} failed: {:?}\n", op, h, e);
                }
            }
        };
        while let Some(qp) = self.qps.pop() {
            exec(uapi::QHCA_CMD_DESTROY_QP, qp.qpn);
        }
        while let Some(cq) = self.cqs.pop() {
            exec(uapi::QHCA_CMD_DESTROY_CQ, cq.cqn);
            if cq.events {
                dev.remove_cq_events(cq.cqn);
            }
        }
        while let Some(mr) = self.mrs.pop() {
            exec(uapi::QHCA_CMD_DEREG_MR, mr.key);
        }
        while let Some(pd) = self.pds.pop() {
            exec(uapi::QHCA_CMD_DEALLOC_PD, pd);
        }
    }
}
