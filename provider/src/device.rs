// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Device discovery: qhca's devices as the RDMA core lists them (their uverbs nodes, names and PCI
//! addresses, from sysfs).

use std::path::{Path, PathBuf};

use crate::context::Context;
use crate::error::{errno_of, Error, Result};

/// The prefix of the names [`DeviceInfo::find`] takes for a device's place in [`devices`]
/// (`qhca0` is the first).
pub const NAME_PREFIX: &str = "qhca";
/// Where the RDMA core lists its uverbs nodes; `<SYSFS_UVERBS_DIR>/uverbsN/device` links to the
/// PCI device, `<SYSFS_UVERBS_DIR>/uverbsN/ibdev` holds the RDMA device's name.
pub const SYSFS_UVERBS_DIR: &str = "/sys/class/infiniband_verbs";
/// Where the uverbs nodes live.
pub const UVERBS_DEV_DIR: &str = "/dev/infiniband";
/// Where PCI devices are, by address; `<SYSFS_PCI_DIR>/<addr>/net/` names a device's netdevs.
pub const SYSFS_PCI_DIR: &str = "/sys/bus/pci/devices";

/// One qhca device, as found by [`devices`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The RDMA core's name of the device, as `ibv_devices` lists it (`rocep0s10` where udev
    /// names RDMA devices by their PCI slot, `qhca0` where nothing renames them).
    pub name: String,
    /// Its place among the qhca devices, in PCI address order: [`DeviceInfo::find`] takes
    /// `qhcaN` for it.
    pub index: u32,
    /// The node a context opens ([`Context::open`]): the core's uverbs node
    /// (`/dev/infiniband/uverbsN`).
    pub path: PathBuf,
    /// The PCI address (`0000:00:03.0`), when sysfs links the node to its PCI device (always
    /// for a device [`devices`] lists).
    pub pci_addr: Option<String>,
}

impl DeviceInfo {
    /// Opens a context on this device.
    pub fn open(&self) -> Result<Context> {
        Context::open(&self.path)
    }

    /// The Linux netdev of the device's port (`enp0s10`): its addresses are the port's GIDs on
    /// the uverbs node, where `ip addr add ... dev NETDEV` sets them. `None` without one (or
    /// without a PCI address).
    pub fn netdev(&self) -> Option<String> {
        netdev_in(Path::new(SYSFS_PCI_DIR), self.pci_addr.as_deref()?)
    }

    /// The device called `name` in [`devices`]: by the RDMA core's name (`rocep0s10`), or by
    /// `qhcaN`, the N-th in PCI address order, if no device has that name; [`Error::NotFound`]
    /// if there is none.
    pub fn find(name: &str) -> Result<DeviceInfo> {
        match devices() {
            Ok(list) => find_in(list, name),
            Err(Error::NoDevices) => None,
            Err(e) => return Err(e),
        }
        .ok_or_else(|| Error::NotFound {
            name: name.to_owned(),
        })
    }
}

/// The one netdev of PCI device `pci_addr` under `sysfs_pci_dir`, if it has exactly one.
pub fn netdev_in(sysfs_pci_dir: &Path, pci_addr: &str) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(sysfs_pci_dir.join(pci_addr).join("net"))
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    (names.len() == 1).then(|| names.remove(0))
}

/// The node that `spec` names, as the tools' `-d` takes it: a path (`/dev/infiniband/uverbs0`)
/// as it is; a device's name or `qhcaN` through
/// [`DeviceInfo::find`]; nothing (or an empty name): the first of [`devices`].
pub fn node_of(spec: Option<&str>) -> Result<PathBuf> {
    match spec.filter(|s| !s.is_empty()) {
        Some(path) if path.starts_with('/') => Ok(PathBuf::from(path)),
        Some(name) => Ok(DeviceInfo::find(name)?.path),
        None => Ok(devices()?.remove(0).path),
    }
}

/// `name` in `list`, as [`DeviceInfo::find`] looks for it.
pub fn find_in(list: Vec<DeviceInfo>, name: &str) -> Option<DeviceInfo> {
    let index = parse_device_name(name);
    let mut by_index = None;
    for d in list {
        if d.name == name {
            return Some(d);
        }
        if Some(d.index) == index && by_index.is_none() {
            by_index = Some(d);
        }
    }
    by_index
}

/// Every qhca device of the RDMA core, in PCI address order: each with its uverbs node.
///
/// Returns [`Error::NoDevices`] if there is none (the driver is not loaded, or the core's
/// `ib_uverbs` is not), [`Error::Discover`] if sysfs cannot be read.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    nonempty(match devices_in(Path::new(SYSFS_UVERBS_DIR)) {
        Err(Error::Discover {
            source: crate::Errno::ENOENT,
            ..
        }) => Vec::new(),
        r => r?,
    })
}

/// `list`, or [`Error::NoDevices`] if it is empty.
fn nonempty(list: Vec<DeviceInfo>) -> Result<Vec<DeviceInfo>> {
    if list.is_empty() {
        return Err(Error::NoDevices);
    }
    Ok(list)
}

