//! One error type for the whole crate.
//!
//! Every failure keeps what a framework needs to show its user: the raw code
//! (unknown codes survive as numbers), the call that failed, the library's own
//! text, and our context (shapes, dtypes).

use std::fmt;

use crate::sys::{cudart, cudnn as dnn};

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong.
///
/// A framework that falls back to the CPU without a GPU branches on
/// [`Error::is_no_device`]: every entry point that needs a device (streams,
/// events, allocations, pinned host memory, the cuDNN, cuBLAS and cuBLASLt
/// handles, [`Target::device`](crate::graph::Target::device), NCCL
/// communicators, the cudarc interop) reports a missing one as
/// [`Error::NoDevice`], with the crate's own reason first and the library's
/// code and text after it.
///
/// ```no_run
/// # fn main() -> cudnn::Result<()> {
/// let stream = match cudnn::runtime::Stream::new() {
///     Ok(s) => Some(s),
///     Err(e) if e.is_no_device() => {
///         eprintln!("no GPU, using the CPU path: {e}");
///         None
///     }
///     Err(e) => return Err(e),
/// };
/// # let _ = stream;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A library could not be found or opened; lists every place tried.
    #[error(transparent)]
    Load(#[from] cudart::LoadError),

    /// The loaded library lacks a function (it is older).
    #[error(transparent)]
    MissingSymbol(#[from] cudart::MissingSymbol),

    /// A CUDA runtime call failed.
    #[error("{call} failed: CUDA error {code} ({name}: {text}){}", ctx(.context))]
    Cuda {
        /// The C function.
        call: &'static str,
        /// The raw `cudaError_t`.
        code: u32,
        /// `cudaGetErrorName`.
        name: String,
        /// `cudaGetErrorString`.
        text: String,
        /// Our context.
        context: Option<String>,
    },

    /// A cuDNN call failed.
    #[error("{call} failed: {status_name} ({text}){}{}", last(.last_error), ctx(.context))]
    Cudnn {
        /// The C function.
        call: &'static str,
        /// The status as the constant of the bindings (cuDNN 8 codes mapped).
        status: dnn::cudnnStatus_t,
        /// The code the loaded library actually returned.
        raw: u32,
        /// The status's name, or `CUDNN_STATUS_<number>` when unknown.
        status_name: String,
        /// `cudnnGetErrorString`.
        text: String,
        /// `cudnnGetLastErrorString`, where the library has it and said something.
        last_error: Option<String>,
        /// Our context.
        context: Option<String>,
    },

    /// A cuBLAS call failed.
    #[error("{call} failed: {status_name} ({text}){}", ctx(.context))]
    Cublas {
        /// The C function.
        call: &'static str,
        /// The raw `cublasStatus_t`.
        code: u32,
        /// The status's name, or `CUBLAS_STATUS_<number>`.
        status_name: String,
        /// `cublasGetStatusString`.
        text: String,
        /// Our context.
        context: Option<String>,
    },

    /// An argument breaks a rule; names the argument, the rule and the value.
    #[error("invalid argument `{arg}`: {rule} (got {value})")]
    InvalidArgument {
        /// Which argument (`"stride[2]"`).
        arg: String,
        /// The rule it breaks (`"must be >= 1"`).
        rule: String,
        /// The value given.
        value: String,
    },

    /// A length or shape does not match what a descriptor says.
    #[error("{what}: expected {expected}, got {got}")]
    Mismatch {
        /// What was compared (`"x buffer length"`).
        what: String,
        /// What the descriptor requires.
        expected: String,
        /// What was given.
        got: String,
    },

    /// The loaded library (or device) cannot do this.
    #[error("unsupported: {what}{}", needs.as_ref().map(|n| format!(" (needs {n})")).unwrap_or_default())]
    Unsupported {
        /// What was asked for.
        what: String,
        /// Which library version or device would have it.
        needs: Option<String>,
    },

    /// An NCCL call failed.
    #[error("{call} failed{}: {name} ({code}: {text}){}{}", on_rank(.rank), nccl_last(.last_error), ctx(.context))]
    Nccl {
        /// The C function.
        call: &'static str,
        /// The raw `ncclResult_t`.
        code: u32,
        /// The result's name (`ncclInvalidUsage`), or `"unknown"` for a
        /// code these bindings do not know (`code` keeps it).
        name: &'static str,
        /// `ncclGetErrorString`.
        text: String,
        /// `ncclGetLastError`, when NCCL said more.
        last_error: Option<Box<str>>,
        /// The caller's rank in the communicator, when the call had one.
        rank: Option<u32>,
        /// Our context.
        context: Option<String>,
    },

    /// A call that may not run while an NCCL group (`nccl::group`)
    /// is being recorded on this thread (a nested group, a direct
    /// collective, a communicator's creation, split, finalize, destroy or
    /// abort, a wait).
    #[error("{call} cannot run inside an nccl::group: {why}")]
    InGroup {
        /// What was called (`"Communicator::split"`).
        call: &'static str,
        /// Why it is refused.
        why: &'static str,
    },

    /// Work did not finish before its deadline (a communicator that never
    /// became ready, collectives that never completed). Names what was
    /// waited for, how long, and the rank; says whether the communicator
    /// was aborted.
    #[error("timed out after {waited:?} waiting for {what}{}", on_rank(.rank))]
    Timeout {
        /// What was waited for (`"ncclCommInitRankConfig to finish (rank 1 of 2); the communicator was aborted"`).
        what: String,
        /// How long it waited.
        waited: std::time::Duration,
        /// The rank, when there is a communicator.
        rank: Option<u32>,
    },

    /// Processes could not meet to exchange an NCCL unique id (rendezvous
    /// over a file or TCP): names the rendezvous and what went wrong.
    #[error("rendezvous {rendezvous}: {detail}")]
    Rendezvous {
        /// The rendezvous (`file:///tmp/job.id`, `tcp://127.0.0.1:29500`).
        rendezvous: String,
        /// What went wrong (an I/O error's text, a timeout, a protocol mismatch).
        detail: String,
    },

    /// Memory, streams, handles or communicators of one call belong to
    /// different devices (a buffer allocated on device 1 passed to a handle
    /// of device 0, a handle bound to a stream of another device).
    #[error("device mismatch: {what} is on device {got}, expected device {expected}")]
    DeviceMismatch {
        /// What is on the wrong device (`"buffer `x` of conv_forward"`).
        what: String,
        /// The device it must be on (the handle's, the stream's).
        expected: usize,
        /// The device it is on.
        got: usize,
    },

    /// A per-thread default stream ([`Stream::per_thread`](crate::runtime::Stream::per_thread))
    /// was used from another thread than the one it names: there it would
    /// name that thread's queue, unordered with the first.
    #[error("{what}: the per-thread default stream of thread {owner} used from thread {current}")]
    WrongThread {
        /// What was used (`"the stream of a cuDNN handle"`).
        what: String,
        /// The thread the stream belongs to (`ThreadId` as `Debug` prints it).
        owner: String,
        /// The calling thread.
        current: String,
    },

    /// A call that is not safe while its stream is being captured into a
    /// CUDA graph (it would allocate, search, upload or synchronize): names
    /// the call, what it would do, and what to do before the capture.
    /// Nothing was queued; the capture is still usable.
    #[error(
        "{op} cannot run while its stream is being captured into a CUDA graph: it would {hazard}; {before}"
    )]
    CaptureUnsafe {
        /// The call (`"conv_forward"`, `"gemm_batched"`).
        op: String,
        /// What it would do (`"grow the cuDNN workspace from 0 to 4096 bytes"`).
        hazard: String,
        /// What to do beforehand (`"call Handle::reserve_workspace(4096) before the capture"`).
        before: String,
    },

    /// An executable CUDA graph could not be updated from a new graph
    /// (`cudaGraphExecUpdate`): the topology, a node's kind or its function
    /// changed. The executable graph is unchanged; instantiate the new graph
    /// instead.
    #[error(
        "cudaGraphExecUpdate refused the update: {result} ({code}); instantiate the new graph instead"
    )]
    GraphUpdate {
        /// The `cudaGraphExecUpdateResult` name (`"cudaGraphExecUpdateErrorTopologyChanged"`).
        result: &'static str,
        /// Its raw value.
        code: u32,
    },

    /// There is no usable CUDA device: no driver, no device, a driver too
    /// old for the loaded runtime, a stub driver, or every device busy
    /// (as the device count reports it; one busy device is [`Error::Cuda`]).
    /// Every entry point that needs a device reports it this way (see
    /// [`Error::is_no_device`]).
    #[error("no usable CUDA device: {reason}{}", no_device_detail(.detail))]
    NoDevice {
        /// What is missing and what would fix it, in this crate's words.
        reason: String,
        /// What the library said (the call, its code and text), when a
        /// library call found it; a secondary detail.
        detail: Option<String>,
    },

    /// A CUDA driver API call failed (the cudarc interop, `cudnn::interop`).
    #[error("{call} failed: CUDA driver error {code} ({name}: {text}){}", ctx(.context))]
    Driver {
        /// What was called (`"cuCtxGetCurrent"`, `"cudarc CudaContext::new"`).
        call: &'static str,
        /// The raw `CUresult`.
        code: u32,
        /// `cuGetErrorName`.
        name: String,
        /// `cuGetErrorString`.
        text: String,
        /// Our context.
        context: Option<String>,
    },

    /// A file could not be opened, read or written: names what was being
    /// done, the path and the operating system's words.
    #[error("{op} {} failed: {detail}", path.display())]
    Io {
        /// What was being done (`"opening the plan cache file"`).
        op: String,
        /// The file.
        path: std::path::PathBuf,
        /// The kind of failure (`NotFound`, `PermissionDenied`, ...).
        kind: std::io::ErrorKind,
        /// The operating system's words.
        detail: String,
    },
}

