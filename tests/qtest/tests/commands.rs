// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The happy path of the command queue: every command a well-behaved driver sends, its
//! completion event (type, status, token, data, owner bit), ring wrap-around and MSI-X.

use qhca_qtest::abi::*;
use qhca_qtest::hca::*;
use qhca_qtest::wire::{self, ATTR_SIZE};
use qhca_qtest::Hca;

#[test]
fn nop_completes_with_its_token() {
    let mut h = Hca::start("");
    h.bring_up(4, 4);
    let e = h.nop();
    assert_eq!(e.data, [0, 0], "NOP returns no data: {e:?}");
    assert_eq!(h.reg(QHCA_REG_CMDQ_CI), 1, "CMDQ_CI after one command");
    assert_eq!(h.reg(QHCA_REG_EQ_PI), 1, "EQ_PI after one event");
    assert_eq!(
        h.reg(QHCA_REG_EQ_CI),
        1,
        "EQ_CI reads back what the driver wrote"
    );
    // Tokens are echoed whatever they are.
    for token in [0u32, 1, 0xffff_ffff, 0x8000_0000] {
        let c = wire::cmd(QHCA_CMD_NOP, token);
        let e = h.expect_status(&c, QHCA_CMD_OK);
        assert_eq!(e.token, token);
    }
    assert_eq!(
        h.counters(),
        Counters::default(),
        "a clean run counts nothing"
    );
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

#[test]
fn query_device_reports_attributes() {
    let guid: u64 = 0x0011_2233_4455_6677;
    let mut h = Hca::start(&format!("num-uars=24,node-guid={guid:#x}"));
    h.bring_up(3, 3);
    // A 256-byte buffer full of 0xaa: the device writes exactly the 128-byte attribute struct.
    h.qt.memset(OUT_RAM, 256, 0xaa);
    let st = h.query_device(OUT_RAM, 256);
    assert_eq!(st, QHCA_CMD_OK, "QUERY_DEVICE status {}", status_name(st));
    let b = h.qt.memread(OUT_RAM, 256);
    let a = wire::decode_attr(&b);
    assert_eq!(a.abi_version, QHCA_ABI_VERSION, "{a:?}");
    assert_eq!(a.num_uars, 24, "{a:?}");
    let caps = h.reg(QHCA_REG_CAPS_LO) as u64 | (h.reg(QHCA_REG_CAPS_HI) as u64) << 32;
    assert_eq!(a.caps, caps, "attr.caps matches the CAPS registers");
    assert_eq!(a.node_guid, guid, "node_guid from the node-guid property");
    assert_eq!(a.vendor_id, QHCA_PCI_VENDOR_ID, "{a:?}");
    assert_eq!(a.vendor_part_id, QHCA_PCI_DEVICE_ID, "{a:?}");
    assert_eq!((a.max_qp_rd_atom, a.max_qp_init_rd_atom), (16, 16), "{a:?}");
    assert_eq!(
        (a.odp_general_caps, a.odp_rc_caps, a.odp_ud_caps),
        (
            (QHCA_ODP_SUPPORT | QHCA_ODP_SUPPORT_IMPLICIT) as u64,
            QHCA_ODP_SUPPORT_SEND
                | QHCA_ODP_SUPPORT_RECV
                | QHCA_ODP_SUPPORT_WRITE
                | QHCA_ODP_SUPPORT_READ
                | QHCA_ODP_SUPPORT_ATOMIC
                | QHCA_ODP_SUPPORT_SRQ_RECV,
            QHCA_ODP_SUPPORT_SEND
        ),
        "ODP capabilities, as ibv_odp_caps: {a:?}"
    );
    assert_ne!(a.caps & CAP_ODP, 0, "QHCA_CAP_ODP: {a:?}");
    assert_ne!(a.caps & CAP_UD, 0, "QHCA_CAP_UD: {a:?}");
    assert_ne!(a.caps & CAP_PORT, 0, "QHCA_CAP_PORT: {a:?}");
    assert_eq!(
        a.caps & !CAP_KNOWN_MASK,
        0,
        "caps this ABI does not define: {a:?}"
    );
    assert_eq!(
        (a.max_mw, a.max_ah, a.max_srq, a.max_srq_wr),
        (4096, 4096, 1024, 32768),
        "{a:?}"
    );
    assert!(
        b[ATTR_SIZE..].iter().all(|&x| x == 0xaa),
        "device wrote past the 128-byte attribute struct"
    );

    // Exactly 128 bytes is enough, and the result is the same.
    h.qt.memset(OUT_RAM, 256, 0x55);
    assert_eq!(h.query_device(OUT_RAM, ATTR_SIZE as u32), QHCA_CMD_OK);
    let b2 = h.qt.memread(OUT_RAM, 256);
    assert_eq!(&b2[..ATTR_SIZE], &b[..ATTR_SIZE], "same attributes twice");
    assert!(b2[ATTR_SIZE..].iter().all(|&x| x == 0x55));

    // A buffer in high RAM, not 64-byte aligned: any writable address is fine.
    let odd = (RAM_SIZE - 4096) + 3;
    assert_eq!(h.query_device(odd, ATTR_SIZE as u32), QHCA_CMD_OK);
    assert_eq!(&h.qt.memread(odd, ATTR_SIZE)[..], &b[..ATTR_SIZE]);
}

#[test]
fn uar_allocation_lowest_free_and_exhaustion() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(3, 3);
    for want in 0..4u64 {
        assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, want), "ALLOC_UAR #{want}");
    }
    let (st, _) = h.alloc_uar();
    assert_eq!(
        st,
        QHCA_CMD_NO_RESOURCES,
        "fifth ALLOC_UAR of 4: {}",
        status_name(st)
    );
    assert_eq!(h.free_uar(1), QHCA_CMD_OK);
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 1), "the freed page comes back");
    assert_eq!(h.free_uar(3), QHCA_CMD_OK);
    assert_eq!(h.free_uar(0), QHCA_CMD_OK);
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 0), "lowest free first");
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 3));
    assert_eq!(h.alloc_uar().0, QHCA_CMD_NO_RESOURCES);
    // Double free is an error, the page stays free once.
    assert_eq!(h.free_uar(2), QHCA_CMD_OK);
    assert_eq!(
        h.free_uar(2),
        QHCA_CMD_BAD_RESOURCE,
        "FREE_UAR of a page already free"
    );
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 2));
    assert_eq!(h.alloc_uar().0, QHCA_CMD_NO_RESOURCES);
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

