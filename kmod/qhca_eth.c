// SPDX-License-Identifier: GPL-2.0
/*
 * qhca: the Ethernet function's data path.
 *
 * The device gives the port's non-RoCE frames to one queue pair of the
 * kernel context, its Ethernet QP (uapi/include/qhca-abi.h, "The Ethernet
 * function"), which sends what it is given as it is, as a ConnectX's
 * Ethernet queues are RDMA queues underneath.  The net_device drives it as
 * a consumer of the device's own kernel verbs, as IPoIB drives an
 * ib_device: a PD, one CQ for both directions, an IB_QPT_RAW_PACKET QP,
 * posted with ib_post_send and ib_post_recv, polled by NAPI from the CQ's
 * completion handler.  Sends are linear frames of one DMA mapping each; the
 * device fills in a CHECKSUM_PARTIAL frame's checksum (IB_SEND_IP_CSUM with
 * csum_start | csum_offset << 16 as imm_data: qhca's convention for its own
 * Ethernet QP) and gives every received frame's sum for CHECKSUM_COMPLETE
 * (imm_data, IB_WC_WITH_IMM).
 *
 * Nothing the device writes is trusted: a completion naming a slot that
 * holds no buffer, or a length beyond the buffer, is dropped and counted.
 * An error completion other than a flush stops the traffic (the QP is in
 * ERR) until the interface is set down and up again.
 */
#include <linux/etherdevice.h>
#include <linux/if_vlan.h>
#include <net/checksum.h>

#include "qhca_eth.h"

static void qhca_eth_unmap(struct qhca_eth *e, struct qhca_eth_buf *b,
			   enum dma_data_direction dir)
{
	ib_dma_unmap_single(e->ib, b->dma, b->len, dir);
}

/* Puts @skb, a new buffer of rx_buf_len bytes, in receive slot @slot. */
static int qhca_eth_fill(struct qhca_eth *e, u32 slot, struct sk_buff *skb)
{
	struct qhca_eth_buf *b = &e->rx[slot];

	b->len = e->rx_buf_len;
	b->dma = ib_dma_map_single(e->ib, skb->data, b->len, DMA_FROM_DEVICE);
	if (ib_dma_mapping_error(e->ib, b->dma)) {
		dev_kfree_skb_any(skb);
		return -ENOMEM;
	}
	b->skb = skb;
	return 0;
}

/* Posts the buffer of receive slot @slot; on failure the slot is empty. */
static int qhca_eth_post_rx(struct qhca_eth *e, u32 slot)
{
	struct qhca_eth_buf *b = &e->rx[slot];
	const struct ib_recv_wr *bad;
	struct ib_recv_wr wr = {};
	struct ib_sge sge;
	int err;

	sge.addr = b->dma;
	sge.length = b->len;
	sge.lkey = e->pd->local_dma_lkey;
	wr.wr_id = slot;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	err = ib_post_recv(e->qp, &wr, &bad);
	if (err) {
		qhca_eth_unmap(e, b, DMA_FROM_DEVICE);
		dev_kfree_skb_any(b->skb);
		b->skb = NULL;
	}
	return err;
}

static void qhca_eth_rx_done(struct qhca_eth *e, const struct ib_wc *wc)
{
	struct sk_buff *skb, *fresh;
	struct qhca_eth_buf *b;
	u32 len = wc->byte_len;
	u32 slot, size;

	if (wc->wr_id >= QHCA_ETH_RX_RING || !e->rx[wc->wr_id].skb) {
		netdev_err_once(e->ndev, "completion of receive slot %llu, which holds no buffer\n",
				wc->wr_id);
		return;
	}
	slot = wc->wr_id;
	b = &e->rx[slot];
	if (wc->status != IB_WC_SUCCESS) {
		/* The QP is in ERR: the buffer stays until the queues go. */
		if (wc->status != IB_WC_WR_FLUSH_ERR)
			netdev_err_once(e->ndev, "receive completed with status %d\n",
					wc->status);
		return;
	}
	/* A new buffer first: without one the frame is dropped and its buffer posted again. */
	fresh = napi_alloc_skb(&e->napi, e->rx_buf_len);
	if (!fresh) {
		atomic64_inc(&e->rx_refill_failed);
		qhca_eth_post_rx(e, slot);
		return;
	}
	skb = b->skb;
	size = b->len;
	qhca_eth_unmap(e, b, DMA_FROM_DEVICE);
	b->skb = NULL;
	/* A slot whose buffer cannot be mapped stays empty until the queues restart. */
	if (!qhca_eth_fill(e, slot, fresh))
		qhca_eth_post_rx(e, slot);
	if (len < ETH_HLEN || len > size) {
		dev_core_stats_rx_dropped_inc(e->ndev);
		napi_consume_skb(skb, 1);
		return;
	}
	skb_put(skb, len);
	skb->protocol = eth_type_trans(skb, e->ndev);
	if ((wc->wc_flags & IB_WC_WITH_IMM) &&
	    (e->ndev->features & NETIF_F_RXCSUM)) {
		/* The device's sum is of big-endian words; the stack's of the CPU's. */
		u16 sum = (__force u32)wc->ex.imm_data & 0xffff;

		skb->ip_summed = CHECKSUM_COMPLETE;
		skb->csum = csum_unfold((__force __sum16)cpu_to_be16(sum));
	}
	u64_stats_update_begin(&e->rx_stats.sync);
	u64_stats_inc(&e->rx_stats.packets);
	u64_stats_add(&e->rx_stats.bytes, len);
	u64_stats_update_end(&e->rx_stats.sync);
	napi_gro_receive(&e->napi, skb);
}

