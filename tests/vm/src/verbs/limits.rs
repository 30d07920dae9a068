// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! Per-user limits on the device's shared pools: an unprivileged user that takes all it can
//! gets `EDQUOT` at half of each pool, and another user, and root, still get theirs; what the
//! user held comes back when its process ends.

use super::*;
use qhca::MwType;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;

const EDQUOT: i32 = libc::EDQUOT;

/// `__verbs_limits DEV`: opens contexts until one fails, then in the first allocates PDs until
/// one fails, then windows; prints `contexts N E`, `pds N E`, `mws N E` (how many it got, the
/// errno of the one refused), then `holding`, and keeps them until its stdin closes.
pub(super) fn limits_main(dev: &Path) -> qhca::Result<()> {
    let errno = |e: &qhca::Error| e.errno().map_or(0, |e| e as i32);
    let mut ctxs = Vec::new();
    let e = loop {
        match Context::open(dev) {
            Ok(c) => ctxs.push(Arc::new(c)),
            Err(e) => break errno(&e),
        }
        if ctxs.len() > 4096 {
            break 0;
        }
    };
    super::process::say(&format!("contexts {} {e}", ctxs.len()));
    let Some(ctx) = ctxs.first() else {
        return Ok(());
    };
    let mut pds = Vec::new();
    let e = loop {
        match Pd::new(ctx) {
            Ok(p) => pds.push(p),
            Err(e) => break errno(&e),
        }
    };
    super::process::say(&format!("pds {} {e}", pds.len()));
    let mut mws = Vec::new();
    let e = match pds.first() {
        Some(pd) => loop {
            match pd.alloc_mw(MwType::Type1) {
                Ok(w) => mws.push(w),
                Err(e) => break errno(&e),
            }
        },
        None => 0,
    };
    super::process::say(&format!("mws {} {e}", mws.len()));
    super::process::say("holding");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    Ok(())
}

/// Runs the helper as `uid` (and gid), with a pipe to its stdin; its first four lines.
fn run_as(cfg: &Config, uid: u32) -> Result<(Child, Vec<String>), Fail> {
    let mut child = Command::new("/proc/self/exe")
        .arg("__verbs_limits")
        .arg(&cfg.dev)
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| fail_msg("no stdout".into()))?;
    let mut r = BufReader::new(out);
    let mut lines = Vec::new();
    for _ in 0..4 {
        let mut l = String::new();
        if r.read_line(&mut l)? == 0 {
            break;
        }
        lines.push(l.trim().to_owned());
    }
    Ok((child, lines))
}

/// `what N E` among `lines`: (N, E).
fn count(lines: &[String], what: &str) -> Option<(u32, i32)> {
    let l = lines.iter().find(|l| l.starts_with(what))?;
    let mut w = l.split_whitespace().skip(1);
    Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
}

/// What debugfs says user `uid` holds of `pool` on the device under test (0 if the user is not
/// listed).
pub(crate) fn held(cfg: &Config, uid: u32, pool: &str) -> Result<u32, Fail> {
    let s = std::fs::read_to_string(crate::system::debugfs_dir(cfg)?.join("limits"))?;
    let Some(line) = s.lines().find(|l| l.starts_with(&format!("uid {uid}:"))) else {
        return Ok(0);
    };
    let w: Vec<&str> = line.split_whitespace().collect();
    Ok(w.windows(2)
        .find(|p| p[0] == pool)
        .and_then(|p| p[1].parse().ok())
        .unwrap_or(0))
}

/// Ends a helper (its stdin closed) and waits for it.
fn finish(mut child: Child) -> Result<ExitStatus, Fail> {
    drop(child.stdin.take());
    Ok(child.wait()?)
}

/// An unprivileged user (nobody) takes every context, PD and window it can: each stops at half
/// of the device's pool with `EDQUOT`, while the device still had more. Meanwhile another user
/// and root still get contexts and PDs. Everything is given back when the user's process ends.
pub(super) fn verbs_limits_per_user(t: &mut T, cfg: &Config) -> CaseResult {
    let attr = *Context::open(&cfg.dev)?.attr();
    let node = &cfg.dev;
    let mode = std::fs::metadata(node)?.permissions().mode();
    std::fs::set_permissions(node, std::fs::Permissions::from_mode(0o666))?;
    let res = (|| -> CaseResult {
        let (hog, lines) = run_as(cfg, 65534)?;
        let (nctx, e) = count(&lines, "contexts").unwrap_or((0, 0));
        check_eq!(
            t,
            (nctx, e),
            (attr.num_uars / 2, EDQUOT),
            "contexts of one user: {lines:?}"
        );
        let (npd, e) = count(&lines, "pds").unwrap_or((0, 0));
        check_eq!(t, (npd, e), (attr.max_pd / 2, EDQUOT), "PDs of one user");
        let (nmw, e) = count(&lines, "mws").unwrap_or((0, 0));
        check_eq!(
            t,
            (nmw, e),
            (attr.max_mw / 2, EDQUOT),
            "windows of one user"
        );
        check_eq!(
            t,
            held(cfg, 65534, "contexts")?,
            attr.num_uars / 2,
            "debugfs: contexts held"
        );
        check_eq!(
            t,
            held(cfg, 65534, "pds")?,
            attr.max_pd / 2,
            "debugfs: PDs held"
        );

        // Another user gets its own share: one context (then it stops at its limit too, but the
        // first ones work), PDs and windows.
        let (other, lines) = run_as(cfg, 65533)?;
        let (n, _) = count(&lines, "contexts").unwrap_or((0, 0));
        check!(t, n >= 1, "another user got no context: {lines:?}");
        let (n, _) = count(&lines, "pds").unwrap_or((0, 0));
        check!(t, n >= 1, "another user got no PD: {lines:?}");
        finish(other)?;

        // Root is not limited (CAP_SYS_RESOURCE) and finds the device usable.
        let ctx = Arc::new(Context::open(&cfg.dev)?);
        let pd = Pd::new(&ctx)?;
        drop(pd);
        drop(ctx);

        let st = finish(hog)?;
        check!(t, st.success(), "the hog ended with {st}");
        let end = Instant::now() + Duration::from_secs(10);
        while held(cfg, 65534, "contexts")? != 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(50));
        }
        for pool in ["contexts", "pds", "mws"] {
            check_eq!(
                t,
                held(cfg, 65534, pool)?,
                0,
                "{pool} held once the user's process ended"
            );
        }
        Ok(())
    })();
    std::fs::set_permissions(node, std::fs::Permissions::from_mode(mode))?;
    res
}
