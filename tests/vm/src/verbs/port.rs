// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The port on the real device: QUERY_PORT from a program, `qhca-info addr` listing an address
//! of the port's netdev (and naming the `ip` command for a change), an RC QP whose address vector
//! names an IPv4 GID nobody has (its requests fail with RETRY_EXC_ERR), an RC pair that moves
//! data between two IPv4 GIDs of this device, and a datagram between them, whose GRH area
//! holds the IPv4 header.
//!
//! Every case takes back the addresses it gives the port ([`Addr`]), also when it fails: the
//! table belongs to the device, and perftest picks an IPv4 GID when it finds one.

use super::*;
use crate::system::{drop_cap, CAP_NET_ADMIN};
use std::net::Ipv4Addr;

use qhca::{AhAttr, Gid, Grh, PortState, Wire, GID_TABLE_LEN, GRH_SIZE};

/// Addresses the cases give the port (a subnet nothing else here uses).
const A1: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const A2: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// An address nobody has.
const NOBODY: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 99);

/// An address given to the port, taken back on drop: the port's netdev's address
/// (`noprefixroute`: the netdev carries no IP traffic), which the RDMA core hands to the driver.
struct Addr {
    index: u8,
    gid: Gid,
    /// The netdev and `A.B.C.D/N`.
    netdev: (String, String),
}

impl Addr {
    #[track_caller]
    fn add(cfg: &Config, ctx: &Arc<Context>, addr: Ipv4Addr, prefix_len: u8) -> Result<Addr, Fail> {
        let gid = Gid::from_ipv4(addr);
        let bdf = match system::pci_bdf(cfg) {
            Ok(b) => b,
            Err(e) => bail!("{e}"),
        };
        let Some(ndev) = crate::cases::netdev_of(&bdf) else {
            bail!("{bdf}: no netdev");
        };
        let cidr = format!("{addr}/{prefix_len}");
        crate::cases::ip(&["addr", "add", &cidr, "dev", &ndev, "noprefixroute"])?;
        // Taken back on drop whatever happens now.
        let mut added = Addr {
            index: 0,
            gid,
            netdev: (ndev, cidr),
        };
        let mut index = None;
        system::wait_for(Duration::from_secs(10), || {
            index = ctx
                .query_port()
                .ok()
                .and_then(|p| p.find(&gid).map(|e| e.index));
            index.is_some()
        });
        match index {
            Some(index) => {
                added.index = index;
                Ok(added)
            }
            None => bail!("{addr}: no GID in the port's table 10 s after ip addr add"),
        }
    }
}

impl Drop for Addr {
    fn drop(&mut self) {
        let (ndev, cidr) = &self.netdev;
        let _ = crate::cases::ip(&["addr", "del", cidr, "dev", ndev]);
    }
}

/// What naming an empty GID entry as an address vector's source gets: `ENODATA` from the RDMA
/// core, which finds no GID there (as for any device).
const EMPTY_ENTRY_ERRNO: Errno = Errno::ENODATA;

/// Runs `f` on a thread without CAP_NET_ADMIN (capabilities are per thread).
fn without_net_admin<R: Send>(f: impl FnOnce() -> R + Send) -> Result<R, Fail> {
    std::thread::scope(|s| {
        s.spawn(|| {
            drop_cap(CAP_NET_ADMIN)?;
            Ok(f())
        })
        .join()
        .expect("thread panicked")
    })
    .map_err(|e: std::io::Error| fail_msg(format!("capset: {e}")))
}

