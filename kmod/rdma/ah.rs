// SPDX-License-Identifier: GPL-2.0

//! Address handles (`ib_ah`) of user contexts and kernel consumers, and address vectors ([`Av`]) as the core hands
//! them to `create_user_ah` and `modify_qp`.

use super::{data, errno, pd::pd_data, ucontext::udata_of, Driver};
use core::{ffi::c_int, mem::MaybeUninit};
use kernel::{bindings, prelude::*};

/// An AH as the core allocates it: the `ib_ah` first, the driver's part behind.
#[repr(C)]
pub(super) struct IbAh<A> {
    ib: bindings::ib_ah,
    data: MaybeUninit<A>,
}

/// The bits of a flow label (`IB_GRH_FLOWLABEL_MASK`, a macro bindgen does not see).
const FLOW_LABEL_MASK: u32 = 0xf_ffff;

/// A RoCE address vector: where packets go, and from which entry of the port's GID table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Av {
    pub(crate) dgid: [u8; 16],
    pub(crate) flow_label: u32,
    pub(crate) traffic_class: u8,
    pub(crate) hop_limit: u8,
    pub(crate) sl: u8,
    pub(crate) port: u32,
    /// The entry of the port's GID table the core resolved the source to.
    pub(crate) sgid_index: u8,
}

impl Av {
    /// The address vector of the core's `attr`: a RoCE one, with its GRH, whose source GID the
    /// core resolved (it does so for every address vector it passes a driver).
    ///
    /// # Errors
    ///
    /// `EINVAL` for an address vector of another kind, or without a GRH or a source GID.
    pub(crate) fn from_core(attr: &bindings::rdma_ah_attr) -> Result<Av> {
        if attr.type_ != bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE
            || u32::from(attr.ah_flags) & bindings::ib_ah_flags_IB_AH_GRH == 0
            || attr.grh.sgid_attr.is_null()
        {
            return Err(EINVAL);
        }
        // SAFETY: The core holds a reference on the resolved source entry for as long as the
        // address vector is in its hands, which covers the operation.
        let index = unsafe { (*attr.grh.sgid_attr).index };
        Ok(Av {
            // SAFETY: Every bit pattern is a valid `[u8; 16]`, the union's raw view.
            dgid: unsafe { attr.grh.dgid.raw },
            // The GRH's field is 20 bits; the core passes the program's 32-bit value on, and
            // RoCE NICs use its low 20 bits (rxe's IPv6 header, mlx5's address vector). UCX
            // sets all 32 (`~0`) and relies on that.
            flow_label: attr.grh.flow_label & FLOW_LABEL_MASK,
            traffic_class: attr.grh.traffic_class,
            hop_limit: attr.grh.hop_limit,
            sl: attr.sl,
            port: attr.port_num,
            sgid_index: u8::try_from(index).map_err(|_| EINVAL)?,
        })
    }

    /// Writes the address vector into the core's `attr` (QUERY_QP), as a RoCE one with a GRH.
    pub(crate) fn write_to(self, attr: &mut bindings::rdma_ah_attr) {
        attr.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        attr.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        attr.grh.dgid.raw = self.dgid;
        attr.grh.flow_label = self.flow_label;
        attr.grh.traffic_class = self.traffic_class;
        attr.grh.hop_limit = self.hop_limit;
        attr.grh.sgid_index = self.sgid_index;
        attr.sl = self.sl;
        attr.port_num = self.port;
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a fresh AH of a registered device of ours (allocated with
/// `size_ib_ah` zeroed bytes, `device` and `pd` set), with the command's `udata`.
pub(super) unsafe extern "C" fn create_user_ah<T: Driver>(
    ah: *mut bindings::ib_ah,
    init: *mut bindings::rdma_ah_init_attr,
    udata: *mut bindings::ib_udata,
) -> c_int {
    if udata.is_null() {
        return EINVAL.to_errno();
    }
    // SAFETY: The core's AH, its attributes and PD (one of ours, allocated, a user PD since the
    // command is a user's), valid for the call.
    let (dev, pd, attr, mut udata) = unsafe {
        (
            data::<T>((*ah).device),
            pd_data::<T::Pd>((*ah).pd),
            &*(*init).ah_attr,
            udata_of(udata),
        )
    };
    let av = match Av::from_core(attr) {
        Ok(av) => av,
        Err(e) => return e.to_errno(),
    };
    match dev.create_ah(pd, &av, &mut udata) {
        Ok(a) => {
            // SAFETY: The core allocated an `IbAh<T::Ah>`; `data` is written once, here.
            unsafe { (*ah.cast::<IbAh<T::Ah>>()).data.write(a) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// # Safety
///
/// Called by the RDMA core only, for a fresh kernel AH of a registered device of ours (as
/// `create_user_ah`'s, in a kernel PD), possibly where it cannot sleep.
pub(super) unsafe extern "C" fn create_ah<T: Driver>(
    ah: *mut bindings::ib_ah,
    init: *mut bindings::rdma_ah_init_attr,
    _udata: *mut bindings::ib_udata,
) -> c_int {
    // SAFETY: The core's AH, its attributes and PD (one of ours, allocated), valid for the call.
    let (dev, pd, attr) = unsafe {
        (
            data::<T>((*ah).device),
            pd_data::<T::Pd>((*ah).pd),
            &*(*init).ah_attr,
        )
    };
    if !dev.kernel_verbs() {
        return EOPNOTSUPP.to_errno();
    }
    match Av::from_core(attr).and_then(|av| dev.create_kernel_ah(pd, &av)) {
        Ok(a) => {
            // SAFETY: As in `create_user_ah`.
            unsafe { (*ah.cast::<IbAh<T::Ah>>()).data.write(a) };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// The driver's part of AH `ah`.
///
/// # Safety
///
/// `ah` is an AH of ours whose creation succeeded and which is not destroyed yet.
pub(super) unsafe fn ah_data<'a, A>(ah: *mut bindings::ib_ah) -> &'a A {
    // SAFETY: The caller's contract.
    unsafe { (*ah.cast::<IbAh<A>>()).data.assume_init_ref() }
}

/// # Safety
///
/// Called by the RDMA core only, for an AH whose `create_user_ah` or `create_ah` succeeded.
pub(super) unsafe extern "C" fn destroy_ah<T: Driver>(
    ah: *mut bindings::ib_ah,
    _flags: u32,
) -> c_int {
    let p = ah.cast::<IbAh<T::Ah>>();
    // SAFETY: A created AH of ours: `data` is initialised.
    let (dev, a) = unsafe { (data::<T>((*ah).device), (*p).data.assume_init_ref()) };
    let r = dev.destroy_ah(a);
    if r.is_ok() {
        // SAFETY: The core frees the AH after this and calls nothing more on it.
        unsafe { (*p).data.assume_init_drop() };
    }
    errno(r)
}
