// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Unreliable datagram on the real device: datagrams byte for byte behind a GRH whose fields
//! and source are right, the drops (a wrong Q_Key, no receive posted, too long) counted and
//! writing nothing, 64 senders in four contexts on four threads to one receiver, one sender
//! to many receivers, and the address handle's flow label and the controlled Q_Keys.

use super::*;
use qhca::{AhAttr, Grh, GRH_SIZE, UD_MAX_MSG};

const QKEY: u32 = 0x1234_5678;

fn ud_caps(send: u32, recv: u32) -> QpCaps {
    QpCaps {
        max_send_wr: send,
        max_recv_wr: recv,
        max_sge: 2,
        max_inline: 64,
    }
}

/// A UD QP of `pd` in RTS with `qkey`, completing on `cq`.
fn ud_qp(pd: &Pd, cq: &Cq, caps: &QpCaps, qkey: u32) -> qhca::Result<Qp> {
    let qp = Qp::new_ud(pd, cq, cq, caps)?;
    qp.ud_ready(qkey)?;
    Ok(qp)
}

/// Two UD QPs with Q_Key [`QKEY`] on one context, in a [`Pair`] (`a` completes on `cq_a`, `b`
/// on `cq_b`).
fn ud_pair(cfg: &Config) -> Result<Pair, Fail> {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let cq_a = Cq::new(&ctx, 64, None)?;
    let cq_b = Cq::new(&ctx, 64, None)?;
    let a = ud_qp(&pd, &cq_a, &ud_caps(16, 16), QKEY)?;
    let b = ud_qp(&pd, &cq_b, &ud_caps(16, 16), QKEY)?;
    Ok(Pair {
        a,
        b,
        cq_a,
        cq_b,
        pd,
        ctx,
    })
}

/// Posts one receive of `len` bytes at `off` of `mr` on `qp`.
fn post_recv(qp: &mut Qp, mr: &MrBuf, wr_id: u64, off: usize, len: u32) -> Result<(), Fail> {
    let sge = [mr.sge(off, len)];
    qp.post_recv(&[RecvWr { wr_id, sges: &sge }])?;
    Ok(())
}

/// The hop limit a datagram's GRH (or TTL, over IPv4) carries through an AH, whatever the AH
/// asked for: the route's, which the RDMA core puts into every RoCE v2 address vector it
/// resolves (the port's netdev's IPv6 `hop_limit`, or the IPv4 default TTL), as for any RoCE
/// device.
pub(super) fn grh_hop_limit(cfg: &Config, ipv4: bool) -> Result<u8, Fail> {
    let bdf = match system::pci_bdf(cfg) {
        Ok(b) => b,
        Err(e) => bail!("{e}"),
    };
    let Some(ndev) = crate::cases::netdev_of(&bdf) else {
        bail!("{bdf}: no netdev");
    };
    let path = if ipv4 {
        "/proc/sys/net/ipv4/ip_default_ttl".to_owned()
    } else {
        format!("/proc/sys/net/ipv6/conf/{ndev}/hop_limit")
    };
    let text = std::fs::read_to_string(&path)?;
    match text.trim().parse() {
        Ok(h) => Ok(h),
        Err(e) => bail!("{path}: {text:?}: {e}"),
    }
}

