//! Compiles `kernels/*.cu` with nvcc through um-build's checked compile (no shipped PTX: this
//! crate is built only inside the repository, where `scripts/setup.sh` installs nvcc).

fn main() {
    um_build::Kernels::new("kernels").build_or_exit();
}
