// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The cases, in their default order. Each leaves the device as it found it: contexts closed,
//! helpers reaped, the driver loaded and bound (the last two cases unbind and unload it, and put
//! it back, even when they fail part-way).

use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::sys::stat::{major, minor};
use qhca::{Context, DbType, DbWord, DeviceInfo, Error};
use qhca_uapi::db::DB_QN_MASK;
use qhca_uapi::{
    CAP_KNOWN_MASK, CAP_UAR_ISOLATION, QHCA_ABI_VERSION, QHCA_PCI_DEVICE_ID, QHCA_PCI_VENDOR_ID,
    UAR_PAGE_SIZE,
};

pub(crate) mod ib_port;
mod lifecycle;
pub(crate) mod rdma_core;

pub(crate) use ib_port::{gid_text, ib_device_of, ip, link_up, netdev_of};
use ib_port::{ib_gids, ib_port_counters};
use lifecycle::{reload_module, unbind_while_open};
use rdma_core::{ib_device, ib_provider, ib_ucontext};

use crate::harness::{Case, CaseResult, Fail, T};
use crate::sys::{self, RawMap};
use crate::system::{self, describe, find_tool, run_tool, wait_for, Config, Holder, Unbound};
use crate::{bail, check, check_eq, check_errno, fail, require};

/// How long a node may take to appear after bind/insmod.
const NODE_TIMEOUT: Duration = Duration::from_secs(10);

/// Every case, in the default order: the verbs cases ([`crate::verbs`]) run always (there is no
/// switch that skips them by accident); the ones that unbind or unload the driver come last.
pub fn all() -> Vec<Case<Config>> {
    let mut v = base();
    let at = v.len() - 2;
    v.splice(at..at, crate::verbs::cases());
    let at = v.len() - 2;
    v.splice(at..at, crate::ibverbs::cases());
    let at = v.len() - 2;
    v.splice(at..at, crate::rdma_cm::cases());
    let at = v.len() - 2;
    v.splice(at..at, crate::nvme_rdma::cases());
    let at = v.len() - 2;
    v.splice(at..at, crate::frameworks::cases());
    let at = v.len() - 2;
    v.splice(at..at, crate::disassociate::cases());
    let at = v.len() - 2;
    v.splice(at..at, crate::messaging::cases());
    let at = v.len() - 2;
    v.splice(at..at, crate::disassociate::destructive_cases());
    v
}

fn base() -> Vec<Case<Config>> {
    vec![
        Case {
            name: "device_node",
            run: device_node,
        },
        Case {
            name: "query_device",
            run: query_device,
        },
        Case {
            name: "ib_device",
            run: ib_device,
        },
        Case {
            name: "ib_gids",
            run: ib_gids,
        },
        Case {
            name: "ib_port_counters",
            run: ib_port_counters,
        },
        Case {
            name: "ib_ucontext",
            run: ib_ucontext,
        },
        Case {
            name: "ib_provider",
            run: ib_provider,
        },
        Case {
            name: "doorbell_page_per_process",
            run: doorbell_page_per_process,
        },
        Case {
            name: "doorbell_page_exhaustion",
            run: doorbell_page_exhaustion,
        },
        Case {
            name: "mmap_doorbell",
            run: mmap_doorbell,
        },
        Case {
            name: "doorbell_mapping_keeps_page",
            run: doorbell_mapping_keeps_page,
        },
        Case {
            name: "unbind_while_open",
            run: unbind_while_open,
        },
        Case {
            name: "reload_module",
            run: reload_module,
        },
    ]
}

/// A doorbell naming a queue this context does not own: the device drops and counts it.
fn stray_doorbell() -> u64 {
    DbWord::new(DbType::Sq, 0, 0).raw()
}

/// Opens and queries, returning both (an error is reported at the caller's line).
#[track_caller]
fn open_query(dev: &Path) -> Result<(Context, qhca::DeviceAttr), Fail> {
    let ctx = Context::open(dev)?;
    let attr = ctx.query()?;
    Ok((ctx, attr))
}

