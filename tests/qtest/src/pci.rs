// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! PCI from the outside: configuration space through the legacy 0xcf8/0xcfc ports, BAR sizing
//! and assignment, the command register, capabilities and MSI-X (as libqos `pci.c` does).
//!
//! Under qtest no firmware runs, so every BAR starts unassigned and decoding is off: the test
//! is the firmware.

use crate::qtest::Qtest;

pub const CONFIG_ADDRESS: u16 = 0xcf8;
pub const CONFIG_DATA: u16 = 0xcfc;

pub const PCI_VENDOR_ID: u8 = 0x00;
pub const PCI_DEVICE_ID: u8 = 0x02;
pub const PCI_COMMAND: u8 = 0x04;
pub const PCI_STATUS: u8 = 0x06;
pub const PCI_REVISION_ID: u8 = 0x08;
pub const PCI_CLASS_PROG: u8 = 0x09;
pub const PCI_CLASS_DEVICE: u8 = 0x0a;
pub const PCI_HEADER_TYPE: u8 = 0x0e;
pub const PCI_BASE_ADDRESS_0: u8 = 0x10;
pub const PCI_CAPABILITY_LIST: u8 = 0x34;

pub const PCI_COMMAND_IO: u16 = 0x1;
pub const PCI_COMMAND_MEMORY: u16 = 0x2;
pub const PCI_COMMAND_MASTER: u16 = 0x4;
pub const PCI_STATUS_CAP_LIST: u16 = 0x10;

pub const PCI_BASE_ADDRESS_SPACE_IO: u32 = 0x1;
pub const PCI_BASE_ADDRESS_MEM_TYPE_64: u32 = 0x4;
pub const PCI_BASE_ADDRESS_MEM_PREFETCH: u32 = 0x8;

pub const PCI_CAP_ID_MSIX: u8 = 0x11;
pub const PCI_MSIX_FLAGS: u8 = 2;
pub const PCI_MSIX_FLAGS_QSIZE: u16 = 0x07ff;
pub const PCI_MSIX_FLAGS_MASKALL: u16 = 0x4000;
pub const PCI_MSIX_FLAGS_ENABLE: u16 = 0x8000;
pub const PCI_MSIX_TABLE: u8 = 4;
pub const PCI_MSIX_PBA: u8 = 8;
pub const PCI_MSIX_BIR: u32 = 0x7;
pub const PCI_MSIX_ENTRY_SIZE: u64 = 16;
pub const PCI_MSIX_ENTRY_LOWER_ADDR: u64 = 0;
pub const PCI_MSIX_ENTRY_UPPER_ADDR: u64 = 4;
pub const PCI_MSIX_ENTRY_DATA: u64 = 8;
pub const PCI_MSIX_ENTRY_VECTOR_CTRL: u64 = 12;
pub const PCI_MSIX_ENTRY_CTRL_MASKBIT: u32 = 1;

/// Where 32-bit memory BARs go: the q35 PCI hole, as libqos `pci-pc.c` allocates them.
pub const MMIO32_BASE: u64 = 0xe000_0000;
/// Where 64-bit memory BARs go: above 4 GiB, far from the 128 MiB of RAM.
pub const MMIO64_BASE: u64 = 0x8_0000_0000;

/// A function (bus and devfn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bdf {
    pub bus: u8,
    pub devfn: u8,
}

impl Bdf {
    fn cfg_addr(self, off: u8) -> u32 {
        0x8000_0000 | (self.bus as u32) << 16 | (self.devfn as u32) << 8 | (off as u32 & 0xfc)
    }
}

