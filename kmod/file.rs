// SPDX-License-Identifier: GPL-2.0

//! `/dev/qhcaN`: one context per open file.
//!
//! A context owns one doorbell page, allocated at open and freed at close (which also runs when
//! the process exits or is killed). Nothing here trusts user space: every ioctl argument is
//! checked for size, `comp_mask` and reserved fields, and mmap accepts exactly one layout.

use crate::{device::QhcaDevice, shim::FilePtr, uapi};
use kernel::{
    fs::File,
    miscdevice::{MiscDevice, MiscDeviceOptions, MiscDeviceRegistration},
    mm::virt::{flags as vmflags, VmaNew},
    prelude::*,
    sync::Arc,
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
pub(crate) struct QhcaFile {
    dev: Arc<QhcaDevice>,
    /// This context's doorbell page in BAR2.
    uar: u32,
    file: FilePtr,
}

#[vtable]
impl MiscDevice for QhcaFile {
    type Ptr = KBox<Self>;

    fn open(file: &File, misc: &MiscDeviceRegistration<Self>) -> Result<KBox<Self>> {
        // SAFETY: By the invariant of `MiscNode`, `misc` is the `reg` field of a `MiscNode`. That
        // node is alive: `misc_open` calls us under `misc_mtx`, and `misc_deregister`, which runs
        // before the node is freed, takes the same mutex.
        let node = unsafe { &*kernel::container_of!(core::ptr::from_ref(misc), MiscNode, reg) };
        let dev = node.dev.clone();
        let file = FilePtr::new(file);
        let uar = dev.open_context(file)?;
        let ctx = KBox::new(Self { dev, uar, file }, GFP_KERNEL);
        if ctx.is_err() {
            // Cannot reach `release`: undo here.
            node.dev.close_context(file, uar);
        }
        ctx.map_err(Into::into)
    }

    fn release(this: KBox<Self>, _file: &File) {
        this.dev.close_context(this.file, this.uar);
    }

    fn ioctl(this: &QhcaFile, _file: &File, cmd: u32, arg: usize) -> Result<isize> {
        match cmd {
            uapi::QHCA_IOCTL_QUERY_DEVICE => this.query_device(arg),
            _ => Err(ENOTTY),
        }
    }

    fn mmap(this: &QhcaFile, _file: &File, vma: &VmaNew) -> Result {
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
