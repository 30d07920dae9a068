// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A minimal QMP client over a unix socket, for the few things the qtest protocol cannot do
//! (migration). Replies are kept as raw JSON text: the tests only look for fixed substrings,
//! which QEMU prints without spaces after its colons being guaranteed, so helpers normalise.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub struct Qmp {
    stream: UnixStream,
    reader: BufReader<UnixStream>,
}

/// A path in the temp directory, removed when dropped (QEMU killed by the test leaves its QMP
/// socket behind).
#[derive(Debug)]
pub struct TempPath(PathBuf);

impl std::ops::Deref for TempPath {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TempPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A fresh path for a socket or a migration stream.
pub fn socket_path(tag: &str) -> TempPath {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    TempPath(std::env::temp_dir().join(format!("qhca-qtest-{}-{n}-{tag}", std::process::id())))
}

/// JSON text without whitespace, so `"status":"completed"` matches whatever QEMU's spacing.
pub fn squash(json: &str) -> String {
    json.chars().filter(|c| !c.is_whitespace()).collect()
}

impl Qmp {
    /// Connects (QEMU must have been started with `-qmp unix:PATH,server=on,wait=off`), reads
    /// the greeting and negotiates capabilities.
    pub fn connect(path: &Path) -> Qmp {
        let t0 = Instant::now();
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if t0.elapsed() > Duration::from_secs(10) => {
                    panic!("QMP connect {}: {e}", path.display())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        let mut q = Qmp { stream, reader };
        let greeting = q.line().unwrap_or_else(|e| panic!("{e}"));
        assert!(greeting.contains("QMP"), "QMP greeting: {greeting}");
        q.execute(r#"{"execute":"qmp_capabilities"}"#);
        q
    }

    fn line(&mut self) -> Result<String, String> {
        let mut l = String::new();
        match self.reader.read_line(&mut l) {
            Ok(0) => Err("QMP: QEMU closed the socket".into()),
            Ok(_) => Ok(l),
            Err(e) => Err(format!("QMP: {e}")),
        }
    }

    /// Sends one command and returns its `return` (or `error`) line, events skipped; `Err`
    /// when QEMU is gone.
    pub fn try_execute(&mut self, cmd: &str) -> Result<String, String> {
        self.stream
            .write_all(cmd.as_bytes())
            .and_then(|_| self.stream.write_all(b"\n"))
            .map_err(|e| format!("QMP send: {e}"))?;
        loop {
            let l = self.line()?;
            if l.contains("\"return\"") || l.contains("\"error\"") {
                return Ok(l);
            }
        }
    }

    /// [`Qmp::try_execute`], failing the test when QEMU is gone.
    pub fn execute(&mut self, cmd: &str) -> String {
        self.try_execute(cmd)
            .unwrap_or_else(|e| panic!("`{cmd}`: {e}"))
    }

    /// As [`Qmp::execute`], failing the test on an `error` reply.
    pub fn ok(&mut self, cmd: &str) -> String {
        let r = self.execute(cmd);
        assert!(!r.contains("\"error\""), "QMP `{cmd}` failed: {r}");
        r
    }

    /// Polls `query-migrate` until it reports `completed`; fails on `failed` or a timeout.
    pub fn wait_migration(&mut self) {
        let t0 = Instant::now();
        loop {
            let r = squash(&self.ok(r#"{"execute":"query-migrate"}"#));
            if r.contains(r#""status":"completed""#) {
                return;
            }
            assert!(!r.contains(r#""status":"failed""#), "migration failed: {r}");
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "migration not completed after 30 s: {r}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
