//! # um-kernels: the CUDA kernels of `um`, embedded as PTX, with safe typed launchers
//!
//! `build.rs` compiles every `kernels-ptx/*.cu` of the workspace with nvcc and embeds the PTX
//! here as `&'static str` constants ([`ptx`]), so a program that uses `um` ships its kernels
//! inside its binary. It also generates one module per file with a safe launcher per kernel,
//! for example [`run_task::transform`]:
//!
//! ```no_run
//! # fn main() -> um_core::Result<()> {
//! use um_core::{Context, Managed, StreamOptions};
//! let ctx = Context::new(0)?;
//! let input = Managed::from_fn(&ctx, 1000, |i| i as f32)?;
//! let data = Managed::<[f32]>::zeroed_slice(&ctx, 1000)?;
//! let data = ctx.with_stream(StreamOptions::new(), |s| {
//!     let (input, mut data) = (input.attach(s)?, data.attach(s)?);
//!     um_kernels::run_task::transform(s, &input, &mut data)?; // data[i] += 2 * input[i]
//!     data.sync()
//! })?;
//! assert_eq!(data[10], 20.0);
//! # Ok(()) }
//! ```
//!
//! Buffers are `&Managed<[T], StreamOwned<'s>, M>` where the kernel reads (`const T *`) and
//! `&mut` where it writes, each of either storage `M` (unified or mirrored, mixed freely); the
//! count `n` comes from the buffers; the stream is the one the buffers belong to. Modules and
//! kernels are loaded once per context.

/// The embedded PTX, one constant per `kernels-ptx/*.cu`.
pub mod ptx {
    include!(concat!(env!("OUT_DIR"), "/ptx.rs"));
}

pub use ptx::{ALL_PTX, PTX_ARCH};

pub mod launch;
pub mod reference;

include!(concat!(env!("OUT_DIR"), "/launchers.rs"));

#[cfg(test)]
#[allow(dead_code)]
mod signature;

#[cfg(test)]
mod tests {
    use super::ptx;

    #[test]
    fn every_module_is_embedded_with_its_entries() {
        let names: Vec<&str> = ptx::ALL_PTX.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["run_task", "streams", "testing"]);
        for (file, entries) in [
            (ptx::RUN_TASK_PTX, &["transform", "convert"][..]),
            (ptx::STREAMS_PTX, &["kernel", "empty", "stamp"][..]),
            (ptx::TESTING_PTX, &["add_scalar", "axpy"][..]),
        ] {
            for entry in entries {
                assert!(
                    file.contains(&format!(".visible .entry {entry}(")),
                    "entry {entry} missing from the PTX"
                );
            }
        }
    }

    #[test]
    fn declarations_parse_into_launcher_signatures() {
        use crate::signature::{ParamKind, Scalar, parse_cuda};
        let src = "// c\nextern \"C\" __global__ void axpy(const float *x, float *y, float a, unsigned int n) {}\n\
                   /* block */ extern \"C\" __global__ void empty() {}";
        let ks = parse_cuda(src).expect("parses");
        assert_eq!(ks.len(), 2);
        assert_eq!(ks[0].name, "axpy");
        assert_eq!(
            ks[0]
                .params
                .iter()
                .map(|p| p.kind.clone())
                .collect::<Vec<_>>(),
            [
                ParamKind::Pointer {
                    elem: Scalar::F32,
                    constant: true
                },
                ParamKind::Pointer {
                    elem: Scalar::F32,
                    constant: false
                },
                ParamKind::Value(Scalar::F32),
                ParamKind::Value(Scalar::U32),
            ]
        );
        assert!(ks[1].params.is_empty());
        assert!(
            parse_cuda("__global__ void k(int n) {}").is_err(),
            "extern \"C\" is required"
        );
        assert!(
            parse_cuda("extern \"C\" __global__ void k(char *c, int n) {}").is_err(),
            "char unsupported"
        );
    }

    #[test]
    fn a_declaration_that_disagrees_with_the_ptx_is_caught() {
        use crate::signature::{check_against_ptx, parse_cuda};
        let ptx = ptx::TESTING_PTX;
        let good = parse_cuda("extern \"C\" __global__ void axpy(const float *x, float *y, float a, unsigned int n) {}").unwrap();
        assert_eq!(check_against_ptx(&good, ptx), Ok(()));
        for wrong in [
            // a parameter missing
            "extern \"C\" __global__ void axpy(const float *x, float *y, unsigned int n) {}",
            // a pointer where the PTX has a float
            "extern \"C\" __global__ void axpy(const float *x, float *y, float *a, unsigned int n) {}",
            // a 64-bit count where the PTX has 32 bits
            "extern \"C\" __global__ void axpy(const float *x, float *y, float a, unsigned long long n) {}",
            // a float where the PTX has an integer
            "extern \"C\" __global__ void axpy(const float *x, float *y, float a, float n) {}",
            // no such entry
            "extern \"C\" __global__ void axpy2(const float *x, float *y, float a, unsigned int n) {}",
        ] {
            let sig = parse_cuda(wrong).unwrap();
            assert!(check_against_ptx(&sig, ptx).is_err(), "not caught: {wrong}");
        }
    }

    #[test]
    fn kernels_with_buffers_need_a_count() {
        use crate::signature::{check_launcher_convention, parse_cuda};
        let k = parse_cuda("extern \"C\" __global__ void k(float *x, int len) {}").unwrap();
        assert!(check_launcher_convention(&k[0]).is_err());
        let k = parse_cuda("extern \"C\" __global__ void k(float *x, float n) {}").unwrap();
        assert!(
            check_launcher_convention(&k[0]).is_err(),
            "n must be an integer"
        );
        let k = parse_cuda("extern \"C\" __global__ void k(float *x, int n) {}").unwrap();
        assert_eq!(check_launcher_convention(&k[0]), Ok(()));
    }

    #[test]
    fn common_len_and_count_refuse_what_the_kernel_cannot_take() {
        use crate::launch::{common_len, count};
        assert_eq!(common_len("k", &[("a", 5), ("b", 5)]), Ok(5));
        assert!(matches!(
            common_len("k", &[("a", 5), ("b", 4)]),
            Err(um_core::Error::LengthMismatch {
                buffer: "b",
                len: 4,
                expected: 5,
                ..
            })
        ));
        assert_eq!(count::<u32>("k", "unsigned int", 7), Ok(7));
        assert!(matches!(
            count::<i32>("k", "int", 1 << 31),
            Err(um_core::Error::LengthTooLarge {
                len: 2_147_483_648,
                ..
            })
        ));
    }

    #[test]
    fn ptx_targets_an_isa_a_cuda_13_0_driver_loads() {
        // nvcc 13.0 emits ISA 9.0; 13.5's ISA 9.5 is refused by a CUDA 13.0 (580) driver.
        for (name, text) in ptx::ALL_PTX {
            let isa = um_core::ptx_isa_version(text).expect("PTX has a .version");
            let (major, minor) = isa.split_once('.').expect("ISA is MAJOR.MINOR");
            let (major, minor): (u32, u32) =
                (major.parse().unwrap_or(99), minor.parse().unwrap_or(99));
            assert!(
                (major, minor) <= (9, 0),
                "{name}.ptx is ISA {isa}, newer than a CUDA 13.0 driver loads"
            );
        }
    }
}
