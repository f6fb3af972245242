//! The opt-in comparison of calls across processes
//! ([`Communicator::set_check_agreement`]): before each direct call, the
//! ranks exchange a fingerprint of it through NCCL itself and refuse the
//! call when they disagree. A debugging aid: one more NCCL call and a
//! host wait per call. A direct send or recv becomes a host-synchronous
//! exchange with its peer, so direct calls meant to run concurrently (a
//! ring of `send(i + 1); recv(i - 1)`) wait on each other until the
//! timeout: such calls belong in a group (documented on
//! `set_check_agreement`).

use super::comm::Communicator;
use super::op::{Call, Op};
use crate::error::{Error, Result};
use crate::runtime::{DeviceBuffer, Stream};

/// Words in a fingerprint: kind, element type, count, reduction, root.
const WORDS: usize = 5;

/// The kinds of call, as numbers that travel.
fn kind_code(op: &Op) -> i64 {
    match op {
        Op::AllReduce { .. } => 1,
        Op::Broadcast { .. } => 2,
        Op::Reduce { .. } => 3,
        Op::AllGather { .. } => 4,
        Op::ReduceScatter { .. } => 5,
        Op::Send { .. } => 6,
        Op::Recv { .. } => 7,
    }
}

fn kind_name(code: i64) -> &'static str {
    match code {
        1 => "all_reduce",
        2 => "broadcast",
        3 => "reduce",
        4 => "all_gather",
        5 => "reduce_scatter",
        6 => "send",
        7 => "recv",
        0 => "nothing (the rank did not take part)",
        _ => "an unknown call",
    }
}

/// A collective's fingerprint: what every rank's call must agree on.
pub(crate) fn words(call: &Call) -> [i64; WORDS] {
    let fp = call.fingerprint();
    let (_, dtype, count, op, root) = fp.key;
    [
        kind_code(&call.op),
        i64::from(dtype),
        i64::try_from(count).unwrap_or(i64::MAX),
        op.map_or(-1, i64::from),
        root.map_or(-1, i64::from),
    ]
}

/// A fingerprint as text, for messages.
pub(crate) fn describe(w: &[i64]) -> String {
    match w {
        [k, t, n, op, root] => {
            let mut s = format!("{} of {n} elements of NCCL type {t}", kind_name(*k));
            if *op >= 0 {
                s.push_str(&format!(", reduction {op}"));
            }
            if *root >= 0 {
                s.push_str(&format!(", root {root}"));
            }
            s
        }
        _ => format!("{w:?}"),
    }
}

/// The first rank whose fingerprint in `all` (rank by rank) differs from
/// `mine`, with its fingerprint.
pub(crate) fn first_disagreeing(all: &[i64], mine: &[i64; WORDS]) -> Option<(usize, Vec<i64>)> {
    all.chunks(WORDS)
        .enumerate()
        .find(|(_, w)| *w != mine)
        .map(|(r, w)| (r, w.to_vec()))
}

impl Communicator {
    /// Compare `call` with the same call of every other rank (through an
    /// all-gather of fingerprints, or a fingerprint swap with the peer of a
    /// send or recv), waiting for the exchange within
    /// [`timeout`](Communicator::timeout).
    pub(crate) fn agree_across(&self, call: &Call, stream: &Stream) -> Result<()> {
        let mine = words(call);
        // The exchange's buffers live on this rank's device.
        self.device()?;
        let theirs: Vec<i64> = match call.p2p() {
            Some((send, peer)) => {
                // A send and its recv must agree in bytes: each side sends
                // its own size, as the partner's call would count it.
                let bytes = i64::try_from(call.bytes()).unwrap_or(i64::MAX);
                let out = DeviceBuffer::<i64>::from_host(&[bytes])?;
                let mut back = DeviceBuffer::<i64>::zeroed(1)?;
                super::group(|g| {
                    g.send(self, &out, peer, stream)?;
                    g.recv(self, &mut back, peer, stream)
                })?;
                self.wait(stream, self.timeout())?;
                let got = back.to_vec()?;
                let theirs = got.first().copied().unwrap_or(-1);
                if theirs != bytes {
                    return Err(Error::mismatch(
                        format!(
                            "the {} of rank {} against its partner's call on rank {peer} \
                             (checked across processes), in bytes: rank {peer}'s {}, this rank",
                            if send { "send" } else { "recv" },
                            self.rank(),
                            if send { "recv" } else { "send" },
                        ),
                        theirs,
                        format!("{bytes} ({})", call.describe()),
                    ));
                }
                return Ok(());
            }
            None => {
                let n = self.size();
                let len = n.checked_mul(WORDS).ok_or_else(|| {
                    Error::invalid("communicator size", "times 5 overflows usize", n)
                })?;
                let mut host = vec![0i64; len];
                let at = self.rank() * WORDS;
                if let Some(block) = host.get_mut(at..at + WORDS) {
                    block.copy_from_slice(&mine);
                }
                let mut buf = DeviceBuffer::<i64>::from_host(&host)?;
                let op = self.op_all_gather_in_place(&mut (&mut buf).into())?;
                // SAFETY: the op's pointers come from `buf`, borrowed until
                // the wait below has seen the stream finish.
                unsafe { super::collectives::issue_checked(self, Call::new::<i64>(op), stream) }?;
                self.wait(stream, self.timeout())?;
                buf.to_vec()?
            }
        };
        if let Some((r, w)) = first_disagreeing(&theirs, &mine) {
            return Err(Error::mismatch(
                format!(
                    "collective of rank {} against the same call of rank {r} (checked across \
                     processes: NCCL does not compare them, and a larger count writes past a \
                     smaller rank's buffer): rank {r} made",
                    self.rank()
                ),
                describe(&w),
                describe(&mine),
            ));
        }
        Ok(())
    }
}
