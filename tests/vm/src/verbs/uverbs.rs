// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Which node each VM case opens (issue 26). By default a case runs with `cfg.dev` the RDMA
//! core's uverbs node of the device under test (`/dev/infiniband/uverbsN`, its port's netdev up),
//! so that the `qhca` crate's objects are made by the core's commands and its events come from
//! the core's async file and completion channels, with the same rings, doorbell and assertions.
//! The cases [`ON_MISC_NODE`] names run on the driver's own node `/dev/qhcaN`, each for the reason
//! given there: they must be rewritten against the core's commands and the driver's methods
//! before that node and its ioctls go (step 5).

use super::*;

/// The RDMA core's device of the device under test, once the port's netdev is up (its
/// link-local address is the core's GID 0, which the core's address vectors need): what
/// `qhca::devices()` lists, and the tools open by default.
pub(crate) fn core_device(cfg: &Config) -> Result<qhca::DeviceInfo, Fail> {
    let bdf = match system::pci_bdf(cfg) {
        Ok(b) => b,
        Err(e) => bail!("{e}"),
    };
    // udev may still be renaming the netdev of a device that was just probed (eth0 becomes
    // enp0s10): its name is read once udev is done.
    if let Some(udevadm) = system::find_tool("udevadm") {
        let _ = system::run_tool(&udevadm, &["settle".as_ref(), "-t".as_ref(), "10".as_ref()]);
    }
    let mut ndev = None;
    system::wait_for(Duration::from_secs(10), || {
        ndev = crate::cases::netdev_of(&bdf);
        ndev.is_some()
    });
    let Some(ndev) = ndev else {
        bail!("{bdf}: no netdev");
    };
    crate::cases::link_up(&ndev)?;
    let mut dev = None;
    system::wait_for(Duration::from_secs(10), || {
        dev = qhca::devices().ok().and_then(|l| {
            l.into_iter()
                .find(|d| d.pci_addr.as_deref() == Some(bdf.as_str()) && d.path.exists())
        });
        dev.is_some()
    });
    match dev {
        Some(d) => Ok(d),
        None => bail!("{bdf} has no uverbs node"),
    }
}

/// `cfg` with the device under test's uverbs node as the node to open ([`core_device`]).
pub(crate) fn on_uverbs(cfg: &Config) -> Result<Config, Fail> {
    let dev = core_device(cfg)?.path;
    Ok(Config { dev, ..cfg.clone() })
}

/// The cases that run on `/dev/qhcaN`, and why.
pub(crate) const ON_MISC_NODE: &[(&str, &str)] = &[
    // The misc node itself: its sysfs entry, its fixed mmap layout, its raw ioctls (argument
    // checks, destroys by number, the event queue read by ioctl, quotas before pinning, file
    // lifetime and what a context takes at open).
    (
        "device_node",
        "the misc node's sysfs entry and misc_devices()",
    ),
    ("query_device", "QUERY_DEVICE by raw ioctl"),
    ("mmap_doorbell", "the misc node's fixed mmap offsets"),
    ("mmap_bad_args", "the misc node's fixed mmap offsets"),
    ("ioctl_bad_args", "raw ioctls"),
    ("verbs_objects", "destroys by number (raw ioctls)"),
    ("verbs_destroy_in_use", "destroys by number (raw ioctls)"),
    (
        "verbs_odp_registers_nothing_pinned",
        "ADVISE_MR's checks by raw ioctl",
    ),
    (
        "verbs_watch_revokes_on_munmap",
        "REG_MR with WATCHED by raw ioctl",
    ),
    (
        "verbs_watch_revokes_only_the_pages_that_went",
        "REG_MR with WATCHED by raw ioctl",
    ),
    ("verbs_mw_dereg_with_window_bound", "DEREG_MR by raw ioctl"),
    ("verbs_mw_ioctl_checks", "raw ioctls"),
    ("verbs_ud_ah_checks", "CREATE_AH by raw ioctl"),
    ("verbs_port_query", "QUERY_PORT by raw ioctl"),
    ("async_event_and_poll", "GET_ASYNC_EVENT by raw ioctl"),
    (
        "open_takes_no_doorbell_page",
        "the misc file's lazy doorbell page",
    ),
    ("mr_limits_before_pinning", "REG_MR by raw ioctl"),
    ("large_mr_pinned_outside_lock", "REG_MR by raw ioctl"),
    ("events_routed_by_context", "the event queue by raw ioctl"),
    ("eq_overflow_reported", "the event queue by raw ioctl"),
    ("dead_queue_stops_device", "commands by raw ioctl"),
    ("dead_queue_on_close", "commands by raw ioctl"),
    ("refused_destroy_leaks", "destroys by raw ioctl"),
    (
        "probe_error_stops_device",
        "the misc node across a failed probe",
    ),
    (
        "uar_count_checked_against_bar",
        "the misc node across a reprobe",
    ),
    ("remove_under_traffic", "the misc node across removal"),
    ("perf_exits_on_removal", "the misc node across removal"),
    ("unbind_with_a_stalled_fault", "the misc node across unbind"),
    ("unbind_while_open", "the misc node across unbind"),
    ("reload_module", "the misc node across a reload"),
    // SET_GID: on the core's node a port's addresses are its netdev's.
    ("ib_gids", "SET_GID against the core's entries"),
    ("verbs_port_set_gid", "SET_GID"),
    ("verbs_port_addr_tool", "qhca-info addr add (SET_GID)"),
    // Where the core's rules differ from the misc ABI's.
    (
        "verbs_mw_rebind_and_invalidate",
        "type 2A windows (the core's type 2 is 2B)",
    ),
];

/// The configuration case `name` runs with: `cfg` on the core's node ([`on_uverbs`]), but for
/// the cases of [`ON_MISC_NODE`].
pub(crate) fn config_for(name: &str, cfg: &Config) -> Result<Config, Fail> {
    if ON_MISC_NODE.iter().any(|(n, _)| *n == name) {
        Ok(cfg.clone())
    } else {
        on_uverbs(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_misc_node_list_names_cases_that_exist_once() {
        let all = crate::cases::all();
        for (name, why) in ON_MISC_NODE {
            assert_eq!(
                all.iter().filter(|c| c.name == *name).count(),
                1,
                "{name} ({why})"
            );
            assert!(!why.is_empty(), "{name}");
        }
        let mut names: Vec<_> = ON_MISC_NODE.iter().map(|(n, _)| n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ON_MISC_NODE.len());
    }
}
