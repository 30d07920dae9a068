// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The port on the real device: QUERY_PORT from a program (and the driver's checks of its
//! argument, and CREATE_AH_V1 still answered), SET_GID's checks and its need of CAP_NET_ADMIN,
//! `qhca-info addr` adding, listing and deleting an address, an RC QP whose address vector
//! names an IPv4 GID nobody has (its requests fail with RETRY_EXC_ERR), an RC pair that moves
//! data between two IPv4 GIDs of this device, and a datagram between them, whose GRH area
//! holds the IPv4 header.
//!
//! Every case takes back the addresses it gives the port ([`Addr`]), also when it fails: the
//! table belongs to the device, and perftest picks an IPv4 GID when it finds one.

use super::ud::drop_cap;
use super::*;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;

use qhca::{AhAttr, Gid, Grh, PortState, Wire, GID_TABLE_LEN, GRH_SIZE};
use qhca_uapi::{
    qhca_ah_attr, qhca_gid_entry, qhca_ioc_create_ah, qhca_ioc_query_port, qhca_ioc_set_gid,
    QHCA_IOCTL_CREATE_AH_V1, QHCA_IOCTL_QUERY_PORT, QHCA_IOCTL_SET_GID,
};

/// `CAP_NET_ADMIN` (linux/capability.h).
const CAP_NET_ADMIN: u32 = 12;

/// Addresses the cases give the port (a subnet nothing else here uses).
const A1: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
const A2: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// An address nobody has.
const NOBODY: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 99);

/// An address given to the port, taken back on drop: by SET_GID on the driver's own node; on
/// the RDMA core's, as the port's netdev's address (`noprefixroute`: the netdev carries no IP
/// traffic), which the core hands to the driver.
struct Addr {
    ctx: Arc<Context>,
    index: u8,
    gid: Gid,
    /// The netdev and `A.B.C.D/N`, on the core's node.
    netdev: Option<(String, String)>,
}

impl Addr {
    #[track_caller]
    fn add(cfg: &Config, ctx: &Arc<Context>, addr: Ipv4Addr, prefix_len: u8) -> Result<Addr, Fail> {
        let gid = Gid::from_ipv4(addr);
        if !cfg.on_core_node() {
            let index = ctx.add_ipv4(addr, prefix_len)?;
            return Ok(Addr {
                ctx: ctx.clone(),
                index,
                gid,
                netdev: None,
            });
        }
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
            ctx: ctx.clone(),
            index: 0,
            gid,
            netdev: Some((ndev, cidr)),
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
        match &self.netdev {
            Some((ndev, cidr)) => {
                let _ = crate::cases::ip(&["addr", "del", cidr, "dev", ndev]);
            }
            None => {
                let _ = self.ctx.set_gid(self.index, None);
            }
        }
    }
}

/// What naming an empty GID entry as an address vector's source gets: `EINVAL` from the driver's
/// own node; `ENODATA` from the RDMA core's, which finds no GID there (as for any device).
fn empty_entry_errno(cfg: &Config) -> Errno {
    if cfg.on_core_node() {
        Errno::ENODATA
    } else {
        Errno::EINVAL
    }
}

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

/// A raw ioctl argument: `size` first, the rest zero.
fn raw_arg(size: usize) -> Box<crate::sys::IoctlBuf> {
    let mut buf = crate::sys::IoctlBuf::new();
    buf.0[0..4].copy_from_slice(&(size as u32).to_ne_bytes());
    buf
}

/// `QHCA_IOCTL_SET_GID` with `entry` at `index`, bypassing the provider's checks; `edit` may
/// change the argument's bytes before it goes.
fn set_gid_raw(
    ctx: &Context,
    index: u32,
    entry: qhca_gid_entry,
    edit: impl FnOnce(&mut [u8]),
) -> Result<(), Errno> {
    use std::mem::{offset_of, size_of};
    let mut buf = raw_arg(size_of::<qhca_ioc_set_gid>());
    let at = offset_of!(qhca_ioc_set_gid, index);
    buf.0[at..at + 4].copy_from_slice(&index.to_ne_bytes());
    let at = offset_of!(qhca_ioc_set_gid, entry);
    buf.0[at..at + 16].copy_from_slice(&entry.gid);
    buf.0[at + offset_of!(qhca_gid_entry, flags)] = entry.flags;
    buf.0[at + offset_of!(qhca_gid_entry, prefix_len)] = entry.prefix_len;
    edit(&mut buf.0[..size_of::<qhca_ioc_set_gid>()]);
    crate::sys::ioctl_buf(ctx.as_raw_fd(), QHCA_IOCTL_SET_GID, &mut buf).map(drop)
}

