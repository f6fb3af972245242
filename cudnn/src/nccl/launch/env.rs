//! Reading the launch variables: which rank this process is, how many there
//! are, which GPU it drives, where and how long to meet. Pure: every read
//! goes through a lookup function, so tests never touch the process
//! environment.

use std::fmt;
use std::time::Duration;

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::address::{RENDEZVOUS_VAR, Rendezvous, host_problem};
use crate::error::{Error, Result};
use crate::nccl::Ranks;

/// The variable giving the rendezvous timeout in seconds.
pub const TIMEOUT_VAR: &str = "CUDNN_RS_RENDEZVOUS_TIMEOUT";
/// The variable holding the shared secret a TCP rendezvous requires (see
/// [`Token`]).
pub const TOKEN_VAR: &str = "CUDNN_RS_RENDEZVOUS_TOKEN";
/// The timeout when [`TIMEOUT_VAR`] is not set.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// The shortest timeout [`TIMEOUT_VAR`] may give (1 ms).
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest timeout [`TIMEOUT_VAR`] may give, and the longest
/// [`exchange`](super::exchange) waits whatever it is asked (10^6 s,
/// about 11.6 days).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(1_000_000);

/// Rank and world size, in the order they are looked for: torchrun's, then
/// Open MPI's, then SLURM's. The first pair with either variable set is
/// the one used, and it must be complete.
pub const RANK_VARS: [(&str, &str); 3] = [
    ("RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
];
/// The local rank, first set wins.
pub const LOCAL_RANK_VARS: [&str; 3] =
    ["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"];
/// The number of processes on this machine, first set wins.
pub const LOCAL_SIZE_VARS: [&str; 2] = ["LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"];

/// Every variable [`LaunchEnv::from_vars`] reads.
pub const VARIABLES: [&str; 16] = [
    "RANK",
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "SLURM_LOCALID",
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    RENDEZVOUS_VAR,
    TIMEOUT_VAR,
    TOKEN_VAR,
];

/// The longest [`Token`], in bytes.
pub const MAX_TOKEN_BYTES: usize = 256;

/// The shortest [`Token`] text, in bytes: 22, base64 of 16 bytes without
/// padding. A rank's proof is a MAC over a nonce that whatever answers at
/// rank 0's address chose, so whoever poses as rank 0 can try tokens
/// against it offline: only a token of 128 bits or more, drawn at random,
/// makes that hopeless. Counting bytes does not count bits (a phrase of 32
/// letters holds far fewer), so a token must also be written in a form of
/// random bytes: see [`Token::new`].
pub const MIN_TOKEN_BYTES: usize = 22;

/// The fewest hex digits of a [`Token`] written in hex (128 bits).
pub const MIN_TOKEN_HEX_DIGITS: usize = 32;

/// The fewest bytes a [`Token`] written in base64 must decode to (128 bits).
pub const MIN_TOKEN_DECODED_BYTES: usize = 16;

/// What [`Token::new`] asks of a token's text.
const TOKEN_RULE: &str = "must be at least 128 bits drawn at random, written as \
    32 or more hex digits (`openssl rand -hex 16`, or Token::generate) or as base64 or \
    base64url of 16 or more bytes (`openssl rand -base64 16`) that mixes at least two of \
    upper case, lower case and digits; at most 256 bytes (a phrase is not random bytes, \
    whatever its length)";

/// Whether `text` is written as random bytes of at least 128 bits: 32 or
/// more hex digits (a text of hex digits only is read as hex), or base64 /
/// base64url (padding optional, one alphabet) of at least 16 bytes mixing
/// at least two of upper case, lower case and digits. The mix refuses
/// some phrases (`my-training-job-token-for-team-a` is valid base64url,
/// all lower case), not all: `MyTrainingJobTokenForTeamA` passes. Only
/// the form is checked, never how random the text is; random base64 of
/// 16 bytes lacks the mix with a probability below 1e-7.
pub(crate) fn token_form_ok(text: &str) -> bool {
    let b = text.as_bytes();
    if b.iter().all(u8::is_ascii_hexdigit) {
        return b.len() >= MIN_TOKEN_HEX_DIGITS;
    }
    let body = text.strip_suffix("==").or_else(|| text.strip_suffix('='));
    let padded = body.is_some();
    let body = body.unwrap_or(text).as_bytes();
    if padded && !b.len().is_multiple_of(4) || body.len() % 4 == 1 {
        return false;
    }
    let std_alpha = |c: &u8| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/';
    let url_alpha = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_';
    if !body.iter().all(std_alpha) && !body.iter().all(url_alpha) {
        return false;
    }
    let decoded = body.len() / 4 * 3 + (body.len() % 4).saturating_sub(1);
    let classes = [
        body.iter().any(u8::is_ascii_uppercase),
        body.iter().any(u8::is_ascii_lowercase),
        body.iter().any(u8::is_ascii_digit),
    ]
    .iter()
    .filter(|&&c| c)
    .count();
    decoded >= MIN_TOKEN_DECODED_BYTES && classes >= 2
}

/// A shared secret every rank of one job is given (by [`TOKEN_VAR`]): rank
/// 0's TCP server hands the unique id only to a peer that proves it holds
/// the same token, and a rank takes the id only from a server that proves
/// it too. Without one, anyone who can reach rank 0's port while it waits
/// receives the id (and with it can join the communicator) or can take a
/// rank's place, and whoever takes the port first can hand the ranks an id
/// of its own.
///
/// The token itself never travels: each side proves it with HMAC-SHA256
/// over fresh nonces from both sides, and the id travels masked and tagged
/// with keys derived from it. `Debug` does not show it; `==` compares in
/// time that does not depend on where two tokens differ.
#[derive(Clone)]
pub struct Token(String);

impl PartialEq for Token {
    fn eq(&self, other: &Self) -> bool {
        self.matches(other.as_bytes())
    }
}

impl Eq for Token {}

impl Token {
    /// A token from its text: at most [`MAX_TOKEN_BYTES`] bytes of 128
    /// bits or more drawn at random, written as
    /// [`MIN_TOKEN_HEX_DIGITS`] or more hex digits (`openssl rand -hex 16`,
    /// [`Token::generate`]; a text of hex digits only is read as hex), or
    /// as base64 or base64url (padding optional) of
    /// [`MIN_TOKEN_DECODED_BYTES`] or more bytes (`openssl rand -base64
    /// 16`) that mixes at least two of upper case, lower case and digits.
    /// The crate cannot measure how random a text is: the form refuses
    /// short secrets and some phrases (all of one case, say), not every
    /// phrase (`MyTrainingJobTokenForTeamA` passes), and a phrase a false
    /// rank 0 could guess offline is no protection: draw the token at
    /// random.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `token` (or, read from the
    /// environment, [`TOKEN_VAR`]), its length in bytes and the rule, when
    /// it is longer than [`MAX_TOKEN_BYTES`] or not in one of these forms.
    pub fn new(text: impl Into<String>) -> Result<Self> {
        let text = text.into();
        if text.len() > MAX_TOKEN_BYTES || !token_form_ok(&text) {
            return Err(Error::invalid(
                "token",
                TOKEN_RULE,
                format!("{} bytes", text.len()),
            ));
        }
        Ok(Token(text))
    }

    /// A fresh token of 32 hex digits (128 bits from the operating system),
    /// to hand to every rank (as [`TOKEN_VAR`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming `token` when the operating system
    /// gives no random bytes.
    pub fn generate() -> Result<Self> {
        let mut n = [0u8; 16];
        getrandom::fill(&mut n)
            .map_err(|e| Error::invalid("token", "needs random bytes from the system", e))?;
        Ok(Token(n.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The token's text, to hand to the other ranks (as [`TOKEN_VAR`]).
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    fn keyed(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC takes a key of any length, so this cannot fail.
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(self.as_bytes())
            .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()));
        for p in parts {
            m.update(p);
        }
        m
    }

    /// HMAC-SHA256 keyed by the token over `parts`, in order.
    pub(crate) fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        self.keyed(parts).finalize().into_bytes().into()
    }

    /// Whether `tag` is [`mac`](Self::mac) of `parts` (compared in constant
    /// time).
    pub(crate) fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.keyed(parts).verify_slice(tag).is_ok()
    }

    /// Whether `bytes` are this token, compared in time that does not
    /// depend on where they differ.
    pub(crate) fn matches(&self, bytes: &[u8]) -> bool {
        let mine = self.as_bytes();
        let mut diff = u8::from(mine.len() != bytes.len());
        for (i, m) in mine.iter().enumerate() {
            diff |= m ^ bytes.get(i).copied().unwrap_or(!m);
        }
        diff == 0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<hidden>)")
    }
}

