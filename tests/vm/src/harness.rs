// SPDX-License-Identifier: GPL-2.0-only OR MIT

//! A tiny test harness: cases are plain functions, assertions are counted, failures keep their
//! `file:line`, and one case failing (or panicking) never stops the others.
//!
//! - [`check!`], [`check_eq!`] and [`check_errno!`] record one assertion each and return whether
//!   it held, so a case goes on after a failed check.
//! - [`fail!`] records a failed assertion found some other way (a `match`).
//! - [`require!`] is [`check!`] that ends the case when it fails.
//! - `?` on any error ends the case; the error is recorded (as one failed assertion) with the
//!   location of the `?`.
//! - [`bail!`] ends the case with a message.

use std::fmt::Display;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};

use nix::errno::Errno;

/// One failed assertion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub file: &'static str,
    pub line: u32,
    pub msg: String,
}

/// The assertion record of one case.
#[derive(Debug, Default)]
pub struct T {
    checked: u64,
    failures: Vec<Failure>,
}

impl T {
    /// Records one assertion; `msg` is evaluated only if it failed. Returns `ok`.
    pub fn record(
        &mut self,
        ok: bool,
        file: &'static str,
        line: u32,
        msg: impl FnOnce() -> String,
    ) -> bool {
        self.checked += 1;
        if !ok {
            self.failures.push(Failure {
                file,
                line,
                msg: msg(),
            });
        }
        ok
    }

    /// Records that `res` failed with exactly `want`. `expr` is the source text, for the message.
    pub fn record_errno<R: ErrnoOutcome + ?Sized>(
        &mut self,
        res: &R,
        want: Errno,
        file: &'static str,
        line: u32,
        expr: &str,
        context: Option<String>,
    ) -> bool {
        let got = res.errno_outcome();
        let ok = matches!(got, Err((Some(e), _)) if e == want);
        self.record(ok, file, line, || {
            let got = match got {
                Ok(()) => "success".to_owned(),
                Err((Some(e), text)) => format!("{} ({text})", e.desc_name()),
                Err((None, text)) => format!("an error without errno: {text}"),
            };
            let ctx = context.map(|c| format!(" [{c}]")).unwrap_or_default();
            format!(
                "check_errno failed: {expr}: expected {}, got {got}{ctx}",
                want.desc_name()
            )
        })
    }

    /// Assertions recorded so far.
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// The failed ones.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }
}

/// `ENOSPC` → `"ENOSPC"` (nix's `Display` gives `"ENOSPC: No space left on device"`).
pub trait ErrnoName {
    fn desc_name(&self) -> String;
}

impl ErrnoName for Errno {
    fn desc_name(&self) -> String {
        let s = self.to_string();
        s.split(':').next().unwrap_or(&s).to_owned()
    }
}

/// What [`check_errno!`] can look at: success, or an error with (maybe) an errno and its text.
pub trait ErrnoOutcome {
    fn errno_outcome(&self) -> Result<(), (Option<Errno>, String)>;
}

impl<V> ErrnoOutcome for Result<V, Errno> {
    fn errno_outcome(&self) -> Result<(), (Option<Errno>, String)> {
        match self {
            Ok(_) => Ok(()),
            Err(e) => Err((Some(*e), e.to_string())),
        }
    }
}

impl<V> ErrnoOutcome for Result<V, qhca::Error> {
    fn errno_outcome(&self) -> Result<(), (Option<Errno>, String)> {
        match self {
            Ok(_) => Ok(()),
            Err(e) => Err((e.errno(), e.to_string())),
        }
    }
}

impl<V> ErrnoOutcome for std::io::Result<V> {
    fn errno_outcome(&self) -> Result<(), (Option<Errno>, String)> {
        match self {
            Ok(_) => Ok(()),
            Err(e) => Err((e.raw_os_error().map(Errno::from_raw), e.to_string())),
        }
    }
}

/// Why a case stopped early. Deliberately not `Display`/`Error`, so that any error converts into
/// it with `?` (recording where the `?` was).
#[derive(Debug)]
pub struct Fail {
    file: &'static str,
    line: u32,
    msg: String,
    /// The failure is already in the case's record (from [`require!`]).
    recorded: bool,
}

