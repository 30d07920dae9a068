// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A tiny qhca "driver" living on the test side: it finds the device, assigns its BARs, puts the
//! command queue and the event queue in low guest RAM, posts commands and consumes their
//! completion events the way the real driver does (owner bit first, then the entry, then the
//! consumer index), asserting the device's side of the protocol at every step.
//!
//! Who writes what (as `qhca-abi.h` says):
//! - command ring (guest RAM): the test writes entries; the device only reads them;
//! - `CMDQ_PI`: the test; `CMDQ_CI`: the device;
//! - event ring (guest RAM): the device writes entries; the test only reads them;
//! - `EQ_PI`: the device; `EQ_CI`: the test.

use qhca_uapi::*;

use crate::pci::{self, BarInfo, Bdf, Msix};
use crate::qtest::Qtest;
use crate::wire::{self, CMD_SIZE, EQE_SIZE};

/// Guest RAM the tests use (q35 with 128 MiB; everything from 1 MiB up is plain RAM).
pub const RAM_SIZE: u64 = 128 << 20;
/// The command ring: room for 4096 entries of 64 B.
pub const CMDQ_RAM: u64 = 0x10_0000;
/// The event ring: room for 4096 entries of 32 B.
pub const EQ_RAM: u64 = 0x14_0000;
/// Output buffers (QUERY_DEVICE).
pub const OUT_RAM: u64 = 0x18_0000;
/// Where MSI-X vector 0's message is aimed: a plain RAM word, so a delivered interrupt is a
/// visible memory write.
pub const MSI_RAM: u64 = 0x1f_0000;
pub const MSI_DATA: u32 = 0x51ca_0001;
/// Free RAM for tests that want a second ring or garbage.
pub const SCRATCH_RAM: u64 = 0x20_0000;
/// Neither RAM nor any BAR: DMA there fails.
pub const BEYOND_RAM: u64 = 0x40_0000_0000;

/// How many clock steps to wait for something the device should do soon.
pub const POLL_ROUNDS: u32 = 500;
/// How many clock steps to give the device before concluding it did nothing.
pub const SETTLE_ROUNDS: u32 = 30;
/// Virtual time per step.
pub const STEP_NS: u64 = 100_000;

/// `enum qhca_cmd_status` by name, for failure messages.
pub fn status_name(s: u32) -> &'static str {
    match s {
        QHCA_CMD_OK => "OK",
        QHCA_CMD_BAD_OPCODE => "BAD_OPCODE",
        QHCA_CMD_BAD_PARAM => "BAD_PARAM",
        QHCA_CMD_NO_RESOURCES => "NO_RESOURCES",
        QHCA_CMD_BAD_RESOURCE => "BAD_RESOURCE",
        QHCA_CMD_BAD_STATE => "BAD_STATE",
        QHCA_CMD_DMA_ERROR => "DMA_ERROR",
        _ => "?",
    }
}

/// The four counter/diagnostic registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub guest_errors: u32,
    pub db_violations: u32,
    pub eq_overflows: u32,
    pub fatal_syndrome: u32,
}

/// One qhca function behind a qtest-driven QEMU, with the test acting as its driver.
///
/// A machine may hold several functions ([`Hca::start_multi`]); the fields describe the
/// selected one and [`Hca::select`] switches.
pub struct Hca {
    pub qt: Qtest,
    pub dev: Bdf,
    pub bars: Vec<BarInfo>,
    /// BAR0 (registers), BAR2 (doorbell pages) addresses and BAR2's size.
    pub regs: u64,
    pub uar: u64,
    pub uar_size: u64,
    pub msix: Msix,
    /// The driver's view of the queues (what it last programmed).
    pub cmdq_base: u64,
    pub cmdq_log: u32,
    pub eq_base: u64,
    pub eq_log: u32,
    /// Next command producer index the driver publishes (free-running).
    pub cmd_pi: u32,
    /// Driver's event consumer index (free-running).
    pub eq_ci: u32,
    /// The last token handed out.
    pub next_token: u32,
    /// The functions not selected, by index (`None` at the selected one's index).
    others: Vec<Option<Unit>>,
    selected: usize,
}

