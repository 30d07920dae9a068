// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! qhca's VM test suite: built on the host, run as root inside the guest with the real driver.
//!
//! ```text
//! qhca-vmtest [--wire] [--list] [FILTER...]
//! ```
//!
//! Runs every case whose name contains one of the FILTERs (all cases without one), prints
//! `test <name> ... ok|FAILED` per case, then
//!
//! ```text
//! vm assertions: <A> checked, <F> failed
//! <N> passed, <M> failed
//! ```
//!
//! and exits 0 only if nothing failed (1 otherwise, 2 on bad usage or configuration).
//!
//! `--wire` runs the RoCEv2 wire section instead (see [`wire`]), which needs the VM that
//! `scripts/vm.sh --nic --qhca-port --qhca2 .. --qhca3 ..` boots; the suite's own cases never
//! depend on it.
//!
//! Environment: `QHCA_EXPECT_NUM_UARS` (required: the `num-uars` QEMU was started with),
//! `QHCA_KO` (the built qhca.ko, for the reload case), `QHCA_MODULE_NAME` (default `qhca`),
//! The verbs cases always run (the old `QHCA_VERBS` switch is gone: it could skip them by accident).
//!
//! `qhca-vmtest __hold DEVICE [--map]` is the helper the cases start to hold contexts in other
//! processes (see `system::Holder`); `__verbs_peer`, `__verbs_traffic` and `__verbs_nosys` are
//! the verbs cases' helpers (see `verbs::helper_main`).

mod cases;
mod disassociate;
mod frameworks;
mod harness;
mod ibverbs;
mod messaging;
mod nvme_rdma;
mod rdma_cm;
mod sys;
mod system;
mod verbs;
mod wire;
mod wire_eth;

use std::process::ExitCode;

const USAGE: &str = "\
Usage: qhca-vmtest [--wire] [--list] [FILTER...]
Runs the qhca VM test cases whose name contains a FILTER (all without one).

  --wire      the RoCEv2 wire section instead (a VM booted with scripts/vm.sh --nic
              --qhca-port --qhca2 PROPS --qhca3 PROPS: rxe on the NIC and three qhca
              ports on one segment)
  --list      list the cases in their default order and exit
  -h, --help  show this help

Environment:
  QHCA_EXPECT_NUM_UARS  required: the num-uars the VM's QEMU was started with
  QHCA_KO               path of the built qhca.ko (needed by reload_module)
  QHCA_MODULE_NAME      module name for rmmod and /sys/module (default qhca)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("__hold") {
        return ExitCode::from(system::hold_main(&args[1..]) as u8);
    }
    if args.first().map(String::as_str) == Some("__disassoc") {
        return ExitCode::from(disassociate::helper_main(&args[1..]) as u8);
    }
    if let Some(cmd) = args.first().filter(|a| a.starts_with("__verbs_")) {
        return ExitCode::from(verbs::helper_main(cmd, &args[1..]) as u8);
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let wire = args.iter().any(|a| a == "--wire");
    let args: Vec<String> = args.into_iter().filter(|a| a != "--wire").collect();
    let all = if wire { wire::cases() } else { cases::all() };
    if args.iter().any(|a| a == "--list") {
        for c in &all {
            println!("{}", c.name);
        }
        return ExitCode::SUCCESS;
    }
    if let Some(bad) = args.iter().find(|a| a.starts_with('-')) {
        eprintln!("qhca-vmtest: unknown option {bad}\n\n{USAGE}");
        return ExitCode::from(2);
    }
    let cfg = match system::Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("qhca-vmtest: {e}");
            return ExitCode::from(2);
        }
    };
    let selected = harness::select(&all, &args);
    if selected.is_empty() {
        eprintln!("qhca-vmtest: no case matches {args:?} (see --list)");
    }
    // The suite's cases run on the RDMA core's node of the device, found again for each case;
    // the wire section's find their devices themselves.
    let summary = if wire {
        harness::run_all(&selected, &cfg, &mut std::io::stdout())
    } else {
        harness::run_all_with(
            &selected,
            |_| verbs::uverbs::on_uverbs(&cfg),
            &mut std::io::stdout(),
        )
    };
    ExitCode::from(summary.exit_code() as u8)
}
