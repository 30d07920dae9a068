// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The `qhca` crate over the RDMA core's uverbs node (issue 26, step 4): verbs cases run again
//! with every context opened on `/dev/infiniband/uverbsN` of the device under test, so that its
//! objects are made by the core's commands and its events come from the core's async file and
//! completion channels, with the same rings, doorbell and assertions.
//!
//! Not run here: `SET_GID` (the port's GIDs are its netdev's addresses on this node), and what
//! is `/dev/qhcaN`'s own: its raw ioctls (destroying a busy or foreign object, AH, advise,
//! port and watched-region checks),
//! mappings and file lifetime, the examples (they name `/dev/qhcaN`), type 2A windows (the core
//! has one type 2, qhca's 2B), `max_rd_atomic` at RTS -> RTS (the core allows it only at RTR ->
//! RTS) and the GRH's hop limit as the AH set it (the core takes a routed GID's from the route,
//! as for any RoCE device).

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
    let Some(ndev) = crate::cases::netdev_of(&bdf) else {
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
fn on_uverbs(cfg: &Config) -> Result<Config, Fail> {
    let dev = core_device(cfg)?.path;
    Ok(Config { dev, ..cfg.clone() })
}

macro_rules! on_uverbs {
    ($($m:ident::$name:ident),* $(,)?) => {
        vec![$(Case {
            name: concat!("uverbs_", stringify!($name)),
            run: |t, cfg| super::$m::$name(t, &on_uverbs(cfg)?),
        }),*]
    };
}

pub(super) fn cases() -> Vec<Case<Config>> {
    on_uverbs![
        data::verbs_send,
        data::verbs_send_imm,
        data::verbs_rdma_write,
        data::verbs_write_imm,
        data::verbs_rdma_read,
        data::verbs_atomics,
        data::verbs_multi_sge,
        data::verbs_inline,
        data::verbs_larger_than_mtu,
        protection::verbs_bad_rkey_flushes,
        protection::verbs_wrong_rights,
        protection::verbs_out_of_bounds_by_one,
        protection::verbs_mr_of_another_pd,
        protection::verbs_rnr_retry_infinite,
        protection::verbs_rnr_retry_zero,
        lifecycle::verbs_post_errors_and_unsignaled,
        lifecycle::verbs_cq_event,
        lifecycle::verbs_invalid_transitions,
        lifecycle::verbs_stale_cqes_cleaned,
        lifecycle::verbs_async_qp_fatal,
        lifecycle::verbs_default_rnr_is_finite,
        process::verbs_zero_syscalls,
        process::verbs_kill9_frees_everything,
        process::verbs_disassociated_context_fails_fast,
        odp::verbs_odp_rdma_write,
        odp::verbs_odp_rdma_read,
        odp::verbs_odp_send_recv,
        odp::verbs_odp_atomics,
        odp_changes::verbs_odp_madvise_refaults,
        odp_changes::verbs_odp_munmap_then_error,
        odp_changes::verbs_odp_implicit,
        odp_changes::verbs_odp_advise_prefetch,
        rcache::verbs_rcache_hits_and_misses,
        rcache::verbs_rcache_reuse_after_free,
        rcache::verbs_rcache_changes_revoke,
        rcache::verbs_rcache_eviction_spares_in_use,
        rcache::verbs_rcache_stress,
        rcache::verbs_rcache_on_demand,
        rcache::verbs_rcache_process_gone,
        mw::verbs_mw_bounds,
        mw::verbs_mw_send_with_inv,
        mw::verbs_mw_refused_binds,
        mw::verbs_mw_zero_syscalls,
        ud::verbs_ud_many_to_one,
        ud::verbs_ud_one_to_many,
    ]
}
