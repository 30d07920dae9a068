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
//! Commands are serialised by one mutex, so at most one CMD_DONE is outstanding; it is matched by
//! token. The event ring also carries asynchronous events (completion events of armed CQs, QP and
//! CQ errors). It is drained by the threaded interrupt handler, which wakes the command waiter and
//! hands the other events to the device's dispatcher, and by the waiter itself: once right after
//! its doorbell (the device runs a short command inside the doorbell write, so its answer is
//! usually there already) and whenever it is not woken in time. Neither side trusts the other's indices: the driver keeps its own, masks them, and
//! checks the token of every completion.
//!
//! A queue that fails (a command times out, or the device answers out of turn) is dead for good,
//! and the device is stopped (reset, bus mastering off, [`EqHost::stop`]) before the failing
//! command returns: its caller, and every later one, may then free what the device was given.
//!
//! The rings live in the state their locks guard, so that unbind can free them while the driver
//! is still bound ([`CmdQueue::release`], once the device is stopped) although user contexts keep
//! the queue itself alive: from then on a command fails with `ENODEV` and the event ring reads
//! as empty.

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
    transmute::AsBytes,
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
/// How long a command whose doorbell fault injection suppressed waits (see [`EqHost::inject`]).
const INJECTED_TIMEOUT: Delta = Delta::from_millis(100);

/// What the queue needs from the device that owns it.
pub(crate) trait EqHost {
    fn dev(&self) -> &Device;
    fn bar(&self) -> &regs::SharedBar0;
    /// Dispatches an event that is not a command completion. Runs under the event-queue lock: it
    /// must not post a command.
    fn on_event(&self, ev: AsyncEvent);
    /// Stops the device for good: it does no more DMA once this returns. Called once, when the
    /// queue dies, before the failing command returns.
    fn stop(&self);
    /// Fault injection: true if the next command's doorbell is to be left unrung, so that it
    /// times out.
    fn inject(&self) -> bool;
}

/// What a completed command returned.
pub(crate) struct CmdOutput {
    pub(crate) data: [u64; 2],
}

/// A command to post; `Cmd::new(opcode)` then set what the opcode takes.
pub(crate) struct Cmd(uapi::qhca_cmd);

impl Cmd {
    pub(crate) fn new(opcode: u32) -> Self {
        Self(uapi::qhca_cmd {
            opcode: (opcode as u16).to_le(),
            ..Default::default()
        })
    }

    pub(crate) fn input(mut self, i: usize, value: u64) -> Self {
        self.0.in_[i] = value.to_le();
        self
    }

    /// Lays `args`, one of the `qhca_cmd_*` input structures (already little-endian), over
    /// `in[]`.
    pub(crate) fn input_struct<T: AsBytes>(mut self, args: &T) -> Self {
        let bytes = args.as_bytes();
        for (i, chunk) in bytes.chunks(8).take(self.0.in_.len()).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            // Raw bytes: the structure's fields are little-endian already.
            self.0.in_[i] = u64::from_ne_bytes(w);
        }
        self
    }

    /// Sets `QHCA_CMD_FLAG_*` bits (the queue adds `QHCA_CMD_FLAG_POLLED` itself).
    pub(crate) fn flags(mut self, flags: u32) -> Self {
        self.0.flags |= (flags as u16).to_le();
        self
    }

    /// The word beyond `in[]` (CREATE_QP: the SRQ; MAP_ODP: the token to resume).
    pub(crate) fn input_ext(mut self, value: u32) -> Self {
        self.0.in_ext = value.to_le();
        self
    }

    pub(crate) fn output(mut self, addr: u64, len: u32) -> Self {
        self.0.out_addr = addr.to_le();
        self.0.out_len = len.to_le();
        self
    }
}

/// Command-side state, held while a command is in flight.
struct CmdState {
    /// The command ring; `None` once released at unbind.
    ring: Option<Coherent<[uapi::qhca_cmd]>>,
    /// Next command ring slot (free-running).
    pi: u32,
    /// Token of the next command.
    token: u32,
}