impl Fail {
    /// A failure at the given place.
    pub fn new(file: &'static str, line: u32, msg: impl Into<String>) -> Self {
        Fail {
            file,
            line,
            msg: msg.into(),
            recorded: false,
        }
    }

    /// Stop the case: the reason was already recorded by a failed check.
    pub fn recorded() -> Self {
        Fail {
            file: "",
            line: 0,
            msg: String::new(),
            recorded: true,
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl<E: Display> From<E> for Fail {
    #[track_caller]
    fn from(e: E) -> Self {
        let at = Location::caller();
        Fail::new(at.file(), at.line(), format!("error: {e}"))
    }
}

/// What a case returns.
pub type CaseResult = Result<(), Fail>;

/// `check!(t, cond)` / `check!(t, cond, "fmt", args..)`: one assertion; returns the condition.
#[macro_export]
macro_rules! check {
    ($t:expr, $cond:expr $(,)?) => {
        $t.record($cond, file!(), line!(), || format!("check failed: {}", stringify!($cond)))
    };
    ($t:expr, $cond:expr, $($arg:tt)+) => {
        $t.record($cond, file!(), line!(), || {
            format!("check failed: {}: {}", stringify!($cond), format_args!($($arg)+))
        })
    };
}

/// `check_eq!(t, left, right)` / `check_eq!(t, left, right, "fmt", args..)`: one assertion that
/// `left == right`, showing both values when it fails; returns whether they were equal.
#[macro_export]
macro_rules! check_eq {
    ($t:expr, $left:expr, $right:expr $(,)?) => {
        match (&$left, &$right) {
            (l, r) => $t.record(*l == *r, file!(), line!(), || {
                format!(
                    "check_eq failed: {} == {}\n      left:  {:?}\n      right: {:?}",
                    stringify!($left), stringify!($right), l, r
                )
            }),
        }
    };
    ($t:expr, $left:expr, $right:expr, $($arg:tt)+) => {
        match (&$left, &$right) {
            (l, r) => $t.record(*l == *r, file!(), line!(), || {
                format!(
                    "check_eq failed: {} == {}: {}\n      left:  {:?}\n      right: {:?}",
                    stringify!($left), stringify!($right), format_args!($($arg)+), l, r
                )
            }),
        }
    };
}

/// `check_errno!(t, result, Errno::X)` / `check_errno!(t, result, Errno::X, "fmt", args..)`: one
/// assertion that `result` (a `nix::Result`, `qhca::Result` or `io::Result`) is an error with
/// exactly that errno; returns whether it was.
#[macro_export]
macro_rules! check_errno {
    ($t:expr, $res:expr, $errno:expr $(,)?) => {{
        let res = $res;
        $t.record_errno(&res, $errno, file!(), line!(), stringify!($res), None)
    }};
    ($t:expr, $res:expr, $errno:expr, $($arg:tt)+) => {{
        let res = $res;
        $t.record_errno(&res, $errno, file!(), line!(), stringify!($res), Some(format!($($arg)+)))
    }};
}

/// `fail!(t, "fmt", args..)`: records one failed assertion with this message (for failures
/// found by a `match` rather than a condition); returns false.
#[macro_export]
macro_rules! fail {
    ($t:expr, $($arg:tt)+) => {
        $t.record(false, file!(), line!(), || format!($($arg)+))
    };
}

/// `require!(t, cond, ..)`: [`check!`], and end the case if it failed.
#[macro_export]
macro_rules! require {
    ($t:expr, $($rest:tt)+) => {
        if !$crate::check!($t, $($rest)+) {
            return Err($crate::harness::Fail::recorded());
        }
    };
}

/// `bail!("fmt", args..)`: end the case with a failure at this line.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)+) => {
        return Err($crate::harness::Fail::new(file!(), line!(), format!($($arg)+)))
    };
}

/// A test case over some shared configuration `C`.
pub struct Case<C> {
    pub name: &'static str,
    pub run: fn(&mut T, &C) -> CaseResult,
}

/// Totals of a run.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub checked: u64,
    pub failed_checks: u64,
    pub failed_names: Vec<&'static str>,
}

