// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `qhca-info`: what `ibv_devinfo -v` shows, for qhca devices, and their port's GID table as
//! `ip addr` shows addresses. The port's addresses are its netdev's: `addr add` and `addr del`
//! answer with the `ip addr` command that does it (`ip addr add ... dev NETDEV`).
//!
//! ```text
//! qhca-info [-d NAME | -d PATH | --ib-dev=NAME] [-l | --list] [-v] [-h]
//! qhca-info [NAME] addr [show]
//! qhca-info [NAME] addr add A.B.C.D[/N]
//! qhca-info [NAME] addr del A.B.C.D
//! ```

use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::process::ExitCode;

use qhca::{Context, DeviceAttr, DeviceInfo, GidEntry, PortAttr};

const USAGE: &str = "\
Usage: qhca-info [options]
       qhca-info [NAME] addr [show]
       qhca-info [NAME] addr add A.B.C.D[/N]
       qhca-info [NAME] addr del A.B.C.D
Show the attributes of qhca devices, like ibv_devinfo -v; list the addresses (GIDs) of a
device's port, like ip addr. A port's addresses are its netdev's: ip addr add A.B.C.D/N dev
NETDEV; addr add and addr del print that command and fail.

Options:
  -d, --ib-dev=NAME   only show device NAME: the RDMA core's name (rocep0s10), qhcaN (the
                      N-th qhca device), or a node's path; NAME may also come first
  -l, --list          only list the device names
  -v, --verbose       accepted for ibv_devinfo compatibility (output is always verbose)
  -h, --help          show this help
";

/// What to do.
#[derive(Debug, Default, PartialEq, Eq)]
enum Cmd {
    /// The attributes (`ibv_devinfo -v`).
    #[default]
    Show,
    /// `addr [show]`: the port's GIDs.
    AddrList,
    /// `addr add A.B.C.D[/N]` (no `/N`: 32, as `ip addr add`).
    AddrAdd(Ipv4Addr, u8),
    /// `addr del A.B.C.D`.
    AddrDel(Ipv4Addr),
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Args {
    device: Option<String>,
    list: bool,
    help: bool,
    cmd: Cmd,
}

/// `A.B.C.D` or `A.B.C.D/N`.
fn parse_prefix(v: &str) -> Result<(Ipv4Addr, u8), String> {
    let (addr, len) = match v.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (v, None),
    };
    let addr: Ipv4Addr = addr
        .parse()
        .map_err(|_| format!("{v:?} is not an IPv4 address (A.B.C.D[/N])"))?;
    let len = match len {
        None => 32,
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= 32)
            .ok_or_else(|| format!("{v:?}: the prefix length is 0..=32"))?,
    };
    Ok((addr, len))
}

/// The `addr ...` words after `addr`.
fn parse_addr(words: &[String]) -> Result<Cmd, String> {
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w[..] {
        [] | ["show" | "list"] => Ok(Cmd::AddrList),
        ["add", a] => parse_prefix(a).map(|(a, n)| Cmd::AddrAdd(a, n)),
        ["del" | "delete", a] => {
            let a = a.split_once('/').map_or(a, |(a, _)| a);
            a.parse()
                .map(Cmd::AddrDel)
                .map_err(|_| format!("{a:?} is not an IPv4 address (A.B.C.D)"))
        }
        ["add" | "del" | "delete"] => Err(format!("addr {} needs an address", w[0])),
        _ => Err(format!("unknown addr command {:?}", w.join(" "))),
    }
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut out = Args::default();
    let mut words = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        if !words.is_empty() {
            // After the first word everything is the command's.
            words.push(a);
            continue;
        }
        match a.as_str() {
            "-h" | "--help" => out.help = true,
            "-l" | "--list" => out.list = true,
            "-v" | "--verbose" => {}
            "-d" | "--ib-dev" => {
                out.device = Some(
                    it.next()
                        .ok_or_else(|| format!("option {a} needs a device name"))?,
                );
            }
            _ => {
                if let Some(v) = a.strip_prefix("--ib-dev=") {
                    out.device = Some(v.to_owned());
                } else if let Some(v) = a.strip_prefix("-d").filter(|v| !v.is_empty()) {
                    out.device = Some(v.to_owned());
                } else if a.starts_with('-') {
                    return Err(format!("unknown argument {a:?}"));
                } else {
                    words.push(a);
                }
            }
        }
    }
    if out.device.as_deref() == Some("") {
        return Err("empty device name".into());
    }
    let mut words = &words[..];
    if let Some(w) = words.first().filter(|w| {
        // `qhcaN`, a node's path, or any name followed by a command.
        qhca::parse_device_name(w).is_some()
            || w.starts_with('/')
            || words.get(1).is_some_and(|c| c == "addr" || c == "address")
    }) {
        if out.device.as_ref().is_some_and(|d| d != w) {
            return Err(format!(
                "two devices named: {} and {w}",
                out.device.unwrap()
            ));
        }
        out.device = Some(w.clone());
        words = &words[1..];
    }
    match words.split_first() {
        None => {}
        Some((w, rest)) if w == "addr" || w == "address" => out.cmd = parse_addr(rest)?,
        Some((w, _)) => return Err(format!("unknown argument {w:?}")),
    }
    if out.list && out.cmd != Cmd::Show {
        return Err("-l and addr do not go together".into());
    }
    Ok(out)
}