/// The answer to the command in flight, once its event has been consumed.
struct Done {
    token: u32,
    status: u32,
    data: [u64; 2],
}

/// Event-side state: the consumer index and what it found.
struct EqState {
    /// The event ring; `None` once released at unbind.
    ring: Option<Coherent<[uapi::qhca_eqe]>>,
    /// Next event ring slot to read (free-running).
    ci: u32,
    /// A CMD_DONE event consumed but not yet picked up by the waiter.
    done: Option<Done>,
    /// Set once a command timed out, the device failed, or it sent garbage: every later command
    /// fails with `EIO` at once instead of waiting again.
    dead: bool,
}

/// An event that is not a command completion, handed to the device's dispatcher.
pub(crate) struct AsyncEvent {
    pub(crate) kind: u32,
    pub(crate) data: [u64; 2],
    /// The entry's `status` byte (`flags` of a page fault).
    pub(crate) status: u8,
    pub(crate) token: u32,
    /// The bytes between `data` and `owner` (`length` of a page fault, then reserved).
    pub(crate) tail: [u8; 7],
}

impl AsyncEvent {
    /// An event with only a type and `data` (the other fields zero).
    pub(crate) fn new(kind: u32, data: [u64; 2]) -> Self {
        Self {
            kind,
            data,
            status: 0,
            token: 0,
            tail: [0; 7],
        }
    }
}

/// The two rings. Commands are serialised by `cmd`; the event ring is drained under `eq` by the
/// threaded interrupt handler and by a command waiter that did not get woken in time. Lock
/// order: `cmd`, then `eq`.
#[pin_data]
pub(crate) struct CmdQueue {
    #[pin]
    cmd: Mutex<CmdState>,
    #[pin]
    eq: Mutex<EqState>,
    /// Notified when a CMD_DONE has been consumed.
    #[pin]
    done: CondVar,
    /// Event-queue interrupts seen.
    irqs: Atomic<u64>,
    /// Set when the queue dies, cleared by the one [`CmdQueue::take_death`] that reports it.
    died: Atomic<bool>,
    /// The device has `QHCA_CAP_CMD_FLAGS`: commands go with `QHCA_CMD_FLAG_POLLED`. Off until
    /// the capabilities are read (QUERY_DEVICE itself goes without: an older device refuses
    /// any flag).
    flags: Atomic<bool>,
}

impl CmdQueue {
    /// Allocates both rings, zeroed (the owner bits of a fresh event ring are all 0).
    pub(crate) fn new(dev: &Device<Bound>) -> Result<impl PinInit<Self, Error>> {
        let cmd_ring: Coherent<[uapi::qhca_cmd]> =
            CoherentBox::zeroed_slice(dev, CMDQ_ENTRIES, GFP_KERNEL)?.into();
        let eq_ring: Coherent<[uapi::qhca_eqe]> =
            CoherentBox::zeroed_slice(dev, EQ_ENTRIES, GFP_KERNEL)?.into();
        Ok(try_pin_init!(Self {
            cmd <- new_mutex!(CmdState { ring: Some(cmd_ring), pi: 0, token: 1 }),
            eq <- new_mutex!(EqState { ring: Some(eq_ring), ci: 0, done: None, dead: false }),
            done <- new_condvar!(),
            irqs: Atomic::new(0),
            died: Atomic::new(false),
            flags: Atomic::new(false),
        }? Error))
    }

    /// The DMA addresses of the command and event rings, for [`program`].
    ///
    /// # Errors
    ///
    /// `ENODEV` once the rings are released.
    pub(crate) fn ring_addresses(&self) -> Result<(u64, u64)> {
        let cmd = self.cmd.lock().ring.as_ref().ok_or(ENODEV)?.dma_address();
        let eq = self.eq.lock().ring.as_ref().ok_or(ENODEV)?.dma_address();
        Ok((cmd, eq))
    }
}

