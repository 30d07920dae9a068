// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Push-push messaging (the `pushpush` crate) on the real device: pool exhaustion and
//! replenishment, a flush during traffic, both directions at once, a pool asked for, many
//! connections, a hostile peer; and the split-model network driver (`qhca-splitnet`, in
//! [`splitnet`]) driven by ping and a TCP transfer, surviving kill -9 of either half.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pushpush::wire::{ElemRef, Imm, Msg};
use pushpush::{Config, Connection, Event, Listener, PoolShape};
use qhca::Context;

use crate::harness::{Case, CaseResult, Fail, T};
use crate::system::Config as VmConfig;
use crate::{bail, check, check_eq, require};

mod splitnet;

/// How long anything may take (TCG).
const LONG: Duration = Duration::from_secs(30);

/// The cases, in order.
pub fn cases() -> Vec<Case<VmConfig>> {
    macro_rules! cases {
        ($($name:path),* $(,)?) => {
            vec![$(Case { name: last(stringify!($name)), run: $name }),*]
        };
    }
    cases![
        pp_exhaustion_and_replenish,
        pp_both_directions_at_once,
        pp_flush_during_traffic,
        pp_pool_asked_for,
        pp_many_connections,
        pp_hostile_peer_closes_the_connection,
        splitnet::splitnet_ping_and_tcp_survive_restarts,
    ]
}

fn last(path: &'static str) -> &'static str {
    path.rsplit("::").next().unwrap_or(path).trim()
}

/// A connected pair on one device: (the accepting side, the connecting side).
fn pair(cfg: &VmConfig, a: &Config, b: &Config) -> Result<(Connection, Connection), Fail> {
    pair_on(&Arc::new(Context::open(&cfg.dev)?), a, b)
}

/// [`pair`] on a context of the caller's.
fn pair_on(ctx: &Arc<Context>, a: &Config, b: &Config) -> Result<(Connection, Connection), Fail> {
    let l = Listener::bind("127.0.0.1:0")?;
    let port = l.port();
    let (ctx2, b) = (Arc::clone(ctx), b.clone());
    let h = thread::spawn(move || Connection::connect(&ctx2, ("127.0.0.1", port), &b));
    let srv = l.accept(ctx, a)?;
    let cli = h
        .join()
        .map_err(|_| Fail::new(file!(), line!(), "connect panicked"))??;
    Ok((srv, cli))
}

/// A message: its sequence number, its length, then bytes that depend on both.
fn message(seq: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(seq.wrapping_mul(17)) as u8
        })
        .collect();
    if len >= 8 {
        v[..4].copy_from_slice(&seq.to_le_bytes());
        v[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    }
    v
}

/// The sequence number of a received message, if its bytes are exactly [`message`]'s.
fn verify(b: &[u8]) -> Option<u32> {
    if b.len() < 8 {
        return None;
    }
    let seq = u32::from_le_bytes(b[..4].try_into().ok()?);
    (message(seq, b.len()) == b).then_some(seq)
}

fn cfg(pools: &[(u32, u32)]) -> Config {
    Config {
        pools: pools
            .iter()
            .map(|&(count, size)| PoolShape { count, size })
            .collect(),
        timeout: LONG,
        ..Config::default()
    }
}

/// The next data delivery (other events kept aside), within [`LONG`].
fn next_data(c: &mut Connection, other: &mut Vec<Event>) -> Result<pushpush::Delivery, Fail> {
    let t0 = Instant::now();
    while t0.elapsed() < LONG {
        match c.poll(Some(Duration::from_millis(200)))? {
            Some(Event::Data(d)) => return Ok(d),
            Some(e) => other.push(e),
            None => {}
        }
    }
    bail!("no delivery within {LONG:?}")
}

