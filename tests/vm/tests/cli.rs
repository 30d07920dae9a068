// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The binary's command line, on the host (where no qhca device exists).

use std::process::{Command, Output};

fn vmtest(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_qhca-vmtest"));
    c.args(args)
        .env_remove("QHCA_EXPECT_NUM_UARS")
        .env_remove("QHCA_KO")
        .env_remove("QHCA_MODULE_NAME")
        .env_remove("QHCA_VERBS");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run qhca-vmtest")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn list_prints_every_case_in_order_without_configuration() {
    let out = vmtest(&["--list"], &[]);
    assert!(out.status.success());
    let names: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(names.first().map(String::as_str), Some("device_node"));
    assert_eq!(names.last().map(String::as_str), Some("reload_module"));
    // The base cases, the verbs cases and the driver's lifetime cases, each once.
    for name in [
        "query_device",
        "verbs_objects",
        "events_routed_by_context",
        "remove_under_traffic",
    ] {
        assert_eq!(
            names.iter().filter(|n| *n == name).count(),
            1,
            "{name}: {names:?}"
        );
    }
    let unique: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
}

#[test]
fn requires_expect_num_uars() {
    let out = vmtest(&["device_node"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("QHCA_EXPECT_NUM_UARS is not set"));
    let out = vmtest(&[], &[("QHCA_EXPECT_NUM_UARS", "zero")]);
    assert_eq!(out.status.code(), Some(2));
    let out = vmtest(&["--bogus"], &[("QHCA_EXPECT_NUM_UARS", "4")]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_failing_case_is_reported_with_closing_lines_and_exit_1() {
    if std::path::Path::new("/sys/bus/pci/drivers/qhca").exists() {
        return; // a real device: this host test is about the failure path only
    }
    let out = vmtest(
        &["device_node", "query_device"],
        &[("QHCA_EXPECT_NUM_UARS", "4")],
    );
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("test device_node ... FAILED ("), "{stdout}");
    assert!(
        stdout.contains("test query_device ... FAILED ("),
        "{stdout}"
    );
    // Each case first looks for the device's uverbs node, through the driver's PCI devices.
    assert!(
        stdout.contains("cannot read /sys/bus/pci/drivers/qhca"),
        "{stdout}"
    );
    let tail: Vec<&str> = stdout.lines().rev().take(2).collect();
    assert_eq!(
        tail,
        ["0 passed, 2 failed", "vm assertions: 2 checked, 2 failed"],
        "{stdout}"
    );
}

#[test]
fn no_matching_case_is_not_a_pass() {
    let out = vmtest(&["no_such_case"], &[("QHCA_EXPECT_NUM_UARS", "4")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).ends_with("0 passed, 0 failed\n"));
    assert!(text(&out.stderr).contains("no case matches"));
}

#[test]
fn hold_helper_reports_errno_of_a_failed_open_or_query() {
    let out = vmtest(&["__hold", "/dev/infiniband/uverbs-nonexistent"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "errno 2 No such file or directory\n");
    // /dev/null is no uverbs node: refused before it is opened.
    let out = vmtest(&["__hold", "/dev/null"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).starts_with("errno 19 "),
        "{}",
        text(&out.stdout)
    );
    let out = vmtest(&["__hold"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn verbs_cases_are_listed_whatever_the_environment_says() {
    // The old QHCA_VERBS switch skipped the verbs cases for any value but 1; nothing may skip
    // them now, so every spelling lists the same cases and says nothing about skipping.
    let plain = vmtest(&["--list"], &[]);
    assert!(plain.status.success());
    assert!(!text(&plain.stderr).contains("skipped"));
    let names: Vec<String> = text(&plain.stdout).lines().map(str::to_owned).collect();
    let verbs = names.iter().filter(|n| n.starts_with("verbs_")).count();
    assert!(verbs >= 23, "{verbs} verbs cases listed");
    assert_eq!(names.last().map(String::as_str), Some("reload_module"));
    for v in ["0", "1", "yes", ""] {
        let out = vmtest(&["--list"], &[("QHCA_VERBS", v)]);
        assert_eq!(text(&out.stdout), text(&plain.stdout), "QHCA_VERBS={v:?}");
        assert!(!text(&out.stderr).contains("skipped"));
    }
}

#[test]
fn verbs_helpers_fail_cleanly_without_a_device() {
    let out = vmtest(
        &["__verbs_nosys", "/dev/infiniband/uverbs-nonexistent", "10"],
        &[],
    );
    assert_eq!(out.status.code(), Some(10), "setup failure code");
    let out = vmtest(&["__verbs_peer", "/dev/infiniband/uverbs-nonexistent"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("No such file"),
        "{}",
        text(&out.stderr)
    );
    let out = vmtest(&["__verbs_traffic"], &[]);
    assert_eq!(out.status.code(), Some(2));
}