/// A valid table entry for `gid`.
fn entry(gid: Gid, prefix_len: u8) -> qhca_gid_entry {
    qhca_gid_entry {
        gid: gid.raw,
        flags: qhca_uapi::QHCA_GID_VALID as u8,
        prefix_len,
        rsvd: [0; 6],
    }
}

/// QUERY_PORT from a program: the port is up, MTU 4096, a table of 16 whose entry 0 is the
/// link-local GID of QUERY_DEVICE; a second context and a thread without CAP_NET_ADMIN see the
/// same. The driver's checks of the argument (size, comp_mask, reserved), and the CREATE_AH of
/// programs built before `sgid_index` (QHCA_IOCTL_CREATE_AH_V1, 40 bytes) still answered.
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

    // The argument: exactly its size, no comp_mask, reserved zero.
    use std::mem::{offset_of, size_of};
    let size = size_of::<qhca_ioc_query_port>();
    let query = |edit: &dyn Fn(&mut [u8])| {
        let mut buf = raw_arg(size);
        edit(&mut buf.0[..size]);
        crate::sys::ioctl_buf(ctx.as_raw_fd(), QHCA_IOCTL_QUERY_PORT, &mut buf).map(|_| buf)
    };
    let good = query(&|_| {});
    check!(t, good.is_ok(), "{:?}", good.as_ref().err());
    if let Ok(buf) = good {
        let at = offset_of!(qhca_ioc_query_port, attr);
        check_eq!(t, buf.0[at..at + 6], p.mac, "MAC through the raw ioctl");
    }
    let set_u32 =
        |at: usize, v: u32| move |b: &mut [u8]| b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    check_errno!(
        t,
        query(&set_u32(0, size as u32 - 8)).map(drop),
        Errno::EINVAL,
        "size"
    );
    check_errno!(
        t,
        query(&set_u32(4, 1)).map(drop),
        Errno::EINVAL,
        "comp_mask"
    );
    check_errno!(
        t,
        query(&set_u32(offset_of!(qhca_ioc_query_port, rsvd), 1)).map(drop),
        Errno::EINVAL,
        "rsvd"
    );

    // CREATE_AH_V1: the 40-byte struct of before, sending from GID 0.
    let pd = Pd::new(&ctx)?;
    let v1 = qhca_uapi::ioctl::CREATE_AH_V1_SIZE;
    let create_v1 = |size_field: usize| {
        let mut buf = raw_arg(size_field);
        let pdn = offset_of!(qhca_ioc_create_ah, pdn);
        buf.0[pdn..pdn + 4].copy_from_slice(&pd.pdn().to_ne_bytes());
        let attr = offset_of!(qhca_ioc_create_ah, attr);
        buf.0[attr..attr + 16].copy_from_slice(&ctx.gid().raw);
        buf.0[attr + offset_of!(qhca_ah_attr, port_num)] = 1;
        buf.0[attr + offset_of!(qhca_ah_attr, hop_limit)] = 64;
        crate::sys::ioctl_buf(ctx.as_raw_fd(), QHCA_IOCTL_CREATE_AH_V1, &mut buf).map(|_| {
            let at = offset_of!(qhca_ioc_create_ah, ah);
            (
                u32::from_ne_bytes(buf.0[at..at + 4].try_into().unwrap()),
                // The byte after the V1 struct: not the driver's to write.
                buf.0[v1],
            )
        })
    };
    let ah = create_v1(v1);
    check!(t, matches!(ah, Ok((_, 0))), "CREATE_AH_V1: {ah:?}");
    if let Ok((ah, _)) = ah {
        check!(
            t,
            destroy_raw(&ctx, ObjKind::Ah, ah).is_ok(),
            "DESTROY_AH of it"
        );
    }
    check_errno!(
        t,
        create_v1(size_of::<qhca_ioc_create_ah>()),
        Errno::EINVAL,
        "V1's number with today's size"
    );
    Ok(())
}