/// Tells the device where the rings are (`(cmd, eq)` from [`CmdQueue::ring_addresses`]). Called
/// with the device reset and disabled, at probe. Takes no lock: it runs inside the BAR's access
/// guard, an RCU read-side section.
pub(crate) fn program(bar: &regs::Bar0<'_>, (cmd, eq): (u64, u64)) {
    bar.write32(cmd as u32, regs::CMDQ_BASE_LO);
    bar.write32((cmd >> 32) as u32, regs::CMDQ_BASE_HI);
    bar.write32(CMDQ_LOG, regs::CMDQ_LOG_SIZE);
    bar.write32(eq as u32, regs::EQ_BASE_LO);
    bar.write32((eq >> 32) as u32, regs::EQ_BASE_HI);
    bar.write32(EQ_LOG, regs::EQ_LOG_SIZE);
}

impl CmdQueue {
    /// Makes the queue dead without a report (unbind, once the device is stopped: no answer
    /// comes any more): a command in flight gives up within its next poll (10 ms) with `EIO`
    /// instead of timing out, and later ones fail at once.
    pub(crate) fn halt(&self) {
        self.eq.lock().dead = true;
        self.done.notify_all();
    }

    /// Frees both rings (unbind, with the driver still bound). The device must be stopped: it
    /// does no more DMA. The queue is dead from then on: every command fails, with `ENODEV`, and
    /// the event ring reads as empty.
    pub(crate) fn release(&self) {
        // A command in flight gives up and lets go of `cmd`.
        self.halt();
        let rings = {
            let mut c = self.cmd.lock();
            let mut eq = self.eq.lock();
            eq.done = None;
            (c.ring.take(), eq.ring.take())
        };
        drop(rings);
    }

    /// Counts an event-queue interrupt (hard-IRQ half).
    pub(crate) fn count_irq(&self) {
        self.irqs.add(1, Relaxed);
    }

    pub(crate) fn irq_count(&self) -> u64 {
        self.irqs.load(Relaxed)
    }

    /// The threaded half of the event-queue interrupt: consumes every event, hands asynchronous
    /// ones to `on_event`, and wakes a command waiter whose answer arrived.
    pub(crate) fn service(&self, host: &dyn EqHost) {
        let mut eq = self.eq.lock();
        self.drain(host, &mut eq);
        if eq.done.is_some() {
            self.done.notify_all();
        }
    }

    /// Consumes every event the device has written and publishes the consumer index.
    fn drain(&self, host: &dyn EqHost, eq: &mut EqState) {
        let start = eq.ci;
        while let Some(eqe) = self.next_event(eq) {
            let kind = u32::from(eqe.type_);
            let data = [u64::from_le(eqe.data[0]), u64::from_le(eqe.data[1])];
            if kind == uapi::QHCA_EQE_CMD_DONE {
                if eq.done.is_some() {
                    dev_err!(
                        host.dev(),
                        "second command completion in flight; device is broken\n"
                    );
                    self.die(host, eq);
                }
                eq.done = Some(Done {
                    token: u32::from_le(eqe.token),
                    status: u32::from(eqe.status),
                    data,
                });
            } else {
                host.on_event(AsyncEvent {
                    kind,
                    data,
                    status: eqe.status,
                    token: u32::from_le(eqe.token),
                    tail: eqe.rsvd1,
                });
            }
        }
        if eq.ci != start {
            let ci = eq.ci;
            let _ = regs::with(host.bar(), |b| b.write32(ci, regs::EQ_CI));
        }
    }

    /// Declares the queue dead and stops the device, once.
    fn die(&self, host: &dyn EqHost, eq: &mut EqState) {
        if !eq.dead {
            eq.dead = true;
            host.stop();
            self.died.store(true, Relaxed);
        }
    }