static void qhca_eth_tx_done(struct qhca_eth *e, const struct ib_wc *wc,
			     int budget)
{
	u64 slot = wc->wr_id & ~QHCA_ETH_WR_TX;
	unsigned int tail = e->tx_tail;
	struct qhca_eth_buf *b;

	/* In SQ order: the next one posted and not yet completed, or nothing. */
	if (tail == smp_load_acquire(&e->tx_head) ||
	    slot != tail % QHCA_ETH_TX_RING ||
	    !e->tx[slot].skb) {
		netdev_err_once(e->ndev, "completion of send slot %llu out of order\n",
				slot);
		return;
	}
	b = &e->tx[slot];
	qhca_eth_unmap(e, b, DMA_TO_DEVICE);
	if (wc->status == IB_WC_SUCCESS) {
		u64_stats_update_begin(&e->tx_stats.sync);
		u64_stats_inc(&e->tx_stats.packets);
		u64_stats_add(&e->tx_stats.bytes, b->len);
		u64_stats_update_end(&e->tx_stats.sync);
	} else if (wc->status != IB_WC_WR_FLUSH_ERR) {
		netdev_err_once(e->ndev, "send completed with status %d\n",
				wc->status);
	}
	napi_consume_skb(b->skb, budget);
	b->skb = NULL;
	/* The slot is free before xmit can see the new tail. */
	smp_store_release(&e->tx_tail, tail + 1);
}

static int qhca_eth_poll(struct napi_struct *napi, int budget)
{
	struct qhca_eth *e = container_of(napi, struct qhca_eth, napi);
	struct ib_wc wc[8];
	int done = 0;

	while (done < budget) {
		int n = ib_poll_cq(e->cq, min_t(int, ARRAY_SIZE(wc), budget - done),
				   wc);
		int i;

		if (n <= 0)
			break;
		for (i = 0; i < n; i++) {
			if (wc[i].wr_id & QHCA_ETH_WR_TX)
				qhca_eth_tx_done(e, &wc[i], budget);
			else
				qhca_eth_rx_done(e, &wc[i]);
		}
		done += n;
	}
	/* Pairs with the barrier in qhca_eth_xmit after it stopped the queue. */
	smp_mb();
	if (netif_queue_stopped(e->ndev) &&
	    READ_ONCE(e->tx_head) - e->tx_tail < QHCA_ETH_TX_RING / 2)
		netif_wake_queue(e->ndev);
	if (done < budget && napi_complete_done(napi, done) &&
	    ib_req_notify_cq(e->cq, IB_CQ_NEXT_COMP |
			     IB_CQ_REPORT_MISSED_EVENTS) > 0)
		napi_schedule(napi);
	return done;
}

/* The CQ's completion handler (the event interrupt's thread). */
static void qhca_eth_comp(struct ib_cq *cq, void *ctx)
{
	struct qhca_eth *e = ctx;

	/* NAPI's softirq runs at local_bh_enable rather than from ksoftirqd. */
	local_bh_disable();
	napi_schedule(&e->napi);
	local_bh_enable();
}

