/* SPDX-License-Identifier: GPL-2.0-only OR MIT */
/*
 * Compiled (never run) by uapi/tests/c_header.rs, once with <linux/types.h> and once with
 * -DQHCA_ABI_NO_LINUX_TYPES, both with -Wpadded -Werror: the header must stand alone, have no
 * implicit padding, and its spelled-out ioctl numbers must be what _IOWR computes.
 */
#include <linux/ioctl.h>
#include <stddef.h>

#include "qhca-abi.h"

#define CHECK_SIZE(type, n) _Static_assert(sizeof(type) == (n), "sizeof " #type)
#define CHECK_OFF(type, field, n) \
	_Static_assert(offsetof(type, field) == (n), "offsetof " #type "." #field)

_Static_assert(QHCA_IOCTL_QUERY_DEVICE ==
		       _IOWR(QHCA_IOC_MAGIC, QHCA_IOC_NR_QUERY_DEVICE, struct qhca_ioc_query_device),
	       "QHCA_IOCTL_QUERY_DEVICE is not _IOWR of its struct");
_Static_assert(_IOC_SIZE(QHCA_IOCTL_QUERY_DEVICE) == 160, "ioctl size");
_Static_assert(_IOC_TYPE(QHCA_IOCTL_QUERY_DEVICE) == QHCA_IOC_MAGIC, "ioctl magic");

CHECK_SIZE(struct qhca_cmd, 64);
CHECK_OFF(struct qhca_cmd, opcode, 0);
CHECK_OFF(struct qhca_cmd, flags, 2);
CHECK_OFF(struct qhca_cmd, token, 4);
CHECK_OFF(struct qhca_cmd, out_addr, 8);
CHECK_OFF(struct qhca_cmd, out_len, 16);
CHECK_OFF(struct qhca_cmd, rsvd0, 20);
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
CHECK_OFF(struct qhca_device_attr, rsvd0, 76);
CHECK_OFF(struct qhca_device_attr, max_mr_size, 80);
CHECK_OFF(struct qhca_device_attr, page_size_cap, 88);
CHECK_OFF(struct qhca_device_attr, rsvd1, 96);

CHECK_SIZE(struct qhca_ioc_query_device, 160);
CHECK_OFF(struct qhca_ioc_query_device, size, 0);
CHECK_OFF(struct qhca_ioc_query_device, comp_mask, 4);
CHECK_OFF(struct qhca_ioc_query_device, abi_version, 8);
CHECK_OFF(struct qhca_ioc_query_device, uar_index, 12);
CHECK_OFF(struct qhca_ioc_query_device, rsvd_in, 16);
CHECK_OFF(struct qhca_ioc_query_device, attr, 32);

_Static_assert(QHCA_UAR_PAGE_SIZE == 4096, "doorbell page size");
_Static_assert(QHCA_DB_INDEX_SHIFT == 32 && QHCA_DB_TYPE_SHIFT == 24, "doorbell layout");
