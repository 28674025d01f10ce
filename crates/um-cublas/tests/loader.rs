//! Loading cuBLAS: the search order and the error a missing library gives. No GPU needed; the
//! test that loads a real cuBLAS needs one installed (it is `#[ignore]`d here and runs in the
//! GPU bundle, whose machine has the toolkit).
#![allow(clippy::expect_used)] // a test stops at the first surprise

use std::process::Command;

use um_cublas::{Cublas, ENV_VAR, Error};

/// Set in the child process of `a_missing_library_is_a_clear_error_in_a_fresh_process`.
const CHILD: &str = "UM_CUBLAS_LOADER_CHILD";

#[test]
fn a_missing_library_is_a_clear_error_in_a_fresh_process() {
    if std::env::var_os(CHILD).is_some() {
        // The child: UM_CUBLAS_LIB names nothing, and nothing else may be tried.
        match Cublas::load() {
            Err(e @ Error::NotFound { .. }) => println!("CHILD-ERROR: {e}"),
            other => panic!("expected Error::NotFound, got {other:?}"),
        }
        return;
    }
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "a_missing_library_is_a_clear_error_in_a_fresh_process",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env(ENV_VAR, "/nonexistent/libcublas.so.13")
        .output()
        .expect("run the child");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("CHILD-ERROR: "))
        .unwrap_or_else(|| panic!("no error line in {text}"));
    println!("{line}");
    // What was tried (the variable, and nothing else), why, and what to install.
    assert!(
        line.contains("UM_CUBLAS_LIB=/nonexistent/libcublas.so.13: "),
        "{line}"
    );
    assert!(
        !line.contains("libcublas.so;"),
        "fell back past UM_CUBLAS_LIB: {line}"
    );
    assert!(line.contains("CUDA toolkit"), "{line}");
    assert!(line.contains("nvidia-cublas"), "{line}");
    assert!(line.contains("LD_LIBRARY_PATH"), "{line}");
}

#[test]
fn load_from_a_bad_path_names_it() {
    // SAFETY: nothing exists at the path, so nothing is loaded.
    let got = unsafe { Cublas::load_from("/nonexistent/libcublas.so.13") };
    let Err(Error::NotFound { tried }) = got else {
        panic!("expected Error::NotFound, got {got:?}");
    };
    assert_eq!(tried.len(), 1);
    assert!(
        tried[0].starts_with("/nonexistent/libcublas.so.13: "),
        "{tried:?}"
    );
}

#[test]
fn a_library_without_the_entry_points_is_refused() {
    // libc loads, but has no cublasCreate_v2: the reason names the missing entry point.
    // SAFETY: libc's initialisers have run already (it is this process's libc); no cuBLAS
    // function is called because none is found.
    let got = unsafe { Cublas::load_from("libc.so.6") };
    let Err(Error::NotFound { tried }) = got else {
        panic!("expected Error::NotFound, got {got:?}");
    };
    assert!(
        tried[0].contains("no entry point cublasCreate_v2"),
        "{tried:?}"
    );
}

#[test]
#[ignore = "needs cuBLAS installed (UM_CUBLAS_LIB, or the CUDA toolkit's)"]
fn the_installed_library_loads_with_every_entry_point() {
    let lib = Cublas::load().expect("cuBLAS loads");
    let (major, minor, patch) = lib.version();
    println!(
        "cuBLAS {major}.{minor}.{patch} from {}",
        lib.path().display()
    );
    assert!(
        major >= 11,
        "cuBLAS {major}.{minor}: older than the v2 API this crate declares"
    );
    assert!(lib.api().status_name.is_some() && lib.api().status_string.is_some());
    // Loaded once per process.
    assert!(std::ptr::eq(lib, Cublas::load().expect("again")));
}
