// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Sizes, alignments and field offsets of every ABI struct, written out by hand from the header.
//! bindgen's own layout tests are turned off (the file must build in the kernel); these replace
//! them and double as a review checklist when the header changes.

use core::mem::{align_of, offset_of, size_of};
use qhca_uapi::*;

macro_rules! check_layout {
    ($ty:ty, size $size:expr, align $align:expr, { $($field:ident @ $off:expr),* $(,)? }) => {{
        assert_eq!(size_of::<$ty>(), $size, "sizeof({})", stringify!($ty));
        assert_eq!(align_of::<$ty>(), $align, "alignof({})", stringify!($ty));
        $(
            assert_eq!(
                offset_of!($ty, $field),
                $off,
                "offsetof({}, {})",
                stringify!($ty),
                stringify!($field)
            );
        )*
    }};
}

/// Every struct of the header: its size, its alignment and the offset of every field, as the C
/// compiler lays them out (uapi/tests/c/abi_check.c checks the same numbers on the C side).
#[test]
fn every_struct_and_field() {
    check_layout!(qhca_cmd, size 64, align 8, {
        opcode @ 0,
        flags @ 2,
        token @ 4,
        out_addr @ 8,
        out_len @ 16,
        in_ext @ 20,
        in_ @ 24,
    });
    check_layout!(qhca_eqe, size 32, align 8, {
        type_ @ 0,
        status @ 1,
        rsvd0 @ 2,
        token @ 4,
        data @ 8,
        rsvd1 @ 24,
        owner @ 31,
    });
    check_layout!(qhca_device_attr, size 128, align 8, {
        abi_version @ 0,
        num_uars @ 4,
        caps @ 8,
        node_guid @ 16,
        fw_version @ 24,
        vendor_id @ 32,
        vendor_part_id @ 36,
        hw_ver @ 40,
        max_pd @ 44,
        max_cq @ 48,
        max_cqe @ 52,
        max_qp @ 56,
        max_qp_wr @ 60,
        max_sge @ 64,
        max_inline @ 68,
        max_mr @ 72,
        max_qp_rd_atom @ 76,
        max_qp_init_rd_atom @ 78,
        max_mr_size @ 80,
        page_size_cap @ 88,
        odp_general_caps @ 96,
        odp_rc_caps @ 104,
        odp_ud_caps @ 108,
        max_mw @ 112,
        max_ah @ 116,
        max_srq @ 120,
        max_srq_wr @ 124,
    });
    check_layout!(qhca_eqe_page_fault, size 32, align 8, {
        type_ @ 0,
        flags @ 1,
        rsvd0 @ 2,
        token @ 4,
        va @ 8,
        key @ 16,
        qpn @ 20,
        length @ 24,
        rsvd1 @ 28,
        owner @ 31,
    });
    check_layout!(qhca_cmd_reg_mr, size 40, align 8, {
        uar @ 0,
        pdn @ 4,
        iova @ 8,
        length @ 16,
        access @ 24,
        npages @ 28,
        pages_addr @ 32,
    });
    check_layout!(qhca_cq_dbrec, size 64, align 4, {
        ci @ 0,
        rsvd @ 4,
    });
    check_layout!(qhca_cmd_create_cq, size 40, align 8, {
        uar @ 0,
        log_entries @ 4,
        npages @ 8,
        rsvd0 @ 12,
        pages_addr @ 16,
        rsvd1 @ 24,
    });
    check_layout!(qhca_cqe, size 32, align 8, {
        wr_id @ 0,
        byte_len @ 8,
        imm_data @ 12,
        qpn @ 16,
        src_qp @ 20,
        opcode @ 24,
        status @ 25,
        vendor_err @ 26,
        flags @ 27,
        wqe_index @ 28,
        rsvd @ 30,
        owner @ 31,
    });
    check_layout!(qhca_wqe_ctrl, size 32, align 8, {
        wr_id @ 0,
        opcode @ 8,
        flags @ 9,
        num_sge @ 10,
        rsvd0 @ 11,
        imm_data @ 12,
        inline_len @ 16,
        rsvd1 @ 20,
    });
    check_layout!(qhca_wqe_raddr, size 16, align 8, {
        remote_addr @ 0,
        rkey @ 8,
        rsvd @ 12,
    });
    check_layout!(qhca_wqe_atomic, size 16, align 8, {
        swap_add @ 0,
        compare @ 8,
    });
    check_layout!(qhca_wqe_bind, size 32, align 8, {
        addr @ 0,
        length @ 8,
        mw_key @ 16,
        new_key @ 20,
        mr_key @ 24,
        access @ 28,
    });
    check_layout!(qhca_wqe_reg_mr, size 32, align 8, {
        iova @ 0,
        length @ 8,
        pages_addr @ 16,
        key @ 24,
        access @ 28,
    });
    check_layout!(qhca_sge, size 16, align 8, {
        addr @ 0,
        length @ 8,
        lkey @ 12,
    });
    check_layout!(qhca_rwqe, size 16, align 8, {
        wr_id @ 0,
        num_sge @ 8,
        rsvd @ 12,
    });
    check_layout!(qhca_cmd_create_qp, size 40, align 8, {
        uar @ 0,
        pdn @ 4,
        send_cqn @ 8,
        recv_cqn @ 12,
        sq_log @ 16,
        sq_stride_log @ 17,
        rq_log @ 18,
        rq_stride_log @ 19,
        max_inline @ 20,
        max_sge @ 22,
        npages @ 24,
        type_ @ 28,
        pages_addr @ 32,
    });
    check_layout!(qhca_qp_attr, size 64, align 4, {
        mask @ 0,
        state @ 4,
        path_mtu @ 5,
        timeout @ 6,
        retry_cnt @ 7,
        rnr_retry @ 8,
        min_rnr_timer @ 9,
        max_rd_atomic @ 10,
        max_dest_rd_atomic @ 11,
        access @ 12,
        dest_qpn @ 16,
        rq_psn @ 20,
        sq_psn @ 24,
        qkey @ 28,
        av @ 32,
    });
    check_layout!(qhca_ctx_stats, size 96, align 8, {
        db_accepted @ 0,
        db_violations @ 8,
        pkt_foreign @ 16,
        rnr_retries @ 24,
        odp_req_faults @ 32,
        odp_resp_faults @ 40,
        odp_fault_rnr_naks @ 48,
        odp_invalidations @ 56,
        ud_drop_qkey @ 64,
        ud_drop_no_recv @ 72,
        ud_drop_too_long @ 80,
        ud_drop_fault @ 88,
    });
    check_layout!(qhca_ioc_query_device, size 160, align 8, {
        size @ 0,
        comp_mask @ 4,
        abi_version @ 8,
        uar_index @ 12,
        rsvd_in @ 16,
        attr @ 32,
    });
    check_layout!(qhca_ioc_handle, size 16, align 4, {
        size @ 0,
        comp_mask @ 4,
        handle @ 8,
        flags @ 12,
    });
    check_layout!(qhca_ioc_reg_mr, size 48, align 8, {
        size @ 0,
        comp_mask @ 4,
        pdn @ 8,
        access @ 12,
        addr @ 16,
        length @ 24,
        lkey @ 32,
        rkey @ 36,
        rsvd @ 40,
    });
    check_layout!(qhca_ioc_create_cq, size 40, align 8, {
        size @ 0,
        comp_mask @ 4,
        log_entries @ 8,
        eventfd @ 12,
        buf_addr @ 16,
        buf_len @ 24,
        cqn @ 32,
        rsvd @ 36,
    });
    check_layout!(qhca_ioc_create_qp, size 56, align 8, {
        size @ 0,
        comp_mask @ 4,
        pdn @ 8,
        send_cqn @ 12,
        recv_cqn @ 16,
        sq_log @ 20,
        sq_stride_log @ 21,
        rq_log @ 22,
        rq_stride_log @ 23,
        max_inline @ 24,
        max_sge @ 26,
        type_ @ 28,
        buf_addr @ 32,
        buf_len @ 40,
        qpn @ 48,
        srqn @ 52,
    });
    check_layout!(qhca_ioc_create_srq, size 40, align 8, {
        size @ 0,
        comp_mask @ 4,
        pdn @ 8,
        log @ 12,
        stride_log @ 13,
        max_sge @ 14,
        buf_addr @ 16,
        buf_len @ 24,
        srqn @ 32,
        rsvd @ 36,
    });
    check_layout!(qhca_ioc_qp_attr, size 80, align 4, {
        size @ 0,
        comp_mask @ 4,
        qpn @ 8,
        rsvd @ 12,
        attr @ 16,
    });
    check_layout!(qhca_ioc_query_ctx, size 112, align 8, {
        size @ 0,
        comp_mask @ 4,
        rsvd @ 8,
        stats @ 16,
    });
    check_layout!(qhca_ioc_async_event, size 32, align 8, {
        size @ 0,
        comp_mask @ 4,
        type_ @ 8,
        element @ 12,
        rsvd @ 16,
    });
    check_layout!(qhca_ioc_advise_mr, size 40, align 8, {
        size @ 0,
        comp_mask @ 4,
        lkey @ 8,
        advice @ 12,
        flags @ 16,
        rsvd @ 20,
        addr @ 24,
        length @ 32,
    });
    check_layout!(qhca_ioc_alloc_mw, size 24, align 4, {
        size @ 0,
        comp_mask @ 4,
        pdn @ 8,
        type_ @ 12,
        key @ 16,
        rsvd @ 20,
    });
    check_layout!(qhca_ioc_create_ah, size 48, align 4, {
        size @ 0,
        comp_mask @ 4,
        pdn @ 8,
        ah @ 12,
        attr @ 16,
    });
    check_layout!(qhca_ah_attr, size 32, align 4, {
        dgid @ 0,
        flow_label @ 16,
        traffic_class @ 20,
        hop_limit @ 21,
        sl @ 22,
        port_num @ 23,
        sgid_index @ 24,
        rsvd @ 25,
    });
    check_layout!(qhca_cmd_create_srq, size 40, align 8, {
        uar @ 0,
        pdn @ 4,
        log @ 8,
        stride_log @ 9,
        max_sge @ 10,
        npages @ 12,
        pages_addr @ 16,
        rsvd @ 24,
    });
    check_layout!(qhca_srq_dbrec, size 64, align 4, {
        ci @ 0,
        rsvd @ 4,
    });
    check_layout!(qhca_cmd_create_ah, size 40, align 4, {
        uar @ 0,
        pdn @ 4,
        attr @ 8,
    });
    // The port.
    check_layout!(qhca_gid_entry, size 24, align 1, {
        gid @ 0,
        flags @ 16,
        prefix_len @ 17,
        rsvd @ 18,
    });
    check_layout!(qhca_cmd_set_gid, size 40, align 8, {
        index @ 0,
        rsvd0 @ 4,
        entry @ 8,
        rsvd1 @ 32,
    });
    check_layout!(qhca_port_counters, size 160, align 8, {
        tx_frames @ 0,
        tx_bytes @ 8,
        rx_frames @ 16,
        rx_bytes @ 24,
        tx_no_route @ 32,
        tx_no_neigh @ 40,
        rx_malformed @ 48,
        rx_bad_icrc @ 56,
        rx_not_ours @ 64,
        rx_oversize @ 72,
        arp_rx @ 80,
        arp_tx @ 88,
        test_dropped @ 96,
        test_duplicated @ 104,
        test_reordered @ 112,
        rx_forged @ 120,
        eth_tx_frames @ 128,
        eth_rx_frames @ 136,
        eth_rx_dropped @ 144,
        rsvd @ 152,
    });
    check_layout!(qhca_port_attr, size 560, align 8, {
        mac @ 0,
        state @ 6,
        wire @ 7,
        max_mtu @ 8,
        gid_tbl_len @ 9,
        rsvd0 @ 10,
        counters @ 16,
        gids @ 176,
    });
    check_layout!(qhca_ioc_query_port, size 576, align 8, {
        size @ 0,
        comp_mask @ 4,
        rsvd @ 8,
        attr @ 16,
    });
    check_layout!(qhca_wqe_ud, size 16, align 4, {
        ah @ 0,
        remote_qpn @ 4,
        remote_qkey @ 8,
        rsvd @ 12,
    });
    check_layout!(qhca_grh, size 40, align 4, {
        version_tclass_flow @ 0,
        paylen @ 4,
        next_hdr @ 6,
        hop_limit @ 7,
        sgid @ 8,
        dgid @ 24,
    });
    check_layout!(qhca_inval_entry, size 32, align 8, {
        seq @ 0,
        start @ 8,
        length @ 16,
        key @ 24,
        rsvd @ 28,
    });
    check_layout!(qhca_inval_page, size 4096, align 8, {
        generation @ 0,
        flush_generation @ 8,
        ring_entries @ 16,
        rsvd0 @ 20,
        rsvd1 @ 24,
        ring @ 32,
    });
    check_layout!(qhca_ib_alloc_ucontext_resp, size 160, align 8, {
        comp_mask @ 0,
        uar_index @ 4,
        db_mmap_offset @ 8,
        inval_mmap_offset @ 16,
        rsvd @ 24,
        attr @ 32,
    });
    check_layout!(qhca_ib_alloc_pd_resp, size 8, align 4, {
        pdn @ 0,
        rsvd @ 4,
    });
    check_layout!(qhca_ib_reg_mr, size 8, align 4, {
        comp_mask @ 0,
        flags @ 4,
    });
    check_layout!(qhca_ib_create_cq, size 24, align 8, {
        buf_addr @ 0,
        buf_len @ 8,
        log_entries @ 16,
        comp_mask @ 20,
    });
    check_layout!(qhca_ib_create_cq_resp, size 8, align 4, {
        cqn @ 0,
        rsvd @ 4,
    });
    check_layout!(qhca_ib_create_qp, size 24, align 8, {
        buf_addr @ 0,
        buf_len @ 8,
        sq_log @ 16,
        sq_stride_log @ 17,
        rq_log @ 18,
        rq_stride_log @ 19,
        comp_mask @ 20,
    });
    check_layout!(qhca_ib_create_srq, size 24, align 8, {
        buf_addr @ 0,
        buf_len @ 8,
        log @ 16,
        stride_log @ 17,
        rsvd @ 18,
        comp_mask @ 20,
    });
    check_layout!(qhca_ib_create_srq_resp, size 8, align 4, {
        srqn @ 0,
        rsvd @ 4,
    });
    check_layout!(qhca_ib_create_ah_resp, size 8, align 4, {
        ah @ 0,
        rsvd @ 4,
    });
}