/// QUERY_PORT from a program: the port is up, MTU 4096, a table of 16 whose entry 0 is the
/// link-local GID of the device's attributes; a second context and a thread without
/// CAP_NET_ADMIN see the same.
pub(super) fn verbs_port_query(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    require!(
        t,
        ctx.attr().has_port(),
        "caps {:#x} without PORT",
        ctx.attr().caps
    );
    let p = ctx.query_port()?;
    check_eq!(t, p.state, PortState::Active);
    check!(
        t,
        matches!(p.wire, Wire::None | Wire::RoceV2),
        "{:?}",
        p.wire
    );
    check_eq!(
        t,
        (p.max_mtu, usize::from(p.gid_tbl_len)),
        (4096, GID_TABLE_LEN)
    );
    check!(
        t,
        p.mac != [0; 6] && p.mac[0] & 1 == 0,
        "MAC {}",
        p.mac_string()
    );
    check_eq!(
        t,
        p.gid(0).map(|e| (e.gid, e.prefix_len)),
        Some((ctx.gid(), 64)),
        "entry 0"
    );
    let other = Context::open(&cfg.dev)?;
    check_eq!(t, other.query_port()?.gids, p.gids, "another context");
    let unprivileged = without_net_admin(|| ctx.query_port())?;
    check!(
        t,
        unprivileged.as_ref().is_ok_and(|q| q.gids == p.gids),
        "without CAP_NET_ADMIN: {unprivileged:?}"
    );

    Ok(())
}

