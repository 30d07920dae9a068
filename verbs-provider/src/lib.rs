// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! `libqhca-rdmav34.so`: the libibverbs provider for qhca's `ib_device`, loaded by the
//! distribution's libibverbs (rdma-core 44, private ABI `IBVERBS_PRIVATE_34`) from
//! `/etc/libibverbs.d/qhca.driver`, matched by PCI ID.
//!
//! What it serves so far (issue 26, step 2 of `docs/design-ib-device.md`): the device context
//! (GET_CONTEXT; the context's doorbell page mapped), `ibv_query_device(_ex)`, `ibv_query_port`
//! and protection domains, all through the core's commands. Every other verb keeps libibverbs's
//! default, `EOPNOTSUPP`, until the driver has it on the `ib_device` (the verbs themselves still
//! live on `/dev/qhcaN`, reached through the preloaded `libqhca_verbs.so`).
//!
//! Debian does not ship libibverbs's private header (`driver.h`): the few types this needs are
//! declared here from rdma-core 44's, with their sizes checked at compile time (the layouts are
//! the same from rdma-core 34 to 56: `docs/design-ib-device.md` §1.4).

use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};
use core::ptr;

use qhca_uapi::{
    qhca_ib_alloc_pd_resp, qhca_ib_alloc_ucontext_resp, QHCA_IB_UVERBS_ABI_VERSION,
    QHCA_PCI_DEVICE_ID, QHCA_PCI_VENDOR_ID, QHCA_UAR_PAGE_SIZE,
};

// ---- driver.h, declared (rdma-core 44) ------------------------------------------------------

/// `struct verbs_match_ent`.
#[repr(C)]
struct MatchEnt {
    driver_data: *const c_void,
    u: u64,
    vendor: u16,
    device: u16,
    kind: u8,
}
const _: () = assert!(size_of::<MatchEnt>() == 24);

/// `VERBS_MATCH_SENTINEL`, `VERBS_MATCH_PCI`.
const MATCH_SENTINEL: u8 = 0;
const MATCH_PCI: u8 = 1;

/// `struct verbs_device_ops`.
#[repr(C)]
struct DeviceOps {
    name: *const c_char,
    match_min_abi_version: u32,
    match_max_abi_version: u32,
    match_table: *const MatchEnt,
    static_providers: *const *const DeviceOps,
    match_device: Option<unsafe extern "C" fn(*mut c_void) -> bool>,
    alloc_context: Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> *mut c_void>,
    import_context: Option<unsafe extern "C" fn(*mut c_void, c_int) -> *mut c_void>,
    alloc_device: Option<unsafe extern "C" fn(*mut c_void) -> *mut c_void>,
    uninit_device: Option<unsafe extern "C" fn(*mut c_void)>,
}
const _: () = assert!(size_of::<DeviceOps>() == 72);

/// `struct verbs_device`: libibverbs fills it in; the provider allocates and frees it.
const VERBS_DEVICE_SIZE: usize = 712;

/// `struct verbs_context` (public, `infiniband/verbs.h`): 648 bytes, `struct ibv_context` at 320.
const VERBS_CONTEXT_SIZE: usize = 648;
const IBV_CONTEXT_OFFSET: usize = 320;

/// `struct verbs_context_ops`: 76 function pointers in this order (`driver.h`), of which these:
const N_CONTEXT_OPS: usize = 76;
const OP_ALLOC_PD: usize = 5;
const OP_DEALLOC_PD: usize = 26;
const OP_FREE_CONTEXT: usize = 39;
const OP_QUERY_DEVICE_EX: usize = 58;
const OP_QUERY_PORT: usize = 60;

/// `RDMA_DRIVER_UNKNOWN`: qhca has no driver id of its own; the PCI ID matches.
const RDMA_DRIVER_UNKNOWN: u32 = 0;

/// `struct ib_uverbs_ex_query_device_resp`.
const QUERY_DEVICE_RESP_SIZE: usize = 304;

