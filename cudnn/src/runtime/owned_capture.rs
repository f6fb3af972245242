//! The registry of *owned* captures: captures of a stream another library
//! owns (a cudarc stream) that this crate began itself
//! (`CudarcStream::begin_owned_capture`) and that only this crate ends.
//!
//! The queueing check ([`Stream::check_queue`](super::Stream)) refuses
//! this crate's work on a foreign stream while it is capturing
//! (`Hazard::ForeignStream`): the owner could end that capture into a graph
//! it launches safely after this crate's memory is gone. An owned capture
//! is the one exception: its graph is launched only through this crate
//! (`OwnedGraph::launch`), which keeps what the caller gave it. The
//! registry says which capture is owned: an entry per stream (its raw
//! handle, device and, for a per-thread default stream, thread: the
//! stream's identity), with the thread that began it and the runtime's id
//! of the capture (where the runtime gives one: CUDA 13). Work on that
//! stream from that thread passes while the stream's capture is still that
//! one; from another thread it is refused (`Hazard::OtherThreadsCapture`);
//! a capture of a stream that has no entry, or whose id is another
//! (cudarc's own `begin_capture`, also after other code ended an owned
//! capture and began its own), is refused as before.

use std::sync::{Mutex, PoisonError};
use std::thread::ThreadId;

/// A stream's identity in the registry: raw handle (as a number), device
/// ordinal, and the thread of a per-thread default stream.
pub(crate) type Key = (usize, Option<usize>, Option<ThreadId>);

/// Who owns the capture of a capturing foreign stream, for the calling
/// thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// An owned capture this thread began: the crate's work may join it.
    ThisThread,
    /// An owned capture another thread began: refused, as for
    /// `Stream::capture` (`Hazard::OtherThreadsCapture`).
    OtherThread,
    /// Not an owned capture (cudarc's, another library's): refused
    /// (`Hazard::ForeignStream`).
    Nobody,
}

/// A registry entry: the thread that began the owned capture, and the
/// runtime's id of that capture (`None` where the runtime gives none).
type Entry = (ThreadId, Option<u64>);

static OWNED: Mutex<Vec<(Key, Entry)>> = Mutex::new(Vec::new());

fn owned() -> std::sync::MutexGuard<'static, Vec<(Key, Entry)>> {
    OWNED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The decision, free of the registry (unit-tested): `entry` is the owned
/// capture registered for the stream, if any; `now` the id of the
/// stream's capture now, asked only when the entry has an id (a capture
/// with another id, or none, is not the owned one).
pub(crate) fn classify(
    entry: Option<Entry>,
    current: ThreadId,
    now: impl FnOnce() -> Option<u64>,
) -> Owner {
    match entry {
        None => Owner::Nobody,
        Some((_, Some(id))) if now() != Some(id) => Owner::Nobody,
        Some((t, _)) if t == current => Owner::ThisThread,
        Some(_) => Owner::OtherThread,
    }
}

/// The owner of the capture of the stream `key`, for the calling thread;
/// `now` asks the stream's capture id (see [`classify`]).
pub(crate) fn owner_of(key: Key, now: impl FnOnce() -> Option<u64>) -> Owner {
    let entry = owned().iter().find(|(k, _)| *k == key).map(|(_, e)| *e);
    classify(entry, std::thread::current().id(), now)
}

/// The id registered for the owned capture of `key` (`None`: no entry,
/// or the runtime gave none).
#[cfg_attr(not(feature = "cudarc"), allow(dead_code))] // used by `interop::owned` (feature `cudarc`) and the unit tests
pub(crate) fn registered_id(key: Key) -> Option<u64> {
    owned()
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, (_, id))| *id)
}

