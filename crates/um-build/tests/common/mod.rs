//! What the test files share: the inputs line that um-build writes first in every PTX file,
//! computed here from its documentation (`Kernels::prebuilt_ptx`), apart from the library's own
//! code, so that a test that compares with it checks the documented format; and a child process
//! of the test binary that finds no nvcc.

use std::ffi::OsString;
use std::path::Path;
use std::process::Command;

/// FNV-1a, 64 bits, of `bytes`, continuing from `h`.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// `// um-build inputs <hex>` for the `.cu` file's text `cu`, the architecture (`compute_NN`)
/// and the flags: the hash of the `.cu` file, `um.cuh`, the architecture, then each flag, each
/// as its length (8 bytes, little-endian) and its bytes.
pub(crate) fn inputs_line(cu: &str, arch: &str, flags: &[&str]) -> String {
    let fields = [cu, um_build::HEADER, arch]
        .into_iter()
        .chain(flags.iter().copied());
    let h = fields.fold(0xcbf2_9ce4_8422_2325, |h, field| {
        fnv1a(
            fnv1a(h, &(field.len() as u64).to_le_bytes()),
            field.as_bytes(),
        )
    });
    format!("// um-build inputs {h:016x}")
}

/// Runs the test `child` of this binary alone, with `var` set to `case`, in a process that finds
/// no nvcc (none of the variables um-build reads for it, no `HOME`, and no `PATH` folder holding
/// one): its stdout, or `None` where nvcc cannot be hidden (`/usr/local/cuda/bin/nvcc` exists).
pub(crate) fn without_nvcc(child: &str, var: &str, case: &str) -> Option<String> {
    with_home(child, var, case, None)
}

/// [`without_nvcc`], with `HOME` set to `home` where given: the one place left where um-build
/// may find an nvcc (`~/.local/share/um-cuda/cuda-13.0/nvidia/cu13/bin/nvcc`).
pub(crate) fn with_home(child: &str, var: &str, case: &str, home: Option<&Path>) -> Option<String> {
    if Path::new("/usr/local/cuda/bin/nvcc").exists() {
        eprintln!("skipped: /usr/local/cuda/bin/nvcc exists, and um-build would find it");
        return None;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path: OsString =
        std::env::join_paths(std::env::split_paths(&path).filter(|d| !d.join("nvcc").exists()))
            .unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(var, case)
        .env_remove("NVCC")
        .env_remove("CUDA_PATH")
        .env_remove("UM_LOCAL_NVCC")
        .env_remove("UM_CUDA_ARCH")
        .env("PATH", path);
    match home {
        Some(home) => cmd.env("HOME", home),
        None => cmd.env_remove("HOME"),
    };
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}

/// What a child said: its line `CASE <what>`.
pub(crate) fn said(stdout: &str) -> &str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("CASE "))
        .unwrap_or_else(|| panic!("the child said nothing:\n{stdout}"))
}