    /// Declares the queue dead because the device answered what no working device would (e.g. a
    /// handle out of range): the device is stopped as after a timeout.
    pub(crate) fn fail(&self, host: &dyn EqHost) {
        let mut eq = self.eq.lock();
        self.die(host, &mut eq);
    }

    /// True once, after the queue died: the caller then tells the device's users.
    pub(crate) fn take_death(&self) -> bool {
        self.died.xchg(false, Relaxed)
    }

    /// The device has `QHCA_CAP_CMD_FLAGS`: later commands go with `QHCA_CMD_FLAG_POLLED`.
    pub(crate) fn use_flags(&self) {
        self.flags.store(true, Relaxed);
    }

    /// True if the queue is dead (and the device stopped).
    pub(crate) fn is_dead(&self) -> bool {
        self.eq.lock().dead
    }

    /// Posts `cmd`, waits for its completion event and returns its output.
    ///
    /// # Errors
    ///
    /// - `ENODEV`: the device is unbound.
    /// - `EIO`: the device did not answer within [`CMD_TIMEOUT`], reported a fatal error, or
    ///   answered with a malformed event. The queue is then dead for good.
    /// - The errno matching the command's status (see [`status_to_errno`]).
    pub(crate) fn exec(&self, host: &dyn EqHost, mut cmd: Cmd) -> Result<CmdOutput> {
        let (dev, bar) = (host.dev(), host.bar());
        let mut c = self.cmd.lock();
        if c.ring.is_none() {
            return Err(ENODEV);
        }
        if self.eq.lock().dead {
            return Err(EIO);
        }
        let token = c.token;
        c.token = c.token.wrapping_add(1);
        cmd.0.token = token.to_le();
        // We look for the answer as soon as the doorbell write returns (below): a command the
        // device completes inside that write needs no interrupt, if the device knows the flag.
        if self.flags.load(Relaxed) {
            cmd = cmd.flags(uapi::QHCA_CMD_FLAG_POLLED);
        }

        let slot = c.pi as usize & (CMDQ_ENTRIES - 1);
        write_cmd(c.ring.as_ref().ok_or(ENODEV)?, slot, &cmd.0)?;
        c.pi = c.pi.wrapping_add(1);
        let pi = c.pi;
        let timeout = if host.inject() {
            INJECTED_TIMEOUT
        } else {
            // `write32` is `writel`, which orders the ring write above before the doorbell
            // reaches the device.
            regs::with(bar, |b| b.write32(pi, regs::CMDQ_PI))?;
            CMD_TIMEOUT
        };

        let start = Instant::<Monotonic>::now();
        let mut eq = self.eq.lock();
        // The device runs a command inside the doorbell write itself when it can (one with no
        // page list to read): its completion is then in the ring already, with no interrupt
        // (`QHCA_CMD_FLAG_POLLED`). Look before sleeping on the interrupt.
        self.drain(host, &mut eq);
        loop {
            if let Some(done) = eq.done.take() {
                if done.token != token {
                    dev_err!(
                        dev,
                        "completion for token {} while waiting for {}\n",
                        done.token,
                        token
                    );
                    self.die(host, &mut eq);
                    return Err(EIO);
                }
                status_to_errno(done.status)?;
                return Ok(CmdOutput { data: done.data });
            }
            if eq.dead {
                return Err(EIO);
            }
            if start.elapsed() > timeout {
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
                self.die(host, &mut eq);
                return Err(EIO);
            }
            // Sleep until the interrupt thread has the answer, or 10 ms, then look for ourselves:
            // a lost wake-up only costs latency. A pending signal (e.g. a process being killed
            // while it closes the device) must not turn this into a busy loop, so sleep a little.
            match self
                .done
                .wait_interruptible_timeout(&mut eq, msecs_to_jiffies(10))
            {
                kernel::sync::CondVarTimeoutResult::Woken { .. } => continue,
                kernel::sync::CondVarTimeoutResult::Signal { .. } => {
                    drop(eq);
                    kernel::time::delay::fsleep(Delta::from_micros(200));
                    eq = self.eq.lock();
                }
                kernel::sync::CondVarTimeoutResult::Timeout => {}
            }
            self.drain(host, &mut eq);
        }
    }

