//! # um-test-kernels: the kernels of `um`'s own tests, examples and benchmarks
//!
//! Not published, and not part of `um`'s API: the kernels that show a path of `um` (a spin that
//! holds a stream, a kernel with launch bounds, an `unsafe` launcher of an indexed scatter, ...)
//! or serve one example (`mlp`, `data_parallel`), and the CPU references the tests and examples
//! check results against. `build.rs` hands `kernels/` to um-build, which compiles every `.cu`
//! file with nvcc, checks each declaration against its PTX, and generates a module per file with
//! a launcher per kernel (`kernels/README.md`). The product's kernels are `um-kernels`'s.

um_core::include_kernels!();

pub mod reference;
