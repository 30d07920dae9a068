// SPDX-License-Identifier: GPL-2.0

//! The command queue (driver -> device) and the event queue (device -> driver).
//!
//! Who writes what (`qhca-abi.h` has the formats):
//! - Command ring: the driver writes entries, then the free-running producer index into the
//!   `CMDQ_PI` register. The device only reads the ring.
//! - Event ring: the device writes entries, the owner byte last, and raises MSI-X vector 0. The
//!   driver reads an entry only once its owner bit matches the pass the driver is on, then
//!   publishes its free-running consumer index in `EQ_CI`. The device never overwrites an entry
//!   the driver has not consumed.
//!
//! Commands are serialised by one mutex: there is one in flight at a time, so the event that
//! answers it is the next one on the ring. The interrupt handler only wakes the waiter; the waiter
//! consumes the event itself. Neither side trusts the other's indices: the driver keeps its own,
//! masks them, and checks the token of every event.

use crate::{regs, uapi};
use kernel::{
    device::{Bound, Device},
    dma::{Coherent, CoherentBox},
    io::{io_read, io_write, Io},
    new_condvar, new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        barrier::{dma_mb, Read},
        CondVar, Mutex,
    },
    time::{msecs_to_jiffies, Delta, Instant, Monotonic},
};

/// log2 of the command ring's entries. One command is in flight at a time; a few spare slots let
/// the device's consumer index lag without the driver waiting.
pub(crate) const CMDQ_LOG: u32 = 4;
/// log2 of the event ring's entries.
pub(crate) const EQ_LOG: u32 = 6;

const CMDQ_ENTRIES: usize = 1 << CMDQ_LOG;
const EQ_ENTRIES: usize = 1 << EQ_LOG;

/// How long a command may take before the device is declared dead.
const CMD_TIMEOUT: Delta = Delta::from_millis(5000);

/// What a completed command returned.
pub(crate) struct CmdOutput {
    pub(crate) data: [u64; 2],
}

/// A command to post; `Cmd::new(opcode)` then set what the opcode takes.
pub(crate) struct Cmd(uapi::qhca_cmd);

impl Cmd {
    pub(crate) fn new(opcode: u32) -> Self {
        Self(uapi::qhca_cmd {
            opcode: opcode as u16,
            ..Default::default()
        })
    }

    pub(crate) fn input(mut self, i: usize, value: u64) -> Self {
        self.0.in_[i] = value.to_le();
        self
    }

    pub(crate) fn output(mut self, addr: u64, len: u32) -> Self {
        self.0.out_addr = addr.to_le();
        self.0.out_len = len.to_le();
        self
    }
}

/// Indices the driver owns; only touched with `CmdQueue::state` held.
struct State {
    /// Next command ring slot (free-running).
    cmd_pi: u32,
    /// Next event ring slot to read (free-running).
    eq_ci: u32,
    /// Token of the next command.
    token: u32,
    /// Set once a command timed out or the device reported a fatal error: every later command
    /// fails with `EIO` at once instead of waiting again.
    dead: bool,
}

/// The two rings and the lock that serialises commands.
#[pin_data]
pub(crate) struct CmdQueue {
    #[pin]
    state: Mutex<State>,
    /// Notified by the event-queue interrupt.
    #[pin]
    eq_event: CondVar,
    cmd_ring: Coherent<[uapi::qhca_cmd]>,
    eq_ring: Coherent<[uapi::qhca_eqe]>,
    /// Event-queue interrupts seen (for the log; a command can also complete by polling).
    irqs: Atomic<u64>,
}

impl CmdQueue {
    /// Allocates both rings, zeroed (the owner bits of a fresh event ring are all 0).
    pub(crate) fn new(dev: &Device<Bound>) -> Result<impl PinInit<Self, Error>> {
        let cmd_ring: Coherent<[uapi::qhca_cmd]> =
            CoherentBox::zeroed_slice(dev, CMDQ_ENTRIES, GFP_KERNEL)?.into();
        let eq_ring: Coherent<[uapi::qhca_eqe]> =
            CoherentBox::zeroed_slice(dev, EQ_ENTRIES, GFP_KERNEL)?.into();
        Ok(try_pin_init!(Self {
            state <- new_mutex!(State { cmd_pi: 0, eq_ci: 0, token: 1, dead: false }),
            eq_event <- new_condvar!(),
            cmd_ring,
            eq_ring,
            irqs: Atomic::new(0),
        }? Error))
    }

    /// Tells the device where the rings are. Called with the device reset and disabled.
    pub(crate) fn program(&self, bar: &regs::Bar0<'_>) {
        let cmd = self.cmd_ring.dma_address();
        let eq = self.eq_ring.dma_address();
        bar.write32(cmd as u32, regs::CMDQ_BASE_LO);
        bar.write32((cmd >> 32) as u32, regs::CMDQ_BASE_HI);
        bar.write32(CMDQ_LOG, regs::CMDQ_LOG_SIZE);
        bar.write32(eq as u32, regs::EQ_BASE_LO);
        bar.write32((eq >> 32) as u32, regs::EQ_BASE_HI);
        bar.write32(EQ_LOG, regs::EQ_LOG_SIZE);
    }

    /// Called from the event-queue interrupt handler: wakes the command waiter.
    pub(crate) fn notify(&self) {
        self.irqs.add(1, Relaxed);
        self.eq_event.notify_all();
    }

    pub(crate) fn irq_count(&self) -> u64 {
        self.irqs.load(Relaxed)
    }

