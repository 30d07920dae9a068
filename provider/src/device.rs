// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Device discovery: `/dev/qhcaN` nodes and their PCI addresses from sysfs.

use std::path::{Path, PathBuf};

use crate::context::Context;
use crate::error::{errno_of, Error, Result};

/// Where device nodes live.
pub const DEV_DIR: &str = "/dev";
/// Where the misc class lists them; `<SYSFS_MISC_DIR>/qhcaN/device` links to the PCI device.
pub const SYSFS_MISC_DIR: &str = "/sys/class/misc";
/// The prefix of every node name.
pub const NAME_PREFIX: &str = "qhca";
/// Where the RDMA core lists its uverbs nodes; `<SYSFS_UVERBS_DIR>/uverbsN/device` links to the
/// PCI device.
pub const SYSFS_UVERBS_DIR: &str = "/sys/class/infiniband_verbs";
/// Where the uverbs nodes live.
pub const UVERBS_DEV_DIR: &str = "/dev/infiniband";
/// Where the RDMA core lists its devices by name.
pub const SYSFS_IB_DIR: &str = "/sys/class/infiniband";

/// One qhca device, as found by [`devices`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// `qhcaN`.
    pub name: String,
    /// N.
    pub index: u32,
    /// `/dev/qhcaN`.
    pub path: PathBuf,
    /// The PCI address (`0000:00:03.0`), when sysfs links the node to its PCI device.
    pub pci_addr: Option<String>,
}

impl DeviceInfo {
    /// Opens a context on this device.
    pub fn open(&self) -> Result<Context> {
        Context::open(&self.path)
    }

    /// The RDMA core's uverbs node of this device (`/dev/infiniband/uverbsN`), which
    /// [`Context::open`] also takes; `None` if the core has none for it (or sysfs does not link
    /// this node to its PCI device).
    pub fn uverbs_node(&self) -> Option<PathBuf> {
        uverbs_node(self.pci_addr.as_deref()?)
    }

    /// The device called `name` (`qhca0`), from [`devices`]; [`Error::NotFound`] if it is not
    /// there.
    pub fn find(name: &str) -> Result<DeviceInfo> {
        match devices() {
            Ok(list) => list.into_iter().find(|d| d.name == name),
            Err(Error::NoDevices) => None,
            Err(e) => return Err(e),
        }
        .ok_or_else(|| Error::NotFound {
            name: name.to_owned(),
        })
    }
}

/// Every qhca device, sorted by index (`qhca2` before `qhca10`).
///
/// Returns [`Error::NoDevices`] if there is none, [`Error::Discover`] if `/dev` cannot be read.
pub fn devices() -> Result<Vec<DeviceInfo>> {
    let list = devices_in(Path::new(DEV_DIR), Path::new(SYSFS_MISC_DIR))?;
    if list.is_empty() {
        return Err(Error::NoDevices);
    }
    Ok(list)
}

/// [`devices`] over other directories (for tests); an empty list is not an error here.
pub fn devices_in(dev_dir: &Path, sysfs_misc_dir: &Path) -> Result<Vec<DeviceInfo>> {
    let discover_err = |e: std::io::Error| Error::Discover {
        path: dev_dir.to_owned(),
        source: errno_of(&e),
    };
    let mut list = Vec::new();
    for entry in std::fs::read_dir(dev_dir).map_err(discover_err)? {
        let entry = entry.map_err(discover_err)?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let Some(index) = parse_device_name(&name) else {
            continue;
        };
        let pci_addr = pci_addr_of(&sysfs_misc_dir.join(&name));
        list.push(DeviceInfo {
            path: entry.path(),
            name,
            index,
            pci_addr,
        });
    }
    list.sort_by_key(|d| d.index);
    Ok(list)
}

/// The RDMA core's uverbs node (`/dev/infiniband/uverbsN`) of PCI device `pci_addr`
/// (`0000:00:03.0`), which [`Context::open`] also takes; `None` if the core has none for it.
pub fn uverbs_node(pci_addr: &str) -> Option<PathBuf> {
    uverbs_node_in(Path::new(SYSFS_UVERBS_DIR), pci_addr)
}

/// The uverbs node of the RDMA core's device called `ib_name` (`rocep0s10`, or `qhca0` where
/// udev does not rename RDMA devices), as `ibv_devices` lists it: what [`Context::open`] takes
/// for it; `None` if there is no such device (or it has no uverbs node).
pub fn uverbs_node_of_ib(ib_name: &str) -> Option<PathBuf> {
    uverbs_node_of_ib_in(Path::new(SYSFS_IB_DIR), ib_name)
}

/// [`uverbs_node_of_ib`] over another sysfs directory (for tests).
pub fn uverbs_node_of_ib_in(sysfs_ib_dir: &Path, ib_name: &str) -> Option<PathBuf> {
    if ib_name.is_empty() || ib_name.contains('/') || ib_name.starts_with('.') {
        return None;
    }
    std::fs::read_dir(sysfs_ib_dir.join(ib_name).join("device/infiniband_verbs"))
        .ok()?
        .flatten()
        .find(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("uverbs"))
        })
        .map(|e| Path::new(UVERBS_DEV_DIR).join(e.file_name()))
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

    #[test]
    fn lists_sorted_with_pci_addresses() {
        let s = Scratch::new("devices");
        let dev = s.0.join("dev");
        let misc = s.0.join("misc");
        fs::create_dir_all(&dev).unwrap();
        for n in ["qhca10", "qhca2", "qhca0", "null", "qhca", "qhca03"] {
            fs::write(dev.join(n), b"").unwrap();
        }
        // qhca0 has a parent PCI device, qhca2 has a class entry without one, qhca10 has none.
        fs::create_dir_all(misc.join("qhca0")).unwrap();
        std::os::unix::fs::symlink(
            "../../../devices/pci0000:00/0000:00:03.0",
            misc.join("qhca0/device"),
        )
        .unwrap();
        fs::create_dir_all(misc.join("qhca2")).unwrap();

        let list = devices_in(&dev, &misc).unwrap();
        let names: Vec<_> = list.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["qhca0", "qhca2", "qhca10"]);
        assert_eq!(list[0].index, 0);
        assert_eq!(list[0].path, dev.join("qhca0"));
        assert_eq!(list[0].pci_addr.as_deref(), Some("0000:00:03.0"));
        assert_eq!(list[1].pci_addr, None);
        assert_eq!(list[2].index, 10);
        assert_eq!(list[2].pci_addr, None);
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
    fn finds_the_uverbs_node_of_an_rdma_device() {
        let s = Scratch::new("ibnames");
        let verbs = s.0.join("rocep0s10/device/infiniband_verbs/uverbs2");
        fs::create_dir_all(&verbs).unwrap();
        assert_eq!(
            uverbs_node_of_ib_in(&s.0, "rocep0s10"),
            Some(PathBuf::from("/dev/infiniband/uverbs2"))
        );
        for bad in ["rxe0", "", "../rocep0s10", "."] {
            assert_eq!(uverbs_node_of_ib_in(&s.0, bad), None, "{bad:?}");
        }
    }

    #[test]
    fn empty_and_missing_directories() {
        let s = Scratch::new("empty");
        assert_eq!(devices_in(&s.0, &s.0.join("nope")).unwrap(), []);
        let missing = s.0.join("missing");
        match devices_in(&missing, &missing) {
            Err(Error::Discover { path, source }) => {
                assert_eq!(path, missing);
                assert_eq!(source, crate::Errno::ENOENT);
            }
            other => panic!("expected Discover, got {other:?}"),
        }
    }
}