#[test]
fn all_default_uars_allocate_in_order() {
    let mut h = Hca::start("");
    h.bring_up(6, 7);
    let n = h.reg(QHCA_REG_NUM_UARS) as u64;
    for want in 0..n {
        assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, want));
    }
    assert_eq!(h.alloc_uar().0, QHCA_CMD_NO_RESOURCES);
}

#[test]
fn owner_bit_flips_on_each_pass_of_a_small_eq() {
    let mut h = Hca::start("");
    h.bring_up(1, 1); // 2-entry command ring, 2-entry event ring
    let mut seen = Vec::new();
    for i in 0..7u32 {
        let e = h.nop(); // next_eqe checks owner == ((i >> 1) + 1) & 1
        seen.push(e.owner);
        // Slot i & 1 now holds this pass's owner bit in RAM, the other slot the previous one's.
        let raw = h.qt.memread(EQ_RAM + ((i & 1) as u64) * 32 + 31, 1)[0];
        assert_eq!(raw, e.owner);
    }
    assert_eq!(
        seen,
        vec![1, 1, 0, 0, 1, 1, 0],
        "owner bits over 3.5 passes of a 2-entry EQ"
    );
    assert_eq!(h.reg(QHCA_REG_CMDQ_CI), 7);
    assert_eq!(h.reg(QHCA_REG_EQ_PI), 7);
    assert_eq!(h.reg(QHCA_REG_EQ_OVERFLOWS), 0);

    // Same with a 4-entry EQ: 1,1,1,1,0,0,0,0,1
    h.bring_up(2, 2);
    let owners: Vec<u8> = (0..9).map(|_| h.nop().owner).collect();
    assert_eq!(owners, vec![1, 1, 1, 1, 0, 0, 0, 0, 1]);
}