pub fn cfg_read32(qt: &mut Qtest, d: Bdf, off: u8) -> u32 {
    qt.outl(CONFIG_ADDRESS, d.cfg_addr(off));
    qt.inl(CONFIG_DATA)
}
pub fn cfg_read16(qt: &mut Qtest, d: Bdf, off: u8) -> u16 {
    qt.outl(CONFIG_ADDRESS, d.cfg_addr(off));
    qt.inw(CONFIG_DATA + (off as u16 & 2))
}
pub fn cfg_read8(qt: &mut Qtest, d: Bdf, off: u8) -> u8 {
    qt.outl(CONFIG_ADDRESS, d.cfg_addr(off));
    qt.inb(CONFIG_DATA + (off as u16 & 3))
}
pub fn cfg_write32(qt: &mut Qtest, d: Bdf, off: u8, v: u32) {
    qt.outl(CONFIG_ADDRESS, d.cfg_addr(off));
    qt.outl(CONFIG_DATA, v);
}
pub fn cfg_write16(qt: &mut Qtest, d: Bdf, off: u8, v: u16) {
    qt.outl(CONFIG_ADDRESS, d.cfg_addr(off));
    qt.outw(CONFIG_DATA + (off as u16 & 2), v);
}
pub fn cfg_write8(qt: &mut Qtest, d: Bdf, off: u8, v: u8) {
    qt.outl(CONFIG_ADDRESS, d.cfg_addr(off));
    qt.outb(CONFIG_DATA + (off as u16 & 3), v);
}

/// Every function on bus 0 with this vendor and device ID, in slot order.
pub fn find_all(qt: &mut Qtest, vendor: u16, device: u16) -> Vec<Bdf> {
    find_all_on(qt, 0, vendor, device)
}

/// Every function on `bus` with this vendor and device ID, in slot order.
pub fn find_all_on(qt: &mut Qtest, bus: u8, vendor: u16, device: u16) -> Vec<Bdf> {
    let mut found = Vec::new();
    for dev in 0..32u8 {
        for func in 0..8u8 {
            let d = Bdf {
                bus,
                devfn: dev << 3 | func,
            };
            let id = cfg_read32(qt, d, PCI_VENDOR_ID);
            if id & 0xffff == 0xffff {
                if func == 0 {
                    break;
                }
                continue;
            }
            if id == (device as u32) << 16 | vendor as u32 {
                found.push(d);
            }
            if func == 0 && cfg_read8(qt, d, PCI_HEADER_TYPE) & 0x80 == 0 {
                break;
            }
        }
    }
    found
}

/// The first function on bus 0 with this vendor and device ID.
pub fn find(qt: &mut Qtest, vendor: u16, device: u16) -> Option<Bdf> {
    find_all(qt, vendor, device).into_iter().next()
}

/// What a BAR register says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarInfo {
    /// BAR register number (0..=5); a 64-bit BAR also occupies `index + 1`.
    pub index: usize,
    pub io: bool,
    pub is_64: bool,
    pub prefetch: bool,
    /// Decoded size in bytes; 0 if the BAR is not implemented.
    pub size: u64,
}

/// Sizes every BAR of a type-0 function the usual way (write all ones, read back the mask,
/// restore). Unimplemented BARs are left out; the upper half of a 64-bit BAR is not listed.
pub fn probe_bars(qt: &mut Qtest, d: Bdf) -> Vec<BarInfo> {
    let mut bars = Vec::new();
    let mut i = 0;
    while i < 6 {
        let off = PCI_BASE_ADDRESS_0 + 4 * i as u8;
        let orig = cfg_read32(qt, d, off);
        cfg_write32(qt, d, off, 0xffff_ffff);
        let lo = cfg_read32(qt, d, off);
        cfg_write32(qt, d, off, orig);
        if lo == 0 {
            i += 1;
            continue;
        }
        if lo & PCI_BASE_ADDRESS_SPACE_IO != 0 {
            let mask = (lo & !0x3) as u64 | 0xffff_0000;
            bars.push(BarInfo {
                index: i,
                io: true,
                is_64: false,
                prefetch: false,
                size: (!mask & 0xffff_ffff) + 1,
            });
            i += 1;
            continue;
        }
        let is_64 = lo & 0x6 == PCI_BASE_ADDRESS_MEM_TYPE_64;
        let prefetch = lo & PCI_BASE_ADDRESS_MEM_PREFETCH != 0;
        let mut mask = (lo & !0xf) as u64;
        if is_64 {
            let hoff = off + 4;
            let horig = cfg_read32(qt, d, hoff);
            cfg_write32(qt, d, hoff, 0xffff_ffff);
            let hi = cfg_read32(qt, d, hoff);
            cfg_write32(qt, d, hoff, horig);
            mask |= (hi as u64) << 32;
        } else {
            mask |= 0xffff_ffff_0000_0000;
        }
        bars.push(BarInfo {
            index: i,
            io: false,
            is_64,
            prefetch,
            size: (!mask).wrapping_add(1),
        });
        i += if is_64 { 2 } else { 1 };
    }
    bars
}

