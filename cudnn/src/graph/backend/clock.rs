//! The time a thread spends inside cuDNN's backend calls (creating, setting,
//! finalizing, reading and destroying descriptors) while the clock is on:
//! what `cargo xtask bench-planning` reports as cuDNN's own part of a
//! planning step, the floor under the crate's time for that step.
//!
//! Not counted: `cudnnBackendExecute` and the CUDA-graph calls (launches,
//! not planning). A call that fails counts with the error text cuDNN is
//! asked for (a few microseconds, only on failure).
//!
//! Off (the default), a backend call costs one relaxed atomic load more.
//! On, two clock reads per call, about half of them inside the counted
//! span, the rest in the caller's; the benchmark times its headline
//! figures with the clock off and measures cuDNN's part in runs of their
//! own.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static ON: AtomicBool = AtomicBool::new(false);

thread_local! {
    /// Nanoseconds inside backend calls, and how many calls, since the last take.
    static SPENT: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// What [`take_backend_clock`] returns: this thread's time inside cuDNN's
/// backend calls, and their number, since the last take.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendClock {
    /// Wall time inside the calls.
    pub spent: Duration,
    /// Backend calls made.
    pub calls: u64,
}

/// Turn the clock on or off for every thread (off by default). A benchmark
/// aid, hidden from the docs: it changes no result, only what the clock
/// counts.
#[doc(hidden)]
pub fn set_backend_clock(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// This thread's [`BackendClock`] since the last take (zero while the clock
/// was off), and start again from zero.
#[doc(hidden)]
pub fn take_backend_clock() -> BackendClock {
    let (ns, calls) = SPENT.with(|s| s.replace((0, 0)));
    BackendClock {
        spent: Duration::from_nanos(ns),
        calls,
    }
}

/// Before a backend call: the time, when the clock is on.
#[inline]
pub(super) fn start() -> Option<Instant> {
    ON.load(Ordering::Relaxed).then(Instant::now)
}

/// After a backend call [`start`] timed: add it to this thread's count.
#[inline]
pub(super) fn stop(started: Option<Instant>) {
    if let Some(t0) = started {
        let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // `try_with`: a descriptor dropped while the thread's locals are
        // torn down is simply not counted.
        let _ = SPENT.try_with(|s| {
            let (spent, calls) = s.get();
            s.set((spent.saturating_add(ns), calls.saturating_add(1)));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_while_on_and_take_resets() {
        // Other unit tests may turn the clock on or off concurrently (the
        // switch is global); this thread's count is its own, so a call
        // timed with an explicit start is what it checks.
        let _ = take_backend_clock();
        stop(None);
        assert_eq!(take_backend_clock(), BackendClock::default());
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        stop(Some(t0));
        stop(Some(Instant::now()));
        let c = take_backend_clock();
        assert_eq!(c.calls, 2);
        assert!(c.spent >= Duration::from_millis(2), "{c:?}");
        assert_eq!(take_backend_clock(), BackendClock::default());
    }
}
