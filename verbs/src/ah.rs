// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Address handles, for the sends of UD QPs.

use core::cell::UnsafeCell;
use core::ffi::c_int;
use core::ptr::null_mut;

use std::net::Ipv4Addr;

use qhca::{AhAttr, Gid};

use crate::device::{find_gid_index, Ctx};
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

/// The provider's attributes for `attr`, on a context whose port GID 0 is `own`. Without a GRH
/// (`is_global` 0) the handle names our own port's GID 0, from GID 0. With one, the source is
/// `grh.sgid_index` and the destination `grh.dgid`, whatever they are: the device refuses an
/// entry that is not valid or a destination of the other family (`EINVAL`), and a destination
/// it cannot reach only loses the datagrams, as on a real fabric.
pub(crate) fn ah_attr(attr: &ibv_ah_attr, own: Gid) -> Result<AhAttr, &'static str> {
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
    if usize::from(g.sgid_index) >= qhca::GID_TABLE_LEN {
        return Err("sgid_index beyond the GID table");
    }
    Ok(AhAttr {
        // SAFETY: a GID is 16 bytes whichever union member is read.
        dgid: Gid {
            raw: unsafe { g.dgid.raw },
        },
        sgid_index: g.sgid_index,
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

/// How a received GRH area is laid out: an IPv6-style GRH (`struct ibv_grh`), or, for a
/// datagram between IPv4 GIDs, 20 bytes then the IPv4 header (RoCEv2). Decided as libibverbs's
/// `get_grh_header_version` does: not version 6 in the GRH's first word but an IPv4 header
/// behind it is IPv4; version 6 is IPv6 unless a 20-byte IPv4 header with a correct checksum
/// sits behind it.
fn grh_version(b: &[u8; GRH_LEN]) -> Result<u8, c_int> {
    let ip4 = &b[IPV4_AT..];
    if b[0] >> 4 != 6 {
        return if ip4[0] >> 4 == 4 {
            Ok(4)
        } else {
            Err(libc::EPROTONOSUPPORT)
        };
    }
    if ip4[0] & 0xf != 5 {
        return Ok(6);
    }
    let mut sum: u32 = ip4
        .chunks_exact(2)
        .enumerate()
        // The checksum field itself (bytes 10..12) counts as zero.
        .map(|(i, w)| {
            if i == 5 {
                0
            } else {
                u32::from(u16::from_be_bytes([w[0], w[1]]))
            }
        })
        .sum();
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    let check = !(sum as u16);
    Ok(if check == u16::from_be_bytes([ip4[10], ip4[11]]) {
        4
    } else {
        6
    })
}

/// Bytes of the GRH area at the start of a UD receive buffer.
const GRH_LEN: usize = 40;
/// Where the IPv4 header starts in it, for a datagram between IPv4 GIDs.
const IPV4_AT: usize = 20;

/// The address that answers the sender of a UD receive (libibverbs's `ibv_init_ah_from_wc`):
/// its source GID as the destination, and as the source the entry of our table the datagram
/// was sent to (`find` looks it up). For a datagram between IPv4 GIDs the GRH area holds an
/// IPv4 header, whose addresses (IPv4-mapped), TTL and TOS are taken.
fn reply_attr(
    wc: &ibv_wc,
    grh: Option<&[u8; GRH_LEN]>,
    port_num: u8,
    find: impl Fn(Gid) -> Result<u8, c_int>,
) -> Result<ibv_ah_attr, c_int> {
    if port_num != qhca::PORT_NUM {
        return Err(libc::EINVAL);
    }
    let mut a = ibv_ah_attr {
        port_num,
        dlid: wc.slid,
        sl: wc.sl,
        src_path_bits: wc.dlid_path_bits,
        ..ibv_ah_attr::default()
    };
    if wc.wc_flags & IBV_WC_GRH == 0 {
        return Ok(a);
    }
    let b = grh.ok_or(libc::EINVAL)?;
    let vtf = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    a.is_global = 1;
    a.grh.flow_label = vtf & 0xf_ffff;
    if grh_version(b)? == 4 {
        let ip4 = &b[IPV4_AT..];
        let addr = |at: usize| Ipv4Addr::new(ip4[at], ip4[at + 1], ip4[at + 2], ip4[at + 3]);
        let (saddr, daddr) = (addr(12), addr(16));
        // No point looking multicast up in the table.
        if daddr.is_multicast() {
            return Err(libc::EINVAL);
        }
        a.grh.sgid_index = find(Gid::from_ipv4(daddr))?;
        a.grh.dgid.raw = Gid::from_ipv4(saddr).raw;
        a.grh.hop_limit = ip4[8];
        a.grh.traffic_class = ip4[1];
    } else {
        let gid = |at: usize| Gid {
            raw: b[at..at + 16].try_into().expect("16 bytes"),
        };
        let (sgid, dgid) = (gid(8), gid(24));
        if dgid.raw[0] == 0xff {
            return Err(libc::EINVAL);
        }
        a.grh.sgid_index = find(dgid)?;
        a.grh.dgid.raw = sgid.raw;
        a.grh.hop_limit = b[7];
        a.grh.traffic_class = (vtf >> 20) as u8;
    }
    Ok(a)
}

/// [`reply_attr`] on a context of ours: the GRH read from the program's buffer.
///
/// # Safety
///
/// `grh` is null or points to the 40 readable bytes the receive buffer starts with.
unsafe fn reply_attr_of(
    ctx: &Ctx,
    wc: &ibv_wc,
    grh: *const ibv_grh,
    port_num: u8,
) -> Result<ibv_ah_attr, c_int> {
    let bytes = if grh.is_null() {
        None
    } else {
        // SAFETY: the caller's promise; `struct ibv_grh` is the 40 bytes.
        Some(unsafe { grh.cast::<[u8; GRH_LEN]>().read_unaligned() })
    };
    reply_attr(wc, bytes.as_ref(), port_num, |g| find_gid_index(ctx, g))
}

const _: () = assert!(core::mem::size_of::<ibv_grh>() == GRH_LEN);

#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port_num: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: the program passes a live context.
    let Some(ctx) = (unsafe { Ctx::ours(context) }) else {
        return forward!(
            ibv_init_ah_from_wc(context, port_num, wc, grh, ah_attr)
                as fn(*mut ibv_context, u8, *mut ibv_wc, *mut ibv_grh, *mut ibv_ah_attr) -> c_int,
            -1
        );
    };
    // SAFETY: the program passes its completion.
    let (Some(w), false) = (unsafe { wc.as_ref() }, ah_attr.is_null()) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    // SAFETY: the program passes the GRH its receive buffer starts with (or NULL).
    match unsafe { reply_attr_of(ctx, w, grh, port_num) } {
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
    // SAFETY: the program passes the GRH its receive buffer starts with (or NULL).
    match unsafe { reply_attr_of(ctx, w, grh, port_num) } {
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
        assert_eq!((got.dgid, got.sl, got.sgid_index), (own, 3, 0));
        a.is_global = 1;
        a.grh.dgid.raw = [7; 16];
        a.grh.hop_limit = 9;
        let got = ah_attr(&a, own).unwrap();
        assert_eq!((got.dgid.raw, got.hop_limit), ([7; 16], 9));
        // The source entry goes to the device, which decides.
        a.grh.sgid_index = 1;
        assert_eq!(ah_attr(&a, own).unwrap().sgid_index, 1);
        a.grh.sgid_index = 16;
        assert!(ah_attr(&a, own).is_err());
        a.grh.sgid_index = 0;
        a.port_num = 2;
        assert!(ah_attr(&a, own).is_err());
    }

    /// Our table for the replies: GID 0 and 10.7.0.3 at index 2.
    fn find(g: Gid) -> Result<u8, c_int> {
        if g == Gid::from_guid(9) {
            Ok(0)
        } else if g == Gid::from_ipv4(Ipv4Addr::new(10, 7, 0, 3)) {
            Ok(2)
        } else {
            Err(libc::EINVAL)
        }
    }

    fn grh_wc() -> ibv_wc {
        ibv_wc {
            wc_flags: IBV_WC_GRH,
            sl: 2,
            ..ibv_wc::default()
        }
    }

    #[test]
    fn a_reply_goes_to_the_source_gid() {
        let mut grh = ibv_grh::default();
        grh.sgid.raw = [5; 16];
        grh.dgid.raw = Gid::from_guid(9).raw;
        grh.hop_limit = 64;
        grh.version_tclass_flow = ((6u32 << 28) | (0x12 << 20) | 0x345).to_be();
        // SAFETY: plain bytes of a plain C struct.
        let b: [u8; GRH_LEN] = unsafe { core::mem::transmute(grh) };
        let a = reply_attr(&grh_wc(), Some(&b), 1, find).unwrap();
        assert_eq!((a.is_global, a.port_num, a.sl), (1, 1, 2));
        // SAFETY: a plain byte union.
        assert_eq!(unsafe { a.grh.dgid.raw }, [5; 16]);
        assert_eq!((a.grh.traffic_class, a.grh.flow_label), (0x12, 0x345));
        assert_eq!((a.grh.sgid_index, a.grh.hop_limit), (0, 64));
        assert_eq!(
            reply_attr(&grh_wc(), None, 1, find).err(),
            Some(libc::EINVAL)
        );
        assert!(reply_attr(&grh_wc(), Some(&b), 2, find).is_err());
        // Sent to a GID we do not have (any more): no source to answer from.
        let mut other = b;
        other[24..40].copy_from_slice(&[6; 16]);
        assert_eq!(
            reply_attr(&grh_wc(), Some(&other), 1, find).err(),
            Some(libc::EINVAL)
        );
        // Without a GRH: the port alone.
        let a = reply_attr(&ibv_wc::default(), None, 1, find).unwrap();
        assert_eq!((a.is_global, a.port_num), (0, 1));
    }

    /// A datagram between IPv4 GIDs, as RoCEv2 delivers it: 20 zero bytes, then the IPv4
    /// header (from 10.7.0.9 to 10.7.0.3, TOS 0x20, TTL 63).
    fn ipv4_grh() -> [u8; GRH_LEN] {
        let mut b = [0u8; GRH_LEN];
        let ip4: [u8; 20] = [
            0x45, 0x20, 0x00, 0x40, 0x00, 0x00, 0x40, 0x00, 63, 17, 0, 0, 10, 7, 0, 9, 10, 7, 0, 3,
        ];
        b[IPV4_AT..].copy_from_slice(&ip4);
        b
    }

    #[test]
    fn a_reply_to_an_ipv4_sender_takes_the_ipv4_header() {
        let b = ipv4_grh();
        assert_eq!(grh_version(&b), Ok(4));
        let a = reply_attr(&grh_wc(), Some(&b), 1, find).unwrap();
        assert_eq!(a.is_global, 1);
        // SAFETY: a plain byte union.
        let dgid = Gid {
            raw: unsafe { a.grh.dgid.raw },
        };
        assert_eq!(dgid.to_string(), "::ffff:10.7.0.9");
        assert_eq!(
            (
                a.grh.sgid_index,
                a.grh.hop_limit,
                a.grh.traffic_class,
                a.grh.flow_label
            ),
            (2, 63, 0x20, 0)
        );
        // To an address we do not have, or a multicast one: refused.
        let mut b2 = b;
        b2[IPV4_AT + 19] = 4;
        assert!(reply_attr(&grh_wc(), Some(&b2), 1, find).is_err());
        b2[IPV4_AT + 16] = 224;
        assert_eq!(
            reply_attr(&grh_wc(), Some(&b2), 1, find).err(),
            Some(libc::EINVAL)
        );
        // Neither version 6 nor an IPv4 header.
        let mut junk = b;
        junk[IPV4_AT] = 0x55;
        assert_eq!(grh_version(&junk), Err(libc::EPROTONOSUPPORT));
    }

    /// Version 6 in the first word is IPv6, unless a 20-byte IPv4 header with a correct
    /// checksum follows (libibverbs's rule).
    #[test]
    fn a_version_6_grh_is_ipv6_unless_a_checked_ipv4_header_follows() {
        let mut b = ipv4_grh();
        b[0] = 0x60;
        assert_eq!(
            grh_version(&b),
            Ok(6),
            "checksum 0 is wrong for this header"
        );
        // The header's checksum, computed by hand: 0x4520 + 0x0040 + 0 + 0x4000 + 0x3f11 + 0 +
        // 0x0a07 + 0x0009 + 0x0a07 + 0x0003 = 0xd88b (no carry): ~ = 0x2774.
        b[IPV4_AT + 10..IPV4_AT + 12].copy_from_slice(&[0x27, 0x74]);
        assert_eq!(grh_version(&b), Ok(4));
        b[IPV4_AT] = 0x46; // IHL 6: not RoCEv2's header
        assert_eq!(grh_version(&b), Ok(6));
    }
}
