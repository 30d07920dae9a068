// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Memory windows (IBA 10.6.7): ALLOC_MW/DEALLOC_MW, BIND_MW and LOCAL_INV run by the
//! requester in SQ order, SEND_WITH_INV landing on the responder, and the responder's R_Key
//! check of a window's key: its range, its rights, its QP (type 2), its PD. Accesses go from
//! QP `a` of a [`Link`] to QP `b`; a type 2 window is bound through `b`, the QP it is then
//! usable through. A failure puts the QPs involved in ERR, so each failing case gets a fresh
//! link of the same PD.
//!
//! This file holds the test world ([`T`]); the tests are in modules by concern:
//!
//! - [`objects`]: ALLOC_MW/DEALLOC_MW, keys and slots; regions (DEREG_MR, with and without
//!   `QHCA_DEREG_MR_UNBIND_MWS`) and contexts (FREE_UAR, RESET) with windows bound;
//! - [`binds`]: what a bind grants (range, rights, QP, PD), what it needs, rebinding;
//! - [`invalidation`]: LOCAL_INV, SEND_WITH_INV, a message cut off mid-way, a type 2 window
//!   outliving its QP;
//! - [`ordering`]: binds and invalidations in SQ order: behind WRITEs and an RNR wait, flushed
//!   behind a failing request, not run twice by a retransmission, carrying no data.

mod binds;
mod invalidation;
mod objects;
mod ordering;

use qhca_qtest::abi::*;
use qhca_qtest::hca::OUT_RAM;
use qhca_qtest::mw::*;
use qhca_qtest::verbs::*;
use qhca_qtest::wire;
use qhca_qtest::Hca;

const RW: u32 = QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ;
const REMOTE: u32 = RW | QHCA_ACCESS_REMOTE_ATOMIC;
/// A region windows may be bound to, with no remote right of its own.
const BINDABLE: u32 = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_MW_BIND;
const TYPES: [u32; 3] = [QHCA_MW_TYPE_1, QHCA_MW_TYPE_2A, QHCA_MW_TYPE_2B];
const TYPE2: [u32; 2] = [QHCA_MW_TYPE_2A, QHCA_MW_TYPE_2B];
/// The target region windows are bound into, and what it starts filled with.
const TGT_LEN: u64 = 2 * PAGE;
const FILL: u8 = 0xee;
const TAG_BITS: u32 = QHCA_KEY_TAG_BITS;
const SLOT_MASK: u32 = (1 << QHCA_MW_INDEX_BITS) - 1;

/// One context with a [`Pair`], a source page, a page READs land in, and the target region
/// (`BINDABLE`, filled with `FILL`) whose contents the test tracks in `model`.
struct T {
    h: Hca,
    p: Pair,
    src: u64,
    lkey: u32,
    rbuf: u64,
    rlkey: u32,
    tgt: u64,
    mr: u32,
    model: Vec<u8>,
    seed: u8,
}

impl T {
    fn new() -> T {
        let mut h = Hca::start("num-uars=8");
        h.bring_up(5, 6);
        T::on(h)
    }

    fn on(mut h: Hca) -> T {
        let mut p = Pair::new(&mut h, &ConnParams::default());
        let (src, lkey) = p.buf(&mut h, PAGE, 0, QHCA_ACCESS_LOCAL_WRITE);
        let (rbuf, rlkey) = p.buf(&mut h, PAGE, 0x33, QHCA_ACCESS_LOCAL_WRITE);
        let (tgt, mr) = p.buf(&mut h, TGT_LEN, FILL, BINDABLE);
        T {
            h,
            p,
            src,
            lkey,
            rbuf,
            rlkey,
            tgt,
            mr,
            model: vec![FILL; TGT_LEN as usize],
            seed: 0,
        }
    }

    fn link(&mut self) -> Link {
        self.link_with(&ConnParams::default())
    }

    fn link_with(&mut self, c: &ConnParams) -> Link {
        Link::new(&mut self.h, &mut self.p.m, self.p.uar, self.p.pdn, c)
    }

