//! Proof that a PTX text is this build's compile of this build's check wrapper.
//!
//! um-build reads back a file that another program (nvcc) wrote. A file from an earlier build
//! can lie at that path (another folder built into the same output folder, the same kernel
//! before its text changed, a build of another folder into the same output folder at the same
//! time), and an nvcc run can exit 0 without writing one (`--dryrun`, `--version`), or write
//! something else there (`-E`, `-M`, a binary). So:
//!
//! * every file um-build writes is written as a new file ([`write_new`]): what lies at its path
//!   is removed first, never written through (a link to elsewhere is replaced, not followed);
//! * nvcc's output is removed before nvcc runs (`nvcc::compile`), so a file there afterwards is
//!   one that this run wrote;
//! * each check wrapper ends with the definition of a `__device__` variable whose name
//!   ([`Mark`]) is drawn at random for that one wrapper (OS randomness through `RandomState`,
//!   the time, the process id, a counter, the wrapper's text). [`Mark::proved`] accepts a PTX
//!   text only if it is PTX (its first directive is `.version`) and declares that variable at
//!   module scope, outside any comment or string, as nvcc compiles it: no earlier file, no
//!   preprocessed text and no compile of another file can hold that line;
//! * the mark is then taken out of the text, which makes the PTX the same in every build
//!   (`um-kernels` compares its shipped PTX with it). Only its one declaration line goes: where
//!   the name appears anywhere else (the debug sections of `-G`), the text is kept as nvcc
//!   wrote it, an unused variable that loads as any other.
//!
//! The mark shows that the file is this run's output for this wrapper, given a toolchain that
//! compiles what it is given; that the PTX is the compile of the wrapper, checks and all, is
//! the toolchain's part. um-build trusts the nvcc it runs (found, or given with
//! `Kernels::nvcc`), the tools nvcc runs and the host compiler it finds on `PATH` to compile the
//! wrapper they are given, as cargo trusts rustc to compile Rust: a program put in nvcc's place
//! that compiles other code around the mark cannot be told from nvcc by its output. What could
//! put another program or other options into the pipeline from um-build's side (`-ccbin`,
//! `-Xcompiler`, options files, `NVCC_PREPEND_FLAGS`, ...) is refused or removed (`nvcc.rs`).
//!
//! The generated Rust holds the proved text itself, not a path to it, so what `rustc` embeds is
//! what um-build checked, whatever happens to the files afterwards.

use std::collections::hash_map::RandomState;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{ErrorKind, Write as _};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::ptx::Code;

