// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Methods of the core's ioctl interface (`RDMA_VERBS_IOCTL` on the command file): the core's
//! `ADVISE_MR`, which has no write command, and the driver's own, for what the verbs cannot ask
//! (`qhca-abi.h`, "Driver methods": the context's counters, the port as the device sees it).

use std::mem::size_of;
use std::ptr::{from_mut, from_ref};

use qhca_uapi::{
    qhca_ctx_stats, qhca_ioc_advise_mr, qhca_ioc_query_ctx, qhca_ioc_query_port, qhca_port_attr,
    QHCA_IB_ATTR_QUERY_CTX_STATS, QHCA_IB_ATTR_QUERY_PORT_ATTR, QHCA_IB_METHOD_QUERY_CTX,
    QHCA_IB_METHOD_QUERY_PORT,
};

use super::{Kind, Uverbs};
use crate::error::Errno;

/// `_IOWR(RDMA_IOCTL_MAGIC 0x1b, 1, struct ib_uverbs_ioctl_hdr)` (24 bytes).
const RDMA_VERBS_IOCTL: libc::c_ulong = 0xc018_1b01;

/// `<rdma/ib_user_ioctl_cmds.h>`: the objects, the core's method and its attributes.
const UVERBS_OBJECT_DEVICE: u16 = 0;
const UVERBS_OBJECT_MR: u16 = 7;
const UVERBS_METHOD_ADVISE_MR: u16 = 2;
const ADVISE_MR_PD_HANDLE: u16 = 0;
const ADVISE_MR_ADVICE: u16 = 1;
const ADVISE_MR_FLAGS: u16 = 2;
const ADVISE_MR_SGE_LIST: u16 = 3;

/// `struct ib_uverbs_ioctl_hdr` (`<rdma/rdma_user_ioctl_cmds.h>`).
#[repr(C)]
#[derive(Default)]
struct IoctlHdr {
    length: u16,
    object_id: u16,
    method_id: u16,
    num_attrs: u16,
    reserved1: u64,
    driver_id: u32,
    reserved2: u32,
}

/// `struct ib_uverbs_attr`: an attribute's id, its length, and its data inline (up to 8 bytes:
/// integers, object handles) or the address of it (the kernel writes an output attribute there,
/// and sets `UVERBS_ATTR_F_VALID_OUTPUT` in `flags`).
#[repr(C)]
#[derive(Default)]
struct IoctlAttr {
    attr_id: u16,
    len: u16,
    flags: u16,
    attr_data: u16,
    data: u64,
}

/// One call: the header and its `N` attributes.
#[repr(C)]
struct Call<const N: usize> {
    hdr: IoctlHdr,
    attrs: [IoctlAttr; N],
}

/// `struct ib_sge`, as the SGE list of ADVISE_MR carries it.
#[repr(C)]
struct Sge {
    addr: u64,
    length: u32,
    lkey: u32,
}

/// An attribute whose data is inline (`len` bytes of `data`, at most 8).
fn inline(attr_id: u16, len: u16, data: u64) -> IoctlAttr {
    IoctlAttr {
        attr_id,
        len,
        data,
        ..Default::default()
    }
}

/// An input attribute that points at `v`.
fn points_at<V>(attr_id: u16, v: &V) -> Result<IoctlAttr, Errno> {
    pointer(attr_id, size_of::<V>(), from_ref(v) as u64)
}

/// An output attribute: the kernel writes `v`.
fn writes_to<V>(attr_id: u16, v: &mut V) -> Result<IoctlAttr, Errno> {
    pointer(attr_id, size_of::<V>(), from_mut(v) as u64)
}

fn pointer(attr_id: u16, len: usize, addr: u64) -> Result<IoctlAttr, Errno> {
    Ok(IoctlAttr {
        attr_id,
        len: u16::try_from(len).map_err(|_| Errno::EINVAL)?,
        data: addr,
        ..Default::default()
    })
}

