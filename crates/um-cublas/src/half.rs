//! The half-precision element types of [`Blas::gemm_ex`](crate::Blas::gemm_ex): [`F16`] (IEEE
//! binary16) and [`Bf16`] (bfloat16), each its 16 bits, with exact conversions from and to `f32`
//! written out by hand (round to nearest, ties to even; NaN stays NaN; too large is infinity).

use std::ffi::c_int;

use um_core::{DeviceCopy, Zeroable};

use crate::element::sealed;
use crate::sys;

/// An IEEE 754 binary16 number (`__half`, cuBLAS's `CUDA_R_16F`): 1 sign bit, 5 exponent bits,
/// 10 mantissa bits. Largest finite 65504; smallest positive 2^-24 (subnormal).
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct F16(u16);

/// A bfloat16 number (`__nv_bfloat16`, cuBLAS's `CUDA_R_16BF`): the upper 16 bits of an `f32`
/// (1 sign bit, 8 exponent bits, 7 mantissa bits), so `f32`'s range at 8 bits of precision.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Bf16(u16);

// SAFETY: `F16` is a `u16` (`repr(transparent)`): plain bits with no pointer, no destructor and
// no invalid pattern, so copying it to and from the device byte for byte is a valid value there
// and back.
/// Plain bits: copied to the device and back as they are.
unsafe impl DeviceCopy for F16 {}
// SAFETY: as for `F16`.
/// Plain bits: copied to the device and back as they are.
unsafe impl DeviceCopy for Bf16 {}
// SAFETY: all-zero bits are a `u16`, the number +0.
/// All-zero bits: +0.
unsafe impl Zeroable for F16 {}
// SAFETY: as for `F16`.
/// All-zero bits: +0.
unsafe impl Zeroable for Bf16 {}

impl F16 {
    /// The number of these bits.
    pub const fn from_bits(bits: u16) -> F16 {
        F16(bits)
    }

    /// Its bits.
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// The binary16 nearest `x` (ties to even): beyond 65504 (from 65520 on) infinity, below
    /// 2^-25 zero (signed), subnormals where binary16 has them; NaN stays NaN (quiet).
    pub fn from_f32(x: f32) -> F16 {
        let bits = x.to_bits();
        let sign = ((bits >> 16) & 0x8000) as u16;
        let exp = ((bits >> 23) & 0xff) as i32;
        let man = bits & 0x007f_ffff;
        if exp == 0xff {
            // Infinity, or NaN: quiet, with the payload's top bits.
            let nan = if man == 0 {
                0
            } else {
                0x0200 | (man >> 13) as u16
            };
            return F16(sign | 0x7c00 | nan);
        }
        // The exponent in binary16's bias.
        let e = exp - 127 + 15;
        if e >= 0x1f {
            return F16(sign | 0x7c00);
        }
        if e < -10 {
            // Below 2^-25, half the smallest subnormal (f32's subnormals included): zero.
            return F16(sign);
        }
        // The significand with its leading 1 (exp is not 0 here), and how many of its bits
        // binary16 drops: 13 for a normal, more for a subnormal (e <= 0).
        let (sig, shift, base) = if e > 0 {
            (man, 13, (e as u32) << 10)
        } else {
            (man | 0x0080_0000, (14 - e) as u32, 0)
        };
        let kept = sig >> shift;
        let rest = sig & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        let up = u32::from(rest > half || (rest == half && kept & 1 == 1));
        // A carry out of the mantissa moves to the next exponent (or to infinity): correct.
        F16(sign | (base + kept + up) as u16)
    }

    /// The `f32` of the same value (exact: every binary16 is an `f32`).
    pub fn to_f32(self) -> f32 {
        let h = u32::from(self.0);
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let man = h & 0x03ff;
        match exp {
            // Zero and subnormals: man * 2^-24, exact in f32.
            0 => f32::from_bits(sign | (man as f32 / 16_777_216.0).to_bits()),
            0x1f => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
            _ => f32::from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13)),
        }
    }
}

impl Bf16 {
    /// The number of these bits.
    pub const fn from_bits(bits: u16) -> Bf16 {
        Bf16(bits)
    }

    /// Its bits.
    pub const fn to_bits(self) -> u16 {
        self.0
    }

