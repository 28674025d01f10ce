//! # um-kernels: the CUDA kernels of `um`, embedded as PTX
//!
//! `build.rs` compiles every `kernels-ptx/*.cu` of the workspace with nvcc and embeds the PTX
//! here as `&'static str` constants (`RUN_TASK_PTX`, `STREAMS_PTX`, `TESTING_PTX`, ...), so a
//! program that uses `um` ships its kernels inside its binary. Load one with
//! [`um_core::Context::load_ptx`], once per context.

/// The embedded PTX, one constant per `kernels-ptx/*.cu`.
pub mod ptx {
    include!(concat!(env!("OUT_DIR"), "/ptx.rs"));
}

pub use ptx::{ALL_PTX, PTX_ARCH};

#[cfg(test)]
mod tests {
    use super::ptx;

    #[test]
    fn every_module_is_embedded_with_its_entries() {
        let names: Vec<&str> = ptx::ALL_PTX.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["run_task", "streams", "testing"]);
        for (file, entries) in [
            (ptx::RUN_TASK_PTX, &["transform", "convert"][..]),
            (ptx::STREAMS_PTX, &["kernel"][..]),
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
