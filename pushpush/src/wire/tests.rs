// SPDX-License-Identifier: GPL-2.0-only OR MIT

use super::*;

fn pool(r: u32) -> PoolDesc {
    PoolDesc {
        pool_ref: r,
        elem_count: 16,
        elem_size: 4096,
        rkey: 0x1234_5600 | r,
        addr: 0x7f00_0000_0000 + u64::from(r) * 0x10_0000,
        context: 0xc0ff_ee00 + u64::from(r),
    }
}

fn all_kinds() -> Vec<Msg> {
    vec![
        Msg::BufferRecvPool(vec![pool(7), pool(8)]),
        Msg::BufferRecvPool(vec![]),
        Msg::BufferRecvPoolGet {
            elem_count: 5,
            elem_size: 256,
        },
        Msg::BufferRecvPoolUpdate(vec![
            ElemRef {
                pool_ref: 7,
                elem: 5,
            },
            ElemRef {
                pool_ref: 300,
                elem: 65535,
            },
        ]),
        Msg::BufferPoolFlushRequest(vec![7, 8, 9]),
        Msg::BufferPoolFlushReply(vec![7]),
        Msg::SendData(b"small".to_vec()),
        Msg::SendData(vec![0xa5; MAX_SEND_DATA]),
        Msg::SendData(vec![]),
        Msg::BufferRdmaIndicate(vec![Indication {
            at: ElemRef {
                pool_ref: 256,
                elem: 3,
            },
            len: 1 << 20,
        }]),
        Msg::CfgUtilRequest {
            code: 1,
            data: b"mtu".to_vec(),
        },
        Msg::CfgUtilReply {
            code: 1,
            status: 0,
            data: 1500u32.to_le_bytes().to_vec(),
        },
    ]
}

fn enc(m: &Msg, xid: u64) -> Vec<u8> {
    let mut v = Vec::new();
    m.encode(xid, &mut v);
    v
}

#[test]
fn every_message_round_trips() {
    for (i, m) in all_kinds().into_iter().enumerate() {
        let b = enc(&m, 0xdead_0000 + i as u64);
        assert_eq!(b.len(), m.encoded_len());
        assert!(b.len() <= MAX_MSG);
        let f = decode(&b).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        assert_eq!(f.msg, m);
        assert_eq!(f.xid, 0xdead_0000 + i as u64);
    }
}

#[test]
fn the_header_is_as_documented() {
    let b = enc(&Msg::BufferPoolFlushRequest(vec![7]), 0x0102_0304_0506_0708);
    assert_eq!(
        b,
        [
            4, 0, // BufferPoolFlushRequest
            1, 0, // version 1
            28, 0, 0, 0, // 16 + 8 + 4 bytes
            8, 7, 6, 5, 4, 3, 2, 1, // transaction context
            1, 0, 0, 0, 0, 0, 0, 0, // one entry, reserved
            7, 0, 0, 0
        ]
    );
    let p = enc(&Msg::BufferRecvPool(vec![pool(7)]), 0);
    assert_eq!(p.len(), 16 + 8 + 32);
    assert_eq!(&p[24..28], &7u32.to_le_bytes(), "pool_ref first");
    assert_eq!(&p[40..48], &pool(7).addr.to_le_bytes(), "then addr at +16");
}

