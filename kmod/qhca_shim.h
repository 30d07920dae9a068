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

#endif /* QHCA_SHIM_H */