/// An initiator never writes an element that is consumed and not replenished: with all four
/// elements consumed it waits; one release lets exactly that element be written again.
/// SendData and a CfgUtil request/reply go through on the control channel meanwhile.
fn pp_exhaustion_and_replenish(t: &mut T, cfg_: &VmConfig) -> CaseResult {
    let a_cfg = Config {
        update_batch: 1,
        ..cfg(&[(4, 256)])
    };
    let (mut a, mut b) = pair(cfg_, &a_cfg, &cfg(&[]))?;
    let deadline = Some(Instant::now() + LONG);
    let mut at = Vec::new();
    for seq in 0..4 {
        at.push(b.push(&message(seq, 200 + seq as usize), deadline)?);
    }
    let mut distinct = at.clone();
    distinct.sort();
    distinct.dedup();
    check_eq!(t, distinct.len(), 4, "four different elements: {at:?}");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(500) {
        if let Some(e) = b.try_push(&message(99, 64))? {
            bail!("pushed into {e:?} with every element consumed");
        }
    }
    let mut other = Vec::new();
    let mut held = Vec::new();
    for _ in 0..4 {
        let d = next_data(&mut a, &mut other)?;
        let got = a.read(&d);
        check!(t, verify(&got).is_some(), "delivery {:?} bytes", d.at());
        check_eq!(t, d.len() as usize, got.len());
        held.push(d);
    }
    check!(
        t,
        b.try_push(&message(99, 64))?.is_none(),
        "still nothing free"
    );
    let first = held.remove(0);
    let freed = first.at();
    a.release(first)?;
    let again = b.push(&message(4, 100), Some(Instant::now() + LONG))?;
    check_eq!(
        t,
        again,
        freed,
        "the one replenished element is the one written"
    );
    let d = next_data(&mut a, &mut other)?;
    check_eq!(t, verify(&a.read(&d)), Some(4));
    held.push(d);
    for d in held {
        a.release(d)?;
    }
    // A zero-copy push, from a region of the connection's own PD.
    let mut src = b.reg_buf(4096)?;
    src.write_at(100, &message(9, 200));
    b.push_from(&src, 100, 200, Some(Instant::now() + LONG))?;
    let d = next_data(&mut a, &mut other)?;
    check_eq!(t, verify(&a.read(&d)), Some(9), "the zero-copy push");
    a.release(d)?;
    // The control channel, both message kinds.
    b.send_data(b"hello over SendData")?;
    let xid = b.request(7, b"what is your mtu")?;
    let mut got_data = false;
    let mut got_req = false;
    let t0 = Instant::now();
    while !(got_data && got_req) && t0.elapsed() < LONG {
        match a.poll(Some(Duration::from_millis(100)))? {
            Some(Event::SendData(v)) => {
                check_eq!(t, v.as_slice(), b"hello over SendData".as_slice());
                got_data = true;
            }
            Some(Event::CfgRequest { xid: x, code, data }) => {
                check_eq!(
                    t,
                    (code, data.as_slice()),
                    (7, b"what is your mtu".as_slice())
                );
                a.reply(x, code, 0, &1500u32.to_le_bytes())?;
                got_req = true;
            }
            _ => {}
        }
    }
    require!(
        t,
        got_data && got_req,
        "SendData {got_data}, CfgUtilRequest {got_req}"
    );
    let t0 = Instant::now();
    let mut reply = None;
    while reply.is_none() && t0.elapsed() < LONG {
        if let Some(Event::CfgReply {
            xid: x,
            code,
            status,
            data,
        }) = b.poll(Some(Duration::from_millis(100)))?
        {
            reply = Some((x, code, status, data));
        }
    }
    check_eq!(
        t,
        reply,
        Some((xid, 7, 0, 1500u32.to_le_bytes().to_vec())),
        "the reply echoes the transaction context"
    );
    check_eq!(t, b.stats().pushed_imm, 6);
    Ok(())
}

/// One side's traffic in [`pp_both_directions_at_once`]: pushes `n` messages while receiving
/// the peer's; returns the sequence numbers received (in order of arrival) and the stats.
type SideResult = (Vec<u32>, pushpush::Stats, u32, Connection);

