// SPDX-License-Identifier: GPL-2.0
/*
 * qhca: the few kernel interfaces the Rust crate cannot reach safely yet.
 * Each function is wrapped exactly once, in shim.rs, behind a safe API.
 */
#include <linux/dma-mapping.h>
#include <linux/fs.h>
#include <linux/hmm.h>
#include <linux/jiffies.h>
#include <linux/mmu_notifier.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/workqueue.h>
#include <rdma/ib_verbs.h>

#include "qhca_shim.h"

/* The kernel address of a page the driver allocated (never highmem here). */
void *qhca_shim_page_address(struct page *page)
{
	return page_address(page);
}

/* ------------------------------------------------------------------------ */
/* PCI                                                                      */
/* ------------------------------------------------------------------------ */

void qhca_shim_clear_master(struct pci_dev *pdev)
{
	pci_clear_master(pdev);
}

/* ------------------------------------------------------------------------ */
/* Pinned user memory                                                       */
/* ------------------------------------------------------------------------ */

/*
 * Pages pinned FOLL_LONGTERM for the life of a verbs object (a ring or a
 * memory region), accounted to the owning mm's pinned_vm against
 * RLIMIT_MEMLOCK.  Pinning (which may fault user memory in, and so may take
 * as long as user space wants) is separate from DMA-mapping them for the
 * device, which the driver does under its bound-device lock.
 */
struct qhca_umem {
	struct device *dev;	/* get_device'd once mapped */
	struct mm_struct *mm;	/* mmgrab'ed: accounting outlives the process */
	struct page **pages;	/* NULL where a page was taken out */
	unsigned long npages;
	unsigned long taken;	/* pages taken out (qhca_shim_umem_take) */
	struct sg_table sgt;	/* mapped as a whole (qhca_shim_umem_map) */
	dma_addr_t *dma;	/* or page by page (qhca_shim_umem_map_pages) */
	bool writable;
	bool mapped;
};

static atomic_long_t qhca_pinned_pages = ATOMIC_LONG_INIT(0);

/*
 * The direction of a mapping for the device: both ways only where the device
 * may write (a writable region, or page); else to the device only, so that
 * an IOMMU refuses a device write to a page the process may only read.
 */
static enum dma_data_direction qhca_dir(bool writable)
{
	return writable ? DMA_BIDIRECTIONAL : DMA_TO_DEVICE;
}

long qhca_shim_pinned_pages(void)
{
	return atomic_long_read(&qhca_pinned_pages);
}

static void qhca_umem_unpin(struct qhca_umem *u, unsigned long pinned)
{
	unpin_user_pages_dirty_lock(u->pages, pinned, u->writable);
	atomic_long_sub(pinned, &qhca_pinned_pages);
}

/*
 * Pins [addr, addr + len) of the current process.  Everything that can be
 * checked without touching memory is checked first: the range, the caller's
 * right to lock memory and RLIMIT_MEMLOCK (charged before the page array is
 * allocated), then the pages are pinned.
 */
