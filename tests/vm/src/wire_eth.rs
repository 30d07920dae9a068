// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The wire section's Ethernet function cases (`qhca-vmtest --wire`, after `wire.rs`'s RoCE
//! ones, whose segment they use): qhca0's netdev carrying IP, and the port's link going down
//! and up under it.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Case, CaseResult, Fail, T};
use crate::ibverbs::tool;
use crate::system::{self, sh, Config};
use crate::wire::{in_ns, port_of, segment, Segment, QHCA_IP};
use crate::{bail, check, check_eq};

/// The cases of this part, in order: the link case last (it takes the port away for a while).
pub fn cases() -> Vec<Case<Config>> {
    vec![
        Case {
            name: "wire_eth_ping_tcp",
            run: wire_eth_ping_tcp,
        },
        Case {
            name: "wire_link_down_and_up",
            run: wire_link_down_and_up,
        },
    ]
}

/// qhca0's netdev's namespace.
const NS: &str = "qhca-wire-1";

/// qhca0's netdev, in [`NS`].
fn qhca_ndev(s: &Segment) -> Result<String, Fail> {
    let links = in_ns(NS, "ip", &["-o", "link", "show"])?;
    let Some(ndev) = links
        .lines()
        .find(|l| l.contains(&s.qhca_mac))
        .and_then(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
    else {
        bail!("no interface with MAC {} in {NS}: {links}", s.qhca_mac);
    };
    Ok(ndev)
}

/// The Ethernet function: qhca0's netdev, in its namespace, carries IP to and from the NIC as a
/// NIC does (it answers ARP for its address itself, and the device's Ethernet QP takes every
/// frame that is not RoCEv2 for it). From here over the NIC: three pings; with both interfaces
/// at MTU 9000, pings of 8972 bytes that may not be fragmented; a TCP stream of 8 MB into a
/// listener in qhca0's namespace (socat), its bytes compared. The netdev's counters (`ip -s
/// link`) and the port's Ethernet counters count the traffic.
fn wire_eth_ping_tcp(t: &mut T, _cfg: &Config) -> CaseResult {
    let s = segment()?;
    let ndev = qhca_ndev(&s)?;
    let stat = |name: &str| -> Result<u64, Fail> {
        let path = format!("/sys/class/net/{ndev}/statistics/{name}");
        let v = in_ns(NS, "cat", &[&path])?;
        v.trim()
            .parse()
            .map_err(|e| Fail::new(file!(), line!(), format!("{path}: {v:?}: {e}")))
    };
    let before = port_of(&s.qhca_path)?.counters;
    let (rx0, tx0) = (stat("rx_bytes")?, stat("tx_packets")?);
    let ip = QHCA_IP.to_string();
    let out = sh("ping", &["-c", "3", "-W", "5", &ip])?;
    check!(
        t,
        out.status.success(),
        "ping {ip}: {}",
        system::describe(&out)
    );
    in_ns(NS, "ip", &["link", "set", &ndev, "mtu", "9000"])?;
    let out = sh(
        "ping",
        &["-c", "2", "-W", "5", "-M", "do", "-s", "8972", &ip],
    )?;
    check!(
        t,
        out.status.success(),
        "ping of 8972 bytes at MTU 9000: {}",
        system::describe(&out)
    );

    let (src, dst) = ("/tmp/wire-eth.src", "/tmp/wire-eth.dst");
    let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(src, &data)?;
    let _ = std::fs::remove_file(dst);
    let listen = format!("TCP-LISTEN:7650,bind={ip},reuseaddr");
    let sink = format!("OPEN:{dst},creat,trunc");
    let Some(socat) = system::find_tool("socat") else {
        bail!("socat not found");
    };
    let Some(ipt) = system::find_tool("ip") else {
        bail!("ip not found");
    };
    let mut server = Command::new(ipt)
        .args(["netns", "exec", NS])
        .arg(&socat)
        .args(["-u", &listen, &sink])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let to = format!("TCP:{ip}:7650,retry=100,interval=0.2");
    let out = sh("socat", &["-u", &format!("OPEN:{src}"), &to])?;
    let sent = out.status.success();
    let done = system::wait_for(Duration::from_secs(60), || {
        matches!(server.try_wait(), Ok(Some(_)))
    });
    if !done {
        let _ = server.kill();
    }
    let _ = server.wait();
    check!(t, sent, "socat to {ip}: {}", system::describe(&out));
    let got = std::fs::read(dst).unwrap_or_default();
    check!(
        t,
        got == data,
        "the listener got {} bytes, not the {} sent (or other ones)",
        got.len(),
        data.len()
    );
    let _ = std::fs::remove_file(src);
    let _ = std::fs::remove_file(dst);

    let (rx1, tx1) = (stat("rx_bytes")?, stat("tx_packets")?);
    check!(
        t,
        rx1 - rx0 >= data.len() as u64 && tx1 > tx0 + 5,
        "{ndev}: rx_bytes {rx0} -> {rx1}, tx_packets {tx0} -> {tx1}"
    );
    let after = port_of(&s.qhca_path)?.counters;
    check!(
        t,
        after.eth_rx_frames > before.eth_rx_frames + 5
            && after.eth_tx_frames > before.eth_tx_frames + 5,
        "the port's Ethernet counters: before {before:?}, after {after:?}"
    );
    Ok(())
}

/// The host's cable (scripts/vm.sh --link-control): asks the host, through the virtio-serial
/// port `QHCA_LINK_CONTROL` names, to run QEMU's `set_link NAME on|off`, and waits (10 s at
/// most) for its answer.
fn set_link(name: &str, up: bool) -> Result<(), Fail> {
    let Ok(port) = std::env::var("QHCA_LINK_CONTROL") else {
        bail!("QHCA_LINK_CONTROL is not set: boot with scripts/vm.sh --link-control");
    };
    let dev = std::fs::read_dir("/sys/class/virtio-ports")?
        .flatten()
        .find(|e| std::fs::read_to_string(e.path().join("name")).is_ok_and(|n| n.trim() == port))
        .map(|e| Path::new("/dev").join(e.file_name()));
    let Some(dev) = dev else {
        bail!("no virtio-serial port named {port}");
    };
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&dev)?;
    let req = format!("set_link {name} {}\n", if up { "on" } else { "off" });
    f.write_all(req.as_bytes())?;
    let t0 = Instant::now();
    let mut reply = Vec::new();
    while !reply.ends_with(b"\n") {
        let mut b = [0u8; 256];
        match f.read(&mut b) {
            Ok(n) => reply.extend_from_slice(&b[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        if t0.elapsed() > Duration::from_secs(10) {
            bail!("{}: no answer to {req:?} within 10 s", dev.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let reply = String::from_utf8_lossy(&reply);
    if reply.trim() != "ok" {
        bail!("{req:?}: {}", reply.trim());
    }
    Ok(())
}

/// The port's link goes down and comes back, as a cable pulled out and put back (QEMU's
/// `set_link` on qhca0's port, asked of the host): the device raises an event each time and
/// the driver follows it. The netdev's carrier goes off and on again, the RDMA core's port
/// state goes to DOWN and back to ACTIVE, and a user context hears `IBV_EVENT_PORT_ERR` and
/// then `IBV_EVENT_PORT_ACTIVE` for port 1 (Debian's `ibv_asyncwatch` on qhca0, through
/// libibverbs and the installed provider). Afterwards IP flows over the netdev again (ping).
fn wire_link_down_and_up(t: &mut T, _cfg: &Config) -> CaseResult {
    let s = segment()?;
    let ndev = qhca_ndev(&s)?;
    let carrier_path = format!("/sys/class/net/{ndev}/carrier");
    let carrier = || -> String {
        in_ns(NS, "cat", &[&carrier_path])
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|e| format!("{e:?}"))
    };
    let state_path = format!("/sys/class/infiniband/{}/ports/1/state", s.qhca.dev);
    let state = || -> String {
        std::fs::read_to_string(&state_path)
            .map(|v| v.trim().to_string())
            .unwrap_or_else(|e| format!("{state_path}: {e}"))
    };
    check_eq!(t, carrier(), "1", "{ndev}'s carrier before");
    check_eq!(t, state(), "4: ACTIVE", "the port before");

    let watch = tool("ibv_asyncwatch")?;
    let Some(stdbuf) = system::find_tool("stdbuf") else {
        bail!("stdbuf not found");
    };
    let mut watcher = Command::new(stdbuf)
        .arg("-oL")
        .arg(&watch)
        .args(["-d", &s.qhca.dev])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // It has the device open once it says so; a second is plenty under TCG.
    std::thread::sleep(Duration::from_secs(2));

    let result = (|| -> Result<(), Fail> {
        for (up, want) in [(false, ("0", "1: DOWN")), (true, ("1", "4: ACTIVE"))] {
            set_link("qhcaport", up)?;
            let seen = system::wait_for(Duration::from_secs(10), || {
                (carrier().as_str(), state().as_str()) == want
            });
            check!(
                t,
                seen,
                "link {}: {ndev}'s carrier {}, the port {}",
                if up { "up" } else { "down" },
                carrier(),
                state()
            );
        }
        Ok(())
    })();
    // Whatever happened, the cable goes back in.
    if result.is_err() {
        let _ = set_link("qhcaport", true);
    }
    std::thread::sleep(Duration::from_secs(1));
    let _ = watcher.kill();
    let out = watcher.wait_with_output()?;
    result?;
    let text = String::from_utf8_lossy(&out.stdout);
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("event_type "))
        .filter(|e| e.starts_with("IBV_EVENT_PORT_"))
        .collect();
    check_eq!(
        t,
        events,
        [
            "IBV_EVENT_PORT_ERR (10), port 1",
            "IBV_EVENT_PORT_ACTIVE (9), port 1"
        ],
        "ibv_asyncwatch -d {}: {text}{}",
        s.qhca.dev,
        String::from_utf8_lossy(&out.stderr)
    );

    let ip = QHCA_IP.to_string();
    let ok = system::wait_for(Duration::from_secs(20), || {
        sh("ping", &["-c", "1", "-W", "2", &ip]).is_ok_and(|o| o.status.success())
    });
    check!(t, ok, "no ping answer from {ip} once the link is back");
    Ok(())
}
