// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Garbage in: malformed commands, abused registers and indices, bad queue configurations, DMA
//! that cannot complete, doorbells nobody may ring. Each case checks the documented error
//! (completion status, STATUS bit, counter) and that QEMU is still alive afterwards.

use qhca_qtest::abi::*;
use qhca_qtest::hca::*;
use qhca_qtest::wire::{self, ATTR_SIZE};
use qhca_qtest::Hca;

/// GUEST_ERRORS must grow by exactly `n` across `f`.
fn counts_guest_errors(h: &mut Hca, n: u32, what: &str, f: impl FnOnce(&mut Hca)) {
    let before = h.guest_errors();
    f(h);
    let after = h.guest_errors();
    assert_eq!(
        after.wrapping_sub(before),
        n,
        "GUEST_ERRORS delta for {what}: {before} -> {after}"
    );
    h.alive();
}

#[test]
fn bad_opcodes() {
    let mut h = Hca::start("");
    h.bring_up(3, 3);
    for op in [QHCA_CMD_MAX, QHCA_CMD_MAX + 1, 0x80, 0x100, 0xffff] {
        let c = h.cmd(op);
        h.expect_status(&c, QHCA_CMD_BAD_OPCODE);
        h.alive();
    }
    // A bad opcode with garbage everywhere else is still just a bad opcode, never fatal.
    let mut c = h.cmd(0xabcd);
    c.flags = 0xffff;
    c.in_ext = 0xffff_ffff;
    c.out_addr = BEYOND_RAM;
    c.out_len = 1;
    c.in_ = [u64::MAX; 5];
    let st = h.exec_status(&c);
    assert!(
        st == QHCA_CMD_BAD_OPCODE || st == QHCA_CMD_BAD_PARAM,
        "garbage command -> {}",
        status_name(st)
    );
    assert_eq!(h.status(), QHCA_STATUS_READY);
    h.nop();
}

#[test]
fn reserved_fields_must_be_zero() {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(3, 3);
    for op in [
        QHCA_CMD_NOP,
        QHCA_CMD_QUERY_DEVICE,
        QHCA_CMD_ALLOC_UAR,
        QHCA_CMD_FREE_UAR,
    ] {
        let base = |h: &mut Hca| {
            let mut c = h.cmd(op);
            if op == QHCA_CMD_QUERY_DEVICE {
                c.out_addr = OUT_RAM;
                c.out_len = ATTR_SIZE as u32;
            }
            c
        };
        // Bit 0 is QHCA_CMD_FLAG_POLLED (any command; commands.rs), RESUME is MAP_ODP's alone.
        let mut c = base(&mut h);
        c.flags = QHCA_CMD_FLAG_RESUME as u16;
        h.expect_status(&c, QHCA_CMD_BAD_PARAM);
        let mut c = base(&mut h);
        c.flags = 1 << 2;
        h.expect_status(&c, QHCA_CMD_BAD_PARAM);
        let mut c = base(&mut h);
        c.flags = 0x8000;
        h.expect_status(&c, QHCA_CMD_BAD_PARAM);
        let mut c = base(&mut h);
        c.in_ext = 1;
        h.expect_status(&c, QHCA_CMD_BAD_PARAM);
        let mut c = base(&mut h);
        c.in_ext = 0x8000_0000;
        h.expect_status(&c, QHCA_CMD_BAD_PARAM);
        // in[] words the opcode does not use: all for NOP/QUERY_DEVICE, 1..4 for ALLOC_UAR (its
        // flags) and FREE_UAR (the page).
        let first_unused = if op == QHCA_CMD_FREE_UAR || op == QHCA_CMD_ALLOC_UAR {
            1
        } else {
            0
        };
        for i in first_unused..5 {
            let mut c = base(&mut h);
            c.in_[i] = 1 << (i * 7);
            h.expect_status(&c, QHCA_CMD_BAD_PARAM);
        }
        // ALLOC_UAR's flags: QHCA_UAR_KERNEL alone (kernel.rs).
        if op == QHCA_CMD_ALLOC_UAR {
            let mut c = base(&mut h);
            c.in_[0] = (QHCA_UAR_KERNEL << 1) as u64;
            h.expect_status(&c, QHCA_CMD_BAD_PARAM);
        }
        h.alive();
    }
    // None of the rejected ALLOC_UARs allocated anything, and a rejected FREE_UAR frees nothing.
    assert_eq!(
        h.alloc_uar(),
        (QHCA_CMD_OK, 0),
        "rejected ALLOC_UARs must not allocate"
    );
    let mut c = h.cmd(QHCA_CMD_FREE_UAR);
    c.in_[0] = 0;
    c.in_[4] = 1;
    h.expect_status(&c, QHCA_CMD_BAD_PARAM);
    assert_eq!(
        h.alloc_uar(),
        (QHCA_CMD_OK, 1),
        "page 0 must still be allocated after a rejected FREE_UAR"
    );
    assert_eq!(h.free_uar(0), QHCA_CMD_OK);
}