extern "C" {
    fn verbs_register_driver_34(ops: *const DeviceOps);
    fn _verbs_init_and_alloc_context(
        device: *mut c_void,
        cmd_fd: c_int,
        alloc_size: usize,
        context_offset: *mut c_void,
        driver_id: u32,
    ) -> *mut c_void;
    fn verbs_uninit_context(context: *mut c_void);
    fn verbs_set_ops(vctx: *mut c_void, ops: *const ContextOps);
    fn ibv_cmd_get_context(
        context: *mut c_void,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    fn ibv_cmd_query_device_any(
        context: *mut c_void,
        input: *const c_void,
        attr: *mut c_void,
        attr_size: usize,
        resp: *mut c_void,
        resp_size: *mut usize,
    ) -> c_int;
    fn ibv_cmd_query_port(
        context: *mut c_void,
        port_num: u8,
        port_attr: *mut c_void,
        cmd: *mut c_void,
        cmd_size: usize,
    ) -> c_int;
    fn ibv_cmd_alloc_pd(
        context: *mut c_void,
        pd: *mut c_void,
        cmd: *mut c_void,
        cmd_size: usize,
        resp: *mut c_void,
        resp_size: usize,
    ) -> c_int;
    fn ibv_cmd_dealloc_pd(pd: *mut c_void) -> c_int;
}

/// `struct verbs_context_ops`, positional.
#[repr(C)]
struct ContextOps([*const c_void; N_CONTEXT_OPS]);

/// Statics that hold pointers: read-only, shared with libibverbs.
#[repr(transparent)]
struct Shared<T>(T);
// SAFETY: The wrapped tables are never written after the program starts; libibverbs only reads
// them.
unsafe impl<T> Sync for Shared<T> {}

// ---- what qhca allocates behind libibverbs's objects -------------------------------------------

/// A device context: libibverbs's `verbs_context` first (as every provider's), then the doorbell
/// page this context owns.
#[repr(C)]
struct Context {
    vctx: [u64; VERBS_CONTEXT_SIZE / 8],
    db: *mut c_void,
    uar_index: u32,
}

/// A protection domain: `struct ibv_pd` (context, handle) first, then the device's PD number.
#[repr(C)]
struct Pd {
    ibv: [u64; 2],
    pdn: u32,
}

/// The `verbs_context` of libibverbs's `ibv_context` (at a fixed offset in it).
fn context_of(ibctx: *mut c_void) -> *mut Context {
    ibctx.cast::<u8>().wrapping_sub(IBV_CONTEXT_OFFSET).cast()
}

// ---- the operations ----------------------------------------------------------------------------

/// `alloc_device`: a `verbs_device` for libibverbs to fill.
unsafe extern "C" fn alloc_device(_sysfs: *mut c_void) -> *mut c_void {
    // SAFETY: calloc of a plain size; libibverbs initialises it and hands it back to
    // `uninit_device`.
    unsafe { libc::calloc(1, VERBS_DEVICE_SIZE) }
}

/// `uninit_device`.
unsafe extern "C" fn uninit_device(dev: *mut c_void) {
    // SAFETY: `dev` came from `alloc_device`.
    unsafe { libc::free(dev) }
}

/// `alloc_context`: GET_CONTEXT (the driver answers `struct qhca_ib_alloc_ucontext_resp`), then
/// the context's doorbell page is mapped.
unsafe extern "C" fn alloc_context(
    dev: *mut c_void,
    cmd_fd: c_int,
    _priv: *mut c_void,
) -> *mut c_void {
    // SAFETY: libibverbs's contract: `dev` is a device this provider matched, `cmd_fd` its open
    // uverbs file; the allocation holds a `Context` with the `verbs_context` at offset 0.
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
    let mut cmd = [0u64; 2];
    #[repr(C)]
    #[derive(Default)]
    struct Resp {
        core: [u32; 2],
        drv: qhca_ib_alloc_ucontext_resp,
    }
    let mut resp = Resp::default();
    // SAFETY: `ctx` is the context just allocated; `cmd` and `resp` are the sizes given.
    let ret = unsafe {
        ibv_cmd_get_context(
            ctx.cast(),
            cmd.as_mut_ptr().cast(),
            size_of_val(&cmd),
            ptr::from_mut(&mut resp).cast(),
            size_of::<Resp>(),
        )
    };
    let fail = |err: c_int| {
        // SAFETY: `ctx` was initialised by `_verbs_init_and_alloc_context` and is ours alone.
        unsafe {
            verbs_uninit_context(ctx.cast());
            libc::free(ctx.cast());
            *libc::__errno_location() = err;
        }
        ptr::null_mut()
    };
    if ret != 0 {
        return fail(ret);
    }
    if resp.drv.comp_mask != 0 {
        return fail(libc::EPROTO);
    }
    // SAFETY: a fresh shared mapping of the page the kernel named, at no fixed address.
    let db = unsafe {
        libc::mmap(
            ptr::null_mut(),
            QHCA_UAR_PAGE_SIZE as usize,
            libc::PROT_WRITE,
            libc::MAP_SHARED,
            cmd_fd,
            resp.drv.db_mmap_offset as libc::off_t,
        )
    };
    if db == libc::MAP_FAILED {
        // SAFETY: reading errno.
        return fail(unsafe { *libc::__errno_location() });
    }
    // SAFETY: `ctx` is ours; the fields after the `verbs_context` are this provider's.
    unsafe {
        (*ctx).db = db;
        (*ctx).uar_index = resp.drv.uar_index;
        verbs_set_ops(ctx.cast(), &CONTEXT_OPS.0);
    }
    ctx.cast()
}

/// `free_context`.
unsafe extern "C" fn free_context(ibctx: *mut c_void) {
    let ctx = context_of(ibctx);
    // SAFETY: `ibctx` is a context this provider made; after this call nothing uses it.
    unsafe {
        libc::munmap((*ctx).db, QHCA_UAR_PAGE_SIZE as usize);
        verbs_uninit_context(ctx.cast());
        libc::free(ctx.cast());
    }
}

/// `query_device_ex` (`ibv_query_device` goes through it too).
unsafe extern "C" fn query_device_ex(
    ibctx: *mut c_void,
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

/// `sizeof(((struct ibv_device_attr *)0)->fw_ver)`.
const FW_VER_LEN: usize = 64;

/// `query_port`.
unsafe extern "C" fn query_port(ibctx: *mut c_void, port: u8, attr: *mut c_void) -> c_int {
    // `struct ibv_query_port`: header, response address, port, reserved.
    let mut cmd = [0u64; 3];
    // SAFETY: libibverbs's arguments, passed on; `cmd` is the size given.
    unsafe {
        ibv_cmd_query_port(
            ibctx,
            port,
            attr,
            cmd.as_mut_ptr().cast(),
            size_of_val(&cmd),
        )
    }
}

/// `alloc_pd`: the driver answers `struct qhca_ib_alloc_pd_resp`.
unsafe extern "C" fn alloc_pd(ibctx: *mut c_void) -> *mut c_void {
    // SAFETY: calloc of a plain size.
    let pd = unsafe { libc::calloc(1, size_of::<Pd>()) }.cast::<Pd>();
    if pd.is_null() {
        return ptr::null_mut();
    }
    let mut cmd = [0u64; 2];
    #[repr(C)]
    #[derive(Default)]
    struct Resp {
        core: u32,
        drv: qhca_ib_alloc_pd_resp,
    }
    let mut resp = Resp::default();
    // SAFETY: `pd` starts with room for a `struct ibv_pd`, which libibverbs fills in.
    let ret = unsafe {
        ibv_cmd_alloc_pd(
            ibctx,
            pd.cast(),
            cmd.as_mut_ptr().cast(),
            size_of_val(&cmd),
            ptr::from_mut(&mut resp).cast(),
            size_of::<Resp>(),
        )
    };
    if ret != 0 {
        // SAFETY: ours, not handed out.
        unsafe {
            libc::free(pd.cast());
            *libc::__errno_location() = ret;
        }
        return ptr::null_mut();
    }
    // SAFETY: ours.
    unsafe { (*pd).pdn = resp.drv.pdn };
    pd.cast()
}

/// `dealloc_pd`.
unsafe extern "C" fn dealloc_pd(pd: *mut c_void) -> c_int {
    // SAFETY: `pd` came from `alloc_pd`.
    let ret = unsafe { ibv_cmd_dealloc_pd(pd) };
    if ret == 0 {
        // SAFETY: the kernel forgot it; no one uses it any more.
        unsafe { libc::free(pd) };
    }
    ret
}

// ---- registration ------------------------------------------------------------------------------

const fn context_ops() -> ContextOps {
    let mut t = [ptr::null::<c_void>(); N_CONTEXT_OPS];
    t[OP_ALLOC_PD] = alloc_pd as *const c_void;
    t[OP_DEALLOC_PD] = dealloc_pd as *const c_void;
    t[OP_FREE_CONTEXT] = free_context as *const c_void;
    t[OP_QUERY_DEVICE_EX] = query_device_ex as *const c_void;
    t[OP_QUERY_PORT] = query_port as *const c_void;
    ContextOps(t)
}

static CONTEXT_OPS: Shared<ContextOps> = Shared(context_ops());

static MATCH_TABLE: Shared<[MatchEnt; 2]> = Shared([
    MatchEnt {
        driver_data: ptr::null(),
        u: 0,
        vendor: QHCA_PCI_VENDOR_ID as u16,
        device: QHCA_PCI_DEVICE_ID as u16,
        kind: MATCH_PCI,
    },
    MatchEnt {
        driver_data: ptr::null(),
        u: 0,
        vendor: 0,
        device: 0,
        kind: MATCH_SENTINEL,
    },
]);

static DEVICE_OPS: Shared<DeviceOps> = Shared(DeviceOps {
    name: c"qhca".as_ptr(),
    match_min_abi_version: QHCA_IB_UVERBS_ABI_VERSION,
    match_max_abi_version: QHCA_IB_UVERBS_ABI_VERSION,
    match_table: &MATCH_TABLE.0 as *const MatchEnt,
    static_providers: ptr::null(),
    match_device: None,
    alloc_context: Some(alloc_context),
    import_context: None,
    alloc_device: Some(alloc_device),
    uninit_device: Some(uninit_device),
});

/// `PROVIDER_DRIVER(qhca, qhca_dev_ops)`: registers with libibverbs when it loads this library.
extern "C" fn register() {
    // SAFETY: the table is static and complete; libibverbs keeps the pointer.
    unsafe { verbs_register_driver_34(&DEVICE_OPS.0) };
}

#[used]
#[link_section = ".init_array"]
static REGISTER: extern "C" fn() = register;

const _: () = assert!(offset_of!(Context, vctx) == 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_rdma_core_44s() {
        use qhca_verbs::ffi;
        assert_eq!(size_of::<ffi::verbs_context>(), VERBS_CONTEXT_SIZE);
        assert_eq!(offset_of!(ffi::verbs_context, context), IBV_CONTEXT_OFFSET);
        assert_eq!(size_of::<ffi::ibv_pd>(), size_of::<[u64; 2]>());
        assert_eq!(size_of::<ffi::ibv_device>() + 48, VERBS_DEVICE_SIZE);
        assert_eq!(offset_of!(ffi::ibv_device_attr, fw_ver), 0);
        assert_eq!(
            size_of_val(&ffi::ibv_device_attr::default().fw_ver),
            FW_VER_LEN
        );
        assert_eq!(offset_of!(ffi::ibv_device_attr_ex, orig_attr), 0);
    }
}
