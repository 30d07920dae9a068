// SPDX-License-Identifier: GPL-2.0

//! `/dev/qhcaN`: one context per open file.
//!
//! Opening asks nothing of the device (it runs under the misc core's global mutex): a context's
//! doorbell page is allocated by its first ioctl or mmap, and freed at close (which also runs when
//! the process exits or is killed). Nothing here trusts user space: every ioctl argument is
//! checked for size, `comp_mask` and reserved fields, and mmap accepts exactly one layout. User
//! memory is read, written and pinned outside the device-wide lock.

use crate::{context::Ctx, device::QhcaDevice, shim, uapi};
use kernel::{
    bindings,
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::{flags as vmflags, VmaNew},
    new_mutex,
    prelude::*,
    seq_file::SeqFile,
    sync::{poll::PollTable, Arc, Mutex},
    types::ForeignOwnable,
    uaccess::{UserPtr, UserSlice},
};

/// A misc device node and the device it opens.
///
/// # Invariants
///
/// `reg` is only ever registered as a field of a `MiscNode`, which `QhcaFile::open` relies on to
/// find `dev`.
#[pin_data]
pub(crate) struct MiscNode {
    /// Declared first so it is dropped (deregistered) first: no open can start after `dev` goes.
    #[pin]
    reg: MiscDeviceRegistration<QhcaFile>,
    dev: Arc<QhcaDevice>,
}

impl MiscNode {
    pub(crate) fn new(name: &'static CStr, dev: Arc<QhcaDevice>) -> impl PinInit<Self, Error> {
        // `dev` is initialised before `reg` registers the node, so an `open` racing with the
        // registration finds it set.
        try_pin_init!(Self {
            dev,
            reg <- MiscDeviceRegistration::register(MiscDeviceOptions { name }),
        })
    }
}

/// An open file: one context.
#[pin_data]
pub(crate) struct QhcaFile {
    dev: Arc<QhcaDevice>,
    /// What the device reaches: doorbell mapping, event routes and queue, and the verbs objects
    /// this context created. Outlives every mapping of the file (each holds a reference to the
    /// file, and this is dropped with it).
    ctx: Arc<Ctx>,
    /// This context's doorbell page in BAR2, once allocated. Held while allocating it.
    #[pin]
    uar: Mutex<Option<u32>>,
}

#[vtable]
impl MiscDevice for QhcaFile {
    type Ptr = Pin<KBox<Self>>;

    fn open(file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<Pin<KBox<Self>>> {
        // SAFETY: By the invariant of `MiscNode`, `misc` is the `reg` field of a `MiscNode`. That
        // node is alive: `misc_open` calls us under `misc_mtx`, and `misc_deregister`, which runs
        // before the node is freed, takes the same mutex.
        let node = unsafe { &*kernel::container_of!(core::ptr::from_ref(misc), MiscNode, reg) };
        let dev = node.dev.clone();
        let ctx = Ctx::new(file, &node.dev)?;
        let shared = ctx.clone();
        let this = KBox::pin_init(
            try_pin_init!(Self {
                dev,
                ctx: shared,
                uar <- new_mutex!(None),
            }? Error),
            GFP_KERNEL,
        )?;
        node.dev.open_context(ctx)?;
        // SAFETY: We are in our misc device's `open` of `file`.
        unsafe { shim::file_add_poll(file) };
        Ok(this)
    }

    fn release(this: Pin<KBox<Self>>, _file: &File) {
        let uar = *this.uar.lock();
        this.dev.close_context(&this.ctx, uar);
    }

    fn ioctl(this: Pin<&QhcaFile>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let this = this.get_ref();
        match cmd {
            uapi::QHCA_IOCTL_GET_ASYNC_EVENT => return this.get_async_event(arg),
            uapi::QHCA_IOCTL_QUERY_DEVICE => return this.query_device(arg),
            uapi::QHCA_IOCTL_QUERY_PORT => {
                this.ctx.check()?;
                return crate::port::query_port(&this.dev, arg);
            }
            uapi::QHCA_IOCTL_SET_GID => {
                this.ctx.check()?;
                return crate::port::set_gid(&this.dev, arg);
            }
            uapi::QHCA_IOCTL_ALLOC_PD
            | uapi::QHCA_IOCTL_DEALLOC_PD
            | uapi::QHCA_IOCTL_REG_MR
            | uapi::QHCA_IOCTL_DEREG_MR
            | uapi::QHCA_IOCTL_CREATE_CQ
            | uapi::QHCA_IOCTL_DESTROY_CQ
            | uapi::QHCA_IOCTL_CREATE_QP
            | uapi::QHCA_IOCTL_MODIFY_QP
            | uapi::QHCA_IOCTL_QUERY_QP
            | uapi::QHCA_IOCTL_DESTROY_QP
            | uapi::QHCA_IOCTL_QUERY_CTX
            | uapi::QHCA_IOCTL_QUERY_CTX_V1
            | uapi::QHCA_IOCTL_ADVISE_MR
            | uapi::QHCA_IOCTL_ALLOC_MW
            | uapi::QHCA_IOCTL_DEALLOC_MW
            | uapi::QHCA_IOCTL_CREATE_AH
            | uapi::QHCA_IOCTL_CREATE_AH_V1
            | uapi::QHCA_IOCTL_DESTROY_AH => {}
            _ => return Err(ENOTTY),
        }
        this.ctx.check()?;
        crate::verbs::ioctl(
            &this.dev,
            &this.ctx,
            &this.ctx.objs,
            || this.uar(),
            cmd,
            arg,
        )
    }

    fn mmap(this: Pin<&QhcaFile>, _file: &File, vma: &VmaNew) -> Result {
        if shim::vma_pgoff(vma) == (uapi::QHCA_MMAP_INVAL >> uapi::QHCA_PAGE_SHIFT) as usize {
            if vma.end() - vma.start() != uapi::QHCA_PAGE_SIZE as usize
                || vma.flags() & vmflags::SHARED == 0
                || vma.executable()
            {
                return Err(EINVAL);
            }
            // Readable after disassociation too: nothing of the device is in it.
            return this.ctx.inval.mmap(vma);
        }
        if shim::vma_pgoff(vma) != (uapi::QHCA_MMAP_UAR >> uapi::QHCA_UAR_PAGE_SHIFT) as usize
            || vma.end() - vma.start() != uapi::QHCA_UAR_PAGE_SIZE as usize
            || vma.flags() & vmflags::SHARED == 0
            || vma.executable()
        {
            return Err(EINVAL);
        }
        this.ctx.check()?;
        this.uar()?;
        // A doorbell page is write-only for the device's purposes but reading it is harmless
        // (the device returns 0); forbid turning on exec later.
        vma.try_clear_mayexec()?;
        let map = this.ctx.file_map.as_ref().ok_or(EINVAL)?;
        // SAFETY: `ctx` belongs to the file being mapped and is dropped only with it, after its
        // release, which runs only once every vma of the file is gone.
        unsafe { map.umap.mmap(vma) };
        Ok(())
    }

    fn show_fdinfo(this: Pin<&QhcaFile>, m: &SeqFile, _file: &File) {
        this.ctx.show(m);
    }
}

impl QhcaFile {
    /// This context's doorbell page, allocated on first use.
    ///
    /// # Errors
    ///
    /// `ENODEV` after unbind, `EIO` after a device failure, `ENOSPC` when every page is taken.
    fn uar(&self) -> Result<u32> {
        let mut uar = self.uar.lock();
        if let Some(u) = *uar {
            return Ok(u);
        }
        self.ctx.check()?;
        // A doorbell page is one of the device's contexts: charged to the user first.
        self.ctx
            .quota
            .charge(&self.dev, crate::limits::Pool::Contexts, 1)?;
        let u = self
            .dev
            .with_bound(|_| self.dev.alloc_uar())
            .inspect_err(|_| self.ctx.quota.uncharge(crate::limits::Pool::Contexts, 1))?;
        // - `u` is the doorbell page the device just allocated to this context, below
        //   `num_uars`, which probe checked against BAR2's length, so `uar_phys(u)` is one page
        //   of BAR2 and this context's own;
        // - unbind (`QhcaDevice::shutdown`) disassociates every context, which revokes this
        //   umap and zaps its mappings, before the driver lets go of the BAR.
        if let Some(map) = &self.ctx.file_map {
            // SAFETY: See the two points above.
            unsafe { map.umap.set_phys(self.dev.uar_phys(u)) };
        }
        self.ctx.set_uar(u);
        *uar = Some(u);
        Ok(u)
    }