/// `qhca-info addr` on the RDMA core's device, whose port's addresses are its netdev's: `addr
/// add` and `addr del` are errors (exit 1) that name the `ip` command to run instead; an address
/// given to the netdev is listed with its entry's index and prefix, by `addr` and with the
/// attributes, until it is taken back.
pub(super) fn verbs_port_addr_tool(t: &mut T, cfg: &Config) -> CaseResult {
    let exe = std::env::current_exe()?.with_file_name("qhca-info");
    require!(t, exe.exists(), "{} not built", exe.display());
    let core = super::uverbs::core_device(cfg)?;
    let ndev = core.netdev().unwrap_or_default();
    let run = |args: &[&str]| -> Result<(Option<i32>, String, String), Fail> {
        let out = Command::new(&exe)
            .args(["-d", &core.name])
            .args(args)
            .output()?;
        Ok((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    for (args, hint) in [
        (
            ["addr", "add", "10.77.0.2/24"],
            format!("ip addr add 10.77.0.2/24 dev {ndev}"),
        ),
        (
            ["addr", "del", "10.77.0.2"],
            format!("ip addr del 10.77.0.2 dev {ndev}"),
        ),
    ] {
        let (code, out, err) = run(&args)?;
        check!(
            t,
            code == Some(1) && err.contains(&hint),
            "{args:?} on {}: exit {code:?}, stdout {out:?}, stderr {err:?}",
            core.name
        );
    }

    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let a2 = Addr::add(cfg, &ctx, A2, 24)?;
    let line = format!("gid {} ::ffff:10.77.0.2 (10.77.0.2/24) RoCEv2", a2.index);
    let (code, text, err) = run(&["addr"])?;
    check_eq!(t, code, Some(0), "{err}");
    check!(
        t,
        text.starts_with(&format!("{}: port 1 PORT_ACTIVE mac ", core.name)),
        "{text}"
    );
    check!(t, text.lines().any(|l| l.trim() == line), "{text}");
    check!(
        t,
        text.lines().any(|l| l.trim().starts_with("gid 0 fe80:")),
        "{text}"
    );
    let (code, text, err) = run(&[])?;
    check_eq!(t, code, Some(0), "{err}");
    check!(t, text.contains(&line), "the attributes list it: {text}");
    // ip addr del: the core takes the GID out of the port's table, and so out of the device's.
    drop(a2);
    let gone = system::wait_for(Duration::from_secs(10), || {
        run(&["addr"]).is_ok_and(|(_, text, _)| !text.contains("10.77.0.2"))
    });
    check!(
        t,
        gone,
        "still listed 10 s after ip addr del: {:?}",
        run(&["addr"]).map(|(_, text, _)| text)
    );
    Ok(())
}

/// Connects `qp` from its port's entry `sgid_index` to `dgid` (QP `dest_qpn`, PSNs as
/// [`PSN_A`] / [`PSN_B`]).
fn connect_av(
    qp: &Qp,
    from: (Gid, u8),
    dgid: Gid,
    dest_qpn: u32,
    o: &ConnOpts,
) -> qhca::Result<()> {
    let remote = ConnInfo {
        qpn: dest_qpn,
        psn: PSN_B,
        ..ConnInfo::default()
    }
    .with_gid(dgid, 0);
    qp.connect(&qp.conn_info(PSN_A).with_gid(from.0, from.1), &remote, o)
}

/// An RC QP whose address vector names an IPv4 GID nobody has: its packets are lost (counted
/// by the port), the requester retries `retry_cnt` times and the request completes with
/// RETRY_EXC_ERR; the QP reports the address vector it was given. An address vector from an
/// empty entry, or to a destination of the other family, is refused at INIT -> RTR.
pub(super) fn verbs_port_rc_unreachable(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let a1 = Addr::add(cfg, &ctx, A1, 24)?;
    let pd = Pd::new(&ctx)?;
    let mut cq = Cq::new(&ctx, 16, None)?;
    let o = ConnOpts {
        timeout: 10, // 4 ms
        retry_cnt: 2,
        ..PairOpts::default().conn
    };
    let caps = PairOpts::default().caps;
    let empty = ctx
        .query_port()?
        .free_index()
        .ok_or_else(|| fail_msg("no free entry".into()))?;
    // Refused: the source entry is empty (the RDMA core finds no GID there: ENODATA, as for any
    // device); IPv4 to the link-local GID; link-local to IPv4.
    let no_gid = EMPTY_ENTRY_ERRNO;
    for (what, from, to, errno) in [
        (
            "an empty entry",
            (Gid::from_ipv4(A2), empty),
            Gid::from_ipv4(NOBODY),
            no_gid,
        ),
        (
            "IPv4 to link-local",
            (a1.gid, a1.index),
            ctx.gid(),
            Errno::EINVAL,
        ),
        (
            "link-local to IPv4",
            (ctx.gid(), 0),
            Gid::from_ipv4(NOBODY),
            Errno::EINVAL,
        ),
    ] {
        let qp = Qp::new(&pd, &cq, &cq, &caps)?;
        check_errno!(t, connect_av(&qp, from, to, qp.qpn(), &o), errno, "{what}");
        check_eq!(t, qp.query()?.state, QpState::Init, "{what}: still INIT");
    }

    let mut qp = Qp::new(&pd, &cq, &cq, &caps)?;
    let nobody = Gid::from_ipv4(NOBODY);
    connect_av(&qp, (a1.gid, a1.index), nobody, 0x42, &o)?;
    let info = qp.query()?;
    check_eq!(t, info.state, QpState::Rts);
    check_eq!(
        t,
        (info.av.dgid, info.av.sgid_index, info.av.hop_limit),
        (nobody, a1.index, 64),
        "the address vector"
    );
    let before = ctx.query_port()?.counters;
    let mr = pd.reg_mr_buf(64, Access::LOCAL_WRITE)?;
    let sge = [mr.sge(0, 8)];
    let wr = SendWr::new(
        7,
        WrOp::Write {
            raddr: 0x1000,
            rkey: 0x99,
        },
        &sge,
    )
    .with_flags(SendFlags::SIGNALED);
    qp.post_send(&[wr])?;
    let wc = wait_wc(&mut cq)?;
    check_wc(
        t,
        &wc,
        7,
        WcStatus::RetryExcErr,
        WcOpcode::RdmaWrite,
        "to nobody",
    );
    check_eq!(t, qp.query()?.state, QpState::Err);
    let after = ctx.query_port()?.counters;
    check!(
        t,
        after.tx_no_route + after.tx_no_neigh >= before.tx_no_route + before.tx_no_neigh + 3,
        "lost packets not counted: {before:?} -> {after:?}"
    );
    Ok(())
}

/// Two RC QPs of this device connected through two IPv4 GIDs of its port (A1 at one entry, A2
/// at another, each side sending from its own): SEND, RDMA WRITE and READ both ways, every
/// byte; each QP reports its address vector. Then a datagram from A1 to A2: the GRH area holds
/// 20 zero bytes and the IPv4 header (addresses, TOS, TTL), as RoCEv2 delivers it.
pub(super) fn verbs_port_rc_ipv4_gids(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let a1 = Addr::add(cfg, &ctx, A1, 24)?;
    let a2 = Addr::add(cfg, &ctx, A2, 24)?;
    let pd = Pd::new(&ctx)?;
    let o = PairOpts::default();
    let mut cq_a = Cq::new(&ctx, 64, None)?;
    let mut cq_b = Cq::new(&ctx, 64, None)?;
    let mut a = Qp::new(&pd, &cq_a, &cq_a, &o.caps)?;
    let mut b = Qp::new(&pd, &cq_b, &cq_b, &o.caps)?;
    let rec_a = a.conn_info(PSN_A).with_gid(a1.gid, a1.index);
    let rec_b = b.conn_info(PSN_B).with_gid(a2.gid, a2.index);
    a.connect(&rec_a, &rec_b, &o.conn)?;
    b.connect(&rec_b, &rec_a, &o.conn)?;
    let (ia, ib) = (a.query()?.av, b.query()?.av);
    check_eq!(
        t,
        (ia.dgid, ia.sgid_index),
        (a2.gid, a1.index),
        "a's address vector"
    );
    check_eq!(
        t,
        (ib.dgid, ib.sgid_index),
        (a1.gid, a2.index),
        "b's address vector"
    );

    let len = 3000;
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mut src = pd.reg_mr_buf(len, all)?;
    let dst = guarded(&pd, len, all)?;
    // a SENDs to b.
    src.write_at(0, &pattern(1, len));
    let sge = [dst.sge(GUARD, len as u32)];
    b.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &sge,
    }])?;
    let sge = [src.sge(0, len as u32)];
    a.post_send(&[SendWr::new(2, WrOp::Send, &sge).with_flags(SendFlags::SIGNALED)])?;
    check_wc(
        t,
        &wait_wc(&mut cq_a)?,
        2,
        WcStatus::Success,
        WcOpcode::Send,
        "send",
    );
    check_wc(
        t,
        &wait_wc(&mut cq_b)?,
        1,
        WcStatus::Success,
        WcOpcode::Recv,
        "recv",
    );
    check_guarded(t, &dst, &pattern(1, len), "SEND over IPv4 GIDs");
    // b WRITEs into a's region, then READs it back into its own.
    let target = guarded(&pd, len, all)?;
    src.write_at(0, &pattern(2, len));
    let sge = [src.sge(0, len as u32)];
    let write = WrOp::Write {
        raddr: target.addr() + GUARD as u64,
        rkey: target.rkey(),
    };
    b.post_send(&[SendWr::new(3, write, &sge).with_flags(SendFlags::SIGNALED)])?;
    check_wc(
        t,
        &wait_wc(&mut cq_b)?,
        3,
        WcStatus::Success,
        WcOpcode::RdmaWrite,
        "write",
    );
    check_guarded(t, &target, &pattern(2, len), "WRITE over IPv4 GIDs");
    let back = guarded(&pd, len, all)?;
    let sge = [back.sge(GUARD, len as u32)];
    let read = WrOp::Read {
        raddr: target.addr() + GUARD as u64,
        rkey: target.rkey(),
    };
    a.post_send(&[SendWr::new(4, read, &sge).with_flags(SendFlags::SIGNALED)])?;
    check_wc(
        t,
        &wait_wc(&mut cq_a)?,
        4,
        WcStatus::Success,
        WcOpcode::RdmaRead,
        "read",
    );
    check_guarded(t, &back, &pattern(2, len), "READ over IPv4 GIDs");
    check!(
        t,
        quiet(&mut cq_a).is_empty() && quiet(&mut cq_b).is_empty()
    );

    // A datagram between the two addresses.
    const QKEY: u32 = 0x77;
    let ud_caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_sge: 1,
        max_inline: 64,
    };
    let mut u = Qp::new_ud(&pd, &cq_a, &cq_a, &ud_caps)?;
    let mut v = Qp::new_ud(&pd, &cq_b, &cq_b, &ud_caps)?;
    u.ud_ready(QKEY)?;
    v.ud_ready(QKEY)?;
    let ah = pd.create_ah(&AhAttr {
        traffic_class: 0x20,
        hop_limit: 33,
        ..AhAttr::new(a2.gid).from_index(a1.index)
    })?;
    let dgram = guarded(&pd, GRH_SIZE + 64, Access::LOCAL_WRITE)?;
    let sge = [dgram.sge(GUARD, (GRH_SIZE + 64) as u32)];
    v.post_recv(&[RecvWr {
        wr_id: 5,
        sges: &sge,
    }])?;
    let wr = SendWr::inline(6, WrOp::Send, b"over IPv4")
        .with_flags(SendFlags::SIGNALED)
        .to_ud(ah.dest(v.qpn(), QKEY));
    u.post_send(&[wr])?;
    check_wc(
        t,
        &wait_wc(&mut cq_a)?,
        6,
        WcStatus::Success,
        WcOpcode::Send,
        "UD send",
    );
    let wc = wait_wc(&mut cq_b)?;
    check_wc(t, &wc, 5, WcStatus::Success, WcOpcode::Recv, "UD recv");
    check_eq!(
        t,
        (wc.src_qp, wc.byte_len),
        (u.qpn(), (GRH_SIZE + 9) as u32)
    );
    let area = dgram.to_vec(GUARD, GRH_SIZE);
    check_eq!(t, area[..20], [0u8; 20], "20 zero bytes first");
    let grh = Grh::parse(&area);
    check_eq!(
        t,
        grh.map(|g| (
            g.ip_version,
            g.sgid,
            g.dgid,
            g.traffic_class,
            g.hop_limit,
            g.next_hdr
        )),
        Some((
            4,
            a1.gid,
            a2.gid,
            0x20,
            super::ud::grh_hop_limit(cfg, true)?,
            17
        )),
        "the IPv4 header: {area:02x?}"
    );
    if let Some(g) = grh {
        check_eq!(
            t,
            g.to_bytes().to_vec(),
            area,
            "checksum and lengths as the device wrote"
        );
    }
    check_eq!(t, dgram.to_vec(GUARD + GRH_SIZE, 9), b"over IPv4".to_vec());
    // From an empty entry: refused when the handle is made (the RDMA core finds no GID there:
    // ENODATA, as for any device).
    let empty = ctx
        .query_port()?
        .free_index()
        .ok_or_else(|| fail_msg("no free entry".into()))?;
    let no_gid = EMPTY_ENTRY_ERRNO;
    check_errno!(
        t,
        pd.create_ah(&AhAttr::new(a2.gid).from_index(empty)),
        no_gid,
        "handle from an empty entry"
    );
    Ok(())
}

