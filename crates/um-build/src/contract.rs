//! The part of the safe-launcher contract that `um-build` checks in a declaration: every
//! buffer of a `UM_SAFE_KERNEL` has a count parameter that the launcher fills in from the
//! buffers themselves (`docs/kernels.md`).
//!
//! * a pointer parameter `x` is counted by an integer parameter `x_len` when there is one
//!   (buffers of different lengths);
//! * otherwise by `n`, the common length of every buffer without its own `_len`;
//! * a buffer with neither is refused.

use crate::error::{Error, Result};
use crate::source::{Kernel, Scalar, Type};

/// Parameters a launch can pass: the longest argument tuple `um-core` takes.
pub(crate) const MAX_PARAMS: usize = 12;

/// A count parameter and the buffers whose length it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Count {
    pub(crate) name: String,
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

/// The count parameters of a safe kernel, in parameter order, or why it cannot have a safe
/// launcher.
pub(crate) fn counts(k: &Kernel) -> Result<Vec<Count>> {
    check_any(k)?;
    let err = |param: &str, msg: String| Error::new(msg).kernel(&k.name).param(param).at(k.line);
    let scalar_of = |name: &str| {
        k.params.iter().find_map(|p| match p.ty {
            Type::Scalar(s) if p.name == name => Some(Some(s)),
            _ if p.name == name => Some(None),
            _ => None,
        })
    };
    let mut counts: Vec<Count> = Vec::new();
    for p in &k.params {
        if !matches!(p.ty, Type::Pointer { .. }) {
            continue;
        }
        let own = format!("{}_len", p.name);
        let counter =
            match (scalar_of(&own), scalar_of("n")) {
                (Some(Some(s)), _) if s.is_count() => (own, s),
                (Some(_), _) => {
                    return Err(err(
                        &own,
                        format!(
                            "counts buffer `{}`, so it must be an integer of 32 or 64 bits",
                            p.name
                        ),
                    )
                    .help(format!("declare it `unsigned int {own}`")));
                }
                (None, Some(Some(s))) if s.is_count() => ("n".to_owned(), s),
                (None, Some(_)) => {
                    return Err(err(
                        "n",
                        "counts the buffers, so it must be an integer of 32 or 64 bits".to_owned(),
                    )
                    .help("declare it `unsigned int n`"));
                }
                (None, None) => {
                    return Err(err(
                    &p.name,
                    format!("the buffer of a safe kernel needs a count, and `{}` has none", p.name),
                )
                .help(format!(
                    "add `unsigned int {own}` (this buffer's own length) or `unsigned int n` (the \
                     common length of every buffer without its own `_len`); the launcher fills it \
                     in from the buffers, and the kernel touches no index at or past it"
                )));
                }
            };
        match counts.iter_mut().find(|c| c.name == counter.0) {
            Some(c) => c.buffers.push(p.name.clone()),
            None => counts.push(Count {
                name: counter.0,
                ty: counter.1,
                buffers: vec![p.name.clone()],
            }),
        }
    }
    let order = |name: &str| k.params.iter().position(|p| p.name == name);
    counts.sort_by_key(|c| order(&c.name));
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::parse;

    fn kernel(src: &str) -> Kernel {
        parse(src).expect("parses").kernels.remove(0)
    }

    #[test]
    fn buffers_are_counted_by_their_own_len_or_by_n() {
        let k = kernel(
            "UM_SAFE_KERNEL void h(const unsigned int *v, unsigned int *bins, float *total, \
             unsigned int n, unsigned int bins_len, int total_len) {}",
        );
        let c = counts(&k).expect("counts");
        assert_eq!(c.len(), 3);
        assert_eq!(
            (c[0].name.as_str(), c[0].buffers.clone()),
            ("n", vec!["v".to_owned()])
        );
        assert_eq!(c[1].name, "bins_len");
        assert_eq!((c[2].name.as_str(), c[2].ty), ("total_len", Scalar::I32));
        // No buffers: nothing to count, and `n` is an ordinary value.
        assert_eq!(
            counts(&kernel("UM_SAFE_KERNEL void e(int n) {}")),
            Ok(vec![])
        );
    }

    #[test]
    fn uncounted_buffers_and_non_integer_counts_are_refused() {
        let e =
            counts(&kernel("UM_SAFE_KERNEL void k(float *x, int len) {}")).expect_err("no count");
        assert_eq!(e.param_name(), Some("x"));
        assert!(e.help_text().is_some_and(|h| h.contains("x_len")), "{e}");

        let e =
            counts(&kernel("UM_SAFE_KERNEL void k(float *x, float n) {}")).expect_err("float n");
        assert_eq!(e.param_name(), Some("n"));

        let e = counts(&kernel("UM_SAFE_KERNEL void k(float *x, short x_len) {}"))
            .expect_err("short count");
        assert_eq!(e.param_name(), Some("x_len"));

        let e = counts(&kernel(
            "UM_SAFE_KERNEL void k(int a, int b, int c, int d, int e, int f, int g, int h, int i, \
             int j, int k2, int l, int m) {}",
        ))
        .expect_err("13 parameters");
        assert!(e.message().contains("13 parameters"), "{e}");
    }
}