/// The per-function part of [`Hca`], parked while another function is selected.
struct Unit {
    dev: Bdf,
    bars: Vec<BarInfo>,
    regs: u64,
    uar: u64,
    uar_size: u64,
    msix: Msix,
    cmdq_base: u64,
    cmdq_log: u32,
    eq_base: u64,
    eq_log: u32,
    cmd_pi: u32,
    eq_ci: u32,
}

fn probe_unit(qt: &mut Qtest, alloc: &mut pci::BarAllocator, dev: Bdf) -> Unit {
    let bars = pci::probe_bars(qt, dev);
    let addrs = alloc.assign_and_enable(qt, dev, &bars);
    let regs = addrs[QHCA_BAR_REGS as usize].expect("BAR0 (registers) not implemented");
    let uar = addrs[QHCA_BAR_UAR as usize].expect("BAR2 (doorbells) not implemented");
    let uar_size = bars
        .iter()
        .find(|b| b.index == QHCA_BAR_UAR as usize)
        .unwrap()
        .size;
    let msix = Msix::probe(qt, dev, &addrs).expect("no usable MSI-X capability");
    Unit {
        dev,
        bars,
        regs,
        uar,
        uar_size,
        msix,
        cmdq_base: 0,
        cmdq_log: 0,
        eq_base: 0,
        eq_log: 0,
        cmd_pi: 0,
        eq_ci: 0,
    }
}

impl Hca {
    /// Starts QEMU with `-device qhca[,props]` and does what firmware would: finds the function,
    /// assigns its BARs, enables memory decoding and bus mastering.
    pub fn start(props: &str) -> Hca {
        Self::start_with(props, &[])
    }

    /// As [`Hca::start`], with extra QEMU arguments.
    pub fn start_with(props: &str, extra: &[&str]) -> Hca {
        Self::start_multi(&[props], extra)
    }

    /// One `-device qhca[,props]` per entry; the first function (in slot order) is selected.
    pub fn start_multi(props: &[&str], extra: &[&str]) -> Hca {
        let devices: Vec<String> = props
            .iter()
            .map(|p| {
                if p.is_empty() {
                    "qhca".to_string()
                } else {
                    format!("qhca,{p}")
                }
            })
            .collect();
        let mut args: Vec<&str> = Vec::new();
        for d in &devices {
            args.extend_from_slice(&["-device", d.as_str()]);
        }
        args.extend_from_slice(extra);
        Self::attach(Qtest::start(&args), props.len())
    }

    /// One qhca function behind a PCIe root port (`00:02.0`, secondary bus 1), the port set
    /// up as firmware would (bus numbers, windows over the BAR areas, decoding, bus mastering),
    /// and q35's ECAM enabled ([`pci::enable_q35_ecam`]), so that DMA can reach config space.
    /// Returns the port too.
    pub fn start_behind_root_port(props: &str) -> (Hca, Bdf) {
        let dev = if props.is_empty() {
            "qhca,bus=rp".to_string()
        } else {
            format!("qhca,bus=rp,{props}")
        };
        let mut qt = Qtest::start(&[
            "-device",
            "pcie-root-port,id=rp,bus=pcie.0,addr=0x2,chassis=1",
            "-device",
            dev.as_str(),
        ]);
        let port = Bdf {
            bus: 0,
            devfn: 2 << 3,
        };
        pci::setup_bridge(
            &mut qt,
            port,
            1,
            (pci::MMIO32_BASE, 1 << 20),
            (pci::MMIO64_BASE, 1 << 30),
        );
        pci::enable_q35_ecam(&mut qt);
        (Self::attach_on(qt, 1, 1), port)
    }

    /// Takes over a running QEMU with `expected` qhca functions: finds them, assigns their BARs
    /// (always the same addresses for the same machine), enables decoding and bus mastering.
    /// Nothing is reset: this is also how the test picks up a device after a migration.
    pub fn attach(qt: Qtest, expected: usize) -> Hca {
        Self::attach_on(qt, 0, expected)
    }

