// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A full event queue holds commands back instead of overwriting unconsumed events or losing
//! completions: with a 2-entry EQ and 4 commands posted, 2 complete, the other 2 wait for EQ_CI.

use qhca_qtest::abi::*;
use qhca_qtest::Hca;

#[test]
fn commands_wait_for_eq_space_and_none_is_lost() {
    let mut h = Hca::start("");
    h.bring_up(3, 1); // 8-entry command ring, 2-entry event ring
    let cmds: Vec<_> = (0..4).map(|_| h.cmd(QHCA_CMD_NOP)).collect();
    h.post_batch(&cmds);
    h.wait_events(2);
    h.settle();
    assert_eq!(
        h.eq_pi(),
        2,
        "only 2 events fit in a 2-entry EQ nobody consumed"
    );
    let ci = h.reg(QHCA_REG_CMDQ_CI);
    assert!(
        (2..=3).contains(&ci),
        "CMDQ_CI {ci}: the device may not run commands it cannot complete"
    );
    assert_eq!(
        h.reg(QHCA_REG_EQ_OVERFLOWS),
        0,
        "waiting is not overflowing"
    );
    assert_eq!(h.status(), QHCA_STATUS_READY);
    // The two events are intact.
    let e0 = h.peek_eqe(0);
    let e1 = h.peek_eqe(1);
    assert_eq!((e0.token, e0.owner), (cmds[0].token, 1), "{e0:?}");
    assert_eq!((e1.token, e1.owner), (cmds[1].token, 1), "{e1:?}");

    // Consume one: exactly one more completes, into slot 0 with the owner bit flipped.
    h.completion_of(&cmds[0]);
    h.wait_events(2);
    h.settle();
    assert_eq!(h.eq_pi(), 3);
    assert_eq!(
        h.peek_eqe(1).token,
        cmds[1].token,
        "slot 1 not overwritten before it was consumed"
    );
    h.completion_of(&cmds[1]);
    let e = h.completion_of(&cmds[2]);
    assert_eq!(e.owner, 0, "second pass writes owner 0");
    let e = h.completion_of(&cmds[3]);
    assert_eq!(e.owner, 0);
    h.settle();
    assert_eq!(h.eq_pi(), 4, "no extra events");
    assert_eq!(h.reg(QHCA_REG_CMDQ_CI), 4);
    assert_eq!(h.reg(QHCA_REG_EQ_OVERFLOWS), 0);
    h.nop();
}

#[test]
fn side_effects_happen_once_across_a_full_eq() {
    let mut h = Hca::start("num-uars=16");
    h.bring_up(3, 1);
    let cmds: Vec<_> = (0..6).map(|_| h.cmd(QHCA_CMD_ALLOC_UAR)).collect();
    h.post_batch(&cmds);
    // Consume both events at once each time, as a batching driver would.
    let mut got = Vec::new();
    for pair in cmds.chunks(2) {
        h.wait_events(2);
        for c in pair {
            let e = h.completion_of(c);
            assert_eq!(e.status as u32, QHCA_CMD_OK);
            got.push(e.data[0]);
        }
    }
    assert_eq!(
        got,
        vec![0, 1, 2, 3, 4, 5],
        "each ALLOC_UAR ran exactly once, in order"
    );
    assert_eq!(h.alloc_uar(), (QHCA_CMD_OK, 6));
    assert_eq!(h.reg(QHCA_REG_EQ_OVERFLOWS), 0);
}

#[test]
fn full_command_ring_behind_a_full_eq() {
    // 2-entry command ring and 2-entry EQ, 2 + 2 commands: the second batch can only be posted
    // once the first one's events are consumed and the device has freed the ring slots.
    let mut h = Hca::start("");
    h.bring_up(1, 1);
    for round in 0..5 {
        let cmds: Vec<_> = (0..2).map(|_| h.cmd(QHCA_CMD_NOP)).collect();
        h.post_batch(&cmds);
        h.wait_events(2);
        let ci = h.reg(QHCA_REG_CMDQ_CI);
        assert_eq!(ci, h.cmd_pi, "round {round}: all posted commands consumed");
        for c in &cmds {
            h.completion_of(c);
        }
    }
    assert_eq!(h.reg(QHCA_REG_EQ_OVERFLOWS), 0);
}

#[test]
fn interrupt_fires_again_when_waiting_commands_complete() {
    let mut h = Hca::start("");
    h.bring_up(3, 1);
    h.setup_msix(false);
    h.set_reg(QHCA_REG_INTR_CTRL, QHCA_INTR_EQ_ENABLE);
    let cmds: Vec<_> = (0..4).map(|_| h.cmd(QHCA_CMD_NOP)).collect();
    h.post_batch(&cmds);
    h.wait_events(2);
    assert!(h.poll(|h| h.take_msi()), "MSI-X for the first events");
    h.completion_of(&cmds[0]);
    h.completion_of(&cmds[1]);
    h.wait_events(2);
    assert!(
        h.poll(|h| h.take_msi()),
        "MSI-X for the events posted after EQ_CI moved"
    );
    h.completion_of(&cmds[2]);
    h.completion_of(&cmds[3]);
}