/// Removes the file at `path`, if any (a link is removed, not what it points to).
pub(crate) fn remove(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(Error::new(format!(
            "cannot remove {}, which an earlier build left: {e}",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Writes `contents` to `path` as a new file: whatever lies there is removed first, and the
/// file is created only if nothing is there then (`create_new`), so no earlier file or link
/// is written through.
pub(crate) fn write_new(path: &Path, contents: &str) -> Result<()> {
    remove(path)?;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .and_then(|mut f| f.write_all(contents.as_bytes()))
        .map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))
}

/// The name of the variable one check wrapper defines, and nothing else does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark(String);

/// The prefix of every mark's name.
pub(crate) const PREFIX: &str = "um_build_fresh_";

impl Mark {
    /// A fresh name for the wrapper whose text (without the mark) is `wrapper`.
    pub(crate) fn new(wrapper: &str) -> Mark {
        static COUNT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let count = COUNT.fetch_add(1, Ordering::Relaxed);
        // Two hashers: each `RandomState` has keys of its own, drawn from the OS once per
        // thread and stepped for each new one.
        let halves: Vec<u64> = (0..2u8)
            .map(|half| {
                let mut h = RandomState::new().build_hasher();
                h.write_u8(half);
                h.write_u128(nanos);
                h.write_u32(std::process::id());
                h.write_u64(count);
                h.write(wrapper.as_bytes());
                h.finish()
            })
            .collect();
        Mark(format!(
            "{PREFIX}{:016x}{:016x}",
            halves.first().copied().unwrap_or_default(),
            halves.get(1).copied().unwrap_or_default()
        ))
    }

    /// The name.
    pub(crate) fn name(&self) -> &str {
        &self.0
    }

    /// The C++ the wrapper ends with: the variable, `extern "C"` so that PTX names it as it
    /// is. (The wrapper shields it from the file's macros.)
    pub(crate) fn definition(&self) -> String {
        format!(
            "extern \"C\" __device__ unsigned int {} = 1u; // um-build: this build's mark, which its PTX must carry\n",
            self.0
        )
    }

    /// The lines nvcc compiles [`definition`](Mark::definition) to: `.global` in whole-program
    /// compiles, `.visible .global` with `-rdc=true`.
    fn declarations(&self) -> [String; 2] {
        let line = format!(".global .align 4 .u32 {} = 1;", self.0);
        [format!(".visible {line}"), line]
    }

    /// `ptx` (what nvcc wrote at `path`) if it is the PTX of the wrapper that carries this mark,
    /// with the mark's declaration taken out; otherwise why not.
    pub(crate) fn proved(&self, ptx: &str, path: &Path) -> Result<String> {
        // Read as ptxas reads it: no comment or string counts as a directive.
        let code = Code::new(ptx);
        let first = code
            .text()
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .unwrap_or_default();
        if first.split_whitespace().next() != Some(".version") {
            let shown = ptx
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty() && !l.starts_with("//"))
                .unwrap_or_default();
            return Err(Error::new(format!(
                "what nvcc wrote to {} is not PTX (it begins `{}`, not `.version`)",
                path.display(),
                shown.chars().take(40).collect::<String>()
            ))
            .help(
                "a flag given to nvcc (Kernels::flag) may have changed what nvcc writes (-E, -M, \
                 -cubin, ...): remove it",
            ));
        }
        let declarations = self.declarations();
        let mut kept = String::with_capacity(ptx.len());
        let mut found = false;
        // `Code` keeps every line break, so its lines are the text's.
        for (line, code_line) in ptx
            .split_inclusive('\n')
            .zip(code.text().split_inclusive('\n'))
        {
            let is_mark = |l: &str| declarations.iter().any(|d| l.trim() == d);
            if !found && is_mark(line) && is_mark(code_line) {
                found = true;
            } else {
                kept.push_str(line);
            }
        }
        if !found {
            return Err(Error::new(format!(
                "the file nvcc wrote ({}) is not the PTX of this build's check wrapper: it lacks \
                 the wrapper's mark `{}`",
                path.display(),
                self.name()
            ))
            .help(
                "um-build compiles each file through a wrapper that it writes for this build \
                 (um-check/), and embeds only what nvcc makes of it: make sure the nvcc found \
                 (Kernels::nvcc, $NVCC, ...) is nvcc, and that no flag changes what it compiles",
            ));
        }
        // Out of the text only where its declaration was its one mention: otherwise the text
        // stays as nvcc wrote it.
        Ok(if kept.contains(&self.0) {
            ptx.to_owned()
        } else {
            kept
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version 9.0\n.target sm_75\n\
                       .address_size 64\n\n";
    const ENTRY: &str =
        "\t// .globl\tk\n\n.visible .entry k(\n\t.param .u64 k_param_0\n)\n{\n\tret;\n}\n";

    fn with(line: &str) -> String {
        format!("{PTX}{line}\n{ENTRY}")
    }

    #[test]
    fn marks_differ_and_are_identifiers() {
        let a = Mark::new("x");
        let b = Mark::new("x");
        assert_ne!(a, b);
        for m in [&a, &b] {
            assert!(m.name().starts_with(PREFIX) && m.name().len() == PREFIX.len() + 32);
            assert!(
                m.name()
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
            );
        }
    }

    /// The proof takes out exactly the mark's declaration line, and nothing else: the text
    /// that remains is the PTX without it, byte for byte.
    #[test]
    fn the_proof_takes_out_only_the_marks_line() {
        let m = Mark::new("w");
        let path = Path::new("k.ptx");
        let without = format!("{PTX}{ENTRY}");
        for line in [
            format!(".global .align 4 .u32 {} = 1;", m.name()),
            format!(".visible .global .align 4 .u32 {} = 1;", m.name()),
        ] {
            let proved = m.proved(&with(&line), path).expect(&line);
            assert_eq!(proved, without);
            assert!(!proved.contains(m.name()));
        }
        // Named elsewhere too (debug sections): the text stays whole.
        let debug = format!(
            "{}\n.section .debug_info {{ .b64 {} }}\n",
            with(&format!(".global .align 4 .u32 {} = 1;", m.name())),
            m.name()
        );
        assert_eq!(m.proved(&debug, path), Ok(debug.clone()));
    }

    #[test]
    fn text_without_this_mark_is_refused() {
        let m = Mark::new("w");
        let other = Mark::new("w");
        let path = Path::new("k.ptx");
        let refused = |text: &str, says: &str| {
            let e = m.proved(text, path).expect_err(text);
            assert!(e.message().contains(says), "{text}\n{e}");
        };
        let says = "not the PTX of this build's check wrapper";
        // No mark: an earlier build's PTX, a compile of another file.
        refused(&format!("{PTX}{ENTRY}"), says);
        // Another wrapper's mark.
        refused(
            &with(&format!(".global .align 4 .u32 {} = 1;", other.name())),
            says,
        );
        // The name in another form: a comment, C++ text, another declaration.
        for line in [
            format!("// .global .align 4 .u32 {} = 1;", m.name()),
            format!("extern \"C\" __device__ unsigned int {} = 1u;", m.name()),
            format!(".global .align 4 .u32 {} = 2;", m.name()),
            format!(".const .align 4 .u32 {} = 1;", m.name()),
            format!("mov.u32 %r1, {};", m.name()),
        ] {
            refused(&with(&line), says);
        }
        // Not PTX: preprocessed text (which names the mark), dependencies, nothing.
        let says = "is not PTX";
        refused(&format!("# 0 \"k.cu\"\n{}", m.definition()), says);
        refused("k.o : k.cu \\\n  um.cuh\n", says);
        refused("", says);
    }
}
