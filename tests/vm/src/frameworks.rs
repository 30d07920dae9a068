// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The frameworks on qhca's verbs, unmodified: Debian's UCX (`ucx_info`, `ucx_perftest`) and
//! Open MPI over UCX, through libibverbs and the installed provider on the RDMA core's device.
//!
//! UCX's `rc_verbs` transport needs a shared receive queue; it connects its RC endpoints through
//! an auxiliary transport, so the cases name UCX's `rc_v` alias (`rc_verbs` with `ud_verbs` for
//! the wire-up alone) and check with `ucx_info -e` that the data lanes are `rc_verbs` on qhca.
//! `ucx_perftest` checks no data; the MPI program (tests/mpi/mpi_check.c, `qhca-mpi-check`)
//! checks every word it receives, with Open MPI's UCX PML forced and UCX allowed qhca's RC
//! transport and nothing else between the ranks (`self` is within a rank).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::{Case, CaseResult, Fail, T};
use crate::ibverbs::{beside_me, listening, text, tool, wait_output, Via};
use crate::system::{self, describe, Config};
use crate::{bail, check, require};

/// The cases of this section, in order.
pub fn cases() -> Vec<Case<Config>> {
    vec![
        Case {
            name: "ucx_info_lists_qhca",
            run: ucx_info_lists_qhca,
        },
        Case {
            name: "ucx_lanes_on_qhca",
            run: ucx_lanes_on_qhca,
        },
        Case {
            name: "ucx_perftest_rc_tag_lat",
            run: |t, cfg| ucx_perftest(t, cfg, Tls::Rc, "tag_lat", 19100),
        },
        Case {
            name: "ucx_perftest_rc_tag_bw",
            run: |t, cfg| ucx_perftest(t, cfg, Tls::Rc, "tag_bw", 19101),
        },
        Case {
            name: "ucx_perftest_rc_put_bw",
            run: |t, cfg| ucx_perftest(t, cfg, Tls::Rc, "ucp_put_bw", 19102),
        },
        Case {
            name: "ucx_perftest_ud_tag_lat",
            run: |t, cfg| ucx_perftest(t, cfg, Tls::Ud, "tag_lat", 19103),
        },
        Case {
            name: "ucx_perftest_ud_tag_bw",
            run: |t, cfg| ucx_perftest(t, cfg, Tls::Ud, "tag_bw", 19104),
        },
        Case {
            name: "ompi_ucx_two_ranks",
            run: ompi_ucx_two_ranks,
        },
    ]
}

/// The UCX transport a case allows.
#[derive(Clone, Copy)]
enum Tls {
    /// `rc_verbs`, with `ud_verbs` for the wire-up only (UCX's `rc_v`).
    Rc,
    /// `ud_verbs` alone (UCX's `ud_v`).
    Ud,
}

impl Tls {
    fn alias(self) -> &'static str {
        match self {
            Tls::Rc => "rc_v",
            Tls::Ud => "ud_v",
        }
    }

    /// The transport that carries the data.
    fn name(self) -> &'static str {
        match self {
            Tls::Rc => "rc_verbs",
            Tls::Ud => "ud_verbs",
        }
    }
}

/// `prog args..` with UCX held to port 1 of `dev`, its GID 0 and `tls`.
fn ucx_cmd(prog: &Path, args: &[&str], dev: &str, tls: &str) -> Result<Command, Fail> {
    let mut c = Via.cmd(prog, args)?;
    for (k, v) in ucx_env(dev, tls) {
        c.env(k, v);
    }
    Ok(c)
}