    /// As [`Hca::attach`], for functions on `bus`.
    pub fn attach_on(mut qt: Qtest, bus: u8, expected: usize) -> Hca {
        let found = pci::find_all_on(
            &mut qt,
            bus,
            QHCA_PCI_VENDOR_ID as u16,
            QHCA_PCI_DEVICE_ID as u16,
        );
        assert_eq!(
            found.len(),
            expected,
            "{:04x}:{:04x} functions on bus {bus}: {found:?}; stderr:\n{}",
            QHCA_PCI_VENDOR_ID,
            QHCA_PCI_DEVICE_ID,
            qt.stderr()
        );
        let mut alloc = pci::BarAllocator::default();
        let mut units: Vec<Option<Unit>> = found
            .iter()
            .map(|&d| Some(probe_unit(&mut qt, &mut alloc, d)))
            .collect();
        let u = units[0].take().unwrap();
        Hca {
            qt,
            dev: u.dev,
            bars: u.bars,
            regs: u.regs,
            uar: u.uar,
            uar_size: u.uar_size,
            msix: u.msix,
            cmdq_base: 0,
            cmdq_log: 0,
            eq_base: 0,
            eq_log: 0,
            cmd_pi: 0,
            eq_ci: 0,
            next_token: 0x7e57_0000,
            others: units,
            selected: 0,
        }
    }

    /// Assigns the selected function's BARs again (the same addresses) and turns decoding and
    /// bus mastering back on: after a reset of the function's config space (a bus reset).
    /// The driver's queue state is forgotten, as after [`Hca::reset`].
    pub fn reprobe(&mut self) {
        let mut alloc = pci::BarAllocator::default();
        let addrs = alloc.assign_and_enable(&mut self.qt, self.dev, &self.bars);
        assert_eq!(addrs[QHCA_BAR_REGS as usize], Some(self.regs));
        assert_eq!(addrs[QHCA_BAR_UAR as usize], Some(self.uar));
        self.cmd_pi = 0;
        self.eq_ci = 0;
    }

    /// How many qhca functions the machine has.
    pub fn count(&self) -> usize {
        self.others.len()
    }

    /// Makes function `i` (slot order) the one every other method talks to.
    pub fn select(&mut self, i: usize) {
        if i == self.selected {
            return;
        }
        let incoming = self.others[i].take().expect("function index out of range");
        let outgoing = Unit {
            dev: std::mem::replace(&mut self.dev, incoming.dev),
            bars: std::mem::replace(&mut self.bars, incoming.bars),
            regs: std::mem::replace(&mut self.regs, incoming.regs),
            uar: std::mem::replace(&mut self.uar, incoming.uar),
            uar_size: std::mem::replace(&mut self.uar_size, incoming.uar_size),
            msix: std::mem::replace(&mut self.msix, incoming.msix),
            cmdq_base: std::mem::replace(&mut self.cmdq_base, incoming.cmdq_base),
            cmdq_log: std::mem::replace(&mut self.cmdq_log, incoming.cmdq_log),
            eq_base: std::mem::replace(&mut self.eq_base, incoming.eq_base),
            eq_log: std::mem::replace(&mut self.eq_log, incoming.eq_log),
            cmd_pi: std::mem::replace(&mut self.cmd_pi, incoming.cmd_pi),
            eq_ci: std::mem::replace(&mut self.eq_ci, incoming.eq_ci),
        };
        self.others[self.selected] = Some(outgoing);
        self.selected = i;
    }

    // ---------------------------------------------------------------- registers

    pub fn reg(&mut self, off: u32) -> u32 {
        self.qt.readl(self.regs + off as u64)
    }

    pub fn set_reg(&mut self, off: u32, v: u32) {
        self.qt.writel(self.regs + off as u64, v)
    }

    pub fn status(&mut self) -> u32 {
        self.reg(QHCA_REG_STATUS)
    }

    pub fn guest_errors(&mut self) -> u32 {
        self.reg(QHCA_REG_GUEST_ERRORS)
    }

    pub fn counters(&mut self) -> Counters {
        Counters {
            guest_errors: self.reg(QHCA_REG_GUEST_ERRORS),
            db_violations: self.reg(QHCA_REG_DB_VIOLATIONS),
            eq_overflows: self.reg(QHCA_REG_EQ_OVERFLOWS),
            fatal_syndrome: self.reg(QHCA_REG_FATAL_SYNDROME),
        }
    }

    /// QEMU is alive and the device still answers with its magic.
    pub fn alive(&mut self) {
        let m = self.reg(QHCA_REG_MAGIC);
        assert_eq!(
            m, QHCA_MAGIC,
            "MAGIC reads {m:#x}: device or QEMU in a bad state"
        );
    }

    /// Lets the device run for a few steps (bottom halves, timers).
    pub fn settle(&mut self) {
        for _ in 0..SETTLE_ROUNDS {
            self.qt.clock_step(STEP_NS);
        }
    }