impl Summary {
    /// 0 only if at least one case ran and nothing failed.
    pub fn exit_code(&self) -> i32 {
        if self.failed == 0 && self.failed_checks == 0 && self.passed > 0 {
            0
        } else {
            1
        }
    }
}

/// The cases whose name contains one of `filters` (all of them if there is none), in order.
pub fn select<'a, C>(cases: &'a [Case<C>], filters: &[String]) -> Vec<&'a Case<C>> {
    cases
        .iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f.as_str())))
        .collect()
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

/// Runs one case, catching panics; returns its record.
pub fn run_case<C>(case: &Case<C>, cfg: &C) -> T {
    let mut t = T::default();
    let result = catch_unwind(AssertUnwindSafe(|| (case.run)(&mut t, cfg)));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(fail)) => {
            if !fail.recorded {
                t.record(false, fail.file, fail.line, || fail.msg.clone());
            } else if t.failures.is_empty() {
                // A `Fail::recorded()` without a recorded failure is a harness misuse; never let
                // it pass silently.
                t.record(false, file!(), line!(), || {
                    "case stopped without a recorded failure".into()
                });
            }
        }
        Err(p) => {
            let msg = panic_message(p.as_ref());
            t.record(false, file!(), line!(), || format!("case panicked: {msg}"));
        }
    }
    t
}

/// Runs `cases` in order, printing per-case lines and the closing lines to `out`.
pub fn run_all<C: Clone>(cases: &[&Case<C>], cfg: &C, out: &mut dyn Write) -> Summary {
    run_all_with(cases, |_| Ok(cfg.clone()), out)
}

