/* SPDX-License-Identifier: GPL-2.0 */
/* qhca: C shim interface; shim.rs declares the same functions for Rust. */
#ifndef QHCA_SHIM_H
#define QHCA_SHIM_H

#include <linux/types.h>

struct device;
struct ib_device;
struct ib_ucontext;
struct net_device;
struct pci_dev;
struct page;
struct qhca_odp;
struct qhca_umem;
struct rdma_user_mmap_entry;
struct vm_area_struct;
struct workqueue_struct;

struct qhca_ctx_stats;
struct qhca_port_attr;
struct uapi_definition;

/* qhca_uverbs.c: the driver's methods of the core's ioctl interface, for ib_device.driver_def. */
const struct uapi_definition *qhca_shim_uapi_defs(void);
/* ib.rs: their answers for the user context @uctx (0 or a negative errno). */
int qhca_ib_query_ctx(struct ib_ucontext *uctx, struct qhca_ctx_stats *out);
int qhca_ib_query_port(struct ib_ucontext *uctx, struct qhca_port_attr *out);

void *qhca_shim_page_address(struct page *page);

void qhca_shim_clear_master(struct pci_dev *pdev);

long qhca_shim_pinned_pages(void);
struct qhca_umem *qhca_shim_umem_pin(u64 addr, u64 len, bool writable, int *err);
int qhca_shim_umem_map(struct qhca_umem *u, struct device *dev);
unsigned long qhca_shim_umem_npages(const struct qhca_umem *u);
unsigned long qhca_shim_umem_fill(const struct qhca_umem *u, __le64 *const *pl,
				  unsigned long npl, unsigned long per);
void qhca_shim_umem_release(struct qhca_umem *u);
/* A page taken out of a umem: shim.rs's TakenPage has the same layout. */
struct qhca_umem_page {
	struct page *page;
	u64 dma;
};
int qhca_shim_umem_map_pages(struct qhca_umem *u, struct device *dev);
unsigned long qhca_shim_umem_take(struct qhca_umem *u, unsigned long first,
				  unsigned long count, struct qhca_umem_page *out);
void qhca_shim_umem_drop(struct device *dev, const struct qhca_umem_page *pages,
			 unsigned long n, bool dirty);

/* On-demand paging. */
bool qhca_rust_odp_invalidate(const void *owner, struct qhca_odp *o, u64 start, u64 end,
			      unsigned long cur_seq, bool blockable); /* Rust (odp.rs) */
bool qhca_rust_watch_invalidate(const void *owner, struct qhca_odp *o, u64 start, u64 end,
				unsigned long cur_seq, bool blockable); /* Rust (watch.rs) */
struct qhca_odp *qhca_shim_odp_new(u64 start, u64 len, const void *owner, bool watch,
				   int *err);
unsigned long qhca_shim_odp_read_begin(struct qhca_odp *o);
void qhca_shim_odp_remove(struct qhca_odp *o);
void qhca_shim_odp_free(struct qhca_odp *o);
void qhca_shim_odp_set_seq(struct qhca_odp *o, unsigned long seq);
bool qhca_shim_odp_retry(struct qhca_odp *o, unsigned long seq);
int qhca_shim_odp_fault(struct qhca_odp *o, u64 start, unsigned long npages, bool write,
			u64 *out, unsigned long *seq);
int qhca_shim_odp_dma_map(struct device *dev, u64 pfn, bool writable, u64 *dma);
void qhca_shim_odp_dma_unmap(struct device *dev, u64 dma, u64 pfn, bool dirty);
u64 qhca_shim_task_size(void);
bool qhca_shim_fatal_signal_pending(void);
struct workqueue_struct *qhca_shim_wq_new(unsigned int instance);
struct workqueue_struct *qhca_shim_wq_new_unbound(const char *name);
void qhca_shim_wq_destroy(struct workqueue_struct *wq);

/* The RDMA core's user mappings. */
int qhca_shim_rdma_mmap_io(struct ib_ucontext *ucontext, struct vm_area_struct *vma,
			   u64 phys, unsigned long len, struct rdma_user_mmap_entry *entry);

/* The port's net_device (qhca_netdev.c). */
struct net_device *qhca_shim_netdev_new(struct device *parent, const u8 *mac, bool eth, int *err);
void qhca_shim_netdev_attach(struct net_device *ndev, struct ib_device *ib);
void qhca_shim_netdev_detach(struct net_device *ndev);
void qhca_shim_netdev_link_changed(struct net_device *ndev);
void qhca_shim_netdev_free(struct net_device *ndev);
u8 qhca_shim_netdev_ipv4_prefix(struct net_device *ndev, __be32 addr);

#endif /* QHCA_SHIM_H */