    /// Steps the clock until `done` holds or [`POLL_ROUNDS`] pass; returns whether it held.
    pub fn poll(&mut self, mut done: impl FnMut(&mut Hca) -> bool) -> bool {
        for _ in 0..POLL_ROUNDS {
            if done(self) {
                return true;
            }
            self.qt.clock_step(STEP_NS);
        }
        done(self)
    }

    // ---------------------------------------------------------------- bring-up

    /// CTRL.RESET, and the driver forgets its queue state.
    pub fn reset(&mut self) {
        self.set_reg(QHCA_REG_CTRL, QHCA_CTRL_RESET);
        self.cmd_pi = 0;
        self.eq_ci = 0;
    }

    /// Zeroes both rings in RAM and programs their base and size registers (device disabled).
    pub fn configure_at(&mut self, cmdq_base: u64, cmdq_log: u32, eq_base: u64, eq_log: u32) {
        if cmdq_log <= QHCA_QUEUE_MAX_LOG && cmdq_base + (CMD_SIZE << cmdq_log) as u64 <= RAM_SIZE {
            self.qt.memset(cmdq_base, CMD_SIZE << cmdq_log, 0);
        }
        if eq_log <= QHCA_QUEUE_MAX_LOG && eq_base + (EQE_SIZE << eq_log) as u64 <= RAM_SIZE {
            self.qt.memset(eq_base, EQE_SIZE << eq_log, 0);
        }
        self.set_reg(QHCA_REG_CMDQ_BASE_LO, cmdq_base as u32);
        self.set_reg(QHCA_REG_CMDQ_BASE_HI, (cmdq_base >> 32) as u32);
        self.set_reg(QHCA_REG_CMDQ_LOG_SIZE, cmdq_log);
        self.set_reg(QHCA_REG_EQ_BASE_LO, eq_base as u32);
        self.set_reg(QHCA_REG_EQ_BASE_HI, (eq_base >> 32) as u32);
        self.set_reg(QHCA_REG_EQ_LOG_SIZE, eq_log);
        self.cmdq_base = cmdq_base;
        self.cmdq_log = cmdq_log;
        self.eq_base = eq_base;
        self.eq_log = eq_log;
    }

    /// [`Hca::configure_at`] with the standard ring addresses.
    pub fn configure(&mut self, cmdq_log: u32, eq_log: u32) {
        self.configure_at(CMDQ_RAM, cmdq_log, EQ_RAM, eq_log);
    }

    /// Writes CTRL.ENABLE and returns STATUS.
    pub fn enable(&mut self) -> u32 {
        self.set_reg(QHCA_REG_CTRL, QHCA_CTRL_ENABLE);
        self.status()
    }

    /// Reset, program both rings at the standard addresses, enable; asserts READY.
    pub fn bring_up(&mut self, cmdq_log: u32, eq_log: u32) {
        self.bring_up_at(CMDQ_RAM, cmdq_log, EQ_RAM, eq_log);
    }

    /// Reset, program both rings, enable; asserts READY and a clean state.
    pub fn bring_up_at(&mut self, cmdq_base: u64, cmdq_log: u32, eq_base: u64, eq_log: u32) {
        self.reset();
        let st = self.status();
        assert_eq!(st, 0, "STATUS after RESET");
        self.configure_at(cmdq_base, cmdq_log, eq_base, eq_log);
        let st = self.enable();
        assert_eq!(
            st, QHCA_STATUS_READY,
            "STATUS after ENABLE with cmdq_log {cmdq_log}, eq_log {eq_log}"
        );
    }

    // ---------------------------------------------------------------- commands

    /// A fresh non-zero token.
    pub fn token(&mut self) -> u32 {
        self.next_token = self.next_token.wrapping_add(1);
        self.next_token
    }

    /// A command with a fresh token and every other field zero.
    pub fn cmd(&mut self, opcode: u32) -> qhca_cmd {
        let t = self.token();
        wire::cmd(opcode, t)
    }

    /// Writes a command into ring slot `idx & mask`.
    pub fn write_cmd(&mut self, idx: u32, c: &qhca_cmd) {
        let slot = (idx & ((1u32 << self.cmdq_log) - 1)) as u64;
        self.qt.memwrite(
            self.cmdq_base + slot * CMD_SIZE as u64,
            &wire::encode_cmd(c),
        );
    }

