// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The device and its contexts: `alloc_device`, `alloc_context` (GET_CONTEXT, then the
//! context's doorbell page mapped), `free_context`, `query_device_ex` and `query_port`.

use core::ffi::{c_int, c_void};
use core::mem::size_of;
use core::ptr;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use qhca::Doorbell;
use qhca_uapi::qhca_ib_alloc_ucontext_resp;
use qhca_verbs_abi::ffi::*;

use crate::cmd::*;
use crate::CONTEXT_OPS;

/// `struct verbs_device`: libibverbs fills it in; the provider allocates and frees it.
const VERBS_DEVICE_SIZE: usize = 712;

/// `RDMA_DRIVER_UNKNOWN`: qhca has no driver id of its own; the PCI ID matches.
const RDMA_DRIVER_UNKNOWN: u32 = 0;

/// `struct ib_uverbs_ex_query_device_resp`.
const QUERY_DEVICE_RESP_SIZE: usize = 304;

/// `sizeof(((struct ibv_device_attr *)0)->fw_ver)`.
const FW_VER_LEN: usize = 64;

/// A device context: libibverbs's `verbs_context` first (as every provider's), then the
/// doorbell page this context owns.
#[repr(C)]
pub(crate) struct Context {
    vctx: verbs_context,
    /// `Arc::into_raw` of the page's mapping, which the context's CQs and QPs share; released
    /// by `free_context`.
    db: *const Doorbell,
}

impl Context {
    /// The context of libibverbs's `ibv_context`.
    ///
    /// # Safety
    ///
    /// `ibctx` is a context this provider made, not freed.
    pub(crate) unsafe fn of<'a>(ibctx: *mut ibv_context) -> &'a Context {
        let off = core::mem::offset_of!(verbs_context, context);
        // SAFETY: the caller's promise: `ibctx` is the `context` member of the `verbs_context`
        // that starts a `Context`.
        unsafe { &*ibctx.cast::<u8>().sub(off).cast::<Context>() }
    }

    /// The doorbell page.
    pub(crate) fn doorbell(&self) -> Arc<Doorbell> {
        // SAFETY: `db` is `Arc::into_raw` of a live `Arc` (released only in `free_context`,
        // after every object of the context is gone): one more reference, then an owned one.
        unsafe {
            Arc::increment_strong_count(self.db);
            Arc::from_raw(self.db)
        }
    }
}

/// `alloc_device`: a `verbs_device` for libibverbs to fill.
pub(crate) unsafe extern "C" fn alloc_device(_sysfs: *mut c_void) -> *mut c_void {
    // SAFETY: calloc of a plain size; libibverbs initialises it and hands it back to
    // `uninit_device`.
    unsafe { libc::calloc(1, VERBS_DEVICE_SIZE) }
}

/// `uninit_device`.
pub(crate) unsafe extern "C" fn uninit_device(dev: *mut c_void) {
    // SAFETY: `dev` came from `alloc_device`.
    unsafe { libc::free(dev) }
}

/// `alloc_context`: GET_CONTEXT (the driver answers `struct qhca_ib_alloc_ucontext_resp`), then
/// the context's doorbell page is mapped.
pub(crate) unsafe extern "C" fn alloc_context(
    dev: *mut c_void,
    cmd_fd: c_int,
    _priv: *mut c_void,
) -> *mut c_void {
    // SAFETY: libibverbs's contract: `dev` is a device this provider matched, `cmd_fd` its open
    // uverbs file; the allocation (zeroed) holds a `Context` with the `verbs_context` at 0.
    let ctx = unsafe {
        _verbs_init_and_alloc_context(
            dev,
            cmd_fd,
            size_of::<Context>(),
            ptr::null_mut(), // offsetof(struct Context, vctx)
            RDMA_DRIVER_UNKNOWN,
        )
    }
    .cast::<Context>();
    if ctx.is_null() {
        return ptr::null_mut();
    }
    // `struct ibv_get_context` (header, response address), then `struct
    // ib_uverbs_get_context_resp` and qhca's response.
    let mut cmd = Cmd::<16, NoData>::new(NoData);
    let mut resp = Resp::<8, qhca_ib_alloc_ucontext_resp>::new();
    // SAFETY: `ctx` is the context just allocated; `cmd` and `resp` are the sizes given.
    let ret = unsafe {
        ibv_cmd_get_context(
            ctx.cast(),
            cmd.as_mut_ptr(),
            size_of_val(&cmd),
            resp.as_mut_ptr(),
            size_of_val(&resp),
        )
    };
    let fail = |err: c_int| {
        // SAFETY: `ctx` was initialised by `_verbs_init_and_alloc_context` and is ours alone.
        unsafe {
            verbs_uninit_context(ctx.cast());
            libc::free(ctx.cast());
        }
        set_errno(err);
        ptr::null_mut()
    };
    if ret != 0 {
        return fail(ret);
    }
    if resp.drv.comp_mask != 0 {
        return fail(libc::EPROTO);
    }
    // SAFETY: `cmd_fd` is the context's open uverbs file, for the call.
    let fd = unsafe { BorrowedFd::borrow_raw(cmd_fd) };
    let db = match Doorbell::map_at(fd, resp.drv.db_mmap_offset) {
        Ok(db) => Arc::new(db),
        Err(e) => return fail(e.errno().map_or(libc::EIO, |e| e as c_int)),
    };
    // SAFETY: `ctx` is ours; the fields after the `verbs_context` are this provider's.
    unsafe {
        (*ctx).db = Arc::into_raw(db);
        verbs_set_ops(ctx.cast(), ptr::from_ref(&CONTEXT_OPS.0).cast());
    }
    ctx.cast()
}

