//! Tests of stream identity, thread rules and the capture marks.

use super::*;

fn on(raw: cudaStream_t, device: Option<i32>) -> Stream {
    Stream::wrap_on(raw, false, device.map(Device::from_runtime))
}

#[test]
fn unit_legacy_streams_of_two_devices_differ() {
    let l0 = on(cudart::cudaStreamLegacy, Some(0));
    let l1 = on(cudart::cudaStreamLegacy, Some(1));
    assert_ne!(l0, l1);
    assert_eq!(l0, on(cudart::cudaStreamLegacy, Some(0)));
    // Null names the legacy default stream too.
    assert_eq!(l0, on(ptr::null_mut(), Some(0)));
    assert_ne!(l1, on(ptr::null_mut(), Some(0)));
    assert!(l0.is_pseudo() && l0.thread().is_none());
    assert_eq!(l1.device(), Some(Device::from_runtime(1)));
}

#[test]
fn unit_per_thread_streams_of_two_threads_differ() {
    let here = on(cudart::cudaStreamPerThread, Some(0));
    let there = std::thread::spawn(|| on(cudart::cudaStreamPerThread, Some(0)))
        .join()
        .expect("thread ran");
    assert_eq!(here.thread(), Some(thread::current().id()));
    assert_ne!(there.thread(), here.thread());
    assert_ne!(here, there);
    assert_eq!(here, here.clone());
    // Same thread, other device: another queue.
    assert_ne!(here, on(cudart::cudaStreamPerThread, Some(1)));
    // Per-thread and legacy are different queues on one device and thread.
    assert_ne!(here, on(cudart::cudaStreamLegacy, Some(0)));
}

#[test]
fn unit_real_streams_compare_by_handle_only() {
    let fake = 0x1000 as cudaStream_t;
    let a = on(fake, Some(0));
    let b = std::thread::spawn(move || on(0x1000 as cudaStream_t, None))
        .join()
        .expect("thread ran");
    assert_eq!(a, b);
    assert!(!a.is_pseudo() && a.thread().is_none() && b.thread().is_none());
    assert_ne!(a, on(0x2000 as cudaStream_t, Some(0)));
    assert_ne!(a, on(cudart::cudaStreamLegacy, Some(0)));
}

#[test]
fn unit_per_thread_stream_refused_on_another_thread() {
    // No device recorded, so `enter` makes no CUDA call: the refusal is
    // the identity rule alone.
    let mine = on(cudart::cudaStreamPerThread, None);
    assert!(mine.enter("here").is_ok());
    let e = std::thread::spawn(move || mine.enter("the stream of a handle").map(|_| ()))
        .join()
        .expect("thread ran")
        .expect_err("another thread's per-thread stream");
    match &e {
        Error::WrongThread {
            what,
            owner,
            current,
        } => {
            assert_eq!(what, "the stream of a handle");
            assert_ne!(owner, current);
        }
        other => panic!("wrong error: {other:?}"),
    }
    // Legacy and real streams may be used from any thread.
    let legacy = on(cudart::cudaStreamLegacy, None);
    let real = on(0x1000 as cudaStream_t, None);
    std::thread::spawn(move || {
        assert!(legacy.enter("x").is_ok());
        assert!(real.enter("x").is_ok());
    })
    .join()
    .expect("thread ran");
}

#[test]
fn unit_wait_for_on_another_threads_per_thread_stream_is_refused() {
    let mine = on(cudart::cudaStreamPerThread, None);
    let theirs = std::thread::spawn(|| on(cudart::cudaStreamPerThread, None))
        .join()
        .expect("thread ran");
    // Different queues: no early return; the other thread's stream is refused
    // before any event is made.
    let e = mine
        .wait_for(&theirs)
        .expect_err("theirs is another thread's");
    assert!(matches!(e, Error::WrongThread { .. }), "{e:?}");
    // The same value waited for by itself on its own thread is a no-op...
    assert!(mine.wait_for(&mine.clone()).is_ok());
    // ...but not on another thread.
    let e = std::thread::spawn(move || mine.wait_for(&mine.clone()))
        .join()
        .expect("thread ran")
        .expect_err("mine, on another thread");
    assert!(matches!(e, Error::WrongThread { .. }), "{e:?}");
}