#[test]
fn field_types_have_the_header_widths() {
    // A field whose C type changes width changes its Rust type too; pin the ones the layers
    // exchange (the device's structs, the udata of the core's commands, the provider's and the
    // driver's request structs) so such a change cannot slip through with the same offsets.
    let u = qhca_ib_alloc_ucontext_resp::default();
    let _: (u32, u32, u64, u64, u64, qhca_device_attr) = (
        u.comp_mask,
        u.uar_index,
        u.db_mmap_offset,
        u.inval_mmap_offset,
        u.rsvd,
        u.attr,
    );
    let q = qhca_ioc_query_device::default();
    let _: (u32, u32, u32, u32, [u64; 2]) =
        (q.size, q.comp_mask, q.abi_version, q.uar_index, q.rsvd_in);
    let a = q.attr;
    let _: (u32, u32, u64, u64, u64) =
        (a.abi_version, a.num_uars, a.caps, a.node_guid, a.fw_version);
    let _: (u64, u64, u32, u32, u32) = (
        a.max_mr_size,
        a.page_size_cap,
        a.max_mw,
        a.max_ah,
        a.max_srq,
    );
    let _: u32 = a.max_srq_wr;
    let _: (u64, u32, u32) = (a.odp_general_caps, a.odp_rc_caps, a.odp_ud_caps);
    let e = qhca_eqe::default();
    let _: (u8, u8, u16, u32, [u64; 2], [u8; 7], u8) = (
        e.type_, e.status, e.rsvd0, e.token, e.data, e.rsvd1, e.owner,
    );
    let c = qhca_cmd::default();
    let _: (u16, u16, u32, u64, u32, u32, [u64; 5]) = (
        c.opcode, c.flags, c.token, c.out_addr, c.out_len, c.in_ext, c.in_,
    );
    // Unreliable datagram.
    let ah = qhca_ioc_create_ah::default();
    let _: (u32, u32, u32, u32) = (ah.size, ah.comp_mask, ah.pdn, ah.ah);
    let at = ah.attr;
    let _: ([u8; 16], u32, u8, u8, u8, u8, u8, [u8; 7]) = (
        at.dgid,
        at.flow_label,
        at.traffic_class,
        at.hop_limit,
        at.sl,
        at.port_num,
        at.sgid_index,
        at.rsvd,
    );
    let ud = qhca_wqe_ud::default();
    let _: (u32, u32, u32, u32) = (ud.ah, ud.remote_qpn, ud.remote_qkey, ud.rsvd);
    let g = qhca_grh::default();
    let _: (u32, u16, u8, u8, [u8; 16], [u8; 16]) = (
        g.version_tclass_flow,
        g.paylen,
        g.next_hdr,
        g.hop_limit,
        g.sgid,
        g.dgid,
    );
    let qa = qhca_qp_attr::default();
    let _: (u32, qhca_ah_attr) = (qa.qkey, qa.av);
    let _: u32 = qhca_ioc_create_qp::default().type_;
    let _: u32 = qhca_cmd_create_qp::default().type_;
    let st = qhca_ctx_stats::default();
    let _: (u64, u64, u64, u64) = (
        st.ud_drop_qkey,
        st.ud_drop_no_recv,
        st.ud_drop_too_long,
        st.ud_drop_fault,
    );
}