struct qhca_umem *qhca_shim_umem_pin(u64 addr, u64 len, bool writable, int *err)
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
	ret = -ENOMEM;
	u->pages = kvcalloc(npages, sizeof(*u->pages), GFP_KERNEL);
	if (!u->pages)
		goto unaccount;

	while (pinned < npages) {
		long n;

		/* A region of millions of pages takes a while: let a kill end it. */
		if (fatal_signal_pending(current)) {
			ret = -EINTR;
			goto unpin;
		}
		n = pin_user_pages_fast((first + pinned) << PAGE_SHIFT,
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
	*err = 0;
	return u;

unpin:
	qhca_umem_unpin(u, pinned);
	kvfree(u->pages);
unaccount:
	atomic64_sub(npages, &u->mm->pinned_vm);
	mmdrop(u->mm);
	kfree(u);
	*err = ret;
	return NULL;
}

/* DMA-maps the pinned pages for @dev, a bound device.  Once only. */
int qhca_shim_umem_map(struct qhca_umem *u, struct device *dev)
{
	int ret;

	if (u->mapped)
		return -EINVAL;
	ret = sg_alloc_table_from_pages(&u->sgt, u->pages, u->npages, 0,
					u->npages << PAGE_SHIFT, GFP_KERNEL);
	if (ret)
		return ret;
	ret = dma_map_sgtable(dev, &u->sgt, qhca_dir(u->writable), 0);
	if (ret) {
		sg_free_table(&u->sgt);
		return ret;
	}
	u->dev = get_device(dev);
	u->mapped = true;
	return 0;
}

/*
 * DMA-maps the pinned pages for @dev one by one, so that pages can later be
 * taken out on their own.  Once only, instead of qhca_shim_umem_map().
 */
int qhca_shim_umem_map_pages(struct qhca_umem *u, struct device *dev)
{
	unsigned long i;

	if (u->mapped)
		return -EINVAL;
	u->dma = kvcalloc(u->npages, sizeof(*u->dma), GFP_KERNEL);
	if (!u->dma)
		return -ENOMEM;
	for (i = 0; i < u->npages; i++) {
		u->dma[i] = dma_map_page(dev, u->pages[i], 0, PAGE_SIZE, qhca_dir(u->writable));
		if (dma_mapping_error(dev, u->dma[i])) {
			while (i--)
				dma_unmap_page(dev, u->dma[i], PAGE_SIZE, qhca_dir(u->writable));
			kvfree(u->dma);
			u->dma = NULL;
			return -ENOMEM;
		}
	}
	u->dev = get_device(dev);
	u->mapped = true;
	return 0;
}

/*
 * Takes pages [first, first + count) of a umem mapped page by page out of it,
 * those still in it, into @out (room for @count): from now on they are the
 * caller's to hand to qhca_shim_umem_drop(), and no longer counted as pinned
 * nor charged to the process.  Bookkeeping only: no lock, no allocation, so
 * it may run inside an invalidation.  Returns how many it took.
 */
unsigned long qhca_shim_umem_take(struct qhca_umem *u, unsigned long first,
				  unsigned long count, struct qhca_umem_page *out)
{
	unsigned long i, n = 0;

	if (!u->dma || first >= u->npages)
		return 0;
	count = min(count, u->npages - first);
	for (i = first; i < first + count; i++) {
		if (!u->pages[i])
			continue;
		out[n].page = u->pages[i];
		out[n].dma = u->dma[i];
		u->pages[i] = NULL;
		n++;
	}
	u->taken += n;
	atomic_long_sub(n, &qhca_pinned_pages);
	atomic64_sub(n, &u->mm->pinned_vm);
	return n;
}

/*
 * Unmaps (for @dev, which they were mapped for) and unpins pages taken out of
 * a umem.  @dirty is the umem's writable (the direction they were mapped
 * with); locks each page if set: not from an invalidation.
 */
void qhca_shim_umem_drop(struct device *dev, const struct qhca_umem_page *pages,
			 unsigned long n, bool dirty)
{
	unsigned long i;

	for (i = 0; i < n; i++) {
		struct page *page = pages[i].page;

		dma_unmap_page(dev, pages[i].dma, PAGE_SIZE, qhca_dir(dirty));
		unpin_user_pages_dirty_lock(&page, 1, dirty);
	}
}

unsigned long qhca_shim_umem_npages(const struct qhca_umem *u)
{
	return u->npages;
}

/*
 * Writes the DMA address of every 4 KiB page of a mapped region, in order,
 * as little-endian u64: entry k goes to pl[k / per][k % per].  @pl holds
 * @npl arrays, each of @per entries except the last, which holds the
 * remainder (the caller sized them from npages).  Returns the number
 * written.
 */
unsigned long qhca_shim_umem_fill(const struct qhca_umem *u, __le64 *const *pl,
				  unsigned long npl, unsigned long per)
{
	unsigned long k = 0, cap = npl * per;
	struct scatterlist *sg;
	unsigned int i;

	BUILD_BUG_ON(PAGE_SIZE != 4096);
	if (!u->mapped || !per)
		return 0;
	if (cap > u->npages)
		cap = u->npages;
	if (u->dma) {
		for (k = 0; k < cap; k++)
			pl[k / per][k % per] = cpu_to_le64(u->dma[k]);
		return k;
	}
	for_each_sgtable_dma_sg(&u->sgt, sg, i) {
		dma_addr_t a = sg_dma_address(sg);
		unsigned int off;

		for (off = 0; off < sg_dma_len(sg) && k < cap; off += PAGE_SIZE, k++)
			pl[k / per][k % per] = cpu_to_le64(a + off);
	}
	return k;
}

void qhca_shim_umem_release(struct qhca_umem *u)
{
	unsigned long i;

	if (u->mapped && u->dma) {
		for (i = 0; i < u->npages; i++) {
			if (!u->pages[i])
				continue;
			dma_unmap_page(u->dev, u->dma[i], PAGE_SIZE, qhca_dir(u->writable));
			unpin_user_pages_dirty_lock(&u->pages[i], 1, u->writable);
		}
		kvfree(u->dma);
		put_device(u->dev);
		atomic_long_sub(u->npages - u->taken, &qhca_pinned_pages);
		atomic64_sub(u->npages - u->taken, &u->mm->pinned_vm);
		mmdrop(u->mm);
		kvfree(u->pages);
		kfree(u);
		return;
	}
	if (u->mapped) {
		dma_unmap_sgtable(u->dev, &u->sgt, qhca_dir(u->writable), 0);
		sg_free_table(&u->sgt);
		put_device(u->dev);
	}
	qhca_umem_unpin(u, u->npages);
	atomic64_sub(u->npages, &u->mm->pinned_vm);
	mmdrop(u->mm);
	kvfree(u->pages);
	kfree(u);
}

/* ------------------------------------------------------------------------ */
/* On-demand paging: an mmu interval notifier over a region, HMM faults,    */
/* and DMA mappings of the pages HMM found.                                 */
/* ------------------------------------------------------------------------ */

/*
 * One ODP region's view of its process's address space.  @mm is mmgrab'ed
 * for the life of the struct (not only while the notifier is inserted), so
 * that mmu_interval_read_begin() and mmget_not_zero() stay valid whatever
 * the process does.  @owner is the Rust region handed to every invalidation;
 * the Rust side removes the notifier before the region is freed.
 */
struct qhca_odp {
	struct mmu_interval_notifier mni;
	struct mm_struct *mm;
	const void *owner;
	struct mutex remove_lock;	/* serialises removals; no invalidation takes it */
	bool inserted;			/* under remove_lock */
};

static bool qhca_odp_invalidate(struct mmu_interval_notifier *mni,
				const struct mmu_notifier_range *range,
				unsigned long cur_seq)
{
	struct qhca_odp *o = container_of(mni, struct qhca_odp, mni);

	return qhca_rust_odp_invalidate(o->owner, o, range->start, range->end, cur_seq,
					mmu_notifier_range_blockable(range));
}

static const struct mmu_interval_notifier_ops qhca_odp_ops = {
	.invalidate = qhca_odp_invalidate,
};

/* The same notifier over a watched pinned region (watch.rs). */
static bool qhca_watch_invalidate(struct mmu_interval_notifier *mni,
				  const struct mmu_notifier_range *range,
				  unsigned long cur_seq)
{
	struct qhca_odp *o = container_of(mni, struct qhca_odp, mni);

	return qhca_rust_watch_invalidate(o->owner, o, range->start, range->end, cur_seq,
					  mmu_notifier_range_blockable(range));
}

static const struct mmu_interval_notifier_ops qhca_watch_ops = {
	.invalidate = qhca_watch_invalidate,
};

/*
 * Watches [start, start + len) of the calling process's address space (len 0:
 * all of it, [0, TASK_SIZE)).  From the moment this returns, every change of
 * those page tables first calls qhca_rust_odp_invalidate(@owner, ...), or
 * qhca_rust_watch_invalidate() if @watch.
 */
struct qhca_odp *qhca_shim_odp_new(u64 start, u64 len, const void *owner, bool watch,
				   int *err)
{
	struct qhca_odp *o;
	int ret;

	*err = -EINVAL;
	if (!current->mm)
		return NULL;
	if (!len) {
		start = 0;
		len = TASK_SIZE;
	}
	if (start + len < start || start + len > TASK_SIZE)
		return NULL;
	*err = -ENOMEM;
	o = kzalloc(sizeof(*o), GFP_KERNEL);
	if (!o)
		return NULL;
	o->mm = current->mm;
	mmgrab(o->mm);
	o->owner = owner;
	mutex_init(&o->remove_lock);
	ret = mmu_interval_notifier_insert(&o->mni, o->mm, start, len,
					   watch ? &qhca_watch_ops : &qhca_odp_ops);
	if (ret) {
		mmdrop(o->mm);
		kfree(o);
		*err = ret;
		return NULL;
	}
	o->inserted = true;
	*err = 0;
	return o;
}

/*
 * No invalidation runs or will run once this returns, whoever else calls it
 * at the same time (a second caller waits for the first's removal).  Sleeps
 * until those in progress end, so the caller holds no lock an invalidation
 * takes.
 */
void qhca_shim_odp_remove(struct qhca_odp *o)
{
	mutex_lock(&o->remove_lock);
	if (o->inserted) {
		mmu_interval_notifier_remove(&o->mni);
		o->inserted = false;
	}
	mutex_unlock(&o->remove_lock);
}

void qhca_shim_odp_free(struct qhca_odp *o)
{
	qhca_shim_odp_remove(o);
	mmdrop(o->mm);
	kfree(o);
}

/* From an invalidation, under the lock qhca_shim_odp_retry()'s callers hold. */
void qhca_shim_odp_set_seq(struct qhca_odp *o, unsigned long seq)
{
	mmu_interval_set_seq(&o->mni, seq);
}

/*
 * The sequence to check with qhca_shim_odp_retry() once the pages of the range
 * are pinned; waits for an invalidation in progress to end.
 */
unsigned long qhca_shim_odp_read_begin(struct qhca_odp *o)
{
	return mmu_interval_read_begin(&o->mni);
}

/* True if an invalidation began since the fault that returned @seq. */
bool qhca_shim_odp_retry(struct qhca_odp *o, unsigned long seq)
{
	return mmu_interval_read_retry(&o->mni, seq);
}

/*
 * Faults the @npages pages at @start of the region's process in (writable if
 * @write) and reports each as pfn << 1 | writable in @out.  They stay what
 * they are until an invalidation begins: the caller takes the lock that its
 * invalidations take, and uses them only if qhca_shim_odp_retry(@seq) is
 * false under it.  -ESRCH if the process is exiting, -EFAULT for an address
 * that is not mapped (or not as needed), -EBUSY if invalidations kept
 * interrupting it for a second.
 */
int qhca_shim_odp_fault(struct qhca_odp *o, u64 start, unsigned long npages, bool write,
			u64 *out, unsigned long *seq)
{
	unsigned long timeout = jiffies + msecs_to_jiffies(HMM_RANGE_DEFAULT_TIMEOUT);
	struct hmm_range range = {
		.notifier = &o->mni,
		.start = start,
		.end = start + (npages << PAGE_SHIFT),
		.hmm_pfns = (unsigned long *)out,
		.default_flags = HMM_PFN_REQ_FAULT | (write ? HMM_PFN_REQ_WRITE : 0),
	};
	unsigned long i;
	int ret;

	BUILD_BUG_ON(sizeof(unsigned long) != sizeof(u64));
	if (!npages || start & ~PAGE_MASK)
		return -EINVAL;
	if (!mmget_not_zero(o->mm))
		return -ESRCH;
	do {
		if (time_after(jiffies, timeout)) {
			ret = -EBUSY;
			break;
		}
		memset(out, 0, npages * sizeof(*out));
		range.notifier_seq = mmu_interval_read_begin(&o->mni);
		mmap_read_lock(o->mm);
		ret = hmm_range_fault(&range);
		mmap_read_unlock(o->mm);
	} while (ret == -EBUSY);
	mmput(o->mm);
	if (ret)
		return ret;
	for (i = 0; i < npages; i++) {
		unsigned long p = range.hmm_pfns[i];

		out[i] = (u64)page_to_pfn(hmm_pfn_to_page(p)) << 1 | !!(p & HMM_PFN_WRITE);
	}
	*seq = range.notifier_seq;
	return 0;
}

/*
 * DMA-maps one page that qhca_shim_odp_fault() found, for @dev (bound), while
 * its sequence is still current: both ways if the device may write it.
 */
int qhca_shim_odp_dma_map(struct device *dev, u64 pfn, bool writable, u64 *dma)
{
	dma_addr_t a = dma_map_page(dev, pfn_to_page(pfn), 0, PAGE_SIZE, qhca_dir(writable));

	if (dma_mapping_error(dev, a))
		return -ENOMEM;
	*dma = a;
	return 0;
}

/*
 * Undoes qhca_shim_odp_dma_map() once the device no longer uses the mapping,
 * before the page leaves the process (from the invalidation, or while the
 * notifier still guards it).  @dirty is the writable it was mapped with: a
 * page the device could write is marked dirty (as
 * ib_umem_odp_unmap_dma_pages() does): the kernel never saw those writes.
 */
void qhca_shim_odp_dma_unmap(struct device *dev, u64 dma, u64 pfn, bool dirty)
{
	dma_unmap_page(dev, dma, PAGE_SIZE, qhca_dir(dirty));
	if (dirty)
		folio_mark_dirty(page_folio(pfn_to_page(pfn)));
}

u64 qhca_shim_task_size(void)
{
	return TASK_SIZE;
}

bool qhca_shim_fatal_signal_pending(void)
{
	return fatal_signal_pending(current);
}

/* The device's page-fault worker: one work at a time, in order. */
struct workqueue_struct *qhca_shim_wq_new(unsigned int instance)
{
	return alloc_ordered_workqueue("qhca%u_odp", 0, instance);
}

/* The driver's page-fault queue: every context's work item may run at once. */
struct workqueue_struct *qhca_shim_wq_new_unbound(const char *name)
{
	return alloc_workqueue("%s", WQ_UNBOUND, 0, name);
}

void qhca_shim_wq_destroy(struct workqueue_struct *wq)
{
	destroy_workqueue(wq);
}

/* ------------------------------------------------------------------------ */
/* The RDMA core's user mappings (rdma.rs).                                 */
/* ------------------------------------------------------------------------ */

/*
 * Maps @len bytes of MMIO at @phys into @vma, uncached, as @entry of
 * @ucontext: the core zaps the mapping when it disassociates the context.
 * Refuses an executable mapping and takes away the right to make it one.
 * The mapping is never copied on fork: a doorbell page is its process's
 * (a child opens a context of its own, as with mlx5's MADV_DONTFORK).
 */
int qhca_shim_rdma_mmap_io(struct ib_ucontext *ucontext, struct vm_area_struct *vma,
			   u64 phys, unsigned long len, struct rdma_user_mmap_entry *entry)
{
	if (vma->vm_flags & VM_EXEC)
		return -EINVAL;
	vm_flags_clear(vma, VM_MAYEXEC);
	vm_flags_set(vma, VM_DONTCOPY);
	return rdma_user_mmap_io(ucontext, vma, PHYS_PFN(phys), len,
				 pgprot_noncached(vma->vm_page_prot), entry);
}
