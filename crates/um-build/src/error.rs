//! The one error type of `um-build`: where (file, line, kernel, parameter), what, and what to do.

use std::fmt;
use std::path::{Path, PathBuf};

/// Why a build failed. `Display` (and `Debug`, so that `.unwrap()` in a build script prints it
/// readably) names the file and line, the kernel and parameter where there is one, what is
/// wrong, and what to change.
#[derive(Clone, PartialEq, Eq)]
pub struct Error(Box<Inner>);

#[derive(Clone, PartialEq, Eq)]
struct Inner {
    file: Option<PathBuf>,
    line: Option<usize>,
    kernel: Option<String>,
    param: Option<String>,
    message: String,
    help: Option<String>,
}

impl Error {
    pub(crate) fn new(message: impl Into<String>) -> Error {
        Error(Box::new(Inner {
            file: None,
            line: None,
            kernel: None,
            param: None,
            message: message.into(),
            help: None,
        }))
    }

    pub(crate) fn at(mut self, line: usize) -> Error {
        self.0.line = Some(line);
        self
    }

    pub(crate) fn kernel(mut self, kernel: &str) -> Error {
        self.0.kernel = Some(kernel.to_owned());
        self
    }

    pub(crate) fn param(mut self, param: &str) -> Error {
        self.0.param = Some(param.to_owned());
        self
    }

    pub(crate) fn help(mut self, help: impl Into<String>) -> Error {
        self.0.help = Some(help.into());
        self
    }

    pub(crate) fn in_file(mut self, file: &Path) -> Error {
        if self.0.file.is_none() {
            self.0.file = Some(file.to_owned());
        }
        self
    }

    /// The file the error is in, if any.
    pub fn file(&self) -> Option<&Path> {
        self.0.file.as_deref()
    }

    /// The 1-based line the error is on, if known.
    pub fn line(&self) -> Option<usize> {
        self.0.line
    }

    /// The kernel the error is about, if any.
    pub fn kernel_name(&self) -> Option<&str> {
        self.0.kernel.as_deref()
    }

    /// The parameter the error is about, if any.
    pub fn param_name(&self) -> Option<&str> {
        self.0.param.as_deref()
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.0.message
    }

    /// What to change, if `um-build` knows.
    pub fn help_text(&self) -> Option<&str> {
        self.0.help.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.0.file, self.0.line) {
            (Some(file), Some(line)) => write!(f, "{}:{line}: ", file.display())?,
            (Some(file), None) => write!(f, "{}: ", file.display())?,
            (None, Some(line)) => write!(f, "line {line}: ")?,
            (None, None) => {}
        }
        if let Some(k) = &self.0.kernel {
            write!(f, "kernel `{k}`: ")?;
        }
        if let Some(p) = &self.0.param {
            write!(f, "parameter `{p}`: ")?;
        }
        f.write_str(&self.0.message)?;
        if let Some(h) = &self.0.help {
            write!(f, "\n  help: {h}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
