// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The context's invalidation page (`struct qhca_inval_page`): where the driver publishes the
//! watched regions it revoked ([`crate::Pd::reg_watched_mr`]), for registration caches
//! ([`crate::RegCache`]) to read without a system call.
//!
//! The page is written only by the driver, concurrently with our reads. It is mapped read-only,
//! so every load is a relaxed atomic load of at most eight bytes (the only atomic accesses Rust
//! allows on read-only memory, see "Atomic accesses to read-only memory" in
//! [`std::sync::atomic`]), and the header's acquire loads and read barrier are relaxed loads
//! followed by acquire fences, which order the same way.
//!
//! Who writes what (`struct qhca_inval_page`): the driver writes everything; revocation `g`
//! (from 1) goes to `ring[(g - 1) % QHCA_INVAL_RING_ENTRIES]` as `seq = 0`, the fields,
//! `seq = g` (release), then `generation = g` (release); `flush_generation` is the generation of
//! the last revocation of everything. A reader keeps the generation it has seen and trusts no
//! number on the page beyond that protocol: a ring that wrapped under it, or a page that went
//! backwards, means "assume everything is revoked".

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::{addr_of, NonNull};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};
use qhca_uapi::{qhca_inval_page, QHCA_INVAL_RING_ENTRIES};

use crate::error::{errno_of, Error, Result};
use crate::mem::PAGE_SIZE;

const RING: u64 = QHCA_INVAL_RING_ENTRIES as u64;

/// Where [`InvalPage::map`] maps the page from: the second page of a file that stands in for the
/// device in host tests (a context opened with `Context::open_unchecked`), after the doorbell
/// page's. Not ABI: a device's context maps its page at the offset `GET_CONTEXT` answered
/// ([`InvalPage::map_at`]).
const STAND_IN_OFFSET: u64 = 4096;

const _: () = assert!(size_of::<qhca_inval_page>() <= PAGE_SIZE);
const _: () = assert!(align_of::<qhca_inval_page>() == 8);

/// One region the driver revoked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Revocation {
    /// Its key (lkey = rkey).
    pub key: u32,
    /// Its first byte, as registered.
    pub start: u64,
    /// Its length, as registered.
    pub length: u64,
}

/// What changed on an invalidation page since a generation the reader had seen
/// ([`InvalPage::poll`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InvalPoll {
    /// Nothing: the generation is still the one seen.
    Nothing,
    /// These regions were revoked; `upto` is the generation to remember as seen.
    Revoked {
        /// The revocations after the one seen, oldest first.
        regions: Vec<Revocation>,
        /// The generation they bring the reader to.
        upto: u64,
    },
    /// Every watched region must be assumed revoked: the driver revoked everything (the device
    /// stopped), or more revocations happened than the ring holds (or the ring was rewritten
    /// while it was read). `upto` is the generation to remember as seen.
    FlushAll {
        /// The generation this brings the reader to.
        upto: u64,
    },
}

/// A reader over an invalidation page somewhere in memory: the mapped page, or a page a host
/// test writes as the driver would.
///
/// # Invariants
///
/// `page` points to a `qhca_inval_page` (8-aligned) that stays readable for as long as this
/// value exists, and that everyone else accesses only with atomic stores of each field's width
/// (the driver, or a test standing in for it); this value only loads from it.
#[derive(Debug)]
pub(crate) struct PageReader {
    page: NonNull<qhca_inval_page>,
}

// SAFETY: the reader only performs atomic loads of memory that outlives it (type invariant);
// nothing in it is tied to a thread, and concurrent loads from several threads cannot race.
unsafe impl Send for PageReader {}
// SAFETY: as for `Send`: `&PageReader` only loads.
unsafe impl Sync for PageReader {}

impl PageReader {
    /// # Safety
    ///
    /// `page` must point to an 8-aligned `qhca_inval_page` that stays readable for as long as
    /// the reader exists, and that is written (if at all) only with atomic stores of each
    /// field's width, never through references or plain stores.
    pub(crate) unsafe fn new(page: NonNull<qhca_inval_page>) -> PageReader {
        // INVARIANT: the caller's promise.
        PageReader { page }
    }

    /// A relaxed load of a `u64` field of the page.
    fn load64(&self, field: *const u64) -> u64 {
        // SAFETY:
        // - `field` points into `*self.page` (callers derive it with `addr_of!` from it), which
        //   is readable for our lifetime and 8-aligned, as every `u64` field of the
        //   `repr(C)` struct is (type invariant);
        // - everyone else accesses it only with atomic stores of the same width (invariant),
        //   so this atomic load does not race;
        // - the mapping may be read-only: `from_ptr` nominally wants writable memory, but we
        //   only load, and relaxed loads of at most eight bytes are documented to be fine on
        //   read-only memory ("Atomic accesses to read-only memory" in `core::sync::atomic`).
        unsafe { AtomicU64::from_ptr(field.cast_mut()) }.load(Ordering::Relaxed)
    }

