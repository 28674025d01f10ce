//! The inputs line: what a PTX file of um-build's was compiled from.
//!
//! Every `um-ptx/<stem>.ptx` that [`Kernels::build`](crate::Kernels::build) writes (and the text
//! a launcher embeds) begins with the PTX comment `// um-build inputs <16 hex digits>`: the
//! 64-bit FNV-1a hash ([`hash`]) of, in this order, the `.cu` file's bytes, `um.cuh`'s bytes
//! ([`HEADER`](crate::HEADER)), the architecture (`compute_NN`, as the PTX's `.target sm_NN`
//! names it), then each [`Kernels::flag`](crate::Kernels::flag) in order; each of these fields
//! is hashed as its length in bytes (a `u64`, 8 bytes little-endian) followed by its bytes, so
//! no two lists of fields hash the same bytes. The line is the same in every build of the same
//! inputs, so PTX shipped from one build equals a fresh build's.
//!
//! Without nvcc, a prebuilt file ([`Kernels::prebuilt_ptx`](crate::Kernels::prebuilt_ptx)) must
//! begin with the line of this build's inputs ([`check`]): a file left from before a change of
//! the `.cu` file, of `um.cuh` or of the flags, or built for another file, is refused. FNV-1a
//! is no defence against a file made to match (nor is any hash of inputs anyone can read): that
//! is the promise of `prebuilt_ptx`'s caller. Headers that the `.cu` file includes, other than
//! `um.cuh`, are not hashed.

use std::path::Path;

use crate::error::{Error, Result};

/// What the line begins with.
pub(crate) const PREFIX: &str = "// um-build inputs ";

/// FNV-1a, 64 bits (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`), of `bytes`,
/// continuing from `h`.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The hash of one build's inputs for one file (see the module's documentation): `cu` the `.cu`
/// file's bytes, `arch` the virtual architecture, `flags` the nvcc flags given.
pub(crate) fn hash(cu: &[u8], arch: &str, flags: &[String]) -> u64 {
    let fields = [cu, crate::HEADER.as_bytes(), arch.as_bytes()]
        .into_iter()
        .chain(flags.iter().map(String::as_bytes));
    fields.fold(0xcbf2_9ce4_8422_2325, |h, field| {
        let h = fnv1a(h, &(field.len() as u64).to_le_bytes());
        fnv1a(h, field)
    })
}

/// The line for `hash`, without its line break.
pub(crate) fn line(hash: u64) -> String {
    format!("{PREFIX}{hash:016x}")
}

/// `ptx` with the line of `hash` before it.
pub(crate) fn with_line(ptx: &str, hash: u64) -> String {
    format!("{}\n{ptx}", line(hash))
}

/// Refuses `ptx`, read from `path`, unless its first line is the line of `hash`, the hash of this
/// build's inputs for `arch`.
pub(crate) fn check(ptx: &str, hash: u64, arch: &str, path: &Path) -> Result<()> {
    let want = line(hash);
    let first = ptx.lines().next().unwrap_or_default();
    if first == want {
        return Ok(());
    }
    let help = "rebuild the prebuilt PTX with nvcc: it is what Kernels::build writes to \
                $OUT_DIR/um-ptx/ (for um-kernels: `bash scripts/update-ptx.sh`)";
    Err(if first.starts_with(PREFIX) {
        Error::new(format!(
            "the prebuilt PTX {} was built from other inputs: it begins `{first}`, and this \
             build's .cu file, um.cuh, architecture ({arch}) and flags give `{want}` (one of them \
             changed since it was built)",
            path.display()
        ))
    } else {
        Error::new(format!(
            "the prebuilt PTX {} does not begin with a `{}` line: it is not PTX that this \
             um-build wrote with nvcc",
            path.display(),
            PREFIX.trim_end()
        ))
    }
    .help(help))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published test vectors of FNV-1a 64.
    #[test]
    fn fnv1a_is_the_published_function() {
        let basis = 0xcbf2_9ce4_8422_2325;
        assert_eq!(fnv1a(basis, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(basis, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(basis, b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn every_input_changes_the_hash_and_fields_do_not_run_together() {
        let flags = |f: &[&str]| f.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let base = hash(b"k", "compute_75", &flags(&["-DA"]));
        assert_eq!(base, hash(b"k", "compute_75", &flags(&["-DA"])));
        for other in [
            hash(b"k ", "compute_75", &flags(&["-DA"])),
            hash(b"k", "compute_90", &flags(&["-DA"])),
            hash(b"k", "compute_75", &flags(&[])),
            hash(b"k", "compute_75", &flags(&["-DA", ""])),
            hash(b"k", "compute_75", &flags(&["-D", "A"])),
            hash(b"k", "compute_75-DA", &flags(&[])),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn the_line_is_checked_exactly() {
        let path = Path::new("k.ptx");
        let h = hash(b"k", "compute_75", &[]);
        let ptx = with_line(".version 9.0\n", h);
        assert!(ptx.starts_with("// um-build inputs ") && ptx.lines().next().unwrap().len() == 35);
        assert_eq!(check(&ptx, h, "compute_75", path), Ok(()));
        let other = check(&ptx, h ^ 1, "compute_75", path).unwrap_err();
        assert!(
            other.message().contains("built from other inputs"),
            "{other}"
        );
        for text in [
            ".version 9.0\n",
            &format!("\n{ptx}"),
            &format!("// x\n{ptx}"),
        ] {
            let e = check(text, h, "compute_75", path).unwrap_err();
            assert!(e.message().contains("does not begin with"), "{e}");
            assert!(e.help_text().unwrap().contains("update-ptx.sh"), "{e}");
        }
    }
}
