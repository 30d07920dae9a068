// SPDX-License-Identifier: GPL-2.0

//! `/dev/qhcaN`: one context per open file.
//!
//! A context owns one doorbell page, allocated at open and freed at close (which also runs when
//! the process exits or is killed). Nothing here trusts user space: every ioctl argument is
//! checked for size, `comp_mask` and reserved fields, and mmap accepts exactly one layout.

use crate::{device::QhcaDevice, shim::FilePtr, uapi, verbs::Objects};
use kernel::{
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::{flags as vmflags, VmaNew},
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
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
    /// This context's doorbell page in BAR2.
    uar: u32,
    file: FilePtr,
    /// The verbs objects this context created.
    #[pin]
    objs: Mutex<Objects>,
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
        let file = FilePtr::new(file);
        let uar = dev.open_context(file)?;
        let ctx = KBox::pin_init(
            try_pin_init!(Self {
                dev,
                uar,
                file,
                objs <- new_mutex!(Objects::default()),
            }? Error),
            GFP_KERNEL,
        );
        match ctx {
            Ok(ctx) => Ok(ctx),
            Err(e) => {
                // Cannot reach `release`: undo here. Nothing was created yet.
                node.dev.close_context(file, uar, None);
                Err(e)
            }
        }
    }

    fn release(this: Pin<KBox<Self>>, _file: &File) {
        this.dev.close_context(this.file, this.uar, Some(&this.objs));
    }

    fn ioctl(this: Pin<&QhcaFile>, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        let (dev, uar) = (&*this.dev, this.uar);
        match cmd {
            uapi::QHCA_IOCTL_QUERY_DEVICE => return this.query_device(arg),
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
            | uapi::QHCA_IOCTL_QUERY_CTX => {}
            _ => return Err(ENOTTY),
        }
        dev.with_bound(|bound| {
            let mut objs = this.objs.lock();
            match cmd {
                uapi::QHCA_IOCTL_ALLOC_PD => objs.alloc_pd(dev, uar, arg),
                uapi::QHCA_IOCTL_DEALLOC_PD => objs.dealloc_pd(dev, uar, arg),
                uapi::QHCA_IOCTL_REG_MR => objs.reg_mr(dev, bound, uar, arg),
                uapi::QHCA_IOCTL_DEREG_MR => objs.dereg_mr(dev, uar, arg),
                uapi::QHCA_IOCTL_CREATE_CQ => objs.create_cq(dev, bound, uar, arg),
                uapi::QHCA_IOCTL_DESTROY_CQ => objs.destroy_cq(dev, uar, arg),
                uapi::QHCA_IOCTL_CREATE_QP => objs.create_qp(dev, bound, uar, arg),
                uapi::QHCA_IOCTL_MODIFY_QP => objs.modify_qp(dev, bound, uar, arg),
                uapi::QHCA_IOCTL_QUERY_QP => objs.query_qp(dev, bound, uar, arg),
                uapi::QHCA_IOCTL_DESTROY_QP => objs.destroy_qp(dev, uar, arg),
                _ => objs.query_ctx(dev, bound, uar, arg),
            }
        })
    }

    fn mmap(this: Pin<&QhcaFile>, _file: &File, vma: &VmaNew) -> Result {
        this.dev.check_bound()?;
        if crate::shim::vma_pgoff(vma) != (uapi::QHCA_MMAP_UAR >> uapi::QHCA_UAR_PAGE_SHIFT) as usize
            || vma.end() - vma.start() != uapi::QHCA_UAR_PAGE_SIZE as usize
            || vma.flags() & vmflags::SHARED == 0
            || vma.executable()
        {
            return Err(EINVAL);
        }
        // A doorbell page is write-only for the device's purposes but reading it is harmless
        // (the device returns 0); forbid turning on exec later.
        vma.try_clear_mayexec()?;
        vma.set_dontcopy();
        vma.set_dontexpand();
        this.dev.map_uar(vma, this.uar)
    }
}

impl QhcaFile {
    /// `QHCA_IOCTL_QUERY_DEVICE`.
    fn query_device(&self, arg: usize) -> Result<isize> {
        self.dev.check_bound()?;
        let size = core::mem::size_of::<uapi::qhca_ioc_query_device>();
        let (mut reader, mut writer) = UserSlice::new(UserPtr::from_addr(arg), size).reader_writer();
        let mut req: uapi::qhca_ioc_query_device = reader.read()?;
        if req.size as usize != size || req.comp_mask != 0 || req.rsvd_in.iter().any(|&r| r != 0) {
            return Err(EINVAL);
        }
        req.abi_version = uapi::QHCA_ABI_VERSION;
        req.uar_index = self.uar;
        req.attr = *self.dev.attr()?;
        writer.write(&req)?;
        Ok(0)
    }
}
