// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! qhca as a device of the kernel's RDMA core: in `/sys/class/infiniband` and in the `rdma` tool,
//! with what the device says of itself.
//!
//! The driver names the device `qhcaN`; udev may rename it, as it does every PCI RDMA device,
//! where rdma-core's naming rule is installed (Debian's renames by PCI location: `rocep0s10`).
//! So the cases find it under its PCI device.

use std::path::{Path, PathBuf};

use qhca::PortState;

use super::*;

/// The RDMA core's devices under PCI device `bdf` (`/sys/bus/pci/devices/BDF/infiniband/*`).
pub(super) fn ib_dirs(bdf: &str) -> Vec<PathBuf> {
    let dir = Path::new("/sys/bus/pci/devices").join(bdf).join("infiniband");
    match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    }
}

/// True once PCI device `bdf` has exactly one RDMA core device.
pub(super) fn has_ib_device(bdf: &str) -> bool {
    ib_dirs(bdf).len() == 1
}

/// Where the RDMA core shows its devices.
const IB_CLASS: &str = "/sys/class/infiniband";

/// A PCI address as udev's names spell it: `0000:00:0a.0` is `p0s10` (a domain other than 0 is
/// `P<d>` first; a function other than 0 is `f<n>` last).
fn pci_location(bdf: &str) -> String {
    let num = |s: &str| u32::from_str_radix(s, 16).unwrap_or(u32::MAX);
    let (dom_bus, dev_fn) = bdf.rsplit_once(':').unwrap_or(("", ""));
    let (dom, bus) = dom_bus.split_once(':').unwrap_or(("0", "0"));
    let (dev, func) = dev_fn.split_once('.').unwrap_or(("0", "0"));
    let mut s = String::new();
    if num(dom) != 0 {
        s += &format!("P{}", num(dom));
    }
    s += &format!("p{}s{}", num(bus), num(dev));
    if num(func) != 0 {
        s += &format!("f{}", num(func));
    }
    s
}

/// Reads a sysfs attribute, trimmed.
fn attr(dir: &Path, name: &str) -> Result<String, Fail> {
    let p = dir.join(name);
    std::fs::read_to_string(&p)
        .map(|s| s.trim().to_owned())
        .map_err(|e| Fail::new(file!(), line!(), format!("{}: {e}", p.display())))
}

/// A GUID as sysfs and the `rdma` tool print it: four groups of four hex digits.
fn guid_text(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// Case: the RDMA core lists qhca0, a child of our PCI device, with the device's GUID and
/// firmware version and a RoCE port in the state the device reports; the `rdma` tool (netlink)
/// sees the same.
pub(super) fn ib_device(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    require!(
        t,
        wait_for(NODE_TIMEOUT, || has_ib_device(&bdf)),
        "{bdf} has no single RDMA core device: {:?}",
        ib_dirs(&bdf)
    );
    let name = ib_dirs(&bdf)[0]
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let want = format!("roce{}", pci_location(&bdf));
    check!(
        t,
        name == "qhca0" || name == want,
        "named {name}: neither the driver's qhca0 nor udev's {want}"
    );
    let dir = Path::new(IB_CLASS).join(&name);
    let (ctx, a) = open_query(&cfg.dev)?;
    let port = ctx.query_port()?;
    drop(ctx);

    let parent = std::fs::canonicalize(dir.join("device"))?;
    check_eq!(
        t,
        parent.file_name().and_then(|n| n.to_str()),
        Some(bdf.as_str()),
        "{} is a child of our PCI device",
        dir.display()
    );
    check_eq!(t, attr(&dir, "node_type")?, "1: CA");
    check_eq!(t, attr(&dir, "node_guid")?, guid_text(a.node_guid));
    check_eq!(t, attr(&dir, "sys_image_guid")?, guid_text(a.node_guid));
    let v = a.fw_version;
    check_eq!(
        t,
        attr(&dir, "fw_ver")?,
        format!("{}.{}.{}", v >> 32, (v >> 16) & 0xffff, v & 0xffff)
    );
    check_eq!(t, attr(&dir, "node_desc")?, "qhca emulated RDMA NIC");

    let p1 = dir.join("ports/1");
    check_eq!(t, attr(&p1, "link_layer")?, "Ethernet");
    let (state, phys) = match port.state {
        PortState::Active => ("4: ACTIVE", "5: LinkUp"),
        _ => ("1: DOWN", "3: Disabled"),
    };
    check_eq!(t, attr(&p1, "state")?, state);
    check_eq!(t, attr(&p1, "phys_state")?, phys);
    check!(
        t,
        !dir.join("ports/2").exists(),
        "one port only: {}",
        dir.join("ports/2").display()
    );
    // A RoCE port's GID table has the device's length; each entry has a type.
    let gids = std::fs::read_dir(p1.join("gids"))?.count();
    check_eq!(t, gids, usize::from(port.gid_tbl_len), "GID table entries");
    check!(
        t,
        p1.join("gid_attrs/types/0").exists(),
        "gid_attrs/types/0 missing"
    );
    check_eq!(t, attr(&p1, "pkeys/0")?, "0xffff", "the default P_Key");

    // The same through rdma netlink.
    let Some(rdma) = find_tool("rdma") else {
        bail!("the rdma tool (iproute2) is not installed");
    };
    let out = run_tool(&rdma, &["dev".as_ref(), "show".as_ref(), name.as_ref()])?;
    let text = String::from_utf8_lossy(&out.stdout);
    check!(
        t,
        out.status.success()
            && text.contains(&format!(": {name}: node_type ca"))
            && text.contains(&format!("node_guid {}", guid_text(a.node_guid))),
        "rdma dev show {name}: {}",
        describe(&out)
    );
    let link = format!("{name}/1");
    let out = run_tool(&rdma, &["link".as_ref(), "show".as_ref(), link.as_ref()])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let want = match port.state {
        PortState::Active => "state ACTIVE physical_state LINK_UP",
        _ => "state DOWN physical_state DISABLED",
    };
    check!(
        t,
        out.status.success() && text.contains(want),
        "rdma link show {link} (want \"{want}\"): {}",
        describe(&out)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_locations_as_udev_spells_them() {
        assert_eq!(pci_location("0000:00:0a.0"), "p0s10");
        assert_eq!(pci_location("0000:3b:00.1"), "p59s0f1");
        assert_eq!(pci_location("0001:00:02.0"), "P1p0s2");
    }

    #[test]
    fn guids_as_sysfs_prints_them() {
        assert_eq!(guid_text(0x5054_00ff_fe12_3456), "5054:00ff:fe12:3456");
    }
}