/// Datagrams of several sizes, SEND and SEND_WITH_IMM, from SGEs and inline: every byte, the
/// GRH (version, traffic class, flow label, hop limit, PayLen, both GIDs), the CQE's source
/// QPN, length and flags; nothing written past the message.
pub(super) fn verbs_ud_datagrams(t: &mut T, cfg: &Config) -> CaseResult {
    let Pair {
        mut a,
        mut b,
        mut cq_a,
        mut cq_b,
        pd,
        ctx,
    } = ud_pair(cfg)?;
    let gid = ctx.gid();
    check_eq!(
        t,
        gid.subnet_prefix(),
        0xfe80_0000_0000_0000,
        "port GID {gid}"
    );
    check_eq!(
        t,
        gid.interface_id(),
        ctx.attr().node_guid,
        "port GID {gid}"
    );
    let ah = pd.create_ah(&AhAttr {
        flow_label: 0x5_4321,
        traffic_class: 0xa0,
        hop_limit: 9,
        sl: 2,
        ..AhAttr::new(gid)
    })?;
    let mut src = pd.reg_mr_buf(UD_MAX_MSG, Access::LOCAL_WRITE)?;
    let dst = guarded(&pd, GRH_SIZE + UD_MAX_MSG, Access::LOCAL_WRITE)?;
    for (i, &len) in [1usize, 40, 1000, 4095, UD_MAX_MSG].iter().enumerate() {
        let seed = 10 + i as u8;
        let dst = guarded(&pd, GRH_SIZE + len, Access::LOCAL_WRITE)?;
        src.write_at(0, &pattern(seed, len));
        post_recv(
            &mut b,
            &dst,
            0x100 + i as u64,
            GUARD,
            (GRH_SIZE + len) as u32,
        )?;
        let imm = i % 2 == 1;
        let op = if imm {
            WrOp::SendImm(0xabc0 + i as u32)
        } else {
            WrOp::Send
        };
        let sge = [src.sge(0, len as u32)];
        let wr = SendWr::new(0x200 + i as u64, op, &sge)
            .with_flags(SendFlags::SIGNALED)
            .to_ud(ah.dest(b.qpn(), QKEY));
        a.post_send(&[wr])?;
        let wc = wait_wc(&mut cq_a)?;
        check_wc(
            t,
            &wc,
            0x200 + i as u64,
            WcStatus::Success,
            WcOpcode::Send,
            "send",
        );
        let wc = wait_wc(&mut cq_b)?;
        check_wc(
            t,
            &wc,
            0x100 + i as u64,
            WcStatus::Success,
            WcOpcode::Recv,
            "recv",
        );
        check_eq!(t, wc.src_qp, a.qpn(), "src_qp, {len} bytes");
        check_eq!(t, wc.qpn, b.qpn(), "qpn");
        check!(t, wc.with_grh, "{wc:?}");
        check_eq!(t, wc.byte_len as usize, GRH_SIZE + len, "byte_len");
        check_eq!(t, wc.msg_len() as usize, len, "msg_len");
        if imm {
            check_eq!(t, wc.imm, Some(0xabc0 + i as u32), "imm");
        } else {
            check_eq!(t, wc.imm, None, "no imm");
        }
        let mut want = Grh {
            ip_version: 6,
            traffic_class: 0xa0,
            flow_label: 0x5_4321,
            paylen: (12 + 8 + if imm { 4 } else { 0 } + len.div_ceil(4) * 4 + 4) as u16,
            next_hdr: 17,
            hop_limit: grh_hop_limit(cfg, false)?,
            sgid: gid,
            dgid: gid,
        }
        .to_bytes()
        .to_vec();
        want.extend(pattern(seed, len));
        check_guarded(t, &dst, &want, &format!("datagram of {len} bytes"));
        check_eq!(
            t,
            Grh::parse(&dst.to_vec(GUARD, GRH_SIZE)).map(|g| g.sgid),
            Some(gid)
        );
    }
    // Inline, to a QP that is the sender itself.
    post_recv(&mut a, &dst, 0x300, GUARD, 128)?;
    let wr = SendWr::inline(0x301, WrOp::Send, b"to myself")
        .with_flags(SendFlags::SIGNALED)
        .to_ud(ah.dest(a.qpn(), QKEY));
    a.post_send(&[wr])?;
    let got = [wait_wc(&mut cq_a)?, wait_wc(&mut cq_a)?];
    let recv = got.iter().find(|w| w.wr_id == 0x300);
    check!(t, recv.is_some(), "{got:?}");
    if let Some(w) = recv {
        check_eq!(t, (w.src_qp, w.byte_len), (a.qpn(), (GRH_SIZE + 9) as u32));
        check_eq!(t, dst.to_vec(GUARD + GRH_SIZE, 9), b"to myself".to_vec());
    }
    check!(t, quiet(&mut cq_b).is_empty(), "nothing else arrived");
    Ok(())
}