/// What the launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LaunchEnv {
    /// Rank and world size.
    pub ranks: Ranks,
    /// Rank on this machine: the ordinal of the GPU this process drives.
    pub local_rank: usize,
    /// The variable the local rank came from (one of [`LOCAL_RANK_VARS`];
    /// `LOCAL_RANK` when it was not set, for a single process).
    pub local_rank_var: &'static str,
    /// Processes on this machine, when the launcher said.
    pub local_world_size: Option<usize>,
    /// Where to meet; `None` for a single process.
    pub rendezvous: Option<Rendezvous>,
    /// How long to wait for the other ranks.
    pub timeout: Duration,
    /// The shared secret of a TCP rendezvous ([`TOKEN_VAR`]), if any.
    pub token: Option<Token>,
}

impl LaunchEnv {
    /// Read the process environment (see the [module docs](super)).
    ///
    /// # Errors
    /// As [`LaunchEnv::from_vars`]; also [`Error::InvalidArgument`] naming a
    /// variable that is not valid UTF-8.
    pub fn from_env() -> Result<Self> {
        for name in VARIABLES {
            if let Some(v) = std::env::var_os(name)
                && v.to_str().is_none()
            {
                return Err(Error::invalid(
                    name,
                    "must be valid UTF-8",
                    format!("{v:?}"),
                ));
            }
        }
        Self::from_vars(|name| std::env::var(name).ok())
    }

