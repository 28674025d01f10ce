//! `um-curand`'s error type: what the checks before a call refuse, and what cuRAND reports.

use um_core::ErrorKind;

/// Everything `um-curand` reports.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No cuRAND could be loaded. Each entry of `tried` is a candidate and the dynamic loader's
    /// reason; the message ends with what to install.
    #[error("cuRAND could not be loaded; tried {}. To fix: {}", .tried.join("; "), crate::library::INSTALL_HELP)]
    NotFound {
        /// `name: reason`, for every candidate, in the order tried.
        tried: Vec<String>,
    },
    /// The call's stream is not the one the generator belongs to.
    #[error(
        "the generator belongs to another stream than the call's: make one `Rng` per stream (its state is ordered by its own stream only)"
    )]
    WrongStream,
    /// A generator is made while a capture of `um` is in progress on its device (on any
    /// thread, inside a capture closure among them) or on the calling thread (of any device),
    /// or waits to begin on its device: cuRAND's set-up allocates and synchronizes with the
    /// legacy default stream, which would fail that capture, and the driver refuses it on a
    /// capturing thread. Nothing was made; make the generator before the capture begins, or
    /// after it. Also where the calling thread is already 16 closures of
    /// [`Context::with_idle_unless_capturing`](um_core::Context::with_idle_unless_capturing)
    /// or [`Context::with_captures_held_off`](um_core::Context::with_captures_held_off) deep,
    /// the most that can hold captures off (make it outside them).
    #[error(
        "a cuRAND generator cannot be made while a capture of um is in progress on its device or on this thread, or waits to begin on its device: its set-up synchronizes with the legacy default stream, which would fail the capture (make the generator before the capture begins, or after it ends; or, where this thread is 16 idle sections deep, outside them)"
    )]
    CaptureInProgress,
    /// The buffer is owned by another stream of the same stream set than the call's (the
    /// streams of a set share a brand, so this is checked at run time).
    #[error("the buffer is owned by another stream of the set than the call's")]
    StreamMismatch,
    /// Normally distributed numbers come in pairs (cuRAND's Box-Muller transform): a buffer of
    /// odd length is refused before cuRAND runs.
    #[error(
        "cuRAND makes normally distributed numbers in pairs: the buffer has {len} elements, an odd number (generate into an even length)"
    )]
    OddLength {
        /// The buffer's length.
        len: usize,
    },
    /// A standard deviation that is negative or not finite, or a mean that is not finite.
    #[error(
        "a normal distribution needs a finite mean and a finite, non-negative deviation: got mean {mean}, deviation {stddev}"
    )]
    Distribution {
        /// The mean given.
        mean: f64,
        /// The deviation given.
        stddev: f64,
    },
    /// The library has no entry point of this name ([`Curand::symbol`](crate::Curand::symbol)).
    #[error("cuRAND has no entry point {name}: {reason}")]
    NoSymbol {
        /// The name asked for.
        name: String,
        /// The dynamic loader's reason.
        reason: String,
    },
    /// A cuRAND call returned an error status.
    #[error("{call} failed: {name} ({description})")]
    Status {
        /// The entry point, for example `curandGenerateUniform`.
        call: &'static str,
        /// The raw `curandStatus_t`.
        code: i32,
        /// Its name, for example `CURAND_STATUS_LENGTH_NOT_MULTIPLE`.
        name: &'static str,
        /// What it means.
        description: &'static str,
    },
    /// A driver call `um` made for the call failed (making the context current, say).
    #[error(transparent)]
    Um(#[from] um_core::Error),
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The coarse kind of this error, as [`um_core::Error::kind`] gives it for um's own (a
    /// driver error keeps its kind): [`ErrorKind::LibraryMissing`] where the library could not
    /// be loaded, [`ErrorKind::WrongOwner`] for a buffer or stream the call may not use,
    /// [`ErrorKind::Invalid`] for what the checks before the call refuse,
    /// [`ErrorKind::NotHere`] for a generator asked for during a capture,
    /// [`ErrorKind::Library`] for what the library itself reports.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::LibraryMissing,
            Error::WrongStream | Error::StreamMismatch => ErrorKind::WrongOwner,
            Error::OddLength { .. } | Error::Distribution { .. } => ErrorKind::Invalid,
            Error::NoSymbol { .. } | Error::Status { .. } => ErrorKind::Library,
            Error::CaptureInProgress => ErrorKind::NotHere,
            Error::Um(inner) => inner.kind(),
        }
    }
}