fn both_ways(mut c: Connection, n: u32, sizes: &'static [usize]) -> Result<SideResult, String> {
    let mut sent = 0;
    let mut got = Vec::new();
    let mut bad = 0;
    let t0 = Instant::now();
    while (sent < n || got.len() < n as usize) && t0.elapsed() < Duration::from_secs(120) {
        if sent < n {
            let m = message(sent, sizes[sent as usize % sizes.len()]);
            if c.try_push(&m).map_err(|e| e.to_string())?.is_some() {
                sent += 1;
            }
        }
        while let Some(ev) = c.try_event().map_err(|e| e.to_string())? {
            if let Event::Data(d) = ev {
                match verify(&c.read(&d)) {
                    Some(s) => got.push(s),
                    None => bad += 1,
                }
                c.release(d).map_err(|e| e.to_string())?;
            }
        }
    }
    // The peer gets the last replenishments; the connection lives until both sides are done.
    c.arm().map_err(|e| e.to_string())?;
    Ok((got, c.stats(), bad, c))
}

/// Both sides push and receive at once on one connection, sizes from 8 bytes to beyond what
/// the immediate can describe (70,000 bytes: WRITE + BufferRDMAIndicate); every message
/// arrives once, byte for byte.
fn pp_both_directions_at_once(t: &mut T, cfg_: &VmConfig) -> CaseResult {
    const SIZES: &[usize] = &[8, 100, 1500, 4096, 65536, 70_000, 9000, 300];
    let c = cfg(&[(64, 4096), (8, 131_072)]);
    let (a, b) = pair(cfg_, &c, &c)?;
    let n = 1500;
    let ha = thread::spawn(move || both_ways(a, n, SIZES));
    let hb = thread::spawn(move || both_ways(b, n, SIZES));
    let mut keep = Vec::new();
    for (who, h) in [("a", ha), ("b", hb)] {
        let (mut got, st, bad, c) = h
            .join()
            .map_err(|_| Fail::new(file!(), line!(), "a side panicked"))??;
        keep.push(c);
        check_eq!(t, bad, 0, "{who}: corrupted or extra deliveries");
        check_eq!(t, got.len(), n as usize, "{who}: deliveries");
        got.sort_unstable();
        got.dedup();
        check_eq!(t, got.len(), n as usize, "{who}: distinct sequence numbers");
        check!(
            t,
            st.pushed_indicated > 0,
            "{who}: the fallback ran: {st:?}"
        );
        check!(t, st.pushed_imm > st.pushed_indicated, "{who}: {st:?}");
        check!(
            t,
            st.replenished > 0 && st.updates_sent < st.replenished,
            "{who}: batched: {st:?}"
        );
    }
    Ok(())
}

