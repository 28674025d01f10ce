//! What the launchers that `um-build` generates call: counts taken from buffers, checked
//! against the kernel's count type and the launch. Public only so that generated code in
//! other crates can reach it; not part of the API.

use crate::error::{Error, Result};
use crate::sealed::Sealed;

/// The common length of the buffers that share one count parameter, `(name, len)` in
/// parameter order; [`Error::LengthMismatch`] names the first buffer that differs.
pub fn common_len(kernel: &'static str, buffers: &[(&'static str, usize)]) -> Result<usize> {
    let Some(&(first, expected)) = buffers.first() else {
        return Ok(0);
    };
    match buffers.iter().find(|(_, len)| *len != expected) {
        None => Ok(expected),
        Some(&(buffer, len)) => Err(Error::LengthMismatch {
            kernel,
            first,
            expected,
            buffer,
            len,
        }),
    }
}

/// The C integer types a count parameter may have. Sealed.
pub trait Count: Sealed + Copy {
    /// The C spelling, for messages.
    const C: &'static str;
    /// The largest value of the type.
    const MAX: u64;
    /// `len` as this type (the caller checked that it fits).
    fn from_len(len: usize) -> Self;
}

macro_rules! counts {
    ($($t:ty => $c:literal),*) => {$(
        impl Count for $t {
            const C: &'static str = $c;
            const MAX: u64 = <$t>::MAX as u64;
            #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
            fn from_len(len: usize) -> $t {
                len as $t
            }
        }
    )*};
}
counts!(i32 => "int", u32 => "unsigned int", i64 => "long long", u64 => "unsigned long long");

/// `len`, the length of the buffers counted by `param`, as the kernel's count type `C`, for a
/// launch of `threads` threads in all.
///
/// The kernel's grid-stride loop computes `i + stride` with `i < len` and `stride = threads`,
/// in a type no wider than `C` (the contract of [`docs/kernels.md`](https://github.com/um-rs/um/blob/main/docs/kernels.md)). So `len - 1 + threads` must
/// fit in `C`: otherwise `i` wraps (or, for a signed type, overflows) and a thread revisits
/// indices that another thread owns. [`Error::LengthTooLarge`] if `len` does not fit,
/// [`Error::IndexOverflow`] if the sum does not.
pub fn count<C: Count>(
    kernel: &'static str,
    param: &'static str,
    len: usize,
    threads: u64,
) -> Result<C> {
    let len64 = u64::try_from(len).unwrap_or(u64::MAX);
    if len64 > C::MAX {
        return Err(Error::LengthTooLarge {
            kernel,
            param: C::C,
            len,
        });
    }
    if len64.saturating_sub(1).saturating_add(threads) > C::MAX {
        return Err(Error::IndexOverflow {
            kernel,
            param,
            len,
            threads,
            max: C::MAX,
        });
    }
    Ok(C::from_len(len))
}

#[cfg(test)]
mod tests {
    use super::{common_len, count};
    use crate::error::Error;

    #[test]
    fn common_len_names_the_buffer_that_differs() {
        assert_eq!(common_len("k", &[("a", 5), ("b", 5)]), Ok(5));
        assert_eq!(common_len("k", &[]), Ok(0));
        assert_eq!(
            common_len("k", &[("a", 5), ("b", 5), ("c", 4)]),
            Err(Error::LengthMismatch {
                kernel: "k",
                first: "a",
                expected: 5,
                buffer: "c",
                len: 4
            })
        );
    }

    #[test]
    fn a_count_and_its_stride_must_fit_the_count_type() {
        assert_eq!(count::<u32>("k", "n", 7, 256), Ok(7u32));
        assert_eq!(count::<i32>("k", "n", 1, i32::MAX as u64), Ok(1i32));
        assert!(matches!(
            count::<i32>("k", "n", 1 << 31, 1),
            Err(Error::LengthTooLarge {
                len: 2_147_483_648,
                param: "int",
                ..
            })
        ));
        // i32::MAX elements fit, but the last index plus a stride of two threads does not.
        assert!(matches!(
            count::<i32>("k", "n", i32::MAX as usize, 2),
            Err(Error::IndexOverflow { threads: 2, .. })
        ));
        assert_eq!(
            count::<u32>("k", "n", u32::MAX as usize - 255, 256),
            Ok(u32::MAX - 255)
        );
        assert!(matches!(
            count::<u32>("k", "n", u32::MAX as usize - 254, 256),
            Err(Error::IndexOverflow { .. })
        ));
        assert_eq!(
            count::<u64>("k", "n", usize::MAX / 2, 1 << 30),
            Ok((usize::MAX / 2) as u64)
        );
    }
}
