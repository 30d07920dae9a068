// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The header seen by a C compiler, as QEMU and user space see it: it must compile on its own,
//! with <linux/types.h> and with <stdint.h>, have no implicit padding (-Wpadded), and agree with
//! the sizes and offsets that layout.rs checks on the Rust side.

use std::path::Path;
use std::process::Command;

fn compile(extra: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args([
            "-fsyntax-only",
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wpadded",
            "-Werror",
        ])
        .args(extra)
        .arg("-I")
        .arg(dir.join("include"))
        .arg(dir.join("tests/c/abi_check.c"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} rejected uapi/tests/c/abi_check.c with {extra:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn header_compiles_with_linux_types() {
    compile(&[]);
}

#[test]
fn header_compiles_without_linux_types() {
    compile(&["-DQHCA_ABI_NO_LINUX_TYPES"]);
}
