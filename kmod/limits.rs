// SPDX-License-Identifier: GPL-2.0

//! Per-user limits on a device's shared pools, so that no process can deny the device to
//! others: doorbell pages (contexts), PDs, CQs, QPs, memory regions, memory windows, address
//! handles and the device's on-demand translation chunks (2 MiB each).
//!
//! Each context is charged to the user who opened it (the uverbs file's effective UID, as
//! `RLIMIT_MEMLOCK` charges a process's pinned pages to it). A user may hold at most a share of
//! each pool of each device: by default half of what the device has (for chunks, half of the
//! device's 16384), or what the module parameter `user_max_<pool>` says (read at load:
//! `modprobe qhca user_max_qps=64`; 0 keeps the default). A creation beyond it fails with
//! `EDQUOT`; nothing else is touched. A context opened by a process with `CAP_SYS_RESOURCE` is
//! counted but not limited (as for resource limits).
//!
//! Charges are atomic counts, so they can be taken and given back anywhere (under a region's
//! lock during an invalidation too). A context keeps its own count of what it charged and gives
//! back whatever is left when it goes ([`Quota`]'s `Drop`), so a path that forgets to uncharge
//! costs its user nothing once the context is closed.

use crate::device::QhcaDevice;
use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc, Mutex,
    },
    task::Kuid,
};

/// The device's chunks of on-demand translations (`QHCA_LIMIT_ODP_CHUNKS` of the device model).
const DEVICE_ODP_CHUNKS: u32 = 1 << 14;

/// A shared pool of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pool {
    Contexts = 0,
    Pds,
    Cqs,
    Qps,
    Mrs,
    Mws,
    Ahs,
    OdpChunks,
    Srqs,
}

const POOLS: usize = 9;

impl Pool {
    const ALL: [Pool; POOLS] = [
        Pool::Contexts,
        Pool::Pds,
        Pool::Cqs,
        Pool::Qps,
        Pool::Mrs,
        Pool::Mws,
        Pool::Ahs,
        Pool::OdpChunks,
        Pool::Srqs,
    ];

    fn name(self) -> &'static str {
        match self {
            Pool::Contexts => "contexts",
            Pool::Pds => "pds",
            Pool::Cqs => "cqs",
            Pool::Qps => "qps",
            Pool::Mrs => "mrs",
            Pool::Mws => "mws",
            Pool::Ahs => "ahs",
            Pool::OdpChunks => "odp_chunks",
            Pool::Srqs => "srqs",
        }
    }

    /// The module parameter for this pool (0: the default).
    fn param(self) -> u32 {
        use crate::module_parameters as p;
        match self {
            Pool::Contexts => p::user_max_contexts.value(),
            Pool::Pds => p::user_max_pds.value(),
            Pool::Cqs => p::user_max_cqs.value(),
            Pool::Qps => p::user_max_qps.value(),
            Pool::Mrs => p::user_max_mrs.value(),
            Pool::Mws => p::user_max_mws.value(),
            Pool::Ahs => p::user_max_ahs.value(),
            Pool::OdpChunks => p::user_max_odp_chunks.value(),
            Pool::Srqs => p::user_max_srqs.value(),
        }
    }
}

/// What one user holds of one device's pools, and how many contexts account to it.
struct Usage {
    uid: Kuid,
    accounts: Atomic<u32>,
    held: [Atomic<u32>; POOLS],
}

impl Usage {
    fn idle(&self) -> bool {
        self.accounts.load(Relaxed) == 0 && self.held.iter().all(|h| h.load(Relaxed) == 0)
    }
}

/// Adds `n` to `c` unless that goes past `max`.
fn add_within(c: &Atomic<u32>, n: u32, max: u32) -> Result {
    let mut cur = c.load(Relaxed);
    loop {
        let new = cur.checked_add(n).filter(|&v| v <= max).ok_or(EDQUOT)?;
        match c.cmpxchg(cur, new, Relaxed) {
            Ok(_) => return Ok(()),
            Err(now) => cur = now,
        }
    }
}