    fn alloc(&mut self, ty: u32) -> u32 {
        let (st, key) = alloc_mw(&mut self.h, self.p.uar, self.p.pdn, ty);
        assert_eq!(st, QHCA_CMD_OK, "ALLOC_MW type {ty}");
        assert_ne!(key & QHCA_MW_KEY_FLAG, 0, "window key {key:#x}");
        key
    }

    /// Another region over the target (its own key, the same bytes).
    fn reg(&mut self, access: u32) -> u32 {
        let (st, key) = reg_mr(
            &mut self.h,
            &mut self.p.m,
            self.p.uar,
            self.p.pdn,
            self.tgt,
            TGT_LEN,
            access,
        );
        assert_eq!(st, QHCA_CMD_OK, "REG_MR access {access:#x}");
        key
    }

    /// Window `mw` over the target's [off, off + len) with `access`, to become `new_key`.
    fn win(&self, mw: u32, new_key: u32, off: u64, len: u64, access: u32) -> Bind {
        Bind {
            addr: self.tgt + off,
            length: len,
            mw_key: mw,
            new_key,
            mr_key: self.mr,
            access,
        }
    }

    /// A signalled BIND_MW on `q`; its CQE from `cq` (opcode, QPN and length checked).
    fn bind(&mut self, q: &mut Qp, cq: &mut Cq, b: &Bind) -> Cqe {
        q.post_bind(&mut self.h, 0xb1, QHCA_WQE_SIGNALED, b);
        let c = cq.wait(&mut self.h);
        assert_eq!(
            (c.wr_id, c.opcode as u32, c.qpn, c.byte_len, c.flags),
            (0xb1, QHCA_WC_BIND_MW, q.qpn, 0, 0),
            "bind CQE {c:?}"
        );
        c
    }

    /// Binds through `l.b` (where `l.a`'s accesses arrive), asserting success.
    fn bind_b(&mut self, l: &mut Link, b: &Bind) {
        let c = self.bind(&mut l.b, &mut l.bcq, b);
        assert_eq!(c.status as u32, QHCA_WC_SUCCESS, "bind {b:?}: {c:?}");
    }

    /// A new window of type `ty` bound through a new link's `b` to its next key over `len`
    /// bytes at `off` of the target with `access`: the window, that key and the link.
    fn bound(&mut self, ty: u32, off: u64, len: u64, access: u32) -> (u32, u32, Link) {
        let mw = self.alloc(ty);
        let mut l = self.link();
        let k = inc_key(mw);
        let b = self.win(mw, k, off, len, access);
        self.bind_b(&mut l, &b);
        (mw, k, l)
    }

    /// A bind through `l.b` that must fail with MW_BIND_ERR: `l.b` goes to ERR.
    fn bind_refused(&mut self, l: &mut Link, b: &Bind, what: &str) {
        let c = self.bind(&mut l.b, &mut l.bcq, b);
        assert_eq!(c.status as u32, QHCA_WC_MW_BIND_ERR, "{what}: {b:?}: {c:?}");
        self.went_to_err(&[l.b.qpn]);
    }

    /// A signalled LOCAL_INV of `key` on `q`: its CQE status.
    fn local_inv(&mut self, q: &mut Qp, cq: &mut Cq, key: u32) -> u32 {
        q.post_send(&mut self.h, &local_inv(0x1e, QHCA_WQE_SIGNALED, key));
        let c = cq.wait(&mut self.h);
        assert_eq!(
            (c.wr_id, c.opcode as u32, c.qpn, c.byte_len, c.flags),
            (0x1e, QHCA_WC_LOCAL_INV, q.qpn, 0, 0),
            "LOCAL_INV CQE {c:?}"
        );
        c.status as u32
    }

    /// Posts `wr` on `l.a` and returns its CQE.
    fn post(&mut self, l: &mut Link, wr: &SendWr) -> Cqe {
        l.a.post_send(&mut self.h, wr);
        let c = l.acq.wait(&mut self.h);
        assert_eq!(
            (c.wr_id, c.qpn),
            (wr.wr_id, l.a.qpn),
            "CQE of {wr:?}: {c:?}"
        );
        c
    }

