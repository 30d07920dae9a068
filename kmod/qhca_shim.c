// SPDX-License-Identifier: GPL-2.0
/*
 * qhca: the few kernel interfaces the Rust crate cannot reach safely yet.
 * Each function is wrapped exactly once, in shim.rs, behind a safe API.
 */
#include <linux/mm.h>
#include <linux/fs.h>

#include "qhca_shim.h"

/*
 * Map one page of device memory (a doorbell page in BAR2) into a new user vma.
 * The caller has validated the vma's offset, length and flags.  Doorbells are
 * posted writes that must reach the device in order and must not be merged
 * with stores to another page, so the mapping is uncached (UC-), like mlx5's
 * non-BlueFlame UAR pages.
 */
int qhca_shim_map_io_page(struct vm_area_struct *vma, phys_addr_t phys)
{
	vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
	vm_flags_set(vma, VM_IO | VM_PFNMAP | VM_DONTCOPY | VM_DONTEXPAND | VM_DONTDUMP);
	return vm_iomap_memory(vma, phys, PAGE_SIZE);
}

/* The vma's offset into the file, in pages. */
unsigned long qhca_shim_vma_pgoff(const struct vm_area_struct *vma)
{
	return vma->vm_pgoff;
}

/*
 * Remove every user mapping of the file's address space.  For a character
 * device that is the inode's mapping, shared by every file opened through the
 * same inode, which is what unbind wants: no process may keep a doorbell of a
 * device that is gone.  Later faults on the zapped VM_PFNMAP vma get SIGBUS.
 */
void qhca_shim_zap_file(struct file *filp)
{
	unmap_mapping_range(filp->f_mapping, 0, 0, 1);
}
