// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Bad properties fail `-device qhca,...` at realize: QEMU exits with status 1 (not a crash) and
//! an error message naming the property.

use qhca_qtest::qtest::run_to_exit;
use qhca_qtest::Hca;

/// Starts QEMU with `-device qhca,{props}` and checks that it refuses, with a message (after
/// QEMU's own `-device ...: ` location prefix, which already names the option) that mentions
/// `needle`.
fn refuses(props: &str, needle: &str) {
    let opt = format!("qhca,{props}");
    let r = run_to_exit(&["-device", &opt]).unwrap_or_else(|e| panic!("-device {opt}: {e}"));
    assert_eq!(
        r.status.code(),
        Some(1),
        "-device {opt}: exit status {} (a signal is a crash); stderr:\n{}",
        r.status,
        r.stderr
    );
    let prefix = format!("{opt}: ");
    let msg = r
        .stderr
        .lines()
        .find_map(|l| l.split_once(&prefix).map(|(_, m)| m.to_string()))
        .unwrap_or_else(|| {
            panic!(
                "-device {opt}: no error message for the option; stderr:\n{}",
                r.stderr
            )
        });
    assert!(
        msg.contains(needle),
        "-device {opt}: message `{msg}` does not name `{needle}`"
    );
    assert!(
        !r.stderr.contains("Assertion") && !r.stderr.contains("core dumped"),
        "{}",
        r.stderr
    );
}

#[test]
fn num_uars_zero() {
    refuses("num-uars=0", "num-uars");
}

#[test]
fn num_uars_too_big() {
    refuses("num-uars=5000", "num-uars");
    refuses("num-uars=1025", "num-uars");
}

#[test]
fn max_queue_log_zero() {
    refuses("max-queue-log=0", "max-queue-log");
}

#[test]
fn max_queue_log_too_big() {
    refuses("max-queue-log=13", "max-queue-log");
}

#[test]
fn max_mr_out_of_range() {
    refuses("max-mr=0", "max-mr");
    refuses("max-mr=4097", "max-mr");
}

#[test]
fn node_guid_zero() {
    refuses("node-guid=0", "node-guid");
}

#[test]
fn limits_are_accepted() {
    // The extremes of both ranges realize and work.
    let mut h = Hca::start("num-uars=1,max-queue-log=1");
    h.bring_up(1, 1);
    h.nop();
    let mut h = Hca::start("num-uars=1024,max-queue-log=12,max-mr=4096");
    h.bring_up(12, 12);
    h.nop();
    let mut h = Hca::start("max-mr=1");
    h.bring_up(1, 1);
    h.nop();
}
