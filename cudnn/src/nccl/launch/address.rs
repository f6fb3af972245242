//! Where the ranks meet: the [`Rendezvous`] address, its text form and the
//! rules for a host name.

use std::fmt;
use std::net::Ipv6Addr;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{Error, Result};

/// The variable naming the rendezvous explicitly.
pub const RENDEZVOUS_VAR: &str = "CUDNN_RS_RENDEZVOUS";

/// The longest host name DNS allows.
const MAX_HOST: usize = 253;

/// Where the ranks meet to share the unique id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Rendezvous {
    /// A file on a file system every rank sees.
    File(PathBuf),
    /// A TCP address rank 0 listens on.
    Tcp {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
    },
}

impl fmt::Display for Rendezvous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rendezvous::File(p) => write!(f, "file://{}", p.display()),
            Rendezvous::Tcp { host, port } if host.contains(':') => {
                write!(f, "tcp://[{host}]:{port}")
            }
            Rendezvous::Tcp { host, port } => write!(f, "tcp://{host}:{port}"),
        }
    }
}

/// Why `host` cannot name rank 0's machine, if it cannot: empty, longer
/// than DNS allows, a character no host name or address has, or a colon
/// outside an IPv6 address. `host` is given without brackets.
pub(crate) fn host_problem(host: &str) -> Option<&'static str> {
    if host.is_empty() {
        return Some("names a host (it is empty)");
    }
    if host.len() > MAX_HOST {
        return Some("names a host of at most 253 characters");
    }
    if host.contains(':') {
        return match host.parse::<Ipv6Addr>() {
            Ok(_) => None,
            Err(_) => Some("is a host name, an IPv4 address or an IPv6 address"),
        };
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if !host.chars().all(ok) {
        return Some("is a host name or address (letters, digits, '.', '-', '_')");
    }
    None
}

impl FromStr for Rendezvous {
    type Err = Error;

    /// `file:///path`, a plain path, or `tcp://host:port` (IPv6 hosts in
    /// brackets).
    fn from_str(s: &str) -> Result<Self> {
        let bad = |rule: &str| Error::invalid(RENDEZVOUS_VAR, rule.to_string(), format!("{s:?}"));
        if let Some(rest) = s.strip_prefix("tcp://") {
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            let (host, port) = rest
                .rsplit_once(':')
                .ok_or_else(|| bad("a tcp rendezvous is tcp://host:port"))?;
            let host = match host.strip_prefix('[') {
                Some(inner) => inner
                    .strip_suffix(']')
                    .filter(|h| h.parse::<Ipv6Addr>().is_ok())
                    .ok_or_else(|| bad("brackets hold an IPv6 address: tcp://[::1]:port"))?,
                None => host,
            };
            if let Some(rule) = host_problem(host) {
                return Err(bad(&format!("the host {rule}")));
            }
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|&p| p != 0 && port.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| bad("the port is a number in 1..=65535"))?;
            return Ok(Rendezvous::Tcp {
                host: host.to_string(),
                port,
            });
        }
        let path = s.strip_prefix("file://").unwrap_or(s);
        if path.is_empty() || s.contains("://") && !s.starts_with("file://") {
            return Err(bad("must be file:///path, a path, or tcp://host:port"));
        }
        if path.contains('\0') {
            return Err(bad("a path holds no NUL character"));
        }
        Ok(Rendezvous::File(PathBuf::from(path)))
    }
}