netdev_tx_t qhca_eth_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	struct qhca_eth *e = netdev_priv(ndev);
	const struct ib_send_wr *bad;
	struct ib_send_wr wr = {};
	struct qhca_eth_buf *b;
	unsigned int slot;
	struct ib_sge sge;

	if (!e->up || skb_linearize(skb) || skb->len < ETH_HLEN ||
	    skb->len > QHCA_ETH_MTU_MAX + ETH_HLEN + VLAN_HLEN)
		goto drop;
	/* The device sends only from the port's MAC (a packet socket may try another). */
	if (!ether_addr_equal(((struct ethhdr *)skb->data)->h_source,
			      ndev->dev_addr)) {
		atomic64_inc(&e->tx_refused);
		goto drop;
	}
	if (skb->ip_summed == CHECKSUM_PARTIAL) {
		u32 start = skb_checksum_start_offset(skb);

		if (start >= ETH_HLEN && start <= 0xffff &&
		    start + skb->csum_offset + 2 <= skb->len) {
			wr.send_flags |= IB_SEND_IP_CSUM;
			wr.ex.imm_data = (__force __be32)(start |
							  skb->csum_offset << 16);
		} else if (skb_checksum_help(skb)) {
			goto drop;
		}
	}
	/* Acquire: pairs with qhca_eth_tx_done's release of a freed slot. */
	if (e->tx_head - smp_load_acquire(&e->tx_tail) >= QHCA_ETH_TX_RING) {
		netif_stop_queue(ndev);
		return NETDEV_TX_BUSY;
	}
	slot = e->tx_head % QHCA_ETH_TX_RING;
	b = &e->tx[slot];
	b->len = skb->len;
	b->dma = ib_dma_map_single(e->ib, skb->data, b->len, DMA_TO_DEVICE);
	if (ib_dma_mapping_error(e->ib, b->dma))
		goto drop;
	b->skb = skb;
	sge.addr = b->dma;
	sge.length = b->len;
	sge.lkey = e->pd->local_dma_lkey;
	wr.wr_id = QHCA_ETH_WR_TX | slot;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IB_WR_SEND;
	wr.send_flags |= IB_SEND_SIGNALED;
	skb_tx_timestamp(skb);
	/*
	 * The slot is published before the post: the device may complete the
	 * frame, and NAPI see it on another CPU, before ib_post_send returns.
	 */
	smp_store_release(&e->tx_head, e->tx_head + 1);
	if (ib_post_send(e->qp, &wr, &bad)) {
		/* Nothing was posted, so nothing completes in the slot. */
		smp_store_release(&e->tx_head, e->tx_head - 1);
		qhca_eth_unmap(e, b, DMA_TO_DEVICE);
		b->skb = NULL;
		goto drop;
	}
	/* Acquire: as above. */
	if (e->tx_head - smp_load_acquire(&e->tx_tail) >= QHCA_ETH_TX_RING) {
		netif_stop_queue(ndev);
		/* Pairs with the barrier in qhca_eth_poll: a slot freed since is seen. */
		smp_mb();
		if (e->tx_head - READ_ONCE(e->tx_tail) < QHCA_ETH_TX_RING)
			netif_start_queue(ndev);
	}
	return NETDEV_TX_OK;

drop:
	dev_core_stats_tx_dropped_inc(ndev);
	dev_kfree_skb_any(skb);
	return NETDEV_TX_OK;
}

/* What qhca_eth_start made, in reverse; the device no longer touches a buffer. */
static void qhca_eth_teardown(struct qhca_eth *e)
{
	unsigned int i;

	/*
	 * Once the QP is destroyed the device reads and writes none of its
	 * buffers (the driver stops the device if the command fails).
	 */
	if (e->qp)
		ib_destroy_qp(e->qp);
	e->qp = NULL;
	for (i = 0; i < QHCA_ETH_RX_RING; i++) {
		if (e->rx[i].skb) {
			qhca_eth_unmap(e, &e->rx[i], DMA_FROM_DEVICE);
			dev_kfree_skb_any(e->rx[i].skb);
			e->rx[i].skb = NULL;
		}
	}
	for (i = 0; i < QHCA_ETH_TX_RING; i++) {
		if (e->tx[i].skb) {
			qhca_eth_unmap(e, &e->tx[i], DMA_TO_DEVICE);
			dev_kfree_skb_any(e->tx[i].skb);
			e->tx[i].skb = NULL;
		}
	}
	if (e->cq)
		ib_destroy_cq(e->cq);
	e->cq = NULL;
	if (e->pd)
		ib_dealloc_pd(e->pd);
	e->pd = NULL;
}

/*
 * Creates the Ethernet QP and its CQ, fills the receive ring and starts the
 * queue.  Under RTNL, with @e->ib registered.
 */