/// SET_GID: an address lands in the table (seen by every context) and goes again; the driver
/// refuses index 0 or 16, flags other than VALID, a GID that is not IPv4-mapped, a prefix above
/// 32, reserved bytes and an empty entry with a prefix; the device refuses loopback, multicast
/// and an address in another entry. Without CAP_NET_ADMIN: EPERM, the table unchanged.
pub(super) fn verbs_port_set_gid(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let other = Context::open(&cfg.dev)?;
    let a1 = Addr::add(cfg, &ctx, A1, 24)?;
    let seen = other.query_port()?;
    check_eq!(
        t,
        seen.gid(a1.index).map(|e| (e.gid, e.prefix_len, e.ipv4())),
        Some((a1.gid, 24, Some(A1))),
        "another context sees it"
    );
    check!(t, a1.index >= 1, "index {}", a1.index);
    check_errno!(t, ctx.add_ipv4(A1, 16), Errno::EEXIST, "twice");
    check_errno!(t, ctx.del_ipv4(A2), Errno::ENOENT, "not there");
    // Replacing an entry: same index, new prefix.
    ctx.set_gid(a1.index, Some((A1, 16)))?;
    check_eq!(
        t,
        ctx.query_port()?.gid(a1.index).map(|e| e.prefix_len),
        Some(16)
    );

    let free = ctx
        .query_port()?
        .free_index()
        .ok_or_else(|| fail_msg("no free entry".into()))?;
    let a2 = Gid::from_ipv4(A2);
    for (what, index, e, edit) in [
        ("index 0", 0, entry(a2, 24), None),
        ("index 16", 16, entry(a2, 24), None),
        (
            "flags 3",
            free,
            qhca_gid_entry {
                flags: 3,
                ..entry(a2, 24)
            },
            None,
        ),
        ("not IPv4-mapped", free, entry(ctx.gid(), 24), None),
        ("prefix 33", free, entry(a2, 33), None),
        (
            "empty with a prefix",
            free,
            qhca_gid_entry {
                flags: 0,
                ..entry(Gid::default(), 8)
            },
            None,
        ),
        (
            "loopback",
            free,
            entry(Gid::from_ipv4(Ipv4Addr::LOCALHOST), 8),
            None,
        ),
        (
            "multicast",
            free,
            entry(Gid::from_ipv4(Ipv4Addr::new(224, 0, 0, 1)), 4),
            None,
        ),
        ("another entry's address", free, entry(a1.gid, 24), None),
        (
            "entry rsvd",
            free,
            entry(a2, 24),
            Some(std::mem::offset_of!(qhca_ioc_set_gid, entry) + 18),
        ),
        (
            "rsvd",
            free,
            entry(a2, 24),
            Some(std::mem::offset_of!(qhca_ioc_set_gid, rsvd)),
        ),
        ("comp_mask", free, entry(a2, 24), Some(4)),
    ] {
        let r = set_gid_raw(&ctx, index.into(), e, |b| {
            if let Some(at) = edit {
                b[at] = 1;
            }
        });
        check_errno!(t, r, Errno::EINVAL, "{what}");
    }
    check!(
        t,
        ctx.query_port()?.gid(free).is_none(),
        "nothing refused landed"
    );

    // CAP_NET_ADMIN: asked of every change, adding and emptying alike.
    let r = without_net_admin(|| ctx.set_gid(free, Some((A2, 24))))?;
    check_errno!(t, r, Errno::EPERM, "add without CAP_NET_ADMIN");
    let r = without_net_admin(|| ctx.set_gid(a1.index, None))?;
    check_errno!(t, r, Errno::EPERM, "delete without CAP_NET_ADMIN");
    let after = ctx.query_port()?;
    check!(
        t,
        after.gid(free).is_none() && after.gid(a1.index).map(|e| e.gid) == Some(a1.gid),
        "the table changed: {:?}",
        after.gids
    );

    check_eq!(t, ctx.del_ipv4(A1)?, a1.index);
    check!(t, ctx.query_port()?.find(&a1.gid).is_none(), "deleted");
    Ok(())
}