/// One `label: value` line, values aligned in one column as `ibv_devinfo -v` does.
fn field(out: &mut String, indent: usize, label: &str, value: impl std::fmt::Display) {
    let label = format!("{label}:");
    let _ = writeln!(out, "{:indent$}{label:<24}{value}", "", indent = indent);
}

/// Continuation line under the value column (for capability names).
fn continuation(out: &mut String, indent: usize, value: &str) {
    let _ = writeln!(out, "{:width$}{value}", "", width = indent + 24);
}

/// One GID as `ip addr` shows an address: `gid 1 ::ffff:10.7.0.3 (10.7.0.3/24) RoCEv2`; the
/// link-local GID with its IPv6 form, `gid 0 fe80:0000:...:0001 (fe80::...:1/64) RoCEv2`.
fn gid_line(e: &GidEntry) -> String {
    let addr = match e.ipv4() {
        Some(a) => a.to_string(),
        None => Ipv6Addr::from(e.gid.raw).to_string(),
    };
    format!("gid {} {} ({addr}/{}) RoCEv2", e.index, e.gid, e.prefix_len)
}

/// The port's lines of the attribute listing: state, MAC, wire, GIDs and counters, or why
/// they are not there.
fn render_port(s: &mut String, i: usize, port: Result<&PortAttr, &str>) {
    field(s, i, "port", qhca::PORT_NUM);
    let p = match port {
        Ok(p) => p,
        Err(why) => {
            field(s, i, "port_state", format_args!("not reported ({why})"));
            return;
        }
    };
    field(s, i, "port_state", p.state);
    field(s, i, "port_mac", p.mac_string());
    field(s, i, "port_wire", p.wire);
    field(s, i, "port_max_mtu", p.max_mtu);
    field(s, i, "port_gid_tbl_len", p.gid_tbl_len);
    for (n, e) in p.gids.iter().enumerate() {
        if n == 0 {
            field(s, i, "port_gids", gid_line(e));
        } else {
            continuation(s, i, &gid_line(e));
        }
    }
    for (n, (name, v)) in p.counters.named().into_iter().enumerate() {
        let line = format!("{name} {v}");
        if n == 0 {
            field(s, i, "port_counters", line);
        } else {
            continuation(s, i, &line);
        }
    }
}

