//! Unit tests of the in-process comparison of calls across ranks
//! (`clique`), of the poisoning of failed non-blocking groups and of the
//! `NCCL_COMM_BLOCKING` refusal: no NCCL, no device. The issuing goes
//! through a counting [`Exec`], so "nothing launched" is observed directly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use super::clique::{self, Clique};
use super::comm::{Communicator, Mode, parse_nccl_int, refuse_forced_blocking};
use super::group::run;
use super::op::{Call, Op, ReduceOp};
use super::record::{Exec, Recorded};
use crate::error::{Error, Result};
use crate::runtime::Stream;

#[derive(Debug, Default)]
struct Counting {
    issued: Vec<String>,
    fail_issue: bool,
}

impl Exec for Counting {
    fn ready(&mut self, _: &[&Recorded<'_>]) -> Result<()> {
        Ok(())
    }
    fn start(&mut self) -> Result<()> {
        Ok(())
    }
    fn issue(&mut self, rec: &Recorded<'_>) -> Result<()> {
        if self.fail_issue {
            return Err(Error::invalid("nccl", "refused", 1));
        }
        self.issued.push(rec.call.describe());
        Ok(())
    }
    fn poison(&mut self) {}
    fn end(&mut self) -> Result<bool> {
        Ok(false)
    }
    fn settle(&mut self, _: &[&Recorded<'_>]) -> Result<()> {
        Ok(())
    }
}

/// The `size` communicators of one clique, as `init_all` makes them; never
/// handed to NCCL, never dropped.
fn clique_of(size: usize) -> Vec<ManuallyDrop<Communicator>> {
    Clique::all_local(size)
        .into_iter()
        .map(|m| ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), size, m)))
        .collect()
}

const P: *mut c_void = 0x1000 as *mut c_void;

fn bcast<T: super::NcclType>(count: usize, root: i32) -> Call {
    Call::new::<T>(Op::Broadcast {
        send: P,
        recv: P,
        count,
        root,
    })
}

fn allreduce(count: usize, op: ReduceOp) -> Call {
    Call::new::<f32>(Op::AllReduce {
        send: P,
        recv: P,
        count,
        op,
    })
}

fn send(count: usize, peer: i32) -> Call {
    Call::new::<f32>(Op::Send {
        send: P,
        count,
        peer,
    })
}

fn recv<T: super::NcclType>(count: usize, peer: i32) -> Call {
    Call::new::<T>(Op::Recv {
        recv: P,
        count,
        peer,
    })
}

/// Run one group of `calls` (communicator index, call) through `exec`.
fn group_of(
    exec: &mut Counting,
    comms: &[ManuallyDrop<Communicator>],
    calls: Vec<(usize, Call)>,
) -> Result<()> {
    let stream = Stream::legacy();
    run(exec, |g| {
        for (i, call) in calls {
            g.push(Recorded {
                comm: &comms[i],
                stream: &stream,
                call,
            });
        }
        Ok(())
    })
}

const MI: usize = 1 << 20;

