//! The floating-point element types cuRAND generates here: `f32` and `f64`. Sealed.

use um_core::DeviceCopy;

pub(crate) mod sealed {
    /// Which cuRAND routine family a type maps to (unreachable outside the crate: the module
    /// is private).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Kind {
        /// `float`: `curandGenerateUniform`, `curandGenerateNormal`.
        F32,
        /// `double`: `curandGenerateUniformDouble`, `curandGenerateNormalDouble`.
        F64,
    }

    /// Only this crate implements [`Element`](super::Element); what it needs of a type lives
    /// here, out of users' reach.
    pub trait Sealed {
        /// The routine family.
        const KIND: Kind;
        /// The value as `f64` (exact for both types).
        fn to_f64(self) -> f64;
    }

    impl Sealed for f32 {
        const KIND: Kind = Kind::F32;
        fn to_f64(self) -> f64 {
            f64::from(self)
        }
    }

    impl Sealed for f64 {
        const KIND: Kind = Kind::F64;
        fn to_f64(self) -> f64 {
            self
        }
    }
}

pub(crate) use sealed::Kind;

/// A floating-point type cuRAND generates: `f32` or `f64`. Sealed: any other type is a
/// compile error.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a type um-curand generates uniform or normal numbers of",
    label = "cuRAND has no uniform or normal generator of this type",
    note = "um-curand generates f32 and f64 (uniform, normal) and u32 (`Rng::bits`)"
)]
pub trait Element:
    sealed::Sealed + DeviceCopy + Copy + PartialEq + std::fmt::Debug + 'static
{
}

impl Element for f32 {}
impl Element for f64 {}