#[test]
fn batch_completes_in_order() {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(3, 4);
    let mut cmds = Vec::new();
    let mut want = Vec::new();
    for i in 0..8u32 {
        let (c, st) = match i % 4 {
            0 => (h.cmd(QHCA_CMD_NOP), QHCA_CMD_OK),
            1 => (h.cmd(QHCA_CMD_ALLOC_UAR), QHCA_CMD_OK),
            2 => (h.cmd(0x7777), QHCA_CMD_BAD_OPCODE),
            _ => {
                let mut c = h.cmd(QHCA_CMD_FREE_UAR);
                c.in_[0] = 1000;
                (c, QHCA_CMD_BAD_RESOURCE)
            }
        };
        cmds.push(c);
        want.push(st);
    }
    h.post_batch(&cmds); // one PI write for 8 commands
    h.wait_events(8);
    let mut uar = 0;
    for (c, st) in cmds.iter().zip(want) {
        let e = h.completion_of(c);
        assert_eq!(e.status as u32, st, "{c:?} -> {e:?}");
        if c.opcode as u32 == QHCA_CMD_ALLOC_UAR {
            assert_eq!(e.data[0], uar, "ALLOC_UAR in a batch");
            uar += 1;
        }
    }
    assert_eq!(h.reg(QHCA_REG_CMDQ_CI), 8);
}

#[test]
fn batch_larger_than_one_bottom_half_run() {
    // 200 commands behind one doorbell: the device runs them in several bottom-half passes
    // (it yields to the main loop every few dozen), in order, none lost or repeated.
    let mut h = Hca::start("");
    h.bring_up(8, 8);
    let cmds: Vec<_> = (0..200).map(|_| h.cmd(QHCA_CMD_NOP)).collect();
    h.post_batch(&cmds);
    h.wait_events(200);
    for c in &cmds {
        h.completion_of(c);
    }
    h.settle();
    assert_eq!(h.eq_pi(), 200);
    assert_eq!(h.reg(QHCA_REG_CMDQ_CI), 200);
}

#[test]
fn command_ring_wraps() {
    let mut h = Hca::start("num-uars=16");
    h.bring_up(1, 3); // 2-entry command ring
    for i in 0..11u64 {
        assert_eq!(
            h.alloc_uar(),
            (QHCA_CMD_OK, i),
            "ALLOC_UAR #{i} through a 2-entry ring"
        );
        assert_eq!(h.reg(QHCA_REG_CMDQ_CI), i as u32 + 1);
    }
    // Two commands filling the ring exactly, one doorbell.
    let a = h.cmd(QHCA_CMD_NOP);
    let b = h.cmd(QHCA_CMD_NOP);
    h.post_batch(&[a, b]);
    h.completion_of(&a);
    h.completion_of(&b);
}

#[test]
fn msix_pending_while_masked_then_delivered() {
    let mut h = Hca::start("");
    h.bring_up(3, 3);
    h.setup_msix(true);
    h.set_reg(QHCA_REG_INTR_CTRL, QHCA_INTR_EQ_ENABLE);

    // Masked: the event sets the PBA bit and writes nothing.
    h.nop();
    assert!(
        h.poll(|h| h.msix_pending()),
        "PBA bit for vector 0 after an event with the vector masked"
    );
    assert!(!h.take_msi(), "a masked vector must not deliver");
    // Unmasking delivers the pending message and clears the bit.
    h.set_msix_masked(false);
    assert!(
        h.take_msi(),
        "unmasking a pending vector delivers its message"
    );
    assert!(!h.msix_pending());

    // Unmasked: each event delivers.
    for _ in 0..3 {
        h.nop();
        assert!(h.poll(|h| h.take_msi()), "MSI-X message after an event");
        assert!(!h.msix_pending());
    }

    // INTR_CTRL.EQ_ENABLE off: events, no interrupt.
    h.set_reg(QHCA_REG_INTR_CTRL, 0);
    h.nop();
    h.settle();
    assert!(!h.take_msi(), "no MSI-X with INTR_CTRL.EQ_ENABLE clear");
    assert!(!h.msix_pending());

    // MSI-X disabled in config space: no message either.
    h.set_reg(QHCA_REG_INTR_CTRL, QHCA_INTR_EQ_ENABLE);
    let m = h.msix;
    m.set_enabled(&mut h.qt, false);
    h.nop();
    h.settle();
    assert!(!h.take_msi(), "no MSI-X message with MSI-X disabled");
    m.set_enabled(&mut h.qt, true);
    h.nop();
    assert!(h.poll(|h| h.take_msi()), "MSI-X again once re-enabled");
}

