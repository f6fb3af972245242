//! The unique id that names one communicator.

use std::fmt;
use std::str::FromStr;

use super::{api, nccl_call, sys};
use crate::error::{Error, Result};

/// Bytes in a [`UniqueId`] (`NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = sys::NCCL_UNIQUE_ID_BYTES as usize;

/// The token all ranks of one communicator share (`ncclUniqueId`).
///
/// One process makes it ([`UniqueId::new`]; no device needed: it only
/// opens NCCL's bootstrap socket), then hands it to the others, as
/// [`to_bytes`](UniqueId::to_bytes) / [`from_bytes`](UniqueId::from_bytes)
/// or as text ([`Display`](fmt::Display) writes 256 lowercase hex digits,
/// [`FromStr`] reads them back). [`launch`](super::launch) does the
/// hand-over for processes started by a launcher.
///
/// The id holds the address of the creating process's bootstrap socket, so
/// it names a live process: make it afresh for each communicator. Whoever
/// holds it can join the communicator: `Debug` shows only a fingerprint
/// (`Display` shows it all, to hand it over).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId {
    bytes: [u8; UNIQUE_ID_BYTES],
}

impl fmt::Debug for UniqueId {
    /// A fingerprint only (the first 4 bytes of the id's SHA-256): the id
    /// lets whoever holds it join the communicator, so logs do not show it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use sha2::{Digest, Sha256};
        let d = Sha256::digest(self.bytes);
        write!(f, "UniqueId(sha256:")?;
        for b in d.iter().take(4) {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}

impl UniqueId {
    /// A fresh id from NCCL (`ncclGetUniqueId`).
    ///
    /// # Errors
    /// [`Error::Load`] when NCCL cannot be found, [`Error::Nccl`] when NCCL
    /// cannot open its bootstrap socket (no network interface it accepts).
    #[doc(alias = "ncclGetUniqueId")]
    pub fn new() -> Result<Self> {
        let api = api()?;
        let mut raw = sys::ncclUniqueId::default();
        // SAFETY: `raw` is a valid, writable ncclUniqueId; no device is needed.
        unsafe { nccl_call!(api, ncclGetUniqueId(&mut raw)) }?;
        Ok(Self::from_raw(raw))
    }

    /// The id's bytes, to send to the other ranks.
    pub fn to_bytes(&self) -> [u8; UNIQUE_ID_BYTES] {
        self.bytes
    }

    /// An id received from the rank that made it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `bytes` is not exactly
    /// [`UNIQUE_ID_BYTES`] long.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let bytes: [u8; UNIQUE_ID_BYTES] = bytes.try_into().map_err(|_| {
            Error::invalid(
                "bytes",
                format!("an NCCL unique id is exactly {UNIQUE_ID_BYTES} bytes"),
                format!("{} bytes", bytes.len()),
            )
        })?;
        Ok(UniqueId { bytes })
    }

    /// The raw `ncclUniqueId`.
    pub fn as_raw(&self) -> sys::ncclUniqueId {
        let mut raw = sys::ncclUniqueId::default();
        for (d, s) in raw.internal.iter_mut().zip(self.bytes) {
            *d = s as core::ffi::c_char;
        }
        raw
    }

    /// An id from a raw `ncclUniqueId` (one made by other code).
    pub fn from_raw(raw: sys::ncclUniqueId) -> Self {
        let mut bytes = [0u8; UNIQUE_ID_BYTES];
        for (d, s) in bytes.iter_mut().zip(raw.internal) {
            *d = s as u8;
        }
        UniqueId { bytes }
    }
}

impl fmt::Display for UniqueId {
    /// 256 lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.bytes {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl From<[u8; UNIQUE_ID_BYTES]> for UniqueId {
    /// An id from its bytes (as [`UniqueId::to_bytes`] gave them).
    fn from(bytes: [u8; UNIQUE_ID_BYTES]) -> Self {
        UniqueId { bytes }
    }
}

impl FromStr for UniqueId {
    type Err = Error;

    /// Parse what [`Display`](fmt::Display) wrote (hex digits of either
    /// case; surrounding whitespace is ignored). A length in an error is
    /// given in characters and in bytes (of the text without the
    /// whitespace around it); an offset counts characters.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        let chars = s.chars().count();
        if chars != 2 * UNIQUE_ID_BYTES {
            return Err(Error::invalid(
                "unique id text",
                format!(
                    "must be {} hex digits (an id of {UNIQUE_ID_BYTES} bytes)",
                    2 * UNIQUE_ID_BYTES
                ),
                format!("{chars} characters ({} bytes of text)", s.len()),
            ));
        }
        let mut bytes = [0u8; UNIQUE_ID_BYTES];
        let mut digits = s.chars().enumerate();
        for b in bytes.iter_mut() {
            let mut nibble = || -> Result<u8> {
                let (at, c) = digits.next().unwrap_or((2 * UNIQUE_ID_BYTES, ' '));
                match c.to_digit(16) {
                    // A hex digit is below 16, so it fits u8.
                    Some(d) => Ok(d as u8),
                    None => Err(Error::invalid(
                        "unique id text",
                        "must be hex digits only",
                        format!("{c:?} at character {at}"),
                    )),
                }
            };
            let high = nibble()?;
            let low = nibble()?;
            *b = high << 4 | low;
        }
        Ok(UniqueId { bytes })
    }
}
