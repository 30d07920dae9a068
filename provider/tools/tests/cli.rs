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

/// `addr`: a bad address is a usage error (2) before any device is looked for; without
/// devices, listing or changing them fails (1) and says why.
#[test]
fn addr_arguments_and_no_devices() {
    for args in [
        &["addr", "add", "10.0.0.1/33"][..],
        &["addr", "add"],
        &["qhca0", "addr", "del", "nohost"],
        &["addr", "flush"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_qhca-info"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    if has_devices() {
        return;
    }
    for args in [&["addr"][..], &["addr", "add", "10.0.0.1/24"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_qhca-info"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no qhca devices found"), "{err}");
    }
}

#[test]
fn perf_and_pingpong_usage_and_bad_arguments() {
    for (exe, word) in [
        (env!("CARGO_BIN_EXE_qhca-perf"), "write_lat"),
        (env!("CARGO_BIN_EXE_qhca-pingpong"), "--chk"),
    ] {
        let out = Command::new(exe).arg("--help").output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("--loopback") && text.contains(word), "{text}");
        assert!(text.contains("--gid-index=N"), "{text}");
        let out = Command::new(exe).args(["-s", "0"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let out = Command::new(exe).arg("--bogus").output().unwrap();
        assert_eq!(out.status.code(), Some(2));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_qhca-perf"))
        .arg("nosuchmode")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("need a MODE"));
    // One thread drives both sides only in-process, and only write_lat does it.
    for args in [
        &["write_lat", "--one-thread"][..],
        &["write_bw", "--loopback", "--one-thread"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_qhca-perf"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--one-thread goes with --loopback and write_lat"),
            "{err}"
        );
    }
}

#[test]
fn perf_loopback_fails_clearly_without_devices() {
    if has_devices() {
        return;
    }
    for args in [
        &["write_lat", "--loopback", "-n", "3"][..],
        &["--loopback", "-n", "3"][..],
    ] {
        let exe = if args[0] == "write_lat" {
            env!("CARGO_BIN_EXE_qhca-perf")
        } else {
            env!("CARGO_BIN_EXE_qhca-pingpong")
        };
        let out = Command::new(exe).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no qhca devices found"), "{err}");
    }
}
