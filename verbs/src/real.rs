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

/// What `Sym::addr` holds once the lookup found nothing.
const MISSING: *mut c_void = core::ptr::dangling_mut();

impl Sym {
    pub(crate) const fn new(name: &'static CStr) -> Sym {
        Sym {
            name,
            addr: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// The address of the next definition, `None` if no library after us defines it (a
    /// program that does not link libibverbs).
    pub(crate) fn get(&self) -> Option<*mut c_void> {
        let mut p = self.addr.load(Ordering::Acquire);
        if p.is_null() {
            // SAFETY: `name` is a NUL-terminated string that lives for ever; RTLD_NEXT asks for
            // the next object after ours in the lookup order, and dlsym has no other
            // precondition.
            let found = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
            p = if found.is_null() { MISSING } else { found };
            // Racing lookups store the same address.
            self.addr.store(p, Ordering::Release);
        }
        (p != MISSING).then_some(p)
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
