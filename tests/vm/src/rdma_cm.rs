// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Connection management through the kernel's rdma_cm, with rdma-core's own programs, unmodified:
//! `rping` (RC, data validated), `ucmatose` (RC, several connections), `udaddy` (UD) and
//! perftest with `-R` (write, read, send; latency and bandwidth). Each resolves an IPv4 address of the qhca port's netdev to the device (the
//! core's RoCE GID table), and the CM's MADs travel on the port's QP1, a QP of the driver's
//! kernel verbs. Server and client run in this guest on one address, so both ends are the one
//! device (rdma_cm binds a connection to a local address to the device that owns it).

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::cases::ib_port::{ip, link_up, netdev_of};
use crate::harness::{Case, CaseResult, Fail, T};
use crate::ibverbs::{text, tool, wait_output, Via};
use crate::system::{self, describe, Config};
use crate::{bail, check, require};

/// The cases of this section, in order.
pub fn cases() -> Vec<Case<Config>> {
    vec![
        Case {
            name: "rdma_cm_port_has_cm",
            run: rdma_cm_port_has_cm,
        },
        Case {
            name: "rdma_cm_rping",
            run: rdma_cm_rping,
        },
        Case {
            name: "rdma_cm_ucmatose",
            run: rdma_cm_ucmatose,
        },
        Case {
            name: "rdma_cm_udaddy",
            run: rdma_cm_udaddy,
        },
        Case {
            name: "rdma_cm_rdma_server_client",
            run: rdma_cm_rdma_server_client,
        },
        Case {
            name: "rdma_cm_perftest",
            run: rdma_cm_perftest,
        },
        Case {
            name: "rdma_cm_unbind_under_traffic",
            run: rdma_cm_unbind_under_traffic,
        },
    ]
}

/// The address the cases give the port's netdev.
pub(crate) const ADDR: &str = "10.77.12.1";

/// The port's netdev, up, with [`ADDR`] for the duration of `f`, and the device's name.
pub(crate) fn with_address(
    t: &mut T,
    cfg: &Config,
    f: impl FnOnce(&mut T, &str) -> CaseResult,
) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    let Some(ndev) = netdev_of(&bdf) else {
        bail!("{bdf} has no netdev");
    };
    let name = Via.device(cfg)?;
    link_up(&ndev)?;
    ip(&["addr", "add", &format!("{ADDR}/24"), "dev", &ndev])?;
    // The core turns the address into a GID of the port: then rdma_cm finds the device by it.
    let gid = "0000:0000:0000:0000:0000:ffff:0a4d:0c01";
    let port = Path::new("/sys/class/infiniband")
        .join(&name)
        .join("ports/1/gids");
    let has_gid = || {
        std::fs::read_dir(&port).is_ok_and(|d| {
            d.flatten()
                .any(|e| std::fs::read_to_string(e.path()).is_ok_and(|s| s.trim() == gid))
        })
    };
    let res = if system::wait_for(Duration::from_secs(10), has_gid) {
        f(t, &name)
    } else {
        Err(Fail::new(
            file!(),
            line!(),
            format!("no GID {gid} in {} after ip addr add", port.display()),
        ))
    };
    // Gone already if the case unbound the device (its netdev went with it).
    let _ = ip(&["addr", "del", &format!("{ADDR}/24"), "dev", &ndev]);
    res
}

/// True once a listening rdma_cm id is bound to TCP port `port` (`rdma resource show cm_id`).
pub(crate) fn cm_listening(port: u16) -> bool {
    let Ok(rdma) = tool("rdma") else {
        return false;
    };
    let args = ["resource", "show", "cm_id"].map(OsStr::new);
    system::run_tool(&rdma, &args).is_ok_and(|o| {
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .any(|l| l.contains("LISTEN") && l.contains(&format!(":{port} ")))
    })
}

/// Runs `prog` as a server with `server` arguments until it listens on `port`, then as a
/// client with `client` arguments; both must exit 0 within `limit`. Returns their output.
fn cm_pair(
    t: &mut T,
    prog: &str,
    server: &[&str],
    client: &[&str],
    port: u16,
    limit: Duration,
) -> Result<(String, String), Fail> {
    cm_programs(t, (prog, server), (prog, client), port, limit)
}

