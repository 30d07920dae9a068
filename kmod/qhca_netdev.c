// SPDX-License-Identifier: GPL-2.0
/*
 * qhca: the port's net_device, as far as Rust cannot reach it (netdev.rs
 * wraps each function once).
 *
 * A RoCE port is an Ethernet port: the RDMA core fills the port's GID table
 * from this interface's IP addresses, and rdma_cm resolves addresses through
 * it.  On a device with the Ethernet function (QHCA_CAP_ETH: a port on a
 * QEMU netdev) it is a real interface: it sends and receives the port's
 * frames that are not RoCEv2 (qhca_eth.c), owns ARP and ND for its
 * addresses, offloads checksums both ways and takes an MTU up to 9000.  Its
 * queues exist while it is up and the device is registered with the RDMA
 * core (qhca_shim_netdev_attach .. qhca_shim_netdev_detach).  Its carrier is
 * the port's state: read when it comes up, and again (link_work) whenever
 * the device reports that the QEMU netdev's link changed.
 *
 * Without the Ethernet function (no QEMU netdev: a port that reaches only
 * its own GIDs) it carries nothing: every frame is dropped and counted and,
 * with IFF_NOARP, every neighbour resolves at once to its own MAC, which the
 * device ignores: it routes by GID.
 */
#include <linux/etherdevice.h>
#include <linux/inetdevice.h>
#include <linux/netdevice.h>
#include <linux/rtnetlink.h>

#include "qhca_eth.h"
#include "qhca_shim.h"

static netdev_tx_t qhca_netdev_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	struct qhca_eth *e = netdev_priv(ndev);

	if (e->eth)
		return qhca_eth_xmit(skb, ndev);
	dev_core_stats_tx_dropped_inc(ndev);
	dev_kfree_skb_any(skb);
	return NETDEV_TX_OK;
}

static int qhca_netdev_open(struct net_device *ndev)
{
	struct qhca_eth *e = netdev_priv(ndev);

	if (!e->eth) {
		netif_carrier_on(ndev);
		return 0;
	}
	/* Before the RDMA core has the device: the queues come with it. */
	return e->ib ? qhca_eth_start(e) : 0;
}

static int qhca_netdev_stop(struct net_device *ndev)
{
	struct qhca_eth *e = netdev_priv(ndev);

	if (e->eth)
		qhca_eth_stop(e);
	netif_carrier_off(ndev);
	return 0;
}

/* A new MTU takes new receive buffers: the queues start again. */
static int qhca_netdev_change_mtu(struct net_device *ndev, int mtu)
{
	struct qhca_eth *e = netdev_priv(ndev);
	bool up = e->up;

	if (up)
		qhca_eth_stop(e);
	WRITE_ONCE(ndev->mtu, mtu);
	return up ? qhca_eth_start(e) : 0;
}

static void qhca_netdev_get_stats64(struct net_device *ndev,
				    struct rtnl_link_stats64 *st)
{
	struct qhca_eth *e = netdev_priv(ndev);

	if (e->eth)
		qhca_eth_get_stats64(ndev, st);
}

static const struct net_device_ops qhca_netdev_ops = {
	.ndo_open = qhca_netdev_open,
	.ndo_stop = qhca_netdev_stop,
	.ndo_start_xmit = qhca_netdev_xmit,
	.ndo_validate_addr = eth_validate_addr,
	.ndo_change_mtu = qhca_netdev_change_mtu,
	.ndo_get_stats64 = qhca_netdev_get_stats64,
};

/*
 * The port's link changed: the carrier follows what the port says now.  A
 * work item, as the event comes from the event queue's thread, which the
 * commands RTNL's holders wait for complete through: it must not wait for
 * RTNL itself.  Under RTNL the carrier changes with the queues (start, stop)
 * and never against them.
 */
static void qhca_netdev_link_work(struct work_struct *work)
{
	struct qhca_eth *e = container_of(work, struct qhca_eth, link_work);
	struct ib_port_attr port;

	rtnl_lock();
	if (e->up && e->ib && !ib_query_port(e->ib, 1, &port)) {
		if (port.state == IB_PORT_ACTIVE)
			netif_carrier_on(e->ndev);
		else
			netif_carrier_off(e->ndev);
	}
	rtnl_unlock();
}

