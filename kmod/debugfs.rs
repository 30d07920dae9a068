// SPDX-License-Identifier: GPL-2.0

//! `/sys/kernel/debug/qhca/`: what the driver holds, and fault injection for the tests.
//!
//! - `pinned_pages` (read): pages pinned by every context right now.
//! - `fail_cmds` (read/write): how many of the next commands, of any device, time out (their
//!   doorbell is not rung), so that the dead-queue path runs.
//! - `fail_probe` (read/write): the next probe fails after enabling the device: 1 as if it never
//!   became ready, 2 with QUERY_DEVICE timing out. Consumed by the probe it fails.
//! - `fake_num_uars` (read/write): if not 0, probe takes it as the device's `num_uars` (a device
//!   that claims more doorbell pages than its BAR holds).
//! - `refuse_destroys` (read/write): how many of the next destroy commands fail as if the device
//!   refused them (without reaching it), so that the object stays in the device.
//! - `stall_events_ms` (read/write): the next event-queue interrupt's thread sleeps this long
//!   before it drains the queue (at most 10 s), so that the device can overflow it.
//! - `bad_dma_pages` (read/write): how many of the next page lists (of any object) get their last
//!   entry replaced by an address nothing maps ([`crate::pagelist::BAD_DMA`]), as a driver bug
//!   would: the device's accesses to that page must fail (behind the guest IOMMU, with a DMAR
//!   fault in the log), never reach memory.
//! - `odp_mapped_pages` (read): pages DMA-mapped for on-demand-paged regions right now.
//! - `odp_read_ahead` (read/write): not 0: a fault that continues a sequential stream has the
//!   pages after it mapped ahead ([`crate::odp`]). Off by default: under TCG the mapping is
//!   CPU-bound (the kernel zeroes every fresh page), and the read-ahead's steps delayed the faults
//!   queued behind them more than they spared (bench kernel: median fault service 0.5-2 ms with
//!   it against 0.5-0.8 ms without, the untouched stream no faster).
//! - `qhcaN/odp` also has where fault service spends its time: per phase (`wait` for the
//!   context's worker, `resolve` the pages, `map` them, `map_cmd` and `resume_cmd`, and `ahead`,
//!   one step of a read-ahead), nanoseconds summed and a histogram of the durations by powers of
//!   two of microseconds.
//! - `watched_regions` (read): watched regions (`QHCA_ACCESS_WATCHED`) not yet deregistered.
//! - `watch_revocations` (read): watched regions revoked by a change of their mappings so far.
//! - `qhcaN/state` (read): the device's contexts, command queue and lost events; the kernel
//!   context's page and objects (the kernel consumers' share, [`crate::kverbs`]); while bound,
//!   the objects the device holds by kind (its `NUM_*` registers, address handles included, the
//!   kernel's among them) and the datagrams it delivered to no QP (`UD_NO_QP`).
//! - `qhcaN/odp` (read): on-demand paging: faults handled, resumed OK and with an error, RESUMEs
//!   the device refused (the QP moved on), INVALIDATE_ODP commands, pages mapped and unmapped,
//!   prefetches (ADVISE_MR), faults dropped (nobody waits: an unknown QP), faults resumed to be
//!   raised again (invalidations kept racing with them).
//! - `qhcaN/limits` (read): the per-user limits of the device's pools, and what each user holds
//!   ([`crate::limits`]; the kernel context's holdings are those of uid 4294967295, unlimited).
//! - `qhcaN/inject_event` (write `TYPE DATA0 DATA1`): dispatches an asynchronous event as if the
//!   device had posted it (a device that names the wrong context, a stale object).

use crate::{cmdq::AsyncEvent, device::QhcaDevice, shim, uapi};
use kernel::{
    debugfs::{Dir, File},
    fmt,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
    uaccess::UserSliceReader,
};

pub(crate) static FAIL_CMDS: Atomic<u32> = Atomic::new(0);
pub(crate) static FAIL_PROBE: Atomic<u32> = Atomic::new(0);
pub(crate) static FAKE_NUM_UARS: Atomic<u32> = Atomic::new(0);
pub(crate) static REFUSE_DESTROYS: Atomic<u32> = Atomic::new(0);
pub(crate) static STALL_EVENTS_MS: Atomic<u32> = Atomic::new(0);
pub(crate) static BAD_DMA_PAGES: Atomic<u32> = Atomic::new(0);
pub(crate) static ODP_READ_AHEAD: Atomic<u32> = Atomic::new(0);

/// Takes one from a count-down knob; true if it was not zero.
pub(crate) fn take(knob: &Atomic<u32>) -> bool {
    let mut n = knob.load(Relaxed);
    while n != 0 {
        match knob.cmpxchg(n, n - 1, Relaxed) {
            Ok(_) => return true,
            Err(now) => n = now,
        }
    }
    false
}

kernel::sync::global_lock! {
    // SAFETY: `Global::new` initialises it, once, at module load, before any probe can read it.
    unsafe(uninit) static ROOT: Mutex<Option<Dir>> = None;
}

/// The directory and its files, for as long as the module is loaded.
#[pin_data(PinnedDrop)]
pub(crate) struct Global {
    _dir: Dir,
    #[pin]
    _pinned: File<()>,
    #[pin]
    _odp_mapped: File<()>,
    #[pin]
    _watched: File<()>,
    #[pin]
    _revocations: File<()>,
    #[pin]
    _fail_cmds: File<&'static Atomic<u32>>,
    #[pin]
    _fail_probe: File<&'static Atomic<u32>>,
    #[pin]
    _fake_num_uars: File<&'static Atomic<u32>>,
    #[pin]
    _refuse_destroys: File<&'static Atomic<u32>>,
    #[pin]
    _stall_events: File<&'static Atomic<u32>>,
    #[pin]
    _bad_dma: File<&'static Atomic<u32>>,
    #[pin]
    _read_ahead: File<&'static Atomic<u32>>,
}

