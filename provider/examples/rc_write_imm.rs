// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Two processes, one RC connection: the client RDMA-WRITEs a message with immediate data into
//! the server's region, the server answers by changing it in place, and the client RDMA-READs
//! it back.
//!
//! ```text
//! rc_write_imm server [-p PORT] [-d DEV]           # prints "listening on port PORT"
//! rc_write_imm client HOST [-p PORT] [-d DEV]
//! ```
//!
//! What it shows, step by step:
//!
//! 1. Each side opens a context, allocates a PD, registers a region the provider owns
//!    ([`Pd::reg_mr_buf`]), and creates a CQ and an RC QP.
//! 2. The server posts a receive with *no* SGEs: a WRITE_WITH_IMM puts its data where the
//!    WRITE says (the server's region), and only consumes the receive to deliver the
//!    immediate.
//! 3. The sides exchange connection records over TCP ([`qhca::conn`], with timeouts) and each
//!    calls [`Qp::connect`] with its own record as `local` and the peer's as `remote`. A
//!    barrier ([`conn::sync`]) makes sure both are connected (and the receive posted) before
//!    anything is sent.
//! 4. The client writes the message with immediate data; the server's receive completes with
//!    `RecvRdmaWithImm`, `byte_len` = the WRITE's length, `imm`, and `src_qp` = the client's QP.
//! 5. The server upper-cases the message in its region; a barrier; the client READs it back.
//!
//! Run it in a VM with a qhca device (`scripts/vm.sh`): build it on the host with
//! `cargo build --release --examples`, and start `target/release/examples/rc_write_imm` in
//! the guest, server first.

use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use qhca::conn::{self, ConnInfo};
use qhca::{
    Access, ConnOpts, Context, Cq, Error, MrBuf, Pd, Qp, QpCaps, RecvWr, SendWr, Wc, WcOpcode,
    WcStatus, WrOp,
};

/// How long each side waits for the other, and for each completion.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The message the client writes.
const MESSAGE: &[u8] = b"hello over qhca, written with immediate data";
/// The immediate data it carries.
const IMM: u32 = 0x1234_abcd;

/// One side's verbs objects. Field order is teardown order (the QP holds its CQ and PD anyway).
struct Side {
    qp: Qp,
    cq: Cq,
    mr: MrBuf,
    _pd: Pd,
    _ctx: Arc<Context>,
}

fn open(dev: Option<&str>, access: Access) -> qhca::Result<Side> {
    let info = match dev {
        Some(name) => qhca::DeviceInfo::find(name)?,
        None => qhca::devices()?.remove(0),
    };
    let ctx = Arc::new(info.open()?);
    let pd = Pd::new(&ctx)?;
    let mr = pd.reg_mr_buf(4096, access)?;
    let cq = Cq::new(&ctx, 16, None)?;
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_sge: 1,
        max_inline: 0,
    };
    let qp = Qp::new(&pd, &cq, &cq, &caps)?;
    Ok(Side {
        qp,
        cq,
        mr,
        _pd: pd,
        _ctx: ctx,
    })
}

/// Waits for one completion and insists that it succeeded.
fn completion(cq: &mut Cq, what: &'static str) -> qhca::Result<Wc> {
    let mut wc = [Wc::default(); 1];
    if cq.poll_wait(&mut wc, Some(TIMEOUT))? == 0 {
        return Err(Error::Timeout {
            what,
            after: TIMEOUT,
        });
    }
    if wc[0].status != WcStatus::Success {
        return Err(Error::Invalid {
            what: format!("{what}: {:?}", wc[0].status),
        });
    }
    Ok(wc[0])
}

