// SPDX-License-Identifier: GPL-2.0-only OR MIT
//! The provider calls libibverbs's private provider ABI (IBVERBS_PRIVATE_34): link against the
//! system's libibverbs so that those references carry the symbol version.
fn main() {
    println!("cargo:rustc-link-lib=dylib=ibverbs");
}
