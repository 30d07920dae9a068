// SPDX-License-Identifier: GPL-2.0
/*
 * qhca: the port's net_device, as far as Rust cannot reach it (netdev.rs
 * wraps each function once).
 *
 * The device has no Ethernet function yet (its port carries only RoCEv2,
 * inside QEMU): this netdev gives the port what the RDMA core needs of a
 * RoCE port, a Linux interface whose MAC is the port's and whose IP
 * addresses the core turns into GIDs.  It sends nothing (every frame is
 * dropped and counted) and, with IFF_NOARP, resolves every neighbour to its
 * own MAC, which the device ignores: it routes by GID.
 */
#include <linux/etherdevice.h>
#include <linux/inetdevice.h>
#include <linux/netdevice.h>
#include <linux/rtnetlink.h>

#include "qhca_shim.h"

static netdev_tx_t qhca_netdev_xmit(struct sk_buff *skb, struct net_device *ndev)
{
	dev_core_stats_tx_dropped_inc(ndev);
	dev_kfree_skb_any(skb);
	return NETDEV_TX_OK;
}

static int qhca_netdev_open(struct net_device *ndev)
{
	netif_carrier_on(ndev);
	return 0;
}

static int qhca_netdev_stop(struct net_device *ndev)
{
	netif_carrier_off(ndev);
	return 0;
}

static const struct net_device_ops qhca_netdev_ops = {
	.ndo_open = qhca_netdev_open,
	.ndo_stop = qhca_netdev_stop,
	.ndo_start_xmit = qhca_netdev_xmit,
	.ndo_validate_addr = eth_validate_addr,
};

struct net_device *qhca_shim_netdev_new(struct device *parent, const u8 *mac, int *err)
{
	struct net_device *ndev;

	if (!is_valid_ether_addr(mac)) {
		*err = -EINVAL;
		return NULL;
	}
	ndev = alloc_etherdev(0);
	if (!ndev) {
		*err = -ENOMEM;
		return NULL;
	}
	SET_NETDEV_DEV(ndev, parent);
	ndev->netdev_ops = &qhca_netdev_ops;
	ndev->flags |= IFF_NOARP;
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

void qhca_shim_netdev_free(struct net_device *ndev)
{
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
