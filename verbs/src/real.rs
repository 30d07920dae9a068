// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The real libibverbs behind us: every `ibv_*` this library defines hands objects that are
//! not qhca's to the next definition of the same symbol (`dlsym(RTLD_NEXT)`), the system's
//! libibverbs.so.1 when we are preloaded.

use core::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

/// One symbol of the next library, looked up once.
pub(crate) struct Sym {
    name: &'static CStr,
    addr: AtomicPtr<c_void>,
}

impl Sym {
    pub(crate) const fn new(name: &'static CStr) -> Sym {
        Sym {
            name,
            addr: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The address of the next definition, `None` if no library after us defines it (a
    /// program that does not link libibverbs). Found in the global scope after us
    /// (`RTLD_NEXT`), or else in a libibverbs.so.1 loaded locally (`dlopen` with `RTLD_LOCAL`
    /// by a plugin, as UCX or libfabric load theirs). A miss is not remembered: the library may
    /// be loaded later.
    pub(crate) fn get(&self) -> Option<*mut c_void> {
        let p = self.addr.load(Ordering::Acquire);
        if !p.is_null() {
            return Some(p);
        }
        // SAFETY: `name` is a NUL-terminated string that lives for ever; RTLD_NEXT asks for the
        // next object after ours in the lookup order, and dlsym has no other precondition.
        let mut found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
        if found.is_null() {
            // SAFETY: a NUL-terminated name; RTLD_NOLOAD only returns a handle to a library
            // that is already loaded (taking a reference, which we keep: it stays loaded).
            let h = unsafe {
                libc::dlopen(
                    c"libibverbs.so.1".as_ptr(),
                    libc::RTLD_NOW | libc::RTLD_NOLOAD,
                )
            };
            if !h.is_null() {
                // SAFETY: a live handle and a NUL-terminated name.
                found = unsafe { libc::dlsym(h, self.name.as_ptr()) };
            }
        }
        if found.is_null() {
            return None;
        }
        // Racing lookups store the same address.
        self.addr.store(found, Ordering::Release);
        Some(found)
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name.to_str().unwrap_or("?")
    }
}

/// Calls the next library's definition of the enclosing `ibv_*` function:
/// `forward!(ibv_alloc_pd(context) as fn(*mut ibv_context) -> *mut ibv_pd, fail)`. Without
/// one (libibverbs is not loaded), sets `errno` to `ENOSYS` and evaluates `fail`.
macro_rules! forward {
    ($name:ident($($arg:expr),* $(,)?) as fn($($ty:ty),* $(,)?) -> $ret:ty, $fail:expr $(,)?) => {{
        static SYM: $crate::real::Sym =
            $crate::real::Sym::new(match core::ffi::CStr::from_bytes_with_nul(
                concat!(stringify!($name), "\0").as_bytes(),
            ) {
                Ok(s) => s,
                Err(_) => panic!("symbol name"),
            });
        match SYM.get() {
            Some(p) => {
                // SAFETY: `p` is the next library's definition of this very libibverbs
                // function, whose C prototype (verbs.h) is the one spelled here.
                let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { core::mem::transmute(p) };
                // SAFETY: the caller's arguments, passed on unchanged under the same contract.
                unsafe { f($($arg),*) }
            }
            None => {
                $crate::real::missing(SYM.name());
                $fail
            }
        }
    }};
}
pub(crate) use forward;

/// An object that is not qhca's reached us, and no libibverbs is loaded to take it.
pub(crate) fn missing(name: &str) {
    crate::misc::set_errno(libc::ENOSYS);
    crate::misc::debug(format_args!(
        "{name}: not a qhca object, and no libibverbs.so.1 is loaded to serve it"
    ));
}