    /// `QHCA_IOCTL_QUERY_DEVICE`.
    fn query_device(&self, arg: usize) -> Result<isize> {
        let size = core::mem::size_of::<uapi::qhca_ioc_query_device>();
        let (mut reader, mut writer) =
            UserSlice::new(UserPtr::from_addr(arg), size).reader_writer();
        let mut req: uapi::qhca_ioc_query_device = reader.read()?;
        if req.size as usize != size || req.comp_mask != 0 || req.rsvd_in.iter().any(|&r| r != 0) {
            return Err(EINVAL);
        }
        self.ctx.check()?;
        req.abi_version = uapi::QHCA_ABI_VERSION;
        req.uar_index = self.uar()?;
        req.attr = *self.dev.attr()?;
        writer.write(&req)?;
        Ok(0)
    }

    /// `QHCA_IOCTL_GET_ASYNC_EVENT`: works after disassociation too (that is how the fatal event
    /// is read).
    fn get_async_event(&self, arg: usize) -> Result<isize> {
        let size = core::mem::size_of::<uapi::qhca_ioc_async_event>();
        let (mut reader, mut writer) =
            UserSlice::new(UserPtr::from_addr(arg), size).reader_writer();
        let mut req: uapi::qhca_ioc_async_event = reader.read()?;
        if req.size as usize != size
            || req.comp_mask != 0
            || req.type_ != 0
            || req.element != 0
            || req.rsvd.iter().any(|&r| r != 0)
        {
            return Err(EINVAL);
        }
        (req.type_, req.element) = self.ctx.next_event()?;
        writer.write(&req)?;
        Ok(0)
    }
}

/// `poll` of our files (installed by `shim::file_add_poll`).
///
/// # Safety
///
/// `file` must be an open file of our misc device, with `wait` null or a valid poll table, for
/// the duration of the call (the VFS's `->poll` contract).
#[no_mangle]
unsafe extern "C" fn qhca_rust_poll(
    file: *mut bindings::file,
    wait: *mut bindings::poll_table_struct,
) -> c_uint {
    // SAFETY: `file` is open (caller's promise), so its private data is the `Pin<KBox<QhcaFile>>`
    // the misc device's `open` stored, which `release` takes back only after the last `poll`.
    let this = unsafe { <Pin<KBox<QhcaFile>> as ForeignOwnable>::borrow((*file).private_data) };
    // SAFETY: `file` is valid for the call, and `poll` runs outside any `fdget_pos` region.
    let f = unsafe { File::from_raw_file(file) };
    // SAFETY: `wait` is null or valid for the duration of the call (caller's promise).
    let table = unsafe { PollTable::from_raw(wait) };
    this.ctx.poll(f, table)
}
