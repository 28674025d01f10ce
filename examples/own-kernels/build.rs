//! Compiles `kernels/*.cu` and generates their launchers: the whole of a user's build script.
//! `build_or_exit` prints a failure as um-build's message (file, line, kernel, parameter, what
//! to change), with no panic around it, and fails the build.

fn main() {
    um_build::Kernels::new("kernels")
        .arch("compute_75")
        .build_or_exit();
}