#[test]
fn free_uar_of_pages_that_are_not_allocated() {
    let mut h = Hca::start("num-uars=8");
    h.bring_up(3, 3);
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 0));
    for idx in [
        1u64,
        7,
        8,
        1024,
        1 << 32,
        (1 << 32) | 1,
        u64::MAX,
        u64::MAX - 7,
    ] {
        let st = h.free_uar(idx);
        assert_eq!(
            st,
            QHCA_CMD_BAD_RESOURCE,
            "FREE_UAR({idx:#x}) -> {}",
            status_name(st)
        );
        h.alive();
    }
    // 1 << 32 must not alias page 0 by truncation.
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 1), "page 0 still allocated");
    assert_eq!(h.free_uar(0), QHCA_CMD_OK);
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

#[test]
fn query_device_bad_buffers() {
    let mut h = Hca::start("");
    h.bring_up(3, 3);
    let small = [0u32, 1, 64, ATTR_SIZE as u32 - 1];
    for len in small {
        h.qt.memset(OUT_RAM, 256, 0xcc);
        let st = h.query_device(OUT_RAM, len);
        assert_eq!(
            st,
            QHCA_CMD_BAD_PARAM,
            "QUERY_DEVICE out_len {len} -> {}",
            status_name(st)
        );
        assert!(
            h.qt.memread(OUT_RAM, 256).iter().all(|&b| b == 0xcc),
            "rejected QUERY_DEVICE wrote its buffer"
        );
    }
    let st = h.query_device(0, ATTR_SIZE as u32);
    assert_eq!(
        st,
        QHCA_CMD_BAD_PARAM,
        "QUERY_DEVICE out_addr 0 -> {}",
        status_name(st)
    );

    // Unreachable buffers: DMA_ERROR, and the device carries on.
    for addr in [
        BEYOND_RAM,
        BEYOND_RAM + 3,
        RAM_SIZE,
        RAM_SIZE - 64,
        0xffff_ffff_ffff_f000,
    ] {
        let st = h.query_device(addr, ATTR_SIZE as u32);
        assert_eq!(
            st,
            QHCA_CMD_DMA_ERROR,
            "QUERY_DEVICE out_addr {addr:#x} -> {}",
            status_name(st)
        );
        assert_eq!(
            h.status(),
            QHCA_STATUS_READY,
            "DMA_ERROR on an output buffer is not fatal"
        );
        assert_eq!(h.reg(QHCA_REG_FATAL_SYNDROME), 0);
    }
    // A range that wraps around the address space.
    let st = h.query_device(u64::MAX - 63, ATTR_SIZE as u32);
    assert!(
        st == QHCA_CMD_DMA_ERROR || st == QHCA_CMD_BAD_PARAM,
        "QUERY_DEVICE wrapping buffer -> {}",
        status_name(st)
    );
    // A huge out_len is fine: the device writes only the attribute struct.
    h.qt.memset(OUT_RAM, 256, 0xcc);
    assert_eq!(h.query_device(OUT_RAM, u32::MAX), QHCA_CMD_OK);
    assert!(h
        .qt
        .memread(OUT_RAM + ATTR_SIZE as u64, 128)
        .iter()
        .all(|&b| b == 0xcc));
    h.nop();
}

