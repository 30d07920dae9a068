// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! qhca as a device of the kernel's RDMA core: in `/sys/class/infiniband` and in the `rdma` tool,
//! with what the device says of itself.
//!
//! The driver names the device `qhcaN`; udev may rename it, as it does every PCI RDMA device,
//! where rdma-core's naming rule is installed (Debian's renames by PCI location: `rocep0s10`).
//! So the cases find it under its PCI device.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use qhca::PortState;
use qhca_uapi::{qhca_ib_alloc_ucontext_resp, QHCA_IB_UVERBS_ABI_VERSION};

/// The core's write-ABI commands (`enum ib_uverbs_write_cmds`).
const CMD_GET_CONTEXT: u32 = 0;
const CMD_ALLOC_PD: u32 = 3;
const CMD_DEALLOC_PD: u32 = 4;

use crate::verbs::limits::held;

use super::*;

/// The RDMA core's devices under PCI device `bdf` (`/sys/bus/pci/devices/BDF/infiniband/*`).
pub(super) fn ib_dirs(bdf: &str) -> Vec<PathBuf> {
    let dir = Path::new("/sys/bus/pci/devices")
        .join(bdf)
        .join("infiniband");
    match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    }
}

/// True once PCI device `bdf` has exactly one RDMA core device.
pub(super) fn has_ib_device(bdf: &str) -> bool {
    ib_dirs(bdf).len() == 1
}

/// Where the RDMA core shows its devices.
const IB_CLASS: &str = "/sys/class/infiniband";

/// A PCI address as udev's names spell it: `0000:00:0a.0` is `p0s10` (a domain other than 0 is
/// `P<d>` first; a function other than 0 is `f<n>` last).
fn pci_location(bdf: &str) -> String {
    let num = |s: &str| u32::from_str_radix(s, 16).unwrap_or(u32::MAX);
    let (dom_bus, dev_fn) = bdf.rsplit_once(':').unwrap_or(("", ""));
    let (dom, bus) = dom_bus.split_once(':').unwrap_or(("0", "0"));
    let (dev, func) = dev_fn.split_once('.').unwrap_or(("0", "0"));
    let mut s = String::new();
    if num(dom) != 0 {
        s += &format!("P{}", num(dom));
    }
    s += &format!("p{}s{}", num(bus), num(dev));
    if num(func) != 0 {
        s += &format!("f{}", num(func));
    }
    s
}

/// Reads a sysfs attribute, trimmed.
fn attr(dir: &Path, name: &str) -> Result<String, Fail> {
    let p = dir.join(name);
    std::fs::read_to_string(&p)
        .map(|s| s.trim().to_owned())
        .map_err(|e| Fail::new(file!(), line!(), format!("{}: {e}", p.display())))
}

