//! The part of the safe-launcher contract that `um-build` checks in a declaration: every
//! buffer of a `UM_SAFE_KERNEL` has a length parameter that the launcher fills in from the
//! buffers themselves ([`docs/kernels.md`](https://github.com/um-rs/um/blob/main/docs/kernels.md)).
//!
//! A length is a parameter of type `um::len32`, `um::len64`, `um::ilen32` or `um::ilen64` (from
//! `um.cuh`), and it counts
//! every buffer declared between the previous length and itself. Both facts are about types and
//! positions, never names: the compiler checks the type at every position (`check.rs`), so what
//! the launcher fills in is what the compiled kernel calls its lengths, whatever a prototype, a
//! macro or a preprocessor branch names them. (Before, a buffer `x` was counted by a
//! parameter named `x_len` or `n`, which nothing could check: a prototype that named the
//! parameters differently from the definition made the launcher pass a length where the kernel
//! read a value.)
//!
//! * a buffer with no length after it is refused;
//! * a length with no buffer before it (since the previous length) is refused;
//! * an integer that is not a length is a value the caller passes.

use crate::error::{Error, Result};
use crate::mistakes;
use crate::source::{Kernel, Scalar, Type};

/// Parameters a launch can pass: the longest argument tuple `um-core` takes.
pub(crate) const MAX_PARAMS: usize = 12;

/// A length parameter and the buffers whose length it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Count {
    pub(crate) name: String,
    /// `U32` for `um::len32`, `U64` for `um::len64`.
    pub(crate) ty: Scalar,
    pub(crate) buffers: Vec<String>,
}

/// Checks what every kernel must satisfy to be launched at all.
pub(crate) fn check_any(k: &Kernel) -> Result<()> {
    if k.params.len() > MAX_PARAMS {
        return Err(Error::new(format!(
            "{} parameters: a launch passes at most {MAX_PARAMS}",
            k.params.len()
        ))
        .kernel(&k.name)
        .at(k.line)
        .help("group scalars into a struct passed by value"));
    }
    Ok(())
}

/// Checks every kernel of a file: [`counts`] for the safe ones, [`check_any`] for the others.
pub(crate) fn check_declarations(source: &crate::source::Source) -> Result<()> {
    for k in &source.kernels {
        if k.safe {
            counts(k)?;
        } else {
            check_any(k)?;
        }
    }
    Ok(())
}