#[test]
fn producer_index_too_far_is_ignored() {
    let mut h = Hca::start("");
    h.bring_up(2, 3); // 4-entry command ring
                      // A NOP sits in every slot, so if the device took a bad PI it would show as events.
    for i in 0..4 {
        let c = h.cmd(QHCA_CMD_NOP);
        h.write_cmd(i, &c);
    }
    for pi in [5u32, 6, 0x100, 0x8000_0000, 0xffff_ffff] {
        counts_guest_errors(
            &mut h,
            1,
            &format!("CMDQ_PI {pi:#x} with CI 0 and 4 entries"),
            |h| h.ring(pi),
        );
    }
    h.settle();
    assert_eq!(
        h.reg(QHCA_REG_CMDQ_CI),
        0,
        "no command consumed after bad PIs"
    );
    assert_eq!(h.eq_pi(), 0, "no event after bad PIs");

    // The ring is intact: one good PI runs exactly one command.
    let c = h.cmd(QHCA_CMD_NOP);
    h.post(&c);
    h.completion_of(&c);
    h.settle();
    assert_eq!(h.eq_pi(), 1, "exactly one event for PI 1");

    // A full ring (PI - CI == entries) is legal.
    let cmds: Vec<_> = (0..4).map(|_| h.cmd(QHCA_CMD_NOP)).collect();
    h.post_batch(&cmds);
    h.wait_events(4);
    for c in &cmds {
        h.completion_of(c);
    }
    // Backwards (PI behind CI) is too far as well.
    let ci = h.reg(QHCA_REG_CMDQ_CI);
    assert_eq!(ci, 5);
    counts_guest_errors(&mut h, 1, "CMDQ_PI behind CMDQ_CI", |h| h.ring(ci - 1));
    h.nop();
}

#[test]
fn writes_to_read_only_registers_are_ignored() {
    let mut h = Hca::start("num-uars=9");
    h.bring_up(3, 3);
    h.nop();
    let ro = [
        ("MAGIC", QHCA_REG_MAGIC),
        ("ABI_VERSION", QHCA_REG_ABI_VERSION),
        ("CAPS_LO", QHCA_REG_CAPS_LO),
        ("CAPS_HI", QHCA_REG_CAPS_HI),
        ("NUM_UARS", QHCA_REG_NUM_UARS),
        ("CMDQ_MAX_LOG", QHCA_REG_CMDQ_MAX_LOG),
        ("STATUS", QHCA_REG_STATUS),
        ("CMDQ_CI", QHCA_REG_CMDQ_CI),
        ("EQ_PI", QHCA_REG_EQ_PI),
        ("DB_VIOLATIONS", QHCA_REG_DB_VIOLATIONS),
        ("EQ_OVERFLOWS", QHCA_REG_EQ_OVERFLOWS),
        ("FATAL_SYNDROME", QHCA_REG_FATAL_SYNDROME),
    ];
    for (name, off) in ro {
        let before = h.reg(off);
        for v in [0u32, 0xffff_ffff, before.wrapping_add(1)] {
            counts_guest_errors(&mut h, 1, &format!("write {v:#x} to RO {name}"), |h| {
                h.set_reg(off, v)
            });
            assert_eq!(h.reg(off), before, "RO {name} changed by a write of {v:#x}");
        }
    }
    // Writing the counter itself counts one more error, it does not set it.
    let ge = h.guest_errors();
    h.set_reg(QHCA_REG_GUEST_ERRORS, 0);
    assert_eq!(
        h.guest_errors(),
        ge + 1,
        "a write to GUEST_ERRORS increments it"
    );
    assert_eq!(h.status(), QHCA_STATUS_READY);
    h.nop();
}

#[test]
fn unknown_offsets_read_zero_and_count() {
    let mut h = Hca::start("");
    let holes = [
        0x034u32, 0x038, 0x03c, 0x058, 0x05c, 0x090, 0x094, 0x0fc, 0x100, 0x800, 0xffc,
    ];
    for off in holes {
        let before = h.guest_errors();
        let v = h.reg(off);
        assert_eq!(v, 0, "read of unknown offset {off:#x}");
        assert_eq!(
            h.guest_errors(),
            before + 1,
            "read of unknown offset {off:#x} counted"
        );
        counts_guest_errors(
            &mut h,
            1,
            &format!("write to unknown offset {off:#x}"),
            |h| h.set_reg(off, 0xdead_beef),
        );
        assert_eq!(h.reg(off), 0, "unknown offset {off:#x} stored a write");
    }
    // The holes did not alias real registers.
    h.bring_up(2, 2);
    h.nop();
}

