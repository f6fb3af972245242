//! The safe way to lend cudarc memory: a scope that owns cudarc's
//! record-on-drop guards and synchronizes the device at both ends.

use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, Instant};

use ::cudarc::driver::{CudaContext, DevicePtr, DevicePtrMut, DeviceRepr, SyncOnDrop, result};

use super::driver::guarded;
use super::memory::{CudarcRead, CudarcWrite};
use super::stream::CudarcStream;
use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::runtime::{CaptureStatus, DeviceSlice, DeviceSliceMut, Hazard};

/// cudarc memory lent inside [`CudarcStream::scope`]: [`read`](Self::read)
/// and [`write`](Self::write) give this crate's views, valid until the
/// closure returns.
///
/// The scope, not the caller, owns cudarc's guards, so none can be leaked;
/// each lend waits (host) until cudarc's pending work on the memory is done,
/// and the scope's end waits until all work of the device's context is
/// done before cudarc's read/write events are recorded. So the views may be
/// used on any stream of that device, at the cost of those two host waits.
pub struct CudarcScope<'scope, 'env> {
    lent: &'scope Lent<'env>,
    /// Invariant in `'scope`, as `std::thread::Scope`: views cannot be
    /// stretched past the closure.
    _scope: PhantomData<&'scope mut &'scope ()>,
}

/// What a scope lent: cudarc's record-on-drop guards, dropped only after a
/// full device-wide wait succeeded (also when the closure panicked).
struct Lent<'env> {
    stream: &'env CudarcStream,
    syncs: RefCell<Vec<SyncOnDrop<'env>>>,
}

impl Lent<'_> {
    /// Wait until the device is idle (`cuCtxSynchronize` of the stream's
    /// context, retried while it is refused), then let cudarc record its
    /// events. See [`end_scope`] for what happens when no wait succeeds.
    fn finish(&self) -> Result<()> {
        let ctx = self.stream.cudarc().context();
        let mut syncs = self.syncs.borrow_mut();
        if syncs.is_empty() {
            // Nothing was lent (a view exists only after its guard was
            // kept): no memory to protect, no wait needed.
            return Ok(());
        }
        let start = Instant::now();
        match end_scope(
            &ContextWait(ctx),
            &mut syncs,
            || start.elapsed() >= SCOPE_WAIT_DEADLINE,
            std::thread::sleep,
        ) {
            Ended::Released(r) => r,
            Ended::Stuck(e) => stuck(&e, syncs.len()),
        }
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        // Reached with guards only when the closure panicked: the device
        // still finishes the work that used the views before cudarc's
        // events are recorded. Nothing panics here; the wait is bounded
        // (`SCOPE_WAIT_DEADLINE`), after which the process aborts rather
        // than release (see `stuck`).
        if !self.syncs.get_mut().is_empty() {
            let _ = self.finish();
        }
    }
}

/// How long the end of a scope keeps retrying a refused device-wide wait
/// (a capture on another thread refuses `cuCtxSynchronize` until it ends).
const SCOPE_WAIT_DEADLINE: Duration = Duration::from_secs(30);

/// The first and the longest pause between two tries of the wait.
const FIRST_PAUSE: Duration = Duration::from_millis(1);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// `CUresult` codes after which the context is lost for good (sticky
/// errors: no work of the context runs any more, and every later call of
/// it, cudarc's frees included, fails), and the driver being unloaded at
/// process exit. Releasing the guards then cannot let the device touch
/// freed memory; every other failure could still have work running.
const CONTEXT_LOST: [u32; 11] = [
    4,   // CUDA_ERROR_DEINITIALIZED
    214, // CUDA_ERROR_ECC_UNCORRECTABLE
    700, // CUDA_ERROR_ILLEGAL_ADDRESS
    709, // CUDA_ERROR_CONTEXT_IS_DESTROYED
    710, // CUDA_ERROR_ASSERT
    714, // CUDA_ERROR_HARDWARE_STACK_ERROR
    715, // CUDA_ERROR_ILLEGAL_INSTRUCTION
    716, // CUDA_ERROR_MISALIGNED_ADDRESS
    717, // CUDA_ERROR_INVALID_ADDRESS_SPACE
    718, // CUDA_ERROR_INVALID_PC
    719, // CUDA_ERROR_LAUNCH_FAILED
];