    /// Publishes a producer index.
    pub fn ring(&mut self, pi: u32) {
        self.set_reg(QHCA_REG_CMDQ_PI, pi);
    }

    /// Writes `c` at the producer index and rings it.
    pub fn post(&mut self, c: &qhca_cmd) {
        self.write_cmd(self.cmd_pi, c);
        self.cmd_pi = self.cmd_pi.wrapping_add(1);
        self.ring(self.cmd_pi);
    }

    /// Writes all of `cmds` and rings once.
    pub fn post_batch(&mut self, cmds: &[qhca_cmd]) {
        for c in cmds {
            self.write_cmd(self.cmd_pi, c);
            self.cmd_pi = self.cmd_pi.wrapping_add(1);
        }
        self.ring(self.cmd_pi);
    }

    /// EQ_PI as the device publishes it.
    pub fn eq_pi(&mut self) -> u32 {
        self.reg(QHCA_REG_EQ_PI)
    }

    /// Waits until EQ_PI - eq_ci >= `n`; returns the number of events available (asserting it
    /// never exceeds the ring size).
    pub fn wait_events(&mut self, n: u32) -> u32 {
        let ci = self.eq_ci;
        let entries = 1u32 << self.eq_log;
        let mut avail = 0;
        let ok = self.poll(|h| {
            avail = h.eq_pi().wrapping_sub(ci);
            avail >= n
        });
        assert!(
            avail <= entries,
            "EQ_PI {:#x} is {avail} ahead of EQ_CI {ci:#x}, more than the {entries} entries",
            ci.wrapping_add(avail)
        );
        assert!(
            ok,
            "waited for {n} event(s) after EQ_CI {ci}; EQ_PI only {}; STATUS {:#x}",
            ci.wrapping_add(avail),
            self.status()
        );
        avail
    }

    /// Reads event slot `idx & mask` without consuming it.
    pub fn peek_eqe(&mut self, idx: u32) -> qhca_eqe {
        let slot = (idx & ((1u32 << self.eq_log) - 1)) as u64;
        let b = self
            .qt
            .memread(self.eq_base + slot * EQE_SIZE as u64, EQE_SIZE);
        wire::decode_eqe(&b)
    }

    /// The owner bit the device writes for event index `idx`: ((idx >> log) + 1) & 1.
    pub fn expected_owner(&self, idx: u32) -> u8 {
        (((idx >> self.eq_log) + 1) & 1) as u8
    }

    /// Waits for the next event, checks its owner bit and reserved fields, consumes it and
    /// publishes EQ_CI.
    pub fn next_eqe(&mut self) -> qhca_eqe {
        self.wait_events(1);
        let idx = self.eq_ci;
        let e = self.peek_eqe(idx);
        let want = self.expected_owner(idx);
        assert_eq!(
            e.owner & QHCA_EQE_OWNER as u8,
            want,
            "owner bit of EQE {idx} (eq_log {}): {e:?}",
            self.eq_log
        );
        assert_eq!(
            e.owner & !(QHCA_EQE_OWNER as u8),
            0,
            "EQE {idx}: reserved bits of owner byte set: {e:?}"
        );
        assert_eq!(e.rsvd0, 0, "EQE {idx}: rsvd0 {e:?}");
        if e.type_ as u32 == QHCA_EQE_PAGE_FAULT {
            // struct qhca_eqe_page_fault: length in bytes 24..28, then 3 reserved bytes.
            assert_eq!(e.rsvd1[4..], [0; 3], "page fault EQE {idx}: rsvd1 {e:?}");
        } else {
            assert_eq!(e.rsvd1, [0; 7], "EQE {idx}: rsvd1 {e:?}");
        }
        self.eq_ci = idx.wrapping_add(1);
        self.set_reg(QHCA_REG_EQ_CI, self.eq_ci);
        e
    }

    /// Consumes the next event and checks it completes command `c`.
    pub fn completion_of(&mut self, c: &qhca_cmd) -> qhca_eqe {
        let e = self.next_eqe();
        assert_eq!(
            e.type_ as u32, QHCA_EQE_CMD_DONE,
            "event type for command {c:?}: {e:?}"
        );
        assert_eq!(
            e.token, c.token,
            "completion token for command {c:?}: {e:?}"
        );
        e
    }