/// Case 1: The node, its sysfs entries, and discovery through the provider.
fn device_node(t: &mut T, cfg: &Config) -> CaseResult {
    let meta = match std::fs::metadata(&cfg.dev) {
        Ok(m) => m,
        Err(e) => bail!("{}: {e}", cfg.dev.display()),
    };
    check!(
        t,
        meta.file_type().is_char_device(),
        "{} is not a character device",
        cfg.dev.display()
    );
    // The sysfs entry of the node's numbers (not of its name, which udev chose): a device of the
    // RDMA core's uverbs class, named as the node, whose parent is the PCI device under test.
    let rdev = meta.rdev();
    let numbers = format!("{}:{}", major(rdev), minor(rdev));
    let sys = Path::new("/sys/dev/char").join(&numbers);
    require!(t, sys.is_dir(), "{} is missing", sys.display());
    let link_name = |l: &str| {
        std::fs::read_link(sys.join(l))
            .ok()
            .and_then(|p| p.file_name()?.to_str().map(str::to_owned))
    };
    check_eq!(
        t,
        link_name("subsystem").as_deref(),
        Some("infiniband_verbs"),
        "the class of {}",
        sys.display()
    );
    let class_dir = Path::new(qhca::SYSFS_UVERBS_DIR).join(cfg.dev.file_name().unwrap_or_default());
    let dev_attr = std::fs::read_to_string(class_dir.join("dev"))?;
    check_eq!(
        t,
        dev_attr.trim(),
        numbers,
        "{}/dev matches the node's numbers",
        class_dir.display()
    );

    // The PCI device behind it: our IDs, bound to our driver.
    let bdf = system::pci_bdf(cfg)?;
    check_eq!(
        t,
        link_name("device"),
        Some(bdf.clone()),
        "the node's parent"
    );
    let pci = Path::new("/sys/bus/pci/devices").join(&bdf);
    check_eq!(
        t,
        std::fs::read_to_string(pci.join("vendor"))?.trim(),
        format!("{QHCA_PCI_VENDOR_ID:#06x}")
    );
    check_eq!(
        t,
        std::fs::read_to_string(pci.join("device"))?.trim(),
        format!("{QHCA_PCI_DEVICE_ID:#06x}")
    );
    check!(
        t,
        cfg.driver_dir().join(&bdf).exists(),
        "{bdf} is not bound to {}",
        cfg.driver_dir().display()
    );

    // qhca::devices(): the RDMA core's device of this PCI device, by its name and uverbs node
    // (the node under test); `qhca0` names the first.
    let core = qhca::devices()?;
    let Some(mine) = core
        .iter()
        .find(|d| d.pci_addr.as_deref() == Some(bdf.as_str()))
    else {
        fail!(t, "qhca::devices() did not list {bdf}: {core:?}");
        return Err(Fail::recorded());
    };
    check_eq!(t, Some(&mine.name), ib_device_of(&bdf).as_ref(), "{mine:?}");
    check_eq!(
        t,
        Some(&mine.path),
        qhca::uverbs_node(&bdf).as_ref(),
        "{mine:?}"
    );
    check_eq!(t, mine.path, cfg.dev, "{mine:?}");
    check_eq!(t, mine.netdev(), netdev_of(&bdf), "{mine:?}");
    let sorted = core.windows(2).all(|w| w[0].pci_addr < w[1].pci_addr);
    check!(t, sorted, "devices() in PCI address order: {core:?}");
    check_eq!(t, &DeviceInfo::find(&mine.name)?, mine);
    check_eq!(t, DeviceInfo::find("qhca0")?, core[0]);
    let missing = DeviceInfo::find("qhca4095");
    check!(
        t,
        matches!(missing, Err(Error::NotFound { ref name }) if name == "qhca4095"),
        "{missing:?}"
    );
    Ok(())
}

/// Case 2: The device's attributes (what GET_CONTEXT answers on the core's node) are what QEMU
/// was configured with.
fn query_device(t: &mut T, cfg: &Config) -> CaseResult {
    let (_ctx, a) = open_query(&cfg.dev)?;
    check_eq!(t, a.abi_version, QHCA_ABI_VERSION, "driver ABI");
    check_eq!(t, a.device_abi_version, QHCA_ABI_VERSION, "device ABI");
    check_eq!(
        t,
        a.num_uars,
        cfg.expect_num_uars,
        "num_uars vs QHCA_EXPECT_NUM_UARS"
    );
    check_eq!(t, a.vendor_id, QHCA_PCI_VENDOR_ID);
    check_eq!(t, a.vendor_part_id, QHCA_PCI_DEVICE_ID);
    check!(t, a.has_cap(CAP_UAR_ISOLATION), "caps = {:#x}", a.caps);
    check_eq!(
        t,
        a.caps & !CAP_KNOWN_MASK,
        0,
        "capability bits this ABI does not define"
    );
    check!(
        t,
        a.uar_index < a.num_uars,
        "uar_index {} >= num_uars {}",
        a.uar_index,
        a.num_uars
    );
    // Another context is told the same, but for its own doorbell page.
    let (_other, b) = open_query(&cfg.dev)?;
    check!(
        t,
        b.uar_index != a.uar_index,
        "two contexts on page {}",
        a.uar_index
    );
    check_eq!(
        t,
        qhca::DeviceAttr {
            uar_index: a.uar_index,
            ..b
        },
        a,
        "another context's attributes"
    );
    check_eq!(t, a.max_qp_rd_atom, 16, "max_qp_rd_atom");
    check_eq!(t, a.max_qp_init_rd_atom, 16, "max_qp_init_rd_atom");
    check!(t, a.supports_ud(), "QHCA_CAP_UD in caps {:#x}", a.caps);
    check_eq!(t, a.max_ah, 4096, "max_ah");
    // Memory windows: advertised, with the device's limit.
    check!(
        t,
        a.has_cap(qhca_uapi::CAP_MW),
        "QHCA_CAP_MW in caps {:#x}",
        a.caps
    );
    check_eq!(t, a.max_mw, 4096, "max_mw");
    // On-demand paging: the device advertises it, for RC and UD as it implements them.
    check!(
        t,
        a.has_cap(qhca_uapi::CAP_ODP),
        "QHCA_CAP_ODP in caps {:#x}",
        a.caps
    );
    check!(
        t,
        a.odp_caps.supported() && a.odp_caps.implicit(),
        "ODP caps {:?}",
        a.odp_caps
    );
    check_eq!(
        t,
        a.odp_caps.rc_odp_caps,
        0x3f,
        "SEND RECV WRITE READ ATOMIC SRQ_RECV on RC"
    );
    check_eq!(t, a.odp_caps.ud_odp_caps, 0x1, "SEND on UD");
    Ok(())
}