/// The issue's case: a broadcast of 8 Mi floats from rank 0 into rank 1's
/// 4 Mi buffer (NCCL's P2P transport would write 8 Mi into it). Rank 0's
/// group launches; rank 1's is refused with both calls named, and launches
/// nothing.
#[test]
fn unit_clique_broadcast_count_mismatch_refused_across_groups() {
    let comms = clique_of(2);
    let mut e0 = Counting::default();
    group_of(&mut e0, &comms, vec![(0, bcast::<f32>(8 * MI, 0))]).unwrap();
    assert_eq!(e0.issued.len(), 1);
    let mut e1 = Counting::default();
    let err = group_of(&mut e1, &comms, vec![(1, bcast::<f32>(4 * MI, 0))]).unwrap_err();
    assert!(e1.issued.is_empty(), "nothing launched: {:?}", e1.issued);
    match &err {
        Error::Mismatch {
            what,
            expected,
            got,
        } => {
            assert!(what.contains("collective #1 of rank 1"), "{what}");
            assert!(expected.contains(&format!("{}", 8 * MI)), "{expected}");
            assert!(got.contains(&format!("{}", 4 * MI)), "{got}");
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
}

/// Both ranks in one group (one thread driving `init_all`'s
/// communicators): the mismatch is found before anything is issued.
#[test]
fn unit_clique_mismatch_in_one_group_launches_nothing() {
    let comms = clique_of(2);
    let mut e = Counting::default();
    let err = group_of(
        &mut e,
        &comms,
        vec![(0, bcast::<f32>(8 * MI, 0)), (1, bcast::<f32>(4 * MI, 0))],
    )
    .unwrap_err();
    assert!(matches!(err, Error::Mismatch { .. }), "{err:?}");
    assert!(e.issued.is_empty());
    // Nothing was recorded: the same group with agreeing counts passes.
    group_of(
        &mut e,
        &comms,
        vec![(0, bcast::<f32>(4 * MI, 0)), (1, bcast::<f32>(4 * MI, 0))],
    )
    .unwrap();
    assert_eq!(e.issued.len(), 2);
}

/// Root, reduction and element type are compared as well as the count.
#[test]
fn unit_clique_root_op_and_type_compared() {
    let cases: Vec<(Call, Call)> = vec![
        (bcast::<f32>(16, 0), bcast::<f32>(16, 1)),
        (allreduce(16, ReduceOp::Sum), allreduce(16, ReduceOp::Max)),
        // 16 f64 are 128 bytes, 16 f32 64: the f64 rank would write twice
        // the f32 rank's buffer.
        (bcast::<f64>(16, 0), bcast::<f32>(16, 0)),
        (bcast::<f32>(16, 0), allreduce(16, ReduceOp::Sum)),
    ];
    for (a, b) in cases {
        let comms = clique_of(2);
        let mut e = Counting::default();
        let err = group_of(&mut e, &comms, vec![(0, a), (1, b)]).unwrap_err();
        assert!(
            matches!(err, Error::Mismatch { .. }),
            "{} vs {}: {err:?}",
            a.describe(),
            b.describe()
        );
        assert!(e.issued.is_empty());
    }
}

/// Agreeing calls pass in any interleaving of the ranks, call after call.
#[test]
fn unit_clique_agreeing_sequences_pass() {
    let comms = clique_of(3);
    let mut e = Counting::default();
    for step in 0..5usize {
        let n = 10 + step;
        for r in [2, 0, 1] {
            group_of(&mut e, &comms, vec![(r, allreduce(n, ReduceOp::Sum))]).unwrap();
        }
    }
    assert_eq!(e.issued.len(), 15);
    // Rank 0 runs ahead by two calls; the others follow with the same.
    group_of(&mut e, &comms, vec![(0, bcast::<f32>(7, 2))]).unwrap();
    group_of(&mut e, &comms, vec![(0, bcast::<f32>(9, 2))]).unwrap();
    group_of(&mut e, &comms, vec![(1, bcast::<f32>(7, 2))]).unwrap();
    let err = group_of(&mut e, &comms, vec![(1, bcast::<f32>(8, 2))]).unwrap_err();
    assert!(matches!(err, Error::Mismatch { .. }), "{err:?}");
}

/// A send of 8 Mi floats to a rank that receives 4 Mi: refused on
/// whichever side comes second, by bytes (an f64 recv of half the count
/// agrees).
#[test]
fn unit_clique_send_recv_bytes_compared() {
    let comms = clique_of(2);
    let mut e = Counting::default();
    group_of(&mut e, &comms, vec![(0, send(8 * MI, 1))]).unwrap();
    let err = group_of(&mut e, &comms, vec![(1, recv::<f32>(4 * MI, 0))]).unwrap_err();
    match &err {
        Error::Mismatch { expected, got, .. } => {
            assert_eq!(expected, &format!("{}", 8 * MI * 4));
            assert!(got.starts_with(&format!("{}", 4 * MI * 4)), "{got}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.issued.len(), 1);
    // The refused recv was not recorded: the right one still pairs.
    group_of(&mut e, &comms, vec![(1, recv::<f64>(4 * MI, 0))]).unwrap();
    // The receiver first this time.
    group_of(&mut e, &comms, vec![(0, recv::<f32>(3, 1))]).unwrap();
    let err = group_of(&mut e, &comms, vec![(1, send(5, 0))]).unwrap_err();
    assert!(matches!(err, Error::Mismatch { .. }), "{err:?}");
}

/// A call posted and then refused by NCCL leaves the ranks out of step:
/// every later call of the clique is refused (typed), not compared against
/// the wrong position.
#[test]
fn unit_clique_failed_launch_breaks_the_clique() {
    let comms = clique_of(2);
    let mut bad = Counting {
        fail_issue: true,
        ..Counting::default()
    };
    group_of(&mut bad, &comms, vec![(0, bcast::<f32>(4, 0))]).unwrap_err();
    let mut e = Counting::default();
    let err = group_of(&mut e, &comms, vec![(1, bcast::<f32>(4, 0))]).unwrap_err();
    match &err {
        Error::InvalidArgument { arg, rule, .. } => {
            assert_eq!(arg, "communicator");
            assert!(rule.contains("out of step"), "{rule}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.issued.is_empty());
}

/// Zero-element calls are compared too (a rank with 0 elements against one
/// with many is the mismatch), though not issued.
#[test]
fn unit_clique_zero_counts_keep_positions() {
    let comms = clique_of(2);
    let mut e = Counting::default();
    group_of(&mut e, &comms, vec![(0, bcast::<f32>(0, 0))]).unwrap();
    let err = group_of(&mut e, &comms, vec![(1, bcast::<f32>(64, 0))]).unwrap_err();
    assert!(matches!(err, Error::Mismatch { .. }), "{err:?}");
    assert!(e.issued.is_empty());
}

/// Ranks joined with the same id (a thread per GPU with `init_rank`) share
/// a clique; a rank registered twice gets one of its own; a rank that
/// leaves is no longer waited for.
#[test]
fn unit_clique_join_by_id() {
    let mut id = [0u8; super::UNIQUE_ID_BYTES];
    getrandom::fill(&mut id).unwrap();
    let a = clique::join(&id, 0, 2);
    let b = clique::join(&id, 1, 2);
    let twice = clique::join(&id, 1, 2);
    let ca = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, a));
    let cb = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, b));
    let ct = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, twice));
    let comms = [ca, cb, ct];
    let mut e = Counting::default();
    group_of(&mut e, &comms, vec![(0, bcast::<f32>(8, 0))]).unwrap();
    // The duplicate is not compared with rank 0.
    group_of(&mut e, &comms, vec![(2, bcast::<f32>(4, 0))]).unwrap();
    let err = group_of(&mut e, &comms, vec![(1, bcast::<f32>(4, 0))]).unwrap_err();
    assert!(matches!(err, Error::Mismatch { .. }), "{err:?}");
}

/// A send to a rank of another process (not a member) is not comparable
/// here and passes.
#[test]
fn unit_clique_peer_in_another_process_unchecked() {
    let mut id = [0u8; super::UNIQUE_ID_BYTES];
    getrandom::fill(&mut id).unwrap();
    let m = clique::join(&id, 0, 4);
    let comms = [ManuallyDrop::new(Communicator::fake_in(
        NonNull::dangling(),
        4,
        m,
    ))];
    let mut e = Counting::default();
    group_of(&mut e, &comms, vec![(0, send(8, 3)), (0, send(9, 2))]).unwrap();
    assert_eq!(e.issued.len(), 2);
}

/// A failed group marks its non-blocking communicators: they refuse every
/// later call (NCCL keeps them in its error state for good).
#[test]
fn unit_failed_group_poisons_non_blocking_communicators() {
    let comms = clique_of(2);
    comms[0].set_mode(Mode::NonBlocking);
    comms[1].set_mode(Mode::NonBlocking);
    let mut bad = Counting {
        fail_issue: true,
        ..Counting::default()
    };
    group_of(
        &mut bad,
        &comms,
        vec![
            (0, allreduce(4, ReduceOp::Sum)),
            (1, allreduce(4, ReduceOp::Sum)),
        ],
    )
    .unwrap_err();
    assert!(comms[0].is_poisoned() && comms[1].is_poisoned());
    let err = comms[0].live().unwrap_err();
    match err {
        Error::InvalidArgument { arg, rule, .. } => {
            assert_eq!(arg, "communicator");
            assert!(rule.contains("failed in a group"), "{rule}");
        }
        other => panic!("{other:?}"),
    }
}

/// `NCCL_COMM_BLOCKING` as NCCL parses it (strtoll, base 0), and the
/// refusal of `init_rank_timeout` when it forces blocking.
#[test]
fn unit_nccl_comm_blocking_forced_is_refused() {
    for (text, want) in [
        ("1", Some(1)),
        ("0", Some(0)),
        (" 1", Some(1)),
        ("01", Some(1)),
        ("0x1", Some(1)),
        ("1abc", Some(1)),
        ("-1", Some(-1)),
        ("", None),
        ("yes", None),
    ] {
        assert_eq!(parse_nccl_int(text), want, "{text:?}");
    }
    // NCCL stores the int64 in an int: the low 32 bits decide (before the
    // fix the last three passed unrefused).
    for forced in ["1", "0x1", "01", "4294967297", "0x100000001", "-4294967295"] {
        let e = refuse_forced_blocking(Some(forced)).unwrap_err();
        match e {
            Error::InvalidArgument { arg, value, .. } => {
                assert_eq!(arg, "NCCL_COMM_BLOCKING");
                assert_eq!(value, forced);
            }
            other => panic!("{other:?}"),
        }
    }
    // 2^32 is 0 as an int; past i64 strtoll reports ERANGE and NCCL keeps
    // its default.
    for fine in [
        None,
        Some("0"),
        Some(""),
        Some("2"),
        Some("4294967296"),
        Some("-1"),
        Some("18446744073709551617"),
    ] {
        refuse_forced_blocking(fine).unwrap();
    }
}

/// The fingerprint exchanged across processes: its words, their text, and
/// the first rank that disagrees.
#[test]
fn unit_agreement_fingerprints() {
    use super::agree::{describe, first_disagreeing, words};
    let a = words(&bcast::<f32>(8, 0));
    let b = words(&bcast::<f32>(4, 0));
    let c = words(&allreduce(8, ReduceOp::Max));
    assert_ne!(a, b);
    assert_ne!(a, c);
    assert_eq!(a, words(&bcast::<f32>(8, 0)));
    assert_ne!(words(&bcast::<f64>(8, 0)), a);
    assert_ne!(words(&bcast::<f32>(8, 1)), a);
    let text = describe(&b);
    assert!(text.starts_with("broadcast of 4 elements"), "{text}");
    assert!(text.contains("root 0"), "{text}");
    let all: Vec<i64> = a.iter().chain(&a).chain(&b).copied().collect();
    assert_eq!(first_disagreeing(&all, &a), Some((2, b.to_vec())));
    let same: Vec<i64> = a.iter().chain(&a).copied().collect();
    assert_eq!(first_disagreeing(&same, &a), None);
    // A rank that never wrote its block (all zeros) disagrees.
    let mut missing = a.to_vec();
    missing.extend([0; 5]);
    assert_eq!(first_disagreeing(&missing, &a).map(|(r, _)| r), Some(1));
    assert!(describe(&[0; 5]).contains("did not take part"));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    /// Post `seqs[r]` for each rank in the order `order` gives (rank
    /// indices; a rank whose calls are all posted is skipped), one call per
    /// group; a rank whose call is refused stops. Returns, per rank, the
    /// position refused (if any) and the error.
    fn play(seqs: &[Vec<usize>], order: &[usize]) -> Vec<Option<(usize, Error)>> {
        let n = seqs.len();
        let comms = clique_of(n);
        let mut next = vec![0usize; n];
        let mut out: Vec<Option<(usize, Error)>> = (0..n).map(|_| None).collect();
        let mut e = Counting::default();
        for &pick in order
            .iter()
            .chain((0..n).cycle().take(n * 64).collect::<Vec<_>>().iter())
        {
            let r = pick % n;
            if out[r].is_some() || next[r] >= seqs[r].len() {
                continue;
            }
            let k = next[r];
            match group_of(&mut e, &comms, vec![(r, bcast::<f32>(seqs[r][k], 0))]) {
                Ok(()) => next[r] += 1,
                Err(err) => out[r] = Some((k, err)),
            }
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Ranks making the same calls are never refused, in any order.
        #[test]
        fn prop_agreeing_ranks_pass(
            n in 2usize..4,
            seq in proptest::collection::vec(0usize..5, 1..8),
            order in proptest::collection::vec(0usize..4, 0..40),
        ) {
            let seqs = vec![seq; n];
            for r in play(&seqs, &order) {
                prop_assert!(r.is_none(), "{:?}", r);
            }
        }

        /// `NCCL_COMM_BLOCKING` as any 64-bit number, in decimal or hex:
        /// refused exactly when C's conversion to `int` (Rust's `as i32`,
        /// the same two's-complement truncation) gives 1.
        #[test]
        fn prop_forced_blocking_follows_the_int_truncation(
            n in prop_oneof![
                any::<i64>(),
                (any::<i32>(), -2i64..3).prop_map(|(hi, lo)| i64::from(hi)
                    .wrapping_mul(1 << 32)
                    .wrapping_add(lo)),
            ],
            hex in any::<bool>(),
        ) {
            let text = if hex && n >= 0 { format!("{n:#x}") } else { n.to_string() };
            let refused = refuse_forced_blocking(Some(&text)).is_err();
            prop_assert_eq!(refused, n as i32 == 1, "{}", text);
        }

        /// `n` local ranks split with one color; `k` bind and post a
        /// broadcast, then the clique breaks (a call not launched); every
        /// rank bound after that is a member whose broadcast, of any
        /// count, is refused as out of step, never issued uncompared.
        #[test]
        fn prop_late_binds_into_a_broken_clique_are_refused(
            n in 2usize..6,
            k_pick in 1usize..6,
            counts in proptest::collection::vec(1usize..1_000_000, 6),
        ) {
            let k = 1 + (k_pick - 1) % (n - 1);
            let parents = Clique::all_local(n);
            let mut pending: Vec<_> = parents.iter().map(|p| Some(p.split(Some(2)))).collect();
            let mut e = Counting::default();
            let mut comms = Vec::new();
            for (r, p) in pending.iter_mut().enumerate().take(k) {
                let m = p.take().unwrap().bind(r, n);
                comms.push(ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), n, m)));
                group_of(&mut e, &comms, vec![(r, bcast::<f32>(counts[0], 0))]).unwrap();
            }
            comms[0].out_of_step(&bcast::<f32>(counts[0], 0));
            let issued = e.issued.len();
            for (r, p) in pending.iter_mut().enumerate().skip(k) {
                let m = p.take().unwrap().bind(r, n);
                comms.push(ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), n, m)));
                let err = group_of(&mut e, &comms, vec![(r, bcast::<f32>(counts[r], 0))])
                    .unwrap_err();
                prop_assert!(matches!(err, Error::InvalidArgument { .. }), "{:?}", err);
            }
            prop_assert_eq!(e.issued.len(), issued);
        }

        /// One rank's k-th count differs: whichever of the two ranks posts
        /// its k-th call second is refused there with a mismatch, and no
        /// call before position k is refused.
        #[test]
        fn prop_a_differing_count_is_refused_where_it_differs(
            seq in proptest::collection::vec(0usize..5, 1..8),
            k_pick in 0usize..8,
            order in proptest::collection::vec(0usize..2, 0..40),
        ) {
            let k = k_pick % seq.len();
            let mut other = seq.clone();
            other[k] += 1;
            let out = play(&[seq, other], &order);
            let refused: Vec<(usize, &Error)> =
                out.iter().flatten().map(|(p, e)| (*p, e)).collect();
            prop_assert_eq!(refused.len(), 1, "{:?}", out);
            let (p, e) = refused[0];
            prop_assert_eq!(p, k);
            prop_assert!(matches!(e, Error::Mismatch { .. }), "{:?}", e);
        }
    }
}