    /// Returns the next event if the device has written it, and advances the consumer index.
    /// None once the ring is released.
    fn next_event(&self, eq: &mut EqState) -> Option<uapi::qhca_eqe> {
        let eqe = read_event(eq.ring.as_ref()?, eq.ci)?;
        eq.ci = eq.ci.wrapping_add(1);
        Some(eqe)
    }
}

/// Writes `cmd` (already little-endian) into command ring slot `slot`.
fn write_cmd(ring: &Coherent<[uapi::qhca_cmd]>, slot: usize, cmd: &uapi::qhca_cmd) -> Result {
    io_write!(ring, [try: slot].opcode, cmd.opcode);
    io_write!(ring, [try: slot].flags, cmd.flags);
    io_write!(ring, [try: slot].token, cmd.token);
    io_write!(ring, [try: slot].out_addr, cmd.out_addr);
    io_write!(ring, [try: slot].out_len, cmd.out_len);
    io_write!(ring, [try: slot].in_ext, cmd.in_ext);
    for (i, v) in cmd.in_.iter().enumerate() {
        io_write!(ring, [try: slot].in_[try: i], *v);
    }
    Ok(())
}

/// The event at free-running index `ci` of `ring`, if the device has written it.
fn read_event(ring: &Coherent<[uapi::qhca_eqe]>, ci: u32) -> Option<uapi::qhca_eqe> {
    let slot = ci as usize & (EQ_ENTRIES - 1);
    let pass = ci >> EQ_LOG;
    let want = ((pass + 1) & 1) as u8;
    let owner: u8 = io_read!(ring, [panic: slot].owner);
    if owner & uapi::QHCA_EQE_OWNER as u8 != want {
        return None;
    }
    // The owner byte is written last by the device: read the body only after it.
    dma_mb(Read);
    let eqe = uapi::qhca_eqe {
        type_: io_read!(ring, [panic: slot].type_),
        status: io_read!(ring, [panic: slot].status),
        token: io_read!(ring, [panic: slot].token),
        data: [
            io_read!(ring, [panic: slot].data[build: 0]),
            io_read!(ring, [panic: slot].data[build: 1]),
        ],
        rsvd1: [
            io_read!(ring, [panic: slot].rsvd1[build: 0]),
            io_read!(ring, [panic: slot].rsvd1[build: 1]),
            io_read!(ring, [panic: slot].rsvd1[build: 2]),
            io_read!(ring, [panic: slot].rsvd1[build: 3]),
            io_read!(ring, [panic: slot].rsvd1[build: 4]),
            io_read!(ring, [panic: slot].rsvd1[build: 5]),
            io_read!(ring, [panic: slot].rsvd1[build: 6]),
        ],
        owner,
        ..Default::default()
    };
    Some(eqe)
}

/// Maps a command status to the errno user space sees.
pub(crate) fn status_to_errno(status: u32) -> Result {
    match status {
        uapi::QHCA_CMD_OK => Ok(()),
        uapi::QHCA_CMD_NO_RESOURCES => Err(ENOSPC),
        uapi::QHCA_CMD_BAD_PARAM | uapi::QHCA_CMD_BAD_RESOURCE => Err(EINVAL),
        // An object in use (a region with windows bound to it); MODIFY_QP says EINVAL itself.
        uapi::QHCA_CMD_BAD_STATE => Err(EBUSY),
        uapi::QHCA_CMD_BAD_OPCODE => Err(EOPNOTSUPP),
        uapi::QHCA_CMD_DMA_ERROR => Err(EFAULT),
        _ => Err(EIO),
    }
}