/// Programs a memory BAR's address (both halves for a 64-bit BAR).
pub fn set_bar(qt: &mut Qtest, d: Bdf, bar: &BarInfo, addr: u64) {
    let off = PCI_BASE_ADDRESS_0 + 4 * bar.index as u8;
    cfg_write32(qt, d, off, addr as u32);
    if bar.is_64 {
        cfg_write32(qt, d, off + 4, (addr >> 32) as u32);
    }
}

/// Reads a BAR's programmed address back from config space.
pub fn bar_addr(qt: &mut Qtest, d: Bdf, bar: &BarInfo) -> u64 {
    let off = PCI_BASE_ADDRESS_0 + 4 * bar.index as u8;
    let mut a = (cfg_read32(qt, d, off) & !0xf) as u64;
    if bar.is_64 {
        a |= (cfg_read32(qt, d, off + 4) as u64) << 32;
    }
    a
}

/// Hands out naturally aligned BAR addresses: 32-bit BARs in the PCI hole from [`MMIO32_BASE`],
/// 64-bit ones from [`MMIO64_BASE`]. One allocator serves every device of a machine.
#[derive(Clone, Copy, Debug)]
pub struct BarAllocator {
    pub next32: u64,
    pub next64: u64,
}

impl Default for BarAllocator {
    fn default() -> Self {
        BarAllocator {
            next32: MMIO32_BASE,
            next64: MMIO64_BASE,
        }
    }
}

impl BarAllocator {
    /// Assigns every memory BAR of `d` and turns on memory decoding and bus mastering.
    /// Returns the address of each BAR by register number.
    pub fn assign_and_enable(
        &mut self,
        qt: &mut Qtest,
        d: Bdf,
        bars: &[BarInfo],
    ) -> [Option<u64>; 6] {
        let mut addrs = [None; 6];
        for b in bars.iter().filter(|b| !b.io) {
            let next = if b.is_64 {
                &mut self.next64
            } else {
                &mut self.next32
            };
            let size = b.size.max(0x1000);
            let addr = next.div_ceil(size) * size;
            *next = addr + size;
            set_bar(qt, d, b, addr);
            addrs[b.index] = Some(addr);
        }
        let cmd = cfg_read16(qt, d, PCI_COMMAND);
        cfg_write16(
            qt,
            d,
            PCI_COMMAND,
            cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER,
        );
        addrs
    }
}

/// [`BarAllocator::assign_and_enable`] for a machine's only device.
pub fn assign_and_enable(qt: &mut Qtest, d: Bdf, bars: &[BarInfo]) -> [Option<u64>; 6] {
    BarAllocator::default().assign_and_enable(qt, d, bars)
}

/// Finds a capability by ID in the standard capability list.
pub fn find_cap(qt: &mut Qtest, d: Bdf, id: u8) -> Option<u8> {
    if cfg_read16(qt, d, PCI_STATUS) & PCI_STATUS_CAP_LIST == 0 {
        return None;
    }
    let mut ptr = cfg_read8(qt, d, PCI_CAPABILITY_LIST) & !3;
    let mut hops = 0;
    while ptr != 0 && hops < 48 {
        if cfg_read8(qt, d, ptr) == id {
            return Some(ptr);
        }
        ptr = cfg_read8(qt, d, ptr + 1) & !3;
        hops += 1;
    }
    None
}