    /// Posts `cmd`, waits for its completion event and returns its output.
    ///
    /// # Errors
    ///
    /// - `ENODEV`: the device is unbound.
    /// - `EIO`: the device did not answer within [`CMD_TIMEOUT`], reported a fatal error, or
    ///   answered with a malformed event. The queue is then dead for good.
    /// - The errno matching the command's status (see [`status_to_errno`]).
    pub(crate) fn exec(
        &self,
        dev: &Device,
        bar: &regs::SharedBar0,
        mut cmd: Cmd,
    ) -> Result<CmdOutput> {
        let mut st = self.state.lock();
        if st.dead {
            return Err(EIO);
        }
        let token = st.token;
        st.token = st.token.wrapping_add(1);
        cmd.0.token = token.to_le();

        let slot = st.cmd_pi as usize & (CMDQ_ENTRIES - 1);
        self.write_cmd(slot, &cmd.0)?;
        st.cmd_pi = st.cmd_pi.wrapping_add(1);
        let pi = st.cmd_pi;
        // `write32` is `writel`, which orders the ring write above before the doorbell reaches
        // the device.
        regs::with(bar, |b| b.write32(pi, regs::CMDQ_PI))?;

        let start = Instant::<Monotonic>::now();
        loop {
            if let Some(eqe) = self.next_event(&mut st) {
                let ci = st.eq_ci;
                regs::with(bar, |b| b.write32(ci, regs::EQ_CI))?;
                return self.finish(dev, &mut st, token, &eqe);
            }
            if start.elapsed() > CMD_TIMEOUT {
                let (status, syndrome) = regs::with(bar, |b| {
                    (b.read32(regs::STATUS), b.read32(regs::FATAL_SYNDROME))
                })
                .unwrap_or((0, 0));
                dev_err!(
                    dev,
                    "command {} timed out (status {:#x}, fatal syndrome {})\n",
                    u16::from_le(cmd.0.opcode),
                    status,
                    syndrome
                );
                st.dead = true;
                return Err(EIO);
            }
            // Sleep until the interrupt or 10 ms, whichever is first: a lost wake-up (the event
            // landed between the check above and the wait) only costs latency. A pending signal
            // (e.g. a process being killed while it closes the device) must not turn this into a
            // busy loop, so sleep a little then.
            if let kernel::sync::CondVarTimeoutResult::Signal { .. } =
                self.eq_event.wait_interruptible_timeout(&mut st, msecs_to_jiffies(10))
            {
                drop(st);
                kernel::time::delay::fsleep(Delta::from_micros(200));
                st = self.state.lock();
            }
        }
    }

    /// Writes `cmd` (already little-endian) into command ring slot `slot`.
    fn write_cmd(&self, slot: usize, cmd: &uapi::qhca_cmd) -> Result {
        let ring = &self.cmd_ring;
        io_write!(ring, [try: slot].opcode, cmd.opcode);
        io_write!(ring, [try: slot].flags, cmd.flags);
        io_write!(ring, [try: slot].token, cmd.token);
        io_write!(ring, [try: slot].out_addr, cmd.out_addr);
        io_write!(ring, [try: slot].out_len, cmd.out_len);
        io_write!(ring, [try: slot].rsvd0, cmd.rsvd0);
        for (i, v) in cmd.in_.iter().enumerate() {
            io_write!(ring, [try: slot].in_[try: i], *v);
        }
        Ok(())
    }

    /// Returns the next event if the device has written it, and advances the consumer index.
    fn next_event(&self, st: &mut State) -> Option<uapi::qhca_eqe> {
        let slot = st.eq_ci as usize & (EQ_ENTRIES - 1);
        let pass = st.eq_ci >> EQ_LOG;
        let want = ((pass + 1) & 1) as u8;
        let owner: u8 = io_read!(&self.eq_ring, [panic: slot].owner);
        if owner & uapi::QHCA_EQE_OWNER as u8 != want {
            return None;
        }
        // The owner byte is written last by the device: read the body only after it.
        dma_mb(Read);
        let ring = &self.eq_ring;
        let eqe = uapi::qhca_eqe {
            type_: io_read!(ring, [panic: slot].type_),
            status: io_read!(ring, [panic: slot].status),
            token: io_read!(ring, [panic: slot].token),
            data: [io_read!(ring, [panic: slot].data[build: 0]), io_read!(ring, [panic: slot].data[build: 1])],
            owner,
            ..Default::default()
        };
        st.eq_ci = st.eq_ci.wrapping_add(1);
        Some(eqe)
    }

    fn finish(
        &self,
        dev: &Device,
        st: &mut State,
        token: u32,
        eqe: &uapi::qhca_eqe,
    ) -> Result<CmdOutput> {
        let got = u32::from_le(eqe.token);
        if u32::from(eqe.type_) != uapi::QHCA_EQE_CMD_DONE || got != token {
            dev_err!(
                dev,
                "unexpected event type {} token {} (waiting for {})\n",
                eqe.type_,
                got,
                token
            );
            st.dead = true;
            return Err(EIO);
        }
        status_to_errno(u32::from(eqe.status))?;
        Ok(CmdOutput {
            data: [u64::from_le(eqe.data[0]), u64::from_le(eqe.data[1])],
        })
    }
}

/// Maps a command status to the errno user space sees.
pub(crate) fn status_to_errno(status: u32) -> Result {
    match status {
        uapi::QHCA_CMD_OK => Ok(()),
        uapi::QHCA_CMD_NO_RESOURCES => Err(ENOSPC),
        uapi::QHCA_CMD_BAD_PARAM | uapi::QHCA_CMD_BAD_RESOURCE | uapi::QHCA_CMD_BAD_STATE => {
            Err(EINVAL)
        }
        uapi::QHCA_CMD_BAD_OPCODE => Err(EOPNOTSUPP),
        _ => Err(EIO),
    }
}