/// A Q_Key that does not match, no receive posted, a datagram that does not fit: each
/// dropped, counted in QUERY_CTX, nothing written, the receive left for the next datagram
/// that fits; the sender is not told (its sends succeed).
pub(super) fn verbs_ud_drops(t: &mut T, cfg: &Config) -> CaseResult {
    let Pair {
        mut a,
        mut b,
        mut cq_a,
        mut cq_b,
        pd,
        ctx,
    } = ud_pair(cfg)?;
    let ah = pd.create_ah(&AhAttr::new(ctx.gid()))?;
    let mut src = pd.reg_mr_buf(4096, Access::LOCAL_WRITE)?;
    src.write_at(0, &pattern(3, 4096));
    let dst = guarded(&pd, GRH_SIZE + 100, Access::LOCAL_WRITE)?;
    let before = ctx.query_ctx()?;
    let to = b.qpn();
    let mut send = |a: &mut Qp, wr_id: u64, len: u32, qkey: u32| -> Result<WcStatus, Fail> {
        let sge = [src.sge(0, len)];
        let wr = SendWr::new(wr_id, WrOp::Send, &sge)
            .with_flags(SendFlags::SIGNALED)
            .to_ud(ah.dest(to, qkey));
        a.post_send(&[wr])?;
        Ok(wait_wc(&mut cq_a)?.status)
    };
    check_eq!(
        t,
        send(&mut a, 1, 50, QKEY)?,
        WcStatus::Success,
        "nothing posted"
    );
    // One receive of GRH + 100 bytes.
    let sge = [dst.sge(GUARD, (GRH_SIZE + 100) as u32)];
    b.post_recv(&[RecvWr {
        wr_id: 0x77,
        sges: &sge,
    }])?;
    check_eq!(
        t,
        send(&mut a, 2, 50, QKEY ^ 0x10)?,
        WcStatus::Success,
        "wrong Q_Key"
    );
    check_eq!(
        t,
        send(&mut a, 3, 101, QKEY)?,
        WcStatus::Success,
        "too long"
    );
    check!(
        t,
        quiet(&mut cq_b).is_empty(),
        "a dropped datagram completed"
    );
    check_guarded(t, &dst, &[GUARD_BYTE; GRH_SIZE + 100], "nothing written");
    let after = ctx.query_ctx()?;
    check_eq!(
        t,
        after.ud_drop_no_recv - before.ud_drop_no_recv,
        1,
        "{after:?}"
    );
    check_eq!(t, after.ud_drop_qkey - before.ud_drop_qkey, 1, "{after:?}");
    check_eq!(
        t,
        after.ud_drop_too_long - before.ud_drop_too_long,
        1,
        "{after:?}"
    );
    check_eq!(t, after.ud_drop_fault, before.ud_drop_fault);
    // The receive is still there for one that fits exactly.
    check_eq!(t, send(&mut a, 4, 100, QKEY)?, WcStatus::Success);
    let wc = wait_wc(&mut cq_b)?;
    check_wc(t, &wc, 0x77, WcStatus::Success, WcOpcode::Recv, "recv");
    check_eq!(t, wc.msg_len(), 100);
    check_eq!(t, dst.to_vec(GUARD + GRH_SIZE, 100), pattern(3, 100));
    check_eq!(
        t,
        b.query()?.state,
        QpState::Rts,
        "the receiver stayed in RTS"
    );
    Ok(())
}

