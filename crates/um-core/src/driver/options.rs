//! How a context is opened: [`ContextOptions`].

use std::ffi::OsStr;

use crate::error::{Error, Result};

/// Options for [`Context::new_with_options`](crate::Context::new_with_options).
///
/// ```no_run
/// # fn main() -> um_core::Result<()> {
/// use um_core::{Context, ContextOptions};
/// // Take the code paths of a device without concurrent managed access, on any device.
/// let ctx = Context::new_with_options(0, ContextOptions::new().emulate_no_concurrent_access(true))?;
/// assert!(!ctx.info().concurrent_managed_access);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextOptions {
    emulate_no_concurrent_access: bool,
}

impl ContextOptions {
    /// The environment variable that [`Context::new`](crate::Context::new) reads (through
    /// [`ContextOptions::from_env`]): `1` turns on
    /// [`emulate_no_concurrent_access`](ContextOptions::emulate_no_concurrent_access) for every
    /// context the program opens, `0` (or unset, or empty) leaves it off. Any other value is
    /// [`Error::InvalidEnvironment`]. The GPU run script sets it in its
    /// `--emulate-no-concurrent-access` mode.
    pub const EMULATE_NO_CONCURRENT_ACCESS_VAR: &'static str = "UM_EMULATE_NO_CONCURRENT_ACCESS";

    /// The defaults: the device's own capabilities, no emulation. The environment is not read.
    pub fn new() -> Self {
        Self::default()
    }

    /// The defaults, changed by the environment: see
    /// [`EMULATE_NO_CONCURRENT_ACCESS_VAR`](ContextOptions::EMULATE_NO_CONCURRENT_ACCESS_VAR).
    pub fn from_env() -> Result<Self> {
        let var = Self::EMULATE_NO_CONCURRENT_ACCESS_VAR;
        let on = parse_flag(var, std::env::var_os(var).as_deref())?;
        Ok(Self::new().emulate_no_concurrent_access(on))
    }

    /// Makes the context behave as if the device lacked concurrent managed access
    /// (`CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS` = 0, as on Windows, WSL, Jetson and
    /// pre-Pascal GPUs), whatever the device reports.
    ///
    /// [`DeviceInfo::concurrent_managed_access`](crate::DeviceInfo::concurrent_managed_access)
    /// is then `false` and
    /// [`DeviceInfo::emulated_no_concurrent_access`](crate::DeviceInfo::emulated_no_concurrent_access)
    /// `true`, and every transition takes the path such a device needs: `sync` and `sync_all`
    /// re-attach memory to the host (`CU_MEM_ATTACH_HOST`) before they wait, so every later
    /// `attach` is a real driver call, and the [`Transfer`](crate::Transfer) policies neither
    /// prefetch nor advise. It is for tests: it runs, on a device that has concurrent access,
    /// every driver call that a device without it gets from `um` ([`docs/design.md`](https://github.com/um-rs/um/blob/main/docs/design.md) says what
    /// that proves and what it cannot).
    ///
    /// The mode belongs to the handle it was opened with, and each buffer follows the handle
    /// it was allocated with. Two handles of one device share the driver context
    /// ([`Context::same_as`](crate::Context::same_as)) even if only one emulates.
    pub fn emulate_no_concurrent_access(mut self, on: bool) -> Self {
        self.emulate_no_concurrent_access = on;
        self
    }

    /// Whether [`emulate_no_concurrent_access`](ContextOptions::emulate_no_concurrent_access)
    /// is on.
    pub fn emulates_no_concurrent_access(&self) -> bool {
        self.emulate_no_concurrent_access
    }
}

/// An on/off environment variable: unset, empty or `0` is off, `1` is on, anything else an
/// error (a typo must not silently run the normal mode).
fn parse_flag(variable: &'static str, value: Option<&OsStr>) -> Result<bool> {
    match value.map(|v| v.to_str()) {
        None => Ok(false),
        Some(Some("" | "0")) => Ok(false),
        Some(Some("1")) => Ok(true),
        Some(other) => Err(Error::InvalidEnvironment {
            variable,
            value: other.map_or_else(|| "(not UTF-8)".to_owned(), str::to_owned),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::{ContextOptions, parse_flag};
    use crate::error::Error;
    use std::ffi::OsStr;

    const VAR: &str = ContextOptions::EMULATE_NO_CONCURRENT_ACCESS_VAR;

    #[test]
    fn the_emulation_flag_is_0_or_1() {
        assert_eq!(parse_flag(VAR, None), Ok(false));
        assert_eq!(parse_flag(VAR, Some(OsStr::new(""))), Ok(false));
        assert_eq!(parse_flag(VAR, Some(OsStr::new("0"))), Ok(false));
        assert_eq!(parse_flag(VAR, Some(OsStr::new("1"))), Ok(true));
        assert_eq!(
            parse_flag(VAR, Some(OsStr::new("yes"))),
            Err(Error::InvalidEnvironment {
                variable: VAR,
                value: "yes".to_owned()
            })
        );
    }

    #[test]
    fn options_default_to_the_device_as_it_is() {
        assert!(!ContextOptions::new().emulates_no_concurrent_access());
        assert!(
            ContextOptions::new()
                .emulate_no_concurrent_access(true)
                .emulates_no_concurrent_access()
        );
    }
}