#[test]
fn defaults_are_all_zero() {
    // Reserved fields must be zero: Default must give exactly that.
    let q = qhca_ioc_query_device::default();
    // SAFETY: qhca_ioc_query_device is repr(C), 160 bytes, with no padding (checked above and
    // by the C check with -Wpadded), so every byte is initialized and may be read as u8.
    let bytes: [u8; 160] = unsafe { core::mem::transmute(q) };
    assert!(bytes.iter().all(|&b| b == 0));
}

#[test]
fn constants_the_other_layers_rely_on() {
    assert_eq!(QHCA_ABI_VERSION, 2);
    assert_eq!(QHCA_PCI_VENDOR_ID, 0x1af4);
    assert_eq!(QHCA_PCI_DEVICE_ID, 0x10f0);
    assert_eq!(QHCA_UAR_PAGE_SIZE, 4096);
    assert_eq!(UAR_PAGE_SIZE, 4096);
    assert_eq!(QHCA_DB_OFFSET, 0);
    assert_eq!(QHCA_MAGIC.to_le_bytes(), *b"QHCA");
    assert_eq!(CAP_UAR_ISOLATION, 1);
    assert_eq!(CAP_RC, 2);
    assert_eq!(CAP_ODP, 4);
    assert_eq!(CAP_MW, 8);
    assert_eq!(CAP_UD, 16);
    assert_eq!(CAP_PORT, 32);
    assert_eq!(CAP_KERNEL, 64);
    assert_eq!(CAP_FAST_REG, 128);
    assert_eq!(CAP_ETH, 256);
    assert_eq!(CAP_SRQ, 512);
    assert_eq!(CAP_CMD_FLAGS, 1024);
    assert_eq!(
        CAP_KNOWN_MASK,
        CAP_UAR_ISOLATION
            | CAP_RC
            | CAP_ODP
            | CAP_MW
            | CAP_UD
            | CAP_PORT
            | CAP_KERNEL
            | CAP_FAST_REG
            | CAP_ETH
            | CAP_SRQ
            | CAP_CMD_FLAGS
    );
    assert_eq!(QHCA_MW_KEY_FLAG, 1 << 31);
    assert_eq!(QHCA_ODP_MAP_MAX, 512);
    assert_eq!(QHCA_EQE_OWNER, 1);
}

