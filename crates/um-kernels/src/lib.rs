//! # um-kernels: the CUDA kernels of `um`, embedded as PTX, with safe typed launchers
//!
//! `build.rs` hands `kernels/` (the repository's `kernels-ptx/`) to
//! [`um-build`](https://docs.rs/um-build), which compiles every `.cu` file with nvcc, checks
//! each declaration against its PTX, and generates a module per file with a launcher per
//! kernel, for example [`run_task::transform`]. Where no nvcc is found (docs.rs, or a machine
//! without a CUDA toolkit), it uses the PTX this package ships in `ptx/` instead, nvcc 13.0's
//! output of the same files, and checks the declarations against that: a crate that uses these
//! kernels, and has none of its own, builds without nvcc.
//!
//! Most users reach this crate as `um::kernels`, through the `um-cuda` package.
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
//! Every kernel here is declared `UM_SAFE_KERNEL` and keeps the contract of
//! [`docs/kernels.md`](https://github.com/um-rs/um/blob/main/docs/kernels.md), so every launcher is safe: buffers are `&Managed<[T], StreamOwned<'s>, M>`
//! where the kernel reads (`const T *`) and `&mut` where it writes, each of any storage `M`
//! (unified, coherent or mirrored, mixed freely); the count `n` comes from the buffers; the stream is the
//! one the buffers belong to; `*_with` takes a one-dimensional
//! [`Linear`](um_core::Linear) launch, under which no two threads share an index. Modules and
//! kernels are loaded once per context.

um_core::include_kernels!();

/// The embedded PTX under the names of `um` 0.1 (`run_task.cu` -> `RUN_TASK_PTX`).
pub mod ptx {
    /// PTX of `kernels/run_task.cu`.
    pub use super::run_task::PTX as RUN_TASK_PTX;
    /// PTX of `kernels/streams.cu`.
    pub use super::streams::PTX as STREAMS_PTX;
    pub use super::{ALL_PTX, PTX_ARCH};
}

#[cfg(test)]
mod tests {
    use super::ptx;

    #[test]
    fn every_module_is_embedded_with_its_entries() {
        let names: Vec<&str> = ptx::ALL_PTX.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["run_task", "streams"]);
        for (file, entries) in [
            (ptx::RUN_TASK_PTX, &["transform", "convert"][..]),
            (ptx::STREAMS_PTX, &["kernel", "empty", "stamp"][..]),
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
