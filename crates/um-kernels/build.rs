//! um's own kernels are um-build's first user: every `kernels-ptx/*.cu` becomes a module of
//! typed launchers (`um_kernels::run_task::transform`, ...), checked against its PTX.

fn main() {
    if let Err(e) = um_build::Kernels::new("../../kernels-ptx").build() {
        // A build script reports failure by exiting non-zero; cargo shows what it printed.
        eprintln!("\n{e}\n");
        std::process::exit(1);
    }
}