/// [`cm_pair`] with a server program and a client program of their own.
fn cm_programs(
    t: &mut T,
    server: (&str, &[&str]),
    client: (&str, &[&str]),
    port: u16,
    limit: Duration,
) -> Result<(String, String), Fail> {
    let (sprog, cprog) = (tool(server.0)?, tool(client.0)?);
    let s = Via.cmd(&sprog, server.1)?.spawn()?;
    let up = system::wait_for(Duration::from_secs(20), || cm_listening(port));
    let c = Via.cmd(&cprog, client.1)?.spawn()?;
    let c = wait_output(c, limit)?;
    let s = wait_output(s, Duration::from_secs(if up { 30 } else { 1 }))?;
    require!(
        t,
        up,
        "{}: the server never listened on port {port}",
        sprog.display()
    );
    let finished = |o: Option<Output>, prog: &Path| -> Result<Output, Fail> {
        o.ok_or_else(|| Fail::new(file!(), line!(), format!("{}: timed out", prog.display())))
    };
    let (c, s) = (finished(c, &cprog)?, finished(s, &sprog)?);
    check!(
        t,
        c.status.success(),
        "{} (client): {}",
        cprog.display(),
        describe(&c)
    );
    check!(
        t,
        s.status.success(),
        "{} (server): {}",
        sprog.display(),
        describe(&s)
    );
    Ok((text(&c), text(&s)))
}

/// Case: the port claims what rdma_cm needs (MADs and the CM, on a RoCE v2 port), and the
/// kernel's MAD layer runs QP1 on it: `rdma resource show qp` lists the device's GSI QP, owned
/// by the kernel.
fn rdma_cm_port_has_cm(t: &mut T, cfg: &Config) -> CaseResult {
    let name = Via.device(cfg)?;
    let rdma = tool("rdma")?;
    let args = ["resource", "show", "qp", "link", &format!("{name}/1")].map(|s| s.to_owned());
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let out = system::run_tool(&rdma, &args)?;
    require!(
        t,
        out.status.success(),
        "rdma resource show qp: {}",
        describe(&out)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    let qp1 = s.lines().find(|l| {
        l.split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w == ["lqpn", "1"])
    });
    check!(t, qp1.is_some(), "no QP 1 on {name}:\n{s}");
    if let Some(l) = qp1 {
        check!(t, l.contains("type GSI"), "QP 1 is not the GSI QP: {l}");
        check!(t, l.contains("state RTS"), "QP 1 is not ready to send: {l}");
        check!(
            t,
            l.contains("[ib_core]"),
            "QP 1 is not the MAD layer's: {l}"
        );
    }
    let out = Via
        .cmd(&tool("ibv_devinfo")?, &["-d", &name, "-v"])?
        .output()?;
    check!(t, out.status.success(), "{}", describe(&out));
    let info = text(&out);
    check!(t, info.contains("link_layer:\t\tEthernet"), "{info}");
    Ok(())
}

/// Case: rping over rdma_cm, server and client on the port's address: 20 pings of 1000 bytes,
/// each validated by the client (`-V`), and the data shown (`-v`).
fn rdma_cm_rping(t: &mut T, cfg: &Config) -> CaseResult {
    with_address(t, cfg, |t, _| {
        let port = "18731";
        let (c, _) = cm_pair(
            t,
            "rping",
            &["-s", "-a", ADDR, "-p", port, "-C", "20", "-S", "1000", "-V"],
            &[
                "-c", "-a", ADDR, "-p", port, "-C", "20", "-S", "1000", "-V", "-v",
            ],
            18731,
            Duration::from_secs(120),
        )?;
        let pings = c
            .lines()
            .filter(|l| l.starts_with("ping data: rdma-ping-"))
            .count();
        check!(t, pings == 20, "{pings} validated pings of 20:\n{c}");
        Ok(())
    })
}

/// Case: ucmatose, two RC connections on one listener, 50 messages of 1000 bytes each way.
fn rdma_cm_ucmatose(t: &mut T, cfg: &Config) -> CaseResult {
    with_address(t, cfg, |t, _| {
        let (c, s) = cm_pair(
            t,
            "ucmatose",
            &["-b", ADDR, "-c", "2", "-C", "50", "-S", "1000"],
            &["-s", ADDR, "-c", "2", "-C", "50", "-S", "1000"],
            7471,
            Duration::from_secs(120),
        )?;
        for (who, out) in [("client", &c), ("server", &s)] {
            check!(
                t,
                out.contains("data transfers complete") && out.contains("test complete"),
                "ucmatose {who}:\n{out}"
            );
        }
        Ok(())
    })
}

/// Case: udaddy, UD over rdma_cm: address and route resolved by the CM, the remote QPN and
/// Q_Key learnt through its SIDR exchange on QP1, then datagrams both ways.
fn rdma_cm_udaddy(t: &mut T, cfg: &Config) -> CaseResult {
    with_address(t, cfg, |t, _| {
        let (c, s) = cm_pair(
            t,
            "udaddy",
            &["-b", ADDR, "-c", "1", "-C", "20", "-S", "500"],
            &["-s", ADDR, "-c", "1", "-C", "20", "-S", "500"],
            7174,
            Duration::from_secs(120),
        )?;
        for (who, out) in [("client", &c), ("server", &s)] {
            check!(
                t,
                out.contains("data transfers complete") && out.contains("test complete"),
                "udaddy {who}:\n{out}"
            );
        }
        Ok(())
    })
}

