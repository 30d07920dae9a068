// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Address handles, for the sends of UD QPs.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::ptr::null_mut;

use qhca::{AhAttr, Gid};

use crate::device::Ctx;
use crate::ffi::*;
use crate::misc::{debug, fail_null, set_errno};
use crate::mr::Pd;
use crate::obj::{impl_obj, Obj};
use crate::real::forward;

/// An address handle.
#[repr(C)]
pub(crate) struct Ah {
    ibv: UnsafeCell<ibv_ah>,
    pub(crate) ah: qhca::Ah,
}
impl_obj!(Ah, ibv_ah);

/// The provider's attributes for `attr`, on a context whose port GID is `own`. Without a GRH
/// (`is_global` 0) the handle names our own port, the only one the loopback wire reaches.
fn ah_attr(attr: &ibv_ah_attr, own: Gid) -> Result<AhAttr, &'static str> {
    if attr.port_num != qhca::PORT_NUM {
        return Err("port_num must be 1");
    }
    if attr.is_global == 0 {
        return Ok(AhAttr {
            sl: attr.sl,
            ..AhAttr::new(own)
        });
    }
    let g = &attr.grh;
    if g.sgid_index != 0 {
        return Err("sgid_index must be 0 (the port has one GID)");
    }
    Ok(AhAttr {
        // SAFETY: a GID is 16 bytes whichever union member is read.
        dgid: Gid {
            raw: unsafe { g.dgid.raw },
        },
        flow_label: g.flow_label,
        traffic_class: g.traffic_class,
        hop_limit: g.hop_limit,
        sl: attr.sl,
    })
}

fn create(pd: &Pd, ctx: &Ctx, attr: &ibv_ah_attr) -> *mut ibv_ah {
    let a = match ah_attr(attr, ctx.attr.port_gid()) {
        Ok(a) => a,
        Err(why) => {
            debug(format_args!("ibv_create_ah: {why}"));
            set_errno(libc::EINVAL);
            return null_mut();
        }
    };
    let ah = match pd.pd.create_ah(&a) {
        Ok(ah) => ah,
        Err(e) => return fail_null("ibv_create_ah", &e),
    };
    let ibv = ibv_ah {
        context: ctx.ibv(),
        pd: pd.ibv(),
        handle: ah.handle(),
    };
    pd.hold();
    ctx.hold();
    Box::new(Ah {
        ibv: UnsafeCell::new(ibv),
        ah,
    })
    .into_ibv()
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: the program passes a live PD.
    let Some((p, ctx)) = (unsafe { Pd::ours(pd) }) else {
        return forward!(
            ibv_create_ah(pd, attr) as fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah,
            null_mut()
        );
    };
    // SAFETY: the program passes its attributes.
    let Some(a) = (unsafe { attr.as_ref() }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    create(p, ctx, a)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: the program passes a live handle.
    let Some((_, ctx)) = (unsafe { Ah::ours(ah) }) else {
        return forward!(ibv_destroy_ah(ah) as fn(*mut ibv_ah) -> c_int, libc::ENOSYS);
    };
    // SAFETY: a live handle of ours holds a live PD of ours.
    if let Some((p, _)) = unsafe { Pd::ours((*ah).pd) } {
        p.release();
    }
    ctx.release();
    // SAFETY: made by `create`, the program's last use; the provider's drop destroys it.
    drop(unsafe { Ah::from_ibv(ah) });
    0
}

/// The address that answers the sender of a UD receive: its GRH's source GID.
fn reply_attr(wc: &ibv_wc, grh: *const ibv_grh, port_num: u8) -> Result<ibv_ah_attr, c_int> {
    if port_num != qhca::PORT_NUM {
        return Err(libc::EINVAL);
    }
    let mut a = ibv_ah_attr {
        port_num,
        ..ibv_ah_attr::default()
    };
    if wc.wc_flags & IBV_WC_GRH != 0 {
        if grh.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program passes the GRH its receive buffer starts with.
        let g = unsafe { grh.read_unaligned() };
        let flow = u32::from_be(g.version_tclass_flow);
        a.is_global = 1;
        a.grh.dgid = g.sgid;
        a.grh.flow_label = flow & 0xf_ffff;
        a.grh.traffic_class = (flow >> 20) as u8;
        a.grh.hop_limit = 0xff;
        a.grh.sgid_index = 0;
    }
    Ok(a)
}

#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: the program passes a live context.
    if unsafe { Ctx::ours(context) }.is_none() {
        return forward!(
            ibv_init_ah_from_wc(context, port_num, wc, grh, ah_attr)
                as fn(*mut ibv_context, u8, *mut ibv_wc, *mut ibv_grh, *mut ibv_ah_attr) -> c_int,
            -1
        );
    }
    // SAFETY: the program passes its completion.
    let (Some(w), false) = (unsafe { wc.as_ref() }, ah_attr.is_null()) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    match reply_attr(w, grh, port_num) {
        Ok(a) => {
            // SAFETY: the program passes room for the attributes.
            unsafe { ah_attr.write(a) };
            0
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port_num: u8,
) -> *mut ibv_ah {
    // SAFETY: the program passes a live PD.
    let Some((p, ctx)) = (unsafe { Pd::ours(pd) }) else {
        return forward!(
            ibv_create_ah_from_wc(pd, wc, grh, port_num)
                as fn(*mut ibv_pd, *mut ibv_wc, *mut ibv_grh, u8) -> *mut ibv_ah,
            null_mut()
        );
    };
    // SAFETY: the program passes its completion.
    let Some(w) = (unsafe { wc.as_ref() }) else {
        set_errno(libc::EINVAL);
        return null_mut();
    };
    match reply_attr(w, grh, port_num) {
        Ok(a) => create(p, ctx, &a),
        Err(e) => {
            set_errno(e);
            null_mut()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_without_grh_names_our_port() {
        let own = Gid::from_guid(0x1122_3344_5566_7788);
        let mut a = ibv_ah_attr {
            port_num: 1,
            sl: 3,
            ..ibv_ah_attr::default()
        };
        let got = ah_attr(&a, own).unwrap();
        assert_eq!((got.dgid, got.sl), (own, 3));
        a.is_global = 1;
        a.grh.dgid.raw = [7; 16];
        a.grh.hop_limit = 9;
        let got = ah_attr(&a, own).unwrap();
        assert_eq!((got.dgid.raw, got.hop_limit), ([7; 16], 9));
        a.grh.sgid_index = 1;
        assert!(ah_attr(&a, own).is_err());
        a.port_num = 2;
        assert!(ah_attr(&a, own).is_err());
    }

    #[test]
    fn a_reply_goes_to_the_source_gid() {
        let mut grh = ibv_grh::default();
        grh.sgid.raw = [5; 16];
        grh.version_tclass_flow = ((6u32 << 28) | (0x12 << 20) | 0x345).to_be();
        let wc = ibv_wc {
            wc_flags: IBV_WC_GRH,
            ..ibv_wc::default()
        };
        let a = reply_attr(&wc, &grh, 1).unwrap();
        assert_eq!(a.is_global, 1);
        // SAFETY: a plain byte union.
        assert_eq!(unsafe { a.grh.dgid.raw }, [5; 16]);
        assert_eq!((a.grh.traffic_class, a.grh.flow_label), (0x12, 0x345));
        assert!(reply_attr(&wc, core::ptr::null(), 1).is_err());
        assert!(reply_attr(&wc, &grh, 2).is_err());
    }
}