/// The length parameters of a safe kernel, in parameter order, each with the buffers it counts;
/// or why the kernel cannot have a safe launcher.
pub(crate) fn counts(k: &Kernel) -> Result<Vec<Count>> {
    check_any(k)?;
    let err = |param: &str, msg: String| Error::new(msg).kernel(&k.name).param(param).at(k.line);
    let mut counts: Vec<Count> = Vec::new();
    let mut uncounted: Vec<String> = Vec::new();
    for p in &k.params {
        match p.ty {
            Type::Pointer { .. } => uncounted.push(p.name.clone()),
            Type::Len(_) if uncounted.is_empty() => {
                let after = counts.last().map_or_else(
                    || "the start of the list".to_owned(),
                    |c| format!("the length `{}`", c.name),
                );
                return Err(err(
                    &p.name,
                    format!(
                        "`{}` is a length, but no buffer is declared between {after} and it",
                        p.name
                    ),
                )
                .help(format!(
                    "a length counts the buffers declared before it, back to the previous \
                     length; move `{}` after its buffers, or declare it `unsigned int` to pass \
                     it yourself",
                    p.name
                )));
            }
            Type::Len(ty) => counts.push(Count {
                name: p.name.clone(),
                ty,
                buffers: std::mem::take(&mut uncounted),
            }),
            Type::Scalar(_) | Type::Struct(_) => {}
        }
    }
    if let Some(buffer) = uncounted.first() {
        // A plain integer named like a count after the buffer (`int n`, `size_t x_len`) was
        // meant as its length: say which, and the length type to write (mistakes.rs).
        let buffers: Vec<&str> = k
            .params
            .iter()
            .filter(|p| matches!(p.ty, Type::Pointer { .. }))
            .map(|p| p.name.as_str())
            .collect();
        let meant = k
            .params
            .iter()
            .skip_while(|p| p.name != *buffer)
            .find_map(|p| match p.ty {
                Type::Scalar(s) if s.is_integer() && mistakes::count_like(&p.name, &buffers) => {
                    Some((p, s))
                }
                _ => None,
            });
        if let Some((p, s)) = meant {
            let length = mistakes::length_type(s);
            return Err(err(
                &p.name,
                format!(
                    "write `{length} {name}`, not `{written} {name}`: a plain integer is a value \
                     the caller passes, so the buffer `{buffer}` has no length",
                    name = p.name,
                    written = p.written,
                ),
            )
            .help(format!(
                "a length has a type of um.cuh (um::len32, um::len64, um::ilen32, um::ilen64: \
                 they convert to unsigned int, unsigned long long, int and long long, so the \
                 body reads as before) and counts the buffers declared before it, back to the \
                 previous length; the launcher fills it in from the buffers. If `{}` is a \
                 value, declare a length after `{buffer}` instead (`um::len32 {buffer}_len`)",
                p.name
            )));
        }
        return Err(err(
            buffer,
            format!("the buffer `{buffer}` of a safe kernel has no length after it"),
        )
        .help(format!(
            "declare `um::len32 {buffer}_len` after `{buffer}` (or one `um::len32 n` after the \
             last of several buffers of one length): the launcher fills it in from the buffers, \
             and the kernel touches no index at or past it. A plain integer is a value the \
             caller passes, never a length"
        )));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::parse;

    fn kernel(src: &str) -> Kernel {
        parse(src).expect("parses").kernels.remove(0)
    }

    fn groups(src: &str) -> Vec<(String, Vec<String>)> {
        counts(&kernel(src))
            .expect("counts")
            .into_iter()
            .map(|c| (c.name, c.buffers))
            .collect()
    }

    #[test]
    fn a_length_counts_the_buffers_since_the_previous_length() {
        let k = "UM_SAFE_KERNEL void h(const unsigned int *v, unsigned int *bins, um::len32 n, \
                 float *total, um::len64 total_len, int m) {}";
        let c = counts(&kernel(k)).expect("counts");
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0].name.as_str(), c[0].ty, c[0].buffers.clone()),
            ("n", Scalar::U32, vec!["v".to_owned(), "bins".to_owned()])
        );
        assert_eq!(
            (c[1].name.as_str(), c[1].ty, c[1].buffers.clone()),
            ("total_len", Scalar::U64, vec!["total".to_owned()])
        );
        // Names do not matter: a length called `value` after `y` counts `y`.
        assert_eq!(
            groups("UM_SAFE_KERNEL void f(float *y, unsigned int n, um::len32 value) {}"),
            [("value".to_owned(), vec!["y".to_owned()])]
        );
        // No buffers: nothing to count, and `n` is an ordinary value.
        assert_eq!(groups("UM_SAFE_KERNEL void e(int n) {}"), []);
        // Spellings: `::um::len32`, `um :: len64`.
        assert_eq!(
            groups("UM_SAFE_KERNEL void s(float *x, ::um::len32 k, double *y, um :: len64 m) {}"),
            [
                ("k".to_owned(), vec!["x".to_owned()]),
                ("m".to_owned(), vec!["y".to_owned()])
            ]
        );
    }

    #[test]
    fn uncounted_buffers_and_lengths_without_buffers_are_refused() {
        // A plain integer is a value, so `x` has no length.
        let e = counts(&kernel(
            "UM_SAFE_KERNEL void k(float *x, unsigned int value) {}",
        ))
        .expect_err("no length");
        assert_eq!(e.param_name(), Some("x"));
        assert!(
            e.help_text().is_some_and(|h| h.contains("um::len32")),
            "{e}"
        );
        // The old convention, a plain integer named `n`: the error names `n` and its length
        // type (the integer's: `int` is `um::ilen32`).
        for (decl, want) in [
            (
                "unsigned int n",
                "write `um::len32 n`, not `unsigned int n`",
            ),
            ("int nb", "write `um::ilen32 nb`, not `int nb`"),
            (
                "size_t x_len",
                "write `um::len64 x_len`, not `size_t x_len`",
            ),
            ("long long nx", "write `um::ilen64 nx`, not `long long nx`"),
        ] {
            let e = counts(&kernel(&format!(
                "UM_SAFE_KERNEL void k(float *x, float a, {decl}) {{}}"
            )))
            .expect_err(decl);
            assert_eq!(e.param_name(), decl.split(' ').next_back(), "{e}");
            assert!(e.message().starts_with(want), "{e}");
            assert!(
                e.message().ends_with("so the buffer `x` has no length"),
                "{e}"
            );
        }

        let e = counts(&kernel(
            "UM_SAFE_KERNEL void k(float *x, um::len32 n, um::len32 m) {}",
        ))
        .expect_err("m counts nothing");
        assert_eq!(e.param_name(), Some("m"));
        assert!(e.message().contains("the length `n`"), "{e}");

        let e = counts(&kernel("UM_SAFE_KERNEL void k(um::len32 n, float *x) {}"))
            .expect_err("n before its buffer");
        assert_eq!(e.param_name(), Some("n"));

        let e = counts(&kernel(
            "UM_SAFE_KERNEL void k(int a, int b, int c, int d, int e, int f, int g, int h, int i, \
             int j, int k2, int l, int m) {}",
        ))
        .expect_err("13 parameters");
        assert!(e.message().contains("13 parameters"), "{e}");
    }
}