    /// The bfloat16 nearest `x` (ties to even; beyond the largest finite bfloat16, infinity);
    /// NaN stays NaN (quiet).
    pub fn from_f32(x: f32) -> Bf16 {
        let bits = x.to_bits();
        if x.is_nan() {
            return Bf16((bits >> 16) as u16 | 0x0040);
        }
        // Not NaN, so at most 0xff80_0000: the sum does not overflow, and a carry out of the
        // mantissa moves to the next exponent (or to infinity), which is correct.
        let round = 0x7fff + ((bits >> 16) & 1);
        Bf16(((bits + round) >> 16) as u16)
    }

    /// The `f32` of the same value (exact: its upper 16 bits).
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

/// A half-precision input type of [`Blas::gemm_ex`](crate::Blas::gemm_ex): [`F16`]
/// (`CUDA_R_16F`) or [`Bf16`] (`CUDA_R_16BF`). Sealed: any other type is a compile error.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a half-precision input type of gemm_ex",
    label = "gemm_ex takes F16 or Bf16 inputs",
    note = "um-cublas's gemm_ex multiplies F16 or Bf16 matrices into an f32 one"
)]
pub trait HalfElement:
    sealed::Sealed + DeviceCopy + Copy + PartialEq + std::fmt::Debug + 'static
{
    /// cuBLAS's `cudaDataType` of the type.
    #[doc(hidden)]
    const DATA_TYPE: c_int;
    /// The number nearest `x` (see [`F16::from_f32`], [`Bf16::from_f32`]).
    fn from_f32(x: f32) -> Self;
    /// Its value as an `f32` (exact).
    fn to_f32(self) -> f32;
}

