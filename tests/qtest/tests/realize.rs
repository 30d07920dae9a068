// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Bad properties fail `-device qhca,...` at realize: QEMU exits with status 1 (not a crash) and
//! an error message naming the property.

use qhca_qtest::abi::*;
use qhca_qtest::hca::OUT_RAM;
use qhca_qtest::port::{eui64, mac_str};
use qhca_qtest::qtest::run_to_exit;
use qhca_qtest::wire::{decode_attr, ATTR_SIZE};
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
fn loss_rates_are_per_mille() {
    refuses("x-loss-drop=1001", "x-loss-drop");
    refuses("x-loss-dup=4294967295", "x-loss-dup");
    refuses("x-loss-reorder=1001", "x-loss-reorder");
}

#[test]
fn netdev_that_does_not_exist() {
    refuses("netdev=nope", "netdev");
}

/// node-guid 0 (the default) is the MAC's EUI-64; any other value is taken as it is.
#[test]
fn node_guid_zero_is_the_mac_eui64() {
    let mac = [0x52, 0x54, 0x00, 0xab, 0xcd, 0xef];
    for props in [
        format!("mac={}", mac_str(mac)),
        format!("node-guid=0,mac={}", mac_str(mac)),
    ] {
        let mut h = Hca::start(&props);
        h.bring_up(3, 3);
        assert_eq!(h.query_device(OUT_RAM, ATTR_SIZE as u32), QHCA_CMD_OK);
        let a = decode_attr(&h.qt.memread(OUT_RAM, ATTR_SIZE));
        assert_eq!(a.node_guid, 0x5054_00ff_feab_cdef, "{props}");
        assert_eq!(a.node_guid, eui64(mac));
    }
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
