/* SPDX-License-Identifier: GPL-2.0 */
/*
 * qhca: the port's Ethernet function, shared by the net_device
 * (qhca_netdev.c) and its data path (qhca_eth.c).
 */
#ifndef QHCA_ETH_H
#define QHCA_ETH_H

#include <linux/netdevice.h>
#include <linux/u64_stats_sync.h>
#include <rdma/ib_verbs.h>

#define QHCA_ETH_RX_RING        256
#define QHCA_ETH_TX_RING        256
/* wr_id of a send; a receive's is its slot. */
#define QHCA_ETH_WR_TX          (1ull << 63)
/* MTU 9000 with one VLAN tag, as the device's QHCA_ETH_FRAME_MAX. */
#define QHCA_ETH_MTU_MAX        9000

struct qhca_eth_buf {
	struct sk_buff *skb;
	u64 dma;
	u32 len;
};

struct qhca_eth_stats {
	u64_stats_t packets;
	u64_stats_t bytes;
	struct u64_stats_sync sync;
};

/*
 * The private part of the port's net_device.  @ib is set while the device
 * is registered with the RDMA core (qhca_shim_netdev_attach) and the Ethernet
 * function may run; @up while its queues exist.  Both change only under RTNL.
 */
struct qhca_eth {
	struct net_device *ndev;
	struct ib_device *ib;
	bool eth;               /* the device has the Ethernet function */
	bool up;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qp;
	struct napi_struct napi;
	u32 rx_buf_len;
	/* Sends: posted at tx_head (xmit), completed at tx_tail (NAPI). */
	unsigned int tx_head;
	unsigned int tx_tail;
	struct qhca_eth_buf rx[QHCA_ETH_RX_RING];
	struct qhca_eth_buf tx[QHCA_ETH_TX_RING];
	struct qhca_eth_stats rx_stats;   /* written by NAPI only */
	struct qhca_eth_stats tx_stats;   /* written by NAPI only */
	atomic64_t rx_refill_failed;      /* frames dropped for want of a buffer */
	atomic64_t tx_refused;            /* frames the device would refuse */
	/* The port's link changed: the carrier follows (qhca_netdev.c). */
	struct work_struct link_work;
};

void qhca_eth_init(struct qhca_eth *e);
int qhca_eth_start(struct qhca_eth *e);
void qhca_eth_stop(struct qhca_eth *e);
netdev_tx_t qhca_eth_xmit(struct sk_buff *skb, struct net_device *ndev);
void qhca_eth_get_stats64(struct net_device *ndev,
			  struct rtnl_link_stats64 *st);

#endif
