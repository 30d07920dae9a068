// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! qhca-info's command line on the host, where no qhca device exists.

use std::process::Command;

fn has_devices() -> bool {
    std::fs::read_dir("/dev")
        .map(|d| {
            d.flatten()
                .any(|e| qhca::parse_device_name(&e.file_name().to_string_lossy()).is_some())
        })
        .unwrap_or(false)
}

#[test]
fn fails_clearly_without_devices() {
    if has_devices() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_qhca-info"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no qhca devices found"), "{err}");

    let out = Command::new(env!("CARGO_BIN_EXE_qhca-info"))
        .args(["-d", "qhca3"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("device qhca3 not found"));
}

#[test]
fn usage() {
    let out = Command::new(env!("CARGO_BIN_EXE_qhca-info"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--ib-dev=NAME"));
    let out = Command::new(env!("CARGO_BIN_EXE_qhca-info"))
        .arg("--bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