fn ctx(c: &Option<String>) -> String {
    c.as_ref().map(|c| format!("; {c}")).unwrap_or_default()
}

fn on_rank(r: &Option<u32>) -> String {
    r.map(|r| format!(" on rank {r}")).unwrap_or_default()
}

fn nccl_last(c: &Option<Box<str>>) -> String {
    c.as_ref()
        .map(|c| format!("; NCCL says: {c}"))
        .unwrap_or_default()
}

fn no_device_detail(c: &Option<String>) -> String {
    c.as_ref()
        .map(|c| format!(" (detail: {c})"))
        .unwrap_or_default()
}

fn last(c: &Option<String>) -> String {
    c.as_ref()
        .map(|c| format!("; cuDNN says: {c}"))
        .unwrap_or_default()
}

impl Error {
    /// An [`Error::InvalidArgument`].
    pub fn invalid(
        arg: impl Into<String>,
        rule: impl Into<String>,
        value: impl fmt::Display,
    ) -> Self {
        Error::InvalidArgument {
            arg: arg.into(),
            rule: rule.into(),
            value: value.to_string(),
        }
    }

    /// An [`Error::Io`] from what was being done, the path and the error.
    #[cfg_attr(not(any(feature = "dnn", feature = "graph")), allow(dead_code))]
    pub(crate) fn io(op: impl Into<String>, path: &std::path::Path, e: &std::io::Error) -> Self {
        Error::Io {
            op: op.into(),
            path: path.to_path_buf(),
            kind: e.kind(),
            detail: e.to_string(),
        }
    }