    /// Read the convention from `var` (a variable's value, `None` when
    /// unset), so it can be checked without touching the environment. A
    /// variable set to the empty string is set, and wrong.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the variable that is wrong: not a
    /// number, a rank without its world size (or the reverse), a world size
    /// of 0 or past NCCL's `int`, a rank not below its world size, a local
    /// rank missing with several ranks or not below the local world size, a
    /// local world size of 0 or above the world size, no rendezvous with
    /// several ranks, a malformed rendezvous, host or port, a timeout
    /// outside [`MIN_TIMEOUT`]..=[`MAX_TIMEOUT`] (or not a number), an empty
    /// or overlong token.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let num = |name: &str| -> Result<Option<usize>> {
            match var(name) {
                None => Ok(None),
                Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
                    Error::invalid(
                        name,
                        "must be a non-negative integer (one that fits usize)",
                        format!("{v:?}"),
                    )
                }),
            }
        };
        let ranks = read_ranks(&num)?;
        let size = ranks.size();
        let local_world_size = first_set(&num, &LOCAL_SIZE_VARS)?;
        if let Some((name, lws)) = local_world_size
            && (lws == 0 || lws > size)
        {
            return Err(Error::invalid(
                name,
                format!("must be 1..={size} (at most the world size)"),
                lws,
            ));
        }
        let (local_rank_var, local_rank) = match first_set(&num, &LOCAL_RANK_VARS)? {
            Some((name, l)) => {
                if let Some((lname, lws)) = local_world_size
                    && l >= lws
                {
                    return Err(Error::invalid(
                        name,
                        format!("must be less than {lname} ({lws})"),
                        l,
                    ));
                }
                (name, l)
            }
            None if size == 1 => (LOCAL_RANK_VARS[0], 0),
            None => {
                return Err(Error::invalid(
                    "LOCAL_RANK",
                    "must be set when the world size is above 1 (it picks this process's GPU; \
                     OMPI_COMM_WORLD_LOCAL_RANK and SLURM_LOCALID are read too)",
                    "unset",
                ));
            }
        };
        let rendezvous = read_rendezvous(&var, size)?;
        let timeout = match var(TIMEOUT_VAR) {
            None => DEFAULT_TIMEOUT,
            Some(t) => parse_timeout(&t)?,
        };
        let token = match var(TOKEN_VAR) {
            None => None,
            Some(t) => Some(Token::new(t).map_err(|e| match e {
                Error::InvalidArgument { rule, value, .. } => Error::InvalidArgument {
                    arg: TOKEN_VAR.into(),
                    rule,
                    value,
                },
                other => other,
            })?),
        };
        Ok(LaunchEnv {
            ranks,
            local_rank,
            local_rank_var,
            local_world_size: local_world_size.map(|(_, l)| l),
            rendezvous,
            timeout,
            token,
        })
    }
}