/// Case: librdmacm's own examples, `rdma_server` and `rdma_client`: the endpoint API
/// (`rdma_getaddrinfo`, `rdma_create_ep`, `rdma_get_request`, `rdma_accept`/`rdma_connect`),
/// one message each way with `rdma_post_send`/`rdma_post_recv` and their completions; both
/// say they ended with 0.
fn rdma_cm_rdma_server_client(t: &mut T, cfg: &Config) -> CaseResult {
    with_address(t, cfg, |t, _| {
        let args = ["-s", ADDR, "-p", "7472"];
        let (c, s) = cm_programs(
            t,
            ("rdma_server", &args),
            ("rdma_client", &args),
            7472,
            Duration::from_secs(60),
        )?;
        check!(t, c.contains("rdma_client: end 0"), "rdma_client:\n{c}");
        check!(t, s.contains("rdma_server: end 0"), "rdma_server:\n{s}");
        Ok(())
    })
}

/// Case: perftest connecting with rdma_cm (`-R`): write, read and send, latency and bandwidth,
/// each with a result row.
fn rdma_cm_perftest(t: &mut T, cfg: &Config) -> CaseResult {
    with_address(t, cfg, |t, name| {
        for (prog, size, port) in [
            ("ib_write_lat", "64", 18741u16),
            ("ib_write_bw", "4096", 18742),
            ("ib_read_lat", "64", 18743),
            ("ib_read_bw", "4096", 18744),
            ("ib_send_lat", "64", 18745),
            ("ib_send_bw", "4096", 18746),
        ] {
            let p = port.to_string();
            let server = ["-d", name, "-R", "-s", size, "-n", "200", "-p", &p];
            let mut client = server.to_vec();
            client.push(ADDR);
            let (c, _) = cm_pair(t, prog, &server, &client, port, Duration::from_secs(120))?;
            let row = c.lines().any(|l| {
                l.split_whitespace().next() == Some(size) && l.split_whitespace().count() >= 4
            });
            check!(t, row, "{prog} -R: no result row for {size} bytes in:\n{c}");
        }
        Ok(())
    })
}

/// Case: the driver unbound while an rping connection runs (server and client pinging without
/// end): the core tells both of the device's removal (`RDMA_CM_EVENT_DEVICE_REMOVAL`), both
/// end, the unbind returns (the MAD layer's QP1 and the kernel context go with the device), and
/// after a rebind a new connection works.
fn rdma_cm_unbind_under_traffic(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    let rping = tool("rping")?;
    let port = "18751";
    let started = with_address(t, cfg, |t, _| {
        let s = Via
            .cmd(
                &rping,
                &["-s", "-a", ADDR, "-p", port, "-C", "0", "-S", "512"],
            )?
            .spawn()?;
        let up = system::wait_for(Duration::from_secs(20), || cm_listening(18751));
        let c = Via
            .cmd(
                &rping,
                &["-c", "-a", ADDR, "-p", port, "-C", "0", "-S", "512", "-V"],
            )?
            .spawn()?;
        require!(t, up, "rping never listened on port {port}");
        // Pinging: both ends hold a connected rdma_cm id on the device.
        let connected = system::wait_for(Duration::from_secs(20), || {
            cm_ids().matches("CONNECT").count() >= 2
        });
        check!(t, connected, "no connection in:\n{}", cm_ids());
        std::thread::sleep(Duration::from_millis(500));
        let unbound = system::Unbound::unbind(cfg, &bdf)?;
        let c = wait_output(c, Duration::from_secs(30))?;
        let s = wait_output(s, Duration::from_secs(30))?;
        check!(t, c.is_some(), "the client still runs after the unbind");
        check!(t, s.is_some(), "the server still runs after the unbind");
        check!(t, cm_ids().trim().is_empty(), "cm ids left: {}", cm_ids());
        unbound.rebind()?;
        Ok(())
    });
    started?;
    // The device is back, with its netdev (a new one, without the address): connect again.
    let back = system::wait_for(Duration::from_secs(20), || {
        crate::cases::ib_port::ib_device_of(&bdf).is_some()
    });
    require!(t, back, "no RDMA device after the rebind");
    rdma_cm_rping(t, cfg)
}

/// `rdma resource show cm_id`'s lines.
fn cm_ids() -> String {
    let Ok(rdma) = tool("rdma") else {
        return String::new();
    };
    let args = ["resource", "show", "cm_id"].map(OsStr::new);
    system::run_tool(&rdma, &args)
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}