struct net_device *qhca_shim_netdev_new(struct device *parent, const u8 *mac,
					bool eth, int *err)
{
	struct net_device *ndev;
	struct qhca_eth *e;

	if (!is_valid_ether_addr(mac)) {
		*err = -EINVAL;
		return NULL;
	}
	ndev = alloc_etherdev(sizeof(*e));
	if (!ndev) {
		*err = -ENOMEM;
		return NULL;
	}
	e = netdev_priv(ndev);
	e->ndev = ndev;
	e->eth = eth;
	INIT_WORK(&e->link_work, qhca_netdev_link_work);
	SET_NETDEV_DEV(ndev, parent);
	ndev->netdev_ops = &qhca_netdev_ops;
	if (eth) {
		qhca_eth_init(e);
		ndev->max_mtu = QHCA_ETH_MTU_MAX;
		ndev->hw_features = NETIF_F_HW_CSUM | NETIF_F_RXCSUM;
		ndev->features = ndev->hw_features;
	} else {
		ndev->flags |= IFF_NOARP;
		ndev->max_mtu = ETH_DATA_LEN;
	}
	/*
	 * It may move to another network namespace, as a ConnectX's netdev may:
	 * in the RDMA core's shared mode the ib_device stays visible in every
	 * namespace and the port's GIDs follow the netdev's addresses there.  A
	 * namespace that goes away hands it back to the initial one.
	 */
	eth_hw_addr_set(ndev, mac);
	netif_carrier_off(ndev);
	*err = register_netdev(ndev);
	if (*err) {
		free_netdev(ndev);
		return NULL;
	}
	return ndev;
}

/*
 * The device is registered with the RDMA core as @ib: the Ethernet function
 * may run, and runs if the interface is up.
 */
void qhca_shim_netdev_attach(struct net_device *ndev, struct ib_device *ib)
{
	struct qhca_eth *e = netdev_priv(ndev);

	rtnl_lock();
	e->ib = ib;
	if (e->eth && netif_running(ndev))
		qhca_eth_start(e);
	rtnl_unlock();
}

/* The device leaves the RDMA core: the Ethernet function stops for good. */
void qhca_shim_netdev_detach(struct net_device *ndev)
{
	struct qhca_eth *e = netdev_priv(ndev);

	rtnl_lock();
	if (e->eth)
		qhca_eth_stop(e);
	e->ib = NULL;
	rtnl_unlock();
	/* Outside RTNL, which it takes; queued again, it finds no device. */
	cancel_work_sync(&e->link_work);
}

/*
 * The port's link went up or down (QHCA_EQE_PORT_CHANGE): the carrier of a
 * running Ethernet function follows.  Any context, from the netdev's
 * creation until its free.
 */
void qhca_shim_netdev_link_changed(struct net_device *ndev)
{
	struct qhca_eth *e = netdev_priv(ndev);

	if (e->eth)
		schedule_work(&e->link_work);
}

void qhca_shim_netdev_free(struct net_device *ndev)
{
	struct qhca_eth *e = netdev_priv(ndev);

	cancel_work_sync(&e->link_work);
	unregister_netdev(ndev);
	free_netdev(ndev);
}

/*
 * The prefix length of IPv4 address @addr (network order) on @ndev, or 32
 * if it is not (or no longer) there.
 */
u8 qhca_shim_netdev_ipv4_prefix(struct net_device *ndev, __be32 addr)
{
	const struct in_ifaddr *ifa;
	struct in_device *in_dev;
	u8 len = 32;

	rcu_read_lock();
	in_dev = __in_dev_get_rcu(ndev);
	if (in_dev) {
		in_dev_for_each_ifa_rcu(ifa, in_dev) {
			if (ifa->ifa_local == addr) {
				len = ifa->ifa_prefixlen;
				break;
			}
		}
	}
	rcu_read_unlock();
	return len;
}