/// The tools' `-x N` (perftest's): qhca-pingpong over RC and qhca-perf over RC and UD, both
/// sides sending from an IPv4 GID of this port; an empty entry is an error that says so.
pub(super) fn verbs_port_tools_gid_index(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let a1 = Addr::add(cfg, &ctx, A1, 24)?;
    let x = a1.index.to_string();
    // The driver's own node, where SET_GID put the address (the core's table is its netdev's).
    let dev = cfg.dev.display().to_string();
    let tool = |exe: &str, args: &[&str]| -> Result<(Option<i32>, String), Fail> {
        let exe = std::env::current_exe()?.with_file_name(exe);
        let out = Command::new(exe)
            .args(args)
            .args(["-d", &dev, "--loopback", "-n", "20"])
            .output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((out.status.code(), text))
    };
    for (exe, args) in [
        ("qhca-pingpong", &["-x", &x, "-s", "1024", "-c"][..]),
        ("qhca-perf", &["write_lat", "-x", &x]),
        ("qhca-perf", &["ud_send_lat", "-x", &x]),
    ] {
        let (code, text) = tool(exe, args)?;
        check_eq!(t, code, Some(0), "{exe} {args:?}: {text}");
    }
    let empty = ctx
        .query_port()?
        .free_index()
        .ok_or_else(|| fail_msg("no free entry".into()))?
        .to_string();
    let (code, text) = tool("qhca-pingpong", &["-x", &empty])?;
    check!(
        t,
        code == Some(1) && text.contains(&format!("GID index {empty} is empty")),
        "{code:?} {text}"
    );
    Ok(())
}
