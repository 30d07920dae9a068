/* SPDX-License-Identifier: GPL-2.0 */
/* qhca: C shim interface; shim.rs declares the same functions for Rust. */
#ifndef QHCA_SHIM_H
#define QHCA_SHIM_H

#include <linux/types.h>

struct vm_area_struct;
struct file;

int qhca_shim_map_io_page(struct vm_area_struct *vma, phys_addr_t phys);
unsigned long qhca_shim_vma_pgoff(const struct vm_area_struct *vma);
void qhca_shim_zap_file(struct file *filp);

struct device;
struct qhca_umem;
struct eventfd_ctx;

void qhca_shim_debugfs_get(void);
void qhca_shim_debugfs_put(void);
struct qhca_umem *qhca_shim_umem_get(struct device *dev, u64 addr, u64 len,
				     bool writable, int *err);
unsigned long qhca_shim_umem_npages(const struct qhca_umem *u);
unsigned long qhca_shim_umem_page_list(const struct qhca_umem *u, __le64 *out,
				       unsigned long n);
void qhca_shim_umem_release(struct qhca_umem *u);

struct eventfd_ctx *qhca_shim_eventfd_get(int fd, int *err);
void qhca_shim_eventfd_signal(struct eventfd_ctx *ctx);
void qhca_shim_eventfd_put(struct eventfd_ctx *ctx);

#endif /* QHCA_SHIM_H */
