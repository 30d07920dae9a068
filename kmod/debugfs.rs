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

use crate::shim;
use kernel::{
    debugfs::{Dir, File},
    fmt,
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
    uaccess::UserSliceReader,
};

pub(crate) static FAIL_CMDS: Atomic<u32> = Atomic::new(0);
pub(crate) static FAIL_PROBE: Atomic<u32> = Atomic::new(0);
pub(crate) static FAKE_NUM_UARS: Atomic<u32> = Atomic::new(0);

/// The directory and its files, for as long as the module is loaded.
#[pin_data]
pub(crate) struct Global {
    _dir: Dir,
    #[pin]
    _pinned: File<()>,
    #[pin]
    _fail_cmds: File<&'static Atomic<u32>>,
    #[pin]
    _fail_probe: File<&'static Atomic<u32>>,
    #[pin]
    _fake_num_uars: File<&'static Atomic<u32>>,
}

fn show(v: &&'static Atomic<u32>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "{}", v.load(Relaxed))
}

fn store(v: &&'static Atomic<u32>, r: &mut UserSliceReader) -> Result {
    let mut buf = [0u8; 16];
    let n = r.len();
    if n == 0 || n > buf.len() {
        return Err(EINVAL);
    }
    r.read_slice(&mut buf[..n])?;
    let s = core::str::from_utf8(&buf[..n]).map_err(|_| EINVAL)?;
    v.store(s.trim().parse::<u32>().map_err(|_| EINVAL)?, Relaxed);
    Ok(())
}

fn show_pinned(_: &(), f: &mut fmt::Formatter<'_>) -> fmt::Result {
    writeln!(f, "{}", shim::pinned_pages())
}

impl Global {
    pub(crate) fn new() -> impl PinInit<Self, Error> {
        let dir = Dir::new(c"qhca");
        try_pin_init!(Self {
            _pinned <- dir.read_callback_file(c"pinned_pages", (), &show_pinned),
            _fail_cmds <- dir.read_write_callback_file(c"fail_cmds", &FAIL_CMDS, &show, &store),
            _fail_probe <- dir.read_write_callback_file(c"fail_probe", &FAIL_PROBE, &show, &store),
            _fake_num_uars <- dir.read_write_callback_file(
                c"fake_num_uars",
                &FAKE_NUM_UARS,
                &show,
                &store
            ),
            _dir: dir,
        }? Error)
    }
}