/// `free_context`.
pub(crate) unsafe extern "C" fn free_context(ibctx: *mut ibv_context) {
    // SAFETY: `ibctx` is a context this provider made; after this call nothing uses it.
    unsafe {
        let ctx = ptr::from_ref(Context::of(ibctx)).cast_mut();
        drop(Arc::from_raw((*ctx).db));
        verbs_uninit_context(ctx.cast());
        libc::free(ctx.cast());
    }
}

/// `query_device_ex` (`ibv_query_device` goes through it too).
pub(crate) unsafe extern "C" fn query_device_ex(
    ibctx: *mut ibv_context,
    input: *const c_void,
    attr: *mut c_void,
    attr_size: usize,
) -> c_int {
    let mut resp = [0u64; QUERY_DEVICE_RESP_SIZE / 8];
    let mut resp_size = QUERY_DEVICE_RESP_SIZE;
    // SAFETY: libibverbs's arguments, passed on; `resp` is `resp_size` bytes.
    let ret = unsafe {
        ibv_cmd_query_device_any(
            ibctx,
            input,
            attr,
            attr_size,
            resp.as_mut_ptr().cast(),
            &mut resp_size,
        )
    };
    if ret != 0 || attr_size < FW_VER_LEN {
        return ret;
    }
    // The firmware version as text is the provider's to write (`char fw_ver[64]`, the first field
    // of `struct ibv_device_attr`, itself the first of `ibv_device_attr_ex`); the kernel's
    // response starts with the raw one (`ib_uverbs_query_device_resp.fw_ver`): major << 32 |
    // minor << 16 | patch.
    let v = resp[0];
    let text = format!("{}.{}.{}\0", v >> 32, (v >> 16) & 0xffff, v & 0xffff);
    let n = text.len().min(FW_VER_LEN);
    // SAFETY: `attr` holds at least `attr_size` >= `FW_VER_LEN` bytes, the string field first.
    unsafe {
        ptr::copy_nonoverlapping(text.as_ptr(), attr.cast::<u8>(), n);
        *attr.cast::<u8>().add(FW_VER_LEN - 1) = 0;
    }
    0
}

/// `query_port`.
pub(crate) unsafe extern "C" fn query_port(
    ibctx: *mut ibv_context,
    port: u8,
    attr: *mut c_void,
) -> c_int {
    // `struct ibv_query_port`: header, response address, port, reserved.
    let mut cmd = Cmd::<24, NoData>::new(NoData);
    // SAFETY: libibverbs's arguments, passed on; `cmd` is the size given.
    unsafe { ibv_cmd_query_port(ibctx, port, attr, cmd.as_mut_ptr(), size_of_val(&cmd)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_rdma_core_44s() {
        assert_eq!(size_of::<verbs_context>(), 648);
        assert_eq!(core::mem::offset_of!(verbs_context, context), 320);
        assert_eq!(size_of::<ibv_device>() + 48, VERBS_DEVICE_SIZE);
        assert_eq!(core::mem::offset_of!(ibv_device_attr, fw_ver), 0);
        assert_eq!(size_of_val(&ibv_device_attr::default().fw_ver), FW_VER_LEN);
        assert_eq!(core::mem::offset_of!(ibv_device_attr_ex, orig_attr), 0);
    }
}