/// The target withdraws the pool the initiator is writing into and advertises a new one,
/// mid-stream; the initiator, in turn, returns one. No message is lost or doubled, the
/// withdrawn pool is freed only after the reply and its last delivery's release.
fn pp_flush_during_traffic(t: &mut T, cfg_: &VmConfig) -> CaseResult {
    let (mut a, b) = pair(cfg_, &cfg(&[(16, 2048), (16, 2048)]), &cfg(&[]))?;
    let n = 1200u32;
    let sender = thread::spawn(move || -> Result<(Connection, u32), String> {
        let mut b = b;
        let mut returned = false;
        for seq in 0..n {
            b.push(&message(seq, 1000), Some(Instant::now() + LONG))
                .map_err(|e| format!("push {seq}: {e}"))?;
            // Halfway, return pool 1 (the initiator's side of a flush).
            if seq == n / 2 && b.peer_pools().iter().any(|p| p.0 == 1) {
                b.return_pool(1).map_err(|e| e.to_string())?;
                returned = true;
            }
        }
        // Let the last flush replies arrive.
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(2) {
            let _ = b.try_event().map_err(|e| e.to_string())?;
        }
        Ok((b, u32::from(returned)))
    });
    let mut seen = vec![0u32; n as usize];
    let mut freed = Vec::new();
    let mut after_free_from_0 = 0;
    let mut new_pool = None;
    let mut received = 0;
    let t0 = Instant::now();
    while received < n && t0.elapsed() < Duration::from_secs(120) {
        match a.poll(Some(Duration::from_millis(200)))? {
            Some(Event::Data(d)) => {
                if freed.contains(&d.at().pool_ref) {
                    after_free_from_0 += 1;
                }
                if let Some(s) = verify(&a.read(&d)) {
                    seen[s as usize] += 1;
                }
                received += 1;
                a.release(d)?;
                if received == n / 3 {
                    new_pool = Some(a.add_pool(
                        PoolShape {
                            count: 8,
                            size: 1024,
                        },
                        0x77,
                    )?);
                    a.flush_pool(0)?;
                }
            }
            Some(Event::PoolFreed(p)) => freed.push(p),
            _ => {}
        }
    }
    let (mut b, returned) = sender
        .join()
        .map_err(|_| Fail::new(file!(), line!(), "the sender panicked"))??;
    // The last flushes settle.
    let t1 = Instant::now();
    while t1.elapsed() < Duration::from_secs(3) && freed.len() < 1 + returned as usize {
        if let Some(Event::PoolFreed(p)) = a.poll(Some(Duration::from_millis(100)))? {
            freed.push(p);
        }
    }
    check_eq!(t, received, n, "deliveries");
    check!(
        t,
        seen.iter().all(|&c| c == 1),
        "each message once: {:?}",
        seen.iter()
            .enumerate()
            .filter(|(_, &c)| c != 1)
            .take(5)
            .collect::<Vec<_>>()
    );
    check_eq!(t, after_free_from_0, 0, "deliveries from a freed pool");
    check!(
        t,
        freed.contains(&0),
        "pool 0 withdrawn and freed: {freed:?}"
    );
    check_eq!(t, returned, 1, "the initiator returned pool 1");
    check!(
        t,
        freed.contains(&1),
        "pool 1 returned and freed: {freed:?}"
    );
    let left: Vec<u32> = a.pools().iter().map(|p| p.0).collect();
    check_eq!(
        t,
        left,
        new_pool.into_iter().collect::<Vec<_>>(),
        "our pools after the flushes"
    );
    let peer: Vec<u32> = b.peer_pools().iter().map(|p| p.0).collect();
    check_eq!(t, peer, left, "the initiator's view of them");
    let _ = b.try_event();
    Ok(())
}

/// A push bigger than every pool of the peer's asks for one (BufferRecvPoolGet), waits, and
/// goes into the granted pool; once the peer's grants are used up, such a push waits until its
/// deadline instead of failing.
fn pp_pool_asked_for(t: &mut T, cfg_: &VmConfig) -> CaseResult {
    let a_cfg = Config {
        grant_pools: 1,
        get_count: 4,
        ..cfg(&[(8, 1024)])
    };
    let (a, mut b) = pair(cfg_, &a_cfg, &cfg(&[]))?;
    // The target serves the connection (grants, deliveries) until the initiator is done.
    let done = Arc::new(AtomicBool::new(false));
    let target_done = done.clone();
    let target = thread::spawn(move || -> Result<Vec<(u32, Option<u32>)>, String> {
        let mut a = a;
        let mut got = Vec::new();
        let t0 = Instant::now();
        while !target_done.load(Ordering::Acquire) && t0.elapsed() < Duration::from_secs(30) {
            if let Some(Event::Data(d)) = a
                .poll(Some(Duration::from_millis(100)))
                .map_err(|e| e.to_string())?
            {
                got.push((d.len(), verify(&a.read(&d))));
                a.release(d).map_err(|e| e.to_string())?;
            }
        }
        Ok(got)
    });
    let big = message(1, 100_000);
    b.push(&big, Some(Instant::now() + LONG))?;
    check_eq!(t, b.stats().pool_gets, 1);
    let pools = b.peer_pools();
    check!(
        t,
        pools.iter().any(|p| p.2 >= 100_000),
        "a granted pool: {pools:?}"
    );
    let r = b.push(
        &message(2, 300_000),
        Some(Instant::now() + Duration::from_secs(2)),
    );
    check!(
        t,
        matches!(r, Err(pushpush::Error::Timeout(_))),
        "past the grants: {r:?}"
    );
    let too_long = b.push(&vec![0; 64 << 20], None);
    check!(
        t,
        matches!(too_long, Err(pushpush::Error::TooLong { .. })),
        "{too_long:?}"
    );
    done.store(true, Ordering::Release);
    let got = target
        .join()
        .map_err(|_| Fail::new(file!(), line!(), "the target panicked"))??;
    check_eq!(t, got, vec![(100_000, Some(1))], "what the target received");
    Ok(())
}