#[test]
fn odd_size_and_unaligned_register_accesses_are_ignored() {
    let mut h = Hca::start("");
    let r = h.regs;
    // Reads: 8- and 16-bit reads of MAGIC ('Q' = 0x51 if they got through), 64-bit reads.
    let before = h.guest_errors();
    assert_eq!(h.qt.readb(r), 0, "readb MAGIC");
    assert_eq!(h.qt.readb(r + 1), 0, "readb MAGIC+1");
    assert_eq!(h.qt.readw(r), 0, "readw MAGIC");
    assert_eq!(h.qt.readw(r + 2), 0, "readw MAGIC+2");
    assert_eq!(h.guest_errors(), before + 4, "four 8/16-bit reads counted");
    let before = h.guest_errors();
    assert_eq!(
        h.qt.readq(r),
        0,
        "readq MAGIC/ABI_VERSION must not be served as two 32-bit reads"
    );
    assert!(h.guest_errors() > before, "readq counted");
    let before = h.guest_errors();
    assert_eq!(h.qt.readl(r + 2), 0, "unaligned readl at 0x2");
    assert!(h.guest_errors() > before, "unaligned readl counted");

    // Writes: none of them may enable interrupts or the device.
    h.configure(2, 2);
    let before = h.guest_errors();
    h.qt.writeb(r + QHCA_REG_INTR_CTRL as u64, 1);
    h.qt.writew(r + QHCA_REG_INTR_CTRL as u64, 1);
    h.qt.writeb(r + QHCA_REG_CTRL as u64, QHCA_CTRL_ENABLE as u8);
    h.qt.writew(r + QHCA_REG_CTRL as u64, QHCA_CTRL_ENABLE as u16);
    assert_eq!(h.guest_errors(), before + 4, "four 8/16-bit writes counted");
    let before = h.guest_errors();
    // 64-bit store over EQ_PI (RO) and INTR_CTRL: must not reach INTR_CTRL as its upper half.
    h.qt.writeq(r + QHCA_REG_EQ_PI as u64, 1 << 32 | 1);
    assert!(h.guest_errors() > before, "writeq counted");
    let before = h.guest_errors();
    h.qt.writel(r + QHCA_REG_INTR_CTRL as u64 + 1, 0x0100);
    h.qt.writel(r + QHCA_REG_CTRL as u64 + 2, 0x1_0000);
    assert!(h.guest_errors() > before, "unaligned writel counted");
    assert_eq!(
        h.reg(QHCA_REG_INTR_CTRL),
        0,
        "INTR_CTRL changed by a non-32-bit write"
    );
    assert_eq!(
        h.reg(QHCA_REG_CTRL),
        0,
        "CTRL changed by a non-32-bit write"
    );
    assert_eq!(
        h.status(),
        0,
        "the device got enabled by a non-32-bit write"
    );
    assert_eq!(
        h.reg(QHCA_REG_CMDQ_LOG_SIZE),
        2,
        "queue registers untouched"
    );

    // A proper 32-bit write still works.
    assert_eq!(h.enable(), QHCA_STATUS_READY);
    h.nop();
}

#[test]
fn queue_registers_are_locked_while_enabled() {
    let mut h = Hca::start("");
    h.bring_up(2, 2);
    let locked = [
        ("CMDQ_BASE_LO", QHCA_REG_CMDQ_BASE_LO, 0x0030_0000u32),
        ("CMDQ_BASE_HI", QHCA_REG_CMDQ_BASE_HI, 1),
        ("CMDQ_LOG_SIZE", QHCA_REG_CMDQ_LOG_SIZE, 5),
        ("EQ_BASE_LO", QHCA_REG_EQ_BASE_LO, 0x0031_0000),
        ("EQ_BASE_HI", QHCA_REG_EQ_BASE_HI, 1),
        ("EQ_LOG_SIZE", QHCA_REG_EQ_LOG_SIZE, 5),
    ];
    for (name, off, v) in locked {
        let before = h.reg(off);
        counts_guest_errors(&mut h, 1, &format!("write {name} while enabled"), |h| {
            h.set_reg(off, v)
        });
        assert_eq!(h.reg(off), before, "{name} changed while enabled");
    }
    // The rings did not move: commands still come from CMDQ_RAM and land in EQ_RAM.
    for _ in 0..6 {
        h.nop();
    }
    assert_eq!(h.status(), QHCA_STATUS_READY);
}

