// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Two-level page lists (ABI 2): a directory of page-list pages, each holding up to
//! `QHCA_PL_PAGE_ENTRIES` page addresses. Translations across a page-list page boundary, and
//! the command queue reading a long list a budget at a time while other work goes on.

use qhca_qtest::abi::*;
use qhca_qtest::hca::status_name;
use qhca_qtest::verbs::*;
use qhca_qtest::Hca;

const RW: u32 = QHCA_ACCESS_LOCAL_WRITE | QHCA_ACCESS_REMOTE_WRITE | QHCA_ACCESS_REMOTE_READ;

/// An MR of 600 pages given in reverse order (two page-list pages): an RDMA WRITE across the
/// boundary between the two lands where the list says, byte for byte.
#[test]
fn translation_across_page_list_pages() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let n = 600u64;
    let buf = p.m.alloc(&mut h, n * PAGE);
    let pages: Vec<u64> = (0..n).map(|i| buf + (n - 1 - i) * PAGE).collect();
    let dir = p.m.page_list_of(&mut h, &pages);
    let iova = 0x7000_0000_0000u64;
    let b = reg_mr_bytes(p.uar, p.pdn, iova, n * PAGE, RW, n as u32, dir);
    let (st, rkey) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&b));
    assert_eq!(st, QHCA_CMD_OK, "REG_MR: {}", status_name(st));
    let data = pattern(2 * PAGE as usize, 5);
    let (src, lkey) = p.buf(&mut h, 2 * PAGE, 0, QHCA_ACCESS_LOCAL_WRITE);
    h.qt.memwrite(src, &data);
    // MR pages 511 (last of the first page-list page) and 512 (first of the second).
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 7,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: iova + 511 * PAGE,
            rkey: rkey as u32,
            sges: vec![(src, 2 * PAGE as u32, lkey)],
            ..Default::default()
        },
    );
    let c = p.scq.wait(&mut h);
    assert_eq!((c.wr_id, c.status as u32), (7, QHCA_WC_SUCCESS), "{c:?}");
    let p = PAGE as usize;
    assert_eq!(h.qt.memread(pages[511], p), &data[..p]);
    assert_eq!(h.qt.memread(pages[512], p), &data[p..]);
    assert!(h.qt.memread(pages[510], p).iter().all(|&b| b == 0));
    assert!(h.qt.memread(pages[513], p).iter().all(|&b| b == 0));
}

/// The directory of a 4 GiB MR (2^20 pages, the most a list may hold): 2048 entries naming
/// one page-list page, whose 512 entries all name `page`; the last directory entry names a
/// copy whose last entry is `last` instead.
fn huge_list(h: &mut Hca, m: &mut Mem, page: u64, last: u64) -> u64 {
    let bytes: Vec<u8> = (0..PL_ENTRIES).flat_map(|_| page.to_le_bytes()).collect();
    let plain = m.alloc(h, PAGE);
    h.qt.memwrite(plain, &bytes);
    let odd = m.alloc(h, PAGE);
    h.qt.memwrite(odd, &bytes);
    h.qt.writeq(odd + PAGE - 8, last);
    let mut dir = vec![plain; QHCA_PL_MAX_DIR as usize - 1];
    dir.push(odd);
    m.directory(h, &dir)
}

/// Review item 5: a command's cost is the page list it reads. A REG_MR whose 2^20-entry list
/// fails at its very last entry is read a budget at a time: meanwhile the engine's bottom half
/// keeps running (a 192 KiB WRITE completes while a batch of 16 such REG_MRs is still
/// pending), then each REG_MR fails with BAD_PARAM and leaves nothing behind: three good 4 GiB MRs fit in the
/// device's page budget (2^22 pages, some of it the pair's) afterwards, and a fourth does not.
#[test]
fn long_page_list_is_read_a_budget_at_a_time() {
    let mut h = Hca::start("num-uars=4");
    h.bring_up(5, 6);
    let mut p = Pair::new(&mut h, &ConnParams::default());
    let page = p.m.alloc(&mut h, PAGE);
    let bad = huge_list(&mut h, &mut p.m, page, page + 8);
    let good = huge_list(&mut h, &mut p.m, page, page);
    let npages = QHCA_MAX_PAGE_LIST;
    let len = (npages as u64) * PAGE;
    assert_eq!(len, 1 << 32);

    let len_w = 192usize << 10;
    let (src, lkey) = p.buf(&mut h, len_w as u64, 0x3c, QHCA_ACCESS_LOCAL_WRITE);
    let (dst, rkey) = p.buf(&mut h, len_w as u64, 0, RW);
    let mrs = h.reg(QHCA_REG_NUM_MR);

    // Sixteen of them in one batch: 4,096 budgets' worth of reading, so that the WRITE's one
    // or two engine runs fall among them however the host schedules this test.
    let cmds: Vec<_> = (0..16)
        .map(|_| {
            let mut c = h.cmd(QHCA_CMD_REG_MR);
            c.in_ = in_words(&reg_mr_bytes(p.uar, p.pdn, 0, len, 0, npages, bad));
            c
        })
        .collect();
    let eq_pi = h.eq_pi();
    h.post_batch(&cmds);
    p.a.post_send(
        &mut h,
        &SendWr {
            wr_id: 9,
            opcode: QHCA_WR_RDMA_WRITE,
            flags: QHCA_WQE_SIGNALED,
            remote_addr: dst,
            rkey,
            sges: vec![(src, len_w as u32, lkey)],
            ..Default::default()
        },
    );
    let w = p.scq.wait(&mut h);
    assert_eq!((w.wr_id, w.status as u32), (9, QHCA_WC_SUCCESS), "{w:?}");
    assert!(h.qt.memread(dst, len_w).iter().all(|&b| b == 0x3c));
    let done = h.eq_pi().wrapping_sub(eq_pi);
    assert!(
        done < 16,
        "all 16 REG_MRs completed before a WRITE of 768 packets: each 8 MiB list was read at once"
    );
    eprintln!("REG_MRs completed when the WRITE did: {done} of 16");
    for c in &cmds {
        let e = h.completion_of(c);
        assert_eq!(
            e.status as u32,
            QHCA_CMD_BAD_PARAM,
            "{}",
            status_name(e.status as u32)
        );
    }
    assert_eq!(h.reg(QHCA_REG_NUM_MR), mrs);

    let b = reg_mr_bytes(p.uar, p.pdn, 0, len, 0, npages, good);
    let mut keys = Vec::new();
    for i in 0..3 {
        let (st, key) = obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&b));
        assert_eq!(st, QHCA_CMD_OK, "4 GiB MR #{i}: {}", status_name(st));
        keys.push(key as u32);
    }
    assert_eq!(
        obj_cmd(&mut h, QHCA_CMD_REG_MR, in_words(&b)).0,
        QHCA_CMD_NO_RESOURCES,
        "2^22 pages in all, some of them the pair's"
    );
    for k in keys {
        assert_eq!(destroy(&mut h, QHCA_CMD_DEREG_MR, p.uar, k), QHCA_CMD_OK);
    }
    assert_eq!(h.status(), QHCA_STATUS_READY);
}