/// `qhca-info -d /dev/qhcaN addr add`, `addr`, `addr del` on this device's own node: the line
/// of the entry added, the listing with it and then without it; the same address twice, or one
/// that is not there, is an error (exit 1) that says why. On the RDMA core's device the port's
/// addresses are its netdev's: `addr add` there is an error that names the `ip` command.
pub(super) fn verbs_port_addr_tool(t: &mut T, cfg: &Config) -> CaseResult {
    let exe = std::env::current_exe()?.with_file_name("qhca-info");
    require!(t, exe.exists(), "{} not built", exe.display());
    let name = cfg
        .dev
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| fail_msg(format!("device {}", cfg.dev.display())))?
        .to_owned();
    let core = super::uverbs::core_device(cfg)?;
    let out = Command::new(&exe)
        .args(["-d", &core.name, "addr", "add", "10.77.0.2/24"])
        .output()?;
    let ndev = core.netdev().unwrap_or_default();
    check!(
        t,
        out.status.code() == Some(1)
            && String::from_utf8_lossy(&out.stderr)
                .contains(&format!("ip addr add 10.77.0.2/24 dev {ndev}")),
        "addr add on {}: {}",
        core.name,
        crate::system::describe(&out)
    );
    let run = |args: &[&str]| -> Result<(Option<i32>, String), Fail> {
        let out = Command::new(&exe)
            .arg("-d")
            .arg(&cfg.dev)
            .args(args)
            .output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((out.status.code(), text))
    };
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    // Taken back whatever happens below.
    let guard = |ctx: &Arc<Context>| {
        let _ = ctx.del_ipv4(A2);
    };
    guard(&ctx);
    let (code, text) = run(&["addr", "add", "10.77.0.2/24"])?;
    let index = ctx.query_port()?.find(&Gid::from_ipv4(A2)).map(|e| e.index);
    let result = (|| {
        check_eq!(t, code, Some(0), "{text}");
        require!(
            t,
            index.is_some(),
            "not in the table after addr add: {text}"
        );
        let index = index.unwrap_or(0);
        let line = format!("gid {index} ::ffff:10.77.0.2 (10.77.0.2/24) RoCEv2");
        check_eq!(t, text.trim(), format!("{name}: {line}"));
        let (code, text) = run(&["addr"])?;
        check_eq!(t, code, Some(0), "{text}");
        check!(
            t,
            text.starts_with(&format!("{name}: port 1 PORT_ACTIVE mac ")),
            "{text}"
        );
        check!(t, text.lines().any(|l| l.trim() == line), "{text}");
        check!(
            t,
            text.lines().any(|l| l.trim().starts_with("gid 0 fe80:")),
            "{text}"
        );
        let (code, text) = run(&[])?;
        check_eq!(t, code, Some(0));
        check!(t, text.contains(&line), "the attributes list it: {text}");
        let (code, text) = run(&["addr", "add", "10.77.0.2/16"])?;
        check!(
            t,
            code == Some(1) && text.contains("already at index") && text.contains("EEXIST"),
            "{code:?} {text}"
        );
        let (code, text) = run(&["addr", "del", "10.77.0.2"])?;
        check_eq!(t, code, Some(0), "{text}");
        check_eq!(
            t,
            text.trim(),
            format!("{name}: deleted gid {index} ::ffff:10.77.0.2")
        );
        let (_, text) = run(&["addr"])?;
        check!(t, !text.contains("10.77.0.2"), "{text}");
        let (code, text) = run(&["addr", "del", "10.77.0.2"])?;
        check!(
            t,
            code == Some(1) && text.contains("not in the table"),
            "{code:?} {text}"
        );
        Ok(())
    })();
    guard(&ctx);
    result
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
    let no_gid = empty_entry_errno(cfg);
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
            super::ud::grh_hop_limit(cfg, 33, true)?,
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
    let no_gid = empty_entry_errno(cfg);
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