    /// RDMA WRITE of `data` (staged in the source page) from `l.a` to `dst`: its status.
    fn write(&mut self, l: &mut Link, dst: u64, data: &[u8], rkey: u32) -> u32 {
        self.h.qt.memwrite(self.src, data);
        let wr = SendWr::write(self.src, data.len() as u32, self.lkey, dst, rkey);
        let c = self.post(l, &wr);
        assert_eq!(c.opcode as u32, QHCA_WC_RDMA_WRITE, "{c:?}");
        c.status as u32
    }

    fn data(&mut self, len: usize) -> Vec<u8> {
        self.seed = self.seed.wrapping_add(17);
        pattern(len, self.seed)
    }

    fn target(&mut self) -> Vec<u8> {
        self.h.qt.memread(self.tgt, TGT_LEN as usize)
    }

    /// The whole target is what the successful accesses made it, and nothing else.
    fn check_target(&mut self, what: &str) {
        let got = self.target();
        if let Some(i) = (0..got.len()).find(|&i| got[i] != self.model[i]) {
            panic!(
                "{what}: target byte {i} is {:#x}, expected {:#x}",
                got[i], self.model[i]
            );
        }
    }

    /// A WRITE of `len` bytes at target offset `off` through `l` that must land.
    fn write_ok(&mut self, l: &mut Link, off: u64, len: usize, rkey: u32, what: &str) {
        let data = self.data(len);
        let st = self.write(l, self.tgt + off, &data, rkey);
        assert_eq!(
            st, QHCA_WC_SUCCESS,
            "{what}: WRITE of {len} at {off} key {rkey:#x}"
        );
        self.model[off as usize..off as usize + len].copy_from_slice(&data);
        self.check_target(what);
    }

    /// A WRITE at target offset `off` (may be negative) through `l` that the responder must
    /// refuse, leaving the target alone; both QPs go to ERR.
    fn write_refused(&mut self, l: &mut Link, off: i64, len: usize, rkey: u32, what: &str) {
        let data = self.data(len);
        let st = self.write(l, self.tgt.wrapping_add_signed(off), &data, rkey);
        assert_eq!(
            st, QHCA_WC_REM_ACCESS_ERR,
            "{what}: WRITE of {len} at {off} key {rkey:#x}"
        );
        self.check_target(what);
        self.went_to_err(&[l.a.qpn, l.b.qpn]);
    }

    /// An RDMA READ by `l.a` of `len` bytes at target offset `off` into the read page (refilled
    /// with 0x33 first): (status, the whole read page).
    fn read(&mut self, l: &mut Link, off: i64, len: usize, rkey: u32) -> (u32, Vec<u8>) {
        self.h.qt.memset(self.rbuf, PAGE as usize, 0x33);
        let wr = SendWr {
            wr_id: 0x88,
            opcode: QHCA_WR_RDMA_READ,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: self.tgt.wrapping_add_signed(off),
            rkey,
            sges: vec![(self.rbuf, len as u32, self.rlkey)],
            ..Default::default()
        };
        let c = self.post(l, &wr);
        assert_eq!(c.opcode as u32, QHCA_WC_RDMA_READ, "{c:?}");
        (c.status as u32, self.h.qt.memread(self.rbuf, PAGE as usize))
    }

    fn read_ok(&mut self, l: &mut Link, off: u64, len: usize, rkey: u32, what: &str) {
        let (st, got) = self.read(l, off as i64, len, rkey);
        assert_eq!(
            st, QHCA_WC_SUCCESS,
            "{what}: READ of {len} at {off} key {rkey:#x}"
        );
        assert_eq!(
            got[..len],
            self.model[off as usize..off as usize + len],
            "{what}"
        );
        assert!(got[len..].iter().all(|&b| b == 0x33), "{what}: read past");
    }

    fn read_refused(&mut self, l: &mut Link, off: i64, len: usize, rkey: u32, what: &str) {
        let (st, got) = self.read(l, off, len, rkey);
        assert_eq!(
            st, QHCA_WC_REM_ACCESS_ERR,
            "{what}: READ of {len} at {off} key {rkey:#x}"
        );
        assert!(got.iter().all(|&b| b == 0x33), "{what}: nothing read");
        self.went_to_err(&[l.a.qpn, l.b.qpn]);
    }

