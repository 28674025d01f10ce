//! The PTX that `um-kernels` ships in `ptx/` (used when its build finds no nvcc: docs.rs, and
//! users without a CUDA toolkit) must be what um-build's own compile makes of `kernels/*.cu`
//! with nvcc 13.0.x, the compile whose `static_assert`s check every declaration. This test
//! makes it again and compares; `UM_BLESS_PTX=1` writes it instead
//! (`bash scripts/update-ptx.sh`).
//!
//! Needs nvcc 13.0.x, as found by um-build (`$UM_LOCAL_NVCC` from `.cargo/config.toml` here).
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// The lines that nvcc's output is compared on: all but nvcc's `//` header, which names the
/// exact build of nvcc (13.0.88 or another 13.0.x). um-build's first line, the hash of the
/// inputs (`// um-build inputs ...`), is compared too.
fn code(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter(|l| !l.starts_with("//") || l.starts_with("// um-build inputs "))
        .collect()
}

fn ptx_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".ptx"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn the_shipped_ptx_is_what_nvcc_13_0_makes_of_the_kernels_now() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let shipped = manifest.join("ptx");
    if let Ok(arch) = std::env::var("UM_CUDA_ARCH") {
        panic!("UM_CUDA_ARCH={arch} is set: unset it to check the shipped PTX (compute_75)");
    }
    let out: PathBuf =
        std::env::temp_dir().join(format!("um-kernels-shipped-ptx-{}", std::process::id()));
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).unwrap();
    // No prebuilt_ptx: this build must find nvcc, and compiles through the check wrapper.
    let built = um_build::Kernels::new(manifest.join("kernels"))
        .out_dir(&out)
        .build()
        .unwrap_or_else(|e| panic!("um-build with nvcc failed:\n{e}"));
    assert!(!built.sources.is_empty());
    let fresh_dir = out.join("um-ptx");
    let fresh = ptx_files(&fresh_dir);
    let first = fs::read_to_string(fresh_dir.join(&fresh[0])).unwrap();
    assert!(
        first.contains("Cuda compilation tools, release 13.0,"),
        "the shipped PTX is nvcc 13.0.x's, and this nvcc is another:\n{}\nset NVCC to a 13.0 nvcc \
         (scripts/setup.sh installs one into .tools/ when no toolkit is found)",
        first.lines().take(6).collect::<Vec<_>>().join("\n")
    );
    if std::env::var_os("UM_BLESS_PTX").is_some() {
        for old in ptx_files(&shipped) {
            fs::remove_file(shipped.join(old)).unwrap();
        }
        fs::create_dir_all(&shipped).unwrap();
        for name in &fresh {
            fs::copy(fresh_dir.join(name), shipped.join(name)).unwrap();
        }
        eprintln!("wrote {} files to {}", fresh.len(), shipped.display());
    }
    assert_eq!(
        ptx_files(&shipped),
        fresh,
        "ptx/ must hold one file per kernels/*.cu: run `bash scripts/update-ptx.sh`"
    );
    for name in &fresh {
        let now = fs::read_to_string(fresh_dir.join(name)).unwrap();
        let then = fs::read_to_string(shipped.join(name)).unwrap();
        assert!(
            now.starts_with("// um-build inputs "),
            "um-build wrote {name} without its inputs line"
        );
        assert!(
            code(&now) == code(&then),
            "ptx/{name} is stale: nvcc 13.0 makes other PTX of kernels/ now. Run \
             `bash scripts/update-ptx.sh` and commit ptx/"
        );
    }
    let _ = fs::remove_dir_all(&out);
}
