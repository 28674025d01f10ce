//! The value types cuSPARSE computes with here: `f32` and `f64`. Sealed.

use um_core::DeviceCopy;

pub(crate) mod sealed {
    /// Only this crate implements [`Element`](super::Element); what it needs of a type lives
    /// here, out of users' reach (the module is private).
    pub trait Sealed {
        /// The `cudaDataType` of the values and of the computation.
        const DATA_TYPE: std::ffi::c_int;
        /// The value's bits, widened: equal bits, the same scalar as cuSPARSE reads it.
        fn bits(self) -> u64;
    }

    impl Sealed for f32 {
        const DATA_TYPE: std::ffi::c_int = crate::sys::R_32F;
        fn bits(self) -> u64 {
            u64::from(self.to_bits())
        }
    }

    impl Sealed for f64 {
        const DATA_TYPE: std::ffi::c_int = crate::sys::R_64F;
        fn bits(self) -> u64 {
            self.to_bits()
        }
    }
}

/// A value type of a sparse matrix: `f32` (`CUDA_R_32F`) or `f64` (`CUDA_R_64F`). Sealed: any
/// other type is a compile error.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a value type um-cusparse computes with",
    label = "cuSPARSE has no SpMV/SpMM of this type here",
    note = "um-cusparse computes with f32 and f64"
)]
pub trait Element:
    sealed::Sealed + DeviceCopy + Copy + PartialEq + std::fmt::Debug + 'static
{
    /// 1, the default `alpha`.
    const ONE: Self;
    /// 0, the default `beta`.
    const ZERO: Self;
}

impl Element for f32 {
    const ONE: f32 = 1.0;
    const ZERO: f32 = 0.0;
}
impl Element for f64 {
    const ONE: f64 = 1.0;
    const ZERO: f64 = 0.0;
}