#[test]
fn polled_commands_complete_in_their_doorbell_write_without_an_interrupt() {
    let mut h = Hca::start("");
    h.bring_up(3, 3);
    h.setup_msix(false);
    h.set_reg(QHCA_REG_INTR_CTRL, QHCA_INTR_EQ_ENABLE);

    // QHCA_CMD_FLAG_POLLED: the completion is in the ring, and no message is sent.
    let mut c = h.cmd(QHCA_CMD_NOP);
    c.flags = QHCA_CMD_FLAG_POLLED as u16;
    let pi = h.eq_pi();
    h.post(&c);
    assert_eq!(h.eq_pi(), pi.wrapping_add(1), "done inside the write");
    assert_eq!(h.completion_of(&c).status as u32, QHCA_CMD_OK);
    h.settle();
    assert!(
        !h.take_msi(),
        "no MSI-X for a polled command done in its write"
    );

    // Without the flag, the same command raises the vector.
    h.nop();
    assert!(h.poll(|h| h.take_msi()), "MSI-X for a command not polled");

    // Other flag bits are refused (RESUME is MAP_ODP's alone).
    for f in [QHCA_CMD_FLAG_RESUME, 1 << 2, 1 << 15] {
        let mut c = h.cmd(QHCA_CMD_NOP);
        c.flags = f as u16;
        h.expect_status(&c, QHCA_CMD_BAD_PARAM);
    }
}

#[test]
fn reset_clears_everything() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(2, 2);
    for i in 0..3 {
        assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, i));
    }
    h.set_reg(QHCA_REG_INTR_CTRL, QHCA_INTR_EQ_ENABLE);
    h.set_reg(QHCA_REG_MAGIC, 0); // RO: GUEST_ERRORS
                                  // Allocated page, well-formed word, but no queue exists: DB_VIOLATIONS.
    h.doorbell(
        0,
        qhca_uapi::db::DbWord::new(qhca_uapi::db::DbType::CqArm, 3, 0).raw(),
    );
    let c = h.counters();
    assert!(c.guest_errors > 0 && c.db_violations > 0, "{c:?}");

    h.set_reg(QHCA_REG_CTRL, QHCA_CTRL_RESET);
    assert_eq!(
        h.reg(QHCA_REG_CTRL),
        0,
        "CTRL.RESET self-clears, ENABLE is gone"
    );
    assert_eq!(h.status(), 0, "not READY after RESET");
    assert_eq!(
        h.counters(),
        Counters::default(),
        "counters cleared by RESET"
    );
    for (name, off) in [
        ("CMDQ_BASE_LO", QHCA_REG_CMDQ_BASE_LO),
        ("CMDQ_BASE_HI", QHCA_REG_CMDQ_BASE_HI),
        ("CMDQ_LOG_SIZE", QHCA_REG_CMDQ_LOG_SIZE),
        ("EQ_BASE_LO", QHCA_REG_EQ_BASE_LO),
        ("EQ_BASE_HI", QHCA_REG_EQ_BASE_HI),
        ("EQ_LOG_SIZE", QHCA_REG_EQ_LOG_SIZE),
        ("CMDQ_CI", QHCA_REG_CMDQ_CI),
        ("EQ_PI", QHCA_REG_EQ_PI),
        ("EQ_CI", QHCA_REG_EQ_CI),
        ("INTR_CTRL", QHCA_REG_INTR_CTRL),
    ] {
        assert_eq!(h.reg(off), 0, "{name} after RESET");
    }
    assert_eq!(h.reg(QHCA_REG_MAGIC), QHCA_MAGIC);
    assert_eq!(h.reg(QHCA_REG_NUM_UARS), 4);

    // Not READY: a producer index write does nothing but count.
    h.ring(1);
    h.settle();
    assert_eq!(h.reg(QHCA_REG_CMDQ_CI), 0);
    assert_eq!(h.guest_errors(), 1, "CMDQ_PI while not READY is counted");

    // UARs were freed: allocation restarts at 0.
    h.bring_up(2, 2);
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 0));
    h.nop();
}
