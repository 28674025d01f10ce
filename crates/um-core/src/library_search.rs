//! Where a library of the CUDA toolkit is looked for at run time: the order um's library crates
//! (`um-cublas`, `um-cusparse`, `um-curand`) share, for a wrapper of another one.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// Where to look for one library: a variable that names its path, then names for the dynamic
/// loader, then the toolkit's folders.
///
/// ```
/// use um_core::LibrarySearch;
///
/// const CUFFT: LibrarySearch = LibrarySearch {
///     env_var: "MY_CUFFT_LIB",
///     names: &["libcufft.so.12", "libcufft.so"],
/// };
/// let tried = CUFFT.candidates(None, Some("/opt/cuda".into()));
/// assert_eq!(tried[0], "libcufft.so.12");
/// assert_eq!(tried[2], "/opt/cuda/lib64/libcufft.so.12");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct LibrarySearch {
    /// The variable that names the library's path; when set and not empty, it is the only
    /// candidate.
    pub env_var: &'static str,
    /// Names for the dynamic loader's own search (`LD_LIBRARY_PATH`, the loader cache, the
    /// system folders), in order; the first is also looked for in `$CUDA_PATH/lib64` and
    /// `/usr/local/cuda/lib64`.
    pub names: &'static [&'static str],
}

impl LibrarySearch {
    /// The candidates in order, given the values of [`env_var`](LibrarySearch::env_var) and of
    /// `CUDA_PATH`: the variable's path alone if it is set and not empty; else every name,
    /// then the first name in `$CUDA_PATH/lib64` and in `/usr/local/cuda/lib64` (each folder
    /// once).
    pub fn candidates(&self, env: Option<OsString>, cuda_path: Option<OsString>) -> Vec<OsString> {
        if let Some(path) = env.filter(|p| !p.is_empty()) {
            return vec![path];
        }
        let mut out: Vec<OsString> = self.names.iter().map(OsString::from).collect();
        let Some(first) = self.names.first() else {
            return out;
        };
        let mut dirs: Vec<PathBuf> = Vec::new();
        if let Some(root) = cuda_path.filter(|p| !p.is_empty()) {
            dirs.push(PathBuf::from(root).join("lib64"));
        }
        dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
        for dir in dirs {
            let p = dir.join(first).into_os_string();
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// Tries every candidate of this process's environment with `open`, which loads one and
    /// resolves what the caller needs of it: the first that opens wins. Otherwise every
    /// candidate with `open`'s reason, labelled `VAR=path` where it came from the variable.
    pub fn find<L>(&self, open: impl FnMut(&OsStr) -> Result<L, String>) -> Result<L, Vec<String>> {
        self.find_in(
            std::env::var_os(self.env_var),
            std::env::var_os("CUDA_PATH"),
            open,
        )
    }

    /// [`find`](LibrarySearch::find) with the values of the two variables given.
    pub fn find_in<L>(
        &self,
        env: Option<OsString>,
        cuda_path: Option<OsString>,
        mut open: impl FnMut(&OsStr) -> Result<L, String>,
    ) -> Result<L, Vec<String>> {
        let explicit = env.as_ref().is_some_and(|p| !p.is_empty());
        let mut tried = Vec::new();
        for name in self.candidates(env, cuda_path) {
            match open(&name) {
                Ok(lib) => return Ok(lib),
                Err(reason) => {
                    let label = if explicit {
                        format!("{}={}", self.env_var, name.to_string_lossy())
                    } else {
                        name.to_string_lossy().into_owned()
                    };
                    tried.push(format!("{label}: {reason}"));
                }
            }
        }
        Err(tried)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: LibrarySearch = LibrarySearch {
        env_var: "UM_TEST_LIB",
        names: &["libx.so.3", "libx.so"],
    };

    #[test]
    fn the_variable_is_the_only_candidate_when_set() {
        let got = LIB.candidates(Some("/opt/x/libx.so.3".into()), Some("/cuda".into()));
        assert_eq!(got, vec![OsString::from("/opt/x/libx.so.3")]);
    }

    #[test]
    fn without_the_variable_the_loader_then_the_toolkit_is_searched() {
        let got = LIB.candidates(None, Some("/opt/cuda".into()));
        let want: Vec<OsString> = [
            "libx.so.3",
            "libx.so",
            "/opt/cuda/lib64/libx.so.3",
            "/usr/local/cuda/lib64/libx.so.3",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        assert_eq!(got, want);
        // An empty variable counts as unset, and the toolkit folder is not listed twice.
        let got = LIB.candidates(Some("".into()), Some("/usr/local/cuda".into()));
        assert_eq!(got.len(), 3);
    }

    #[test]
    fn every_candidate_tried_is_named_with_its_reason_and_the_first_that_opens_wins() {
        let got: Result<(), _> = LIB.find_in(Some("/nowhere/libx.so.3".into()), None, |_| {
            Err("gone".to_owned())
        });
        assert_eq!(
            got,
            Err(vec!["UM_TEST_LIB=/nowhere/libx.so.3: gone".to_owned()])
        );
        let mut seen = Vec::new();
        let got = LIB.find_in(None, None, |name| {
            seen.push(name.to_owned());
            if name == "libx.so" {
                Ok(7)
            } else {
                Err("no".to_owned())
            }
        });
        assert_eq!(got, Ok(7));
        assert_eq!(
            seen,
            vec![OsString::from("libx.so.3"), OsString::from("libx.so")]
        );
    }
}