/// A function's MSI-X capability, with the table and PBA located in their (assigned) BARs.
#[derive(Clone, Copy, Debug)]
pub struct Msix {
    pub dev: Bdf,
    /// Config-space offset of the capability.
    pub cap: u8,
    /// Number of table entries.
    pub entries: u16,
    pub table_bir: u32,
    pub table_off: u32,
    pub pba_bir: u32,
    pub pba_off: u32,
    /// Guest-physical address of the table and the PBA.
    pub table: u64,
    pub pba: u64,
}

impl Msix {
    /// Reads the capability; `bar_addrs` are the addresses [`assign_and_enable`] gave.
    pub fn probe(qt: &mut Qtest, d: Bdf, bar_addrs: &[Option<u64>; 6]) -> Option<Msix> {
        let cap = find_cap(qt, d, PCI_CAP_ID_MSIX)?;
        let flags = cfg_read16(qt, d, cap + PCI_MSIX_FLAGS);
        let table = cfg_read32(qt, d, cap + PCI_MSIX_TABLE);
        let pba = cfg_read32(qt, d, cap + PCI_MSIX_PBA);
        let (table_bir, table_off) = (table & PCI_MSIX_BIR, table & !PCI_MSIX_BIR);
        let (pba_bir, pba_off) = (pba & PCI_MSIX_BIR, pba & !PCI_MSIX_BIR);
        let table_base = bar_addrs.get(table_bir as usize).copied().flatten()?;
        let pba_base = bar_addrs.get(pba_bir as usize).copied().flatten()?;
        Some(Msix {
            dev: d,
            cap,
            entries: (flags & PCI_MSIX_FLAGS_QSIZE) + 1,
            table_bir,
            table_off,
            pba_bir,
            pba_off,
            table: table_base + table_off as u64,
            pba: pba_base + pba_off as u64,
        })
    }

    pub fn flags(&self, qt: &mut Qtest) -> u16 {
        cfg_read16(qt, self.dev, self.cap + PCI_MSIX_FLAGS)
    }

    /// Turns MSI-X on (function mask off) or off.
    pub fn set_enabled(&self, qt: &mut Qtest, on: bool) {
        let f = self.flags(qt) & !(PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL);
        let f = if on { f | PCI_MSIX_FLAGS_ENABLE } else { f };
        cfg_write16(qt, self.dev, self.cap + PCI_MSIX_FLAGS, f);
    }

    fn entry(&self, vector: u16) -> u64 {
        assert!(
            vector < self.entries,
            "MSI-X vector {vector} out of {}",
            self.entries
        );
        self.table + vector as u64 * PCI_MSIX_ENTRY_SIZE
    }

    /// Programs a vector's message address and data (leaves its mask bit alone).
    pub fn set_vector(&self, qt: &mut Qtest, vector: u16, addr: u64, data: u32) {
        let e = self.entry(vector);
        qt.writel(e + PCI_MSIX_ENTRY_LOWER_ADDR, addr as u32);
        qt.writel(e + PCI_MSIX_ENTRY_UPPER_ADDR, (addr >> 32) as u32);
        qt.writel(e + PCI_MSIX_ENTRY_DATA, data);
    }

    /// Masks or unmasks one vector. Unmasking a vector with its pending bit set makes QEMU
    /// deliver the message at once.
    pub fn set_masked(&self, qt: &mut Qtest, vector: u16, masked: bool) {
        let e = self.entry(vector) + PCI_MSIX_ENTRY_VECTOR_CTRL;
        let c = qt.readl(e);
        let c = if masked {
            c | PCI_MSIX_ENTRY_CTRL_MASKBIT
        } else {
            c & !PCI_MSIX_ENTRY_CTRL_MASKBIT
        };
        qt.writel(e, c);
    }

    pub fn masked(&self, qt: &mut Qtest, vector: u16) -> bool {
        qt.readl(self.entry(vector) + PCI_MSIX_ENTRY_VECTOR_CTRL) & PCI_MSIX_ENTRY_CTRL_MASKBIT != 0
    }