#[test]
fn shared_receive_queue_constants() {
    assert_eq!(QHCA_CAP_SRQ, 1 << 9);
    assert_eq!(QHCA_CAP_CMD_FLAGS, 1 << 10);
    assert_eq!(QHCA_CMD_CREATE_SRQ, 0x19);
    assert_eq!(QHCA_CMD_MODIFY_SRQ, 0x1a);
    assert_eq!(QHCA_CMD_QUERY_SRQ, 0x1b);
    assert_eq!(QHCA_CMD_DESTROY_SRQ, 0x1c);
    assert_eq!(QHCA_EQE_SRQ_LIMIT, 0x07);
    assert_eq!(QHCA_EQE_QP_LAST_WQE, 0x08);
    assert_eq!(QHCA_DB_SRQ, 0x4);
    assert_eq!(QHCA_SRQ_INDEX_BITS, 10);
}

#[test]
fn resize_cq_and_modify_mr_constants() {
    assert_eq!(QHCA_CMD_RESIZE_CQ, 0x1d);
    assert_eq!(QHCA_CMD_MODIFY_MR, 0x1e);
    // The first unassigned opcode: the garbage qtests send it and beyond.
    assert_eq!(QHCA_CMD_MAX, 0x1f);
}

#[test]
fn unreliable_datagram_constants() {
    assert_eq!(QHCA_CAP_UD, 1 << 4);
    assert_eq!(QHCA_REG_NUM_AH, 0x088);
    assert_eq!(QHCA_REG_UD_NO_QP, 0x08c);
    assert_eq!(QHCA_CMD_CREATE_AH, 0x15);
    assert_eq!(QHCA_CMD_DESTROY_AH, 0x16);
    assert_eq!(QHCA_CMD_QUERY_PORT, 0x17);
    assert_eq!(QHCA_CMD_SET_GID, 0x18);
    assert_eq!(QHCA_CQE_WITH_GRH, 1 << 2);
    assert_eq!(QHCA_QPT_RC, 0);
    assert_eq!(QHCA_QPT_UD, 1);
    assert_eq!(QHCA_QP_ATTR_QKEY, 1 << 12);
    assert_eq!(QHCA_QP_ATTR_AV, 1 << 13);
    assert_eq!(QHCA_QP_ATTR_ALL, 0x3fff);
    assert_eq!(QHCA_GID_TABLE_LEN, 16);
    assert_eq!(QHCA_UD_MAX_MSG, 4096);
    assert_eq!(QHCA_GRH_SIZE as usize, core::mem::size_of::<qhca_grh>());
    // bindgen types this one i64 (it does not fit one); the bits are what matter.
    assert_eq!(QHCA_GID_PREFIX as u64, 0xfe80_0000_0000_0000);
    assert_eq!(QHCA_AH_INDEX_BITS, 12);
    assert_eq!(QHCA_QKEY_CONTROLLED, 1 << 31);
    // The CREATE_AH command fits the command's input words.
    assert!(
        core::mem::size_of::<qhca_cmd_create_ah>()
            <= core::mem::size_of_val(&qhca_cmd::default().in_)
    );
}

#[test]
fn command_flags() {
    assert_eq!(QHCA_CMD_FLAG_POLLED, 1 << 0);
    assert_eq!(QHCA_CMD_FLAG_RESUME, 1 << 1);
}