/// Case 3: Every process gets its own doorbell page, and a freed page is handed out again
/// (lowest free index first).
fn doorbell_page_per_process(t: &mut T, cfg: &Config) -> CaseResult {
    require!(
        t,
        cfg.expect_num_uars >= 3,
        "needs at least 3 doorbell pages, QEMU has {}",
        cfg.expect_num_uars
    );
    let (ctx, mine) = open_query(&cfg.dev)?;
    let mine = mine.uar_index;

    let a = Holder::spawn(&cfg.dev, false)?
        .map_err(|e| Fail::new(file!(), line!(), format!("helper a: {e}")))?;
    let b = Holder::spawn(&cfg.dev, false)?
        .map_err(|e| Fail::new(file!(), line!(), format!("helper b: {e}")))?;
    check!(t, a.uar_index != mine, "helper a got our page {mine}");
    check!(t, b.uar_index != mine, "helper b got our page {mine}");
    check!(
        t,
        a.uar_index != b.uar_index,
        "both helpers got page {}",
        a.uar_index
    );
    for (name, h) in [("a", &a), ("b", &b)] {
        check!(
            t,
            h.uar_index < cfg.expect_num_uars,
            "helper {name}: uar_index {}",
            h.uar_index
        );
    }

    // a's page was the lowest free one when a opened; it is again once a has exited.
    let freed = a.uar_index;
    let status = a.finish()?;
    check!(t, status.success(), "helper a exited with {status}");
    let c = Holder::spawn(&cfg.dev, false)?
        .map_err(|e| Fail::new(file!(), line!(), format!("helper c: {e}")))?;
    check_eq!(
        t,
        c.uar_index,
        freed,
        "the page a freed is handed out again"
    );

    check_eq!(
        t,
        ctx.query()?.uar_index,
        mine,
        "our own page did not change"
    );
    let (sb, sc) = (b.finish()?, c.finish()?);
    check!(
        t,
        sb.success() && sc.success(),
        "helpers exited with {sb} and {sc}"
    );
    Ok(())
}

/// Raises RLIMIT_NOFILE so that `need` more files can be opened.
fn raise_nofile(need: u64) -> Result<(), Fail> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < need + 64 {
        let want = need + 64;
        setrlimit(Resource::RLIMIT_NOFILE, want, hard.max(want))?;
    }
    Ok(())
}

