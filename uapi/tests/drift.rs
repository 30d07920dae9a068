// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The committed `src/bindings.rs` must be exactly what `regen.sh` makes of the header today.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// First differing line (1-based) with both versions of it, for the failure message.
fn first_difference(committed: &str, fresh: &str) -> String {
    let mut a = committed.lines();
    let mut b = fresh.lines();
    let mut n = 1;
    loop {
        match (a.next(), b.next()) {
            (Some(x), Some(y)) if x == y => n += 1,
            (None, None) => return "files differ only in line endings or a final newline".into(),
            (x, y) => {
                return format!(
                    "first difference at line {n}:\n  committed: {}\n  regen.sh:  {}",
                    x.unwrap_or("<end of file>"),
                    y.unwrap_or("<end of file>")
                )
            }
        }
    }
}

#[test]
fn committed_bindings_match_regen_sh() {
    let dir = crate_dir();
    let committed_path = dir.join("src/bindings.rs");
    let fresh_path: PathBuf =
        std::env::temp_dir().join(format!("qhca-bindings-drift-{}.rs", std::process::id()));

    let out = Command::new("bash")
        .arg(dir.join("regen.sh"))
        .arg(&fresh_path)
        .output()
        .expect("cannot run bash");
    assert!(
        out.status.success(),
        "uapi/regen.sh failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let committed = std::fs::read_to_string(&committed_path).expect("read src/bindings.rs");
    let fresh = std::fs::read_to_string(&fresh_path).expect("read regen.sh output");
    if committed != fresh {
        let diff = Command::new("diff")
            .arg("-u")
            .arg(&committed_path)
            .arg(&fresh_path)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let _ = std::fs::remove_file(&fresh_path);
        panic!(
            "uapi/src/bindings.rs is out of date with uapi/include/qhca-abi.h.\n\
             Run `uapi/regen.sh` and commit the result (and update uapi/tests/layout.rs).\n\
             {}\n\n{}",
            first_difference(&committed, &fresh),
            diff
        );
    }
    let _ = std::fs::remove_file(&fresh_path);
}
