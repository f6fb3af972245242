//! Unit-test support: a pretended current device (so a handle's `enter`
//! runs without a GPU) and the check that a guard holds its stream's
//! queueing count.

use std::cell::Cell;
use std::os::raw::c_int;
use std::thread;
use std::time::{Duration, Instant};

use super::{DeviceGuard, Stream};
use crate::error::Result;

thread_local! {
    static PRETENDED: Cell<Option<c_int>> = const { Cell::new(None) };
}

/// The device `Device::current` answers on this thread while a
/// [`PretendCurrent`] lives.
pub(crate) fn pretended_current() -> Option<c_int> {
    PRETENDED.with(Cell::get)
}

/// `Device::current` answers `ordinal` on this thread until dropped (no
/// `cudaGetDevice`; a guard for that device changes nothing).
pub(crate) struct PretendCurrent(Option<c_int>);

impl PretendCurrent {
    pub(crate) fn device(ordinal: c_int) -> Self {
        PretendCurrent(PRETENDED.with(|p| p.replace(Some(ordinal))))
    }
}

impl Drop for PretendCurrent {
    fn drop(&mut self) {
        PRETENDED.with(|p| p.set(self.0));
    }
}

/// How long the guard is kept after the capture's mark was set.
const KEPT: Duration = Duration::from_millis(100);

/// `enter` (a handle's) must return a guard that counts as queueing on
/// `stream`: a capture's beginning on another thread (`mark_capturer`,
/// the step of `Stream::capture` that waits for queueing calls) whose
/// mark was set while the guard lives returns only after the guard
/// dropped; once the guard is gone, a beginning is immediate. Panics
/// (tests) otherwise.
pub(crate) fn assert_enter_holds_the_stream(
    stream: &Stream,
    enter: impl Fn() -> Result<DeviceGuard>,
) {
    let guard = enter().expect("enter with a pretended device");
    let t = stream.clone();
    let capturer = thread::spawn(move || {
        let r = t.mark_capturer();
        let began = Instant::now();
        t.clear_capturer();
        (r.is_ok(), began)
    });
    // The mark is set (the beginning is under way) while the guard lives.
    let t0 = Instant::now();
    while stream.capturer().is_none() && t0.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(
        stream.capturer().is_some(),
        "the capture's mark was never set"
    );
    thread::sleep(KEPT);
    let dropped = Instant::now();
    drop(guard);
    let (ok, began) = capturer.join().expect("capturer ran");
    assert!(ok, "the capture did not begin after the guard dropped");
    assert!(
        began >= dropped,
        "the capture began {:?} before the guard dropped",
        dropped.saturating_duration_since(began)
    );
    // No guard: the beginning does not wait.
    let t0 = Instant::now();
    assert!(stream.mark_capturer().is_ok());
    stream.clear_capturer();
    assert!(t0.elapsed() < KEPT, "{:?}", t0.elapsed());
}
