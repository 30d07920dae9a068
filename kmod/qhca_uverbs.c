// SPDX-License-Identifier: GPL-2.0
/*
 * qhca: the driver's own methods of the RDMA core's ioctl interface, for what
 * the verbs cannot ask (qhca-abi.h, "Driver methods"): the calling context's
 * counters and the port as the device sees it.  The method tables are macros
 * of <rdma/uverbs_named_ioctl.h>, so they are C; each handler finds the
 * caller's user context and asks the Rust side (ib.rs) for the answer.
 */
#include <rdma/ib_verbs.h>
#define UVERBS_MODULE_NAME qhca_ib
#include <rdma/uverbs_ioctl.h>
#include <rdma/uverbs_named_ioctl.h>

#include "qhca-abi.h"
#include "qhca_shim.h"

/* The ABI header spells the driver's namespace out for user space. */
static_assert(QHCA_IB_ID_NS == 1U << UVERBS_ID_NS_SHIFT);

static int UVERBS_HANDLER(QHCA_IB_METHOD_QUERY_CTX)(struct uverbs_attr_bundle *attrs)
{
	struct ib_ucontext *uctx = ib_uverbs_get_ucontext(attrs);
	struct qhca_ctx_stats stats = {};
	int ret;

	if (IS_ERR(uctx))
		return PTR_ERR(uctx);
	ret = qhca_ib_query_ctx(uctx, &stats);
	if (ret)
		return ret;
	return uverbs_copy_to(attrs, QHCA_IB_ATTR_QUERY_CTX_STATS, &stats, sizeof(stats));
}

static int UVERBS_HANDLER(QHCA_IB_METHOD_QUERY_PORT)(struct uverbs_attr_bundle *attrs)
{
	struct ib_ucontext *uctx = ib_uverbs_get_ucontext(attrs);
	struct qhca_port_attr *port;
	int ret;

	if (IS_ERR(uctx))
		return PTR_ERR(uctx);
	/* 800 bytes: not on the stack. */
	port = kzalloc_obj(*port);
	if (!port)
		return -ENOMEM;
	ret = qhca_ib_query_port(uctx, port);
	if (!ret)
		ret = uverbs_copy_to(attrs, QHCA_IB_ATTR_QUERY_PORT_ATTR, port, sizeof(*port));
	kfree(port);
	return ret;
}

DECLARE_UVERBS_NAMED_METHOD(
	QHCA_IB_METHOD_QUERY_CTX,
	UVERBS_ATTR_PTR_OUT(QHCA_IB_ATTR_QUERY_CTX_STATS,
			    UVERBS_ATTR_TYPE(struct qhca_ctx_stats),
			    UA_MANDATORY));

DECLARE_UVERBS_NAMED_METHOD(
	QHCA_IB_METHOD_QUERY_PORT,
	UVERBS_ATTR_PTR_OUT(QHCA_IB_ATTR_QUERY_PORT_ATTR,
			    UVERBS_ATTR_TYPE(struct qhca_port_attr),
			    UA_MANDATORY));

ADD_UVERBS_METHODS(qhca_ib_device,
		   UVERBS_OBJECT_DEVICE,
		   &UVERBS_METHOD(QHCA_IB_METHOD_QUERY_CTX),
		   &UVERBS_METHOD(QHCA_IB_METHOD_QUERY_PORT));

static const struct uapi_definition qhca_uapi_defs[] = {
	UAPI_DEF_CHAIN_OBJ_TREE(UVERBS_OBJECT_DEVICE, &qhca_ib_device),
	{},
};

const struct uapi_definition *qhca_shim_uapi_defs(void)
{
	return qhca_uapi_defs;
}