    /// The QPs named went to ERR, each with a QP_ERR event; every pending event is consumed
    /// (so that none sits in front of a command's completion).
    fn went_to_err(&mut self, qpns: &[u32]) {
        let ev = event_keys(&take_events(&mut self.h));
        for &q in qpns {
            assert!(
                ev.contains(&(QHCA_EQE_QP_ERR, q as u64, self.p.uar as u64)),
                "QP_ERR event of QP {q:#x}: {ev:?}"
            );
            let (st, a) = query_qp(&mut self.h, self.p.uar, q);
            assert_eq!(
                (st, a.state),
                (QHCA_CMD_OK, QHCA_QPS_ERR as u8),
                "QP {q:#x}"
            );
        }
    }

    fn num_mw(&mut self) -> u32 {
        self.h.reg(QHCA_REG_NUM_MW)
    }
}

fn dereg(t: &mut T, key: u32) -> u32 {
    destroy(&mut t.h, QHCA_CMD_DEREG_MR, t.p.uar, key)
}

fn slot(key: u32) -> u32 {
    (key >> TAG_BITS) & SLOT_MASK
}

/// DEREG_MR with `in[2]` = `flags`: status.
fn dereg_flags(t: &mut T, key: u32, flags: u64) -> u32 {
    let (uar, key) = (t.p.uar as u64, key as u64);
    obj_cmd(&mut t.h, QHCA_CMD_DEREG_MR, [uar, key, flags, 0, 0]).0
}

fn fill_page(t: &mut T, addr: u64, v: u8) {
    t.h.qt.memset(addr, PAGE as usize, v);
}

fn reg_in(t: &mut T, pdn: u32, addr: u64, len: u64, access: u32) -> u32 {
    let (st, key) = reg_mr(&mut t.h, &mut t.p.m, t.p.uar, pdn, addr, len, access);
    assert_eq!(st, QHCA_CMD_OK);
    key
}

/// A QEMU whose device logs its requester's `qhca_req_start` and `qhca_req_complete` trace
/// events to a file of its own: the order in which send WQEs started and completed.
struct ReqTrace {
    dir: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl ReqTrace {
    /// [`T`] on a new QEMU with `props`, tracing into a directory named after `name`.
    fn start(props: &str, name: &str) -> (T, ReqTrace) {
        let dir = std::env::temp_dir().join(format!("qhca-qtest-mw-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("trace.log");
        let _ = std::fs::remove_file(&log);
        let mut h = Hca::start_with(
            props,
            &[
                "-trace",
                "qhca_req_start",
                "-trace",
                "qhca_req_complete",
                "-D",
                log.to_str().unwrap(),
            ],
        );
        h.bring_up(5, 6);
        (T::on(h), ReqTrace { dir, log })
    }

    /// QP `qpn`'s events so far, in order: (`'s'` started or `'c'` completed, SQ index).
    fn events(&self, t: &mut T, qpn: u32) -> Vec<(char, u16)> {
        t.h.settle();
        t.h.alive();
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut ev = vec![];
        for line in text.lines() {
            for (kind, what) in [('s', "qhca_req_start"), ('c', "qhca_req_complete")] {
                let pat = format!("{what} qp {qpn:#x} sq ci ");
                if let Some(i) = line.find(&pat) {
                    let rest = &line[i + pat.len()..];
                    let ci = rest.split(' ').next().unwrap().parse().unwrap();
                    ev.push((kind, ci));
                }
            }
        }
        ev
    }
}

impl Drop for ReqTrace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where `e` is in `ev`, which must have it once.
fn at(ev: &[(char, u16)], e: (char, u16)) -> usize {
    let n: Vec<_> = (0..ev.len()).filter(|&i| ev[i] == e).collect();
    assert_eq!(n.len(), 1, "{e:?} once in {ev:?}");
    n[0]
}
