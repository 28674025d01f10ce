//! um's own kernels are um-build's first user: every `kernels/*.cu` (a link to the workspace's
//! `kernels-ptx/`, whose files `cargo package` copies) becomes a module of typed launchers
//! (`um_kernels::run_task::transform`, ...), checked against its PTX.
//!
//! With nvcc, the kernels are compiled here. Without it (docs.rs, or a user's machine with no
//! CUDA toolkit, which a crate with no kernels of its own does not need), the PTX shipped in
//! `ptx/` is used: nvcc 13.0's output through um-build, which `tests/shipped_ptx.rs` checks is
//! current (docs/building.md, "Prebuilt PTX").

fn main() {
    um_build::Kernels::new("kernels")
        .prebuilt_ptx("ptx")
        .build_or_exit();
}
