/* SPDX-License-Identifier: GPL-2.0 */
/* qhca: C shim interface; shim.rs declares the same functions for Rust. */
#ifndef QHCA_SHIM_H
#define QHCA_SHIM_H

#include <linux/types.h>

struct device;
struct eventfd_ctx;
struct file;
struct inode;
struct pci_dev;
struct poll_table_struct;
struct qhca_umap;
struct qhca_umem;
struct vm_area_struct;

struct qhca_umap *qhca_shim_umap_new(void);
void qhca_shim_umap_free(struct qhca_umap *m);
void qhca_shim_umap_set_phys(struct qhca_umap *m, phys_addr_t phys);
void qhca_shim_umap_revoke(struct qhca_umap *m);
void qhca_shim_umap_mmap(struct qhca_umap *m, struct vm_area_struct *vma);
unsigned long qhca_shim_vma_pgoff(const struct vm_area_struct *vma);

struct inode *qhca_shim_inode_get(struct file *filp);
void qhca_shim_inode_put(struct inode *inode);
void qhca_shim_inode_zap(struct inode *inode);

/* Implemented in Rust (file.rs). */
__poll_t qhca_rust_poll(struct file *filp, struct poll_table_struct *wait);
void qhca_shim_file_add_poll(struct file *filp);

void qhca_shim_clear_master(struct pci_dev *pdev);

long qhca_shim_pinned_pages(void);
struct qhca_umem *qhca_shim_umem_pin(u64 addr, u64 len, bool writable, int *err);
int qhca_shim_umem_map(struct qhca_umem *u, struct device *dev);
unsigned long qhca_shim_umem_npages(const struct qhca_umem *u);
unsigned long qhca_shim_umem_fill(const struct qhca_umem *u, __le64 *const *pl,
				  unsigned long npl, unsigned long per);
void qhca_shim_umem_release(struct qhca_umem *u);

struct eventfd_ctx *qhca_shim_eventfd_get(int fd, int *err);
void qhca_shim_eventfd_signal(struct eventfd_ctx *ctx);
void qhca_shim_eventfd_put(struct eventfd_ctx *ctx);

#endif /* QHCA_SHIM_H */
