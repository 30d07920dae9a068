// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Live state survives migration: a device caught mid-flight (events waiting in the EQ, commands
//! stalled behind it, a UAR table with a hole, non-zero counters, MSI-X armed) is saved by one
//! QEMU and loaded by another, which carries on exactly where the first stopped. The port's GID
//! table migrates and is checked on arrival as SET_GID checks it; so do the kernel contexts
//! (`QHCA_UAR_KERNEL`), which must be allocated ones.

use qhca_qtest::abi::*;
use qhca_qtest::hca::*;
use qhca_qtest::qmp::{socket_path, Qmp};
use qhca_qtest::{Hca, Qtest};

fn qmp_arg(path: &std::path::Path) -> String {
    format!("unix:{},server=on,wait=off", path.display())
}

/// Every BAR0 register a test can read without side effects.
fn snapshot(h: &mut Hca) -> Vec<(u32, u32)> {
    [
        QHCA_REG_CTRL,
        QHCA_REG_STATUS,
        QHCA_REG_CMDQ_BASE_LO,
        QHCA_REG_CMDQ_BASE_HI,
        QHCA_REG_CMDQ_LOG_SIZE,
        QHCA_REG_CMDQ_CI,
        QHCA_REG_EQ_BASE_LO,
        QHCA_REG_EQ_BASE_HI,
        QHCA_REG_EQ_LOG_SIZE,
        QHCA_REG_EQ_CI,
        QHCA_REG_EQ_PI,
        QHCA_REG_INTR_CTRL,
        QHCA_REG_GUEST_ERRORS,
        QHCA_REG_DB_VIOLATIONS,
        QHCA_REG_EQ_OVERFLOWS,
        QHCA_REG_FATAL_SYNDROME,
    ]
    .into_iter()
    .map(|off| (off, h.reg(off)))
    .collect()
}

#[test]
fn state_survives_migration() {
    let props = "num-uars=8,node-guid=0xabcdef01";
    let stream = socket_path("migration-stream");
    let qmp_a = socket_path("qmp-a");
    let qmp_b = socket_path("qmp-b");

    // --- source: a device in the middle of things
    let mut a = Hca::start_with(props, &["-qmp", &qmp_arg(&qmp_a)]);
    a.bring_up(3, 1); // 2-entry EQ
    for want in 0..3 {
        assert_eq!(a.alloc_uar(), (QHCA_CMD_OK, want));
    }
    assert_eq!(a.free_uar(1), QHCA_CMD_OK);
    a.set_reg(QHCA_REG_MAGIC, 0); // GUEST_ERRORS 1
    a.doorbell(
        0,
        qhca_uapi::db::DbWord::new(qhca_uapi::db::DbType::Sq, 2, 9).raw(),
    ); // DB_VIOLATIONS 1
    a.setup_msix(false);
    a.set_reg(QHCA_REG_INTR_CTRL, QHCA_INTR_EQ_ENABLE);
    let cmds: Vec<_> = (0..4).map(|_| a.cmd(QHCA_CMD_ALLOC_UAR)).collect();
    a.post_batch(&cmds);
    a.wait_events(2);
    a.settle();
    assert!(a.take_msi());
    let before = snapshot(&mut a);
    let ci = a.eq_ci;
    assert!(
        before.contains(&(QHCA_REG_EQ_PI, ci + 2)) && before.contains(&(QHCA_REG_CMDQ_CI, ci + 2)),
        "2 events waiting, 2 commands stalled: {before:x?}"
    );

    let mut qa = Qmp::connect(&qmp_a);
    qa.ok(&format!(
        r#"{{"execute":"migrate","arguments":{{"uri":"file:{}"}}}}"#,
        stream.display()
    ));
    qa.wait_migration();

    // --- destination: same machine, state loaded from the stream
    let dev = format!("qhca,{props}");
    let qt = Qtest::start(&[
        "-device",
        &dev,
        "-incoming",
        "defer",
        "-qmp",
        &qmp_arg(&qmp_b),
    ]);
    let mut qb = Qmp::connect(&qmp_b);
    qb.ok(&format!(
        r#"{{"execute":"migrate-incoming","arguments":{{"uri":"file:{}"}}}}"#,
        stream.display()
    ));
    qb.wait_migration();
    let mut b = Hca::attach(qt, 1);
    // The test's driver state moves with it.
    b.cmdq_base = a.cmdq_base;
    b.cmdq_log = a.cmdq_log;
    b.eq_base = a.eq_base;
    b.eq_log = a.eq_log;
    b.cmd_pi = a.cmd_pi;
    b.eq_ci = a.eq_ci;
    b.next_token = a.next_token;
    drop(a);

    assert_eq!(snapshot(&mut b), before, "registers after migration");
    assert!(!b.take_msi(), "no interrupt out of nowhere");

    // The two waiting events are there; consuming them lets the stalled commands run, which
    // allocate the pages a device that lost its UAR table would not hand out.
    let mut got = Vec::new();
    for c in &cmds {
        let e = b.completion_of(c);
        assert_eq!(e.status as u32, QHCA_CMD_OK, "{e:?}");
        got.push(e.data[0]);
    }
    // Pages 0 and 2 were taken before the migration, 1 was freed: lowest free first.
    assert_eq!(
        got,
        vec![1, 3, 4, 5],
        "ALLOC_UARs across the migration see the same UAR table"
    );
    assert!(
        b.poll(|h| h.take_msi()),
        "MSI-X still armed after migration"
    );
    assert_eq!(b.alloc_uar(), (QHCA_CMD_OK, 6));
    assert_eq!(b.alloc_uar(), (QHCA_CMD_OK, 7));
    assert_eq!(b.alloc_uar().0, QHCA_CMD_NO_RESOURCES);
    assert_eq!(b.query_device(OUT_RAM, 128), QHCA_CMD_OK);
    let attr = qhca_qtest::wire::decode_attr(&b.qt.memread(OUT_RAM, 128));
    assert_eq!(attr.node_guid, 0xabcd_ef01);
    assert_eq!(b.status(), QHCA_STATUS_READY);
}