    /// As `load64`, for a `u32` field.
    fn load32(&self, field: *const u32) -> u32 {
        // SAFETY: as in `load64`: a 4-aligned `u32` field of the live page, written only
        // atomically by others, loaded (never stored) with a relaxed load of four bytes.
        unsafe { AtomicU32::from_ptr(field.cast_mut()) }.load(Ordering::Relaxed)
    }

    /// The current generation, with acquire ordering: what the driver wrote before publishing
    /// it is visible to the loads after this one.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        let g = self.load_generation_relaxed();
        fence(Ordering::Acquire);
        g
    }

    #[inline]
    fn load_generation_relaxed(&self) -> u64 {
        let p = self.page.as_ptr();
        // SAFETY (of the place expression only, no load): `p` points to a live page (type
        // invariant), so projecting to a field stays inside it.
        self.load64(unsafe { addr_of!((*p).generation) })
    }

    /// What changed since generation `seen`. When nothing did, this is one load.
    pub(crate) fn poll(&self, seen: u64) -> InvalPoll {
        let g = self.load_generation_relaxed();
        if g == seen {
            return InvalPoll::Nothing;
        }
        // The header's "generation (acquire)": the entries and flush_generation the driver
        // wrote before this generation are visible to the loads below.
        fence(Ordering::Acquire);
        let p = self.page.as_ptr();
        // SAFETY (place expression only): a field of the live page.
        let flush = self.load64(unsafe { addr_of!((*p).flush_generation) });
        if flush > seen || g < seen || g - seen > RING {
            return InvalPoll::FlushAll { upto: g };
        }
        let mut regions = Vec::with_capacity((g - seen) as usize);
        for n in seen + 1..=g {
            let i = ((n - 1) % RING) as usize;
            // SAFETY (place expression only): `i < QHCA_INVAL_RING_ENTRIES`, the array's
            // length, so this is an entry of the live page.
            let e = unsafe { addr_of!((*p).ring[i]) };
            // SAFETY (place expressions only): fields of that entry.
            let (seq, start, length, key) = unsafe {
                (
                    addr_of!((*e).seq),
                    addr_of!((*e).start),
                    addr_of!((*e).length),
                    addr_of!((*e).key),
                )
            };
            let before = self.load64(seq);
            fence(Ordering::Acquire); // seq (acquire), then the fields
            let r = Revocation {
                key: self.load32(key),
                start: self.load64(start),
                length: self.load64(length),
            };
            fence(Ordering::Acquire); // the read barrier: the fields before seq again
            let after = self.load64(seq);
            if before != n || after != n {
                // The driver rewrote the entry for revocation n + RING (or more) under us.
                return InvalPoll::FlushAll { upto: g };
            }
            regions.push(r);
        }
        InvalPoll::Revoked { regions, upto: g }
    }
}

/// A context's invalidation page (`struct qhca_inval_page`), mapped read-only: where the driver
/// publishes the watched regions ([`crate::WatchedMr`]) it revoked, for registration caches to
/// learn it without a system call. [`crate::Context::inval_page`] maps it once per context.
///
/// The driver numbers its revocations (the page's generation) and keeps the last
/// `QHCA_INVAL_RING_ENTRIES` in a ring. A reader remembers the generation it has seen and asks
/// [`InvalPage::poll`] what changed since: one load when nothing did. If more revocations happened
/// than the ring holds, or the driver revoked everything (the device stopped), the answer is
/// [`InvalPoll::FlushAll`]: assume every watched region is revoked.
///
/// # Invariants
///
/// `reader` reads the start of `map`, a live shared read-only mapping of one page of the
/// device file, not unmapped until `self` is dropped.
#[derive(Debug)]
pub struct InvalPage {
    reader: PageReader,
    map: MmapRaw,
}

impl InvalPage {
    /// Maps the page of a host test's stand-in file (at [`STAND_IN_OFFSET`]).
    pub(crate) fn map(fd: BorrowedFd<'_>) -> Result<InvalPage> {
        Self::map_at(fd, STAND_IN_OFFSET)
    }