#[test]
fn enable_rejects_bad_queue_configuration() {
    let mut h = Hca::start("");
    let max = h.reg(QHCA_REG_CMDQ_MAX_LOG);
    let bad: [(&str, u64, u32, u64, u32); 12] = [
        ("CMDQ base 0", 0, 2, EQ_RAM, 2),
        ("EQ base 0", CMDQ_RAM, 2, 0, 2),
        ("CMDQ base 32-byte aligned", CMDQ_RAM + 32, 2, EQ_RAM, 2),
        ("EQ base 16-byte aligned", CMDQ_RAM, 2, EQ_RAM + 16, 2),
        ("CMDQ base odd", CMDQ_RAM + 1, 2, EQ_RAM, 2),
        ("EQ base unaligned high", CMDQ_RAM, 2, 0x1_0000_0008, 2),
        ("CMDQ log 0", CMDQ_RAM, 0, EQ_RAM, 2),
        ("EQ log 0", CMDQ_RAM, 2, EQ_RAM, 0),
        ("CMDQ log max+1", CMDQ_RAM, max + 1, EQ_RAM, 2),
        ("EQ log max+1", CMDQ_RAM, 2, EQ_RAM, max + 1),
        ("CMDQ log 0xffffffff", CMDQ_RAM, u32::MAX, EQ_RAM, 2),
        ("EQ log 32", CMDQ_RAM, 2, EQ_RAM, 32),
    ];
    for (what, cb, cl, eb, el) in bad {
        h.reset();
        h.configure_at(cb, cl, eb, el);
        let st = h.enable();
        assert_eq!(
            st & (QHCA_STATUS_READY | QHCA_STATUS_CFG_ERROR),
            QHCA_STATUS_CFG_ERROR,
            "ENABLE with {what}: STATUS {st:#x}"
        );
        assert_eq!(st & QHCA_STATUS_FATAL, 0, "{what} is not fatal");
        // Not READY: a producer index is ignored and counted.
        counts_guest_errors(
            &mut h,
            1,
            &format!("CMDQ_PI after rejected ENABLE ({what})"),
            |h| h.ring(1),
        );
        // Fix the configuration and enable again, without a reset: READY, CFG_ERROR gone.
        h.configure(2, 2);
        let st = h.enable();
        assert_eq!(
            st, QHCA_STATUS_READY,
            "ENABLE after fixing {what}: STATUS {st:#x}"
        );
        h.cmd_pi = 0;
        h.eq_ci = 0;
        h.nop();
    }
    // The largest queues are accepted.
    h.bring_up(max, max);
    h.nop();
}

#[test]
fn command_ring_dma_failure_is_fatal_until_reset() {
    let mut h = Hca::start("");
    for (what, base) in [
        ("beyond RAM", BEYOND_RAM),
        ("above 4 GiB", 0x1_0000_0000u64),
        ("at the top of the address space", 0xffff_ffff_ffff_0000),
    ] {
        h.reset();
        h.configure_at(base, 2, EQ_RAM, 2);
        assert_eq!(
            h.enable(),
            QHCA_STATUS_READY,
            "ENABLE only checks alignment, CMDQ {what}"
        );
        h.ring(1);
        assert!(
            h.poll(|h| h.status() & QHCA_STATUS_FATAL != 0),
            "STATUS.FATAL after CMDQ {what}"
        );
        assert_eq!(
            h.status() & QHCA_STATUS_READY,
            0,
            "a FATAL device is not READY"
        );
        assert_eq!(
            h.reg(QHCA_REG_FATAL_SYNDROME),
            QHCA_FATAL_CMDQ_DMA,
            "syndrome for CMDQ {what}"
        );
        assert_eq!(
            h.eq_pi(),
            0,
            "no event for a command that could not be read"
        );
        // Stopped: producer index writes do nothing.
        h.ring(2);
        h.settle();
        assert_eq!(h.eq_pi(), 0);
        assert_ne!(
            h.status() & QHCA_STATUS_FATAL,
            0,
            "FATAL sticks until RESET"
        );
        h.alive();
        // RESET recovers fully.
        h.reset();
        assert_eq!(h.status(), 0, "STATUS after RESET from FATAL");
        assert_eq!(h.reg(QHCA_REG_FATAL_SYNDROME), QHCA_FATAL_NONE);
        h.bring_up(2, 2);
        h.nop();
    }
}

