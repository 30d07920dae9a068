/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Compiled (never run) by uapi/tests/c_header.rs, once with <linux/types.h> and once with
 * -DQHCA_ABI_NO_LINUX_TYPES, both with -Wpadded -Werror: the header must stand alone, have no
 * implicit padding, and lay its structs out as uapi/tests/layout.rs says on the Rust side.
 */
#include <stddef.h>

#include "qhca-abi.h"

#define CHECK_SIZE(type, n) _Static_assert(sizeof(type) == (n), "sizeof " #type)
#define CHECK_OFF(type, field, n) \
	_Static_assert(offsetof(type, field) == (n), "offsetof " #type "." #field)

CHECK_SIZE(struct qhca_cmd, 64);
CHECK_OFF(struct qhca_cmd, opcode, 0);
CHECK_OFF(struct qhca_cmd, flags, 2);
CHECK_OFF(struct qhca_cmd, token, 4);
CHECK_OFF(struct qhca_cmd, out_addr, 8);
CHECK_OFF(struct qhca_cmd, out_len, 16);
CHECK_OFF(struct qhca_cmd, in_ext, 20);
CHECK_OFF(struct qhca_cmd, in, 24);

CHECK_SIZE(struct qhca_eqe, 32);
CHECK_OFF(struct qhca_eqe, type, 0);
CHECK_OFF(struct qhca_eqe, status, 1);
CHECK_OFF(struct qhca_eqe, rsvd0, 2);
CHECK_OFF(struct qhca_eqe, token, 4);
CHECK_OFF(struct qhca_eqe, data, 8);
CHECK_OFF(struct qhca_eqe, rsvd1, 24);
CHECK_OFF(struct qhca_eqe, owner, 31);

CHECK_SIZE(struct qhca_device_attr, 128);
CHECK_OFF(struct qhca_device_attr, abi_version, 0);
CHECK_OFF(struct qhca_device_attr, num_uars, 4);
CHECK_OFF(struct qhca_device_attr, caps, 8);
CHECK_OFF(struct qhca_device_attr, node_guid, 16);
CHECK_OFF(struct qhca_device_attr, fw_version, 24);
CHECK_OFF(struct qhca_device_attr, vendor_id, 32);
CHECK_OFF(struct qhca_device_attr, vendor_part_id, 36);
CHECK_OFF(struct qhca_device_attr, hw_ver, 40);
CHECK_OFF(struct qhca_device_attr, max_pd, 44);
CHECK_OFF(struct qhca_device_attr, max_cq, 48);
CHECK_OFF(struct qhca_device_attr, max_cqe, 52);
CHECK_OFF(struct qhca_device_attr, max_qp, 56);
CHECK_OFF(struct qhca_device_attr, max_qp_wr, 60);
CHECK_OFF(struct qhca_device_attr, max_sge, 64);
CHECK_OFF(struct qhca_device_attr, max_inline, 68);
CHECK_OFF(struct qhca_device_attr, max_mr, 72);
CHECK_OFF(struct qhca_device_attr, max_qp_rd_atom, 76);
CHECK_OFF(struct qhca_device_attr, max_qp_init_rd_atom, 78);
CHECK_OFF(struct qhca_device_attr, max_mr_size, 80);
CHECK_OFF(struct qhca_device_attr, page_size_cap, 88);
CHECK_OFF(struct qhca_device_attr, odp_general_caps, 96);
CHECK_OFF(struct qhca_device_attr, odp_rc_caps, 104);
CHECK_OFF(struct qhca_device_attr, odp_ud_caps, 108);
CHECK_OFF(struct qhca_device_attr, max_mw, 112);
CHECK_OFF(struct qhca_device_attr, max_ah, 116);
CHECK_OFF(struct qhca_device_attr, max_srq, 120);
CHECK_OFF(struct qhca_device_attr, max_srq_wr, 124);

CHECK_SIZE(struct qhca_eqe_page_fault, 32);
CHECK_OFF(struct qhca_eqe_page_fault, type, 0);
CHECK_OFF(struct qhca_eqe_page_fault, flags, 1);
CHECK_OFF(struct qhca_eqe_page_fault, rsvd0, 2);
CHECK_OFF(struct qhca_eqe_page_fault, token, 4);
CHECK_OFF(struct qhca_eqe_page_fault, va, 8);
CHECK_OFF(struct qhca_eqe_page_fault, key, 16);
CHECK_OFF(struct qhca_eqe_page_fault, qpn, 20);
CHECK_OFF(struct qhca_eqe_page_fault, length, 24);
CHECK_OFF(struct qhca_eqe_page_fault, rsvd1, 28);
CHECK_OFF(struct qhca_eqe_page_fault, owner, 31);

CHECK_SIZE(struct qhca_cmd_reg_mr, 40);
CHECK_OFF(struct qhca_cmd_reg_mr, uar, 0);
CHECK_OFF(struct qhca_cmd_reg_mr, pdn, 4);
CHECK_OFF(struct qhca_cmd_reg_mr, iova, 8);
CHECK_OFF(struct qhca_cmd_reg_mr, length, 16);
CHECK_OFF(struct qhca_cmd_reg_mr, access, 24);
CHECK_OFF(struct qhca_cmd_reg_mr, npages, 28);
CHECK_OFF(struct qhca_cmd_reg_mr, pages_addr, 32);

CHECK_SIZE(struct qhca_cq_dbrec, 64);
CHECK_OFF(struct qhca_cq_dbrec, ci, 0);
CHECK_OFF(struct qhca_cq_dbrec, rsvd, 4);

CHECK_SIZE(struct qhca_cmd_create_cq, 40);
CHECK_OFF(struct qhca_cmd_create_cq, uar, 0);
CHECK_OFF(struct qhca_cmd_create_cq, log_entries, 4);
CHECK_OFF(struct qhca_cmd_create_cq, npages, 8);
CHECK_OFF(struct qhca_cmd_create_cq, rsvd0, 12);
CHECK_OFF(struct qhca_cmd_create_cq, pages_addr, 16);
CHECK_OFF(struct qhca_cmd_create_cq, rsvd1, 24);

CHECK_SIZE(struct qhca_cqe, 32);
CHECK_OFF(struct qhca_cqe, wr_id, 0);
CHECK_OFF(struct qhca_cqe, byte_len, 8);
CHECK_OFF(struct qhca_cqe, imm_data, 12);
CHECK_OFF(struct qhca_cqe, qpn, 16);
CHECK_OFF(struct qhca_cqe, src_qp, 20);
CHECK_OFF(struct qhca_cqe, opcode, 24);
CHECK_OFF(struct qhca_cqe, status, 25);
CHECK_OFF(struct qhca_cqe, vendor_err, 26);
CHECK_OFF(struct qhca_cqe, flags, 27);
CHECK_OFF(struct qhca_cqe, wqe_index, 28);
CHECK_OFF(struct qhca_cqe, rsvd, 30);
CHECK_OFF(struct qhca_cqe, owner, 31);

CHECK_SIZE(struct qhca_wqe_ctrl, 32);
CHECK_OFF(struct qhca_wqe_ctrl, wr_id, 0);
CHECK_OFF(struct qhca_wqe_ctrl, opcode, 8);
CHECK_OFF(struct qhca_wqe_ctrl, flags, 9);
CHECK_OFF(struct qhca_wqe_ctrl, num_sge, 10);
CHECK_OFF(struct qhca_wqe_ctrl, rsvd0, 11);
CHECK_OFF(struct qhca_wqe_ctrl, imm_data, 12);
CHECK_OFF(struct qhca_wqe_ctrl, inline_len, 16);
CHECK_OFF(struct qhca_wqe_ctrl, rsvd1, 20);

CHECK_SIZE(struct qhca_wqe_raddr, 16);
CHECK_OFF(struct qhca_wqe_raddr, remote_addr, 0);
CHECK_OFF(struct qhca_wqe_raddr, rkey, 8);
CHECK_OFF(struct qhca_wqe_raddr, rsvd, 12);

CHECK_SIZE(struct qhca_wqe_bind, 32);
CHECK_OFF(struct qhca_wqe_bind, addr, 0);
CHECK_OFF(struct qhca_wqe_bind, length, 8);
CHECK_OFF(struct qhca_wqe_bind, mw_key, 16);
CHECK_OFF(struct qhca_wqe_bind, new_key, 20);
CHECK_OFF(struct qhca_wqe_bind, mr_key, 24);
CHECK_OFF(struct qhca_wqe_bind, access, 28);

CHECK_SIZE(struct qhca_wqe_atomic, 16);
CHECK_OFF(struct qhca_wqe_atomic, swap_add, 0);
CHECK_OFF(struct qhca_wqe_atomic, compare, 8);

CHECK_SIZE(struct qhca_sge, 16);
CHECK_OFF(struct qhca_sge, addr, 0);
CHECK_OFF(struct qhca_sge, length, 8);
CHECK_OFF(struct qhca_sge, lkey, 12);

CHECK_SIZE(struct qhca_rwqe, 16);
CHECK_OFF(struct qhca_rwqe, wr_id, 0);
CHECK_OFF(struct qhca_rwqe, num_sge, 8);
CHECK_OFF(struct qhca_rwqe, rsvd, 12);

CHECK_SIZE(struct qhca_cmd_create_qp, 40);
CHECK_OFF(struct qhca_cmd_create_qp, uar, 0);
CHECK_OFF(struct qhca_cmd_create_qp, pdn, 4);
CHECK_OFF(struct qhca_cmd_create_qp, send_cqn, 8);
CHECK_OFF(struct qhca_cmd_create_qp, recv_cqn, 12);
CHECK_OFF(struct qhca_cmd_create_qp, sq_log, 16);
CHECK_OFF(struct qhca_cmd_create_qp, sq_stride_log, 17);
CHECK_OFF(struct qhca_cmd_create_qp, rq_log, 18);
CHECK_OFF(struct qhca_cmd_create_qp, rq_stride_log, 19);
CHECK_OFF(struct qhca_cmd_create_qp, max_inline, 20);
CHECK_OFF(struct qhca_cmd_create_qp, max_sge, 22);
CHECK_OFF(struct qhca_cmd_create_qp, npages, 24);
CHECK_OFF(struct qhca_cmd_create_qp, type, 28);
CHECK_OFF(struct qhca_cmd_create_qp, pages_addr, 32);

CHECK_SIZE(struct qhca_qp_attr, 64);
CHECK_OFF(struct qhca_qp_attr, mask, 0);
CHECK_OFF(struct qhca_qp_attr, state, 4);
CHECK_OFF(struct qhca_qp_attr, path_mtu, 5);
CHECK_OFF(struct qhca_qp_attr, timeout, 6);
CHECK_OFF(struct qhca_qp_attr, retry_cnt, 7);
CHECK_OFF(struct qhca_qp_attr, rnr_retry, 8);
CHECK_OFF(struct qhca_qp_attr, min_rnr_timer, 9);
CHECK_OFF(struct qhca_qp_attr, max_rd_atomic, 10);
CHECK_OFF(struct qhca_qp_attr, max_dest_rd_atomic, 11);
CHECK_OFF(struct qhca_qp_attr, access, 12);
CHECK_OFF(struct qhca_qp_attr, dest_qpn, 16);
CHECK_OFF(struct qhca_qp_attr, rq_psn, 20);
CHECK_OFF(struct qhca_qp_attr, sq_psn, 24);
CHECK_OFF(struct qhca_qp_attr, qkey, 28);
CHECK_OFF(struct qhca_qp_attr, av, 32);

CHECK_SIZE(struct qhca_ctx_stats, 96);
CHECK_OFF(struct qhca_ctx_stats, db_accepted, 0);
CHECK_OFF(struct qhca_ctx_stats, db_violations, 8);
CHECK_OFF(struct qhca_ctx_stats, pkt_foreign, 16);
CHECK_OFF(struct qhca_ctx_stats, rnr_retries, 24);
CHECK_OFF(struct qhca_ctx_stats, odp_req_faults, 32);
CHECK_OFF(struct qhca_ctx_stats, odp_resp_faults, 40);
CHECK_OFF(struct qhca_ctx_stats, odp_fault_rnr_naks, 48);
CHECK_OFF(struct qhca_ctx_stats, odp_invalidations, 56);
CHECK_OFF(struct qhca_ctx_stats, ud_drop_qkey, 64);
CHECK_OFF(struct qhca_ctx_stats, ud_drop_no_recv, 72);
CHECK_OFF(struct qhca_ctx_stats, ud_drop_too_long, 80);
CHECK_OFF(struct qhca_ctx_stats, ud_drop_fault, 88);

CHECK_SIZE(struct qhca_ioc_query_device, 160);
CHECK_OFF(struct qhca_ioc_query_device, size, 0);
CHECK_OFF(struct qhca_ioc_query_device, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_query_device, abi_version, 8);
CHECK_OFF(struct qhca_ioc_query_device, uar_index, 12);
CHECK_OFF(struct qhca_ioc_query_device, rsvd_in, 16);
CHECK_OFF(struct qhca_ioc_query_device, attr, 32);

CHECK_SIZE(struct qhca_ioc_handle, 16);
CHECK_OFF(struct qhca_ioc_handle, size, 0);
CHECK_OFF(struct qhca_ioc_handle, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_handle, handle, 8);
CHECK_OFF(struct qhca_ioc_handle, flags, 12);

CHECK_SIZE(struct qhca_ioc_reg_mr, 48);
CHECK_OFF(struct qhca_ioc_reg_mr, size, 0);
CHECK_OFF(struct qhca_ioc_reg_mr, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_reg_mr, pdn, 8);
CHECK_OFF(struct qhca_ioc_reg_mr, access, 12);
CHECK_OFF(struct qhca_ioc_reg_mr, addr, 16);
CHECK_OFF(struct qhca_ioc_reg_mr, length, 24);
CHECK_OFF(struct qhca_ioc_reg_mr, lkey, 32);
CHECK_OFF(struct qhca_ioc_reg_mr, rkey, 36);
CHECK_OFF(struct qhca_ioc_reg_mr, rsvd, 40);

CHECK_SIZE(struct qhca_ioc_create_cq, 40);
CHECK_OFF(struct qhca_ioc_create_cq, size, 0);
CHECK_OFF(struct qhca_ioc_create_cq, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_create_cq, log_entries, 8);
CHECK_OFF(struct qhca_ioc_create_cq, eventfd, 12);
CHECK_OFF(struct qhca_ioc_create_cq, buf_addr, 16);
CHECK_OFF(struct qhca_ioc_create_cq, buf_len, 24);
CHECK_OFF(struct qhca_ioc_create_cq, cqn, 32);
CHECK_OFF(struct qhca_ioc_create_cq, rsvd, 36);

CHECK_SIZE(struct qhca_ioc_create_qp, 56);
CHECK_OFF(struct qhca_ioc_create_qp, size, 0);
CHECK_OFF(struct qhca_ioc_create_qp, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_create_qp, pdn, 8);
CHECK_OFF(struct qhca_ioc_create_qp, send_cqn, 12);
CHECK_OFF(struct qhca_ioc_create_qp, recv_cqn, 16);
CHECK_OFF(struct qhca_ioc_create_qp, sq_log, 20);
CHECK_OFF(struct qhca_ioc_create_qp, sq_stride_log, 21);
CHECK_OFF(struct qhca_ioc_create_qp, rq_log, 22);
CHECK_OFF(struct qhca_ioc_create_qp, rq_stride_log, 23);
CHECK_OFF(struct qhca_ioc_create_qp, max_inline, 24);
CHECK_OFF(struct qhca_ioc_create_qp, max_sge, 26);
CHECK_OFF(struct qhca_ioc_create_qp, type, 28);
CHECK_OFF(struct qhca_ioc_create_qp, buf_addr, 32);
CHECK_OFF(struct qhca_ioc_create_qp, buf_len, 40);
CHECK_OFF(struct qhca_ioc_create_qp, qpn, 48);
CHECK_OFF(struct qhca_ioc_create_qp, srqn, 52);
CHECK_SIZE(struct qhca_ioc_create_srq, 40);
CHECK_OFF(struct qhca_ioc_create_srq, log, 12);
CHECK_OFF(struct qhca_ioc_create_srq, max_sge, 14);
CHECK_OFF(struct qhca_ioc_create_srq, buf_addr, 16);
CHECK_OFF(struct qhca_ioc_create_srq, srqn, 32);
CHECK_SIZE(struct qhca_ib_create_srq, 24);
CHECK_OFF(struct qhca_ib_create_srq, log, 16);
CHECK_OFF(struct qhca_ib_create_srq, comp_mask, 20);
CHECK_SIZE(struct qhca_ib_create_srq_resp, 8);

CHECK_SIZE(struct qhca_ioc_qp_attr, 80);
CHECK_OFF(struct qhca_ioc_qp_attr, size, 0);
CHECK_OFF(struct qhca_ioc_qp_attr, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_qp_attr, qpn, 8);
CHECK_OFF(struct qhca_ioc_qp_attr, rsvd, 12);
CHECK_OFF(struct qhca_ioc_qp_attr, attr, 16);

CHECK_SIZE(struct qhca_ioc_query_ctx, 112);
CHECK_OFF(struct qhca_ioc_query_ctx, size, 0);
CHECK_OFF(struct qhca_ioc_query_ctx, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_query_ctx, rsvd, 8);
CHECK_OFF(struct qhca_ioc_query_ctx, stats, 16);

CHECK_SIZE(struct qhca_ioc_async_event, 32);
CHECK_OFF(struct qhca_ioc_async_event, size, 0);
CHECK_OFF(struct qhca_ioc_async_event, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_async_event, type, 8);
CHECK_OFF(struct qhca_ioc_async_event, element, 12);
CHECK_OFF(struct qhca_ioc_async_event, rsvd, 16);

CHECK_SIZE(struct qhca_ioc_advise_mr, 40);
CHECK_OFF(struct qhca_ioc_advise_mr, size, 0);
CHECK_OFF(struct qhca_ioc_advise_mr, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_advise_mr, lkey, 8);
CHECK_OFF(struct qhca_ioc_advise_mr, advice, 12);
CHECK_OFF(struct qhca_ioc_advise_mr, flags, 16);
CHECK_OFF(struct qhca_ioc_advise_mr, rsvd, 20);
CHECK_OFF(struct qhca_ioc_advise_mr, addr, 24);
CHECK_OFF(struct qhca_ioc_advise_mr, length, 32);

CHECK_SIZE(struct qhca_ioc_alloc_mw, 24);
CHECK_OFF(struct qhca_ioc_alloc_mw, size, 0);
CHECK_OFF(struct qhca_ioc_alloc_mw, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_alloc_mw, pdn, 8);
CHECK_OFF(struct qhca_ioc_alloc_mw, type, 12);
CHECK_OFF(struct qhca_ioc_alloc_mw, key, 16);
CHECK_OFF(struct qhca_ioc_alloc_mw, rsvd, 20);

CHECK_SIZE(struct qhca_ah_attr, 32);
CHECK_OFF(struct qhca_ah_attr, dgid, 0);
CHECK_OFF(struct qhca_ah_attr, flow_label, 16);
CHECK_OFF(struct qhca_ah_attr, traffic_class, 20);
CHECK_OFF(struct qhca_ah_attr, hop_limit, 21);
CHECK_OFF(struct qhca_ah_attr, sl, 22);
CHECK_OFF(struct qhca_ah_attr, port_num, 23);
CHECK_OFF(struct qhca_ah_attr, sgid_index, 24);
CHECK_OFF(struct qhca_ah_attr, rsvd, 25);

CHECK_SIZE(struct qhca_cmd_create_srq, 40);
CHECK_OFF(struct qhca_cmd_create_srq, uar, 0);
CHECK_OFF(struct qhca_cmd_create_srq, pdn, 4);
CHECK_OFF(struct qhca_cmd_create_srq, log, 8);
CHECK_OFF(struct qhca_cmd_create_srq, stride_log, 9);
CHECK_OFF(struct qhca_cmd_create_srq, max_sge, 10);
CHECK_OFF(struct qhca_cmd_create_srq, npages, 12);
CHECK_OFF(struct qhca_cmd_create_srq, pages_addr, 16);
CHECK_OFF(struct qhca_cmd_create_srq, rsvd, 24);
CHECK_SIZE(struct qhca_srq_dbrec, 64);
CHECK_OFF(struct qhca_srq_dbrec, ci, 0);
CHECK_SIZE(struct qhca_cmd_create_ah, 40);
CHECK_OFF(struct qhca_cmd_create_ah, uar, 0);
CHECK_OFF(struct qhca_cmd_create_ah, pdn, 4);
CHECK_OFF(struct qhca_cmd_create_ah, attr, 8);
_Static_assert(sizeof(struct qhca_cmd_create_ah) <= sizeof(((struct qhca_cmd *)0)->in),
	       "CREATE_AH input fits the command");

CHECK_SIZE(struct qhca_wqe_ud, 16);
CHECK_OFF(struct qhca_wqe_ud, ah, 0);
CHECK_OFF(struct qhca_wqe_ud, remote_qpn, 4);
CHECK_OFF(struct qhca_wqe_ud, remote_qkey, 8);
CHECK_OFF(struct qhca_wqe_ud, rsvd, 12);

CHECK_SIZE(struct qhca_grh, 40);
CHECK_OFF(struct qhca_grh, version_tclass_flow, 0);
CHECK_OFF(struct qhca_grh, paylen, 4);
CHECK_OFF(struct qhca_grh, next_hdr, 6);
CHECK_OFF(struct qhca_grh, hop_limit, 7);
CHECK_OFF(struct qhca_grh, sgid, 8);
CHECK_OFF(struct qhca_grh, dgid, 24);
_Static_assert(sizeof(struct qhca_grh) == QHCA_GRH_SIZE, "QHCA_GRH_SIZE");

CHECK_SIZE(struct qhca_ioc_create_ah, 48);
CHECK_OFF(struct qhca_ioc_create_ah, size, 0);
CHECK_OFF(struct qhca_ioc_create_ah, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_create_ah, pdn, 8);
CHECK_OFF(struct qhca_ioc_create_ah, ah, 12);
CHECK_OFF(struct qhca_ioc_create_ah, attr, 16);

/* The port. */
CHECK_SIZE(struct qhca_gid_entry, 24);
CHECK_OFF(struct qhca_gid_entry, flags, 16);
CHECK_OFF(struct qhca_gid_entry, prefix_len, 17);
CHECK_SIZE(struct qhca_cmd_set_gid, 40);
CHECK_OFF(struct qhca_cmd_set_gid, entry, 8);
CHECK_OFF(struct qhca_cmd_set_gid, rsvd1, 32);
_Static_assert(sizeof(struct qhca_cmd_set_gid) <= sizeof(((struct qhca_cmd *)0)->in),
	       "SET_GID input fits in the command");
CHECK_SIZE(struct qhca_port_counters, 160);
CHECK_OFF(struct qhca_port_counters, test_reordered, 112);
CHECK_OFF(struct qhca_port_counters, rx_forged, 120);
CHECK_SIZE(struct qhca_port_attr, 560);
CHECK_OFF(struct qhca_port_attr, counters, 16);
CHECK_OFF(struct qhca_port_attr, gids, 176);
CHECK_SIZE(struct qhca_ioc_query_port, 576);
CHECK_OFF(struct qhca_ioc_query_port, attr, 16);

CHECK_SIZE(struct qhca_inval_entry, 32);
CHECK_OFF(struct qhca_inval_entry, seq, 0);
CHECK_OFF(struct qhca_inval_entry, start, 8);
CHECK_OFF(struct qhca_inval_entry, length, 16);
CHECK_OFF(struct qhca_inval_entry, key, 24);
CHECK_OFF(struct qhca_inval_entry, rsvd, 28);

CHECK_SIZE(struct qhca_inval_page, 4096);
CHECK_OFF(struct qhca_inval_page, generation, 0);
CHECK_OFF(struct qhca_inval_page, flush_generation, 8);
CHECK_OFF(struct qhca_inval_page, ring_entries, 16);
CHECK_OFF(struct qhca_inval_page, ring, 32);
CHECK_SIZE(struct qhca_ib_alloc_ucontext_resp, 160);
CHECK_OFF(struct qhca_ib_alloc_ucontext_resp, attr, 32);
CHECK_OFF(struct qhca_ib_alloc_ucontext_resp, comp_mask, 0);
CHECK_OFF(struct qhca_ib_alloc_ucontext_resp, uar_index, 4);
CHECK_OFF(struct qhca_ib_alloc_ucontext_resp, db_mmap_offset, 8);
CHECK_OFF(struct qhca_ib_alloc_ucontext_resp, inval_mmap_offset, 16);
CHECK_OFF(struct qhca_ib_alloc_ucontext_resp, rsvd, 24);
CHECK_SIZE(struct qhca_ib_alloc_pd_resp, 8);
CHECK_OFF(struct qhca_ib_alloc_pd_resp, pdn, 0);
CHECK_OFF(struct qhca_ib_alloc_pd_resp, rsvd, 4);

_Static_assert(QHCA_UAR_PAGE_SIZE == 4096, "doorbell page size");
_Static_assert(QHCA_DB_INDEX_SHIFT == 32 && QHCA_DB_TYPE_SHIFT == 24, "doorbell layout");