type Num<'a> = dyn Fn(&str) -> Result<Option<usize>> + 'a;

/// The first of `names` that is set, with its name.
fn first_set(num: &Num<'_>, names: &[&'static str]) -> Result<Option<(&'static str, usize)>> {
    for &name in names {
        if let Some(v) = num(name)? {
            return Ok(Some((name, v)));
        }
    }
    Ok(None)
}

fn read_ranks(num: &Num<'_>) -> Result<Ranks> {
    for (rank_var, size_var) in RANK_VARS {
        // The world size is read and checked first, so that a bad one is
        // blamed on its own variable (not on a rank that is missing).
        let size = num(size_var)?;
        if let Some(size) = size
            && (size == 0 || i32::try_from(size).is_err())
        {
            return Err(Error::invalid(
                size_var,
                format!("must be 1..={} (NCCL counts ranks in an int)", i32::MAX),
                size,
            ));
        }
        let (rank, size) = match (num(rank_var)?, size) {
            (None, None) => continue,
            (Some(r), Some(s)) => (r, s),
            (Some(r), None) => {
                return Err(Error::invalid(
                    size_var,
                    format!("must be set when {rank_var} is"),
                    format!("unset ({rank_var}={r})"),
                ));
            }
            (None, Some(s)) => {
                return Err(Error::invalid(
                    rank_var,
                    format!("must be set when {size_var} is"),
                    format!("unset ({size_var}={s})"),
                ));
            }
        };
        if rank >= size {
            return Err(Error::invalid(
                rank_var,
                format!("must be less than {size_var} ({size})"),
                rank,
            ));
        }
        return Ranks::new(rank, size);
    }
    Ranks::new(0, 1)
}

fn read_rendezvous(
    var: &dyn Fn(&str) -> Option<String>,
    size: usize,
) -> Result<Option<Rendezvous>> {
    if let Some(r) = var(RENDEZVOUS_VAR) {
        return r.parse().map(Some);
    }
    let (addr, port) = match (var("MASTER_ADDR"), var("MASTER_PORT")) {
        (Some(a), Some(p)) => (a, p),
        _ if size == 1 => return Ok(None),
        (a, p) => {
            let show = |v: Option<String>| v.map_or("unset".into(), |v| format!("{v:?}"));
            return Err(Error::invalid(
                RENDEZVOUS_VAR,
                "must be set, or MASTER_ADDR and MASTER_PORT, when the world size is above 1",
                format!("unset (MASTER_ADDR {}, MASTER_PORT {})", show(a), show(p)),
            ));
        }
    };
    let host = addr.trim();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Some(rule) = host_problem(host) {
        return Err(Error::invalid("MASTER_ADDR", rule, format!("{addr:?}")));
    }
    let p = port.trim();
    let port_num = p
        .parse::<u16>()
        .ok()
        .filter(|&n| n != 0 && p.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| {
            Error::invalid(
                "MASTER_PORT",
                "must be a port number in 1..=65535",
                format!("{port:?}"),
            )
        })?;
    Ok(Some(Rendezvous::Tcp {
        host: host.to_string(),
        port: port_num,
    }))
}

fn parse_timeout(t: &str) -> Result<Duration> {
    let secs = t.trim().parse::<f64>().ok().filter(|s| {
        s.is_finite() && *s >= MIN_TIMEOUT.as_secs_f64() && *s <= MAX_TIMEOUT.as_secs_f64()
    });
    match secs {
        Some(s) => Ok(Duration::from_secs_f64(s).clamp(MIN_TIMEOUT, MAX_TIMEOUT)),
        None => Err(Error::invalid(
            TIMEOUT_VAR,
            format!(
                "must be a number of seconds from {} to {}",
                MIN_TIMEOUT.as_secs_f64(),
                MAX_TIMEOUT.as_secs()
            ),
            format!("{t:?}"),
        )),
    }
}