impl Error {
    /// `Ok` for `CURAND_STATUS_SUCCESS`, else [`Error::Status`] with the status's name and
    /// meaning (`curand.h`, CUDA 13).
    pub(crate) fn status(call: &'static str, code: i32) -> Result<()> {
        if code == crate::sys::STATUS_SUCCESS {
            return Ok(());
        }
        let (name, description) = known(code);
        Err(Error::Status {
            call,
            code,
            name,
            description,
        })
    }
}

/// The statuses `curand.h` lists.
fn known(code: i32) -> (&'static str, &'static str) {
    match code {
        100 => (
            "CURAND_STATUS_VERSION_MISMATCH",
            "header file and linked library version do not match",
        ),
        101 => (
            "CURAND_STATUS_NOT_INITIALIZED",
            "the generator was not created",
        ),
        102 => (
            "CURAND_STATUS_ALLOCATION_FAILED",
            "memory allocation failed",
        ),
        103 => (
            "CURAND_STATUS_TYPE_ERROR",
            "the generator is of the wrong type",
        ),
        104 => ("CURAND_STATUS_OUT_OF_RANGE", "an argument is out of range"),
        105 => (
            "CURAND_STATUS_LENGTH_NOT_MULTIPLE",
            "the length requested is not a multiple of the dimension",
        ),
        106 => (
            "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED",
            "the GPU does not have double precision",
        ),
        201 => ("CURAND_STATUS_LAUNCH_FAILURE", "a kernel launch failed"),
        202 => (
            "CURAND_STATUS_PREEXISTING_FAILURE",
            "an earlier kernel launch failed",
        ),
        203 => (
            "CURAND_STATUS_INITIALIZATION_FAILED",
            "CUDA could not be initialized",
        ),
        204 => (
            "CURAND_STATUS_ARCH_MISMATCH",
            "the GPU architecture does not support the feature",
        ),
        999 => ("CURAND_STATUS_INTERNAL_ERROR", "an internal library error"),
        _ => (
            "CURAND_STATUS_UNKNOWN",
            "a status this version of um-curand does not know",
        ),
    }
}

/// Inside `um`'s stream closures (whose result is `um_core::Result`), `?` on a `um-curand`
/// result converts here: a driver error stays itself, a library that could not be loaded
/// becomes [`um_core::Error::LibraryNotFound`], everything else [`um_core::Error::Library`],
/// each with this error's message (so [`um_core::Error::kind`] still tells a missing library
/// from a refused call).
impl From<Error> for um_core::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Um(inner) => inner,
            missing @ Error::NotFound { .. } => um_core::Error::LibraryNotFound {
                library: "um-curand",
                message: missing.to_string(),
            },
            other => um_core::Error::Library {
                library: "um-curand",
                message: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use um_core::ErrorKind;

    /// A missing cuRAND stays a missing library through `?` into um's error; a refused call is
    /// `Invalid` or `WrongOwner` here and a library error there.
    #[test]
    fn a_missing_library_keeps_its_kind_through_the_conversion() {
        let missing = Error::NotFound { tried: vec![] };
        assert_eq!(missing.kind(), ErrorKind::LibraryMissing);
        let um: um_core::Error = missing.into();
        assert_eq!(um.kind(), ErrorKind::LibraryMissing);
        assert_eq!(Error::OddLength { len: 3 }.kind(), ErrorKind::Invalid);
        assert_eq!(Error::WrongStream.kind(), ErrorKind::WrongOwner);
        let um: um_core::Error = Error::WrongStream.into();
        assert_eq!(um.kind(), ErrorKind::Library);
    }
}