/// [`run_all`], each case with the configuration `cfg_for` gives it; a case whose configuration
/// cannot be had fails with that error.
pub fn run_all_with<C>(
    cases: &[&Case<C>],
    cfg_for: impl Fn(&str) -> Result<C, Fail>,
    out: &mut dyn Write,
) -> Summary {
    let mut s = Summary::default();
    let mut times = Vec::with_capacity(cases.len());
    for case in cases {
        let _ = write!(out, "test {} ... ", case.name);
        let _ = out.flush();
        let t0 = std::time::Instant::now();
        let t = match cfg_for(case.name) {
            Ok(cfg) => run_case(case, &cfg),
            Err(fail) => {
                let mut t = T::default();
                t.record(false, fail.file, fail.line, || {
                    format!("no configuration: {}", fail.msg)
                });
                t
            }
        };
        let took = t0.elapsed();
        times.push((took, case.name));
        s.checked += t.checked();
        s.failed_checks += t.failures().len() as u64;
        if t.failures().is_empty() {
            s.passed += 1;
            let _ = writeln!(out, "ok ({:.1} s)", took.as_secs_f64());
        } else {
            s.failed += 1;
            s.failed_names.push(case.name);
            let _ = writeln!(out, "FAILED ({:.1} s)", took.as_secs_f64());
            for f in t.failures() {
                let _ = writeln!(out, "    {}:{}: {}", f.file, f.line, f.msg);
            }
        }
        let _ = out.flush();
    }
    if !s.failed_names.is_empty() {
        let _ = writeln!(out, "\nfailures:");
        for n in &s.failed_names {
            let _ = writeln!(out, "    {n}");
        }
    }
    times.sort_by_key(|t| std::cmp::Reverse(t.0));
    let slowest: Vec<String> = times
        .iter()
        .take(5)
        .map(|(d, n)| format!("{n} {:.1} s", d.as_secs_f64()))
        .collect();
    let _ = writeln!(out);
    let _ = writeln!(out, "slowest: {}", slowest.join(", "));
    let _ = writeln!(
        out,
        "vm assertions: {} checked, {} failed",
        s.checked, s.failed_checks
    );
    let _ = writeln!(out, "{} passed, {} failed", s.passed, s.failed);
    let _ = out.flush();
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn counts_every_assertion_and_keeps_failures_with_location() {
        let mut t = T::default();
        assert!(check!(t, 1 + 1 == 2));
        let line = line!() + 1;
        assert!(!check!(t, 1 + 1 == 3, "arith {}", "broken"));
        assert!(check_eq!(t, 2, 2));
        assert!(!check_eq!(t, "a", "b", "letters"));
        assert_eq!(t.checked(), 4);
        assert_eq!(t.failures().len(), 2);
        let f = &t.failures()[0];
        assert_eq!(f.file, file!());
        assert_eq!(f.line, line);
        assert_eq!(f.msg, "check failed: 1 + 1 == 3: arith broken");
        let f = &t.failures()[1];
        assert!(
            f.msg
                .starts_with("check_eq failed: \"a\" == \"b\": letters"),
            "{}",
            f.msg
        );
        assert!(
            f.msg.contains("left:  \"a\"") && f.msg.contains("right: \"b\""),
            "{}",
            f.msg
        );
    }

    #[test]
    fn check_errno_on_an_ordinary_file() {
        let null = std::fs::File::open("/dev/null").unwrap();
        let mut t = T::default();
        // SAFETY: FIONREAD on /dev/null is not supported (ENOTTY), and even if it were it would
        // write one int into `n`.
        let mut n: libc::c_int = 0;
        let r = Errno::result(unsafe { libc::ioctl(null.as_raw_fd(), libc::FIONREAD, &mut n) });
        assert!(check_errno!(t, r, Errno::ENOTTY));
        assert!(!check_errno!(t, r, Errno::EINVAL, "wrong on purpose"));
        assert!(!check_errno!(t, Ok::<(), Errno>(()), Errno::EINVAL));
        let io = std::fs::File::open("/nonexistent/qhca");
        assert!(check_errno!(t, io, Errno::ENOENT));
        let q = qhca::Context::open("/dev/infiniband/uverbs-nonexistent");
        assert!(check_errno!(t, q, Errno::ENOENT));
        let q: Result<(), qhca::Error> = Err(qhca::Error::NoDevices);
        assert!(!check_errno!(t, q, Errno::ENOENT));
        assert_eq!(t.checked(), 6);
        let msgs: Vec<_> = t.failures().iter().map(|f| f.msg.as_str()).collect();
        assert_eq!(msgs.len(), 3);
        assert!(
            msgs[0].contains("expected EINVAL, got ENOTTY")
                && msgs[0].ends_with("[wrong on purpose]"),
            "{}",
            msgs[0]
        );
        assert!(
            msgs[1].contains("expected EINVAL, got success"),
            "{}",
            msgs[1]
        );
        assert!(
            msgs[2].contains("expected ENOENT, got an error without errno"),
            "{}",
            msgs[2]
        );
    }

    fn passing(t: &mut T, _: &()) -> CaseResult {
        check!(t, true);
        check_eq!(t, 1, 1);
        Ok(())
    }

    fn failing_check(t: &mut T, _: &()) -> CaseResult {
        check!(t, false, "first");
        check!(t, true);
        assert!(!fail!(t, "second {}", 2));
        Ok(())
    }

    fn failing_require(t: &mut T, _: &()) -> CaseResult {
        require!(t, 1 > 2, "stops here");
        check!(t, false, "never reached");
        Ok(())
    }

    pub(super) const QUESTION_MARK_LINE: u32 = line!() + 3;
    fn failing_question_mark(t: &mut T, _: &()) -> CaseResult {
        check!(t, true);
        let _n: u32 = "x".parse::<u32>()?;
        Ok(())
    }

    fn failing_bail(_: &mut T, _: &()) -> CaseResult {
        bail!("gave up on {}", 42);
    }

    fn panicking(_: &mut T, _: &()) -> CaseResult {
        panic!("boom");
    }

    fn stopping_without_record(_: &mut T, _: &()) -> CaseResult {
        Err(Fail::recorded())
    }

    #[test]
    fn run_case_covers_every_way_to_fail() {
        let r = run_case(
            &Case {
                name: "p",
                run: passing,
            },
            &(),
        );
        assert_eq!((r.checked(), r.failures().len()), (2, 0));

        let r = run_case(
            &Case {
                name: "c",
                run: failing_check,
            },
            &(),
        );
        assert_eq!((r.checked(), r.failures().len()), (3, 2));
        assert_eq!(r.failures()[1].msg, "second 2");

        let r = run_case(
            &Case {
                name: "r",
                run: failing_require,
            },
            &(),
        );
        assert_eq!((r.checked(), r.failures().len()), (1, 1));
        assert!(r.failures()[0].msg.contains("stops here"));

        let r = run_case(
            &Case {
                name: "q",
                run: failing_question_mark,
            },
            &(),
        );
        assert_eq!((r.checked(), r.failures().len()), (2, 1));
        assert_eq!(r.failures()[0].line, QUESTION_MARK_LINE);
        assert!(
            r.failures()[0].msg.starts_with("error: invalid digit"),
            "{}",
            r.failures()[0].msg
        );

        let r = run_case(
            &Case {
                name: "b",
                run: failing_bail,
            },
            &(),
        );
        assert_eq!((r.checked(), r.failures().len()), (1, 1));
        assert_eq!(r.failures()[0].msg, "gave up on 42");

        let r = run_case(
            &Case {
                name: "x",
                run: panicking,
            },
            &(),
        );
        assert_eq!((r.checked(), r.failures().len()), (1, 1));
        assert_eq!(r.failures()[0].msg, "case panicked: boom");

        let r = run_case(
            &Case {
                name: "s",
                run: stopping_without_record,
            },
            &(),
        );
        assert_eq!(r.failures().len(), 1);
    }

    fn cases() -> Vec<Case<()>> {
        vec![
            Case {
                name: "alpha_ok",
                run: passing,
            },
            Case {
                name: "beta_fails",
                run: failing_check,
            },
            Case {
                name: "gamma_ok",
                run: passing,
            },
        ]
    }

    #[test]
    fn run_all_prints_per_case_lines_and_exact_closing_lines() {
        let cases = cases();
        let sel = select(&cases, &[]);
        let mut out = Vec::new();
        let s = run_all(&sel, &(), &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(s.passed, 2);
        assert_eq!(s.failed, 1);
        assert_eq!(s.checked, 7);
        assert_eq!(s.failed_checks, 2);
        assert_eq!(s.exit_code(), 1);
        assert!(text.contains("test alpha_ok ... ok"), "{text}");
        assert!(text.contains("test beta_fails ... FAILED ("), "{text}");
        assert!(text.contains(" s)\n    tests/vm/src/harness.rs:"), "{text}");
        assert!(text.contains("\nslowest: "), "{text}");
        assert!(text.contains("check failed: false: first"), "{text}");
        let tail: Vec<&str> = text.lines().rev().take(2).collect();
        assert_eq!(
            tail,
            ["2 passed, 1 failed", "vm assertions: 7 checked, 2 failed"]
        );
    }

    #[test]
    fn exit_code_is_zero_only_when_everything_passed() {
        let cases = cases();
        let sel = select(&cases, &["_ok".to_owned()]);
        assert_eq!(
            sel.iter().map(|c| c.name).collect::<Vec<_>>(),
            ["alpha_ok", "gamma_ok"]
        );
        let s = run_all(&sel, &(), &mut Vec::new());
        assert_eq!((s.passed, s.failed, s.exit_code()), (2, 0, 0));

        let none = select(&cases, &["nothing".to_owned()]);
        assert!(none.is_empty());
        let s = run_all(&none, &(), &mut Vec::new());
        assert_eq!(s.exit_code(), 1, "running no case is not a pass");
    }

    #[test]
    fn filters_are_substrings_any_of_which_may_match() {
        let cases = cases();
        let names = |f: &[&str]| {
            let f: Vec<String> = f.iter().map(|s| s.to_string()).collect();
            select(&cases, &f)
                .iter()
                .map(|c| c.name)
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&["beta"]), ["beta_fails"]);
        assert_eq!(
            names(&["gamma", "alpha"]),
            ["alpha_ok", "gamma_ok"],
            "order is the suite's"
        );
        assert_eq!(names(&["a"]).len(), 3);
    }
}