int qhca_eth_start(struct qhca_eth *e)
{
	struct ib_cq_init_attr cq_attr = {
		.cqe = QHCA_ETH_RX_RING + QHCA_ETH_TX_RING,
	};
	struct ib_qp_init_attr init = {};
	struct ib_port_attr port = {};
	struct ib_qp_attr attr = {};
	unsigned int i;
	int err;

	if (e->up)
		return 0;
	e->rx_buf_len = e->ndev->mtu + ETH_HLEN + VLAN_HLEN;
	e->tx_head = 0;
	e->tx_tail = 0;
	e->pd = ib_alloc_pd(e->ib, 0);
	if (IS_ERR(e->pd)) {
		err = PTR_ERR(e->pd);
		e->pd = NULL;
		goto fail;
	}
	e->cq = ib_create_cq(e->ib, qhca_eth_comp, NULL, e, &cq_attr);
	if (IS_ERR(e->cq)) {
		err = PTR_ERR(e->cq);
		e->cq = NULL;
		goto fail;
	}
	init.send_cq = e->cq;
	init.recv_cq = e->cq;
	init.cap.max_send_wr = QHCA_ETH_TX_RING;
	init.cap.max_recv_wr = QHCA_ETH_RX_RING;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	init.sq_sig_type = IB_SIGNAL_ALL_WR;
	init.qp_type = IB_QPT_RAW_PACKET;
	init.port_num = 1;
	e->qp = ib_create_qp(e->pd, &init);
	if (IS_ERR(e->qp)) {
		err = PTR_ERR(e->qp);
		e->qp = NULL;
		goto fail;
	}
	attr.qp_state = IB_QPS_INIT;
	attr.port_num = 1;
	err = ib_modify_qp(e->qp, &attr, IB_QP_STATE | IB_QP_PORT);
	for (i = 0; !err && i < QHCA_ETH_RX_RING; i++) {
		struct sk_buff *skb = netdev_alloc_skb_ip_align(e->ndev,
								 e->rx_buf_len);

		err = skb ? qhca_eth_fill(e, i, skb) : -ENOMEM;
		if (!err)
			err = qhca_eth_post_rx(e, i);
	}
	if (!err) {
		attr.qp_state = IB_QPS_RTR;
		err = ib_modify_qp(e->qp, &attr, IB_QP_STATE);
	}
	if (!err) {
		attr.qp_state = IB_QPS_RTS;
		err = ib_modify_qp(e->qp, &attr, IB_QP_STATE);
	}
	if (err)
		goto fail;
	e->up = true;
	napi_enable(&e->napi);
	ib_req_notify_cq(e->cq, IB_CQ_NEXT_COMP);
	/* Frames that completed before the CQ was armed. */
	local_bh_disable();
	napi_schedule(&e->napi);
	local_bh_enable();
	if (!ib_query_port(e->ib, 1, &port) && port.state == IB_PORT_ACTIVE)
		netif_carrier_on(e->ndev);
	netif_start_queue(e->ndev);
	return 0;

fail:
	netdev_err(e->ndev, "cannot start the Ethernet function: %d\n", err);
	qhca_eth_teardown(e);
	return err;
}

/* Stops the queue and takes the QP, its CQ and every buffer away.  Under RTNL. */
void qhca_eth_stop(struct qhca_eth *e)
{
	if (!e->up)
		return;
	netif_tx_disable(e->ndev);
	netif_carrier_off(e->ndev);
	napi_disable(&e->napi);
	e->up = false;
	qhca_eth_teardown(e);
}

void qhca_eth_init(struct qhca_eth *e)
{
	u64_stats_init(&e->rx_stats.sync);
	u64_stats_init(&e->tx_stats.sync);
	netif_napi_add(e->ndev, &e->napi, qhca_eth_poll);
}

void qhca_eth_get_stats64(struct net_device *ndev,
			  struct rtnl_link_stats64 *st)
{
	struct qhca_eth *e = netdev_priv(ndev);
	unsigned int start;

	do {
		start = u64_stats_fetch_begin(&e->rx_stats.sync);
		st->rx_packets = u64_stats_read(&e->rx_stats.packets);
		st->rx_bytes = u64_stats_read(&e->rx_stats.bytes);
	} while (u64_stats_fetch_retry(&e->rx_stats.sync, start));
	do {
		start = u64_stats_fetch_begin(&e->tx_stats.sync);
		st->tx_packets = u64_stats_read(&e->tx_stats.packets);
		st->tx_bytes = u64_stats_read(&e->tx_stats.bytes);
	} while (u64_stats_fetch_retry(&e->tx_stats.sync, start));
	st->rx_missed_errors = atomic64_read(&e->rx_refill_failed);
	st->tx_errors = atomic64_read(&e->tx_refused);
}