/// The foreign-stream part of the queueing rule: `Ok(true)` (refused as
/// `Hazard::ForeignStream` by the caller) while the stream is capturing
/// and the capture is not an owned one; `Ok(false)` when not capturing or
/// when the calling thread's owned capture it is; typed
/// `OtherThreadsCapture` for another thread's owned capture. The registry
/// is read only while capturing.
///
/// # Errors
/// [`Error::CaptureUnsafe`](crate::Error::CaptureUnsafe) naming `what`.
pub(crate) fn foreign_rule(
    what: &str,
    capturing: bool,
    owner: impl FnOnce() -> Owner,
) -> crate::Result<bool> {
    use super::capture::{CaptureStatus, Hazard, capture_rule};
    if !capturing {
        return Ok(false);
    }
    match owner() {
        Owner::ThisThread => Ok(false),
        Owner::OtherThread => {
            capture_rule(what, CaptureStatus::Active, &Hazard::OtherThreadsCapture).map(|()| true)
        }
        Owner::Nobody => Ok(true),
    }
}

/// An entry of the registry, removed when dropped (after the capture
/// ended: the owned capture drops it last).
#[derive(Debug)]
#[cfg_attr(not(feature = "cudarc"), allow(dead_code))] // used by `interop::owned` (feature `cudarc`) and the unit tests
pub(crate) struct Registration {
    key: Key,
}

#[cfg_attr(not(feature = "cudarc"), allow(dead_code))] // used by `interop::owned` (feature `cudarc`) and the unit tests
impl Registration {
    /// Register the calling thread's owned capture of `key`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) naming
    /// `stream` when an owned capture of it is already registered.
    pub(crate) fn new(key: Key, what: &str) -> crate::Result<Self> {
        let mut o = owned();
        if o.iter().any(|(k, _)| *k == key) {
            return Err(crate::Error::invalid(
                "stream",
                "already has an owned capture open (captures do not nest); end it first",
                what,
            ));
        }
        o.push((key, (std::thread::current().id(), None)));
        Ok(Registration { key })
    }

