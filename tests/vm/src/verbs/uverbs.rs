// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! The node every VM case opens: `cfg.dev` is the RDMA core's uverbs node of the device under
//! test (`/dev/infiniband/uverbsN`, its port's netdev up), found afresh for each case (a case
//! that unbinds, removes or reloads the device may leave it under another number).

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
