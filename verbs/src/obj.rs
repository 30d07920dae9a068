// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! How a verbs object of ours is laid out and found again.
//!
//! Every object is a `#[repr(C)]` struct whose first field is the libibverbs struct the
//! program sees (`struct ibv_pd`, `struct ibv_cq`, ...) in an `UnsafeCell`, because the program
//! holds a pointer to it and we update some of its fields (`qp->state`, `mw->rkey`) while it
//! may read them. The pointer the program gets is the object's own address; it is a `Box`
//! given up with `Box::into_raw`, taken back by the destroy verb.
//!
//! An object is ours if its `context` is one of our contexts, and a context is ours if its
//! `device` is one of our devices (`device::Dev`), which live for ever: so telling ours from
//! the real library's reads only memory the program handed us.

use core::cell::UnsafeCell;

use crate::device::Ctx;
use crate::ffi::ibv_context;

/// A verbs object of ours: `Self` starts with the program-visible struct `Ibv`.
///
/// # Safety
///
/// `Self` is `#[repr(C)]` with an `UnsafeCell<Self::Ibv>` as its first field, and `Ibv`'s
/// `context` field is what `context_of` reads.
pub(crate) unsafe trait Obj: Sized {
    /// The libibverbs struct.
    type Ibv;

    /// The `context` field of the libibverbs struct at `p`.
    ///
    /// # Safety
    ///
    /// `p` points to a live `Self::Ibv` (ours or the real library's).
    unsafe fn context_of(p: *const Self::Ibv) -> *mut ibv_context;

    /// Ours: the object behind `p` and its context, if `p`'s context is one of ours; `None`
    /// for the real library's objects (and for null).
    ///
    /// # Safety
    ///
    /// `p` is null or points to a live `Self::Ibv`, and an object whose context is ours was
    /// made by this library as a `Self` (the type of the verb that made it).
    unsafe fn ours<'a>(p: *mut Self::Ibv) -> Option<(&'a Self, &'a Ctx)> {
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` points to a live `Self::Ibv` (the caller's promise).
        let ctx = unsafe { Ctx::ours(Self::context_of(p)) }?;
        // SAFETY: the context is ours, so the object was made here as a `Self`, whose first
        // field (`#[repr(C)]`) is at `p`; it lives until the program destroys it.
        Some((unsafe { &*p.cast::<Self>() }, ctx))
    }

    /// The program-visible struct.
    fn cell(&self) -> &UnsafeCell<Self::Ibv>;

    /// The pointer the program holds.
    fn ibv(&self) -> *mut Self::Ibv {
        self.cell().get()
    }

    /// Gives the object to the program: the pointer it will pass back.
    fn into_ibv(self: Box<Self>) -> *mut Self::Ibv {
        Box::into_raw(self).cast()
    }

    /// Takes back an object the program destroys.
    ///
    /// # Safety
    ///
    /// `p` came from [`Obj::into_ibv`] of a `Self` and is not used again.
    unsafe fn from_ibv(p: *mut Self::Ibv) -> Box<Self> {
        // SAFETY: the caller's promise: `p` is the address of a `Box<Self>` given up.
        unsafe { Box::from_raw(p.cast::<Self>()) }
    }
}

/// Implements [`Obj`] for `$ty`, whose first field `ibv` is an `UnsafeCell<$ibv>` with a
/// `context` field.
macro_rules! impl_obj {
    ($ty:ty, $ibv:ty) => {
        // SAFETY: `$ty` is `#[repr(C)]` and starts with `ibv: UnsafeCell<$ibv>` (checked by
        // the assertion below), and `$ibv` has the `context` field read here.
        unsafe impl $crate::obj::Obj for $ty {
            type Ibv = $ibv;
            unsafe fn context_of(p: *const $ibv) -> *mut $crate::ffi::ibv_context {
                // SAFETY: `p` points to a live `$ibv` (the caller's promise).
                unsafe { (*p).context }
            }
            fn cell(&self) -> &core::cell::UnsafeCell<$ibv> {
                &self.ibv
            }
        }
        const _: () = assert!(core::mem::offset_of!($ty, ibv) == 0);
    };
}
pub(crate) use impl_obj;