    /// Record the runtime's id of the capture (once it began).
    pub(crate) fn set_id(&self, id: Option<u64>) {
        if let Some((_, e)) = owned().iter_mut().find(|(k, _)| *k == self.key) {
            e.1 = id;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        owned().retain(|(k, _)| *k != self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(raw: usize) -> Key {
        (raw, Some(0), None)
    }

    /// The rule with the registry, as the queueing check applies it (the
    /// truth: the documented rule): a capture cudarc began itself (no
    /// entry) is refused; this thread's owned capture passes; another
    /// thread's is refused typed; once the entry is gone (the capture
    /// ended), refused again; a stream that is not capturing never reads
    /// the registry.
    #[test]
    fn unit_foreign_rule_admits_only_this_threads_owned_capture() {
        let k = key(0x0c0f_fee0);
        let rule = move || foreign_rule("op", true, || owner_of(k, || None));
        assert!(matches!(rule(), Ok(true)), "cudarc's own capture");
        let reg = Registration::new(k, "test").expect("register");
        assert!(matches!(rule(), Ok(false)), "ours");
        let other = std::thread::spawn(rule).join().expect("join");
        match other {
            Err(crate::Error::CaptureUnsafe { op, hazard, .. }) => {
                assert_eq!(op, "op");
                assert_eq!(hazard, super::super::Hazard::OtherThreadsCapture.what());
            }
            o => panic!("another thread: {o:?}"),
        }
        drop(reg);
        assert!(matches!(rule(), Ok(true)), "after the end");
        let asked = std::cell::Cell::new(false);
        let idle = foreign_rule("op", false, || {
            asked.set(true);
            Owner::ThisThread
        });
        assert!(matches!(idle, Ok(false)));
        assert!(!asked.get());
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(500))]

        /// `foreign_rule` over every combination (the truth written out
        /// from the documented rule): refused as foreign exactly when the
        /// stream captures with no owned entry; typed `OtherThreadsCapture`
        /// exactly when another thread's owned capture is open; the
        /// registry is asked only while capturing.
        #[test]
        fn unit_property_foreign_rule(
            capturing in proptest::prelude::any::<bool>(),
            entry in 0u8..3, // none, this thread, another thread
            what in "[a-z ]{1,12}",
        ) {
            let me = std::thread::current().id();
            let other = std::thread::spawn(|| std::thread::current().id())
                .join()
                .map_err(|_| proptest::test_runner::TestCaseError::fail("spawn"))?;
            let e = match entry { 0 => None, 1 => Some(me), _ => Some(other) };
            let asked = std::cell::Cell::new(false);
            let r = foreign_rule(&what, capturing, || {
                asked.set(true);
                classify(e.map(|t| (t, None)), me, || None)
            });
            proptest::prop_assert_eq!(asked.get(), capturing);
            match r {
                Ok(refused) => {
                    proptest::prop_assert!(!(capturing && entry == 2));
                    proptest::prop_assert_eq!(refused, capturing && entry == 0);
                }
                Err(crate::Error::CaptureUnsafe { op, .. }) => {
                    proptest::prop_assert!(capturing && entry == 2);
                    proptest::prop_assert_eq!(op, what);
                }
                Err(o) => proptest::prop_assert!(false, "{o:?}"),
            }
        }
    }

    #[test]
    fn unit_classify_by_thread() {
        let me = std::thread::current().id();
        let other = std::thread::spawn(|| std::thread::current().id())
            .join()
            .expect("spawn");
        let never = || -> Option<u64> { panic!("asked the id") };
        assert_eq!(classify(None, me, never), Owner::Nobody);
        assert_eq!(classify(Some((me, None)), me, never), Owner::ThisThread);
        assert_eq!(classify(Some((other, None)), me, never), Owner::OtherThread);
        // With the runtime's id: only the same capture is the owned one.
        assert_eq!(
            classify(Some((me, Some(7))), me, || Some(7)),
            Owner::ThisThread
        );
        assert_eq!(
            classify(Some((other, Some(7))), me, || Some(7)),
            Owner::OtherThread
        );
        assert_eq!(classify(Some((me, Some(7))), me, || Some(8)), Owner::Nobody);
        assert_eq!(classify(Some((me, Some(7))), me, || None), Owner::Nobody);
        assert_eq!(
            classify(Some((other, Some(7))), me, || Some(8)),
            Owner::Nobody
        );
    }

    /// An entry is this thread's, another thread's for other threads, is
    /// per stream (another raw handle, another device or another thread's
    /// per-thread stream has none), refuses a second registration, and is
    /// gone once dropped.
    #[test]
    fn unit_registration_lifetime_and_keys() {
        let k = key(0x7e57_0001);
        let no = || None;
        assert_eq!(owner_of(k, no), Owner::Nobody);
        let r = Registration::new(k, "s").expect("first");
        assert_eq!(owner_of(k, no), Owner::ThisThread);
        // Once the capture's id is recorded, another capture of the stream
        // (cudarc's, after other code ended ours) is not the owned one.
        r.set_id(Some(41));
        assert_eq!(registered_id(k), Some(41));
        assert_eq!(owner_of(k, || Some(41)), Owner::ThisThread);
        assert_eq!(owner_of(k, || Some(42)), Owner::Nobody);
        r.set_id(None);
        assert!(matches!(
            Registration::new(k, "s"),
            Err(crate::Error::InvalidArgument { .. })
        ));
        assert_eq!(owner_of(key(0x7e57_0002), no), Owner::Nobody);
        assert_eq!(owner_of((0x7e57_0001, Some(1), None), no), Owner::Nobody);
        let seen = std::thread::spawn(move || owner_of(k, || None))
            .join()
            .expect("join");
        assert_eq!(seen, Owner::OtherThread);
        drop(r);
        assert_eq!(owner_of(k, no), Owner::Nobody);
        // A per-thread stream (raw 0x2) is keyed by its thread too.
        let me = std::thread::current().id();
        let pt = (2usize, Some(0), Some(me));
        let _r = Registration::new(pt, "per-thread").expect("per-thread");
        let other = std::thread::spawn(|| {
            let them = std::thread::current().id();
            owner_of((2usize, Some(0), Some(them)), || None)
        })
        .join()
        .expect("join");
        assert_eq!(other, Owner::Nobody, "another thread's per-thread stream");
    }
}
