// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! NVMe over RDMA on qhca, with the kernel's own target (`nvmet-rdma`) and host (`nvme-rdma`),
//! nvme-cli and fio, unmodified. The target exports a namespace (a file on tmpfs: the guest
//! kernel has no block driver of its own) on the port's address; the host connects to it over
//! rdma_cm on the same device. Every I/O is the kernel verbs' work on qhca: the host registers
//! its buffers with fast registration (`IB_WR_REG_MR`), the target RDMA-READs and -WRITEs
//! them through their rkey and answers with a SEND_WITH_INV that invalidates it; fio writes
//! random blocks of 4 KiB to 256 KiB and reads every one back against its checksum.
//!
//! The target goes by unbinding the driver under a connected host, not by unlinking its port
//! first: nvmet-rdma runs a connect command that arrived before its CM saw the connection
//! established (on qhca it always does: the data path outruns the MADs' two workqueue hops)
//! from its ESTABLISHED handler, under rdma_cm's `handler_mutex`, where it takes
//! `nvmet_config_sem`; unlinking a port that still listens destroys the listener under
//! `nvmet_config_sem`, the other way round, and lockdep reports the pair (a report of the
//! kernel's own code, whatever the device; the suite fails on any). Once the device went,
//! the port has no listener left to destroy.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::cases::ib_port::ib_device_of;
use crate::harness::{Case, CaseResult, Fail, T};
use crate::ibverbs::{text, tool, wait_output};
use crate::rdma_cm::{cm_listening, with_address, ADDR};
use crate::system::{self, describe, sh, sh_ok, Config};
use crate::{bail, check, require};

/// The cases of this section, in order.
pub fn cases() -> Vec<Case<Config>> {
    vec![
        Case {
            name: "nvme_rdma_loopback",
            run: |t, cfg| nvme_rdma_loopback(t, cfg, false),
        },
        Case {
            name: "nvme_rdma_loopback_srq",
            run: |t, cfg| nvme_rdma_loopback(t, cfg, true),
        },
    ]
}

const NQN: &str = "nqn.2026-11.io.qhca:loopback";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:5ca1ab1e-0000-4000-8000-00000000a0a0";
const HOSTID: &str = "5ca1ab1e-0000-4000-8000-00000000a0a0";
const PORT: u16 = 4420;
const NVMET: &str = "/sys/kernel/config/nvmet";
/// The namespace's backing file, and its size.
const BACKING: &str = "/dev/shm/qhca-nvmet-ns1";
const BACKING_MIB: u64 = 64;

/// The target's configfs tree: a subsystem with one namespace, linked to one RDMA port.
/// Dropping it takes it apart in reverse, which stops the port listening.
struct Target {
    made: Vec<PathBuf>,
    link: Option<PathBuf>,
}

impl Target {
    fn export(addr: &str) -> Result<Target, Fail> {
        let mut tgt = Target {
            made: vec![],
            link: None,
        };
        let subsys = Path::new(NVMET).join("subsystems").join(NQN);
        let ns = subsys.join("namespaces/1");
        let port = Path::new(NVMET).join("ports/1");
        for dir in [&subsys, &ns, &port] {
            fs::create_dir(dir).map_err(|e| fail(format!("mkdir {}: {e}", dir.display())))?;
            tgt.made.push(dir.clone());
        }
        let attrs = [
            (subsys.join("attr_allow_any_host"), "1"),
            (ns.join("device_path"), BACKING),
            // tmpfs has no O_DIRECT: the file backend goes through the page cache.
            (ns.join("buffered_io"), "1"),
            (ns.join("enable"), "1"),
            (port.join("addr_trtype"), "rdma"),
            (port.join("addr_adrfam"), "ipv4"),
            (port.join("addr_traddr"), addr),
            (port.join("addr_trsvcid"), &PORT.to_string()),
        ];
        for (f, v) in attrs {
            fs::write(&f, v).map_err(|e| fail(format!("{} <- {v}: {e}", f.display())))?;
        }
        let link = port.join("subsystems").join(NQN);
        std::os::unix::fs::symlink(&subsys, &link)
            .map_err(|e| fail(format!("ln -s {}: {e}", link.display())))?;
        tgt.link = Some(link);
        Ok(tgt)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(l) = self.link.take() {
            let _ = fs::remove_file(l);
        }
        if let Some(ns) = self.made.get(1) {
            let _ = fs::write(ns.join("enable"), "0");
        }
        for d in self.made.drain(..).rev() {
            let _ = fs::remove_dir(d);
        }
    }
}

fn fail(msg: String) -> Fail {
    Fail::new(file!(), line!(), msg)
}