    /// Maps the page at `offset`: where the RDMA core's uverbs node offers it
    /// (`qhca_ib_alloc_ucontext_resp.inval_mmap_offset`).
    pub(crate) fn map_at(fd: BorrowedFd<'_>, offset: u64) -> Result<InvalPage> {
        let map = MmapOptions::new()
            .offset(offset)
            .len(PAGE_SIZE)
            .map_raw_read_only(fd.as_raw_fd())
            .map_err(|e| Error::Mmap {
                what: "invalidation page",
                source: errno_of(&e),
            })?;
        let page = NonNull::new(map.as_mut_ptr().cast::<qhca_inval_page>())
            .expect("a mapping does not start at NULL");
        // SAFETY: the mapping is page aligned (so 8-aligned), one page long (the struct fits,
        // checked at compile time), and lives in `map`, which is dropped with the reader; the
        // driver writes each field with one store of its width, as the header's protocol says,
        // and nothing in this process can write it (PROT_READ).
        let reader = unsafe { PageReader::new(page) };
        // INVARIANT: just established.
        Ok(InvalPage { reader, map })
    }

    /// The number of revocations the driver has published on this context (acquire).
    pub fn generation(&self) -> u64 {
        self.reader.generation()
    }

    /// What the driver revoked since generation `seen` (start with [`InvalPage::generation`]
    /// when you map the page or register your first region). One load when nothing changed.
    pub fn poll(&self, seen: u64) -> InvalPoll {
        self.reader.poll(seen)
    }

    /// Length of the mapping (one page).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false (here for clippy's `len_without_is_empty`).
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }
}

/// A heap page that tests write as the driver would, with readers over it.
#[cfg(test)]
pub(crate) mod fake {
    use std::ptr::addr_of_mut;

    use qhca_uapi::qhca_inval_entry;

    use super::*;

    /// A `qhca_inval_page` on the heap, written with atomic stores only.
    ///
    /// # Invariants
    ///
    /// `page` comes from `Box::leak` and is freed only in `Drop`; every access to it is atomic.
    #[derive(Debug)]
    pub(crate) struct FakePage {
        page: NonNull<qhca_inval_page>,
    }

    // SAFETY: the page is heap memory reached only with atomic loads and stores.
    unsafe impl Send for FakePage {}
    // SAFETY: as for `Send`.
    unsafe impl Sync for FakePage {}