/// The device-wide wait at the end of a scope, as two steps so the
/// decision can be tested without a device.
trait DeviceWait {
    /// Take (and clear) an error cudarc stored earlier in the context
    /// (`check_err`). It is reported, but it must not replace the wait:
    /// cudarc's own `CudaContext::synchronize` returns a stored error
    /// *without synchronizing*.
    fn take_stored(&self) -> Option<Error>;
    /// One full wait: every stream of the device is idle when it is `Ok`.
    fn wait(&self) -> Result<()>;
}

/// The real wait: bind the context (without cudarc's `check_err`, so an
/// error stored meanwhile is not mistaken for a failed wait) and
/// `cuCtxSynchronize`.
struct ContextWait<'a>(&'a CudaContext);

impl DeviceWait for ContextWait<'_> {
    fn take_stored(&self) -> Option<Error> {
        guarded("cudarc CudaContext::check_err", || self.0.check_err()).err()
    }

    fn wait(&self) -> Result<()> {
        let cu_ctx = self.0.cu_ctx();
        guarded("cuCtxSynchronize", || {
            if result::ctx::get_current()? != Some(cu_ctx) {
                // SAFETY: `cu_ctx` is the primary context cudarc retains for
                // as long as `self.0` (borrowed from the scope's stream,
                // which keeps its `Arc<CudaContext>`) lives.
                unsafe { result::ctx::set_current(cu_ctx) }?;
            }
            result::ctx::synchronize()
        })
    }
}

/// cudarc's capture status as this crate's (an unknown value counts as
/// capturing).
pub(crate) fn capture_status_of(st: ::cudarc::driver::sys::CUstreamCaptureStatus) -> CaptureStatus {
    use ::cudarc::driver::sys::CUstreamCaptureStatus as S;
    match st {
        S::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
        S::CU_STREAM_CAPTURE_STATUS_INVALIDATED => CaptureStatus::Invalidated,
        _ => CaptureStatus::Active,
    }
}

/// What [`end_scope`] decided.
#[derive(Debug)]
enum Ended {
    /// The guards were dropped (cudarc recorded its events) after a wait
    /// that succeeded, or after the context was lost; the scope's result.
    Released(Result<()>),
    /// No wait succeeded before the deadline: the guards were *not*
    /// dropped (they are still in the vector). The last error.
    Stuck(Error),
}

/// Whether a failed wait means the context is lost (release), or could
/// succeed later (retry).
fn context_lost(e: &Error) -> bool {
    matches!(e, Error::Driver { code, .. } if CONTEXT_LOST.contains(code))
}

/// The end of a scope: take cudarc's stored error, then wait for the whole
/// device, retrying a refused wait (pausing with `pause`, doubling from 1 ms
/// to 100 ms) until `expired()` says the deadline passed; drop the guards
/// only after a wait that succeeded, or when the context is lost. A stored
/// error is the result when the wait succeeded (it is cudarc's report of
/// an earlier call).
fn end_scope<G>(
    w: &impl DeviceWait,
    guards: &mut Vec<G>,
    mut expired: impl FnMut() -> bool,
    mut pause: impl FnMut(Duration),
) -> Ended {
    let stored = w.take_stored();
    let mut step = FIRST_PAUSE;
    loop {
        match w.wait() {
            Ok(()) => {
                // The device is idle: the guards record cudarc's events now.
                drop(std::mem::take(guards));
                return Ended::Released(stored.map_or(Ok(()), Err));
            }
            Err(e) if context_lost(&e) => {
                drop(std::mem::take(guards));
                return Ended::Released(Err(e));
            }
            Err(e) => {
                if expired() {
                    return Ended::Stuck(e);
                }
                pause(step);
                step = (step * 2).min(LONGEST_PAUSE);
            }
        }
    }
}