/// The host's controller of [`NQN`] over RDMA (`nvmeN`), if connected.
fn controller() -> Option<String> {
    fs::read_dir("/sys/class/nvme")
        .ok()?
        .flatten()
        .find_map(|e| {
            let p = e.path();
            let nqn = fs::read_to_string(p.join("subsysnqn")).ok()?;
            let transport = fs::read_to_string(p.join("transport")).ok()?;
            (nqn.trim() == NQN && transport.trim() == "rdma")
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
}

/// The block device of namespace 1 of controller `ctrl` (`/dev/nvmeNn1`), once it exists.
fn namespace(ctrl: &str) -> Option<PathBuf> {
    let dev = Path::new("/sys/class/nvme").join(ctrl);
    fs::read_dir(dev).ok()?.flatten().find_map(|e| {
        let n = e.file_name().to_string_lossy().into_owned();
        (n.starts_with(ctrl) && n.ends_with("n1") && Path::new("/dev").join(&n).exists())
            .then(|| Path::new("/dev").join(n))
    })
}

/// Runs `prog args` with a time limit: its output, or a failure naming what timed out.
fn run_limited(prog: &str, args: &[&str], limit: Duration) -> Result<std::process::Output, Fail> {
    let p = tool(prog)?;
    let child = Command::new(&p)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    wait_output(child, limit)?.ok_or_else(|| fail(format!("{prog} {}: timed out", args.join(" "))))
}

/// Case: an NVMe over RDMA namespace on qhca, target and host in this guest: `nvme connect -t
/// rdma`, fio writing random blocks of 4 KiB to 256 KiB (up to 64 pages per fast
/// registration) eight at a time and verifying each, a sequential pattern written and read back
/// with `dd` and compared, `nvme disconnect`; then a second connection, and the driver unbound
/// under it: the unbind returns, the host's controller goes, the target's listener goes; the
/// target is taken apart, every NVMe module unloads, and the driver binds again.
///
/// With `srq`, the target receives through shared receive queues of the driver's kernel verbs
/// (nvmet-rdma's `use_srq=1`: one SRQ of 1024 WQEs that every queue's QP takes its commands
/// from, posted with `ib_post_srq_recv`): `rdma resource show srq` lists nvmet-rdma's SRQ on
/// the device while the host is connected.
fn nvme_rdma_loopback(t: &mut T, cfg: &Config, srq: bool) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    sh_ok("modprobe", &["nvmet"])?;
    let use_srq = format!("use_srq={}", u8::from(srq));
    sh_ok("modprobe", &["nvmet-rdma", &use_srq])?;
    sh_ok("modprobe", &["nvme-rdma"])?;
    if !Path::new(NVMET).exists() {
        sh_ok("mount", &["-t", "configfs", "none", "/sys/kernel/config"])?;
    }
    let backing = fs::File::create(BACKING)?;
    backing.set_len(BACKING_MIB << 20)?;
    drop(backing);
    let res = with_address(t, cfg, |t, _| {
        let target = Target::export(ADDR)?;
        let up = system::wait_for(Duration::from_secs(20), || cm_listening(PORT));
        require!(t, up, "nvmet-rdma never listened on {ADDR}:{PORT}");
        let ctrl = connect()?;
        let res = io(t, &ctrl);
        if srq {
            let out = sh("rdma", &["resource", "show", "srq"])?;
            let s = text(&out);
            let dev = ib_device_of(&bdf).unwrap_or_default();
            check!(
                t,
                s.lines()
                    .any(|l| l.contains(&format!("dev {dev} ")) && l.contains("nvmet_rdma")),
                "no SRQ of nvmet-rdma on {dev}: {}",
                describe(&out)
            );
        }
        let out = run_limited("nvme", &["disconnect", "-n", NQN], Duration::from_secs(60))?;
        check!(
            t,
            out.status.success(),
            "nvme disconnect: {}",
            describe(&out)
        );
        check!(
            t,
            text(&out).contains("disconnected 1 controller"),
            "nvme disconnect: {}",
            describe(&out)
        );
        let gone = system::wait_for(Duration::from_secs(20), || controller().is_none());
        check!(t, gone, "{ctrl} still there after the disconnect");
        res?;

        // Again, and the device goes under the live controller.
        let ctrl = connect()?;
        let unbound = system::Unbound::unbind(cfg, &bdf)?;
        let gone = system::wait_for(Duration::from_secs(60), || controller().is_none());
        check!(t, gone, "{ctrl} still there after the unbind");
        check!(
            t,
            !cm_listening(PORT),
            "nvmet-rdma still listens without the device"
        );
        drop(target);
        unbound.rebind()?;
        Ok(())
    });
    let _ = fs::remove_file(BACKING);
    for m in [
        "nvme-rdma",
        "nvmet-rdma",
        "nvmet",
        "nvme-fabrics",
        "nvme-core",
    ] {
        let out = sh("modprobe", &["-r", m])?;
        check!(
            t,
            out.status.success(),
            "modprobe -r {m}: {}",
            describe(&out)
        );
    }
    let back = system::wait_for(Duration::from_secs(20), || ib_device_of(&bdf).is_some());
    check!(t, back, "no RDMA device after the rebind");
    res
}

/// `nvme connect -t rdma` to the target on [`ADDR`]: the host's new controller.
fn connect() -> Result<String, Fail> {
    let port = PORT.to_string();
    let args = [
        "connect",
        "-t",
        "rdma",
        "-a",
        ADDR,
        "-s",
        &port,
        "-n",
        NQN,
        "-q",
        HOSTNQN,
        "-I",
        HOSTID,
        "--ctrl-loss-tmo=5",
        "--reconnect-delay=1",
    ];
    let out = run_limited("nvme", &args, Duration::from_secs(120))?;
    if !out.status.success() {
        bail!("nvme connect: {}", describe(&out));
    }
    let mut ctrl = None;
    system::wait_for(Duration::from_secs(20), || {
        ctrl = controller();
        ctrl.is_some()
    });
    ctrl.ok_or_else(|| fail(format!("no RDMA controller of {NQN} after nvme connect")))
}

/// fio's verified random writes, then dd's pattern, on the namespace of `ctrl`.
fn io(t: &mut T, ctrl: &str) -> CaseResult {
    let mut dev = None;
    system::wait_for(Duration::from_secs(20), || {
        dev = namespace(ctrl);
        dev.is_some()
    });
    let Some(dev) = dev else {
        bail!("{ctrl} has no namespace 1");
    };
    let devs = dev.to_string_lossy().into_owned();
    let size = format!("{}M", BACKING_MIB / 2);
    let (file, size) = (format!("--filename={devs}"), format!("--size={size}"));
    let fio = [
        "--name=qhca",
        &*file,
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=8",
        "--rw=randwrite",
        "--bsrange=4k-256k",
        &size,
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--randrepeat=0",
        // No state file: the guest's working directory is read-only.
        "--verify_state_save=0",
        "--output-format=terse",
    ];
    let out = run_limited("fio", &fio, Duration::from_secs(600))?;
    check!(t, out.status.success(), "fio: {}", describe(&out));
    // Terse format v3: field 5 is the error; fields 6 on the reads, 47 on the writes.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let terse = stdout.lines().find(|l| l.starts_with("3;")).unwrap_or("");
    let fields: Vec<&str> = terse.split(';').collect();
    check!(
        t,
        fields.len() > 48 && fields[4] == "0",
        "fio errors: {terse}"
    );
    if fields.len() > 48 {
        let read_kb: u64 = fields[5].parse().unwrap_or(0);
        let written_kb: u64 = fields[46].parse().unwrap_or(0);
        check!(
            t,
            written_kb >= 16 << 10 && read_kb >= written_kb,
            "fio wrote {written_kb} KiB and verified {read_kb} KiB"
        );
    }

    // A pattern at an odd offset, written and read back whole through the page cache's
    // bypass: 1 MiB I/Os, the largest the host splits into fast registrations.
    let pattern: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let src = "/dev/shm/qhca-nvme-pattern";
    let back = "/dev/shm/qhca-nvme-back";
    fs::write(src, &pattern)?;
    let res = (|| -> CaseResult {
        let (i, o) = (format!("if={src}"), format!("of={devs}"));
        let w = [&*i, &o, "bs=1M", "seek=5", "oflag=direct", "conv=fsync"];
        let out = run_limited("dd", &w, Duration::from_secs(120))?;
        require!(t, out.status.success(), "dd write: {}", describe(&out));
        let (i, o) = (format!("if={devs}"), format!("of={back}"));
        let r = [&*i, &o, "bs=1M", "skip=5", "count=4", "iflag=direct"];
        let out = run_limited("dd", &r, Duration::from_secs(120))?;
        require!(t, out.status.success(), "dd read: {}", describe(&out));
        let got = fs::read(back)?;
        let first_bad = got.iter().zip(&pattern).position(|(a, b)| a != b);
        check!(
            t,
            got.len() == pattern.len() && first_bad.is_none(),
            "read back {} bytes of {}, first difference at {first_bad:?}",
            got.len(),
            pattern.len()
        );
        Ok(())
    })();
    let _ = fs::remove_file(src);
    let _ = fs::remove_file(back);
    res
}