/// 64 UD QPs in four contexts, each context on its own thread, sending 16 datagrams each at
/// once to one receiver that has a receive posted for every one: all 1024 arrive, each
/// sender's in its order, with the sender's QPN; no drop counted.
pub(super) fn verbs_ud_many_to_one(t: &mut T, cfg: &Config) -> CaseResult {
    const CTXS: usize = 4;
    const PER_CTX: usize = 16;
    const EACH: usize = 16;
    const TOTAL: usize = CTXS * PER_CTX * EACH;
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let mut cq = Cq::new(&ctx, TOTAL as u32, None)?;
    let mut rx = ud_qp(&pd, &cq, &ud_caps(1, TOTAL as u32), QKEY)?;
    let slot = 64usize;
    let dst = pd.reg_mr_buf(TOTAL * slot, Access::LOCAL_WRITE)?;
    for i in 0..TOTAL {
        post_recv(&mut rx, &dst, i as u64, i * slot, slot as u32)?;
    }
    let gid = ctx.gid();
    let rx_qpn = rx.qpn();
    let dev = cfg.dev.clone();
    // Each thread: its own context, PD, AH and 16 QPs; (sender index, QPN) of every QP.
    let senders: Vec<Vec<(u32, u32)>> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..CTXS)
            .map(|c| {
                let dev = dev.clone();
                s.spawn(move || -> qhca::Result<Vec<(u32, u32)>> {
                    let ctx = Arc::new(Context::open(&dev)?);
                    let pd = Pd::new(&ctx)?;
                    let mut cq = Cq::new(&ctx, (PER_CTX * EACH) as u32, None)?;
                    let ah = pd.create_ah(&AhAttr::new(gid))?;
                    let mut src = pd.reg_mr_buf(PER_CTX * EACH * 8, Access::LOCAL_WRITE)?;
                    let mut qps = Vec::new();
                    for _ in 0..PER_CTX {
                        qps.push(ud_qp(&pd, &cq, &ud_caps(EACH as u32, 1), QKEY)?);
                    }
                    let mut ids = Vec::new();
                    for (q, qp) in qps.iter().enumerate() {
                        let sender = (c * PER_CTX + q) as u32;
                        ids.push((sender, qp.qpn()));
                        for k in 0..EACH {
                            let off = (q * EACH + k) * 8;
                            let mut m = sender.to_le_bytes().to_vec();
                            m.extend((k as u32).to_le_bytes());
                            src.write_at(off, &m);
                        }
                    }
                    // Round-robin over the QPs, a doorbell per datagram.
                    for k in 0..EACH {
                        for (q, qp) in qps.iter_mut().enumerate() {
                            let sge = [src.sge((q * EACH + k) * 8, 8)];
                            let wr = SendWr::new(k as u64, WrOp::Send, &sge)
                                .with_flags(SendFlags::SIGNALED)
                                .to_ud(ah.dest(rx_qpn, QKEY));
                            qp.post_send(&[wr]).map_err(|e| qhca::Error::Invalid {
                                what: format!("post: {e}"),
                            })?;
                        }
                    }
                    let mut wc = [Wc::default(); 32];
                    let mut done = 0;
                    let end = Instant::now() + WC_TIMEOUT;
                    while done < PER_CTX * EACH && Instant::now() < end {
                        let n = cq.poll(&mut wc);
                        for w in &wc[..n] {
                            if w.status != WcStatus::Success {
                                return Err(qhca::Error::Invalid {
                                    what: format!("send completion {w:?}"),
                                });
                            }
                        }
                        done += n;
                    }
                    if done < PER_CTX * EACH {
                        return Err(qhca::Error::Invalid {
                            what: format!("{done} send completions of {}", PER_CTX * EACH),
                        });
                    }
                    Ok(ids)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|h| h.join().expect("sender thread panicked"))
            .collect::<qhca::Result<_>>()
    })?;
    let qpn_of: std::collections::HashMap<u32, u32> = senders.into_iter().flatten().collect();
    check_eq!(t, qpn_of.len(), CTXS * PER_CTX, "senders");
    let mut next = vec![0u32; CTXS * PER_CTX];
    let mut wc = [Wc::default(); 64];
    let mut got = 0;
    let end = Instant::now() + WC_TIMEOUT;
    while got < TOTAL && Instant::now() < end {
        let n = cq.poll(&mut wc);
        for w in &wc[..n] {
            check_eq!(t, (w.status, w.msg_len()), (WcStatus::Success, 8), "{w:?}");
            let m = dst.to_vec(w.wr_id as usize * slot + GRH_SIZE, 8);
            let sender = u32::from_le_bytes(m[0..4].try_into().unwrap());
            let k = u32::from_le_bytes(m[4..8].try_into().unwrap());
            let Some(&qpn) = qpn_of.get(&sender) else {
                bail!("datagram from unknown sender {sender}: {m:?}");
            };
            check_eq!(t, w.src_qp, qpn, "sender {sender}'s QPN");
            check_eq!(
                t,
                k,
                next[sender as usize],
                "sender {sender}: in order, none lost"
            );
            next[sender as usize] = k + 1;
        }
        got += n;
    }
    check_eq!(t, got, TOTAL, "datagrams received");
    check!(t, quiet(&mut cq).is_empty(), "more than was sent");
    check_eq!(t, ctx.query_ctx()?.ud_drops(), 0, "drops at the receiver");
    Ok(())
}

