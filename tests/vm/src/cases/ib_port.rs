// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The port as the RDMA core shows it: its netdev and GIDs (the core fills the port's GID table
//! from the netdev's addresses, and the device's table follows it index for index: what an
//! address vector's `sgid_index` names), and its hardware counters.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use qhca::Gid;

use super::rdma_core::ib_dirs;
use super::*;

/// The netdev of PCI device `bdf` (`/sys/bus/pci/devices/BDF/net/*`): its name.
pub(crate) fn netdev_of(bdf: &str) -> Option<String> {
    qhca::netdev_in(Path::new(qhca::SYSFS_PCI_DIR), bdf)
}

/// The RDMA core's device of PCI device `bdf` (`qhca0`, or as udev renamed it), if it has one.
pub(crate) fn ib_device_of(bdf: &str) -> Option<String> {
    let dirs = ib_dirs(bdf);
    match dirs.as_slice() {
        [one] => one.file_name()?.to_str().map(str::to_owned),
        _ => None,
    }
}

/// Brings netdev `ndev` up and waits (10 s at most) until it has its IPv6 link-local address,
/// not tentative: the port's GID 0 then has a route, which the core needs to resolve an address
/// vector to it (the address comes once the kernel has seen the carrier, up to a second later).
pub(crate) fn link_up(ndev: &str) -> Result<(), Fail> {
    ip(&["link", "set", ndev, "up"])?;
    // /proc/net/if_inet6: address, ifindex, prefix length, scope (0x20: link), flags (0x40:
    // tentative), name.
    let ready = || {
        std::fs::read_to_string("/proc/net/if_inet6").is_ok_and(|s| {
            s.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() == 6
                    && w[5] == ndev
                    && w[3] == "20"
                    && u32::from_str_radix(w[4], 16).is_ok_and(|f| f & 0x40 == 0)
            })
        })
    };
    if !wait_for(NODE_TIMEOUT, ready) {
        bail!("{ndev} has no link-local address 10 s after ip link set up");
    }
    Ok(())
}

/// Entry `i` of the core's GID table: the GID as sysfs prints it, its type and its netdev
/// (`None` for an empty entry, whose attributes read as `EINVAL`).
fn core_gid(port: &Path, i: usize) -> (String, Option<(String, String)>) {
    let read = |p: PathBuf| std::fs::read_to_string(p).map(|s| s.trim().to_owned());
    let gid = read(port.join(format!("gids/{i}"))).unwrap_or_default();
    let ty = read(port.join(format!("gid_attrs/types/{i}")));
    let ndev = read(port.join(format!("gid_attrs/ndevs/{i}")));
    (gid, ty.ok().zip(ndev.ok()))
}

