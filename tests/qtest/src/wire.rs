// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The device-visible structures as bytes: `qhca_cmd` (64 B), `qhca_eqe` (32 B) and
//! `qhca_device_attr` (128 B), little-endian as the header says. The structs themselves are
//! qhca-uapi's bindgen output of `qhca-abi.h`; the offsets used here are checked against them
//! at compile time.

use core::mem::{offset_of, size_of};
use qhca_uapi::{qhca_cmd, qhca_device_attr, qhca_eqe};

pub const CMD_SIZE: usize = size_of::<qhca_cmd>();
pub const EQE_SIZE: usize = size_of::<qhca_eqe>();
pub const ATTR_SIZE: usize = size_of::<qhca_device_attr>();

const _: () = {
    assert!(CMD_SIZE == 64 && EQE_SIZE == 32 && ATTR_SIZE == 128);
    assert!(offset_of!(qhca_cmd, opcode) == 0);
    assert!(offset_of!(qhca_cmd, flags) == 2);
    assert!(offset_of!(qhca_cmd, token) == 4);
    assert!(offset_of!(qhca_cmd, out_addr) == 8);
    assert!(offset_of!(qhca_cmd, out_len) == 16);
    assert!(offset_of!(qhca_cmd, in_ext) == 20);
    assert!(offset_of!(qhca_cmd, in_) == 24);
    assert!(offset_of!(qhca_eqe, type_) == 0);
    assert!(offset_of!(qhca_eqe, status) == 1);
    assert!(offset_of!(qhca_eqe, rsvd0) == 2);
    assert!(offset_of!(qhca_eqe, token) == 4);
    assert!(offset_of!(qhca_eqe, data) == 8);
    assert!(offset_of!(qhca_eqe, rsvd1) == 24);
    assert!(offset_of!(qhca_eqe, owner) == 31);
    assert!(offset_of!(qhca_device_attr, vendor_id) == 32);
    assert!(offset_of!(qhca_device_attr, max_qp_rd_atom) == 76);
    assert!(offset_of!(qhca_device_attr, max_qp_init_rd_atom) == 78);
    assert!(offset_of!(qhca_device_attr, max_mr_size) == 80);
    assert!(offset_of!(qhca_device_attr, odp_general_caps) == 96);
    assert!(offset_of!(qhca_device_attr, odp_rc_caps) == 104);
    assert!(offset_of!(qhca_device_attr, odp_ud_caps) == 108);
    assert!(offset_of!(qhca_device_attr, max_mw) == 112);
    assert!(offset_of!(qhca_device_attr, max_ah) == 116);
};

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// A command with every field zero but the opcode and token.
pub fn cmd(opcode: u32, token: u32) -> qhca_cmd {
    qhca_cmd {
        opcode: opcode as u16,
        token,
        ..Default::default()
    }
}

pub fn encode_cmd(c: &qhca_cmd) -> [u8; CMD_SIZE] {
    let mut b = [0u8; CMD_SIZE];
    b[0..2].copy_from_slice(&c.opcode.to_le_bytes());
    b[2..4].copy_from_slice(&c.flags.to_le_bytes());
    b[4..8].copy_from_slice(&c.token.to_le_bytes());
    b[8..16].copy_from_slice(&c.out_addr.to_le_bytes());
    b[16..20].copy_from_slice(&c.out_len.to_le_bytes());
    b[20..24].copy_from_slice(&c.in_ext.to_le_bytes());
    for (i, v) in c.in_.iter().enumerate() {
        b[24 + 8 * i..32 + 8 * i].copy_from_slice(&v.to_le_bytes());
    }
    b
}

pub fn decode_cmd(b: &[u8]) -> qhca_cmd {
    assert!(b.len() >= CMD_SIZE);
    let mut in_ = [0u64; 5];
    for (i, v) in in_.iter_mut().enumerate() {
        *v = u64_at(b, 24 + 8 * i);
    }
    qhca_cmd {
        opcode: u16_at(b, 0),
        flags: u16_at(b, 2),
        token: u32_at(b, 4),
        out_addr: u64_at(b, 8),
        out_len: u32_at(b, 16),
        in_ext: u32_at(b, 20),
        in_,
    }
}

pub fn decode_eqe(b: &[u8]) -> qhca_eqe {
    assert!(b.len() >= EQE_SIZE);
    qhca_eqe {
        type_: b[0],
        status: b[1],
        rsvd0: u16_at(b, 2),
        token: u32_at(b, 4),
        data: [u64_at(b, 8), u64_at(b, 16)],
        rsvd1: b[24..31].try_into().unwrap(),
        owner: b[31],
    }
}

pub fn decode_attr(b: &[u8]) -> qhca_device_attr {
    assert!(b.len() >= ATTR_SIZE);
    qhca_device_attr {
        abi_version: u32_at(b, 0),
        num_uars: u32_at(b, 4),
        caps: u64_at(b, 8),
        node_guid: u64_at(b, 16),
        fw_version: u64_at(b, 24),
        vendor_id: u32_at(b, 32),
        vendor_part_id: u32_at(b, 36),
        hw_ver: u32_at(b, 40),
        max_pd: u32_at(b, 44),
        max_cq: u32_at(b, 48),
        max_cqe: u32_at(b, 52),
        max_qp: u32_at(b, 56),
        max_qp_wr: u32_at(b, 60),
        max_sge: u32_at(b, 64),
        max_inline: u32_at(b, 68),
        max_mr: u32_at(b, 72),
        max_qp_rd_atom: u16_at(b, 76),
        max_qp_init_rd_atom: u16_at(b, 78),
        max_mr_size: u64_at(b, 80),
        page_size_cap: u64_at(b, 88),
        odp_general_caps: u64_at(b, 96),
        odp_rc_caps: u32_at(b, 104),
        odp_ud_caps: u32_at(b, 108),
        max_mw: u32_at(b, 112),
        max_ah: u32_at(b, 116),
        max_srq: u32_at(b, 120),
        max_srq_wr: u32_at(b, 124),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmd_roundtrip() {
        let c = qhca_cmd {
            opcode: 0x0102,
            flags: 0x0304,
            token: 0x0506_0708,
            out_addr: 0x1122_3344_5566_7788,
            out_len: 0x99aa_bbcc,
            in_ext: 0xdead_beef,
            in_: [1, 2, 3, 4, u64::MAX],
        };
        let b = encode_cmd(&c);
        assert_eq!(&b[0..4], &[0x02, 0x01, 0x04, 0x03]);
        assert_eq!(b[8], 0x88);
        let d = decode_cmd(&b);
        assert_eq!(format!("{c:?}"), format!("{d:?}"));
    }

    #[test]
    fn eqe_fields() {
        let mut b = [0u8; 32];
        b[0] = 1;
        b[1] = 6;
        b[4..8].copy_from_slice(&0xabcd_ef01u32.to_le_bytes());
        b[8..16].copy_from_slice(&7u64.to_le_bytes());
        b[31] = 1;
        let e = decode_eqe(&b);
        assert_eq!(
            (e.type_, e.status, e.token, e.data[0], e.owner),
            (1, 6, 0xabcd_ef01, 7, 1)
        );
    }
}