/// UCX's settings for the cases: port 1 of `dev` and `tls`, on GID 0 (the port's link-local
/// IPv6 address, there whenever its netdev is up). UCX would prefer an IPv4 GID if an earlier
/// case left the netdev one; before 1.19 it drops every datagram between IPv4 GIDs on a device
/// other than mlx5 (it takes the address family from `wc.sl`, where only mlx5 puts it), and
/// Debian's UCX is 1.13. On an IPv6 GID UCX checks each datagram's destination GID in the
/// GRH the device writes in front of it, which the UD cases thus check too.
fn ucx_env(dev: &str, tls: &str) -> [(&'static str, String); 4] {
    [
        ("UCX_NET_DEVICES", format!("{dev}:1")),
        ("UCX_TLS", tls.to_string()),
        ("UCX_IB_GID_INDEX", "0".to_string()),
        ("UCX_WARN_UNUSED_ENV_VARS", "n".to_string()),
    ]
}

/// `ucx_info -d` lists both verbs transports on the device's port.
fn ucx_info_lists_qhca(t: &mut T, cfg: &Config) -> CaseResult {
    let dev = Via.device(cfg)?;
    let out = Via.cmd(&tool("ucx_info")?, &["-d"])?.output()?;
    require!(t, out.status.success(), "ucx_info -d: {}", describe(&out));
    let s = text(&out);
    let want = format!("Device: {dev}:1");
    for tl in ["rc_verbs", "ud_verbs"] {
        // "#      Transport: rc_verbs" then "#         Device: rocep0s11:1".
        let lines: Vec<&str> = s.lines().collect();
        let found = lines
            .windows(2)
            .any(|w| w[0].ends_with(&format!("Transport: {tl}")) && w[1].ends_with(&want));
        check!(
            t,
            found,
            "no {tl} transport on {dev}:1 in ucx_info -d:\n{s}"
        );
    }
    Ok(())
}

/// The endpoint UCX builds (`ucx_info -e`, to itself through the device): with `rc_v` its data
/// lane (active messages and RDMA) is `rc_verbs` on the device, with `ud_v` `ud_verbs`.
fn ucx_lanes_on_qhca(t: &mut T, cfg: &Config) -> CaseResult {
    let dev = Via.device(cfg)?;
    for tls in [Tls::Rc, Tls::Ud] {
        let out = ucx_cmd(&tool("ucx_info")?, &["-e", "-u", "t"], &dev, tls.alias())?.output()?;
        check!(t, out.status.success(), "ucx_info -e: {}", describe(&out));
        let s = text(&out);
        let lane = format!("{}/{dev}:1", tls.name());
        let carries = |l: &&str| {
            l.contains("lane[")
                && l.contains(&lane)
                && l.split_whitespace().any(|w| w == "am")
                && (matches!(tls, Tls::Ud) || l.contains("rma_bw"))
        };
        check!(
            t,
            s.lines().any(|l| carries(&l)),
            "UCX_TLS={}: no {lane} lane for the data:\n{s}",
            tls.alias()
        );
    }
    Ok(())
}

/// `ucx_perftest -t test` between a server and a client in this guest, over `tls` on the
/// device: both exit 0 and the client reports all 1000 iterations.
fn ucx_perftest(t: &mut T, cfg: &Config, tls: Tls, test: &str, port: u16) -> CaseResult {
    let dev = Via.device(cfg)?;
    let prog = tool("ucx_perftest")?;
    let p = port.to_string();
    let args = ["-t", test, "-n", "1000", "-p", &p];
    let server = ucx_cmd(&prog, &args, &dev, tls.alias())?.spawn()?;
    let up = system::wait_for(Duration::from_secs(20), || listening(port));
    let mut client_args = args.to_vec();
    client_args.push("127.0.0.1");
    let client = ucx_cmd(&prog, &client_args, &dev, tls.alias())?.spawn()?;
    let c = wait_output(client, Duration::from_secs(180))?;
    let s = wait_output(server, Duration::from_secs(20))?;
    require!(t, up, "the server did not listen on port {port}");
    let (Some(c), Some(s)) = (c, s) else {
        bail!("ucx_perftest -t {test}: timed out");
    };
    check!(t, c.status.success(), "client: {}", describe(&c));
    check!(t, s.status.success(), "server: {}", describe(&s));
    let ct = text(&c);
    print!("{ct}");
    // "Final:                  1000      7.500    11.072 ..."
    let done = ct.lines().any(|l| {
        let mut w = l.split_whitespace();
        w.next() == Some("Final:") && w.next() == Some("1000")
    });
    check!(t, done, "no final row of 1000 iterations: {ct}");
    check!(
        t,
        !ct.contains("UCX  ERROR") && !text(&s).contains("UCX  ERROR"),
        "UCX reported an error: {ct}{}",
        text(&s)
    );
    Ok(())
}

/// Two ranks of `qhca-mpi-check` under Open MPI's `mpirun`, its UCX PML forced (it aborts
/// rather than fall back) and UCX allowed qhca's RC transport alone between them: every
/// message checked word by word, both ways, eager and rendezvous, and an allreduce.
fn ompi_ucx_two_ranks(t: &mut T, cfg: &Config) -> CaseResult {
    let dev = Via.device(cfg)?;
    let prog = beside_me("qhca-mpi-check")?;
    let mut args: Vec<String> = [
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        "2",
        "--mca",
        "pml",
        "ucx",
    ]
    .map(String::from)
    .into();
    for (k, v) in ucx_env(&dev, "rc_v,self") {
        args.extend(["-x".to_string(), format!("{k}={v}")]);
    }
    args.push(prog.to_string_lossy().into_owned());
    // By name: mpirun started by a path takes its installation prefix from that path, and
    // `/bin/mpirun` (merged /usr) gives "/", which it refuses.
    tool("mpirun")?;
    let child = Command::new("mpirun")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("LD_PRELOAD")
        .spawn()?;
    let Some(out) = wait_output(child, Duration::from_secs(240))? else {
        bail!("mpirun: timed out");
    };
    let s = text(&out);
    print!("{s}");
    check!(t, out.status.success(), "mpirun: {}", describe(&out));
    for r in 0..2 {
        check!(
            t,
            s.contains(&format!("mpi-check: rank {r} of 2: ok")),
            "rank {r} did not pass: {s}"
        );
    }
    Ok(())
}
