// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! What the device says about itself before anyone enables it: PCI identity, BAR shapes and
//! sizes, the MSI-X capability, the read-only registers and the reset state.

use qhca_qtest::abi::*;
use qhca_qtest::pci::{self, *};
use qhca_qtest::Hca;

#[test]
fn pci_identity_bars_and_msix() {
    let mut h = Hca::start("num-uars=24");
    let (qt, d) = (&mut h.qt, h.dev);
    assert_eq!(cfg_read16(qt, d, PCI_VENDOR_ID), QHCA_PCI_VENDOR_ID as u16);
    assert_eq!(cfg_read16(qt, d, PCI_DEVICE_ID), QHCA_PCI_DEVICE_ID as u16);
    assert_eq!(
        cfg_read8(qt, d, PCI_REVISION_ID),
        QHCA_PCI_REVISION as u8,
        "revision"
    );
    assert_eq!(
        cfg_read16(qt, d, PCI_CLASS_DEVICE),
        QHCA_PCI_CLASS as u16,
        "class/subclass"
    );
    assert_eq!(cfg_read8(qt, d, PCI_CLASS_PROG), 0, "programming interface");
    assert_eq!(cfg_read8(qt, d, PCI_HEADER_TYPE) & 0x7f, 0, "type-0 header");

    let bars = h.bars.clone();
    let bar = |i: u32| {
        *bars
            .iter()
            .find(|b| b.index == i as usize)
            .unwrap_or_else(|| panic!("BAR{i} missing: {bars:?}"))
    };
    let b0 = bar(QHCA_BAR_REGS);
    assert!(
        !b0.io && !b0.is_64 && !b0.prefetch,
        "BAR0 must be 32-bit non-prefetchable memory: {b0:?}"
    );
    assert_eq!(b0.size, QHCA_REGS_SIZE as u64, "BAR0 size");
    let b1 = bar(QHCA_BAR_MSIX);
    assert!(!b1.io, "BAR1 must be memory: {b1:?}");
    let b2 = bar(QHCA_BAR_UAR);
    assert!(
        !b2.io && b2.is_64 && b2.prefetch,
        "BAR2 must be 64-bit prefetchable memory: {b2:?}"
    );
    assert_eq!(
        b2.size,
        128 << 10,
        "BAR2 for 24 doorbell pages (96 KiB) rounds up to 128 KiB"
    );
    assert!(bars.iter().all(|b| !b.io), "no I/O BARs expected: {bars:?}");
    assert_eq!(
        bars.len(),
        3,
        "exactly BAR0, BAR1 and BAR2 (64-bit): {bars:?}"
    );

    // The addresses we assigned stuck, including the upper half of the 64-bit BAR.
    assert_eq!(pci::bar_addr(&mut h.qt, d, &b2), h.uar);
    assert!(h.uar >= 1 << 32, "BAR2 was placed above 4 GiB");
    assert_eq!(pci::bar_addr(&mut h.qt, d, &b0), h.regs);

    // MSI-X: one vector, table and PBA in BAR1, inside it.
    let m = h.msix;
    assert_eq!(m.entries, QHCA_MSIX_VECTORS as u16, "MSI-X table size");
    assert_eq!(m.table_bir, QHCA_BAR_MSIX, "MSI-X table BIR");
    assert_eq!(m.pba_bir, QHCA_BAR_MSIX, "MSI-X PBA BIR");
    assert!(
        (m.table_off as u64) + 16 * m.entries as u64 <= b1.size,
        "table inside BAR1: {m:?} {b1:?}"
    );
    assert!(
        (m.pba_off as u64) + 8 <= b1.size,
        "PBA inside BAR1: {m:?} {b1:?}"
    );
    assert_eq!(
        m.flags(&mut h.qt) & PCI_MSIX_FLAGS_ENABLE,
        0,
        "MSI-X off at reset"
    );
    assert!(
        m.masked(&mut h.qt, 0),
        "vector 0 masked at reset (PCI spec)"
    );
    assert!(!m.pending(&mut h.qt, 0), "nothing pending at reset");
}

#[test]
fn bar2_size_follows_num_uars() {
    // (num-uars, BAR2 size): num-uars x 4 KiB rounded up to a power of two.
    for (uars, size) in [
        (1u32, 4u64 << 10),
        (5, 32 << 10),
        (24, 128 << 10),
        (1024, 4 << 20),
    ] {
        let mut h = Hca::start(&format!("num-uars={uars}"));
        assert_eq!(h.uar_size, size, "BAR2 size for num-uars={uars}");
        assert_eq!(
            h.reg(QHCA_REG_NUM_UARS),
            uars,
            "NUM_UARS for num-uars={uars}"
        );
    }
    let mut h = Hca::start("");
    assert_eq!(h.reg(QHCA_REG_NUM_UARS), 64, "default num-uars");
    assert_eq!(h.uar_size, 256 << 10, "BAR2 size for the default 64 pages");
}