/// A GUID as sysfs and the `rdma` tool print it: four groups of four hex digits.
fn guid_text(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// Case: the RDMA core lists qhca0, a child of our PCI device, with the device's GUID and
/// firmware version and a RoCE port in the state the device reports; the `rdma` tool (netlink)
/// sees the same.
pub(super) fn ib_device(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    require!(
        t,
        wait_for(NODE_TIMEOUT, || has_ib_device(&bdf)),
        "{bdf} has no single RDMA core device: {:?}",
        ib_dirs(&bdf)
    );
    let name = ib_dirs(&bdf)[0]
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let want = format!("roce{}", pci_location(&bdf));
    check!(
        t,
        name == "qhca0" || name == want,
        "named {name}: neither the driver's qhca0 nor udev's {want}"
    );
    let dir = Path::new(IB_CLASS).join(&name);
    let (ctx, a) = open_query(&cfg.dev)?;
    let port = ctx.query_port()?;
    drop(ctx);

    let parent = std::fs::canonicalize(dir.join("device"))?;
    check_eq!(
        t,
        parent.file_name().and_then(|n| n.to_str()),
        Some(bdf.as_str()),
        "{} is a child of our PCI device",
        dir.display()
    );
    check_eq!(t, attr(&dir, "node_type")?, "1: CA");
    check_eq!(t, attr(&dir, "node_guid")?, guid_text(a.node_guid));
    check_eq!(t, attr(&dir, "sys_image_guid")?, guid_text(a.node_guid));
    let v = a.fw_version;
    check_eq!(
        t,
        attr(&dir, "fw_ver")?,
        format!("{}.{}.{}", v >> 32, (v >> 16) & 0xffff, v & 0xffff)
    );
    check_eq!(t, attr(&dir, "node_desc")?, "qhca emulated RDMA NIC");

    let p1 = dir.join("ports/1");
    check_eq!(t, attr(&p1, "link_layer")?, "Ethernet");
    let (state, phys) = match port.state {
        PortState::Active => ("4: ACTIVE", "5: LinkUp"),
        _ => ("1: DOWN", "3: Disabled"),
    };
    check_eq!(t, attr(&p1, "state")?, state);
    check_eq!(t, attr(&p1, "phys_state")?, phys);
    check!(
        t,
        !dir.join("ports/2").exists(),
        "one port only: {}",
        dir.join("ports/2").display()
    );
    // A RoCE port's GID table has the device's length; each entry has a type.
    let gids = std::fs::read_dir(p1.join("gids"))?.count();
    check_eq!(t, gids, usize::from(port.gid_tbl_len), "GID table entries");
    check!(
        t,
        p1.join("gid_attrs/types/0").exists(),
        "gid_attrs/types/0 missing"
    );
    check_eq!(t, attr(&p1, "pkeys/0")?, "0xffff", "the default P_Key");

    // The same through rdma netlink.
    let Some(rdma) = find_tool("rdma") else {
        bail!("the rdma tool (iproute2) is not installed");
    };
    let out = run_tool(&rdma, &["dev".as_ref(), "show".as_ref(), name.as_ref()])?;
    let text = String::from_utf8_lossy(&out.stdout);
    check!(
        t,
        out.status.success()
            && text.contains(&format!(": {name}: node_type ca"))
            && text.contains(&format!("node_guid {}", guid_text(a.node_guid))),
        "rdma dev show {name}: {}",
        describe(&out)
    );
    let link = format!("{name}/1");
    let out = run_tool(&rdma, &["link".as_ref(), "show".as_ref(), link.as_ref()])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let want = match port.state {
        PortState::Active => "state ACTIVE physical_state LINK_UP",
        _ => "state DOWN physical_state DISABLED",
    };
    check!(
        t,
        out.status.success() && text.contains(want),
        "rdma link show {link} (want \"{want}\"): {}",
        describe(&out)
    );
    Ok(())
}

/// The uverbs device of PCI device `bdf` (`/dev/infiniband/uverbsN`), once udev made its node.
fn uverbs_node(bdf: &str) -> Option<(PathBuf, PathBuf)> {
    let class = Path::new("/sys/bus/pci/devices")
        .join(bdf)
        .join("infiniband_verbs");
    let name = std::fs::read_dir(&class).ok()?.next()?.ok()?.file_name();
    let node = Path::new("/dev/infiniband").join(&name);
    node.exists().then(|| (class.join(name), node))
}

/// Sends one of the core's write-ABI commands as libibverbs does: the header (command, then the
/// request's and the response's length in 4-byte words, the header counted in the request's),
/// then `req`; the kernel writes the response (the core's, then the driver's) into `resp`.
fn write_cmd(fd: RawFd, command: u32, req: &[u8], resp: &mut [u8]) -> nix::Result<()> {
    let mut cmd = Vec::with_capacity(8 + req.len());
    cmd.extend_from_slice(&command.to_ne_bytes());
    cmd.extend_from_slice(&(((8 + req.len()) / 4) as u16).to_ne_bytes());
    cmd.extend_from_slice(&((resp.len() / 4) as u16).to_ne_bytes());
    cmd.extend_from_slice(req);
    // SAFETY: `fd` is open; the kernel writes at most `resp.len()` bytes at `resp` (the address
    // `req` carries for commands with a response), which lives across the call.
    let n = unsafe { libc::write(fd, cmd.as_ptr().cast(), cmd.len()) };
    if n < 0 {
        return Err(nix::errno::Errno::last());
    }
    Ok(())
}

fn word(b: &[u8], i: usize) -> u32 {
    u32::from_ne_bytes(b[i..i + 4].try_into().unwrap_or_default())
}

fn dword(b: &[u8], i: usize) -> u64 {
    u64::from_ne_bytes(b[i..i + 8].try_into().unwrap_or_default())
}

/// GET_CONTEXT (`ibv_cmd_get_context`): the core's response (async fd, completion vectors),
/// then qhca's.
pub(crate) fn get_context(fd: RawFd) -> nix::Result<(u32, u32, qhca_ib_alloc_ucontext_resp)> {
    const DRV: usize = std::mem::size_of::<qhca_ib_alloc_ucontext_resp>();
    let mut resp = [0u8; 8 + DRV];
    let req = (resp.as_mut_ptr() as u64).to_ne_bytes();
    write_cmd(fd, CMD_GET_CONTEXT, &req, &mut resp)?;
    // SAFETY: `resp` holds `DRV` bytes after the core's 8: a plain C struct of integers (every
    // bit pattern valid), read unaligned as the array has no alignment.
    let r = unsafe {
        std::ptr::read_unaligned(resp[8..].as_ptr().cast::<qhca_ib_alloc_ucontext_resp>())
    };
    Ok((word(&resp, 0), word(&resp, 4), r))
}

/// ALLOC_PD: the core's handle and qhca's (`struct qhca_ib_alloc_pd_resp`: pdn, reserved).
pub(crate) fn alloc_pd(fd: RawFd) -> nix::Result<(u32, u32, u32)> {
    let mut resp = [0u8; 4 + 8];
    let req = (resp.as_mut_ptr() as u64).to_ne_bytes();
    write_cmd(fd, CMD_ALLOC_PD, &req, &mut resp)?;
    Ok((word(&resp, 0), word(&resp, 4), word(&resp, 8)))
}

/// DEALLOC_PD of the core's handle `h`.
fn dealloc_pd(fd: RawFd, h: u32) -> nix::Result<()> {
    write_cmd(fd, CMD_DEALLOC_PD, &h.to_ne_bytes(), &mut [])
}

/// A user context of the RDMA core's device: the uverbs file, its async event file, and what
/// GET_CONTEXT answered.
pub(crate) struct Uverbs {
    pub(crate) fd: OwnedFd,
    async_fd: OwnedFd,
    pub(crate) resp: qhca_ib_alloc_ucontext_resp,
}

impl Uverbs {
    /// Opens the uverbs device of `bdf` and makes a context on it.
    pub(crate) fn open(bdf: &str) -> Result<(Uverbs, u32), Fail> {
        let Some((_, node)) = uverbs_node(bdf) else {
            return Err(Fail::new(
                file!(),
                line!(),
                format!("{bdf} has no uverbs node"),
            ));
        };
        let fd = nix::fcntl::open(&node, OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| Fail::new(file!(), line!(), format!("open {}: {e}", node.display())))?;
        // SAFETY: `open` returned a new descriptor, ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let (async_fd, vectors, resp) = get_context(fd.as_raw_fd())
            .map_err(|e| Fail::new(file!(), line!(), format!("GET_CONTEXT: {e}")))?;
        // SAFETY: GET_CONTEXT installed `async_fd` in this process for the caller to own.
        let async_fd = unsafe { OwnedFd::from_raw_fd(async_fd as RawFd) };
        Ok((Uverbs { fd, async_fd, resp }, vectors))
    }

    /// The next asynchronous event on the context's event file
    /// (`struct ib_uverbs_async_event_desc`: element, event type), waiting up to `timeout_ms`.
    pub(crate) fn async_event(&self, timeout_ms: u16) -> nix::Result<(u64, u32)> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        let mut fds = [PollFd::new(self.async_fd.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::from(timeout_ms))? == 0 {
            return Err(nix::errno::Errno::EAGAIN);
        }
        let mut desc = [0u8; 16];
        nix::unistd::read(self.async_fd.as_raw_fd(), &mut desc)?;
        Ok((dword(&desc, 0), word(&desc, 8)))
    }

    /// `mmap(NULL, len, prot, flags, fd, offset)` of the uverbs file.
    pub(super) fn map(
        &self,
        len: usize,
        prot: i32,
        flags: i32,
        offset: u64,
    ) -> nix::Result<RawMap> {
        RawMap::new(self.fd.as_raw_fd(), len, prot, flags, offset as i64)
    }
}

/// Case: a user context of the RDMA core's device is one of the device's doorbell pages,
/// charged to its user, its own (not another context's), offered to mmap as a shared,
/// never executable page; its PDs are the device's, charged to the user too; all of it goes back
/// when the files close.
pub(super) fn ib_ucontext(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    require!(
        t,
        wait_for(NODE_TIMEOUT, || uverbs_node(&bdf).is_some()),
        "{bdf} has no uverbs device (is ib_uverbs loaded?)"
    );
    let (class, _) = uverbs_node(&bdf).unwrap_or_default();
    check_eq!(
        t,
        attr(&class, "abi_version")?,
        QHCA_IB_UVERBS_ABI_VERSION.to_string(),
        "the uverbs device's ABI version is qhca's"
    );
    let (first, a) = open_query(&cfg.dev)?;
    let before = held(cfg, 0, "contexts")?;

    let (u, vectors) = Uverbs::open(&bdf)?;
    let r = u.resp;
    check_eq!(t, vectors, 1, "completion vectors");
    check_eq!(t, r.comp_mask, 0);
    check_eq!(t, r.rsvd, 0);
    check!(
        t,
        r.inval_mmap_offset != 0 && r.inval_mmap_offset != r.db_mmap_offset,
        "the invalidation page has a mapping of its own: {:#x}",
        r.inval_mmap_offset
    );
    // The device's attributes, as the crate's context (opened first) has them.
    let d = r.attr;
    check_eq!(
        t,
        (d.abi_version, d.num_uars, d.caps, d.node_guid, d.fw_version),
        (
            a.device_abi_version,
            a.num_uars,
            a.caps,
            a.node_guid,
            a.fw_version
        ),
        "GET_CONTEXT's device attributes"
    );
    check_eq!(
        t,
        (
            d.max_qp,
            d.max_qp_wr,
            d.max_sge,
            d.max_inline,
            d.max_cqe,
            d.max_mr_size
        ),
        (
            a.max_qp,
            a.max_qp_wr,
            a.max_sge,
            a.max_inline,
            a.max_cqe,
            a.max_mr_size
        ),
        "GET_CONTEXT's device limits"
    );
    check!(
        t,
        r.uar_index < a.num_uars && r.uar_index != a.uar_index,
        "doorbell page {} (num_uars {}, the first context's {})",
        r.uar_index,
        a.num_uars,
        a.uar_index
    );
    check_eq!(
        t,
        r.db_mmap_offset % UAR_PAGE_SIZE as u64,
        0,
        "page aligned"
    );
    check_eq!(
        t,
        held(cfg, 0, "contexts")?,
        before + 1,
        "charged to its user"
    );
    check_errno!(
        t,
        get_context(u.fd.as_raw_fd()),
        Errno::EINVAL,
        "a second GET_CONTEXT on the file"
    );

    let page = UAR_PAGE_SIZE;
    let (rw, shared) = (libc::PROT_WRITE, libc::MAP_SHARED);
    let off = r.db_mmap_offset;
    check_errno!(
        t,
        u.map(page, rw, libc::MAP_PRIVATE, off),
        Errno::EINVAL,
        "private"
    );
    check_errno!(
        t,
        u.map(page, rw | libc::PROT_EXEC, shared, off),
        Errno::EINVAL,
        "executable"
    );
    check_errno!(
        t,
        u.map(2 * page, rw, shared, off),
        Errno::EINVAL,
        "two pages"
    );
    let inval = r.inval_mmap_offset;
    check_errno!(
        t,
        u.map(page, rw, shared, off.max(inval) + page as u64),
        Errno::EINVAL,
        "past the entries"
    );
    // The invalidation page: read-only, shared.
    check_errno!(
        t,
        u.map(page, rw, shared, inval),
        Errno::EACCES,
        "a writable invalidation page"
    );
    let ro = u.map(page, libc::PROT_READ, shared, inval);
    check!(t, ro.is_ok(), "mmap of the invalidation page: {ro:?}");
    // A mapping holds the file, and so the context: unmapped before the close below.
    drop(ro);
    let db = u.map(page, rw, shared, off);
    check!(t, db.is_ok(), "mmap of the doorbell page: {db:?}");
    if let Ok(db) = db {
        check_errno!(
            t,
            db.protect(libc::PROT_READ | libc::PROT_EXEC),
            Errno::EACCES,
            "mprotect exec"
        );
        // A doorbell naming a queue the context does not own: dropped and counted by the device.
        // SAFETY: the mapping is one page of MMIO, written with one aligned 8-byte store.
        unsafe { std::ptr::write_volatile(db.addr() as *mut u64, stray_doorbell()) };
    }

    // Protection domains: the device's, charged to the user, given back by DEALLOC_PD and by
    // closing the file with one still allocated.
    let pds = held(cfg, 0, "pds")?;
    let fd = u.fd.as_raw_fd();
    let pd1 = alloc_pd(fd);
    let pd2 = alloc_pd(fd);
    check!(t, pd1.is_ok() && pd2.is_ok(), "ALLOC_PD: {pd1:?} {pd2:?}");
    if let (Ok((h1, n1, r1)), Ok((h2, n2, _))) = (pd1, pd2) {
        check!(
            t,
            h1 != h2 && n1 != n2,
            "two PDs: handles {h1} {h2}, pdns {n1} {n2}"
        );
        check_eq!(t, r1, 0, "reserved");
        check_eq!(t, held(cfg, 0, "pds")?, pds + 2, "PDs charged to the user");
        check_eq!(t, dealloc_pd(fd, h1), Ok(()), "DEALLOC_PD");
        check_errno!(t, dealloc_pd(fd, h1), Errno::ENOENT, "DEALLOC_PD again");
        check_eq!(t, held(cfg, 0, "pds")?, pds + 1, "one PD given back");
    }
    drop(u);
    check_eq!(
        t,
        held(cfg, 0, "pds")?,
        pds,
        "the last PD goes with the file"
    );
    check!(
        t,
        wait_for(NODE_TIMEOUT, || held(cfg, 0, "contexts").ok()
            == Some(before)),
        "the page is given back when the files close: held {:?}, before {before}",
        held(cfg, 0, "contexts")
    );
    drop(first);
    Ok(())
}

/// The value of `key` in `ibv_devinfo`'s output (`key:<tabs>value`), first match.
fn devinfo_field(out: &str, key: &str) -> Option<String> {
    out.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_owned())
    })
}