/// A GID as sysfs prints it: eight groups of four hex digits.
pub(crate) fn gid_text(g: &Gid) -> String {
    g.raw
        .chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

pub(crate) fn ip(args: &[&str]) -> Result<(), Fail> {
    let Some(tool) = find_tool("ip") else {
        bail!("the ip tool (iproute2) is not installed");
    };
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    let out = run_tool(&tool, &args)?;
    if !out.status.success() {
        bail!("ip {:?}: {}", args, describe(&out));
    }
    Ok(())
}

/// Case: the port has a netdev (the device's MAC, bound to the RDMA core's port); the core's GID
/// 0 is the device's fixed link-local GID; an IPv4 address given to the netdev becomes a RoCE v2
/// GID of the core and the same entry of the device's table (with its prefix); removing the
/// address empties both.
pub(super) fn ib_gids(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    require!(
        t,
        wait_for(NODE_TIMEOUT, || rdma_core::has_ib_device(&bdf)
            && netdev_of(&bdf).is_some()),
        "{bdf} has no single RDMA device and netdev: {:?} {:?}",
        ib_dirs(&bdf),
        netdev_of(&bdf)
    );
    let ndev = netdev_of(&bdf).unwrap_or_default();
    let port = ib_dirs(&bdf)[0].join("ports/1");
    let ctx = Context::open(&cfg.dev)?;
    let before = ctx.query_port()?;
    let mac = std::fs::read_to_string(Path::new("/sys/class/net").join(&ndev).join("address"))?;
    let want_mac = before
        .mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    check_eq!(t, mac.trim(), want_mac, "{ndev} has the port's MAC");
    // rdma netlink names it as the port's netdev.
    if let Some(rdma) = find_tool("rdma") {
        let name = ib_dirs(&bdf)[0]
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let link = format!("{name}/1");
        let out = run_tool(&rdma, &["link".as_ref(), "show".as_ref(), link.as_ref()])?;
        check!(
            t,
            String::from_utf8_lossy(&out.stdout).contains(&format!("netdev {ndev}")),
            "rdma link show {link}: {}",
            describe(&out)
        );
    }

    // GID 0: the default GID, which is the device's fixed entry 0.
    let dev0 = before
        .gids
        .iter()
        .find(|g| g.index == 0)
        .map(|g| gid_text(&g.gid));
    let (g0, attrs0) = core_gid(&port, 0);
    check_eq!(t, Some(g0), dev0, "the core's GID 0 is the device's");
    check_eq!(
        t,
        attrs0,
        Some(("RoCE v2".to_owned(), ndev.clone())),
        "GID 0's type and netdev"
    );

    // An address of the netdev: a GID of the core and of the device, at one index.
    let addr = Ipv4Addr::new(10, 77, 9, 1);
    let want = gid_text(&Gid::from_ipv4(addr));
    ip(&["link", "set", &ndev, "up"])?;
    ip(&["addr", "add", "10.77.9.1/20", "dev", &ndev])?;
    let find = || (1..usize::from(before.gid_tbl_len)).find(|&i| core_gid(&port, i).0 == want);
    let found = wait_for(NODE_TIMEOUT, || find().is_some());
    let result = (|| -> CaseResult {
        require!(
            t,
            found,
            "no GID {want} in {} after ip addr add",
            port.display()
        );
        let i = find().unwrap_or(0);
        check_eq!(
            t,
            core_gid(&port, i).1,
            Some(("RoCE v2".to_owned(), ndev.clone())),
            "GID {i}'s type and netdev"
        );
        let now = ctx.query_port()?;
        let entry = now.gids.iter().find(|g| usize::from(g.index) == i);
        check_eq!(
            t,
            entry.map(|g| (gid_text(&g.gid), g.prefix_len)),
            Some((want.clone(), 20)),
            "the device's entry {i}"
        );
        Ok(())
    })();
    ip(&["addr", "del", "10.77.9.1/20", "dev", &ndev])?;
    ip(&["link", "set", &ndev, "down"])?;
    result?;
    require!(
        t,
        wait_for(NODE_TIMEOUT, || find().is_none()),
        "GID {want} still in the core's table after ip addr del"
    );
    let after = ctx.query_port()?;
    check!(
        t,
        after.gids.iter().all(|g| gid_text(&g.gid) != want),
        "the device's table still has {want}: {:?}",
        after.gids
    );
    Ok(())
}

/// The port's counters as `struct qhca_port_counters` has them, by the names the RDMA core shows.
const COUNTERS: [&str; 19] = [
    "tx_frames",
    "tx_bytes",
    "rx_frames",
    "rx_bytes",
    "tx_no_route",
    "tx_no_neigh",
    "rx_malformed",
    "rx_bad_icrc",
    "rx_not_ours",
    "rx_oversize",
    "arp_rx",
    "arp_tx",
    "test_dropped",
    "test_duplicated",
    "test_reordered",
    "rx_forged",
    "eth_tx_frames",
    "eth_rx_frames",
    "eth_rx_dropped",
];

fn counter_values(c: &qhca::PortCounters) -> [u64; 19] {
    [
        c.tx_frames,
        c.tx_bytes,
        c.rx_frames,
        c.rx_bytes,
        c.tx_no_route,
        c.tx_no_neigh,
        c.rx_malformed,
        c.rx_bad_icrc,
        c.rx_not_ours,
        c.rx_oversize,
        c.arp_rx,
        c.arp_tx,
        c.test_dropped,
        c.test_duplicated,
        c.test_reordered,
        c.rx_forged,
        c.eth_tx_frames,
        c.eth_rx_frames,
        c.eth_rx_dropped,
    ]
}

/// Case: the port's counters are the core's hardware counters of port 1: each one in
/// `ports/1/hw_counters/` and in `rdma statistic show link`, read from the device between two
/// QUERY_PORTs of it (counters only grow).
pub(super) fn ib_port_counters(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    require!(
        t,
        wait_for(NODE_TIMEOUT, || ib_device_of(&bdf).is_some()),
        "{bdf} has no RDMA core device"
    );
    let name = ib_device_of(&bdf).unwrap_or_default();
    let dir = Path::new("/sys/class/infiniband")
        .join(&name)
        .join("ports/1/hw_counters");
    let ctx = Context::open(&cfg.dev)?;
    let before = counter_values(&ctx.query_port()?.counters);
    // Past the core's lifespan of its last reading.
    std::thread::sleep(std::time::Duration::from_millis(30));
    let mut sysfs = Vec::new();
    for c in COUNTERS {
        let v = std::fs::read_to_string(dir.join(c))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok());
        check!(t, v.is_some(), "{}/{c}", dir.display());
        sysfs.push(v.unwrap_or(0));
    }
    let after = counter_values(&ctx.query_port()?.counters);
    for (i, c) in COUNTERS.iter().enumerate() {
        check!(
            t,
            before[i] <= sysfs[i] && sysfs[i] <= after[i],
            "{c}: {} in sysfs, {}..{} from the device",
            sysfs[i],
            before[i],
            after[i]
        );
    }
    if let Some(rdma) = find_tool("rdma") {
        let link = format!("{name}/1");
        let args = ["statistic", "show", "link", link.as_str()].map(std::ffi::OsStr::new);
        let out = run_tool(&rdma, &args)?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        check!(
            t,
            out.status.success(),
            "rdma statistic: {}",
            describe(&out)
        );
        for c in COUNTERS {
            check!(
                t,
                text.contains(&format!(" {c} ")),
                "{c} not in rdma statistic: {text}"
            );
        }
    }
    Ok(())
}