/// Splits of compared communicators are compared: the ranks that split
/// with the same color share a clique, registered before the split, so a
/// child that posts before its sibling is bound is still compared; other
/// colors (and no color) are apart.
#[test]
fn unit_clique_splits_compared() {
    let parents = Clique::all_local(3);
    // Every rank splits (in the same order); ranks 0 and 2 take color 7,
    // rank 1 none.
    let p0 = parents[0].split(Some(7));
    let p1 = parents[1].split(None);
    let p2 = parents[2].split(Some(7));
    // No color, no communicator from NCCL; one bound anyway refuses calls.
    let stray = p1.bind(0, 1);
    let cs = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 1, stray));
    let err = group_of(
        &mut Counting::default(),
        std::slice::from_ref(&cs),
        vec![(0, bcast::<f32>(1, 0))],
    )
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    let m0 = p0.bind(0, 2);
    let c0 = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, m0));
    // Rank 0 of the child posts before rank 1 is bound.
    let mut e = Counting::default();
    group_of(
        &mut e,
        std::slice::from_ref(&c0),
        vec![(0, bcast::<f32>(8, 0))],
    )
    .unwrap();
    let m1 = p2.bind(1, 2);
    let c1 = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, m1));
    let comms = [c0, c1];
    let err = group_of(&mut e, &comms, vec![(1, bcast::<f32>(4, 0))]).unwrap_err();
    assert!(matches!(err, Error::Mismatch { .. }), "{err:?}");
    group_of(&mut e, &comms, vec![(1, bcast::<f32>(8, 0))]).unwrap();
    // The next split with the same color is another clique.
    let q0 = parents[0].split(Some(7));
    let _q1 = parents[1].split(Some(7));
    let q0 = q0.bind(0, 2);
    let d0 = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, q0));
    group_of(
        &mut e,
        std::slice::from_ref(&d0),
        vec![(0, bcast::<f32>(1, 0))],
    )
    .unwrap();
}