#[test]
fn command_ring_crossing_the_end_of_ram() {
    let mut h = Hca::start("");
    h.reset();
    // 4 slots; slot 0 is the last 64 bytes of RAM, slots 1..3 are nothing.
    h.configure_at(RAM_SIZE - 64, 2, EQ_RAM, 2);
    assert_eq!(h.enable(), QHCA_STATUS_READY);
    let c = h.cmd(QHCA_CMD_NOP);
    h.post(&c);
    h.completion_of(&c);
    h.ring(2);
    assert!(
        h.poll(|h| h.status() & QHCA_STATUS_FATAL != 0),
        "slot 1 beyond RAM must be fatal"
    );
    assert_eq!(h.reg(QHCA_REG_FATAL_SYNDROME), QHCA_FATAL_CMDQ_DMA);
    h.bring_up(2, 2);
    h.nop();
}

#[test]
fn event_ring_dma_failure_is_fatal_until_reset() {
    let mut h = Hca::start("");
    h.reset();
    h.configure_at(CMDQ_RAM, 2, BEYOND_RAM, 2);
    assert_eq!(h.enable(), QHCA_STATUS_READY);
    let c = h.cmd(QHCA_CMD_NOP);
    h.post(&c);
    assert!(
        h.poll(|h| h.status() & QHCA_STATUS_FATAL != 0),
        "STATUS.FATAL after an EQE write beyond RAM"
    );
    assert_eq!(h.reg(QHCA_REG_FATAL_SYNDROME), QHCA_FATAL_EQ_DMA);
    assert_eq!(h.status() & QHCA_STATUS_READY, 0);
    assert_eq!(
        h.eq_pi(),
        0,
        "EQ_PI must not advance past an event that was not written"
    );
    h.alive();
    h.bring_up(2, 2);
    h.nop();

    // Event ring whose slots 0 and 1 are the last 64 bytes of RAM, slots 2 and 3 nothing.
    h.reset();
    h.configure_at(CMDQ_RAM, 2, RAM_SIZE - 64, 2);
    assert_eq!(h.enable(), QHCA_STATUS_READY);
    h.nop();
    h.nop();
    let c = h.cmd(QHCA_CMD_NOP);
    h.post(&c);
    assert!(
        h.poll(|h| h.status() & QHCA_STATUS_FATAL != 0),
        "EQ slot 2 beyond RAM must be fatal"
    );
    assert_eq!(h.reg(QHCA_REG_FATAL_SYNDROME), QHCA_FATAL_EQ_DMA);
    assert_eq!(h.eq_pi(), 2);
    h.bring_up(2, 2);
    h.nop();
}