    /// A [`PageReader`] of a [`FakePage`], which it borrows.
    pub(crate) struct FakeReader<'a> {
        reader: PageReader,
        _page: std::marker::PhantomData<&'a FakePage>,
    }

    impl std::ops::Deref for FakeReader<'_> {
        type Target = PageReader;
        fn deref(&self) -> &PageReader {
            &self.reader
        }
    }

    /// # Safety
    ///
    /// `field` is an aligned `u64` of a live page that is only ever accessed atomically.
    unsafe fn store64(field: *mut u64, v: u64, order: Ordering) {
        // SAFETY: the caller's promise.
        unsafe { AtomicU64::from_ptr(field) }.store(v, order)
    }

    impl FakePage {
        pub(crate) fn new() -> FakePage {
            let empty = qhca_inval_entry {
                seq: 0,
                start: 0,
                length: 0,
                key: 0,
                rsvd: 0,
            };
            let page = Box::new(qhca_inval_page {
                generation: 0,
                flush_generation: 0,
                ring_entries: QHCA_INVAL_RING_ENTRIES,
                rsvd0: 0,
                rsvd1: 0,
                ring: [empty; RING as usize],
            });
            FakePage {
                page: NonNull::from(Box::leak(page)),
            }
        }

        /// A reader over the page, which borrows it: the page outlives the reader.
        pub(crate) fn reader(&self) -> FakeReader<'_> {
            FakeReader {
                // SAFETY: an 8-aligned heap page written only atomically (type invariant),
                // freed only when `self` drops, which the returned value's borrow of `self`
                // puts after the reader's end.
                reader: unsafe { PageReader::new(self.page) },
                _page: std::marker::PhantomData,
            }
        }

        pub(crate) fn generation(&self) -> u64 {
            self.reader().generation()
        }

        pub(crate) fn poll(&self, seen: u64) -> InvalPoll {
            self.reader().poll(seen)
        }

        /// Writes the entry of revocation number `n`, without publishing the generation.
        pub(crate) fn write_entry(&self, n: u64, key: u32, start: u64, length: u64) {
            let i = ((n - 1) % RING) as usize;
            let p = self.page.as_ptr();
            // SAFETY: `i` is inside the ring, so every place is an aligned field of our live
            // page, which is only ever accessed atomically (type invariant).
            unsafe {
                let e = addr_of_mut!((*p).ring[i]);
                store64(addr_of_mut!((*e).seq), 0, Ordering::Relaxed);
                fence(Ordering::Release);
                store64(addr_of_mut!((*e).start), start, Ordering::Relaxed);
                store64(addr_of_mut!((*e).length), length, Ordering::Relaxed);
                AtomicU32::from_ptr(addr_of_mut!((*e).key)).store(key, Ordering::Relaxed);
                store64(addr_of_mut!((*e).seq), n, Ordering::Release);
            }
        }

        pub(crate) fn set_generation(&self, g: u64) {
            let p = self.page.as_ptr();
            // SAFETY: an aligned field of our live page, only accessed atomically.
            unsafe { store64(addr_of_mut!((*p).generation), g, Ordering::Release) }
        }

        /// Publishes one revocation, as the driver does; returns its generation.
        pub(crate) fn revoke(&self, key: u32, start: u64, length: u64) -> u64 {
            let g = self.generation() + 1;
            self.write_entry(g, key, start, length);
            self.set_generation(g);
            g
        }

        /// Publishes a revocation of everything; returns its generation.
        pub(crate) fn revoke_all(&self) -> u64 {
            let g = self.generation() + 1;
            let p = self.page.as_ptr();
            // SAFETY: an aligned field of our live page, only accessed atomically.
            unsafe { store64(addr_of_mut!((*p).flush_generation), g, Ordering::Relaxed) };
            self.set_generation(g);
            g
        }
    }

    impl Drop for FakePage {
        fn drop(&mut self) {
            // SAFETY: from `Box::leak` in `new` and freed only here; readers are gone (see
            // `reader`).
            drop(unsafe { Box::from_raw(self.page.as_ptr()) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakePage;
    use super::*;

    #[test]
    fn nothing_then_revocations_in_order() {
        let page = FakePage::new();
        let r = page.reader();
        assert_eq!(r.poll(0), InvalPoll::Nothing);
        page.revoke(0x101, 0x1000, 0x2000);
        page.revoke(0x202, 0x8000, 0x1000);
        let InvalPoll::Revoked { regions, upto } = r.poll(0) else {
            panic!("expected revocations")
        };
        assert_eq!(upto, 2);
        assert_eq!(
            regions,
            [
                Revocation {
                    key: 0x101,
                    start: 0x1000,
                    length: 0x2000
                },
                Revocation {
                    key: 0x202,
                    start: 0x8000,
                    length: 0x1000
                }
            ]
        );
        // From a later point, only the newer one.
        assert!(
            matches!(r.poll(1), InvalPoll::Revoked { regions, upto: 2 } if regions.len() == 1 && regions[0].key == 0x202)
        );
        assert_eq!(r.poll(2), InvalPoll::Nothing);
    }

    #[test]
    fn a_wrapped_ring_or_a_flush_means_everything() {
        let page = FakePage::new();
        let r = page.reader();
        for k in 0..RING as u32 {
            page.revoke(k, 0, 4096);
        }
        // Exactly a ring's worth since 0: still readable.
        assert!(
            matches!(r.poll(0), InvalPoll::Revoked { regions, .. } if regions.len() == RING as usize)
        );
        page.revoke(999, 0, 4096);
        assert_eq!(r.poll(0), InvalPoll::FlushAll { upto: RING + 1 });
        assert!(matches!(r.poll(1), InvalPoll::Revoked { .. }));

        let g = page.revoke_all();
        assert_eq!(r.poll(g - 1), InvalPoll::FlushAll { upto: g });
        // A flush before what was seen is old news.
        page.revoke(5, 0, 4096);
        assert!(matches!(r.poll(g), InvalPoll::Revoked { regions, .. } if regions[0].key == 5));
        // A page that went backwards is not trusted.
        assert_eq!(r.poll(g + 10), InvalPoll::FlushAll { upto: g + 1 });
    }

    #[test]
    fn an_entry_rewritten_under_the_reader_is_a_wrap() {
        let page = FakePage::new();
        let r = page.reader();
        page.revoke(1, 0, 4096);
        page.revoke(2, 0, 4096);
        // The driver already started writing revocation 2 + RING into entry 2's slot (seq 0 or
        // the new number), while the generation the reader loads is still 2.
        page.write_entry(2 + RING, 7, 0, 4096);
        assert_eq!(r.poll(0), InvalPoll::FlushAll { upto: 2 });
        assert!(matches!(r.poll(1), InvalPoll::FlushAll { .. }));
    }

    #[test]
    fn mapping_a_file_that_is_not_a_device_fails_cleanly() {
        let ctx = crate::Context::open_unchecked(std::path::Path::new("/dev/null")).unwrap();
        assert!(matches!(
            ctx.inval_page(),
            Err(Error::Mmap {
                what: "invalidation page",
                ..
            })
        ));
    }
}