    /// The vector's pending bit in the PBA. As libqos `qpci_msix_pending` notes, the bit only
    /// records an interrupt raised while the vector is masked; an unmasked vector delivers
    /// its message instead.
    pub fn pending(&self, qt: &mut Qtest, vector: u16) -> bool {
        let word = qt.readl(self.pba + (vector as u64 / 32) * 4);
        word & (1 << (vector % 32)) != 0
    }
}

/// Type 1 (bridge) header registers.
pub const PCI_PRIMARY_BUS: u8 = 0x18;
pub const PCI_SECONDARY_BUS: u8 = 0x19;
pub const PCI_SUBORDINATE_BUS: u8 = 0x1a;
pub const PCI_MEMORY_BASE: u8 = 0x20;
pub const PCI_MEMORY_LIMIT: u8 = 0x22;
pub const PCI_PREF_MEMORY_BASE: u8 = 0x24;
pub const PCI_PREF_MEMORY_LIMIT: u8 = 0x26;
pub const PCI_PREF_BASE_UPPER32: u8 = 0x28;
pub const PCI_PREF_LIMIT_UPPER32: u8 = 0x2c;
pub const PCI_BRIDGE_CONTROL: u8 = 0x3e;
pub const PCI_BRIDGE_CTL_BUS_RESET: u16 = 0x40;

/// Does the firmware's work for a bridge: bus numbers `secondary`..=`secondary`, a 32-bit memory
/// window and a 64-bit prefetchable window (each `[base, base + size)`, 1 MiB granular), memory
/// decoding and bus mastering on.
pub fn setup_bridge(qt: &mut Qtest, br: Bdf, secondary: u8, mem: (u64, u64), pref: (u64, u64)) {
    cfg_write8(qt, br, PCI_PRIMARY_BUS, br.bus);
    cfg_write8(qt, br, PCI_SECONDARY_BUS, secondary);
    cfg_write8(qt, br, PCI_SUBORDINATE_BUS, secondary);
    let (base, size) = mem;
    cfg_write16(qt, br, PCI_MEMORY_BASE, (base >> 16) as u16 & 0xfff0);
    cfg_write16(
        qt,
        br,
        PCI_MEMORY_LIMIT,
        ((base + size - 1) >> 16) as u16 & 0xfff0,
    );
    let (base, size) = pref;
    let limit = base + size - 1;
    cfg_write16(
        qt,
        br,
        PCI_PREF_MEMORY_BASE,
        (base >> 16) as u16 & 0xfff0 | 1,
    );
    cfg_write16(
        qt,
        br,
        PCI_PREF_MEMORY_LIMIT,
        (limit >> 16) as u16 & 0xfff0 | 1,
    );
    cfg_write32(qt, br, PCI_PREF_BASE_UPPER32, (base >> 32) as u32);
    cfg_write32(qt, br, PCI_PREF_LIMIT_UPPER32, (limit >> 32) as u32);
    let cmd = cfg_read16(qt, br, PCI_COMMAND);
    cfg_write16(
        qt,
        br,
        PCI_COMMAND,
        cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER,
    );
}

/// q35's MCH: PCIEXBAR, the ECAM (MMCONFIG) window, which firmware enables.
pub const Q35_MCH: Bdf = Bdf { bus: 0, devfn: 0 };
pub const Q35_PCIEXBAR: u8 = 0x60;
/// Where [`enable_q35_ecam`] puts ECAM (q35's default, 256 MiB: buses 0..=255).
pub const Q35_ECAM_BASE: u64 = 0xb000_0000;

/// Enables ECAM at [`Q35_ECAM_BASE`]: every function's config space is then also MMIO, at
/// `ecam_addr(bdf)`, reachable by CPU stores and by DMA alike.
pub fn enable_q35_ecam(qt: &mut Qtest) {
    cfg_write32(qt, Q35_MCH, Q35_PCIEXBAR + 4, 0);
    cfg_write32(qt, Q35_MCH, Q35_PCIEXBAR, Q35_ECAM_BASE as u32 | 1);
}

/// The ECAM address of a function's config space.
pub fn ecam_addr(d: Bdf) -> u64 {
    Q35_ECAM_BASE + ((d.bus as u64) << 20) + ((d.devfn as u64) << 12)
}
