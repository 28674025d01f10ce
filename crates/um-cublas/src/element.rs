//! The element types cuBLAS computes with here: `f32` and `f64`. Sealed.

use um_core::{AnyBitPattern, DeviceCopy, NoUninit};

pub(crate) mod sealed {
    /// Only this crate implements [`Element`](super::Element).
    pub trait Sealed {}
}

/// Which cuBLAS routine family a type maps to. Read-only.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `float`: `cublasS*`.
    F32,
    /// `double`: `cublasD*`.
    F64,
}

/// An element type of a cuBLAS matrix or vector: `f32` (`cublasSgemm_v2`, `cublasSdot_v2`,
/// ...) or `f64` (`cublasDgemm_v2`, `cublasDdot_v2`, ...). Sealed: any other type is a compile
/// error.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an element type um-cublas computes with",
    label = "cuBLAS has no routine of this type here",
    note = "um-cublas maps f32 to cuBLAS's S routines (cublasSgemm_v2, cublasSdot_v2, ...) and f64 to its D routines"
)]
pub trait Element:
    sealed::Sealed
    + DeviceCopy
    + AnyBitPattern
    + NoUninit
    + Copy
    + PartialEq
    + std::fmt::Debug
    + 'static
{
    /// The routine family.
    #[doc(hidden)]
    const KIND: Kind;
    /// 1, the default `alpha`.
    const ONE: Self;
    /// 0, the default `beta`.
    const ZERO: Self;
}

impl sealed::Sealed for f32 {}
impl sealed::Sealed for f64 {}
impl Element for f32 {
    const KIND: Kind = Kind::F32;
    const ONE: f32 = 1.0;
    const ZERO: f32 = 0.0;
}
impl Element for f64 {
    const KIND: Kind = Kind::F64;
    const ONE: f64 = 1.0;
    const ZERO: f64 = 0.0;
}