#[test]
fn doorbells_are_dropped_and_counted() {
    let mut h = Hca::start("num-uars=5"); // BAR2 is 32 KiB: pages 5..7 are padding
    h.bring_up(3, 3);
    let db = qhca_uapi::db::DbWord::new(qhca_uapi::db::DbType::Sq, 1, 1).raw();
    // Unallocated pages (including the padding past num-uars): GUEST_ERRORS.
    for page in 0..8 {
        counts_guest_errors(
            &mut h,
            1,
            &format!("doorbell on unallocated page {page}"),
            |h| h.doorbell(page, db),
        );
    }
    assert_eq!(h.reg(QHCA_REG_DB_VIOLATIONS), 0);

    // Allocated pages: no queue exists, so the doorbell names a foreign queue: DB_VIOLATIONS.
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 0));
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 1));
    counts_guest_errors(&mut h, 0, "doorbell on allocated page 0", |h| {
        h.doorbell(0, db)
    });
    assert_eq!(h.reg(QHCA_REG_DB_VIOLATIONS), 1);
    for v in [0u64, u64::MAX, 0xffff_ffff, db | 0xf000_0000] {
        let c0 = h.counters();
        h.doorbell(1, v);
        let c1 = h.counters();
        let total = (c1.db_violations - c0.db_violations) + (c1.guest_errors - c0.guest_errors);
        assert_eq!(
            total, 1,
            "doorbell {v:#x} on allocated page 1 counted once: {c0:?} -> {c1:?}"
        );
        h.alive();
    }

    // Not doorbells: odd sizes and offsets, on an allocated page. Dropped, counted as guest
    // errors, never as violations.
    let page1 = h.uar + 0x1000;
    let dbv = h.reg(QHCA_REG_DB_VIOLATIONS);
    counts_guest_errors(&mut h, 1, "writel at the doorbell offset", |h| {
        h.qt.writel(page1, 1)
    });
    counts_guest_errors(&mut h, 1, "writew at the doorbell offset", |h| {
        h.qt.writew(page1, 1)
    });
    counts_guest_errors(&mut h, 1, "writeb at the doorbell offset", |h| {
        h.qt.writeb(page1, 1)
    });
    counts_guest_errors(&mut h, 1, "writeq at offset 8", |h| {
        h.qt.writeq(page1 + 8, db)
    });
    counts_guest_errors(&mut h, 1, "writeq at offset 0xff8", |h| {
        h.qt.writeq(page1 + 0xff8, db)
    });
    let before = h.guest_errors();
    h.qt.writeq(page1 + 4, db);
    assert!(h.guest_errors() > before, "unaligned writeq counted");
    assert_eq!(
        h.reg(QHCA_REG_DB_VIOLATIONS),
        dbv,
        "non-doorbell stores are not violations"
    );
    // Reads of the doorbell BAR return 0.
    assert_eq!(h.qt.readq(h.uar), 0, "doorbell pages read as 0");
    assert_eq!(h.qt.readl(page1 + 0x10), 0);

    // Freed page: back to GUEST_ERRORS.
    assert_eq!(h.free_uar(1), QHCA_CMD_OK);
    counts_guest_errors(&mut h, 1, "doorbell on a freed page", |h| h.doorbell(1, db));
    // RESET frees page 0 as well.
    h.reset();
    counts_guest_errors(&mut h, 1, "doorbell after RESET", |h| h.doorbell(0, db));
    assert_eq!(h.reg(QHCA_REG_DB_VIOLATIONS), 0);
    h.bring_up(3, 3);
    h.nop();
}

#[test]
fn dma_into_the_devices_own_bars_does_not_hurt_qemu() {
    // Rings and output buffers aimed at MMIO (our own registers, doorbells, MSI-X table): the
    // outcome is the device's choice (an error status, FATAL), but QEMU must survive and a
    // RESET must bring everything back.
    let mut h = Hca::start("");
    let regs = h.regs;
    let uar = h.uar;
    let table = h.msix.table & !0x3f;
    for target in [regs, uar, table] {
        // Output buffer on MMIO.
        h.bring_up(2, 2);
        let _ = h.query_device(target, ATTR_SIZE as u32);
        h.settle();
        h.alive();
        // Command ring on MMIO.
        h.reset();
        h.configure_at(target, 2, EQ_RAM, 2);
        if h.enable() & QHCA_STATUS_READY != 0 {
            h.ring(1);
            h.settle();
            h.ring(4);
            h.settle();
        }
        h.alive();
        // Event ring on MMIO: the device writes events into its own registers.
        h.reset();
        h.configure_at(CMDQ_RAM, 2, target, 2);
        if h.enable() & QHCA_STATUS_READY != 0 {
            for i in 0..4 {
                let c = wire::cmd(QHCA_CMD_NOP, 0xffff_ffff);
                h.write_cmd(i, &c);
            }
            h.ring(4);
            h.settle();
        }
        h.alive();
        h.bring_up(2, 2);
        h.nop();
    }
}

#[test]
fn dma_without_bus_mastering_fails_cleanly() {
    use qhca_qtest::pci::{cfg_read16, cfg_write16, PCI_COMMAND, PCI_COMMAND_MASTER};
    // A driver that forgot pci_set_master(): the device cannot read its command ring.
    let mut h = Hca::start("");
    h.bring_up(2, 2);
    let d = h.dev;
    let cmd = cfg_read16(&mut h.qt, d, PCI_COMMAND);
    cfg_write16(&mut h.qt, d, PCI_COMMAND, cmd & !PCI_COMMAND_MASTER);
    let c = h.cmd(QHCA_CMD_NOP);
    h.post(&c);
    assert!(
        h.poll(|h| h.status() & QHCA_STATUS_FATAL != 0),
        "command fetch without bus mastering must fail"
    );
    assert_eq!(h.reg(QHCA_REG_FATAL_SYNDROME), QHCA_FATAL_CMDQ_DMA);
    assert_eq!(h.eq_pi(), 0);
    h.alive();
    cfg_write16(&mut h.qt, d, PCI_COMMAND, cmd);
    h.bring_up(2, 2);
    h.nop();
}