fn server(port: u16, dev: Option<&str>) -> qhca::Result<()> {
    let mut s = open(
        dev,
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
    )?;
    // A receive without SGEs, for the WRITE_WITH_IMM.
    s.qp.post_recv(&[RecvWr {
        wr_id: 1,
        sges: &[],
    }])?;
    let local = s.qp.conn_info(conn::random_psn()).with_region(&s.mr);
    let listener = TcpListener::bind(("0.0.0.0", port)).map_err(|e| Error::Sys {
        op: "listen",
        source: qhca::Errno::from_raw(e.raw_os_error().unwrap_or(libc_eio())),
    })?;
    println!("listening on port {port}");
    let (mut stream, remote) = conn::accept_exchange(&listener, &local, TIMEOUT)?;
    s.qp.connect(&local, &remote, &ConnOpts::default())?;
    conn::sync(&mut stream)?; // both connected, our receive posted

    let wc = completion(&mut s.cq, "the client's WRITE_WITH_IMM")?;
    if wc.opcode != WcOpcode::RecvRdmaWithImm || wc.imm != Some(IMM) {
        return Err(Error::Invalid {
            what: format!("unexpected completion {wc:?}"),
        });
    }
    let len = wc.byte_len as usize;
    let text = s.mr.to_vec(0, len);
    println!(
        "server: {len} bytes with imm {:#x} from QP {:#x}: {}",
        wc.imm.unwrap_or(0),
        wc.src_qp,
        String::from_utf8_lossy(&text)
    );
    s.mr.write_at(0, &text.to_ascii_uppercase());
    conn::sync(&mut stream)?; // the client may READ now
    conn::sync(&mut stream)?; // it has
    println!("server: done");
    Ok(())
}

fn client(host: &str, port: u16, dev: Option<&str>) -> qhca::Result<()> {
    let mut s = open(dev, Access::LOCAL_WRITE)?;
    let local: ConnInfo = s.qp.conn_info(conn::random_psn());
    let (mut stream, remote) = conn::connect_exchange((host, port), &local, TIMEOUT)?;
    if remote.len < MESSAGE.len() as u64 {
        return Err(Error::Protocol {
            what: format!("the server lends {} bytes", remote.len),
        });
    }
    s.qp.connect(&local, &remote, &ConnOpts::default())?;
    conn::sync(&mut stream)?;

    s.mr.write_at(0, MESSAGE);
    let write = WrOp::WriteImm {
        raddr: remote.addr,
        rkey: remote.rkey,
        imm: IMM,
    };
    let len = MESSAGE.len() as u32;
    s.qp.post_send(&[SendWr::new(1, write, &[s.mr.sge(0, len)])])?;
    completion(&mut s.cq, "our WRITE_WITH_IMM")?;
    println!("client: wrote {len} bytes with imm {IMM:#x}");

    conn::sync(&mut stream)?; // the server has changed the message
    let read = WrOp::Read {
        raddr: remote.addr,
        rkey: remote.rkey,
    };
    s.qp.post_send(&[SendWr::new(2, read, &[s.mr.sge(1024, len)])])?;
    let wc = completion(&mut s.cq, "our READ")?;
    let back = s.mr.to_vec(1024, wc.byte_len as usize);
    println!("client: read back: {}", String::from_utf8_lossy(&back));
    conn::sync(&mut stream)?;
    if back != MESSAGE.to_ascii_uppercase() {
        return Err(Error::Invalid {
            what: "the READ did not return the server's answer".into(),
        });
    }
    println!("client: done");
    Ok(())
}

fn libc_eio() -> i32 {
    qhca::Errno::EIO as i32
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut port = 18516u16;
    let mut dev = None;
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-p" => match it.next().and_then(|p| p.parse().ok()) {
                Some(p) => port = p,
                None => return usage("-p needs a port"),
            },
            "-d" => dev = it.next().cloned(),
            _ => words.push(a.as_str()),
        }
    }
    let r = match words.as_slice() {
        ["server"] => server(port, dev.as_deref()),
        ["client", host] => client(host, port, dev.as_deref()),
        _ => return usage("need `server` or `client HOST`"),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_write_imm: {e}");
            ExitCode::from(1)
        }
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("rc_write_imm: {why}\nusage: rc_write_imm server [-p PORT] [-d DEV]\n       rc_write_imm client HOST [-p PORT] [-d DEV]");
    ExitCode::from(2)
}