fn render(dev: &DeviceInfo, attr: &DeviceAttr, port: Result<&PortAttr, &str>) -> String {
    let mut s = String::new();
    field(&mut s, 0, "hca_id", &dev.name);
    let i = 8;
    field(&mut s, i, "transport", "qhca (emulated)");
    field(&mut s, i, "fw_ver", attr.fw_version_string());
    field(&mut s, i, "node_guid", attr.node_guid_string());
    // The port's GID 0 (link-local), what ibv_devinfo -v prints as GID[  0].
    field(&mut s, i, "port_gid", attr.port_gid());
    field(
        &mut s,
        i,
        "vendor_id",
        format_args!("0x{:04x}", attr.vendor_id),
    );
    field(
        &mut s,
        i,
        "vendor_part_id",
        format_args!("0x{:04x}", attr.vendor_part_id),
    );
    field(&mut s, i, "hw_ver", format_args!("0x{:x}", attr.hw_ver));
    field(
        &mut s,
        i,
        "pci_addr",
        dev.pci_addr.as_deref().unwrap_or("(unknown)"),
    );
    field(&mut s, i, "device", dev.path.display());
    field(&mut s, i, "abi_version", attr.abi_version);
    field(&mut s, i, "device_abi_version", attr.device_abi_version);
    field(&mut s, i, "num_uars", attr.num_uars);
    field(
        &mut s,
        i,
        "uar_index",
        format_args!("{} (this context)", attr.uar_index),
    );
    field(
        &mut s,
        i,
        "device_cap_flags",
        format_args!("0x{:016x}", attr.caps),
    );
    for name in attr.cap_names() {
        continuation(&mut s, i, &name);
    }
    field(
        &mut s,
        i,
        "max_mr_size",
        format_args!("0x{:x}", attr.max_mr_size),
    );
    field(
        &mut s,
        i,
        "page_size_cap",
        format_args!("0x{:x}", attr.page_size_cap),
    );
    field(&mut s, i, "max_qp", attr.max_qp);
    field(&mut s, i, "max_qp_wr", attr.max_qp_wr);
    field(&mut s, i, "max_sge", attr.max_sge);
    field(&mut s, i, "max_inline", attr.max_inline);
    field(&mut s, i, "max_cq", attr.max_cq);
    field(&mut s, i, "max_cqe", attr.max_cqe);
    field(&mut s, i, "max_mr", attr.max_mr);
    field(&mut s, i, "max_mw", attr.max_mw);
    field(&mut s, i, "max_ah", attr.max_ah);
    field(&mut s, i, "max_srq", attr.max_srq);
    field(&mut s, i, "max_srq_wr", attr.max_srq_wr);
    field(&mut s, i, "max_pd", attr.max_pd);
    field(&mut s, i, "max_qp_rd_atom", attr.max_qp_rd_atom);
    field(&mut s, i, "max_qp_init_rd_atom", attr.max_qp_init_rd_atom);
    // As ibv_devinfo -v prints `odp_caps`.
    let odp = &attr.odp_caps;
    field(
        &mut s,
        i,
        "odp_caps",
        format_args!(
            "general 0x{:x}{}{}",
            odp.general_caps,
            if odp.supported() { " ODP_SUPPORT" } else { "" },
            if odp.implicit() {
                " ODP_SUPPORT_IMPLICIT"
            } else {
                ""
            }
        ),
    );
    field(
        &mut s,
        i,
        "rc_odp_caps",
        format_args!("0x{:x} {}", odp.rc_odp_caps, odp.rc_names().join(" ")),
    );
    field(
        &mut s,
        i,
        "ud_odp_caps",
        format_args!("0x{:x} {}", odp.ud_odp_caps, odp.ud_names().join(" ")),
    );
    render_port(&mut s, i, port);
    s
}

/// The port's attributes, or why there are none.
fn port_of(ctx: &Context, attr: &DeviceAttr) -> Result<PortAttr, String> {
    if !attr.has_port() {
        return Err("the device has no PORT capability".into());
    }
    ctx.query_port().map_err(|e| e.to_string())
}

fn show(dev: &DeviceInfo) -> qhca::Result<String> {
    let ctx = dev.open()?;
    let attr = ctx.query()?;
    let port = port_of(&ctx, &attr);
    Ok(render(dev, &attr, port.as_ref().map_err(String::as_str)))
}

