// SPDX-License-Identifier: GPL-2.0
/*
 * qhca: the few kernel interfaces the Rust crate cannot reach safely yet.
 * Each function is wrapped exactly once, in shim.rs, behind a safe API.
 */
#include <linux/debugfs.h>
#include <linux/dma-mapping.h>
#include <linux/eventfd.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/scatterlist.h>
#include <linux/seq_file.h>
#include <linux/slab.h>

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

/*
 * Pinned user memory: pages pinned FOLL_LONGTERM for the life of a verbs
 * object (a ring or a memory region), accounted to the owning mm's
 * pinned_vm against RLIMIT_MEMLOCK, and DMA-mapped for the device.
 */
struct qhca_umem {
	struct device *dev;
	struct mm_struct *mm;	/* mmgrab'ed: accounting outlives the process */
	struct page **pages;
	unsigned long npages;
	struct sg_table sgt;
	bool writable;
	bool mapped;
};

static atomic_long_t qhca_pinned_pages = ATOMIC_LONG_INIT(0);

static void qhca_umem_unpin(struct qhca_umem *u, unsigned long pinned)
{
	unpin_user_pages_dirty_lock(u->pages, pinned, u->writable);
	atomic_long_sub(pinned, &qhca_pinned_pages);
}

struct qhca_umem *qhca_shim_umem_get(struct device *dev, u64 addr, u64 len,
				     bool writable, int *err)
{
	unsigned int gup_flags = FOLL_LONGTERM | (writable ? FOLL_WRITE : 0);
	unsigned long first, last, npages, pinned = 0, limit;
	struct qhca_umem *u;
	int ret;

	*err = -EINVAL;
	if (!len || addr + len < addr || !current->mm)
		return NULL;
	first = addr >> PAGE_SHIFT;
	last = (addr + len - 1) >> PAGE_SHIFT;
	npages = last - first + 1;
	if (npages > UINT_MAX / 2)
		return NULL;
	*err = -EPERM;
	if (!can_do_mlock())
		return NULL;

	*err = -ENOMEM;
	u = kzalloc(sizeof(*u), GFP_KERNEL);
	if (!u)
		return NULL;
	u->pages = kvcalloc(npages, sizeof(*u->pages), GFP_KERNEL);
	if (!u->pages)
		goto free_u;
	u->dev = dev;
	u->npages = npages;
	u->writable = writable;
	u->mm = current->mm;
	mmgrab(u->mm);

	limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	if (atomic64_add_return(npages, &u->mm->pinned_vm) > limit &&
	    !capable(CAP_IPC_LOCK)) {
		ret = -ENOMEM;
		goto unaccount;
	}

	while (pinned < npages) {
		long n = pin_user_pages_fast((first + pinned) << PAGE_SHIFT,
					     min_t(unsigned long, npages - pinned, 512),
					     gup_flags, u->pages + pinned);
		if (n <= 0) {
			ret = n ? n : -EFAULT;
			goto unpin;
		}
		pinned += n;
		atomic_long_add(n, &qhca_pinned_pages);
		cond_resched();
	}

	ret = sg_alloc_table_from_pages(&u->sgt, u->pages, npages, 0,
					npages << PAGE_SHIFT, GFP_KERNEL);
	if (ret)
		goto unpin;
	ret = dma_map_sgtable(dev, &u->sgt, DMA_BIDIRECTIONAL, 0);
	if (ret)
		goto free_sgt;
	u->mapped = true;
	*err = 0;
	return u;

free_sgt:
	sg_free_table(&u->sgt);
unpin:
	qhca_umem_unpin(u, pinned);
unaccount:
	atomic64_sub(npages, &u->mm->pinned_vm);
	mmdrop(u->mm);
	kvfree(u->pages);
free_u:
	kfree(u);
	*err = ret;
	return NULL;
}

unsigned long qhca_shim_umem_npages(const struct qhca_umem *u)
{
	return u->npages;
}

/*
 * Writes the DMA address of every 4 KiB page of the region, in order, as
 * little-endian u64, into out[0..n).  Returns the number written.
 */
unsigned long qhca_shim_umem_page_list(const struct qhca_umem *u, __le64 *out,
				       unsigned long n)
{
	struct scatterlist *sg;
	unsigned long k = 0;
	unsigned int i;

	BUILD_BUG_ON(PAGE_SIZE != 4096);
	for_each_sgtable_dma_sg(&u->sgt, sg, i) {
		dma_addr_t a = sg_dma_address(sg);
		unsigned int off;

		for (off = 0; off < sg_dma_len(sg) && k < n; off += PAGE_SIZE)
			out[k++] = cpu_to_le64(a + off);
	}
	return k;
}

void qhca_shim_umem_release(struct qhca_umem *u)
{
	if (u->mapped)
		dma_unmap_sgtable(u->dev, &u->sgt, DMA_BIDIRECTIONAL, 0);
	sg_free_table(&u->sgt);
	qhca_umem_unpin(u, u->npages);
	atomic64_sub(u->npages, &u->mm->pinned_vm);
	mmdrop(u->mm);
	kvfree(u->pages);
	kfree(u);
}

/* eventfds given by user space for completion notification. */
struct eventfd_ctx *qhca_shim_eventfd_get(int fd, int *err)
{
	struct eventfd_ctx *ctx = eventfd_ctx_fdget(fd);

	if (IS_ERR(ctx)) {
		*err = PTR_ERR(ctx);
		return NULL;
	}
	*err = 0;
	return ctx;
}

void qhca_shim_eventfd_signal(struct eventfd_ctx *ctx)
{
	eventfd_signal(ctx);
}

void qhca_shim_eventfd_put(struct eventfd_ctx *ctx)
{
	eventfd_ctx_put(ctx);
}

/*
 * debugfs: /sys/kernel/debug/qhca/pinned_pages, the pages pinned by all qhca
 * contexts right now.  Created with the first bound device, removed with the
 * last.
 */
static struct dentry *qhca_debugfs;
static unsigned int qhca_debugfs_users;
static DEFINE_MUTEX(qhca_debugfs_lock);

static int qhca_pinned_show(struct seq_file *m, void *v)
{
	seq_printf(m, "%ld\n", atomic_long_read(&qhca_pinned_pages));
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(qhca_pinned);

void qhca_shim_debugfs_get(void)
{
	mutex_lock(&qhca_debugfs_lock);
	if (!qhca_debugfs_users++) {
		qhca_debugfs = debugfs_create_dir("qhca", NULL);
		debugfs_create_file("pinned_pages", 0444, qhca_debugfs, NULL,
				    &qhca_pinned_fops);
	}
	mutex_unlock(&qhca_debugfs_lock);
}

void qhca_shim_debugfs_put(void)
{
	mutex_lock(&qhca_debugfs_lock);
	if (!--qhca_debugfs_users) {
		debugfs_remove_recursive(qhca_debugfs);
		qhca_debugfs = NULL;
	}
	mutex_unlock(&qhca_debugfs_lock);
}
