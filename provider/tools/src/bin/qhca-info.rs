// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `qhca-info`: what `ibv_devinfo -v` shows, for qhca devices.
//!
//! ```text
//! qhca-info [-d NAME | --ib-dev=NAME] [-l | --list] [-v] [-h]
//! ```

use std::fmt::Write as _;
use std::process::ExitCode;

use qhca::{DeviceAttr, DeviceInfo};

const USAGE: &str = "\
Usage: qhca-info [options]
Show the attributes of qhca devices, like ibv_devinfo -v.

Options:
  -d, --ib-dev=NAME   only show device NAME (e.g. qhca0)
  -l, --list          only list the device names
  -v, --verbose       accepted for ibv_devinfo compatibility (output is always verbose)
  -h, --help          show this help
";

#[derive(Debug, Default, PartialEq, Eq)]
struct Args {
    device: Option<String>,
    list: bool,
    help: bool,
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut out = Args::default();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
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
                } else {
                    return Err(format!("unknown argument {a:?}"));
                }
            }
        }
    }
    if out.device.as_deref() == Some("") {
        return Err("empty device name".into());
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

fn render(dev: &DeviceInfo, attr: &DeviceAttr) -> String {
    let mut s = String::new();
    field(&mut s, 0, "hca_id", &dev.name);
    let i = 8;
    field(&mut s, i, "transport", "qhca (emulated)");
    field(&mut s, i, "fw_ver", attr.fw_version_string());
    field(&mut s, i, "node_guid", attr.node_guid_string());
    // The one port's GID (index 0), what ibv_devinfo -v prints as GID[  0].
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
    s
}

fn show(dev: &DeviceInfo) -> qhca::Result<String> {
    let ctx = dev.open()?;
    let attr = ctx.query()?;
    Ok(render(dev, &attr))
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
        match show(dev) {
            Ok(text) => {
                if n > 0 {
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
    }

    #[test]
    fn renders_aligned_fields() {
        let dev = DeviceInfo {
            name: "qhca0".into(),
            index: 0,
            path: "/dev/qhca0".into(),
            pci_addr: Some("0000:00:03.0".into()),
        };
        let attr = DeviceAttr {
            abi_version: 1,
            device_abi_version: 1,
            uar_index: 2,
            num_uars: 16,
            caps: qhca_uapi::CAP_UAR_ISOLATION | (1 << 9),
            node_guid: 0x5254_0012_3456_0001,
            fw_version: (1 << 32) | (2 << 16) | 3,
            vendor_id: 0x1234,
            vendor_part_id: 0x4843,
            hw_ver: 1,
            max_qp: 64,
            max_ah: 512,
            ..Default::default()
        };
        let text = render(&dev, &attr);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "hca_id:                 qhca0");
        for want in [
            "        transport:              qhca (emulated)",
            "        fw_ver:                 1.2.3",
            "        node_guid:              5254:0012:3456:0001",
            "        vendor_id:              0x1234",
            "        vendor_part_id:         0x4843",
            "        hw_ver:                 0x1",
            "        pci_addr:               0000:00:03.0",
            "        abi_version:            1",
            "        num_uars:               16",
            "        uar_index:              2 (this context)",
            "        device_cap_flags:       0x0000000000000201",
            "                                UAR_ISOLATION",
            "                                BIT9",
            "        max_qp:                 64",
            "        max_ah:                 512",
            "        port_gid:               fe80:0000:0000:0000:5254:0012:3456:0001",
        ] {
            assert!(lines.contains(&want), "missing {want:?} in:\n{text}");
        }
        // Every value starts in the same column.
        for l in &lines[1..] {
            assert_eq!(l.as_bytes()[31], b' ', "{l:?}");
            assert_ne!(l.as_bytes()[32], b' ', "{l:?}");
        }
    }
}
