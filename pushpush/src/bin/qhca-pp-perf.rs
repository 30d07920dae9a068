// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! qhca-pp-perf: the push-push data channel's message rate and bandwidth, beside plain RDMA
//! WRITEs on the same QPs.
//!
//! ```text
//! qhca-pp-perf [-d DEV] [-n MESSAGES] [-s SIZE[,SIZE..]]
//! ```
//!
//! Both ends live in this process on one device, each driven by its own thread: the
//! initiator pushes `-n` messages of each size (copied into its staging ring, one WRITE WITH
//! IMMEDIATE each) into the target's pool of 64 elements of that size; the target takes each
//! delivery and releases it at once (replenishments batched 16 to a BufferRecvPoolUpdate).
//! That run's clock stops when its last WRITE has completed (the data is in place at the
//! target). Then the same with zero-copy pushes ([`Connection::push_from`]: from a region
//! registered beforehand, no copy), whose clock stops when the target has taken every delivery.
//! Then, on the same connection, the same number of plain WRITEs of the same size into one
//! element, with the same window: what the data channel costs without the protocol.

use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use pushpush::{Config, Connection, Event, Listener, PoolShape};

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("qhca-pp-perf: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut dev = None;
    let mut n: u64 = 20_000;
    let mut sizes = vec![256usize, 4096, 65536];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "-d" => dev = Some(val()?),
            "-n" => n = val()?.parse()?,
            "-s" => {
                sizes = val()?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "-h" | "--help" => {
                println!("usage: qhca-pp-perf [-d DEV] [-n MESSAGES] [-s SIZE[,SIZE..]]");
                return Ok(());
            }
            _ => return Err(format!("unknown option {a}").into()),
        }
    }
    let info = match &dev {
        Some(d) => qhca::DeviceInfo::find(d)?,
        None => qhca::devices()?.remove(0),
    };
    let ctx = Arc::new(info.open()?);
    println!(
        "{:>8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "bytes",
        "messages",
        "push Mmsg/s",
        "push MiB/s",
        "zcopy Mmsg/s",
        "zcopy MiB/s",
        "write Mmsg/s",
        "write MiB/s"
    );
    for size in sizes {
        let target_cfg = Config {
            pools: vec![PoolShape {
                count: 64,
                size: size as u32,
            }],
            staging: (size * 64).max(1 << 20),
            ..Config::default()
        };
        let init_cfg = Config {
            pools: vec![],
            ..target_cfg.clone()
        };
        let l = Listener::bind("127.0.0.1:0")?;
        let port = l.port();
        let ctx2 = Arc::clone(&ctx);
        let h = thread::spawn(move || Connection::connect(&ctx2, ("127.0.0.1", port), &init_cfg));
        let mut target = l.accept(&ctx, &target_cfg)?;
        let mut init = h.join().map_err(|_| "connect panicked")??;
        let consumer = thread::spawn(move || -> pushpush::Result<Connection> {
            let mut got = 0;
            while got < 2 * n {
                if let Some(Event::Data(d)) = target.poll(Some(Duration::from_secs(30)))? {
                    target.release(d)?;
                    got += 1;
                }
            }
            Ok(target)
        });
        let deadline = || Some(Instant::now() + Duration::from_secs(30));
        let msg = vec![0x5au8; size];
        let t0 = Instant::now();
        for _ in 0..n {
            init.push(&msg, deadline())?;
        }
        let mut src = init.reg_buf(size)?;
        src.write_at(0, &msg);
        // The copying pushes' deliveries are counted in the zero-copy time too, so wait for
        // them: the zero-copy clock starts when the first run is delivered.
        while init.pushes_in_flight() > 0 {
            init.try_event()?;
        }
        let push = t0.elapsed();
        let t1 = Instant::now();
        for _ in 0..n {
            init.push_from(&src, 0, size, deadline())?;
        }
        let target = consumer.join().map_err(|_| "the consumer panicked")??;
        let zcopy = t1.elapsed();
        let write = init.bench_plain_writes(size, n)?;
        let rate = |d: Duration| n as f64 / d.as_secs_f64() / 1e6;
        let bw = |d: Duration| (n * size as u64) as f64 / d.as_secs_f64() / (1 << 20) as f64;
        println!(
            "{size:>8} {n:>10} {:>12.4} {:>12.1} {:>12.4} {:>12.1} {:>12.4} {:>12.1}",
            rate(push),
            bw(push),
            rate(zcopy),
            bw(zcopy),
            rate(write),
            bw(write)
        );
        drop(init);
        drop(target);
    }
    Ok(())
}