    /// Posts `c` and waits for its completion.
    pub fn exec(&mut self, c: &qhca_cmd) -> qhca_eqe {
        self.post(c);
        self.completion_of(c)
    }

    /// Posts `c` and waits for its completion, taking the other events that come before it
    /// (QP_ERR, CQ_ERR, ... of work the device does meanwhile on its own, e.g. for frames from
    /// the network): (the completion, the others in order).
    pub fn exec_amid_events(&mut self, c: &qhca_cmd) -> (qhca_eqe, Vec<qhca_eqe>) {
        self.post(c);
        let mut others = Vec::new();
        loop {
            let e = self.next_eqe();
            if e.type_ as u32 == QHCA_EQE_CMD_DONE && e.token == c.token {
                return (e, others);
            }
            assert!(
                e.type_ as u32 != QHCA_EQE_CMD_DONE,
                "completion of another command while waiting for {c:?}: {e:?}"
            );
            others.push(e);
        }
    }

    /// Posts `c` and returns its completion status.
    pub fn exec_status(&mut self, c: &qhca_cmd) -> u32 {
        self.exec(c).status as u32
    }

    /// Asserts that command `c` completes with status `want`.
    pub fn expect_status(&mut self, c: &qhca_cmd, want: u32) -> qhca_eqe {
        let e = self.exec(c);
        assert_eq!(
            e.status as u32,
            want,
            "command {c:?} completed with {} ({}), expected {} ({want}): {e:?}",
            status_name(e.status as u32),
            e.status,
            status_name(want)
        );
        e
    }

    pub fn nop(&mut self) -> qhca_eqe {
        let c = self.cmd(QHCA_CMD_NOP);
        self.expect_status(&c, QHCA_CMD_OK)
    }

    /// ALLOC_UAR: (status, data[0]).
    pub fn alloc_uar(&mut self) -> (u32, u64) {
        let c = self.cmd(QHCA_CMD_ALLOC_UAR);
        let e = self.exec(&c);
        (e.status as u32, e.data[0])
    }

    /// FREE_UAR of `index`: status.
    pub fn free_uar(&mut self, index: u64) -> u32 {
        let mut c = self.cmd(QHCA_CMD_FREE_UAR);
        c.in_[0] = index;
        self.exec_status(&c)
    }

    /// QUERY_DEVICE into `out_addr`/`out_len`: status.
    pub fn query_device(&mut self, out_addr: u64, out_len: u32) -> u32 {
        let mut c = self.cmd(QHCA_CMD_QUERY_DEVICE);
        c.out_addr = out_addr;
        c.out_len = out_len;
        self.exec_status(&c)
    }

    // ---------------------------------------------------------------- doorbells and MSI-X

    /// One aligned 64-bit doorbell store to page `page`.
    pub fn doorbell(&mut self, page: u32, value: u64) {
        self.qt.writeq(
            self.uar + ((page as u64) << QHCA_UAR_PAGE_SHIFT) + QHCA_DB_OFFSET as u64,
            value,
        );
    }

    /// Points vector 0 at [`MSI_RAM`] with [`MSI_DATA`], clears that word, sets the vector's
    /// mask as asked and enables MSI-X.
    pub fn setup_msix(&mut self, masked: bool) {
        self.qt.writel(MSI_RAM, 0);
        let m = self.msix;
        m.set_vector(&mut self.qt, QHCA_MSIX_VEC_EQ as u16, MSI_RAM, MSI_DATA);
        m.set_masked(&mut self.qt, QHCA_MSIX_VEC_EQ as u16, masked);
        m.set_enabled(&mut self.qt, true);
    }

    /// Whether vector 0's message reached [`MSI_RAM`] (and clears it for the next check).
    pub fn take_msi(&mut self) -> bool {
        let v = self.qt.readl(MSI_RAM);
        if v != 0 {
            assert_eq!(v, MSI_DATA, "unexpected word at the MSI address");
            self.qt.writel(MSI_RAM, 0);
        }
        v == MSI_DATA
    }

    pub fn msix_pending(&mut self) -> bool {
        let m = self.msix;
        m.pending(&mut self.qt, QHCA_MSIX_VEC_EQ as u16)
    }

    pub fn set_msix_masked(&mut self, masked: bool) {
        let m = self.msix;
        m.set_masked(&mut self.qt, QHCA_MSIX_VEC_EQ as u16, masked);
    }
}