/// Subtracts up to `n` from `c` (never below zero); returns what it took.
fn sub_floor(c: &Atomic<u32>, n: u32) -> u32 {
    let mut cur = c.load(Relaxed);
    loop {
        let take = n.min(cur);
        match c.cmpxchg(cur, cur - take, Relaxed) {
            Ok(_) => return take,
            Err(now) => cur = now,
        }
    }
}

/// A device's users and what each holds.
#[pin_data]
pub(crate) struct Limits {
    #[pin]
    users: Mutex<KVec<Arc<Usage>>>,
}

impl Limits {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            users <- new_mutex!(KVec::new()),
        })
    }

    /// The account of a new context of `uid`; `limited` is false for a process with
    /// `CAP_SYS_RESOURCE`. Users with nothing left are forgotten here.
    pub(crate) fn account(&self, uid: Kuid, limited: bool) -> Result<Quota> {
        let fresh = Arc::new(
            Usage {
                uid,
                accounts: Atomic::new(0),
                held: [const { Atomic::new(0) }; POOLS],
            },
            GFP_KERNEL,
        )?;
        let mut users = self.users.lock();
        users.retain(|u| !u.idle());
        let usage = match users.iter().find(|u| u.uid == uid) {
            Some(u) => u.clone(),
            None => {
                users.push(fresh.clone(), GFP_KERNEL)?;
                fresh
            }
        };
        usage.accounts.add(1, Relaxed);
        Ok(Quota {
            usage,
            limited,
            held: [const { Atomic::new(0) }; POOLS],
        })
    }

    /// For debugfs `qhcaN/limits`: each pool's limit, then each user's holdings.
    pub(crate) fn show(
        &self,
        dev: &QhcaDevice,
        f: &mut kernel::fmt::Formatter<'_>,
    ) -> kernel::fmt::Result {
        for p in Pool::ALL {
            writeln!(f, "user_max_{}: {}", p.name(), max(dev, p))?;
        }
        for u in self.users.lock().iter() {
            write!(f, "uid {}:", u.uid.into_uid_in_current_ns())?;
            for p in Pool::ALL {
                write!(f, " {} {}", p.name(), u.held[p as usize].load(Relaxed))?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// How much of `pool` one user may hold on `dev`.
fn max(dev: &QhcaDevice, pool: Pool) -> u32 {
    let set = pool.param();
    if set != 0 {
        return set;
    }
    let Ok(a) = dev.attr() else { return 0 };
    let whole = match pool {
        Pool::Contexts => a.num_uars,
        Pool::Pds => a.max_pd,
        Pool::Cqs => a.max_cq,
        Pool::Qps => a.max_qp,
        Pool::Mrs => a.max_mr,
        Pool::Mws => a.max_mw,
        Pool::Ahs => a.max_ah,
        Pool::OdpChunks => DEVICE_ODP_CHUNKS,
        Pool::Srqs => a.max_srq,
    };
    (whole / 2).max(1)
}

/// One context's account with its user: what the context charged, given back when it goes.
pub(crate) struct Quota {
    usage: Arc<Usage>,
    limited: bool,
    held: [Atomic<u32>; POOLS],
}

impl Quota {
    /// Charges `n` of `pool` to the context's user.
    ///
    /// # Errors
    ///
    /// `EDQUOT` if the user would then hold more than its share of the device's pool.
    pub(crate) fn charge(&self, dev: &QhcaDevice, pool: Pool, n: u32) -> Result {
        let limit = if self.limited {
            max(dev, pool)
        } else {
            u32::MAX
        };
        add_within(&self.usage.held[pool as usize], n, limit)?;
        self.held[pool as usize].add(n, Relaxed);
        Ok(())
    }

    /// Gives back `n` of `pool` (at most what the context holds).
    pub(crate) fn uncharge(&self, pool: Pool, n: u32) {
        let took = sub_floor(&self.held[pool as usize], n);
        sub_floor(&self.usage.held[pool as usize], took);
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        for p in Pool::ALL {
            let left = self.held[p as usize].xchg(0, Relaxed);
            sub_floor(&self.usage.held[p as usize], left);
        }
        sub_floor(&self.usage.accounts, 1);
    }
}