/// Reads at most 64 bytes of text written to a debugfs file.
fn read_text<'a>(r: &mut UserSliceReader, buf: &'a mut [u8; 64]) -> Result<&'a str> {
    let n = r.len();
    if n == 0 || n > buf.len() {
        return Err(EINVAL);
    }
    r.read_slice(&mut buf[..n])?;
    core::str::from_utf8(&buf[..n]).map_err(|_| EINVAL)
}

fn show(v: &&'static Atomic<u32>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "{}", v.load(Relaxed))
}

fn store(v: &&'static Atomic<u32>, r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 64];
    let s = read_text(r, &mut buf)?;
    v.store(s.trim().parse::<u32>().map_err(|_| EINVAL)?, Relaxed);
    Ok(())
}

fn show_pinned(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "{}", shim::pinned_pages())
}

fn show_odp_mapped(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "{}", crate::odp::MAPPED_PAGES.load(Relaxed))
}

fn show_watched(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "{}", crate::watch::WATCHED.load(Relaxed))
}

fn show_revocations(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "{}", crate::watch::REVOCATIONS.load(Relaxed))
}

impl Global {
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        // SAFETY: Called once, from module init, before the driver is registered.
        unsafe { ROOT.init() };
        let dir = Dir::new(c"qhca");
        *ROOT.lock() = Some(dir.clone());
        try_pin_init!(Self {
            _pinned <- dir.read_callback_file(c"pinned_pages", (), &show_pinned),
            _odp_mapped <- dir.read_callback_file(c"odp_mapped_pages", (), &show_odp_mapped),
            _watched <- dir.read_callback_file(c"watched_regions", (), &show_watched),
            _revocations <- dir.read_callback_file(c"watch_revocations", (), &show_revocations),
            _fail_cmds <- dir.read_write_callback_file(c"fail_cmds", &FAIL_CMDS, &show, &store),
            _fail_probe <- dir.read_write_callback_file(c"fail_probe", &FAIL_PROBE, &show, &store),
            _fake_num_uars <- dir.read_write_callback_file(
                c"fake_num_uars",
                &FAKE_NUM_UARS,
                &show,
                &store
            ),
            _refuse_destroys <- dir.read_write_callback_file(
                c"refuse_destroys",
                &REFUSE_DESTROYS,
                &show,
                &store
            ),
            _stall_events <- dir.read_write_callback_file(
                c"stall_events_ms",
                &STALL_EVENTS_MS,
                &show,
                &store
            ),
            _bad_dma <- dir.read_write_callback_file(
                c"bad_dma_pages",
                &BAD_DMA_PAGES,
                &show,
                &store
            ),
            _read_ahead <- dir.read_write_callback_file(
                c"odp_read_ahead",
                &ODP_READ_AHEAD,
                &show,
                &store
            ),
            _dir: dir,
        }? Error)
    }
}

#[pinned_drop]
impl PinnedDrop for Global {
    fn drop(self: Pin<&mut Self>) {
        *ROOT.lock() = None;
    }
}

/// A device's directory, `qhca/qhcaN/`.
#[pin_data]
pub(crate) struct DeviceDir {
    _dir: Dir,
    #[pin]
    _state: File<Arc<QhcaDevice>>,
    #[pin]
    _inject: File<Arc<QhcaDevice>>,
    #[pin]
    _odp: File<Arc<QhcaDevice>>,
    #[pin]
    _limits: File<Arc<QhcaDevice>>,
}

fn show_limits(dev: &Arc<QhcaDevice>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    dev.limits.show(dev, f)
}

fn show_state(dev: &Arc<QhcaDevice>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    dev.show_state(f)
}

fn show_odp(dev: &Arc<QhcaDevice>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    dev.odp.stats.show(f)
}

fn inject(dev: &Arc<QhcaDevice>, r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 64];
    let mut words = read_text(r, &mut buf)?.split_whitespace();
    let mut next = || -> Result<u64> {
        let w = words.next().ok_or(EINVAL)?;
        match w.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => w.parse::<u64>(),
        }
        .map_err(|_| EINVAL)
    };
    let kind = u32::try_from(next()?).map_err(|_| EINVAL)?;
    let data = [next()?, next()?];
    if kind == uapi::QHCA_EQE_CMD_DONE {
        return Err(EINVAL);
    }
    QhcaDevice::inject_event(dev, AsyncEvent::new(kind, data));
    Ok(())
}

impl DeviceDir {
    pub(crate) fn new(name: &'static CStr, dev: &Arc<QhcaDevice>) -> impl PinInit<Self, Error> {
        let dir = match ROOT.lock().as_ref() {
            Some(root) => root.subdir(name),
            None => Dir::new(name),
        };
        let (a, b, c, d) = (dev.clone(), dev.clone(), dev.clone(), dev.clone());
        try_pin_init!(Self {
            _state <- dir.read_callback_file(c"state", a, &show_state),
            _inject <- dir.write_callback_file(c"inject_event", b, &inject),
            _odp <- dir.read_callback_file(c"odp", c, &show_odp),
            _limits <- dir.read_callback_file(c"limits", d, &show_limits),
            _dir: dir,
        }? Error)
    }
}