/// No device-wide wait succeeded. The memory the scope lent is not the
/// scope's: the caller may drop the `CudaSlice` as soon as the scope
/// returns, and cudarc then frees it (`cuMemFreeAsync`) after the read and
/// write events it last recorded. Leaking the guards would not keep it
/// alive: those events would still mark the state *before* the scope, so
/// the free would be ordered before this crate's work on other streams.
/// Dropping them records the events on cudarc's stream only. Either way the
/// device could use freed memory; so the process stops here, with the
/// reason on stderr (a capture left open for the whole deadline, e.g.
/// `begin_capture` on a cudarc stream inside the closure and never ended).
fn stuck(e: &Error, lent: usize) -> ! {
    eprintln!(
        "cudnn: CudarcScope could not wait for the device in {} s ({e}); releasing the {lent} \
         cudarc value(s) it lent could let the GPU use freed memory, so the process aborts. \
         End every stream capture of the device before the scope ends.",
        SCOPE_WAIT_DEADLINE.as_secs()
    );
    std::process::abort()
}

impl fmt::Debug for CudarcScope<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudarcScope")
            .field("stream", self.lent.stream)
            .field("lent", &self.lent.syncs.borrow().len())
            .finish()
    }
}

impl<'scope, 'env> CudarcScope<'scope, 'env> {
    /// Host wait until cudarc's stream has passed everything queued so far
    /// (the waits `device_ptr` just queued for cudarc's pending work on
    /// other streams included).
    fn settle(&self) -> Result<()> {
        let cs = self.lent.stream.cudarc();
        guarded("cudarc CudaStream::synchronize", || cs.synchronize())
    }

    /// Refuse a lend while cudarc's stream is being captured (cudarc's
    /// `begin_capture`): the waits and event records of the lend would be
    /// captured into cudarc's graph instead of ordering anything now, and
    /// the scope's host waits would fail.
    fn not_capturing(&self) -> Result<()> {
        let cs = self.lent.stream.cudarc();
        let st = guarded("cudarc CudaStream::capture_status", || cs.capture_status())?;
        crate::runtime::capture_rule(
            "CudarcScope::read/write",
            capture_status_of(st),
            &Hazard::HostSync,
        )
    }

    /// Lend `src` for reading: cudarc's pending writes of it finish first
    /// (host wait); the view is valid until the scope's closure returns.
    ///
    /// # Errors
    /// As [`CudarcStream::read`]; [`Error::Driver`](crate::Error::Driver)
    /// from the wait.
    pub fn read<T, S>(&'scope self, src: &'env S) -> Result<DeviceSlice<'scope, T>>
    where
        T: DataType + DeviceRepr,
        S: DevicePtr<T>,
    {
        self.not_capturing()?;
        // SAFETY: the guard's record-on-drop is kept by this scope, which
        // drops it only after a `cuCtxSynchronize` of the context succeeded
        // (all streams of the device idle) or the context is lost, and
        // otherwise aborts the process (`end_scope`): every use of the view,
        // on whatever stream, is complete when cudarc's event is recorded.
        let g = unsafe { CudarcRead::new(src, self.lent.stream.cudarc()) }?;
        let (addr, len, device, sync) = g.into_parts();
        self.lent.syncs.borrow_mut().push(sync);
        self.settle()?;
        // SAFETY: `addr`/`len` come from cudarc's `device_ptr` of `src`,
        // borrowed for `'env` (checked: aligned, fits); the view lives for
        // `'scope`, inside `'env`; cudarc's pending writes of it are done
        // (host wait above), so any stream may read it.
        Ok(unsafe { DeviceSlice::from_raw_parts_on(addr as *const T, len, device) })
    }

    /// Lend `dst` for writing: cudarc's pending reads and writes of it
    /// finish first (host wait); the view is valid until the scope's
    /// closure returns.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn write<T, S>(&'scope self, dst: &'env mut S) -> Result<DeviceSliceMut<'scope, T>>
    where
        T: DataType + DeviceRepr,
        S: DevicePtrMut<T>,
    {
        self.not_capturing()?;
        // SAFETY: as in `read`.
        let g = unsafe { CudarcWrite::new(dst, self.lent.stream.cudarc()) }?;
        let (addr, len, device, sync) = g.into_parts();
        self.lent.syncs.borrow_mut().push(sync);
        self.settle()?;
        // SAFETY: as in `read`, and `dst` is borrowed exclusively for
        // `'env`, so this is the only view of it.
        Ok(unsafe { DeviceSliceMut::from_raw_parts_mut_on(addr as *mut T, len, device) })
    }
}

