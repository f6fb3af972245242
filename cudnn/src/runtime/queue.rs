//! The count of calls queueing work on a stream value: a capture of the
//! stream begins only when it is 0 (see `Stream::check_queue`). Apart from
//! `stream.rs` because a [`DeviceGuard`](super::DeviceGuard) carries one
//! too, and the device's file must not import the stream's (no import
//! circle).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A call queueing work on a stream value, counted (`Inner::queuing` of
/// the stream) from its queueing check until dropped; carried in the
/// [`DeviceGuard`](super::DeviceGuard) that `Stream::enter` and the
/// handles' `enter` return. Hold it until the enqueue returned: dropped at
/// once, it protects nothing.
#[must_use = "hold the QueueHold until the work is queued: dropped at once, a capture can begin before the enqueue and the work joins its graph"]
pub(crate) struct QueueHold(Arc<AtomicUsize>);

impl QueueHold {
    /// Counts one more call queueing on the stream whose count this is
    /// (sequentially consistent, as the capture's mark and its load of the
    /// count).
    pub(crate) fn count(queuing: &Arc<AtomicUsize>) -> Self {
        queuing.fetch_add(1, Ordering::SeqCst);
        QueueHold(Arc::clone(queuing))
    }
}

impl fmt::Debug for QueueHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("QueueHold")
            .field(&self.0.load(Ordering::Relaxed))
            .finish()
    }
}

impl Drop for QueueHold {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