/// The review's case: two local ranks split with one color; rank 0 binds
/// while rank 1 is still pending, broadcasts 8 Mi elements (compared,
/// launched), then its next call is refused by NCCL (the clique breaks).
/// Rank 1 binds after that: its 4 Mi broadcast must be refused (before
/// the fix `bind` returned `None` and the call went to NCCL uncompared, a
/// write past rank 1's buffer).
#[test]
fn unit_clique_bind_into_broken_clique_refuses() {
    let parents = Clique::all_local(2);
    let p0 = parents[0].split(Some(3));
    let p1 = parents[1].split(Some(3));
    let c0 = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, p0.bind(0, 2)));
    let mut e = Counting::default();
    group_of(
        &mut e,
        std::slice::from_ref(&c0),
        vec![(0, bcast::<f32>(8 << 20, 0))],
    )
    .unwrap();
    c0.out_of_step(&bcast::<f32>(1, 0));
    let c1 = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, p1.bind(1, 2)));
    let comms = [c0, c1];
    let err = group_of(&mut e, &comms, vec![(1, bcast::<f32>(4 << 20, 0))]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(err.to_string().contains("out of step"), "{err}");
    assert_eq!(e.issued.len(), 1, "only rank 0's broadcast was launched");
}

/// A split child that does not fit its siblings (a rank bound twice) breaks
/// the clique and refuses calls, rather than going on uncompared.
#[test]
fn unit_clique_bind_misfit_refuses() {
    let parents = Clique::all_local(2);
    let p0 = parents[0].split(Some(1));
    let p1 = parents[1].split(Some(1));
    let c0 = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, p0.bind(0, 2)));
    let c1 = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 2, p1.bind(0, 2)));
    let comms = [c0, c1];
    let mut e = Counting::default();
    let err = group_of(&mut e, &comms, vec![(1, bcast::<f32>(4, 0))]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
    assert!(e.issued.is_empty());
}

