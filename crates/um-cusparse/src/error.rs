//! `um-cusparse`'s error type: what the checks before a call refuse, and what cuSPARSE reports.

use um_core::ErrorKind;

/// Everything `um-cusparse` reports.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No cuSPARSE could be loaded. Each entry of `tried` is a candidate and the dynamic loader's
    /// reason; the message ends with what to install.
    #[error("cuSPARSE could not be loaded; tried {}. To fix: {}", .tried.join("; "), crate::library::INSTALL_HELP)]
    NotFound {
        /// `name: reason`, for every candidate, in the order tried.
        tried: Vec<String>,
    },
    /// The call's stream is not the one the handle belongs to.
    #[error(
        "the cuSPARSE handle belongs to another stream than the call's: make one `Sparse` per stream (its workspace is ordered by its own stream only)"
    )]
    WrongStream,
    /// A matrix or vector is owned by another stream of the same stream set than the call's
    /// (the streams of a set share a brand, so this is checked at run time).
    #[error("`{buffer}` is owned by another stream of the set than the call's")]
    StreamMismatch {
        /// The operand: `a`, `x`, `y`, `b` or `c`.
        buffer: &'static str,
    },
    /// A CSR structure that is not one: refused while the matrix is host-owned, before it can
    /// reach cuSPARSE.
    #[error("not a CSR matrix: {0}")]
    Structure(String),
    /// A vector or dense matrix that does not fit the product.
    #[error("{0}")]
    Shape(String),
    /// The library has no entry point of this name ([`Cusparse::symbol`](crate::Cusparse::symbol)).
    #[error("cuSPARSE has no entry point {name}: {reason}")]
    NoSymbol {
        /// The name asked for.
        name: String,
        /// The dynamic loader's reason.
        reason: String,
    },
    /// A cuSPARSE call returned an error status.
    #[error("{call} failed: {name} ({description})")]
    Status {
        /// The entry point, for example `cusparseSpMV`.
        call: &'static str,
        /// The raw `cusparseStatus_t`.
        code: i32,
        /// Its name, for example `CUSPARSE_STATUS_INVALID_VALUE`.
        name: String,
        /// What it means.
        description: String,
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
    /// [`ErrorKind::Library`] for what the library itself reports.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound { .. } => ErrorKind::LibraryMissing,
            Error::WrongStream | Error::StreamMismatch { .. } => ErrorKind::WrongOwner,
            Error::Structure(_) | Error::Shape(_) => ErrorKind::Invalid,
            Error::NoSymbol { .. } | Error::Status { .. } => ErrorKind::Library,
            Error::Um(inner) => inner.kind(),
        }
    }
}

impl Error {
    /// `Ok` for `CUSPARSE_STATUS_SUCCESS`, else [`Error::Status`] with the name and description
    /// cuSPARSE gives (`cusparseGetErrorName`/`String`), or this crate's table.
    pub(crate) fn status(api: &crate::sys::Api, call: &'static str, code: i32) -> Result<()> {
        if code == crate::sys::STATUS_SUCCESS {
            return Ok(());
        }
        let (name, description) = crate::result::status_texts(api, code);
        let (known_name, known_text) = known(code);
        Err(Error::Status {
            call,
            code,
            name: name.unwrap_or_else(|| known_name.to_owned()),
            description: description.unwrap_or_else(|| known_text.to_owned()),
        })
    }
}

/// The statuses `cusparse.h` lists.
fn known(code: i32) -> (&'static str, &'static str) {
    match code {
        1 => (
            "CUSPARSE_STATUS_NOT_INITIALIZED",
            "the library was not initialized",
        ),
        2 => ("CUSPARSE_STATUS_ALLOC_FAILED", "resource allocation failed"),
        3 => (
            "CUSPARSE_STATUS_INVALID_VALUE",
            "an invalid value was passed",
        ),
        4 => (
            "CUSPARSE_STATUS_ARCH_MISMATCH",
            "the device does not support the operation",
        ),
        5 => (
            "CUSPARSE_STATUS_MAPPING_ERROR",
            "an access to GPU memory space failed",
        ),
        6 => (
            "CUSPARSE_STATUS_EXECUTION_FAILED",
            "the GPU program failed to execute",
        ),
        7 => (
            "CUSPARSE_STATUS_INTERNAL_ERROR",
            "an internal operation failed",
        ),
        8 => (
            "CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED",
            "the matrix type is not supported",
        ),
        9 => ("CUSPARSE_STATUS_ZERO_PIVOT", "a zero pivot was found"),
        10 => (
            "CUSPARSE_STATUS_NOT_SUPPORTED",
            "the operation or data type is not supported",
        ),
        11 => (
            "CUSPARSE_STATUS_INSUFFICIENT_RESOURCES",
            "resources are insufficient for the operation",
        ),
        _ => (
            "CUSPARSE_STATUS_UNKNOWN",
            "a status this version of um-cusparse does not know",
        ),
    }
}

/// Inside `um`'s stream closures (whose result is `um_core::Result`), `?` on a `um-cusparse`
/// result converts here: a driver error stays itself, a library that could not be loaded
/// becomes [`um_core::Error::LibraryNotFound`], everything else [`um_core::Error::Library`],
/// each with this error's message (so [`um_core::Error::kind`] still tells a missing library
/// from a refused call).
impl From<Error> for um_core::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Um(inner) => inner,
            missing @ Error::NotFound { .. } => um_core::Error::LibraryNotFound {
                library: "um-cusparse",
                message: missing.to_string(),
            },
            other => um_core::Error::Library {
                library: "um-cusparse",
                message: other.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Error;
    use um_core::ErrorKind;

    /// A missing cuSPARSE stays a missing library through `?` into um's error; a matrix that is
    /// not CSR is `Invalid` here and a library error there.
    #[test]
    fn a_missing_library_keeps_its_kind_through_the_conversion() {
        let missing = Error::NotFound { tried: vec![] };
        assert_eq!(missing.kind(), ErrorKind::LibraryMissing);
        let um: um_core::Error = missing.into();
        assert_eq!(um.kind(), ErrorKind::LibraryMissing);
        let structure = Error::Structure("offsets decrease".into());
        assert_eq!(structure.kind(), ErrorKind::Invalid);
        let um: um_core::Error = structure.into();
        assert_eq!(um.kind(), ErrorKind::Library);
    }
}