/// Case: the installed provider (`libqhca-rdmav34.so`, `/etc/libibverbs.d/qhca.driver`) makes the
/// device a libibverbs device with nothing preloaded: Debian's `ibv_devices` lists it with its
/// GUID, and `ibv_devinfo -v` opens it (a context: GET_CONTEXT, the doorbell page mapped, given
/// back on close) and shows the device's and the port's attributes, with no warning.
pub(super) fn ib_provider(t: &mut T, cfg: &Config) -> CaseResult {
    let bdf = system::pci_bdf(cfg)?;
    require!(
        t,
        wait_for(NODE_TIMEOUT, || has_ib_device(&bdf)
            && uverbs_node(&bdf).is_some()),
        "{bdf} has no RDMA core device with a uverbs node"
    );
    let name = ib_dirs(&bdf)[0]
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let (_first, a) = open_query(&cfg.dev)?;
    let before = held(cfg, 0, "contexts")?;
    let run = |tool: &str, args: &[&str]| -> Result<std::process::Output, Fail> {
        let Some(path) = find_tool(tool) else {
            bail!("{tool} (ibverbs-utils) is not installed");
        };
        std::process::Command::new(path)
            .args(args)
            .env_remove("LD_PRELOAD")
            .env("IBV_SHOW_WARNINGS", "1")
            .output()
            .map_err(|e| Fail::new(file!(), line!(), format!("{tool}: {e}")))
    };

    let out = run("ibv_devices", &[])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()));
    check_eq!(
        t,
        line.and_then(|l| l.split_whitespace().nth(1)),
        Some(format!("{:016x}", a.node_guid).as_str()),
        "ibv_devices lists {name} with its GUID: {}",
        describe(&out)
    );

    let out = run("ibv_devinfo", &["-v", "-d", &name])?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    check!(
        t,
        out.status.success(),
        "ibv_devinfo -v -d {name}: {}",
        describe(&out)
    );
    check!(t, !err.contains("Warning"), "libibverbs warned: {err}");
    let v = a.fw_version;
    for (key, want) in [
        ("hca_id", name.clone()),
        (
            "fw_ver",
            format!("{}.{}.{}", v >> 32, (v >> 16) & 0xffff, v & 0xffff),
        ),
        ("node_guid", guid_text(a.node_guid)),
        ("vendor_id", format!("{:#06x}", a.vendor_id)),
        ("vendor_part_id", a.vendor_part_id.to_string()),
        ("max_qp", a.max_qp.to_string()),
        ("max_pd", a.max_pd.to_string()),
        ("max_mr_size", format!("{:#x}", a.max_mr_size)),
        ("phys_port_cnt", "1".to_owned()),
        ("state", "PORT_ACTIVE (4)".to_owned()),
        ("link_layer", "Ethernet".to_owned()),
        ("gid_tbl_len", "16".to_owned()),
    ] {
        check_eq!(
            t,
            devinfo_field(&text, key),
            Some(want),
            "{key} in:\n{text}"
        );
    }
    check_eq!(
        t,
        held(cfg, 0, "contexts")?,
        before,
        "ibv_devinfo's context was given back"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_locations_as_udev_spells_them() {
        assert_eq!(pci_location("0000:00:0a.0"), "p0s10");
        assert_eq!(pci_location("0000:3b:00.1"), "p59s0f1");
        assert_eq!(pci_location("0001:00:02.0"), "P1p0s2");
    }

    #[test]
    fn guids_as_sysfs_prints_them() {
        assert_eq!(guid_text(0x5054_00ff_fe12_3456), "5054:00ff:fe12:3456");
    }
}