impl CudarcStream {
    /// Lend cudarc memory safely: `f` gets a [`CudarcScope`] whose
    /// [`read`](CudarcScope::read) / [`write`](CudarcScope::write) give
    /// views valid until `f` returns, usable on any stream of the device.
    /// Each lend waits for cudarc's pending work on that memory, and the end
    /// of the scope waits for the whole device (`cuCtxSynchronize`) before
    /// cudarc records its events, so neither a view used on another stream
    /// nor a leaked value can let cudarc free or rewrite the memory under
    /// this crate's work. For hot loops without host waits, see the
    /// `unsafe` [`read`](Self::read) / [`write`](Self::write).
    ///
    /// # The end of the scope
    /// cudarc's guards are released only after a device-wide wait that
    /// *succeeded*. An error cudarc stored earlier (its `check_err`, which
    /// makes cudarc's own `CudaContext::synchronize` return without
    /// waiting) is taken first and returned after the wait. The driver
    /// refuses `cuCtxSynchronize` while any stream of the device is being
    /// captured; the wait is then retried (pauses of 1 to 100 ms) for up to
    /// 30 s, so a capture on another thread may end meanwhile (where the
    /// runtime treats the refused call as a violation of a global-mode
    /// capture, that capture is invalidated and ends with an error for its
    /// owner: a failed capture, never freed memory in use). When the
    /// context is lost (a sticky error such as an illegal address) nothing
    /// runs any more and the guards are released with that error. When no
    /// wait succeeds before the deadline the process **aborts** (reason on
    /// stderr): the lent memory belongs to the caller, who may drop it as
    /// soon as the scope returns, and cudarc would then free it while this
    /// crate's work may still run on other streams; leaking the guards
    /// would not prevent that (cudarc's free waits only for the events it
    /// last recorded). So end every capture of the device (cudarc's
    /// `begin_capture` included) before the scope ends.
    ///
    /// # Errors
    /// `f`'s error; [`Error::Driver`](crate::Error::Driver) with an error
    /// cudarc had stored, or the lost context's;
    /// [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe) from a lend
    /// while cudarc's stream is being captured.
    pub fn scope<'env, R>(
        &'env self,
        f: impl for<'scope> FnOnce(&'scope CudarcScope<'scope, 'env>) -> Result<R>,
    ) -> Result<R> {
        let lent = Lent {
            stream: self,
            syncs: RefCell::new(Vec::new()),
        };
        let r = f(&CudarcScope {
            lent: &lent,
            _scope: PhantomData,
        });
        let synced = lent.finish();
        let r = r?;
        synced.map(|()| r)
    }
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::rc::Rc;

    use super::*;

    /// A guard that counts its drops (cudarc's `SyncOnDrop` records its
    /// event when dropped).
    struct Guard(Rc<Cell<usize>>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    fn driver(code: u32) -> Error {
        Error::Driver {
            call: "cuCtxSynchronize",
            code,
            name: String::new(),
            text: String::new(),
            context: None,
        }
    }

    /// A wait that answers from a script, and checks at every wait that no
    /// guard was released before (the property under test).
    struct Scripted {
        stored: RefCell<Option<Error>>,
        answers: RefCell<Vec<Result<()>>>,
        released: Rc<Cell<usize>>,
        calls: RefCell<Vec<&'static str>>,
    }

    impl Scripted {
        fn new(
            stored: Option<Error>,
            answers: Vec<Result<()>>,
            released: &Rc<Cell<usize>>,
        ) -> Self {
            Scripted {
                stored: RefCell::new(stored),
                answers: RefCell::new(answers.into_iter().rev().collect()),
                released: released.clone(),
                calls: RefCell::new(Vec::new()),
            }
        }
    }

    impl DeviceWait for Scripted {
        fn take_stored(&self) -> Option<Error> {
            self.calls.borrow_mut().push("take_stored");
            self.stored.borrow_mut().take()
        }
        fn wait(&self) -> Result<()> {
            self.calls.borrow_mut().push("wait");
            assert_eq!(
                self.released.get(),
                0,
                "a guard was released before a wait succeeded"
            );
            // An exhausted script keeps refusing (a capture that never ends).
            self.answers
                .borrow_mut()
                .pop()
                .unwrap_or_else(|| Err(driver(900)))
        }
    }

    fn guards(n: usize, released: &Rc<Cell<usize>>) -> Vec<Guard> {
        (0..n).map(|_| Guard(released.clone())).collect()
    }

    /// cudarc's `CudaContext::synchronize` returns an error stored by an
    /// earlier call without waiting; the old scope dropped the guards after
    /// it. Now the stored error is taken, the device is waited for, the
    /// guards are released after that wait, and the stored error is the
    /// result. (Fails before the fix: the stored error ended the scope
    /// with no wait at all.)
    #[test]
    fn unit_stored_error_does_not_replace_the_wait() {
        let released = Rc::new(Cell::new(0));
        let mut g = guards(3, &released);
        let w = Scripted::new(Some(driver(1)), vec![Ok(())], &released);
        let mut paused = 0;
        match end_scope(&w, &mut g, || false, |_| paused += 1) {
            Ended::Released(Err(Error::Driver { code: 1, .. })) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(*w.calls.borrow(), ["take_stored", "wait"]);
        assert_eq!(released.get(), 3, "released after the wait");
        assert!(g.is_empty());
        assert_eq!(paused, 0);
    }

    /// `cuCtxSynchronize` refused while a stream of the context is being
    /// captured (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`, 900, and the
    /// invalidated / implicit / wrong-thread answers): retried, the guards
    /// kept until the wait succeeds (checked inside every wait).
    #[test]
    fn unit_refused_wait_is_retried_and_guards_kept_until_it_succeeds() {
        for code in [900u32, 901, 906, 908] {
            let released = Rc::new(Cell::new(0));
            let mut g = guards(2, &released);
            let w = Scripted::new(
                None,
                vec![Err(driver(code)), Err(driver(code)), Ok(())],
                &released,
            );
            let mut pauses = Vec::new();
            match end_scope(&w, &mut g, || false, |d| pauses.push(d)) {
                Ended::Released(Ok(())) => {}
                other => panic!("{code}: {other:?}"),
            }
            assert_eq!(w.calls.borrow().len(), 4, "take_stored and three waits");
            assert_eq!(
                pauses,
                [Duration::from_millis(1), Duration::from_millis(2)],
                "backoff doubles"
            );
            assert_eq!(released.get(), 2);
        }
    }

    /// A wait that never succeeds (a capture left open): after the
    /// deadline the guards are still held, not released; the caller then
    /// aborts. (Fails before the fix: the guards were dropped after the
    /// first failed wait.)
    #[test]
    fn unit_wait_that_never_succeeds_keeps_every_guard() {
        let released = Rc::new(Cell::new(0));
        let mut g = guards(4, &released);
        let w = Scripted::new(Some(driver(2)), vec![], &released);
        match end_scope(&w, &mut g, || true, |_| {}) {
            Ended::Stuck(Error::Driver { code: 900, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(released.get(), 0, "no guard released");
        assert_eq!(g.len(), 4, "the guards are still held");
        // With a deadline, it retries until then with pauses capped at
        // 100 ms.
        let w = Scripted::new(None, vec![], &released);
        let mut pauses = Vec::new();
        let deadline = Duration::from_millis(30);
        let start = Instant::now();
        let r = end_scope(
            &w,
            &mut g,
            || start.elapsed() >= deadline,
            |d| {
                pauses.push(d);
                std::thread::sleep(Duration::from_millis(2));
            },
        );
        assert!(matches!(r, Ended::Stuck(_)), "{r:?}");
        assert!(start.elapsed() >= deadline);
        assert!(pauses.iter().all(|d| *d <= LONGEST_PAUSE));
        assert_eq!(released.get(), 0);
    }

    /// A lost context (sticky errors) runs nothing any more: the guards are
    /// released at once with its error; any other error is retried.
    #[test]
    fn unit_lost_context_releases_other_errors_retry() {
        for code in CONTEXT_LOST {
            let released = Rc::new(Cell::new(0));
            let mut g = guards(1, &released);
            let w = Scripted::new(None, vec![Err(driver(code))], &released);
            match end_scope(&w, &mut g, || false, |_| {}) {
                Ended::Released(Err(Error::Driver { code: c, .. })) => assert_eq!(c, code),
                other => panic!("{code}: {other:?}"),
            }
            assert_eq!(released.get(), 1);
        }
        for e in [
            driver(1),
            driver(201),
            driver(999),
            Error::NoDevice {
                reason: "cudarc panicked".into(),
            },
        ] {
            assert!(!context_lost(&e), "{e:?}");
        }
    }

    /// cudarc's capture states map as the runtime's: only `NONE` is not
    /// capturing.
    #[test]
    fn unit_cudarc_capture_status() {
        use ::cudarc::driver::sys::CUstreamCaptureStatus as S;
        assert_eq!(
            capture_status_of(S::CU_STREAM_CAPTURE_STATUS_NONE),
            CaptureStatus::None
        );
        assert!(capture_status_of(S::CU_STREAM_CAPTURE_STATUS_ACTIVE).is_capturing());
        assert!(capture_status_of(S::CU_STREAM_CAPTURE_STATUS_INVALIDATED).is_capturing());
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(2000))]

        /// Any script of wait answers (success, capture refusals, other
        /// errors, lost contexts) with or without a stored error: the
        /// guards are released exactly when a wait succeeded or reported a
        /// lost context within the allowed tries, never before (checked
        /// inside every wait), and otherwise all are still held. The truth
        /// is the script itself: the first `Ok` or lost code.
        #[test]
        fn unit_property_guards_released_only_after_a_good_wait(
            script in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(0u32),
                    proptest::strategy::Just(900u32),
                    proptest::strategy::Just(906u32),
                    proptest::strategy::Just(1u32),
                    proptest::strategy::Just(700u32),
                    proptest::strategy::Just(719u32),
                ],
                0..8,
            ),
            stored in proptest::option::of(1u32..1000),
            n_guards in 0usize..4,
            tries in 1usize..10,
        ) {
            let released = Rc::new(Cell::new(0));
            let mut g = guards(n_guards, &released);
            let answers = script
                .iter()
                .map(|&c| if c == 0 { Ok(()) } else { Err(driver(c)) })
                .collect();
            let w = Scripted::new(stored.map(driver), answers, &released);
            // The deadline counted in failed waits.
            let mut failed = 0usize;
            let r = end_scope(
                &w,
                &mut g,
                || {
                    failed += 1;
                    failed >= tries
                },
                |_| {},
            );
            // The truth from the script: the first answer that releases,
            // if it comes within the allowed tries (an exhausted script
            // keeps refusing).
            let first_good = script
                .iter()
                .position(|&c| c == 0 || CONTEXT_LOST.contains(&c))
                .filter(|&i| i < tries);
            match (r, first_good) {
                (Ended::Released(res), Some(i)) => {
                    proptest::prop_assert_eq!(released.get(), n_guards);
                    proptest::prop_assert_eq!(w.calls.borrow().len(), i + 2);
                    if script[i] == 0 {
                        proptest::prop_assert_eq!(res.is_err(), stored.is_some());
                    } else {
                        proptest::prop_assert!(res.is_err());
                    }
                }
                (Ended::Stuck(_), None) => {
                    proptest::prop_assert_eq!(released.get(), 0);
                    proptest::prop_assert_eq!(g.len(), n_guards);
                    proptest::prop_assert_eq!(w.calls.borrow().len(), tries + 1);
                }
                (r, i) => proptest::prop_assert!(false, "{:?} vs first good {:?}", r, i),
            }
        }
    }
}