/// Case 4: There are exactly num_uars contexts, the driver's kernel context (the one of the
/// kernel's consumers) among them; the next open fails with ENOSPC, in this process and in
/// another, until one is closed.
fn doorbell_page_exhaustion(t: &mut T, cfg: &Config) -> CaseResult {
    let kernel = system::kernel_uar(cfg)?;
    let pages: Vec<u32> = (0..cfg.expect_num_uars)
        .filter(|&p| Some(p) != kernel)
        .collect();
    let n = pages.len() as u32;
    raise_nofile(u64::from(n) + 1)?;
    let mut held: Vec<(Context, u32)> = Vec::new();
    for i in 0..n {
        match open_query(&cfg.dev) {
            Ok((c, a)) => held.push((c, a.uar_index)),
            Err(f) => {
                fail!(
                    t,
                    "context {} of {n} could not be had: {}",
                    i + 1,
                    f.message()
                );
                return Err(Fail::recorded());
            }
        }
    }
    // Lowest free first, and nobody else holds a page: context i got the i-th page that is not
    // the kernel's.
    let got: Vec<u32> = held.iter().map(|(_, u)| *u).collect();
    check_eq!(t, got, pages, "pages handed out lowest first");

    check_errno!(
        t,
        Context::open(&cfg.dev),
        Errno::ENOSPC,
        "open number {} in this process",
        n + 1
    );
    check_errno!(
        t,
        Holder::spawn(&cfg.dev, false)?,
        Errno::ENOSPC,
        "open number {} in another process",
        n + 1
    );

    // Closing one frees exactly its page: the next open gets it, the one after fails again.
    let (victim, page) = held.remove(held.len() / 2);
    drop(victim);
    match open_query(&cfg.dev) {
        Ok((c, a)) => {
            check_eq!(t, a.uar_index, page, "the only free page");
            held.push((c, a.uar_index));
        }
        Err(f) => {
            fail!(
                t,
                "open after closing page {page}'s context: {}",
                f.message()
            );
        }
    }
    check_errno!(
        t,
        Context::open(&cfg.dev),
        Errno::ENOSPC,
        "all pages taken again"
    );

    // Closing them all frees them all.
    held.clear();
    let (_ctx, a) = open_query(&cfg.dev)?;
    check_eq!(
        t,
        a.uar_index,
        pages[0],
        "the lowest page free again after closing everything"
    );
    Ok(())
}

/// Case 5a: The doorbell page maps and takes a 64-bit store.
fn mmap_doorbell(t: &mut T, cfg: &Config) -> CaseResult {
    let (ctx, _) = open_query(&cfg.dev)?;
    let db = ctx.map_doorbell()?;
    check_eq!(t, db.len(), UAR_PAGE_SIZE);

    // Stores naming queues we do not own: the device drops them, the store itself must not fault
    // (if it did, this process would die here and the suite would print no closing lines).
    db.ring(stray_doorbell());
    db.ring(DbWord::new(DbType::Rq, 1, 1).raw());
    db.ring(DbWord::new(DbType::CqArm, DB_QN_MASK, u32::MAX).raw());
    check!(t, true, "three doorbell stores returned");

    // The same from a helper process that maps its own page and rings it on request.
    let mut h = Holder::spawn(&cfg.dev, true)?
        .map_err(|e| Fail::new(file!(), line!(), format!("helper: {e}")))?;
    check!(t, h.ring()?, "the helper died ringing its doorbell");
    let status = h.finish()?;
    check!(t, status.success(), "helper exited with {status}");

    // The driver marks the mapping VM_DONTCOPY (on the core's mmap path too, where the core
    // itself would let a child inherit it): a forked child cannot ring the parent's page (its
    // store hits no mapping: SIGSEGV).
    let ws = sys::store_in_child(&db, stray_doorbell())?;
    check!(
        t,
        sys::killed_by(&ws, Signal::SIGSEGV),
        "a forked child storing to the parent's doorbell: {ws:?}"
    );
    Ok(())
}

/// Case 5b: The mapping, not only the fd, keeps the page: it is not handed out while mapped, and
/// it is freed when the mapping goes.
fn doorbell_mapping_keeps_page(t: &mut T, cfg: &Config) -> CaseResult {
    let (ctx, a) = open_query(&cfg.dev)?;
    let mine = a.uar_index;
    let db = ctx.map_doorbell()?;
    drop(ctx);

    let (_other, b) = open_query(&cfg.dev)?;
    check!(
        t,
        b.uar_index != mine,
        "page {mine} was handed out again while still mapped"
    );
    db.ring(stray_doorbell());
    check!(
        t,
        true,
        "the store through the mapping returned after the fd was closed"
    );

    drop(db);
    let (_again, c) = open_query(&cfg.dev)?;
    check_eq!(
        t,
        c.uar_index,
        mine,
        "the page is freed when the last mapping goes (and is the lowest free)"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_are_unique_and_destructive_cases_come_last() {
        let names: Vec<_> = all().iter().map(|c| c.name).collect();
        let unique: BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        assert_eq!(
            names[names.len() - 2..],
            ["unbind_while_open", "reload_module"]
        );
    }

    #[test]
    fn verbs_cases_go_before_the_destructive_ones() {
        let all: Vec<_> = all().iter().map(|c| c.name).collect();
        let verbs: Vec<_> = crate::verbs::cases().iter().map(|c| c.name).collect();
        assert!(!verbs.is_empty());
        assert!(verbs.iter().all(|v| all.contains(v)));
        assert_eq!(all[all.len() - 2..], ["unbind_while_open", "reload_module"]);
        let unique: BTreeSet<_> = all.iter().collect();
        assert_eq!(unique.len(), all.len());
    }

    #[test]
    fn the_stray_doorbell_is_well_formed() {
        assert!(DbWord::from_raw(stray_doorbell()).is_well_formed());
    }
}