/// Many connections in one process, each with traffic both ways.
fn pp_many_connections(t: &mut T, cfg_: &VmConfig) -> CaseResult {
    let k = 12;
    let c = Config {
        data_depth: 64,
        staging: 1 << 18,
        ..cfg(&[(16, 2048)])
    };
    let ctx = Arc::new(Context::open(&cfg_.dev)?);
    let mut pairs = Vec::new();
    for _ in 0..k {
        pairs.push(pair_on(&ctx, &c, &c)?);
    }
    let per = 60u32;
    let mut counts = vec![(0u32, 0u32); k];
    let t0 = Instant::now();
    let mut sent = vec![(0u32, 0u32); k];
    while counts.iter().any(|&(x, y)| x < per || y < per) && t0.elapsed() < Duration::from_secs(120)
    {
        for (i, (a, b)) in pairs.iter_mut().enumerate() {
            let seq_a = i as u32 * 1000 + sent[i].0;
            if sent[i].0 < per && a.try_push(&message(seq_a, 64 + i))?.is_some() {
                sent[i].0 += 1;
            }
            let seq_b = i as u32 * 1000 + 500 + sent[i].1;
            if sent[i].1 < per && b.try_push(&message(seq_b, 64 + i))?.is_some() {
                sent[i].1 += 1;
            }
            for (side, c) in [(0, &mut *a), (1, &mut *b)] {
                while let Some(ev) = c.try_event()? {
                    if let Event::Data(d) = ev {
                        let s = verify(&c.read(&d));
                        let from_peer = if side == 0 { 500 } else { 0 };
                        let ok = s.is_some_and(|s| {
                            s / 1000 == i as u32 && (s % 1000 >= 500) == (from_peer == 500)
                        });
                        check!(t, ok, "connection {i} side {side}: {s:?}");
                        if side == 0 {
                            counts[i].0 += 1;
                        } else {
                            counts[i].1 += 1;
                        }
                        c.release(d)?;
                    }
                }
            }
        }
    }
    check_eq!(t, counts, vec![(per, per); k], "deliveries per connection");
    Ok(())
}