/// One QP sending to 16 receivers, each with its own Q_Key, in two contexts: each gets its
/// datagram and no other.
pub(super) fn verbs_ud_one_to_many(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let mut cq = Cq::new(&ctx, 64, None)?;
    let mut a = ud_qp(&pd, &cq, &ud_caps(32, 1), QKEY)?;
    let ah = pd.create_ah(&AhAttr::new(ctx.gid()))?;
    let mut src = pd.reg_mr_buf(16 * 32, Access::LOCAL_WRITE)?;
    let mut rx = Vec::new();
    let mut cqs = Vec::new();
    for c in 0..2 {
        let ctx = Arc::new(Context::open(&cfg.dev)?);
        let pd = Pd::new(&ctx)?;
        let cq = Cq::new(&ctx, 16, None)?;
        for i in 0..8 {
            let n = c * 8 + i;
            let mut qp = ud_qp(&pd, &cq, &ud_caps(1, 4), 0x100 + n as u32)?;
            let mr = guarded(&pd, GRH_SIZE + 32, Access::LOCAL_WRITE)?;
            post_recv(&mut qp, &mr, n as u64, GUARD, (GRH_SIZE + 32) as u32)?;
            rx.push((qp, mr));
        }
        cqs.push(cq);
    }
    for (n, (qp, _)) in rx.iter().enumerate() {
        src.write_at(n * 32, &pattern(n as u8, 32));
        let sge = [src.sge(n * 32, 32)];
        let wr = SendWr::new(n as u64, WrOp::Send, &sge)
            .with_flags(SendFlags::SIGNALED)
            .to_ud(ah.dest(qp.qpn(), 0x100 + n as u32));
        a.post_send(&[wr])?;
        check_eq!(t, wait_wc(&mut cq)?.status, WcStatus::Success);
    }
    for (c, cq) in cqs.iter_mut().enumerate() {
        for _ in 0..8 {
            let w = wait_wc(cq)?;
            let n = w.wr_id as usize;
            check!(t, n / 8 == c, "receiver {n}'s CQE on context {c}'s CQ");
            let Some((qp, mr)) = rx.get(n) else {
                bail!("unknown wr_id {w:?}");
            };
            check_eq!(
                t,
                (w.status, w.qpn, w.src_qp),
                (WcStatus::Success, qp.qpn(), a.qpn())
            );
            check_eq!(
                t,
                mr.to_vec(GUARD + GRH_SIZE, 32),
                pattern(n as u8, 32),
                "receiver {n}"
            );
            check!(
                t,
                mr.to_vec(GUARD + GRH_SIZE + 32, GUARD)
                    .iter()
                    .all(|&b| b == GUARD_BYTE)
            );
        }
        check!(t, quiet(cq).is_empty(), "one datagram per receiver");
    }
    Ok(())
}

/// The widest flow label (20 bits) makes an address handle. A Q_Key with the high bit set (a
/// controlled one) needs CAP_NET_RAW: EPERM on a thread without it, the QP's Q_Key unchanged;
/// fine as root.
pub(super) fn verbs_ud_ah_checks(t: &mut T, cfg: &Config) -> CaseResult {
    let ctx = Arc::new(Context::open(&cfg.dev)?);
    let pd = Pd::new(&ctx)?;
    let ah = pd.create_ah(&AhAttr {
        flow_label: 0xf_ffff,
        ..AhAttr::new(ctx.gid())
    });
    check!(t, ah.is_ok(), "flow label 0xfffff: {ah:?}");

    let set = |qp: &Qp| {
        qp.modify(&QpAttr {
            qkey: Some(qhca::QKEY_CONTROLLED | 1),
            ..QpAttr::default()
        })
    };
    // The core refuses the commands of a thread whose credentials are not those the file was
    // opened with, and dropping a capability makes new ones: the thread opens its own context
    // after it, so that only the Q_Key is what is refused.
    let (unprivileged, qkey) = std::thread::scope(|s| {
        s.spawn(|| -> Result<_, Fail> {
            system::drop_cap(system::CAP_NET_RAW)?;
            let ctx = Arc::new(Context::open(&cfg.dev)?);
            let pd = Pd::new(&ctx)?;
            let cq = Cq::new(&ctx, 8, None)?;
            let qp = Qp::new_ud(&pd, &cq, &cq, &ud_caps(1, 1))?;
            qp.to_init_ud(QKEY)?;
            let r = set(&qp);
            Ok((r, qp.query()?.qkey))
        })
        .join()
        .expect("thread panicked")
    })?;
    check!(
        t,
        matches!(&unprivileged, Err(e) if e.errno() == Some(Errno::EPERM)),
        "without CAP_NET_RAW: {unprivileged:?}"
    );
    check_eq!(t, qkey, QKEY, "unchanged");

    let cq = Cq::new(&ctx, 8, None)?;
    let qp = Qp::new_ud(&pd, &cq, &cq, &ud_caps(1, 1))?;
    qp.to_init_ud(QKEY)?;
    let privileged = set(&qp);
    check!(t, privileged.is_ok(), "as root: {privileged:?}");
    check_eq!(t, qp.query()?.qkey, qhca::QKEY_CONTROLLED | 1);
    Ok(())
}