/// A call holding the queueing count (between its check and the return
/// of its enqueue) makes a concurrent capture's beginning wait for it;
/// once the mark is set, new queueing calls of other threads are
/// refused; a hold that outlives the limit makes the beginning refuse
/// (typed, mark cleared). (Before the fix the check dropped everything
/// before the enqueue: a capture could begin between them and the
/// launch silently joined it.)
#[test]
fn unit_capture_begin_waits_for_queueing_calls() {
    // No device recorded: `enter` makes no CUDA call.
    let s = on(0x1000 as cudaStream_t, None);
    let held = s.enter("a launch").expect("not capturing");
    let t = s.clone();
    let capturer = thread::spawn(move || {
        let t0 = Instant::now();
        let r = t.mark_capturer();
        let waited = t0.elapsed();
        t.clear_capturer();
        (r.is_ok(), waited)
    });
    // Once the other thread's mark is set, a new launch here is refused.
    let t0 = Instant::now();
    while s.capturer().is_none() && t0.elapsed() < Duration::from_secs(5) {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(s.capturer().is_some(), "the mark was never set");
    assert!(matches!(
        s.enter("a second launch"),
        Err(Error::CaptureUnsafe { .. })
    ));
    thread::sleep(Duration::from_millis(100));
    drop(held);
    let (ok, waited) = capturer.join().expect("thread ran");
    assert!(ok, "began after the hold dropped");
    assert!(waited >= Duration::from_millis(100), "{waited:?}");
    // A hold that outlives the limit: refused, the mark cleared.
    let held = s.enter("a long launch").expect("not capturing");
    let t = s.clone();
    let r = thread::spawn(move || t.mark_capturer())
        .join()
        .expect("thread ran");
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    assert!(s.capturer().is_none());
    drop(held);
    assert!(s.mark_capturer().is_ok());
    s.clear_capturer();
}

/// Stress, the property itself: threads queueing in a loop and one
/// beginning and ending captures; no queueing call ever holds while a
/// capture of the value has begun (checked right after the check
/// passed and again before the hold drops).
#[test]
fn unit_property_queueing_never_interleaves_with_a_begun_capture() {
    use std::sync::atomic::AtomicBool;
    let s = on(0x2000 as cudaStream_t, None);
    let begun = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let violations = Arc::new(AtomicUsize::new(0));
    let passed = Arc::new(AtomicUsize::new(0));
    let mut queuers = Vec::new();
    for _ in 0..3 {
        let (s, begun, stop, v, p) = (
            s.clone(),
            begun.clone(),
            stop.clone(),
            violations.clone(),
            passed.clone(),
        );
        queuers.push(thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if let Ok(g) = s.enter("a launch") {
                    p.fetch_add(1, Ordering::SeqCst);
                    if begun.load(Ordering::SeqCst) {
                        v.fetch_add(1, Ordering::SeqCst);
                    }
                    std::hint::spin_loop();
                    if begun.load(Ordering::SeqCst) {
                        v.fetch_add(1, Ordering::SeqCst);
                    }
                    drop(g);
                }
            }
        }));
    }
    let t0 = Instant::now();
    let mut captures = 0;
    while t0.elapsed() < Duration::from_millis(300) {
        if s.mark_capturer().is_ok() {
            begun.store(true, Ordering::SeqCst);
            captures += 1;
            thread::sleep(Duration::from_micros(200));
            begun.store(false, Ordering::SeqCst);
            s.clear_capturer();
        }
        thread::sleep(Duration::from_micros(100));
    }
    stop.store(true, Ordering::SeqCst);
    for q in queuers {
        q.join().expect("thread ran");
    }
    assert_eq!(violations.load(Ordering::SeqCst), 0);
    assert!(captures > 0 && passed.load(Ordering::SeqCst) > 0);
}

/// What queue an identity names, written independently of `same_queue`.
#[derive(Debug, PartialEq)]
enum Queue {
    Object(usize),
    Legacy(Option<Device>),
    PerThread(Option<Device>, Option<ThreadId>),
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(20_000))]

    /// `==` on stream values names the same queue exactly when the model
    /// does, and is symmetric.
    #[test]
    fn unit_property_stream_equality_matches_the_queue_model(
        a in (0usize..5, proptest::option::of(0i32..3), 0usize..3),
        b in (0usize..5, proptest::option::of(0i32..3), 0usize..3),
    ) {
        let threads: Vec<ThreadId> = THREADS.with(|t| t.clone());
        let make = |(kind, dev, th): (usize, Option<i32>, usize)| -> (Identity, Queue) {
            let device = dev.map(Device::from_runtime);
            match kind {
                0 => ((ptr::null_mut(), device, None), Queue::Legacy(device)),
                1 => ((cudart::cudaStreamLegacy, device, None), Queue::Legacy(device)),
                2 => (
                    (cudart::cudaStreamPerThread, device, Some(threads[th])),
                    Queue::PerThread(device, Some(threads[th])),
                ),
                k => (((0x1000 * k) as cudaStream_t, device, None), Queue::Object(k)),
            }
        };
        let (ia, qa) = make(a);
        let (ib, qb) = make(b);
        proptest::prop_assert_eq!(same_queue(ia, ib), qa == qb);
        proptest::prop_assert_eq!(same_queue(ia, ib), same_queue(ib, ia));
        proptest::prop_assert!(same_queue(ia, ia));
    }
}

thread_local! {
    /// Three distinct thread ids (this one and two that ran and ended).
    static THREADS: Vec<ThreadId> = vec![
        thread::current().id(),
        thread::spawn(|| thread::current().id()).join().expect("thread ran"),
        thread::spawn(|| thread::current().id()).join().expect("thread ran"),
    ];
}
