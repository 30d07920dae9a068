// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The cycle counter, read as perftest reads it: `rdtsc` in the timed loops, calibrated against
//! the clock once, before them. A guest whose clocksource the vDSO cannot read (TCG often marks
//! the TSC unstable under load and falls back to HPET) makes every `Instant::now()` a system
//! call and an emulated MMIO read; `rdtsc` is neither, so the loops stay free of system calls and
//! measure the device, not the clock.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Counter ticks per microsecond, measured by [`calibrate`].
static TICKS_PER_US: OnceLock<f64> = OnceLock::new();

/// How long [`calibrate`] watches the counter against the clock.
const CALIBRATION: Duration = Duration::from_millis(20);

/// The counter now: `rdtsc` on x86_64.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn now() -> u64 {
    // SAFETY: `rdtsc` only reads the time-stamp counter: no memory access, no side effect, and
    // every x86_64 CPU has it (CR4.TSD is clear for user space on Linux).
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// The counter now: nanoseconds of the monotonic clock where there is no `rdtsc` (this reads
/// the clock, which the vDSO usually serves without a system call).
#[cfg(not(target_arch = "x86_64"))]
pub fn now() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Measures the counter's rate against the clock, once; call it before any timed loop so that
/// the clock is not read inside one. Returns ticks per microsecond.
pub fn calibrate() -> f64 {
    *TICKS_PER_US.get_or_init(|| {
        let (t0, c0) = (Instant::now(), now());
        while t0.elapsed() < CALIBRATION {
            std::hint::spin_loop();
        }
        let (t1, c1) = (Instant::now(), now());
        let rate = c1.wrapping_sub(c0) as f64 / ((t1 - t0).as_secs_f64() * 1e6);
        // A counter that did not move (or went backwards) would make every time zero or
        // absurd: fall back to 1 tick per ns, which at least keeps timeouts finite.
        if rate.is_finite() && rate > 0.0 {
            rate
        } else {
            1000.0
        }
    })
}

/// `ticks` of the counter in microseconds.
pub fn us(ticks: u64) -> f64 {
    ticks as f64 / calibrate()
}

/// `ticks` of the counter as a [`Duration`].
pub fn duration(ticks: u64) -> Duration {
    Duration::from_secs_f64(us(ticks) / 1e6)
}

/// `d` in ticks of the counter.
pub fn ticks(d: Duration) -> u64 {
    (d.as_secs_f64() * 1e6 * calibrate()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_forward_at_the_calibrated_rate() {
        let rate = calibrate();
        assert!(rate > 0.0);
        let (t0, c0) = (Instant::now(), now());
        std::thread::sleep(Duration::from_millis(30));
        let (elapsed, ticks_seen) = (t0.elapsed(), now() - c0);
        let measured = duration(ticks_seen).as_secs_f64();
        // Within a factor of two of the clock: enough to catch a wrong unit or a stuck counter
        // on a loaded machine.
        assert!(
            measured > elapsed.as_secs_f64() / 2.0 && measured < elapsed.as_secs_f64() * 2.0,
            "counter says {measured} s, clock {elapsed:?}"
        );
        assert_eq!(ticks(Duration::ZERO), 0);
        assert!((us(ticks(Duration::from_millis(5))) - 5000.0).abs() < 5.0);
    }
}
