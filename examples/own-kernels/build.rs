//! Compiles `kernels/*.cu` and generates their launchers: the whole of a user's build script.
// A build script fails by panicking; `um_build::Error`'s Debug is its readable message (file,
// line, kernel, parameter, what to change), so `unwrap` shows the user exactly that.
#![allow(clippy::unwrap_used)]

fn main() {
    um_build::Kernels::new("kernels")
        .arch("compute_75")
        .build()
        .unwrap();
}