/// A send to a rank of another process, posted while a sibling was still
/// pending, is kept only until the last sibling is bound (before the fix a
/// successful bind did not prune: it stayed for good).
#[test]
fn unit_clique_bind_prunes_remote_p2p() {
    let parents = Clique::all_local(2);
    let p0 = parents[0].split(Some(5));
    let p1 = parents[1].split(Some(5));
    let c0 = ManuallyDrop::new(Communicator::fake_in(NonNull::dangling(), 8, p0.bind(0, 8)));
    let mut e = Counting::default();
    group_of(&mut e, std::slice::from_ref(&c0), vec![(0, send(16, 6))]).unwrap();
    assert_eq!(
        c0.member().unwrap().held(),
        1,
        "kept while rank 1 is pending"
    );
    let m1 = p1.bind(1, 8);
    assert_eq!(
        m1.held(),
        0,
        "rank 6 is in another process: nothing to keep"
    );
}

/// A member whose communicator was aborted leaves its clique: the other
/// ranks' positions complete without it instead of piling up (before the
/// fix an aborted, undropped communicator kept every position open).
#[test]
fn unit_clique_aborted_member_releases_positions() {
    let comms = clique_of(3);
    comms[2].member().unwrap().leave();
    let mut e = Counting::default();
    for n in 1..=5 {
        group_of(
            &mut e,
            &comms,
            vec![(0, bcast::<f32>(n, 0)), (1, bcast::<f32>(n, 0))],
        )
        .unwrap();
    }
    assert_eq!(comms[0].member().unwrap().held(), 0);
    // Still compared between the ranks left.
    group_of(&mut e, &comms, vec![(0, bcast::<f32>(9, 0))]).unwrap();
    let err = group_of(&mut e, &comms, vec![(1, bcast::<f32>(8, 0))]).unwrap_err();
    assert!(matches!(err, Error::Mismatch { .. }), "{err:?}");
}

