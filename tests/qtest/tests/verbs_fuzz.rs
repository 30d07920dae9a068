// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Garbage over the verbs commands, doorbells and work queues: a deterministic storm of
//! mutated and random object commands, doorbells with random words on every page, random bytes
//! in send and receive WQEs, WQEs with random keys and addresses (RAM, beyond RAM, the device's
//! own BARs), interleaved with clock steps. QEMU must stay up, every command must complete with
//! a defined status, the device must not go FATAL, and RESET must bring it back to zero
//! objects. `QHCA_FUZZ_SEED` / `QHCA_FUZZ_OPS` explore further.

use qhca_qtest::abi::db::{DbType, DbWord};
use qhca_qtest::abi::*;
use qhca_qtest::hca::*;
use qhca_qtest::rng::Rng;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

/// Posts a command and waits for its completion, consuming (and counting) asynchronous events
/// on the way. Returns (status, data[0]).
fn exec_tolerant(h: &mut Hca, c: &qhca_cmd, async_events: &mut u32) -> (u32, u64) {
    h.post(c);
    loop {
        let e = h.next_eqe();
        match e.type_ as u32 {
            QHCA_EQE_CMD_DONE => {
                assert_eq!(e.token, c.token, "completion out of order: {e:?}");
                return (e.status as u32, e.data[0]);
            }
            QHCA_EQE_CQ_COMP | QHCA_EQE_QP_ERR | QHCA_EQE_CQ_ERR => *async_events += 1,
            t => panic!("unknown event type {t}: {e:?}"),
        }
    }
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn verbs_garbage_never_crashes() {
    let seed = env("QHCA_FUZZ_SEED", 0x5eed_0b1e);
    let ops = env("QHCA_FUZZ_OPS", 1500);
    let mut rng = Rng::new(seed);
    let mut h = Hca::start("num-uars=4");
    h.bring_up(6, 8);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let (buf, key) = p.buf(&mut h, 8 * PAGE, 0x5a, QHCA_ACCESS_ALL);
    let list = p.m.page_list(&mut h, buf, 8);
    // A CQ of no QP, for RESIZE_CQ to move around (the pair's stay where phase two polls).
    let (st, spare) = create_cq(&mut h, &mut p.m, p.uar, 2);
    assert_eq!(st, QHCA_CMD_OK);
    let uars = [p.uar, 0, 1, 2, 3, 99];
    let (regs, uarbar) = (h.regs, h.uar);
    let addrs = [
        buf,
        buf + 7,
        buf + 8 * PAGE - 8,
        list,
        0,
        BEYOND_RAM,
        RAM_SIZE - 8,
        regs,
        uarbar,
        u64::MAX - 7,
    ];
    let mut stats = [0u32; 8];
    let mut async_events = 0u32;

    for _ in 0..ops {
        match rng.below(8) {
            0 | 1 => {
                // An object command: a valid template with a few bytes changed, or noise.
                let opcode = match rng.below(14) {
                    12 => QHCA_CMD_RESIZE_CQ,
                    13 => QHCA_CMD_MODIFY_MR,
                    n => QHCA_CMD_ALLOC_PD + n as u32, // .. QUERY_CTX + 1
                };
                let mut c = h.cmd(opcode);
                let uar = *rng.pick(&uars);
                let tmpl: [u8; 40] = match opcode {
                    QHCA_CMD_REG_MR => reg_mr_bytes(
                        uar,
                        p.pdn,
                        buf + rng.below(64),
                        1 + rng.below(4 * PAGE),
                        rng.below(16) as u32,
                        1 + rng.below(8) as u32,
                        *rng.pick(&[list, list, 0, BEYOND_RAM, regs]),
                    ),
                    QHCA_CMD_CREATE_CQ => create_cq_bytes(uar, rng.below(14) as u32, 1, list),
                    QHCA_CMD_RESIZE_CQ => {
                        let mut b = [0u8; 40];
                        let cqn = *rng.pick(&[spare.cqn, spare.cqn, p.rcq.cqn + 100, 7]);
                        let log = rng.below(4);
                        let n = cq_bytes(log as u32).div_ceil(PAGE);
                        for (i, w) in [uar as u64, cqn as u64, log, n, *rng.pick(&addrs)]
                            .into_iter()
                            .enumerate()
                        {
                            b[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                        }
                        b
                    }
                    QHCA_CMD_MODIFY_MR => {
                        let mut b = [0u8; 40];
                        let noise = rng.next_u32() as u64;
                        let access = *rng.pick(&[
                            QHCA_ACCESS_ALL as u64,
                            QHCA_ACCESS_LOCAL_WRITE as u64,
                            (QHCA_ACCESS_ALL | QHCA_ACCESS_MW_BIND) as u64,
                            noise,
                        ]);
                        let pdn = *rng.pick(&[p.pdn as u64, p.pdn as u64, 99, 1 << 33]);
                        for (i, w) in [uar as u64, key as u64, pdn, access]
                            .into_iter()
                            .enumerate()
                        {
                            b[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
                        }
                        b
                    }
                    QHCA_CMD_CREATE_QP => {
                        let caps = QpCaps {
                            sq_log: rng.below(3) as u8,
                            rq_log: rng.below(3) as u8,
                            ..Default::default()
                        };
                        let (_, n) = qp_layout(&caps);
                        create_qp_bytes(uar, p.pdn, p.scq.cqn, p.rcq.cqn, &caps, n as u32, list)
                    }
                    _ => {
                        let mut b = [0u8; 40];
                        b[0..8].copy_from_slice(&(uar as u64).to_le_bytes());
                        let handle = *rng.pick(&[p.a.qpn, p.b.qpn, p.pdn, key, p.scq.cqn, 7]);
                        b[8..16].copy_from_slice(&(handle as u64).to_le_bytes());
                        b[16..24].copy_from_slice(&rng.pick(&addrs).to_le_bytes());
                        b
                    }
                };
                let mut b = tmpl;
                for _ in 0..rng.below(3) {
                    let i = rng.below(40) as usize;
                    b[i] = rng.next_u32() as u8;
                }
                if rng.chance(1, 10) {
                    b = rng.bytes(40).try_into().unwrap();
                }
                c.in_ = in_words(&b);
                if opcode == QHCA_CMD_MODIFY_QP {
                    // A plausible attribute block in the mailbox, mutated.
                    let mut a = QpAttr {
                        mask: rng.next_u32() & 0x7ff,
                        state: rng.below(8) as u8,
                        path_mtu: 8 + rng.below(6) as u8,
                        ..Default::default()
                    }
                    .encode();
                    if rng.chance(1, 3) {
                        a = rng.bytes(64).try_into().unwrap();
                    }
                    h.qt.memwrite(MAILBOX, &a);
                    c.in_[2] = *rng.pick(&[MAILBOX, MAILBOX, BEYOND_RAM, 0, regs]);
                }
                if rng.chance(1, 2) {
                    c.out_addr = *rng.pick(&[MAILBOX + 0x800, 0, BEYOND_RAM, regs, uarbar]);
                    c.out_len = *rng.pick(&[0u32, 63, 64, 4096]);
                }
                let (st, _) = exec_tolerant(&mut h, &c, &mut async_events);
                assert!(st <= QHCA_CMD_DMA_ERROR, "undefined status {st}");
                stats[st as usize] += 1;
            }
            2 => {
                // A doorbell: plausible or random.
                let page = rng.below(6) as u32;
                let w = if rng.chance(1, 2) {
                    let t = *rng.pick(&[DbType::Sq, DbType::Rq, DbType::CqArm]);
                    let qn = *rng.pick(&[p.a.qpn, p.b.qpn, p.scq.cqn, p.rcq.cqn, 5, 0xff_ffff]);
                    DbWord::new(t, qn, rng.below(40) as u32).raw()
                } else {
                    rng.next_u64()
                };
                h.doorbell(page, w);
            }
            3 => {
                // Random bytes as the next send WQE of QP a, properly rung.
                let b = rng.bytes(1 << p.a.sq_stride_log);
                p.a.write_send_raw(&mut h, &b);
                p.a.ring_sq(&mut h);
            }
            4 => {
                // A well-formed WQE with random opcode, flags, keys and addresses.
                let nsge = rng.below(4) as usize;
                let sges: Vec<(u64, u32, u32)> = (0..nsge)
                    .map(|_| {
                        (
                            *rng.pick(&addrs),
                            rng.below(3 * PAGE) as u32,
                            *rng.pick(&[key, key ^ 1, 0, 0xffff_ffff]),
                        )
                    })
                    .collect();
                let wr = SendWr {
                    wr_id: rng.next_u64(),
                    opcode: rng.below(8) as u32,
                    flags: rng.below(16) as u32 & !QHCA_WQE_INLINE,
                    imm: rng.next_u32(),
                    remote_addr: *rng.pick(&addrs),
                    rkey: *rng.pick(&[key, key ^ 1, 0]),
                    swap_add: rng.next_u64(),
                    compare: rng.next_u64(),
                    sges,
                    inline: if rng.chance(1, 4) {
                        let n = rng.below(200) as usize;
                        Some(rng.bytes(n))
                    } else {
                        None
                    },
                };
                let q = if rng.chance(1, 2) { &mut p.a } else { &mut p.b };
                q.post_send(&mut h, &wr);
            }
            5 => {
                // A receive WQE, sometimes garbage.
                let q = if rng.chance(1, 2) { &mut p.a } else { &mut p.b };
                if rng.chance(1, 3) {
                    let a = q.rq_slot(q.rq_pi);
                    let bytes = rng.bytes(1 << q.rq_stride_log);
                    h.qt.memwrite(a, &bytes);
                    q.rq_pi = q.rq_pi.wrapping_add(1);
                    q.ring_rq(&mut h);
                } else {
                    let s = (*rng.pick(&addrs), rng.below(2 * PAGE) as u32, key);
                    q.post_recv(&mut h, rng.next_u64(), &[s]);
                }
            }
            6 => {
                // Reconnect now and then, so that work keeps flowing after errors.
                if rng.chance(1, 4) && h.reg(QHCA_REG_NUM_QP) >= 2 {
                    let mut ev = 0;
                    for q in [&mut p.a, &mut p.b] {
                        let mut c = h.cmd(QHCA_CMD_MODIFY_QP);
                        h.qt.memwrite(
                            MAILBOX,
                            &QpAttr {
                                mask: QHCA_QP_ATTR_STATE,
                                state: QHCA_QPS_RESET as u8,
                                ..Default::default()
                            }
                            .encode(),
                        );
                        c.in_ = [q.uar as u64, q.qpn as u64, MAILBOX, 0, 0];
                        exec_tolerant(&mut h, &c, &mut ev);
                        q.sq_pi = 0;
                        q.rq_pi = 0;
                    }
                    async_events += ev;
                }
                h.qt.clock_step(STEP_NS);
            }
            _ => {
                // Drain CQs (their consumer indices land in the doorbell records) and time.
                while p.scq.poll(&mut h).is_some() {}
                while p.rcq.poll(&mut h).is_some() {}
                h.qt.clock_step(rng.below(5 * STEP_NS));
            }
        }
        if h.status() & QHCA_STATUS_FATAL != 0 {
            panic!(
                "device went FATAL (syndrome {})",
                h.reg(QHCA_REG_FATAL_SYNDROME)
            );
        }
    }
    h.alive();
    // Phase two: no command garbage, so that the QPs live on; they are reconnected often and
    // their CQs drained, so that the engine keeps executing garbage rather than flushing it.
    h.bring_up(6, 8);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let (buf, key) = p.buf(&mut h, 8 * PAGE, 0x5a, QHCA_ACCESS_ALL);
    let addrs2 = [
        buf,
        buf + 7,
        buf + 8 * PAGE - 8,
        buf + 4 * PAGE,
        BEYOND_RAM,
        regs,
        0,
    ];
    let mut psn = 0;
    let mut completions = 0u32;
    for _ in 0..ops {
        let q = if rng.chance(1, 2) { &mut p.a } else { &mut p.b };
        match rng.below(6) {
            0 => {
                let b = rng.bytes(1 << q.sq_stride_log);
                q.write_send_raw(&mut h, &b);
                q.ring_sq(&mut h);
            }
            1 | 2 => {
                let nsge = rng.below(3) as usize;
                let sges: Vec<(u64, u32, u32)> = (0..nsge)
                    .map(|_| {
                        let a = *rng.pick(&addrs2);
                        let l = rng.below(2 * PAGE) as u32;
                        (a, l, *rng.pick(&[key, key, key ^ 1]))
                    })
                    .collect();
                let wr = SendWr {
                    wr_id: rng.next_u64(),
                    opcode: rng.below(7) as u32,
                    flags: QHCA_WQE_SIGNALED | (rng.below(16) as u32 & !QHCA_WQE_INLINE),
                    imm: rng.next_u32(),
                    remote_addr: *rng.pick(&addrs2) & !(rng.below(2) * 7),
                    rkey: *rng.pick(&[key, key, key ^ 1]),
                    swap_add: rng.next_u64(),
                    compare: rng.next_u64(),
                    sges,
                    inline: None,
                };
                q.post_send(&mut h, &wr);
            }
            3 => {
                let s = (*rng.pick(&addrs2), rng.below(2 * PAGE) as u32, key);
                q.post_recv(&mut h, rng.next_u64(), &[s]);
            }
            4 => {
                if rng.chance(1, 3) {
                    psn = (psn + 0x1000) & 0xff_ffff;
                    p.reconnect(&mut h, &ConnParams::default(), psn);
                }
            }
            _ => {
                h.qt.clock_step(rng.below(3 * STEP_NS));
            }
        }
        while p.scq.poll(&mut h).is_some() {
            completions += 1;
        }
        while p.rcq.poll(&mut h).is_some() {
            completions += 1;
        }
        assert_eq!(h.status() & QHCA_STATUS_FATAL, 0, "device went FATAL");
    }
    h.alive();
    assert!(completions > 0, "phase two produced no completion at all");
    eprintln!("verbs fuzz phase two: {completions} completions");
    eprintln!(
        "verbs fuzz seed {seed:#x}: statuses {stats:?}, async events {async_events}, counters {:?}",
        h.counters()
    );
    assert!(
        stats[QHCA_CMD_OK as usize] > 0,
        "no command ever succeeded: {stats:?}"
    );
    assert!(stats[QHCA_CMD_BAD_PARAM as usize] > 0, "{stats:?}");
    // RESET returns everything.
    h.bring_up(4, 4);
    h.nop();
    for r in [
        QHCA_REG_NUM_CTX,
        QHCA_REG_NUM_PD,
        QHCA_REG_NUM_MR,
        QHCA_REG_NUM_CQ,
        QHCA_REG_NUM_QP,
    ] {
        assert_eq!(h.reg(r), 0, "object count register {r:#x} after RESET");
    }
}