#[test]
fn registers_identify_the_device() {
    for uars in [24u32, 7] {
        let mut h = Hca::start(&format!("num-uars={uars}"));
        assert_eq!(h.reg(QHCA_REG_MAGIC), QHCA_MAGIC, "MAGIC");
        assert_eq!(h.reg(QHCA_REG_MAGIC).to_le_bytes(), *b"QHCA");
        assert_eq!(h.reg(QHCA_REG_ABI_VERSION), QHCA_ABI_VERSION, "ABI_VERSION");
        assert_eq!(h.reg(QHCA_REG_NUM_UARS), uars, "NUM_UARS");
        let caps = h.reg(QHCA_REG_CAPS_LO) as u64 | (h.reg(QHCA_REG_CAPS_HI) as u64) << 32;
        assert_eq!(
            caps & !CAP_KNOWN_MASK,
            0,
            "CAPS has bits this ABI does not define: {caps:#x}"
        );
        assert_ne!(caps & CAP_UAR_ISOLATION, 0, "UAR isolation advertised");
        assert_ne!(caps & CAP_RC, 0, "RC advertised");
        let max = h.reg(QHCA_REG_CMDQ_MAX_LOG);
        assert!(
            (QHCA_QUEUE_MIN_LOG..=QHCA_QUEUE_MAX_LOG).contains(&max),
            "CMDQ_MAX_LOG {max}"
        );
        // Nothing ran yet: reading all of this counted no guest error.
        assert_eq!(
            h.guest_errors(),
            0,
            "aligned 32-bit reads of defined registers are not errors"
        );
    }
}

#[test]
fn max_queue_log_property_is_reported_and_enforced() {
    let mut h = Hca::start("max-queue-log=5");
    assert_eq!(
        h.reg(QHCA_REG_CMDQ_MAX_LOG),
        5,
        "CMDQ_MAX_LOG follows max-queue-log"
    );
    // log 6 is now too big for either queue; log 5 is fine.
    h.reset();
    h.configure(6, 2);
    let st = h.enable();
    assert_eq!(
        st & (QHCA_STATUS_READY | QHCA_STATUS_CFG_ERROR),
        QHCA_STATUS_CFG_ERROR,
        "CMDQ log 6 > max 5"
    );
    h.reset();
    h.configure(2, 6);
    let st = h.enable();
    assert_eq!(
        st & (QHCA_STATUS_READY | QHCA_STATUS_CFG_ERROR),
        QHCA_STATUS_CFG_ERROR,
        "EQ log 6 > max 5"
    );
    h.bring_up(5, 5);
    h.nop();
}

#[test]
fn reset_state_of_every_register() {
    let mut h = Hca::start("");
    for (name, off) in [
        ("CTRL", QHCA_REG_CTRL),
        ("STATUS", QHCA_REG_STATUS),
        ("CMDQ_BASE_LO", QHCA_REG_CMDQ_BASE_LO),
        ("CMDQ_BASE_HI", QHCA_REG_CMDQ_BASE_HI),
        ("CMDQ_LOG_SIZE", QHCA_REG_CMDQ_LOG_SIZE),
        ("CMDQ_CI", QHCA_REG_CMDQ_CI),
        ("EQ_BASE_LO", QHCA_REG_EQ_BASE_LO),
        ("EQ_BASE_HI", QHCA_REG_EQ_BASE_HI),
        ("EQ_LOG_SIZE", QHCA_REG_EQ_LOG_SIZE),
        ("EQ_CI", QHCA_REG_EQ_CI),
        ("EQ_PI", QHCA_REG_EQ_PI),
        ("INTR_CTRL", QHCA_REG_INTR_CTRL),
        ("GUEST_ERRORS", QHCA_REG_GUEST_ERRORS),
        ("DB_VIOLATIONS", QHCA_REG_DB_VIOLATIONS),
        ("EQ_OVERFLOWS", QHCA_REG_EQ_OVERFLOWS),
        ("FATAL_SYNDROME", QHCA_REG_FATAL_SYNDROME),
    ] {
        assert_eq!(h.reg(off), 0, "{name} at power-on");
    }
    // The RW registers hold what is written while disabled.
    h.set_reg(QHCA_REG_CMDQ_BASE_LO, 0x0012_3440);
    h.set_reg(QHCA_REG_CMDQ_BASE_HI, 0x1);
    h.set_reg(QHCA_REG_CMDQ_LOG_SIZE, 3);
    h.set_reg(QHCA_REG_EQ_BASE_LO, 0x0045_6780);
    h.set_reg(QHCA_REG_EQ_BASE_HI, 0x2);
    h.set_reg(QHCA_REG_EQ_LOG_SIZE, 4);
    h.set_reg(QHCA_REG_INTR_CTRL, QHCA_INTR_EQ_ENABLE);
    assert_eq!(h.reg(QHCA_REG_CMDQ_BASE_LO), 0x0012_3440);
    assert_eq!(h.reg(QHCA_REG_CMDQ_BASE_HI), 0x1);
    assert_eq!(h.reg(QHCA_REG_CMDQ_LOG_SIZE), 3);
    assert_eq!(h.reg(QHCA_REG_EQ_BASE_LO), 0x0045_6780);
    assert_eq!(h.reg(QHCA_REG_EQ_BASE_HI), 0x2);
    assert_eq!(h.reg(QHCA_REG_EQ_LOG_SIZE), 4);
    assert_eq!(h.reg(QHCA_REG_INTR_CTRL), QHCA_INTR_EQ_ENABLE);
    assert_eq!(h.guest_errors(), 0, "legal writes are not errors");
}