#[test]
fn migration_refuses_a_different_num_uars() {
    let stream = socket_path("migration-stream");
    let qmp_a = socket_path("qmp-a");
    let qmp_b = socket_path("qmp-b");
    let mut a = Hca::start_with("num-uars=8", &["-qmp", &qmp_arg(&qmp_a)]);
    a.bring_up(2, 2);
    a.nop();
    let mut qa = Qmp::connect(&qmp_a);
    qa.ok(&format!(
        r#"{{"execute":"migrate","arguments":{{"uri":"file:{}"}}}}"#,
        stream.display()
    ));
    qa.wait_migration();
    drop(a);

    let qt = Qtest::start(&[
        "-device",
        "qhca,num-uars=16",
        "-incoming",
        "defer",
        "-qmp",
        &qmp_arg(&qmp_b),
    ]);
    let mut qb = Qmp::connect(&qmp_b);
    qb.ok(&format!(
        r#"{{"execute":"migrate-incoming","arguments":{{"uri":"file:{}"}}}}"#,
        stream.display()
    ));
    // The load fails (num-uars is VMSTATE_UINT32_EQUAL); QEMU reports it and exits, or stays up
    // with the migration failed. Either way, no crash.
    let t0 = std::time::Instant::now();
    let mut qt = qt;
    loop {
        if let Some(st) = qt.exited() {
            assert_eq!(
                st.code(),
                Some(1),
                "destination must exit cleanly, not crash: {st}\n{}",
                qt.stderr()
            );
            break;
        }
        let Ok(r) = qb.try_execute(r#"{"execute":"query-migrate"}"#) else {
            // QEMU is on its way out: the next round sees its exit status.
            std::thread::sleep(std::time::Duration::from_millis(10));
            continue;
        };
        let r = qhca_qtest::qmp::squash(&r);
        if r.contains(r#""status":"failed""#) {
            break;
        }
        assert!(
            !r.contains(r#""status":"completed""#),
            "a stream for num-uars=8 loaded into num-uars=16"
        );
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "no verdict: {r}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let err = qt.final_stderr();
    assert!(
        err.contains("num-uars"),
        "the refusal names num-uars: {err}"
    );
}

/// Loads `stream` into a fresh destination and says whether the load completed. A refused
/// load must end in QEMU exiting with status 1 or in a failed migration, never in a crash.
fn load(props: &str, stream: &std::path::Path) -> Result<Hca, String> {
    let qmp = socket_path("qmp-load");
    let dev = format!("qhca,{props}");
    let mut qt = Qtest::start(&[
        "-device",
        &dev,
        "-incoming",
        "defer",
        "-qmp",
        &qmp_arg(&qmp),
    ]);
    let mut q = Qmp::connect(&qmp);
    let cmd = format!(
        r#"{{"execute":"migrate-incoming","arguments":{{"uri":"file:{}"}}}}"#,
        stream.display()
    );
    // QEMU must still be there to take the command; if it is not, say how it ended (a CI run
    // once found the QMP socket closed here, with nothing else to go on).
    if let Err(e) = q.try_execute(&cmd) {
        let t0 = std::time::Instant::now();
        let mut st = qt.exited();
        while st.is_none() && t0.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            st = qt.exited();
        }
        panic!(
            "{cmd}: {e}; QEMU {}; stderr:\n{}",
            st.map_or("still running".to_string(), |s| format!("exited: {s}")),
            qt.final_stderr()
        );
    }
    let t0 = std::time::Instant::now();
    loop {
        if let Some(st) = qt.exited() {
            assert_eq!(
                st.code(),
                Some(1),
                "destination must refuse cleanly, not crash: {st}\n{}",
                qt.final_stderr()
            );
            return Err(qt.final_stderr());
        }
        if let Ok(r) = q.try_execute(r#"{"execute":"query-migrate"}"#) {
            let r = qhca_qtest::qmp::squash(&r);
            if r.contains(r#""status":"completed""#) {
                return Ok(Hca::attach(qt, 1));
            }
            if r.contains(r#""status":"failed""#) {
                return Err(format!("{r}\n{}", qt.final_stderr()));
            }
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(30),
            "no verdict on the incoming migration"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn tampered_device_state_is_refused() {
    // The migration stream is as untrusted as a guest: a state the device could never reach
    // by itself must not load. vmstate fields are big-endian; the command ring's fields
    // (base, log_size, pi, ci) come right after ctrl, status and intr_ctrl, then the EQ's.
    let props = "num-uars=4";
    let stream = socket_path("migration-stream");
    let qmp_a = socket_path("qmp-a");
    let mut a = Hca::start_with(props, &["-qmp", &qmp_arg(&qmp_a)]);
    a.bring_up(3, 2);
    for _ in 0..5 {
        a.nop();
    }
    let mut qa = Qmp::connect(&qmp_a);
    qa.ok(&format!(
        r#"{{"execute":"migrate","arguments":{{"uri":"file:{}"}}}}"#,
        stream.display()
    ));
    qa.wait_migration();
    drop(a);
    let good = std::fs::read(&stream).expect("migration stream");

    let mut pattern = Vec::new();
    pattern.extend_from_slice(&CMDQ_RAM.to_be_bytes());
    for v in [3u32, 5, 5] {
        pattern.extend_from_slice(&v.to_be_bytes());
    }
    let hits: Vec<usize> = good
        .windows(pattern.len())
        .enumerate()
        .filter(|(_, w)| *w == pattern)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        hits.len(),
        1,
        "the command ring's vmstate fields, once in the stream"
    );
    let cmdq = hits[0];
    let (ctrl, status) = (cmdq - 12, cmdq - 8);
    let eq = cmdq + 20;
    assert_eq!(
        &good[eq..eq + 8],
        &EQ_RAM.to_be_bytes(),
        "EQ fields follow the command ring's"
    );
    assert_eq!(&good[ctrl..ctrl + 4], &QHCA_CTRL_ENABLE.to_be_bytes());
    assert_eq!(&good[status..status + 4], &QHCA_STATUS_READY.to_be_bytes());

    // The untouched stream loads (the control case for what follows).
    let path = socket_path("tampered");
    std::fs::write(&path, &good).unwrap();
    let mut b = load(props, &path).expect("untampered stream");
    b.cmdq_base = CMDQ_RAM;
    b.cmdq_log = 3;
    b.eq_base = EQ_RAM;
    b.eq_log = 2;
    b.cmd_pi = 5;
    b.eq_ci = 5;
    b.nop();
    drop(b);

    let cases: [(&str, usize, u32); 7] = [
        ("CMDQ log_size 31", cmdq + 8, 31),
        ("CMDQ log_size 0", cmdq + 8, 0),
        ("CMDQ pi 100 ahead of ci 5", cmdq + 12, 100),
        ("EQ pi 100 ahead of ci 5", eq + 12, 100),
        (
            "STATUS READY|FATAL",
            status,
            QHCA_STATUS_READY | QHCA_STATUS_FATAL,
        ),
        ("CTRL 0x80", ctrl, 0x80),
        ("READY without CTRL.ENABLE", ctrl, 0),
    ];
    for (what, off, v) in cases {
        let mut bad = good.clone();
        bad[off..off + 4].copy_from_slice(&v.to_be_bytes());
        std::fs::write(&path, &bad).unwrap();
        match load(props, &path) {
            Ok(mut h) => {
                let st = h.status();
                panic!("a stream with {what} loaded (STATUS {st:#x})");
            }
            // Refused by the qhca section, not by something the tampering broke elsewhere.
            Err(e) => assert!(
                e.contains("/qhca"),
                "{what}: refusal does not name the qhca section: {e}"
            ),
        }
    }
}

#[test]
fn verbs_objects_block_migration_until_freed() {
    // Verbs objects are not migrated yet: while the device holds any, a migration blocker
    // makes `migrate` fail at once, with a message that names the device and says why (not
    // after RAM has streamed); the source carries on with its objects; once they are gone
    // the blocker goes and the device migrates. A reset frees the objects and the blocker.
    let props = "num-uars=4,id=hca7";
    let stream = socket_path("migration-objects");
    let qmp_a = socket_path("qmp-objects");
    let mut a = Hca::start_with(props, &["-qmp", &qmp_arg(&qmp_a)]);
    a.bring_up(3, 3);
    let mut qa = Qmp::connect(&qmp_a);
    let migrate = format!(
        r#"{{"execute":"migrate","arguments":{{"uri":"file:{}"}}}}"#,
        stream.display()
    );
    let blocked = |qa: &mut Qmp, what: &str| {
        let r = qa.execute(&migrate);
        assert!(r.contains("\"error\""), "{what}: migrate started: {r}");
        assert!(
            r.contains("hca7") && r.contains("verbs objects"),
            "{what}: the refusal does not say why: {r}"
        );
        let q = qhca_qtest::qmp::squash(&qa.ok(r#"{"execute":"query-migrate"}"#));
        assert!(!q.contains(r#""status":"active""#), "{what}: {q}");
    };
    let (st, uar) = a.alloc_uar();
    assert_eq!(st, QHCA_CMD_OK);
    let (st, _) = qhca_qtest::verbs::alloc_pd(&mut a, uar as u32);
    assert_eq!(st, QHCA_CMD_OK);
    blocked(&mut qa, "a PD");
    a.alive();
    assert_eq!(a.reg(QHCA_REG_NUM_PD), 1, "the source keeps its PD");
    // Freed by a reset too: the blocker goes with the objects.
    a.bring_up(3, 3);
    assert_eq!(a.reg(QHCA_REG_NUM_PD), 0);
    let (st, uar) = a.alloc_uar();
    assert_eq!(st, QHCA_CMD_OK);
    let (st, _) = qhca_qtest::verbs::alloc_pd(&mut a, uar as u32);
    assert_eq!(st, QHCA_CMD_OK);
    blocked(&mut qa, "a PD after a reset");
    assert_eq!(a.free_uar(uar), QHCA_CMD_OK);
    assert_eq!(a.reg(QHCA_REG_NUM_PD), 0);
    qa.ok(&migrate);
    qa.wait_migration();
}

#[test]
fn gid_table_migrates_and_is_checked_on_arrival() {
    use qhca_qtest::port::{port_gid, query_port, set_gid, v4_gid, GidEntry};
    let props = "num-uars=4,node-guid=0x77";
    let stream = socket_path("migration-gids");
    let qmp_a = socket_path("qmp-gids");
    let mut a = Hca::start_with(props, &["-qmp", &qmp_arg(&qmp_a)]);
    a.bring_up(3, 2);
    assert_eq!(
        set_gid(&mut a, 1, &GidEntry::v4([10, 0, 0, 1], 24)),
        QHCA_CMD_OK
    );
    assert_eq!(
        set_gid(&mut a, 9, &GidEntry::v4([10, 0, 0, 9], 32)),
        QHCA_CMD_OK
    );
    // (Not asked of the source: QUERY_PORT's output in guest RAM would be in the stream too.)
    let mut gids = [GidEntry::default(); 16];
    gids[0] = GidEntry {
        gid: port_gid(0x77),
        flags: QHCA_GID_VALID as u8,
        prefix_len: 64,
        rsvd: [0; 6],
    };
    gids[1] = GidEntry::v4([10, 0, 0, 1], 24);
    gids[9] = GidEntry::v4([10, 0, 0, 9], 32);
    let mut qa = Qmp::connect(&qmp_a);
    qa.ok(&format!(
        r#"{{"execute":"migrate","arguments":{{"uri":"file:{}"}}}}"#,
        stream.display()
    ));
    qa.wait_migration();
    let (pi, ci) = (a.cmd_pi, a.eq_ci);
    drop(a);
    let good = std::fs::read(&stream).expect("migration stream");
    let attach = |mut b: Hca| {
        (b.cmdq_base, b.cmdq_log, b.eq_base, b.eq_log) = (CMDQ_RAM, 3, EQ_RAM, 2);
        (b.cmd_pi, b.eq_ci) = (pi, ci);
        b
    };
    let mut b = attach(load(props, &stream).expect("the stream with two GIDs"));
    assert_eq!(query_port(&mut b).gids, gids, "the table after migration");
    assert_eq!(
        set_gid(&mut b, 2, &GidEntry::v4([10, 0, 0, 9], 24)),
        QHCA_CMD_BAD_PARAM,
        "10.0.0.9 is still entry 9's"
    );
    drop(b);

    // The table as raw entries in the stream, entry 0 first (the SET_GID commands in the
    // ring in guest RAM hold entries 1 and 9 too, so they are found from entry 0).
    let at = |needle: &[u8]| {
        let hits: Vec<usize> = good
            .windows(needle.len())
            .enumerate()
            .filter(|(_, w)| w == &needle)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(hits.len(), 1, "{needle:02x?} once in the stream");
        hits[0]
    };
    let e0 = at(&port_gid(0x77));
    let (e1, e9) = (e0 + 24, e0 + 9 * 24);
    assert_eq!(
        &good[e1..e1 + 18],
        &[&v4_gid([10, 0, 0, 1])[..], &[1, 24]].concat()
    );
    assert_eq!(
        &good[e9..e9 + 18],
        &[&v4_gid([10, 0, 0, 9])[..], &[1, 32]].concat()
    );
    let path = socket_path("tampered-gids");
    let cases: [(&str, usize, &[u8]); 7] = [
        ("entry 9 a duplicate of entry 1", e9 + 15, &[1]),
        ("entry 1 at 127.0.0.1", e1 + 12, &[127]),
        ("entry 1 an IPv6 GID", e1, &[0xfe, 0x80]),
        ("entry 1 flags 3", e1 + 16, &[3]),
        ("entry 1 prefix 33", e1 + 17, &[33]),
        ("entry 1 rsvd", e1 + 23, &[1]),
        ("entry 0 another GUID", e0 + 15, &[0x78]),
    ];
    for (what, off, bytes) in cases {
        let mut bad = good.clone();
        bad[off..off + bytes.len()].copy_from_slice(bytes);
        std::fs::write(&path, &bad).unwrap();
        match load(props, &path) {
            Ok(mut h) => panic!("a stream with {what} loaded: {:?}", query_port(&mut h).gids),
            Err(e) => assert!(e.contains("qhca"), "{what}: refusal: {e}"),
        }
    }
    // Nor does the right table load into a device with another node GUID.
    let err = load("num-uars=4,node-guid=0x78", &stream).err();
    assert!(err.is_some_and(|e| e.contains("qhca")), "another node GUID");
}

#[test]
fn kernel_contexts_migrate_and_are_checked_on_arrival() {
    // Which contexts are the driver's own (ALLOC_UAR with QHCA_UAR_KERNEL) travels in
    // subsection qhca/kernel, one flag per page: on the destination a kernel context may have
    // a physical region and a user context may not; a stream that makes a free page a kernel
    // context's is refused. A device with no kernel context sends no subsection.
    use qhca_qtest::verbs::{alloc_pd, in_words, obj_cmd, reg_mr_bytes};
    let physical = |h: &mut Hca, uar: u32| {
        let (st, pdn) = alloc_pd(h, uar);
        assert_eq!(st, QHCA_CMD_OK);
        let b = reg_mr_bytes(uar, pdn, 0, u64::MAX, QHCA_ACCESS_PHYSICAL, 0, 0);
        obj_cmd(h, QHCA_CMD_REG_MR, in_words(&b)).0
    };
    let alloc = |h: &mut Hca, flags: u32| {
        let mut c = h.cmd(QHCA_CMD_ALLOC_UAR);
        c.in_[0] = flags as u64;
        let e = h.exec(&c);
        assert_eq!(e.status as u32, QHCA_CMD_OK);
        e.data[0]
    };
    let migrate = |qmp: &std::path::Path, stream: &std::path::Path| {
        let mut q = Qmp::connect(qmp);
        q.ok(&format!(
            r#"{{"execute":"migrate","arguments":{{"uri":"file:{}"}}}}"#,
            stream.display()
        ));
        q.wait_migration();
        std::fs::read(stream).expect("migration stream")
    };
    let name = b"qhca/kernel";
    let find = |s: &[u8]| s.windows(name.len()).position(|w| w == name);
    let props = "num-uars=4";

    // A user context only: no subsection.
    let (qmp_u, stream_u) = (socket_path("qmp-user"), socket_path("migration-user"));
    let mut u = Hca::start_with(props, &["-qmp", &qmp_arg(&qmp_u)]);
    u.bring_up(3, 3);
    assert_eq!(alloc(&mut u, 0), 0);
    assert_eq!(find(&migrate(&qmp_u, &stream_u)), None);
    drop(u);

    // Page 0 a user's, page 1 the kernel's, page 2 the kernel's until freed, page 3 free.
    let (qmp_a, stream) = (socket_path("qmp-kernel"), socket_path("migration-kernel"));
    let mut a = Hca::start_with(props, &["-qmp", &qmp_arg(&qmp_a)]);
    a.bring_up(3, 3);
    assert_eq!(alloc(&mut a, 0), 0);
    assert_eq!(alloc(&mut a, QHCA_UAR_KERNEL), 1);
    assert_eq!(alloc(&mut a, QHCA_UAR_KERNEL), 2);
    assert_eq!(a.free_uar(2), QHCA_CMD_OK);
    let good = migrate(&qmp_a, &stream);
    let (pi, ci) = (a.cmd_pi, a.eq_ci);
    drop(a);
    // The subsection's name, its version (4 bytes), then one flag per page.
    let at = find(&good).expect("subsection qhca/kernel in the stream") + name.len() + 4;
    assert_eq!(good[at..at + 4], [0, 1, 0, 0], "the kernel flags");

    let mut b = load(props, &stream).expect("the stream with a kernel context");
    (b.cmdq_base, b.cmdq_log, b.eq_base, b.eq_log) = (CMDQ_RAM, 3, EQ_RAM, 3);
    (b.cmd_pi, b.eq_ci) = (pi, ci);
    assert_eq!(physical(&mut b, 1), QHCA_CMD_OK, "page 1, the kernel's");
    assert_eq!(physical(&mut b, 0), QHCA_CMD_BAD_PARAM, "page 0, a user's");
    assert_eq!(alloc(&mut b, 0), 2, "page 2 free, as a user's");
    assert_eq!(
        physical(&mut b, 2),
        QHCA_CMD_BAD_PARAM,
        "page 2, a user's now"
    );
    drop(b);

    let path = socket_path("tampered-kernel");
    for (what, flags) in [
        ("a free page", [0, 1, 1, 0]),
        ("the last page", [0, 1, 0, 1]),
    ] {
        let mut bad = good.clone();
        bad[at..at + 4].copy_from_slice(&flags);
        std::fs::write(&path, &bad).unwrap();
        match load(props, &path) {
            Ok(_) => panic!("a stream with {what} a kernel context's loaded"),
            Err(e) => assert!(e.contains("qhca"), "{what}: refusal: {e}"),
        }
    }
}
