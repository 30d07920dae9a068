// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Sizes, alignments and field offsets of every ABI struct, written out by hand from the header.
//! bindgen's own layout tests are turned off (the file must build in the kernel); these replace
//! them and double as a review checklist when the header changes.

use core::mem::{align_of, offset_of, size_of};
use qhca_uapi::*;

macro_rules! check_layout {
    ($ty:ty, size $size:expr, align $align:expr, { $($field:ident @ $off:expr),* $(,)? }) => {{
        assert_eq!(size_of::<$ty>(), $size, "sizeof({})", stringify!($ty));
        assert_eq!(align_of::<$ty>(), $align, "alignof({})", stringify!($ty));
        $(
            assert_eq!(
                offset_of!($ty, $field),
                $off,
                "offsetof({}, {})",
                stringify!($ty),
                stringify!($field)
            );
        )*
    }};
}

#[test]
fn qhca_cmd_layout() {
    check_layout!(qhca_cmd, size 64, align 8, {
        opcode @ 0,
        flags @ 2,
        token @ 4,
        out_addr @ 8,
        out_len @ 16,
        rsvd0 @ 20,
        in_ @ 24,
    });
    assert_eq!(size_of::<[u64; 5]>(), 40);
}

#[test]
fn qhca_eqe_layout() {
    check_layout!(qhca_eqe, size 32, align 8, {
        type_ @ 0,
        status @ 1,
        rsvd0 @ 2,
        token @ 4,
        data @ 8,
        rsvd1 @ 24,
        owner @ 31,
    });
}

#[test]
fn qhca_device_attr_layout() {
    check_layout!(qhca_device_attr, size 128, align 8, {
        abi_version @ 0,
        num_uars @ 4,
        caps @ 8,
        node_guid @ 16,
        fw_version @ 24,
        vendor_id @ 32,
        vendor_part_id @ 36,
        hw_ver @ 40,
        max_pd @ 44,
        max_cq @ 48,
        max_cqe @ 52,
        max_qp @ 56,
        max_qp_wr @ 60,
        max_sge @ 64,
        max_inline @ 68,
        max_mr @ 72,
        rsvd0 @ 76,
        max_mr_size @ 80,
        page_size_cap @ 88,
        rsvd1 @ 96,
    });
}

#[test]
fn qhca_ioc_query_device_layout() {
    check_layout!(qhca_ioc_query_device, size 160, align 8, {
        size @ 0,
        comp_mask @ 4,
        abi_version @ 8,
        uar_index @ 12,
        rsvd_in @ 16,
        attr @ 32,
    });
}

#[test]
fn field_types_have_the_header_widths() {
    // A field whose C type changes width changes its Rust type too; pin the ones that travel
    // across the ioctl boundary so such a change cannot slip through with the same offsets.
    let q = qhca_ioc_query_device::default();
    let _: (u32, u32, u32, u32, [u64; 2]) =
        (q.size, q.comp_mask, q.abi_version, q.uar_index, q.rsvd_in);
    let a = q.attr;
    let _: (u32, u32, u64, u64, u64) =
        (a.abi_version, a.num_uars, a.caps, a.node_guid, a.fw_version);
    let _: (u64, u64, [u64; 4]) = (a.max_mr_size, a.page_size_cap, a.rsvd1);
    let e = qhca_eqe::default();
    let _: (u8, u8, u16, u32, [u64; 2], [u8; 7], u8) = (
        e.type_, e.status, e.rsvd0, e.token, e.data, e.rsvd1, e.owner,
    );
    let c = qhca_cmd::default();
    let _: (u16, u16, u32, u64, u32, u32, [u64; 5]) = (
        c.opcode, c.flags, c.token, c.out_addr, c.out_len, c.rsvd0, c.in_,
    );
}

#[test]
fn defaults_are_all_zero() {
    // Reserved fields must be zero: Default must give exactly that.
    let q = qhca_ioc_query_device::default();
    // SAFETY: qhca_ioc_query_device is repr(C), 160 bytes, with no padding (checked above and
    // by the C check with -Wpadded), so every byte is initialized and may be read as u8.
    let bytes: [u8; 160] = unsafe { core::mem::transmute(q) };
    assert!(bytes.iter().all(|&b| b == 0));
}

#[test]
fn constants_the_other_layers_rely_on() {
    assert_eq!(QHCA_ABI_VERSION, 1);
    assert_eq!(QHCA_PCI_VENDOR_ID, 0x1234);
    assert_eq!(QHCA_PCI_DEVICE_ID, 0x4843);
    assert_eq!(QHCA_UAR_PAGE_SIZE, 4096);
    assert_eq!(UAR_PAGE_SIZE, 4096);
    assert_eq!(MMAP_UAR_OFFSET, 0);
    assert_eq!(QHCA_DB_OFFSET, 0);
    assert_eq!(QHCA_MAGIC.to_le_bytes(), *b"QHCA");
    assert_eq!(CAP_UAR_ISOLATION, 1);
    assert_eq!(CAP_RC, 2);
    assert_eq!(CAP_KNOWN_MASK, CAP_UAR_ISOLATION | CAP_RC);
    assert_eq!(QHCA_EQE_OWNER, 1);
}