#[test]
fn truncated_or_padded_messages_are_refused() {
    for m in all_kinds() {
        let b = enc(&m, 1);
        for cut in 0..b.len() {
            assert!(decode(&b[..cut]).is_err(), "{m:?} cut at {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(decode(&long).is_err(), "{m:?} plus a byte");
        // The header's length agrees with the SEND's, but the body's count does not.
        let n = long.len() as u32;
        long[4..8].copy_from_slice(&n.to_le_bytes());
        assert!(decode(&long).is_err(), "{m:?} padded");
    }
}

#[test]
fn version_function_and_reserved_fields_are_checked() {
    let b = enc(&Msg::BufferPoolFlushReply(vec![1, 2]), 9);
    let mut v = b.clone();
    v[2] = 2;
    assert_eq!(decode(&v), Err(WireError::Version(2)));
    for code in [0u16, 10, 0xffff] {
        let mut f = b.clone();
        f[0..2].copy_from_slice(&code.to_le_bytes());
        assert_eq!(decode(&f), Err(WireError::Function(code)));
    }
    let mut r = b.clone();
    r[20] = 1;
    assert!(matches!(decode(&r), Err(WireError::Field(_))));
    let mut i = enc(
        &Msg::BufferRdmaIndicate(vec![Indication {
            at: ElemRef {
                pool_ref: 1,
                elem: 2,
            },
            len: 3,
        }]),
        0,
    );
    i[36] = 1;
    assert!(matches!(decode(&i), Err(WireError::Field(_))));
    // A count that would overflow a usize multiply is a length error, not a panic.
    let mut huge = b.clone();
    huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(decode(&huge), Err(WireError::Length { .. })));
    assert!(decode(&vec![0u8; MAX_MSG + 1]).is_err());
}

#[test]
fn pool_shapes_are_checked_both_ways() {
    for (count, size) in [
        (0, 256),
        (MAX_POOL_ELEMS + 1, 256),
        (4, 0),
        (4, MAX_ELEM_SIZE + 1),
    ] {
        let get = Msg::BufferRecvPoolGet {
            elem_count: count,
            elem_size: size,
        };
        assert!(get.validate().is_err(), "{count} x {size}");
        let mut b = enc(
            &Msg::BufferRecvPoolGet {
                elem_count: 1,
                elem_size: 1,
            },
            0,
        );
        b[16..20].copy_from_slice(&count.to_le_bytes());
        b[20..24].copy_from_slice(&size.to_le_bytes());
        assert!(decode(&b).is_err(), "decode {count} x {size}");
    }
    let mut wraps = pool(1);
    wraps.addr = u64::MAX - 100;
    assert!(Msg::BufferRecvPool(vec![wraps]).validate().is_err());
    let mut b = enc(&Msg::BufferRecvPool(vec![pool(1)]), 0);
    b[40..48].copy_from_slice(&wraps.addr.to_le_bytes());
    assert!(decode(&b).is_err(), "a wrapping pool is refused on arrival");
    // The largest lists fit in one message; one more does not.
    let max = Msg::BufferRecvPool(vec![pool(1); MAX_POOLS_PER_MSG]);
    assert!(max.validate().is_ok());
    assert!(Msg::BufferRecvPool(vec![pool(1); MAX_POOLS_PER_MSG + 1])
        .validate()
        .is_err());
    assert!(Msg::SendData(vec![0; MAX_SEND_DATA + 1])
        .validate()
        .is_err());
}

#[test]
fn the_immediate_is_the_seeds_example() {
    let at = ElemRef {
        pool_ref: 7,
        elem: 5,
    };
    let imm = Imm::encode(at, 256).unwrap();
    assert_eq!(imm, 0x0705_00ff);
    assert_eq!(Imm::decode(imm), Indication { at, len: 256 });
}

#[test]
fn the_immediate_at_and_beyond_its_limits() {
    let at = |pool_ref, elem| ElemRef { pool_ref, elem };
    for (a, len) in [
        (at(0, 0), 1),
        (at(255, 255), 65536),
        (at(255, 0), 1),
        (at(0, 255), 65535),
        (at(128, 7), 4096),
    ] {
        let imm = Imm::encode(a, len).unwrap_or_else(|| panic!("{a:?} {len}"));
        assert_eq!(Imm::decode(imm), Indication { at: a, len });
    }
    for (a, len) in [
        (at(256, 0), 1),
        (at(0, 256), 1),
        (at(0, 0), 0),
        (at(0, 0), 65537),
        (at(u32::MAX, u32::MAX), u32::MAX),
    ] {
        assert_eq!(
            Imm::encode(a, len),
            None,
            "{a:?} {len} needs BufferRDMAIndicate"
        );
    }
    // Every 32-bit value decodes to something in range (the receiver then checks it).
    for imm in [0u32, u32::MAX, 0x00ff_0000, 0xff00_ffff] {
        let i = Imm::decode(imm);
        assert!(i.at.pool_ref < 256 && i.at.elem < 256);
        assert!((1..=65536).contains(&i.len));
    }
}

#[test]
fn random_bytes_never_panic() {
    // A small xorshift: deterministic, no dependency.
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let kinds = all_kinds();
    for i in 0..20_000 {
        let mut b = enc(&kinds[i % kinds.len()], 0);
        // Flip a few bytes, sometimes in the header.
        for _ in 0..1 + next() % 3 {
            let at = (next() as usize) % b.len();
            b[at] = next() as u8;
        }
        if let Ok(f) = decode(&b) {
            // Whatever decodes re-encodes to the same bytes.
            assert_eq!(enc(&f.msg, f.xid), b);
        }
    }
}
