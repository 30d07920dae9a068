// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Every `ibv_*` symbol that Debian's perftest and ibverbs-utils import resolves in the layer:
//! `libqhca_verbs.so` defines it (so a preloaded layer sees every verb those programs make), and
//! the layer defines no symbol of libibverbs's private versions but the one ibv_devinfo uses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The programs whose imports the layer must serve (perftest, ibverbs-utils).
const PROGRAMS: &[&str] = &[
    "ib_write_lat",
    "ib_write_bw",
    "ib_read_lat",
    "ib_read_bw",
    "ib_send_lat",
    "ib_send_bw",
    "ib_atomic_lat",
    "ib_atomic_bw",
    "ibv_rc_pingpong",
    "ibv_ud_pingpong",
    "ibv_devinfo",
    "ibv_devices",
    "ibv_asyncwatch",
];

/// `nm -D` of `file`, undefined or defined symbols, without their versions.
fn dynsyms(file: &Path, defined: bool) -> BTreeSet<String> {
    let flag = if defined {
        "--defined-only"
    } else {
        "--undefined-only"
    };
    let out = Command::new("nm")
        .args(["-D", flag])
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("nm (binutils) on {}: {e}", file.display()));
    assert!(out.status.success(), "nm -D {}: {:?}", file.display(), out);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .map(|s| s.split('@').next().unwrap_or(s).to_owned())
        .collect()
}

/// The layer cargo built for this test: target/<profile>/deps/libqhca_verbs.so (a test build
/// does not copy it up to target/<profile>/).
fn layer() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let so = deps.join("libqhca_verbs.so");
    assert!(so.exists(), "{} not built", so.display());
    so
}

#[test]
fn every_imported_ibv_symbol_resolves_in_the_layer() {
    let ours = dynsyms(&layer(), true);
    let mut checked = 0;
    for prog in PROGRAMS {
        let path = Path::new("/usr/bin").join(prog);
        assert!(
            path.exists(),
            "{} missing: scripts/setup-host.sh installs perftest and ibverbs-utils",
            path.display()
        );
        let needed: Vec<String> = dynsyms(&path, false)
            .into_iter()
            .filter(|s| s.starts_with("ibv_") || s.starts_with("_ibv_"))
            .collect();
        assert!(!needed.is_empty(), "{prog} imports no ibv_* symbol?");
        let missing: Vec<&String> = needed.iter().filter(|s| !ours.contains(*s)).collect();
        assert!(
            missing.is_empty(),
            "{prog} imports {missing:?}, which the layer does not define"
        );
        checked += needed.len();
    }
    assert!(checked > 100, "only {checked} imports checked");
}

#[test]
fn the_layer_exports_only_verbs() {
    let ours = dynsyms(&layer(), true);
    let stray: Vec<&String> = ours
        .iter()
        .filter(|s| {
            !(s.starts_with("ibv_")
                || s.starts_with("_ibv_")
                || s.as_str() == "mbps_to_ibv_rate"
                || s.as_str() == "mult_to_ibv_rate")
        })
        .collect();
    assert!(stray.is_empty(), "the layer exports {stray:?}");
}
