//! um's own kernels are um-build's first user: every `kernels/*.cu` (a link to the workspace's
//! `kernels-ptx/`, whose files `cargo package` copies) becomes a module of typed launchers
//! (`um_kernels::run_task::transform`, ...), checked against its PTX.
//!
//! With nvcc, the kernels are compiled here. Without it (docs.rs, or a user's machine with no
//! CUDA toolkit, which a crate with no kernels of its own does not need), the PTX shipped in
//! `ptx/` is used: nvcc 13.0's output through um-build, which `tests/shipped_ptx.rs` checks is
//! current (docs/building.md, "Prebuilt PTX"), and whose first line um-build checks against the
//! hash of the current `.cu` file, `um.cuh`, architecture and flags.

fn main() {
    let kernels = um_build::Kernels::new("kernels");
    // SAFETY: `ptx/` holds what um-build wrote with nvcc 13.0 into `$OUT_DIR/um-ptx/` from these
    // `kernels/*.cu`, this um-build's `um.cuh`, compute_75 and no flags
    // (`scripts/update-ptx.sh`); `tests/shipped_ptx.rs` builds `kernels/` again with nvcc and
    // fails unless every shipped file is that build's, its inputs line included.
    let kernels = unsafe { kernels.prebuilt_ptx("ptx") };
    kernels.build_or_exit();
}