/// The entries of `dir` whose names are UTF-8, with their paths; [`Error::Discover`] if `dir`
/// cannot be read.
fn named_entries(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let discover_err = |e: std::io::Error| Error::Discover {
        path: dir.to_owned(),
        source: errno_of(&e),
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(discover_err)? {
        let entry = entry.map_err(discover_err)?;
        if let Some(name) = entry.file_name().to_str() {
            out.push((name.to_owned(), entry.path()));
        }
    }
    Ok(out)
}

/// [`devices`] over another sysfs directory (for tests); an empty list is not an error here.
pub fn devices_in(sysfs_uverbs_dir: &Path) -> Result<Vec<DeviceInfo>> {
    let mut list = Vec::new();
    for (node, dir) in named_entries(sysfs_uverbs_dir)? {
        if !node.starts_with("uverbs") {
            continue;
        }
        let Some(pci_addr) = pci_addr_of(&dir) else {
            continue;
        };
        if !is_qhca(&dir.join("device")) {
            continue;
        }
        // The core's name of the device; a node whose device is going away has none.
        let Ok(name) = std::fs::read_to_string(dir.join("ibdev")) else {
            continue;
        };
        list.push(DeviceInfo {
            name: name.trim().to_owned(),
            index: 0,
            path: Path::new(UVERBS_DEV_DIR).join(&node),
            pci_addr: Some(pci_addr),
        });
    }
    list.sort_by(|a, b| a.pci_addr.cmp(&b.pci_addr));
    for (i, d) in list.iter_mut().enumerate() {
        d.index = u32::try_from(i).unwrap_or(u32::MAX);
    }
    Ok(list)
}

/// Whether the PCI device at `pci_dir` has qhca's vendor and device IDs.
fn is_qhca(pci_dir: &Path) -> bool {
    let id = |f: &str| -> Option<u32> {
        let s = std::fs::read_to_string(pci_dir.join(f)).ok()?;
        u32::from_str_radix(s.trim().strip_prefix("0x")?, 16).ok()
    };
    id("vendor") == Some(qhca_uapi::QHCA_PCI_VENDOR_ID)
        && id("device") == Some(qhca_uapi::QHCA_PCI_DEVICE_ID)
}

/// The RDMA core's uverbs node (`/dev/infiniband/uverbsN`) of PCI device `pci_addr`
/// (`0000:00:03.0`), which [`Context::open`] also takes; `None` if the core has none for it.
pub fn uverbs_node(pci_addr: &str) -> Option<PathBuf> {
    uverbs_node_in(Path::new(SYSFS_UVERBS_DIR), pci_addr)
}

/// [`uverbs_node`] over another sysfs directory (for tests).
pub fn uverbs_node_in(sysfs_uverbs_dir: &Path, pci_addr: &str) -> Option<PathBuf> {
    std::fs::read_dir(sysfs_uverbs_dir)
        .ok()?
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("uverbs"))
        })
        .find(|e| pci_addr_of(&e.path()).as_deref() == Some(pci_addr))
        .map(|e| Path::new(UVERBS_DEV_DIR).join(e.file_name()))
}

/// `qhcaN` → N; anything else (other devices, `qhca`, `qhca01`, `qhca0x`) → `None`.
pub fn parse_device_name(name: &str) -> Option<u32> {
    let digits = name.strip_prefix(NAME_PREFIX)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if canonical {
        digits.parse().ok()
    } else {
        None
    }
}

/// The last component of `<class_dir>/device`, the symlink to the parent PCI device, if it
/// exists and looks like a PCI address.
fn pci_addr_of(class_dir: &Path) -> Option<String> {
    let target = std::fs::read_link(class_dir.join("device")).ok()?;
    let last = target.file_name()?.to_str()?;
    is_pci_addr(last).then(|| last.to_owned())
}