#[test]
fn disable_stops_commands_stalled_on_a_full_eq() {
    let mut h = Hca::start("");
    h.bring_up(3, 1); // 2-entry EQ
    let cmds: Vec<_> = (0..4).map(|_| h.cmd(QHCA_CMD_NOP)).collect();
    h.post_batch(&cmds);
    h.wait_events(2);
    // Two commands are stalled behind the full EQ. Disable, then free EQ space.
    h.set_reg(QHCA_REG_CTRL, 0);
    assert_eq!(
        h.status() & QHCA_STATUS_READY,
        0,
        "CTRL.ENABLE cleared: not READY"
    );
    h.completion_of(&cmds[0]);
    h.completion_of(&cmds[1]);
    h.settle();
    assert_eq!(h.eq_pi(), 2, "a disabled device posts no more events");
    counts_guest_errors(&mut h, 1, "CMDQ_PI while disabled", |h| h.ring(5));
    // The queue registers are writable again, and a full re-initialisation works.
    h.configure(2, 2);
    assert_eq!(h.reg(QHCA_REG_CMDQ_LOG_SIZE), 2);
    h.bring_up(2, 2);
    h.nop();
}

#[test]
fn undefined_control_bits_are_rejected() {
    let mut h = Hca::start("");
    h.configure(2, 2);
    // Valid queues are programmed, so an accepted ENABLE would show as READY.
    for v in [0x4u32, 0x5, 0x8000_0001, 0xffff_fffd] {
        counts_guest_errors(&mut h, 1, &format!("CTRL {v:#x}"), |h| {
            h.set_reg(QHCA_REG_CTRL, v)
        });
        assert_eq!(
            h.status(),
            0,
            "CTRL {v:#x} with undefined bits must be ignored whole"
        );
        assert_eq!(h.reg(QHCA_REG_CTRL), 0);
    }
    assert_eq!(
        h.reg(QHCA_REG_CMDQ_LOG_SIZE),
        2,
        "CTRL 0xfffffffd did not reset"
    );
    for v in [0x2u32, 0x3, 0x8000_0000] {
        counts_guest_errors(&mut h, 1, &format!("INTR_CTRL {v:#x}"), |h| {
            h.set_reg(QHCA_REG_INTR_CTRL, v)
        });
        assert_eq!(
            h.reg(QHCA_REG_INTR_CTRL),
            0,
            "INTR_CTRL {v:#x} with undefined bits must be ignored whole"
        );
    }
    assert_eq!(h.enable(), QHCA_STATUS_READY);
    h.nop();
}

#[test]
fn eq_ci_outside_the_produced_range_is_ignored() {
    let mut h = Hca::start("");
    h.bring_up(3, 2); // 4-entry EQ
    for _ in 0..3 {
        let c = h.cmd(QHCA_CMD_NOP);
        h.post(&c);
    }
    h.wait_events(3);
    // Consume one properly: EQ_CI 1, EQ_PI 3.
    let e = h.next_eqe();
    assert_eq!(e.status as u32, QHCA_CMD_OK);
    for ci in [4u32, 5, 0x100, 0xffff_ffff, 0] {
        counts_guest_errors(&mut h, 1, &format!("EQ_CI {ci} outside [1, 3]"), |h| {
            h.set_reg(QHCA_REG_EQ_CI, ci)
        });
        assert_eq!(h.reg(QHCA_REG_EQ_CI), 1, "EQ_CI {ci} must be ignored");
    }
    // Claiming unproduced events would let the device overwrite unconsumed ones: it did not.
    h.next_eqe();
    h.next_eqe();
    assert_eq!(h.eq_pi(), 3);
    h.nop();
    assert_eq!(h.reg(QHCA_REG_EQ_OVERFLOWS), 0);
}