#[test]
fn two_devices_are_independent() {
    use qhca_qtest::hca::*;
    let mut h = Hca::start_multi(
        &["num-uars=4,node-guid=0x1111", "num-uars=8,node-guid=0x2222"],
        &[],
    );
    assert_eq!(h.count(), 2);
    let db = qhca_uapi::db::DbWord::new(qhca_uapi::db::DbType::Sq, 1, 1).raw();
    // Function 0 on the standard rings, function 1 on rings of its own.
    h.select(0);
    assert_eq!(h.reg(QHCA_REG_NUM_UARS), 4);
    h.bring_up(2, 2);
    h.select(1);
    assert_eq!(h.reg(QHCA_REG_NUM_UARS), 8);
    assert_ne!(h.regs, 0);
    h.bring_up_at(SCRATCH_RAM, 2, SCRATCH_RAM + 0x1_0000, 2);
    for (i, guid) in [(0usize, 0x1111u64), (1, 0x2222)] {
        h.select(i);
        assert_eq!(
            h.alloc_uar(),
            (QHCA_CMD_OK, 0),
            "function {i}: its own UAR table"
        );
        assert_eq!(h.query_device(OUT_RAM, 128), QHCA_CMD_OK);
        let a = qhca_qtest::wire::decode_attr(&h.qt.memread(OUT_RAM, 128));
        assert_eq!(a.node_guid, guid, "function {i}");
    }
    // Errors and doorbells count on the function that saw them.
    h.select(1);
    h.set_reg(QHCA_REG_MAGIC, 0);
    h.doorbell(0, db);
    assert_eq!((h.guest_errors(), h.reg(QHCA_REG_DB_VIOLATIONS)), (1, 1));
    h.select(0);
    assert_eq!(
        h.counters(),
        Counters::default(),
        "function 0 untouched by function 1's errors"
    );
    // A reset of function 1 leaves function 0 running with its UAR still allocated.
    h.select(1);
    h.reset();
    h.select(0);
    assert_eq!(h.status(), QHCA_STATUS_READY);
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 1));
    h.select(1);
    assert_eq!(h.status(), 0);
    h.bring_up_at(SCRATCH_RAM, 2, SCRATCH_RAM + 0x1_0000, 2);
    assert_eq!(
        h.alloc_uar(),
        (QHCA_CMD_OK, 0),
        "function 1's RESET freed its UARs"
    );
}

#[test]
fn works_on_a_conventional_pci_machine() {
    // i440fx: no PCIe, the device sits on a plain PCI bus.
    use qhca_qtest::hca::*;
    let mut h = Hca::start_with("", &["-M", "pc"]);
    assert_eq!(h.reg(QHCA_REG_MAGIC), QHCA_MAGIC);
    h.bring_up(2, 2);
    h.setup_msix(false);
    h.set_reg(QHCA_REG_INTR_CTRL, QHCA_INTR_EQ_ENABLE);
    h.nop();
    assert!(h.poll(|h| h.take_msi()), "MSI-X on i440fx");
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 0));
}