impl Uverbs {
    /// Calls `method` of `object` with `attrs`. The attributes' pointers must be live for the
    /// call and their targets writable where the method writes (its output attributes).
    fn call<const N: usize>(
        &self,
        object: u16,
        method: u16,
        attrs: [IoctlAttr; N],
    ) -> Result<(), Errno> {
        let mut call = Call {
            hdr: IoctlHdr {
                length: u16::try_from(size_of::<Call<N>>()).map_err(|_| Errno::EINVAL)?,
                object_id: object,
                method_id: method,
                num_attrs: u16::try_from(N).map_err(|_| Errno::EINVAL)?,
                ..Default::default()
            },
            attrs,
        };
        // SAFETY: `call` is an exclusively borrowed header and its `N` attributes, `length`
        // bytes in all (the kernel writes back only their flags); every pointer an attribute
        // holds is the caller's to keep live and writable where the method writes, as this
        // function's contract says: each caller below points only at its own locals, alive
        // across the call, with the pointed-to type's exact size in `len`.
        let r = unsafe { libc::ioctl(self.cmd, RDMA_VERBS_IOCTL, from_mut(&mut call)) };
        if r < 0 {
            return Err(Errno::last());
        }
        Ok(())
    }

    /// ADVISE_MR: the region's PD, the advice and flags (the same numbers as qhca's), and one
    /// SGE for the range.
    pub(crate) fn advise_mr(&self, req: &mut qhca_ioc_advise_mr) -> Result<(), Errno> {
        let pd = self.handle(Kind::MrPd, req.lkey)?;
        let sge = Sge {
            addr: req.addr,
            length: u32::try_from(req.length).map_err(|_| Errno::EINVAL)?,
            lkey: req.lkey,
        };
        let attrs = [
            inline(ADVISE_MR_PD_HANDLE, 0, pd.into()),
            // A constant is 8 bytes (`UVERBS_ATTR_CONST_IN`); flags 4 or 8.
            inline(ADVISE_MR_ADVICE, 8, req.advice.into()),
            inline(ADVISE_MR_FLAGS, 4, req.flags.into()),
            points_at(ADVISE_MR_SGE_LIST, &sge)?,
        ];
        self.call(UVERBS_OBJECT_MR, UVERBS_METHOD_ADVISE_MR, attrs)
    }

    /// The driver's QUERY_CTX: this context's counters.
    pub(crate) fn query_ctx(&self, req: &mut qhca_ioc_query_ctx) -> Result<(), Errno> {
        let mut stats = qhca_ctx_stats::default();
        let attrs = [writes_to(QHCA_IB_ATTR_QUERY_CTX_STATS as u16, &mut stats)?];
        self.call(UVERBS_OBJECT_DEVICE, QHCA_IB_METHOD_QUERY_CTX as u16, attrs)?;
        req.stats = stats;
        Ok(())
    }

    /// The driver's QUERY_PORT: the port as the device sees it.
    pub(crate) fn query_port(&self, req: &mut qhca_ioc_query_port) -> Result<(), Errno> {
        let mut attr = qhca_port_attr::default();
        let attrs = [writes_to(QHCA_IB_ATTR_QUERY_PORT_ATTR as u16, &mut attr)?];
        self.call(
            UVERBS_OBJECT_DEVICE,
            QHCA_IB_METHOD_QUERY_PORT as u16,
            attrs,
        )?;
        req.attr = attr;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_have_the_kernels_layout() {
        assert_eq!(size_of::<IoctlHdr>(), 24);
        assert_eq!(size_of::<IoctlAttr>(), 16);
        assert_eq!(size_of::<Sge>(), 16);
        assert_eq!(size_of::<Call<4>>(), 24 + 4 * 16);
        let _: u16 = QHCA_IB_METHOD_QUERY_CTX.try_into().unwrap();
    }
}