/// A peer that breaks the protocol: each violation closes the victim's connection with a
/// clear error, and once closed, nothing more is written into its pools.
fn pp_hostile_peer_closes_the_connection(t: &mut T, cfg_: &VmConfig) -> CaseResult {
    let enc = |m: Msg| {
        let mut v = Vec::new();
        m.encode(9, &mut v);
        v
    };
    let mut unknown = enc(Msg::SendData(b"x".to_vec()));
    unknown[0] = 77;
    let mut version = enc(Msg::SendData(b"x".to_vec()));
    version[2] = 9;
    let update_of_free = enc(Msg::BufferRecvPoolUpdate(vec![ElemRef {
        pool_ref: 0,
        elem: 1,
    }]));
    type Attack = Box<dyn Fn(&mut Connection) -> pushpush::Result<()>>;
    let cases: Vec<(&str, &str, Attack)> = vec![
        ("an unknown function", "unknown function code 77", {
            let m = unknown.clone();
            Box::new(move |c| c.inject_ctrl(&m))
        }),
        ("another version", "protocol version 9", {
            let m = version.clone();
            Box::new(move |c| c.inject_ctrl(&m))
        }),
        (
            "a truncated message",
            "bytes where",
            Box::new(|c| c.inject_ctrl(&[6, 0, 1, 0])),
        ),
        (
            "an element not advertised",
            "not advertised",
            Box::new(|c| {
                let imm = Imm::encode(
                    ElemRef {
                        pool_ref: 0,
                        elem: 3,
                    },
                    16,
                )
                .unwrap();
                // Pool 0 has 4 elements; 3 is fine, so name 200 through a raw immediate.
                c.inject_write_imm(0, 3, (imm & 0xff00_ffff) | (200 << 16), &[1; 16])
            }),
        ),
        (
            "an element consumed and not replenished",
            "consumed",
            Box::new(|c| {
                let at = c.push(&[5; 32], Some(Instant::now() + LONG))?;
                let imm = Imm::encode(at, 32).unwrap();
                c.inject_write_imm(at.pool_ref, at.elem, imm, &[6; 32])
            }),
        ),
        (
            "a replenishment of an element never written",
            "had not written",
            Box::new(move |c| c.inject_ctrl(&update_of_free)),
        ),
    ];
    for (what, says, attack) in cases {
        // The update case is an attack by the target on the initiator: b plays the target.
        let replenish = what.starts_with("a replenishment");
        let (mut victim, mut attacker) = if replenish {
            let (a, b) = pair(cfg_, &cfg(&[]), &cfg(&[(4, 256)]))?;
            (a, b)
        } else {
            pair(cfg_, &cfg(&[(4, 256)]), &cfg(&[]))?
        };
        // Both sides learn the pools first.
        let t0 = Instant::now();
        while (victim.peer_pools().is_empty() && replenish
            || attacker.peer_pools().is_empty() && !replenish)
            && t0.elapsed() < LONG
        {
            victim.try_event()?;
            attacker.try_event()?;
        }
        let before = if replenish {
            Vec::new()
        } else {
            victim.pool_bytes(0, 0, 1024)
        };
        attack(&mut attacker)?;
        let t0 = Instant::now();
        // Deliveries are held, not released: a release would make a consumed element
        // writable again.
        let mut held = Vec::new();
        let err = loop {
            match victim.poll(Some(Duration::from_millis(100))) {
                Err(e) => break Some(e.to_string()),
                Ok(Some(Event::Data(d))) => held.push(d),
                Ok(_) if t0.elapsed() > LONG => break None,
                Ok(_) => {}
            }
        };
        check!(
            t,
            err.as_deref().is_some_and(|e| e.contains(says)),
            "{what}: {err:?}"
        );
        check!(t, victim.check().is_err(), "{what}: closed for good");
        if !replenish {
            // After the close, a write into a free element is refused: the pool stays as it
            // was (the attacker's request fails instead).
            let after_close = attacker.inject_write_imm(
                0,
                1,
                Imm::encode(
                    ElemRef {
                        pool_ref: 0,
                        elem: 1,
                    },
                    64,
                )
                .unwrap(),
                &[0xab; 64],
            );
            let t1 = Instant::now();
            let mut refused = after_close.is_err();
            while !refused && t1.elapsed() < LONG {
                refused = attacker.try_event().is_err();
            }
            check!(
                t,
                refused,
                "{what}: the attacker's write after the close failed"
            );
            let now = victim.pool_bytes(0, 0, 1024);
            check_eq!(
                t,
                now[256..320].to_vec(),
                before[256..320].to_vec(),
                "{what}: element 1 untouched after the close"
            );
        }
    }
    Ok(())
}