/// While an abort of a communicator of a split family runs (a background
/// abort past its bound included), every member of the family refuses
/// calls; once it ended they are usable again.
#[test]
fn unit_family_refuses_calls_while_an_abort_runs() {
    let parent = ManuallyDrop::new(Communicator::fake(NonNull::dangling()));
    let mut child = ManuallyDrop::new(Communicator::fake(NonNull::dangling()));
    let stranger = ManuallyDrop::new(Communicator::fake(NonNull::dangling()));
    parent.inherit(&mut child);
    assert!(child.live().is_ok());
    let running = parent.family().begin_abort();
    for c in [&parent, &child] {
        let err = c.live().unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err:?}");
        assert!(err.to_string().contains("being aborted"), "{err}");
    }
    assert!(stranger.live().is_ok(), "another family is not concerned");
    drop(running);
    assert!(child.live().is_ok() && parent.live().is_ok());
}

/// Where an abort of a communicator whose job NCCL may hold runs: on the
/// calling thread, unbounded, only before NCCL 2.27 (its group job is in
/// the issuing thread's storage: `__thread struct ncclGroupJob
/// ncclGroupJobMain` in 2.26.6's group.cc), on the bounded helper from 2.27
/// (heap-allocated, reference-counted `ncclGroupJob` in 2.27.3 and 2.30.7).
/// Before the fix every linked abort ran unbounded on the calling thread.
#[test]
fn unit_linked_abort_is_bounded_from_nccl_2_27() {
    use super::comm::abort_here_for;
    assert!(abort_here_for(true, Some((2, 18))));
    assert!(abort_here_for(true, Some((2, 26))));
    assert!(abort_here_for(true, None), "unknown version: the safe side");
    assert!(!abort_here_for(true, Some((2, 27))));
    assert!(!abort_here_for(true, Some((2, 30))));
    assert!(!abort_here_for(true, Some((3, 0))));
    assert!(!abort_here_for(false, Some((2, 18))));
    assert!(!abort_here_for(false, None));
}