    /// An [`Error::DeviceMismatch`].
    pub fn device_mismatch(what: impl Into<String>, expected: usize, got: usize) -> Self {
        Error::DeviceMismatch {
            what: what.into(),
            expected,
            got,
        }
    }

    /// An [`Error::Mismatch`].
    pub fn mismatch(
        what: impl Into<String>,
        expected: impl fmt::Display,
        got: impl fmt::Display,
    ) -> Self {
        Error::Mismatch {
            what: what.into(),
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }

    /// Add context (shapes, dtypes) to a library error, after any it holds;
    /// other kinds are returned as they are.
    pub fn with_context(mut self, text: impl Into<String>) -> Self {
        match &mut self {
            Error::Cuda { context, .. }
            | Error::Driver { context, .. }
            | Error::Cudnn { context, .. }
            | Error::Cublas { context, .. }
            | Error::Nccl { context, .. } => {
                let text = text.into();
                *context = Some(match context.take() {
                    Some(c) => format!("{c}; {text}"),
                    None => text,
                });
            }
            Error::NoDevice { detail, .. } => {
                let text = text.into();
                *detail = Some(match detail.take() {
                    Some(d) => format!("{d}; {text}"),
                    None => text,
                });
            }
            _ => {}
        }
        self
    }

    /// Whether this error means "there is no usable CUDA device here" (no
    /// driver, no device, a driver older than the runtime, a stub driver,
    /// every device busy): [`Error::NoDevice`], and a runtime or driver
    /// error ([`Error::Cuda`], [`Error::Driver`]) whose code means the same.
    /// False for one device that is busy while others may be free (code 46,
    /// `cudaErrorDevicesUnavailable`, from any call but the device count:
    /// an exclusive-process or prohibited device, or one out of resources)
    /// and for code 3 (`cudaErrorInitializationError`) in a process that
    /// saw a device before, such as a child `fork()`ed after CUDA was
    /// initialised (its context says so). A framework branches on it to fall back to the CPU (example on
    /// [`Error`]). A library that cannot be found at all is
    /// [`Error::Load`] instead, and false here.
    pub fn is_no_device(&self) -> bool {
        match self {
            Error::NoDevice { .. } => true,
            Error::Cuda { call, code, .. } => crate::no_device::runtime_no_device(call, *code),
            Error::Driver { call, code, .. } => crate::no_device::driver_no_device(call, *code),
            _ => false,
        }
    }

    /// The cuDNN status, when this is a cuDNN error.
    pub fn cudnn_status(&self) -> Option<dnn::cudnnStatus_t> {
        match self {
            Error::Cudnn { status, .. } => Some(*status),
            _ => None,
        }
    }
}