impl sealed::Sealed for F16 {}
impl sealed::Sealed for Bf16 {}
impl HalfElement for F16 {
    const DATA_TYPE: c_int = sys::R_16F;
    fn from_f32(x: f32) -> F16 {
        F16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        F16::to_f32(self)
    }
}
impl HalfElement for Bf16 {
    const DATA_TYPE: c_int = sys::R_16BF;
    fn from_f32(x: f32) -> Bf16 {
        Bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        Bf16::to_f32(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(x: f32) -> u16 {
        F16::from_f32(x).to_bits()
    }

    fn b(x: f32) -> u16 {
        Bf16::from_f32(x).to_bits()
    }

    /// 2^e, exact.
    fn pow2(e: i32) -> f32 {
        2f32.powi(e)
    }

    #[test]
    fn f16_from_f32_gives_the_known_bit_patterns() {
        assert_eq!(h(1.0), 0x3c00);
        assert_eq!(h(-2.0), 0xc000);
        assert_eq!(h(0.0), 0x0000);
        assert_eq!(h(-0.0), 0x8000);
        assert_eq!(h(65504.0), 0x7bff);
        assert_eq!(h(1.0 / 3.0), 0x3555);
        // The largest finite, and the tie above it (to even: infinity).
        assert_eq!(h(65519.0), 0x7bff);
        assert_eq!(h(65520.0), 0x7c00);
        assert_eq!(h(1e10), 0x7c00);
        assert_eq!(h(-1e10), 0xfc00);
        assert_eq!(h(f32::INFINITY), 0x7c00);
        assert_eq!(h(f32::NEG_INFINITY), 0xfc00);
        // Subnormals: 2^-24 the smallest, 2^-14 the smallest normal, 1023 * 2^-24 the largest
        // subnormal.
        assert_eq!(h(pow2(-24)), 0x0001);
        assert_eq!(h(pow2(-14)), 0x0400);
        assert_eq!(h(1023.0 * pow2(-24)), 0x03ff);
        assert_eq!(h(-3.0 * pow2(-24)), 0x8003);
        // Ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
        assert_eq!(h(1.0 + pow2(-11)), 0x3c00);
        assert_eq!(h(1.0 + 3.0 * pow2(-11)), 0x3c02);
        assert_eq!(h(1.0 + pow2(-11) + pow2(-20)), 0x3c01);
        // Subnormal ties: 2^-25 to 0, 3 * 2^-25 to 2 * 2^-24, 1.5 * 2^-25 up to 2^-24.
        assert_eq!(h(pow2(-25)), 0x0000);
        assert_eq!(h(3.0 * pow2(-25)), 0x0002);
        assert_eq!(h(1.5 * pow2(-25)), 0x0001);
        assert_eq!(h(pow2(-26)), 0x0000);
        // The largest subnormal rounds up into the smallest normal.
        assert_eq!(h(1023.5 * pow2(-24)), 0x0400);
        // f32's subnormals are far below binary16's.
        assert_eq!(h(f32::from_bits(1)), 0x0000);
        assert_eq!(h(-f32::from_bits(1)), 0x8000);
    }

    #[test]
    fn f16_keeps_nan_a_nan() {
        for bits in [0x7fc0_0000, 0x7f80_0001, 0xff80_0001, 0x7fff_ffff] {
            let x = F16::from_f32(f32::from_bits(bits));
            assert_eq!(x.to_bits() & 0x7c00, 0x7c00, "{bits:#x}");
            assert_ne!(x.to_bits() & 0x03ff, 0, "{bits:#x}");
            assert!(x.to_f32().is_nan());
        }
    }

    #[test]
    fn f16_to_f32_is_exact_and_every_pattern_comes_back() {
        assert_eq!(F16::from_bits(0x3c00).to_f32(), 1.0);
        assert_eq!(F16::from_bits(0x7bff).to_f32(), 65504.0);
        assert_eq!(F16::from_bits(0x3555).to_f32(), 1365.0 / 4096.0);
        assert_eq!(F16::from_bits(0x0001).to_f32(), pow2(-24));
        assert_eq!(F16::from_bits(0x83ff).to_f32(), -1023.0 * pow2(-24));
        assert_eq!(F16::from_bits(0x0400).to_f32(), pow2(-14));
        assert_eq!(F16::from_bits(0x8000).to_f32().to_bits(), 0x8000_0000);
        assert_eq!(F16::from_bits(0xfc00).to_f32(), f32::NEG_INFINITY);
        for bits in 0..=u16::MAX {
            let x = F16::from_bits(bits).to_f32();
            if x.is_nan() {
                assert_eq!(bits & 0x7c00, 0x7c00, "{bits:#x}");
                assert!(F16::from_f32(x).to_f32().is_nan());
            } else {
                assert_eq!(h(x), bits, "{bits:#x} -> {x}");
            }
        }
    }

    #[test]
    fn bf16_from_f32_gives_the_known_bit_patterns() {
        assert_eq!(b(1.0), 0x3f80);
        assert_eq!(b(-2.0), 0xc000);
        assert_eq!(b(-0.0), 0x8000);
        assert_eq!(b(f32::INFINITY), 0x7f80);
        assert_eq!(b(f32::NEG_INFINITY), 0xff80);
        // Ties to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7.
        assert_eq!(b(1.0 + pow2(-8)), 0x3f80);
        assert_eq!(b(1.0 + 3.0 * pow2(-8)), 0x3f82);
        assert_eq!(b(1.0 + pow2(-8) + pow2(-20)), 0x3f81);
        // The largest finite bfloat16 stays; f32::MAX lies beyond its tie: infinity.
        assert_eq!(b(f32::from_bits(0x7f7f_0000)), 0x7f7f);
        assert_eq!(b(f32::MAX), 0x7f80);
        assert_eq!(b(f32::MIN), 0xff80);
        // Subnormals round like the rest: the tie 0x8000 to even.
        assert_eq!(b(f32::from_bits(0x0001_0000)), 0x0001);
        assert_eq!(b(f32::from_bits(0x0000_8000)), 0x0000);
        assert_eq!(b(f32::from_bits(0x0001_8000)), 0x0002);
        assert_eq!(b(f32::from_bits(0x0000_8001)), 0x0001);
    }

    #[test]
    fn bf16_keeps_nan_a_nan_and_every_pattern_comes_back() {
        for bits in [0x7fc0_0000, 0x7f80_0001, 0xff80_0001, 0x7fff_ffff] {
            let x = Bf16::from_f32(f32::from_bits(bits));
            assert!(x.to_f32().is_nan(), "{bits:#x}");
        }
        assert_eq!(Bf16::from_bits(0x3f80).to_f32(), 1.0);
        assert_eq!(
            Bf16::from_bits(0x0001).to_f32(),
            f32::from_bits(0x0001_0000)
        );
        for bits in 0..=u16::MAX {
            let x = Bf16::from_bits(bits).to_f32();
            if x.is_nan() {
                assert!(Bf16::from_f32(x).to_f32().is_nan());
            } else {
                assert_eq!(b(x), bits, "{bits:#x} -> {x}");
            }
        }
    }

    #[test]
    fn half_types_name_their_cuda_data_types() {
        assert_eq!(<F16 as HalfElement>::DATA_TYPE, 2);
        assert_eq!(<Bf16 as HalfElement>::DATA_TYPE, 14);
        assert_eq!(std::mem::size_of::<F16>(), 2);
        assert_eq!(std::mem::size_of::<Bf16>(), 2);
    }
}