/// `addr [show]` for one device, as `ip addr` lists an interface: a header line, then one line
/// per GID.
fn render_addrs(dev: &DeviceInfo, p: &PortAttr) -> String {
    let mut s = format!(
        "{}: port {} {} mac {} wire {}\n",
        dev.name,
        qhca::PORT_NUM,
        p.state,
        p.mac_string(),
        p.wire
    );
    for e in &p.gids {
        let _ = writeln!(s, "    {}", gid_line(e));
    }
    s
}

/// The device whose node is `path`, as [`qhca::devices`] lists it; named by its file name if it
/// does not.
fn device_at(path: &str) -> DeviceInfo {
    let listed = |l: qhca::Result<Vec<DeviceInfo>>| {
        l.ok()?
            .into_iter()
            .find(|d| d.path == std::path::Path::new(path))
    };
    listed(qhca::devices()).unwrap_or_else(|| DeviceInfo {
        name: path.rsplit('/').next().unwrap_or(path).to_owned(),
        index: 0,
        path: path.into(),
        pci_addr: None,
    })
}

/// `addr add` and `addr del` on one device: the port's addresses are its netdev's, so the error
/// names the `ip addr` command to run instead.
fn change_addr(dev: &DeviceInfo, cmd: &Cmd) -> qhca::Result<String> {
    let ndev = dev.netdev().unwrap_or_else(|| "NETDEV".into());
    let what = match *cmd {
        Cmd::AddrAdd(a, n) => format!("ip addr add {a}/{n} dev {ndev}"),
        Cmd::AddrDel(a) => format!("ip addr del {a} dev {ndev}"),
        Cmd::Show | Cmd::AddrList => unreachable!("not a change"),
    };
    Err(qhca::Error::Invalid {
        what: format!("the port's addresses are its netdev's: {what}"),
    })
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("qhca-info: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if args.help {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }

    let devs = match &args.device {
        Some(path) if path.starts_with('/') => Ok(vec![device_at(path)]),
        Some(name) => DeviceInfo::find(name).map(|d| vec![d]),
        None => qhca::devices(),
    };
    let devs = match devs {
        Ok(d) => d,
        Err(e) => {
            eprintln!("qhca-info: {e}");
            return ExitCode::FAILURE;
        }
    };

    if matches!(args.cmd, Cmd::AddrAdd(..) | Cmd::AddrDel(_)) {
        // One device: the one named, or the only one there is.
        let dev = match &devs[..] {
            [d] => d,
            _ => {
                eprintln!(
                    "qhca-info: {} devices: name one (qhca-info NAME addr ...)",
                    devs.len()
                );
                return ExitCode::from(2);
            }
        };
        return match change_addr(dev, &args.cmd) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("qhca-info: {}: {e}", dev.name);
                ExitCode::FAILURE
            }
        };
    }

    if args.list {
        println!(
            "{} HCA{} found:",
            devs.len(),
            if devs.len() == 1 { "" } else { "s" }
        );
        for d in &devs {
            println!("\t{}", d.name);
        }
        return ExitCode::SUCCESS;
    }

    let mut failed = false;
    for (n, dev) in devs.iter().enumerate() {
        let text = if args.cmd == Cmd::AddrList {
            dev.open()
                .and_then(|ctx| ctx.query_port())
                .map(|p| render_addrs(dev, &p))
        } else {
            show(dev)
        };
        match text {
            Ok(text) => {
                if n > 0 && args.cmd == Cmd::Show {
                    println!();
                }
                print!("{text}");
            }
            Err(e) => {
                eprintln!("qhca-info: {}: {e}", dev.name);
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<Args, String> {
        parse_args(v.iter().map(|s| s.to_string()))
    }

    #[test]
    fn parses_ibv_devinfo_style_arguments() {
        assert_eq!(args(&[]).unwrap(), Args::default());
        for v in [
            &["-d", "qhca1"][..],
            &["-dqhca1"],
            &["--ib-dev", "qhca1"],
            &["--ib-dev=qhca1"],
        ] {
            assert_eq!(args(v).unwrap().device.as_deref(), Some("qhca1"), "{v:?}");
        }
        assert!(args(&["-l"]).unwrap().list);
        assert!(args(&["--help"]).unwrap().help);
        assert_eq!(args(&["-v"]).unwrap(), Args::default());
        assert!(args(&["-d"]).unwrap_err().contains("needs a device name"));
        assert!(args(&["--ib-dev="]).is_err());
        assert!(args(&["-x"]).unwrap_err().contains("unknown argument"));
        assert!(args(&["qhca0", "bogus"])
            .unwrap_err()
            .contains("unknown argument"));
    }

    #[test]
    fn parses_addr_commands() {
        let v4 = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(args(&["addr"]).unwrap().cmd, Cmd::AddrList);
        assert_eq!(args(&["addr", "show"]).unwrap().cmd, Cmd::AddrList);
        let a = args(&["qhca1", "addr", "add", "10.7.0.3/24"]).unwrap();
        assert_eq!(a.device.as_deref(), Some("qhca1"));
        assert_eq!(a.cmd, Cmd::AddrAdd(v4("10.7.0.3"), 24));
        let a = args(&["-d", "qhca2", "addr", "add", "10.7.0.3"]).unwrap();
        assert_eq!(a.device.as_deref(), Some("qhca2"));
        assert_eq!(a.cmd, Cmd::AddrAdd(v4("10.7.0.3"), 32));
        assert_eq!(
            args(&["addr", "del", "10.7.0.3"]).unwrap().cmd,
            Cmd::AddrDel(v4("10.7.0.3"))
        );
        // The RDMA core's name, or a node, first.
        let a = args(&["rocep0s10", "addr"]).unwrap();
        assert_eq!(a.device.as_deref(), Some("rocep0s10"));
        assert_eq!(a.cmd, Cmd::AddrList);
        let a = args(&["/dev/infiniband/uverbs0", "addr", "add", "10.7.0.3/24"]).unwrap();
        assert_eq!(a.device.as_deref(), Some("/dev/infiniband/uverbs0"));
        assert!(args(&["rocep0s10"]).is_err());
        // As `ip addr del` takes it: the prefix is ignored.
        assert_eq!(
            args(&["qhca0", "addr", "del", "10.7.0.3/24"]).unwrap().cmd,
            Cmd::AddrDel(v4("10.7.0.3"))
        );
        for (bad, why) in [
            (&["addr", "add"][..], "needs an address"),
            (&["addr", "add", "10.7.0/24"], "not an IPv4 address"),
            (&["addr", "add", "10.7.0.3/33"], "prefix length"),
            (&["addr", "add", "10.7.0.3/x"], "prefix length"),
            (&["addr", "del", "host"], "not an IPv4 address"),
            (&["addr", "flush"], "unknown addr command"),
            (
                &["addr", "add", "10.0.0.1", "extra"],
                "unknown addr command",
            ),
            (&["-d", "qhca0", "qhca1", "addr"], "two devices"),
            (&["-l", "addr"], "do not go together"),
        ] {
            let e = args(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
    }

    fn sample_port() -> PortAttr {
        PortAttr {
            mac: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
            state: qhca::PortState::Active,
            wire: qhca::Wire::RoceV2,
            max_mtu: 4096,
            gid_tbl_len: 16,
            counters: qhca::PortCounters {
                tx_frames: 3,
                test_reordered: 9,
                rx_forged: 4,
                ..Default::default()
            },
            gids: vec![
                GidEntry {
                    index: 0,
                    gid: qhca::Gid::from_guid(0x5054_00ff_fe12_3456),
                    prefix_len: 64,
                },
                GidEntry {
                    index: 1,
                    gid: Ipv4Addr::new(10, 7, 0, 3).into(),
                    prefix_len: 24,
                },
            ],
        }
    }

    #[test]
    fn renders_gids_as_ip_addr_does() {
        let p = sample_port();
        assert_eq!(
            gid_line(&p.gids[1]),
            "gid 1 ::ffff:10.7.0.3 (10.7.0.3/24) RoCEv2"
        );
        assert_eq!(
            gid_line(&p.gids[0]),
            "gid 0 fe80:0000:0000:0000:5054:00ff:fe12:3456 (fe80::5054:ff:fe12:3456/64) RoCEv2"
        );
        let dev = DeviceInfo {
            name: "qhca0".into(),
            index: 0,
            path: "/dev/infiniband/uverbs0".into(),
            pci_addr: None,
        };
        assert_eq!(
            render_addrs(&dev, &p),
            "qhca0: port 1 PORT_ACTIVE mac 52:54:00:12:34:56 wire RoCEv2\n    gid 0 \
             fe80:0000:0000:0000:5054:00ff:fe12:3456 (fe80::5054:ff:fe12:3456/64) RoCEv2\n    \
             gid 1 ::ffff:10.7.0.3 (10.7.0.3/24) RoCEv2\n"
        );
    }

    #[test]
    fn renders_aligned_fields() {
        let dev = DeviceInfo {
            name: "qhca0".into(),
            index: 0,
            path: "/dev/infiniband/uverbs0".into(),
            pci_addr: Some("0000:00:03.0".into()),
        };
        let attr = DeviceAttr {
            abi_version: 1,
            device_abi_version: 1,
            uar_index: 2,
            num_uars: 16,
            caps: qhca_uapi::CAP_UAR_ISOLATION | (1 << 11),
            node_guid: 0x5254_0012_3456_0001,
            fw_version: (1 << 32) | (2 << 16) | 3,
            vendor_id: 0x1af4,
            vendor_part_id: 0x10f0,
            hw_ver: 1,
            max_qp: 64,
            max_ah: 512,
            max_srq: 1024,
            max_srq_wr: 32768,
            ..Default::default()
        };
        let port = sample_port();
        let text = render(&dev, &attr, Ok(&port));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "hca_id:                 qhca0");
        for want in [
            "        transport:              qhca (emulated)",
            "        fw_ver:                 1.2.3",
            "        node_guid:              5254:0012:3456:0001",
            "        vendor_id:              0x1af4",
            "        vendor_part_id:         0x10f0",
            "        hw_ver:                 0x1",
            "        pci_addr:               0000:00:03.0",
            "        abi_version:            1",
            "        num_uars:               16",
            "        uar_index:              2 (this context)",
            "        device_cap_flags:       0x0000000000000801",
            "                                UAR_ISOLATION",
            "                                BIT11",
            "        max_qp:                 64",
            "        max_ah:                 512",
            "        max_srq:                1024",
            "        max_srq_wr:             32768",
            "        port_gid:               fe80:0000:0000:0000:5254:0012:3456:0001",
            "        port:                   1",
            "        port_state:             PORT_ACTIVE",
            "        port_mac:               52:54:00:12:34:56",
            "        port_wire:              RoCEv2",
            "        port_max_mtu:           4096",
            "        port_gid_tbl_len:       16",
            "        port_gids:              gid 0 fe80:0000:0000:0000:5054:00ff:fe12:3456 \
             (fe80::5054:ff:fe12:3456/64) RoCEv2",
            "                                gid 1 ::ffff:10.7.0.3 (10.7.0.3/24) RoCEv2",
            "        port_counters:          tx_frames 3",
            "                                tx_bytes 0",
            "                                test_reordered 9",
            "                                rx_forged 4",
        ] {
            assert!(lines.contains(&want), "missing {want:?} in:\n{text}");
        }
        // Every value starts in the same column.
        for l in &lines[1..] {
            assert_eq!(l.as_bytes()[31], b' ', "{l:?}");
            assert_ne!(l.as_bytes()[32], b' ', "{l:?}");
        }
        // The counters come last, all of them.
        assert_eq!(
            lines.last(),
            Some(&"                                eth_rx_dropped 0")
        );
        assert_eq!(
            text.matches("                                ").count(),
            2 + 1 + 18
        );
        // A port that cannot be asked says why, in the same place.
        let text = render(&dev, &attr, Err("no PORT capability"));
        assert!(
            text.ends_with(
                "        port:                   1\n        port_state:             not reported \
                 (no PORT capability)\n"
            ),
            "{text}"
        );
    }
}
