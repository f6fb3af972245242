//! What this process gave cuDNN for one descriptor, as a digest: the key of
//! the finalize memo ([`crate::graph::finalize_memo`], a test aid).
//!
//! A descriptor's transcript starts from its type and folds in, in order,
//! every attribute set on it that succeeded (the attribute, its type and its
//! values, exactly; for an attribute holding descriptors, their transcripts)
//! and its finalize. A descriptor cuDNN filled (the engine configurations of
//! a heuristics query) is the filling descriptor's transcript, the attribute
//! and the position. So two execution plans with the same transcript were
//! given the same input, in the same order, all the way down to their
//! tensors.
//!
//! What a transcript cannot say (a handle, device addresses, a plan's JSON)
//! ends it: the descriptor, and every one built on it, has none. Transcripts
//! are kept only while the memo is on (descriptors made before have none),
//! so the crate pays nothing for them otherwise.

use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

use super::{AttrName, AttrType, DescType};

/// Whether descriptors made from now on keep a transcript.
static ON: AtomicBool = AtomicBool::new(false);

/// Descriptors made from now on keep a transcript (for the process).
pub(crate) fn turn_on() {
    ON.store(true, Ordering::Release);
}

/// A descriptor's transcript: `None` when it keeps none (made while the memo
/// was off) or was given something a transcript cannot say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transcript(Option<[u8; 32]>);

/// The framing of each record: a tag, then each part with its length.
fn fold(prev: Option<[u8; 32]>, tag: &[u8], parts: &[&[u8]]) -> Option<[u8; 32]> {
    let prev = prev?;
    let mut h = Sha256::new();
    h.update(prev);
    h.update((tag.len() as u64).to_le_bytes());
    h.update(tag);
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    Some(h.finalize().into())
}

impl Transcript {
    /// A new descriptor of type `ty`.
    pub(super) fn start(ty: DescType) -> Self {
        if !ON.load(Ordering::Acquire) {
            return Self(None);
        }
        Self(fold(
            Some([0; 32]),
            b"cudnn-rs transcript 2: new",
            &[&ty.0.to_le_bytes()],
        ))
    }

    /// Whether it is kept (what a caller checks before it spends anything
    /// on describing a value).
    pub(super) fn is_kept(&self) -> bool {
        self.0.is_some()
    }

    /// The transcript of this digest (an operation's, handed over as a
    /// digest by [`super::AnyOperation`]).
    pub(super) fn from_digest(digest: Option<[u8; 32]>) -> Self {
        Self(digest)
    }

    /// An attribute set to `count` plain values, `bytes` their bytes as
    /// cuDNN reads them (a float's every bit, NaN payloads included).
    pub(super) fn values(&mut self, name: AttrName, ty: AttrType, count: usize, bytes: &[u8]) {
        self.0 = fold(
            self.0,
            b"set",
            &[
                &name.0.to_le_bytes(),
                &ty.0.to_le_bytes(),
                &(count as u64).to_le_bytes(),
                bytes,
            ],
        );
    }

    /// An attribute set to descriptors with these transcripts.
    pub(super) fn descriptors(&mut self, name: AttrName, children: &[Transcript]) {
        let name = name.0.to_le_bytes();
        let mut parts: Vec<&[u8]> = vec![&name];
        for c in children {
            match &c.0 {
                Some(d) => parts.push(d),
                None => {
                    self.0 = None;
                    return;
                }
            }
        }
        self.0 = fold(self.0, b"set descriptors", &parts);
    }

    /// Something a transcript cannot say (a handle, device addresses, a
    /// plan's JSON): the descriptor has no transcript from now on.
    pub(super) fn end(&mut self) {
        self.0 = None;
    }

    /// A successful finalize.
    pub(super) fn finalized(&mut self) {
        self.0 = fold(self.0, b"finalize", &[]);
    }

    /// The descriptor cuDNN filled at position `index` of attribute `name`
    /// of the descriptor with this transcript.
    pub(super) fn child(&self, name: AttrName, index: usize) -> Self {
        Self(fold(
            self.0,
            b"filled",
            &[&name.0.to_le_bytes(), &(index as u64).to_le_bytes()],
        ))
    }

    /// The digest, when the descriptor keeps one.
    pub(crate) fn digest(&self) -> Option<[u8; 32]> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(ty: u32) -> Transcript {
        Transcript(fold(
            Some([0; 32]),
            b"cudnn-rs transcript 2: new",
            &[&ty.to_le_bytes()],
        ))
    }

    #[test]
    fn unit_transcripts_differ_by_value_order_and_framing() {
        let n = AttrName(1);
        let t = AttrType(2);
        let mut a = on(3);
        a.values(n, t, 2, &[1, 2]);
        let mut b = on(3);
        b.values(n, t, 2, &[1, 2]);
        assert_eq!(a, b, "the same input, the same transcript");
        let mut c = on(3);
        c.values(n, t, 2, &[1, 3]);
        assert_ne!(a, c, "a value");
        let mut d = on(4);
        d.values(n, t, 2, &[1, 2]);
        assert_ne!(a, d, "the descriptor type");
        let mut e = on(3);
        e.values(AttrName(5), t, 2, &[1, 2]);
        assert_ne!(a, e, "the attribute");
        // Two sets folded in order: swapping them differs.
        let mut f = on(3);
        f.values(n, t, 1, &[1]);
        f.values(AttrName(5), t, 1, &[2]);
        let mut g = on(3);
        g.values(AttrName(5), t, 1, &[2]);
        g.values(n, t, 1, &[1]);
        assert_ne!(f, g, "the order of sets");
        let mut h = a;
        h.finalized();
        assert_ne!(a, h, "the finalize");
        assert_ne!(a.child(n, 0), a.child(n, 1), "the position");
    }

    #[test]
    fn unit_what_a_transcript_cannot_say_ends_it_and_everything_built_on_it() {
        let mut a = on(1);
        a.end();
        assert_eq!(a.digest(), None);
        a.values(AttrName(1), AttrType(1), 1, &[0]);
        assert_eq!(a.digest(), None, "ended for good");
        let mut parent = on(2);
        parent.descriptors(AttrName(3), &[on(1), a]);
        assert_eq!(parent.digest(), None, "built on a descriptor without one");
        assert_eq!(a.child(AttrName(1), 0).digest(), None);
        let mut ok = on(2);
        ok.descriptors(AttrName(3), &[on(1)]);
        assert!(ok.digest().is_some());
    }
}