/// `DDDD:BB:DD.F` with hex digits, as sysfs names PCI devices.
pub fn is_pci_addr(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_hexdigit);
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && hex(0..4)
        && hex(5..7)
        && hex(8..10)
        && hex(11..12)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A scratch directory removed on drop.
    struct Scratch(PathBuf);
    impl Scratch {
        fn new(tag: &str) -> Self {
            let p = std::env::temp_dir().join(format!("qhca-test-{tag}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
    }
    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn parses_names() {
        assert_eq!(parse_device_name("qhca0"), Some(0));
        assert_eq!(parse_device_name("qhca7"), Some(7));
        assert_eq!(parse_device_name("qhca10"), Some(10));
        for bad in [
            "qhca",
            "qhca01",
            "qhca0x",
            "qhca-1",
            "qhca+1",
            "xqhca0",
            "mlx5_0",
            "",
            "qhca99999999999",
        ] {
            assert_eq!(parse_device_name(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn recognizes_pci_addresses() {
        assert!(is_pci_addr("0000:00:03.0"));
        assert!(is_pci_addr("abcd:ef:1f.7"));
        for bad in [
            "0000:00:03",
            "0000:00:03.00",
            "00:03.0",
            "0000-00:03.0",
            "000g:00:03.0",
            "qhca0",
        ] {
            assert!(!is_pci_addr(bad), "{bad:?}");
        }
    }

    /// `<dir>/pci/<addr>` with these IDs, and `<dir>/uverbs/<node>` on it named `ibdev`.
    fn uverbs_entry(dir: &Path, node: &str, addr: &str, ids: (&str, &str), ibdev: Option<&str>) {
        let pci = dir.join("pci").join(addr);
        fs::create_dir_all(&pci).unwrap();
        fs::write(pci.join("vendor"), format!("{}\n", ids.0)).unwrap();
        fs::write(pci.join("device"), format!("{}\n", ids.1)).unwrap();
        let n = dir.join("uverbs").join(node);
        fs::create_dir_all(&n).unwrap();
        std::os::unix::fs::symlink(&pci, n.join("device")).unwrap();
        if let Some(name) = ibdev {
            fs::write(n.join("ibdev"), format!("{name}\n")).unwrap();
        }
    }

    #[test]
    fn lists_the_cores_qhca_devices_in_pci_order() {
        let s = Scratch::new("uverbs-list");
        let ours = ("0x1af4", "0x10f0");
        uverbs_entry(&s.0, "uverbs3", "0000:00:0b.0", ours, Some("rocep0s11"));
        uverbs_entry(&s.0, "uverbs1", "0000:00:0a.0", ours, Some("qhca1"));
        // rxe has no PCI device; another vendor's device; one going away (no ibdev).
        fs::create_dir_all(s.0.join("uverbs/uverbs0")).unwrap();
        uverbs_entry(
            &s.0,
            "uverbs2",
            "0000:00:0c.0",
            ("0x15b3", "0x101b"),
            Some("mlx5_0"),
        );
        uverbs_entry(&s.0, "uverbs4", "0000:00:0d.0", ours, None);
        fs::create_dir_all(s.0.join("uverbs/other")).unwrap();

        let list = devices_in(&s.0.join("uverbs")).unwrap();
        let got: Vec<_> = list
            .iter()
            .map(|d| (d.name.as_str(), d.index, d.path.to_str().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                ("qhca1", 0, "/dev/infiniband/uverbs1"),
                ("rocep0s11", 1, "/dev/infiniband/uverbs3")
            ]
        );
        assert_eq!(list[1].pci_addr.as_deref(), Some("0000:00:0b.0"));
        // By name first, then qhcaN by place: "qhca1" is the device of that name, not the
        // second one.
        let find = |n: &str| find_in(list.clone(), n).map(|d| d.name);
        assert_eq!(find("rocep0s11").as_deref(), Some("rocep0s11"));
        assert_eq!(find("qhca1").as_deref(), Some("qhca1"));
        assert_eq!(find("qhca0").as_deref(), Some("qhca1"));
        assert_eq!(find("qhca2"), None);
        assert_eq!(find("mlx5_0"), None);
        assert_eq!(find(""), None);

        fs::create_dir_all(s.0.join("pci/0000:00:0b.0/net/enp0s11")).unwrap();
        fs::create_dir_all(s.0.join("pci/0000:00:0d.0/net/a")).unwrap();
        fs::create_dir_all(s.0.join("pci/0000:00:0d.0/net/b")).unwrap();
        let pci = s.0.join("pci");
        assert_eq!(netdev_in(&pci, "0000:00:0b.0").as_deref(), Some("enp0s11"));
        assert_eq!(netdev_in(&pci, "0000:00:0a.0"), None);
        assert_eq!(netdev_in(&pci, "0000:00:0d.0"), None);
    }

    #[test]
    fn finds_the_uverbs_node_of_a_pci_device() {
        let s = Scratch::new("uverbs");
        for (n, pci) in [("uverbs0", "0000:00:02.0"), ("uverbs1", "0000:00:03.0")] {
            fs::create_dir_all(s.0.join(n)).unwrap();
            std::os::unix::fs::symlink(
                format!("../../../devices/pci0000:00/{pci}"),
                s.0.join(n).join("device"),
            )
            .unwrap();
        }
        assert_eq!(
            uverbs_node_in(&s.0, "0000:00:03.0"),
            Some(PathBuf::from("/dev/infiniband/uverbs1"))
        );
        assert_eq!(uverbs_node_in(&s.0, "0000:00:04.0"), None);
        assert_eq!(uverbs_node_in(&s.0.join("none"), "0000:00:03.0"), None);
    }

    #[test]
    fn empty_and_missing_directories() {
        let s = Scratch::new("empty");
        assert_eq!(devices_in(&s.0).unwrap(), []);
        let missing = s.0.join("missing");
        match devices_in(&missing) {
            Err(Error::Discover { path, source }) => {
                assert_eq!(path, missing);
                assert_eq!(source, crate::Errno::ENOENT);
            }
            other => panic!("expected Discover, got {other:?}"),
        }
    }
}
